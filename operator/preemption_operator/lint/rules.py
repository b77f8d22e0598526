"""`lint`'s checks of what PreemptionConfig rules can do in a setup: selectors no workload can
satisfy (UnreachableSelector), rules another rule of their tier always covers (ShadowedRule), and
rules the setup's protections leave without victims (ContradictoryProtection).

The engine decides. Selectors are built by engine.configurable and evaluated on workloads made
up for the purpose, one for each class of values a selector tells apart: each label value it
names, one other value and absence; for integers every bound, fallback and named value and two on
either side; for durations every bound and one microsecond past it; for priorities the setup's
classes (a class the setup does not define may have any value). Any real workload passes exactly
the tests one of these passes. Protections are read by engine.protection.

Label requirements and numeric constraints read one key each, so a selector is satisfiable when
the requirements on each key are, and one selector implies another when it does key by key:
the search is per key, never over the product of all keys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..api import kinds
from ..api.meta import LabelSelector
from ..api.objects import parse_object
from ..api.v1alpha1 import CandidateSelector, PreemptionConfig, PreemptionRule
from ..engine import protection
from ..engine.cache import Cache
from ..engine.configurable import (
    DRS_QUOTA,
    BuildError,
    BuiltSelector,
    build_selector,
    parse_int32,
    rule_applies,
    validate,
)
from ..engine.quota import QuotaNode
from ..engine.selectors import EVERYTHING, Requirement, Selector, SelectorError, build
from ..engine.snapshot import ClusterQueueInfo
from ..engine.workload import INT32_MAX, INT32_MIN, PriorityClassInfo, WorkloadInfo, build_info
from .model import NOW  # one fixed moment for all of lint

if TYPE_CHECKING:
    from .findings import Report, Severity

CODES = ("UnreachableSelector", "ShadowedRule", "ContradictoryProtection")
EPSILON = timedelta(microseconds=1)
"""The engine's time resolution (datetime's): the smallest step past a duration bound."""
SCOPE_RANK = {
    "WithinLocalQueue": 0,
    "WithinClusterQueue": 1,
    "WithinParentCohort": 2,
    "WithinCohortTree": 3,
    "AnyClusterQueue": 4,
}
"""Scopes by inclusion: a workload in scope of one is in scope of every later one (same
LocalQueue, same ClusterQueue, same parent Cohort, same root, anywhere)."""
STRICTER = {("LessThan", "LessThanOrEqual"), ("GreaterThan", "GreaterThanOrEqual")}
"""(a, b): `x a y` implies `x b y`."""
NO_CLASS = ""
"""The priority class name of a workload without one (WorkloadInfo.priority_class_name)."""


@dataclass(frozen=True)
class Klass:
    """A priority class a workload may name: (kind, name), or None for none; the value, or None
    when the setup does not define the class (then any value is possible)."""

    ref: tuple[str, str] | None
    value: int | None

    def describe(self) -> str:
        if self.ref is None:
            return "no class (priority 0)"
        return f"{self.ref[1]} ({self.value})" if self.value is not None else f"{self.ref[1]} (not defined here)"


class Setup:
    """The setup as the engine reads it, and the made-up workloads the checks evaluate."""

    def __init__(self, objects: Iterable[Any]) -> None:
        base = [o for o in objects if type(o).__name__ in kinds.SETUP]
        cache = Cache()
        cache.load(base)
        self.queues: dict[str, ClusterQueueInfo] = dict(cache.snapshot(NOW).cluster_queues)
        self.classes: dict[tuple[str, str], PriorityClassInfo] = dict(cache.priority_classes)
        self.users: dict[str, list[ClusterQueueInfo]] = {}
        for name in sorted(self.queues):
            config = self.queues[name].preemption_config_name
            if config:
                self.users.setdefault(config, []).append(self.queues[name])
        self._templates: dict[tuple[str, str] | None, WorkloadInfo] = {}

    def workload(
        self,
        ref: tuple[str, str] | None = None,
        *,
        labels: dict[str, str] | None = None,
        base: int | None = None,
        boost: int = 0,
        age: timedelta = timedelta(0),
        execution: timedelta | None = None,
        accumulated: int = 0,
    ) -> WorkloadInfo:
        """A workload naming the class `ref` (its value unless `base` is given), running for
        `execution` (pending when None) and created `age` ago."""
        template = self._templates.get(ref)
        if template is None:
            template = self._templates[ref] = build_info(_workload_object(ref), self.classes)
        return dataclasses.replace(
            template,
            labels=labels or {},
            base_priority=template.base_priority if base is None else base,
            boost=boost,
            created=NOW - age,
            reserved_at=None if execution is None else NOW - execution,
            accumulated_execution_seconds=accumulated,
        )

    def universe(self, names: Iterable[str]) -> list[Klass]:
        """The classes a workload may name: none, each one the setup defines, and each name the
        rules mention that it does not (any value). Without any class in the setup, the setup
        says nothing about classes: one more, unnamed, of any value."""
        found = [Klass(None, 0), *(Klass(ref, info.value) for ref, info in sorted(self.classes.items()))]
        known = {ref[1] for ref in self.classes}
        for name in sorted(set(names) - known - {NO_CLASS}):
            found.append(Klass(("WorkloadPriorityClass", name), None))
        if not self.classes:
            found.append(Klass(("WorkloadPriorityClass", _other(set(names))), None))
        return found

    def values(self, klass: Klass) -> list[int]:
        """A class's value; for an undefined class, each value that compares differently with the
        setup's values (class values, toleration minimums) and 0."""
        if klass.value is not None:
            return [klass.value]
        points = {0, *(c.value for c in self.classes.values())}
        for cls in self.classes.values():
            policy, _ = protection.toleration_of(cls)
            if policy is not None:
                points.add(policy.minimum_preemptable_priority)
        return sorted({p + d for p in points for d in (-1, 0, 1) if INT32_MIN <= p + d <= INT32_MAX})


