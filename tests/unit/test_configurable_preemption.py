"""Configurable preemption (PreemptionConfig): the reference's acceptance cases (§9 A), evaluator-level
checks, properties over random configs and clusters, and the hero-job example.

Every full-cycle case runs twice: through one engine cycle (Cache -> snapshot -> Scheduler with the
configurable candidate stream) and through `preemption-operator simulate --output json`. The
project's choices for a victim chosen by a rule: `Evicted`/`Preempted`, `Preempted`/
`ConfigurablePreemption`, both with the message `Preempted by <ns>/<name> because of preemption
config <config> rule <rule>/<i>[,<j>][; <rule2>/<k>]`, and a `schedulingStats.evictions` entry
`{reason: Preempted, underlyingCause: <config>}`. Classic victims keep Kueue's classic text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from builders import (
    T0,
    Obj,
    WorkloadBuilder,
    admitted,
    as_dict,
    basics,
    cache_of,
    cluster_queue,
    cohort,
    local_queue,
    parse,
    preemption_config,
    rfc3339,
    rule,
    selector,
    workload,
    workload_priority_class,
)
from preemption_operator.cli import cli
from preemption_operator.engine import CycleResult, Engine, QueueState
from preemption_operator.engine import workload_status as wl_status
from preemption_operator.engine.cache import Cache
from preemption_operator.engine.candidates import Candidate, Context
from preemption_operator.engine.configurable import ConfigurablePreemption
from preemption_operator.engine.flavors import assign_flavors
from preemption_operator.offline import simulate as simulation

NOW_DT = datetime(2026, 11, 30, tzinfo=UTC)
NOW = rfc3339(NOW_DT)
CONFIG = "default-config"
PREEMPTOR = "default/incoming"
REPO = Path(__file__).resolve().parents[2]

CONFIGURABLE = "ConfigurablePreemption"
HUMAN = {
    "InClusterQueue": "prioritization in the ClusterQueue",
    "InCohortReclamation": "reclamation within the cohort",
    "InCohortFairSharing": "Fair Sharing within the cohort",
    "InCohortReclaimWhileBorrowing": "reclamation within the cohort while borrowing",
}


# ------------------------------------------------------------------------------------------------
# Expectations
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expect:
    reason: str
    message: str
    cause: str
    count: int = 1


def by_rule(rules: str, config: str = CONFIG, preemptor: str = PREEMPTOR, count: int = 1) -> Expect:
    """A victim chosen by a PreemptionConfig rule; `rules` as printed, e.g. `r/0,1; r2/1`."""
    message = f"Preempted by {preemptor} because of preemption config {config} rule {rules}"
    return Expect(CONFIGURABLE, message, config, count)


def classic(reason: str, preemptor_path: str, victim_path: str, preemptor_uid: str = "incoming") -> Expect:
    message = (
        f"Preempted to accommodate a workload (UID: {preemptor_uid}, JobUID: UNKNOWN) due to {HUMAN[reason]}; "
        f"preemptor path: {preemptor_path}; preemptee path: {victim_path}"
    )
    return Expect(reason, message, "")


# ------------------------------------------------------------------------------------------------
# Running a scenario: one engine cycle, or `simulate --output json`
# ------------------------------------------------------------------------------------------------


@dataclass
class Victim:
    preemptor: str
    reason: str
    status: dict[str, Any]
    """The victim's status after the eviction, in wire form."""


@dataclass
class Outcome:
    victims: dict[str, Victim] = field(default_factory=dict)
    pending: dict[str, str] = field(default_factory=dict)
    """Workload key -> QuotaReserved=False reason given in the cycle."""
    admitted: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)


def load(objects: list[Obj]) -> Cache:
    return cache_of(objects)


def engine_cycle(objects: list[Obj]) -> tuple[Outcome, CycleResult]:
    """One scheduling cycle through the engine, with the configurable candidate stream plugged in."""
    snapshot = load(objects).snapshot(NOW_DT)
    result = Engine().cycle(snapshot, QueueState())
    out = Outcome(warnings=list(result.warnings))
    for p in result.preempted:
        before = p.victim.obj.status.to_wire() if p.victim.obj.status is not None else None
        after = wl_status.evicted(before, p, NOW_DT, None)
        assert p.victim.key not in out.victims, f"{p.victim.key} preempted twice"
        out.victims[p.victim.key] = Victim(p.preemptor.key, p.target.reason, after)
    out.pending = {pend.workload.key: pend.reason for pend in result.pending}
    out.admitted = {a.workload.key for a in result.admitted}
    return out, result


def write_objects(objects: list[Obj], folder: Path) -> Path:
    path = folder / "objects.yaml"
    path.write_text(yaml.safe_dump_all([as_dict(o) for o in objects], sort_keys=False))
    return path


def simulate_cli(objects: list[Obj], folder: Path, *, output: str = "json", max_cycles: int | None = 1) -> str:
    args = ["simulate", str(write_objects(objects, folder)), "--output", output, "--now", NOW]
    if max_cycles is not None:
        args += ["--max-cycles", str(max_cycles)]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def outcome_from_json(data: dict[str, Any], cycle: int | None = 1) -> Outcome:
    statuses = {f"{wl['namespace']}/{wl['name']}": wl["status"] for wl in data["workloads"]}
    out = Outcome(warnings=list(data["warnings"]))
    for action in data["actions"]:
        if cycle is not None and action["cycle"] != cycle:
            continue
        key = action["workload"]
        if action["action"] == "Preempted":
            assert key not in out.victims, f"{key} preempted twice"
            out.victims[key] = Victim(action["preemptor"], action["reason"], statuses[key])
            # The action carries the Preempted condition's message.
            condition = wl_status.get_condition(statuses[key], "Preempted") or {}
            assert action["message"] == condition.get("message", "")
        elif action["action"] == "Pending":
            out.pending[key] = action["reason"]
        elif action["action"] == "Admitted":
            out.admitted.add(key)
    return out


Runner = Callable[[list[Obj]], Outcome]


@pytest.fixture(params=["engine", "simulate"])
def run(request: pytest.FixtureRequest, tmp_path: Path) -> Runner:
    """Runs the first scheduling cycle of a scenario, through the engine or through the CLI."""

    def runner(objects: list[Obj]) -> Outcome:
        if request.param == "engine":
            return engine_cycle(objects)[0]
        return outcome_from_json(json.loads(simulate_cli(objects, tmp_path)))

    return runner


def key(name: str) -> str:
    return name if "/" in name else f"default/{name}"


def assert_victims(out: Outcome, expected: dict[str, Expect], preemptor: str = PREEMPTOR) -> None:
    assert set(out.victims) == {key(n) for n in expected}, out.victims.keys()
    for name, exp in expected.items():
        victim = out.victims[key(name)]
        assert victim.preemptor == preemptor
        assert victim.reason == exp.reason, name
        status = victim.status
        ev = wl_status.get_condition(status, "Evicted")
        pre = wl_status.get_condition(status, "Preempted")
        assert ev is not None and pre is not None, name
        assert (ev["status"], ev["reason"], ev["message"]) == ("True", "Preempted", exp.message), name
        assert (pre["status"], pre["reason"], pre["message"]) == ("True", exp.reason, exp.message), name
        evictions = [
            (e["reason"], e.get("underlyingCause", ""), e["count"])
            for e in (status.get("schedulingStats") or {}).get("evictions", [])
        ]
        assert ("Preempted", exp.cause, exp.count) in evictions, (name, evictions)
    if expected:
        assert out.pending.get(preemptor) == "WaitingForPreemptedWorkloads"
    else:
        assert out.pending.get(preemptor) == "WaitingForQuota", out.pending


# ------------------------------------------------------------------------------------------------
# Scenario helpers (reference §9 conventions: flavor `default`, cpu, CQ `a` annotated)
# ------------------------------------------------------------------------------------------------


