"""The fault families, each a function over a ChaosEnv: shared by the short suite
(tests/e2e/test_chaos.py) and the long soak (benchmarks/chaos_soak.py)."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..control_plane import ApiServer
from ..fault_proxy import FaultProxy
from ..operator_process import OperatorProcess
from ..workload_status import reservation
from .api import FAULTS_ENV, STOP_LINE, ApiError, now_s
from .env import ChaosEnv
from .figures import Outage, Takeover
from .load import WorkloadDriver
from .monitor import Violation
from .replicas import HookMissing, process_state
from .settled import wait_settled


def _is_workload_status_patch(method: str, resource: str, sub: str) -> bool:
    return method == "PATCH" and resource == "workloads" and sub == "status"


def kill_storm(
    env: ChaosEnv,
    kills: int,
    *,
    replicas: Sequence[str] = ("op-a", "op-b"),
    pause: tuple[float, float] = (2.0, 6.0),
    mid_batch_every: int = 2,
) -> None:
    """kill -9 the leader ``kills`` times (every ``mid_batch_every``-th right after its proxy
    passed on the n-th Workload status PATCH of a batch; the others at a random moment), restart
    it as a standby each time, and time the takeovers. Replicas must be running (through proxies)."""
    for i in range(kills):
        time.sleep(env.random.uniform(*pause))
        leader, _ = env.wait_leader(timeout=60)
        mid_batch = i % mid_batch_every == 0
        fired = threading.Event()
        if mid_batch:
            pid = leader.popen.pid  # type: ignore[union-attr]

            def kill_now(pid: int = pid, fired: threading.Event = fired) -> None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                fired.set()

            env.proxy_for(leader.name).on_request(_is_workload_status_patch, kill_now, after=env.random.randint(1, 4))
            fired.wait(20)
            if not fired.is_set():
                env.proxy_for(leader.name).clear_faults()
                mid_batch = False  # no batch came: kill it anyway
        killed_at = now_s()
        leader.kill()
        note = "" if not mid_batch or fired.is_set() else "no batch within 20 s"
        take = Takeover("kill -9 (mid-batch)" if mid_batch else "kill -9", leader.name, env.elapsed(), note=note)
        env.figures.takeovers.append(take)
        try:
            _, seen = env.wait_leader(other_than=leader.name, timeout=60)
            take.lease_s = seen - killed_at
        except AssertionError as exc:
            take.note = f"no new leader: {str(exc)[:200]}"
        env.start_operator(leader.name)  # back as a standby
        first = _wait_first_admission(env, killed_at, 30)
        if first is not None:
            take.first_admission_s = first - killed_at


def _wait_first_admission(env: ChaosEnv, since: float, timeout: float) -> float | None:
    deadline = now_s() + timeout
    while now_s() < deadline:
        first = env.monitor.first_admission_after(since)
        if first is not None:
            return first
        time.sleep(0.1)
    return None


def _leader_scenario(env: ChaosEnv, faults: str, *, fault_name: str) -> dict[str, Any]:
    """Common to the stop-before-write and stall scenarios: a settled, full `solo` queue with two
    Workloads waiting; replica `hooked` (with the fault) leads, `standby` stands by; two running
    Workloads finish, so the leader decides to admit the waiting ones and hits the fault; then two
    higher-priority Workloads arrive for the same freed quota."""
    if env.driver is not None:
        env.driver.pause()
    for op in env.operators.values():
        if op.alive():
            op.stop()
    plain = env.start_operator("plain")
    env.wait_leader(timeout=60)
    # An empty solo queue (an earlier round may have left Workloads in it).
    for key, obj in env.monitor.current().items():
        if obj["spec"].get("queueName") == "solo":
            with contextlib.suppress(ApiError):
                WorkloadDriver(env.client, env.topology, env.monitor).delete(key)
    env.wait_for(
        lambda: not any(o["spec"].get("queueName") == "solo" for o in env.monitor.current().values()),
        "the solo queue to be empty",
    )
    fills, waits = env.fill_solo()
    seconds, problems = wait_settled(env.client, env.topology, 60)
    assert seconds is not None, f"not settled before the {fault_name} scenario: {problems}"
    plain.stop()  # releases the Lease
    hooked = env.start_operator("hooked", faults=faults)
    env.wait_for(lambda: (env.lease_holder() or "").startswith("hooked_"), "the hooked replica to lead", 30)
    standby = env.start_operator("standby")
    time.sleep(1.0)  # a cycle or two of the new leader over the settled state: no admission
    maker = WorkloadDriver(env.client, env.topology, env.monitor, seed=env.random.randrange(1 << 30))
    freed_at = now_s()
    for key in fills[:2]:
        assert maker.finish(key), f"could not finish {key}"
    return {"hooked": hooked, "standby": standby, "fills": fills, "waits": waits, "maker": maker, "freed_at": freed_at}


def leader_stop_before_write(env: ChaosEnv) -> Takeover:
    """The leader freezes (SIGSTOP, by its own fault hook) after deciding admissions and before
    writing them; the standby takes over and admits others into the freed quota; SIGCONT. The
    resumed replica must write nothing: its lease ran out while it was stopped."""
    s = _leader_scenario(env, "stop-before-write=1", fault_name="stop-before-write")
    hooked: OperatorProcess = s["hooked"]
    pid = hooked.popen.pid  # type: ignore[union-attr]
    deadline = now_s() + 30
    while process_state(pid) != "T":
        admitted_by_leader = [k for k in s["waits"] if reservation(env.monitor.current().get(k, {}))[0]]
        if admitted_by_leader or now_s() > deadline or not hooked.alive():
            raise HookMissing(
                f"the operator has no stop-before-write fault hook: with {FAULTS_ENV}=stop-before-write=1 it "
                f"{'admitted ' + ', '.join(admitted_by_leader) if admitted_by_leader else 'did not stop'} "
                f"instead of logging {STOP_LINE!r} and stopping itself (state {process_state(pid) or 'gone'!r})\n{hooked.tail(30)}"
            )
        time.sleep(0.05)
    stopped_at = now_s()
    assert STOP_LINE in hooked.log(), f"stopped without logging {STOP_LINE!r}"
    take = Takeover("SIGSTOP before write", hooked.name, env.elapsed())
    env.figures.takeovers.append(take)
    ns = env.topology.namespaces[0]
    stamp = secrets.token_hex(2)
    urgent = [
        s["maker"].create("solo", cpu=1, priority=100, namespace=ns, name=f"solo-urgent-{stamp}-{i}") for i in range(2)
    ]
    _, seen = env.wait_leader(other_than=hooked.name, timeout=60)
    take.lease_s = seen - stopped_at
    env.wait_for(
        lambda: all(reservation(env.monitor.current().get(k, {}))[0] for k in urgent),
        "the standby to admit the urgent Workloads into the freed quota",
        60,
    )
    first = env.monitor.first_admission_after(stopped_at)
    take.first_admission_s = None if first is None else first - stopped_at
    proxy = env.proxy_for(hooked.name)
    continued_at = now_s()
    os.kill(pid, signal.SIGCONT)
    # Long enough for the stale batch to go out (it would at once) and the lease to be re-checked.
    time.sleep(max(3.0, env.lease_seconds))
    stale = proxy.count(since=continued_at, method="PATCH", resource="workloads", subresource="status")
    if stale:
        env.extra_violations.append(
            Violation(
                "stale-write",
                env.elapsed(),
                hooked.name,
                f"{stale} Workload status PATCHes sent after SIGCONT, past its lease (the standby held it)",
            )
        )
    take.note = f"{stale} stale Workload writes after SIGCONT"
    hooked.stop()
    return take


class _HealthProbe:
    """Polls an operator's /healthz; the longest time it went unanswered (an event-loop stall)."""

    def __init__(self, op: OperatorProcess) -> None:
        self.op = op
        self.longest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        last_ok = now_s()
        while not self._stop.wait(0.1):
            if self.op.get("/healthz", timeout=0.5)[0] == 200:
                last_ok = now_s()
            else:
                self.longest = max(self.longest, now_s() - last_ok)


