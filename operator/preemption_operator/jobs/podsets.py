"""Pod templates and what admission puts into them, for every integration: the merge patch that
starts a pod set (Kueue's podset.Merge), the one that puts it back (podset.RestorePodSpec) from
what the Workload kept (podset.FromPodSet), and the pod set's topology request (jobframework's
PodSetTopologyRequest). Patches are JSON merge patches (RFC 7386) of one pod template, so an
integration only says where its templates are."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any

from .framework import PodSetInfo

REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED_TOPOLOGY = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
SLICE_REQUIRED_TOPOLOGY_CONSTRAINTS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"

_INT32 = re.compile(r"[+-]?[0-9]+")


def _int32(text: str) -> int | None:
    """Go's strconv.ParseInt(text, 10, 32), or None."""
    if not text.isascii() or not _INT32.fullmatch(text) or len(text) > 12:
        return None
    value = int(text)
    return value if -(2**31) <= value < 2**31 else None


def _layers(text: str) -> list[dict[str, Any]] | None:
    """The slice layers annotation (a JSON list of {topology, size}, 1 to 3 of them), or None."""
    try:
        layers = json.loads(text)
    except ValueError:
        return None
    if not isinstance(layers, list) or not 1 <= len(layers) <= 3 or not all(isinstance(x, dict) for x in layers):
        return None
    return [{"topology": x.get("topology", ""), "size": x.get("size", 0)} for x in layers]


def topology_request(template: Mapping[str, Any], pod_index_label: str | None) -> dict[str, Any] | None:
    """The pod set's topology request from its template's annotations, as Kueue reads them;
    `pod_index_label` is the pod label that numbers the pods of the set (None: no label does).
    A request of slices only (a slice level with its size, or slice layers) is one too. Values
    Kueue's webhook would refuse (a slice size that is not a number) are left out."""
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    request: dict[str, Any] = {}
    slice_level, slice_size = annotations.get(SLICE_REQUIRED_TOPOLOGY), annotations.get(SLICE_SIZE)
    layers = annotations.get(SLICE_REQUIRED_TOPOLOGY_CONSTRAINTS)
    if annotations.get(REQUIRED_TOPOLOGY):
        request["required"] = annotations[REQUIRED_TOPOLOGY]
    elif annotations.get(PREFERRED_TOPOLOGY):
        request["preferred"] = annotations[PREFERRED_TOPOLOGY]
    elif annotations.get(UNCONSTRAINED_TOPOLOGY) == "true":
        request["unconstrained"] = True
    elif not ((slice_level is not None and slice_size is not None) or layers is not None):
        return None
    if layers is not None:
        if (parsed := _layers(str(layers))) is not None:
            request["podsetSliceRequiredTopologyConstraints"] = parsed
    elif slice_level is not None and (size := _int32(str(slice_size))) is not None:
        request["podSetSliceRequiredTopology"] = slice_level
        request["podSetSliceSize"] = size
    if not request:
        return None
    if pod_index_label is not None:
        request["podIndexLabel"] = pod_index_label
    return request


def topology_annotation_errors(meta_path: str, template: Mapping[str, Any], count: int) -> list[str]:
    """Kueue's webhook errors for a pod template's topology annotations (jobframework's
    ValidateTASPodSetRequest, then ValidateSliceSizeAnnotationUpperBound when it finds none), the
    parts about the annotation count, unconstrained and the slice level and size; `meta_path` is
    the template's metadata (spec.template.metadata), `count` the pod set's pods."""
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    path = f"{meta_path}.annotations"
    errors: list[str] = []
    if sum(key in annotations for key in (REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY, UNCONSTRAINED_TOPOLOGY)) > 1:
        kinds = ", ".join(f'"{key}"' for key in (REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY, UNCONSTRAINED_TOPOLOGY))
        errors.append(f"{path}: Invalid value: must not contain more than one topology annotation: [{kinds}]")
    unconstrained = annotations.get(UNCONSTRAINED_TOPOLOGY)
    if unconstrained is not None and unconstrained not in _GO_BOOLS:
        errors.append(f'{path}[{UNCONSTRAINED_TOPOLOGY}]: Invalid value: "{unconstrained}": must be a boolean value')
    size_path = f"{path}[{SLICE_SIZE}]"
    size = annotations.get(SLICE_SIZE)
    if size is not None:
        number = _int32(str(size))
        if number is None:
            errors.append(f'{size_path}: Invalid value: "{size}": must be a numeric value')
        elif number < 1:
            errors.append(f'{size_path}: Invalid value: "{size}": must be greater than or equal to 1')
    level_given, size_given = SLICE_REQUIRED_TOPOLOGY in annotations, size is not None
    if level_given and not size_given:
        errors.append(f"{size_path}: Required value: must be set when '{SLICE_REQUIRED_TOPOLOGY}' is specified")
    if size_given and not level_given:
        errors.append(f"{size_path}: Forbidden: may not be set when '{SLICE_REQUIRED_TOPOLOGY}' is not specified")
    if errors or size is None:
        return errors
    number = _int32(str(size))
    if number is not None and number > count:
        return [f'{size_path}: Invalid value: "{size}": must not be greater than pod set count {count}']
    return []


