"""Headless Chromium driven over the DevTools protocol, for the dashboard's browser test: no
WebDriver and no extra package (aiohttp's WebSocket client speaks the protocol). Start it, open a
page, run JavaScript in it, take a screenshot."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

LISTENING = re.compile(r"DevTools listening on (ws://\S+)")


def find_chromium() -> str | None:
    """$CHROMIUM, else chromium (Debian's package) or chromium-browser on PATH."""
    given = os.environ.get("CHROMIUM")
    if given and os.access(given, os.X_OK):
        return given
    return shutil.which("chromium") or shutil.which("chromium-browser")


class BrowserError(Exception):
    pass


class Browser:
    """One headless Chromium with one page. Use as `async with Browser(path) as browser:`."""

    def __init__(self, executable: str, width: int = 1400, height: int = 900) -> None:
        self.executable = executable
        self.size = (width, height)
        self._profile = tempfile.TemporaryDirectory(prefix="preemption-browser-")
        self._process: asyncio.subprocess.Process | None = None
        self._session: aiohttp.ClientSession | None = None
        self._socket: aiohttp.ClientWebSocketResponse | None = None
        self._ids = itertools.count(1)
        self._answers: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._events: dict[str, list[asyncio.Future[dict[str, Any]]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._drainer: asyncio.Task[None] | None = None
        self.console: list[str] = []
        """What the page logged (console and uncaught errors)."""

    async def __aenter__(self) -> Browser:
        width, height = self.size
        self._process = await asyncio.create_subprocess_exec(
            self.executable,
            "--headless=new",
            "--no-sandbox",  # root in a container has no user namespace sandbox
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            f"--window-size={width},{height}",
            f"--user-data-dir={self._profile.name}",
            "--remote-debugging-port=0",
            "about:blank",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert self._process.stderr is not None
        seen: list[str] = []
        async with asyncio.timeout(60):
            while True:
                line = (await self._process.stderr.readline()).decode(errors="replace")
                if not line:
                    raise BrowserError("chromium exited before it listened:\n" + "".join(seen[-20:]))
                seen.append(line)
                found = LISTENING.search(line)
                if found:
                    break
        self._drainer = asyncio.create_task(self._drain(self._process.stderr))
        browser_url = found.group(1)
        port = browser_url.split("//", 1)[1].split("/", 1)[0]
        self._session = aiohttp.ClientSession()
        async with self._session.get(f"http://{port}/json/list") as answer:
            targets = await answer.json(content_type=None)
        page = next(t for t in targets if t.get("type") == "page")
        self._socket = await self._session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=64 * 1024 * 1024)
        self._reader = asyncio.create_task(self._read())
        await self.send("Page.enable")
        await self.send("Runtime.enable")
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in (self._reader, self._drainer):
            if task is not None:
                task.cancel()
        if self._socket is not None:
            await self._socket.close()
        if self._session is not None:
            await self._session.close()
        if self._process is not None and self._process.returncode is None:
            self._process.terminate()
            try:
                async with asyncio.timeout(5):
                    await self._process.wait()
            except TimeoutError:
                self._process.kill()
                await self._process.wait()
        self._profile.cleanup()

    @staticmethod
    async def _drain(stream: asyncio.StreamReader) -> None:
        while await stream.readline():
            pass

    async def _read(self) -> None:
        assert self._socket is not None
        async for message in self._socket:
            if message.type != aiohttp.WSMsgType.TEXT:
                continue
            data = message.json()
            if "id" in data:
                future = self._answers.pop(data["id"], None)
                if future is not None and not future.done():
                    future.set_result(data)
                continue
            method = data.get("method", "")
            params = data.get("params") or {}
            if method == "Runtime.consoleAPICalled":
                self.console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
            elif method == "Runtime.exceptionThrown":
                self.console.append("uncaught: " + str(params.get("exceptionDetails", {}).get("text", "")))
            for future in self._events.pop(method, []):
                if not future.done():
                    future.set_result(params)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        assert self._socket is not None
        ident = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._answers[ident] = future
        await self._socket.send_json({"id": ident, "method": method, "params": params})
        async with asyncio.timeout(60):
            answer = await future
        if "error" in answer:
            raise BrowserError(f"{method}: {answer['error']}")
        result: dict[str, Any] = answer.get("result") or {}
        return result

    def _next(self, event: str) -> asyncio.Future[dict[str, Any]]:
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._events.setdefault(event, []).append(future)
        return future

    async def open(self, url: str) -> None:
        """Loads `url` and waits for its load event."""
        loaded = self._next("Page.loadEventFired")
        await self.send("Page.navigate", url=url)
        async with asyncio.timeout(60):
            await loaded

    async def evaluate(self, expression: str, *, navigates: bool = False) -> Any:
        """The value of a JavaScript expression in the page (`navigates`: it submits a form or
        follows a link; waits for the next page's load)."""
        loaded = self._next("Page.loadEventFired") if navigates else None
        answer = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in answer:
            raise BrowserError(f"{expression}: {answer['exceptionDetails'].get('text')}")
        if loaded is not None:
            async with asyncio.timeout(60):
                await loaded
        return (answer.get("result") or {}).get("value")

    async def screenshot(self, path: Path) -> Path:
        """A PNG of the whole page."""
        metrics = await self.send("Page.getLayoutMetrics")
        content = metrics.get("cssContentSize") or metrics.get("contentSize") or {}
        width, height = self.size
        clip = {"x": 0, "y": 0, "width": width, "height": max(height, int(content.get("height", height))), "scale": 1}
        shot = await self.send("Page.captureScreenshot", format="png", clip=clip, captureBeyondViewport=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


async def poll(check: Any, timeout: float = 30.0, interval: float = 0.1, what: str = "the page") -> Any:
    """`await check()` until it returns something truthy (AssertionError ends nothing early: it
    is retried); raises the last failure after `timeout` seconds."""
    last: BaseException | None = None
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            while True:
                try:
                    value = await check()
                    if value:
                        return value
                except AssertionError as exc:
                    last = exc
                await asyncio.sleep(interval)
    raise AssertionError(f"{what}: not so after {timeout}s" + (f": {last}" if last else ""))
