"""Decisions on their way to the API: a bounded pool of writers that never holds up the next cycle.

A cycle assumes its decisions in the cache and hands them over here; the next cycle decides
against that assumed state while the writes are in flight. The order that matters is kept per
batch (one cycle's decisions): its evictions are written first, and its admissions only once those
and every eviction of an earlier batch still on its way were (an admission may use quota a drained
workload gave back, or room a victim under way frees beyond its preemptor's need, which Kueue's
fits check counts as free: written first, the API would show both holding quota). If such an
eviction fails, those admissions are dropped and decided again. Evictions and admissions go
before pending reasons; a pending reason waiting to be written is replaced by a newer one for the
same workload.

A pending reason is queued only once it has lasted a moment (`defer_seconds`): most workloads
that get one are admitted soon after (in Kueue's harness at 1/3 scale, half within 0.3 s), and the
write would tell of a state already over. A newer reason for the same workload takes the older
one's place and keeps its due time, so one that keeps changing is written at most once per
moment. A preemptor's "Pending the preemption of N workload(s)" waits longer
(PREEMPTOR_DEFER_SECONDS): its victims must be written, stopped and released first.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from ..engine.changes import PENDING, StatusChange
from ..engine.scheduler import WAITING_FOR_PREEMPTED
from ..k8s.writer import Outcome, WriteResult

log = logging.getLogger(__name__)

DEFER_SECONDS = 1.0
PREEMPTOR_DEFER_SECONDS = 2.0


def deferral(change: StatusChange, defer_seconds: float) -> float:
    """How long a pending reason waits before it is queued (see the module's doc)."""
    if change.action != PENDING:
        return 0.0
    if change.reason == WAITING_FOR_PREEMPTED:
        return max(defer_seconds, PREEMPTOR_DEFER_SECONDS) if defer_seconds else 0.0
    return defer_seconds


@dataclass(eq=False)
class Batch:
    """One cycle's decisions."""

    releases_left: int
    takes: list[StatusChange] = field(default_factory=list)
    failed: bool = False
    """One of the evictions its admissions wait for failed."""
    waits: int = 0
    """Earlier batches whose evictions its admissions wait for."""
    dependents: list[Batch] = field(default_factory=list)
    """Later batches whose admissions wait for its evictions."""


Write = Callable[[StatusChange], Awaitable[WriteResult]]
Drop = Callable[[StatusChange], None]


class WriteQueue:
    def __init__(self, write: Write, drop: Drop, parallelism: int = 8, defer_seconds: float = DEFER_SECONDS) -> None:
        self._write = write
        self._drop = drop
        self.parallelism = parallelism
        self.defer_seconds = defer_seconds
        """0: pending reasons are queued at once."""
        self._urgent: deque[tuple[StatusChange, Batch]] = deque()
        self._pending: OrderedDict[str, tuple[StatusChange, Batch]] = OrderedDict()
        self._ready = asyncio.Event()
        self._busy = 0
        self._busy_quota = 0
        """Writes in flight that take or give back quota."""
        self._held = 0
        """Admissions waiting for the evictions of their batch."""
        self._takes: dict[str, Batch] = {}
        """Where each of those waits, by workload."""
        self._releasing: dict[Batch, None] = {}
        """Batches with evictions not written yet, in order."""
        self._idle = asyncio.Event()
        self._idle.set()
        self._drained = asyncio.Event()
        """Set each time a write ends: `below` looks again."""
        self._workers: list[asyncio.Task[None]] = []
        self._later: dict[str, tuple[float, StatusChange, Batch]] = {}
        """Deferred pending reasons by workload, with when they are due (the first one's time:
        a newer one of the same kind keeps it)."""
        self._timer: asyncio.TimerHandle | None = None

    # -- what the loop uses

    def submit(self, changes: Sequence[StatusChange]) -> None:
        if not self._workers:
            self.start()
        releases = [c for c in changes if c.releases_quota]
        released = {c.key for c in releases}
        batch = Batch(len(releases))
        if any(c.holds_quota and c.key not in released for c in changes):
            for earlier in self._releasing:
                earlier.dependents.append(batch)
                batch.waits += 1
        if releases:
            self._releasing[batch] = None
        for change in releases:
            self._cancel_admission(change.key)
        for change in changes:
            if change.releases_quota or change.holds_quota:
                self._pending.pop(change.key, None)  # a queued pending reason for it is outdated
                self._later.pop(change.key, None)
        for change in releases:
            self._urgent.append((change, batch))
        for change in changes:
            if change.holds_quota and change.key in released:
                # Admitted in one round of the pass and evicted in a later one: as an admission
                # not sent yet when a later cycle evicts its workload, it is never written.
                self._drop(change)
            elif change.holds_quota:
                if batch.releases_left or batch.waits:
                    batch.takes.append(change)  # released by the last eviction it waits for
                    self._held += 1
                    self._takes[change.key] = batch
                else:
                    self._urgent.append((change, batch))
            elif (wait := deferral(change, self.defer_seconds)) > 0:
                self._pending.pop(change.key, None)
                held = self._later.get(change.key)
                due = held[0] if held is not None else asyncio.get_running_loop().time() + wait
                self._later[change.key] = (due, change, batch)
                self._arm()
            elif not change.releases_quota:
                self._queue_pending(change, batch)
        self._signal()

    def _queue_pending(self, change: StatusChange, batch: Batch) -> None:
        """A pending reason joins the queue at its end, replacing one waiting for its workload."""
        self._later.pop(change.key, None)
        self._pending.pop(change.key, None)
        self._pending[change.key] = (change, batch)

    def _arm(self) -> None:
        """One timer, for the earliest deferred pending reason."""
        if self._timer is not None or not self._later:
            return
        loop = asyncio.get_running_loop()
        due = min(d for d, _, _ in self._later.values())
        self._timer = loop.call_at(due, self._promote)

    def _promote(self) -> None:
        """Deferred pending reasons that are due join the queue."""
        self._timer = None
        now = asyncio.get_running_loop().time()
        for due, change, batch in list(self._later.values()):
            if due <= now:
                self._queue_pending(change, batch)
        self._arm()
        self._signal()

    def _cancel_admission(self, key: str) -> None:
        """A workload is evicted whose admission is decided but not sent: that admission is
        dropped. Written after the eviction, it would take back quota the eviction gave to its
        preemptor (an admission already being sent is safe: writes to one object keep their order,
        and the eviction starts from its answer)."""
        batch = self._takes.pop(key, None)
        if batch is not None:
            for change in [c for c in batch.takes if c.key == key]:
                batch.takes.remove(change)
                self._held -= 1
                self._drop(change)
        for item in [i for i in self._urgent if i[0].key == key and i[0].holds_quota]:
            self._urgent.remove(item)
            self._drop(item[0])

    @property
    def queued(self) -> int:
        return len(self._urgent) + len(self._pending) + self._held

    @property
    def in_flight(self) -> int:
        return self._busy

    @property
    def quota_writes(self) -> int:
        """Admissions and evictions not written yet (queued, held or in flight): decisions the
        cache assumes and the API does not show yet."""
        return len(self._urgent) + self._held + self._busy_quota

    async def below(self, limit: int, quota_limit: int | None = None) -> None:
        """Until fewer than `limit` writes are queued and, with `quota_limit`, fewer than that
        many admissions and evictions are unwritten."""
        while self.queued >= limit or (quota_limit is not None and self.quota_writes >= quota_limit):
            self._drained.clear()
            await self._drained.wait()

    async def idle(self, deferred: bool = True) -> None:
        """Until nothing is queued, deferred (unless `deferred` is False) or being written."""
        while self.queued or self._busy or (deferred and self._later):
            self._idle.clear()
            await self._idle.wait()

    def start(self) -> None:
        self._workers = [asyncio.create_task(self._work(), name=f"writer-{i}") for i in range(self.parallelism)]

    def abandon(self) -> list[StatusChange]:
        """Everything queued and not sent yet, taken out (this replica stopped leading: its
        decisions are not to be written, even if it leads again later). Writes in flight go on;
        the fence stops their next request."""
        out = [c for c, _ in self._urgent] + [c for c, _ in self._pending.values()]
        out += [c for _, c, _ in self._later.values()]
        for batch in set(self._takes.values()):
            out.extend(batch.takes)
            batch.takes = []
        self._urgent.clear()
        self._pending.clear()
        self._later.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._takes.clear()
        self._releasing.clear()
        self._held = 0
        self._signal()
        return out

    async def stop(self) -> int:
        """At shutdown: what is queued is not written and writes in flight are abandoned (their
        assumptions die with the process; the next leader starts from a fresh list). Returns how
        many were not written."""
        left = self.queued + self._busy + len(self._later)
        self.abandon()
        workers, self._workers = self._workers, []
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        return left

    # -- the writers

    def _signal(self) -> None:
        if self._urgent or self._pending:
            self._ready.set()
        elif not self._busy:
            self._idle.set()

    def _next(self) -> tuple[StatusChange, Batch] | None:
        if self._urgent:
            return self._urgent.popleft()
        if self._pending:
            return self._pending.popitem(last=False)[1]
        return None

    async def _work(self) -> None:
        while True:
            item = self._next()
            if item is None:
                self._ready.clear()
                self._signal()
                await self._ready.wait()
                continue
            change, batch = item
            quota = change.holds_quota or change.releases_quota
            self._busy += 1
            self._busy_quota += quota
            try:
                result = await self._write(change)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the write classifies what it knows; never lose a writer
                log.exception("writing %s of %s failed", change.action, change.key)
                result = WriteResult(Outcome.FAILED, error=repr(exc))
            finally:
                self._busy -= 1
                self._busy_quota -= quota
            if change.releases_quota:
                self._released(batch, result)
            self._drained.set()
            self._signal()

    def _released(self, batch: Batch, result: WriteResult) -> None:
        if result.outcome in (Outcome.FAILED, Outcome.FENCED, Outcome.UNKNOWN):
            batch.failed = True
        batch.releases_left -= 1
        if batch.releases_left:
            return
        self._releasing.pop(batch, None)
        dependents, batch.dependents = batch.dependents, []
        for later in dependents:
            later.waits -= 1
            later.failed |= batch.failed
            self._let_go(later)
        self._let_go(batch)

    def _let_go(self, batch: Batch) -> None:
        """A batch's admissions, once every eviction they wait for is written: queued, or dropped
        (decided again) if one of those failed."""
        if batch.releases_left or batch.waits or not batch.takes:
            return
        takes, batch.takes = batch.takes, []
        self._held -= len(takes)
        for change in takes:
            self._takes.pop(change.key, None)
        if batch.failed:
            log.warning("an eviction was not written; %d admission(s) waiting for it are decided again", len(takes))
            for change in takes:
                self._drop(change)
            return
        self._urgent.extend((change, batch) for change in takes)