def scenario(
    cpu: int,
    *objects: Obj | WorkloadBuilder,
    rules: list[Obj] | None = None,
    preemption: dict[str, Any] | None = None,
    config: str | None = CONFIG,
    cohort_name: str | None = "all",
) -> list[Obj]:
    """CQ `a` (cohort `all`, `cpu` cpu, annotated with `config`), LocalQueue default/main, the
    PreemptionConfig `default-config` holding `rules`, then `objects`."""
    out = [
        *basics(),
        cluster_queue("a", cpu, cohort=cohort_name, config=config, preemption=preemption),
        local_queue("main", "a"),
    ]
    if rules is not None:
        out.append(preemption_config(CONFIG, *rules))
    return [as_dict(o) for o in (*out, *objects)]


def in_a(name: str, cpu: int = 1, **kwargs: Any) -> WorkloadBuilder:
    kwargs.setdefault("queue", "main")
    return admitted(name, "a", cpu, **kwargs)


def incoming(cpu: int = 1, **kwargs: Any) -> WorkloadBuilder:
    kwargs.setdefault("queue", "main")
    return workload("incoming", cpu=cpu, **kwargs)


WITHIN_CQ = [rule("test-rule-one", selector("WithinClusterQueue"))]
TIER = "preemption-tier"


def tier_lt(scope: str = "WithinClusterQueue", **extra: Any) -> Obj:
    return selector(scope, numericLabels=[{"key": TIER, "comparison": "LessThan", **extra}])


# ------------------------------------------------------------------------------------------------
# §9 A: full-cycle cases
# ------------------------------------------------------------------------------------------------


def test_a1_cluster_queue_without_annotation_gets_no_configurable_candidates(run: Runner) -> None:
    out = run(scenario(2, in_a("a1"), in_a("a2"), incoming(1), rules=WITHIN_CQ, config=None))
    assert_victims(out, {})
    assert not [w for w in out.warnings if "PreemptionConfig" in w or "preemptionConfig" in w]


def test_a3_within_cluster_queue_tie_broken_by_uid(run: Runner) -> None:
    out = run(scenario(2, in_a("a1"), in_a("a2"), incoming(1), rules=WITHIN_CQ))
    assert_victims(out, {"a1": by_rule("test-rule-one/0")})


def test_a3_stats_entry_for_the_config_is_incremented(run: Runner) -> None:
    """An existing (Preempted, default-config) entry counts up; other entries are left alone."""
    history = [
        {"reason": "Preempted", "underlyingCause": "", "count": 5},
        {"reason": "Preempted", "underlyingCause": CONFIG, "count": 2},
    ]
    a1 = workload("a1", queue="main").admitted("a", evictions=history)
    out = run(scenario(2, a1, in_a("a2"), incoming(1), rules=WITHIN_CQ))
    assert_victims(out, {"a1": by_rule("test-rule-one/0", count=3)})
    evictions = out.victims["default/a1"].status["schedulingStats"]["evictions"]
    assert sorted((e["underlyingCause"], e["count"]) for e in evictions) == [("", 5), (CONFIG, 3)]


def test_a4_both_victims_when_the_preemptor_needs_everything(run: Runner) -> None:
    out = run(scenario(2, in_a("a1"), in_a("a2"), incoming(2), rules=WITHIN_CQ))
    assert_victims(out, {"a1": by_rule("test-rule-one/0"), "a2": by_rule("test-rule-one/0")})


def test_a5_preemptor_selector_not_matching(run: Runner) -> None:
    rules = [
        rule("test-rule-one", selector("WithinClusterQueue"), preemptor_selector={"matchLabels": {"team": "research"}})
    ]
    out = run(scenario(2, in_a("a1"), in_a("a2"), incoming(1, labels={"team": "batch"}), rules=rules))
    assert_victims(out, {})


def test_a5_preemptor_selector_matching(run: Runner) -> None:
    rules = [
        rule("test-rule-one", selector("WithinClusterQueue"), preemptor_selector={"matchLabels": {"team": "research"}})
    ]
    out = run(scenario(2, in_a("a1"), in_a("a2"), incoming(1, labels={"team": "research"}), rules=rules))
    assert_victims(out, {"a1": by_rule("test-rule-one/0")})


def test_a6_missing_config_warns_and_preempts_nothing(run: Runner) -> None:
    out = run(scenario(2, in_a("a1"), in_a("a2"), incoming(1), rules=WITHIN_CQ, config="unknown-name"))
    assert_victims(out, {})
    missing = [w for w in out.warnings if "unknown-name" in w]
    assert len(missing) == 1, out.warnings
    assert "ClusterQueue a" in missing[0] and "not found" in missing[0]


def test_a6_missing_config_warning_in_text_output(tmp_path: Path) -> None:
    objects = scenario(2, in_a("a1"), in_a("a2"), incoming(1), rules=WITHIN_CQ, config="unknown-name")
    text = simulate_cli(objects, tmp_path, output="text", max_cycles=None)
    lines = [line for line in text.splitlines() if line.startswith("warning:") and "unknown-name" in line]
    assert len(lines) == 1, text
    assert "ClusterQueue a" in lines[0] and "PreemptionConfig unknown-name" in lines[0]
    assert "Preempted" not in text.split("Final state:")[0]


def _a7(operator: str) -> list[Obj]:
    rules = [
        rule(
            "test-rule-one",
            selector("WithinClusterQueue"),
            preemptor_selector={"matchExpressions": [{"key": "team", "operator": operator, "values": ["research"]}]},
        )
    ]
    return scenario(2, in_a("a1"), in_a("a2"), incoming(1, labels={"team": "research"}), rules=rules)


def test_a7_invalid_preemptor_selector_warns_and_preempts_nothing() -> None:
    """Kueue's case on the live path: the engine warns and the rule preempts nothing."""
    out = engine_cycle(_a7("invalid"))[0]
    assert_victims(out, {})
    broken = [w for w in out.warnings if '"invalid"' in w]
    assert len(broken) == 1, out.warnings
    assert f'preemptionConfig "{CONFIG}" rule "test-rule-one"' in broken[0]
    assert "PreemptorSelector" in broken[0] and "InvalidSelector" in broken[0]


def test_a7_simulate_refuses_the_invalid_selector(tmp_path: Path) -> None:
    """Issue 15: offline, the same input is an error (exit 2) naming file, config, rule and field."""
    args = ["simulate", str(write_objects(_a7("invalid"), tmp_path)), "--now", NOW]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert (
        f'PreemptionConfig {CONFIG}: preemptionConfig "{CONFIG}" rule "test-rule-one": building PreemptorSelector '
        'filter (InvalidSelector): matchExpressions[0]: "invalid" is not a valid label selector operator'
    ) in result.output


def test_a7_after_fixing_the_operator_the_victim_is_chosen(run: Runner) -> None:
    out = run(_a7("In"))
    assert_victims(out, {"a1": by_rule("test-rule-one/0")})
    assert not [w for w in out.warnings if "preemptionConfig" in w]


def _a8(cpu: int) -> list[Obj]:
    return scenario(
        3,
        in_a("a1", priority=10),
        in_a("a2", priority=20, labels={TIER: "1"}),
        in_a("a3", priority=200, labels={TIER: "2"}),
        incoming(cpu, priority=100, labels={TIER: "5"}),
        rules=[rule("test-rule-one", tier_lt())],
        preemption={"withinClusterQueue": "LowerPriority"},
    )


def test_a8_classic_candidates_first_configurable_spared(run: Runner) -> None:
    out = run(_a8(2))
    expect = classic("InClusterQueue", "/all/a", "/all/a")
    assert_victims(out, {"a1": expect, "a2": expect})


def test_a9_classic_then_configurable(run: Runner) -> None:
    out = run(_a8(3))
    expect = classic("InClusterQueue", "/all/a", "/all/a")
    assert_victims(out, {"a1": expect, "a2": expect, "a3": by_rule("test-rule-one/0")})


