"""The chaos harness: the operator as a black box under faults, and the promise it must keep.

"A ClusterQueue is never over-admitted and nothing is lost, whatever the API server, the
network or the other replica does." :class:`InvariantMonitor` follows every stored state of the
run's Workloads (one cluster-wide watch, re-listed when it breaks) and checks:

- I1: per ClusterQueue and per cohort, the quota reserved by unfinished Workloads with
  ``QuotaReserved=True`` never exceeds what the queue may use (nominal + borrowing within the
  cohort) or the cohort's nominal total;
- I2: an eviction count grows by one per eviction, and only from a state holding quota;
- I3: once a :class:`ForeignWriter` write succeeded, no later state shows an older value of
  its label, annotation or condition (checked at the end, :meth:`InvariantMonitor.check_foreign`);
- I4: after the faults stop, :func:`wait_settled`: the project's engine, run offline on what
  the API server holds, would admit or preempt nothing, and queue status counts match;
- I5: per ClusterQueue and per cohort, the cpu requested by the run's pods that run or may run
  (bound to a node and not Succeeded or Failed, being deleted included; or started by the
  operator and not yet bound) never exceeds the same bounds as I1, whatever made the pods. A
  pod's queue is its own queue label (plain Pods, pod groups), else its JobSet's or its Job's
  (read from the API server), else the ``kueue.x-k8s.io/cluster-queue-name`` label the operator
  gives the pods it starts; a pod that runs on no queue is a violation;
- I6: per node, the cpu requested by the pods bound to it that may still run (any namespace;
  pods being deleted count until they are gone) never exceeds its allocatable cpu.

Load: :class:`WorkloadDriver` creates Workloads, batch/v1 Jobs, plain Pods, pod groups and
JobSets (several priorities), finishes admitted ones after a random run time (a Workload by its
Finished condition, a Job by marking its pods Succeeded, as a kubelet would; Pods and JobSets'
pods end by kwok's completion stage), deletes some (racing the operator if asked), and makes
again Pods the operator deleted (a preemption), as their maker would. The control plane runs
kube-controller-manager's job controller and the JobSet controller, so Jobs and JobSets create
and delete real pods; with kube-scheduler and kwok's nodes (preemption_operator.testing.cluster)
those pods are bound, run, and take their grace period to go. The operators serve their webhooks
behind a :class:`WebhookFront` (a queued Pod is gated at creation). docs/chaos.md has it all.
:class:`ChaosEnv` puts a run together (topology, monitor, operators, fault proxies) and the
fault families are functions over it (``kill_storm``, ``leader_stop_before_write``,
``leader_stall``, ``apiserver_outage``, ``error_injection``, ``foreign_and_racing_deletes``),
shared by tests/e2e/test_chaos.py (short) and benchmarks/chaos_soak.py (long). Figures
(kills survived, takeover and recovery times, foreign writes/s, violations) go to
:class:`Figures`.

Only the standard library talks to the API server here (http.client, one keep-alive
connection per thread and server), so the harness has no client library in common with the
operator.
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import dataclasses
import http.client
import itertools
import json
import os
import random
import secrets
import signal
import socket
import ssl
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from preemption_operator.api.meta import format_time

from .cluster import Nodes
from .control_plane import ApiServer, ControlPlane, free_port
from .fault_proxy import FaultProxy
from .operator_process import OperatorProcess
from .workload_status import condition, eviction_count, is_true, millis, reservation

KUEUE = "kueue.x-k8s.io/v1beta2"
KUEUE_ALPHA = "kueue.x-k8s.io/v1alpha1"
KUEUE_PATH = "/apis/kueue.x-k8s.io/v1beta2"
ALPHA_PATH = "/apis/kueue.x-k8s.io/v1alpha1"
LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
CONFIG_ANNOTATION = "kueue.x-k8s.io/preemption-config-name"
RUN_LABEL = "chaos.preemption-operator/run"
TOUCH_KEY = "chaos.example.com/touched"
TOUCH_CONDITION = "chaos.example.com/Touched"
FAULTS_ENV = "PREEMPTION_OPERATOR_FAULTS"
STOP_LINE = "fault injection: stopping before writes"
JOBS_PATH = "/apis/batch/v1"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
CQ_POD_LABEL = "kueue.x-k8s.io/cluster-queue-name"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
"""On each pod the operator started: the Workload it runs under."""
JOBSETS_PATH = "/apis/jobset.x-k8s.io/v1alpha2"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
GROUP_WORKLOAD = "kueue.x-k8s.io/is-group-workload"
MANAGED = "kueue.x-k8s.io/managed"
"""The label and finalizer the operator's webhook gives a queued Pod."""
COMPLETE_AFTER = "pod-complete.stage.kwok.x-k8s.io/delay"
"""kwok's stage: a Running pod with this annotation (a Go duration) succeeds that long after."""
WEBHOOKS = "preemption-operator"
"""The operator's Mutating- and ValidatingWebhookConfiguration."""
PRIORITIES = (0, 10, 100, 1000)
"""A WorkloadPriorityClass `<prefix>-p<value>` for each: Jobs take their priority from one."""
CLASSIC = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
NODES = Nodes(10, {"cpu": "4", "memory": "16Gi", "pods": "110"})
"""The nodes of a chaos cluster: room for the default topology's 36 cpu of quota, in pieces that
3-cpu pods fragment."""


def now_s() -> float:
    return time.monotonic()


# ---- a small API client ----------------------------------------------------------------------


class ApiError(Exception):
    def __init__(self, status: int, body: Any, method: str, path: str) -> None:
        message = body.get("message") if isinstance(body, dict) else str(body)[:300]
        super().__init__(f"{method} {path}: HTTP {status}: {message}")
        self.status = status
        self.body = body


class ApiUnavailable(ApiError):
    """No API server answered."""


class KubeClient:
    """JSON over https to one of several kube-apiservers (the first that answers; they share
    etcd). Thread-safe: one keep-alive connection per thread and server."""

    def __init__(self, servers: Sequence[str], token: str, ca_file: Path, *, timeout: float = 15.0) -> None:
        self.servers = list(servers)
        self.token = token
        self.timeout = timeout
        self.context = ssl.create_default_context(cafile=str(ca_file))
        self._local = threading.local()

    def _conns(self) -> dict[str, http.client.HTTPSConnection]:
        conns: dict[str, http.client.HTTPSConnection] | None = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        return conns

    def _connect(self, server: str, timeout: float) -> http.client.HTTPSConnection:
        url = urlsplit(server)
        return http.client.HTTPSConnection(url.hostname or "127.0.0.1", url.port, context=self.context, timeout=timeout)

    def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        """(status, parsed JSON body); raises ApiUnavailable when no server answers."""
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = content_type
        conns = self._conns()
        last: Exception | None = None
        for server in self.servers:
            for _attempt in range(2):  # a kept-alive connection may have been closed by the server
                conn = conns.get(server)
                if conn is None:
                    conn = conns[server] = self._connect(server, self.timeout)
                try:
                    conn.request(method, path, body=payload, headers=headers)
                    resp = conn.getresponse()
                    raw = resp.read()
                except (OSError, http.client.HTTPException) as exc:
                    last = exc
                    conn.close()
                    conns.pop(server, None)
                    continue
                try:
                    data = json.loads(raw) if raw else None
                except ValueError:
                    data = raw.decode(errors="replace")
                return resp.status, data
        raise ApiUnavailable(0, f"no API server answered ({last})", method, path)

    def call(self, method: str, path: str, body: Any = None, *, ok: Sequence[int] = (200, 201), **kw: Any) -> Any:
        status, data = self.request(method, path, body, **kw)
        if status not in ok:
            raise ApiError(status, data, method, path)
        return data

    def get(self, path: str) -> dict[str, Any] | None:
        status, data = self.request("GET", path)
        if status == 404:
            return None
        if status != 200:
            raise ApiError(status, data, "GET", path)
        return dict(data)

    def list_items(self, path: str) -> tuple[list[dict[str, Any]], str]:
        """Items (with apiVersion and kind filled in) and the list's resourceVersion."""
        data = self.call("GET", path)
        api_version = data.get("apiVersion", "")
        kind = str(data.get("kind", "")).removesuffix("List")
        items = []
        for item in data.get("items") or []:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
            items.append(item)
        return items, str((data.get("metadata") or {}).get("resourceVersion", ""))

    def json_patch(self, path: str, ops: list[dict[str, Any]]) -> tuple[int, Any]:
        return self.request("PATCH", path, ops, content_type="application/json-patch+json")

    def watch(
        self, path: str, resource_version: str, holder: list[Any], *, timeout_seconds: int = 60
    ) -> Iterator[dict[str, Any]]:
        """Watch events from resource_version on the first server that answers. ``holder``
        gets the live connection, so another thread can close it to end the watch."""
        query = f"watch=1&allowWatchBookmarks=true&timeoutSeconds={timeout_seconds}&resourceVersion={resource_version}"
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        last: Exception | None = None
        for server in self.servers:
            conn = self._connect(server, timeout_seconds + 30)
            try:
                conn.request("GET", f"{path}?{query}", headers=headers)
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                last = exc
                conn.close()
                continue
            holder[:] = [conn]
            try:
                if resp.status != 200:
                    raw = resp.read()
                    raise ApiError(resp.status, raw.decode(errors="replace"), "WATCH", path)
                while True:
                    line = resp.readline()
                    if not line:
                        return
                    if line.strip():
                        yield json.loads(line)
            finally:
                holder[:] = []
                conn.close()
        raise ApiUnavailable(0, f"no API server answered ({last})", "WATCH", path)


def workload_path(namespace: str, name: str = "", subresource: str = "") -> str:
    path = f"{KUEUE_PATH}/namespaces/{namespace}/workloads"
    if name:
        path += f"/{name}"
    if subresource:
        path += f"/{subresource}"
    return path


# ---- reading Workloads ---------------------------------------------------------------------------


def touches(obj: dict[str, Any]) -> tuple[int | None, int | None, int | None]:
    """The foreign writer's (label, annotation, condition) counters on an object."""
    meta = obj.get("metadata") or {}

    def number(value: Any) -> int | None:
        try:
            return int(value)
        except (TypeError, ValueError):
            return None

    cond = condition(obj, TOUCH_CONDITION)
    return (
        number((meta.get("labels") or {}).get(TOUCH_KEY)),
        number((meta.get("annotations") or {}).get(TOUCH_KEY)),
        number(cond.get("message")) if cond else None,
    )


# ---- the topology --------------------------------------------------------------------------------


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


# ---- the invariant monitor -----------------------------------------------------------------------


def _key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _kind(workload: dict[str, Any]) -> str:
    owner = workload_owner(workload)
    return owner[0] if owner is not None else "Workload"


def _pod_state(pod: dict[str, Any]) -> str:
    """How a pod stands, for a violation's message: (phase, node, deleting, gated)."""
    spec = pod.get("spec") or {}
    notes = [str((pod.get("status") or {}).get("phase") or "?"), str(spec.get("nodeName") or "unbound")]
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        notes.append("deleting")
    if spec.get("schedulingGates"):
        notes.append("gated")
    return f"({' '.join(notes)})"


def _job_state(job: dict[str, Any]) -> str:
    """How a Job stands, for a violation's message: suspended or not, its pods, its end, its
    deletion and controller owner (a JobSet's child Job), and when it was made."""
    meta, spec, status = job.get("metadata") or {}, job.get("spec") or {}, job.get("status") or {}
    notes = ["suspended" if spec.get("suspend") else "running"]
    notes += [f"{field} {status[field]}" for field in ("active", "terminating", "succeeded") if status.get(field)]
    notes += [c["type"] for c in status.get("conditions") or [] if c.get("status") == "True" and c.get("type")]
    if meta.get("deletionTimestamp"):
        notes.append("deleting")
    owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    if owner is not None:
        notes.append(f"of {owner.get('kind')} {owner.get('name')} uid {str(owner.get('uid'))[:8]}")
    notes.append(f"made {meta.get('creationTimestamp')}")
    return f"({'; '.join(notes)})"


def _workload_state(obj: dict[str, Any]) -> str:
    """How a Workload stands, for a violation's message: where it reserves and its conditions."""
    cq, usage = reservation(obj)
    flags = [c for c in ("QuotaReserved", "Admitted", "Evicted", "Finished") if is_true(obj, c)]
    held = f"{usage / 1000:g} cpu in {cq}" if cq else "no reservation"
    return f"({held}; {', '.join(flags) or 'no condition'})"


