"""The forget record on object storage (``core/forget_record.py``): a forget merges the record's objects once there
are ``MERGE_AT`` of them, so a restore reads a few objects whatever the number of forgets, and no key is ever lost
when two processes forget, merge or read at once (interleaved deterministically at the bucket's calls)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from tiermem.base.errors import StoreError
from tiermem.core import forget_record
from tiermem.core.bucket import Bucket, Listed, Stored
from tiermem.core.forget_record import MERGE_AT, PREFIX, merge, object_keys, object_record, object_remove
from tiermem.core.object_layout import dumps, loads


class Watched:
    """A bucket counting its LISTs and GETs, calling ``before[(kind, n)]`` before its n-th call of that kind."""

    def __init__(self, bucket: Bucket) -> None:
        self.bucket, self.uri = bucket, bucket.uri
        self.calls: Counter[str] = Counter()
        self.before: dict[tuple[str, int], Callable[[], None]] = {}

    def _call(self, kind: str) -> None:
        self.calls[kind] += 1
        hook = self.before.pop((kind, self.calls[kind]), None)
        if hook is not None:
            hook()

    def list(self, prefix: str) -> list[Listed]:
        self._call("LIST")
        return self.bucket.list(prefix)

    def get(self, path: str, unless: str | None = None) -> Stored | None:
        self._call("GET")
        return self.bucket.get(path, unless)

    def create(self, path: str, data: bytes) -> str | None:
        self._call("CREATE")
        return self.bucket.create(path, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.bucket, name)


def _key(n: int) -> str:
    return f"{n:064x}"


def _objects(bucket: Bucket) -> int:
    return len(bucket.list(PREFIX))


def test_a_restore_reads_a_few_objects_after_50_forgets() -> None:
    bucket = Bucket("memory://merge-50")
    for n in range(50):
        object_record(bucket, [_key(2 * n), _key(2 * n + 1)])
        assert _objects(bucket) < MERGE_AT  # never more: each forget that reaches MERGE_AT merges them
    reader = Watched(bucket)
    assert object_keys(reader) == {_key(n) for n in range(100)}
    assert reader.calls["LIST"] == 1
    assert reader.calls["GET"] < MERGE_AT  # without the merge: 50 GETs, one per forget


def test_a_merge_deletes_only_what_it_wrote_into_its_object_so_a_forget_meanwhile_is_kept() -> None:
    bucket = Bucket("memory://merge-race")
    for n in range(3):
        object_record(bucket, [_key(n)])
    merger = Watched(bucket)
    # the other process forgets after this merge read the record, before it writes the merged object
    merger.before[("CREATE", 1)] = lambda: object_record(bucket, [_key(99)])
    assert merge(merger) == 3
    assert object_keys(bucket) == {_key(0), _key(1), _key(2), _key(99)}
    assert _objects(bucket) == 2  # the merged object and the new forget's


def test_two_merges_at_once_lose_nothing() -> None:
    """Two processes merging the same objects (a lease run out): each writes what it read, then deletes it."""
    bucket = Bucket("memory://merge-two")
    for n in range(4):
        object_record(bucket, [_key(n)])
    first = Watched(bucket)

    def second_merges() -> None:  # after the first read everything, before it writes: a forget, then a merge
        object_record(bucket, [_key(50)])
        assert merge(bucket) == 5

    first.before[("CREATE", 1)] = second_merges
    assert merge(first) == 4  # its objects were deleted already: deleting them again is nothing
    assert object_keys(bucket) == {*(_key(n) for n in range(4)), _key(50)}


def test_a_reader_whose_objects_are_merged_between_its_listing_and_its_reads_lists_again() -> None:
    bucket = Bucket("memory://merge-read")
    for n in range(5):
        object_record(bucket, [_key(n)])
    reader = Watched(bucket)
    reader.before[("GET", 1)] = lambda: merge(bucket)  # after it listed five objects: they are one now
    assert object_keys(reader) == {_key(n) for n in range(5)}
    assert reader.calls["LIST"] == 2


def test_a_merge_skips_when_another_process_holds_the_lease_and_the_next_forget_merges() -> None:
    bucket = Bucket("memory://merge-held")
    held = forget_record.Lease(bucket, forget_record.FORGOTTEN_LEASE, forget_record.FORGOTTEN_SECONDS)
    etag = held.take()
    assert etag is not None
    for n in range(MERGE_AT + 2):
        object_record(bucket, [_key(n)])
    assert _objects(bucket) == MERGE_AT + 2  # not merged: another holds the lease
    held.give_back(etag)
    object_record(bucket, [_key(100)])
    assert _objects(bucket) == 1
    assert object_keys(bucket) == {*(_key(n) for n in range(MERGE_AT + 2)), _key(100)}


def test_keys_taken_out_of_a_merged_record_stay_out() -> None:
    bucket = Bucket("memory://merge-remove")
    for n in range(MERGE_AT):
        object_record(bucket, [_key(n)])
    assert _objects(bucket) == 1
    assert object_remove(bucket, [_key(1), _key(2)]) == 2
    assert object_keys(bucket) == {_key(n) for n in range(MERGE_AT)} - {_key(1), _key(2)}


class FailingDeletes(Watched):
    """A bucket whose DELETEs fail (a store that answers no more for a moment)."""

    def delete(self, path: str) -> None:
        raise StoreError(f"DELETE {path}: the store did not answer")


def test_a_merge_that_fails_leaves_the_forget_recorded_and_done(caplog: pytest.LogCaptureFixture) -> None:
    """The merge is upkeep: its failure is said and left to the next forget, never the forget's own failure (the
    forget, refused, would leave its keys in the record naming rows still here)."""
    bucket = Bucket("memory://merge-fails")
    for n in range(MERGE_AT - 1):
        object_record(bucket, [_key(n)])
    with caplog.at_level(logging.WARNING, logger=forget_record.__name__):
        assert object_record(FailingDeletes(bucket), [_key(99)]) == 1
    assert "could not merge the forget record" in caplog.text
    assert object_keys(bucket) == {*(_key(n) for n in range(MERGE_AT - 1)), _key(99)}
    object_record(bucket, [_key(100)])  # the next forget merges
    assert _objects(bucket) == 1
    assert object_keys(bucket) == {*(_key(n) for n in range(MERGE_AT - 1)), _key(99), _key(100)}


def _run_out(bucket: Bucket) -> None:
    """The forget record's lease runs out: its holder's renewals did not get through (it still names its holder)."""
    stored = bucket.get(forget_record.FORGOTTEN_LEASE)
    assert stored is not None
    ran_out = dumps({**loads(stored.data, "lease"), "until_us": 0})
    assert bucket.replace(forget_record.FORGOTTEN_LEASE, ran_out, stored.etag) is not None


def test_keys_taken_out_while_a_merge_s_lease_ran_out_stay_out() -> None:
    """A merge whose lease ran out (its renewals did not get through) while keys were taken out (an import with
    ``--include-forgotten``, holding the lease it could take over): the merged object it then writes holds a key
    taken out meanwhile, so it deletes that object instead of the ones merged into it; the key stays out."""
    bucket = Bucket("memory://merge-lapsed")
    for n in range(MERGE_AT - 1):
        object_record(bucket, [_key(n)])
    merger = Watched(bucket)

    def lease_runs_out_and_keys_are_taken_out() -> None:
        # after the merge read every object (CREATE 1: the forget's object, 2: the lease, 3: the merged object)
        _run_out(bucket)
        assert object_remove(bucket, [_key(1)]) == 1

    merger.before[("CREATE", 3)] = lease_runs_out_and_keys_are_taken_out
    assert object_record(merger, [_key(99)]) == 1
    assert merger.calls["CREATE"] == 3  # the merge ran, and lost its lease while it did
    assert object_keys(bucket) == {*(_key(n) for n in range(MERGE_AT - 1)), _key(99)} - {_key(1)}
    object_record(bucket, [_key(100)])  # the next forget merges, without the key taken out
    assert _objects(bucket) == 1
    assert object_keys(bucket) == {*(_key(n) for n in range(MERGE_AT - 1)), _key(99), _key(100)} - {_key(1)}


class WatchedWrites(Watched):
    """``Watched``, its DELETEs counted and hooked too."""

    def delete(self, path: str) -> None:
        self._call("DELETE")
        self.bucket.delete(path)


def test_keys_taken_out_while_the_remover_s_lease_ran_out_stay_out() -> None:
    """The remover's lease runs out after it listed the record; a forget merges meanwhile (taking the lease), so the
    merged object holds the key the remover is taking out of an object the merge deleted: the remover, its lease
    gone, takes it again and takes the key out of the merged object."""
    bucket = Bucket("memory://remove-lapsed")
    for n in range(MERGE_AT - 1):
        object_record(bucket, [_key(n)])
    remover = WatchedWrites(bucket)

    def lease_runs_out_and_a_forget_merges() -> None:  # before the remover deletes the object holding only the key
        _run_out(bucket)
        object_record(bucket, [_key(99)])  # the MERGE_AT-th object: merged into one
        assert _objects(bucket) == 1

    remover.before[("DELETE", 1)] = lease_runs_out_and_a_forget_merges
    object_remove(remover, [_key(1)])
    assert object_keys(bucket) == {*(_key(n) for n in range(MERGE_AT - 1)), _key(99)} - {_key(1)}
    assert remover.calls["LIST"] == 2  # listed again once its lease was taken again


class LeaseUnread(Watched):
    """``Watched``, whose reads of the forget record's lease fail once ``failing`` is set (the store that did not
    answer the lease's renewals does not answer this either)."""

    failing = False

    def get(self, path: str, unless: str | None = None) -> Stored | None:
        if self.failing and path == forget_record.FORGOTTEN_LEASE:
            raise StoreError("the store did not answer")
        return super().get(path, unless)


def test_a_merge_that_cannot_read_its_lease_again_deletes_its_merged_object(caplog: pytest.LogCaptureFixture) -> None:
    """The merge's lease ran out while keys were taken out, and the store does not answer the merge's read of the
    lease either: the merged object (holding a key taken out meanwhile) is deleted, not left to bring the key back;
    the forget is recorded and done (the error is the merge's, logged)."""
    bucket = Bucket("memory://merge-unread")
    for n in range(MERGE_AT - 1):
        object_record(bucket, [_key(n)])
    merger = LeaseUnread(bucket)

    def lease_runs_out_keys_are_taken_out_and_the_store_stops_answering() -> None:
        _run_out(bucket)
        assert object_remove(bucket, [_key(1)]) == 1
        merger.failing = True

    merger.before[("CREATE", 3)] = lease_runs_out_keys_are_taken_out_and_the_store_stops_answering
    with caplog.at_level(logging.WARNING):
        assert object_record(merger, [_key(99)]) == 1
    assert merger.calls["CREATE"] == 3 and "could not merge" in caplog.text
    assert object_keys(bucket) == {*(_key(n) for n in range(MERGE_AT - 1)), _key(99)} - {_key(1)}
