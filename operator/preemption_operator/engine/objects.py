"""Kubernetes objects as the engine reads them: which kinds and versions, and parsing into the
API models with errors that name the object and the field."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ..api import core, v1alpha1, v1beta2

KINDS: dict[tuple[str, str], type[Any]] = {
    ("kueue.x-k8s.io", "PreemptionConfig"): v1alpha1.PreemptionConfig,
    ("kueue.x-k8s.io", "ClusterQueue"): v1beta2.ClusterQueue,
    ("kueue.x-k8s.io", "Cohort"): v1beta2.Cohort,
    ("kueue.x-k8s.io", "LocalQueue"): v1beta2.LocalQueue,
    ("kueue.x-k8s.io", "ResourceFlavor"): v1beta2.ResourceFlavor,
    ("kueue.x-k8s.io", "Topology"): v1beta2.Topology,
    ("kueue.x-k8s.io", "WorkloadPriorityClass"): v1beta2.WorkloadPriorityClass,
    ("kueue.x-k8s.io", "Workload"): v1beta2.Workload,
    ("", "Namespace"): core.Namespace,
    ("scheduling.k8s.io", "PriorityClass"): core.PriorityClass,
    ("", "Node"): core.Node,
}

SUPPORTED_VERSIONS = {"kueue.x-k8s.io": {"v1beta2", "v1alpha1"}, "": {"v1"}, "scheduling.k8s.io": {"v1"}}


class ObjectError(ValueError):
    """An object that cannot be used, with a message naming the object and field."""


def object_ref(body: dict[str, Any]) -> str:
    meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    name = meta.get("name", "<unnamed>") if meta else "<unnamed>"
    namespace = meta.get("namespace") if meta else None
    kind = body.get("kind", "<no kind>")
    return f"{kind} {namespace + '/' if namespace else ''}{name}"


def parse_object(body: dict[str, Any]) -> Any:
    """Validates a Kubernetes object against the models; raises ObjectError naming the field."""
    if not isinstance(body, dict):
        raise ObjectError(f"expected a Kubernetes object (a mapping), got {type(body).__name__}")
    api_version = body.get("apiVersion")
    kind = body.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        raise ObjectError(f"{object_ref(body)}: apiVersion and kind are required")
    group, _, version = api_version.rpartition("/")
    model = KINDS.get((group, kind))
    if model is None:
        raise ObjectError(f"{object_ref(body)}: unsupported kind {kind} in {api_version}")
    if version not in SUPPORTED_VERSIONS.get(group, set()):
        raise ObjectError(f"{object_ref(body)}: unsupported version {api_version} (supported: {_supported(group)})")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        problems = "; ".join(f"{field_path(err['loc'])}: {err['msg']}" for err in exc.errors())
        raise ObjectError(f"{object_ref(body)}: {problems}") from None


def field_path(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as Kubernetes writes field paths: spec.podSets[0].count."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "<root>"


def is_read(body: dict[str, Any]) -> bool:
    """Whether the engine reads objects of this kind (in any version of its group)."""
    api_version = body.get("apiVersion")
    group = api_version.rpartition("/")[0] if isinstance(api_version, str) else ""
    return (group, body.get("kind")) in KINDS


def _supported(group: str) -> str:
    return ", ".join(f"{group + '/' if group else ''}{v}" for v in sorted(SUPPORTED_VERSIONS.get(group, ())))
