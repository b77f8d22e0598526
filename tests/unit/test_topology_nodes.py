"""Which nodes topology-aware placement uses, as Kueue v0.19.2's TAS: only schedulable nodes whose
Ready condition is True; with `kubernetes.io/hostname` as the lowest level, not a node with a
NoSchedule or NoExecute taint that neither the pod set nor the flavor tolerates, nor one its node
selector or required node affinity does not match; every pod takes one of a node's `pods`. Kueue's
failure message counts the nodes left out and why.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from builders import (
    RACK,
    TAS_FLAVOR,
    TOPOLOGY,
    Obj,
    basics,
    cache_of,
    cluster_queue,
    local_queue,
    node,
    parse,
    resource_flavor,
    topology,
    view,
    workload,
)
from preemption_operator.engine.placement import (
    NodeFilter,
    NodeRecord,
    NodeUsage,
    Placement,
    TopologyRequest,
    affinity_matches,
    find,
    node_capacity,
    place,
    untolerated_taint,
)
from preemption_operator.engine.scheduler import QueueState, Scheduler
from preemption_operator.engine.tas_state import TasState
from preemption_operator.engine.topology_assignment import HOSTNAME

CPU = 1000
POD = {"cpu": CPU}
NOW = datetime(2026, 11, 30, tzinfo=UTC)
GPU_TAINT = {"key": "example.com/gpu", "value": "present", "effect": "NoSchedule"}


def build(objects: list[Obj]) -> TasState:
    parsed = parse(objects)
    return TasState.build(
        {o.name: o for o in parsed if o.kind == "Node"},
        {o.name: o for o in parsed if o.kind == "Topology"},
        {o.name: o for o in parsed if o.kind == "ResourceFlavor"},
    )


# ------------------------------------------------------------------------------------------------
# Ready and schedulable
# ------------------------------------------------------------------------------------------------


def test_a_node_that_is_not_ready_takes_no_pods() -> None:
    state = build(
        [
            topology(HOSTNAME),
            resource_flavor(TAS_FLAVOR, topology=TOPOLOGY),
            node("ready", cpu=8),
            node("not-ready", cpu=2, ready=False),
            node("cordoned", cpu=2, unschedulable=True),
        ]
    )
    assert [n.name for n in state.views[TAS_FLAVOR].nodes] == ["ready"]


def test_a_node_without_a_ready_condition_takes_no_pods() -> None:
    body = node("silent", cpu=8)
    body["status"].pop("conditions")
    unknown = node("unknown", cpu=8)
    unknown["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    state = build([topology(HOSTNAME), resource_flavor(TAS_FLAVOR, topology=TOPOLOGY), body, unknown])
    assert state.views[TAS_FLAVOR].nodes == ()


def test_a_node_turning_ready_or_not_rebuilds_the_views_and_heartbeats_do_not() -> None:
    objects: list[Obj] = [*basics(levels=[HOSTNAME]), node("a", cpu=4), node("b", cpu=4)]
    cache = cache_of(objects)
    state = cache.tas()
    beat = node("a", cpu=4)
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-11-30T00:00:10Z"
    cache.upsert(parse([beat])[0])
    assert cache.tas() is state
    cache.upsert(parse([node("a", cpu=4, ready=False)])[0])
    assert [n.name for n in cache.tas().views[TAS_FLAVOR].nodes] == ["b"]
    cache.upsert(parse([node("a", cpu=4)])[0])
    assert [n.name for n in cache.tas().views[TAS_FLAVOR].nodes] == ["a", "b"]


def test_a_taint_change_applies_in_place() -> None:
    cache = cache_of([*basics(levels=[HOSTNAME]), node("a", cpu=4)])
    state = cache.tas()
    cache.upsert(parse([node("a", cpu=4, taints=[GPU_TAINT])])[0])
    assert cache.tas() is state
    [record] = state.views[TAS_FLAVOR].nodes
    assert record.taints == (GPU_TAINT,)
    assert place(state.views[TAS_FLAVOR], state.usage, POD, 1) is None


# ------------------------------------------------------------------------------------------------
# Taints and tolerations
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "example.com/gpu", "operator": "Exists"}, True),
        ({"key": "example.com/gpu", "value": "present"}, True),  # operator Equal by default
        ({"key": "example.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}, True),
        ({"key": "example.com/gpu", "operator": "Equal", "value": "absent"}, False),
        ({"key": "example.com/gpu", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"operator": "Exists"}, True),  # no key: every taint
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_tolerations_as_kubernetes_matches_them(toleration: dict[str, str], tolerated: bool) -> None:
    assert (untolerated_taint([GPU_TAINT], [toleration]) is None) is tolerated


@pytest.mark.parametrize(
    ("operator", "value", "tolerated"),
    [("Gt", "3", True), ("Gt", "5", False), ("Lt", "5", True), ("Lt", "4", False), ("Gt", "03", False)],
)
def test_numeric_tolerations(operator: str, value: str, tolerated: bool) -> None:
    taint = {"key": "example.com/tier", "value": "4", "effect": "NoSchedule"}
    toleration = {"key": "example.com/tier", "operator": operator, "value": value}
    assert (untolerated_taint([taint], [toleration]) is None) is tolerated


def test_only_noschedule_and_noexecute_taints_keep_pods_away() -> None:
    soft = {"key": "k", "value": "v", "effect": "PreferNoSchedule"}
    hard = {"key": "k", "effect": "NoExecute"}
    assert untolerated_taint([soft], []) is None
    assert untolerated_taint([soft, hard], []) == "k:NoExecute"
    assert untolerated_taint([GPU_TAINT], []) == "example.com/gpu=present:NoSchedule"


def tainted_view(levels: tuple[str, ...] = (RACK, HOSTNAME)) -> Any:
    return view(
        levels,
        [
            NodeRecord("gpu", {HOSTNAME: "gpu", RACK: "r1"}, {"cpu": 4 * CPU}, (GPU_TAINT,)),
            NodeRecord("plain", {HOSTNAME: "plain", RACK: "r2"}, {"cpu": 1 * CPU}),
        ],
    )


def test_an_untolerated_taint_keeps_the_node_out_and_kueues_message_says_so() -> None:
    v = tainted_view()
    assert place(v, None, POD, 1) == Placement(v, (("plain", 1),))
    assert find(v, None, POD, 2, TopologyRequest(required=RACK)) == (
        'topology "tas-topology" allows to fit only 1 out of 2 pod(s). '
        'Total nodes: 2; excluded: taint "example.com/gpu=present:NoSchedule": 1'
    )
    tolerated = NodeFilter(tolerations=({"key": "example.com/gpu", "operator": "Exists"},))
    assert place(v, None, POD, 2, TopologyRequest(required=RACK), node_filter=tolerated) == Placement(v, (("gpu", 2),))


def test_taints_and_selectors_are_not_checked_without_the_hostname_level() -> None:
    """Kueue's leaves are then whole domains, and it filters none of their nodes."""
    v = tainted_view((RACK,))
    selector = NodeFilter(node_selector={RACK: "r2"})
    assert place(v, None, POD, 3, TopologyRequest(required=RACK), node_filter=selector) == Placement(v, (("gpu", 3),))


