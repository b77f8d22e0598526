"""PreemptionLimit (Kueue's future-work rate limits on preemption): every scope, limits that
cover one preemption together, ruleNames and configSelector, limit 0, classic and fair-sharing
preemptions under a limit that covers everything, window expiry on the injected clock, the search
going on past a blocked pair, the blocked condition, Event and message, windows rebuilt from
Workload conditions, and a property: no window ever holds more preemptions than its limit."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import (
    KUEUE_ALPHA,
    NOW,
    Obj,
    WorkloadBuilder,
    admitted,
    as_dict,
    cache_of,
    cluster_queue,
    parse,
    pending,
    preemption_config,
    rule,
    scenario,
    selector,
    simulate,
)
from preemption_operator.api import kinds
from preemption_operator.api.objects import parse_object
from preemption_operator.api.v1beta2 import Workload
from preemption_operator.cli import cli
from preemption_operator.controller import queue_status
from preemption_operator.controller.feeder import CacheFeeder
from preemption_operator.controller.metrics import Metrics
from preemption_operator.controller.publisher import QueueStatusPublisher
from preemption_operator.engine import Engine, QueueState, changes, status_changes
from preemption_operator.engine import fair_sharing as fs
from preemption_operator.engine import workload_status as wl_status
from preemption_operator.engine.cache import Cache
from preemption_operator.engine.limits import LimitBook, Pair, PastPreemption, past_preemption, remember
from preemption_operator.engine.scheduler import Admission, CycleResult
from preemption_operator.engine.workload import build_info
from preemption_operator.k8s.writer import StatusWriter
from unit.fake_api import FakeApi

HOUR = timedelta(hours=1)


def limit(name: str, scope: str, n: int, window: str = "1h", **spec: Any) -> Obj:
    """A PreemptionLimit; `spec` takes wire names (configSelector, clusterQueueSelector, ruleNames)."""
    return {
        "apiVersion": KUEUE_ALPHA,
        "kind": "PreemptionLimit",
        "metadata": {"name": name, "uid": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"scope": scope, "limit": n, "limitWindowDuration": window, **spec},
    }


def full_queue(name: str, *victims: str, labels: dict[str, str] | None = None, **kwargs: Any) -> list[Any]:
    """A ClusterQueue of as many cpu as victims (1 cpu each, priority -1), within LowerPriority."""
    cq = cluster_queue(name, len(victims), within="LowerPriority", labels=labels, **kwargs)
    return [cq, *(admitted(v, name, 1, priority=-1) for v in victims)]


def split(items: list[Any]) -> tuple[list[Obj], list[Any]]:
    return [i for i in items if isinstance(i, dict) and i["kind"] == "ClusterQueue"], [
        i for i in items if not (isinstance(i, dict) and i["kind"] == "ClusterQueue")
    ]


def cycle(objects: list[Any], now: datetime = NOW, fair: bool = False) -> CycleResult:
    cache = cache_of(objects, fs.FairSharing(enabled=True) if fair else fs.OFF)
    return Engine().cycle(cache.snapshot(now), QueueState())


def victims(result: CycleResult) -> list[str]:
    return sorted(p.victim.name for p in result.preempted)


def blocked(result: CycleResult) -> dict[str, str]:
    return {p.workload.name: p.blocked_by_limit for p in result.pending if p.blocked_by_limit is not None}


def two_queues(*limits: Obj, labels_a: dict[str, str] | None = None) -> list[Any]:
    """Queues a and b, each full with two victims and one pending preemptor of priority 1."""
    cqs_a, wls_a = split(full_queue("a", "a-low1", "a-low2", labels=labels_a))
    cqs_b, wls_b = split(full_queue("b", "b-low1", "b-low2"))
    incoming = [pending("a-in", "a", 1, priority=1), pending("b-in", "b", 1, priority=1)]
    return scenario([*cqs_a, *cqs_b], *wls_a, *wls_b, *incoming, extra=list(limits))


# -- scopes -----------------------------------------------------------------------------------------


def test_without_limits_both_queues_preempt() -> None:
    assert victims(cycle(two_queues())) == ["a-low1", "b-low1"]


def test_global_limit_counts_every_queue_together() -> None:
    result = cycle(two_queues(limit("cluster", "Global", 1)))
    assert victims(result) == ["a-low1"]
    assert blocked(result) == {"b-in": "cluster"}


def test_preempting_cluster_queue_limit_counts_per_preemptor_queue() -> None:
    cqs, wls = split(full_queue("a", "low1", "low2"))
    objects = scenario(
        cqs,
        *wls,
        pending("in1", "a", 1, priority=1),
        pending("in2", "a", 1, priority=1),
        extra=[limit("per-preemptor", "PreemptingClusterQueue", 1)],
    )
    outcome = simulate(objects)
    assert outcome.victims == ["low1"]
    condition = outcome.condition("in2", wl_status.BLOCKED_BY_LIMIT)
    assert condition is not None and condition["status"] == "True"
    # Another queue has its own window.
    assert victims(cycle(two_queues(limit("per-preemptor", "PreemptingClusterQueue", 1)))) == ["a-low1", "b-low1"]


def test_preempted_cluster_queue_limit_protects_the_selected_queue_only() -> None:
    protect = limit("protect-a", "PreemptedClusterQueue", 0, clusterQueueSelector={"matchLabels": {"tier": "critical"}})
    result = cycle(two_queues(protect, labels_a={"tier": "critical"}))
    assert victims(result) == ["b-low1"]
    assert blocked(result) == {"a-in": "protect-a"}


def _preempted_earlier(name: str, cq: str, at: datetime, *, readmitted: bool) -> WorkloadBuilder:
    """A 1-cpu workload of priority -2 that team's `x` preempted at `at`: still evicted, or admitted
    again (Kueue's `Previously:` conditions) at `at`."""
    message = "Preempted by default/x because of preemption config cfg rule r/0"
    wl = admitted(name, cq, 1, priority=-2, at=at)
    conditions = wl.body["status"]["conditions"]
    if readmitted:
        conditions += [
            _cond("Evicted", "False", "QuotaReserved", f"Previously: {message}", at),
            _cond("Preempted", "False", "QuotaReserved", f"Previously: {message}", at),
        ]
    else:
        conditions += [
            _cond("Evicted", "True", "Preempted", message, at),
            _cond("Preempted", "True", "ConfigurablePreemption", message, at),
        ]
    return wl


def _cond(kind: str, status: str, reason: str, message: str, at: datetime) -> Obj:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def test_preempted_workload_limit_moves_the_search_to_another_victim() -> None:
    """`again` (priority -2) would go first, but it was preempted 10 minutes ago and admitted again;
    a limit of one preemption per workload an hour sends the search on to `low`."""
    cq = cluster_queue("a", 2, within="LowerPriority")
    again = _preempted_earlier("again", "a", NOW - timedelta(minutes=10), readmitted=True)
    base = [again, admitted("low", "a", 1, priority=-1), pending("in", "a", 1, priority=1)]
    assert victims(cycle(scenario([cq], *base))) == ["again"]
    result = cycle(scenario([cq], *base, extra=[limit("once", "PreemptedWorkload", 1)]))
    assert victims(result) == ["low"]
    assert blocked(result) == {}
    records = {r.workload: (r.outcome, r.detail) for r in result.explanations[0].candidates}
    assert records["default/again"] == ("excluded", "blocked by PreemptionLimit once (default/again)")


def test_a_search_takes_no_more_victims_than_the_window_has_room_for() -> None:
    cqs, wls = split(full_queue("a", "low1", "low2"))
    needs_two = pending("in", "a", 2, priority=1)
    assert victims(cycle(scenario(cqs, *wls, needs_two, extra=[limit("two", "Global", 2)]))) == ["low1", "low2"]
    result = cycle(scenario(cqs, *wls, needs_two, extra=[limit("one", "Global", 1)]))
    assert victims(result) == []
    assert blocked(result) == {"in": "one"}
    assert result.pending[-1].would_evict == ("default/low1", "default/low2")


def test_two_limits_covering_one_preemption_both_need_room() -> None:
    roomy = limit("roomy", "Global", 5)
    closed = limit("closed", "PreemptedClusterQueue", 0)
    assert blocked(cycle(two_queues(roomy, closed))) == {"a-in": "closed", "b-in": "closed"}
    assert blocked(cycle(two_queues(limit("roomy", "PreemptedClusterQueue", 5), limit("closed", "Global", 0)))) == {
        "a-in": "closed",
        "b-in": "closed",
    }
    assert victims(cycle(two_queues(roomy, limit("open", "PreemptedClusterQueue", 5)))) == ["a-low1", "b-low1"]


# -- what a limit covers ----------------------------------------------------------------------------


def _configurable(*limits: Obj, config_labels: dict[str, str] | None = None) -> list[Any]:
    """Queue a (no classic preemption) whose PreemptionConfig `cfg` has rule `take-low`, selecting
    workloads of priority lower than the preemptor's in the queue."""
    cq = cluster_queue("a", 1, config="cfg")
    config = preemption_config(
        "cfg", rule("take-low", selector("WithinClusterQueue", priority={"mode": "Base", "comparison": "LessThan"}))
    )
    if config_labels:
        config["metadata"]["labels"] = config_labels
    return scenario(
        [cq], admitted("low", "a", 1, priority=-1), pending("in", "a", 1, priority=1), extra=[config, *limits]
    )


def test_configurable_preemption_without_limits() -> None:
    assert victims(cycle(_configurable())) == ["low"]


@pytest.mark.parametrize(
    ("spec", "config_labels", "stopped"),
    [
        ({"ruleNames": ["take-low"]}, None, True),
        ({"ruleNames": ["another-rule"]}, None, False),
        ({"configSelector": {"matchLabels": {"team": "ml"}}}, {"team": "ml"}, True),
        ({"configSelector": {"matchLabels": {"team": "ml"}}}, {"team": "web"}, False),
        ({"configSelector": {"matchLabels": {"team": "ml"}}, "ruleNames": ["take-low"]}, {"team": "ml"}, True),
        ({"configSelector": {"matchLabels": {"team": "ml"}}, "ruleNames": ["other"]}, {"team": "ml"}, False),
        ({}, None, True),
    ],
)
def test_rule_names_and_config_selector(spec: Obj, config_labels: dict[str, str] | None, stopped: bool) -> None:
    result = cycle(_configurable(limit("rules", "Global", 0, **spec), config_labels=config_labels))
    assert victims(result) == ([] if stopped else ["low"])
    assert blocked(result) == ({"in": "rules"} if stopped else {})


def test_config_selector_never_covers_classic_preemption() -> None:
    only_configs = limit("configs", "Global", 0, configSelector={})
    assert victims(cycle(two_queues(only_configs))) == ["a-low1", "b-low1"]


def test_limit_zero_blocks_every_covered_pair() -> None:
    result = cycle(two_queues(limit("none", "Global", 0)))
    assert victims(result) == []
    assert blocked(result) == {"a-in": "none", "b-in": "none"}
    assert all(p.retry_at is None for p in result.pending if p.blocked_by_limit)


def test_covering_everything_limits_fair_sharing_preemption() -> None:
    cqs = [cluster_queue(n, 3, cohort="all", within="LowerPriority", reclaim="Any") for n in ("a", "b", "c")]
    running = [admitted(f"a{i}", "a", 1) for i in (1, 2, 3)] + [admitted(f"b{i}", "b", 1) for i in (1, 2, 3, 4, 5)]
    running.append(admitted("c1", "c", 1))
    incoming = pending("c-in", "c", 1)
    assert victims(cycle(scenario(cqs, *running, incoming), fair=True)) == ["b1"]
    result = cycle(scenario(cqs, *running, incoming, extra=[limit("all", "Global", 0)]), fair=True)
    assert victims(result) == []
    assert blocked(result) == {"c-in": "all"}


# -- time -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("after", "room"), [(HOUR - timedelta(seconds=1), False), (HOUR, True)])
def test_window_expiry_on_the_injected_clock(after: timedelta, room: bool) -> None:
    """A preemption at t counts at t + window - 1s and no longer at t + window."""
    t = NOW - HOUR
    cq = cluster_queue("a", 2, within="LowerPriority")
    earlier = _preempted_earlier("earlier", "a", t, readmitted=False)
    objects = scenario(
        [cq],
        earlier,
        admitted("low", "a", 2, priority=-1),
        pending("in", "a", 1, priority=1),
        extra=[limit("hourly", "Global", 1)],
    )
    result = cycle(objects, now=t + after)
    assert victims(result) == (["low"] if room else [])
    if not room:
        assert result.pending[-1].retry_at == t + HOUR
        assert result.retry_at == t + HOUR


def test_a_throttled_preemptor_is_looked_at_again_when_the_window_has_room() -> None:
    t = NOW - HOUR
    cq = cluster_queue("a", 2, within="LowerPriority")
    objects = scenario(
        [cq],
        _preempted_earlier("earlier", "a", t, readmitted=False),
        admitted("low", "a", 2, priority=-1),
        pending("in", "a", 1, priority=1),
        extra=[limit("hourly", "Global", 1)],
    )
    cache, state, engine = cache_of(objects), QueueState(), Engine()
    first = engine.cycle(cache.snapshot(t + timedelta(minutes=30)), state)
    assert blocked(first) == {"in": "hourly"}
    assert state.throttled == {"default/in": ("a", t + HOUR)}
    assert victims(engine.cycle(cache.snapshot(t + HOUR), state)) == ["low"]


# -- what the preemptor is told ---------------------------------------------------------------------


def test_blocked_condition_event_and_message() -> None:
    result = cycle(two_queues(limit("cluster", "Global", 1)))
    change = next(c for c in status_changes(result, NOW) if c.key == "default/b-in")
    new = change.compute(change.workload.obj.to_wire())
    assert new is not None
    condition = wl_status.get_condition(new, "PreemptionBlockedByLimit")
    assert condition is not None
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "True",
        "PreemptionLimitExceeded",
        "Preemption was blocked by PreemptionLimit cluster; would have evicted default/b-low1",
    )
    assert (
        changes.EventNote(
            "workload",
            "Warning",
            "PreemptionThrottled",
            "Preemption was blocked by PreemptionLimit cluster; would have evicted default/b-low1",
        )
        in change.events
    )
    quota = wl_status.get_condition(new, "QuotaReserved")
    assert quota is not None and quota["message"].endswith(
        ". Not preempted: default/b-low1: blocked by PreemptionLimit cluster (Global); "
        "default/b-low2: blocked by PreemptionLimit cluster (Global)"
    )


