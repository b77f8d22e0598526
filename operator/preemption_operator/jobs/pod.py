"""Plain Pods and pod groups on the job framework (Kueue's `pod` integration, v0.19.2).

A Pod labelled with a queue is created gated by `kueue.x-k8s.io/admission` and carries the
`kueue.x-k8s.io/managed` label and finalizer. A Pod alone is one job with a Workload of one pod
set; Pods that name the same group (`kueue.x-k8s.io/pod-group-name`, with the group's size in
`kueue.x-k8s.io/pod-group-total-count`) are one job whose Workload, named after the group, is made
once that many runnable Pods exist, with one pod set per pod shape (the role hash). Admission
ungates the Pods with the flavor's node selector; a stop deletes them (whoever made them makes
them again, gated). The finalizer keeps a finished Pod's outcome until its Workload has counted it.

Where we differ from Kueue, on purpose: a preempted Pod's quota comes back only once it is no
longer bound and running (Kueue releases a single Pod's at once), and a Pod being deleted that can
no longer run loses its finalizer at once (Kueue keeps a group's until a replacement exists)."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from ..api.kinds import Kind
from . import podsets, webhook
from .framework import (
    GROUP_WORKLOAD_ANNOTATION,
    QUEUE_LABEL,
    Finished,
    Integration,
    JobPatch,
    PodSetInfo,
    controller_of,
    of_kind,
    owned_workload_name,
    register,
)

GATE = "kueue.x-k8s.io/admission"
MANAGED = "kueue.x-k8s.io/managed"
"""The label (value "true") and the finalizer of the Pods it manages."""
GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
"""A label, or (read first) an annotation: the group the Pod belongs to."""
TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
FAST_ADMISSION = "kueue.x-k8s.io/pod-group-fast-admission"
SERVING = "kueue.x-k8s.io/pod-group-serving"
ROLE_HASH = "kueue.x-k8s.io/role-hash"
RETRIABLE = "kueue.x-k8s.io/retriable-in-group"
SUSPENDING_PARENT = "kueue.x-k8s.io/pod-suspending-parent"
PREBUILT = "kueue.x-k8s.io/prebuilt-workload-name"
POD_INDEX = "kueue.x-k8s.io/pod-group-pod-index"
POD_INDEX_LABEL = "kueue.x-k8s.io/pod-group-pod-index-label"
"""Which of its own labels numbers a Pod in its group (copied into POD_INDEX at creation)."""
MAX_ROLES = 18


def _meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("metadata") or {}


def _labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return _meta(pod).get("labels") or {}


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return _meta(pod).get("annotations") or {}


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("spec") or {}


def _phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def group_name(pod: Mapping[str, Any]) -> str:
    """The group a Pod belongs to ("" for none): the annotation, else the label."""
    return str(_annotations(pod).get(GROUP_NAME) or _labels(pod).get(GROUP_NAME) or "")


def prebuilt_name(pod: Mapping[str, Any]) -> str:
    return str(_annotations(pod).get(PREBUILT) or _labels(pod).get(PREBUILT) or "")


def gated(pod: Mapping[str, Any]) -> bool:
    return any(g.get("name") == GATE for g in _spec(pod).get("schedulingGates") or [])


def terminated(pod: Mapping[str, Any]) -> bool:
    return _phase(pod) in ("Succeeded", "Failed")


def deleting(pod: Mapping[str, Any]) -> bool:
    return bool(_meta(pod).get("deletionTimestamp"))


def runnable(pod: Mapping[str, Any]) -> bool:
    """Kueue's active Pod of a group: not Failed, and not deleted before it was ever bound."""
    return _phase(pod) != "Failed" and not (deleting(pod) and not _spec(pod).get("nodeName"))


def may_run(pod: Mapping[str, Any]) -> bool:
    """Bound and not finished: its containers may run, so its quota is still in use."""
    return bool(_spec(pod).get("nodeName")) and not terminated(pod)


def finalized(pod: Mapping[str, Any]) -> bool:
    return MANAGED not in (_meta(pod).get("finalizers") or [])