def test_a10_other_cluster_queue_first_within_parent_cohort(run: Runner) -> None:
    objects = scenario(
        1,
        cluster_queue("b", 1, cohort="all"),
        in_a("a1"),
        admitted("b1", "b"),
        incoming(1),
        rules=[rule("test-rule-one", selector("WithinParentCohort"))],
    )
    out = run(objects)
    assert_victims(out, {"b1": by_rule("test-rule-one/0")})


def test_a11_classic_reason_wins_and_the_victim_is_taken_once(run: Runner) -> None:
    out = run(
        scenario(
            1,
            in_a("a1", priority=10),
            incoming(1, priority=100),
            rules=WITHIN_CQ,
            preemption={"withinClusterQueue": "LowerPriority"},
        )
    )
    assert_victims(out, {"a1": classic("InClusterQueue", "/all/a", "/all/a")})


def test_a12_classic_candidate_given_back_in_fill_back(run: Runner) -> None:
    objects = scenario(
        1,
        cluster_queue("b", 2, cohort="all"),
        in_a("s1", priority=50),
        admitted("c1", "b", 2, priority=10, labels={TIER: "1"}),
        incoming(2, priority=100, labels={TIER: "5"}),
        rules=[rule("test-rule-one", tier_lt("WithinParentCohort"))],
        preemption={"withinClusterQueue": "LowerPriority"},
    )
    out = run(objects)
    assert_victims(out, {"c1": by_rule("test-rule-one/0")})


def test_a12_explanation_records_the_spared_classic_candidate() -> None:
    objects = scenario(
        1,
        cluster_queue("b", 2, cohort="all"),
        in_a("s1", priority=50),
        admitted("c1", "b", 2, priority=10, labels={TIER: "1"}),
        incoming(2, priority=100, labels={TIER: "5"}),
        rules=[rule("test-rule-one", tier_lt("WithinParentCohort"))],
        preemption={"withinClusterQueue": "LowerPriority"},
    )
    _, result = engine_cycle(objects)
    [explanation] = result.explanations
    outcomes = {(r.workload, r.outcome) for r in explanation.candidates}
    assert ("default/s1", "spared") in outcomes
    assert ("default/c1", "chosen") in outcomes


def _priority_case(mode: str) -> list[Obj]:
    return scenario(
        2,
        in_a("a1", priority=100, boost=-60),
        in_a("a2", priority=60),
        incoming(1, priority=70),
        rules=[
            rule("test-rule-one", selector("WithinClusterQueue", priority={"mode": mode, "comparison": "LessThan"}))
        ],
    )


def test_a13_priority_base_less_than(run: Runner) -> None:
    rules = [rule("test-rule-one", selector("WithinClusterQueue", priority={"mode": "Base", "comparison": "LessThan"}))]
    out = run(scenario(2, in_a("a1", priority=50), in_a("a2", priority=200), incoming(1, priority=100), rules=rules))
    assert_victims(out, {"a1": by_rule("test-rule-one/0")})


def test_a14_priority_boosted_uses_effective_priority(run: Runner) -> None:
    out = run(_priority_case("Boosted"))
    assert_victims(out, {"a1": by_rule("test-rule-one/0")})


def test_a15_priority_base_ignores_the_boost(run: Runner) -> None:
    out = run(_priority_case("Base"))
    assert_victims(out, {"a2": by_rule("test-rule-one/0")})


def test_a16_label_selector(run: Runner) -> None:
    rules = [
        rule("test-rule-one", selector("WithinClusterQueue", labelSelector={"matchLabels": {"env": "preemptible"}}))
    ]
    objects = scenario(
        2,
        in_a("a1", labels={"env": "preemptible"}),
        in_a("a2", labels={"env": "guaranteed"}),
        incoming(1),
        rules=rules,
    )
    out = run(objects)
    assert_victims(out, {"a1": by_rule("test-rule-one/0")})


def test_a16_label_selector_matching_nobody(run: Runner) -> None:
    rules = [
        rule("test-rule-one", selector("WithinClusterQueue", labelSelector={"matchLabels": {"env": "preemptible"}}))
    ]
    objects = scenario(2, in_a("a1", labels={"env": "guaranteed"}), in_a("a2"), incoming(1), rules=rules)
    assert_victims(run(objects), {})


def test_a17_any_cluster_queue_gives_back_a_victim_that_frees_nothing(run: Runner) -> None:
    objects = scenario(
        1,
        cluster_queue("b", 1, cohort="two"),
        in_a("a1", priority=100),
        admitted("b1", "b", priority=10),
        incoming(1, priority=0),
        rules=[rule("test-rule-one", selector("AnyClusterQueue"))],
        cohort_name="one",
    )
    out = run(objects)
    assert_victims(out, {"a1": by_rule("test-rule-one/0")})


def test_a18_already_evicted_first(run: Runner) -> None:
    """z1 is taken before a1 despite its UID. Its eviction is already under way, so, as Kueue
    counts such a target without issuing a new preemption (IssuePreemptions skips it), only the
    engine's decision lists it; the preemptor waits for it either way."""
    objects = scenario(2, in_a("a1"), in_a("z1").evicted(), incoming(1), rules=WITHIN_CQ)
    out = run(objects)
    assert set(out.victims) <= {"default/z1"}
    assert out.pending.get(PREEMPTOR) == "WaitingForPreemptedWorkloads"


def test_a18_an_eviction_under_way_gets_no_new_conditions_or_stats(tmp_path: Path) -> None:
    objects = scenario(2, in_a("a1"), in_a("z1").evicted(), incoming(1), rules=WITHIN_CQ)
    data = json.loads(simulate_cli(objects, tmp_path))
    assert [a for a in data["actions"] if a["workload"] == "default/z1"] == []
    (z1,) = [wl["status"] for wl in data["workloads"] if wl["name"] == "z1"]
    ev = wl_status.get_condition(z1, "Evicted")
    assert ev is not None and (ev["status"], ev["reason"], ev["message"]) == ("True", "Preempted", "Preempted earlier")
    assert wl_status.get_condition(z1, "Preempted") is None
    assert not (z1.get("schedulingStats") or {}).get("evictions")


def test_a18_decision_names_the_rule() -> None:
    objects = scenario(2, in_a("a1"), in_a("z1").evicted(), incoming(1), rules=WITHIN_CQ)
    _, result = engine_cycle(objects)
    [p] = result.preempted
    assert p.victim.name == "z1" and p.target.rule is not None
    assert wl_status.eviction_messages(p)[1] == by_rule("test-rule-one/0").message


def _a23(cpu: int) -> list[Obj]:
    return scenario(
        2,
        in_a("a1", priority=100, labels={TIER: "1"}),
        in_a("a2", priority=10),
        incoming(cpu, labels={TIER: "5"}),
        rules=[
            rule("tier-rule", tier_lt()),
            rule("quota-rule", selector("WithinClusterQueue"), trigger="InsufficientQuota"),
        ],
    )


def test_a23_always_tier_then_insufficient_quota_tier(run: Runner) -> None:
    out = run(_a23(2))
    # Each victim names only the rules of the tier that selected it.
    assert_victims(out, {"a1": by_rule("tier-rule/0"), "a2": by_rule("quota-rule/0")})


def test_a24_insufficient_quota_tier_not_reached(run: Runner) -> None:
    out = run(_a23(1))
    assert_victims(out, {"a1": by_rule("tier-rule/0")})


def _a29(operator: str) -> list[Obj]:
    broken = selector(
        "WithinClusterQueue",
        labelSelector={"matchExpressions": [{"key": "preemptible", "operator": operator, "values": ["true"]}]},
    )
    fallback = selector("WithinClusterQueue", labelSelector={"matchLabels": {"fallback": "true"}})
    rules = [
        rule("always-rule", broken, preemptor_selector={"matchLabels": {"preemptor": "true"}}),
        rule("fallback-rule", fallback, trigger="InsufficientQuota"),
    ]
    return scenario(
        2,
        in_a("a", labels={"preemptible": "true"}),
        in_a("b", priority=10, labels={"fallback": "true"}),
        incoming(1, priority=100, labels={"preemptor": "true"}),
        rules=rules,
    )


