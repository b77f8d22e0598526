"""Topology-aware scheduling (TAS): placement (`engine/topology.py`), the node state built from Nodes
(`engine/tas.py`), the reference's TAS acceptance cases (§9 A25-A28, A31) through one engine cycle
and through `preemption-operator simulate --output json`, the topology-defragmentation example, and
properties over random placements and random small TAS clusters.

Amounts inside the engine are milli-cpu; wire objects use Kubernetes quantities.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from builders import (
    BLOCK,
    RACK,
    SUBRACK,
    T0,
    TAS_FLAVOR,
    TOPOLOGY,
    Obj,
    WorkloadBuilder,
    as_dict,
    basics,
    cache_of,
    cluster_queue,
    local_queue,
    node,
    node_record,
    parse,
    preemption_config,
    resource_flavor,
    rule,
    selector,
    topology,
    view,
    workload,
)
from preemption_operator.cli import cli
from preemption_operator.engine import workload_status as wl_status
from preemption_operator.engine.candidates import Candidate, Context
from preemption_operator.engine.configurable import ConfigurablePreemption
from preemption_operator.engine.flavors import assign_flavors
from preemption_operator.engine.placement import (
    CapacityMemo,
    NodeUsage,
    Placement,
    TopologyRequest,
    fit_message,
    node_capacity,
    place,
)
from preemption_operator.engine.scheduler import CycleResult, QueueState, Scheduler
from preemption_operator.engine.tas_state import TasState
from preemption_operator.engine.topology_assignment import (
    HOSTNAME,
    MAX_DOMAINS_PER_SLICE,
    MAX_SLICES,
    _hostname_prefix_keys,
    _level_values,
    _slice,
    decode_assignment,
    encode_assignment,
)
from preemption_operator.offline import simulate as simulation

NOW = "2026-11-30T00:00:00Z"
NOW_DT = datetime(2026, 11, 30, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[2]
CONFIG = "default-config"
CONFIGURABLE = "ConfigurablePreemption"
QFIT = "QuotaFeasibleAndInsufficientTopology"
TOPOLOGY_NAME = "tas-topology"


# ------------------------------------------------------------------------------------------------
# Runners
# ------------------------------------------------------------------------------------------------


def engine_cycle(objects: list[Obj]) -> CycleResult:
    """One scheduling cycle: Cache -> snapshot -> Scheduler with the configurable candidate stream."""
    snapshot = cache_of(objects).snapshot(NOW_DT)
    configurable = ConfigurablePreemption()
    configurable.begin_cycle(snapshot)
    return Scheduler(extra=configurable.candidates).cycle(snapshot, QueueState())


def simulate_json(objects: list[Obj], folder: Path, max_cycles: int | None = None) -> dict[str, Any]:
    """`preemption-operator simulate <file> --output json --now NOW` through click's CliRunner."""
    path = folder / "objects.yaml"
    path.write_text(yaml.safe_dump_all([as_dict(o) for o in objects], sort_keys=False))
    args = ["simulate", str(path), "--output", "json", "--now", NOW]
    if max_cycles is not None:
        args += ["--max-cycles", str(max_cycles)]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    if max_cycles is None:
        assert not any("max-cycles" in w for w in data["warnings"]), data["warnings"]
    return data


def simulate_run(objects: list[Obj]) -> dict[str, Any]:
    """`simulate.run` (what the CLI runs, without the YAML round trip), as its JSON document."""
    sim = simulation.run(parse(objects), NOW_DT)
    data: dict[str, Any] = json.loads(json.dumps(sim.to_dict()))
    return data


