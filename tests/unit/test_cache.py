"""The cache as the operator uses it: versions and tombstones, lists that replace, decisions
assumed while their writes are in flight, narrow invalidation, and objects that cannot be read."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import (
    NAMESPACE,
    NOW,
    T0,
    admitted,
    as_dict,
    cluster_queue,
    local_queue,
    namespace,
    one_cycle,
    parse,
    pending,
    resource_flavor,
    scenario,
    workload,
    workload_priority_class,
)
from preemption_operator.api import kinds
from preemption_operator.api.objects import parse_object
from preemption_operator.api.v1beta2 import Workload
from preemption_operator.controller.feeder import CacheFeeder
from preemption_operator.engine.cache import Cache, Change
from preemption_operator.engine.scheduler import QueueState, Scheduler

Obj = dict[str, Any]


def versioned(body: Obj, version: int) -> Any:
    body = copy.deepcopy(body)
    body["metadata"]["resourceVersion"] = str(version)
    return parse_object(body)


def used(cache: Cache, cq: str) -> int:
    return cache.snapshot(NOW).cluster_queues[cq].node.usage.get(("default", "cpu"), 0)


class Waker:
    def __init__(self) -> None:
        self.pokes = 0
        self.released: list[str] = []
        self.config = 0

    def poke(self) -> None:
        self.pokes += 1

    def quota_released(self, cluster_queue: str) -> None:
        self.released.append(cluster_queue)

    def config_changed(self) -> None:
        self.config += 1


# -- versions, tombstones, lists -----------------------------------------------------------------


def test_a_deleted_object_does_not_come_back_from_an_older_version() -> None:
    """Issue #11 item 4: a late upsert (a list racing the watch, a write answer stored after the
    watch delivered the delete) resurrected deleted objects."""
    cache = Cache()
    body = pending("w", "q").obj()
    assert cache.upsert(versioned(body, 5)) is Change.RELEVANT
    cache.delete("Workload", "default/w", "7")
    assert cache.upsert(versioned(body, 6)) is Change.NONE
    assert cache.upsert(versioned(body, 7)) is Change.NONE
    assert "default/w" not in cache.infos
    cache.replace("Workload", [versioned(body, 6)], "6")  # a list taken before the delete
    assert "default/w" not in cache.infos
    assert cache.upsert(versioned(body, 8)) is Change.RELEVANT  # created again: a newer version
    assert "default/w" in cache.infos


def test_a_delete_without_a_version_still_refuses_what_was_seen() -> None:
    cache = Cache()
    body = pending("w", "q").obj()
    cache.upsert(versioned(body, 5))
    cache.delete("Workload", "default/w")  # a write answered 404
    assert cache.upsert(versioned(body, 5)) is Change.NONE


def test_a_list_replaces_a_kind_and_keeps_what_is_newer_than_the_list() -> None:
    cache = Cache()
    a, b, c = (pending(n, "q").obj() for n in "abc")
    cache.upsert(versioned(a, 1))
    cache.upsert(versioned(b, 2))
    cache.upsert(versioned(c, 9))  # e.g. a write answer newer than the list below
    cache.replace("Workload", [versioned(a, 1)], "5")
    assert set(cache.infos) == {"default/a", "default/c"}


def test_tombstones_are_pruned_after_they_outlived_a_list() -> None:
    cache = Cache()
    body = pending("w", "q").obj()
    cache.upsert(versioned(body, 5))
    cache.delete("Workload", "default/w", "6")
    cache.replace("Workload", [], "10")
    assert ("Workload", "default/w") in cache._tombstones
    cache.replace("Workload", [], "20")  # everything in flight at the first list has ended
    assert ("Workload", "default/w") not in cache._tombstones


# -- assumptions -----------------------------------------------------------------------------------


def test_an_assumed_admission_holds_quota_until_forgotten() -> None:
    cache = Cache()
    cache.load(parse(scenario([cluster_queue("cq", 3)], pending("w", "cq", 2))))
    body = admitted("w", "cq", 2).obj()
    cache.assume_admission(Workload.model_validate(body))
    assert used(cache, "cq") == 2000
    assert not cache.snapshot(NOW).pending.get("cq")
    cache.forget("default/w")
    assert used(cache, "cq") == 0
    assert [w.key for w in cache.snapshot(NOW).pending["cq"]] == ["default/w"]


def test_only_the_deciding_write_ends_an_assumption() -> None:
    cache = Cache()
    cache.load(parse(scenario([cluster_queue("cq", 3)], pending("w", "cq", 2))))
    older, newer = object(), object()
    cache.assume_eviction("default/w", older)
    cache.assume_admission(Workload.model_validate(admitted("w", "cq", 2).obj()), newer)
    cache.forget("default/w", older)  # the older decision's write ended: not this assumption's
    assert cache.assumed == {"default/w"} and used(cache, "cq") == 2000
    cache.forget("default/w", newer)
    assert not cache.assumed and used(cache, "cq") == 0


def test_an_admission_being_written_holds_quota_and_may_be_preempted() -> None:
    """Kueue's cache counts an assumed workload as admitted, for quota and as a candidate."""
    objects = scenario([cluster_queue("cq", 2, within="LowerPriority")], pending("low", "cq", 2, priority=0))
    cache = Cache()
    cache.load(parse(objects))
    cache.assume_admission(Workload.model_validate(admitted("low", "cq", 2, priority=0).obj()))
    cache.upsert(parse_object(pending("high", "cq", 2, priority=10).obj()))
    result = Scheduler().cycle(cache.snapshot(NOW), QueueState())
    assert [p.victim.name for p in result.preempted] == ["low"] and not result.admitted


