"""A file's bytes as the text a folder keeps: text decoded directly, documents converted to Markdown by MarkItDown.

The only module that imports ``markitdown`` (inside the function that converts, never at import: it loads an ONNX
model for content sniffing). Text-like files skip it (it is slow): UTF-8 (with or without BOM), UTF-16/32 with a BOM,
else ``charset-normalizer``'s best guess (Windows-1252 when that guess is a single-byte code page and the text reads
as Western text); UTF-8 but for a few bad bytes (a last character cut short by ``head -c`` or a log rotation, at
most one bad sequence per 1,000 bytes) is read as UTF-8 with U+FFFD in their place, and the upload says so;
newlines become ``\\n``; HTML is text too, its markup kept (Letta reads .html/.htm as simple text, so grep finds
``id="main-nav"``). PDF, DOCX, PPTX, XLSX and EPUB go through one
MarkItDown converter, made on first use and kept, with only those converters registered: no plugins, no URLs, no LLM
client, no Azure Document Intelligence, so no conversion reaches the network. Every failure is a
``FileContentError`` that names the file and what to do.
"""

from __future__ import annotations

import codecs
import io
import re
import threading
from dataclasses import dataclass
from typing import Any

from ..base.errors import FileContentError
from .file_views import DOCUMENT_TYPES, extension_of, file_type, is_text_type

