"""The invariant monitor: follows every stored state of the run's Workloads, pods, nodes and Jobs
and checks I1, I2, I3, I5 and I6 as they happen (the package's docstring states them)."""

from __future__ import annotations

import bisect
import contextlib
import http.client
import re
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ...api.meta import format_time
from ..workload_status import eviction_count, is_true, millis, reservation
from .api import (
    CQ_POD_LABEL,
    JOB_NAME_LABEL,
    JOBS_PATH,
    JOBSET_NAME_LABEL,
    JOBSETS_PATH,
    KUEUE_PATH,
    QUEUE_LABEL,
    WORKLOAD_ANNOTATION,
    ApiError,
    ApiUnavailable,
    KubeClient,
    now_s,
    touches,
)
from .topology import Topology, pod_cpu, workload_owner

_PREEMPTOR_UID = re.compile(r"\(UID: ([^,)\s]+)")


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


def _preemptor_uid(obj: dict[str, Any]) -> str | None:
    """The UID a Preempted condition's message names ("Preempted to accommodate a workload (UID:
    <uid>, JobUID: ...) ...", Kueue's format)."""
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Preempted" and condition.get("status") == "True":
            found = _PREEMPTOR_UID.search(str(condition.get("message") or ""))
            return found.group(1) if found else None
    return None


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
    preempted_for: str | None = None
    """The UID of the workload it was preempted for, while it is marked Evicted."""

    @property
    def leaving(self) -> bool:
        """Holds quota while its eviction is under way: the quota is on its way back."""
        return self.holds_quota and self.evicted

    @classmethod
    def of(cls, obj: dict[str, Any], at: float) -> _Tracked:
        meta = obj["metadata"]
        cq, usage = reservation(obj)
        evicted = is_true(obj, "Evicted")
        return cls(
            uid=meta.get("uid", ""),
            rv=int(meta.get("resourceVersion") or 0),
            obj=obj,
            cq=cq,
            usage=usage,
            holds_quota=cq is not None,
            evicted=evicted,
            evictions=eviction_count(obj),
            changed_at=at,
            preempted_for=_preemptor_uid(obj) if evicted else None,
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
        self._victims: dict[str, set[str]] = {}
        """Preemptor UID -> the keys of its victims still leaving (an index into `_wls`)."""
        self._usage: Counter[str] = Counter()
        """ClusterQueue -> milli-cpu reserved, by every Workload holding quota."""
        self._staying: Counter[str] = Counter()
        """The same, less the Workloads whose eviction is under way (I1's measure)."""
        self._gone_leaving: set[str] = set()
        """Workloads deleted while their eviction was under way: their pods are still leaving."""
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

    def _leaving_pod(self, key: str) -> bool:
        """A pod of a Workload whose eviction is under way (its `kueue.x-k8s.io/workload`
        annotation's): it stops, and I5 leaves it out as I1 leaves out that Workload."""
        meta = (self._live_pods.get(key) or {}).get("metadata") or {}
        name = (meta.get("annotations") or {}).get(WORKLOAD_ANNOTATION)
        if not name:
            return False
        workload = f"{meta.get('namespace')}/{name}"
        held = self._wls.get(workload)
        return held.leaving if held is not None else workload in self._gone_leaving

    def pods(self) -> dict[str, dict[str, Any]]:
        """The run's pods as last seen (key -> pod)."""
        with self._lock:
            return dict(self._live_pods)

    def _check_pods(self, cluster_queues: set[str], when: str) -> None:
        """I5 for the given ClusterQueues and their cohorts; one violation per episode."""
        usage: Counter[str] = Counter()
        for key, (cq, cpu) in self._pods.items():
            if not self._leaving_pod(key):
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
            self._victims = {}
            for key, t in seen.items():
                self._index(key, None, t)
            self._usage, self._staying = Counter(), Counter()
            for t in seen.values():
                self._hold(t, 1)
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
                self._hold(old, -1)
                touched.add(old.cq)
            if kind == "DELETED":
                self._wls.pop(key, None)
                self._index(key, old, None)
                if old is not None and old.leaving:
                    self._gone_leaving.add(key)
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
                self._index(key, old, new)
                if new.cq:
                    self._hold(new, 1)
                    touched.add(new.cq)
            if touched:
                when = f"after {kind} {key} (resourceVersion {meta.get('resourceVersion')})"
                self._check_quota(touched, when)
                if kind != "DELETED" and new.cq and (old is None or not old.holds_quota or old.uid != new.uid):
                    self._check_taker(key, new, when)
                if old is not None and old.leaving and kind != "DELETED" and not new.leaving:
                    self._check_pods(touched, when)  # its pods count again

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

    def _hold(self, t: _Tracked, sign: int) -> None:
        if t.cq:
            self._usage[t.cq] += sign * t.usage
            if not t.leaving:
                self._staying[t.cq] += sign * t.usage

    def _index(self, key: str, old: _Tracked | None, new: _Tracked | None) -> None:
        """Keeps `_victims` in step with `_wls[key]` going from `old` to `new`."""
        if old is not None and old.leaving and old.preempted_for:
            victims = self._victims.get(old.preempted_for)
            if victims is not None:
                victims.discard(key)
                if not victims:
                    del self._victims[old.preempted_for]
        if new is not None and new.leaving and new.preempted_for:
            self._victims.setdefault(new.preempted_for, set()).add(key)

    def _check_taker(self, key: str, new: _Tracked, when: str) -> None:
        """I1 for a Workload that takes quota: not marked Evicted (what I1 leaves out must be on
        its way out), and, while a workload preempted for it still holds quota, within the bounds
        counting every reservation: a preemptor never goes ahead of its victims."""
        if new.evicted:
            self._violate("I1", key, f"took quota in {new.cq} while marked Evicted, {when}", (key.split("/")[1],))
        victims = sorted(self._victims.get(new.uid, ()))
        if not victims:
            return
        for subject, (used, bound, _) in self._bounds({new.cq or ""}, self._usage).items():
            if used > bound:
                self._violate(
                    "I1",
                    subject,
                    f"{key} took quota while its victims {victims} still hold theirs: {used / 1000:g} cpu "
                    f"reserved > {bound / 1000:g} allowed, {when}",
                    (key.split("/")[1], *(v.split("/")[1] for v in victims)),
                )

    def _check_quota(self, cluster_queues: set[str], when: str) -> None:
        """I1 for the given ClusterQueues and their cohorts; one violation per episode."""
        for subject, (used, bound, members) in self._bounds(cluster_queues, self._staying).items():
            if used > bound:
                if subject not in self._over:
                    self._over.add(subject)
                    holders = sorted(
                        f"{k}={t.usage // 1000 if t.usage % 1000 == 0 else t.usage / 1000}cpu@rv{t.rv}"
                        + (" (leaving)" if t.leaving else "")
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
                        f"over-admitted: {used / 1000:g} cpu reserved by Workloads not being evicted > "
                        f"{bound / 1000:g} allowed, {when}; "
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

    def check_foreign(self, successes: Iterable[tuple[str, int, int, int]]) -> list[Violation]:
        """I3: no state observed after a successful foreign write shows an older value.
        `successes`: the ForeignWriter's writes that succeeded, as (Workload key, channel,
        counter, resource version of the answer)."""
        found: list[Violation] = []
        by_key: dict[str, list[tuple[int, int, int]]] = {}
        for key, channel, counter, rv in successes:
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
