"""The next step for one job and its Workload: pure data in, one step out (Kueue's job
reconciler, one step at a time). The job controller carries the step out and asks again when
the job or the Workload changes, so every step is decided from what the API shows."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from ..engine import admission_checks
from ..engine import workload_status as wl_status
from ..engine.pods_ready import PODS_READY, WAIT_FOR_RECOVERY, WAIT_FOR_START
from ..engine.topology_assignment import decode_assignment
from . import podsets
from .framework import (
    GROUP_WORKLOAD_ANNOTATION,
    JOB_UID_LABEL,
    PRIORITY_CLASS_LABEL,
    ComposableJob,
    Finished,
    GenericJob,
    JobPatch,
    PodSetInfo,
)

WORKLOAD_API_VERSION = "kueue.x-k8s.io/v1beta2"
POD_SET_LABEL = "kueue.x-k8s.io/podset"
LOCAL_QUEUE_LABEL = "kueue.x-k8s.io/local-queue-name"
CLUSTER_QUEUE_LABEL = "kueue.x-k8s.io/cluster-queue-name"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class Flavor:
    """What admission to a ResourceFlavor puts into pods."""

    node_labels: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class JobEvent:
    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class CreateWorkload:
    body: dict[str, Any]
    event: JobEvent


@dataclass(frozen=True)
class UpdateWorkload:
    """The job's pod sets changed while it waited: its Workload follows (or, for a job of
    several objects, new members become its owners too)."""

    spec: dict[str, Any] | None
    event: JobEvent
    owners: list[dict[str, Any]] | None = None
    """The Workload's whole list of owner references (None: unchanged)."""


@dataclass(frozen=True)
class Wait:
    """Nothing to do for the job yet, and its owner should know why: no Workload can be made
    for it, or its Workload waits for its AdmissionChecks."""

    event: JobEvent


@dataclass(frozen=True)
class DeleteWorkload:
    """The Workload no longer describes its job, which cannot take a changed one."""

    event: JobEvent


@dataclass(frozen=True)
class PatchJob:
    patches: tuple[JobPatch, ...]
    event: JobEvent | None
    also: JobEvent | None = None
    """A second Event: why an evicted job stops, under the eviction's own reason (`Preempted`)."""


@dataclass(frozen=True)
class WriteWorkloadStatus:
    compute: Callable[[dict[str, Any]], dict[str, Any] | None]
    why: str
    event: JobEvent | None = None


class ComposeError(Exception):
    """The job's Workload cannot be built yet (a priority class it names does not exist)."""


Step = CreateWorkload | UpdateWorkload | DeleteWorkload | PatchJob | WriteWorkloadStatus | Wait


@dataclass(frozen=True)
class Settings:
    label_keys_to_copy: tuple[str, ...] = ()
    """Job labels copied to its Workload (Kueue's labelKeysToCopy): what PreemptionConfig
    selectors may match on."""
    wait_for_pods_ready: bool = False
    """Kueue's waitForPodsReady is on: the Workload's PodsReady condition follows the job's pods."""


# Kueue's PodsReady condition (jobframework's generatePodsReadyCondition): the reasons the
# engine's timeouts do not read, and the messages.
STARTED = "Started"
RECOVERED = "Recovered"
NOT_READY_MESSAGE = "Not all pods are ready or succeeded"
RECOVERY_MESSAGE = "At least one pod has failed, waiting for recovery"
READY_MESSAGE = "All pods reached readiness and the workload is running"


def pods_ready_condition(job: GenericJob, status: Mapping[str, Any]) -> tuple[str, str, str]:
    """(status, reason, message) of the PodsReady condition the Workload should have: False
    until it is admitted and all its pods are ready, True once they are, False waiting for
    recovery when a pod of a started workload is no longer ready."""
    if not _condition(status, "Admitted"):
        return "False", WAIT_FOR_START, NOT_READY_MESSAGE
    current = wl_status.get_condition(dict(status), PODS_READY)
    reason = (current or {}).get("reason")
    if job.pods_ready():
        return "True", RECOVERED if reason in (WAIT_FOR_RECOVERY, RECOVERED) else STARTED, READY_MESSAGE
    if current is not None and (current.get("status") == "True" or reason == WAIT_FOR_RECOVERY):
        return "False", WAIT_FOR_RECOVERY, RECOVERY_MESSAGE
    return "False", WAIT_FOR_START, NOT_READY_MESSAGE


