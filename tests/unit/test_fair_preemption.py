"""Fair preemption (`engine/fair_preemption.py`): Kueue v0.19.2's TestFairPreemptions
(`pkg/scheduler/preemption/preemption_fair_test.go`), case by case, run through one engine cycle
with fair sharing on; then the reference's B20-B23 (and A19-A22, configurable rules under fair
sharing), the `simulate` CLI, classic behaviour staying as it was with fair sharing off, and
Kueue's TestMakeClusterQueueOrdering (`fairsharing/ordering_test.go`) on the target ordering.

Kueue calls GetTargets directly with a Preempt assignment; here the incoming workload is the
only pending one, so the cycle's flavor assignment reaches the same search. Kueue's names with
underscores are spelled with hyphens (Kubernetes names). Every workload has UID = name and
reserved quota at T0, as Kueue's test sets them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

import pytest

from builders import (
    ALLOW,
    NOW,
    Obj,
    WorkloadBuilder,
    admitted,
    cache_of,
    cluster_queue,
    cohort,
    one_cycle,
    pending,
    preemption_config,
    resource_group,
    rule,
    scenario,
    seconds,
    selector,
    simulate,
    simulate_cli,
    toleration,
    with_fungibility,
    with_resource_groups,
    workload_priority_class,
)
from preemption_operator.engine import fair_sharing as fs
from preemption_operator.engine.candidates import preemption_message
from preemption_operator.engine.fair_preemption import TargetOrdering
from preemption_operator.engine.flavors import assign_flavors
from preemption_operator.engine.ordering import candidate_key
from preemption_operator.engine.preemption import find_targets
from preemption_operator.engine.protection import LAST_RESORT_SUFFIX

IN_CQ = "InClusterQueue"
RECLAIM = "InCohortReclamation"
FAIR = "InCohortFairSharing"
ON = fs.FairSharing(enabled=True)


def weighted(obj: Obj, weight: str) -> Obj:
    """spec.fairSharing.weight on a ClusterQueue or Cohort."""
    obj["spec"]["fairSharing"] = {"weight": weight}
    return obj


def base_cqs() -> list[Obj]:
    """Kueue's baseCQs: a, b, c (3 cpu each; withinClusterQueue LowerPriority, reclaimWithinCohort
    Any, borrowWithinCohort LowerPriority with threshold -3, which fair sharing ignores) and
    `preemptible` (0 cpu, no preemption), all in cohort `all`."""
    borrow: dict[str, Any] = {"borrow_within": "LowerPriority", "max_priority_threshold": -3}
    return [
        *(
            cluster_queue(name, 3, cohort="all", within="LowerPriority", reclaim="Any", **borrow)
            for name in ("a", "b", "c")
        ),
        cluster_queue("preemptible", 0, cohort="all"),
    ]


def abc(weights: dict[str, str] | None = None, names: Sequence[str] = ("a", "b", "c")) -> list[Obj]:
    """a, b, c of 3 cpu (within LowerPriority, reclaim Any, no borrowWithinCohort), with weights."""
    out = []
    for name in names:
        cq = cluster_queue(name, 3, cohort="all", within="LowerPriority", reclaim="Any")
        if weights and name in weights:
            weighted(cq, weights[name])
        out.append(cq)
    return out


def units(cq: str, *names: str, **kwargs: Any) -> list[WorkloadBuilder]:
    """Workloads of 1 cpu admitted in `cq`."""
    return [admitted(name, cq, 1, **kwargs) for name in names]


def victims(
    cqs: Iterable[Obj],
    workloads: Iterable[WorkloadBuilder],
    incoming: WorkloadBuilder,
    *,
    cohorts: Iterable[Obj] = (),
    strategies: tuple[str, ...] = fs.DEFAULT_STRATEGIES,
    flavors: Iterable[str] = ("default",),
) -> dict[str, str]:
    """One engine cycle with fair sharing on: victim name -> Preempted reason."""
    objects = scenario(list(cqs), *workloads, incoming, cohorts=list(cohorts), flavors=flavors)
    result = one_cycle(objects, fair_sharing=fs.FairSharing(enabled=True, strategies=strategies))
    # Every case needs preemption: the incoming workload never simply fits.
    assert not result.admitted
    return {p.victim.name: p.target.reason for p in result.preempted}


# -- TestFairPreemptions (preemption_fair_test.go) ---------------------------------------------------------


def test_reclaim_nominal_from_user_using_the_most() -> None:
    """Kueue case "reclaim nominal from user using the most"."""
    got = victims(
        base_cqs(),
        [*units("a", "a1", "a2", "a3"), *units("b", "b1", "b2", "b3", "b4", "b5"), *units("c", "c1")],
        pending("c-incoming", "c", 1),
    )
    assert got == {"b1": RECLAIM}


def test_can_reclaim_from_queue_using_less_if_the_latest_of_the_most_using_is_not_enough() -> None:
    """Kueue case "can reclaim from queue using less, if taking the latest workload from user using
    the most isn't enough"."""
    got = victims(
        base_cqs(),
        [admitted("a1", "a", 3), admitted("a2", "a", 1), admitted("b1", "b", 2), admitted("b2", "b", 3)],
        pending("c-incoming", "c", 3),
    )
    assert got == {"a1": RECLAIM}


