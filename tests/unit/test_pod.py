"""Plain Pods and pod groups on the job framework, as Kueue's pod integration
(pkg/controller/jobs/pod, v0.19.2) defines them: the role hash, the webhooks, a Workload per Pod
and per complete group, start by ungating, stop by deleting, the finalizer, excess Pods,
reclaimable Pods and how a group finishes. Each test names the Kueue test it mirrors."""

from __future__ import annotations

import base64
import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from preemption_operator.jobs.framework import INTEGRATIONS, of_kind
from preemption_operator.jobs.pod import (
    GATE,
    INTEGRATION,
    MANAGED,
    Pods,
    go_json,
    mutate,
    role_hash,
    validate,
)
from preemption_operator.jobs.reconciler import (
    CreateWorkload,
    DeleteWorkload,
    Flavor,
    PatchJob,
    UpdateWorkload,
    Wait,
    WriteWorkloadStatus,
    plan,
)
from preemption_operator.jobs.webhook import review

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
FLAVORS = {"on-demand": Flavor({"example.com/pool": "batch"})}


def pod(
    name: str = "unit-test",
    *,
    uid: str = "test-uid",
    cpu: str = "1",
    group: str | None = None,
    total: int | None = None,
    phase: str = "Pending",
    gated: bool = True,
    node: str | None = None,
    created: str = "2026-12-02T08:00:00Z",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": "lq", MANAGED: "true"}
    notes = dict(annotations or {})
    if group is not None:
        labels["kueue.x-k8s.io/pod-group-name"] = group
    if total is not None:
        notes["kueue.x-k8s.io/pod-group-total-count"] = str(total)
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]}
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": uid,
            "labels": labels,
            "annotations": notes,
            "finalizers": [MANAGED],
            "creationTimestamp": created,
            "resourceVersion": "1",
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def group(*pods: dict[str, Any]) -> Pods:
    return Pods.compose(sorted(pods, key=lambda p: p["metadata"]["name"]))


def workload(job: Pods, *conditions: str, admitted_count: int | None = None) -> dict[str, Any]:
    step = plan(job, None, FLAVORS, NOW)
    assert isinstance(step, CreateWorkload), step
    wl = copy.deepcopy(step.body)
    status: dict[str, Any] = {"conditions": []}
    for kind in conditions:
        reason = "Preempted" if kind == "Evicted" else kind
        status["conditions"].append(
            {"type": kind, "status": "True", "reason": reason, "message": f"{kind} now", "lastTransitionTime": "x"}
        )
    if "QuotaReserved" in conditions:
        status["admission"] = {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {"name": ps["name"], "count": admitted_count or ps["count"], "flavors": {"cpu": "on-demand"}}
                for ps in wl["spec"]["podSets"]
            ],
        }
    wl["status"] = status
    return wl


def test_the_pod_integration_is_registered_under_kueues_name() -> None:
    assert INTEGRATIONS["pod"] is INTEGRATION
    assert of_kind("v1", "Pod") is INTEGRATION
    assert Pods.kind.path("p", "ns") == "/api/v1/namespaces/ns/pods/p"


def test_role_hash_matches_kueues_golden_value() -> None:
    """TestGetRoleHash: a pod with one container requesting only cpu "1" hashes to dc85db45,
    whatever its image, env or labels."""
    spec = {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}
    assert role_hash(spec) == "dc85db45"
    other = copy.deepcopy(spec)
    other["containers"][0].update(image="other", env=[{"name": "A", "value": "b"}])
    assert role_hash(other) == "dc85db45"
    other["containers"][0]["resources"]["requests"]["cpu"] = "2"
    assert role_hash(other) != "dc85db45"
    assert role_hash({**spec, "nodeSelector": {"b": "1", "a": "2"}}) == role_hash(
        {**spec, "nodeSelector": {"a": "2", "b": "1"}}
    )


def test_go_json_escapes_html_characters_as_go_does() -> None:
    assert go_json({"a": "<&>\u2028"}) == '{"a":"\\u003c\\u0026\\u003e\\u2028"}'


