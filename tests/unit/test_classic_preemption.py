"""Classic preemption (ClusterQueue.spec.preemption): the reference's acceptance cases B1-B19 and
B24-B27 (§9 B; B20-B23 need fair sharing, a later issue).

Every victim case runs three ways: one engine cycle, `simulate.run`, and the
`preemption-operator simulate --output json` command. Each must choose exactly the expected
victims with the expected `Preempted` reasons (and, where the reference gives them, messages);
the simulations must also leave Kueue's eviction status on every victim.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from builders import (
    NAMESPACE,
    NOW,
    T0,
    Obj,
    Outcome,
    admitted,
    cache_of,
    cluster_queue,
    cohort,
    one_cycle,
    parse,
    pending,
    quota,
    resource_group,
    rfc3339,
    scenario,
    seconds,
    simulate,
    simulate_cli,
    with_resource_groups,
    workload,
    workload_priority_class,
)
from preemption_operator.engine.cache import Cache
from preemption_operator.engine.candidates import HUMAN_REASONS, preemption_message
from preemption_operator.engine.engine import Engine
from preemption_operator.engine.ordering import candidate_key
from preemption_operator.engine.scheduler import (
    OVERLAPPING_TARGETS,
    WAITING_FOR_PREEMPTED,
    WAITING_FOR_QUOTA,
    QueueState,
)
from preemption_operator.engine.workload import WorkloadInfo

IN_CQ = "InClusterQueue"
RECLAIM = "InCohortReclamation"
RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"


# -- setups ---------------------------------------------------------------------------------------------


def standalone(*workloads: Any) -> list[Obj]:
    """CQ `standalone`: 6 cpu, withinClusterQueue LowerPriority, no cohort."""
    return scenario([cluster_queue("standalone", 6, within="LowerPriority")], *workloads)


def cohort_c1_c2(*workloads: Any) -> list[Obj]:
    """Cohort `cohort`: c1 (6 cpu, borrowingLimit 6; within LowerPriority, reclaim LowerPriority)
    and c2 (6 cpu, borrowingLimit 6; within Never, reclaim Any)."""
    return scenario(
        [
            cluster_queue("c1", 6, cohort="cohort", borrowing_limit=6, within="LowerPriority", reclaim="LowerPriority"),
            cluster_queue("c2", 6, cohort="cohort", borrowing_limit=6, within="Never", reclaim="Any"),
        ],
        *workloads,
    )


def with_shared_cq(*workloads: Any) -> list[Obj]:
    """Cohort `with-shared-cq`: a-standard, b-standard, a-best-effort (1 cpu, borrowingLimit 12),
    b-best-effort (0, borrowingLimit 13), shared (10 cpu); all but shared borrowWithinCohort
    LowerPriority with maxPriorityThreshold 0. (Kueue's unit test spells these names with
    underscores, which are not valid Kubernetes names; the API models reject them.)"""
    borrow: dict[str, Any] = {"borrow_within": "LowerPriority", "max_priority_threshold": 0}
    return scenario(
        [
            cluster_queue(
                "a-standard", 1, cohort="with-shared-cq", borrowing_limit=12, reclaim="LowerPriority", **borrow
            ),
            cluster_queue(
                "b-standard",
                1,
                cohort="with-shared-cq",
                borrowing_limit=12,
                within="LowerPriority",
                reclaim="Any",
                **borrow,
            ),
            cluster_queue(
                "a-best-effort", 1, cohort="with-shared-cq", borrowing_limit=12, reclaim="LowerPriority", **borrow
            ),
            cluster_queue(
                "b-best-effort", 0, cohort="with-shared-cq", borrowing_limit=13, reclaim="LowerPriority", **borrow
            ),
            cluster_queue("shared", 10, cohort="with-shared-cq"),
        ],
        *workloads,
    )


def prevent_starvation(*workloads: Any) -> list[Obj]:
    """CQ `prevent-starvation` (Kueue: preventStarvation): 6 cpu, withinClusterQueue LowerOrNewerEqualPriority."""
    return scenario([cluster_queue("prevent-starvation", 6, within="LowerOrNewerEqualPriority")], *workloads)


def cohort_lend(*workloads: Any) -> list[Obj]:
    """Cohort `cohort-lend`: lend1 (6 cpu, lendingLimit 4), lend2 (6 cpu, lendingLimit 2), both
    within LowerPriority and reclaim LowerPriority."""
    policies: dict[str, Any] = {"within": "LowerPriority", "reclaim": "LowerPriority"}
    return scenario(
        [
            cluster_queue("lend1", 6, cohort="cohort-lend", lending_limit=4, **policies),
            cluster_queue("lend2", 6, cohort="cohort-lend", lending_limit=2, **policies),
        ],
        *workloads,
    )


def hierarchical(*workloads: Any) -> list[Obj]:
    """Cohort r (root) ⊃ cohort c (2 cpu) ⊃ CQ q (0 cpu; within LowerPriority, reclaim Any);
    CQ q-borrowing (0 cpu) directly in r (Kueue's test: q_borrowing)."""
    return scenario(
        [
            cluster_queue("q", 0, cohort="c", within="LowerPriority", reclaim="Any"),
            cluster_queue("q-borrowing", 0, cohort="r"),
        ],
        *workloads,
        cohorts=[cohort("r"), cohort("c", parent="r", cpu=2)],
    )


PRIORITY_CLASSES = [
    workload_priority_class("low", 1),
    workload_priority_class("mid", 2),
    workload_priority_class("high", 3),
]


def alpha_beta_gamma(*workloads: Any) -> list[Obj]:
    """Integration setup: alpha, beta, gamma (2 cpu each) in cohort `all`; alpha has within
    LowerPriority and reclaim Any. Priorities come from WorkloadPriorityClasses low < mid < high."""
    return scenario(
        [
            cluster_queue("alpha", 2, cohort="all", within="LowerPriority", reclaim="Any"),
            cluster_queue("beta", 2, cohort="all"),
            cluster_queue("gamma", 2, cohort="all"),
        ],
        *workloads,
        extra=PRIORITY_CLASSES,
    )


# -- the case table -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    objects: list[Obj]
    victims: dict[str, str]
    """Victim name → `Preempted` condition reason."""
    messages: dict[str, str] = field(default_factory=dict)
    """Victim name → exact `Preempted`/`Evicted` message, where the reference gives it."""
    preemptor: str = "in"
    preemptor_cq: str = ""


def message(reason: str, preemptor: str, victim: str, uid: str = "in", job_uid: str = "UNKNOWN") -> str:
    return (
        f"Preempted to accommodate a workload (UID: {uid}, JobUID: {job_uid}) due to {reason}; "
        f"preemptor path: {preemptor}; preemptee path: {victim}"
    )


CASES = [
    Case(
        "B1_preempt_lowest_priority",
        standalone(
            admitted("low", "standalone", 2, priority=-1),
            admitted("mid", "standalone", 2, priority=0),
            admitted("high", "standalone", 2, priority=1),
            pending("in", "standalone", 2, priority=1, uid="wl-in", job_uid="job-in"),
        ),
        {"low": IN_CQ},
        {
            "low": "Preempted to accommodate a workload (UID: wl-in, JobUID: job-in) due to prioritization in the "
            "ClusterQueue; preemptor path: /standalone; preemptee path: /standalone"
        },
        preemptor_cq="standalone",
    ),
    Case(
        "B2_preempt_multiple",
        standalone(
            admitted("low", "standalone", 2, priority=-1),
            admitted("mid", "standalone", 2, priority=0),
            admitted("high", "standalone", 2, priority=1),
            pending("in", "standalone", 3, priority=1),
        ),
        {"low": IN_CQ, "mid": IN_CQ},
        preemptor_cq="standalone",
    ),
    Case(
        "B3_no_preemption_of_equal_priority",
        standalone(
            admitted("low", "standalone", 3, priority=-1),
            admitted("mid", "standalone", 3, priority=0),
            pending("in", "standalone", 1, priority=-1),
        ),
        {},
        preemptor_cq="standalone",
    ),
    Case(
        "B4_not_enough_lower_priority_workloads",
        standalone(
            admitted("low", "standalone", 3, priority=-1),
            admitted("mid", "standalone", 3, priority=0),
            pending("in", "standalone", 4, priority=0),
        ),
        {},
        preemptor_cq="standalone",
    ),
    Case(
        "B5_some_free_quota_preempt_low",
        standalone(
            admitted("low", "standalone", 1, priority=-1),
            admitted("mid", "standalone", 1, priority=0),
            admitted("high", "standalone", 3, priority=1),
            pending("in", "standalone", 2, priority=1),
        ),
        {"low": IN_CQ},
        preemptor_cq="standalone",
    ),
    Case(
        "B6_minimal_set_gives_low_back",
        standalone(
            admitted("low", "standalone", 1, priority=-1),
            admitted("mid", "standalone", 2, priority=0),
            admitted("high", "standalone", 3, priority=1),
            pending("in", "standalone", 2, priority=1),
        ),
        {"mid": IN_CQ},
        preemptor_cq="standalone",
    ),
    Case(
        "B7_reclaim_lower_priority_in_cohort",
        cohort_c1_c2(
            admitted("c1-low", "c1", 3, priority=-1),
            admitted("c2-mid", "c2", 3, priority=0),
            admitted("c2-high", "c2", 6, priority=1),
            pending("in", "c1", 3, priority=1),
        ),
        {"c2-mid": RECLAIM},
        {"c2-mid": message("reclamation within the cohort", "/cohort/c1", "/cohort/c2")},
        preemptor_cq="c1",
    ),
    Case(
        "B8_no_reclaim_of_equal_priority",
        cohort_c1_c2(
            admitted("c1", "c1", 2, priority=0),
            admitted("c2-1", "c2", 4, priority=0),
            admitted("c2-2", "c2", 4, priority=0),
            pending("in", "c1", 4, priority=0),
        ),
        {},
        preemptor_cq="c1",
    ),
    Case(
        "B9_reclaim_any_priority",
        cohort_c1_c2(
            admitted("c1-1", "c1", 4, priority=0),
            admitted("c1-2", "c1", 4, priority=1),
            admitted("c2", "c2", 2, priority=0),
            pending("in", "c2", 4, priority=0),
        ),
        {"c1-1": RECLAIM},
        preemptor_cq="c2",
    ),
    Case(
        "B10_preempt_in_own_queue_and_in_cohort",
        cohort_c1_c2(
            admitted("c1-low", "c1", 3, priority=-1),
            admitted("c1-mid", "c1", 2, priority=0),
            admitted("c2-low", "c2", 3, priority=-1),
            admitted("c2-mid", "c2", 4, priority=0),
            pending("in", "c1", 4, priority=0),
        ),
        {"c1-low": IN_CQ, "c2-low": RECLAIM},
        preemptor_cq="c1",
    ),
    Case(
        "B11_reclaim_while_borrowing_below_threshold",
        with_shared_cq(
            admitted("a-best-effort-low", "a-best-effort", 10, priority=-1),
            admitted("b-best-effort-low", "b-best-effort", 1, priority=-1),
            pending("in", "a-standard", 10, priority=0),
        ),
        {"a-best-effort-low": RECLAIM_WHILE_BORROWING},
        {
            "a-best-effort-low": message(
                "reclamation within the cohort while borrowing",
                "/with-shared-cq/a-standard",
                "/with-shared-cq/a-best-effort",
            )
        },
        preemptor_cq="a-standard",
    ),
    Case(
        "B12_no_reclaim_above_threshold_while_still_borrowing",
        with_shared_cq(
            admitted("b-standard", "b-standard", 10, priority=1),
            pending("in", "a-standard", 10, priority=2),
        ),
        {},
        preemptor_cq="a-standard",
    ),
    Case(
        "B13_reclaim_above_threshold_when_no_longer_borrowing",
        with_shared_cq(
            admitted("b-standard", "b-standard", 13, priority=1),
            pending("in", "a-standard", 1, priority=2),
        ),
        {"b-standard": RECLAIM},
        preemptor_cq="a-standard",
    ),
    Case(
        "B14_preempt_in_own_queue_and_below_threshold_in_cohort",
        with_shared_cq(
            admitted("b-standard-high", "b-standard", 10, priority=2),
            admitted("b-standard-mid", "b-standard", 1, priority=1),
            admitted("a-best-effort-low", "a-best-effort", 1, priority=-1),
            admitted("a-best-effort-lower", "a-best-effort", 1, priority=-2),
            pending("in", "b-standard", 2, priority=2),
        ),
        {"a-best-effort-lower": RECLAIM_WHILE_BORROWING, "b-standard-mid": IN_CQ},
        preemptor_cq="b-standard",
    ),
    Case(
        "B15_newer_equal_priority_most_recently_reserved_first",
        prevent_starvation(
            admitted("wl1", "prevent-starvation", 2, priority=2),
            admitted("wl2", "prevent-starvation", 2, priority=1, created=T0, at=T0 + seconds(1)),
            admitted("wl3", "prevent-starvation", 2, priority=1, created=T0, at=T0),
            pending("in", "prevent-starvation", 2, priority=1, created=T0 - seconds(15)),
        ),
        {"wl2": IN_CQ},
        preemptor_cq="prevent-starvation",
    ),
    Case(
        "B16_reclaim_from_lender",
        cohort_lend(
            admitted("lend1-low", "lend1", 3, priority=-1),
            admitted("lend2-mid", "lend2", 3, priority=0),
            admitted("lend2-high", "lend2", 4, priority=1),
            pending("in", "lend1", 3, priority=1),
        ),
        {"lend2-mid": RECLAIM},
        preemptor_cq="lend1",
    ),
    Case(
        "B17_hierarchical_reclaim_before_same_queue",
        hierarchical(
            admitted("admitted-borrowing", "q-borrowing", 1, priority=1),
            admitted("admitted-same-queue", "q", 1, priority=-2),
            pending("in", "q", 1, priority=0),
        ),
        {"admitted-borrowing": RECLAIM},
        {"admitted-borrowing": message("reclamation within the cohort", "/r/c/q", "/r/q-borrowing")},
        preemptor_cq="q",
    ),
    Case(
        "B18_integration_within_queue_and_reclaim",
        alpha_beta_gamma(
            admitted("alpha-low", "alpha", 1, priority_class="low"),
            admitted("beta-mid", "beta", 1, priority_class="mid"),
            admitted("beta-high", "beta", 4, priority_class="high"),
            pending("alpha-mid", "alpha", 2, priority_class="mid"),
        ),
        {"alpha-low": IN_CQ, "beta-mid": RECLAIM},
        {
            "alpha-low": message("prioritization in the ClusterQueue", "/all/alpha", "/all/alpha", uid="alpha-mid"),
            "beta-mid": message("reclamation within the cohort", "/all/alpha", "/all/beta", uid="alpha-mid"),
        },
        preemptor="alpha-mid",
        preemptor_cq="alpha",
    ),
    Case(
        "B19_integration_no_preemption_when_preemptor_must_borrow",
        alpha_beta_gamma(
            admitted("alpha-high-1", "alpha", 2, priority_class="high"),
            admitted("beta-low", "beta", 4, priority_class="low"),
            pending("alpha-high-2", "alpha", 2, priority_class="high"),
        ),
        {},
        preemptor="alpha-high-2",
        preemptor_cq="alpha",
    ),
]


def cohort_d1_d2(*workloads: Any) -> list[Obj]:
    """Cohort `cohort-no-limits`: d1 (6 cpu; within LowerPriority, reclaim LowerPriority) and d2
    (6 cpu; within Never, reclaim Any), no borrowing limits."""
    return scenario(
        [
            cluster_queue("d1", 6, cohort="cohort-no-limits", within="LowerPriority", reclaim="LowerPriority"),
            cluster_queue("d2", 6, cohort="cohort-no-limits", within="Never", reclaim="Any"),
        ],
        *workloads,
    )


def cohort_three(*workloads: Any) -> list[Obj]:
    """Cohort `cohort-three`: a (2 cpu; within LowerPriority, reclaim Any), b and c (2 cpu)."""
    return scenario(
        [
            cluster_queue("a", 2, cohort="cohort-three", within="LowerPriority", reclaim="Any"),
            cluster_queue("b", 2, cohort="cohort-three"),
            cluster_queue("c", 2, cohort="cohort-three"),
        ],
        *workloads,
    )


# More cases of Kueue's TestPreemption beyond the reference's table: the cpu-only ones whose forced
# `Preempt` assignment is also what our flavor assigner decides.
KUEUE_CASES = [
    Case(
        "K_not_enough_workloads_borrowing",
        cohort_c1_c2(
            admitted("c1-high", "c1", 4, priority=1),
            admitted("c2-low-1", "c2", 4, priority=-1),
            admitted("c2-low-2", "c2", 4, priority=-1),
            pending("in", "c1", 4, priority=1),
        ),
        {},
        preemptor_cq="c1",
    ),
    Case(
        "K_preempting_locally_and_borrowing_same_resource",
        cohort_c1_c2(
            admitted("c1-med", "c1", 4, priority=0),
            admitted("c1-low", "c1", 4, priority=-1),
            admitted("c2-low-1", "c2", 4, priority=-1),
            pending("in", "c1", 4, priority=1),
        ),
        {"c1-low": IN_CQ},
        preemptor_cq="c1",
    ),
    Case(
        "K_preempting_locally_and_borrowing_same_resource_no_borrowing_limit",
        cohort_d1_d2(
            admitted("d1-med", "d1", 4, priority=0),
            admitted("d1-low", "d1", 4, priority=-1),
            admitted("d2-low-1", "d2", 4, priority=-1),
            pending("in", "d1", 4, priority=1),
        ),
        {"d1-low": IN_CQ},
        preemptor_cq="d1",
    ),
    Case(
        "K_preempting_locally_not_borrowing_in_one_queue_cohort",
        scenario(
            [
                cluster_queue(
                    "l1", 6, cohort="legion", borrowing_limit=12, within="LowerPriority", reclaim="LowerPriority"
                )
            ],
            admitted("l1-med", "l1", 4, priority=0),
            admitted("l1-low", "l1", 2, priority=-1),
            pending("in", "l1", 4, priority=1),
        ),
        {"l1-med": IN_CQ},
        preemptor_cq="l1",
    ),
    Case(
        "K_preempt_from_all_queues_in_cohort_lend",
        cohort_lend(
            admitted("lend1-low", "lend1", 3, priority=-1),
            admitted("lend1-mid", "lend1", 2, priority=0),
            admitted("lend2-low", "lend2", 3, priority=-1),
            admitted("lend2-mid", "lend2", 4, priority=0),
            pending("in", "lend1", 4, priority=0),
        ),
        {"lend1-low": IN_CQ, "lend2-low": RECLAIM},
        preemptor_cq="lend1",
    ),
    Case(
        "K_only_preempt_in_own_queue_if_none_below_threshold",
        with_shared_cq(
            admitted("a-standard-1", "a-standard", 10, priority=1),
            admitted("a-standard-2", "a-standard", 1, priority=1),
            admitted("b-standard-1", "b-standard", 1, priority=1),
            admitted("b-standard-2", "b-standard", 1, priority=2),
            pending("in", "b-standard", 1, priority=3),
        ),
        {"b-standard-1": IN_CQ},
        preemptor_cq="b-standard",
    ),
    Case(
        "K_borrow_within_cohort_never_preempts_own_queue_with_within_never",
        with_shared_cq(
            admitted("a-standard", "a-standard", 13, priority=1),
            pending("in", "a-standard", 1, priority=2),
        ),
        {},
        preemptor_cq="a-standard",
    ),
    Case(
        "K_exhausted_queue_preempts_in_own_queue",
        cohort_three(
            admitted("a1", "a", 1, priority=-2),
            admitted("a2", "a", 1, priority=-2),
            admitted("a3", "a", 1, priority=-1),
            admitted("b1", "b", 1, priority=0),
            admitted("b2", "b", 1, priority=0),
            admitted("b3", "b", 1, priority=0),
            pending("in", "a", 2, priority=0),
        ),
        {"a1": IN_CQ, "a2": IN_CQ},
        preemptor_cq="a",
    ),
    Case(
        "K_not_exhausted_queue_preempts_in_other_queues_too",
        cohort_three(
            admitted("a1", "a", 1, priority=-1),
            admitted("b1", "b", 1, priority=0),
            admitted("b2", "b", 1, priority=0),
            admitted("b3", "b", 1, priority=0),
            admitted("b4", "b", 1, priority=0),
            admitted("b5", "b", 1, priority=-1),
            pending("in", "a", 2, priority=0),
        ),
        {"a1": IN_CQ, "b5": RECLAIM},
        preemptor_cq="a",
    ),
    Case(
        "K_long_range_preemption",
        scenario(
            [
                cluster_queue("cq-left", 10, cohort="cohort-left", reclaim="Any"),
                cluster_queue("cq-right", 0, cohort="cohort-right"),
            ],
            admitted("to-be-preempted", "cq-right", 5),
            pending("in", "cq-left", 8),
            cohorts=[cohort("cohort-left", parent="root"), cohort("cohort-right", parent="root")],
        ),
        {"to-be-preempted": RECLAIM},
        preemptor_cq="cq-left",
    ),
]
CASES = CASES + KUEUE_CASES

# -- the three paths --------------------------------------------------------------------------------------


@dataclass
class Decisions:
    victims: dict[str, str]
    messages: dict[str, str]
    outcome: Outcome | None = None


def through_engine(case: Case) -> Decisions:
    result = one_cycle(case.objects)
    victims = {p.victim.name: p.target.reason for p in result.preempted}
    messages = {
        p.victim.name: preemption_message(p.target, p.preemptor, p.preemptor_path, p.victim_path)
        for p in result.preempted
    }
    assert {p.preemptor.name for p in result.preempted} <= {case.preemptor}
    assert not result.admitted, "nothing fits without preemption in these cases"
    (waiting,) = [p for p in result.pending if p.workload.name == case.preemptor]
    assert waiting.cluster_queue == case.preemptor_cq
    if victims:
        assert waiting.reason == WAITING_FOR_PREEMPTED
        assert waiting.message.endswith(f". Pending the preemption of {len(victims)} workload(s)")
    else:
        assert waiting.reason == WAITING_FOR_QUOTA
    return Decisions(victims, messages)


def _through(run: Callable[[list[Obj]], Outcome]) -> Callable[[Case], Decisions]:
    def through(case: Case) -> Decisions:
        outcome = run(case.objects)
        preemptions = [a for a in outcome.actions if a["action"] == "Preempted"]
        assert len(preemptions) == len(outcome.preempted), "nobody is preempted twice"
        assert all(a["cycle"] == 1 for a in preemptions), "every victim is chosen in the first cycle"
        assert {a["preemptor"] for a in preemptions} <= {f"default/{case.preemptor}"}
        return Decisions(outcome.reasons, outcome.messages, outcome)

    return through


PATHS = {
    "engine": through_engine,
    "simulate": _through(simulate),
    "cli": _through(simulate_cli),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_victims_and_reasons(case: Case, path: str) -> None:
    decisions = PATHS[path](case)
    assert decisions.victims == case.victims
    for victim, expected in case.messages.items():
        assert decisions.messages[victim] == expected
    for victim, text in decisions.messages.items():
        assert text.startswith("Preempted to accommodate a workload (UID: ")
        assert f" due to {HUMAN_REASONS[case.victims[victim]]}; preemptor path: /" in text


@pytest.mark.parametrize("path", ["simulate", "cli"])
@pytest.mark.parametrize("case", [c for c in CASES if c.victims], ids=lambda c: c.id)
def test_victim_status(case: Case, path: str) -> None:
    """Evicted=True reason Preempted, Preempted=True with the reason, one eviction counted, quota
    released; the preemptor is admitted in the next cycle."""
    outcome = PATHS[path](case).outcome
    assert outcome is not None
    for victim, reason in case.victims.items():
        evicted = outcome.condition(victim, "Evicted")
        preempted = outcome.condition(victim, "Preempted")
        assert evicted is not None and preempted is not None
        assert (evicted["status"], evicted["reason"]) == ("True", "Preempted")
        assert (preempted["status"], preempted["reason"]) == ("True", reason)
        assert evicted["message"] == preempted["message"] == outcome.messages[victim]
        assert evicted["lastTransitionTime"] == preempted["lastTransitionTime"] == rfc3339(NOW)
        assert outcome.statuses[victim]["schedulingStats"]["evictions"] == [
            {"reason": "Preempted", "underlyingCause": "", "count": 1}
        ]
        assert "admission" not in outcome.statuses[victim]
        reserved = outcome.condition(victim, "QuotaReserved")
        assert reserved is not None and reserved["status"] == "False"
        requeued = outcome.condition(victim, "Requeued")
        assert requeued is not None and (requeued["status"], requeued["reason"]) == ("True", "Preempted")
    admissions = [a for a in outcome.actions_of(case.preemptor) if a["action"] == "Admitted"]
    assert [a["cycle"] for a in admissions] == [2]
    assert admissions[0]["clusterQueue"] == case.preemptor_cq


@pytest.mark.parametrize("case", [c for c in CASES if not c.victims], ids=lambda c: c.id)
def test_no_victims_preemptor_keeps_waiting(case: Case) -> None:
    outcome = simulate(case.objects)
    assert outcome.victims == []
    reserved = outcome.condition(case.preemptor, "QuotaReserved")
    assert reserved is not None
    assert (reserved["status"], reserved["reason"]) == ("False", WAITING_FOR_QUOTA)
    assert not [a for a in outcome.actions if a["action"] == "Admitted"]


# -- the preemptor's conditions ----------------------------------------------------------------------------


def case(name: str) -> Case:
    (found,) = [c for c in CASES if c.id.startswith(name + "_")]
    return found


@pytest.mark.parametrize("runner", [simulate, simulate_cli], ids=["simulate", "cli"])
def test_preemptor_waits_for_victims_then_is_admitted(runner: Callable[[list[Obj]], Outcome]) -> None:
    outcome = runner(case("B1").objects)
    (waiting,) = [a for a in outcome.actions_of("in") if a["action"] == "Pending"]
    assert waiting["cycle"] == 1
    assert waiting["reason"] == "WaitingForPreemptedWorkloads"
    assert waiting["message"] == (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, "
        "2 more needed. Pending the preemption of 1 workload(s)"
    )
    (admitted_action,) = [a for a in outcome.actions_of("in") if a["action"] == "Admitted"]
    assert admitted_action["cycle"] == 2
    reserved = outcome.condition("in", "QuotaReserved")
    assert reserved is not None
    assert (reserved["status"], reserved["reason"], reserved["message"]) == (
        "True",
        "QuotaReserved",
        "Quota reserved in ClusterQueue standalone",
    )
    admitted_condition = outcome.condition("in", "Admitted")
    assert admitted_condition is not None and admitted_condition["status"] == "True"
    assert outcome.statuses["in"]["admission"]["clusterQueue"] == "standalone"


def test_preemptor_condition_after_first_cycle() -> None:
    """Stopped after cycle 1, the preemptor's QuotaReserved is False with the waiting reason."""
    outcome = simulate(case("B18").objects, max_cycles=1)
    reserved = outcome.condition("alpha-mid", "QuotaReserved")
    assert reserved is not None
    assert (reserved["status"], reserved["reason"]) == ("False", "WaitingForPreemptedWorkloads")
    assert reserved["message"].endswith("Pending the preemption of 2 workload(s)")
    assert reserved["message"].startswith(
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default"
    )
    # Written beside the pending reason, as Kueue does with its granular reasons (issue #12, item 6).
    admitted = outcome.condition("alpha-mid", "Admitted")
    assert admitted is not None
    assert (admitted["status"], admitted["reason"]) == ("False", "NoReservation")


def test_pending_message_without_victims() -> None:
    """B3: nothing may be preempted; Kueue's flavor-assignment message, reason WaitingForQuota."""
    result = one_cycle(case("B3").objects)
    (waiting,) = result.pending
    assert (waiting.reason, waiting.message) == (
        WAITING_FOR_QUOTA,
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 1 more needed",
    )
    outcome = simulate(case("B3").objects)
    reserved = outcome.condition("in", "QuotaReserved")
    assert reserved is not None
    assert reserved["message"] == waiting.message


@pytest.mark.parametrize("preemptor_leaves", ["finished", "deleted"])
def test_B18_victims_flip_back_when_readmitted(preemptor_leaves: str) -> None:
    """Once the preemptor is gone (finished, or deleted), both victims are admitted again:
    QuotaReserved True, and the active Evicted/Preempted conditions flip to False, reason
    QuotaReserved, message `Previously: <the eviction message>`."""
    objects = case("B18").objects
    first = simulate(objects)
    assert first.victims == ["alpha-low", "beta-mid"]
    after = []
    for obj in first.objects_after(objects):
        if obj["kind"] == "Workload" and obj["metadata"]["name"] == "alpha-mid":
            if preemptor_leaves == "deleted":
                continue
            obj["status"]["conditions"].append(
                {
                    "type": "Finished",
                    "status": "True",
                    "reason": "Succeeded",
                    "message": "Job finished",
                    "lastTransitionTime": "2026-11-30T00:05:00Z",
                }
            )
        after.append(obj)
    later = NOW + seconds(600)
    second = simulate(after, now=later)
    assert second.victims == []
    assert {a["workload"] for a in second.actions if a["action"] == "Admitted"} == {
        "default/alpha-low",
        "default/beta-mid",
    }
    for victim, cq in (("alpha-low", "alpha"), ("beta-mid", "beta")):
        old = first.messages[victim]
        for kind in ("Evicted", "Preempted"):
            condition = second.condition(victim, kind)
            assert condition is not None
            assert (condition["status"], condition["reason"], condition["message"]) == (
                "False",
                "QuotaReserved",
                f"Previously: {old}",
            )
            assert condition["lastTransitionTime"] == "2026-11-30T00:10:00Z"
        reserved = second.condition(victim, "QuotaReserved")
        assert reserved is not None
        assert (reserved["status"], reserved["reason"], reserved["message"]) == (
            "True",
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {cq}",
        )
        admitted_condition = second.condition(victim, "Admitted")
        assert admitted_condition is not None and admitted_condition["status"] == "True"
        assert second.statuses[victim]["schedulingStats"]["evictions"] == [
            {"reason": "Preempted", "underlyingCause": "", "count": 1}
        ]


def test_B18_priorities_come_from_workload_priority_classes() -> None:
    infos = cache_of(case("B18").objects).infos
    assert {key.split("/")[1]: info.priority for key, info in infos.items()} == {
        "alpha-low": 1,
        "beta-mid": 2,
        "beta-high": 3,
        "alpha-mid": 2,
    }


# -- already-evicted candidates ------------------------------------------------------------------------


def evicted_mid_objects() -> list[Obj]:
    """B1's queue where `mid` was already evicted by an earlier preemption (the job is still
    stopping, so it holds its quota): Evicted and Preempted True, one eviction counted."""
    mid = workload("mid", priority=0, cpu=2).admitted("standalone").obj()
    earlier = "Preempted to accommodate a workload (UID: earlier, JobUID: UNKNOWN) due to prioritization in the ClusterQueue; preemptor path: /standalone; preemptee path: /standalone"
    mid["status"]["conditions"] += [
        {
            "type": kind,
            "status": "True",
            "reason": reason,
            "message": earlier,
            "lastTransitionTime": "2026-01-01T10:30:00Z",
        }
        for kind, reason in (("Evicted", "Preempted"), ("Preempted", "InClusterQueue"))
    ]
    mid["status"]["schedulingStats"] = {"evictions": [{"reason": "Preempted", "underlyingCause": "", "count": 1}]}
    return standalone(
        admitted("low", "standalone", 2, priority=-1),
        mid,
        admitted("high", "standalone", 2, priority=1),
        pending("in", "standalone", 2, priority=1),
    )


def test_already_evicted_candidate_is_chosen_first() -> None:
    """§4.5: an Evicted candidate comes before a lower-priority one; it frees quota soonest."""
    result = one_cycle(evicted_mid_objects())
    assert [(p.victim.name, p.target.reason) for p in result.preempted] == [("mid", IN_CQ)]


def test_already_evicted_target_is_not_evicted_again() -> None:
    before = next(o for o in evicted_mid_objects() if o["metadata"]["name"] == "mid")["status"]
    outcome = simulate(evicted_mid_objects(), max_cycles=1)
    assert outcome.victims == []  # counted as a target, but no new Preempted action (issue #12, item 7)
    after = outcome.statuses["mid"]
    assert after["schedulingStats"] == before["schedulingStats"]
    for kind in ("Evicted", "Preempted"):
        assert outcome.condition("mid", kind) == next(c for c in before["conditions"] if c["type"] == kind)


def departed_cycle(name: str, evicted: bool) -> Any:
    """One cycle on B1's queue (`mid` evicted earlier, or not) after `name`'s Workload was deleted
    while its pods may still run: it departs, holding its quota."""
    objects = evicted_mid_objects()
    if not evicted:
        mid = next(o for o in objects if o["metadata"]["name"] == "mid")
        mid["status"]["conditions"] = [
            c for c in mid["status"]["conditions"] if c["type"] not in ("Evicted", "Preempted")
        ]
    cache = cache_of(objects)
    cache.depart(f"{NAMESPACE}/{name}", "999")
    return Engine().cycle(cache.snapshot(NOW), QueueState())


def test_a_victim_deleted_while_being_evicted_keeps_its_preemptor_waiting() -> None:
    """`mid`'s job was stopped by its eviction and its Workload deleted, while its pods run out
    their grace period: it still counts as the victim being evicted, so the preemptor waits for
    its quota instead of choosing `low` as a second victim."""
    result = departed_cycle("mid", evicted=True)
    assert [(p.victim.name, p.target.reason) for p in result.preempted] == [("mid", IN_CQ)]
    (waiting,) = [p for p in result.pending if p.workload.name == "in"]
    assert waiting.reason == WAITING_FOR_PREEMPTED


def test_a_workload_deleted_while_running_is_not_preempted() -> None:
    """Deleted without an eviction (its job was deleted): nothing is left to evict, so the
    preemptor looks past it, to `low`."""
    result = departed_cycle("mid", evicted=False)
    assert [p.victim.name for p in result.preempted] == ["low"]


# -- flavor choice ------------------------------------------------------------------------------------


def two_flavors(*workloads: Any) -> list[Obj]:
    """CQ `multi`: 2 cpu of flavor alpha then 2 cpu of flavor beta; within LowerPriority."""
    return scenario(
        [cluster_queue("multi", {"alpha": quota(2), "beta": quota(2)}, within="LowerPriority")],
        *workloads,
        flavors=("alpha", "beta"),
    )


def test_preemption_only_in_the_chosen_flavor() -> None:
    """Both flavors are full and both have a lower-priority workload: the first flavor is chosen
    and only workloads using it are candidates."""
    objects = two_flavors(
        admitted("alpha-low", "multi", 2, flavor="alpha", priority=-1),
        admitted("beta-lower", "multi", 2, flavor="beta", priority=-2),
        pending("in", "multi", 2, priority=1),
    )
    result = one_cycle(objects)
    assert [(p.victim.name, p.target.reason) for p in result.preempted] == [("alpha-low", IN_CQ)]
    outcome = simulate(objects)
    assert outcome.statuses["in"]["admission"]["podSetAssignments"][0]["flavors"] == {"cpu": "alpha"}


def test_flavor_without_preemption_candidates_is_passed_over() -> None:
    objects = two_flavors(
        admitted("alpha-high", "multi", 2, flavor="alpha", priority=1),
        admitted("beta-low", "multi", 2, flavor="beta", priority=-1),
        pending("in", "multi", 2, priority=1),
    )
    result = one_cycle(objects)
    assert [(p.victim.name, p.target.reason) for p in result.preempted] == [("beta-low", IN_CQ)]


# -- ordering (B24-B27) ----------------------------------------------------------------------------------


def infos(*workloads: Any) -> dict[str, WorkloadInfo]:
    objects = scenario(
        [cluster_queue("a", 6, cohort="all"), cluster_queue("b", 6, cohort="all")],
        *workloads,
    )
    return {info.name: info for info in cache_of(objects).infos.values()}


def order(candidates: dict[str, WorkloadInfo], preemptor_cq: str = "a") -> list[str]:
    return [wl.name for wl in sorted(candidates.values(), key=lambda wl: candidate_key(wl, preemptor_cq, NOW))]


def test_B24_most_recently_reserved_first() -> None:
    candidates = infos(
        admitted("older", "a", at=T0 - seconds(1)),
        admitted("younger", "a", at=T0 + seconds(1)),
        admitted("current", "a", at=T0),
    )
    assert order(candidates) == ["younger", "current", "older"]


def test_B24_no_reservation_time_counts_as_now() -> None:
    candidates = infos(admitted("reserved", "a", at=T0), admitted("unknown", "a", at=T0 - seconds(5)))
    candidates["unknown"] = dataclasses.replace(candidates["unknown"], reserved_at=None)
    assert order(candidates) == ["unknown", "reserved"]


def test_B25_evicted_first() -> None:
    candidates = infos(
        admitted("other", "a", at=T0 + seconds(1), priority=-5),
        workload("evicted", priority=5).admitted("a", at=T0).evicted(),
    )
    assert candidates["evicted"].evicted
    assert order(candidates) == ["evicted", "other"]


def test_B26_other_cluster_queue_first() -> None:
    candidates = infos(admitted("a-same", "a", priority=0), admitted("b-other", "b", priority=0))
    assert order(candidates, preemptor_cq="a") == ["b-other", "a-same"]
    assert order(candidates, preemptor_cq="b") == ["a-same", "b-other"]


def test_priority_before_reservation_time_and_uid_last() -> None:
    candidates = infos(
        admitted("z-low", "a", priority=-1, at=T0),
        admitted("b-high", "a", priority=1, at=T0 + seconds(5)),
        admitted("a-low", "a", priority=-1, at=T0),
    )
    assert order(candidates) == ["a-low", "z-low", "b-high"]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param({"boost": 5}, {"boost": 100}, id="B27_low_boost_first"),
        pytest.param({}, {"boost": 5}, id="B27_missing_boost_first"),
        pytest.param({"boost": "not-a-number"}, {"boost": 5}, id="B27_invalid_boost_counts_as_zero"),
        pytest.param({"boost": "99999999999"}, {"boost": 1}, id="B27_out_of_range_boost_counts_as_zero"),
        pytest.param({"boost": -20}, {}, id="B27_negative_boost_lowers_priority"),
    ],
)
def test_B27_priority_boost(first: dict[str, Any], second: dict[str, Any]) -> None:
    # UIDs put `second` first on a tie, so only the effective priority can order `first` before it.
    candidates = infos(
        admitted("z-first", "a", priority=10, **first),
        admitted("a-second", "a", priority=10, **second),
    )
    assert order(candidates) == ["z-first", "a-second"]