def test_evicting_a_workload_whose_admission_is_on_its_way_keeps_that_quota() -> None:
    """CI chaos (429s, then a victim chosen while its admission slept on Retry-After): the
    eviction's assumption replaced the admission's and the workload counted as pending, so its
    quota went to another workload; then the admission landed. The victim keeps the admission's
    quota until its eviction is written, and is no candidate meanwhile."""
    cache = Cache()
    cache.load(parse(scenario([cluster_queue("cq", 2, within="LowerPriority")], pending("w", "cq", 2))))
    admission, eviction = object(), object()
    cache.assume_admission(Workload.model_validate(admitted("w", "cq", 2).obj()), admission)
    cache.assume_eviction("default/w", eviction)
    assert used(cache, "cq") == 2000 and cache.evicting == {"default/w"}
    cache.forget("default/w", admission)  # the admission's write ended (its answer is observed)
    assert used(cache, "cq") == 2000
    cache.forget("default/w", eviction)
    assert used(cache, "cq") == 0  # observed: still pending here (no answer was stored)


def test_an_assumed_eviction_keeps_the_quota_and_is_no_candidate() -> None:
    objects = scenario(
        [cluster_queue("cq", 2, within="LowerPriority")],
        admitted("low", "cq", 2, priority=0),
        pending("high", "cq", 2, priority=10),
    )
    cache = Cache()
    cache.load(parse(objects))
    cache.assume_eviction("default/low")
    assert used(cache, "cq") == 2000
    result = Scheduler().cycle(cache.snapshot(NOW), QueueState())
    assert not result.preempted and not result.admitted


def test_observed_changes_during_an_assumed_eviction_keep_it_assumed() -> None:
    cache = Cache()
    cache.load(parse(scenario([cluster_queue("cq", 2)], admitted("low", "cq", 2))))
    cache.assume_eviction("default/low")
    relabelled = admitted("low", "cq", 2, labels={"team": "x"}).obj()
    cache.upsert(parse_object(relabelled))
    assert cache.evicting == {"default/low"}
    assert cache.infos["default/low"].labels == {"team": "x"}


# -- narrow invalidation -----------------------------------------------------------------------------


def test_status_only_updates_rebuild_nothing() -> None:
    """Issue #11 item 5: the operator's own ClusterQueue status writes rebuilt the quota tree."""
    cache = Cache()
    cache.load(parse(scenario([cluster_queue("cq", 3)], admitted("w", "cq", 1))))
    tree = cache.tree()
    cq = copy.deepcopy(cluster_queue("cq", 3))
    cq["status"] = {"pendingWorkloads": 0, "admittedWorkloads": 1}
    assert cache.upsert(parse_object(cq)) is Change.STORED
    assert cache.tree() is tree
    ns = namespace()
    ns["metadata"]["annotations"] = {"touched": "yes"}
    assert cache.upsert(parse_object(ns)) is Change.STORED
    assert cache.tree() is tree
    changed = cluster_queue("cq", 4)
    assert cache.upsert(parse_object(changed)) is Change.RELEVANT
    assert cache.tree() is not tree
    assert used(cache, "cq") == 1000


