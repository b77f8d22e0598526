"""The API client over each of its transports (plain HTTP/1.1 for requests, aiohttp for
watches and lightkube's httpx2 client for kubeconfigs with an exec plugin) against a small local HTTP server: every operation the operator
uses, answers, errors, no answer, a rotated token, and watch lines longer than aiohttp's own line
limit. tests/e2e/test_api_transports.py runs the same operations against a real kube-apiserver."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from lightkube.config.kubeconfig import KubeConfig, SingleConfig

from preemption_operator.k8s.api import REQUEST_SECONDS, AiohttpTransport, ApiError, HttpxTransport, KubeApi
from preemption_operator.k8s.http11 import Http11Transport

TRANSPORTS = ("http11", "aiohttp", "httpx")


def api_over(transport: str, config: SingleConfig, timeout: float = REQUEST_SECONDS) -> KubeApi:
    """A KubeApi that sends through `transport` whatever the kubeconfig (KubeApi picks httpx only
    for exec plugins and auth providers)."""
    chosen = {
        "http11": lambda: Http11Transport(config),
        "aiohttp": lambda: AiohttpTransport(config),
        "httpx": lambda: HttpxTransport(config, timeout),
    }[transport]()
    return KubeApi(config, timeout=timeout, transport=chosen)


def config_for(url: str, user: dict[str, object]) -> SingleConfig:
    single = KubeConfig.from_dict(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": url}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    ).get()
    assert single is not None
    return single


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, dict[str, list[str]]]]:
    seen: dict[str, list[str]] = {"authorization": [], "requests": []}
    big = {"type": "ADDED", "object": {"metadata": {"name": "big", "resourceVersion": "7"}, "pad": "x" * 200_000}}

    async def status(request: web.Request) -> web.Response:
        seen["authorization"].append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") == "Bearer old":
            return web.json_response({"kind": "Status", "code": 401, "reason": "Unauthorized"}, status=401)
        if request.match_info["name"] == "missing":
            return web.json_response(
                {"kind": "Status", "code": 404, "reason": "NotFound", "message": "gone"}, status=404
            )
        if request.match_info["name"] == "busy":
            return web.json_response(
                {"kind": "Status", "code": 429, "reason": "TooManyRequests"}, status=429, headers={"Retry-After": "2"}
            )
        return web.json_response({"metadata": {"name": request.match_info["name"]}, "patched": await request.json()})

    async def watch(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        line = json.dumps(big).encode() + b"\n"
        for i in range(0, len(line), 10_000):  # in pieces that split the line anywhere
            await response.write(line[i : i + 10_000])
        await response.write(b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}\n')
        return response

    async def echo(request: web.Request) -> web.Response:
        """What arrived, as JSON: the method, query, content type and body."""
        seen["requests"].append(f"{request.method} {request.path_qs}")
        seen["authorization"].append(request.headers.get("Authorization", ""))
        return web.json_response(
            {
                "method": request.method,
                "query": dict(request.query),
                "contentType": request.headers.get("Content-Type"),
                "body": await request.json() if request.can_read_body else None,
            }
        )

    async def pages(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") == "1":
            return await watch(request)
        seen["requests"].append(f"{request.method} {request.path_qs}")
        if request.query.get("continue") == "page-2":
            return web.json_response({"metadata": {"resourceVersion": "5"}, "items": [{"n": 3}]})
        return web.json_response({"metadata": {"continue": "page-2"}, "items": [{"n": 1}, {"n": 2}]})

    app = web.Application()
    app.router.add_patch("/apis/g/v1/things/{name}/status", status)
    app.router.add_get("/apis/g/v1/things", pages)
    app.router.add_route("*", "/apis/g/v1/echo/{name}", echo)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


def test_the_transport_is_http11_unless_the_kubeconfig_needs_lightkubes_client() -> None:
    assert isinstance(KubeApi(config_for("http://127.0.0.1:9", {"token": "abc"})).transport, Http11Transport)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_every_operation_the_operator_uses(transport: str, server: tuple[str, dict[str, list[str]]]) -> None:
    """get, create, replace, both patches, delete (with the Background propagation), a list in
    pages and a watch: what reaches the server and what comes back, over each transport."""
    url, seen = server
    api = api_over(transport, config_for(url, {"token": "abc"}))
    echo = "/apis/g/v1/echo/x"
    try:
        assert await api.get(echo) == {"method": "GET", "query": {}, "contentType": None, "body": None}
        assert await api.create(echo, {"a": 1}) == {
            "method": "POST", "query": {}, "contentType": "application/json", "body": {"a": 1},
        }  # fmt: skip
        assert await api.replace(echo, {"a": 2}) == {
            "method": "PUT", "query": {}, "contentType": "application/json", "body": {"a": 2},
        }  # fmt: skip
        operations = [{"op": "replace", "path": "/a", "value": 3}]
        assert await api.patch_json(echo, operations) == {
            "method": "PATCH", "query": {}, "contentType": "application/json-patch+json", "body": operations,
        }  # fmt: skip
        assert await api.patch_merge(echo, {"a": 4}) == {
            "method": "PATCH", "query": {}, "contentType": "application/merge-patch+json", "body": {"a": 4},
        }  # fmt: skip
        assert await api.delete(echo) == {
            "method": "DELETE", "query": {"propagationPolicy": "Background"}, "contentType": None, "body": None,
        }  # fmt: skip
        items, version = await api.list("/apis/g/v1/things", page=2)
        assert (items, version) == ([{"n": 1}, {"n": 2}, {"n": 3}], "5")
        assert seen["requests"][-2:] == [
            "GET /apis/g/v1/things?limit=2",
            "GET /apis/g/v1/things?limit=2&continue=page-2",
        ]
        events = [event async for event in api.watch("/apis/g/v1/things", "1", 5)]
        assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
        assert seen["authorization"] == ["Bearer abc"] * 6
    finally:
        await api.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_answers_and_error_statuses(transport: str, server: tuple[str, dict[str, list[str]]]) -> None:
    url, seen = server
    api = api_over(transport, config_for(url, {"token": "abc"}))
    try:
        answer = await api.patch_json("/apis/g/v1/things/a/status", [{"op": "add", "path": "/status", "value": {}}])
        assert answer["metadata"]["name"] == "a" and answer["patched"][0]["op"] == "add"
        assert seen["authorization"] == ["Bearer abc"]
        with pytest.raises(ApiError) as missing:
            await api.patch_json("/apis/g/v1/things/missing/status", [])
        assert (missing.value.code, missing.value.reason, missing.value.message) == (404, "NotFound", "gone")
        with pytest.raises(ApiError) as busy:
            await api.patch_json("/apis/g/v1/things/busy/status", [])
        assert (busy.value.code, busy.value.retry_after) == (429, 2.0)
    finally:
        await api.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_no_answer_is_an_api_error_with_code_0(transport: str) -> None:
    api = api_over(transport, config_for("http://127.0.0.1:9", {"token": "abc"}), timeout=2)
    try:
        with pytest.raises(ApiError) as none:
            await api.get("/api/v1/namespaces")
        assert none.value.code == 0
    finally:
        await api.close()


async def test_a_rotated_token_file_is_read_again_on_401(
    server: tuple[str, dict[str, list[str]]], tmp_path: Path
) -> None:
    url, seen = server
    token = tmp_path / "token"
    token.write_text("old\n")
    api = KubeApi(config_for(url, {"tokenFile": str(token)}))
    try:
        token.write_text("new\n")  # rotated after the first read below
        api.transport._headers({})  # type: ignore[attr-defined]
        api.transport.authorization = "Bearer old"  # type: ignore[attr-defined]
        await api.patch_json("/apis/g/v1/things/a/status", [])
        assert seen["authorization"] == ["Bearer old", "Bearer new"]
    finally:
        await api.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_watch_lines_longer_than_64_kib(transport: str, server: tuple[str, dict[str, list[str]]]) -> None:
    url, _ = server
    api = api_over(transport, config_for(url, {"token": "abc"}))
    try:
        events = [event async for event in api.watch("/apis/g/v1/things", "1", 5)]
        assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
        assert len(events[0]["object"]["pad"]) == 200_000
    finally:
        await api.close()


def test_exec_plugins_go_through_lightkubes_client() -> None:
    config = config_for(
        "https://example.invalid", {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "true"}}
    )
    assert not AiohttpTransport.supports(config)
    assert isinstance(KubeApi(config).transport, HttpxTransport)