def test_reclaim_borrowable_quota_from_user_using_the_most() -> None:
    """Kueue case "reclaim borrowable quota from user using the most"."""
    got = victims(
        base_cqs(),
        [*units("a", "a1", "a2", "a3"), *units("b", "b1", "b2", "b3", "b4", "b5"), *units("c", "c1")],
        pending("a-incoming", "a", 1),
    )
    assert got == {"b1": FAIR}


def test_preempt_one_from_each_cq_borrowing() -> None:
    """Kueue case "preempt one from each CQ borrowing"."""
    got = victims(
        base_cqs(),
        [
            admitted("a1", "a", "500m"),
            admitted("a2", "a", "500m"),
            admitted("a3", "a", 3),
            admitted("b1", "b", "500m"),
            admitted("b2", "b", "500m"),
            admitted("b3", "b", 3),
        ],
        pending("c-incoming", "c", 2),
    )
    assert got == {"a1": RECLAIM, "b1": RECLAIM}


def test_cannot_preempt_when_everyone_under_nominal() -> None:
    """Kueue case "can't preempt when everyone under nominal"."""
    got = victims(
        base_cqs(),
        [*units("a", "a1", "a2", "a3"), *units("b", "b1", "b2", "b3"), *units("c", "c1", "c2", "c3")],
        pending("c-incoming", "c", 1),
    )
    assert got == {}


def test_cannot_preempt_when_it_would_switch_the_imbalance() -> None:
    """Kueue case "can't preempt when it would switch the imbalance"."""
    got = victims(
        base_cqs(),
        [*units("a", "a1", "a2", "a3"), *units("b", "b1", "b2", "b3", "b4", "b5")],
        pending("a-incoming", "a", 2),
    )
    assert got == {}


def test_can_preempt_lower_priority_workloads_from_same_cq() -> None:
    """Kueue case "can preempt lower priority workloads from same CQ"."""
    got = victims(
        base_cqs(),
        [
            *units("a", "a1-low", "a2-low", priority=-1),
            *units("a", "a3", "a4"),
            *units("b", "b1", "b2", "b3", "b4", "b5"),
        ],
        pending("a-incoming", "a", 2),
    )
    assert got == {"a1-low": IN_CQ, "a2-low": IN_CQ}


def test_can_preempt_a_combination_of_same_cq_and_highest_user() -> None:
    """Kueue case "can preempt a combination of same CQ and highest user" (the reference's B23)."""
    got = victims(
        base_cqs(),
        [
            admitted("a-low", "a", 1, priority=-1),
            *units("a", "a2", "a3"),
            *units("b", "b1", "b2", "b3", "b4", "b5", "b6"),
        ],
        pending("a-incoming", "a", 2),
    )
    assert got == {"a-low": IN_CQ, "b1": FAIR}


def test_preempt_huge_workload_if_there_is_no_other_option() -> None:
    """Kueue case "preempt huge workload if there is no other option, as long as the target CQ gets
    a lower share"."""
    got = victims(base_cqs(), [admitted("b1", "b", 9)], pending("a-incoming", "a", 2))
    assert got == {"b1": RECLAIM}


def test_cannot_preempt_huge_workload_if_the_incoming_is_also_huge() -> None:
    """Kueue case "can't preempt huge workload if the incoming is also huge"."""
    got = victims(base_cqs(), [admitted("a1", "a", 2), admitted("b1", "b", 7)], pending("a-incoming", "a", 5))
    assert got == {}


def test_cannot_preempt_two_smaller_workloads_if_the_incoming_is_huge() -> None:
    """Kueue case "can't preempt 2 smaller workloads if the incoming is huge"."""
    got = victims(
        base_cqs(),
        [admitted("b1", "b", 2), admitted("b2", "b", 2), admitted("b3", "b", 3)],
        pending("a-incoming", "a", 6),
    )
    assert got == {}


def test_preempt_from_target_and_others_even_if_over_nominal() -> None:
    """Kueue case "preempt from target and others even if over nominal"."""
    got = victims(
        base_cqs(),
        [
            admitted("a1-low", "a", 2, priority=-1),
            admitted("a2-low", "a", 1, priority=-1),
            admitted("b1", "b", 3),
            admitted("b2", "b", 3),
        ],
        pending("a-incoming", "a", 4),
    )
    assert got == {"a1-low": IN_CQ, "b1": FAIR}


def test_prefer_to_preempt_workloads_that_do_not_make_the_target_cq_have_the_biggest_share() -> None:
    """Kueue case "prefer to preempt workloads that don't make the target CQ have the biggest share"
    (b1 would pass S2-b, but S2-a passes first for b2)."""
    got = victims(
        base_cqs(),
        [admitted("b1", "b", 2), admitted("b2", "b", 1), admitted("b3", "b", 2), admitted("c1", "c", 1)],
        pending("a-incoming", "a", "3500m"),
    )
    assert got == {"b2": FAIR}


def test_preempt_from_different_cluster_queues_if_the_end_result_has_a_smaller_max_share() -> None:
    """Kueue case "preempt from different cluster queues if the end result has a smaller max share"."""
    got = victims(
        base_cqs(),
        [
            admitted("b1", "b", 2),
            admitted("b2", "b", "2500m"),
            admitted("c1", "c", 2),
            admitted("c2", "c", "2500m"),
        ],
        pending("a-incoming", "a", "3500m"),
    )
    assert got == {"b1": FAIR, "c1": FAIR}


