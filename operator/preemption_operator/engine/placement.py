"""Topology-aware placement: where Kueue v0.19.2's TAS would put a pod set's pods.

A Topology orders node labels from the widest level (block) to the narrowest (rack, host). A
ResourceFlavor with a `topologyName` covers the nodes its `nodeLabels` select. The search follows
Kueue's (tas_flavor_snapshot.go) in its phases:

1. Every domain counts the pods it could take (each node's free capacity, summed up the tree) and
   the slices: at the slice level a domain holds `pods // sliceSize` slices, a wider one the sum
   of its children's. Without slices a slice is one pod at the lowest level.
2. The domains of the requested level are ordered by slices (most first; fewest first for an
   unconstrained request, Kueue's LeastFreeCapacity), then pods (fewest first), then values. One
   domain that holds every slice is taken, the tightest such one unless unconstrained (BestFit).
   None holds them: `required` fails, `preferred` tries the next wider level, and at the widest
   level (or when unconstrained) several domains are taken in that order, the last one again the
   tightest that completes the count.
3. Down the tree, each level is filled the same way: above the slice level whole slices are
   spread over the children of every chosen domain, at and below it each chosen domain's pods
   over its own children, pod by pod (or by inner slice layer).

The request's level is `required`, else `preferred`, else the widest level for a request of
slices only, else the lowest; slices-only and `unconstrained` requests (and pod sets without a
request) are unconstrained. A pod count not divisible by the slice size places the whole slices
only, as Kueue does. With `kubernetes.io/hostname` as the lowest level, nodes whose taints the
pod set does not tolerate, or that its node selector or required node affinity does not match,
take no pods (Kueue filters nodes only then). Unlike Kueue, which sums the allocatable of the
nodes of a lowest-level domain, each node counts the pods that fit on it. Node usage comes from
the topology assignments of admitted workloads.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .topology_assignment import HOSTNAME, encode_assignment

UNBOUNDED = 1 << 40
PODS = "pods"
"""Every pod takes one of a node's `pods` (Kueue adds it to every pod's requests)."""


@dataclass(frozen=True)
class NodeRecord:
    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]
    taints: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class TopologyRequest:
    """What a pod set asks of a topology (Kueue's PodSetTopologyRequest, the parts placement reads)."""

    required: str | None = None
    preferred: str | None = None
    unconstrained: bool = False
    slice_level: str | None = None
    """podSetSliceRequiredTopology."""
    slice_size: int | None = None
    """podSetSliceSize."""
    layers: tuple[tuple[str, int], ...] = ()
    """podsetSliceRequiredTopologyConstraints: (level, size), the widest first."""

    def slice_layers(self) -> tuple[tuple[str, int], ...]:
        """The slice layers: the constraints, else the one layer of the two slice fields (size 0
        when missing), else none."""
        if self.layers:
            return self.layers
        if self.slice_level is None:
            return ()
        return ((self.slice_level, self.slice_size or 0),)

    @property
    def slices_only(self) -> bool:
        return self.required is None and self.preferred is None and bool(self.slice_layers())

    def level(self, levels: Sequence[str]) -> str:
        """The level the search starts at (Kueue's levelKey; no request is an implied one, at the
        lowest level)."""
        if self.required is not None:
            return self.required
        if self.preferred is not None:
            return self.preferred
        if self.slices_only:
            return levels[0]
        return levels[-1]

    @property
    def is_unconstrained(self) -> bool:
        explicit = self.required is not None or self.preferred is not None
        return self.unconstrained or self.slices_only or not explicit

    def levels_named(self) -> list[str]:
        """The levels the request names (a flavor's topology must have them all)."""
        named = [level for level in (self.required, self.preferred) if level is not None]
        return named + [level for level, _ in self.slice_layers()]


@dataclass(frozen=True)
class NodeFilter:
    """What a pod set asks of a node beside capacity: its node selector, the tolerations of its pod
    template and of the flavor, and its required node affinity terms (None: no affinity)."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    affinity: tuple[Mapping[str, Any], ...] | None = None

    def key(self) -> str:
        return json.dumps([dict(self.node_selector), self.tolerations, self.affinity], sort_keys=True, default=str)


@dataclass(frozen=True)
class _Tree:
    """The domains of a view, level by level (0 = widest), each level sorted by values."""

    keys: tuple[tuple[tuple[str, ...], ...], ...]
    children: tuple[tuple[range, ...], ...]
    """Per level but the lowest: each domain's children on the next level (sorted by values, a
    domain's children are consecutive)."""
    leaf_nodes: tuple[tuple[int, ...], ...]
    """Per lowest-level domain: the indexes of its nodes in the view."""
    one_node_leaves: bool
    """Every lowest-level domain is one node, in the view's order (leaf i is node i)."""


@dataclass(frozen=True)
class TopologyView:
    """The nodes of one TAS flavor, with the levels of its Topology."""

    flavor: str
    topology: str
    levels: tuple[str, ...]
    nodes: tuple[NodeRecord, ...]

    def domain(self, node: NodeRecord, depth: int) -> tuple[str, ...]:
        return tuple(node.labels[level] for level in self.levels[:depth])

    def domains(self, depth: int) -> list[tuple[tuple[str, ...], tuple[int, ...]]]:
        """The domains of a level (by depth, 1 = widest) with the indexes of their nodes; computed
        once per view, as placement asks for them at every fit check of a victim search."""
        cache = self.__dict__.setdefault("_domains", {})
        found: list[tuple[tuple[str, ...], tuple[int, ...]]] | None = cache.get(depth)
        if found is None:
            groups: dict[tuple[str, ...], list[int]] = {}
            for i, node in enumerate(self.nodes):
                groups.setdefault(self.domain(node, depth), []).append(i)
            found = [(key, tuple(members)) for key, members in sorted(groups.items())]
            cache[depth] = found
        return found

    def tree(self) -> _Tree:
        found: _Tree | None = self.__dict__.get("_tree")
        if found is None:
            per_level = [self.domains(depth) for depth in range(1, len(self.levels) + 1)]
            keys = tuple(tuple(key for key, _ in level) for level in per_level)
            children = []
            for k in range(len(keys) - 1):
                index = {key: i for i, key in enumerate(keys[k])}
                bounds = [[len(keys[k + 1]), 0] for _ in keys[k]]
                for j, key in enumerate(keys[k + 1]):
                    low_high = bounds[index[key[:-1]]]
                    low_high[0], low_high[1] = min(low_high[0], j), max(low_high[1], j + 1)
                children.append(tuple(range(low, high) for low, high in bounds))
            leaves = tuple(members for _, members in per_level[-1]) if per_level else ()
            single = all(members == (i,) for i, members in enumerate(leaves))
            found = _Tree(keys, tuple(children), leaves, single)
            self.__dict__["_tree"] = found
        return found

    @property
    def reports_hostname(self) -> bool:
        return self.levels[-1] == HOSTNAME

    @property
    def tainted(self) -> bool:
        """Some node has a taint."""
        found: bool | None = self.__dict__.get("_tainted")
        if found is None:
            found = any(node.taints for node in self.nodes)
            self.__dict__["_tainted"] = found
        return found


def with_pod(per_pod: Mapping[str, int]) -> dict[str, int]:
    """A pod's requests as TAS counts them: plus one of the node's `pods`."""
    return {**per_pod, PODS: per_pod.get(PODS, 0) + 1}


@dataclass(frozen=True)
class Placement:
    """Where a pod set's pods go: pods per node, and the assignment as Kueue writes it."""

    view: TopologyView
    nodes: tuple[tuple[str, int], ...]

    def usage(self, per_pod: Mapping[str, int]) -> dict[str, dict[str, int]]:
        """What the pods use per node, a `pods` each included."""
        requests = with_pod(per_pod)
        return {node: {r: a * pods for r, a in requests.items()} for node, pods in self.nodes}

    def domains(self) -> list[tuple[tuple[str, ...], int]]:
        """(values per reported level, pods), in Kueue's order: by the values of every level of
        the topology, the hostname level's last."""
        by_name = {n.name: n for n in self.view.nodes}
        depth = len(self.view.levels)
        counts: dict[tuple[str, ...], int] = {}
        for name, pods in self.nodes:
            key = self.view.domain(by_name[name], depth)
            counts[key] = counts.get(key, 0) + pods
        if self.view.reports_hostname:
            # Only the hostname level is reported: kubernetes.io/hostname label values (what
            # Kueue writes and pods are pinned by), which need not equal the Node's name.
            return [((key[-1],), pods) for key, pods in sorted(counts.items())]
        return sorted(counts.items())

    def wire(self) -> dict[str, Any]:
        levels = [HOSTNAME] if self.view.reports_hostname else list(self.view.levels)
        return encode_assignment(levels, self.domains())


def node_capacity(node: NodeRecord, used: Mapping[str, int], per_pod: Mapping[str, int]) -> int:
    """How many more pods of this shape fit on the node, one of its `pods` each (a record without
    `pods` allocatable, which no Node lacks, is not limited by it)."""
    return _capacity(node, used, [(r, a) for r, a in with_pod(per_pod).items() if a > 0])


def _capacity(node: NodeRecord, used: Mapping[str, int], requests: Sequence[tuple[str, int]]) -> int:
    fits = UNBOUNDED
    allocatable = node.allocatable
    for resource, amount in requests:
        if resource == PODS and PODS not in allocatable:
            continue
        free = allocatable.get(resource, 0) - used.get(resource, 0)
        fits = min(fits, max(0, free) // amount)
    return fits


def _requests(per_pod: Mapping[str, int]) -> list[tuple[str, int]]:
    return [(r, a) for r, a in with_pod(per_pod).items() if a > 0]


MAX_SHAPES = 256
"""Pod shapes whose per-node capacities are remembered at once (all are forgotten past it)."""
_CAPACITIES: dict[tuple[tuple[str, int], ...], dict[str, tuple[int, NodeRecord, int]]] = {}
"""Per pod shape (its requests): node name -> (usage revision, node record, pods that fit)."""


_REVISIONS = itertools.count(1)


def next_revision() -> int:
    """A revision number no node usage has had before, in any NodeUsage of the process: a node's
    usage (or record) and its revision then determine each other, whichever snapshot holds them,
    so capacities computed in one cycle serve the next ones until the node changes."""
    return next(_REVISIONS)


@dataclass
class NodeUsage:
    """Resources in use per node; a snapshot copies it before changing it. Each change stamps the
    node with a new revision (next_revision), so placements reuse what they computed for nodes
    that did not change, across snapshots too."""

    used: dict[str, dict[str, int]] = field(default_factory=dict)
    revisions: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Usage given without revisions (built by hand) gets them: revision 0 means "no usage".
        for node in self.used:
            if node not in self.revisions:
                self.revisions[node] = next_revision()

    def add(self, usage: Mapping[str, Mapping[str, int]], sign: int = 1) -> None:
        for node, amounts in usage.items():
            current = self.used.setdefault(node, {})
            for resource, amount in amounts.items():
                current[resource] = current.get(resource, 0) + sign * amount
            self.revisions[node] = next_revision()

    def remove(self, usage: Mapping[str, Mapping[str, int]]) -> None:
        self.add(usage, -1)

    def copy(self) -> NodeUsage:
        return NodeUsage({node: dict(amounts) for node, amounts in self.used.items()}, dict(self.revisions))


# ------------------------------------------------------------------------------------------------
# Which nodes a pod set may use
# ------------------------------------------------------------------------------------------------


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' Toleration.ToleratesTaint, with the Lt and Gt operators."""
    effect, key = toleration.get("effect") or "", toleration.get("key") or ""
    if effect and effect != (taint.get("effect") or ""):
        return False
    if key and key != (taint.get("key") or ""):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    if operator == "Exists":
        return True
    if operator in ("Lt", "Gt"):
        mine, theirs = _decimal(toleration.get("value")), _decimal(taint.get("value"))
        if mine is None or theirs is None:
            return False
        return theirs < mine if operator == "Lt" else theirs > mine
    return False


def _decimal(value: Any) -> int | None:
    """A decimal integer as Kubernetes reads one for Lt and Gt: no sign but '-', no leading zero."""
    text = str(value or "")
    digits = text[1:] if text.startswith("-") else text
    if not digits.isascii() or not digits.isdigit() or (digits[0] == "0" and text != "0"):
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


def untolerated_taint(taints: Iterable[Mapping[str, Any]], tolerations: Sequence[Mapping[str, Any]]) -> str | None:
    """The first NoSchedule or NoExecute taint no toleration tolerates, as Kubernetes prints a
    taint (key=value:effect), or None."""
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            key, value, effect = taint.get("key") or "", taint.get("value") or "", taint.get("effect") or ""
            return f"{key}={value}:{effect}" if value else f"{key}:{effect}"
    return None


def _expression_matches(expression: Mapping[str, Any], values_of: Mapping[str, str]) -> bool:
    key, operator = expression.get("key") or "", expression.get("operator")
    values = [str(v) for v in expression.get("values") or []]
    present = key in values_of
    if operator == "In":
        return present and values_of[key] in values
    if operator == "NotIn":
        return not present or values_of[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        mine, bound = _decimal(values_of[key]), _decimal(values[0])
        if mine is None or bound is None:
            return False
        return mine > bound if operator == "Gt" else mine < bound
    return False


def affinity_matches(terms: Sequence[Mapping[str, Any]], node: NodeRecord) -> bool:
    """Whether a node matches required node affinity: any term, every expression and field of it
    (a term with neither matches no node)."""
    for term in terms:
        expressions = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not expressions and not fields:
            continue
        if all(_expression_matches(e, node.labels) for e in expressions) and all(
            (f.get("key") == "metadata.name") and _expression_matches(f, {"metadata.name": node.name}) for f in fields
        ):
            return True
    return False


@dataclass
class _Exclusions:
    """Why nodes took no pods, for Kueue's message ("Total nodes: N; excluded: ...")."""

    total: int = 0
    node_selector: int = 0
    affinity: int = 0
    taints: dict[str, int] = field(default_factory=dict)
    resources: dict[str, int] = field(default_factory=dict)

    def text(self) -> str:
        if not (self.node_selector or self.affinity or self.taints or self.resources):
            return ""
        reasons = []
        if self.node_selector:
            reasons.append(f"nodeSelector: {self.node_selector}")
        if self.affinity:
            reasons.append(f"affinity: {self.affinity}")
        reasons += [f"taint {json.dumps(t, ensure_ascii=False)}: {n}" for t, n in sorted(self.taints.items())]
        reasons += [f"resource {json.dumps(r, ensure_ascii=False)}: {n}" for r, n in sorted(self.resources.items())]
        return f". Total nodes: {self.total}; excluded: {', '.join(sorted(reasons))}"


def _eligible(view: TopologyView, node_filter: NodeFilter, stats: _Exclusions | None = None) -> list[bool]:
    """Which nodes the pod set may use. Kueue checks nodes only when the lowest level is the
    hostname: taints, then the node selector, then required affinity."""
    if not view.reports_hostname:
        return [True] * len(view.nodes)
    selector = node_filter.node_selector
    out = []
    for node in view.nodes:
        taint = untolerated_taint(node.taints, node_filter.tolerations) if node.taints else None
        if taint is not None:
            if stats is not None:
                stats.taints[taint] = stats.taints.get(taint, 0) + 1
            out.append(False)
        elif selector and any(node.labels.get(k) != v for k, v in selector.items()):
            if stats is not None:
                stats.node_selector += 1
            out.append(False)
        elif node_filter.affinity is not None and not affinity_matches(node_filter.affinity, node):
            if stats is not None:
                stats.affinity += 1
            out.append(False)
        else:
            out.append(True)
    return out


def _limiting_resource(
    nodes: Iterable[NodeRecord], used: Mapping[str, Mapping[str, int]], per_pod: Mapping[str, int]
) -> str | None:
    """The resource that lets the fewest pods into the nodes' summed free capacity (names break
    ties), as Kueue names it when a domain takes none."""
    members = list(nodes)
    best: tuple[int, str] | None = None
    for resource, amount in sorted(with_pod(per_pod).items()):
        if amount <= 0 or (resource == PODS and any(PODS not in n.allocatable for n in members)):
            continue
        free = sum(n.allocatable.get(resource, 0) - used.get(n.name, {}).get(resource, 0) for n in members)
        fits = max(0, free) // amount
        if best is None or fits < best[0]:
            best = (fits, resource)
    return best[1] if best is not None else None


# ------------------------------------------------------------------------------------------------
# The search
# ------------------------------------------------------------------------------------------------


class CapacityMemo:
    """Pods of one shape that fit on each node, remembered per node revision (see next_revision)
    for every shape the process has placed: a victim search checks placement after every
    removal, a removal changes only the victim's nodes, and the next cycle's snapshot changes
    only the nodes whose usage changed since. Also which nodes the pod set may use, per view."""

    def __init__(self) -> None:
        self._eligible: tuple[TopologyView, NodeFilter, list[bool] | None] | None = None

    def capacities(self, view: TopologyView, usage: NodeUsage, per_pod: Mapping[str, int]) -> list[int]:
        requests = tuple(_requests(per_pod))
        caps = _CAPACITIES.get(requests)
        if caps is None:
            if len(_CAPACITIES) >= MAX_SHAPES:
                _CAPACITIES.clear()
            caps = _CAPACITIES[requests] = {}
        revisions, used = usage.revisions, usage.used
        out = []
        empty: Mapping[str, int] = {}
        for node in view.nodes:
            revision = revisions.get(node.name, 0)
            hit = caps.get(node.name)
            # The record too: a node's allocatable can change without its usage changing.
            if hit is None or hit[0] != revision or hit[1] is not node:
                hit = (revision, node, _capacity(node, used.get(node.name, empty), requests))
                caps[node.name] = hit
            out.append(hit[2])
        return out

    def eligible(self, view: TopologyView, node_filter: NodeFilter) -> list[bool] | None:
        """Which nodes the pod set may use (None: all of them)."""
        cached = self._eligible
        if cached is not None and cached[0] is view and cached[1] is node_filter:
            return cached[2]
        found = eligible_nodes(view, node_filter)
        self._eligible = (view, node_filter, found)
        return found


def eligible_nodes(view: TopologyView, node_filter: NodeFilter) -> list[bool] | None:
    """Which nodes of the view the pod set may use (None: all of them), remembered per view for
    a few hundred distinct filters."""
    if not view.reports_hostname or (
        not node_filter.node_selector and node_filter.affinity is None and not view.tainted
    ):
        return None
    cache: dict[str, list[bool] | None] = view.__dict__.setdefault("_eligible", {})
    key = node_filter.key()
    if key not in cache:
        if len(cache) >= 256:
            cache.clear()
        found = _eligible(view, node_filter)
        cache[key] = None if all(found) else found
    return cache[key]


def _fill(nodes: Iterable[tuple[NodeRecord, int]], count: int) -> tuple[tuple[str, int], ...] | None:
    """Pods onto the roomiest nodes first (fewest nodes), names breaking ties."""
    chosen: list[tuple[str, int]] = []
    left = count
    for node, capacity in sorted(nodes, key=lambda item: (-item[1], item[0].name)):
        if left == 0:
            break
        take = min(capacity, left)
        if take > 0:
            chosen.append((node.name, take))
            left -= take
    return tuple(sorted(chosen)) if left == 0 else None


class _Search:
    """One run of the search over a view: pods and slices per domain, then the choice."""

    def __init__(
        self,
        view: TopologyView,
        request: TopologyRequest,
        count: int,
        size: int,
        slice_idx: int,
        size_at: dict[int, int],
        caps: list[int],
    ) -> None:
        self.view, self.tree = view, view.tree()
        self.count, self.size, self.slice_idx, self.size_at = count, size, slice_idx, size_at
        self.required = request.required is not None
        self.unconstrained = request.is_unconstrained
        self.least_free = self.unconstrained  # Kueue's LeastFreeCapacity (TASProfileMixed, on by default)
        tree, depth = self.tree, len(view.levels)
        pods: list[list[int]] = [[] for _ in range(depth)]
        if tree.one_node_leaves:
            pods[-1] = list(caps)
        else:
            pods[-1] = [sum(caps[n] for n in nodes) for nodes in tree.leaf_nodes]
        for k in range(depth - 2, -1, -1):
            below, inner = pods[k + 1], size_at.get(k + 1)
            if inner:  # an inner slice layer: children count whole slices of it only
                pods[k] = [sum(below[c] // inner * inner for c in kids) for kids in tree.children[k]]
            else:
                pods[k] = [sum(below[kids.start : kids.stop]) for kids in tree.children[k]]
        slices: list[list[int]]
        if size == 1 and slice_idx == depth - 1:
            slices = [list(level) for level in pods]  # a slice is a pod
        else:
            slices = [[0] * len(level) for level in pods]
            slices[slice_idx] = [p // size for p in pods[slice_idx]]
            for k in range(slice_idx - 1, -1, -1):
                below_slices = slices[k + 1]
                slices[k] = [sum(below_slices[kids.start : kids.stop]) for kids in tree.children[k]]
        self.pods, self.slices = pods, slices

    def order(self, k: int, domains: Iterable[int]) -> list[int]:
        keys, pods, slices = self.tree.keys[k], self.pods[k], self.slices[k]
        if self.least_free:
            return sorted(domains, key=lambda d: (slices[d], pods[d], keys[d]))
        return sorted(domains, key=lambda d: (-slices[d], pods[d], keys[d]))

    @staticmethod
    def best_fit(domains: Sequence[int], needed: int, counts: Sequence[int]) -> int:
        """The first of the domains with the fewest units that still hold `needed`; the first
        domain when none does."""
        best, best_count = domains[0], math.inf
        for d in domains:
            if needed <= counts[d] < best_count:
                best, best_count = d, counts[d]
        return best

    def fit_level(self, k: int) -> tuple[int, list[int]] | tuple[int, int, int]:
        """The level and domains that take every slice, searching from level `k` up; else the
        level searched last, the slices that fit and the slices needed, for the message."""
        needed = self.count // self.size
        while True:
            slices = self.slices[k]
            ordered = self.order(k, range(len(slices)))
            top = ordered[0]
            if not self.least_free and slices[top] >= needed:
                top = self.best_fit(ordered, needed, slices)
            if self.least_free:
                for d in ordered:
                    if slices[d] >= needed:
                        return k, [d]
                if self.required:
                    return k, self.pods[k][ordered[-1]], needed
            if slices[top] >= needed:
                return k, [top]
            if self.required:
                return k, slices[top], needed
            if k > 0 and not self.unconstrained:
                k -= 1
                continue
            chosen: list[int] = []
            left = needed
            for i, d in enumerate(ordered):
                if left <= 0:
                    break
                if not self.least_free and slices[d] >= left:
                    d = self.best_fit(ordered[i:], left, slices)
                chosen.append(d)
                left -= slices[d]
            if left > 0:
                return k, needed - left, needed
            return k, chosen

    def spread(self, k: int, domains: Sequence[int], count: int, size: int, by_slices: bool) -> list[int] | None:
        """Gives `count` pods to the domains in their order (whole slices of `size` when
        `by_slices`), the last one the tightest that completes it unless least-free; each
        domain's pods become what it gets. None if they do not hold them all."""
        pods, counts = self.pods[k], (self.slices[k] if by_slices else self.pods[k])
        left = count // size if by_slices else count
        chosen = []
        for i, d in enumerate(domains):
            if not self.least_free and counts[d] >= left:
                d = self.best_fit(domains[i:], left, counts)
            if counts[d] >= left:
                pods[d] = left * size if by_slices else left
                counts[d] = left
                chosen.append(d)
                return chosen
            if by_slices:
                pods[d] = counts[d] * size
            left -= counts[d]
            chosen.append(d)
        return None

    def descend(self, k: int, domains: list[int]) -> list[int] | None:
        """The lowest-level domains that take the pods, from the chosen domains of level `k`."""
        tree, lowest = self.tree, len(self.view.levels) - 1
        found = self.spread(k, domains, self.count, self.size, True)
        while found is not None and k < min(lowest, self.slice_idx):
            lower = self.order(k + 1, (c for d in found for c in tree.children[k][d]))
            found = self.spread(k + 1, lower, self.count, self.size, True)
            k += 1
        while found is not None and k < lowest:
            size = self.size_at.get(k + 1, 1) if k >= self.slice_idx else self.size
            deeper: list[int] = []
            for d in found:
                kids = self.order(k + 1, tree.children[k][d])
                if size > 1:  # slices of an inner layer, counted on these children
                    for c in kids:
                        self.slices[k + 1][c] = self.pods[k + 1][c] // size
                got = self.spread(k + 1, kids, self.pods[k][d], size, size > 1)
                if got is None:
                    return None
                deeper += got
            found = deeper
            k += 1
        return found

    def slices_in(self, k: int, d: int, target: int, size: int) -> int:
        """Slices of `size` the domain's descendants at level `target` hold."""
        if k == target:
            return self.pods[k][d] // size
        if k >= len(self.tree.children):
            return 0
        return sum(self.slices_in(k + 1, c, target, size) for c in self.tree.children[k][d])


def _inner_layers(
    layers: tuple[tuple[str, int], ...], size: int, slice_idx: int, levels: Sequence[str]
) -> dict[int, int] | str:
    """The slice size of every level below the outer slice level that an inner layer covers, or
    why the layers do not fit the topology (Kueue's words)."""
    size_at: dict[int, int] = {}
    parent_size, parent_idx = size, slice_idx
    for level, layer_size in layers[1:]:
        if level not in levels:
            return f"no requested topology level for additional slice layer: {level}"
        idx = levels.index(level)
        if idx <= parent_idx:
            return f"additional slice layer topology {level} must be at a lower level than {levels[parent_idx]}"
        if layer_size <= 0 or parent_size % layer_size:
            return f"additional slice layer size {layer_size} must evenly divide parent layer size {parent_size}"
        for lvl in range(parent_idx + 1, idx + 1):
            size_at[lvl] = layer_size
        parent_size, parent_idx = layer_size, idx
    return size_at


def find(
    view: TopologyView,
    usage: NodeUsage | None,
    per_pod: Mapping[str, int],
    count: int,
    request: TopologyRequest | None = None,
    node_filter: NodeFilter | None = None,
    memo: CapacityMemo | None = None,
) -> Placement | str:
    """A placement for `count` pods, or why there is none (Kueue's words). With `usage` None the
    nodes count as empty."""
    request = request or TopologyRequest()
    node_filter = node_filter or NodeFilter()
    levels = view.levels
    layers = request.slice_layers()
    size, slice_level = (layers[0][1], layers[0][0]) if layers else (1, levels[-1])
    if size <= 0:
        return "slice topology requested, but slice size not provided"
    level = request.level(levels)
    if level not in levels:
        return f"no requested topology level: {level}"
    if slice_level not in levels:
        return f"no requested topology level for slices: {slice_level}"
    level_idx, slice_idx = levels.index(level), levels.index(slice_level)
    if level_idx > slice_idx:
        return f"podset slice topology {slice_level} is above the podset topology {level}"
    size_at = _inner_layers(layers, size, slice_idx, levels)
    if isinstance(size_at, str):
        return size_at
    if not view.nodes:
        return f"no topology domains at level: {level}"

    used = usage.used if usage is not None else {}
    empty: Mapping[str, int] = {}
    if memo is not None and usage is not None:
        caps = memo.capacities(view, usage, per_pod)
    else:
        requests = _requests(per_pod)
        caps = [_capacity(node, used.get(node.name, empty), requests) for node in view.nodes]
    eligible = memo.eligible(view, node_filter) if memo is not None else eligible_nodes(view, node_filter)
    if eligible is not None:
        caps = [cap if ok else 0 for cap, ok in zip(caps, eligible, strict=True)]

    search = _Search(view, request, count, size, slice_idx, size_at, caps)
    fit = search.fit_level(level_idx)
    if len(fit) == 3:
        return _not_fit(view, search, fit[0], fit[1], fit[2], layers, used, per_pod, node_filter, eligible)
    fit_idx, domains = fit
    leaves = search.descend(fit_idx, domains)
    if leaves is None:
        return _not_fit(view, search, level_idx, 0, count // size, layers, used, per_pod, node_filter, eligible)
    chosen: list[tuple[str, int]] = []
    for leaf in leaves:
        pods = search.pods[-1][leaf]
        if pods > 0:
            members = [(view.nodes[n], caps[n]) for n in search.tree.leaf_nodes[leaf]]
            chosen += _fill(members, pods) or ()
    return Placement(view, tuple(sorted(chosen)))


def _not_fit(
    view: TopologyView,
    search: _Search,
    level_idx: int,
    fits: int,
    needed: int,
    layers: tuple[tuple[str, int], ...],
    used: Mapping[str, Mapping[str, int]],
    per_pod: Mapping[str, int],
    node_filter: NodeFilter,
    eligible: list[bool] | None,
) -> str:
    """Kueue's message for a pod set that does not fit, with why nodes took no pods."""
    stats = _Exclusions(total=len(search.tree.leaf_nodes))
    _eligible(view, node_filter, stats)
    for leaf, nodes in enumerate(search.tree.leaf_nodes):
        members = [view.nodes[n] for n in nodes if eligible is None or eligible[n]]
        if members and search.pods[-1][leaf] == 0:
            resource = _limiting_resource(members, used, per_pod)
            if resource is not None:
                stats.resources[resource] = stats.resources.get(resource, 0) + 1
    topology = f'topology "{view.topology}"'
    if search.size_at:
        # Several layers: how many slices of each the best domain of the level holds.
        level = search.slices
        best = min(range(len(level[level_idx])), key=lambda d: (-level[level_idx][d], search.tree.keys[level_idx][d]))
        parts = [f"{topology} doesn't allow to fit"]
        for layer_level, layer_size in layers:
            target = view.levels.index(layer_level)
            fit_slices = search.slices_in(level_idx, best, target, layer_size)
            parts.append(f"; {fit_slices}/{search.count // layer_size} slice(s) fit on level {layer_level}")
        return "".join(parts) + stats.text()
    unit = "pod" if search.size == 1 else "slice"
    if fits == 0:
        return f"{topology} doesn't allow to fit any of {needed} {unit}(s){stats.text()}"
    return f"{topology} allows to fit only {fits} out of {needed} {unit}(s){stats.text()}"


def place(
    view: TopologyView,
    usage: NodeUsage | None,
    per_pod: Mapping[str, int],
    count: int,
    request: TopologyRequest | None = None,
    *,
    required: str | None = None,
    preferred: str | None = None,
    node_selector: Mapping[str, str] | None = None,
    node_filter: NodeFilter | None = None,
    memo: CapacityMemo | None = None,
) -> Placement | None:
    """A placement for `count` pods, or None (see `find`). `required`, `preferred` and
    `node_selector` are shorthands for a request and a filter."""
    if request is None:
        request = TopologyRequest(required=required, preferred=preferred)
    if node_filter is None:
        node_filter = NodeFilter(node_selector=dict(node_selector or {}))
    found = find(view, usage, per_pod, count, request, node_filter, memo)
    return found if isinstance(found, Placement) else None


def fit_message(
    view: TopologyView,
    usage: NodeUsage | None,
    per_pod: Mapping[str, int],
    count: int,
    required: str | None = None,
    node_selector: Mapping[str, str] | None = None,
    *,
    request: TopologyRequest | None = None,
    node_filter: NodeFilter | None = None,
) -> str:
    """Why a pod set does not fit (Kueue's words); "" when it does."""
    if request is None:
        request = TopologyRequest(required=required)
    if node_filter is None:
        node_filter = NodeFilter(node_selector=dict(node_selector or {}))
    found = find(view, usage, per_pod, count, request, node_filter)
    return "" if isinstance(found, Placement) else found
