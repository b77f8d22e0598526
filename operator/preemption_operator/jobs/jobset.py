"""JobSet on the job framework (Kueue's `jobset.x-k8s.io/jobset`, JobSet API v1alpha2): one pod
set per replicated job, named after it in lower case, of replicas x min(parallelism, completions)
pods; started and stopped through `spec.suspend` (the JobSet controller suspends or deletes its
child Jobs); finished when its `Completed` or `Failed` condition is true. The webhooks create a
queued JobSet suspended and keep a running one's queue (Kueue's pkg/controller/jobs/jobset,
v0.19.2)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

from ..api.kinds import Kind
from . import podsets, webhook
from .batch_job import BatchJob
from .framework import (
    Children,
    Finished,
    Integration,
    JobPatch,
    ObjectJob,
    PodSetInfo,
    register,
    whole,
)

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
"""The pod label that numbers the pods of one child Job: a pod set's index for topology."""
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
"""The pod label that numbers the child Jobs of one replicated job: the topology subgroup."""


def _replicated_jobs(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [rj for rj in (obj.get("spec") or {}).get("replicatedJobs") or [] if isinstance(rj, Mapping)]


def _job_spec(rj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (rj.get("template") or {}).get("spec") or {}


def _pod_template(rj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _job_spec(rj).get("template") or {}


def pods_per_replica(rj: Mapping[str, Any]) -> int:
    """One child Job's pods: parallelism (1 when unset), no more than its completions."""
    spec = _job_spec(rj)
    count = whole(spec.get("parallelism"), 1)
    return max(0, min(count, whole(spec.get("completions"), count)))


def replicas(rj: Mapping[str, Any]) -> int:
    return max(0, whole(rj.get("replicas"), 1))


class JobSet(ObjectJob):
    kind: ClassVar[Kind] = Kind("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets", True)

    def pod_sets(self) -> list[dict[str, Any]]:
        out = []
        for rj in _replicated_jobs(self.obj):
            template = copy.deepcopy(dict(_pod_template(rj)))
            pod_set: dict[str, Any] = {
                "name": str(rj.get("name") or "").lower(),
                "template": template,
                "count": replicas(rj) * pods_per_replica(rj),
            }
            if (request := podsets.topology_request(template, COMPLETION_INDEX)) is not None:
                request["subGroupIndexLabel"] = JOB_INDEX
                request["subGroupCount"] = replicas(rj)
                pod_set["topologyRequest"] = request
            out.append(pod_set)
        return out

    def equivalent(self, pod_sets: list[dict[str, Any]], admitted: bool) -> bool:
        return podsets.equivalent(self.pod_sets(), pod_sets, admitted)

    def priority_class_name(self) -> str:
        """The first replicated job's pod template that names a PriorityClass, as Kueue reads it."""
        for rj in _replicated_jobs(self.obj):
            if name := (_pod_template(rj).get("spec") or {}).get("priorityClassName"):
                return str(name)
        return ""

    def stopping(self) -> bool:
        return False  # suspending and restoring the templates is one write

    def is_suspended(self) -> bool:
        return self._spec.get("suspend") is True

    def is_active(self) -> bool:
        """A child Job still has pods running (the JobSet's status counts Jobs, as Kueue reads it;
        the child Jobs themselves, Integration.children, also tell of pods still terminating)."""
        return any(whole(s.get("active"), 0) > 0 for s in self._status.get("replicatedJobsStatus") or [])

    def pods_ready(self) -> bool:
        """Every replica of every replicated job is ready or succeeded, as the JobSet's status
        counts them (Kueue's JobSet.PodsReady)."""
        wanted = sum(replicas(rj) for rj in _replicated_jobs(self.obj))
        statuses = self._status.get("replicatedJobsStatus") or []
        ready = sum(whole(s.get("ready"), 0) + whole(s.get("succeeded"), 0) for s in statuses)
        return wanted == ready

    def finished(self) -> Finished | None:
        for condition in self._status.get("conditions") or []:
            if condition.get("status") == "True" and condition.get("type") in ("Completed", "Failed"):
                reason = "Succeeded" if condition["type"] == "Completed" else "Failed"
                return Finished(reason, str(condition.get("message") or ""))
        return None

    def run(self, infos: list[PodSetInfo]) -> list[JobPatch]:
        jobs = _replicated_jobs(self.obj)
        if len(infos) != len(jobs):
            raise ValueError(f"invalid podset infos: expecting {len(jobs)} podset, got {len(infos)}")
        started = [
            _with_template(rj, podsets.apply(_pod_template(rj), podsets.merge(_pod_template(rj), info)))
            for rj, info in zip(jobs, infos, strict=True)
        ]
        return [JobPatch({"spec": {"suspend": False, "replicatedJobs": started}})]

    def stop(self, originals: list[PodSetInfo]) -> list[JobPatch]:
        """Suspended with every template put back as the Workload kept it (when the pod sets
        still match the replicated jobs one for one, as Kueue requires), in one write."""
        spec: dict[str, Any] = {"suspend": True}
        jobs = _replicated_jobs(self.obj)
        if originals and len(originals) == len(jobs):
            restored = [
                _with_template(rj, podsets.apply(_pod_template(rj), podsets.restore(_pod_template(rj), original)))
                for rj, original in zip(jobs, originals, strict=True)
            ]
            if restored != jobs:
                spec["replicatedJobs"] = restored
        return [JobPatch({"spec": spec})]


def _with_template(rj: Mapping[str, Any], template: Mapping[str, Any]) -> dict[str, Any]:
    """The replicated job with this pod template (a merge patch replaces the list whole, so each
    element is sent in full)."""
    out = copy.deepcopy(dict(rj))
    out.setdefault("template", {}).setdefault("spec", {})["template"] = dict(template)
    return out


def mutate(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A JobSet being created is suspended when it names a queue."""
    return webhook.suspend_at_creation(obj, bool(JobSet(obj).queue_name()))


def validate(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[str]:
    """Kueue's field errors for a JobSet being created (`old` None) or updated."""
    errors = webhook.queue_name_errors(obj)
    if old is not None:
        errors += webhook.queue_change_errors(obj, old, JobSet(obj).is_suspended())
    for i, pod_set in enumerate(JobSet(obj).pod_sets()):
        meta_path = f"spec.replicatedJobs[{i}].template.spec.template.metadata"
        errors += podsets.topology_annotation_errors(meta_path, pod_set["template"], pod_set["count"])
    return errors


def _child_active(job: Mapping[str, Any]) -> bool:
    """Its pods may still run, or it may yet make some: the JobSet controller suspends its Jobs
    one write after the JobSet, and until then a Job whose status counts no pod may make one."""
    child = BatchJob(job)
    return child.is_active() or ((job.get("spec") or {}).get("suspend") is not True and child.finished() is None)


def _child_finished(job: Mapping[str, Any]) -> bool:
    return BatchJob(job).finished() is not None


INTEGRATION = register(
    Integration(
        "jobset.x-k8s.io/jobset",
        JobSet,
        mutate,
        validate,
        children=Children(BatchJob.kind, _child_active, _child_finished),
    )
)
