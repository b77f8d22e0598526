"""Flapping analysis for `lint`: can workloads evict each other in turn, forever?

A flap is a state that comes back. Two workloads A and B flap when, with everything else held
still, A (pending) evicts B (running) and then B (requeued) evicts A: the cluster is where it
started. A cycle A -> B -> C -> A does the same with three workloads.

The engine is the semantics. Every flap reported is one the scheduler itself decided, in each
state of the loop, on concrete objects, and those objects are the witness. When none is found,
the finite set of states tried is the proof:

- Workload shapes: each ClusterQueue; each priority class, and none; every effective priority
  that orders differently against the values the setup names (class values, thresholds,
  toleration minimums: each value and two on either side; the priority-boost annotation reaches
  any of them); without a class, where a rule compares base priorities, every such value as the
  base too (a Workload's spec.priority); every combination of the label values the rules read
  (each value a selector names, one other value, absent; for numeric labels the bounds and
  fallbacks and two on either side). Any workload passes exactly the tests that one of these
  shapes passes. READS maps every field to what covers it.
- Quota: the contested capacity full (the pending workload does not fit without an eviction);
  the rest of each cohort tree at nominal or empty; each involved queue at, one unit under and
  one unit over its nominal quota (the other taking what is left), where the unit is the greatest
  common divisor of the tree's quotas, so no quota boundary falls between two tried states.
- Time: every duration the setup names has passed (a flap that waits for a window is still a
  flap) and, when a selector bounds execution time from above or compares times, also a victim
  that has only just started; both creation orders.

Before the engine, a symbolic filter drops what cannot flap: for workload kinds (shape minus
priority) it computes which priority relations let A preempt B, given whether each queue is
within its nominal quota with its own workload admitted (an exchange of the workloads of two
different queues does not change that), and keeps a pair only if some priorities let each
preempt the other. Each of its tests is weaker than the engine's, so it never drops a real flap;
the property tests compare the whole analysis with brute force over raw values.

Not modelled: NOT_MODELLED says what, in the proof itself. With fair sharing, every state is
decided by the engine's fair preemption, so loops found are real, but the states do not cover
what fair preemption reads (FAIR_SHARING_NOT_MODELLED): the proof is never claimed.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from ..api import kinds, v1alpha1, v1beta2
from ..api.meta import LabelSelector, format_time
from ..api.objects import parse_object
from ..api.quantity import format_amount
from ..engine import Engine, QueueState, protection
from ..engine.cache import Cache
from ..engine.configurable import (
    BuildError,
    build_selector,
    compare,
    in_scope,
    parse_int32,
    rule_applies,
)
from ..engine.fair_sharing import OFF, FairSharing
from ..engine.quota import FlavorResource, QuotaNode
from ..engine.snapshot import ClusterQueueInfo, Snapshot
from ..engine.workload import PRIORITY_BOOST_ANNOTATION, WorkloadInfo, build_info
from . import symmetry
from .proof import Counts, Proof, Skip

NOW = datetime(2030, 1, 1, tzinfo=UTC)
"""The moment every check runs at (fixed, so that a witness reproduces)."""
FILLER_OPT_OUT = {protection.ALLOW_PREEMPTION: "false"}
"""Fillers are last-resort victims, so the only victim a search needs is the workload under test."""
MAX_SHAPES_PER_QUEUE = 20_000
MAX_TRIPLE_CHECKS = 50_000
"""Engine checks of three-workload cycles; past it, the proof says cycles were not proven absent."""


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


@dataclass(frozen=True)
class Timing:
    """Which workload of the loop is older, and whether the running ones have just started."""

    order: tuple[int, ...]
    """Creation order: indexes into the loop's workloads, oldest first."""
    fresh: bool


@dataclass(frozen=True)
class Levels:
    """Filler usage of each queue of the tree, by name (in the resource's integer amounts)."""

    fill: tuple[tuple[str, int], ...]
    donors_full: bool
    """The queues of the tree not under test are at nominal (else empty)."""


@dataclass
class Flap:
    shapes: tuple[Shape, ...]
    """The first evicts the second, the second the third (or the first, for a pair), ..."""
    reasons: tuple[str, ...]
    """The engine's reason for each eviction, in order."""
    states: list[list[Any]]
    """The objects of each state of the loop, in order; each leads to the next, the last to the first."""
    objects: tuple[str, ...]
    also: list[tuple[str, ...]] = field(default_factory=list)
    """The queues (in loop order) of equivalent loops elsewhere in the setup: the same queues,
    quotas, policies and rules under other names, which loop the same way."""

    @property
    def code(self) -> str:
        return "FlappingPair" if len(self.shapes) == 2 else "FlappingCycle"


@dataclass
class Result:
    flaps: list[Flap] = field(default_factory=list)
    proof: Proof | None = None


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
        cohorts = {n.name for n in _nodes(root) if not n.is_cluster_queue}
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


# -- objects for one state ------------------------------------------------------------------------


def _contested(a: ClusterQueueInfo, b: ClusterQueueInfo) -> FlavorResource | None:
    """The flavor-resource the two queues contend for: the first resource of A's first group in
    its first flavor, when B's first flavor for that resource is the same."""
    if a.node.root() is not b.node.root() or not a.resource_groups:
        return None
    group = a.resource_groups[0]
    if not group.covered_resources or not group.flavors:
        return None
    resource, flavor = group.covered_resources[0], group.flavors[0]
    other = b.group_for(resource)
    if other is None or not other.flavors or other.flavors[0] != flavor:
        return None
    return (flavor, resource)


