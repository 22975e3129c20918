"""``Lease``: one holder at a time among the replicas on one bucket, for work that any of them may do but that two
doing at once only wastes (the recall and archival store's background upkeep) or gets wrong (creating the store's
tables: two creations of one table commit twice, and the later replaces the earlier and every row written to it).

The lease is one object, taken with a conditional PUT: created if absent (``If-None-Match: *``), or replaced
(``If-Match`` on the ETag read) once its holder's time is up, so of two replicas taking it at once exactly one
gets it. The holder gives it back by replacing it with an expired one (again conditional: a lease taken over
after its time is never given back by the old holder). A holder that dies leaves it to expire (``seconds``).
Clocks of replicas are compared: a skew shortens or lengthens a lease by as much.

Every holder renews its lease while it holds it (``_renewed``: every third of ``seconds``, from a thread of its
own), so the work inside may outlast ``seconds``: LanceDB's requests under a bulk command's deadlines last up to
120 s (``base/object_deadlines.py``), longer than the store-creation lease, and an upkeep's compaction as long as
the store is large. What keeps two holders apart is then that one renewal gets through in every two thirds of
``seconds`` (each is one core-state request, bounded by the server's ~5 s deadlines), never how long LanceDB takes.

When none does (the bucket is slow or unreachable, the renewing thread starved), the lease runs out while its work
goes on, and LanceDB's commits carry no fencing token that would refuse the old holder's. So the holder keeps its
own, conservative count: from the moment it sent its last renewal that got through (``ticks``, a monotonic clock),
it trusts the lease ``TRUSTED`` of ``seconds`` (two thirds: the last third is the margin for a commit under way
and the replicas' clock skew), and every commit the store makes under it first asks (``base.fences``: the check
``_Hold.check``), so work whose lease lapsed stops with ``LeaseLapsedError`` before its next commit. A commit that
had started before the lapse still lands: the check narrows the overlap to one commit, it cannot close it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime

from ..base import fences
from ..base.errors import LeaseLapsedError, StoreError
from ..base.records import from_us, new_id, now, to_us
from .bucket import Bucket
from .object_layout import ROOT, dumps, loads

log = logging.getLogger(__name__)
UPKEEP_LEASE = f"{ROOT}/leases/upkeep.json"
LEASE_SECONDS = 600.0  # renewed while held (as every lease here): how long a holder that died keeps it
CREATE_LEASE = f"{ROOT}/leases/create.json"
CREATE_SECONDS = 60.0  # renewed while the tables of a new store are created; a holder that died keeps it this long
AGENT_NAMES_LEASE = f"{ROOT}/leases/agent-names.json"  # held while an agent's name is checked and its object created
AGENT_NAMES_SECONDS = 30.0  # longer than a listing of the agents and one PUT take
WRITE_SECONDS = 120.0  # renewed while the commits of a write under ``Connection.exclusive`` run
REEMBED_LEASE = f"{ROOT}/leases/reembed.json"  # held by a ``tiermem reembed`` from start to end (``kept``)
REEMBED_SECONDS = 90.0  # renewed while the reembed runs; one that died frees it this long after
TRUSTED = 2 / 3  # of a lease's seconds, after the last renewal that got through: how long its holder still commits


LABELS_SECONDS = 30.0  # longer than reading an agent's blocks and a creation's or a rename's few PUTs take


def labels_lease(agent_id: str) -> str:
    """The lease held while a label of the agent's blocks is checked and taken (a creation, a rename, an attachment:
    ``ObjectCore.create_block``), so that two blocks of one agent never end with one label."""
    return f"{ROOT}/leases/labels-{agent_id}.json"


def write_lease(name: str) -> str:
    """The lease object of the store's writes named ``name`` (``Connection.exclusive``)."""
    return f"{ROOT}/leases/write-{name}.json"


