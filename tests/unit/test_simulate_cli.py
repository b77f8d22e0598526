"""Issue 15, item 8: `simulate --summary` for large runs; `--now` defaults to the newest time the
input names (not the wall clock); a workload created after `--now` waits."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from preemption_operator.cli import cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, ["simulate", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_summary_counts_actions_per_cycle_and_queues_at_the_end() -> None:
    out = run(str(EXAMPLES / "hero-job"), "--summary")
    assert out.startswith("Summary (4 cycles):")
    lines = out.splitlines()
    header = lines[1].split()
    assert header == ["CYCLE", "ADMITTED", "PREEMPTED", "EVICTED", "PENDING"]
    total = next(line.split() for line in lines if line.strip().startswith("total"))
    assert total == ["total", "1", "2", "0", "5"]
    final = {line.split()[1]: line.split()[2:] for line in lines[lines.index("Final state:") + 2 :]}
    assert final["hero"] == ["1", "0", "0"]  # the hero runs
    assert final["research/research"] == ["0", "1", "1"]  # its victim waits, evicted once


def test_now_defaults_to_the_newest_time_in_the_input() -> None:
    default = run(str(EXAMPLES / "hero-job"), "--output", "json")
    explicit = run(str(EXAMPLES / "hero-job"), "--output", "json", "--now", "2026-01-01T10:00:00Z")
    # The hero example's newest time is the pending workload's creation, 10:00.
    assert default == explicit


def test_a_workload_created_after_now_waits(tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "scenario"
    shutil.copytree(EXAMPLES / "hero-job", folder)
    out = run(str(folder), "--now", "2026-01-01T09:59:00Z")
    assert (
        "warning: Workload default/hero-job-xyz is created after --now (2026-01-01T10:00:00Z > "
        "2026-01-01T09:59:00Z): it waits" in out
    )
    assert "Preempted" not in out.split("Final state:")[0]
