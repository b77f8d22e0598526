"""Every kind the project reads or writes, in one table: where it lives in the API, the model the
engine parses it with, and what it is to the operator. The informers, the parser, the Events'
apiVersion, lint's notion of a setup and the CRD generator all read it. No HTTP here: `simulate`
and the job integrations import it without the client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import core, v1alpha1, v1beta2
from .meta import GROUP, TopLevel


@dataclass(frozen=True)
class Kind:
    """Where a kind lives in the API."""

    name: str
    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, name: str | None = None, namespace: str | None = None, subresource: str | None = None) -> str:
        parts = ["/api", self.version] if not self.group else ["/apis", self.group, self.version]
        if self.namespaced and namespace:
            parts += ["namespaces", namespace]
        parts.append(self.plural)
        if name is not None:
            parts.append(name)
            if subresource:
                parts.append(subresource)
        return "/".join(parts)

    @classmethod
    def of(cls, model: type[TopLevel]) -> Kind:
        """The kind a CRD of this project serves."""
        crd = model.crd
        return cls(crd.kind, crd.group, crd.version, crd.plural, crd.scope == "Namespaced")


Namespace = Kind("Namespace", "", "v1", "namespaces", False)
Node = Kind("Node", "", "v1", "nodes", False)
PriorityClass = Kind("PriorityClass", "scheduling.k8s.io", "v1", "priorityclasses", False)
WorkloadPriorityClass = Kind.of(v1beta2.WorkloadPriorityClass)
ResourceFlavor = Kind.of(v1beta2.ResourceFlavor)
Topology = Kind.of(v1beta2.Topology)
Cohort = Kind.of(v1beta2.Cohort)
AdmissionCheck = Kind.of(v1beta2.AdmissionCheck)
ClusterQueue = Kind.of(v1beta2.ClusterQueue)
LocalQueue = Kind.of(v1beta2.LocalQueue)
PreemptionConfig = Kind.of(v1alpha1.PreemptionConfig)
PreemptionLimit = Kind.of(v1alpha1.PreemptionLimit)
Workload = Kind.of(v1beta2.Workload)
Event = Kind("Event", "", "v1", "events", True)
Lease = Kind("Lease", "coordination.k8s.io", "v1", "leases", True)

MODELS: dict[Kind, type[Any]] = {
    Namespace: core.Namespace,
    PriorityClass: core.PriorityClass,
    Node: core.Node,
    WorkloadPriorityClass: v1beta2.WorkloadPriorityClass,
    ResourceFlavor: v1beta2.ResourceFlavor,
    Topology: v1beta2.Topology,
    Cohort: v1beta2.Cohort,
    AdmissionCheck: v1beta2.AdmissionCheck,
    ClusterQueue: v1beta2.ClusterQueue,
    LocalQueue: v1beta2.LocalQueue,
    PreemptionConfig: v1alpha1.PreemptionConfig,
    PreemptionLimit: v1alpha1.PreemptionLimit,
    Workload: v1beta2.Workload,
}
"""The kinds the engine reads, each in one version, and their models. The operator watches them
all, listed at startup in this order: what workloads refer to comes first."""

WATCHED: tuple[Kind, ...] = tuple(MODELS)
CRDS: tuple[type[TopLevel], ...] = tuple(m for k, m in MODELS.items() if k.group == GROUP)
"""The models `crds/` is generated from."""
SETUP: tuple[str, ...] = tuple(
    k.name
    for k in (
        ClusterQueue,
        Cohort,
        ResourceFlavor,
        PreemptionConfig,
        PreemptionLimit,
        WorkloadPriorityClass,
        PriorityClass,
    )
)
"""What a preemption setup is made of: what `lint` reads, and what starts the operator's lint
when it changes (workloads never do)."""
BY_NAME: dict[str, Kind] = {k.name: k for k in (*MODELS, Event, Lease)}
BY_GROUP: dict[tuple[str, str], Kind] = {(k.group, k.name): k for k in MODELS}
NOT_READ: tuple[str, ...] = ("MultiKueueCluster", "MultiKueueConfig", "ProvisioningRequestConfig")
"""Kinds of Kueue's group the engine does not read: input may hold them (they are left out)."""
GROUP_KINDS: tuple[str, ...] = tuple(sorted((*(k.name for k in MODELS if k.group == GROUP), *NOT_READ)))
"""Every kind of the kueue.x-k8s.io group (Kueue's, PreemptionConfig and PreemptionLimit): another is a typo."""

__all__ = ["GROUP", "Kind"]