def test_scenario_above_does_not_flap() -> None:
    """Kueue case "scenario above does not flap"."""
    got = victims(
        base_cqs(),
        [admitted("a1", "a", "3500m"), admitted("b2", "b", "2500m"), admitted("c2", "c", "2500m")],
        pending("b-incoming", "b", 2),
    )
    assert got == {}


def test_cannot_preempt_if_the_candidate_cq_would_go_under_nominal() -> None:
    """Kueue case "cannot preempt if it would make the candidate CQ go under nominal after
    preempting one element"."""
    got = victims(
        base_cqs(),
        [admitted("b1", "b", 3), admitted("b2", "b", 3), admitted("c1", "c", 3)],
        pending("a-incoming", "a", 4),
    )
    assert got == {}


def test_workloads_under_priority_threshold_not_capriciously_preempted() -> None:
    """Kueue case "workloads under priority threshold not capriciously preempted": borrowWithinCohort
    plays no part under fair sharing."""
    got = victims(
        base_cqs(),
        [
            *units("a", "a1", "a2", "a3"),
            *units("b", "b1", "b2", "b3"),
            *units("preemptible", "preemptible1", "preemptible2", "preemptible3", priority=-3),
        ],
        pending("a-incoming", "a", 2),
    )
    assert got == {}


def test_preempt_lower_priority_first_even_if_big() -> None:
    """Kueue case "preempt lower priority first, even if big" (strategies [LessThanInitialShare])."""
    got = victims(
        base_cqs(),
        [admitted("a1", "a", 3), admitted("b-low", "b", 5, priority=0), admitted("b-high", "b", 1, priority=1)],
        pending("a-incoming", "a", 1),
        strategies=(fs.LESS_THAN_INITIAL_SHARE,),
    )
    assert got == {"b-low": FAIR}


def test_preempt_workload_that_does_not_transfer_the_imbalance_even_if_high_priority() -> None:
    """Kueue case "preempt workload that doesn't transfer the imbalance, even if high priority"
    (strategies [LessThanOrEqualToFinalShare])."""
    got = victims(
        base_cqs(),
        [admitted("a1", "a", 3), admitted("b-low", "b", 5, priority=0), admitted("b-high", "b", 1, priority=1)],
        pending("a-incoming", "a", 1),
        strategies=(fs.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,),
    )
    assert got == {"b-high": FAIR}


def test_cq_with_higher_weight_can_preempt_more() -> None:
    """Kueue case "CQ with higher weight can preempt more"."""
    got = victims(
        abc({"a": "2"}),
        [*units("a", "a1", "a2", "a3"), *units("b", "b1", "b2", "b3", "b4", "b5", "b6")],
        pending("a-incoming", "a", 2),
    )
    assert got == {"b1": FAIR, "b2": FAIR}


def test_can_preempt_anything_borrowing_from_cq_with_zero_weight() -> None:
    """Kueue case "can preempt anything borrowing from CQ with 0 weight"."""
    got = victims(
        abc({"b": "0"}),
        [*units("a", "a1", "a2", "a3"), *units("b", "b1", "b2", "b3", "b4", "b5", "b6")],
        pending("a-incoming", "a", 3),
    )
    assert got == {"b1": FAIR, "b2": FAIR, "b3": FAIR}


def test_cannot_preempt_nominal_from_cq_with_zero_weight() -> None:
    """Kueue case "can't preempt nominal from CQ with 0 weight"."""
    got = victims(
        abc({"b": "0"}, names=("a", "b")),
        [*units("a", "a1", "a2", "a3"), *units("b", "b1", "b2", "b3")],
        pending("a-incoming", "a", 1),
    )
    assert got == {}


def test_cannot_preempt_nominal_from_cohort_with_zero_weight() -> None:
    """Kueue case "can't preempt nominal from Cohort with 0 weight"."""
    got = victims(
        [
            cluster_queue("left-cq", 0, cohort="root", reclaim="Any"),
            weighted(cluster_queue("right-cq", 0, cohort="right-cohort", reclaim="Any"), "0"),
        ],
        units("right-cq", "right-1"),
        pending("left-1", "left-cq", 1),
        cohorts=[weighted(cohort("right-cohort", "root", 1), "0")],
    )
    assert got == {}


def test_can_preempt_within_cluster_queue_when_no_cohort() -> None:
    """Kueue case "can preempt within cluster queue when no cohort"."""
    got = victims(
        [cluster_queue("a", 1, within="LowerPriority")],
        units("a", "a1"),
        pending("a-incoming", "a", 1, priority=1000),
    )
    assert got == {"a1": IN_CQ}


def test_hierarchical_preemption() -> None:
    """Kueue case "hierarchical preemption": a (weight 2) in LEFT (weight 2) preempts through the
    whole tree; e's weight 0.99 makes the choice between d and e deterministic."""
    cqs = [
        weighted(cluster_queue("a", 1, cohort="left", reclaim="Any"), "2"),
        cluster_queue("b", 1, cohort="left"),
        cluster_queue("c", 1, cohort="root"),
        cluster_queue("d", 1, cohort="right"),
        weighted(cluster_queue("e", 1, cohort="right"), "0.99"),
    ]
    cohorts = [cohort("root", None, 5), weighted(cohort("left", "root", 5), "2"), cohort("right", "root", 5)]
    workloads = [admitted(f"{q}{i}", q, 1, priority=i) for q in "bcde" for i in range(1, 6)]
    got = victims(cqs, workloads, pending("unit", "a", 5), cohorts=cohorts)
    assert got == {"b1": FAIR, "b2": FAIR, "c1": FAIR, "c2": FAIR, "e1": FAIR}


