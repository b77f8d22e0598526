"""The queue-status publisher: ClusterQueue, Cohort, LocalQueue and PreemptionConfig statuses, and
the queue gauges, computed at most once a second (as Kueue batches them) after any cycle. The
statuses themselves are computed by queue_status (pure); only those that change are written.

The second runs from when a pass's writes have landed, up to a second more: an API server slow
to answer (a busy one) sees the passes back off to one in two seconds at most, rather than a
status write of every queue each second on top of the admissions and the job controllers' own
writes (in Kueue's harness at 1/10 scale the writes of a pass took 0.8 s on average, and runs
of the operator alone, with and without the back-off, took 32.1/32.6/30.8 s against
36.0/37.6/33.7 s). An idle one sees a pass a second, as Kueue's.

Writes do not hold up the next pass: each object that differs waits in a queue keyed by the
object (a newer pass replaces its status there, keeping its place), ClusterQueues ahead of the
rest, and a few writers drain it, each object written from the freshest copy held. With a
thousand queues a pass can have more to write than a second allows; the queues that changed
first are written first and none is written twice for one change."""

from __future__ import annotations

import asyncio
import contextlib
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
BACKOFF_SECONDS = 1.0
"""The most a pass waits beyond INTERVAL_SECONDS for the last one's writes to land."""
COUNTS_EVERY = timedelta(seconds=60)
"""How often a PreemptionLimit's status.count is refreshed: for reference only (Kueue's proposal
writes it about every minute), while its Valid condition follows every change."""
PARALLELISM = 4

StatusWrite = tuple[kinds.Kind, str, str | None, Callable[[dict[str, Any]], dict[str, Any] | None], dict[str, Any]]
"""(kind, name, namespace, current object -> new status, current object)."""
FIRST = ("ClusterQueue",)
"""Kinds written ahead of the rest: the quota people, dashboards and Kueue's checker read."""
REST_EVERY = 4
"""While both wait, one write in this many goes to the rest (LocalQueues...), so none starves."""
PUBLISHED = frozenset({"ClusterQueue", "Cohort", "LocalQueue", "PreemptionConfig", "PreemptionLimit"})


