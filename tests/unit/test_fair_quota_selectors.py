"""PreemptionConfig candidate selectors whose `quota` is a DRS value (issue 17 item 5): with fair
sharing on, a selector admits a candidate when the fair strategy it names would let the
preemptor take it (`DRSLessThanOrEqualToFinalShare`: Kueue's S2-a, `DRSLessThanInitialShare`:
S2-b, `DRSAllStrategies`: either); with fair sharing off, the config is unusable and said so in
the operator's status, by `simulate` and by `lint`.

The setup (cohort `all`, 13 cpu lendable: a, b, c of 3, d of 4): a holds a1-a3 (3, at nominal),
b holds b1 (4) and b2 (1, priority 10), c holds c1 (4), d holds d1 (1). The preemptor `in` (1 cpu)
waits in a, whose own policies are Never, so only the rule can find victims. Shares are
borrowed * 1000 / 13 (one resource, weight 1):
- a with the preemptor: 4 - 3 = 1 -> 76.9;
- b: 5 - 3 = 2 -> 153.8; without b1: 1 (not borrowing) -> 0; without b2: 4 - 3 = 1 -> 76.9;
- c: 4 - 3 = 1 -> 76.9; without c1: 0;
- d: 1 of 4, not borrowing (no fair-preemption target).
So S2-a (76.9 <= share after) holds for b2 only; S2-b (76.9 < share before) for b1 and b2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from builders import (
    NOW,
    admitted,
    as_dict,
    cache_of,
    cluster_queue,
    one_cycle,
    pending,
    preemption_config,
    rfc3339,
    rule,
    scenario,
    selector,
    simulate_cli,
)
from preemption_operator.api.objects import parse_object
from preemption_operator.cli import cli
from preemption_operator.controller import queue_status
from preemption_operator.engine import fair_sharing as fs
from preemption_operator.engine.candidates import Context
from preemption_operator.engine.configurable import quota_allows
from preemption_operator.engine.flavors import assign_flavors

ON = fs.FairSharing(enabled=True)
CONFIG = "drs"
FINAL, INITIAL, ALL = "DRSLessThanOrEqualToFinalShare", "DRSLessThanInitialShare", "DRSAllStrategies"


def objects(quota: str, scope: str = "WithinCohortTree") -> list[Any]:
    cqs = [
        cluster_queue("a", 3, cohort="all", within="Never", reclaim="Never", config=CONFIG),
        cluster_queue("b", 3, cohort="all"),
        cluster_queue("c", 3, cohort="all"),
        cluster_queue("d", 4, cohort="all"),
    ]
    config = preemption_config(CONFIG, rule("fair", selector(scope, quota=quota)))
    return scenario(
        cqs,
        *(admitted(f"a{i}", "a") for i in (1, 2, 3)),
        admitted("b1", "b", 4),
        admitted("b2", "b", 1, priority=10),
        admitted("c1", "c", 4),
        admitted("d1", "d", 1),
        pending("in", "a", 1),
        extra=[config],
    )


def allowed(quota: str, sharing: fs.FairSharing = ON) -> set[str]:
    """The admitted workloads the quota value admits for the preemptor, on the snapshot as loaded."""
    snapshot = cache_of(objects(quota), sharing).snapshot(NOW)
    (incoming,) = [wl for wls in snapshot.pending.values() for wl in wls]
    cq = snapshot.cluster_queues["a"]
    ctx = Context(incoming, cq, snapshot, assign_flavors(incoming, cq, snapshot.flavors, fair_sharing=sharing.enabled))
    before = {name: dict(q.node.usage) for name, q in snapshot.cluster_queues.items()}
    found = {
        wl.name
        for other in snapshot.cluster_queues.values()
        for wl in snapshot.admitted(other)
        if quota_allows(quota, ctx, other, wl)
    }
    assert {name: dict(q.node.usage) for name, q in snapshot.cluster_queues.items()} == before  # nothing moved
    return found


def test_less_than_or_equal_to_final_share_admits_only_what_keeps_the_target_at_or_above_the_preemptor() -> None:
    """S2-a: b2 (b 153.8 -> 76.9, 76.9 <= 76.9); not b1 (b -> 0), c1 (c -> 0), d1 (d does not
    borrow), nor the preemptor's own a1-a3."""
    assert allowed(FINAL) == {"b2"}


def test_less_than_initial_share_admits_what_its_queue_had_above_the_preemptor() -> None:
    """S2-b: b1 and b2 (76.9 < 153.8, whatever the removal); not c1 (76.9 < 76.9 fails)."""
    assert allowed(INITIAL) == {"b1", "b2"}


def test_all_strategies_admits_what_either_strategy_admits() -> None:
    assert allowed(ALL) == {"b1", "b2"}


@pytest.mark.parametrize("quota", [FINAL, INITIAL, ALL])
def test_nothing_is_admitted_with_fair_sharing_off(quota: str) -> None:
    assert allowed(quota, fs.OFF) == set()


@pytest.mark.parametrize(("quota", "victim"), [(FINAL, "b2"), (INITIAL, "b1"), (ALL, "b1")])
def test_the_rule_preempts_what_its_strategy_allows(quota: str, victim: str) -> None:
    """In a cycle: fair sharing has no candidates (a's policies are Never), so the rule decides.
    Candidate order puts b1 (priority 0) before b2 (priority 10): S2-b takes b1, S2-a refuses it
    and takes b2; one cpu is enough either way."""
    result = one_cycle(objects(quota), fair_sharing=ON)
    assert {p.victim.name: p.target.reason for p in result.preempted} == {victim: "ConfigurablePreemption"}


