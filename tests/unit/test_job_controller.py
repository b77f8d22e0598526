"""Issue 14: the job controller carrying out its steps against the fault-injecting FakeApi: a stop
cut short by a conflict with the job controller is finished on the next try and told once; the
quota comes back only once the Job's pods are gone; a deleted Job's Workload is deleted; a
replica that does not lead does nothing."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from builders import NOW, as_dict, cluster_queue, local_queue, pending, resource_flavor
from preemption_operator.api import kinds
from preemption_operator.controller.feeder import CacheFeeder
from preemption_operator.controller.jobs import DEPARTURES, ORPHANS, JobController, WorkloadKey
from preemption_operator.controller.started_pods import POD, StartedPods
from preemption_operator.engine import Engine, QueueState
from preemption_operator.engine.cache import Cache
from preemption_operator.jobs.batch_job import STOPPING_ANNOTATION, BatchJob
from preemption_operator.jobs.framework import QUEUE_LABEL as QUEUE
from preemption_operator.jobs.framework import of_kind
from preemption_operator.jobs.jobset import JobSet
from preemption_operator.jobs.pod import Pods
from preemption_operator.k8s.api import ApiError
from preemption_operator.k8s.writer import StatusWriter
from unit.fake_api import FakeApi
from unit.test_pod import pod as plain_pod
from unit.test_pod import workload as pod_workload

NS = "research"
JOB = BatchJob.kind
CONDITION_TIME = "2026-12-01T11:00:00Z"


class Waker:
    def __init__(self) -> None:
        self.released: list[str] = []

    def poke(self) -> None:
        pass

    def quota_released(self, cluster_queue: str) -> None:
        self.released.append(cluster_queue)

    def config_changed(self) -> None:
        pass


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def record(self, obj: dict[str, Any], kind: str, api_version: str, type_: str, reason: str, message: str) -> None:
        self.seen.append((f"{kind}/{obj['metadata']['name']}", reason, message))


def running_job() -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": NS,
            "uid": "uid-train",
            "labels": {"kueue.x-k8s.io/queue-name": "research"},
        },
        "spec": {
            "parallelism": 2,
            "suspend": False,
            "template": {
                "metadata": {"labels": {"kueue.x-k8s.io/podset": "main"}},
                "spec": {
                    "nodeSelector": {"example.com/pool": "on-demand"},
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                },
            },
        },
        "status": {"active": 2, "startTime": CONDITION_TIME},
    }


def condition(kind: str, reason: str = "", message: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True",
        "reason": reason or kind,
        "message": message,
        "lastTransitionTime": CONDITION_TIME,
    }


def evicted_workload() -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "job-train-12345",
            "namespace": NS,
            "uid": "uid-wl",
            "labels": {"kueue.x-k8s.io/job-uid": "uid-train"},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "uid-train", "controller": True}
            ],
        },
        "spec": {
            "queueName": "research",
            "podSets": [
                {
                    "name": "main",
                    "count": 2,
                    "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}},
                }
            ],
        },
        "status": {
            "admission": {
                "clusterQueue": "research",
                "podSetAssignments": [{"name": "main", "count": 2, "flavors": {"cpu": "on-demand"}}],
            },
            "conditions": [
                condition("QuotaReserved"),
                condition("Admitted"),
                condition("Evicted", "Preempted", "Preempted by hero/job-hero-1"),
            ],
        },
    }


def new_controller(
    api: FakeApi, *, leading: bool = True, started: StartedPods | None = None
) -> tuple[JobController, Events, Waker, Cache]:
    cache, waker, events = Cache(), Waker(), Events()
    controller = JobController(
        api,  # type: ignore[arg-type]
        cache,
        CacheFeeder(cache, waker),
        StatusWriter(api),  # type: ignore[arg-type]
        events,
        lambda: leading,
        started=started,
    )
    return controller, events, waker, cache


def setup(
    api: FakeApi, *, leading: bool = True, started: StartedPods | None = None
) -> tuple[JobController, Events, Waker, Cache]:
    """A controller that has seen the running Job `train` and its evicted Workload."""
    controller, events, waker, cache = new_controller(api, leading=leading, started=started)
    feeder = controller.feeder
    job, workload = api.put(running_job()), api.put(evicted_workload())
    feeder.replace(kinds.Workload, [copy.deepcopy(workload)], "1")
    controller.replace(kinds.Workload, [copy.deepcopy(workload)], "1")
    controller.replace(JOB, [copy.deepcopy(job)], "1")
    return controller, events, waker, cache


def stored_job(api: FakeApi) -> dict[str, Any]:
    return api.objects[JOB.path("train", NS)]


def stored_workload(api: FakeApi) -> dict[str, Any]:
    return api.objects[kinds.Workload.path("job-train-12345", NS)]


async def test_a_stop_cut_short_by_a_conflict_is_finished_and_told_once() -> None:
    api = FakeApi()
    controller, events, _, _ = setup(api)
    # The job controller writes the Job's status between our patches: the start-time patch conflicts.
    api.fail("PATCH", f"{JOB.path('train', NS)}/status", code=409)
    key = controller.key_of(JOB, running_job())
    try:
        await controller.reconcile(key)
        raise AssertionError("the conflict did not surface")
    except Exception as exc:
        assert "409" in str(exc)
    job = stored_job(api)
    assert job["spec"]["suspend"] is True and job["metadata"]["annotations"][STOPPING_ANNOTATION] == "true"
    assert events.seen == [
        ("Job/train", "Stopped", "Preempted by hero/job-hero-1"),
        ("Job/train", "Preempted", "Preempted by hero/job-hero-1"),
    ]

    await controller.reconcile(key)  # the retry: start time, then the template restored
    job = stored_job(api)
    assert STOPPING_ANNOTATION not in job["metadata"].get("annotations", {})
    assert "nodeSelector" not in job["spec"]["template"]["spec"]
    assert "startTime" not in job["status"]
    assert len(events.seen) == 2  # not told again


async def test_the_quota_comes_back_only_once_the_pods_are_gone() -> None:
    api = FakeApi()
    controller, _, waker, cache = setup(api)
    key = controller.key_of(JOB, running_job())
    for _ in range(3):
        await controller.reconcile(key)  # suspend, start time, restore: done in one go here
    job = copy.deepcopy(stored_job(api))
    assert job["spec"]["suspend"] is True
    job["status"] = {"active": 0, "terminating": 2}  # pods being deleted still run
    controller.event(JOB, "MODIFIED", api.put(job))
    assert await controller.reconcile(key) is None
    assert cache.infos[f"{NS}/job-train-12345"].cluster_queue == "research"

    job["status"] = {"active": 0, "terminating": 0}
    controller.event(JOB, "MODIFIED", api.put(job))
    await controller.reconcile(key)
    status = stored_workload(api)["status"]
    assert "admission" not in status
    reserved = next(c for c in status["conditions"] if c["type"] == "QuotaReserved")
    assert reserved["status"] == "False"
    assert cache.infos[f"{NS}/job-train-12345"].cluster_queue is None  # the cache saw it at once
    assert waker.released == ["research"]


@pytest.mark.looptime
async def test_a_deleted_jobs_workload_is_deleted() -> None:
    api = FakeApi()
    controller, _, _, _ = setup(api)
    job = stored_job(api)
    api.remove("Job", "train", NS)
    controller.event(JOB, "DELETED", job)
    task = asyncio.create_task(controller.run())
    try:
        await asyncio.sleep(1)  # fake time: retries and backoffs included
    finally:
        task.cancel()
    assert kinds.Workload.path("job-train-12345", NS) not in api.objects


@pytest.mark.looptime
@pytest.mark.parametrize("cache_holds_it", [True, False])
async def test_a_workload_made_again_under_the_same_name_is_not_deleted_for_the_old_one(cache_holds_it: bool) -> None:
    """A gone job's Workload is deleted by its uid: one made since under the same name (a pod
    group's, when its Pods are remade) belongs to someone else and stays. The uid is the one this
    controller saw, also when the cache let go of the old Workload already (a write found it
    deleted)."""
    api = FakeApi()
    controller, _, _, _ = setup(api)
    job = stored_job(api)
    api.remove("Job", "train", NS)
    controller.event(JOB, "DELETED", job)
    if not cache_holds_it:
        controller.feeder.gone("Workload", f"{NS}/job-train-12345")
    again = copy.deepcopy(stored_workload(api))
    again["metadata"]["uid"] = "made-again"
    api.remove("Workload", "job-train-12345", NS)
    api.put(again)  # the controller's watch has not told it yet
    task = asyncio.create_task(controller.run())
    try:
        await asyncio.sleep(1)
    finally:
        task.cancel()
    assert stored_workload(api)["metadata"]["uid"] == "made-again"


@pytest.mark.looptime
async def test_a_replica_that_does_not_lead_does_nothing() -> None:
    api = FakeApi()
    controller, events, _, _ = setup(api, leading=False)
    task = asyncio.create_task(controller.run())
    try:
        await asyncio.sleep(60)  # fake time: a minute of nothing
    finally:
        task.cancel()
    assert stored_job(api)["spec"]["suspend"] is False
    assert api.count("PATCH") == 0 and events.seen == []


async def test_a_stale_job_is_read_again_after_a_conflict() -> None:
    """The job controller changed the Job and no watch event says so yet (or ever, if nothing
    changes again): the conflict makes the controller read it, and the retry goes through."""
    api = FakeApi()
    controller, events, _, _ = setup(api)
    newer = copy.deepcopy(stored_job(api))
    newer["status"]["ready"] = 2
    api.put(newer)  # not told to the controller
    key = controller.key_of(JOB, running_job())
    with pytest.raises(ApiError, match="409"):
        await controller.reconcile(key)
    assert events.seen == []
    await controller.reconcile(key)
    assert stored_job(api)["spec"]["suspend"] is True
    assert [reason for _, reason, _ in events.seen] == ["Stopped", "Preempted"]


async def test_an_answer_older_than_the_watch_does_not_replace_it() -> None:
    api = FakeApi()
    controller, _, _, _ = setup(api)
    key = controller.key_of(JOB, running_job())
    old = copy.deepcopy(controller.jobs[key]["train"])
    newer = copy.deepcopy(old)
    newer["metadata"]["resourceVersion"] = str(int(old["metadata"]["resourceVersion"]) + 5)
    controller.event(JOB, "MODIFIED", newer)
    controller._keep(key, old)
    assert controller.jobs[key]["train"]["metadata"]["resourceVersion"] == newer["metadata"]["resourceVersion"]


async def test_no_workload_is_made_for_a_job_the_watch_has_not_yet_reported_gone() -> None:
    """Deleting a Job deletes its Workload; if the Workload's deletion is seen first, the Job
    still looks alive in the cache: its Workload must not be made again."""
    api = FakeApi()
    cache, waker, events = Cache(), Waker(), Events()
    controller = JobController(api, cache, CacheFeeder(cache, waker), StatusWriter(api), events, lambda: True)  # type: ignore[arg-type]
    job = running_job()
    job["spec"]["suspend"] = True
    job["status"] = {}
    controller.replace(JOB, [copy.deepcopy(job)], "1")  # known to the controller, but not to the API
    key = controller.key_of(JOB, job)
    assert await controller.reconcile(key) is not None
    assert api.count("POST", "*/workloads") == 0
    api.put(job)
    await controller.reconcile(key)
    assert api.count("POST", "*/workloads") == 1


JOBSET_OWNER = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "name": "trainer",
    "uid": "uid-js",
    "controller": True,
}


def jobset_controller(
    api: FakeApi, workload: dict[str, Any], started: StartedPods | None = None
) -> tuple[JobController, WorkloadKey, dict[str, Any], Waker, Cache]:
    """A controller of JobSets alone that has seen `workload` as the Workload of the JobSet
    `trainer`, returned suspended and not yet seen, with the JobSet's key."""
    jobset_integration = of_kind("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert jobset_integration is not None and jobset_integration.children is not None
    cache, waker = Cache(), Waker()
    controller = JobController(
        api,  # type: ignore[arg-type]
        cache,
        CacheFeeder(cache, waker),
        StatusWriter(api),  # type: ignore[arg-type]
        Events(),
        lambda: True,
        integrations=[jobset_integration],
        started=started,
    )
    trainer = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "trainer", "namespace": NS, "uid": "uid-js", "labels": {QUEUE: "research"}},
        "spec": {
            "suspend": True,
            "replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": running_job()["spec"]}}],
        },
        "status": {"replicatedJobsStatus": [{"name": "workers", "active": 0}]},
    }
    key = controller.key_of(JobSet.kind, trainer)
    workload["metadata"]["name"] = key.name
    workload["metadata"]["ownerReferences"] = [dict(JOBSET_OWNER)]
    workload["spec"]["podSets"][0]["name"] = "workers"
    workload["status"]["admission"]["podSetAssignments"][0]["name"] = "workers"
    api.put(workload)
    for handler in (controller.feeder, controller):
        handler.replace(kinds.Workload, [copy.deepcopy(workload)], "1")
    return controller, key, trainer, waker, cache


