"""The symbolic filter the flapping analysis runs before the engine: under which priority
relations (`Relation`) a workload of one kind may preempt one of another, given whether each queue
is within its nominal quota (`Filter`); whether a relation lets one priority take another
(`holds`); and the same over every pair of the setup's effective priorities at once, as bitmasks
(`Masks`). Each test is weaker than the engine's, so what the filter drops cannot flap.
"""

from __future__ import annotations

from typing import Any

from ..engine.configurable import BuildError, build_selector, compare, in_scope, rule_applies
from ..engine.workload import WorkloadInfo, build_info
from . import symmetry
from .model import Kind, Setup, Shape
from .states import Objects

# -- the symbolic filter --------------------------------------------------------------------------

Relation = tuple[str | None, int | None]
"""(comparison, threshold): the candidate's effective priority `<comparison>` the preemptor's
(None: any) and, with a threshold, at most it. The comparison NewerEqual is Kueue's
LowerOrNewerEqualPriority: lower, or equal and created later."""
ANY: Relation = (None, None)
NEWER_EQUAL = "NewerEqual"
_CLASSIC = {"LowerPriority": "LessThan", "LowerOrNewerEqualPriority": NEWER_EQUAL}


def holds(relations: frozenset[Relation], preemptor: int, candidate: int, newer: bool = True) -> bool:
    """Whether some relation lets the preemptor take the candidate; `newer`: the candidate was
    created after the preemptor (True when the creation order is not chosen yet)."""
    for op, threshold in relations:
        if op == NEWER_EQUAL:
            ok = candidate < preemptor or (candidate == preemptor and newer)
        else:
            ok = op is None or compare(op, candidate, preemptor)
        if ok and (threshold is None or candidate <= threshold):
            return True
    return False


class Masks:
    """holds() over every pair of the setup's effective priorities at once, as bitmasks (the
    creation order not chosen yet): `rows(r)[i]` has bit j when a preemptor of priority P[i] may
    take a candidate of P[j]; `cols(r)[i]` has bit j when a preemptor of P[j] may take one of P[i]."""

    def __init__(self, priorities: list[int]) -> None:
        self.priorities = priorities
        self._rows: dict[frozenset[Relation], tuple[int, ...]] = {}
        self._cols: dict[frozenset[Relation], tuple[int, ...]] = {}
        self._cycles: dict[tuple[frozenset[Relation], ...], bool] = {}

    def rows(self, relations: frozenset[Relation]) -> tuple[int, ...]:
        if relations not in self._rows:
            ps = self.priorities
            self._rows[relations] = tuple(
                sum(1 << j for j, pb in enumerate(ps) if holds(relations, pa, pb)) for pa in ps
            )
        return self._rows[relations]

    def cols(self, relations: frozenset[Relation]) -> tuple[int, ...]:
        """The transpose of `rows`."""
        if relations not in self._cols:
            rows = self.rows(relations)
            self._cols[relations] = tuple(
                sum(1 << j for j, row in enumerate(rows) if row >> i & 1) for i in range(len(rows))
            )
        return self._cols[relations]

    def pair(self, there: frozenset[Relation], back: frozenset[Relation]) -> bool:
        """Whether some priorities let A take B under `there` and B take A under `back`."""
        if not there or not back:
            return False
        return any(r & c for r, c in zip(self.rows(there), self.cols(back), strict=True))

    def cycle(self, rels: tuple[frozenset[Relation], frozenset[Relation], frozenset[Relation]]) -> bool:
        """Whether some priorities let A take B, B take C and C take A."""
        if not all(rels):
            return False
        if rels not in self._cycles:
            self._cycles[rels] = self._cycle(rels)
        return self._cycles[rels]

    def _cycle(self, rels: tuple[frozenset[Relation], frozenset[Relation], frozenset[Relation]]) -> bool:
        ab, bc, ca = self.rows(rels[0]), self.rows(rels[1]), self.cols(rels[2])
        for i, js in enumerate(ab):
            back = ca[i]
            while js:
                j = (js & -js).bit_length() - 1
                js &= js - 1
                if bc[j] & back:
                    return True
        return False


def _classic(policy: str) -> Relation | None:
    if policy == "Any":
        return ANY
    op = _CLASSIC.get(policy)
    return (op, None) if op is not None else None


