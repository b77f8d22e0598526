"""The API client's transports against a small local HTTP server: answers, errors, no answer,
a rotated token, and watch lines longer than aiohttp's own line limit."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from lightkube.config.kubeconfig import KubeConfig, SingleConfig

from preemption_operator.k8s.api import AiohttpTransport, ApiError, HttpxTransport, KubeApi


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
    seen: dict[str, list[str]] = {"authorization": []}
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

    app = web.Application()
    app.router.add_patch("/apis/g/v1/things/{name}/status", status)
    app.router.add_get("/apis/g/v1/things", watch)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


async def test_answers_and_error_statuses(server: tuple[str, dict[str, list[str]]]) -> None:
    url, seen = server
    api = KubeApi(config_for(url, {"token": "abc"}))
    assert isinstance(api.transport, AiohttpTransport)
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


async def test_no_answer_is_an_api_error_with_code_0() -> None:
    api = KubeApi(config_for("http://127.0.0.1:9", {"token": "abc"}), timeout=2)
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


async def test_watch_lines_longer_than_64_kib(server: tuple[str, dict[str, list[str]]]) -> None:
    url, _ = server
    api = KubeApi(config_for(url, {"token": "abc"}))
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
