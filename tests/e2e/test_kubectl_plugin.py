"""`kubectl preemption list|stop|resume` (issue 31, item 2) through kubectl's own plugin lookup
(kubectl-preemption on PATH), against the real API server and a running operator: kueuectl's
columns and filters, positions from the visibility API, the preemption risk of admitted
workloads, and stop/resume doing what Kueue's stopPolicy and spec.active do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from builders import pending
from preemption_operator.testing.control_plane import ControlPlane
from preemption_operator.testing.operator_process import OperatorProcess, wait_until
from preemption_operator.testing.workload_status import condition, is_true

from .scenario import Scenario


def plugin(cluster: ControlPlane, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`kubectl preemption ARGS`: kubectl finds kubectl-preemption on PATH, as a user's would."""
    env = {**os.environ, **cluster.env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(
        [str(cluster.assets / "kubectl"), "preemption", *args],
        capture_output=True, text=True, env=env, timeout=120, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def table(text: str) -> list[dict[str, str]]:
    """kubectl's plain table as rows of header -> cell (cells may be empty: columns are cut where
    the header line starts each column)."""
    lines = text.splitlines()
    header = lines[0]
    starts = [0] + [i for i in range(2, len(header)) if header[i] != " " and header[i - 2 : i] == "  "]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    names = [header[a:b].strip() for a, b in bounds]
    return [{n: line[a:b].strip() for n, (a, b) in zip(names, bounds, strict=True)} for line in lines[1:]]


def test_list_shows_kueuectls_columns_positions_and_preemption_risk(
    scenario: Scenario, visibility: OperatorProcess, cluster: ControlPlane
) -> None:
    sc, ns = scenario, scenario.namespace
    cq, lq = sc.queue("main", 2, preemption={"withinClusterQueue": "LowerPriority"})
    sc.apply(pending("low", lq, 1, priority=1, namespace=ns), pending("mid", lq, 1, priority=20, namespace=ns))
    sc.wait_admitted("low", "mid", diagnostics=visibility.tail)
    # big may preempt low (lower priority) but not mid, and low alone is not enough: it waits,
    # and low is at risk from it. later preempts nobody (priority 0).
    sc.apply(pending("big", lq, 2, priority=10, namespace=ns), pending("later", lq, 1, priority=0, namespace=ns))

    def listed() -> dict[str, dict[str, str]]:
        rows = {r["NAME"]: r for r in table(plugin(cluster, "list", "workloads", "-n", ns).stdout)}
        assert rows["big"]["POSITION IN QUEUE"] == "0" and rows["later"]["POSITION IN QUEUE"] == "1", rows
        return rows

    rows = wait_until(listed, what="both pending workloads positioned", diagnostics=visibility.tail)
    assert list(rows["low"]) == [
        "NAME", "JOB TYPE", "JOB NAME", "LOCALQUEUE", "CLUSTERQUEUE", "STATUS", "POSITION IN QUEUE", "EXEC TIME",
        "AGE", "PREEMPTION RISK",
    ]  # fmt: skip
    assert {n: (r["STATUS"], r["CLUSTERQUEUE"], r["LOCALQUEUE"]) for n, r in rows.items()} == {
        "low": ("ADMITTED", cq, lq),
        "mid": ("ADMITTED", cq, lq),
        "big": ("PENDING", cq, lq),
        "later": ("PENDING", cq, lq),
    }
    assert rows["low"]["PREEMPTION RISK"] == f"{ns}/big (classic (InClusterQueue))"
    assert rows["mid"]["PREEMPTION RISK"] == ""  # big's priority is lower
    assert rows["low"]["EXEC TIME"].endswith("s") and rows["big"]["EXEC TIME"] == ""

    pending_only = table(plugin(cluster, "list", "workload", "-n", ns, "--status", "pending").stdout)
    assert sorted(r["NAME"] for r in pending_only) == ["big", "later"]
    # Every namespace's LocalQueues of that name (other tests' too), as kueuectl's -A does.
    everywhere = table(plugin(cluster, "list", "wl", "-A", "--localqueue", lq, "--no-risk").stdout)
    assert ns in {r["NAMESPACE"] for r in everywhere} and all(r["LOCALQUEUE"] == lq for r in everywhere)
    assert sorted(r["NAME"] for r in everywhere if r["NAMESPACE"] == ns) == ["big", "later", "low", "mid"]
    assert "PREEMPTION RISK" in everywhere[0] and all(r["PREEMPTION RISK"] == "" for r in everywhere)

    def counted() -> dict[str, str]:
        (row,) = [r for r in table(plugin(cluster, "list", "clusterqueue").stdout) if r["NAME"] == cq]
        assert (row["PENDING WORKLOADS"], row["ADMITTED WORKLOADS"], row["ACTIVE"]) == ("2", "2", "true"), row
        return row

    wait_until(counted, what="the ClusterQueue's counts", diagnostics=visibility.tail)
    (queue,) = table(plugin(cluster, "list", "lq", "-n", ns).stdout)
    assert (queue["NAME"], queue["CLUSTERQUEUE"], queue["PENDING WORKLOADS"]) == (lq, cq, "2")
    flavors = {r["NAME"]: r for r in table(plugin(cluster, "list", "rf").stdout)}
    assert sc.flavor in flavors
    missing = plugin(cluster, "list", "lq", "-n", "no-such-namespace", check=False)
    assert missing.returncode == 0 and "No LocalQueues found in namespace no-such-namespace." in missing.stderr


def test_stop_and_resume_do_what_kueuectl_does(
    scenario: Scenario, visibility: OperatorProcess, cluster: ControlPlane
) -> None:
    sc, ns = scenario, scenario.namespace
    cq, lq = sc.queue("main", 2)
    sc.apply(pending("a", lq, 1, namespace=ns), pending("b", lq, 1, namespace=ns))
    sc.wait_admitted("a", "b", diagnostics=visibility.tail)

    # Hold: nothing new is admitted, the running keep running.
    out = plugin(cluster, "stop", "clusterqueue", cq, "--keep-already-running").stdout
    assert out == f"clusterqueue.kueue.x-k8s.io/{cq} stopped\n"
    assert sc.get("clusterqueues", cq, namespaced=False)["spec"]["stopPolicy"] == "Hold"
    assert all(is_true(wl, "Admitted") for wl in sc.workloads().values())

    # A server dry run changes nothing.
    out = plugin(cluster, "stop", "cq", cq, "--dry-run=server").stdout
    assert out == f"clusterqueue.kueue.x-k8s.io/{cq} stopped (server dry run)\n"
    assert sc.get("clusterqueues", cq, namespaced=False)["spec"]["stopPolicy"] == "Hold"

    # HoldAndDrain: the admitted are evicted.
    plugin(cluster, "stop", "clusterqueue", cq)
    assert sc.get("clusterqueues", cq, namespaced=False)["spec"]["stopPolicy"] == "HoldAndDrain"

    def drained() -> bool:
        for name in ("a", "b"):
            evicted = condition(sc.workload(name), "Evicted")
            assert evicted is not None and evicted["reason"] == "ClusterQueueStopped", evicted
        return True

    wait_until(drained, what="both evicted by the stop", diagnostics=visibility.tail)
    assert plugin(cluster, "resume", "clusterqueue", cq).stdout == f"clusterqueue.kueue.x-k8s.io/{cq} resumed\n"
    sc.wait_admitted("a", "b", diagnostics=visibility.tail)

    # A workload: deactivated (evicted), then active again (admitted again).
    assert plugin(cluster, "stop", "workload", "a", "-n", ns).stdout == "workload.kueue.x-k8s.io/a stopped\n"
    assert sc.workload("a")["spec"]["active"] is False
    wait_until(lambda: not is_true(sc.workload("a"), "Admitted"), what="a evicted", diagnostics=visibility.tail)
    plugin(cluster, "resume", "workload", "a", "-n", ns)
    assert sc.workload("a")["spec"]["active"] is True
    sc.wait_admitted("a", diagnostics=visibility.tail)

    # A LocalQueue, kept running.
    plugin(cluster, "stop", "localqueue", lq, "-n", ns, "--keep-already-running")
    assert sc.get("localqueues", lq)["spec"]["stopPolicy"] == "Hold"
    plugin(cluster, "resume", "lq", lq, "-n", ns)
    assert sc.get("localqueues", lq)["spec"]["stopPolicy"] == "None"

    # A name that does not exist: the API server's answer, no traceback.
    missing = plugin(cluster, "stop", "clusterqueue", f"{ns}-nope", check=False)
    assert missing.returncode == 1 and "not found" in missing.stderr and "Traceback" not in missing.stderr


def job(name: str, queue: str, cpu: int, priority_class: str | None = None) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": queue}
    if priority_class:
        labels["kueue.x-k8s.io/priority-class"] = priority_class
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "suspend": True,  # no webhooks here: a queued Job is created suspended
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": str(cpu)}}}],
                }
            },
        },
    }


