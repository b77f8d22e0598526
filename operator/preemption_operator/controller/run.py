"""`preemption-operator run`: wires the informers, the cache, the loop, leader election, Events and
the HTTP endpoints together, and shuts them down in order on SIGTERM or SIGINT (at any moment,
startup included)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from lightkube.config.kubeconfig import SingleConfig

from ..api import kinds
from ..api.kinds import WATCHED
from ..engine.cache import Cache
from ..engine.fair_sharing import OFF, FairSharing
from ..jobs import framework as job_framework
from ..jobs.reconciler import Settings
from ..k8s.api import KubeApi
from ..k8s.events import EventRecorder
from ..k8s.informer import Informer, Tee
from ..k8s.lease import LeaseClient
from ..k8s.rate_limit import RateLimiter
from ..k8s.writer import COMPONENT, StatusWriter
from . import http
from .faults import Faults
from .jobs import JobController
from .leader import LeaderElector, default_identity
from .metrics import Metrics
from .scheduling import Scheduling
from .webhooks import WebhookSettings
from .webhooks import serve as serve_webhooks

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
SHUTDOWN_SECONDS = 10.0
DEFAULT_INTEGRATIONS = ("batch/job",)


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and SERVICE_ACCOUNT_NAMESPACE.is_file()


def own_namespace() -> str:
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    if SERVICE_ACCOUNT_NAMESPACE.is_file():
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    return "default"


async def operate(
    config: SingleConfig,
    *,
    host: str = "0.0.0.0",
    port: int = 8080,
    lease_namespace: str | None = None,
    lease_name: str = "preemption-operator",
    leader_election: bool = True,
    lease_seconds: int = 8,
    liveness_seconds: float = 120.0,
    stop: asyncio.Event | None = None,
    faults: Faults | None = None,
    qps: float = 0.0,
    burst: int | None = None,
    integrations: tuple[str, ...] = DEFAULT_INTEGRATIONS,
    label_keys_to_copy: tuple[str, ...] = (),
    webhooks: WebhookSettings | None = None,
    fair_sharing: FairSharing = OFF,
) -> None:
    stop = stop or asyncio.Event()
    metrics = Metrics()

    # The lease has its own client: a renewal never waits behind scheduling writes. Events have
    # their own limit, as the event recorder of a controller-runtime manager has its own client.
    def limiter() -> RateLimiter | None:
        return RateLimiter(qps, burst or max(1, round(2 * qps))) if qps > 0 else None

    api = KubeApi(config, observe=metrics.count_request, limiter=limiter(), throttled=metrics.client_throttled.inc)
    events_api = KubeApi(
        config,
        observe=metrics.count_request,
        transport=api.transport,
        limiter=limiter(),
        throttled=metrics.client_throttled.inc,
    )
    cache = Cache(fair_sharing)
    identity = default_identity()
    running = asyncio.get_running_loop()
    elector: LeaderElector | None = None
    if leader_election:
        lease_client = LeaseClient(
            config, lease_namespace or own_namespace(), lease_name, timeout=max(1.0, lease_seconds / 4)
        )
        elector = LeaderElector(lease_client, identity, lease_seconds)

    def leading() -> bool:
        return elector is None or elector.leading()

    writer = StatusWriter(api, fence=leading)

    def closing(namespace: str) -> bool:
        ns = cache.objects["Namespace"].get(namespace)
        return ns is not None and ns.terminating

    recorder = EventRecorder(events_api, COMPONENT, fence=leading, instance=identity, closing=closing)
    metrics.watch_events(
        lambda: {
            "posted": recorder.posted,
            "patched": recorder.patched,
            "dropped": recorder.dropped,
            "filtered": recorder.filtered,
            "fenced": recorder.fenced,
            "failed": recorder.failed,
            "namespace_closing": recorder.closed,
        }
    )
    informers: list[Informer] = []

    async def relist() -> None:
        await asyncio.gather(*(informer.relist() for informer in informers))

    enabled = job_framework.enabled(integrations)
    stopping = job_framework.stopping_owners(enabled)
    # Without election there is no earlier leader whose last writes a fresh list must catch.
    scheduling = Scheduling.build(
        cache,
        writer,
        recorder,
        metrics,
        leading,
        relist=relist if leader_election else None,
        faults=faults,
        job_stops=lambda wl: wl.owner in stopping,
    )
    loop, feeder = scheduling.loop, scheduling.feeder
    jobs: JobController | None = None
    if enabled:
        jobs = JobController(
            api,
            cache,
            feeder,
            writer,
            recorder,
            leading,
            settings=Settings(label_keys_to_copy=label_keys_to_copy),
            integrations=enabled,
            scheduled=lambda: loop.term_cycles > 0,
            closing=closing,
        )
        # The job controller follows Workloads too: it sees each one after the cache has it.
        informers.extend(
            Informer(api, kind, Tee(feeder, jobs) if kind is kinds.Workload else feeder) for kind in WATCHED
        )
        informers.extend(Informer(api, integration.kind, jobs) for integration in enabled)
    else:
        informers.extend(Informer(api, kind, feeder) for kind in WATCHED)
    synced = asyncio.Event()

    def alive() -> bool:
        if not synced.is_set():
            return True  # the first list of a big cluster may take a while; readiness says so
        return loop.alive(liveness_seconds) and not any(t.done() for t in services)

    if elector is not None:
        metrics.replica_role = "follower"

        def changed(now_leading: bool) -> None:
            metrics.leader.set(1 if now_leading else 0)
            metrics.replica_role = "leader" if now_leading else "follower"
            loop.poke()
            if now_leading and jobs is not None:
                jobs.resume()

        def from_thread(now_leading: bool) -> None:
            running.call_soon_threadsafe(changed, now_leading)

        elector.on_change = from_thread
    else:
        metrics.leader.set(1)

    async def sync() -> None:
        await asyncio.gather(*(informer.synced.wait() for informer in informers))
        # The cache is long-lived: keep the collector from rescanning it (full collections showed up
        # as latency spikes in the topology benchmark).
        gc.freeze()
        synced.set()
        log.info("cache synced: %d workloads, %d ClusterQueues", len(cache.infos), len(cache.objects["ClusterQueue"]))
        if elector is not None:
            elector.start()  # compete for the lease only with a synced cache
        loop.poke()

    tasks: list[asyncio.Task[Any]] = [
        asyncio.create_task(informer.run(), name=f"informer-{informer.kind.plural}") for informer in informers
    ]
    loop_task = asyncio.create_task(scheduling.run(synced), name="scheduling-loop")
    tasks.append(loop_task)
    tasks.append(asyncio.create_task(recorder.run(), name="events"))
    if jobs is not None:
        tasks.append(asyncio.create_task(jobs.run(), name="jobs"))
    services = list(tasks)
    tasks.append(asyncio.create_task(sync(), name="initial-sync"))

    def ready() -> bool:
        # Not ready while a CRD of the project is missing: it would decide with half the picture.
        return synced.is_set() and not any(i.missing and i.kind.group == kinds.GROUP for i in informers)

    runner = await http.serve(http.make_app(metrics, alive, ready), host, port)
    log.info("serving /metrics, /healthz and /readyz on %s:%d", host, port)
    hooks: list[Any] = []
    if webhooks is not None and enabled:

        async def webhook_server() -> None:
            pause = 1.0
            while True:
                try:
                    hooks.append(await serve_webhooks(api, webhooks, enabled))
                    return
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # RBAC, a port in use: the rest keeps serving
                    log.error("the job webhooks are not served (retrying in %.0fs): %s", pause, exc)
                    await asyncio.sleep(pause)
                    pause = min(30.0, pause * 2)

        tasks.append(asyncio.create_task(webhook_server(), name="webhooks"))
    elif enabled:
        log.info("no admission webhooks: create queued Jobs with spec.suspend: true (see README)")
    waiter = asyncio.create_task(stop.wait(), name="stop")
    done, _ = await asyncio.wait([waiter, *services], return_when=asyncio.FIRST_COMPLETED)
    failure: BaseException | None = None
    for task in done:
        if task is not waiter and not task.cancelled() and task.exception() is not None:
            failure = task.exception()
            log.error("%s stopped: %r", task.get_name(), failure)
    started = time.monotonic()
    log.info("stopping")
    # No new decisions; the Events already decided go out while this replica still leads; then
    # the lease is given up (a standby takes over at once) and the rest stops.
    loop_task.cancel()
    await _settle([loop_task])
    await recorder.drain(timeout=0.2)  # Events are best effort: shutdown must stay quick
    if elector is not None:
        await asyncio.to_thread(elector.stop)
    for task in tasks:
        task.cancel()
    await _settle(tasks)
    waiter.cancel()
    for hook in hooks:
        await hook.cleanup()
    await runner.cleanup()
    await api.close()
    log.info("stopped in %.1fs; API requests: %s", time.monotonic() - started, metrics.request_summary())
    if failure is not None:
        raise SystemExit(1)


async def _settle(tasks: list[asyncio.Task[Any]]) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(SHUTDOWN_SECONDS):
            await asyncio.gather(*tasks, return_exceptions=True)


def run(config: SingleConfig, **kwargs: Any) -> None:
    async def main() -> None:
        stop = asyncio.Event()
        running = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            running.add_signal_handler(sig, stop.set)
        code = 0
        try:
            await operate(config, stop=stop, **kwargs)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        # Everything that matters is done (writes abandoned safely, lease released, sockets
        # closed): skip tearing down the event loop and the interpreter's heap, which took
        # seconds after a large run (Kueue's harness counts it as the controller's wall time).
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    asyncio.run(main())
