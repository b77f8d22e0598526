"""Every kind the operator watches or writes, and where it lives in the API."""

from __future__ import annotations

from .api import Kind

GROUP = "kueue.x-k8s.io"

Namespace = Kind("Namespace", "", "v1", "namespaces", False)
Node = Kind("Node", "", "v1", "nodes", False)
PriorityClass = Kind("PriorityClass", "scheduling.k8s.io", "v1", "priorityclasses", False)
WorkloadPriorityClass = Kind("WorkloadPriorityClass", GROUP, "v1beta2", "workloadpriorityclasses", False)
ResourceFlavor = Kind("ResourceFlavor", GROUP, "v1beta2", "resourceflavors", False)
Topology = Kind("Topology", GROUP, "v1beta2", "topologies", False)
Cohort = Kind("Cohort", GROUP, "v1beta2", "cohorts", False)
ClusterQueue = Kind("ClusterQueue", GROUP, "v1beta2", "clusterqueues", False)
LocalQueue = Kind("LocalQueue", GROUP, "v1beta2", "localqueues", True)
PreemptionConfig = Kind("PreemptionConfig", GROUP, "v1alpha1", "preemptionconfigs", False)
Workload = Kind("Workload", GROUP, "v1beta2", "workloads", True)
Event = Kind("Event", "", "v1", "events", True)
Lease = Kind("Lease", "coordination.k8s.io", "v1", "leases", True)

# Listed in this order at startup: what workloads refer to comes first.
WATCHED: tuple[Kind, ...] = (
    Namespace,
    PriorityClass,
    Node,
    WorkloadPriorityClass,
    ResourceFlavor,
    Topology,
    Cohort,
    ClusterQueue,
    LocalQueue,
    PreemptionConfig,
    Workload,
)
BY_NAME = {kind.name: kind for kind in WATCHED}
