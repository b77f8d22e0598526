"""LeaderWorkerSets on the pod integration (Kueue's `leaderworkerset.x-k8s.io/leaderworkerset`,
v0.19.2): each replica of a LeaderWorkerSet (its leader Pod and that leader's workers, `size`
Pods) is one serving pod group, admitted as a whole once all its Pods exist, in the Workload
Kueue names after the replica (`leaderworkerset-<name>-<index>-<hash>`). Its pod sets are Kueue's:
with a leader template `leader` (1 Pod) and `worker` (size-1), else one `main` (size). A
preempted replica loses all its Pods and the LeaderWorkerSet controller makes them again, gated,
until the group is admitted again. It never finishes; its group size and its Pods' shape stay
while it is queued.

How it gets there differs from Kueue in mechanism: Kueue labels each Pod after creation (a
reconciler) and makes the Workloads from the LeaderWorkerSet; here the webhook stamps both pod
templates (what Kueue stamps, and what our Pod path needs: managed, the group's size, the role)
and the Pod webhook names the group when the Pod is created, from the labels the LeaderWorkerSet
controller and its own Pod webhook put on it. The LeaderWorkerSet's UID is on none of its Pods
(a leader is owned by a StatefulSet, a worker by a StatefulSet owned by its leader), so the
Workload name is hashed with an empty UID: only its last five characters differ from Kueue's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..api.kinds import Kind
from . import webhook
from .framework import PRIORITY_CLASS_LABEL, QUEUE_LABEL, Integration, register, whole
from .names import workload_name
from .pod import (
    GROUP_NAME,
    MANAGED,
    PARENTS,
    PREBUILT,
    ROLE_HASH,
    SERVING,
    SUSPENDING_PARENT,
    TOTAL_COUNT,
    go_json,
    shape_errors,
)

KIND = Kind("LeaderWorkerSet", "leaderworkerset.x-k8s.io", "v1", "leaderworkersets", True)
FRAMEWORK = "leaderworkerset.x-k8s.io/leaderworkerset"
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LEADER_NAME = "leaderworkerset.sigs.k8s.io/leader-name"
"""On worker Pods only: their leader's name."""
POD_INDEX_OFFSET = "kueue.x-k8s.io/pod-index-offset"
PODSET_GROUP_NAME = "kueue.x-k8s.io/podset-group-name"
MAX_REPLICAS = 1_000_000
LEADER, WORKER, MAIN = "leader", "worker", "main"

_TEMPLATES = "spec.leaderWorkerTemplate"


def _lwt(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("spec") or {}).get("leaderWorkerTemplate") or {}


def replicas(obj: Mapping[str, Any]) -> int:
    return whole((obj.get("spec") or {}).get("replicas"), 1)


def size(obj: Mapping[str, Any]) -> int:
    return whole(_lwt(obj).get("size"), 1)


def roles(obj: Mapping[str, Any]) -> dict[str, str]:
    """Template field -> the pod set its Pods belong to (Kueue's pod sets: `leader` and `worker`
    with a leader template, else `main`)."""
    if _lwt(obj).get("leaderTemplate") is not None:
        return {"leaderTemplate": LEADER, "workerTemplate": WORKER}
    return {"workerTemplate": MAIN}


