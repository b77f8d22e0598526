"""lightkube resource classes for every kind the operator watches or writes."""

from __future__ import annotations

from typing import Any

from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Event, Namespace, Node
from lightkube.resources.scheduling_v1 import PriorityClass

GROUP = "kueue.x-k8s.io"

PreemptionConfig = create_global_resource(GROUP, "v1alpha1", "PreemptionConfig", "preemptionconfigs")
ClusterQueue = create_global_resource(GROUP, "v1beta2", "ClusterQueue", "clusterqueues")
Cohort = create_global_resource(GROUP, "v1beta2", "Cohort", "cohorts")
LocalQueue = create_namespaced_resource(GROUP, "v1beta2", "LocalQueue", "localqueues")
ResourceFlavor = create_global_resource(GROUP, "v1beta2", "ResourceFlavor", "resourceflavors")
Topology = create_global_resource(GROUP, "v1beta2", "Topology", "topologies")
WorkloadPriorityClass = create_global_resource(GROUP, "v1beta2", "WorkloadPriorityClass", "workloadpriorityclasses")
Workload = create_namespaced_resource(GROUP, "v1beta2", "Workload", "workloads")

# kind -> (lightkube resource, group, version, plural, namespaced)
WATCHED: dict[str, tuple[Any, str, str, str, bool]] = {
    "Namespace": (Namespace, "", "v1", "namespaces", False),
    "PriorityClass": (PriorityClass, "scheduling.k8s.io", "v1", "priorityclasses", False),
    "Node": (Node, "", "v1", "nodes", False),
    "WorkloadPriorityClass": (WorkloadPriorityClass, GROUP, "v1beta2", "workloadpriorityclasses", False),
    "ResourceFlavor": (ResourceFlavor, GROUP, "v1beta2", "resourceflavors", False),
    "Topology": (Topology, GROUP, "v1beta2", "topologies", False),
    "Cohort": (Cohort, GROUP, "v1beta2", "cohorts", False),
    "ClusterQueue": (ClusterQueue, GROUP, "v1beta2", "clusterqueues", False),
    "LocalQueue": (LocalQueue, GROUP, "v1beta2", "localqueues", True),
    "PreemptionConfig": (PreemptionConfig, GROUP, "v1alpha1", "preemptionconfigs", False),
    "Workload": (Workload, GROUP, "v1beta2", "workloads", True),
}

__all__ = ["WATCHED", "Event", "Lease", "Workload"]
