"""A fault-injecting reverse proxy between the operator and kube-apiserver.

It listens on plain HTTP on loopback and forwards every request to the https API server as the
admin (the operator gets a kubeconfig pointing at the proxy, see :meth:`FaultProxy.write_kubeconfig`).
Responses are streamed as they come, so watches (chunked, long-lived) pass through unbuffered.

Faults, changeable at any time from any thread:

- ``set_errors(rate_429=, rate_500=)``: that fraction of writes (POST/PUT/PATCH/DELETE) is
  answered 429 (``Retry-After: 1``) or 500 with a Kubernetes Status body; ``after_forward``
  is the fraction of the 500s sent *after* the request reached the API server (the write
  happened, the client is told it failed);
- ``conflict_storm(True)`` / ``conflict_storm_for(seconds)``: every status PATCH is answered 409;
- ``set_latency(seconds)``: added before forwarding each request (watches only when they start);
- ``cut_connections()``: aborts every client connection, watches included;
- ``on_request(match, action, after=n)``: calls ``action()`` when the n-th matching request
  arrives (to SIGKILL the operator in the middle of a batch of writes).

Every request is recorded (verb, resource, subresource, status, injected fault, time), so tests
can assert on e.g. PATCHes answered 404.

When the upstream API server is down the client connection is aborted (as a refused or reset
connection would look to the client), not answered.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import logging
import random
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
from aiohttp import web

from ..k8s.api import status_object

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Not forwarded in either direction (RFC 9110 hop-by-hop, and what aiohttp recomputes).
HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Host",
        "Content-Length",
    )
)


@dataclass(frozen=True)
class RequestRecord:
    at: float
    """time.monotonic() when the request arrived."""
    method: str
    path: str
    resource: str
    name: str
    subresource: str
    watch: bool
    status: int
    """The status answered (0: the connection was aborted)."""
    injected: str
    """'' when the API server answered; else the fault: '429', '500', '500-after', '409', 'upstream-down'."""


def classify(path: str) -> tuple[str, str, str]:
    """(resource plural, object name, subresource) of an API path; ('', '', '') for others."""
    parts = [p for p in urlsplit(path).path.split("/") if p]
    if not parts:
        return "", "", ""
    if parts[0] == "api":
        rest = parts[2:]
    elif parts[0] == "apis":
        rest = parts[3:]
    else:
        return parts[0], "", ""
    if rest[:1] == ["watch"]:
        rest = rest[1:]
    if len(rest) > 2 and rest[0] == "namespaces":
        rest = rest[2:]
    rest += ["", "", ""]
    return rest[0], rest[1], rest[2]


def is_watch(path: str) -> bool:
    split = urlsplit(path)
    if "/watch/" in split.path:
        return True
    return parse_qs(split.query).get("watch", [""])[0] in ("1", "true", "True")


def status_body(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> bytes:
    return json.dumps(status_object(code, reason, message, details)).encode()


class FaultProxy:
    """See the module docstring. Use as a context manager, or start()/stop()."""

    def __init__(
        self,
        upstream: str,
        *,
        token: str,
        ca_file: Path,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int | None = None,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.token = token
        self.ca_file = Path(ca_file)
        self.host = host
        self.port = port
        self.random = random.Random(seed)
        self._lock = threading.Lock()
        self._records: list[RequestRecord] = []
        self.rate_429 = 0.0
        self.rate_500 = 0.0
        self.after_forward = 0.0
        self.latency = 0.0
        self._storm_until = 0.0
        self._storm_on = False
        self._triggers: list[list[Any]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.ServerRunner | None = None
        self._server: web.Server | None = None
        self._session: aiohttp.ClientSession | None = None
        self.cuts = 0

    # ---- life cycle ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> FaultProxy:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), loop).result(30)
        return self

    async def _start(self) -> None:
        # A broken client connection is the point of some faults: not worth a traceback each.
        logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
        self._session = self._new_session()
        self._server = web.Server(self._handle, handler_cancellation=True, access_log=None)
        self._runner = web.ServerRunner(self._server, shutdown_timeout=1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        sockets = self._runner.addresses
        self.port = int(sockets[0][1])

    def _new_session(self) -> aiohttp.ClientSession:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=context, limit=0, force_close=False),
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
        )

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return

        async def shutdown() -> None:
            if self._runner is not None:
                await self._runner.cleanup()
            if self._session is not None:
                await self._session.close()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        loop.close()
        self._loop = None

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig pointing at the proxy (plain http; the proxy adds the admin token upstream)."""
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "proxy", "cluster": {"server": self.url}}],
                    "users": [{"name": "admin", "user": {"token": self.token}}],
                    "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "admin"}}],
                    "current-context": "proxy",
                },
                indent=2,
            )
        )
        path.chmod(0o600)
        return path

    # ---- controls (any thread) -------------------------------------------------------------

    def set_errors(self, *, rate_429: float = 0.0, rate_500: float = 0.0, after_forward: float = 0.0) -> None:
        with self._lock:
            self.rate_429, self.rate_500, self.after_forward = rate_429, rate_500, after_forward

    def set_latency(self, seconds: float) -> None:
        with self._lock:
            self.latency = seconds

    def conflict_storm(self, on: bool) -> None:
        with self._lock:
            self._storm_on = on

    def conflict_storm_for(self, seconds: float) -> None:
        with self._lock:
            self._storm_until = time.monotonic() + seconds

    def clear_faults(self) -> None:
        with self._lock:
            self.rate_429 = self.rate_500 = self.after_forward = self.latency = 0.0
            self._storm_on, self._storm_until = False, 0.0
            self._triggers.clear()

    def set_upstream(self, upstream: str) -> None:
        with self._lock:
            self.upstream = upstream.rstrip("/")

    def on_request(
        self,
        match: Callable[[str, str, str], bool],
        action: Callable[[], None],
        *,
        after: int = 1,
    ) -> None:
        """Calls ``action()`` (in the proxy's thread, before forwarding) when the ``after``-th
        request with ``match(method, resource, subresource)`` arrives; once."""
        with self._lock:
            self._triggers.append([match, action, after])

    def cut_connections(self) -> int:
        """Aborts every client connection (watches included); returns how many were cut."""
        loop = self._loop
        assert loop is not None

        async def cut() -> int:
            assert self._server is not None
            transports = list(self._server._connections.values())
            for transport in transports:
                transport.abort()
            return len(transports)

        cut_count = asyncio.run_coroutine_threadsafe(cut(), loop).result(10)
        with self._lock:
            self.cuts += 1
        return cut_count

    # ---- what went through -----------------------------------------------------------------

    def records(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    def _select(self, since: float | None, **filters: Any) -> list[RequestRecord]:
        out = []
        for r in self.records():
            if since is not None and r.at < since:
                continue
            if all(getattr(r, k) == v for k, v in filters.items() if v is not None):
                out.append(r)
        return out

    def count(self, *, since: float | None = None, **filters: Any) -> int:
        """Requests matching every given field of RequestRecord (method=, resource=,
        subresource=, status=, injected=, watch=), arrived at or after ``since``."""
        return len(self._select(since, **filters))

    def max_rate(self, *, window: float = 1.0, since: float | None = None, **filters: Any) -> float:
        """The most matching requests in any ``window`` seconds, per second."""
        times = sorted(r.at for r in self._select(since, **filters))
        most = 0
        for i, t in enumerate(times):
            most = max(most, bisect.bisect_right(times, t + window) - i)
        return most / window

    def counts(self, since: float | None = None) -> Counter[tuple[str, str, str, int, str]]:
        """(method, resource, subresource, status, injected) -> requests."""
        return Counter(
            (r.method, r.resource, r.subresource, r.status, r.injected)
            for r in self.records()
            if since is None or r.at >= since
        )

    def summary(self, since: float | None = None, top: int = 25) -> str:
        # Writes first: they are what the faults are about.
        rows = sorted(self.counts(since).items(), key=lambda row: (row[0][0] == "GET", -row[1]))[:top]
        lines = [f"{n:7d}  {m} {res}{'/' + sub if sub else ''} -> {st or 'aborted'}{' (' + inj + ')' if inj else ''}"
                 for (m, res, sub, st, inj), n in rows]  # fmt: skip
        return "\n".join(lines)

    # ---- the proxy -------------------------------------------------------------------------

    def _record(self, request: web.BaseRequest, status: int, injected: str, at: float) -> None:
        resource, name, sub = classify(request.path_qs)
        rec = RequestRecord(
            at, request.method, request.path, resource, name, sub, is_watch(request.path_qs), status, injected
        )
        with self._lock:
            self._records.append(rec)

    def _decide(self, method: str, resource: str, sub: str) -> tuple[str, float, list[Callable[[], None]]]:
        """The fault for one request ('' for none), the latency, and triggered actions."""
        fired: list[Callable[[], None]] = []
        with self._lock:
            for trigger in list(self._triggers):
                match, action, _ = trigger
                if match(method, resource, sub):
                    trigger[2] -= 1
                    if trigger[2] <= 0:
                        self._triggers.remove(trigger)
                        fired.append(action)
            fault = ""
            storm = self._storm_on or time.monotonic() < self._storm_until
            if storm and method == "PATCH" and sub == "status":
                fault = "409"
            elif method in WRITE_VERBS:
                roll = self.random.random()
                if roll < self.rate_429:
                    fault = "429"
                elif roll < self.rate_429 + self.rate_500:
                    fault = "500-after" if self.random.random() < self.after_forward else "500"
            return fault, self.latency, fired

    def _fault_response(self, fault: str, resource: str, name: str) -> web.Response:
        if fault == "429":
            body = status_body(
                429, "TooManyRequests", "Too many requests, please try again later.", {"retryAfterSeconds": 1}
            )
            return web.Response(status=429, body=body, content_type="application/json", headers={"Retry-After": "1"})
        if fault == "409":
            message = (
                f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again"
            )
            body = status_body(409, "Conflict", message, {"name": name, "kind": resource})
            return web.Response(status=409, body=body, content_type="application/json")
        message = 'an error on the server ("chaos: injected") has prevented the request from succeeding'
        return web.Response(
            status=500, body=status_body(500, "InternalError", message), content_type="application/json"
        )

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        arrived = time.monotonic()
        method = request.method
        resource, name, sub = classify(request.path_qs)
        fault, latency, fired = self._decide(method, resource, sub)
        for action in fired:
            action()
        if latency:
            await asyncio.sleep(latency)
        if fault and fault != "500-after":
            self._record(request, int(fault), fault, arrived)
            return self._fault_response(fault, resource, name)

        body = await request.read()
        headers = {
            k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP and k.lower() != "authorization"
        }
        headers["Authorization"] = f"Bearer {self.token}"
        with self._lock:
            upstream = self.upstream
        assert self._session is not None
        try:
            upstream_resp = await self._session.request(
                method, upstream + request.path_qs, headers=headers, data=body or None, allow_redirects=False
            )
        except (TimeoutError, aiohttp.ClientError, OSError):
            self._record(request, 0, "upstream-down", arrived)
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=503)  # never sent: the connection is gone
        try:
            if fault == "500-after":
                await upstream_resp.read()
                self._record(request, 500, fault, arrived)
                return self._fault_response("500", resource, name)
            out_headers = {k: v for k, v in upstream_resp.headers.items() if k.lower() not in HOP_BY_HOP}
            self._record(request, upstream_resp.status, "", arrived)
            if not is_watch(request.path_qs):
                payload = await upstream_resp.read()
                return web.Response(status=upstream_resp.status, body=payload, headers=out_headers)
            response = web.StreamResponse(status=upstream_resp.status, headers=out_headers)
            response.enable_chunked_encoding()
            await response.prepare(request)
            async for chunk in upstream_resp.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response
        except (TimeoutError, aiohttp.ClientError, OSError):
            # The API server went away mid-response: the client sees its connection drop.
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=503)
        finally:
            if is_watch(request.path_qs):
                upstream_resp.close()  # also when the client went away (the handler is cancelled)
            else:
                upstream_resp.release()
