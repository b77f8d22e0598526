"""Issue 16 item 3 end to end: the operator runs lint on configuration changes and shows the
verdict on each PreemptionConfig (`FlapFree`, a column of `kubectl get preempcfg`), with a Warning
Event naming the flapping pair.

The setup of examples/flapping-rules (its cluster.yaml and preemption-config.yaml; lint reads
no workloads), its cluster-scoped names prefixed with the test's namespace as every e2e test's."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from builders import CONFIG_ANNOTATION
from preemption_operator.testing.control_plane import ControlPlane
from preemption_operator.testing.operator_process import OperatorPool, wait_until
from preemption_operator.testing.workload_status import condition

from .conftest import control_plane_fixture
from .scenario import Scenario

REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e

EXAMPLE = REPO_ROOT / "examples" / "flapping-rules"
LINT_RUNS = "preemption_operator_lint_runs_total"


@pytest.fixture(scope="module")
def control_plane(envtest_assets: Path) -> Iterator[ControlPlane]:
    """A plane of its own: the operator lints every setup object on the cluster, and what earlier
    tests leave on the shared plane made the proof of this test's fix outgrow the operator's CPU
    budget for an analysis (on a slow day the suite failed here; alone the proof takes 0.1 s)."""
    yield from control_plane_fixture(envtest_assets, "the lint test's control plane")


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> ControlPlane:
    return control_plane


def example_setup(sc: Scenario) -> list[dict[str, Any]]:
    docs = [
        d
        for name in ("cluster.yaml", "preemption-config.yaml")
        for d in yaml.safe_load_all((EXAMPLE / name).read_text())
    ]
    out = []
    for doc in docs:
        if doc is None or doc["kind"] in ("Namespace", "LocalQueue"):
            continue  # lint reads neither
        meta = doc["metadata"]
        meta["name"] = sc.name(meta["name"])
        meta.pop("creationTimestamp", None)
        if doc["kind"] == "ClusterQueue":
            meta["annotations"][CONFIG_ANNOTATION] = sc.name(meta["annotations"][CONFIG_ANNOTATION])
            doc["spec"]["cohortName"] = sc.name(doc["spec"]["cohortName"])
            for group in doc["spec"]["resourceGroups"]:
                for flavor in group["flavors"]:
                    flavor["name"] = sc.name(flavor["name"])
        out.append(doc)
    return out


def test_a_flapping_config_is_shown_and_its_fix_proven(scenario: Scenario, operators: OperatorPool) -> None:
    sc = scenario
    setup = example_setup(sc)
    config = sc.name("team-priority")
    classes = [d["metadata"]["name"] for d in setup if d["kind"] == "WorkloadPriorityClass"]
    try:
        sc.apply(*setup)
        op = operators.start()

        def flap_free(expected: str) -> dict[str, Any]:
            def check() -> dict[str, Any]:
                status = sc.get("preemptionconfigs", config, namespaced=False).get("status") or {}
                found = condition({"status": status}, "FlapFree")
                assert found is not None and found["status"] == expected, status
                return found

            return wait_until(check, timeout=60, what=f"FlapFree={expected} on {config}", diagnostics=op.tail)

        def column() -> str:
            table = sc.kubectl("get", "preempcfg", config).stdout.splitlines()
            return dict(zip(table[0].split(), table[1].split(), strict=False))["FLAPFREE"]

        found = flap_free("False")
        assert found["reason"] == "FlappingPair", found
        # The cluster's own PriorityClasses (system-cluster-critical, ...) are shapes too, but the
        # setup's WorkloadPriorityClasses are tried first: the witness reads like its workloads.
        production, research = sc.name("production"), sc.name("research")
        assert "class system-" not in found["message"], found
        assert any(f"class {name})" in found["message"] for name in classes), (classes, found)

        def shape(queue: str) -> str:
            return rf"a workload of ClusterQueue {re.escape(queue)} \(priority -?\d+[^)]*\)"

        assert re.match(f"A: {shape(production)}; B: {shape(production)}\\. ", found["message"]), found
        assert "evict each other forever" in found["message"], found
        assert column() == "False"

        def warnings() -> list[dict[str, Any]]:
            events = sc.events_about("PreemptionConfig", config)
            flaps = [e for e in events if e["reason"] == "FlappingPair"]
            assert len(flaps) == 2, [(e["reason"], e["message"]) for e in events]  # one per class of queue pairs
            return flaps

        events = wait_until(warnings, what="a Warning Event per flap on the config", diagnostics=op.tail)
        assert {e["type"] for e in events} == {"Warning"}
        between = re.compile(f"A: {shape(production)}; B: {shape(research)}\\. ")
        assert any(between.match(e["message"].removeprefix("lint FlappingPair: ")) for e in events), events
        assert (op.metric(LINT_RUNS, outcome="flapping") or 0) >= 1

        # The one-word fix of the example's README.
        fixed = next(d for d in example_setup(sc) if d["kind"] == "PreemptionConfig")
        fixed["spec"]["rules"][0]["candidateSelectors"][0]["priority"]["comparison"] = "LessThan"
        sc.apply(fixed)
        found = flap_free("True")
        assert found["reason"] == "NoFlapFound", found
        assert found["message"].startswith(f"ClusterQueue(s) {production}, {research}: no two or three"), found
        generation = sc.get("preemptionconfigs", config, namespaced=False)["metadata"]["generation"]
        assert found["observedGeneration"] == generation == 2, found
        assert column() == "True"
        status = sc.get("preemptionconfigs", config, namespaced=False)["status"]
        assert (condition({"status": status}, "Lint") or {}).get("status") == "True", status
        # Each flap was told once, not once per cycle or per status write.
        assert all(e.get("count", 1) == 1 for e in warnings()), warnings()
        assert "Traceback" not in op.log(), op.tail()
    finally:
        for name in classes:
            sc.kubectl("delete", "workloadpriorityclass", name, "--ignore-not-found", "--wait=false", check=False)