def _workload_object(ref: tuple[str, str] | None) -> Any:
    container = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
    spec: dict[str, Any] = {
        "queueName": "lint",
        "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}],
    }
    if ref is not None:
        group = "kueue.x-k8s.io" if ref[0] == "WorkloadPriorityClass" else "scheduling.k8s.io"
        spec["priorityClassRef"] = {"group": group, "kind": ref[0], "name": ref[1]}
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "lint", "namespace": "lint"},
    }
    return parse_object({**body, "spec": spec})


def _other(named: set[str]) -> str:
    """A value none of `named` is (and no integer)."""
    text = "lint-other"
    while text in named:
        text += "-"
    return text


# -- labels -----------------------------------------------------------------------------------------


def _restricted(sel: LabelSelector | None, key: str) -> LabelSelector | None:
    if sel is None:
        return None
    labels = {k: v for k, v in (sel.match_labels or {}).items() if k == key}
    expressions = [e for e in sel.match_expressions or [] if e.key == key]
    return LabelSelector(match_labels=labels or None, match_expressions=expressions or None)


def _named(selectors: Iterable[LabelSelector | None], key: str) -> set[str]:
    named: set[str] = set()
    for sel in selectors:
        if sel is None:
            continue
        if key in (sel.match_labels or {}):
            named.add((sel.match_labels or {})[key])
        for expr in sel.match_expressions or []:
            if expr.key == key:
                named.update(expr.values or [])
    return named


def _selector_keys(sel: LabelSelector | None) -> set[str]:
    if sel is None:
        return set()
    return set(sel.match_labels or {}) | {e.key for e in sel.match_expressions or []}


def _built(sel: LabelSelector | None) -> Selector | None:
    """The engine's selector (nil selects everything, as for every selector a rule has); None
    when it does not build (InvalidSelector reports that)."""
    try:
        return build(sel, nil=EVERYTHING)
    except SelectorError:
        return None


def _key_options(requirements: Sequence[Requirement]) -> list[str | None]:
    named = {v for r in requirements for v in r.values}
    return [None, _other(named), *sorted(named)]


def _by_key(sel: Selector) -> dict[str, list[Requirement]]:
    keys: dict[str, list[Requirement]] = {}
    for req in sel.requirements:
        keys.setdefault(req.key, []).append(req)
    return keys


def unsatisfiable_keys(sel: Selector) -> list[str]:
    """The keys whose requirements no label value (nor absence) meets."""
    bad = []
    for key, reqs in sorted(_by_key(sel).items()):
        part = Selector(tuple(reqs))
        if not any(part.matches({} if v is None else {key: v}) for v in _key_options(reqs)):
            bad.append(key)
    return bad


def selector_implies(narrow: Selector, wide: Selector) -> bool:
    """Whether every label set `narrow` matches, `wide` matches too (`narrow` satisfiable)."""
    narrow_keys, wide_keys = _by_key(narrow), _by_key(wide)
    for key, wide_reqs in wide_keys.items():
        narrow_reqs = narrow_keys.get(key, [])
        a, b = Selector(tuple(narrow_reqs)), Selector(tuple(wide_reqs))
        for value in _key_options([*narrow_reqs, *wide_reqs]):
            labels = {} if value is None else {key: value}
            if a.matches(labels) and not b.matches(labels):
                return False
    return True


