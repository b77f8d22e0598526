"""Flapping analysis for `lint`: can workloads evict each other in turn, forever?

A flap is a state that comes back. Two workloads A and B flap when, with everything else held
still, A (pending) evicts B (running) and then B (requeued) evicts A: the cluster is where it
started. A cycle A -> B -> C -> A does the same with three workloads.

The engine is the semantics. Every flap reported is one the scheduler itself decided, in each
state of the loop, on concrete objects, and those objects are the witness. When none is found,
the finite set of states tried is the proof:

- Workload shapes: each ClusterQueue; each priority class, and none; every effective priority
  that orders differently against the values the setup names (class values, thresholds,
  toleration minimums: each value and two on either side; the priority-boost annotation reaches
  any of them); without a class, where a rule compares base priorities, every such value as the
  base too (a Workload's spec.priority); every combination of the label values the rules read
  (each value a selector names, one other value, absent; for numeric labels the bounds and
  fallbacks and two on either side). Any workload passes exactly the tests that one of these
  shapes passes. READS maps every field to what covers it.
- Quota: the contested capacity full (the pending workload does not fit without an eviction);
  the rest of each cohort tree at nominal or empty; each involved queue at, one unit under and
  one unit over its nominal quota (the other taking what is left), where the unit is the greatest
  common divisor of the tree's quotas, so no quota boundary falls between two tried states.
- Time: every duration the setup names has passed (a flap that waits for a window is still a
  flap) and, when a selector bounds execution time from above or compares times, also a victim
  that has only just started; both creation orders.

Before the engine, a symbolic filter drops what cannot flap: for workload kinds (shape minus
priority) it computes which priority relations let A preempt B, given whether each queue is
within its nominal quota with its own workload admitted (an exchange of the workloads of two
different queues does not change that), and keeps a pair only if some priorities let each
preempt the other. Each of its tests is weaker than the engine's, so it never drops a real flap;
the property tests compare the whole analysis with brute force over raw values.

Not modelled: NOT_MODELLED says what, in the proof itself. With fair sharing, every state is
decided by the engine's fair preemption, so loops found are real, but the states do not cover
what fair preemption reads (FAIR_SHARING_NOT_MODELLED): the proof is never claimed.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

from ..api.meta import format_time
from ..engine import protection
from ..engine.fair_sharing import OFF, FairSharing
from ..engine.quota import FlavorResource, QuotaNode
from ..engine.snapshot import ClusterQueueInfo
from ..engine.workload import PRIORITY_BOOST_ANNOTATION
from . import symmetry
from .model import NOW, Kind, Setup, Shape, TooManyShapes, nodes
from .proof import Counts, Proof, Skip
from .relations import Filter, Masks, Relation, holds
from .states import Levels, Objects, Timing, evicts, fillings

MAX_TRIPLE_CHECKS = 50_000
"""Engine checks of three-workload cycles; past it, the proof says cycles were not proven absent."""


@dataclass
class Flap:
    shapes: tuple[Shape, ...]
    """The first evicts the second, the second the third (or the first, for a pair), ..."""
    reasons: tuple[str, ...]
    """The engine's reason for each eviction, in order."""
    states: list[list[Any]]
    """The objects of each state of the loop, in order; each leads to the next, the last to the first."""
    objects: tuple[str, ...]
    also: list[tuple[str, ...]] = field(default_factory=list)
    """The queues (in loop order) of equivalent loops elsewhere in the setup: the same queues,
    quotas, policies and rules under other names, which loop the same way."""

    @property
    def code(self) -> str:
        return "FlappingPair" if len(self.shapes) == 2 else "FlappingCycle"


@dataclass
class Result:
    flaps: list[Flap] = field(default_factory=list)
    proof: Proof | None = None


# -- the analysis ----------------------------------------------------------------------------------