def jobset_child() -> dict[str, Any]:
    child = running_job()
    child["metadata"] = {
        "name": "trainer-workers-0",
        "namespace": NS,
        "uid": "uid-child",
        "ownerReferences": [dict(JOBSET_OWNER)],
    }
    return child


async def test_a_jobsets_quota_comes_back_only_once_its_child_jobs_pods_are_gone() -> None:
    """Issue 26: a suspended JobSet's status counts no active Job as soon as its Jobs are
    suspended, while their pods still terminate; its child Jobs (Integration.children) hold the
    quota until then. A child Job's change alone is what wakes the JobSet up."""
    api = FakeApi()
    controller, key, trainer, waker, cache = jobset_controller(api, evicted_workload())
    assert controller.child_kinds() == (JOB,)  # batch/job is not enabled: its Jobs are watched for the JobSet
    child = jobset_child()
    controller.replace(JobSet.kind, [api.put(trainer)], "1")
    # A restarted operator that has listed its JobSets but not yet their Jobs: not seen is not gone.
    assert controller.children_active(key)
    assert await controller.reconcile(key) is None
    # The chaos suite's over-committed queue: the JobSet controller has not suspended its Job yet,
    # whose pod is not made yet either (its status counts none): the Job may make it any moment.
    child["spec"]["suspend"] = False
    child["status"] = {"active": 0, "terminating": 0}
    controller.replace(JOB, [copy.deepcopy(child)], "1")
    assert controller.children_active(key)
    assert await controller.reconcile(key) is None
    assert cache.infos[f"{NS}/{key.name}"].cluster_queue == "research"
    child["spec"]["suspend"] = True
    child["status"] = {"active": 0, "terminating": 2}
    controller.event(JOB, "MODIFIED", copy.deepcopy(child))
    assert controller.children_active(key)
    assert await controller.reconcile(key) is None  # its pods still terminate: the quota stays
    assert cache.infos[f"{NS}/{key.name}"].cluster_queue == "research"

    while not controller._queue.empty():
        controller._queue.get_nowait()
    controller._queued.clear()
    child["status"] = {"active": 0, "terminating": 0}
    controller.event(JOB, "MODIFIED", copy.deepcopy(child))
    assert controller._queue.get_nowait() == key  # the child's change looks at the JobSet again
    await controller.reconcile(key)
    assert "admission" not in api.objects[kinds.Workload.path(key.name, NS)]["status"]
    assert waker.released == ["research"]

    controller.event(JOB, "DELETED", copy.deepcopy(child))
    assert not controller._children


