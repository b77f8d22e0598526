"""Issue 25: `hack/cluster.py` as the README tells people to run it. It writes the kubeconfig, says
`ready` once every node is Ready and the CRDs are installed, and on SIGINT or SIGTERM stops
everything it started. A shell script that starts it in the background hands it SIGINT ignored,
and it must still stop on SIGINT then."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from preemption_operator.testing.cluster import BLOCK_LABEL, RACK_LABEL
from preemption_operator.testing.operator_process import wait_until

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]


def children(pid: int) -> set[int]:
    """The processes whose parent is `pid` (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name, in parentheses, may hold spaces: the parent pid follows its ")".
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as `cmd &` in a non-interactive shell


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_the_cluster_script_comes_up_ready_and_stops_everything_it_started(
    envtest_assets: Path, tmp_path: Path, stop: signal.Signals
) -> None:
    kubeconfig = tmp_path / "cluster.kubeconfig"
    command = [
        sys.executable,
        str(ROOT / "hack" / "cluster.py"),
        "--kubeconfig",
        str(kubeconfig),
        "--nodes",
        "3",
        "--node-capacity",
        "cpu=8,nvidia.com/gpu=4",
        "--topology",
        "blocks=1,racks-per-block=3",
    ]
    env = {**os.environ, "KUBEBUILDER_ASSETS": str(envtest_assets)}
    script = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=ignore_sigint
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(script.stdout or []), daemon=True)
    reader.start()
    try:
        wait_until(
            lambda: "ready\n" in lines,
            timeout=180,
            what="the script's `ready` line",
            diagnostics=lambda: "".join(lines),
        )
        kubectl = [str(envtest_assets / "kubectl"), f"--kubeconfig={kubeconfig}"]
        nodes = json.loads(
            subprocess.run([*kubectl, "get", "nodes", "-o", "json"], capture_output=True, text=True, check=True).stdout
        )["items"]
        assert len(nodes) == 3
        for node in nodes:
            ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
            assert ready and ready[0]["status"] == "True", node["metadata"]["name"]
            assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
            assert node["metadata"]["labels"][BLOCK_LABEL] == "block-0"
            assert not node["spec"].get("taints"), node["spec"]["taints"]
        assert len({n["metadata"]["labels"][RACK_LABEL] for n in nodes}) == 3
        crds = subprocess.run(
            [*kubectl, "get", "crd", "preemptionconfigs.kueue.x-k8s.io"], capture_output=True, text=True
        )
        assert crds.returncode == 0, crds.stderr
        started = children(script.pid)
        assert len(started) >= 5, f"etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok: {started}"
        script.send_signal(stop)
        assert script.wait(timeout=60) == 0, "".join(lines)
        left = {pid for pid in started if alive(pid)}
        assert not left, f"still running after {stop.name}: {left}"
    finally:
        if script.poll() is None:
            script.kill()
            script.wait()
        reader.join(timeout=5)
