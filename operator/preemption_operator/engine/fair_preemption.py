"""Fair preemption: victims chosen by Dominant Resource Share instead of by borrowing level, as
Kueue v0.19.2 does with fair sharing on (`pkg/scheduler/preemption/preemption.go` fairPreemptions
and `pkg/scheduler/preemption/fairsharing/`).

Candidates are the preemptor's own workloads (withinClusterQueue) and those of every borrowing
ClusterQueue of its cohort tree (reclaimWithinCohort). ClusterQueues are visited "most unfair
first": from the root down, the child with the highest share. The preemptor's usage is added
to the tree first, so its shares are the ones it would have once admitted. borrowWithinCohort
plays no part.

Rules, as Kueue applies them per visited ClusterQueue:
- the preemptor's own ClusterQueue: its candidates are taken in order (InClusterQueue);
- the preemptor within its nominal quota on every contested flavor-resource: taken regardless
  of shares (InCohortReclamation; Kueue's FairSharingPreemptWithinNominal, on by default);
- otherwise the first strategy decides candidate by candidate, comparing the shares of the two
  nodes just below the lowest common ancestor (InCohortFairSharing); candidates it rejects are
  retried, one per ClusterQueue, with LessThanInitialShare when that is the second strategy.

The module only orders and decides; removing usage from the snapshot and testing the fit are
the caller's (`fits` after each removal), so protections and records stay in one place.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from . import fair_sharing as fs
from .candidates import IN_CLUSTER_QUEUE, IN_COHORT_FAIR_SHARING, IN_COHORT_RECLAMATION, Candidate, Context
from .ordering import candidate_key
from .quota import QuotaNode
from .snapshot import ClusterQueueInfo
from .workload import WorkloadInfo

SOURCE = "fair sharing"

Usable = Callable[[WorkloadInfo], bool]
"""Whether a candidate may be taken at all (the protections); asked once per candidate reached."""


def _strategy_passes(strategy: str, preemptor_new: fs.DRS, target_old: fs.DRS, target_new: fs.DRS) -> bool:
    """Kueue's rules S2-a (preemptor's share at most the target's after the preemption) and S2-b
    (preemptor's share below the target's before it)."""
    if strategy == fs.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE:
        return fs.compare(preemptor_new, target_new) <= 0
    return fs.compare(preemptor_new, target_old) < 0


def _unsatisfiable(preemptor_new: fs.DRS, target_old: fs.DRS) -> bool:
    """A preemptor with an infinite share (zero weight, borrowing) beats no target whose share is
    finite, before or after a removal (a removal never raises a share)."""
    return preemptor_new.precise == math.inf and target_old.precise != math.inf


@dataclass(eq=False)
class TargetOrdering:
    """Kueue's TargetClusterQueueOrdering: ClusterQueues with candidates, the one whose branch has
    the highest share first at every level of the tree, again and again while its share stays
    the highest. A ClusterQueue (other than the preemptor's) that no longer borrows, or has no
    candidates left, is pruned; so is a cohort off the preemptor's path that no longer borrows,
    and one whose children are all pruned. Callers must `pop` or `drop` between targets."""

    preemptor: ClusterQueueInfo
    now_key: Callable[[WorkloadInfo], tuple[int, int, int, float, str]]
    usable: Usable = lambda wl: True
    by_queue: dict[str, deque[WorkloadInfo]] = field(default_factory=dict)
    pruned_queues: set[int] = field(default_factory=set)
    pruned_cohorts: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, ctx: Context, candidates: Sequence[WorkloadInfo], usable: Usable | None = None) -> TargetOrdering:
        snapshot, cq = ctx.snapshot, ctx.cq
        ordering = cls(cq, lambda wl: candidate_key(wl, cq.name, snapshot.now))
        if usable is not None:
            ordering.usable = usable
        by_queue = ordering.by_queue
        for wl in candidates:  # already in candidate order
            queue = by_queue.get(wl.cluster_queue or "")
            if queue is None:
                queue = by_queue[wl.cluster_queue or ""] = deque()
            queue.append(wl)
        return ordering

    def has_workload(self, node: QuotaNode) -> bool:
        # Usability is asked of a queue's next candidate only: most are never reached.
        queue = self.by_queue.get(node.name)
        while queue and not self.usable(queue[0]):
            queue.popleft()
        return bool(queue)

    def pop(self, node: QuotaNode) -> WorkloadInfo:
        """The next usable candidate of `node` (call `has_workload` first)."""
        return self.by_queue[node.name].popleft()

    def drop(self, node: QuotaNode) -> None:
        self.pruned_queues.add(id(node))

    def __iter__(self) -> Iterator[QuotaNode]:
        node = self.preemptor.node
        if node.parent is None:
            while id(node) not in self.pruned_queues and self.has_workload(node):
                yield node
            return
        root = node.root()
        on_path = {id(a) for a in node.path_to_root()}
        while id(root) not in self.pruned_cohorts:
            target = self._next(root, on_path)
            if target is not None:
                yield target

    def _next(self, cohort: QuotaNode, on_path: set[int]) -> QuotaNode | None:
        best_cq: QuotaNode | None = None
        best_cq_share = fs.negative_drs()
        for cq in cohort.child_cluster_queues:
            if id(cq) in self.pruned_queues:
                continue
            share = fs.dominant_resource_share(cq)
            if (not share.borrowing and cq is not self.preemptor.node) or not self.has_workload(cq):
                self.pruned_queues.add(id(cq))
                continue
            order = fs.compare(share, best_cq_share)
            if order == 0 and best_cq is not None:
                # A tie goes to the ClusterQueue whose next candidate comes first.
                if self.now_key(self.by_queue[cq.name][0]) < self.now_key(self.by_queue[best_cq.name][0]):
                    best_cq = cq
            elif order > 0:
                best_cq, best_cq_share = cq, share
        best_cohort: QuotaNode | None = None
        best_cohort_share = fs.negative_drs()
        for child in cohort.child_cohorts:
            if id(child) in self.pruned_cohorts:
                continue
            share = fs.dominant_resource_share(child)
            # A cohort on the preemptor's path stays while any child does: imbalance below it,
            # or the preemptor's own queue, may still yield candidates.
            if not share.borrowing and id(child) not in on_path:
                self.pruned_cohorts.add(id(child))
            elif fs.compare(share, best_cohort_share) >= 0:
                best_cohort, best_cohort_share = child, share
        if best_cohort is None and best_cq is None:
            self.pruned_cohorts.add(id(cohort))
            return None
        # A tie goes to the cohort: the most unfair node within it can then be chosen.
        if best_cohort is not None and fs.compare(best_cohort_share, best_cq_share) >= 0:
            return self._next(best_cohort, on_path)
        return best_cq


def _almost_lca(node: QuotaNode, lca: QuotaNode) -> QuotaNode:
    """The node on `node`'s path to the root whose parent is `lca` (possibly `node` itself)."""
    current = node
    while current.parent is not lca:
        assert current.parent is not None, "the lowest common ancestor is above every node of the tree"
        current = current.parent
    return current


def _shares(preemptor: QuotaNode, target: QuotaNode) -> tuple[QuotaNode, QuotaNode]:
    """The two nodes just below the lowest common ancestor of the two ClusterQueues, whose shares
    the strategies compare (Kueue's almostLCAs)."""
    ancestors = {id(a) for a in preemptor.path_to_root()}
    lca = next(a for a in target.path_to_root() if id(a) in ancestors)
    return _almost_lca(preemptor, lca), _almost_lca(target, lca)


Fits = Callable[[], bool]
"""Whether the preemptor fits now (its own simulated usage taken out for the test)."""
Take = Callable[[Candidate, str], None]
"""Removes a candidate from the snapshot and records it as a target with its detail."""
Reject = Callable[[WorkloadInfo, str], None]
"""Records a candidate a strategy turned down."""


def within_nominal(ctx: Context) -> bool:
    """The preemptor's ClusterQueue (its incoming usage included) borrows on no contested
    flavor-resource: its nominal quota entitles it to preempt borrowers whatever the shares."""
    node = ctx.cq.node
    return all(node.usage.get(fr, 0) <= node.nominal(fr) for fr in ctx.frs)


def run_strategies(
    ctx: Context,
    candidates: Sequence[WorkloadInfo],
    strategies: Sequence[str],
    usable: Usable,
    fits: Fits,
    take: Take,
    reject: Reject,
) -> bool:
    """Kueue's first strategy over the ordered ClusterQueues, then S2-b over what it turned down.
    Returns whether the preemptor fits; the usage of what was taken stays removed."""
    ordering = TargetOrdering.of(ctx, candidates, usable)
    preemptor = ctx.cq.node
    nominal = within_nominal(ctx)
    strategy = strategies[0]
    retry: list[WorkloadInfo] = []
    for target in ordering:
        if target is preemptor:
            take(Candidate(ordering.pop(target), IN_CLUSTER_QUEUE), "")
            if fits():
                return True
            continue
        if nominal:
            take(Candidate(ordering.pop(target), IN_COHORT_RECLAMATION), "the preemptor stays within its nominal quota")
            if fits():
                return True
            continue
        mine, theirs = _shares(preemptor, target)
        preemptor_new, target_old = fs.dominant_resource_share(mine), fs.dominant_resource_share(theirs)
        if _unsatisfiable(preemptor_new, target_old):
            while ordering.has_workload(target):
                wl = ordering.pop(target)
                retry.append(wl)
                reject(wl, f"{strategy}: the preemptor's share would be +Inf")
            continue
        while ordering.has_workload(target):
            wl = ordering.pop(target)
            target.remove(wl.usage)
            target_new = fs.dominant_resource_share(theirs)
            target.add(wl.usage)
            shares = (
                f"preemptor share {fs.serialized(preemptor_new.precise)} ({mine.name}), "
                f"{theirs.name} share {fs.serialized(target_old.precise)} -> {fs.serialized(target_new.precise)}"
            )
            if _strategy_passes(strategy, preemptor_new, target_old, target_new):
                take(Candidate(wl, IN_COHORT_FAIR_SHARING), f"{strategy}: {shares}")
                if fits():
                    return True
                break  # the shares changed: the next target may be another ClusterQueue
            retry.append(wl)
            reject(wl, f"{strategy} not met: {shares}")
    if len(strategies) < 2:
        return False
    # Rule S2-b: its test does not depend on the candidate, so at most one per ClusterQueue.
    second = TargetOrdering.of(ctx, retry)
    for target in second:
        mine, theirs = _shares(preemptor, target)
        preemptor_new, target_old = fs.dominant_resource_share(mine), fs.dominant_resource_share(theirs)
        wl = second.pop(target)
        shares = (
            f"preemptor share {fs.serialized(preemptor_new.precise)} ({mine.name}), "
            f"{theirs.name} share {fs.serialized(target_old.precise)}"
        )
        if _strategy_passes(fs.LESS_THAN_INITIAL_SHARE, preemptor_new, target_old, target_old):
            take(Candidate(wl, IN_COHORT_FAIR_SHARING), f"{fs.LESS_THAN_INITIAL_SHARE}: {shares}")
            if fits():
                return True
        else:
            reject(wl, f"{fs.LESS_THAN_INITIAL_SHARE} not met: {shares}")
        second.drop(target)
    return False


def strategies_allow(ctx: Context, target: QuotaNode, wl: WorkloadInfo, strategies: Sequence[str]) -> bool:
    """Whether one of `strategies` would let the preemptor take `wl` from ClusterQueue `target`, on
    the snapshot as it stands (a PreemptionConfig's DRS quota selector). The shares compared are
    those the fair search compares: the preemptor's usage added, the two nodes just below the
    lowest common ancestor. Only another borrowing ClusterQueue of the preemptor's cohort tree can
    pass, as only those are fair-preemption targets."""
    preemptor = ctx.cq.node
    if target is preemptor or preemptor.parent is None or target.root() is not preemptor.root():
        return False
    if target.within_nominal(ctx.frs):
        return False
    mine, theirs = _shares(preemptor, target)
    preemptor.add(ctx.requests)
    try:
        preemptor_new, target_old = fs.dominant_resource_share(mine), fs.dominant_resource_share(theirs)
        target.remove(wl.usage)
        try:
            target_new = fs.dominant_resource_share(theirs)
        finally:
            target.add(wl.usage)
    finally:
        preemptor.remove(ctx.requests)
    return any(_strategy_passes(s, preemptor_new, target_old, target_new) for s in strategies)