NAMES = ("workload-a", "workload-b", "workload-c")
ORDERING_NOT_MODELLED = (
    "spec.ordering between the two running workloads of a cycle of three beyond the states tried "
    "(a pair has one candidate, so no ordering matters there)"
)
OPT_OUT_NOT_MODELLED = (
    "the opt-out (yunikorn.apache.org/allow-preemption) on the workloads of a loop: it only makes a "
    "workload a later victim, never adds an eviction"
)
NOT_MODELLED: tuple[str, ...] = (
    "topology (TAS) placement",
    "admission checks",
    "flavors after the first",
    "resources other than the contested one",
    "workloads of more than one pod set",
    ORDERING_NOT_MODELLED,
    OPT_OUT_NOT_MODELLED,
)
READS: dict[str, str] = {
    "rules.name": "",
    "rules.preemptorSelector": "labels",
    "rules.preemptorPriorityClassSelector": "priority classes",
    "rules.activationPolicy.trigger": "quota",
    "rules.activationPolicy.preemptorQuota": "quota",
    "rules.activationPolicy.minTriggerRequiredDuration": "time",
    "rules.candidateSelectors.scope": "ClusterQueue",
    "rules.candidateSelectors.clusterQueueSelector": "ClusterQueue",
    "rules.candidateSelectors.labelSelector": "labels",
    "rules.candidateSelectors.numericLabels": "labels",
    "rules.candidateSelectors.priority.matchNames": "priority classes",
    "rules.candidateSelectors.priority.notMatchNames": "priority classes",
    "rules.candidateSelectors.priority.mode": "base priority",
    "rules.candidateSelectors.priority.comparison": "effective priorities",
    "rules.candidateSelectors.quota": "quota",
    "rules.candidateSelectors.minExecutionDuration": "time",
    "rules.candidateSelectors.maxExecutionDuration": "time",
    "rules.candidateSelectors.executionTimeRelation": "time",
    "rules.candidateSelectors.minTimeFromCreationDuration": "time",
    "rules.candidateSelectors.maxTimeFromCreationDuration": "time",
    "rules.candidateSelectors.timeFromCreationRelation": "time",
    "ordering": ORDERING_NOT_MODELLED,
    # What the engine reads of a Workload besides its rules' fields; each is set by its owner.
    f"Workload metadata.annotations[{PRIORITY_BOOST_ANNOTATION}]": "effective priorities",
    "Workload spec.priority": "base priority",
    "Workload metadata.labels": "labels",
    "Workload metadata.creationTimestamp": "time",
    f"Workload metadata.annotations[{protection.ALLOW_PREEMPTION}]": OPT_OUT_NOT_MODELLED,
}
"""What the flapping analysis does with each field a PreemptionConfig has (by path) and each part
of a Workload the engine reads: the words of the proof's `quantified over` line that cover it, or
the `not modelled` entry that says it is not (the tests hold every field to one of them)."""
FAIR_SHARING_NOT_MODELLED = (
    "fair sharing: shares set by resources or flavors other than the contested one (each queue's "
    "share is tried only as the contested resource sets it)",
    "fair sharing: fair-sharing weights other than the setup's",
    "fair sharing: the fill-back across several victims (kubernetes-sigs/kueue#14543)",
)
FAIR_SHARING_NOT_PROVEN = (
    "fair sharing: each state is decided by the engine's fair preemption (its strategies, the "
    "fill-back, rules after the fair candidates), so every loop found is real; but the states tried "
    "do not cover what fair preemption reads (see not modelled), so no loop found is no proof"
)


