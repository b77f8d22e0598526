"""Borrowing (issue #12, items 3 and 4): who may preempt while borrowing, and Kueue's borrowing
level, which orders the heads of a cycle by how far up the cohort tree their quota comes from.

The Kueue cases (named in comments) run through the engine, `simulate` and the `simulate` command.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from builders import (
    NOW,
    PATHS,
    Obj,
    admitted,
    cache_of,
    cluster_queue,
    cohort,
    first_cycle,
    local_queue,
    pending,
    preemption_config,
    quota,
    rule,
    scenario,
    selector,
    simulate,
    simulate_cli,
    workload,
)
from preemption_operator.engine.ordering import entry_order
from preemption_operator.engine.quota import QuotaNode, ResourceQuota, borrowing_level, compute_subtree

FR = ("default", "cpu")


# -- item 3: preempting while borrowing -----------------------------------------------------------------


def only_within_nominal(borrow_within: str | None = None) -> list[Obj]:
    # Kueue: "A workload is only eligible to do preemptions if it fits fully within nominal
    # quota" (scheduler_test.go). incoming (3 cpu) exceeds other-alpha's nominal 2: preempting a1
    # in its own queue would leave it borrowing, which withinClusterQueue does not allow.
    alpha = cluster_queue(
        "other-alpha",
        {"on-demand": quota(2)},
        cohort="other",
        reclaim="Any",
        within="LowerPriority",
        borrow_within=borrow_within,
    )
    beta = cluster_queue("other-beta", {"on-demand": quota(2)}, cohort="other")
    return scenario(
        [alpha, beta],
        admitted("a1", "other-alpha", 1, flavor="on-demand", priority=-1),
        admitted("b1", "other-beta", 1, flavor="on-demand", priority=-1),
        pending("incoming", "other-alpha", 3, priority=1),
        flavors=("on-demand",),
    )


@pytest.mark.parametrize("path", PATHS)
def test_no_preemption_when_the_preemptor_would_borrow(path: str) -> None:
    got = first_cycle(only_within_nominal(), path)
    assert got.preempted == {}
    assert got.admitted == {}
    assert got.pending == {
        "incoming": (
            "WaitingForQuota",
            "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor on-demand, "
            "1 more needed",
        )
    }


@pytest.mark.parametrize("run", [simulate, simulate_cli], ids=["simulate", "cli"])
def test_the_preemptor_stays_pending(run: object) -> None:
    out = run(only_within_nominal())
    assert out.victims == []
    assert [a["action"] for a in out.actions_of("incoming")] == ["Pending"]
    assert out.statuses["a1"]["admission"]["clusterQueue"] == "other-alpha"


@pytest.mark.parametrize("path", PATHS)
def test_borrow_within_cohort_lets_it_preempt_and_borrow(path: str) -> None:
    """With borrowWithinCohort (Kueue's canPreemptWhileBorrowing) the same preemptor evicts a1."""
    got = first_cycle(only_within_nominal(borrow_within="LowerPriority"), path)
    assert got.preempted == {"a1": "InClusterQueue"}
    assert got.pending["incoming"][0] == "WaitingForPreemptedWorkloads"


def hero(*, borrowing_limit: int | None = None, within: str | None = None) -> list[Obj]:
    """The reference's hero job (A30): cq-regular 2 cpu, cq-hero 1 cpu (a PreemptionConfig with an
    Always rule over AnyClusterQueue), cohort root; wl-a holds cq-regular's 2 cpu; hero asks 2."""
    return [
        *scenario(
            [
                cluster_queue("cq-regular", 2, cohort="root"),
                cluster_queue(
                    "cq-hero",
                    1,
                    cohort="root",
                    config="hero-preemption",
                    borrowing_limit=borrowing_limit,
                    within=within,
                ),
            ],
            admitted("wl-a", "cq-regular", 2),
        ),
        local_queue("hero", "cq-hero"),
        preemption_config("hero-preemption", rule("hero-preemption", selector("AnyClusterQueue"))),
        workload("hero", cpu=2, queue="hero"),
    ]


@pytest.mark.parametrize("path", PATHS)
def test_a_preemption_config_may_preempt_and_then_borrow(path: str) -> None:
    """The decision for PreemptionConfig queues: their rules may preempt although the preemptor
    then borrows (as Kueue's configurable preemption lets them)."""
    got = first_cycle(hero(), path)
    assert got.preempted == {"wl-a": "ConfigurablePreemption"}


@pytest.mark.parametrize("path", PATHS)
def test_a_preemption_config_stays_within_the_borrowing_limit(path: str) -> None:
    """... but only within the configured borrowing limit (the specification: hero queues remain
    "subject to configured cohort borrowing limits"): at borrowingLimit 0 nothing is preempted."""
    got = first_cycle(hero(borrowing_limit=0), path)
    assert got.preempted == {}
    assert got.pending["hero"][0] == "ExceedsMaxQuota"


# -- item 4: the borrowing level orders the heads --------------------------------------------------------


def hierarchical_heads() -> list[Obj]:
    # Kueue: "in a hierarchical cohort, workload borrowing less is scheduled first"
    # (scheduler_test.go). guaranteed borrows from its own cohort (level 1), best-effort from the
    # root (level 2): guaranteed goes first although best-effort has the higher priority.
    return scenario(
        [cluster_queue("guaranteed", 0, cohort="guaranteed"), cluster_queue("best-effort", 0, cohort="root")],
        pending("guaranteed", "guaranteed", 4, priority=0),
        pending("best-effort", "best-effort", 4, priority=3),
        cohorts=[cohort("root"), cohort("guaranteed", "root", 4)],
    )


@pytest.mark.parametrize("path", PATHS)
def test_workload_borrowing_less_is_scheduled_first(path: str) -> None:
    got = first_cycle(hierarchical_heads(), path)
    assert got.cluster_queues == {"guaranteed": "guaranteed"}
    assert got.flavors("guaranteed") == [{"cpu": "default"}]
    assert list(got.pending) == ["best-effort"]
    assert got.pending["best-effort"][0] == "WaitingForQuota"


def test_best_effort_stays_pending_after_guaranteed_took_the_quota() -> None:
    out = simulate(hierarchical_heads())
    assert [a["action"] for a in out.actions_of("guaranteed")] == ["Admitted"]
    assert "Admitted" not in [a["action"] for a in out.actions_of("best-effort")]


def reclaiming_before_a_full_queue() -> list[Obj]:
    # Kueue: "workload requiring reclaimation prioritized over wl in another full cq"
    # (scheduler_test.go, #3405). WL2 reclaims its nominal quota without borrowing; WL1 (older)
    # would borrow. WL2 goes first and its victim is the borrower in CQ3.
    gpu = {"example.com/gpu": 5}
    cqs = [
        cluster_queue("cq1", 0, cohort="other"),
        cluster_queue("cq2", 0, cohort="other", reclaim="Any"),
        cluster_queue("cq3", 0, cohort="other"),
    ]
    for cq, nominal in zip(cqs, (10, 10, 0), strict=True):
        cq["spec"]["resourceGroups"] = [
            {
                "coveredResources": ["example.com/gpu"],
                "flavors": [
                    {"name": "on-demand", "resources": [{"name": "example.com/gpu", "nominalQuota": str(nominal)}]}
                ],
            }
        ]
    return scenario(
        cqs,
        admitted("admitted-workload-1", "cq1", None, flavor="on-demand", requests=gpu),
        pending("wl1", "cq1", None, requests={"example.com/gpu": 10}),
        pending("wl2", "cq2", None, requests={"example.com/gpu": 10}, created="2026-01-01T10:00:01Z"),
        admitted("admitted-workload-2", "cq3", None, flavor="on-demand", priority=0, requests=gpu),
        admitted("admitted-workload-3", "cq3", None, flavor="on-demand", priority=1, requests=gpu),
        flavors=("on-demand",),
    )


@pytest.mark.parametrize("path", PATHS)
def test_reclaiming_workload_goes_before_one_that_would_borrow(path: str) -> None:
    got = first_cycle(reclaiming_before_a_full_queue(), path)
    assert got.preempted == {"admitted-workload-2": "InCohortReclamation"}
    assert got.pending["wl2"][0] == "WaitingForPreemptedWorkloads"
    # Kueue's message says "5 more needed" (computed before wl2 took its room); here wl1 is
    # assigned again after wl2 and sees the room held for wl2 as used.
    assert got.pending["wl1"][0] == "WaitingForQuota"


def test_entry_order_compares_borrowing_levels() -> None:
    """Level 1 before level 2 whatever the priority; waiting preemptors before both."""
    cache = cache_of(hierarchical_heads())
    low = cache.infos["default/guaranteed"]
    high = cache.infos["default/best-effort"]
    assert entry_order(low, False, 1) < entry_order(high, False, 2)
    assert entry_order(high, False, 1) < entry_order(low, False, 1)  # same level: priority
    assert entry_order(high, True, 2) < entry_order(low, False, 0)


# -- the borrowing level itself (Kueue's FindHeightOfLowestSubtreeThatFits) -------------------------------


def tree() -> dict[str, QuotaNode]:
    """Kueue's TestAssignment_RequiresBorrowing shape: root ⊃ mid ⊃ {cq (2), sibling (2)}, root also
    holds 4 of its own."""
    root = QuotaNode("root", False, {FR: ResourceQuota(4)})
    mid = QuotaNode("mid", False, {FR: ResourceQuota(0)}, parent=root)
    root.child_cohorts.append(mid)
    nodes = {"root": root, "mid": mid}
    for name in ("cq", "sibling"):
        child = QuotaNode(name, True, {FR: ResourceQuota(2)}, parent=mid)
        mid.child_cluster_queues.append(child)
        nodes[name] = child
    compute_subtree(root)
    return nodes


@pytest.mark.parametrize(
    ("value", "level", "smaller_subtree"),
    [
        pytest.param(2, 0, True, id="no borrowing"),
        pytest.param(4, 1, True, id="borrows at level 1"),
        pytest.param(8, 2, False, id="borrows at level 2"),
        pytest.param(9, 2, False, id="fits nowhere: the whole tree"),
    ],
)
def test_borrowing_level(value: int, level: int, smaller_subtree: bool) -> None:
    nodes = tree()
    assert borrowing_level(nodes["cq"], FR, value) == (level, smaller_subtree)


def test_heights() -> None:
    nodes = tree()
    assert [nodes[n].height() for n in ("cq", "mid", "root")] == [0, 1, 2]
    assert QuotaNode("empty", False).height() == 0


@dataclass
class Tree:
    nodes: list[QuotaNode]
    """Cohorts first (parents before children), then ClusterQueues."""
    queues: list[QuotaNode]


@st.composite
def trees(draw: st.DrawFn) -> Tree:
    """Random cohort trees without lending limits, with usage in their ClusterQueues."""
    root = QuotaNode("c0", False, {FR: ResourceQuota(draw(st.integers(0, 4)))})
    cohorts = [root]
    for i in range(1, draw(st.integers(1, 4))):
        parent = cohorts[draw(st.integers(0, len(cohorts) - 1))]
        child = QuotaNode(f"c{i}", False, {FR: ResourceQuota(draw(st.integers(0, 4)))}, parent=parent)
        parent.child_cohorts.append(child)
        cohorts.append(child)
    queues = []
    for i in range(draw(st.integers(1, 5))):
        parent = cohorts[draw(st.integers(0, len(cohorts) - 1))]
        cq = QuotaNode(f"q{i}", True, {FR: ResourceQuota(draw(st.integers(0, 4)))}, parent=parent)
        parent.child_cluster_queues.append(cq)
        queues.append(cq)
    compute_subtree(root)
    for cq in queues:
        cq.add_usage(FR, draw(st.integers(0, 6)))
    return Tree(cohorts, queues)


@given(trees(), st.data())
def test_borrowing_level_is_the_height_of_the_nearest_subtree_with_room(t: Tree, data: st.DataObject) -> None:
    """Without lending limits nothing is kept local, so the level is simply the height of the
    nearest node (the ClusterQueue itself: 0) whose subtree has room for the request, or the
    root's when none has; and it never falls as the request grows."""
    cq = data.draw(st.sampled_from(t.queues))
    value = data.draw(st.integers(0, 12))
    path = [cq, *cq.path_to_root()]
    roomy = [n for n in path if n.usage.get(FR, 0) + value <= n.subtree_quota.get(FR, 0)]
    expected = roomy[0].height() if roomy else path[-1].height()
    level, smaller = borrowing_level(cq, FR, value)
    assert level == expected
    assert smaller == bool(roomy and roomy[0].parent is not None)
    assert borrowing_level(cq, FR, value + 1)[0] >= level


def test_a_preemptor_is_ordered_by_its_borrowing_once_its_victims_are_gone() -> None:
    """Kueue's oracle reports the borrowing level with the victims removed. `in` (4 cpu) would
    overflow its queue while `low` runs (level 1 now), but evicting `low` brings it back within
    its nominal quota: level 0. With borrowWithinCohort and a smaller quota it preempts and still
    borrows: level 1."""
    from preemption_operator.engine.scheduler import Scheduler

    def level(nominal: int, borrow_within: str | None) -> int:
        objects = scenario(
            [
                cluster_queue("a", nominal, cohort="c", within="LowerPriority", borrow_within=borrow_within),
                cluster_queue("b", 6 - nominal, cohort="c"),
            ],
            admitted("low", "a", 4, priority=-1),
            admitted("b-own", "b", 2),
            pending("in", "a", 4, priority=1),
        )
        snapshot = cache_of(objects).snapshot(NOW)
        entry = Scheduler()._nominate(snapshot.pending["a"][0], snapshot.cluster_queues["a"], snapshot)
        assert [t.workload.name for t in entry.targets] == ["low"]
        return entry.assignment.borrowing

    assert level(4, None) == 0
    assert level(2, "LowerPriority") == 1


# -- a preemptor without victims holds its queue's capacity (Kueue v0.19.2's
# reserveCapacityForUnreclaimablePreempt) -------------------------------------------------------


def lending_queue(reclaim: str) -> list[Obj]:
    """Kueue's scheduler_test.go cases "capacity (not) blocked when lending clusterqueue ...":
    cluster-queue-a (Kueue's ClusterQueueA) has 2 (here cpu), a1 (1) admitted and a2 (2) pending, which can preempt no one
    (withinClusterQueue Never); cluster-queue-b nothing and b1 (1) pending, which would borrow."""
    return scenario(
        [
            cluster_queue("cluster-queue-a", 2, cohort="root", reclaim=reclaim),
            cluster_queue("cluster-queue-b", 0, cohort="root"),
        ],
        admitted("a1-admitted", "cluster-queue-a", 1),
        pending("a2-pending", "cluster-queue-a", 2),
        pending("b1-pending", "cluster-queue-b", 1, created=NOW),
    )


A2_MESSAGE = (
    "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 1 more needed"
)


@pytest.mark.parametrize("path", PATHS)
def test_capacity_not_blocked_when_lending_clusterqueue_can_reclaim(path: str) -> None:
    """Kueue: "capacity not blocked when lending clusterqueue can reclaim (ReclaimWithinCohort=Any)"."""
    got = first_cycle(lending_queue("Any"), path)
    assert got.cluster_queues == {"b1-pending": "cluster-queue-b"}
    assert got.pending["a2-pending"] == ("WaitingForQuota", A2_MESSAGE)


@pytest.mark.parametrize("reclaim", ["LowerPriority", "Never"])
@pytest.mark.parametrize("path", PATHS)
def test_capacity_blocked_when_lending_clusterqueue_not_guaranteed_to_reclaim(path: str, reclaim: str) -> None:
    """Kueue: "capacity blocked when lending clusterqueue not guaranteed to reclaim
    (ReclaimWithinCohort=LowerPriority)" and "(... =Never)": a2 keeps cluster-queue-a's free cpu
    for the rest of the cycle, so b1 no longer fits."""
    got = first_cycle(lending_queue(reclaim), path)
    assert got.cluster_queues == {}
    assert got.pending["a2-pending"] == ("WaitingForQuota", A2_MESSAGE)
    assert got.pending["b1-pending"] == ("WaitingForQuota", "Workload no longer fits after processing another workload")
