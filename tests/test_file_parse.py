"""file_parse: bytes to the text a folder keeps, on real files (a DOCX zipped by hand, a PDF written by hand)."""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile

import pytest

from tiermem.base.errors import FileContentError, ValidationError
from tiermem.domain.file_parse import Parsed, parse_file

from .conftest import ROOT

BIG = 10_000_000


def make_pdf(lines: list[str]) -> bytes:
    """A minimal valid PDF (one page, Helvetica, a text layer), with a correct cross-reference table."""
    text = "BT /F1 12 Tf 72 720 Td 14 TL " + " ".join(f"({line}) '" for line in lines) + " ET"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> "
        b"/Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(text), text.encode()),
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n%s\nendobj\n" % (number, body))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def make_docx(paragraphs: list[str]) -> bytes:
    """A minimal valid DOCX: content types, the package relationship and the main document part."""
    body = "".join(f"<w:p><w:r><w:t>{p}</w:t></w:r></w:p>" for p in paragraphs)
    files = {
        "[Content_Types].xml": (
            '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
            '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
            '<Default Extension="xml" ContentType="application/xml"/>'
            '<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.'
            'wordprocessingml.document.main+xml"/></Types>'
        ),
        "_rels/.rels": (
            '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
            '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
            '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
            'officeDocument" Target="word/document.xml"/></Relationships>'
        ),
        "word/document.xml": (
            '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
            '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
            f"<w:body>{body}</w:body></w:document>"
        ),
    }
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return out.getvalue()


def test_text_files_are_decoded_directly() -> None:
    parsed = parse_file("notes/a.md", b"# Title\r\nline two\rline three\n", max_bytes=BIG)
    assert parsed == Parsed(text="# Title\nline two\nline three\n", mime="text/markdown", converter="text")
    assert parse_file("x.py", b"\xef\xbb\xbfprint(1)\n", max_bytes=BIG).text == "print(1)\n"  # BOM dropped
    assert parse_file("x.txt", "h\u00e9llo".encode("utf-16"), max_bytes=BIG).text == "h\u00e9llo"  # BOM'd UTF-16
    assert parse_file("empty.txt", b"", max_bytes=BIG) == Parsed(text="", mime="text/plain", converter="text")


def test_latin1_is_detected_and_unknown_extensions_are_text() -> None:
    data = "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e, d\u00e9j\u00e0 vu, na\u00efve fa\u00e7ade.\n".encode("latin-1") * 3
    parsed = parse_file("menu.txt", data, max_bytes=BIG)
    assert parsed.text.startswith("Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e") and parsed.converter == "text"
    assert parse_file("Makefile", b"all:\n\techo hi\n", max_bytes=BIG) == Parsed(
        "all:\n\techo hi\n", "text/plain", "text"
    )
    assert parse_file("data.weird", b"plain words\n", max_bytes=BIG).mime == "text/plain"


def test_binary_files_are_refused_by_their_bytes() -> None:
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))
    with pytest.raises(FileContentError) as info:
        parse_file("photo.png", png, max_bytes=BIG)
    assert str(info.value) == (
        "photo.png looks like a binary file (it contains NUL bytes); upload text, Markdown, "
        "source code, HTML, PDF or DOCX"
    )
    with pytest.raises(FileContentError, match=r"^blob\.txt looks like a binary file \(.*control characters\)"):
        parse_file("blob.txt", bytes([1, 2, 3, 4, 5, 6, 7, 65]) * 20, max_bytes=BIG)
    assert issubclass(FileContentError, ValidationError)


def test_utf8_with_a_few_bad_bytes_is_read_with_replacement_characters() -> None:
    """A last character cut short (``head -c``, a log rotation) or a stray bad byte in UTF-8 text is read as UTF-8
    with U+FFFD in its place, and says so; text in a single-byte code page is still read in it, and binary data with
    many bad bytes is still refused."""
    full = ("Отчёт о работе: всё прошло хорошо, café — naïve. " * 40 + "Конец").encode()
    cut = parse_file("notes.txt", full[:-1], max_bytes=BIG)
    assert cut.text == full[:-2].decode() + "\ufffd" and "cut short" in cut.note
    stray = parse_file("notes.txt", full[:500] + b"\xff" + full[500:], max_bytes=BIG)
    assert stray.text.count("\ufffd") == 1 and stray.text.replace("\ufffd", "") == full.decode()
    assert stray.note == "1 byte sequence(s) that are not UTF-8 replaced by U+FFFD"
    written = parse_file("notes.txt", "a stored \ufffd stays, déjà vu\n".encode() + b"\xfe", max_bytes=BIG)
    assert written.text.count("\ufffd") == 2 and written.note.startswith("1 byte")  # one was in the file
    assert parse_file("ok.txt", full, max_bytes=BIG).note == ""
    latin = "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e, d\u00e9j\u00e0 vu.\n".encode("latin-1") * 40
    assert parse_file("menu.txt", latin, max_bytes=BIG).text.startswith("Caf\u00e9 cr\u00e8me")  # not U+FFFD
    noisy = bytearray(full)
    for i in range(100, len(noisy), 400):  # one bad byte in 400: too many to be a cut or a stray byte
        noisy[i] = 0xFF
    with pytest.raises(FileContentError, match="looks like a binary file"):
        parse_file("noisy.txt", bytes(noisy) + bytes(range(0x80, 0x100)) * 8, max_bytes=BIG)
    with pytest.raises(FileContentError, match="NUL bytes"):
        parse_file("blob.txt", full[:-1] + b"\x00" * 40, max_bytes=BIG)