def test_B27_invalid_boost_ties_with_missing_boost() -> None:
    candidates = infos(
        admitted("z-missing", "a", priority=10),
        admitted("a-invalid", "a", priority=10, boost="1.5"),
    )
    assert candidates["a-invalid"].priority == 10
    assert order(candidates) == ["a-invalid", "z-missing"]


def test_quota_a_victim_frees_beyond_its_preemptors_need_is_not_given_out_in_that_cycle() -> None:
    """Harness runs (issue #13): a 1-cpu preemptor's 6-cpu victim freed 5 cpu that workloads of the
    victim's own, borrowing ClusterQueue took in the same cycle; the next cycle reclaimed them in
    turn, and evictions multiplied. As in Kueue, victims keep their quota until they are evicted
    (nominated at the start of the cycle, `x` does not fit; it would only fit by the preemption:
    Kueue's DeferredFit), while the preemptor's share is held for it."""
    objects = scenario(
        [
            cluster_queue("lender", 8, cohort="all", reclaim="Any"),
            cluster_queue("borrower", 2, cohort="all"),
        ],
        admitted("held", "lender", 4, at=T0),
        admitted("big", "borrower", 6, at=T0),
        pending("p", "lender", 1),
        pending("x", "borrower", 3),
    )
    outcome = simulate(objects, max_cycles=1)
    assert outcome.victims == ["big"]
    assert not [a for a in outcome.actions if a["action"] == "Admitted"]
    later = simulate(objects)
    admitted_in = {a["workload"].split("/")[-1]: a["cycle"] for a in later.actions if a["action"] == "Admitted"}
    assert admitted_in["p"] == 2 and admitted_in["x"] > 1  # x once big has given its quota back


