"""The load: the WorkloadDriver creates, finishes and deletes Workloads, Jobs, Pods, pod groups and
JobSets as their users and kubelets would; the ForeignWriter writes to them as other
controllers do."""

from __future__ import annotations

import copy
import itertools
import random
import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from ...api.meta import format_time
from ..workload_status import condition, is_true, reservation
from .api import (
    GROUP_LABEL,
    JOBS_PATH,
    JOBSETS_PATH,
    TOUCH_CONDITION,
    TOUCH_KEY,
    ApiError,
    ApiUnavailable,
    KubeClient,
    now_s,
    workload_path,
)
from .monitor import InvariantMonitor
from .topology import PRIORITIES, Topology, job_owner, new_job, new_jobset, new_pod, new_workload, workload_owner


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