def test_the_throttled_event_goes_to_the_preemptor_and_its_cluster_queue() -> None:
    from types import SimpleNamespace

    from preemption_operator.controller.decisions import DecisionWriter

    objects = two_queues(limit("cluster", "Global", 1))
    cache = cache_of(objects)
    result = Engine().cycle(cache.snapshot(NOW), QueueState())
    change = next(c for c in status_changes(result, NOW) if c.key == "default/b-in")
    message = "Preemption was blocked by PreemptionLimit cluster; would have evicted default/b-low1"
    assert [(n.about, n.reason, n.message) for n in change.events if n.reason == "PreemptionThrottled"] == [
        ("workload", "PreemptionThrottled", message),
        ("clusterQueue", "PreemptionThrottled", message),
    ]
    posted: list[tuple[str, str, str, str]] = []

    class Sink:
        def record(self, obj: Obj, kind: str, api_version: str, type_: str, reason: str, msg: str) -> None:
            posted.append((kind, obj["metadata"]["name"], type_, reason))

    writer = SimpleNamespace(cache=cache, events=Sink())
    body = change.workload.obj.to_wire()
    for note in change.events:
        DecisionWriter._event(writer, note, body, change)  # type: ignore[arg-type]
    assert ("Workload", "b-in", "Warning", "PreemptionThrottled") in posted
    assert ("ClusterQueue", "b", "Warning", "PreemptionThrottled") in posted


