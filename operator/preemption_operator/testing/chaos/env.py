"""One chaos run put together: its topology, the invariant monitor, the operators behind their
fault proxies, the load, and the figures."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import secrets
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..control_plane import ControlPlane, free_port
from ..fault_proxy import FaultProxy
from ..operator_process import OperatorProcess
from ..workload_status import reservation
from .api import FAULTS_ENV, LEASE_PATH, MANAGED, WEBHOOKS, ApiError, ApiUnavailable, KubeClient, now_s
from .figures import Figures
from .load import DriverConfig, ForeignWriter, WorkloadDriver
from .monitor import InvariantMonitor, Violation
from .replicas import WebhookFront, process_state
from .settled import wait_settled
from .topology import DEFAULT_QUEUES, QueueSpec, Topology, new_pod


class ChaosEnv:
    """A run: its topology on the control plane, the invariant monitor, the operators (each
    behind a FaultProxy of its own unless ``direct``), the load and the figures.

    Clients of the test (monitor, driver, writer) use every kube-apiserver of the plane, the
    last added first, so they keep working while the operators' one (the first) is down."""

    def __init__(
        self,
        plane: ControlPlane,
        workdir: Path,
        *,
        name: str = "chaos",
        seed: int | None = None,
        queues: Sequence[QueueSpec] = DEFAULT_QUEUES,
        lease_seconds: int = 4,
        jobsets: bool = True,
    ) -> None:
        self.plane = plane
        self.jobsets = jobsets
        """The JobSet controller runs: JobSets are among the load."""
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.seed = seed if seed is not None else random.randrange(1 << 30)
        self.random = random.Random(self.seed)
        self.topology = Topology(f"{name}-{secrets.token_hex(2)}", queues)
        servers = [api.server for api in reversed(plane.apiservers)]
        self.client = KubeClient(servers, plane.token, plane.ca_file)
        self.monitor = InvariantMonitor(self.client, self.topology)
        self.lease_name = f"{self.topology.prefix}-lease"
        self.lease_seconds = lease_seconds
        self.operators: dict[str, OperatorProcess] = {}
        self.all_operators: list[OperatorProcess] = []
        self.proxies: dict[str, FaultProxy] = {}
        self.driver: WorkloadDriver | None = None
        self.writer: ForeignWriter | None = None
        self.figures = Figures()
        self.extra_violations: list[Violation] = []
        self._writers_done: list[ForeignWriter] = []
        """Stopped writers whose successes I3 has not been checked against yet."""
        self.webhook_ports: dict[str, int] = {}
        """Replica name -> the port it serves its webhooks on (the same after a restart)."""
        self.front = WebhookFront(self._webhook_ports)
        self._webhooks_checked = False

    # -- life cycle

    def __enter__(self) -> ChaosEnv:
        self.front.start()
        self.topology.apply(self.client)
        self.monitor.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.stop_load()
        for op in self.all_operators:
            if op.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(op.popen.pid, signal.SIGCONT)  # type: ignore[union-attr]
                try:
                    op.stop(timeout=10)
                except AssertionError:
                    op.kill()
        self.monitor.stop()
        with contextlib.suppress(ApiError):
            self.client.request("DELETE", LEASE_PATH.format(namespace="default", name=self.lease_name))
        with contextlib.suppress(ApiError):
            self._unregister_webhooks()
        with contextlib.suppress(ApiError):
            self.topology.delete(self.client)
        for proxy in self.proxies.values():
            proxy.stop()
        self.front.stop()

    def _unregister_webhooks(self) -> None:
        """With the operators gone: no later create may wait on their webhooks, and no Pod of
        the run on their finalizer."""
        for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            self.client.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}/{WEBHOOKS}")
        selector = quote(f"{MANAGED}=true")
        for ns in self.topology.namespaces:
            pods, _ = self.client.list_items(f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}")
            for pod in pods:
                if MANAGED in (pod["metadata"].get("finalizers") or []):
                    left = [f for f in pod["metadata"]["finalizers"] if f != MANAGED]
                    self.client.request(
                        "PATCH",
                        f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}",
                        {"metadata": {"finalizers": left or None}},
                        content_type="application/merge-patch+json",
                    )

    def elapsed(self) -> float:
        return self.monitor._elapsed()

    # -- operators

    def proxy_for(self, name: str) -> FaultProxy:
        proxy = self.proxies.get(name)
        if proxy is None:
            proxy = FaultProxy(
                self.plane.server,
                token=self.plane.token,
                ca_file=self.plane.ca_file,
                seed=self.random.randrange(1 << 30),
            )
            proxy.start()
            self.proxies[name] = proxy
        return proxy

    def start_operator(
        self, name: str, *, faults: str | None = None, direct: bool = False, ready: bool = True
    ) -> OperatorProcess:
        """Starts (or restarts) replica ``name``; with ``faults`` set as PREEMPTION_OPERATOR_FAULTS."""
        env = dict(self.plane.env)
        env.pop(FAULTS_ENV, None)
        if faults:
            env[FAULTS_ENV] = faults
        kubeconfig = (
            self.plane.kubeconfig
            if direct
            else self.proxy_for(name).write_kubeconfig(self.workdir / f"kubeconfig-{name}")
        )
        port = self.webhook_ports.setdefault(name, free_port())
        webhooks = [f"--webhook-port={port}", "--webhook-host=127.0.0.1", f"--webhook-url={self.front.url}"]
        if os.environ.get("CHAOS_OPERATOR_VERBOSE"):
            webhooks.append("--verbose")  # debug logs in operator-<name>.log, for chasing a violation
        op = OperatorProcess(
            name,
            kubeconfig,
            self.workdir,
            lease_name=self.lease_name,
            lease_seconds=self.lease_seconds,
            base_env=env,
            extra_args=webhooks,
        )
        self.operators[name] = op
        self.all_operators.append(op)
        op.start()
        if ready:
            op.wait_ready(timeout=60)
            if not self._webhooks_checked:
                self.wait_webhooks()
        return op

    def _webhook_ports(self) -> list[int]:
        """The webhook ports of the replicas that are up (not stopped): the front's choices."""
        return [
            self.webhook_ports[op.name]
            for op in self.operators.values()
            if op.alive() and op.name in self.webhook_ports and process_state(op.popen.pid) not in ("T", "")  # type: ignore[union-attr]
        ]

    def wait_webhooks(self, timeout: float = 60.0) -> None:
        """Until every kube-apiserver of the plane gates a queued Pod at creation (a dry run):
        the replicas registered the webhooks at the front's URL (in etcd, which the API servers
        share) and each API server has read the registration."""
        probe = new_pod("webhook-probe", self.topology.namespaces[0], "a1", 1, self.topology.priority_class(0), 1)
        path = f"/api/v1/namespaces/{self.topology.namespaces[0]}/pods?dryRun=All"
        for api in self.plane.apiservers:
            if not api.alive():
                continue
            client = KubeClient([api.server], self.plane.token, self.plane.ca_file)
            deadline = now_s() + timeout
            last: Any = None
            while True:
                try:
                    status, last = client.request("POST", path, probe)
                except ApiUnavailable as exc:
                    status, last = 0, str(exc)
                gates = ((last if isinstance(last, dict) else {}).get("spec") or {}).get("schedulingGates")
                if status == 201 and gates:
                    break
                if now_s() > deadline:
                    raise AssertionError(
                        f"{api.server} did not gate a queued Pod within {timeout:.0f}s (the operator's webhooks "
                        f"at {self.front.url}): HTTP {status}: {str(last)[:300]}\n{self.diagnostics()}"
                    )
                time.sleep(0.2)
        self._webhooks_checked = True

    def lease_holder(self) -> str | None:
        try:
            lease = self.client.get(LEASE_PATH.format(namespace="default", name=self.lease_name))
        except ApiError:
            return None
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
        return str(holder) if holder else None

    def leader(self) -> OperatorProcess | None:
        holder = self.lease_holder() or ""
        name = holder.rpartition("_")[0]
        op = self.operators.get(name)
        return op if op is not None and op.alive() else None

    def wait_leader(self, *, other_than: str | None = None, timeout: float = 30.0) -> tuple[OperatorProcess, float]:
        """The live replica holding the Lease (not ``other_than``), and when it was seen."""
        deadline = now_s() + timeout
        while now_s() < deadline:
            op = self.leader()
            if op is not None and op.name != other_than:
                return op, now_s()
            time.sleep(0.1)
        raise AssertionError(
            f"no replica (other than {other_than}) took the Lease within {timeout:.0f}s; holder: {self.lease_holder()}\n{self.diagnostics()}"
        )

    def diagnostics(self) -> str:
        """The operators' last log lines, and every line of theirs naming an object a violation
        suspects (the last 40 of them per operator)."""
        names = {name for v in self.violations() for name in v.names}
        parts = [op.tail(40) for op in self.operators.values()]
        if names:
            for op in self.operators.values():
                named = [line for line in op.log().splitlines() if any(name in line for name in names)]
                parts.append(
                    f"--- operator {op.name}, its log lines naming {', '.join(sorted(names))} (last 40):\n"
                    + "\n".join(named[-40:])
                )
        return "\n".join(parts)

    # -- load

    def start_load(self, config: DriverConfig | None = None, *, foreign_rate: float = 10.0) -> None:
        config = config or DriverConfig()
        if not self.jobsets:
            config = dataclasses.replace(config, jobsets=0.0)
        self.driver = WorkloadDriver(
            self.client, self.topology, self.monitor, config, seed=self.random.randrange(1 << 30)
        ).start()
        if foreign_rate > 0:
            self.writer = ForeignWriter(
                self.client, self.monitor, foreign_rate, seed=self.random.randrange(1 << 30)
            ).start()

    def stop_load(self) -> None:
        if self.driver is not None:
            self.driver.stop()
            self.figures.driver.update(self.driver.stats)
            self.driver = None
        if self.writer is not None:
            self.writer.stop()
            self.figures.foreign_writes += self.writer.writes
            self.figures.foreign_seconds += self.writer.stopped - self.writer.started
            self._writers_done.append(self.writer)
            self.writer = None

    def set_errors(self, **kwargs: float) -> None:
        for proxy in self.proxies.values():
            proxy.set_errors(**kwargs)

    def settle(self, label: str, timeout: float = 60.0) -> tuple[float | None, list[str]]:
        """Stops the load, waits for I4 and records how long it took."""
        self.stop_load()
        for proxy in self.proxies.values():
            proxy.clear_faults()
        seconds, problems = wait_settled(self.client, self.topology, timeout)
        self.figures.settles.append((label, seconds))
        return seconds, problems

    def violations(self) -> list[Violation]:
        for writer in self._writers_done:
            self.monitor.check_foreign(writer.successes())
        self._writers_done.clear()
        return [*self.monitor.violations, *self.extra_violations]

    def report(self) -> str:
        self.violations()
        parts = [self.monitor.report()]
        if self.extra_violations:
            parts.append("other violations:\n" + "\n".join(f"  {v}" for v in self.extra_violations))
        for name, proxy in self.proxies.items():
            parts.append(f"requests of operator {name} (through its proxy):\n{proxy.summary(top=12)}")
        parts.append(self.figures.markdown())
        if self.figures.takeovers:
            parts.append(self.figures.takeover_table())
        parts += [f"note: {n}" for n in self.figures.notes]
        return "\n".join(parts)

    def assert_promise(self, settle_label: str, settle_timeout: float = 60.0) -> None:
        """The test's end: I4 within ``settle_timeout``, then no violation of I1-I3 anywhere."""
        __tracebackhide__ = True
        seconds, problems = self.settle(settle_label, settle_timeout)
        violations = self.violations()
        failures = []
        if seconds is None:
            failures.append(
                f"[I4] not settled within {settle_timeout:.0f}s after the faults stopped:\n  "
                + "\n  ".join(problems[:30])
            )
        if violations:
            failures.append(self.report())
        if failures:
            raise AssertionError("\n".join(failures) + f"\n(seed {self.seed})\n{self.diagnostics()}")

    # -- deterministic preparation for the leader scenarios

    def fill_solo(self, *, fill: int = 4, waiting: int = 2) -> tuple[list[str], list[str]]:
        """Fills ClusterQueue `solo` (no cohort, 4 cpu) with ``fill`` 1-cpu Workloads (admitted)
        and leaves ``waiting`` more pending behind them."""
        assert self.driver is None or self.driver._paused.is_set()
        ns = self.topology.namespaces[0]
        maker = WorkloadDriver(self.client, self.topology, self.monitor, seed=self.random.randrange(1 << 30))
        stamp = secrets.token_hex(2)
        fills = [
            maker.create("solo", cpu=1, priority=0, namespace=ns, name=f"solo-fill-{stamp}-{i}") for i in range(fill)
        ]
        self.wait_for(
            lambda: all(reservation(self.monitor.current().get(k, {}))[0] for k in fills), "the solo queue filled", 60
        )
        waits = [
            maker.create("solo", cpu=1, priority=0, namespace=ns, name=f"solo-wait-{stamp}-{i}") for i in range(waiting)
        ]
        return fills, waits

    def wait_for(self, check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
        deadline = now_s() + timeout
        while True:
            result = check()
            if result:
                return result
            if now_s() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{self.diagnostics()}")
            time.sleep(0.1)
