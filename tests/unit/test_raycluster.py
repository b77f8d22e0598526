"""RayCluster on the job framework, as Kueue's raycluster integration (pkg/controller/jobs/raycluster,
v0.19.2) defines it: the head's pod set and one per worker group, start and stop through
spec.suspend with the templates merged and restored, never finished, and its webhooks; and the
one place it is stricter than Kueue, when the quota of a suspended cluster comes back."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from preemption_operator.jobs.framework import INTEGRATIONS, PodSetInfo, of_kind
from preemption_operator.jobs.podsets import apply, from_pod_set
from preemption_operator.jobs.raycluster import INTEGRATION, RayCluster, mutate, validate
from preemption_operator.jobs.reconciler import (
    ComposeError,
    CreateWorkload,
    Flavor,
    PatchJob,
    WriteWorkloadStatus,
    plan,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
FLAVORS = {"unit-test-flavor": Flavor({"kubernetes.io/arch": "arm64"})}
QUEUE_FIELD = "metadata.labels[kueue.x-k8s.io/queue-name]"


def container(name: str, **requests: str) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    if requests:
        out["resources"] = {"requests": dict(requests)}
    return out


def group(name: str, *containers: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "groupName": name,
        "rayStartParams": {},
        "template": {"spec": {"restartPolicy": "Never", "containers": list(containers) or [container("worker")]}},
        **fields,
    }


def cluster(
    *workers: dict[str, Any],
    head: list[dict[str, Any]] | None = None,
    suspend: bool | None = True,
    queue: str | None = "queue",
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "headGroupSpec": {
            "rayStartParams": {},
            "template": {"spec": {"restartPolicy": "Never", "containers": head or [container("head-container")]}},
        },
        "workerGroupSpecs": list(workers),
        **spec,
    }
    if suspend is not None:
        body["suspend"] = suspend
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": "rc",
            "namespace": "ns",
            "uid": "uid-aaa",
            "generation": 1,
            "labels": {"kueue.x-k8s.io/queue-name": queue} if queue else {},
            "annotations": dict(annotations or {}),
        },
        "spec": body,
    }


def counts(obj: dict[str, Any]) -> list[tuple[str, int]]:
    return [(ps["name"], ps["count"]) for ps in RayCluster(obj).pod_sets()]


def head_containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    containers: list[dict[str, Any]] = RayCluster(obj).pod_sets()[0]["template"]["spec"]["containers"]
    return containers


def test_the_raycluster_integration_is_registered_under_kueues_name() -> None:
    assert INTEGRATIONS["ray.io/raycluster"] is INTEGRATION
    assert of_kind("ray.io/v1", "RayCluster") is INTEGRATION
    assert RayCluster.kind.plural == "rayclusters" and RayCluster.kind.namespaced


def test_the_workload_is_named_after_the_cluster_as_kueue_names_it() -> None:
    # jobframework.GetWorkloadNameForOwnerWithGVK, computed for RayCluster "rc", UID "uid-aaa".
    assert RayCluster(cluster(group("workers"))).workload_name() == "raycluster-rc-c299d"


def test_the_head_pod_set_comes_first_then_one_per_worker_group_in_lower_case() -> None:
    """TestBuildPodSets "spec with multiple worker groups": head 1, then each group's replicas."""
    obj = cluster(group("Group1", replicas=2), group("group2", replicas=5))
    assert counts(obj) == [("head", 1), ("group1", 2), ("group2", 5)]
    sets = RayCluster(obj).pod_sets()
    assert sets[0]["template"] == obj["spec"]["headGroupSpec"]["template"]
    assert sets[2]["template"] == obj["spec"]["workerGroupSpecs"][1]["template"]
    assert all("topologyRequest" not in ps for ps in sets)


def test_spec_with_num_of_hosts_above_one_counts_replicas_times_hosts() -> None:
    """TestBuildPodSets "spec with NumOfHosts > 1": 3 replicas x 2 hosts = 6 pods."""
    assert counts(cluster(group("workers", replicas=3, numOfHosts=2))) == [("head", 1), ("workers", 6)]
    assert counts(cluster(group("workers", replicas=3, numOfHosts=1))) == [("head", 1), ("workers", 3)]


def test_spec_with_worker_group_without_replicas_specified_counts_one() -> None:
    """TestBuildPodSets "spec with worker group without replicas specified"; min and max
    replicas are not read."""
    assert counts(cluster(group("workers", minReplicas=3, maxReplicas=9))) == [("head", 1), ("workers", 1)]


