"""kueue.x-k8s.io/v1beta2: the subset of Kueue's API that quota, admission, topology and preemption need."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import Field, Strict, model_validator

from .meta import (
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    LABEL_KEY_PATTERN,
    LIST_ATOMIC,
    LIST_SET,
    Conditions,
    CRDInfo,
    DNSName,
    Int32,
    Int64,
    KubeModel,
    LabelSelector,
    NonNegativeInt32,
    NonNegativeQuantity,
    ObjectMeta,
    OpenModel,
    PositiveInt32,
    PrinterColumn,
    Quantity,
    ResourceList,
    Time,
    TopLevel,
    cel,
    crd_default,
    field_problem,
    list_map,
)
from .quantity import INT64_MAX, checked_amount, fits_int64, parse_quantity, show, to_amount, too_large, unit

VERSION = "v1beta2"
API_VERSION = f"kueue.x-k8s.io/{VERSION}"

# Opaque objects: fields Kueue defines that we accept and keep but do not interpret.
Opaque = Annotated[dict[str, Any], Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})]
Name = Annotated[str, Field(min_length=1, max_length=253)]
StopPolicy = Literal["None", "Hold", "HoldAndDrain"]
QueueingStrategy = Literal["StrictFIFO", "BestEffortFIFO"]
FungibilityPolicy = Literal["MayStopSearch", "TryNextFlavor"]


# ---------------------------------------------------------------------------------------------
# ClusterQueue and Cohort quota
# ---------------------------------------------------------------------------------------------


class ResourceQuota(KubeModel):
    name: Name
    nominal_quota: NonNegativeQuantity
    borrowing_limit: NonNegativeQuantity | None = None
    """How much more than its nominal quota the queue may borrow; unset means no limit."""
    lending_limit: NonNegativeQuantity | None = None
    """How much of its nominal quota the queue lends to its cohort; unset means all of it."""

    @model_validator(mode="after")
    def _amounts_fit(self) -> Self:
        for field, value in (
            ("nominalQuota", self.nominal_quota),
            ("borrowingLimit", self.borrowing_limit),
            ("lendingLimit", self.lending_limit),
        ):
            if value is not None and checked_amount(self.name, value) is None:
                raise field_problem(field, too_large(self.name, value))
        return self


class FlavorQuotas(KubeModel):
    name: DNSName
    resources: Annotated[list[ResourceQuota], Field(min_length=1, max_length=64, json_schema_extra=list_map("name"))]


class ResourceGroup(
    KubeModel,
    json_schema_extra=cel(
        (
            "self.flavors.all(x, size(x.resources) == size(self.coveredResources))",
            "flavors must have the same number of resources as the coveredResources",
        ),
        # Kueue's webhook rule, here so that kubectl apply refuses it up front.
        (
            "self.flavors.all(x, x.resources.map(r, r.name) == self.coveredResources)",
            "each flavor's resources must match the name in coveredResources, in order",
        ),
    ),
):
    covered_resources: Annotated[list[Name], Field(min_length=1, max_length=64, json_schema_extra=LIST_ATOMIC)]
    flavors: Annotated[list[FlavorQuotas], Field(min_length=1, max_length=64, json_schema_extra=list_map("name"))]

    @model_validator(mode="after")
    def _resources_match_covered(self) -> Self:
        """Each flavor lists the covered resources, in their order (Kueue's webhook rule; a
        quota for a resource not covered would count for nothing)."""
        for f, flavor in enumerate(self.flavors):
            for r, quota in enumerate(flavor.resources[: len(self.covered_resources)]):
                if quota.name != self.covered_resources[r]:
                    raise field_problem(
                        f"flavors[{f}].resources[{r}].name",
                        f"{show(quota.name)} must match the name in coveredResources "
                        f"({show(self.covered_resources[r])} at position {r})",
                    )
        return self


ResourceGroups = Annotated[list[ResourceGroup] | None, Field(max_length=16, json_schema_extra=LIST_ATOMIC)]


class BorrowWithinCohort(KubeModel):
    policy: Literal["Never", "LowerPriority"] = crd_default("Never")
    max_priority_threshold: Int32 | None = None


class ClusterQueuePreemption(
    KubeModel,
    json_schema_extra=cel(
        (
            "!(self.reclaimWithinCohort == 'Never' && has(self.borrowWithinCohort) && "
            "self.borrowWithinCohort.policy != 'Never')",
            "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
        )
    ),
):
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = crd_default("Never")
    borrow_within_cohort: BorrowWithinCohort | None = crd_default({}, default_factory=lambda: None)
    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = crd_default("Never")


class FlavorFungibility(
    KubeModel,
    json_schema_extra=cel(
        (
            "!has(self.preference) || (self.whenCanBorrow == 'TryNextFlavor' && self.whenCanPreempt == 'TryNextFlavor')",
            "preference can only be set when both whenCanBorrow and whenCanPreempt are TryNextFlavor",
        )
    ),
):
    when_can_borrow: FungibilityPolicy = crd_default("MayStopSearch")
    when_can_preempt: FungibilityPolicy = crd_default("TryNextFlavor")
    preference: Literal["BorrowingOverPreemption", "PreemptionOverBorrowing"] | None = None


class FairSharing(KubeModel):
    weight: NonNegativeQuantity | None = crd_default(1, default_factory=lambda: None)
    """The advantage of a ClusterQueue or Cohort competing for unused quota under fair sharing: its
    share is divided by it. 0 makes any borrowing an infinite share; unset is 1."""

    @model_validator(mode="after")
    def _weight_not_tiny(self) -> Self:
        # Kueue's webhook rule: a positive weight at or below 10^-9 would make shares overflow.
        if self.weight is not None and 0 < parse_quantity(self.weight) <= Decimal("1e-9"):
            raise field_problem("weight", f"{show(self.weight)} is too small: when not 0, it must be more than 1n")
        return self


class FairSharingStatus(KubeModel):
    weighted_share: Int64
    """The dominant resource share rounded up (9223372036854775807: a zero weight that borrows)."""


CheckName = Annotated[str, Field(min_length=1, max_length=316)]
"""Kueue's AdmissionCheckReference."""


