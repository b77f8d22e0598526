"""A thin asynchronous client for the Kubernetes API: raw JSON in and out, list, watch, get, patch
and create, with the kubeconfig handled by lightkube's configuration loader, requests sent over
plain kept-alive HTTP/1.1 connections (http11.py) and watches streamed by aiohttp (httpx2,
lightkube's client, for kubeconfigs that need an exec plugin).

Objects stay plain dicts: the engine parses them with its own models, so decoding them into a
second set of client models (lightkube's) would only cost CPU on the hottest path there is.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
from lightkube import KubeConfig
from lightkube.config.kubeconfig import SingleConfig

from .http11 import Http11Transport
from .rate_limit import RateLimiter
from .transports import AiohttpTransport, ApiError, HttpxTransport, Transport, _error, status_object

__all__ = [
    "LIST_PAGE",
    "REQUEST_SECONDS",
    "AiohttpTransport",
    "ApiError",
    "HttpxTransport",
    "KubeApi",
    "Transport",
    "load_config",
    "resource_of",
    "status_object",
]

log = logging.getLogger(__name__)

REQUEST_SECONDS = 10.0
LIST_PAGE = 500

_decode = msgspec.json.decode
_encode = msgspec.json.encode


def resource_of(path: str) -> str:
    """`workloads/status` from `/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads/w/status`."""
    parts = path.strip("/").split("/")
    parts = parts[2:] if parts[0] == "api" else parts[3:]
    if len(parts) > 2 and parts[0] == "namespaces":
        parts = parts[2:]
    return parts[0] + (f"/{parts[2]}" if len(parts) > 2 else "") if parts else ""


def load_config() -> SingleConfig:
    """The in-cluster service account, else KUBECONFIG, else ~/.kube/config (lightkube's order).
    Raises lightkube's ConfigError when there is none."""
    config = KubeConfig.from_env().get()
    if config is None:  # pragma: no cover - from_env raises first
        raise ValueError("no usable kubeconfig context")
    return config


def _selectors(label_selector: str | None, field_selector: str | None) -> dict[str, str]:
    out = {}
    if label_selector:
        out["labelSelector"] = label_selector
    if field_selector:
        out["fieldSelector"] = field_selector
    return out


class KubeApi:
    """One connection pool to one API server; every method raises ApiError on an error status,
    and ApiError with code 0 when there is no answer (connection refused or lost, timeout)."""

    def __init__(
        self,
        config: SingleConfig,
        timeout: float = REQUEST_SECONDS,
        observe: Callable[[str, str, str], None] | None = None,
        transport: Transport | None = None,
        limiter: RateLimiter | None = None,
        throttled: Callable[[float], None] | None = None,
    ) -> None:
        self.config = config
        self.timeout = timeout
        if transport is None:
            transport = (
                Http11Transport(config) if AiohttpTransport.supports(config) else HttpxTransport(config, timeout)
            )
        self.transport: Transport = transport
        self.observe = observe or (lambda method, resource, code: None)
        """Called once per request with its method, resource (`workloads/status`) and answer code
        ("none": no answer)."""
        self.limiter = limiter
        self.throttled = throttled or (lambda seconds: None)
        """Called with the seconds a request waited for the rate limit, when it waited."""

    async def _turn(self) -> None:
        if self.limiter is not None:
            waited = await self.limiter.wait()
            if waited > 0:
                self.throttled(waited)

    async def close(self) -> None:
        await self.transport.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        content = None
        if body is not None:
            content = _encode(body)
            headers["Content-Type"] = content_type
        await self._turn()
        try:
            code, phrase, retry_after, data = await self.transport.send(
                method, path, params, content, headers, timeout if timeout is not None else self.timeout
            )
        except ApiError:
            self.observe(method, resource_of(path), "none")
            raise
        self.observe(method, resource_of(path), str(code))
        if code >= 400:
            raise _error(code, phrase, retry_after, data)
        result: dict[str, Any] = _decode(data) if data else {}
        return result

    async def get(self, path: str) -> dict[str, Any]:
        return await self.request("GET", path)

    async def patch_json(
        self, path: str, operations: list[dict[str, Any]], timeout: float | None = None
    ) -> dict[str, Any]:
        return await self.request(
            "PATCH", path, body=operations, content_type="application/json-patch+json", timeout=timeout
        )

    async def patch_merge(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        return await self.request("PATCH", path, body=patch, content_type="application/merge-patch+json")

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", path, body=body)

    async def delete(self, path: str, uid: str | None = None) -> dict[str, Any]:
        """Deletes an object; with `uid`, only that one (409 when the name now holds another)."""
        # Background propagation, as kubectl: dependents are left to the garbage collector.
        params = {"propagationPolicy": "Background"}
        if uid is None:
            return await self.request("DELETE", path, params=params)
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        return await self.request("DELETE", path, params=params, body=options)

    async def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("PUT", path, body=body)

    async def list(
        self,
        path: str,
        page: int = LIST_PAGE,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        """Every item of a collection (in pages, one consistent snapshot) and its resourceVersion;
        only those with these labels (`label_selector`) or that a field selector (`metadata.name=x`)
        matches, if given."""
        items: list[dict[str, Any]] = []
        selected = _selectors(label_selector, field_selector)
        params = {"limit": str(page), **selected}
        while True:
            answer = await self.request("GET", path, params=params, timeout=max(self.timeout, 60.0))
            items.extend(answer.get("items") or [])
            meta = answer.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return items, str(meta.get("resourceVersion") or "")
            params = {"limit": str(page), "continue": token, **selected}

    async def watch(
        self,
        path: str,
        resource_version: str,
        seconds: int,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """The raw events of one watch request, from `resource_version`, with bookmarks. Ends when
        the server closes the stream; an ERROR event is yielded as is (410 Gone among them).
        Selectors as for `list` (an object that stops matching is reported DELETED)."""
        params = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(seconds),
        }
        params.update(_selectors(label_selector, field_selector))
        await self._turn()
        # No answer for a minute past the server's own timeout means the connection is dead
        # (the server sends bookmarks about once a minute).
        stream = self.transport.lines(path, params, self.timeout, seconds + 60.0)
        try:
            code, phrase, body = await anext(stream)
            self.observe("WATCH", resource_of(path), str(code))
            if code >= 400:
                raise _error(code, phrase, None, body)
            async for _, _, line in stream:
                yield _decode(line)
        finally:
            await stream.aclose()  # the connection goes back (or away) now, not when collected