def test_up_to_five_percent_of_other_control_characters_is_text() -> None:
    """Tab, newlines, form feed, vertical tab, escape and backspace are text; of the other C0 controls (0x00 aside,
    which is binary at once) a text may hold 5%."""
    kept = ("\t\n\f\v\x1b\x08" * 50 + "plain words").encode()
    assert parse_file("term.log", kept, max_bytes=BIG).text.endswith("plain words")
    for control in ("\x01", "\x07", "\x0e", "\x1a", "\x1c", "\x1f"):
        at_limit = (control * 50 + "a" * 950).encode()
        assert len(parse_file("log.txt", at_limit, max_bytes=BIG).text) == 1000
        over = (control * 51 + "a" * 949).encode()
        with pytest.raises(FileContentError, match=r"\(51 of its 1000 characters are control characters\)"):
            parse_file("log.txt", over, max_bytes=BIG)


def test_too_big_names_the_size_the_limit_and_the_setting() -> None:
    with pytest.raises(FileContentError) as info:
        parse_file("huge.txt", b"x" * 2001, max_bytes=2000)
    message = str(info.value)
    assert message.startswith("huge.txt is 2,001 bytes, over the limit of 2,000 bytes")
    assert "file_max_bytes" in message and "TIERMEM_FILE_MAX_BYTES" in message


def test_html_is_kept_as_text_with_its_markup_as_letta() -> None:
    """Letta registers .html/.htm as simple text (file_types.py) and its parsers decode such files as they are: the
    markup is the file's text, so grep finds an id or a script's call."""
    html = b'<html><body><div id="main-nav">Menu</div><script>var k = loadKey();</script></body></html>\r\n'
    for name in ("site/index.html", "old/page.HTM"):
        parsed = parse_file(name, html, max_bytes=BIG)
        assert (parsed.mime, parsed.converter) == ("text/html", "text")
        assert parsed.text == html.decode().replace("\r\n", "\n")


def test_pdf_text_layer_and_a_pdf_without_one() -> None:
    parsed = parse_file("papers/p.pdf", make_pdf(["Tiered memory for agents", "Second line here"]), max_bytes=BIG)
    assert parsed.mime == "application/pdf" and parsed.converter == "markitdown"
    assert "Tiered memory for agents" in parsed.text and "Second line here" in parsed.text
    with pytest.raises(FileContentError) as info:
        parse_file("scan.pdf", make_pdf([]), max_bytes=BIG)
    assert "no text layer; scanned PDFs need OCR, which tiermem does not do" in str(info.value)
    assert str(info.value).startswith("scan.pdf")


def test_docx_becomes_markdown() -> None:
    parsed = parse_file("Report.DOCX", make_docx(["First paragraph.", "Second one."]), max_bytes=BIG)
    assert parsed.converter == "markitdown"
    assert parsed.mime == "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    assert "First paragraph." in parsed.text and "Second one." in parsed.text


def test_a_broken_document_names_the_file_the_format_and_the_reason() -> None:
    with pytest.raises(FileContentError) as info:
        parse_file("bad.docx", b"this is not a zip file at all", max_bytes=BIG)
    message = str(info.value)
    assert message.startswith("bad.docx could not be read as DOCX: ") and "zip" in message.lower()
    with pytest.raises(FileContentError, match=r"^broken\.pdf could not be read as PDF: "):
        parse_file("broken.pdf", b"%PDF-1.4\nnonsense", max_bytes=BIG)
    with pytest.raises(FileContentError) as info:  # pdfminer's reason ends with "?": no "?." after it
        parse_file("x.pdf", b"not a pdf", max_bytes=BIG)
    message = str(info.value)
    assert "?." not in message and ".." not in message and "? Check that it is a valid PDF file" in message


def test_a_missing_converter_says_what_to_install() -> None:
    """python-pptx is not part of the documents extra: markitdown's missing-dependency error becomes ours."""
    try:
        import pptx  # noqa: F401

        pytest.skip("python-pptx is installed")
    except ImportError:
        pass
    deck = io.BytesIO()
    with zipfile.ZipFile(deck, "w") as archive:
        archive.writestr("ppt/presentation.xml", "<p:presentation/>")
    with pytest.raises(FileContentError) as info:
        parse_file("deck.pptx", deck.getvalue(), max_bytes=BIG)
    assert str(info.value) == (
        "deck.pptx is a PPTX file, and the converter for PPTX files is not installed; "
        "install it with: pip install 'markitdown[pptx]'"
    )


def test_importing_the_module_does_not_import_markitdown() -> None:
    code = "import sys, tiermem.domain.file_parse; print('markitdown' in sys.modules, 'magika' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False False"
