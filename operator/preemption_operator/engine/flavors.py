"""Flavor assignment: which flavor each requested resource takes, and whether it fits now,
fits after preemption, or cannot fit. Follows Kueue's flavor assigner (fungibility defaults:
stop at the first flavor that fits, keep looking past one that needs preemption)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from ..api.quantity import format_amount
from ..api.v1beta2 import ResourceFlavor
from .placement import CapacityMemo, NodeUsage, Placement, TopologyView, fit_message, place
from .quota import FlavorResource, QuotaNode
from .snapshot import ClusterQueueInfo
from .tas_state import TasState
from .workload import PodSetRequest, WorkloadInfo


class Mode(IntEnum):
    """How a request fits; larger is better."""

    NO_FIT = 0
    PREEMPT = 1
    FIT = 2


@dataclass
class PodSetFlavors:
    name: str
    count: int
    flavors: dict[str, str] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)
    mode: Mode = Mode.FIT
    reasons: list[str] = field(default_factory=list)
    request: PodSetRequest | None = None
    view: TopologyView | None = None
    """The TAS flavor's nodes, when the pod set must be placed on a topology."""
    placement: Placement | None = None
    topology_failed: bool = False
    memo: CapacityMemo = field(default_factory=CapacityMemo, repr=False)

    def place(self, usage: NodeUsage | None) -> Placement | None:
        assert self.view is not None and self.request is not None
        return place(
            self.view,
            usage,
            self.request.per_pod,
            self.count,
            required=self.request.required_topology,
            preferred=self.request.preferred_topology,
            node_selector=self.request.node_selector,
            memo=self.memo,
        )

    def message(self) -> str:
        return f"couldn't assign flavors to pod set {self.name}: {', '.join(sorted(self.reasons))}"


@dataclass
class Assignment:
    pod_sets: list[PodSetFlavors]
    usage: dict[FlavorResource, int]
    borrowing: bool
    need_preemption: set[FlavorResource]
    """Flavor-resources assigned in Preempt mode: victims must hold quota in one of these."""
    no_matching_flavor: bool = False

    @property
    def mode(self) -> Mode:
        return min((ps.mode for ps in self.pod_sets), default=Mode.FIT)

    @property
    def topology_failed(self) -> bool:
        """Quota fits but some pod set has no topology placement."""
        return any(ps.topology_failed for ps in self.pod_sets)

    def node_usage(self) -> dict[str, dict[str, int]]:
        """Per node, what the placed pod sets will use."""
        total = NodeUsage()
        for ps in self.pod_sets:
            if ps.placement is not None and ps.request is not None:
                total.add(ps.placement.usage(ps.request.per_pod))
        return total.used

    def message(self) -> str:
        """Kueue's message for the first pod set that does not fit as it is."""
        for ps in self.pod_sets:
            if ps.mode != Mode.FIT:
                return ps.message()
        return ""


Oracle = Callable[[dict[FlavorResource, int], set[FlavorResource]], str]
"""Given a flavor's requests and the pairs needing preemption: "none", "preempt" (victims in the
preemptor's own ClusterQueue) or "reclaim" (victims only in other ClusterQueues)."""

# How good a flavor is, Kueue's granular modes: NoFit < NoCandidates < Preempt < Reclaim < Fit.
_RANK = {Mode.NO_FIT: 0, Mode.PREEMPT: 2, Mode.FIT: 4}
_RANK_BY_ORACLE = {"none": 1, "preempt": 2, "reclaim": 3}


def uses_configurable_preemption(cq: ClusterQueueInfo) -> bool:
    return cq.preemption_config_name is not None


def can_preempt_while_borrowing(cq: ClusterQueueInfo) -> bool:
    borrow = cq.preemption.borrow_within_cohort
    return (
        (borrow is not None and borrow.policy != "Never")
        or cq.preemption.within_cluster_queue != "Never"
        or uses_configurable_preemption(cq)
    )


def lowest_subtree_that_fits(node: QuotaNode, fr: FlavorResource, value: int) -> bool:
    """Whether some subtree below the root fits `value` more of `fr` (Kueue's
    FindHeightOfLowestSubtreeThatFits, second result): then reclaiming inside it is possible."""
    if not (node.borrowing_with(fr, value) and node.has_parent):
        return node.has_parent
    remaining = value - node.local_available(fr)
    last = node
    for ancestor in node.path_to_root():
        last = ancestor
        if not ancestor.borrowing_with(fr, remaining):
            return ancestor.has_parent
        remaining -= ancestor.local_available(fr)
    return last.has_parent


def _fits_quota(cq: ClusterQueueInfo, fr: FlavorResource, value: int, reasons: list[str]) -> tuple[Mode, bool]:
    node = cq.node
    flavor, resource = fr
    max_capacity = node.potential_available(fr)
    if value > max_capacity:
        reasons.append(
            f"insufficient quota for {resource} in flavor {flavor}, request > maximum capacity "
            f"({format_amount(resource, value)} > {format_amount(resource, max_capacity)})"
        )
        return Mode.NO_FIT, False
    borrow = node.borrowing_with(fr, value)
    available = node.available(fr)
    if value <= available:
        return Mode.FIT, borrow
    reasons.append(
        f"insufficient unused quota for {resource} in flavor {flavor}, "
        f"{format_amount(resource, value - available)} more needed"
    )
    if value <= node.nominal(fr) or lowest_subtree_that_fits(node, fr, value) or can_preempt_while_borrowing(cq):
        return Mode.PREEMPT, borrow
    return Mode.NO_FIT, borrow


def _flavor_matches(flavor: ResourceFlavor | None, pod_set: PodSetRequest) -> bool:
    labels = (flavor.spec.node_labels or {}) if flavor is not None else {}
    return all(labels.get(key, value) == value for key, value in pod_set.node_selector.items())


