"""The quota model (`engine/quota.py`) and properties of whole simulations over random cohort trees.

Unit tests pin `available`, `potential_available`, borrowing and lending limits, hierarchical
cohorts and the bubbling of usage. The Hypothesis properties compare the engine with `Model`, an
independent restatement of Kueue's quota rules written for these tests:

* a node's subtree quota is its nominal quota plus what its children can lend (their subtree
  quota minus the part a lending limit keeps local);
* a node's usage past its local quota is stored in its parent;
* a root may not store more than its subtree quota, and a node with a borrowing limit may not use
  more than its subtree quota plus that limit.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from builders import (
    NOW,
    T0,
    Obj,
    cache_of,
    cluster_queue,
    cohort,
    one_cycle_with_snapshot,
    quota,
    scenario,
    seconds,
    simulate,
    workload,
)
from preemption_operator.engine.candidates import Context
from preemption_operator.engine.flavors import assign_flavors
from preemption_operator.engine.quota import (
    QuotaNode,
    ResourceQuota,
    compute_subtree,
    quantities_fit_in_quota,
)
from preemption_operator.engine.snapshot import Snapshot

FR = ("default", "cpu")
MILLI = 1000


# -- hand-built trees ---------------------------------------------------------------------------------


def node(
    name: str,
    nominal: int = 0,
    *,
    borrowing_limit: int | None = None,
    lending_limit: int | None = None,
    parent: QuotaNode | None = None,
    cq: bool = True,
) -> QuotaNode:
    n = QuotaNode(name=name, is_cluster_queue=cq, quotas={FR: ResourceQuota(nominal, borrowing_limit, lending_limit)})
    if parent is not None:
        n.parent = parent
        (parent.child_cluster_queues if cq else parent.child_cohorts).append(n)
    return n


def cohort_node(name: str, nominal: int = 0, parent: QuotaNode | None = None, **limits: Any) -> QuotaNode:
    return node(name, nominal, parent=parent, cq=False, **limits)


def test_standalone_cluster_queue() -> None:
    cq = node("cq", 6)
    compute_subtree(cq)
    assert (cq.available(FR), cq.potential_available(FR)) == (6, 6)
    cq.add_usage(FR, 4)
    assert cq.available(FR) == 2
    cq.add_usage(FR, 3)  # over quota (e.g. quota lowered): never negative
    assert cq.available(FR) == 0


def test_flat_cohort_shares_unused_quota() -> None:
    root = cohort_node("all")
    a, b = node("a", 6, parent=root), node("b", 4, parent=root)
    compute_subtree(root)
    assert root.subtree_quota[FR] == 10
    assert a.potential_available(FR) == 10
    b.add_usage(FR, 7)  # b borrows 3 of a's quota
    assert (a.available(FR), b.available(FR)) == (3, 3)
    assert root.usage[FR] == 7
    assert b.borrowing_with(FR, 0) and not a.borrowing_with(FR, 3) and a.borrowing_with(FR, 7)


def test_borrowing_limit_caps_what_is_taken_from_the_cohort() -> None:
    root = cohort_node("all")
    a = node("a", 6, borrowing_limit=2, parent=root)
    node("b", 6, parent=root)
    compute_subtree(root)
    assert a.potential_available(FR) == 8
    assert a.available(FR) == 8
    a.add_usage(FR, 7)
    assert a.available(FR) == 1
    a.add_usage(FR, 1)
    assert a.available(FR) == 0


def test_lending_limit_keeps_quota_local() -> None:
    root = cohort_node("all")
    a = node("a", 6, lending_limit=4, parent=root)
    b = node("b", 6, lending_limit=2, parent=root)
    compute_subtree(root)
    assert (a.local_quota(FR), b.local_quota(FR)) == (2, 4)
    assert root.subtree_quota[FR] == 6  # only what the queues lend
    assert (a.potential_available(FR), b.potential_available(FR)) == (8, 10)
    # B16: lend1 uses 3 (2 local, 1 stored in the cohort), lend2 uses 7 (4 local, 3 in the cohort).
    a.add_usage(FR, 3)
    b.add_usage(FR, 7)
    assert root.usage[FR] == 4
    assert (a.available(FR), b.available(FR)) == (2, 2)
    b.remove_usage(FR, 3)
    assert root.usage[FR] == 1
    assert a.available(FR) == 5


def test_hierarchical_cohorts() -> None:
    # B17: r ⊃ c (2 cpu) ⊃ q (0); r ⊃ q_borrowing (0).
    r = cohort_node("r")
    c = cohort_node("c", 2, parent=r)
    q = node("q", 0, parent=c)
    qb = node("q_borrowing", 0, parent=r)
    compute_subtree(r)
    assert (c.subtree_quota[FR], r.subtree_quota[FR]) == (2, 2)
    assert q.path() == "/r/c/q" and qb.path() == "/r/q_borrowing"
    q.add_usage(FR, 1)
    qb.add_usage(FR, 1)
    assert (q.available(FR), qb.available(FR)) == (0, 0)
    assert (c.usage[FR], r.usage[FR]) == (1, 2)
    assert quantities_fit_in_quota(q, {FR: 1}) == (False, {FR: 1})
    assert quantities_fit_in_quota(c, {FR: 1}) == (True, {FR: 1})
    qb.remove_usage(FR, 1)
    assert q.available(FR) == 1


def test_lending_limit_on_a_cohort() -> None:
    root = cohort_node("root", 1)
    team = cohort_node("team", 4, parent=root, lending_limit=1)
    a = node("a", 2, parent=team)
    other = node("other", 0, parent=root)
    compute_subtree(root)
    assert team.subtree_quota[FR] == 6
    assert team.local_quota(FR) == 5
    assert root.subtree_quota[FR] == 2  # its own 1 + the 1 the team lends
    assert other.potential_available(FR) == 2
    assert a.potential_available(FR) == 7  # the team's 6 and the root's own 1
    a.add_usage(FR, 6)
    assert (team.usage[FR], root.usage[FR]) == (6, 1)
    assert other.available(FR) == 1


def test_borrowing_limit_on_a_cohort() -> None:
    root = cohort_node("root", 10)
    team = cohort_node("team", 0, parent=root, borrowing_limit=3)
    a = node("a", 2, parent=team)
    compute_subtree(root)
    assert a.potential_available(FR) == 5
    a.add_usage(FR, 4)
    assert a.available(FR) == 1


def test_usage_round_trip() -> None:
    root = cohort_node("root", 1)
    mid = cohort_node("mid", 2, parent=root, lending_limit=1)
    a = node("a", 3, parent=mid, lending_limit=1)
    b = node("b", 1, parent=root, borrowing_limit=2)
    compute_subtree(root)
    nodes = [root, mid, a, b]
    steps = [(a, 5), (b, 3), (a, -2), (b, -1), (a, 1), (a, -4), (b, -2)]
    for target, delta in steps:
        if delta > 0:
            target.add_usage(FR, delta)
        else:
            target.remove_usage(FR, -delta)
        for n in (mid, root):
            bubbled = sum(
                max(0, c.usage.get(FR, 0) - c.local_quota(FR)) for c in [*n.child_cohorts, *n.child_cluster_queues]
            )
            assert n.usage.get(FR, 0) == bubbled
    assert all(n.usage.get(FR, 0) == 0 for n in nodes)


def test_quota_through_the_cache() -> None:
    """The same arithmetic on a tree built from objects (amounts in milli-cpu)."""
    objects = scenario(
        [
            cluster_queue("a", quota(6, lending_limit=4), cohort="team"),
            cluster_queue("b", 2, cohort="team", borrowing_limit=1),
            cluster_queue("solo", 3),
        ],
        workload("w", cpu=5).admitted("a"),
        cohorts=[cohort("org", cpu=2), cohort("team", parent="org")],
    )
    snapshot = cache_of(objects).snapshot(NOW)
    a, b, solo = (snapshot.cluster_queues[n].node for n in ("a", "b", "solo"))
    team, org = snapshot.cohorts["team"], snapshot.cohorts["org"]
    assert a.path() == "/org/team/a"
    assert (team.subtree_quota[FR], org.subtree_quota[FR]) == (6 * MILLI, 8 * MILLI)
    assert (a.usage[FR], team.usage[FR], org.usage[FR]) == (5 * MILLI, 3 * MILLI, 3 * MILLI)
    assert b.potential_available(FR) == 3 * MILLI
    assert b.available(FR) == 3 * MILLI
    assert a.available(FR) == 5 * MILLI
    assert solo.available(FR) == 3 * MILLI


# -- an independent model of Kueue's quota rules ----------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    nominal: int = 0
    borrowing: int | None = None
    lending: int | None = None


@dataclass
class Model:
    """A cohort forest: `parent` of every node (cohorts and ClusterQueues), limits in whole cpus."""

    parent: dict[str, str | None]
    limits: dict[str, Limits]
    cluster_queues: list[str]

    def children(self, name: str) -> list[str]:
        return [n for n, p in self.parent.items() if p == name]

    def root(self, name: str) -> str:
        while (up := self.parent[name]) is not None:
            name = up
        return name

    def subtree(self, name: str) -> int:
        return self.limits[name].nominal + sum(self.subtree(c) - self.local(c) for c in self.children(name))

    def local(self, name: str) -> int:
        lending = self.limits[name].lending
        return max(0, self.subtree(name) - lending) if lending is not None else 0

    def usage(self, name: str, cq_usage: Mapping[str, int]) -> int:
        if name in cq_usage or not self.children(name):
            return cq_usage.get(name, 0)
        return sum(max(0, self.usage(c, cq_usage) - self.local(c)) for c in self.children(name))

    def violations(self, cq_usage: Mapping[str, int]) -> list[str]:
        found = []
        for name, limits in self.limits.items():
            used, sub = self.usage(name, cq_usage), self.subtree(name)
            if self.parent[name] is None and used > sub:
                found.append(f"root {name} uses {used} > subtree quota {sub}")
            if self.parent[name] is not None and limits.borrowing is not None and used > sub + limits.borrowing:
                found.append(f"{name} uses {used} > {sub} + borrowingLimit {limits.borrowing}")
        return found

    def capacity(self, name: str) -> int:
        """The most a node could ever use."""
        parent = self.parent[name]
        if parent is None:
            return self.subtree(name)
        most = self.local(name) + self.capacity(parent)
        borrowing = self.limits[name].borrowing
        if borrowing is not None:
            most = min(most, self.subtree(name) + borrowing)
        return most

    def fits(self, cq_usage: Mapping[str, int], cq: str, request: int, allow_borrowing: bool) -> bool:
        after = dict(cq_usage)
        after[cq] = after.get(cq, 0) + request
        if not allow_borrowing and after[cq] > self.limits[cq].nominal:
            return False
        return not self.violations(after)

    def most_that_fits(self, cq_usage: Mapping[str, int], cq: str) -> int:
        amount = 0
        while self.fits(cq_usage, cq, amount + 1, True):
            amount += 1
        return amount


# -- random scenarios -------------------------------------------------------------------------------------

POLICIES_WITHIN = ["Never", "LowerPriority", "LowerPriority", "LowerOrNewerEqualPriority"]
POLICIES_RECLAIM = ["Never", "LowerPriority", "LowerPriority", "Any", "Any"]


@dataclass(frozen=True)
class Wl:
    name: str
    cq: str
    cpu: int
    priority: int
    created: int
    """Seconds after T0."""
    reserved: int | None
    """Seconds after T0 when admitted; None when pending."""


@dataclass
class Scenario:
    model: Model
    policies: dict[str, dict[str, Any]]
    implicit: set[str]
    """Cohorts referenced only by ClusterQueues (no Cohort object)."""
    workloads: list[Wl] = field(default_factory=list)

    def wl(self, name: str) -> Wl:
        (found,) = [w for w in self.workloads if w.name == name]
        return found

    def objects(self) -> list[Obj]:
        m = self.model
        cqs, cohorts = [], []
        for name, parent in m.parent.items():
            lim = m.limits[name]
            q = quota(lim.nominal, lim.borrowing, lim.lending)
            if name in m.cluster_queues:
                cqs.append(cluster_queue(name, q, cohort=parent, **self.policies[name]))
            elif name not in self.implicit:
                cohorts.append(cohort(name, parent, q))
        builders = []
        for w in self.workloads:
            b = workload(w.name, queue=w.cq, cpu=w.cpu, priority=w.priority, created=T0 + seconds(w.created))
            if w.reserved is not None:
                b.admitted(w.cq, at=T0 + seconds(w.reserved))
            builders.append(b)
        return scenario(cqs, *builders, cohorts=cohorts)

    def initial_usage(self) -> dict[str, int]:
        usage: dict[str, int] = {}
        for w in self.workloads:
            if w.reserved is not None:
                usage[w.cq] = usage.get(w.cq, 0) + w.cpu
        return usage


@st.composite
def scenarios(draw: st.DrawFn, pending: tuple[int, int] = (1, 3)) -> Scenario:
    parent: dict[str, str | None] = {}
    limits: dict[str, Limits] = {}
    depth: dict[str, int] = {}

    def limits_for(has_parent: bool) -> Limits:
        nominal = draw(st.integers(0, 6))
        if not has_parent:
            return Limits(nominal)
        borrowing = draw(st.none() | st.integers(0, 4))
        lending = draw(st.none() | st.integers(0, nominal))
        return Limits(nominal, borrowing, lending)

    for i in range(draw(st.sampled_from([1, 1, 2]))):
        name = f"root{i}"
        parent[name], depth[name] = None, 1
        limits[name] = Limits(draw(st.sampled_from([0, 0, 1, 2, 4])))
    for i in range(draw(st.integers(0, 2))):
        up = draw(st.sampled_from(sorted(n for n in depth if depth[n] < 2)))
        name = f"sub{i}"
        parent[name], depth[name] = up, depth[up] + 1
        limits[name] = limits_for(True)
    cohorts = sorted(parent)
    cluster_queues: list[str] = []
    policies: dict[str, dict[str, Any]] = {}
    for i in range(draw(st.integers(2, 4))):
        name = f"cq{i}"
        cq_parent = draw(st.sampled_from([*cohorts, *cohorts, *cohorts, None]))
        parent[name] = cq_parent
        limits[name] = limits_for(cq_parent is not None)
        cluster_queues.append(name)
        reclaim = draw(st.sampled_from(POLICIES_RECLAIM))
        policy: dict[str, Any] = {"within": draw(st.sampled_from(POLICIES_WITHIN)), "reclaim": reclaim}
        if reclaim != "Never" and draw(st.booleans()):
            policy["borrow_within"] = "LowerPriority"
            policy["max_priority_threshold"] = draw(st.none() | st.integers(-1, 1))
        policies[name] = policy
    # Cohorts without quota or parent may stay implicit (named only by ClusterQueues).
    implicit = {
        c
        for c in cohorts
        if parent[c] is None and limits[c] == Limits() and _only_cqs_below(c, parent, cohorts) and draw(st.booleans())
    }
    model = Model(parent, limits, cluster_queues)
    sc = Scenario(model, policies, implicit)

    # Admitted workloads: only those that keep every limit (as a real cluster would have them).
    usage: dict[str, int] = {}
    for i in range(draw(st.integers(3, 12))):
        # cq0 takes more than its share, so that other queues have quota to reclaim.
        cq = draw(st.sampled_from([cluster_queues[0], *cluster_queues]))
        cpu = draw(st.integers(1, 3))
        if not model.fits(usage, cq, cpu, True):
            continue
        usage[cq] = usage.get(cq, 0) + cpu
        sc.workloads.append(
            Wl(f"adm{i}", cq, cpu, draw(st.integers(-2, 1)), draw(st.integers(0, 5)), draw(st.integers(0, 3)))
        )
    # Pending workloads favour queues below their nominal quota: those may reclaim it.
    under = [cq for cq in cluster_queues if usage.get(cq, 0) < limits[cq].nominal]
    for i in range(draw(st.integers(*pending))):
        sc.workloads.append(
            Wl(
                f"new{i}",
                draw(st.sampled_from([*under, *under, *cluster_queues])),
                draw(st.integers(1, 5)),
                draw(st.integers(-1, 3)),
                draw(st.integers(0, 5)),
                None,
            )
        )
    return sc


def _only_cqs_below(name: str, parent: Mapping[str, str | None], cohorts: Iterable[str]) -> bool:
    return not any(parent.get(c) == name for c in cohorts)


# -- properties -------------------------------------------------------------------------------------------

# Whole simulations are where engine bugs would show: more examples than the profile's default
# (which stays in charge of everything else, e.g. derandomize=True in CI).
simulations = settings(max_examples=max(500, settings().max_examples))


def cycle_usages(sc: Scenario, actions: list[Obj]) -> list[dict[str, int]]:
    """Each ClusterQueue's usage at the end of every cycle, from the actions."""
    usage = sc.initial_usage()
    holder = {w.name: w.cq for w in sc.workloads if w.reserved is not None}
    out = []
    for cycle in sorted({a["cycle"] for a in actions}):
        for a in actions:
            if a["cycle"] != cycle:
                continue
            name = a["workload"].split("/", 1)[1]
            if a["action"] == "Preempted":
                cq = holder.pop(name)
                assert cq == a["clusterQueue"]
                usage[cq] -= sc.wl(name).cpu
            elif a["action"] == "Admitted":
                assert name not in holder, f"{name} admitted twice"
                holder[name] = a["clusterQueue"]
                usage[a["clusterQueue"]] = usage.get(a["clusterQueue"], 0) + sc.wl(name).cpu
        out.append(dict(usage))
    return out


