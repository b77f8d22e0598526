"""The operator's HTTP endpoints: /metrics, /healthz (liveness) and /readyz (readiness)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .metrics import Metrics


def make_app(metrics: Metrics, alive: Callable[[], bool], ready: Callable[[], bool]) -> web.Application:
    async def metrics_handler(_: web.Request) -> web.Response:
        body = generate_latest(metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n") if alive() else web.Response(status=503, text="scheduling loop stopped\n")

    async def readyz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n") if ready() else web.Response(status=503, text="cache not synced\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics_handler)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


async def serve(app: web.Application, host: str, port: int) -> web.AppRunner:
    # A probe or scrape in flight must not hold up shutdown (the default waits up to a minute).
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
