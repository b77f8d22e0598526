"""The run's setup (its cohorts, ClusterQueues, LocalQueues, priority classes and PreemptionConfig,
made and torn down on the control plane) and the objects of its load (Workloads, Jobs, Pods,
pod groups, JobSets)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from ..cluster import Nodes
from ..workload_status import millis
from .api import (
    ALPHA_PATH,
    COMPLETE_AFTER,
    CONFIG_ANNOTATION,
    GROUP_LABEL,
    GROUP_TOTAL,
    GROUP_WORKLOAD,
    JOBS_PATH,
    JOBSETS_PATH,
    KUEUE,
    KUEUE_ALPHA,
    KUEUE_PATH,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    RUN_LABEL,
    ApiError,
    KubeClient,
    workload_path,
)

PRIORITIES = (0, 10, 100, 1000)
"""A WorkloadPriorityClass `<prefix>-p<value>` for each: Jobs take their priority from one."""
CLASSIC = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
NODES = Nodes(10, {"cpu": "4", "memory": "16Gi", "pods": "110"})
"""The nodes of a chaos cluster: room for the default topology's 36 cpu of quota, in pieces that
3-cpu pods fragment."""


@dataclass(frozen=True)
class QueueSpec:
    name: str
    """Suffix of the ClusterQueue name and the LocalQueue name in every namespace."""
    cohort: str | None
    nominal: int
    """cpu."""
    borrowing_limit: int | None = None
    preemption: dict[str, Any] | None = None
    config: bool = False
    """Uses the run's PreemptionConfig (annotation)."""
    driven: bool = True
    """The WorkloadDriver submits to it (the deterministic scenarios use their own queue)."""


DEFAULT_QUEUES: tuple[QueueSpec, ...] = (
    QueueSpec("a1", "alpha", 6, preemption=CLASSIC),
    QueueSpec("a2", "alpha", 6, borrowing_limit=2),
    QueueSpec("a3", "alpha", 4, config=True),
    QueueSpec("b1", "beta", 6, borrowing_limit=0),
    QueueSpec("b2", "beta", 4, preemption=CLASSIC),
    QueueSpec("b3", "beta", 6, borrowing_limit=4, preemption={"withinClusterQueue": "LowerPriority"}),
    # No cohort: the leader stop/stall scenarios fill it and free it deterministically.
    QueueSpec("solo", None, 4, preemption={"withinClusterQueue": "LowerPriority"}, driven=False),
)