# extension -> (format named in messages, the install hint when its converter's library is missing)
_DOCUMENT_FORMATS: dict[str, tuple[str, str]] = {
    ".pdf": ("PDF", "pip install 'tiermem[documents]'"),
    ".docx": ("DOCX", "pip install 'tiermem[documents]'"),
    ".pptx": ("PPTX", "pip install 'markitdown[pptx]'"),
    ".xlsx": ("XLSX", "pip install 'markitdown[xlsx]'"),
    ".epub": ("EPUB", "pip install 'tiermem[documents]'"),
}
_BOMS = (  # longest first: the UTF-32 LE BOM starts with the UTF-16 LE one
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_CONTROL_SHARE = 0.05  # more C0 controls than this (besides tab, newlines, form feed, escape): not text
# the C0 controls but tab, newlines, form feed, vertical tab, escape and backspace (counted by the regex engine)
_CONTROLS = re.compile(r"[\x00-\x07\x0e-\x1a\x1c-\x1f]")
_UPLOAD_HINT = "upload text, Markdown, source code, HTML, PDF or DOCX"
_BAD_BYTES_PER = 1_000  # UTF-8 text with at most one bad byte sequence in this many bytes is read with U+FFFD


@dataclass(frozen=True)
class Parsed:
    """A file's text, its MIME type, what made the text (``text``: decoded, or ``markitdown``), and a note on how it
    was read when the user should know (a few bytes that were not UTF-8, replaced)."""

    text: str
    mime: str
    converter: str
    note: str = ""


def parse_file(name: str, data: bytes, *, max_bytes: int) -> Parsed:
    """The text of the file ``name`` with the bytes ``data``; raises ``FileContentError`` when it is over
    ``max_bytes``, binary, unreadable, a PDF without a text layer, or needs a converter that is not installed."""
    if len(data) > max_bytes:
        raise FileContentError(
            f"{name} is {len(data):,} bytes, over the limit of {max_bytes:,} bytes for one file; split it into smaller "
            "files, or raise the setting file_max_bytes (environment TIERMEM_FILE_MAX_BYTES)."
        )
    ext = extension_of(name)
    if ext in _DOCUMENT_FORMATS:
        return _convert(name, data, ext)
    text, note = _decode(name, data)
    mime = file_type(name)
    return Parsed(text=text, mime=mime if is_text_type(name) else "text/plain", converter="text", note=note)


def _binary(name: str, reason: str) -> FileContentError:
    return FileContentError(f"{name} looks like a binary file ({reason}); {_UPLOAD_HINT}")


def _decode(name: str, data: bytes) -> tuple[str, str]:
    """The text of ``data`` and a note when some of its bytes were replaced ("" otherwise)."""
    text: str | None = None
    note = ""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                text = data[len(bom) :].decode(encoding)
            except UnicodeDecodeError as exc:
                raise _binary(name, f"it starts with a {encoding} byte order mark but is not {encoding}") from exc
            break
    if text is None:
        if b"\x00" in data:
            raise _binary(name, "it contains NUL bytes")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            nearly, nearly_note, surely = _nearly_utf8(data, exc)
            if nearly is not None and surely:
                text, note = nearly, nearly_note
            else:  # charset-normalizer's guess first; UTF-8 with a stray byte if it has none
                text = _guessed(data)
                if text is None:
                    text, note = nearly, nearly_note
            if text is None:
                raise _binary(name, "its bytes are not text in any encoding charset-normalizer knows") from None
    controls = len(_CONTROLS.findall(text))
    if controls and controls > _CONTROL_SHARE * len(text):
        raise _binary(name, f"{controls} of its {len(text)} characters are control characters")
    return text.replace("\r\n", "\n").replace("\r", "\n"), note


def _nearly_utf8(data: bytes, error: UnicodeDecodeError) -> tuple[str | None, str, bool]:
    """``data`` as UTF-8 with its few bad bytes replaced by U+FFFD, when it is UTF-8 but for them (at most one bad
    sequence per ``_BAD_BYTES_PER`` bytes), with a note; (None, "", False) otherwise. The flag: whether that reading
    is sure, to be taken before charset-normalizer's guess: only a last character cut short (``head -c``, a log cut
    while written), or its other non-ASCII characters valid UTF-8. Otherwise it is as likely a single-byte code page
    (Latin-1 accents), which charset-normalizer reads; the UTF-8 reading serves when it finds no encoding (ASCII with
    a stray byte)."""
    if error.reason == "unexpected end of data" and error.end == len(data):  # only the last character is cut
        cut = data[: error.start].decode("utf-8") + "\ufffd"
        return cut, "its last character was cut short; replaced by U+FFFD", True
    text = data.decode("utf-8", errors="replace")
    bad = _replaced(data, text)
    if bad > max(1, len(data) // _BAD_BYTES_PER):
        return None, "", False
    valid = sum(1 for c in text if not c.isascii()) - bad  # non-ASCII characters that were valid UTF-8
    return text, f"{bad} byte sequence(s) that are not UTF-8 replaced by U+FFFD", valid > bad


def _replaced(data: bytes, text: str) -> int:
    """How many U+FFFD decoding put in ``text`` (those written in ``data`` as UTF-8 are not counted)."""
    return text.count("\ufffd") - data.count("\ufffd".encode())


def _guessed(data: bytes) -> str | None:
    """charset-normalizer's best guess at ``data``'s text (Windows-1252 when it reads like Western text), or None."""
    from charset_normalizer import from_bytes

    best = from_bytes(data).best()
    if best is None:
        return None
    text = str(best)
    if len(text) == len(data):  # a single-byte guess, where short Western text is often misread
        text = _western(data) or text
    return text


def _western(data: bytes) -> str | None:
    """``data`` as Windows-1252 (Latin-1's printable superset) when it reads like Western text: it decodes, and
    most of its letters are ASCII (accents here and there). charset-normalizer guesses short French or German text
    as a Baltic or Central European code page; text in Cyrillic or Greek code pages, whose every letter is a high
    byte, keeps charset-normalizer's guess."""
    try:
        text = data.decode("cp1252")
    except UnicodeDecodeError:
        return None
    letters = [c for c in text if c.isalpha()]
    high = sum(1 for c in letters if not c.isascii())
    return text if letters and high <= 0.3 * len(letters) else None


_lock = threading.Lock()
_converter: list[Any] = []  # the one MarkItDown, made on first use


def _markitdown() -> Any:
    with _lock:
        if not _converter:
            from markitdown import MarkItDown
            from markitdown.converters import (
                DocxConverter,
                EpubConverter,
                PdfConverter,
                PptxConverter,
                XlsxConverter,
            )

            converter = MarkItDown(enable_builtins=False, enable_plugins=False)
            kinds: tuple[Any, ...] = (
                DocxConverter,
                PdfConverter,
                PptxConverter,
                XlsxConverter,
                EpubConverter,
            )  # partly unannotated constructors
            for kind in kinds:
                converter.register_converter(kind())
            _converter.append(converter)
        return _converter[0]


def _convert(name: str, data: bytes, ext: str) -> Parsed:
    from markitdown import FileConversionException, MissingDependencyException, StreamInfo

    label, install = _DOCUMENT_FORMATS[ext]
    mime = DOCUMENT_TYPES[ext]
    info = StreamInfo(extension=ext, mimetype=mime, filename=name.rsplit("/", 1)[-1])
    try:
        result = _markitdown().convert_stream(io.BytesIO(data), stream_info=info)
    except MissingDependencyException as exc:
        raise _missing(name, label, install) from exc
    except FileConversionException as exc:
        failures = [attempt.exc_info[1] for attempt in exc.attempts or [] if attempt.exc_info is not None]
        if any(isinstance(failure, MissingDependencyException) for failure in failures):
            raise _missing(name, label, install) from exc
        reason = "; ".join(f"{type(f).__name__}: {f}" for f in failures) or str(exc)
        raise _failed(name, label, reason) from exc
    except Exception as exc:  # the converters' libraries raise anything (zipfile, pdfminer, lxml, ...)
        raise _failed(name, label, f"{type(exc).__name__}: {exc}") from exc
    text = str(result.markdown or "")
    if ext == ".pdf" and not text.strip():
        raise FileContentError(
            f"{name}: the PDF has no text layer; scanned PDFs need OCR, which tiermem does not do. Upload a PDF with "
            "selectable text, or its text as a .txt or .md file."
        )
    return Parsed(text=text, mime=mime, converter="markitdown")


def _missing(name: str, label: str, install: str) -> FileContentError:
    return FileContentError(
        f"{name} is a {label} file, and the converter for {label} files is not installed; install it with: {install}"
    )


def _failed(name: str, label: str, reason: str) -> FileContentError:
    reason = reason.strip()
    ended = reason if reason.endswith((".", "!", "?")) else reason + "."  # "Is this really a PDF?" ends already
    return FileContentError(
        f"{name} could not be read as {label}: {ended} Check that it is a valid "
        f"{label} file, or upload its text as a .txt or .md file."
    )
