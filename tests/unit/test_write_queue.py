"""The write queue on its own: writes never hold up the next cycle, keep the order that matters
(a batch's evictions before its admissions; evictions and admissions before pending reasons),
coalesce pending reasons per workload, and stop at once. Tests of how pending reasons queue run
without the deferral (`defer_seconds=0`); the deferral has its own."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from builders import NOW, admitted, cache_of, cluster_queue, cohort, one_cycle, pending, scenario
from preemption_operator.controller.write_queue import DEFER_SECONDS, WriteQueue
from preemption_operator.engine import changes
from preemption_operator.engine.changes import StatusChange, same_in_substance, status_changes
from preemption_operator.engine.scheduler import (
    NO_LONGER_FITS,
    OVERLAPPING_TARGETS,
    CycleResult,
    Eviction,
    Pending,
    QueueState,
    Scheduler,
)
from preemption_operator.k8s.writer import Outcome, WriteResult

pytestmark = pytest.mark.looptime  # waits run on fake time


class Writer:
    """Records the order of writes; `outcomes` fails chosen ones; `gate` holds all of them, and
    `holding` the writes of the workloads it names."""

    def __init__(self, outcomes: dict[str, Outcome] | None = None) -> None:
        self.order: list[tuple[str, str]] = []
        self.outcomes = outcomes or {}
        self.gate = asyncio.Event()
        self.gate.set()
        self.holding: dict[str, asyncio.Event] = {}

    async def write(self, change: StatusChange) -> WriteResult:
        await self.gate.wait()
        if change.workload.name in self.holding:
            await self.holding[change.workload.name].wait()
        self.order.append((change.action, change.workload.name))
        return WriteResult(self.outcomes.get(change.workload.name, Outcome.WRITTEN))


def drained_and_admitted() -> list[StatusChange]:
    """One cycle: a deactivated workload drained, the quota it gave back admitted to another, and
    a third left pending."""
    old = admitted("old", "cq", 2).obj()
    old["spec"]["active"] = False
    result = one_cycle(
        scenario(
            [cluster_queue("cq", 2), cluster_queue("other", 1)],
            old,
            pending("new", "cq", 2),
            pending("late", "other", 2),
        )
    )
    found = status_changes(result, NOW)
    assert [c.action for c in found] == [changes.EVICTED, changes.ADMITTED, changes.PENDING]
    return found


async def test_a_batch_writes_its_evictions_before_its_admissions_and_pending_reasons_last() -> None:
    writer, dropped = Writer(), []
    queue = WriteQueue(writer.write, dropped.append, parallelism=4)
    queue.submit(drained_and_admitted())
    await queue.idle()
    assert writer.order == [("Evicted", "old"), ("Admitted", "new"), ("Pending", "late")]
    assert dropped == []
    await queue.stop()


async def test_a_failed_eviction_drops_the_admissions_of_its_batch() -> None:
    writer, dropped = Writer({"old": Outcome.FAILED}), []
    queue = WriteQueue(writer.write, lambda c: dropped.append(c.workload.name), parallelism=4)
    queue.submit(drained_and_admitted())
    await queue.idle()
    assert ("Admitted", "new") not in writer.order
    assert dropped == ["new"]
    await queue.stop()


async def test_an_eviction_drops_an_admission_of_its_workload_not_sent_yet() -> None:
    """`new`'s admission waits for its batch's eviction when a later cycle evicts `new`: written
    after that eviction, it would take back the quota the eviction handed on. It is dropped (its
    assumption forgotten: decided again), and never written."""
    writer, dropped = Writer(), []
    writer.gate.clear()
    queue = WriteQueue(writer.write, lambda c: dropped.append((c.action, c.workload.name)), parallelism=1)
    first = drained_and_admitted()
    queue.submit(first)
    await asyncio.sleep(0)
    # old's eviction sent; new's admission held; late's pending reason waits DEFER_SECONDS.
    assert queue.in_flight == 1 and queue.queued == 1
    eviction = changes.eviction(Eviction(first[1].workload, "Deactivated", "The workload is deactivated"), NOW)
    queue.submit([eviction])
    assert dropped == [("Admitted", "new")]
    writer.gate.set()
    await queue.idle()
    assert ("Admitted", "new") not in writer.order and ("Evicted", "new") in writer.order
    await queue.stop()


@pytest.mark.parametrize("outcome", [Outcome.WRITTEN, Outcome.FAILED])
async def test_an_admission_never_overtakes_the_eviction_of_an_earlier_cycle(outcome: Outcome) -> None:
    """A later cycle may admit into room an earlier cycle's victim frees (Kueue's fits check
    counts a victim under way as gone), so its admission waits for that eviction as one of its own
    cycle's would: written first, the API would show both holding quota (the chaos suite's
    over-admitted cohort). If the eviction fails, the admission is decided again."""
    writer, dropped = Writer({"old": outcome}), []
    writer.holding["old"] = asyncio.Event()
    queue = WriteQueue(writer.write, lambda c: dropped.append(c.workload.name), parallelism=4, defer_seconds=0)
    eviction, admission, _ = drained_and_admitted()
    queue.submit([eviction])
    await asyncio.sleep(0)
    queue.submit([admission])
    await asyncio.sleep(0.01)
    assert writer.order == [] and queue.quota_writes == 2
    writer.holding["old"].set()
    await queue.idle()
    if outcome is Outcome.WRITTEN:
        assert writer.order == [("Evicted", "old"), ("Admitted", "new")] and dropped == []
    else:
        assert writer.order == [("Evicted", "old")] and dropped == ["new"]
    # Once the evictions are written, an admission goes at once.
    queue.submit([admission])
    await queue.idle()
    assert writer.order[-1] == ("Admitted", "new")
    await queue.stop()


async def test_an_admission_waits_for_every_earlier_cycles_eviction_not_only_the_last() -> None:
    writer = Writer()
    writer.holding["old"] = asyncio.Event()
    queue = WriteQueue(writer.write, lambda c: None, parallelism=4, defer_seconds=0)
    eviction, admission, late = drained_and_admitted()
    other = changes.eviction(Eviction(late.workload, "Deactivated", "The workload is deactivated"), NOW)
    queue.submit([eviction])
    queue.submit([other])
    await asyncio.sleep(0.01)
    assert writer.order == [("Evicted", "late")]
    queue.submit([admission])
    await asyncio.sleep(0.01)
    assert ("Admitted", "new") not in writer.order
    writer.holding["old"].set()
    await queue.idle()
    assert writer.order[-1] == ("Admitted", "new")
    await queue.stop()


async def test_submitting_never_waits_for_writes() -> None:
    writer = Writer()
    writer.gate.clear()
    queue = WriteQueue(writer.write, lambda c: None, parallelism=2, defer_seconds=0)
    queue.submit(drained_and_admitted())  # returns at once although nothing can be written
    await asyncio.sleep(0)
    # The eviction and the pending reason are on their way; the admission waits for the eviction.
    assert queue.in_flight == 2 and queue.queued == 1 and writer.order == []
    writer.gate.set()
    await queue.idle()
    assert len(writer.order) == 3
    await queue.stop()


async def test_a_newer_pending_reason_replaces_the_queued_one() -> None:
    writer = Writer()
    writer.gate.clear()
    queue = WriteQueue(writer.write, lambda c: None, parallelism=1, defer_seconds=0)
    first = drained_and_admitted()
    queue.submit(first)
    await asyncio.sleep(0)
    later = [c for c in drained_and_admitted() if c.action == changes.PENDING]
    queue.submit(later)
    assert queue.queued == 2  # the admission, and one pending reason for "late", not two
    writer.gate.set()
    await queue.idle()
    assert [w for w in writer.order if w[0] == "Pending"] == [("Pending", "late")]
    await queue.stop()


async def test_stop_abandons_what_is_queued_and_in_flight_at_once() -> None:
    writer = Writer()
    writer.gate.clear()
    queue = WriteQueue(writer.write, lambda c: None, parallelism=1)
    queue.submit(drained_and_admitted())
    await asyncio.sleep(0)
    left = await asyncio.wait_for(queue.stop(), 1)
    assert left == 3 and writer.order == []


async def test_a_writer_survives_an_unexpected_error() -> None:
    calls: list[str] = []

    async def flaky(change: StatusChange) -> WriteResult:
        calls.append(change.workload.name)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        return WriteResult(Outcome.WRITTEN)

    dropped: list[Any] = []
    queue = WriteQueue(flaky, dropped.append, parallelism=1)
    queue.submit(drained_and_admitted())
    await queue.idle()
    assert calls == ["old", "late"] and len(dropped) == 1  # the eviction failed: its admission is decided again
    await queue.stop()


def test_a_pending_reason_is_rewritten_only_when_it_says_something_new() -> None:
    assert same_in_substance(
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 4 more needed",
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 1500m more needed",
    )
    assert same_in_substance("Pending the preemption of 1 workload(s)", "Pending the preemption of 2 workload(s)")
    assert not same_in_substance("ClusterQueue cq-1 is inactive", "ClusterQueue cq-2 is inactive")
    assert not same_in_substance(
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor a, 4 more needed",
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor b, 4 more needed",
    )
    pend = next(c for c in drained_and_admitted() if c.action == changes.PENDING)
    written = pending("late", "other", 2).obj()
    written["status"] = {
        "conditions": [
            {
                "type": "QuotaReserved",
                "status": "False",
                "reason": pend.reason,
                "message": pend.record["message"].replace("(2)", "(7)"),
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    }
    assert "(2)" in pend.record["message"]
    assert pend.compute(written) is None  # only a figure differs: not written again


async def test_below_waits_until_the_backlog_shrinks() -> None:
    writer = Writer()
    writer.gate.clear()
    queue = WriteQueue(writer.write, lambda c: None, parallelism=1, defer_seconds=0)
    queue.submit(drained_and_admitted())
    await asyncio.sleep(0)
    waiting = asyncio.create_task(queue.below(2))
    await asyncio.sleep(0.01)
    assert not waiting.done()  # two are queued (one held by its eviction), one in flight
    writer.gate.set()
    await asyncio.wait_for(waiting, 1)
    assert queue.queued < 2
    await queue.stop()


async def test_quota_writes_count_admissions_and_evictions_until_written_not_pending_reasons() -> None:
    writer = Writer()
    writer.gate.clear()
    queue = WriteQueue(writer.write, lambda c: None, parallelism=1, defer_seconds=0)
    queue.submit(drained_and_admitted())
    await asyncio.sleep(0)
    # The eviction is in flight, the admission held behind it, the pending reason queued.
    assert queue.quota_writes == 2 and queue.queued == 2
    waiting = asyncio.create_task(queue.below(100, quota_limit=2))
    await asyncio.sleep(0.01)
    assert not waiting.done()  # the queue is short, but two quota decisions are unwritten
    writer.gate.set()
    await asyncio.wait_for(waiting, 1)
    await queue.idle()
    assert queue.quota_writes == 0
    await queue.stop()


async def test_a_workload_admitted_and_preempted_in_one_pass_is_never_admitted() -> None:
    """Rounds decide several of Kueue's cycles in one pass: `x` is admitted in one round and a
    later round preempts it. As when a later cycle evicts an admission not sent yet, the admission
    is dropped, and the eviction (of a workload the API never saw admitted) changes nothing."""
    objects = scenario(
        [cluster_queue("a", 0, cohort="root"), cluster_queue("b", 4, cohort="root", reclaim="Any")],
        pending("x", "a", 2),
        pending("b1", "b", 2),
        pending("y", "b", 2, created="2026-01-01T10:01:00Z"),
        cohorts=[cohort("root")],
    )
    result = Scheduler(rounds=4).cycle(cache_of(objects).snapshot(NOW), QueueState())
    assert [p.victim.name for p in result.preempted] == ["x"]
    found = status_changes(result, NOW)
    writer, dropped = Writer(), []
    queue = WriteQueue(writer.write, lambda c: dropped.append((c.action, c.workload.name)), parallelism=2)
    queue.submit(found)
    await queue.idle()
    assert ("Admitted", "x") not in writer.order
    assert ("Preempted", "x") in writer.order
    assert dropped == [("Admitted", "x")]
    await queue.stop()


def _showing(reason: str, message: str) -> dict[str, Any]:
    written = pending("late", "other", 2).obj()
    written["status"] = {
        "conditions": [
            {
                "type": "QuotaReserved",
                "status": "False",
                "reason": reason,
                "message": message,
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    }
    return written


def test_a_race_lost_within_a_cycle_is_not_written_over_the_reason_already_shown() -> None:
    """Kueue's "no longer fits after processing another workload" and "overlapping preemption
    targets": the workload is looked at again at once; over a pending reason it already shows
    they say nothing new, so they are not written (a status without one gets them)."""
    shown = (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 4 more needed"
    )
    info = cache_of(scenario([cluster_queue("other", 1)], pending("late", "other", 2))).infos["default/late"]
    for message in (NO_LONGER_FITS, OVERLAPPING_TARGETS):
        (change,) = status_changes(CycleResult(pending=[Pending(info, "other", "WaitingForQuota", message)]), NOW)
        assert change.compute(_showing("WaitingForQuota", shown)) is None
        fresh = change.compute(pending("late", "other", 2).obj())
        assert fresh is not None and fresh["conditions"][0]["message"] == message
        other_reason = change.compute(_showing("Pending", "Preempted earlier"))
        assert other_reason is not None and other_reason["conditions"][0]["message"] == message


def pending_and_admitted() -> tuple[StatusChange, StatusChange]:
    """`w`'s pending reason from one cycle and its admission from a later one."""
    waiting = one_cycle(scenario([cluster_queue("cq", 2)], admitted("old", "cq", 2), pending("w", "cq", 2)))
    reason = next(c for c in status_changes(waiting, NOW) if c.action == changes.PENDING)
    fits = one_cycle(scenario([cluster_queue("cq", 2)], pending("w", "cq", 2)))
    admission = next(c for c in status_changes(fits, NOW) if c.action == changes.ADMITTED)
    assert reason.workload.name == admission.workload.name == "w"
    return reason, admission


