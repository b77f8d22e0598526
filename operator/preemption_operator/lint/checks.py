"""`lint(objects)`, which runs every check, and the reference checks: references to missing
objects, PreemptionConfigs no ClusterQueue uses, selectors that do not build, configs that need
fair sharing, rules keyed on what a namespace user can write. The other checks are in rules.py,
limits.py and flapping.py."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..api import v1alpha1, v1beta2
from ..engine import protection
from ..engine.configurable import usability
from ..engine.fair_sharing import OFF, FairSharing
from ..engine.workload import PRIORITY_BOOST_ANNOTATION
from . import flapping, limits, rules
from .findings import Report

CHECKS = (
    "MissingReference",
    "UnusedPreemptionConfig",
    "InvalidSelector",
    "FairSharingRequired",
    "UserWritableKey",
    "EmptyConstraint",
    *rules.CODES,
    *limits.CODES,
    "FlappingPair",
    "FlappingCycle",
    "NotProven",
)
NOT_CHECKED: tuple[str, ...] = ()
"""Checks the output names as not done yet; kept (empty) in the JSON so that consumers need not change."""


def lint(
    objects: Iterable[Any],
    witness: Path | None = None,
    *,
    fair_sharing: FairSharing | None = None,
    judge_usability: bool = True,
) -> Report:
    """`fair_sharing`: the engine's switch (None: off, and DRS quota values not judged).
    `judge_usability` off (the operator's lint of its own configs, whose Valid condition says it
    already): DRS quota values are not judged either."""
    objects = list(objects)
    sharing = fair_sharing or OFF
    usable_with = sharing.enabled if fair_sharing is not None and judge_usability else None
    report = Report(checks=CHECKS, not_checked=NOT_CHECKED)
    by_kind: dict[str, dict[str, Any]] = {}
    for obj in objects:
        by_kind.setdefault(type(obj).__name__, {})[obj.metadata.name] = obj
    queues: dict[str, v1beta2.ClusterQueue] = by_kind.get("ClusterQueue", {})
    configs: dict[str, v1alpha1.PreemptionConfig] = by_kind.get("PreemptionConfig", {})
    flavors = by_kind.get("ResourceFlavor", {})
    classes = {("WorkloadPriorityClass", n) for n in by_kind.get("WorkloadPriorityClass", {})} | {
        ("PriorityClass", n) for n in by_kind.get("PriorityClass", {})
    }
    used: set[str] = set()
    for name, cq in sorted(queues.items()):
        named = cq.annotation(v1alpha1.PREEMPTION_CONFIG_ANNOTATION)
        if named:
            used.add(named)
            if named not in configs:
                report.add(
                    "MissingReference",
                    "error",
                    f"ClusterQueue {name} names PreemptionConfig {named}, which does not exist "
                    f"({v1alpha1.PREEMPTION_CONFIG_ANNOTATION}): only classic preemption applies",
                    f"ClusterQueue/{name}",
                )
        for group in cq.spec.resource_groups or []:
            for flavor in group.flavors:
                if flavor.name not in flavors:
                    report.add(
                        "MissingReference",
                        "error",
                        f"ClusterQueue {name} uses ResourceFlavor {flavor.name}, which does not exist: "
                        "the queue is inactive",
                        f"ClusterQueue/{name}",
                    )
    for lq in by_kind.get("LocalQueue", {}).values():
        if lq.spec.cluster_queue not in queues:
            report.add(
                "MissingReference",
                "error",
                f"LocalQueue {lq.metadata.namespace}/{lq.metadata.name} points at ClusterQueue "
                f"{lq.spec.cluster_queue}, which does not exist",
                f"LocalQueue/{lq.metadata.namespace}/{lq.metadata.name}",
            )
    for name, config in sorted(configs.items()):
        where = f"PreemptionConfig/{name}"
        if name not in used:
            report.add("UnusedPreemptionConfig", "info", f"no ClusterQueue uses PreemptionConfig {name}", where)
        # fair_sharing None (the operator's lint): the config's Valid condition says it already.
        usable = usability(config, usable_with)
        for problem in usable.invalid:
            report.add("InvalidSelector", "error", problem, where)
        for problem in usable.needs_fair_sharing:
            report.add("FairSharingRequired", "error", problem, where)
        _user_writable(report, name, config)
        _class_names(report, name, config, classes)
        _empty_constraints(report, name, config)
    _opt_outs(report, objects)
    rules.run(report, objects)
    limits.run(report, objects)
    _flapping(report, objects, witness, sharing)
    return report


def _flapping(report: Report, objects: list[Any], witness: Path | None, sharing: FairSharing) -> None:
    result = flapping.analyse(objects, sharing)
    for n, flap in enumerate(result.flaps, start=1):
        path = str(flapping.write_witness(flap, witness, n)) if witness is not None else None
        report.add(flap.code, "error", flap_message(flap), *flap.objects, witness=path)
    report.proof = result.proof
    if result.proof is not None and result.proof.skipped and not result.flaps:
        # What the proof left open is said as a finding too: a build gating on warnings stops,
        # and nobody reads "flapFree: false" without a reason beside it.
        report.add(
            "NotProven",
            "warning",
            "flapping: the setup is not proven free of loops: " + "; ".join(s.reason for s in result.proof.skipped),
            *sorted({f"ClusterQueue/{s.cluster_queue}" for s in result.proof.skipped if s.cluster_queue}),
        )


def flap_message(flap: flapping.Flap) -> str:
    letters = "ABC"[: len(flap.shapes)]
    who = "; ".join(f"{letter}: {shape.describe()}" for letter, shape in zip(letters, flap.shapes, strict=True))
    steps = ", then ".join(
        f"{letters[i]} evicts {letters[(i + 1) % len(letters)]} ({reason})" for i, reason in enumerate(flap.reasons)
    )
    same = ""
    if flap.also:
        shown = "; ".join(_among(queues) for queues in flap.also[:3])
        more = f"; and {len(flap.also) - 3} more" if len(flap.also) > 3 else ""
        same = f" The same loop, renamed, exists {shown}{more}."
    return (
        f"{who}. {steps}, and the loop starts again: they can evict each other forever. Make the rules "
        f"asymmetric (a strict priority comparison, preemptorQuota: WithinNominalQuota, a quota selector).{same}"
    )


def _among(queues: tuple[str, ...]) -> str:
    """Where an equivalent loop is: `within ClusterQueue a`, `between ClusterQueues a and b`..."""
    distinct = list(dict.fromkeys(queues))
    if len(distinct) == 1:
        return f"within ClusterQueue {distinct[0]}"
    word = "between" if len(distinct) == 2 else "among"
    return f"{word} ClusterQueues {', '.join(distinct[:-1])} and {distinct[-1]}"


def _empty_constraints(report: Report, name: str, config: v1alpha1.PreemptionConfig) -> None:
    """Fields that are there but constrain nothing, or a rule that can select nothing: accepted by
    the API, and easy to mistake for a constraint."""
    where = f"PreemptionConfig/{name}"
    for rule in (config.spec.rules if config.spec else None) or []:
        at = f"PreemptionConfig {name} rule {rule.name}"
        if not rule.candidate_selectors:
            report.add(
                "EmptyConstraint",
                "info",
                f"{at}: no candidateSelectors: the rule selects no victim. Add a candidate selector, or remove the rule",
                where,
            )
        for i, spec in enumerate(rule.candidate_selectors or []):
            priority = spec.priority
            if priority is not None and not (
                priority.mode or priority.comparison or priority.match_names or priority.not_match_names
            ):
                report.add(
                    "EmptyConstraint",
                    "info",
                    f"{at} candidateSelectors[{i}].priority is empty: it constrains nothing, so workloads of any "
                    "priority, the preemptor's own and higher too, are candidates. Set mode and comparison (or "
                    "matchNames), or remove the field to say so",
                    where,
                )


def _opt_outs(report: Report, objects: list[Any]) -> None:
    """YuniKorn's opt-out on a Workload is its owner's to set: it shields the workload (until nothing
    else lets a preemptor fit) and overrides its priority class's, either way."""
    key = protection.ALLOW_PREEMPTION
    for obj in objects:
        kind = type(obj).__name__
        value = (obj.metadata.annotations or {}).get(key)
        if value is None:
            continue
        if kind == "Workload":
            ref = f"{obj.metadata.namespace}/{obj.metadata.name}"
            report.add(
                "UserWritableKey",
                "warning",
                f"Workload {ref} sets {key}: {value!r}, which its owner can set on any Workload: "
                + (
                    "it is taken only as a last resort, after every other candidate. Prefer the annotation on a "
                    "priority class, which admins control"
                    if value == "false"
                    else "it overrides its priority class's opt-out"
                ),
                f"Workload/{ref}",
            )
        elif kind in ("PriorityClass", "WorkloadPriorityClass") and value == "false":
            report.add(
                "UserWritableKey",
                "warning",
                f"{kind} {obj.metadata.name} sets {key}: 'false', but the same annotation on a Workload ('true' or "
                "'false'), which its owner can set, overrides it: a tenant can take its workloads out of the opt-out, "
                "and any other tenant can opt out without the class",
                f"{kind}/{obj.metadata.name}",
            )


