"""Builders for the protection-policy tests (issue 7), on top of tests/builders.py.

Adds what tests/builders.py does not have: annotated Cohorts, priority classes of both kinds
with PreemptionToleration / allow-preemption annotations, PreemptionConfigs with the new
selector and activation fields, and workloads that reference a scheduling.k8s.io PriorityClass
or were requeued after an eviction.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from builders import KUEUE, T0, Obj, WorkloadBuilder, _condition, _meta, _resource_groups, rfc3339

KUEUE_ALPHA = "kueue.x-k8s.io/v1alpha1"
CONFIG_ANNOTATION = "kueue.x-k8s.io/preemption-config-name"

NEW_PREFIX = "preemption-toleration.scheduling.x-k8s.io/"
OLD_PREFIX = "preemption-toleration.scheduling.sigs.k8s.io/"
MIN_KEY = "minimum-preemptable-priority"
SECONDS_KEY = "toleration-seconds"
ALLOW = "yunikorn.apache.org/allow-preemption"
POLICY = "preemption-operator.io/preemption-policy"
DELAY = "preemption-operator.io/preemption-delay"


def toleration(minimum: int | str | None = None, seconds: int | str | None = None, prefix: str = NEW_PREFIX) -> dict:
    """PreemptionToleration annotations (only the keys given)."""
    out: dict[str, str] = {}
    if minimum is not None:
        out[prefix + MIN_KEY] = str(minimum)
    if seconds is not None:
        out[prefix + SECONDS_KEY] = str(seconds)
    return out


def annotated_cohort(
    name: str,
    parent: str | None = None,
    *,
    annotations: Mapping[str, str] | None = None,
    cpu: int | str | None = None,
) -> Obj:
    """A Cohort with annotations (preemption policy / delay) and optional own cpu quota."""
    spec: Obj = {}
    if parent:
        spec["parentName"] = parent
    groups = _resource_groups(cpu)
    if groups:
        spec["resourceGroups"] = groups
    return {"apiVersion": KUEUE, "kind": "Cohort", "metadata": _meta(name, annotations=annotations), "spec": spec}


def workload_priority_class(name: str, value: int, annotations: Mapping[str, str] | None = None) -> Obj:
    return {
        "apiVersion": KUEUE,
        "kind": "WorkloadPriorityClass",
        "metadata": _meta(name, annotations=annotations),
        "value": value,
    }


def pod_priority_class(name: str, value: int, annotations: Mapping[str, str] | None = None) -> Obj:
    """A scheduling.k8s.io/v1 PriorityClass."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": _meta(name, annotations=annotations),
        "value": value,
    }


def uses_pod_priority_class(builder: WorkloadBuilder, name: str) -> WorkloadBuilder:
    """Points the workload's priorityClassRef at a scheduling.k8s.io PriorityClass."""
    builder.body["spec"]["priorityClassRef"] = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": name}
    return builder


def requeued(builder: WorkloadBuilder, at: datetime | str) -> WorkloadBuilder:
    """A pending workload that was evicted (and requeued) at `at`: Evicted=True, QuotaReserved=False."""
    status = builder.body.setdefault("status", {})
    status["conditions"] = [
        _condition("QuotaReserved", "False", "Preempted", "Preempted earlier", at),
        _condition("Evicted", "True", "Preempted", "Preempted earlier", at),
        _condition("Requeued", "True", "Preempted", "Preempted earlier", at),
    ]
    return builder


def accumulated(builder: WorkloadBuilder, seconds: int) -> WorkloadBuilder:
    """status.accumulatedPastExecutionTimeSeconds."""
    builder.body.setdefault("status", {})["accumulatedPastExecutionTimeSeconds"] = seconds
    return builder


def configured(cq: Obj, config: str) -> Obj:
    """`cq` with the annotation naming its PreemptionConfig."""
    cq["metadata"].setdefault("annotations", {})[CONFIG_ANNOTATION] = config
    return cq


def selector(scope: str, **fields: Any) -> Obj:
    """A candidate selector; `fields` are wire names (quota, minExecutionDuration, priority…)."""
    return {"scope": scope, **fields}


def rule(
    name: str,
    *selectors: Obj,
    trigger: str = "InsufficientQuota",
    preemptor_quota: str | None = None,
    min_trigger: str | None = None,
) -> Obj:
    policy: Obj = {"trigger": trigger}
    if preemptor_quota is not None:
        policy["preemptorQuota"] = preemptor_quota
    if min_trigger is not None:
        policy["minTriggerRequiredDuration"] = min_trigger
    return {"name": name, "activationPolicy": policy, "candidateSelectors": list(selectors)}


def preemption_config(name: str, *rules: Obj) -> Obj:
    return {
        "apiVersion": KUEUE_ALPHA,
        "kind": "PreemptionConfig",
        "metadata": _meta(name),
        "spec": {"rules": list(rules)},
    }


def at(moment: datetime) -> str:
    return rfc3339(moment)


__all__ = [
    "ALLOW",
    "CONFIG_ANNOTATION",
    "DELAY",
    "NEW_PREFIX",
    "OLD_PREFIX",
    "POLICY",
    "T0",
    "accumulated",
    "annotated_cohort",
    "at",
    "configured",
    "pod_priority_class",
    "preemption_config",
    "requeued",
    "rule",
    "selector",
    "toleration",
    "uses_pod_priority_class",
    "workload_priority_class",
]
