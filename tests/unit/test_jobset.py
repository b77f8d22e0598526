"""JobSet on the job framework, as Kueue's jobset integration (pkg/controller/jobs/jobset,
v0.19.2) defines it: pod sets per replicated job, start and stop through spec.suspend with the
templates merged and restored, finished from the JobSet's conditions, and its webhooks."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from preemption_operator.jobs.framework import INTEGRATIONS, PodSetInfo, of_kind
from preemption_operator.jobs.jobset import INTEGRATION, JobSet, mutate, validate
from preemption_operator.jobs.podsets import apply, from_pod_set


def replicated_job(name: str, replicas: int | None = 1, parallelism: int | None = 1, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
            },
        }
    }
    if parallelism is not None:
        spec["parallelism"] = parallelism
    spec.update(extra)
    rj: dict[str, Any] = {"name": name, "template": {"spec": spec}}
    if replicas is not None:
        rj["replicas"] = replicas
    return rj


def jobset(*rjs: dict[str, Any], suspend: bool | None = True, queue: str | None = "lq") -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    spec: dict[str, Any] = {"replicatedJobs": list(rjs)}
    if suspend is not None:
        spec["suspend"] = suspend
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ns", "uid": "uid-aaa", "labels": labels},
        "spec": spec,
    }


def test_the_jobset_integration_is_registered_under_kueues_name() -> None:
    assert INTEGRATIONS["jobset.x-k8s.io/jobset"] is INTEGRATION
    assert of_kind("jobset.x-k8s.io/v1alpha2", "JobSet") is INTEGRATION
    assert JobSet.kind.plural == "jobsets" and JobSet.kind.namespaced


def test_the_workload_is_named_after_the_jobset_as_kueue_names_it() -> None:
    # jobframework.GetWorkloadNameForOwnerWithGVK: "jobset-" + name + "-" + sha1(kind, group, name, uid)[:5]
    assert JobSet(jobset(replicated_job("a"))).workload_name() == "jobset-js-ccaac"


def test_one_pod_set_per_replicated_job_of_replicas_times_the_pods_of_one_job() -> None:
    """Kueue's podsCountPerReplica: parallelism (default 1), capped by completions."""
    js = jobset(
        replicated_job("Leader", replicas=1, parallelism=1),
        replicated_job("workers", replicas=3, parallelism=4, completions=2),
        replicated_job("defaults", replicas=None, parallelism=None),
    )
    sets = JobSet(js).pod_sets()
    assert [(s["name"], s["count"]) for s in sets] == [("leader", 1), ("workers", 6), ("defaults", 1)]
    assert sets[1]["template"] == js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]
    assert all("topologyRequest" not in s for s in sets)


def test_a_topology_request_numbers_pods_by_completion_index_within_each_child_job() -> None:
    rj = replicated_job("workers", replicas=2, parallelism=4)
    rj["template"]["spec"]["template"]["metadata"]["annotations"] = {
        "kueue.x-k8s.io/podset-required-topology": "cloud.provider.com/topology-rack"
    }
    (pod_set,) = JobSet(jobset(rj)).pod_sets()
    assert pod_set["topologyRequest"] == {
        "required": "cloud.provider.com/topology-rack",
        "podIndexLabel": "batch.kubernetes.io/job-completion-index",
        "subGroupIndexLabel": "jobset.sigs.k8s.io/job-index",
        "subGroupCount": 2,
    }


def test_the_priority_class_is_the_first_one_a_replicated_job_names() -> None:
    a, b, c = replicated_job("a"), replicated_job("b"), replicated_job("c")
    b["template"]["spec"]["template"]["spec"]["priorityClassName"] = "high"
    c["template"]["spec"]["template"]["spec"]["priorityClassName"] = "low"
    assert JobSet(jobset(a, b, c)).priority_class_name() == "high"
    assert JobSet(jobset(a)).priority_class_name() == ""


