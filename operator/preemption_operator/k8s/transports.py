"""How requests reach the API server: the transports behind KubeApi (aiohttp, and lightkube's
httpx2 client for kubeconfigs that need an exec plugin; http11.py builds on the first) and the
error every one of them raises for an answer that is not a success, or for no answer at all."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from importlib import metadata
from typing import Any, Protocol

import aiohttp
import httpx2 as httpx
import msgspec
from lightkube.config import client_adapter
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import User

_decode = msgspec.json.decode


def _version() -> str:
    try:
        return metadata.version("preemption-operator")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "dev"


USER_AGENT = f"preemption-operator/{_version()}"
"""Every request's User-Agent: the API server names the field manager of our writes after it
(the part before the "/"; without one, managedFields say "unknown"), and audit logs show it."""


class ApiError(Exception):
    """The API server answered with an error status (code 0: no answer at all)."""

    def __init__(self, code: int, reason: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"{code} {reason}: {message}" if code else message)
        self.code = code
        self.reason = reason
        self.message = message
        self.retry_after = retry_after


def status_object(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A failure as the API server answers it (metav1.Status), for servers of our own."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


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
            return {**headers, "User-Agent": USER_AGENT, "Authorization": self.authorization}
        return {**headers, "User-Agent": USER_AGENT}

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
                method,
                path,
                params=params,
                content=body,
                headers={**headers, "User-Agent": USER_AGENT},
                timeout=httpx.Timeout(timeout),
            )
        except httpx.HTTPError as exc:
            raise ApiError(0, type(exc).__name__, f"no answer from the API server: {exc}") from None
        return response.status_code, response.reason_phrase, response.headers.get("Retry-After"), response.content

    async def lines(
        self, path: str, params: dict[str, str], connect_timeout: float, read_timeout: float
    ) -> AsyncGenerator[tuple[int, str, bytes]]:
        timeout = httpx.Timeout(connect_timeout, read=read_timeout)
        try:
            async with self.http.stream(
                "GET", path, params=params, headers={"User-Agent": USER_AGENT}, timeout=timeout
            ) as response:
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
