"""The pods started under a Workload that may still run, as the API server shows them.

A job's own status lags its pods: the Job controller creates a pod and writes `status.active` in
a later request, and that write conflicts when the job was suspended in between (an eviction
moments after the start). Seen only through the job, such a job looks stopped while its pod can
still be bound and run, and giving its quota back then over-commits the queue. So the job
controller also asks this index, fed by one watch on the pods the operator started (every pod
of an admitted job carries Kueue's `kueue.x-k8s.io/podset` label and the
`kueue.x-k8s.io/workload` annotation): the quota comes back only once none of them may run.

The index says "none" only as far as its watch has come (a watch cut and resumed delivers a pod
made meanwhile a moment late), so the job controller reads the pods fresh before it acts on that
"none" (`any_may_run`); the index spares it the read while pods are known to run.

A pod may run until it is Succeeded or Failed, or gone; a pod being deleted still runs where
it is bound (its grace period), while an unbound one cannot be bound any more."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..api.kinds import Kind
from ..jobs.pod import Pods, deleting, terminated
from ..jobs.reconciler import POD_SET_LABEL, WORKLOAD_ANNOTATION

POD = Pods.kind
SELECTOR = POD_SET_LABEL
"""Label selector of the watch: the pods the operator started (any value)."""


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def may_run(pod: dict[str, Any]) -> bool:
    """Whether a pod may still run (or runs)."""
    return not terminated(pod) and (not deleting(pod) or bool((pod.get("spec") or {}).get("nodeName")))


class StartedPods:
    """An informer Handler: Workload key (`namespace/name`) -> its pods that may still run.
    `changed(workload_key)` is called whenever a Workload gains its first such pod or loses its
    last one."""

    def __init__(self, changed: Callable[[str], None] = lambda key: None) -> None:
        self.changed = changed
        self.listed = False
        """Whether the first list has come: until then any Workload may have pods not yet seen."""
        self._workload_of: dict[str, str] = {}
        """Pod key -> the Workload key it runs under (only pods that may run)."""
        self._pods: dict[str, set[str]] = {}
        """Workload key -> its pods that may run."""
        self._asked: set[str] = set()
        """Workloads said to have pods before the first list, only because it had not come: told
        as changed when it shows none."""

    def running(self, workload_key: str) -> bool:
        """Whether a pod started under this Workload may still run (True before the first list:
        not seen is not gone)."""
        if not self.listed:
            self._asked.add(workload_key)
            return True
        return bool(self._pods.get(workload_key))

    def replace(self, kind: Kind, items: list[dict[str, Any]], resource_version: str) -> None:
        before = set(self._pods)
        self._workload_of.clear()
        self._pods.clear()
        for pod in items:
            pod_key, key = _target(pod)
            if key is not None:
                self._add(pod_key, key)
        self.listed = True
        asked, self._asked = self._asked, set()
        for key in sorted((before ^ set(self._pods)) | (asked - set(self._pods))):
            self.changed(key)

    def event(self, kind: Kind, event_type: str, obj: dict[str, Any]) -> None:
        pod_key, key = _target(obj)
        if event_type == "DELETED":
            key = None
        touched = {k for k in (self._workload_of.get(pod_key), key) if k is not None}
        before = {k: k in self._pods for k in touched}
        self._remove(pod_key)
        if key is not None:
            self._add(pod_key, key)
        for k in sorted(touched):
            if (k in self._pods) != before[k]:
                self.changed(k)

    def _add(self, pod_key: str, key: str) -> None:
        self._workload_of[pod_key] = key
        self._pods.setdefault(key, set()).add(pod_key)

    def _remove(self, pod_key: str) -> None:
        key = self._workload_of.pop(pod_key, None)
        if key is None:
            return
        pods = self._pods.get(key, set())
        pods.discard(pod_key)
        if not pods:
            self._pods.pop(key, None)


def any_may_run(pods: list[dict[str, Any]], workload_keys: set[str]) -> bool:
    """Whether one of these pods (a fresh list) may run under one of these Workloads."""
    return any(_target(pod)[1] in workload_keys for pod in pods)


def _target(pod: dict[str, Any]) -> tuple[str, str | None]:
    """A pod's key, and the key of the Workload it may run under (None: it may not run, or was
    not started under one)."""
    meta = _meta(pod)
    namespace = str(meta.get("namespace") or "")
    pod_key = f"{namespace}/{meta.get('name') or ''}"
    workload = (meta.get("annotations") or {}).get(WORKLOAD_ANNOTATION)
    if not workload or not may_run(pod):
        return pod_key, None
    return pod_key, f"{namespace}/{workload}"