def test_an_admitted_preemptor_never_keeps_the_condition_true() -> None:
    """Blocked in the first run; the limit then gives way (raised), the preemptor preempts and is
    admitted: the condition ends False, with the old message."""
    objects = two_queues(limit("cluster", "Global", 1))
    first = simulate(objects)
    assert (first.condition("b-in", "PreemptionBlockedByLimit") or {}).get("status") == "True"
    raised = [
        o if o["kind"] != "PreemptionLimit" else limit("cluster", "Global", 5) for o in first.objects_after(objects)
    ]
    second = simulate(raised)
    final = second.condition("b-in", "PreemptionBlockedByLimit")
    assert final is not None
    # Flipped once it preempts (no longer blocked), before it is admitted.
    assert (final["status"], final["reason"]) == ("False", "WaitingForPreemptedWorkloads")
    assert final["message"] == (
        "Previously: Preemption was blocked by PreemptionLimit cluster; would have evicted default/b-low1"
    )
    assert (second.condition("b-in", "Admitted") or {}).get("status") == "True"


def test_admission_flips_the_condition_as_it_flips_evicted() -> None:
    message = "Preemption was blocked by PreemptionLimit cluster; would have evicted default/b-low1"
    status = {"conditions": [_cond("PreemptionBlockedByLimit", "True", "PreemptionLimitExceeded", message, NOW)]}
    wl = build_info(parse([pending("p", "a", 1)])[0], {})
    out = wl_status.admitted(status, Admission(wl, "a", ()), NOW + HOUR, None)
    condition = wl_status.get_condition(out, "PreemptionBlockedByLimit")
    assert condition is not None
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "QuotaReserved",
        f"Previously: {message}",
    )


