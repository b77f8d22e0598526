"""Checks of PreemptionLimits: selectors that select nothing (`UnmatchedLimit`), and ClusterQueues
whose every preemption path a limit of 0 covers (`BlockedByLimit`): their workloads can never
preempt. A limit that does not build is an `InvalidSelector`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from ..api import v1alpha1, v1beta2
from ..engine.limits import LimitBook, Pair, Rule, build_limit
from .findings import Report

CODES = ("UnmatchedLimit", "BlockedByLimit")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # no window is read: only what the limits cover


class _Queues:
    """ClusterQueues with their labels and cohort trees."""

    def __init__(self, objects: list[Any]) -> None:
        self.queues = {o.name: o for o in objects if isinstance(o, v1beta2.ClusterQueue)}
        self.parents = {o.name: o.spec.parent_name for o in objects if isinstance(o, v1beta2.Cohort) and o.spec}

    def labels(self, name: str) -> dict[str, str] | None:
        cq = self.queues.get(name)
        return dict(cq.metadata.labels or {}) if cq is not None else None

    def _chain(self, name: str) -> list[str]:
        """The cohorts above a ClusterQueue, nearest first."""
        cq = self.queues[name]
        chain: list[str] = []
        cohort = cq.spec.cohort_name if cq.spec else None
        while cohort is not None and cohort not in chain:
            chain.append(cohort)
            cohort = self.parents.get(cohort)
        return chain

    def under(self, cohort: str) -> set[str]:
        return {name for name in self.queues if cohort in self._chain(name)}

    def victims_of(self, name: str, scope: str) -> set[str]:
        """The ClusterQueues a path of this scope may take victims from."""
        if scope in ("WithinClusterQueue", "WithinLocalQueue"):
            return {name}
        if scope == "AnyClusterQueue":
            return set(self.queues)
        chain = self._chain(name)
        if not chain:
            return {name}
        return self.under(chain[0] if scope == "WithinParentCohort" else chain[-1])


def _paths(queues: _Queues, name: str, configs: Mapping[str, v1alpha1.PreemptionConfig]) -> list[list[Pair]]:
    """Every way the queue's workloads may preempt, each as the pairs it may make (one per
    ClusterQueue a victim may come from)."""
    cq = queues.queues[name]
    policy = cq.spec.preemption if cq.spec else None
    paths: list[list[Pair]] = []
    if policy is not None and policy.within_cluster_queue not in (None, "Never"):
        paths.append([Pair(None, name, "", name)])
    if policy is not None and policy.reclaim_within_cohort not in (None, "Never"):
        others = queues.victims_of(name, "WithinCohortTree") - {name}
        if others:
            paths.append([Pair(None, name, "", other) for other in sorted(others)])
    config_name = cq.annotation(v1alpha1.PREEMPTION_CONFIG_ANNOTATION)
    config = configs.get(config_name or "")
    for rule in config.rules if config is not None else []:
        for candidate in rule.candidate_selectors or []:
            paths.append(
                [
                    Pair(None, name, "", victim, config_name, (rule.name,))
                    for victim in sorted(queues.victims_of(name, candidate.scope))
                ]
            )
    return paths


def run(report: Report, objects: Iterable[Any]) -> None:
    objects = list(objects)
    limits = sorted((o for o in objects if isinstance(o, v1alpha1.PreemptionLimit)), key=lambda o: o.name)
    if not limits:
        return
    queues = _Queues(objects)
    configs = {o.name: o for o in objects if isinstance(o, v1alpha1.PreemptionConfig)}
    built: list[Rule] = []
    for limit in limits:
        where = f"PreemptionLimit/{limit.name}"
        try:
            rule = build_limit(limit)
        except ValueError as exc:
            report.add("InvalidSelector", "error", f"PreemptionLimit {limit.name}: {exc}: it limits nothing", where)
            continue
        built.append(rule)
        _unmatched(report, limit, rule, queues, configs)
    book = LimitBook(
        now=_EPOCH,
        rules=[r for r in built if r.limit == 0],
        config_labels=lambda name: dict(configs[name].metadata.labels or {}) if name in configs else None,
        queue_labels=queues.labels,
    )
    if not book.rules:
        return
    for name in sorted(queues.queues):
        paths = _paths(queues, name, configs)
        if not paths:
            continue
        blocking = [_zero_limit(book, path) for path in paths]
        if all(blocking):
            names = sorted({limit for limit in blocking if limit})
            report.add(
                "BlockedByLimit",
                "warning",
                f"ClusterQueue {name}: every way its workloads may preempt is covered by PreemptionLimit "
                f"{', '.join(names)} with limit 0: they can never preempt (each waits for free quota)",
                f"ClusterQueue/{name}",
                *(f"PreemptionLimit/{n}" for n in names),
            )


def _zero_limit(book: LimitBook, path: list[Pair]) -> str | None:
    """The limit of 0 that covers every pair of the path (any preemptor, any victim), if one does."""
    for rule in book.rules:
        if all(book.covers(rule, pair) for pair in path):
            return rule.name
    return None


def _unmatched(
    report: Report,
    limit: v1alpha1.PreemptionLimit,
    rule: Rule,
    queues: _Queues,
    configs: Mapping[str, v1alpha1.PreemptionConfig],
) -> None:
    where = f"PreemptionLimit/{limit.name}"
    at = f"PreemptionLimit {limit.name}"
    if not rule.cluster_queue_selector.empty and not any(
        rule.cluster_queue_selector.matches(queues.labels(n)) for n in queues.queues
    ):
        report.add("UnmatchedLimit", "warning", f"{at}: clusterQueueSelector matches no ClusterQueue", where)
    selected = configs
    if rule.config_selector is not None:
        selector = rule.config_selector
        selected = {n: c for n, c in configs.items() if selector.matches(dict(c.metadata.labels or {}))}
        if not selected:
            report.add("UnmatchedLimit", "warning", f"{at}: configSelector matches no PreemptionConfig", where)
    if rule.rule_names is not None:
        known = {r.name for c in selected.values() for r in c.rules}
        for missing in sorted(rule.rule_names - known):
            report.add(
                "UnmatchedLimit",
                "warning",
                f"{at}: ruleNames names {missing}, which no selected PreemptionConfig has",
                where,
            )
