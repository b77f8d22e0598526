"""The plain HTTP/1.1 transport against raw servers that answer as the API server may: chunked
bodies, kept-alive connections reused, a kept-alive connection the server closed meanwhile (sent
again on a new one), a connection closed before the answer (no answer: ApiError 0)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from lightkube.config.kubeconfig import KubeConfig, SingleConfig

from preemption_operator.k8s.api import ApiError, KubeApi
from preemption_operator.k8s.http11 import Http11Transport

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[bool]]
"""Answers one request on a connection (the connection's number from 1); False: close it."""


def config_for(url: str) -> SingleConfig:
    single = KubeConfig.from_dict(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": url}}],
            "users": [{"name": "u", "user": {"token": "abc"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    ).get()
    assert single is not None
    return single


async def read_request(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    start = (await reader.readline()).decode().strip()
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return start, headers, body


class RawServer:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        try:
            while not reader.at_eof():
                request = await read_request(reader)
                if not request[0]:
                    break
                self.requests.append(request)
                if not await self.handler(reader, writer, number):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


@pytest.fixture
async def api_for() -> AsyncIterator[Callable[[str], KubeApi]]:
    made: list[KubeApi] = []

    def make(url: str) -> KubeApi:
        api = KubeApi(config_for(url), timeout=5)
        assert isinstance(api.transport, Http11Transport)
        made.append(api)
        return api

    yield make
    for api in made:
        await api.close()


def answer(body: bytes, *, status: str = "200 OK", chunked: bool = False, close: bool = False) -> bytes:
    head = [f"HTTP/1.1 {status}", "Content-Type: application/json"]
    if close:
        head.append("Connection: close")
    if chunked:
        head.append("Transfer-Encoding: chunked")
        middle = len(body) // 2
        payload = b"".join(
            f"{len(part):x}\r\n".encode() + part + b"\r\n" for part in (body[:middle], body[middle:]) if part
        )
        payload += b"0\r\n\r\n"
    else:
        head.append(f"Content-Length: {len(body)}")
        payload = body
    return ("\r\n".join(head) + "\r\n\r\n").encode() + payload


async def test_requests_share_one_kept_alive_connection_and_read_chunked_bodies(api_for) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> bool:
        writer.write(answer(b'{"metadata": {"name": "w"}, "pad": "' + b"x" * 5000 + b'"}', chunked=True))
        await writer.drain()
        return True

    server = RawServer(handler)
    async with server as url:
        api = api_for(url)
        for _ in range(5):
            got = await api.patch_json("/apis/g/v1/namespaces/ns/things/w/status", [{"op": "add", "path": "/a"}])
            assert got["metadata"] == {"name": "w"} and len(got["pad"]) == 5000
    assert server.connections == 1
    start, headers, body = server.requests[0]
    assert start == "PATCH /apis/g/v1/namespaces/ns/things/w/status HTTP/1.1"
    assert headers["authorization"] == "Bearer abc"
    assert headers["content-type"] == "application/json-patch+json"
    assert headers["host"] == url.removeprefix("http://")
    assert body == b'[{"op":"add","path":"/a"}]'


async def test_a_kept_alive_connection_the_server_closed_is_replaced_and_the_request_sent_again(api_for) -> None:
    # The server answers once per connection and then closes it without saying so: the next
    # request finds the old connection dead before any answer, and goes out on a new one.
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> bool:
        writer.write(answer(f'{{"connection": {number}}}'.encode()))
        await writer.drain()
        return False

    server = RawServer(handler)
    async with server as url:
        api = api_for(url)
        assert await api.get("/api/v1/namespaces/a") == {"connection": 1}
        await asyncio.sleep(0.05)  # the close reaches the client
        assert await api.get("/api/v1/namespaces/b") == {"connection": 2}
    assert [r[0] for r in server.requests] == ["GET /api/v1/namespaces/a HTTP/1.1", "GET /api/v1/namespaces/b HTTP/1.1"]


async def test_connection_close_is_honoured(api_for) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> bool:
        writer.write(answer(b"{}", close=True))
        await writer.drain()
        return True  # the server would go on; the client must not

    server = RawServer(handler)
    async with server as url:
        api = api_for(url)
        await api.get("/api/v1/namespaces/a")
        await api.get("/api/v1/namespaces/b")
    assert server.connections == 2


async def test_a_connection_closed_before_the_answer_is_no_answer(api_for) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> bool:
        return False  # read the request, answer nothing, close

    server = RawServer(handler)
    async with server as url:
        api = api_for(url)
        with pytest.raises(ApiError) as raised:
            await api.patch_json("/apis/g/v1/namespaces/ns/things/w/status", [])
    assert raised.value.code == 0
    assert len(server.requests) == 1  # sent once: a new connection's failure is not retried


async def test_an_error_status_with_retry_after(api_for) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> bool:
        body = b'{"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "slow down"}'
        writer.write(
            answer(body, status="429 Too Many Requests").replace(b"\r\n\r\n", b"\r\nRetry-After: 3\r\n\r\n", 1)
        )
        await writer.drain()
        return True

    server = RawServer(handler)
    async with server as url:
        api = api_for(url)
        with pytest.raises(ApiError) as raised:
            await api.get("/api/v1/namespaces/a")
    assert (raised.value.code, raised.value.reason, raised.value.retry_after) == (429, "TooManyRequests", 3.0)