def final_usage(statuses: Mapping[str, Obj]) -> dict[str, int]:
    usage: dict[str, int] = {}
    for status in statuses.values():
        reserved = [c for c in status.get("conditions", []) if c["type"] == "QuotaReserved" and c["status"] == "True"]
        if not reserved:
            continue
        admission = status["admission"]
        for psa in admission["podSetAssignments"]:
            cq = admission["clusterQueue"]
            usage[cq] = usage.get(cq, 0) + int(psa["resourceUsage"]["cpu"])
    return usage


@pytest.mark.slow
@simulations
@given(scenarios())
def test_admitted_usage_stays_within_quota_and_limits(sc: Scenario) -> None:
    """(a) After every cycle and at the end, usage respects quota, borrowing and lending limits."""
    outcome = simulate(sc.objects())
    model = sc.model
    usage = final_usage(outcome.statuses)
    assert model.violations(usage) == []
    for cq in model.cluster_queues:
        assert usage.get(cq, 0) <= model.capacity(cq)
    for root in {model.root(cq) for cq in model.cluster_queues}:
        assert model.usage(root, usage) <= model.subtree(root)
    per_cycle = cycle_usages(sc, outcome.actions)
    for cycle_usage in per_cycle:
        assert model.violations(cycle_usage) == []
    if per_cycle:
        assert {k: v for k, v in per_cycle[-1].items() if v} == usage