def test_a29_invalid_always_selector_stops_later_tiers() -> None:
    """On the live path (the engine); `simulate` refuses such input (see the A7 test)."""
    out = engine_cycle(_a29("invalid"))[0]
    assert_victims(out, {})
    broken = [w for w in out.warnings if '"invalid"' in w]
    assert len(broken) == 1, out.warnings
    assert f'preemptionConfig "{CONFIG}" rule "always-rule" candidateSelectors[0]' in broken[0]
    assert "LabelSelector" in broken[0]


def test_a29_after_fixing_the_operator(run: Runner) -> None:
    out = run(_a29("In"))
    assert_victims(out, {"a": by_rule("always-rule/0")})
    assert not [w for w in out.warnings if "preemptionConfig" in w]


def _hero() -> list[Obj]:
    return [
        *basics(),
        cluster_queue("cq-regular", 2, cohort="root"),
        cluster_queue("cq-hero", 1, cohort="root", config="hero-preemption"),
        local_queue("regular", "cq-regular"),
        local_queue("hero", "cq-hero"),
        preemption_config("hero-preemption", rule("hero-preemption", selector("AnyClusterQueue"))),
        admitted("wl-a", "cq-regular", 2, queue="regular"),
        workload("hero", cpu=2, queue="hero"),
    ]


def test_a30_hero_first_cycle(run: Runner) -> None:
    out = run(_hero())
    assert_victims(
        out, {"wl-a": by_rule("hero-preemption/0", config="hero-preemption", preemptor="default/hero")}, "default/hero"
    )


def test_a30_hero_admitted_later_and_victim_pending(tmp_path: Path) -> None:
    objects = _hero()
    api = simulation.run(parse(objects), NOW_DT).to_dict()
    cli_data = json.loads(simulate_cli(objects, tmp_path, max_cycles=None))
    for data in (api, cli_data):
        actions = [(a["cycle"], a["action"], a["workload"]) for a in data["actions"]]
        assert (1, "Preempted", "default/wl-a") in actions
        assert (1, "Pending", "default/hero") in actions
        [admission] = [a for a in actions if a[1] == "Admitted"]
        assert admission[0] > 1 and admission[2] == "default/hero"
        final = {f"{wl['namespace']}/{wl['name']}": wl["status"] for wl in data["workloads"]}
        hero, victim = final["default/hero"], final["default/wl-a"]
        assert wl_status.get_condition(hero, "Admitted")["status"] == "True"
        assert hero["admission"]["clusterQueue"] == "cq-hero"
        assert hero["admission"]["podSetAssignments"][0]["resourceUsage"] == {"cpu": "2"}  # borrows 1
        assert wl_status.get_condition(victim, "Admitted")["status"] == "False"
        assert wl_status.get_condition(victim, "QuotaReserved")["status"] == "False"
        assert "admission" not in victim
        assert not [a for a in data["actions"] if a["action"] == "Preempted" and a["cycle"] > 1]
        assert not [w for w in data["warnings"] if "max-cycles" in w]


def test_a32_numeric_label_with_fallback(run: Runner) -> None:
    key_ = "test-priority-label"
    rules = [
        rule(
            "test-rule-one",
            selector("WithinClusterQueue", numericLabels=[{"key": key_, "comparison": "LessThan", "fallbackValue": 0}]),
        )
    ]
    objects = scenario(
        2,
        in_a("job-1", labels={key_: "1"}),
        in_a("job-9", labels={key_: "9"}),
        incoming(1, labels={key_: "5"}),
        rules=rules,
        preemption={"withinClusterQueue": "Never", "reclaimWithinCohort": "Never"},
    )
    out = run(objects)
    assert_victims(out, {"job-1": by_rule("test-rule-one/0")})


def test_several_rules_are_listed_in_spec_order(run: Runner) -> None:
    """`rule r1/0; r2/1`: every rule of the tier that selected the victim, in spec order."""
    rules = [
        rule("zeta", selector("WithinClusterQueue")),
        rule(
            "alpha",
            selector("WithinClusterQueue", labelSelector={"matchLabels": {"x": "y"}}),
            selector("WithinCohortTree"),
        ),
    ]
    out = run(scenario(1, in_a("a1"), incoming(1), rules=rules))
    assert_victims(out, {"a1": by_rule("zeta/0; alpha/1")})


# ------------------------------------------------------------------------------------------------
# Evaluator level: the candidate stream of ConfigurablePreemption on a Context
# ------------------------------------------------------------------------------------------------


class ControlledContext(Context):
    """A Context whose quota check can be forced (as Kueue's evaluator tests do)."""

    quota_fits: bool | None = None

    def fits_quota(self, allow_borrowing: bool) -> bool:
        if self.quota_fits is not None:
            return self.quota_fits
        return super().fits_quota(allow_borrowing)


def evaluate(objects: list[Obj], preemptor: str = PREEMPTOR, quota_fits: bool | None = None) -> list[Candidate]:
    """The candidates ConfigurablePreemption yields for the pending `preemptor`, each removed from
    the snapshot as the victim search does, until the stream ends."""
    snapshot = load(objects).snapshot(NOW_DT)
    [(wl, cq_name)] = [(wl, name) for name, queue in snapshot.pending.items() for wl in queue if wl.key == preemptor]
    cq = snapshot.cluster_queues[cq_name]
    ctx = ControlledContext(
        wl, cq, snapshot, assign_flavors(wl, cq, snapshot.flavors, snapshot.tas, snapshot.node_usage)
    )
    ctx.quota_fits = quota_fits
    found = []
    for cand in ConfigurablePreemption().candidates(ctx, True):
        snapshot.remove_workload(cand.workload)
        found.append(cand)
    return found


def names(cands: list[Candidate]) -> list[str]:
    return [c.workload.name for c in cands]


def _a27() -> list[Obj]:
    return scenario(
        3,
        in_a("a1", labels={TIER: "1"}),
        in_a("a2", labels={TIER: "1"}),
        in_a("a3"),
        incoming(2, labels={TIER: "5"}),
        rules=[
            rule("tier-rule", tier_lt()),
            rule("quota-rule", selector("WithinClusterQueue"), trigger="InsufficientQuota"),
        ],
    )


def test_a27_quota_fits_so_the_insufficient_quota_tier_is_skipped() -> None:
    cands = evaluate(_a27())
    assert names(cands) == ["a1", "a2"]
    assert all(c.reason == CONFIGURABLE and c.rule is not None for c in cands)
    assert {c.rule.describe() for c in cands if c.rule} == {"tier-rule/0"}


def test_a27_control_quota_still_insufficient_reaches_the_next_tier() -> None:
    cands = evaluate(_a27(), quota_fits=False)
    assert names(cands) == ["a1", "a2", "a3"]
    assert cands[2].rule is not None and cands[2].rule.describe() == "quota-rule/0"


def test_a28_topology_tier_once_quota_fits() -> None:
    objects = scenario(
        3,
        in_a("a1", labels={TIER: "1"}),
        in_a("a2"),
        in_a("a3"),
        incoming(1, labels={TIER: "5"}),
        rules=[
            rule("tier-rule", tier_lt()),
            rule("topology-rule", selector("WithinClusterQueue"), trigger="QuotaFeasibleAndInsufficientTopology"),
        ],
    )
    cands = evaluate(objects)
    assert names(cands) == ["a1", "a2", "a3"]
    assert [c.rule.describe() for c in cands if c.rule] == ["tier-rule/0", "topology-rule/0", "topology-rule/0"]
    # While quota does not fit, the topology tier is not applied.
    assert names(evaluate(objects, quota_fits=False)) == ["a1"]


