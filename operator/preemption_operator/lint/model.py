"""The setup as the flapping analysis models it: the parts of the input that decide preemption,
read once (`Setup`), and the workloads it quantifies over, as the rules tell them apart (`Kind`)
and with an effective priority (`Shape`). `NOW`, the one moment all of lint runs at, is here
because the setup is read at it.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ..api import kinds, v1alpha1, v1beta2
from ..api.meta import LabelSelector, format_time
from ..api.objects import parse_object
from ..engine import protection
from ..engine.cache import Cache
from ..engine.configurable import parse_int32
from ..engine.quota import QuotaNode
from ..engine.snapshot import ClusterQueueInfo, Snapshot

NOW = datetime(2030, 1, 1, tzinfo=UTC)
"""The moment every check runs at (fixed, so that a witness reproduces)."""
MAX_SHAPES_PER_QUEUE = 20_000


@dataclass(frozen=True)
class Kind:
    """A workload as the rules tell workloads apart, its effective priority aside."""

    cluster_queue: str
    priority_class: tuple[str, str] | None
    """(kind, name) of its priority class; None for none."""
    labels: tuple[tuple[str, str], ...]
    base: int = 0
    """Its base priority: the class's value, or without a class `spec.priority` (which whoever
    creates a Workload may set, and which a class missing from the setup gives)."""


@dataclass(frozen=True)
class Shape:
    """A kind with an effective priority (the class's value plus the priority-boost annotation)."""

    kind: Kind
    priority: int

    @property
    def cluster_queue(self) -> str:
        return self.kind.cluster_queue

    @property
    def priority_class(self) -> tuple[str, str] | None:
        return self.kind.priority_class

    @property
    def labels(self) -> tuple[tuple[str, str], ...]:
        return self.kind.labels

    def describe(self) -> str:
        boost = self.priority - self.kind.base
        parts = [f"priority {self.priority}" + (f" = base {self.kind.base} + priority-boost {boost}" if boost else "")]
        if self.priority_class:
            parts.append(f"class {self.priority_class[1]}")
        elif self.kind.base:
            parts.append(f"no class, spec.priority {self.kind.base}")
        if self.labels:
            parts.append("labels " + ",".join(f"{k}={v}" for k, v in self.labels))
        return f"a workload of ClusterQueue {self.cluster_queue} ({'; '.join(parts)})"


# -- the setup ------------------------------------------------------------------------------------


def _kind(obj: Any) -> str:
    return type(obj).__name__


def _satisfying_labels(selector: LabelSelector | None) -> dict[str, str] | None:
    """Labels a namespace needs to match the selector; None when no labels can (or unset, which
    matches nothing in Kueue)."""
    if selector is None:
        return None
    labels = dict(selector.match_labels or {})
    for req in selector.match_expressions or []:
        if req.operator == "In":
            if not req.values:
                return None
            labels.setdefault(req.key, req.values[0])
        elif req.operator == "Exists":
            labels.setdefault(req.key, "lint")
        elif req.operator == "NotIn" and labels.get(req.key) in (req.values or []):
            return None
    return labels


def _without_checks(obj: Any) -> Any:
    """A ClusterQueue as lint analyses it: AdmissionChecks are not modelled (they would make a
    queue whose checks are not in the setup inactive, and so never analysed); every check is taken
    as answering Ready, the case in which workloads are admitted and may evict each other."""
    if isinstance(obj, v1beta2.ClusterQueue) and obj.spec.admission_checks_strategy is not None:
        return obj.model_copy(update={"spec": obj.spec.model_copy(update={"admission_checks_strategy": None})})
    return obj


class Setup:
    """The parts of the input that decide preemption, parsed once, plus the generated objects the
    checks share (namespaces, LocalQueues)."""

    def __init__(self, objects: Iterable[Any]) -> None:
        self.base = [_without_checks(o) for o in objects if _kind(o) in kinds.SETUP]
        cache = Cache()
        cache.load(self.base)
        self.snapshot: Snapshot = cache.snapshot(NOW)
        self.queues: dict[str, ClusterQueueInfo] = dict(self.snapshot.cluster_queues)
        self.priority_classes = cache.priority_classes
        self.classes: dict[tuple[str, str], int] = {key: pc.value for key, pc in self.priority_classes.items()}
        # Tolerations as the engine reads them (a class whose annotations do not parse has none).
        self.tolerations = [t for t, _ in map(protection.toleration_of, self.priority_classes.values()) if t]
        self.configs: dict[str, v1alpha1.PreemptionConfig] = {
            o.metadata.name: o for o in self.base if isinstance(o, v1alpha1.PreemptionConfig)
        }
        raw_cqs = {o.metadata.name: o for o in self.base if isinstance(o, v1beta2.ClusterQueue)}
        self.raw_queues: dict[str, v1beta2.ClusterQueue] = raw_cqs
        self.raw_cohorts: dict[str, Any] = {o.metadata.name: o for o in self.base if _kind(o) == "Cohort"}
        self.namespace_of: dict[str, str] = {}
        namespaces: dict[str, dict[str, str]] = {}
        for name, cq in sorted(raw_cqs.items()):
            info = self.queues.get(name)
            if info is None or not info.active:
                continue
            labels = _satisfying_labels(cq.spec.namespace_selector)
            if labels is None:
                continue
            pinned = labels.get("kubernetes.io/metadata.name")
            ns = pinned or f"lint-{name}"
            labels["kubernetes.io/metadata.name"] = ns
            merged = {**namespaces.get(ns, {}), **labels}
            if not info.namespace_selector.matches(merged):
                continue
            namespaces[ns] = merged
            self.namespace_of[name] = ns
        self.generated: list[Any] = []
        for ns, labels in sorted(namespaces.items()):
            self.generated.append(
                parse_object(
                    {
                        "apiVersion": "v1",
                        "kind": "Namespace",
                        "metadata": {"name": ns, "labels": labels, "creationTimestamp": format_time(NOW)},
                    }
                )
            )
        for queue, ns in sorted(self.namespace_of.items()):
            self.generated.append(
                parse_object(
                    {
                        "apiVersion": "kueue.x-k8s.io/v1beta2",
                        "kind": "LocalQueue",
                        "metadata": {"name": f"lint-{queue}", "namespace": ns},
                        "spec": {"clusterQueue": queue},
                    }
                )
            )
        self.long = timedelta(hours=1) + max(self._durations(), default=timedelta(0))
        self.fresh_matters = self._fresh_matters()

    # Everything the analysis quantifies over is read from the setup here.

    def _durations(self) -> Iterator[timedelta]:
        for config in self.configs.values():
            for rule in config.rules:
                texts: list[str | None] = [rule.activation_policy.min_trigger_required_duration]
                for spec in rule.candidate_selectors or []:
                    texts += [
                        spec.min_execution_duration,
                        spec.max_execution_duration,
                        spec.min_time_from_creation_duration,
                        spec.max_time_from_creation_duration,
                    ]
                for text in texts:
                    value = protection.parse_duration(text) if text else None
                    if value is not None:
                        yield value
        for toleration in self.tolerations:
            yield timedelta(seconds=max(0, min(toleration.toleration_seconds, 2**31 - 1)))
        for cq in self.queues.values():
            yield protection.preemption_delay(cq.node)[0]

    def _fresh_matters(self) -> bool:
        for config in self.configs.values():
            for rule in config.rules:
                for spec in rule.candidate_selectors or []:
                    if spec.max_execution_duration or spec.max_time_from_creation_duration:
                        return True
                    if spec.execution_time_relation or spec.time_from_creation_relation:
                        return True
        return False

    @functools.cache  # noqa: B019 - one Setup per analysis
    def tree_objects(self, root: QuotaNode) -> list[Any]:
        """The setup as one cohort tree sees it: its queues and cohorts, every object of the
        other kinds, and the namespaces and LocalQueues generated for its queues."""
        queues = {n.name for n in root.subtree_cluster_queues()}
        cohorts = {n.name for n in nodes(root) if not n.is_cluster_queue}
        keep = []
        for obj in [*self.base, *self.generated]:
            kind = _kind(obj)
            if kind == "ClusterQueue" and obj.metadata.name not in queues:
                continue
            if kind == "Cohort" and obj.metadata.name not in cohorts:
                continue
            if kind == "LocalQueue" and obj.spec.cluster_queue not in queues:
                continue
            if kind == "Namespace" and obj.metadata.name not in {self.namespace_of.get(q) for q in queues}:
                continue
            keep.append(obj)
        return keep

    def tree(self, queue: str) -> list[Any]:
        return self.tree_objects(self.queues[queue].node.root())

    @functools.cache  # noqa: B019 - one Setup per analysis
    def priorities(self) -> list[int]:
        """Every effective priority that compares differently against the values the setup names."""
        values = {0, *self.classes.values()}
        for cq in self.queues.values():
            borrow = cq.preemption.borrow_within_cohort
            if borrow is not None and borrow.max_priority_threshold is not None:
                values.add(borrow.max_priority_threshold)
        values.update(t.minimum_preemptable_priority for t in self.tolerations)
        reps = {v + d for v in values for d in (-2, -1, 0, 1, 2)}
        return sorted(p for p in reps if -(2**31) <= p < 2**31)

    @functools.cache  # noqa: B019 - one Setup per analysis
    def label_values(self) -> dict[str, list[str | None]]:
        """Per label key the rules read, the values that tell workloads apart (None: absent)."""
        named: dict[str, set[str]] = {}
        numeric: dict[str, set[int]] = {}

        def selector(sel: LabelSelector | None) -> None:
            if sel is None:
                return
            for key, value in (sel.match_labels or {}).items():
                named.setdefault(key, set()).add(value)
            for req in sel.match_expressions or []:
                named.setdefault(req.key, set()).update(req.values or [])

        for config in self.configs.values():
            for rule in config.rules:
                selector(rule.preemptor_selector)
                for spec in rule.candidate_selectors or []:
                    selector(spec.label_selector)
                    for constraint in spec.numeric_labels or []:
                        bounds = numeric.setdefault(constraint.key, set())
                        for v in (constraint.min_value, constraint.max_value, constraint.fallback_value):
                            if v is not None:
                                bounds.add(v)
        values: dict[str, list[str | None]] = {}
        for key in sorted(set(named) | set(numeric)):
            texts: set[str] = set(named.get(key, set()))
            if key in numeric:
                points = numeric[key] or {0}
                texts |= {str(v + d) for v in points for d in (-2, -1, 0, 1, 2)}
            else:
                texts.add(_other(texts))
            ordered: list[str | None] = [None, *sorted(texts, key=_numeric_first)]
            values[key] = ordered
        return values

    # -- kinds --

    def kinds(self, cq: str) -> list[Kind]:
        """The workloads of a queue as the rules tell them apart, priority aside."""
        # Labels read by any config count: rules of other queues select this queue's workloads.
        label_values = self.label_values()
        combos = list(itertools.product(*label_values.values())) if label_values else [()]
        keys = list(label_values)
        # Workload classes first, the cluster's system classes last: the first witness found then
        # reads like the setup's own workloads, not like kube-system's.
        klasses: list[tuple[tuple[str, str] | None, int]] = [
            (k, self.classes[k]) for k in sorted(self.classes, key=_class_order)
        ]
        klasses += [(None, base) for base in self.unclassed_bases()]
        count = len(klasses) * len(combos)
        if count * len(self.priorities()) > MAX_SHAPES_PER_QUEUE:
            raise TooManyShapes(cq, count * len(self.priorities()))
        return [
            Kind(cq, klass, tuple((k, v) for k, v in zip(keys, combo, strict=True) if v is not None), base)
            for klass, base in klasses
            for combo in combos
        ]

    @functools.cache  # noqa: B019 - one Setup per analysis
    def reads_base(self) -> bool:
        """Whether a rule compares base priorities apart from boosted ones (mode Base)."""
        return any(
            spec.priority is not None and spec.priority.mode == "Base"
            for config in self.configs.values()
            for rule in config.rules
            for spec in rule.candidate_selectors or []
        )

    @functools.cache  # noqa: B019 - one Setup per analysis
    def unclassed_bases(self) -> list[int]:
        """The base priorities tried for workloads without a class of the setup, 0 first. Their
        `spec.priority` may be anything; it differs from the effective priority (which is tried
        over every value anyway) only where a rule compares base priorities, so only then is it
        quantified on its own."""
        if not self.reads_base():
            return [0]
        return sorted(self.priorities(), key=lambda p: (abs(p), p))

    @functools.cache  # noqa: B019 - one Setup per analysis
    def priorities_of(self, kind: Kind) -> list[int]:
        """The kind's effective priorities, unboosted first (the first witness found is then the
        least surprising)."""
        base = kind.base
        return sorted(self.priorities(), key=lambda p: (abs(p - base), p))

    @functools.cache  # noqa: B019 - one Setup per analysis
    def index(self) -> dict[int, int]:
        """Position of each effective priority in `priorities()`: the bit of a priority mask."""
        return {p: i for i, p in enumerate(self.priorities())}


def _class_order(key: tuple[str, str]) -> tuple[int, str]:
    kind, name = key
    return (0 if kind == "WorkloadPriorityClass" else 2 if name.startswith("system-") else 1, name)


class TooManyShapes(Exception):
    def __init__(self, cq: str, count: int) -> None:
        super().__init__(f"ClusterQueue {cq}: {count} workload shapes, more than {MAX_SHAPES_PER_QUEUE}")
        self.count = count


def _other(values: set[str]) -> str:
    candidate = "other"
    while candidate in values:
        candidate += "-"
    return candidate


def _numeric_first(text: str) -> tuple[int, int, str]:
    number = parse_int32(text)
    return (0, number, "") if number is not None else (1, 0, text)


def nodes(root: QuotaNode) -> Iterator[QuotaNode]:
    """Every node of the cohort tree below `root`, `root` first."""
    yield root
    for child in root.child_cohorts:
        yield from nodes(child)
    yield from root.child_cluster_queues
