"""A thin asynchronous client for the Kubernetes API: raw JSON in and out, list, watch, get, patch
and create, with the kubeconfig handled by lightkube's configuration loader, requests sent over
plain kept-alive HTTP/1.1 connections (http11.py) and watches streamed by aiohttp (httpx2,
lightkube's client, for kubeconfigs that need an exec plugin).

Objects stay plain dicts: the engine parses them with its own models, so decoding them into a
second set of client models (lightkube's) would only cost CPU on the hottest path there is.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, Protocol

import aiohttp
import httpx2 as httpx
import msgspec
from lightkube import KubeConfig
from lightkube.config import client_adapter
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import User

from .rate_limit import RateLimiter

log = logging.getLogger(__name__)

REQUEST_SECONDS = 10.0
LIST_PAGE = 500

_decode = msgspec.json.decode
_encode = msgspec.json.encode


class ApiError(Exception):
    """The API server answered with an error status (code 0: no answer at all)."""

    def __init__(self, code: int, reason: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"{code} {reason}: {message}" if code else message)
        self.code = code
        self.reason = reason
        self.message = message
        self.retry_after = retry_after


def _error(code: int, phrase: str, retry_after_header: str | None, body: bytes) -> ApiError:
    reason, message = phrase, body[:300].decode(errors="replace")
    with contextlib.suppress(msgspec.DecodeError, AttributeError, TypeError):
        status = _decode(body)
        reason = status.get("reason") or reason
        message = status.get("message") or message
    retry_after: float | None = None
    with contextlib.suppress(TypeError, ValueError):
        retry_after = float(retry_after_header or "")
    return ApiError(code, str(reason), str(message), retry_after)


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


class Transport(Protocol):
    """How requests reach the API server: an answer (status, reason phrase, Retry-After, body),
    or ApiError(0) when there is none (refused, reset, timed out)."""

    async def send(
        self,
        method: str,
        path: str,
        params: dict[str, str] | None,
        body: bytes | None,
        headers: dict[str, str],
        timeout: float,
    ) -> tuple[int, str, str | None, bytes]: ...

    def lines(
        self, path: str, params: dict[str, str], connect_timeout: float, read_timeout: float
    ) -> AsyncGenerator[tuple[int, str, bytes]]:
        """The status and reason of a streamed answer (first item, empty line), then its lines."""

    async def close(self) -> None: ...


class AiohttpTransport:
    """aiohttp, with the kubeconfig's TLS settings and token, client certificate or basic auth.
    It costs about half the client CPU of httpx per request, and a quarter per Event
    (benchmarks/results/http_clients.md)."""

    def __init__(self, config: SingleConfig) -> None:
        user = config.user or User()
        self.base = config.cluster.server.rstrip("/")
        self.ssl = (
            client_adapter.verify_cluster(config.cluster, user, config.abs_file)
            if self.base.startswith("https")
            else None
        )
        self.token_file = config.abs_file(user.token_file) if user.token_file else None
        self.authorization: str | None = None
        if user.token:
            self.authorization = f"Bearer {user.token}"
        elif user.username and user.password:
            self.authorization = aiohttp.BasicAuth(user.username, user.password).encode()
        self._session: aiohttp.ClientSession | None = None

    @staticmethod
    def supports(config: SingleConfig) -> bool:
        user = config.user
        return user is None or (user.exec is None and user.auth_provider is None)

    def _headers(self, headers: dict[str, str], fresh_token: bool = False) -> dict[str, str]:
        if self.token_file is not None and (fresh_token or self.authorization is None):
            # A projected service-account token is rotated by the kubelet: read it again on 401.
            with open(self.token_file) as handle:
                self.authorization = f"Bearer {handle.read().strip()}"
        if self.authorization is not None:
            return {**headers, "Authorization": self.authorization}
        return headers

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self.ssl if self.ssl is not None else False, limit=64)
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=True)
        return self._session

    async def send(
        self,
        method: str,
        path: str,
        params: dict[str, str] | None,
        body: bytes | None,
        headers: dict[str, str],
        timeout: float,
    ) -> tuple[int, str, str | None, bytes]:
        for attempt in (0, 1):
            try:
                async with self.session.request(
                    method,
                    self.base + path,
                    params=params,
                    data=body,
                    headers=self._headers(headers, fresh_token=attempt == 1),
                    timeout=aiohttp.ClientTimeout(total=timeout),
                ) as response:
                    data = await response.read()
                    if response.status == 401 and self.token_file is not None and attempt == 0:
                        continue
                    return response.status, response.reason or "", response.headers.get("Retry-After"), data
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                raise ApiError(0, type(exc).__name__, f"no answer from the API server: {exc}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def lines(
        self, path: str, params: dict[str, str], connect_timeout: float, read_timeout: float
    ) -> AsyncGenerator[tuple[int, str, bytes]]:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=read_timeout)
        try:
            async with self.session.get(
                self.base + path, params=params, headers=self._headers({"Accept": "application/json"}), timeout=timeout
            ) as response:
                if response.status >= 400:
                    yield response.status, response.reason or "", await response.read()
                    return
                yield response.status, response.reason or "", b""
                # Lines are split here: aiohttp's own readline refuses lines past 64 KiB, and
                # one Workload can be longer than that.
                pending = b""
                async for chunk in response.content.iter_any():
                    pending += chunk
                    *complete, pending = pending.split(b"\n")
                    for line in complete:
                        if line:
                            yield 200, "", line
                if pending.strip():
                    yield 200, "", pending
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ApiError(0, type(exc).__name__, f"watch stream lost: {exc}") from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


class HttpxTransport:
    """lightkube's httpx2 client: every kubeconfig lightkube understands, exec plugins included."""

    def __init__(self, config: SingleConfig, timeout: float) -> None:
        params = client_adapter.ConnectionParams(timeout=httpx.Timeout(timeout))
        self.http: httpx.AsyncClient = client_adapter.AsyncClient(config, params)

    async def send(
        self,
        method: str,
        path: str,
        params: dict[str, str] | None,
        body: bytes | None,
        headers: dict[str, str],
        timeout: float,
    ) -> tuple[int, str, str | None, bytes]:
        try:
            response = await self.http.request(
                method, path, params=params, content=body, headers=headers, timeout=httpx.Timeout(timeout)
            )
        except httpx.HTTPError as exc:
            raise ApiError(0, type(exc).__name__, f"no answer from the API server: {exc}") from None
        return response.status_code, response.reason_phrase, response.headers.get("Retry-After"), response.content

    async def lines(
        self, path: str, params: dict[str, str], connect_timeout: float, read_timeout: float
    ) -> AsyncGenerator[tuple[int, str, bytes]]:
        timeout = httpx.Timeout(connect_timeout, read=read_timeout)
        try:
            async with self.http.stream("GET", path, params=params, timeout=timeout) as response:
                if response.status_code >= 400:
                    yield response.status_code, response.reason_phrase, await response.aread()
                    return
                yield response.status_code, response.reason_phrase, b""
                async for line in response.aiter_lines():
                    if line:
                        yield 200, "", line.encode()
        except httpx.HTTPError as exc:
            raise ApiError(0, type(exc).__name__, f"watch stream lost: {exc}") from None

    async def close(self) -> None:
        await self.http.aclose()


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
            from .http11 import Http11Transport  # a subclass of AiohttpTransport, defined after it

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

    async def delete(self, path: str) -> dict[str, Any]:
        # Background propagation, as kubectl: dependents are left to the garbage collector.
        return await self.request("DELETE", path, params={"propagationPolicy": "Background"})

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