def test_borrowing_cq_in_non_borrowing_cohort_is_protected() -> None:
    """Kueue case "borrowing cq in non-borrowing cohort is protected"."""
    got = victims(
        [
            weighted(cluster_queue("a", 5, cohort="root", reclaim="Any", within="LowerPriority"), "10"),
            weighted(cluster_queue("b", None, cohort="right"), "0.1"),
        ],
        [*units("a", "a1", "a2", "a3", priority=-1), *units("b", "b1", priority=-1)],
        pending("unit", "a", 5),
        cohorts=[cohort("root"), weighted(cohort("right", "root", 1), "0.1")],
    )
    assert got == {"a1": IN_CQ, "a2": IN_CQ, "a3": IN_CQ}


def test_forced_to_preempt_within_clusterqueue_because_borrowing_workload_too_important() -> None:
    """Kueue case "forced to preempt within clusterqueue because borrowing workload too important"."""
    got = victims(
        [
            weighted(cluster_queue("a", 5, cohort="root", reclaim="LowerPriority", within="LowerPriority"), "10"),
            weighted(cluster_queue("b", None, cohort="right"), "0.1"),
        ],
        [*units("a", "a1", "a2", "a3", priority=-1), admitted("b1", "b", 4, priority=100)],
        pending("unit", "a", 4),
        cohorts=[cohort("root"), weighted(cohort("right", "root", 3), "0.1")],
    )
    assert got == {"a1": IN_CQ, "a2": IN_CQ, "a3": IN_CQ}


def test_deep_preemption() -> None:
    """Kueue case "deep preemption": the almost-LCAs A (weight 1.01) and B (0.99) decide."""
    cohorts = [
        cohort("root"),
        weighted(cohort("a", "root"), "1.01"),
        cohort("aa", "a"),
        cohort("aaa", "aa"),
        weighted(cohort("b", "root"), "0.99"),
        cohort("bb", "b"),
        cohort("bbb", "bb"),
        cohort("c", "root"),
        cohort("cc", "c"),
        cohort("ccc", "cc"),
        cohort("cccc", "ccc", 1),
    ]
    got = victims(
        [cluster_queue("a", 0, cohort="aaa", reclaim="Any"), cluster_queue("b", 0, cohort="bbb")],
        units("b", "b1"),
        pending("a1", "a", 1),
        cohorts=cohorts,
    )
    assert got == {"b1": FAIR}


def test_cq_with_zero_weight_can_reclaim_nominal_quota() -> None:
    """Kueue case "cq with zero weight can reclaim nominal quota"."""
    got = victims(
        [weighted(cluster_queue("a", 1, cohort="root", reclaim="Any"), "0.0"), cluster_queue("b", 0, cohort="root")],
        units("b", "b1"),
        pending("a1", "a", 1),
    )
    assert got == {"b1": RECLAIM}


def test_cohort_with_zero_weight_can_reclaim_nominal_quota() -> None:
    """Kueue case "cohort with zero weight can reclaim nominal quota"."""
    got = victims(
        [weighted(cluster_queue("a", 0, cohort="a", reclaim="Any"), "0.0"), cluster_queue("b", 0, cohort="root")],
        units("b", "b1"),
        pending("a1", "a", 1),
        cohorts=[weighted(cohort("a", "root", 1), "0.0")],
    )
    assert got == {"b1": FAIR}


def test_nominal_first_workload_fitting_within_nominal_can_preempt_despite_high_aggregate_drs() -> None:
    """Kueue case "nominal first: workload fitting within nominal can preempt despite high aggregate
    DRS" (FairSharingPreemptWithinNominal)."""
    a = with_fungibility(
        with_resource_groups(
            cluster_queue("a", None, cohort="all", reclaim="Any"),
            resource_group({"premium": {"cpu": 3}, "cheap": {"cpu": 0}}),
        ),
        when_can_borrow="MayStopSearch",
        when_can_preempt="MayStopSearch",
    )
    b = with_resource_groups(
        cluster_queue("b", None, cohort="all"), resource_group({"premium": {"cpu": 0}, "cheap": {"cpu": 6}})
    )
    workloads = [
        *units("a", "a-prem1", "a-prem2", flavor="premium"),
        *units("a", "a-cheap1", "a-cheap2", "a-cheap3", "a-cheap4", "a-cheap5", flavor="cheap"),
        *units("b", "b-prem1", flavor="premium"),
    ]
    got = victims([a, b], workloads, pending("a-incoming", "a", 1), flavors=("premium", "cheap"))
    assert got == {"b-prem1": RECLAIM}