def test_simulate_counts_preemptions_of_earlier_cycles_of_the_run() -> None:
    """Every cycle runs at --now: a preemption of cycle 1 still counts in cycle 3, after its victim
    was admitted again."""
    cq = cluster_queue("a", 1, within="LowerPriority")
    objects = scenario(
        [cq],
        admitted("low", "a", 1, priority=-1),
        pending("mid", "a", 1, priority=0),
        pending("high", "a", 1, priority=1),
        extra=[limit("once", "Global", 1)],
    )
    outcome = simulate(objects)
    assert [a["workload"] for a in outcome.actions if a["action"] == "Preempted"] == ["default/low"]


# -- history: read back from Workloads --------------------------------------------------------------


def _workload(item: WorkloadBuilder) -> Workload:
    parsed = parse_object(as_dict(item))
    assert isinstance(parsed, Workload)
    return parsed


def test_past_preemption_from_an_evicted_victim() -> None:
    at = NOW - timedelta(minutes=5)
    found = past_preemption(_workload(_preempted_earlier("v", "a", at, readmitted=False)))
    assert found == PastPreemption(
        at,
        "default/v",
        "a",
        "default/x",
        None,
        "ConfigurablePreemption",
        "cfg",
        ("r",),
        "Preempted by default/x because of preemption config cfg rule r/0",
    )


