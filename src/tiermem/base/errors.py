"""One rooted error tree.

``str(exc)`` of every error here is read by a model (as a tool error) or by a person
(on the CLI), so each message says what was wrong and what to do instead.
"""

from __future__ import annotations

import re


class TiermemError(Exception):
    """Root of every error tiermem raises on purpose.

    ``str(exc)`` is the text a model reads (as a tool error: it names the MCP tools to use instead). ``person``, when
    given, is the same message for someone at the ``tiermem`` command line, naming the command to type instead;
    ``for_person()`` returns it, else ``str(exc)``.
    """

    def __init__(self, *args: object, person: str | None = None) -> None:
        super().__init__(*args)
        self.person = person

    def for_person(self) -> str:
        person = getattr(self, "person", None)  # a subclass may set its own attributes before calling super
        return person if person is not None else str(self)


class ConfigError(TiermemError):
    """A setting is missing, malformed or contradicts another one."""


class ValidationError(TiermemError):
    """An argument from a tool, the CLI or a file is not acceptable."""


class LabelTakenError(ValidationError):
    """A block would take a label another block of the same agent has (a creation, a rename, an attachment); nothing
    was written. ``label`` is the label asked for."""

    def __init__(self, *args: object, label: str = "", person: str | None = None) -> None:
        super().__init__(*args, person=person)
        self.label = label


class NotFoundError(TiermemError):
    """An agent, block, passage or message does not exist."""


class EditError(TiermemError):
    """A block edit was refused (limit, read-only, no match, ...); nothing was written."""


class ConflictError(TiermemError):
    """Another writer changed the same thing and retries were exhausted; nothing was written."""


class AccessError(TiermemError):
    """The caller's bearer token does not cover the agent or operation; nothing was read or written."""


class StoreError(TiermemError):
    """The storage layer failed (disk full, permissions, corrupt table); the message says what to check."""


class StoreReadError(StoreError):
    """Reading the data directory failed (files missing or damaged, no permission); nothing was changed."""


class StoreWriteError(StoreError):
    """Writing to the data directory failed (disk full, read-only, damaged table); nothing was written."""


class StoreBusyError(StoreWriteError):
    """Other writers (replicas on one object store, concurrent calls, an upkeep) kept committing to the same table
    until the write's retries ran out; nothing was written, and the same call is safe to repeat."""


class LeaseLapsedError(StoreError):
    """Work that one replica at a time may do (under a lease object on object storage: ``core.lease``) stopped right
    before a commit because its lease had run out by this process's own clock (no renewal got through in time) or
    was taken over: another replica may be doing the same work. That commit was not made; what earlier commits of
    the same work wrote stays, as after any failure midway, and the call is safe to repeat."""


class PurgeUnfinishedError(StoreError):
    """The purge of forgotten or deleted rows from the store's files did not finish: the rows are already gone from
    every search and listing, older files may still hold them, and the purge stays pending (the next upkeep, or
    ``tiermem optimize``, tries it again). Something was written: never "nothing was written"."""


class KeyUnrecordedError(StoreError):
    """A write with an idempotency key was stored, but recording its result under the key failed (tried again, and
    failed again): a retry with the key may store it a second time. Something was written: never "nothing was
    written"."""


class SchemaError(StoreError):
    """The data directory was written by another schema version or another embedding model."""


class ReembedUnfinishedError(SchemaError):
    """A ``tiermem reembed`` is rebuilding the store's vectors, or was interrupted doing so: its tables may hold
    vectors of two models, so the store is not opened (nor written) until a reembed finishes. ``recorded``: whether
    the store records the model that reembed was switching to (an older tiermem's did not: run it with any model)."""

    def __init__(self, *args: object, recorded: bool = True, person: str | None = None) -> None:
        super().__init__(*args, person=person)
        self.recorded = recorded


class NotOpenError(TiermemError):
    """A part of memory the operation needs (recall and archival) is not open in this process."""


class ShuttingDownError(TiermemError):
    """The server was asked to stop (SIGINT/SIGTERM) before this request started; it was not run."""


class EmbeddingError(TiermemError):
    """The embedding model could not be loaded or failed to embed."""


class ModelLoadInterrupted(EmbeddingError):
    """Preparing the embedding model was stopped with the process (Ctrl-C, SIGTERM): nothing is broken."""


class ModelNotReadyError(EmbeddingError):
    """The embedding model is still loading; callers fall back to full-text search."""


class TokenizerError(TiermemError):
    """Offline tokenizer data is missing or does not match its expected hash."""


class ProviderError(TiermemError):
    """An LLM provider (Anthropic API, MCP sampling) failed."""


class ContextOverflowError(TiermemError):
    """The agent's prompt cannot fit its context window, even with every message summarised."""


class PromptTooLongError(ProviderError, ContextOverflowError):
    """The provider refused a prompt longer than the model's context window ("prompt is too long"); ``tokens`` and
    ``maximum`` are its own counts when its message states them (else 0)."""

    def __init__(self, *args: object, tokens: int = 0, maximum: int = 0) -> None:
        super().__init__(*args)
        self.tokens = tokens
        self.maximum = maximum


class FileContentError(ValidationError):
    """A file given to a folder cannot be kept: binary, unparseable, too large, or its format needs an extra that is
    not installed; the message names the file and the fix, and nothing of it was stored."""


class SecretError(ValidationError):
    """A write would store a credential (an API key, a password, a private key, ...); the message names its kind and
    where it is, never the secret, and nothing was written."""


def without_nothing_written(exc: BaseException) -> str:
    """The first line of ``exc``'s message without its "nothing was written" (true of the one write that failed, and
    read as about a whole plan when some of it stays written: a patch applied only in part says why with this)."""
    first = str(exc).split("\n", 1)[0]
    return re.sub(r"[;,]? *\b[Nn]othing was written\b[^.]*", "", first).replace("..", ".").strip().rstrip(".")