class Filter:
    """Under which priority relations may a workload of kind A preempt one of kind B, given
    whether each queue is within its nominal quota with its own workload admitted? Each test is
    weaker than the engine's, so an empty answer is a proof."""

    def __init__(self, setup: Setup, objects: Objects, by_symmetry: bool = True, fair: bool = False) -> None:
        """`fair`: the engine runs with fair sharing (its candidates from other queues follow
        reclaimWithinCohort alone, without Kueue's classic borrowing conditions)."""
        self.setup = setup
        self.objects = objects
        self.by_symmetry = by_symmetry
        self.fair = fair
        self._infos: dict[Kind, WorkloadInfo] = {}
        self.nested = {cq.node.root().name for cq in setup.queues.values() if cq.node.parent and cq.node.parent.parent}
        # The relations read no quota amount (quota enters only through the flags), so queue
        # pairs that a renaming maps onto each other, amounts aside, share them.
        self.canon = symmetry.Canon(
            setup.raw_queues, setup.raw_cohorts, setup.configs, set(setup.namespace_of), quotas=False
        )
        self._edges: dict[tuple[str, str], int] = {}
        self._relations: dict[tuple[Any, ...], frozenset[Relation]] = {}

    def edge(self, qa: str, qb: str) -> int:
        """The queue pair (A's, B's) as the relations see it."""
        key = (qa, qb)
        if key not in self._edges:
            if self.by_symmetry:
                self._edges[key] = self.canon.edge(self.setup.queues[qa].node, self.setup.queues[qb].node)
            else:  # each queue pair on its own (what the tests compare against)
                self._edges[key] = -1 - len(self._edges)
        return self._edges[key]

    def info(self, kind: Kind) -> WorkloadInfo:
        """The kind unboosted: tests that read the effective priority are left to the relations."""
        if kind not in self._infos:
            cq = self.setup.queues[kind.cluster_queue]
            fr = (cq.resource_groups[0].flavors[0], cq.resource_groups[0].covered_resources[0])
            shape = Shape(kind, kind.base)
            obj = self.objects.workload(shape, "w", fr, 1, self.objects.t0, None)
            self._infos[kind] = build_info(obj, self.setup.priority_classes)
        return self._infos[kind]

    def ever(self, a: Kind, b: Kind) -> frozenset[Relation]:
        """The relations under which A may preempt B in some quota state: each state's are a
        subset of these, since being within nominal only ever enables A's tests and disables B's."""
        return self.relations(a, b, True, False, True)

    def relations(self, a: Kind, b: Kind, a_within: bool, b_within: bool, a_before: bool) -> frozenset[Relation]:
        """`a_within`: A's queue within nominal with A in and B out; `b_within`: B's queue within
        nominal with B; `a_before`: A's queue within nominal with A added, B still in."""
        key = (
            self.edge(a.cluster_queue, b.cluster_queue),
            a.priority_class,
            a.labels,
            a.base,
            b.priority_class,
            b.labels,
            b.base,
            a_within,
            b_within,
            a_before,
        )
        found = self._relations.get(key)
        if found is None:
            found = self._relations[key] = self._relations_of(a, b, a_within, b_within, a_before)
        return found

    def _relations_of(self, a: Kind, b: Kind, a_within: bool, b_within: bool, a_before: bool) -> frozenset[Relation]:
        cqa, cqb = self.setup.queues[a.cluster_queue], self.setup.queues[b.cluster_queue]
        ia, ib = self.info(a), self.info(b)
        found: set[Relation] = set()
        policy = cqa.preemption
        if a.cluster_queue == b.cluster_queue:
            within = _classic(policy.within_cluster_queue)
            if within is not None:
                found.add(within)
        elif not b_within:  # Kueue takes candidates only from queues above their nominal quota
            reclaim = _classic(policy.reclaim_within_cohort)
            # Fair sharing leaves the rest to its strategies (on shares the filter does not read)
            # and ignores borrowWithinCohort, as Kueue does.
            if reclaim is not None and (self.fair or a_within or cqa.node.root().name in self.nested):
                found.add(reclaim)
            borrow = policy.borrow_within_cohort
            if not self.fair and reclaim is not None and borrow is not None and borrow.policy == "LowerPriority":
                found.add(("LessThan", borrow.max_priority_threshold))
        config = self.setup.configs.get(cqa.preemption_config_name or "")
        for rule in config.rules if config is not None else []:
            try:
                if not rule_applies(rule, ia):
                    continue
            except BuildError:
                continue
            if rule.activation_policy.preemptor_quota == "WithinNominalQuota" and not a_before:
                continue
            if rule.activation_policy.trigger == "QuotaFeasibleAndInsufficientTopology":
                continue  # never fires where quota is full; topology is not modelled
            for i, spec in enumerate(rule.candidate_selectors or []):
                if not in_scope(spec.scope, cqa, cqb) or (spec.quota is not None and b_within):
                    continue
                try:
                    selector = build_selector(i, spec, ia)
                except BuildError:
                    continue
                if selector.cq_matches(cqa, cqb) is not None:
                    continue
                boosted = spec.priority is not None and spec.priority.mode == "Boosted"
                tests = [test for name, test in selector.tests if not (boosted and name == "priority")]
                if any(test(ib) is not None for test in tests):
                    continue
                if boosted and spec.priority is not None:
                    found.add((spec.priority.comparison, None))
                else:
                    found.add(ANY)
        return frozenset(found)
