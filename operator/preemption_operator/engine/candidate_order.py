"""A PreemptionConfig's `spec.ordering`: the order in which its candidates are taken.

Keys are compared in turn after the already-evicted-first rule, with the UID last. Some keys
read Dominant Resource Shares, which change as victims are taken, so the order is decided one
victim at a time (Kueue's future-work "dynamically adjusted candidate generation"):

- candidates are split by ClusterQueue (by LocalQueue too when `LocalQueueDRS` is a key); within
  one part every share-based key has the same value, so each part is sorted once, by the keys
  that never change;
- each step compares the heads of the parts with every key computed on the snapshot as the
  victims so far left it, and yields the smallest;
- after a step, only the parts whose keys may have moved are looked at again: the yielded
  candidate's ClusterQueue for the shares of a ClusterQueue or LocalQueue (a share moves only
  with its own usage), every part for the strategy keys (they compare with the preemptor's side).

`IsDRSLessThanOrEqualToFinalShare` depends on the candidate's own usage: within a part it is
evaluated for every candidate tied with the head on the keys before it.

The document also splits parts by selector, so that a quota selector can drop a whole
ClusterQueue; here a candidate's selectors are re-checked when it is reached (configurable.py),
which gives the same victims, so one part per ClusterQueue is enough.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from ..api.v1alpha1 import CandidateOrder
from . import fair_sharing as fs
from .candidates import Context
from .fair_preemption import strategies_allow
from .quota import QuotaNode
from .snapshot import ClusterQueueInfo
from .workload import WorkloadInfo

Value = float | tuple[float, float]
"""A key's value: a number, or a share as `share_value` gives it."""
KeyFn = Callable[[WorkloadInfo], Value]

STATIC = "static"
"""A key of the workload alone."""
OWN = "own"
"""A key of the candidate's ClusterQueue or LocalQueue usage: moves only when its part loses a victim."""
WIDE = "wide"
"""A key of a ClusterQueue compared with the preemptor's: moves with any victim."""
PER_WORKLOAD = "per-workload"
"""A key of the candidate's own usage against its ClusterQueue's share."""

SCOPES = {
    "Priority": STATIC,
    "AdmissionTimestamp": STATIC,
    "IsOtherCQ": STATIC,
    "IsOtherCohort": STATIC,
    "ClusterQueueDRS": OWN,
    "LocalQueueDRS": OWN,
    "IsDRSLessThanInitialShare": WIDE,
    "IsDRSLessThanOrEqualToFinalShare": PER_WORKLOAD,
}


def describe(ordering: Sequence[CandidateOrder]) -> str:
    """`Priority Ascending, AdmissionTimestamp Ascending`, for explanations."""
    return ", ".join(f"{o.ordering_field} {o.direction}" for o in ordering)


def share_value(share: fs.DRS) -> Value:
    """A DRS as a sort key in `fs.compare` order: a zero weight that borrows above every finite share."""
    return (1.0, share.unweighted_ratio) if share.zero_weight_borrows else (0.0, share.precise)


def lq_of(wl: WorkloadInfo) -> tuple[str, str]:
    return (wl.namespace, wl.queue_name)


