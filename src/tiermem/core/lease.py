"""``Lease``: one holder at a time among the replicas on one bucket, for work that any of them may do but that two
doing at once only wastes (the recall and archival store's background upkeep) or gets wrong (creating the store's
tables: two creations of one table commit twice, and the later replaces the earlier and every row written to it).

The lease is one object, taken with a conditional PUT: created if absent (``If-None-Match: *``), or replaced
(``If-Match`` on the ETag read) once its holder's time is up, so of two replicas taking it at once exactly one
gets it. The holder gives it back by replacing it with an expired one (again conditional: a lease taken over
after its time is never given back by the old holder). A holder that dies leaves it to expire (``seconds``).
Clocks of replicas are compared: a skew shortens or lengthens a lease by as much.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from ..base.errors import StoreError
from ..base.records import new_id, now, to_us
from .bucket import Bucket
from .object_layout import ROOT, dumps, loads

log = logging.getLogger(__name__)
UPKEEP_LEASE = f"{ROOT}/leases/upkeep.json"
LEASE_SECONDS = 600.0  # longer than an upkeep takes (a compaction and the index updates of every table)
CREATE_LEASE = f"{ROOT}/leases/create.json"
CREATE_SECONDS = 60.0  # longer than creating the tables of a new store takes (a few seconds on a slow store)
AGENT_NAMES_LEASE = f"{ROOT}/leases/agent-names.json"  # held while an agent's name is checked and its object created
AGENT_NAMES_SECONDS = 30.0  # longer than a listing of the agents and one PUT take
WRITE_SECONDS = 120.0  # longer than the few commits of a write held under ``Connection.exclusive`` take


def write_lease(name: str) -> str:
    """The lease object of the store's writes named ``name`` (``Connection.exclusive``)."""
    return f"{ROOT}/leases/write-{name}.json"


class Lease:
    """The lease at ``path`` in ``bucket``, held at most ``seconds`` by one holder."""

    def __init__(self, bucket: Bucket, path: str = UPKEEP_LEASE, seconds: float = LEASE_SECONDS) -> None:
        self.bucket, self.path, self.seconds = bucket, path, seconds
        self.holder = new_id("holder")

    def take(self) -> str | None:
        """The lease's ETag if this holder took it now, else None (another holds it, or took it first)."""
        body = dumps({"holder": self.holder, "until_us": to_us(now()) + int(self.seconds * 1e6)})
        etag = self.bucket.create(self.path, body)
        if etag is not None:
            return etag
        stored = self.bucket.get(self.path)
        if stored is None:  # given back and deleted meanwhile (not by tiermem): try once more
            return self.bucket.create(self.path, body)
        if int(loads(stored.data, "lease").get("until_us", 0)) > to_us(now()):
            return None
        return self.bucket.replace(self.path, body, stored.etag)

    def give_back(self, etag: str) -> None:
        """Let the next taker have it at once (nothing if it was taken over meanwhile)."""
        self.bucket.replace(self.path, dumps({"holder": None, "until_us": 0}), etag)

    @contextmanager
    def held(self) -> Iterator[bool]:
        """True inside if this holder has the lease (given back on the way out), False if another has it or the
        bucket could not be asked (the work is skipped: the next attempt asks again)."""
        try:
            etag = self.take()
        except StoreError as exc:
            log.warning("could not take the lease %s (skipping this time): %s", self.path, exc)
            etag = None
        try:
            yield etag is not None
        finally:
            if etag is not None:
                self._give_back_or_let_expire(etag)

    @contextmanager
    def waiting(self, timeout: float, doing: str = "creating this store's tables") -> Iterator[None]:
        """Hold the lease inside, waiting up to ``timeout`` seconds for it (given back on the way out); a
        ``StoreError`` naming the lease if another holder keeps it longer."""
        deadline, delay, told = time.monotonic() + timeout, 0.02, False
        while (etag := self.take()) is None:
            if not told:  # a wait of up to a lease's time (a holder that died) is said, not silent
                log.warning(
                    "waiting (up to %.0f s) for %s/%s: another process holds it; a holder that died leaves "
                    "it to run out %.0f s after it was taken",
                    timeout,
                    self.bucket.uri,
                    self.path,
                    self.seconds,
                )
                told = True
            if time.monotonic() >= deadline:
                raise StoreError(
                    f"Another process has held {self.bucket.uri}/{self.path} for more than {timeout:.0f} s: it is "
                    f"{doing}, or died doing so (its lease runs out {self.seconds:.0f} s after it "
                    "was taken). Try again in a minute."
                )
            time.sleep(delay)
            delay = min(0.25, delay * 2)
        try:
            yield
        finally:
            self._give_back_or_let_expire(etag)

    def _give_back_or_let_expire(self, etag: str) -> None:
        try:
            self.give_back(etag)
        except StoreError as exc:  # it expires on its own
            log.warning("could not give back the lease %s: %s", self.path, exc)