def _a33() -> list[Obj]:
    return [
        *basics("ns1", "ns2"),
        cluster_queue("a", 3, cohort="all", config=CONFIG),
        local_queue("lq1", "a", "ns1"),
        local_queue("lq2", "a", "ns1"),
        local_queue("lq1", "a", "ns2"),
        preemption_config(CONFIG, rule("test-rule-one", selector("WithinLocalQueue"))),
        admitted("same-lq", "a", namespace="ns1", queue="lq1"),
        admitted("diff-lq", "a", namespace="ns1", queue="lq2"),
        admitted("diff-ns", "a", namespace="ns2", queue="lq1"),
        workload("incoming", cpu=1, namespace="ns1", queue="lq1"),
    ]


def test_a33_within_local_queue_evaluator() -> None:
    assert names(evaluate(_a33(), preemptor="ns1/incoming")) == ["same-lq"]


def test_a33_within_local_queue_cycle(run: Runner) -> None:
    out = run(_a33())
    assert_victims(out, {"ns1/same-lq": by_rule("test-rule-one/0", preemptor="ns1/incoming")}, "ns1/incoming")


def _a34() -> list[Obj]:
    rules = [
        rule(
            "test-rule-one",
            selector("WithinClusterQueue", numericLabels=[{"key": "tpus", "comparison": "LessThanOrEqual"}]),
        )
    ]
    return scenario(
        2,
        in_a("a1", labels={"tpus": "4"}),
        in_a("a2", labels={"tpus": "16"}),
        incoming(1, labels={"tpus": "8"}),
        rules=rules,
    )


def test_a34_numeric_labels_less_than_or_equal_evaluator() -> None:
    assert names(evaluate(_a34())) == ["a1"]


def test_a34_numeric_labels_cycle(run: Runner) -> None:
    assert_victims(run(_a34()), {"a1": by_rule("test-rule-one/0")})


def test_a34_preemptor_without_the_label_matches_nobody() -> None:
    objects = [o for o in _a34() if o["metadata"]["name"] != "incoming"] + [incoming(1)]
    assert names(evaluate(objects)) == []


def _a35() -> list[Obj]:
    return scenario(
        1,
        cluster_queue("c", 1, cohort="other"),
        in_a("a1"),
        admitted("c1", "c"),
        incoming(1),
        rules=[rule("test", selector("WithinCohortTree"), selector("AnyClusterQueue"))],
    )


def test_a35_two_selectors_of_one_rule_evaluator() -> None:
    cands = {c.workload.name: c.rule for c in evaluate(_a35())}
    assert set(cands) == {"a1", "c1"}
    assert cands["a1"] is not None and cands["a1"].selectors == (("test", (0, 1)),)
    assert cands["c1"] is not None and cands["c1"].selectors == (("test", (1,)),)
    assert cands["a1"].config == CONFIG


def test_a35_two_selectors_message(run: Runner) -> None:
    assert_victims(run(_a35()), {"a1": by_rule("test/0,1")})


def _a36() -> list[Obj]:
    cq_selector = {"matchLabels": {"tier": "preemptible"}}
    return [
        *basics(),
        cluster_queue("a", 1, cohort="all", config=CONFIG, labels={"tier": "preemptible"}),
        cluster_queue("b", 1, cohort="all", labels={"tier": "protected"}),
        local_queue("main", "a"),
        preemption_config(
            CONFIG, rule("test-rule-one", selector("WithinCohortTree", clusterQueueSelector=cq_selector))
        ),
        in_a("a1"),
        admitted("b1", "b"),
        incoming(1),
    ]


def test_a36_cluster_queue_selector_evaluator() -> None:
    assert names(evaluate(_a36())) == ["a1"]


def test_a36_cluster_queue_selector_cycle(run: Runner) -> None:
    assert_victims(run(_a36()), {"a1": by_rule("test-rule-one/0")})


def test_scopes_parent_cohort_versus_cohort_tree() -> None:
    """Reference 2.5.1: `a`, `a-sibling` in sub-a, `b` in sub-b, both under root."""
    objects = [
        *basics(),
        cohort("sub-a", "root"),
        cohort("sub-b", "root"),
        cluster_queue("a", 1, cohort="sub-a", config=CONFIG),
        cluster_queue("a-sibling", 1, cohort="sub-a"),
        cluster_queue("b", 1, cohort="sub-b"),
        cluster_queue("lonely", 1),
        local_queue("main", "a"),
        in_a("w-a"),
        admitted("w-sib", "a-sibling"),
        admitted("w-b", "b"),
        admitted("w-lonely", "lonely"),
        incoming(1),
    ]
    expected = {
        "WithinClusterQueue": {"w-a"},
        "WithinParentCohort": {"w-a", "w-sib"},
        "WithinCohortTree": {"w-a", "w-sib", "w-b"},
        "AnyClusterQueue": {"w-a", "w-sib", "w-b", "w-lonely"},
    }
    for scope, want in expected.items():
        config = preemption_config(CONFIG, rule("r", selector(scope)))
        assert set(names(evaluate([*objects, config]))) == want, scope


def _filter_case(sel: Obj, *candidates: Obj, preemptor: Obj | None = None, **rule_kwargs: Any) -> list[str]:
    """Names the evaluator yields for one rule with one selector, in a full CQ `a`."""
    objects = scenario(len(candidates), *candidates, preemptor or incoming(1), rules=[rule("r", sel, **rule_kwargs)])
    return sorted(names(evaluate(objects)))


@pytest.mark.parametrize(
    ("comparison", "expected"),
    [
        ("LessThan", ["v4"]),
        ("LessThanOrEqual", ["v4", "v5"]),
        ("GreaterThan", ["v6"]),
        ("GreaterThanOrEqual", ["v5", "v6"]),
    ],
)
def test_numeric_label_comparison_boundaries(comparison: str, expected: list[str]) -> None:
    sel = selector("WithinClusterQueue", numericLabels=[{"key": "n", "comparison": comparison}])
    cands = [in_a(f"v{v}", labels={"n": str(v)}) for v in (4, 5, 6)]
    assert _filter_case(sel, *cands, preemptor=incoming(1, labels={"n": "5"})) == expected


def test_numeric_label_fallback_for_missing_and_unparsable_values() -> None:
    cands = [
        in_a("none"),
        in_a("text", labels={"n": "many"}),
        in_a("spaced", labels={"n": " 1"}),
        in_a("huge", labels={"n": "3000000000"}),  # out of int32 range: not parsable
        in_a("nine", labels={"n": "9"}),
        in_a("plus", labels={"n": "+2"}),  # Go's ParseInt accepts a sign
    ]
    preemptor = incoming(1, labels={"n": "5"})
    with_fallback = selector(
        "WithinClusterQueue", numericLabels=[{"key": "n", "comparison": "LessThan", "fallbackValue": 0}]
    )
    assert _filter_case(with_fallback, *cands, preemptor=preemptor) == ["huge", "none", "plus", "spaced", "text"]
    without = selector("WithinClusterQueue", numericLabels=[{"key": "n", "comparison": "LessThan"}])
    assert _filter_case(without, *cands, preemptor=preemptor) == ["plus"]


def test_numeric_label_fallback_applies_to_the_preemptor_too() -> None:
    cands = [in_a("neg", labels={"n": "0"}), in_a("none")]
    sel = selector(
        "WithinClusterQueue", numericLabels=[{"key": "n", "comparison": "LessThanOrEqual", "fallbackValue": 0}]
    )
    assert _filter_case(sel, *cands, preemptor=incoming(1)) == ["neg", "none"]  # 0 <= 0


def test_numeric_label_min_and_max_values() -> None:
    cands = [in_a(f"v{v}", labels={"n": str(v)}) for v in (1, 2, 6, 7)]
    sel = selector("WithinClusterQueue", numericLabels=[{"key": "n", "minValue": 2, "maxValue": 6}])
    assert _filter_case(sel, *cands) == ["v2", "v6"]  # no comparison: the preemptor needs no label