class Lease:
    """The lease at ``path`` in ``bucket``, held at most ``seconds`` by one holder."""

    def __init__(
        self,
        bucket: Bucket,
        path: str = UPKEEP_LEASE,
        seconds: float = LEASE_SECONDS,
        note: str = "",
        *,
        wall: Callable[[], datetime] | None = None,
        ticks: Callable[[], float] = time.monotonic,
    ) -> None:
        """``note``: who the holder is, for a person told that another holds it (``kept``). ``wall``: the time the
        lease's end is written in and compared with (every replica's; None: ``records.now``); ``ticks``: this
        holder's own monotonic seconds, which say how long ago its last renewal got through (``_Hold``)."""
        self.bucket, self.path, self.seconds, self.note = bucket, path, seconds, note
        self.wall, self.ticks = wall, ticks
        self.holder = new_id("holder")

    def _now(self) -> datetime:
        return self.wall() if self.wall is not None else now()

    def _body(self) -> bytes:
        until = to_us(self._now()) + int(self.seconds * 1e6)
        return dumps({"holder": self.holder, "until_us": until, **({"note": self.note} if self.note else {})})

    def take(self) -> str | None:
        """The lease's ETag if this holder took it now, else None (another holds it, or took it first)."""
        body = self._body()
        etag = self.bucket.create(self.path, body)
        if etag is not None:
            return etag
        stored = self.bucket.get(self.path)
        if stored is None:  # given back and deleted meanwhile (not by tiermem): try once more
            return self.bucket.create(self.path, body)
        if int(loads(stored.data, "lease").get("until_us", 0)) > to_us(self._now()):
            return None
        return self.bucket.replace(self.path, body, stored.etag)

    def renew(self, etag: str) -> str | None:
        """Hold the lease ``seconds`` from now on: its new ETag, or None if it was taken over meanwhile."""
        renewed = self.bucket.replace(self.path, self._body(), etag)
        if renewed is None and (mine := self._still_mine()) is not None:
            return self.bucket.replace(self.path, self._body(), mine)
        return renewed

    def _still_mine(self) -> str | None:
        """The lease's ETag if it still names this holder although a conditional PUT on the ETag this holder knew
        was refused: an earlier PUT of this holder landed but its answer was lost (a request that timed out after it
        was written, or retried by the client and refused as changed). None if another holder has it (or none)."""
        stored = self.bucket.get(self.path)
        if stored is None or loads(stored.data, "lease").get("holder") != self.holder:
            return None
        return stored.etag

    def still_held(self) -> bool:
        """True if the lease still names this holder (nobody took it over since: one that does takes it after)."""
        return self._still_mine() is not None

    def holder_note(self) -> str:
        """Who holds the lease now and until when, as its holder said (for a person)."""
        stored = self.bucket.get(self.path)
        if stored is None:
            return "a holder that has just given it back"
        held = loads(stored.data, "lease")
        until = from_us(int(held.get("until_us", 0))).isoformat(timespec="seconds")
        return f"{held.get('note') or held.get('holder')}; its lease runs out at {until} unless it is renewed"

    @contextmanager
    def kept(self, busy: Callable[[str], Exception]) -> Iterator[None]:
        """Hold the lease inside, for work that may outlast it: taken without waiting (``busy(holder_note)`` is
        raised if another holds it) and renewed while held (``_renewed``), so a holder that dies frees it
        ``seconds`` later at most. Given back on the way out."""
        sent = self.ticks()
        etag = self.take()
        if etag is None:
            raise busy(self.holder_note())
        with self._renewed(etag, sent):
            yield

    @contextmanager
    def _renewed(self, etag: str, sent: float) -> Iterator[None]:
        """Keep the lease taken as ``etag`` inside: a background thread renews it every third of ``seconds``
        (``seconds`` from each renewal on), so however long the work inside runs (a LanceDB request under a bulk
        command's deadlines lasts up to 120 s, longer than most leases), no other holder takes it meanwhile. Only a
        holder that dies, or a store that answers no renewal for two thirds of ``seconds``, lets it run out (said
        on stderr); the commits made inside then stop (``_Hold.check``, in force inside: ``base.fences``). Given
        back (or left to run out) on the way out, after the last renewal. ``sent``: ``ticks`` before the take."""
        current, stop, hold = [etag], threading.Event(), _Hold(self, sent)

        def renew_until_stopped() -> None:
            while not stop.wait(self.seconds / 3):
                sent = self.ticks()  # before the request: the lease's new end is written after this
                try:
                    renewed = self.renew(current[0])
                except StoreError as exc:  # the next try may get through; the lease lasts two more periods
                    log.warning("could not renew the lease %s (trying again): %s", self.path, exc)
                    continue
                if renewed is None:
                    hold.lost = True
                    log.warning(
                        "the lease %s ran out and was taken over: another holder may do the same work", self.path
                    )
                    return
                current[0], hold.renewed = renewed, sent

        renewing = threading.Thread(target=renew_until_stopped, name="tiermem-lease", daemon=True)
        renewing.start()
        try:
            with fences.holding(hold.check):
                yield
        finally:
            hold.over = True
            stop.set()
            renewing.join()
            self._give_back_or_let_expire(current[0])

    def give_back(self, etag: str) -> None:
        """Let the next taker have it at once (nothing if it was taken over meanwhile)."""
        expired = dumps({"holder": None, "until_us": 0})
        if self.bucket.replace(self.path, expired, etag) is None and (mine := self._still_mine()) is not None:
            self.bucket.replace(self.path, expired, mine)

    @contextmanager
    def held(self) -> Iterator[bool]:
        """True inside if this holder has the lease (renewed while held, given back on the way out), False if
        another has it or the bucket could not be asked (the work is skipped: the next attempt asks again)."""
        sent = self.ticks()
        try:
            etag = self.take()
        except StoreError as exc:
            log.warning("could not take the lease %s (skipping this time): %s", self.path, exc)
            etag = None
        if etag is None:
            yield False
            return
        with self._renewed(etag, sent):
            yield True

    @contextmanager
    def waiting(self, timeout: float, doing: str = "creating this store's tables") -> Iterator[None]:
        """Hold the lease inside (renewed while held: ``_renewed``), waiting up to ``timeout`` seconds for it
        (given back on the way out); a ``StoreError`` naming the lease if another holder keeps it longer."""
        deadline, delay, told = time.monotonic() + timeout, 0.02, False
        while True:
            sent = self.ticks()
            if (etag := self.take()) is not None:
                break
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
        with self._renewed(etag, sent):
            yield

    def _give_back_or_let_expire(self, etag: str) -> None:
        try:
            self.give_back(etag)
        except StoreError as exc:  # it expires on its own
            log.warning("could not give back the lease %s: %s", self.path, exc)