class Topology:
    """2 cohorts x 3 ClusterQueues (+ a cohort-less one), one flavor, cpu only, a
    PreemptionConfig, LocalQueues for every ClusterQueue in a few namespaces. Names start with
    ``prefix`` so runs never share objects."""

    def __init__(self, prefix: str, queues: Sequence[QueueSpec] = DEFAULT_QUEUES, namespaces: int = 3) -> None:
        self.prefix = prefix
        self.queues = {q.name: q for q in queues}
        self.namespaces = [f"{prefix}-ns{i}" for i in range(namespaces)]
        self.flavor = f"{prefix}-cpu"
        self.config = f"{prefix}-config"

    def cq(self, queue: str) -> str:
        return f"{self.prefix}-{queue}"

    def priority_class(self, value: int) -> str:
        return f"{self.prefix}-p{value}"

    def cohort(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    @property
    def cluster_queues(self) -> list[str]:
        return [self.cq(q) for q in self.queues]

    @property
    def cohorts(self) -> list[str]:
        return sorted({self.cohort(q.cohort) for q in self.queues.values() if q.cohort})

    def spec_of(self, cq: str) -> QueueSpec:
        return self.queues[cq.removeprefix(f"{self.prefix}-")]

    def cohort_of(self, cq: str) -> str | None:
        spec = self.queues.get(cq.removeprefix(f"{self.prefix}-"))
        return self.cohort(spec.cohort) if spec is not None and spec.cohort else None

    def cohort_bound(self, cohort: str) -> int:
        """milli-cpu: the sum of the nominal quotas of the cohort's ClusterQueues."""
        return sum(q.nominal * 1000 for q in self.queues.values() if q.cohort and self.cohort(q.cohort) == cohort)

    def cq_bound(self, cq: str) -> int:
        """milli-cpu a ClusterQueue may use: nominal + borrowing limit, within its cohort."""
        spec = self.spec_of(cq)
        if not spec.cohort:
            return spec.nominal * 1000
        bound = self.cohort_bound(self.cohort(spec.cohort))
        if spec.borrowing_limit is not None:
            bound = min(bound, (spec.nominal + spec.borrowing_limit) * 1000)
        return bound

    def owns(self, namespace: str | None) -> bool:
        return bool(namespace) and namespace in self.namespaces

    def local_queue_target(self, namespace: str, queue: str) -> str | None:
        return self.cq(queue) if self.owns(namespace) and queue in self.queues else None

    def driven_queues(self) -> list[str]:
        return [q.name for q in self.queues.values() if q.driven]

    def objects(self) -> list[dict[str, Any]]:
        labels = {RUN_LABEL: self.prefix}
        out: list[dict[str, Any]] = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": dict(labels)}}
            for ns in self.namespaces
        ]
        out.append(
            {
                "apiVersion": KUEUE,
                "kind": "ResourceFlavor",
                "metadata": {"name": self.flavor, "labels": dict(labels)},
                "spec": {},
            }
        )
        out += [
            {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": c, "labels": dict(labels)}, "spec": {}}
            for c in self.cohorts
        ]
        out += [
            {
                "apiVersion": KUEUE,
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": self.priority_class(value), "labels": dict(labels)},
                "value": value,
            }
            for value in PRIORITIES
        ]
        out.append(
            {
                "apiVersion": KUEUE_ALPHA,
                "kind": "PreemptionConfig",
                "metadata": {"name": self.config, "labels": dict(labels)},
                "spec": {
                    "rules": [
                        {
                            "name": "lower-priority-in-cohort",
                            # Within its nominal quota only: with borrowing preemptors it and
                            # reclaimWithinCohort: Any evict each other's workloads forever.
                            "activationPolicy": {
                                "trigger": "InsufficientQuota",
                                "preemptorQuota": "WithinNominalQuota",
                            },
                            "candidateSelectors": [
                                {"scope": "WithinCohortTree", "priority": {"mode": "Base", "comparison": "LessThan"}}
                            ],
                        }
                    ]
                },
            }
        )
        for q in self.queues.values():
            resource: dict[str, Any] = {"name": "cpu", "nominalQuota": str(q.nominal)}
            if q.borrowing_limit is not None:
                resource["borrowingLimit"] = str(q.borrowing_limit)
            spec: dict[str, Any] = {
                "namespaceSelector": {},
                "resourceGroups": [
                    {"coveredResources": ["cpu"], "flavors": [{"name": self.flavor, "resources": [resource]}]}
                ],
            }
            if q.cohort:
                spec["cohortName"] = self.cohort(q.cohort)
            if q.preemption:
                spec["preemption"] = q.preemption
            meta: dict[str, Any] = {"name": self.cq(q.name), "labels": dict(labels)}
            if q.config:
                meta["annotations"] = {CONFIG_ANNOTATION: self.config}
            out.append({"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": meta, "spec": spec})
        for ns in self.namespaces:
            for q in self.queues.values():
                out.append(
                    {
                        "apiVersion": KUEUE,
                        "kind": "LocalQueue",
                        "metadata": {"name": q.name, "namespace": ns},
                        "spec": {"clusterQueue": self.cq(q.name)},
                    }
                )
        return out

    @staticmethod
    def path_of(obj: dict[str, Any]) -> str:
        kind, meta = obj["kind"], obj["metadata"]
        if kind == "Namespace":
            return "/api/v1/namespaces"
        base = ALPHA_PATH if obj["apiVersion"] == KUEUE_ALPHA else KUEUE_PATH
        plural = {
            "ResourceFlavor": "resourceflavors",
            "Cohort": "cohorts",
            "ClusterQueue": "clusterqueues",
            "LocalQueue": "localqueues",
            "PreemptionConfig": "preemptionconfigs",
            "Workload": "workloads",
            "WorkloadPriorityClass": "workloadpriorityclasses",
        }[kind]
        if meta.get("namespace"):
            return f"{base}/namespaces/{meta['namespace']}/{plural}"
        return f"{base}/{plural}"

    def apply(self, client: KubeClient) -> None:
        for obj in self.objects():
            status, data = client.request("POST", self.path_of(obj), obj)
            if status not in (200, 201, 409):
                raise ApiError(status, data, "POST", self.path_of(obj))

    def delete(self, client: KubeClient) -> None:
        """Deletes the run's objects (best effort; the namespace controller removes what is left)."""
        selector = quote(f"{RUN_LABEL}={self.prefix}")
        with contextlib.suppress(ApiError):
            for ns in self.namespaces:
                client.request("DELETE", f"{JOBS_PATH}/namespaces/{ns}/jobs?propagationPolicy=Background")
                client.request("DELETE", f"{JOBSETS_PATH}/namespaces/{ns}/jobsets?propagationPolicy=Background")
                client.request("DELETE", f"/api/v1/namespaces/{ns}/pods")
                client.request("DELETE", workload_path(ns))
                client.request("DELETE", f"{KUEUE_PATH}/namespaces/{ns}/localqueues")
            for plural in ("clusterqueues", "cohorts", "resourceflavors", "workloadpriorityclasses"):
                client.request("DELETE", f"{KUEUE_PATH}/{plural}?labelSelector={selector}")
            client.request("DELETE", f"{ALPHA_PATH}/preemptionconfigs?labelSelector={selector}")
            for ns in self.namespaces:
                client.request("DELETE", f"/api/v1/namespaces/{ns}")

    def read(self, client: KubeClient) -> list[dict[str, Any]]:
        """Every object of the run, as the API server holds them."""
        selector = quote(f"{RUN_LABEL}={self.prefix}")
        objects: list[dict[str, Any]] = []
        objects += client.list_items(f"/api/v1/namespaces?labelSelector={selector}")[0]
        for plural in ("resourceflavors", "cohorts", "clusterqueues", "workloadpriorityclasses"):
            objects += client.list_items(f"{KUEUE_PATH}/{plural}?labelSelector={selector}")[0]
        objects += client.list_items(f"{ALPHA_PATH}/preemptionconfigs?labelSelector={selector}")[0]
        for ns in self.namespaces:
            objects += client.list_items(f"{KUEUE_PATH}/namespaces/{ns}/localqueues")[0]
            objects += client.list_items(workload_path(ns))[0]
        return objects


def pod_template(cpu: int) -> dict[str, Any]:
    """One container requesting `cpu`, run once: the pods of the Workloads and Jobs of the load.
    On a node a deleted pod stays for its grace period: an evicted Job's quota is held meanwhile."""
    container = {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": str(cpu)}}}
    return {"spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 2, "containers": [container]}}


def new_job(name: str, namespace: str, queue: str, cpu: int, priority_class: str) -> dict[str, Any]:
    """A queued batch/v1 Job of one pod, created suspended (no webhook in these runs)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {QUEUE_LABEL: queue, PRIORITY_LABEL: priority_class},
        },
        "spec": {
            "suspend": True,
            "backoffLimit": 0,
            "template": pod_template(cpu),
        },
    }


def new_pod(
    name: str,
    namespace: str,
    queue: str,
    cpu: int,
    priority_class: str,
    run_seconds: float,
    *,
    group: str | None = None,
    total: int = 1,
) -> dict[str, Any]:
    """A queued plain Pod (of pod group `group` of `total` Pods when given), which kwok ends
    `run_seconds` after it starts running (the operator's webhook gates it at creation)."""
    labels = {QUEUE_LABEL: queue, PRIORITY_LABEL: priority_class}
    annotations = {COMPLETE_AFTER: f"{run_seconds:.1f}s"}
    if group is not None:
        labels[GROUP_LABEL] = group
        annotations[GROUP_TOTAL] = str(total)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
    }
    pod.update(pod_template(cpu))
    return pod


def new_jobset(
    name: str, namespace: str, queue: str, cpus: Sequence[int], priority_class: str, run_seconds: float
) -> dict[str, Any]:
    """A queued JobSet, created suspended, of one replicated job (one pod) per entry of `cpus`;
    kwok ends each pod `run_seconds` after it starts running."""
    replicated = []
    for i, cpu in enumerate(cpus):
        template = pod_template(cpu)
        template["metadata"] = {"annotations": {COMPLETE_AFTER: f"{run_seconds:.1f}s"}}
        replicated.append(
            {
                "name": f"r{i}",
                "replicas": 1,
                "template": {"spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": template}},
            }
        )
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {QUEUE_LABEL: queue, PRIORITY_LABEL: priority_class},
        },
        "spec": {"suspend": True, "replicatedJobs": replicated},
    }


