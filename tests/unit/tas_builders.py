"""Builders for topology-aware scheduling (TAS) tests, in wire form (camelCase dicts).

Conventions: the TAS flavor is `tas` (nodeLabels `tas-node: "true"`), its Topology is `tas-topology`,
workloads live in namespace `default`, UIDs equal names, every admitted workload reserved quota at
`RESERVED` unless stated. A node's `levels` map a topology level's label to its value; the hostname
label defaults to the node's name.

    objects = [
        *tas_basics(HOSTNAME),
        node("x1", cpu=2), node("x2", cpu=2),
        tas_cluster_queue("a", cpu=4, config="default-config"),
        local_queue("main", "a"),
        on_nodes(tas_workload("a1", cpu=1), "a", {"x1": 1}),
        tas_workload("incoming", cpu=1, count=2, required=HOSTNAME),
    ]

Engine-level objects (`TopologyView`, `NodeRecord`) for `engine/topology.py` come from `view` and
`node_record`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from preemption_operator.engine.placement import HOSTNAME, NodeRecord, TopologyView

from .configurable_builders import CREATED, KUEUE, RESERVED, local_queue, namespace

Obj = dict[str, Any]

TAS_FLAVOR = "tas"
TOPOLOGY = "tas-topology"
POOL_LABEL = "tas-node"
BLOCK = "example.com/block"
RACK = "example.com/rack"
SUBRACK = "example.com/subrack"

__all__ = [
    "BLOCK",
    "HOSTNAME",
    "POOL_LABEL",
    "RACK",
    "SUBRACK",
    "TAS_FLAVOR",
    "TOPOLOGY",
    "hostname_assignment",
    "local_queue",
    "node",
    "node_record",
    "on_nodes",
    "tas_basics",
    "tas_cluster_queue",
    "tas_flavor",
    "tas_workload",
    "topology",
    "view",
]


def _meta(name: str, namespace_name: str | None = None, **extra: Any) -> Obj:
    meta: Obj = {"name": name, "uid": extra.pop("uid", None) or name, "creationTimestamp": CREATED}
    if namespace_name is not None:
        meta["namespace"] = namespace_name
    for key, value in extra.items():
        if value:
            meta[key] = dict(value)
    return meta


# -- cluster objects --------------------------------------------------------------------------------


def topology(*levels: str, name: str = TOPOLOGY) -> Obj:
    """A Topology with `levels` from the widest to the narrowest."""
    return {
        "apiVersion": KUEUE,
        "kind": "Topology",
        "metadata": _meta(name),
        "spec": {"levels": [{"nodeLabel": level} for level in levels]},
    }


def tas_flavor(
    name: str = TAS_FLAVOR, topology_name: str = TOPOLOGY, node_labels: Mapping[str, str] | None = None
) -> Obj:
    labels = dict(node_labels) if node_labels is not None else {POOL_LABEL: "true"}
    return {
        "apiVersion": KUEUE,
        "kind": "ResourceFlavor",
        "metadata": _meta(name),
        "spec": {"nodeLabels": labels, "topologyName": topology_name},
    }


def tas_basics(*levels: str, namespaces: Sequence[str] = ("default",)) -> list[Obj]:
    """The namespaces, the Topology `tas-topology` with `levels` and the flavor `tas`."""
    return [*(namespace(ns) for ns in namespaces), topology(*levels), tas_flavor()]


def node(
    name: str,
    levels: Mapping[str, str] | None = None,
    *,
    cpu: int | str | None = None,
    allocatable: Mapping[str, int | str] | None = None,
    labels: Mapping[str, str] | None = None,
    unschedulable: bool = False,
    pool: bool = True,
    hostname: str | None = None,
) -> Obj:
    """A Ready Node. `levels` are its topology labels; `kubernetes.io/hostname` is `hostname` (default:
    the name); `pool` adds the TAS flavor's node label; `cpu` is shorthand for allocatable cpu."""
    all_labels: dict[str, str] = {HOSTNAME: hostname or name}
    all_labels.update(levels or {})
    if pool:
        all_labels[POOL_LABEL] = "true"
    all_labels.update(labels or {})
    resources: dict[str, str] = {k: str(v) for k, v in (allocatable or {}).items()}
    if cpu is not None:
        resources["cpu"] = str(cpu)
    resources.setdefault("pods", "110")
    body: Obj = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": name, "creationTimestamp": CREATED, "labels": all_labels},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}],
        },
    }
    return body


def tas_cluster_queue(
    name: str,
    cpu: int | str | None = None,
    *,
    quota: Mapping[str, int | str] | None = None,
    flavor: str = TAS_FLAVOR,
    cohort: str | None = None,
    config: str | None = None,
    preemption: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
) -> Obj:
    """A ClusterQueue admitting from every namespace with one (TAS) flavor; `quota` maps resource to
    nominal quota (`cpu` is shorthand). `config` sets the preemption-config annotation."""
    nominal: dict[str, str] = {k: str(v) for k, v in (quota or {}).items()}
    if cpu is not None:
        nominal["cpu"] = str(cpu)
    spec: Obj = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": sorted(nominal),
                "flavors": [
                    {"name": flavor, "resources": [{"name": r, "nominalQuota": q} for r, q in sorted(nominal.items())]}
                ],
            }
        ],
    }
    if cohort:
        spec["cohortName"] = cohort
    if preemption:
        spec["preemption"] = dict(preemption)
    annotations = {"kueue.x-k8s.io/preemption-config-name": config} if config else None
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": _meta(name, labels=labels, annotations=annotations),
        "spec": spec,
    }


