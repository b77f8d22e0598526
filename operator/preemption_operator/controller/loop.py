"""The scheduling loop: one cycle at a time, woken by changes and coalesced under load, while this
replica leads.

Each cycle cuts a snapshot from the cache (what the API says, plus the decisions whose writes are
in flight), lets the engine decide and hands the decisions to the decision writer, which assumes
them in the cache and writes them without the loop waiting. So no cycle can hand out quota that
a write in flight is taking, a victim is not evicted twice (Kueue's assume/forget and
expectations), and writes never hold up the next decision. The loop owns the scheduler's memory
between cycles (QueueState) and the leadership term; everything it tells people goes through the
rooms it calls (decisions, notices, the queue-status publisher).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from ..engine import CycleResult, Engine, QueueState
from ..engine.cache import Cache
from ..engine.changes import status_changes
from ..engine.notices import Notice
from ..engine.workload import WorkloadInfo
from .decisions import RETRY_START, DecisionWriter
from .metrics import Metrics
from .notices import NoticePoster
from .wakeups import Wakeups, loop_time

log = logging.getLogger(__name__)

WRITE_BACKLOG = 512  # writes queued before the loop waits for the API to catch up
# Admissions and evictions decided but not written yet. Every one of them is assumed: a cycle
# far ahead of the API sees queues filled by admissions nobody is running yet, and preempts
# for room that writing would have shown to be free. Under Kueue's harness at 1/10 scale,
# 512 gave ~300 evictions, 32 ~300, 8 ~120, 4 ~60 (Kueue: 40-60), with time to admission
# shorter each step (benchmarks/results/kueue-harness.md). A cycle's first round is not
# bounded by it: a burst still goes out in parallel.
QUOTA_BACKLOG = 4
ROUNDS_PER_CYCLE = 64  # consecutive Kueue cycles decided before one batch of writes
RESYNC_SECONDS = 30.0


class SchedulingLoop:
    def __init__(
        self,
        cache: Cache,
        decisions: DecisionWriter,
        notices: NoticePoster,
        wakeups: Wakeups,
        metrics: Metrics,
        leading: Callable[[], bool],
        *,
        relist: Callable[[], Awaitable[None]] | None = None,
        term_started: Callable[[], None] = lambda: None,
        cycled: Callable[[], None] = lambda: None,
        coalesce_seconds: float = 0.01,
        resync_seconds: float = RESYNC_SECONDS,
        rounds: int = ROUNDS_PER_CYCLE,
        job_stops: Callable[[WorkloadInfo], bool] = lambda wl: False,
        clock: Callable[[], float] = loop_time,
    ) -> None:
        """`relist`: a fresh list of every kind (a new leader starts from it); `term_started`:
        this replica took the lead; `cycled`: a cycle ended (statuses are due); `job_stops`: which
        workloads a job integration stops (their quota comes back once the job has)."""
        self.cache = cache
        self.decisions = decisions
        self.notices = notices
        self.wakeups = wakeups
        self.metrics = metrics
        self.leading = leading
        self.relist = relist
        self.term_started = term_started
        self.cycled = cycled
        self.coalesce_seconds = coalesce_seconds
        self.resync_seconds = resync_seconds
        self.job_stops = job_stops
        self.clock = clock
        self.engine = Engine(rounds=rounds)
        self.state = QueueState()
        self.config_notices: list[Notice] = []
        """What the last cycle found wrong with the PreemptionConfigs it read."""
        self.cycles = 0
        self.term_cycles = 0
        """Cycles decided since this replica last took the lead. The job controller gives a
        stopped job's quota back only after one: that cycle has seen the preemptors waiting for
        it (QueueState starts empty with each term), so the quota goes to them."""
        self.heartbeat: float | None = None
        """When the loop last completed a pass (a cycle, or a standby's check), on `clock`;
        None before it started: liveness reads it."""
        self.busy = False
        self._was_leading = False

    def poke(self) -> None:
        self.wakeups.poke()

    def alive(self, liveness_seconds: float) -> bool:
        """Whether a pass completed within `liveness_seconds` (or the loop has not started yet)."""
        return self.heartbeat is None or self.clock() - self.heartbeat < liveness_seconds

    def in_term(self) -> bool:
        """Leading, and the term taken over (its fresh list read)."""
        return self._was_leading and self.leading()

    # -- the loop ----------------------------------------------------------------------------

    async def run(self, synced: asyncio.Event) -> None:
        await synced.wait()
        self.heartbeat = self.clock()
        resync_at = self.clock() + self.resync_seconds
        wake = self.wakeups
        while True:
            deadline = min(resync_at, wake.deadline)
            try:
                async with asyncio.timeout(max(0.0, deadline - self.clock())):
                    await wake.event.wait()
            except TimeoutError:
                pass
            moment = self.clock()
            if moment >= wake.deadline:
                wake.deadline = math.inf
            if moment >= resync_at:
                resync_at = moment + self.resync_seconds
                wake.config_changed()
            if not self.busy:
                # Woken by the watches: let a burst of changes land before deciding. After a
                # cycle that changed something, the next one starts at once.
                await asyncio.sleep(self.coalesce_seconds)
            else:
                # But it yields first: a cycle does no I/O, and without this the writers and the
                # watches would never run while decisions keep coming.
                await asyncio.sleep(0)
            # Backpressure: decisions must not outrun the API by more than a few batches, nor by
            # more than QUOTA_BACKLOG admissions and evictions.
            await self.decisions.below(WRITE_BACKLOG, QUOTA_BACKLOG)
            wake.event.clear()
            if not self.leading():
                if self._was_leading:
                    self.decisions.abandon()
                self._was_leading = False
                self.term_cycles = 0
                self.heartbeat = self.clock()
                continue
            try:
                if not self._was_leading:
                    await self._take_over()
                self.cycle()
                self.term_cycles += 1
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scheduling cycle failed; retrying")
                wake.wake_in(RETRY_START)
                continue
            self.heartbeat = self.clock()

    async def _take_over(self) -> None:
        """A new leader starts from a fresh list, not from what its watches delivered so far: the
        previous leader's last writes may still be on their way."""
        self.decisions.abandon()
        if self.relist is not None:
            await self.relist()
        self.state = QueueState()
        self.notices.reset()
        self._was_leading = True
        self.term_started()

    def cycle(self) -> CycleResult:
        started = time.perf_counter()
        now = datetime.now(UTC).replace(microsecond=0)
        snapshot = self.cache.snapshot(now)
        released, reconfigured = self.wakeups.take()
        if reconfigured:
            self.state.requeue_all()
        if released:
            self.state.quota_released(snapshot, released)
        budget = max(1, QUOTA_BACKLOG - self.decisions.unwritten)
        result = self.engine.cycle(snapshot, self.state, budget=budget)
        self.config_notices = result.notices
        self.metrics.decision_seconds.observe(time.perf_counter() - started)
        if result.retry_at is not None:
            self.wakeups.wake_at(result.retry_at)
        self.decisions.apply(status_changes(result, now, self.job_stops))
        self.notices.post()
        self.cycled()
        self.cycles += 1
        self.metrics.cycle_seconds.observe(time.perf_counter() - started)
        self.busy = result.changed
        if result.changed:
            self.wakeups.poke()
        return result