_GO_BOOLS = frozenset({"1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"})
"""What Go's strconv.ParseBool reads."""


def from_pod_set(pod_set: Mapping[str, Any]) -> PodSetInfo:
    """A Workload's pod set (wire form) as restoring puts it back (Kueue's podset.FromPodSet)."""
    template = pod_set.get("template") or {}
    meta, pod = template.get("metadata") or {}, template.get("spec") or {}
    return PodSetInfo(
        name=str(pod_set.get("name", "main")),
        count=int(pod_set.get("count", 1)),
        node_selector=dict(pod.get("nodeSelector") or {}),
        tolerations=tuple(pod.get("tolerations") or ()),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        scheduling_gates=tuple(pod.get("schedulingGates") or ()),
        affinity=pod.get("affinity") or None,
    )


def merge(template: Mapping[str, Any], info: PodSetInfo) -> dict[str, Any]:
    """A merge patch adding admission's fields to the template (Kueue's podset.Merge): labels,
    annotations and node selector merged, tolerations and scheduling gates appended, the assigned
    topology domains required as node affinity. A key the template already has with another value
    is a conflict (ValueError)."""
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
        # Terms are alternatives: the template's own and the domains' must both hold, so each of
        # its terms is joined with each domain.
        terms = (
            [_joined(mine, domain) for mine in own for domain in info.node_affinity]
            if own
            else [dict(domain) for domain in info.node_affinity]
        )
        out_spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
        }
    return _patch(out_meta, out_spec)


def restore(template: Mapping[str, Any], original: PodSetInfo, kept_labels: tuple[str, ...] = ()) -> dict[str, Any]:
    """A merge patch setting the template's scheduling fields back to `original`'s, whole (keys
    admission added are removed). `kept_labels` keep their current values: labels the job's own
    controller puts on the template."""
    meta = template.get("metadata") or {}
    pod = template.get("spec") or {}
    current_labels = meta.get("labels") or {}
    labels = {**original.labels, **{k: current_labels[k] for k in kept_labels if k in current_labels}}
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
    return _patch(out_meta, out_spec)


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


def apply(doc: Mapping[str, Any], patch: Any) -> Any:
    """`doc` with the merge patch (RFC 7386) applied: for an integration whose templates sit in a
    list, where the patch must carry the whole element."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = copy.deepcopy(dict(doc)) if isinstance(doc, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = apply(out.get(key) or {}, value) if isinstance(value, Mapping) else copy.deepcopy(value)
    return out


def equivalent(want: list[dict[str, Any]], have: list[dict[str, Any]], admitted: bool) -> bool:
    """Whether a Workload's pod sets (`have`) still describe the job's (`want`), as Kueue compares
    them: the same names, counts and minimum counts, and the same containers and init containers
    (and, before admission, tolerations, which admission adds to)."""
    if len(want) != len(have):
        return False
    fields = ("containers", "initContainers") if admitted else ("containers", "initContainers", "tolerations")
    for mine, theirs in zip(want, have, strict=True):
        if mine.get("name") != theirs.get("name") or mine.get("count") != theirs.get("count"):
            return False
        if mine.get("minCount") != theirs.get("minCount"):
            return False
        a, b = (mine.get("template") or {}).get("spec") or {}, (theirs.get("template") or {}).get("spec") or {}
        if any((a.get(f) or None) != (b.get(f) or None) for f in fields):
            return False
    return True


def _joined(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Two node selector terms that must both hold, as one."""
    out = {key: [*(a.get(key) or []), *(b.get(key) or [])] for key in ("matchExpressions", "matchFields")}
    return {key: value for key, value in out.items() if value}


def _patch(meta: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """A template patch of these metadata and spec changes (empty: nothing to change)."""
    out: dict[str, Any] = {}
    if meta:
        out["metadata"] = meta
    if spec:
        out["spec"] = spec
    return out