def policy_allows(policy: str, victim: Wl, preemptor: Wl) -> bool:
    if policy == "Any":
        return True
    if policy == "LowerPriority":
        return victim.priority < preemptor.priority
    if policy == "LowerOrNewerEqualPriority":
        return victim.priority < preemptor.priority or (
            victim.priority == preemptor.priority and preemptor.created < victim.created
        )
    return False


@pytest.mark.slow
@simulations
@given(scenarios())
def test_every_victim_is_allowed_by_the_policy_that_chose_it(sc: Scenario) -> None:
    """(b) The Preempted reason names the policy; that policy must allow the victim."""
    outcome = simulate(sc.objects())
    model = sc.model
    for action in outcome.actions:
        if action["action"] != "Preempted":
            continue
        victim = sc.wl(action["workload"].split("/", 1)[1])
        preemptor = sc.wl(action["preemptor"].split("/", 1)[1])
        policy = sc.policies[preemptor.cq]
        victim_cq = action["clusterQueue"]
        if action["reason"] == "InClusterQueue":
            assert victim_cq == preemptor.cq
            assert policy_allows(policy["within"], victim, preemptor), action
            continue
        assert action["reason"] in ("InCohortReclamation", "InCohortReclaimWhileBorrowing"), action
        assert victim_cq != preemptor.cq
        assert model.parent[preemptor.cq] is not None
        assert model.root(victim_cq) == model.root(preemptor.cq)
        assert policy_allows(policy["reclaim"], victim, preemptor), action
        if action["reason"] == "InCohortReclaimWhileBorrowing":
            assert policy.get("borrow_within") == "LowerPriority", action
            assert victim.priority < preemptor.priority
            threshold = policy.get("max_priority_threshold")
            assert threshold is None or victim.priority <= threshold


