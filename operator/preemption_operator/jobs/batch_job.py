"""batch/v1 Job on the job framework (Kueue's `batch/job`): one pod set, `main`, of
min(parallelism, completions) pods; its webhooks create a queued Job suspended and keep a running
one's queue and, under partial admission, its parallelism (Kueue's
pkg/controller/jobs/job/job_webhook.go, v0.19.2)."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from ..api.kinds import Kind
from . import podsets, webhook
from .framework import Finished, Integration, JobPatch, ObjectJob, PodSetInfo, register, whole

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
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
"""The pod label that numbers a Job's pods: its pod set's index for topology-aware scheduling."""
MIN_PARALLELISM_FIELD = f"metadata.annotations[{MIN_PARALLELISM_ANNOTATION}]"


class BatchJob(ObjectJob):
    kind: ClassVar[Kind] = Kind("Job", "batch", "v1", "jobs", True)

    @property
    def _template(self) -> Mapping[str, Any]:
        return self._spec.get("template") or {}

    def pods_count(self) -> int:
        """Parallelism (1 when unset), no more than the completions asked for, as Kueue counts."""
        count = whole(self._spec.get("parallelism"), 1)
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
        if (request := podsets.topology_request(template, COMPLETION_INDEX)) is not None:
            pod_set["topologyRequest"] = request
        return [pod_set]

    def equivalent(self, pod_sets: list[dict[str, Any]], admitted: bool) -> bool:
        return podsets.equivalent(self.pod_sets(), pod_sets, admitted)

    def priority_class_name(self) -> str:
        return str((self._template.get("spec") or {}).get("priorityClassName") or "")

    def stopping(self) -> bool:
        return (self._meta.get("annotations") or {}).get(STOPPING_ANNOTATION) == "true"

    def is_suspended(self) -> bool:
        return self._spec.get("suspend") is True and not self.stopping()

    def is_active(self) -> bool:
        # Stricter than Kueue (which reads `active` only): pods being deleted may still run
        # until they are gone, and their quota must not be handed out before that.
        return whole(self._status.get("active"), 0) > 0 or whole(self._status.get("terminating"), 0) > 0

    def pods_ready(self) -> bool:
        """Ready and succeeded pods (those the Job controller has not counted yet too) cover its
        pod count, as Kueue's Job.PodsReady counts them."""
        uncounted = (self._status.get("uncountedTerminatedPods") or {}).get("succeeded") or []
        ready = whole(self._status.get("ready"), 0) + whole(self._status.get("succeeded"), 0) + len(uncounted)
        return ready >= self.pods_count()

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
        spec: dict[str, Any] = {"suspend": False, "template": podsets.merge(self._template, info)}
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
        unmark: dict[str, Any] = {"metadata": {"annotations": {STOPPING_ANNOTATION: None}}}
        original = next((info for info in originals if info.name == POD_SET), None)
        if original is not None:
            template = podsets.restore(self._template, original, JOB_MANAGED_LABELS)
            spec: dict[str, Any] = {}
            if template:
                spec["template"] = template
            if self.partial() is not None and whole(self._spec.get("parallelism"), 1) != original.count:
                spec["parallelism"] = original.count
            if spec:
                unmark["spec"] = spec
        patches.append(JobPatch(unmark))
        return patches


def mutate(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A Job being created is suspended when it names a queue: it must not start before admission."""
    return webhook.suspend_at_creation(obj, bool(BatchJob(obj).queue_name()))


def validate(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[str]:
    """Kueue's field errors for a Job being created (`old` None) or updated."""
    job = BatchJob(obj)
    errors = webhook.queue_name_errors(obj)
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(MIN_PARALLELISM_ANNOTATION)
    if raw is not None:
        if not re.fullmatch(r"[+-]?[0-9]+", raw):
            errors.append(webhook.invalid(MIN_PARALLELISM_FIELD, raw, f'strconv.Atoi: parsing "{raw}": invalid syntax'))
        elif not 0 < int(raw) < job.pods_count():
            errors.append(
                webhook.invalid(MIN_PARALLELISM_FIELD, raw, f"should be between 0 and {job.pods_count() - 1}")
            )
    topology = podsets.topology_annotation_errors("spec.template.metadata", job._template, job.pods_count())
    if old is None:
        return errors + topology
    errors += webhook.queue_change_errors(obj, old, job.is_suspended())
    if (
        BatchJob(old).partial() is not None
        and (old.get("spec") or {}).get("suspend") is not True
        and (old.get("spec") or {}).get("parallelism") != (obj.get("spec") or {}).get("parallelism")
    ):
        errors.append(
            "spec.parallelism: Forbidden: cannot change when partial admission is enabled and the job is not suspended"
        )
    return errors + topology


INTEGRATION = register(Integration("batch/job", BatchJob, mutate, validate))
