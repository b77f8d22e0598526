"""The in-memory cluster state that snapshots are cut from.

Objects come in one at a time (from the operator's watches or from YAML files); the cache keeps
them parsed and indexed — admitted workloads per ClusterQueue, pending ones per LocalQueue, quota
usage per node — so that a snapshot costs O(ClusterQueues + cohorts), not O(workloads).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..api import v1beta2
from ..api.meta import ObjectMeta
from ..api.quantity import to_amount
from .notices import Notice
from .objects import KINDS
from .protection import annotation_problems, class_problems
from .quota import QuotaNode, ResourceQuota, compute_subtree
from .selectors import NOTHING, SelectorError, build
from .snapshot import ClusterQueueInfo, ResourceGroupInfo, Snapshot, Trees
from .tas import TasState
from .workload import PriorityClassInfo, WorkloadInfo, build_info


def _key(meta: ObjectMeta) -> str:
    return f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name


@dataclass
class _Tree:
    """Quota nodes by name, rebuilt when ClusterQueues or Cohorts change."""

    cluster_queues: dict[str, ClusterQueueInfo]
    cohorts: dict[str, QuotaNode]
    draining: list[str]
    """ClusterQueues stopped with HoldAndDrain."""


class Cache:
    """Parsed, indexed cluster state. Not thread-safe: one writer at a time."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {kind: {} for (_, kind) in KINDS}
        self.infos: dict[str, WorkloadInfo] = {}
        self._priority_classes: dict[tuple[str, str], PriorityClassInfo] = {}
        self._tree: _Tree | None = None
        self._pending_by_queue: dict[tuple[str, str], dict[str, WorkloadInfo]] = {}
        self._versions: dict[tuple[str, str], str] = {}
        self._draining_local_queues: set[str] = set()
        self._deactivated: set[str] = set()
        """Workloads holding quota although `spec.active` is false: the next cycle evicts them."""
        self._tas: TasState | None = None
        self.notices: dict[tuple[str, str], list[Notice]] = {}
        """Problems found in objects as they came in (kind, name) -> notices; they stay until fixed."""

    def holds(self, kind: str, key: str, resource_version: str | None) -> bool:
        """Whether the cache already has exactly this version of the object (e.g. our own write,
        stored from the API's answer before its watch event arrived)."""
        return bool(resource_version) and self._versions.get((kind, key)) == resource_version

    def is_stale(self, obj: Any) -> bool:
        """Whether `obj` is older than what the cache holds (a late watch event after our own write)."""
        version = obj.metadata.resource_version
        held = self._versions.get((obj.kind, _key(obj.metadata)))
        if not version or not held or not (version.isdigit() and held.isdigit()):
            return False
        return int(version) < int(held)

    # -- updates ----------------------------------------------------------------------------

    def upsert(self, obj: Any) -> bool:
        """Adds or replaces an object; returns False (and changes nothing) for a stale version."""
        if self.is_stale(obj):
            return False
        kind = obj.kind
        key = _key(obj.metadata)
        if obj.metadata.resource_version:
            self._versions[(kind, key)] = obj.metadata.resource_version
        if kind == "Workload":
            self._remove_workload(key)
            self.objects[kind][key] = obj
            self._add_workload(build_info(obj, self._priority_classes))
            return True
        self.objects[kind][key] = obj
        if kind == "LocalQueue":
            if obj.spec.stop_policy == "HoldAndDrain":
                self._draining_local_queues.add(key)
            else:
                self._draining_local_queues.discard(key)
        self._check(kind, key, obj)
        self._changed(kind)
        return True

    def _check(self, kind: str, key: str, obj: Any) -> None:
        """Annotations the engine reads but the API server cannot validate."""
        found: list[Notice] = []
        annotations = dict(obj.metadata.annotations or {})
        if kind in ("ClusterQueue", "Cohort"):
            node = QuotaNode(name=key, is_cluster_queue=kind == "ClusterQueue", annotations=annotations)
            found = [
                Notice(kind, key, "InvalidPreemptionPolicy", f"{kind} {key}: {p}") for p in annotation_problems(node)
            ]
        elif kind in ("WorkloadPriorityClass", "PriorityClass"):
            info = PriorityClassInfo(key, kind, obj.value, annotations)
            found = [
                Notice(kind, key, "InvalidPreemptionToleration", f"{kind} {key}: {p}") for p in class_problems(info)
            ]
        if found:
            self.notices[(kind, key)] = found
        else:
            self.notices.pop((kind, key), None)

    def delete(self, kind: str, key: str) -> None:
        self._versions.pop((kind, key), None)
        if kind == "LocalQueue":
            self._draining_local_queues.discard(key)
        self.notices.pop((kind, key), None)
        if kind == "Workload":
            self._remove_workload(key)
            self.objects[kind].pop(key, None)
            return
        if self.objects[kind].pop(key, None) is not None:
            self._changed(kind)

    def load(self, objects: Iterable[Any]) -> None:
        for obj in objects:
            self.upsert(obj)

    def _changed(self, kind: str) -> None:
        if kind in ("WorkloadPriorityClass", "PriorityClass"):
            self._priority_classes = self._collect_priority_classes()
            for key, obj in list(self.objects["Workload"].items()):
                self._remove_workload(key)
                self.objects["Workload"][key] = obj
                self._add_workload(build_info(obj, self._priority_classes))
        elif kind in ("ClusterQueue", "Cohort", "Namespace", "ResourceFlavor"):
            self._tree = None
        if kind in ("Node", "Topology", "ResourceFlavor"):
            self._tas = None

    def _collect_priority_classes(self) -> dict[tuple[str, str], PriorityClassInfo]:
        classes: dict[tuple[str, str], PriorityClassInfo] = {}
        for wpc in self.objects["WorkloadPriorityClass"].values():
            classes[("WorkloadPriorityClass", wpc.name)] = PriorityClassInfo(
                wpc.name, "WorkloadPriorityClass", wpc.value, dict(wpc.metadata.annotations or {})
            )
        for pc in self.objects["PriorityClass"].values():
            classes[("PriorityClass", pc.name)] = PriorityClassInfo(
                pc.name, "PriorityClass", pc.value, dict(pc.metadata.annotations or {})
            )
        return classes

    def _add_workload(self, info: WorkloadInfo) -> None:
        self.infos[info.key] = info
        if info.finished:
            return
        if info.cluster_queue is not None:
            if not info.active:
                self._deactivated.add(info.key)
            if self._tas is not None:
                self._tas.add(info)
            if self._tree is not None:
                cq = self._tree.cluster_queues.get(info.cluster_queue)
                if cq is not None:
                    cq.workloads[info.key] = info
                    cq.node.add(info.usage)
        else:
            self._pending_by_queue.setdefault((info.namespace, info.queue_name), {})[info.key] = info

    def _remove_workload(self, key: str) -> None:
        info = self.infos.pop(key, None)
        if info is None:
            return
        self._deactivated.discard(key)
        if self._tas is not None:
            self._tas.discard(info.key)
        if info.cluster_queue is not None:
            if self._tree is not None:
                cq = self._tree.cluster_queues.get(info.cluster_queue)
                if cq is not None and cq.workloads.pop(key, None) is not None:
                    cq.node.remove(info.usage)
        else:
            queue = self._pending_by_queue.get((info.namespace, info.queue_name))
            if queue is not None:
                queue.pop(key, None)

    # -- the quota tree -------------------------------------------------------------------------

    def _build_tree(self) -> _Tree:
        cohorts: dict[str, QuotaNode] = {}
        cohort_objs: dict[str, v1beta2.Cohort] = self.objects["Cohort"]

        def cohort(name: str) -> QuotaNode:
            node = cohorts.get(name)
            if node is None:
                node = QuotaNode(name=name, is_cluster_queue=False)
                cohorts[name] = node
                obj = cohort_objs.get(name)
                if obj is not None:
                    node.quotas = _quotas(obj.spec.resource_groups)
                    node.annotations = dict(obj.metadata.annotations or {})
            return node

        for name in sorted(cohort_objs):
            cohort(name)
        for name in sorted(cohort_objs):
            parent = cohort_objs[name].spec.parent_name
            if parent and not _creates_cycle(name, parent, cohort_objs):
                child = cohorts[name]
                child.parent = cohort(parent)
                child.parent.child_cohorts.append(child)

        cluster_queues: dict[str, ClusterQueueInfo] = {}
        flavors = self.objects["ResourceFlavor"]
        for name in sorted(self.objects["ClusterQueue"]):
            obj: v1beta2.ClusterQueue = self.objects["ClusterQueue"][name]
            node = QuotaNode(
                name=name,
                is_cluster_queue=True,
                quotas=_quotas(obj.spec.resource_groups),
                annotations=dict(obj.metadata.annotations or {}),
            )
            if obj.spec.cohort_name:
                node.parent = cohort(obj.spec.cohort_name)
                node.parent.child_cluster_queues.append(node)
            groups = tuple(
                ResourceGroupInfo(tuple(rg.covered_resources), tuple(f.name for f in rg.flavors))
                for rg in obj.spec.resource_groups or []
            )
            active, reason, message = True, "Ready", "Can admit new workloads"
            missing = sorted({f for g in groups for f in g.flavors if f not in flavors})
            try:
                selector = build(obj.spec.namespace_selector, nil=NOTHING)
            except SelectorError as exc:
                selector = NOTHING
                active, reason, message = False, "Misconfigured", f"spec.namespaceSelector: {exc}"
            if missing:
                active, reason = False, "FlavorNotFound"
                message = f"Can't admit new workloads: references missing ResourceFlavor(s): {', '.join(missing)}."
            elif obj.spec.stop_policy != "None":
                active, reason, message = False, "Stopped", "Can't admit new workloads: is stopped."
            cluster_queues[name] = ClusterQueueInfo(
                name=name,
                labels=dict(obj.metadata.labels or {}),
                annotations=dict(obj.metadata.annotations or {}),
                cohort=obj.spec.cohort_name or None,
                resource_groups=groups,
                preemption=obj.spec.preemption,
                queueing_strategy=obj.spec.queueing_strategy,
                namespace_selector=selector,
                stop_policy=obj.spec.stop_policy,
                when_can_borrow=obj.spec.flavor_fungibility.when_can_borrow,
                when_can_preempt=obj.spec.flavor_fungibility.when_can_preempt,
                active=active,
                inactive_reason=reason,
                inactive_message=message,
                node=node,
            )
        for node in cohorts.values():
            if node.parent is None:
                compute_subtree(node)
        for cq in cluster_queues.values():
            if cq.node.parent is None:
                compute_subtree(cq.node)
        for info in self.infos.values():
            if info.cluster_queue is not None and not info.finished:
                target = cluster_queues.get(info.cluster_queue)
                if target is not None:
                    target.workloads[info.key] = info
                    target.node.add(info.usage)
        draining = sorted(n for n, cq in cluster_queues.items() if cq.stop_policy == "HoldAndDrain")
        return _Tree(cluster_queues, cohorts, draining)

    def tree(self) -> _Tree:
        if self._tree is None:
            self._tree = self._build_tree()
        return self._tree

    def tas(self) -> TasState:
        if self._tas is None:
            self._tas = TasState.build(self.objects["Node"], self.objects["Topology"], self.objects["ResourceFlavor"])
            for info in self.infos.values():
                if info.cluster_queue is not None and not info.finished:
                    self._tas.add(info)
        return self._tas

    # -- snapshots ------------------------------------------------------------------------------

    def snapshot(self, now: datetime) -> Snapshot:
        tree = self.tree()
        trees = Trees(tree.cluster_queues, tree.cohorts)
        queue_names = tree.cluster_queues
        namespaces = {name: dict(ns.metadata.labels or {}) for name, ns in self.objects["Namespace"].items()}
        pending: dict[str, list[WorkloadInfo]] = {}
        unqueued: list[tuple[WorkloadInfo, str, str]] = []
        local_queues = self.objects["LocalQueue"]
        for (namespace, queue_name), infos in self._pending_by_queue.items():
            if not infos:
                continue
            lq = local_queues.get(f"{namespace}/{queue_name}")
            for info in infos.values():
                if not info.active:
                    continue
                if lq is None:
                    unqueued.append((info, "Inadmissible", f"LocalQueue {queue_name} doesn't exist"))
                    continue
                if lq.spec.stop_policy != "None":
                    unqueued.append((info, "Inadmissible", f"LocalQueue {queue_name} is inactive"))
                    continue
                cq_name = lq.spec.cluster_queue
                if cq_name not in queue_names:
                    unqueued.append((info, "Inadmissible", f"ClusterQueue {cq_name} doesn't exist"))
                    continue
                if not queue_names[cq_name].namespace_selector.matches(namespaces.get(namespace, {})):
                    unqueued.append((info, "Inadmissible", "Workload namespace doesn't match ClusterQueue selector"))
                    continue
                pending.setdefault(cq_name, []).append(info)
        for infos_list in pending.values():
            infos_list.sort(key=queue_order)
        drains = [(self.infos[key], "Deactivated", "The workload is deactivated") for key in sorted(self._deactivated)]
        for name in tree.draining:  # queues stopped with HoldAndDrain: rare, kept in a list
            cq = tree.cluster_queues[name]
            drained = sorted(k for k in cq.workloads if k not in self._deactivated)
            drains += [(cq.workloads[k], "ClusterQueueStopped", "The ClusterQueue is stopped") for k in drained]
        for key in sorted(self._draining_local_queues):
            lq = local_queues.get(key)
            target = tree.cluster_queues.get(lq.spec.cluster_queue) if lq is not None else None
            if target is None or target.stop_policy == "HoldAndDrain":
                continue
            drains += [
                (wl, "LocalQueueStopped", "The LocalQueue is stopped")
                for _, wl in sorted(target.workloads.items())
                if f"{wl.namespace}/{wl.queue_name}" == key and wl.key not in self._deactivated
            ]
        unqueued.sort(key=lambda item: item[0].key)
        return Snapshot(
            now=now,
            trees=trees,
            pending=pending,
            unqueued=unqueued,
            drains=drains,
            workloads=self.infos,
            flavors=dict(self.objects["ResourceFlavor"]),
            tas=self.tas(),
            preemption_configs=dict(self.objects["PreemptionConfig"]),
            namespace_labels=namespaces,
        )


def queue_order(wl: WorkloadInfo) -> tuple[int, datetime, str]:
    """Higher effective priority first, then older first (Kueue's queue-order timestamp is the
    creation time); the key breaks ties so the order is total."""
    return (-wl.priority, wl.created, wl.key)


def _quotas(groups: list[v1beta2.ResourceGroup] | None) -> dict[tuple[str, str], ResourceQuota]:
    quotas: dict[tuple[str, str], ResourceQuota] = {}
    for group in groups or []:
        for flavor in group.flavors:
            for res in flavor.resources:
                quotas[(flavor.name, res.name)] = ResourceQuota(
                    nominal=to_amount(res.name, res.nominal_quota),
                    borrowing_limit=None if res.borrowing_limit is None else to_amount(res.name, res.borrowing_limit),
                    lending_limit=None if res.lending_limit is None else to_amount(res.name, res.lending_limit),
                )
    return quotas


def _creates_cycle(name: str, parent: str, cohorts: dict[str, v1beta2.Cohort]) -> bool:
    seen = {name}
    current: str | None = parent
    while current:
        if current in seen:
            return True
        seen.add(current)
        obj = cohorts.get(current)
        current = obj.spec.parent_name if obj is not None else None
    return False