def test_a_queued_pod_is_created_managed_gated_with_the_finalizer_and_its_role_hash() -> None:
    """pod_webhook_test TestDefault: managed label, finalizer, admission gate, role hash."""
    created = pod(gated=False)
    del created["metadata"]["finalizers"]
    del created["metadata"]["labels"][MANAGED]
    answer = review({"request": {"uid": "u", "operation": "CREATE", "object": created}}, INTEGRATION, mutating=True)[
        "response"
    ]
    ops = json.loads(base64.b64decode(answer["patch"]))
    assert {"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1managed", "value": "true"} in ops
    assert {"op": "add", "path": "/metadata/finalizers", "value": [MANAGED]} in ops
    assert {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE}]} in ops
    assert {"op": "add", "path": "/metadata/annotations/kueue.x-k8s.io~1role-hash", "value": "dc85db45"} in ops


def test_a_pod_without_a_queue_is_left_alone_and_one_suspended_by_its_parent_gets_no_finalizer() -> None:
    """TestDefault "pod with suspend by parent annotation should skip finalizer"."""
    plain = pod(gated=False)
    del plain["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    assert mutate(plain) == []
    child = pod(gated=False, annotations={"kueue.x-k8s.io/pod-suspending-parent": "deployment"})
    del child["metadata"]["finalizers"]
    paths = [op["path"] for op in mutate(child)]
    assert "/metadata/finalizers" not in paths and "/spec/schedulingGates" in paths


@pytest.mark.parametrize(
    ("labels", "annotations", "error"),
    [
        (
            {"kueue.x-k8s.io/pod-group-name": "g"},
            {},
            "metadata.annotations[kueue.x-k8s.io/pod-group-total-count]: Required value: both the "
            "'kueue.x-k8s.io/pod-group-total-count' annotation and the 'kueue.x-k8s.io/pod-group-name' label should be set",
        ),
        (
            {},
            {"kueue.x-k8s.io/pod-group-total-count": "2"},
            "metadata.labels[kueue.x-k8s.io/pod-group-name]: Required value: both the "
            "'kueue.x-k8s.io/pod-group-total-count' annotation and the 'kueue.x-k8s.io/pod-group-name' label should be set",
        ),
        (
            {"kueue.x-k8s.io/pod-group-name": "g"},
            {"kueue.x-k8s.io/pod-group-total-count": "0"},
            'metadata.annotations[kueue.x-k8s.io/pod-group-total-count]: Invalid value: "0": incorrect annotation '
            "value 'kueue.x-k8s.io/pod-group-total-count=0': group total count should be greater than zero",
        ),
        (
            {"kueue.x-k8s.io/pod-group-name": "g"},
            {"kueue.x-k8s.io/pod-group-total-count": ""},
            'metadata.annotations[kueue.x-k8s.io/pod-group-total-count]: Invalid value: "": '
            'strconv.Atoi: parsing "": invalid syntax',
        ),
        (
            {MANAGED: "false"},
            {},
            "metadata.labels[kueue.x-k8s.io/managed]: Forbidden: managed label value can only be 'true'",
        ),
    ],
    ids=[
        "pod with group name and no group total count",
        "pod with group total count and no group name",
        "pod with 0 group total count",
        "pod with empty group total count",
        "managed label value",
    ],
)
def test_invalid_group_metadata_is_refused_with_kueues_messages(
    labels: dict[str, str], annotations: dict[str, str], error: str
) -> None:
    """TestValidateCreate, same case names."""
    created = pod()
    created["metadata"]["labels"].update(labels)
    created["metadata"]["annotations"] = annotations
    assert validate(created, None) == [error]


def test_a_group_name_is_immutable_unretriable_stays_so_and_a_running_pod_keeps_its_queue() -> None:
    """TestValidateUpdate "pod group name is changed", "retriable in group annotation is changed
    from false to true", and the queue of an ungated pod."""
    old = pod(group="g", total=2, annotations={"kueue.x-k8s.io/retriable-in-group": "false"}, gated=False)
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = "h"
    new["metadata"]["annotations"]["kueue.x-k8s.io/retriable-in-group"] = "true"
    new["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "other"
    assert validate(new, old) == [
        'metadata.labels[kueue.x-k8s.io/pod-group-name]: Invalid value: "h": field is immutable',
        "metadata.annotations[kueue.x-k8s.io/retriable-in-group]: Forbidden: unretriable pod group can't be "
        "converted to retriable",
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "other": field is immutable',
    ]
    gated_old = pod()
    moved = copy.deepcopy(gated_old)
    moved["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "other"
    assert validate(moved, gated_old) == []  # "when the queue-name changed": allowed while gated


def test_a_single_pod_gets_a_workload_of_its_own_named_as_kueue_names_it() -> None:
    """GetWorkloadNameForPod: pod `unit-test` uid `test-uid` -> pod-unit-test-65369; one pod set
    `main` of 1, the Pod its controller owner."""
    step = plan(Pods(pod()), None, FLAVORS, NOW)
    assert isinstance(step, CreateWorkload)
    meta = step.body["metadata"]
    assert meta["name"] == "pod-unit-test-65369"
    assert meta["ownerReferences"][0]["kind"] == "Pod" and meta["ownerReferences"][0]["controller"] is True
    assert meta["labels"]["kueue.x-k8s.io/job-uid"] == "test-uid"
    assert [(ps["name"], ps["count"]) for ps in step.body["spec"]["podSets"]] == [("main", 1)]


def test_a_pod_without_the_managed_label_is_not_reconciled() -> None:
    """ "the pod reconciliation is skipped when 'kueue.x-k8s.io/managed' label is not set"."""
    unmanaged = pod()
    del unmanaged["metadata"]["labels"][MANAGED]
    assert plan(Pods(unmanaged), None, FLAVORS, NOW) is None


def test_scheduling_gate_is_removed_and_node_selector_is_added_if_workload_is_admitted() -> None:
    """Same name in TestReconciler."""
    job = Pods(pod())
    step = plan(job, workload(job, "QuotaReserved", "Admitted"), FLAVORS, NOW)
    assert isinstance(step, PatchJob) and step.event is not None and step.event.reason == "Started"
    (patch,) = step.patches
    assert patch.name == "unit-test"
    assert patch.body["spec"]["schedulingGates"] is None
    assert patch.body["spec"]["nodeSelector"] == {"example.com/pool": "batch"}
    assert patch.body["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "main"


def test_pod_is_stopped_when_workload_is_evicted_and_its_quota_kept_until_it_no_longer_runs() -> None:
    """ "pod is stopped when workload is evicted": the Pod is deleted; stricter than Kueue, its
    Workload lets the quota go only once the Pod is no longer bound and running."""
    running = pod(gated=False, phase="Running", node="n1")
    job = Pods(running)
    wl = workload(Pods(pod()), "QuotaReserved", "Admitted", "Evicted")
    step = plan(job, wl, FLAVORS, NOW)
    assert isinstance(step, PatchJob)
    assert [(p.name, p.delete) for p in step.patches] == [("unit-test", True)]
    assert step.event is not None and step.event.reason == "Stopped"
    terminating = copy.deepcopy(running)
    terminating["metadata"]["deletionTimestamp"] = "2026-12-02T09:00:30Z"
    assert plan(Pods(terminating), wl, FLAVORS, NOW) is None  # still running out its grace period
    terminating["status"]["phase"] = "Failed"
    step = plan(Pods(terminating), wl, FLAVORS, NOW)
    assert isinstance(step, PatchJob) and step.patches[0].body == {"metadata": {"finalizers": None}}
    terminating["metadata"]["finalizers"] = []
    # A Pod alone does not come back: it has ended, and so has its Workload (Kueue finishes it
    # too, once the Pod is gone), which gives the quota back.
    step = plan(Pods(terminating), wl, FLAVORS, NOW)
    assert isinstance(step, WriteWorkloadStatus) and step.why == "finished"


def test_pod_is_finalized_when_its_succeeded_and_the_workload_finished() -> None:
    """ "pod is finalized when it's succeeded"."""
    done = pod(gated=False, phase="Succeeded", node="n1")
    wl = workload(Pods(pod()), "QuotaReserved", "Admitted")
    step = plan(Pods(done), wl, FLAVORS, NOW)
    assert isinstance(step, WriteWorkloadStatus) and step.why == "finished"
    wl["status"]["conditions"].append({"type": "Finished", "status": "True", "reason": "Succeeded", "message": ""})
    step = plan(Pods(done), wl, FLAVORS, NOW)
    assert isinstance(step, PatchJob) and step.patches[0].body == {"metadata": {"finalizers": None}}


def test_pod_without_scheduling_gate_is_terminated_if_workload_is_not_admitted() -> None:
    """Same name in TestReconciler."""
    ungated = pod(gated=False)
    wl = workload(Pods(pod()))
    step = plan(Pods(ungated), wl, FLAVORS, NOW)
    assert isinstance(step, PatchJob) and step.patches[0].delete
    assert step.event is not None and step.event.message == "Not admitted by cluster queue"


def test_a_group_waits_for_all_its_pods_then_gets_one_workload_with_a_pod_set_per_role() -> None:
    """ "if there's not enough non-failed pods in the group, workload should not be created",
    "workload is composed and created for the pod group", "should allow to schedule a group of
    diverse pods": one Workload named after the group, owned by every Pod, a pod set per role
    hash in name order."""
    a = pod("a", uid="ua", group="g", total=3)
    b = pod("b", uid="ub", group="g", total=3, cpu="2")
    step = plan(group(a, b), None, FLAVORS, NOW)
    assert isinstance(step, Wait)
    assert (step.event.type, step.event.reason, step.event.message) == (
        "Warning",
        "ErrWorkloadCompose",
        "'g' group has fewer runnable pods than expected",
    )
    c = pod("c", uid="uc", group="g", total=3)
    step = plan(group(a, b, c), None, FLAVORS, NOW)
    assert isinstance(step, CreateWorkload)
    meta = step.body["metadata"]
    assert meta["name"] == "g"
    assert meta["annotations"] == {"kueue.x-k8s.io/is-group-workload": "true"}
    assert [(o["name"], o.get("controller")) for o in meta["ownerReferences"]] == [
        ("a", None),
        ("b", None),
        ("c", None),
    ]
    assert "kueue.x-k8s.io/job-uid" not in meta["labels"]
    one, two = role_hash(a["spec"]), role_hash(b["spec"])
    assert [(ps["name"], ps["count"]) for ps in step.body["spec"]["podSets"]] == sorted([(one, 2), (two, 1)])


def test_pods_with_different_queues_get_no_workload() -> None:
    """ "workload for pod group with different queue names shouldn't be created"."""
    a, b = pod("a", group="g", total=2), pod("b", group="g", total=2)
    b["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "other"
    step = plan(group(a, b), None, FLAVORS, NOW)
    assert isinstance(step, Wait) and step.event.message == "pods 'a' and 'b' has different queue names: lq!=other"


def test_scheduling_gate_is_removed_for_all_pods_in_the_group_if_workload_is_admitted() -> None:
    """Same name in TestReconciler."""
    pods = [pod(n, uid=f"u{n}", group="g", total=2) for n in "ab"]
    job = group(*pods)
    step = plan(job, workload(job, "QuotaReserved", "Admitted"), FLAVORS, NOW)
    assert isinstance(step, PatchJob)
    assert [p.name for p in step.patches] == ["a", "b"]
    assert all(p.body["spec"]["nodeSelector"] == {"example.com/pool": "batch"} for p in step.patches)


def test_all_pods_in_a_group_are_deleted_on_eviction() -> None:
    """ "all pods in a group should receive the event about preemption, unless already
    terminating": the running ones are deleted, the terminating one is left."""
    pods = [pod(n, uid=f"u{n}", group="g", total=3, gated=False, phase="Running", node="n") for n in "abc"]
    wl = workload(
        group(*[pod(n, uid=f"u{n}", group="g", total=3) for n in "abc"]), "QuotaReserved", "Admitted", "Evicted"
    )
    pods[2]["metadata"]["deletionTimestamp"] = "2026-12-02T09:00:30Z"
    step = plan(group(*pods), wl, FLAVORS, NOW)
    assert isinstance(step, PatchJob)
    assert [(p.name, p.delete) for p in step.patches] == [("a", True), ("b", True)]


def test_workload_is_finished_if_all_pods_in_the_group_have_finished() -> None:
    """Same name in TestReconciler: message `Pods succeeded: 2/2.`; then every Pod is finalized."""
    pods = [pod(n, uid=f"u{n}", group="g", total=2, gated=False, phase="Succeeded", node="n") for n in "ab"]
    wl = workload(group(*[pod(n, uid=f"u{n}", group="g", total=2) for n in "ab"]), "QuotaReserved", "Admitted")
    wl["status"]["reclaimablePods"] = [{"name": wl["spec"]["podSets"][0]["name"], "count": 2}]
    step = plan(group(*pods), wl, FLAVORS, NOW)
    assert isinstance(step, WriteWorkloadStatus) and step.why == "finished"
    finished = step.compute(copy.deepcopy(wl))
    assert finished is not None
    cond = next(c for c in finished["conditions"] if c["type"] == "Finished")
    assert (cond["reason"], cond["message"]) == ("Succeeded", "Pods succeeded: 2/2.")
    wl["status"] = finished
    step = plan(group(*pods), wl, FLAVORS, NOW)
    assert isinstance(step, PatchJob) and [p.name for p in step.patches] == ["a", "b"]


def test_pod_group_is_considered_finished_if_there_is_an_unretriable_pod_and_no_running_pods() -> None:
    """Same name in TestReconciler."""
    a = pod("a", uid="ua", group="g", total=2, gated=False, phase="Succeeded", node="n")
    b = pod("b", uid="ub", group="g", total=2, gated=False, phase="Failed", node="n")
    b["metadata"]["annotations"]["kueue.x-k8s.io/retriable-in-group"] = "false"
    finished = group(a, b).finished()
    assert finished is not None and finished.message == "Pods succeeded: 1/2."
    b["metadata"]["annotations"]["kueue.x-k8s.io/retriable-in-group"] = "true"
    assert group(a, b).finished() is None


def test_reclaimable_pods_updated_for_pod_group() -> None:
    """Same name in TestReconciler: succeeded Pods per pod set, while the others run."""
    a = pod("a", uid="ua", group="g", total=2, gated=False, phase="Succeeded", node="n")
    b = pod("b", uid="ub", group="g", total=2, gated=False, phase="Running", node="n")
    wl = workload(group(*[pod(n, uid=f"u{n}", group="g", total=2) for n in "ab"]), "QuotaReserved", "Admitted")
    step = plan(group(a, b), wl, FLAVORS, NOW)
    assert isinstance(step, WriteWorkloadStatus) and step.why == "reclaimable pods"
    status = step.compute(copy.deepcopy(wl))
    assert status is not None and status["reclaimablePods"] == [{"name": wl["spec"]["podSets"][0]["name"], "count": 1}]


def test_excess_pods_before_workload_creation_the_youngest_are_deleted() -> None:
    """ "excess pods before wl creation, youngest pods are deleted"."""
    pods = [pod(n, uid=f"u{n}", group="g", total=2, created=f"2026-12-02T08:00:0{i}Z") for i, n in enumerate("abc")]
    step = plan(group(*pods), None, FLAVORS, NOW)
    assert isinstance(step, PatchJob)
    assert step.event is not None and (step.event.reason, step.event.message) == (
        "ExcessPodDeleted",
        "Excess pod deleted",
    )
    assert [(p.name, p.delete) for p in step.patches] == [("c", True), ("c", False)]  # deleted, then finalized


def test_replacement_pods_are_owning_the_workload_and_the_failed_pod_is_released() -> None:
    """ "replacement pods are owning the workload", "replacement pod should be started for pod
    group of size 1": a failed Pod is let go once its replacement exists, the replacement becomes
    an owner, and it is ungated."""
    failed = pod("a", uid="ua", group="g", total=1, gated=False, phase="Failed", node="n")
    wl = workload(group(pod("a", uid="ua", group="g", total=1)), "QuotaReserved", "Admitted")
    replacement = pod("b", uid="ub", group="g", total=1)
    step = plan(group(failed, replacement), wl, FLAVORS, NOW)
    assert isinstance(step, PatchJob) and [(p.name, p.body) for p in step.patches] == [
        ("a", {"metadata": {"finalizers": None}})
    ]
    failed["metadata"]["finalizers"] = []
    step = plan(group(failed, replacement), wl, FLAVORS, NOW)
    assert isinstance(step, UpdateWorkload) and step.event.reason == "OwnerReferencesAdded"
    assert step.owners is not None and [o["name"] for o in step.owners] == ["a", "b"]
    wl["metadata"]["ownerReferences"] = step.owners
    step = plan(group(failed, replacement), wl, FLAVORS, NOW)
    assert isinstance(step, PatchJob) and [p.name for p in step.patches] == ["b"]
    assert step.event is not None and step.event.reason == "Started"


def test_a_group_whose_pods_changed_shape_gets_a_new_workload_not_an_updated_one() -> None:
    """ "non-matching admitted workload is deleted": a group's Workload is never changed."""
    wl = workload(group(*[pod(n, uid=f"u{n}", group="g", total=2) for n in "ab"]))
    bigger = [pod(n, uid=f"u{n}", group="g", total=2, cpu="3") for n in "ab"]
    step = plan(group(*bigger), wl, FLAVORS, NOW)
    assert isinstance(step, DeleteWorkload)


def test_a_groups_workload_is_run_by_its_pods_so_its_quota_waits_for_them_after_eviction() -> None:
    """The scheduling loop keeps an evicted Workload's quota while its job stops when the job's
    kind stops its jobs (Integration.job_stops): a group's Workload has no controller owner, its
    Pods run it, so it counts as run by Pods, as a Pod alone's Workload does."""
    from preemption_operator.api.v1beta2 import Workload
    from preemption_operator.engine.workload import build_info
    from preemption_operator.jobs.framework import stopping_owners

    step = plan(group(*[pod(n, uid=f"u{n}", group="g", total=2) for n in "ab"]), None, FLAVORS, NOW)
    assert isinstance(step, CreateWorkload)
    info = build_info(Workload.model_validate(step.body), {})
    assert info.owner == ("v1", "Pod") and info.owner in stopping_owners([INTEGRATION])
    step = plan(Pods(pod()), None, FLAVORS, NOW)
    assert isinstance(step, CreateWorkload)
    assert build_info(Workload.model_validate(step.body), {}).owner == ("v1", "Pod")


def test_simulate_reads_a_pod_group_as_the_webhook_creates_it_and_a_live_pod_as_it_is() -> None:
    """A Pod in a file was never created: `simulate` reads it with what the webhook adds (the
    managed label), so a complete group stands for its one Workload. A live Pod (with a UID)
    that the webhook did not take stays the user's, as the operator leaves it."""
    from preemption_operator.api.v1beta2 import Workload
    from preemption_operator.offline.manifests import Manifest, parse

    def written(name: str) -> dict[str, Any]:
        body = pod(name, group="eval", total=2, gated=False)
        del body["metadata"]["uid"], body["metadata"]["finalizers"], body["status"]
        del body["metadata"]["labels"][MANAGED]
        return body

    objects = parse([Manifest("pending.yaml", written("eval-0")), Manifest("pending.yaml", written("eval-1"))])
    assert [(type(o), o.metadata.name) for o in objects] == [(Workload, "eval")]
    (podset,) = objects[0].spec.pod_sets
    assert podset.count == 2

    live = written("solo") | {"metadata": {**written("solo")["metadata"], "uid": "u-1"}}
    skipped: list[str] = []
    assert parse([Manifest("live.yaml", live)], skipped) == []
    assert skipped and "Pod ns/solo" in skipped[0]
