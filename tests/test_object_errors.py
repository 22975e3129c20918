"""Object-store failures say what is wrong and which setting to check, not the library's Rust debug dump nor a
local directory's advice: a missing bucket, refused credentials, an endpoint that cannot be reached (moto's S3
server on loopback, real ``tiermem`` processes; a running store whose endpoint goes away)."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tiermem.base.config import load_settings
from tiermem.base.errors import ConfigError, StoreError, StoreWriteError
from tiermem.base.object_deadlines import BULK_READ_TIMEOUT, DEFAULTS, for_bulk, with_deadlines
from tiermem.base.object_errors import explain, outcome_unknown
from tiermem.core.bucket import Bucket
from tiermem.domain.factory import open_memory

from .test_object_storage import BUCKET, cli, s3_config, s3_endpoint  # noqa: F401 (the module-scoped moto fixture)
from .test_transports import free_port

RAW = ("RetryErrorImpl", ".cargo", "Debug source", "<Error>", "--data-dir", "TIERMEM_DATA_DIR", "is not a file")


def config_at(tmp_path: Path, endpoint: str, bucket: str = BUCKET) -> Path:
    path = s3_config(tmp_path, endpoint, f"errors-{uuid.uuid4().hex[:8]}")
    path.write_text(path.read_text().replace(f"s3://{BUCKET}/", f"s3://{bucket}/"), encoding="utf-8")
    return path


def assert_clean(text: str) -> None:
    assert not [raw for raw in RAW if raw in text], text
    assert len(text) < 700, text


@contextmanager
def credentials_checked() -> Iterator[None]:
    """moto checks signatures from the next request on (its keys are IAM's, and "test" is none of them)."""
    from moto import settings
    from moto.core.authorization import ActionAuthenticatorMixin

    before = settings.INITIAL_NO_AUTH_ACTION_COUNT, ActionAuthenticatorMixin.request_count
    settings.INITIAL_NO_AUTH_ACTION_COUNT, ActionAuthenticatorMixin.request_count = 0, 0
    try:
        yield
    finally:
        settings.INITIAL_NO_AUTH_ACTION_COUNT, ActionAuthenticatorMixin.request_count = before


def test_missing_bucket_is_named_by_the_cli_and_doctor(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    config = config_at(tmp_path, s3_endpoint, bucket="no-such-bucket")
    r = cli(tmp_path, config, "remember", "x")
    assert r.returncode != 0
    assert f"the bucket 'no-such-bucket' does not exist at {s3_endpoint} (NoSuchBucket)" in r.stderr, r.stderr
    assert "configuration.md#object-storage" in r.stderr
    assert_clean(r.stderr.strip().splitlines()[-1])
    doctor = cli(tmp_path, config, "doctor")
    assert doctor.returncode == 1
    opened = next(line for line in doctor.stdout.splitlines() if line.startswith("[FAIL] open"))
    fix = doctor.stdout.splitlines()[doctor.stdout.splitlines().index(opened) + 1]
    assert "NoSuchBucket" in opened and "storage_options" in fix, doctor.stdout
    assert_clean(opened + fix)


def test_refused_credentials_name_the_settings(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    config = config_at(tmp_path, s3_endpoint)
    with credentials_checked():
        r = cli(tmp_path, config, "remember", "x")
    assert r.returncode != 0
    line = r.stderr.strip().splitlines()[-1]
    assert "refused the credentials (InvalidAccessKeyId)" in line and "AWS_ACCESS_KEY_ID" in line, r.stderr
    assert_clean(line)


def test_unreachable_endpoint_is_said(tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    r = cli(tmp_path, config_at(tmp_path, endpoint), "remember", "x")
    assert r.returncode != 0
    line = r.stderr.strip().splitlines()[-1]
    assert f"cannot reach the object store's endpoint {endpoint}: is it running" in line, r.stderr
    assert_clean(line)


def test_endpoint_gone_under_a_running_store(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    """The store opened, then its endpoint went away: a write (LanceDB) and a core read (obstore) both say so."""
    from .moto_s3 import S3Server

    port = free_port()
    server = S3Server(port)  # moto keeps its buckets per process: the module's bucket is there too
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    config = config_at(tmp_path, endpoint)
    memory = open_memory(load_settings(config=config, data_dir=tmp_path / "unused"), start_embedder=False)
    try:
        agent = memory.ensure_agent("default")
        memory.archival_insert(agent.id, "written while the store is up", None)
        server.stop()
        with pytest.raises(StoreWriteError) as written:
            memory.archival_insert(agent.id, "written while it is down", None)
        bucket = Bucket(
            load_settings(config=config, data_dir=tmp_path / "unused").store_uri(),
            {
                "aws_endpoint": endpoint,
                "aws_access_key_id": "test",
                "aws_secret_access_key": "test",
                "region": "us-east-1",
                "allow_http": "true",
            },
        )
        with pytest.raises(StoreError) as read:
            bucket.get("core/anything.json")
    finally:
        memory.core.close()
    for exc in (written.value, read.value):
        assert f"cannot reach the object store's endpoint {endpoint}" in str(exc), str(exc)
        assert_clean(str(exc))


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("403 <Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>", "s3:PutObject"),
        ("<Code>SignatureDoesNotMatch</Code>", "refused the credentials (SignatureDoesNotMatch)"),
        ("<Code>AuthorizationHeaderMalformed</Code>", "set region under [storage_options]"),
        ('ConnectError("dns error", failed to lookup address information)', "cannot reach"),
        ("<Code>SlowDown</Code><Message>Reduce your request rate.</Message>", "answered SlowDown (Reduce your"),
    ],
)
def test_other_object_store_answers(text: str, said: str) -> None:
    explained = explain("s3://b/p", f"GET http://127.0.0.1:9/b/p: {text}")
    assert explained is not None and said in explained, explained
    assert explain("s3://b/p", "lance error: Commit conflict for version 3") is None


@contextmanager
def silent_endpoint() -> Iterator[str]:
    """A loopback endpoint that accepts connections and never answers (a hung store, a stalled proxy)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)  # read nothing, answer nothing

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        for conn in held:
            conn.close()


def test_a_silent_endpoint_fails_the_command_instead_of_hanging(tmp_path: Path) -> None:
    """Without deadlines of tiermem's own, `blocks list` waited 11 minutes in LanceDB's retries (30 s a request, 180 s
    of retries, each listing tried 6 times); the run's own timeout (300 s) is far above what the defaults allow."""
    with silent_endpoint() as endpoint:
        r = cli(tmp_path, config_at(tmp_path, endpoint), "blocks", "list")
    assert r.returncode != 0
    line = r.stderr.strip().splitlines()[-1]
    assert f"the object store's endpoint {endpoint} did not answer in time" in line, r.stderr
    assert "read_timeout" in line and "configuration.md#deadlines" in line
    assert "may be damaged" not in line
    assert_clean(line)


def _shut(*socks: socket.socket) -> None:
    """Both ways of each socket shut (one already closed by its peer is left as it is)."""
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class HoldingProxy:
    """Forwards to ``target``, but holds each request whose first line matches ``held`` for ``seconds`` before
    passing it on: a store that answers late, and applies the request late, after the client gave up."""

    def __init__(
        self, target: int, held: re.Pattern[bytes], seconds: float, refused: re.Pattern[bytes] | None = None
    ) -> None:
        """``refused``: a request whose first line matches is answered by closing its connection (a store that
        cannot be reached for it)."""
        self.target, self.held, self.seconds, self.refused = target, held, seconds, refused
        self.refusals = 0
        self.holds = 0
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = int(self.listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        try:
            while data := src.recv(1 << 20):
                if up and self.refused is not None and self.refused.match(data):
                    self.refusals += 1
                    return  # both ways shut below
                if up and self.held.match(data):
                    self.holds += 1
                    time.sleep(self.seconds)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _shut(src, dst)

    def close(self) -> None:
        self.listener.close()


def test_a_write_the_store_applies_late_is_not_said_to_be_unwritten(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    """The commit (a table version's manifest PUT) reaches the store, which answers after the client's deadline and
    applies it then: the error must not say "nothing was written" (the row is there afterwards)."""
    port = int(s3_endpoint.rsplit(":", 1)[1])
    proxy = HoldingProxy(port, re.compile(rb"PUT \S+\.manifest "), seconds=8)  # read_timeout's 5 s, and some
    direct = config_at(tmp_path, s3_endpoint)
    late = tmp_path / "late.toml"
    late.write_text(direct.read_text().replace(s3_endpoint, f"http://127.0.0.1:{proxy.port}"), encoding="utf-8")
    memory = open_memory(load_settings(config=direct, data_dir=tmp_path / "unused"), start_embedder=False)
    other = open_memory(load_settings(config=late, data_dir=tmp_path / "unused"), start_embedder=False)
    try:
        agent = memory.ensure_agent("default")
        memory.archival_insert(agent.id, "written at once", None)
        with pytest.raises(StoreWriteError) as failed:
            other.archival_insert(agent.id, "LATE-PASSAGE", None)
        assert proxy.holds >= 1
        said = str(failed.value)
        assert "nothing was written" not in said.lower(), said
        assert "Whether it was written is not known" in said and "before repeating" in said, said
        assert "did not answer in time" in said, said
        assert_clean(said)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the held PUT goes on to the store after the hold
            passages, _ = memory.archival_list(agent.id, offset=0, limit=10, tags=None)
            if any(p.content == "LATE-PASSAGE" for p in passages):
                break
            time.sleep(0.5)
        else:
            raise AssertionError("the held commit never reached the store: the test proves nothing")
    finally:
        proxy.close()
        memory.core.close()
        other.core.close()


def test_core_state_commands_do_not_open_the_archive(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    """`blocks list` / `blocks show LABEL` / `agents list` read only the core state (objects under ``core/``): with
    every other request of the store refused (its LanceDB tables unreachable) they still answer. They opened the
    archive first and failed on it (against a silent endpoint after ~35 s of LanceDB's retries, not ~5 s)."""
    port = int(s3_endpoint.rsplit(":", 1)[1])
    direct = config_at(tmp_path, s3_endpoint)
    assert cli(tmp_path, direct, "remember", "the archive holds this").returncode == 0
    assert cli(tmp_path, direct, "blocks", "set", "human", "likes tea").returncode == 0
    core_only = re.compile(rb"[A-Z]+ (?!\S*(?:/core/|prefix=[^& ]*%2Fcore%2F))")  # any request not under core/
    proxy = HoldingProxy(port, re.compile(rb"(?!)"), 0, refused=core_only)
    cut = tmp_path / "cut.toml"
    cut.write_text(direct.read_text().replace(s3_endpoint, f"http://127.0.0.1:{proxy.port}"), encoding="utf-8")
    try:
        listed = cli(tmp_path, cut, "blocks", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert "human" in {b["label"] for b in json.loads(listed.stdout)}
        shown = cli(tmp_path, cut, "blocks", "show", "human")
        assert shown.returncode == 0 and shown.stdout.strip() == "likes tea", shown.stderr
        agents = cli(tmp_path, cut, "agents", "list")
        assert agents.returncode == 0 and "default" in agents.stdout, agents.stderr
        assert proxy.refusals == 0  # nothing but the core state was asked for
        whole = cli(tmp_path, cut, "blocks", "show", "--core")  # counts the archive's rows: it opens the archive
        assert whole.returncode != 0 and proxy.refusals > 0
        assert_clean(whole.stderr.strip().splitlines()[-1])
    finally:
        proxy.close()


def test_lancedb_only_storage_options_open_both_and_unknown_ones_are_named(
    tmp_path: Path,
    s3_endpoint: str,  # noqa: F811
) -> None:
    """Keys only LanceDB reads (its request-rate throttle's ``lance_aimd_*``, ``headers.*``) were refused by the core
    state's client (the same ``[storage_options]`` go to both), so such a configuration could not open at all; a key
    neither knows is refused by name (LanceDB ignores what it does not know: it would have gone unnoticed)."""
    config = config_at(tmp_path, s3_endpoint)
    text = config.read_text()
    config.write_text(
        text + 'lance_aimd_max_rate = "5000"\nlance_aimd_initial_rate = "1000"\n"headers.x-tiermem-test" = "1"\n',
        encoding="utf-8",
    )
    r = cli(tmp_path, config, "remember", "throttled by LanceDB's settings")
    assert r.returncode == 0, r.stderr
    listed = cli(tmp_path, config, "blocks", "list")
    assert listed.returncode == 0 and "human" in listed.stdout, listed.stderr
    found = cli(tmp_path, config, "search", "throttled")
    assert found.returncode == 0 and "throttled by LanceDB" in found.stdout, found.stderr
    config.write_text(text + 'lance_aimd_max_rate = "5000"\nread_timeot = "30s"\n', encoding="utf-8")
    refused = cli(tmp_path, config, "blocks", "list")
    assert refused.returncode != 0
    line = refused.stderr.strip().splitlines()[-1]
    assert "storage_options.read_timeot is not a setting of the object store (S3) nor of LanceDB" in line, line
    assert "lance_aimd" not in line
    assert_clean(line)


class ThrottledProxy(HoldingProxy):
    """Forwards to ``target``, letting the requests' bytes through at ``rate`` bytes a second (a slow uplink; the
    answers come back at once)."""

    def __init__(self, target: int, rate: int) -> None:
        self.rate = rate
        super().__init__(target, re.compile(rb"(?!)"), 0)

    def _pipe(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        try:
            while data := src.recv(16384):
                dst.sendall(data)
                if up:
                    time.sleep(len(data) / self.rate)
        except OSError:
            pass
        finally:
            _shut(src, dst)


def test_a_bulk_commands_upload_may_take_longer_than_a_servers_read_timeout(
    monkeypatch: pytest.MonkeyPatch,
    s3_endpoint: str,  # noqa: F811
) -> None:
    """``read_timeout`` bounds a whole upload, however steadily its bytes flow (the client has no per-byte deadline):
    over a 1 MB/s uplink an 8 MB PUT fails under a server's 5 s. The commands that upload whole data files and that no
    host waits for (import, reembed, optimize, folders) take a longer one (``for_bulk``), which lets it through;
    one the configuration sets is kept."""
    for key in ("TIMEOUT", "READ_TIMEOUT"):
        monkeypatch.delenv(key, raising=False)
    proxy = ThrottledProxy(int(s3_endpoint.rsplit(":", 1)[1]), rate=1_000_000)
    uri = f"s3://{BUCKET}/slow-{uuid.uuid4().hex[:8]}"
    options = {
        "aws_endpoint": f"http://127.0.0.1:{proxy.port}",
        "aws_access_key_id": "test",
        "aws_secret_access_key": "test",
        "region": "us-east-1",
        "allow_http": "true",
        "client_max_retries": "0",
    }
    data = b"x" * 8_000_000
    with pytest.raises(StoreError, match="did not answer in time"):
        Bucket(uri, options).put("big", data)
    assert for_bulk(uri, options)["read_timeout"] == BULK_READ_TIMEOUT
    Bucket(uri, for_bulk(uri, options)).put("big", data)
    assert Bucket(uri, options).get("big") is not None
    assert for_bulk(uri, {"read_timeout": "9s"})["read_timeout"] == "9s"  # the configuration's own
    monkeypatch.setenv("READ_TIMEOUT", "20s")  # LanceDB reads it from the environment
    assert "read_timeout" not in for_bulk(uri, None)  # (the rest: tests/test_bulk_deadlines.py)


def test_deadlines_fill_in_only_what_is_not_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("TIMEOUT", "READ_TIMEOUT", "CONNECT_TIMEOUT", "CLIENT_RETRY_TIMEOUT"):
        monkeypatch.delenv(key, raising=False)
    assert with_deadlines("s3://b/p", None) == DEFAULTS
    mine = {"region": "eu-west-1", "read_timeout": "30s", "client_retry_timeout": "60"}
    assert with_deadlines("s3://b/p", mine) == {**mine, "connect_timeout": DEFAULTS["connect_timeout"]}
    assert "read_timeout" not in (with_deadlines("gs://b/p", {"timeout": "120s"}) or {})  # it would cut it short
    monkeypatch.setenv("READ_TIMEOUT", "20s")  # LanceDB reads it from the environment
    assert "read_timeout" not in (with_deadlines("s3://b/p", None) or {})
    assert with_deadlines("memory://x", None) is None and with_deadlines("/some/dir", {}) is None
    with pytest.raises(ConfigError, match="client_retry_timeout"):
        with_deadlines("s3://b/p", {"client_retry_timeout": "4s"})


def test_the_core_state_takes_lancedb_retry_settings(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    """LanceDB's client_max_retries / client_retry_timeout in [storage_options] open the core state's bucket too
    (obstore refused them by name, so such a config could not open at all)."""
    options = {
        "aws_endpoint": s3_endpoint,
        "aws_access_key_id": "test",
        "aws_secret_access_key": "test",
        "region": "us-east-1",
        "allow_http": "true",
        "client_max_retries": "2",
        "client_retry_timeout": "10",
    }
    bucket = Bucket(f"s3://{BUCKET}/retries-{uuid.uuid4().hex[:8]}", options)
    bucket.create("probe.json", b"{}")
    assert bucket.get("probe.json") is not None


@pytest.mark.parametrize(
    ("text", "unknown"),
    [
        (  # LanceDB's commit whose answer did not come (the store may apply it late)
            "lance error: LanceError(IO): Generic S3 error: Error performing PUT http://127.0.0.1:9/b/t.lance/_versions/"
            "18446744073709551609.manifest in 5.001255389s - HTTP error: error sending request",
            True,
        ),
        (
            "Generic S3 error: Error performing GET http://127.0.0.1:9/b/x in 5.0s - HTTP error: error sending request",
            False,
        ),
        (
            "Error performing PUT http://127.0.0.1:9/b/x - error sending request: tcp connect error: Connection refused",
            False,
        ),
        ("Error performing PUT http://127.0.0.1:9/b/x: <Code>AccessDenied</Code>", False),
    ],
)
def test_a_write_unanswered_has_an_unknown_outcome(text: str, unknown: bool) -> None:
    assert outcome_unknown(text) is unknown


def test_a_timeout_inside_lancedb_dump_is_named() -> None:
    """LanceDB's open says "Failed to connect to namespace: IO"; its dump carries the timeout (``explain`` reads it)."""
    text = (
        'Invalid input, Failed to connect to namespace: IO { source: Generic { store: "S3", source: ListRequest { '
        "source: RetryError(RetryErrorImpl { method: GET, uri: Some(http://127.0.0.1:9/mem?list-type=2&prefix=t%2F"
        "__manifest%2F_versions%2F), retries: 0, max_retries: 10, elapsed: 5.0s, retry_timeout: 4s, inner: "
        "Http(HttpError { kind: Timeout, source: reqwest::Error { kind: Request, source: TimedOut } }) }) } }"
    )
    explained = explain("s3://mem/t", text)
    assert explained is not None and "http://127.0.0.1:9 did not answer in time" in explained, explained
