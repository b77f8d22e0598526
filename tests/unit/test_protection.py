"""Protection policies (issue 7): PreemptionToleration, YuniKorn's soft opt-out, fences,
`disabled`, the preemption delay, the guarantee fields of PreemptionConfig (quota selector,
activationPolicy.preemptorQuota and minTriggerRequiredDuration), the time-based candidate
selectors, and YuniKorn's preemption-loop scenario.

Semantics come from YuniKorn's preemption design (its laws, fences, delay and allow-preemption)
and the PreemptionToleration plugin (its test cases, numbered T1-T25 here, ported below) and the issue.
Of B.4, T9 and T25 (preemptor `preemptionPolicy: Never`) have no Workload equivalent; T6 (class
not found) is our choice "not protected"; every other case is here, with the reference's id.
Scenario tests run through the engine (`simulate.run` or one cycle) and through
`preemption-operator simulate --output json --now ...`; the `runner` fixture gives both.

Conventions (tests/builders.py): one flavor `default`, resource `cpu`, namespace `default`, each
ClusterQueue has a LocalQueue of its own name, cycles run at NOW = 2026-11-30T00:00:00Z.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from builders import (
    ALLOW,
    DELAY,
    NOW,
    OLD_PREFIX,
    POLICY,
    T0,
    Obj,
    Outcome,
    WorkloadBuilder,
    admitted,
    cache_of,
    cluster_queue,
    cohort,
    one_cycle,
    parse,
    pending,
    pod_priority_class,
    preemption_config,
    rfc3339,
    rule,
    scenario,
    seconds,
    selector,
    simulate,
    simulate_cli,
    toleration,
    workload_priority_class,
)
from preemption_operator.cli import cli
from preemption_operator.engine import protection
from preemption_operator.engine.candidates import Context
from preemption_operator.engine.configurable import build_selector, quota_allows
from preemption_operator.engine.flavors import assign_flavors
from preemption_operator.engine.protection import LAST_RESORT_SUFFIX
from preemption_operator.engine.scheduler import WAITING_FOR_PREEMPTED, WAITING_FOR_QUOTA
from preemption_operator.engine.workload import PriorityClassInfo, WorkloadInfo, build_info

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
IN_CQ = "InClusterQueue"
CONFIGURABLE = "ConfigurablePreemption"
Runner = Callable[..., Outcome]
LOWER = {"mode": "Boosted", "comparison": "LessThan"}
"""A rule's priority constraint: strictly lower (without one, victims requeued at once could
preempt their preemptor back)."""


@pytest.fixture(params=[simulate, simulate_cli], ids=["engine", "cli"])
def runner(request: pytest.FixtureRequest) -> Runner:
    """`simulate.run` and `preemption-operator simulate --output json --now NOW`."""
    return request.param  # type: ignore[no-any-return]


def preempted_counts(outcome: Outcome) -> Counter[str]:
    return Counter(a["workload"].split("/", 1)[1] for a in outcome.actions if a["action"] == "Preempted")


def candidates(outcome: Outcome, preemptor: str = "incoming", cycle: int = 1) -> dict[str, tuple[str, str]]:
    """The explanation of `preemptor` in `cycle`: candidate name -> (outcome, detail), last record wins."""
    out: dict[str, tuple[str, str]] = {}
    for exp in outcome.data["explanations"]:
        if exp["cycle"] == cycle and exp["preemptor"] == f"default/{preemptor}":
            for rec in exp["candidates"]:
                out[rec["workload"].split("/", 1)[1]] = (rec["outcome"], rec["detail"])
    return out


def notes(outcome: Outcome, preemptor: str = "incoming") -> list[str]:
    return [
        n for exp in outcome.data["explanations"] if exp["preemptor"] == f"default/{preemptor}" for n in exp["notes"]
    ]


# =================================================================================================
# 1. PreemptionToleration
# =================================================================================================


def toleration_queue(*workloads: Any, classes: list[Obj]) -> list[Obj]:
    """CQ `cq`: 2 cpu, withinClusterQueue LowerPriority; the victim classes as extra objects."""
    return scenario([cluster_queue("cq", 2, within="LowerPriority")], *workloads, extra=classes)


def tolerating(
    annotations: dict[str, str],
    *,
    preemptor_priority: int,
    running_for: float,
    class_value: int = 1,
    pod_class: bool = False,
    boost: int | None = None,
) -> list[Obj]:
    """A victim of class `batch` (value `class_value`) holding all 2 cpu since NOW - running_for,
    and a pending 2-cpu preemptor `incoming`."""
    victim = admitted(
        "victim",
        "cq",
        2,
        at=NOW - seconds(running_for),
        priority_class=None if pod_class else "batch",
        pod_priority_class="batch" if pod_class else None,
    )
    if pod_class:
        victim.body["spec"]["priority"] = class_value
    cls = (pod_priority_class if pod_class else workload_priority_class)("batch", class_value, annotations=annotations)
    incoming = pending("incoming", "cq", 2, priority=preemptor_priority, boost=boost)
    return toleration_queue(victim, incoming, classes=[cls])


# -- the policy as parsed (reference B.4 T1-T5) ------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "value", "annotations", "expected"),
    [
        ("T1 defaults", 1, {}, (2, 0)),
        ("T2 explicit", 1, toleration(100, 10), (100, 10)),
        ("T3 bad minimum", 1, toleration("a"), "minimum-preemptable-priority 'a' is not a 32-bit integer"),
        ("T4 bad seconds", 1, toleration(seconds="a"), "toleration-seconds 'a' is not an integer"),
        ("T5 negative seconds", 1, toleration(100, -1), (100, -1)),
        ("older prefix", 1, toleration(100, 10, prefix=OLD_PREFIX), (100, 10)),
        ("newer prefix wins", 1, {**toleration(7, 3, prefix=OLD_PREFIX), **toleration(100, 10)}, (100, 10)),
        ("newer wins per key", 1, {**toleration(7, 3, prefix=OLD_PREFIX), **toleration(100)}, (100, 3)),
        ("bad older key hidden by newer", 1, {**toleration("x", prefix=OLD_PREFIX), **toleration(100)}, (100, 0)),
        ("bad older key alone", 1, toleration("x", prefix=OLD_PREFIX), "minimum-preemptable-priority 'x'"),
        ("minimum out of int32", 1, toleration(2**31), "minimum-preemptable-priority"),
        ("seconds int64 max", 1, toleration(seconds=2**63 - 1), (2, 2**63 - 1)),
        ("seconds beyond int64", 1, toleration(seconds=2**63), "toleration-seconds"),
        ("explicit sign", 5, toleration("+10", "-0"), (10, 0)),
        ("whitespace is not a number", 5, toleration(" 10"), "minimum-preemptable-priority"),
        ("default minimum follows the class value", -50, {}, (-49, 0)),
    ],
    ids=lambda v: v if isinstance(v, str) and v[:1].isalpha() and " " in v else None,
)
def test_toleration_policy_parsing(case: str, value: int, annotations: dict[str, str], expected: Any) -> None:
    policy, error = protection.toleration_of(PriorityClassInfo("dummy", "PriorityClass", value, annotations))
    if isinstance(expected, str):
        assert policy is None
        assert error is not None and expected in error
        assert protection.class_problems(PriorityClassInfo("dummy", "PriorityClass", value, annotations)) == [
            f"PreemptionToleration policy ignored: {error}"
        ]
    else:
        assert error is None
        assert policy == protection.Toleration(*expected)


# -- exemption of one candidate (reference B.4 T7-T17 and the extra cases) ---------------------------


def info(builder: WorkloadBuilder, cls: PriorityClassInfo | None = None) -> WorkloadInfo:
    (obj,) = parse([builder])
    classes = {(cls.kind, cls.name): cls} if cls is not None else {}
    return build_info(obj, classes)


def victim_of(cls: PriorityClassInfo | None, *, scheduled_ago: float | None) -> WorkloadInfo:
    """A victim of class `cls` whose quota was reserved `scheduled_ago` seconds before NOW (None:
    no reservation, the reference's "no PodScheduled condition")."""
    builder = WorkloadBuilder("victim", priority=cls.value if cls else 0)
    if cls is not None:
        group = "scheduling.k8s.io" if cls.kind == "PriorityClass" else "kueue.x-k8s.io"
        builder.body["spec"]["priorityClassRef"] = {"group": group, "kind": cls.kind, "name": cls.name}
    if scheduled_ago is not None:
        builder.admitted("cq", at=NOW - seconds(scheduled_ago))
    return info(builder, cls)


@pytest.mark.parametrize(
    ("case", "value", "annotations", "scheduled_ago", "preemptor", "exempt"),
    [
        ("T7 bad minimum: not exempt", 1, toleration("a"), 0, 2, False),
        ("T8 bad seconds: not exempt", 1, toleration(10, "a"), 0, 2, False),
        ("T10 default minimum reached", 1, {}, None, 2, False),
        ("T11 below default minimum, no reservation", 3, {}, None, 2, True),
        ("T12 above minimum", 100, toleration(200), 0, 201, False),
        ("T13 minimum is inclusive", 100, toleration(200), 0, 200, False),
        ("T14 zero seconds", 100, toleration(200, 0), 0, 199, False),
        ("T15 negative seconds: forever", 100, toleration(200, -1), 10**8, 199, True),
        ("T16 window over", 100, toleration(200, 100), 101, 199, False),
        ("T17 within window", 100, toleration(200, 100), 10, 199, True),
        ("boundary now == admitted + T is preemptable", 100, toleration(200, 100), 100, 199, False),
        ("one second before the boundary", 100, toleration(200, 100), 99, 199, True),
        ("minimum below the class value has no effect", 100, toleration(50, -1), 0, 60, False),
        ("older prefix read", 100, toleration(200, 100, prefix=OLD_PREFIX), 10, 199, True),
        ("huge window (past year 9999)", 100, toleration(200, 2**62), 10, 199, True),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else None,
)
def test_toleration_exemption(
    case: str, value: int, annotations: dict[str, str], scheduled_ago: float | None, preemptor: int, exempt: bool
) -> None:
    cls = PriorityClassInfo("dummy", "PriorityClass", value, annotations)
    reason = protection.tolerates(
        victim_of(cls, scheduled_ago=scheduled_ago), info(WorkloadBuilder("p", priority=preemptor)), NOW
    )
    assert (reason is not None) == exempt, reason
    if exempt:
        assert reason is not None and reason.startswith("PriorityClass dummy tolerates ")


def test_toleration_without_a_class_protects_nothing() -> None:
    """T6's situation: a victim without a class (or whose class does not exist) is not exempt."""
    preemptor = info(WorkloadBuilder("p", priority=0))
    assert protection.tolerates(victim_of(None, scheduled_ago=0), preemptor, NOW) is None
    missing = WorkloadBuilder("victim", priority=-5, priority_class="gone").admitted("cq", at=NOW)
    assert info(missing).priority_class is None
    assert protection.tolerates(info(missing), preemptor, NOW) is None


def test_toleration_uses_the_preemptors_effective_priority() -> None:
    cls = PriorityClassInfo("dummy", "WorkloadPriorityClass", 1, toleration(10, -1))
    victim = victim_of(cls, scheduled_ago=0)
    assert protection.tolerates(victim, info(WorkloadBuilder("p", priority=5)), NOW) is not None
    assert protection.tolerates(victim, info(WorkloadBuilder("p", priority=5, boost=5)), NOW) is None


# -- whole cycles (reference B.4 integration cases T18-T24) ------------------------------------------


@pytest.mark.parametrize(
    ("case", "annotations", "running_for", "preemptor", "preempted"),
    [
        ("T18 preemptor at the minimum", toleration(1010), 0, 1010, True),
        ("T19 toleration irrelevant at the minimum", toleration(1010, 30), 0, 1010, True),
        ("T20 default zero seconds", toleration(1010), 0, 1009, True),
        ("T21 forever", toleration(1010, -1), 10**8, 1009, False),
        ("T22 within the window", toleration(1010, 30), 0, 1005, False),
        ("T23 window over", toleration(1010, 5), 10, 1005, True),
        ("T24 unparsable: policy ignored", toleration("a"), 0, 1001, True),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else None,
)
def test_toleration_integration_cases(
    runner: Runner, case: str, annotations: dict[str, str], running_for: float, preemptor: int, preempted: bool
) -> None:
    outcome = runner(tolerating(annotations, class_value=1000, preemptor_priority=preemptor, running_for=running_for))
    assert outcome.victims == (["victim"] if preempted else [])
    if preempted:
        assert outcome.reasons == {"victim": IN_CQ}
        assert outcome.condition("incoming", "Admitted")["status"] == "True"  # type: ignore[index]
    else:
        assert outcome.condition("incoming", "QuotaReserved")["reason"] == WAITING_FOR_QUOTA  # type: ignore[index]
        outcome_, detail = candidates(outcome)["victim"]
        assert outcome_ == "excluded"
        assert detail.startswith("WorkloadPriorityClass batch tolerates preemptors below priority 1010 ")


@pytest.mark.parametrize("pod_class", [False, True], ids=["WorkloadPriorityClass", "PriorityClass"])
def test_toleration_by_time(runner: Runner, pod_class: bool) -> None:
    """Protected within `toleration-seconds` of QuotaReserved=True; preemptable from admitted + T on."""
    kind = "PriorityClass" if pod_class else "WorkloadPriorityClass"
    policy = toleration(10, 600)

    within = runner(tolerating(policy, preemptor_priority=5, running_for=599, pod_class=pod_class))
    assert within.victims == []
    until = rfc3339(NOW + seconds(1))
    assert candidates(within)["victim"] == (
        "excluded",
        f"{kind} batch tolerates preemptors below priority 10 until {until} (preemptor has 5)",
    )

    at_boundary = runner(tolerating(policy, preemptor_priority=5, running_for=600, pod_class=pod_class))
    assert at_boundary.victims == ["victim"]
    after = runner(tolerating(policy, preemptor_priority=5, running_for=3600, pod_class=pod_class))
    assert after.victims == ["victim"]


@pytest.mark.parametrize("pod_class", [False, True], ids=["WorkloadPriorityClass", "PriorityClass"])
def test_toleration_by_minimum_priority(runner: Runner, pod_class: bool) -> None:
    """A preemptor at or above minimum-preemptable-priority ignores the window (inclusive)."""
    policy = toleration(10, -1)
    below = runner(tolerating(policy, preemptor_priority=9, running_for=10, pod_class=pod_class))
    assert below.victims == []
    at = runner(tolerating(policy, preemptor_priority=10, running_for=10, pod_class=pod_class))
    assert at.victims == ["victim"]
    above = runner(tolerating(policy, preemptor_priority=11, running_for=10, pod_class=pod_class))
    assert above.victims == ["victim"]


def test_toleration_defaults(runner: Runner) -> None:
    """No annotations: minimum = class value + 1, seconds = 0: never protected against a preemptor
    that classic rules already allow (strictly higher priority)."""
    assert runner(tolerating({}, class_value=1, preemptor_priority=2, running_for=0)).victims == ["victim"]
    # Only the minimum set: seconds default to 0, preempted at once even below the minimum.
    assert runner(tolerating(toleration(100), class_value=1, preemptor_priority=2, running_for=0)).victims == ["victim"]
    # Only the seconds set: the default minimum (value + 1 = 2) is reached by priority 2.
    assert runner(tolerating(toleration(seconds=600), class_value=1, preemptor_priority=2, running_for=0)).victims == [
        "victim"
    ]


def test_toleration_negative_seconds_protect_forever(runner: Runner) -> None:
    outcome = runner(tolerating(toleration(10, -1), preemptor_priority=9, running_for=300 * 86400))
    assert outcome.victims == []
    assert candidates(outcome)["victim"] == (
        "excluded",
        "WorkloadPriorityClass batch tolerates preemptors below priority 10 forever (preemptor has 9)",
    )


def test_toleration_window_beyond_datetime_range_does_not_break_the_cycle(runner: Runner) -> None:
    """toleration-seconds is an int64: its largest values end after the year 9999 (fixed in
    engine/protection.py: the cycle used to raise OverflowError)."""
    outcome = runner(tolerating(toleration(10, 2**63 - 1), preemptor_priority=5, running_for=0))
    assert outcome.victims == []
    assert candidates(outcome)["victim"] == (
        "excluded",
        f"WorkloadPriorityClass batch tolerates preemptors below priority 10 for {2**63 - 1}s (preemptor has 5)",
    )


@pytest.mark.parametrize(
    ("annotations", "protected"),
    [
        (toleration(10, 600, prefix=OLD_PREFIX), True),
        ({**toleration(10, 600, prefix=OLD_PREFIX), **toleration(5, 600)}, False),  # newer minimum 5 wins
        ({**toleration(5, 600, prefix=OLD_PREFIX), **toleration(10, 600)}, True),  # newer minimum 10 wins
        ({**toleration(10, 600, prefix=OLD_PREFIX), **toleration(10, 0)}, False),  # newer seconds 0 win
    ],
    ids=["older prefix alone", "newer minimum wins", "newer minimum wins (other way)", "newer seconds win"],
)
def test_toleration_key_prefixes(runner: Runner, annotations: dict[str, str], protected: bool) -> None:
    outcome = runner(tolerating(annotations, preemptor_priority=7, running_for=60))
    assert outcome.victims == ([] if protected else ["victim"])


@pytest.mark.parametrize("pod_class", [False, True], ids=["WorkloadPriorityClass", "PriorityClass"])
def test_toleration_unparsable_values_are_ignored_with_a_warning(runner: Runner, pod_class: bool) -> None:
    kind = "PriorityClass" if pod_class else "WorkloadPriorityClass"
    outcome = runner(tolerating(toleration(10, "an hour"), preemptor_priority=5, running_for=0, pod_class=pod_class))
    assert outcome.victims == ["victim"]
    assert outcome.data["warnings"] == [
        f"{kind} batch: PreemptionToleration policy ignored: toleration-seconds 'an hour' is not an integer"
    ]


def test_toleration_warning_is_gone_once_the_class_is_fixed() -> None:
    cache = cache_of([workload_priority_class("batch", 1, annotations=toleration("ten"))])
    assert list(cache.notices) == [("WorkloadPriorityClass", "batch")]
    (notice,) = cache.notices[("WorkloadPriorityClass", "batch")]
    assert notice.reason == "InvalidPreemptionToleration"
    cache.load(parse([workload_priority_class("batch", 1, annotations=toleration(10))]))
    assert cache.notices == {}


def test_victim_without_a_class_is_not_protected(runner: Runner) -> None:
    objects = toleration_queue(
        admitted("victim", "cq", 2, priority=1, at=NOW),
        pending("incoming", "cq", 2, priority=2),
        # A class with a forever-toleration exists, but the victim does not reference it.
        classes=[workload_priority_class("batch", 1, annotations=toleration(10, -1))],
    )
    assert runner(objects).victims == ["victim"]


def test_toleration_applies_to_configurable_rules_too(runner: Runner) -> None:
    """Every preemption path honours the exemption: here a PreemptionConfig rule would take it."""
    cq = cluster_queue("cq", 2, config="cfg")
    config = preemption_config(
        "cfg", rule("any", selector("WithinClusterQueue", priority=LOWER), trigger="InsufficientQuota")
    )
    objects = scenario(
        [cq],
        admitted("victim", "cq", 2, at=NOW, priority_class="batch"),
        pending("incoming", "cq", 2, priority=5),
        extra=[workload_priority_class("batch", 1, annotations=toleration(10, 60)), config],
    )
    outcome = runner(objects)
    assert outcome.victims == []
    assert candidates(outcome)["victim"][0] == "excluded"
    assert runner(objects, now=NOW + seconds(60)).victims == ["victim"]


def test_toleration_spares_one_and_takes_another(runner: Runner) -> None:
    """Exclusion is per candidate: the protected one is skipped, an unprotected one is taken even
    though classic order would have preferred the protected one (lower priority)."""
    objects = scenario(
        [cluster_queue("cq", 4, within="LowerPriority")],
        admitted("protected", "cq", 2, at=NOW - seconds(10), priority_class="guarded"),
        admitted("plain", "cq", 2, at=T0, priority_class="batch"),
        pending("incoming", "cq", 2, priority=5),
        extra=[
            workload_priority_class("guarded", 0, annotations=toleration(10, 3600)),
            workload_priority_class("batch", 1),
        ],
    )
    outcome = runner(objects)
    assert outcome.victims == ["plain"]
    assert candidates(outcome)["protected"][0] == "excluded"


# =================================================================================================
# 2. Soft opt-out (YuniKorn law 1)
# =================================================================================================


def opt_out_queue(*workloads: Any, extra: list[Obj] | None = None) -> list[Obj]:
    """CQ `cq`: 4 cpu, withinClusterQueue LowerPriority."""
    return scenario([cluster_queue("cq", 4, within="LowerPriority")], *workloads, extra=extra or [])


def test_opted_out_workload_is_passed_over_when_others_suffice(runner: Runner) -> None:
    """Classic order would take `out` first (reserved most recently); it is deferred instead."""
    outcome = runner(
        opt_out_queue(
            admitted("out", "cq", 2, priority=0, annotations={ALLOW: "false"}, at=NOW - seconds(10)),
            admitted("plain", "cq", 2, priority=0, at=NOW - seconds(100)),
            pending("incoming", "cq", 2, priority=5),
        )
    )
    assert outcome.victims == ["plain"]
    assert not outcome.messages["plain"].endswith(LAST_RESORT_SUFFIX)
    recs = candidates(outcome)
    assert recs["out"] == ("deferred", "opted out of preemption: used only if nothing else lets the preemptor fit")
    assert recs["plain"][0] == "chosen"


def test_opted_out_workload_is_the_last_resort(runner: Runner) -> None:
    outcome = runner(
        opt_out_queue(
            admitted("out", "cq", 2, priority=0, annotations={ALLOW: "false"}, at=NOW - seconds(10)),
            admitted("plain", "cq", 2, priority=0, at=NOW - seconds(100)),
            pending("incoming", "cq", 4, priority=5),
        )
    )
    assert outcome.victims == ["out", "plain"]
    assert outcome.messages["out"].endswith(LAST_RESORT_SUFFIX)
    assert LAST_RESORT_SUFFIX == " (opted out of preemption; chosen as last resort)"
    assert not outcome.messages["plain"].endswith(LAST_RESORT_SUFFIX)
    preempted = outcome.condition("out", "Preempted")
    evicted = outcome.condition("out", "Evicted")
    assert preempted is not None and evicted is not None
    assert preempted["message"] == evicted["message"] + LAST_RESORT_SUFFIX
    assert preempted["reason"] == IN_CQ
    assert candidates(outcome)["out"] == (
        "chosen",
        "prioritization in the ClusterQueue; opted out of preemption, chosen as last resort",
    )
    assert outcome.condition("incoming", "Admitted")["status"] == "True"  # type: ignore[index]


def test_opted_out_workloads_come_after_every_other_candidate() -> None:
    """In the last-resort search opted-out candidates follow all others; fill-back then spares
    the plain ones the opted-out victim makes unnecessary."""
    outcome = simulate(
        opt_out_queue(
            admitted("out", "cq", 2, priority=-10, annotations={ALLOW: "false"}, at=NOW - seconds(1)),
            admitted("plain-a", "cq", 1, priority=0, at=NOW - seconds(100)),
            admitted("plain-b", "cq", 1, priority=0, at=NOW - seconds(200)),
            pending("incoming", "cq", 3, priority=5),
        )
    )
    # Without `out` no set fits (2 cpu free at most); with it, one plain workload is enough.
    assert outcome.victims == ["out", "plain-a"]
    assert outcome.messages["out"].endswith(LAST_RESORT_SUFFIX)
    assert candidates(outcome)["plain-b"][0] == "spared"


def test_opted_out_never_chosen_when_it_does_not_help(runner: Runner) -> None:
    outcome = runner(
        opt_out_queue(
            admitted("out", "cq", 2, priority=0, annotations={ALLOW: "false"}),
            admitted("high", "cq", 2, priority=9),
            pending("incoming", "cq", 4, priority=5),
        )
    )
    assert outcome.victims == []


@pytest.mark.parametrize(
    ("workload_value", "class_value", "opted_out"),
    [
        ("false", None, True),
        (None, "false", True),
        ("true", "false", False),  # the Workload wins
        ("false", "true", True),  # the Workload wins
        ("False", None, False),  # only the literal "false"
        ("no", None, False),
        ("0", None, False),
        (None, "FALSE", False),
        ("no", "false", True),  # not a boolean on the Workload: the class decides (YuniKorn)
        ("", "false", True),
        (None, None, False),
    ],
)
def test_opt_out_resolution(workload_value: str | None, class_value: str | None, opted_out: bool) -> None:
    cls = PriorityClassInfo("c", "WorkloadPriorityClass", 0, {ALLOW: class_value} if class_value is not None else {})
    builder = WorkloadBuilder(
        "w", priority_class="c", annotations={ALLOW: workload_value} if workload_value is not None else None
    )
    assert protection.opted_out(info(builder, cls)) is opted_out


def test_opt_out_from_the_priority_class(runner: Runner) -> None:
    objects = opt_out_queue(
        admitted("out", "cq", 2, priority_class="shy", at=NOW - seconds(10)),
        admitted("in-anyway", "cq", 2, priority_class="shy", annotations={ALLOW: "true"}, at=NOW - seconds(100)),
        pending("incoming", "cq", 2, priority=5),
        extra=[workload_priority_class("shy", 0, annotations={ALLOW: "false"})],
    )
    assert runner(objects).victims == ["in-anyway"]


def test_opt_out_with_a_configurable_rule(runner: Runner) -> None:
    cq = cluster_queue("cq", 4, config="cfg")
    config = preemption_config(
        "cfg", rule("same-queue", selector("WithinClusterQueue", priority=LOWER), trigger="InsufficientQuota")
    )
    objects = scenario(
        [cq],
        admitted("out", "cq", 2, priority=0, annotations={ALLOW: "false"}),
        admitted("plain", "cq", 2, priority=0),
        pending("incoming", "cq", 4, priority=5),
        extra=[config],
    )
    outcome = runner(objects)
    assert outcome.victims == ["out", "plain"]
    assert outcome.reasons == {"out": CONFIGURABLE, "plain": CONFIGURABLE}
    assert outcome.messages["out"] == (
        "Preempted by default/incoming because of preemption config cfg rule same-queue/0" + LAST_RESORT_SUFFIX
    )
    assert (
        outcome.messages["plain"] == "Preempted by default/incoming because of preemption config cfg rule same-queue/0"
    )


def test_toleration_beats_opt_out_last_resort(runner: Runner) -> None:
    """An opt-out is soft, a toleration is hard: the last-resort search never takes a tolerated one."""
    objects = opt_out_queue(
        admitted("out", "cq", 2, priority_class="guarded", annotations={ALLOW: "false"}, at=NOW),
        admitted("plain", "cq", 2, priority=0),
        pending("incoming", "cq", 4, priority=5),
        extra=[workload_priority_class("guarded", 0, annotations=toleration(10, -1))],
    )
    assert runner(objects).victims == []


# =================================================================================================
# 3. Queue policies: fence and disabled
# =================================================================================================

ANY_RULE = preemption_config(
    "any",
    rule(
        "lower",
        selector("AnyClusterQueue", priority={"mode": "Boosted", "comparison": "LessThan"}),
        trigger="InsufficientQuota",
    ),
)


def fenced_tree(
    *workloads: Any,
    left: dict[str, str] | None = None,
    a: dict[str, str] | None = None,
    b: dict[str, str] | None = None,
    c: dict[str, str] | None = None,
    reclaim: str | None = None,
    config: bool = True,
) -> list[Obj]:
    """Cohort root ⊃ {cohort left ⊃ {CQ a, CQ b}, cohort right ⊃ {CQ c}}; 2 cpu nominal each, no
    borrowing limits. `config`: every CQ uses PreemptionConfig `any` (AnyClusterQueue, strictly
    lower priority); `reclaim`: classic reclaimWithinCohort."""
    any_rule = "any" if config else None
    cqs = [
        cluster_queue("a", 2, cohort="left", annotations=a, reclaim=reclaim, config=any_rule),
        cluster_queue("b", 2, cohort="left", annotations=b, reclaim=reclaim, config=any_rule),
        cluster_queue("c", 2, cohort="right", annotations=c, reclaim=reclaim, config=any_rule),
    ]
    return scenario(
        cqs,
        *workloads,
        cohorts=[
            cohort("root"),
            cohort("left", "root", annotations=left),
            cohort("right", "root"),
        ],
        extra=[ANY_RULE] if config else [],
    )


def from_a(**policies: Any) -> list[Obj]:
    """b holds its 2 cpu (priority 1); c borrows 2 (priority 0, c-2 the newest); a's preemptor needs 2."""
    return fenced_tree(
        admitted("b-1", "b", 2, priority=1),
        admitted("c-1", "c", 2, priority=0, at=T0),
        admitted("c-2", "c", 2, priority=0, at=T0 + seconds(1)),
        pending("incoming", "a", 2, priority=5),
        **policies,
    )


def test_without_fence_any_cluster_queue_reaches_everywhere(runner: Runner) -> None:
    outcome = runner(from_a())
    assert outcome.victims == ["c-2"]
    assert outcome.reasons == {"c-2": CONFIGURABLE}


def test_fenced_cohort_keeps_its_preemptors_victims_inside(runner: Runner) -> None:
    outcome = runner(from_a(left={POLICY: "fence"}))
    assert outcome.victims == ["b-1"]
    recs = candidates(outcome)
    assert recs["c-1"] == ("excluded", "outside the preemption fence of Cohort left")
    assert recs["c-2"] == ("excluded", "outside the preemption fence of Cohort left")


def test_fenced_cluster_queue_keeps_its_preemptors_victims_in_the_queue(runner: Runner) -> None:
    outcome = runner(from_a(a={POLICY: "fence"}))
    assert outcome.victims == []
    assert candidates(outcome)["b-1"] == ("excluded", "outside the preemption fence of ClusterQueue a")


@pytest.mark.parametrize("value", ["fence", "Fence", " FENCE "])
def test_fence_value_is_case_insensitive(value: str) -> None:
    assert simulate(from_a(left={POLICY: value})).victims == ["b-1"]


def test_fence_applies_to_classic_reclaim(runner: Runner) -> None:
    """Classic reclaimWithinCohort: Any would reclaim from borrowing c; the fence on left forbids it."""
    unfenced = runner(from_a(reclaim="Any", config=False))
    assert unfenced.victims == ["c-2"]
    assert unfenced.reasons == {"c-2": "InCohortReclamation"}
    fenced = runner(from_a(reclaim="Any", config=False, left={POLICY: "fence"}))
    assert fenced.victims == []
    assert candidates(fenced)["c-2"] == ("excluded", "outside the preemption fence of Cohort left")
    assert notes(fenced) == ["no victim set found"]


def test_fence_is_one_way(runner: Runner) -> None:
    """A preemptor outside the fenced cohort may still take victims inside it."""
    objects = fenced_tree(
        admitted("a-1", "a", 2, priority=0),
        admitted("b-1", "b", 2, priority=1),
        admitted("c-1", "c", 2, priority=2),
        pending("incoming", "c", 2, priority=5),
        left={POLICY: "fence"},
    )
    outcome = runner(objects)
    assert outcome.victims == ["a-1"]


def test_fence_is_not_inherited_by_preemptors_outside_the_fenced_subtree() -> None:
    """A fence on c's sibling queue b does not restrict c or a."""
    outcome = simulate(from_a(b={POLICY: "fence"}))
    assert outcome.victims == ["c-2"]


def from_c(**policies: Any) -> list[Obj]:
    """a and b hold their 2 cpu each (a-1 priority 0, b-1 priority 1); c's preemptor (priority 5)
    needs 4 cpu: its own 2 and 2 borrowed."""
    return fenced_tree(
        admitted("a-1", "a", 2, priority=0),
        admitted("b-1", "b", 2, priority=1),
        admitted("c-1", "c", 2, priority=2),
        pending("incoming", "c", 2, priority=5),
        **policies,
    )


def test_disabled_cohort_protects_its_cluster_queues(runner: Runner) -> None:
    outcome = runner(from_c(left={POLICY: "disabled"}))
    assert outcome.victims == ["c-1"]
    recs = candidates(outcome)
    assert recs["a-1"] == ("excluded", "Cohort left has preemption-policy disabled")
    assert recs["b-1"] == ("excluded", "Cohort left has preemption-policy disabled")


def test_explicit_default_below_a_disabled_cohort_is_not_protected(runner: Runner) -> None:
    outcome = runner(from_c(left={POLICY: "disabled"}, b={POLICY: "default"}))
    assert outcome.victims == ["b-1"]
    assert candidates(outcome)["a-1"][0] == "excluded"


@pytest.mark.parametrize("own", ["fence", "unknown-value", ""])
def test_any_policy_set_below_a_disabled_cohort_overrides_it(own: str) -> None:
    """Only `disabled` is inherited, and only by queues that set no policy of their own
    (reference A.4.2); an unknown value counts as `default`, an empty one too."""
    outcome = simulate(from_c(left={POLICY: "disabled"}, b={POLICY: own}))
    assert outcome.victims == ["b-1"]


def test_disabled_cluster_queue_workloads_may_still_preempt(runner: Runner) -> None:
    objects = fenced_tree(
        admitted("b-1", "b", 2, priority=1),
        admitted("c-1", "c", 2, priority=0, at=T0),
        admitted("c-2", "c", 2, priority=0, at=T0 + seconds(1)),
        pending("incoming", "a", 2, priority=5),
        left={POLICY: "disabled"},
    )
    outcome = runner(objects)
    assert outcome.victims == ["c-2"]


def test_disabled_cluster_queue_protects_even_from_its_own_preemptors(runner: Runner) -> None:
    objects = scenario(
        [cluster_queue("cq", 2, within="LowerPriority", annotations={POLICY: "disabled"})],
        admitted("low", "cq", 2, priority=0),
        pending("incoming", "cq", 2, priority=5),
    )
    outcome = runner(objects)
    assert outcome.victims == []
    assert candidates(outcome)["low"] == ("excluded", "ClusterQueue cq has preemption-policy disabled")


def test_unknown_policy_is_default_with_a_warning(runner: Runner) -> None:
    outcome = runner(from_a(left={POLICY: "fenced"}))
    assert outcome.victims == ["c-2"]  # as without a policy
    assert outcome.data["warnings"] == [
        "Cohort left: preemption-operator.io/preemption-policy: unknown value 'fenced' "
        "(use default, fence or disabled); treated as default"
    ]


def test_policy_helpers() -> None:
    from preemption_operator.engine.quota import QuotaNode

    root = QuotaNode("root", False, annotations={POLICY: "disabled"})
    mid = QuotaNode("mid", False, parent=root, annotations={POLICY: "fence"})
    leaf = QuotaNode("leaf", True, parent=mid)
    other = QuotaNode("other", True, parent=root)
    assert protection.policy_of(root) == "disabled"
    assert protection.policy_of(leaf) is None
    assert protection.victims_disabled(other) is root
    assert protection.victims_disabled(leaf) is None  # mid sets its own policy
    assert protection.fence_root(leaf) is mid
    assert protection.fence_root(other) is None
    assert protection.inside(leaf, mid) and protection.inside(leaf, root)
    assert not protection.inside(other, mid)
    # A Cohort and a ClusterQueue of the same name are different nodes.
    same_name = QuotaNode("mid", True, parent=root)
    assert not protection.inside(same_name, mid)


# =================================================================================================
# 4. Preemption delay
# =================================================================================================


def delayed(
    *,
    cq: dict[str, str] | None = None,
    team: dict[str, str] | None = None,
    org: dict[str, str] | None = None,
    created: datetime | None = None,
    requeued_at: datetime | None = None,
) -> list[Obj]:
    """Cohort org ⊃ cohort team ⊃ CQ cq (2 cpu, withinClusterQueue LowerPriority) holding `low`
    (2 cpu); `incoming` (priority 5, 2 cpu) created at `created` (default NOW - 30s)."""
    incoming = pending("incoming", "cq", 2, priority=5, created=created or NOW - seconds(30))
    if requeued_at is not None:
        incoming.requeued(requeued_at)
    return scenario(
        [cluster_queue("cq", 2, cohort="team", within="LowerPriority", annotations=cq)],
        admitted("low", "cq", 2, priority=0),
        incoming,
        cohorts=[cohort("org", annotations=org), cohort("team", "org", annotations=team)],
    )


def test_delay_on_the_cluster_queue(runner: Runner) -> None:
    objects = delayed(cq={DELAY: "1m"})
    before = runner(objects)
    assert before.victims == []
    message = before.condition("incoming", "QuotaReserved")["message"]  # type: ignore[index]
    assert message.endswith(
        "; preemption delayed until 2026-11-30T00:00:30Z (preemption-operator.io/preemption-delay of ClusterQueue cq)"
    )
    assert before.condition("incoming", "QuotaReserved")["reason"] == WAITING_FOR_QUOTA  # type: ignore[index]
    assert notes(before)[0] == (
        "preemption delayed until 2026-11-30T00:00:30Z (preemption-operator.io/preemption-delay of ClusterQueue cq)"
    )
    exactly = runner(objects, now=NOW + seconds(30))
    assert exactly.victims == ["low"]
    later = runner(objects, now=NOW + seconds(31))
    assert later.victims == ["low"]


def test_delay_sets_the_retry_time() -> None:
    result = one_cycle(delayed(cq={DELAY: "1m30s"}))
    assert result.preempted == []
    assert result.retry_at == NOW + seconds(60)
    assert one_cycle(delayed()).retry_at is None


def test_delay_inherited_from_the_nearest_cohort(runner: Runner) -> None:
    # org 10m, team 1m: team is nearer.
    objects = delayed(team={DELAY: "1m"}, org={DELAY: "10m"})
    assert runner(objects).victims == []
    outcome = runner(objects, now=NOW + seconds(30))
    assert outcome.victims == ["low"]
    # Only org: 10m, from the grandparent.
    only_org = runner(delayed(org={DELAY: "10m"}), now=NOW + seconds(30))
    assert only_org.victims == []
    assert only_org.condition("incoming", "QuotaReserved")["message"].endswith(  # type: ignore[index]
        "preemption delayed until 2026-11-30T00:09:30Z (preemption-operator.io/preemption-delay of Cohort org)"
    )
    assert runner(delayed(org={DELAY: "10m"}), now=NOW + seconds(570)).victims == ["low"]


def test_delay_on_the_cluster_queue_overrides_its_cohorts() -> None:
    assert simulate(delayed(cq={DELAY: "0s"}, team={DELAY: "1h"})).victims == ["low"]
    assert simulate(delayed(cq={DELAY: "1h"}, team={DELAY: "1s"})).victims == []


def test_delay_counts_from_the_last_eviction(runner: Runner) -> None:
    """Created long ago, but evicted (and requeued) 10 seconds ago: the delay starts again."""
    objects = delayed(cq={DELAY: "1m"}, created=T0, requeued_at=NOW - seconds(10))
    outcome = runner(objects)
    assert outcome.victims == []
    assert "preemption delayed until 2026-11-30T00:00:50Z" in outcome.condition("incoming", "QuotaReserved")["message"]  # type: ignore[index]
    assert runner(objects, now=NOW + seconds(50)).victims == ["low"]
    # Created long ago and never evicted: no wait.
    assert runner(delayed(cq={DELAY: "1m"}, created=T0)).victims == ["low"]


def test_delay_does_not_hold_back_admission_that_needs_no_preemption() -> None:
    objects = scenario(
        [cluster_queue("cq", 4, within="LowerPriority", annotations={DELAY: "1h"})],
        admitted("low", "cq", 2, priority=0),
        pending("incoming", "cq", 2, priority=5, created=NOW),
    )
    outcome = simulate(objects)
    assert outcome.victims == []
    assert outcome.condition("incoming", "Admitted")["status"] == "True"  # type: ignore[index]


@pytest.mark.parametrize("value", ["banana", "-30s", "30", "1d"])
def test_bad_delay_is_zero_with_a_warning(runner: Runner, value: str) -> None:
    outcome = runner(delayed(cq={DELAY: value}, org={DELAY: "1h"}))
    assert outcome.victims == ["low"]  # treated as default (0): the CQ's own value hides org's
    assert outcome.data["warnings"] == [
        f"ClusterQueue cq: preemption-operator.io/preemption-delay: {value!r} is not a duration "
        "such as 30s or 1m30s; treated as 0"
    ]


@pytest.mark.parametrize(
    ("text", "seconds_"),
    [("0", 0), ("0s", 0), ("30s", 30), ("1m30s", 90), ("1.5h", 5400), ("500ms", 0.5), ("2h45m", 9900), (".5s", 0.5)],
)
def test_parse_duration(text: str, seconds_: float) -> None:
    assert protection.parse_duration(text) == timedelta(seconds=seconds_)


@pytest.mark.parametrize("text", ["", "s", "30", "-1s", "1d", "1m 30s", "abc"])
def test_parse_duration_rejects(text: str) -> None:
    assert protection.parse_duration(text) is None


# =================================================================================================
# 5. Guarantees: quota selector, preemptorQuota, minTriggerRequiredDuration
# =================================================================================================


def guarantee_config(quota: str | None, *, scope: str = "WithinCohortTree", **rule_fields: Any) -> Obj:
    fields: dict[str, Any] = {"priority": {"mode": "Boosted", "comparison": "LessThanOrEqual"}}
    if quota is not None:
        fields["quota"] = quota
    return preemption_config(
        "guarantees", rule("reclaim", selector(scope, **fields), trigger="InsufficientQuota", **rule_fields)
    )


def tenants(
    *workloads: Any, config: Obj, mine: int = 3, theirs: int = 1, extra_cqs: list[Obj] | None = None
) -> list[Obj]:
    """Cohort `tenants` ⊃ CQ mine (`mine` cpu) and CQ theirs (`theirs` cpu); both use `config`."""
    cqs = [
        cluster_queue("mine", mine, cohort="tenants", config="guarantees"),
        cluster_queue("theirs", theirs, cohort="tenants", config="guarantees"),
        *(extra_cqs or []),
    ]
    return scenario(cqs, *workloads, cohorts=[cohort("tenants")], extra=[config])


def test_keeps_nominal_quota_rejects_a_victim_that_would_drop_its_queue_below_nominal(runner: Runner) -> None:
    """The case YuniKorn gets wrong (reference A.2 row 2): guarantee 1, usage 3 as one 3-cpu
    workload. It is above its guarantee, but taking it leaves 0 < 1."""
    workloads = (admitted("big", "theirs", 3), pending("incoming", "mine", 3, priority=0))
    strict = runner(tenants(*workloads, config=guarantee_config("KeepsNominalQuota")))
    assert strict.victims == []
    assert notes(strict) == ["no victim set found"]
    # YuniKorn's approximation ("over guarantee before removal") is BorrowingCapacityFromPreemptor:
    approximate = runner(tenants(*workloads, config=guarantee_config("BorrowingCapacityFromPreemptor")))
    assert approximate.victims == ["big"]


def test_keeps_nominal_quota_accepts_a_victim_that_keeps_its_queue_at_nominal(runner: Runner) -> None:
    outcome = runner(
        tenants(
            admitted("keep", "theirs", 1, at=T0),
            admitted("extra", "theirs", 2, at=T0 + seconds(1)),
            pending("incoming", "mine", 2, priority=0),
            config=guarantee_config("KeepsNominalQuota"),
        )
    )
    assert outcome.victims == ["extra"]  # theirs: 3 -> 1 = nominal
    assert outcome.reasons == {"extra": CONFIGURABLE}


def test_keeps_nominal_quota_skips_a_too_large_victim_for_a_smaller_one(runner: Runner) -> None:
    """`large` comes first (most recent), but would leave theirs below nominal; `small` would not."""
    outcome = runner(
        tenants(
            admitted("m", "mine", 1),
            admitted("small", "theirs", 1, at=T0),
            admitted("large", "theirs", 2, at=T0 + seconds(1)),
            pending("incoming", "mine", 1, priority=0),
            config=guarantee_config("KeepsNominalQuota"),
            mine=2,
            theirs=2,
        )
    )
    assert outcome.victims == ["small"]


def test_quota_is_rechecked_as_victims_are_removed(runner: Runner) -> None:
    """Queue `theirs` is 1 above nominal: only one of its two candidates may go; the second
    victim comes from `others` although classic order ranks both of theirs first."""
    outcome = runner(
        tenants(
            admitted("theirs-old", "theirs", 1, at=T0 + seconds(10)),
            admitted("theirs-new", "theirs", 1, at=T0 + seconds(11)),
            admitted("others-1", "others", 1, at=T0),
            admitted("others-2", "others", 1, at=T0 - seconds(1)),
            pending("incoming", "mine", 2, priority=0),
            config=guarantee_config("KeepsNominalQuota"),
            mine=2,
            theirs=1,
            extra_cqs=[cluster_queue("others", 1, cohort="tenants", config="guarantees")],
        )
    )
    assert outcome.victims == ["others-1", "theirs-new"]
    assert candidates(outcome)["theirs-old"] == (
        "skipped",
        "its ClusterQueue no longer meets the selector's quota constraint",
    )


def test_borrowing_capacity_requires_the_queue_above_nominal(runner: Runner) -> None:
    """A queue at its nominal quota gives no victims; one above it does."""
    config = guarantee_config("BorrowingCapacityFromPreemptor")
    at_nominal = runner(
        tenants(admitted("t", "theirs", 1), admitted("m", "mine", 3), pending("incoming", "mine", 1), config=config)
    )
    assert at_nominal.victims == []
    above = runner(
        tenants(admitted("t", "theirs", 2), admitted("m", "mine", 2), pending("incoming", "mine", 1), config=config)
    )
    assert above.victims == ["t"]


def test_borrowing_capacity_requires_the_preemptors_cohort_tree() -> None:
    """A queue outside the preemptor's cohort tree that is above its nominal quota (and stays at
    it) qualifies for KeepsNominalQuota but not for BorrowingCapacityFromPreemptor. (Victims there
    never free quota for the preemptor, so this is checked on the selector itself.)"""
    objects = scenario(
        [
            cluster_queue("mine", 1, cohort="tenants"),
            cluster_queue("theirs", 1, cohort="tenants"),
            cluster_queue("outside", 1),
        ],
        admitted("mine-1", "mine", 1),
        admitted("theirs-1", "theirs", 1, at=T0),
        admitted("theirs-2", "theirs", 1, at=T0 + seconds(1)),
        # `outside` has no cohort; its workloads exceed its (lowered) nominal quota of 1.
        admitted("o-1", "outside", 1, at=T0),
        admitted("o-2", "outside", 1, at=T0 + seconds(1)),
        pending("incoming", "mine", 1),
        cohorts=[cohort("tenants")],
    )
    snapshot = cache_of(objects).snapshot(NOW)
    mine = snapshot.cluster_queues["mine"]
    (incoming,) = snapshot.pending["mine"]
    ctx = Context(incoming, mine, snapshot, assign_flavors(incoming, mine, snapshot.flavors))
    assert ctx.frs == {("default", "cpu")}

    def allows(policy: str, cq: str, name: str) -> bool:
        info_ = snapshot.cluster_queues[cq].workloads[f"default/{name}"]
        return quota_allows(policy, ctx, snapshot.cluster_queues[cq], info_)

    assert allows("KeepsNominalQuota", "outside", "o-2")
    assert not allows("BorrowingCapacityFromPreemptor", "outside", "o-2")
    assert allows("KeepsNominalQuota", "theirs", "theirs-2")
    assert allows("BorrowingCapacityFromPreemptor", "theirs", "theirs-2")
    # The preemptor's own queue (at nominal) qualifies for neither.
    assert not allows("KeepsNominalQuota", "mine", "mine-1")
    assert not allows("BorrowingCapacityFromPreemptor", "mine", "mine-1")
    # DRS values need fair sharing (off here): they allow nothing (tests/unit/test_fair_quota_selectors.py).
    assert not allows("DRSLessThanInitialShare", "theirs", "theirs-2")


def test_borrowing_capacity_needs_a_contested_flavor() -> None:
    """`theirs` is above nominal in flavor spot only; the preemptor needs flavor default, so the
    candidate using default is not taken."""
    cqs = [
        cluster_queue("mine", {"default": {"nominal": 2}}, cohort="tenants", config="guarantees"),
        cluster_queue(
            "theirs", {"default": {"nominal": 1}, "spot": {"nominal": 1}}, cohort="tenants", config="guarantees"
        ),
        cluster_queue("spare", {"spot": {"nominal": 2}}, cohort="tenants"),
    ]

    def objects(spot_usage: int, default_usage: int) -> list[Obj]:
        return scenario(
            cqs,
            admitted("d-1", "theirs", 1, at=T0),
            *(admitted(f"d-{i}", "theirs", 1, at=T0 + seconds(i)) for i in range(2, default_usage + 1)),
            *(admitted(f"s-{i}", "theirs", 1, flavor="spot", at=T0) for i in range(1, spot_usage + 1)),
            admitted("mine-1", "mine", 2 - max(0, default_usage - 1)),
            pending("incoming", "mine", 1, priority=0),
            cohorts=[cohort("tenants")],
            extra=[guarantee_config("BorrowingCapacityFromPreemptor")],
            flavors=("default", "spot"),
        )

    # default: 1/1 (at nominal), spot: 3/1 (above): not a victim for a default request.
    assert simulate(objects(spot_usage=3, default_usage=1)).victims == []
    # default: 2/1 (above): the newest default workload goes.
    assert simulate(objects(spot_usage=0, default_usage=2)).victims == ["d-2"]


def test_within_nominal_quota_gates_the_rule(runner: Runner) -> None:
    config = guarantee_config(None, scope="WithinCohortTree", preemptor_quota="WithinNominalQuota")
    # mine: nominal 3, using 1; the 2-cpu preemptor stays within (3 <= 3).
    inside = runner(
        tenants(admitted("m", "mine", 1), admitted("t", "theirs", 3), pending("incoming", "mine", 2), config=config)
    )
    assert inside.victims == ["t"]
    # Using 2: with the preemptor 4 > 3: the rule does not apply.
    outside = runner(
        tenants(admitted("m", "mine", 2), admitted("t", "theirs", 2), pending("incoming", "mine", 2), config=config)
    )
    assert outside.victims == []
    assert candidates(outside)["incoming"] == (
        "rule-skipped",
        "rule reclaim: preemptorQuota WithinNominalQuota: the preemptor's ClusterQueue would exceed its nominal quota",
    )
    # preemptorQuota Any (the default): the same cluster preempts (first cycle; without the laws
    # the victim may preempt back later, see test_without_the_laws_the_same_cluster_flaps).
    result = one_cycle(
        tenants(
            admitted("m", "mine", 2),
            admitted("t", "theirs", 2),
            pending("incoming", "mine", 2),
            config=guarantee_config(None),
        )
    )
    assert [p.victim.name for p in result.preempted] == ["t"]


def test_min_trigger_required_duration(runner: Runner) -> None:
    config = guarantee_config(None, min_trigger="5m")

    def objects(incoming: WorkloadBuilder) -> list[Obj]:
        return tenants(admitted("t", "theirs", 3), incoming, config=config)

    young = objects(pending("incoming", "mine", 2, created=NOW - seconds(60)))
    outcome = runner(young)
    assert outcome.victims == []
    assert candidates(outcome)["incoming"] == (
        "rule-skipped",
        "rule reclaim: minTriggerRequiredDuration 5m not reached (until 2026-11-30T00:04:00Z)",
    )
    assert runner(young, now=NOW + seconds(239)).victims == []
    assert runner(young, now=NOW + seconds(240)).victims == ["t"]
    # Created long ago: eligible at once.
    assert runner(objects(pending("incoming", "mine", 2, created=T0))).victims == ["t"]
    # Created long ago but evicted a minute ago: counted from the eviction.
    evicted = objects(pending("incoming", "mine", 2, created=T0).requeued(NOW - seconds(60)))
    assert runner(evicted).victims == []
    assert runner(evicted, now=NOW + seconds(240)).victims == ["t"]


# =================================================================================================
# 6. Time-based candidate selectors
# =================================================================================================

OLD = {"created": NOW - timedelta(hours=3), "reserved": NOW - timedelta(hours=2)}
YOUNG = {"created": NOW - timedelta(minutes=20), "reserved": NOW - timedelta(minutes=10)}
# The preemptor: created an hour ago, ran 1h before an earlier eviction.
PREEMPTOR_AGE = timedelta(hours=1)
PREEMPTOR_RAN = 3600

TIME_CASES = [
    ("minExecutionDuration", "1h", {"old"}),
    ("minExecutionDuration", "2h", {"old"}),  # inclusive
    ("minExecutionDuration", "2h0m1s", set()),
    ("maxExecutionDuration", "30m", {"young"}),
    ("maxExecutionDuration", "10m", {"young"}),  # inclusive
    ("maxExecutionDuration", "9m", set()),
    ("executionTimeRelation", "LessThan", {"young"}),  # 10m < 1h
    ("executionTimeRelation", "GreaterThan", {"old"}),  # 2h > 1h
    ("executionTimeRelation", "LessThanOrEqual", {"young"}),
    ("executionTimeRelation", "GreaterThanOrEqual", {"old"}),
    ("minTimeFromCreationDuration", "1h", {"old"}),
    ("minTimeFromCreationDuration", "3h", {"old"}),  # inclusive
    ("maxTimeFromCreationDuration", "1h", {"young"}),
    ("maxTimeFromCreationDuration", "20m", {"young"}),  # inclusive
    ("maxTimeFromCreationDuration", "19m", set()),
    ("timeFromCreationRelation", "LessThan", {"young"}),  # 20m < 1h
    ("timeFromCreationRelation", "GreaterThan", {"old"}),  # 3h > 1h
    ("timeFromCreationRelation", "GreaterThanOrEqual", {"old"}),
]


def time_candidate(name: str, when: dict[str, datetime], priority: int = 0) -> WorkloadBuilder:
    return WorkloadBuilder(name, cpu=1, priority=priority, created=when["created"]).admitted("cq", at=when["reserved"])


def time_preemptor() -> WorkloadBuilder:
    return pending("incoming", "cq", 1, priority=5, created=NOW - PREEMPTOR_AGE).accumulated(PREEMPTOR_RAN)


@pytest.mark.parametrize(("field", "value", "matching"), TIME_CASES)
def test_time_selector_matches(field: str, value: str, matching: set[str]) -> None:
    from preemption_operator.api.v1alpha1 import CandidateSelector

    spec = CandidateSelector.model_validate({"scope": "WithinClusterQueue", field: value})
    built = build_selector(0, spec, info(time_preemptor()), NOW)
    found = {
        name
        for name, when in (("old", OLD), ("young", YOUNG))
        if built.workload_matches(info(time_candidate(name, when))) is None
    }
    assert found == matching
    if matching != {"old", "young"}:
        excluded = next(iter({"old", "young"} - matching))
        assert built.workload_matches(info(time_candidate(excluded, OLD if excluded == "old" else YOUNG))) == field


@pytest.mark.parametrize(("field", "value", "matching"), TIME_CASES)
def test_time_selector_in_a_cycle(runner: Runner, field: str, value: str, matching: set[str]) -> None:
    """CQ of 2 cpu full with `old` and `young`; the rule's only selector is the time field. The
    candidate that does not match is made the one classic order prefers (lower priority)."""
    preferred = {"old", "young"} - matching if matching else set()
    cq = cluster_queue("cq", 2, config="timed")
    config = preemption_config(
        "timed",
        rule("by-time", selector("WithinClusterQueue", priority=LOWER, **{field: value}), trigger="InsufficientQuota"),
    )
    objects = scenario(
        [cq],
        time_candidate("old", OLD, priority=-1 if "old" in preferred else 0),
        time_candidate("young", YOUNG, priority=-1 if "young" in preferred else 0),
        time_preemptor(),
        extra=[config],
    )
    outcome = runner(objects)
    # Only the preemptor's victims: a victim requeued with priority 0 may go on to preempt the
    # priority -1 workload by the same rule (the selectors compare with the new preemptor).
    assert sorted(n for n, a in outcome.preempted.items() if a["preemptor"] == "default/incoming") == sorted(matching)
    if matching:
        assert outcome.messages[next(iter(matching))] == (
            "Preempted by default/incoming because of preemption config timed rule by-time/0"
        )


def test_time_selectors_combine() -> None:
    from preemption_operator.api.v1alpha1 import CandidateSelector

    spec = CandidateSelector.model_validate(
        {"scope": "WithinClusterQueue", "minExecutionDuration": "5m", "maxTimeFromCreationDuration": "1h"}
    )
    built = build_selector(0, spec, info(time_preemptor()), NOW)
    assert built.workload_matches(info(time_candidate("young", YOUNG))) is None
    assert built.workload_matches(info(time_candidate("old", OLD))) == "maxTimeFromCreationDuration"
    fresh = {"created": NOW - timedelta(minutes=2), "reserved": NOW - timedelta(minutes=1)}
    assert built.workload_matches(info(time_candidate("fresh", fresh))) == "minExecutionDuration"


# =================================================================================================
# 7. YuniKorn's preemption-loop scenario (design doc, "Preemption Loop Prevention", cases 1-3)
# =================================================================================================

LOOP_CONFIG = "guarantees"


def loop_config(scope: str, *, laws: bool = True) -> Obj:
    fields: dict[str, Any] = {"priority": {"mode": "Boosted", "comparison": "LessThanOrEqual"}}
    if laws:
        fields["quota"] = "KeepsNominalQuota"
    return preemption_config(
        LOOP_CONFIG,
        rule(
            "guarantee",
            selector(scope, **fields),
            trigger="InsufficientQuota",
            preemptor_quota="WithinNominalQuota" if laws else None,
        ),
    )


def prod_and_test(
    *,
    prod_guarantee: int,
    test_guarantee: int,
    prod_running: list[int],
    test_running: list[int],
    prod_pending: int,
    scope: str = "AnyClusterQueue",
    laws: bool = True,
) -> list[Obj]:
    """ReplicaSets Prod Repl and Test Repl as workloads in sibling ClusterQueues `prod` and `test`
    of cohort `cluster`: nominal quota = guarantee, the cohort's capacity is the sum (the cluster
    is full), every pod has priority 0 and is one Workload; `prod_pending` more 1-cpu Prod pods wait."""
    cqs = [
        cluster_queue("prod", prod_guarantee, cohort="cluster", config=LOOP_CONFIG),
        cluster_queue("test", test_guarantee, cohort="cluster", config=LOOP_CONFIG),
    ]
    pods = [admitted(f"prod-{i}", "prod", cpu, priority=0, at=T0 + seconds(i)) for i, cpu in enumerate(prod_running)]
    pods += [admitted(f"test-{i}", "test", cpu, priority=0, at=T0 + seconds(i)) for i, cpu in enumerate(test_running)]
    pods += [
        pending(f"prod-new-{i}", "prod", 1, priority=0, created=T0 + seconds(100 + i)) for i in range(prod_pending)
    ]
    assert sum(prod_running) + sum(test_running) == prod_guarantee + test_guarantee, "the cluster must be full"
    return scenario(cqs, *pods, cohorts=[cohort("cluster")], extra=[loop_config(scope, laws=laws)])


def usage(outcome: Outcome, cq: str) -> int:
    total = 0
    for status in outcome.statuses.values():
        admission = status.get("admission")
        if admission and admission["clusterQueue"] == cq:
            total += int(admission["podSetAssignments"][0]["resourceUsage"]["cpu"])
    return total


def settle(objects: list[Obj]) -> Outcome:
    """Runs `simulate --max-cycles 50` through the CLI and checks a fixed point was reached, then
    re-runs simulate on the final state: nothing more may happen."""
    outcome = simulate_cli(objects, max_cycles=50)
    assert not any("--max-cycles" in w for w in outcome.data["warnings"]), outcome.data["warnings"]
    again = simulate_cli(outcome.objects_after(objects), max_cycles=50)
    assert [a for a in again.actions if a["action"] != "Pending"] == []
    # No flapping: nobody is evicted twice, and no Prod pod is ever a victim.
    counts = preempted_counts(outcome)
    assert all(n == 1 for n in counts.values()), counts
    assert not any(name.startswith("prod") for name in counts), counts
    return outcome


@pytest.mark.parametrize("scope", ["AnyClusterQueue", "WithinCohortTree"])
def test_loop_case_1_one_preemption_then_both_wait(scope: str) -> None:
    """Prod under its guarantee (3 of 4), Test over (5 of 4), two Prod pods pending. One Test pod
    is preempted; then Prod is at its guarantee (cannot trigger again: WithinNominalQuota), and the
    recreated Test pod cannot preempt back: Test is at its guarantee (WithinNominalQuota) and Prod
    would drop below its own (KeepsNominalQuota). Our law 4 counts the preemptor in, so Prod ends
    at, not above, its guarantee."""
    outcome = settle(
        prod_and_test(
            prod_guarantee=4,
            test_guarantee=4,
            prod_running=[1, 1, 1],
            test_running=[1] * 5,
            prod_pending=2,
            scope=scope,
        )
    )
    assert preempted_counts(outcome) == Counter({"test-4": 1})
    assert (usage(outcome, "prod"), usage(outcome, "test")) == (4, 4)
    assert outcome.condition("prod-new-0", "Admitted")["status"] == "True"  # type: ignore[index]
    assert outcome.condition("prod-new-1", "QuotaReserved")["reason"] == WAITING_FOR_QUOTA  # type: ignore[index]
    assert outcome.condition("test-4", "QuotaReserved")["reason"] == WAITING_FOR_QUOTA  # type: ignore[index]
    assert outcome.condition("test-4", "Evicted")["status"] == "True"  # type: ignore[index]


@pytest.mark.parametrize("scope", ["AnyClusterQueue", "WithinCohortTree"])
def test_loop_case_2_no_victim_would_keep_test_at_its_guarantee(scope: str) -> None:
    """Test is above its guarantee (4 of 3) but every Test pod is 2 cpu: taking one leaves 2 < 3.
    Nothing is preempted; Prod waits."""
    outcome = settle(
        prod_and_test(
            prod_guarantee=5, test_guarantee=3, prod_running=[1] * 4, test_running=[2, 2], prod_pending=2, scope=scope
        )
    )
    assert preempted_counts(outcome) == Counter()
    assert (usage(outcome, "prod"), usage(outcome, "test")) == (4, 4)
    assert outcome.condition("prod-new-0", "QuotaReserved")["reason"] == WAITING_FOR_QUOTA  # type: ignore[index]


@pytest.mark.parametrize("scope", ["AnyClusterQueue", "WithinCohortTree"])
def test_loop_case_3_prod_still_under_its_guarantee_preempts_again(scope: str) -> None:
    """Prod far under its guarantee (2 of 6), Test far over (6 of 2), three Prod pods pending: each
    Prod pod preempts one Test pod (Prod may trigger again while under its guarantee); every
    recreated Test pod waits. Test ends at 3 (still above 2), Prod at 5 (within 6)."""
    outcome = settle(
        prod_and_test(
            prod_guarantee=6, test_guarantee=2, prod_running=[1, 1], test_running=[1] * 6, prod_pending=3, scope=scope
        )
    )
    assert preempted_counts(outcome) == Counter({"test-5": 1, "test-4": 1, "test-3": 1})
    assert (usage(outcome, "prod"), usage(outcome, "test")) == (5, 3)
    for i in range(3):
        assert outcome.condition(f"prod-new-{i}", "Admitted")["status"] == "True"  # type: ignore[index]
    for name in ("test-3", "test-4", "test-5"):
        assert outcome.condition(name, "QuotaReserved")["reason"] == WAITING_FOR_QUOTA  # type: ignore[index]


def test_loop_case_3_continued_until_test_reaches_its_guarantee() -> None:
    """Enough Prod pods pending: Prod takes Test down to exactly its guarantee and no further."""
    outcome = settle(
        prod_and_test(prod_guarantee=6, test_guarantee=2, prod_running=[1, 1], test_running=[1] * 6, prod_pending=6)
    )
    assert (usage(outcome, "prod"), usage(outcome, "test")) == (6, 2)
    assert sum(preempted_counts(outcome).values()) == 4


def test_without_the_laws_the_same_cluster_flaps() -> None:
    """Control: the same rule with neither `quota` nor `preemptorQuota` lets the recreated Test
    pods preempt Prod back (equal priorities): simulate never settles."""
    objects = prod_and_test(
        prod_guarantee=4, test_guarantee=4, prod_running=[1, 1, 1], test_running=[1] * 5, prod_pending=2, laws=False
    )
    outcome = simulate(objects, max_cycles=30)
    assert outcome.data["warnings"] == ["stopped after --max-cycles 30 cycles; the cluster had not settled"]
    assert max(preempted_counts(outcome).values()) > 1


# =================================================================================================
# 8. The examples
# =================================================================================================


def simulate_folder(folder: Path, now: str) -> dict[str, Any]:
    result = CliRunner().invoke(
        cli, ["simulate", str(folder), "--output", "json", "--now", now], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def final_states(data: dict[str, Any]) -> dict[str, str]:
    states = {}
    for wl in data["workloads"]:
        conditions = {c["type"]: c for c in wl["status"].get("conditions", [])}
        admitted_ = conditions.get("Admitted", {}).get("status") == "True"
        states[f"{wl['namespace']}/{wl['name']}"] = (
            "Admitted" if admitted_ else f"Pending({conditions.get('QuotaReserved', {}).get('reason', 'New')})"
        )
    return states


def preempted_actions(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["workload"]: a for a in data["actions"] if a["action"] == "Preempted"}


TOLERATION_EXAMPLE = EXAMPLES / "preemption-toleration"
GUARANTEED_EXAMPLE = EXAMPLES / "guaranteed-queues"


def explanation_records(data: dict[str, Any], preemptor: str) -> list[dict[str, Any]]:
    return [rec for exp in data["explanations"] if exp["preemptor"] == preemptor for rec in exp["candidates"]]


def test_preemption_toleration_example_within_the_window() -> None:
    """README: half an hour in, urgent-fix (priority 1000, the minimum) preempts train-b;
    nightly-eval (500) waits because train-a tolerates it until 12:00:00."""
    data = simulate_folder(TOLERATION_EXAMPLE, "2026-06-01T10:30:00Z")
    assert data["warnings"] == []
    actions = preempted_actions(data)
    assert set(actions) == {"training/train-b"}
    assert actions["training/train-b"]["preemptor"] == "training/urgent-fix"
    assert actions["training/train-b"]["reason"] == IN_CQ
    assert actions["training/train-b"]["message"] == (
        "Preempted to accommodate a workload (UID: training/urgent-fix, JobUID: UNKNOWN) due to prioritization "
        "in the ClusterQueue; preemptor path: /training; preemptee path: /training"
    )
    assert final_states(data) == {
        "training/train-a": "Admitted",
        "training/urgent-fix": "Admitted",
        "training/train-b": f"Pending({WAITING_FOR_QUOTA})",
        "training/nightly-eval": f"Pending({WAITING_FOR_QUOTA})",
    }
    records = {r["workload"]: r for r in explanation_records(data, "training/nightly-eval")}
    assert records["training/train-a"]["outcome"] == "excluded"
    assert records["training/train-a"]["detail"] == (
        "WorkloadPriorityClass long-running tolerates preemptors below priority 1000 until 2026-06-01T12:00:00Z "
        "(preemptor has 500)"
    )


def test_preemption_toleration_example_after_the_window() -> None:
    """README: at 12:00:00 (train-a's boundary) nightly-eval preempts train-a as well."""
    data = simulate_folder(TOLERATION_EXAMPLE, "2026-06-01T12:00:00Z")
    assert data["warnings"] == []
    actions = preempted_actions(data)
    assert {k: v["preemptor"] for k, v in actions.items()} == {
        "training/train-b": "training/urgent-fix",
        "training/train-a": "training/nightly-eval",
    }
    assert final_states(data) == {
        "training/train-a": f"Pending({WAITING_FOR_QUOTA})",
        "training/train-b": f"Pending({WAITING_FOR_QUOTA})",
        "training/urgent-fix": "Admitted",
        "training/nightly-eval": "Admitted",
    }


def test_guaranteed_queues_example() -> None:
    """README: web-3 reclaims its guarantee from team-b (batch-3 only); sandbox-2 is fenced in;
    web-4 and the recreated batch-3 may not preempt; nothing flaps."""
    data = simulate_folder(GUARANTEED_EXAMPLE, "2026-06-01T12:00:00Z")
    assert data["warnings"] == []
    actions = preempted_actions(data)
    assert set(actions) == {"team-b/batch-3"}
    assert actions["team-b/batch-3"]["preemptor"] == "team-a/web-3"
    assert actions["team-b/batch-3"]["reason"] == CONFIGURABLE
    assert actions["team-b/batch-3"]["message"] == (
        "Preempted by team-a/web-3 because of preemption config tenant-guarantees rule reclaim-guarantee/0"
    )
    assert final_states(data) == {
        "team-a/web-1": "Admitted",
        "team-a/web-3": "Admitted",
        "team-b/batch-1": "Admitted",
        "team-b/batch-2": "Admitted",
        "team-c/sandbox-1": "Admitted",
        "team-a/web-4": f"Pending({WAITING_FOR_QUOTA})",
        "team-b/batch-3": f"Pending({WAITING_FOR_QUOTA})",
        "team-c/sandbox-2": f"Pending({WAITING_FOR_QUOTA})",
    }
    fenced = [
        r
        for r in explanation_records(data, "team-c/sandbox-2")
        if r["outcome"] == "excluded" and r["detail"].startswith("outside the preemption fence")
    ]
    assert "team-b/batch-1" in {r["workload"] for r in fenced}
    assert {r["workload"].split("/")[0] for r in fenced} == {"team-b"}
    assert {r["detail"] for r in fenced} == {"outside the preemption fence of Cohort sandbox"}
    assert not any(r["outcome"] == "chosen" for r in explanation_records(data, "team-c/sandbox-2"))
    skipped = [r for r in explanation_records(data, "team-a/web-4") if r["outcome"] == "rule-skipped"]
    assert [r["detail"] for r in skipped] == [
        "rule reclaim-guarantee: preemptorQuota WithinNominalQuota: the preemptor's ClusterQueue would exceed "
        "its nominal quota"
    ]
    # Its pending reasons over the cycles (first Kueue's "no longer fits" when an earlier workload
    # of its cohort changed its fit in the same cycle) include the delay, with its end.
    batch_3 = [a for a in data["actions"] if a["action"] == "Pending" and a["workload"] == "team-b/batch-3"]
    assert any(
        a["message"].endswith(
            "; preemption delayed until 2026-06-01T12:00:30Z (preemption-operator.io/preemption-delay of Cohort org)"
        )
        for a in batch_3
    ), [a["message"] for a in batch_3]


def test_guaranteed_queues_example_settles() -> None:
    """A second run from the final state of the first (and later, past every delay) preempts nothing."""
    import yaml

    first = simulate_folder(GUARANTEED_EXAMPLE, "2026-06-01T12:00:00Z")
    finals = {(w["namespace"], w["name"]): w["status"] for w in first["workloads"]}
    docs = []
    for path in sorted(GUARANTEED_EXAMPLE.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc["kind"] == "Workload":
                doc["status"] = finals[(doc["metadata"]["namespace"], doc["metadata"]["name"])]
            docs.append(doc)
    outcome = simulate_cli(docs, now=datetime.fromisoformat("2026-06-01T13:00:00+00:00"), max_cycles=50)
    assert [a for a in outcome.actions if a["action"] != "Pending"] == []


def test_guaranteed_queues_example_delay() -> None:
    """README: ten seconds after web-3 was created nothing is preempted yet."""
    data = simulate_folder(GUARANTEED_EXAMPLE, "2026-06-01T11:00:10Z")
    assert preempted_actions(data) == {}
    web_3 = next(a for a in data["actions"] if a["workload"] == "team-a/web-3")
    assert web_3["message"].endswith(
        "; preemption delayed until 2026-06-01T11:00:30Z (preemption-operator.io/preemption-delay of Cohort org)"
    )


def test_waiting_for_preempted_is_the_preemptors_reason_while_victims_go() -> None:
    """Sanity for the cycle shape the tests above rely on: victims chosen in cycle 1, preemptor
    admitted in cycle 2."""
    outcome = simulate(tolerating({}, preemptor_priority=5, running_for=0))
    pending_actions = [a for a in outcome.actions_of("incoming") if a["action"] == "Pending"]
    assert pending_actions[0]["reason"] == WAITING_FOR_PREEMPTED
    assert [a["cycle"] for a in outcome.actions_of("incoming") if a["action"] == "Admitted"] == [2]
