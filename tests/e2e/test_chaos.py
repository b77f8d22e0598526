"""The chaos suite, short version: one test per fault family, each ending with the promise
checked (I1-I3, I5 and I6 at every observed state, I4 within 60 s once the faults stop); see preemption_operator.testing.chaos.

The long version is benchmarks/chaos_soak.py (`make chaos`). A run is reproducible in its
choices (not its timing) with CHAOS_SEED=<n>; the seed is in every failure message.

These tests own a control plane of their own (two kube-apiservers on one etcd), so stopping an
API server never touches the other e2e tests.
"""

from __future__ import annotations

import os
import random
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from preemption_operator.testing.chaos import (
    NODES,
    ChaosEnv,
    DriverConfig,
    HookMissing,
    apiserver_outage,
    error_injection,
    foreign_and_racing_deletes,
    kill_storm,
    leader_stall,
    leader_stop_before_write,
)
from preemption_operator.testing.cluster import start_nodes, wait_nodes_ready
from preemption_operator.testing.control_plane import CONTROLLERS, NODE_CONTROLLERS, ControlPlane, ControlPlaneError
from preemption_operator.testing.go_modules import ModuleUnavailable
from preemption_operator.testing.job_controllers import JobSetController

from .conftest import control_plane_fixture, in_ci

pytestmark = [pytest.mark.chaos, pytest.mark.e2e]

SETTLE_SECONDS = 60.0


@pytest.fixture(scope="module")
def chaos_plane(envtest_assets: Path) -> Iterator[ControlPlane]:
    # Jobs, Pods and JobSets among the load: real pods, created, bound by kube-scheduler, run by
    # kwok, deleted.
    for plane in control_plane_fixture(
        envtest_assets,
        "the chaos control plane",
        controller_manager=True,
        controllers=(*CONTROLLERS, *NODE_CONTROLLERS),
        more_apiservers=1,
    ):
        try:
            start_nodes(plane, NODES)
        except ControlPlaneError as exc:
            pytest.fail(f"the chaos cluster's nodes did not start: {exc}", pytrace=False)
        yield plane