def go_json(value: Any) -> str:
    """`value` as Go's encoding/json writes it (compact, HTML characters escaped); dicts keep
    their order, so maps must come sorted and structs in their field order."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escaped)
    return text


def _sorted(value: Any) -> Any:
    return {key: value[key] for key in sorted(value)} if isinstance(value, Mapping) else None


def _containers_shape(containers: Any) -> list[dict[str, Any]] | None:
    if not containers:
        return None
    return [
        {
            "ports": c.get("ports") or None,
            "resources": {"requests": _sorted((c.get("resources") or {}).get("requests"))},
        }
        for c in containers
    ]


def spec_shape(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a pod spec that decide where and with how much a pod can run (requests,
    ports, placement, priority), keys sorted: Kueue's SpecShape."""
    shape: dict[str, Any] = {
        "affinity": spec.get("affinity"),
        "containers": _containers_shape(spec.get("containers")),
        "initContainers": _containers_shape(spec.get("initContainers")),
        "nodeSelector": _sorted(spec.get("nodeSelector")),
        "overhead": _sorted(spec.get("overhead")),
        "priority": spec.get("priority"),
        "resourceClaims": spec.get("resourceClaims"),
        "runtimeClassName": spec.get("runtimeClassName"),
        "tolerations": spec.get("tolerations"),
        "topologySpreadConstraints": spec.get("topologySpreadConstraints"),
    }
    if spec.get("resources") is not None:
        shape["resources"] = _sorted((spec.get("resources") or {}).get("requests"))
    return {key: shape[key] for key in sorted(shape)}


def role_hash(spec: Mapping[str, Any]) -> str:
    """Kueue's role hash of a pod spec: the first 8 hex digits of the SHA-256 of its shape, so
    Pods of one shape share a pod set."""
    return hashlib.sha256(go_json({"spec": spec_shape(spec)}).encode()).hexdigest()[:8]


def shape_errors(new: Mapping[str, Any], old: Mapping[str, Any], path: str) -> list[str]:
    """Kueue's errors for a pod group's template whose shape changed (ValidateImmutablePodGroupPodSpec):
    each changed field by its path, `field is immutable`."""
    return _shape_errors(spec_shape(new), spec_shape(old), path)


def _shape_errors(new: Any, old: Any, path: str) -> list[str]:
    if isinstance(new, Mapping) and isinstance(old, Mapping):
        out: list[str] = []
        for key in sorted(set(new) | set(old)):
            out += _shape_errors(new.get(key), old.get(key), f"{path}.{key}")
        return out
    if isinstance(new, list) and isinstance(old, list) and len(new) == len(old):
        return [e for i, (a, b) in enumerate(zip(new, old, strict=True)) for e in _shape_errors(a, b, f"{path}[{i}]")]
    if new != old:
        return [f"{path}: Invalid value: {go_json(new)}: field is immutable"]
    return []


def role_of(pod: Mapping[str, Any]) -> str:
    """The pod set a Pod of a group belongs to: its role-hash annotation, else its role hash."""
    return str(_annotations(pod).get(ROLE_HASH) or role_hash(_spec(pod)))


