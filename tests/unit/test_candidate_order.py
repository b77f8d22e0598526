"""PreemptionConfig `spec.ordering`: every field in both directions decides a victim, chains of
keys, evicted first and the UID last, no ordering leaves the classic order, shares re-ranked as
victims are taken, validation, explanation, and (property) the incremental order equals a plain
re-sort after every pick."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import (
    NOW,
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
    one_cycle,
    preemption_config,
    rule,
    selector,
    workload,
)
from preemption_operator.api.objects import parse_object
from preemption_operator.engine import fair_sharing as fs
from preemption_operator.engine.candidate_order import ranked
from preemption_operator.engine.candidates import Candidate, Context
from preemption_operator.engine.configurable import ConfigurablePreemption, validate
from preemption_operator.engine.fair_preemption import strategies_allow
from preemption_operator.engine.flavors import assign_flavors
from preemption_operator.engine.ordering import candidate_key
from preemption_operator.engine.snapshot import Snapshot
from preemption_operator.engine.workload import WorkloadInfo

CONFIG = "ordered"
EVERYWHERE = [rule("any", selector("AnyClusterQueue"))]
WITHIN = [rule("own", selector("WithinClusterQueue"))]


def config(ordering: list[dict[str, str]] | None, rules: list[Obj] | None = None) -> Obj:
    body = preemption_config(CONFIG, *(rules or EVERYWHERE))
    if ordering is not None:
        body["spec"]["ordering"] = ordering
    return body


def order(*pairs: str) -> list[dict[str, str]]:
    """order("Priority", "AdmissionTimestamp Descending")"""
    out = []
    for pair in pairs:
        field, _, direction = pair.partition(" ")
        out.append({"orderingField": field, "direction": direction or "Ascending"})
    return out


def incoming(cpu: int = 1, queue: str = "main", **kwargs: Any) -> WorkloadBuilder:
    return workload("incoming", cpu=cpu, queue=queue, priority=kwargs.pop("priority", 100), **kwargs)


def victims(objects: list[Any]) -> list[str]:
    result = one_cycle(objects)
    return sorted(p.victim.name for p in result.preempted)


def context(objects: list[Any], preemptor: str = "default/incoming") -> tuple[Context, Snapshot]:
    snapshot = cache_of(objects).snapshot(NOW)
    [(wl, cq_name)] = [(wl, name) for name, queue in snapshot.pending.items() for wl in queue if wl.key == preemptor]
    cq = snapshot.cluster_queues[cq_name]
    assignment = assign_flavors(wl, cq, snapshot.flavors, snapshot.tas, snapshot.node_usage)
    return Context(wl, cq, snapshot, assignment), snapshot


def stream(objects: list[Any]) -> list[Candidate]:
    """Every candidate the config yields, each taken (removed from the snapshot) as the search does."""
    ctx, snapshot = context(objects)
    found = []
    for cand in ConfigurablePreemption().candidates(ctx, True):
        snapshot.remove_workload(cand.workload)
        found.append(cand)
    return found


def names(cands: list[Candidate]) -> list[str]:
    return [c.workload.name for c in cands]


# ------------------------------------------------------------------------------------------------
# Scenarios: each field decides which one workload goes (the preemptor needs 1 cpu)
# ------------------------------------------------------------------------------------------------


def one_queue(*workloads: WorkloadBuilder, cpu: int = 2, ordering: list[dict[str, str]] | None = None) -> list[Any]:
    """CQ `a` alone, `cpu` cpu, full; the rule takes anything inside it."""
    return [
        *basics(),
        cluster_queue("a", cpu, config=CONFIG),
        local_queue("main", "a"),
        local_queue("lq1", "a"),
        local_queue("lq2", "a"),
        config(ordering, WITHIN),
        *workloads,
        incoming(),
    ]


def flat_cohort(
    quotas: dict[str, int], *workloads: WorkloadBuilder, ordering: list[dict[str, str]] | None
) -> list[Any]:
    """ClusterQueues of cohort `all` (`a` is the preemptor's); the rule takes anything anywhere."""
    return [
        *basics(),
        cohort("all"),
        *(
            cluster_queue(name, cpu, cohort="all", config=CONFIG if name == "a" else None)
            for name, cpu in quotas.items()
        ),
        local_queue("main", "a"),
        config(ordering),
        *workloads,
        incoming(),
    ]


def priority_case(direction: str) -> list[Any]:
    return one_queue(
        admitted("low", "a", priority=1), admitted("high", "a", priority=5), ordering=order(f"Priority {direction}")
    )


def admission_case(direction: str) -> list[Any]:
    return one_queue(
        admitted("old", "a", at=T0),
        admitted("new", "a", at=T0 + timedelta(hours=1)),
        ordering=order(f"AdmissionTimestamp {direction}"),
    )


def cq_drs_case(direction: str) -> list[Any]:
    # b borrows 2, c borrows 1: b's share is the higher.
    return flat_cohort(
        {"a": 3, "b": 1, "c": 1},
        *(admitted(f"b{i}", "b") for i in range(3)),
        *(admitted(f"c{i}", "c") for i in range(2)),
        ordering=order(f"ClusterQueueDRS {direction}"),
    )


def other_cq_case(direction: str) -> list[Any]:
    return flat_cohort(
        {"a": 1, "b": 1}, admitted("mine", "a"), admitted("theirs", "b"), ordering=order(f"IsOtherCQ {direction}")
    )


def other_cohort_case(direction: str) -> list[Any]:
    # a and b in cohort x, c in cohort y, both under root: a borrows what it needs.
    return [
        *basics(),
        cohort("root"),
        cohort("x", "root"),
        cohort("y", "root"),
        cluster_queue("a", 0, cohort="x", config=CONFIG),
        cluster_queue("b", 1, cohort="x"),
        cluster_queue("c", 1, cohort="y"),
        local_queue("main", "a"),
        config(order(f"IsOtherCohort {direction}")),
        admitted("near", "b", uid="z-near"),  # the UID alone would put it last
        admitted("far", "c", uid="a-far"),
        incoming(),
    ]


def strategy_case(field: str, direction: str) -> list[Any]:
    # b borrows 2 (taking from it is fair to a, within its nominal quota); c stays within its own.
    return flat_cohort(
        {"a": 1, "b": 1, "c": 2},
        *(admitted(f"b{i}", "b", uid=f"z-b{i}") for i in range(3)),
        admitted("c0", "c", uid="a-c0"),
        ordering=order(f"{field} {direction}"),
    )


def lq_drs_case(direction: str) -> list[Any]:
    # lq1 holds 2 of a's 3 cpu, lq2 holds 1.
    return one_queue(
        admitted("x1", "a", queue="lq1", uid="x1"),
        admitted("x2", "a", queue="lq1", uid="x2"),
        admitted("y1", "a", queue="lq2", uid="y1"),
        cpu=3,
        ordering=order(f"LocalQueueDRS {direction}"),
    )


CASES = {
    # field: (scenario, victim when Ascending, victim when Descending)
    "Priority": (priority_case, "low", "high"),
    "AdmissionTimestamp": (admission_case, "old", "new"),
    "ClusterQueueDRS": (cq_drs_case, "c0", "b0"),
    "IsOtherCQ": (other_cq_case, "mine", "theirs"),
    "IsOtherCohort": (other_cohort_case, "near", "far"),
    "IsDRSLessThanInitialShare": (lambda d: strategy_case("IsDRSLessThanInitialShare", d), "b0", "c0"),
    "IsDRSLessThanOrEqualToFinalShare": (lambda d: strategy_case("IsDRSLessThanOrEqualToFinalShare", d), "b0", "c0"),
    "LocalQueueDRS": (lq_drs_case, "y1", "x1"),
}


def test_every_field_has_a_case() -> None:
    from typing import get_args

    from preemption_operator.api.v1alpha1 import OrderingField

    assert set(CASES) == set(get_args(OrderingField))


@pytest.mark.parametrize("direction", ["Ascending", "Descending"])
@pytest.mark.parametrize("field", sorted(CASES))
def test_field_decides_the_victim(field: str, direction: str) -> None:
    build, ascending, descending = CASES[field]
    assert victims(build(direction)) == [ascending if direction == "Ascending" else descending]


@pytest.mark.parametrize("direction", ["Ascending", "Descending"])
@pytest.mark.parametrize("field", ["ClusterQueueDRS", "IsDRSLessThanInitialShare", "IsDRSLessThanOrEqualToFinalShare"])
def test_share_fields_decide_the_same_with_fair_sharing_on(field: str, direction: str) -> None:
    """With fair sharing on, the config's candidates come after the fair strategies (none here:
    no classic policy), and the shares are the same numbers."""
    build, ascending, descending = CASES[field]
    result = one_cycle(build(direction), fair_sharing=fs.FairSharing(enabled=True))
    assert sorted(p.victim.name for p in result.preempted) == [ascending if direction == "Ascending" else descending]


@pytest.mark.parametrize("field", sorted(CASES))
def test_direction_omitted_is_ascending(field: str) -> None:
    build, ascending, _ = CASES[field]
    objects = build("Ascending")
    for obj in objects:
        body = as_dict(obj)
        if body["kind"] == "PreemptionConfig":
            for entry in body["spec"]["ordering"]:
                del entry["direction"]
    assert victims(objects) == [ascending]


def test_admission_timestamp_none_counts_as_now() -> None:
    """A candidate whose quota reservation time is unknown is the newest."""
    objects = one_queue(admitted("old", "a", at=T0), admitted("new", "a", at=T0 + timedelta(hours=1)))
    ctx, _ = context(objects)
    olds = [wl for wl in ctx.snapshot.admitted(ctx.cq)]
    unknown = next(wl for wl in olds if wl.name == "old")
    object.__setattr__(unknown, "reserved_at", None)
    from preemption_operator.api.v1alpha1 import CandidateOrder

    got = [wl.name for wl in ranked(ctx, olds, [CandidateOrder(ordering_field="AdmissionTimestamp")])]
    assert got == ["new", "old"]


# ------------------------------------------------------------------------------------------------
# Chains, evicted first, UID last, and no ordering at all
# ------------------------------------------------------------------------------------------------


def chain_case(ordering: list[dict[str, str]] | None) -> list[Any]:
    return flat_cohort(
        {"a": 3, "b": 3},
        admitted("a-p1-old", "a", priority=1, at=T0, uid="u1"),
        admitted("a-p1-new", "a", priority=1, at=T0 + timedelta(hours=1), uid="u2"),
        admitted("a-p2", "a", priority=2, uid="u3"),
        admitted("b-p1", "b", priority=1, uid="u4"),
        admitted("b-p3", "b", priority=3, uid="u5"),
        admitted("b-p3-twin", "b", priority=3, uid="u0"),
        ordering=ordering,
    )


def test_chain_compares_keys_in_turn() -> None:
    got = names(stream(chain_case(order("IsOtherCQ Descending", "Priority Descending", "AdmissionTimestamp"))))
    # other queue first; within each, higher priority first; then oldest; then UID (u0 before u5).
    assert got == ["b-p3-twin", "b-p3", "b-p1", "a-p2", "a-p1-old", "a-p1-new"]


def test_chain_order_of_keys_matters() -> None:
    got = names(stream(chain_case(order("Priority", "IsOtherCQ", "AdmissionTimestamp Descending"))))
    assert got == ["a-p1-new", "a-p1-old", "b-p1", "a-p2", "b-p3-twin", "b-p3"]


def test_keys_not_listed_take_no_part_and_uid_breaks_ties() -> None:
    """Only Priority listed: the queue and admission time do not matter, the UID does."""
    got = names(stream(chain_case(order("Priority"))))
    assert got == ["a-p1-old", "a-p1-new", "b-p1", "a-p2", "b-p3-twin", "b-p3"]


def test_already_evicted_first_whatever_the_keys() -> None:
    objects = one_queue(
        admitted("low", "a", priority=1, uid="u1"),
        admitted("high-evicted", "a", priority=9, uid="u2").evicted(),
        admitted("mid", "a", priority=5, uid="u0"),
        cpu=3,
        ordering=order("Priority"),
    )
    assert names(stream(objects)) == ["high-evicted", "low", "mid"]


def test_evicted_first_with_share_keys_too() -> None:
    objects = cq_drs_case("Ascending")
    for obj in objects:
        if isinstance(obj, WorkloadBuilder) and obj.name == "b2":
            obj.evicted()
    assert names(stream(objects))[0] == "b2"


@pytest.mark.parametrize("ordering", [None, []], ids=["unset", "empty"])
def test_no_ordering_keeps_the_classic_candidate_order(ordering: list[dict[str, str]] | None) -> None:
    objects = chain_case(ordering)
    _, snapshot = context(objects)
    expected = sorted(
        (wl for name in ("a", "b") for wl in snapshot.admitted(snapshot.cluster_queues[name])),
        key=lambda wl: candidate_key(wl, "a", NOW),
    )
    got = stream(objects)
    assert names(got) == [wl.name for wl in expected]
    assert all(c.rule is not None and c.rule.ordering == "" for c in got)
    assert "ordered by" not in got[0].source


# ------------------------------------------------------------------------------------------------
# Shares move as victims are taken
# ------------------------------------------------------------------------------------------------


def walkthrough(ordering: list[dict[str, str]]) -> list[Any]:
    """Flat cohort of A, B and C (after Kueue's future-work walkthrough): B borrows 3, C borrows 2;
    the preemptor in A (within its nominal quota) needs 4 cpu."""
    return [
        *basics(),
        cohort("all"),
        cluster_queue("a", 5, cohort="all", config=CONFIG),
        cluster_queue("b", 1, cohort="all"),
        cluster_queue("c", 1, cohort="all"),
        local_queue("main", "a"),
        config(ordering),
        *(admitted(f"b{p}", "b", priority=p) for p in (1, 2, 3, 4)),
        *(admitted(f"c{p}", "c", priority=p) for p in (5, 6, 7)),
        incoming(4),
    ]


def test_cluster_queue_share_is_recomputed_after_each_victim() -> None:
    """Highest share first: B (3 borrowed) gives b1; then B and C tie at 2 and priority decides
    (b2); then C is the higher (c5); and so on. Sorting once by the first shares would take all of
    B before C."""
    got = names(stream(walkthrough(order("ClusterQueueDRS Descending", "Priority"))))
    assert got == ["b1", "b2", "c5", "b3", "c6", "b4", "c7"]
    assert victims(walkthrough(order("ClusterQueueDRS Descending", "Priority"))) == ["b1", "b2", "b3", "c5"]


def test_strategy_key_is_recomputed_after_each_victim() -> None:
    """IsDRSLessThanInitialShare first: B and C both borrow, so both are fair to take from, by
    priority; once C is back within its nominal quota its last workload is no longer fair and
    goes after every remaining workload of B."""
    objects = walkthrough(order("IsDRSLessThanInitialShare", "Priority Descending"))
    got = names(stream(objects))
    assert got == ["c7", "c6", "b4", "b3", "b2", "c5", "b1"]


def test_local_queue_share_is_recomputed_after_each_victim() -> None:
    objects = one_queue(
        *(admitted(f"x{i}", "a", queue="lq1", uid=f"x{i}", priority=i) for i in range(3)),
        admitted("y0", "a", queue="lq2", uid="y0", cpu=2),
        cpu=5,
        ordering=order("LocalQueueDRS Descending", "Priority"),
    )
    # lq1 holds 3, lq2 2: x0; then 2 each, the priority decides (x1 p1 > y0 p0): y0; then x1, x2.
    assert names(stream(objects)) == ["x0", "y0", "x1", "x2"]


# ------------------------------------------------------------------------------------------------
# Validation and explanation
# ------------------------------------------------------------------------------------------------


def test_validate_rejects_a_field_listed_twice() -> None:
    body = config(order("Priority", "AdmissionTimestamp", "Priority Descending"))
    errors = validate(parse_object(body))
    assert errors == [
        f"PreemptionConfig {CONFIG}: spec.ordering[2].orderingField: Priority is already spec.ordering[0]; "
        "each field may be listed once"
    ]


def test_validate_accepts_distinct_fields() -> None:
    assert validate(parse_object(config(order(*CASES)))) == []


def test_candidates_name_the_ordering() -> None:
    got = stream(priority_case("Descending"))
    assert got[0].source == "preemption config ordered rule own/0, ordered by Priority Descending"


def test_explain_shows_the_ordering(tmp_path: Any) -> None:
    import yaml
    from click.testing import CliRunner

    from preemption_operator.cli import cli

    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump_all([as_dict(o) for o in priority_case("Descending")], sort_keys=False))
    args = ["explain", str(path), "--workload", "default/incoming", "--now", "2026-11-30T00:00:00Z"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "ordered by Priority Descending" in result.output
    assert "high" in result.output


# ------------------------------------------------------------------------------------------------
# Property: the incremental order equals a re-sort after every pick
# ------------------------------------------------------------------------------------------------

FIELDS = sorted(CASES)


def reference_order(
    ctx: Context, candidates: list[WorkloadInfo], ordering: list[tuple[str, bool]], taken: list[bool]
) -> list[str]:
    """Plainly: at every step compute every key of every remaining candidate on the snapshot as it
    stands, pick the smallest, and take it (remove it) when `taken` says so."""
    snapshot = ctx.snapshot
    remaining = list(candidates)
    out = []

    def lq_share(wl: WorkloadInfo) -> float:
        cq = snapshot.cluster_queues[wl.cluster_queue or ""]
        usage: dict[str, int] = {}
        for other in cq.workloads.values():
            if not snapshot.is_removed(other) and (other.namespace, other.queue_name) == (wl.namespace, wl.queue_name):
                for fr, amount in other.usage.items():
                    usage[fr[1]] = usage.get(fr[1], 0) + amount
        nominal: dict[str, int] = {}
        for fr in cq.node.subtree_quota:
            nominal[fr[1]] = nominal.get(fr[1], 0) + cq.node.nominal(fr)
        return max(
            [amount * 1000.0 / nominal[r] for r, amount in usage.items() if amount > 0 and nominal.get(r, 0) > 0],
            default=0.0,
        )

    def fair(wl: WorkloadInfo, strategy: str) -> bool:
        if wl.cluster_queue == ctx.cq.name:
            return True
        return strategies_allow(ctx, snapshot.cluster_queues[wl.cluster_queue or ""].node, wl, (strategy,))

    def value(wl: WorkloadInfo, field: str) -> tuple[float, ...]:
        cq = snapshot.cluster_queues[wl.cluster_queue or ""]
        if field == "Priority":
            return (wl.priority,)
        if field == "AdmissionTimestamp":
            return ((wl.reserved_at or snapshot.now).timestamp(),)
        if field == "IsOtherCQ":
            return (int(wl.cluster_queue != ctx.cq.name),)
        if field == "IsOtherCohort":
            mine, theirs = ctx.cq.node.parent, cq.node.parent
            same = wl.cluster_queue == ctx.cq.name or (
                mine is not None and theirs is not None and mine.name == theirs.name
            )
            return (int(not same),)
        if field == "ClusterQueueDRS":
            share = fs.dominant_resource_share(cq.node)
            return (1, share.unweighted_ratio) if share.zero_weight_borrows else (0, share.precise)
        if field == "LocalQueueDRS":
            return (lq_share(wl),)
        if field == "IsDRSLessThanInitialShare":
            return (int(not fair(wl, fs.LESS_THAN_INITIAL_SHARE)),)
        return (int(not fair(wl, fs.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE)),)

    def full(wl: WorkloadInfo) -> tuple[Any, ...]:
        parts: list[Any] = [int(not wl.evicted)]
        for field, descending in ordering:
            parts.extend(-x if descending else x for x in value(wl, field))
        return (*parts, wl.uid)

    step = 0
    while remaining:
        best = min(remaining, key=full)
        remaining.remove(best)
        out.append(best.name)
        if taken[step % len(taken)] and not snapshot.is_removed(best):
            snapshot.remove_workload(best)
        step += 1
    return out


@st.composite
def ordered_clusters(draw: st.DrawFn) -> tuple[list[Any], list[tuple[str, bool]], list[bool], set[str]]:
    """A cohort tree of 2-4 ClusterQueues, random workloads, a random ordering, which yielded
    candidates the caller takes, and which were taken before the ordering starts (by classic
    preemption earlier in the same pass)."""
    two_levels = draw(st.booleans())
    queues = ["a", "b", "c", "d"][: draw(st.integers(2, 4))]
    objects: list[Any] = [*basics(), cohort("root")]
    if two_levels:
        objects += [cohort("x", "root"), cohort("y", "root")]
    for i, name in enumerate(queues):
        parent = ("x" if i % 2 == 0 else "y") if two_levels else "root"
        objects.append(
            cluster_queue(name, draw(st.integers(0, 4)), cohort=parent, config=CONFIG if name == "a" else None)
        )
        objects += [local_queue(f"{name}-1", name), local_queue(f"{name}-2", name)]
    n = 0
    for name in queues:
        for _ in range(draw(st.integers(0, 5))):
            wl = admitted(
                f"w{n}",
                name,
                draw(st.integers(1, 3)),
                priority=draw(st.integers(0, 3)),
                at=T0 + timedelta(minutes=draw(st.integers(0, 3))),
                queue=f"{name}-{draw(st.integers(1, 2))}",
                uid=f"u{draw(st.integers(0, 99)):02d}-{n}",
            )
            if draw(st.integers(0, 9)) == 0:
                wl.evicted()
            objects.append(wl)
            n += 1
    fields = draw(st.permutations(FIELDS))[: draw(st.integers(1, len(FIELDS)))]
    ordering = [(f, draw(st.booleans())) for f in fields]
    objects.append(config([{"orderingField": f, "direction": "Descending" if d else "Ascending"} for f, d in ordering]))
    objects.append(incoming(draw(st.integers(1, 4)), queue="a-1"))
    taken = draw(st.lists(st.booleans(), min_size=1, max_size=4))
    before = draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=2)) if n else set()
    return objects, ordering, taken, {f"w{i}" for i in before}


