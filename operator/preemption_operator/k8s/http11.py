"""Plain HTTP/1.1 requests over kept-alive connections, for the operator's hot path.

Every admission, eviction and status is one small request; aiohttp spends most of its client CPU
per request on machinery this client does not need (cookies, redirects, tracing, multidict
headers, a response object). Here a request is one write of prepared bytes and a response is a
status line, a few headers and a body read by length or by chunks: a fraction of the CPU per
request, on the same cores as the API server the operator waits for. Watches keep aiohttp's
streaming (`lines`), inherited: they are long-lived, so their per-request cost does not matter.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from urllib.parse import urlencode, urlsplit

from lightkube.config.kubeconfig import SingleConfig

from .transports import AiohttpTransport, ApiError

MAX_IDLE = 64
"""Connections kept open between requests; more may be open at once while requests wait."""
MAX_HEADER_LINES = 200


class _Stale(Exception):
    """A kept-alive connection was closed by the server before any of the answer arrived: the
    request was not processed (an HTTP server closes idle connections only between requests),
    so it is sent again on a new connection."""


class Http11Transport(AiohttpTransport):
    """Requests over HTTP/1.1 with keep-alive, the kubeconfig's TLS and authorization as
    AiohttpTransport reads them."""

    def __init__(self, config: SingleConfig) -> None:
        super().__init__(config)
        url = urlsplit(self.base)
        self.host = url.hostname or "localhost"
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.prefix = url.path.rstrip("/")
        default_port = (url.scheme == "https" and self.port == 443) or (url.scheme == "http" and self.port == 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if default_port else f"{host}:{self.port}"
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        context: ssl.SSLContext | None = self.ssl if isinstance(self.ssl, ssl.SSLContext) else None
        return await asyncio.open_connection(
            self.host, self.port, ssl=context, server_hostname=self.host if context is not None else None
        )

    async def send(
        self,
        method: str,
        path: str,
        params: dict[str, str] | None,
        body: bytes | None,
        headers: dict[str, str],
        timeout: float,
    ) -> tuple[int, str, str | None, bytes]:
        target = self.prefix + path + ("?" + urlencode(params) if params else "")
        try:
            async with asyncio.timeout(timeout):
                for attempt in (0, 1):
                    answer = await self._exchange(method, target, body, self._headers(headers, attempt == 1))
                    if answer[0] == 401 and self.token_file is not None and attempt == 0:
                        continue  # a rotated service-account token: read it again and retry
                    return answer
        except (OSError, asyncio.IncompleteReadError, ValueError, TimeoutError) as exc:
            reason = type(exc).__name__
            raise ApiError(0, reason, f"no answer from the API server: {exc or reason}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _exchange(
        self, method: str, target: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, str, str | None, bytes]:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.host_header}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")
        while self._idle:
            connection = self._idle.pop()
            if connection[1].is_closing():
                continue
            try:
                return await self._over(connection, request, reused=True)
            except _Stale:
                continue
        return await self._over(await self._connect(), request, reused=False)

    async def _over(
        self, connection: tuple[asyncio.StreamReader, asyncio.StreamWriter], request: bytes, *, reused: bool
    ) -> tuple[int, str, str | None, bytes]:
        reader, writer = connection
        keep = False
        try:
            writer.write(request)
            try:
                status_line = await reader.readline()
            except (ConnectionError, asyncio.IncompleteReadError):
                if reused:
                    raise _Stale() from None
                raise
            if not status_line:
                if reused:
                    raise _Stale()
                raise ConnectionResetError("the API server closed the connection without an answer")
            version, _, rest = status_line.decode("latin-1").rstrip("\r\n").partition(" ")
            code_text, _, phrase = rest.partition(" ")
            if not version.startswith("HTTP/1.") or not code_text.isdigit():
                raise ValueError(f"not an HTTP/1.1 answer: {status_line[:80]!r}")
            fields: dict[str, str] = {}
            for _ in range(MAX_HEADER_LINES):
                line = await reader.readline()
                if line in (b"\r\n", b"\n", b""):
                    break
                name, _, value = line.decode("latin-1").partition(":")
                fields[name.strip().lower()] = value.strip()
            else:
                raise ValueError("too many header lines in the API server's answer")
            data = await _read_body(reader, fields)
            keep = fields.get("connection", "").lower() != "close" and (
                "content-length" in fields or "chunked" in fields.get("transfer-encoding", "").lower()
            )
            return int(code_text), phrase, fields.get("retry-after"), data
        finally:
            if keep and len(self._idle) < MAX_IDLE:
                self._idle.append(connection)
            else:
                writer.close()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for _, writer in idle:
            writer.close()
        for _, writer in idle:
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        await super().close()


async def _read_body(reader: asyncio.StreamReader, fields: dict[str, str]) -> bytes:
    if "chunked" in fields.get("transfer-encoding", "").lower():
        parts: list[bytes] = []
        while True:
            size_line = await reader.readline()
            size = int(size_line.split(b";", 1)[0].strip() or b"x", 16)
            if size == 0:
                # Trailers (none from the API server), then the blank line ending the message.
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(parts)
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
    length = fields.get("content-length")
    if length is not None:
        return await reader.readexactly(int(length))
    return await reader.read()  # no length: the body ends with the connection