def test_zero_weight_borrowing_preemptor_cannot_preempt_from_a_borrowing_cq_with_a_non_zero_weight() -> None:
    """Kueue case "zero weight borrowing preemptor cannot preempt from a borrowing CQ with a non-zero
    weight"."""
    got = victims(
        [weighted(cluster_queue("a", 1, cohort="all", reclaim="Any"), "0"), cluster_queue("b", 1, cohort="all")],
        [*units("a", "a1"), *units("b", "b1", "b2")],
        pending("a-incoming", "a", 1),
    )
    assert got == {}


@pytest.mark.parametrize("weight", ["0", "1"])
def test_borrowing_preemptor_preempts_from_a_borrowing_cq_of_the_same_weight(weight: str) -> None:
    """Kueue cases "zero weight borrowing preemptor can preempt from a borrowing CQ which also has
    zero weight" (0) and "non-zero weight borrowing preemptor preempts from a borrowing CQ" (1)."""
    got = victims(
        [
            weighted(cluster_queue("a", 1, cohort="all", reclaim="Any"), weight),
            weighted(cluster_queue("b", 0, cohort="all"), weight),
        ],
        units("b", "b1", "b2", "b3"),
        pending("a-incoming", "a", 2),
        cohorts=[cohort("all", None, 3)],
    )
    assert got == {"b1": FAIR}


def test_candidates_skipped_by_the_first_strategy_are_still_available_to_the_second() -> None:
    """Kueue case "candidates skipped by the first strategy are still available to the second
    strategy": A borrows on a zero weight, so x's candidates fail S2-a, and win S2-b once y1 is
    gone."""
    got = victims(
        [
            weighted(cluster_queue("p", 2, cohort="a", reclaim="Any"), "1"),
            weighted(cluster_queue("y", 2, cohort="a"), "1"),
            weighted(cluster_queue("x", 1, cohort="root"), "1"),
        ],
        [admitted("p1", "p", 2), admitted("y1", "y", 2), admitted("y2", "y", 2), *units("x", "x1", "x2")],
        pending("p-incoming", "p", 1),
        cohorts=[weighted(cohort("a", "root", 1), "0")],
    )
    assert got == {"y1": FAIR, "x1": FAIR}


@pytest.mark.parametrize("weight", ["0", "1"])
def test_fair_preemption_skips_unsatisfiable_tournament(weight: str) -> None:
    """Kueue's TestFairPreemptionSkipsUnsatisfiableTournament: whatever the preemptor's weight, its
    share is at or above b's, so nothing is preempted."""
    got = victims(
        [
            weighted(cluster_queue("a", 1, cohort="all", reclaim="Any"), weight),
            weighted(cluster_queue("b", 1, cohort="all"), "1"),
        ],
        [*units("a", "a1"), *units("b", "b1", "b2")],
        pending("a-incoming", "a", 1),
    )
    assert got == {}


# -- the reference's B20-B23, three ways -------------------------------------------------------------------


def three_queues(*workloads: WorkloadBuilder) -> list[Obj]:
    """The reference's fair-sharing setup: a, b, c (3 cpu each; withinClusterQueue LowerPriority,
    reclaimWithinCohort Any) in cohort `all`."""
    return scenario(abc(), *workloads)


def fair_message(reason: str, preemptor_cq: str, victim_cq: str) -> str:
    return (
        f"Preempted to accommodate a workload (UID: in, JobUID: UNKNOWN) due to {reason}; "
        f"preemptor path: /all/{preemptor_cq}; preemptee path: /all/{victim_cq}"
    )


B_CASES = {
    "B20": (
        three_queues(
            *units("a", "a1", "a2", "a3"),
            *units("b", "b1", "b2", "b3", "b4", "b5"),
            *units("c", "c1"),
            pending("in", "c"),
        ),
        {"b1": (RECLAIM, fair_message("reclamation within the cohort", "c", "b"))},
    ),
    "B21": (
        three_queues(
            *units("a", "a1", "a2", "a3"),
            *units("b", "b1", "b2", "b3", "b4", "b5"),
            *units("c", "c1"),
            pending("in", "a"),
        ),
        {"b1": (FAIR, fair_message("Fair Sharing within the cohort", "a", "b"))},
    ),
    "B22": (
        three_queues(
            *units("a", "a1", "a2", "a3"),
            *units("b", "b1", "b2", "b3"),
            *units("c", "c1", "c2", "c3"),
            pending("in", "c"),
        ),
        {},
    ),
    "B23": (
        three_queues(
            admitted("a-low", "a", 1, priority=-1),
            *units("a", "a2", "a3"),
            *units("b", "b1", "b2", "b3", "b4", "b5", "b6"),
            pending("in", "a", 2),
        ),
        {
            "a-low": (IN_CQ, fair_message("prioritization in the ClusterQueue", "a", "a")),
            "b1": (FAIR, fair_message("Fair Sharing within the cohort", "a", "b")),
        },
    ),
}


@pytest.mark.parametrize("name", sorted(B_CASES))
def test_reference_case_in_one_engine_cycle(name: str) -> None:
    objects, expected = B_CASES[name]
    result = one_cycle(objects, fair_sharing=ON)
    got = {
        p.victim.name: (p.target.reason, preemption_message(p.target, p.preemptor, p.preemptor_path, p.victim_path))
        for p in result.preempted
    }
    assert got == expected
    assert not result.admitted


