"""Fixtures for the e2e tests: a real etcd + kube-apiserver per test session (envtest-style).

- ``control_plane`` (session): a started :class:`ControlPlane` with no project CRDs.
- ``cluster`` (session): the same control plane with every ``crds/*.yaml`` applied
  (server-side) and Established; operator tests want this one.
- ``namespace`` (function): a fresh namespace for one test, deleted (not awaited) afterwards.

The binaries come from ``KUBEBUILDER_ASSETS``, else from the cache that
``hack/setup-envtest.sh`` fills (never built from here). Without them the tests are skipped,
except when ``CI`` is set, where they fail. ``E2E_KEEP_WORKDIR=1`` keeps the temp folder
(etcd data, logs, kubeconfig) after the run.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from .controlplane import (
    AssetsMisconfigured,
    AssetsUnavailable,
    ControlPlane,
    ControlPlaneError,
    find_assets,
    project_crd_files,
)
from .operator_process import OperatorPool, Scenario

_HERE = Path(__file__).resolve().parent
_started: list[ControlPlane] = []


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


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


@pytest.fixture(scope="session")
def control_plane(envtest_assets: Path) -> Iterator[ControlPlane]:
    """A started etcd + kube-apiserver; stopped (and its temp folder removed) at session end."""
    plane = ControlPlane(envtest_assets, keep_workdir=bool(os.environ.get("E2E_KEEP_WORKDIR")))
    try:
        error = None
        try:
            plane.start()
        except ControlPlaneError as exc:
            error = str(exc)
        if error is not None:
            pytest.fail(f"the e2e control plane did not start: {error}", pytrace=False)
        _started.append(plane)
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def cluster(control_plane: ControlPlane) -> ControlPlane:
    """The control plane with the project's CRDs (crds/*.yaml) installed and Established."""
    files = project_crd_files()
    error = None
    try:
        control_plane.apply_crds(files)
    except AssertionError as exc:
        error = str(exc)
    if error is not None:
        pytest.fail(f"installing crds/*.yaml failed: {error}", pytrace=False)
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
