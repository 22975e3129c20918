"""Settings: packaged defaults < TOML config file < TIERMEM_* environment < command-line flags.

Nothing is read at import time; :func:`load_settings` reads when the CLI calls it.

Why this module is long: the settings model is one class of some 80 fields, each with the comment the settings
reference is generated from (``cli/docgen.py``); the layers that fill it and the naming of a bad value's source (the
flag, the variable or the file, which only these layers know) belong with it.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, get_origin

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from .errors import ConfigError, TiermemError

Transport = Literal["stdio", "sse", "http"]
ENV_PREFIX = "TIERMEM_"
# The settings that are a path: set to nothing in the environment (`TIERMEM_DATA_DIR=`, what a script or a host's
# config leaves when the value it meant is unset) they are unset, not the current directory; empty in a config file
# they are refused (flags: cli/main.py refuses an empty one).
PATH_SETTINGS = ("config", "data_dir", "auth_tokens_file", "sync")
# The settings that, set to nothing, would be read as something else than unset: the path settings, and `uri` (an
# empty one is no store: factory.py tells object storage from a local directory by `uri is None`), `host` (an
# empty one binds every interface) and `http_token` (an empty one is no token: `TIERMEM_HTTP_TOKEN=${TOKEN}` in a
# host's config with TOKEN unset stopped every command). Set to nothing in the environment they are unset; empty in a
# config file or a flag they are refused.
EMPTY_IS_UNSET = (*PATH_SETTINGS, "uri", "host", "http_token")
# The flag of a setting, where it is not --<setting with dashes>
FLAGS = {"auth_tokens_file": "--tokens-file", "http_token": "--token"}


def split_list(text: str) -> list[str]:
    """``a, b, c`` as a list; a JSON array (``["a", "b"]``, what pydantic-settings takes for other lists) is
    refused rather than read as the items ``["a"`` and ``"b"]``. An item with a quote, with one bracket of a pair, or
    in brackets without a colon (an IPv6 host, ``[::1]:8765``, has both brackets and colons) gives it away."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    for part in parts:
        bracketed = part.startswith("[") and ":" not in part
        if any(q in part for q in "\"'") or ("[" in part) != ("]" in part) or bracketed:
            plain = ", ".join(p.strip("[]\"' ") for p in parts)
            raise ValueError(
                f"{text!r} is not a comma-separated list: write the items without brackets or quotes, "
                f"separated by commas ({plain})"
            )
    return parts


def comma_separated(field: FieldInfo) -> bool:
    """Whether a list setting is read from one string as ``a, b, c`` (``split_list``), not as JSON: it carries
    pydantic-settings' marker, the class ``NoDecode`` itself."""
    return NoDecode in field.metadata


class BlockSpec(BaseModel):
    # An unknown key is refused: in TOML, a setting written after a [[default_blocks]] table lands inside it
    model_config = ConfigDict(extra="forbid")

    label: str
    value: str = ""
    description: str = ""
    limit: int = Field(default=5000, gt=0)
    read_only: bool = False
    metadata: dict[str, str] = Field(default_factory=dict)


# The keys of a bearer token's entry (``auth_tokens``, a tokens file's ``[[tokens]]``).
TOKEN_KEYS = ("name", "token", "agents")


def token_entry_problem(entry: object) -> str | None:
    """What is wrong with the keys of a bearer token's entry, or None: a key other than ``TOKEN_KEYS`` (a misspelt
    ``agent`` must not leave the token with no agents named), or no ``agents`` at all: a token names the agents it
    may use (``["*"]`` for every agent, never by default). The token itself is checked by ``netguard.make_tokens``."""
    import difflib

    if not isinstance(entry, dict):
        return "it is not a table with `name`, `token` and `agents`"
    for key in entry:
        if key not in TOKEN_KEYS:
            close = difflib.get_close_matches(str(key), TOKEN_KEYS, n=1)
            hint = f" (did you mean `{close[0]}`?)" if close else ""
            return f"`{key}` is not a key of a token{hint}; a token has `name`, `token` and `agents`"
    if "agents" not in entry:
        return 'it has no `agents`: name the agents the token may use (agents = ["work"]), or ["*"] for every agent'
    return None