@dataclass
class _Keys:
    """The key functions of one ordering for one preemptor, on the snapshot as it stands."""

    ctx: Context
    lq_usage: dict[tuple[str, str, str], dict[str, int]]
    """(ClusterQueue, namespace, LocalQueue) -> usage per resource, victims taken out."""

    def cq(self, wl: WorkloadInfo) -> ClusterQueueInfo:
        return self.ctx.snapshot.cluster_queues[wl.cluster_queue or ""]

    def priority(self, wl: WorkloadInfo) -> Value:
        return wl.priority

    def admission(self, wl: WorkloadInfo) -> Value:
        return (wl.reserved_at or self.ctx.snapshot.now).timestamp()

    def other_cq(self, wl: WorkloadInfo) -> Value:
        return 0 if wl.cluster_queue == self.ctx.cq.name else 1

    def other_cohort(self, wl: WorkloadInfo) -> Value:
        if wl.cluster_queue == self.ctx.cq.name:
            return 0
        mine, theirs = self.ctx.cq.node.parent, self.cq(wl).node.parent
        return 0 if mine is not None and theirs is not None and mine.name == theirs.name else 1

    def cq_share(self, wl: WorkloadInfo) -> Value:
        return share_value(fs.dominant_resource_share(self.cq(wl).node))

    def lq_share(self, wl: WorkloadInfo) -> Value:
        node = self.cq(wl).node
        usage = self.lq_usage.get((wl.cluster_queue or "", *lq_of(wl)), {})
        return local_queue_share(node, usage)

    def initial_share(self, wl: WorkloadInfo) -> Value:
        return 0 if self._fair(wl, fs.LESS_THAN_INITIAL_SHARE) else 1

    def final_share(self, wl: WorkloadInfo) -> Value:
        return 0 if self._fair(wl, fs.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE) else 1

    def _fair(self, wl: WorkloadInfo, strategy: str) -> bool:
        if wl.cluster_queue == self.ctx.cq.name:
            return True
        return strategies_allow(self.ctx, self.cq(wl).node, wl, (strategy,))

    def of(self, field: str) -> KeyFn:
        return {
            "Priority": self.priority,
            "AdmissionTimestamp": self.admission,
            "IsOtherCQ": self.other_cq,
            "IsOtherCohort": self.other_cohort,
            "ClusterQueueDRS": self.cq_share,
            "LocalQueueDRS": self.lq_share,
            "IsDRSLessThanInitialShare": self.initial_share,
            "IsDRSLessThanOrEqualToFinalShare": self.final_share,
        }[field]


def local_queue_share(node: QuotaNode, usage: dict[str, int]) -> float:
    """The largest use of a resource by a LocalQueue, times 1000, over its ClusterQueue's nominal
    quota of that resource summed over flavors (resources without quota do not count)."""
    nominal = _nominal_by_resource(node)
    best = 0.0
    for resource, amount in usage.items():
        total = nominal.get(resource, 0)
        if amount > 0 and total > 0:
            best = max(best, amount * 1000.0 / total)
    return best


def _nominal_by_resource(node: QuotaNode) -> dict[str, int]:
    # Quotas alone decide it: once per tree, shared with snapshot clones (as fs.lendable).
    found = node.static.get("nominal-by-resource")
    if found is None:
        totals: dict[str, int] = {}
        for fr in node.subtree_quota:
            totals[fr[1]] = totals.get(fr[1], 0) + node.nominal(fr)
        node.static["nominal-by-resource"] = found = totals
    return found  # type: ignore[return-value]


def local_queue_usage(ctx: Context, cluster_queues: set[str]) -> dict[tuple[str, str, str], dict[str, int]]:
    """What each LocalQueue's workloads hold in `cluster_queues`, simulated removals taken out."""
    snapshot = ctx.snapshot
    found: dict[tuple[str, str, str], dict[str, int]] = {}
    for name in cluster_queues:
        cq = snapshot.cluster_queues.get(name)
        if cq is None:
            continue
        for wl in cq.workloads.values():
            if snapshot.is_removed(wl):
                continue
            tally = found.setdefault((name, *lq_of(wl)), {})
            for fr, amount in wl.usage.items():
                tally[fr[1]] = tally.get(fr[1], 0) + amount
    return found


def _negated(value: Value) -> Value:
    return (-value[0], -value[1]) if isinstance(value, tuple) else -value


def _directed(fn: KeyFn, descending: bool) -> KeyFn:
    return (lambda wl: _negated(fn(wl))) if descending else fn