CHILD_ENDS = ["deleted", "orphaned", "finished"]


def end_child(controller: JobController, child: dict[str, Any], how: str) -> None:
    """The garbage collector deletes the child (or lets it go: the JobSet was deleted orphaning its
    Jobs), or the child finishes."""
    child = copy.deepcopy(child)
    if how == "deleted":
        controller.event(JOB, "DELETED", child)
        return
    if how == "orphaned":
        child["metadata"]["ownerReferences"] = []
    else:
        child["spec"]["suspend"] = False
        child["status"] = {"active": 0, "conditions": [{"type": "Complete", "status": "True"}]}
    controller.event(JOB, "MODIFIED", child)


def deleted_jobset_with_child(
    api: FakeApi, child_suspended: bool
) -> tuple[JobController, WorkloadKey, dict[str, Any], Waker, Cache]:
    """A running JobSet whose admitted Workload's pods are not made yet, deleted while its Job
    still stands: resumed (its pods not made yet), or still suspended (the JobSet controller,
    working from what it saw before the deletion, may yet resume it)."""
    started = StartedPods()
    controller, key, trainer, waker, cache = jobset_controller(api, running_workload(), started)
    started.replace(POD, [], "1")
    child = jobset_child()
    child["spec"]["suspend"] = child_suspended
    child["status"] = {"active": 0}
    trainer["spec"]["suspend"] = False
    controller.replace(JobSet.kind, [api.put(trainer)], "1")
    controller.replace(JOB, [api.put(child)], "1")
    api.remove("JobSet", "trainer", NS)
    controller.event(JobSet.kind, "DELETED", copy.deepcopy(trainer))
    return controller, key, child, waker, cache


