"""The proof of the flapping analysis: what was quantified over and what was not decided, typed
once, with its two renderings (the CLI's lines, the one sentence of a FlapFree condition) and
its JSON form (`lint --output json`, and the operator's lint process)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Skip:
    """A part of the setup the analysis did not decide, and the ClusterQueue it concerns (None:
    it may concern any)."""

    reason: str
    cluster_queue: str | None = None


@dataclass
class Counts:
    """How much the analysis looked at (it counts as it goes)."""

    shapes: int = 0
    queue_pairs: int = 0
    shape_pairs: int = 0
    shape_pairs_kept_by_filter: int = 0
    queue_triples: int = 0
    equivalent_queue_pairs: int = 0
    equivalent_queue_triples: int = 0
    shape_triples_kept_by_filter: int = 0
    engine_cycles: int = 0


@dataclass(frozen=True)
class Proof:
    flap_free: bool
    method: str
    cluster_queues: int
    priority_classes: tuple[str, ...]
    effective_priorities: tuple[int, ...]
    labels: Mapping[str, tuple[str, ...]]
    quota_states: str
    time: str
    not_modelled: tuple[str, ...]
    counts: Counts = field(default_factory=Counts)
    skipped: tuple[Skip, ...] = ()
    unclassed_bases: tuple[int, ...] = (0,)
    """The base priorities (`spec.priority`) tried for workloads without a class of the setup."""

    def skipped_in(self, queues_of_trees: Iterable[str], tree_of: Mapping[str, str]) -> list[str]:
        """Why parts were not decided that may concern these cohort trees (`tree_of`: ClusterQueue
        -> its tree): skips naming a ClusterQueue of them, and skips naming none."""
        trees = set(queues_of_trees)
        return [s.reason for s in self.skipped if s.cluster_queue is None or tree_of.get(s.cluster_queue) in trees]

    # -- renderings

    def _labels(self) -> str:
        return "; ".join(f"{k}: {', '.join(v)}" for k, v in self.labels.items()) or "none read by the rules"

    def _priorities(self) -> str:
        found = self.effective_priorities or (0,)
        return f"{found[0]}..{found[-1]}"

    def _bases(self) -> str:
        """The base priorities of workloads without a class, in words."""
        bases = sorted(self.unclassed_bases)
        if bases == [0]:
            return "without a class, base priority 0 (no rule compares base priorities)"
        return f"without a class, base priority (spec.priority) {bases[0]}..{bases[-1]} ({len(bases)} values)"

    def lines(self) -> str:
        """The proof in a few lines (the CLI): what was quantified over, and the verdict."""
        c = self.counts
        verdict = (
            "no two or three workloads can evict each other in turn (proof below)"
            if self.flap_free
            else "see the Flapping findings"
            if not self.skipped
            else "not proven: " + "; ".join(s.reason for s in self.skipped)
        )
        return "\n".join(
            [
                f"flapping: {verdict}",
                f"  quantified over: {self.cluster_queues} ClusterQueue(s); priority classes: "
                + (", ".join(self.priority_classes) or "none")
                + f"; effective priorities {self._priorities()} ({len(self.effective_priorities)} values: "
                f"class value plus any priority-boost); {self._bases()}; labels: {self._labels()}",
                f"  quota: {self.quota_states}",
                f"  time: {self.time}",
                f"  {c.shapes} workload shapes, {c.shape_pairs} pairs in {c.queue_pairs} queue pair(s), "
                f"{c.shape_pairs_kept_by_filter} kept by the filter; {c.queue_triples} queue triple(s) "
                f"({c.equivalent_queue_pairs} pair(s) and {c.equivalent_queue_triples} triple(s) more decided "
                "by an equivalent one), "
                f"{c.shape_triples_kept_by_filter} shape triples kept; {c.engine_cycles} scheduling cycles run",
                f"  not modelled: {', '.join(self.not_modelled)}",
            ]
        )

    def sentence(self) -> str:
        """What a proof of flap-freedom quantified over, in one line (a FlapFree condition)."""
        return (
            "no two or three workloads can evict each other in turn. Quantified over "
            f"{self.counts.shapes} workload shapes (priority classes: {', '.join(self.priority_classes) or 'none'}; "
            f"effective priorities {self._priorities()}; {self._bases()}; labels: {self._labels()}); "
            f"quota: {self.quota_states}; "
            f"time: {self.time}; {self.counts.engine_cycles} scheduling cycles run. Not modelled: "
            + ", ".join(self.not_modelled)
        )

    # -- JSON

    def to_dict(self) -> dict[str, Any]:
        c = self.counts
        return {
            "flapFree": self.flap_free,
            "method": self.method,
            "clusterQueues": self.cluster_queues,
            "priorityClasses": list(self.priority_classes),
            "effectivePriorities": list(self.effective_priorities),
            "unclassedBasePriorities": list(self.unclassed_bases),
            "labels": {k: list(v) for k, v in self.labels.items()},
            "quotaStates": self.quota_states,
            "time": self.time,
            "notModelled": list(self.not_modelled),
            "shapes": c.shapes,
            "queuePairs": c.queue_pairs,
            "shapePairs": c.shape_pairs,
            "shapePairsKeptByFilter": c.shape_pairs_kept_by_filter,
            "queueTriples": c.queue_triples,
            "equivalentQueuePairs": c.equivalent_queue_pairs,
            "equivalentQueueTriples": c.equivalent_queue_triples,
            "shapeTriplesKeptByFilter": c.shape_triples_kept_by_filter,
            "engineCycles": c.engine_cycles,
            "skipped": [s.reason for s in self.skipped],
            "skippedClusterQueues": [s.cluster_queue for s in self.skipped],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Proof:
        reasons = list(data.get("skipped") or [])
        queues = list(data.get("skippedClusterQueues") or [None] * len(reasons))
        return cls(
            flap_free=bool(data["flapFree"]),
            method=str(data["method"]),
            cluster_queues=int(data["clusterQueues"]),
            priority_classes=tuple(data["priorityClasses"]),
            effective_priorities=tuple(data["effectivePriorities"]),
            unclassed_bases=tuple(data.get("unclassedBasePriorities") or (0,)),
            labels={k: tuple(v) for k, v in data["labels"].items()},
            quota_states=str(data["quotaStates"]),
            time=str(data["time"]),
            not_modelled=tuple(data["notModelled"]),
            counts=Counts(
                shapes=data["shapes"],
                queue_pairs=data["queuePairs"],
                shape_pairs=data["shapePairs"],
                shape_pairs_kept_by_filter=data["shapePairsKeptByFilter"],
                queue_triples=data["queueTriples"],
                equivalent_queue_pairs=data["equivalentQueuePairs"],
                equivalent_queue_triples=data["equivalentQueueTriples"],
                shape_triples_kept_by_filter=data["shapeTriplesKeptByFilter"],
                engine_cycles=data["engineCycles"],
            ),
            skipped=tuple(Skip(r, q) for r, q in zip(reasons, queues, strict=True)),
        )
