"""What the admission webhooks decide for jobs, as pure functions: a queued Job is created
suspended (it must not start before admission), and a running Job cannot change queue or, under
partial admission, parallelism. Kueue's rules and messages (pkg/controller/jobs/job/job_webhook.go,
pkg/controller/jobframework/validation.go, v0.19.2)."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from typing import Any

from .batch_job import MIN_PARALLELISM_ANNOTATION, BatchJob
from .framework import QUEUE_LABEL

DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
QUEUE_FIELD = f"metadata.labels[{QUEUE_LABEL}]"
MIN_PARALLELISM_FIELD = f"metadata.annotations[{MIN_PARALLELISM_ANNOTATION}]"


def _invalid(field: str, value: str, detail: str) -> str:
    return f'{field}: Invalid value: "{value}": {detail}'


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def mutate_job(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """JSON patch operations for a Job being created: suspended when it names a queue."""
    if not BatchJob(obj).queue_name() or (obj.get("metadata") or {}).get("deletionTimestamp"):
        return []
    if (obj.get("spec") or {}).get("suspend") is True:
        return []
    return [{"op": "add", "path": "/spec/suspend", "value": True}]


def validate_job(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[str]:
    """Kueue's field errors for a Job being created (`old` None) or updated."""
    job = BatchJob(obj)
    errors = []
    queue = _labels(obj).get(QUEUE_LABEL)
    if queue is not None and not DNS1123_SUBDOMAIN.fullmatch(queue):
        errors.append(_invalid(QUEUE_FIELD, queue, SUBDOMAIN_MESSAGE))
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(MIN_PARALLELISM_ANNOTATION)
    if raw is not None:
        if not re.fullmatch(r"[+-]?[0-9]+", raw):
            errors.append(_invalid(MIN_PARALLELISM_FIELD, raw, f'strconv.Atoi: parsing "{raw}": invalid syntax'))
        elif not 0 < int(raw) < job.pods_count():
            errors.append(_invalid(MIN_PARALLELISM_FIELD, raw, f"should be between 0 and {job.pods_count() - 1}"))
    if old is None:
        return errors
    was = BatchJob(old)
    if not job.is_suspended() and _labels(old).get(QUEUE_LABEL) != queue:
        errors.append(_invalid(QUEUE_FIELD, queue or "", "field is immutable"))
    if (
        was.partial() is not None
        and (old.get("spec") or {}).get("suspend") is not True
        and (old.get("spec") or {}).get("parallelism") != (obj.get("spec") or {}).get("parallelism")
    ):
        errors.append(
            "spec.parallelism: Forbidden: cannot change when partial admission is enabled and the job is not suspended"
        )
    return errors


def aggregate(errors: list[str]) -> str:
    """As Kubernetes joins field errors: one alone, several in brackets."""
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


def review(body: Mapping[str, Any], mutating: bool) -> dict[str, Any]:
    """The AdmissionReview answer (admission.k8s.io/v1) for one request."""
    request = body.get("request") or {}
    uid = request.get("uid", "")
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    obj = request.get("object") or {}
    if mutating:
        if request.get("operation") == "CREATE":
            patch = mutate_job(obj)
            if patch:
                response["patchType"] = "JSONPatch"
                response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    elif request.get("operation") in ("CREATE", "UPDATE"):
        old = request.get("oldObject") if request.get("operation") == "UPDATE" else None
        errors = validate_job(obj, old)
        if errors:
            response["allowed"] = False
            response["status"] = {"code": 422, "reason": "Invalid", "message": aggregate(errors)}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