class AdmissionCheckStrategyRule(KubeModel):
    name: CheckName
    on_flavors: Annotated[list[DNSName] | None, Field(max_length=64, json_schema_extra=LIST_SET)] = None
    """The flavors it runs for; unset or empty: every flavor of the ClusterQueue."""


class AdmissionChecksStrategy(KubeModel):
    admission_checks: Annotated[
        list[AdmissionCheckStrategyRule], Field(min_length=1, max_length=64, json_schema_extra=list_map("name"))
    ]


class ClusterQueueSpec(
    KubeModel,
    json_schema_extra=cel(
        (
            "!has(self.cohortName) && has(self.resourceGroups) ? self.resourceGroups.all(rg, "
            "rg.flavors.all(f, f.resources.all(r, !has(r.borrowingLimit)))) : true",
            "borrowingLimit must be nil when cohort is empty",
        )
    ),
):
    resource_groups: ResourceGroups = None
    cohort_name: DNSName | None = None
    queueing_strategy: QueueingStrategy = crd_default("BestEffortFIFO")
    namespace_selector: LabelSelector | None = None
    """Namespaces whose LocalQueues may submit here: unset selects none, `{}` selects all."""
    flavor_fungibility: FlavorFungibility = crd_default({}, default_factory=FlavorFungibility)
    preemption: ClusterQueuePreemption = crd_default({}, default_factory=ClusterQueuePreemption)
    stop_policy: StopPolicy = crd_default("None")
    fair_sharing: FairSharing | None = None
    admission_checks_strategy: AdmissionChecksStrategy | None = None
    """Which AdmissionChecks a workload admitted here must pass, per flavor it was given."""
    admission_scope: Opaque | None = None


class ResourceUsage(KubeModel):
    name: Name
    total: Quantity | None = None
    borrowed: Quantity | None = None


class FlavorUsage(KubeModel):
    name: DNSName
    resources: Annotated[list[ResourceUsage], Field(max_length=64, json_schema_extra=list_map("name"))]


FlavorUsages = Annotated[list[FlavorUsage] | None, Field(max_length=64, json_schema_extra=list_map("name"))]


class ClusterQueueStatus(KubeModel):
    conditions: Conditions = None
    flavors_reservation: FlavorUsages = None
    flavors_usage: FlavorUsages = None
    pending_workloads: Int32 | None = None
    reserving_workloads: Int32 | None = None
    admitted_workloads: Int32 | None = None
    fair_sharing: FairSharingStatus | None = None
    """Written only while fair sharing is on (removed when it is off), as Kueue does."""


