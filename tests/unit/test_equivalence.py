"""Kueue's SchedulingEquivalenceHashing (on by default since v0.18): when a head fails to fit, or
finds nobody to preempt, the pending workloads of the same shape in a BestEffortFIFO queue are
parked with it unevaluated, and get no status write unless they show a stale one. Kueue's tests:
pkg/cache/queue/cluster_queue_test.go TestRecordInadmissibleHash, TestRequeueHashTriggerByReason,
TestQueueInadmissibleWorkloadsClearsHashes; pkg/controller/core/workload_controller_test.go
"reconcile bypassed workload when SchedulingEquivalenceHashing is enabled (stale status ->
bypassed status)"."""

from __future__ import annotations

from builders import NOW, admitted, cache_of, cluster_queue, parse, pending, scenario
from preemption_operator.engine.cache import Cache
from preemption_operator.engine.scheduler import BYPASSED_MESSAGE, QueueState, Scheduler
from preemption_operator.engine.workload import scheduling_shape


def full_queue(strategy: str = "BestEffortFIFO", *extra: object) -> list[object]:
    return scenario(
        [cluster_queue("cq", 4, queueing_strategy=strategy)],
        admitted("running", "cq", 4),
        *(pending(f"same-{i}", "cq", 2, priority=5) for i in range(4)),
        *extra,
    )


def after_the_head_failed() -> tuple[Cache, QueueState, Scheduler]:
    """A full queue after one cycle: its head failed and its equals were parked with it."""
    cache = cache_of(full_queue())
    state, scheduler = QueueState(), Scheduler(rounds=64)
    scheduler.cycle(cache.snapshot(NOW), state)
    return cache, state, scheduler


def test_equivalent_workloads_are_parked_with_the_head_without_a_status() -> None:
    # Kueue: TestRecordInadmissibleHash "bulk-moves matching workloads".
    state = QueueState()
    result = Scheduler(rounds=64).cycle(cache_of(full_queue()).snapshot(NOW), state)
    assert [p.workload.name for p in result.pending] == ["same-0"]
    assert state.inadmissible["cq"] == {f"default/same-{i}" for i in range(4)}


def test_a_different_shape_is_still_evaluated() -> None:
    # Kueue: TestRecordInadmissibleHash "no-op when no workloads match" (here: a smaller request
    # and a different priority are other shapes, and are looked at).
    objects = full_queue(
        "BestEffortFIFO", pending("smaller", "cq", 1, priority=5), pending("other", "cq", 2, priority=1)
    )
    result = Scheduler(rounds=64).cycle(cache_of(objects).snapshot(NOW), QueueState())
    assert {p.workload.name for p in result.pending} == {"same-0", "smaller", "other"}


def test_strict_fifo_parks_nothing_in_bulk() -> None:
    # Kueue: handleInadmissibleHash applies only to BestEffortFIFO queues.
    state = QueueState()
    Scheduler(rounds=64).cycle(cache_of(full_queue("StrictFIFO")).snapshot(NOW), state)
    assert state.inadmissible.get("cq") == {"default/same-0"}  # the head only


def requeued_after_eviction(name: str) -> dict[str, object]:
    """A workload of the parked shape that shows a stale pending reason (evicted and requeued)."""
    requeued = pending(name, "cq", 2, priority=5).obj()
    condition = {
        "type": "QuotaReserved",
        "status": "False",
        "reason": "PendingEvaluation",
        "message": "Preempted earlier",
        "lastTransitionTime": "2026-01-01T10:00:00Z",
    }
    requeued["status"] = {"conditions": [condition]}
    return requeued


def test_a_stale_pending_reason_is_replaced_by_the_bypass_message() -> None:
    # Kueue's workload controller: a bypassed workload showing PendingEvaluation (it was evicted
    # and requeued) gets the failed one's reason and "Bypassed scheduling evaluation ...".
    requeued = requeued_after_eviction("z-requeued")  # behind the head
    result = Scheduler(rounds=64).cycle(cache_of(full_queue("BestEffortFIFO", requeued)).snapshot(NOW), QueueState())
    bypassed = {p.workload.name: (p.reason, p.message) for p in result.pending if p.workload.name == "z-requeued"}
    assert bypassed == {"z-requeued": ("WaitingForQuota", BYPASSED_MESSAGE)}