def test_the_flavors_tolerations_count_with_the_pod_sets() -> None:
    def cluster(flavor_tolerations: list[dict[str, str]]) -> list[Obj]:
        flavor = resource_flavor(TAS_FLAVOR, topology=TOPOLOGY)
        if flavor_tolerations:
            flavor["spec"]["tolerations"] = flavor_tolerations
        return [
            topology(RACK, HOSTNAME),
            flavor,
            cluster_queue("a", 100, flavor=TAS_FLAVOR),
            local_queue("main", "a"),
            node("gpu", {RACK: "r1"}, cpu=4, taints=[GPU_TAINT]),
            workload("w", queue="main", count=2, required=RACK),
        ]

    pending = Scheduler().cycle(cache_of(cluster([])).snapshot(NOW), QueueState())
    assert [p.message for p in pending.pending] == [
        "couldn't assign flavors to pod set main: topology \"tas-topology\" doesn't allow to fit any of 2 pod(s). "
        'Total nodes: 1; excluded: taint "example.com/gpu=present:NoSchedule": 1'
    ]
    admitted = Scheduler().cycle(
        cache_of(cluster([{"key": "example.com/gpu", "operator": "Exists"}])).snapshot(NOW), QueueState()
    )
    assert [a.workload.name for a in admitted.admitted] == ["w"]


def test_the_pod_sets_own_tolerations_reach_placement() -> None:
    objects = [
        *basics(levels=[RACK, HOSTNAME]),
        cluster_queue("a", 100, flavor=TAS_FLAVOR),
        local_queue("main", "a"),
        node("gpu", {RACK: "r1"}, cpu=4, taints=[GPU_TAINT]),
        workload(
            "w", queue="main", count=2, required=RACK, tolerations=[{"key": "example.com/gpu", "operator": "Exists"}]
        ),
    ]
    result = Scheduler().cycle(cache_of(objects).snapshot(NOW), QueueState())
    assert [a.workload.name for a in result.admitted] == ["w"]


