"""kopf watch handlers: parse each object and feed the cache. Nothing is written to the objects
(on.event handlers keep no state on them: no annotations, no finalizers)."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from ..engine.cache import Cache
from ..engine.objects import ObjectError, parse_object
from ..k8s.resources import WATCHED
from .loop import SchedulingLoop

log = logging.getLogger(__name__)


def _key(body: dict[str, Any]) -> str:
    meta = body.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


class CacheFeeder:
    """Turns watch events into cache updates and wakes the loop."""

    def __init__(self, cache: Cache, loop: SchedulingLoop) -> None:
        self.cache = cache
        self.loop = loop
        self.invalid: dict[tuple[str, str], str] = {}

    def handle(self, kind: str, event_type: str | None, body: dict[str, Any]) -> None:
        key = _key(body)
        if event_type == "DELETED":
            self._forget(kind, key)
            return
        if self.cache.holds(kind, key, (body.get("metadata") or {}).get("resourceVersion")):
            return  # the echo of our own write: already in the cache
        try:
            obj = parse_object(body)
        except ObjectError as exc:
            # A bad object is reported and left out; everything else keeps being served.
            if self.invalid.get((kind, key)) != str(exc):
                log.warning("ignoring invalid object: %s", exc)
            self.invalid[(kind, key)] = str(exc)
            self._forget(kind, key)
            return
        self.invalid.pop((kind, key), None)
        previous = self.cache.infos.get(key) if kind == "Workload" else None
        if not self.cache.upsert(obj):
            return
        if kind == "Workload":
            current = self.cache.infos.get(key)
            if (
                previous is not None
                and previous.cluster_queue
                and (current is None or current.finished or current.cluster_queue != previous.cluster_queue)
            ):
                self.loop.quota_released(previous.cluster_queue)
            self.loop.poke()
        else:  # queues, cohorts, flavors, configs, classes, nodes: parked workloads get another look
            self.loop.config_changed()

    def _forget(self, kind: str, key: str) -> None:
        previous = self.cache.infos.get(key) if kind == "Workload" else None
        self.cache.delete(kind, key)
        if previous is not None and previous.cluster_queue:
            self.loop.quota_released(previous.cluster_queue)
        if kind == "Workload":
            self.loop.poke()
        else:
            self.loop.config_changed()


def _login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In-cluster service account first, then the kubeconfig (KUBECONFIG or ~/.kube/config)."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


def register(registry: kopf.OperatorRegistry, feeder: CacheFeeder) -> None:
    """The login handler and one event handler per watched kind."""
    kopf.on.login(registry=registry)(_login)
    for kind, (_, group, version, plural, _namespaced) in WATCHED.items():

        async def on_event(event: kopf.RawEvent, body: kopf.Body, kind: str = kind, **_: Any) -> None:
            feeder.handle(kind, event.get("type"), dict(body))

        kopf.on.event(group=group, version=version, plural=plural, registry=registry, id=f"cache-{kind.lower()}")(
            on_event
        )