@pytest.fixture(scope="module")
def jobset_controller(chaos_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The JobSet controller on the chaos plane, so JobSets are among the load; without it (no
    build at hand, outside CI) the load has none, and says so."""
    controller = JobSetController(chaos_plane, tmp_path_factory.mktemp("chaos-controllers"))
    try:
        controller.start()
    except (ModuleUnavailable, RuntimeError) as error:
        if in_ci():
            pytest.fail(f"the JobSet controller did not start: {error}", pytrace=False)
        warnings.warn(f"no JobSets in the chaos load: the JobSet controller did not start: {error}", stacklevel=1)
        yield None
        return
    yield controller
    controller.stop()


@pytest.fixture
def env(
    chaos_plane: ControlPlane, jobset_controller: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[ChaosEnv]:
    # After an API server outage the nodes are tainted until kwok's heartbeats are seen again.
    try:
        wait_nodes_ready(chaos_plane, [n["metadata"]["name"] for n in NODES.objects()], timeout=120)
    except ControlPlaneError as exc:
        pytest.fail(f"the chaos cluster's nodes are not usable: {exc}", pytrace=False)
    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(1 << 30))
    name = request.node.name.removeprefix("test_").replace("_", "-")[:20].strip("-")
    with ChaosEnv(chaos_plane, tmp_path, name=name, seed=seed, jobsets=jobset_controller is not None) as chaos:
        yield chaos
        print(chaos.report())  # shown for failing tests ("Captured stdout teardown"), or with -rP
        print(f"(seed {seed})")
        if jobset_controller is not None:
            print(f"--- the JobSet controller:\n{jobset_controller.tail(20)}")


def test_kill_9_mid_batch(env: ChaosEnv) -> None:
    """Two replicas; the leader is SIGKILLed four times, twice right after its proxy passed on a
    Workload status PATCH of a batch, and restarted as the standby each time."""
    env.start_operator("op-a")
    env.wait_leader()
    env.start_operator("op-b")
    env.start_load(DriverConfig(creates_per_second=3.0, max_workloads=120))
    time.sleep(4)
    kill_storm(env, 4, pause=(1.0, 4.0))
    assert len(env.figures.kills) == 4
    env.assert_promise("4 leader kills", SETTLE_SECONDS)
    kinds = ["Job", "Pod", "PodGroup", *(["JobSet"] if env.jobsets else []), "Workload"]
    for what in ("admitted", "finished"):
        counts = env.monitor.kinds[what]
        assert all(counts[kind] for kind in kinds), f"not every kind of the load was {what}: {dict(counts)}"


def test_leader_sigstop_before_write(env: ChaosEnv) -> None:
    """The leader stops itself (stop-before-write hook) with a decided batch of admissions; the
    standby takes over and fills the freed quota with higher-priority Workloads; then SIGCONT.
    Before the fix the resumed leader wrote its stale batch (over-admission)."""
    env.start_load(DriverConfig(creates_per_second=0.0), foreign_rate=10.0)
    missing = None
    try:
        leader_stop_before_write(env)
    except HookMissing as exc:
        missing = str(exc)
    if missing is not None:  # failed outside the except block: no chained traceback
        pytest.fail(missing, pytrace=False)
    env.assert_promise("a leader SIGSTOP past its lease", SETTLE_SECONDS)


def test_leader_event_loop_stall(env: ChaosEnv) -> None:
    """The leader blocks its event loop for 6 s (lease: 4 s) before writing a batch, while
    higher-priority Workloads arrive; no over-admission, whoever ends up holding the Lease."""
    env.start_load(DriverConfig(creates_per_second=0.0), foreign_rate=10.0)
    missing = None
    try:
        leader_stall(env, seconds=6.0)
    except HookMissing as exc:
        missing = str(exc)
    if missing is not None:  # failed outside the except block: no chained traceback
        pytest.fail(missing, pytrace=False)
    env.assert_promise("a 6 s leader stall", SETTLE_SECONDS)


def test_apiserver_outage_with_deletes(env: ChaosEnv) -> None:
    """The operator's kube-apiserver stops for 20 s; meanwhile Workloads are deleted through the
    other one; it restarts on the same port and etcd. The operator must notice the deletes (a
    re-list): quota freed, queue counts right, no PATCHes of deleted objects."""
    env.start_operator("op-a")
    env.wait_leader()
    env.start_load(DriverConfig(creates_per_second=3.0, max_workloads=120))
    time.sleep(10)
    outage = apiserver_outage(env, down_seconds=20.0, settle_timeout=SETTLE_SECONDS)
    failures = []
    if outage.recovery_s is None:
        failures.append(
            f"[I4] not settled within {SETTLE_SECONDS:.0f}s after the API server came back "
            f"({outage.deleted_while_down} Workloads deleted while it was down):\n  "
            + "\n  ".join(outage.problems[:30])
        )
    allowed = max(10, outage.deleted_while_down)
    if outage.ghost_patches_404 > allowed:
        failures.append(
            f"{outage.ghost_patches_404} PATCHes answered 404 after the restart (allowed: {allowed}; "
            f"up to {outage.ghost_patch_rate_max:.0f}/s): the operator keeps writing deleted Workloads"
        )
    if env.violations():
        failures.append(env.report())
    assert not failures, "\n".join(failures) + f"\n(seed {env.seed})\n{env.diagnostics()}"


def test_error_injection(env: ChaosEnv) -> None:
    """429s, 500s (some after the write happened), a 409 storm on status PATCHes, latency and cut
    connections between two replicas and the API server."""
    env.start_operator("op-a")
    env.wait_leader()
    env.start_operator("op-b")
    env.start_load(DriverConfig(creates_per_second=3.0, max_workloads=120))
    time.sleep(3)
    error_injection(env, phase_seconds=8.0, cuts=2)
    crashed = [op.name for op in env.operators.values() if not op.alive()]
    assert not crashed, f"operators exited under injected API errors: {crashed}\n{env.diagnostics()}"
    env.assert_promise("API errors, conflicts and cut connections", SETTLE_SECONDS)


def test_foreign_writer_and_racing_deletes(env: ChaosEnv) -> None:
    """Another writer touches labels, annotations and a condition of its own at 20 writes/s while
    Workloads are deleted as the operator admits or evicts them, and preemptors are deleted while
    their victims are being evicted. Nothing the other writer wrote may be lost."""
    env.start_operator("op-a")
    env.wait_leader()
    env.start_load(
        DriverConfig(
            creates_per_second=4.0, max_workloads=150, racing_deletes_per_second=1.0, pending_deletes_per_second=0.5
        ),
        foreign_rate=20.0,
    )
    foreign_and_racing_deletes(env, 30.0)
    env.assert_promise("foreign writes and racing deletes", SETTLE_SECONDS)
    deleted = sum(n for k, n in env.figures.driver.items() if k.startswith("deleted"))
    ghosts = env.proxy_for("op-a").count(method="PATCH", status=404)
    assert ghosts <= max(10, deleted), f"{ghosts} PATCHes answered 404 for {deleted} deletes\n{env.report()}"