def mutate(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A queued LeaderWorkerSet's pod templates say what Kueue's webhook says (queue, priority
    class, who suspends the Pods, serving; the workers' pod index offset behind a leader) and what
    our Pod webhook needs to make each replica one group: managed, the group's size, the role."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    queue = labels.get(QUEUE_LABEL)
    if not queue or meta.get("deletionTimestamp"):
        return []
    lwt = _lwt(obj)
    ops: list[dict[str, Any]] = []
    if "leaderWorkerTemplate" not in (obj.get("spec") or {}):
        return []
    for field, role in roles(obj).items():
        base = f"/spec/leaderWorkerTemplate/{field}"
        template = lwt.get(field)
        if template is None:
            ops.append({"op": "add", "path": base, "value": {}})
            template = {}
        have_meta = template.get("metadata") or {}
        want: dict[str, dict[str, str]] = {
            "labels": {MANAGED: "true", QUEUE_LABEL: queue},
            "annotations": {
                SUSPENDING_PARENT: FRAMEWORK,
                SERVING: "true",
                TOTAL_COUNT: str(size(obj)),
                ROLE_HASH: role,
            },
        }
        if labels.get(PRIORITY_CLASS_LABEL):
            want["labels"][PRIORITY_CLASS_LABEL] = labels[PRIORITY_CLASS_LABEL]
        if role == WORKER and PODSET_GROUP_NAME not in (have_meta.get("annotations") or {}):
            want["annotations"][POD_INDEX_OFFSET] = "1"
        ops += webhook.set_metadata(template.get("metadata"), f"{base}/metadata", want)
    return ops


def _replica_errors(obj: Mapping[str, Any]) -> list[str]:
    count = replicas(obj)
    if count < 0:
        return [f"spec.replicas: Invalid value: {count}: invalid LeaderWorkerSet replicas: must be >= 0, got {count}"]
    if count > MAX_REPLICAS:
        return [
            f"spec.replicas: Invalid value: {count}: invalid LeaderWorkerSet replicas: "
            f"must be <= {MAX_REPLICAS}, got {count}"
        ]
    return []


def _template_errors(new: Mapping[str, Any] | None, old: Mapping[str, Any] | None, path: str) -> list[str]:
    """A template added or removed, or its Pods' shape changed (Kueue's
    validateImmutablePodTemplateSpec)."""
    if new is None or old is None:
        if new is None and old is None:
            return []
        return [f"{path}: Invalid value: {go_json(new)}: field is immutable"]
    return shape_errors(new.get("spec") or {}, old.get("spec") or {}, f"{path}.spec")


def validate(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[str]:
    """Kueue's field errors: the queue name, the replicas' bounds; on update the queue as for a
    Deployment, and a queued LeaderWorkerSet keeps its group size and its Pods' shape."""
    errors = webhook.queue_name_errors(obj) + _replica_errors(obj)
    if old is None:
        return errors
    ready = ((old.get("status") or {}).get("readyReplicas") or 0) > 0
    queue = ((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)
    errors += webhook.queue_change_errors(obj, old, suspended=not ready and bool(queue))
    if not queue:
        return errors
    new_lwt, old_lwt = _lwt(obj), _lwt(old)
    errors += _template_errors(
        new_lwt.get("leaderTemplate"), old_lwt.get("leaderTemplate"), f"{_TEMPLATES}.leaderTemplate"
    )
    errors += _template_errors(
        new_lwt.get("workerTemplate") or {}, old_lwt.get("workerTemplate") or {}, f"{_TEMPLATES}.workerTemplate"
    )
    if size(obj) != size(old):
        errors.append(f"{_TEMPLATES}.size: Invalid value: {size(obj)}: field is immutable")
    return errors


def group_workload_name(lws: str, index: str, uid: str = "") -> str:
    """Kueue's name for the Workload of replica `index` of a LeaderWorkerSet
    (GetWorkloadNameForOwnerWithGVK of `<lws>-<index>`)."""
    return workload_name(KIND.name, KIND.group, f"{lws}-{index}", uid)


def pod_annotations(pod: Mapping[str, Any]) -> dict[str, str]:
    """What a LeaderWorkerSet's Pod gets at creation: the group of its replica, by the labels the
    LeaderWorkerSet controller (name; a worker's group index) and its Pod webhook (a leader's
    group index) put on it. Without them yet, nothing: the Pod webhook is called again once the
    LeaderWorkerSet's has run (reinvocation), and a Pod that never gets them stays gated."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    name, index = labels.get(NAME_LABEL), labels.get(GROUP_INDEX_LABEL)
    if not name or index is None:
        return {}
    group = group_workload_name(str(name), str(index))
    return {GROUP_NAME: group, PREBUILT: group}


PARENTS[FRAMEWORK] = pod_annotations
INTEGRATION = register(
    Integration(FRAMEWORK, None, mutate, validate, webhook_kind=KIND, mutate_on_update=True, implies=("pod",))
)
