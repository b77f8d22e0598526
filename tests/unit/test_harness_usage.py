"""The harness's check of whether a ClusterQueue's status is prompt: the integral of the status
usage the runner's recorder wrote (cqStates.csv) against the reservations recomputed from the
workloads' own admission and Finished times (wlStates.csv), on small synthetic files
(benchmarks/kueue-harness/harness.py)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from preemption_operator.testing.kueue_harness import kueue_harness

CQ_CSV = (
    "name,cohort,class name,CPU quota (mCPU),CPU used (mCPU * ms),CPU max usage (mCPU),monitor time (ms)\n"
    "cq-0-0-cohort-0,cohort-0,cq,20000,40000000,20000,5000\n"
    "cq-0-1-cohort-0,cohort-0,cq,20000,10000000,10000,5000\n"
)
WL_CSV = (
    "id,class name,namespace,name,ms to admitted,ms to finish,num evictions\n"
    "0,small,ns,small-0-0-0,100,300,0\n"  # 1 cpu held 200 ms
    "1,large,ns,large-2-0-0,500,1500,1\n"  # 20 cpu held 1000 ms (its last admission)
    "2,medium,ns,medium-1-0-0,0,0,0\n"  # never finished: not counted
    "3,medium-required-rack,ns,medium-required-rack-1-0-0,1000,1500,0\n"  # 4 pods x 1250m held 500 ms
)


def _write(tmp_path: Path) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    harness = kueue_harness()
    (tmp_path / "cqStates.csv").write_text(CQ_CSV)
    (tmp_path / "wlStates.csv").write_text(WL_CSV)
    return harness.read_csv(tmp_path / "cqStates.csv"), harness.read_csv(tmp_path / "wlStates.csv")


def test_status_integral_sums_the_recorders_usage_and_quota_over_cluster_queues(tmp_path: Path) -> None:
    harness = kueue_harness()
    cq_rows, _ = _write(tmp_path)
    assert harness.status_integral(cq_rows) == (50_000_000, 40_000)
    assert harness.status_integral([]) is None


def test_reservation_integral_holds_each_finished_request_from_admission_to_finished(tmp_path: Path) -> None:
    harness = kueue_harness()
    _, wl_rows = _write(tmp_path)
    requests = {"small": 1000, "medium": 5000, "large": 20000, "medium-required-rack": 5000}
    assert harness.reservation_integral(wl_rows, requests) == 1000 * 200 + 20000 * 1000 + 5000 * 500
    # A class the config does not have holds nothing; an inverted row (finished before its last
    # admission, which the recorder can write after a re-admission) is left out, not negative.
    inverted = [{"class name": "small", "ms to admitted": "900", "ms to finish": "300"}]
    assert harness.reservation_integral(inverted, requests) == 0
    assert harness.reservation_integral(wl_rows, {}) == 0


def test_class_requests_count_every_pod_of_a_tas_workload() -> None:
    harness = kueue_harness()
    config = {
        "cohorts": [
            {
                "count": 1,
                "queuesSets": [
                    {
                        "count": 1,
                        "workloadsSets": [
                            {
                                "count": 1,
                                "workloads": [
                                    {"className": "medium-required-rack", "request": "1250m", "podCount": 4},
                                    {"className": "small", "request": 1},
                                ],
                            }
                        ],
                    }
                ],
            }
        ]
    }
    assert harness.class_requests(config) == {"medium-required-rack": 5000, "small": 1000}


def test_the_status_ratio_of_a_run(tmp_path: Path) -> None:
    harness = kueue_harness()
    run = harness.Run("ours", Fraction(1, 10), 1, tmp_path, 3)
    assert harness._status_ratio(run) is None
    run.status_mcpu_ms, run.reserved_mcpu_ms = 45.0, 90.0
    assert harness._status_ratio(run) == pytest.approx(0.5)
    assert harness._cpu_s(2_500_000.0) == pytest.approx(2.5)


def test_evictions_are_summed_per_size_for_tas_classes() -> None:
    harness = kueue_harness()
    counts = {"small-required-rack": 2, "small-balanced-rack": 3, "large-preferred-rack": 1, "medium": 4}
    assert harness.by_size(counts) == {"small": 5, "medium": 4, "large": 1}
    assert harness._FIRST_LARGE.match("large-required-rack-6-0-0")
    assert harness._FIRST_LARGE.match("large-2-0-0")
    assert not harness._FIRST_LARGE.match("large-2-1-0")


def test_cohorts_cut_keeps_queues_and_templates_and_scales_counts() -> None:
    harness = kueue_harness()
    config = {
        "cohorts": [
            {
                "count": 10,
                "queuesSets": [
                    {
                        "count": 100,
                        "workloadsSets": [
                            {"count": 35, "workloads": [{"className": "small", "request": 1}]},
                            {"count": 4, "workloads": [{"className": "large", "request": 20}]},
                        ],
                    }
                ],
            }
        ]
    }
    cut = harness.scaled_config(config, Fraction(1, 10), cohorts=2)
    assert cut["cohorts"][0]["count"] == 2 and cut["cohorts"][0]["queuesSets"][0]["count"] == 100
    assert [w["count"] for w in cut["cohorts"][0]["queuesSets"][0]["workloadsSets"]] == [4, 1]
    assert harness.total_workloads(cut) == 2 * 100 * 5
    assert config["cohorts"][0]["count"] == 10  # the original is not changed
    assert harness.scaled_config(config, Fraction(1), cohorts=20)["cohorts"][0]["count"] == 10
    assert harness.config_label("large-scale", Fraction(1, 10), 2) == "large-scale-1-10-c2"
    assert harness.config_label("baseline", Fraction(1)) == "baseline-full"
    assert harness.config_classes(config) == ["small", "large"]


def _report(harness: Any, runs: list[Any], binaries: Any, tmp_path: Path, flags: str) -> str:
    """The report of `runs` made at scale 1/10 on a made-up machine, with `flags` in its command."""
    return str(
        harness.report(
            runs,
            binaries=binaries,
            assets=tmp_path,
            artifacts=tmp_path,
            command=f"python benchmarks/kueue-harness/harness.py {flags}",
            info={"cpu": "c", "cores": "2", "memory": "m", "kernel": "k", "python": "p", "go": "g"},
            load_before=(0.0, 0.0, 0.0),
            load_after=(0.0, 0.0, 0.0),
            started="2026-12-02T12:00:00Z",
            timeouts={Fraction(1, 10): "10m"},
        )
    )


def test_the_report_has_a_column_per_side_and_the_new_rows(tmp_path: Path) -> None:
    harness = kueue_harness()
    configs = tmp_path / "module" / harness.PERF / "configs" / "large-scale"
    configs.mkdir(parents=True)
    template = {"className": "small", "request": 1, "runtimeMs": 150, "priority": 50}
    queues = {"className": "cq", "count": 100, "nominalQuota": 20, "borrowingLimit": 100}
    queues |= {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    queues["workloadsSets"] = [{"count": 35, "creationIntervalMs": 60, "workloads": [template]}]
    cohorts = [{"className": "cohort", "count": 10, "queuesSets": [queues]}]
    (configs / "generator.yaml").write_text(yaml.safe_dump({"cohorts": cohorts}))
    (configs / "rangespec.yaml").write_text(
        "cmd: {maxWallMs: 1416000}\nclusterQueueClassesMinUsage: {cq: 31.6}\n"
        "wlClassesMaxAvgTimeToAdmissionMs: {small: 841000}\n"
    )
    binaries = harness.Binaries(tmp_path / "runner", tmp_path / "mk", None, tmp_path / "module", "v0.19.2")
    binaries = harness.dataclasses.replace(binaries, lifted=tmp_path / "lifted", lifted_note=harness.lifted_note(1000))
    runs = []
    for side in ("kueue", "kueue-stock", "ours"):
        run = harness.Run(side, Fraction(1, 10), 1, tmp_path / side, 4000, "large-scale", 2)
        run.paused_s, run.resume_outcome, run.ready_lead_s = 1.5, "ready", 0.25
        run.status_mcpu_ms, run.reserved_mcpu_ms = 3_000_000.0, 4_000_000.0
        run.tta, run.tta_p90 = {"small": 2.0}, {"small": 3.0}
        runs.append(run)
    text = _report(harness, runs, binaries, tmp_path, "--config large-scale --cohorts 2")
    assert "| measure | Kueue #1 | Kueue stock #1 | ours #1 |" in text
    assert "## large-scale, scale 1/10, at most 2 cohort(s) per cohort set: 4,000 workloads" in text
    assert "`--cohorts 2`" in text and "QPS 50 / burst 100 -> 1000 / 2000" in text
    assert "| runner paused for the controller's start (wrapper), s | 1.50 (ready) |" in text
    assert "| controller ready (runner resumed) → first workload set started, s | 0.25 |" in text
    assert "| status ÷ reservations (under 1: the status lags the reservations) | 0.75 |" in text
    assert "| time to admission, small: mean / p90, s | 2.0 / 3.0 |" in text
    assert "| status ÷ reservations | 1.00 | 1.00 |" in text  # ours ÷ Kueue, pair 1 and the mean


def _baseline_config(tmp_path: Path, harness: ModuleType) -> None:
    """Kueue's baseline generator config and rangespec, in the fake module dir under `tmp_path`
    (its 5 cohorts of 6 queues; no workloads, which a report reads from its runs)."""
    configs = tmp_path / "module" / harness.PERF / "configs" / "baseline"
    configs.mkdir(parents=True)
    queues = {"className": "cq", "count": 6, "nominalQuota": 20, "borrowingLimit": 100, "workloadsSets": []}
    queues |= {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    (configs / "generator.yaml").write_text(
        yaml.safe_dump({"cohorts": [{"className": "cohort", "count": 5, "queuesSets": [queues]}]})
    )
    (configs / "rangespec.yaml").write_text("cmd: {maxWallMs: 425000}\nclusterQueueClassesMinUsage: {cq: 50}\n")


def test_a_variant_of_ours_runs_with_its_writes_in_flight_and_gets_its_own_column_and_ratios(
    tmp_path: Path,
) -> None:
    harness = kueue_harness()
    assert harness.side_args("ours-writes4") == ("--max-inflight-writes=4",)
    assert harness.side_args("ours") == () and harness.side_args("kueue") == ()
    assert [harness.is_ours(s) for s in ("ours", "ours-writes12", "ours-writes0", "kueue", "ours-writes")] == [
        True,
        True,
        False,
        False,
        False,
    ]
    _baseline_config(tmp_path, harness)
    binaries = harness.Binaries(tmp_path / "runner", tmp_path / "mk", None, tmp_path / "module", "v0.19.2")
    runs = []
    for side, wall in (("kueue", 20_000), ("ours", 18_000), ("ours-writes4", 16_000)):
        run = harness.Run(side, Fraction(1, 10), 1, tmp_path / side, 1500, "baseline", None)
        run.stats = {"wallMs": wall, "userMs": 1000, "sysMs": 0, "maxrss": 100_000}
        runs.append(run)
    text = _report(harness, runs, binaries, tmp_path, "--sides kueue,ours,ours-writes4")
    assert "| measure | Kueue #1 | ours #1 | ours 4 writes #1 |" in text
    assert "`--max-inflight-writes=4` added" in text
    tables = text.split("÷ Kueue (the *Kueue* column) per interleaved pair")
    assert [t.rsplit("\n", 1)[-1] for t in tables[:-1]] == ["ours ", "ours 4 writes "]
    walls = [line for line in text.splitlines() if line.startswith("| controller wall | ")]
    assert walls == ["| controller wall | 0.90 | 0.90 |", "| controller wall | 0.80 | 0.80 |"]


def test_a_sizes_time_to_admission_is_its_class_or_the_mean_of_its_classes(tmp_path: Path) -> None:
    """The ratio rows compare sizes: baseline's classes are the sizes themselves, tas's
    small-required-rack, small-preferred-rack and small-balanced-rack are all small."""
    harness = kueue_harness()
    baseline = harness.Run("ours", Fraction(1, 10), 1, tmp_path, 10)
    baseline.tta = {"small": 20.0, "medium": 10.0}
    assert harness._size_tta(baseline, "small") == 20.0
    assert harness._size_tta(baseline, "large") is None
    tas = harness.Run("ours", Fraction(1, 10), 1, tmp_path, 10, "tas")
    tas.tta = {
        "small-required-rack": 20.0,
        "small-preferred-rack": 22.0,
        "small-balanced-rack": 24.0,
        "large-required-rack": 5.0,
    }
    assert harness._size_tta(tas, "small") == 22.0
    assert harness._size_tta(tas, "large") == 5.0
    assert harness._size_tta(tas, "medium") is None


def _workload(name: str, reserved: str = "", finished: str = "", *cpus: str) -> dict[str, object]:
    conditions = [{"type": "QuotaReserved", "status": reserved}] if reserved else []
    if finished:
        conditions.append({"type": "Finished", "status": finished})
    assignments = [{"name": f"ps{i}", "resourceUsage": {"cpu": cpu, "memory": "1Gi"}} for i, cpu in enumerate(cpus)]
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "status": {"conditions": conditions, **({"admission": {"podSetAssignments": assignments}} if cpus else {})},
    }


def _queue(name: str, total: str | None) -> dict[str, object]:
    usage = [{"name": "default", "resources": [{"name": "cpu", "total": total}]}] if total is not None else []
    return {"metadata": {"name": name}, "status": {"flavorsUsage": usage}}


def test_the_harness_watches_integrate_every_hold_and_the_status_over_one_window(tmp_path: Path) -> None:
    """The harness's own watches (QuotaWatch): a workload evicted and admitted again counts both
    holds (the runner's wlStates.csv keeps only the last), a Finished one holds nothing from then
    on, and a ClusterQueue's status holds its last value until the window ends."""
    harness = kueue_harness()
    watch = harness.QuotaWatch(tmp_path)
    events = [
        (0.0, _workload("a")),  # created, pending
        (1.0, _workload("a", "True", "", "2")),  # admitted: 2 cpu
        (2.0, _workload("a", "False", "", "2")),  # evicted after 1 s
        (3.0, _workload("a", "True", "", "1500m", "500m")),  # admitted again: 2 cpu in two pod sets
        (4.0, _workload("b", "True", "", "1")),  # 1 cpu from 4 s to the window's end
        (5.0, _workload("a", "True", "True", "1500m", "500m")),  # finished after 2 s
    ]
    watch.points["workloads"] = [(t, *harness._holding(obj)) for t, obj in events]
    queues = [(0.0, _queue("cq", None)), (1.5, _queue("cq", "2")), (2.5, _queue("cq", "0")), (3.0, _queue("cq", "3"))]
    watch.points["clusterqueues"] = [(t, *harness._shown(obj)) for t, obj in queues]
    watch.points["clusterqueues"].append((6.0, *harness._shown(_queue("cq", "3"), deleted=True)))
    status, reserved = watch.integrals()
    assert reserved == pytest.approx((2 * 1 + 2 * 2 + 1 * 2) * 1_000_000)  # cpu x s -> mCPU x ms
    assert status == pytest.approx((2 * 1 + 3 * 3) * 1_000_000)
    watch.points["clusterqueues"] = []
    assert watch.integrals() is None  # nothing seen: no figure, not a zero


def test_the_scheduling_time_starts_with_the_first_workload_set(tmp_path: Path) -> None:
    """*first workload set → recorder done* leaves out both sides' start and the runner's own
    setup after it resumes: it runs from the generator's first `generate workload group` line."""
    harness = kueue_harness()
    (tmp_path / "runner.log").write_text(
        "2026-12-04T04:43:22.000000000Z\tINFO\tStarting process\n"
        "2026-12-04T04:43:24.250000000Z\tINFO\tgenerate workload group\tStart generation\n"
        "2026-12-04T04:43:25.000000000Z\tINFO\tgenerate workload group\tStart generation\n"
        "2026-12-04T04:43:50.000000000Z\tINFO\tRecorder done\n"
    )
    run = harness.Run("ours", Fraction(1, 10), 1, tmp_path, 1500)
    harness.collect(harness.Binaries(tmp_path, tmp_path, None, tmp_path, "v0.19.2"), run, {})
    assert run.throughput_s == 28.0
    assert run.scheduling_s == 25.75


def test_kueue_with_prioritized_preemptors_is_its_own_column_and_ratio_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kueue-prioritize side (Kueue with the gate the engine's ordering follows) gets a column,
    a line saying how it was built, and a second ratio table of ours against it."""
    harness = kueue_harness()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the fake build stays here
    _baseline_config(tmp_path, harness)
    binaries = harness.Binaries(tmp_path / "runner", tmp_path / "mk", None, tmp_path / "module", "v0.19.2")
    binaries = harness.with_prioritized(
        harness.dataclasses.replace(binaries, lifted=tmp_path / "lifted", lifted_note=harness.lifted_note(1000)),
        1000,
        go=_fake_go(tmp_path, harness),
    )
    runs = []
    sides = (("kueue", 20_000), ("kueue-prioritize", 25_000), ("ours", 18_000), ("ours-kueue-order", 16_000))
    for side, wall in sides:
        run = harness.Run(side, Fraction(1, 10), 1, tmp_path / side, 1500, "baseline", None)
        run.stats = {"wallMs": wall, "userMs": 1000, "sysMs": 0, "maxrss": 100_000}
        runs.append(run)
    assert harness.is_ours("ours-kueue-order")
    assert harness.side_args("ours-kueue-order") == ("--feature-gates=PrioritizePreemptorWorkloads=false",)
    text = _report(harness, runs, binaries, tmp_path, "--sides kueue,kueue-prioritize,ours,ours-kueue-order")
    assert "| measure | Kueue #1 | Kueue prioritize #1 | ours #1 | ours Kueue order #1 |" in text
    assert "`--feature-gates=PrioritizePreemptorWorkloads=false` added" in text
    assert "- Kueue (column *Kueue prioritize*): `minimalkueue` built as the *Kueue* column's" in text
    assert "its alpha feature gate `PrioritizePreemptorWorkloads` turned on" in text
    assert "ours ÷ Kueue (the *Kueue* column) per interleaved pair" in text
    assert "ours ÷ Kueue (the *Kueue prioritize* column) per interleaved pair" in text
    assert "ours Kueue order ÷ Kueue (the *Kueue* column) per interleaved pair" in text
    walls = [line for line in text.splitlines() if line.startswith("| controller wall | ")]
    assert walls == [
        "| controller wall | 0.90 | 0.90 |",  # ours ÷ Kueue
        "| controller wall | 0.72 | 0.72 |",  # ours ÷ Kueue prioritize
        "| controller wall | 0.80 | 0.80 |",  # ours Kueue order ÷ Kueue
        "| controller wall | 0.64 | 0.64 |",
    ]


def _fake_go(tmp_path: Path, harness: Any) -> str:
    """A `go` that records the source it was asked to build and writes an empty binary."""
    main_go = tmp_path / "module" / harness.PERF / "minimalkueue" / "main.go"
    if not main_go.is_file():
        main_go.parent.mkdir(parents=True, exist_ok=True)
        main_go.write_text(MAIN_GO)
    go = tmp_path / "go"
    go.write_text(
        "#!/bin/sh\n"
        f'cp "$PWD/{harness.PERF}/minimalkueue/main.go" "{tmp_path}/built-main.go"\n'
        'touch "$3"\n'  # go build -o <out> <pkg>
    )
    go.chmod(0o755)
    return str(go)


MAIN_GO = """package main

import (
\t"flag"
\t"os"
)

func run() int {
\tkubeConfig.QPS = 50
\tkubeConfig.Burst = 100
\treturn 0
}

func main() {
\tinitFlags()
\tflag.Parse()
\tos.Exit(run())
}
"""


def test_a_variant_of_minimalkueue_changes_only_its_client_limit_and_the_gates_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = kueue_harness()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    go = _fake_go(tmp_path, harness)
    binaries = harness.Binaries(tmp_path / "runner", tmp_path / "mk", None, tmp_path / "module", "v0.19.2")

    lifted = harness.lift_client_limit(binaries, 1000, go=go)
    assert lifted.lifted == harness.variant_path("v0.19.2", 1000) and lifted.lifted.is_file()
    built = (tmp_path / "built-main.go").read_text()
    assert "kubeConfig.QPS = 1000" in built and "kubeConfig.Burst = 2000" in built
    assert "SetFromMap" not in built and "utilfeature" not in built

    gated = harness.build_variant(binaries, 0, (harness.PRIORITIZE_GATE,), go=go)
    assert gated == harness.variant_path("v0.19.2", 0, (harness.PRIORITIZE_GATE,)) != lifted.lifted
    built = (tmp_path / "built-main.go").read_text()
    assert "kubeConfig.QPS = 50" in built  # 0: the limit left as built
    assert '\tutilfeature "k8s.io/apiserver/pkg/util/feature"\n' in built
    set_line = 'SetFromMap(map[string]bool{"PrioritizePreemptorWorkloads": true})'
    assert built.index("flag.Parse()") < built.index(set_line) < built.index("os.Exit(run())")
    assert built.index(set_line) < built.index('"kueue-harness: feature gate %s enabled: %v\\n"')

    (tmp_path / "built-main.go").unlink()
    assert harness.build_variant(binaries, 0, (harness.PRIORITIZE_GATE,), go=go) == gated
    assert not (tmp_path / "built-main.go").exists()  # built once, then reused


def test_the_gate_each_controller_reports_on_start_is_read_from_its_log(tmp_path: Path) -> None:
    harness = kueue_harness()
    log = tmp_path / "minimalkueue.err.log"
    assert harness.gates_seen(log) == {}
    log.write_text(
        "kueue-harness wrapper: paused the runner\n"
        "kueue-harness: feature gate PrioritizePreemptorWorkloads enabled: true\n"
        "kueue-harness: feature gate TopologyAwareScheduling enabled: false\n"
    )
    assert harness.gates_seen(log) == {"PrioritizePreemptorWorkloads": True, "TopologyAwareScheduling": False}
    log.write_text(  # the operator's own line (ours-kueue-order)
        "2026-12-06T03:35:54.889Z INFO    preemption_operator.controller.operator: feature gate"
        " PrioritizePreemptorWorkloads=false: waiting preemptors take their place in Kueue's order\n"
    )
    assert harness.gates_seen(log) == {"PrioritizePreemptorWorkloads": False}
