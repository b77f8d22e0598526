"""Reading Kubernetes YAML from files and folders, with errors that name the file and object."""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..api import kinds, validation
from ..api.objects import ObjectError, is_read, object_ref, parse_object
from ..api.v1alpha1 import PreemptionConfig, PreemptionLimit
from ..api.v1beta2 import ClusterQueue, Workload

if TYPE_CHECKING:
    from ..jobs.framework import Integration

NAMESPACED = ("Workload", "LocalQueue")
"""Kueue's kinds that live in a namespace (an integrated kind says so itself)."""
ARRIVING = ("pending.yaml", "pending.yml")
"""Files whose objects `simulate` adds once the rest has settled."""


class ManifestError(ValueError):
    """Input that cannot be read; the message names the file and, where known, the object and field."""


@dataclass(frozen=True)
class Manifest:
    source: str
    body: dict[str, Any]


def _files(paths: Iterable[str | Path]) -> Iterator[Path]:
    for raw in paths:
        if str(raw) == STDIN:
            yield Path(STDIN)
            continue
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
            yield from found
        elif path.is_file():
            yield path
        else:
            raise ManifestError(f"{path}: no such file or directory")


STDIN = "-"
"""A path that means standard input (`kubectl get ... -o yaml | preemption-operator simulate -`)."""


