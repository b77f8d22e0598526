"""Kueue's classic preemption (ClusterQueue.spec.preemption): which admitted workloads are
candidates, in what order, whether one is still usable once others are gone, and which borrowing
attempts a search makes."""

from __future__ import annotations

from .candidates import Candidate, Context, Variant
from .ordering import candidate_key
from .quota import QuotaNode, quantities_fit_in_quota
from .snapshot import ClusterQueueInfo
from .workload import WorkloadInfo


def policy_allows(ctx: Context, wl: WorkloadInfo) -> tuple[bool, str]:
    preemption = ctx.cq.preemption
    same_cq = wl.cluster_queue == ctx.cq.name
    policy = preemption.within_cluster_queue if same_cq else preemption.reclaim_within_cohort
    if policy == "Any":
        return True, ""
    field_name = "withinClusterQueue" if same_cq else "reclaimWithinCohort"
    incoming, candidate = ctx.preemptor.priority, wl.priority
    if policy == "LowerPriority":
        if candidate < incoming:
            return True, ""
        return False, f"priority {candidate} is not lower than {incoming} ({field_name}: LowerPriority)"
    if policy == "LowerOrNewerEqualPriority":
        if candidate < incoming or (candidate == incoming and ctx.preemptor.order_time < wl.order_time):
            return True, ""
        return False, f"priority {candidate} is neither lower than {incoming} nor equal and newer ({field_name})"
    return False, f"{field_name} is Never"


def _classify(ctx: Context, wl: WorkloadInfo, hierarchical_advantage: bool) -> Variant | None:
    if not wl.uses_any(ctx.frs):
        return None
    allowed, why = policy_allows(ctx, wl)
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


def still_valid(ctx: Context, cand: Candidate, borrowing: bool) -> tuple[bool, str]:
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


def attempts(ctx: Context, none_from_others: bool, none_hierarchical: bool) -> list[bool]:
    borrow = ctx.cq.preemption.borrow_within_cohort
    forbidden = borrow is None or borrow.policy == "Never"
    node = ctx.cq.node
    under_nominal = all(node.usage.get(fr, 0) < node.nominal(fr) for fr in ctx.frs)
    if none_from_others or (forbidden and not under_nominal):
        return [True]
    if forbidden and none_hierarchical:
        return [False, True]
    return [True, False]
