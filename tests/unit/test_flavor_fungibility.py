"""Flavor fungibility (issue #12, items 1 and 2): the flavor search moves on past a flavor where
nobody could be preempted, and `flavorFungibility.preference` with Kueue's borrowing levels picks
between a flavor that needs preemption and one that needs borrowing.

Each case is a Kueue test (named in its comment) and runs through the engine, `simulate` and the
`simulate` command; all three must take the same first-cycle decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from builders import (
    PATHS,
    Obj,
    admitted,
    cluster_queue,
    cohort,
    first_cycle,
    pending,
    quota,
    resource_group,
    scenario,
    simulate,
    with_fungibility,
    with_resource_groups,
)
from preemption_operator.engine.flavors import Granular, Possibility, is_preferred

RECLAIM = "InCohortReclamation"
IN_CQ = "InClusterQueue"


@dataclass(frozen=True)
class Case:
    id: str
    objects: list[Obj]
    admitted: dict[str, dict[str, str]] = field(default_factory=dict)
    """Workload admitted in the first cycle -> its main pod set's flavors."""
    victims: dict[str, str] = field(default_factory=dict)
    """Victim -> Preempted reason."""
    pending: dict[str, str] = field(default_factory=dict)
    """Workload left pending -> QuotaReserved reason."""
    messages: dict[str, str] = field(default_factory=dict)
    """Pending workload -> its exact message, where Kueue's test gives it."""


def no_candidates_first_flavor() -> list[Obj]:
    # Kueue: "use second flavor when the first has no preemption candidates; WhenCanPreempt:
    # MayStopSearch" (scheduler_test.go). The admitted workload has the same priority, so nobody
    # in on-demand can be preempted; spot fits.
    cq = with_fungibility(
        cluster_queue("other-alpha", {"on-demand": quota(50), "spot": quota(100)}, within="LowerPriority"),
        when_can_preempt="MayStopSearch",
    )
    return scenario(
        [cq],
        admitted("admitted", "other-alpha", 50, flavor="on-demand"),
        pending("new", "other-alpha", 20),
        flavors=("on-demand", "spot"),
    )


def cohort_without_candidates() -> list[Obj]:
    # Kueue: "don't assign flavor if there are no candidates for preemption" (scheduler_test.go).
    # cq2 uses only its nominal on-demand quota, so cq1 cannot reclaim it; spot can be borrowed.
    cq1 = with_fungibility(
        cluster_queue(
            "cq1",
            {"on-demand": quota(0, 1), "spot": quota(0, 1)},
            cohort="cohort",
            within="LowerPriority",
            reclaim="Any",
            borrow_within="LowerPriority",
        ),
        when_can_borrow="MayStopSearch",
        when_can_preempt="MayStopSearch",
    )
    cq2 = cluster_queue("cq2", {"on-demand": quota(1), "spot": quota(1)}, cohort="cohort")
    return scenario(
        [cq1, cq2],
        admitted("admitted", "cq2", 1, flavor="on-demand", priority=0),
        pending("new", "cq1", 1, priority=100),
        flavors=("on-demand", "spot"),
    )


def oracle_returns_none() -> list[Obj]:
    # Kueue: "cannot preempt in cohort (oracle returns None) for the first flavor, tries the
    # second flavor (which fits)" (flavorassigner_test.go), with a real victim search instead of
    # the test oracle: the secondary queue holds flavor one within its nominal quota.
    cq = with_fungibility(
        cluster_queue(
            "test",
            {"one": quota(0, 2), "two": quota(0, 2)},
            cohort="test-cohort",
            reclaim="LowerPriority",
            borrow_within="LowerPriority",
        ),
        when_can_borrow="MayStopSearch",
        when_can_preempt="MayStopSearch",
    )
    secondary = cluster_queue("secondary", {"one": quota(2), "two": quota(2)}, cohort="test-cohort")
    return scenario(
        [cq, secondary],
        admitted("used", "secondary", 2, flavor="one", priority=-1),
        pending("new", "test", 2),
        flavors=("one", "two"),
    )


def preempt_then_next(when_can_preempt: str | None) -> list[Obj]:
    # Kueue: "preempt try next flavor" (default TryNextFlavor: flavor two fits) and "preempt
    # before try next flavor" (MayStopSearch: stay on flavor one and preempt), flavorassigner_test.go.
    cq = cluster_queue("test", {"one": quota(10), "two": quota(10)}, within="LowerPriority")
    if when_can_preempt is not None:
        cq = with_fungibility(cq, when_can_borrow="MayStopSearch", when_can_preempt=when_can_preempt)
    return scenario(
        [cq],
        admitted("low", "test", 2, flavor="one", priority=-1),
        pending("new", "test", 9, priority=1),
        flavors=("one", "two"),
    )


