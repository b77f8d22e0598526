"""The decision writer: a cycle's decisions from the moment they are decided until the API has
them, or has said no.

A decision (a StatusChange) is assumed in the cache as it is handed over, so the next cycle
decides against it; it is then queued (write_queue: a batch's evictions before its admissions),
written with a guarded JSON patch recomputed from the freshest copy, and reported (Events,
metrics) once written. A write that failed is forgotten (its quota is free again, decided anew);
one that may or may not have taken effect stays assumed while the object is read back until the
API answers. The decision object itself is the assumption's token: only its own write ends it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ..api import kinds
from ..engine import protection
from ..engine.cache import Cache
from ..engine.changes import CHECKS_READY, EVICTED, PREEMPTED, THROTTLED, EventNote, StatusChange
from ..engine.scheduler import LIMIT_BLOCKED_PREFIX
from ..k8s.api import ApiError
from ..k8s.events import EventSink
from ..k8s.writer import Outcome, StatusWriter, WriteResult
from .faults import Faults
from .feeder import CacheFeeder
from .metrics import Metrics
from .timeline import Preemption, Timeline, condition_time
from .wakeups import Wakeups
from .write_queue import WriteQueue

log = logging.getLogger(__name__)

MAX_INFLIGHT_WRITES = 8  # as Kueue issues preemptions; run --max-inflight-writes
RETRY_START = 1.0
VERIFY_START = 0.5  # first look at a workload whose write may or may not have taken effect
VERIFY_MAX = 10.0


DEACTIVATE_ATTEMPTS = 8
"""Tries of spec.active=false for a workload marked DeactivationTarget."""


class DecisionWriter:
    def __init__(
        self,
        cache: Cache,
        writer: StatusWriter,
        feeder: CacheFeeder,
        events: EventSink,
        metrics: Metrics,
        wakeups: Wakeups,
        faults: Faults | None = None,
        *,
        max_inflight_writes: int = MAX_INFLIGHT_WRITES,
        timeline: Timeline | None = None,
    ) -> None:
        self.cache = cache
        self.writer = writer
        self.feeder = feeder
        self.events = events
        self.metrics = metrics
        self.wakeups = wakeups
        self.faults = faults or Faults()
        self.timeline = timeline
        self.queue = WriteQueue(self._write, self._drop, max_inflight_writes)
        self.failed_writes = 0
        self._verifying: dict[int, asyncio.Task[None]] = {}
        """Decisions whose write may have taken effect: they stay assumed until a read says."""

    def apply(self, changes: Sequence[StatusChange]) -> None:
        """Assumes every decision in the cache, then queues its write; does not wait for it."""
        self.cache.assume(changes)
        self.faults.before_writes(changes)
        self.queue.submit(changes)

    @property
    def unwritten(self) -> int:
        """Admissions and evictions decided and not written yet."""
        return self.queue.quota_writes

    async def below(self, limit: int, quota_limit: int) -> None:
        """Until fewer than `limit` writes are queued and fewer than `quota_limit` admissions
        and evictions are unwritten (backpressure)."""
        await self.queue.below(limit, quota_limit)

    async def idle(self, deferred: bool = True) -> None:
        await self.queue.idle(deferred)

    def abandon(self) -> None:
        """Decisions of a term that ended are never written: quota a later leader handed out may
        be behind them. Their assumptions go with them."""
        dropped = self.queue.abandon()
        for change in dropped:
            if change.holds_quota or change.releases_quota:
                self.cache.forget(change.key, change)
        if dropped:
            log.info("no longer leading: %d decision(s) not written", len(dropped))

    async def stop(self) -> None:
        for task in self._verifying.values():
            task.cancel()
        abandoned = await self.queue.stop()
        if abandoned:
            log.info("stopping with %d write(s) not sent", abandoned)
        await asyncio.gather(*self._verifying.values(), return_exceptions=True)

    # -- one write

    def _drop(self, change: StatusChange) -> None:
        """A decision that will not be written (its batch's eviction failed): decided again."""
        self.cache.forget(change.key, change)
        self._unassumed(change)
        self.wakeups.wake_in(RETRY_START)

    def _unassumed(self, change: StatusChange) -> None:
        """An admission forgotten unwritten gives back the quota the cycles counted as taken:
        what was parked for want of it gets another look (as Kueue requeues a workload whose
        admission failed at once, ahead of its parked equivalents)."""
        if change.holds_quota and change.cluster_queue:
            self.wakeups.quota_released(change.cluster_queue)

    async def _write(self, change: StatusChange) -> WriteResult:
        wl = change.workload
        try:
            result = await self.writer.update_status(
                kinds.Workload,
                wl.name,
                wl.namespace,
                change.compute,
                latest=lambda: self._observed(wl.key),
                uid=wl.obj.metadata.uid,
            )
        except Exception as exc:  # the writer classifies what it knows; anything else fails this write only
            result = WriteResult(Outcome.FAILED, error=repr(exc))
        if result.outcome is Outcome.GONE:
            self.feeder.gone("Workload", wl.key, wl.obj.metadata.uid)
            return result
        if result.outcome is Outcome.UNKNOWN and (change.holds_quota or change.releases_quota):
            # Forgetting it now could hand the same quota out twice: the decision stays assumed
            # until the API says what happened.
            self._failed(result)
            log.warning(
                "%s of %s may or may not have been written (%s); holding it until the API answers",
                change.action,
                wl.key,
                result.error,
            )
            self._verifying[id(change)] = asyncio.create_task(self._read_back(change), name=f"verify {change.key}")
            return result
        if result.body is not None:
            self.feeder.ingest("Workload", result.body, result.based_on)  # before forgetting: no gap without the quota
        if change.deactivate and result.outcome in (Outcome.WRITTEN, Outcome.UNCHANGED):
            await self._deactivate(change)  # while still assumed: no pass decides it again meanwhile
        if change.holds_quota or change.releases_quota:
            self.cache.forget(wl.key, change)  # only its own: a later decision may be assumed now
            if result.outcome is not Outcome.WRITTEN:
                self._unassumed(change)
        if result.outcome is Outcome.WRITTEN:
            assert result.body is not None
            self._report(change, result.body)
            if change.releases_quota and change.cluster_queue:
                self.wakeups.quota_released(change.cluster_queue)
        elif result.outcome in (Outcome.FAILED, Outcome.FENCED, Outcome.UNKNOWN):
            self._failed(result)
            if result.outcome is not Outcome.FENCED:
                log.warning("%s of %s not written: %s", change.action, wl.key, result.error)
                self.wakeups.wake_in(RETRY_START)  # decided again shortly
            else:
                log.debug("%s of %s not sent: the lease deadline has passed", change.action, wl.key)
        return result

    async def _deactivate(self, change: StatusChange) -> None:
        """spec.active=false after the DeactivationTarget mark (Kueue's workload controller does
        the same); the uid in the patch makes it apply to that object only. Tried again with a
        growing pause until it is written, the object is gone or this replica no longer leads:
        the mark keeps the engine from deciding it again."""
        wl = change.workload
        patch = {"metadata": {"uid": wl.obj.metadata.uid}, "spec": {"active": False}}
        pause = VERIFY_START
        for _ in range(DEACTIVATE_ATTEMPTS):
            if not self.writer.fence():
                return
            try:
                body = await self.writer.api.patch_merge(kinds.Workload.path(wl.name, wl.namespace), patch)
            except ApiError as exc:
                if exc.code in (404, 409):  # gone, or another object under that name now
                    return
                log.warning("deactivating %s failed: %s", wl.key, exc)
                await asyncio.sleep(pause)
                pause = min(VERIFY_MAX, pause * 2)
                continue
            self.feeder.ingest("Workload", body)
            log.info("deactivated %s: %s", wl.key, change.record.get("message", ""))
            return
        log.warning("gave up deactivating %s after %d attempts", wl.key, DEACTIVATE_ATTEMPTS)

    def _failed(self, result: WriteResult) -> None:
        self.failed_writes += 1
        self.metrics.failed_writes.labels(outcome=result.outcome.value).inc()

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
                        self.feeder.gone("Workload", key, change.workload.obj.metadata.uid)
                        return
                    log.debug("reading %s back failed: %s", key, exc)
                    continue
                self.feeder.ingest("Workload", body)
                self.cache.forget(key, change)
                self._unassumed(change)  # if it did not take effect (harmless if it did)
                self.wakeups.poke()
                return
        finally:
            self._verifying.pop(id(change), None)

    def _observed(self, key: str) -> dict[str, Any] | None:
        """The freshest copy of a Workload the cache holds (write answers and watch events)."""
        obj = self.cache.objects["Workload"].get(key)
        return obj.status_view() if obj is not None else None

    # -- telling people

    def _report(self, change: StatusChange, body: dict[str, Any]) -> None:
        """Events and metrics for a change that was written."""
        for note in change.events:
            self._event(note, body, change)
            if note.reason == THROTTLED and note.about == "workload":
                limit = note.message.removeprefix(LIMIT_BLOCKED_PREFIX).strip().split(";")[0]
                self.metrics.limit_throttled.labels(preemption_limit=limit).inc()
                log.info(
                    "preemption by %s in ClusterQueue %s throttled: %s", change.key, change.cluster_queue, note.message
                )
        wl = change.workload
        if change.holds_quota:
            log.debug("admitted %s in ClusterQueue %s", change.key, change.cluster_queue)
            waited = max(0.0, (datetime.now(UTC) - protection.pending_since(wl)).total_seconds())
            checked = bool(change.record.get("admissionChecks"))
            self.metrics.admitted_workload(change.cluster_queue, wl.priority_class_name, waited, checked=checked)
        elif change.action == CHECKS_READY:
            waited = max(0.0, (datetime.now(UTC) - protection.pending_since(wl)).total_seconds())
            reserved = wl.condition("QuotaReserved")
            since = (datetime.now(UTC) - reserved.last_transition_time).total_seconds() if reserved else 0.0
            self.metrics.checks_ready(change.cluster_queue, wl.priority_class_name, waited, max(0.0, since))
        elif change.action == PREEMPTED:
            self.metrics.preempted_workload(
                change.preemptor_cluster_queue, change.reason, change.underlying_cause, change.rule
            )
            self.metrics.evicted_workload(
                change.cluster_queue, "Preempted", change.underlying_cause, wl.priority_class_name
            )
            preemptor = change.preemptor.key if change.preemptor is not None else ""
            log.info("preempted %s for %s: %s", change.key, preemptor, change.record.get("message", ""))
            if self.timeline is not None:
                self.timeline.add(
                    Preemption(
                        at=time.time(),
                        preemptor=preemptor,
                        preemptor_cluster_queue=change.preemptor_cluster_queue,
                        victim=change.key,
                        victim_cluster_queue=change.cluster_queue,
                        reason=change.reason,
                        rule=change.rule or "",
                        message=str(change.record.get("message", "")),
                        condition_at=condition_time(body, "Preempted"),  # what the echo says too
                    )
                )
        elif change.action == EVICTED:  # not RELEASED: that eviction was counted when it was made
            self.metrics.evicted_workload(
                change.cluster_queue, change.reason, change.underlying_cause, wl.priority_class_name
            )

    def _event(self, note: EventNote, body: dict[str, Any], change: StatusChange) -> None:
        if note.about == "clusterQueue":
            cq = self.cache.objects["ClusterQueue"].get(change.cluster_queue)
            if cq is not None:
                api_version = kinds.ClusterQueue.api_version
                self.events.record(cq.to_wire(), "ClusterQueue", api_version, note.type, note.reason, note.message)
            return
        obj = body
        if note.about == "preemptor" and change.preemptor is not None:
            held = self.cache.objects["Workload"].get(change.preemptor.key)
            obj = held.to_wire() if held is not None else change.preemptor.obj.to_wire()
        self.events.record(obj, "Workload", kinds.Workload.api_version, note.type, note.reason, note.message)