def _show_requirements(sel: LabelSelector | None, key: str) -> list[str]:
    if sel is None:
        return []
    shown = [f"{key}={v}" for k, v in (sel.match_labels or {}).items() if k == key]
    for expr in sel.match_expressions or []:
        if expr.key == key:
            values = f" [{', '.join(expr.values or [])}]" if expr.operator in ("In", "NotIn") else ""
            shown.append(f"{key} {expr.operator}{values}")
    return shown


class LabelKey:
    """Candidate selectors cut down to the label requirements and numeric constraints on one key,
    with the values of that key that tell workloads apart."""

    def __init__(self, setup: Setup, specs: Sequence[CandidateSelector], key: str) -> None:
        self.setup = setup
        self.key = key
        self.parts = [
            CandidateSelector(
                scope="AnyClusterQueue",
                label_selector=_restricted(spec.label_selector, key),
                numeric_labels=[c for c in spec.numeric_labels or [] if c.key == key] or None,
            )
            for spec in specs
        ]
        named = _named((spec.label_selector for spec in specs), key)
        constraints = [c for part in self.parts for c in part.numeric_labels or []]
        texts = {*named, _other(named)}
        numbers: list[str] = []
        if constraints:
            points = {0, *(n for t in named if (n := parse_int32(t)) is not None)}
            for c in constraints:
                points |= {v for v in (c.min_value, c.max_value, c.fallback_value) if v is not None}
            for n in sorted({p + d for p in points for d in (-2, -1, 0, 1, 2) if INT32_MIN <= p + d <= INT32_MAX}):
                text = str(n)
                while text in named:  # the number, written as no requirement names it
                    text = "0" + text if n >= 0 else text.replace("-", "-0", 1)
                numbers.append(text)
        self.candidates: list[str | None] = [None, *sorted(texts), *numbers]
        # The preemptor's label matters only as the reference of a numeric comparison.
        compared = any(c.comparison is not None for c in constraints)
        self.preemptors: list[str | None] = [None, *numbers] if compared else [None]

    def _labels(self, value: str | None) -> dict[str, str]:
        return {} if value is None else {self.key: value}

    def evaluations(self) -> Iterator[tuple[list[BuiltSelector], WorkloadInfo]]:
        """For every preemptor and candidate value: each part built for that preemptor, and the candidate."""
        candidates = [self.setup.workload(labels=self._labels(v)) for v in self.candidates]
        for p in self.preemptors:
            preemptor = self.setup.workload(labels=self._labels(p))
            built = [build_selector(0, part, preemptor) for part in self.parts]
            for candidate in candidates:
                yield built, candidate

    def satisfiable(self, index: int = 0) -> bool:
        return any(built[index].workload_matches(c) is None for built, c in self.evaluations())

    def implies(self, narrow: int, wide: int) -> bool:
        return not any(
            built[narrow].workload_matches(c) is None and built[wide].workload_matches(c) is not None
            for built, c in self.evaluations()
        )


def _label_keys(spec: CandidateSelector) -> set[str]:
    return _selector_keys(spec.label_selector) | {c.key for c in spec.numeric_labels or []}


# -- the parts of a candidate selector, one at a time ---------------------------------------------------


def _priority_only(spec: CandidateSelector) -> CandidateSelector:
    return CandidateSelector(scope="AnyClusterQueue", priority=spec.priority)


def _time_only(spec: CandidateSelector) -> CandidateSelector:
    return CandidateSelector(
        scope="AnyClusterQueue",
        min_execution_duration=spec.min_execution_duration,
        max_execution_duration=spec.max_execution_duration,
        execution_time_relation=spec.execution_time_relation,
        min_time_from_creation_duration=spec.min_time_from_creation_duration,
        max_time_from_creation_duration=spec.max_time_from_creation_duration,
        time_from_creation_relation=spec.time_from_creation_relation,
    )


def _queues_only(spec: CandidateSelector) -> CandidateSelector:
    return CandidateSelector(scope=spec.scope, cluster_queue_selector=spec.cluster_queue_selector)


def _priority_tests(built: BuiltSelector, spec: CandidateSelector) -> list[Callable[[WorkloadInfo], str | None]]:
    """The priority tests; in mode Boosted without the comparison, which the priority-boost
    annotation (any int32, on either workload) can always satisfy."""
    boosted = spec.priority is not None and spec.priority.mode == "Boosted"
    return [test for name, test in built.tests if not (boosted and name == "priority")]