async def test_a_pending_reason_over_within_the_moment_is_never_written() -> None:
    """Issue #28: most workloads given a pending reason were admitted a fraction of a second
    later, and a third of our Workload writes told of a state already over."""
    writer = Writer()
    queue = WriteQueue(writer.write, lambda c: None, parallelism=1)
    reason, admission = pending_and_admitted()
    queue.submit([reason])
    await asyncio.sleep(DEFER_SECONDS / 2)
    assert writer.order == [] and queue.queued == 0  # waiting, not queued
    queue.submit([admission])
    await queue.idle()
    await asyncio.sleep(DEFER_SECONDS * 2)
    assert writer.order == [("Admitted", "w")]
    await queue.stop()


async def test_a_pending_reason_that_lasts_is_written_once_per_moment_however_often_it_changes() -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    times: list[float] = []

    async def write(change: StatusChange) -> WriteResult:
        times.append(round(loop.time() - start, 1))
        return WriteResult(Outcome.WRITTEN)

    queue = WriteQueue(write, lambda c: None, parallelism=1)
    reason, _ = pending_and_admitted()
    for _ in range(10):  # decided again every 0.3 s (a real one's figures would change)
        queue.submit([reason])
        await asyncio.sleep(0.3)
    await queue.idle()
    # Each is due DEFER_SECONDS after the first one since the last write; newer ones take its place.
    assert DEFER_SECONDS == 1.0 and times == [1.0, 2.2, 3.4]
    await queue.stop()


async def test_with_no_deferral_a_pending_reason_is_queued_at_once() -> None:
    writer = Writer()
    writer.gate.clear()
    queue = WriteQueue(writer.write, lambda c: None, parallelism=1, defer_seconds=0)
    reason, _ = pending_and_admitted()
    queue.submit([reason])
    await asyncio.sleep(0)
    assert queue.in_flight == 1
    writer.gate.set()
    await queue.idle()
    assert writer.order == [("Pending", "w")]
    await queue.stop()
