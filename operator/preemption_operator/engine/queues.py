"""The queue manager (Kueue's pkg/queue): which pending workloads wait in which ClusterQueue, in
what order, and which admitted ones must give their quota back because they were deactivated
or their queue stopped.

Pending workloads are kept per LocalQueue as they come and go; a snapshot routes each LocalQueue
(does it exist, is it stopped, does its ClusterQueue exist and admit its namespace) and orders
each ClusterQueue's workloads. Routes are kept between snapshots: a snapshot routes again only
the LocalQueues whose workloads came or went since the last one, and every LocalQueue only when
what routing reads changed (a LocalQueue's queue or stop policy, the ClusterQueues, the
Namespaces). Its cost grows with what changed, not with the queues or workloads waiting.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..api import v1beta2
from .ordering import queue_order
from .snapshot import ClusterQueueInfo
from .workload import WorkloadInfo

Unqueued = tuple[WorkloadInfo, str, str]
"""A pending workload no ClusterQueue can take, with Kueue's reason and message."""
Drain = tuple[WorkloadInfo, str, str]
"""An admitted workload that must give its quota back, with the Evicted reason and message."""


Shapes = dict[tuple[object, ...], set[str]]
"""Pending workloads' keys by scheduling shape."""


@dataclass
class Routed:
    pending: dict[str, list[WorkloadInfo]] = field(default_factory=dict)
    """Pending workloads per ClusterQueue, in queue order."""
    unqueued: list[Unqueued] = field(default_factory=list)
    keys: dict[str, list[str]] = field(default_factory=dict)
    """The keys of `pending`, in the same order."""
    shapes: dict[str, list[Shapes]] = field(default_factory=dict)
    """Per ClusterQueue, its routed LocalQueues' active pending workloads by shape (the queue
    manager's own, read during one pass)."""


