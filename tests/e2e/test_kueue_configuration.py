"""Issue 30, item 1, on the real control plane: a Kueue Configuration file from Kueue's docs
(waitForPodsReady on, the integrations listed, fair sharing on) starts the operator unchanged;
the fields it applies take effect (fair sharing: the ClusterQueues get their shares), each field
it does not apply is named once in its log, and the flags given (the test pool's metrics port and
lease) win over the file's. Its waitForPodsReady is applied (test_cluster.py runs it on pods)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from builders import KUEUE, cluster_queue, workload
from preemption_operator.testing.operator_process import OperatorPool, wait_until
from preemption_operator.testing.workload_status import is_true

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


def test_an_external_frameworks_evicted_workload_keeps_its_quota_until_its_controller_clears_it(
    scenario: Scenario, operators: OperatorPool, tmp_path: Path
) -> None:
    """`integrations.externalFrameworks`: a Workload whose controller owner is of such a kind is
    stopped by that kind's own controller, which then clears the reservation (Kueue's contract
    with external frameworks). Evicted, it keeps its quota until then, so its preemptor is not
    admitted while its pods may still run. A ReplicaSet stands in for the external kind here."""
    sc = scenario
    config = tmp_path / "controller_manager_config.yaml"
    config.write_text(
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
        "integrations:\n  frameworks: [batch/job]\n  externalFrameworks: [ReplicaSet.v1.apps]\n"
    )
    _, lq = sc.queue("q", 2, within="LowerPriority")
    sc.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "external", "namespace": sc.namespace},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "external"}},
                "template": {
                    "metadata": {"labels": {"app": "external"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
                },
            },
        }
    )
    owner = sc.get("replicasets", "external")["metadata"]
    reference = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "external", "uid": owner["uid"]}
    victim = workload("victim", namespace=sc.namespace, queue=lq, cpu=2, priority=0).obj()
    victim["metadata"]["ownerReferences"] = [{**reference, "controller": True}]
    operators.start(extra_args=[f"--config={config}"])
    sc.apply(victim)
    sc.wait_admitted("victim", timeout=60, diagnostics=operators.diagnostics)

    sc.apply(workload("preemptor", namespace=sc.namespace, queue=lq, cpu=2, priority=100))

    def victim_evicted() -> dict[str, Any]:
        wl = sc.workload("victim")
        assert is_true(wl, "Evicted"), wl.get("status")
        return wl

    evicted = wait_until(victim_evicted, timeout=60, what="victim evicted", diagnostics=operators.diagnostics)
    # The eviction's own write leaves the reservation: only the external controller clears it.
    assert is_true(evicted, "Preempted")
    assert is_true(evicted, "QuotaReserved"), evicted["status"]
    assert evicted["status"]["admission"]["clusterQueue"] == sc.name("q")
    assert not is_true(sc.workload("preemptor"), "QuotaReserved")

    # The external controller has stopped its job: it clears the reservation, as Kueue's
    # jobframework does, and the preemptor takes the quota.
    conditions = [
        {**c, "status": "False", "reason": "Pending", "message": "stopped by its controller"}
        if c["type"] in ("QuotaReserved", "Admitted")
        else c
        for c in evicted["status"]["conditions"]
    ]
    sc.kubectl(
        "patch", "workload", "victim", "-n", sc.namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"admission": None, "conditions": conditions}}),
    )  # fmt: skip
    sc.wait_admitted("preemptor", timeout=60, diagnostics=operators.diagnostics)
