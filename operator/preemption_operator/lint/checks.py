"""`lint(objects)`, which runs every check, and the reference checks: references to missing
objects, PreemptionConfigs no ClusterQueue uses, selectors that do not build, configs that need
fair sharing, rules keyed on what a namespace user can write. The other checks are in rules.py,
limits.py and flapping.py."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..api import v1alpha1, v1beta2
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
    fair_sharing: FairSharing | bool | None = None,
    judge_usability: bool = True,
) -> Report:
    """`fair_sharing`: the engine's switch (a bool: on with the default strategies; None: off and
    DRS quota values not judged). `judge_usability` off (the operator's lint of its own configs,
    whose Valid condition says it already): DRS quota values are not judged either."""
    objects = list(objects)
    sharing = FairSharing(enabled=fair_sharing) if isinstance(fair_sharing, bool) else fair_sharing or OFF
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
        _user_writable(report, name, config, classes)
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


def _user_writable(report: Report, name: str, config: v1alpha1.PreemptionConfig, classes: set[tuple[str, str]]) -> None:
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
        selector = rule.preemptor_priority_class_selector
        for class_name in (selector.match_names or []) if selector else []:
            if not any((kind, class_name) in classes for kind in ("WorkloadPriorityClass", "PriorityClass")):
                report.add(
                    "MissingReference",
                    "warning",
                    f"{at}: preemptorPriorityClassSelector names {class_name}, which is neither a "
                    "WorkloadPriorityClass nor a PriorityClass here",
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
                    "which Workload owners can set; mode Base reads only the priority class",
                    where,
                )
