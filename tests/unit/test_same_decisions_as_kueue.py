"""The engine decides as Kueue's own scheduler does: both run over the same states, and the same
workloads are admitted (in the same ClusterQueues) and preempted (for the same preemptors).

Kueue's side is its v0.19.2 `pkg/scheduler` itself, built from the Go module with a driver of ours
(preemption_operator.testing.kueue_replay), with PrioritizePreemptorWorkloads on as the engine
has it; one cycle, and eight consecutive cycles with nothing answered in between (the engine's
rounds). The states are generated from fixed seeds, so every run checks the same ones. Three
families: the shape of Kueue's scheduler-perf baseline (one cohort of ClusterQueues of 20 cpu,
borrowing limit 100, reclaimWithinCohort Any, withinClusterQueue LowerPriority; workloads of its
small, medium and large classes); the same cohort with the quotas, preemption policies and
queueing strategies varied, some admitted workloads already evicted; and that with fair sharing
on and the ClusterQueues' weights varied. Workloads are created (and admitted) at distinct times:
Kueue orders heads with equal timestamps arbitrarily (map iteration and an unstable sort), the
engine by name.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from builders import (
    T0,
    Obj,
    WorkloadBuilder,
    as_dict,
    cluster_queue,
    local_queue,
    namespace,
    pending,
    resource_flavor,
    rfc3339,
)
from preemption_operator.testing import go_modules, kueue_replay

DRIVER = Path(__file__).resolve().parents[1] / "kueue_replay" / "replay_test.go"
CLASSES = (("small", 1, 50), ("medium", 5, 100), ("large", 20, 200))
"""Kueue's baseline classes: name, cpu, priority."""

State = tuple[datetime, list[Obj]]


@pytest.fixture(scope="module")
def replay_binary() -> Path:
    try:
        return kueue_replay.build(DRIVER)
    except go_modules.ModuleUnavailable as exc:
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail(f"Kueue's scheduler could not be built for the replay: {exc}", pytrace=False)
        pytest.skip(str(exc))


def _state(rnd: random.Random, queue: Callable[[str], Obj], used_cap: int, evicted_share: float) -> State:
    n = rnd.randint(2, 6)
    names = [f"cq-{i}" for i in range(n)]
    objects: list[Obj] = [namespace(), resource_flavor("default")]
    for name in names:
        objects += [queue(name), local_queue(f"lq-{name}", name)]
    at = T0
    used = dict.fromkeys(names, 0)
    for i in range(rnd.randint(0, 30)):
        kind, cpu, priority = rnd.choice(CLASSES)
        name = rnd.choice(names)
        if sum(used.values()) + cpu > used_cap * n or used[name] + cpu > 120:
            continue  # the states a scheduler could have reached: the cohort's quota holds them
        used[name] += cpu
        at += timedelta(seconds=rnd.randint(1, 3))
        wl = WorkloadBuilder(
            f"{kind}-a{i}", queue=f"lq-{name}", cpu=cpu, priority=priority, created=at - timedelta(seconds=1)
        ).admitted(name, at=at)
        if rnd.random() < evicted_share:
            wl.evicted(at=at)
        objects.append(as_dict(wl))
    for i in range(rnd.randint(1, 12)):
        kind, cpu, priority = rnd.choice(CLASSES)
        at += timedelta(seconds=rnd.randint(1, 2))
        objects.append(as_dict(pending(f"{kind}-p{i}", f"lq-{rnd.choice(names)}", cpu, priority=priority, created=at)))
    return at + timedelta(seconds=10), objects


def baseline_states(count: int) -> list[State]:
    rnd = random.Random(20261205)

    def queue(name: str) -> Obj:
        return cluster_queue(
            name,
            20,
            cohort="cohort",
            borrowing_limit=100,
            within="LowerPriority",
            reclaim="Any",
            queueing_strategy="BestEffortFIFO",
        )

    return [_state(rnd, queue, 20, 0.0) for _ in range(count)]


def varied_states(count: int) -> list[State]:
    rnd = random.Random(1205)

    def queue(name: str) -> Obj:
        return cluster_queue(
            name,
            rnd.choice([10, 20, 30]),
            cohort="cohort",
            borrowing_limit=rnd.choice([0, 10, 100]),
            within=rnd.choice(["Never", "LowerPriority", "LowerOrNewerEqualPriority"]),
            reclaim=rnd.choice(["Never", "LowerPriority", "Any"]),
            borrow_within=rnd.choice([None, "LowerPriority"]),
            queueing_strategy=rnd.choice(["BestEffortFIFO", "StrictFIFO"]),
        )

    return [_state(rnd, queue, 15, 0.1) for _ in range(count)]


def fair_states(count: int) -> list[State]:
    """The varied cohort with fair sharing's weights varied too."""
    rnd = random.Random(512)

    def queue(name: str) -> Obj:
        cq = cluster_queue(
            name,
            rnd.choice([10, 20, 30]),
            cohort="cohort",
            borrowing_limit=rnd.choice([10, 100]),
            within=rnd.choice(["Never", "LowerPriority"]),
            reclaim=rnd.choice(["Never", "LowerPriority", "Any"]),
            queueing_strategy=rnd.choice(["BestEffortFIFO", "StrictFIFO"]),
        )
        cq["spec"]["fairSharing"] = {"weight": rnd.choice(["1", "2", "500m"])}
        return cq

    return [_state(rnd, queue, 15, 0.1) for _ in range(count)]