class _Hold:
    """One holding of a ``Lease`` (``_renewed``): when its last renewal that got through was sent (``renewed``, in
    the lease's ``ticks``), whether a renewal found it taken over (``lost``), whether it was let go (``over``)."""

    def __init__(self, lease: Lease, sent: float) -> None:
        self.lease, self.renewed, self.lost, self.over = lease, sent, False, False

    def check(self, what: str) -> None:
        """Raise ``LeaseLapsedError`` before a commit of ``what`` unless the lease is still this holder's: not
        taken over, and its last renewal sent less than ``TRUSTED`` of its seconds ago. Nothing once let go (a
        context copied while it was held, into a thread that outlives it)."""
        lease = self.lease
        age, trusted = lease.ticks() - self.renewed, lease.seconds * TRUSTED
        if self.over or (not self.lost and age < trusted):
            return
        where = f"{lease.bucket.uri}/{lease.path}"
        if self.lost:
            why = (
                f"this process's lease {where}, which lets one replica at a time do this work, was taken over by "
                "another replica (no renewal got through in time), which may be doing the same work now"
            )
        else:
            why = (
                f"this process's lease {where}, which lets one replica at a time do this work, was last renewed "
                f"{age:.0f} s ago, and a holder trusts its {lease.seconds:.0f} s lease only {trusted:.0f} s after "
                "a renewal (the object store did not answer the renewals in time, or this process was too busy to "
                "send them): another replica may hold it now"
            )
        raise LeaseLapsedError(
            f"Stopped before writing {what}: {why}. Nothing was written by this step; what earlier steps of the same "
            "work wrote stays, as after any failure midway. Repeat the call once the object store answers again "
            "(it takes the lease anew)."
        )
