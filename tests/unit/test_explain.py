"""`preemption-operator explain`: every decision about one workload, and why each candidate of
its victim searches was chosen, spared or excluded — by which rule, selector and field."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from preemption_operator.cli import cli

HERO = str(Path(__file__).resolve().parents[2] / "examples" / "hero-job")
NOW = "2026-11-30T12:00:00Z"


def explain(workload: str) -> str:
    result = CliRunner().invoke(cli, ["explain", HERO, "--workload", workload, "--now", NOW])
    assert result.exit_code == 0, result.output
    return result.output


def test_preemptor_sees_every_candidate_and_the_field_that_excluded_it() -> None:
    out = explain("default/hero-job-xyz")
    assert "QuotaReserved  True   QuotaReserved: Quota reserved in ClusterQueue hero" in out
    assert "[1] preempted research/train-a (ConfigurablePreemption)" in out
    assert "[2] admitted in hero" in out
    assert (
        "excluded     critical-services/etl: not selected: hero-preempt-lower-priority/0 clusterQueueSelector "
        "does not match [preemption config hero-workloads-preemption-config (InsufficientQuota)]"
    ) in out
    rule = "[preemption config hero-workloads-preemption-config rule hero-preempt-lower-priority/0]"
    assert f"chosen       production/nightly-report: the configured preemption rules {rule}" in out
    assert f"chosen       research/train-a: the configured preemption rules {rule}" in out


def test_victim_sees_who_preempted_it_and_by_which_rule() -> None:
    out = explain("research/train-a")
    message = (
        "Preempted by default/hero-job-xyz because of preemption config hero-workloads-preemption-config "
        "rule hero-preempt-lower-priority/0"
    )
    assert f"Preempted      True   ConfigurablePreemption: {message}" in out
    assert f"[1] preempted by default/hero-job-xyz (ConfigurablePreemption): {message}" in out
    assert "Cycle 1, as a candidate for default/hero-job-xyz:" in out


def test_unknown_workload_is_said_plainly() -> None:
    assert explain("nowhere/nothing") == "no workload nowhere/nothing in the input\n"


def test_invalid_input_exits_2_with_the_file_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: x}\nspec: {cohortName: 5}\n"
    )
    result = CliRunner().invoke(cli, ["explain", str(bad), "-w", "a/b"])
    assert result.exit_code == 2
    assert str(bad) in result.output and "ClusterQueue x" in result.output and "cohortName" in result.output


def test_simulate_skips_kinds_it_does_not_read_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: ns}\n")
    result = CliRunner().invoke(cli, ["simulate", HERO, str(tmp_path), "--now", NOW, "--output", "json"])
    assert result.exit_code == 0, result.output
    assert f"{tmp_path / 'job.yaml'}: Job ns/j (batch/v1) is not read; skipped" in result.output


def test_field_paths_are_written_the_kubernetes_way(tmp_path: Path) -> None:
    bad = tmp_path / "w.yaml"
    bad.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {name: w, namespace: ns}\n"
        "spec:\n  podSets:\n  - name: main\n    count: -1\n    template: {spec: {containers: []}}\n"
    )
    result = CliRunner().invoke(cli, ["simulate", str(bad)])
    assert result.exit_code == 2
    assert "Workload ns/w: spec.podSets[0].count: Input should be greater than or equal to 0" in result.output
