"""Flavor assignment: which flavor each requested resource takes, and whether it fits now,
fits after preemption, or cannot fit. Follows Kueue's flavor assigner: every flavor gets a
granular mode (how it fits and from how far up the cohort tree its quota comes), flavor
fungibility decides when the search stops, and `preference` which of two modes is better."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

from ..api.quantity import format_amount
from ..api.v1beta2 import ResourceFlavor
from .placement import CapacityMemo, NodeFilter, NodeUsage, Placement, TopologyView, find
from .quota import FlavorResource, borrowing_level
from .snapshot import ClusterQueueInfo
from .tas_state import TasState
from .workload import PodSetRequest, WorkloadInfo


class Mode(IntEnum):
    """How a request fits; larger is better."""

    NO_FIT = 0
    PREEMPT = 1
    FIT = 2


class Possibility(IntEnum):
    """Kueue's granular preemption modes of a flavor-resource, worst first: no fit; preemption
    needed but nobody could be preempted; victims in the preemptor's own ClusterQueue; victims
    only in other ClusterQueues (reclaim); fits now."""

    NO_FIT = 0
    NO_CANDIDATES = 1
    PREEMPT = 2
    RECLAIM = 3
    FIT = 4


_MODES = (Mode.NO_FIT, Mode.PREEMPT, Mode.PREEMPT, Mode.PREEMPT, Mode.FIT)
"""The assignment mode of each possibility (Kueue's flavorAssignmentMode)."""


class Granular(NamedTuple):
    """How a flavor (or one of its resources) fits, and its borrowing level: 0 within the
    ClusterQueue's own quota, else the height of the cohort subtree the quota comes from."""

    possibility: Possibility
    borrow: int


_WORST = Granular(Possibility.NO_FIT, 2**31)
_BEST = Granular(Possibility.FIT, 0)
_UNSETTLED = Granular(Possibility.PREEMPT, 0)
"""Needs preemption; no oracle asked, the borrowing level is measured later."""


def is_preferred(a: Granular, b: Granular, preference: str | None) -> bool:
    """Whether `a` is a better flavor than `b` (Kueue's isPreferred). A flavor that does not fit
    is never better; one without preemption candidates ranks below any that can be admitted,
    whatever the preference. Then BorrowingOverPreemption (the default) compares how it fits
    before the borrowing level, PreemptionOverBorrowing the other way round."""
    if a.possibility is Possibility.NO_FIT:
        return False
    if b.possibility is Possibility.NO_FIT:
        return True
    a_stuck = a.possibility is Possibility.NO_CANDIDATES
    if a_stuck != (b.possibility is Possibility.NO_CANDIDATES):
        return not a_stuck
    by_fit = (a.possibility, -a.borrow) > (b.possibility, -b.borrow)
    by_borrowing = (-a.borrow, a.possibility) > (-b.borrow, b.possibility)
    return by_borrowing if preference == "PreemptionOverBorrowing" else by_fit


def try_next_flavor(mode: Granular, cq: ClusterQueueInfo) -> bool:
    """Kueue's shouldTryNextFlavor: always past a flavor that cannot be admitted (no fit, or no
    preemption candidates); past one needing preemption or borrowing when fungibility says so."""
    if mode.possibility in (Possibility.NO_FIT, Possibility.NO_CANDIDATES):
        return True
    if mode.possibility in (Possibility.PREEMPT, Possibility.RECLAIM) and cq.when_can_preempt == "TryNextFlavor":
        return True
    return mode.borrow > 0 and cq.when_can_borrow == "TryNextFlavor"


@dataclass
class PodSetFlavors:
    name: str
    count: int
    """Pods assigned: the request's count, or fewer under partial admission."""
    flavors: dict[str, str] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)
    borrow: dict[str, int] = field(default_factory=dict)
    """Borrowing level per resource (after preemption for resources that need it)."""
    mode: Mode = Mode.FIT
    reasons: list[str] = field(default_factory=list)
    request: PodSetRequest | None = None
    view: TopologyView | None = None
    """The TAS flavor's nodes, when the pod set must be placed on a topology."""
    placement: Placement | None = None
    topology_failed: bool = False
    node_filter: NodeFilter = field(default_factory=NodeFilter)
    """What the pod set asks of a node: its selector, affinity, and tolerations with the flavor's."""
    memo: CapacityMemo = field(default_factory=CapacityMemo, repr=False)

    def find(self, usage: NodeUsage | None) -> Placement | str:
        """A placement on the TAS flavor's nodes, or why there is none."""
        assert self.view is not None and self.request is not None
        request = self.request
        return find(
            self.view, usage, request.per_pod, self.count, request.topology_request, self.node_filter, self.memo
        )

    def place(self, usage: NodeUsage | None) -> Placement | None:
        found = self.find(usage)
        return found if isinstance(found, Placement) else None

    def message(self) -> str:
        return f"couldn't assign flavors to pod set {self.name}: {', '.join(sorted(self.reasons))}"


