"""From informers to the cache: parse each object, keep bad ones out (and say so), and wake the
scheduling loop only for changes that can change a decision."""

from __future__ import annotations

import logging
import typing
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from ..api import kinds
from ..api.kinds import Kind
from ..api.objects import ObjectError, parse_object
from ..api.v1beta2 import Workload
from ..engine.cache import Cache, Change
from ..engine.limits import PastPreemption, past_preemption
from ..engine.notices import Notice

log = logging.getLogger(__name__)

INVALID_OBJECT = "InvalidObject"


class Waker(Protocol):
    def poke(self) -> None: ...
    def quota_released(self, cluster_queue: str) -> None: ...
    def config_changed(self) -> None: ...


def _key(body: dict[str, Any]) -> str:
    meta = body.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


_STATUS_MODELS: dict[type, type[BaseModel] | None] = {}


def _status_model(model: type) -> type[BaseModel] | None:
    """The model of a kind's `status` (None: it has none)."""
    if model not in _STATUS_MODELS:
        field = model.model_fields.get("status") if issubclass(model, BaseModel) else None
        found = None
        for candidate in (field.annotation, *typing.get_args(field.annotation)) if field is not None else ():
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                found = candidate
                break
        _STATUS_MODELS[model] = found
    return _STATUS_MODELS[model]


