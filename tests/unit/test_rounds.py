"""Rounds: the operator decides up to 64 of Kueue's consecutive cycles against one snapshot
before it writes their decisions in one batch (`Scheduler(rounds=N)`). That is only sound if the
N rounds decide exactly what N consecutive single-round cycles decide when nothing else happens
in between: every admission, every preemption and the last pending reason of every workload.

"Nothing else happens" is the operator's world between two cycles: each decision is assumed in
the cache (an admission holds its quota and may be preempted like any admitted workload, an
eviction holds the victim's quota until it is written) and no write has come back yet. The
property compares one pass of N rounds with N cycles of one round each, in that world, over
random cohort trees, policies, queueing strategies, flavors, priorities and PreemptionConfig
rules, with and without fair sharing.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from builders import (
    T0,
    Obj,
    WorkloadBuilder,
    cache_of,
    cluster_queue,
    cohort,
    preemption_config,
    quota,
    rule,
    scenario,
    selector,
)
from preemption_operator.engine import CycleResult, Engine, QueueState
from preemption_operator.engine.cache import Cache
from preemption_operator.engine.changes import status_changes
from preemption_operator.engine.fair_sharing import OFF, FairSharing

NOW = T0 + timedelta(hours=2)
ROUNDS = 6
FLAVORS = ("default", "spot")

Decisions = tuple[list[tuple[str, str, str]], list[tuple[str, str, str]], dict[str, tuple[str, str]]]
"""(admissions as (workload, ClusterQueue, flavors), preemptions as (victim, preemptor, reason),
the last pending (reason, message) of each workload)."""


@st.composite
def setups(draw: st.DrawFn) -> list[Obj]:
    nested = draw(st.booleans())
    cohorts = [cohort("root"), *([cohort("left", "root")] if nested else [])]
    two_flavors = draw(st.booleans())
    names = ["a", "b", *draw(st.lists(st.sampled_from(["c", "d"]), max_size=2, unique=True))]
    queues: list[Obj] = []
    workloads: list[WorkloadBuilder] = []
    for name in names:
        nominal = draw(st.integers(1, 4))
        limit = draw(st.sampled_from([None, 0, 1, 4]))
        cpu: Any = (
            {f: quota(nominal if f == "default" else draw(st.integers(0, 2)), limit) for f in FLAVORS}
            if two_flavors
            else quota(nominal, limit)
        )
        borrow = draw(st.sampled_from([None, None, "LowerPriority"]))
        reclaim = draw(st.sampled_from(["Never", "LowerPriority", "Any"]))
        queues.append(
            cluster_queue(
                name,
                cpu,
                cohort=draw(st.sampled_from(["root", "root", "left" if nested else "root", None])),
                within=draw(st.sampled_from(["Never", "LowerPriority", "LowerOrNewerEqualPriority"])),
                reclaim=reclaim,
                borrow_within=borrow if reclaim != "Never" else None,
                queueing_strategy=draw(st.sampled_from(["BestEffortFIFO", "StrictFIFO"])),
                config="cfg" if name == "a" and draw(st.booleans()) else None,
            )
        )
        for i in range(draw(st.integers(0, 3))):
            wl = WorkloadBuilder(
                f"{name}-run-{i}",
                cpu=draw(st.integers(1, 2)),
                priority=draw(st.sampled_from([10, 50, 100])),
                created=T0 + timedelta(minutes=draw(st.integers(0, 30))),
            )
            flavor = draw(st.sampled_from(FLAVORS)) if two_flavors else "default"
            workloads.append(wl.admitted(name, at=T0 + timedelta(minutes=draw(st.integers(0, 60))), flavor=flavor))
        for i in range(draw(st.integers(0, 4))):
            workloads.append(
                WorkloadBuilder(
                    f"{name}-new-{i}",
                    queue=name,
                    cpu=draw(st.integers(1, 3)),
                    priority=draw(st.sampled_from([10, 50, 100, 200])),
                    created=T0 + timedelta(minutes=draw(st.integers(0, 90))),
                )
            )
    config = preemption_config(
        "cfg",
        rule(
            "hero",
            selector(
                draw(st.sampled_from(["WithinCohortTree", "AnyClusterQueue"])),
                priority={"mode": "Base", "comparison": "LessThan"},
            ),
            trigger=draw(st.sampled_from(["Always", "InsufficientQuota"])),
        ),
    )
    return scenario(
        queues,
        *workloads,
        cohorts=cohorts,
        extra=[config],
        flavors=FLAVORS if two_flavors else ("default",),
    )


def _decisions(results: list[CycleResult]) -> Decisions:
    admitted = sorted(
        (a.workload.key, a.cluster_queue, repr([ps["flavors"] for ps in a.pod_sets]))
        for r in results
        for a in r.admitted
    )
    preempted = sorted((p.victim.key, p.preemptor.key, p.target.reason) for r in results for p in r.preempted)
    pending: dict[str, tuple[str, str]] = {}
    for r in results:
        for p in r.pending:
            pending[p.workload.key] = (p.reason, p.message)
        for a in r.admitted:
            pending.pop(a.workload.key, None)
    return admitted, preempted, pending


def _assume(cache: Cache, result: CycleResult) -> None:
    """What the operator's loop does with a cycle's decisions before any write answers."""
    cache.assume(status_changes(result, NOW))


def _consecutive(objects: list[Obj], fair_sharing: FairSharing) -> Decisions:
    cache, state, engine = cache_of(objects, fair_sharing), QueueState(), Engine(rounds=1)
    results = []
    for _ in range(ROUNDS):
        result = engine.cycle(cache.snapshot(NOW), state)
        results.append(result)
        _assume(cache, result)
    return _decisions(results)


def _rounds(objects: list[Obj], fair_sharing: FairSharing) -> Decisions:
    snapshot = cache_of(objects, fair_sharing).snapshot(NOW)
    return _decisions([Engine(rounds=ROUNDS).cycle(snapshot, QueueState())])


def _check(objects: list[Obj], fair_sharing: FairSharing) -> None:
    decided = _rounds(objects, fair_sharing)
    # What the examples exercise (pytest --hypothesis-show-statistics).
    event("preemptions" if decided[1] else "no preemption")
    event(f"admissions: {min(len(decided[0]), 4)}{'+' if len(decided[0]) >= 4 else ''}")
    assert decided == _consecutive(objects, fair_sharing)


@pytest.mark.slow
@given(setups())
def test_rounds_decide_what_consecutive_cycles_decide(objects: list[Obj]) -> None:
    _check(objects, OFF)


@pytest.mark.slow
@given(setups())
def test_rounds_decide_what_consecutive_cycles_decide_with_fair_sharing(objects: list[Obj]) -> None:
    _check(objects, FairSharing(enabled=True))


def test_a_workload_admitted_in_one_round_is_a_candidate_in_the_next() -> None:
    """As in Kueue's next cycle, where the admission is assumed in the cache. Round 1 admits `b1`
    within b's quota and `x`, borrowing b's other 2 cpu; round 2 nominates b's next head `y`,
    which reclaims that quota from `x`."""
    objects = scenario(
        [cluster_queue("a", 0, cohort="root"), cluster_queue("b", 4, cohort="root", reclaim="Any")],
        WorkloadBuilder("x", queue="a", cpu=2, priority=10),
        WorkloadBuilder("b1", queue="b", cpu=2, priority=10),
        WorkloadBuilder("y", queue="b", cpu=2, priority=10, created=T0 + timedelta(minutes=1)),
        cohorts=[cohort("root")],
    )
    admitted, preempted, _ = _rounds(objects, OFF)
    assert [a[0] for a in admitted] == ["default/b1", "default/x"]
    assert preempted == [("default/x", "default/y", "InCohortReclamation")]
    assert _rounds(objects, OFF) == _consecutive(objects, OFF)
