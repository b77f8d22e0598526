"""LeaderWorkerSets on the pod integration, as Kueue's leaderworkerset integration
(pkg/controller/jobs/leaderworkerset, v0.19.2) shows them on templates, Pods and Workloads: one
serving group per replica, named `leaderworkerset-<name>-<index>-<hash>`, with pod sets `leader`
and `worker` (or `main`); the webhook's checks. Cases name the Kueue tests they mirror
(leaderworkerset_webhook_test.go TestDefault / TestValidateCreate / TestValidateUpdate,
leaderworkerset_reconciler_test.go TestPodReconciler / TestReconciler)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from preemption_operator.controller.webhooks import WebhookSettings, configurations
from preemption_operator.jobs.framework import INTEGRATIONS, enabled, of_kind
from preemption_operator.jobs.leaderworkerset import INTEGRATION, group_workload_name, mutate, validate
from preemption_operator.jobs.pod import GATE, Pods
from preemption_operator.jobs.pod import INTEGRATION as POD
from preemption_operator.jobs.pod import mutate as mutate_pod
from preemption_operator.jobs.pod import validate as validate_pod
from preemption_operator.jobs.reconciler import CreateWorkload, Flavor, PatchJob, Wait, plan
from unit.test_deployment import apply_ops

QUEUE = "kueue.x-k8s.io/queue-name"
PARENT = "kueue.x-k8s.io/pod-suspending-parent"
SERVING = "kueue.x-k8s.io/pod-group-serving"
OFFSET = "kueue.x-k8s.io/pod-index-offset"
FRAMEWORK = "leaderworkerset.x-k8s.io/leaderworkerset"
NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def container(cpu: str = "1") -> dict[str, Any]:
    return {"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}


def lws(
    queue: str | None = "test-queue", size: int = 3, replicas: int = 2, leader: bool = True, cpu: str = "1"
) -> dict[str, Any]:
    lwt: dict[str, Any] = {"size": size, "workerTemplate": {"spec": {"containers": [container(cpu)]}}}
    if leader:
        lwt["leaderTemplate"] = {"spec": {"containers": [container(cpu)]}}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "lws", "namespace": "ns", "uid": "uid-aaa", "labels": {QUEUE: queue} if queue else {}},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": lwt},
        "status": {"readyReplicas": 0},
    }


def pod_of(obj: dict[str, Any], group: int, worker: int) -> dict[str, Any]:
    """A Pod as the LeaderWorkerSet controller creates it (worker 0 is the leader, made from the
    leader template by the leader StatefulSet; the others by that leader's worker StatefulSet),
    after LeaderWorkerSet's Pod webhook (the leader's group index) and then ours."""
    stamped = apply_ops(obj, mutate(obj))
    lwt = stamped["spec"]["leaderWorkerTemplate"]
    leader = worker == 0
    template = lwt["leaderTemplate"] if leader and "leaderTemplate" in lwt else lwt["workerTemplate"]
    annotations = {**template["metadata"]["annotations"], "leaderworkerset.sigs.k8s.io/size": str(lwt["size"])}
    if not leader:
        annotations["leaderworkerset.sigs.k8s.io/leader-name"] = f"lws-{group}"
    owner = "lws" if leader else f"lws-{group}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"lws-{group}" if leader else f"lws-{group}-{worker}",
            "namespace": "ns",
            "uid": f"uid-{group}-{worker}",
            "labels": {
                **template["metadata"]["labels"],
                "leaderworkerset.sigs.k8s.io/name": "lws",
                "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
                "leaderworkerset.sigs.k8s.io/group-index": str(group),
            },
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "name": owner,
                    "uid": f"uid-{owner}",
                    "controller": True,
                }
            ],
            "creationTimestamp": f"2026-12-02T08:00:0{worker}Z",
        },
        "spec": copy.deepcopy(template["spec"]),
        "status": {"phase": "Pending"},
    }
    return apply_ops(pod, mutate_pod(pod))


def group(obj: dict[str, Any], index: int) -> list[dict[str, Any]]:
    size = obj["spec"]["leaderWorkerTemplate"]["size"]
    return sorted((pod_of(obj, index, w) for w in range(size)), key=lambda p: p["metadata"]["name"])


def test_the_leaderworkerset_integration_is_kueues_and_brings_pod_with_it() -> None:
    assert INTEGRATIONS[FRAMEWORK] is INTEGRATION and of_kind("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    assert not INTEGRATION.reconciled and INTEGRATION.implies == ("pod",)
    assert [i.framework for i in enabled([FRAMEWORK])] == [FRAMEWORK, "pod"]
    assert INTEGRATION.crd == "leaderworkersets.leaderworkerset.x-k8s.io"


def test_webhooks_at_kueues_paths_mutating_on_update_and_the_pod_webhook_reinvoked() -> None:
    """Kueue's mleaderworkerset.kb.io (CREATE, UPDATE) at its path; the Pod webhook is called again
    when a later one changed the Pod (LeaderWorkerSet's own sets a leader's group index)."""
    (_, mutating), _ = configurations(WebhookSettings("ns", url="https://x"), b"ca", [INTEGRATION, POD])
    hooks = {hook["name"]: hook for hook in mutating["webhooks"]}
    mine = hooks["mleaderworkerset.preemption-operator.dev"]
    assert mine["clientConfig"]["url"] == "https://x/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset"
    assert mine["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert "reinvocationPolicy" not in mine
    assert hooks["mpod.preemption-operator.dev"]["reinvocationPolicy"] == "IfNeeded"


def test_queue_name_on_templates_overridden_by_top_level_queue() -> None:
    """TestDefault "queue-name on templates overridden by top-level queue": both templates get the
    LeaderWorkerSet's queue, the suspending parent and serving; the workers the pod index offset
    behind their leader. Ours also: managed, the group's size and each template's role."""
    obj = lws(size=3)
    for field in ("leaderTemplate", "workerTemplate"):
        obj["spec"]["leaderWorkerTemplate"][field]["metadata"] = {"labels": {QUEUE: "user-queue"}}
    stamped = apply_ops(obj, mutate(obj))
    leader = stamped["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]
    worker = stamped["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]
    for meta, role in ((leader, "leader"), (worker, "worker")):
        assert meta["labels"] == {QUEUE: "test-queue", "kueue.x-k8s.io/managed": "true"}
        assert meta["annotations"][PARENT] == FRAMEWORK and meta["annotations"][SERVING] == "true"
        assert meta["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "3"
        assert meta["annotations"]["kueue.x-k8s.io/role-hash"] == role
    assert worker["annotations"][OFFSET] == "1" and OFFSET not in leader["annotations"]
    assert mutate(stamped) == []  # stamped again on every update: nothing more to do


def test_queue_name_on_worker_template_overridden_when_no_leader_template() -> None:
    """TestDefault "queue-name on worker template overridden when no leader template" and
    "worker-only LWS (no leader template), no offset annotation": one role, `main`."""
    obj = lws(leader=False)
    obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"] = {"labels": {QUEUE: "user-queue"}}
    stamped = apply_ops(obj, mutate(obj))
    lwt = stamped["spec"]["leaderWorkerTemplate"]
    assert "leaderTemplate" not in lwt
    meta = lwt["workerTemplate"]["metadata"]
    assert meta["labels"][QUEUE] == "test-queue"
    assert meta["annotations"]["kueue.x-k8s.io/role-hash"] == "main" and OFFSET not in meta["annotations"]


def test_lws_with_podset_group_name_set_no_offset_annotation() -> None:
    """TestDefault "LWS with PodSetGroupName set, no offset annotation"."""
    obj = lws()
    obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"] = {
        "annotations": {"kueue.x-k8s.io/podset-group-name": "g"}
    }
    stamped = apply_ops(obj, mutate(obj))
    assert OFFSET not in stamped["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["annotations"]


def test_without_queue_nothing_is_stamped_or_checked_on_update() -> None:
    """TestDefault "default lq isn't created, job doesn't have queue label"; TestValidateUpdate
    "change size when unmanaged"."""
    assert mutate(lws(queue=None)) == []
    assert validate(lws(queue=None, size=10), lws(queue=None, size=2)) == []


def test_negative_replicas_and_replicas_above_maximum() -> None:
    """TestValidateCreate "negative replicas", "replicas above maximum" (and on update, "set
    invalid replicas", "set replicas above maximum")."""
    assert validate(lws(replicas=-1), None) == [
        "spec.replicas: Invalid value: -1: invalid LeaderWorkerSet replicas: must be >= 0, got -1"
    ]
    assert validate(lws(replicas=1_000_001), lws()) == [
        "spec.replicas: Invalid value: 1000001: invalid LeaderWorkerSet replicas: must be <= 1000000, got 1000001"
    ]
    assert validate(lws(replicas=0), None) == []


def test_change_size_when_managed() -> None:
    """TestValidateUpdate "change size when managed", "same size when managed"."""
    assert validate(lws(size=10), lws(size=2)) == [
        "spec.leaderWorkerTemplate.size: Invalid value: 10: field is immutable"
    ]
    assert validate(lws(size=2), lws(size=2)) == []


def test_queue_changes_only_while_no_replica_is_ready() -> None:
    """TestValidateUpdate "change queue name when suspended", "change queue name when replicas
    ready", "delete queue name"."""
    assert validate(lws(queue="new-test-queue"), lws()) == []
    ready = lws()
    ready["status"]["readyReplicas"] = 1
    field = "metadata.labels[kueue.x-k8s.io/queue-name]"
    assert validate(lws(queue="new-test-queue"), ready) == [
        f'{field}: Invalid value: "new-test-queue": field is immutable'
    ]
    assert validate(lws(queue=None), lws()) == [f'{field}: Invalid value: "": field is immutable']


def test_change_resources_in_container() -> None:
    """TestValidateUpdate "change resources in container" (leader and worker templates), "change
    image" (allowed: not part of the Pods' shape); the leader template cannot go."""
    old = lws()
    assert validate(lws(cpu="2"), old) == [
        'spec.leaderWorkerTemplate.leaderTemplate.spec.containers[0].resources.requests.cpu: Invalid value: "2": '
        "field is immutable",
        'spec.leaderWorkerTemplate.workerTemplate.spec.containers[0].resources.requests.cpu: Invalid value: "2": '
        "field is immutable",
    ]
    image = lws()
    image["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"] = "y"
    assert validate(image, old) == []
    assert validate(lws(leader=False), old) == [
        "spec.leaderWorkerTemplate.leaderTemplate: Invalid value: null: field is immutable"
    ]


def test_the_group_name_is_kueues_workload_name_hashed_without_the_uid() -> None:
    """GetWorkloadName(uid, name, index) = GetWorkloadNameForOwnerWithGVK("<lws>-<index>", uid,
    LeaderWorkerSet): with the UID Kueue's `leaderworkerset-lws-0-19f81`; the Pods cannot know the
    UID, so ours differs only in the hash."""
    assert group_workload_name("lws", "0", "uid-aaa") == "leaderworkerset-lws-0-19f81"
    assert group_workload_name("lws", "0") == "leaderworkerset-lws-0-97565"


def test_should_set_default_values_leader_and_worker_template() -> None:
    """TestPodReconciler "should set default values (leader+worker template, leader pod)" and
    "(leader+worker template, worker pod)": managed, group and prebuilt Workload name of its
    replica, total count = size, role `leader` for the leader (no leader-name annotation) and
    `worker` for the others; gated, without the finalizer (its parent makes it again)."""
    obj = lws(size=3)
    leader, worker = pod_of(obj, 1, 0), pod_of(obj, 1, 2)
    for pod, role in ((leader, "leader"), (worker, "worker")):
        notes = pod["metadata"]["annotations"]
        assert notes["kueue.x-k8s.io/pod-group-name"] == group_workload_name("lws", "1")
        assert notes["kueue.x-k8s.io/prebuilt-workload-name"] == group_workload_name("lws", "1")
        assert notes["kueue.x-k8s.io/pod-group-total-count"] == "3"
        assert notes["kueue.x-k8s.io/role-hash"] == role
        assert "kueue.x-k8s.io/pod-group-fast-admission" not in notes
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/managed"] == "true"
        assert pod["spec"]["schedulingGates"] == [{"name": GATE}]
        assert "finalizers" not in pod["metadata"]
        assert validate_pod(pod, None) == []


def test_should_set_default_values_worker_template() -> None:
    """TestPodReconciler "should set default values (worker template, leader pod)" and "(worker
    template, worker pod)": one role, `main`."""
    obj = lws(leader=False)
    assert {pod["metadata"]["annotations"]["kueue.x-k8s.io/role-hash"] for pod in group(obj, 0)} == {"main"}


def test_shouldnt_set_default_values_without_group_index_label() -> None:
    """TestPodReconciler "shouldn't set default values without group index label": a leader whose
    group index LeaderWorkerSet's Pod webhook has not set yet is gated but in no group; called
    again once it is (reinvocation), it joins its replica's group."""
    leader = pod_of(lws(), 0, 0)
    bare = copy.deepcopy(leader)
    del bare["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"]
    for key in ("kueue.x-k8s.io/pod-group-name", "kueue.x-k8s.io/prebuilt-workload-name"):
        del bare["metadata"]["annotations"][key]
    bare["spec"].pop("schedulingGates")
    first = apply_ops(bare, mutate_pod(bare))
    assert first["spec"]["schedulingGates"] == [{"name": GATE}]
    assert "kueue.x-k8s.io/pod-group-name" not in first["metadata"]["annotations"]
    first["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"] = "0"
    again = apply_ops(first, mutate_pod(first))
    assert again["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-name"] == group_workload_name("lws", "0")
    assert again["spec"]["schedulingGates"] == [{"name": GATE}]


def admitted(wl: dict[str, Any]) -> dict[str, Any]:
    wl = copy.deepcopy(wl)
    wl["status"] = {
        "conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": ""},
            {"type": "Admitted", "status": "True", "reason": "Admitted", "message": ""},
        ],
        "admission": {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {"name": ps["name"], "count": ps["count"], "flavors": {"cpu": "f"}} for ps in wl["spec"]["podSets"]
            ],
        },
    }
    return wl


