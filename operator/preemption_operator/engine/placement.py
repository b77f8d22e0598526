"""Topology-aware placement (Kueue TAS, the parts preemption needs).

A Topology orders node labels from the widest level (block) to the narrowest (rack, host). A
ResourceFlavor with a `topologyName` covers the nodes its `nodeLabels` select. A pod set that
asks for a `required` level must fit, pod by pod, into the free capacity of the nodes of one
domain of that level; `preferred` tries that level, then wider ones, then several domains.
Among domains that fit, the tightest wins (the least capacity left over, like Kueue's BestFit),
ties broken by domain name, so placement is deterministic. Node usage comes from the topology
assignments of admitted workloads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

HOSTNAME = "kubernetes.io/hostname"
UNBOUNDED = 1 << 40


@dataclass(frozen=True)
class NodeRecord:
    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]


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

    @property
    def reports_hostname(self) -> bool:
        return self.levels[-1] == HOSTNAME


@dataclass(frozen=True)
class Placement:
    """Where a pod set's pods go: pods per node, and the assignment as Kueue writes it."""

    view: TopologyView
    nodes: tuple[tuple[str, int], ...]

    def usage(self, per_pod: Mapping[str, int]) -> dict[str, dict[str, int]]:
        return {node: {r: a * pods for r, a in per_pod.items()} for node, pods in self.nodes}

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


MAX_DOMAINS_PER_SLICE = 100_000
"""The most roots (and individual pod counts) a slice holds (the CRD's maxItems)."""
MAX_SLICES = 1_000
"""The most slices an assignment holds (the CRD's maxItems)."""


def _level_values(values: list[str]) -> dict[str, Any]:
    """One level of a slice: `universal` when every domain has the same value, else the values
    as roots after their longest common prefix and suffix (which may not overlap), as Kueue's
    writer does. Kueue compares bytes; label values are ASCII, so characters are bytes here."""
    prefix = suffix = values[0]
    shortest = longest = len(values[0])
    for value in values[1:]:
        n = len(value)
        shortest, longest = min(shortest, n), max(longest, n)
        prefix, suffix = prefix[:n], suffix[max(0, len(suffix) - n) :]
        i = 0
        while i < len(prefix) and value[i] == prefix[i]:
            i += 1
        prefix = prefix[:i]
        j = 0
        while j < len(suffix) and value[n - 1 - j] == suffix[len(suffix) - 1 - j]:
            j += 1
        suffix = suffix[len(suffix) - j :]
    if len(prefix) == longest:
        return {"universal": prefix}
    if len(prefix) + len(suffix) > shortest:
        prefix = prefix[: shortest - len(suffix)]
    individual: dict[str, Any] = {}
    if prefix:
        individual["prefix"] = prefix
    if suffix:
        individual["suffix"] = suffix
    individual["roots"] = [value[len(prefix) : len(value) - len(suffix)] for value in values]
    return {"individual": individual}


def _slice(domains: list[tuple[tuple[str, ...], int]], levels: int) -> dict[str, Any]:
    counts = [pods for _, pods in domains]
    return {
        "domainCount": len(domains),
        "valuesPerLevel": [_level_values([values[i] for values, _ in domains]) for i in range(levels)],
        "podCounts": {"universal": counts[0]} if len(set(counts)) == 1 else {"individual": counts},
    }


