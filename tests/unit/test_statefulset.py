"""StatefulSets on the pod integration, as Kueue's statefulset integration
(pkg/controller/jobs/statefulset, v0.19.2) shows them on Pods and Workloads: one serving group per
StatefulSet, named `statefulset-<name>-<hash>`, admitted whole from its first Pod; the webhook's
checks on updates."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from preemption_operator.jobs.framework import INTEGRATIONS
from preemption_operator.jobs.pod import GATE, Pods
from preemption_operator.jobs.pod import mutate as mutate_pod
from preemption_operator.jobs.reconciler import CreateWorkload, Flavor, PatchJob, plan
from preemption_operator.jobs.statefulset import INTEGRATION, mutate, validate
from unit.test_deployment import apply_ops

QUEUE = "kueue.x-k8s.io/queue-name"
NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def statefulset(replicas: int = 3, queue: str | None = "lq", cpu: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "sts", "namespace": "ns", "uid": "uid-aaa", "labels": {QUEUE: queue} if queue else {}},
        "spec": {
            "replicas": replicas,
            "template": {
                "metadata": {"labels": {"app": "sts"}},
                "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]},
            },
        },
        "status": {"readyReplicas": 0, "replicas": 0},
    }


def pod_of(sts: dict[str, Any], index: int) -> dict[str, Any]:
    """A Pod as the StatefulSet controller creates it, after our webhooks."""
    stamped = apply_ops(sts, mutate(sts))
    template = stamped["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"sts-{index}",
            "namespace": "ns",
            "uid": f"uid-{index}",
            "labels": {**template["metadata"]["labels"], "apps.kubernetes.io/pod-index": str(index)},
            "annotations": dict(template["metadata"]["annotations"]),
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "sts", "uid": "uid-aaa", "controller": True}
            ],
            "creationTimestamp": f"2026-12-02T08:00:0{index}Z",
        },
        "spec": copy.deepcopy(template["spec"]),
        "status": {"phase": "Pending"},
    }
    return apply_ops(pod, mutate_pod(pod))


def test_the_statefulset_integration_is_kueues_and_brings_pod_with_it() -> None:
    assert INTEGRATIONS["statefulset"] is INTEGRATION and not INTEGRATION.reconciled
    assert INTEGRATION.implies == ("pod",)


def test_a_statefulsets_pods_are_one_serving_group_named_as_kueue_names_its_workload() -> None:
    """Kueue's pod reconciler for StatefulSets ("should set default values"): group and prebuilt
    Workload name `statefulset-sts-0de82` (GetWorkloadNameForOwnerWithGVK for `sts`/`uid-aaa`),
    total count = replicas, fast admission, serving, role `main`, the pod index label; gated,
    without the finalizer."""
    pod = pod_of(statefulset(), 0)
    notes = pod["metadata"]["annotations"]
    assert notes["kueue.x-k8s.io/pod-group-name"] == "statefulset-sts-0de82"
    assert notes["kueue.x-k8s.io/prebuilt-workload-name"] == "statefulset-sts-0de82"
    assert notes["kueue.x-k8s.io/pod-group-total-count"] == "3"
    assert notes["kueue.x-k8s.io/pod-group-fast-admission"] == "true"
    assert notes["kueue.x-k8s.io/pod-group-serving"] == "true"
    assert notes["kueue.x-k8s.io/role-hash"] == "main"
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-pod-index"] == "0"
    assert pod["spec"]["schedulingGates"] == [{"name": GATE}]
    assert "finalizers" not in pod["metadata"]


def test_the_first_pod_brings_the_whole_groups_workload_and_later_pods_are_started_into_it() -> None:
    """Fast admission: one pod set `main` of `replicas` Pods from the first Pod; a Pod made after
    admission (the StatefulSet makes them one by one) is ungated into it."""
    sts = statefulset()
    first = pod_of(sts, 0)
    step = plan(Pods.compose([first]), None, {}, NOW)
    assert isinstance(step, CreateWorkload)
    assert step.body["metadata"]["name"] == "statefulset-sts-0de82"
    assert [(ps["name"], ps["count"]) for ps in step.body["spec"]["podSets"]] == [("main", 3)]
    wl = step.body
    wl["status"] = {
        "conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": ""},
            {"type": "Admitted", "status": "True", "reason": "Admitted", "message": ""},
        ],
        "admission": {
            "clusterQueue": "cq",
            "podSetAssignments": [{"name": "main", "count": 3, "flavors": {"cpu": "f"}}],
        },
    }
    running = copy.deepcopy(first)
    running["spec"]["schedulingGates"] = None
    running["spec"]["nodeName"] = "n"
    running["status"]["phase"] = "Running"
    wl["metadata"]["ownerReferences"] += [{"apiVersion": "v1", "kind": "Pod", "name": "sts-1", "uid": "uid-1"}]
    step = plan(Pods.compose([running, pod_of(sts, 1)]), wl, {"f": Flavor({"pool": "a"})}, NOW)
    assert isinstance(step, PatchJob) and [p.name for p in step.patches] == ["sts-1"]
    assert step.patches[0].body["spec"]["nodeSelector"] == {"pool": "a"}


def test_scaling_to_zero_keeps_the_group_size_on_the_template() -> None:
    """Scaling to zero must not roll the Pods: the template keeps the size it had."""
    stamped = apply_ops(statefulset(), mutate(statefulset()))
    stamped["spec"]["replicas"] = 0
    assert mutate(stamped) == []


def test_change_in_replicas_and_resources_is_refused_with_kueues_messages() -> None:
    """TestValidateUpdate "change in replicas", "attempt to change resources in container",
    "scale up from zero" while Pods are still going."""
    old = statefulset(replicas=3)
    assert validate(statefulset(replicas=4), old) == ["spec.replicas: Invalid value: 4: field is immutable"]
    assert validate(statefulset(replicas=0), old) == []
    bigger = statefulset(cpu="2")
    assert validate(bigger, old) == [
        'spec.template.spec.containers[0].resources.requests.cpu: Invalid value: "2": field is immutable'
    ]
    up = statefulset(replicas=2)
    up["status"]["replicas"] = 1
    assert validate(up, statefulset(replicas=0)) == ["spec.replicas: Forbidden: scaling down is still in progress"]


def test_a_statefulset_of_another_framework_is_left_alone() -> None:
    """ "statefulset managed by another framework": a LeaderWorkerSet's."""
    sts = statefulset()
    sts["spec"]["template"]["metadata"]["annotations"] = {
        "kueue.x-k8s.io/pod-suspending-parent": "leaderworkerset.x-k8s.io/leaderworkerset"
    }
    scaled = copy.deepcopy(sts)
    scaled["spec"]["replicas"] = 5
    assert mutate(sts) == [] and validate(scaled, sts) == []
