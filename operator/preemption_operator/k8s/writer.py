"""The one place the operator writes object status to the API.

Status is replaced with a JSON patch that first tests `metadata.resourceVersion`, so a write
computed from a stale object is refused (409/422) and recomputed from a fresh read: other
writers' conditions and fields survive. Nothing is written when the status would not change.

Every write ends in one of the outcomes below, never in an exception, so one failed write cannot
abort the others of its batch. An error that may come after the write took effect (a 5xx, a
connection lost on the way back) is not a failure: the object is read again, which tells whether
it did; if even that read cannot be made, the outcome is UNKNOWN and the caller must act as if the
write took effect until it learns otherwise. No request is sent once `fence()` says this replica may no longer
write (its lease deadline passed): the check runs just before each request, not once per batch.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..api.kinds import Kind
from .api import ApiError, KubeApi

log = logging.getLogger(__name__)

COMPONENT = "preemption-operator"
MAX_ATTEMPTS = 5
MAX_RETRY_AFTER = 5.0
AMBIGUOUS = frozenset({0, 500, 502, 503, 504})
"""Answers that do not say whether the request took effect (0: no answer at all)."""
AMBIGUOUS_PAUSE = 0.1

StatusFn = Callable[[dict[str, Any]], dict[str, Any] | None]
"""Given the current object, the new status, or None to write nothing."""


class Outcome(enum.Enum):
    WRITTEN = "written"
    UNCHANGED = "unchanged"
    """Nothing to write: the decision no longer applies to the object as it is now."""
    GONE = "gone"
    """The object does not exist (404): it must leave the cache."""
    FAILED = "failed"
    """Not written."""
    UNKNOWN = "unknown"
    """Perhaps written: the answer was lost or was an error that may come after the write."""
    FENCED = "fenced"
    """Not sent: this replica is no longer allowed to write."""


@dataclass(frozen=True)
class WriteResult:
    outcome: Outcome
    body: dict[str, Any] | None = None
    """The object as written, or as freshly read when nothing was written."""
    error: str = ""
    based_on: str | None = None
    """WRITTEN: the resourceVersion the patch replaced (it tested it). A status subresource write
    changes nothing else, so the answer is that version with the new status."""


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
        uid: str | None = None,
    ) -> WriteResult:
        """Writes `compute(object)` as the object's status, starting from `current`, or from what
        `latest()` gives once this write's turn comes (the freshest copy the caller holds, so a
        write queued behind another to the same object does not start from a version that one
        replaced), and re-reading on conflict. Writes to one object go one at a time. With `uid`,
        only that object is written: another one made since under the same name is left alone
        (UNCHANGED), since a decision about the old one says nothing about it."""
        key = f"{kind.name}/{namespace or ''}/{name}"
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                if current is None and latest is not None:
                    current = latest()
                return await self._update(kind, name, namespace, compute, current, uid)
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    async def _update(
        self,
        kind: Kind,
        name: str,
        namespace: str | None,
        compute: StatusFn,
        current: dict[str, Any] | None,
        uid: str | None,
    ) -> WriteResult:
        path = kind.path(name, namespace)
        fresh = False
        maybe_written = False
        """A request of this write may have taken effect and no read since tells."""
        error = ""
        for attempt in range(self.attempts):
            settled = False
            try:
                if current is None:
                    if not self.fence():
                        return WriteResult(Outcome.UNKNOWN if maybe_written else Outcome.FENCED, error=error)
                    current = await self.api.get(path)
                    fresh = True
                    # The read settles it: if the lost write took effect, compute() sees it.
                    settled, maybe_written = maybe_written, False
                if uid and (current.get("metadata") or {}).get("uid") not in (None, uid):
                    # The object it was meant for is gone; if an earlier attempt wrote it, that
                    # went with it. The version the patch tests pins the object, so this suffices.
                    return WriteResult(Outcome.UNCHANGED, current if fresh else None)
                new_status = compute(current)
                if new_status is None or new_status == (current.get("status") or {}):
                    # After a lost answer, "nothing left to do" means the write went through.
                    outcome = Outcome.WRITTEN if settled else Outcome.UNCHANGED
                    return WriteResult(outcome, current if fresh else None)
                operations: list[dict[str, Any]] = []
                version = (current.get("metadata") or {}).get("resourceVersion")
                if version:
                    operations.append({"op": "test", "path": "/metadata/resourceVersion", "value": version})
                operations.append({"op": "add", "path": "/status", "value": new_status})
                if not self.fence():
                    return WriteResult(Outcome.FENCED)
                try:
                    written = await self.api.patch_json(kind.path(name, namespace, "status"), operations)
                except ApiError as exc:
                    if exc.code in AMBIGUOUS:
                        maybe_written = True
                    raise
                return WriteResult(Outcome.WRITTEN, written, based_on=version or None)
            except ApiError as exc:
                error = str(exc)
                if exc.code in AMBIGUOUS:
                    log.debug("no clear answer writing status of %s %s (%s); reading it again", kind.name, name, exc)
                    current = None
                    await asyncio.sleep(AMBIGUOUS_PAUSE * (attempt + 1))
                    continue
                if exc.code in (409, 422):
                    log.debug("conflict writing status of %s %s; retrying from a fresh read", kind.name, name)
                    current = None
                    continue
                if exc.code == 404:
                    return WriteResult(Outcome.GONE, error=error)
                if exc.code == 429:
                    await asyncio.sleep(min(MAX_RETRY_AFTER, exc.retry_after or 1.0))
                    continue
                return WriteResult(Outcome.UNKNOWN if maybe_written else Outcome.FAILED, error=error)
        if maybe_written:
            return WriteResult(Outcome.UNKNOWN, error=f"{error} (after {self.attempts} attempts)")
        return WriteResult(Outcome.FAILED, error=f"gave up after {self.attempts} attempts: {error}")
