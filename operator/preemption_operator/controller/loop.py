"""The scheduling loop: one cycle at a time, woken by changes and coalesced under load.

Each cycle cuts a snapshot from the cache (what the API says, plus the decisions whose writes are
in flight), lets the engine decide, assumes the decisions in the cache and hands them to the
write queue; it does not wait for them. A written decision comes back into the cache from the
API's answer, a failed one is forgotten (its quota is free again). So no cycle can hand out quota
that a write in flight is taking, a victim is not evicted twice (Kueue's assume/forget and
expectations), and writes never hold up the next decision.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from ..api import kinds
from ..api.kinds import Kind
from ..engine import CycleResult, Engine, QueueState, protection
from ..engine.cache import Cache
from ..engine.changes import EVICTED, PREEMPTED, EventNote, StatusChange, status_changes
from ..engine.notices import Notice
from ..engine.workload import WorkloadInfo
from ..k8s.api import ApiError
from ..k8s.writer import Outcome, StatusWriter, WriteResult
from . import queue_status
from .faults import Faults
from .feeder import CacheFeeder
from .linter import Linter, setup_wires
from .metrics import Metrics
from .write_queue import WriteQueue

log = logging.getLogger(__name__)

WRITE_PARALLELISM = 8  # as Kueue issues preemptions
WRITE_BACKLOG = 512  # writes queued before the loop waits for the API to catch up
# Admissions and evictions decided but not written yet. Every one of them is assumed: a cycle
# far ahead of the API sees queues filled by admissions nobody is running yet, and preempts
# for room that writing would have shown to be free. Under Kueue's harness at 1/10 scale,
# 512 gave ~300 evictions, 32 ~300, 8 ~120, 4 ~60 (Kueue: 40-60), with time to admission
# shorter each step (benchmarks/results/kueue-harness.md). A cycle's first round is not
# bounded by it: a burst still goes out in parallel.
QUOTA_BACKLOG = 4
STATUS_INTERVAL_SECONDS = 1.0  # queue statuses, as Kueue batches them
STATUS_PARALLELISM = 4
ROUNDS_PER_CYCLE = 64  # consecutive Kueue cycles decided before one batch of writes
RETRY_START = 1.0
VERIFY_START = 0.5  # first look at a workload whose write may or may not have taken effect
VERIFY_MAX = 10.0


class EventSink(Protocol):
    def record(self, obj: dict[str, Any], kind: str, api_version: str, type_: str, reason: str, message: str) -> None:
        """Never blocks, never raises."""


class SchedulingLoop:
    def __init__(
        self,
        cache: Cache,
        writer: StatusWriter,
        events: EventSink,
        metrics: Metrics,
        leading: Callable[[], bool],
        *,
        relist: Callable[[], Awaitable[None]] | None = None,
        faults: Faults | None = None,
        coalesce_seconds: float = 0.01,
        resync_seconds: float = 30.0,
        rounds: int = ROUNDS_PER_CYCLE,
        job_stops: Callable[[WorkloadInfo], bool] = lambda wl: False,
    ) -> None:
        self.cache = cache
        self.job_stops = job_stops
        """Which workloads a job integration stops: their quota comes back once the job has."""
        self.linter = Linter(lambda: setup_wires(cache.objects), leading, metrics, self._linted)
        """lint on configuration changes, off the event loop: its verdicts go on PreemptionConfig statuses."""
        self.feeder = CacheFeeder(cache, self, setup_changed=self.linter.changed)
        self.writer = writer
        self.events = events
        self.metrics = metrics
        self.leading = leading
        self.relist = relist
        self.faults = faults or Faults()
        self.coalesce_seconds = coalesce_seconds
        self.resync_seconds = resync_seconds
        self.state = QueueState()
        self.engine = Engine(rounds=rounds)
        self.config_notices: list[Notice] = []
        """What the last cycle found wrong with the PreemptionConfigs it read."""
        self.wake = asyncio.Event()
        self.released: set[str] = set()
        self.posted: set[Notice] = set()
        self.cycles = 0
        self.term_cycles = 0
        """Cycles decided since this replica last took the lead. The job controller gives a
        stopped job's quota back only after one: that cycle has seen the preemptors waiting for
        it (QueueState starts empty with each term), so the quota goes to them."""
        self.heartbeat = time.monotonic()
        """When the loop last completed a pass (a cycle, or a standby's check): liveness reads it."""
        self.pending_queues: set[str] = set()
        self.busy = False
        self.writes = WriteQueue(self._write, self._drop, WRITE_PARALLELISM)
        self.statuses_due = asyncio.Event()
        self.failed_writes = 0
        self._verifying: dict[int, asyncio.Task[None]] = {}
        """Workloads whose write may have taken effect: their decision stays assumed until a read says."""
        self._was_leading = False
        self._wake_deadline = math.inf

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

    def _wake_in(self, seconds: float) -> None:
        """One pending wake-up, the earliest asked for (not one timer per request)."""
        self._wake_deadline = min(self._wake_deadline, time.monotonic() + max(0.0, seconds))

    def _wake_at(self, moment: datetime) -> None:
        """Runs a cycle when a preemption delay or a protection ends, even if nothing else changes."""
        self._wake_in(min(self.resync_seconds, (moment - datetime.now(UTC)).total_seconds() + 0.5))

    # -- the loop ----------------------------------------------------------------------------

    async def run(self, synced: asyncio.Event) -> None:
        await synced.wait()
        publisher = asyncio.create_task(self._publish_statuses(), name="queue-statuses")
        linter = asyncio.create_task(self.linter.run(), name="lint")
        try:
            await self._decide(synced)
        finally:
            publisher.cancel()
            linter.cancel()
            self.linter.close()  # an analysis in flight is abandoned, never waited for
            for task in self._verifying.values():
                task.cancel()
            abandoned = await self.writes.stop()
            if abandoned:
                log.info("stopping with %d write(s) not sent", abandoned)
            await asyncio.gather(publisher, linter, *self._verifying.values(), return_exceptions=True)

    async def _decide(self, synced: asyncio.Event) -> None:
        resync_at = time.monotonic() + self.resync_seconds
        while True:
            deadline = min(resync_at, self._wake_deadline)
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    await self.wake.wait()
            except TimeoutError:
                pass
            moment = time.monotonic()
            if moment >= self._wake_deadline:
                self._wake_deadline = math.inf
            if moment >= resync_at:
                resync_at = moment + self.resync_seconds
                self.config_changed()
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
            await self.writes.below(WRITE_BACKLOG, QUOTA_BACKLOG)
            self.wake.clear()
            if not self.leading():
                if self._was_leading:
                    self._abandon_writes()
                self._was_leading = False
                self.term_cycles = 0
                self.heartbeat = time.monotonic()
                continue
            try:
                if not self._was_leading:
                    await self._take_over()
                await self.cycle()
                self.term_cycles += 1
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scheduling cycle failed; retrying")
                self._wake_in(RETRY_START)
                continue
            self.heartbeat = time.monotonic()

    def _abandon_writes(self) -> None:
        """Decisions of a term that ended are never written: quota a later leader handed out may
        be behind them. Their assumptions go with them."""
        dropped = self.writes.abandon()
        for change in dropped:
            if change.holds_quota or change.releases_quota:
                self.cache.forget(change.key, change)
        if dropped:
            log.info("no longer leading: %d decision(s) not written", len(dropped))

    async def _take_over(self) -> None:
        """A new leader starts from a fresh list, not from what its watches delivered so far: the
        previous leader's last writes may still be on their way."""
        self._abandon_writes()
        if self.relist is not None:
            await self.relist()
        self.state = QueueState()
        self.posted = set()
        self._was_leading = True
        self.linter.changed()  # a setup this replica has not analysed yet gets its verdict

    async def cycle(self) -> CycleResult:
        started = time.perf_counter()
        now = datetime.now(UTC).replace(microsecond=0)
        snapshot = self.cache.snapshot(now)
        if self.released:
            self.state.quota_released(snapshot, self.released)
            self.released = set()
        result = self.engine.cycle(snapshot, self.state, budget=max(1, QUOTA_BACKLOG - self.writes.quota_writes))
        self.config_notices = result.notices
        self.metrics.decision_seconds.observe(time.perf_counter() - started)
        if result.retry_at is not None:
            self._wake_at(result.retry_at)
        changes = status_changes(result, now, self.job_stops)
        self._apply(changes)
        self._post_notices()
        counts = {name: len(queue) for name, queue in snapshot.pending.items()}
        for name in self.pending_queues | set(counts):
            self.metrics.pending.labels(cluster_queue=name).set(counts.get(name, 0))
        self.pending_queues = set(counts)
        self.statuses_due.set()
        self.cycles += 1
        self.metrics.cycle_seconds.observe(time.perf_counter() - started)
        self.busy = result.changed
        if result.changed:
            self.poke()
        return result

    # -- writing decisions -------------------------------------------------------------------

    def _apply(self, changes: Sequence[StatusChange]) -> None:
        """Assumes every decision in the cache, then queues its write (see write_queue)."""
        self.cache.assume(changes)
        self.faults.before_writes(changes)
        self.writes.submit(changes)

    def _drop(self, change: StatusChange) -> None:
        """A decision that will not be written (its batch's eviction failed): decided again."""
        self.cache.forget(change.key, change)
        self._wake_in(RETRY_START)

    async def _write(self, change: StatusChange) -> WriteResult:
        wl = change.workload
        try:
            result = await self.writer.update_status(
                kinds.Workload, wl.name, wl.namespace, change.compute, latest=lambda: self._observed(wl.key)
            )
        except Exception as exc:  # the writer classifies what it knows; anything else fails this write only
            result = WriteResult(Outcome.FAILED, error=repr(exc))
        if result.outcome is Outcome.GONE:
            self.feeder.gone("Workload", wl.key)
            return result
        if result.outcome is Outcome.UNKNOWN and (change.holds_quota or change.releases_quota):
            # Forgetting it now could hand the same quota out twice: the decision stays assumed
            # until the API says what happened.
            self.failed_writes += 1
            self.metrics.failed_writes.labels(outcome=result.outcome.value).inc()
            log.warning(
                "%s of %s may or may not have been written (%s); holding it until the API answers",
                change.action,
                wl.key,
                result.error,
            )
            self._verify(change)
            return result
        if result.body is not None:
            self.feeder.ingest("Workload", result.body)  # before forgetting: no gap without the quota
        if change.holds_quota or change.releases_quota:
            self.cache.forget(wl.key, change)  # only its own: a later decision may be assumed now
        if result.outcome is Outcome.WRITTEN:
            assert result.body is not None
            self._report(change, result.body)
            if change.releases_quota and change.cluster_queue:
                self.quota_released(change.cluster_queue)
        elif result.outcome in (Outcome.FAILED, Outcome.FENCED, Outcome.UNKNOWN):
            self.failed_writes += 1
            self.metrics.failed_writes.labels(outcome=result.outcome.value).inc()
            if result.outcome is not Outcome.FENCED:
                log.warning("%s of %s not written: %s", change.action, wl.key, result.error)
                self._wake_in(RETRY_START)  # decided again shortly
            else:
                log.debug("%s of %s not sent: the lease deadline has passed", change.action, wl.key)
        return result

    def _verify(self, change: StatusChange) -> None:
        self._verifying[id(change)] = asyncio.create_task(self._read_back(change), name=f"verify {change.key}")

    async def _read_back(self, change: StatusChange) -> None:
        """Reads a workload until the API answers, then takes that answer for the truth."""
        key, name, namespace = change.key, change.workload.name, change.workload.namespace
        pause = VERIFY_START
        try:
            while True:
                await asyncio.sleep(pause)
                pause = min(VERIFY_MAX, pause * 2)
                try:
                    body = await self.writer.api.get(kinds.Workload.path(name, namespace))
                except ApiError as exc:
                    if exc.code == 404:
                        self.feeder.gone("Workload", key)
                        return
                    log.debug("reading %s back failed: %s", key, exc)
                    continue
                self.feeder.ingest("Workload", body)
                self.cache.forget(key, change)
                self.poke()
                return
        finally:
            self._verifying.pop(id(change), None)

    def _observed(self, key: str) -> dict[str, Any] | None:
        """The freshest copy of a Workload the cache holds (write answers and watch events)."""
        obj = self.cache.objects["Workload"].get(key)
        return obj.to_wire() if obj is not None else None

    def _report(self, change: StatusChange, body: dict[str, Any]) -> None:
        """Events and metrics for a change that was written."""
        for note in change.events:
            self._event(note, body, change)
        wl = change.workload
        if change.holds_quota:
            waited = max(0.0, (datetime.now(UTC) - protection.pending_since(wl)).total_seconds())
            self.metrics.admitted_workload(change.cluster_queue, wl.priority_class_name, waited)
        elif change.action == PREEMPTED:
            self.metrics.preempted_workload(
                change.preemptor_cluster_queue, change.reason, change.underlying_cause, change.rule
            )
            self.metrics.evicted_workload(
                change.cluster_queue, "Preempted", change.underlying_cause, wl.priority_class_name
            )
            preemptor = change.preemptor.key if change.preemptor is not None else ""
            log.info("preempted %s for %s: %s", change.key, preemptor, change.record.get("message", ""))
        elif change.action == EVICTED:  # not RELEASED: that eviction was counted when it was made
            self.metrics.evicted_workload(change.cluster_queue, change.reason, "", wl.priority_class_name)

    def _event(self, note: EventNote, body: dict[str, Any], change: StatusChange) -> None:
        obj = body
        if note.about == "preemptor" and change.preemptor is not None:
            held = self.cache.objects["Workload"].get(change.preemptor.key)
            obj = held.to_wire() if held is not None else change.preemptor.obj.to_wire()
        self.events.record(obj, "Workload", kinds.Workload.api_version, note.type, note.reason, note.message)

    def _post_notices(self) -> None:
        """Warnings about objects, once each while the problem lasts (again if it comes back)."""
        current = {
            *(n for notices in self.cache.notices.values() for n in notices),
            *self.cache.workload_notices(),
            *self.config_notices,
            *self.feeder.notices(),
            *self.linter.notices,
        }
        for notice in sorted(current - self.posted, key=lambda n: (n.kind, n.name, n.reason, n.message)):
            obj = self.cache.objects.get(notice.kind, {}).get(notice.name)
            ref = self.feeder.reference(notice.kind, notice.name)
            if ref is not None:
                body = {"metadata": ref}
            elif obj is not None:
                body = obj.to_wire()
            else:
                namespace, _, name = notice.name.rpartition("/")
                body = {"metadata": {"name": name, **({"namespace": namespace} if namespace else {})}}
            api_version = kinds.BY_NAME[notice.kind].api_version
            self.events.record(body, notice.kind, api_version, "Warning", notice.reason, notice.message)
            log.warning("%s", notice.message)
        self.posted = current

    def _linted(self) -> None:
        """An analysis ended: its Warnings go out now, its conditions with the next statuses (a
        term not taken over yet posts them when it is)."""
        if self._was_leading and self.leading():
            self._post_notices()
        self.statuses_due.set()

    async def _publish_statuses(self) -> None:
        """ClusterQueue, Cohort, LocalQueue and PreemptionConfig status at most once a second (as Kueue
        batches them), after any cycle: current within a second of the queue settling."""
        while True:
            await self.statuses_due.wait()
            self.statuses_due.clear()
            started = time.monotonic()
            if self.leading():
                try:
                    await self._queue_statuses(datetime.now(UTC).replace(microsecond=0))
                except asyncio.CancelledError:
                    raise
                except Exception:  # a status for people must never stop scheduling
                    log.exception("writing queue statuses failed")
            await asyncio.sleep(max(0.0, STATUS_INTERVAL_SECONDS - (time.monotonic() - started)))

    async def _queue_statuses(self, now: datetime) -> None:
        """Every queue's status; only those that change are written, a few at a time."""
        snapshot = self.cache.snapshot(now)
        writes: list[tuple[Kind, str, str | None, Any, dict[str, Any]]] = []
        unreadable = {key: n.message for (kind, key), n in self.feeder.invalid.items() if kind == "PreemptionConfig"}
        queue_shares, cohort_shares = queue_status.weighted_shares(snapshot)
        for name, cq in snapshot.cluster_queues.items():
            obj = self.cache.objects["ClusterQueue"].get(name)
            if obj is None:
                continue
            pending = len(snapshot.pending.get(name, []))

            def cq_status(
                current: dict[str, Any],
                cq: Any = cq,
                pending: int = pending,
                share: float | None = queue_shares.get(name),
            ) -> dict[str, Any]:
                generation = current["metadata"].get("generation")
                return queue_status.cluster_queue_status(
                    cq,
                    pending,
                    current.get("status"),
                    now,
                    generation,
                    snapshot.preemption_configs,
                    unreadable,
                    share,
                    snapshot.fair_sharing.enabled,
                )

            writes.append((kinds.ClusterQueue, name, None, cq_status, obj.to_wire()))
        for name, cohort in list(self.cache.objects["Cohort"].items()):

            def co_status(current: dict[str, Any], share: float | None = cohort_shares.get(name)) -> dict[str, Any]:
                return queue_status.cohort_status(share, current.get("status"))

            writes.append((kinds.Cohort, name, None, co_status, cohort.to_wire()))
        counts = queue_status.local_queue_counts(snapshot)
        for lq in list(self.cache.objects["LocalQueue"].values()):
            lq_counts = counts.get((lq.namespace, lq.name), (0, 0))

            def lq_status(current: dict[str, Any], lq_counts: tuple[int, int] = lq_counts) -> dict[str, Any]:
                return queue_status.local_queue_status(lq_counts, current.get("status"))

            writes.append((kinds.LocalQueue, lq.name, lq.namespace, lq_status, lq.to_wire()))
        users = queue_status.config_users(snapshot)
        for name, config in list(self.cache.objects["PreemptionConfig"].items()):

            def pc_status(current: dict[str, Any], config: Any = config, name: str = name) -> dict[str, Any]:
                return queue_status.preemption_config_status(
                    config,
                    users.get(name, []),
                    current.get("status"),
                    now,
                    self.linter.result,
                    snapshot.fair_sharing.enabled,
                )

            writes.append((kinds.PreemptionConfig, name, None, pc_status, config.to_wire()))
        # Unchanged ones cost no request: compute first, send only what differs.
        changed = [w for w in writes if (new := w[3](w[4])) is not None and new != (w[4].get("status") or {})]
        limit = asyncio.Semaphore(STATUS_PARALLELISM)

        async def bounded(write: tuple[Kind, str, str | None, Any, dict[str, Any]]) -> None:
            async with limit:
                await self._write_status(*write)

        await asyncio.gather(*(bounded(w) for w in changed))
        self.metrics.queue_gauges(queue_status.queue_figures(snapshot, self.state.inadmissible))
        cohort_of = {name: cq.cohort or "" for name, cq in snapshot.cluster_queues.items()}
        self.metrics.weighted_shares(
            {name: (cohort_of[name], share) for name, share in queue_shares.items()},
            {name: share for name, share in cohort_shares.items() if name in self.cache.objects["Cohort"]},
        )
        self.metrics.forget_cluster_queues(set(snapshot.cluster_queues))

    async def _write_status(
        self, kind: Kind, name: str, namespace: str | None, compute: Any, current: dict[str, Any]
    ) -> None:
        try:
            result = await self.writer.update_status(kind, name, namespace, compute, current)
        except Exception as exc:  # a status for people must never stop scheduling
            log.warning("status of %s %s not written: %r", kind.name, name, exc)
            return
        if result.outcome is Outcome.GONE:
            self.feeder.gone(kind.name, f"{namespace}/{name}" if namespace else name)
        elif result.body is not None:
            self.feeder.ingest(kind.name, result.body)
        elif result.outcome is Outcome.FAILED:
            log.warning("status of %s %s not written: %s", kind.name, name, result.error)
