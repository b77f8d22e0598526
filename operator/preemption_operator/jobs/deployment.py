"""Deployments on the pod integration (Kueue's `deployment`, v0.19.2): a Deployment is not a job,
each of its Pods is one. Its webhook stamps the pod template of a queued Deployment, on create and
on every update, so that each Pod its ReplicaSet makes is created gated, managed and queued; a
preempted Pod is deleted and the ReplicaSet makes another, which waits for quota again. The
Deployment itself is never suspended; its queue may change only while none of its Pods is ready."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..api.kinds import Kind
from . import webhook
from .framework import PRIORITY_CLASS_LABEL, QUEUE_LABEL, Integration, register
from .pod import MANAGED, SUSPENDING_PARENT

KIND = Kind("Deployment", "apps", "v1", "deployments", True)
FRAMEWORK = "deployment"


def mutate(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A queued Deployment's pod template says who suspends its Pods (`deployment`), that they are
    managed, and the Deployment's queue and priority class."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    queue = labels.get(QUEUE_LABEL)
    if not queue or (obj.get("metadata") or {}).get("deletionTimestamp"):
        return []
    template = (obj.get("spec") or {}).get("template") or {}
    want = {"annotations": {SUSPENDING_PARENT: FRAMEWORK}, "labels": {MANAGED: "true", QUEUE_LABEL: queue}}
    if labels.get(PRIORITY_CLASS_LABEL):
        want["labels"][PRIORITY_CLASS_LABEL] = labels[PRIORITY_CLASS_LABEL]
    return webhook.set_metadata(template.get("metadata"), "/spec/template/metadata", want)


def validate(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[str]:
    """Kueue's field errors: a queue name is a DNS subdomain; once a Pod of it is ready, or when
    the label is being removed, the queue stays."""
    errors = webhook.queue_name_errors(obj)
    if old is not None:
        ready = ((old.get("status") or {}).get("readyReplicas") or 0) > 0
        queue = ((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)
        errors += webhook.queue_change_errors(obj, old, suspended=not ready and bool(queue))
    return errors


INTEGRATION = register(
    Integration(FRAMEWORK, None, mutate, validate, webhook_kind=KIND, mutate_on_update=True, implies=("pod",))
)
