"""Dominant Resource Share (`engine/fair_sharing.py`) and the fair-sharing switch.

The share cases are Kueue v0.19.2's `pkg/cache/scheduler/fair_sharing_test.go`, one test per
case, named after it (TestDominantResourceShare, TestIsBorrowingOn,
TestPreciseWeightedShareSerialized): the same queues, cohorts, usage and expected rounded share,
dominant resource and borrowing flag, for the cache's tree and for a snapshot of it. A Hypothesis
property checks that the share kept incrementally under random adds and removes equals the share
computed from scratch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import NOW, admitted, parse
from preemption_operator.api.v1beta2 import FairSharing as FairSharingSpec
from preemption_operator.engine import fair_sharing as fs
from preemption_operator.engine.cache import Cache
from preemption_operator.engine.quota import FlavorResource, QuotaNode

KUEUE = "kueue.x-k8s.io/v1beta2"
GPU = "example.com/gpu"
Obj = dict[str, Any]
# (resource, nominal, lending limit, borrowing limit), per flavor
Quotas = Mapping[str, list[tuple[str, str, str | None, str | None]]]


def _groups(quotas: Quotas) -> list[Obj]:
    """One resource group per flavor set, as Kueue's MakeFlavorQuotas lists them."""
    if not quotas:
        return []
    flavors = []
    for flavor, resources in quotas.items():
        entries = []
        for name, nominal, lending, borrowing in resources:
            entry: Obj = {"name": name, "nominalQuota": nominal}
            if lending is not None:
                entry["lendingLimit"] = lending
            if borrowing is not None:
                entry["borrowingLimit"] = borrowing
            entries.append(entry)
        flavors.append({"name": flavor, "resources": entries})
    return [{"coveredResources": [e["name"] for e in flavors[0]["resources"]], "flavors": flavors}]