def leader_stall(env: ChaosEnv, seconds: float = 6.0) -> Takeover:
    """The leader blocks its event loop for ``seconds`` (> the lease) after deciding admissions and
    before writing them (stall-before-write hook), while higher-priority Workloads arrive for the
    freed quota. It may keep its lease (renewed on a thread of its own) or lose it; either way no
    ClusterQueue may be over-admitted."""
    s = _leader_scenario(env, f"stall-before-write={seconds:g}:1", fault_name="stall-before-write")
    hooked: OperatorProcess = s["hooked"]
    take = Takeover("event-loop stall", hooked.name, env.elapsed())
    with _HealthProbe(hooked) as probe:
        time.sleep(0.5)
        ns = env.topology.namespaces[0]
        stamp = secrets.token_hex(2)
        urgent = [
            s["maker"].create("solo", cpu=1, priority=100, namespace=ns, name=f"solo-urgent-{stamp}-{i}")
            for i in range(2)
        ]
        holders = set()
        deadline = now_s() + seconds + 6
        while now_s() < deadline:
            holder = (env.lease_holder() or "").rpartition("_")[0]
            if holder == "standby" and take.lease_s is None:
                take.lease_s = now_s() - s["freed_at"]
                first = env.monitor.first_admission_after(s["freed_at"] + 0.5)
                take.first_admission_s = None if first is None else first - s["freed_at"]
            holders.add(holder)
            time.sleep(0.2)
    stalled = probe.longest
    hook_seen = "fault injection" in hooked.log()
    if not hook_seen and stalled < seconds / 2:
        raise HookMissing(
            f"the operator has no stall-before-write fault hook: with {FAULTS_ENV}=stall-before-write={seconds:g}:1 "
            f"it logged no 'fault injection' line and /healthz was never unanswered for more than {stalled:.1f}s\n{hooked.tail(30)}"
        )
    env.figures.takeovers.append(take)
    lost = "standby" in holders
    take.note = f"/healthz unanswered up to {stalled:.1f}s; lease {'taken by the standby' if lost else 'kept'}"
    env.figures.notes.append(f"stall {seconds:g}s: {take.note}")
    env.wait_for(lambda: all(k in env.monitor.current() for k in urgent), "the urgent Workloads to be seen", 10)
    hooked.stop()
    return take