@settings(
    max_examples=300, derandomize=True, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(ordered_clusters())
def test_property_incremental_order_equals_resorting_after_every_pick(
    case: tuple[list[Any], list[tuple[str, bool]], list[bool], set[str]],
) -> None:
    from preemption_operator.api.v1alpha1 import CandidateOrder

    objects, ordering, taken, before = case
    ctx, snapshot = context(objects, "default/incoming")
    candidates = [
        wl for name in sorted(snapshot.cluster_queues) for wl in snapshot.admitted(snapshot.cluster_queues[name])
    ]

    def take_before() -> None:
        for wl in candidates:
            if wl.name in before:
                snapshot.remove_workload(wl)

    spec = [CandidateOrder(ordering_field=f, direction="Descending" if d else "Ascending") for f, d in ordering]  # type: ignore[arg-type]
    take_before()
    got = []
    for step, wl in enumerate(ranked(ctx, candidates, spec)):
        got.append(wl.name)
        if taken[step % len(taken)] and not snapshot.is_removed(wl):
            snapshot.remove_workload(wl)
    for wl in candidates:
        if snapshot.is_removed(wl):
            snapshot.add_workload(wl)
    take_before()
    assert got == reference_order(ctx, candidates, ordering, taken)


# ------------------------------------------------------------------------------------------------
# The fifo-preemption example
# ------------------------------------------------------------------------------------------------


def _fifo_example(with_ordering: bool) -> list[Any]:
    from pathlib import Path

    import yaml

    folder = Path(__file__).resolve().parents[2] / "examples" / "fifo-preemption"
    docs = [doc for path in sorted(folder.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]
    if not with_ordering:
        for doc in docs:
            if doc["kind"] == "PreemptionConfig":
                del doc["spec"]["ordering"]
    return docs


def test_fifo_example_preempts_the_oldest_admission() -> None:
    assert victims(_fifo_example(True)) == ["first"]
    assert victims(_fifo_example(False)) == ["third"]  # the classic order: the newest goes