@pytest.mark.parametrize("child_suspended", [False, True])
@pytest.mark.parametrize("how", CHILD_ENDS)
async def test_a_deleted_jobsets_workload_stays_until_its_child_jobs_are_gone(child_suspended: bool, how: str) -> None:
    """The chaos suite's over-committed cohort (JobSet s00279): a JobSet was deleted moments after
    its start, before any pod of it was made. Its Workload was deleted and its quota given back
    as none of its pods was seen; its Job, which the garbage collector had not deleted yet, then
    made two pods, which ran on quota given to others. Until no unfinished child stands, the
    Workload is kept."""
    api = FakeApi()
    controller, key, child, waker, _ = deleted_jobset_with_child(api, child_suspended)
    await controller._delete_orphans()
    assert kinds.Workload.path(key.name, NS) in api.objects  # its Job may still make pods

    controller._queued.clear()  # what the workers would have taken
    end_child(controller, child, how)
    assert ORPHANS in controller._queued  # the child's end asks again
    await controller._delete_orphans()
    assert kinds.Workload.path(key.name, NS) not in api.objects
    assert waker.released == []  # the Workload's DELETED event gives its quota back


@pytest.mark.parametrize("child_suspended", [False, True])
@pytest.mark.parametrize("how", CHILD_ENDS)
async def test_a_deleted_jobsets_deleted_workload_keeps_its_quota_until_its_child_jobs_are_gone(
    child_suspended: bool, how: str
) -> None:
    """The garbage collector deletes the JobSet's Workload (the JobSet owns it) before its Jobs:
    the deleted Workload's quota stays until no unfinished child stands."""
    api = FakeApi()
    controller, key, child, waker, cache = deleted_jobset_with_child(api, child_suspended)
    see_deleted(api, controller, copy.deepcopy(api.objects[kinds.Workload.path(key.name, NS)]), "event")
    await controller._confirm_departures()
    assert f"{NS}/{key.name}" in cache.departing and waker.released == []

    controller._queued.clear()
    end_child(controller, child, how)
    assert DEPARTURES in controller._queued
    await controller._confirm_departures()
    assert not cache.departing and waker.released == ["research"]
    assert not controller._replaced and not controller._replaced_of


async def test_a_deleted_jobsets_workload_waits_for_the_first_list_of_jobs() -> None:
    """A restarted operator that has listed its JobSets but not yet their Jobs cannot tell that a
    gone JobSet left none: its Workload stays until the list comes."""
    api = FakeApi()
    started = StartedPods()
    controller, key, _, _, _ = jobset_controller(api, running_workload(), started)
    started.replace(POD, [], "1")
    controller.replace(JobSet.kind, [], "1")
    await controller._delete_orphans()
    assert kinds.Workload.path(key.name, NS) in api.objects
    controller._queued.clear()
    controller.replace(JOB, [], "1")
    assert ORPHANS in controller._queued
    await controller._delete_orphans()
    assert kinds.Workload.path(key.name, NS) not in api.objects


def see_changed(controller: JobController, workload: dict[str, Any]) -> None:
    """The Workload's change, seen by the feeder and the job controller (one watch feeds both)."""
    for handler in (controller.feeder, controller):
        handler.event(kinds.Workload, "MODIFIED", copy.deepcopy(workload))


def see_deleted(api: FakeApi, controller: JobController, workload: dict[str, Any], seen_by: str) -> None:
    """The Workload deleted from the API, its deletion seen by the feeder and the job controller
    as its DELETED event, or (a watch lost meanwhile) as a list that lacks it."""
    meta = workload["metadata"]
    api.remove("Workload", meta["name"], meta["namespace"])
    gone = copy.deepcopy(workload)
    gone["metadata"]["resourceVersion"] = str(api.version)
    for handler in (controller.feeder, controller):
        if seen_by == "event":
            handler.event(kinds.Workload, "DELETED", copy.deepcopy(gone))
        else:
            handler.replace(kinds.Workload, [], str(api.version))


def started_pod(**changes: Any) -> dict[str, Any]:
    """A pod the Job controller made from the started template: it carries the Workload's name."""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-x7k2p",
            "namespace": NS,
            "labels": {"kueue.x-k8s.io/podset": "main", "batch.kubernetes.io/job-name": "train"},
            "annotations": {"kueue.x-k8s.io/workload": "job-train-12345"},
        },
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Pending"},
    }
    for key, value in changes.items():
        section, field = key.split("__")
        pod[section][field] = value
    return pod


async def test_the_quota_stays_while_a_started_pod_may_run_that_the_jobs_status_does_not_count_yet() -> None:
    """The race behind an over-committed queue: the Job controller made a pod, and its write of
    `status.active` conflicted with the suspension; the Job shows no pods, one may still be bound."""
    api = FakeApi()
    started = StartedPods()
    controller, _, waker, cache = setup(api, started=started)
    key = controller.key_of(JOB, running_job())
    for _ in range(3):
        await controller.reconcile(key)  # suspend, start time, restore
    job = copy.deepcopy(stored_job(api))
    assert job["spec"]["suspend"] is True
    job["status"] = {"active": 0, "terminating": 0}
    controller.event(JOB, "MODIFIED", api.put(job))

    assert await controller.reconcile(key) is None  # the pods are not listed yet: not seen is not gone
    started.replace(POD, [started_pod()], "1")
    assert await controller.reconcile(key) is None  # unbound, not deleted: it may still be bound
    assert cache.infos[f"{NS}/job-train-12345"].cluster_queue == "research"

    while not controller._queue.empty():
        controller._queue.get_nowait()
    controller._queued.clear()
    # Being deleted, but bound: it runs out its grace period.
    started.event(POD, "MODIFIED", started_pod(metadata__deletionTimestamp=CONDITION_TIME, spec__nodeName="kwok-1"))
    assert controller._queue.empty()  # still running: nothing to look at again
    assert await controller.reconcile(key) is None
    started.event(POD, "MODIFIED", started_pod(status__phase="Failed", spec__nodeName="kwok-1"))
    assert controller._queue.get_nowait() == key  # its last pod stopped: the job is looked at again
    await controller.reconcile(key)
    assert "admission" not in stored_workload(api)["status"]
    assert waker.released == ["research"]