def node(name: str, cpu: str, **labels: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "status": {"allocatable": {"cpu": cpu}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_node_heartbeats_keep_topology_state_and_capacity_changes_update_it_in_place() -> None:
    topology = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": "t"},
        "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]},
    }
    flavor = resource_flavor("tas")
    flavor["spec"] = {"topologyName": "t", "nodeLabels": {"pool": "a"}}
    cache = Cache()
    cache.load(parse([topology, flavor, node("n1", "4", pool="a")]))
    tas = cache.tas()
    beat = node("n1", "4", pool="a")
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-11-30T00:00:00Z"
    assert cache.upsert(parse_object(beat)) is Change.STORED
    assert cache.tas() is tas
    assert cache.upsert(parse_object(node("n1", "8", pool="a"))) is Change.RELEVANT
    assert cache.tas() is tas
    assert tas.views["tas"].nodes[0].allocatable == {"cpu": 8000}
    assert cache.upsert(parse_object(node("n1", "8", pool="b"))) is Change.RELEVANT
    assert cache.tas() is not tas  # membership changed: rebuilt


def test_a_priority_class_change_rebuilds_only_the_workloads_that_name_it() -> None:
    objects = scenario(
        [cluster_queue("cq", 3)],
        pending("classy", "cq", priority_class="gold"),
        pending("plain", "cq", priority=1),
        extra=[workload_priority_class("gold", 10), workload_priority_class("silver", 5)],
    )
    cache = Cache()
    cache.load(parse(objects))
    plain = cache.infos["default/plain"]
    assert cache.infos["default/classy"].priority == 10
    cache.upsert(parse_object(workload_priority_class("gold", 20)))
    assert cache.infos["default/classy"].priority == 20
    assert cache.infos["default/plain"] is plain
    cache.upsert(parse_object(workload_priority_class("silver", 7)))
    assert cache.infos["default/classy"].priority == 20


# -- objects that cannot be read ----------------------------------------------------------------------


def test_an_admitted_workload_whose_spec_breaks_keeps_its_quota() -> None:
    """Issue #11: an admitted 4-cpu workload patched to cpu "1e1.5" was dropped from the cache while
    it still held quota, and a second 4-cpu workload was admitted into the same 4-cpu queue."""
    cache = Cache()
    waker = Waker()
    feeder = CacheFeeder(cache, waker)
    for body in scenario([cluster_queue("cq", 4)], admitted("big", "cq", 4)):
        feeder.ingest(body["kind"], body)
    broken = admitted("big", "cq", 4).obj()
    broken["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1e1.5"
    broken["metadata"]["resourceVersion"] = "2"
    feeder.ingest("Workload", broken)
    feeder.ingest("Workload", pending("next", "cq", 4).obj())
    assert used(cache, "cq") == 4000
    assert cache.unreadable.keys() == {"default/big"}
    (notice,) = feeder.notices()
    assert notice.reason == "InvalidObject" and "keeps the quota of its admission" in notice.message
    result = Scheduler().cycle(cache.snapshot(NOW), QueueState())
    assert not result.admitted
    fixed = admitted("big", "cq", 4).obj()
    fixed["metadata"]["resourceVersion"] = "3"
    feeder.ingest("Workload", fixed)
    assert not cache.unreadable and not feeder.notices()


def test_an_unreadable_pending_workload_is_left_out_and_forgotten_on_delete() -> None:
    cache = Cache()
    feeder = CacheFeeder(cache, Waker())
    for body in scenario([cluster_queue("cq", 4)]):
        feeder.ingest(body["kind"], body)
    bad = pending("bad", "cq", "-3").obj()
    bad["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1e1.5"
    feeder.ingest("Workload", bad)
    assert "default/bad" not in cache.infos and len(feeder.notices()) == 1
    feeder.forget("Workload", bad)
    assert feeder.notices() == [] and feeder.reference("Workload", "default/bad") is None


def test_a_deactivated_workload_in_a_deleted_cluster_queue_does_not_stop_the_cycle() -> None:
    """Issue #11 item 2: it raised KeyError in every cycle."""
    orphan = admitted("orphan", "gone", 2).obj()
    orphan["spec"]["active"] = False
    objects = [namespace(), resource_flavor(), cluster_queue("cq", 2), local_queue("cq"), orphan]
    objects.append(pending("w", "cq", 2).obj())
    result = one_cycle(objects)
    assert [e.workload.name for e in result.evicted] == ["orphan"]
    assert [a.workload.name for a in result.admitted] == ["w"]


def test_a_waiting_preemptor_that_can_no_longer_preempt_steps_aside() -> None:
    """Issue #11 item 6: after quota is lowered below its request, a waiting preemptor kept heading
    its queue, and the small workload behind it was never admitted."""
    objects = scenario(
        [cluster_queue("cq", 4, within="LowerPriority", queueing_strategy="BestEffortFIFO")],
        admitted("victim", "cq", 4, priority=0),
        pending("big", "cq", 4, priority=10),
        pending("small", "cq", 1, priority=5),
    )
    cache = Cache()
    cache.load(parse(objects))
    state, scheduler = QueueState(), Scheduler(rounds=1)
    first = scheduler.cycle(cache.snapshot(NOW), state)
    assert [p.victim.name for p in first.preempted] == ["victim"]
    assert "default/big" in state.waiting
    cache.delete("Workload", "default/victim")
    cache.upsert(parse_object(cluster_queue("cq", 2, within="LowerPriority", queueing_strategy="BestEffortFIFO")))
    second = scheduler.cycle(cache.snapshot(NOW), state)
    assert "default/big" not in state.waiting
    third = scheduler.cycle(cache.snapshot(NOW), state)
    assert [a.workload.name for a in [*second.admitted, *third.admitted]] == ["small"]


def test_a_budget_stops_further_rounds_once_that_many_decisions_are_made() -> None:
    """Rounds decide one queue's next heads against assumed state; the operator caps them by how
    many admissions are still unwritten, so decisions stay close to what the API shows."""
    objects = scenario(
        [cluster_queue("a", 10), cluster_queue("b", 10)],
        *(pending(f"a-{i}", "a", 1) for i in range(5)),
        *(pending(f"b-{i}", "b", 1) for i in range(5)),
    )

    def admitted_with(budget: int | None) -> list[str]:
        cache = Cache()
        cache.load(parse(objects))
        result = Scheduler(rounds=64).cycle(cache.snapshot(NOW), QueueState(), budget=budget)
        return sorted(a.workload.name for a in result.admitted)

    assert len(admitted_with(None)) == 10
    assert admitted_with(1) == ["a-0", "b-0"]  # the first round always runs whole
    assert admitted_with(4) == ["a-0", "a-1", "b-0", "b-1"]
    assert len(admitted_with(5)) == 6  # a round is not cut short once started


def test_a_waiting_preemptor_waits_while_its_victims_evictions_are_written() -> None:
    objects = scenario(
        [cluster_queue("cq", 4, within="LowerPriority")],
        admitted("victim", "cq", 4, priority=0),
        pending("big", "cq", 4, priority=10),
        pending("small", "cq", 1, priority=5),
    )
    cache = Cache()
    cache.load(parse(objects))
    state, scheduler = QueueState(), Scheduler(rounds=4)
    scheduler.cycle(cache.snapshot(NOW), state)
    cache.assume_eviction("default/victim")
    again = scheduler.cycle(cache.snapshot(NOW), state)
    assert not again.admitted and not again.preempted and not again.pending
    assert "default/big" in state.waiting


@pytest.mark.parametrize("pods_followed", [False, True])
def test_a_late_deleted_event_of_the_old_workload_leaves_the_one_made_again_under_its_name(pods_followed) -> None:
    """The chaos soak's pending Workload that was never admitted (seed 86841442): a pod group's
    Workload was deleted and made again under the same name by the job controller, which stores
    the new one from the create's answer. The watch then brought the old one's DELETED event (its
    stream is ordered: the deletion comes before the new one's ADDED). That deletion dropped the
    new Workload and buried the name at the new one's version, so its own ADDED event was taken
    as stale: the operator never saw it again until a relist, and it stayed pending."""
    cache = Cache()
    feeder = CacheFeeder(cache, Waker())
    if pods_followed:
        feeder.pods_may_run = lambda key: False
    for body in scenario([cluster_queue("cq", 4)]):
        feeder.ingest(body["kind"], body)
    old = pending("group", "cq", 2).obj()
    old["metadata"].update(uid="uid-old", resourceVersion="10")
    feeder.ingest("Workload", copy.deepcopy(old))
    again = pending("group", "cq", 2).obj()
    again["metadata"].update(uid="uid-again", resourceVersion="12")
    feeder.ingest("Workload", copy.deepcopy(again))  # the create's answer
    deleted = copy.deepcopy(old)
    deleted["metadata"]["resourceVersion"] = "11"  # the deletion's version, before the creation
    feeder.event(kinds.Workload, "DELETED", deleted)
    assert cache.objects["Workload"]["default/group"].metadata.uid == "uid-again"
    feeder.event(kinds.Workload, "ADDED", copy.deepcopy(again))
    snapshot = cache.snapshot(NOW)
    assert [wl.key for wl in snapshot.pending["cq"]] == ["default/group"]


def test_the_feeder_wakes_the_loop_only_for_what_matters() -> None:
    cache = Cache()
    waker = Waker()
    feeder = CacheFeeder(cache, waker)
    cq = cluster_queue("cq", 2)
    cq["metadata"]["resourceVersion"] = "1"
    feeder.ingest("ClusterQueue", cq)
    assert waker.config == 1
    status_only = copy.deepcopy(cq)
    status_only["metadata"]["resourceVersion"] = "2"
    status_only["status"] = {"pendingWorkloads": 3}
    feeder.ingest("ClusterQueue", status_only)
    assert waker.config == 1
    feeder.ingest("ClusterQueue", status_only)  # the same version again (our own write's echo)
    assert waker.config == 1
    running = admitted("w", "cq", 1).obj()
    feeder.ingest("Workload", running)
    done = workload("w").admitted("cq").finished().obj()
    feeder.ingest("Workload", done)
    assert waker.released == ["cq"]


def test_an_unreadable_workload_is_never_chosen_as_a_victim() -> None:
    """Nothing about it can be judged (its priority, its labels): it only holds its quota."""
    cache = Cache()
    feeder = CacheFeeder(cache, Waker())
    objects = scenario(
        [cluster_queue("cq", 4, within="LowerPriority")],
        admitted("odd", "cq", 4, priority=-10),
        pending("urgent", "cq", 4, priority=100),
    )
    for body in objects:
        feeder.ingest(body["kind"], body)
    broken = admitted("odd", "cq", 4, priority=-10).obj()
    broken["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1e1.5"
    broken["metadata"]["resourceVersion"] = "2"
    feeder.ingest("Workload", broken)
    result = Scheduler().cycle(cache.snapshot(NOW), QueueState())
    assert not result.preempted and not result.admitted


def test_a_workload_admitted_in_a_deleted_cluster_queue_is_named() -> None:
    """Issue #11 item 7: a ClusterQueue deleted while it has admitted workloads gets a named message."""
    cache = Cache()
    cache.load(parse(scenario([cluster_queue("doomed", 2), cluster_queue("other", 1)], admitted("w", "doomed", 2))))
    assert cache.workload_notices() == []
    cache.delete("ClusterQueue", "doomed")
    (notice,) = cache.workload_notices()
    assert notice.name == "default/w" and notice.reason == "ClusterQueueNotFound"
    assert "ClusterQueue doomed, which does not exist" in notice.message
    cache.delete("Workload", "default/w")
    assert cache.workload_notices() == []


def test_the_room_a_victim_leaves_stays_its_preemptors_while_the_eviction_is_written() -> None:
    """The watch may show a victim's quota released before the eviction's own write answers.
    Its preemptor waits for that answer; meanwhile the room must not go to the victim, pending
    again, nor to another workload of the cohort (both happened e2e, in test_fair_sharing.py: the
    preemptor then evicted it a second time)."""
    objects = scenario(
        [cluster_queue("a", 1, cohort="all", reclaim="Any"), cluster_queue("b", 1, cohort="all", reclaim="Any")],
        admitted("a-old", "a", 1, at="2026-11-30T00:00:00Z"),
        admitted("a-new", "a", 1, at="2026-11-30T00:01:00Z"),
        pending("a-queued", "a", 1, created="2026-11-29T00:00:00Z"),
        pending("b-0", "b", 1),
    )
    cache = Cache()
    cache.load(parse(objects))
    state, scheduler = QueueState(), Scheduler()
    first = scheduler.cycle(cache.snapshot(NOW), state)
    assert [p.victim.name for p in first.preempted] == ["a-new"]
    assert not first.admitted
    cache.assume_eviction("default/a-new")
    cache.upsert(parse_object(as_dict(pending("a-new", "a", 1))))  # the watch: released, queued again
    assert used(cache, "a") == 2000
    state.inadmissible.clear()  # the loop retries parked workloads when it sees quota released
    racing = scheduler.cycle(cache.snapshot(NOW), state)
    assert not racing.admitted and not racing.preempted
    cache.forget("default/a-new")  # the eviction's write answer is in
    assert used(cache, "a") == 1000
    after = scheduler.cycle(cache.snapshot(NOW), state)
    assert [wl.workload.name for wl in after.admitted] == ["b-0"]


def test_snapshots_see_namespace_labels_as_they_change():
    """The snapshots' namespace labels are built once and kept until a Namespace changes: a new
    label, a new namespace and a deleted one each show in the next snapshot, and an unchanged one
    keeps handing out the same map."""
    cache = Cache()
    cache.upsert(versioned(namespace("team-a", {"tier": "batch"}), 1))
    first = cache.snapshot(NOW).namespace_labels
    assert first["team-a"]["tier"] == "batch"
    assert cache.snapshot(NOW).namespace_labels is first
    cache.upsert(versioned(namespace("team-a", {"tier": "prod"}), 2))
    assert cache.snapshot(NOW).namespace_labels["team-a"]["tier"] == "prod"
    cache.upsert(versioned(namespace("team-b"), 3))
    assert set(cache.snapshot(NOW).namespace_labels) == {"team-a", "team-b"}
    cache.delete("Namespace", "team-b")
    assert set(cache.snapshot(NOW).namespace_labels) == {"team-a"}


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.integers(0, 11),  # which workload
            st.sampled_from(["lq-a", "lq-b", "lq-c"]),  # its LocalQueue (a and b feed cq-1, c feeds cq-2)
            st.integers(0, 3),  # its priority
            st.integers(0, 5),  # its creation, in minutes after T0
            st.booleans(),  # deleted instead of (re)created
        ),
        max_size=40,
    )
)
def test_property_pending_order_is_a_fresh_sort_after_any_changes(steps) -> None:
    """The queue manager keeps each LocalQueue's order between snapshots; after any run of
    workloads created, changed (priority, queue) and deleted, every ClusterQueue's pending list
    is exactly its workloads sorted afresh (higher priority, older, then key), the lists of two
    LocalQueues feeding one ClusterQueue merged."""
    cache = Cache()
    setup = [
        namespace(),
        resource_flavor(),
        cluster_queue("cq-1", 10),
        cluster_queue("cq-2", 10),
        local_queue("lq-a", "cq-1"),
        local_queue("lq-b", "cq-1"),
        local_queue("lq-c", "cq-2"),
    ]
    cache.load(parse(setup))
    target = {"lq-a": "cq-1", "lq-b": "cq-1", "lq-c": "cq-2"}
    live: dict[str, tuple[str, int, datetime]] = {}
    for version, (index, queue, priority, minutes, deleted) in enumerate(steps, start=10):
        name = f"w{index}"
        key = f"{NAMESPACE}/{name}"
        if deleted:
            cache.delete("Workload", key)
            live.pop(name, None)
        else:
            created = T0 + timedelta(minutes=minutes)
            body = pending(name, queue, priority=priority, created=created).obj()
            body["metadata"]["resourceVersion"] = str(version)
            cache.upsert(parse_object(body))
            live[name] = (queue, priority, created)
        got = {cq: [wl.name for wl in wls] for cq, wls in cache.snapshot(NOW).pending.items() if wls}
        expected: dict[str, list[str]] = {}
        for wl_name, (lq, _, _) in sorted(live.items(), key=lambda kv: (-kv[1][1], kv[1][2], kv[0])):
            expected.setdefault(target[lq], []).append(wl_name)
        assert got == expected


# -- Workloads deleted while their pods may still run --------------------------------------------


@settings(max_examples=80, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["admit", "pend", "delete", "depart", "departed", "relist", "snapshot"]),
            st.integers(0, 5),  # which workload
            st.integers(1, 3),  # its cpu
        ),
        max_size=40,
    )
)
def test_property_a_departing_workload_holds_its_quota_until_it_has_departed(steps) -> None:
    """Whatever runs of admissions, deletions (plain, or while pods may run), pods gone, lists and
    snapshots: a ClusterQueue's usage is the sum of the workloads that hold quota by the model (a
    deleted one while it departs, unless made again under its name), departing ones are never
    candidates nor drained, and one departs only while it holds quota."""
    cache = Cache()
    cache.load(parse([namespace(), resource_flavor(), cluster_queue("cq", 100, within="LowerPriority")]))
    objects: dict[str, Obj] = {}  # what the API holds
    holding: dict[str, int] = {}  # key -> cpu held by the model
    departing: set[str] = set()
    version = 10
    for action, index, cpu in steps:
        version += 1
        name = f"w{index}"
        key = f"{NAMESPACE}/{name}"
        if action in ("admit", "pend"):
            made = admitted(name, "cq", cpu) if action == "admit" else pending(name, "cq", cpu)
            body = made.obj()
            body["metadata"]["resourceVersion"] = str(version)
            objects[key] = body
            cache.upsert(parse_object(body))
            departing.discard(key)  # made again under its name: the new one is what counts
            holding.pop(key, None)
            if action == "admit":
                holding[key] = cpu
        elif action in ("delete", "depart") and key in objects:
            del objects[key]
            if action == "depart" and key in holding:
                assert cache.depart(key, str(version)) is not Change.NONE
                departing.add(key)
            else:
                cache.delete("Workload", key, str(version))
                holding.pop(key, None)
                departing.discard(key)
        elif action == "departed":
            cache.departed(key)
            if key in departing:
                departing.discard(key)
                holding.pop(key, None)
        elif action == "relist":
            cache.replace("Workload", [parse_object(b) for b in objects.values()], str(version))
        snapshot = cache.snapshot(NOW)
        cq = snapshot.cluster_queues["cq"]
        assert cq.node.usage.get(("default", "cpu"), 0) == 1000 * sum(holding.values())
        assert cache.departing == departing
        assert not departing & {wl.key for wl in snapshot.admitted(cq)}
        assert not departing & {d[0].key for d in snapshot.drains}


