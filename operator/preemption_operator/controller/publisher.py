"""The queue-status publisher: ClusterQueue, Cohort, LocalQueue and PreemptionConfig statuses, and
the queue gauges, at most once a second (as Kueue batches them) after any cycle: current within
a second of the queues settling. The statuses themselves are computed by queue_status (pure);
only those that change are written, a few at a time."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from ..api import kinds
from ..engine.cache import Cache
from ..k8s.writer import Outcome, StatusWriter
from . import queue_status
from .feeder import CacheFeeder
from .linter import LintResult
from .metrics import Metrics
from .wakeups import loop_time

log = logging.getLogger(__name__)

INTERVAL_SECONDS = 1.0
COUNTS_EVERY = timedelta(seconds=60)
"""How often a PreemptionLimit's status.count is refreshed: for reference only (Kueue's proposal
writes it about every minute), while its Valid condition follows every change."""
PARALLELISM = 4

StatusWrite = tuple[kinds.Kind, str, str | None, Callable[[dict[str, Any]], dict[str, Any] | None], dict[str, Any]]
"""(kind, name, namespace, current object -> new status, current object)."""


class QueueStatusPublisher:
    def __init__(
        self,
        cache: Cache,
        writer: StatusWriter,
        feeder: CacheFeeder,
        metrics: Metrics,
        leading: Callable[[], bool],
        lint: Callable[[], LintResult | None],
        parked: Callable[[], Mapping[str, set[str]]],
    ) -> None:
        """`lint`: the last analysis of the setup; `parked`: the scheduler's inadmissible workloads."""
        self.cache = cache
        self.writer = writer
        self.feeder = feeder
        self.metrics = metrics
        self.leading = leading
        self.lint = lint
        self.parked = parked
        self._due = asyncio.Event()
        self._pending_queues: set[str] = set()
        self._counted_at: datetime | None = None
        """When the PreemptionLimits' counts were last written (None: not yet this term)."""
        self._views: dict[tuple[str, str], tuple[str | None, dict[str, Any]]] = {}
        """Each object's status view by resourceVersion: every pass looks at every queue, and
        most have not changed since the last one."""
        self._seen: dict[tuple[str, str], tuple[str | None, dict[str, Any]]] = {}

    def due(self) -> None:
        """Something changed (a cycle, an analysis): publish within the interval."""
        self._due.set()

    async def run(self) -> None:
        """Publishes once per interval while something is due; a pass whose writes did not all
        land is due again (nothing else may come to trigger one once the queues settle)."""
        while True:
            await self._due.wait()
            self._due.clear()
            started = loop_time()
            if self.leading():
                try:
                    await self.publish(datetime.now(UTC).replace(microsecond=0))
                except asyncio.CancelledError:
                    raise
                except Exception:  # a status for people must never stop scheduling
                    log.exception("writing queue statuses failed")
                    self._due.set()
            await asyncio.sleep(max(0.0, INTERVAL_SECONDS - (loop_time() - started)))

    def _view(self, obj: Any) -> dict[str, Any]:
        """The object's status view (see TopLevel.status_view), reused while its resourceVersion
        stays the same. The compute functions copy before they change anything."""
        key = (obj.kind, obj.key)
        version = obj.metadata.resource_version
        held = self._views.get(key)
        if held is None or version is None or held[0] != version:
            held = (version, obj.status_view())
        self._seen[key] = held
        return held[1]

    async def publish(self, now: datetime) -> None:
        """Every queue's status; only those that change are written, a few at a time."""
        self._seen = {}
        snapshot = self.cache.snapshot(now)
        writes: list[StatusWrite] = []
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

            writes.append((kinds.ClusterQueue, name, None, cq_status, self._view(obj)))
        for name, cohort in list(self.cache.objects["Cohort"].items()):

            def co_status(current: dict[str, Any], share: float | None = cohort_shares.get(name)) -> dict[str, Any]:
                return queue_status.cohort_status(share, current.get("status"))

            writes.append((kinds.Cohort, name, None, co_status, self._view(cohort)))
        counts = queue_status.local_queue_counts(snapshot)
        for lq in list(self.cache.objects["LocalQueue"].values()):
            lq_counts = counts.get((lq.namespace, lq.name), (0, 0))

            def lq_status(current: dict[str, Any], lq_counts: tuple[int, int] = lq_counts) -> dict[str, Any]:
                return queue_status.local_queue_status(lq_counts, current.get("status"))

            writes.append((kinds.LocalQueue, lq.name, lq.namespace, lq_status, self._view(lq)))
        users = queue_status.config_users(snapshot)
        lint = self.lint()
        for name, config in list(self.cache.objects["PreemptionConfig"].items()):

            def pc_status(current: dict[str, Any], config: Any = config, name: str = name) -> dict[str, Any]:
                return queue_status.preemption_config_status(
                    config, users.get(name, []), current.get("status"), now, lint, snapshot.fair_sharing.enabled
                )

            writes.append((kinds.PreemptionConfig, name, None, pc_status, self._view(config)))
        writes += self._limit_writes(now)
        self._views = self._seen  # objects gone since the last pass are forgotten
        # Unchanged ones cost no request: compute first, send only what differs.
        changed = [w for w in writes if (new := w[3](w[4])) is not None and new != (w[4].get("status") or {})]
        limit = asyncio.Semaphore(PARALLELISM)

        async def bounded(write: StatusWrite) -> None:
            async with limit:
                await self._write(*write)

        await asyncio.gather(*(bounded(w) for w in changed))
        counts_now = {name: len(queue) for name, queue in snapshot.pending.items()}
        for name in self._pending_queues | set(counts_now):
            self.metrics.pending.labels(cluster_queue=name).set(counts_now.get(name, 0))
        self._pending_queues = set(counts_now)
        self.metrics.queue_gauges(queue_status.queue_figures(snapshot, self.parked()))
        cohort_of = {name: cq.cohort or "" for name, cq in snapshot.cluster_queues.items()}
        self.metrics.weighted_shares(
            {name: (cohort_of[name], share) for name, share in queue_shares.items()},
            {name: share for name, share in cohort_shares.items() if name in self.cache.objects["Cohort"]},
        )
        self.metrics.forget_cluster_queues(set(snapshot.cluster_queues))

    def _limit_writes(self, now: datetime) -> list[StatusWrite]:
        """Each PreemptionLimit's Valid condition; its counts too when due. The gauges follow
        every pass."""
        limits = list(self.cache.objects["PreemptionLimit"].items())
        book = self.cache.limits(now) if limits else None
        problems = book.problems() if book is not None else {}
        due = self._counted_at is None or now - self._counted_at >= COUNTS_EVERY
        if due:
            self._counted_at = now
        writes: list[StatusWrite] = []
        figures: dict[str, tuple[int, int]] = {}
        for name, limit in limits:
            counts = book.counts(name, now) if book is not None and name not in problems else {}
            figures[name] = (max(counts.values(), default=0), limit.spec.limit)

            def pl_status(
                current: dict[str, Any],
                generation: int | None = limit.metadata.generation,
                problem: str | None = problems.get(name),
                counts: dict[str, int] | None = counts if due else None,
            ) -> dict[str, Any]:
                return queue_status.preemption_limit_status(generation, problem, counts, current.get("status"), now)

            writes.append((kinds.PreemptionLimit, name, None, pl_status, self._view(limit)))
        self.metrics.preemption_limits(figures)
        return writes

    async def _write(
        self,
        kind: kinds.Kind,
        name: str,
        namespace: str | None,
        compute: Callable[[dict[str, Any]], dict[str, Any] | None],
        current: dict[str, Any],
    ) -> None:
        try:
            result = await self.writer.update_status(kind, name, namespace, compute, current)
        except Exception as exc:  # a status for people must never stop scheduling
            log.warning("status of %s %s not written: %r", kind.name, name, exc)
            self._due.set()  # next interval: the queues may have settled, with nothing to cycle
            return
        if result.outcome in (Outcome.FAILED, Outcome.UNKNOWN):
            self._due.set()
        if result.outcome is Outcome.GONE:
            key = f"{namespace}/{name}" if namespace else name
            self.feeder.gone(kind.name, key, (current.get("metadata") or {}).get("uid"))
        elif result.body is not None:
            self.feeder.ingest(kind.name, result.body, result.based_on)
        elif result.outcome is Outcome.FAILED:
            log.warning("status of %s %s not written: %s", kind.name, name, result.error)
