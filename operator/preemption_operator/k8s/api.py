"""A thin asynchronous client for the Kubernetes API: raw JSON in and out, list, watch, get, patch
and create, with the kubeconfig handled by lightkube's configuration loader.

Objects stay plain dicts: the engine parses them with its own models, so decoding them into a
second set of client models (lightkube's) would only cost CPU on the hottest path there is.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx2 as httpx
import msgspec
from lightkube import KubeConfig
from lightkube.config import client_adapter
from lightkube.config.kubeconfig import SingleConfig

log = logging.getLogger(__name__)

REQUEST_SECONDS = 10.0
LIST_PAGE = 500

_decode = msgspec.json.decode
_encode = msgspec.json.encode


@dataclass(frozen=True)
class Kind:
    """Where a kind lives in the API."""

    name: str
    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, name: str | None = None, namespace: str | None = None, subresource: str | None = None) -> str:
        parts = ["/api", self.version] if not self.group else ["/apis", self.group, self.version]
        if self.namespaced and namespace:
            parts += ["namespaces", namespace]
        parts.append(self.plural)
        if name is not None:
            parts.append(name)
            if subresource:
                parts.append(subresource)
        return "/".join(parts)


class ApiError(Exception):
    """The API server answered with an error status (code 0: no answer at all)."""

    def __init__(self, code: int, reason: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"{code} {reason}: {message}" if code else message)
        self.code = code
        self.reason = reason
        self.message = message
        self.retry_after = retry_after


def _error(response: httpx.Response, body: bytes) -> ApiError:
    reason, message = response.reason_phrase, body[:300].decode(errors="replace")
    with contextlib.suppress(msgspec.DecodeError, AttributeError, TypeError):
        status = _decode(body)
        reason = status.get("reason") or reason
        message = status.get("message") or message
    retry_after: float | None = None
    with contextlib.suppress(TypeError, ValueError):
        retry_after = float(response.headers.get("Retry-After") or "")
    return ApiError(response.status_code, str(reason), str(message), retry_after)


def load_config() -> SingleConfig:
    """The in-cluster service account, else KUBECONFIG, else ~/.kube/config (lightkube's order).
    Raises lightkube's ConfigError when there is none."""
    config = KubeConfig.from_env().get()
    if config is None:  # pragma: no cover - from_env raises first
        raise ValueError("no usable kubeconfig context")
    return config


class KubeApi:
    """One HTTP connection pool to one API server; every method raises ApiError on an error
    status and httpx's TransportError (connection refused, timeout) when there is no answer."""

    def __init__(
        self,
        config: SingleConfig,
        timeout: float = REQUEST_SECONDS,
        observe: Callable[[str, str], None] | None = None,
    ) -> None:
        params = client_adapter.ConnectionParams(timeout=httpx.Timeout(timeout))
        self.config = config
        self.timeout = timeout
        self.http: httpx.AsyncClient = client_adapter.AsyncClient(config, params)
        self.observe = observe or (lambda method, code: None)
        """Called once per request with its method and answer code ("none": no answer)."""

    async def close(self) -> None:
        await self.http.aclose()

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
        try:
            response = await self.http.request(
                method,
                path,
                params=params,
                content=content,
                headers=headers,
                timeout=httpx.Timeout(timeout) if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.HTTPError:
            self.observe(method, "none")
            raise
        self.observe(method, str(response.status_code))
        data = response.content
        if response.status_code >= 400:
            raise _error(response, data)
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

    async def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("PUT", path, body=body)

    async def list(self, path: str, page: int = LIST_PAGE) -> tuple[list[dict[str, Any]], str]:
        """Every item of a collection (in pages, one consistent snapshot) and its resourceVersion."""
        items: list[dict[str, Any]] = []
        params = {"limit": str(page)}
        while True:
            answer = await self.request("GET", path, params=params, timeout=max(self.timeout, 60.0))
            items.extend(answer.get("items") or [])
            meta = answer.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return items, str(meta.get("resourceVersion") or "")
            params = {"limit": str(page), "continue": token}

    async def watch(self, path: str, resource_version: str, seconds: int) -> AsyncIterator[dict[str, Any]]:
        """The raw events of one watch request, from `resource_version`, with bookmarks. Ends when
        the server closes the stream; an ERROR event is yielded as is (410 Gone among them)."""
        params = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(seconds),
        }
        # No answer for a minute past the server's own timeout means the connection is dead
        # (the server sends bookmarks about once a minute).
        timeout = httpx.Timeout(self.timeout, read=seconds + 60.0)
        async with self.http.stream("GET", path, params=params, timeout=timeout) as response:
            self.observe("WATCH", str(response.status_code))
            if response.status_code >= 400:
                raise _error(response, await response.aread())
            async for line in response.aiter_lines():
                if line:
                    yield _decode(line)
