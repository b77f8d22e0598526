"""Informers: list a kind, then watch it from the list's resourceVersion, as client-go does.

Why not an operator framework's per-object event handlers: a handler that sees objects one at a
time cannot tell when a re-list starts or ends, so an object deleted while the watch was down (an
API-server restart, a 410 Gone) is never reported and stays in the cache for good. Here every list *replaces* the
kind's contents in the cache (what is missing from it was deleted), the watch resumes from the
last resourceVersion seen (bookmarks included), a 410 Gone or a stale stream forces a re-list,
and a periodic re-list reconciles whatever drift is left.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..api.kinds import Kind
from .api import ApiError, KubeApi

log = logging.getLogger(__name__)

WATCH_SECONDS = 300
RELIST_SECONDS = 600.0
MISSING_KIND_RETRY_SECONDS = 5.0  # one cheap list per missing kind: installing CRDs shows soon
BACKOFF_START, BACKOFF_MAX = 0.5, 30.0


class Handler(Protocol):
    def replace(self, kind: Kind, items: list[dict[str, Any]], resource_version: str) -> None:
        """The whole current contents of `kind` (a list): anything else known of it is gone."""

    def event(self, kind: Kind, event_type: str, obj: dict[str, Any]) -> None:
        """One watch event: ADDED, MODIFIED or DELETED."""


class Tee:
    """Hands one informer's events to several handlers, in order."""

    def __init__(self, *handlers: Handler) -> None:
        self.handlers = handlers

    def replace(self, kind: Kind, items: list[dict[str, Any]], resource_version: str) -> None:
        for handler in self.handlers:
            handler.replace(kind, items, resource_version)

    def event(self, kind: Kind, event_type: str, obj: dict[str, Any]) -> None:
        for handler in self.handlers:
            handler.event(kind, event_type, obj)


class _Relist(Exception):
    """The watch must start again from a fresh list."""


class Informer:
    """Keeps one kind's contents flowing into a Handler. `synced` is set after the first list."""

    def __init__(
        self,
        api: KubeApi,
        kind: Kind,
        handler: Handler,
        *,
        relist_seconds: float = RELIST_SECONDS,
        watch_seconds: int = WATCH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> None:
        self.api = api
        self.kind = kind
        self.label_selector = label_selector
        """Only the objects with these labels (`a=b`), if given."""
        self.handler = handler
        self.field_selector = field_selector
        """Only the objects it matches (`metadata.name=x`), if given."""
        self.relist_seconds = relist_seconds
        self.watch_seconds = watch_seconds
        self.clock = clock
        self.synced = asyncio.Event()
        self.lists = 0
        """Lists applied so far (a re-list is awaited by waiting for this to grow)."""
        self._relist_requested = asyncio.Event()
        self._listed = asyncio.Condition()
        self._missing_logged = False
        self._listing = False

    async def relist(self) -> None:
        """Forces a fresh list, started after this call, and returns once the handler has it."""
        target = self.lists + (2 if self._listing else 1)
        self._relist_requested.set()
        async with self._listed:
            await self._listed.wait_for(lambda: self.lists >= target)

    async def run(self) -> None:
        backoff = BACKOFF_START
        while True:
            try:
                resource_version = await self._list()
                backoff = BACKOFF_START
                await self._watch_until_relist(resource_version)
            except _Relist:
                continue
            except asyncio.CancelledError:
                raise
            except (ApiError, ValueError) as exc:
                if isinstance(exc, ApiError) and exc.code == 404:
                    await self._kind_missing()
                    continue
                log.warning("listing %s failed (%s); retrying in %.1fs", self.kind.plural, exc, backoff)
                await self._sleep_or_relist(backoff)
                backoff = min(BACKOFF_MAX, backoff * 2)

    async def _list(self) -> str:
        self._relist_requested.clear()
        self._listing = True
        try:
            items, resource_version = await self.api.list(
                self.kind.path(), label_selector=self.label_selector, field_selector=self.field_selector
            )
        finally:
            self._listing = False
        for item in items:  # list items carry no apiVersion/kind
            item.setdefault("apiVersion", self.kind.api_version)
            item.setdefault("kind", self.kind.name)
        self.handler.replace(self.kind, items, resource_version)
        if self._missing_logged:
            log.info("%s is served now", self.kind.plural)
            self._missing_logged = False
        await self._mark_listed()
        return resource_version

    @property
    def missing(self) -> bool:
        """Whether the kind is not served (its CRD is not installed) as of the last list."""
        return self._missing_logged

    async def _mark_listed(self) -> None:
        self.lists += 1
        self.synced.set()
        async with self._listed:
            self._listed.notify_all()

    async def _kind_missing(self) -> None:
        """The kind is not served (its CRD is missing or was deleted): it is empty until it comes
        back, which a list every little while finds out."""
        if not self._missing_logged:
            what = f"{self.kind.plural}.{self.kind.group}" if self.kind.group else self.kind.plural
            hint = (
                " (install the CRDs: kubectl apply --server-side -f crds/)"
                if self.kind.group == "kueue.x-k8s.io"
                else ""
            )
            log.warning(
                "%s is not served by this cluster%s; treating it as empty until it is, looking again every %.0fs",
                what,
                hint,
                MISSING_KIND_RETRY_SECONDS,
            )
            self._missing_logged = True
        self.handler.replace(self.kind, [], "")
        await self._mark_listed()
        await self._sleep_or_relist(MISSING_KIND_RETRY_SECONDS)

    async def _sleep_or_relist(self, seconds: float) -> None:
        try:
            async with asyncio.timeout(seconds):
                await self._relist_requested.wait()
        except TimeoutError:
            pass

    async def _watch_until_relist(self, resource_version: str) -> None:
        relist_at = self.clock() + self.relist_seconds * random.uniform(0.9, 1.1)
        backoff = BACKOFF_START
        while self.clock() < relist_at:
            stream = asyncio.ensure_future(self._watch(resource_version))
            requested = asyncio.ensure_future(self._relist_requested.wait())
            try:
                timeout = max(0.0, relist_at - self.clock())
                done, _ = await asyncio.wait({stream, requested}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                requested.cancel()
                if not stream.done():
                    stream.cancel()
                    await asyncio.gather(stream, return_exceptions=True)
            if stream not in done:
                return  # a re-list was asked for, or it is time for the periodic one
            try:
                resource_version = stream.result()
                backoff = BACKOFF_START
            except (ApiError, ValueError) as exc:
                if isinstance(exc, ApiError) and exc.code in (404, 410):
                    raise _Relist() from None
                log.warning("watching %s failed (%s); resuming in %.1fs", self.kind.plural, exc, backoff)
                await self._sleep_or_relist(backoff)
                backoff = min(BACKOFF_MAX, backoff * 2)
                if self._relist_requested.is_set():
                    return

    async def _watch(self, resource_version: str) -> str:
        """One watch request; returns the resourceVersion to resume from."""
        async for event in self.api.watch(
            self.kind.path(),
            resource_version,
            self.watch_seconds,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
        ):
            event_type = event.get("type")
            obj = event.get("object") or {}
            if event_type == "ERROR":
                code = int(obj.get("code") or 0)
                raise ApiError(code, str(obj.get("reason") or ""), str(obj.get("message") or "watch error"))
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if version:
                resource_version = str(version)
            if event_type == "BOOKMARK":
                continue
            if event_type in ("ADDED", "MODIFIED", "DELETED"):
                obj.setdefault("apiVersion", self.kind.api_version)
                obj.setdefault("kind", self.kind.name)
                self.handler.event(self.kind, str(event_type), obj)
        return resource_version