def ours(
    now: datetime, objects: Sequence[Obj], cycles: int = 1, fair: bool = False, prioritize: bool = True
) -> dict[str, dict[str, str]]:
    return kueue_replay.engine_decisions(now, objects, cycles, fair_sharing=fair, prioritize_preemptors=prioritize)


def differences(
    binary: Path, states: list[State], cycles: int, fair: bool = False, prioritize: bool = True
) -> list[str]:
    given = [(rfc3339(now), objects) for now, objects in states]
    theirs = kueue_replay.replay(binary, given, cycles, fair_sharing=fair, prioritize_preemptors=prioritize)
    assert len(theirs) == len(states)
    found = []
    for number, ((now, objects), kueue) in enumerate(zip(states, theirs, strict=True)):
        assert not kueue.get("error"), f"state {number}: Kueue's replay refused it: {kueue['error']}"
        mine = ours(now, objects, cycles, fair, prioritize)
        if mine != {"admitted": kueue["admitted"], "preempted": kueue["preempted"]}:
            found.append(f"state {number}: ours {mine}; Kueue {kueue}")
    return found


@pytest.mark.parametrize("cycles", [1, 8])
def test_the_baseline_shape_decides_as_kueue(replay_binary: Path, cycles: int) -> None:
    assert differences(replay_binary, baseline_states(300), cycles) == []


@pytest.mark.parametrize("cycles", [1, 8])
def test_varied_policies_decide_as_kueue(replay_binary: Path, cycles: int) -> None:
    assert differences(replay_binary, varied_states(300), cycles) == []


@pytest.mark.parametrize("cycles", [1, 8])
def test_fair_sharing_decides_as_kueue(replay_binary: Path, cycles: int) -> None:
    assert differences(replay_binary, fair_states(300), cycles, fair=True) == []


@pytest.mark.parametrize("family", ["baseline", "varied", "fair"])
def test_without_prioritized_preemptors_the_engine_decides_as_kueue_by_default(
    replay_binary: Path, family: str
) -> None:
    """PrioritizePreemptorWorkloads off, Kueue v0.19.2's default (`--feature-gates
    PrioritizePreemptorWorkloads=false` here): it matters from the second cycle on, once a
    preemptor waits for its victims."""
    states = {"baseline": baseline_states, "varied": varied_states, "fair": fair_states}[family](300)
    assert differences(replay_binary, states, 8, fair=family == "fair", prioritize=False) == []


def test_the_gate_changes_decisions_on_both_sides(replay_binary: Path) -> None:
    """The states above can tell the gate's two settings apart, in Kueue and in the engine alike,
    on the same states (else the test without it would pass for an engine that ignores it)."""
    changed: dict[str, list[list[int]]] = {}
    for family, states, fair in (("varied", varied_states(300), False), ("fair", fair_states(300), True)):
        given = [(rfc3339(now), objects) for now, objects in states]
        kueue = [
            kueue_replay.replay(replay_binary, given, 8, fair_sharing=fair, prioritize_preemptors=p)
            for p in (True, False)
        ]
        engine = [[ours(now, objects, 8, fair, p) for now, objects in states] for p in (True, False)]
        changed[family] = [[i for i in range(len(states)) if side[0][i] != side[1][i]] for side in (kueue, engine)]
    assert sum(len(kueue) for kueue, _ in changed.values()) >= 5
    assert all(kueue == engine for kueue, engine in changed.values()), changed


def test_the_replay_reports_what_kueue_admits(replay_binary: Path) -> None:
    """The replay reads Kueue's decisions back (an empty answer would match an engine that
    decides nothing): a lone workload that fits is admitted."""
    objects = [
        namespace(),
        resource_flavor("default"),
        cluster_queue("cq-0", 20, cohort="cohort"),
        local_queue("lq-cq-0", "cq-0"),
        as_dict(pending("small-p0", "lq-cq-0", 1, priority=50, created=T0)),
    ]
    (kueue,) = kueue_replay.replay(replay_binary, [(rfc3339(T0 + timedelta(seconds=1)), objects)])
    assert kueue["admitted"] == {"default/small-p0": "cq-0"}
    assert kueue["preempted"] == {}


def test_the_states_exercise_admission_and_preemption() -> None:
    """Most states decide something, and many preempt (in later cycles more than in the first)."""
    states = baseline_states(300)
    first = [ours(now, objects) for now, objects in states]
    later = [ours(now, objects, 8) for now, objects in states]
    assert sum(bool(d["admitted"]) for d in first) > 50
    assert sum(bool(d["preempted"]) for d in first) > 50
    assert sum(len(d["preempted"]) for d in later) > sum(len(d["preempted"]) for d in first)