class QueueManager:
    def __init__(self) -> None:
        self._pending: dict[tuple[str, str], dict[str, WorkloadInfo]] = {}
        """Pending workloads by (namespace, LocalQueue)."""
        self._ordered: dict[tuple[str, str], _Order] = {}
        """Each LocalQueue's pending workloads in queue order, kept as they come and go: every
        cycle routes every pending workload, and most queues did not change since the last one."""
        self._shapes: dict[tuple[str, str], Shapes] = {}
        """Each LocalQueue's active pending workloads by shape: a failed head parks its equals
        without looking at every workload of its queue."""
        self._draining: set[str] = set()
        """LocalQueues (namespace/name) stopped with HoldAndDrain."""
        self.deactivated: set[str] = set()
        """Workloads holding quota although `spec.active` is false: the next cycle evicts them."""
        # Routes kept between snapshots (see `route`).
        self._dirty: set[tuple[str, str]] = set()
        """LocalQueues whose pending workloads came or went since the last route."""
        self._lq_routes: dict[str, tuple[str, str]] = {}
        """What routing reads of each LocalQueue (namespace/name): its ClusterQueue and stop policy."""
        self._reroute_all = True
        self._inputs: tuple[object, object] | None = None
        """The ClusterQueues and Namespace labels the kept routes were made with (compared by identity:
        the cache builds them anew when they change)."""
        self._routes: dict[tuple[str, str], str | None] = {}
        """Each routed LocalQueue's ClusterQueue (None: its workloads are unqueued)."""
        self._sources: dict[str, set[tuple[str, str]]] = {}
        """Per ClusterQueue, the LocalQueues routed to it."""
        self._routed_unqueued: dict[tuple[str, str], list[Unqueued]] = {}
        self._kept = Routed()
        self._unqueued_sorted = True

    # -- what comes and goes

    def add_pending(self, info: WorkloadInfo) -> None:
        queue_key = (info.namespace, info.queue_name)
        self._dirty.add(queue_key)
        queue = self._pending.setdefault(queue_key, {})
        old = queue.get(info.key)
        queue[info.key] = info
        shapes = self._shapes.setdefault(queue_key, {})
        if old is not None and old.active:
            _discard(shapes, old)
        if info.active:
            shapes.setdefault(info.shape, set()).add(info.key)
        order = self._ordered.get(queue_key)
        if order is not None:
            # Kept in order as workloads come (a new version of one replaces it where it sorts
            # now): sorting a queue of thousands again for each one was a cycle's largest cost.
            if old is not None:
                order.remove(old)
            order.insert(info)

    def remove_pending(self, info: WorkloadInfo) -> None:
        queue_key = (info.namespace, info.queue_name)
        self._dirty.add(queue_key)
        queue = self._pending.get(queue_key)
        if queue is not None:
            old = queue.pop(info.key, None)
            order = self._ordered.get(queue_key)
            if old is not None and order is not None:
                order.remove(old)
            if old is not None and old.active:
                _discard(self._shapes.get(queue_key, {}), old)
            if not queue:
                del self._pending[queue_key]
                self._ordered.pop(queue_key, None)
                self._shapes.pop(queue_key, None)

    def local_queue(self, key: str, lq: v1beta2.LocalQueue | None) -> None:
        """A LocalQueue changed (None: deleted)."""
        if lq is not None and lq.spec.stop_policy == "HoldAndDrain":
            self._draining.add(key)
        else:
            self._draining.discard(key)
        # Its status changes often (it counts its workloads); only what routing reads reroutes.
        read = (lq.spec.cluster_queue, lq.spec.stop_policy) if lq is not None else None
        if self._lq_routes.get(key) != read:
            self._reroute_all = True
            if read is None:
                del self._lq_routes[key]
            else:
                self._lq_routes[key] = read

    def pending_counts(self) -> dict[tuple[str, str], int]:
        """Pending workloads per (namespace, LocalQueue), routed or not, deactivated ones too:
        what a LocalQueue's status counts, without looking at each workload."""
        return {key: len(infos) for key, infos in self._pending.items() if key[1] and infos}

    # -- a snapshot's view

    def _order_of(self, queue_key: tuple[str, str], infos: Mapping[str, WorkloadInfo]) -> _Order:
        """The LocalQueue's kept order, sorted once the first time it is asked for."""
        order = self._ordered.get(queue_key)
        if order is None:
            order = self._ordered[queue_key] = _Order(infos.values())
        return order

    def route(
        self,
        local_queues: Mapping[str, v1beta2.LocalQueue],
        cluster_queues: Mapping[str, ClusterQueueInfo],
        namespaces: Mapping[str, Mapping[str, str]],
    ) -> Routed:
        """Each pending workload to its ClusterQueue, or unqueued with Kueue's reason (its granular
        ones, the default since v0.20). A workload naming no queue is not Kueue's to schedule:
        it gets no status at all. Routes only the LocalQueues that changed since the last call
        (all of them when what routing reads changed); the lists returned are never changed
        afterwards (a queue that changes gets new ones), so a snapshot keeps what it was given."""
        inputs = self._inputs
        if self._reroute_all or inputs is None or inputs[0] is not cluster_queues or inputs[1] is not namespaces:
            self._inputs = (cluster_queues, namespaces)
            self._reroute_all = False
            self._routes.clear()
            self._sources.clear()
            self._routed_unqueued.clear()
            self._kept = Routed()
            self._unqueued_sorted = False
            dirty: Iterable[tuple[str, str]] = list(self._pending)
        else:
            dirty = self._dirty
        kept = self._kept
        stale: set[str] = set()
        for queue_key in dirty:
            before = self._routes.pop(queue_key, None)
            if before is not None:
                self._sources[before].discard(queue_key)
                stale.add(before)
            if self._routed_unqueued.pop(queue_key, None) is not None:
                self._unqueued_sorted = False
            infos = self._pending.get(queue_key)
            namespace, queue_name = queue_key
            if not infos or not queue_name:
                continue
            order = self._order_of(queue_key, infos)
            problem = _problem(namespace, queue_name, local_queues, cluster_queues, namespaces)
            unqueued: list[Unqueued] = [(info, "Deactivated", "The workload is deactivated") for info in order.inactive]
            if problem is not None:
                unqueued += [(info, *problem) for info in order.active]
                self._routes[queue_key] = None
            else:
                target = local_queues[f"{namespace}/{queue_name}"].spec.cluster_queue
                self._routes[queue_key] = target
                self._sources.setdefault(target, set()).add(queue_key)
                stale.add(target)
            if unqueued:
                self._routed_unqueued[queue_key] = unqueued
                self._unqueued_sorted = False
        self._dirty = set()
        for target in stale:
            self._gather(target)
        if not self._unqueued_sorted:
            kept.unqueued = sorted(
                (item for items in self._routed_unqueued.values() for item in items), key=lambda item: item[0].key
            )
            self._unqueued_sorted = True
        # New dicts over the kept lists: a snapshot adds keys of its own to `keys`.
        return Routed(dict(kept.pending), kept.unqueued, dict(kept.keys), dict(kept.shapes))

    def _gather(self, target: str) -> None:
        """A ClusterQueue's pending workloads again, from the LocalQueues routed to it: one
        LocalQueue's are already in order; several are merged."""
        kept = self._kept
        sources = sorted(self._sources.get(target, ()))
        feeding = [(key, order) for key in sources if (order := self._ordered.get(key)) is not None and order.active]
        orders = [order for _, order in feeding]
        if not orders:
            if not sources:
                self._sources.pop(target, None)
            kept.pending.pop(target, None)
            kept.keys.pop(target, None)
            kept.shapes.pop(target, None)
            return
        if len(orders) == 1:
            kept.pending[target] = list(orders[0].active)
            kept.keys[target] = list(orders[0].keys)
        else:
            merged = sorted((info for order in orders for info in order.active), key=queue_order)
            kept.pending[target] = merged
            kept.keys[target] = [info.key for info in merged]
        kept.shapes[target] = [self._shapes.get(key, {}) for key, _ in feeding]

    def pending_in(
        self,
        cluster_queue: str,
        local_queues: Mapping[str, v1beta2.LocalQueue],
        cluster_queues: Mapping[str, ClusterQueueInfo],
        namespaces: Mapping[str, Mapping[str, str]],
    ) -> list[WorkloadInfo]:
        """One ClusterQueue's queued workloads in queue order, as `route` gives them (the kept
        routes: what a visibility request costs is what changed since the last snapshot)."""
        return list(self.route(local_queues, cluster_queues, namespaces).pending.get(cluster_queue, ()))

    def drains(
        self,
        cluster_queues: Mapping[str, ClusterQueueInfo],
        stopped: list[str],
        local_queues: Mapping[str, v1beta2.LocalQueue],
        workloads: Mapping[str, WorkloadInfo],
        evicting: frozenset[str],
    ) -> list[Drain]:
        """Admitted workloads to evict: deactivated ones, and those of a ClusterQueue (`stopped`)
        or LocalQueue stopped with HoldAndDrain. None is drained while a write about it is in
        flight (`evicting`: evictions and admissions)."""
        drains = [
            (workloads[key], "Deactivated", "The workload is deactivated")
            for key in sorted(self.deactivated)
            if key not in evicting
        ]
        for name in stopped:  # queues stopped with HoldAndDrain: rare, kept in a list
            cq = cluster_queues[name]
            drained = sorted(k for k in cq.workloads if k not in self.deactivated and k not in evicting)
            drains += [(cq.workloads[k], "ClusterQueueStopped", "The ClusterQueue is stopped") for k in drained]
        for key in sorted(self._draining):
            lq = local_queues.get(key)
            target = cluster_queues.get(lq.spec.cluster_queue) if lq is not None else None
            if target is None or target.stop_policy == "HoldAndDrain":
                continue
            drains += [
                (wl, "LocalQueueStopped", "The LocalQueue is stopped")
                for _, wl in sorted(target.workloads.items())
                if f"{wl.namespace}/{wl.queue_name}" == key
                and wl.key not in self.deactivated
                and wl.key not in evicting
            ]
        return drains