def _usage_without(snapshot: Snapshot, removed: set[str]) -> dict[str, int]:
    usage: dict[str, int] = {}
    for name, cq in snapshot.cluster_queues.items():
        for wl in cq.workloads.values():
            if wl.name not in removed:
                usage[name] = usage.get(name, 0) + wl.usage.get(FR, 0) // MILLI
    return usage


# About one scenario in four preempts, and only those are about minimal victim sets: assume()
# discards the rest, more than the health check tolerates by default. 150 victim sets are checked
# (the 500 draws this test made before checked about 135).
@pytest.mark.slow
@settings(max_examples=150, suppress_health_check=[HealthCheck.filter_too_much])
@given(scenarios(pending=(1, 1)))
def test_victim_sets_are_minimal(sc: Scenario) -> None:
    """(c) With the victims gone the preemptor fits; putting any one victim back, it does not."""
    objects = sc.objects()
    result, _ = one_cycle_with_snapshot(objects)
    assume(result.preempted)
    (preemptor_name,) = {p.preemptor.name for p in result.preempted}
    preemptor = sc.wl(preemptor_name)
    victims = [p.victim for p in result.preempted]
    assert len({v.key for v in victims}) == len(victims)

    snapshot = cache_of(objects).snapshot(NOW)
    cq = snapshot.cluster_queues[preemptor.cq]
    info = snapshot.pending[preemptor.cq][0]
    ctx = Context(info, cq, snapshot, assign_flavors(info, cq, snapshot.flavors))
    assert not ctx.fits(True), "a preemptor that fits needs no victims"
    initial = _usage_without(snapshot, set())
    for v in victims:
        if v.cluster_queue != preemptor.cq:
            assert v.cluster_queue is not None
            assert initial.get(v.cluster_queue, 0) > sc.model.limits[v.cluster_queue].nominal, (
                f"{v.name}: only queues above their nominal quota lose workloads to other queues"
            )
    for v in victims:
        snapshot.remove_workload(v)
    assert ctx.fits(True)
    borrowing = not ctx.fits(False)
    names = {v.name for v in victims}
    model = sc.model
    assert model.fits(_usage_without(snapshot, names), preemptor.cq, preemptor.cpu, True)
    for v in victims:
        snapshot.add_workload(v)
        assert not ctx.fits(borrowing), f"{v.name} need not be preempted"
        snapshot.remove_workload(v)
        usage = _usage_without(snapshot, names - {v.name})
        assert not model.fits(usage, preemptor.cq, preemptor.cpu, borrowing), f"{v.name} need not be preempted"