def _class_names(report: Report, name: str, config: v1alpha1.PreemptionConfig, classes: set[tuple[str, str]]) -> None:
    """Class names a rule reads that no WorkloadPriorityClass or PriorityClass of the setup has:
    a typo, or a class that was never created; what it means for the rule is said."""

    defined = {n for _, n in classes}  # rules name classes without their kind

    def missing(names: list[str] | None) -> list[str]:
        return [n for n in names or [] if n not in defined]

    def report_missing(at: str, field: str, names: list[str] | None, effect: str) -> None:
        for class_name in missing(names):
            report.add(
                "MissingReference",
                "warning",
                f"{at} {field} names {class_name}, which is neither a WorkloadPriorityClass nor a PriorityClass "
                f"here: {effect}",
                f"PreemptionConfig/{name}",
            )

    for rule in (config.spec.rules if config.spec else None) or []:
        at = f"PreemptionConfig {name} rule {rule.name}"
        selector = rule.preemptor_priority_class_selector
        if selector is not None:
            none_left = selector.match_names and not set(selector.match_names) & defined
            report_missing(
                f"{at}:",
                "preemptorPriorityClassSelector.matchNames",
                selector.match_names,
                "no preemptor of the setup's classes has it"
                + (", and no other name is listed: the rule never applies" if none_left else ""),
            )
            report_missing(
                f"{at}:",
                "preemptorPriorityClassSelector.notMatchNames",
                selector.not_match_names,
                "it excludes nothing",
            )
        for i, spec in enumerate(rule.candidate_selectors or []):
            priority = spec.priority
            if priority is None:
                continue
            field_at = f"{at} candidateSelectors[{i}]:"
            names = priority.match_names
            none_left = names and not set(names) & defined
            report_missing(
                field_at,
                "priority.matchNames",
                names,
                "no candidate of the setup's classes has it"
                + (", and no other name is listed: the selector selects nothing" if none_left else ""),
            )
            report_missing(field_at, "priority.notMatchNames", priority.not_match_names, "it excludes nothing")