async def test_the_quota_stays_while_the_api_shows_a_started_pod_the_watch_has_not_delivered() -> None:
    """The chaos suite's over-committed cohort: the pod watch was cut and resumed, so the index
    had not seen a pod the Job controller made just before the suspension; the Job's status did
    not count it either. Giving the quota back rests on an absence, so it is read fresh first."""
    api = FakeApi()
    started = StartedPods()
    controller, _, waker, cache = setup(api, started=started)
    started.replace(POD, [], "1")  # listed before the pod was made; its ADDED event is late
    key = controller.key_of(JOB, running_job())
    for _ in range(3):
        await controller.reconcile(key)  # suspend, start time, restore
    job = copy.deepcopy(stored_job(api))
    job["status"] = {"active": 0, "terminating": 0}
    controller.event(JOB, "MODIFIED", api.put(job))
    api.put(started_pod(spec__nodeName="kwok-1", status__phase="Running"))

    assert await controller.reconcile(key) is None
    assert cache.infos[f"{NS}/job-train-12345"].cluster_queue == "research"
    assert "admission" in stored_workload(api)["status"] and waker.released == []

    api.put(started_pod(spec__nodeName="kwok-1", status__phase="Failed"))
    await controller.reconcile(key)  # the API shows none that may run: the quota comes back
    assert "admission" not in stored_workload(api)["status"]
    assert waker.released == ["research"]


def test_started_pods_tell_when_a_workloads_first_pod_comes_and_its_last_goes() -> None:
    told: list[str] = []
    started = StartedPods(told.append)
    wl = f"{NS}/job-train-12345"
    assert started.running(wl)  # before the first list
    started.replace(POD, [], "1")
    # It was said to run only because the list had not come: that it does not is news.
    assert not started.running(wl) and told == [wl]
    told.clear()
    started.event(POD, "ADDED", started_pod())
    assert started.running(wl) and told == [wl]
    second = started_pod()
    second["metadata"]["name"] = "train-second"
    started.event(POD, "ADDED", second)
    started.event(POD, "MODIFIED", started_pod(spec__nodeName="kwok-1"))
    assert told == [wl]  # one more, or one bound: no change to tell
    started.event(POD, "DELETED", started_pod())
    assert started.running(wl) and told == [wl]
    # Deleted before it was bound: it can never run.
    started.event(POD, "MODIFIED", {**second, "metadata": {**second["metadata"], "deletionTimestamp": CONDITION_TIME}})
    assert not started.running(wl) and told == [wl, wl]
    unannotated = started_pod()
    unannotated["metadata"]["annotations"] = {}
    started.replace(POD, [unannotated, started_pod(status__phase="Succeeded")], "2")
    assert not started.running(wl) and told == [wl, wl]  # nothing runs under it: nothing changed
    started.replace(POD, [started_pod()], "3")
    assert told == [wl, wl, wl]


def test_started_pods_tell_at_the_first_list_of_a_workload_said_to_run_before_it() -> None:
    """A Workload deleted before the pods are listed keeps its quota (not seen is not gone); the
    list must say so when it shows none of its pods, or that quota would never come back."""
    told: list[str] = []
    started = StartedPods(told.append)
    running, idle, unasked = (f"{NS}/job-{name}-12345" for name in ("train", "idle", "other"))
    assert started.running(running) and started.running(idle)
    started.replace(POD, [started_pod()], "1")
    assert told == [idle, running] and not started.running(idle) and not started.running(unasked)
    started.replace(POD, [], "2")
    assert told == [idle, running, running]  # asked once: the next lists tell changes only


def running_workload() -> dict[str, Any]:
    """The Job's Workload, admitted and running (what the garbage collector deletes with the Job)."""
    workload = copy.deepcopy(evicted_workload())
    workload["status"]["conditions"] = [
        c for c in workload["status"]["conditions"] if c["type"] not in ("Evicted", "Preempted")
    ]
    return workload


def test_a_workload_deleted_with_its_job_keeps_its_quota_while_its_started_pods_may_run() -> None:
    """The chaos suite's over-committed cohort: a running Job was deleted, and the garbage collector
    deleted its Workload and its pods at once; the pods ran out their grace period on their nodes
    while the Workload's quota went to the next workload (Kueue's finalizer holds the Workload;
    this operator adds none)."""
    api = FakeApi()
    started = StartedPods()
    controller, _, waker, cache = setup(api, started=started)
    feeder = controller.feeder
    key = f"{NS}/job-train-12345"
    feeder.replace(kinds.ResourceFlavor, [resource_flavor("on-demand")], "1")
    feeder.replace(kinds.ClusterQueue, [cluster_queue("research", 2, flavor="on-demand")], "1")
    feeder.replace(kinds.LocalQueue, [local_queue("research", namespace=NS)], "1")
    feeder.event(kinds.Workload, "MODIFIED", copy.deepcopy(api.put(running_workload())))
    waiting = as_dict(pending("next", "research", 2, namespace=NS))
    feeder.event(kinds.Workload, "ADDED", copy.deepcopy(waiting))
    started.replace(POD, [started_pod(spec__nodeName="kwok-1", status__phase="Running")], "1")

    gone = copy.deepcopy(stored_workload(api))
    gone["metadata"]["resourceVersion"] = str(int(gone["metadata"]["resourceVersion"]) + 1)
    controller.event(JOB, "DELETED", copy.deepcopy(stored_job(api)))
    for handler in (feeder, controller):
        handler.event(kinds.Workload, "DELETED", copy.deepcopy(gone))
    # Its pod is being deleted, but bound: it still runs on its quota.
    started.event(POD, "MODIFIED", started_pod(metadata__deletionTimestamp=CONDITION_TIME, spec__nodeName="kwok-1"))
    assert key in cache.departing and waker.released == []
    result = Engine().cycle(cache.snapshot(NOW), QueueState())
    assert result.admitted == [] and result.preempted == []  # no room, and nothing left to evict
    # A fresh list of Workloads does not show it: it stays until its pods are gone.
    feeder.replace(kinds.Workload, [copy.deepcopy(waiting)], str(int(gone["metadata"]["resourceVersion"]) + 1))
    assert key in cache.departing and waker.released == []

    started.event(POD, "DELETED", started_pod())
    assert key not in cache.infos and not cache.departing
    assert waker.released == ["research"]
    result = Engine().cycle(cache.snapshot(NOW), QueueState())
    assert [a.workload.key for a in result.admitted] == [f"{NS}/next"]