def test_should_create_prebuilt_workload_with_leader_template() -> None:
    """TestReconciler "should create prebuilt workload with leader template" (size 3: `leader` 1,
    `worker` 2), one per replica ("should create prebuilt workloads with leader template"); made
    once the whole replica exists (no fast admission); admission ungates each Pod into its pod
    set."""
    obj = lws(size=3, replicas=2)
    pods = group(obj, 0)
    assert isinstance(plan(Pods.compose(pods[:2]), None, {}, NOW), Wait)  # the last worker is not there yet
    step = plan(Pods.compose(pods), None, {}, NOW)
    assert isinstance(step, CreateWorkload)
    wl = step.body
    assert wl["metadata"]["name"] == "leaderworkerset-lws-0-97565"
    assert wl["metadata"]["annotations"]["kueue.x-k8s.io/is-group-workload"] == "true"
    assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [("leader", 1), ("worker", 2)]
    assert {ref["name"] for ref in wl["metadata"]["ownerReferences"]} == {"lws-0", "lws-0-1", "lws-0-2"}
    other = plan(Pods.compose(group(obj, 1)), None, {}, NOW)
    assert isinstance(other, CreateWorkload) and other.body["metadata"]["name"] == "leaderworkerset-lws-1-840ad"

    step = plan(Pods.compose(pods), admitted(wl), {"f": Flavor({"pool": "a"})}, NOW)
    assert isinstance(step, PatchJob)
    assert sorted(p.name or "" for p in step.patches) == ["lws-0", "lws-0-1", "lws-0-2"]
    for patch in step.patches:
        assert patch.body["spec"]["nodeSelector"] == {"pool": "a"}
        assert patch.body["spec"]["schedulingGates"] is None


def test_a_worker_only_replica_is_one_main_pod_set() -> None:
    """TestReconciler "should create prebuilt workload": without a leader template, `main` of size."""
    step = plan(Pods.compose(group(lws(size=2, leader=False), 0)), None, {}, NOW)
    assert isinstance(step, CreateWorkload)
    assert [(ps["name"], ps["count"]) for ps in step.body["spec"]["podSets"]] == [("main", 2)]