def apiserver_outage(
    env: ChaosEnv,
    *,
    down_seconds: float = 20.0,
    delete_fraction: float = 0.4,
    kill: bool = True,
    settle_timeout: float = 60.0,
) -> Outage:
    """Stops the operators' kube-apiserver (SIGKILL, or SIGTERM with ``kill=False``) for
    ``down_seconds`` while the load goes on through the other one and Workloads are deleted
    (admitted ones first, then any); restarts it on the same port, certificates and etcd, stops
    the load and measures the time from its /readyz until I4 holds, and the PATCHes answered 404
    after it (writes to Workloads that no longer exist)."""
    assert len(env.plane.apiservers) > 1, "the outage needs a second kube-apiserver (ControlPlane.add_apiserver)"
    assert env.driver is not None, "start_load() first"
    primary: ApiServer = env.plane.apiservers[0]
    began = now_s()
    env.plane.stop_apiserver(primary, kill=kill)
    down_at = now_s()
    deleted, rounds = 0, 4
    for i in range(rounds):
        current = env.monitor.current()
        admitted = [k for k, o in current.items() if reservation(o)[0]]
        pool = admitted if i == 0 else list(current)
        for key in pool:
            if env.random.random() < delete_fraction / (1 if i == 0 else rounds):
                with contextlib.suppress(ApiError):
                    deleted += env.driver.delete(key, "deleted-during-outage")
        time.sleep(max(0.0, down_at + (i + 1) * down_seconds / rounds - now_s()))
    env.plane.start_apiserver(primary)
    ready_at = now_s()
    env.figures.notes.append(
        f"kube-apiserver {'killed' if kill else 'stopped (SIGTERM, took ' + format(down_at - began, '.1f') + ' s)'}, "
        f"down {ready_at - down_at:.1f} s, {deleted} Workloads deleted meanwhile"
    )
    env.stop_load()
    for proxy in env.proxies.values():
        proxy.clear_faults()
    seconds, problems = wait_settled(env.client, env.topology, settle_timeout)
    ghosts = sum(p.count(since=ready_at, method="PATCH", status=404) for p in env.proxies.values())
    rate = max((p.max_rate(since=ready_at, method="PATCH", status=404) for p in env.proxies.values()), default=0.0)
    outage = Outage(
        ready_at - down_at, deleted, None if seconds is None else (now_s() - ready_at), ghosts, rate, problems
    )
    env.figures.outages.append(outage)
    env.figures.settles.append(("the API-server outage", outage.recovery_s))
    return outage