def test_past_preemption_from_a_readmitted_victim_with_a_classic_message() -> None:
    at = NOW - timedelta(minutes=5)
    message = (
        "Preempted to accommodate a workload (UID: u, JobUID: j) due to reclamation within the cohort; "
        "preemptor path: /all/team-a; preemptee path: /all/team-b"
    )
    wl = admitted("v", "b", 1, at=at)
    wl.body["status"]["conditions"] += [
        _cond("Evicted", "False", "QuotaReserved", f"Previously: {message}", at),
        _cond("Preempted", "False", "QuotaReserved", f"Previously: {message}", at),
    ]
    found = past_preemption(_workload(wl))
    assert found is not None
    assert (found.at, found.victim, found.victim_cluster_queue, found.preemptor_cluster_queue, found.mechanism) == (
        at,
        "default/v",
        "b",
        "team-a",
        "InCohortReclamation",
    )


def test_a_victim_history_counts_each_preemption_once() -> None:
    """Evicted, admitted again, evicted again by the same preemptor for the same rule: two
    preemptions, though the messages are the same; each record read twice counts once."""
    t = NOW - HOUR
    first = past_preemption(_workload(_preempted_earlier("v", "a", t, readmitted=False)))
    back = past_preemption(_workload(_preempted_earlier("v", "a", t + timedelta(minutes=5), readmitted=True)))
    again = past_preemption(_workload(_preempted_earlier("v", "a", t + timedelta(minutes=9), readmitted=False)))
    assert first is not None and back is not None and again is not None
    history: list[PastPreemption] = []
    for found in (first, first, back, back, again, again):
        remember(history, found)
    assert [(p.at, p.readmitted) for p in history] == [
        (t + timedelta(minutes=5), True),
        (t + timedelta(minutes=9), False),
    ]


def test_no_past_preemption_without_a_preempted_condition() -> None:
    assert past_preemption(_workload(admitted("v", "a", 1))) is None
    assert past_preemption(_workload(pending("p", "a", 1))) is None


def test_the_cache_counts_evictions_being_written() -> None:
    """The next pass counts a preemption whose write is in flight, before the watch shows it."""
    objects = two_queues(limit("cluster", "Global", 1))
    cache = cache_of(objects)
    result = Engine().cycle(cache.snapshot(NOW), QueueState())
    assert victims(result) == ["a-low1"]
    cache.assume(status_changes(result, NOW))
    book = cache.snapshot(NOW).limits
    assert book is not None and book.counts("cluster") == {"Global": 1}
    # Written and watched: counted once, from the status.
    for change in status_changes(result, NOW):
        new = change.compute(change.workload.obj.to_wire())
        if new is not None:
            body = change.workload.obj.model_dump(by_alias=True, exclude_unset=True, mode="json")
            cache.upsert(Workload.model_validate({**body, "status": new}))
            cache.forget(change.key, change)
    book = cache.snapshot(NOW).limits
    assert book is not None and book.counts("cluster") == {"Global": 1}


