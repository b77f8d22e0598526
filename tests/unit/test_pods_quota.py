"""`pods` quota and reclaimable pods (issue #12, items 5 and 10). A ClusterQueue that covers the
resource `pods` counts one per pod, as Kueue's flavor assigner does; pods a workload reports in
`status.reclaimablePods` (they finished) need no quota, pending or admitted (Kueue's
pkg/workload totalRequests).

The Kueue cases (flavorassigner_test.go, workload_test.go, named in comments) run through the
engine, `simulate` and the `simulate` command.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from builders import (
    NOW,
    PATHS,
    Obj,
    admitted,
    cache_of,
    cluster_queue,
    first_cycle,
    pending,
    resource_group,
    scenario,
    simulate,
    simulate_cli,
    with_reclaimable,
    with_resource_groups,
    workload,
)
from preemption_operator.api.objects import parse_object
from preemption_operator.engine.workload import build_info

FR_PODS = ("default", "pods")


def with_pods(name: str, pods: int, cpu: int = 10) -> Obj:
    """A ClusterQueue covering cpu and pods in flavor `default`."""
    return with_resource_groups(cluster_queue(name, 0), resource_group({"default": {"cpu": cpu, "pods": pods}}))


def usage(cpu: str, pods: int | None, count: int) -> Obj:
    flavors = {"cpu": "default", **({"pods": "default"} if pods is not None else {})}
    resource_usage = {"cpu": cpu, **({"pods": str(pods)} if pods is not None else {})}
    return {"name": "main", "flavors": flavors, "resourceUsage": resource_usage, "count": count}


# -- item 5: pods ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_num_pods_fit(path: str) -> None:
    # Kueue: "num pods fit": 3 pods in a queue of 3 pods.
    got = first_cycle(scenario([with_pods("cq", 3)], pending("wl", "cq", 1, count=3)), path)
    assert got.admitted == {"wl": [usage("3", 3, 3)]}


@pytest.mark.parametrize("path", PATHS)
def test_num_pods_dont_fit(path: str) -> None:
    # Kueue: "num pods don't fit": 3 pods in a queue of 2 pods, although cpu would fit.
    got = first_cycle(scenario([with_pods("cq", 2)], pending("wl", "cq", 1, count=3)), path)
    assert got.admitted == {}
    reason, message = got.pending["wl"]
    assert reason == "ExceedsMaxQuota"
    assert message.startswith("couldn't assign flavors to pod set main: insufficient quota for pods in flavor default")


@pytest.mark.parametrize("run", [simulate, simulate_cli], ids=["simulate", "cli"])
def test_a_pods_limit_is_never_over_admitted(run: object) -> None:
    """Four 1-cpu pods already run in a queue of 5 pods and plenty of cpu: of two 1-pod workloads
    one more is admitted, the other waits until pods finish."""
    objects = scenario(
        [with_pods("cq", 5, cpu=100)],
        admitted("running", "cq", 1, count=4, requests={"pods": 1}),
        pending("first", "cq", 1),
        pending("second", "cq", 1, created="2026-01-01T10:00:01Z"),
    )
    out = run(objects)
    assert [a["action"] for a in out.actions_of("first")] == ["Admitted"]
    assert "Admitted" not in [a["action"] for a in out.actions_of("second")]
    assert out.statuses["first"]["admission"]["podSetAssignments"] == [usage("1", 1, 1)]


@pytest.mark.parametrize("path", PATHS)
def test_the_victim_search_counts_pods(path: str) -> None:
    """Pods are what is short: a 2-pod preemptor in a queue of 2 pods needs both 1-pod workloads
    gone, although one would free enough cpu."""
    objects = scenario(
        [with_pods("cq", 2, cpu=100)],
        admitted("low-1", "cq", 1, priority=-1, requests={"pods": 1}),
        admitted("low-2", "cq", 1, priority=-1, requests={"pods": 1}),
        pending("in", "cq", 1, count=2, priority=1),
    )
    for obj in objects:
        if obj["kind"] == "ClusterQueue":
            obj["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    got = first_cycle(objects, path)
    assert got.preempted == {"low-1": "InClusterQueue", "low-2": "InClusterQueue"}


def test_pods_is_counted_whatever_the_containers_request() -> None:
    """Kueue sets the `pods` request to the pod count; a container asking for pods changes nothing."""
    wl = pending("wl", "cq", 1, count=2, requests={"pods": 7})
    got = first_cycle(scenario([with_pods("cq", 3)], wl), "engine")
    assert got.admitted == {"wl": [usage("2", 2, 2)]}


def test_pods_not_covered_are_not_counted() -> None:
    got = first_cycle(scenario([cluster_queue("cq", 10)], pending("wl", "cq", 1, count=3)), "engine")
    assert got.admitted == {"wl": [usage("3", None, 3)]}


def test_admitted_without_resource_usage_still_counts_its_pods() -> None:
    """An admission with flavors but no resourceUsage counts its requests times its count, and one
    `pods` per pod when `pods` has a flavor."""
    wl = admitted("old", "cq", 1, count=3).obj()
    psa = wl["status"]["admission"]["podSetAssignments"][0]
    del psa["resourceUsage"]
    psa["flavors"]["pods"] = "default"
    info = build_info(parse_object(wl), {})
    assert dict(info.usage) == {("default", "cpu"): 3000, FR_PODS: 3}


@pytest.mark.slow
@given(st.lists(st.integers(1, 4), min_size=1, max_size=5), st.integers(1, 12))
def test_pods_usage_equals_the_pod_count(counts: list[int], limit: int) -> None:
    """Until the cluster settles: every admitted workload holds one `pods` per pod, together never
    more than the limit, and every workload left pending has more pods than are left."""
    workloads = [pending(f"w{i}", "cq", 1, count=c, created=f"2026-01-01T10:00:{i:02d}Z") for i, c in enumerate(counts)]
    objects = scenario([with_pods("cq", limit, cpu=100)], *workloads)
    out = simulate(objects)
    held = 0
    for i, count in enumerate(counts):
        admission = out.statuses[f"w{i}"].get("admission")
        if admission is not None:
            (ps,) = admission["podSetAssignments"]
            assert ps["resourceUsage"] == {"cpu": str(count), "pods": str(count)}
            held += count
    assert held <= limit
    for i, count in enumerate(counts):
        if "admission" not in out.statuses[f"w{i}"]:
            assert count > limit - held
    # The usage the settled objects give (before a cycle: one would add what a preemptor without
    # victims holds back for the rest of it, as Kueue does).
    snapshot = cache_of(out.objects_after(objects)).snapshot(NOW)
    assert snapshot.cluster_queues["cq"].node.usage.get(FR_PODS, 0) == held


# -- item 10: reclaimable pods ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_pending_with_reclaimable_pods(path: str) -> None:
    # Kueue: "with reclaimable pods; reclaimablePods on" (flavorassigner_test.go): 5 pods, 2 of
    # them finished, in a queue of 3 pods: the 3 others are admitted.
    wl = with_reclaimable(pending("wl", "cq", 1, count=5), {"main": 2})
    got = first_cycle(scenario([with_pods("cq", 3)], wl), path)
    assert got.admitted == {"wl": [usage("3", 3, 3)]}


def test_admitted_with_reclaimable_pods_holds_only_the_others() -> None:
    # Kueue: "admitted with reclaim; reclaimablePods on" (workload_test.go) keeps count 3 of 5
    # with 2 reclaimable (3 do not exceed 5 - 2); with 4 reclaimable it holds 1 pod's worth.
    kept = with_reclaimable(admitted("a", "cq", "10m", count=5), {"main": 2}).obj()
    psa = kept["status"]["admission"]["podSetAssignments"][0]
    psa["count"], psa["resourceUsage"] = 3, {"cpu": "30m"}
    assert dict(build_info(parse_object(kept), {}).usage) == {("default", "cpu"): 30}
    shrunk = with_reclaimable(admitted("b", "cq", "10m", count=5), {"main": 4}).obj()
    info = build_info(parse_object(shrunk), {})
    assert dict(info.usage) == {("default", "cpu"): 10}
    assert [ps.count for ps in info.admitted_pod_sets] == [1]


def finished_pods_free_quota(reclaimable: int) -> list[Obj]:
    """A queue of 4 cpu runs 4 one-cpu pods, `reclaimable` of which finished; 2 cpu are wanted."""
    running = admitted("running", "cq", 1, count=4)
    if reclaimable:
        with_reclaimable(running, {"main": reclaimable})
    return scenario([cluster_queue("cq", 4)], running, pending("next", "cq", 2))


@pytest.mark.parametrize("path", PATHS)
def test_finished_pods_give_their_quota_back(path: str) -> None:
    got = first_cycle(finished_pods_free_quota(2), path)
    assert list(got.admitted) == ["next"]
    assert got.preempted == {}


@pytest.mark.parametrize("path", PATHS)
def test_without_reclaimable_pods_the_quota_stays_used(path: str) -> None:
    got = first_cycle(finished_pods_free_quota(0), path)
    assert got.admitted == {}
    assert got.pending["next"][0] == "WaitingForQuota"


def test_reclaimable_pods_lower_the_queue_usage() -> None:
    cache = cache_of(finished_pods_free_quota(3))
    node = cache.snapshot(NOW).cluster_queues["cq"].node
    assert node.usage == {("default", "cpu"): 1000}


def test_reclaimable_pods_are_validated() -> None:
    """status.reclaimablePods is a list of {name, count}: a negative count is refused."""
    wl = with_reclaimable(workload("w", queue="cq"), {"main": -1}).obj()
    with pytest.raises(ValueError, match="count"):
        parse_object(wl)


@given(st.integers(1, 20), st.integers(0, 25), st.data())
def test_reclaimable_pods_never_hold_more_than_the_pods_left(count: int, reclaimable: int, data: st.DataObject) -> None:
    """Pending, a pod set asks for its pods minus the reclaimable ones (never below 0); admitted
    with `admitted` pods, it holds the smaller of that and what is left, per pod as admitted."""
    admitted_count = data.draw(st.integers(1, count))
    left = count - min(reclaimable, count)
    pending_wl = with_reclaimable(pending("p", "cq", "100m", count=count), {"main": reclaimable}).obj()
    (request,) = build_info(parse_object(pending_wl), {}).pod_sets
    assert request.count == left
    wl = with_reclaimable(admitted("a", "cq", "100m", count=count), {"main": reclaimable}).obj()
    psa = wl["status"]["admission"]["podSetAssignments"][0]
    psa["count"], psa["resourceUsage"] = admitted_count, {"cpu": f"{100 * admitted_count}m"}
    info = build_info(parse_object(wl), {})
    held = min(admitted_count, left)
    assert dict(info.usage) == {("default", "cpu"): 100 * held}
    assert [ps.count for ps in info.admitted_pod_sets] == [held]


class _Waker:
    def __init__(self) -> None:
        self.released: list[str] = []

    def poke(self) -> None:
        pass

    def quota_released(self, cluster_queue: str) -> None:
        self.released.append(cluster_queue)

    def config_changed(self) -> None:
        pass


@pytest.mark.parametrize(("reclaimable", "released"), [(2, ["cq"]), (0, [])])
def test_the_operator_looks_again_at_parked_workloads_when_pods_finish(reclaimable: int, released: list[str]) -> None:
    """Kueue's workload controller requeues inadmissible workloads when an admitted workload's
    reclaimablePods change; here the feeder reports the quota given back (and nothing when only
    the resourceVersion changed)."""
    from preemption_operator.controller.feeder import CacheFeeder
    from preemption_operator.engine.cache import Cache

    waker = _Waker()
    feeder = CacheFeeder(Cache(), waker)
    for body in finished_pods_free_quota(0):
        body.setdefault("metadata", {})["resourceVersion"] = "1"
        feeder.ingest(body["kind"], body)
    update = admitted("running", "cq", 1, count=4)
    if reclaimable:
        with_reclaimable(update, {"main": reclaimable})
    body = update.obj()
    body["metadata"]["resourceVersion"] = "2"
    feeder.ingest("Workload", body)
    assert waker.released == released
