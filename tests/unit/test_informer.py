"""Informers against the in-memory API: list, watch from the list's version, re-list on 410 Gone
and after losing the watch, and a re-list that reports what was deleted meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from builders import cluster_queue, pending
from preemption_operator.api.kinds import ClusterQueue, Kind, Workload
from preemption_operator.k8s.informer import Informer
from unit.fake_api import FakeApi

WL = "/apis/kueue.x-k8s.io/v1beta2/workloads"

pytestmark = pytest.mark.looptime  # backoffs, retries and polls run on fake time


class Recorder:
    """A Handler keeping what an informer reports, as the cache would."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []

    def replace(self, kind: Kind, items: list[dict[str, Any]], resource_version: str) -> None:
        self.calls.append(("replace", resource_version))
        self.objects = {i["metadata"]["name"]: i for i in items}

    def event(self, kind: Kind, event_type: str, obj: dict[str, Any]) -> None:
        self.calls.append((event_type, obj["metadata"]["name"]))
        if event_type == "DELETED":
            self.objects.pop(obj["metadata"]["name"], None)
        else:
            self.objects[obj["metadata"]["name"]] = obj


@contextlib.asynccontextmanager
async def running(api: FakeApi, kind: Kind = Workload, **kwargs: Any) -> AsyncIterator[tuple[Informer, Recorder]]:
    handler = Recorder()
    informer = Informer(api, kind, handler, **kwargs)  # type: ignore[arg-type]
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 2)
        yield informer, handler
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def until(check: Callable[[], bool], timeout: float = 60.0) -> None:
    """Polls on the event loop's (fake) clock."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def test_list_then_watch_from_the_lists_version() -> None:
    api = FakeApi()
    api.put(pending("a", "q").obj())
    async with running(api) as (_, seen):
        assert set(seen.objects) == {"a"}
        await until(lambda: api.count("WATCH") == 1)
        api.put(pending("b", "q").obj())
        await until(lambda: "b" in seen.objects)
        assert seen.objects["b"]["kind"] == "Workload"  # list and watch items get their kind back
        api.remove("Workload", "a", "default")
        await until(lambda: "a" not in seen.objects)
    assert seen.calls[0][0] == "replace"


async def test_a_410_gone_relists_and_the_list_reports_deletes_missed_meanwhile() -> None:
    """Issue #11 (bold): after an API-server outage the watch cannot resume (410 Gone); objects
    deleted meanwhile must disappear from the cache, which only a re-list that *replaces* can do."""
    api = FakeApi()
    api.put(pending("a", "q").obj())
    api.put(pending("b", "q").obj())
    async with running(api) as (informer, seen):
        await until(lambda: api.count("WATCH") == 1)
        watchers = list(api._watchers)
        api._watchers.clear()  # the outage: these deletes never reach the watch
        api.remove("Workload", "a", "default")
        api._watchers.extend(watchers)
        api.send(WL, {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}})
        await until(lambda: informer.lists == 2)
        assert set(seen.objects) == {"b"}


async def test_a_lost_connection_resumes_the_watch_without_a_list() -> None:
    api = FakeApi()
    async with running(api) as (informer, seen):
        await until(lambda: api.count("WATCH") == 1)
        api.close_watches("FAIL")
        await until(lambda: api.count("WATCH") == 2)
        api.put(pending("late", "q").obj())
        await until(lambda: "late" in seen.objects)
        assert informer.lists == 1


async def test_relist_returns_after_a_list_that_started_after_the_call() -> None:
    api = FakeApi()
    async with running(api) as (informer, seen):
        await until(lambda: api.count("WATCH") == 1)
        api.put(pending("x", "q").obj())
        await asyncio.wait_for(informer.relist(), 2)
        assert informer.lists == 2 and "x" in seen.objects


async def test_a_kind_not_served_is_empty_until_its_crd_appears() -> None:
    """A missing CRD is neither a crash nor a cache that never syncs (issue #15 item 3)."""
    api = FakeApi()
    api.fail("LIST", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues", code=404, times=2)
    api.put(cluster_queue("cq", 1))
    async with running(api, ClusterQueue) as (informer, seen):
        assert informer.synced.is_set()
        await until(lambda: "cq" in seen.objects)
        assert informer.lists >= 3


async def test_the_periodic_relist_reconciles_drift() -> None:
    api = FakeApi()
    api.put(pending("a", "q").obj())
    async with running(api, relist_seconds=0.05) as (informer, seen):
        await until(lambda: api.count("WATCH") == 1)
        api._watchers.clear()  # a watch that silently stopped delivering
        api.remove("Workload", "a", "default")
        await until(lambda: informer.lists >= 2)
        assert seen.objects == {}
