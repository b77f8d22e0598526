"""preemption_operator.testing, the harness the e2e tests, the benchmarks and hack/ share: it
imports without pytest, finds the project's CRDs or says why not, and the scripts reach it as an
installed package, never by editing sys.path."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from preemption_operator.testing.control_plane import CRDS_DIR, project_crd_files

ROOT = Path(__file__).resolve().parents[2]
MODULES = ["chaos", "cluster", "control_plane", "fault_proxy", "operator_process", "workload_status"]


def test_the_harness_imports_without_pytest() -> None:
    imports = "; ".join(f"import preemption_operator.testing.{m}" for m in MODULES)
    probe = f"import sys; {imports}; print('pytest' in sys.modules)"
    answer = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert answer.stdout.strip() == "False"


def test_project_crd_files_are_the_crds_beside_the_package() -> None:
    files = project_crd_files()
    assert CRDS_DIR == ROOT / "crds"
    assert files == sorted(files)
    assert {f.name for f in files} >= {"kueue.x-k8s.io_workloads.yaml", "kueue.x-k8s.io_clusterqueues.yaml"}
    assert all(f.name != "kustomization.yaml" for f in files)


def test_missing_or_empty_crds_are_an_error_that_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"pip install -e \."):
        project_crd_files(tmp_path / "absent")
    (tmp_path / "kustomization.yaml").write_text("resources: []\n")
    with pytest.raises(FileNotFoundError, match="make crds"):
        project_crd_files(tmp_path)


@pytest.mark.parametrize(
    "script", sorted([*ROOT.glob("benchmarks/**/*.py"), *ROOT.glob("hack/*.py")]), ids=lambda p: p.name
)
def test_scripts_do_not_edit_sys_path(script: Path) -> None:
    assert not re.search(r"sys\.path\.(insert|append|extend)|sys\.path\s*[+]?=", script.read_text())


def test_cluster_nodes_carry_hostname_and_rack_labels_in_contiguous_racks() -> None:
    from preemption_operator.testing.cluster import BLOCK_LABEL, HOSTNAME_LABEL, RACK_LABEL, Nodes

    shape = Nodes.parse(8, "cpu=4,nvidia.com/gpu=2", "blocks=2,racks-per-block=2")
    objects = shape.objects()
    assert [o["metadata"]["name"] for o in objects] == [f"node-{i:04d}" for i in range(8)]
    labels = [o["metadata"]["labels"] for o in objects]
    assert [lab[RACK_LABEL] for lab in labels] == [
        "rack-0",
        "rack-0",
        "rack-1",
        "rack-1",
        "rack-2",
        "rack-2",
        "rack-3",
        "rack-3",
    ]
    assert [lab[BLOCK_LABEL] for lab in labels] == ["block-0"] * 4 + ["block-1"] * 4
    assert all(lab[HOSTNAME_LABEL] == o["metadata"]["name"] for lab, o in zip(labels, objects, strict=True))
    assert objects[0]["status"]["capacity"] == {"cpu": "4", "nvidia.com/gpu": "2", "pods": "110"}
    assert RACK_LABEL not in Nodes.parse(2).objects()[0]["metadata"]["labels"]


@pytest.mark.parametrize(
    ("capacity", "topology", "message"),
    [
        ("cpu", "", "--node-capacity: 'cpu' is not key=value"),
        ("", "blocks=2,racks=3", "--topology: unknown key 'racks'"),
        ("", "blocks=two", "--topology: blocks and racks-per-block are whole numbers"),
        ("", "blocks=4,racks-per-block=4", "--nodes 8 cannot hold 4 block(s) of 4 rack(s) with a node each"),
    ],
)
def test_cluster_flags_that_make_no_sense_say_why(capacity: str, topology: str, message: str) -> None:
    from preemption_operator.testing.cluster import Nodes

    with pytest.raises(ValueError, match=re.escape(message)):
        Nodes.parse(8, capacity, topology)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--topology", "blocks=x"], "--topology: blocks and racks-per-block are whole numbers"),
        (["--controllers", "jobset,spark"], "unknown controller(s) spark: known are jobset, lws, kuberay"),
    ],
)
def test_the_cluster_script_refuses_bad_flags_before_starting_anything(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    script = ROOT / "hack" / "cluster.py"
    run = subprocess.run(
        [sys.executable, str(script), "--kubeconfig", str(tmp_path / "k"), *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert message in run.stderr
    assert not (tmp_path / "k").exists()


def _pod(name: str, cpu: str, node: str | None = None, phase: str = "Running", deleting: bool = False) -> dict:
    meta: dict = {"name": name, "namespace": "other", "resourceVersion": "1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def test_the_chaos_monitor_flags_a_node_whose_bound_pods_exceed_its_cpu_once_per_episode() -> None:
    """I6, fed states as its watches would: pods of any namespace bound to a node count (being
    deleted included) until they finish; unbound and finished pods do not."""
    from preemption_operator.testing.chaos import InvariantMonitor, Topology

    monitor = InvariantMonitor(client=None, topology=Topology("t"))  # type: ignore[arg-type]
    node = {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4"}}}
    monitor._relist_nodes([node])
    monitor._relist_pods([_pod("a", "2", "n1"), _pod("pending", "8")])
    monitor._pod_event("ADDED", _pod("b", "1500m", "n1", deleting=True))
    monitor._pod_event("MODIFIED", _pod("done", "3", "n1", phase="Succeeded"))
    assert not monitor.violations and monitor.max_node_fill == pytest.approx(3.5 / 4)

    monitor._pod_event("ADDED", _pod("c", "1", "n1"))
    monitor._pod_event("MODIFIED", _pod("c", "1", "n1"))  # the same episode: one violation
    (violation,) = monitor.violations
    assert violation.invariant == "I6" and violation.subject == "node n1"
    assert "4.5 cpu > 4 allocatable" in violation.message and "other/b=1.5cpu" in violation.message

    monitor._pod_event("DELETED", _pod("b", "1500m", "n1", deleting=True))  # its grace period is over
    monitor._pod_event("ADDED", _pod("d", "1", "n1"))  # back at 4: a new episode could start
    monitor._pod_event("ADDED", _pod("e", "1", "n1"))
    assert [v.invariant for v in monitor.violations] == ["I6", "I6"]


def test_the_chaos_driver_finishes_only_pods_kwok_has_started() -> None:
    """A Job's pods are finished by hand only once Running: kwok's stage that starts a bound
    Pending pod would otherwise overwrite the hand-written Succeeded with Running, and the
    scheduler, which had freed the pod's node when it turned Succeeded, would find it bound again
    next to the pod it placed meanwhile (seen as an I6 violation in the chaos suite)."""
    from preemption_operator.testing.chaos import InvariantMonitor, Topology, WorkloadDriver

    class Client:
        def __init__(self, pods: list[dict]) -> None:
            self.pods, self.patched = pods, []

        def list_items(self, path: str) -> tuple[list[dict], str]:
            return self.pods, "1"

        def request(self, method: str, path: str, body: Any = None, **_: Any) -> tuple[int, Any]:
            self.patched.append(path.split("/pods/")[1])
            return 200, {}

    monitor = InvariantMonitor(client=None, topology=Topology("t"))  # type: ignore[arg-type]
    pending = Client([_pod("bound-not-started", "1", "n1", phase="Pending"), _pod("unbound", "1", phase="Pending")])
    driver = WorkloadDriver(pending, Topology("t"), monitor)  # type: ignore[arg-type]
    assert driver.finish_job("ns", "j") is False and pending.patched == []

    started = Client([_pod("running", "1", "n1"), _pod("done", "1", "n1", phase="Succeeded")])
    driver = WorkloadDriver(started, Topology("t"), monitor)  # type: ignore[arg-type]
    assert driver.finish_job("ns", "j") is True and started.patched == ["running/status"]