def test_a_head_whose_fit_an_earlier_head_of_its_cohort_changed_is_skipped_for_the_cycle() -> None:
    """Kueue nominates every head before processing any, and skips an entry that "no longer fits
    after processing another workload" instead of planning it anew (new victims) in the same
    cycle; it is not parked, so the next cycle considers it again."""
    from preemption_operator.engine.scheduler import NO_LONGER_FITS, QueueState, Scheduler

    objects = scenario(
        [
            cluster_queue("lender", 2, cohort="all"),
            cluster_queue("first", 0, cohort="all"),
            cluster_queue("second", 0, cohort="all", within="LowerPriority"),
        ],
        pending("a", "first", 2, priority=10),
        pending("b", "second", 2, priority=0),
    )
    state = QueueState()
    result = Scheduler().cycle(cache_of(objects).snapshot(NOW), state)
    assert [a.workload.name for a in result.admitted] == ["a"]
    assert [(p.workload.name, p.message) for p in result.pending] == [("b", NO_LONGER_FITS)]
    assert not result.preempted
    assert "default/b" not in state.inadmissible.get("second", set())


def test_a_head_whose_flavor_an_earlier_head_filled_is_skipped_not_moved_to_another_flavor() -> None:
    """Kueue checks an entry's nominated assignment against what the earlier ones left (cq.Fits)
    and skips it with "no longer fits after processing another workload"; it does not move it to
    another flavor in the same cycle. Both heads borrow the pool's 2 on-demand cpu (its first
    flavor): a, processed first, gets them; b waits a cycle, then gets spot."""
    from preemption_operator.engine.scheduler import NO_LONGER_FITS, QueueState, Scheduler

    def flavored(name: str, cpu: int) -> Obj:
        return with_resource_groups(
            cluster_queue(name, cohort="all"), resource_group({"on-demand": {"cpu": cpu}, "spot": {"cpu": cpu}})
        )

    objects = scenario(
        [flavored("pool", 2), flavored("first", 0), flavored("second", 0)],
        pending("a", "first", 2, priority=10),
        pending("b", "second", 2, priority=0),
        flavors=("on-demand", "spot"),
    )
    state = QueueState()
    cache = cache_of(objects)
    result = Scheduler().cycle(cache.snapshot(NOW), state)
    assert [(a.workload.name, a.pod_sets[0]["flavors"]) for a in result.admitted] == [("a", {"cpu": "on-demand"})]
    assert [(p.workload.name, p.message) for p in result.pending] == [("b", NO_LONGER_FITS)]
    outcome = simulate(objects)
    admissions = {a["workload"].split("/")[-1]: a for a in outcome.actions if a["action"] == "Admitted"}
    assert admissions["a"]["cycle"] == 1 and admissions["b"]["cycle"] == 2
    assert outcome.statuses["b"]["admission"]["podSetAssignments"][0]["flavors"] == {"cpu": "spot"}


