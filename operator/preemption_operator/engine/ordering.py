"""The orderings of a cycle, as Kueue defines them: the queue (who heads a ClusterQueue), the
entries (which head is processed first: sorted, or with fair sharing a tournament over the cohort
tree), and the candidates (who is preempted first)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from .fair_sharing import DRS, compare, dominant_resource_share, is_borrowing_on
from .quota import FlavorResource, QuotaNode
from .workload import WorkloadInfo


def candidate_key(wl: WorkloadInfo, preemptor_cq: str, now: datetime) -> tuple[int, int, int, float, str]:
    """Already-evicted first; then other ClusterQueues before the preemptor's own; lower effective
    priority; most recently reserved (no reservation time counts as now); UID."""
    reserved = wl.reserved_at or now
    return (
        0 if wl.evicted else 1,
        0 if wl.cluster_queue != preemptor_cq else 1,
        wl.priority,
        -reserved.timestamp(),
        wl.uid,
    )


def queue_order(wl: WorkloadInfo) -> tuple[int, datetime, str]:
    """Higher effective priority first, then older first (Kueue's queue-order timestamp: the
    creation time, or an eviction's for PodsReady timeouts and admission checks); the key breaks
    ties so the order is total."""
    return (-wl.priority, wl.order_time, wl.key)


def entry_order(wl: WorkloadInfo, waiting: bool, borrowing: int) -> tuple[bool, int, int, datetime, str]:
    """The heads of a cycle: a preemptor already waiting for its victims first (so the quota they
    free is its own), then by Kueue's borrowing level (quota from nearer in the cohort tree first,
    none borrowed best), higher priority, older."""
    return (not waiting, borrowing, -wl.priority, wl.order_time, wl.key)


@dataclass(frozen=True)
class Contender:
    """A head of a cycle as the fair-sharing tournament sees it."""

    wl: WorkloadInfo
    node: QuotaNode
    usage: Mapping[FlavorResource, int]
    """What its admission would add (its nominated assignment)."""
    waiting: bool


def tournament(contenders: Sequence[Contender]) -> int:
    """Which contender goes next with fair sharing on (Kueue's fairSharingIterator.pop): the
    first one's cohort tree runs a tournament in which, at every cohort, the child whose share
    would be lowest once its nominee is admitted wins. Ties: a preemptor already waiting for its
    victims first (our PrioritizePreemptorWorkloads), then one whose node would not borrow on what
    it asks (Kueue's FairSharingPrioritizeNonBorrowing), the lower share, the higher priority, the
    older. Shares are read from the nodes as they are now, so call it again after each decision.
    `contenders` come in the classic entry order, which picks the tree (Kueue picks any)."""
    first = contenders[0].node
    if first.parent is None:
        return 0
    root = first.root()
    by_node: dict[int, int] = {}
    for index, contender in enumerate(contenders):
        if contender.node.root() is root:
            by_node.setdefault(id(contender.node), index)
    shares: dict[tuple[int, int], tuple[bool, DRS]] = {}
    for index in by_node.values():
        contender = contenders[index]
        node, usage = contender.node, contender.usage
        node.add(usage)  # each nominee's share with its own admission, one at a time
        try:
            share, borrows = dominant_resource_share(node), is_borrowing_on(node, usage)
            for ancestor in node.path_to_root():
                shares[(id(ancestor), index)] = (borrows, share)
                share, borrows = dominant_resource_share(ancestor), is_borrowing_on(ancestor, usage)
        finally:
            node.remove(usage)

    def less(a: int, b: int, cohort: QuotaNode) -> bool:
        x, y = contenders[a], contenders[b]
        if x.waiting != y.waiting:
            return x.waiting
        (x_borrows, x_share), (y_borrows, y_share) = shares[(id(cohort), a)], shares[(id(cohort), b)]
        if x_borrows != y_borrows:
            return not x_borrows
        order = compare(x_share, y_share)
        if order:
            return order < 0
        if x.wl.priority != y.wl.priority:
            return x.wl.priority > y.wl.priority
        return x.wl.order_time < y.wl.order_time

    def winner(cohort: QuotaNode) -> int | None:
        nominees = [w for w in (winner(child) for child in cohort.child_cohorts) if w is not None]
        nominees += [by_node[id(cq)] for cq in cohort.child_cluster_queues if id(cq) in by_node]
        if not nominees:
            return None
        best = nominees[0]
        for current in nominees[1:]:
            if less(current, best, cohort):
                best = current
        return best

    found = winner(root)
    return found if found is not None else 0
