"""Fixtures for the e2e tests: a real etcd + kube-apiserver per test session (envtest-style).

- ``control_plane`` (session): a started :class:`ControlPlane` with every ``crds/*.yaml``
  applied (server-side) and Established; ``cluster`` is the same plane, the name operator tests
  use. :func:`control_plane_fixture` is the body of every control-plane fixture (modules that need
  their own: test_jobs.py, test_chaos.py).
- ``namespace`` (function): a fresh namespace for one test, deleted (not awaited) afterwards.
- ``visibility`` (function): an operator serving Kueue's visibility API behind the aggregation
  layer (an ExternalName Service to this machine), the APIService Available.

The binaries come from ``KUBEBUILDER_ASSETS``, else from the cache that
``hack/setup-envtest.sh`` fills (never built from here). Without them the tests are skipped,
except when ``CI`` is set, where they fail. ``E2E_KEEP_WORKDIR=1`` keeps the temp folder
(etcd data, logs, kubeconfig) after the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from preemption_operator.testing.control_plane import (
    AssetsMisconfigured,
    AssetsUnavailable,
    ControlPlane,
    ControlPlaneError,
    find_assets,
    free_port,
    running_control_plane,
)
from preemption_operator.testing.operator_process import OperatorPool, OperatorProcess, wait_until

from .scenario import Scenario

_HERE = Path(__file__).resolve().parent
_started: list[ControlPlane] = []


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def job_controller(controller: Any, what: str) -> Iterator[Any]:
    """The body of a fixture that runs a job kind's real controller (testing/job_controllers.py)
    for a module's tests: started (built first if need be), stopped after them. One that cannot
    start fails the tests in CI and skips them elsewhere (no build at hand)."""
    from preemption_operator.testing.go_modules import ModuleUnavailable

    try:
        controller.start()
    except (ModuleUnavailable, RuntimeError) as error:
        if in_ci():
            pytest.fail(f"{what} did not start: {error}", pytrace=False)
        pytest.skip(str(error))
    yield controller
    controller.stop()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: runs against a real kube-apiserver and etcd (see hack/setup-envtest.sh)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.e2e)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for plane in _started:
        terminalreporter.write_line(
            f"e2e control plane: etcd + kube-apiserver ready in {plane.startup_seconds:.1f}s (assets: {plane.assets})"
        )
        if plane.keep_workdir:
            terminalreporter.write_line(f"e2e control plane: logs and kubeconfig kept in {plane.workdir}")


@pytest.fixture(scope="session")
def envtest_assets() -> Path:
    """The folder with kube-apiserver, etcd and kubectl; skips (fails in CI) without it."""
    try:
        return find_assets()
    except AssetsMisconfigured as exc:
        problem, unavailable = str(exc), False
    except AssetsUnavailable as exc:
        problem, unavailable = str(exc), True
    # pytest.fail/skip outside the except blocks: no chained traceback in the report.
    if unavailable and not in_ci():
        pytest.skip(problem)
    if unavailable:
        problem += ". CI is set, so the e2e tests must run, not skip."
    pytest.fail(problem, pytrace=False)


def control_plane_fixture(assets: Path, what: str, **options: Any) -> Iterator[ControlPlane]:
    """The body of a control-plane fixture: :func:`running_control_plane` with ``options``,
    failing the test (not erroring with a traceback) when it does not start; ``what`` names it."""
    keep = bool(os.environ.get("E2E_KEEP_WORKDIR"))
    planes = contextlib.ExitStack()
    error = None
    try:
        plane = planes.enter_context(running_control_plane(assets, keep_workdir=keep, **options))
    except ControlPlaneError as exc:
        error = str(exc)
    # pytest.fail outside the except block: no chained traceback in the report.
    if error is not None:
        pytest.fail(f"{what} did not start: {error}", pytrace=False)
    with planes:
        _started.append(plane)
        yield plane


@pytest.fixture(scope="session")
def control_plane(envtest_assets: Path) -> Iterator[ControlPlane]:
    """A started etcd + kube-apiserver with the project's CRDs; stopped (and its temp folder
    removed) at session end."""
    yield from control_plane_fixture(envtest_assets, "the e2e control plane")


@pytest.fixture(scope="session")
def cluster(control_plane: ControlPlane) -> ControlPlane:
    """The control plane with the project's CRDs (crds/*.yaml) installed and Established: what
    the operator tests ask for by this name."""
    return control_plane


def _namespace_name(test_name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")[:40].strip("-")
    return f"e2e-{slug}-{secrets.token_hex(3)}" if slug else f"e2e-{secrets.token_hex(3)}"


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of this test's own. Deletion is only issued: with no controller-manager
    the namespace stays Terminating until the control plane goes away."""
    name = _namespace_name(request.node.name)
    control_plane.kubectl("create", "namespace", name, check=True)
    try:
        yield name
    finally:
        control_plane.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


@pytest.fixture
def scenario(cluster: ControlPlane, namespace: str) -> Iterator[Scenario]:
    """The test's objects on the shared control plane, deleted afterwards (priority classes too)."""
    sc = Scenario(cluster, namespace)
    try:
        yield sc
    finally:
        sc.cleanup()


@pytest.fixture
def operators(cluster: ControlPlane, scenario: Scenario, tmp_path: Path) -> Iterator[OperatorPool]:
    """Operators of this test; stopped (SIGTERM) before the scenario's objects are deleted."""
    pool = OperatorPool(cluster, tmp_path)
    try:
        yield pool
    finally:
        pool.close()


VISIBILITY_SERVICE = "preemption-operator-visibility"
VISIBILITY_API_SERVICE = "v1beta2.visibility.kueue.x-k8s.io"


@pytest.fixture
def visibility(cluster: ControlPlane, operators: OperatorPool) -> Iterator[OperatorProcess]:
    """An operator serving the visibility API on a port of this machine, and the APIService's
    Service pointing there; both removed afterwards (an APIService nobody answers for makes
    every kubectl discovery complain)."""
    port = free_port()
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": VISIBILITY_SERVICE, "namespace": "default"},
                "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"port": port}]},
            }
        ),
        check=True,
    )
    op = operators.start(
        extra_args=[
            f"--visibility-port={port}",
            f"--visibility-service-port={port}",
            "--visibility-host=127.0.0.1",
        ]
    )

    def available() -> bool:
        found = json.loads(
            cluster.kubectl("get", "apiservice", VISIBILITY_API_SERVICE, "-o", "json", check=True).stdout
        )
        conditions = (found.get("status") or {}).get("conditions") or []
        assert any(c["type"] == "Available" and c["status"] == "True" for c in conditions), conditions
        return True

    try:
        wait_until(available, timeout=60, what="the visibility APIService Available", diagnostics=op.tail)
        yield op
    finally:
        cluster.kubectl("delete", "apiservice", VISIBILITY_API_SERVICE, "--ignore-not-found", check=False)
        cluster.kubectl("delete", "service", VISIBILITY_SERVICE, "-n", "default", "--ignore-not-found", check=False)
