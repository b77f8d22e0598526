"""Issue #12, item 9: Workload `spec.preemptionGates`.

Kueue (v0.19/v0.20, pkg/scheduler/scheduler.go processEntry and requeueAndUpdate;
pkg/workload/workload.go HasClosedPreemptionGate, SetBlockedOnPreemptionGatesCondition,
SetQuotaReservation; pkg/workload/evict/evict.go prepareForEviction): a gate listed in the spec
is closed until status.preemptionGates says Open. A workload that needs preemption, has victims
and a closed gate preempts nobody: QuotaReserved=False `AdmissionGated` "Workload requires
preemption, but it's gated", and BlockedOnPreemptionGates=True `PreemptionGated` with the same
message. Admission turns that condition False ("Previously: ..."); an eviction turns it False with
the eviction's reason and closes every gate again. (Kueue honours gates only with its alpha
ConcurrentAdmission or MultiKueueOrchestratedPreemption gates; this engine always does.)

Cases from Kueue's TestSchedule run through one engine cycle, `simulate` and the CLI; the Kueue
test used `example.com/gpu` in flavor `model-a`, cpu stands in for it here.
"""

from __future__ import annotations

import json
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from builders import (
    NOW,
    T0,
    Obj,
    Outcome,
    WorkloadBuilder,
    admitted,
    as_dict,
    cache_of,
    cluster_queue,
    one_cycle,
    pending,
    quota,
    rfc3339,
    scenario,
    simulate,
    simulate_cli,
)
from preemption_operator.api.objects import ObjectError, parse_object
from preemption_operator.cli import cli
from preemption_operator.engine import changes
from preemption_operator.engine import workload_status as wl_status
from preemption_operator.engine.scheduler import ADMISSION_GATED, GATED_MESSAGE, QueueState, Scheduler

GATE = "gate"
RUNS = [simulate, simulate_cli]
RUN_IDS = ["simulate", "cli"]


def gated(builder: WorkloadBuilder, *gates: str, positions: dict[str, str] | None = None) -> WorkloadBuilder:
    """spec.preemptionGates; `positions` writes status.preemptionGates (name -> Open/Closed)."""
    builder.body["spec"]["preemptionGates"] = [{"name": g} for g in gates]
    if positions:
        builder.body.setdefault("status", {})["preemptionGates"] = [
            {"name": name, "position": position, "lastTransitionTime": rfc3339(T0)}
            for name, position in positions.items()
        ]
    return builder


def eng_beta(*workloads: WorkloadBuilder) -> list[Obj]:
    """Kueue's TestSchedule ClusterQueue eng-beta, reduced to what matters: 20 of flavor model-a,
    withinClusterQueue LowerPriority."""
    return scenario(
        [cluster_queue("eng-beta", {"model-a": quota(20)}, within="LowerPriority")],
        *workloads,
        flavors=("model-a",),
    )


def low_priority() -> WorkloadBuilder:
    return admitted("low-priority", "eng-beta", 20, flavor="model-a", priority=-1)


def preemptor(*gates: str, **kwargs: Any) -> WorkloadBuilder:
    return gated(pending("preemptor", "eng-beta", 20, **kwargs), *gates)


def blocked(outcome: Outcome, name: str = "preemptor") -> Obj | None:
    return outcome.condition(name, wl_status.BLOCKED_ON_GATES)


# -- Kueue TestSchedule cases ------------------------------------------------------------------------


def test_block_preemptions_engine() -> None:
    # Kueue TestSchedule: "block preemptions and signal `BlockedOnPreemptionGates` when a preemption
    # gate is present".
    result = one_cycle(eng_beta(preemptor(GATE), low_priority()))
    assert result.preempted == []
    [entry] = [p for p in result.pending if p.workload.name == "preemptor"]
    assert (entry.reason, entry.message, entry.blocked_on_gates) == (ADMISSION_GATED, GATED_MESSAGE, True)
    [explanation] = result.explanations
    assert explanation.notes == [f"preemption gated: closed gate(s) {GATE}; waits until they open"]


@pytest.mark.parametrize("run", RUNS, ids=RUN_IDS)
def test_block_preemptions_and_signal(run: Any) -> None:
    # Kueue TestSchedule: "block preemptions and signal `BlockedOnPreemptionGates` when a preemption
    # gate is present".
    out = run(eng_beta(preemptor(GATE), low_priority()))
    assert out.victims == []
    assert out.condition("low-priority", "Admitted")["status"] == "True"  # type: ignore[index]
    reserved = out.condition("preemptor", "QuotaReserved")
    assert reserved is not None
    assert (reserved["status"], reserved["reason"], reserved["message"]) == ("False", "AdmissionGated", GATED_MESSAGE)
    signal = blocked(out)
    assert signal is not None
    assert (signal["status"], signal["reason"], signal["message"]) == ("True", "PreemptionGated", GATED_MESSAGE)
    assert signal["lastTransitionTime"] == rfc3339(NOW)
    admitted_condition = out.condition("preemptor", "Admitted")
    assert admitted_condition is not None
    assert (admitted_condition["status"], admitted_condition["reason"]) == ("False", "NoReservation")
    # Written once: later cycles change nothing.
    assert [a["action"] for a in out.actions_of("preemptor")] == ["Pending"]