def test_a_departing_workload_is_neither_timed_out_nor_drained() -> None:
    """It is gone from the API: nothing may be written to it, and its pods are stopping anyway."""
    cache = Cache()
    stopped = cluster_queue("cq", 4)
    stopped["spec"]["stopPolicy"] = "HoldAndDrain"
    cache.load(parse(scenario([stopped], admitted("old", "cq", 2))))
    assert [d[0].key for d in cache.snapshot(NOW).drains] == [f"{NAMESPACE}/old"]
    cache.depart(f"{NAMESPACE}/old", "99")
    snapshot = cache.snapshot(NOW)
    assert snapshot.drains == [] and snapshot.cluster_queues["cq"].node.usage[("default", "cpu")] == 2000


# -- LocalQueue counts without a pass over every pending workload -----------------------------


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.integers(0, 9),  # which workload
            st.sampled_from(["lq-a", "lq-b", "lq-c", "missing"]),  # its LocalQueue
            st.sampled_from(["pending", "admitted", "deactivated", "deleted"]),
        ),
        max_size=40,
    )
)
def test_property_local_queue_counts_match_a_count_of_every_workload(steps) -> None:
    """The LocalQueue statuses' counts, taken from the queue manager's own per-queue tallies, equal
    a count of each workload the snapshot holds (queued, unqueued with a reason, deactivated,
    reserving), whatever came and went."""
    from preemption_operator.controller.queue_status import local_queue_counts

    cache = Cache()
    cache.load(
        parse(
            [
                namespace(),
                resource_flavor(),
                cluster_queue("cq-1", 100),
                cluster_queue("cq-2", 100),
                local_queue("lq-a", "cq-1"),
                local_queue("lq-b", "cq-1"),
                local_queue("lq-c", "cq-2"),
            ]
        )
    )
    target = {"lq-a": "cq-1", "lq-b": "cq-1", "lq-c": "cq-2", "missing": "cq-2"}
    for version, (index, queue, state) in enumerate(steps, start=10):
        key = f"{NAMESPACE}/w{index}"
        if state == "deleted":
            cache.delete("Workload", key)
            continue
        made = admitted(f"w{index}", target[queue], 1) if state == "admitted" else pending(f"w{index}", queue, 1)
        body = made.obj()
        body["spec"]["queueName"] = queue
        if state == "deactivated":
            body["spec"]["active"] = False
        body["metadata"]["resourceVersion"] = str(version)
        cache.upsert(parse_object(body))
    snapshot = cache.snapshot(NOW)
    expected: dict[tuple[str, str], list[int]] = {}
    for wl in [w for queue in snapshot.pending.values() for w in queue] + [u[0] for u in snapshot.unqueued]:
        expected.setdefault((wl.namespace, wl.queue_name), [0, 0, 0])[0] += 1
    for cq in snapshot.held_cluster_queues.values():
        for wl in cq.workloads.values():
            counts = expected.setdefault((wl.namespace, wl.queue_name), [0, 0, 0])
            counts[1] += 1
            counts[2] += 1
    got = local_queue_counts(snapshot, cache.queues.pending_counts())
    assert {k: tuple(v) for k, v in expected.items() if k[1]} == {k: v for k, v in got.items() if k[1]}