def borrow_then_next(when_can_borrow: str | None) -> list[Obj]:
    # Kueue: "borrow before try next flavor" (default MayStopSearch: flavor one fits by borrowing
    # and the search stops) and "borrow try next flavor, found the second flavor" (TryNextFlavor:
    # flavor two fits without borrowing), flavorassigner_test.go.
    cq = cluster_queue("test", {"one": quota(10, 1), "two": quota(10)}, cohort="test-cohort")
    if when_can_borrow is not None:
        cq = with_fungibility(cq, when_can_borrow=when_can_borrow, when_can_preempt="TryNextFlavor")
    secondary = cluster_queue("secondary", {"one": quota(1)}, cohort="test-cohort")
    return scenario(
        [cq, secondary],
        admitted("used", "test", 2, flavor="one"),
        pending("new", "test", 9),
        flavors=("one", "two"),
    )


def uno_due_tre(*workloads: object, when_can_preempt: str = "TryNextFlavor", gpu: bool = False) -> list[Obj]:
    """Kueue's TestReclaimBeforePriorityPreemption: `test` (within and reclaim LowerPriority) has
    10 of every flavor, `other` none; both in one cohort. With `gpu`, the group covers cpu and
    example.com/gpu (Kueue's compute and gpu)."""
    resources = ("cpu", "example.com/gpu") if gpu else ("cpu",)
    test = cluster_queue("test", 0, cohort="cohort", within="LowerPriority", reclaim="LowerPriority")
    other = cluster_queue("other", 0, cohort="cohort")
    with_resource_groups(test, resource_group({f: dict.fromkeys(resources, 10) for f in ("uno", "due", "tre")}))
    with_resource_groups(other, resource_group({f: dict.fromkeys(resources, 0) for f in ("uno", "due", "tre")}))
    with_fungibility(test, when_can_preempt=when_can_preempt)
    return scenario([test, other], *workloads, flavors=("uno", "due", "tre"))


def using(name: str, cq: str, flavor: str, gpu: int = 0, cpu: int = 0, priority: int = -1) -> object:
    """An admitted workload holding `cpu` and `gpu` of `flavor`."""
    requests = {"example.com/gpu": gpu} if gpu else {}
    return admitted(name, cq, cpu or None, flavor=flavor, priority=priority, requests=requests)


def hierarchical(*workloads: object, one: Obj | None = None, fungibility: dict[str, str] | None = None) -> list[Obj]:
    """Kueue's TestHierarchical: cohorts three ⊃ two ⊃ one, each with 4 cpu of the flavor of its
    name; `test` (0 of every flavor, or `one`'s quota for flavor one) in cohort one, `other` in two."""
    flavors = ("one", "two", "three")
    test = cluster_queue(
        "test",
        {"one": one or quota(0), "two": quota(0), "three": quota(0)},
        cohort="one",
        within="LowerPriority",
        reclaim="LowerPriority",
    )
    with_fungibility(test, **(fungibility or {"when_can_preempt": "TryNextFlavor"}))
    other = cluster_queue("other", {f: quota(0) for f in flavors}, cohort="two")
    cohorts = [
        cohort("three", cpu={"three": quota(4)}),
        cohort("two", "three", cpu={"two": quota(4)}),
        cohort("one", "two", cpu={"one": quota(4)}),
    ]
    return scenario([test, other], *workloads, cohorts=cohorts, flavors=flavors)


def two_flavor_lender(preference: str) -> list[Obj]:
    # Kueue: "PreemptionOverBorrowing preference: preempt in first flavor instead of borrowing in
    # second" and "BorrowingOverPreemption preference: borrow in second flavor instead of
    # preempting in first" (scheduler_test.go).
    cq = with_fungibility(
        cluster_queue(
            "pob-cq", {"on-demand": quota(5, 0), "spot": quota(0, 5)}, cohort="pob-cohort", within="LowerPriority"
        ),
        when_can_borrow="TryNextFlavor",
        when_can_preempt="TryNextFlavor",
        preference=preference,
    )
    lender = cluster_queue("pob-lender", {"on-demand": quota(0), "spot": quota(5)}, cohort="pob-cohort")
    return scenario(
        [cq, lender],
        admitted("low-pob", "pob-cq", 5, flavor="on-demand", priority=-1),
        pending("high-pob", "pob-cq", 5, priority=0, uid="wl-high-pob", job_uid="job-high-pob"),
        flavors=("on-demand", "spot"),
    )


