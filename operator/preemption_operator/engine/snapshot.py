"""A per-cycle view of the cluster: ClusterQueues with their quota trees, admitted and pending
workloads, and the objects selectors read. Built cheaply from the Cache; a cycle may change the
usage in its snapshot (simulated removals, admissions) without touching the Cache."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from ..api.v1alpha1 import PREEMPTION_CONFIG_ANNOTATION, PreemptionConfig
from ..api.v1beta2 import ClusterQueuePreemption, ResourceFlavor
from .quota import FlavorResource, QuotaNode
from .selectors import Selector
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
    queueing_strategy: str
    namespace_selector: Selector
    stop_policy: str
    when_can_borrow: str
    when_can_preempt: str
    active: bool
    inactive_reason: str
    inactive_message: str
    node: QuotaNode
    workloads: dict[str, WorkloadInfo] = field(default_factory=dict)
    """Workloads reserving quota here, by key."""

    @property
    def preemption_config_name(self) -> str | None:
        return self.annotations.get(PREEMPTION_CONFIG_ANNOTATION)

    def group_for(self, resource: str) -> ResourceGroupInfo | None:
        for group in self.resource_groups:
            if resource in group.covered_resources:
                return group
        return None


@dataclass(eq=False)
class Snapshot:
    now: datetime
    cluster_queues: dict[str, ClusterQueueInfo]
    cohorts: dict[str, QuotaNode]
    pending: dict[str, list[WorkloadInfo]]
    """Pending workloads per ClusterQueue, in queue order."""
    unqueued: list[tuple[WorkloadInfo, str, str]]
    """Pending workloads that cannot reach a ClusterQueue, with a reason and message."""
    workloads: dict[str, WorkloadInfo]
    flavors: dict[str, ResourceFlavor]
    preemption_configs: dict[str, PreemptionConfig]
    namespace_labels: dict[str, dict[str, str]]
    _removed: set[str] = field(default_factory=set)

    def cluster_queue(self, name: str | None) -> ClusterQueueInfo | None:
        return self.cluster_queues.get(name) if name else None

    # -- simulation --------------------------------------------------------------------------

    def remove_workload(self, wl: WorkloadInfo) -> None:
        """Takes an admitted workload's usage out (a simulated preemption)."""
        cq = self.cluster_queues[wl.cluster_queue or ""]
        cq.node.remove(wl.usage)
        self._removed.add(wl.key)

    def add_workload(self, wl: WorkloadInfo) -> None:
        """Puts a removed workload back."""
        cq = self.cluster_queues[wl.cluster_queue or ""]
        cq.node.add(wl.usage)
        self._removed.discard(wl.key)

    def is_removed(self, wl: WorkloadInfo) -> bool:
        return wl.key in self._removed

    def admitted(self, cq: ClusterQueueInfo) -> Iterator[WorkloadInfo]:
        """Workloads reserving quota in `cq`, skipping simulated removals."""
        for wl in cq.workloads.values():
            if wl.key not in self._removed:
                yield wl

    def assume(self, wl: WorkloadInfo, cq: ClusterQueueInfo, usage: Mapping[FlavorResource, int]) -> None:
        """Records an admission made in this cycle so later entries see its usage."""
        cq.node.add(usage)
        cq.workloads = {**cq.workloads, wl.key: wl}
