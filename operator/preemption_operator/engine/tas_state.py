"""Topology-aware scheduling state: the node views of TAS flavors and what runs on each node.

Kept in the Cache (usage updated as workloads come and go) and copied into a snapshot only when
a cycle changes it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..api.core import Node
from ..api.quantity import QuantityError, to_amount
from ..api.v1beta2 import ResourceFlavor, Topology
from .placement import NodeRecord, NodeUsage, TopologyView, next_revision, node_capacity, with_pod
from .topology_assignment import HOSTNAME, decode_assignment
from .workload import WorkloadInfo

NodeAmounts = dict[str, dict[str, int]]


def node_ready(node: Node) -> bool:
    """The node's Ready condition is True (Kueue's TAS leaves out nodes that are not)."""
    for condition in node.status.conditions or []:
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def _record(node: Node) -> NodeRecord | None:
    """The node as placement sees it; None for a node that takes no pods (cordoned, or not
    Ready), as Kueue's TAS keeps only schedulable and ready nodes."""
    if node.spec.unschedulable or not node_ready(node):
        return None
    allocatable: dict[str, int] = {}
    for resource, quantity in (node.status.allocatable or {}).items():
        try:
            allocatable[resource] = to_amount(resource, quantity)
        except QuantityError:
            continue
    taints = tuple(t for t in node.spec.taints or [] if isinstance(t, dict))
    return NodeRecord(node.name, dict(node.metadata.labels or {}), allocatable, taints)


@dataclass
class TasState:
    views: dict[str, TopologyView] = field(default_factory=dict)
    """TAS flavor name -> its nodes."""
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    usage: NodeUsage = field(default_factory=NodeUsage)
    by_workload: dict[str, NodeAmounts] = field(default_factory=dict)
    hostnames: dict[str, str] = field(default_factory=dict)
    """kubernetes.io/hostname label value -> Node name (assignments name nodes by the label)."""

    @classmethod
    def build(
        cls,
        nodes: Mapping[str, Node],
        topologies: Mapping[str, Topology],
        flavors: Mapping[str, ResourceFlavor],
    ) -> TasState:
        records = {name: r for name, node in sorted(nodes.items()) if (r := _record(node)) is not None}
        views: dict[str, TopologyView] = {}
        for name, flavor in sorted(flavors.items()):
            topology = topologies.get(flavor.spec.topology_name or "")
            if topology is None:
                continue
            levels = tuple(level.node_label for level in topology.spec.levels)
            selector = flavor.spec.node_labels or {}
            members = [
                r
                for r in records.values()
                if all(r.labels.get(k) == v for k, v in selector.items()) and all(lv in r.labels for lv in levels)
            ]
            members.sort(key=lambda r: (tuple(r.labels[lv] for lv in levels), r.name))
            views[name] = TopologyView(name, topology.name, levels, tuple(members))
        hostnames = {r.labels.get(HOSTNAME, r.name): r.name for r in records.values()}
        return cls(views, records, hostnames=hostnames)

    def update_node(self, previous: Node | None, current: Node | None) -> bool:
        """Applies a Node change in place when only its capacity changed (its views and domains
        stay as they are); False when the views must be rebuilt."""
        if previous is None or current is None:
            return False
        old, new = _record(previous), _record(current)
        if old is None or new is None:
            return old is None and new is None
        if old.labels != new.labels:
            return False
        if old == new:
            return True
        self.nodes[new.name] = new
        for flavor, view in list(self.views.items()):
            if any(node.name == new.name for node in view.nodes):
                nodes = tuple(new if node.name == new.name else node for node in view.nodes)
                self.views[flavor] = dataclasses.replace(view, nodes=nodes)
        # Placements remember capacities per node revision: this node's must be computed again.
        self.usage.revisions[new.name] = next_revision()
        return True

    def view_for(self, flavors: Mapping[str, str]) -> TopologyView | None:
        for flavor in flavors.values():
            view = self.views.get(flavor)
            if view is not None:
                return view
        return None

    def resolve(self, wl: WorkloadInfo) -> NodeAmounts:
        """Node usage of an admitted workload, from its topology assignments."""
        amounts: NodeAmounts = {}
        for ps in wl.admitted_pod_sets:
            if not ps.topology_assignment:
                continue
            view = self.view_for(ps.flavors)
            requests = with_pod(ps.per_pod)
            for values, pods in decode_assignment(ps.topology_assignment):
                for node, count in self._nodes_for(values, pods, ps.per_pod, view):
                    target = amounts.setdefault(node, {})
                    for resource, amount in requests.items():
                        target[resource] = target.get(resource, 0) + amount * count
        return amounts

    def _nodes_for(
        self, values: Mapping[str, str], pods: int, per_pod: Mapping[str, int], view: TopologyView | None
    ) -> list[tuple[str, int]]:
        if HOSTNAME in values:
            # A hostname label value, not necessarily the Node's name.
            return [(self.hostnames.get(values[HOSTNAME], values[HOSTNAME]), pods)]
        candidates = view.nodes if view is not None else tuple(self.nodes.values())
        members = [n for n in candidates if all(n.labels.get(k) == v for k, v in values.items())]
        placed: list[tuple[str, int]] = []
        left = pods
        for node in members:  # a domain above the nodes: fill its nodes in order
            if left == 0:
                break
            take = min(left, node_capacity(node, self.usage.used.get(node.name, {}), per_pod))
            if take > 0:
                placed.append((node.name, take))
                left -= take
        if left and members:
            placed.append((members[0].name, left))  # over-committed as recorded; keep the count
        return placed

    def add(self, wl: WorkloadInfo) -> None:
        amounts = self.resolve(wl)
        if amounts:
            self.by_workload[wl.key] = amounts
            self.usage.add(amounts)

    def discard(self, key: str) -> None:
        amounts = self.by_workload.pop(key, None)
        if amounts:
            self.usage.remove(amounts)