class ClusterQueue(TopLevel):
    """Quota for a group of namespaces, shared in a cohort, with a preemption policy."""

    crd: ClassVar[CRDInfo] = CRDInfo(
        kind="ClusterQueue",
        plural="clusterqueues",
        singular="clusterqueue",
        scope="Cluster",
        version=VERSION,
        short_names=("cq",),
        printer_columns=(
            PrinterColumn("Cohort", "string", ".spec.cohortName", "Cohort that this ClusterQueue belongs to"),
            PrinterColumn("Strategy", "string", ".spec.queueingStrategy", "The queueing strategy", priority=1),
            PrinterColumn("Pending Workloads", "integer", ".status.pendingWorkloads", "Number of pending workloads"),
            PrinterColumn(
                "Admitted Workloads",
                "integer",
                ".status.admittedWorkloads",
                "Number of admitted workloads that haven't finished yet",
                priority=1,
            ),
            PrinterColumn(
                "Preemption Config",
                "string",
                ".metadata.annotations.kueue\\.x-k8s\\.io/preemption-config-name",
                "PreemptionConfig named by the annotation",
                priority=1,
            ),
        ),
    )

    spec: ClusterQueueSpec = Field(default_factory=ClusterQueueSpec)
    status: ClusterQueueStatus | None = None


class CohortSpec(KubeModel):
    parent_name: DNSName | None = None
    resource_groups: ResourceGroups = None
    fair_sharing: FairSharing | None = None


class CohortStatus(KubeModel):
    fair_sharing: FairSharingStatus | None = None
    """Written only while fair sharing is on (removed when it is off), as Kueue does."""


class Cohort(TopLevel):
    """A node of the cohort tree: its children share quota, and it may hold quota of its own."""

    crd: ClassVar[CRDInfo] = CRDInfo(
        kind="Cohort",
        plural="cohorts",
        singular="cohort",
        scope="Cluster",
        version=VERSION,
        short_names=("co",),
        printer_columns=(PrinterColumn("Parent", "string", ".spec.parentName", "Parent cohort"),),
    )

    spec: CohortSpec = Field(default_factory=CohortSpec)
    status: CohortStatus | None = None


# ---------------------------------------------------------------------------------------------
# AdmissionCheck
# ---------------------------------------------------------------------------------------------


class AdmissionCheckParametersReference(KubeModel):
    api_group: Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
    kind: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[A-Za-z]([-A-Za-z0-9]*[A-Za-z0-9])?$")]
    name: Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]


class AdmissionCheckSpec(KubeModel):
    controller_name: Annotated[
        str, Field(min_length=1, max_length=253, json_schema_extra=cel(("self == oldSelf", "field is immutable")))
    ]
    """The controller that sets this check's state on workloads (not necessarily a Pod's name)."""
    parameters: AdmissionCheckParametersReference | None = None


class AdmissionCheckStatus(KubeModel):
    conditions: Conditions = None
    """`Active`: its controller is ready to evaluate workloads; a ClusterQueue naming a check that
    is not Active admits nothing."""


class AdmissionCheck(TopLevel):
    """A gate between quota reservation and admission, run by a controller of its own (cluster
    autoscaling's ProvisioningRequest, MultiKueue, or a third party's)."""

    crd: ClassVar[CRDInfo] = CRDInfo(
        kind="AdmissionCheck",
        plural="admissionchecks",
        singular="admissioncheck",
        scope="Cluster",
        version=VERSION,
        short_names=("ac",),
    )

    spec: AdmissionCheckSpec
    status: AdmissionCheckStatus | None = None


# ---------------------------------------------------------------------------------------------
# LocalQueue, ResourceFlavor, Topology, WorkloadPriorityClass
# ---------------------------------------------------------------------------------------------


class LocalQueueSpec(KubeModel):
    cluster_queue: Annotated[DNSName, Field(json_schema_extra=cel(("self == oldSelf", "field is immutable")))]
    stop_policy: StopPolicy = crd_default("None")
    fair_sharing: FairSharing | None = None


class LocalQueueStatus(KubeModel):
    conditions: Conditions = None
    pending_workloads: Int32 | None = None
    reserving_workloads: Int32 | None = None
    admitted_workloads: Int32 | None = None
    flavors_reservation: FlavorUsages = None
    flavors_usage: FlavorUsages = None


class LocalQueue(TopLevel):
    """A namespace's entry point to a ClusterQueue."""

    crd: ClassVar[CRDInfo] = CRDInfo(
        kind="LocalQueue",
        plural="localqueues",
        singular="localqueue",
        scope="Namespaced",
        version=VERSION,
        short_names=("queue", "queues", "lq"),
        printer_columns=(
            PrinterColumn("ClusterQueue", "string", ".spec.clusterQueue", "Backing ClusterQueue"),
            PrinterColumn("Pending Workloads", "integer", ".status.pendingWorkloads", "Number of pending workloads"),
            PrinterColumn(
                "Admitted Workloads",
                "integer",
                ".status.admittedWorkloads",
                "Number of admitted workloads that haven't finished yet.",
            ),
        ),
    )

    spec: LocalQueueSpec
    status: LocalQueueStatus | None = None


