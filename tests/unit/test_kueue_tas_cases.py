"""Kueue's own TAS placement cases, replayed through our placement.

tests/fixtures/kueue-tas-cases.json holds the cases of Kueue v0.19.2's TestFindTopologyAssignments
(pkg/cache/scheduler/tas_cache_test.go) that our engine models, as data (hack/kueue-tas-cases.sh
writes it from Kueue's source): nodes, the topology's levels, and per pod set its topology request,
requests, count, tolerations, node selector and affinity, with the assignment or the failure
message Kueue's test expects. Each pod set is placed on what the earlier ones of the case left,
as Kueue places the pod sets of one flavor.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from preemption_operator.api.core import Node
from preemption_operator.api.v1beta2 import ResourceFlavor, Topology
from preemption_operator.engine.placement import NodeFilter, NodeUsage, Placement, TopologyRequest, find
from preemption_operator.engine.tas_state import TasState
from preemption_operator.engine.topology_assignment import HOSTNAME

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "kueue-tas-cases.json"
CASES: dict[str, Any] = json.loads(FIXTURE.read_text())["cases"]
KUEUE = "kueue.x-k8s.io/v1beta2"


def node(data: dict[str, Any]) -> Node:
    return Node.model_validate(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": data["name"], "labels": data["labels"]},
            "spec": {"unschedulable": data.get("unschedulable", False), "taints": data.get("taints") or []},
            "status": {"allocatable": data["allocatable"], "conditions": data["conditions"]},
        }
    )


def state(case: dict[str, Any]) -> TasState:
    topology = Topology.model_validate(
        {
            "apiVersion": KUEUE,
            "kind": "Topology",
            "metadata": {"name": "default"},
            "spec": {"levels": [{"nodeLabel": level} for level in case["levels"]]},
        }
    )
    flavor = ResourceFlavor.model_validate(
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": {"name": "tas"},
            "spec": {"nodeLabels": case["nodeLabels"], "topologyName": "default"},
        }
    )
    nodes = {n.name: n for n in map(node, case["nodes"])}
    return TasState.build(nodes, {"default": topology}, {"tas": flavor})


def request(pod_set: dict[str, Any]) -> TopologyRequest:
    asked = pod_set.get("topologyRequest") or {}
    layers = asked.get("podsetSliceRequiredTopologyConstraints") or []
    return TopologyRequest(
        required=asked.get("required"),
        preferred=asked.get("preferred"),
        unconstrained=bool(asked.get("unconstrained")),
        slice_level=asked.get("podSetSliceRequiredTopology"),
        slice_size=asked.get("podSetSliceSize"),
        layers=tuple((layer["topology"], layer["size"]) for layer in layers),
    )


def node_filter(pod_set: dict[str, Any]) -> NodeFilter:
    required = (pod_set.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    return NodeFilter(
        node_selector=pod_set.get("nodeSelector") or {},
        tolerations=tuple(pod_set.get("tolerations") or ()),
        affinity=None if required is None else tuple(required.get("nodeSelectorTerms") or ()),
    )


def test_the_fixture_covers_the_features_placement_models() -> None:
    requests = [ps.get("topologyRequest") or {} for case in CASES.values() for ps in case["podSets"]]
    assert len(CASES) >= 60
    for key in ("required", "preferred", "unconstrained", "podSetSliceRequiredTopology"):
        assert any(key in r for r in requests), key
    assert any("podsetSliceRequiredTopologyConstraints" in r for r in requests)
    assert any(not r for r in requests)  # implied: no request at all
    pod_sets = [ps for case in CASES.values() for ps in case["podSets"]]
    for key in ("tolerations", "nodeSelector", "wantReason"):
        assert any(key in ps for ps in pod_sets), key
    assert any(n.get("taints") for case in CASES.values() for n in case["nodes"])
    assert any(
        c["status"] != "True" for case in CASES.values() for n in case["nodes"] for c in n["conditions"]
    )  # a node that is not Ready


@pytest.mark.parametrize("name", sorted(CASES))
def test_kueue_case(name: str) -> None:
    case = CASES[name]
    view = state(case).views["tas"]
    usage = NodeUsage()
    for pod_set in case["podSets"]:
        per_pod = {resource: int(amount) for resource, amount in pod_set["requests"].items()}
        found = find(view, usage, per_pod, pod_set["count"], request(pod_set), node_filter(pod_set))
        if "wantReason" in pod_set:
            assert found == pod_set["wantReason"]
            return  # Kueue stops at the first pod set that does not fit
        assert isinstance(found, Placement), found
        levels = [HOSTNAME] if view.reports_hostname else list(view.levels)
        got = {"levels": levels, "domains": [[*values, pods] for values, pods in found.domains()]}
        assert got == pod_set.get("wantAssignment", {"levels": levels, "domains": []})
        usage.add(found.usage(per_pod))
