"""batch/v1 Job on the job framework: one pod set, `main`, of min(parallelism, completions) pods."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

from ..api.kinds import Kind
from .framework import QUEUE_LABEL, Finished, JobPatch, PodSetInfo, integrate

MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"
"""Partial admission: the fewest pods the Job can run with (Kueue's annotation)."""
STOPPING_ANNOTATION = "kueue.x-k8s.io/stopping"
"""Set while a stop is under way: a Job suspended but not yet restored is not stopped yet."""
POD_SET = "main"
JOB_MANAGED_LABELS = (
    "job-name",
    "controller-uid",
    "batch.kubernetes.io/job-name",
    "batch.kubernetes.io/controller-uid",
)
"""Template labels the job controller owns: restoring keeps their current values."""
NOT_COPIED_LABELS = ("job-name", "controller-uid", "batch.kubernetes.io/controller-uid")
"""Left out of the Workload's copy of the template, as Kueue leaves them out."""


REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED_TOPOLOGY = "kueue.x-k8s.io/podset-unconstrained-topology"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def topology_request(template: Mapping[str, Any]) -> dict[str, Any] | None:
    """The pod set's topology request from its template's annotations, as Kueue reads them."""
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    request: dict[str, Any] = {}
    if annotations.get(REQUIRED_TOPOLOGY):
        request["required"] = annotations[REQUIRED_TOPOLOGY]
    elif annotations.get(PREFERRED_TOPOLOGY):
        request["preferred"] = annotations[PREFERRED_TOPOLOGY]
    elif annotations.get(UNCONSTRAINED_TOPOLOGY) == "true":
        request["unconstrained"] = True
    else:
        return None
    request["podIndexLabel"] = COMPLETION_INDEX
    return request


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


@integrate
class BatchJob:
    kind: ClassVar[Kind] = Kind("Job", "batch", "v1", "jobs", True)

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self.obj = obj

    @property
    def _meta(self) -> Mapping[str, Any]:
        return self.obj.get("metadata") or {}

    @property
    def _spec(self) -> Mapping[str, Any]:
        return self.obj.get("spec") or {}

    @property
    def _status(self) -> Mapping[str, Any]:
        return self.obj.get("status") or {}

    @property
    def _template(self) -> Mapping[str, Any]:
        return self._spec.get("template") or {}

    def queue_name(self) -> str:
        return str((self._meta.get("labels") or {}).get(QUEUE_LABEL) or "")

    def pods_count(self) -> int:
        """Parallelism (1 when unset), no more than the completions asked for, as Kueue counts."""
        count = _int(self._spec.get("parallelism"), 1)
        completions = self._spec.get("completions")
        if isinstance(completions, int) and completions < count:
            count = completions
        return max(0, count)

    def partial(self) -> int | None:
        """The min-parallelism annotation, when it allows partial admission."""
        raw = (self._meta.get("annotations") or {}).get(MIN_PARALLELISM_ANNOTATION)
        try:
            value = int(str(raw))
        except ValueError:
            return None
        return value if value > 0 else None

    def pod_sets(self) -> list[dict[str, Any]]:
        template = copy.deepcopy(dict(self._template))
        labels = (template.get("metadata") or {}).get("labels")
        if isinstance(labels, dict):
            for key in NOT_COPIED_LABELS:
                labels.pop(key, None)
        pod_set: dict[str, Any] = {"name": POD_SET, "template": template, "count": self.pods_count()}
        if (least := self.partial()) is not None:
            pod_set["minCount"] = least
        if (request := topology_request(template)) is not None:
            pod_set["topologyRequest"] = request
        return [pod_set]

    def equivalent(self, pod_sets: list[dict[str, Any]], admitted: bool) -> bool:
        if len(pod_sets) != 1 or pod_sets[0].get("name") != POD_SET:
            return False
        (have,) = pod_sets
        if have.get("count") != self.pods_count() or have.get("minCount") != self.partial():
            return False
        mine, theirs = self._template.get("spec") or {}, (have.get("template") or {}).get("spec") or {}
        fields = ("containers", "initContainers") if admitted else ("containers", "initContainers", "tolerations")
        return all((mine.get(f) or None) == (theirs.get(f) or None) for f in fields)

    def priority_class_name(self) -> str:
        return str((self._template.get("spec") or {}).get("priorityClassName") or "")

    def stopping(self) -> bool:
        return (self._meta.get("annotations") or {}).get(STOPPING_ANNOTATION) == "true"

    def is_suspended(self) -> bool:
        return self._spec.get("suspend") is True and not self.stopping()

    def is_active(self) -> bool:
        # Stricter than Kueue (which reads `active` only): pods being deleted may still run
        # until they are gone, and their quota must not be handed out before that.
        return _int(self._status.get("active"), 0) > 0 or _int(self._status.get("terminating"), 0) > 0

    def finished(self) -> Finished | None:
        for condition in self._status.get("conditions") or []:
            if condition.get("status") == "True" and condition.get("type") in ("Complete", "Failed"):
                reason = "Succeeded" if condition["type"] == "Complete" else "Failed"
                return Finished(reason, str(condition.get("message") or ""))
        return None

    def run(self, infos: list[PodSetInfo]) -> list[JobPatch]:
        if len(infos) != 1:
            raise ValueError(f"invalid podset infos: expecting 1 podset, got {len(infos)}")
        (info,) = infos
        spec: dict[str, Any] = {"suspend": False, "template": _merged(self._template, info)}
        if self.partial() is not None:
            spec["parallelism"] = info.count
        return [JobPatch({"spec": spec})]

    def stop(self, originals: list[PodSetInfo]) -> list[JobPatch]:
        """Kueue's three steps: suspend (marked as stopping), clear the start time (the template
        of a started Job is immutable), restore the template and end the mark."""
        patches = []
        if self._spec.get("suspend") is not True:
            patches.append(
                JobPatch({"metadata": {"annotations": {STOPPING_ANNOTATION: "true"}}, "spec": {"suspend": True}})
            )
        if self._status.get("startTime"):
            patches.append(JobPatch({"status": {"startTime": None}}, status=True))
        restore: dict[str, Any] = {"metadata": {"annotations": {STOPPING_ANNOTATION: None}}}
        original = next((info for info in originals if info.name == POD_SET), None)
        if original is not None:
            template = _restored(self._template, original)
            spec: dict[str, Any] = {}
            if template:
                spec["template"] = template
            if self.partial() is not None and _int(self._spec.get("parallelism"), 1) != original.count:
                spec["parallelism"] = original.count
            if spec:
                restore["spec"] = spec
        patches.append(JobPatch(restore))
        return patches


def _merged(template: Mapping[str, Any], info: PodSetInfo) -> dict[str, Any]:
    """A merge patch adding admission's fields to the template (Kueue's podset.Merge): labels,
    annotations and node selector merged, tolerations and scheduling gates appended. A key the
    template already has with another value is a conflict."""
    meta = template.get("metadata") or {}
    pod = template.get("spec") or {}
    out_meta: dict[str, Any] = {}
    out_spec: dict[str, Any] = {}
    for holder, name, add, into in (
        (meta, "labels", info.labels, out_meta),
        (meta, "annotations", info.annotations, out_meta),
        (pod, "nodeSelector", info.node_selector, out_spec),
    ):
        have = holder.get(name) or {}
        clashes = sorted(k for k, v in add.items() if k in have and have[k] != v)
        if clashes:
            raise ValueError(f"conflict for {name}: {', '.join(clashes)} already set to other values")
        if any(k not in have for k in add):
            into[name] = dict(add)
    for name, extra in (("tolerations", info.tolerations), ("schedulingGates", info.scheduling_gates)):
        existing = list(pod.get(name) or [])
        new = [dict(x) for x in extra if dict(x) not in existing]
        if new:
            out_spec[name] = existing + new  # a merge patch replaces lists whole
    if info.node_affinity:
        node = (pod.get("affinity") or {}).get("nodeAffinity") or {}
        required = node.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
        own = list(required.get("nodeSelectorTerms") or [])
        # Terms are alternatives: the job's own and the domains' must both hold, so each of its
        # terms is joined with each domain.
        terms = (
            [_joined(mine, domain) for mine in own for domain in info.node_affinity]
            if own
            else [dict(domain) for domain in info.node_affinity]
        )
        out_spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
        }
    out: dict[str, Any] = {}
    if out_meta:
        out["metadata"] = out_meta
    if out_spec:
        out["spec"] = out_spec
    return out


