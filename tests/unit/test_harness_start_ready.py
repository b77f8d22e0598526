"""Both sides of the Kueue harness start equally: each `minimalkueue` wrapper stops the runner
(its parent) until the controller's own log says its caches are synced, then lets it go on
(benchmarks/kueue-harness/start-ready.sh). Here a shell script named `runner` stands in for
Kueue's runner and a script writing the controllers' readiness lines for the controller."""

from __future__ import annotations

import os
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from preemption_operator.testing.kueue_harness import kueue_harness

harness = kueue_harness()

RUNNER = """#!/bin/sh
date +%s.%N > "$DIR/start"
"$WRAPPER" --kubeconfig "$DIR/kubeconfig" --zap-log-level=2 2>"$DIR/minimalkueue.err.log" &
sleep 0.3
date +%s.%N > "$DIR/after"
wait
"""

KUEUE_LINES = [
    # Kueue's controllers log under their own logger's name (no "controller" value).
    'INFO\tresourceflavor-reconciler\tcontroller/controller.go:369\tStarting EventSource\t{"source": "kind"}',
    'INFO\tworkload-reconciler\tcontroller/controller.go:369\tStarting EventSource\t{"source": "kind"}',
    # controller-runtime logs these two together, once that controller's sources synced
    "INFO\tworkload-reconciler\tcontroller/controller.go:302\tStarting Controller\t{}",
    'INFO\tworkload-reconciler\tcontroller/controller.go:305\tStarting workers\t{"worker count": 5}',
    # ready only with this one: every controller that started its sources has its workers
    'INFO\tresourceflavor-reconciler\tcontroller/controller.go:305\tStarting workers\t{"worker count": 1}',
]
OURS_LINES = ["INFO    preemption_operator.controller.operator: cache synced: 0 workloads, 0 ClusterQueues"]


def _controller(path: Path, lines: list[str]) -> None:
    """A controller that logs its lines evenly, the last (its readiness) at about 1.2 s."""
    gap = 1.2 / len(lines)
    body = "".join(
        f"sleep {gap:.2f}\nprintf '%s\\t%s\\n' \"$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)\" '{line}' >&2\n" for line in lines
    )
    path.write_text(f"#!/bin/sh\n{body}sleep 1\n")
    path.chmod(0o755)


@pytest.mark.parametrize("side", ["kueue", "ours"])
def test_the_runner_waits_for_the_controllers_readiness(tmp_path: Path, side: str) -> None:
    runner, controller = tmp_path / "runner", tmp_path / "controller"
    runner.write_text(RUNNER)
    runner.chmod(0o755)
    _controller(controller, KUEUE_LINES if side == "kueue" else OURS_LINES)
    env = {**os.environ, "DIR": str(tmp_path), "KUEUE_HARNESS_PAUSE": "1"}
    if side == "kueue":
        env |= {"WRAPPER": str(harness.KUEUE_WRAPPER), "KUEUE_MINIMALKUEUE": str(controller)}
    else:
        env |= {"WRAPPER": str(harness.WRAPPER), "PREEMPTION_OPERATOR": str(controller)}
    subprocess.run([str(runner)], env=env, check=True, timeout=30)
    log = tmp_path / "minimalkueue.err.log"
    deadline = time.monotonic() + 5
    while "resumed the runner" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)

    waited = float((tmp_path / "after").read_text()) - float((tmp_path / "start").read_text())
    assert waited >= 1.1, f"the runner went on after {waited:.2f} s, before the controller was ready\n{log.read_text()}"
    paused, resumed, outcome = harness.wrapper_pause(log)
    assert outcome == "ready", log.read_text()
    assert paused is not None and resumed is not None
    ready_line = harness._timestamp(log.read_text().splitlines()[-2])
    assert ready_line is not None and paused < ready_line <= resumed
    assert (resumed - ready_line).total_seconds() < 1.0


def test_no_pause_unless_the_harness_asks_and_the_parent_is_the_runner(tmp_path: Path) -> None:
    controller = tmp_path / "controller"
    _controller(controller, ["INFO\tStarting workers"])
    env = {**os.environ, "KUEUE_MINIMALKUEUE": str(controller)}
    env.pop("KUEUE_HARNESS_PAUSE", None)
    done = subprocess.run([str(harness.KUEUE_WRAPPER)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "kueue-harness wrapper" not in done.stderr, done.stderr
    env["KUEUE_HARNESS_PAUSE"] = "1"  # asked, but the parent is this test, not a runner
    done = subprocess.run([str(harness.KUEUE_WRAPPER)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "not pausing" in done.stderr, done.stderr


def test_wrapper_pause_reads_the_wrappers_lines(tmp_path: Path) -> None:
    log = tmp_path / "minimalkueue.err.log"
    log.write_text(
        "2026-12-02T12:00:00.100000000Z kueue-harness wrapper: paused the runner (pid 7) until the controller is ready\n"
        "2026-12-02T12:00:01.000000000Z\tINFO\tStarting workers\n"
        "2026-12-02T12:00:01.350000000Z kueue-harness wrapper: resumed the runner (pid 7): timeout\n"
    )
    paused, resumed, outcome = harness.wrapper_pause(log)
    assert paused == datetime(2026, 12, 2, 12, 0, 0, 100000, tzinfo=UTC)
    assert resumed == datetime(2026, 12, 2, 12, 0, 1, 350000, tzinfo=UTC)
    assert outcome == "timeout"
    assert harness.wrapper_pause(tmp_path / "absent.log") == (None, None, None)