class Taint(OpenModel):
    key: str
    value: str | None = None
    effect: str


_TAINT_EFFECTS = "['NoSchedule', 'PreferNoSchedule', 'NoExecute']"


class ResourceFlavorSpec(
    KubeModel,
    json_schema_extra=cel(
        (
            "!has(self.topologyName) || self.nodeLabels.size() >= 1",
            "at least one nodeLabel is required when topology is set",
        ),
        (
            "!has(oldSelf.topologyName) || self == oldSelf",
            "resourceFlavorSpec are immutable when topologyName is set",
        ),
    ),
):
    node_labels: Annotated[
        dict[str, str] | None, Field(max_length=8, json_schema_extra={"x-kubernetes-map-type": "atomic"})
    ] = None
    node_taints: Annotated[
        list[Taint] | None,
        Field(
            max_length=8,
            json_schema_extra=LIST_ATOMIC
            | cel(
                (
                    f"self.all(x, x.effect in {_TAINT_EFFECTS})",
                    "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
                )
            ),
        ),
    ] = None
    tolerations: Annotated[list[Opaque] | None, Field(max_length=8, json_schema_extra=LIST_ATOMIC)] = None
    topology_name: DNSName | None = None


class ResourceFlavor(TopLevel):
    """A kind of node (and so of quota): which nodes it covers and, for TAS, their topology."""

    crd: ClassVar[CRDInfo] = CRDInfo(
        kind="ResourceFlavor",
        plural="resourceflavors",
        singular="resourceflavor",
        scope="Cluster",
        version=VERSION,
        short_names=("flavor", "flavors", "rf"),
        status_subresource=False,
    )

    spec: ResourceFlavorSpec = Field(default_factory=ResourceFlavorSpec)


class TopologyLevel(KubeModel):
    node_label: Annotated[str, Field(min_length=1, max_length=316, pattern=LABEL_KEY_PATTERN)]


class TopologySpec(KubeModel):
    levels: Annotated[
        list[TopologyLevel],
        Field(
            min_length=1,
            max_length=16,
            json_schema_extra=LIST_ATOMIC
            | cel(
                ("self == oldSelf", "field is immutable"),
                ("size(self.filter(i, size(self.filter(j, j == i)) > 1)) == 0", "must be unique"),
                (
                    "size(self.filter(i, i.nodeLabel == 'kubernetes.io/hostname')) == 0 || "
                    "self[size(self) - 1].nodeLabel == 'kubernetes.io/hostname'",
                    "the kubernetes.io/hostname label can only be used at the lowest level of topology",
                ),
            ),
        ),
    ]
    """Node labels from the widest level (e.g. block) to the narrowest (e.g. hostname)."""


class Topology(TopLevel):
    crd: ClassVar[CRDInfo] = CRDInfo(
        kind="Topology",
        plural="topologies",
        singular="topology",
        scope="Cluster",
        version=VERSION,
        short_names=("topo",),
        status_subresource=False,
    )

    spec: TopologySpec


class WorkloadPriorityClass(TopLevel):
    """A priority for workloads, independent of pod priority."""

    crd: ClassVar[CRDInfo] = CRDInfo(
        kind="WorkloadPriorityClass",
        plural="workloadpriorityclasses",
        singular="workloadpriorityclass",
        scope="Cluster",
        version=VERSION,
        short_names=("wpc",),
        status_subresource=False,
        printer_columns=(PrinterColumn("Value", "integer", ".value", "Value of workloadPriorityClass's Priority"),),
    )

    value: Int32
    description: Annotated[str | None, Field(max_length=2048)] = None


# ---------------------------------------------------------------------------------------------
# Workload
# ---------------------------------------------------------------------------------------------


class ResourceRequirements(OpenModel):
    requests: ResourceList | None = None
    limits: ResourceList | None = None


class Container(OpenModel):
    name: str = ""
    resources: ResourceRequirements | None = None


