"""Issue 30, item 1, on the real control plane: a Kueue Configuration file from Kueue's docs
(waitForPodsReady on, the integrations listed, fair sharing on) starts the operator unchanged;
the fields it applies take effect (fair sharing: the ClusterQueues get their shares), each field
it does not apply is named once in its log, and the flags given (the test pool's metrics port and
lease) win over the file's. Its waitForPodsReady is applied (test_cluster.py runs it on pods)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders import KUEUE, cluster_queue, workload
from preemption_operator.testing.operator_process import OperatorPool, wait_until

from .scenario import Scenario

DOCS_EXAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "kueue-configuration.yaml"


def _share(sc: Scenario, cq: str) -> Any:
    status = sc.get("clusterqueues", cq, namespaced=False).get("status") or {}
    return (status.get("fairSharing") or {}).get("weightedShare")


def test_kueues_documented_configuration_starts_the_operator_and_applies(
    scenario: Scenario, operators: OperatorPool, tmp_path: Path
) -> None:
    sc = scenario
    config = tmp_path / "controller_manager_config.yaml"
    config.write_text(DOCS_EXAMPLE.read_text())
    cohort = sc.name("org")
    team = sc.name("team")
    sc.apply(
        sc.flavor_object(),
        cluster_queue(sc.name("pool"), 4, flavor=sc.flavor, cohort=cohort),
        cluster_queue(team, 0, flavor=sc.flavor, cohort=cohort),
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "team", "namespace": sc.namespace},
            "spec": {"clusterQueue": team},
        },
    )
    op = operators.start(extra_args=[f"--config={config}"])  # ready on the pool's --metrics-port, not :8443
    sc.apply(workload("borrower", namespace=sc.namespace, queue="team", cpu=2))
    sc.wait_admitted("borrower", timeout=60, diagnostics=operators.diagnostics)
    # Fair sharing is on (from the file): team borrows 2 of the 4 cpu it could, a share of 500.
    wait_until(lambda: _share(sc, team) == 500, what="team's weighted share 500", diagnostics=operators.diagnostics)

    log = op.log()
    assert f"read Kueue's Configuration from {config} (v1beta2)" in log
    for field in ("integrations.frameworks[1]", "integrations.frameworks[2]", "health", "controller"):
        assert log.count(f"--config {config}: {field}: ") == 1, (field, op.tail())
    assert f"--config {config}: waitForPodsReady" not in log  # applied (test_cluster.py runs it)
    assert op.stop() == 0, op.tail()
    assert "Traceback" not in op.log()