def test_a_head_that_fit_when_nominated_takes_what_victims_free_beyond_their_preemptors_need() -> None:
    """Kueue's fits check after a preemption in the cohort counts the cycle's victims as gone: the
    large preemptor holds its 20 cpu, and the medium, which fit the cohort when the cycle began,
    is admitted in the same cycle (the victims free 20 more than the 54 left 6 of 60 for). Found
    by the differential test against Kueue's scheduler (test_same_decisions_as_kueue.py)."""
    objects = scenario(
        [
            cluster_queue("lender", 20, cohort="all", reclaim="Any", within="LowerPriority"),
            cluster_queue("borrower", 20, cohort="all", borrowing_limit=100),
            cluster_queue("third", 20, cohort="all"),
        ],
        admitted("big-1", "borrower", 20, at=T0, priority=200),
        admitted("big-2", "borrower", 20, at=T0 + seconds(1), priority=200),
        admitted("held", "third", 14, at=T0),
        pending("large", "lender", 20, priority=200),
        pending("medium", "third", 5, priority=100),
    )
    result = one_cycle(objects)
    assert {p.victim.name: p.preemptor.name for p in result.preempted} == {"big-2": "large"}
    assert [(a.workload.name, a.cluster_queue) for a in result.admitted] == [("medium", "third")]