def _ready(pod: Mapping[str, Any]) -> bool:
    """The Pod's Ready condition is True."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions if isinstance(c, Mapping))


def total_count(pod: Mapping[str, Any]) -> int:
    """The group's size as the Pod says it; ValueError with Kueue's message when it cannot."""
    value = _annotations(pod).get(TOTAL_COUNT)
    if value is None:
        raise ValueError(f"failed to extract '{TOTAL_COUNT}' annotation")
    try:
        count = int(str(value))
    except ValueError:
        raise ValueError(f'strconv.Atoi: parsing "{value}": invalid syntax') from None
    if count < 1:
        raise ValueError(
            f"incorrect annotation value '{TOTAL_COUNT}={value}': group total count should be greater than zero"
        )
    return count


def _created(pod: Mapping[str, Any]) -> str:
    return str(_meta(pod).get("creationTimestamp") or "")


def _keep_first(pod: Mapping[str, Any]) -> tuple[bool, bool, str, str]:
    """Which runnable Pods a group keeps when it has too many: those with the finalizer, then
    the ungated, then the oldest (Kueue's order)."""
    return (finalized(pod), gated(pod), _created(pod), str(_meta(pod).get("name")))


def _finalizer_removed(pod: Mapping[str, Any]) -> JobPatch:
    left = [f for f in _meta(pod).get("finalizers") or [] if f != MANAGED]
    return JobPatch({"metadata": {"finalizers": left or None}}, name=str(_meta(pod).get("name")))


def _deleted(pod: Mapping[str, Any]) -> JobPatch:
    return JobPatch({}, name=str(_meta(pod).get("name")), delete=True)


class Pods:
    """A job of Pods: one Pod, or the Pods of one group (built by `compose`, in name order)."""

    kind: ClassVar[Kind] = Kind("Pod", "", "v1", "pods", True)

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self.obj = obj
        self.pods: list[Mapping[str, Any]] = [obj]

    @classmethod
    def compose(cls, pods: Sequence[Mapping[str, Any]]) -> Pods:
        job = cls(pods[0])
        job.pods = list(pods)
        return job

    @property
    def group(self) -> str:
        return group_name(self.obj)

    @property
    def serving(self) -> bool:
        return _annotations(self.obj).get(SERVING) == "true"

    def workload_name(self) -> str:
        return prebuilt_name(self.obj) or self.group or owned_workload_name(self.kind, _meta(self.obj))

    def queue_name(self) -> str:
        """A Pod the webhook did not take (no `managed` label) is not ours, whatever its labels."""
        if _labels(self.obj).get(MANAGED) != "true":
            return ""
        return str(_labels(self.obj).get(QUEUE_LABEL) or "")

    def priority_class_name(self) -> str:
        return next((str(p) for pod in self.pods if (p := _spec(pod).get("priorityClassName"))), "")

    # -- the group ---------------------------------------------------------------------------

    def runnable(self) -> list[Mapping[str, Any]]:
        return [pod for pod in self.pods if runnable(pod)]

    def problem(self) -> str | None:
        """Why no Workload can be made for the group yet (Kueue's messages), None if it can."""
        if not self.group:
            return None
        try:
            total = total_count(self.obj)
        except ValueError as exc:
            return str(exc)
        active = self.runnable()
        fast = _annotations(self.obj).get(FAST_ADMISSION) == "true"
        if not fast and len(active) < total:
            return f"'{self.group}' group has fewer runnable pods than expected"
        first = self.obj
        for pod in self.pods:
            if _phase(pod) == "Failed":
                continue
            mine, theirs = _labels(first).get(QUEUE_LABEL, ""), _labels(pod).get(QUEUE_LABEL, "")
            if mine != theirs:
                return f"pods '{_meta(first).get('name')}' and '{_meta(pod).get('name')}' has different queue names: {mine}!={theirs}"
            mine, theirs = _annotations(first).get(TOTAL_COUNT, ""), _annotations(pod).get(TOTAL_COUNT, "")
            if mine != theirs:
                return (
                    f"pods '{_meta(first).get('name')}' and '{_meta(pod).get('name')}' has different "
                    f"'{TOTAL_COUNT}' values: {mine}!={theirs}"
                )
        if len({role_of(pod) for pod in active}) > MAX_ROLES:
            return f"pod group can't include more than {MAX_ROLES} roles"
        return None

    def _wanted(self, workload: Mapping[str, Any] | None) -> dict[str, int]:
        """How many runnable Pods of each role the group needs."""
        if workload is not None:
            return {
                str(ps.get("name")): int(ps.get("count", 1)) for ps in (workload.get("spec") or {}).get("podSets") or []
            }
        try:
            total = total_count(self.obj)
        except ValueError:
            return {}
        if _annotations(self.obj).get(FAST_ADMISSION) == "true":
            return {role_of(self.obj): total}
        return {"": total}  # before a Workload: the group's size, whatever the roles

    def tidy(self, workload: Mapping[str, Any] | None, finished: bool) -> tuple[list[JobPatch], int]:
        """The housekeeping due on the job's Pods, and how many of them are excess: the finalizer
        off Pods whose outcome no longer counts (all of them once the Workload is finished; a Pod
        being deleted that can no longer run; a failed Pod of a group once a replacement runs
        for it), and the youngest excess runnable Pods of a group deleted."""
        patches: list[JobPatch] = []
        done: set[str] = set()
        for pod in self.pods:
            if finalized(pod):
                continue
            if finished or (deleting(pod) and not may_run(pod)):
                patches.append(_finalizer_removed(pod))
                done.add(str(_meta(pod).get("name")))
        if finished or not self.group:
            return patches, 0
        excess = 0
        wanted = self._wanted(workload)
        for role, count in wanted.items():
            members = [pod for pod in self.pods if role in ("", role_of(pod))]
            # A Pod being deleted is on its way out already: it makes no other excess.
            active = sorted((pod for pod in members if runnable(pod) and not deleting(pod)), key=_keep_first)
            for pod in active[count:]:
                excess += 1
                if not deleting(pod):
                    patches.append(_deleted(pod))
                if not finalized(pod) and str(_meta(pod).get("name")) not in done:
                    patches.append(_finalizer_removed(pod))
            failed = [pod for pod in members if not runnable(pod) and not finalized(pod)]
            replaced = min(len(failed), len(failed) + len(active) - count)
            for pod in sorted(failed, key=_created)[: max(0, replaced)]:
                if str(_meta(pod).get("name")) not in done:
                    patches.append(_finalizer_removed(pod))
        return patches, excess

    def owner_references(self) -> list[dict[str, Any]]:
        """A group's Workload is owned by every Pod of it (none of them its controller)."""
        if not self.group:
            return []  # a Pod alone is its Workload's controller
        return [
            {"apiVersion": "v1", "kind": "Pod", "name": _meta(pod).get("name"), "uid": _meta(pod).get("uid")}
            for pod in self.pods
            if runnable(pod) or terminated(pod)
        ]

    def reclaimable(self, workload: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """Succeeded Pods per role, whose quota the group no longer needs (None: not tracked)."""
        if not self.group or self.serving:
            return None
        counts: dict[str, int] = {}
        for pod in self.pods:
            if _phase(pod) == "Succeeded":
                counts[role_of(pod)] = counts.get(role_of(pod), 0) + 1
        names = [str(ps.get("name")) for ps in (workload.get("spec") or {}).get("podSets") or []]
        return [{"name": name, "count": counts[name]} for name in names if counts.get(name)]

    def waiting(self) -> bool:
        """A Pod still waits to be started (gated): a replacement in an admitted group."""
        return any(gated(pod) and not terminated(pod) and not deleting(pod) for pod in self.pods)

    # -- GenericJob ---------------------------------------------------------------------------

    def pod_sets(self) -> list[dict[str, Any]]:
        if not self.group:
            return [_pod_set("main", 1, self.obj)]
        active = self.runnable()
        if _annotations(self.obj).get(FAST_ADMISSION) == "true":
            first = active[0] if active else self.obj
            return [_pod_set(role_of(first), total_count(self.obj), first)]
        roles: dict[str, list[Mapping[str, Any]]] = {}
        for pod in active:
            roles.setdefault(role_of(pod), []).append(pod)
        return [_pod_set(role, len(members), members[0]) for role, members in sorted(roles.items())]

    def equivalent(self, pod_sets: list[dict[str, Any]], admitted: bool) -> bool:
        """A Pod: Kueue's comparison of pod sets. A group: the Workload still has a pod set, in
        order, for each role its runnable Pods have, with room for all of them (replacements and
        finished Pods do not change the Workload)."""
        if not self.group:
            return podsets.equivalent(self.pod_sets(), pod_sets, admitted)
        counts: dict[str, int] = {}
        for pod in self.runnable():
            counts[role_of(pod)] = counts.get(role_of(pod), 0) + 1
        have = {str(ps.get("name")): int(ps.get("count", 1)) for ps in pod_sets}
        if _annotations(self.obj).get(FAST_ADMISSION) == "true":
            return len(pod_sets) == 1 and all(role in have for role in counts)
        return all(have.get(role, -1) >= count for role, count in counts.items())

    def is_suspended(self) -> bool:
        """No Pod of it is running or could run without admission (each is gated, finished or
        being deleted)."""
        return all(gated(pod) or terminated(pod) or deleting(pod) for pod in self.pods)

    def is_active(self) -> bool:
        """A Pod of it is bound and not finished: its quota is still in use (stricter than Kueue,
        which counts Running Pods of groups only)."""
        return any(may_run(pod) for pod in self.pods)

    def pods_ready(self) -> bool:
        """The Pod is Ready; for a group, all of its total count exist and each is Ready (Kueue's
        Pod.PodsReady: a succeeded Pod is no longer Ready, so a group part-way done is not)."""
        if not self.group:
            return _ready(self.obj)
        try:
            total = total_count(self.obj)
        except ValueError:
            return False
        return len(self.pods) >= total and all(_ready(pod) for pod in self.pods)

    def finished(self) -> Finished | None:
        if self.serving:
            return None
        if not self.group:
            pod = self.obj
            if not terminated(pod):
                return None
            message = str((pod.get("status") or {}).get("message") or "")
            return Finished("Succeeded" if _phase(pod) == "Succeeded" else "Failed", message)
        try:
            total = total_count(self.obj)
        except ValueError:
            return None
        succeeded = sum(1 for pod in self.pods if _phase(pod) == "Succeeded")
        active = any(not terminated(pod) for pod in self.pods)
        unretriable = any(_annotations(pod).get(RETRIABLE) == "false" for pod in self.pods)
        if succeeded == total or (not active and unretriable):
            # Kueue reports the group as succeeded either way, with how many did.
            return Finished("Succeeded", f"Pods succeeded: {succeeded}/{total}.")
        return None

    def stopping(self) -> bool:
        return False  # a stop is one delete per Pod: never half-way

    def run(self, infos: list[PodSetInfo]) -> list[JobPatch]:
        """Each gated Pod ungated with its pod set's scheduling fields."""
        by_name = {info.name: info for info in infos}
        if not self.group and len(infos) != 1:
            raise ValueError(f"invalid podset infos: expecting 1 pod set got {len(infos)}")
        patches = []
        for pod in self.pods:
            if not gated(pod) or terminated(pod) or deleting(pod):
                continue
            info = by_name.get("main" if not self.group else role_of(pod))
            if info is None:
                raise ValueError(f"invalid podset infos: podSetInfo with the name '{role_of(pod)}' is not found")
            patch = podsets.merge(pod, info)
            gates = [g for g in _spec(pod).get("schedulingGates") or [] if g.get("name") != GATE]
            patch.setdefault("spec", {})["schedulingGates"] = gates or None
            patches.append(JobPatch(patch, name=str(_meta(pod).get("name"))))
        return patches

    def stop(self, originals: list[PodSetInfo]) -> list[JobPatch]:
        """Every Pod that runs or could run is deleted (Pods cannot be suspended); its creator,
        if any, makes it again, gated."""
        return [_deleted(pod) for pod in self.pods if not deleting(pod) and not (gated(pod) or terminated(pod))]


def _pod_set(name: str, count: int, pod: Mapping[str, Any]) -> dict[str, Any]:
    """A pod set of `count` Pods shaped like `pod`: its spec, without what binding sets."""
    spec = copy.deepcopy(dict(_spec(pod)))
    spec.pop("nodeName", None)
    pod_set: dict[str, Any] = {"name": name, "count": count, "template": {"spec": spec}}
    if (request := podsets.topology_request(pod, POD_INDEX)) is not None:
        pod_set["topologyRequest"] = request
    return pod_set


def claims(workload: Mapping[str, Any]) -> str | None:
    """A group's Workload by its annotation (its owners are its Pods, none the controller);
    a single Pod's by its controller owner."""
    meta = workload.get("metadata") or {}
    if (meta.get("annotations") or {}).get(GROUP_WORKLOAD_ANNOTATION) == "true":
        return str(meta.get("name") or "")
    return INTEGRATION.controlling_job(workload)


# -- webhooks ---------------------------------------------------------------------------------


PARENTS: dict[str, Callable[[Mapping[str, Any]], dict[str, str]]] = {}
"""A suspending parent's framework name -> what its Pods get at creation besides the gate (the
annotations that make a StatefulSet's Pods one group), filled by that parent's module."""


def mutate(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A queued Pod is created managed and gated: the `managed` label, the finalizer (unless a
    parent that suspends it made it: it makes it again), the admission gate, what its parent
    adds, its pod index label and its role hash."""
    meta = _meta(pod)
    if meta.get("deletionTimestamp") or _job_owned(pod):
        return []
    parent = _annotations(pod).get(SUSPENDING_PARENT)
    if parent is None and not _labels(pod).get(QUEUE_LABEL):
        return []
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    ops: list[dict[str, Any]] = []
    if parent is None:
        labels[MANAGED] = "true"
        finalizers = list(meta.get("finalizers") or [])
        if MANAGED not in finalizers:
            ops.append({"op": "add", "path": "/metadata/finalizers", "value": [*finalizers, MANAGED]})
    elif parent in PARENTS:
        annotations.update(PARENTS[parent](pod))
    if not gated(pod):
        gates = [*(_spec(pod).get("schedulingGates") or []), {"name": GATE}]
        ops.append({"op": "add", "path": "/spec/schedulingGates", "value": gates})
    index_label = annotations.get(POD_INDEX_LABEL) or _annotations(pod).get(POD_INDEX_LABEL)
    if index_label and index_label in _labels(pod):
        labels[POD_INDEX] = _labels(pod)[index_label]
    if ROLE_HASH not in _annotations(pod) and ROLE_HASH not in annotations:
        annotations[ROLE_HASH] = role_hash(_spec(pod))
    return ops + webhook.set_metadata(meta, "/metadata", {"labels": labels, "annotations": annotations})


def _job_owned(pod: Mapping[str, Any]) -> bool:
    """Made by a job of an integrated kind (a batch Job's Pod): admitted with that job, never on
    its own (Kueue skips Pods with a managed ancestor)."""
    owner = controller_of(pod)
    if owner is None:
        return False
    integration = of_kind(str(owner.get("apiVersion") or ""), str(owner.get("kind") or ""))
    return integration is not None and integration.reconciled and integration.kind != Pods.kind


def _group_field(pod: Mapping[str, Any]) -> tuple[str, str]:
    """Where the Pod names its group (the annotation when it has one) and the word for it."""
    if GROUP_NAME in _annotations(pod):
        return f"metadata.annotations[{GROUP_NAME}]", "annotation"
    return f"metadata.labels[{GROUP_NAME}]", "label"


def validate(pod: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[str]:
    """Kueue's field errors for a Pod being created (`old` None) or updated."""
    errors = webhook.queue_name_errors(pod)
    managed = _labels(pod).get(MANAGED)
    if managed is not None and managed != "true":
        errors.append(f"metadata.labels[{MANAGED}]: Forbidden: managed label value can only be 'true'")
    group = group_name(pod)
    field, word = _group_field(pod)
    has_total = TOTAL_COUNT in _annotations(pod)
    both = f"both the '{TOTAL_COUNT}' annotation and the '{GROUP_NAME}' {word} should be set"
    if group and not has_total:
        errors.append(f"metadata.annotations[{TOTAL_COUNT}]: Required value: {both}")
    if has_total and not group:
        errors.append(f"{field}: Required value: {both}")
    if group and not webhook.DNS1123_SUBDOMAIN.fullmatch(group):
        errors.append(webhook.invalid(field, group, webhook.SUBDOMAIN_MESSAGE))
    if has_total:
        try:
            total_count(pod)
        except ValueError as exc:
            errors.append(
                webhook.invalid(f"metadata.annotations[{TOTAL_COUNT}]", str(_annotations(pod)[TOTAL_COUNT]), str(exc))
            )
    prebuilt = prebuilt_name(pod)
    if prebuilt and group and prebuilt != group:
        where = "annotations" if PREBUILT in _annotations(pod) else "labels"
        errors.append(
            webhook.invalid(
                f"metadata.{where}[{PREBUILT}]", prebuilt, "prebuilt workload and pod group should be equal"
            )
        )
    if old is not None:
        before = group_name(old)
        if before and before != group:
            errors.append(webhook.invalid(field, group, "field is immutable"))
        if before and _annotations(old).get(RETRIABLE) == "false" and _annotations(pod).get(RETRIABLE) != "false":
            errors.append(
                f"metadata.annotations[{RETRIABLE}]: Forbidden: unretriable pod group can't be converted to retriable"
            )
        errors += webhook.queue_change_errors(pod, old, gated(old) or terminated(old))
    return errors


INTEGRATION = register(
    Integration(
        "pod",
        Pods,
        mutate,
        validate,
        selector=f"{MANAGED}=true",
        verbs=("delete",),
        compose=Pods.compose,
        claims=claims,
        reinvoke=True,
    )
)
