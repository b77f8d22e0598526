"""benchmarks/kueue-harness/replay_states.py: a harness run's states, rebuilt from its watch record,
and both schedulers over them."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from preemption_operator.api.meta import format_time
from preemption_operator.testing import go_modules
from preemption_operator.testing.kueue_harness import replay_states as load_replay_states


@pytest.fixture(scope="module")
def replay_states() -> ModuleType:
    return load_replay_states()


RECORD = """\
# seconds\tobject\tmCPU\tClusterQueue (0 watch(es) resumed)
100.0\tcq-0-0-cohort-0/small-0-0-0\t0\t
100.1\tcq-0-0-cohort-0/small-0-0-0\t1000\tcq-0-0-cohort-0
100.2\tcq-0-1-cohort-0/medium-1-0-0\t0\t
100.3\tcq-0-1-cohort-0/medium-1-0-0\t5000\tcq-0-1-cohort-0
100.4\tcq-0-0-cohort-0/small-0-0-0\t0\t
100.5\tcq-0-0-cohort-1/small-0-0-0\t0\t
100.5\tcq-0-0-cohort-1/small-0-0-0\t1000\tcq-0-0-cohort-1
100.6\tcq-0-0-cohort-0/large-2-0-0\t0\t
100.6\tcq-0-1-cohort-0/large-2-0-0\t0\t
100.7\tcq-0-1-cohort-0/medium-1-0-0\t0\t
101.5\tcq-0-1-cohort-0/medium-1-0-0\t5000\tcq-0-1-cohort-0
101.6\tcq-0-0-cohort-0/large-2-0-0\t20000\tcq-0-0-cohort-0
"""


def _by_name(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def test_a_cohorts_state_holds_what_held_quota_then_and_waits_what_was_still_to_run(
    tmp_path: Path, replay_states: ModuleType
) -> None:
    (tmp_path / "watch-workloads.tsv").write_text(RECORD)
    lives = replay_states.read_record(tmp_path)
    assert replay_states.state_at(lives, "cohort-0", 100.35) is None  # all hold: nothing to decide

    found = replay_states.state_at(lives, "cohort-0", 101.0)
    assert found is not None
    now, objects = found
    workloads = _by_name(objects, "Workload")
    # small-0-0-0 ran and finished (released, never admitted again): gone. medium-1-0-0 was
    # evicted at 100.7 and admitted again at 101.5: waiting at 101.0. The larges wait. The
    # other cohort's workload is not in this cohort's state.
    assert sorted(workloads) == [
        "cq-0-0-cohort-0.large-2-0-0",
        "cq-0-1-cohort-0.large-2-0-0",
        "cq-0-1-cohort-0.medium-1-0-0",
    ]
    assert all("status" not in wl for wl in workloads.values())
    assert {name: wl["spec"]["priority"] for name, wl in workloads.items()} == {
        "cq-0-0-cohort-0.large-2-0-0": 200,
        "cq-0-1-cohort-0.large-2-0-0": 200,  # never admitted in the record: its class's request
        "cq-0-1-cohort-0.medium-1-0-0": 100,
    }
    request = workloads["cq-0-1-cohort-0.large-2-0-0"]["spec"]["podSets"][0]["template"]["spec"]["containers"][0]
    assert request["resources"] == {"requests": {"cpu": "20000m"}}
    # Distinct seconds, in the order the record shows (ties by name), and `now` after them all.
    created = {name: wl["metadata"]["creationTimestamp"] for name, wl in workloads.items()}
    assert created["cq-0-1-cohort-0.medium-1-0-0"] < created["cq-0-0-cohort-0.large-2-0-0"]
    assert created["cq-0-0-cohort-0.large-2-0-0"] < created["cq-0-1-cohort-0.large-2-0-0"]
    assert format_time(now) > max(created.values())

    queues = _by_name(objects, "ClusterQueue")
    assert sorted(queues) == ["cq-0-0-cohort-0", "cq-0-1-cohort-0"]
    spec = queues["cq-0-0-cohort-0"]["spec"]
    assert spec["cohortName"] == "cohort-0" and spec["queueingStrategy"] == "BestEffortFIFO"
    assert spec["preemption"] == {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}

    _, later = replay_states.state_at(lives, "cohort-0", 101.55)
    held = _by_name(later, "Workload")["cq-0-1-cohort-0.medium-1-0-0"]
    assert held["status"]["admission"]["clusterQueue"] == "cq-0-1-cohort-0"
    assert held["status"]["admission"]["podSetAssignments"][0]["resourceUsage"] == {"cpu": "5000m"}


def test_the_engine_decides_over_a_rebuilt_state(tmp_path: Path, replay_states: ModuleType) -> None:
    (tmp_path / "watch-workloads.tsv").write_text(RECORD)
    now, objects = replay_states.state_at(replay_states.read_record(tmp_path), "cohort-0", 101.0)
    decided = replay_states.kueue_replay.engine_decisions(now, objects)
    # 40 cpu of quota, nothing held: the larges (20 each) are admitted; the medium no longer fits.
    assert decided == {
        "admitted": {
            "default/cq-0-0-cohort-0.large-2-0-0": "cq-0-0-cohort-0",
            "default/cq-0-1-cohort-0.large-2-0-0": "cq-0-1-cohort-0",
        },
        "preempted": {},
    }


def test_both_schedulers_over_a_runs_states(tmp_path: Path, replay_states: ModuleType) -> None:
    """The report's numbers come from both sides over the same states (Kueue's scheduler built
    as for the differential test)."""
    try:
        binary = replay_states.kueue_replay.build(replay_states.DRIVER)
    except go_modules.ModuleUnavailable as exc:
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail(f"Kueue's scheduler could not be built for the replay: {exc}", pytrace=False)
        pytest.skip(str(exc))
    run = tmp_path / "1-ours"
    run.mkdir()
    (run / "watch-workloads.tsv").write_text(RECORD)
    states = replay_states.run_states(run, 0.5, 2.0)
    assert len(states) == 3  # cohort-0 at 101.0, 101.5 and 102.0 (no waiter before; none in cohort-1)
    out = replay_states.compare(binary, states, 1, True)
    assert (out.states, out.differ, out.examples) == (3, 0, [])
    assert out.admitted[0] == out.admitted[1] > 0