def statuses(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {wl["name"]: wl["status"] for wl in data["workloads"]}


def preempted(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [a for a in data["actions"] if a["action"] == "Preempted"]


def admitted_actions(data: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    return [a for a in data["actions"] if a["action"] == "Admitted" and a["workload"].endswith(f"/{name}")]


def topology_assignment(status: Mapping[str, Any]) -> dict[str, Any]:
    assignment: dict[str, Any] = status["admission"]["podSetAssignments"][0]["topologyAssignment"]
    return assignment


def is_admitted(status: Mapping[str, Any]) -> bool:
    condition = wl_status.get_condition(dict(status), "Admitted")
    return condition is not None and condition["status"] == "True"


def pods_per_node(assignment: Mapping[str, Any]) -> dict[str, int]:
    """A hostname-level assignment as {node: pods}."""
    out: dict[str, int] = {}
    for values, pods in decode_assignment(assignment):
        out[values[HOSTNAME]] = out.get(values[HOSTNAME], 0) + pods
    return out


def rule_message(preemptor: str, rules: str, config: str = CONFIG) -> str:
    return f"Preempted by {preemptor} because of preemption config {config} rule {rules}"


def assert_victim_status(status: Mapping[str, Any], message: str, config: str = CONFIG) -> None:
    """A configurable victim's conditions right after the eviction (or, once re-admitted, with the
    `Previously:` text), and its eviction count."""
    evicted = wl_status.get_condition(dict(status), "Evicted")
    preempted_c = wl_status.get_condition(dict(status), "Preempted")
    assert evicted is not None and preempted_c is not None
    if evicted["status"] == "True":
        assert (evicted["reason"], evicted["message"]) == ("Preempted", message)
        assert (preempted_c["status"], preempted_c["reason"], preempted_c["message"]) == ("True", CONFIGURABLE, message)
    else:  # re-admitted since
        assert preempted_c["message"] == f"Previously: {message}"
    evictions = (status.get("schedulingStats") or {}).get("evictions", [])
    assert {"reason": "Preempted", "underlyingCause": config, "count": 1} in evictions


# ------------------------------------------------------------------------------------------------
# engine/topology.py: place
# ------------------------------------------------------------------------------------------------

CPU = 1000  # one cpu, in the engine's milli-units


def two_racks(cpu: int = 4) -> Any:
    """rack-a: a1, a2; rack-b: b1, b2; `cpu` cpu each; levels rack, hostname."""
    nodes = [
        node_record(name, {RACK: rack}, cpu=cpu * CPU)
        for rack, names in (("rack-a", ("a1", "a2")), ("rack-b", ("b1", "b2")))
        for name in names
    ]
    return view((RACK, HOSTNAME), nodes)


def usage(**cpu_per_node: float) -> NodeUsage:
    return NodeUsage({name: {"cpu": int(amount * CPU)} for name, amount in cpu_per_node.items()})


def test_required_level_keeps_all_pods_in_one_domain() -> None:
    placement = place(two_racks(), usage(a1=2, b1=2), {"cpu": 2 * CPU}, 3, required=RACK)
    # rack-a and rack-b each take 3 pods of 2 cpu; the tie goes to the first name.
    assert placement is not None
    assert placement.nodes == (("a1", 1), ("a2", 2))


def test_required_level_that_no_domain_can_hold() -> None:
    # Each rack has 6 cpu free (2 + 4); 4 pods of 2 cpu need 8 in one rack.
    assert place(two_racks(), usage(a1=2, b1=2), {"cpu": 2 * CPU}, 4, required=RACK) is None
    # The nodes together could take them (12 cpu free).
    assert place(two_racks(), usage(a1=2, b1=2), {"cpu": 2 * CPU}, 4) is not None


def test_required_hostname_needs_one_node() -> None:
    v = view((HOSTNAME,), [node_record("x1", cpu=2 * CPU), node_record("x2", cpu=2 * CPU)])
    busy = usage(x1=1, x2=1)
    assert place(v, busy, {"cpu": CPU}, 2, required=HOSTNAME) is None
    assert place(v, busy, {"cpu": CPU}, 2) is not None  # unconstrained: one pod per node
    assert place(v, None, {"cpu": CPU}, 2, required=HOSTNAME) == Placement(v, (("x1", 2),))


def test_per_node_fit_summed_capacity_is_not_enough() -> None:
    # rack-a has 4 cpu free in total (2 + 2), but no node has the 3 cpu a pod needs.
    v = two_racks()
    busy = usage(a1=2, a2=2, b1=4, b2=4)
    assert place(v, busy, {"cpu": 3 * CPU}, 1, required=RACK) is None
    assert place(v, busy, {"cpu": 3 * CPU}, 1) is None
    assert place(v, busy, {"cpu": 2 * CPU}, 2, required=RACK) == Placement(v, (("a1", 1), ("a2", 1)))


def test_node_without_the_resource_takes_no_pod() -> None:
    v = view((HOSTNAME,), [node_record("cpu-only", cpu=8 * CPU), node_record("gpu", cpu=8 * CPU, gpu=1)])
    assert node_capacity(v.nodes[0], {}, {"cpu": CPU, "gpu": 1}) == 0
    assert place(v, None, {"cpu": CPU, "gpu": 1}, 1) == Placement(v, (("gpu", 1),))
    assert place(v, None, {"cpu": CPU, "gpu": 1}, 2) is None


def test_every_requested_resource_limits_the_pods_of_a_node() -> None:
    n = node_record("n", cpu=8 * CPU, memory=4)
    assert node_capacity(n, {}, {"cpu": CPU, "memory": 1}) == 4
    assert node_capacity(n, {"memory": 3}, {"cpu": CPU, "memory": 1}) == 1
    assert node_capacity(n, {"cpu": 9 * CPU}, {"cpu": CPU}) == 0  # over-committed: nothing, not negative


def test_preferred_level_falls_back_to_wider_levels_then_to_any_nodes() -> None:
    nodes = [
        node_record("n1", {BLOCK: "b1", RACK: "r1"}, cpu=2 * CPU),
        node_record("n2", {BLOCK: "b1", RACK: "r2"}, cpu=2 * CPU),
        node_record("n3", {BLOCK: "b2", RACK: "r3"}, cpu=2 * CPU),
        node_record("n4", {BLOCK: "b2", RACK: "r3"}, cpu=1 * CPU),
    ]
    v = view((BLOCK, RACK, HOSTNAME), nodes)
    pod = {"cpu": CPU}
    # 3 pods fit in rack r3 (2 + 1): the preferred level holds them.
    assert place(v, None, pod, 3, preferred=RACK) == Placement(v, (("n3", 2), ("n4", 1)))
    # 4 pods: no rack holds them, block b1 does (2 + 2) and is tighter than b2 (3 pods only anyway).
    assert place(v, None, pod, 4, preferred=RACK) == Placement(v, (("n1", 2), ("n2", 2)))
    assert place(v, None, pod, 4, required=RACK) is None
    # 6 pods: no block holds them; any nodes, roomiest first.
    six = place(v, None, pod, 6, preferred=RACK)
    assert six is not None and sum(p for _, p in six.nodes) == 6
    assert place(v, None, pod, 6, required=BLOCK) is None
    assert place(v, None, pod, 8, preferred=RACK) is None  # 7 pods at most


def test_unconstrained_fills_the_least_free_nodes_first() -> None:
    """Kueue's LeastFreeCapacity (TASProfileMixed, on by default) for unconstrained pod sets: one
    node if one holds them all (the least free such), else the least free nodes first."""
    v = view((RACK, HOSTNAME), [node_record(f"n{i}", {RACK: "r"}, cpu=c * CPU) for i, c in enumerate((1, 3, 2, 3))])
    unconstrained = TopologyRequest(unconstrained=True)
    assert place(v, None, {"cpu": CPU}, 2, unconstrained) == Placement(v, (("n2", 2),))
    assert place(v, None, {"cpu": CPU}, 3, unconstrained) == Placement(v, (("n1", 3),))
    assert place(v, None, {"cpu": CPU}, 5, unconstrained) == Placement(v, (("n0", 1), ("n1", 2), ("n2", 2)))
    assert place(v, None, {"cpu": CPU}, 9, unconstrained) == Placement(v, (("n0", 1), ("n1", 3), ("n2", 2), ("n3", 3)))
    assert place(v, None, {"cpu": CPU}, 10, unconstrained) is None
    # A pod set without a topology request is placed the same way (Kueue's implied request).
    assert place(v, None, {"cpu": CPU}, 5) == place(v, None, {"cpu": CPU}, 5, unconstrained)


def test_required_descends_to_the_tightest_nodes() -> None:
    """Within the chosen domain the nodes with the most room go first, and the last one is the
    tightest that completes the count (Kueue's BestFit), not the next roomiest."""
    v = view((RACK, HOSTNAME), [node_record(n, {RACK: "r"}, cpu=c * CPU) for n, c in (("n1", 3), ("n2", 3), ("n3", 2))])
    assert place(v, None, {"cpu": CPU}, 5, required=RACK) == Placement(v, (("n1", 3), ("n3", 2)))
    assert place(v, None, {"cpu": CPU}, 2, required=RACK) == Placement(v, (("n3", 2),))


def test_tightest_fitting_domain_wins() -> None:
    v = two_racks()
    # rack-a has room for 2 pods of 2 cpu (a2 only), rack-b for 4: the tighter rack-a wins.
    assert place(v, usage(a1=4), {"cpu": 2 * CPU}, 2, required=RACK) == Placement(v, (("a2", 2),))
    # Reversed usage: rack-b is now the tighter one.
    assert place(v, usage(b2=4), {"cpu": 2 * CPU}, 2, required=RACK) == Placement(v, (("b1", 2),))
    # The tightest host among hosts.
    hosts = view((HOSTNAME,), [node_record(n, cpu=c * CPU) for n, c in (("big", 8), ("small", 2), ("mid", 4))])
    assert place(hosts, None, {"cpu": 2 * CPU}, 1, required=HOSTNAME) == Placement(hosts, (("small", 1),))


def test_tie_between_domains_is_broken_by_name_not_by_node_order() -> None:
    nodes = [
        node_record("z1", {RACK: "rack-z"}, cpu=4 * CPU),
        node_record("m1", {RACK: "rack-m"}, cpu=4 * CPU),
        node_record("q1", {RACK: "rack-q"}, cpu=4 * CPU),
    ]
    for order in (nodes, nodes[::-1], [nodes[1], nodes[0], nodes[2]]):
        v = view((RACK, HOSTNAME), order)
        assert place(v, None, {"cpu": CPU}, 2, required=RACK) == Placement(v, (("m1", 2),))
    # Nodes of one domain: ties by node name too.
    v = view((HOSTNAME,), [node_record(n, cpu=CPU) for n in ("c", "a", "b")])
    assert place(v, None, {"cpu": CPU}, 2) == Placement(v, (("a", 1), ("b", 1)))


def test_node_selector_restricts_the_nodes() -> None:
    nodes = [
        node_record("a1", {RACK: "rack-a"}, cpu=4 * CPU),
        node_record("b1", {RACK: "rack-b"}, cpu=2 * CPU),
    ]
    v = view((RACK, HOSTNAME), nodes)
    # Without a selector the tighter b1 wins; pinned to a1 by hostname it goes there.
    assert place(v, None, {"cpu": 2 * CPU}, 1, required=HOSTNAME) == Placement(v, (("b1", 1),))
    pinned = place(v, None, {"cpu": 2 * CPU}, 1, required=HOSTNAME, node_selector={HOSTNAME: "a1"})
    assert pinned == Placement(v, (("a1", 1),))
    assert place(v, None, {"cpu": 2 * CPU}, 1, node_selector={RACK: "rack-a"}) == pinned
    assert place(v, None, {"cpu": CPU}, 1, node_selector={RACK: "rack-x"}) is None
    assert place(v, None, {"cpu": 3 * CPU}, 1, node_selector={HOSTNAME: "b1"}) is None


def test_level_not_in_the_topology_cannot_be_placed() -> None:
    assert place(two_racks(), None, {"cpu": CPU}, 1, required=BLOCK) is None
    assert place(two_racks(), None, {"cpu": CPU}, 1, preferred=BLOCK) is None


# ------------------------------------------------------------------------------------------------
# engine/tas.py: the nodes of a TAS flavor, from Node objects
# ------------------------------------------------------------------------------------------------


def build_state(objects: list[Obj]) -> TasState:
    parsed = parse(objects)
    return TasState.build(
        {o.name: o for o in parsed if o.kind == "Node"},
        {o.name: o for o in parsed if o.kind == "Topology"},
        {o.name: o for o in parsed if o.kind == "ResourceFlavor"},
    )


def test_build_keeps_schedulable_nodes_of_the_flavor_with_every_level_label() -> None:
    state = build_state(
        [
            topology(RACK, HOSTNAME),
            resource_flavor(TAS_FLAVOR, topology=TOPOLOGY),
            node("ok", {RACK: "r1"}, cpu=4),
            node("cordoned", {RACK: "r1"}, cpu=4, unschedulable=True),
            node("other-pool", {RACK: "r1"}, cpu=4, pool=False),
            node("no-rack", cpu=4),
            node("ok-2", {RACK: "r2"}, allocatable={"cpu": "500m", "example.com/gpu": 2}),
        ]
    )
    v = state.views[TAS_FLAVOR]
    assert (v.flavor, v.topology, v.levels) == (TAS_FLAVOR, TOPOLOGY_NAME, (RACK, HOSTNAME))
    assert [n.name for n in v.nodes] == ["ok", "ok-2"]
    assert "cordoned" not in state.nodes  # unschedulable nodes take no pods at all
    assert v.nodes[1].allocatable == {"cpu": 500, "example.com/gpu": 2, "pods": 110}


def test_unschedulable_node_is_never_chosen() -> None:
    state = build_state(
        [
            topology(HOSTNAME),
            resource_flavor(TAS_FLAVOR, topology=TOPOLOGY),
            node("cordoned", cpu=2, unschedulable=True),
            node("roomy", cpu=8),
        ]
    )
    v = state.views[TAS_FLAVOR]
    # The cordoned node would be the tightest fit.
    assert place(v, None, {"cpu": 2 * CPU}, 1, required=HOSTNAME) == Placement(v, (("roomy", 1),))
    assert place(v, None, {"cpu": CPU}, 1, node_selector={HOSTNAME: "cordoned"}) is None


def test_flavor_without_topology_has_no_view() -> None:
    state = build_state([topology(HOSTNAME), resource_flavor("plain", topology="missing"), node("x", cpu=1)])
    assert state.views == {}


# ------------------------------------------------------------------------------------------------
# Placement.wire() and decode_assignment
# ------------------------------------------------------------------------------------------------


def test_wire_with_hostname_lowest_lists_only_the_hostname_level() -> None:
    nodes = [node_record(f"n{i}", {BLOCK: "b1", RACK: "r1", SUBRACK: f"s{i % 2}"}, cpu=4 * CPU) for i in range(1, 4)]
    v = view((BLOCK, RACK, SUBRACK, HOSTNAME), nodes)
    same = Placement(v, (("n1", 1), ("n2", 1)))
    # Kueue's writer: the common prefix once, one pod count for all; n2 (subrack s0) before n1 (s1).
    assert same.wire() == {
        "levels": [HOSTNAME],
        "slices": [
            {
                "domainCount": 2,
                "valuesPerLevel": [{"individual": {"prefix": "n", "roots": ["2", "1"]}}],
                "podCounts": {"universal": 1},
            }
        ],
    }
    uneven = Placement(v, (("n1", 3), ("n3", 1)))
    assert uneven.wire()["slices"] == [
        {
            "domainCount": 2,
            "valuesPerLevel": [{"individual": {"prefix": "n", "roots": ["1", "3"]}}],
            "podCounts": {"individual": [3, 1]},
        }
    ]
    single = Placement(v, (("n2", 2),))
    assert single.wire()["slices"] == [
        {"domainCount": 1, "valuesPerLevel": [{"universal": "n2"}], "podCounts": {"universal": 2}}
    ]


def test_wire_orders_hostnames_by_the_levels_above_them() -> None:
    """Kueue sorts the domains by the values of every level, the hostname's last: zq of rack r1
    comes before ab of rack r2."""
    nodes = [node_record("ab", {RACK: "r2"}, cpu=CPU), node_record("zq", {RACK: "r1"}, cpu=CPU)]
    v = view((RACK, HOSTNAME), nodes)
    wire = Placement(v, (("ab", 1), ("zq", 2))).wire()
    assert wire["slices"] == [
        {
            "domainCount": 2,
            "valuesPerLevel": [{"individual": {"roots": ["zq", "ab"]}}],
            "podCounts": {"individual": [2, 1]},
        }
    ]


def test_wire_without_hostname_level_is_the_references_example() -> None:
    # §8: 4 pods on rack-1 and 2 on rack-2 of block-1.
    nodes = [
        node_record("n1", {BLOCK: "block-1", RACK: "rack-1"}, cpu=4 * CPU),
        node_record("n2", {BLOCK: "block-1", RACK: "rack-2"}, cpu=2 * CPU),
    ]
    v = view((BLOCK, RACK), nodes)
    placement = place(v, None, {"cpu": CPU}, 6, required=BLOCK)
    assert placement == Placement(v, (("n1", 4), ("n2", 2)))
    assert placement.wire() == {
        "levels": [BLOCK, RACK],
        "slices": [
            {
                "domainCount": 2,
                "valuesPerLevel": [{"universal": "block-1"}, {"individual": {"prefix": "rack-", "roots": ["1", "2"]}}],
                "podCounts": {"individual": [4, 2]},
            }
        ],
    }


def test_wire_without_hostname_level_sums_the_nodes_of_a_domain() -> None:
    nodes = [
        node_record("n1", {BLOCK: "b1", RACK: "r1"}, cpu=2 * CPU),
        node_record("n2", {BLOCK: "b1", RACK: "r1"}, cpu=2 * CPU),
        node_record("n3", {BLOCK: "b2", RACK: "r9"}, cpu=4 * CPU),
    ]
    v = view((BLOCK, RACK), nodes)
    assert Placement(v, (("n1", 2), ("n2", 2))).wire() == {
        "levels": [BLOCK, RACK],
        "slices": [
            {
                "domainCount": 1,
                "valuesPerLevel": [{"universal": "b1"}, {"universal": "r1"}],
                "podCounts": {"universal": 4},
            }
        ],
    }
    assert Placement(v, (("n1", 1), ("n3", 1))).wire()["slices"] == [
        {
            "domainCount": 2,
            "valuesPerLevel": [
                {"individual": {"prefix": "b", "roots": ["1", "2"]}},
                {"individual": {"prefix": "r", "roots": ["1", "9"]}},
            ],
            "podCounts": {"universal": 1},
        }
    ]


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        # Kueue's own cases (pkg/util/tas/tas_assignment_test.go).
        (["a1", "a1"], {"universal": "a1"}),
        (["a123", "a12", "a1", "a13"], {"individual": {"prefix": "a1", "roots": ["23", "2", "", "3"]}}),
        (["123b", "23b", "3b", "13b"], {"individual": {"suffix": "3b", "roots": ["12", "2", "", "1"]}}),
        # The longest prefix and suffix overlap: the prefix gives way.
        (["abacacada", "abacada"], {"individual": {"prefix": "ab", "suffix": "acada", "roots": ["ac", ""]}}),
        (["ababa", "aba"], {"individual": {"suffix": "aba", "roots": ["ab", ""]}}),
        (["aba", "ababa"], {"individual": {"suffix": "aba", "roots": ["", "ab"]}}),
        (["x", "y"], {"individual": {"roots": ["x", "y"]}}),
        (["p.a1.s", "p.a2.s"], {"individual": {"prefix": "p.a", "suffix": ".s", "roots": ["1", "2"]}}),
    ],
)
def test_level_values_extract_the_common_prefix_and_suffix(values: list[str], expected: dict[str, Any]) -> None:
    assert _level_values(values) == expected
    domains = [((value,), 1) for value in values]
    assert [v for (v,), _ in decode_pairs(encode_assignment(["x"], domains))] == values


def decode_pairs(assignment: Mapping[str, Any]) -> list[tuple[tuple[str, ...], int]]:
    levels = assignment["levels"]
    return [(tuple(values[lv] for lv in levels), pods) for values, pods in decode_assignment(assignment)]


def gke_pools(pods: tuple[int, ...] = (3, 3, 4, 5)) -> list[tuple[tuple[str, ...], int]]:
    names = ["gke-c-pool-a-hash1-aa", "gke-c-pool-a-hash1-bb", "gke-c-pool-b-hash2-cc", "gke-c-pool-b-hash2-dd"]
    return [((name,), n) for name, n in zip(names, pods, strict=True)]


def test_hostname_prefix_keys_are_the_longest_prefixes_another_hostname_shares() -> None:
    assert _hostname_prefix_keys([name for (name,), _ in gke_pools()]) == [
        "gke-c-pool-a-hash1-",
        "gke-c-pool-a-hash1-",
        "gke-c-pool-b-hash2-",
        "gke-c-pool-b-hash2-",
    ]
    assert _hostname_prefix_keys(["node-a", "host-b"]) == ["", ""]
    assert _hostname_prefix_keys(["nodea", "hostb"]) is None  # no '-' at all


def test_hostname_prefix_keys_shorten_until_the_slices_fit() -> None:
    names = [f"a-{'xy'[i % 2]}-{i:04d}" for i in range(MAX_SLICES + 1)]
    assert _hostname_prefix_keys(names) == ["a-"] * len(names)
    alternating = [f"{'a-x' if i % 2 == 0 else 'b-y'}-{i:04d}" for i in range(MAX_SLICES + 1)]
    assert _hostname_prefix_keys(alternating) is None
    assert len(encode_assignment([HOSTNAME], [((n,), 1) for n in alternating])["slices"]) == 1


def test_hostnames_of_several_pools_get_a_slice_each_when_that_is_shorter() -> None:
    def pools(count: int) -> list[tuple[tuple[str, ...], int]]:
        half = count // 2
        return [((f"pool-{'a' if i < half else 'b'}-node-{i % half if half else 0:05d}",), 1) for i in range(count)]

    # Kueue's own cases: one slice for 4 such hostnames (shorter in JSON), one per pool for 20.
    assert len(encode_assignment([HOSTNAME], pools(4))["slices"]) == 1
    twenty = encode_assignment([HOSTNAME], pools(20))
    assert [s["valuesPerLevel"][0]["individual"]["prefix"] for s in twenty["slices"]] == [
        "pool-a-node-0000",
        "pool-b-node-0000",
    ]
    assert decode_pairs(twenty) == pools(20)
    # Without hostnames there is one slice, whatever the values.
    assert len(encode_assignment([RACK], [((f"pool-{c}-r{i}",), 1) for c in "ab" for i in range(10)])["slices"]) == 1


def test_gke_pools_with_uneven_counts() -> None:
    wire = encode_assignment([HOSTNAME], gke_pools())
    assert decode_pairs(wire) == gke_pools()
    for domains in (gke_pools(), gke_pools((1, 1, 1, 1))):
        wire = encode_assignment([HOSTNAME], domains)
        single = {"levels": [HOSTNAME], "slices": [_slice(domains, 1)]}
        by_prefix = {
            "levels": [HOSTNAME],
            "slices": [_slice(domains[:2], 1), _slice(domains[2:], 1)],
        }
        shorter = min(single, by_prefix, key=lambda w: len(json.dumps(w, separators=(",", ":"))))
        assert wire == shorter


def test_a_slice_holds_at_most_100000_domains() -> None:
    domains = [((f"r{i}",), 1) for i in range(MAX_DOMAINS_PER_SLICE + 5)]
    wire = encode_assignment([RACK], domains)
    assert [s["domainCount"] for s in wire["slices"]] == [MAX_DOMAINS_PER_SLICE, 5]
    assert decode_pairs(wire) == domains


@pytest.mark.parametrize(
    "levels",
    [(HOSTNAME,), (RACK, HOSTNAME), (BLOCK, RACK, SUBRACK, HOSTNAME), (BLOCK, RACK), (RACK,)],
)
def test_decode_round_trip(levels: tuple[str, ...]) -> None:
    labels = {BLOCK: "b{}", RACK: "r{}", SUBRACK: "s{}"}
    nodes = [
        node_record(f"n{i}", {lv: labels[lv].format(i // 2) for lv in levels if lv != HOSTNAME}, cpu=(i + 1) * CPU)
        for i in range(6)
    ]
    v = view(levels, nodes)
    placement = place(v, None, {"cpu": CPU}, 13)
    assert placement is not None
    wire = placement.wire()
    reported = [HOSTNAME] if levels[-1] == HOSTNAME else list(levels)
    assert wire["levels"] == reported
    decoded = decode_assignment(wire)
    assert decoded == [(dict(zip(reported, values, strict=True)), pods) for values, pods in placement.domains()]
    assert sum(p for _, p in decoded) == 13
    # The wire form is valid for the Workload API (CEL rules are exercised in test_crds).
    from preemption_operator.api.v1beta2 import TopologyAssignment

    assert TopologyAssignment.model_validate(wire).to_wire() == wire


def test_decode_prefix_suffix_and_several_slices() -> None:
    wire = {
        "levels": [RACK, HOSTNAME],
        "slices": [
            {
                "domainCount": 2,
                "valuesPerLevel": [
                    {"universal": "r1"},
                    {"individual": {"prefix": "node-", "suffix": ".x", "roots": ["1", "2"]}},
                ],
                "podCounts": {"universal": 2},
            },
            {
                "domainCount": 1,
                "valuesPerLevel": [{"individual": {"roots": ["r2"]}}, {"individual": {"roots": ["node-3.x"]}}],
                "podCounts": {"individual": [5]},
            },
        ],
    }
    assert decode_assignment(wire) == [
        ({RACK: "r1", HOSTNAME: "node-1.x"}, 2),
        ({RACK: "r1", HOSTNAME: "node-2.x"}, 2),
        ({RACK: "r2", HOSTNAME: "node-3.x"}, 5),
    ]


def test_admitted_assignment_resolves_to_the_same_node_usage() -> None:
    """What the engine writes is what it reads back: a placement's wire form, as a Workload's
    admission, gives the placement's per-node usage."""
    objects = [
        *basics(levels=[RACK, HOSTNAME]),
        cluster_queue("a", 100, flavor=TAS_FLAVOR),
        local_queue("main", "a"),
        *(node(f"n{i}", {RACK: f"r{i % 2}"}, cpu=4) for i in range(4)),
    ]
    state = build_state(objects)
    v = state.views[TAS_FLAVOR]
    placement = place(v, None, {"cpu": 1500}, 4, required=RACK)
    assert placement is not None
    wl = workload("w", cpu="1500m", queue="main", count=4).on_nodes("a", assignment=placement.wire())
    cache = cache_of([*objects, wl])
    assert cache.tas().by_workload["default/w"] == placement.usage({"cpu": 1500})


def test_rack_level_assignment_is_resolved_onto_the_racks_nodes() -> None:
    """An assignment above the nodes (levels [rack]) is spread over the rack's nodes in order,
    filling each; nothing is lost when the recorded counts over-commit them."""
    objects = [
        *basics(levels=[RACK]),
        cluster_queue("a", 100, flavor=TAS_FLAVOR),
        local_queue("main", "a"),
        node("n1", {RACK: "r1"}, cpu=2),
        node("n2", {RACK: "r1"}, cpu=2),
    ]

    def on_r1(pods: int) -> dict[str, Any]:
        return {
            "levels": [RACK],
            "slices": [{"domainCount": 1, "valuesPerLevel": [{"universal": "r1"}], "podCounts": {"universal": pods}}],
        }

    three, six = on_r1(3), on_r1(6)
    cache = cache_of([*objects, workload("w", cpu=1, queue="main", count=3).on_nodes("a", assignment=three)])
    assert cache.tas().by_workload["default/w"] == {"n1": {"cpu": 2000, "pods": 2}, "n2": {"cpu": 1000, "pods": 1}}
    cache = cache_of([*objects, workload("w", cpu=1, queue="main", count=6).on_nodes("a", assignment=six)])
    total = sum(amounts["cpu"] for amounts in cache.tas().by_workload["default/w"].values())
    assert total == 6000


# ------------------------------------------------------------------------------------------------
# fit_message
# ------------------------------------------------------------------------------------------------


def test_fit_message_wording() -> None:
    """Kueue's words, with why nodes took no pods ("Total nodes: N; excluded: ...")."""
    v = two_racks()
    pod = {"cpu": 2 * CPU}
    assert fit_message(v, usage(a1=4, a2=4, b1=4, b2=4), pod, 3, RACK) == (
        f'topology "{TOPOLOGY_NAME}" doesn\'t allow to fit any of 3 pod(s). Total nodes: 4; excluded: resource "cpu": 4'
    )
    # The best rack takes 3 (rack-b: 2 + 1), not the 4 the racks take together.
    assert fit_message(v, usage(a1=2, a2=4, b2=2), pod, 4, RACK) == (
        f'topology "{TOPOLOGY_NAME}" allows to fit only 3 out of 4 pod(s). Total nodes: 4; excluded: resource "cpu": 1'
    )
    assert fit_message(v, usage(a1=2, a2=4, b2=2), pod, 5) == (
        f'topology "{TOPOLOGY_NAME}" allows to fit only 4 out of 5 pod(s). Total nodes: 4; excluded: resource "cpu": 1'
    )
    assert fit_message(v, None, pod, 3, HOSTNAME, {RACK: "rack-b"}) == (
        f'topology "{TOPOLOGY_NAME}" allows to fit only 2 out of 3 pod(s). Total nodes: 4; excluded: nodeSelector: 2'
    )
    assert fit_message(v, None, pod, 5, RACK) == (
        f'topology "{TOPOLOGY_NAME}" allows to fit only 4 out of 5 pod(s)'  # nothing excluded
    )
    assert fit_message(v, None, pod, 4, RACK) == ""  # it fits


def test_fit_message_is_the_pending_message_without_preemption() -> None:
    objects = [
        *basics(levels=[HOSTNAME]),
        node("x1", cpu=2),
        node("x2", cpu=2),
        cluster_queue("a", 4, flavor=TAS_FLAVOR),
        local_queue("main", "a"),
        workload("a1", queue="main").on_nodes("a", {"x1": 1}),
        workload("a2", queue="main").on_nodes("a", {"x2": 1}),
        workload("incoming", queue="main", count=2, required=HOSTNAME),
    ]
    result = engine_cycle(objects)
    assert not result.preempted and not result.admitted
    [pending] = [p for p in result.pending if p.workload.name == "incoming"]
    assert pending.reason == "TopologyPlacementFailed"
    assert pending.message == (
        f'couldn\'t assign flavors to pod set main: topology "{TOPOLOGY_NAME}" allows to fit only 1 out of 2 pod(s)'
    )


# ------------------------------------------------------------------------------------------------
# §9 A25, A26: the QuotaFeasibleAndInsufficientTopology tier in a full cycle
# ------------------------------------------------------------------------------------------------

TOPOLOGY_RULE = [rule("test-rule-one", selector("WithinClusterQueue"), trigger=QFIT)]


def a25(nominal: int = 4) -> list[Obj]:
    """Hostname topology, nodes x1, x2 of 2 cpu; CQ a (`nominal` cpu) annotated; a1 on x1, a2 on
    x2 (1 cpu each); incoming 2 pods x 1 cpu, required hostname."""
    return [
        *basics(levels=[HOSTNAME]),
        node("x1", cpu=2),
        node("x2", cpu=2),
        cluster_queue("a", nominal, flavor=TAS_FLAVOR, config=CONFIG),
        local_queue("main", "a"),
        preemption_config(CONFIG, *TOPOLOGY_RULE),
        workload("a1", queue="main").on_nodes("a", {"x1": 1}),
        workload("a2", queue="main").on_nodes("a", {"x2": 1}),
        workload("incoming", queue="main", count=2, required=HOSTNAME),
    ]


def test_a25_topology_tier_preempts_in_one_cycle() -> None:
    result = engine_cycle(a25())
    assert [p.victim.name for p in result.preempted] == ["a1"]  # tie between a1 and a2 broken by UID
    [p] = result.preempted
    assert p.preemptor.name == "incoming" and p.target.reason == CONFIGURABLE
    # Reason data: {ConfigName: default-config, test-rule-one: [0]}.
    assert p.target.rule is not None
    assert (p.target.rule.config, p.target.rule.selectors) == (CONFIG, (("test-rule-one", (0,)),))
    assert wl_status.eviction_messages(p) == (rule_message("default/incoming", "test-rule-one/0"),) * 2
    [pending] = result.pending
    assert pending.reason == "WaitingForPreemptedWorkloads"
    assert pending.message == (
        f'couldn\'t assign flavors to pod set main: topology "{TOPOLOGY_NAME}" allows to fit only 1 out of 2 pod(s)'
        ". Pending the preemption of 1 workload(s)"
    )


def test_a25_simulate_json(tmp_path: Path) -> None:
    data = simulate_json(a25(), tmp_path)
    message = rule_message("default/incoming", "test-rule-one/0")
    assert [(a["cycle"], a["workload"], a["preemptor"], a["reason"], a["message"]) for a in preempted(data)] == [
        (1, "default/a1", "default/incoming", CONFIGURABLE, message)
    ]
    final = statuses(data)
    assert_victim_status(final["a1"], message)
    # The preemptor gets x1 whole, in the cycle after the eviction.
    assert [a["cycle"] for a in admitted_actions(data, "incoming")] == [2]
    assert topology_assignment(final["incoming"]) == {
        "levels": [HOSTNAME],
        "slices": [{"domainCount": 1, "valuesPerLevel": [{"universal": "x1"}], "podCounts": {"universal": 2}}],
    }
    # The victim fits again (quota 2 + 1 + 1 = 4), on the other node.
    assert is_admitted(final["a1"]) and pods_per_node(topology_assignment(final["a1"])) == {"x2": 1}
    assert is_admitted(final["a2"]) and "Evicted" not in {c["type"] for c in final["a2"]["conditions"]}


def test_a25_explanation_names_the_rule(tmp_path: Path) -> None:
    data = simulate_json(a25(), tmp_path, max_cycles=1)
    [exp] = data["explanations"]
    chosen = [c for c in exp["candidates"] if c["outcome"] == "chosen"]
    assert [(c["workload"], c["source"]) for c in chosen] == [
        ("default/a1", f"preemption config {CONFIG} rule test-rule-one/0")
    ]


def test_a26_quota_insufficient_so_the_topology_tier_is_not_applied(tmp_path: Path) -> None:
    objects = a25(nominal=2)
    result = engine_cycle(objects)
    assert result.preempted == []
    [pending] = result.pending
    assert (pending.workload.name, pending.reason) == ("incoming", "WaitingForQuota")
    assert (
        pending.message
        == "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor tas, 2 more needed"
    )
    data = simulate_json(objects, tmp_path)
    assert preempted(data) == []
    assert not is_admitted(statuses(data)["incoming"])


def test_topology_tier_frees_a_node_used_by_another_flavor() -> None:
    """§2.5 exception: in the topology tier a workload on the preemptor's nodes is a candidate
    whatever flavor it holds quota in (here `tas-b`, a second flavor over the same nodes); in the
    Always tier it is not."""

    def objects(trigger: str) -> list[Obj]:
        return [
            *basics(levels=[HOSTNAME]),
            resource_flavor("tas-b", topology=TOPOLOGY),
            node("x1", cpu=2),
            node("x2", cpu=2),
            cluster_queue("a", 4, flavor=TAS_FLAVOR, config=CONFIG, cohort="all"),
            cluster_queue("b", 4, flavor="tas-b", cohort="all"),
            local_queue("main", "a"),
            local_queue("b", "b"),
            preemption_config(CONFIG, rule("r", selector("AnyClusterQueue"), trigger=trigger)),
            workload("a1", queue="main").on_nodes("a", {"x2": 1}),
            workload("b1", queue="b").on_nodes("b", {"x1": 1}, flavor="tas-b"),
            workload("incoming", queue="main", count=2, required=HOSTNAME),
        ]

    # b1 (other ClusterQueue) is ordered first and frees x1.
    assert [p.victim.name for p in engine_cycle(objects(QFIT)).preempted] == ["b1"]
    # b1 holds no quota the preemptor needs: the Always tier offers a1 only.
    assert [p.victim.name for p in engine_cycle(objects("Always")).preempted] == ["a1"]


# ------------------------------------------------------------------------------------------------
# §9 A27, A28: the evaluator, for a preemptor whose placement never fits
# ------------------------------------------------------------------------------------------------

TIER = "preemption-tier"


def tier_lt() -> Obj:
    return selector("WithinClusterQueue", numericLabels=[{"key": TIER, "comparison": "LessThan"}])


def one_cpu_nodes(config_rules: list[Obj], incoming: Obj, *extra: Obj) -> list[Obj]:
    """Hostname topology, nodes x1..x3 of 1 cpu (and x4, cordoned); CQ a 3 cpu annotated; a1 (tier 1)
    on x1, a2 on x2, a3 on x3, with A27's and A28's labels; `incoming` pending."""
    return [
        *basics(levels=[HOSTNAME]),
        *(node(f"x{i}", cpu=1) for i in (1, 2, 3)),
        node("x4", cpu=1, unschedulable=True),
        cluster_queue("a", 3, flavor=TAS_FLAVOR, config=CONFIG),
        local_queue("main", "a"),
        preemption_config(CONFIG, *config_rules),
        *extra,
        incoming,
    ]


def evaluate(objects: list[Obj], preemptor: str = "default/incoming") -> tuple[list[Candidate], Context]:
    """The candidates `ConfigurablePreemption().candidates(ctx, True)` yields, each removed from the
    snapshot as the victim search removes it, for a Context built as the scheduler builds it (with
    the TAS state, so the pod set carries its topology view)."""
    snapshot = cache_of(objects).snapshot(NOW_DT)
    [(wl, name)] = [(w, n) for n, queue in snapshot.pending.items() for w in queue if w.key == preemptor]
    cq = snapshot.cluster_queues[name]
    assignment = assign_flavors(wl, cq, snapshot.flavors, snapshot.tas, snapshot.node_usage)
    ctx = Context(wl, cq, snapshot, assignment)
    found = []
    for cand in ConfigurablePreemption().candidates(ctx, True):
        snapshot.remove_workload(cand.workload)
        assert not ctx.fits_topology(), "the placement must never fit"
        found.append(cand)
    return found, ctx


def names(cands: list[Candidate]) -> list[str]:
    return [c.workload.name for c in cands]


def a27() -> list[Obj]:
    # One pod of 2 cpu: no node has 2 cpu, although x1..x3 have 3 together. Quota 3 + 2 > 3.
    return one_cpu_nodes(
        [
            rule("tier-rule", tier_lt()),
            rule("quota-rule", selector("WithinClusterQueue"), trigger="InsufficientQuota"),
        ],
        workload("incoming", cpu=2, queue="main", required=HOSTNAME, labels={TIER: "5"}),
        workload("a1", queue="main", labels={TIER: "1"}).on_nodes("a", {"x1": 1}),
        workload("a2", queue="main", labels={TIER: "1"}).on_nodes("a", {"x2": 1}),
        workload("a3", queue="main").on_nodes("a", {"x3": 1}),
    )


def test_a27_quota_fits_after_the_always_tier_so_insufficient_quota_is_skipped() -> None:
    cands, ctx = evaluate(a27())
    assert names(cands) == ["a1", "a2"]
    assert [c.rule.describe() for c in cands if c.rule] == ["tier-rule/0", "tier-rule/0"]
    assert ctx.fits_quota(True) and not ctx.fits(True)
    assert ctx.assignment.pod_sets[0].view is not None  # a TAS pod set


def test_a27_full_cycle_preempts_nobody(tmp_path: Path) -> None:
    result = engine_cycle(a27())
    assert result.preempted == [] and result.admitted == []
    assert preempted(simulate_json(a27(), tmp_path)) == []


def a28() -> list[Obj]:
    # One pod of 1 cpu pinned to x4, which is cordoned: never placed. Quota 3 + 1 > 3.
    return one_cpu_nodes(
        [rule("tier-rule", tier_lt()), rule("topology-rule", selector("WithinClusterQueue"), trigger=QFIT)],
        workload(
            "incoming", cpu=1, queue="main", required=HOSTNAME, labels={TIER: "5"}, node_selector={HOSTNAME: "x4"}
        ),
        workload("a1", queue="main", labels={TIER: "1"}).on_nodes("a", {"x1": 1}),
        workload("a2", queue="main").on_nodes("a", {"x2": 1}),
        workload("a3", queue="main").on_nodes("a", {"x3": 1}),
    )


def test_a28_topology_tier_once_quota_fits() -> None:
    cands, ctx = evaluate(a28())
    assert names(cands) == ["a1", "a2", "a3"]
    assert [c.rule.describe() for c in cands if c.rule] == ["tier-rule/0", "topology-rule/0", "topology-rule/0"]
    assert all(c.reason == CONFIGURABLE for c in cands)
    assert ctx.fits_quota(True)


def test_a28_same_candidates_with_fits_topology_forced_false(monkeypatch: pytest.MonkeyPatch) -> None:
    """The other way to build A28: a placement that would fit, with `Context.fits_topology` forced
    to False (as Kueue's evaluator test forces `fits`)."""
    objects = one_cpu_nodes(
        [rule("tier-rule", tier_lt()), rule("topology-rule", selector("WithinClusterQueue"), trigger=QFIT)],
        workload("incoming", cpu=1, queue="main", required=HOSTNAME, labels={TIER: "5"}),
        workload("a1", queue="main", labels={TIER: "1"}).on_nodes("a", {"x1": 1}),
        workload("a2", queue="main").on_nodes("a", {"x2": 1}),
        workload("a3", queue="main").on_nodes("a", {"x3": 1}),
    )
    monkeypatch.setattr(Context, "fits_topology", lambda self: False)
    assert names(evaluate(objects)[0]) == ["a1", "a2", "a3"]


def test_a28_full_cycle_preempts_nobody(tmp_path: Path) -> None:
    result = engine_cycle(a28())
    assert result.preempted == [] and result.admitted == []
    data = simulate_json(a28(), tmp_path)
    assert preempted(data) == [] and not is_admitted(statuses(data)["incoming"])


# ------------------------------------------------------------------------------------------------
# §9 A31: defragmentation across ClusterQueues with an extended resource
# ------------------------------------------------------------------------------------------------

GPU = "example.com/gpu"
A31_RULE = "defrag"


def a31(*extra: Obj) -> list[Obj]:
    """Nodes node-x, node-y with 2 gpu each (hostname topology); cq-a and cq-b (2 gpu each, cohort
    root, both annotated); the rule: topology tier, [Boosted <=, AnyClusterQueue, label <gpu> < preemptor's,
    fallback 0]; wlA (label 1, 1 gpu) admitted on node-x; wlB (lq-b, label 2, 2 gpu, pinned to node-x)."""
    return [
        *basics(levels=[HOSTNAME]),
        node("node-x", allocatable={GPU: 2}),
        node("node-y", allocatable={GPU: 2}),
        cluster_queue("cq-a", None, resources={GPU: 2}, flavor=TAS_FLAVOR, cohort="root", config=CONFIG),
        cluster_queue("cq-b", None, resources={GPU: 2}, flavor=TAS_FLAVOR, cohort="root", config=CONFIG),
        local_queue("lq-a", "cq-a"),
        local_queue("lq-b", "cq-b"),
        preemption_config(
            CONFIG,
            rule(
                A31_RULE,
                selector(
                    "AnyClusterQueue",
                    priority={"mode": "Boosted", "comparison": "LessThanOrEqual"},
                    numericLabels=[{"key": GPU, "comparison": "LessThan", "fallbackValue": 0}],
                ),
                trigger=QFIT,
            ),
        ),
        workload("wl-a", cpu=None, requests={GPU: 1}, queue="lq-a", labels={GPU: "1"}, required=HOSTNAME).on_nodes(
            "cq-a", {"node-x": 1}
        ),
        workload(
            "wl-b",
            cpu=None,
            requests={GPU: 2},
            queue="lq-b",
            labels={GPU: "2"},
            required=HOSTNAME,
            node_selector={HOSTNAME: "node-x"},
        ),
        *extra,
    ]


def test_a31_first_cycle() -> None:
    result = engine_cycle(a31())
    [p] = result.preempted
    assert (p.victim.name, p.preemptor.name, p.target.reason) == ("wl-a", "wl-b", CONFIGURABLE)
    assert p.target.rule is not None and p.target.rule.describe() == f"{A31_RULE}/0"


def test_a31_simulate_json(tmp_path: Path) -> None:
    data = simulate_json(a31(), tmp_path)
    message = rule_message("default/wl-b", f"{A31_RULE}/0")
    assert [(a["workload"], a["reason"], a["message"]) for a in preempted(data)] == [
        ("default/wl-a", CONFIGURABLE, message)
    ]
    final = statuses(data)
    assert_victim_status(final["wl-a"], message)
    assert is_admitted(final["wl-b"])
    assert final["wl-b"]["admission"]["clusterQueue"] == "cq-b"
    assert topology_assignment(final["wl-b"]) == {
        "levels": [HOSTNAME],
        "slices": [{"domainCount": 1, "valuesPerLevel": [{"universal": "node-x"}], "podCounts": {"universal": 1}}],
    }
    # wlA is admitted again, on the other node.
    assert is_admitted(final["wl-a"]) and final["wl-a"]["admission"]["clusterQueue"] == "cq-a"
    assert pods_per_node(topology_assignment(final["wl-a"])) == {"node-y": 1}
    # Both in the cycle after the eviction: wlB (waiting for its victim) first, then wlA.
    admissions = [a["workload"] for a in data["actions"] if a["action"] == "Admitted"]
    assert admissions == ["default/wl-b", "default/wl-a"]
    assert [a["cycle"] for a in admitted_actions(data, "wl-b")] == [2]


def settled_a31(tmp_path: Path, *extra: Obj) -> list[Obj]:
    """A31 after the simulation settled (final statuses), plus `extra` objects."""
    final = statuses(simulate_json(a31(), tmp_path))
    objects = []
    for body in map(as_dict, a31()):
        if body["kind"] == "Workload":
            body = {**body, "status": final[body["metadata"]["name"]]}
        objects.append(body)
    return [*objects, *extra]


def wl_c(label: str) -> WorkloadBuilder:
    """wlC: 2 gpu pinned to node-x, in its own ClusterQueue cq-c (2 gpu, cohort root), so that its
    quota fits and the topology tier is reached (in cq-a or cq-b the cohort has no quota left, and
    the tier would not be reached for that reason alone)."""
    return workload(
        "wl-c",
        cpu=None,
        requests={GPU: 2},
        queue="lq-c",
        labels={GPU: label},
        required=HOSTNAME,
        node_selector={HOSTNAME: "node-x"},
    )


def cq_c() -> list[Obj]:
    return [
        cluster_queue("cq-c", None, resources={GPU: 2}, flavor=TAS_FLAVOR, cohort="root", config=CONFIG),
        local_queue("lq-c", "cq-c"),
    ]


def test_a31_later_equal_label_stays_pending(tmp_path: Path) -> None:
    objects = settled_a31(tmp_path, *cq_c(), wl_c("2"))
    result = engine_cycle(objects)
    assert result.preempted == [] and result.admitted == []  # 2 < 2 is false: wlB is not a candidate
    [pending] = [p for p in result.pending if p.workload.name == "wl-c"]
    assert pending.reason == "TopologyPlacementFailed"
    data = simulate_json(objects, tmp_path)
    assert preempted(data) == [] and not is_admitted(statuses(data)["wl-c"])


def test_a31_control_a_larger_label_preempts_wl_b(tmp_path: Path) -> None:
    result = engine_cycle(settled_a31(tmp_path, *cq_c(), wl_c("3")))
    assert [(p.victim.name, p.target.reason) for p in result.preempted] == [("wl-b", CONFIGURABLE)]


# ------------------------------------------------------------------------------------------------
# The topology-defragmentation example
# ------------------------------------------------------------------------------------------------

EXAMPLE = REPO / "examples" / "topology-defragmentation"
EXAMPLE_NOW = "2026-11-30T12:00:00Z"


def run_example(output: str) -> str:
    result = CliRunner().invoke(
        cli, ["simulate", str(EXAMPLE), "--now", EXAMPLE_NOW, "--output", output], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return result.stdout


def example_racks() -> dict[str, str]:
    nodes = [o for o in yaml.safe_load_all((EXAMPLE / "topology.yaml").read_text()) if o and o["kind"] == "Node"]
    return {n["metadata"]["name"]: n["metadata"]["labels"]["cloud.provider.com/topology-rack"] for n in nodes}


def test_defragmentation_example_json() -> None:
    data = json.loads(run_example("json"))
    message = (
        "Preempted by training/large-training because of preemption config topology-defragmentation "
        "rule evict-smaller-jobs-for-large-topology/0"
    )
    assert [(a["cycle"], a["workload"], a["preemptor"], a["reason"], a["message"]) for a in preempted(data)] == [
        (1, "training/small-a", "training/large-training", CONFIGURABLE, message)
    ]
    final = statuses(data)
    racks = example_racks()
    large = pods_per_node(topology_assignment(final["large-training"]))
    assert large == {"node-a1": 1, "node-a2": 1}
    assert {racks[n] for n in large} == {"rack-a"}
    assert topology_assignment(final["large-training"]) == {
        "levels": [HOSTNAME],
        "slices": [
            {
                "domainCount": 2,
                "valuesPerLevel": [{"individual": {"prefix": "node-a", "roots": ["1", "2"]}}],
                "podCounts": {"universal": 1},
            }
        ],
    }
    # The victim is re-admitted on the other rack: the tightest node, next to small-b.
    assert is_admitted(final["small-a"])
    assert pods_per_node(topology_assignment(final["small-a"])) == {"node-b1": 1}
    assert_victim_status(final["small-a"], message, config="topology-defragmentation")
    assert pods_per_node(topology_assignment(final["small-b"])) == {"node-b1": 1}
    assert [a["workload"] for a in data["actions"] if a["action"] == "Admitted"] == [
        "training/large-training",
        "training/small-a",
    ]


def test_defragmentation_example_text() -> None:
    text = run_example("text")
    assert "Preempted  training/small-a" in text
    assert "ConfigurablePreemption (by training/large-training)" in text
    assert "rule evict-smaller-jobs-for-large-topology/0" in text
    assert 'topology "rack-topology" allows to fit only 1 out of 2 pod(s)' in text


# ------------------------------------------------------------------------------------------------
# Findings (engine bugs these tests found; all fixed)
# ------------------------------------------------------------------------------------------------


def test_hostname_label_is_what_the_assignment_names() -> None:
    """The hostname level's values are `kubernetes.io/hostname` label values, which need not be the
    Node's name; admitted assignments naming hostnames are charged to the right Node."""
    objects = [
        *basics(levels=[HOSTNAME]),
        node("node-1", cpu=2, hostname="host-1"),
        node("node-2", cpu=2, hostname="host-2"),
        cluster_queue("a", 10, flavor=TAS_FLAVOR),
        local_queue("main", "a"),
        workload("big", cpu=2, queue="main").on_nodes("a", {"host-1": 1}),
        workload("incoming", cpu=2, queue="main", required=HOSTNAME),
    ]
    cache = cache_of(objects)
    assert cache.tas().by_workload["default/big"] == {"node-1": {"cpu": 2000, "pods": 1}}
    [admission] = engine_cycle(objects).admitted
    assignment = admission.pod_sets[0]["topologyAssignment"]
    assert isinstance(assignment, dict)
    assert pods_per_node(assignment) == {"host-2": 1}


def two_trees_one_node() -> list[Obj]:
    return [
        *basics(levels=[HOSTNAME]),
        node("x1", cpu=2),
        cluster_queue("a", 10, flavor=TAS_FLAVOR),
        cluster_queue("b", 10, flavor=TAS_FLAVOR),
        local_queue("a", "a"),
        local_queue("b", "b"),
        workload("w1", cpu=2, queue="a", required=HOSTNAME),
        workload("w2", cpu=2, queue="b", required=HOSTNAME),
    ]


def test_one_cycle_does_not_over_commit_a_node_shared_by_two_cohort_trees() -> None:
    """Regression: ClusterQueues of different cohort trees share TAS nodes; an entry processed after
    an admission that placed pods must be placed again (it used to be re-nominated only when its own
    quota tree was touched, and both workloads went to the one 2-cpu node)."""
    result = engine_cycle(two_trees_one_node())
    assert [a.workload.name for a in result.admitted] == ["w1"]


def two_pod_sets() -> list[Obj]:
    big = workload("big", queue="main", required=HOSTNAME, labels={"size": "2"}).obj()
    pod_set = big["spec"]["podSets"][0]
    pod_set["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    big["spec"]["podSets"] = [{**pod_set, "name": "p1"}, {**json.loads(json.dumps(pod_set)), "name": "p2"}]
    return [
        *basics(levels=[HOSTNAME]),
        node("x1", cpu=2),
        node("x2", cpu=2),
        cluster_queue("a", 10, flavor=TAS_FLAVOR, config=CONFIG),
        local_queue("main", "a"),
        preemption_config(
            CONFIG,
            rule(
                "r",
                selector("WithinClusterQueue", numericLabels=[{"key": "size", "comparison": "LessThan"}]),
                trigger=QFIT,
            ),
        ),
        workload("a1", queue="main", labels={"size": "1"}).on_nodes("a", {"x1": 1}),
        workload("a2", queue="main", labels={"size": "1"}).on_nodes("a", {"x2": 1}),
        big,
    ]


def test_victim_set_frees_room_for_every_pod_set() -> None:
    """Regression: the fit check of the victim search places a workload's pod sets together (each
    sees the pods of the earlier ones). Two pod sets of one whole node each used to 'fit' on x1
    alone, so the first cycle preempted a1 only and a second cycle a2."""
    result = engine_cycle(two_pod_sets())
    assert sorted(p.victim.name for p in result.preempted) == ["a1", "a2"]


def test_two_pod_sets_end_admitted_on_two_nodes(tmp_path: Path) -> None:
    """The same case over several cycles: the job ends admitted, one pod set per node."""
    data = simulate_json(two_pod_sets(), tmp_path)
    final = statuses(data)
    assert is_admitted(final["big"])
    placed = [pods_per_node(psa["topologyAssignment"]) for psa in final["big"]["admission"]["podSetAssignments"]]
    assert sorted(n for p in placed for n in p) == ["x1", "x2"]


def competing_tree() -> list[Obj]:
    """rack-0: r0-n0, rack-1: r1-n0 (2 cpu each); s0 (reserved last, so the first candidate) on
    r0-n0 and s1 on r1-n0, 1 cpu each; `large` (2 x 1 cpu, required rack) in CQ a; o0 (1 cpu) pending
    in CQ other, a separate cohort tree without a config."""
    defrag = selector("WithinClusterQueue", numericLabels=[{"key": "size", "comparison": "LessThan"}])
    return [
        *basics(levels=[RACK, HOSTNAME]),
        node("r0-n0", {RACK: "rack-0"}, cpu=2),
        node("r1-n0", {RACK: "rack-1"}, cpu=2),
        cluster_queue("a", 10, flavor=TAS_FLAVOR, config=CONFIG),
        cluster_queue("other", 10, flavor=TAS_FLAVOR),
        local_queue("main", "a"),
        local_queue("other", "other"),
        preemption_config(CONFIG, rule("defrag", defrag, trigger=QFIT)),
        workload("s0", queue="main", labels={"size": "1"}).on_nodes("a", {"r0-n0": 1}, at=T0 + timedelta(hours=1)),
        workload("s1", queue="main", labels={"size": "1"}).on_nodes("a", {"r1-n0": 1}),
        workload("large", queue="main", count=2, labels={"size": "2"}, required=RACK),
        workload("o0", queue="other", required=HOSTNAME),
    ]


def test_competing_workload_does_not_take_the_room_freed_for_the_preemptor(tmp_path: Path) -> None:
    data = simulate_json(competing_tree(), tmp_path)
    assert [a["workload"] for a in preempted(data)] == ["default/s0"]


# ------------------------------------------------------------------------------------------------
# Properties
# ------------------------------------------------------------------------------------------------

LEVEL_SETS = [(HOSTNAME,), (RACK, HOSTNAME), (BLOCK, RACK, HOSTNAME), (BLOCK, RACK), (RACK,)]


@st.composite
def placement_cases(draw: st.DrawFn) -> tuple[Any, NodeUsage, dict[str, int], int, dict[str, Any]]:
    levels = draw(st.sampled_from(LEVEL_SETS))
    count_nodes = draw(st.integers(1, 8))
    nodes = []
    used: dict[str, dict[str, int]] = {}
    for i in range(count_nodes):
        labels = {lv: f"{lv.rsplit('/', 1)[-1]}-{draw(st.integers(0, 2))}" for lv in levels if lv != HOSTNAME}
        allocatable = {"cpu": draw(st.integers(0, 8)) * 500, "gpu": draw(st.integers(0, 4))}
        nodes.append(node_record(f"n{i}", labels, **allocatable))
        used[f"n{i}"] = {"cpu": draw(st.integers(0, 10)) * 500, "gpu": draw(st.integers(0, 4))}
    per_pod = {"cpu": draw(st.integers(0, 4)) * 500, "gpu": draw(st.integers(0, 2))}
    count = draw(st.integers(1, 10))
    kind = draw(st.sampled_from(["required", "preferred", "none"]))
    options: dict[str, Any] = {}
    if kind != "none":
        options[kind] = draw(st.sampled_from(levels))
    if draw(st.booleans()):
        options["node_selector"] = {HOSTNAME: f"n{draw(st.integers(0, count_nodes - 1))}"}
    return view(levels, nodes), NodeUsage(used), per_pod, count, options


@pytest.mark.slow
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(placement_cases())
def test_property_placement_respects_each_nodes_allocatable(
    case: tuple[Any, NodeUsage, dict[str, int], int, dict[str, Any]],
) -> None:
    v, used, per_pod, count, options = case
    placement = place(v, used, per_pod, count, **options)
    by_name = {n.name: n for n in v.nodes}
    # Kueue filters nodes by the selector only when the hostname is the lowest level.
    selector_ = options.get("node_selector", {}) if v.reports_hostname else {}
    eligible = [n for n in v.nodes if all(n.labels.get(k) == val for k, val in selector_.items())]
    capacity = {n.name: node_capacity(n, used.used.get(n.name, {}), per_pod) for n in eligible}
    if placement is None:
        # Complete: with no level, None only when the eligible nodes cannot hold the pods.
        if "required" not in options and "preferred" not in options:
            assert sum(capacity.values()) < count
        if "required" in options and options["required"] in v.levels:
            depth = v.levels.index(options["required"]) + 1
            per_domain: dict[tuple[str, ...], int] = {}
            for n in eligible:
                per_domain[v.domain(n, depth)] = per_domain.get(v.domain(n, depth), 0) + capacity[n.name]
            assert max(per_domain.values(), default=0) < count
        return
    assert sum(p for _, p in placement.nodes) == count
    assert len({name for name, _ in placement.nodes}) == len(placement.nodes)
    for name, pods in placement.nodes:
        assert pods > 0 and name in capacity
        node_ = by_name[name]
        for resource, amount in per_pod.items():
            if amount > 0:
                after = used.used.get(name, {}).get(resource, 0) + pods * amount
                assert after <= node_.allocatable.get(resource, 0), (name, resource)
    if "required" in options:
        depth = v.levels.index(options["required"]) + 1
        assert len({v.domain(by_name[name], depth) for name, _ in placement.nodes}) == 1
    # The wire form decodes back to the same pods.
    assert sum(p for _, p in decode_assignment(placement.wire())) == count


@st.composite
def tas_clusters(draw: st.DrawFn) -> tuple[list[Obj], dict[str, str], dict[str, int], dict[str, str]]:
    """2-3 racks x 1-3 nodes (2-4 cpu); small admitted workloads (label size=1, 1-2 cpu, one pod, on
    a node with room); a pending large job (size=2, 2-4 pods of 1-2 cpu, required rack) in the same
    ClusterQueue, whose only rule is the topology tier with `size` LessThan (so nobody preempts it
    back); half of the time a second ClusterQueue `other`, in its own cohort tree, with pending small
    workloads on the same nodes. Returns the objects, node -> rack, node -> cpu, victim-able
    workload -> node."""
    racks = draw(st.integers(2, 3))
    objects: list[Obj] = [
        *basics(levels=[RACK, HOSTNAME]),
        cluster_queue("a", 100, flavor=TAS_FLAVOR, config=CONFIG),
        local_queue("main", "a"),
        preemption_config(
            CONFIG,
            rule(
                "defrag",
                selector("WithinClusterQueue", numericLabels=[{"key": "size", "comparison": "LessThan"}]),
                trigger=QFIT,
            ),
        ),
    ]
    rack_of: dict[str, str] = {}
    cpu_of: dict[str, int] = {}
    for r in range(racks):
        for h in range(draw(st.integers(1, 3))):
            name = f"r{r}-n{h}"
            rack_of[name] = f"rack-{r}"
            cpu_of[name] = draw(st.integers(2, 4))
            objects.append(node(name, {RACK: f"rack-{r}"}, cpu=cpu_of[name]))
    where: dict[str, str] = {}
    for host in sorted(cpu_of):
        free = cpu_of[host]
        for _ in range(draw(st.integers(1, 3))):
            cpu = draw(st.integers(1, 2))
            if free < cpu:
                break
            free -= cpu
            name = f"s{len(where)}"
            minute = draw(st.integers(0, 59))
            wl = workload(name, cpu=cpu, queue="main", labels={"size": "1"}, required=HOSTNAME)
            objects.append(wl.on_nodes("a", {host: 1}, at=T0 + timedelta(minutes=minute)).obj())
            where[name] = host
    # Sometimes a second ClusterQueue, in another cohort tree and without a config, has pending small
    # workloads that compete for the same nodes in the same cycles.
    if draw(st.booleans()):
        objects += [cluster_queue("other", 100, flavor=TAS_FLAVOR), local_queue("other", "other")]
        for i in range(draw(st.integers(1, 3))):
            objects.append(workload(f"o{i}", cpu=draw(st.integers(1, 2)), queue="other", required=HOSTNAME).obj())
    # The job nearly fills the largest emptied rack, so that it usually needs victims; one time in
    # ten it is one pod too large for any rack.
    cpu = draw(st.integers(1, 2))
    rack_pods: dict[str, int] = {}
    for host, rack in rack_of.items():
        rack_pods[rack] = rack_pods.get(rack, 0) + cpu_of[host] // cpu
    largest = max(rack_pods.values())
    count = largest + 1 if draw(st.integers(0, 9)) == 0 else largest - draw(st.integers(0, 1))
    count = max(count, 2)
    objects.append(workload("large", cpu=cpu, queue="main", count=count, labels={"size": "2"}, required=RACK).obj())
    return objects, rack_of, cpu_of, where


def node_usage_after(data: Mapping[str, Any], objects: list[Obj]) -> dict[str, int]:
    """Milli-cpu per node over the admitted workloads of the final state."""
    per_pod = {
        o["metadata"]["name"]: int(
            o["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"]
        )
        * 1000
        for o in objects
        if o["kind"] == "Workload"
    }
    used: dict[str, int] = {}
    for name, status in statuses(data).items():
        if not is_admitted(status):
            continue
        for host, pods in pods_per_node(topology_assignment(status)).items():
            used[host] = used.get(host, 0) + pods * per_pod[name]
    return used


@pytest.mark.slow
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(tas_clusters())
def test_property_topology_victims_free_the_preemptors_rack(
    case: tuple[list[Obj], dict[str, str], dict[str, int], dict[str, str]],
) -> None:
    objects, rack_of, cpu_of, where = case
    data = simulate_run(objects)
    assert not any("max-cycles" in w for w in data["warnings"]), data["warnings"]
    final = statuses(data)
    victims = preempted(data)
    event(f"victims: {min(len(victims), 3)}{'+' if len(victims) > 3 else ''}")
    assert all(a["preemptor"] == "default/large" and a["reason"] == CONFIGURABLE for a in victims), victims
    # No node is over-committed after the simulation.
    for host, used in node_usage_after(data, objects).items():
        assert used <= cpu_of[host] * 1000, (host, used)
    large = next(o for o in objects if o["metadata"]["name"] == "large")
    count = large["spec"]["podSets"][0]["count"]
    cpu = int(large["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"])
    shared = "o0" in final
    event(f"shared nodes: {shared}")
    # Liveness: the job ends admitted whenever some rack, emptied, holds it.
    rack_pods: dict[str, int] = {}
    for host, rack in rack_of.items():
        rack_pods[rack] = rack_pods.get(rack, 0) + cpu_of[host] // cpu
    if not shared:
        assert is_admitted(final["large"]) == (max(rack_pods.values()) >= count)
    event(f"large admitted: {is_admitted(final['large'])}")
    if not is_admitted(final["large"]):
        if not shared:
            assert victims == []
        return
    hosts = pods_per_node(topology_assignment(final["large"]))
    [rack] = {rack_of[h] for h in hosts}
    elsewhere = [a for a in victims if rack_of[where[a["workload"].split("/", 1)[1]]] != rack]
    if shared:
        # Known gap (see test_competing_workload_does_not_take_the_room_freed_for_the_preemptor): a
        # workload of the other tree admitted in the preemption's cycle may take free room the plan
        # counted on, so the job preempts again elsewhere.
        event(f"shared: victims outside the final rack: {bool(elsewhere)}")
        return
    # Every victim (each was necessary, after fill-back) ran in the rack the job finally got.
    assert elsewhere == [], (elsewhere, rack)
    # A victim is preempted once and chosen in the first cycle.
    assert len({a["workload"] for a in victims}) == len(victims)
    assert {a["cycle"] for a in victims} <= {1}


def test_capacities_remembered_across_snapshots_follow_each_snapshots_own_usage() -> None:
    """Capacities are remembered per node revision for every memo and snapshot of the process:
    two copies of one usage changed differently (two cycles' snapshots, or a victim search and
    the cycle around it) each see their own node's capacity, a node whose allocatable changed is
    computed again, and an unchanged node is not."""
    view = two_racks(cpu=4)
    base = usage(**{view.nodes[0].name: 1})
    per_pod = {"cpu": 1000}
    first, second = CapacityMemo(), CapacityMemo()
    assert first.capacities(view, base, per_pod)[0] == 3
    one, other = base.copy(), base.copy()
    one.add({view.nodes[0].name: {"cpu": 2000}})
    other.add({view.nodes[0].name: {"cpu": 1000}})
    assert first.capacities(view, one, per_pod)[0] == 1
    assert second.capacities(view, other, per_pod)[0] == 2
    assert first.capacities(view, base, per_pod)[0] == 3
    bigger = dataclasses.replace(view.nodes[0], allocatable={**view.nodes[0].allocatable, "cpu": 8000})
    grown = dataclasses.replace(view, nodes=(bigger, *view.nodes[1:]))
    assert second.capacities(grown, base, per_pod)[0] == 7
    # A pod of another shape on the same nodes is its own entry.
    assert second.capacities(view, base, {"cpu": 2000})[0] == 1