# ------------------------------------------------------------------------------------------------
# Node selector and required node affinity
# ------------------------------------------------------------------------------------------------


def record(name: str, **labels: str) -> NodeRecord:
    return NodeRecord(name, {HOSTNAME: name, **labels}, {"cpu": 4 * CPU})


@pytest.mark.parametrize(
    ("expression", "matches"),
    [
        ({"key": "zone", "operator": "In", "values": ["a", "b"]}, True),
        ({"key": "zone", "operator": "In", "values": ["b"]}, False),
        ({"key": "zone", "operator": "NotIn", "values": ["b"]}, True),
        ({"key": "missing", "operator": "NotIn", "values": ["b"]}, True),
        ({"key": "zone", "operator": "Exists"}, True),
        ({"key": "zone", "operator": "DoesNotExist"}, False),
        ({"key": "missing", "operator": "DoesNotExist"}, True),
        ({"key": "gpus", "operator": "Gt", "values": ["3"]}, True),
        ({"key": "gpus", "operator": "Lt", "values": ["3"]}, False),
        ({"key": "zone", "operator": "Gt", "values": ["3"]}, False),  # not a number
        ({"key": "zone", "operator": "Bogus", "values": ["a"]}, False),
    ],
)
def test_node_affinity_expressions(expression: dict[str, Any], matches: bool) -> None:
    assert affinity_matches([{"matchExpressions": [expression]}], record("n", zone="a", gpus="8")) is matches


def test_node_affinity_terms_are_alternatives_and_fields_name_the_node() -> None:
    n = record("n1", zone="a")
    other_zone = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    assert affinity_matches([other_zone, by_name], n)
    assert not affinity_matches([other_zone], n)
    assert not affinity_matches([{}], n)  # an empty term matches no node
    assert not affinity_matches([], n)


def test_affinity_and_selector_exclusions_in_kueues_message() -> None:
    v = view((HOSTNAME,), [record("a", zone="a"), record("b", zone="b"), record("c", zone="c")])
    zone_a = ({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},)
    assert place(v, None, POD, 4, node_filter=NodeFilter(affinity=zone_a)) == Placement(v, (("a", 4),))
    assert find(v, None, POD, 5, node_filter=NodeFilter(affinity=zone_a)) == (
        'topology "tas-topology" allows to fit only 4 out of 5 pod(s). Total nodes: 3; excluded: affinity: 2'
    )
    both = NodeFilter(node_selector={"zone": "b"}, affinity=zone_a)
    assert find(v, None, POD, 1, node_filter=both) == (
        'topology "tas-topology" doesn\'t allow to fit any of 1 pod(s). '
        "Total nodes: 3; excluded: affinity: 1, nodeSelector: 2"
    )


def test_the_pod_sets_required_affinity_reaches_placement() -> None:
    objects = [
        *basics(levels=[HOSTNAME]),
        cluster_queue("a", 100, flavor=TAS_FLAVOR),
        local_queue("main", "a"),
        node("a", cpu=4, labels={"zone": "a"}),
        node("b", cpu=1, labels={"zone": "b"}),
        workload(
            "w",
            queue="main",
            count=2,
            required=HOSTNAME,
            affinity=[{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}],
        ),
    ]
    result = Scheduler().cycle(cache_of(objects).snapshot(NOW), QueueState())
    [pending] = result.pending
    assert pending.message == (
        'couldn\'t assign flavors to pod set main: topology "tas-topology" allows to fit only 1 out of 2 pod(s). '
        "Total nodes: 2; excluded: affinity: 1"
    )


# ------------------------------------------------------------------------------------------------
# A node's pods
# ------------------------------------------------------------------------------------------------


def test_every_pod_takes_one_of_the_nodes_pods() -> None:
    small = NodeRecord("small", {HOSTNAME: "small"}, {"cpu": 64 * CPU, "pods": 3})
    assert node_capacity(small, {}, POD) == 3
    assert node_capacity(small, {"pods": 2}, POD) == 1
    v = view((HOSTNAME,), [small])
    placement = place(v, NodeUsage({"small": {"pods": 1}}), POD, 2)
    assert placement == Placement(v, (("small", 2),))
    assert placement.usage(POD) == {"small": {"cpu": 2 * CPU, "pods": 2}}
    assert find(v, NodeUsage({"small": {"pods": 3}}), POD, 1) == (
        'topology "tas-topology" doesn\'t allow to fit any of 1 pod(s). Total nodes: 1; excluded: resource "pods": 1'
    )