def test_a_workload_with_other_counts_or_containers_no_longer_describes_the_jobset() -> None:
    js = JobSet(jobset(replicated_job("a"), replicated_job("b", replicas=2)))
    sets = js.pod_sets()
    assert js.equivalent(copy.deepcopy(sets), admitted=False)
    fewer = copy.deepcopy(sets)
    fewer[1]["count"] = 1
    assert not js.equivalent(fewer, admitted=False)
    assert not js.equivalent(sets[:1], admitted=False)
    tolerated = copy.deepcopy(sets)
    tolerated[0]["template"]["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
    assert js.equivalent(tolerated, admitted=True) and not js.equivalent(tolerated, admitted=False)


def test_starting_unsuspends_and_puts_each_flavors_node_selector_into_its_replicated_job() -> None:
    obj = jobset(replicated_job("leader"), replicated_job("workers", replicas=2))
    infos = [
        PodSetInfo("leader", 1, node_selector={"pool": "cpu"}, labels={"kueue.x-k8s.io/podset": "leader"}),
        PodSetInfo("workers", 2, node_selector={"pool": "gpu"}, tolerations=({"key": "gpu", "operator": "Exists"},)),
    ]
    (patch,) = JobSet(obj).run(infos)
    started = apply(obj, patch.body)
    assert started["spec"]["suspend"] is False
    leader, workers = (rj["template"]["spec"]["template"] for rj in started["spec"]["replicatedJobs"])
    assert leader["spec"]["nodeSelector"] == {"pool": "cpu"}
    assert leader["metadata"]["labels"] == {"app": "leader", "kueue.x-k8s.io/podset": "leader"}
    assert workers["spec"]["nodeSelector"] == {"pool": "gpu"}
    assert workers["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert started["spec"]["replicatedJobs"][1]["replicas"] == 2  # the rest of each element is kept


def test_starting_with_another_number_of_pod_sets_is_refused_with_kueues_message() -> None:
    obj = jobset(replicated_job("a"), replicated_job("b"))
    with pytest.raises(ValueError, match=r"^invalid podset infos: expecting 2 podset, got 1$"):
        JobSet(obj).run([PodSetInfo("a", 1)])


def test_stopping_suspends_and_restores_the_templates_the_workload_kept_in_one_write() -> None:
    obj = jobset(replicated_job("leader"), replicated_job("workers"), suspend=False)
    originals = [from_pod_set(s) for s in JobSet(obj).pod_sets()]
    (start,) = JobSet(obj).run([PodSetInfo("leader", 1, node_selector={"pool": "a"}), PodSetInfo("workers", 1)])
    running = apply(obj, start.body)
    stop = JobSet(running).stop(originals)
    assert len(stop) == 1
    stopped = apply(running, stop[0].body)
    assert stopped["spec"]["suspend"] is True
    assert stopped["spec"]["replicatedJobs"] == obj["spec"]["replicatedJobs"]
    assert JobSet(stopped).is_suspended() and not JobSet(stopped).stopping()


def test_stopping_without_matching_pod_sets_only_suspends() -> None:
    obj = jobset(replicated_job("a"), replicated_job("b"), suspend=False)
    (patch,) = JobSet(obj).stop([PodSetInfo("a", 1)])
    assert patch.body == {"spec": {"suspend": True}}


def test_active_while_a_child_job_has_running_pods() -> None:
    obj = jobset(replicated_job("a"), suspend=False)
    assert not JobSet(obj).is_active()
    obj["status"] = {"replicatedJobsStatus": [{"name": "a", "active": 0, "succeeded": 1}, {"name": "b", "active": 1}]}
    assert JobSet(obj).is_active()


@pytest.mark.parametrize(
    ("suspend", "status", "may_run"),
    [
        (False, {}, True),  # not suspended yet by the JobSet controller: it may make its pods any moment
        (False, {"conditions": [{"type": "Complete", "status": "True"}]}, False),  # done: it makes none
        (False, {"conditions": [{"type": "Failed", "status": "True"}]}, False),
        (True, {"active": 1}, True),
        (True, {"active": 0, "terminating": 2}, True),  # its pods still run out their grace period
        (True, {"active": 0, "terminating": 0}, False),
    ],
)
def test_a_child_job_may_run_pods_until_it_is_suspended_or_done_and_its_pods_are_gone(
    suspend: bool, status: dict[str, Any], may_run: bool
) -> None:
    assert INTEGRATION.children is not None
    child = {"spec": {"suspend": suspend, "parallelism": 1}, "status": status}
    assert INTEGRATION.children.active(child) is may_run


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ("Completed", ("Succeeded", "jobset completed successfully")),
        ("Failed", ("Failed", "jobset completed successfully")),
    ],
)
def test_finished_from_the_jobsets_completed_or_failed_condition(condition: str, expected: tuple[str, str]) -> None:
    obj = jobset(replicated_job("a"))
    obj["status"] = {"conditions": [{"type": condition, "status": "False", "message": "no"}]}
    assert JobSet(obj).finished() is None
    obj["status"]["conditions"].append({"type": condition, "status": "True", "message": expected[1]})
    finished = JobSet(obj).finished()
    assert finished is not None and (finished.reason, finished.message) == expected


def test_a_queued_jobset_is_created_suspended_and_others_are_left_alone() -> None:
    assert mutate(jobset(replicated_job("a"), suspend=None)) == [{"op": "add", "path": "/spec/suspend", "value": True}]
    assert mutate(jobset(replicated_job("a"), suspend=False)) == [{"op": "add", "path": "/spec/suspend", "value": True}]
    assert mutate(jobset(replicated_job("a"), suspend=True)) == []
    assert mutate(jobset(replicated_job("a"), suspend=False, queue=None)) == []


def test_a_running_jobset_keeps_its_queue_and_a_queue_name_must_be_a_subdomain() -> None:
    running = jobset(replicated_job("a"), suspend=False)
    moved = copy.deepcopy(running)
    moved["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "other"
    assert validate(moved, running) == [
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "other": field is immutable'
    ]
    suspended = jobset(replicated_job("a"), suspend=True)
    moved_while_suspended = copy.deepcopy(suspended)
    moved_while_suspended["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "other"
    assert validate(moved_while_suspended, suspended) == []
    (error,) = validate(jobset(replicated_job("a"), queue="Not_A_Name"), None)
    assert error.startswith('metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "Not_A_Name": a lowercase RFC')