def test_numeric_labels_are_anded() -> None:
    cands = [
        in_a("both", labels={"n": "1", "m": "1"}),
        in_a("only-n", labels={"n": "1", "m": "9"}),
        in_a("only-m", labels={"n": "9", "m": "1"}),
    ]
    sel = selector(
        "WithinClusterQueue",
        numericLabels=[{"key": "n", "comparison": "LessThan"}, {"key": "m", "comparison": "LessThan"}],
    )
    assert _filter_case(sel, *cands, preemptor=incoming(1, labels={"n": "5", "m": "5"})) == ["both"]


@pytest.mark.parametrize(
    ("comparison", "expected"),
    [
        ("LessThan", ["p40"]),
        ("LessThanOrEqual", ["p40", "p50"]),
        ("GreaterThan", ["p60"]),
        ("GreaterThanOrEqual", ["p50", "p60"]),
    ],
)
def test_priority_comparison_boundaries(comparison: str, expected: list[str]) -> None:
    sel = selector("WithinClusterQueue", priority={"mode": "Base", "comparison": comparison})
    cands = [in_a(f"p{v}", priority=v) for v in (40, 50, 60)]
    assert _filter_case(sel, *cands, preemptor=incoming(1, priority=50)) == expected


def test_priority_boosted_compares_boosted_values_on_both_sides() -> None:
    # Preemptor 50 boosted to 70; candidates 60 (no boost) and 80 boosted down to 65.
    cands = [in_a("sixty", priority=60), in_a("eighty", priority=80, boost=-15)]
    preemptor = incoming(1, priority=50, boost=20)
    boosted = selector("WithinClusterQueue", priority={"mode": "Boosted", "comparison": "LessThan"})
    assert _filter_case(boosted, *cands, preemptor=preemptor) == ["eighty", "sixty"]
    base = selector("WithinClusterQueue", priority={"mode": "Base", "comparison": "LessThan"})
    assert _filter_case(base, *cands, preemptor=preemptor) == []


def test_priority_class_names() -> None:
    classes = [workload_priority_class("low", 10), workload_priority_class("high", 100)]
    cands = [in_a("low", priority_class="low"), in_a("high", priority_class="high"), in_a("plain")]

    def case(priority: dict[str, Any]) -> list[str]:
        objects = scenario(
            3, *classes, *cands, incoming(1), rules=[rule("r", selector("WithinClusterQueue", priority=priority))]
        )
        return sorted(names(evaluate(objects)))

    assert case({"matchNames": ["low"]}) == ["low"]  # no class never matches a non-empty list
    assert case({"notMatchNames": ["low"]}) == ["high", "plain"]
    assert case({"matchNames": ["low", "high"], "notMatchNames": ["high"]}) == ["low"]
    assert case({}) == ["high", "low", "plain"]


def test_preemptor_priority_class_selector() -> None:
    classes = [workload_priority_class("low", 10), workload_priority_class("high", 100)]
    sel = selector("WithinClusterQueue")

    def case(preemptor_class: str | None, class_selector: dict[str, Any]) -> list[str]:
        objects = scenario(
            1,
            *classes,
            in_a("a1"),
            incoming(1, priority_class=preemptor_class),
            rules=[rule("r", sel, preemptor_priority_class_selector=class_selector)],
        )
        return names(evaluate(objects))

    assert case("high", {"matchNames": ["high"]}) == ["a1"]
    assert case("low", {"matchNames": ["high"]}) == []
    assert case(None, {"matchNames": ["high"]}) == []
    assert case("low", {"notMatchNames": ["low"]}) == []
    assert case(None, {"notMatchNames": ["low"]}) == ["a1"]


def test_label_selector_expressions() -> None:
    cands = [in_a("prod", labels={"env": "prod"}), in_a("dev", labels={"env": "dev"}), in_a("bare")]

    def case(*exprs: dict[str, Any]) -> list[str]:
        sel = selector("WithinClusterQueue", labelSelector={"matchExpressions": list(exprs)})
        return _filter_case(sel, *cands)

    assert case({"key": "env", "operator": "In", "values": ["prod"]}) == ["prod"]
    assert case({"key": "env", "operator": "NotIn", "values": ["prod"]}) == ["bare", "dev"]
    assert case({"key": "env", "operator": "Exists"}) == ["dev", "prod"]
    assert case({"key": "env", "operator": "DoesNotExist"}) == ["bare"]
    assert case({"key": "env", "operator": "Exists"}, {"key": "env", "operator": "NotIn", "values": ["dev"]}) == [
        "prod"
    ]


def test_empty_rules_and_selectors_give_no_candidates() -> None:
    assert names(evaluate(scenario(1, in_a("a1"), incoming(1), rules=[]))) == []
    assert names(evaluate(scenario(1, in_a("a1"), incoming(1), rules=[rule("r")]))) == []


def test_only_workloads_using_a_contested_flavor_are_candidates() -> None:
    """A workload holding quota only in a flavor the preemptor does not need is no candidate."""
    other = admitted("other-flavor", "a", flavor="spare", queue="main")
    objects = scenario(1, in_a("a1"), other, incoming(1), rules=WITHIN_CQ)
    assert names(evaluate(objects)) == ["a1"]


# ------------------------------------------------------------------------------------------------
# Properties: configurable victims always satisfy the config (checked by an independent matcher)
# ------------------------------------------------------------------------------------------------

LABEL_VALUES = ["1", "2", "4", "x"]  # few values, so equal labels (comparison boundaries) are common


def _labels_match(sel: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    if sel is None:
        return True
    if any(labels.get(k) != v for k, v in (sel.get("matchLabels") or {}).items()):
        return False
    for expr in sel.get("matchExpressions") or []:
        k, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": k in labels and labels[k] in values,
            "NotIn": k not in labels or labels[k] not in values,
            "Exists": k in labels,
            "DoesNotExist": k not in labels,
        }[op]
        if not ok:
            return False
    return True


def _int(value: str | None) -> int | None:
    if value is None or not re.fullmatch(r"[+-]?[0-9]+", value):
        return None
    n = int(value)
    return n if -(2**31) <= n < 2**31 else None


def _cmp(op: str, a: int, b: int) -> bool:
    return {"LessThan": a < b, "LessThanOrEqual": a <= b, "GreaterThan": a > b, "GreaterThanOrEqual": a >= b}[op]