def _unstatused(body: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """What a status write leaves as it was: the spec and the metadata but the resourceVersion."""
    meta = body.get("metadata") or {}
    return body.get("spec"), {k: v for k, v in meta.items() if k not in ("resourceVersion", "managedFields")}


def holding_workload(body: dict[str, Any]) -> Workload | None:
    """What can be kept of a Workload whose spec does not parse but whose status records an
    admission: enough to hold that admission's quota. None when it holds none (or that, too, is
    unreadable)."""
    status = body.get("status")
    if not isinstance(status, dict):
        return None
    admission = status.get("admission")
    reserved = any(
        isinstance(c, dict) and c.get("type") == "QuotaReserved" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    if not reserved or not isinstance(admission, dict):
        return None
    meta = body.get("metadata") or {}
    raw_spec = body.get("spec")
    spec: dict[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}
    assignments = [a for a in admission.get("podSetAssignments") or [] if isinstance(a, dict)]
    kept = {
        "apiVersion": body.get("apiVersion"),
        "kind": "Workload",
        "metadata": {
            k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in meta
        },
        "spec": {
            "queueName": spec.get("queueName") if isinstance(spec.get("queueName"), str) else "",
            "podSets": [
                {"name": a.get("name"), "count": a.get("count", 1), "template": {"spec": {"containers": []}}}
                for a in assignments
            ],
        },
        "status": {"conditions": status.get("conditions"), "admission": admission},
    }
    try:
        obj = parse_object(kept)
    except ObjectError:
        return None
    return obj if isinstance(obj, Workload) else None


class CacheFeeder:
    """The informers' handler (see k8s.informer.Handler), and where the operator stores the
    objects its own writes return."""

    def __init__(self, cache: Cache, waker: Waker, setup_changed: Callable[[], None] = lambda: None) -> None:
        self.cache = cache
        self.waker = waker
        self.setup_changed = setup_changed
        """Called when an object lint reads changed (never for Workloads): the operator's lint runs."""
        self.invalid: dict[tuple[str, str], Notice] = {}
        """Objects left out (or held from their admission only) because they do not parse."""
        self._refs: dict[tuple[str, str], dict[str, Any]] = {}
        """Their identity (name, namespace, uid), so that Events about them reach `kubectl describe`."""
        self.preempted: Callable[[PastPreemption], None] | None = None
        """Told of each preemption a Workload's status records as it comes in (the dashboard's
        timeline, on every replica)."""
        self.status_changed: Callable[[str], None] = lambda kind: None
        """Told of a change of kind other than Workload that scheduling does not read (its status,
        as someone else wrote it: our own writes' echoes are not changes); the statuses the
        operator publishes are put right."""
        self.pods_may_run: Callable[[str], bool] | None = None
        """Whether pods started under a Workload (by key) may still run, as far as the index's
        watch has come (None: not followed). A Workload deleted meanwhile keeps its quota until
        `pods_changed` says they are gone."""
        self.confirm_gone: Callable[[str], None] = lambda key: None
        """Told of a Workload deleted while holding quota that the index knows no pods of: they
        may have been made just before, unseen yet by its watch, so the API's own answer decides
        when the quota comes back (`pods_ended`)."""
        self._read: dict[str, tuple[Any, dict[str, Any]]] = {}
        """Per Workload, the spec and metadata (but its resourceVersion) of the version last parsed
        whole, as they came: a watch event that differs only in its status is read from its status
        (most events are status writes: admissions, pending reasons, the job's Finished)."""

    def reference(self, kind: str, key: str) -> dict[str, Any] | None:
        """The metadata of an object left out as invalid."""
        return self._refs.get((kind, key))

    def notices(self) -> list[Notice]:
        return list(self.invalid.values())

    # -- informer events

    def replace(self, kind: Kind, items: list[dict[str, Any]], resource_version: str) -> None:
        held = self.cache.objects[kind.name]
        kept: dict[str, Any] = {}
        for body in items:
            key = _key(body)
            if self.cache.holds(kind.name, key, (body.get("metadata") or {}).get("resourceVersion")):
                kept[key] = held[key]  # unchanged: no need to parse it again
                continue
            obj = self._parse(kind.name, key, body)
            if obj is not None:
                kept[key] = obj
                self._observe(kind.name, obj)
            elif kind.name == "Workload" and key in self.cache.unreadable:
                kept[key] = held[key]  # unreadable, but holding quota: kept as `_parse` stored it
        # Bad objects that are gone from the list are forgotten with them.
        listed = {_key(body) for body in items}
        for known in [k for k in self.invalid if k[0] == kind.name and k[1] not in listed]:
            del self.invalid[known]
            self._refs.pop(known, None)
        if kind.name == "Workload":
            for gone in [k for k in self._read if k not in listed]:
                del self._read[gone]
        # A Workload deleted while the watch was down departs as on its DELETED event.
        followed = kind.name == "Workload" and self.pods_may_run is not None
        before = set(self.cache.departing) if followed else set()
        change = self.cache.replace(kind.name, kept.values(), resource_version, departs=followed)
        for key in sorted(set(self.cache.departing) - before):
            self._departs(key)
        if change is Change.NONE:
            return
        # A list is rare (startup, a lost watch, the periodic one): give everything another look.
        if kind.name in kinds.SETUP:
            self.setup_changed()
        self.waker.config_changed()

    def event(self, kind: Kind, event_type: str, obj: dict[str, Any]) -> None:
        if event_type == "DELETED":
            self.forget(kind.name, obj)
        else:
            self.ingest(kind.name, obj)

    # -- updates

    def ingest(self, kind: str, body: dict[str, Any], based_on: str | None = None) -> Change:
        """Stores an object from a watch or a write's answer; `based_on`: the answer of our own
        status write that replaced that resourceVersion (see `_successor`)."""
        key = _key(body)
        if self.cache.holds(kind, key, (body.get("metadata") or {}).get("resourceVersion")):
            return Change.NONE  # the echo of our own write: already in the cache
        previous = self.cache.infos.get(key) if kind == "Workload" else None
        if based_on is not None:
            obj = self._successor(kind, key, body, based_on)
        elif kind == "Workload" and self._read.get(key) == _unstatused(body):
            obj = self._successor(kind, key, body, None)
        else:
            obj = None
        if obj is None:
            obj = self._parse(kind, key, body)
        if obj is None:
            if (kind, key) in self.invalid and kind == "Workload" and key in self.cache.unreadable:
                self._wake(kind, key, previous, Change.RELEVANT)
                return Change.RELEVANT
            return self._drop(kind, key, previous)
        change = self.cache.upsert(obj)
        if change is not Change.NONE:
            self._observe(kind, obj)
        self._wake(kind, key, previous, change)
        return change

    def _observe(self, kind: str, obj: Any) -> None:
        if kind == "Workload" and self.preempted is not None:
            found = past_preemption(obj)
            if found is not None:
                self.preempted(found)

    def forget(self, kind: str, body: dict[str, Any]) -> Change:
        key = _key(body)
        version = (body.get("metadata") or {}).get("resourceVersion")
        if self.cache.holds_newer(kind, key, version):
            # The watch's DELETED event of an older object under the name, after the one made
            # again was stored from its create's answer: it must not drop (and bury) that one.
            return Change.NONE
        self.invalid.pop((kind, key), None)
        self._refs.pop((kind, key), None)
        if kind == "Workload":
            self._read.pop(key, None)
        previous = self.cache.infos.get(key) if kind == "Workload" else None
        if kind == "Workload" and self.pods_may_run is not None:
            # One that holds quota departs even when the index knows no pods of it (see `_departs`).
            change = self.cache.depart(key, version)
            if change is Change.STORED:
                self._departs(key)
        else:
            change = self.cache.delete(kind, key, version)
        self._wake(kind, key, previous, change)
        return change

    def _departs(self, key: str) -> None:
        """A Workload deleted while holding quota now departs: its quota is held until the pods
        started under it have ended, which the API confirms when the index knows none."""
        assert self.pods_may_run is not None
        if self.pods_may_run(key):
            log.info(
                "Workload %s was deleted while pods started under it may run: its quota is held until they end", key
            )
        else:
            # Its job may have made pods a moment before the deletion that the index's watch has
            # not brought yet: giving the quota back on the index's word would over-commit.
            self.confirm_gone(key)

    def pods_changed(self, key: str) -> None:
        """Pods started under the Workload `key` came or went: a deleted one whose last pod is
        gone gives its quota back (the index saw them go)."""
        if key not in self.cache.departing or self.pods_may_run is None or self.pods_may_run(key):
            return
        self.pods_ended(key)

    def pods_ended(self, key: str) -> None:
        """No pod started under the deleted Workload `key` may run: its quota comes back."""
        if key not in self.cache.departing:
            return
        previous = self.cache.infos.get(key)
        self._wake("Workload", key, previous, self.cache.departed(key))
        log.info("the pods of deleted Workload %s have ended: its quota is given back", key)

    def gone(self, kind: str, key: str, uid: str | None = None) -> None:
        """A write found the object deleted (404): it leaves the cache at once, whatever the watch
        says later, so no write is ever retried against it. With `uid`, only that object: the
        404 may come back after the watch has shown another one made since under the name."""
        if uid is not None:
            held = self.cache.objects[kind].get(key)
            held_uid = held.metadata.uid if held is not None else (self._refs.get((kind, key)) or {}).get("uid")
            if held_uid is not None and held_uid != uid:
                return
        namespace, _, name = key.rpartition("/")
        self.forget(kind, {"metadata": {"name": name, **({"namespace": namespace} if namespace else {})}})

    def _parse(self, kind: str, key: str, body: dict[str, Any]) -> Any:
        """The parsed object, or None (after noting why) when it cannot be read. A Workload that
        holds quota is kept from its recorded admission."""
        meta = body.get("metadata")
        if isinstance(meta, dict):
            # Nothing reads them, and they are a third of a Workload (benchmarks/results/parsing.md).
            meta.pop("managedFields", None)
        if kind == "Workload":
            self._read.pop(key, None)
        try:
            obj = parse_object(body)
        except ObjectError as exc:
            message = str(exc)
            holding = holding_workload(body) if kind == "Workload" else None
            suffix = (
                "; it keeps the quota of its admission until it finishes or is deleted"
                if holding is not None
                else "; it is ignored until it is fixed"
            )
            notice = Notice(kind, key, INVALID_OBJECT, message + suffix)
            if self.invalid.get((kind, key)) != notice:
                log.warning("invalid object: %s", notice.message)
            self.invalid[(kind, key)] = notice
            meta = body.get("metadata") or {}
            self._refs[(kind, key)] = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta}
            if holding is not None:
                self.cache.hold_unreadable(holding, message)
            return None
        self._refs.pop((kind, key), None)
        if self.invalid.pop((kind, key), None) is not None:
            log.info("%s %s is valid again", kind, key)
        if kind == "Workload":
            self._read[key] = _unstatused(body)
        return obj

    def _successor(self, kind: str, key: str, body: dict[str, Any], based_on: str | None) -> Any:
        """A new version of the object the cache holds that differs only in its status, read from
        its status alone (a Workload's spec is most of its parsing): the answer to our own status
        write from the version it replaced (`based_on`), or a Workload whose spec and metadata are
        as last parsed (None). None: parse it whole."""
        held = self.cache.objects[kind].get(key)
        if held is None or (kind, key) in self.invalid:
            return None
        if based_on is not None and held.metadata.resource_version != based_on:
            return None
        model = _status_model(type(held))
        raw = body.get("status")
        meta = body.get("metadata") or {}
        if model is None or not isinstance(raw, dict) or meta.get("uid") != held.metadata.uid:
            return None
        try:
            new_status = model.model_validate(raw)
        except ValidationError:
            return None  # parsed whole, which names the field
        version = meta.get("resourceVersion")
        return held.model_copy(
            update={"status": new_status, "metadata": held.metadata.model_copy(update={"resource_version": version})}
        )

    def _drop(self, kind: str, key: str, previous: Any) -> Change:
        change = self.cache.delete(kind, key)
        self._wake(kind, key, previous, change)
        return change

    def _wake(self, kind: str, key: str, previous: Any, change: Change) -> None:
        if change is Change.NONE:
            return
        if kind == "Workload":
            current = self.cache.infos.get(key)
            if (
                previous is not None
                and previous.cluster_queue
                and (
                    current is None
                    or current.finished
                    or current.cluster_queue != previous.cluster_queue
                    # reclaimablePods grew: finished pods gave quota back (Kueue requeues then too)
                    or any(current.usage.get(fr, 0) < amount for fr, amount in previous.usage.items())
                )
            ):
                self.waker.quota_released(previous.cluster_queue)
            self.waker.poke()
        elif change is Change.RELEVANT:
            # Queues, cohorts, flavors, configs, classes, nodes: parked workloads get another look.
            if kind in kinds.SETUP:
                self.setup_changed()
            self.waker.config_changed()
        else:
            self.status_changed(kind)
