"""What the scheduler remembers between cycles: preemptors waiting for their victims."""

from __future__ import annotations

from builders import NOW, admitted, cache_of, cluster_queue, pending, scenario
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