def _unit(root: QuotaNode, fr: FlavorResource) -> int:
    values = []
    for node in _nodes(root):
        quota = node.quotas.get(fr)
        if quota is not None:
            values += [v for v in (quota.nominal, quota.borrowing_limit, quota.lending_limit) if v]
    return math.gcd(*values) if values else 1


def _nodes(root: QuotaNode) -> Iterator[QuotaNode]:
    yield root
    for child in root.child_cohorts:
        yield from _nodes(child)
    yield from root.child_cluster_queues


class Objects:
    """Builds (and reuses) the objects of the states the engine is asked about."""

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self._made: dict[Any, Any] = {}
        self.t0 = NOW - setup.long - timedelta(minutes=1)
        """The older workload of a pair is created then; the other a second later."""

    def workload(
        self, shape: Shape, name: str, fr: FlavorResource, amount: int, created: datetime, since: datetime | None
    ) -> Any:
        """A workload of the shape requesting `amount` of the contested resource; running (its
        quota reserved at `since`) or pending (since None)."""
        key = (shape, name, fr, amount, created, since)
        if key not in self._made:
            base = shape.kind.base
            meta: dict[str, Any] = {
                "name": name,
                "namespace": self.setup.namespace_of[shape.cluster_queue],
                "creationTimestamp": format_time(created),
            }
            if shape.labels:
                meta["labels"] = dict(shape.labels)
            if shape.priority != base:
                meta["annotations"] = {PRIORITY_BOOST_ANNOTATION: str(shape.priority - base)}
            spec: dict[str, Any] = {"queueName": f"lint-{shape.cluster_queue}", "podSets": [_pod_set(fr[1], amount)]}
            if shape.priority_class is not None:
                kind, klass = shape.priority_class
                group = "kueue.x-k8s.io" if kind == "WorkloadPriorityClass" else "scheduling.k8s.io"
                spec["priorityClassRef"] = {"group": group, "kind": kind, "name": klass}
                if kind == "PriorityClass":
                    spec["priority"] = base
            elif base:
                spec["priority"] = base
            body: dict[str, Any] = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": meta}
            body["spec"] = spec
            if since is not None:
                body["status"] = _admitted(shape.cluster_queue, fr, amount, since)
            self._made[key] = parse_object(body)
        return self._made[key]

    def filler(self, cq: str, fr: FlavorResource, amount: int) -> Any:
        """Quota held by a workload that is no one's preferred victim (opted out, top priority)."""
        key = ("filler", cq, fr, amount)
        if key not in self._made:
            since = self.t0 - timedelta(minutes=1)
            body = {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Workload",
                "metadata": {
                    "name": f"filler-{cq}",
                    "namespace": self.setup.namespace_of[cq],
                    "creationTimestamp": format_time(since),
                    "annotations": dict(FILLER_OPT_OUT),
                },
                "spec": {
                    "queueName": f"lint-{cq}",
                    "priority": 2**31 - 1,
                    "podSets": [_pod_set(fr[1], amount)],
                },
                "status": _admitted(cq, fr, amount, since),
            }
            self._made[key] = parse_object(body)
        return self._made[key]

    def fillers(self, fr: FlavorResource, levels: Levels) -> list[Any]:
        return [self.filler(cq, fr, amount) for cq, amount in levels.fill if amount > 0]

    def state(self, queue: str, fr: FlavorResource, levels: Levels, workloads: list[Any]) -> list[Any]:
        """The objects of one state of `queue`'s cohort tree: the other trees hold no workload,
        so nothing of theirs can decide here, and leaving them out keeps a large setup's checks
        as cheap as a small one's."""
        return [*self.setup.tree(queue), *self.fillers(fr, levels), *workloads]


