"""Deployments on the pod integration, as Kueue's deployment integration
(pkg/controller/jobs/deployment, v0.19.2) defines them: the webhook stamps a queued
Deployment's pod template on create and update, and keeps the queue once a Pod is ready."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

from preemption_operator.controller.webhooks import WebhookSettings, configurations
from preemption_operator.jobs.deployment import INTEGRATION, mutate, validate
from preemption_operator.jobs.framework import INTEGRATIONS, enabled, of_kind
from preemption_operator.jobs.webhook import review

QUEUE = "kueue.x-k8s.io/queue-name"


def deployment(queue: str | None = "lq", ready: int = 0, **template_labels: str) -> dict[str, Any]:
    labels = {QUEUE: queue} if queue else {}
    template: dict[str, Any] = {"spec": {"containers": [{"name": "c", "image": "x"}]}}
    if template_labels:
        template["metadata"] = {"labels": dict(template_labels)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns", "labels": labels},
        "spec": {"replicas": 2, "template": template},
        "status": {"readyReplicas": ready},
    }


def apply_ops(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    for op in ops:
        assert op["op"] == "add"
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node = out
        for part in parents:
            node = node[part]
        node[last] = op["value"]
    return out


def test_the_deployment_integration_is_kueues_and_brings_pod_with_it() -> None:
    assert INTEGRATIONS["deployment"] is INTEGRATION and of_kind("apps/v1", "Deployment") is INTEGRATION
    assert not INTEGRATION.reconciled  # its Pods are the jobs
    assert INTEGRATION.implies == ("pod",)
    assert next(i.framework for i in enabled(["deployment"])) == "deployment"


def test_deployment_with_queue_and_pod_template_spec_queue() -> None:
    """TestDefault "deployment with queue and pod template spec queue": the template gets the
    suspending parent, the managed label and the Deployment's queue (over its own)."""
    stamped = apply_ops(deployment(**{QUEUE: "other"}), mutate(deployment(**{QUEUE: "other"})))
    meta = stamped["spec"]["template"]["metadata"]
    assert meta["annotations"] == {"kueue.x-k8s.io/pod-suspending-parent": "deployment"}
    assert meta["labels"] == {QUEUE: "lq", "kueue.x-k8s.io/managed": "true"}
    assert mutate(stamped) == []  # stamped once


def test_deployment_with_queue_and_priority_class() -> None:
    """TestDefault "deployment with queue and priority class"."""
    obj = deployment()
    obj["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "high"
    meta = apply_ops(obj, mutate(obj))["spec"]["template"]["metadata"]
    assert meta["labels"]["kueue.x-k8s.io/priority-class"] == "high"


def test_a_deployment_without_a_queue_is_left_alone() -> None:
    assert mutate(deployment(queue=None)) == []


def test_the_template_is_stamped_again_on_update() -> None:
    """Kueue's webhook defaults on CREATE and UPDATE: a new template gets the labels back."""
    body = {"request": {"uid": "u", "operation": "UPDATE", "object": deployment(), "oldObject": deployment()}}
    answer = review(body, INTEGRATION, mutating=True)["response"]
    assert answer["patchType"] == "JSONPatch" and json.loads(base64.b64decode(answer["patch"]))
    (_, mutating_body), _ = configurations(WebhookSettings("ns", url="https://x"), b"ca", [INTEGRATION])
    assert mutating_body["webhooks"][0]["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert mutating_body["webhooks"][0]["clientConfig"]["url"] == "https://x/mutate-apps-v1-deployment"


def test_with_queue_ready_replicas_the_queue_is_immutable() -> None:
    """TestValidateUpdate "with queue (ready replicas)": once a Pod is ready the queue stays;
    with none ready it may change, but not be removed."""
    moved = deployment(queue="other")
    assert validate(moved, deployment(ready=1)) == [
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "other": field is immutable'
    ]
    assert validate(moved, deployment(ready=0)) == []
    assert validate(deployment(queue=None), deployment(ready=0)) == [
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "": field is immutable'
    ]