def cq(name: str, quotas: Quotas, *, cohort: str | None = None, weight: str | None = None) -> Obj:
    spec: Obj = {"namespaceSelector": {}, "resourceGroups": _groups(quotas)}
    if cohort:
        spec["cohortName"] = cohort
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    return {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def co(name: str, quotas: Quotas | None = None, *, parent: str | None = None, weight: str | None = None) -> Obj:
    spec: Obj = {}
    if parent:
        spec["parentName"] = parent
    if quotas:
        spec["resourceGroups"] = _groups(quotas)
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    return {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def flavors() -> list[Obj]:
    return [
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": n}, "spec": {}}
        for n in ("default", "on-demand", "spot")
    ]


def shares(
    objects: list[Obj], usage: Mapping[FlavorResource, int], request: Mapping[FlavorResource, int] | None = None
) -> tuple[set[tuple[str, str, int, str, bool]], set[tuple[str, str, int, str, bool]]]:
    """(rounded share, dominant resource, borrowing) of every ClusterQueue and Cohort, with `usage`
    added to ClusterQueue `cq`: from the cache's tree and from a snapshot cut before the usage
    came (the snapshot adds it to its own copy, as Kueue's test does)."""
    cache = Cache(fs.FairSharing(enabled=True))
    cache.load(parse([*flavors(), *objects]))
    snapshot = cache.snapshot(NOW)
    own = snapshot.cluster_queues["cq"].node  # cloned now (copy-on-read), before the cache changes
    for fr, value in usage.items():
        cache.tree().cluster_queues["cq"].node.add_usage(fr, value)
        own.add_usage(fr, value)

    def row(kind: str, node: QuotaNode) -> tuple[str, str, int, str, bool]:
        drs = fs.dominant_resource_share(node, request)
        return (kind, node.name, drs.rounded, drs.dominant_resource, drs.borrowing)

    tree = cache.tree()
    from_cache = {row("cq", c.node) for c in tree.cluster_queues.values()} | {
        row("cohort", n) for n in tree.cohorts.values()
    }
    from_snapshot = {row("cq", c.node) for c in snapshot.cluster_queues.values()} | {
        row("cohort", n) for n in snapshot.cohorts.values()
    }
    return from_cache, from_snapshot


def check(
    objects: list[Obj],
    usage: Mapping[FlavorResource, int],
    want: set[tuple[str, str, int, str, bool]],
    request: Mapping[FlavorResource, int] | None = None,
) -> None:
    from_cache, from_snapshot = shares(objects, usage, request)
    assert from_cache == want
    assert from_snapshot == want


def not_borrowing(*names: tuple[str, str]) -> set[tuple[str, str, int, str, bool]]:
    return {(kind, name, 0, "", False) for kind, name in names}


CPU_GPU = {"default": [("cpu", "2", None, None), (GPU, "5", None, None)]}
LENDER_CPU_GPU = {"default": [("cpu", "8", None, None), (GPU, "5", None, None)]}
LENDING_PAIR = [
    cq("cq", CPU_GPU, cohort="test-cohort", weight="1"),
    cq("lending-cq", LENDER_CPU_GPU, cohort="test-cohort", weight="1"),
]
IDLE = not_borrowing(("cq", "lending-cq"), ("cohort", "test-cohort"))
D_CPU = ("default", "cpu")
D_GPU = ("default", GPU)


# -- TestDominantResourceShare (fair_sharing_test.go), case by case --------------------------------------


def test_drs_no_cohort() -> None:
    """Case "no cohort": a root ClusterQueue has no share."""
    objects = [cq("cq", {"default": [("cpu", "2000", None, None), (GPU, "5", None, None)]})]
    check(objects, {D_CPU: 1_000, D_GPU: 2}, not_borrowing(("cq", "cq")))


def test_drs_usage_below_nominal() -> None:
    """Case "usage below nominal"."""
    check(LENDING_PAIR, {D_CPU: 1_000, D_GPU: 2}, not_borrowing(("cq", "cq")) | IDLE)


def test_drs_usage_above_nominal() -> None:
    """Case "usage above nominal": gpu (7-5)*1000/10 = 200 beats cpu (3-2)*1000/10 = 100."""
    check(LENDING_PAIR, {D_CPU: 3_000, D_GPU: 7}, {("cq", "cq", 200, GPU, True)} | IDLE)


def test_drs_slightly_above_nominal_with_large_quotas() -> None:
    """Case "usage slightly above nominal in a cohort with large quotas": 1000/1500 rounds up to 1."""
    objects = [
        cq("cq", {"default": [(GPU, "500", None, None)]}, cohort="test-cohort", weight="1"),
        cq("lending-cq", {"default": [(GPU, "1000", None, None)]}, cohort="test-cohort", weight="300"),
    ]
    check(objects, {D_GPU: 501}, {("cq", "cq", 1, GPU, True)} | IDLE)


def test_drs_way_above_nominal_with_large_quotas_and_weights() -> None:
    """Case "usage way above nominal in a cohort with large quotas and weights": 200/300 -> 1."""
    objects = [
        cq("cq", {"default": [(GPU, "500", None, None)]}, cohort="test-cohort", weight="300"),
        cq("lending-cq", {"default": [(GPU, "1000", None, None)]}, cohort="test-cohort", weight="300"),
    ]
    check(objects, {D_GPU: 800}, {("cq", "cq", 1, GPU, True)} | IDLE)


def test_drs_one_resource_above_nominal() -> None:
    """Case "one resource above nominal": (3-2)*1000/10."""
    check(LENDING_PAIR, {D_CPU: 3_000, D_GPU: 3}, {("cq", "cq", 100, "cpu", True)} | IDLE)


def test_drs_usage_with_workload_above_nominal() -> None:
    """Case "usage with workload above nominal": the request counts, (1+4-2)*1000/10 = 300."""
    check(
        LENDING_PAIR,
        {D_CPU: 1_000, D_GPU: 2},
        {("cq", "cq", 300, "cpu", True)} | IDLE,
        request={D_CPU: 4_000, D_GPU: 4},
    )


def test_drs_resource_with_zero_lendable() -> None:
    """Case "A resource with zero lendable": gpu is borrowed but nothing of it is lendable, so cpu dominates."""
    objects = [
        cq("cq", {"default": [("cpu", "2", None, None), (GPU, "2", "0", None)]}, cohort="test-cohort", weight="1"),
        cq(
            "lending-cq",
            {"default": [("cpu", "8", None, None), (GPU, "64", "0", None)]},
            cohort="test-cohort",
            weight="1",
        ),
    ]
    check(
        objects,
        {D_CPU: 1_000, D_GPU: 1},
        {("cq", "cq", 300, "cpu", True)} | IDLE,
        request={D_CPU: 4_000, D_GPU: 4},
    )


def test_drs_multiple_flavors() -> None:
    """Case "multiple flavors": borrowed cpu summed over flavors (spot is under nominal), lendable
    over every flavor of the tree: ((15+10-20)+0)*1000/200 = 25."""
    objects = [
        cq(
            "cq",
            {"on-demand": [("cpu", "20", None, None)], "spot": [("cpu", "80", None, None)]},
            cohort="test-cohort",
            weight="1",
        ),
        cq("lending-cq", {"default": [("cpu", "100", None, None)]}, cohort="test-cohort", weight="1"),
    ]
    check(
        objects,
        {("on-demand", "cpu"): 15_000, ("spot", "cpu"): 5_000},
        {("cq", "cq", 25, "cpu", True)} | IDLE,
        request={("on-demand", "cpu"): 10_000},
    )


def _gpu_pair(weight: str, lender_nominal: str = "5") -> list[Obj]:
    return [
        cq("cq", {"default": [(GPU, "5", None, None)]}, cohort="test-cohort", weight=weight),
        cq("lending-cq", {"default": [(GPU, lender_nominal, None, None)]}, cohort="test-cohort", weight="1"),
    ]


def test_drs_above_nominal_with_integer_weight() -> None:
    """Case "above nominal with integer weight": ((7-5)*1000/10)/2."""
    check(_gpu_pair("2"), {D_GPU: 7}, {("cq", "cq", 100, GPU, True)} | IDLE)


def test_drs_above_nominal_with_decimal_weight() -> None:
    """Case "above nominal with decimal weight": ((7-5)*1000/10)/0.5."""
    check(_gpu_pair("0.5"), {D_GPU: 7}, {("cq", "cq", 400, GPU, True)} | IDLE)


def test_drs_above_nominal_with_zero_weight() -> None:
    """Case "above nominal with zero weight": a zero weight that borrows has the largest share."""
    check(_gpu_pair("0", "10"), {D_GPU: 7}, {("cq", "cq", fs.INT64_MAX, GPU, True)} | IDLE)


def test_drs_cohort_has_resource_share() -> None:
    """Case "cohort has resource share": each node's share within its parent; the cohort's weight 2 halves its own."""
    objects = [
        cq("cq", {"default": [(GPU, "5", None, None)]}, cohort="child-cohort", weight="1"),
        co("child-cohort", parent="root", weight="2"),
        co("root", {"default": [(GPU, "45", None, None)]}),
    ]
    want = {
        ("cq", "cq", 100, GPU, True),  # 5 borrowed of 50 lendable
        ("cohort", "child-cohort", 50, GPU, True),  # the same 5 of 50, weight 2
        ("cohort", "root", 0, "", False),
    }
    check(objects, {D_GPU: 10}, want)


def test_drs_resources_only_available_at_the_root() -> None:
    """Case "resource share defined for resources only available at the root cohort"."""
    objects = [
        cq("cq", {"default": [(GPU, "0", None, None)]}, cohort="child-cohort", weight="1"),
        co("child-cohort", parent="root", weight="2"),
        co("root", {"default": [(GPU, "50", None, None)]}),
    ]
    want = {("cq", "cq", 200, GPU, True), ("cohort", "child-cohort", 100, GPU, True), ("cohort", "root", 0, "", False)}
    check(objects, {D_GPU: 10}, want)


def test_drs_affected_by_borrowing_limit() -> None:
    """Case "resource share affected by borrowing limit": lendable is seen from the parent, so the
    ClusterQueue sees 10 (its cohort's borrowing limit) and the cohort 50."""
    objects = [
        cq("cq", {"default": [(GPU, "0", None, None)]}, cohort="child-cohort"),
        co("child-cohort", {"default": [(GPU, "0", None, "10")]}, parent="root"),
        co("root", {"default": [(GPU, "50", None, None)]}),
    ]
    want = {("cq", "cq", 1000, GPU, True), ("cohort", "child-cohort", 200, GPU, True), ("cohort", "root", 0, "", False)}
    check(objects, {D_GPU: 10}, want)


def test_drs_against_a_huge_lendable_rounds_up_to_one() -> None:
    """Case "borrowing against unlimited lendable capacity (exabyte-scale quota)", adapted: our API
    refuses quotas beyond int64 (Kueue saturates them), so the lender holds the largest cpu quota
    we accept. A tiny positive ratio still rounds up to 1."""
    objects = [
        cq("cq", {"default": [("cpu", "0", None, None)]}, cohort="test-cohort", weight="1"),
        cq("lending-cq", {"default": [("cpu", "9223372036854775807m", None, None)]}, cohort="test-cohort", weight="1"),
    ]
    check(objects, {D_CPU: 1_000}, {("cq", "cq", 1, "cpu", True)} | IDLE)


# -- TestIsBorrowingOn ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "requested", "on_requested", "borrowing"),
    [
        pytest.param({D_CPU: 3_000}, {D_CPU: 1_000}, True, True, id="borrows on requested flavor"),
        pytest.param({D_CPU: 1_000, D_GPU: 7}, {D_CPU: 1_000}, False, True, id="borrows on unrequested flavor only"),
        pytest.param({D_CPU: 3_000, D_GPU: 7}, {D_GPU: 1}, True, True, id="borrows on both, requests one"),
        pytest.param({D_CPU: 1_000, D_GPU: 2}, {D_CPU: 1_000}, False, False, id="no borrowing"),
        pytest.param({D_CPU: 3_000}, None, False, True, id="nil requestedFRs"),
    ],
)
def test_is_borrowing_on(
    usage: dict[FlavorResource, int], requested: dict[FlavorResource, int] | None, on_requested: bool, borrowing: bool
) -> None:
    """TestIsBorrowingOn: borrowing at all vs. borrowing on what a workload asks for."""
    objects = [
        cq("cq", CPU_GPU, cohort="cohort", weight="1"),
        cq("lending-cq", LENDER_CPU_GPU, cohort="cohort"),
    ]
    cache = Cache(fs.FairSharing(enabled=True))
    cache.load(parse([*flavors(), *objects]))
    node = cache.snapshot(NOW).cluster_queues["cq"].node
    node.add(usage)
    assert fs.dominant_resource_share(node).borrowing is borrowing
    assert fs.is_borrowing_on(node, requested) is on_requested


# -- TestPreciseWeightedShareSerialized ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("drs", "text"),
    [
        pytest.param(fs.DRS(weight=0, unweighted_ratio=100), "+Inf", id="zero weight returning Inf"),
        pytest.param(fs.DRS(weight=1, unweighted_ratio=0), "0", id="zero unweighted ratio returns 0"),
        pytest.param(fs.DRS(weight=2, unweighted_ratio=400), "200", id="regular integer division"),
        pytest.param(fs.DRS(weight=4, unweighted_ratio=10), "2.5", id="decimal division"),
    ],
)
def test_precise_weighted_share_serialized(drs: fs.DRS, text: str) -> None:
    assert fs.serialized(drs.precise) == text


