"""What the admission webhooks decide, as pure functions: the AdmissionReview answer built from an
integration's hooks, and the checks every integration makes (Kueue's
pkg/controller/jobframework/validation.go, v0.19.2): a queue name is a DNS subdomain, and a running
job cannot change queue."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from typing import Any

from .framework import QUEUE_LABEL, Integration

DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
QUEUE_FIELD = f"metadata.labels[{QUEUE_LABEL}]"


def invalid(field: str, value: str, detail: str) -> str:
    """A field error as Kubernetes words it (field.Invalid)."""
    return f'{field}: Invalid value: "{value}": {detail}'


def _queue(obj: Mapping[str, Any]) -> str | None:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)


def queue_name_errors(obj: Mapping[str, Any]) -> list[str]:
    """On create and update: the queue name must be a DNS subdomain."""
    queue = _queue(obj)
    if queue is not None and not DNS1123_SUBDOMAIN.fullmatch(queue):
        return [invalid(QUEUE_FIELD, queue, SUBDOMAIN_MESSAGE)]
    return []


def queue_change_errors(obj: Mapping[str, Any], old: Mapping[str, Any], suspended: bool) -> list[str]:
    """On update: a job that is not suspended keeps its queue."""
    if not suspended and _queue(old) != _queue(obj):
        return [invalid(QUEUE_FIELD, _queue(obj) or "", "field is immutable")]
    return []


def suspend_at_creation(obj: Mapping[str, Any], queued: bool) -> list[dict[str, Any]]:
    """The patch that creates a queued job with `spec.suspend: true` (a kind that suspends
    through its spec): it must not start before admission."""
    if not queued or (obj.get("metadata") or {}).get("deletionTimestamp"):
        return []
    if (obj.get("spec") or {}).get("suspend") is True:
        return []
    return [{"op": "add", "path": "/spec/suspend", "value": True}]


def escape(key: str) -> str:
    """A map key as one JSON pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def set_metadata(
    meta: Mapping[str, Any] | None, path: str, want: Mapping[str, Mapping[str, str]]
) -> list[dict[str, Any]]:
    """The JSON patch `add` operations that give the object metadata at `path` (None: absent)
    these labels and annotations (`{"labels": {...}, "annotations": {...}}`); none for what it
    has already."""
    ops: list[dict[str, Any]] = []
    have_meta: Mapping[str, Any] = meta or {}
    for field, values in want.items():
        have = have_meta.get(field)
        missing = {key: value for key, value in values.items() if (have or {}).get(key) != value}
        if not missing:
            continue
        if meta is None and not ops:
            ops.append({"op": "add", "path": path, "value": {}})
        if have is None:
            ops.append({"op": "add", "path": f"{path}/{field}", "value": {}})
        ops += [
            {"op": "add", "path": f"{path}/{field}/{escape(key)}", "value": value} for key, value in missing.items()
        ]
    return ops


def patched(obj: Mapping[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """The object with a mutating webhook's JSON patch applied, as the API server would store it
    (the webhooks here answer with `add` operations only)."""
    out: dict[str, Any] = json.loads(json.dumps(obj))
    for op in ops:
        if op.get("op") != "add":
            raise ValueError(f"unexpected JSON patch operation {op.get('op')!r}")
        *parents, last = [part.replace("~1", "/").replace("~0", "~") for part in str(op["path"]).split("/")[1:]]
        node: Any = out
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        if isinstance(node, list):
            node.insert(len(node) if last == "-" else int(last), op["value"])
        else:
            node[last] = op["value"]
    return out


def aggregate(errors: list[str]) -> str:
    """As Kubernetes joins field errors: one alone, several in brackets."""
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


def review(body: Mapping[str, Any], integration: Integration, mutating: bool) -> dict[str, Any]:
    """The AdmissionReview answer (admission.k8s.io/v1) of one of the integration's webhooks."""
    request = body.get("request") or {}
    uid = request.get("uid", "")
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    obj = request.get("object") or {}
    if mutating:
        if request.get("operation") == "CREATE" or (
            integration.mutate_on_update and request.get("operation") == "UPDATE"
        ):
            patch = integration.mutate(obj)
            if patch:
                response["patchType"] = "JSONPatch"
                response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    elif request.get("operation") in ("CREATE", "UPDATE"):
        old = request.get("oldObject") if request.get("operation") == "UPDATE" else None
        errors = integration.validate(obj, old)
        if errors:
            response["allowed"] = False
            response["status"] = {"code": 422, "reason": "Invalid", "message": aggregate(errors)}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