@pytest.mark.parametrize("run", RUNS, ids=RUN_IDS)
def test_no_signal_when_it_fits_without_preemption(run: Any) -> None:
    # Kueue TestSchedule: "do not signal `BlockedOnPreemptionGates` when a preemption gate is present,
    # but the workload fits without preemption".
    assert [a.workload.name for a in one_cycle(eng_beta(preemptor(GATE))).admitted] == ["preemptor"]
    out = run(eng_beta(preemptor(GATE)))
    assert out.condition("preemptor", "Admitted")["status"] == "True"  # type: ignore[index]
    assert blocked(out) is None


@pytest.mark.parametrize("run", RUNS, ids=RUN_IDS)
def test_no_signal_when_nothing_to_preempt(run: Any) -> None:
    # Kueue TestSchedule: "do not signal `BlockedOnPreemptionGates` when a preemption gate is present,
    # but the workload had nothing to preempt".
    high = admitted("high-priority", "eng-beta", 20, flavor="model-a", priority=1)
    objects = eng_beta(preemptor(GATE), high)
    result = one_cycle(objects)
    [entry] = result.pending
    assert (entry.reason, entry.blocked_on_gates) == ("WaitingForQuota", False)
    out = run(objects)
    reserved = out.condition("preemptor", "QuotaReserved")
    assert reserved is not None
    assert (reserved["reason"], reserved["message"]) == (
        "WaitingForQuota",
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor model-a, 20 more needed",
    )
    assert blocked(out) is None


# -- gate positions -------------------------------------------------------------------------------------


@pytest.mark.parametrize("run", RUNS, ids=RUN_IDS)
def test_an_open_gate_lets_it_preempt(run: Any) -> None:
    # HasClosedPreemptionGate: a gate whose status says Open does not block.
    objects = eng_beta(gated(pending("preemptor", "eng-beta", 20), GATE, positions={GATE: "Open"}), low_priority())
    assert [p.victim.name for p in one_cycle(objects).preempted] == ["low-priority"]
    out = run(objects)
    assert out.victims == ["low-priority"]
    assert out.condition("preemptor", "Admitted")["status"] == "True"  # type: ignore[index]
    assert blocked(out) is None


@pytest.mark.parametrize("positions", [None, {GATE: "Closed"}, {GATE: "Open", "other": "Open"}], ids=str)
def test_a_gate_closed_or_missing_from_the_status_blocks(positions: dict[str, str] | None) -> None:
    # HasClosedPreemptionGate: only the spec's gates count; one without a state is closed. The
    # last case opens a gate the spec does not list, and leaves the spec's gate `second` closed.
    gates = (GATE, "second") if positions and "other" in positions else (GATE,)
    wl = gated(pending("preemptor", "eng-beta", 20), *gates, positions=positions)
    result = one_cycle(eng_beta(wl, low_priority()))
    assert result.preempted == []
    assert [p.reason for p in result.pending] == [ADMISSION_GATED]


def test_opening_the_gate_unparks_the_workload() -> None:
    """Kueue requeues an inadmissible workload when its gates change (cluster_queue.go PushOrUpdate);
    here the parked workload gets another look as soon as its gate is open, with no other change."""
    state = QueueState()
    first = Scheduler().cycle(cache_of(eng_beta(preemptor(GATE), low_priority())).snapshot(NOW), state)
    assert [p.reason for p in first.pending] == [ADMISSION_GATED]
    assert state.inadmissible == {"eng-beta": {"default/preemptor"}}
    still = Scheduler().cycle(cache_of(eng_beta(preemptor(GATE), low_priority())).snapshot(NOW), state)
    assert still.pending == [] and still.preempted == []  # parked, as Kueue keeps it inadmissible
    opened = gated(pending("preemptor", "eng-beta", 20), GATE, positions={GATE: "Open"})
    later = Scheduler().cycle(cache_of(eng_beta(opened, low_priority())).snapshot(NOW), state)
    assert [p.victim.name for p in later.preempted] == ["low-priority"]
    assert not state.gated


