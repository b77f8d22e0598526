"""Topology-aware placement of pod set slices (Kueue's podSetSliceRequiredTopology and
podSetSliceSize): groups of `size` pods, each inside one domain of the slice level, with the pod
set's own required, preferred or no level around them. Also the fields' validation, the Job
annotations that ask for slices, and how long one placement takes on Kueue's TAS benchmark
topology.

Kueue's own placement cases, slices included, run in test_kueue_tas_cases.py.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import (
    BLOCK,
    RACK,
    Obj,
    basics,
    cache_of,
    cluster_queue,
    local_queue,
    node,
    node_record,
    view,
    workload,
)
from preemption_operator.api.objects import ObjectError, parse_object
from preemption_operator.engine.placement import (
    NodeUsage,
    Placement,
    TopologyRequest,
    find,
    node_capacity,
    place,
)
from preemption_operator.engine.scheduler import QueueState, Scheduler
from preemption_operator.engine.topology_assignment import HOSTNAME, decode_assignment
from preemption_operator.jobs import podsets

CPU = 1000
POD = {"cpu": CPU}
NOW = datetime(2026, 11, 30, tzinfo=UTC)


def nodes_of(levels: tuple[str, ...], *shape: tuple[str, str, int]) -> Any:
    """A view of nodes given as (rack, name, free pods of one cpu) in one block `b1`."""
    records = [
        node_record(name, {k: v for k, v in ((BLOCK, "b1"), (RACK, rack)) if k in levels}, cpu=pods * CPU)
        for rack, name, pods in shape
    ]
    return view(levels, records)


def pods_per(placement: Placement | None, level: str) -> dict[str, int]:
    """Pods per domain of `level` (a node's label value)."""
    assert placement is not None
    by_name = {n.name: n for n in placement.view.nodes}
    out: dict[str, int] = {}
    for name, pods in placement.nodes:
        value = by_name[name].labels[level]
        out[value] = out.get(value, 0) + pods
    return out


# ------------------------------------------------------------------------------------------------
# Placement
# ------------------------------------------------------------------------------------------------

LEVELS3 = (BLOCK, RACK, HOSTNAME)


def test_slices_only_keeps_every_slice_inside_one_rack() -> None:
    """Kueue's benchmark asks for rack slices only: placed from the widest level, unconstrained
    (least free first), so a rack that cannot hold a whole slice gets no pod."""
    v = nodes_of(LEVELS3, ("r1", "n1", 3), ("r2", "n2", 1), ("r2", "n3", 1), ("r3", "n4", 1))
    sliced = TopologyRequest(slice_level=RACK, slice_size=2)
    placement = place(v, None, POD, 4, sliced)
    assert placement == Placement(v, (("n1", 2), ("n2", 1), ("n3", 1)))
    assert pods_per(placement, RACK) == {"r1": 2, "r2": 2}
    # Pod by pod, the lone node of r3 would take one.
    assert place(v, None, POD, 4) == Placement(v, (("n1", 1), ("n2", 1), ("n3", 1), ("n4", 1)))
    # Three slices: only two racks hold one, whatever the pods left.
    assert find(v, None, POD, 6, sliced) == 'topology "tas-topology" allows to fit only 2 out of 3 slice(s)'


def test_required_rack_with_host_slices() -> None:
    v = nodes_of(LEVELS3, ("r1", "a", 3), ("r1", "b", 1), ("r1", "c", 2), ("r2", "d", 8))
    sliced = TopologyRequest(required=RACK, slice_level=HOSTNAME, slice_size=2)
    # The tightest rack holding two host slices is r1: a and c take one each, b (1 pod) none.
    assert place(v, None, POD, 4, sliced) == Placement(v, (("a", 2), ("c", 2)))
    # r1 has room for 6 pods but 2 slices only; r2 holds 4 slices.
    assert place(v, None, POD, 6, sliced) == Placement(v, (("d", 6),))
    assert place(v, None, POD, 6, TopologyRequest(required=RACK)) == Placement(v, (("a", 3), ("b", 1), ("c", 2)))
    message = find(v, None, POD, 10, sliced)
    assert message == 'topology "tas-topology" allows to fit only 4 out of 5 slice(s)'


def test_preferred_block_with_rack_slices_spreads_over_blocks_when_one_cannot_hold_them() -> None:
    records = [
        node_record("x1", {BLOCK: "b1", RACK: "r1"}, cpu=2 * CPU),
        node_record("x2", {BLOCK: "b1", RACK: "r2"}, cpu=1 * CPU),
        node_record("x3", {BLOCK: "b2", RACK: "r3"}, cpu=2 * CPU),
    ]
    v = view(LEVELS3, records)
    placement = place(v, None, POD, 4, TopologyRequest(preferred=BLOCK, slice_level=RACK, slice_size=2))
    assert placement == Placement(v, (("x1", 2), ("x3", 2)))
    assert place(v, None, POD, 4, TopologyRequest(required=BLOCK, slice_level=RACK, slice_size=2)) is None


def test_a_count_not_divisible_by_the_slice_size_places_the_whole_slices_only() -> None:
    """As Kueue: 5 pods in slices of 2 get an assignment for 4 (its workload keeps count 5)."""
    v = nodes_of(LEVELS3, ("r1", "a", 8))
    placement = place(v, None, POD, 5, TopologyRequest(slice_level=RACK, slice_size=2))
    assert placement == Placement(v, (("a", 4),))
    assert place(v, None, POD, 1, TopologyRequest(slice_level=RACK, slice_size=2)) == Placement(v, ())


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (TopologyRequest(slice_level=RACK), "slice topology requested, but slice size not provided"),
        (TopologyRequest(slice_level=RACK, slice_size=0), "slice topology requested, but slice size not provided"),
        (TopologyRequest(required="zone", slice_level=RACK, slice_size=1), "no requested topology level: zone"),
        (TopologyRequest(slice_level="zone", slice_size=1), "no requested topology level for slices: zone"),
        (
            TopologyRequest(required=RACK, slice_level=BLOCK, slice_size=1),
            f"podset slice topology {BLOCK} is above the podset topology {RACK}",
        ),
        (
            TopologyRequest(layers=((BLOCK, 4), (RACK, 3))),
            "additional slice layer size 3 must evenly divide parent layer size 4",
        ),
        (
            TopologyRequest(layers=((RACK, 4), (BLOCK, 2))),
            f"additional slice layer topology {BLOCK} must be at a lower level than {RACK}",
        ),
        (
            TopologyRequest(layers=((RACK, 4), ("zone", 2))),
            "no requested topology level for additional slice layer: zone",
        ),
    ],
)
def test_requests_that_cannot_be_placed_say_why_in_kueues_words(request_: TopologyRequest, message: str) -> None:
    v = nodes_of(LEVELS3, ("r1", "a", 8))
    assert find(v, None, POD, 4, request_) == message


