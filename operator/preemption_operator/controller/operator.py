"""`preemption-operator run`: the operator built from one set of options. It wires the API clients,
the cache, leader election, the Event recorder, the scheduling rooms (scheduling.py), the job
controller, the informers and the HTTP endpoints, runs them, and shuts them down in order on
SIGTERM or SIGINT (at any moment, startup included)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightkube.config.kubeconfig import SingleConfig

from ..api import kinds
from ..api.meta import LabelSelector
from ..engine.cache import Cache
from ..engine.fair_sharing import OFF, FairSharing
from ..engine.pods_ready import WaitForPodsReady
from ..jobs import framework as job_framework
from ..jobs.reconciler import Settings
from ..k8s.api import KubeApi
from ..k8s.events import EventRecorder
from ..k8s.informer import Informer, Tee
from ..k8s.lease import LeaseClient
from ..k8s.rate_limit import RateLimiter
from ..k8s.writer import COMPONENT, StatusWriter
from . import http
from .dashboard import DashboardSettings
from .dashboard import serve as serve_dashboard
from .decisions import MAX_INFLIGHT_WRITES
from .faults import Faults
from .feature_gates import gate_warnings, prioritize_preemptors
from .integrations import CrdWatch, CustomResourceDefinition, default_namespace_selector, namespace_selector
from .jobs import JobController
from .leader import LeaderElector, default_identity
from .metrics import Metrics
from .scheduling import Scheduling
from .started_pods import POD, StartedPods
from .started_pods import SELECTOR as STARTED_SELECTOR
from .timeline import Timeline
from .visibility import VisibilitySettings
from .visibility import serve as serve_visibility
from .webhooks import WebhookSettings
from .webhooks import serve as serve_webhooks

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
SHUTDOWN_SECONDS = 10.0


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and SERVICE_ACCOUNT_NAMESPACE.is_file()


def own_namespace() -> str:
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    if SERVICE_ACCOUNT_NAMESPACE.is_file():
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    return "default"


@dataclass(frozen=True)
class OperatorOptions:
    """Everything the operator is told at start (the CLI's `run` flags)."""

    metrics_host: str = "0.0.0.0"
    metrics_port: int = 8080
    lease_namespace: str | None = None
    """None: the pod's namespace, else `default`."""
    lease_name: str = "preemption-operator"
    leader_election: bool = True
    lease_seconds: int = 8
    liveness_seconds: float = 120.0
    qps: float = 0.0
    """A client-side limit on requests per second (0: none), as Kueue's clientConnection.qps."""
    burst: int | None = None
    max_inflight_writes: int = MAX_INFLIGHT_WRITES
    """Status writes (admissions, evictions, pending reasons) in flight at once."""
    integrations: tuple[str, ...] | None = None
    """Kueue's framework names of the job kinds to queue (and those they imply); None: every
    known one. Each runs once its kind is served (its CRD Established)."""
    managed_jobs_namespace_selector: LabelSelector | None = None
    """Kueue's managedJobsNamespaceSelector: jobs in other namespaces are left alone. None:
    Kueue's default, every namespace but kube-system and the operator's own."""
    label_keys_to_copy: tuple[str, ...] = ()
    external_frameworks: tuple[tuple[str, str], ...] = ()
    """Kueue's integrations.externalFrameworks, as (apiVersion, kind): an evicted Workload whose
    controller owner is of one of these kinds keeps its quota until that controller clears it."""
    webhooks: WebhookSettings | None = None
    """None: no admission webhooks (queued jobs must be created suspended)."""
    visibility: VisibilitySettings | None = None
    """None: Kueue's visibility API (pending positions) is not served."""
    dashboard: DashboardSettings | None = None
    """None: no dashboard (the default)."""
    fair_sharing: FairSharing = OFF
    wait_for_pods_ready: WaitForPodsReady | None = None
    """Kueue's waitForPodsReady (None: off): PodsReady conditions, timeouts, requeuing backoff."""
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    """Kueue's feature gates as given (most switch nothing here; see feature_gates.APPLIED)."""
    faults: Faults = field(default_factory=Faults)
    """Faults injected for the chaos tests (PREEMPTION_OPERATOR_FAULTS)."""

    def limiter(self) -> RateLimiter | None:
        if self.qps <= 0:
            return None
        return RateLimiter(self.qps, self.burst or max(1, round(2 * self.qps)))


class Operator:
    """The operator's parts, wired. Every replica keeps its cache warm; only the leader decides
    and writes (the status writer and the Event recorder are fenced by the lease)."""

    def __init__(self, config: SingleConfig, options: OperatorOptions) -> None:
        self.options = options
        self.metrics = metrics = Metrics()
        # Requests share one transport; Events have their own limit, as the event recorder of a
        # controller-runtime manager has its own client; the lease has a client of its own, so a
        # renewal never waits behind scheduling writes.
        self.api = KubeApi(
            config, observe=metrics.count_request, limiter=options.limiter(), throttled=metrics.client_throttled.inc
        )
        events_api = KubeApi(
            config,
            observe=metrics.count_request,
            transport=self.api.transport,
            limiter=options.limiter(),
            throttled=metrics.client_throttled.inc,
        )
        self.cache = Cache(
            options.fair_sharing,
            options.wait_for_pods_ready,
            prioritize_preemptors=prioritize_preemptors(options.feature_gates),
        )
        identity = default_identity()
        self.elector: LeaderElector | None = None
        if options.leader_election:
            namespace = options.lease_namespace or own_namespace()
            lease = LeaseClient(config, namespace, options.lease_name, timeout=max(1.0, options.lease_seconds / 4))
            self.elector = LeaderElector(lease, identity, options.lease_seconds)
        writer = StatusWriter(self.api, fence=self.leading)
        self.recorder = EventRecorder(
            events_api, COMPONENT, fence=self.leading, instance=identity, closing=self.closing
        )
        metrics.watch_events(self.recorder.counts)
        self.informers: list[Informer] = []
        self._late: list[asyncio.Task[Any]] = []
        """The informers of integrations whose CRD came after the start."""
        self.integrations = job_framework.enabled(options.integrations)
        own = options.webhooks.namespace if options.webhooks is not None else own_namespace()
        self.namespace_selector = options.managed_jobs_namespace_selector or default_namespace_selector(own)
        self._managed = namespace_selector(self.namespace_selector, own)
        stopping = job_framework.stopping_owners(self.integrations, options.external_frameworks)
        self.timeline = Timeline()
        self.scheduling = Scheduling.build(
            self.cache,
            writer,
            self.recorder,
            metrics,
            self.leading,
            # Without election there is no earlier leader whose last writes a fresh list must catch.
            relist=self.relist if options.leader_election else None,
            faults=options.faults,
            job_stops=lambda wl: wl.owner in stopping,
            timeline=self.timeline,
            max_inflight_writes=options.max_inflight_writes,
        )
        feeder = self.scheduling.feeder
        if options.dashboard is not None:  # only the dashboard shows the timeline
            feeder.preempted = self.timeline.observe
        self.jobs: JobController | None = None
        if self.integrations:
            self.jobs = JobController(
                self.api,
                self.cache,
                feeder,
                writer,
                self.recorder,
                self.leading,
                settings=Settings(
                    label_keys_to_copy=options.label_keys_to_copy,
                    wait_for_pods_ready=options.wait_for_pods_ready is not None,
                ),
                integrations=self.integrations,
                scheduled=lambda: self.scheduling.loop.term_cycles > 0,
                closing=self.closing,
                managed=self.managed,
                started=StartedPods(),
            )
            # The job controller follows Workloads and Namespaces too: it sees each one after the
            # cache has it.
            followed = (kinds.Workload, kinds.Namespace)
            self.informers += [
                Informer(self.api, kind, Tee(feeder, self.jobs) if kind in followed else feeder)
                for kind in kinds.WATCHED
            ]
            for integration in self.integrations:
                if not integration.reconciled:
                    continue  # its webhooks alone serve it
                if integration.crd is None:
                    informer = Informer(self.api, integration.kind, self.jobs, label_selector=integration.selector)
                    self.informers.append(informer)
                else:  # its informer starts once the CRD is there
                    watch = CrdWatch(integration, self._start_integration)
                    selected = f"metadata.name={integration.crd}"
                    self.informers.append(Informer(self.api, CustomResourceDefinition, watch, field_selector=selected))
            self.informers += [Informer(self.api, kind, self.jobs) for kind in self.jobs.child_kinds()]
            assert self.jobs.started is not None
            self.informers.append(Informer(self.api, POD, self.jobs.started, label_selector=STARTED_SELECTOR))
        else:
            self.informers += [Informer(self.api, kind, feeder) for kind in kinds.WATCHED]
        self.synced = asyncio.Event()
        self._services: list[asyncio.Task[Any]] = []

    def leading(self) -> bool:
        return self.elector is None or self.elector.leading()

    def closing(self, namespace: str) -> bool:
        """Whether a namespace is being deleted: nothing new is made or posted there."""
        ns = self.cache.objects["Namespace"].get(namespace)
        return ns is not None and ns.terminating

    def managed(self, namespace: str) -> bool:
        """Whether the jobs of a namespace are managed: it exists (in the cache) and the
        managed-jobs namespace selector matches its labels (Kueue's reconciler skips a job whose
        namespace is not found, or not selected)."""
        ns = self.cache.objects["Namespace"].get(namespace)
        return ns is not None and self._managed.matches(ns.metadata.labels)

    def _start_integration(self, integration: job_framework.Integration) -> None:
        """Its CRD is Established: its objects are listed and watched from now on (its webhooks
        were registered at the start, as Kueue's are)."""
        assert self.jobs is not None
        informer = Informer(self.api, integration.kind, self.jobs, label_selector=integration.selector)
        self.informers.append(informer)
        self._late.append(asyncio.create_task(informer.run(), name=f"informer-{integration.kind.plural}"))

    async def relist(self) -> None:
        await asyncio.gather(*(informer.relist() for informer in self.informers))

    def alive(self) -> bool:
        if not self.synced.is_set():
            return True  # the first list of a big cluster may take a while; readiness says so
        loop = self.scheduling.loop
        parts = [*self._services, *self._late]
        return loop.alive(self.options.liveness_seconds) and not any(t.done() for t in parts)

    def ready(self) -> bool:
        # Not ready while a CRD of the project is missing: it would decide with half the picture.
        return self.synced.is_set() and not any(i.missing and i.kind.group == kinds.GROUP for i in self.informers)

    # -- running

    def _watch_leadership(self) -> None:
        if self.elector is None:
            self.metrics.leader.set(1)
            return
        self.metrics.replica_role = "follower"
        running = asyncio.get_running_loop()

        def changed(now_leading: bool) -> None:
            self.metrics.leader.set(1 if now_leading else 0)
            self.metrics.replica_role = "leader" if now_leading else "follower"
            self.scheduling.loop.poke()
            if now_leading and self.jobs is not None:
                self.jobs.resume()

        def from_thread(now_leading: bool) -> None:
            running.call_soon_threadsafe(changed, now_leading)

        self.elector.on_change = from_thread

    async def _sync(self) -> None:
        # An integration whose CRD a first list finds Established starts then: its first list
        # is waited for too.
        while not all(informer.synced.is_set() for informer in self.informers):
            await asyncio.gather(*(informer.synced.wait() for informer in list(self.informers)))
        # The cache is long-lived: keep the collector from rescanning it (full collections showed up
        # as latency spikes in the topology benchmark).
        gc.freeze()
        self.synced.set()
        log.info(
            "cache synced: %d workloads, %d ClusterQueues",
            len(self.cache.infos),
            len(self.cache.objects["ClusterQueue"]),
        )
        if self.elector is not None:
            self.elector.start()  # compete for the lease only with a synced cache
        self.scheduling.loop.poke()

    async def _webhooks(self, settings: WebhookSettings, hooks: list[Any]) -> None:
        pause = 1.0
        while True:
            try:
                settings = dataclasses.replace(settings, namespace_selector=self.namespace_selector.to_wire())
                hooks.append(await serve_webhooks(self.api, settings, self.integrations))
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # RBAC, a port in use: the rest keeps serving
                log.error("the job webhooks are not served (retrying in %.0fs): %s", pause, exc)
                await asyncio.sleep(pause)
                pause = min(30.0, pause * 2)

    async def _visibility(self, settings: VisibilitySettings, servers: list[Any]) -> None:
        pause = 1.0
        while True:
            try:
                servers.append(await serve_visibility(self.api, settings, self.cache))
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # RBAC, no aggregation layer, a port in use: the rest keeps serving
                log.error("the visibility API is not served (retrying in %.0fs): %s", pause, exc)
                await asyncio.sleep(pause)
                pause = min(30.0, pause * 2)

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop` is set or a part fails (then SystemExit(1), once everything stopped)."""
        for warning in gate_warnings(self.options.feature_gates):
            log.warning("%s", warning)
        if not prioritize_preemptors(self.options.feature_gates):
            log.info(
                "feature gate PrioritizePreemptorWorkloads=false: waiting preemptors take their place in Kueue's order"
            )
        self._watch_leadership()
        tasks = [asyncio.create_task(i.run(), name=f"informer-{i.kind.plural}") for i in self.informers]
        loop_task = asyncio.create_task(self.scheduling.run(self.synced), name="scheduling-loop")
        tasks += [loop_task, asyncio.create_task(self.recorder.run(), name="events")]
        if self.jobs is not None:
            tasks.append(asyncio.create_task(self.jobs.run(), name="jobs"))
        self._services = list(tasks)
        tasks.append(asyncio.create_task(self._sync(), name="initial-sync"))
        options = self.options
        runner = await http.serve(
            http.make_app(self.metrics, self.alive, self.ready), options.metrics_host, options.metrics_port
        )
        log.info("serving /metrics, /healthz and /readyz on %s:%d", options.metrics_host, options.metrics_port)
        hooks: list[Any] = []
        if options.webhooks is not None and self.integrations:
            tasks.append(asyncio.create_task(self._webhooks(options.webhooks, hooks), name="webhooks"))
        elif self.integrations:
            log.info("no admission webhooks: create queued jobs with spec.suspend: true (see README)")
        if options.visibility is not None:
            tasks.append(asyncio.create_task(self._visibility(options.visibility, hooks), name="visibility"))
        if options.dashboard is not None:
            settings = options.dashboard
            try:
                hooks.append(await serve_dashboard(self.api, settings, self.cache, self.timeline, self.leading))
            except OSError as exc:  # a port in use: the rest keeps serving
                log.error("the dashboard is not served on %s:%d: %s", settings.host, settings.port, exc)
        waiter = asyncio.create_task(stop.wait(), name="stop")
        done, _ = await asyncio.wait([waiter, *self._services], return_when=asyncio.FIRST_COMPLETED)
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
        await self.recorder.drain(timeout=0.2)  # Events are best effort: shutdown must stay quick
        if self.elector is not None:
            await asyncio.to_thread(self.elector.stop)
        tasks += self._late
        for task in tasks:
            task.cancel()
        await _settle(tasks)
        waiter.cancel()
        for hook in hooks:
            await hook.cleanup()
        await runner.cleanup()
        await self.api.close()
        log.info("stopped in %.1fs; API requests: %s", time.monotonic() - started, self.metrics.request_summary())
        if failure is not None:
            raise SystemExit(1)


async def _settle(tasks: list[asyncio.Task[Any]]) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(SHUTDOWN_SECONDS):
            await asyncio.gather(*tasks, return_exceptions=True)


def run(config: SingleConfig, options: OperatorOptions, *, cpu_profile: Path | None = None) -> None:
    """The process: the operator until SIGTERM or SIGINT, then exit at once. With `cpu_profile`,
    under cProfile, its statistics written there just before the exit."""
    profiler = None
    if cpu_profile is not None:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()

    async def main() -> None:
        stop = asyncio.Event()
        running = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            running.add_signal_handler(sig, stop.set)
        code = 0
        try:
            await Operator(config, options).run(stop)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        # Everything that matters is done (writes abandoned safely, lease released, sockets
        # closed): skip tearing down the event loop and the interpreter's heap, which took
        # seconds after a large run (Kueue's harness counts it as the controller's wall time).
        if profiler is not None and cpu_profile is not None:
            profiler.disable()
            profiler.dump_stats(cpu_profile)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    asyncio.run(main())