def _key(name: str, namespace: str | None) -> str:
    """An object's key in the cache."""
    return f"{namespace}/{name}" if namespace else name


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
        self._queued: tuple[dict[tuple[str, str], StatusWrite], dict[tuple[str, str], StatusWrite]] = ({}, {})
        """Writes waiting, ClusterQueues' first: insertion order is the order of first change."""
        self._writing: set[tuple[str, str]] = set()
        self._taken = 0
        self._writers: set[asyncio.Task[None]] = set()
        self._drained = asyncio.Event()
        self._drained.set()

    def due(self) -> None:
        """Something changed (a cycle, an analysis): publish within the interval."""
        self._due.set()

    def status_changed(self, kind: str) -> None:
        """Someone else wrote an object of `kind` (its status, as a replaced leader's late write
        or a person's edit): a status this operator publishes is put right within the interval,
        as Kueue's queue controllers do on every update, not only after the next cycle."""
        if kind in PUBLISHED:
            self._due.set()

    async def run(self) -> None:
        """Computes once per interval while something is due; a pass whose writes did not all
        land is due again (nothing else may come to trigger one once the queues settle)."""
        try:
            while True:
                await self._due.wait()
                self._due.clear()
                started = loop_time()
                if self.leading():
                    try:
                        self.queue(datetime.now(UTC).replace(microsecond=0))
                    except Exception:  # a status for people must never stop scheduling
                        log.exception("computing queue statuses failed")
                        self._due.set()
                else:
                    self._drop_queued()
                await self._rest(started)
        finally:
            for task in self._writers:
                task.cancel()

    async def _rest(self, started: float) -> None:
        """Until the pass that started at `started` may be followed by the next: the interval from
        when its writes have landed, but no later than BACKOFF_SECONDS beyond the interval."""
        latest = started + INTERVAL_SECONDS + BACKOFF_SECONDS
        # asyncio.timeout_at, not wait_for: 3.11's wait_for can swallow a cancellation that comes
        # as the event is set, and the publisher would then wait for a due pass forever.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(latest):
                await self._drained.wait()
        landed = loop_time()
        await asyncio.sleep(max(started + INTERVAL_SECONDS, min(landed + INTERVAL_SECONDS, latest)) - landed)

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
        """Every queue's status, returning once all that changed are written."""
        self.queue(now)
        await self._drained.wait()

    def queue(self, now: datetime) -> None:
        """Computes every queue's status and queues the writes of those that differ."""
        self._seen = {}
        snapshot = self.cache.snapshot(now)
        lq_pending = self.cache.queues.pending_counts()  # as the snapshot was taken
        writes: list[StatusWrite] = []
        unreadable = {key: n.message for (kind, key), n in self.feeder.invalid.items() if kind == "PreemptionConfig"}
        queue_shares, cohort_shares = queue_status.weighted_shares(snapshot)
        for name, cq in snapshot.held_cluster_queues.items():
            obj = self.cache.objects["ClusterQueue"].get(name)
            if obj is None:
                continue
            pending = queue_status.pending_count(snapshot, name)

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
                    self.cache.unwritten_admissions(cq.name),  # as they are when it is written
                )

            writes.append((kinds.ClusterQueue, name, None, cq_status, self._view(obj)))
        for name, cohort in list(self.cache.objects["Cohort"].items()):

            def co_status(current: dict[str, Any], share: float | None = cohort_shares.get(name)) -> dict[str, Any]:
                return queue_status.cohort_status(share, current.get("status"))

            writes.append((kinds.Cohort, name, None, co_status, self._view(cohort)))
        counts = queue_status.local_queue_counts(snapshot, lq_pending)
        for lq in list(self.cache.objects["LocalQueue"].values()):
            lq_counts = counts.get((lq.namespace, lq.name), (0, 0, 0))

            def lq_status(current: dict[str, Any], lq_counts: tuple[int, int, int] = lq_counts) -> dict[str, Any]:
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
        for write in writes:
            new = write[3](write[4])
            key = (write[0].name, _key(write[1], write[2]))
            queued = self._queued[0 if write[0].name in FIRST else 1]
            if new is None or (new == (write[4].get("status") or {}) and key not in self._writing):
                # A write queued by an earlier pass has nothing left to do. (One on its way may
                # change the copy held: the status computed now is written after it all the same.)
                queued.pop(key, None)
            else:
                queued[key] = write  # a newer status keeps the place of the one it replaces
        self._start_writers()
        counts_now = {
            name: queue_status.pending_count(snapshot, name) for name in {*snapshot.pending, *snapshot.backing_off}
        }
        for name in self._pending_queues | set(counts_now):
            self.metrics.pending.labels(cluster_queue=name).set(counts_now.get(name, 0))
        self._pending_queues = set(counts_now)
        self.metrics.queue_gauges(queue_status.queue_figures(snapshot, self.parked()))
        cohort_of = {name: cq.cohort or "" for name, cq in snapshot.held_cluster_queues.items()}
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

    # -- the writes

    def _start_writers(self) -> None:
        while len(self._writers) < PARALLELISM and len(self._writers) < sum(map(len, self._queued)):
            task = asyncio.create_task(self._drain(), name="queue-status-writer")
            self._writers.add(task)
            task.add_done_callback(self._writer_done)
        if self._writers:
            self._drained.clear()

    def _writer_done(self, task: asyncio.Task[None]) -> None:
        self._writers.discard(task)
        if not self._writers:
            self._drained.set()

    def _next(self) -> tuple[tuple[str, str], StatusWrite] | None:
        """The longest-waiting write of the first kinds, then of the rest (every REST_EVERY-th
        write the other way round); not one whose object is being written (it waits for that
        write to end)."""
        self._taken += 1
        order = self._queued if self._taken % REST_EVERY else self._queued[::-1]
        for queued in order:
            for key in queued:
                if key not in self._writing:
                    return key, queued.pop(key)
        return None

    async def _drain(self) -> None:
        while (item := self._next()) is not None:
            key, write = item
            self._writing.add(key)
            try:
                await self._write(*write)
            finally:
                self._writing.discard(key)

    def _drop_queued(self) -> None:
        """Not leading: what was queued is a past term's to write."""
        for queued in self._queued:
            queued.clear()

    def _latest(self, kind: kinds.Kind, name: str, namespace: str | None) -> dict[str, Any] | None:
        """The freshest copy held of an object (a write that landed since its pass moved it on)."""
        obj = self.cache.objects[kind.name].get(_key(name, namespace))
        return self._view(obj) if obj is not None else None

    async def _write(
        self,
        kind: kinds.Kind,
        name: str,
        namespace: str | None,
        compute: Callable[[dict[str, Any]], dict[str, Any] | None],
        current: dict[str, Any],
    ) -> None:
        try:
            result = await self.writer.update_status(
                kind, name, namespace, compute, latest=lambda: self._latest(kind, name, namespace) or current
            )
        except Exception as exc:  # a status for people must never stop scheduling
            log.warning("status of %s %s not written: %r", kind.name, name, exc)
            self._due.set()  # next interval: the queues may have settled, with nothing to cycle
            return
        if result.outcome in (Outcome.FAILED, Outcome.UNKNOWN):
            self._due.set()
        if result.outcome is Outcome.GONE:
            self.feeder.gone(kind.name, _key(name, namespace), (current.get("metadata") or {}).get("uid"))
        elif result.body is not None:
            self.feeder.ingest(kind.name, result.body, result.based_on)
        elif result.outcome is Outcome.FAILED:
            log.warning("status of %s %s not written: %s", kind.name, name, result.error)