@dataclass
class Assignment:
    pod_sets: list[PodSetFlavors]
    usage: dict[FlavorResource, int]
    borrowing: int
    """Kueue's borrowing level: the highest of every assigned resource's; 0 when nothing is
    borrowed. Entries that borrow less are scheduled first."""
    need_preemption: set[FlavorResource]
    """Flavor-resources assigned in Preempt mode: victims must hold quota in one of these."""
    no_matching_flavor: bool = False
    unsettled: set[FlavorResource] = field(default_factory=set)
    """Flavor-resources needing preemption that no oracle looked at (only one flavor to choose
    from): their borrowing level is not in `borrowing` until the scheduler measures it with the
    victims it finds gone."""

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
        """Kueue's message: one part per pod set that does not fit as it is, joined by "; ", up to
        the first that cannot fit at all (Kueue stops assigning there)."""
        parts = []
        for ps in self.pod_sets:
            if ps.mode != Mode.FIT:
                parts.append(ps.message())
            if ps.mode == Mode.NO_FIT:
                break
        return "; ".join(parts)


Oracle = Callable[[FlavorResource, int], Granular]
"""Kueue's preemption oracle: given one flavor-resource and the amount wanted of it, whether
victims could make room (NO_CANDIDATES, PREEMPT or RECLAIM) and the borrowing level once they
are gone."""


def uses_configurable_preemption(cq: ClusterQueueInfo) -> bool:
    return cq.preemption_config_name is not None


def can_preempt_while_borrowing(cq: ClusterQueueInfo, fair_sharing: bool = False) -> bool:
    """Whether preemption may leave the ClusterQueue borrowing. Kueue: with borrowWithinCohort,
    or with fair sharing on and reclaimWithinCohort not Never (fair preemption always allows
    borrowing); withinClusterQueue does not count, so a workload that would borrow preempts
    nobody in its own queue. A PreemptionConfig counts too, as in Kueue's configurable
    preemption: its rules (hero queues) may preempt and then borrow, within the borrowing limits."""
    borrow = cq.preemption.borrow_within_cohort
    return (
        (borrow is not None and borrow.policy != "Never")
        or (fair_sharing and cq.preemption.reclaim_within_cohort != "Never")
        or uses_configurable_preemption(cq)
    )


def _fits_quota(
    cq: ClusterQueueInfo,
    fr: FlavorResource,
    value: int,
    reasons: list[str],
    oracle: Oracle | None,
    previous: int = 0,
    fair_sharing: bool = False,
) -> Granular:
    """Kueue's fitsResourceQuota. Without an oracle, a flavor-resource that could be had by
    preemption counts as PREEMPT; its borrowing level is left to the scheduler, which measures it
    with the victims it finds (the flavor-resource is `unsettled`)."""
    node = cq.node
    flavor, resource = fr
    max_capacity = node.potential_available(fr)
    if value > max_capacity:
        # `previous`: what the workload's earlier pod sets take of the same flavor-resource.
        reasons.append(
            f"insufficient quota for {resource} in flavor {flavor}, previously considered podsets requests "
            f"({format_amount(resource, previous)}) + current podset request "
            f"({format_amount(resource, value - previous)}) > maximum capacity "
            f"({format_amount(resource, max_capacity)})"
        )
        return Granular(Possibility.NO_FIT, 0)
    available = node.available(fr)
    if value <= available:
        return Granular(Possibility.FIT, borrowing_level(node, fr, value)[0])
    reasons.append(
        f"insufficient unused quota for {resource} in flavor {flavor}, "
        f"{format_amount(resource, value - available)} more needed"
    )
    if value <= node.nominal(fr) or can_preempt_while_borrowing(cq, fair_sharing):
        return oracle(fr, value) if oracle is not None else _UNSETTLED
    borrow, may_reclaim = borrowing_level(node, fr, value)
    if may_reclaim:
        return oracle(fr, value) if oracle is not None else _UNSETTLED
    return Granular(Possibility.NO_FIT, borrow)


def _flavor_matches(flavor: ResourceFlavor | None, pod_set: PodSetRequest) -> bool:
    labels = (flavor.spec.node_labels or {}) if flavor is not None else {}
    return all(labels.get(key, value) == value for key, value in pod_set.node_selector.items())


def _lacks_requested_level(flavor_name: str, tas: TasState | None, pod_set: PodSetRequest) -> str | None:
    """Kueue's reason for passing over a TAS flavor whose topology lacks a level the pod set's
    topology request names (its level, its slice levels)."""
    view = tas.views.get(flavor_name) if tas is not None else None
    if view is None or all(level in view.levels for level in pod_set.topology_request.levels_named()):
        return None
    return f'Flavor "{flavor_name}" does not contain the requested level'


