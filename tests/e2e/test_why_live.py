"""Issue 15, item 1: on a live cluster, a preemptor that finds no victims says why in its
`QuotaReserved` condition and in a Warning Event (as Kueue posts one per failed attempt): a
victim held by a toleration (until when), one outside a fence, a rule not active yet."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from builders import CONFIG_ANNOTATION, KUEUE, NO_CLASSIC_PREEMPTION, lower_priority_config, workload
from preemption_operator.testing.control_plane import ControlPlane, running_control_plane
from preemption_operator.testing.operator_process import OperatorPool, wait_until
from preemption_operator.testing.workload_status import condition

from .scenario import Scenario, describe_events

TOLERATION = "preemption-toleration.scheduling.x-k8s.io/"
POLICY = "preemption-operator.io/preemption-policy"


@pytest.fixture
def sc(cluster: ControlPlane, namespace: str) -> Iterator[Scenario]:
    scenario = Scenario(cluster, namespace)
    try:
        yield scenario
    finally:
        scenario.cleanup()
        cluster.kubectl("delete", "workloadpriorityclass", f"{namespace}-long", "--ignore-not-found", "--wait=false")


@pytest.fixture
def operators(cluster: ControlPlane, sc: Scenario, tmp_path: Path) -> Iterator[OperatorPool]:
    pool = OperatorPool(cluster, tmp_path)
    try:
        yield pool
    finally:
        pool.close()


def told(sc: Scenario, name: str, fragment: str, op: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """Until the workload's pending message and a Warning Event on it both carry `fragment`."""

    def check() -> tuple[dict[str, Any], dict[str, str]]:
        reserved = condition(sc.workload(name), "QuotaReserved") or {}
        assert fragment in reserved.get("message", ""), reserved
        events = describe_events(sc.describe(name))
        warning = next((e for e in events if e["Type"] == "Warning" and fragment in e["Message"]), None)
        assert warning is not None, events
        return reserved, warning

    return wait_until(check, what=f"{name} to say {fragment!r}", diagnostics=op.tail)


def test_a_toleration_a_fence_and_a_skipped_rule_each_say_why(sc: Scenario, operators: OperatorPool) -> None:
    ns = sc.namespace
    long_running = {
        "apiVersion": KUEUE,
        "kind": "WorkloadPriorityClass",
        "metadata": {
            "name": f"{ns}-long",
            "annotations": {
                f"{TOLERATION}minimum-preemptable-priority": "1000",
                f"{TOLERATION}toleration-seconds": "7200",
            },
        },
        "value": 100,
    }
    fenced_config, slow_config = sc.name("fenced-rules"), sc.name("slow-rules")
    sc.apply(
        long_running,
        lower_priority_config(fenced_config, rule_name="take-lower"),
        lower_priority_config(slow_config, rule_name="take-lower", minTriggerRequiredDuration="1h"),
        {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": sc.name("org")}, "spec": {}},
        {
            "apiVersion": KUEUE,
            "kind": "Cohort",
            "metadata": {"name": sc.name("fence"), "annotations": {POLICY: "fence"}},
            "spec": {"parentName": sc.name("org")},
        },
    )
    _, tolerant = sc.queue("tolerant", 2, preemption={"withinClusterQueue": "LowerPriority"})
    _, outside = sc.queue("outside", 2, cohort=sc.name("org"))
    _, inside = sc.queue(
        "inside",
        0,
        cohort=sc.name("fence"),
        preemption=NO_CLASSIC_PREEMPTION,
        annotations={CONFIG_ANNOTATION: fenced_config},
    )
    _, slow = sc.queue("slow", 2, preemption=NO_CLASSIC_PREEMPTION, annotations={CONFIG_ANNOTATION: slow_config})
    op = operators.start()

    resident = workload("resident", namespace=ns, queue=tolerant, cpu=2, priority=100, priority_class=f"{ns}-long")
    sc.apply(
        resident,
        workload("outsider", namespace=ns, queue=outside, cpu=2, priority=0),
        workload("settled", namespace=ns, queue=slow, cpu=2, priority=0),
    )
    sc.wait_admitted("resident", "outsider", "settled", diagnostics=op.tail)
    sc.apply(
        workload("urgent", namespace=ns, queue=tolerant, cpu=2, priority=500),
        workload("fenced", namespace=ns, queue=inside, cpu=2, priority=1000),
        workload("impatient", namespace=ns, queue=slow, cpu=2, priority=1000),
    )

    message, event = told(sc, "urgent", f"Not preempted: {ns}/resident: WorkloadPriorityClass {ns}-long tolerates", op)
    assert "preemptors below priority 1000 until " in message["message"], message
    assert message["reason"] == "WaitingForQuota" and event["Reason"] == "WaitingForQuota"

    message, _ = told(sc, "fenced", f"Not preempted: {ns}/outsider: outside the preemption fence of Cohort", op)
    assert sc.name("fence") in message["message"], message

    message, _ = told(sc, "impatient", "Not preempted: rule take-lower: minTriggerRequiredDuration 1h", op)
    assert "not reached (until " in message["message"], message


KINDS = (
    "namespaces,priorityclasses,nodes,workloadpriorityclasses,resourceflavors,topologies,cohorts,"
    "clusterqueues,localqueues,preemptionconfigs,workloads"
)


def test_kubectl_preemption_explain_prints_what_offline_explain_prints(envtest_assets: Path, tmp_path: Path) -> None:
    """The kubectl plugin reads the live cluster; offline explain reads a `kubectl get -o yaml`
    dump of the same state: the same record, field for field."""
    import json
    import os
    import subprocess
    import sys

    with running_control_plane(envtest_assets) as plane:
        pool = OperatorPool(plane, tmp_path)
        try:
            plane.kubectl("create", "namespace", "team", check=True)
            sc = Scenario(plane, "team")
            _, lq = sc.queue("main", 4, preemption={"withinClusterQueue": "LowerPriority"})
            op = pool.start()
            sc.apply(
                workload("low", namespace="team", queue=lq, cpu=2, priority=-1),
                workload("mid", namespace="team", queue=lq, cpu=2, priority=0),
            )
            sc.wait_admitted("low", "mid", diagnostics=op.tail)
            assert op.stop() == 0
            sc.apply(
                workload("incoming", namespace="team", queue=lq, cpu=2, priority=5)
            )  # pending: nobody decides while we read

            # After every object's creation (a fixed date would one day precede them, and explain
            # would then see workloads not yet created); the same for both reads.
            now = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
            env = {**os.environ, **plane.env}
            plugin = Path(sys.executable).parent / "kubectl-preemption"
            live = subprocess.run(
                [str(plugin), "explain", "team/incoming", "-o", "json", "--now", now],
                capture_output=True, text=True, env=env, timeout=120, check=False,
            )  # fmt: skip
            assert live.returncode == 0, live.stderr
            dump = tmp_path / "state.yaml"
            dump.write_text(plane.kubectl("get", KINDS, "-A", "-o", "yaml", check=True).stdout)
            offline = subprocess.run(
                [str(plugin.with_name("preemption-operator")), "explain", str(dump), "-w", "team/incoming",
                 "-o", "json", "--now", now],
                capture_output=True, text=True, env=env, timeout=120, check=False,
            )  # fmt: skip
            assert offline.returncode == 0, offline.stderr
            record = json.loads(live.stdout)
            assert record == json.loads(offline.stdout)
            first = record["searches"][0]
            assert first["role"] == "preemptor"
            assert {c["workload"]: c["outcome"] for c in first["candidates"]}["team/low"] == "chosen"
        finally:
            pool.close()