async def test_a_deleted_workload_whose_pods_have_ended_gives_its_quota_back_once_the_api_says_so() -> None:
    """The index has seen its only pod succeed: one read of the API confirms it, and the quota
    comes back."""
    api = FakeApi()
    started = StartedPods()
    controller, _, waker, cache = setup(api, started=started)
    pod = api.put(started_pod(status__phase="Succeeded", spec__nodeName="kwok-1"))
    started.replace(POD, [copy.deepcopy(pod)], "1")
    controller.feeder.event(kinds.Workload, "DELETED", copy.deepcopy(stored_workload(api)))
    assert f"{NS}/job-train-12345" in cache.departing and waker.released == []
    assert DEPARTURES in controller._queued  # asked of the API by a worker
    await controller._confirm_departures()
    assert f"{NS}/job-train-12345" not in cache.infos and not cache.departing
    assert waker.released == ["research"]


@pytest.mark.looptime
@pytest.mark.parametrize("seen_by", ["event", "relist"])
async def test_a_workload_deleted_before_the_index_saw_its_pods_keeps_its_quota_until_the_api_shows_none(
    seen_by: str,
) -> None:
    """The chaos suite's over-committed cohort (JobSet s00252): the Workload was deleted moments
    after its job had made its pods, before the started-pods watch brought them. On the index's
    word alone its quota went back at once, while the pods waited to be bound, and the next
    workload was admitted onto the same cpu. The API's answer decides, and is asked again while
    the index has still not seen the pods."""
    api = FakeApi()
    started = StartedPods()
    controller, _, waker, cache = setup(api, started=started)
    key = f"{NS}/job-train-12345"
    started.replace(POD, [], "1")  # its watch has not brought the pod yet
    pod = api.put(started_pod())  # made, not bound yet
    stopped = stored_job(api)  # and stopped since, its status not counting the pod yet
    stopped["spec"]["suspend"] = True
    stopped["status"] = {"active": 0, "startTime": CONDITION_TIME}
    controller.event(JOB, "MODIFIED", copy.deepcopy(api.put(stopped)))
    running = api.put(running_workload())
    see_changed(controller, running)
    see_deleted(api, controller, running, seen_by)
    assert key in cache.departing and waker.released == []

    await controller._confirm_departures()
    assert key in cache.departing and waker.released == []  # the API shows the pod
    assert controller._departures == {key}  # to be read again: the index has not seen it

    api.remove("Pod", pod["metadata"]["name"], NS)  # deleted before it was bound
    await controller._confirm_departures()
    assert not cache.departing and waker.released == ["research"]
    assert not controller._departures


async def test_a_deleted_workload_whose_pods_the_index_follows_waits_for_their_end() -> None:
    """Once the index has seen the pods the API showed, their end comes by its watch: no more reads."""
    api = FakeApi()
    started = StartedPods()
    controller, _, waker, cache = setup(api, started=started)
    key = f"{NS}/job-train-12345"
    started.replace(POD, [], "1")
    pod = api.put(started_pod(spec__nodeName="kwok-1"))
    controller.feeder.event(kinds.Workload, "DELETED", copy.deepcopy(stored_workload(api)))
    started.event(POD, "ADDED", copy.deepcopy(pod))
    await controller._confirm_departures()
    assert key in cache.departing and not controller._departures
    started.event(POD, "DELETED", copy.deepcopy(pod))
    assert not cache.departing and waker.released == ["research"]


@pytest.mark.looptime
@pytest.mark.parametrize("seen_by", ["event", "relist"])
async def test_a_deleted_workload_keeps_its_quota_while_its_job_stands_unstopped(seen_by: str) -> None:
    """The Workload of a job that had just started was deleted before the Job controller made
    its pods: neither the index nor the API shows one yet, but the Job, not suspended, makes them
    any moment under the deleted Workload's name. Its quota comes back once the job is stopped
    and none of its pods may run (Kueue's finalizer holds such a Workload until then)."""
    api = FakeApi()
    started = StartedPods()
    controller, _, waker, cache = setup(api, started=started)
    key = f"{NS}/job-train-12345"
    started.replace(POD, [], "1")
    just_started = stored_job(api)
    just_started["status"] = {"startTime": CONDITION_TIME}  # no pod made yet
    controller.event(JOB, "MODIFIED", copy.deepcopy(api.put(just_started)))
    running = api.put(running_workload())
    see_changed(controller, running)
    see_deleted(api, controller, running, seen_by)
    await controller._confirm_departures()
    assert key in cache.departing and waker.released == [], "the quota came back while its Job may make pods"

    job = controller.key_of(JOB, running_job())
    await controller.reconcile(job)  # no Workload: the job is stopped
    assert stored_job(api)["spec"]["suspend"] is True
    pod = api.put(started_pod())  # the Job controller's create, answered after the suspension
    started.event(POD, "ADDED", copy.deepcopy(pod))
    for _ in range(3):
        await controller.reconcile(job)
    await controller._confirm_departures()
    assert key in cache.departing and waker.released == []

    api.remove("Pod", pod["metadata"]["name"], NS)  # deleted before it was bound
    started.event(POD, "DELETED", copy.deepcopy(pod))
    await controller.reconcile(job)  # the stopped job, looked at again, no longer holds it back
    await controller._confirm_departures()
    assert not cache.departing and waker.released == ["research"]


