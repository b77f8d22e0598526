"""Configurable preemption: PreemptionConfig rules, triggers as tiers, candidate selectors.

A ClusterQueue names its config with the `kueue.x-k8s.io/preemption-config-name` annotation.
Its rules add candidates after the classic ones, tier by tier: `Always` first; then
`InsufficientQuota` while the preemptor's quota still does not fit; then
`QuotaFeasibleAndInsufficientTopology` once quota fits but placement does not. Each tier is
computed against the snapshot as the earlier removals left it. A selector that cannot be built
empties its tier and stops later tiers, as in Kueue; unlike Kueue, the reason is reported.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from ..api.meta import format_time
from ..api.v1alpha1 import CandidateSelector, NumericLabelConstraint, PreemptionConfig, PreemptionRule
from . import fair_sharing as fs
from . import protection
from .candidate_order import describe, ranked
from .candidates import CONFIGURABLE_PREEMPTION, Candidate, CandidateRecord, Context, RuleMatch
from .fair_preemption import strategies_allow
from .notices import Notice
from .ordering import candidate_key
from .quota import QuotaNode
from .selectors import EVERYTHING, Selector, SelectorError, build
from .snapshot import ClusterQueueInfo, Snapshot
from .workload import WorkloadInfo

DRS_QUOTA = {
    "DRSLessThanOrEqualToFinalShare": (fs.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,),
    "DRSLessThanInitialShare": (fs.LESS_THAN_INITIAL_SHARE,),
    "DRSAllStrategies": fs.STRATEGIES,
}
"""The quota values that ask a fair preemption strategy (Kueue's S2-a, S2-b, either)."""
_INT32 = re.compile(r"[+-]?[0-9]+")

WorkloadTest = Callable[[WorkloadInfo], str | None]
"""Returns None when the workload passes, else the name of the field that excluded it."""


class BuildError(ValueError):
    """A rule or selector that cannot be built, worded as Kueue words it."""


class _Ordered(Protocol):
    def __lt__(self, other: Any, /) -> bool: ...
    def __le__(self, other: Any, /) -> bool: ...
    def __gt__(self, other: Any, /) -> bool: ...
    def __ge__(self, other: Any, /) -> bool: ...


def compare(op: str, candidate: _Ordered, preemptor: _Ordered) -> bool:
    """`candidate <op> preemptor`, as Kueue reads every comparison."""
    if op == "LessThan":
        return candidate < preemptor
    if op == "LessThanOrEqual":
        return candidate <= preemptor
    if op == "GreaterThan":
        return candidate > preemptor
    return candidate >= preemptor


def parse_int32(value: str | None) -> int | None:
    """Go's strconv.ParseInt(value, 10, 32): an optional sign and digits, in range; None for any
    other string (label values are unchecked in simulate's YAML), which §2.7 sends to the fallback."""
    if value is None or not _INT32.fullmatch(value):  # fullmatch: "5\n" is no integer to Go
        return None
    digits = value.lstrip("+-").lstrip("0")  # Go reads any number of leading zeros
    if len(digits) > 10:  # out of range; Python's int() refuses strings past 4300 digits
        return None
    number = int(digits or "0") * (-1 if value.startswith("-") else 1)
    return number if -(2**31) <= number <= 2**31 - 1 else None


def numeric_value(wl: WorkloadInfo, constraint: NumericLabelConstraint) -> int | None:
    value = parse_int32(wl.labels.get(constraint.key))
    return value if value is not None else constraint.fallback_value


def _selector(filter_name: str, raw: object, nil: Selector) -> Selector:
    from ..api.meta import LabelSelector

    assert raw is None or isinstance(raw, LabelSelector)
    try:
        return build(raw, nil=nil)
    except SelectorError as exc:
        raise BuildError(f"building {filter_name} filter (InvalidSelector): {exc}") from None


def in_scope_of(selector: BuiltSelector, preemptor: ClusterQueueInfo, candidate: ClusterQueueInfo) -> bool:
    return in_scope(selector.scope, preemptor, candidate)


def in_scope(scope: str, preemptor: ClusterQueueInfo, candidate: ClusterQueueInfo) -> bool:
    if scope == "AnyClusterQueue":
        return True
    if candidate.name == preemptor.name:
        return True
    if scope in ("WithinClusterQueue", "WithinLocalQueue"):
        return False
    p_parent, c_parent = preemptor.node.parent, candidate.node.parent
    if p_parent is None or c_parent is None:
        return False
    if scope == "WithinParentCohort":
        return p_parent.name == c_parent.name
    return preemptor.node.root().name == candidate.node.root().name  # WithinCohortTree


@dataclass
class BuiltSelector:
    index: int
    scope: str
    cluster_queues: Selector
    tests: list[tuple[str, WorkloadTest]]
    quota: str | None = None
    """A quota constraint depends on the snapshot as victims are removed: re-checked at use."""

    def quota_matches(self, ctx: Context, wl: WorkloadInfo) -> str | None:
        if self.quota is None:
            return None
        cq = ctx.snapshot.cluster_queue(wl.cluster_queue)
        if cq is None:
            return "quota"
        return None if quota_allows(self.quota, ctx, cq, wl) else "quota"

    def cq_matches(self, preemptor: ClusterQueueInfo, candidate: ClusterQueueInfo) -> str | None:
        if not in_scope(self.scope, preemptor, candidate):
            return "scope"
        if not self.cluster_queues.matches(candidate.labels):
            return "clusterQueueSelector"
        return None

    def workload_matches(self, wl: WorkloadInfo) -> str | None:
        for name, test in self.tests:
            if test(wl) is not None:
                return name
        return None


def quota_allows(policy: str, ctx: Context, cq: ClusterQueueInfo, wl: WorkloadInfo) -> bool:
    """YuniKorn's laws 2 and 5 with nominal quota as the guarantee; the DRS values ask the fair
    strategies they name (never true with fair sharing off: such a config does not build)."""
    node = cq.node
    if policy in DRS_QUOTA:
        return ctx.snapshot.fair_sharing.enabled and strategies_allow(ctx, node, wl, DRS_QUOTA[policy])
    if ctx.cq.node.root() is not node.root() and policy == "BorrowingCapacityFromPreemptor":
        return False
    above = any(node.usage.get(fr, 0) > node.nominal(fr) for fr in ctx.frs if fr in wl.usage)
    if policy == "BorrowingCapacityFromPreemptor":
        return above
    if policy == "KeepsNominalQuota":
        keeps = all(node.usage.get(fr, 0) - amount >= node.nominal(fr) for fr, amount in wl.usage.items())
        return above and keeps
    return False


def _duration(text: str | None) -> timedelta | None:
    return protection.parse_duration(text) if text is not None else None


def _time_tests(spec: CandidateSelector, preemptor: WorkloadInfo, now: datetime) -> list[tuple[str, WorkloadTest]]:
    """Execution time (since quota was reserved) and age, bounded or compared with the preemptor's."""
    tests: list[tuple[str, WorkloadTest]] = []

    def execution(wl: WorkloadInfo) -> timedelta:
        return now - wl.reserved_at if wl.reserved_at is not None else timedelta(0)

    def bounded(name: str, measure: Callable[[WorkloadInfo], timedelta], low: str | None, high: str | None) -> None:
        lo, hi = _duration(low), _duration(high)
        if lo is not None:
            tests.append((name.format("min"), lambda wl: None if measure(wl) >= lo else name.format("min")))
        if hi is not None:
            tests.append((name.format("max"), lambda wl: None if measure(wl) <= hi else name.format("max")))

    def age(wl: WorkloadInfo) -> timedelta:
        return now - wl.created

    bounded("{}ExecutionDuration", execution, spec.min_execution_duration, spec.max_execution_duration)
    bounded(
        "{}TimeFromCreationDuration", age, spec.min_time_from_creation_duration, spec.max_time_from_creation_duration
    )
    if spec.execution_time_relation is not None:
        op, reference = spec.execution_time_relation, timedelta(seconds=preemptor.accumulated_execution_seconds)
        tests.append(
            (
                "executionTimeRelation",
                lambda wl: None if compare(op, execution(wl), reference) else "executionTimeRelation",
            )
        )
    if spec.time_from_creation_relation is not None:
        rel, own_age = spec.time_from_creation_relation, age(preemptor)
        tests.append(
            (
                "timeFromCreationRelation",
                lambda wl: None if compare(rel, age(wl), own_age) else "timeFromCreationRelation",
            )
        )
    return tests


def build_selector(
    index: int, spec: CandidateSelector, preemptor: WorkloadInfo, now: datetime | None = None
) -> BuiltSelector:
    """Compiles one candidate selector for one preemptor (numeric comparisons read the
    preemptor's label once)."""
    tests: list[tuple[str, WorkloadTest]] = []
    if spec.scope == "WithinLocalQueue":
        ns, queue = preemptor.namespace, preemptor.queue_name
        tests.append(("scope", lambda wl: None if (wl.namespace, wl.queue_name) == (ns, queue) else "scope"))
    labels = _selector("LabelSelector", spec.label_selector, EVERYTHING)
    if not labels.empty:
        tests.append(("labelSelector", lambda wl: None if labels.matches(wl.labels) else "labelSelector"))
    for n, constraint in enumerate(spec.numeric_labels or []):
        tests.append((f"numericLabels[{n}]", _numeric_test(constraint, preemptor, f"numericLabels[{n}]")))
    if spec.priority is not None:
        tests.extend(_priority_tests(spec, preemptor))
    if now is not None:
        tests.extend(_time_tests(spec, preemptor, now))
    cqs = _selector("ClusterQueueSelector", spec.cluster_queue_selector, EVERYTHING)
    return BuiltSelector(index, spec.scope, cqs, tests, spec.quota)


def _numeric_test(constraint: NumericLabelConstraint, preemptor: WorkloadInfo, name: str) -> WorkloadTest:
    reference: int | None = None
    never = False
    if constraint.comparison is not None:
        reference = numeric_value(preemptor, constraint)
        never = reference is None  # the preemptor is incomparable: nothing matches

    def test(wl: WorkloadInfo) -> str | None:
        if never:
            return name
        value = numeric_value(wl, constraint)
        if value is None:
            return name
        if constraint.min_value is not None and value < constraint.min_value:
            return name
        if constraint.max_value is not None and value > constraint.max_value:
            return name
        if constraint.comparison is not None and reference is not None:
            return None if compare(constraint.comparison, value, reference) else name
        return None

    return test


def _priority_tests(spec: CandidateSelector, preemptor: WorkloadInfo) -> list[tuple[str, WorkloadTest]]:
    priority = spec.priority
    assert priority is not None
    tests: list[tuple[str, WorkloadTest]] = []
    if (priority.mode is None) != (priority.comparison is None):
        raise BuildError(
            "building Priority filter (MissingModeOrComparison): mode and comparison must be specified together"
        )
    if priority.mode is not None and priority.comparison is not None:
        mode, op = priority.mode, priority.comparison
        reference = preemptor.base_priority if mode == "Base" else preemptor.priority

        def by_value(wl: WorkloadInfo) -> str | None:
            value = wl.base_priority if mode == "Base" else wl.priority
            return None if compare(op, value, reference) else "priority"

        tests.append(("priority", by_value))
    if priority.match_names:
        names = frozenset(priority.match_names)
        tests.append(
            ("priority.matchNames", lambda wl: None if wl.priority_class_name in names else "priority.matchNames")
        )
    if priority.not_match_names:
        banned = frozenset(priority.not_match_names)
        tests.append(
            (
                "priority.notMatchNames",
                lambda wl: "priority.notMatchNames" if wl.priority_class_name in banned else None,
            )
        )
    return tests


def rule_applies(rule: PreemptionRule, preemptor: WorkloadInfo) -> bool:
    """Whether the rule's preemptor selectors match; raises BuildError for a broken selector."""
    selector = _selector("PreemptorSelector", rule.preemptor_selector, EVERYTHING)
    if not selector.matches(preemptor.labels):
        return False
    classes = rule.preemptor_priority_class_selector
    if classes is not None:
        name = preemptor.priority_class_name
        if classes.match_names and name not in classes.match_names:
            return False
        if classes.not_match_names and name in classes.not_match_names:
            return False
    return True


def validate(config: PreemptionConfig) -> list[str]:
    """Build errors of a config independent of any preemptor (selectors, operators, a field listed
    twice in its ordering), for status and lint."""
    from .selectors import NOTHING

    errors = []
    for rule in config.rules:
        where = f'preemptionConfig "{config.name}" rule "{rule.name}"'
        try:
            _selector("PreemptorSelector", rule.preemptor_selector, EVERYTHING)
        except BuildError as exc:
            errors.append(f"{where}: {exc}")
        for i, spec in enumerate(rule.candidate_selectors or []):
            for filter_name, raw in (
                ("LabelSelector", spec.label_selector),
                ("ClusterQueueSelector", spec.cluster_queue_selector),
            ):
                try:
                    _selector(filter_name, raw, NOTHING)
                except BuildError as exc:
                    errors.append(f"{where} candidateSelectors[{i}]: {exc}")
            priority = spec.priority
            if priority is not None and (priority.mode is None) != (priority.comparison is None):
                errors.append(
                    f"{where} candidateSelectors[{i}]: building Priority filter (MissingModeOrComparison): "
                    "mode and comparison must be specified together"
                )
    first: dict[str, int] = {}
    for i, order in enumerate(config.ordering):
        earlier = first.setdefault(order.ordering_field, i)
        if earlier != i:
            errors.append(
                f"PreemptionConfig {config.name}: spec.ordering[{i}].orderingField: {order.ordering_field} "
                f"is already spec.ordering[{earlier}]; each field may be listed once"
            )
    return errors


def fair_sharing_required(config: PreemptionConfig) -> list[str]:
    """The selectors whose quota value compares Dominant Resource Shares, which exist only with
    fair sharing on: with it off, the config cannot be used (reported, never guessed at)."""
    problems = []
    for rule in config.rules:
        for i, spec in enumerate(rule.candidate_selectors or []):
            if spec.quota in DRS_QUOTA:
                problems.append(_needs_fair_sharing(config, rule, i, spec.quota))
    return problems


@dataclass(frozen=True)
class Usability:
    """Whether a PreemptionConfig can be used, decided once for the operator's conditions, lint
    and offline input: what does not build, and what needs fair sharing while it is off."""

    invalid: tuple[str, ...] = ()
    """Selectors and operators that do not build (InvalidSelector)."""
    needs_fair_sharing: tuple[str, ...] = ()
    """Quota values that compare shares, with fair sharing off (FairSharingRequired)."""

    @property
    def problems(self) -> tuple[str, ...]:
        """What keeps it from being used; what does not build comes first and alone."""
        return self.invalid or self.needs_fair_sharing

    @property
    def reason(self) -> str | None:
        if self.invalid:
            return "InvalidSelector"
        return "FairSharingRequired" if self.needs_fair_sharing else None


def usability(config: PreemptionConfig, fair_sharing: bool | None) -> Usability:
    """`fair_sharing`: whether the engine runs with it; None when that is not known (the
    operator's lint: the config's Valid condition says it)."""
    needs = fair_sharing_required(config) if fair_sharing is False else []
    return Usability(tuple(validate(config)), tuple(needs))


def _needs_fair_sharing(config: PreemptionConfig, rule: PreemptionRule, index: int, quota: str) -> str:
    return (
        f'preemptionConfig "{config.name}" rule "{rule.name}" candidateSelectors[{index}].quota: {quota} compares '
        "Dominant Resource Shares, which exist only with fair sharing: turn it on with --fair-sharing"
    )


class ConfigurablePreemption:
    """The candidate stream of PreemptionConfigs, plugged into classic preemption."""

    def __init__(self) -> None:
        self.warnings: list[str] = []
        self.notices: list[Notice] = []

    def begin_cycle(self, snapshot: Snapshot) -> None:
        self.warnings = []
        self.notices = []

    def _warn(self, message: str, notice: Notice | None = None) -> None:
        if message not in self.warnings:
            self.warnings.append(message)
            if notice is not None:
                self.notices.append(notice)

    def config_for(self, cq: ClusterQueueInfo, snapshot: Snapshot) -> PreemptionConfig | None:
        name = cq.preemption_config_name
        if name is None:
            return None
        config = snapshot.preemption_configs.get(name)
        if config is None:
            message = (
                f"ClusterQueue {cq.name}: PreemptionConfig {name} not found; "
                "it gets no configurable preemption candidates"
            )
            self._warn(message, Notice("ClusterQueue", cq.name, "PreemptionConfigNotFound", message))
        return config

    def candidates(self, ctx: Context, borrowing: bool) -> Iterator[Candidate]:
        config = self.config_for(ctx.cq, ctx.snapshot)
        if config is None or not config.rules:
            return
        triggers = {rule.activation_policy.trigger for rule in config.rules}
        ok = yield from self._tier(ctx, config, "Always")
        if not ok or not triggers - {"Always"}:
            return
        if not ctx.fits_quota(borrowing):
            ok = yield from self._tier(ctx, config, "InsufficientQuota")
            if not ok:
                return
        if ctx.fits_quota(borrowing):
            yield from self._tier(ctx, config, "QuotaFeasibleAndInsufficientTopology")

    def _tier(self, ctx: Context, config: PreemptionConfig, trigger: str) -> Generator[Candidate, None, bool]:
        """Yields the tier's candidates in order; returns False when a build error stops evaluation."""
        try:
            built = self._build(ctx, config, trigger)
        except BuildError as exc:
            message = f"{exc}; {trigger} candidates and later tiers are skipped"
            self._warn(message, Notice("PreemptionConfig", config.name, "InvalidPreemptionConfig", message))
            return False
        if not built:
            return True
        found: dict[str, tuple[WorkloadInfo, dict[str, list[BuiltSelector]]]] = {}
        # Why in-scope workloads were not selected, by UID: "rule/selector field" per selector.
        misses: dict[str, tuple[WorkloadInfo, list[str]]] = {}
        for cq in self._cluster_queues(ctx, built):
            for rule, selectors in built:
                in_scope = [s for s in selectors if in_scope_of(s, ctx.cq, cq)]
                if not in_scope:
                    continue
                for wl in ctx.snapshot.admitted(cq):
                    if not self._contested(ctx, wl, trigger):
                        continue
                    for selector in in_scope:
                        failed = (
                            selector.cq_matches(ctx.cq, cq)
                            or selector.workload_matches(wl)
                            or selector.quota_matches(ctx, wl)
                        )
                        if failed is not None:
                            misses.setdefault(wl.uid, (wl, []))[1].append(f"{rule.name}/{selector.index} {failed}")
                            continue
                        entry = found.setdefault(wl.uid, (wl, {}))
                        entry[1].setdefault(rule.name, []).append(selector)
        source = f"preemption config {config.name} ({trigger})"
        for uid, (wl, reasons) in sorted(misses.items(), key=lambda item: item[1][0].key):
            if uid not in found:
                ctx.record(wl, "excluded", "not selected: " + "; ".join(f"{r} does not match" for r in reasons), source)
        order = {rule.name: i for i, rule in enumerate(config.rules)}
        now, name = ctx.snapshot.now, ctx.cq.name
        ordering = config.ordering
        shown = describe(ordering) if ordering else ""
        if ordering:
            # Decided one victim at a time: share-based keys read the snapshot as the ones before left it.
            workloads = ranked(ctx, [wl for wl, _ in found.values()], ordering)
        else:
            workloads = iter(sorted((wl for wl, _ in found.values()), key=lambda wl: candidate_key(wl, name, now)))
        for wl in workloads:
            matches = found[wl.uid][1]
            if ctx.snapshot.is_removed(wl):
                continue
            # Quota constraints read the snapshot as earlier victims left it: check them again.
            still = {
                rule: [s.index for s in selectors if s.quota_matches(ctx, wl) is None]
                for rule, selectors in matches.items()
            }
            matched = tuple(
                (rule, tuple(idx)) for rule, idx in sorted(still.items(), key=lambda kv: order[kv[0]]) if idx
            )
            if not matched:
                ctx.record(wl, "skipped", "its ClusterQueue no longer meets the selector's quota constraint", trigger)
                continue
            yield Candidate(wl, CONFIGURABLE_PREEMPTION, rule=RuleMatch(config.name, matched, shown))
        return True

    @staticmethod
    def _contested(ctx: Context, wl: WorkloadInfo, trigger: str) -> bool:
        """A candidate must hold quota the preemptor needs; for the topology tier, running on the
        nodes of the preemptor's TAS flavor is enough, whatever flavor it uses (Kueue's newest
        behaviour with overlapping flavors)."""
        if wl.uses_any(ctx.frs):
            return True
        if trigger != "QuotaFeasibleAndInsufficientTopology":
            return False
        nodes = ctx.snapshot.workload_nodes(wl)
        if not nodes:
            return False
        for ps in ctx.assignment.pod_sets:
            if ps.view is not None and any(node.name in nodes for node in ps.view.nodes):
                return True
        return False

    def _build(
        self, ctx: Context, config: PreemptionConfig, trigger: str
    ) -> list[tuple[PreemptionRule, list[BuiltSelector]]]:
        built = []
        for rule in config.rules:
            if rule.activation_policy.trigger != trigger:
                continue
            where = f'preemptionConfig "{config.name}" rule "{rule.name}"'
            try:
                if not rule_applies(rule, ctx.preemptor):
                    continue
            except BuildError as exc:
                raise BuildError(f"{where}: {exc}") from None
            waiting = self._not_yet_active(ctx, rule)
            if waiting is not None:
                ctx.records.append(
                    CandidateRecord(
                        ctx.preemptor.key,
                        ctx.cq.name,
                        "rule-skipped",
                        f"rule {rule.name}: {waiting}",
                        f"preemption config {config.name}",
                        blocking=True,
                    )
                )
                continue
            selectors = []
            for i, spec in enumerate(rule.candidate_selectors or []):
                if spec.quota in DRS_QUOTA and not ctx.snapshot.fair_sharing.enabled:
                    raise BuildError(_needs_fair_sharing(config, rule, i, spec.quota))
                try:
                    selectors.append(build_selector(i, spec, ctx.preemptor, ctx.snapshot.now))
                except BuildError as exc:
                    raise BuildError(f"{where} candidateSelectors[{i}]: {exc}") from None
            if selectors:
                built.append((rule, selectors))
        return built

    @staticmethod
    def _not_yet_active(ctx: Context, rule: PreemptionRule) -> str | None:
        """activationPolicy beyond the trigger: the preemptor's quota, and how long it has waited."""
        policy = rule.activation_policy
        if policy.preemptor_quota == "WithinNominalQuota":
            node = ctx.cq.node
            for fr, amount in ctx.requests.items():
                if node.usage.get(fr, 0) + amount > node.nominal(fr):
                    return (
                        "preemptorQuota WithinNominalQuota: the preemptor's ClusterQueue would exceed its nominal quota"
                    )
        required = protection.parse_duration(policy.min_trigger_required_duration) or timedelta(0)
        if required:
            since = protection.pending_since(ctx.preemptor)
            if ctx.snapshot.now - since < required:
                ctx.wake_no_later_than(since + required)
                until = format_time(since + required)
                return f"minTriggerRequiredDuration {policy.min_trigger_required_duration} not reached (until {until})"
        return None

    @staticmethod
    def _cluster_queues(
        ctx: Context, built: list[tuple[PreemptionRule, list[BuiltSelector]]]
    ) -> Iterator[ClusterQueueInfo]:
        """Only the ClusterQueues some scope can reach: the preemptor's own, its cohort tree, or all."""
        scopes: set[str] = {s.scope for _, selectors in built for s in selectors}
        snapshot = ctx.snapshot
        if "AnyClusterQueue" in scopes:
            yield from (snapshot.cluster_queues[n] for n in sorted(snapshot.cluster_queues))
            return
        if scopes & {"WithinParentCohort", "WithinCohortTree"} and ctx.cq.node.parent is not None:
            root: QuotaNode = ctx.cq.node.root()
            names = sorted(node.name for node in root.subtree_cluster_queues())
            yield from (snapshot.cluster_queues[n] for n in names if n in snapshot.cluster_queues)
            return
        yield ctx.cq