def _hostname_prefix_keys(hostnames: list[str]) -> list[str] | None:
    """Per hostname, the longest prefix ending in '-' that another hostname of the assignment
    shares ("" for none), shortened level by level until the runs of equal keys fit in
    MAX_SLICES slices; None when even one level is too many (Kueue's reusable hostname prefixes)."""
    ends: list[list[int]] = []
    seen: dict[str, int] = {}
    depth = 0
    for name in hostnames:
        found = [i + 1 for i in range(len(name) - 1) if name[i] == "-"]
        for end in found:
            seen[name[:end]] = min(seen.get(name[:end], 0) + 1, 2)
        ends.append(found)
        depth = max(depth, len(found))
    for level in range(depth, 0, -1):
        keys = []
        for name, found in zip(hostnames, ends, strict=True):
            key = ""
            for end in reversed(found[:level]):
                if seen[name[:end]] >= 2:
                    key = name[:end]
                    break
            keys.append(key)
        if sum(-(-len(run) // MAX_DOMAINS_PER_SLICE) for run in _runs(keys, keys)) <= MAX_SLICES:
            return keys
    return None


def _runs(items: list[Any], keys: list[str]) -> list[list[Any]]:
    """`items` cut where consecutive keys differ."""
    runs: list[list[Any]] = []
    for i, item in enumerate(items):
        if i == 0 or keys[i] != keys[i - 1]:
            runs.append([])
        runs[-1].append(item)
    return runs


def encode_assignment(levels: list[str], domains: list[tuple[tuple[str, ...], int]]) -> dict[str, Any]:
    """A topologyAssignment as Kueue v0.19.2 writes it (hostname-prefix encoding, on by default):
    with hostnames, consecutive domains sharing a reusable hostname prefix form a slice each,
    unless one slice for all would be shorter in JSON; otherwise one slice (cut every
    MAX_DOMAINS_PER_SLICE domains)."""
    keys = None
    if len(domains) > 1 and levels[-1] == HOSTNAME:
        keys = _hostname_prefix_keys([values[-1] for values, _ in domains])
    runs = _runs(domains, keys) if keys is not None else ([domains] if domains else [])
    slices = [
        _slice(run[start : start + MAX_DOMAINS_PER_SLICE], len(levels))
        for run in runs
        for start in range(0, len(run), MAX_DOMAINS_PER_SLICE)
    ]
    by_prefix = {"levels": levels, "slices": slices}
    if len(slices) <= 1 or len(domains) > MAX_DOMAINS_PER_SLICE:
        return by_prefix
    single = {"levels": levels, "slices": [_slice(domains, len(levels))]}
    return single if len(_json(single)) < len(_json(by_prefix)) else by_prefix


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def decode_assignment(assignment: Mapping[str, Any]) -> list[tuple[dict[str, str], int]]:
    """The domains of a topologyAssignment in wire form: ({level: value}, pods) each."""
    levels = list(assignment.get("levels") or [])
    out: list[tuple[dict[str, str], int]] = []
    for slice_ in assignment.get("slices") or []:
        count = int(slice_.get("domainCount", 0))
        columns: list[list[str]] = []
        for level in slice_.get("valuesPerLevel") or []:
            if level.get("universal") is not None:
                columns.append([level["universal"]] * count)
            else:
                individual = level.get("individual") or {}
                prefix, suffix = individual.get("prefix") or "", individual.get("suffix") or ""
                columns.append([f"{prefix}{root}{suffix}" for root in individual.get("roots") or []])
        pod_counts = slice_.get("podCounts") or {}
        if pod_counts.get("universal") is not None:
            pods = [int(pod_counts["universal"])] * count
        else:
            pods = [int(p) for p in pod_counts.get("individual") or []]
        for i in range(count):
            values = {levels[j]: columns[j][i] for j in range(min(len(levels), len(columns))) if i < len(columns[j])}
            out.append((values, pods[i] if i < len(pods) else 0))
    return out


def node_capacity(node: NodeRecord, used: Mapping[str, int], per_pod: Mapping[str, int]) -> int:
    """How many more pods of this shape fit on the node."""
    fits = UNBOUNDED
    for resource, amount in per_pod.items():
        if amount <= 0:
            continue
        free = node.allocatable.get(resource, 0) - used.get(resource, 0)
        fits = min(fits, max(0, free) // amount)
    return fits


@dataclass
class NodeUsage:
    """Resources in use per node; a snapshot copies it before changing it. Each node's revision
    counts its changes, so placements can reuse what they computed for unchanged nodes."""

    used: dict[str, dict[str, int]] = field(default_factory=dict)
    revisions: dict[str, int] = field(default_factory=dict)

    def add(self, usage: Mapping[str, Mapping[str, int]], sign: int = 1) -> None:
        for node, amounts in usage.items():
            current = self.used.setdefault(node, {})
            for resource, amount in amounts.items():
                current[resource] = current.get(resource, 0) + sign * amount
            self.revisions[node] = self.revisions.get(node, 0) + 1

    def remove(self, usage: Mapping[str, Mapping[str, int]]) -> None:
        self.add(usage, -1)

    def copy(self) -> NodeUsage:
        return NodeUsage({node: dict(amounts) for node, amounts in self.used.items()}, dict(self.revisions))


class CapacityMemo:
    """Pods of one shape that fit on each node, remembered per node revision: a victim search
    checks placement after every removal, and a removal changes only the victim's nodes."""

    def __init__(self) -> None:
        self._usage: NodeUsage | None = None
        self._caps: dict[str, tuple[int, int]] = {}

    def capacities(self, view: TopologyView, usage: NodeUsage, per_pod: Mapping[str, int]) -> list[int]:
        if usage is not self._usage:
            self._usage, self._caps = usage, {}
        caps, revisions, used = self._caps, usage.revisions, usage.used
        out = []
        empty: Mapping[str, int] = {}
        for node in view.nodes:
            revision = revisions.get(node.name, 0)
            hit = caps.get(node.name)
            if hit is None or hit[0] != revision:
                hit = (revision, node_capacity(node, used.get(node.name, empty), per_pod))
                caps[node.name] = hit
            out.append(hit[1])
        return out


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


def place(
    view: TopologyView,
    usage: NodeUsage | None,
    per_pod: Mapping[str, int],
    count: int,
    *,
    required: str | None = None,
    preferred: str | None = None,
    node_selector: Mapping[str, str] | None = None,
    memo: CapacityMemo | None = None,
) -> Placement | None:
    """A placement for `count` pods, or None. With `usage` None the nodes count as empty."""
    used = usage.used if usage is not None else {}
    selector = node_selector or {}
    nodes = view.nodes
    empty: Mapping[str, int] = {}
    if memo is not None and usage is not None:
        capacities = memo.capacities(view, usage, per_pod)
    else:
        capacities = [node_capacity(node, used.get(node.name, empty), per_pod) for node in nodes]
    if selector:
        capacities = [
            cap if all(n.labels.get(k) == v for k, v in selector.items()) else 0
            for n, cap in zip(nodes, capacities, strict=True)
        ]
    level = required or preferred
    if level is not None:
        if level not in view.levels:
            return None
        depth = view.levels.index(level) + 1
        depths = [depth] if required else list(range(depth, 0, -1))
        for d in depths:
            found = _best_domain(view, capacities, count, d)
            if found is not None:
                return Placement(view, found)
        if required:
            return None
    spread = _fill(((node, capacities[i]) for i, node in enumerate(nodes)), count)
    return Placement(view, spread) if spread is not None else None


def _best_domain(
    view: TopologyView, capacities: list[int], count: int, depth: int
) -> tuple[tuple[str, int], ...] | None:
    """The tightest domain of `depth` that holds `count` pods (least capacity left, then name)."""
    best: tuple[int, tuple[str, ...]] | None = None
    best_members: tuple[int, ...] = ()
    for key, members in view.domains(depth):
        total = 0
        for i in members:
            total += capacities[i]
        if total >= count and (best is None or (min(total, UNBOUNDED), key) < best):
            best, best_members = (min(total, UNBOUNDED), key), members
    if best is None:
        return None
    return _fill(((view.nodes[i], capacities[i]) for i in best_members), count)


def fit_message(
    view: TopologyView,
    usage: NodeUsage | None,
    per_pod: Mapping[str, int],
    count: int,
    required: str | None = None,
    node_selector: Mapping[str, str] | None = None,
) -> str:
    """Kueue's wording for a pod set that does not fit: how many pods the best domain of the
    required level (or all nodes) could take."""
    used = usage.used if usage is not None else {}
    selector = node_selector or {}
    depth = view.levels.index(required) + 1 if required in view.levels else 0
    per_domain: dict[tuple[str, ...], int] = {}
    for node in view.nodes:
        if all(node.labels.get(k) == v for k, v in selector.items()):
            key = view.domain(node, depth)
            per_domain[key] = per_domain.get(key, 0) + node_capacity(node, used.get(node.name, {}), per_pod)
    fits = min(max(per_domain.values(), default=0), count)
    if fits == 0:
        return f'topology "{view.topology}" doesn\'t allow to fit any of {count} pod(s)'
    return f'topology "{view.topology}" allows to fit only {fits} out of {count} pod(s)'