async def test_a_deleted_workload_held_back_by_its_job_departs_once_the_job_is_deleted_too() -> None:
    """The job that held its deleted Workload's quota back (it might still make pods) is deleted
    in turn: nothing is left to make them, so the API is asked and the quota comes back."""
    api = FakeApi()
    started = StartedPods()
    controller, _, waker, cache = setup(api, started=started)
    key = f"{NS}/job-train-12345"
    started.replace(POD, [], "1")
    running = api.put(running_workload())
    see_changed(controller, running)
    see_deleted(api, controller, running, "event")
    await controller._confirm_departures()
    assert key in cache.departing and not controller._departures  # held back by its running Job

    controller._queued.clear()  # what the workers would have taken
    api.remove("Job", "train", NS)
    controller.event(JOB, "DELETED", copy.deepcopy(running_job()))
    assert DEPARTURES in controller._queued
    await controller._confirm_departures()
    assert not cache.departing and waker.released == ["research"]


@pytest.mark.looptime
async def test_a_deleted_jobs_workload_stays_until_its_started_pods_are_gone() -> None:
    """Deleting a running job must not free its quota while its pods run out their grace period."""
    api = FakeApi()
    started = StartedPods()
    controller, _, _, _ = setup(api, started=started)
    controller.replace(JOB, [], "1")  # the job is gone
    started.replace(POD, [started_pod(metadata__deletionTimestamp=CONDITION_TIME, spec__nodeName="kwok-1")], "1")
    await controller._delete_orphans()
    assert kinds.Workload.path("job-train-12345", NS) in api.objects  # its pod still runs
    while not controller._queue.empty():
        controller._queue.get_nowait()
    controller._queued.clear()
    started.event(POD, "DELETED", started_pod())
    assert controller._queue.get_nowait() == ORPHANS
    await controller._delete_orphans()
    assert kinds.Workload.path("job-train-12345", NS) not in api.objects


@pytest.mark.looptime
@pytest.mark.parametrize("seen_by", ["event", "relist"])
async def test_a_running_jobs_deleted_workload_is_made_again_only_once_its_started_pods_are_gone(
    seen_by: str,
) -> None:
    """The chaos suite's second over-committed queue: a running Job's Workload was deleted (the Job
    stays), its pod was being deleted but still ran on its node, and the Workload made again under
    the same name took the deleted one's place: it was admitted, the Job started again and the
    Job controller made a new pod while the old one still ran. Kueue's finalizer keeps the old
    Workload until the job has stopped, so its job reconciler makes no new one before that. The
    deletion is seen as a DELETED event, or (a watch lost meanwhile) as a list that lacks it."""
    api = FakeApi()
    started = StartedPods()
    controller, _, waker, cache = setup(api, started=started)
    feeder = controller.feeder
    name = "job-train-12345"
    workload_key = f"{NS}/{name}"
    feeder.replace(kinds.ResourceFlavor, [resource_flavor("on-demand")], "1")
    feeder.replace(kinds.ClusterQueue, [cluster_queue("research", 2, flavor="on-demand")], "1")
    feeder.replace(kinds.LocalQueue, [local_queue("research", namespace=NS)], "1")
    running = api.put(running_workload())
    see_changed(controller, running)
    old_pod = api.put(started_pod(metadata__deletionTimestamp=CONDITION_TIME, spec__nodeName="kwok-1"))
    started.replace(POD, [copy.deepcopy(old_pod)], "1")

    see_deleted(api, controller, running, seen_by)
    assert workload_key in cache.departing and waker.released == []

    job = controller.key_of(JOB, running_job())
    await controller.reconcile(job)  # no Workload: the job is stopped first
    assert stored_job(api)["spec"]["suspend"] is True
    # The Job's status lags its pods: it counts the pod being deleted neither active nor terminating.
    stopped = stored_job(api)
    stopped["status"] = {"active": 0, "startTime": CONDITION_TIME}
    controller.event(JOB, "MODIFIED", copy.deepcopy(api.put(stopped)))
    for _ in range(3):
        await controller.reconcile(job)
    made = [o for o in api.workloads().values() if o["metadata"].get("ownerReferences")]
    assert made == [], "a Workload was made again while a pod started under the old one may run"
    assert workload_key in cache.departing  # the old pod's quota is still held

    while not controller._queue.empty():  # what the workers would have taken
        controller._queue.get_nowait()
    controller._queued.clear()
    api.remove("Pod", old_pod["metadata"]["name"], NS)
    started.event(POD, "DELETED", copy.deepcopy(old_pod))
    assert not cache.departing and waker.released == ["research"]
    assert controller._queue.get_nowait() == job  # the old Workload's last pod wakes its job
    await controller.reconcile(job)
    made = [o for o in api.workloads().values() if o["metadata"].get("ownerReferences")]
    assert len(made) == 1  # made again now (the fixture's name is not the one the job derives)


@pytest.mark.looptime
async def test_a_running_jobs_deleted_workload_is_not_made_again_on_a_pod_watch_that_lags() -> None:
    """The index has not seen the old Workload's pod yet; the API has it, bound and running: the
    API's answer decides before a new Workload is made."""
    api = FakeApi()
    started = StartedPods()
    controller, _, _, _ = setup(api, started=started)
    running = api.put(running_workload())
    see_changed(controller, running)
    started.replace(POD, [], "1")  # its watch has not shown the pod yet
    api.put(started_pod(metadata__deletionTimestamp=CONDITION_TIME, spec__nodeName="kwok-1"))
    api.remove("Workload", "job-train-12345", NS)
    for handler in (controller.feeder, controller):
        handler.event(kinds.Workload, "DELETED", copy.deepcopy(running))
    job = controller.key_of(JOB, running_job())
    stopped = stored_job(api)
    stopped["spec"]["suspend"] = True
    stopped["status"] = {"active": 0, "startTime": CONDITION_TIME}
    controller.event(JOB, "MODIFIED", copy.deepcopy(api.put(stopped)))
    await controller.reconcile(job)
    assert not [o for o in api.workloads().values() if o["metadata"].get("ownerReferences")]
    api.remove("Pod", "train-x7k2p", NS)
    await controller.reconcile(job)
    assert len([o for o in api.workloads().values() if o["metadata"].get("ownerReferences")]) == 1