def test_spec_with_gcs_fault_tolerance_annotation_counts_the_redis_cleanup_in_the_ray_container() -> None:
    """TestBuildPodSets "spec with gcs fault tolerance annotation": the head's Ray container asks
    for at least the cleanup Job's 200m cpu and 256Mi memory."""
    for value in ("true", "True", "TRUE"):
        obj = cluster(
            head=[{"name": "head", "image": "rayproject/ray:2.0.0"}], annotations={"ray.io/ft-enabled": value}
        )
        (head,) = head_containers(obj)
        assert head == {
            "name": "head",
            "image": "rayproject/ray:2.0.0",
            "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}},
        }
    plain = cluster(annotations={"ray.io/ft-enabled": "false"})
    assert head_containers(plain) == plain["spec"]["headGroupSpec"]["template"]["spec"]["containers"]


def test_spec_with_gcs_fault_tolerance_options_keeps_a_larger_request() -> None:
    """TestBuildPodSets "spec with gcs fault tolerance": cpu 1 stays, memory 256Mi is added."""
    obj = cluster(group("workers"), head=[container("head", cpu="1")], gcsFaultToleranceOptions={"redisAddress": "r"})
    (head,) = head_containers(obj)
    assert head["resources"]["requests"] == {"cpu": "1", "memory": "256Mi"}
    assert obj["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1"}


def test_gcs_fault_tolerance_without_a_head_container_cannot_be_composed() -> None:
    """TestBuildPodSets "spec with gcs fault tolerance and missing head container", with
    Kueue's message (its ErrWorkloadCompose event)."""
    obj = cluster(gcsFaultToleranceOptions={"redisAddress": "r"})
    obj["spec"]["headGroupSpec"]["template"]["spec"]["containers"] = []
    message = "cannot account for Redis cleanup resources: head pod template must include the Ray container"
    with pytest.raises(ComposeError, match=f"^{message}$"):
        RayCluster(obj).pod_sets()


def test_autoscaler_sidecar_added_to_head_pod_set_with_default_resources_when_in_tree_autoscaling_is_enabled() -> None:
    """TestBuildPodSets "autoscaler sidecar added to head podSet with default resources when
    in-tree autoscaling is enabled", and "... uses AutoscalerOptions.Resources override when set"."""
    obj = cluster(group("workers", replicas=1), head=[{"name": "head"}], enableInTreeAutoscaling=True)
    assert head_containers(obj) == [
        {"name": "head"},
        {
            "name": "autoscaler",
            "resources": {
                "requests": {"cpu": "500m", "memory": "512Mi"},
                "limits": {"cpu": "500m", "memory": "512Mi"},
            },
        },
    ]
    override = {"requests": {"cpu": "250m", "memory": "256Mi"}}
    obj["spec"]["autoscalerOptions"] = {"resources": override}
    assert head_containers(obj)[1] == {"name": "autoscaler", "resources": override}
    assert counts(obj) == [("head", 1), ("workers", 1)]


def test_a_topology_request_has_no_pod_index_label() -> None:
    obj = cluster(group("workers"))
    obj["spec"]["workerGroupSpecs"][0]["template"]["metadata"] = {
        "annotations": {"kueue.x-k8s.io/podset-required-topology": "cloud.provider.com/topology-rack"}
    }
    assert RayCluster(obj).pod_sets()[1]["topologyRequest"] == {"required": "cloud.provider.com/topology-rack"}


def test_the_priority_class_is_the_heads_else_the_first_worker_groups() -> None:
    a, b = group("a"), group("b")
    b["template"]["spec"]["priorityClassName"] = "low"
    obj = cluster(a, b)
    assert RayCluster(obj).priority_class_name() == "low"
    obj["spec"]["headGroupSpec"]["template"]["spec"]["priorityClassName"] = "high"
    assert RayCluster(obj).priority_class_name() == "high"


def test_a_cluster_never_finishes() -> None:
    obj = cluster(group("workers"), suspend=False)
    obj["status"] = {"state": "failed", "reason": "boom"}
    assert RayCluster(obj).finished() is None


# -- start and stop (raycluster_controller_test.go, TestReconciler) -------------------------------


def admitted_workload(obj: dict[str, Any], *, evicted: bool = False) -> dict[str, Any]:
    step = plan(RayCluster(obj), None, FLAVORS, NOW)
    assert isinstance(step, CreateWorkload)
    wl = copy.deepcopy(step.body)
    wl["metadata"]["name"] = "test"
    conditions = [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": ""},
        {"type": "Admitted", "status": "True", "reason": "Admitted", "message": ""},
    ]
    if evicted:
        conditions.append(
            {"type": "Evicted", "status": "True", "reason": "Deactivated", "message": "The workload was deactivated"}
        )
    wl["status"] = {
        "admission": {
            "clusterQueue": "cluster-queue",
            "podSetAssignments": [
                {"name": "head", "flavors": {"cpu": "unit-test-flavor"}, "count": 1},
                {"name": "workers-group-0", "flavors": {"cpu": "unit-test-flavor"}, "count": 1},
            ],
        },
        "conditions": conditions,
    }
    return wl


