"""The scheduling side of the operator, wired once: the feeder that informers hand objects to, the
loop, the decision writer, the notice poster, the queue-status publisher and the linter. `run`
builds it against the API server; tests build it against a fake one. Signals flow one way: the
feeder and the writer say what happened through `Wakeups`, and only the loop calls the rooms.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..engine.cache import Cache
from ..engine.workload import WorkloadInfo
from ..k8s.events import EventSink
from ..k8s.writer import StatusWriter
from .decisions import MAX_INFLIGHT_WRITES, DecisionWriter
from .faults import Faults
from .feeder import CacheFeeder
from .linter import Linter, LintResult, setup_wires
from .loop import ROUNDS_PER_CYCLE, SchedulingLoop
from .metrics import Metrics
from .notices import NoticePoster
from .publisher import QueueStatusPublisher
from .timeline import Timeline
from .wakeups import Wakeups


@dataclass
class Scheduling:
    cache: Cache
    wakeups: Wakeups
    feeder: CacheFeeder
    linter: Linter
    decisions: DecisionWriter
    notices: NoticePoster
    publisher: QueueStatusPublisher
    loop: SchedulingLoop

    @classmethod
    def build(
        cls,
        cache: Cache,
        writer: StatusWriter,
        events: EventSink,
        metrics: Metrics,
        leading: Callable[[], bool],
        *,
        relist: Callable[[], Awaitable[None]] | None = None,
        faults: Faults | None = None,
        rounds: int = ROUNDS_PER_CYCLE,
        job_stops: Callable[[WorkloadInfo], bool] = lambda wl: False,
        analyse: Callable[[list[dict[str, Any]]], Awaitable[LintResult]] | None = None,
        timeline: Timeline | None = None,
        max_inflight_writes: int = MAX_INFLIGHT_WRITES,
    ) -> Scheduling:
        """`analyse`: how lint runs (default: in a child process)."""
        wakeups = Wakeups()

        def linted() -> None:
            # An analysis ended: its Warnings go out now, its conditions with the next statuses
            # (a term not taken over yet posts them when it is).
            if loop.in_term():
                notices.post()
            publisher.due()

        linter = Linter(
            lambda: setup_wires(cache.objects),
            leading,
            metrics,
            linted,
            analyse=analyse,
            fair_sharing=cache.fair_sharing,
        )
        feeder = CacheFeeder(cache, wakeups, setup_changed=linter.changed)
        decisions = DecisionWriter(
            cache,
            writer,
            feeder,
            events,
            metrics,
            wakeups,
            faults,
            max_inflight_writes=max_inflight_writes,
            timeline=timeline,
        )
        publisher = QueueStatusPublisher(
            cache, writer, feeder, metrics, leading, lambda: linter.result, lambda: loop.state.inadmissible
        )
        feeder.status_changed = publisher.status_changed
        notices = NoticePoster(events, cache, feeder, lambda: loop.config_notices, lambda: linter.notices)
        loop = SchedulingLoop(
            cache,
            decisions,
            notices,
            wakeups,
            metrics,
            leading,
            relist=relist,
            term_started=linter.changed,  # a setup this replica has not analysed yet gets its verdict
            cycled=publisher.due,
            rounds=rounds,
            job_stops=job_stops,
        )
        return cls(cache, wakeups, feeder, linter, decisions, notices, publisher, loop)

    async def run(self, synced: asyncio.Event) -> None:
        """The loop, the publisher and the linter, until cancelled; then writes not sent are
        abandoned and an analysis in flight too (shutdown never waits for them)."""
        await synced.wait()
        publisher = asyncio.create_task(self.publisher.run(), name="queue-statuses")
        linter = asyncio.create_task(self.linter.run(), name="lint")
        try:
            await self.loop.run(synced)
        finally:
            publisher.cancel()
            linter.cancel()
            self.linter.close()
            await self.decisions.stop()
            await asyncio.gather(publisher, linter, return_exceptions=True)