@pytest.mark.slow
@simulations
@given(scenarios(), st.randoms(use_true_random=False))
def test_same_input_same_output(sc: Scenario, rnd: random.Random) -> None:
    """(d) Two runs give the same JSON. The same objects in another order give the same decisions
    and statuses (the explanations may list excluded candidates in another order)."""
    objects = sc.objects()
    first = simulate(objects).data
    assert json.dumps(simulate(objects).data, sort_keys=True) == json.dumps(first, sort_keys=True)
    shuffled = list(objects)
    rnd.shuffle(shuffled)
    again = simulate(shuffled).data
    assert (again["actions"], again["workloads"]) == (first["actions"], first["workloads"])


@pytest.mark.slow
@given(scenarios(pending=(0, 0)))
def test_available_is_the_most_that_keeps_every_limit(sc: Scenario) -> None:
    """`available` of every ClusterQueue equals the largest request the model accepts, and
    `potential_available` equals the model's capacity."""
    snapshot = cache_of(sc.objects()).snapshot(NOW)
    usage = sc.initial_usage()
    for name in sc.model.cluster_queues:
        n = snapshot.cluster_queues[name].node
        assert n.available(FR) == MILLI * sc.model.most_that_fits(usage, name)
        assert n.potential_available(FR) == MILLI * sc.model.capacity(name)