def test_a_workload_is_found_by_its_uid_while_the_cache_holds_it() -> None:
    """Kueue's preemption messages name the preemptor by UID only: the dashboard names it by key
    through this index, which follows a Workload made again under the same name and a deletion."""
    first = as_dict(workload("wl"))
    first["metadata"]["uid"], first["metadata"]["resourceVersion"] = "uid-1", "1"
    cache = Cache()
    cache.upsert(parse_object(first))
    assert cache.workload_key("uid-1") == f"{NAMESPACE}/wl"
    again = copy.deepcopy(first)
    again["metadata"]["uid"], again["metadata"]["resourceVersion"] = "uid-2", "3"
    cache.upsert(parse_object(again))
    assert (cache.workload_key("uid-1"), cache.workload_key("uid-2")) == (None, f"{NAMESPACE}/wl")
    cache.delete("Workload", f"{NAMESPACE}/wl", "4")
    assert cache.workload_key("uid-2") is None


def test_an_update_keeps_the_workload_in_its_place_and_its_uid_indexed() -> None:
    """An update is stored in place: the order the cache holds Workloads in (which the snapshot
    walks) does not change, and the UID still leads to the key."""
    cache = Cache()
    for n, name in enumerate(("a", "b", "c")):
        obj = as_dict(workload(name))
        obj["metadata"]["uid"], obj["metadata"]["resourceVersion"] = f"uid-{name}", str(n + 1)
        cache.upsert(parse_object(obj))
    update = as_dict(workload("a"))
    update["metadata"]["uid"], update["metadata"]["resourceVersion"] = "uid-a", "9"
    update["metadata"]["labels"] = {"touched": "yes"}
    cache.upsert(parse_object(update))
    assert list(cache.objects["Workload"]) == [f"{NAMESPACE}/{n}" for n in ("a", "b", "c")]
    assert cache.workload_key("uid-a") == f"{NAMESPACE}/a"
