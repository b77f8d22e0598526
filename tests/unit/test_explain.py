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


def test_eligible_candidates_that_were_not_needed_appear_as_spared() -> None:
    """Issue 15, item 4: the hero README calls train-b and api-backfill spared; explain says so."""
    out = explain("default/hero-job-xyz")
    rule = "[preemption config hero-workloads-preemption-config rule hero-preempt-lower-priority/0]"
    for name in ("production/api-backfill", "research/train-b"):
        assert f"spared       {name}: eligible, not needed: the preemptor fits without it {rule}" in out


def test_an_unknown_workload_exits_2_with_a_hint() -> None:
    def refused(workload: str) -> str:
        result = CliRunner().invoke(cli, ["explain", HERO, "--workload", workload, "--now", NOW])
        assert result.exit_code == 2, result.output
        return result.output.strip()

    assert refused("train-a") == (
        "error: --workload train-a: no such workload in the input; write it as NAMESPACE/NAME (research/train-a?)"
    )
    assert refused("default/train-a") == (
        "error: --workload default/train-a: no such workload in the input; did you mean research/train-a?"
    )
    assert refused("nowhere/nothing").startswith(
        "error: --workload nowhere/nothing: no such workload in the input; the input has 6: critical-services/etl, "
    )


def test_explain_json_is_the_same_record() -> None:
    import json

    result = CliRunner().invoke(
        cli, ["explain", HERO, "--workload", "default/hero-job-xyz", "--output", "json", "--now", NOW]
    )
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert record["workload"] == "default/hero-job-xyz"
    assert record["status"]["admission"]["clusterQueue"] == "hero"
    (search,) = record["searches"]
    assert search["role"] == "preemptor" and search["cycle"] == 1
    outcomes = {c["workload"]: c["outcome"] for c in search["candidates"]}
    assert outcomes == {
        "critical-services/etl": "excluded",
        "production/nightly-report": "chosen",
        "research/train-a": "chosen",
        "production/api-backfill": "spared",
        "research/train-b": "spared",
    }


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


def test_the_docs_list_exactly_the_outcomes_the_code_has() -> None:
    import re
    from typing import get_args

    from preemption_operator.engine.candidates import Outcome

    readme = (Path(__file__).resolve().parents[2] / "docs" / "offline.md").read_text()
    contract = re.search(r'"outcome": "([a-z|-]+)"', readme)
    assert contract is not None
    assert set(contract.group(1).split("|")) == set(get_args(Outcome))
    for outcome in get_args(Outcome):
        assert f"`{outcome}`" in readme, outcome