@pytest.mark.slow
@given(scenarios(pending=(0, 0)), st.data())
def test_usage_bubbling_round_trip(sc: Scenario, data: st.DataObject) -> None:
    """Adding then removing workloads in any order leaves every node's usage as the sum of what
    its children store in it, and all zero at the end."""
    snapshot = cache_of(sc.objects()).snapshot(NOW)
    admitted = [wl for cq in snapshot.cluster_queues.values() for wl in cq.workloads.values()]
    nodes = [*snapshot.cohorts.values(), *(cq.node for cq in snapshot.cluster_queues.values())]
    for wl in data.draw(st.permutations(admitted)):
        snapshot.remove_workload(wl)
        _assert_bubbled(nodes)
    assert all(n.usage.get(FR, 0) == 0 for n in nodes)
    for wl in data.draw(st.permutations(admitted)):
        snapshot.add_workload(wl)
        _assert_bubbled(nodes)
    expected = _usage_without(snapshot, set())
    for name, cq in snapshot.cluster_queues.items():
        assert cq.node.usage.get(FR, 0) == MILLI * expected.get(name, 0)


def _assert_bubbled(nodes: Iterable[QuotaNode]) -> None:
    for n in nodes:
        if n.is_cluster_queue:
            continue
        children = [*n.child_cohorts, *n.child_cluster_queues]
        assert n.usage.get(FR, 0) == sum(max(0, c.usage.get(FR, 0) - c.local_quota(FR)) for c in children)