async def test_a_late_deleted_event_of_the_old_workload_leaves_the_job_the_one_made_again() -> None:
    """The job's Workload was deleted and made again under its name; the new one came from the
    create's answer, and the watch's DELETED event of the old one came after it. That event is
    about the old object: the job keeps its new Workload, and is not stopped for want of one."""
    api = FakeApi()
    controller, _, _, _ = setup(api)
    feeder = controller.feeder
    running = api.put(running_workload())
    see_changed(controller, running)
    api.remove("Workload", "job-train-12345", NS)
    gone = copy.deepcopy(running)
    gone["metadata"]["resourceVersion"] = str(api.version)
    again = running_workload()
    again["metadata"]["uid"] = "uid-made-again"
    made = api.put(again)
    feeder.ingest("Workload", copy.deepcopy(made))  # the create's answer, as `_carry_out` stores it
    controller._workload(copy.deepcopy(made))
    for handler in (feeder, controller):
        handler.event(kinds.Workload, "DELETED", copy.deepcopy(gone))
    job = controller.key_of(JOB, running_job())
    held = controller.workload_of(job)
    assert held is not None and held["metadata"]["uid"] == "uid-made-again"
    await controller.reconcile(job)
    assert not stored_job(api)["spec"].get("suspend")


async def _until(check: Any, turns: int = 500) -> None:
    for _ in range(turns):
        if check():
            return
        await asyncio.sleep(0)
    raise AssertionError("not reached")


async def test_a_job_is_reconciled_by_one_worker_at_a_time() -> None:
    """A job asked for again while a worker carries out its step is taken again only once that
    step is done: a second worker would plan from the objects as they were before it. Seen in the
    chaos suite: a Pod's ungate was on its way when its Workload was evicted; another worker, still
    seeing the Pod gated, gave the Workload's quota back, then the ungate landed and the Pod ran
    on no quota (until the next look stopped it)."""
    api = FakeApi()
    started = StartedPods()
    controller, _, _, _ = new_controller(api, started=started)
    feeder = controller.feeder
    started.replace(POD, [], "1")
    feeder.replace(kinds.ResourceFlavor, [resource_flavor("on-demand")], "1")
    gated = api.put(plain_pod())
    admitted = pod_workload(Pods(gated), "QuotaReserved", "Admitted")
    for made in admitted["status"]["conditions"]:
        made["lastTransitionTime"] = CONDITION_TIME
    admitted = api.put(admitted)
    path = kinds.Workload.path(admitted["metadata"]["name"], "ns")
    feeder.replace(kinds.Workload, [copy.deepcopy(admitted)], "1")
    controller.replace(kinds.Workload, [copy.deepcopy(admitted)], "1")
    controller.replace(Pods.kind, [copy.deepcopy(gated)], "1")

    def reserved() -> bool:
        conditions = api.objects[path]["status"]["conditions"]
        return any(c["type"] == "QuotaReserved" and c["status"] == "True" for c in conditions)

    ungate = api.hold("PATCH", "*/pods/unit-test")
    task = asyncio.create_task(controller.run())
    try:
        await _until(lambda: ungate.waiting)  # the ungate is on its way
        evicted = copy.deepcopy(api.objects[path])
        evicted["status"]["conditions"].append(condition("Evicted", "Preempted", "Preempted by ns/hero"))
        evicted = api.put(evicted)
        feeder.ingest("Workload", copy.deepcopy(evicted))
        controller.event(kinds.Workload, "MODIFIED", copy.deepcopy(evicted))
        for _ in range(200):
            await asyncio.sleep(0)  # every other worker has its turn
        assert reserved(), "the quota came back while the Pod's ungate was on its way"
        ungate.gate.set()
        # The job is looked at again once the ungate is done: the evicted Workload's Pod is stopped.
        await _until(lambda: api.count("DELETE", "*/pods/unit-test"))
    finally:
        task.cancel()
    assert reserved()  # until the stopped Pod's end is seen


async def test_a_workload_the_controller_deletes_itself_is_made_again_only_once_its_started_pods_are_gone() -> None:
    """A job that no longer matches its admitted Workload is stopped and the Workload deleted by
    this controller; its DELETED event then finds the Workload already let go. The new Workload
    (the same name: it is derived from the job) waits, as after anyone else's deletion, until
    no pod started under the old one may run: made at once, it took the departing one's place
    in the cache, whose quota the stopped job's last pod still used."""
    api = FakeApi()
    started = StartedPods()
    controller, _, _, cache = setup(api, started=started)
    feeder = controller.feeder
    running = api.put(running_workload())
    see_changed(controller, running)
    old_pod = api.put(started_pod(metadata__deletionTimestamp=CONDITION_TIME, spec__nodeName="kwok-1"))
    started.replace(POD, [copy.deepcopy(old_pod)], "1")
    changed = stored_job(api)  # stopped, its pod still ending; its template changed meanwhile
    changed["spec"]["suspend"] = True
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "trainer:2"
    changed["status"] = {"active": 0, "startTime": CONDITION_TIME}
    controller.event(JOB, "MODIFIED", copy.deepcopy(api.put(changed)))
    job = controller.key_of(JOB, running_job())

    step = await controller.reconcile(job)
    assert type(step).__name__ == "DeleteWorkload"
    assert f"{NS}/job-train-12345" in cache.departing  # its pod still runs
    gone = copy.deepcopy(running)
    gone["metadata"]["resourceVersion"] = str(api.version)
    for handler in (feeder, controller):
        handler.event(kinds.Workload, "DELETED", copy.deepcopy(gone))
    for _ in range(3):
        await controller.reconcile(job)
    made = [o for o in api.workloads().values() if o["metadata"].get("ownerReferences")]
    assert made == [], "a Workload was made again while a pod started under the deleted one may run"

    api.remove("Pod", old_pod["metadata"]["name"], NS)
    started.event(POD, "DELETED", copy.deepcopy(old_pod))
    await controller.reconcile(job)
    made = [o for o in api.workloads().values() if o["metadata"].get("ownerReferences")]
    assert len(made) == 1