@dataclass
class Model:
    """The generated cluster, as plain data, for the independent matcher."""

    cq_cohort: dict[str, str | None]
    cq_labels: dict[str, dict[str, str]]
    cohort_parent: dict[str, str | None]
    workloads: dict[str, dict[str, Any]]
    """key -> {cq, namespace, queue, labels, priority, boost, class}"""
    preemptor: dict[str, Any]
    rules: list[dict[str, Any]]

    def root(self, cohort: str) -> str:
        while self.cohort_parent.get(cohort):
            cohort = self.cohort_parent[cohort] or cohort
        return cohort

    def in_scope(self, scope: str, cand: dict[str, Any]) -> bool:
        p, c = self.preemptor, cand
        if scope == "AnyClusterQueue":
            return True
        if scope == "WithinLocalQueue":
            return (c["cq"], c["namespace"], c["queue"]) == (p["cq"], p["namespace"], p["queue"])
        if c["cq"] == p["cq"]:
            return True
        if scope == "WithinClusterQueue":
            return False
        pc, cc = self.cq_cohort[p["cq"]], self.cq_cohort[c["cq"]]
        if pc is None or cc is None:
            return False
        if scope == "WithinParentCohort":
            return pc == cc
        return self.root(pc) == self.root(cc)

    def selector_matches(self, sel: dict[str, Any], cand: dict[str, Any]) -> bool:
        p = self.preemptor
        if not self.in_scope(sel["scope"], cand):
            return False
        if not _labels_match(sel.get("clusterQueueSelector"), self.cq_labels[cand["cq"]]):
            return False
        if not _labels_match(sel.get("labelSelector"), cand["labels"]):
            return False
        for nl in sel.get("numericLabels") or []:
            fallback = nl.get("fallbackValue")
            value = _int(cand["labels"].get(nl["key"]))
            value = fallback if value is None else value
            if value is None:
                return False
            if "minValue" in nl and value < nl["minValue"]:
                return False
            if "maxValue" in nl and value > nl["maxValue"]:
                return False
            if "comparison" in nl:
                ref = _int(p["labels"].get(nl["key"]))
                ref = fallback if ref is None else ref
                if ref is None or not _cmp(nl["comparison"], value, ref):
                    return False
        prio = sel.get("priority")
        if prio:
            if "mode" in prio:
                boosted = prio["mode"] == "Boosted"
                cv = cand["priority"] + (cand["boost"] if boosted else 0)
                pv = p["priority"] + (p["boost"] if boosted else 0)
                if not _cmp(prio["comparison"], cv, pv):
                    return False
            if prio.get("matchNames") and cand["class"] not in prio["matchNames"]:
                return False
            if cand["class"] in (prio.get("notMatchNames") or []):
                return False
        return True

    def rule_applies(self, r: dict[str, Any]) -> bool:
        p = self.preemptor
        if not _labels_match(r.get("preemptorSelector"), p["labels"]):
            return False
        classes = r.get("preemptorPriorityClassSelector")
        if classes:
            if classes.get("matchNames") and p["class"] not in classes["matchNames"]:
                return False
            if p["class"] in (classes.get("notMatchNames") or []):
                return False
        return True

    def expected_matches(self, trigger: str, cand: dict[str, Any]) -> tuple[tuple[str, tuple[int, ...]], ...]:
        out = []
        for r in self.rules:
            if r["activationPolicy"]["trigger"] != trigger or not self.rule_applies(r):
                continue
            idx = tuple(i for i, sel in enumerate(r["candidateSelectors"]) if self.selector_matches(sel, cand))
            if idx:
                out.append((r["name"], idx))
        return tuple(out)


def _label_selector() -> st.SearchStrategy[dict[str, Any] | None]:
    key_ = st.sampled_from(["team", "env", "size"])
    value = st.sampled_from(["x", "y", "1", "4"])
    expr = st.one_of(
        st.builds(
            lambda k, op, vs: {"key": k, "operator": op, "values": sorted(set(vs))},
            key_,
            st.sampled_from(["In", "NotIn"]),
            st.lists(value, min_size=1, max_size=2),
        ),
        st.builds(lambda k, op: {"key": k, "operator": op}, key_, st.sampled_from(["Exists", "DoesNotExist"])),
    )
    full = st.fixed_dictionaries(
        {},
        optional={
            "matchLabels": st.dictionaries(key_, value, max_size=1),
            "matchExpressions": st.lists(expr, max_size=2),
        },
    )
    return st.one_of(st.none(), full)


def _numeric_label() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"key": st.sampled_from(["size", "gpus"])},
        optional={
            "comparison": st.sampled_from(["LessThan", "LessThanOrEqual", "GreaterThan", "GreaterThanOrEqual"]),
            "fallbackValue": st.integers(-1, 4),
            "minValue": st.integers(0, 4),
            "maxValue": st.integers(2, 8),
        },
    )


def _priority() -> st.SearchStrategy[dict[str, Any]]:
    mode_cmp = st.fixed_dictionaries(
        {
            "mode": st.sampled_from(["Base", "Boosted"]),
            "comparison": st.sampled_from(["LessThan", "LessThanOrEqual", "GreaterThan", "GreaterThanOrEqual"]),
        }
    )
    classes = st.lists(st.sampled_from(["low", "high"]), min_size=1, max_size=2, unique=True)
    return st.builds(
        lambda base, extra: {**base, **extra},
        st.one_of(st.just({}), mode_cmp),
        st.fixed_dictionaries({}, optional={"matchNames": classes, "notMatchNames": classes}),
    )


def _sometimes(draw: st.DrawFn) -> bool:
    """True one time in three: optional constraints stay rare enough that rules still match."""
    return draw(st.integers(0, 2)) == 0


@st.composite
def _selector(draw: st.DrawFn) -> dict[str, Any]:
    scopes = ["WithinLocalQueue", "WithinClusterQueue", "WithinParentCohort", "WithinCohortTree", "AnyClusterQueue"]
    body: dict[str, Any] = {"scope": draw(st.sampled_from(scopes))}
    options: dict[str, st.SearchStrategy[Any]] = {
        "labelSelector": _label_selector(),
        "clusterQueueSelector": _label_selector(),
        "numericLabels": st.lists(_numeric_label(), min_size=1, max_size=2),
        "priority": _priority(),
    }
    for name, strategy in options.items():
        if _sometimes(draw):
            value = draw(strategy)
            if value is not None:
                body[name] = value
    return body


@st.composite
def _rules(draw: st.DrawFn) -> list[dict[str, Any]]:
    rules = []
    for i in range(draw(st.integers(1, 3))):
        body: dict[str, Any] = {
            "name": f"r{i}",
            "activationPolicy": {
                "trigger": draw(
                    st.sampled_from(["Always", "Always", "InsufficientQuota", "QuotaFeasibleAndInsufficientTopology"])
                )
            },
            "candidateSelectors": draw(st.lists(_selector(), min_size=1, max_size=3)),
        }
        preemptor_selector = draw(_label_selector()) if _sometimes(draw) else None
        if preemptor_selector is not None:
            body["preemptorSelector"] = preemptor_selector
        if _sometimes(draw):
            body["preemptorPriorityClassSelector"] = draw(
                st.fixed_dictionaries({}, optional={"matchNames": st.just(["high"]), "notMatchNames": st.just(["low"])})
            )
        rules.append(body)
    return rules


@st.composite
def _workload_fields(draw: st.DrawFn) -> dict[str, Any]:
    labels = draw(
        st.dictionaries(st.sampled_from(["team", "env", "size", "gpus"]), st.sampled_from(LABEL_VALUES), max_size=3)
    )
    return {
        "labels": labels,
        "priority": draw(st.sampled_from([10, 50, 100])),
        "boost": draw(st.sampled_from([0, 0, -40, 50])),  # 50-40 == 10, 50+50 == 100
        "class": draw(st.sampled_from(["", "low", "high"])),
        "namespace": draw(st.sampled_from(["ns1", "ns2"])),
        "queue": draw(st.sampled_from(["q1", "q2"])),
        "cpu": draw(st.integers(1, 2)),
        "reserved": draw(st.sampled_from([T0, T0 + timedelta(hours=1)])),
    }