def _pod_set(resource: str, amount: int) -> dict[str, Any]:
    requests = {"requests": {resource: format_amount(resource, amount)}}
    container: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": requests}
    return {"name": "main", "count": 1, "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}


def _admitted(cq: str, fr: FlavorResource, amount: int, since: datetime) -> dict[str, Any]:
    at = format_time(since)
    usage = {fr[1]: format_amount(fr[1], amount)}
    return {
        "conditions": [
            {
                "type": "QuotaReserved",
                "status": "True",
                "reason": "QuotaReserved",
                "message": f"Quota reserved in ClusterQueue {cq}",
                "lastTransitionTime": at,
            },
            {
                "type": "Admitted",
                "status": "True",
                "reason": "Admitted",
                "message": "The workload is admitted",
                "lastTransitionTime": at,
            },
        ],
        "admission": {
            "clusterQueue": cq,
            "podSetAssignments": [{"name": "main", "flavors": {fr[1]: fr[0]}, "resourceUsage": usage, "count": 1}],
        },
    }


def evicts(
    objects: list[Any], preemptor: str, victim: str, fr: FlavorResource, fair_sharing: FairSharing = OFF
) -> str | None:
    """One scheduling cycle over the objects: why the preemptor evicts the victim, or None (also
    when the state is one the scheduler never makes: a queue or cohort over its limits)."""
    cache = Cache(fair_sharing)
    cache.load(objects)
    snapshot = cache.snapshot(NOW)
    for cq in snapshot.cluster_queues.values():
        if cq.node._available(fr) < 0:
            return None
    result = Engine().cycle(snapshot, QueueState())
    for preemption in result.preempted:
        if preemption.victim.key == victim and preemption.preemptor.key == preemptor:
            target = preemption.target
            if target.rule is not None:
                return f"{target.reason}, PreemptionConfig {target.rule.config} rule {target.rule.describe()}"
            return target.reason
    return None


# -- the symbolic filter --------------------------------------------------------------------------

Relation = tuple[str | None, int | None]
"""(comparison, threshold): the candidate's effective priority `<comparison>` the preemptor's
(None: any) and, with a threshold, at most it. The comparison NewerEqual is Kueue's
LowerOrNewerEqualPriority: lower, or equal and created later."""
ANY: Relation = (None, None)
NEWER_EQUAL = "NewerEqual"
_CLASSIC = {"LowerPriority": "LessThan", "LowerOrNewerEqualPriority": NEWER_EQUAL}


def holds(relations: frozenset[Relation], preemptor: int, candidate: int, newer: bool = True) -> bool:
    """Whether some relation lets the preemptor take the candidate; `newer`: the candidate was
    created after the preemptor (True when the creation order is not chosen yet)."""
    for op, threshold in relations:
        if op == NEWER_EQUAL:
            ok = candidate < preemptor or (candidate == preemptor and newer)
        else:
            ok = op is None or compare(op, candidate, preemptor)
        if ok and (threshold is None or candidate <= threshold):
            return True
    return False


class Masks:
    """holds() over every pair of the setup's effective priorities at once, as bitmasks (the
    creation order not chosen yet): `rows(r)[i]` has bit j when a preemptor of priority P[i] may
    take a candidate of P[j]; `cols(r)[i]` has bit j when a preemptor of P[j] may take one of P[i]."""

    def __init__(self, priorities: list[int]) -> None:
        self.priorities = priorities
        self._rows: dict[frozenset[Relation], tuple[int, ...]] = {}
        self._cols: dict[frozenset[Relation], tuple[int, ...]] = {}
        self._cycles: dict[tuple[frozenset[Relation], ...], bool] = {}

    def rows(self, relations: frozenset[Relation]) -> tuple[int, ...]:
        if relations not in self._rows:
            ps = self.priorities
            self._rows[relations] = tuple(
                sum(1 << j for j, pb in enumerate(ps) if holds(relations, pa, pb)) for pa in ps
            )
        return self._rows[relations]

    def cols(self, relations: frozenset[Relation]) -> tuple[int, ...]:
        """The transpose of `rows`."""
        if relations not in self._cols:
            rows = self.rows(relations)
            self._cols[relations] = tuple(
                sum(1 << j for j, row in enumerate(rows) if row >> i & 1) for i in range(len(rows))
            )
        return self._cols[relations]

    def pair(self, there: frozenset[Relation], back: frozenset[Relation]) -> bool:
        """Whether some priorities let A take B under `there` and B take A under `back`."""
        if not there or not back:
            return False
        return any(r & c for r, c in zip(self.rows(there), self.cols(back), strict=True))

    def cycle(self, rels: tuple[frozenset[Relation], frozenset[Relation], frozenset[Relation]]) -> bool:
        """Whether some priorities let A take B, B take C and C take A."""
        if not all(rels):
            return False
        if rels not in self._cycles:
            self._cycles[rels] = self._cycle(rels)
        return self._cycles[rels]

    def _cycle(self, rels: tuple[frozenset[Relation], frozenset[Relation], frozenset[Relation]]) -> bool:
        ab, bc, ca = self.rows(rels[0]), self.rows(rels[1]), self.cols(rels[2])
        for i, js in enumerate(ab):
            back = ca[i]
            while js:
                j = (js & -js).bit_length() - 1
                js &= js - 1
                if bc[j] & back:
                    return True
        return False


def _newer(timing: Timing, candidate: int, preemptor: int) -> bool:
    return timing.order.index(candidate) > timing.order.index(preemptor)


def _classic(policy: str) -> Relation | None:
    if policy == "Any":
        return ANY
    op = _CLASSIC.get(policy)
    return (op, None) if op is not None else None


class Filter:
    """Under which priority relations may a workload of kind A preempt one of kind B, given
    whether each queue is within its nominal quota with its own workload admitted? Each test is
    weaker than the engine's, so an empty answer is a proof."""

    def __init__(self, setup: Setup, objects: Objects, by_symmetry: bool = True, fair: bool = False) -> None:
        """`fair`: the engine runs with fair sharing (its candidates from other queues follow
        reclaimWithinCohort alone, without Kueue's classic borrowing conditions)."""
        self.setup = setup
        self.objects = objects
        self.by_symmetry = by_symmetry
        self.fair = fair
        self._infos: dict[Kind, WorkloadInfo] = {}
        self.nested = {cq.node.root().name for cq in setup.queues.values() if cq.node.parent and cq.node.parent.parent}
        # The relations read no quota amount (quota enters only through the flags), so queue
        # pairs that a renaming maps onto each other, amounts aside, share them.
        self.canon = symmetry.Canon(
            setup.raw_queues, setup.raw_cohorts, setup.configs, set(setup.namespace_of), quotas=False
        )
        self._edges: dict[tuple[str, str], int] = {}
        self._relations: dict[tuple[Any, ...], frozenset[Relation]] = {}

    def edge(self, qa: str, qb: str) -> int:
        """The queue pair (A's, B's) as the relations see it."""
        key = (qa, qb)
        if key not in self._edges:
            if self.by_symmetry:
                self._edges[key] = self.canon.edge(self.setup.queues[qa].node, self.setup.queues[qb].node)
            else:  # each queue pair on its own (what the tests compare against)
                self._edges[key] = -1 - len(self._edges)
        return self._edges[key]

    def info(self, kind: Kind) -> WorkloadInfo:
        """The kind unboosted: tests that read the effective priority are left to the relations."""
        if kind not in self._infos:
            cq = self.setup.queues[kind.cluster_queue]
            fr = (cq.resource_groups[0].flavors[0], cq.resource_groups[0].covered_resources[0])
            shape = Shape(kind, kind.base)
            obj = self.objects.workload(shape, "w", fr, 1, self.objects.t0, None)
            self._infos[kind] = build_info(obj, self.setup.priority_classes)
        return self._infos[kind]

    def ever(self, a: Kind, b: Kind) -> frozenset[Relation]:
        """The relations under which A may preempt B in some quota state: each state's are a
        subset of these, since being within nominal only ever enables A's tests and disables B's."""
        return self.relations(a, b, True, False, True)

    def relations(self, a: Kind, b: Kind, a_within: bool, b_within: bool, a_before: bool) -> frozenset[Relation]:
        """`a_within`: A's queue within nominal with A in and B out; `b_within`: B's queue within
        nominal with B; `a_before`: A's queue within nominal with A added, B still in."""
        key = (
            self.edge(a.cluster_queue, b.cluster_queue),
            a.priority_class,
            a.labels,
            a.base,
            b.priority_class,
            b.labels,
            b.base,
            a_within,
            b_within,
            a_before,
        )
        found = self._relations.get(key)
        if found is None:
            found = self._relations[key] = self._relations_of(a, b, a_within, b_within, a_before)
        return found

    def _relations_of(self, a: Kind, b: Kind, a_within: bool, b_within: bool, a_before: bool) -> frozenset[Relation]:
        cqa, cqb = self.setup.queues[a.cluster_queue], self.setup.queues[b.cluster_queue]
        ia, ib = self.info(a), self.info(b)
        found: set[Relation] = set()
        policy = cqa.preemption
        if a.cluster_queue == b.cluster_queue:
            within = _classic(policy.within_cluster_queue)
            if within is not None:
                found.add(within)
        elif not b_within:  # Kueue takes candidates only from queues above their nominal quota
            reclaim = _classic(policy.reclaim_within_cohort)
            # Fair sharing leaves the rest to its strategies (on shares the filter does not read)
            # and ignores borrowWithinCohort, as Kueue does.
            if reclaim is not None and (self.fair or a_within or cqa.node.root().name in self.nested):
                found.add(reclaim)
            borrow = policy.borrow_within_cohort
            if not self.fair and reclaim is not None and borrow is not None and borrow.policy == "LowerPriority":
                found.add(("LessThan", borrow.max_priority_threshold))
        config = self.setup.configs.get(cqa.preemption_config_name or "")
        for rule in config.rules if config is not None else []:
            try:
                if not rule_applies(rule, ia):
                    continue
            except BuildError:
                continue
            if rule.activation_policy.preemptor_quota == "WithinNominalQuota" and not a_before:
                continue
            if rule.activation_policy.trigger == "QuotaFeasibleAndInsufficientTopology":
                continue  # never fires where quota is full; topology is not modelled
            for i, spec in enumerate(rule.candidate_selectors or []):
                if not in_scope(spec.scope, cqa, cqb) or (spec.quota is not None and b_within):
                    continue
                try:
                    selector = build_selector(i, spec, ia)
                except BuildError:
                    continue
                if selector.cq_matches(cqa, cqb) is not None:
                    continue
                boosted = spec.priority is not None and spec.priority.mode == "Boosted"
                tests = [test for name, test in selector.tests if not (boosted and name == "priority")]
                if any(test(ib) is not None for test in tests):
                    continue
                if boosted and spec.priority is not None:
                    found.add((spec.priority.comparison, None))
                else:
                    found.add(ANY)
        return frozenset(found)


# -- quota states ----------------------------------------------------------------------------------


def _available(objects: Objects, cq: str, fr: FlavorResource, fill: dict[str, int]) -> int | None:
    """What `cq` could still take with the fillers in place; None if they do not fit."""
    cache = Cache()
    cache.load(objects.state(cq, fr, Levels(tuple(sorted(fill.items())), True), []))
    snapshot = cache.snapshot(NOW)
    if any(snapshot.cluster_queues[name].node._available(fr) < 0 for name in fill):
        return None
    return snapshot.cluster_queues[cq].node.available(fr)


def fillings(
    setup: Setup, objects: Objects, queues: list[str], fr: FlavorResource, unit: int, running: int
) -> list[Levels]:
    """Fillings of the tree in which `running` units of the queues under test plus one pending
    unit do not fit: each queue under test but one at its edges, the last taking the rest."""
    root = setup.queues[queues[0]].node.root()
    others = sorted(
        n.name
        for n in root.subtree_cluster_queues()
        if n.name not in queues and n.name in setup.namespace_of and n.nominal(fr) > 0
    )
    found: list[Levels] = []
    for donors_full in (True, False):
        donors = {cq: setup.queues[cq].node.nominal(fr) if donors_full else 0 for cq in others}
        for last in queues:
            rest = [q for q in queues if q != last]
            edges = [
                sorted({v for v in (0, n - unit, n, n + unit) if v >= 0})
                for n in (setup.queues[q].node.nominal(fr) for q in rest)
            ]
            for levels in itertools.product(*edges):
                fill = {**donors, **dict(zip(rest, levels, strict=True))}
                avail = _available(objects, last, fr, fill)
                if avail is None or avail < running * unit:
                    continue
                fill[last] = avail - running * unit
                state = Levels(tuple(sorted(fill.items())), donors_full)
                if state not in found:
                    found.append(state)
    return found


# -- the analysis ----------------------------------------------------------------------------------

NAMES = ("workload-a", "workload-b", "workload-c")
ORDERING_NOT_MODELLED = (
    "spec.ordering between the two running workloads of a cycle of three beyond the states tried "
    "(a pair has one candidate, so no ordering matters there)"
)
OPT_OUT_NOT_MODELLED = (
    "the opt-out (yunikorn.apache.org/allow-preemption) on the workloads of a loop: it only makes a "
    "workload a later victim, never adds an eviction"
)
NOT_MODELLED: tuple[str, ...] = (
    "topology (TAS) placement",
    "admission checks",
    "flavors after the first",
    "resources other than the contested one",
    "workloads of more than one pod set",
    ORDERING_NOT_MODELLED,
    OPT_OUT_NOT_MODELLED,
)
READS: dict[str, str] = {
    "rules.name": "",
    "rules.preemptorSelector": "labels",
    "rules.preemptorPriorityClassSelector": "priority classes",
    "rules.activationPolicy.trigger": "quota",
    "rules.activationPolicy.preemptorQuota": "quota",
    "rules.activationPolicy.minTriggerRequiredDuration": "time",
    "rules.candidateSelectors.scope": "ClusterQueue",
    "rules.candidateSelectors.clusterQueueSelector": "ClusterQueue",
    "rules.candidateSelectors.labelSelector": "labels",
    "rules.candidateSelectors.numericLabels": "labels",
    "rules.candidateSelectors.priority.matchNames": "priority classes",
    "rules.candidateSelectors.priority.notMatchNames": "priority classes",
    "rules.candidateSelectors.priority.mode": "base priority",
    "rules.candidateSelectors.priority.comparison": "effective priorities",
    "rules.candidateSelectors.quota": "quota",
    "rules.candidateSelectors.minExecutionDuration": "time",
    "rules.candidateSelectors.maxExecutionDuration": "time",
    "rules.candidateSelectors.executionTimeRelation": "time",
    "rules.candidateSelectors.minTimeFromCreationDuration": "time",
    "rules.candidateSelectors.maxTimeFromCreationDuration": "time",
    "rules.candidateSelectors.timeFromCreationRelation": "time",
    "ordering": ORDERING_NOT_MODELLED,
    # What the engine reads of a Workload besides its rules' fields; each is set by its owner.
    f"Workload metadata.annotations[{PRIORITY_BOOST_ANNOTATION}]": "effective priorities",
    "Workload spec.priority": "base priority",
    "Workload metadata.labels": "labels",
    "Workload metadata.creationTimestamp": "time",
    f"Workload metadata.annotations[{protection.ALLOW_PREEMPTION}]": OPT_OUT_NOT_MODELLED,
}
"""What the flapping analysis does with each field a PreemptionConfig has (by path) and each part
of a Workload the engine reads: the words of the proof's `quantified over` line that cover it, or
the `not modelled` entry that says it is not (the tests hold every field to one of them)."""
FAIR_SHARING_NOT_MODELLED = (
    "fair sharing: shares set by resources or flavors other than the contested one (each queue's "
    "share is tried only as the contested resource sets it)",
    "fair sharing: fair-sharing weights other than the setup's",
    "fair sharing: the fill-back across several victims (kubernetes-sigs/kueue#14543)",
)
FAIR_SHARING_NOT_PROVEN = (
    "fair sharing: each state is decided by the engine's fair preemption (its strategies, the "
    "fill-back, rules after the fair candidates), so every loop found is real; but the states tried "
    "do not cover what fair preemption reads (see not modelled), so no loop found is no proof"
)


class Analysis:
    def __init__(self, objects: Iterable[Any], by_symmetry: bool = True, fair_sharing: FairSharing = OFF) -> None:
        """`by_symmetry`: decide equivalent pairs and cycles of queues once (off: each on its own,
        which the tests compare against). `fair_sharing`: the engine's switch; with it on, every
        state is decided by the engine's fair preemption, and the proof is not complete (see
        FAIR_SHARING_NOT_MODELLED)."""
        self.by_symmetry = by_symmetry
        self.fair_sharing = fair_sharing
        self.setup = Setup(objects)
        self.objects = Objects(self.setup)
        self.filter = Filter(self.setup, self.objects, by_symmetry, fair_sharing.enabled)
        self.masks = Masks(self.setup.priorities())
        self.canon = symmetry.Canon(
            self.setup.raw_queues, self.setup.raw_cohorts, self.setup.configs, set(self.setup.namespace_of)
        )
        self._pairs_seen: dict[int, Flap | None] = {}
        self._possible: dict[tuple[int, int], set[tuple[int, int]]] = {}
        self._possible_trios: dict[tuple[int, int, int], list[tuple[int, int, int]]] = {}
        self._triples_seen: dict[int, Flap | None] = {}
        self.counts = Counts()
        self.skipped: list[Skip] = []
        self.triples_skipped: Skip | None = None

    def timings(self, n: int) -> list[Timing]:
        fresh = (False, True) if self.setup.fresh_matters else (False,)
        return [Timing(order, f) for order in itertools.permutations(range(n)) for f in fresh]

    def run(self) -> Result:
        result = Result()
        kinds: dict[str, list[Kind]] = {}
        for cq in sorted(self.setup.namespace_of):
            try:
                kinds[cq] = self.setup.kinds(cq)
            except TooManyShapes as exc:
                self.skipped.append(Skip(str(exc), cq))
        self.counts.shapes = sum(len(k) * len(self.setup.priorities()) for k in kinds.values())
        trees: dict[str, list[str]] = {}
        for cq in kinds:
            trees.setdefault(self.setup.queues[cq].node.root().name, []).append(cq)
        for _, queues in sorted(trees.items()):
            flapped = False
            for qa, qb in _pairs(queues):
                key = self.canon.pair(self._node(qa), self._node(qb))
                flap, new = self._unit(self._pairs_seen, key, (qa, qb))
                if new:
                    flap = self._pair(qa, qb, kinds)
                    self._pairs_seen[key] = flap
                    result.flaps += [flap] if flap is not None else []
                flapped |= flap is not None
            if not flapped:  # cycles of three matter where no pair already flaps
                flap = self._triples(queues, kinds)
                if flap is not None and not any(f is flap for f in result.flaps):
                    result.flaps.append(flap)
        for flap in result.flaps:
            flap.objects = tuple(sorted({*flap.objects, *(o for qs in flap.also for o in self._involved(qs))}))
        result.proof = self._proof(result)
        return result

    def _node(self, cq: str) -> QuotaNode:
        return self.setup.queues[cq].node

    def _unit(self, seen: dict[int, Flap | None], key: int, queues: tuple[str, ...]) -> tuple[Flap | None, bool]:
        """(the decision of an equivalent unit, False) when one was decided, else (None, True).
        A flap found for an equivalent unit is also this one's, renamed: it is listed in `also`."""
        if not self.by_symmetry or key not in seen:
            return None, True
        flap = seen[key]
        if len(queues) == 2:
            self.counts.equivalent_queue_pairs += 1
        else:
            self.counts.equivalent_queue_triples += 1
        if flap is not None:
            flap.also.append(queues)
        return flap, False

    def _involved(self, queues: tuple[str, ...]) -> set[str]:
        found = {f"ClusterQueue/{cq}" for cq in queues}
        for cq in queues:
            name = self.setup.queues[cq].preemption_config_name
            if name in self.setup.configs:
                found.add(f"PreemptionConfig/{name}")
        return found

    # -- pairs --

    def _pair(self, qa: str, qb: str, kinds: dict[str, list[Kind]]) -> Flap | None:
        fr = _contested(self.setup.queues[qa], self.setup.queues[qb]) or _contested(
            self.setup.queues[qb], self.setup.queues[qa]
        )
        if fr is None:
            return None
        self.counts.queue_pairs += 1
        unit = _unit(self.setup.queues[qa].node.root(), fr)
        same = qa == qb
        # Within one queue, each unordered pair once.
        indexes = [(i, j) for i in range(len(kinds[qa])) for j in range(i if same else 0, len(kinds[qb]))]
        self.counts.shape_pairs += len(indexes) * len(self.setup.priorities()) ** 2
        # First in any quota state (cheap, and most setups stop here), then filling by filling.
        possible = self._possible_pairs(qa, qb, kinds)
        pairs = [(kinds[qa][i], kinds[qb][j]) for i, j in indexes if (i, j) in possible]
        if not pairs:
            return None
        kept: set[tuple[Shape, Shape]] = set()
        try:
            for state in fillings(self.setup, self.objects, sorted({qa, qb}), fr, unit, 1):
                there_quota = self._edge_quota((qa, qb), 0, fr, state, unit)
                back_quota = self._edge_quota((qa, qb), 1, fr, state, unit)
                for ka, kb in pairs:
                    there = self.filter.relations(ka, kb, *there_quota)
                    back = self.filter.relations(kb, ka, *back_quota) if there else frozenset()
                    if not back:
                        continue
                    rows, cols, index = self.masks.rows(there), self.masks.cols(back), self.setup.index()
                    for pa in self.setup.priorities_of(ka):
                        bs = rows[index[pa]] & cols[index[pa]]
                        if not bs:
                            continue
                        for pb in self.setup.priorities_of(kb):
                            if not bs >> index[pb] & 1:
                                continue
                            kept.add((Shape(ka, pa), Shape(kb, pb)))
                            for timing in self.timings(2):
                                if not (
                                    holds(there, pa, pb, _newer(timing, 1, 0))
                                    and holds(back, pb, pa, _newer(timing, 0, 1))
                                ):
                                    continue
                                flap = self.loop((Shape(ka, pa), Shape(kb, pb)), fr, unit, state, timing)
                                if flap is not None:
                                    return flap
            return None
        finally:
            self.counts.shape_pairs_kept_by_filter += len(kept)

    def _edge_quota(
        self, qs: tuple[str, ...], i: int, fr: FlavorResource, state: Levels, unit: int
    ) -> tuple[bool, bool, bool]:
        """The filter's quota inputs for the loop's i-th eviction (workload i, pending, evicts
        workload i+1; any other runs), exact for this filling: is the preemptor's queue within
        nominal once it replaced the victim; is the victim's queue within nominal as it stands;
        and is the preemptor's queue within nominal with the preemptor added before any victim
        leaves (what preemptorQuota: WithinNominalQuota reads)."""
        n = len(qs)
        pending, victim = qs[i], qs[(i + 1) % n]
        others = [qs[j] for j in range(n) if j not in (i, (i + 1) % n)]
        fill = dict(state.fill)

        def ok(queue: str, units: int) -> bool:
            return fill.get(queue, 0) + units * unit <= self.setup.queues[queue].node.nominal(fr)

        after = 1 + others.count(pending)
        return ok(pending, after), ok(victim, 1 + others.count(victim)), ok(pending, after + (victim == pending))

    # -- cycles of three --

    def _triples(self, queues: list[str], kinds: dict[str, list[Kind]]) -> Flap | None:
        checks = 0
        for qs in itertools.product(queues, repeat=3):
            if qs != min(qs[i:] + qs[:i] for i in range(3)):
                continue  # each cycle once, from its smallest rotation
            frs = {
                _contested(self.setup.queues[x], self.setup.queues[y]) for x, y in zip(qs, qs[1:] + qs[:1], strict=True)
            }
            if len(frs) != 1 or None in frs:
                continue
            fr = frs.pop()
            assert fr is not None
            key = self.canon.cycle((self._node(qs[0]), self._node(qs[1]), self._node(qs[2])))
            prior, new = self._unit(self._triples_seen, key, qs)
            if not new:
                if prior is not None:
                    return prior
                continue
            self._triples_seen[key] = None
            self.counts.queue_triples += 1
            trios = self._trios(qs, kinds)
            if not trios:
                continue  # no priorities let them take each other in turn, in any quota state
            # Two must run where one waits: half the unit, when the quotas allow, so that a queue
            # whose quota holds one unit still holds two workloads (boundaries stay on the grid).
            unit = _unit(self.setup.queues[qs[0]].node.root(), fr)
            unit = unit // 2 if unit % 2 == 0 else unit
            distinct = sorted(set(qs))
            for state in fillings(self.setup, self.objects, distinct, fr, unit, 2):
                edges = [self._edge_quota(qs, i, fr, state, unit) for i in range(3)]
                for ka, kb, kc in trios:
                    r_ab = self.filter.relations(ka, kb, *edges[0])
                    r_bc = self.filter.relations(kb, kc, *edges[1]) if r_ab else frozenset()
                    r_ca = self.filter.relations(kc, ka, *edges[2]) if r_bc else frozenset()
                    if not r_ca:
                        continue
                    for trio in self._priorities3((ka, kb, kc), (r_ab, r_bc, r_ca)):
                        self.counts.shape_triples_kept_by_filter += 1
                        rels = (r_ab, r_bc, r_ca)
                        for timing in self.timings(3):
                            if not all(
                                holds(
                                    rels[i],
                                    trio[i].priority,
                                    trio[(i + 1) % 3].priority,
                                    _newer(timing, (i + 1) % 3, i),
                                )
                                for i in range(3)
                            ):
                                continue
                            checks += 1
                            if checks > MAX_TRIPLE_CHECKS:
                                self.triples_skipped = Skip(
                                    f"cycles of three: more than {MAX_TRIPLE_CHECKS} states to check"
                                )
                                return None
                            flap = self.loop(trio, fr, unit, state, timing)
                            if flap is not None:
                                self._triples_seen[key] = flap
                                return flap
        return None

    def _possible_pairs(self, qa: str, qb: str, kinds: dict[str, list[Kind]]) -> set[tuple[int, int]]:
        """Indexes (into the queues' kinds) of the kinds that some priorities let take each other
        in turn in some quota state. Every queue lists its kinds in one order, and the relations
        follow the queues' edges, so queue pairs with the same edges share the answer."""
        key = (self.filter.edge(qa, qb), self.filter.edge(qb, qa))
        if key not in self._possible:
            ever = self.filter.ever
            self._possible[key] = {
                (i, j)
                for i, ka in enumerate(kinds[qa])
                for j, kb in enumerate(kinds[qb])
                if self.masks.pair(ever(ka, kb), ever(kb, ka))
            }
        return self._possible[key]

    def _trios(self, qs: tuple[str, ...], kinds: dict[str, list[Kind]]) -> list[tuple[Kind, Kind, Kind]]:
        """The kinds of the three queues that some priorities let take each other in turn in
        some quota state (the union over states is weaker than each state's test); shared, like
        `_possible_pairs`, by queue triples with the same edges."""
        a, b, c = qs
        edges = self.filter.edge
        key = (edges(a, b), edges(b, c), edges(c, a))
        if key not in self._possible_trios:
            ever, found = self.filter.ever, []
            for i, ka in enumerate(kinds[a]):
                for j, kb in enumerate(kinds[b]):
                    r_ab = ever(ka, kb)
                    if not r_ab:
                        continue
                    for k, kc in enumerate(kinds[c]):
                        if self.masks.cycle((r_ab, ever(kb, kc), ever(kc, ka))):
                            found.append((i, j, k))
            self._possible_trios[key] = found
        return [(kinds[a][i], kinds[b][j], kinds[c][k]) for i, j, k in self._possible_trios[key]]

    def _priorities3(
        self, ks: tuple[Kind, Kind, Kind], rels: tuple[frozenset[Relation], ...]
    ) -> Iterator[tuple[Shape, Shape, Shape]]:
        ka, kb, kc = ks
        ab, bc, ca = self.masks.rows(rels[0]), self.masks.rows(rels[1]), self.masks.cols(rels[2])
        index = self.setup.index()
        for pa in self.setup.priorities_of(ka):
            i = index[pa]
            if not ab[i]:
                continue
            for pb in self.setup.priorities_of(kb):
                j = index[pb]
                if not ab[i] >> j & 1:
                    continue
                cs = bc[j] & ca[i]
                if not cs:
                    continue
                for pc in self.setup.priorities_of(kc):
                    if cs >> index[pc] & 1:
                        yield (Shape(ka, pa), Shape(kb, pb), Shape(kc, pc))

    # -- the engine's word --

    def loop(
        self, shapes: tuple[Shape, ...], fr: FlavorResource, unit: int, levels: Levels, timing: Timing
    ) -> Flap | None:
        """Whether, state after state, each workload (pending) evicts the next (running) and the
        last the first: None at the first state where the engine decides otherwise."""
        o = self.objects
        n = len(shapes)
        created = {idx: o.t0 + timedelta(seconds=rank) for rank, idx in enumerate(timing.order)}
        since = NOW if timing.fresh else NOW - self.setup.long
        keys = [f"{self.setup.namespace_of[s.cluster_queue]}/{NAMES[i]}" for i, s in enumerate(shapes)]
        states, reasons = [], []
        for i in range(n):
            workloads = [
                o.workload(s, NAMES[j], fr, unit, created[j], None if j == i else since) for j, s in enumerate(shapes)
            ]
            state = o.state(shapes[0].cluster_queue, fr, levels, workloads)
            self.counts.engine_cycles += 1
            reason = evicts(state, keys[i], keys[(i + 1) % n], fr, self.fair_sharing)
            if reason is None:
                return None
            states.append(state)
            reasons.append(reason)
        involved = self._involved(tuple(s.cluster_queue for s in shapes))
        return Flap(shapes, tuple(reasons), states, tuple(sorted(involved)))

    def _proof(self, result: Result) -> Proof:
        labels = self.setup.label_values()
        skipped = (*self.skipped, *([self.triples_skipped] if self.triples_skipped else []))
        not_modelled: tuple[str, ...] = NOT_MODELLED
        if self.fair_sharing.enabled:
            skipped += (Skip(FAIR_SHARING_NOT_PROVEN),)
            not_modelled += FAIR_SHARING_NOT_MODELLED
        return Proof(
            flap_free=not result.flaps and not skipped,
            method="every pair of workload shapes, and every cycle of three where no pair flaps, in every "
            "quota and time state below, decided by the scheduler itself; a filter first drops what no "
            "mechanism lets preempt in turn; pairs and cycles of queues that a renaming of queues and cohorts "
            "maps onto one already decided (same tree shape, quotas, policies, labels, annotations and rules) "
            "share its decision",
            cluster_queues=len(self.setup.namespace_of),
            priority_classes=tuple(f"{kind}/{name}" for kind, name in sorted(self.setup.classes)),
            effective_priorities=tuple(self.setup.priorities()),
            unclassed_bases=tuple(self.setup.unclassed_bases()),
            labels={key: tuple(v if v is not None else "<absent>" for v in values) for key, values in labels.items()},
            quota_states="the contested capacity full; the rest of each cohort tree at nominal or empty; each "
            "queue under test at, one unit under and one unit over its nominal quota, another taking the rest",
            time=f"every duration in the setup elapsed (victims running {format_duration(self.setup.long)})"
            + ("; victims that have just started" if self.setup.fresh_matters else "")
            + "; every creation order",
            not_modelled=not_modelled,
            counts=dataclasses.replace(self.counts),
            skipped=skipped,
        )


def _pairs(queues: list[str]) -> Iterator[tuple[str, str]]:
    for i, qa in enumerate(queues):
        for qb in queues[i:]:
            yield qa, qb


def format_duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return "".join(f"{n}{u}" for n, u in ((hours, "h"), (minutes, "m"), (seconds, "s")) if n) or "0s"


def analyse(objects: Iterable[Any], fair_sharing: FairSharing = OFF) -> Result:
    return Analysis(objects, fair_sharing=fair_sharing).run()


def write_witness(flap: Flap, folder: Path, index: int) -> Path:
    """Each state of the loop as simulate input, in order; returns the first."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    loop = " -> ".join(f"{NAMES[i]} ({s.describe()})" for i, s in enumerate(flap.shapes)) + f" -> {NAMES[0]}"
    for n, state in enumerate(flap.states, start=1):
        path = folder / f"flap-{index}-state-{n}.yaml"
        header = (
            f"# preemption-operator lint, witness {index}, state {n} of {len(flap.states)}: {NAMES[n - 1]} is "
            f"pending and evicts {NAMES[n % len(flap.states)]}.\n# The loop: {loop}.\n"
            f"# Run: preemption-operator simulate {path.name} --now {format_time(NOW)}\n"
        )
        path.write_text(header + yaml.safe_dump_all([obj.to_wire() for obj in state], sort_keys=False))
        paths.append(path)
    return paths[0]