@pytest.mark.parametrize("path", ["simulate", "cli"])
@pytest.mark.parametrize("name", sorted(B_CASES))
def test_reference_case_through_the_simulation(name: str, path: str) -> None:
    """The victims of cycle 1 carry Kueue's eviction status; the preemptor is admitted in cycle 2
    (or keeps waiting for quota when nothing may be preempted)."""
    objects, expected = B_CASES[name]
    outcome = (
        simulate(objects, fair_sharing=ON) if path == "simulate" else simulate_cli(objects, flags=["--fair-sharing"])
    )
    first = {a["workload"].split("/", 1)[1] for a in outcome.actions if a["action"] == "Preempted" and a["cycle"] == 1}
    assert first == set(expected)
    for victim, (reason, text) in expected.items():
        preempted = outcome.condition(victim, "Preempted")
        evicted = outcome.condition(victim, "Evicted")
        assert preempted is not None and evicted is not None
        assert (preempted["status"], preempted["reason"], preempted["message"]) == ("True", reason, text)
        assert (evicted["reason"], evicted["message"]) == ("Preempted", text)
    admissions = [a["cycle"] for a in outcome.actions_of("in") if a["action"] == "Admitted"]
    if expected:
        assert admissions == [2]
    else:
        assert admissions == []
        reserved = outcome.condition("in", "QuotaReserved")
        assert reserved is not None and (reserved["status"], reserved["reason"]) == ("False", "WaitingForQuota")


def test_fair_sharing_off_keeps_classic_preemption() -> None:
    """The same objects with fair sharing off: B21's preemptor borrows and has no borrowWithinCohort,
    so classic preemption finds nobody (and B20 reclaims by priority order from b, as before)."""
    objects, _ = B_CASES["B21"]
    assert one_cycle(objects).preempted == []
    objects, _ = B_CASES["B20"]
    assert {p.victim.name: p.target.reason for p in one_cycle(objects).preempted} == {"b1": RECLAIM}


def test_simulate_cli_with_fair_sharing_shows_the_fair_sharing_preemption() -> None:
    """`preemption-operator simulate --fair-sharing`: the InCohortFairSharing preemption (B21), with
    the strategies named too (Kueue's default list)."""
    objects, _ = B_CASES["B21"]
    flags = ["--fair-sharing-strategies", "LessThanOrEqualToFinalShare,LessThanInitialShare"]
    outcome = simulate_cli(objects, flags=flags)
    assert outcome.reasons["b1"] == FAIR
    assert outcome.preempted["b1"]["cycle"] == 1
    assert outcome.messages["b1"] == fair_message("Fair Sharing within the cohort", "a", "b")
    assert simulate_cli(objects).victims == []


# -- configurable preemption under fair sharing: the reference's A19-A22 -------------------------------------

CONFIG = "default-config"
TIER = "preemption-tier"
CONFIGURABLE = "ConfigurablePreemption"


def tier_lt(scope: str) -> Obj:
    return selector(scope, numericLabels=[{"key": TIER, "comparison": "LessThan"}])


def configured(*cqs: Obj, rules: Sequence[Obj]) -> tuple[list[Obj], list[Obj]]:
    """The ClusterQueues and the PreemptionConfig `default-config` with `rules`."""
    return list(cqs), [preemption_config(CONFIG, *rules)]


def configurable_victims(cqs: list[Obj], extra: list[Obj], *workloads: WorkloadBuilder) -> dict[str, str]:
    result = one_cycle(scenario(cqs, *workloads, extra=extra), fair_sharing=ON)
    assert not result.admitted
    return {p.victim.name: p.target.reason for p in result.preempted}


def test_a19_configurable_rule_preempts_when_classic_policies_are_never() -> None:
    """Reference A19: a's spec.preemption is Never, so fair sharing has no candidates; the rule's
    candidate in b is taken."""
    cqs, extra = configured(
        cluster_queue("a", 1, cohort="all", config=CONFIG),
        cluster_queue("b", 1, cohort="all"),
        rules=[rule("test-rule-one", selector("WithinParentCohort"))],
    )
    got = configurable_victims(cqs, extra, admitted("a1", "a"), admitted("b1", "b"), pending("in", "a"))
    assert got == {"b1": CONFIGURABLE}


def test_a20_fair_sharing_candidates_win_before_the_configured_rules() -> None:
    """Reference A20: a within nominal reclaims b1 (first in candidate order) before any rule."""
    cqs, extra = configured(
        cluster_queue("a", 1, cohort="all", reclaim="Any", config=CONFIG),
        cluster_queue("b", 1, cohort="all"),
        rules=[rule("test-rule-one", tier_lt("WithinParentCohort"))],
    )
    got = configurable_victims(
        cqs,
        extra,
        admitted("b1", "b"),
        admitted("b2", "b", labels={TIER: "1"}),
        pending("in", "a", labels={TIER: "5"}),
    )
    assert got == {"b1": RECLAIM}


def test_a21_fair_sharing_victim_and_the_rule_candidate_is_spared() -> None:
    """Reference A21: S2-a fails for b1, S2-b takes it; c1 (rule candidate, c not borrowing) is
    never needed."""
    cqs, extra = configured(
        cluster_queue("a", 3, cohort="all", reclaim="Any", config=CONFIG),
        cluster_queue("b", 3, cohort="all"),
        cluster_queue("c", 3, cohort="all"),
        rules=[rule("test-rule-one", tier_lt("WithinParentCohort"))],
    )
    got = configurable_victims(
        cqs,
        extra,
        admitted("b1", "b", 5),
        admitted("c1", "c", 3, labels={TIER: "1"}),
        pending("in", "a", 4, labels={TIER: "5"}),
    )
    assert got == {"b1": FAIR}