def _joined(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Two node selector terms that must both hold, as one."""
    out = {key: [*(a.get(key) or []), *(b.get(key) or [])] for key in ("matchExpressions", "matchFields")}
    return {key: value for key, value in out.items() if value}


def patch_to(have: Any, want: Any) -> Any:
    """The merge patch (RFC 7386) that turns `have` into `want`."""
    if not isinstance(want, Mapping) or not want:
        return want if want else None
    if not isinstance(have, Mapping):
        return dict(want)
    out: dict[str, Any] = {key: None for key in have if key not in want}
    for key, value in want.items():
        if have.get(key) != value:
            out[key] = patch_to(have.get(key), value) if isinstance(value, Mapping) else value
    return out


def _restored(template: Mapping[str, Any], original: PodSetInfo) -> dict[str, Any]:
    """A merge patch setting the template's scheduling fields back to `original`'s, whole (keys
    admission added are removed); the job controller's own labels keep their current values."""
    meta = template.get("metadata") or {}
    pod = template.get("spec") or {}
    current_labels = meta.get("labels") or {}
    labels = {**original.labels, **{k: current_labels[k] for k in JOB_MANAGED_LABELS if k in current_labels}}
    out_meta: dict[str, Any] = {}
    out_spec: dict[str, Any] = {}
    for holder, name, want, into in (
        (meta, "labels", labels, out_meta),
        (meta, "annotations", original.annotations, out_meta),
        (pod, "nodeSelector", original.node_selector, out_spec),
    ):
        have = holder.get(name) or {}
        if dict(have) != dict(want):
            into[name] = {**{k: None for k in have if k not in want}, **want} if want else None
    for name, want_list in (("tolerations", original.tolerations), ("schedulingGates", original.scheduling_gates)):
        if list(pod.get(name) or []) != [dict(x) for x in want_list]:
            out_spec[name] = [dict(x) for x in want_list] or None
    if (pod.get("affinity") or None) != (original.affinity or None):
        out_spec["affinity"] = patch_to(pod.get("affinity"), original.affinity)
    out: dict[str, Any] = {}
    if out_meta:
        out["metadata"] = out_meta
    if out_spec:
        out["spec"] = out_spec
    return out
