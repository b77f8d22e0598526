"""EventRecorder: client-go's Event correlation (dedupe, aggregation, spam filter) and its posting queue."""

from __future__ import annotations

import asyncio
import copy
import logging
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx2 as httpx
import pytest

from preemption_operator.k8s import events
from preemption_operator.k8s.api import ApiError
from preemption_operator.k8s.events import (
    AGGREGATE_AFTER,
    COMBINED_PREFIX,
    MAX_LRU_ENTRIES,
    SPAM_BURST,
    EventRecorder,
    Lru,
)

KUEUE = "kueue.x-k8s.io/v1beta2"
PATH = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/events(?:/(?P<name>[^/]+))?$")

pytestmark = pytest.mark.looptime  # timeouts and drains run on fake time


class FakeApi:
    """Events in memory; every request is recorded; `failures` are raised by the next requests."""

    def __init__(self) -> None:
        self.events: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        self.failures: list[BaseException] = []
        self.gate: asyncio.Event | None = None  # when set up, requests wait for it
        self.delay = 0.0

    async def _enter(self, method: str, path: str, data: dict[str, Any]) -> re.Match[str]:
        self.requests.append((method, path, copy.deepcopy(data)))
        if self.gate is not None:
            await self.gate.wait()
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.failures:
            raise self.failures.pop(0)
        match = PATH.match(path)
        assert match, path
        return match

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        match = await self._enter("POST", path, body)
        assert match["name"] is None
        assert body["metadata"]["namespace"] == match["ns"]
        key = (match["ns"], body["metadata"]["name"])
        if key in self.events:
            raise ApiError(409, "AlreadyExists", f"events {key[1]} already exists")
        self.events[key] = copy.deepcopy(body)
        return body

    async def patch_merge(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        match = await self._enter("PATCH", path, patch)
        key = (match["ns"], match["name"])
        if key not in self.events:
            raise ApiError(404, "NotFound", f"events {key[1]} not found")
        self.events[key].update(patch)
        return self.events[key]

    def methods(self) -> list[str]:
        return [method for method, _, _ in self.requests]

    def only(self) -> dict[str, Any]:
        assert len(self.events) == 1, list(self.events)
        return next(iter(self.events.values()))


class Clock:
    """A monotonic clock and a wall clock that move together."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.start = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)

    def __call__(self) -> float:
        return self.t

    def wall(self) -> datetime:
        return self.start + timedelta(seconds=self.t - 1000.0)

    def advance(self, seconds: float) -> None:
        self.t += seconds


def workload(name: str = "wl", namespace: str | None = "team", uid: str = "uid-1") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": uid, "resourceVersion": "42"}
    if namespace:
        meta["namespace"] = namespace
    return {"metadata": meta, "spec": {}}


def recorder(api: FakeApi, clock: Clock, **kwargs: Any) -> EventRecorder:
    return EventRecorder(api, "preemption-operator", clock=clock, wall_clock=clock.wall, instance="pod-0", **kwargs)


def test_numbers_are_client_gos() -> None:
    # k8s.io/client-go/tools/record/events_cache.go
    assert events.MAX_LRU_ENTRIES == 4096
    assert (events.AGGREGATE_AFTER, events.AGGREGATE_WINDOW) == (10, 600.0)
    assert (events.SPAM_BURST, events.SPAM_REFILL_SECONDS) == (25, 300.0)
    assert events.COMBINED_PREFIX == "(combined from similar events): "


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def clock() -> Clock:
    return Clock()


async def test_repeated_identical_event_is_one_event_counted_up_by_patch(api: FakeApi, clock: Clock) -> None:
    rec = recorder(api, clock)
    wl = workload()
    for _ in range(3):
        rec.record(wl, "Workload", KUEUE, "Normal", "Pending", "waiting for quota")
        await rec.drain(1.0)
        clock.advance(7)

    assert api.methods() == ["POST", "PATCH", "PATCH"]
    assert [data["count"] for _, _, data in api.requests] == [1, 2, 3]
    event = api.only()
    name = event["metadata"]["name"]
    assert re.fullmatch(r"wl\.[0-9a-f]{16}", name)
    assert api.requests[1][1] == f"/api/v1/namespaces/team/events/{name}"
    assert event["count"] == 3
    assert event["firstTimestamp"] == "2025-03-01T12:00:00Z"
    assert event["lastTimestamp"] == "2025-03-01T12:00:14Z"
    assert api.requests[1][2] == {"count": 2, "lastTimestamp": "2025-03-01T12:00:07Z", "message": "waiting for quota"}
    assert event["involvedObject"] == {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "name": "wl",
        "namespace": "team",
        "uid": "uid-1",
        "resourceVersion": "42",
    }
    assert event["metadata"]["namespace"] == "team"
    assert (event["type"], event["reason"], event["message"]) == ("Normal", "Pending", "waiting for quota")
    assert event["source"] == {"component": "preemption-operator"}
    assert (event["reportingComponent"], event["reportingInstance"]) == ("preemption-operator", "pod-0")
    assert (rec.posted, rec.patched, rec.dropped) == (1, 2, 0)


async def test_different_reasons_and_objects_are_different_events(api: FakeApi, clock: Clock) -> None:
    rec = recorder(api, clock)
    # Same object, same instant: the names must still differ.
    rec.record(workload(), "Workload", KUEUE, "Normal", "QuotaReserved", "Quota reserved in ClusterQueue cq")
    rec.record(workload(), "Workload", KUEUE, "Normal", "Admitted", "Admitted by ClusterQueue cq")
    rec.record(workload("other", uid="uid-2"), "Workload", KUEUE, "Normal", "Admitted", "Admitted by ClusterQueue cq")
    await rec.drain(1.0)
    assert api.methods() == ["POST"] * 3
    assert len(api.events) == 3
    assert sorted(e["reason"] for e in api.events.values()) == ["Admitted", "Admitted", "QuotaReserved"]


async def test_cluster_scoped_object_goes_to_default_namespace_and_long_message_is_clipped(
    api: FakeApi, clock: Clock
) -> None:
    rec = recorder(api, clock)
    rec.record(workload("cq", namespace=None), "ClusterQueue", KUEUE, "Warning", "InvalidSpec", "x" * 5000)
    await rec.drain(1.0)
    (namespace, _), event = next(iter(api.events.items()))
    assert namespace == "default"
    assert "namespace" not in event["involvedObject"]
    assert len(event["message"]) == 1024
    assert event["message"].endswith(" ...")


async def test_similar_events_are_combined_after_ten_messages(api: FakeApi, clock: Clock) -> None:
    rec = recorder(api, clock)
    wl = workload()
    for i in range(AGGREGATE_AFTER + 2):
        rec.record(wl, "Workload", KUEUE, "Warning", "Pending", f"message {i}")
        await rec.drain(1.0)
        clock.advance(50)  # 12 events in 10 minutes

    # Nine events of their own, then one combined Event patched for each further message.
    assert api.methods() == ["POST"] * AGGREGATE_AFTER + ["PATCH", "PATCH"]
    combined = [e for e in api.events.values() if e["message"].startswith(COMBINED_PREFIX)]
    assert len(api.events) == AGGREGATE_AFTER
    assert len(combined) == 1
    assert combined[0]["message"] == COMBINED_PREFIX + f"message {AGGREGATE_AFTER + 1}"
    assert combined[0]["count"] == 3
    assert combined[0]["reason"] == "Pending"
    assert api.requests[-1][2]["message"] == COMBINED_PREFIX + f"message {AGGREGATE_AFTER + 1}"


async def test_a_combining_group_remembers_no_more_than_ten_messages(api: FakeApi, clock: Clock) -> None:
    rec = recorder(api, clock)
    for i in range(200):
        rec.record(workload(), "Workload", KUEUE, "Warning", "Pending", f"message {i}")
        clock.advance(1)
    await rec.drain(1.0)
    (group,) = rec.groups.values()
    assert len(group.messages) < AGGREGATE_AFTER
    # 9 events of their own, then one combined Event; the spam filter let 25 occurrences through.
    assert len(api.events) == AGGREGATE_AFTER
    (combined,) = (e for e in api.events.values() if e["message"].startswith(COMBINED_PREFIX))
    assert combined["count"] == SPAM_BURST - (AGGREGATE_AFTER - 1)
    # The held-back ones were counted all the same: the next one to pass carries them all.
    clock.advance(300)
    rec.record(workload(), "Workload", KUEUE, "Warning", "Pending", "message 200")
    await rec.drain(1.0)
    assert combined["count"] == 201 - (AGGREGATE_AFTER - 1)
    assert combined["message"] == COMBINED_PREFIX + "message 200"


async def test_similar_events_more_than_ten_minutes_apart_are_not_combined(api: FakeApi, clock: Clock) -> None:
    rec = recorder(api, clock)
    for i in range(AGGREGATE_AFTER + 2):
        rec.record(workload(), "Workload", KUEUE, "Warning", "Pending", f"message {i}")
        clock.advance(601)
    await rec.drain(1.0)
    assert len(api.events) == AGGREGATE_AFTER + 2
    assert not any(e["message"].startswith(COMBINED_PREFIX) for e in api.events.values())


async def test_spam_filter_allows_a_burst_then_one_event_per_five_minutes(api: FakeApi, clock: Clock) -> None:
    rec = recorder(api, clock)
    wl = workload()

    def emit(reason: str) -> None:
        rec.record(wl, "Workload", KUEUE, "Normal", reason, "msg")

    for i in range(SPAM_BURST + 3):
        emit(f"Reason{i}")
    await rec.drain(1.0)
    assert len(api.events) == SPAM_BURST
    assert rec.filtered == 3

    # Another object has its own bucket.
    rec.record(workload("other", uid="uid-2"), "Workload", KUEUE, "Normal", "Reason0", "msg")
    await rec.drain(1.0)
    assert len(api.events) == SPAM_BURST + 1

    clock.advance(299)
    emit("Late1")
    await rec.drain(1.0)
    assert len(api.events) == SPAM_BURST + 1
    clock.advance(1)  # 300 s since the bucket was empty: one token
    emit("Late2")
    emit("Late3")
    await rec.drain(1.0)
    reasons = {e["reason"] for e in api.events.values()}
    assert "Late2" in reasons
    assert not {"Late1", "Late3"} & reasons
    assert rec.filtered == 5


async def test_held_back_repetitions_still_add_to_the_count(api: FakeApi, clock: Clock) -> None:
    rec = recorder(api, clock)
    for _ in range(SPAM_BURST + 2):
        rec.record(workload(), "Workload", KUEUE, "Normal", "Pending", "waiting")
        await rec.drain(1.0)
    assert api.only()["count"] == SPAM_BURST
    clock.advance(300)
    rec.record(workload(), "Workload", KUEUE, "Normal", "Pending", "waiting")
    await rec.drain(1.0)
    assert api.only()["count"] == SPAM_BURST + 3


async def test_full_queue_drops_and_counts(api: FakeApi, clock: Clock) -> None:
    rec = recorder(api, clock, queue_size=3)
    for i in range(5):
        rec.record(workload(f"wl{i}", uid=f"u{i}"), "Workload", KUEUE, "Normal", "Admitted", "ok")
    assert (rec.queued, rec.dropped) == (3, 2)
    await rec.drain(1.0)
    assert sorted(e["involvedObject"]["name"] for e in api.events.values()) == ["wl0", "wl1", "wl2"]
    assert len(api.events) == 3
    assert (rec.posted, rec.dropped) == (3, 2)


async def test_updates_of_a_queued_event_are_merged_not_dropped(api: FakeApi, clock: Clock) -> None:
    rec = recorder(api, clock, queue_size=1)
    for _ in range(3):
        rec.record(workload(), "Workload", KUEUE, "Normal", "Pending", "waiting")
        clock.advance(1)
    assert (rec.queued, rec.dropped) == (1, 0)
    await rec.drain(1.0)
    assert api.methods() == ["POST"]
    event = api.only()
    assert event["count"] == 3
    assert (event["firstTimestamp"], event["lastTimestamp"]) == ("2025-03-01T12:00:00Z", "2025-03-01T12:00:02Z")


async def test_patch_of_a_vanished_event_creates_it_again(api: FakeApi, clock: Clock) -> None:
    rec = recorder(api, clock)
    rec.record(workload(), "Workload", KUEUE, "Normal", "Pending", "waiting")
    await rec.drain(1.0)
    ((key, first),) = api.events.items()
    del api.events[key]  # expired (the API server's event TTL)
    clock.advance(3600)
    rec.record(workload(), "Workload", KUEUE, "Normal", "Pending", "waiting")
    await rec.drain(1.0)

    assert api.methods() == ["POST", "PATCH", "POST"]
    event = api.only()
    assert event["metadata"]["name"] == first["metadata"]["name"]
    assert event["count"] == 2
    assert event["firstTimestamp"] == first["firstTimestamp"]
    assert event["lastTimestamp"] == "2025-03-01T13:00:00Z"
    assert (rec.posted, rec.patched, rec.failed) == (2, 0, 0)


async def test_fence_drops_queued_events_of_a_former_leader(api: FakeApi, clock: Clock) -> None:
    leader = [True]
    rec = recorder(api, clock, fence=lambda: leader[0])
    rec.record(workload(), "Workload", KUEUE, "Normal", "Pending", "waiting")
    leader[0] = False  # lost the lease while the event was queued
    await rec.drain(1.0)
    assert api.requests == []
    assert (rec.fenced, rec.posted) == (1, 0)

    leader[0] = True
    rec.record(workload(), "Workload", KUEUE, "Normal", "Pending", "waiting")
    await rec.drain(1.0)
    assert api.methods() == ["PATCH", "POST"]  # never created: the patch finds nothing
    assert api.only()["count"] == 2

    leader[0] = False
    rec.record(workload(), "Workload", KUEUE, "Normal", "Pending", "waiting")
    await rec.drain(1.0)
    assert api.methods() == ["PATCH", "POST"]  # the patch is fenced too
    assert (rec.fenced, api.only()["count"]) == (2, 2)


async def test_no_event_is_sent_into_a_namespace_being_deleted(api: FakeApi, clock: Clock) -> None:
    """The API server refuses new Events in a terminating namespace (403): none is sent, and the
    cluster-scoped objects' Events (namespace "default") are unaffected."""
    rec = recorder(api, clock, closing=lambda namespace: namespace == "gone")
    rec.record(workload(namespace="gone"), "Workload", KUEUE, "Normal", "Pending", "waiting")
    rec.record(workload(namespace=None), "ClusterQueue", KUEUE, "Warning", "Invalid", "bad")
    rec.record(workload(namespace="team"), "Workload", KUEUE, "Normal", "Pending", "waiting")
    await rec.drain(1.0)
    assert sorted(ns for ns, _ in api.events) == ["default", "team"]
    assert (rec.closed, rec.posted) == (1, 2)


async def test_fence_is_asked_again_before_recreating_after_a_404(api: FakeApi, clock: Clock) -> None:
    answers = iter([True, True, False])
    rec = recorder(api, clock, fence=lambda: next(answers))
    rec.record(workload(), "Workload", KUEUE, "Normal", "Pending", "waiting")
    await rec.drain(1.0)
    api.events.clear()
    rec.record(workload(), "Workload", KUEUE, "Normal", "Pending", "waiting")
    await rec.drain(1.0)
    assert api.methods() == ["POST", "PATCH"]
    assert (api.events, rec.fenced) == ({}, 1)


async def test_failing_api_does_not_stop_run(api: FakeApi, clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    rec = recorder(api, clock)
    api.failures = [
        ApiError(500, "InternalError", "etcd is sad"),
        httpx.ConnectError("connection refused"),
        RuntimeError("a bug"),
    ]
    task = asyncio.create_task(rec.run())
    try:
        with caplog.at_level(logging.DEBUG, logger="preemption_operator.k8s.events"):
            for i in range(3):
                rec.record(workload(f"wl{i}", uid=f"u{i}"), "Workload", KUEUE, "Warning", "Bad", "bad")
            await rec.drain(1.0)
            assert rec.failed == 3
            assert api.events == {}
            assert not task.done()

            rec.record(workload("fine"), "Workload", KUEUE, "Normal", "Admitted", "ok")
            await rec.drain(1.0)
            assert [e["involvedObject"]["name"] for e in api.events.values()] == ["fine"]
            assert not task.done()
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1  # the others fell within the same minute
        assert "etcd is sad" in warnings[0].getMessage()
        assert sum("connection refused" in r.getMessage() or "a bug" in r.getMessage() for r in caplog.records) == 2

        clock.advance(61)
        api.failures = [ApiError(403, "Forbidden", "events is forbidden")]
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="preemption_operator.k8s.events"):
            rec.record(workload("denied"), "Workload", KUEUE, "Normal", "Admitted", "ok")
            await rec.drain(1.0)
        (warning,) = caplog.records
        assert "2 more failures" in warning.getMessage()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_run_posts_in_the_background_and_keeps_requests_for_one_event_in_order(
    api: FakeApi, clock: Clock
) -> None:
    rec = recorder(api, clock, parallelism=2)
    api.gate = asyncio.Event()
    task = asyncio.create_task(rec.run())
    try:
        rec.record(workload(), "Workload", KUEUE, "Normal", "Pending", "waiting")
        for _ in range(10):
            await asyncio.sleep(0)
        assert api.methods() == ["POST"]  # in flight
        rec.record(workload(), "Workload", KUEUE, "Normal", "Pending", "waiting")
        for _ in range(10):
            await asyncio.sleep(0)
        assert api.methods() == ["POST"]  # the idle worker must not patch an Event not created yet
        api.gate.set()
        async with asyncio.timeout(1.0):
            while rec.patched < 1:
                await asyncio.sleep(0.001)
        assert api.methods() == ["POST", "PATCH"]
        assert api.only()["count"] == 2
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_drain_posts_what_is_queued_within_its_timeout(api: FakeApi, clock: Clock) -> None:
    rec = recorder(api, clock, parallelism=2)
    for i in range(6):
        rec.record(workload(f"wl{i}", uid=f"u{i}"), "Workload", KUEUE, "Normal", "Admitted", "ok")
    api.delay = 0.01
    await rec.drain(5.0)
    assert len(api.events) == 6
    assert rec.queued == 0

    slow = FakeApi()
    slow.gate = asyncio.Event()  # never opens
    rec = recorder(slow, clock)
    for i in range(3):
        rec.record(workload(f"wl{i}", uid=f"u{i}"), "Workload", KUEUE, "Normal", "Admitted", "ok")
    loop = asyncio.get_running_loop()
    started = loop.time()
    await rec.drain(0.1)
    assert loop.time() - started < 1.0
    assert slow.events == {}
    assert rec.posted == 0


async def test_drain_waits_for_requests_in_flight_elsewhere(api: FakeApi, clock: Clock) -> None:
    rec = recorder(api, clock)
    api.gate = asyncio.Event()
    task = asyncio.create_task(rec.run())
    try:
        rec.record(workload(), "Workload", KUEUE, "Normal", "Pending", "waiting")
        for _ in range(10):
            await asyncio.sleep(0)
        assert api.methods() == ["POST"]  # run() has it in flight
        rec.record(workload(), "Workload", KUEUE, "Normal", "Pending", "waiting")  # queued behind it
        api.delay = 0.01  # the patch, too, takes a while
        asyncio.get_running_loop().call_later(0.05, api.gate.set)
        await rec.drain(1.0)
        assert (rec.posted, rec.patched, rec.queued) == (1, 1, 0)
        assert api.only()["count"] == 2
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_drain_after_run_was_cancelled_mid_request(api: FakeApi, clock: Clock) -> None:
    rec = recorder(api, clock)
    api.gate = asyncio.Event()
    task = asyncio.create_task(rec.run())
    rec.record(workload(), "Workload", KUEUE, "Normal", "Pending", "waiting")
    for _ in range(10):
        await asyncio.sleep(0)
    rec.record(workload(), "Workload", KUEUE, "Normal", "Pending", "waiting")  # waits behind the POST
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    api.gate.set()
    await rec.drain(1.0)
    # The cancelled POST never landed: the queued patch finds nothing and creates the Event.
    assert api.methods() == ["POST", "PATCH", "POST"]
    assert api.only()["count"] == 2


async def test_record_never_raises(api: FakeApi, clock: Clock) -> None:
    rec = recorder(api, clock)
    rec.record({"metadata": None}, "Workload", KUEUE, "Normal", "Pending", "no metadata")
    rec.record({}, "Workload", KUEUE, "Bogus", "Pending", "not a valid type")
    await rec.drain(1.0)
    (event,) = api.events.values()
    assert re.fullmatch(r"object\.[0-9a-f]{16}", event["metadata"]["name"])
    assert event["metadata"]["namespace"] == "default"


def test_lru_forgets_the_least_recently_used() -> None:
    lru: Lru[str, int] = Lru(3)
    for key, value in [("a", 1), ("b", 2), ("c", 3)]:
        lru.put(key, value)
    assert lru.get("a") == 1  # now the most recent
    lru.put("d", 4)
    assert len(lru) == 3
    assert lru.get("b") is None
    assert [lru.get(k) for k in "acd"] == [1, 3, 4]


async def test_memory_stays_bounded(api: FakeApi, clock: Clock) -> None:
    n = MAX_LRU_ENTRIES + 500
    rec = recorder(api, clock, queue_size=n)
    for i in range(n):
        rec.record(workload(f"wl{i}", uid=f"u{i}"), "Workload", KUEUE, "Normal", "Admitted", "ok")
        assert max(len(rec.seen), len(rec.groups), len(rec.buckets)) <= MAX_LRU_ENTRIES
    assert len(rec.seen) == len(rec.groups) == len(rec.buckets) == MAX_LRU_ENTRIES
    await rec.drain(10.0)
    assert rec.posted == n

    # The newest object is still known: its repeat is a patch. The oldest was forgotten: a new Event.
    rec.record(workload(f"wl{n - 1}", uid=f"u{n - 1}"), "Workload", KUEUE, "Normal", "Admitted", "ok")
    rec.record(workload("wl0", uid="u0"), "Workload", KUEUE, "Normal", "Admitted", "ok")
    await rec.drain(1.0)
    assert api.methods()[-2:] == ["PATCH", "POST"]
    assert sum(e["involvedObject"]["name"] == "wl0" for e in api.events.values()) == 2
    assert max(len(rec.seen), len(rec.groups), len(rec.buckets)) <= MAX_LRU_ENTRIES