def _pods_ready(
    value: str, reason: str, message: str, now: datetime
) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    """The PodsReady condition set, unless the Workload has it already (same status and reason)."""

    def compute(current: dict[str, Any]) -> dict[str, Any] | None:
        status = dict(current.get("status") or {})
        existing = wl_status.get_condition(status, PODS_READY) or {}
        if (existing.get("status"), existing.get("reason")) == (value, reason):
            return None
        generation = (current.get("metadata") or {}).get("generation")
        out = wl_status.own_copy(status)
        wl_status.set_condition(
            out, PODS_READY, value, reason, message, now, generation if isinstance(generation, int) else None
        )
        return out

    return compute


def _condition(status: Mapping[str, Any], kind: str) -> bool:
    found = wl_status.get_condition(dict(status), kind)
    return found is not None and found.get("status") == "True"


MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"


def maximum_execution_time(labels: Mapping[str, str]) -> int | None:
    """Kueue's max-exec-time-seconds label: a positive 32-bit count of seconds, else none."""
    text = labels.get(MAX_EXEC_TIME_LABEL, "")
    if not re.fullmatch(r"[+-]?[0-9]+", text):  # what Go's ParseInt reads
        return None
    value = int(text)
    return value if 0 < value < 2**31 else None


def _labels(job: GenericJob) -> Mapping[str, str]:
    return (job.obj.get("metadata") or {}).get("labels") or {}


def _set_limit(spec: dict[str, Any], job_labels: Mapping[str, str]) -> None:
    """spec.maximumExecutionTimeSeconds as the job's label says, or none."""
    spec.pop("maximumExecutionTimeSeconds", None)
    if (limit := maximum_execution_time(job_labels)) is not None:
        spec["maximumExecutionTimeSeconds"] = limit