def test_a_victim_under_way_stays_a_candidate_so_another_preemptor_overlaps_instead_of_choosing_more() -> None:
    """In the cycles after a preemption (the engine's later rounds, nothing answered), Kueue's
    cache still holds the victims as candidates: a second preemptor that would reclaim one of
    them is skipped as overlapping. Excluding them made it reach for the borrower's larges
    instead: two more evictions Kueue does not make (found by test_same_decisions_as_kueue.py
    over consecutive cycles)."""
    objects = scenario(
        [
            cluster_queue("lender", 20, cohort="all", reclaim="Any", within="LowerPriority"),
            cluster_queue("second", 20, cohort="all", reclaim="Any", within="LowerPriority"),
            cluster_queue("borrower", 20, cohort="all", borrowing_limit=100),
        ],
        *(admitted(f"m{i}", "borrower", 5, at=T0 + seconds(i), priority=100) for i in range(1, 5)),
        admitted("big-1", "borrower", 20, at=T0, priority=200),
        admitted("big-2", "borrower", 20, at=T0, priority=200),
        pending("large", "lender", 20, priority=200, created=T0 + seconds(10)),
        pending("medium", "second", 5, priority=100, created=T0 + seconds(11)),
    )
    result = Engine(rounds=3).cycle(cache_of(objects).snapshot(NOW), QueueState())
    assert {p.victim.name: p.preemptor.name for p in result.preempted} == {f"m{i}": "large" for i in range(1, 5)}
    assert not result.admitted
    (waiting,) = [p for p in result.pending if p.workload.name == "medium"]
    assert (waiting.reason, waiting.message) == (WAITING_FOR_QUOTA, OVERLAPPING_TARGETS)


