"""The queue manager keeps its routes between snapshots and routes again only what changed
(engine/queues.py): whatever comes and goes in whatever order, a snapshot's pending workloads per
ClusterQueue, their order, their shapes and the unqueued ones with their reasons are what a cache
that has only ever seen the end state routes."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import as_dict, cache_of, cluster_queue, local_queue, namespace, pending, resource_flavor
from preemption_operator.api.objects import parse_object
from preemption_operator.engine.cache import Cache
from preemption_operator.engine.snapshot import Snapshot

NOW = datetime(2026, 12, 5, tzinfo=UTC)
NAMESPACES = ("ns-a", "ns-b")
QUEUES = ("cq-1", "cq-2", "cq-gone")
LOCAL_QUEUES = ("lq-1", "lq-2", "lq-x")

Key = tuple[str, str, str]  # kind, namespace, name


def _cq(name: str, team_only: bool) -> dict[str, Any]:
    body = cluster_queue(name, 10)
    if team_only:
        body["spec"]["namespaceSelector"] = {"matchLabels": {"team": "a"}}
    return body


def _lq(name: str, ns: str, target: str, stopped: bool, status: int) -> dict[str, Any]:
    body = local_queue(name, target, namespace=ns)
    if stopped:
        body["spec"]["stopPolicy"] = "Hold"
    body["status"] = {"pendingWorkloads": status}  # a status write: nothing routing reads
    return body


def _workload(name: str, lq: str, ns: str, priority: int, age: int, active: bool, cpu: int) -> dict[str, Any]:
    body = as_dict(pending(name, lq, cpu, namespace=ns, priority=priority, created=NOW - timedelta(seconds=age)))
    if not active:
        body["spec"]["active"] = False
    return body


OPERATIONS = st.one_of(
    st.tuples(
        st.just("workload"),
        st.sampled_from(["w1", "w2", "w3", "w4", "w5", "w6"]),
        st.sampled_from(LOCAL_QUEUES),
        st.sampled_from(NAMESPACES),
        st.integers(0, 2),
        st.integers(0, 3),
        st.booleans(),
        st.integers(1, 2),
    ),
    st.tuples(
        st.just("delete workload"), st.sampled_from(["w1", "w2", "w3", "w4", "w5", "w6"]), st.sampled_from(NAMESPACES)
    ),
    st.tuples(
        st.just("local queue"),
        st.sampled_from(LOCAL_QUEUES),
        st.sampled_from(NAMESPACES),
        st.sampled_from(QUEUES),
        st.booleans(),
        st.integers(0, 3),
    ),
    st.tuples(st.just("delete local queue"), st.sampled_from(LOCAL_QUEUES), st.sampled_from(NAMESPACES)),
    st.tuples(st.just("cluster queue"), st.sampled_from(QUEUES[:2]), st.booleans()),
    st.tuples(st.just("delete cluster queue"), st.sampled_from(QUEUES[:2])),
    st.tuples(st.just("namespace"), st.sampled_from(NAMESPACES), st.booleans()),
    st.tuples(
        st.just("snapshot"),
    ),
)


def _apply(cache: Cache, objects: dict[Key, dict[str, Any]], op: tuple[Any, ...]) -> None:
    kind = op[0]
    body: dict[str, Any] | None = None
    key: Key
    if kind == "workload":
        _, name, lq, ns, priority, age, active, cpu = op
        key, body = ("Workload", ns, name), _workload(name, lq, ns, priority, age, active, cpu)
    elif kind == "delete workload":
        key = ("Workload", op[2], op[1])
    elif kind == "local queue":
        _, name, ns, target, stopped, status = op
        key, body = ("LocalQueue", ns, name), _lq(name, ns, target, stopped, status)
    elif kind == "delete local queue":
        key = ("LocalQueue", op[2], op[1])
    elif kind == "cluster queue":
        key, body = ("ClusterQueue", "", op[1]), _cq(op[1], op[2])
    elif kind == "delete cluster queue":
        key = ("ClusterQueue", "", op[1])
    elif kind == "namespace":
        key, body = ("Namespace", "", op[1]), namespace(op[1], {"team": "a"} if op[2] else {})
    else:
        cache.snapshot(NOW)  # routes in between, so that later ones route what changed since
        return
    if body is None:
        if objects.pop(key, None) is not None:
            cache.delete(key[0], f"{key[1]}/{key[2]}" if key[1] else key[2])
        return
    objects[key] = body
    cache.upsert(parse_object(copy.deepcopy(body)))


def _routed(snapshot: Snapshot) -> dict[str, Any]:
    """What routing gives a snapshot, in comparable form."""
    return {
        "pending": {cq: [wl.key for wl in wls] for cq, wls in snapshot.pending.items()},
        "keys": {cq: snapshot.pending_keys(cq) for cq in snapshot.pending},
        "unqueued": [(wl.key, reason, message) for wl, reason, message in snapshot.unqueued],
        "shapes": {
            cq: {shape: set().union(*(g.get(shape, ()) for g in groups)) for shape in set().union(*groups)}
            for cq, groups in snapshot.shapes.items()
        },
    }


def _start() -> dict[Key, dict[str, Any]]:
    objects: dict[Key, dict[str, Any]] = {("ResourceFlavor", "", "default"): resource_flavor("default")}
    for ns in NAMESPACES:
        objects[("Namespace", "", ns)] = namespace(ns, {"team": "a"} if ns == "ns-a" else {})
    objects[("ClusterQueue", "", "cq-1")] = _cq("cq-1", False)
    objects[("ClusterQueue", "", "cq-2")] = _cq("cq-2", True)
    objects[("LocalQueue", "ns-a", "lq-1")] = _lq("lq-1", "ns-a", "cq-1", False, 0)
    objects[("LocalQueue", "ns-b", "lq-1")] = _lq("lq-1", "ns-b", "cq-1", False, 0)
    objects[("LocalQueue", "ns-a", "lq-2")] = _lq("lq-2", "ns-a", "cq-2", False, 0)
    objects[("LocalQueue", "ns-b", "lq-2")] = _lq("lq-2", "ns-b", "cq-2", False, 0)
    return objects


@settings(max_examples=300, deadline=None)
@given(st.lists(OPERATIONS, max_size=40))
def test_routes_kept_between_snapshots_are_those_of_a_fresh_cache(operations: list[tuple[Any, ...]]) -> None:
    objects = _start()
    cache = cache_of(copy.deepcopy(list(objects.values())))
    cache.snapshot(NOW)
    for op in operations:
        _apply(cache, objects, op)
        fresh = cache_of(copy.deepcopy(list(objects.values())))
        assert _routed(cache.snapshot(NOW)) == _routed(fresh.snapshot(NOW)), op
        for cq in QUEUES:  # a visibility request reads the same kept routes
            mine, theirs = cache.pending_in(cq), fresh.pending_in(cq)
            assert [wl.key for wl in mine or []] == [wl.key for wl in theirs or []], (op, cq)


def test_a_snapshot_keeps_the_pending_lists_it_was_given_when_workloads_come_later() -> None:
    objects = _start()
    cache = cache_of(list(objects.values()))
    cache.upsert(parse_object(_workload("w1", "lq-1", "ns-a", 0, 1, True, 1)))
    first = cache.snapshot(NOW)
    cache.upsert(parse_object(_workload("w2", "lq-1", "ns-a", 5, 1, True, 1)))
    cache.upsert(parse_object(_workload("w3", "lq-1", "ns-b", 0, 2, True, 1)))
    second = cache.snapshot(NOW)
    assert [wl.key for wl in first.pending["cq-1"]] == ["ns-a/w1"]
    assert first.pending_keys("cq-1") == ["ns-a/w1"]
    # Higher priority first, then older: one ClusterQueue fed by two LocalQueues, merged.
    assert [wl.key for wl in second.pending["cq-1"]] == ["ns-a/w2", "ns-b/w3", "ns-a/w1"]