def test_a22_rule_candidate_as_last_resort_after_the_fair_sharing_ones() -> None:
    """Reference A22: x2 (InClusterQueue) is not enough; the rule then adds x1, which
    withinClusterQueue LowerPriority excluded (priority 500)."""
    cqs, extra = configured(
        cluster_queue("a", 2, cohort="all", within="LowerPriority", config=CONFIG),
        rules=[rule("test-rule-one", tier_lt("WithinClusterQueue"))],
    )
    got = configurable_victims(
        cqs,
        extra,
        admitted("x1", "a", priority=500, labels={TIER: "1"}),
        admitted("x2", "a", priority=10),
        pending("in", "a", 2, priority=100, labels={TIER: "5"}),
    )
    assert got == {"x1": CONFIGURABLE, "x2": IN_CQ}


# -- the search leaves the snapshot as it found it ---------------------------------------------------------


@pytest.mark.parametrize("name", sorted(B_CASES))
def test_search_leaves_the_snapshot_unchanged(name: str) -> None:
    """As Kueue's test checks ("Snapshot was modified"): every node's usage is the same after the
    search, whether it found victims or not, and its tracked borrowing still agrees with it."""
    objects, expected = B_CASES[name]
    snapshot = cache_of(objects, ON).snapshot(NOW)
    (incoming,) = [wl for wls in snapshot.pending.values() for wl in wls]
    cq = snapshot.cluster_queues[incoming.queue_name]
    root = cq.node.root()

    nodes = [root, *root.child_cohorts, *root.child_cluster_queues]
    before = [dict(n.usage) for n in nodes]
    search = find_targets(incoming, cq, assign_flavors(incoming, cq, snapshot.flavors, fair_sharing=True), snapshot)
    assert {t.workload.name for t in search.targets} == set(expected)
    assert [dict(n.usage) for n in nodes] == before
    for node in nodes:  # the incrementally kept numerators still match the usage
        if node.borrowed is not None:
            assert {r: v for r, v in node.borrowed.items() if v} == node.borrowed_from_scratch()


# -- TestMakeClusterQueueOrdering (fairsharing/ordering_test.go) ---------------------------------------------


def target_order(
    cqs: list[Obj],
    workloads: list[WorkloadBuilder],
    candidate_cqs: set[str],
    actions: Sequence[str] = (),
    cohorts: Sequence[Obj] = (),
) -> list[str]:
    """The ClusterQueues the ordering yields for preemptor ClusterQueue `preemptor`, popping a
    candidate each time (or dropping the queue, as `actions` say); no usage is simulated."""
    snapshot = cache_of(scenario(cqs, *workloads, cohorts=cohorts), ON).snapshot(NOW)
    preemptor = snapshot.cluster_queues["preemptor"]
    ordering = TargetOrdering(preemptor, lambda wl: candidate_key(wl, "preemptor", snapshot.now))
    for wl in sorted(snapshot.workloads.values(), key=lambda w: candidate_key(w, "preemptor", snapshot.now)):
        if wl.cluster_queue in candidate_cqs:
            ordering.by_queue.setdefault(wl.cluster_queue, deque()).append(wl)
    order: list[str] = []
    for index, target in enumerate(ordering):
        order.append(target.name)
        if index < len(actions) and actions[index] == "drop":
            ordering.drop(target)
        else:
            ordering.pop(target)
        assert len(order) <= 50, "the ordering does not progress"
    return order


def test_ordering_without_cohort_yields_the_preemptor() -> None:
    """Kueue cases "no cohort: preemptor CQ yielded for in-CQ preemption; repro for nil pointer
    panic issue" and "no cohort: DropQueue ends the iteration with candidates remaining"."""
    cqs = [cluster_queue("preemptor", 4)]
    assert target_order(cqs, [admitted("wl1", "preemptor")], {"preemptor"}) == ["preemptor"]
    two = [admitted("wl1", "preemptor"), admitted("wl2", "preemptor")]
    assert target_order(cqs, two, {"preemptor"}, ["drop"]) == ["preemptor"]


def test_ordering_prunes_a_non_borrowing_cq_even_with_candidates() -> None:
    """Kueue case "non-borrowing CQ is pruned even with candidates"."""
    cqs = [cluster_queue("preemptor", 4, cohort="all"), cluster_queue("target", 5, cohort="all")]
    assert target_order(cqs, [admitted("t1", "target", 2)], {"target"}) == []


def higher_and_lower(*extra: WorkloadBuilder) -> tuple[list[Obj], list[WorkloadBuilder]]:
    cqs = [
        cluster_queue("preemptor", 4, cohort="all"),
        cluster_queue("high", 2, cohort="all"),
        cluster_queue("low", 2, cohort="all"),
    ]
    return cqs, list(extra)