def _user_writable(report: Report, name: str, config: v1alpha1.PreemptionConfig) -> None:
    where = f"PreemptionConfig/{name}"
    for rule in (config.spec.rules if config.spec else None) or []:
        at = f"PreemptionConfig {name} rule {rule.name}"
        if rule.preemptor_selector is not None:
            report.add(
                "UserWritableKey",
                "warning",
                f"{at}: preemptorSelector matches Workload (and Job) labels, which any user of a namespace "
                "can set: a tenant can grant itself this rule. Prefer preemptorPriorityClassSelector or "
                "attach the config only to ClusterQueues whose namespaceSelector admits trusted namespaces",
                where,
            )
        for i, candidate in enumerate(rule.candidate_selectors or []):
            field_at = f"{at} candidateSelectors[{i}]"
            keyed = []
            if candidate.label_selector is not None:
                keyed.append("labelSelector")
            if candidate.numeric_labels:
                keyed.append("numericLabels")
            if keyed:
                report.add(
                    "UserWritableKey",
                    "warning",
                    f"{field_at}: {' and '.join(keyed)} read candidate Workload labels, which their owners can "
                    "change: a tenant can take its workloads out of (or into) the selection. Prefer "
                    "clusterQueueSelector or priority classes, which admins control",
                    where,
                )
            if candidate.priority is not None and candidate.priority.mode == "Boosted":
                report.add(
                    "UserWritableKey",
                    "warning",
                    f"{field_at}: priority mode Boosted adds the {PRIORITY_BOOST_ANNOTATION} annotation, "
                    "which Workload owners can set; mode Base reads the base priority (a job's is its priority class's value)",
                    where,
                )