# The message of `core_backend = "lancedb"` (core.migrate.check_backend says the same to a caller that skips settings)
LANCEDB_RETIRED = (
    "'lancedb' is no longer offered: core state lives in SQLite for a local data directory and in one object per "
    "block on object storage, and core tables an older tiermem kept in LanceDB are moved there on first open; set "
    "core_backend = 'auto' (or leave it out)"
)


class Settings(BaseSettings):
    # allow_inf_nan: "inf" or "nan" is no number of seconds or score (and `tiermem stats --json` would print it)
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", allow_inf_nan=False)

    # The TOML file read (--config, TIERMEM_CONFIG, else <XDG_CONFIG_HOME>/tiermem/config.toml when it exists).
    config: Path | None = None
    data_dir: Path | None = None
    # A LanceDB URI overriding data_dir for the store, e.g. "s3://bucket/tiermem".
    uri: str | None = None
    storage_options: dict[str, str] = Field(default_factory=dict)
    # Not a setting: a bulk command's (object_deadlines.BULK_COMMANDS) longer deadlines, for LanceDB's store only
    _bulk: bool = PrivateAttr(default=False)
    # Where agents, blocks, history and idempotency keys live: "auto" = SQLite (<data_dir>/core.sqlite3)
    # for a local data directory, one object per block under the uri for object storage; "sqlite" or "object"
    # force one ("lancedb", the layout of older versions, is refused with the way out: LANCEDB_RETIRED).
    core_backend: Literal["auto", "sqlite", "object"] = "auto"
    agent: str = "default"
    tools: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["default"])
    transport: Transport = "stdio"
    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    # None: the model the data directory's vectors were built with, "default" for a new one (factory.embedding_model)
    embedding_model: str | None = None
    # Let a fastembed model named by embedding_model (not "default" or "hashing", which need nothing) be downloaded
    # into <data_dir>/models on first use; false keeps tiermem offline, and such a model must be there already.
    allow_download: bool = False
    # How long a search or a write waits for the embedding model (seconds) before it goes on without it.
    embedding_wait_seconds: float = Field(default=10.0, ge=0, le=600)
    max_content_chars: int = Field(default=100_000, gt=0)
    search_token_budget: int = Field(default=4000, gt=0)
    optimize_every: int = Field(default=200, ge=0)
    # On object storage, also after this many commits of one process (0: by rows only).
    optimize_every_commits: int = Field(default=20, ge=0)
    # On object storage, how long (ms) a check for a table's newest version holds (0: every read checks).
    object_read_staleness_ms: int = Field(default=250, ge=0, le=60_000)
    # How long an upkeep keeps table versions it has superseded (seconds; 0 = 600 for a local directory, 10 on
    # object storage, where every operation lists the kept versions).
    version_retention_seconds: int = Field(default=0, ge=0)
    # LanceDB's in-memory caches (MiB). Its defaults are unbounded in practice (GiBs): the metadata cache keeps a
    # manifest per table version, so a long-running server grows with every write (bench load). The index cache
    # holds the vector and full-text indexes searches use; below their size every search reloads them.
    metadata_cache_mb: int = Field(default=8, ge=1, le=65536)
    index_cache_mb: int = Field(default=512, ge=1, le=65536)
    # After this many writes, the next background optimize reopens the tables on a new LanceDB session, so the index
    # cache's entries of superseded versions are freed (LanceDB cannot evict them); 0 never renews.
    session_renew_writes: int = Field(default=200, ge=0)
    # glibc malloc arenas of `tiermem serve` / `tiermem ui` (0: glibc's default, 8 per core). Fewer arenas keep a long-running
    # server's heap from creeping up under writes; see memtrim.py.
    malloc_arenas: int = Field(default=2, ge=0, le=64)
    # `tiermem serve` / `tiermem ui`: allocations of this many KiB or more get their own mappings, returned to the
    # system when freed (0: glibc's default, a threshold that rises with use and leaves holes in the heap); see memtrim.py.
    malloc_mmap_threshold_kb: int = Field(default=128, ge=0, le=32768)
    # `tiermem serve` / `tiermem ui`: every this many seconds, hand freed heap memory back to the system if resident
    # memory grew by 4 MiB since the last time (0 disables); see memtrim.HeapKeeper.
    heap_trim_seconds: float = Field(default=1.0, ge=0, le=3600)
    # While a client subscribes to a resource, poll the store this often (seconds) for edits made by other
    # processes (replicas on one bucket) and notify; 0 disables. Local edits are notified at once regardless. At most a
    # day (86400), as tools_watch_seconds: a longer wait is no poll (and overflows the watch's timer).
    watch_seconds: float = Field(default=2.0, ge=0, le=86400)
    # On object storage, how often a server checks (one listing) whether another replica attached the agent's first
    # folder or detached its last, for its clients that subscribe to nothing (the file tools come or go); 0 disables.
    tools_watch_seconds: float = Field(default=5.0, ge=0, le=86400)
    system: str = ""
    # The most characters of server instructions (guidance + core memory) sent to a host; hosts known to cut them
    # shorter get less (Claude Code: 2,048). Core memory that does not fit is summarised with where to read it.
    instructions_max_chars: int = Field(default=20_000, ge=400, le=1_000_000)
    # Folders and files: the largest file an upload or sync takes (bytes, before parsing), and files per folder.
    file_max_bytes: int = Field(default=25 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024)
    folder_max_files: int = Field(default=20_000, ge=1, le=1_000_000)
    # Hooks (`tiermem setup claude-code`): each prompt gets the stored memories (archival passages, turns of other
    # sessions) whose relevance reaches the threshold, at most auto_recall_limit of them in auto_recall_max_chars.
    auto_recall: bool = True
    auto_recall_threshold: float = Field(default=0.075, ge=0.0, le=1.0)
    auto_recall_limit: int = Field(default=5, ge=1, le=50)
    auto_recall_max_chars: int = Field(default=4000, ge=500, le=9000)
    # Credentials (API keys, tokens, private keys, passwords) are redacted from what enters memory on its own (hook
    # turns, imports) and refused in a model's writes (block edits, archival inserts, conversation_log); "off" keeps
    # text as given.
    secret_scan: Literal["on", "off"] = "on"
    # Which memories auto-recall brings: "project", those of the prompt's project (its repository, else directory)
    # and those of none (shared); "all", every project's.
    recall_scope: Literal["project", "all"] = "project"
    # Use: a search hit, an opened block or file and an auto-recalled memory each count as a use of it. The use score
    # is the uses decayed with this half-life (days); hot at use_hot_score or more, warm at use_warm_score, else cold.
    # Counts are batched in the process and flushed every use_flush_seconds (and when it stops).
    use_half_life_days: float = Field(default=14.0, gt=0, le=3650)
    use_hot_score: float = Field(default=2.5, gt=0)
    use_warm_score: float = Field(default=0.5, gt=0)
    use_flush_seconds: float = Field(default=30.0, ge=1, le=3600)
    default_blocks: list[BlockSpec] = Field(default_factory=list)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # Network transports (sse/http): bearer tokens, each naming the agents it may use.
    auth_tokens: list[dict[str, Any]] = Field(default_factory=list)
    auth_tokens_file: Path | None = None
    # sse/http: a bearer token for every agent (TIERMEM_HTTP_TOKEN; `--token` too, but other local users see a command
    # line). With no tokens configured at all, `tiermem serve` makes a random one per run and prints it once on stderr.
    http_token: str | None = None
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    allowed_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    max_request_bytes: int = Field(default=4 * 1024 * 1024, gt=0)
    # sse/http and `tiermem ui`: a connection whose request headers are not complete this many seconds after it
    # opened (or after its next request began) gets 408 and is closed (half-sent requests cannot hold it open).
    http_header_timeout: float = Field(default=10.0, gt=0, le=3600)
    # sse/http and `tiermem ui`: a request whose body is not complete this many seconds after the request began gets
    # 408 and is closed, however slowly it trickles in (a body of max_request_bytes needs max_request_bytes / this
    # many bytes a second).
    http_body_timeout: float = Field(default=60.0, gt=0, le=3600)
    # sse/http and `tiermem ui`: connections beyond this many open ones get 503 and are closed at once, so the open
    # files stay inside the process's limit (each client's event stream holds one connection while it is open).
    http_max_connections: int = Field(default=256, ge=1, le=100_000)
    # Streamable HTTP (transport "http") without sessions: every request stands alone, so any replica behind a plain
    # round-robin proxy answers any request; handshake-era clients lose what needs a session (docs/SCALING.md).
    http_stateless: bool = False
    # OAuth 2.1 (sse/http; both turn it on): the authorization server whose access tokens are accepted, besides the
    # static tokens, and the URL clients reach this server at; the canonical URI tokens must name as their audience
    # is public_url with the endpoint (/mcp, /sse) appended unless it ends with it (checked: process/oauth_settings.py).
    oauth_issuer: str | None = None
    public_url: str | None = None
    # An audience other than the canonical URI, for issuers that cannot put a URL there.
    oauth_audience: str | None = None
    # The signature algorithms accepted (asymmetric ones only: never "none" nor HS256).
    oauth_algorithms: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["RS256", "PS256", "ES256", "EdDSA"]
    )
    # Ask the issuer's introspection endpoint (RFC 7662) about every token instead of checking JWTs locally (opaque
    # tokens; revocation seen at once), with this server's client credentials there.
    oauth_introspect: bool = False
    oauth_client_id: str | None = None
    oauth_client_secret: str | None = None
    # The claim of an access token that lists its user's groups.
    oauth_groups_claim: str = "groups"
    # Each signed-in user has an agent of their own; these agents are shared, each with the subjects and groups
    # ("group:<name>") that may use it (a client asks for one with ?agent=<name> on the server's URL).
    oauth_shared_agents: dict[str, list[str]] = Field(default_factory=dict)
    # Publish the memory inspector's block view as an MCP App (tool memory_blocks_view + a ui:// resource).
    mcp_apps: bool = False
    # The `memory` and `memory_apply_patch` tools: Anthropic's memory tool and tiermem's patch, or Letta Code's.
    memory_tool_dialect: Literal["anthropic", "letta-code"] = "anthropic"
    # `tiermem serve` keeps this MemFS directory (a Letta Code agent's memory) and its agent's blocks in step,
    # checking both sides every `sync_seconds`.
    sync: Path | None = None
    sync_seconds: float = Field(default=0.25, gt=0, le=3600)
    # The optional built-in agent loop (the `agent_chat` tool, `tiermem chat`).
    agent_loop: bool = False
    llm_provider: Literal["auto", "anthropic", "sampling"] = "auto"
    model: str = "claude-sonnet-4-5"
    anthropic_base_url: str | None = None
    llm_max_retries: int = Field(default=3, ge=0, le=10)
    anthropic_timeout: float = Field(default=120.0, gt=0, le=3600)
    max_tokens: int = Field(default=4096, gt=0)
    context_window: int = Field(default=200_000, ge=1000)
    max_steps: int = Field(default=50, ge=1, le=1000)
    agent_type: Literal["letta_v1", "memgpt"] = "letta_v1"
    sleeptime_frequency: int = Field(default=0, ge=0)

    @field_validator("tools", "allowed_hosts", "allowed_origins", "oauth_algorithms", mode="before")
    @classmethod
    def _split_tools(cls, v: object) -> object:
        """A string (TIERMEM_TOOLS, ``--tools``) is a comma-separated list: ``a, b, c``."""
        if isinstance(v, str):
            return split_list(v)
        return v

    @field_validator(*EMPTY_IS_UNSET, mode="before")
    @classmethod
    def _no_empty_path(cls, v: object, info: ValidationInfo) -> object:
        """``data_dir = ""`` in a config file would be the current directory, ``uri = ""`` no store, ``host = ""``
        every interface, ``http_token = ""`` no token: refused (leaving the key out is the default). The
        environment's empty ones never come here (``_Environment``)."""
        if isinstance(v, str) and not v.strip():
            what = "an empty path; give a path" if info.field_name in PATH_SETTINGS else "empty; give a value"
            raise ValueError(f"{what}, or leave the setting out for the default")
        return v

    @field_validator("system", mode="before")
    @classmethod
    def _no_empty_system(cls, v: object) -> object:
        """``TIERMEM_SYSTEM=`` (a variable left unset in a host's config) would give new agents no system prompt."""
        if isinstance(v, str) and not v.strip():
            raise ValueError(
                "empty: new agents would get no system prompt; give the prompt, or leave the setting out for the "
                "packaged one"
            )
        return v

    @field_validator("core_backend", mode="before")
    @classmethod
    def _retired_backend(cls, v: object) -> object:
        if v == "lancedb":
            raise ValueError(LANCEDB_RETIRED)
        return v

    @field_validator("auth_tokens")
    @classmethod
    def _token_keys(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each token names its agents, with no key but ``TOKEN_KEYS`` (its secret is checked when serving)."""
        for n, entry in enumerate(v):
            problem = token_entry_problem(entry)
            if problem is not None:
                name = entry.get("name")
                raise ValueError(f"token #{n + 1}{f' ({name!r})' if isinstance(name, str) else ''}: {problem}")
        return v

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Highest first: arguments (command-line flags), TIERMEM_* variables, the TOML files."""
        given = init_settings.init_kwargs.get("config") if isinstance(init_settings, InitSettingsSource) else None
        return (init_settings, _Environment(settings_cls), _TomlFiles(settings_cls, given))

    def resolved_data_dir(self) -> Path:
        if self.data_dir is not None:
            return self.data_dir.expanduser()
        xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        return Path(xdg) / "tiermem"

    def store_uri(self) -> str:
        return self.uri or str(self.resolved_data_dir() / "db")

    def for_bulk(self) -> Settings:
        """These settings for a bulk command (``object_deadlines.BULK_COMMANDS``): LanceDB's store takes longer
        deadlines (``lance_storage_options``); ``storage_options``, which the core state's client takes, is kept."""
        bulk = self.model_copy()
        bulk._bulk = True
        return bulk

    def lance_storage_options(self) -> dict[str, str] | None:
        """The ``storage_options`` LanceDB's store is opened with: a bulk command's longer deadlines added
        (``object_deadlines.for_bulk``); None when there are none (a local directory)."""
        if not self._bulk:
            return self.storage_options or None
        from .object_deadlines import for_bulk

        return for_bulk(self.uri, self.storage_options) or None

    def model_cache_dir(self) -> Path:
        return self.resolved_data_dir() / "models"


def default_config_text() -> str:
    return resources.files(__package__).joinpath("default.toml").read_text(encoding="utf-8")


def default_config_file() -> Path | None:
    """The user's config file, if one exists at the XDG location."""
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    path = Path(xdg) / "tiermem" / "config.toml"
    return path if path.is_file() else None


def _read_toml(text: str, where: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where} is not valid TOML: {exc}. Fix the file or remove it.") from exc


class _BadVariable(ValueError):
    """A TIERMEM_* variable pydantic-settings could not decode (a JSON setting that is not JSON)."""

    def __init__(self, field_name: str, cause: ValueError) -> None:
        super().__init__(str(cause))
        self.field_name = field_name


class _Environment(EnvSettingsSource):
    """The TIERMEM_* variables, as pydantic-settings reads them but for two things: a path setting (or `uri`, `host`,
    `http_token`) set to nothing is unset (``EMPTY_IS_UNSET``), and a variable that cannot be decoded (JSON) is named (``_BadVariable``)."""

    def prepare_field_value(self, field_name: str, field: FieldInfo, value: Any, value_is_complex: bool) -> Any:
        if field_name in EMPTY_IS_UNSET and isinstance(value, str) and not value.strip():
            return None
        try:
            return super().prepare_field_value(field_name, field, value, value_is_complex)
        except ValueError as exc:
            raise _BadVariable(field_name, exc) from exc


def _config_file(given: Path | str | None) -> tuple[Path | None, str]:
    """The user's TOML file (``--config``, else $TIERMEM_CONFIG, else the XDG location when a file is there) and
    where its path came from, for errors."""
    if given is not None:
        return Path(given), "--config"
    env = os.environ.get("TIERMEM_CONFIG")
    if env and env.strip():  # set to nothing (or spaces): unset, as the setting reads it
        return Path(env), "TIERMEM_CONFIG"
    return default_config_file(), "the default location"


def _user_toml(path: Path, origin: str) -> dict[str, Any]:
    try:
        text = path.expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        check = f"Check the path given to {origin}" if origin != "the default location" else "Check the file"
        raise ConfigError(f"Cannot read config file {path}: {exc}. {check}.") from exc
    return _read_toml(text, f"config file {path}")


class _TomlFiles(PydanticBaseSettingsSource):
    """The file layer: the packaged default.toml with the user's TOML file over it (a key replaces the default's)."""

    def __init__(self, settings_cls: type[BaseSettings], given: Path | str | None) -> None:
        super().__init__(settings_cls)
        self._path, self._origin = _config_file(given)

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ returns the whole layer

    def __call__(self) -> dict[str, Any]:
        data = _read_toml(default_config_text(), "the packaged default.toml")
        path = self._path
        if path is None:
            return data
        user = _user_toml(path, self._origin)
        if "config" in user:
            raise ConfigError(
                f"Config file {path} sets `config`, but a config file cannot name another one; remove "
                "the key and pass the file you want with --config or TIERMEM_CONFIG."
            )
        return {**data, **user, "config": path}


def _did_you_mean(kind: str, loc: tuple[int | str, ...]) -> str:
    """For a key that is not a setting (a mistyped ``data_dri``, or ``lable`` in a ``[[default_blocks]]`` table):
    the closest one, if one is close."""
    import difflib

    if kind != "extra_forbidden" or not loc:
        return ""
    known = Settings.model_fields if len(loc) == 1 else BlockSpec.model_fields if loc[0] == "default_blocks" else {}
    close = difflib.get_close_matches(str(loc[-1]), list(known), n=1)
    return f" (did you mean `{close[0]}`?)" if close else ""


def _table_hint(kind: str, loc: tuple[int | str, ...]) -> str:
    """A setting refused inside a ``[[default_blocks]]`` table: in TOML it was written after the table's header."""
    if kind != "extra_forbidden" or len(loc) != 3 or loc[0] != "default_blocks" or loc[-1] not in Settings.model_fields:
        return ""
    return (
        f" (`{loc[-1]}` is a setting, but in TOML every key after a [[default_blocks]] header belongs to that block: "
        "move it above the first [[default_blocks]])"
    )


class _Sources:
    """Where a setting's value came from, to name it in an error: the command line (``given``), a TIERMEM_*
    variable, or the user's config file (the packaged defaults are valid)."""

    def __init__(self, given: dict[str, Any]) -> None:
        self.given = given
        self.variables = {k.upper(): v for k, v in os.environ.items()}
        self.path, origin = _config_file(given.get("config"))
        self.in_file: dict[str, Any] = {} if self.path is None else _user_toml(self.path, origin)

    def of(self, loc: tuple[int | str, ...]) -> str | None:
        if not loc:
            return None
        name = str(loc[0])
        if name in self.given:
            return FLAGS.get(name, "--" + name.replace("_", "-"))
        variable = (ENV_PREFIX + name).upper()
        if variable in self.variables and (name not in EMPTY_IS_UNSET or self.variables[variable].strip()):
            return variable  # (a path variable set to nothing is unset: ``_Environment``)
        if name in self.in_file:
            return f"config file {self.path}"
        return None


def _variable_error(field_name: str, exc: ValueError) -> ConfigError:
    kind = "object" if get_origin(Settings.model_fields[field_name].annotation) is dict else "array"
    example = {
        "storage_options": '{"region": "eu-west-1"}',
        "auth_tokens": '[{"token": "...", "agents": ["work"]}]',
        "default_blocks": '[{"label": "notes", "value": ""}]',
        "oauth_shared_agents": '{"team": ["group:engineering"]}',
    }.get(field_name, "{}" if kind == "object" else "[]")
    variable = (ENV_PREFIX + field_name).upper()
    return ConfigError(
        f"Invalid settings: {variable} is not valid JSON ({exc}); it is a JSON {kind}, such as "
        f"{variable}='{example}' (or set `{field_name}` in the config file, or unset the variable)."
    )


# A check of one setting that needs more than base knows (the tool registry, the domain's rules of a block): the CLI
# gives them to ``load_settings`` by the setting's name. Each raises ``ValueError`` or a ``TiermemError`` naming the
# problem; it runs only on a value the user gave (the packaged defaults are valid).
SettingCheck = Callable[[Settings], None]


def _between_settings(settings: Settings) -> Iterator[tuple[tuple[str, ...], str]]:
    """(the settings at fault, the problem) for settings that are each valid but contradict one another; the first
    setting named that the user gave is the one blamed."""
    if settings.core_backend == "object" and settings.uri is None:
        yield (
            ("core_backend", "uri"),
            "'object' keeps core state on object storage, which needs `uri` (for example s3://bucket/prefix); for a "
            "local data directory use 'auto' (or leave core_backend out)",
        )
    if settings.core_backend == "sqlite" and settings.uri is not None:
        yield (
            ("core_backend", "uri"),
            "'sqlite' needs a local data directory (data_dir), not an object-storage uri; use 'auto' with uri",
        )
    if settings.use_hot_score < settings.use_warm_score:
        yield (
            ("use_hot_score", "use_warm_score"),
            f"use_hot_score ({settings.use_hot_score}) is below use_warm_score ({settings.use_warm_score}), so no "
            "memory would ever be warm; make use_hot_score the larger",
        )


def _checked(settings: Settings, given: dict[str, Any], checks: Mapping[str, SettingCheck]) -> Settings:
    """``settings``, or ``ConfigError`` for settings that contradict one another or fail a check of ``checks``."""
    problems: list[tuple[tuple[str, ...], str]] = list(_between_settings(settings))
    if not problems and not checks:
        return settings
    sources = _Sources(given)
    for name, check in checks.items():
        if sources.of((name,)) is None:
            continue  # the packaged default
        try:
            check(settings)
        except (ValueError, TiermemError) as exc:
            problems.append(((name,), str(exc).rstrip(".")))
    if not problems:
        return settings
    lines = []
    for names, problem in problems:
        name = next((n for n in names if sources.of((n,)) is not None), names[0])
        where = sources.of((name,))
        lines.append(f"{name}{f' ({where})' if where else ''}: {problem}")
    raise ConfigError(f"Invalid settings: {'; '.join(lines)}.")


def load_settings(
    config_file: Path | None = None, *, checks: Mapping[str, SettingCheck] | None = None, **overrides: Any
) -> Settings:
    """Build settings; ``overrides`` are command-line flags (``None`` means not given), ``checks`` the checks of
    settings that need more than base (``SettingCheck``). An error names the setting and where its value came from
    (the flag, the TIERMEM_* variable or the config file)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    if config_file is not None:
        given["config"] = config_file
    try:
        settings = Settings(**given)
    except SettingsError as exc:
        if isinstance(exc.__cause__, _BadVariable):
            raise _variable_error(exc.__cause__.field_name, exc.__cause__) from exc
        raise ConfigError(f"Invalid settings: {exc}. Check your TIERMEM_* variables.") from exc
    except ValidationError as exc:
        sources = _Sources(given)
        problems, unnamed = [], False
        for e in exc.errors():
            where = sources.of(e["loc"])
            unnamed = unnamed or where is None
            message = e["msg"].removeprefix("Value error, ")  # pydantic's prefix of a validator's ValueError
            problems.append(
                f"{'.'.join(str(p) for p in e['loc'])}{f' ({where})' if where else ''}: {message}"
                f"{_did_you_mean(e['type'], e['loc'])}{_table_hint(e['type'], e['loc'])}"
            )
        check = " Check your config file, TIERMEM_* variables and flags." if unnamed else ""
        raise ConfigError(f"Invalid settings: {'; '.join(problems)}.{check}") from exc
    return _checked(settings, given, checks or {})