def _class_only(rule: PreemptionRule) -> PreemptionRule:
    return rule.model_copy(update={"preemptor_selector": None})


def _mentioned(rules: Iterable[PreemptionRule]) -> set[str]:
    names: set[str] = set()
    for rule in rules:
        for sel in (rule.preemptor_priority_class_selector, *(s.priority for s in rule.candidate_selectors or [])):
            if sel is not None:
                names.update(sel.match_names or [])
                names.update(sel.not_match_names or [])
    return names


def _durations(spec: CandidateSelector) -> list[tuple[str, timedelta]]:
    """The duration bounds as the engine reads them (one that does not parse is no bound)."""
    found = []
    for name in (
        "min_execution_duration",
        "max_execution_duration",
        "min_time_from_creation_duration",
        "max_time_from_creation_duration",
    ):
        text = getattr(spec, name)
        value = protection.parse_duration(text) if text is not None else None
        if value is not None:
            found.append((name, value))
    return found


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


# -- the analysis of one config -----------------------------------------------------------------------


@dataclass
class RuleFacts:
    rule: PreemptionRule
    at: str
    """"PreemptionConfig c rule r", for messages."""
    never_applies: bool = False
    empty: set[int] = field(default_factory=set)
    """Candidate selectors that select nothing."""


class ConfigCheck:
    def __init__(self, setup: Setup, report: Report, config: PreemptionConfig) -> None:
        self.setup = setup
        self.report = report
        self.config = config
        self.where = f"PreemptionConfig/{config.name}"
        self.users = setup.users.get(config.name, [])
        self.mentioned = _mentioned(config.rules)
        self.universe = setup.universe(self.mentioned)

    def run(self) -> None:
        if validate(self.config):
            return  # InvalidSelector: the engine stops at the broken selector, so nothing here is sure
        facts = [RuleFacts(rule, f"PreemptionConfig {self.config.name} rule {rule.name}") for rule in self.config.rules]
        for fact in facts:
            self.unreachable(fact)
        for fact in facts:
            if not fact.never_applies:
                self.contradictions(fact)
        self.shadowed(facts)

    def add(self, code: str, severity: Severity, message: str, *objects: str) -> None:
        self.report.add(code, severity, message, self.where, *objects)

    # -- UnreachableSelector (warning: the rule does not do what it says, though it harms nothing) --

    def preemptors(self, rule: PreemptionRule) -> list[WorkloadInfo]:
        """Unboosted preemptors of every class (and value) the rule's preemptorPriorityClassSelector admits."""
        found = []
        checked = _class_only(rule)
        for klass in self.universe:
            for value in self.setup.values(klass):
                wl = self.setup.workload(klass.ref, base=value)
                if rule_applies(checked, wl):
                    found.append(wl)
        return found

    def unreachable(self, fact: RuleFacts) -> None:
        rule, at = fact.rule, fact.at
        preemptor_selector = _built(rule.preemptor_selector)
        for key in unsatisfiable_keys(preemptor_selector) if preemptor_selector is not None else []:
            fact.never_applies = True
            shown = ", ".join(_show_requirements(rule.preemptor_selector, key))
            self.add(
                "UnreachableSelector",
                "warning",
                f"{at} preemptorSelector: no value of label {key}, nor its absence, meets {shown}: the rule never "
                "applies. Remove the contradicting requirement",
            )
        classes = rule.preemptor_priority_class_selector
        if classes is not None and not self.preemptors(rule):
            fact.never_applies = True
            self.add(
                "UnreachableSelector",
                "warning",
                f"{at} preemptorPriorityClassSelector: notMatchNames excludes every name in matchNames "
                f"({', '.join(classes.match_names or [])}): the rule never applies. Remove the names from one list",
            )
        if fact.never_applies:
            return
        for i, spec in enumerate(rule.candidate_selectors or []):
            for problem in self.empty_selector(rule, i, spec):
                fact.empty.add(i)
                self.add("UnreachableSelector", "warning", f"{at} candidateSelectors[{i}].{problem}")

    def empty_selector(self, rule: PreemptionRule, i: int, spec: CandidateSelector) -> Iterator[str]:
        """Why no workload can pass the selector: each part (labels, priority, time, queues) reads
        different fields of the workload, so the selector is empty when one part is."""
        for key in sorted(_label_keys(spec)):
            if not LabelKey(self.setup, [spec], key).satisfiable():
                fields = ["labelSelector"] if key in _selector_keys(spec.label_selector) else []
                shown = _show_requirements(spec.label_selector, key)
                for n, c in enumerate(spec.numeric_labels or []):
                    if c.key == key:
                        fields.append(f"numericLabels[{n}]")
                        shown.append(_show_numeric(c))
                yield (
                    f"{' and '.join(fields)}: no value of label {key}, nor its absence, meets "
                    f"{'; '.join(shown)}: the selector selects nothing. Remove the contradiction"
                )
        if spec.priority is not None:
            problem = self.empty_priority(rule, spec)
            if problem:
                yield problem
        problem = self.empty_time(spec)
        if problem:
            yield problem
        problem = self.empty_queues(spec)
        if problem:
            yield problem

    def empty_priority(self, rule: PreemptionRule, spec: CandidateSelector) -> str | None:
        only = _priority_only(spec)
        preemptors = self.preemptors(rule)
        candidates = [self.setup.workload(k.ref, base=v) for k in self.universe for v in self.setup.values(k)]
        for preemptor in preemptors:
            tests = _priority_tests(build_selector(0, only, preemptor), spec)
            if any(all(test(c) is None for test in tests) for c in candidates):
                return None
        priority = spec.priority
        assert priority is not None
        names = only.model_copy(update={"priority": priority.model_copy(update={"mode": None, "comparison": None})})
        by_name = build_selector(0, names, self.setup.workload())
        if not any(by_name.workload_matches(c) is None for c in candidates):
            return (
                "priority: matchNames and notMatchNames admit none of the priority classes here "
                f"({', '.join(k.describe() for k in self.universe)}): the selector selects nothing"
            )
        admitted = sorted({self._class_of(p) for p in preemptors})
        return (
            f"priority: no candidate's priority (mode {priority.mode}) is {priority.comparison} a preemptor's, "
            f"given the priority classes here ({', '.join(k.describe() for k in self.universe)}) and the "
            f"preemptors the rule admits ({', '.join(admitted)}): the selector selects nothing. Check the "
            "comparison and the class names"
        )

    def _class_of(self, wl: WorkloadInfo) -> str:
        return f"{wl.priority_class_name or 'no class'} ({wl.base_priority})"

    def empty_time(self, spec: CandidateSelector) -> str | None:
        bounds = _durations(spec)
        relations = [
            (name, op)
            for name, op in (
                ("executionTimeRelation", spec.execution_time_relation),
                ("timeFromCreationRelation", spec.time_from_creation_relation),
            )
            if op is not None
        ]
        if not bounds and not relations:
            return None
        points = {timedelta(0), *(value for _, value in bounds)}
        grid = sorted({p + d for p in points for d in (timedelta(0), EPSILON)})
        # The smallest satisfying execution time and age lie on the grid (each is 0, a bound, or just
        # past one). A preemptor's accumulated execution and age: 0 or longer than any bound decide
        # every comparison that some value can satisfy.
        long = max(points) + timedelta(days=1)
        only = _time_only(spec)
        for accumulated in (0, int(long.total_seconds())):
            for own_age in (timedelta(0), long):
                built = build_selector(0, only, self.setup.workload(age=own_age, accumulated=accumulated), NOW)
                for execution in grid:
                    for age in (a for a in grid if a >= execution):  # quota is reserved after creation
                        if built.workload_matches(self.setup.workload(execution=execution, age=age)) is None:
                            return None
        shown = [f"{_camel(name)} {getattr(spec, name)}" for name, _ in bounds]
        shown += [f"{name} {op}" for name, op in relations]
        fields = [_camel(name) for name, _ in bounds] + [name for name, _ in relations]
        both = any("execution" in f.lower() for f in fields) and any("creation" in f.lower() for f in fields)
        return (
            f"{' and '.join(fields)}: no execution time and age meets {', '.join(shown)}"
            + (" (a workload runs no longer than it has existed)" if both else "")
            + ": the selector selects nothing. Fix the bounds"
        )

    def empty_queues(self, spec: CandidateSelector) -> str | None:
        if spec.cluster_queue_selector is None or not self.setup.queues:
            return None
        built = build_selector(0, _queues_only(spec), self.setup.workload())
        queues = list(self.setup.queues.values())
        if any(built.cluster_queues.matches(q.labels) for q in queues):
            if not self.users or any(built.cq_matches(p, q) is None for p in self.users for q in queues):
                return None
            return (
                f"clusterQueueSelector: no ClusterQueue it matches is in scope {spec.scope} of the ClusterQueues "
                f"that use this config ({', '.join(p.name for p in self.users)}): the selector selects nothing. "
                "Widen the scope or fix the selector"
            )
        return (
            f"clusterQueueSelector: matches none of the {len(queues)} ClusterQueue(s) here, by their labels: the "
            "selector selects nothing. Fix the selector or label the queues"
        )

    # -- ContradictoryProtection (warning: a protection makes (part of) the rule do nothing) --

    def contradictions(self, fact: RuleFacts) -> None:
        rule, at = fact.rule, fact.at
        preemptors = self.preemptors(rule)
        if preemptors and all(protection.may_not_preempt(p) for p in preemptors):
            names = sorted({p.priority_class_name for p in preemptors})
            self.add(
                "ContradictoryProtection",
                "warning",
                f"{at} preemptorPriorityClassSelector: it admits only PriorityClasses with preemptionPolicy: Never "
                f"({', '.join(names)}), whose workloads never preempt: the rule never takes a victim. Admit "
                "other classes or drop the rule",
                *(f"PriorityClass/{n}" for n in names),
            )
            return
        for i, spec in enumerate(rule.candidate_selectors or []):
            if i in fact.empty:
                continue
            self.fenced_or_disabled(at, i, spec)
            self.tolerated(rule, at, i, spec, preemptors)

    def fenced_or_disabled(self, at: str, i: int, spec: CandidateSelector) -> None:
        """Queues whose workloads the preemption-policy annotations keep from these preemptors."""
        built = build_selector(0, _queues_only(spec), self.setup.workload())
        nobody = self.setup.workload()  # no class: only the queue policies can protect it
        blocked: dict[str, str] = {}
        protectors: set[str] = set()
        reached = 0
        for q in (self.setup.queues[n] for n in sorted(self.setup.queues)):
            if self.users:
                preemptor_nodes = [p.node for p in self.users if built.cq_matches(p, q) is None]
            else:  # no queue uses the config: only `disabled` can be judged (a root is fenced by no one)
                preemptor_nodes = [q.node.root()] if built.cluster_queues.matches(q.labels) else []
            if not preemptor_nodes:
                continue
            reached += 1
            reasons = [protection.protected(nobody, nobody, q.node, node, NOW) for node in preemptor_nodes]
            if all(reasons):
                blocked[q.name] = "; ".join(sorted({r for r in reasons if r}))
                protectors |= {_protector(q.node, node) for node in preemptor_nodes}
        if not blocked:
            return
        objects = sorted(protectors | {f"ClusterQueue/{n}" for n in blocked})
        if self.users and len(blocked) == reached:
            self.add(
                "ContradictoryProtection",
                "warning",
                f"{at} candidateSelectors[{i}]: every ClusterQueue it reaches from the queues that use this config "
                f"({', '.join(p.name for p in self.users)}) is protected: "
                + "; ".join(f"{n}: {blocked[n]}" for n in sorted(blocked))
                + ". The selector never takes a victim. Change its scope or clusterQueueSelector, or the "
                f"{protection.POLICY_ANNOTATION} annotations",
                *objects,
            )
            return
        # Only queues the selector names by a label they carry (not merely by one they lack).
        sel = _built(spec.cluster_queue_selector)
        if sel is None or not any(r.operator in ("In", "Exists") for r in sel.requirements):
            return
        for name in sorted(blocked):
            self.add(
                "ContradictoryProtection",
                "warning",
                f"{at} candidateSelectors[{i}].clusterQueueSelector: selects ClusterQueue {name} by its labels, but "
                f"{blocked[name]}: the rule never takes a victim there. Drop the queue from the selector or "
                f"change its {protection.POLICY_ANNOTATION}",
                *objects,
            )

    def tolerated(
        self, rule: PreemptionRule, at: str, i: int, spec: CandidateSelector, preemptors: list[WorkloadInfo]
    ) -> None:
        """Every candidate the selector admits tolerates every (unboosted) preemptor the rule admits,
        for as long as the selector lets the candidate run."""
        if spec.priority is not None and spec.priority.mode == "Boosted":
            return  # the rule compares boosted priorities: boosts are part of its design
        limit = protection.parse_duration(spec.max_execution_duration) if spec.max_execution_duration else None
        # Protected at the longest execution the selector admits is protected at every shorter one.
        longest = limit if limit is not None else NOW - datetime(1, 1, 1, tzinfo=UTC)
        only = _priority_only(spec)
        candidates = [
            self.setup.workload(k.ref, base=v, execution=longest, age=longest)
            for k in self.universe
            for v in self.setup.values(k)
        ]
        pairs = 0
        protecting: dict[str, str] = {}
        for preemptor in preemptors:
            if protection.may_not_preempt(preemptor):
                continue
            tests = _priority_tests(build_selector(0, only, preemptor), spec)
            for candidate in candidates:
                if any(test(candidate) is not None for test in tests):
                    continue
                pairs += 1
                if protection.tolerates(candidate, preemptor, NOW) is None:
                    return
                cls = candidate.priority_class
                assert cls is not None  # a workload without a (defined) class tolerates nobody
                protecting[f"{cls.kind}/{cls.name}"] = _show_toleration(cls)
        if not pairs:
            return
        window = f"maxExecutionDuration {spec.max_execution_duration}" if limit is not None else "no execution bound"
        admitted = ", ".join(sorted({self._class_of(p) for p in preemptors if not protection.may_not_preempt(p)}))
        self.add(
            "ContradictoryProtection",
            "warning",
            f"{at} candidateSelectors[{i}]: every workload it selects is protected by PreemptionToleration from every "
            f"preemptor the rule admits ({admitted}) for longer than it may have run ({window}): "
            + "; ".join(protecting[k] for k in sorted(protecting))
            + ". The selector takes no victim (unless a kueue.x-k8s.io/priority-boost raises a preemptor to the "
            "toleration's minimum). Make maxExecutionDuration at least toleration-seconds, or shorten the toleration",
            *sorted(protecting),
        )

    # -- ShadowedRule (info: the victims are the same with or without the rule; only the rule names
    #    in messages and explanations differ, so it is worth knowing but not worth failing a build) --

    def shadowed(self, facts: list[RuleFacts]) -> None:
        for j, later in enumerate(facts):
            live = [i for i in range(len(later.rule.candidate_selectors or [])) if i not in later.empty]
            if later.never_applies or not live:
                continue  # UnreachableSelector said so
            for i, other in enumerate(facts):
                if i == j or other.never_applies:
                    continue
                if self.covers(other, later) and (i < j or not self.covers(later, other)):
                    unreachable = sorted(later.empty)
                    note = (
                        f" (candidateSelectors {', '.join(map(str, unreachable))} select nothing)"
                        if unreachable
                        else ""
                    )
                    theirs, ours = other.rule.activation_policy.trigger, later.rule.activation_policy.trigger
                    when = (
                        f"has the same trigger ({theirs})"
                        if theirs == ours
                        else f"is of an earlier tier (trigger {theirs}, offered before the {ours} tier runs)"
                    )
                    self.add(
                        "ShadowedRule",
                        "info",
                        f"{later.at}: never adds a victim: rule {other.rule.name} {when}, applies to every preemptor "
                        f"this one applies to, and selects every workload this one can{note}. Remove rule "
                        f"{later.rule.name}, or make it select what rule {other.rule.name} does not",
                    )
                    break

    def covers(self, wide: RuleFacts, narrow: RuleFacts) -> bool:
        """Whether `wide` applies whenever `narrow` does, and each of `narrow`'s selectors that
        can select anything is within one of `wide`'s."""
        a, b = wide.rule.activation_policy, narrow.rule.activation_policy
        if a.trigger != b.trigger and (a.trigger, b.trigger) != ("Always", "InsufficientQuota"):
            # The InsufficientQuota tier runs only after every Always candidate was offered (each
            # then taken, protected or deferred as an opt-out, and so again); the topology tier
            # contests other workloads (those on the flavor's nodes), so nothing covers it across tiers.
            return False
        if a.preemptor_quota == "WithinNominalQuota" and b.preemptor_quota != "WithinNominalQuota":
            return False
        wait = protection.parse_duration(a.min_trigger_required_duration) or timedelta(0)
        if wait > (protection.parse_duration(b.min_trigger_required_duration) or timedelta(0)):
            return False
        wide_sel, narrow_sel = _built(wide.rule.preemptor_selector), _built(narrow.rule.preemptor_selector)
        if wide_sel is None or narrow_sel is None or not selector_implies(narrow_sel, wide_sel):
            return False
        if not self.classes_imply(narrow.rule, wide.rule):
            return False
        wide_specs = wide.rule.candidate_selectors or []
        across = a.trigger != b.trigger
        return all(
            any(i not in wide.empty and self.within(spec, w, across) for i, w in enumerate(wide_specs))
            for n, spec in enumerate(narrow.rule.candidate_selectors or [])
            if n not in narrow.empty
        )

    def names(self) -> list[str]:
        return [NO_CLASS, _other(self.mentioned), *sorted(self.mentioned)]

    def classes_imply(self, narrow: PreemptionRule, wide: PreemptionRule) -> bool:
        """Whatever the setup: every class name `narrow` admits, `wide` admits."""
        a, b = _class_only(narrow), _class_only(wide)
        for name in self.names():
            wl = self.setup.workload(("WorkloadPriorityClass", name) if name else None)
            if rule_applies(a, wl) and not rule_applies(b, wl):
                return False
        return True

    def within(self, narrow: CandidateSelector, wide: CandidateSelector, across: bool = False) -> bool:
        """Whatever the setup, the preemptor and the time: every workload `narrow` selects, `wide` does.
        `across`: `wide` is of an earlier tier, its quota judged before the later tier's removals."""
        if SCOPE_RANK[narrow.scope] > SCOPE_RANK[wide.scope]:
            return False
        if wide.quota is not None and wide.quota != narrow.quota:
            return False
        if across and wide.quota in DRS_QUOTA:
            # Removals lower a queue's usage, so the other quota values only ever turn false; a
            # share can fall and let a strategy allow later what it refused before.
            return False
        wide_cq, narrow_cq = _built(wide.cluster_queue_selector), _built(narrow.cluster_queue_selector)
        if wide_cq is None or narrow_cq is None or not selector_implies(narrow_cq, wide_cq):
            return False
        if not all(LabelKey(self.setup, [narrow, wide], k).implies(0, 1) for k in _label_keys(wide)):
            return False
        return self.priority_within(narrow, wide) and _time_within(narrow, wide)

    def priority_within(self, narrow: CandidateSelector, wide: CandidateSelector) -> bool:
        if wide.priority is None:
            return True
        # Two bases and boosts of 0..2 give every order of the bases together with every order of
        # the effective priorities; names: each one named, one other, none.
        workloads = [
            self.setup.workload(("WorkloadPriorityClass", n) if n else None, base=base, boost=boost)
            for n in self.names()
            for base in (0, 1)
            for boost in (0, 1, 2)
        ]
        narrow_only, wide_only = _priority_only(narrow), _priority_only(wide)
        for preemptor in workloads:
            a, b = build_selector(0, narrow_only, preemptor), build_selector(0, wide_only, preemptor)
            for candidate in workloads:
                if a.workload_matches(candidate) is None and b.workload_matches(candidate) is not None:
                    return False
        return True


