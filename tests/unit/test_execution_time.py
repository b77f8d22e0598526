"""Kueue's maximum execution time (spec.maximumExecutionTimeSeconds): an admitted workload that has
run for it in all is marked DeactivationTarget, made inactive and evicted as deactivated; the time
of each admission accumulates in status.accumulatedPastExecutionTimeSeconds when it ends. Kueue
v0.19.2's cases are translated where they apply, each named: TestReconcile's two cases in
pkg/controller/core/workload_controller_test.go, and the integration cases "the workload has a
maximum execution time set" in test/integration/singlecluster/controller/core/
workload_controller_test.go."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from builders import NOW, WorkloadBuilder, admitted, cluster_queue, cycle_applied, parse, pending, scenario
from preemption_operator.engine.execution_time import deadline
from preemption_operator.engine.workload_status import get_condition
from preemption_operator.offline import simulate as simulation

Obj = dict[str, Any]
MINUTE = timedelta(minutes=1)
SECOND = timedelta(seconds=1)


def limited(builder: WorkloadBuilder, seconds: int) -> WorkloadBuilder:
    builder.body["spec"]["maximumExecutionTimeSeconds"] = seconds
    return builder


# -- Kueue's TestReconcile ---------------------------------------------------------------------


def test_admitted_workload_with_max_execution_time() -> None:
    """ "admitted workload with max execution time": 120 s, admitted a minute ago: nothing is
    written, and the next look is due in a minute (Kueue's RequeueAfter)."""
    body = limited(admitted("wl", "cq", at=NOW - MINUTE), 120)
    result, made, _ = cycle_applied(scenario([cluster_queue("cq", 4)], body))
    assert made == []
    assert result.retry_at == NOW + MINUTE


def test_admitted_workload_with_max_execution_time_expired() -> None:
    """ "admitted workload with max execution time - expired": 60 s, admitted two minutes ago: the
    DeactivationTarget mark with Kueue's reason and message, and its Warning Event."""
    body = limited(admitted("wl", "cq", at=NOW - 2 * MINUTE), 60)
    _, made, out = cycle_applied(scenario([cluster_queue("cq", 4)], body))
    assert [c.action for c in made] == ["Deactivated"]
    assert made[0].deactivate  # then spec.active=false
    target = get_condition(out["default/wl"], "DeactivationTarget") or {}
    assert (target.get("status"), target.get("reason"), target.get("message")) == (
        "True",
        "MaximumExecutionTimeExceeded",
        "exceeding the maximum execution time",
    )
    assert [(e.type, e.reason, e.message) for e in made[0].events] == [
        ("Warning", "MaximumExecutionTimeExceeded", "The maximum execution time (60s) exceeded")
    ]


# -- what decides it ---------------------------------------------------------------------------


def test_the_deadline_counts_the_time_of_earlier_admissions() -> None:
    wl = parse([limited(admitted("wl", "cq", at=NOW - MINUTE), 120).accumulated(50).obj()])[0]
    assert deadline(wl) == NOW - MINUTE + 70 * SECOND


def test_no_deadline_without_a_limit_or_an_admission() -> None:
    assert deadline(parse([admitted("wl", "cq").obj()])[0]) is None
    assert deadline(parse([limited(pending("wl", "cq"), 10).obj()])[0]) is None


def test_a_limit_used_up_before_this_admission_ends_at_the_admission() -> None:
    wl = parse([limited(admitted("wl", "cq", at=NOW - MINUTE), 60).accumulated(90).obj()])[0]
    assert deadline(wl) == NOW - MINUTE


def test_a_reservation_alone_counts_only_when_asked() -> None:
    """What-if inputs often record only QuotaReserved; the operator waits for Admitted."""
    body = limited(admitted("wl", "cq", at=NOW - MINUTE), 120).obj()
    body["status"]["conditions"] = [c for c in body["status"]["conditions"] if c["type"] != "Admitted"]
    wl = parse([body])[0]
    assert deadline(wl) is None
    assert deadline(wl, reservation=True) == NOW + MINUTE


def test_the_limit_is_used_up_exactly_at_the_deadline() -> None:
    """Kueue deactivates once the remaining time is not above zero."""
    body = limited(admitted("wl", "cq", at=NOW - 60 * SECOND), 60)
    _, made, _ = cycle_applied(scenario([cluster_queue("cq", 4)], body))
    assert [c.action for c in made] == ["Deactivated"]
    body = limited(admitted("wl", "cq", at=NOW - 59 * SECOND), 60)
    result, made, _ = cycle_applied(scenario([cluster_queue("cq", 4)], body))
    assert made == [] and result.retry_at == NOW + SECOND


def test_the_mark_clears_the_accumulated_time() -> None:
    """Kueue starts the count over when it marks the workload for this reason."""
    body = limited(admitted("wl", "cq", at=NOW - MINUTE), 100).accumulated(50)
    _, _, out = cycle_applied(scenario([cluster_queue("cq", 4)], body))
    assert get_condition(out["default/wl"], "DeactivationTarget") is not None
    assert "accumulatedPastExecutionTimeSeconds" not in out["default/wl"]


def test_a_workload_without_a_limit_runs_on() -> None:
    body = admitted("wl", "cq", at=NOW - 1000 * MINUTE)
    result, made, _ = cycle_applied(scenario([cluster_queue("cq", 4)], body))
    assert made == [] and result.retry_at is None


# -- Kueue's integration cases -----------------------------------------------------------------


def _run(objects: list[Obj], now: datetime) -> tuple[list[Obj], dict[str, Obj]]:
    sim = simulation.run(parse(objects), now)
    wires = {wl.metadata.name: wl.to_wire() for wl in sim.workloads.values()}
    return sim.to_dict()["actions"], wires


def test_should_deactivate_the_workload_when_the_time_expires() -> None:
    """ "should deactivate the workload when the time expires": admitted, then, past its 2 s,
    inactive and evicted as Kueue words it."""
    queues = [cluster_queue("cq", 4)]
    actions, wires = _run(scenario(queues, limited(pending("wl", "cq"), 2)), NOW)
    assert [a["action"] for a in actions] == ["Admitted"]
    actions, wires = _run([*scenario(queues), wires["wl"]], NOW + SECOND)
    assert actions == []  # one second left
    actions, wires = _run([*scenario(queues), wires["wl"]], NOW + 2 * SECOND)
    assert [a["action"] for a in actions] == ["Deactivated", "Evicted", "Pending"]
    wire = wires["wl"]
    assert wire["spec"]["active"] is False
    evicted = get_condition(wire["status"], "Evicted") or {}
    assert (evicted.get("status"), evicted.get("reason"), evicted.get("message")) == (
        "True",
        "DeactivatedDueToMaximumExecutionTimeExceeded",
        "The workload is deactivated due to exceeding the maximum execution time",
    )
    assert wire["status"]["schedulingStats"]["evictions"] == [
        {"reason": "Deactivated", "underlyingCause": "MaximumExecutionTimeExceeded", "count": 1}
    ]
    assert get_condition(wire["status"], "DeactivationTarget") is None


def test_should_deactivate_the_workload_when_the_time_expires_with_multiple_admissions() -> None:
    """ "... with multiple admissions": an eviction adds the time it was admitted to
    accumulatedPastExecutionTimeSeconds; with the accumulated time one second short of the 30 s
    limit, the workload is deactivated one second after it is admitted again."""
    queues = [cluster_queue("cq", 1, within="LowerPriority")]
    victim = limited(pending("wl", "cq", priority=0), 30)
    _, wires = _run(scenario(queues, victim), NOW)
    assert (get_condition(wires["wl"]["status"], "Admitted") or {}).get("status") == "True"
    # Five seconds later a higher-priority workload preempts it: five seconds accumulate.
    later = NOW + 5 * SECOND
    actions, wires = _run([*scenario(queues, pending("high", "cq", priority=10)), wires["wl"]], later)
    assert ("Preempted", "default/wl") in [(a["action"], a["workload"]) for a in actions]
    assert wires["wl"]["status"]["accumulatedPastExecutionTimeSeconds"] == 5
    # As the Kueue case does by hand: the accumulated time is set one second short of the limit.
    wires["wl"]["status"]["accumulatedPastExecutionTimeSeconds"] = 29
    again = later + SECOND
    actions, wires = _run([*scenario(queues), wires["wl"]], again)  # `high` is gone
    assert [a["action"] for a in actions] == ["Admitted"]
    actions, wires = _run([*scenario(queues), wires["wl"]], again + SECOND)
    assert [a["action"] for a in actions] == ["Deactivated", "Evicted", "Pending"]
    assert wires["wl"]["spec"]["active"] is False


def test_each_admission_adds_its_whole_seconds_once() -> None:
    """Admitted at NOW, evicted 7.9 s later: 7 s accumulate (rounded down, as Kueue's int32 of the
    seconds), added to what earlier admissions left."""
    queues = [cluster_queue("cq", 1, within="LowerPriority")]
    body = admitted("wl", "cq", at=NOW, priority=0).accumulated(3)
    moment = NOW + timedelta(seconds=7.9)
    _, wires = _run([*scenario(queues, pending("high", "cq", priority=10)), body.obj()], moment)
    assert wires["wl"]["status"]["accumulatedPastExecutionTimeSeconds"] == 10


def test_any_eviction_adds_the_time_admitted() -> None:
    """Kueue adds it whenever Admitted turns False: a PodsReady timeout's eviction too."""
    from preemption_operator.engine.pods_ready import WaitForPodsReady

    body = admitted("wl", "cq", at=NOW - 6 * MINUTE).accumulated(4)
    sim = simulation.run(
        parse(scenario([cluster_queue("cq", 4)], body)), NOW, pods_ready=WaitForPodsReady(timedelta(minutes=5))
    )
    assert [a["action"] for a in sim.to_dict()["actions"]][:1] == ["Evicted"]
    assert sim.workloads["default/wl"].to_wire()["status"]["accumulatedPastExecutionTimeSeconds"] == 364