def read(paths: Iterable[str | Path]) -> list[Manifest]:
    manifests = []
    for path in _files(paths):
        try:
            text = sys.stdin.read() if str(path) == STDIN else path.read_text()
            documents = list(yaml.safe_load_all(text))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise ManifestError(f"{path}:{where}: invalid YAML: {problem}") from None
        except OSError as exc:
            raise ManifestError(f"{path}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise ManifestError(f"{path}: not UTF-8 text (byte {exc.start + 1})") from None
        except ValueError as exc:
            # PyYAML builds integers with int(), which Python refuses past 4300 digits.
            problem = "a number has more than 4300 digits" if "digits" in str(exc) else str(exc)
            raise ManifestError(f"{path}: invalid YAML: {problem}") from None
        except RecursionError:
            raise ManifestError(f"{path}: invalid YAML: nested too deeply") from None
        for index, doc in enumerate(documents):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                raise ManifestError(f"{path}: document {index + 1} is not a Kubernetes object")
            items = doc.get("items") if doc.get("kind") == "List" else [doc]
            if items is not None and not isinstance(items, list):
                raise ManifestError(f"{path}: document {index + 1}: items of a List must be a list")
            for position, item in enumerate(items or []):
                if not isinstance(item, dict):
                    raise ManifestError(f"{path}: document {index + 1}: items[{position}] is not a Kubernetes object")
                manifests.append(Manifest(str(path), item))
    return manifests


def _class_values(manifests: list[Manifest]) -> dict[tuple[str, str], int]:
    values = {}
    for manifest in manifests:
        body = manifest.body
        name = (body.get("metadata") or {}).get("name") if isinstance(body.get("metadata"), dict) else None
        if body.get("kind") in ("WorkloadPriorityClass", "PriorityClass") and isinstance(body.get("value"), int):
            values[(str(body["kind"]), str(name))] = int(body["value"])
    return values


def _with_uid(body: dict[str, Any]) -> dict[str, Any]:
    """Without a UID, an object's namespace/name stands in, as elsewhere in `simulate`."""
    meta = body["metadata"]
    return {**body, "metadata": {**meta, "uid": meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"}}


def _as_created(integration: Integration, body: dict[str, Any]) -> dict[str, Any]:
    """A job object as the operator reads it. One without a UID was never created: it is read as
    the integration's mutating webhook would let it in (a queued Pod only becomes the operator's
    with the `managed` label the webhook adds); a live object's own fields stand."""
    if body["metadata"].get("uid"):
        return body
    from ..jobs.webhook import patched

    return _with_uid(patched(body, integration.mutate(body)))


def _jobs(manifests: list[Manifest]) -> dict[int, tuple[Integration, list[int]]]:
    """Queued objects of integrated kinds, grouped as the operator groups them into jobs (those
    naming the same Workload): position of each job's first object -> its integration and the
    positions of all its objects."""
    from ..jobs.framework import of_kind

    jobs: dict[tuple[str, str, str], tuple[Integration, list[int]]] = {}
    for index, manifest in enumerate(manifests):
        body = manifest.body
        integration = of_kind(str(body.get("apiVersion")), str(body.get("kind")))
        if integration is None or integration.job is None or not isinstance(body.get("metadata"), dict):
            continue
        view = integration.job(_as_created(integration, body))
        if view.queue_name():
            key = (integration.framework, str(body["metadata"].get("namespace") or ""), view.workload_name())
            jobs.setdefault(key, (integration, []))[1].append(index)
    return {members[0]: (integration, members) for integration, members in jobs.values()}


def _job_workload(
    integration: Integration,
    members: list[Manifest],
    classes: dict[tuple[str, str], int],
    label_keys_to_copy: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The Workload the operator would make for a queued job of these objects (with the operator's
    --label-keys-to-copy)."""
    from ..jobs.reconciler import ComposeError, Settings, new_workload

    body = members[0].body
    try:
        job = integration.load([_as_created(integration, member.body) for member in members])
        workload = new_workload(
            job, Settings(label_keys_to_copy=label_keys_to_copy), lambda kind, name: classes.get((kind, name))
        )
    except (ComposeError, ValueError, TypeError, AttributeError) as exc:
        raise ManifestError(f"{members[0].source}: {object_ref(body)}: {exc}") from None
    if body["metadata"].get("creationTimestamp"):
        workload["metadata"]["creationTimestamp"] = body["metadata"]["creationTimestamp"]
    return workload


def _unusable(obj: Any, fair_sharing: bool | None = None) -> str | None:
    """What the operator would hold against a valid object and `simulate` refuses outright: a
    Workload without a queue (Kueue ignores it), a selector that does not build (the operator
    marks the ClusterQueue inactive, or the PreemptionConfig Valid=False), and with `fair_sharing`
    False a DRS quota value (Valid=False, FairSharingRequired). None: not judged (lint's own finding)."""
    from ..engine.configurable import usability
    from ..engine.limits import build_limit
    from ..engine.selectors import NOTHING, SelectorError, build

    if isinstance(obj, Workload) and not obj.spec.queue_name:
        return "spec.queueName: required: a Workload without a queue is never scheduled"
    if isinstance(obj, ClusterQueue):
        try:
            build(obj.spec.namespace_selector, nil=NOTHING)
        except SelectorError as exc:
            return f"spec.namespaceSelector: {exc}"
    if isinstance(obj, PreemptionConfig):
        errors = usability(obj, fair_sharing).problems
        if errors:
            return "; ".join(errors)
    if isinstance(obj, PreemptionLimit):
        try:
            build_limit(obj)
        except ValueError as exc:
            return str(exc)
    return None


def _refused(body: dict[str, Any]) -> None:
    """Raises ObjectError when the API server would refuse the object: its CRD's schema and CEL
    rules (api/validation.py), in the API server's words, except what the models refuse too,
    which they say in theirs (the limit in words, never a regular expression)."""
    problems = validation.validate(body)
    if not problems:
        return
    if not all(problem.rule for problem in problems):
        parse_object(body)  # raises ObjectError with the models' words when they refuse it too
    raise ObjectError(f"{object_ref(body)}: {'; '.join(str(problem) for problem in problems)}")


def parse(
    manifests: Iterable[Manifest],
    skipped: list[str] | None = None,
    beside: Iterable[Manifest] = (),
    *,
    lenient: bool = False,
    fair_sharing: bool | None = None,
    label_keys_to_copy: tuple[str, ...] = (),
) -> list[Any]:
    """The objects the engine reads. A queued job (batch/v1 Job with a queue-name label; a job
    of several objects, all of them) stands for the Workload the operator makes for it; objects of other kinds (a Deployment) are left
    out, each noted in `skipped` when given; a kind the engine reads that does not validate is
    an error (with `lenient`, for a live cluster's objects, a note in `skipped`). Priority
    classes named by jobs are looked up in `beside` too. `fair_sharing`: whether the engine will run
    with it (False refuses DRS quota values; None leaves them to the caller); `label_keys_to_copy`:
    the job labels their Workloads get (the operator's --label-keys-to-copy)."""
    manifests = list(manifests)
    classes = _class_values([*manifests, *beside])
    jobs = _jobs(manifests)
    in_jobs = {index for _, members in jobs.values() for index in members}
    objects = []
    for index, manifest in enumerate(manifests):
        if index in in_jobs:
            if index not in jobs:
                continue  # its job's Workload stands where the job's first object is
            integration, members = jobs[index]
            workload = _job_workload(integration, [manifests[i] for i in members], classes, label_keys_to_copy)
            try:
                _refused(workload)
                objects.append(parse_object(workload))
            except ObjectError as exc:
                raise ManifestError(f"{manifest.source}: {object_ref(manifest.body)}: its Workload: {exc}") from None
            continue
        if not is_read(manifest.body):
            if skipped is not None:
                skipped.append(
                    f"{manifest.source}: {object_ref(manifest.body)} ({manifest.body.get('apiVersion')}) is not read; skipped"
                )
            continue
        try:
            _refused(manifest.body)
            obj = parse_object(manifest.body)
            problem = _unusable(obj, fair_sharing)
            if problem is not None:
                raise ObjectError(f"{object_ref(manifest.body)}: {problem}")
        except ObjectError as exc:
            if not lenient:
                raise ManifestError(f"{manifest.source}: {exc}") from None
            # A live cluster's objects: left out with a word, as the operator leaves them out.
            if skipped is not None:
                skipped.append(f"{manifest.source}: {exc}; left out")
            continue
        objects.append(obj)
    return objects


def check(manifests: list[Manifest], paths: Iterable[str | Path]) -> None:
    """What `simulate` and `explain` refuse before reading any object: no object at all, one object
    defined twice (two scenarios merged by accident), a kind Kueue's group does not have, a
    namespaced object without a namespace."""
    from ..jobs.framework import of_kind

    if not manifests:
        raise ManifestError(f"no Kubernetes objects in {', '.join(str(p) for p in paths)}")
    seen: dict[tuple[str, str, str, str], str] = {}
    for manifest in manifests:
        body = manifest.body
        kind = str(body.get("kind") or "")
        group = str(body.get("apiVersion") or "").rpartition("/")[0]
        raw_meta = body.get("metadata")
        meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        where = f"{manifest.source}: {object_ref(body)}"
        if group == kinds.GROUP and kind not in kinds.GROUP_KINDS:
            close = difflib.get_close_matches(kind, kinds.GROUP_KINDS, n=1)
            hint = f"did you mean {close[0]}?" if close else f"its kinds are {', '.join(kinds.GROUP_KINDS)}"
            raise ManifestError(f"{where}: unknown kind {kind!r} in {kinds.GROUP} ({hint})")
        integration = of_kind(str(body.get("apiVersion") or ""), kind)
        namespaced = (group == kinds.GROUP and kind in NAMESPACED) or (
            integration is not None and integration.kind.namespaced
        )
        if namespaced and not meta.get("namespace"):
            raise ManifestError(f"{where}: metadata.namespace: required: a {kind} lives in a namespace")
        key = (group, kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if key in seen:
            raise ManifestError(f"{object_ref(body)} is defined twice: in {seen[key]} and in {manifest.source}")
        seen[key] = manifest.source