def test_a_restarted_cache_rebuilds_the_windows_from_statuses() -> None:
    objects = two_queues(limit("cluster", "Global", 1))
    first = simulate(objects)
    assert first.victims == ["a-low1"]
    restarted = cache_of(first.objects_after(objects))
    book = restarted.snapshot(NOW).limits
    assert book is not None and book.counts("cluster") == {"Global": 1}
    assert victims(Engine().cycle(restarted.snapshot(NOW), QueueState())) == []


def test_the_windows_follow_workloads_as_they_come_in() -> None:
    """No rebuild per pass: an ingested status adds its preemption; the same preemption seen again
    once the victim is admitted again moves to the later time, counted once."""
    cache = cache_of(two_queues(limit("cluster", "Global", 5, "2h")))
    book = cache.limits(NOW)
    assert book is not None and book.counts("cluster") == {}
    t = NOW - HOUR
    cache.upsert(_workload(_preempted_earlier("a-low1", "a", t, readmitted=False)))
    assert cache._book is not None  # kept, not rebuilt
    assert (cache.limits(NOW) or book).counts("cluster") == {"Global": 1}
    cache.upsert(_workload(_preempted_earlier("a-low1", "a", t + timedelta(minutes=30), readmitted=True)))
    after = cache.limits(NOW)
    assert after is not None and after.counts("cluster") == {"Global": 1}
    assert after.counts("cluster", t + timedelta(hours=2)) == {"Global": 1}  # the later time counts
    cache.upsert(_workload(_preempted_earlier("b-low1", "b", t, readmitted=False)))
    assert (cache.limits(NOW) or book).counts("cluster") == {"Global": 2}


# -- what the operator reads ------------------------------------------------------------------------


def test_counts_per_key_and_problems() -> None:
    cache = Cache()
    good = limit("per-queue", "PreemptedClusterQueue", 3)
    bad = limit("bad", "Global", 1, configSelector={"matchExpressions": [{"key": "k", "operator": "In"}]})
    cache.load(parse([*two_queues(), good, bad]))
    book = cache.snapshot(NOW).limits
    assert book is not None
    assert book.problems() == {
        "bad": "spec.configSelector: matchExpressions[0]: for 'in', 'notin' operators, values set can't be empty"
    }
    book.record(Pair("default/x", "a", "default/a-low1", "a"), NOW - timedelta(minutes=59))
    book.record(Pair("default/x", "a", "default/a-low2", "a"), NOW)
    book.record(Pair("default/y", "b", "default/b-low1", "b"), NOW - HOUR)
    assert book.counts("per-queue") == {"a": 2}
    assert book.counts("per-queue", NOW + timedelta(minutes=1)) == {"a": 1}
    assert book.counts("missing") == {}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"clusterQueueSelector": {"matchLabels": {"bad key!": "x"}}},
            "PreemptionLimit bad: spec.clusterQueueSelector: matchLabels: invalid label key 'bad key!'",
        ),
        (
            {"limitWindowDuration": "500ms"},
            'PreemptionLimit bad: spec.limitWindowDuration: Invalid value: "string": must be at least 1s',
        ),
    ],
)
def test_bad_limits_are_bad_input(tmp_path: Any, spec: Obj, message: str) -> None:
    import yaml

    body = limit("bad", "Global", 1)
    body["spec"].update(spec)
    path = tmp_path / "input.yaml"
    path.write_text(yaml.safe_dump_all([*two_queues(), body]))
    result = CliRunner().invoke(cli, ["simulate", str(path)])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


# -- explain and lint --------------------------------------------------------------------------------


def test_explain_names_the_limit_that_kept_each_candidate(tmp_path: Any) -> None:
    import yaml

    path = tmp_path / "input.yaml"
    path.write_text(yaml.safe_dump_all([as_dict(o) for o in two_queues(limit("cluster", "Global", 1))]))
    result = CliRunner().invoke(
        cli, ["explain", str(path), "--workload", "default/b-in", "--now", "2026-11-30T00:00:00Z"]
    )
    assert result.exit_code == 0, result.output
    assert "excluded     default/b-low1: blocked by PreemptionLimit cluster (Global)" in result.output
    assert "note: Preemption was blocked by PreemptionLimit cluster; would have evicted default/b-low1" in result.output


def lint_codes(objects: list[Any]) -> list[tuple[str, str]]:
    from preemption_operator.lint.checks import lint

    report = lint(parse(objects))
    return [(f.code, f.message) for f in report.findings if f.code in ("UnmatchedLimit", "BlockedByLimit")]