@pytest.mark.parametrize("prioritize", [True, False])
def test_a_victim_under_way_is_claimed_by_the_first_preemptor_processed_that_needs_it(prioritize: bool) -> None:
    """`waiting` preempted `v` (a borrower of `c`), whose eviction is being written; `reclaimer`,
    within its nominal quota, needs `v` too. With PrioritizePreemptorWorkloads on, the waiting
    preemptor goes first and holds `v` again, and `reclaimer` is skipped as overlapping. Off
    (Kueue's default), `reclaimer` (not borrowing) goes first and claims `v` as Kueue does: no
    second eviction, it waits for `v`, and `waiting` is the one skipped. Found by the differential
    test with the gate off (test_same_decisions_as_kueue.py); the engine had skipped whichever
    preemptor did not choose `v` itself."""
    objects = scenario(
        [
            cluster_queue("a", 10, cohort="all", reclaim="Any", within="LowerPriority"),
            cluster_queue("b", 10, cohort="all", borrowing_limit=100, reclaim="Any", borrow_within="LowerPriority"),
            cluster_queue("c", 0, cohort="all", borrowing_limit=100),
        ],
        admitted("x", "a", 5, at=T0, priority=100),
        admitted("y", "b", 10, at=T0, priority=100),
        admitted("v", "c", 5, at=T0, priority=50),
        pending("reclaimer", "a", 5, priority=100, created=T0 + seconds(2)),
        pending("waiting", "b", 5, priority=200, created=T0 + seconds(1)),
    )
    cache = Cache(prioritize_preemptors=prioritize)
    cache.load(parse(objects))
    taken = dataclasses.replace(cache.snapshot(NOW), evicting=frozenset({f"{NAMESPACE}/v"}))
    state = QueueState(waiting={f"{NAMESPACE}/waiting": (f"{NAMESPACE}/v",)})
    result = Engine().cycle(taken, state)
    assert not result.preempted and not result.admitted
    reasons = {p.workload.name: (p.reason, p.message.rsplit(". ", 1)[-1]) for p in result.pending}
    claimer, skipped = ("waiting", "reclaimer") if prioritize else ("reclaimer", "waiting")
    assert reasons[skipped] == (WAITING_FOR_QUOTA, OVERLAPPING_TARGETS.rsplit(". ", 1)[-1])
    assert state.waiting.get(f"{NAMESPACE}/{claimer}") == (f"{NAMESPACE}/v",)
    if not prioritize:
        assert reasons[claimer] == (WAITING_FOR_PREEMPTED, "Pending the preemption of 1 workload(s)")