def base() -> dict[str, Any]:
    return cluster(group("workers-group-0", container("worker-container", cpu="10"), replicas=1))


def test_when_workload_is_admitted_cluster_is_unsuspended() -> None:
    """ "when workload is admitted, cluster is unsuspended": the flavor's node selector and the
    pod-set, queue and workload labels go into the head's and the worker group's templates."""
    obj = base()
    step = plan(RayCluster(obj), admitted_workload(obj), FLAVORS, NOW)
    assert isinstance(step, PatchJob) and step.event is not None
    assert (step.event.reason, step.event.message) == ("Started", "Admitted by clusterQueue cluster-queue")
    started = obj
    for patch in step.patches:
        started = apply(started, patch.body)
    assert started["spec"]["suspend"] is False
    head = started["spec"]["headGroupSpec"]["template"]
    worker = started["spec"]["workerGroupSpecs"][0]["template"]
    for template, name in ((head, "head"), (worker, "workers-group-0")):
        assert template["spec"]["nodeSelector"] == {"kubernetes.io/arch": "arm64"}
        assert template["metadata"]["labels"] == {
            "kueue.x-k8s.io/podset": name,
            "kueue.x-k8s.io/local-queue-name": "queue",
            "kueue.x-k8s.io/cluster-queue-name": "cluster-queue",
        }
        assert template["metadata"]["annotations"] == {"kueue.x-k8s.io/workload": "test"}
    assert started["spec"]["workerGroupSpecs"][0]["replicas"] == 1  # the rest of the group is kept


def test_when_workload_is_admitted_but_evicted_the_cluster_is_suspended_and_its_node_selector_restored() -> None:
    """ "when workload is admitted but workload's conditions is Evicted, suspend it and restore node
    selector". Kueue clears the reservation in the same reconcile (its cluster is not `ready`);
    here the quota comes back only once KubeRay says the pods are gone."""
    obj = base()
    wl = admitted_workload(obj, evicted=True)
    running = copy.deepcopy(obj)
    running["spec"]["suspend"] = False
    running["metadata"]["generation"] = 2
    running["spec"]["headGroupSpec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/arch": "arm64"}
    running["status"] = {"state": "ready", "conditions": [{"type": "RayClusterSuspended", "status": "False"}]}
    step = plan(RayCluster(running), wl, FLAVORS, NOW)
    assert isinstance(step, PatchJob) and step.event is not None
    assert (step.event.reason, step.event.message) == ("Stopped", "The workload was deactivated")
    (patch,) = step.patches
    stopped = apply(running, patch.body)
    assert stopped["spec"]["suspend"] is True
    assert stopped["spec"]["headGroupSpec"] == obj["spec"]["headGroupSpec"]
    assert plan(RayCluster(stopped), wl, FLAVORS, NOW) is None, "the quota came back with the pods still there"
    stopped["status"]["conditions"] = [{"type": "RayClusterSuspended", "status": "True"}]
    release = plan(RayCluster(stopped), wl, FLAVORS, NOW)
    assert isinstance(release, WriteWorkloadStatus) and release.why == "released"


def test_starting_with_another_number_of_pod_sets_is_refused_with_kueues_message() -> None:
    obj = cluster(group("a"), group("b"))
    with pytest.raises(ValueError, match=r"^invalid podset infos: expecting 3 podset, got 2$"):
        RayCluster(obj).run([PodSetInfo("head", 1), PodSetInfo("a", 1)])


def test_stopping_restores_every_template_in_one_write_and_only_suspends_when_the_pod_sets_do_not_match() -> None:
    obj = cluster(group("a"), group("b", replicas=2), suspend=False)
    originals = [from_pod_set(ps) for ps in RayCluster(obj).pod_sets()]
    infos = [PodSetInfo(name, 1, node_selector={"pool": name}, tolerations=({"key": name},)) for name in "hab"]
    (start,) = RayCluster(obj).run(infos)
    running = apply(obj, start.body)
    assert running["spec"]["workerGroupSpecs"][1]["template"]["spec"]["tolerations"] == [{"key": "b"}]
    (stop,) = RayCluster(running).stop(originals)
    stopped = apply(running, stop.body)
    assert stopped["spec"] == {**obj["spec"], "suspend": True}
    assert RayCluster(stopped).is_suspended() and not RayCluster(stopped).stopping()
    (only,) = RayCluster(running).stop(originals[:2])
    assert only.body == {"spec": {"suspend": True}}


# -- is_active: until the pods are gone --------------------------------------------------------


