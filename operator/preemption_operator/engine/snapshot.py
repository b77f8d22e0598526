"""A per-cycle view of the cluster: ClusterQueues with their quota trees, admitted and pending
workloads, and the objects selectors read. Built cheaply from the Cache; a cycle may change the
usage in its snapshot (simulated removals, admissions) without touching the Cache."""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from ..api.v1alpha1 import PREEMPTION_CONFIG_ANNOTATION, PreemptionConfig
from ..api.v1beta2 import ClusterQueuePreemption, FungibilityPolicy, QueueingStrategy, ResourceFlavor, StopPolicy
from .admission_checks import Verdict
from .fair_sharing import OFF, FairSharing
from .limits import LimitBook
from .placement import NodeUsage
from .pods_ready import WaitForPodsReady
from .quota import FlavorResource, QuotaNode
from .selectors import Selector
from .tas_state import TasState
from .workload import WorkloadInfo


@dataclass(frozen=True)
class ResourceGroupInfo:
    covered_resources: tuple[str, ...]
    flavors: tuple[str, ...]


@dataclass(eq=False)
class ClusterQueueInfo:
    """A ClusterQueue's configuration, parsed once; `node` is this snapshot's quota node."""

    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    cohort: str | None
    resource_groups: tuple[ResourceGroupInfo, ...]
    preemption: ClusterQueuePreemption
    queueing_strategy: QueueingStrategy
    namespace_selector: Selector
    stop_policy: StopPolicy
    when_can_borrow: FungibilityPolicy
    when_can_preempt: FungibilityPolicy
    active: bool
    inactive_reason: str
    inactive_message: str
    node: QuotaNode
    workloads: dict[str, WorkloadInfo] = field(default_factory=dict)
    """Workloads reserving quota here, by key."""
    preference: str | None = None
    """flavorFungibility.preference: BorrowingOverPreemption (Kueue's default when unset) or
    PreemptionOverBorrowing."""
    admission_checks: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Its AdmissionChecks, each with the flavors it runs for."""

    @property
    def flavors(self) -> frozenset[str]:
        return frozenset(f for group in self.resource_groups for f in group.flavors)

    @property
    def preemption_config_name(self) -> str | None:
        return self.annotations.get(PREEMPTION_CONFIG_ANNOTATION)

    def group_for(self, resource: str) -> ResourceGroupInfo | None:
        for group in self.resource_groups:
            if resource in group.covered_resources:
                return group
        return None


_T = TypeVar("_T")
Held = tuple[ClusterQueueInfo, Mapping[FlavorResource, int], dict[str, dict[str, int]]]
"""A preemptor's reservation: its ClusterQueue, the usage and the node usage it holds."""


def _shallow(obj: _T) -> _T:
    """copy.copy for a plain dataclass instance, several times faster: every cycle clones the
    quota nodes and ClusterQueues of the trees it touches."""
    twin: _T = object.__new__(type(obj))
    twin.__dict__.update(obj.__dict__)
    return twin


class Trees:
    """Copy-on-read views of the cache's quota trees: a cohort tree is cloned the first time one of
    its ClusterQueues or cohorts is looked at, so a cycle costs what the trees it touches cost,
    not what the whole cluster costs."""

    def __init__(self, cluster_queues: Mapping[str, ClusterQueueInfo], cohorts: Mapping[str, QuotaNode]) -> None:
        self._base_queues = cluster_queues
        self._base_cohorts = cohorts
        self._queues: dict[str, ClusterQueueInfo] = {}
        self._cohorts: dict[str, QuotaNode] = {}
        self._roots: dict[str, str] = {}

    def _clone_tree(self, root: QuotaNode) -> None:
        def clone(node: QuotaNode, parent: QuotaNode | None) -> QuotaNode:
            twin = _shallow(node)
            twin.usage = dict(node.usage)
            if node.borrowed is not None:
                twin.borrowed = dict(node.borrowed)
            twin.parent = parent
            twin.child_cohorts = [clone(c, twin) for c in node.child_cohorts]
            twin.child_cluster_queues = [clone(c, twin) for c in node.child_cluster_queues]
            if node.is_cluster_queue:
                base = self._base_queues.get(node.name)
                if base is not None:
                    info = _shallow(base)
                    info.node = twin
                    self._queues[node.name] = info
            else:
                self._cohorts[node.name] = twin
            return twin

        clone(root, None)

    def queue(self, name: str) -> ClusterQueueInfo:
        found = self._queues.get(name)
        if found is None:
            self._clone_tree(self._base_queues[name].node.root())
            found = self._queues[name]
        return found

    def cohort(self, name: str) -> QuotaNode:
        found = self._cohorts.get(name)
        if found is None:
            self._clone_tree(self._base_cohorts[name].root())
            found = self._cohorts[name]
        return found

    def root_name(self, cluster_queue: str) -> str | None:
        """The root of a ClusterQueue's tree, without cloning anything."""
        found = self._roots.get(cluster_queue)
        if found is None:
            base = self._base_queues.get(cluster_queue)
            if base is None:
                return None
            root = base.node.root()
            found = self._roots[cluster_queue] = f"{'ClusterQueue' if root.is_cluster_queue else 'Cohort'}/{root.name}"
        return found