def test_ordering_higher_share_first_and_again_while_it_stays_highest() -> None:
    """Kueue cases "higher DRS CQ returned before lower DRS CQ", "CQ with highest DRS returned again
    while it still has candidates" and "drop queue prevents CQ from being returned again"."""
    cqs, wls = higher_and_lower(admitted("h1", "high", 5), admitted("l1", "low", 3))
    assert target_order(cqs, wls, {"high", "low"}) == ["high", "low"]
    cqs, wls = higher_and_lower(admitted("h1", "high", 3), admitted("h2", "high", 2), admitted("l1", "low", 3))
    assert target_order(cqs, wls, {"high", "low"}) == ["high", "high", "low"]
    assert target_order(cqs, wls, {"high", "low"}, ["drop", "pop"]) == ["high", "low"]


def test_ordering_visits_the_higher_share_subtree_first() -> None:
    """Kueue case "hierarchical cohorts: higher-DRS subtree visited first"."""
    cqs = [
        cluster_queue("preemptor", 4, cohort="root"),
        cluster_queue("left-cq", 2, cohort="left-cohort"),
        cluster_queue("right-cq", 2, cohort="right-cohort"),
    ]
    cohorts = [cohort("root"), cohort("left-cohort", "root"), cohort("right-cohort", "root")]
    wls = [admitted("lc1", "left-cq", 5), admitted("rc1", "right-cq", 3)]
    assert target_order(cqs, wls, {"left-cq", "right-cq"}, cohorts=cohorts) == ["left-cq", "right-cq"]


# -- Protections under fair sharing ------------------------------------------------------------------------


def test_an_opted_out_borrower_is_passed_over_when_others_suffice() -> None:
    """YuniKorn's soft opt-out holds for fair-sharing candidates too: `b1` comes first in
    candidate order (reserved most recently) but is deferred; three others are reclaimed."""
    b = [
        admitted(f"b{i}", "b", 1, at=NOW - seconds(10 * i), annotations={ALLOW: "false"} if i == 1 else {})
        for i in range(1, 7)
    ]
    objects = scenario(abc(), *b, *units("c", "c1", "c2", "c3"), pending("incoming", "a", 3))
    outcome = simulate(objects, fair_sharing=ON, max_cycles=1)
    assert outcome.reasons == {"b2": RECLAIM, "b3": RECLAIM, "b4": RECLAIM}
    recs = {r["workload"]: (r["outcome"], r["detail"]) for e in outcome.data["explanations"] for r in e["candidates"]}
    assert recs["default/b1"] == (
        "deferred",
        "opted out of preemption: used only if nothing else lets the preemptor fit",
    )


def test_an_opted_out_borrower_is_the_last_resort() -> None:
    """Reclaiming c's two borrowed units is not enough and b's only workload opted out: the
    second pass takes it, and the fill-back then gives c's back."""
    objects = scenario(
        abc(),
        admitted("b-out", "b", 4, annotations={ALLOW: "false"}),
        *units("c", "c1", "c2", "c3", "c4", "c5"),
        pending("incoming", "a", 3),
    )
    outcome = simulate(objects, fair_sharing=ON, max_cycles=1)
    assert outcome.reasons == {"b-out": RECLAIM}
    assert outcome.messages["b-out"].endswith(LAST_RESORT_SUFFIX)


def test_a_protected_candidate_the_search_never_reaches_is_listed_by_explain_only() -> None:
    """Protections are asked of the candidates the search reaches (as the classic stream does):
    the operator's search stops once three victims suffice, explain's lists the tolerated one too."""
    b = [admitted(f"b{i}", "b", 1, at=NOW - seconds(10 * i)) for i in range(1, 6)]
    b.append(admitted("b6", "b", 1, at=NOW - seconds(60), priority_class="guarded"))
    guarded = workload_priority_class("guarded", 0, annotations=toleration(10, 3600))
    objects = scenario(abc(), *b, *units("c", "c1", "c2", "c3"), pending("incoming", "a", 3), extra=[guarded])
    snapshot = cache_of(objects, ON).snapshot(NOW)
    (incoming,) = [wl for wls in snapshot.pending.values() for wl in wls]
    cq = snapshot.cluster_queues["a"]

    def search(complete: bool) -> tuple[set[str], dict[str, str]]:
        assignment = assign_flavors(incoming, cq, snapshot.flavors, fair_sharing=True)
        found = find_targets(incoming, cq, assignment, snapshot, complete=complete)
        return {t.workload.name for t in found.targets}, {r.workload: r.outcome for r in found.records}

    victims_fast, records_fast = search(complete=False)
    victims_all, records_all = search(complete=True)
    assert victims_fast == victims_all == {"b1", "b2", "b3"}
    assert "default/b6" not in records_fast
    assert records_all["default/b6"] == "excluded"
    assert records_all["default/b4"] == records_all["default/b5"] == "spared"


def test_a_tolerated_borrower_wakes_the_preemptor_when_its_window_ends() -> None:
    """b's only workload is protected by its class's toleration for an hour after it started:
    no victims now, and the cycle asks to run again when the window closes."""
    started = NOW - seconds(10)
    guarded = workload_priority_class("guarded", 0, annotations=toleration(10, 3600))
    objects = scenario(
        abc(),
        admitted("b1", "b", 4, at=started, priority_class="guarded"),
        *units("c", "c1", "c2", "c3"),
        pending("incoming", "a", 3),
        extra=[guarded],
    )
    result = one_cycle(objects, fair_sharing=ON)
    assert not result.preempted and not result.admitted
    assert result.retry_at == started + seconds(3600)
