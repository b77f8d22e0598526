"""What the engine knows about one Workload: its requests, priority, queue and admission."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..api.meta import Condition
from ..api.quantity import to_amount
from ..api.v1beta2 import PodSet, Workload
from .placement import TopologyRequest
from .quota import FlavorResource

PRIORITY_BOOST_ANNOTATION = "kueue.x-k8s.io/priority-boost"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


@dataclass(frozen=True)
class PodSetRequest:
    name: str
    count: int
    per_pod: Mapping[str, int]
    """Resource amounts one pod requests (CPU in milli-units)."""
    required_topology: str | None = None
    preferred_topology: str | None = None
    unconstrained_topology: bool = False
    slice_topology: str | None = None
    """podSetSliceRequiredTopology: slices of `slice_size` pods, each inside one domain of it."""
    slice_size: int | None = None
    slice_layers: tuple[tuple[str, int], ...] = ()
    """podsetSliceRequiredTopologyConstraints: (level, size) per layer, the widest first."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    """The pod template's tolerations (TAS skips nodes with a taint none of them tolerates)."""
    required_affinity: tuple[Mapping[str, Any], ...] | None = None
    """The pod template's required node affinity terms (nodeSelectorTerms), None when it has none."""
    min_count: int | None = None
    """spec.podSets[].minCount: the fewest pods partial admission may admit (None: all or nothing)."""

    @property
    def topology_request(self) -> TopologyRequest:
        return TopologyRequest(
            required=self.required_topology,
            preferred=self.preferred_topology,
            unconstrained=self.unconstrained_topology,
            slice_level=self.slice_topology,
            slice_size=self.slice_size,
            layers=self.slice_layers,
        )

    def total(self, count: int | None = None) -> dict[str, int]:
        pods = self.count if count is None else count
        return {resource: amount * pods for resource, amount in self.per_pod.items()}


@dataclass(frozen=True)
class PodSetUsage:
    """An admitted pod set: which flavor each resource took, how much, and where (TAS)."""

    name: str
    count: int
    flavors: Mapping[str, str]
    usage: Mapping[str, int]
    per_pod: Mapping[str, int] = field(default_factory=dict)
    topology_assignment: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class PriorityClassInfo:
    name: str
    kind: str
    value: int
    annotations: Mapping[str, str] = field(default_factory=dict)
    preemption_policy: str | None = None
    """A PriorityClass's preemptionPolicy (Never: its workloads may not preempt); None for a
    WorkloadPriorityClass, which has none."""


@dataclass(frozen=True, eq=False)
class WorkloadInfo:
    """A Workload parsed once: everything scheduling reads, nothing it does not."""

    obj: Workload
    key: str
    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    queue_name: str
    created: datetime
    base_priority: int
    boost: int
    priority_class: PriorityClassInfo | None
    pod_sets: tuple[PodSetRequest, ...]
    active: bool
    finished: bool
    # Admission, when quota is reserved.
    cluster_queue: str | None
    admitted_pod_sets: tuple[PodSetUsage, ...]
    usage: Mapping[FlavorResource, int]
    reserved_at: datetime | None
    evicted: bool
    accumulated_execution_seconds: int = 0
    """status.accumulatedPastExecutionTimeSeconds: time run before earlier evictions."""
    owner: tuple[str, str] | None = None
    """(apiVersion, kind) of the controller owner reference, or of a group Workload's members: the
    job that runs this workload."""
    queued_at: datetime | None = None
    """Kueue's queue-order timestamp when it is not the creation time: the eviction's, for a
    workload evicted by a PodsReady timeout (requeuingStrategy.timestamp: Eviction) or an
    admission check."""

    @property
    def order_time(self) -> datetime:
        """Where it stands in its queue among equal priorities (Kueue's GetQueueOrderTimestamp)."""
        return self.queued_at or self.created

    @property
    def priority(self) -> int:
        """Effective priority: base plus the priority-boost annotation."""
        return self.base_priority + self.boost

    @functools.cached_property
    def shape(self) -> tuple[object, ...]:
        """scheduling_shape, once per parsed version: a failed head compares it with every
        workload pending in its queue."""
        return scheduling_shape(self)

    @property
    def reserves_quota(self) -> bool:
        return self.cluster_queue is not None

    @property
    def priority_class_name(self) -> str:
        ref = self.obj.spec.priority_class_ref
        return ref.name if ref else ""

    @property
    def job_uid(self) -> str:
        return self.labels.get(JOB_UID_LABEL, "") or "UNKNOWN"

    def uses_any(self, frs: set[FlavorResource] | frozenset[FlavorResource]) -> bool:
        return not frs.isdisjoint(self.usage)

    def condition(self, kind: str) -> Condition | None:
        return find_condition(self.obj, kind)


