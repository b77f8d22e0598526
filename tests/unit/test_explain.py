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