class PodSpec(OpenModel):
    containers: list[Container] = Field(default_factory=list)
    init_containers: list[Container] | None = None
    node_selector: dict[str, str] | None = None
    priority_class_name: str | None = None
    overhead: ResourceList | None = None

    def amounts_per_pod(self) -> dict[str, int]:
        """What one pod requests, as Kubernetes sums it: containers added up, the largest init
        container as a floor, plus overhead; a container's limit stands in for a missing request,
        as Kubernetes defaults it. CPU in milli-units, the rest in units (Kueue's amounts)."""
        total: dict[str, int] = {}
        for container in self.containers:
            for resource, amount in _container_amounts(container).items():
                total[resource] = total.get(resource, 0) + amount
        for container in self.init_containers or []:
            for resource, amount in _container_amounts(container).items():
                total[resource] = max(total.get(resource, 0), amount)
        for resource, quantity in (self.overhead or {}).items():
            total[resource] = total.get(resource, 0) + to_amount(resource, quantity)
        return total

    def tolerations(self) -> list[dict[str, Any]]:
        """spec.tolerations, kept as given (the model keeps fields it does not declare)."""
        found = (self.model_extra or {}).get("tolerations")
        return [t for t in found if isinstance(t, dict)] if isinstance(found, list) else []

    def required_node_affinity(self) -> tuple[dict[str, Any], ...] | None:
        """The nodeSelectorTerms of spec.affinity.nodeAffinity's required part; None without one."""
        affinity = (self.model_extra or {}).get("affinity")
        node = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
        required = node.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(node, dict) else None
        if not isinstance(required, dict):
            return None
        terms = required.get("nodeSelectorTerms")
        return tuple(t for t in terms if isinstance(t, dict)) if isinstance(terms, list) else ()


def _container_amounts(container: Container) -> dict[str, int]:
    if container.resources is None:
        return {}
    requests = dict(container.resources.requests or {})
    for resource, quantity in (container.resources.limits or {}).items():
        requests.setdefault(resource, quantity)
    return {resource: to_amount(resource, quantity) for resource, quantity in requests.items()}


def total_problem(pods: int, resource: str, per_pod: int) -> str | None:
    """Why `pods` pods of `per_pod` cannot be counted (Kueue sums in int64), or None."""
    if fits_int64(pods * per_pod):
        return None
    return (
        f"{pods} pods of {per_pod} {unit(resource)} of {resource} each need {pods * per_pod} in all, "
        f"more than {INT64_MAX}, the most the scheduler counts (a 64-bit integer)"
    )


class PodTemplateSpec(OpenModel):
    metadata: ObjectMeta | None = None
    spec: PodSpec = Field(default_factory=PodSpec)


class SliceTopologyLayer(KubeModel):
    """One layer of slices: groups of `size` pods, each inside one domain of `topology`."""

    topology: Annotated[str, Field(min_length=1, max_length=63)]
    size: PositiveInt32


class PodSetTopologyRequest(OpenModel):
    required: Annotated[str | None, Field(max_length=63)] = None
    """The whole pod set must run inside one domain of this level."""
    preferred: Annotated[str | None, Field(max_length=63)] = None
    """Try one domain of this level, then wider levels."""
    unconstrained: Annotated[bool | None, Strict()] = None
    pod_index_label: Annotated[str | None, Field(max_length=317)] = None
    sub_group_index_label: Annotated[str | None, Field(max_length=317)] = None
    sub_group_count: Int32 | None = None
    pod_set_group_name: Annotated[str | None, Field(max_length=256)] = None
    pod_set_slice_required_topology: Annotated[str | None, Field(max_length=63)] = None
    """Slices of `podSetSliceSize` pods, each inside one domain of this level."""
    pod_set_slice_size: Int32 | None = None
    podset_slice_required_topology_constraints: Annotated[
        list[SliceTopologyLayer] | None, Field(max_length=3, json_schema_extra=LIST_ATOMIC)
    ] = None
    """Slice layers, the widest first (instead of the two fields above)."""

    @model_validator(mode="after")
    def _slice_size_with_its_level(self) -> Self:
        """Kueue's Workload webhook: a slice level needs a positive size, a size needs a level."""
        if self.pod_set_slice_required_topology is not None:
            if self.pod_set_slice_size is None:
                raise field_problem(
                    "podSetSliceSize", "Required value: must be set when podSetSliceRequiredTopology is specified"
                )
            if self.pod_set_slice_size <= 0:
                raise field_problem(
                    "podSetSliceSize", f"Invalid value: {self.pod_set_slice_size}: must be greater than 0"
                )
        elif self.pod_set_slice_size is not None:
            raise field_problem(
                "podSetSliceSize", "Forbidden: may not be set when podSetSliceRequiredTopology is not specified"
            )
        return self