def _time_within(narrow: CandidateSelector, wide: CandidateSelector) -> bool:
    narrow_bounds, wide_bounds = dict(_durations(narrow)), dict(_durations(wide))
    for name, bound in wide_bounds.items():
        own = narrow_bounds.get(name)
        if own is None or (own < bound if name.startswith("min") else own > bound):
            return False
    for attr in ("execution_time_relation", "time_from_creation_relation"):
        op, own_op = getattr(wide, attr), getattr(narrow, attr)
        if op is not None and own_op != op and (own_op, op) not in STRICTER:
            return False
    return True


def _protector(victim: QuotaNode, preemptor: QuotaNode) -> str:
    """The object whose preemption-policy keeps the victim's queue from the preemptor."""
    node = protection.victims_disabled(victim) or protection.fence_root(preemptor)
    assert node is not None  # protected() gave a reason
    return f"{'ClusterQueue' if node.is_cluster_queue else 'Cohort'}/{node.name}"


def _show_toleration(cls: PriorityClassInfo) -> str:
    policy, _ = protection.toleration_of(cls)
    assert policy is not None  # the class protected a candidate
    seconds = policy.toleration_seconds
    span = "forever" if seconds < 0 else f"for {seconds}s after its quota is reserved"
    return f"{cls.kind} {cls.name} tolerates preemptors below priority {policy.minimum_preemptable_priority} {span}"


def _show_numeric(c: Any) -> str:
    parts = [
        f"{name} {value}" for name, value in (("minValue", c.min_value), ("maxValue", c.max_value)) if value is not None
    ]
    if c.comparison is not None:
        parts.append(f"comparison {c.comparison}")
    parts.append(f"fallbackValue {c.fallback_value}" if c.fallback_value is not None else "no fallbackValue")
    return f"numeric {c.key}: {', '.join(parts)}"


def run(report: Report, objects: Iterable[Any]) -> None:
    objects = list(objects)
    setup = Setup(objects)
    configs = sorted((o for o in objects if isinstance(o, PreemptionConfig)), key=lambda c: c.name)
    for config in configs:
        try:
            ConfigCheck(setup, report, config).run()
        except BuildError:
            continue  # validate() missed a selector the engine cannot build: InvalidSelector territory