def workload_owner(obj: dict[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of what a Workload is the Workload of: its controller owner ("Job",
    "JobSet", "Pod"), or ("PodGroup", <group>) for a pod group's; None for a bare Workload."""
    meta = obj.get("metadata") or {}
    if (meta.get("annotations") or {}).get(GROUP_WORKLOAD) == "true":
        return "PodGroup", str(meta.get("name"))
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") in ("Job", "JobSet", "Pod"):
            return str(ref["kind"]), str(ref.get("name"))
    return None


def job_owner(obj: dict[str, Any]) -> str | None:
    """The name of the Job that owns a Workload, if one does."""
    owner = workload_owner(obj)
    return owner[1] if owner is not None and owner[0] == "Job" else None


def pod_cpu(pod: dict[str, Any]) -> int:
    """milli-cpu the pod's containers request."""
    containers = (pod.get("spec") or {}).get("containers") or []
    return sum(millis(((c.get("resources") or {}).get("requests") or {}).get("cpu", "0")) for c in containers)


def new_workload(name: str, namespace: str, queue: str, cpu: int, priority: int) -> dict[str, Any]:
    pod_set = {"name": "main", "count": 1, "template": pod_template(cpu)}
    spec = {"queueName": queue, "priority": priority, "podSets": [pod_set]}
    return {"apiVersion": KUEUE, "kind": "Workload", "metadata": {"name": name, "namespace": namespace}, "spec": spec}
