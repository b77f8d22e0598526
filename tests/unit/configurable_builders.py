"""Small builders of Kubernetes objects in wire form (camelCase dicts), for configurable-preemption tests.

Conventions follow the reference's acceptance scenarios: one flavor `default`, resource `cpu`,
UIDs equal names (so the UID tie-break is alphabetical), every admitted workload reserved quota
at the same time unless stated.
"""

from __future__ import annotations

import copy
from typing import Any

KUEUE = "kueue.x-k8s.io/v1beta2"
KUEUE_ALPHA = "kueue.x-k8s.io/v1alpha1"
CONFIG_ANNOTATION = "kueue.x-k8s.io/preemption-config-name"
BOOST_ANNOTATION = "kueue.x-k8s.io/priority-boost"

CREATED = "2026-01-01T00:00:00Z"
RESERVED = "2026-01-01T01:00:00Z"
NOW = "2026-11-30T00:00:00Z"

Obj = dict[str, Any]


def _meta(name: str, namespace: str | None = None, **extra: Any) -> Obj:
    meta: Obj = {"name": name, "uid": extra.pop("uid", None) or name, "creationTimestamp": CREATED}
    if namespace is not None:
        meta["namespace"] = namespace
    for key, value in extra.items():
        if value:
            meta[key] = dict(value)
    return meta


def namespace(name: str = "default", labels: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": _meta(name, labels={"kubernetes.io/metadata.name": name, **(labels or {})}),
    }


def resource_flavor(name: str = "default") -> Obj:
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": _meta(name), "spec": {}}


def cohort(name: str, parent: str | None = None) -> Obj:
    return {
        "apiVersion": KUEUE,
        "kind": "Cohort",
        "metadata": _meta(name),
        "spec": {"parentName": parent} if parent else {},
    }


def cluster_queue(
    name: str,
    cpu: int | str,
    *,
    cohort: str | None = None,
    preemption: dict[str, Any] | None = None,
    config: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    borrowing_limit: int | str | None = None,
    lending_limit: int | str | None = None,
    flavor: str = "default",
) -> Obj:
    """A ClusterQueue admitting from every namespace, with one flavor's cpu quota. `config` sets
    the `kueue.x-k8s.io/preemption-config-name` annotation."""
    quota: Obj = {"name": "cpu", "nominalQuota": str(cpu)}
    if borrowing_limit is not None:
        quota["borrowingLimit"] = str(borrowing_limit)
    if lending_limit is not None:
        quota["lendingLimit"] = str(lending_limit)
    spec: Obj = {
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": flavor, "resources": [quota]}]}],
    }
    if cohort:
        spec["cohortName"] = cohort
    if preemption:
        spec["preemption"] = dict(preemption)
    all_annotations = dict(annotations or {})
    if config is not None:
        all_annotations[CONFIG_ANNOTATION] = config
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": _meta(name, labels=labels, annotations=all_annotations),
        "spec": spec,
    }


def local_queue(name: str, cluster_queue: str, namespace: str = "default") -> Obj:
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": _meta(name, namespace, uid=f"lq-{namespace}-{name}"),
        "spec": {"clusterQueue": cluster_queue},
    }