def test_slice_layers_group_pods_at_each_layer() -> None:
    """Rack slices of 4 made of host slices of 2: a host with 3 free pods holds one host slice, so
    each rack holds one rack slice (a rack of two such hosts has room for 6 pods, not 8)."""
    v = nodes_of(LEVELS3, ("r1", "a", 3), ("r1", "b", 3), ("r2", "c", 2), ("r2", "d", 2))
    layers = TopologyRequest(required=BLOCK, layers=((RACK, 4), (HOSTNAME, 2)))
    assert place(v, None, POD, 4, layers) == Placement(v, (("a", 2), ("b", 2)))
    assert place(v, None, POD, 8, layers) == Placement(v, (("a", 2), ("b", 2), ("c", 2), ("d", 2)))
    assert place(v, None, POD, 6, TopologyRequest(required=RACK)) == Placement(v, (("a", 3), ("b", 3)))
    message = find(v, None, POD, 12, layers)
    assert message == (
        'topology "tas-topology" doesn\'t allow to fit; 2/3 slice(s) fit on level '
        f"{RACK}; 4/6 slice(s) fit on level {HOSTNAME}"
    )


# ------------------------------------------------------------------------------------------------
# Properties
# ------------------------------------------------------------------------------------------------


@st.composite
def sliced_cases(draw: st.DrawFn) -> tuple[Any, NodeUsage, int, TopologyRequest]:
    records, used = [], {}
    for i in range(draw(st.integers(1, 12))):
        levels = {BLOCK: f"b{draw(st.integers(0, 1))}", RACK: f"r{draw(st.integers(0, 2))}"}
        records.append(node_record(f"n{i:02d}", levels, cpu=draw(st.integers(0, 6)) * CPU))
        used[f"n{i:02d}"] = {"cpu": draw(st.integers(0, 3)) * CPU}
    slice_idx = draw(st.integers(0, 2))
    kind = draw(st.sampled_from(["required", "preferred", "none"]))
    level = draw(st.sampled_from(LEVELS3[: slice_idx + 1]))
    request = TopologyRequest(
        required=level if kind == "required" else None,
        preferred=level if kind == "preferred" else None,
        slice_level=LEVELS3[slice_idx],
        slice_size=draw(st.integers(1, 4)),
    )
    return view(LEVELS3, records), NodeUsage(used), draw(st.integers(1, 16)), request


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(sliced_cases())
def test_property_every_slice_lands_in_one_domain_of_the_slice_level(
    case: tuple[Any, NodeUsage, int, TopologyRequest],
) -> None:
    v, usage, count, request = case
    assert request.slice_level is not None and request.slice_size is not None
    size, slice_level = request.slice_size, request.slice_level
    depth = v.levels.index(slice_level) + 1
    capacity = {n.name: node_capacity(n, usage.used.get(n.name, {}), POD) for n in v.nodes}
    found = find(v, usage, POD, count, request)
    slices_per_domain: dict[tuple[str, ...], int] = {}
    for n in v.nodes:
        key = v.domain(n, depth)
        slices_per_domain[key] = slices_per_domain.get(key, 0) + capacity[n.name]
    slices_per_domain = {key: pods // size for key, pods in slices_per_domain.items()}
    if isinstance(found, str):
        assert "slice(s)" in found or "pod(s)" in found
        if request.required is None:
            # Complete: every slice-level domain together holds fewer whole slices than needed.
            assert sum(slices_per_domain.values()) < count // size
        return
    by_name = {n.name: n for n in v.nodes}
    in_domain: dict[tuple[str, ...], int] = {}
    for name, pods in found.nodes:
        assert 0 < pods <= capacity[name]
        key = v.domain(by_name[name], depth)
        in_domain[key] = in_domain.get(key, 0) + pods
    # Each slice-level domain holds whole slices, so every slice fits in one; the total is the
    # pod count, or its whole slices only when the count is not a multiple of the size.
    assert all(pods % size == 0 for pods in in_domain.values())
    assert sum(in_domain.values()) == count // size * size
    if count % size == 0:
        assert sum(in_domain.values()) == count
    if request.required is not None:
        req_depth = v.levels.index(request.required) + 1
        assert len({v.domain(by_name[name], req_depth) for name, _ in found.nodes}) <= 1
    assert sum(p for _, p in decode_assignment(found.wire())) == sum(in_domain.values())


# ------------------------------------------------------------------------------------------------
# Through the engine
# ------------------------------------------------------------------------------------------------


def rack_cluster(*extra: Obj) -> list[Obj]:
    return [
        *basics(levels=[BLOCK, RACK, HOSTNAME]),
        cluster_queue("a", 100, flavor="tas"),
        local_queue("main", "a"),
        node("n1", {BLOCK: "b1", RACK: "r1"}, cpu=3),
        node("n2", {BLOCK: "b1", RACK: "r2"}, cpu=1),
        node("n3", {BLOCK: "b1", RACK: "r2"}, cpu=1),
        node("n4", {BLOCK: "b1", RACK: "r3"}, cpu=1),
        *extra,
    ]


def cycle(objects: list[Obj]) -> Any:
    return Scheduler().cycle(cache_of(objects).snapshot(NOW), QueueState())


def test_an_admitted_sliced_workload_is_written_with_its_slices_in_racks() -> None:
    result = cycle(rack_cluster(workload("w", queue="main", count=4, slice_level=RACK, slice_size=2)))
    [admitted] = result.admitted
    assignment = admitted.pod_sets[0]["topologyAssignment"]
    assert isinstance(assignment, dict)
    assert decode_assignment(assignment) == [
        ({HOSTNAME: "n1"}, 2),
        ({HOSTNAME: "n2"}, 1),
        ({HOSTNAME: "n3"}, 1),
    ]


def test_a_sliced_workload_that_does_not_fit_is_pending_with_kueues_message() -> None:
    result = cycle(rack_cluster(workload("w", queue="main", count=6, slice_level=RACK, slice_size=2)))
    [pending] = [p for p in result.pending if p.workload.name == "w"]
    assert pending.reason == "TopologyPlacementFailed"
    assert pending.message == (
        'couldn\'t assign flavors to pod set main: topology "tas-topology" allows to fit only 2 out of 3 slice(s)'
    )


def test_a_flavor_without_the_slice_level_is_passed_over() -> None:
    result = cycle(rack_cluster(workload("w", queue="main", count=2, slice_level="zone", slice_size=2)))
    [pending] = [p for p in result.pending if p.workload.name == "w"]
    assert (
        pending.message == 'couldn\'t assign flavors to pod set main: Flavor "tas" does not contain the requested level'
    )


def test_the_slice_fields_reach_the_engine_and_its_equivalence_shape() -> None:
    from preemption_operator.engine.workload import scheduling_shape

    cache = cache_of(rack_cluster(workload("w", queue="main", count=4, slice_level=RACK, slice_size=2)))
    info = cache.infos["default/w"]
    [pod_set] = info.pod_sets
    assert (pod_set.slice_topology, pod_set.slice_size) == (RACK, 2)
    assert pod_set.topology_request == TopologyRequest(slice_level=RACK, slice_size=2)
    other = cache_of(rack_cluster(workload("w", queue="main", count=4, slice_level=RACK, slice_size=1)))
    assert scheduling_shape(info) != scheduling_shape(other.infos["default/w"])


# ------------------------------------------------------------------------------------------------
# Validation (Kueue's Workload webhook) and the Job annotations
# ------------------------------------------------------------------------------------------------


def sliced_workload(**topology_request: Any) -> Obj:
    body = workload("w", queue="main").obj()
    body["spec"]["podSets"][0]["topologyRequest"] = topology_request
    return body


@pytest.mark.parametrize(
    ("topology_request", "problem"),
    [
        (
            {"podSetSliceRequiredTopology": RACK},
            "spec.podSets[0].topologyRequest.podSetSliceSize: Required value: "
            "must be set when podSetSliceRequiredTopology is specified",
        ),
        (
            {"podSetSliceRequiredTopology": RACK, "podSetSliceSize": 0},
            "spec.podSets[0].topologyRequest.podSetSliceSize: Invalid value: 0: must be greater than 0",
        ),
        (
            {"podSetSliceSize": 2},
            "spec.podSets[0].topologyRequest.podSetSliceSize: Forbidden: "
            "may not be set when podSetSliceRequiredTopology is not specified",
        ),
    ],
)
def test_kueues_webhook_rules_for_the_slice_fields(topology_request: dict[str, Any], problem: str) -> None:
    with pytest.raises(ObjectError) as refused:
        parse_object(sliced_workload(**topology_request))
    assert problem in str(refused.value)


def test_valid_slice_fields_parse() -> None:
    parsed = parse_object(sliced_workload(podSetSliceRequiredTopology=RACK, podSetSliceSize=2, required=BLOCK))
    request = parsed.spec.pod_sets[0].topology_request
    assert (request.pod_set_slice_required_topology, request.pod_set_slice_size) == (RACK, 2)
    layers = [{"topology": RACK, "size": 4}, {"topology": HOSTNAME, "size": 2}]
    parsed = parse_object(sliced_workload(podsetSliceRequiredTopologyConstraints=layers))
    assert [
        (x.topology, x.size)
        for x in parsed.spec.pod_sets[0].topology_request.podset_slice_required_topology_constraints
    ] == [
        (RACK, 4),
        (HOSTNAME, 2),
    ]


def template(**annotations: str) -> dict[str, Any]:
    return {"metadata": {"annotations": annotations}, "spec": {}}


def test_job_annotations_ask_for_slices_as_in_kueue() -> None:
    index = "batch.kubernetes.io/job-completion-index"
    assert podsets.topology_request(
        template(**{podsets.SLICE_REQUIRED_TOPOLOGY: RACK, podsets.SLICE_SIZE: "2"}), index
    ) == {"podSetSliceRequiredTopology": RACK, "podSetSliceSize": 2, "podIndexLabel": index}
    assert podsets.topology_request(
        template(**{podsets.REQUIRED_TOPOLOGY: BLOCK, podsets.SLICE_REQUIRED_TOPOLOGY: RACK, podsets.SLICE_SIZE: "4"}),
        None,
    ) == {"required": BLOCK, "podSetSliceRequiredTopology": RACK, "podSetSliceSize": 4}
    layers = f'[{{"topology": "{RACK}", "size": 4}}, {{"topology": "{HOSTNAME}", "size": 2}}]'
    assert podsets.topology_request(template(**{podsets.SLICE_REQUIRED_TOPOLOGY_CONSTRAINTS: layers}), None) == {
        "podsetSliceRequiredTopologyConstraints": [{"topology": RACK, "size": 4}, {"topology": HOSTNAME, "size": 2}]
    }
    # A slice level without its size (Kueue's webhook refuses the Job) asks for nothing.
    assert podsets.topology_request(template(**{podsets.SLICE_REQUIRED_TOPOLOGY: RACK}), None) is None
    assert (
        podsets.topology_request(template(**{podsets.SLICE_REQUIRED_TOPOLOGY: RACK, podsets.SLICE_SIZE: "x"}), None)
        is None
    )


def job_body(count: int = 4, **annotations: str) -> dict[str, Any]:
    template = {"metadata": {"annotations": annotations}, "spec": {"containers": []}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns", "labels": {"kueue.x-k8s.io/queue-name": "main"}},
        "spec": {"parallelism": count, "completions": count, "template": template},
    }


ANNOTATIONS = "spec.template.metadata.annotations"


@pytest.mark.parametrize(
    ("annotations", "errors"),
    [
        ({podsets.SLICE_REQUIRED_TOPOLOGY: RACK, podsets.SLICE_SIZE: "2"}, []),
        (
            {podsets.SLICE_REQUIRED_TOPOLOGY: RACK},
            [
                f"{ANNOTATIONS}[{podsets.SLICE_SIZE}]: Required value: "
                f"must be set when '{podsets.SLICE_REQUIRED_TOPOLOGY}' is specified"
            ],
        ),
        (
            {podsets.SLICE_SIZE: "2"},
            [
                f"{ANNOTATIONS}[{podsets.SLICE_SIZE}]: Forbidden: "
                f"may not be set when '{podsets.SLICE_REQUIRED_TOPOLOGY}' is not specified"
            ],
        ),
        (
            {podsets.SLICE_REQUIRED_TOPOLOGY: RACK, podsets.SLICE_SIZE: "two"},
            [f'{ANNOTATIONS}[{podsets.SLICE_SIZE}]: Invalid value: "two": must be a numeric value'],
        ),
        (
            {podsets.SLICE_REQUIRED_TOPOLOGY: RACK, podsets.SLICE_SIZE: "0"},
            [f'{ANNOTATIONS}[{podsets.SLICE_SIZE}]: Invalid value: "0": must be greater than or equal to 1'],
        ),
        (
            {podsets.SLICE_REQUIRED_TOPOLOGY: RACK, podsets.SLICE_SIZE: "8"},
            [f'{ANNOTATIONS}[{podsets.SLICE_SIZE}]: Invalid value: "8": must not be greater than pod set count 4'],
        ),
        (
            {podsets.REQUIRED_TOPOLOGY: RACK, podsets.PREFERRED_TOPOLOGY: BLOCK},
            [
                f"{ANNOTATIONS}: Invalid value: must not contain more than one topology annotation: "
                f'["{podsets.REQUIRED_TOPOLOGY}", "{podsets.PREFERRED_TOPOLOGY}", "{podsets.UNCONSTRAINED_TOPOLOGY}"]'
            ],
        ),
        (
            {podsets.UNCONSTRAINED_TOPOLOGY: "maybe"},
            [f'{ANNOTATIONS}[{podsets.UNCONSTRAINED_TOPOLOGY}]: Invalid value: "maybe": must be a boolean value'],
        ),
    ],
)
def test_the_job_webhook_checks_topology_annotations_as_kueues(annotations: dict[str, str], errors: list[str]) -> None:
    from preemption_operator.jobs import batch_job

    body = job_body(**annotations)
    assert batch_job.validate(body, None) == errors
    assert batch_job.validate(body, body) == errors


def test_the_jobset_webhook_checks_each_replicated_jobs_template() -> None:
    from preemption_operator.jobs import jobset

    job_template = job_body(2, **{podsets.SLICE_REQUIRED_TOPOLOGY: RACK, podsets.SLICE_SIZE: "4"})["spec"]
    body = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ns", "labels": {"kueue.x-k8s.io/queue-name": "main"}},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": job_template}}]},
    }
    assert jobset.validate(body, None) == [
        "spec.replicatedJobs[0].template.spec.template.metadata.annotations"
        f'[{podsets.SLICE_SIZE}]: Invalid value: "4": must not be greater than pod set count 2'
    ]


# ------------------------------------------------------------------------------------------------
# Speed
# ------------------------------------------------------------------------------------------------


def test_one_placement_on_kueues_benchmark_topology_is_quick() -> None:
    """1 block x 10 racks x 64 nodes of 96 cpu (Kueue's TAS benchmark); half the nodes half full."""
    records, used = [], {}
    for r in range(10):
        for h in range(64):
            name = f"r{r}-n{h:02d}"
            records.append(node_record(name, {BLOCK: "b0", RACK: f"r{r}"}, cpu=96 * CPU, pods=110))
            if h % 2:
                used[name] = {"cpu": 48 * CPU, "pods": 4}
    v = view(LEVELS3, records)
    usage = NodeUsage(used)
    requests = [
        TopologyRequest(required=RACK),
        TopologyRequest(preferred=RACK),
        TopologyRequest(slice_level=RACK, slice_size=4),
    ]
    for request in requests:
        place(v, usage, {"cpu": 2500}, 8, request)  # builds the view's domains once
        started = time.perf_counter()
        for _ in range(10):
            assert place(v, usage, {"cpu": 2500}, 8, request) is not None
        each = (time.perf_counter() - started) / 10
        assert each < 0.05, f"{request}: {each * 1000:.1f} ms a placement"
