"""Each LocalQueue's pending workloads are kept in queue order (and indexed by shape) as they
come, change and go, instead of sorted again for every change: the order a snapshot routes must
equal sorting the pending workloads from scratch, and the index must say what the order says."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import NOW, T0, cache_of, cluster_queue, parse, pending, scenario
from preemption_operator.engine.ordering import queue_order

NAMES = [f"w{i}" for i in range(8)]

operations = st.lists(
    st.tuples(
        st.sampled_from(["upsert", "upsert", "deactivate", "delete"]),
        st.sampled_from(NAMES),
        st.integers(min_value=0, max_value=3),  # priority
        st.integers(min_value=0, max_value=3),  # seconds after T0
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(operations)
def test_the_routed_order_equals_a_fresh_sort_after_any_changes(ops: list[tuple[str, str, int, int]]) -> None:
    cache = cache_of(scenario([cluster_queue("cq", 1)]))
    cache.snapshot(NOW)  # the order is kept from here on
    for op, name, priority, seconds in ops:
        key = f"default/{name}"
        if op == "delete":
            if key in cache.infos:
                cache.delete("Workload", key)
            continue
        obj = pending(name, "cq", 1, priority=priority, created=T0 + timedelta(seconds=seconds)).obj()
        if op == "deactivate":
            obj["spec"]["active"] = False
        cache.upsert(*parse([obj]))
        snapshot = cache.snapshot(NOW)
        routed = snapshot.pending.get("cq", [])
        expected = sorted((i for i in cache.infos.values() if i.cluster_queue is None and i.active), key=queue_order)
        assert [i.key for i in routed] == [i.key for i in expected]
        assert all(a is b for a, b in zip(routed, expected, strict=True))  # the current versions
        assert snapshot.pending_keys("cq") == [i.key for i in expected]
        # The shape index a failed head parks its equals from says what the list says.
        for shape in {i.shape for i in cache.infos.values()}:
            assert snapshot.pending_of_shape("cq", shape) == {i.key for i in expected if i.shape == shape}


@settings(max_examples=100, deadline=None)
@given(
    st.integers(min_value=1, max_value=4),
    st.integers(min_value=0, max_value=5),
    st.booleans(),
)
def test_a_status_write_reuses_the_requests_and_builds_what_a_fresh_build_builds(
    count: int, reclaimed: int, admitted_too: bool
) -> None:
    """A new version that shares its spec (a status write) takes the pods' requests from the
    previous version's info; what it builds must equal building it from nothing, reclaimable
    pods (which lower the counts) included."""
    from preemption_operator.engine.workload import build_info

    builder = pending("w", "cq", "500m", count=count)
    (first,) = parse([builder.obj()])
    before = build_info(first, {})
    (admitted,) = parse([builder.admitted("cq").obj()])
    status: dict[str, object] = {"reclaimablePods": [{"name": "main", "count": min(reclaimed, count)}]}
    if admitted_too:
        status = {**admitted.status.to_wire(), **status}
    second = first.model_copy(update={"status": type(admitted.status).model_validate(status)})
    assert second.spec is first.spec
    reused, fresh = build_info(second, {}, before), build_info(second, {})
    assert {f.name: getattr(reused, f.name) for f in dataclasses.fields(reused)} == {
        f.name: getattr(fresh, f.name) for f in dataclasses.fields(fresh)
    }