def _meta_ns(obj: dict[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("namespace")


def _bound_pod(pod: dict[str, Any]) -> tuple[str, int] | None:
    """(node, milli-cpu) of a pod bound to a node that may still run (being deleted included)."""
    node = (pod.get("spec") or {}).get("nodeName")
    if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return None
    return str(node), pod_cpu(pod)


def _allocatable_cpu(node: dict[str, Any]) -> int:
    return millis(((node.get("status") or {}).get("allocatable") or {}).get("cpu", "0"))


@dataclass(frozen=True)
class Violation:
    invariant: str
    at: float
    """Seconds since the monitor started."""
    subject: str
    message: str
    names: tuple[str, ...] = ()
    """Names of the objects under suspicion: the operators' log lines that name them go with
    the failure."""

    def __str__(self) -> str:
        return f"[{self.invariant}] t={self.at:7.2f}s {self.subject}: {self.message}"


@dataclass
class _Tracked:
    uid: str
    rv: int
    obj: dict[str, Any]
    cq: str | None
    usage: int
    holds_quota: bool
    evicted: bool
    evictions: int
    changed_at: float

    @classmethod
    def of(cls, obj: dict[str, Any], at: float) -> _Tracked:
        meta = obj["metadata"]
        cq, usage = reservation(obj)
        return cls(
            uid=meta.get("uid", ""),
            rv=int(meta.get("resourceVersion") or 0),
            obj=obj,
            cq=cq,
            usage=usage,
            holds_quota=cq is not None,
            evicted=is_true(obj, "Evicted"),
            evictions=eviction_count(obj),
            changed_at=at,
        )


class InvariantMonitor:
    """Follows every Workload and every pod of a topology's namespaces through two cluster-wide
    watches (the nodes through a third, the Jobs, whose states an I5 violation shows, through a
    fourth) and checks I1, I2, I5 and I6 at every observed state (I3 at the end, against a
    ForeignWriter's record). When a watch breaks (API server restarted, 410 Gone) it resumes or
    re-lists, on whichever server answers."""

    def __init__(self, client: KubeClient, topology: Topology) -> None:
        self.client = client
        self.topology = topology
        self.started = now_s()
        self.violations: list[Violation] = []
        self.errors: list[str] = []
        self.events = 0
        self.relists = 0
        self.admissions: list[tuple[float, str, str]] = []
        self.kinds: dict[str, Counter[str]] = {"admitted": Counter(), "evicted": Counter(), "finished": Counter()}
        """Per what a Workload is of (Job, JobSet, Pod, PodGroup, Workload): how many quota
        reservations, evictions and finishes were observed."""
        """(monotonic time, workload key, ClusterQueue) of every observed quota reservation."""
        self.evictions: list[tuple[float, str]] = []
        self.observations: dict[str, list[tuple[int, int | None, int | None, int | None, bool]]] = {}
        """key -> (resourceVersion, label, annotation, condition) of every observed state (I3)."""
        self._wls: dict[str, _Tracked] = {}
        self._usage: Counter[str] = Counter()
        self._over: set[str] = set()
        self._reservations: deque[tuple[float, str, str, int, int, str]] = deque(maxlen=400)
        """The latest changes of what a Workload reserves: (time, key, ClusterQueue, milli-cpu
        before, after, what changed), shown with an I1 violation."""
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._conn: list[Any] = []
        self._pod_conn: list[Any] = []
        self._threads: list[threading.Thread] = []
        self._pods: dict[str, tuple[str, int]] = {}
        """Pods of the run that run or may run: key -> (ClusterQueue, milli-cpu)."""
        self._live_pods: dict[str, dict[str, Any]] = {}
        """The run's pods as last seen."""
        self._owner_queues: dict[str, str] = {}
        """"Job:<ns>/<name>" or "JobSet:<ns>/<name>" -> its queue label."""
        self._pods_synced = threading.Event()
        self.pod_events = 0
        self.max_pod_cpu = 0
        self._bound: dict[str, tuple[str, int]] = {}
        """Pods bound to a node that may still run, any namespace: key -> (node, milli-cpu)."""
        self._allocatable: dict[str, int] = {}
        """node -> allocatable milli-cpu."""
        self._nodes_synced = threading.Event()
        self._node_conn: list[Any] = []
        self._jobs_synced = threading.Event()
        self._job_conn: list[Any] = []
        self.max_node_fill = 0.0
        """The highest share of a node's allocatable cpu its bound pods requested at once."""
        self.last_event_at = 0.0
        self._histories: dict[str, deque[str]] = {}
        """"pod <key>" or "Workload <key>" -> its latest observed states, shown with an I5
        violation for the pods no Workload's reservation accounts for."""

    # -- life cycle

    def __enter__(self) -> InvariantMonitor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> InvariantMonitor:
        for name, path, relist, event, synced, conn in (
            ("invariant-monitor", f"{KUEUE_PATH}/workloads", self._relist, self._event, self._synced, self._conn),
            ("pod-monitor", "/api/v1/pods", self._relist_pods, self._pod_event, self._pods_synced, self._pod_conn),
            (
                "node-monitor",
                "/api/v1/nodes",
                self._relist_nodes,
                self._node_event,
                self._nodes_synced,
                self._node_conn,
            ),
            ("job-monitor", f"{JOBS_PATH}/jobs", self._relist_jobs, self._job_event, self._jobs_synced, self._job_conn),
        ):
            thread = threading.Thread(
                target=self._follow, args=(path, relist, event, synced, conn), name=name, daemon=True
            )
            thread.start()
            self._threads.append(thread)
        if not all(
            event.wait(30) for event in (self._synced, self._pods_synced, self._nodes_synced, self._jobs_synced)
        ):
            raise AssertionError(
                f"the invariant monitor did not list Workloads, pods, nodes and Jobs within 30s: {self.errors[-3:]}"
            )
        return self

    def stop(self) -> None:
        self._stop.set()
        for conn in [*self._conn, *self._pod_conn, *self._node_conn, *self._job_conn]:
            with contextlib.suppress(OSError, AttributeError):
                conn.sock.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(10)

    def _follow(
        self,
        path: str,
        relist: Callable[[list[dict[str, Any]]], None],
        event: Callable[[str, dict[str, Any]], None],
        synced: threading.Event,
        conn: list[Any],
    ) -> None:
        """List, then watch from the list's version; a broken stream resumes, a 410 re-lists."""
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    items, rv = self.client.list_items(path)
                    relist(items)
                    synced.set()
                for change in self.client.watch(path, rv, conn):
                    kind = change.get("type")
                    obj = change.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") != 410:  # 410: too old, the history is gone
                            self.errors.append(f"watch error: {obj.get('message')}")
                        rv = ""
                        break
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    if kind == "BOOKMARK":
                        continue
                    event(str(kind), obj)
            except ApiUnavailable as exc:  # every server down: try again from where we were
                if self._stop.is_set():
                    return
                self.errors.append(str(exc))
                time.sleep(0.5)
            except ApiError as exc:
                if self._stop.is_set():
                    return
                self.errors.append(str(exc))
                if exc.status == 410 or not rv:  # too old to resume from (or the list failed): list again
                    rv = ""
                time.sleep(0.5)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                if self._stop.is_set():
                    return
                # The stream broke (server stopped): resume from the last version seen; a 410
                # from there means a re-list.
                self.errors.append(f"watch broke: {exc!r}")
                time.sleep(0.2)

    # -- I5: the pods that run or may run

    def _owner_queue(self, kind: str, namespace: str, name: str) -> str | None:
        """The queue label of the Job or JobSet `name` (cached: a run never reuses a name); None
        when it is gone, or cannot be read now (then asked again on the pod's next change)."""
        key = f"{kind}:{namespace}/{name}"
        with self._lock:
            if key in self._owner_queues:
                return self._owner_queues[key] or None
        path = f"{JOBSETS_PATH if kind == 'JobSet' else JOBS_PATH}/namespaces/{namespace}/{kind.lower()}s/{name}"
        try:
            owner = self.client.get(path)
        except ApiError:
            return None
        if owner is None:
            with self._lock:
                self._owner_queues[key] = ""  # gone for good: the run never reuses a name
            return None
        queue = str(((owner.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL) or "")
        with self._lock:
            self._owner_queues[key] = queue
        return queue

    def _pod_queue(self, pod: dict[str, Any]) -> str | None:
        """The LocalQueue a pod's quota is taken from, whatever made it: its own queue label (a
        plain Pod, a pod group's), else its JobSet's or its Job's (read once per owner). Reads
        the API server: never called with the lock held."""
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        namespace = str(meta.get("namespace"))
        if labels.get(QUEUE_LABEL):
            return str(labels[QUEUE_LABEL])
        for kind, label in (("JobSet", JOBSET_NAME_LABEL), ("Job", JOB_NAME_LABEL)):
            if labels.get(label):
                queue = self._owner_queue(kind, namespace, str(labels[label]))
                if queue:
                    return queue
        return None

    def _running_pod(self, pod: dict[str, Any], queue: str | None) -> tuple[str, int] | None:
        """(ClusterQueue, milli-cpu) of a pod of the run's namespaces that runs or may run: bound
        to a node and not finished (being deleted included), or started by the operator (its
        cluster-queue label, no longer gated) and not finished nor being deleted (it may still be
        bound). The ClusterQueue is its queue's (`_pod_queue`), else the one the operator's label
        names; "?" when neither is known: a pod that runs on no quota."""
        meta = pod.get("metadata") or {}
        if not self.topology.owns(meta.get("namespace")):
            return None
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return None
        spec = pod.get("spec") or {}
        labelled = (meta.get("labels") or {}).get(CQ_POD_LABEL)
        started = bool(labelled) and not spec.get("schedulingGates") and not meta.get("deletionTimestamp")
        if not spec.get("nodeName") and not started:
            return None
        cq = self.topology.local_queue_target(str(meta.get("namespace")), queue) if queue else None
        return cq or labelled or "?", pod_cpu(pod)

    def _relist_pods(self, items: list[dict[str, Any]]) -> None:
        queues = [self._pod_queue(pod) if self.topology.owns(_meta_ns(pod)) else None for pod in items]
        with self._lock:
            self._pods = {}
            self._bound = {}
            self._live_pods = {}
            for pod, queue in zip(items, queues, strict=True):
                bound = _bound_pod(pod)
                if bound is not None:
                    self._bound[_key(pod)] = bound
                if self.topology.owns(_meta_ns(pod)):
                    self._live_pods[_key(pod)] = pod
                running = self._running_pod(pod, queue)
                if running is not None:
                    self._pods[_key(pod)] = running
            self._check_pods(set(self.topology.cluster_queues) | {"?"}, "after a re-list of pods")
            self._check_nodes(set(self._allocatable), "after a re-list of pods")

    def _pod_event(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        ours = self.topology.owns(meta.get("namespace"))
        queue = self._pod_queue(pod) if ours and kind != "DELETED" else None
        with self._lock:
            was = self._bound.pop(key, None)
            bound = None if kind == "DELETED" else _bound_pod(pod)
            if bound is not None:
                self._bound[key] = bound
            nodes = {held[0] for held in (was, bound) if held is not None}
            if nodes:
                self._check_nodes(nodes, f"after {kind} pod {key} (resourceVersion {meta.get('resourceVersion')})")
            if ours:
                annotation = ((meta.get("annotations") or {}).get(WORKLOAD_ANNOTATION)) or "none"
                self._remember(f"pod {key}", meta.get("resourceVersion"), f"{kind} {_pod_state(pod)} of {annotation}")
                if kind == "DELETED":
                    self._live_pods.pop(key, None)
                else:
                    self._live_pods[key] = pod
            old = self._pods.pop(key, None)
            running = None if kind == "DELETED" else self._running_pod(pod, queue)
            if running is not None:
                self._pods[key] = running
            touched = {held[0] for held in (old, running) if held is not None}
            if touched:
                self.pod_events += 1
                self._check_pods(touched, f"after {kind} pod {key} (resourceVersion {meta.get('resourceVersion')})")

    def pods(self) -> dict[str, dict[str, Any]]:
        """The run's pods as last seen (key -> pod)."""
        with self._lock:
            return dict(self._live_pods)

    def _check_pods(self, cluster_queues: set[str], when: str) -> None:
        """I5 for the given ClusterQueues and their cohorts; one violation per episode."""
        usage: Counter[str] = Counter()
        for cq, cpu in self._pods.values():
            usage[cq] += cpu
        self.max_pod_cpu = max(self.max_pod_cpu, sum(usage.values()))
        if "?" in cluster_queues:
            unknown = sorted(k for k, (cq, _) in self._pods.items() if cq == "?")
            if unknown and "pods of no queue" not in self._over:
                self._over.add("pods of no queue")
                self._violate("I5", "pods of no queue", f"run or may run on no queue's quota, {when}: {unknown}")
            elif not unknown:
                self._over.discard("pods of no queue")
            cluster_queues = cluster_queues - {"?"}
        for subject, (used, bound, members) in self._bounds(cluster_queues, usage).items():
            episode = f"pods of {subject}"
            if used > bound:
                if episode not in self._over:
                    self._over.add(episode)
                    holders = sorted(
                        f"{k}={c / 1000:g}cpu{'' if k not in self._live_pods else _pod_state(self._live_pods[k])}"
                        for k, (cq, c) in self._pods.items()
                        if cq in members
                    )
                    reserved = sorted(
                        f"{k}={t.usage / 1000:g}cpu@rv{t.rv}" for k, t in self._wls.items() if t.cq in members
                    )
                    histories, names = self._unaccounted(members)
                    unaccounted = (
                        "\n  pods no reserving Workload accounts for, and their Workloads, as observed:\n"
                        + "\n".join(histories)
                        if histories
                        else ""
                    )
                    self._violate(
                        "I5",
                        subject,
                        f"pods that run or may run request {used / 1000:g} cpu > {bound / 1000:g} allowed, {when}; "
                        f"pods: {', '.join(holders)}; Workloads reserving: {', '.join(reserved)}{unaccounted}",
                        names,
                    )
            else:
                self._over.discard(episode)

    # -- I6: the pods bound to nodes

    def _relist_nodes(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self._allocatable = {node["metadata"]["name"]: _allocatable_cpu(node) for node in items}
            self._check_nodes(set(self._allocatable), "after a re-list of nodes")

    def _node_event(self, kind: str, node: dict[str, Any]) -> None:
        name = (node.get("metadata") or {}).get("name", "")
        with self._lock:
            if kind == "DELETED":
                self._allocatable.pop(name, None)
            else:
                self._allocatable[name] = _allocatable_cpu(node)
                self._check_nodes({name}, f"after {kind} node {name}")

    def _check_nodes(self, nodes: set[str], when: str) -> None:
        """I6 for the given nodes (those not listed yet are checked once they are); one violation
        per episode."""
        for node in nodes:
            allocatable = self._allocatable.get(node)
            if allocatable is None:
                continue
            on = {key: cpu for key, (where, cpu) in self._bound.items() if where == node}
            used = sum(on.values())
            if allocatable:
                self.max_node_fill = max(self.max_node_fill, used / allocatable)
            episode = f"node {node}"
            if used > allocatable:
                if episode not in self._over:
                    self._over.add(episode)
                    pods = sorted(f"{key}={cpu / 1000:g}cpu" for key, cpu in on.items())
                    self._violate(
                        "I6",
                        episode,
                        f"pods bound to it request {used / 1000:g} cpu > {allocatable / 1000:g} allocatable, {when}; "
                        f"pods: {', '.join(pods)}",
                    )
            else:
                self._over.discard(episode)

    # -- state

    def _relist_jobs(self, items: list[dict[str, Any]]) -> None:
        for job in items:
            self._job_event("LISTED", job)

    def _job_event(self, kind: str, job: dict[str, Any]) -> None:
        """A Job's state, kept for an I5 violation that shows one of its pods (a JobSet's child
        Job that outlived its JobSet made pods no Workload accounted for)."""
        meta = job.get("metadata") or {}
        if not self.topology.owns(meta.get("namespace")):
            return
        with self._lock:
            self._remember(
                f"Job {meta.get('namespace')}/{meta.get('name')}",
                meta.get("resourceVersion"),
                f"{kind} {_job_state(job)}",
            )

    def _elapsed(self) -> float:
        return now_s() - self.started

    def _violate(self, invariant: str, subject: str, message: str, names: tuple[str, ...] = ()) -> None:
        self.violations.append(Violation(invariant, self._elapsed(), subject, message, names))

    def _remember(self, what: str, version: Any, state: str) -> None:
        """One observed state of a pod or Workload, kept among its latest few."""
        clock = format_time(datetime.now(UTC), 3)  # as the operators' logs write it
        history = self._histories.setdefault(what, deque(maxlen=12))
        history.append(f"t={self._elapsed():.2f}s {clock} rv {version}: {state}")

    def _unaccounted(self, members: list[str]) -> tuple[list[str], tuple[str, ...]]:
        """For an I5 violation: the histories of the pods in these ClusterQueues whose Workload
        (the one their `kueue.x-k8s.io/workload` annotation names) reserves no quota there, of
        those Workloads and of the pods' Jobs; and the names to look for in the operators' logs."""
        reserving = {k for k, t in self._wls.items() if t.cq in members}
        lines: list[str] = []
        names: list[str] = []
        for key, (cq, _) in sorted(self._pods.items()):
            if cq not in members:
                continue
            pod = self._live_pods.get(key) or {}
            namespace = key.split("/", 1)[0]
            meta = pod.get("metadata") or {}
            workload = (meta.get("annotations") or {}).get(WORKLOAD_ANNOTATION)
            if workload and f"{namespace}/{workload}" in reserving:
                continue
            job = (meta.get("labels") or {}).get(JOB_NAME_LABEL)
            names += [key.split("/", 1)[1], *([workload] if workload else [])]
            of_workload = [f"Workload {namespace}/{workload}"] if workload else []
            for what in (f"pod {key}", *of_workload, *([f"Job {namespace}/{job}"] if job else [])):
                lines.append(f"  {what}:")
                lines += [f"    {state}" for state in self._histories.get(what, ["(no state observed)"])]
        return lines, tuple(names)

    def _relist(self, items: list[dict[str, Any]]) -> None:
        at = now_s()
        with self._lock:
            self.relists += 1
            seen: dict[str, _Tracked] = {}
            for obj in items:
                meta = obj.get("metadata") or {}
                if not self.topology.owns(meta.get("namespace")):
                    continue
                key = f"{meta['namespace']}/{meta['name']}"
                old = self._wls.get(key)
                new = _Tracked.of(obj, at)
                if old is not None and old.rv == new.rv:
                    new.changed_at = old.changed_at
                self._note(key, old, new, at, gap=True)
                seen[key] = new
            self._wls = seen
            self._usage = Counter()
            for t in seen.values():
                if t.cq:
                    self._usage[t.cq] += t.usage
            self._check_quota(set(self.topology.cluster_queues), "after a re-list")

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        if not self.topology.owns(meta.get("namespace")):
            return
        at = now_s()
        key = f"{meta['namespace']}/{meta['name']}"
        with self._lock:
            self.events += 1
            self.last_event_at = at
            self._remember(f"Workload {key}", meta.get("resourceVersion"), f"{kind} {_workload_state(obj)}")
            old = self._wls.get(key)
            touched: set[str] = set()
            if old is not None and old.cq:
                self._usage[old.cq] -= old.usage
                touched.add(old.cq)
            if kind == "DELETED":
                self._wls.pop(key, None)
                self._observe(key, obj, deleted=True)
                if old is not None and old.cq:
                    self._trace(at, key, old.cq, old.usage, 0, f"deleted at rv {meta.get('resourceVersion')}")
            else:
                new = _Tracked.of(obj, at)
                held = (old.cq, old.usage) if old is not None and old.uid == new.uid else (None, 0)
                if held != (new.cq, new.usage):
                    evicted = " evicted" if new.evicted and not (old is not None and old.evicted) else ""
                    cq = new.cq or held[0] or ""
                    self._trace(at, key, cq, held[1], new.usage, f"rv {new.rv}{evicted}")
                gap = old is not None and old.uid != new.uid  # deleted and created again unseen
                self._note(key, None if gap else old, new, at, gap=False)
                self._wls[key] = new
                if new.cq:
                    self._usage[new.cq] += new.usage
                    touched.add(new.cq)
            if touched:
                self._check_quota(touched, f"after {kind} {key} (resourceVersion {meta.get('resourceVersion')})")

    def _observe(self, key: str, obj: dict[str, Any], *, deleted: bool = False) -> None:
        """One state of a Workload for I3; `deleted` ends the object (a later one of the same
        name is another object: a Job's Workload made again has its Kueue name)."""
        rv = int((obj.get("metadata") or {}).get("resourceVersion") or 0)
        self.observations.setdefault(key, []).append((rv, *touches(obj), deleted))

    def _note(self, key: str, old: _Tracked | None, new: _Tracked, at: float, *, gap: bool) -> None:
        """I2, the admission and eviction logs, and I3's observations, for one new state."""
        self._observe(key, new.obj)
        if old is not None and old.rv == new.rv:
            return
        if new.holds_quota and (old is None or not old.holds_quota):
            self.admissions.append((at, key, new.cq or ""))
            self.kinds["admitted"][_kind(new.obj)] += 1
        if new.evicted and (old is None or not old.evicted):
            self.evictions.append((at, key))
            self.kinds["evicted"][_kind(new.obj)] += 1
        if is_true(new.obj, "Finished") and (old is None or not is_true(old.obj, "Finished")):
            self.kinds["finished"][_kind(new.obj)] += 1
        if old is None:
            return
        if old.holds_quota != new.holds_quota or old.evicted != new.evicted:
            new.changed_at = at
        else:
            new.changed_at = old.changed_at
        if gap:
            return  # states were missed: a new baseline, nothing to compare
        if new.evictions > old.evictions:
            if new.evictions - old.evictions > 1:
                self._violate(
                    "I2", key, f"eviction count jumped {old.evictions} -> {new.evictions} in one write (rv {new.rv})"
                )
            if not old.holds_quota:
                why = (
                    "it had finished"
                    if is_true(old.obj, "Finished")
                    else "it held no quota (already evicted or pending)"
                )
                self._violate(
                    "I2",
                    key,
                    f"evicted again (count {old.evictions} -> {new.evictions}, rv {old.rv} -> {new.rv}) but {why}",
                )
        elif new.evictions < old.evictions:
            self._violate("I2", key, f"eviction count went down {old.evictions} -> {new.evictions} (rv {new.rv})")

    def _trace(self, at: float, key: str, cq: str, before: int, after: int, what: str) -> None:
        clock = format_time(datetime.now(UTC), 3)  # as the operators' logs write it
        self._reservations.append((at - self.started, key, cq, before, after, f"{what.strip()}, {clock}"))

    def _bounds(self, cluster_queues: set[str], usage: Counter[str]) -> dict[str, tuple[int, int, list[str]]]:
        """subject -> (used, allowed, member ClusterQueues) for the queues and their cohorts."""
        subjects: dict[str, tuple[int, int, list[str]]] = {}
        for cq in cluster_queues:
            if cq not in self.topology.cluster_queues:
                if usage.get(cq, 0) > 0:
                    subjects[f"ClusterQueue {cq}"] = (usage[cq], 0, [cq])
                continue
            subjects[f"ClusterQueue {cq}"] = (usage.get(cq, 0), self.topology.cq_bound(cq), [cq])
            cohort = self.topology.cohort_of(cq)
            if cohort:
                members = [c for c in self.topology.cluster_queues if self.topology.cohort_of(c) == cohort]
                subjects[f"cohort {cohort}"] = (
                    sum(usage.get(c, 0) for c in members),
                    self.topology.cohort_bound(cohort),
                    members,
                )
        return subjects

    def _check_quota(self, cluster_queues: set[str], when: str) -> None:
        """I1 for the given ClusterQueues and their cohorts; one violation per episode."""
        for subject, (used, bound, members) in self._bounds(cluster_queues, self._usage).items():
            if used > bound:
                if subject not in self._over:
                    self._over.add(subject)
                    holders = sorted(
                        f"{k}={t.usage // 1000 if t.usage % 1000 == 0 else t.usage / 1000}cpu@rv{t.rv}"
                        for k, t in self._wls.items()
                        if t.cq in members
                    )
                    trace = [
                        f"    t={t:7.2f}s {k} in {q}: {b / 1000:g} -> {a / 1000:g} cpu ({w})"
                        for t, k, q, b, a, w in list(self._reservations)[-40:]
                        if q in members
                    ]
                    self._violate(
                        "I1",
                        subject,
                        f"over-admitted: {used / 1000:g} cpu reserved > {bound / 1000:g} allowed, {when}; "
                        f"holders: {', '.join(holders)}\n  latest reservation changes in it:\n" + "\n".join(trace),
                    )
            else:
                self._over.discard(subject)

    # -- reads for the driver, the writer and the scenarios

    def wait_synced(self, timeout: float = 30) -> None:
        if not self._synced.wait(timeout):
            raise AssertionError("the invariant monitor never listed the Workloads")

    def current(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {k: t.obj for k, t in self._wls.items()}

    def changed_since(self, seconds: float) -> list[str]:
        """Workloads whose reservation or eviction changed in the last ``seconds``."""
        cutoff = now_s() - seconds
        with self._lock:
            return [k for k, t in self._wls.items() if t.changed_at >= cutoff]

    def usage(self, cq: str) -> int:
        with self._lock:
            return self._usage.get(cq, 0)

    def first_admission_after(self, moment: float) -> float | None:
        with self._lock:
            for at, _key, _cq in self.admissions:
                if at >= moment:
                    return at
        return None

    def admitted_keys(self, after: float = 0.0) -> set[str]:
        with self._lock:
            return {key for at, key, _ in self.admissions if at >= after}

    def check_foreign(self, writer: ForeignWriter) -> list[Violation]:
        """I3: no state observed after a successful foreign write shows an older value."""
        found: list[Violation] = []
        by_key: dict[str, list[tuple[int, int, int]]] = {}
        for key, channel, counter, rv in writer.successes():
            by_key.setdefault(key, []).append((channel, counter, rv))
        names = ("label", "annotation", "condition")
        with self._lock:
            for key, writes in by_key.items():
                observed = sorted(self.observations.get(key, []))
                rvs = [o[0] for o in observed]
                for channel in range(3):
                    done = sorted((rv, counter) for ch, counter, rv in writes if ch == channel)
                    reported = 0
                    for rv_w, counter in done:
                        start = bisect.bisect_right(rvs, rv_w)
                        for obs in observed[start:]:
                            if obs[4]:
                                break  # deleted: what comes after is another object
                            value = obs[1 + channel]
                            if value is None or value < counter:
                                if reported < 3:
                                    found.append(
                                        Violation(
                                            "I3",
                                            self._elapsed(),
                                            key,
                                            f"foreign {names[channel]} {counter} written at rv {rv_w}, "
                                            f"but rv {obs[0]} shows {value}",
                                        )
                                    )
                                reported += 1
                                break
        self.violations.extend(found)
        return found

    def report(self, limit: int = 40) -> str:
        with self._lock:
            by = Counter(v.invariant for v in self.violations)
            lines = [
                f"invariant monitor: {self.events} events, {self.relists} lists, "
                f"{len(self.admissions)} admissions, {len(self.evictions)} evictions observed, "
                f"{self.pod_events} changes of pods that run or may run (at most {self.max_pod_cpu / 1000:g} cpu at once), "
                f"nodes filled to at most {self.max_node_fill:.0%} of their cpu; "
                f"violations: {dict(sorted(by.items())) or 'none'}"
            ]
            for what, counts in self.kinds.items():
                lines.append(f"  {what}: {', '.join(f'{k} {n}' for k, n in sorted(counts.items())) or 'none'}")
            lines += [f"  {v}" for v in self.violations[:limit]]
            if len(self.violations) > limit:
                lines.append(f"  ... and {len(self.violations) - limit} more")
            return "\n".join(lines)


# ---- I4: settled ---------------------------------------------------------------------------------


VERBS = {"Admitted": "admit", "Preempted": "preempt"}


def settled_problems(client: KubeClient, topology: Topology) -> list[str]:
    """Why the run is not settled (empty when it is): what the engine, run offline for one cycle
    on the API server's objects, would still admit or preempt; queue status counts (and the cpu
    reserved) that do not match the Workloads."""
    from preemption_operator.api.objects import ObjectError, parse_object
    from preemption_operator.offline import simulate

    objects = topology.read(client)
    problems: list[str] = []
    parsed = []
    for obj in objects:
        try:
            parsed.append(parse_object(obj))
        except ObjectError as exc:
            problems.append(f"cannot parse {exc}")
    sim = simulate.run(parsed, datetime.now(UTC), max_cycles=1)
    for action in sim.actions:
        if action["action"] in ("Admitted", "Preempted"):
            extra = f" for {action['preemptor']}" if action.get("preemptor") else ""
            problems.append(
                f"the engine would still {VERBS[action['action']]} {action['workload']}{extra} ({action['clusterQueue']})"
            )
    return problems + status_problems(objects, topology.local_queue_target)


def status_problems(objects: list[dict[str, Any]], target: Callable[[str, str], str | None]) -> list[str]:
    """Queue status counts and cpu reserved that do not match the Workloads among `objects`;
    `target`: the ClusterQueue a LocalQueue (namespace, name) points to."""
    problems: list[str] = []
    workloads = [o for o in objects if o["kind"] == "Workload"]
    cq_pending: Counter[str] = Counter()
    cq_reserving: Counter[str] = Counter()
    cq_cpu: Counter[str] = Counter()
    cq_holders: dict[str, list[str]] = {}
    lq_pending: Counter[tuple[str, str]] = Counter()
    lq_reserving: Counter[tuple[str, str]] = Counter()
    for wl in workloads:
        if is_true(wl, "Finished") or wl.get("spec", {}).get("active") is False:
            continue
        ns, queue = wl["metadata"]["namespace"], wl["spec"].get("queueName", "")
        cq, used = reservation(wl)
        if cq:
            cq_reserving[cq] += 1
            cq_cpu[cq] += used
            cq_holders.setdefault(cq, []).append(_holding(wl, used))
            lq_reserving[(ns, queue)] += 1
        else:
            lq_pending[(ns, queue)] += 1
            pointed = target(ns, queue)
            if pointed:
                cq_pending[pointed] += 1
    for obj in objects:
        status = obj.get("status") or {}
        name = obj["metadata"]["name"]
        if obj["kind"] == "ClusterQueue":
            problems += _count_problems(f"ClusterQueue {name}", status, cq_pending[name], cq_reserving[name])
            reserved = sum(
                millis(r.get("total", "0"))
                for f in status.get("flavorsReservation") or []
                for r in f.get("resources") or []
                if r.get("name") == "cpu"
            )
            if reserved != cq_cpu[name]:
                # Which Workloads hold what, so that a failure seen once can be told apart later.
                holders = "; ".join(sorted(cq_holders.get(name, []))) or "none"
                problems.append(
                    f"ClusterQueue {name} flavorsReservation {reserved / 1000:g} cpu, Workloads hold {cq_cpu[name] / 1000:g}"
                    f" ({holders})"
                )
        elif obj["kind"] == "LocalQueue":
            key = (obj["metadata"]["namespace"], name)
            problems += _count_problems(f"LocalQueue {key[0]}/{name}", status, lq_pending[key], lq_reserving[key])
    return problems


def _holding(wl: dict[str, Any], used: int) -> str:
    """A Workload holding quota, for a failure message: its name, its cpu and what may explain a
    difference (pods given back, an eviction under way, a deletion)."""
    meta = wl["metadata"]
    notes = [f"{used / 1000:g} cpu"]
    reclaimable = (wl.get("status") or {}).get("reclaimablePods")
    if reclaimable:
        notes.append("reclaimable " + ",".join(f"{r.get('name')}={r.get('count')}" for r in reclaimable))
    if is_true(wl, "Evicted"):
        notes.append("evicted")
    if meta.get("deletionTimestamp"):
        notes.append("deleting")
    return f"{meta['namespace']}/{meta['name']} {' '.join(notes)}"


def _count_problems(queue: str, status: dict[str, Any], pending: int, reserving: int) -> list[str]:
    """A queue's status counts against those of the Workloads (admitted counts as reserving)."""
    want = {"pendingWorkloads": pending, "reservingWorkloads": reserving, "admittedWorkloads": reserving}
    got = {k: status.get(k, 0) for k in want}
    return [] if got == want else [f"{queue} status {got}, Workloads say {want}"]


def wait_settled(
    client: KubeClient, topology: Topology, timeout: float = 60.0, interval: float = 1.0
) -> tuple[float | None, list[str]]:
    """Polls settled_problems until it is empty: (seconds it took, []) or (None, the last problems)."""
    began = now_s()
    problems: list[str] = ["never checked"]
    while now_s() - began <= timeout:
        try:
            problems = settled_problems(client, topology)
        except ApiError as exc:
            problems = [f"cannot read the objects: {exc}"]
        if not problems:
            return now_s() - began, []
        time.sleep(interval)
    return None, problems


# ---- load ----------------------------------------------------------------------------------------


@dataclass
class DriverConfig:
    creates_per_second: float = 4.0
    max_workloads: int = 150
    """Stops creating after this many creates, of any kind (0: no limit)."""
    max_pending: int = 20
    cpus: tuple[int, ...] = (1, 1, 2, 2, 3)
    priorities: tuple[int, ...] = (0, 0, 10, 100, 1000)
    run_seconds: tuple[float, float] = (2.0, 8.0)
    delete_finished: float = 0.5
    """Probability that a finished Workload is deleted (the rest stay, finished)."""
    pending_deletes_per_second: float = 0.2
    racing_deletes_per_second: float = 0.0
    """Deletes of Workloads the operator admitted or evicted in the last half second."""
    jobs: float = 0.2
    """The share of creates that are batch/v1 Jobs (one pod each) ..."""
    pods: float = 0.12
    """... plain Pods (one each) ..."""
    pod_groups: float = 0.1
    """... pod groups (2-3 Pods of 1-2 cpu) ..."""
    jobsets: float = 0.1
    """... and JobSets (1-2 replicated jobs of one pod of 1-2 cpu); the rest are bare Workloads."""
    remake_deleted: float = 0.7
    """Probability that the maker of a plain Pod or a pod group makes it again (the same Pods)
    once the operator deleted its Pods (a preemption); asked once per Pod or group."""
    max_remakes: int = 3
    """Per Pod: how many times it is made again at most."""


def finished_condition() -> dict[str, Any]:
    return {
        "type": "Finished",
        "status": "True",
        "reason": "Succeeded",
        "message": "Job finished successfully",
        "lastTransitionTime": format_time(datetime.now(UTC)),
    }


_workload_serial = itertools.count(1)  # names are never reused within a process (I3 follows names)


class _Worker:
    """`_run` in a daemon thread, from `_start_thread` until `_stop_thread` (joined for up to 30 s)."""

    _stop: threading.Event
    _thread: threading.Thread | None

    def _start_thread(self, name: str) -> None:
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _stop_thread(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def _run(self) -> None:
        raise NotImplementedError


def refused_by_webhook(status: int, data: Any) -> bool:
    """The API server could not call an admission webhook (failurePolicy Fail): its server is
    down, or did not answer in time. A user tries again later."""
    message = data.get("message") if isinstance(data, dict) else str(data)
    return status >= 500 and "failed calling webhook" in str(message)


@dataclass
class _Unit:
    """Pods the driver made together: a plain Pod, or the Pods of one group."""

    namespace: str
    bodies: dict[str, dict[str, Any]]
    """Pod name -> what it was created from."""
    seen: set[str] = field(default_factory=set)
    """Pods the monitor has seen since they were (last) created."""
    deleted: bool = False
    """By the driver: never made again."""
    remake: bool | None = None
    """Decided the first time the operator deleted one of them."""
    remade: Counter[str] = field(default_factory=Counter)


@dataclass
class _Create:
    path: str
    body: dict[str, Any]
    stat: str
    unit: str | None = None


class WorkloadDriver(_Worker):
    """Quota turning over: creates Workloads, batch/v1 Jobs, plain Pods, pod groups and JobSets
    on the topology's driven queues, finishes admitted ones after a random run time (a bare
    Workload by a Finished condition written through the status subresource, guarded by
    resourceVersion, as a job controller would; a Job by marking its pods Succeeded, as a kubelet
    would; Pods and JobSets' pods end by themselves, by kwok's completion stage) and deletes
    some finished and pending ones (a Job's, a JobSet's, a Pod's or a group's through them).

    A create the API server refuses because it could not call the operator's webhook (the
    operator is down) is tried again on later ticks, as a user would. Pods the operator deleted
    (a preemption) are made again, gated anew by the webhook, as their maker would
    (``remake_deleted``)."""

    def __init__(
        self,
        client: KubeClient,
        topology: Topology,
        monitor: InvariantMonitor,
        config: DriverConfig | None = None,
        *,
        seed: int = 0,
    ) -> None:
        self.client = client
        self.topology = topology
        self.monitor = monitor
        self.config = config or DriverConfig()
        self.random = random.Random(seed)
        self.stats: Counter[str] = Counter()
        self.errors: list[str] = []
        self._run_for: dict[str, float] = {}
        self._admitted_at: dict[str, tuple[str, float]] = {}
        self._finished_seen: set[str] = set()
        self._made = 0
        self._outbox: list[_Create] = []
        self._units: dict[str, _Unit] = {}
        """"<ns>/<group>" or "<ns>/<pod>" -> the Pods made together."""
        self._unit_of: dict[str, str] = {}
        """Pod key -> its unit."""
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._thread: threading.Thread | None = None
        shares = self._shares()
        self._firsts = [kind for kind, share in (*shares, ("workload", 1 - sum(s for _, s in shares))) if share > 0]
        """The kinds of the load's first creates, one of each in random order: a short run (a
        test's) exercises every kind, and its first ones have the time to finish."""
        self.random.shuffle(self._firsts)

    def _shares(self) -> tuple[tuple[str, float], ...]:
        """Each kind of the load but bare Workloads, with its share of the creates."""
        return (
            ("job", self.config.jobs),
            ("pod", self.config.pods),
            ("group", self.config.pod_groups),
            ("jobset", self.config.jobsets),
        )

    def start(self) -> WorkloadDriver:
        self._start_thread("workload-driver")
        return self

    def stop(self) -> None:
        self._stop_thread()

    def pause(self) -> None:
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()

    def _run(self) -> None:
        tick = 0.1
        credit = {"create": 0.0, "pending": 0.0, "racing": 0.0}
        while not self._stop.wait(tick):
            if self._paused.is_set():
                continue
            try:
                credit["create"] += self.config.creates_per_second * tick
                credit["pending"] += self.config.pending_deletes_per_second * tick
                credit["racing"] += self.config.racing_deletes_per_second * tick
                self._flush()
                current = self.monitor.current()
                pending = [k for k, o in current.items() if reservation(o)[0] is None and not is_true(o, "Finished")]
                while credit["create"] >= 1:
                    credit["create"] -= 1
                    if len(pending) < self.config.max_pending and (
                        not self.config.max_workloads or self._made < self.config.max_workloads
                    ):
                        self.create()
                while credit["pending"] >= 1:
                    credit["pending"] -= 1
                    if pending:
                        self.delete(self.random.choice(pending), "deleted-pending")
                while credit["racing"] >= 1:
                    credit["racing"] -= 1
                    racing = self.monitor.changed_since(0.5)
                    if racing:
                        self.delete(self.random.choice(racing), "deleted-racing")
                self._finish_due(current)
                self._remake_deleted()
            except ApiUnavailable as exc:
                self.stats["unavailable"] += 1
                self.errors.append(str(exc))
            except ApiError as exc:
                self.stats[f"error-{exc.status}"] += 1
                self.errors.append(str(exc))

    # -- creating

    def _post(self, create: _Create) -> bool:
        """True once it exists (made now, or already); False when it must be tried again later
        (no API server, or the webhook could not be called); ApiError for other refusals."""
        try:
            status, data = self.client.request("POST", create.path, create.body)
        except ApiUnavailable:
            self.stats["create-no-apiserver"] += 1
            return False
        if status in (201, 409):
            self.stats[create.stat] += 1
            return True
        if refused_by_webhook(status, data):
            self.stats["create-refused-no-webhook"] += 1
            return False
        raise ApiError(status, data, "POST", create.path)

    def _submit(self, create: _Create) -> None:
        """Created now, or queued to be tried again (after those already waiting)."""
        if self._outbox or not self._post(create):
            self._outbox.append(create)

    def _flush(self) -> None:
        """Tries the waiting creates again, in order, until one fails again."""
        while self._outbox:
            create = self._outbox[0]
            try:
                done = self._post(create)
            except ApiError as exc:
                done = True  # refused for good: dropped
                self.stats[f"error-{exc.status}"] += 1
                self.errors.append(str(exc))
            if not done:
                return
            self._outbox.pop(0)

    def create(
        self,
        queue: str | None = None,
        *,
        cpu: int | None = None,
        priority: int | None = None,
        namespace: str | None = None,
        name: str | None = None,
        as_job: bool | None = None,
    ) -> str:
        """Creates one Workload, Job, Pod, pod group or JobSet (random where not given); returns
        its key (of the Workload it will have for a group: <ns>/<group>). Only bare Workloads
        when ``name`` or an unknown ``priority`` is given (the scenarios'), or ``as_job``."""
        serial = next(_workload_serial)
        self._made += 1
        queue = queue or self.random.choice(self.topology.driven_queues())
        cpu = cpu if cpu is not None else self.random.choice(self.config.cpus)
        priority = priority if priority is not None else self.random.choice(self.config.priorities)
        namespace = namespace or self.random.choice(self.topology.namespaces)
        kind = "workload"
        if as_job is None and name is None and priority in PRIORITIES:  # the driver's own load
            draw = self.random.random()
            for choice, share in self._shares():
                if draw < share:
                    kind = choice
                    break
                draw -= share
            if self._firsts:
                kind = self._firsts.pop()
        elif as_job:
            kind = "job"
        run_for = self.random.uniform(*self.config.run_seconds)
        priority_class = self.topology.priority_class(priority)
        if kind == "job":
            name = name or f"j{serial:05d}-{queue}-p{priority}"
            path = f"{JOBS_PATH}/namespaces/{namespace}/jobs"
            self._submit(_Create(path, new_job(name, namespace, queue, cpu, priority_class), "created-jobs"))
            self._run_for[f"job:{namespace}/{name}"] = run_for
            return f"{namespace}/{name}"
        if kind in ("pod", "group"):
            path = f"/api/v1/namespaces/{namespace}/pods"
            if kind == "pod":
                name = f"p{serial:05d}-{queue}-p{priority}"
                bodies = {name: new_pod(name, namespace, queue, cpu, priority_class, run_for)}
                stat = "created-pods"
            else:
                name = f"g{serial:05d}-{queue}-p{priority}"
                size = self.random.choice((2, 3))
                bodies = {
                    f"{name}-{i}": new_pod(
                        f"{name}-{i}",
                        namespace,
                        queue,
                        self.random.choice((1, 1, 2)),
                        priority_class,
                        run_for,
                        group=name,
                        total=size,
                    )
                    for i in range(size)
                }
                stat = "created-group-pods"
                self.stats["created-groups"] += 1
            unit = f"{namespace}/{name}"
            self._units[unit] = _Unit(namespace, bodies)
            for pod_name, body in bodies.items():
                self._unit_of[f"{namespace}/{pod_name}"] = unit
                self._submit(_Create(path, copy.deepcopy(body), stat, unit))
            return unit
        if kind == "jobset":
            name = f"s{serial:05d}-{queue}-p{priority}"
            cpus = [self.random.choice((1, 2)) for _ in range(self.random.choice((1, 2)))]
            path = f"{JOBSETS_PATH}/namespaces/{namespace}/jobsets"
            self._submit(
                _Create(path, new_jobset(name, namespace, queue, cpus, priority_class, run_for), "created-jobsets")
            )
            return f"{namespace}/{name}"
        name = name or f"w{serial:05d}-{queue}-p{priority}"
        status, data = self.client.request(
            "POST", workload_path(namespace), new_workload(name, namespace, queue, cpu, priority)
        )
        if status not in (201, 409):
            raise ApiError(status, data, "POST", workload_path(namespace))
        self.stats["created"] += 1
        key = f"{namespace}/{name}"
        self._run_for[key] = run_for
        return key

    def _remake_deleted(self) -> None:
        """Pods of the driver's Pods and groups that are gone though the driver did not delete
        them (the operator did: a preemption) are made again, gated anew, once the old Pod is
        gone, when their maker is one that does (decided once per Pod or group)."""
        pods = self.monitor.pods()
        for key, unit in self._units.items():
            if unit.deleted or unit.remake is False:
                continue
            for name, body in unit.bodies.items():
                if f"{unit.namespace}/{name}" in pods:
                    unit.seen.add(name)
                    continue
                if name not in unit.seen:
                    continue  # not created yet, or not seen yet
                unit.seen.discard(name)
                if unit.remake is None:
                    unit.remake = self.random.random() < self.config.remake_deleted
                    self.stats["deleted-by-operator" if unit.remake else "deleted-by-operator-given-up"] += 1
                if not unit.remake or unit.remade[name] >= self.config.max_remakes:
                    continue
                unit.remade[name] += 1
                path = f"/api/v1/namespaces/{unit.namespace}/pods"
                self._submit(_Create(path, copy.deepcopy(body), "remade-pods", key))

    # -- deleting

    def delete(self, key: str, stat: str = "deleted") -> bool:
        """Deletes a Workload; one that has a Job, JobSet, Pod or group through it."""
        namespace, name = key.split("/", 1)
        owner = workload_owner(self.monitor.current().get(key) or {})
        if owner is not None:
            kind, owner_name = owner
            if kind in ("Pod", "PodGroup"):
                return self._delete_pods(namespace, owner_name, group=kind == "PodGroup", stat=stat)
            base = JOBSETS_PATH if kind == "JobSet" else JOBS_PATH
            path = f"{base}/namespaces/{namespace}/{kind.lower()}s/{owner_name}?propagationPolicy=Background"
            status, data = self.client.request("DELETE", path)
            if status in (200, 202):
                self.stats[f"{stat}-{kind.lower()}s"] += 1
                return True
            if status != 404:
                raise ApiError(status, data, "DELETE", path)
            return False
        status, data = self.client.request("DELETE", workload_path(namespace, name))
        if status in (200, 202):
            self.stats[stat] += 1
            return True
        if status != 404:
            raise ApiError(status, data, "DELETE", workload_path(namespace, name))
        return False

    def _delete_pods(self, namespace: str, name: str, *, group: bool, stat: str) -> bool:
        """Deletes a plain Pod or a group's Pods, never to be made again."""
        unit_key = f"{namespace}/{name}" if group else self._unit_of.get(f"{namespace}/{name}")
        unit = self._units.get(unit_key or "")
        if unit is not None:
            unit.deleted = True
            self._outbox = [c for c in self._outbox if c.unit != unit_key]
        pods = f"/api/v1/namespaces/{namespace}/pods"
        path = f"{pods}?labelSelector={quote(f'{GROUP_LABEL}={name}')}" if group else f"{pods}/{name}"
        status, data = self.client.request("DELETE", path)
        if status in (200, 202) and (not group or (data or {}).get("items")):
            self.stats[f"{stat}-{'groups' if group else 'pods'}"] += 1
            return True
        if status not in (200, 202, 404):
            raise ApiError(status, data, "DELETE", path)
        return False

    # -- finishing

    def _finish_due(self, current: dict[str, dict[str, Any]]) -> None:
        now = now_s()
        for key, obj in current.items():
            cq, _ = reservation(obj)
            if cq is None:
                self._admitted_at.pop(key, None)
                # One chance each to be cleaned up, whoever created it.
                if is_true(obj, "Finished") and key not in self._finished_seen:
                    self._finished_seen.add(key)
                    self._run_for.pop(key, None)
                    if self.random.random() < self.config.delete_finished:
                        self.delete(key, "deleted-finished")
                continue
            owner = workload_owner(obj)
            if owner is not None and owner[0] != "Job":
                continue  # its pods end by themselves (kwok's completion stage)
            # One run per admission: a re-admission after an eviction starts the clock again.
            episode = f"{cq}@{(condition(obj, 'QuotaReserved') or {}).get('lastTransitionTime')}"
            seen = self._admitted_at.get(key)
            if seen is None or seen[0] != episode:
                self._admitted_at[key] = (episode, now)
                continue
            job = job_owner(obj)
            run_for = self._run_for.get(f"job:{obj['metadata']['namespace']}/{job}" if job else key)
            if now - seen[1] >= (run_for or self.config.run_seconds[0]) and self.finish(key, obj):
                self._admitted_at.pop(key, None)

    def finish_job(self, namespace: str, job: str) -> bool:
        """Marks the Running pods of a Job Succeeded (the job controller then completes it, and
        the operator finishes its Workload); False when it has no pod to finish yet."""
        selector = quote(f"batch.kubernetes.io/job-name={job}")
        pods, _ = self.client.list_items(f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")
        done = False
        for pod in pods:
            # Only a Running pod: kwok's stage that starts a bound Pending pod would overwrite a
            # Succeeded written before it with Running, and bring back a pod the scheduler has
            # already let go of. A Job whose pods have not started is finished on a later tick.
            if (pod.get("status") or {}).get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
                continue
            path = f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}/status"
            status, data = self.client.request(
                "PATCH", path, {"status": {"phase": "Succeeded"}}, content_type="application/merge-patch+json"
            )
            if status == 200:
                done = True
            elif status not in (404, 409, 422):
                raise ApiError(status, data, "PATCH", path)
        if done:
            self.stats["finished-jobs"] += 1
        return done

    def finish(self, key: str, obj: dict[str, Any] | None = None) -> bool:
        """Finishes an admitted Workload (through its Job's pods, if a Job owns it); False when it
        is gone, not admitted, or its Job has no pod yet; False too for those of Pods and
        JobSets, whose pods kwok ends."""
        namespace, name = key.split("/", 1)
        owner = workload_owner(obj or self.monitor.current().get(key) or {})
        if owner is not None:
            return owner[0] == "Job" and self.finish_job(namespace, owner[1])
        path = workload_path(namespace, name, "status")
        for _ in range(5):
            if obj is None:
                obj = self.client.get(workload_path(namespace, name))
            if obj is None or reservation(obj)[0] is None:
                return False
            ops: list[dict[str, Any]] = [
                {"op": "test", "path": "/metadata/resourceVersion", "value": obj["metadata"]["resourceVersion"]}
            ]
            if (obj.get("status") or {}).get("conditions"):
                ops.append({"op": "add", "path": "/status/conditions/-", "value": finished_condition()})
            else:
                ops.append({"op": "add", "path": "/status/conditions", "value": [finished_condition()]})
            status, data = self.client.json_patch(path, ops)
            if status == 200:
                self.stats["finished"] += 1
                return True
            if status == 404:
                return False
            if status not in (409, 422):
                raise ApiError(status, data, "PATCH", path)
            self.stats["finish-conflicts"] += 1
            obj = None
        return False


_foreign_counter = itertools.count(1)  # shared: values keep increasing across writers of one process
_foreign_lock = threading.Lock()


class ForeignWriter(_Worker):
    """Another controller writing the same Workloads: a label and an annotation (one metadata
    patch) or a condition of its own (one status patch), each an increasing counter, with a
    JSON patch guarded by resourceVersion and retried on conflict, at ``rate`` writes/s to
    random Workloads. Every success is recorded with the resourceVersion it produced (I3)."""

    def __init__(self, client: KubeClient, monitor: InvariantMonitor, rate: float = 20.0, *, seed: int = 0) -> None:
        self.client = client
        self.monitor = monitor
        self.rate = rate
        self.random = random.Random(seed)
        self.stats: Counter[str] = Counter()
        self._successes: list[tuple[str, int, int, int]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.started = 0.0
        self.stopped = 0.0

    def start(self) -> ForeignWriter:
        self.started = now_s()
        self._start_thread("foreign-writer")
        return self

    def stop(self) -> None:
        self._stop_thread()
        self.stopped = self.stopped or now_s()

    def successes(self) -> list[tuple[str, int, int, int]]:
        """(key, channel 0 label / 1 annotation / 2 condition, counter, resourceVersion)."""
        with self._lock:
            return list(self._successes)

    @property
    def writes(self) -> int:
        return self.stats["written"]

    def writes_per_second(self) -> float:
        end = self.stopped or now_s()
        return self.writes / max(1e-9, end - self.started) if self.started else 0.0

    def _run(self) -> None:
        interval = 1.0 / self.rate
        next_at = now_s()
        while not self._stop.is_set():
            next_at += interval
            delay = next_at - now_s()
            if delay > 0 and self._stop.wait(delay):
                break
            if delay < -1:
                next_at = now_s()  # fell behind (API server down): do not burst
            keys = list(self.monitor.current())
            if not keys:
                continue
            key = self.random.choice(keys)
            try:
                self.write(key, self.random.random() < 0.5)
            except ApiError as exc:
                self.stats["unavailable" if isinstance(exc, ApiUnavailable) else f"error-{exc.status}"] += 1

    def write(self, key: str, metadata: bool) -> bool:
        namespace, name = key.split("/", 1)
        for _ in range(8):
            obj = self.client.get(workload_path(namespace, name))
            if obj is None:
                self.stats["gone"] += 1
                return False
            with _foreign_lock:
                counter = next(_foreign_counter)
            ops: list[dict[str, Any]] = [
                {"op": "test", "path": "/metadata/resourceVersion", "value": obj["metadata"]["resourceVersion"]}
            ]
            meta = obj["metadata"]
            if metadata:
                path = workload_path(namespace, name)
                escaped = TOUCH_KEY.replace("~", "~0").replace("/", "~1")
                for field_name in ("labels", "annotations"):
                    if meta.get(field_name):
                        ops.append({"op": "add", "path": f"/metadata/{field_name}/{escaped}", "value": str(counter)})
                    else:
                        ops.append({"op": "add", "path": f"/metadata/{field_name}", "value": {TOUCH_KEY: str(counter)}})
            else:
                path = workload_path(namespace, name, "status")
                cond = {
                    "type": TOUCH_CONDITION,
                    "status": "True",
                    "reason": "Touched",
                    "message": str(counter),
                    "lastTransitionTime": format_time(datetime.now(UTC)),
                }
                status = obj.get("status")
                conditions = (status or {}).get("conditions")
                if status is None:
                    ops.append({"op": "add", "path": "/status", "value": {"conditions": [cond]}})
                elif not conditions:
                    ops.append({"op": "add", "path": "/status/conditions", "value": [cond]})
                else:
                    index = next((i for i, c in enumerate(conditions) if c.get("type") == TOUCH_CONDITION), None)
                    if index is None:
                        ops.append({"op": "add", "path": "/status/conditions/-", "value": cond})
                    else:
                        ops.append({"op": "replace", "path": f"/status/conditions/{index}", "value": cond})
            status_code, data = self.client.json_patch(path, ops)
            if status_code == 200:
                rv = int(data["metadata"]["resourceVersion"])
                with self._lock:
                    if metadata:
                        self._successes += [(key, 0, counter, rv), (key, 1, counter, rv)]
                    else:
                        self._successes.append((key, 2, counter, rv))
                self.stats["written"] += 1
                return True
            if status_code == 404:
                self.stats["gone"] += 1
                return False
            if status_code in (409, 422):
                self.stats["conflicts"] += 1
                continue
            raise ApiError(status_code, data, "PATCH", path)
        self.stats["gave-up"] += 1
        return False


# ---- operators -----------------------------------------------------------------------------------


class WebhookFront:
    """What the webhook Service is to the operator's replicas in a cluster: one address, which
    every replica registers as its webhooks' URL (so the registration stays the same whichever
    replica made it last, and across restarts), passed on as TCP (TLS ends at the replica, whose
    certificate all share through their Secret) to a replica that takes the connection, tried in
    turn from ``ports()``. With none up the API server's call fails, and with failurePolicy Fail
    so does the create or update it was for."""

    def __init__(self, ports: Callable[[], list[int]]) -> None:
        self.ports = ports
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.5)
        self.port = int(self._server.getsockname()[1])
        self.stats: Counter[str] = Counter()
        self._turn = itertools.count()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="webhook-front", daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> WebhookFront:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._server.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="webhook-front-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        ports = self.ports()
        start = next(self._turn)
        upstream = None
        for i in range(len(ports)):
            try:
                upstream = socket.create_connection(("127.0.0.1", ports[(start + i) % len(ports)]), timeout=2)
                break
            except OSError:
                continue
        if upstream is None:
            self.stats["no replica"] += 1
            conn.close()
            return
        self.stats["passed on"] += 1
        upstream.settimeout(None)
        other = threading.Thread(target=self._pump, args=(upstream, conn), daemon=True)
        other.start()
        self._pump(conn, upstream)
        other.join(30)
        for sock in (conn, upstream):
            sock.close()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def process_state(pid: int) -> str:
    """The state letter of /proc/<pid>/stat ('T' when stopped); '' when gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return text.rpartition(")")[2].split()[0]


class HookMissing(AssertionError):
    """The operator does not have the fault hook a scenario needs."""


# ---- figures -------------------------------------------------------------------------------------


@dataclass
class Takeover:
    fault: str
    """'kill -9 (mid-batch)', 'kill -9', 'SIGSTOP', 'stall'."""
    victim: str
    at: float
    lease_s: float | None = None
    """Fault until another replica held the Lease."""
    first_admission_s: float | None = None
    """Fault until the new holder's first admission."""
    note: str = ""


@dataclass
class Outage:
    down_s: float
    deleted_while_down: int
    recovery_s: float | None
    """API server ready again until I4 held (None: not within the bound)."""
    ghost_patches_404: int
    ghost_patch_rate_max: float
    problems: list[str] = field(default_factory=list)


@dataclass
class Figures:
    takeovers: list[Takeover] = field(default_factory=list)
    outages: list[Outage] = field(default_factory=list)
    settles: list[tuple[str, float | None]] = field(default_factory=list)
    injected: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    foreign_writes: int = 0
    foreign_seconds: float = 0.0
    driver: Counter[str] = field(default_factory=Counter)

    @property
    def kills(self) -> list[Takeover]:
        return [t for t in self.takeovers if t.fault.startswith("kill")]

    def kills_survived(self) -> int:
        """Kills after which some replica admitted again."""
        return sum(1 for t in self.kills if t.first_admission_s is not None)

    def markdown(self) -> str:
        def fmt(value: float | None) -> str:
            return "—" if value is None else f"{value:.2f}"

        def spread(values: list[float]) -> str:
            if not values:
                return "—"
            values = sorted(values)
            return f"{values[len(values) // 2]:.1f} / {values[-1]:.1f} (n={len(values)})"

        kills = self.kills
        lines = ["| measure | value |", "|---|---:|"]
        if kills:
            lines += [
                f"| kill -9 of an operator (mid-batch) | {len(kills)} ({sum(1 for k in kills if 'mid-batch' in k.fault)}) |",
                f"| kills survived (a replica admitted again) | {self.kills_survived()} |",
            ]
        if self.takeovers:
            lines += [
                f"| takeover, fault → new Lease holder, median / max (s) | {spread([t.lease_s for t in self.takeovers if t.lease_s is not None])} |",
                f"| takeover, fault → new holder's first admission, median / max (s) | {spread([t.first_admission_s for t in self.takeovers if t.first_admission_s is not None])} |",
            ]
        for o in self.outages:
            lines.append(
                f"| API-server outage {o.down_s:.0f} s, {o.deleted_while_down} deletes while down: recovery to I4 (s) | {fmt(o.recovery_s)} |"
            )
            lines.append(
                f"| ... PATCHes answered 404 after the restart (max per second) | {o.ghost_patches_404} ({o.ghost_patch_rate_max:.0f}) |"
            )
        if self.foreign_seconds:
            lines.append(
                f"| foreign writer: writes, writes/s | {self.foreign_writes}, {self.foreign_writes / self.foreign_seconds:.1f} |"
            )
        if self.injected:
            lines.append(f"| injected faults | {', '.join(f'{k}: {v}' for k, v in sorted(self.injected.items()))} |")
        if self.driver:
            lines.append(f"| load | {', '.join(f'{k}: {v}' for k, v in sorted(self.driver.items()))} |")
        for label, seconds in self.settles:
            lines.append(
                f"| settle (I4) after {label} (s) | {fmt(seconds) if seconds is not None else 'not within the bound'} |"
            )
        return "\n".join(lines)

    def takeover_table(self) -> str:
        lines = ["| fault | victim | → Lease (s) | → first admission (s) | note |", "|---|---|---:|---:|---|"]
        for t in self.takeovers:
            lines.append(
                f"| {t.fault} | {t.victim} | {'—' if t.lease_s is None else f'{t.lease_s:.1f}'} | "
                f"{'—' if t.first_admission_s is None else f'{t.first_admission_s:.1f}'} | {t.note} |"
            )
        return "\n".join(lines)


# ---- one chaos run -------------------------------------------------------------------------------


class ChaosEnv:
    """A run: its topology on the control plane, the invariant monitor, the operators (each
    behind a FaultProxy of its own unless ``direct``), the load and the figures.

    Clients of the test (monitor, driver, writer) use every kube-apiserver of the plane, the
    last added first, so they keep working while the operators' one (the first) is down."""

    def __init__(
        self,
        plane: ControlPlane,
        workdir: Path,
        *,
        name: str = "chaos",
        seed: int | None = None,
        queues: Sequence[QueueSpec] = DEFAULT_QUEUES,
        lease_seconds: int = 4,
        jobsets: bool = True,
    ) -> None:
        self.plane = plane
        self.jobsets = jobsets
        """The JobSet controller runs: JobSets are among the load."""
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.seed = seed if seed is not None else random.randrange(1 << 30)
        self.random = random.Random(self.seed)
        self.topology = Topology(f"{name}-{secrets.token_hex(2)}", queues)
        servers = [api.server for api in reversed(plane.apiservers)]
        self.client = KubeClient(servers, plane.token, plane.ca_file)
        self.monitor = InvariantMonitor(self.client, self.topology)
        self.lease_name = f"{self.topology.prefix}-lease"
        self.lease_seconds = lease_seconds
        self.operators: dict[str, OperatorProcess] = {}
        self.all_operators: list[OperatorProcess] = []
        self.proxies: dict[str, FaultProxy] = {}
        self.driver: WorkloadDriver | None = None
        self.writer: ForeignWriter | None = None
        self.figures = Figures()
        self.extra_violations: list[Violation] = []
        self._writers_done: list[ForeignWriter] = []
        """Stopped writers whose successes I3 has not been checked against yet."""
        self.webhook_ports: dict[str, int] = {}
        """Replica name -> the port it serves its webhooks on (the same after a restart)."""
        self.front = WebhookFront(self._webhook_ports)
        self._webhooks_checked = False

    # -- life cycle

    def __enter__(self) -> ChaosEnv:
        self.front.start()
        self.topology.apply(self.client)
        self.monitor.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.stop_load()
        for op in self.all_operators:
            if op.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(op.popen.pid, signal.SIGCONT)  # type: ignore[union-attr]
                try:
                    op.stop(timeout=10)
                except AssertionError:
                    op.kill()
        self.monitor.stop()
        with contextlib.suppress(ApiError):
            self.client.request("DELETE", LEASE_PATH.format(namespace="default", name=self.lease_name))
        with contextlib.suppress(ApiError):
            self._unregister_webhooks()
        with contextlib.suppress(ApiError):
            self.topology.delete(self.client)
        for proxy in self.proxies.values():
            proxy.stop()
        self.front.stop()

    def _unregister_webhooks(self) -> None:
        """With the operators gone: no later create may wait on their webhooks, and no Pod of
        the run on their finalizer."""
        for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            self.client.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}/{WEBHOOKS}")
        selector = quote(f"{MANAGED}=true")
        for ns in self.topology.namespaces:
            pods, _ = self.client.list_items(f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}")
            for pod in pods:
                if MANAGED in (pod["metadata"].get("finalizers") or []):
                    left = [f for f in pod["metadata"]["finalizers"] if f != MANAGED]
                    self.client.request(
                        "PATCH",
                        f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}",
                        {"metadata": {"finalizers": left or None}},
                        content_type="application/merge-patch+json",
                    )

    def elapsed(self) -> float:
        return self.monitor._elapsed()

    # -- operators

    def proxy_for(self, name: str) -> FaultProxy:
        proxy = self.proxies.get(name)
        if proxy is None:
            proxy = FaultProxy(
                self.plane.server,
                token=self.plane.token,
                ca_file=self.plane.ca_file,
                seed=self.random.randrange(1 << 30),
            )
            proxy.start()
            self.proxies[name] = proxy
        return proxy

    def start_operator(
        self, name: str, *, faults: str | None = None, direct: bool = False, ready: bool = True
    ) -> OperatorProcess:
        """Starts (or restarts) replica ``name``; with ``faults`` set as PREEMPTION_OPERATOR_FAULTS."""
        env = dict(self.plane.env)
        env.pop(FAULTS_ENV, None)
        if faults:
            env[FAULTS_ENV] = faults
        kubeconfig = (
            self.plane.kubeconfig
            if direct
            else self.proxy_for(name).write_kubeconfig(self.workdir / f"kubeconfig-{name}")
        )
        port = self.webhook_ports.setdefault(name, free_port())
        webhooks = [f"--webhook-port={port}", "--webhook-host=127.0.0.1", f"--webhook-url={self.front.url}"]
        if os.environ.get("CHAOS_OPERATOR_VERBOSE"):
            webhooks.append("--verbose")  # debug logs in operator-<name>.log, for chasing a violation
        op = OperatorProcess(
            name,
            kubeconfig,
            self.workdir,
            lease_name=self.lease_name,
            lease_seconds=self.lease_seconds,
            base_env=env,
            extra_args=webhooks,
        )
        self.operators[name] = op
        self.all_operators.append(op)
        op.start()
        if ready:
            op.wait_ready(timeout=60)
            if not self._webhooks_checked:
                self.wait_webhooks()
        return op

    def _webhook_ports(self) -> list[int]:
        """The webhook ports of the replicas that are up (not stopped): the front's choices."""
        return [
            self.webhook_ports[op.name]
            for op in self.operators.values()
            if op.alive() and op.name in self.webhook_ports and process_state(op.popen.pid) not in ("T", "")  # type: ignore[union-attr]
        ]

    def wait_webhooks(self, timeout: float = 60.0) -> None:
        """Until every kube-apiserver of the plane gates a queued Pod at creation (a dry run):
        the replicas registered the webhooks at the front's URL (in etcd, which the API servers
        share) and each API server has read the registration."""
        probe = new_pod("webhook-probe", self.topology.namespaces[0], "a1", 1, self.topology.priority_class(0), 1)
        path = f"/api/v1/namespaces/{self.topology.namespaces[0]}/pods?dryRun=All"
        for api in self.plane.apiservers:
            if not api.alive():
                continue
            client = KubeClient([api.server], self.plane.token, self.plane.ca_file)
            deadline = now_s() + timeout
            last: Any = None
            while True:
                try:
                    status, last = client.request("POST", path, probe)
                except ApiUnavailable as exc:
                    status, last = 0, str(exc)
                gates = ((last if isinstance(last, dict) else {}).get("spec") or {}).get("schedulingGates")
                if status == 201 and gates:
                    break
                if now_s() > deadline:
                    raise AssertionError(
                        f"{api.server} did not gate a queued Pod within {timeout:.0f}s (the operator's webhooks "
                        f"at {self.front.url}): HTTP {status}: {str(last)[:300]}\n{self.diagnostics()}"
                    )
                time.sleep(0.2)
        self._webhooks_checked = True

    def lease_holder(self) -> str | None:
        try:
            lease = self.client.get(LEASE_PATH.format(namespace="default", name=self.lease_name))
        except ApiError:
            return None
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
        return str(holder) if holder else None

    def leader(self) -> OperatorProcess | None:
        holder = self.lease_holder() or ""
        name = holder.rpartition("_")[0]
        op = self.operators.get(name)
        return op if op is not None and op.alive() else None

    def wait_leader(self, *, other_than: str | None = None, timeout: float = 30.0) -> tuple[OperatorProcess, float]:
        """The live replica holding the Lease (not ``other_than``), and when it was seen."""
        deadline = now_s() + timeout
        while now_s() < deadline:
            op = self.leader()
            if op is not None and op.name != other_than:
                return op, now_s()
            time.sleep(0.1)
        raise AssertionError(
            f"no replica (other than {other_than}) took the Lease within {timeout:.0f}s; holder: {self.lease_holder()}\n{self.diagnostics()}"
        )

    def diagnostics(self) -> str:
        """The operators' last log lines, and every line of theirs naming an object a violation
        suspects (the last 40 of them per operator)."""
        names = {name for v in self.violations() for name in v.names}
        parts = [op.tail(40) for op in self.operators.values()]
        if names:
            for op in self.operators.values():
                named = [line for line in op.log().splitlines() if any(name in line for name in names)]
                parts.append(
                    f"--- operator {op.name}, its log lines naming {', '.join(sorted(names))} (last 40):\n"
                    + "\n".join(named[-40:])
                )
        return "\n".join(parts)

    # -- load

    def start_load(self, config: DriverConfig | None = None, *, foreign_rate: float = 10.0) -> None:
        config = config or DriverConfig()
        if not self.jobsets:
            config = dataclasses.replace(config, jobsets=0.0)
        self.driver = WorkloadDriver(
            self.client, self.topology, self.monitor, config, seed=self.random.randrange(1 << 30)
        ).start()
        if foreign_rate > 0:
            self.writer = ForeignWriter(
                self.client, self.monitor, foreign_rate, seed=self.random.randrange(1 << 30)
            ).start()

    def stop_load(self) -> None:
        if self.driver is not None:
            self.driver.stop()
            self.figures.driver.update(self.driver.stats)
            self.driver = None
        if self.writer is not None:
            self.writer.stop()
            self.figures.foreign_writes += self.writer.writes
            self.figures.foreign_seconds += self.writer.stopped - self.writer.started
            self._writers_done.append(self.writer)
            self.writer = None

    def set_errors(self, **kwargs: float) -> None:
        for proxy in self.proxies.values():
            proxy.set_errors(**kwargs)

    def settle(self, label: str, timeout: float = 60.0) -> tuple[float | None, list[str]]:
        """Stops the load, waits for I4 and records how long it took."""
        self.stop_load()
        for proxy in self.proxies.values():
            proxy.clear_faults()
        seconds, problems = wait_settled(self.client, self.topology, timeout)
        self.figures.settles.append((label, seconds))
        return seconds, problems

    def violations(self) -> list[Violation]:
        for writer in self._writers_done:
            self.monitor.check_foreign(writer)
        self._writers_done.clear()
        return [*self.monitor.violations, *self.extra_violations]

    def report(self) -> str:
        self.violations()
        parts = [self.monitor.report()]
        if self.extra_violations:
            parts.append("other violations:\n" + "\n".join(f"  {v}" for v in self.extra_violations))
        for name, proxy in self.proxies.items():
            parts.append(f"requests of operator {name} (through its proxy):\n{proxy.summary(top=12)}")
        parts.append(self.figures.markdown())
        if self.figures.takeovers:
            parts.append(self.figures.takeover_table())
        parts += [f"note: {n}" for n in self.figures.notes]
        return "\n".join(parts)

    def assert_promise(self, settle_label: str, settle_timeout: float = 60.0) -> None:
        """The test's end: I4 within ``settle_timeout``, then no violation of I1-I3 anywhere."""
        __tracebackhide__ = True
        seconds, problems = self.settle(settle_label, settle_timeout)
        violations = self.violations()
        failures = []
        if seconds is None:
            failures.append(
                f"[I4] not settled within {settle_timeout:.0f}s after the faults stopped:\n  "
                + "\n  ".join(problems[:30])
            )
        if violations:
            failures.append(self.report())
        if failures:
            raise AssertionError("\n".join(failures) + f"\n(seed {self.seed})\n{self.diagnostics()}")

    # -- deterministic preparation for the leader scenarios

    def fill_solo(self, *, fill: int = 4, waiting: int = 2) -> tuple[list[str], list[str]]:
        """Fills ClusterQueue `solo` (no cohort, 4 cpu) with ``fill`` 1-cpu Workloads (admitted)
        and leaves ``waiting`` more pending behind them."""
        assert self.driver is None or self.driver._paused.is_set()
        ns = self.topology.namespaces[0]
        maker = WorkloadDriver(self.client, self.topology, self.monitor, seed=self.random.randrange(1 << 30))
        stamp = secrets.token_hex(2)
        fills = [
            maker.create("solo", cpu=1, priority=0, namespace=ns, name=f"solo-fill-{stamp}-{i}") for i in range(fill)
        ]
        self.wait_for(
            lambda: all(reservation(self.monitor.current().get(k, {}))[0] for k in fills), "the solo queue filled", 60
        )
        waits = [
            maker.create("solo", cpu=1, priority=0, namespace=ns, name=f"solo-wait-{stamp}-{i}") for i in range(waiting)
        ]
        return fills, waits

    def wait_for(self, check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
        deadline = now_s() + timeout
        while True:
            result = check()
            if result:
                return result
            if now_s() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{self.diagnostics()}")
            time.sleep(0.1)


# ---- the fault families --------------------------------------------------------------------------


def _is_workload_status_patch(method: str, resource: str, sub: str) -> bool:
    return method == "PATCH" and resource == "workloads" and sub == "status"


def kill_storm(
    env: ChaosEnv,
    kills: int,
    *,
    replicas: Sequence[str] = ("op-a", "op-b"),
    pause: tuple[float, float] = (2.0, 6.0),
    mid_batch_every: int = 2,
) -> None:
    """kill -9 the leader ``kills`` times (every ``mid_batch_every``-th right after its proxy
    passed on the n-th Workload status PATCH of a batch; the others at a random moment), restart
    it as a standby each time, and time the takeovers. Replicas must be running (through proxies)."""
    for i in range(kills):
        time.sleep(env.random.uniform(*pause))
        leader, _ = env.wait_leader(timeout=60)
        mid_batch = i % mid_batch_every == 0
        fired = threading.Event()
        if mid_batch:
            pid = leader.popen.pid  # type: ignore[union-attr]

            def kill_now(pid: int = pid, fired: threading.Event = fired) -> None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                fired.set()

            env.proxy_for(leader.name).on_request(_is_workload_status_patch, kill_now, after=env.random.randint(1, 4))
            fired.wait(20)
            if not fired.is_set():
                env.proxy_for(leader.name).clear_faults()
                mid_batch = False  # no batch came: kill it anyway
        killed_at = now_s()
        leader.kill()
        note = "" if not mid_batch or fired.is_set() else "no batch within 20 s"
        take = Takeover("kill -9 (mid-batch)" if mid_batch else "kill -9", leader.name, env.elapsed(), note=note)
        env.figures.takeovers.append(take)
        try:
            _, seen = env.wait_leader(other_than=leader.name, timeout=60)
            take.lease_s = seen - killed_at
        except AssertionError as exc:
            take.note = f"no new leader: {str(exc)[:200]}"
        env.start_operator(leader.name)  # back as a standby
        first = _wait_first_admission(env, killed_at, 30)
        if first is not None:
            take.first_admission_s = first - killed_at


def _wait_first_admission(env: ChaosEnv, since: float, timeout: float) -> float | None:
    deadline = now_s() + timeout
    while now_s() < deadline:
        first = env.monitor.first_admission_after(since)
        if first is not None:
            return first
        time.sleep(0.1)
    return None


def _leader_scenario(env: ChaosEnv, faults: str, *, fault_name: str) -> dict[str, Any]:
    """Common to the stop-before-write and stall scenarios: a settled, full `solo` queue with two
    Workloads waiting; replica `hooked` (with the fault) leads, `standby` stands by; two running
    Workloads finish, so the leader decides to admit the waiting ones and hits the fault; then two
    higher-priority Workloads arrive for the same freed quota."""
    if env.driver is not None:
        env.driver.pause()
    for op in env.operators.values():
        if op.alive():
            op.stop()
    plain = env.start_operator("plain")
    env.wait_leader(timeout=60)
    # An empty solo queue (an earlier round may have left Workloads in it).
    for key, obj in env.monitor.current().items():
        if obj["spec"].get("queueName") == "solo":
            with contextlib.suppress(ApiError):
                WorkloadDriver(env.client, env.topology, env.monitor).delete(key)
    env.wait_for(
        lambda: not any(o["spec"].get("queueName") == "solo" for o in env.monitor.current().values()),
        "the solo queue to be empty",
    )
    fills, waits = env.fill_solo()
    seconds, problems = wait_settled(env.client, env.topology, 60)
    assert seconds is not None, f"not settled before the {fault_name} scenario: {problems}"
    plain.stop()  # releases the Lease
    hooked = env.start_operator("hooked", faults=faults)
    env.wait_for(lambda: (env.lease_holder() or "").startswith("hooked_"), "the hooked replica to lead", 30)
    standby = env.start_operator("standby")
    time.sleep(1.0)  # a cycle or two of the new leader over the settled state: no admission
    maker = WorkloadDriver(env.client, env.topology, env.monitor, seed=env.random.randrange(1 << 30))
    freed_at = now_s()
    for key in fills[:2]:
        assert maker.finish(key), f"could not finish {key}"
    return {"hooked": hooked, "standby": standby, "fills": fills, "waits": waits, "maker": maker, "freed_at": freed_at}


def leader_stop_before_write(env: ChaosEnv) -> Takeover:
    """The leader freezes (SIGSTOP, by its own fault hook) after deciding admissions and before
    writing them; the standby takes over and admits others into the freed quota; SIGCONT. The
    resumed replica must write nothing: its lease ran out while it was stopped."""
    s = _leader_scenario(env, "stop-before-write=1", fault_name="stop-before-write")
    hooked: OperatorProcess = s["hooked"]
    pid = hooked.popen.pid  # type: ignore[union-attr]
    deadline = now_s() + 30
    while process_state(pid) != "T":
        admitted_by_leader = [k for k in s["waits"] if reservation(env.monitor.current().get(k, {}))[0]]
        if admitted_by_leader or now_s() > deadline or not hooked.alive():
            raise HookMissing(
                f"the operator has no stop-before-write fault hook: with {FAULTS_ENV}=stop-before-write=1 it "
                f"{'admitted ' + ', '.join(admitted_by_leader) if admitted_by_leader else 'did not stop'} "
                f"instead of logging {STOP_LINE!r} and stopping itself (state {process_state(pid) or 'gone'!r})\n{hooked.tail(30)}"
            )
        time.sleep(0.05)
    stopped_at = now_s()
    assert STOP_LINE in hooked.log(), f"stopped without logging {STOP_LINE!r}"
    take = Takeover("SIGSTOP before write", hooked.name, env.elapsed())
    env.figures.takeovers.append(take)
    ns = env.topology.namespaces[0]
    stamp = secrets.token_hex(2)
    urgent = [
        s["maker"].create("solo", cpu=1, priority=100, namespace=ns, name=f"solo-urgent-{stamp}-{i}") for i in range(2)
    ]
    _, seen = env.wait_leader(other_than=hooked.name, timeout=60)
    take.lease_s = seen - stopped_at
    env.wait_for(
        lambda: all(reservation(env.monitor.current().get(k, {}))[0] for k in urgent),
        "the standby to admit the urgent Workloads into the freed quota",
        60,
    )
    first = env.monitor.first_admission_after(stopped_at)
    take.first_admission_s = None if first is None else first - stopped_at
    proxy = env.proxy_for(hooked.name)
    continued_at = now_s()
    os.kill(pid, signal.SIGCONT)
    # Long enough for the stale batch to go out (it would at once) and the lease to be re-checked.
    time.sleep(max(3.0, env.lease_seconds))
    stale = proxy.count(since=continued_at, method="PATCH", resource="workloads", subresource="status")
    if stale:
        env.extra_violations.append(
            Violation(
                "stale-write",
                env.elapsed(),
                hooked.name,
                f"{stale} Workload status PATCHes sent after SIGCONT, past its lease (the standby held it)",
            )
        )
    take.note = f"{stale} stale Workload writes after SIGCONT"
    hooked.stop()
    return take


class _HealthProbe:
    """Polls an operator's /healthz; the longest time it went unanswered (an event-loop stall)."""

    def __init__(self, op: OperatorProcess) -> None:
        self.op = op
        self.longest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        last_ok = now_s()
        while not self._stop.wait(0.1):
            if self.op.get("/healthz", timeout=0.5)[0] == 200:
                last_ok = now_s()
            else:
                self.longest = max(self.longest, now_s() - last_ok)


def leader_stall(env: ChaosEnv, seconds: float = 6.0) -> Takeover:
    """The leader blocks its event loop for ``seconds`` (> the lease) after deciding admissions and
    before writing them (stall-before-write hook), while higher-priority Workloads arrive for the
    freed quota. It may keep its lease (renewed on a thread of its own) or lose it; either way no
    ClusterQueue may be over-admitted."""
    s = _leader_scenario(env, f"stall-before-write={seconds:g}:1", fault_name="stall-before-write")
    hooked: OperatorProcess = s["hooked"]
    take = Takeover("event-loop stall", hooked.name, env.elapsed())
    with _HealthProbe(hooked) as probe:
        time.sleep(0.5)
        ns = env.topology.namespaces[0]
        stamp = secrets.token_hex(2)
        urgent = [
            s["maker"].create("solo", cpu=1, priority=100, namespace=ns, name=f"solo-urgent-{stamp}-{i}")
            for i in range(2)
        ]
        holders = set()
        deadline = now_s() + seconds + 6
        while now_s() < deadline:
            holder = (env.lease_holder() or "").rpartition("_")[0]
            if holder == "standby" and take.lease_s is None:
                take.lease_s = now_s() - s["freed_at"]
                first = env.monitor.first_admission_after(s["freed_at"] + 0.5)
                take.first_admission_s = None if first is None else first - s["freed_at"]
            holders.add(holder)
            time.sleep(0.2)
    stalled = probe.longest
    hook_seen = "fault injection" in hooked.log()
    if not hook_seen and stalled < seconds / 2:
        raise HookMissing(
            f"the operator has no stall-before-write fault hook: with {FAULTS_ENV}=stall-before-write={seconds:g}:1 "
            f"it logged no 'fault injection' line and /healthz was never unanswered for more than {stalled:.1f}s\n{hooked.tail(30)}"
        )
    env.figures.takeovers.append(take)
    lost = "standby" in holders
    take.note = f"/healthz unanswered up to {stalled:.1f}s; lease {'taken by the standby' if lost else 'kept'}"
    env.figures.notes.append(f"stall {seconds:g}s: {take.note}")
    env.wait_for(lambda: all(k in env.monitor.current() for k in urgent), "the urgent Workloads to be seen", 10)
    hooked.stop()
    return take


def apiserver_outage(
    env: ChaosEnv,
    *,
    down_seconds: float = 20.0,
    delete_fraction: float = 0.4,
    kill: bool = True,
    settle_timeout: float = 60.0,
) -> Outage:
    """Stops the operators' kube-apiserver (SIGKILL, or SIGTERM with ``kill=False``) for
    ``down_seconds`` while the load goes on through the other one and Workloads are deleted
    (admitted ones first, then any); restarts it on the same port, certificates and etcd, stops
    the load and measures the time from its /readyz until I4 holds, and the PATCHes answered 404
    after it (writes to Workloads that no longer exist)."""
    assert len(env.plane.apiservers) > 1, "the outage needs a second kube-apiserver (ControlPlane.add_apiserver)"
    assert env.driver is not None, "start_load() first"
    primary: ApiServer = env.plane.apiservers[0]
    began = now_s()
    env.plane.stop_apiserver(primary, kill=kill)
    down_at = now_s()
    deleted, rounds = 0, 4
    for i in range(rounds):
        current = env.monitor.current()
        admitted = [k for k, o in current.items() if reservation(o)[0]]
        pool = admitted if i == 0 else list(current)
        for key in pool:
            if env.random.random() < delete_fraction / (1 if i == 0 else rounds):
                with contextlib.suppress(ApiError):
                    deleted += env.driver.delete(key, "deleted-during-outage")
        time.sleep(max(0.0, down_at + (i + 1) * down_seconds / rounds - now_s()))
    env.plane.start_apiserver(primary)
    ready_at = now_s()
    env.figures.notes.append(
        f"kube-apiserver {'killed' if kill else 'stopped (SIGTERM, took ' + format(down_at - began, '.1f') + ' s)'}, "
        f"down {ready_at - down_at:.1f} s, {deleted} Workloads deleted meanwhile"
    )
    env.stop_load()
    for proxy in env.proxies.values():
        proxy.clear_faults()
    seconds, problems = wait_settled(env.client, env.topology, settle_timeout)
    ghosts = sum(p.count(since=ready_at, method="PATCH", status=404) for p in env.proxies.values())
    rate = max((p.max_rate(since=ready_at, method="PATCH", status=404) for p in env.proxies.values()), default=0.0)
    outage = Outage(
        ready_at - down_at, deleted, None if seconds is None else (now_s() - ready_at), ghosts, rate, problems
    )
    env.figures.outages.append(outage)
    env.figures.settles.append(("the API-server outage", outage.recovery_s))
    return outage


def _slow_and_limited(proxy: FaultProxy) -> None:
    proxy.set_errors(rate_429=0.1)
    proxy.set_latency(0.3)


def error_injection(env: ChaosEnv, *, phase_seconds: float = 6.0, cuts: int = 2) -> None:
    """429s, 500s (half of them after the write went through), a 409 storm on status PATCHes,
    latency and cut connections, phase after phase, on every operator's proxy."""
    began = now_s()
    phases: list[tuple[str, Callable[[FaultProxy], None]]] = [
        ("429 x 30%", lambda p: p.set_errors(rate_429=0.3)),
        ("500 x 30% (half after the write)", lambda p: p.set_errors(rate_500=0.3, after_forward=0.5)),
        ("409 storm on status PATCHes", lambda p: p.conflict_storm(True)),
        ("latency 300 ms + 429 x 10%", _slow_and_limited),
    ]
    for label, apply in phases:
        for proxy in env.proxies.values():
            proxy.clear_faults()
            apply(proxy)
        env.figures.notes.append(f"fault phase: {label} for {phase_seconds:g}s")
        half = phase_seconds / 2
        time.sleep(half)
        if cuts > 0:
            cuts -= 1
            for proxy in env.proxies.values():
                proxy.cut_connections()
            env.figures.injected["connection cuts"] += 1
        time.sleep(phase_seconds - half)
    for proxy in env.proxies.values():
        proxy.clear_faults()
        for (_m, _r, _s, _st, injected), n in proxy.counts(since=began).items():
            if injected and injected != "upstream-down":
                env.figures.injected[injected] += n


def foreign_and_racing_deletes(env: ChaosEnv, seconds: float = 30.0, *, preemptors_every: float = 2.0) -> int:
    """While the load (with racing deletes) and the foreign writer run: every ``preemptors_every``
    seconds a top-priority Workload arrives in a preempting queue and is deleted a moment later,
    while the operator is evicting its victims or admitting it. Returns how many."""
    assert env.driver is not None
    maker = WorkloadDriver(env.client, env.topology, env.monitor, seed=env.random.randrange(1 << 30))
    preempting = [q.name for q in env.topology.queues.values() if q.driven and (q.preemption or q.config)]
    began, raced = now_s(), 0
    while now_s() - began < seconds:
        time.sleep(preemptors_every)
        key = maker.create(env.random.choice(preempting), cpu=env.random.choice((2, 3)), priority=10_000)
        time.sleep(env.random.uniform(0.05, 0.6))
        with contextlib.suppress(ApiError):
            raced += maker.delete(key, "deleted-preemptor")
    env.figures.driver["deleted-preemptor"] += raced
    return raced
