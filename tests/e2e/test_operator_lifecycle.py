"""Starting and stopping under bad conditions: no API server, no kubeconfig, an annotation that
overflows, SIGTERM at any moment. Startup never hangs, SIGTERM always exits, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from builders import cluster_queue, workload
from preemption_operator.testing.control_plane import ControlPlane, free_port, project_crd_files, running_control_plane
from preemption_operator.testing.operator_process import OperatorPool, operator_command, wait_until

from .scenario import Scenario

pytestmark = pytest.mark.e2e


def unreachable_kubeconfig(cluster: ControlPlane, folder: Path) -> Path:
    """The cluster's kubeconfig with the server moved to a port nobody listens on."""
    config = json.loads(cluster.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    path = folder / "unreachable.kubeconfig"
    path.write_text(json.dumps(config))
    return path


def test_sigterm_while_the_api_server_is_unreachable(
    cluster: ControlPlane, operators: OperatorPool, tmp_path: Path
) -> None:
    op = operators.start("nowhere", kubeconfig=unreachable_kubeconfig(cluster, tmp_path), ready=False)
    wait_until(lambda: op.get("/healthz")[0] == 200, what="the HTTP endpoints", diagnostics=op.tail)
    assert op.get("/readyz")[0] == 503  # never synced: not ready, but alive
    time.sleep(1)  # the informers are retrying
    started = time.monotonic()
    assert op.stop(timeout=15) == 0
    assert time.monotonic() - started < 10, op.tail()
    assert "Traceback" not in op.log(), op.tail()


def test_no_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = str(tmp_path / "missing")
    env["HOME"] = str(tmp_path)
    done = subprocess.run(
        [*operator_command(), "run", f"--metrics-port={free_port()}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr


def test_an_overflowing_annotation_neither_blocks_startup_nor_scheduling(
    scenario: Scenario, operators: OperatorPool
) -> None:
    """Issue #11: with `preemption-delay: 99999999999999999999h` on a ClusterQueue the operator could
    not start (no log line, /healthz 503) and ignored SIGTERM."""
    sc, ns = scenario, scenario.namespace
    delayed = cluster_queue(
        sc.name("delayed"),
        2,
        flavor=sc.flavor,
        preemption={"withinClusterQueue": "LowerPriority"},
        annotations={"preemption-operator.io/preemption-delay": "99999999999999999999h"},
    )
    sc.apply(sc.flavor_object(), delayed)
    sc.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "delayed", "namespace": ns},
            "spec": {"clusterQueue": sc.name("delayed")},
        }
    )
    _, lq = sc.queue("plain", 2)
    sc.apply(workload("low", namespace=ns, queue="delayed", cpu=2, priority=0))
    op = operators.start()
    sc.wait_admitted("low", diagnostics=op.tail)
    sc.apply(
        workload("high", namespace=ns, queue="delayed", cpu=2, priority=10),
        workload("other", namespace=ns, queue=lq, cpu=1, priority=0),
    )
    sc.wait_admitted("other", diagnostics=op.tail)
    wait_until(
        lambda: f"ClusterQueue {sc.name('delayed')}: preemption-operator.io/preemption-delay" in op.log(),
        what="a warning naming the queue and the annotation",
        diagnostics=op.tail,
    )
    assert op.get("/healthz")[0] == 200
    started = time.monotonic()
    assert op.stop(timeout=15) == 0
    assert time.monotonic() - started < 10
    assert "Traceback" not in op.log(), op.tail()


def test_missing_crds_are_named_and_waited_for_and_deleted_ones_come_back(envtest_assets: Path, tmp_path: Path) -> None:
    """Issue 15, item 3: on a cluster without the CRDs the operator names them and the command
    that installs them, stays alive and not ready, and becomes ready (and schedules) once they
    are installed; a CRD deleted under it is survived the same way."""
    with running_control_plane(envtest_assets, crds=False) as plane:
        pool = OperatorPool(plane, tmp_path)
        try:
            op = pool.start("bare", ready=False)
            wait_until(lambda: op.get("/healthz")[0] == 200, what="the HTTP endpoints", diagnostics=op.tail)
            wait_until(
                lambda: (
                    "workloads.kueue.x-k8s.io is not served by this cluster (install the CRDs: "
                    "kubectl apply --server-side -f crds/)" in op.log()
                ),
                what="a warning naming the missing CRD and how to install it",
                diagnostics=op.tail,
            )
            assert op.get("/readyz")[0] == 503

            plane.apply_crds(project_crd_files())
            wait_until(
                lambda: op.get("/readyz")[0] == 200, timeout=30, what="ready once the CRDs are in", diagnostics=op.tail
            )
            plane.kubectl("create", "namespace", "crd-test", check=True)
            sc = Scenario(plane, "crd-test")
            _, lq = sc.queue("main", 2)
            sc.apply(workload("first", namespace="crd-test", queue=lq, cpu=1, priority=0))
            sc.wait_admitted("first", diagnostics=op.tail)

            plane.kubectl("delete", "crd", "workloads.kueue.x-k8s.io", check=True)
            wait_until(
                lambda: op.get("/readyz")[0] == 503, timeout=30, what="not ready without Workloads", diagnostics=op.tail
            )
            assert op.alive(), op.tail()
            plane.apply_crds([f for f in project_crd_files() if f.name.endswith("_workloads.yaml")])
            wait_until(lambda: op.get("/readyz")[0] == 200, timeout=30, what="ready again", diagnostics=op.tail)
            sc.apply(workload("second", namespace="crd-test", queue=lq, cpu=1, priority=0))
            sc.wait_admitted("second", diagnostics=op.tail)
            assert "Traceback" not in op.log(), op.tail()
        finally:
            pool.close()