def ranked(
    ctx: Context, candidates: Sequence[WorkloadInfo], ordering: Sequence[CandidateOrder]
) -> Iterator[WorkloadInfo]:
    """`candidates` in the configured order, each decided on the snapshot as the caller left it
    after the ones before (a yielded workload it removed no longer counts in any share)."""
    fields = [o.ordering_field for o in ordering]
    scopes = [SCOPES[f] for f in fields]
    by_lq = "LocalQueueDRS" in fields
    keys = _Keys(ctx, local_queue_usage(ctx, {wl.cluster_queue or "" for wl in candidates}) if by_lq else {})
    chain = [
        (_directed(keys.of(o.ordering_field), o.direction == "Descending"), SCOPES[o.ordering_field]) for o in ordering
    ]

    statics = [fn for fn, scope in chain if scope == STATIC]

    def static_key(wl: WorkloadInfo) -> tuple[object, ...]:
        return (not wl.evicted, *[fn(wl) for fn in statics], wl.uid)

    if all(scope == STATIC for scope in scopes):
        # Nothing moves as victims are taken: one sort.
        yield from sorted(candidates, key=static_key)
        return

    every = [fn for fn, _ in chain]

    def full_key(wl: WorkloadInfo) -> tuple[object, ...]:
        return (not wl.evicted, *[fn(wl) for fn in every], wl.uid)

    # The static keys before the per-workload one: candidates tied on them may swap.
    per_workload = scopes.index(PER_WORKLOAD) if PER_WORKLOAD in scopes else None
    prefix = None if per_workload is None else [fn for (fn, scope) in chain[:per_workload] if scope == STATIC]

    def tied(a: WorkloadInfo, b: WorkloadInfo) -> bool:
        assert prefix is not None
        return a.evicted == b.evicted and all(fn(a) == fn(b) for fn in prefix)

    parts: dict[object, _Part] = {}
    for wl in sorted(candidates, key=static_key):
        name = (wl.cluster_queue, wl.namespace, wl.queue_name) if by_lq else wl.cluster_queue
        part = parts.get(name)
        if part is None:
            part = parts[name] = _Part(wl.cluster_queue or "")
        part.members.append(wl)
    by_cq: dict[str, list[_Part]] = {}
    for part in parts.values():
        by_cq.setdefault(part.cluster_queue, []).append(part)
    wide = any(scope in (WIDE, PER_WORKLOAD) for scope in scopes)

    def best(part: _Part) -> tuple[tuple[object, ...], int] | None:
        head = part.head()
        if head is None:
            return None
        if prefix is None:
            return full_key(part.members[head]), head
        found = (full_key(part.members[head]), head)
        for i in range(head + 1, len(part.members)):
            wl = part.members[i]
            if i in part.gone:
                continue
            if not tied(wl, part.members[head]):
                break
            key = full_key(wl)
            if key < found[0]:
                found = (key, i)
        return found

    # (key, index, version, part): keys hold the UID, so no two entries tie on them.
    heap: list[tuple[tuple[object, ...], int, int, _Part]] = []

    def push(part: _Part) -> None:
        part.version += 1
        found = best(part)
        if found is not None:
            heapq.heappush(heap, (found[0], found[1], part.version, part))

    for part in parts.values():
        push(part)
    while heap:
        _, index, version, part = heapq.heappop(heap)
        if version != part.version:
            continue  # superseded by a later look at its part
        wl = part.members[index]
        part.gone.add(index)
        counted = not ctx.snapshot.is_removed(wl)  # one taken earlier in the pass is out of the tallies already
        yield wl
        if by_lq and counted and ctx.snapshot.is_removed(wl):
            tally = keys.lq_usage.get((wl.cluster_queue or "", *lq_of(wl)), {})
            for fr, amount in wl.usage.items():
                tally[fr[1]] = tally.get(fr[1], 0) - amount
        if wide:
            heap.clear()
            for other in parts.values():
                push(other)
        else:
            for other in by_cq[part.cluster_queue]:
                push(other)


@dataclass(eq=False)
class _Part:
    """The candidates of one ClusterQueue (or LocalQueue), in static order; `gone` were yielded."""

    cluster_queue: str
    members: list[WorkloadInfo] = field(default_factory=list)
    gone: set[int] = field(default_factory=set)
    start: int = 0
    version: int = 0
    """Bumped at each look: heap entries of an earlier look are stale."""

    def head(self) -> int | None:
        while self.start < len(self.members) and self.start in self.gone:
            self.start += 1
        return self.start if self.start < len(self.members) else None