def no_candidates_shallower(preference: str | None) -> list[Obj]:
    # Kueue: "PreemptionOverBorrowing preference: select fitting second flavor over first flavor
    # with no preemption candidates" (scheduler_test.go). On-demand could come from one level up
    # (the idle sibling) but nobody can be preempted; spot fits two levels up.
    cq = with_fungibility(
        cluster_queue(
            "nopc-cq", {"on-demand": quota(5, 0), "spot": quota(0)}, cohort="nopc-mid", within="LowerPriority"
        ),
        when_can_borrow="TryNextFlavor",
        when_can_preempt="TryNextFlavor",
        preference=preference,
    )
    sibling = cluster_queue("nopc-sibling", {"on-demand": quota(5), "spot": quota(0)}, cohort="nopc-mid")
    return scenario(
        [cq, sibling],
        admitted("admitted-nopc", "nopc-cq", 5, flavor="on-demand", priority=0),
        pending("pending-nopc", "nopc-cq", 5, priority=0),
        cohorts=[cohort("nopc-root", cpu={"on-demand": quota(0), "spot": quota(5)}), cohort("nopc-mid", "nopc-root")],
        flavors=("on-demand", "spot"),
    )


def reclaim_or_preempt_both() -> list[Obj]:
    # Kueue: "prefer first preemption flavor when second flavor requires both reclaim and cq
    # priority preemption" (scheduler_test.go): spot needs b1 (reclaim) and a2 (own queue), so
    # it is no better than on-demand, which needs a1 only.
    alpha = cluster_queue("other-alpha", 0, cohort="other", within="LowerPriority", reclaim="LowerPriority")
    beta = cluster_queue("other-beta", 0, cohort="other")
    with_resource_groups(alpha, resource_group({"on-demand": {"example.com/gpu": 10}, "spot": {"example.com/gpu": 10}}))
    with_resource_groups(beta, resource_group({"on-demand": {"example.com/gpu": 0}, "spot": {"example.com/gpu": 0}}))
    gpu = {"example.com/gpu": 5}
    return scenario(
        [alpha, beta],
        admitted("a1", "other-alpha", None, flavor="on-demand", priority=50, requests=gpu),
        admitted("a2", "other-alpha", None, flavor="spot", priority=50, requests=gpu),
        admitted("b1", "other-beta", None, flavor="spot", priority=50, requests=gpu),
        pending("preemptor", "other-alpha", None, priority=100, requests={"example.com/gpu": 6}),
        flavors=("on-demand", "spot"),
    )


