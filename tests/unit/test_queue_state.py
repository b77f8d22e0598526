"""What the scheduler remembers between cycles: preemptors waiting for their victims."""

from __future__ import annotations

from builders import NOW, admitted, as_dict, cache_of, cluster_queue, parse, pending, scenario
from preemption_operator.engine.configurable import ConfigurablePreemption
from preemption_operator.engine.scheduler import QueueState, Scheduler


def test_a_deleted_waiting_preemptor_is_forgotten_and_its_queue_moves_on() -> None:
    objects = scenario(
        [cluster_queue("cq", 2, within="LowerPriority")],
        admitted("low", "cq", 2, priority=0),
        pending("boss", "cq", 2, priority=10),
        pending("next", "cq", 1, priority=5),
    )
    cache = cache_of(objects)
    state = QueueState()
    scheduler = Scheduler(extra=ConfigurablePreemption().candidates)
    first = scheduler.cycle(cache.snapshot(NOW), state)
    assert [p.victim.name for p in first.preempted] == ["low"]
    assert any(k.endswith("/boss") for k in state.waiting)
    # The preemptor is deleted before it is admitted; the victim is still holding its quota here.
    cache.delete("Workload", next(k for k in cache.infos if k.endswith("/boss")))
    second = scheduler.cycle(cache.snapshot(NOW), state)
    assert not any(k.endswith("/boss") for k in state.waiting)
    # With the waiting preemptor gone, the queue's next head is considered again.
    assert [p.workload.name for p in second.pending][:1] == ["next"]


def test_a_pass_clones_only_the_trees_of_queues_with_a_workload_to_look_at() -> None:
    """Queues whose pending workloads are all parked (BestEffortFIFO, waiting for quota) cost a
    pass nothing: their cohort trees are not cloned. A queue with a workload to look at is."""
    objects = scenario(
        [
            cluster_queue("full-1", 1, cohort="one", queueing_strategy="BestEffortFIFO"),
            cluster_queue("full-2", 1, cohort="two", queueing_strategy="BestEffortFIFO"),
            cluster_queue("open", 4, cohort="three"),
        ],
        admitted("a", "full-1", 1),
        admitted("b", "full-2", 1),
        pending("wait-1", "full-1", 1),
        pending("wait-2", "full-2", 1),
    )
    cache = cache_of(objects)
    state = QueueState()
    scheduler = Scheduler()
    scheduler.cycle(cache.snapshot(NOW), state)
    assert state.inadmissible == {"full-1": {"default/wait-1"}, "full-2": {"default/wait-2"}}
    parked = cache.snapshot(NOW)
    scheduler.cycle(parked, state)
    assert parked.trees._queues == {}  # nothing looked at, nothing cloned
    cache.upsert(parse([as_dict(pending("new", "open", 1))])[0])
    busy = cache.snapshot(NOW)
    result = scheduler.cycle(busy, state)
    assert [a.workload.name for a in result.admitted] == ["new"]
    assert set(busy.trees._queues) == {"open"}  # only the tree of the queue that had a head