class _View(Mapping[str, Any]):
    def __init__(self, names: Mapping[str, object], get: Any) -> None:
        self._names = names
        self._get = get

    def __getitem__(self, name: str) -> Any:
        if name not in self._names:
            raise KeyError(name)
        return self._get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._names


_KEY = operator.attrgetter("key")


@dataclass(eq=False)
class Snapshot:
    now: datetime
    trees: Trees
    pending: dict[str, list[WorkloadInfo]]
    """Pending workloads per ClusterQueue, in queue order."""
    unqueued: list[tuple[WorkloadInfo, str, str]]
    """Pending workloads that cannot reach a ClusterQueue, with a reason and message."""
    drains: list[tuple[WorkloadInfo, str, str]]
    """Admitted workloads that must give their quota back (deactivated, or their queue is
    stopped with HoldAndDrain), with the Evicted reason and message."""
    workloads: dict[str, WorkloadInfo]
    flavors: dict[str, ResourceFlavor]
    preemption_configs: dict[str, PreemptionConfig]
    namespace_labels: dict[str, dict[str, str]]
    tas: TasState = field(default_factory=TasState)
    """The cache's topology state; read only (this snapshot's changes go to `node_usage`)."""
    evicting: frozenset[str] = frozenset()
    """Workloads whose eviction is being written: they hold their quota until it is, and stay
    candidates as in Kueue's cache, which has not seen the write either: the first preemptor of a
    round that needs one claims it and waits for it, a later one overlaps; none is evicted twice. See
    `is_evicting` for those chosen in earlier rounds of this pass as well."""
    unreadable: frozenset[str] = frozenset()
    """Workloads whose spec cannot be read: they hold the quota of their recorded admission and
    are never chosen (nothing about them can be judged)."""
    departing: frozenset[str] = frozenset()
    """Workloads deleted while pods started under them may still run: they hold their quota until
    those pods are gone. None is preempted (there is nothing left to evict); one deleted while
    being evicted stays a candidate already being evicted, so its preemptor waits for the quota
    it frees instead of choosing another victim (as for any eviction under way)."""
    fair_sharing: FairSharing = OFF
    """The fair-sharing switch and strategies (Kueue's Configuration fairSharing)."""
    prioritize_preemptors: bool = True
    """Kueue's PrioritizePreemptorWorkloads gate (off by default in Kueue v0.19.2, on by default
    here): a workload waiting for its victims goes first in a cycle and, finding no candidates,
    keeps the room it needs from the rest of its cohort."""
    limits: LimitBook | None = None
    """The PreemptionLimits' windows (None: there are no limits); preemptions this pass decides
    are recorded in it."""
    shapes: dict[str, list[dict[tuple[object, ...], set[str]]]] = field(default_factory=dict)
    """Per ClusterQueue, its pending workloads' keys by shape, one mapping per LocalQueue (the
    queue manager's, current for this pass: read them, never keep them)."""
    keys: dict[str, list[str]] = field(default_factory=dict)
    """The keys of `pending`, in the same order (see `pending_keys`)."""
    pods_ready: WaitForPodsReady | None = None
    """Kueue's waitForPodsReady (None: off)."""
    timed_out: list[tuple[WorkloadInfo, str]] = field(default_factory=list)
    """Admitted workloads whose pods were not ready in time, with the underlying cause."""
    marked: list[WorkloadInfo] = field(default_factory=list)
    """Active workloads marked DeactivationTarget (Kueue makes them inactive)."""
    expired: list[WorkloadInfo] = field(default_factory=list)
    """Admitted workloads that have run for their maximum execution time (to be deactivated)."""
    backoffs: list[WorkloadInfo] = field(default_factory=list)
    """Pending workloads whose requeuing backoff is over: they may be queued again."""
    wake_at: datetime | None = None
    """The next time a timeout passes, a backoff ends or a maximum execution time is used up."""
    unready: frozenset[str] = frozenset()
    """Workloads holding quota without PodsReady=True (waitForPodsReady only)."""
    backing_off: dict[str, list[WorkloadInfo]] = field(default_factory=dict)
    """Per ClusterQueue (by their LocalQueue), pending workloads in their requeuing backoff: not
    queued, but pending (Kueue counts them as inadmissible)."""
    checks: list[tuple[WorkloadInfo, Verdict]] = field(default_factory=list)
    """Workloads holding quota whose AdmissionChecks call for something (see admission_checks)."""
    _removed: set[str] = field(default_factory=set)
    _admitted: set[str] = field(default_factory=set)
    """Admitted in this pass (any round): no longer pending."""
    _admitted_now: set[str] = field(default_factory=set)
    """Admitted in this round: no candidates yet (every entry of a round was nominated before any
    was admitted, as in Kueue's cycle); from the next round on, candidates like any admission."""
    _reserved: dict[str, tuple[ClusterQueueInfo, Mapping[FlavorResource, int]]] = field(default_factory=dict)
    """Preemptors holding the room their victims free (never candidates: they are not admitted)."""
    _victims: set[str] = field(default_factory=set)
    """Victims chosen in earlier rounds of this pass: their evictions are as good as being written."""
    _node_usage: NodeUsage | None = None
    _assumed_nodes: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)

    @property
    def node_usage(self) -> NodeUsage:
        """Node usage as this cycle sees it (copied from the cache the first time it changes)."""
        return self._node_usage if self._node_usage is not None else self.tas.usage

    def _own_node_usage(self) -> NodeUsage:
        if self._node_usage is None:
            self._node_usage = self.tas.usage.copy()
        return self._node_usage

    def workload_nodes(self, wl: WorkloadInfo) -> dict[str, dict[str, int]]:
        """Where an admitted workload's pods run, per node (empty without topology)."""
        return self._assumed_nodes.get(wl.key) or self.tas.by_workload.get(wl.key) or {}

    @property
    def cluster_queues(self) -> Mapping[str, ClusterQueueInfo]:
        return _View(self.trees._base_queues, self.trees.queue)

    @property
    def cohorts(self) -> Mapping[str, QuotaNode]:
        return _View(self.trees._base_cohorts, self.trees.cohort)

    @property
    def held_cluster_queues(self) -> Mapping[str, ClusterQueueInfo]:
        """The cache's own ClusterQueues, not cloned: for readers of a fresh snapshot that change
        nothing (statuses, gauges). What a pass decides is not in them."""
        return self.trees._base_queues

    @property
    def held_cohorts(self) -> Mapping[str, QuotaNode]:
        """The cache's own cohorts, not cloned (see `held_cluster_queues`)."""
        return self.trees._base_cohorts

    def cluster_queue(self, name: str | None) -> ClusterQueueInfo | None:
        return self.cluster_queues.get(name) if name else None

    # -- simulation --------------------------------------------------------------------------

    @property
    def admitted_this_pass(self) -> bool:
        return bool(self._admitted)

    @property
    def removed(self) -> frozenset[str] | set[str]:
        """Workloads whose usage this pass took out (victims, drained, timed out)."""
        return self._removed

    def remove_workload(self, wl: WorkloadInfo) -> None:
        """Takes an admitted workload's usage out (a simulated preemption)."""
        cq = self.cluster_queue(wl.cluster_queue)
        if cq is not None:  # its ClusterQueue may be gone: then it holds no quota anywhere
            cq.node.remove(wl.usage)
        self._removed.add(wl.key)
        nodes = self.workload_nodes(wl)
        if nodes:
            self._own_node_usage().remove(nodes)

    def add_workload(self, wl: WorkloadInfo) -> None:
        """Puts a removed workload back."""
        cq = self.cluster_queue(wl.cluster_queue)
        if cq is not None:
            cq.node.add(wl.usage)
        self._removed.discard(wl.key)
        nodes = self.workload_nodes(wl)
        if nodes:
            self._own_node_usage().add(nodes)

    def pending_keys(self, cluster_queue: str) -> list[str]:
        """The keys of `pending[cluster_queue]`, in the same order (the queue manager keeps them
        with the order): set lookups over them skip parked workloads without a Python step each."""
        keys = self.keys.get(cluster_queue)
        if keys is None:
            keys = self.keys[cluster_queue] = list(map(_KEY, self.pending.get(cluster_queue, ())))
        return keys

    def pending_of_shape(self, cluster_queue: str, shape: tuple[object, ...]) -> set[str]:
        """The keys of the workloads pending in `cluster_queue` with this scheduling shape."""
        groups = self.shapes.get(cluster_queue)
        if groups is None:
            return {wl.key for wl in self.pending.get(cluster_queue, ()) if wl.shape == shape}
        return set().union(*(group.get(shape, ()) for group in groups))

    @property
    def admitted_keys(self) -> AbstractSet[str]:
        """The keys of the workloads this pass admitted (read only)."""
        return self._admitted

    def admitted_in_cycle(self, wl: WorkloadInfo) -> bool:
        """Whether this pass admitted it (its admission is not written yet)."""
        return wl.key in self._admitted

    def is_removed(self, wl: WorkloadInfo) -> bool:
        return wl.key in self._removed

    def is_evicting(self, key: str) -> bool:
        """Its eviction is being written, or was decided in an earlier round of this pass."""
        return key in self.evicting or key in self._victims

    def leaving(self, wl: WorkloadInfo) -> bool:
        """Already evicted, or its eviction under way: choosing it again is no new preemption
        (its preemption was counted when it was first chosen)."""
        return wl.evicted or self.is_evicting(wl.key)

    def admitted(self, cq: ClusterQueueInfo) -> Iterator[WorkloadInfo]:
        """Preemption candidates of `cq`: workloads reserving quota there, skipping simulated
        removals, workloads admitted in this very round, preemptors holding room, those
        unreadable, and those deleted (departing) but while being evicted. Workloads being
        evicted are candidates (see `evicting`)."""
        for wl in cq.workloads.values():
            key = wl.key
            if (
                key not in self._removed
                and key not in self._admitted_now
                and key not in self._reserved
                and key not in self.unreadable
                and (key not in self.departing or wl.evicted)
            ):
                yield wl

    def assume(
        self,
        wl: WorkloadInfo,
        cq: ClusterQueueInfo,
        usage: Mapping[FlavorResource, int],
        nodes: dict[str, dict[str, int]] | None = None,
    ) -> WorkloadInfo:
        """Records an admission made in this pass so later entries see its usage (and, from the
        next round on, may choose it as a victim); returns the workload as admitted."""
        admitted = self._add(wl, cq, usage, nodes)
        self._admitted.add(wl.key)
        self._admitted_now.add(wl.key)
        return admitted

    def reserve(
        self,
        wl: WorkloadInfo,
        cq: ClusterQueueInfo,
        usage: Mapping[FlavorResource, int],
        nodes: dict[str, dict[str, int]] | None = None,
    ) -> None:
        """Holds a preemptor's room (usage and nodes) until `release`, as Kueue adds a nominated
        preemptor's usage to its ClusterQueue in every cycle until it is admitted."""
        self._add(wl, cq, usage, nodes)
        self._reserved[wl.key] = (cq, dict(usage))

    def reserved_by(self, key: str) -> Held | None:
        """What a preemptor's reservation holds: (ClusterQueue, usage, nodes)."""
        held = self._reserved.get(key)
        return None if held is None else (held[0], held[1], self._assumed_nodes.get(key, {}))

    def release(self, key: str) -> Held | None:
        """Gives a reservation back; returns what it held, None if there was none."""
        held = self.reserved_by(key)
        if held is None:
            return None
        del self._reserved[key]
        cq, usage, nodes = held
        cq.node.remove(usage)
        cq.workloads = {k: w for k, w in cq.workloads.items() if k != key}
        self._assumed_nodes.pop(key, None)
        if nodes:
            self._own_node_usage().remove(nodes)
        return held

    @property
    def reserved(self) -> list[str]:
        """Preemptors holding room, in the order they were reserved."""
        return list(self._reserved)

    def next_round(self, victims: Iterable[str]) -> None:
        """A round ended: its admissions become candidates and its victims are being evicted,
        as the next of Kueue's cycles would find them."""
        self._admitted_now.clear()
        self._victims.update(victims)

    def _add(
        self,
        wl: WorkloadInfo,
        cq: ClusterQueueInfo,
        usage: Mapping[FlavorResource, int],
        nodes: dict[str, dict[str, int]] | None,
    ) -> WorkloadInfo:
        added = dataclasses.replace(wl, cluster_queue=cq.name, usage=dict(usage), reserved_at=self.now)
        cq.node.add(usage)
        cq.workloads = {**cq.workloads, wl.key: added}
        if nodes:
            self._assumed_nodes[wl.key] = nodes
            self._own_node_usage().add(nodes)
        return added
