"""What the operator e2e tests share: their objects on the shared control plane and the reads
they assert on.

- :class:`Scenario`: one test's objects (namespace, uniquely named ClusterQueues, flavor, ...),
  applied with kubectl and deleted afterwards, plus the reads the tests assert on.
- :class:`WorkloadMonitor`: every state the API server stores for a namespace's Workloads, from a
  ``kubectl get --watch``: invariants (quota never exceeded, no double eviction) hold at *every*
  observed state, not only at the end.
- :func:`within_cluster_queue_priority`: the scenario both test_operator.py and test_deploy.py run.

The control plane and the operator process are the harness in :mod:`preemption_operator.testing`.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from builders import KUEUE, Obj, WorkloadBuilder, cluster_queue, for_cluster, workload
from preemption_operator.testing.control_plane import ControlPlane, die_with_parent_hook
from preemption_operator.testing.operator_process import wait_until
from preemption_operator.testing.workload_status import condition, eviction_count, is_true, reservation

TEST_LABEL = "e2e.preemption-operator/test"


def admitted_cpu(obj: dict[str, Any]) -> tuple[str | None, float]:
    """(ClusterQueue, cpu) a Workload holds quota for: (None, 0) without a reservation, or once
    finished (it keeps its admission on record; Kueue's cache no longer counts it)."""
    cluster_queue, milli_cpu = reservation(obj)
    return cluster_queue, milli_cpu / 1000


def describe_conditions(text: str) -> list[dict[str, str]]:
    """The Conditions of `kubectl describe` output, one dict per condition (keys as printed)."""
    out: list[dict[str, str]] = []
    inside = False
    current: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == "Conditions:":
            inside = True
            continue
        if not inside:
            continue
        if not line.startswith("    ") or ":" not in stripped:
            break  # the next field of Status
        key, _, value = stripped.partition(":")
        if key == "Last Transition Time" and current:
            out.append(current)
            current = {}
        current[key] = value.strip()
    if current:
        out.append(current)
    return out


def described(condition: dict[str, str]) -> tuple[str, str, str]:
    """Status, Reason and Message of one condition of `describe_conditions`."""
    return condition["Status"], condition["Reason"], condition["Message"]


def describe_events(text: str) -> list[dict[str, str]]:
    """The Events table of `kubectl describe` output: Type, Reason, Age, From, Message."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith("Events:"))
    except StopIteration:
        return []
    rows = []
    for line in lines[start + 3 :]:
        if not line.startswith("  "):
            break
        parts = re.split(r"\s{2,}", line.strip(), maxsplit=4)
        if len(parts) == 5:
            rows.append(dict(zip(("Type", "Reason", "Age", "From", "Message"), parts, strict=True)))
    return rows


class Scenario:
    """One test's objects. Cluster-scoped names are prefixed with the (unique) namespace and
    labelled, so tests never share a queue; `cleanup` deletes them (the namespace itself only
    goes Terminating: there is no namespace controller)."""

    def __init__(self, cluster: ControlPlane, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.flavor = self.name("flavor")

    def name(self, suffix: str) -> str:
        return f"{self.namespace}-{suffix}"

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        __tracebackhide__ = True
        return self.cluster.kubectl(*args, input=input, check=check)

    def apply(self, *objects: Obj | WorkloadBuilder) -> None:
        """Creates or updates objects (client-side apply of a v1 List, in order); cluster-scoped ones
        are labelled with the test, for `cleanup`."""
        __tracebackhide__ = True
        items = [for_cluster(obj) for obj in objects]
        for obj in items:
            meta = obj.setdefault("metadata", {})
            if "namespace" not in meta and obj["kind"] not in ("Workload", "LocalQueue"):
                meta.setdefault("labels", {})[TEST_LABEL] = self.namespace
        self.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))

    def get(self, resource: str, name: str | None = None, *, namespaced: bool = True) -> dict[str, Any]:
        args = ["get", resource] + ([name] if name else [])
        if namespaced:
            args += ["-n", self.namespace]
        result: dict[str, Any] = json.loads(self.kubectl(*args, "-o", "json").stdout)
        return result

    def workloads(self) -> dict[str, dict[str, Any]]:
        return {wl["metadata"]["name"]: wl for wl in self.get("workloads")["items"]}

    def workload(self, name: str) -> dict[str, Any]:
        return self.get("workloads", name)

    def describe(self, name: str) -> str:
        return self.kubectl("describe", "workload", name, "-n", self.namespace).stdout

    def events_about(self, kind: str, name: str, namespace: str = "default") -> list[dict[str, Any]]:
        """The Events whose involvedObject is this kind and name (a cluster-scoped object's go to
        `default`, as client-go's recorder puts them)."""
        selector = f"--field-selector=involvedObject.kind={kind},involvedObject.name={name}"
        items: list[dict[str, Any]] = json.loads(
            self.kubectl("get", "events", "-n", namespace, "-o", "json", selector).stdout
        )["items"]
        return items

    # -- common building blocks

    def flavor_object(self) -> dict[str, Any]:
        return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": self.flavor}, "spec": {}}

    def queue(self, suffix: str, cpu: str | int, **kwargs: Any) -> tuple[str, str]:
        """A ClusterQueue `<ns>-<suffix>` of `cpu` and a LocalQueue `<suffix>` pointing at it."""
        cq = self.name(suffix)
        self.apply(
            self.flavor_object(),
            cluster_queue(cq, cpu, flavor=self.flavor, **kwargs),
            {
                "apiVersion": KUEUE,
                "kind": "LocalQueue",
                "metadata": {"name": suffix, "namespace": self.namespace},
                "spec": {"clusterQueue": cq},
            },
        )
        return cq, suffix

    def wait_admitted(
        self, *names: str, timeout: float = 30.0, diagnostics: Callable[[], str] | None = None
    ) -> dict[str, dict[str, Any]]:
        def check() -> dict[str, dict[str, Any]]:
            wls = self.workloads()
            missing = [n for n in names if n not in wls or not is_true(wls[n], "Admitted")]
            assert not missing, f"not admitted yet: {missing}; conditions: " + "; ".join(
                f"{n}: {(wls.get(n, {}).get('status') or {}).get('conditions')}" for n in missing
            )
            return wls

        return wait_until(check, timeout=timeout, what=f"{', '.join(names)} admitted", diagnostics=diagnostics)

    def cleanup(self) -> None:
        ns = self.namespace
        # Queued Pods keep the operator's finalizer, and the operator is gone by now.
        listed = self.kubectl("get", "pods", "-n", ns, "-l", "kueue.x-k8s.io/managed=true", "-o", "name", check=False)
        for pod in listed.stdout.split():
            self.kubectl(
                "patch", pod, "-n", ns, "--type=json", "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]',
                check=False,
            )  # fmt: skip
        for kind in ("workloads", "localqueues"):
            self.kubectl("delete", kind, "--all", "-n", ns, "--wait=false", "--ignore-not-found", check=False)
        for kind in (
            "clusterqueues",
            "cohorts",
            "preemptionconfigs",
            "preemptionlimits",
            "resourceflavors",
            "topologies",
            "admissionchecks",
            "nodes",
        ):
            self.kubectl(
                "delete", kind, "-l", f"{TEST_LABEL}={ns}", "--wait=false", "--ignore-not-found", check=False
            )  # fmt: skip
        self.kubectl(
            "delete", "validatingadmissionpolicybindings,validatingadmissionpolicies", "-l", f"{TEST_LABEL}={ns}",
            "--wait=false", "--ignore-not-found", check=False,
        )  # fmt: skip


# ---- every stored state of a namespace's Workloads ---------------------------------------------


@dataclass
class WorkloadMonitor:
    """Follows ``kubectl get workloads --watch`` in a thread and keeps every state it sees.

    ``states`` holds, after each watch event, a copy of all Workloads of the namespace (name ->
    object) as the API server stored them: the watch delivers every write in resourceVersion
    order, so nothing in between is missed, unlike polling."""

    cluster: ControlPlane
    namespace: str
    states: list[dict[str, dict[str, Any]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._current: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> WorkloadMonitor:
        self._proc = subprocess.Popen(
            [
                str(self.cluster.assets / "kubectl"),
                f"--kubeconfig={self.cluster.kubeconfig}",
                "get", "workloads", "-n", self.namespace,
                "--watch", "--output-watch-events", "-o", "json", "--request-timeout=0",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.cluster.env,
            start_new_session=True,
            preexec_fn=die_with_parent_hook(),
        )  # fmt: skip
        self._thread = threading.Thread(target=self._read, name=f"watch-{self.namespace}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)
        if self._thread is not None:
            self._thread.join(5)

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        decoder = json.JSONDecoder()
        buffer = ""
        for chunk in iter(lambda: self._proc.stdout.readline(), ""):  # type: ignore[union-attr]
            buffer += chunk
            while True:
                stripped = buffer.lstrip()
                if not stripped:
                    buffer = ""
                    break
                try:
                    event, end = decoder.raw_decode(stripped)
                except json.JSONDecodeError:
                    buffer = stripped
                    break
                buffer = stripped[end:]
                self._event(event)

    def _event(self, event: dict[str, Any]) -> None:
        obj = event.get("object") or {}
        name = (obj.get("metadata") or {}).get("name")
        if not name:
            self.errors.append(f"unexpected watch event: {event!r:.300}")
            return
        with self._lock:
            if event.get("type") == "DELETED":
                self._current.pop(name, None)
            else:
                self._current[name] = obj
            self.states.append(dict(self._current))

    def snapshot(self) -> list[dict[str, dict[str, Any]]]:
        with self._lock:
            return list(self.states)

    def wait_seen(self, names: Iterable[str], timeout: float = 15.0) -> None:
        """Until the watch has delivered every named Workload (it is listening)."""
        wanted = set(names)

        def seen() -> bool:
            with self._lock:
                return wanted <= set(self._current)

        wait_until(
            seen,
            timeout=timeout,
            what=f"the watch to see {sorted(wanted)}",
        )

    def max_admitted_cpu(self, *cluster_queues: str) -> float:
        """The most cpu the ClusterQueues (together: a cohort) ever had reserved, over every observed state."""
        most = 0.0
        for state in self.snapshot():
            used = sum(cpu for cq, cpu in map(admitted_cpu, state.values()) if cq in cluster_queues)
            most = max(most, used)
        return most

    def max_evictions(self, name: str) -> int:
        return max((eviction_count(s[name]) for s in self.snapshot() if name in s), default=0)

    def ever_true(self, name: str, kind: str) -> bool:
        return any(name in s and is_true(s[name], kind) for s in self.snapshot())


# ---- the scenario both test modules run --------------------------------------------------------


def within_cluster_queue_priority(sc: Scenario, diagnostics: Callable[[], str] | None = None) -> dict[str, Any]:
    """Kueue's within-ClusterQueue priority preemption, end to end, with its outcome asserted.

    ClusterQueue `<ns>-main` (6 cpu, withinClusterQueue LowerPriority) runs `low` (-1), `mid` (0)
    and `high` (1), 2 cpu each; `incoming` (1, 2 cpu) arrives: `low` is preempted and requeued,
    `incoming` is admitted. Returns names and uids for further checks."""
    __tracebackhide__ = True
    ns = sc.namespace
    cq, lq = sc.queue("main", 6, preemption={"withinClusterQueue": "LowerPriority"})
    with WorkloadMonitor(sc.cluster, ns) as monitor:
        # On a live cluster status cannot be created with the object: the running workloads are
        # admitted by the operator first, then the preemptor arrives.
        sc.apply(
            workload("low", namespace=ns, queue=lq, cpu=2, priority=-1),
            workload("mid", namespace=ns, queue=lq, cpu=2, priority=0),
            workload("high", namespace=ns, queue=lq, cpu=2, priority=1),
        )
        monitor.wait_seen(["low", "mid", "high"])  # the watch is live: it misses nothing from here on
        sc.wait_admitted("low", "mid", "high", diagnostics=diagnostics)
        sc.apply(workload("incoming", namespace=ns, queue=lq, cpu=2, priority=1))
        wls = sc.wait_admitted("incoming", diagnostics=diagnostics)
        wait_until(
            lambda: not is_true(sc.workload("low"), "QuotaReserved") and is_true(sc.workload("low"), "Evicted"),
            what="low evicted and requeued",
            diagnostics=diagnostics,
        )
        # The state after the preemption is stored: the pending reason of `low` is rewritten once
        # (PendingEvaluation -> the scheduler's reason); wait for it so callers see a settled cluster.
        wait_until(
            lambda: (condition(sc.workload("low"), "QuotaReserved") or {}).get("reason") != "PendingEvaluation",
            what="low back in the queue",
            diagnostics=diagnostics,
        )
    incoming_uid = wls["incoming"]["metadata"]["uid"]
    low_uid = wls["low"]["metadata"]["uid"]
    message = (
        f"Preempted to accommodate a workload (UID: {incoming_uid}, JobUID: UNKNOWN) due to prioritization "
        f"in the ClusterQueue; preemptor path: /{cq}; preemptee path: /{cq}"
    )

    # The victim's conditions, as `kubectl describe workload` prints them.
    def victim_described() -> list[dict[str, str]]:
        conditions = describe_conditions(sc.describe("low"))
        by_type = {c.get("Type"): c for c in conditions}
        assert "Evicted" in by_type and by_type["Evicted"]["Status"] == "True", conditions
        return conditions

    conditions = {c["Type"]: c for c in wait_until(victim_described, what="describe low", diagnostics=diagnostics)}
    assert described(conditions["Evicted"]) == ("True", "Preempted", message)
    assert described(conditions["Preempted"]) == ("True", "InClusterQueue", message)
    assert conditions["QuotaReserved"]["Status"] == "False"
    assert conditions["Admitted"]["Status"] == "False"
    low = sc.workload("low")
    assert low["status"]["schedulingStats"]["evictions"] == [{"reason": "Preempted", "underlyingCause": "", "count": 1}]
    assert "admission" not in low["status"]

    # Events: Preempted and EvictedDueToPreempted on the victim, PreemptedWorkload on the preemptor.
    def victim_events() -> dict[str, dict[str, str]]:
        events = {e["Reason"]: e for e in describe_events(sc.describe("low"))}
        assert {"Preempted", "EvictedDueToPreempted"} <= set(events), events
        return events

    events = wait_until(victim_events, what="the victim's Events", diagnostics=diagnostics)
    assert events["EvictedDueToPreempted"]["Message"] == message
    assert events["Preempted"]["Message"].startswith(message + "; preemptor effective priority: 1")
    assert events["Preempted"]["From"] == "preemption-operator"

    def preemptor_events() -> dict[str, dict[str, str]]:
        events = {e["Reason"]: e for e in describe_events(sc.describe("incoming"))}
        assert "PreemptedWorkload" in events, events
        return events

    events = wait_until(preemptor_events, what="the preemptor's Events", diagnostics=diagnostics)
    assert events["PreemptedWorkload"]["Message"].startswith(
        f"Preempted workload {ns}/low (UID: {low_uid}) in ClusterQueue {cq}"
    )

    # The end state, and every state on the way there.
    final = sc.workloads()
    assert all(is_true(final[n], "Admitted") for n in ("incoming", "mid", "high")), final
    assert not monitor.errors, monitor.errors
    assert monitor.max_admitted_cpu(cq) <= 6, "the ClusterQueue was over-admitted at some point"
    assert monitor.max_evictions("low") == 1
    for name in ("mid", "high", "incoming"):
        assert not monitor.ever_true(name, "Evicted"), f"{name} was evicted"
    return {"cq": cq, "lq": lq, "incoming_uid": incoming_uid, "low_uid": low_uid, "message": message}