def test_serialized_never_uses_an_exponent() -> None:
    assert fs.serialized(1e-13) == "0.0000000000001"
    assert fs.serialized(1e22) == "10000000000000000000000"


# -- comparison and status rounding (fair_sharing.go CompareDRS, controller/core/helpers.go) ----------


def test_compare_orders_zero_weight_borrowers_last() -> None:
    small, big = fs.DRS(unweighted_ratio=10), fs.DRS(unweighted_ratio=20)
    zero_a, zero_b = fs.DRS(weight=0, unweighted_ratio=5), fs.DRS(weight=0, unweighted_ratio=7)
    assert fs.compare(small, big) == -1
    assert fs.compare(big, small) == 1
    assert fs.compare(small, fs.DRS(unweighted_ratio=10)) == 0
    assert fs.compare(zero_a, big) == 1
    assert fs.compare(big, zero_a) == -1
    assert fs.compare(zero_a, zero_b) == -1
    # A zero weight that borrows nothing has no share at all.
    assert fs.compare(fs.DRS(weight=0), small) == -1
    assert fs.compare(fs.negative_drs(), fs.NO_SHARE) == -1


def test_status_share_rounds_up_and_caps_infinity() -> None:
    assert fs.weighted_share_status(0.0) == 0
    assert fs.weighted_share_status(0.2) == 1
    assert fs.weighted_share_status(200.0) == 200
    assert fs.weighted_share_status(math.inf) == fs.INT64_MAX


