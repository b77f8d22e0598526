"""The harness's split of evictions: the victims of each ClusterQueue's first large workload,
read from either controller's log (benchmarks/kueue-harness/harness.py)."""

from __future__ import annotations

from pathlib import Path

from preemption_operator.testing.kueue_harness import kueue_harness

OURS = (
    "2026-12-01T18:29:14.570Z INFO    preemption_operator.controller.loop: preempted cq-0-3-cohort-0/medium-1-0-0 "
    "for cq-0-3-cohort-0/large-2-0-0: Preempted to accommodate a workload (UID: u, JobUID: UNKNOWN) due to "
    "prioritization in the ClusterQueue\n"
    "2026-12-01T18:29:15.570Z INFO    preemption_operator.controller.loop: preempted cq-0-1-cohort-0/small-0-4-0 "
    "for cq-0-3-cohort-0/large-2-1-0: Preempted to accommodate a workload (UID: u, JobUID: UNKNOWN) due to "
    "reclamation within the cohort\n"
    "2026-12-01T18:29:10.548Z INFO    preemption_operator.controller.run: cache synced: 0 workloads\n"
)
KUEUE = (
    '2026-12-01T18:26:57.778260601Z\tDEBUG\tevents\tevents/event_broadcaster.go:338\tEvent occurred\t{"object": '
    '{"name":"large-2-0-0","namespace":"cq-0-3-cohort-3"}, "kind": "Workload", "apiVersion": '
    '"kueue.x-k8s.io/v1beta2", "type": "Normal", "reason": "PreemptedWorkload", "action": "PreemptedWorkload", '
    '"note": "Preempted workload cq-0-3-cohort-3/small-0-1-0 (UID: u) in ClusterQueue cq-0-3-cohort-3"}\n'
    '2026-12-01T18:26:57.778310486Z\tDEBUG\tevents\tevents/event_broadcaster.go:338\tEvent occurred\t{"object": '
    '{"name":"small-0-1-0","namespace":"cq-0-3-cohort-3"}, "kind": "Workload", "type": "Normal", "reason": '
    '"EvictedDueToPreempted", "note": "Preempted to accommodate a workload (UID: u, JobUID: UNKNOWN)"}\n'
)


def test_the_victims_of_first_larges_are_counted_per_class(tmp_path: Path) -> None:
    harness = kueue_harness()
    ours, kueue = tmp_path / "ours.log", tmp_path / "kueue.log"
    ours.write_text(OURS)
    kueue.write_text(KUEUE)
    assert harness.burst_evictions(ours) == {"small": 0, "medium": 1, "large": 0}
    assert harness.burst_evictions(kueue) == {"small": 1, "medium": 0, "large": 0}
    assert harness.burst_evictions(tmp_path / "absent.log") is None
    assert harness._watching_since(ours) is not None


def test_preemptions_of_a_victim_by_its_own_class_are_counted_as_reclaims(tmp_path: Path) -> None:
    harness = kueue_harness()
    ours, kueue = tmp_path / "ours.log", tmp_path / "kueue.log"
    ours.write_text(
        OURS + "2026-12-04T14:11:24.730Z INFO    preemption_operator.controller.decisions: preempted "
        "cq-0-3-cohort-4/medium-1-0-0 for cq-0-2-cohort-4/medium-1-1-0: Preempted to accommodate a workload "
        "(UID: u, JobUID: UNKNOWN) due to reclamation within the cohort\n"
    )
    kueue.write_text(
        KUEUE
        + KUEUE.splitlines(keepends=True)[0]
        .replace('"name":"large-2-0-0"', '"name":"small-0-9-0"')
        .replace("cq-0-3-cohort-3/small-0-1-0", "cq-0-1-cohort-3/small-0-2-0")
    )
    assert harness.same_class_preemptions(ours) == {"small": 0, "medium": 1, "large": 0}
    assert harness.same_class_preemptions(kueue) == {"small": 1, "medium": 0, "large": 0}
    assert harness.same_class_preemptions(tmp_path / "absent.log") is None
    # The first-large split is not fooled by the reclaims.
    assert harness.burst_evictions(ours) == {"small": 0, "medium": 1, "large": 0}
    assert harness.burst_evictions(kueue) == {"small": 1, "medium": 0, "large": 0}