def find_condition(obj: Workload, kind: str) -> Condition | None:
    if obj.status is None or not obj.status.conditions:
        return None
    for condition in obj.status.conditions:
        if condition.type == kind:
            return condition
    return None


def is_true(obj: Workload, kind: str) -> bool:
    condition = find_condition(obj, kind)
    return condition is not None and condition.status == "True"


_SIGNED = re.compile(r"[+-]?[0-9]+")


def parse_boost(annotations: Mapping[str, str]) -> int:
    """The priority-boost annotation as a signed int32; anything else counts as 0, as Kueue does.
    Never raises: annotations are not validated by the API server."""
    raw = annotations.get(PRIORITY_BOOST_ANNOTATION)
    if raw is None:
        return 0
    text = raw.strip()
    # Decimal ASCII digits only (Python's int() would also take "1_0" and other scripts' digits),
    # and no int() of a long string, which Python refuses past 4300 digits.
    digits = text.lstrip("+-").lstrip("0")
    if not _SIGNED.fullmatch(text) or len(digits) > 10:
        return 0
    value = int(digits or "0") * (-1 if text.startswith("-") else 1)
    return value if INT32_MIN <= value <= INT32_MAX else 0


def pod_requests(pod_set: PodSet) -> dict[str, int]:
    """Per-pod requests: containers summed, the largest init container as a floor, plus overhead.
    A container's limit stands in for a missing request, as Kubernetes defaults it. parse_object
    has checked that each fits in int64, and so does count times each."""
    return pod_set.template.spec.amounts_per_pod()


def _pod_set_requests(obj: Workload, live: Mapping[str, int]) -> tuple[PodSetRequest, ...]:
    return tuple(
        PodSetRequest(
            name=ps.name,
            count=live[ps.name],
            per_pod=pod_requests(ps),
            required_topology=ps.topology_request.required if ps.topology_request else None,
            preferred_topology=ps.topology_request.preferred if ps.topology_request else None,
            unconstrained_topology=bool(ps.topology_request and ps.topology_request.unconstrained),
            slice_topology=ps.topology_request.pod_set_slice_required_topology if ps.topology_request else None,
            slice_size=ps.topology_request.pod_set_slice_size if ps.topology_request else None,
            slice_layers=tuple(
                (layer.topology, layer.size)
                for layer in (ps.topology_request.podset_slice_required_topology_constraints or [])
            )
            if ps.topology_request
            else (),
            node_selector=dict(ps.template.spec.node_selector or {}),
            tolerations=tuple(ps.template.spec.tolerations()),
            required_affinity=ps.template.spec.required_node_affinity(),
            min_count=ps.min_count,
        )
        for ps in obj.spec.pod_sets
    )


