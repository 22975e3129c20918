"""Object-store failures say what is wrong and which setting to check, not the library's Rust debug dump nor a
local directory's advice: a missing bucket, refused credentials, an endpoint that cannot be reached (moto's S3
server on loopback, real ``tiermem`` processes; a running store whose endpoint goes away)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tiermem.base.config import load_settings
from tiermem.base.errors import StoreError, StoreWriteError
from tiermem.base.object_errors import explain
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