def _wl(name: str, f: dict[str, Any]) -> WorkloadBuilder:
    return workload(
        name,
        cpu=f["cpu"],
        queue=f["queue"],
        namespace=f["namespace"],
        priority=f["priority"],
        priority_class=f["class"] or None,
        labels=f["labels"],
        boost=f["boost"] or None,
    )


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Obj], Model]:
    cohort_parent: dict[str, str | None] = {"one": None, "two": draw(st.sampled_from([None, "one"]))}
    cq_names = ["a", *draw(st.lists(st.sampled_from(["b", "c", "d"]), max_size=3, unique=True))]
    cq_cohort = {name: draw(st.sampled_from(["one", "one", "two", None])) for name in cq_names}
    cq_labels = {
        name: draw(st.dictionaries(st.just("tier"), st.sampled_from(["gold", "bronze"]), max_size=1))
        for name in cq_names
    }
    rules = draw(_rules())
    objects: list[Obj] = [
        *basics("ns1", "ns2"),
        cohort("one"),
        cohort("two", cohort_parent["two"]),
        workload_priority_class("low", 10),
        workload_priority_class("high", 100),
        local_queue("q1", "a", "ns1"),
        preemption_config("cfg", *rules),
    ]
    workloads: dict[str, dict[str, Any]] = {}
    for name in cq_names:
        preemption = {
            "withinClusterQueue": draw(st.sampled_from(["Never", "Never", "LowerPriority"])),
            "reclaimWithinCohort": draw(st.sampled_from(["Never", "Never", "LowerPriority", "Any"])),
        }
        used = 0
        for i in range(draw(st.integers(0, 4))):
            f = draw(_workload_fields())
            wl_name = f"{name}-{i}"
            objects.append(_wl(wl_name, f).admitted(name, at=f["reserved"]).obj())
            workloads[f"{f['namespace']}/{wl_name}"] = {**f, "cq": name}
            used += f["cpu"]
        # Mostly full queues (some borrowing, some with a little room), so preemption is common.
        nominal = max(1, used + draw(st.sampled_from([-1, 0, 0, 1])))
        objects.append(
            cluster_queue(
                name,
                nominal,
                cohort=cq_cohort[name],
                labels=cq_labels[name],
                preemption=preemption,
                config="cfg" if name == "a" else None,
            )
        )
    p = {**draw(_workload_fields()), "namespace": "ns1", "queue": "q1", "cq": "a"}
    p["cpu"] = draw(st.integers(1, 4))
    objects.append(_wl("incoming", p).obj())
    return objects, Model(cq_cohort, cq_labels, cohort_parent, workloads, p, rules)


_SOURCE = re.compile(r"^preemption config (?P<config>\S+) rule (?P<rules>.+)$")


def _parse_rules(text: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    out = []
    for part in text.split("; "):
        name, _, idx = part.partition("/")
        out.append((name, tuple(int(i) for i in idx.split(","))))
    return tuple(out)


@pytest.mark.slow
@settings(
    max_examples=150, derandomize=True, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(clusters())
def test_property_configurable_victims_satisfy_the_config(case: tuple[list[Obj], Model]) -> None:
    objects, model = case
    _, result = engine_cycle(objects)
    triggers = {r["name"]: r["activationPolicy"]["trigger"] for r in model.rules}
    for p in result.preempted:
        if p.preemptor.key != "ns1/incoming" or p.target.reason != CONFIGURABLE:
            continue
        match = p.target.rule
        assert match is not None and match.config == "cfg"
        cand = model.workloads[p.victim.key]
        # All rules recorded for a victim come from one tier, in spec order...
        tier = {triggers[name] for name, _ in match.selectors}
        assert len(tier) == 1, match
        order = [r["name"] for r in model.rules]
        assert [n for n, _ in match.selectors] == sorted((n for n, _ in match.selectors), key=order.index)
        # ...and are exactly the selectors of that tier's applicable rules that match it.
        expected = model.expected_matches(tier.pop(), cand)
        assert expected, f"{p.victim.key} chosen though no selector matches it"
        assert match.selectors == expected
        status = wl_status.evicted(None, p, NOW_DT, None)
        assert wl_status.get_condition(status, "Preempted")["message"] == (
            f"Preempted by ns1/incoming because of preemption config cfg rule {match.describe()}"
        )
    # No configurable candidate considered (chosen, spared, ...) is outside its selectors' scope.
    for explanation in result.explanations:
        if explanation.preemptor != "ns1/incoming":
            continue
        for record in explanation.candidates:
            found = _SOURCE.match(record.source)
            if not found:
                continue
            cand = model.workloads[record.workload]
            for name, idx in _parse_rules(found["rules"]):
                [r] = [r for r in model.rules if r["name"] == name]
                assert model.rule_applies(r)
                for i in idx:
                    sel = r["candidateSelectors"][i]
                    assert model.in_scope(sel["scope"], cand), (record, sel)
                    assert model.selector_matches(sel, cand), (record, sel)


@pytest.mark.slow
@settings(
    max_examples=100, derandomize=True, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(clusters())
def test_property_evaluator_candidates_are_exactly_the_matching_workloads(case: tuple[list[Obj], Model]) -> None:
    """The Always tier alone (conditional rules dropped) yields exactly the admitted workloads that
    match some selector of an applicable Always rule, each recorded with exactly those selectors."""
    objects, model = case
    always = [r for r in model.rules if r["activationPolicy"]["trigger"] == "Always"]
    objects = [o for o in objects if o["kind"] != "PreemptionConfig"] + [preemption_config("cfg", *always)]
    model.rules = always
    snapshot = load(objects).snapshot(NOW_DT)
    pending = [wl for queue in snapshot.pending.values() for wl in queue if wl.key == "ns1/incoming"]
    assume(pending)  # the incoming workload is not pending when it is invalid for its queue
    cq = snapshot.cluster_queues["a"]
    assignment = assign_flavors(pending[0], cq, snapshot.flavors, snapshot.tas, snapshot.node_usage)
    ctx = Context(pending[0], cq, snapshot, assignment)
    got = {c.workload.key: c.rule.selectors for c in ConfigurablePreemption().candidates(ctx, True) if c.rule}
    want = {}
    if assignment.need_preemption:
        for wl_key, cand in model.workloads.items():
            matches = model.expected_matches("Always", cand)
            if matches:
                want[wl_key] = matches
    assert got == want


# ------------------------------------------------------------------------------------------------
# The hero-job example
# ------------------------------------------------------------------------------------------------

HERO = REPO / "examples" / "hero-job"


def _hero_config() -> tuple[str, list[str]]:
    for path in sorted(HERO.glob("*.y*ml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "PreemptionConfig":
                return doc["metadata"]["name"], [r["name"] for r in doc["spec"]["rules"]]
    raise AssertionError(f"{HERO} has no PreemptionConfig")


def describe_conditions(status: dict[str, Any]) -> str:
    """The `Conditions:` block of `kubectl describe workload`."""
    rows = [("Type", "Status", "Reason", "Message")]
    rows += [(c["type"], c["status"], c["reason"], c["message"]) for c in status.get("conditions", [])]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = ["Conditions:"]
    for row in rows:
        lines.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True)) + "  " + row[3])
    return "\n".join(lines)


def _simulate_folder(folder: Path, output: str) -> str:
    args = ["simulate", str(folder), "--output", output, "--now", NOW]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_hero_job_example_preempts_by_rule() -> None:
    config, rule_names = _hero_config()
    data = json.loads(_simulate_folder(HERO, "json"))
    preempted = [a for a in data["actions"] if a["action"] == "Preempted"]
    assert preempted, data["actions"]
    pattern = re.compile(
        rf"^Preempted by \S+/\S+ because of preemption config {re.escape(config)} rule "
        rf"(?:{'|'.join(map(re.escape, rule_names))})/\d+(?:,\d+)*(?:; [a-z0-9-]+/\d+(?:,\d+)*)*$"
    )
    configurable = [a for a in preempted if a["reason"] == CONFIGURABLE]
    assert configurable, preempted
    for action in configurable:
        assert pattern.match(action["message"]), action["message"]


def test_hero_job_example_describe_shows_the_rule() -> None:
    config, rule_names = _hero_config()
    data = yaml.safe_load(_simulate_folder(HERO, "yaml"))
    victims = {a["workload"] for a in data["actions"] if a["action"] == "Preempted" and a["reason"] == CONFIGURABLE}
    assert victims
    statuses = {f"{wl['namespace']}/{wl['name']}": wl["status"] for wl in data["workloads"]}
    for victim in sorted(victims):
        text = describe_conditions(statuses[victim])
        [line] = [line for line in text.splitlines() if line.split()[:1] == ["Preempted"]]
        assert line.split()[1:3] == ["True", CONFIGURABLE], text
        assert f"preemption config {config} rule " in line
        assert any(f"rule {name}/" in line for name in rule_names), line
        [evicted_line] = [line for line in text.splitlines() if line.split()[:1] == ["Evicted"]]
        assert evicted_line.split()[1:3] == ["True", "Preempted"]
