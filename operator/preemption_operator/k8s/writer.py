"""The one place the operator writes object status to the API.

Status is replaced with a JSON patch that first tests `metadata.resourceVersion`, so a write
computed from a stale object is refused (409/422) and recomputed from a fresh read: other
writers' conditions and fields survive. Nothing is written when the status would not change.

Every write ends in one of the outcomes below, never in an exception, so one failed write cannot
abort the others of its batch. No request is sent once `fence()` says this replica may no longer
write (its lease deadline passed): the check runs just before each request, not once per batch.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .api import ApiError, Kind, KubeApi

log = logging.getLogger(__name__)

COMPONENT = "preemption-operator"
FIELD_MANAGER = "preemption-operator"
MAX_ATTEMPTS = 5
MAX_RETRY_AFTER = 5.0

StatusFn = Callable[[dict[str, Any]], dict[str, Any] | None]
"""Given the current object, the new status, or None to write nothing."""


class Outcome(enum.Enum):
    WRITTEN = "written"
    UNCHANGED = "unchanged"
    """Nothing to write: the decision no longer applies to the object as it is now."""
    GONE = "gone"
    """The object does not exist (404): it must leave the cache."""
    FAILED = "failed"
    FENCED = "fenced"
    """Not sent: this replica is no longer allowed to write."""


@dataclass(frozen=True)
class WriteResult:
    outcome: Outcome
    body: dict[str, Any] | None = None
    """The object as written, or as freshly read when nothing was written."""
    error: str = ""


class StatusWriter:
    def __init__(
        self,
        api: KubeApi,
        fence: Callable[[], bool] = lambda: True,
        *,
        attempts: int = MAX_ATTEMPTS,
    ) -> None:
        self.api = api
        self.fence = fence
        self.attempts = attempts
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        """Per object: the lock that keeps its writes in order, and how many writes hold or await it."""

    async def update_status(
        self,
        kind: Kind,
        name: str,
        namespace: str | None,
        compute: StatusFn,
        current: dict[str, Any] | None = None,
        latest: Callable[[], dict[str, Any] | None] | None = None,
    ) -> WriteResult:
        """Writes `compute(object)` as the object's status, starting from `current`, or from what
        `latest()` gives once this write's turn comes (the freshest copy the caller holds, so a
        write queued behind another to the same object does not start from a version that one
        replaced), and re-reading on conflict. Writes to one object go one at a time."""
        key = f"{kind.name}/{namespace or ''}/{name}"
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                if current is None and latest is not None:
                    current = latest()
                return await self._update(kind, name, namespace, compute, current)
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    async def _update(
        self, kind: Kind, name: str, namespace: str | None, compute: StatusFn, current: dict[str, Any] | None
    ) -> WriteResult:
        path = kind.path(name, namespace)
        fresh = False
        for _ in range(self.attempts):
            try:
                if current is None:
                    if not self.fence():
                        return WriteResult(Outcome.FENCED)
                    current = await self.api.get(path)
                    fresh = True
                new_status = compute(current)
                if new_status is None or new_status == (current.get("status") or {}):
                    return WriteResult(Outcome.UNCHANGED, current if fresh else None)
                operations: list[dict[str, Any]] = []
                version = (current.get("metadata") or {}).get("resourceVersion")
                if version:
                    operations.append({"op": "test", "path": "/metadata/resourceVersion", "value": version})
                operations.append({"op": "add", "path": "/status", "value": new_status})
                if not self.fence():
                    return WriteResult(Outcome.FENCED)
                written = await self.api.patch_json(kind.path(name, namespace, "status"), operations)
                return WriteResult(Outcome.WRITTEN, written)
            except ApiError as exc:
                if exc.code in (409, 422):
                    log.debug("conflict writing status of %s %s; retrying from a fresh read", kind.name, name)
                    current = None
                    continue
                if exc.code == 404:
                    return WriteResult(Outcome.GONE, error=str(exc))
                if exc.code == 429:
                    await asyncio.sleep(min(MAX_RETRY_AFTER, exc.retry_after or 1.0))
                    continue
                return WriteResult(Outcome.FAILED, error=str(exc))
        return WriteResult(Outcome.FAILED, error=f"gave up after {self.attempts} attempts (conflicts or throttling)")