def test_fair_sharing_candidates_come_before_the_rule() -> None:
    """With reclaimWithinCohort Any, fair preemption runs first: its first strategy (S2-a) turns b1
    down and takes b2 (InCohortFairSharing); the rule, which would take b1, is never reached."""
    objs = objects(ALL)
    objs[2]["spec"]["preemption"]["reclaimWithinCohort"] = "Any"
    assert objs[2]["metadata"]["name"] == "a"
    result = one_cycle(objs, fair_sharing=ON)
    assert {p.victim.name: p.target.reason for p in result.preempted} == {"b2": "InCohortFairSharing"}


# -- fair sharing off: the config is unusable, and said so -------------------------------------------------

NEEDS = (
    f'preemptionConfig "{CONFIG}" rule "fair" candidateSelectors[0].quota: {ALL} compares Dominant Resource '
    "Shares, which exist only with fair sharing: turn it on with --fair-sharing"
)


def config_object(quota: str = ALL) -> Any:
    (body,) = [o for o in objects(quota) if as_dict(o)["kind"] == "PreemptionConfig"]
    return parse_object(as_dict(body))


def test_no_victim_and_a_warning_in_a_cycle_with_fair_sharing_off() -> None:
    from preemption_operator.engine.configurable import ConfigurablePreemption
    from preemption_operator.engine.scheduler import QueueState, Scheduler

    snapshot = cache_of(objects(ALL)).snapshot(NOW)
    configurable = ConfigurablePreemption()
    configurable.begin_cycle(snapshot)
    result = Scheduler(extra=configurable.candidates).cycle(snapshot, QueueState())
    assert result.preempted == []
    assert any(w.startswith(NEEDS) for w in configurable.warnings), configurable.warnings
    assert {n.reason for n in configurable.notices} == {"InvalidPreemptionConfig"}


def test_operator_status_says_fair_sharing_is_required() -> None:
    config = config_object()
    status = queue_status.preemption_config_status(config, ["a"], None, NOW)
    (valid,) = [c for c in status["conditions"] if c["type"] == "Valid"]
    assert (valid["status"], valid["reason"], valid["message"]) == ("False", "FairSharingRequired", NEEDS)
    status = queue_status.preemption_config_status(config, ["a"], None, NOW, fair_sharing=True)
    (valid,) = [c for c in status["conditions"] if c["type"] == "Valid"]
    assert (valid["status"], valid["reason"]) == ("True", "Valid")


def test_cluster_queue_condition_says_the_config_is_invalid_without_fair_sharing() -> None:
    snapshot = cache_of(objects(ALL)).snapshot(NOW)
    cq = snapshot.cluster_queues["a"]
    configs = {CONFIG: config_object()}
    assert queue_status.preemption_config_condition(cq, configs, {}) == (
        "False",
        "InvalidConfig",
        f"PreemptionConfig {CONFIG} is invalid: {NEEDS}",
    )
    assert queue_status.preemption_config_condition(cq, configs, {}, fair_sharing=True) == (
        "True",
        "Ready",
        f"PreemptionConfig {CONFIG}: 1 rule(s)",
    )


def write(tmp_path: Path, objs: list[Any]) -> Path:
    path = tmp_path / "setup.yaml"
    path.write_text(yaml.safe_dump_all([as_dict(o) for o in objs], sort_keys=False))
    return path


@pytest.mark.parametrize("command", ["simulate", "explain"])
def test_simulate_and_explain_refuse_the_config_without_fair_sharing(tmp_path: Path, command: str) -> None:
    path = write(tmp_path, objects(ALL))
    args = [command, str(path), "--now", rfc3339(NOW), *(["--workload", "default/in"] if command == "explain" else [])]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: {path}: PreemptionConfig {CONFIG}: {NEEDS}\n"
    assert CliRunner().invoke(cli, [*args, "--fair-sharing"], catch_exceptions=False).exit_code == 0


def test_simulate_with_fair_sharing_runs_the_rule() -> None:
    outcome = simulate_cli(objects(INITIAL), flags=["--fair-sharing"])
    assert outcome.reasons["b1"] == "ConfigurablePreemption"


def lint_json(path: Path, *flags: str) -> tuple[int, dict[str, Any]]:
    import json

    result = CliRunner().invoke(cli, ["lint", str(path), "-o", "json", *flags], catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout)


@pytest.mark.slow
def test_lint_reports_the_config_without_fair_sharing(tmp_path: Path) -> None:
    path = write(tmp_path, objects(ALL))
    code, report = lint_json(path)
    needs = [f for f in report["findings"] if f["code"] == "FairSharingRequired"]
    assert code == 1
    assert [(f["severity"], f["message"], f["objects"]) for f in needs] == [
        ("error", NEEDS, [f"PreemptionConfig/{CONFIG}"])
    ]
    assert "FairSharingRequired" in report["checks"]
    _, report = lint_json(path, "--fair-sharing")
    assert not [f for f in report["findings"] if f["code"] == "FairSharingRequired"]


def test_the_operator_lint_leaves_it_to_the_valid_condition() -> None:
    """lint(fair_sharing=None), and lint as the operator's lint process calls it (its own switch,
    judge_usability off): no FairSharingRequired (the Valid condition already says it)."""
    from preemption_operator import lint
    from preemption_operator.engine.fair_sharing import OFF

    parsed = [parse_object(as_dict(o)) for o in objects(ALL)]
    assert not [f for f in lint.lint(parsed).findings if f.code == "FairSharingRequired"]
    operator = lint.lint(parsed, fair_sharing=OFF, judge_usability=False)
    assert not [f for f in operator.findings if f.code == "FairSharingRequired"]