def test_freed_quota_lets_the_parked_ones_in() -> None:
    # Kueue: TestQueueInadmissibleWorkloadsClearsHashes: a capacity event requeues them all.
    cache, state, scheduler = after_the_head_failed()
    cache.delete("Workload", "default/running")
    snapshot = cache.snapshot(NOW)
    state.quota_released(snapshot, {"cq"})
    result = scheduler.cycle(snapshot, state)
    assert [a.workload.name for a in result.admitted] == ["same-0", "same-1"]


def test_the_shape_covers_what_kueues_hash_covers() -> None:
    cache = cache_of(
        scenario(
            [cluster_queue("cq", 4)],
            pending("a", "cq", 2, priority=5),
            pending("b", "cq", 2, priority=5, labels={"team": "x"}),
            pending("c", "cq", 2, priority=6),
            pending("d", "cq", 3, priority=5),
        )
    )
    shapes = {name: scheduling_shape(cache.infos[f"default/{name}"]) for name in "abcd"}
    assert shapes["a"] == shapes["b"]  # labels are not part of it
    assert shapes["a"] != shapes["c"] and shapes["a"] != shapes["d"]


def test_a_later_workload_of_a_parked_shape_is_parked_on_sight_without_a_status() -> None:
    # Kueue: cluster_queue.go pushOrUpdate "Skip to inadmissible if the workload's equivalence
    # class was already bulk-moved to inadmissible": one created after the head failed is not
    # evaluated either, so it gets no pending write.
    cache, state, scheduler = after_the_head_failed()
    cache.upsert(*parse([pending("later", "cq", 2, priority=5).obj()]))
    result = scheduler.cycle(cache.snapshot(NOW), state)
    assert result.pending == [] and result.explanations == []
    assert "default/later" in state.inadmissible["cq"]


def test_a_later_workload_of_another_shape_is_still_evaluated() -> None:
    cache, state, scheduler = after_the_head_failed()
    cache.upsert(*parse([pending("later", "cq", 3, priority=5).obj()]))
    result = scheduler.cycle(cache.snapshot(NOW), state)
    assert [p.workload.name for p in result.pending] == ["later"]


def test_a_later_workload_with_a_stale_reason_gets_the_bypass_message() -> None:
    cache, state, scheduler = after_the_head_failed()
    cache.upsert(*parse([requeued_after_eviction("requeued")]))
    result = scheduler.cycle(cache.snapshot(NOW), state)
    assert [(p.workload.name, p.reason, p.message) for p in result.pending] == [
        ("requeued", "WaitingForQuota", BYPASSED_MESSAGE)
    ]


def test_freed_quota_forgets_the_parked_shapes() -> None:
    # Kueue: TestQueueInadmissibleWorkloadsClearsHashes: requeueing clears the bulk-move hashes,
    # so a workload of that shape created afterwards is evaluated.
    cache, state, scheduler = after_the_head_failed()
    cache.delete("Workload", "default/running")
    state.quota_released(cache.snapshot(NOW), {"cq"})
    assert state.parked_shapes == {}
    cache.upsert(*parse([pending("later", "cq", 2, priority=5).obj()]))
    result = scheduler.cycle(cache.snapshot(NOW), state)
    evaluated = [a.workload.name for a in result.admitted] + [p.workload.name for p in result.pending]
    assert "later" in evaluated and len(result.admitted) == 2


def test_strict_fifo_parks_no_later_workload_on_sight() -> None:
    cache = cache_of(full_queue("StrictFIFO"))
    state, scheduler = QueueState(), Scheduler(rounds=64)
    scheduler.cycle(cache.snapshot(NOW), state)
    assert state.parked_shapes == {}
