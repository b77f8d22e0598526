"""Issue #12, item 7: a target already being evicted.

Kueue (pkg/scheduler/preemption/preemption.go IssuePreemptions): a target whose Evicted condition
is already True counts as preempted (it is in "Pending the preemption of N workload(s)",
scheduler.go markPreemptionOutcome) but gets no new eviction: no status patch, no Event, no
metric. Its quota comes back when its job stops; with no job here, at once. So the engine keeps
it among the targets, and the status change only gives its quota back (Kueue's handling of an
evicted workload in jobframework/reconciler.go), with no `Preempted` action, Event or count.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from builders import (
    NOW,
    Obj,
    WorkloadBuilder,
    admitted,
    cluster_queue,
    one_cycle,
    pending,
    scenario,
    simulate,
    simulate_cli,
)
from preemption_operator.engine import changes
from preemption_operator.engine import workload_status as wl_status

EARLIER = "Preempted earlier"
WAITING = "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default"


def evicting(builder: WorkloadBuilder, reason: str = "Preempted", message: str = EARLIER) -> WorkloadBuilder:
    """Evicted=True while it still holds its quota (its job is stopping)."""
    return builder.evicted(reason=reason, message=message)


def standalone(*workloads: WorkloadBuilder) -> list[Obj]:
    return scenario([cluster_queue("cq", 4, within="LowerPriority")], *workloads)


def objects(reason: str = "Preempted") -> list[Obj]:
    return standalone(
        evicting(admitted("going", "cq", 2, priority=0), reason=reason),
        admitted("low", "cq", 2, priority=-1),
        pending("in", "cq", 2, priority=1),
    )


def test_the_engine_counts_it_as_a_target() -> None:
    # Kueue TestCandidatesOrdering "evicted workload first"; TestEntryMarkPreemptionOutcome
    # "pending preemption": the message counts every target.
    result = one_cycle(objects())
    assert [(p.victim.name, p.ongoing) for p in result.preempted] == [("going", True)]
    [waiting] = result.pending
    assert waiting.reason == "WaitingForPreemptedWorkloads"
    assert waiting.message == f"{WAITING}, 2 more needed. Pending the preemption of 1 workload(s)"
    [explanation] = result.explanations
    [chosen] = [r for r in explanation.candidates if r.outcome == "chosen"]
    assert chosen.detail.endswith("; already being evicted: counted, not preempted again")


def test_its_change_gives_quota_back_and_says_nothing() -> None:
    # IssuePreemptions: no Evict call, no "Preempted"/"PreemptedWorkload" Event, no ReportPreemption;
    # TestIssuePreemptionsSkipsDuplicate: no second patch for a target already being preempted.
    result = one_cycle(objects())
    [change] = [c for c in changes.status_changes(result, NOW) if c.key == "default/going"]
    assert change.action == changes.RELEASED
    assert change.events == ()
    assert change.releases_quota and not change.holds_quota
    going = next(o for o in objects() if o["metadata"]["name"] == "going")
    status = change.compute(going)
    assert status is not None and "admission" not in status
    reserved = wl_status.get_condition(status, "QuotaReserved")
    assert reserved is not None
    assert (reserved["status"], reserved["reason"], reserved["message"]) == ("False", "PendingEvaluation", EARLIER)
    # Not evicted any more when written (say it was admitted again meanwhile): nothing to do.
    going["status"]["conditions"] = [c for c in going["status"]["conditions"] if c["type"] != "Evicted"]
    assert change.compute(going) is None


@pytest.mark.parametrize("run", [simulate, simulate_cli], ids=["simulate", "cli"])
def test_no_new_preemption_is_reported(run: Any) -> None:
    before = next(o for o in objects() if o["metadata"]["name"] == "going")["status"]
    out = run(objects(), max_cycles=1)
    assert out.victims == []
    assert out.actions_of("going") == []
    assert [(a["action"], a["reason"]) for a in out.actions_of("in")] == [("Pending", "WaitingForPreemptedWorkloads")]
    status = out.statuses["going"]
    assert out.condition("going", "Evicted") == next(c for c in before["conditions"] if c["type"] == "Evicted")
    assert out.condition("going", "Preempted") is None
    assert "schedulingStats" not in status
    assert "admission" not in status
    requeued = out.condition("going", "Requeued")
    assert requeued is not None
    assert (requeued["status"], requeued["reason"], requeued["message"]) == ("True", "Preempted", EARLIER)


@pytest.mark.parametrize("run", [simulate, simulate_cli], ids=["simulate", "cli"])
def test_the_preemptor_gets_the_quota_next(run: Any) -> None:
    out = run(objects())
    assert [(a["cycle"], a["action"]) for a in out.actions_of("in")] == [(1, "Pending"), (2, "Admitted")]
    assert out.condition("in", "Admitted")["status"] == "True"  # type: ignore[index]
    # `going` is requeued and, as any pending workload, preempts the lower-priority `low` later on.
    assert out.preempted["low"]["preemptor"] == "default/going"


def test_a_new_victim_next_to_an_ongoing_one() -> None:
    # Two targets, one already going: one Preempted action, the message counts both.
    objs = standalone(
        evicting(admitted("going", "cq", 2, priority=0)),
        admitted("low", "cq", 2, priority=-1),
        pending("in", "cq", 4, priority=1),
    )
    result = one_cycle(objs)
    assert sorted((p.victim.name, p.ongoing) for p in result.preempted) == [("going", True), ("low", False)]
    assert result.pending[0].message.endswith("Pending the preemption of 2 workload(s)")
    out = simulate(objs, max_cycles=1)
    assert out.victims == ["low"]
    assert out.condition("low", "Preempted")["reason"] == "InClusterQueue"  # type: ignore[index]


def test_an_eviction_for_another_reason_is_not_requeued() -> None:
    # jobframework/reconciler.go: Requeued=True only after a preemption or node failures; the
    # condition carries the eviction's reason and message.
    out = simulate(objects(reason="PodsReadyTimeout"), max_cycles=1)
    requeued = out.condition("going", "Requeued")
    assert requeued is not None
    assert (requeued["status"], requeued["reason"], requeued["message"]) == ("False", "PodsReadyTimeout", EARLIER)


@pytest.mark.looptime
async def test_the_operator_posts_no_event_and_counts_nothing() -> None:
    """The operator writes the same change: the quota comes back, with no Event and no metric
    (the eviction was counted when it was made). The preemptor, still waiting once its pending
    reason's deferral is over, gets that reason and its Warning."""
    import copy

    from prometheus_client import generate_latest

    from preemption_operator.controller.metrics import Metrics
    from preemption_operator.controller.scheduling import Scheduling
    from preemption_operator.controller.write_queue import PREEMPTOR_DEFER_SECONDS
    from preemption_operator.engine.cache import Cache
    from preemption_operator.k8s.writer import StatusWriter
    from unit.fake_api import FakeApi

    recorded: list[tuple[str, str]] = []

    class Events:
        def record(self, obj: Obj, kind: str, api_version: str, type_: str, reason: str, message: str) -> None:
            recorded.append((obj["metadata"].get("name", ""), reason))

    api = FakeApi()
    for body in objects():
        api.put(body)
    metrics = Metrics()
    s = Scheduling.build(Cache(), StatusWriter(api, fence=lambda: True), Events(), metrics, lambda: True)  # type: ignore[arg-type]
    for body in list(api.objects.values()):
        s.feeder.ingest(body["kind"], copy.deepcopy(body))
    s.loop.cycle()
    await s.decisions.idle(deferred=False)
    assert ("in", "WaitingForPreemptedWorkloads") not in recorded  # not yet: it may not last
    await asyncio.sleep(PREEMPTOR_DEFER_SECONDS + 0.5)
    await s.decisions.idle()
    going = api.objects["/apis/kueue.x-k8s.io/v1beta2/namespaces/default/workloads/going"]
    assert "admission" not in going["status"]
    assert [r for r in recorded if r[0] == "going"] == []
    assert ("in", "WaitingForPreemptedWorkloads") in recorded
    text = generate_latest(metrics.registry).decode()
    assert "preemption_operator_evicted_workloads_total{" not in text
    assert "preemption_operator_preempted_workloads_total{" not in text