# -- workloads --------------------------------------------------------------------------------------


def tas_workload(
    name: str,
    cpu: int | str | None = 1,
    *,
    requests: Mapping[str, int | str] | None = None,
    count: int = 1,
    queue: str = "main",
    namespace_name: str = "default",
    priority: int | None = None,
    labels: Mapping[str, str] | None = None,
    required: str | None = None,
    preferred: str | None = None,
    unconstrained: bool | None = None,
    node_selector: Mapping[str, str] | None = None,
    created: str = CREATED,
) -> Obj:
    """A pending Workload with one pod set `main` of `count` pods, each requesting `cpu` (and
    `requests`), with an optional topology request and nodeSelector."""
    per_pod: dict[str, str] = {k: str(v) for k, v in (requests or {}).items()}
    if cpu is not None:
        per_pod["cpu"] = str(cpu)
    pod_spec: Obj = {"containers": [{"name": "main", "resources": {"requests": per_pod}}]}
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    pod_set: Obj = {"name": "main", "count": count, "template": {"spec": pod_spec}}
    request: Obj = {}
    if required is not None:
        request["required"] = required
    if preferred is not None:
        request["preferred"] = preferred
    if unconstrained is not None:
        request["unconstrained"] = unconstrained
    if request:
        pod_set["topologyRequest"] = request
    meta = _meta(name, namespace_name, labels=labels)
    meta["creationTimestamp"] = created
    spec: Obj = {"queueName": queue, "podSets": [pod_set]}
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": KUEUE, "kind": "Workload", "metadata": meta, "spec": spec}


def hostname_assignment(pods_per_node: Mapping[str, int]) -> Obj:
    """A topologyAssignment with levels `[kubernetes.io/hostname]`, written by hand (not by the code
    under test): one slice, nodes in name order, `podCounts` per node."""
    names = sorted(pods_per_node)
    return {
        "levels": [HOSTNAME],
        "slices": [
            {
                "domainCount": len(names),
                "valuesPerLevel": [{"roots": names}],
                "podCounts": [pods_per_node[n] for n in names],
            }
        ],
    }


def on_nodes(
    wl: Obj,
    cluster_queue: str,
    pods_per_node: Mapping[str, int] | None = None,
    *,
    reserved_at: str = RESERVED,
    flavor: str = TAS_FLAVOR,
    assignment: Obj | None = None,
) -> Obj:
    """`wl` holding quota in `cluster_queue`, its pods on `pods_per_node` (a hostname-level topology
    assignment; or pass `assignment` in wire form). Counts must add up to the pod set's count."""
    from preemption_operator.api.quantity import format_amount, to_amount

    out = copy.deepcopy(wl)
    pod_set = out["spec"]["podSets"][0]
    count = pod_set["count"]
    per_pod = pod_set["template"]["spec"]["containers"][0]["resources"]["requests"]
    if assignment is None:
        assert pods_per_node is not None and sum(pods_per_node.values()) == count, (pods_per_node, count)
        assignment = hostname_assignment(pods_per_node)
    usage = {r: format_amount(r, to_amount(r, q) * count) for r, q in per_pod.items()}
    status = out.setdefault("status", {})
    status["conditions"] = [
        {
            "type": "QuotaReserved",
            "status": "True",
            "reason": "QuotaReserved",
            "message": f"Quota reserved in ClusterQueue {cluster_queue}",
            "lastTransitionTime": reserved_at,
        },
        {
            "type": "Admitted",
            "status": "True",
            "reason": "Admitted",
            "message": "The workload is admitted",
            "lastTransitionTime": reserved_at,
        },
    ]
    status["admission"] = {
        "clusterQueue": cluster_queue,
        "podSetAssignments": [
            {
                "name": "main",
                "flavors": {r: flavor for r in per_pod},
                "resourceUsage": usage,
                "count": count,
                "topologyAssignment": assignment,
            }
        ],
    }
    return out


# -- engine-level objects ----------------------------------------------------------------------------


def node_record(name: str, levels: Mapping[str, str] | None = None, **allocatable: int) -> NodeRecord:
    """A NodeRecord; allocatable amounts as the engine counts them (cpu in milli-units)."""
    labels = {HOSTNAME: name, **(levels or {})}
    return NodeRecord(name, labels, dict(allocatable))


def view(
    levels: Sequence[str], nodes: Sequence[NodeRecord], *, flavor: str = TAS_FLAVOR, name: str = TOPOLOGY
) -> TopologyView:
    return TopologyView(flavor, name, tuple(levels), tuple(nodes))
