"""StatefulSets on the pod integration (Kueue's `statefulset`, v0.19.2): all the Pods of a
StatefulSet are one serving pod group, admitted together as soon as the first Pod exists (fast
admission: one pod set `main` of `replicas` Pods), in the Workload Kueue names after the
StatefulSet (`statefulset-<name>-<hash>`). A preempted StatefulSet loses all its Pods and its
controller makes them again, gated, until the group is admitted again. It never finishes; it may
scale only to zero and back, and not change its Pods' shape.

How it gets there differs from Kueue in mechanism, not in what users see on Pods and Workloads:
Kueue labels each Pod after creation (a reconciler) and makes the Workload from the StatefulSet;
here the webhook stamps the pod template (managed, queue, the group's size) and the Pod webhook
names the group when the Pod is created (it knows its StatefulSet's name and UID from its owner
reference), so the pod group path makes the Workload, owned by the Pods."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..api.kinds import Kind
from . import webhook
from .framework import PRIORITY_CLASS_LABEL, QUEUE_LABEL, Integration, controller_of, owned_workload_name, register
from .pod import (
    FAST_ADMISSION,
    GROUP_NAME,
    MANAGED,
    PARENTS,
    POD_INDEX_LABEL,
    PREBUILT,
    ROLE_HASH,
    SERVING,
    SUSPENDING_PARENT,
    TOTAL_COUNT,
    shape_errors,
)

KIND = Kind("StatefulSet", "apps", "v1", "statefulsets", True)
FRAMEWORK = "statefulset"
POD_INDEX = "apps.kubernetes.io/pod-index"


def replicas(obj: Mapping[str, Any]) -> int:
    value = (obj.get("spec") or {}).get("replicas")
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def _managed_elsewhere(obj: Mapping[str, Any]) -> bool:
    """Its Pods are suspended by another framework (a LeaderWorkerSet's StatefulSets)."""
    template = (obj.get("spec") or {}).get("template") or {}
    parent = ((template.get("metadata") or {}).get("annotations") or {}).get(SUSPENDING_PARENT)
    return parent is not None and parent != FRAMEWORK


def mutate(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A queued StatefulSet's pod template says who suspends its Pods, that they are managed, their
    queue and priority class, and the group's size (kept as it was while scaled to zero, so that
    scaling does not roll the Pods)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    queue = labels.get(QUEUE_LABEL)
    if not queue or (obj.get("metadata") or {}).get("deletionTimestamp") or _managed_elsewhere(obj):
        return []
    template = (obj.get("spec") or {}).get("template") or {}
    want: dict[str, dict[str, str]] = {
        "annotations": {SUSPENDING_PARENT: FRAMEWORK},
        "labels": {MANAGED: "true", QUEUE_LABEL: queue},
    }
    if replicas(obj) > 0:
        want["annotations"][TOTAL_COUNT] = str(replicas(obj))
    if labels.get(PRIORITY_CLASS_LABEL):
        want["labels"][PRIORITY_CLASS_LABEL] = labels[PRIORITY_CLASS_LABEL]
    return webhook.set_metadata(template.get("metadata"), "/spec/template/metadata", want)


def validate(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[str]:
    """Kueue's field errors: the queue as for a Deployment; a managed StatefulSet keeps its Pods'
    shape and scales only to zero and back from zero, once its Pods are gone."""
    if _managed_elsewhere(obj):
        return []
    errors = webhook.queue_name_errors(obj)
    if old is None:
        return errors
    ready = ((old.get("status") or {}).get("readyReplicas") or 0) > 0
    queue = ((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)
    errors += webhook.queue_change_errors(obj, old, suspended=not ready and bool(queue))
    if not queue:
        return errors
    new_spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    old_spec = ((old.get("spec") or {}).get("template") or {}).get("spec") or {}
    errors += shape_errors(new_spec, old_spec, "spec.template.spec")
    before, after = replicas(old), replicas(obj)
    if before != 0 and after != 0 and before != after:
        errors.append(f"spec.replicas: Invalid value: {after}: field is immutable")
    if before == 0 and after > 0 and ((obj.get("status") or {}).get("replicas") or 0) > 0:
        errors.append("spec.replicas: Forbidden: scaling down is still in progress")
    return errors


def pod_annotations(pod: Mapping[str, Any]) -> dict[str, str]:
    """What a StatefulSet's Pod gets at creation: its group, named as Kueue names the
    StatefulSet's Workload, admitted whole from its first Pod, serving, of one role `main`."""
    owner = controller_of(pod)
    if owner is None or owner.get("kind") != KIND.name or owner.get("apiVersion") != KIND.api_version:
        return {}
    name = owned_workload_name(KIND, owner)
    return {
        GROUP_NAME: name,
        PREBUILT: name,
        FAST_ADMISSION: "true",
        SERVING: "true",
        POD_INDEX_LABEL: POD_INDEX,
        ROLE_HASH: "main",
    }


PARENTS[FRAMEWORK] = pod_annotations
INTEGRATION = register(
    Integration(FRAMEWORK, None, mutate, validate, webhook_kind=KIND, mutate_on_update=True, implies=("pod",))
)