def build_info(
    obj: Workload,
    priority_classes: Mapping[tuple[str, str], PriorityClassInfo],
    previous: WorkloadInfo | None = None,
    requeue_by_creation: bool = False,
) -> WorkloadInfo:
    """Parses a Workload. `priority_classes` maps (kind, name) to the class, for both
    WorkloadPriorityClass and PriorityClass. `previous`: the info of an earlier version; when
    this one shares its spec (a status write), the pods' requests are taken from it.
    `requeue_by_creation`: waitForPodsReady's requeuingStrategy.timestamp is Creation (a
    workload evicted by a PodsReady timeout keeps its place by creation time)."""
    meta = obj.metadata
    labels = dict(meta.labels or {})
    annotations = dict(meta.annotations or {})
    ref = obj.spec.priority_class_ref
    priority_class = priority_classes.get((ref.kind, ref.name)) if ref else None
    if obj.spec.priority is not None:
        base = obj.spec.priority
    elif priority_class is not None:
        base = priority_class.value
    else:
        base = 0

    # Pods that finished need no quota: a pod set counts only the others (Kueue's reclaimablePods).
    reclaimable = {rp.name: rp.count for rp in (obj.status.reclaimable_pods or [])} if obj.status else {}
    spec_counts = {ps.name: ps.count for ps in obj.spec.pod_sets}
    live = {name: count - min(reclaimable.get(name, 0), count) for name, count in spec_counts.items()}
    if previous is not None and previous.obj.spec is obj.spec:
        pod_sets = tuple(
            ps if ps.count == live[ps.name] else dataclasses.replace(ps, count=live[ps.name])
            for ps in previous.pod_sets
        )
    else:
        pod_sets = _pod_set_requests(obj, live)

    reserved = find_condition(obj, "QuotaReserved")
    admission = obj.status.admission if obj.status else None
    cluster_queue: str | None = None
    admitted: tuple[PodSetUsage, ...] = ()
    usage: dict[FlavorResource, int] = {}
    reserved_at: datetime | None = None
    if reserved is not None and reserved.status == "True" and admission is not None:
        cluster_queue = admission.cluster_queue
        reserved_at = reserved.last_transition_time
        by_name = {ps.name: ps for ps in pod_sets}
        psa_list = []
        for psa in admission.pod_set_assignments:
            request = by_name.get(psa.name)
            count = psa.count if psa.count is not None else spec_counts.get(psa.name, 0)
            flavors = dict(psa.flavors or {})
            if psa.resource_usage:
                amounts = {res: to_amount(res, q) for res, q in psa.resource_usage.items()}
            elif request is not None:
                amounts = request.total(count)
                if "pods" in flavors:
                    amounts["pods"] = count  # a covered `pods` resource counts one per pod
            else:
                amounts = {}
            after_reclaim = live.get(psa.name, count)
            if after_reclaim < count:
                # Scaled as Kueue scales it: per pod (integer division), times the pods still running.
                amounts = {res: amount // count * after_reclaim for res, amount in amounts.items()}
                count = after_reclaim
            topology = psa.topology_assignment.to_wire() if psa.topology_assignment is not None else None
            per_pod = dict(request.per_pod) if request is not None else {}
            psa_list.append(PodSetUsage(psa.name, count, flavors, amounts, per_pod, topology))
            for resource, amount in amounts.items():
                flavor = flavors.get(resource)
                if flavor is None:
                    continue
                fr = (flavor, resource)
                usage[fr] = usage.get(fr, 0) + amount
        admitted = tuple(psa_list)

    created = meta.creation_timestamp or datetime.fromtimestamp(0, UTC)
    evicted = find_condition(obj, "Evicted")
    by_eviction = ("AdmissionCheck",) if requeue_by_creation else ("AdmissionCheck", "PodsReadyTimeout")
    queued_at = None
    if evicted is not None and evicted.status == "True" and evicted.reason in by_eviction:
        queued_at = evicted.last_transition_time
    # A group's Workload is run by its members (a pod group's Pods), none of them its controller.
    controller = meta.controller() or meta.group_owner()
    return WorkloadInfo(
        obj=obj,
        key=f"{meta.namespace or ''}/{meta.name}",
        namespace=meta.namespace or "",
        name=meta.name,
        uid=meta.uid or f"{meta.namespace or ''}/{meta.name}",
        labels=labels,
        annotations=annotations,
        queue_name=obj.spec.queue_name or "",
        created=created,
        base_priority=base,
        boost=parse_boost(annotations),
        priority_class=priority_class,
        pod_sets=pod_sets,
        active=obj.spec.active,
        finished=is_true(obj, "Finished"),
        cluster_queue=cluster_queue,
        admitted_pod_sets=admitted,
        usage=usage,
        reserved_at=reserved_at,
        evicted=is_true(obj, "Evicted"),
        accumulated_execution_seconds=(obj.status.accumulated_past_execution_time_seconds or 0) if obj.status else 0,
        owner=controller,
        queued_at=queued_at,
    )


def scheduling_shape(wl: WorkloadInfo) -> tuple[object, ...]:
    """What Kueue's scheduling equivalence hash covers: effective priority and, per pod set, its
    name, count, minCount, requests and placement constraints. Workloads of one shape that one
    failed to fit cannot fit either."""
    return (
        wl.priority,
        tuple(
            (
                ps.name,
                ps.count,
                ps.min_count,
                tuple(sorted(ps.per_pod.items())),
                tuple(sorted(ps.node_selector.items())),
                ps.required_topology,
                ps.preferred_topology,
                ps.unconstrained_topology,
                ps.slice_topology,
                ps.slice_size,
                ps.slice_layers,
                repr(ps.tolerations),
                repr(ps.required_affinity),
            )
            for ps in wl.pod_sets
        ),
    )