def test_tie_between_resources_takes_the_first_alphabetically() -> None:
    objects = [
        cq("cq", {"default": [("cpu", "1", None, None), ("memory", "1", None, None)]}, cohort="c"),
        cq("lender", {"default": [("cpu", "1", None, None), ("memory", "1", None, None)]}, cohort="c"),
    ]
    from_cache, _ = shares(objects, {D_CPU: 2_000, ("default", "memory"): 2})
    assert ("cq", "cq", 500, "cpu", True) in from_cache


# -- incremental == from scratch ------------------------------------------------------------------------

_TREE = [
    co("root", {"default": [("cpu", "4", None, None), (GPU, "2", None, None)]}),
    co("left", {"default": [("cpu", "1", "1", "3"), (GPU, "0", None, None)]}, parent="root", weight="2"),
    co("right", parent="root", weight="0.5"),
    cq("a", {"default": [("cpu", "2", "1", None), (GPU, "1", None, "1")]}, cohort="left"),
    cq("b", {"default": [("cpu", "3", None, "2"), (GPU, "1", "0", None)]}, cohort="left", weight="0"),
    cq(
        "c",
        {
            "default": [("cpu", "1", None, None), (GPU, "2", None, None)],
            "spot": [("cpu", "5", "2", None), (GPU, "0", None, None)],
        },
        cohort="right",
    ),
    cq("d", {"default": [("cpu", "0", None, None), (GPU, "0", None, None)]}, cohort="right", weight="3"),
]
_FRS = [("default", "cpu"), ("default", GPU), ("spot", "cpu"), ("spot", GPU)]
_ops = st.lists(
    st.tuples(st.sampled_from("abcd"), st.sampled_from(_FRS), st.integers(0, 6_000), st.booleans()), max_size=30
)


