"""The wire form of a pod set's topology assignment (Workload
status.admission.podSetAssignments[].topologyAssignment), as Kueue v0.19.2 writes and reads it:
`levels`, then slices of domains, each slice giving per level one value for all its domains
(`universal`) or one each (`individual`: prefix + root + suffix), and per domain a pod count
(`podCounts`: `universal` or `individual`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

HOSTNAME = "kubernetes.io/hostname"

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