def priority_class(name: str, value: int) -> Obj:
    return {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": _meta(name), "value": value}


# -- PreemptionConfig ------------------------------------------------------------------------------


def selector(scope: str, **fields: Any) -> Obj:
    """A candidate selector; `fields` are wire names (labelSelector, clusterQueueSelector,
    numericLabels, priority)."""
    return {"scope": scope, **fields}


def rule(
    name: str,
    *selectors: Obj,
    trigger: str = "Always",
    preemptor_selector: dict[str, Any] | None = None,
    preemptor_priority_class_selector: dict[str, Any] | None = None,
) -> Obj:
    body: Obj = {"name": name, "activationPolicy": {"trigger": trigger}, "candidateSelectors": list(selectors)}
    if preemptor_selector is not None:
        body["preemptorSelector"] = preemptor_selector
    if preemptor_priority_class_selector is not None:
        body["preemptorPriorityClassSelector"] = preemptor_priority_class_selector
    return body


def preemption_config(name: str, *rules: Obj) -> Obj:
    return {
        "apiVersion": KUEUE_ALPHA,
        "kind": "PreemptionConfig",
        "metadata": _meta(name),
        "spec": {"rules": list(rules)},
    }


# -- Workloads -----------------------------------------------------------------------------------


def workload(
    name: str,
    cpu: int | str = 1,
    *,
    queue: str = "main",
    namespace: str = "default",
    priority: int | None = None,
    priority_class: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    uid: str | None = None,
    created: str = CREATED,
    boost: int | str | None = None,
) -> Obj:
    """A pending Workload with one pod set `main` of one pod requesting `cpu`."""
    all_annotations = dict(annotations or {})
    if boost is not None:
        all_annotations[BOOST_ANNOTATION] = str(boost)
    meta = _meta(name, namespace, uid=uid, labels=labels, annotations=all_annotations)
    meta["creationTimestamp"] = created
    spec: Obj = {
        "queueName": queue,
        "podSets": [
            {
                "name": "main",
                "count": 1,
                "template": {"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": str(cpu)}}}]}},
            }
        ],
    }
    if priority is not None:
        spec["priority"] = priority
    if priority_class is not None:
        spec["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": priority_class}
    return {"apiVersion": KUEUE, "kind": "Workload", "metadata": meta, "spec": spec}


def _condition(kind: str, reason: str, message: str, at: str, status: str = "True") -> Obj:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": at}


def admitted(
    wl: Obj,
    cluster_queue: str,
    *,
    reserved_at: str = RESERVED,
    cpu: int | str | None = None,
    flavor: str = "default",
    evictions: list[dict[str, Any]] | None = None,
) -> Obj:
    """`wl` holding quota in `cluster_queue`: QuotaReserved and Admitted True, status.admission set.
    `cpu` defaults to the pod set's request."""
    out = copy.deepcopy(wl)
    if cpu is None:
        cpu = out["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"]
    status = out.setdefault("status", {})
    status["conditions"] = [
        _condition("QuotaReserved", "QuotaReserved", f"Quota reserved in ClusterQueue {cluster_queue}", reserved_at),
        _condition("Admitted", "Admitted", "The workload is admitted", reserved_at),
    ]
    status["admission"] = {
        "clusterQueue": cluster_queue,
        "podSetAssignments": [
            {"name": "main", "flavors": {"cpu": flavor}, "resourceUsage": {"cpu": str(cpu)}, "count": 1}
        ],
    }
    if evictions:
        status["schedulingStats"] = {"evictions": [dict(e) for e in evictions]}
    return out


def evicted(wl: Obj, *, at: str = RESERVED, message: str = "Preempted earlier") -> Obj:
    """`wl` with `Evicted`=True reason `Preempted` (still holding quota if it was admitted)."""
    out = copy.deepcopy(wl)
    out.setdefault("status", {}).setdefault("conditions", []).append(_condition("Evicted", "Preempted", message, at))
    return out


def running(
    name: str,
    cluster_queue: str,
    cpu: int | str = 1,
    *,
    reserved_at: str = RESERVED,
    **kwargs: Any,
) -> Obj:
    """Shorthand: an admitted workload of `cpu` in `cluster_queue` (queue name defaults to the CQ's)."""
    kwargs.setdefault("queue", cluster_queue)
    return admitted(workload(name, cpu, **kwargs), cluster_queue, reserved_at=reserved_at)


def basics(*namespaces: str) -> list[Obj]:
    """The flavor `default` and the namespaces (default: `default`)."""
    return [resource_flavor(), *(namespace(ns) for ns in (namespaces or ("default",)))]
