"""Which queue pairs and triples of a setup the flapping analysis may decide once for all.

Two pairs (or cycles of three) of ClusterQueues are equivalent when a renaming of queues and
cohorts maps the whole setup onto itself and the one onto the other: the quota trees have the
same shape, and every node the same quotas, policies, labels, annotations and PreemptionConfig
rules. The engine reads names only to tell objects apart (no selector matches a ClusterQueue or
Cohort by name, and configs are compared by their rules), so equivalent units make the same
decisions, and a flap in one is a flap in the other, renamed.

The test is exact: each node gets the interned id of (its own description, the sorted ids of its
children), the classic canonical form of a labelled rooted tree, with the queues under test
marked. Equal ids at the roots mean isomorphic marked trees; nothing is hashed, so two
different trees never share an id.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..api.v1alpha1 import PREEMPTION_CONFIG_ANNOTATION
from ..engine.quota import QuotaNode

_IDENTITY = ("name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "managedFields")
BOOKKEEPING = ("kubectl.kubernetes.io/last-applied-configuration",)
"""Annotations that tools write and nothing of ours reads; kubectl's holds the object's name, so
keeping it would make every applied queue unlike every other."""


def _describe(obj: Any | None, configs: Mapping[str, Any], tree_fields: tuple[str, ...], quotas: bool) -> Any:
    """An object's wire form without what only names it or places it in the tree; the
    PreemptionConfig it names replaced by that config's rules; without quota amounts unless
    `quotas`."""
    if obj is None:
        return None
    wire = obj.to_wire()
    if not quotas:
        wire = _without_amounts(wire)
    meta = {k: v for k, v in wire.get("metadata", {}).items() if k not in _IDENTITY}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in BOOKKEEPING}
    named = annotations.pop(PREEMPTION_CONFIG_ANNOTATION, None)
    if named is not None:
        config = configs.get(named)
        annotations[PREEMPTION_CONFIG_ANNOTATION] = config.to_wire().get("spec") if config is not None else "<missing>"
    meta["annotations"] = annotations
    spec = {k: v for k, v in (wire.get("spec") or {}).items() if k not in tree_fields}
    return {"metadata": meta, "spec": spec}


def _without_amounts(wire: dict[str, Any]) -> dict[str, Any]:
    spec = dict(wire.get("spec") or {})
    groups = []
    for group in spec.get("resourceGroups") or []:
        flavors = [
            {"name": f.get("name"), "resources": [r.get("name") for r in f.get("resources") or []]}
            for f in group.get("flavors") or []
        ]
        groups.append({**group, "flavors": flavors})
    if groups:
        spec["resourceGroups"] = groups
    return {**wire, "spec": spec}


class Canon:
    """Canonical ids of the quota trees of a setup, with marked queues. With `quotas` off, two
    trees that differ only in quota amounts share ids: for what reads no amount."""

    def __init__(
        self,
        queues: Mapping[str, Any],
        cohorts: Mapping[str, Any],
        configs: Mapping[str, Any],
        analysed: set[str],
        quotas: bool = True,
    ) -> None:
        self._quotas = quotas
        self._labels: dict[int, str] = {}
        self._ids: dict[tuple[Any, ...], int] = {}
        self._plain: dict[int, int] = {}
        self._queues, self._cohorts, self._configs, self._analysed = queues, cohorts, configs, analysed

    def _label(self, node: QuotaNode) -> str:
        key = id(node)
        if key not in self._labels:
            quotas: list[Any] = sorted(
                (list(fr), q.nominal, q.borrowing_limit, q.lending_limit) if self._quotas else list(fr)
                for fr, q in node.quotas.items()
            )
            if node.is_cluster_queue:
                obj = self._queues.get(node.name)
                own = _describe(obj, self._configs, ("cohortName", "namespaceSelector"), self._quotas)
                extra: Any = node.name in self._analysed
            else:
                own = _describe(self._cohorts.get(node.name), self._configs, ("parentName",), self._quotas)
                extra = None
            self._labels[key] = json.dumps([node.is_cluster_queue, quotas, own, extra], sort_keys=True)
        return self._labels[key]

    def _intern(self, parts: tuple[Any, ...]) -> int:
        return self._ids.setdefault(parts, len(self._ids))

    def _id(self, node: QuotaNode, marks: Mapping[str, str], paths: set[int]) -> int:
        if id(node) not in paths and id(node) in self._plain:
            return self._plain[id(node)]
        children = sorted(self._id(child, marks, paths) for child in (*node.child_cohorts, *node.child_cluster_queues))
        mark = marks.get(node.name, "") if node.is_cluster_queue else ""
        found = self._intern((self._label(node), mark, tuple(children)))
        if id(node) not in paths:
            self._plain[id(node)] = found
        return found

    def marked(self, root: QuotaNode, marks: Mapping[str, QuotaNode]) -> int:
        """The id of the tree under `root` with each queue in `marks` (letters -> queue nodes,
        several letters on one queue joined) marked."""
        letters: dict[str, str] = {}
        paths: set[int] = set()
        for letter, node in sorted(marks.items()):
            letters[node.name] = letters.get(node.name, "") + letter
            paths.add(id(node))
            paths.update(id(n) for n in node.path_to_root())
        return self._id(root, letters, paths)

    def edge(self, a: QuotaNode, b: QuotaNode) -> int:
        """Ordered: A the preemptor's queue, B the candidate's."""
        return self.marked(a.root(), {"A": a, "B": b})

    def pair(self, a: QuotaNode, b: QuotaNode) -> int:
        """Unordered: the analysis of a pair tries both directions."""
        return min(self.edge(a, b), self.edge(b, a))

    def cycle(self, nodes: tuple[QuotaNode, QuotaNode, QuotaNode]) -> int:
        """Up to rotation, not reflection: A evicts B evicts C evicts A."""
        root = nodes[0].root()
        return min(self.marked(root, dict(zip("ABC", nodes[i:] + nodes[:i], strict=True))) for i in range(len(nodes)))