class Analysis:
    def __init__(self, objects: Iterable[Any], by_symmetry: bool = True, fair_sharing: FairSharing = OFF) -> None:
        """`by_symmetry`: decide equivalent pairs and cycles of queues once (off: each on its own,
        which the tests compare against). `fair_sharing`: the engine's switch; with it on, every
        state is decided by the engine's fair preemption, and the proof is not complete (see
        FAIR_SHARING_NOT_MODELLED)."""
        self.by_symmetry = by_symmetry
        self.fair_sharing = fair_sharing
        self.setup = Setup(objects)
        self.objects = Objects(self.setup)
        self.filter = Filter(self.setup, self.objects, by_symmetry, fair_sharing.enabled)
        self.masks = Masks(self.setup.priorities())
        self.canon = symmetry.Canon(
            self.setup.raw_queues, self.setup.raw_cohorts, self.setup.configs, set(self.setup.namespace_of)
        )
        self._pairs_seen: dict[int, Flap | None] = {}
        self._possible: dict[tuple[int, int], set[tuple[int, int]]] = {}
        self._possible_trios: dict[tuple[int, int, int], list[tuple[int, int, int]]] = {}
        self._triples_seen: dict[int, Flap | None] = {}
        self.counts = Counts()
        self.skipped: list[Skip] = []
        self.triples_skipped: Skip | None = None

    def timings(self, n: int) -> list[Timing]:
        fresh = (False, True) if self.setup.fresh_matters else (False,)
        return [Timing(order, f) for order in itertools.permutations(range(n)) for f in fresh]

    def run(self) -> Result:
        result = Result()
        kinds: dict[str, list[Kind]] = {}
        for cq in sorted(self.setup.namespace_of):
            try:
                kinds[cq] = self.setup.kinds(cq)
            except TooManyShapes as exc:
                self.skipped.append(Skip(str(exc), cq))
        self.counts.shapes = sum(len(k) * len(self.setup.priorities()) for k in kinds.values())
        trees: dict[str, list[str]] = {}
        for cq in kinds:
            trees.setdefault(self.setup.queues[cq].node.root().name, []).append(cq)
        for _, queues in sorted(trees.items()):
            flapped = False
            for qa, qb in _pairs(queues):
                key = self.canon.pair(self._node(qa), self._node(qb))
                flap, new = self._unit(self._pairs_seen, key, (qa, qb))
                if new:
                    flap = self._pair(qa, qb, kinds)
                    self._pairs_seen[key] = flap
                    result.flaps += [flap] if flap is not None else []
                flapped |= flap is not None
            if not flapped:  # cycles of three matter where no pair already flaps
                flap = self._triples(queues, kinds)
                if flap is not None and not any(f is flap for f in result.flaps):
                    result.flaps.append(flap)
        for flap in result.flaps:
            flap.objects = tuple(sorted({*flap.objects, *(o for qs in flap.also for o in self._involved(qs))}))
        result.proof = self._proof(result)
        return result

    def _node(self, cq: str) -> QuotaNode:
        return self.setup.queues[cq].node

    def _unit(self, seen: dict[int, Flap | None], key: int, queues: tuple[str, ...]) -> tuple[Flap | None, bool]:
        """(the decision of an equivalent unit, False) when one was decided, else (None, True).
        A flap found for an equivalent unit is also this one's, renamed: it is listed in `also`."""
        if not self.by_symmetry or key not in seen:
            return None, True
        flap = seen[key]
        if len(queues) == 2:
            self.counts.equivalent_queue_pairs += 1
        else:
            self.counts.equivalent_queue_triples += 1
        if flap is not None:
            flap.also.append(queues)
        return flap, False

    def _involved(self, queues: tuple[str, ...]) -> set[str]:
        found = {f"ClusterQueue/{cq}" for cq in queues}
        for cq in queues:
            name = self.setup.queues[cq].preemption_config_name
            if name in self.setup.configs:
                found.add(f"PreemptionConfig/{name}")
        return found

    # -- pairs --

    def _pair(self, qa: str, qb: str, kinds: dict[str, list[Kind]]) -> Flap | None:
        fr = _contested(self.setup.queues[qa], self.setup.queues[qb]) or _contested(
            self.setup.queues[qb], self.setup.queues[qa]
        )
        if fr is None:
            return None
        self.counts.queue_pairs += 1
        unit = _unit(self.setup.queues[qa].node.root(), fr)
        same = qa == qb
        # Within one queue, each unordered pair once.
        indexes = [(i, j) for i in range(len(kinds[qa])) for j in range(i if same else 0, len(kinds[qb]))]
        self.counts.shape_pairs += len(indexes) * len(self.setup.priorities()) ** 2
        # First in any quota state (cheap, and most setups stop here), then filling by filling.
        possible = self._possible_pairs(qa, qb, kinds)
        pairs = [(kinds[qa][i], kinds[qb][j]) for i, j in indexes if (i, j) in possible]
        if not pairs:
            return None
        kept: set[tuple[Shape, Shape]] = set()
        try:
            for state in fillings(self.setup, self.objects, sorted({qa, qb}), fr, unit, 1):
                there_quota = self._edge_quota((qa, qb), 0, fr, state, unit)
                back_quota = self._edge_quota((qa, qb), 1, fr, state, unit)
                for ka, kb in pairs:
                    there = self.filter.relations(ka, kb, *there_quota)
                    back = self.filter.relations(kb, ka, *back_quota) if there else frozenset()
                    if not back:
                        continue
                    rows, cols, index = self.masks.rows(there), self.masks.cols(back), self.setup.index()
                    for pa in self.setup.priorities_of(ka):
                        bs = rows[index[pa]] & cols[index[pa]]
                        if not bs:
                            continue
                        for pb in self.setup.priorities_of(kb):
                            if not bs >> index[pb] & 1:
                                continue
                            kept.add((Shape(ka, pa), Shape(kb, pb)))
                            for timing in self.timings(2):
                                if not (
                                    holds(there, pa, pb, _newer(timing, 1, 0))
                                    and holds(back, pb, pa, _newer(timing, 0, 1))
                                ):
                                    continue
                                flap = self.loop((Shape(ka, pa), Shape(kb, pb)), fr, unit, state, timing)
                                if flap is not None:
                                    return flap
            return None
        finally:
            self.counts.shape_pairs_kept_by_filter += len(kept)

    def _edge_quota(
        self, qs: tuple[str, ...], i: int, fr: FlavorResource, state: Levels, unit: int
    ) -> tuple[bool, bool, bool]:
        """The filter's quota inputs for the loop's i-th eviction (workload i, pending, evicts
        workload i+1; any other runs), exact for this filling: is the preemptor's queue within
        nominal once it replaced the victim; is the victim's queue within nominal as it stands;
        and is the preemptor's queue within nominal with the preemptor added before any victim
        leaves (what preemptorQuota: WithinNominalQuota reads)."""
        n = len(qs)
        pending, victim = qs[i], qs[(i + 1) % n]
        others = [qs[j] for j in range(n) if j not in (i, (i + 1) % n)]
        fill = dict(state.fill)

        def ok(queue: str, units: int) -> bool:
            return fill.get(queue, 0) + units * unit <= self.setup.queues[queue].node.nominal(fr)

        after = 1 + others.count(pending)
        return ok(pending, after), ok(victim, 1 + others.count(victim)), ok(pending, after + (victim == pending))

    # -- cycles of three --

    def _triples(self, queues: list[str], kinds: dict[str, list[Kind]]) -> Flap | None:
        checks = 0
        for qs in itertools.product(queues, repeat=3):
            if qs != min(qs[i:] + qs[:i] for i in range(3)):
                continue  # each cycle once, from its smallest rotation
            frs = {
                _contested(self.setup.queues[x], self.setup.queues[y]) for x, y in zip(qs, qs[1:] + qs[:1], strict=True)
            }
            if len(frs) != 1 or None in frs:
                continue
            fr = frs.pop()
            assert fr is not None
            key = self.canon.cycle((self._node(qs[0]), self._node(qs[1]), self._node(qs[2])))
            prior, new = self._unit(self._triples_seen, key, qs)
            if not new:
                if prior is not None:
                    return prior
                continue
            self._triples_seen[key] = None
            self.counts.queue_triples += 1
            trios = self._trios(qs, kinds)
            if not trios:
                continue  # no priorities let them take each other in turn, in any quota state
            # Two must run where one waits: half the unit, when the quotas allow, so that a queue
            # whose quota holds one unit still holds two workloads (boundaries stay on the grid).
            unit = _unit(self.setup.queues[qs[0]].node.root(), fr)
            unit = unit // 2 if unit % 2 == 0 else unit
            distinct = sorted(set(qs))
            for state in fillings(self.setup, self.objects, distinct, fr, unit, 2):
                edges = [self._edge_quota(qs, i, fr, state, unit) for i in range(3)]
                for ka, kb, kc in trios:
                    r_ab = self.filter.relations(ka, kb, *edges[0])
                    r_bc = self.filter.relations(kb, kc, *edges[1]) if r_ab else frozenset()
                    r_ca = self.filter.relations(kc, ka, *edges[2]) if r_bc else frozenset()
                    if not r_ca:
                        continue
                    for trio in self._priorities3((ka, kb, kc), (r_ab, r_bc, r_ca)):
                        self.counts.shape_triples_kept_by_filter += 1
                        rels = (r_ab, r_bc, r_ca)
                        for timing in self.timings(3):
                            if not all(
                                holds(
                                    rels[i],
                                    trio[i].priority,
                                    trio[(i + 1) % 3].priority,
                                    _newer(timing, (i + 1) % 3, i),
                                )
                                for i in range(3)
                            ):
                                continue
                            checks += 1
                            if checks > MAX_TRIPLE_CHECKS:
                                self.triples_skipped = Skip(
                                    f"cycles of three: more than {MAX_TRIPLE_CHECKS} states to check"
                                )
                                return None
                            flap = self.loop(trio, fr, unit, state, timing)
                            if flap is not None:
                                self._triples_seen[key] = flap
                                return flap
        return None

    def _possible_pairs(self, qa: str, qb: str, kinds: dict[str, list[Kind]]) -> set[tuple[int, int]]:
        """Indexes (into the queues' kinds) of the kinds that some priorities let take each other
        in turn in some quota state. Every queue lists its kinds in one order, and the relations
        follow the queues' edges, so queue pairs with the same edges share the answer."""
        key = (self.filter.edge(qa, qb), self.filter.edge(qb, qa))
        if key not in self._possible:
            ever = self.filter.ever
            self._possible[key] = {
                (i, j)
                for i, ka in enumerate(kinds[qa])
                for j, kb in enumerate(kinds[qb])
                if self.masks.pair(ever(ka, kb), ever(kb, ka))
            }
        return self._possible[key]

    def _trios(self, qs: tuple[str, ...], kinds: dict[str, list[Kind]]) -> list[tuple[Kind, Kind, Kind]]:
        """The kinds of the three queues that some priorities let take each other in turn in
        some quota state (the union over states is weaker than each state's test); shared, like
        `_possible_pairs`, by queue triples with the same edges."""
        a, b, c = qs
        edges = self.filter.edge
        key = (edges(a, b), edges(b, c), edges(c, a))
        if key not in self._possible_trios:
            ever, found = self.filter.ever, []
            for i, ka in enumerate(kinds[a]):
                for j, kb in enumerate(kinds[b]):
                    r_ab = ever(ka, kb)
                    if not r_ab:
                        continue
                    for k, kc in enumerate(kinds[c]):
                        if self.masks.cycle((r_ab, ever(kb, kc), ever(kc, ka))):
                            found.append((i, j, k))
            self._possible_trios[key] = found
        return [(kinds[a][i], kinds[b][j], kinds[c][k]) for i, j, k in self._possible_trios[key]]

    def _priorities3(
        self, ks: tuple[Kind, Kind, Kind], rels: tuple[frozenset[Relation], ...]
    ) -> Iterator[tuple[Shape, Shape, Shape]]:
        ka, kb, kc = ks
        ab, bc, ca = self.masks.rows(rels[0]), self.masks.rows(rels[1]), self.masks.cols(rels[2])
        index = self.setup.index()
        for pa in self.setup.priorities_of(ka):
            i = index[pa]
            if not ab[i]:
                continue
            for pb in self.setup.priorities_of(kb):
                j = index[pb]
                if not ab[i] >> j & 1:
                    continue
                cs = bc[j] & ca[i]
                if not cs:
                    continue
                for pc in self.setup.priorities_of(kc):
                    if cs >> index[pc] & 1:
                        yield (Shape(ka, pa), Shape(kb, pb), Shape(kc, pc))

    # -- the engine's word --

    def loop(
        self, shapes: tuple[Shape, ...], fr: FlavorResource, unit: int, levels: Levels, timing: Timing
    ) -> Flap | None:
        """Whether, state after state, each workload (pending) evicts the next (running) and the
        last the first: None at the first state where the engine decides otherwise."""
        o = self.objects
        n = len(shapes)
        created = {idx: o.t0 + timedelta(seconds=rank) for rank, idx in enumerate(timing.order)}
        since = NOW if timing.fresh else NOW - self.setup.long
        keys = [f"{self.setup.namespace_of[s.cluster_queue]}/{NAMES[i]}" for i, s in enumerate(shapes)]
        states, reasons = [], []
        for i in range(n):
            workloads = [
                o.workload(s, NAMES[j], fr, unit, created[j], None if j == i else since) for j, s in enumerate(shapes)
            ]
            state = o.state(shapes[0].cluster_queue, fr, levels, workloads)
            self.counts.engine_cycles += 1
            reason = evicts(state, keys[i], keys[(i + 1) % n], fr, self.fair_sharing)
            if reason is None:
                return None
            states.append(state)
            reasons.append(reason)
        involved = self._involved(tuple(s.cluster_queue for s in shapes))
        return Flap(shapes, tuple(reasons), states, tuple(sorted(involved)))

    def _proof(self, result: Result) -> Proof:
        labels = self.setup.label_values()
        skipped = (*self.skipped, *([self.triples_skipped] if self.triples_skipped else []))
        not_modelled: tuple[str, ...] = NOT_MODELLED
        if self.fair_sharing.enabled:
            skipped += (Skip(FAIR_SHARING_NOT_PROVEN),)
            not_modelled += FAIR_SHARING_NOT_MODELLED
        return Proof(
            flap_free=not result.flaps and not skipped,
            method="every pair of workload shapes, and every cycle of three where no pair flaps, in every "
            "quota and time state below, decided by the scheduler itself; a filter first drops what no "
            "mechanism lets preempt in turn; pairs and cycles of queues that a renaming of queues and cohorts "
            "maps onto one already decided (same tree shape, quotas, policies, labels, annotations and rules) "
            "share its decision",
            cluster_queues=len(self.setup.namespace_of),
            priority_classes=tuple(f"{kind}/{name}" for kind, name in sorted(self.setup.classes)),
            effective_priorities=tuple(self.setup.priorities()),
            unclassed_bases=tuple(self.setup.unclassed_bases()),
            labels={key: tuple(v if v is not None else "<absent>" for v in values) for key, values in labels.items()},
            quota_states="the contested capacity full; the rest of each cohort tree at nominal or empty; each "
            "queue under test at, one unit under and one unit over its nominal quota, another taking the rest",
            time=f"every duration in the setup elapsed (victims running {format_duration(self.setup.long)})"
            + ("; victims that have just started" if self.setup.fresh_matters else "")
            + "; every creation order",
            not_modelled=not_modelled,
            counts=dataclasses.replace(self.counts),
            skipped=skipped,
        )