def test_lint_reports_limits_that_select_nothing() -> None:
    nothing = limit(
        "nothing",
        "Global",
        3,
        clusterQueueSelector={"matchLabels": {"tier": "none"}},
        configSelector={"matchLabels": {"team": "none"}},
        ruleNames=["ghost"],
    )
    assert lint_codes(_configurable(nothing)) == [
        ("UnmatchedLimit", "PreemptionLimit nothing: clusterQueueSelector matches no ClusterQueue"),
        ("UnmatchedLimit", "PreemptionLimit nothing: configSelector matches no PreemptionConfig"),
        ("UnmatchedLimit", "PreemptionLimit nothing: ruleNames names ghost, which no selected PreemptionConfig has"),
    ]
    assert lint_codes(_configurable(limit("fine", "Global", 3, ruleNames=["take-low"]))) == []


def test_lint_reports_a_queue_a_zero_limit_keeps_from_ever_preempting() -> None:
    message = (
        "ClusterQueue a: every way its workloads may preempt is covered by PreemptionLimit rules with limit 0: "
        "they can never preempt (each waits for free quota)"
    )
    assert lint_codes(_configurable(limit("rules", "Global", 0, ruleNames=["take-low"]))) == [
        ("BlockedByLimit", message)
    ]
    # A limit above 0 leaves a way.
    assert lint_codes(_configurable(limit("rules", "Global", 1, ruleNames=["take-low"]))) == []
    # Queue b keeps its classic path: only a is reported.
    protect = limit("protect-a", "PreemptedClusterQueue", 0, clusterQueueSelector={"matchLabels": {"tier": "x"}})
    found = lint_codes(two_queues(protect, labels_a={"tier": "x"}))
    assert [code for code, _ in found] == ["BlockedByLimit"]
    assert found[0][1].startswith("ClusterQueue a: ")


# -- the invariant ----------------------------------------------------------------------------------

SCOPES = ["Global", "PreemptingClusterQueue", "PreemptedClusterQueue", "PreemptedWorkload"]
STEPS = st.lists(
    # arrivals, their cpu (2: two victims), seconds later
    st.tuples(st.integers(0, 3), st.integers(1, 2), st.sampled_from([0, 60, 300, 600, 1200])),
    min_size=1,
    max_size=8,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS, cap=st.integers(0, 2), scope=st.sampled_from(SCOPES))
def test_no_window_ever_holds_more_than_its_limit(steps: list[tuple[int, int, int]], cap: int, scope: str) -> None:
    """Over random arrivals and clock steps, the covered preemptions of any key inside any window
    of 10 minutes never exceed the limit (every preemption here is covered: one queue). Victims
    preempted earlier are admitted again and may be preempted again (PreemptedWorkload)."""
    window = timedelta(minutes=10)
    cq = cluster_queue("a", 4, within="LowerPriority")
    base = scenario([cq], *(admitted(f"run{i}", "a", 1, priority=-5) for i in range(4)))
    cache = cache_of([*base, limit("cap", scope, cap, "10m")])
    state, engine = QueueState(), Engine()
    now, made, times = NOW, 0, []
    for arrivals, cpu, later in steps:
        now += timedelta(seconds=later)
        for _ in range(arrivals):
            made += 1
            # Every newcomer outranks every earlier one: each may preempt.
            wl = pending(f"in{made}", "a", cpu, priority=made, created=now)
            cache.upsert(parse([wl])[0])
        for _ in range(3):  # a few cycles at this time: preempt, admit
            result = engine.cycle(cache.snapshot(now), state)
            times += [
                (p.victim.key if scope == "PreemptedWorkload" else "", now) for p in result.preempted if not p.ongoing
            ]
            for change in status_changes(result, now):
                info = cache.infos[change.key]
                new = change.compute(info.obj.to_wire())
                if new is not None:
                    body = info.obj.model_dump(by_alias=True, exclude_unset=True, mode="json")
                    cache.upsert(Workload.model_validate({**body, "status": new}))
    for key, t in times:
        assert sum(1 for k, u in times if k == key and t - window < u <= t) <= cap


def test_the_book_is_none_without_limits() -> None:
    assert cache_of(two_queues()).snapshot(NOW).limits is None
    assert isinstance(cache_of(two_queues(limit("x", "Global", 1))).snapshot(NOW).limits, LimitBook)


