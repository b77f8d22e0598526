"""The one place the operator writes to the API: status patches and Events.

Status is replaced with a JSON patch that first tests `metadata.resourceVersion`, so a write
computed from a stale object is refused (409/422) and recomputed from a fresh read: other
writers' conditions and fields survive. Nothing is written when the status would not change.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.types import PatchType

from .resources import Event

log = logging.getLogger(__name__)

COMPONENT = "preemption-operator"
FIELD_MANAGER = "preemption-operator"
MAX_ATTEMPTS = 5
MAX_EVENT_MESSAGE = 1024

StatusFn = Callable[[dict[str, Any]], dict[str, Any] | None]
"""Given the current object, the new status, or None to write nothing."""


class StatusWriter:
    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def update_status(
        self, resource: Any, name: str, namespace: str | None, compute: StatusFn, current: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """Writes `compute(object)` as the object's status. Returns the object as written (or None
        when nothing was written or the object is gone)."""
        for _ in range(MAX_ATTEMPTS):
            if current is None:
                try:
                    current = (await self.client.get(resource, name, namespace=namespace)).to_dict()
                except ApiError as exc:
                    if exc.status.code == 404:
                        return None
                    raise
            new_status = compute(current)
            if new_status is None or new_status == (current.get("status") or {}):
                return None
            version = current.get("metadata", {}).get("resourceVersion")
            ops: list[dict[str, Any]] = []
            if version:
                ops.append({"op": "test", "path": "/metadata/resourceVersion", "value": version})
            ops.append({"op": "add", "path": "/status", "value": new_status})
            try:
                written = await self.client.patch(
                    resource.Status, name, ops, namespace=namespace, patch_type=PatchType.JSON
                )
                return dict(written.to_dict())
            except ApiError as exc:
                if exc.status.code in (409, 422):
                    log.debug("conflict writing status of %s %s; retrying from a fresh read", resource.__name__, name)
                    current = None
                    continue
                if exc.status.code == 404:
                    return None
                raise
        log.warning("gave up writing status of %s %s after %d conflicts", resource.__name__, name, MAX_ATTEMPTS)
        return None

    async def event(
        self, obj: dict[str, Any], kind: str, api_version: str, type_: str, reason: str, message: str
    ) -> None:
        """Posts an Event about `obj`; a failure is logged, never raised (Events are best effort)."""
        meta = obj.get("metadata", {})
        namespace = meta.get("namespace") or "default"
        now = datetime.now(UTC)
        if len(message) > MAX_EVENT_MESSAGE:
            message = message[: MAX_EVENT_MESSAGE - 4] + " ..."
        event = Event(
            metadata=ObjectMeta(name=f"{meta.get('name', 'object')}.{secrets.token_hex(8)}", namespace=namespace),
            involvedObject=ObjectReference(
                apiVersion=api_version,
                kind=kind,
                name=meta.get("name"),
                namespace=meta.get("namespace"),
                uid=meta.get("uid"),
                resourceVersion=meta.get("resourceVersion"),
            ),
            reason=reason,
            message=message,
            type=type_,
            source=EventSource(component=COMPONENT),
            reportingComponent=COMPONENT,
            firstTimestamp=now,
            lastTimestamp=now,
            count=1,
        )
        try:
            await self.client.create(event)
        except ApiError as exc:
            log.warning("could not post event %s on %s: %s", reason, meta.get("name"), exc.status.message)