def _pairs(queues: list[str]) -> Iterator[tuple[str, str]]:
    for i, qa in enumerate(queues):
        for qb in queues[i:]:
            yield qa, qb


def _newer(timing: Timing, candidate: int, preemptor: int) -> bool:
    return timing.order.index(candidate) > timing.order.index(preemptor)


def _contested(a: ClusterQueueInfo, b: ClusterQueueInfo) -> FlavorResource | None:
    """The flavor-resource the two queues contend for: the first resource of A's first group in
    its first flavor, when B's first flavor for that resource is the same."""
    if a.node.root() is not b.node.root() or not a.resource_groups:
        return None
    group = a.resource_groups[0]
    if not group.covered_resources or not group.flavors:
        return None
    resource, flavor = group.covered_resources[0], group.flavors[0]
    other = b.group_for(resource)
    if other is None or not other.flavors or other.flavors[0] != flavor:
        return None
    return (flavor, resource)


def _unit(root: QuotaNode, fr: FlavorResource) -> int:
    values = []
    for node in nodes(root):
        quota = node.quotas.get(fr)
        if quota is not None:
            values += [v for v in (quota.nominal, quota.borrowing_limit, quota.lending_limit) if v]
    return math.gcd(*values) if values else 1


def format_duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return "".join(f"{n}{u}" for n, u in ((hours, "h"), (minutes, "m"), (seconds, "s")) if n) or "0s"


def analyse(objects: Iterable[Any], fair_sharing: FairSharing = OFF) -> Result:
    return Analysis(objects, fair_sharing=fair_sharing).run()


def write_witness(flap: Flap, folder: Path, index: int) -> Path:
    """Each state of the loop as simulate input, in order; returns the first."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    loop = " -> ".join(f"{NAMES[i]} ({s.describe()})" for i, s in enumerate(flap.shapes)) + f" -> {NAMES[0]}"
    for n, state in enumerate(flap.states, start=1):
        path = folder / f"flap-{index}-state-{n}.yaml"
        header = (
            f"# preemption-operator lint, witness {index}, state {n} of {len(flap.states)}: {NAMES[n - 1]} is "
            f"pending and evicts {NAMES[n % len(flap.states)]}.\n# The loop: {loop}.\n"
            f"# Run: preemption-operator simulate {path.name} --now {format_time(NOW)}\n"
        )
        path.write_text(header + yaml.safe_dump_all([obj.to_wire() for obj in state], sort_keys=False))
        paths.append(path)
    return paths[0]