class PodSet(
    KubeModel,
    json_schema_extra=cel(
        (
            "has(self.minCount) ? self.minCount <= self.count : true",
            "minCount should be positive and less or equal to count",
        )
    ),
):
    name: Annotated[str, Field(max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")] = crd_default("main")
    template: PodTemplateSpec = Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    count: NonNegativeInt32 = crd_default(1)
    """Pods in the set; 0 is allowed (as in Kueue) and requests nothing."""
    min_count: PositiveInt32 | None = None
    topology_request: PodSetTopologyRequest | None = None

    @model_validator(mode="after")
    def _totals_fit(self) -> Self:
        for resource, per_pod in self.template.spec.amounts_per_pod().items():
            if not fits_int64(per_pod):
                raise field_problem(
                    "template.spec",
                    f"one pod's {resource} adds up to {per_pod} {unit(resource)}, more than {INT64_MAX}, "
                    "the most the scheduler counts (a 64-bit integer)",
                )
            found = total_problem(self.count, resource, per_pod)
            if found is not None:
                raise field_problem("count", found)
        return self


class PriorityClassRef(
    KubeModel,
    json_schema_extra=cel(
        (
            "self.group == 'scheduling.k8s.io' ? self.kind == 'PriorityClass' : true",
            "only the PriorityClass kind is allowed for the scheduling.k8s.io group",
        ),
        (
            "self.group == 'kueue.x-k8s.io' ? self.kind == 'WorkloadPriorityClass' : true",
            "only the WorkloadPriorityClass kind is allowed for the kueue.x-k8s.io group",
        ),
    ),
):
    group: Literal["kueue.x-k8s.io", "scheduling.k8s.io"]
    kind: Literal["WorkloadPriorityClass", "PriorityClass"]
    name: Annotated[DNSName, Field(min_length=1)]


class PreemptionGate(KubeModel):
    """A gate that, while closed, keeps the workload from preempting (spec.preemptionGates[])."""

    name: Annotated[str, Field(min_length=1, max_length=63)]


class PreemptionGateState(KubeModel):
    """Where a gate stands (status.preemptionGates[]); a gate with no state here is closed."""

    name: Annotated[str, Field(min_length=1, max_length=63)]
    position: Literal["Closed", "Open"]
    last_transition_time: Time


class WorkloadSpec(KubeModel):
    pod_sets: Annotated[list[PodSet], Field(min_length=1, max_length=18, json_schema_extra=list_map("name"))]
    queue_name: DNSName | None = None
    priority_class_ref: PriorityClassRef | None = None
    priority: Int32 | None = None
    active: Annotated[bool, Strict()] = crd_default(True)
    """false deactivates the workload: it is evicted and not admitted again."""
    maximum_execution_time_seconds: PositiveInt32 | None = None
    preemption_gates: Annotated[
        list[PreemptionGate] | None, Field(max_length=8, json_schema_extra=list_map("name"))
    ] = None
    """Gates, closed unless status.preemptionGates opens them: the workload may not preempt while
    one is closed."""


_ONE_OF_UNIVERSAL_INDIVIDUAL = "exactly one of the fields in [universal individual] must be set"


class TopologyIndividualValues(KubeModel):
    """One value per domain of a slice at one level: prefix + root + suffix."""

    prefix: Annotated[str | None, Field(max_length=63)] = None
    suffix: Annotated[str | None, Field(max_length=63)] = None
    roots: Annotated[
        list[Annotated[str, Field(max_length=63)]],
        Field(min_length=1, max_length=100000, json_schema_extra=LIST_ATOMIC),
    ]


class ValuesPerLevel(
    KubeModel,
    json_schema_extra=cel(("has(self.universal) != has(self.individual)", _ONE_OF_UNIVERSAL_INDIVIDUAL)),
):
    """A slice's values at one level: the same for every domain (`universal`), or one each."""

    universal: Annotated[str | None, Field(max_length=63)] = None
    individual: TopologyIndividualValues | None = None


class TopologyPodCounts(
    KubeModel,
    json_schema_extra=cel(
        ("[has(self.universal),has(self.individual)].filter(x,x==true).size() == 1", _ONE_OF_UNIVERSAL_INDIVIDUAL)
    ),
):
    """Pods per domain of a slice: the same for every domain (`universal`), or one count each."""

    universal: PositiveInt32 | None = None
    individual: Annotated[
        list[PositiveInt32] | None,
        Field(min_length=1, max_length=100000, json_schema_extra=LIST_ATOMIC),
    ] = None


class TopologySlice(
    KubeModel,
    json_schema_extra=cel(
        (
            "!has(self.podCounts.individual) || size(self.podCounts.individual) == self.domainCount",
            "podCounts.individual must have length equal to domainCount",
        ),
        (
            "self.valuesPerLevel.all(x, !has(x.individual) || size(x.individual.roots) == self.domainCount)",
            "valuesPerLevel.individual, if set, must have roots of length equal to domainCount of this "
            "TopologyAssignmentSlice",
        ),
    ),
):
    domain_count: PositiveInt32
    values_per_level: Annotated[list[ValuesPerLevel], Field(min_length=1, max_length=16, json_schema_extra=LIST_ATOMIC)]
    pod_counts: TopologyPodCounts


class TopologyAssignment(
    KubeModel,
    json_schema_extra=cel(
        (
            "self.slices.all(x, size(x.valuesPerLevel) == size(self.levels))",
            "valuesPerLevel must have the same length as the number of levels in this TopologyAssignment",
        )
    ),
):
    levels: Annotated[
        list[Annotated[str, Field(max_length=317)]], Field(min_length=1, max_length=16, json_schema_extra=LIST_ATOMIC)
    ]
    slices: Annotated[list[TopologySlice], Field(max_length=1000, json_schema_extra=LIST_ATOMIC)]


class PodSetAssignment(KubeModel):
    name: Annotated[str, Field(max_length=63)] = crd_default("main")
    flavors: dict[str, DNSName] | None = None
    """Resource name to the flavor it was assigned."""
    resource_usage: ResourceList | None = None
    count: NonNegativeInt32 | None = None
    topology_assignment: TopologyAssignment | None = None
    delayed_topology_request: Literal["Pending", "Ready"] | None = None


class Admission(KubeModel):
    cluster_queue: DNSName
    pod_set_assignments: Annotated[list[PodSetAssignment], Field(max_length=18, json_schema_extra=list_map("name"))] = (
        Field(default_factory=list)
    )


class RequeueState(KubeModel):
    count: NonNegativeInt32 | None = None
    requeue_at: Time | None = None


class EvictionCount(KubeModel):
    reason: Annotated[str, Field(max_length=316)]
    underlying_cause: Annotated[str, Field(max_length=316)] = crd_default("")
    count: NonNegativeInt32


class SchedulingStats(KubeModel):
    evictions: Annotated[
        list[EvictionCount] | None,
        Field(max_length=256, json_schema_extra=list_map("reason", "underlyingCause")),
    ] = None


class ReclaimablePod(KubeModel):
    """Pods of a pod set whose quota is no longer needed (they finished)."""

    name: Annotated[str, Field(max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
    count: NonNegativeInt32


_TOLERATION_RULES = cel(
    (
        "self.all(x, !has(x.key) ? x.operator == 'Exists' : true)",
        "operator must be Exists when 'key' is empty, which means 'match all values and all keys'",
    ),
    (
        "self.all(x, has(x.tolerationSeconds) ? x.effect == 'NoExecute' : true)",
        "effect must be 'NoExecute' when 'tolerationSeconds' is set",
    ),
    (
        "self.all(x, !has(x.operator) || x.operator in ['Equal', 'Exists'])",
        "supported toleration values: 'Equal'(default), 'Exists'",
    ),
    (
        "self.all(x, has(x.operator) && x.operator == 'Exists' ? !has(x.value) : true)",
        "a value must be empty when 'operator' is 'Exists'",
    ),
    (
        f"self.all(x, !has(x.effect) || x.effect in {_TAINT_EFFECTS})",
        "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
    ),
)


class Toleration(KubeModel):
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None
    toleration_seconds: Int64 | None = None


class PodSetUpdate(KubeModel):
    """What a check adds to a pod set's pods when its job starts (additions only: a key the pod
    template or another check sets to another value fails the start)."""

    name: Annotated[str, Field(max_length=63)]
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    node_selector: dict[str, str] | None = None
    tolerations: Annotated[
        list[Toleration] | None, Field(max_length=8, json_schema_extra=LIST_ATOMIC | _TOLERATION_RULES)
    ] = None


CheckState = Literal["Pending", "Ready", "Retry", "Rejected"]


class AdmissionCheckState(KubeModel):
    """Where one AdmissionCheck stands for the workload (set by the check's controller)."""

    name: CheckName
    state: CheckState
    last_transition_time: Time
    message: Annotated[str, Field(max_length=32768)]
    requeue_after_seconds: NonNegativeInt32 | None = None
    """With Retry: how long after lastTransitionTime the workload may be queued again."""
    retry_count: NonNegativeInt32 | None = None
    pod_set_updates: Annotated[list[PodSetUpdate] | None, Field(max_length=18, json_schema_extra=LIST_ATOMIC)] = None


class WorkloadStatus(KubeModel):
    conditions: Conditions = None
    admission: Admission | None = None
    requeue_state: RequeueState | None = None
    scheduling_stats: SchedulingStats | None = None
    accumulated_past_execution_time_seconds: Int32 | None = None
    admission_checks: Annotated[
        list[AdmissionCheckState] | None, Field(max_length=8, json_schema_extra=list_map("name"))
    ] = None
    reclaimable_pods: Annotated[
        list[ReclaimablePod] | None, Field(max_length=18, json_schema_extra=list_map("name"))
    ] = None
    resource_requests: Annotated[list[Opaque] | None, Field(json_schema_extra=LIST_ATOMIC)] = None
    preemption_gates: Annotated[
        list[PreemptionGateState] | None, Field(max_length=8, json_schema_extra=list_map("name"))
    ] = None


_QUOTA_RESERVED = "{o}.status.conditions.exists(c, c.type == 'QuotaReserved' && c.status == 'True')"
_WAS_RESERVED = f"(has(oldSelf.status) && has(oldSelf.status.conditions) && {_QUOTA_RESERVED.format(o='oldSelf')})"


class Workload(
    TopLevel,
    json_schema_extra=cel(
        (
            f"has(self.status) && has(self.status.conditions) && {_QUOTA_RESERVED.format(o='self')} && "
            "has(self.status.admission) ? size(self.spec.podSets) == size(self.status.admission.podSetAssignments) "
            ": true",
            "podSetAssignments must have the same number of podSets as the spec",
        ),
        (
            f"{_WAS_RESERVED} ? (!has(oldSelf.spec.priorityClassRef) && !has(self.spec.priorityClassRef)) || "
            "(has(oldSelf.spec.priorityClassRef) && has(self.spec.priorityClassRef)) : true",
            "priorityClassRef is immutable while workload quota reserved",
        ),
        (
            f"{_WAS_RESERVED} && (has(self.status) && has(self.status.conditions) && "
            f"{_QUOTA_RESERVED.format(o='self')}) && has(oldSelf.spec.queueName) && has(self.spec.queueName) ? "
            "oldSelf.spec.queueName == self.spec.queueName : true",
            "queueName is immutable while workload quota reserved",
        ),
    ),
):
    """A unit of admission: pod sets with their requests, a queue and a priority."""

    crd: ClassVar[CRDInfo] = CRDInfo(
        kind="Workload",
        plural="workloads",
        singular="workload",
        scope="Namespaced",
        version=VERSION,
        short_names=("kwl", "kueueworkload", "kueueworkloads"),  # Kueue v0.19's (it dropped wl)
        printer_columns=(
            PrinterColumn("Queue", "string", ".spec.queueName", "Name of the queue this workload was submitted to"),
            PrinterColumn(
                "Reserved in",
                "string",
                ".status.admission.clusterQueue",
                "Name of the ClusterQueue where the workload is reserving quota",
            ),
            PrinterColumn("Admitted", "string", ".status.conditions[?(@.type=='Admitted')].status", "Admission status"),
            PrinterColumn(
                "Preempted", "string", ".status.conditions[?(@.type=='Preempted')].reason", "Why it was preempted"
            ),
            PrinterColumn(
                "Finished", "string", ".status.conditions[?(@.type=='Finished')].status", "Workload finished"
            ),
        ),
    )

    spec: WorkloadSpec
    status: WorkloadStatus | None = None

    def status_view(self) -> dict[str, Any]:
        """As TopLevel's, with `spec.active` (a status change reads it: deactivated meanwhile)."""
        view = super().status_view()
        view["spec"] = {"active": self.spec.active}
        return view

    @model_validator(mode="after")
    def _admitted_totals_fit(self) -> Self:
        """An assignment without resourceUsage counts as its count times the pod set's requests."""
        admission = self.status.admission if self.status else None
        if admission is None:
            return self
        pod_sets = {ps.name: ps for ps in self.spec.pod_sets}
        for index, psa in enumerate(admission.pod_set_assignments):
            pod_set = pod_sets.get(psa.name)
            if psa.resource_usage or psa.count is None or pod_set is None:
                continue
            for resource, per_pod in pod_set.template.spec.amounts_per_pod().items():
                found = total_problem(psa.count, resource, per_pod)
                if found is not None:
                    raise field_problem(f"status.admission.podSetAssignments[{index}].count", found)
        return self