def _scratch(node: QuotaNode) -> fs.DRS:
    twin = QuotaNode(node.name, node.is_cluster_queue, parent=node.parent, fair_weight=node.fair_weight)
    twin.subtree_quota, twin.usage, twin.static = node.subtree_quota, node.usage, node.static
    return fs.dominant_resource_share(twin)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(_ops, st.booleans())
def test_incremental_share_equals_share_from_scratch(
    ops: list[tuple[str, FlavorResource, int, bool]], in_cache: bool
) -> None:
    """After any sequence of adds and removes (removes only of what was added, as workloads
    leave), every node's tracked borrowed amounts and share equal those computed from its usage."""
    cache = Cache(fs.FairSharing(enabled=True))
    cache.load(parse([*flavors(), *_TREE]))
    snapshot = cache.snapshot(NOW)
    queues = {n: c.node for n, c in (cache.tree().cluster_queues if in_cache else snapshot.cluster_queues).items()}
    cohorts = cache.tree().cohorts if in_cache else snapshot.cohorts
    held: list[tuple[str, FlavorResource, int]] = []
    for name, fr, value, add in ops:
        if add or not held:
            queues[name].add_usage(fr, value)
            held.append((name, fr, value))
        else:
            gone = held.pop(value % len(held))
            queues[gone[0]].remove_usage(gone[1], gone[2])
    for node in [*queues.values(), *cohorts.values()]:
        assert {r: v for r, v in (node.borrowed or {}).items() if v} == node.borrowed_from_scratch()
        assert fs.dominant_resource_share(node) == _scratch(node)