def assign_flavors(
    wl: WorkloadInfo,
    cq: ClusterQueueInfo,
    flavors: Mapping[str, ResourceFlavor],
    tas: TasState | None = None,
    node_usage: NodeUsage | None = None,
    oracle: Oracle | None = None,
    counts: Sequence[int] | None = None,
    *,
    fair_sharing: bool = False,
) -> Assignment:
    """Chooses flavors for every pod set of `wl` in `cq`, against the usage in `cq.node`'s tree;
    pod sets on a TAS flavor also get a placement on its nodes (against `node_usage`). `counts`
    replaces the pod sets' counts (partial admission). The oracle is asked only where there is a
    choice of flavors. With `fair_sharing`, preemption may leave the ClusterQueue borrowing
    whenever it may reclaim within its cohort."""
    usage: dict[FlavorResource, int] = {}
    pod_sets: list[PodSetFlavors] = []
    need_preemption: set[FlavorResource] = set()
    unsettled: set[FlavorResource] = set()
    no_matching = False
    borrowing = 0
    counts_pods = cq.group_for("pods") is not None
    for index, request in enumerate(wl.pod_sets):
        count = request.count if counts is None else counts[index]
        result = PodSetFlavors(request.name, count, request=request)
        totals = request.total(count)
        if counts_pods:
            totals["pods"] = count  # Kueue counts one `pods` per pod, whatever the containers ask
        pod_sets.append(result)
        if count == 0:
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
            ask = oracle if len(group.flavors) > 1 else None
            best: tuple[str, dict[str, Granular]] | None = None
            best_mode = _WORST
            matched = False
            for flavor_name in group.flavors:
                if (lacking := _lacks_requested_level(flavor_name, tas, request)) is not None:
                    result.reasons.append(lacking)
                    continue
                if not _flavor_matches(flavors.get(flavor_name), request):
                    result.reasons.append(f"flavor {flavor_name} doesn't match node affinity")
                    continue
                matched = True
                modes: dict[str, Granular] = {}
                flavor_mode = _BEST
                for res in wanted:
                    fr = (flavor_name, res)
                    value = totals.get(res, 0) + usage.get(fr, 0)
                    # Once the flavor cannot fit, the oracle's answer changes nothing.
                    live = ask if flavor_mode.possibility is not Possibility.NO_FIT else None
                    mode = modes[res] = _fits_quota(cq, fr, value, result.reasons, live, usage.get(fr, 0), fair_sharing)
                    # The flavor is as good as its worst resource (the first one decides alone).
                    if flavor_mode is _BEST or is_preferred(flavor_mode, mode, cq.preference):
                        flavor_mode = mode
                if flavor_mode.possibility is Possibility.NO_FIT:
                    continue  # never chosen, never a reason to stop
                if not try_next_flavor(flavor_mode, cq):
                    best, best_mode = (flavor_name, modes), flavor_mode
                    break
                if best is None or is_preferred(flavor_mode, best_mode, cq.preference):
                    best, best_mode = (flavor_name, modes), flavor_mode
            if best is None:
                result.mode = Mode.NO_FIT
                if not matched:
                    if not result.reasons:
                        result.reasons.append(f"no flavor in the ClusterQueue can hold {resource}")
                    no_matching = True
                continue
            flavor_name, modes = best
            for res in wanted:
                fr = (flavor_name, res)
                possibility, level = modes[res]
                resource_mode = _MODES[possibility]
                result.mode = min(result.mode, resource_mode)
                result.flavors[res] = flavor_name
                result.borrow[res] = level
                if level > borrowing:
                    borrowing = level
                amount = totals.get(res, 0)
                result.usage[res] = amount
                usage[fr] = usage.get(fr, 0) + amount
                if resource_mode == Mode.PREEMPT:
                    need_preemption.add(fr)
                    if ask is None:
                        unsettled.add(fr)
        if tas is not None and result.mode != Mode.NO_FIT and count > 0:
            node_usage = _place(result, tas, flavors, node_usage, need_preemption)
    return Assignment(pod_sets, usage, borrowing, need_preemption, no_matching, unsettled)


def _place(
    result: PodSetFlavors,
    tas: TasState,
    flavors: Mapping[str, ResourceFlavor],
    node_usage: NodeUsage | None,
    need_preemption: set[FlavorResource],
) -> NodeUsage | None:
    """Places a pod set on its TAS flavor's nodes. Quota fitting but no placement becomes Preempt
    when a placement exists on empty nodes (victims could make room), else NoFit."""
    view = tas.view_for(result.flavors)
    if view is None:
        return node_usage
    result.view = view
    assert result.request is not None
    flavor = flavors.get(view.flavor)
    flavor_tolerations = tuple(flavor.spec.tolerations or ()) if flavor is not None else ()
    result.node_filter = NodeFilter(
        node_selector=dict(result.request.node_selector),
        tolerations=(*result.request.tolerations, *flavor_tolerations),
        affinity=result.request.required_affinity,
    )
    if result.mode != Mode.FIT:
        return node_usage  # quota needs preemption first; placement is checked with the victims gone
    found = result.find(node_usage)
    if isinstance(found, Placement):
        result.placement = found
        later = node_usage.copy() if node_usage is not None else NodeUsage()
        later.add(found.usage(result.request.per_pod))
        return later  # the workload's next pod sets see these pods
    result.topology_failed = True
    result.reasons.append(found)
    if result.place(None) is not None:
        result.mode = Mode.PREEMPT
        need_preemption.update((view.flavor, res) for res, flavor in result.flavors.items() if flavor == view.flavor)
    else:
        result.mode = Mode.NO_FIT
    return node_usage
