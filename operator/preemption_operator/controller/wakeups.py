"""Why the scheduling loop should run a cycle, said by whoever saw it happen: the informers'
feeder (a change that can change a decision), the decision writer (a write that gave quota back
or failed), the loop's own timers (a preemption delay or protection ending). Signals go one way,
into the loop: no room calls back into another."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from datetime import UTC, datetime


def loop_time() -> float:
    """The running event loop's clock: what asyncio's sleeps and timeouts measure (monotonic;
    the tests' fake time under looptime). Every timer of the controller reads it."""
    return asyncio.get_running_loop().time()


class Wakeups:
    def __init__(
        self,
        *,
        clock: Callable[[], float] = loop_time,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        cap_seconds: float = 30.0,
    ) -> None:
        self.clock = clock
        self.wall = wall
        self.cap_seconds = cap_seconds
        """A timer never waits longer than this (the loop's periodic resync)."""
        self.event = asyncio.Event()
        self.released: set[str] = set()
        """ClusterQueues where quota was given back since the last cycle."""
        self.reconfigured = False
        """Queues, cohorts or configs changed since the last cycle: parked workloads get another look."""
        self.deadline = math.inf
        """The earliest timer asked for (monotonic), `inf` for none."""

    def poke(self) -> None:
        self.event.set()

    def quota_released(self, cluster_queue: str) -> None:
        """A workload stopped using quota (finished, deleted, evicted): parked workloads of that
        cohort tree retry."""
        self.released.add(cluster_queue)
        self.poke()

    def config_changed(self) -> None:
        self.reconfigured = True
        self.poke()

    def wake_in(self, seconds: float) -> None:
        """One pending timer, the earliest asked for (not one timer per request)."""
        self.deadline = min(self.deadline, self.clock() + max(0.0, seconds))

    def wake_at(self, moment: datetime) -> None:
        """A cycle when a preemption delay or a protection ends, even if nothing else changes."""
        self.wake_in(min(self.cap_seconds, (moment - self.wall()).total_seconds() + 0.5))

    def take(self) -> tuple[set[str], bool]:
        """What was released and whether the setup changed, since the last call."""
        released, reconfigured = self.released, self.reconfigured
        self.released, self.reconfigured = set(), False
        return released, reconfigured