def _discard(shapes: Shapes, info: WorkloadInfo) -> None:
    keys = shapes.get(info.shape)
    if keys is not None:
        keys.discard(info.key)
        if not keys:
            del shapes[info.shape]


class _Order:
    """A LocalQueue's pending workloads in queue order: the active ones (with their keys, in
    the same order) and the deactivated ones apart."""

    def __init__(self, infos: Iterable[WorkloadInfo]) -> None:
        ordered = sorted(infos, key=queue_order)
        self.active = [info for info in ordered if info.active]
        self.inactive = [info for info in ordered if not info.active]
        self.keys = [info.key for info in self.active]

    def insert(self, info: WorkloadInfo) -> None:
        run = self.active if info.active else self.inactive
        at = bisect.bisect_left(run, queue_order(info), key=queue_order)
        run.insert(at, info)
        if info.active:
            self.keys.insert(at, info.key)

    def remove(self, info: WorkloadInfo) -> None:
        """Removes this very version."""
        run = self.active if info.active else self.inactive
        at = bisect.bisect_left(run, queue_order(info), key=queue_order)
        if not (at < len(run) and run[at] is info):  # not where its order says: look for it
            at = next((i for i, other in enumerate(run) if other is info), -1)
            if at < 0:
                return
        del run[at]
        if info.active:
            del self.keys[at]


def _problem(
    namespace: str,
    queue_name: str,
    local_queues: Mapping[str, v1beta2.LocalQueue],
    cluster_queues: Mapping[str, ClusterQueueInfo],
    namespaces: Mapping[str, Mapping[str, str]],
) -> tuple[str, str] | None:
    """Why the workloads of a LocalQueue reach no ClusterQueue (Kueue's reason and message)."""
    lq = local_queues.get(f"{namespace}/{queue_name}")
    if lq is None:
        return "Misconfigured", f"LocalQueue {queue_name} doesn't exist"
    if lq.spec.stop_policy != "None":
        return "Suspended", f"LocalQueue {queue_name} is inactive"
    cq_name = lq.spec.cluster_queue
    if cq_name not in cluster_queues:
        return "Misconfigured", f"ClusterQueue {cq_name} doesn't exist"
    if not cluster_queues[cq_name].namespace_selector.matches(namespaces.get(namespace, {})):
        return "Misconfigured", "workload namespace doesn't match ClusterQueue selector"
    return None