def test_admission_ends_the_signal_and_eviction_closes_the_gates() -> None:
    # SetQuotaReservation resets BlockedOnPreemptionGates ("Previously: ..."); prepareForEviction
    # closes every gate of the evicted workload.
    objects = eng_beta(preemptor(GATE), low_priority())
    first = simulate(objects)
    reopened = first.objects_after(objects)
    for obj in reopened:
        if obj["metadata"]["name"] == "preemptor":
            obj["status"]["preemptionGates"] = [{"name": GATE, "position": "Open", "lastTransitionTime": rfc3339(NOW)}]
    later = NOW + timedelta(minutes=5)
    second = simulate(reopened, now=later)
    assert second.victims == ["low-priority"]
    signal = second.condition("preemptor", wl_status.BLOCKED_ON_GATES)
    assert signal is not None
    assert (signal["status"], signal["reason"], signal["message"]) == (
        "False",
        "QuotaReserved",
        f"Previously: {GATED_MESSAGE}",
    )
    # The preemptor, evicted in turn by a higher-priority workload, gets its gate closed again.
    after = second.objects_after(reopened)
    higher = pending("higher", "eng-beta", 20, priority=5)
    third = simulate([*after, as_dict(higher)], now=later + timedelta(minutes=5), max_cycles=1)
    assert third.victims == ["preemptor"]
    assert third.statuses["preemptor"]["preemptionGates"] == [
        {"name": GATE, "position": "Closed", "lastTransitionTime": rfc3339(later + timedelta(minutes=5))}
    ]


def test_eviction_ends_a_blocked_signal() -> None:
    # evict.go unsetBlockedOnPreemptionGatesCondition: False, with the eviction's reason and message.
    status = {
        "conditions": [
            {
                "type": wl_status.BLOCKED_ON_GATES,
                "status": "True",
                "reason": "PreemptionGated",
                "message": GATED_MESSAGE,
                "lastTransitionTime": rfc3339(T0),
            }
        ]
    }
    objects = scenario([cluster_queue("cq", 4)], admitted("off", "cq", 1))
    objects[-1]["spec"]["active"] = False
    objects[-1]["status"]["conditions"] += status["conditions"]
    out = simulate(objects, max_cycles=1)
    signal = out.condition("off", wl_status.BLOCKED_ON_GATES)
    assert signal is not None
    assert (signal["status"], signal["reason"], signal["message"]) == (
        "False",
        "Deactivated",
        "The workload is deactivated",
    )


def test_the_gated_status_change_posts_kueues_warning() -> None:
    # requeueAndUpdate records a Warning Event with the condition's reason and the message.
    result = one_cycle(eng_beta(preemptor(GATE), low_priority()))
    [change] = [c for c in changes.status_changes(result, NOW) if c.action == changes.PENDING]
    assert [(e.type, e.reason, e.message) for e in change.events] == [("Warning", ADMISSION_GATED, GATED_MESSAGE)]
    # Written once: the same decision on an object that already says so changes nothing.
    status = change.compute(preemptor(GATE).obj())
    assert status is not None
    assert change.compute({**preemptor(GATE).obj(), "status": status}) is None


def test_explain_says_the_preemptor_is_gated() -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "objects.yaml"
        path.write_text(yaml.safe_dump_all(eng_beta(preemptor(GATE), low_priority()), sort_keys=False))
        result = CliRunner().invoke(
            cli, ["explain", str(path), "--workload", "default/preemptor", "--now", rfc3339(NOW)]
        )
    assert result.exit_code == 0, result.output
    assert f"note: preemption gated: closed gate(s) {GATE}; waits until they open" in result.output
    assert f"BlockedOnPreemptionGates True   PreemptionGated: {GATED_MESSAGE}" in result.output
    assert "default/low-priority: prioritization in the ClusterQueue; not preempted: the preemptor is gated" in (
        result.output
    )


# -- the API --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda w: w["spec"].update(preemptionGates=[{"name": ""}]), "spec.preemptionGates[0].name"),
        (lambda w: w["spec"].update(preemptionGates=[{"name": "g"}, {"name": "g"}]), "duplicate entry (name=g)"),
        (lambda w: w["spec"].update(preemptionGates=[{"name": f"g{i}"} for i in range(9)]), "spec.preemptionGates"),
        (
            lambda w: w.setdefault("status", {}).update(
                preemptionGates=[{"name": "g", "position": "Ajar", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
            ),
            "status.preemptionGates[0].position",
        ),
        (
            lambda w: w.setdefault("status", {}).update(
                preemptionGates=[{"name": "g", "position": "Open", "lastTransitionTime": "2026-01-01T00:00:00"}]
            ),
            "has no time zone",
        ),
    ],
    ids=["empty-name", "duplicate", "too-many", "bad-position", "naive-time"],
)
def test_gates_are_validated_as_kueues_crd(edit: Any, problem: str) -> None:
    body = pending("w", "cq").obj()
    edit(body)
    with pytest.raises(ObjectError) as error:
        parse_object(body)
    assert problem in str(error.value)


def test_gates_round_trip_in_json() -> None:
    body = gated(pending("w", "cq"), GATE, positions={GATE: "Open"}).obj()
    parsed = parse_object(json.loads(json.dumps(body)))
    assert parsed.to_wire()["spec"]["preemptionGates"] == [{"name": GATE}]
    assert parsed.to_wire()["status"]["preemptionGates"] == body["status"]["preemptionGates"]