def conditions(suspending: str, suspended: str) -> list[dict[str, str]]:
    return [
        {"type": "RayClusterSuspended", "status": suspended, "reason": "RayClusterSuspended"},
        {"type": "RayClusterSuspending", "status": suspending, "reason": "RayClusterSuspending"},
    ]


@pytest.mark.parametrize(
    ("status", "active"),
    [
        # As KubeRay v1.5.0 showed them on a kwok cluster, suspending a ready cluster:
        ({"state": "ready", "conditions": conditions("True", "False")}, True),  # pods terminating
        ({"state": "suspended", "conditions": conditions("False", "True")}, False),  # no pod left
        # ... and one suspended again before it was ever ready: `state` still says suspended (from
        # the time before) while its head pod runs; Kueue's reading would give the quota back.
        ({"state": "suspended", "conditions": conditions("True", "False")}, True),
        ({"state": "suspended", "conditions": conditions("False", "False")}, True),
        ({"state": "", "conditions": conditions("False", "False")}, True),
        # No suspension conditions (KubeRay's gate off, or not seen by it yet): Kueue's reading.
        ({"state": "ready"}, True),
        ({"state": "suspended"}, False),
        ({}, False),
    ],
)
def test_active_until_kuberay_says_the_suspended_cluster_has_no_pod_left(status: dict[str, Any], active: bool) -> None:
    obj = cluster(group("workers"))
    obj["status"] = status
    assert RayCluster(obj).is_active() is active


# -- webhooks (raycluster_webhook_test.go) -------------------------------------------------------


def test_a_queued_cluster_is_created_suspended_and_others_are_left_alone() -> None:
    suspend = [{"op": "add", "path": "/spec/suspend", "value": True}]
    assert mutate(cluster(group("w"), suspend=None)) == suspend
    assert mutate(cluster(group("w"), suspend=False)) == suspend
    assert mutate(cluster(group("w"), suspend=True)) == []
    assert mutate(cluster(group("w"), suspend=False, queue=None)) == []


def test_invalid_managed_has_auto_scaler() -> None:
    assert validate(cluster(group("w"), enableInTreeAutoscaling=True), None) == [
        "spec.enableInTreeAutoscaling: Invalid value: true: a kueue-managed RayCluster can use autoscaling only as "
        'an elastic job: enable the ElasticJobsViaWorkloadSlices feature gate and set the "kueue.x-k8s.io/elastic-job": '
        '"true" annotation'
    ]
    assert validate(cluster(group("w"), enableInTreeAutoscaling=False), None) == []
    assert validate(cluster(group("w"), queue=None, enableInTreeAutoscaling=True), None) == []


def test_invalid_managed_too_many_worker_groups() -> None:
    many = [group(f"group{i}") for i in range(18)]
    assert validate(cluster(*many), None) == ["spec.workerGroupSpecs: Too many: 19: must have at most 18 items"]
    assert validate(cluster(*many[:17]), None) == []


def test_worker_group_uses_head_name() -> None:
    assert validate(cluster(group("a"), group("head")), None) == [
        'spec.workerGroupSpecs[1].groupName: Forbidden: "head" is reserved for the head group'
    ]
    assert validate(cluster(group("Head")), None) == []  # compared as written, as Kueue does


def test_invalid_managed_queue_name_should_not_change_while_unsuspended() -> None:
    old = cluster(group("w"), suspend=False)
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "queue2"
    assert validate(new, old) == [f'{QUEUE_FIELD}: Invalid value: "queue2": field is immutable']
    old["spec"]["suspend"] = new["spec"]["suspend"] = True
    assert validate(new, old) == []


def test_an_update_is_checked_while_the_cluster_is_or_was_queued_queue_errors_first() -> None:
    old = cluster(group("w"), suspend=False)
    unqueued = copy.deepcopy(old)
    unqueued["metadata"]["labels"] = {}
    unqueued["spec"]["enableInTreeAutoscaling"] = True
    # Dropping the queue of a running cluster is refused; the autoscaling checks need a queue.
    assert validate(unqueued, old) == [f'{QUEUE_FIELD}: Invalid value: "": field is immutable']
    never = cluster(group("head"), queue=None, suspend=False)
    assert validate(copy.deepcopy(never), never) == []
    moved = copy.deepcopy(old)
    moved["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "Bad_Name"
    moved["spec"]["workerGroupSpecs"].append(group("head"))
    errors = validate(moved, old)
    assert errors[0] == f'{QUEUE_FIELD}: Invalid value: "Bad_Name": field is immutable'
    assert errors[1] == 'spec.workerGroupSpecs[1].groupName: Forbidden: "head" is reserved for the head group'
    assert errors[2].startswith(f'{QUEUE_FIELD}: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain')
    assert len(errors) == 3