def new_workload(job: GenericJob, settings: Settings, priority: Callable[[str, str], int | None]) -> dict[str, Any]:
    """The Workload for a job: the name its integration gives it, the object that stands for the
    job as controller owner, the job's pod sets and priority. `priority(kind, name)` gives a
    priority class's value (None: unknown yet)."""
    meta = job.obj.get("metadata") or {}
    kind = job.kind
    name, uid = str(meta.get("name", "")), str(meta.get("uid", ""))
    job_labels: Mapping[str, str] = meta.get("labels") or {}
    labels = {key: job_labels[key] for key in settings.label_keys_to_copy if key in job_labels}
    owners: list[dict[str, Any]] = [
        {
            "apiVersion": kind.api_version,
            "kind": kind.name,
            "name": name,
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    annotations: dict[str, str] = {}
    group = job.owner_references() if isinstance(job, ComposableJob) else []
    if group:
        # A group's Workload belongs to all its members, none of them its controller.
        owners, annotations = group, {GROUP_WORKLOAD_ANNOTATION: "true"}
    else:
        labels[JOB_UID_LABEL] = uid
    spec: dict[str, Any] = {"podSets": job.pod_sets(), "queueName": job.queue_name()}
    _set_limit(spec, job_labels)
    workload_class = job_labels.get(PRIORITY_CLASS_LABEL)
    ref: dict[str, str] | None = None
    if workload_class:
        ref = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": workload_class}
    elif pod_class := job.priority_class_name():
        ref = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": pod_class}
    if ref is not None:
        value = priority(ref["kind"], ref["name"])
        if value is None:
            raise ComposeError(f"{ref['kind']} {ref['name']!r} not found")
        spec["priorityClassRef"] = ref
        spec["priority"] = value
    metadata: dict[str, Any] = {
        "name": job.workload_name(),
        "namespace": meta.get("namespace"),
        "labels": labels,
        "ownerReferences": owners,
    }
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": WORKLOAD_API_VERSION, "kind": "Workload", "metadata": metadata, "spec": spec}


def admitted_infos(workload: Mapping[str, Any], flavors: Mapping[str, Flavor]) -> list[PodSetInfo] | None:
    """Per admitted pod set: its count, the node labels and tolerations of the flavors it was
    given, and Kueue's pod labels naming pod set and queues (podset.FromAssignment). None while a
    flavor is unknown to the cache."""
    admission = (workload.get("status") or {}).get("admission") or {}
    cluster_queue = str(admission.get("clusterQueue") or "")
    queue = str((workload.get("spec") or {}).get("queueName") or "")
    name = str((workload.get("metadata") or {}).get("name") or "")
    counts = {ps.get("name"): ps.get("count", 1) for ps in (workload.get("spec") or {}).get("podSets") or []}
    infos = []
    for psa in admission.get("podSetAssignments") or []:
        selector: dict[str, str] = {}
        tolerations: list[Mapping[str, Any]] = []
        for flavor_name in sorted(set((psa.get("flavors") or {}).values())):
            flavor = flavors.get(flavor_name)
            if flavor is None:
                return None
            selector.update(flavor.node_labels)
            tolerations.extend(t for t in flavor.tolerations if t not in tolerations)
        count = psa.get("count")
        affinity: tuple[Mapping[str, Any], ...] = ()
        if psa.get("topologyAssignment"):
            domains = [values for values, _ in decode_assignment(psa["topologyAssignment"])]
            if len(domains) == 1:
                selector.update(domains[0])
            else:
                affinity = tuple(
                    {"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in d.items()]}
                    for d in domains
                )
        labels = {POD_SET_LABEL: str(psa.get("name")), LOCAL_QUEUE_LABEL: queue}
        if DNS_LABEL.fullmatch(cluster_queue):
            labels[CLUSTER_QUEUE_LABEL] = cluster_queue
        infos.append(
            PodSetInfo(
                name=str(psa.get("name")),
                count=count if isinstance(count, int) else int(counts.get(psa.get("name"), 1)),
                node_selector=selector,
                tolerations=tuple(tolerations),
                labels=labels,
                annotations={WORKLOAD_ANNOTATION: name},
                node_affinity=affinity,
            )
        )
    updates = admission_checks.pod_set_updates(workload)
    return [_updated(info, updates) for info in infos] if updates else infos


UPDATED_ADMISSION_CHECK = "UpdatedAdmissionCheck"


def _pending_checks(status: Mapping[str, Any]) -> str:
    """`name: message` of each Pending check that says something, joined by "; "."""
    return "; ".join(
        f"{check.get('name')}: {check['message']}"
        for check in status.get("admissionChecks") or []
        if isinstance(check, dict) and check.get("state") == "Pending" and check.get("message")
    )


FAILED_TO_START = "FailedToStart"
"""The Finished reason of a workload whose job cannot start as admitted (Kueue's
FailedToStartFinishedReason): its checks' podSetUpdates conflict."""


class PodSetUpdateConflict(ValueError):
    """Checks' podSetUpdates that change what admission (or another check) already set: the job
    cannot start as admitted (Kueue's ErrInvalidPodSetUpdate, a permanent error)."""


def _added(check: str, field_name: str, have: Mapping[str, str], update: Mapping[str, Any]) -> dict[str, str]:
    add = update.get(field_name) or {}
    for key in sorted(add):
        if key in have and have[key] != add[key]:
            raise PodSetUpdateConflict(
                f'in admission check "{check}": invalid admission check PodSetUpdate: conflict for '
                f"{field_name}: conflict for key={key}, value1={have[key]}, value2={add[key]}"
            )
    return {**have, **add}


def _updated(info: PodSetInfo, updates: list[tuple[str, Mapping[str, Any]]]) -> PodSetInfo:
    """The pod set's info with its checks' podSetUpdates added, each check's first update for it
    (Kueue's getPodSetsInfoFromStatus and PodSetInfo.Merge): additions only."""
    seen: set[str] = set()
    for check, update in updates:
        if update.get("name") != info.name or check in seen:
            continue
        seen.add(check)
        tolerations = list(info.tolerations)
        tolerations += [t for t in update.get("tolerations") or [] if t not in tolerations]
        info = replace(
            info,
            annotations=_added(check, "annotations", info.annotations, update),
            labels=_added(check, "labels", info.labels, update),
            node_selector=_added(check, "nodeSelector", info.node_selector, update),
            tolerations=tuple(tolerations),
        )
    return info


def original_infos(workload: Mapping[str, Any]) -> list[PodSetInfo]:
    """The pod sets as the job had them before it ran: the Workload keeps the originals."""
    return [podsets.from_pod_set(ps) for ps in (workload.get("spec") or {}).get("podSets") or []]


def _equivalent(job: GenericJob, workload: Mapping[str, Any], reserved: bool) -> bool:
    """Kueue's EquivalentToWorkload: a reserved Workload is compared with its admitted counts
    (partial admission changed the job's), and a suspended job may also match the spec's."""
    spec = workload.get("spec") or {}
    if spec.get("maximumExecutionTimeSeconds") != maximum_execution_time(_labels(job)):
        return False  # the label changed: the Workload is updated or made again, as in Kueue
    pod_sets = [dict(ps) for ps in spec.get("podSets") or []]
    if not reserved:
        return job.equivalent(pod_sets, admitted=False)
    assigned = {
        psa.get("name"): psa.get("count")
        for psa in ((workload.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []
    }
    merged = [{**ps, "count": assigned.get(ps.get("name")) or ps.get("count")} for ps in pod_sets]
    return job.equivalent(merged, admitted=True) or (job.is_suspended() and job.equivalent(pod_sets, admitted=True))


def released(now: datetime) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    """The Workload's quota given back once its job has stopped after an eviction."""

    def compute(current: dict[str, Any]) -> dict[str, Any] | None:
        status = current.get("status") or {}
        if not _condition(status, "Evicted") or not _condition(status, "QuotaReserved"):
            return None
        generation = (current.get("metadata") or {}).get("generation")
        return wl_status.completed(status, now, generation if isinstance(generation, int) else None)

    return compute


def finished(done: Finished, now: datetime) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    def compute(current: dict[str, Any]) -> dict[str, Any] | None:
        status = dict(current.get("status") or {})
        if _condition(status, "Finished"):
            return None
        generation = (current.get("metadata") or {}).get("generation")
        out = dict(status)
        out["conditions"] = [dict(c) for c in status.get("conditions") or []]
        wl_status.set_condition(
            out,
            "Finished",
            "True",
            done.reason,
            done.message,
            now,
            generation if isinstance(generation, int) else None,
        )
        return out

    return compute


def _excess_deleted(excess: int) -> JobEvent | None:
    return JobEvent("Normal", "ExcessPodDeleted", "Excess pod deleted") if excess else None


def _reclaimable(pods: list[dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    """The Workload's count of finished pods per pod set, whose quota it no longer needs."""

    def compute(current: dict[str, Any]) -> dict[str, Any] | None:
        status = dict(current.get("status") or {})
        if list(status.get("reclaimablePods") or []) == pods:
            return None
        status["reclaimablePods"] = pods or None
        return {key: value for key, value in status.items() if value is not None}

    return compute


def _ref(workload: Mapping[str, Any]) -> str:
    meta = workload.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def plan(
    job: GenericJob,
    workload: Mapping[str, Any] | None,
    flavors: Mapping[str, Flavor],
    now: datetime,
    settings: Settings | None = None,
    priority: Callable[[str, str], int | None] = lambda kind, name: None,
    children_active: bool = False,
    pods_running: bool = False,
) -> Step | None:
    """The one step due for `job` and its Workload, in the order Kueue's job reconciler takes
    them (None: nothing to do until something changes). `children_active`: a child the job's own
    controller made for it (Integration.children) may still have pods. `pods_running`: a pod
    started under the Workload may still run, whatever the job's status says yet (its
    controller's count lags its pods). Raises ComposeError when the Workload cannot be built yet."""
    settings = settings or Settings()
    active = job.is_active() or children_active or pods_running
    if not job.queue_name():
        return None
    done = job.finished()
    composable = job if isinstance(job, ComposableJob) else None
    if workload is None:
        if composable is not None:
            patches, excess = composable.tidy(None, finished=done is not None)
            if patches:
                return PatchJob(tuple(patches), _excess_deleted(excess))
        if done is not None:
            return None
        if composable is not None and (problem := composable.problem()) is not None:
            return Wait(JobEvent("Warning", "ErrWorkloadCompose", problem))
        if not job.is_suspended():
            message = "Missing Workload; unable to restore pod templates"
            return PatchJob(tuple(job.stop([])), JobEvent("Normal", "Stopped", message))
        if active:
            return None  # suspended, its pods not gone yet
        body = new_workload(job, settings, priority)
        meta = body["metadata"]
        return CreateWorkload(
            body, JobEvent("Normal", "CreatedWorkload", f"Created Workload: {meta['namespace']}/{meta['name']}")
        )
    status = workload.get("status") or {}
    if _condition(status, "Finished"):
        if composable is not None and (patches := composable.tidy(workload, finished=True)[0]):
            return PatchJob(tuple(patches), None)  # its members' outcomes are recorded: let them go
        return None
    if composable is not None:
        patches, excess = composable.tidy(workload, finished=False)
        if patches:
            return PatchJob(tuple(patches), _excess_deleted(excess))
        owners = list((workload.get("metadata") or {}).get("ownerReferences") or [])
        known = {ref.get("uid") for ref in owners}
        added = [ref for ref in composable.owner_references() if ref.get("uid") not in known]
        if added:
            message = f"Added {len(added)} owner reference(s)"
            return UpdateWorkload(None, JobEvent("Normal", "OwnerReferencesAdded", message), owners=owners + added)
    if done is not None:
        event = JobEvent("Normal", "FinishedWorkload", f"Workload '{_ref(workload)}' is declared finished")
        return WriteWorkloadStatus(finished(done, now), "finished", event)
    reserved = _condition(status, "QuotaReserved")
    originals = original_infos(workload)
    if not _equivalent(job, workload, reserved):
        if not job.is_suspended():
            message = "No matching Workload; restoring pod templates according to existent Workload"
            return PatchJob(tuple(job.stop(originals)), JobEvent("Normal", "Stopped", message))
        if not reserved and composable is None:  # a group's Workload is made again, never changed
            spec = {**dict(workload.get("spec") or {}), "podSets": job.pod_sets(), "queueName": job.queue_name()}
            _set_limit(spec, _labels(job))
            message = f"Updated not matching Workload for suspended job: {_ref(workload)}"
            return UpdateWorkload(spec, JobEvent("Normal", "UpdatedWorkload", message))
        return DeleteWorkload(JobEvent("Normal", "DeletedWorkload", f"Deleted not matching Workload: {_ref(workload)}"))
    if _condition(status, "Evicted"):
        if not job.is_suspended():
            evicted = wl_status.get_condition(dict(status), "Evicted") or {}
            # Told once: when this step is what suspends the job (not when resuming a stop).
            if job.stopping():
                return PatchJob(tuple(job.stop(originals)), None)
            message = str(evicted.get("message") or "")
            reason = str(evicted.get("reason") or "Evicted")
            preempted = wl_status.get_condition(dict(status), "Preempted") or {}
            why = str(preempted.get("message") or message) if reason == "Preempted" else message
            return PatchJob(
                tuple(job.stop(originals)),
                JobEvent("Normal", "Stopped", message),
                JobEvent("Normal", reason, why),
            )
        if reserved and not active:
            return WriteWorkloadStatus(released(now), "released")
        return None
    reclaimable = composable.reclaimable(workload) if composable is not None else None
    if reclaimable is not None and reclaimable != list(status.get("reclaimablePods") or []):
        return WriteWorkloadStatus(_reclaimable(reclaimable), "reclaimable pods")
    if settings.wait_for_pods_ready:
        value, reason, message = pods_ready_condition(job, status)
        existing = wl_status.get_condition(dict(status), PODS_READY) or {}
        if (existing.get("status"), existing.get("reason")) != (value, reason):
            return WriteWorkloadStatus(_pods_ready(value, reason, message, now), "pods ready")
    admitted = reserved and _condition(status, "Admitted")
    if job.is_suspended() or (admitted and composable is not None and composable.waiting()):
        if admitted:
            try:
                infos = admitted_infos(workload, flavors)
            except PodSetUpdateConflict as exc:
                # Permanent: retrying cannot help, so the workload ends (Kueue's FailedToStart).
                event = JobEvent("Warning", FAILED_TO_START, str(exc))
                return WriteWorkloadStatus(finished(Finished(FAILED_TO_START, str(exc)), now), "failed to start", event)
            if infos is None:
                return None  # a flavor not seen yet: asked again when it comes
            cluster_queue = (status.get("admission") or {}).get("clusterQueue", "")
            return PatchJob(
                tuple(job.run(infos)), JobEvent("Normal", "Started", f"Admitted by clusterQueue {cluster_queue}")
            )
        if reserved:
            told = _pending_checks(status)
            if told:
                # Kueue's recordAdmissionCheckUpdate: what the checks it waits for say.
                return Wait(JobEvent("Normal", UPDATED_ADMISSION_CHECK, told))
        if not reserved and job.queue_name() != (workload.get("spec") or {}).get("queueName"):
            spec = {**dict(workload.get("spec") or {}), "queueName": job.queue_name()}
            return UpdateWorkload(
                spec, JobEvent("Normal", "UpdatedWorkload", f"Updated queue of Workload: {_ref(workload)}")
            )
        return None
    if not admitted:
        return PatchJob(tuple(job.stop(originals)), JobEvent("Normal", "Stopped", "Not admitted by cluster queue"))
    return None