CASES = [
    Case("no-candidates-first-flavor-may-stop-search", no_candidates_first_flavor(), admitted={"new": {"cpu": "spot"}}),
    Case("no-candidates-in-cohort", cohort_without_candidates(), admitted={"new": {"cpu": "spot"}}),
    Case("oracle-returns-none", oracle_returns_none(), admitted={"new": {"cpu": "two"}}),
    Case("preempt-try-next-flavor", preempt_then_next(None), admitted={"new": {"cpu": "two"}}),
    Case(
        "preempt-before-try-next-flavor",
        preempt_then_next("MayStopSearch"),
        victims={"low": IN_CQ},
        pending={"new": "WaitingForPreemptedWorkloads"},
    ),
    Case("borrow-before-try-next-flavor", borrow_then_next(None), admitted={"new": {"cpu": "one"}}),
    Case("borrow-try-next-flavor", borrow_then_next("TryNextFlavor"), admitted={"new": {"cpu": "two"}}),
    # Kueue TestReclaimBeforePriorityPreemption: "Select first flavor which fits".
    Case(
        "first-flavor-which-fits",
        uno_due_tre(using("u", "test", "uno", cpu=1), using("d", "other", "due", cpu=1), pending("new", "test", 10)),
        admitted={"new": {"cpu": "tre"}},
    ),
    # "Select first flavor where gpu reclamation is possible": reclaim (due) beats preempting in
    # the own queue (uno); tre is no better than due.
    Case(
        "first-flavor-where-reclamation-is-possible",
        uno_due_tre(
            using("u", "test", "uno", cpu=1),
            using("d", "other", "due", cpu=1),
            using("t", "other", "tre", cpu=1),
            pending("new", "test", 10),
        ),
        victims={"d": RECLAIM},
        pending={"new": "WaitingForPreemptedWorkloads"},
    ),
    # "Select first flavor when flavor fungibility is disabled": MayStopSearch stays on uno.
    Case(
        "first-flavor-when-fungibility-is-disabled",
        uno_due_tre(
            using("u", "test", "uno", cpu=1),
            using("d", "other", "due", cpu=1),
            using("t", "other", "tre", cpu=1),
            pending("new", "test", 10),
            when_can_preempt="MayStopSearch",
        ),
        victims={"u": IN_CQ},
        pending={"new": "WaitingForPreemptedWorkloads"},
    ),
    # "Select first flavor where priority based preemption is possible".
    Case(
        "first-flavor-where-priority-preemption-is-possible",
        uno_due_tre(
            using("u", "test", "uno", cpu=1),
            using("d", "test", "due", cpu=1),
            using("t", "test", "tre", cpu=1),
            pending("new", "test", 10),
        ),
        victims={"u": IN_CQ},
        pending={"new": "WaitingForPreemptedWorkloads"},
    ),
    # "Select second flavor where gpu reclamation is possible, as compute Fits": a flavor is as
    # good as its worst resource; in tre gpu is reclaimed and cpu fits.
    Case(
        "flavor-where-reclamation-is-possible-as-compute-fits",
        uno_due_tre(
            using("u-gpu", "test", "uno", gpu=1),
            using("u-cpu", "test", "uno", cpu=1),
            using("d-cpu", "test", "due", cpu=1),
            using("d-gpu", "other", "due", gpu=1),
            using("t-gpu", "other", "tre", gpu=1),
            pending("new", "test", 10, requests={"example.com/gpu": 10}),
            gpu=True,
        ),
        victims={"t-gpu": RECLAIM},
        pending={"new": "WaitingForPreemptedWorkloads"},
    ),
    # A flavor is as good as its worst resource (Kueue's representative mode in
    # findFlavorForPodSets): in uno cpu fits but gpu needs preemption, so the search goes on to
    # due, where both fit.
    Case(
        "flavor-is-as-good-as-its-worst-resource",
        uno_due_tre(
            using("u-gpu", "test", "uno", gpu=10),
            pending("new", "test", 1, requests={"example.com/gpu": 5}),
            gpu=True,
        ),
        admitted={"new": {"cpu": "due", "example.com/gpu": "due"}},
    ),
    # Kueue TestHierarchical: "Select the top flavor" (flavors one and two are used up in every
    # subtree that could lend them; three fits at the root).
    Case(
        "hierarchical-top-flavor",
        hierarchical(using("t", "test", "one", cpu=4), using("o", "other", "two", cpu=4), pending("new", "test", 4)),
        admitted={"new": {"cpu": "three"}},
    ),
    # "Select the first flavor which fits": two fits (borrowing) and whenCanBorrow stops there.
    Case(
        "hierarchical-first-flavor-which-fits",
        hierarchical(using("t", "test", "one", cpu=4), pending("new", "test", 4)),
        admitted={"new": {"cpu": "two"}},
    ),
    # "Select deeper-borrowing flavor that fits when shallower-borrowing flavor has no preemption
    # candidates": flavor one could come from level 1, but nobody may be preempted there.
    Case(
        "hierarchical-deeper-flavor-over-no-candidates",
        hierarchical(
            using("t", "test", "one", cpu=4, priority=0),
            pending("new", "test", 4, priority=0),
            one=quota(4, 0),
            fungibility={
                "when_can_borrow": "TryNextFlavor",
                "when_can_preempt": "TryNextFlavor",
                "preference": "PreemptionOverBorrowing",
            },
        ),
        admitted={"new": {"cpu": "two"}},
    ),
    Case(
        "preemption-over-borrowing",
        two_flavor_lender("PreemptionOverBorrowing"),
        victims={"low-pob": IN_CQ},
        pending={"high-pob": "WaitingForPreemptedWorkloads"},
        messages={
            "high-pob": "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
            "on-demand, 5 more needed. Pending the preemption of 1 workload(s)"
        },
    ),
    Case(
        "borrowing-over-preemption",
        two_flavor_lender("BorrowingOverPreemption"),
        admitted={"high-pob": {"cpu": "spot"}},
    ),
    Case(
        "preemption-over-borrowing-skips-no-candidates",
        no_candidates_shallower("PreemptionOverBorrowing"),
        admitted={"pending-nopc": {"cpu": "spot"}},
    ),
    Case(
        "reclaim-and-preempt-is-no-better-than-preempt",
        reclaim_or_preempt_both(),
        victims={"a1": IN_CQ},
        pending={"preemptor": "WaitingForPreemptedWorkloads"},
        messages={
            "preemptor": "couldn't assign flavors to pod set main: insufficient unused quota for example.com/gpu in "
            "flavor on-demand, 1 more needed, insufficient unused quota for example.com/gpu in flavor spot, 6 more "
            "needed. Pending the preemption of 1 workload(s)"
        },
    ),
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_first_cycle(case: Case, path: str) -> None:
    got = first_cycle(case.objects, path)
    assert {name: got.flavors(name)[0] for name in got.admitted} == case.admitted
    assert got.preempted == case.victims
    assert {name: reason for name, (reason, _) in got.pending.items()} == case.pending
    for name, message in case.messages.items():
        assert got.pending[name][1] == message


def test_no_candidates_first_flavor_is_admitted_with_its_usage() -> None:
    """The admission written for the second flavor: its flavor, usage and count."""
    out = simulate(no_candidates_first_flavor())
    assert out.statuses["new"]["admission"] == {
        "clusterQueue": "other-alpha",
        "podSetAssignments": [{"name": "main", "flavors": {"cpu": "spot"}, "resourceUsage": {"cpu": "20"}, "count": 1}],
    }
    assert out.victims == []


def test_borrowing_over_preemption_is_the_default() -> None:
    """Without a preference Kueue compares how a flavor fits before how far it borrows."""
    objects = two_flavor_lender("BorrowingOverPreemption")
    for obj in objects:
        if obj["kind"] == "ClusterQueue" and obj["metadata"]["name"] == "pob-cq":
            del obj["spec"]["flavorFungibility"]["preference"]
    got = first_cycle(objects, "engine")
    assert got.flavors("high-pob") == [{"cpu": "spot"}]


def test_without_preference_no_candidates_flavor_still_loses() -> None:
    """The no-candidates rule holds whatever the preference."""
    got = first_cycle(no_candidates_shallower(None), "engine")
    assert got.flavors("pending-nopc") == [{"cpu": "spot"}]


# -- isPreferred (Kueue's TestIsPreferred, flavorassigner_test.go) --------------------------------------

FIT, PREEMPT, NONE, NO_FIT = Possibility.FIT, Possibility.PREEMPT, Possibility.NO_CANDIDATES, Possibility.NO_FIT
POB, BOP = "PreemptionOverBorrowing", "BorrowingOverPreemption"


@pytest.mark.parametrize(
    ("a", "b", "preference", "preferred"),
    [
        pytest.param((FIT, 0), (PREEMPT, 0), None, True, id="feature gate disabled prioritises preemption"),
        pytest.param(
            (PREEMPT, 1), (FIT, 2), BOP, False, id="explicit BorrowingOverPreemption prioritises borrowing distance"
        ),
        pytest.param(
            (PREEMPT, 1), (FIT, 2), POB, True, id="explicit PreemptionOverBorrowing prioritises lower preemption"
        ),
        pytest.param(
            (PREEMPT, 1),
            (FIT, 1),
            POB,
            False,
            id="explicit PreemptionOverBorrowing breaks borrowing ties with preemption",
        ),
        pytest.param(
            (NONE, 1),
            (FIT, 2),
            POB,
            False,
            id="explicit PreemptionOverBorrowing rejects no-candidate flavor before borrowing comparison",
        ),
        pytest.param(
            (FIT, 2),
            (NONE, 1),
            POB,
            True,
            id="explicit PreemptionOverBorrowing prefers fit over shallower-borrowing no-candidate flavor",
        ),
        pytest.param((NONE, 1), (NO_FIT, 0), None, True, id="no-candidate flavor remains preferable to no-fit flavor"),
        pytest.param((NO_FIT, 0), (NONE, 1), None, False, id="no-fit flavor remains worse than no-candidate flavor"),
        pytest.param((NONE, 1), (NONE, 2), POB, True, id="no-candidate flavors retain borrowing preference"),
        pytest.param(
            (NONE, 2), (NONE, 1), POB, False, id="no-candidate flavors retain borrowing preference in reverse"
        ),
    ],
)
def test_is_preferred(
    a: tuple[Possibility, int], b: tuple[Possibility, int], preference: str | None, preferred: bool
) -> None:
    assert is_preferred(Granular(*a), Granular(*b), preference) is preferred