def test_the_protected_queue_example() -> None:
    import json
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "examples" / "protected-queue"
    result = CliRunner().invoke(cli, ["simulate", str(folder), "--output", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [a["workload"] for a in data["actions"] if a["action"] == "Preempted"] == ["lab/scratch-a"]
    status = next(w["status"] for w in data["workloads"] if w["name"] == "batch-2")
    condition = wl_status.get_condition(status, "PreemptionBlockedByLimit")
    assert condition is not None
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "True",
        "PreemptionLimitExceeded",
        "Preemption was blocked by PreemptionLimit protect-hero; would have evicted lab/hero-a",
    )


# -- what the operator writes -----------------------------------------------------------------------


def _publisher(cache: Cache, api: FakeApi) -> tuple[QueueStatusPublisher, Metrics]:
    class Waker:
        def poke(self) -> None: ...
        def quota_released(self, cluster_queue: str) -> None: ...
        def config_changed(self) -> None: ...

    feeder = CacheFeeder(cache, Waker())  # type: ignore[arg-type]
    metrics = Metrics()
    return QueueStatusPublisher(cache, StatusWriter(api), feeder, metrics, lambda: True, lambda: None, dict), metrics


async def test_the_limit_status_says_whether_it_is_in_force_and_counts_about_once_a_minute() -> None:
    good, bad = limit("cluster", "Global", 3), limit("bad", "Global", 1, configSelector={"matchLabels": {"a b": "c"}})
    objects = two_queues(good, bad)
    after = simulate(objects).objects_after(objects)
    api = FakeApi()
    for body in as_dict(after):
        if body["kind"] in ("PreemptionLimit",):
            api.put(body)
    cache = cache_of(after)
    publisher, metrics = _publisher(cache, api)

    await publisher.publish(NOW)
    written = api.objects[kinds.PreemptionLimit.path("cluster")]["status"]
    valid = wl_status.get_condition(written, "Valid") or {}
    assert (valid.get("status"), valid.get("reason")) == ("True", "Valid")
    assert written["count"] == {"Global": 2}  # the run's two preemptions, one in each queue
    refused = api.objects[kinds.PreemptionLimit.path("bad")]["status"]
    invalid = wl_status.get_condition(refused, "Valid") or {}
    assert (invalid.get("status"), invalid.get("reason")) == ("False", "InvalidSpec")
    assert "spec.configSelector" in str(invalid.get("message")) and "count" not in refused
    assert metrics.limit_used.labels(preemption_limit="cluster")._value.get() == 2
    assert metrics.limit_allowed.labels(preemption_limit="cluster")._value.get() == 3

    cache.upsert(_workload(_preempted_earlier("b-late", "b", NOW, readmitted=False)))
    await publisher.publish(NOW + timedelta(seconds=30))
    assert api.objects[kinds.PreemptionLimit.path("cluster")]["status"]["count"] == {"Global": 2}  # not due yet
    assert metrics.limit_used.labels(preemption_limit="cluster")._value.get() == 3  # the gauge is
    await publisher.publish(NOW + timedelta(seconds=61))
    assert api.objects[kinds.PreemptionLimit.path("cluster")]["status"]["count"] == {"Global": 3}


def test_the_count_keeps_the_most_preempted_keys() -> None:
    counts = {f"ns/w{i:04}": 1 + i % 7 for i in range(1500)}
    status = queue_status.preemption_limit_status(1, None, counts, {"count": {"old": 9}}, NOW)
    kept = status["count"]
    assert len(kept) == queue_status.COUNT_KEYS
    assert min(kept.values()) >= sorted(counts.values(), reverse=True)[queue_status.COUNT_KEYS - 1]
    assert "old" not in kept
    assert queue_status.preemption_limit_status(1, None, None, status, NOW)["count"] == kept  # not due: kept
    assert "count" not in queue_status.preemption_limit_status(1, None, {}, status, NOW)


def test_a_preemptor_waiting_for_its_victim_is_not_throttled_by_that_victim() -> None:
    """In the rounds after it preempted, a preemptor finds its victim again, its eviction under
    way: that is no new preemption, so a window it filled does not park it as throttled."""
    cqs, wls = split(full_queue("a", "a-low1", "a-low2"))
    objects = scenario(cqs, *wls, pending("a-in", "a", 1, priority=1), extra=[limit("cluster", "Global", 1)])
    result = Engine(rounds=3).cycle(cache_of(objects).snapshot(NOW), QueueState())
    assert victims(result) == ["a-low1"]
    assert blocked(result) == {}
