"""Jobs in the e2e tests: building them, and reading them, their pods and their Workloads."""

from __future__ import annotations

import json
import re
from typing import Any

from builders import KUEUE

from .scenario import Scenario, describe_events

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
POOL_LABEL = "e2e.preemption-operator/pool"
HOLD = "e2e.preemption-operator/hold"
"""A finalizer the tests put on pods: a pod being deleted stays until it is taken off."""


def batch_job(
    name: str,
    namespace: str,
    queue: str | None,
    *,
    cpu: str = "1",
    parallelism: int = 1,
    priority_class: str | None = None,
    suspend: bool | None = True,
    annotations: dict[str, str] | None = None,
    pod_annotations: dict[str, str] | None = None,
    grace_seconds: int | None = None,
) -> dict[str, Any]:
    """A Job of `parallelism` pods of `cpu` each (completions alike), suspended by default (no
    webhook needed); `annotations` on the Job, `pod_annotations` on its pod template."""
    labels = {}
    if queue is not None:
        labels[QUEUE_LABEL] = queue
    if priority_class is not None:
        labels[PRIORITY_LABEL] = priority_class
    spec: dict[str, Any] = {
        "parallelism": parallelism,
        "completions": parallelism,
        "backoffLimit": 0,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}
                ],
            }
        },
    }
    if suspend is not None:
        spec["suspend"] = suspend
    if pod_annotations:
        spec["template"]["metadata"] = {"annotations": dict(pod_annotations)}
    if grace_seconds is not None:
        spec["template"]["spec"]["terminationGracePeriodSeconds"] = grace_seconds
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value}


def job(sc: Scenario, name: str) -> dict[str, Any]:
    return sc.get("jobs", name)


def pods(sc: Scenario, job_name: str | None = None, *, everything: bool = False) -> list[dict[str, Any]]:
    """The pods of a Job (or of the namespace), those being deleted included."""
    args = ["get", "pods", "-n", sc.namespace, "-o", "json"]
    if job_name is not None:
        args += ["-l", f"batch.kubernetes.io/job-name={job_name}"]
    proc = sc.kubectl(*args, check=not everything)
    if proc.returncode != 0:
        return []
    items: list[dict[str, Any]] = json.loads(proc.stdout)["items"]
    return items


def hold_pods(sc: Scenario, job_name: str) -> None:
    for pod in pods(sc, job_name):
        finalizers = [*pod["metadata"].get("finalizers", []), HOLD]
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": pod["metadata"]["resourceVersion"]}}
        sc.kubectl("patch", "pod", pod["metadata"]["name"], "-n", sc.namespace, "--type=merge", "-p", json.dumps(patch))


def release_pod(sc: Scenario, name: str) -> None:
    proc = sc.kubectl("get", "pod", name, "-n", sc.namespace, "-o", "json", check=False)
    if proc.returncode != 0:
        return
    pod = json.loads(proc.stdout)
    finalizers = pod["metadata"].get("finalizers") or []
    if HOLD in finalizers:
        kept = [f for f in finalizers if f != HOLD]
        patch = {"metadata": {"finalizers": kept, "resourceVersion": pod["metadata"]["resourceVersion"]}}
        sc.kubectl("patch", "pod", name, "-n", sc.namespace, "--type=merge", "-p", json.dumps(patch), check=False)


def succeed_pods(sc: Scenario, job_name: str) -> None:
    for pod in pods(sc, job_name):
        status = {"status": {"phase": "Succeeded", "conditions": [{"type": "Ready", "status": "False"}]}}
        sc.kubectl(
            "patch", "pod", pod["metadata"]["name"], "-n", sc.namespace, "--subresource=status",
            "--type=merge", "-p", json.dumps(status),
        )  # fmt: skip


def workload_of(sc: Scenario, job_name: str) -> dict[str, Any]:
    """The Workload made for a Job (Kueue's name: job-<name>-<5 hex digits>)."""
    pattern = re.compile(rf"job-{re.escape(job_name)}-[0-9a-f]{{5}}")
    found = [wl for name, wl in sc.workloads().items() if pattern.fullmatch(name)]
    assert len(found) == 1, f"Workloads of job {job_name}: {[wl['metadata']['name'] for wl in found]}"
    return found[0]