def test_what_if_predicts_what_happens_when_the_job_is_then_created(
    scenario: Scenario, visibility: OperatorProcess, cluster: ControlPlane, tmp_path: Path
) -> None:
    sc, ns = scenario, scenario.namespace
    cq, lq = sc.queue("main", 2, preemption={"withinClusterQueue": "LowerPriority"})
    high = sc.name("high")
    sc.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
              "metadata": {"name": high}, "value": 10})  # fmt: skip
    try:
        sc.apply(pending("low", lq, 1, priority=1, namespace=ns), pending("mid", lq, 1, priority=20, namespace=ns))
        sc.wait_admitted("low", "mid", diagnostics=visibility.tail)

        # A job that waits: more than the queue has, and nobody it may preempt.
        huge = tmp_path / "huge.yaml"
        huge.write_text(json.dumps(job("huge", lq, 2)))
        (waits,) = json.loads(plugin(cluster, "what-if", str(huge), "-n", ns, "-o", "json").stdout)
        assert (waits["admitted"], waits["at"], waits["cluster_queue"], waits["ahead"]) == (False, None, cq, 0)
        assert waits["preempts"] == [] and waits["reason"] == "WaitingForQuota"
        assert not any(wl.get("metadata", {}).get("ownerReferences") for wl in sc.workloads().values())  # not made

        # A job that preempts low (its priority class is higher than low's, lower than mid's).
        incoming = tmp_path / "incoming.yaml"
        incoming.write_text(json.dumps(job("incoming", lq, 1, high)))
        (taken,) = json.loads(plugin(cluster, "what-if", str(incoming), "-n", ns, "-o", "json").stdout)
        assert taken["admitted"] is True and taken["owners"] == ["Job incoming"], json.dumps(taken)
        assert [(v["workload"], v["reason"]) for v in taken["preempts"]] == [(f"{ns}/low", "InClusterQueue")]
        text = plugin(cluster, "what-if", str(incoming), "-n", ns).stdout
        assert "admitted now" in text and f"preempts {ns}/low (ClusterQueue {cq}): InClusterQueue" in text

        # Now for real: the same victim, the same flavors.
        sc.kubectl("create", "-n", ns, "-f", str(incoming))

        def happened() -> dict[str, Any]:
            wls = sc.workloads()
            made = next(wl for wl in wls.values() if wl["metadata"].get("ownerReferences"))
            assert is_true(made, "Admitted"), made.get("status")
            return {"workloads": wls, "made": made}

        seen = wait_until(happened, timeout=60, what="incoming admitted", diagnostics=visibility.tail)
        made, wls = seen["made"], seen["workloads"]
        assigned = {a["name"]: a["flavors"] for a in made["status"]["admission"]["podSetAssignments"]}
        assert assigned == taken["flavors"]
        preempted = sorted(f"{ns}/{n}" for n, wl in wls.items() if is_true(wl, "Preempted"))
        assert preempted == [v["workload"] for v in taken["preempts"]]

        # And the waiting one waits, for the reason given.
        sc.kubectl("create", "-n", ns, "-f", str(huge))

        def waiting() -> dict[str, Any]:
            wl = next(w for w in sc.workloads().values() if w["metadata"]["name"].startswith("job-huge"))
            reserved = condition(wl, "QuotaReserved")
            assert reserved is not None and reserved["status"] == "False", wl.get("status")
            return reserved

        reserved = wait_until(waiting, what="huge pending", diagnostics=visibility.tail)
        assert reserved["message"] == waits["message"]
    finally:
        sc.kubectl("delete", "workloadpriorityclass", high, "--ignore-not-found", check=False)
