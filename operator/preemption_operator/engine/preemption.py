"""Choosing victims: Kueue's classic preemption (ClusterQueue.spec.preemption), the stream of
candidates that configurable rules extend, and the minimal victim set with fill-back.

Everything is computed on the snapshot: candidates are removed from it to test whether the
preemptor fits, and put back before returning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum

from . import protection
from .flavors import Assignment
from .ordering import candidate_key
from .quota import FlavorResource, QuotaNode, quantities_fit_in_quota
from .snapshot import ClusterQueueInfo, Snapshot
from .workload import WorkloadInfo

IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"
IN_COHORT_FAIR_SHARING = "InCohortFairSharing"
CONFIGURABLE_PREEMPTION = "ConfigurablePreemption"

HUMAN_REASONS = {
    IN_CLUSTER_QUEUE: "prioritization in the ClusterQueue",
    IN_COHORT_RECLAMATION: "reclamation within the cohort",
    IN_COHORT_FAIR_SHARING: "Fair Sharing within the cohort",
    IN_COHORT_RECLAIM_WHILE_BORROWING: "reclamation within the cohort while borrowing",
    CONFIGURABLE_PREEMPTION: "the configured preemption rules",
}


class Variant(Enum):
    WITHIN_CQ = IN_CLUSTER_QUEUE
    HIERARCHICAL_RECLAIM = IN_COHORT_RECLAMATION
    RECLAIM_WITHOUT_BORROWING = "ReclaimWithoutBorrowing"
    RECLAIM_WHILE_BORROWING = IN_COHORT_RECLAIM_WHILE_BORROWING

    @property
    def reason(self) -> str:
        return IN_COHORT_RECLAMATION if self is Variant.RECLAIM_WITHOUT_BORROWING else self.value


@dataclass(frozen=True)
class RuleMatch:
    """Which rule of a PreemptionConfig, and which of its selectors, selected a victim."""

    config: str
    selectors: tuple[tuple[str, tuple[int, ...]], ...]
    """(rule name, selector indexes), rules in spec order."""

    def describe(self) -> str:
        return "; ".join(f"{rule}/{','.join(str(i) for i in idx)}" for rule, idx in self.selectors)


@dataclass(frozen=True)
class Target:
    workload: WorkloadInfo
    reason: str
    rule: RuleMatch | None = None
    last_resort: bool = False
    """The victim had opted out of preemption and was taken because nothing else let the preemptor fit."""


@dataclass
class CandidateRecord:
    """One line of the explanation: a workload considered as a victim and what became of it."""

    workload: str
    cluster_queue: str
    outcome: str
    """chosen, spared (given back by fill-back), excluded (a policy forbids it), skipped (not
    usable in that attempt), or unused (the preemptor fit before it was reached)."""
    detail: str
    source: str = ""


@dataclass
class Candidate:
    workload: WorkloadInfo
    reason: str
    variant: Variant | None = None
    lca: QuotaNode | None = None
    """The lowest common ancestor with the preemptor's ClusterQueue (for other queues' workloads)."""
    rule: RuleMatch | None = None
    last_resort: bool = False

    @property
    def source(self) -> str:
        if self.rule is not None:
            return f"preemption config {self.rule.config} rule {self.rule.describe()}"
        return f"classic ({self.reason})"


@dataclass
class Context:
    """The preemptor and what it needs."""

    preemptor: WorkloadInfo
    cq: ClusterQueueInfo
    snapshot: Snapshot
    assignment: Assignment
    records: list[CandidateRecord] = field(default_factory=list)
    wake_at: datetime | None = None
    """The earliest time a protection that held now runs out (a toleration window, a rule's
    minTriggerRequiredDuration): the decision may change then with nothing else changing."""

    def wake_no_later_than(self, moment: datetime) -> None:
        if self.wake_at is None or moment < self.wake_at:
            self.wake_at = moment

    @property
    def frs(self) -> set[FlavorResource]:
        return self.assignment.need_preemption

    @property
    def requests(self) -> dict[FlavorResource, int]:
        return self.assignment.usage

    def record(self, wl: WorkloadInfo, outcome: str, detail: str, source: str = "") -> None:
        self.records.append(CandidateRecord(wl.key, wl.cluster_queue or "", outcome, detail, source))

    def fits(self, allow_borrowing: bool) -> bool:
        """Whether the preemptor fits now: quota (and, for topology requests, placement)."""
        return self.fits_quota(allow_borrowing) and self.fits_topology()

    def fits_topology(self) -> bool:
        """Every TAS pod set has a placement, each seeing the pods of the ones placed before it."""
        usage = self.snapshot.node_usage
        placed_any = False
        for ps in self.assignment.pod_sets:
            if ps.view is None or ps.request is None:
                continue
            placement = ps.place(usage)
            if placement is None:
                return False
            if not placed_any:
                usage = usage.copy()
                placed_any = True
            usage.add(placement.usage(ps.request.per_pod))
        return True

    def fits_quota(self, allow_borrowing: bool) -> bool:
        node = self.cq.node
        for fr, value in self.requests.items():
            if not allow_borrowing and node.borrowing_with(fr, value):
                return False
            if value > node.available(fr):
                return False
        return True


# Extra candidate streams (configurable preemption) plug in here: called once the classic
# candidates of an attempt are exhausted, with the attempt's borrowing flag.
ExtraCandidates = Callable[[Context, bool], Iterator[Candidate]]


# -- classic candidates ------------------------------------------------------------------------


def _policy_allows(ctx: Context, wl: WorkloadInfo) -> tuple[bool, str]:
    preemption = ctx.cq.preemption
    same_cq = wl.cluster_queue == ctx.cq.name
    policy = preemption.within_cluster_queue if same_cq else preemption.reclaim_within_cohort
    field_name = "withinClusterQueue" if same_cq else "reclaimWithinCohort"
    incoming, candidate = ctx.preemptor.priority, wl.priority
    if policy == "Any":
        return True, ""
    if policy == "LowerPriority":
        if candidate < incoming:
            return True, ""
        return False, f"priority {candidate} is not lower than {incoming} ({field_name}: LowerPriority)"
    if policy == "LowerOrNewerEqualPriority":
        if candidate < incoming or (candidate == incoming and ctx.preemptor.created < wl.created):
            return True, ""
        return False, f"priority {candidate} is neither lower than {incoming} nor equal and newer ({field_name})"
    return False, f"{field_name} is Never"


def _classify(ctx: Context, wl: WorkloadInfo, hierarchical_advantage: bool) -> Variant | None:
    if not wl.uses_any(ctx.frs):
        return None
    allowed, why = _policy_allows(ctx, wl)
    if not allowed:
        ctx.record(wl, "excluded", why, "classic")
        return None
    if wl.cluster_queue == ctx.cq.name:
        return Variant.WITHIN_CQ
    if hierarchical_advantage:
        return Variant.HIERARCHICAL_RECLAIM
    borrow = ctx.cq.preemption.borrow_within_cohort
    if borrow is None or borrow.policy == "Never":
        return Variant.RECLAIM_WITHOUT_BORROWING
    incoming, candidate = ctx.preemptor.priority, wl.priority
    if candidate >= incoming or (
        borrow.max_priority_threshold is not None and candidate > borrow.max_priority_threshold
    ):
        return Variant.RECLAIM_WITHOUT_BORROWING
    return Variant.RECLAIM_WHILE_BORROWING


def _from_cq(ctx: Context, cq: ClusterQueueInfo, lca: QuotaNode | None, advantage: bool) -> list[Candidate]:
    found = []
    for wl in ctx.snapshot.admitted(cq):
        variant = _classify(ctx, wl, advantage)
        if variant is not None:
            found.append(Candidate(wl, variant.reason, variant, lca))
    return found


def _collect_in_subtree(
    ctx: Context,
    cohort: QuotaNode,
    subtree_root: QuotaNode,
    skip: QuotaNode | None,
    advantage: bool,
    result: list[Candidate],
) -> None:
    """Candidates of the ClusterQueues below `cohort` that use more than their quota, skipping
    the subtree already searched and subtrees within their nominal quota."""
    for child in cohort.child_cohorts:
        if child is skip or child.within_nominal(ctx.frs):
            continue
        _collect_in_subtree(ctx, child, subtree_root, skip, advantage, result)
    for child in cohort.child_cluster_queues:
        if child is ctx.cq.node or child.within_nominal(ctx.frs):
            continue
        cq = ctx.snapshot.cluster_queues.get(child.name)
        if cq is not None:
            result.extend(_from_cq(ctx, cq, subtree_root, advantage))


def classic_candidates(ctx: Context) -> tuple[list[Candidate], bool, bool]:
    """Candidates in Kueue's classic order; plus whether none come from other ClusterQueues and
    whether none are hierarchical-reclaim candidates (both steer the borrowing attempts)."""
    start = len(ctx.records)
    same_queue: list[Candidate] = []
    if ctx.cq.preemption.within_cluster_queue != "Never":
        same_queue = _from_cq(ctx, ctx.cq, None, False)
    hierarchy: list[Candidate] = []
    by_priority: list[Candidate] = []
    node = ctx.cq.node
    if node.has_parent and ctx.cq.preemption.reclaim_within_cohort != "Never":
        advantage, remaining = quantities_fit_in_quota(node, ctx.requests)
        previous = None
        for subtree_root in node.path_to_root():
            target = hierarchy if advantage else by_priority
            _collect_in_subtree(ctx, subtree_root, subtree_root, previous, advantage, target)
            fits, remaining = quantities_fit_in_quota(subtree_root, remaining)
            advantage = advantage or fits
            previous = subtree_root
    now, name = ctx.snapshot.now, ctx.cq.name

    def ordered(items: list[Candidate]) -> tuple[list[Candidate], list[Candidate]]:
        items.sort(key=lambda c: candidate_key(c.workload, name, now))
        return [c for c in items if c.workload.evicted], [c for c in items if not c.workload.evicted]

    # Exclusions were recorded in the order workloads were stored; sort them so the
    # explanation does not depend on the order objects came in.
    ctx.records[start:] = sorted(ctx.records[start:], key=lambda r: (r.cluster_queue, r.workload))
    ev_h, h = ordered(hierarchy)
    ev_p, p = ordered(by_priority)
    ev_s, s = ordered(same_queue)
    stream = [*ev_h, *ev_p, *ev_s, *h, *p, *s]
    return stream, not hierarchy and not by_priority, not hierarchy


def _still_valid(ctx: Context, cand: Candidate, borrowing: bool) -> tuple[bool, str]:
    wl = cand.workload
    if wl.cluster_queue == ctx.cq.name:
        return True, ""
    if borrowing and cand.variant is Variant.RECLAIM_WITHOUT_BORROWING:
        return False, "only preemptible if the preemptor's ClusterQueue stops borrowing"
    cq = ctx.snapshot.cluster_queues[wl.cluster_queue or ""]
    if cq.node.within_nominal(ctx.frs):
        return False, f"ClusterQueue {cq.name} is no longer above its nominal quota"
    for ancestor in cq.node.path_to_root():
        if ancestor is cand.lca:
            break
        if ancestor.within_nominal(ctx.frs):
            return False, f"cohort {ancestor.name} is no longer above its nominal quota"
    return True, ""


def _attempts(ctx: Context, none_from_others: bool, none_hierarchical: bool) -> list[bool]:
    borrow = ctx.cq.preemption.borrow_within_cohort
    forbidden = borrow is None or borrow.policy == "Never"
    node = ctx.cq.node
    under_nominal = all(node.usage.get(fr, 0) < node.nominal(fr) for fr in ctx.frs)
    if none_from_others or (forbidden and not under_nominal):
        return [True]
    if forbidden and none_hierarchical:
        return [False, True]
    return [True, False]


# -- the victim set --------------------------------------------------------------------------


def _admissible(ctx: Context, cand: Candidate, pass_: _Pass) -> bool:
    """Protections every path honours: hard ones exclude, an opt-out defers to the last resort."""
    wl = cand.workload
    if wl.key in pass_.protected:
        return False
    victim_cq = ctx.snapshot.cluster_queues.get(wl.cluster_queue or "")
    reason = (
        protection.protected(wl, ctx.preemptor, victim_cq.node, ctx.cq.node, ctx.snapshot.now)
        if victim_cq is not None
        else None
    )
    if reason is not None:
        pass_.protected.add(wl.key)
        ctx.record(wl, "excluded", reason, cand.source)
        ends = protection.toleration_ends(wl, ctx.preemptor, ctx.snapshot.now)
        if ends is not None:
            ctx.wake_no_later_than(ends)
        return False
    if protection.opted_out(wl) and not pass_.last_resort:
        pass_.opted_out.append(cand)
        ctx.record(
            wl, "deferred", "opted out of preemption: used only if nothing else lets the preemptor fit", cand.source
        )
        return False
    return True


@dataclass
class _Pass:
    """One search for a victim set: the first leaves opted-out workloads aside, the second may use them."""

    last_resort: bool
    opted_out: list[Candidate] = field(default_factory=list)
    protected: set[str] = field(default_factory=set)


def _stream(
    ctx: Context,
    classic: list[Candidate],
    borrowing: bool,
    extra: ExtraCandidates | None,
    seen: set[str],
    pass_: _Pass,
) -> Iterator[Candidate]:
    deferred: list[Candidate] = []

    def usable(cand: Candidate) -> bool:
        if not _admissible(ctx, cand, pass_):
            return False
        if pass_.last_resort and protection.opted_out(cand.workload) and not cand.workload.evicted:
            deferred.append(cand)  # after every other candidate (already-evicted ones still first)
            return False
        return True

    for cand in classic:
        if ctx.snapshot.is_removed(cand.workload):
            continue
        valid, why = _still_valid(ctx, cand, borrowing)
        if not valid:
            ctx.record(cand.workload, "skipped", why, cand.source)
            continue
        if usable(cand):
            yield cand
    if extra is not None:
        for cand in extra(ctx, borrowing):
            if cand.workload.key in seen or ctx.snapshot.is_removed(cand.workload):
                continue
            if usable(cand):
                yield cand
    for cand in deferred:
        if ctx.snapshot.is_removed(cand.workload) or cand.workload.key in seen:
            continue
        if cand.variant is not None and not _still_valid(ctx, cand, borrowing)[0]:
            continue
        cand.last_resort = True
        yield cand


def _fill_back(ctx: Context, targets: list[Candidate], borrowing: bool) -> list[Candidate]:
    for i in range(len(targets) - 2, -1, -1):
        ctx.snapshot.add_workload(targets[i].workload)
        if ctx.fits(borrowing):
            ctx.record(targets[i].workload, "spared", "the preemptor fits without it", targets[i].source)
            targets[i] = targets[-1]
            targets.pop()
        else:
            ctx.snapshot.remove_workload(targets[i].workload)
    return targets


@dataclass
class Search:
    """The outcome of a victim search: the victims (none if the preemptor cannot fit), what
    became of every candidate, and when a protection that held runs out."""

    targets: list[Target]
    records: list[CandidateRecord]
    wake_at: datetime | None = None


def find_targets(
    preemptor: WorkloadInfo,
    cq: ClusterQueueInfo,
    assignment: Assignment,
    snapshot: Snapshot,
    extra: ExtraCandidates | None = None,
) -> Search:
    """The smallest set of workloads whose preemption lets `preemptor` fit, or none.
    The snapshot is left as it was found."""
    ctx = Context(preemptor, cq, snapshot, assignment)
    classic, none_from_others, none_hierarchical = classic_candidates(ctx)
    attempts = _attempts(ctx, none_from_others, none_hierarchical)
    first = _Pass(last_resort=False)
    targets = _search(ctx, classic, attempts, extra, first)
    if targets is None and first.opted_out:
        # YuniKorn's law 1: an opt-out is a strong suggestion, not a guarantee.
        targets = _search(ctx, classic, attempts, extra, _Pass(last_resort=True))
    # Later attempts and the last-resort pass revisit candidates: keep each line once.
    seen: set[tuple[str, str, str, str]] = set()
    records = []
    for rec in ctx.records:
        line = (rec.workload, rec.outcome, rec.detail, rec.source)
        if line not in seen:
            seen.add(line)
            records.append(rec)
    return Search(targets or [], records, ctx.wake_at)


def _search(
    ctx: Context, classic: list[Candidate], attempts: list[bool], extra: ExtraCandidates | None, pass_: _Pass
) -> list[Target] | None:
    snapshot, cq = ctx.snapshot, ctx.cq
    for borrowing in attempts:
        chosen: list[Candidate] = []
        seen: set[str] = set()
        for cand in _stream(ctx, classic, borrowing, extra, seen, pass_):
            snapshot.remove_workload(cand.workload)
            seen.add(cand.workload.key)
            chosen.append(cand)
            if ctx.fits(borrowing):
                chosen = _fill_back(ctx, chosen, borrowing)
                for c in chosen:
                    snapshot.add_workload(c.workload)
                chosen.sort(key=lambda c: candidate_key(c.workload, cq.name, snapshot.now))
                for c in chosen:
                    detail = HUMAN_REASONS.get(c.reason, c.reason)
                    if c.last_resort:
                        detail += "; opted out of preemption, chosen as last resort"
                    ctx.record(c.workload, "chosen", detail, c.source)
                return [Target(c.workload, c.reason, c.rule, c.last_resort) for c in chosen]
        for c in chosen:
            snapshot.add_workload(c.workload)
    return None


def preemption_message(target: Target, preemptor: WorkloadInfo, preemptor_path: str, victim_path: str) -> str:
    """Kueue's message on the victim's Preempted condition."""
    human = HUMAN_REASONS.get(target.reason, "UNKNOWN")
    return (
        f"Preempted to accommodate a workload (UID: {preemptor.uid}, JobUID: {preemptor.job_uid}) "
        f"due to {human}; preemptor path: {preemptor_path}; preemptee path: {victim_path}"
    )
