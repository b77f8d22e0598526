"""Evictions that are not preemptions: a deactivated workload (spec.active: false) and queues
stopped with HoldAndDrain give their quota back, as Kueue's controllers make them do."""

from __future__ import annotations

from typing import Any

import pytest

from builders import admitted, cluster_queue, local_queue, pending, scenario, simulate, simulate_cli

Obj = dict[str, Any]


def deactivate(builder: Any) -> Any:
    builder.body["spec"]["active"] = False
    return builder


def stopped(cq: Obj, policy: str) -> Obj:
    cq["spec"]["stopPolicy"] = policy
    return cq


@pytest.mark.parametrize("run", [simulate, simulate_cli], ids=["simulate", "cli"])
def test_deactivated_workload_is_evicted_and_not_requeued(run: Any) -> None:
    objects = scenario(
        [cluster_queue("cq", 2)],
        deactivate(admitted("off", "cq", 2)),
        pending("next", "cq", 2),
    )
    out = run(objects)
    evictions = [a for a in out.actions if a["action"] == "Evicted"]
    assert [(a["workload"].split("/")[1], a["reason"], a["message"]) for a in evictions] == [
        ("off", "Deactivated", "The workload is deactivated")
    ]
    status = out.statuses["off"]
    assert "admission" not in status
    assert out.condition("off", "Evicted")["reason"] == "Deactivated"
    assert out.condition("off", "QuotaReserved")["status"] == "False"
    assert out.condition("off", "Requeued")["status"] == "False"
    assert status["schedulingStats"]["evictions"] == [{"reason": "Deactivated", "underlyingCause": "", "count": 1}]
    # The quota it gave back admits the next workload; the deactivated one is not admitted again.
    assert out.condition("next", "Admitted")["status"] == "True"
    assert [a["action"] for a in out.actions_of("off")] == ["Evicted"]


def test_hold_and_drain_evicts_admitted_workloads_and_requeues_them() -> None:
    objects = scenario(
        [stopped(cluster_queue("cq", 4), "HoldAndDrain")],
        admitted("a", "cq", 2),
        admitted("b", "cq", 2),
    )
    out = simulate(objects)
    evicted = sorted((a["workload"].split("/")[1], a["reason"]) for a in out.actions if a["action"] == "Evicted")
    assert evicted == [("a", "ClusterQueueStopped"), ("b", "ClusterQueueStopped")]
    for name in ("a", "b"):
        assert out.condition(name, "Evicted")["message"] == "The ClusterQueue is stopped"
        assert out.condition(name, "Requeued")["status"] == "True"
        # The stopped queue admits nothing: they wait.
        pending_reason = out.condition(name, "QuotaReserved")
        assert pending_reason["status"] == "False"
        assert pending_reason["message"] == "ClusterQueue cq is inactive"


def test_hold_keeps_admitted_workloads() -> None:
    objects = scenario([stopped(cluster_queue("cq", 4), "Hold")], admitted("a", "cq", 2), pending("b", "cq", 1))
    out = simulate(objects)
    assert not [a for a in out.actions if a["action"] == "Evicted"]
    assert out.condition("a", "Admitted")["status"] == "True"
    assert out.condition("b", "QuotaReserved")["message"] == "ClusterQueue cq is inactive"


def test_local_queue_hold_and_drain_evicts_only_its_workloads() -> None:
    objects = scenario(
        [cluster_queue("cq", 4)],
        admitted("mine", "cq", 1),
        admitted(
            "other",
            "cq",
            1,
        ),
    )
    objects.append(local_queue("drained", "cq"))
    objects[-1]["spec"]["stopPolicy"] = "HoldAndDrain"
    for obj in objects:
        if obj["kind"] == "Workload" and obj["metadata"]["name"] == "mine":
            obj["spec"]["queueName"] = "drained"
    out = simulate(objects)
    evicted = [
        (a["workload"].split("/")[1], a["reason"], a["message"]) for a in out.actions if a["action"] == "Evicted"
    ]
    assert evicted == [("mine", "LocalQueueStopped", "The LocalQueue is stopped")]
    assert out.condition("other", "Admitted")["status"] == "True"