def suspended(obj: dict[str, Any]) -> bool:
    return (obj.get("spec") or {}).get("suspend") is True


def job_events(sc: Scenario, name: str) -> list[dict[str, str]]:
    return describe_events(sc.kubectl("describe", "job", name, "-n", sc.namespace).stdout)


def replicated_job(name: str, replicas: int, parallelism: int, cpu: str) -> dict[str, Any]:
    container = {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}
    return {
        "name": name,
        "replicas": replicas,
        "template": {
            "spec": {
                "parallelism": parallelism,
                "completions": parallelism,
                "backoffLimit": 0,
                "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
            }
        },
    }


def jobset(name: str, namespace: str, queue: str, priority: str) -> dict[str, Any]:
    """A leader of 1 cpu and two workers of 1 cpu, queued and created suspended."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue, PRIORITY_LABEL: priority}},
        "spec": {
            "suspend": True,
            "replicatedJobs": [replicated_job("leader", 1, 1, "1"), replicated_job("workers", 1, 2, "1")],
        },
    }


def workload_of_jobset(sc: Scenario, name: str) -> dict[str, Any]:
    pattern = re.compile(rf"jobset-{re.escape(name)}-[0-9a-f]{{5}}")
    found = [wl for wl_name, wl in sc.workloads().items() if pattern.fullmatch(wl_name)]
    assert len(found) == 1, f"Workloads of JobSet {name}: {sorted(sc.workloads())}"
    return found[0]


GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"


def plain_pod(
    name: str,
    namespace: str,
    queue: str,
    priority: str,
    cpu: str = "1",
    *,
    group: str | None = None,
    total: int | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A queued Pod (of a group when `group` is given), ending with grace 2 s when deleted."""
    labels = {QUEUE_LABEL: queue, PRIORITY_LABEL: priority}
    notes = dict(annotations or {})
    if group is not None:
        labels[GROUP_LABEL] = group
        notes[GROUP_TOTAL] = str(total)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": notes},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}
            ],
        },
    }


def group_pods(sc: Scenario, group: str) -> list[dict[str, Any]]:
    """The Pods of a pod group, those being deleted included."""
    proc = sc.kubectl("get", "pods", "-n", sc.namespace, "-l", f"{GROUP_LABEL}={group}", "-o", "json")
    items: list[dict[str, Any]] = json.loads(proc.stdout)["items"]
    return items


def a_pod(sc: Scenario, name: str) -> dict[str, Any] | None:
    proc = sc.kubectl("get", "pod", name, "-n", sc.namespace, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def ray_group(cpu: str, grace_seconds: int) -> dict[str, Any]:
    """A RayCluster group's pod template: one Ray container of `cpu` (kwok runs any image)."""
    container = {"name": "ray", "image": "rayproject/ray:2.9.0", "resources": {"requests": {"cpu": cpu}}}
    return {
        "rayStartParams": {},
        "template": {"spec": {"terminationGracePeriodSeconds": grace_seconds, "containers": [container]}},
    }


def raycluster(
    name: str, namespace: str, queue: str, priority: str, grace_seconds: int = 2, worker_group: str = "workers"
) -> dict[str, Any]:
    """A head of 1 cpu and a worker group of two 1-cpu workers, queued; not suspended (the
    operator's webhook suspends it at creation)."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue, PRIORITY_LABEL: priority}},
        "spec": {
            "headGroupSpec": ray_group("1", grace_seconds),
            "workerGroupSpecs": [
                {"groupName": worker_group, "replicas": 2, "minReplicas": 0, "maxReplicas": 2}
                | ray_group("1", grace_seconds)
            ],
        },
    }


def workloads_of_raycluster(sc: Scenario, name: str) -> list[dict[str, Any]]:
    pattern = re.compile(rf"raycluster-{re.escape(name)}-[0-9a-f]{{5}}")
    return [wl for wl_name, wl in sc.workloads().items() if pattern.fullmatch(wl_name)]


def workload_of_raycluster(sc: Scenario, name: str) -> dict[str, Any]:
    found = workloads_of_raycluster(sc, name)
    assert len(found) == 1, f"Workloads of RayCluster {name}: {sorted(sc.workloads())}"
    return found[0]
