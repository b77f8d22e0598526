"""`preemption-operator lint`: findings about a preemption setup (queues, cohorts, flavors,
PreemptionConfigs and priority classes; not the workloads), pure: objects in, findings out.

Checks: references to missing objects, PreemptionConfigs no ClusterQueue uses, selectors that do
not build, rules that key on what a namespace user can write, selectors no workload can satisfy,
rules another rule always covers, rules the protections leave without victims (lint_checks.py),
and two or three workloads that evict each other in turn (flapping.py: each one found by the
scheduler itself, with the objects that reproduce it; when none is found, what was quantified
over is the proof). docs/lint.md describes every check."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from . import flapping, lint_checks
from .api import v1alpha1, v1beta2
from .engine.configurable import fair_sharing_required, validate
from .engine.workload import PRIORITY_BOOST_ANNOTATION

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("info", "warning", "error")
CHECKS = (
    "MissingReference",
    "UnusedPreemptionConfig",
    "InvalidSelector",
    "FairSharingRequired",
    "UserWritableKey",
    *lint_checks.CODES,
    "FlappingPair",
    "FlappingCycle",
)
NOT_CHECKED: tuple[str, ...] = ()
"""Checks the output names as not done yet; kept (empty) in the JSON so that consumers need not change."""


@dataclass(frozen=True)
class Finding:
    code: str
    severity: Severity
    message: str
    objects: tuple[str, ...]
    witness: str | None = None


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)

    proof: dict[str, Any] | None = None

    def add(self, code: str, severity: Severity, message: str, *objects: str, witness: str | None = None) -> None:
        self.findings.append(Finding(code, severity, message, tuple(objects), witness))

    def at_or_above(self, severity: Severity) -> list[Finding]:
        floor = SEVERITIES.index(severity)
        return [f for f in self.findings if SEVERITIES.index(f.severity) >= floor]

    def to_dict(self) -> dict[str, Any]:
        return {
            "findings": [{**asdict(f), "objects": list(f.objects)} for f in self.findings],
            "checks": list(CHECKS),
            "notChecked": list(NOT_CHECKED),
            "proof": self.proof,
        }


def lint(objects: Iterable[Any], witness: Path | None = None, *, fair_sharing: bool | None = None) -> Report:
    objects = list(objects)
    report = Report()
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
        for problem in validate(config):
            report.add("InvalidSelector", "error", problem, where)
        if fair_sharing is False:  # None (the operator's lint): its Valid condition says it already
            for problem in fair_sharing_required(config):
                report.add("FairSharingRequired", "error", problem, where)
        _user_writable(report, name, config, classes)
    lint_checks.run(report, objects)
    _flapping(report, objects, witness)
    return report


def _flapping(report: Report, objects: list[Any], witness: Path | None) -> None:
    result = flapping.analyse(objects)
    for n, flap in enumerate(result.flaps, start=1):
        path = str(flapping.write_witness(flap, witness, n)) if witness is not None else None
        report.add(flap.code, "error", flap_message(flap), *flap.objects, witness=path)
    report.proof = result.proof


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


def proof_summary(proof: dict[str, Any] | None) -> str:
    """The proof in a few lines: what was quantified over, and the verdict."""
    if proof is None:
        return "flapping: not analysed"
    labels = "; ".join(f"{k}: {', '.join(v)}" for k, v in proof["labels"].items()) or "none read by the rules"
    lines = [
        "flapping: "
        + (
            "no two or three workloads can evict each other in turn (proof below)"
            if proof["flapFree"]
            else "see the Flapping findings"
            if not proof["skipped"]
            else "not proven: " + "; ".join(proof["skipped"])
        ),
        f"  quantified over: {proof['clusterQueues']} ClusterQueue(s); priority classes: "
        + (", ".join(proof["priorityClasses"]) or "none")
        + f"; effective priorities {proof['effectivePriorities'][0]}..{proof['effectivePriorities'][-1]} "
        f"({len(proof['effectivePriorities'])} values); labels: {labels}",
        f"  quota: {proof['quotaStates']}",
        f"  time: {proof['time']}",
        f"  {proof['shapes']} workload shapes, {proof['shapePairs']} pairs in {proof['queuePairs']} queue pair(s), "
        f"{proof['shapePairsKeptByFilter']} kept by the filter; {proof['queueTriples']} queue triple(s) "
        f"({proof['equivalentQueuePairs']} pair(s) and {proof['equivalentQueueTriples']} triple(s) more decided "
        "by an equivalent one), "
        f"{proof['shapeTriplesKeptByFilter']} shape triples kept; {proof['engineCycles']} scheduling cycles run",
        f"  not modelled: {', '.join(proof['notModelled'])}",
    ]
    return "\n".join(lines)