def assign_flavors(
    wl: WorkloadInfo,
    cq: ClusterQueueInfo,
    flavors: Mapping[str, ResourceFlavor],
    tas: TasState | None = None,
    node_usage: NodeUsage | None = None,
    oracle: Oracle | None = None,
) -> Assignment:
    """Chooses flavors for every pod set of `wl` in `cq`, against the usage in `cq.node`'s tree;
    pod sets on a TAS flavor also get a placement on its nodes (against `node_usage`)."""
    usage: dict[FlavorResource, int] = {}
    pod_sets: list[PodSetFlavors] = []
    borrowing = False
    need_preemption: set[FlavorResource] = set()
    no_matching = False
    for request in wl.pod_sets:
        result = PodSetFlavors(request.name, request.count, request=request)
        totals = request.total()
        pod_sets.append(result)
        if request.count == 0:
            continue
        handled: set[str] = set()
        for resource in sorted(totals):
            if resource in handled or totals[resource] == 0:
                continue
            group = cq.group_for(resource)
            if group is None:
                result.mode = Mode.NO_FIT
                result.reasons.append(f"resource {resource} unavailable in ClusterQueue")
                no_matching = True
                continue
            wanted = [r for r in group.covered_resources if totals.get(r, 0) > 0 or r == resource]
            handled.update(wanted)
            best: tuple[Mode, bool, str, dict[FlavorResource, Mode]] | None = None
            best_rank: tuple[int, bool] = (-1, False)
            several = len(group.flavors) > 1
            for flavor_name in group.flavors:
                if not _flavor_matches(flavors.get(flavor_name), request):
                    result.reasons.append(f"flavor {flavor_name} doesn't match node affinity")
                    continue
                modes: dict[FlavorResource, Mode] = {}
                flavor_borrow = False
                for res in wanted:
                    fr = (flavor_name, res)
                    value = totals.get(res, 0) + usage.get(fr, 0)
                    mode, borrow = _fits_quota(cq, fr, value, result.reasons)
                    modes[fr] = mode
                    flavor_borrow = flavor_borrow or borrow
                flavor_mode = min(modes.values(), default=Mode.FIT)
                rank = _RANK[flavor_mode]
                if flavor_mode == Mode.PREEMPT and oracle is not None and several:
                    # Kueue's preemption oracle: a flavor where nobody could be preempted ranks
                    # below one where someone could, and reclaiming from other queues above both.
                    contested = {fr for fr, m in modes.items() if m == Mode.PREEMPT}
                    wanted_usage = {(flavor_name, r): totals.get(r, 0) + usage.get((flavor_name, r), 0) for r in wanted}
                    rank = _RANK_BY_ORACLE[oracle(wanted_usage, contested)]
                if best is None or (rank, not flavor_borrow) > best_rank:
                    best = (flavor_mode, flavor_borrow, flavor_name, modes)
                    best_rank = (rank, not flavor_borrow)
                if flavor_mode == Mode.FIT and (not flavor_borrow or _stop_when_borrowing(cq)):
                    break
                if flavor_mode == Mode.PREEMPT and _stop_when_preempting(cq):
                    break
            if best is None or best[0] == Mode.NO_FIT:
                result.mode = Mode.NO_FIT
                if best is None and not result.reasons:
                    result.reasons.append(f"no flavor in the ClusterQueue can hold {resource}")
                no_matching = no_matching or best is None
                continue
            mode, flavor_borrow, flavor_name, modes = best
            result.mode = min(result.mode, mode)
            borrowing = borrowing or flavor_borrow
            for res in wanted:
                fr = (flavor_name, res)
                result.flavors[res] = flavor_name
                amount = totals.get(res, 0)
                result.usage[res] = amount
                usage[fr] = usage.get(fr, 0) + amount
                if modes[fr] == Mode.PREEMPT:
                    need_preemption.add(fr)
        if tas is not None and result.mode != Mode.NO_FIT and request.count > 0:
            node_usage = _place(result, tas, node_usage, need_preemption)
    return Assignment(pod_sets, usage, borrowing, need_preemption, no_matching)


def _place(
    result: PodSetFlavors, tas: TasState, node_usage: NodeUsage | None, need_preemption: set[FlavorResource]
) -> NodeUsage | None:
    """Places a pod set on its TAS flavor's nodes. Quota fitting but no placement becomes Preempt
    when a placement exists on empty nodes (victims could make room), else NoFit."""
    view = tas.view_for(result.flavors)
    if view is None:
        return node_usage
    result.view = view
    if result.mode != Mode.FIT:
        return node_usage  # quota needs preemption first; placement is checked with the victims gone
    placement = result.place(node_usage)
    if placement is not None:
        result.placement = placement
        assert result.request is not None
        later = node_usage.copy() if node_usage is not None else NodeUsage()
        later.add(placement.usage(result.request.per_pod))
        return later  # the workload's next pod sets see these pods
    assert result.request is not None
    result.topology_failed = True
    request = result.request
    result.reasons.append(
        fit_message(view, node_usage, request.per_pod, result.count, request.required_topology, request.node_selector)
    )
    if result.place(None) is not None:
        result.mode = Mode.PREEMPT
        need_preemption.update((view.flavor, res) for res, flavor in result.flavors.items() if flavor == view.flavor)
    else:
        result.mode = Mode.NO_FIT
    return node_usage


def _stop_when_borrowing(cq: ClusterQueueInfo) -> bool:
    return cq.when_can_borrow == "MayStopSearch"


def _stop_when_preempting(cq: ClusterQueueInfo) -> bool:
    return cq.when_can_preempt == "MayStopSearch"
