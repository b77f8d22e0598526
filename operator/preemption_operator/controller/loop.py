"""The scheduling loop: one cycle at a time, woken by changes and coalesced under load.

Each cycle cuts a snapshot from the cache, lets the engine decide, and writes the decisions.
Every object written is put back into the cache from the API's answer at once, so the next
cycle never acts on a state older than its own writes (Kueue's expectations): a victim is not
evicted twice and no ClusterQueue is admitted past its quota while the watch catches up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from ..engine import status as wl_status
from ..engine.cache import Cache
from ..engine.configurable import ConfigurablePreemption
from ..engine.notices import Notice
from ..engine.objects import ObjectError, parse_object
from ..engine.scheduler import Admission, CycleResult, Eviction, Pending, Preemption, QueueState, Scheduler
from ..engine.snapshot import Snapshot
from ..engine.workload import WorkloadInfo
from ..k8s import resources
from ..k8s.writer import StatusFn, StatusWriter
from ..metrics import Metrics
from . import statuses

log = logging.getLogger(__name__)

KUEUE_V1BETA2 = "kueue.x-k8s.io/v1beta2"
WRITE_PARALLELISM = 8  # as Kueue issues preemptions
STATUS_INTERVAL_SECONDS = 5.0
ROUNDS_PER_CYCLE = 64  # consecutive Kueue cycles decided before one batch of writes


def _priorities(wl: WorkloadInfo) -> str:
    return f"{wl.priority} (base: {wl.base_priority}, boost: {wl.boost})"


class SchedulingLoop:
    def __init__(
        self,
        cache: Cache,
        writer: StatusWriter,
        metrics: Metrics,
        is_leader: Callable[[], bool],
        coalesce_seconds: float = 0.05,
        resync_seconds: float = 30.0,
    ) -> None:
        self.cache = cache
        self.writer = writer
        self.metrics = metrics
        self.is_leader = is_leader
        self.coalesce_seconds = coalesce_seconds
        self.resync_seconds = resync_seconds
        self.state = QueueState()
        self.configurable = ConfigurablePreemption()
        self.scheduler = Scheduler(extra=self.configurable.candidates, rounds=ROUNDS_PER_CYCLE)
        self.wake = asyncio.Event()
        self.released: set[str] = set()
        self.posted_notices: set[Notice] = set()
        self.cycles = 0
        self.last_cycle_at = 0.0
        self.pending_queues: set[str] = set()
        self.event_tasks: set[asyncio.Task[None]] = set()
        self.event_limit = asyncio.Semaphore(2)  # Events must not crowd out decisions at the API server
        self.statuses_at = 0.0
        self.busy = False

    # -- triggers --------------------------------------------------------------------------

    def poke(self) -> None:
        self.wake.set()

    def quota_released(self, cluster_queue: str) -> None:
        """A workload stopped using quota (finished, deleted): parked workloads of that cohort tree retry."""
        self.released.add(cluster_queue)
        self.poke()

    def config_changed(self) -> None:
        """Queues, cohorts or configs changed: every parked workload gets another look."""
        self.state.inadmissible.clear()
        self.poke()

    # -- the loop ----------------------------------------------------------------------------

    async def run(self, synced: asyncio.Event) -> None:
        await synced.wait()
        # The periodic resync is a deadline on the wait, not a task of its own: kopf cancels the
        # tasks created after it started as "hung" when it stops, and waits 5 s for them first,
        # which made every SIGTERM take 5 s more.
        resync_at = time.monotonic() + self.resync_seconds
        while True:
            try:
                async with asyncio.timeout(max(0.0, resync_at - time.monotonic())):
                    await self.wake.wait()
            except TimeoutError:
                resync_at = time.monotonic() + self.resync_seconds
                self.config_changed()
            if not self.busy:
                # Woken by the watches: let a burst of changes land before deciding. After a
                # cycle that changed something, the next one starts at once.
                await asyncio.sleep(self.coalesce_seconds)
            self.wake.clear()
            if not self.is_leader():
                continue
            try:
                await self.cycle()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scheduling cycle failed; retrying on the next change")
                await asyncio.sleep(1)
                self.poke()

    async def cycle(self) -> CycleResult:
        started = time.perf_counter()
        now = datetime.now(UTC).replace(microsecond=0)
        snapshot = self.cache.snapshot(now)
        if self.released:
            self.state.quota_released(snapshot, self.released)
            self.released = set()
        self.configurable.begin_cycle(snapshot)
        result = self.scheduler.cycle(snapshot, self.state)
        self.metrics.decision_seconds.observe(time.perf_counter() - started)
        await self._apply(result, snapshot, now)
        freed = {p.victim.cluster_queue or "" for p in result.preempted} | {
            e.workload.cluster_queue or "" for e in result.evicted
        }
        if freed:
            self.state.quota_released(snapshot, freed)
        await self._notices()
        # Queue statuses are for people: refresh them when the cluster settles, or every few
        # seconds while admissions stream in, so they never take write capacity from workloads.
        if not result.changed or time.monotonic() - self.statuses_at >= STATUS_INTERVAL_SECONDS:
            self.statuses_at = time.monotonic()
            await self._queue_statuses(now)
        self.cycles += 1
        self.last_cycle_at = time.monotonic()
        self.metrics.cycle_seconds.observe(time.perf_counter() - started)
        self.busy = result.changed
        if result.changed:
            self.poke()
        if result.retry_at is not None:
            self._wake_at(result.retry_at)
        return result

    def _wake_at(self, moment: datetime) -> None:
        """Runs a cycle when a preemption delay ends, even if nothing else changes."""
        delay = max(0.0, (moment - datetime.now(UTC)).total_seconds())
        asyncio.get_running_loop().call_later(delay + 0.5, self.poke)

    # -- writing decisions -------------------------------------------------------------------

    async def _write(self, wl: WorkloadInfo, compute: StatusFn) -> dict[str, Any] | None:
        """Writes a Workload's status from the version the decision saw (retried from a fresh read
        on conflict) and puts the result in the cache at once."""
        written = await self.writer.update_status(resources.Workload, wl.name, wl.namespace, compute, wl.obj.to_wire())
        self._store(written)
        return written

    def _store(self, written: dict[str, Any] | None) -> None:
        if written is None:
            return
        try:
            self.cache.upsert(parse_object(written))
        except ObjectError as exc:  # pragma: no cover - we wrote it from a valid object
            log.error("the API returned an object the models reject: %s", exc)

    async def _apply(self, result: CycleResult, snapshot: Snapshot, now: datetime) -> None:
        """Evictions first, then admissions, then pending reasons; the writes of each kind go out
        in parallel (they touch different objects), at most WRITE_PARALLELISM at a time."""
        limit = asyncio.Semaphore(WRITE_PARALLELISM)

        async def bounded(write: Awaitable[None]) -> None:
            async with limit:
                await write

        await asyncio.gather(*(bounded(self._drain(e, now)) for e in result.evicted))
        await asyncio.gather(*(bounded(self._preempt(p, now)) for p in result.preempted))
        await asyncio.gather(*(bounded(self._admit(a, now)) for a in result.admitted))
        await asyncio.gather(*(bounded(self._pending(p, now)) for p in result.pending))
        counts: dict[str, int] = {name: len(queue) for name, queue in snapshot.pending.items()}
        for name in self.pending_queues | set(counts):
            self.metrics.pending.labels(cluster_queue=name).set(counts.get(name, 0))
        self.pending_queues = set(counts)

    def _event(self, obj: dict[str, Any], kind: str, api_version: str, type_: str, reason: str, message: str) -> None:
        """Events go out in the background: they are best effort and must not slow admissions."""
        task = asyncio.create_task(self._post_event(obj, kind, api_version, type_, reason, message))
        self.event_tasks.add(task)
        task.add_done_callback(self.event_tasks.discard)

    async def _post_event(
        self, obj: dict[str, Any], kind: str, api_version: str, type_: str, reason: str, message: str
    ) -> None:
        async with self.event_limit:
            await self.writer.event(obj, kind, api_version, type_, reason, message)

    async def drain_events(self, timeout: float = 5.0) -> None:
        """Waits (a little) for Events still being posted, at shutdown."""
        if self.event_tasks:
            await asyncio.wait(list(self.event_tasks), timeout=timeout)

    async def _drain(self, e: Eviction, now: datetime) -> None:
        wl = e.workload

        def compute(current: dict[str, Any]) -> dict[str, Any] | None:
            status = current.get("status") or {}
            reserved = wl_status.get_condition(status, "QuotaReserved")
            if not reserved or reserved["status"] != "True":
                return None
            return wl_status.drained(status, e, now, current["metadata"].get("generation"))

        written = await self._write(wl, compute)
        if written is None:
            return
        self.metrics.evicted.labels(cluster_queue=wl.cluster_queue or "", reason=e.reason, underlying_cause="").inc()
        self._event(written, "Workload", KUEUE_V1BETA2, "Normal", f"EvictedDueTo{e.reason}", e.message)

    async def _preempt(self, p: Preemption, now: datetime) -> None:
        victim = p.victim

        def compute(current: dict[str, Any]) -> dict[str, Any] | None:
            status = current.get("status") or {}
            admission = status.get("admission") or {}
            reserved = wl_status.get_condition(status, "QuotaReserved")
            if admission.get("clusterQueue") != victim.cluster_queue or not reserved or reserved["status"] != "True":
                return None  # no longer holds that quota: nothing to evict
            return wl_status.evicted(status, p, now, current["metadata"].get("generation"))

        written = await self._write(victim, compute)
        if written is None:
            return
        evicted_message, preempted_message = wl_status.eviction_messages(p)
        cause = p.target.rule.config if p.target.rule is not None else ""
        self.metrics.preempted.labels(preempting_cluster_queue=p.preemptor_cluster_queue, reason=p.target.reason).inc()
        self.metrics.evicted.labels(
            cluster_queue=victim.cluster_queue or "", reason="Preempted", underlying_cause=cause
        ).inc()
        priorities = (
            f"; preemptor effective priority: {_priorities(p.preemptor)}; "
            f"preemptee effective priority: {_priorities(victim)}"
        )
        self._event(written, "Workload", KUEUE_V1BETA2, "Normal", "EvictedDueToPreempted", evicted_message)
        self._event(written, "Workload", KUEUE_V1BETA2, "Normal", "Preempted", preempted_message + priorities)
        self._event(
            p.preemptor.obj.to_wire(),
            "Workload",
            KUEUE_V1BETA2,
            "Normal",
            "PreemptedWorkload",
            f"Preempted workload {victim.key} (UID: {victim.uid}) in ClusterQueue {victim.cluster_queue}{priorities}",
        )
        log.info("preempted %s for %s: %s", victim.key, p.preemptor.key, preempted_message)

    async def _admit(self, a: Admission, now: datetime) -> None:
        wl = a.workload

        def compute(current: dict[str, Any]) -> dict[str, Any] | None:
            status = current.get("status") or {}
            reserved = wl_status.get_condition(status, "QuotaReserved")
            if reserved is not None and reserved["status"] == "True":
                return None  # someone admitted it already
            return wl_status.admitted(status, a, now, current["metadata"].get("generation"))

        written = await self._write(wl, compute)
        if written is None:
            return
        self.metrics.admitted.labels(cluster_queue=a.cluster_queue).inc()
        waited = int((now - wl.created).total_seconds())
        self._event(
            written,
            "Workload",
            KUEUE_V1BETA2,
            "Normal",
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {a.cluster_queue}, wait time since queued was {waited}s",
        )
        self._event(
            written,
            "Workload",
            KUEUE_V1BETA2,
            "Normal",
            "Admitted",
            f"Admitted by ClusterQueue {a.cluster_queue}, wait time since reservation was 0s",
        )

    async def _pending(self, p: Pending, now: datetime) -> None:
        wl = p.workload

        def compute(current: dict[str, Any]) -> dict[str, Any] | None:
            status = current.get("status") or {}
            reserved = wl_status.get_condition(status, "QuotaReserved")
            if reserved is not None and reserved["status"] == "True":
                return None
            if reserved is not None and (reserved["reason"], reserved["message"]) == (p.reason, p.message):
                return None
            return wl_status.pending(status, p, now, current["metadata"].get("generation"))

        written = await self._write(wl, compute)
        if written is None:
            return
        if p.reason == "WaitingForPreemptedWorkloads":
            self._event(written, "Workload", KUEUE_V1BETA2, "Warning", p.reason, p.message)

    async def _notices(self) -> None:
        object_notices = [n for notices in self.cache.notices.values() for n in notices]
        for notice in [*object_notices, *self.configurable.notices]:
            if notice in self.posted_notices:
                continue
            self.posted_notices.add(notice)
            api_version = {
                "PreemptionConfig": "kueue.x-k8s.io/v1alpha1",
                "PriorityClass": "scheduling.k8s.io/v1",
            }.get(notice.kind, KUEUE_V1BETA2)
            obj = self.cache.objects.get(notice.kind, {}).get(notice.name)
            body = obj.to_wire() if obj is not None else {"metadata": {"name": notice.name}}
            self._event(body, notice.kind, api_version, "Warning", notice.reason, notice.message)
            log.warning("%s", notice.message)

    async def _queue_statuses(self, now: datetime) -> None:
        """ClusterQueue, LocalQueue and PreemptionConfig status; written only when it changes."""
        snapshot = self.cache.snapshot(now)
        for name, cq in snapshot.cluster_queues.items():
            obj = self.cache.objects["ClusterQueue"].get(name)
            if obj is None:
                continue
            pending = len(snapshot.pending.get(name, []))

            def cq_status(current: dict[str, Any], cq: Any = cq, pending: int = pending) -> dict[str, Any]:
                generation = current["metadata"].get("generation")
                return statuses.cluster_queue_status(cq, pending, current.get("status"), now, generation)

            self._store(await self.writer.update_status(resources.ClusterQueue, name, None, cq_status, obj.to_wire()))
        counts = statuses.local_queue_counts(snapshot)
        for lq in list(self.cache.objects["LocalQueue"].values()):
            lq_counts = counts.get((lq.namespace, lq.name), (0, 0))

            def lq_status(current: dict[str, Any], lq_counts: tuple[int, int] = lq_counts) -> dict[str, Any]:
                return statuses.local_queue_status(lq_counts, current.get("status"))

            self._store(
                await self.writer.update_status(resources.LocalQueue, lq.name, lq.namespace, lq_status, lq.to_wire())
            )
        users = statuses.config_users(snapshot)
        for name, config in list(self.cache.objects["PreemptionConfig"].items()):

            def pc_status(current: dict[str, Any], config: Any = config, name: str = name) -> dict[str, Any]:
                return statuses.preemption_config_status(config, users.get(name, []), current.get("status"), now)

            self._store(
                await self.writer.update_status(resources.PreemptionConfig, name, None, pc_status, config.to_wire())
            )
