"""`preemption-operator run`: wires the cache, the watches, the loop, leader election and the
HTTP endpoints together, and shuts them down in order on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import kopf
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError

from ..engine.cache import Cache
from ..engine.objects import ObjectError, parse_object
from ..k8s.resources import WATCHED
from ..k8s.writer import COMPONENT, FIELD_MANAGER, StatusWriter
from ..metrics import Metrics
from . import http
from .handlers import CacheFeeder, register
from .leader import LeaderElector
from .loop import SchedulingLoop

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def own_namespace() -> str:
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    if SERVICE_ACCOUNT_NAMESPACE.is_file():
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    return "default"


async def initial_sync(client: AsyncClient, feeder: CacheFeeder) -> None:
    """Lists every watched kind once, so the first cycle sees every admitted workload (no
    over-admission after a restart); the watches then keep the cache current."""
    for kind, (resource, _group, _version, _plural, namespaced) in WATCHED.items():
        try:
            async for item in client.list(resource, namespace="*" if namespaced else None):
                body = item.to_dict()
                body.setdefault("apiVersion", resource._api_info.resource.api_version)
                body.setdefault("kind", kind)
                try:
                    feeder.cache.upsert(parse_object(body))
                except ObjectError as exc:
                    log.warning("ignoring invalid object: %s", exc)
        except ApiError as exc:
            if exc.status.code == 404:
                log.warning("%s is not served by this cluster (CRD missing?); treating it as empty", kind)
                continue
            raise


async def operate(
    *,
    host: str = "0.0.0.0",
    port: int = 8080,
    lease_namespace: str | None = None,
    lease_name: str = "preemption-operator",
    leader_election: bool = True,
    lease_seconds: int = 8,
    stop: asyncio.Event | None = None,
) -> None:
    stop = stop or asyncio.Event()
    client = AsyncClient(config=KubeConfig.from_env(), field_manager=FIELD_MANAGER)
    metrics = Metrics()
    cache = Cache()
    elector = LeaderElector(
        client,
        lease_namespace or own_namespace(),
        lease_name,
        lease_seconds=lease_seconds,
        renew_seconds=max(1.0, lease_seconds / 4),
    )
    writer = StatusWriter(client)
    loop = SchedulingLoop(cache, writer, metrics, lambda: elector.is_leader or not leader_election)
    feeder = CacheFeeder(cache, loop)
    synced = asyncio.Event()

    registry = kopf.OperatorRegistry()
    register(registry, feeder)
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False
    settings.posting.reporting_component = COMPONENT
    settings.scanning.disabled = True
    settings.watching.server_timeout = 300

    def alive() -> bool:
        return not loop_task.done()

    # Our tasks are created before kopf starts. kopf handles SIGTERM/SIGINT itself (its handler
    # replaces the one `run` installs) and, when it stops, cancels every task created after it
    # started as "hung": the scheduling loop and the elector were cancelled mid-way, the lease
    # was not always released, and `task.exception()` on a cancelled task crashed the shutdown
    # (traceback, exit status 1, ~5 s). Tasks that exist before kopf starts are left alone, so
    # the orderly shutdown below runs whichever way the stop comes.
    loop_task = asyncio.create_task(loop.run(synced), name="scheduling-loop")
    tasks: list[asyncio.Task[Any]] = [loop_task]
    if leader_election:

        async def elect() -> None:
            await synced.wait()  # compete for the lease only with a synced cache
            await elector.run()

        tasks.append(asyncio.create_task(elect(), name="leader-election"))

    async def watch_leadership() -> None:
        while True:
            await elector.leading.wait()
            metrics.leader.set(1)
            loop.config_changed()
            while elector.is_leader:
                await asyncio.sleep(0.5)
            metrics.leader.set(0)

    tasks.append(asyncio.create_task(watch_leadership(), name="leadership-metric"))
    waiter = asyncio.create_task(stop.wait())

    runner = await http.serve(http.make_app(metrics, alive, synced.is_set), host, port)
    # No stop_flag for kopf: it stops by itself on SIGTERM/SIGINT (its handlers replace the ones
    # `run` installs) and is cancelled below when `stop` is set. With stop_flag=stop, a stop by
    # signal left kopf's own flag waiter pending, and kopf waited 5 s for it as a "hung" task.
    kopf_task = asyncio.create_task(
        kopf.operator(registry=registry, settings=settings, clusterwide=True, standalone=True),
        name="kopf",
    )
    await initial_sync(client, feeder)
    # The cache is long-lived: keep the collector from rescanning it (full collections showed up
    # as latency spikes in the topology benchmark).
    gc.freeze()
    synced.set()
    log.info("cache synced: %d workloads, %d ClusterQueues", len(cache.infos), len(cache.objects["ClusterQueue"]))
    loop.poke()
    done, _ = await asyncio.wait([waiter, kopf_task, *tasks], return_when=asyncio.FIRST_COMPLETED)
    failure: BaseException | None = None
    for task in done:
        if task is not waiter and not task.cancelled() and task.exception() is not None:
            failure = task.exception()
            log.error("%s stopped: %r", task.get_name(), failure)
    started = time.monotonic()
    stop.set()
    kopf_task.cancel()  # a no-op when kopf stopped first (on a signal)
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await asyncio.wait_for(kopf_task, timeout=10)
    await loop.drain_events(timeout=3)
    await runner.cleanup()
    await client.close()
    log.info("stopped in %.1fs", time.monotonic() - started)
    if failure is not None:
        raise SystemExit(1)


def run(verbose: bool = False, **kwargs: Any) -> None:
    for noisy in ("httpx", "httpx2", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if not verbose:
        # kopf reports every handled watch event; our handlers only feed the cache.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)

    async def main() -> None:
        stop = asyncio.Event()
        running = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            running.add_signal_handler(sig, stop.set)
        await operate(stop=stop, **kwargs)

    asyncio.run(main())
