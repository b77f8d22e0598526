"""Decisions that span Kueue cycles: the operator decides several of Kueue's cycles per pass
(rounds) and writes asynchronously, and neither may let a workload be admitted that Kueue's next
cycle would have kept out (its preemptor then evicts it, or more). Found tracing the operator
under Kueue's scheduler performance harness (issue 13 item 5).

What Kueue v0.19.2 does (pkg/scheduler/scheduler.go): every cycle nominates the head of every
ClusterQueue, sorts the entries (not borrowing first, then priority, then FIFO) and processes
them in order. A head that no longer fits after an earlier entry is skipped, and is nominated
again in the next cycle. A head that issued preemptions stays at its queue's head (its queue's
sticky preemptor) and, each cycle until it is admitted, adds its usage to the snapshot
(`cq.AddUsage`), so nobody in its cohort takes the quota its victims free, nor the room it
counted on besides.
"""

from __future__ import annotations

import pytest

from builders import NOW, T0, Obj, admitted, cache_of, cluster_queue, pending, scenario, seconds
from preemption_operator.api.objects import parse_object
from preemption_operator.engine.cache import Cache
from preemption_operator.engine.fair_sharing import FairSharing
from preemption_operator.engine.scheduler import Admission, QueueState, Scheduler


def _queue(name: str, cpu: int) -> dict[str, object]:
    return cluster_queue(name, cpu, cohort="co", borrowing_limit=100, within="LowerPriority", reclaim="Any")


FAIR = FairSharing(enabled=True)


def _two_bigs_and_two_borrowers() -> list[Obj]:
    """Cohort `co` of a, b (4 cpu, one small each), c (2) and d (1); pending: a big of 4 for a and
    one for b, and two mediums of 2 for c (the second borrows)."""
    return scenario(
        [_queue("a", 4), _queue("b", 4), _queue("c", 2), _queue("d", 1)],
        admitted("sa", "a", 1, priority=50),
        admitted("sb", "b", 1, priority=50),
        pending("big-a", "a", 4, priority=200, created=T0),
        pending("big-b", "b", 4, priority=200, created=T0 + seconds(1)),
        pending("m1", "c", 2, priority=100),
        pending("m2", "c", 2, priority=100, created=T0 + seconds(2)),
    )


def _admit(cache: Cache, a: Admission) -> None:
    """What the operator's write of an admission puts into the cache."""
    wire = a.workload.obj.to_wire()
    wire["status"] = {
        "conditions": [
            {
                "type": "QuotaReserved",
                "status": "True",
                "reason": "QuotaReserved",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
        "admission": {"clusterQueue": a.cluster_queue, "podSetAssignments": list(a.pod_sets)},
    }
    cache.upsert(parse_object(wire))


def test_a_later_round_does_not_admit_a_borrower_past_a_head_that_no_longer_fit() -> None:
    """Round 1: `m1` (within nominal) and `big-a` fit; `big-b` fitted when nominated but no longer
    does. Kueue's next cycle nominates `big-b` again, now with a victim of its own queue (`sb`),
    and processes it before `m2`, which borrows: `big-b` keeps the room and `m2` waits. The
    second round of the pass does just that (admitting `m2` first would make `big-b` reclaim it,
    or more)."""
    _assert_round_two_preempts_sb_and_m2_waits(FairSharing())


def _assert_round_two_preempts_sb_and_m2_waits(fair_sharing: FairSharing) -> None:
    cache = cache_of(_two_bigs_and_two_borrowers(), fair_sharing)
    result = Scheduler(rounds=64).cycle(cache.snapshot(NOW), QueueState())
    assert sorted(a.workload.name for a in result.admitted) == ["big-a", "m1"]
    assert [(p.victim.name, p.preemptor.name) for p in result.preempted] == [("sb", "big-b")]
    pending = {p.workload.name: p.reason for p in result.pending}
    assert pending["big-b"] == "WaitingForPreemptedWorkloads"
    assert pending["m2"] == "WaitingForQuota"


def _passes(rounds: int, fair_sharing: FairSharing) -> tuple[list[str], list[str]]:
    """Three passes of `rounds` over the setup, each decision written before the next (victims
    gone at once): the workloads admitted and the victims, sorted."""
    cache = cache_of(_two_bigs_and_two_borrowers(), fair_sharing)
    state, scheduler = QueueState(), Scheduler(rounds=rounds)
    admissions: list[str] = []
    victims: list[str] = []
    for _ in range(3):
        result = scheduler.cycle(cache.snapshot(NOW), state)
        for a in result.admitted:
            admissions.append(a.workload.name)
            _admit(cache, a)
        for p in result.preempted:
            victims.append(p.victim.name)
            cache.delete("Workload", p.victim.key)
    return sorted(admissions), sorted(victims)


@pytest.mark.parametrize("fair_sharing", [FairSharing(), FAIR], ids=["classic", "fair"])
def test_one_pass_of_rounds_decides_what_consecutive_single_cycles_decide(fair_sharing: FairSharing) -> None:
    """The same setup, cycle by cycle: `big-b` preempts `sb` (its own queue's) and nothing else;
    `m2` is not admitted while `big-b` waits; 64 rounds a pass decide the same."""
    assert _passes(1, fair_sharing) == _passes(64, fair_sharing) == (["big-a", "big-b", "m1"], ["sb"])


def test_a_preemptor_whose_evictions_are_being_written_keeps_its_room_in_the_cohort() -> None:
    """`big` preempts `victim` for the room its own queue frees plus 2 free in the cohort. While
    the eviction is being written, `m` arrives in `b` and would borrow those 2: Kueue's next cycle
    adds `big`'s usage again, so `m` does not fit; admitting it would make `big` reclaim it."""
    objects = scenario(
        [_queue("a", 4), _queue("b", 4)],
        admitted("victim", "a", 2, priority=0),
        admitted("b1", "b", 4, priority=20),
        pending("big", "a", 4, priority=10),
    )
    cache = cache_of(objects)
    state, scheduler = QueueState(), Scheduler(rounds=1)
    first = scheduler.cycle(cache.snapshot(NOW), state)
    assert [p.victim.name for p in first.preempted] == ["victim"]
    cache.assume_eviction("default/victim")
    cache.upsert(parse_object(pending("m", "b", 2, priority=5).obj()))
    second = scheduler.cycle(cache.snapshot(NOW), state)
    assert not second.admitted
    assert not second.preempted
    assert "default/big" in state.waiting


def test_with_fair_sharing_a_later_round_does_not_admit_a_borrower_past_a_head_that_no_longer_fit() -> None:
    """The same setup under fair sharing (the operator runs it with `--fair-sharing` and 64
    rounds): before one recheck served both modes, the second round admitted `m2` and `big-b`
    then evicted both `m1` and `sb`, where consecutive single cycles evict `sb` alone."""
    _assert_round_two_preempts_sb_and_m2_waits(FAIR)
