"""Leases held around LanceDB work are renewed while the work runs (moto's S3 server on loopback).

A bulk command gives LanceDB's requests up to 120 s each, longer than the store-creation lease (60 s) and as long as
a write lease (120 s, ``Connection.exclusive``: the keyword-texts lock, a file's chunks); the upkeep lease covers a
whole compaction. A request that outlived its lease let another replica take the lease while the first still wrote.
Here the work under each lease is a request that blocks until the test lets it go, the lease is short, and the
leases' clock is the test's (``tiermem.core.lease.now``): time passes only when the test moves it, so another
holder can take the lease exactly when the first's has run out and no renewal kept it.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta

import pytest

from tiermem.base.config import Settings
from tiermem.core import lease as lease_module
from tiermem.core.bucket import Bucket
from tiermem.core.lease import CREATE_LEASE, UPKEEP_LEASE, Lease, labels_lease, write_lease
from tiermem.domain.factory import _creation_lease, _write_leases
from tiermem.store import TEXTS_LOCK

from .test_object_storage import BUCKET, s3_endpoint  # noqa: F401 (the module-scoped moto server fixture)

SHORT = 0.3  # the leases' seconds here: renewed every 0.1 s of real time, run out after 0.3 s of the test's clock
OPTIONS = {"aws_access_key_id": "test", "aws_secret_access_key": "test", "region": "us-east-1", "allow_http": "true"}


class Clock:
    """The leases' ``now``: moves only when the test moves it."""

    def __init__(self) -> None:
        self.at = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    c = Clock()
    monkeypatch.setattr(lease_module, "now", c)
    monkeypatch.setattr(lease_module, "CREATE_SECONDS", SHORT)
    monkeypatch.setattr(lease_module, "WRITE_SECONDS", SHORT)
    yield c


class Renewals:
    """Every renewal of any lease, with the test clock's time it was made at; ``after(t)`` waits for a successful
    one made at ``t`` or later (False if none comes within ``timeout`` real seconds: the lease is not renewed)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, clock: Clock) -> None:
        self.made: list[tuple[datetime, bool]] = []
        self.changed = threading.Condition()
        renew = Lease.renew

        def recorded(lease: Lease, etag: str) -> str | None:
            at = clock()
            got = renew(lease, etag)
            with self.changed:
                self.made.append((at, got is not None))
                self.changed.notify_all()
            return got

        monkeypatch.setattr(Lease, "renew", recorded)

    def after(self, at: datetime, timeout: float = 10.0) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: any(t >= at and ok for t, ok in self.made), timeout)


def _uri() -> str:
    return f"s3://{BUCKET}/lease-{uuid.uuid4().hex[:8]}"


def _settings(uri: str, endpoint: str) -> Settings:
    return Settings(uri=uri, storage_options={**OPTIONS, "aws_endpoint": endpoint})


# each lease held around LanceDB work: how tiermem takes it (on a new store at ``uri``), and its object's path
FORMS: dict[str, tuple[Callable[[str, str], AbstractContextManager[object]], str]] = {
    "store creation (Connection.creating)": (lambda uri, ep: _creation_lease(_settings(uri, ep))(), CREATE_LEASE),  # type: ignore[misc]
    "keyword-texts lock (Connection.exclusive)": (
        lambda uri, ep: _write_leases(_settings(uri, ep))(TEXTS_LOCK),  # type: ignore[misc]
        write_lease(TEXTS_LOCK),
    ),
    "background upkeep": (
        lambda uri, ep: Lease(Bucket(uri, {**OPTIONS, "aws_endpoint": ep}), UPKEEP_LEASE, SHORT).held(),
        UPKEEP_LEASE,
    ),
    "an agent's labels": (
        lambda uri, ep: Lease(Bucket(uri, {**OPTIONS, "aws_endpoint": ep}), labels_lease("agent-x"), SHORT).waiting(5),
        labels_lease("agent-x"),
    ),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_no_other_holder_takes_a_lease_while_the_work_under_it_still_runs(
    form: str,
    s3_endpoint: str,  # noqa: F811
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    renewals = Renewals(monkeypatch, clock)
    uri = _uri()
    hold, path = FORMS[form]
    holding, request_done, failed = threading.Event(), threading.Event(), []

    def first_replica() -> None:
        try:
            with hold(uri, s3_endpoint) as got:
                assert got is not False  # ``held`` says whether it was taken
                holding.set()
                request_done.wait(60)  # a LanceDB request under the lease, slower than the lease is long
        except BaseException as exc:  # noqa: BLE001 (reported by the test below)
            failed.append(exc)
            holding.set()

    worker = threading.Thread(target=first_replica)
    worker.start()
    try:
        assert holding.wait(30) and not failed, failed
        clock.advance(SHORT * 0.8)
        renewals.after(clock())  # not asserted: without renewal none comes, and the take below shows it
        clock.advance(SHORT * 0.8)  # past the lease's first end: only a renewal keeps it
        other = Lease(Bucket(uri, {**OPTIONS, "aws_endpoint": s3_endpoint}), path, SHORT)
        taken = other.take()
        assert taken is None, f"another replica took the {form} lease while the first's request was still running"
    finally:
        request_done.set()
        worker.join(60)
    assert not failed, failed
    assert other.take() is not None  # given back once the work ended


@pytest.mark.parametrize("answer", ["refused as changed", "lost"])
def test_a_renewal_whose_answer_was_lost_keeps_the_lease_and_it_is_still_given_back(
    answer: str,
    s3_endpoint: str,  # noqa: F811
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A renewal's PUT that lands but whose answer does not reach the holder (it timed out after it was written,
    or the client retried it and the retry was refused as changed: the first try changed the ETag): the holder
    still holds the lease, so it keeps renewing it, no other holder takes it, and it is given back at the end."""
    from tiermem.base.errors import StoreError

    renewals = Renewals(monkeypatch, clock)
    bucket = Bucket(_uri(), {**OPTIONS, "aws_endpoint": s3_endpoint})
    replace, lost = bucket.replace, []

    def first_answer_lost(path: str, data: bytes, etag: str) -> str | None:
        got = replace(path, data, etag)
        if not lost and lease_module.loads(data, "lease").get("holder") is not None:  # a renewal, not the give-back
            lost.append(got)  # written; its answer never reaches the holder
            if answer == "lost":
                raise StoreError("timed out (the PUT may have been written)")
            return None
        return got

    monkeypatch.setattr(bucket, "replace", first_answer_lost)
    lease = Lease(bucket, UPKEEP_LEASE, SHORT)
    with lease.held() as got:
        assert got
        clock.advance(SHORT * 0.8)
        assert renewals.after(clock())  # the renewal after the lost one got through
        assert lost, "no renewal's answer was lost"
        clock.advance(SHORT * 0.8)  # past the lease's first end: only a renewal keeps it
        assert Lease(bucket, UPKEEP_LEASE, SHORT).take() is None
    assert Lease(bucket, UPKEEP_LEASE, SHORT).take() is not None  # given back, not left to run out