def _slow_and_limited(proxy: FaultProxy) -> None:
    proxy.set_errors(rate_429=0.1)
    proxy.set_latency(0.3)


def error_injection(env: ChaosEnv, *, phase_seconds: float = 6.0, cuts: int = 2) -> None:
    """429s, 500s (half of them after the write went through), a 409 storm on status PATCHes,
    latency and cut connections, phase after phase, on every operator's proxy."""
    began = now_s()
    phases: list[tuple[str, Callable[[FaultProxy], None]]] = [
        ("429 x 30%", lambda p: p.set_errors(rate_429=0.3)),
        ("500 x 30% (half after the write)", lambda p: p.set_errors(rate_500=0.3, after_forward=0.5)),
        ("409 storm on status PATCHes", lambda p: p.conflict_storm(True)),
        ("latency 300 ms + 429 x 10%", _slow_and_limited),
    ]
    for label, apply in phases:
        for proxy in env.proxies.values():
            proxy.clear_faults()
            apply(proxy)
        env.figures.notes.append(f"fault phase: {label} for {phase_seconds:g}s")
        half = phase_seconds / 2
        time.sleep(half)
        if cuts > 0:
            cuts -= 1
            for proxy in env.proxies.values():
                proxy.cut_connections()
            env.figures.injected["connection cuts"] += 1
        time.sleep(phase_seconds - half)
    for proxy in env.proxies.values():
        proxy.clear_faults()
        for (_m, _r, _s, _st, injected), n in proxy.counts(since=began).items():
            if injected and injected != "upstream-down":
                env.figures.injected[injected] += n


def foreign_and_racing_deletes(env: ChaosEnv, seconds: float = 30.0, *, preemptors_every: float = 2.0) -> int:
    """While the load (with racing deletes) and the foreign writer run: every ``preemptors_every``
    seconds a top-priority Workload arrives in a preempting queue and is deleted a moment later,
    while the operator is evicting its victims or admitting it. Returns how many."""
    assert env.driver is not None
    maker = WorkloadDriver(env.client, env.topology, env.monitor, seed=env.random.randrange(1 << 30))
    preempting = [q.name for q in env.topology.queues.values() if q.driven and (q.preemption or q.config)]
    began, raced = now_s(), 0
    while now_s() - began < seconds:
        time.sleep(preemptors_every)
        key = maker.create(env.random.choice(preempting), cpu=env.random.choice((2, 3)), priority=10_000)
        time.sleep(env.random.uniform(0.05, 0.6))
        with contextlib.suppress(ApiError):
            raced += maker.delete(key, "deleted-preemptor")
    env.figures.driver["deleted-preemptor"] += raced
    return raced