def test_snapshot_changes_leave_the_cache_share_alone() -> None:
    cache = Cache(fs.FairSharing(enabled=True))
    cache.load(parse([*flavors(), *LENDING_PAIR]))
    snapshot = cache.snapshot(NOW)
    snapshot.cluster_queues["cq"].node.add_usage(D_CPU, 5_000)
    assert fs.dominant_resource_share(snapshot.cluster_queues["cq"].node).rounded == 300
    assert fs.dominant_resource_share(cache.tree().cluster_queues["cq"].node) == fs.DRS()


def test_workloads_move_the_share_through_the_cache() -> None:
    objects = [*flavors(), *LENDING_PAIR, admitted("w1", "cq", cpu=3), admitted("w2", "cq", cpu=2)]
    cache = Cache(fs.FairSharing(enabled=True))
    cache.load(parse(objects))
    node = cache.tree().cluster_queues["cq"].node
    assert fs.dominant_resource_share(node).rounded == 300  # (5-2)*1000/10
    cache.delete("Workload", "default/w2")
    assert fs.dominant_resource_share(node).rounded == 100


def test_classic_cache_does_not_track_borrowing() -> None:
    cache = Cache()
    cache.load(parse([*flavors(), *LENDING_PAIR, admitted("w1", "cq", cpu=3)]))
    assert all(c.node.borrowed is None for c in cache.tree().cluster_queues.values())
    assert cache.snapshot(NOW).fair_sharing == fs.OFF


# -- configuration -------------------------------------------------------------------------------------


def test_strategies_default_and_valid_lists() -> None:
    assert fs.FairSharing(enabled=True).strategies == ("LessThanOrEqualToFinalShare", "LessThanInitialShare")
    assert fs.parse_strategies("LessThanInitialShare") == ("LessThanInitialShare",)
    assert fs.parse_strategies(" LessThanOrEqualToFinalShare , LessThanInitialShare ") == fs.DEFAULT_STRATEGIES


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("LessThanFinalShare", "unknown strategy 'LessThanFinalShare'"),
        ("LessThanInitialShare,LessThanOrEqualToFinalShare", "is not a supported list"),
        ("", "(none) is not a supported list"),
    ],
)
def test_bad_strategies(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        fs.parse_strategies(text)


def test_weight_parsing_and_validation() -> None:
    assert fs.parse_weight(None) == 1.0
    assert fs.parse_weight("0.5") == 0.5
    assert fs.parse_weight("300") == 300.0
    assert fs.parse_weight(0) == 0.0
    assert FairSharingSpec.model_validate({}).weight is None
    assert FairSharingSpec.model_validate({"weight": "2n"}).weight == "2n"
    with pytest.raises(ValueError, match="must be more than 1n"):
        FairSharingSpec.model_validate({"weight": "1n"})
    with pytest.raises(ValueError, match="negative"):
        FairSharingSpec.model_validate({"weight": "-1"})
