"""Status of ClusterQueues, Cohorts, LocalQueues and PreemptionConfigs, computed from a snapshot (pure)."""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ..api.quantity import format_amount
from ..api.v1alpha1 import PREEMPTION_CONFIG_ANNOTATION, PreemptionConfig
from ..engine.configurable import usability
from ..engine.fair_sharing import dominant_resource_share, weighted_share_status
from ..engine.snapshot import ClusterQueueInfo, Snapshot
from ..engine.workload import WorkloadInfo, is_true
from ..engine.workload_status import get_condition, own_copy, set_condition
from .linter import FLAP_CODES, LintResult
from .metrics import QueueFigures


def _flavor_usage(
    cq: ClusterQueueInfo, with_borrowed: bool, unwritten: Sequence[WorkloadInfo] = ()
) -> list[dict[str, Any]]:
    out = []
    for group in cq.resource_groups:
        for flavor in group.flavors:
            resources = []
            for resource in group.covered_resources:
                fr = (flavor, resource)
                used = cq.node.usage.get(fr, 0) - sum(wl.usage.get(fr, 0) for wl in unwritten)
                entry: dict[str, Any] = {"name": resource, "total": format_amount(resource, used)}
                if with_borrowed:
                    entry["borrowed"] = format_amount(resource, max(0, used - cq.node.nominal(fr)))
                resources.append(entry)
            out.append({"name": flavor, "resources": resources})
    return out


CONFIG_CONDITION = "PreemptionConfigReady"


def preemption_config_condition(
    cq: ClusterQueueInfo,
    configs: Mapping[str, PreemptionConfig],
    unreadable: Mapping[str, str],
    fair_sharing: bool = False,
) -> tuple[str, str, str] | None:
    """(status, reason, message) of the ClusterQueue's PreemptionConfigReady condition, or None
    when it names no PreemptionConfig. `unreadable`: configs that exist but do not parse (why);
    `fair_sharing`: whether the operator runs with it (DRS quota values need it)."""
    name = cq.preemption_config_name
    if not name:
        return None
    if name in unreadable:
        return "False", "InvalidConfig", f"PreemptionConfig {name} is invalid: {unreadable[name]}"
    config = configs.get(name)
    if config is None:
        return "False", "ConfigNotFound", f"PreemptionConfig {name} not found: only classic preemption applies"
    errors = usability(config, fair_sharing).problems
    if errors:
        return "False", "InvalidConfig", f"PreemptionConfig {name} is invalid: {'; '.join(errors)}"
    return "True", "Ready", f"PreemptionConfig {name}: {len(config.rules)} rule(s)"


def cluster_queue_status(
    cq: ClusterQueueInfo,
    pending: int,
    current: dict[str, Any] | None,
    now: datetime,
    generation: int | None,
    configs: Mapping[str, PreemptionConfig] | None = None,
    unreadable: Mapping[str, str] | None = None,
    share: float | None = None,
    fair_sharing: bool = False,
    unwritten: Sequence[WorkloadInfo] = (),
) -> dict[str, Any]:
    """`share`: the queue's precise weighted share with fair sharing on (None: off);
    `fair_sharing`: whether the operator runs with it; `unwritten`: admissions into it decided
    and not written yet. The status says what the API holds: those are left out until written
    (shown sooner, the queue would report quota its workloads do not hold yet)."""
    status = own_copy(current)
    reserving = len(cq.workloads) - len(unwritten)
    admitted = reserving
    if cq.admission_checks:  # those waiting for their checks reserve quota but are not admitted yet
        skip = {wl.key for wl in unwritten}
        admitted -= sum(1 for wl in cq.workloads.values() if wl.key not in skip and not is_true(wl.obj, "Admitted"))
    usage = _flavor_usage(cq, with_borrowed=True, unwritten=unwritten)
    status.update(
        {
            "pendingWorkloads": pending,
            "reservingWorkloads": reserving,
            "admittedWorkloads": admitted,
            "flavorsReservation": usage,
            "flavorsUsage": copy.deepcopy(usage),
        }
    )
    active = "True" if cq.active else "False"
    set_condition(status, "Active", active, cq.inactive_reason, cq.inactive_message, now, generation)
    # Kueue's Active says whether the queue admits; whether its rules apply is a condition of its own.
    condition = preemption_config_condition(cq, configs or {}, unreadable or {}, fair_sharing)
    if condition is not None:
        set_condition(status, CONFIG_CONDITION, *condition, now, generation)
    elif status.get("conditions"):
        status["conditions"] = [c for c in status["conditions"] if c.get("type") != CONFIG_CONDITION]
    _set_fair_sharing(status, share)
    return status


def _set_fair_sharing(status: dict[str, Any], share: float | None) -> None:
    """status.fairSharing as Kueue's ClusterQueue and Cohort reconcilers write it: the share
    rounded up while fair sharing is on, and no fairSharing at all while it is off."""
    if share is None:
        status.pop("fairSharing", None)
    else:
        status["fairSharing"] = {"weightedShare": weighted_share_status(share)}


def cohort_status(share: float | None, current: dict[str, Any] | None) -> dict[str, Any]:
    """A Cohort's status: only status.fairSharing (Kueue's CohortStatus has nothing else)."""
    status = own_copy(current)
    _set_fair_sharing(status, share)
    return status


def weighted_shares(snapshot: Snapshot) -> tuple[dict[str, float], dict[str, float]]:
    """Precise weighted shares of every ClusterQueue and cohort (empty with fair sharing off)."""
    if not snapshot.fair_sharing.enabled:
        return {}, {}
    queues = {name: dominant_resource_share(cq.node).precise for name, cq in snapshot.held_cluster_queues.items()}
    cohorts = {name: dominant_resource_share(node).precise for name, node in snapshot.held_cohorts.items()}
    return queues, cohorts


def pending_count(snapshot: Snapshot, cluster_queue: str) -> int:
    """A ClusterQueue's pending workloads: those queued, and those in their requeuing backoff
    (not queued yet; Kueue counts them as inadmissible)."""
    return len(snapshot.pending.get(cluster_queue, ())) + len(snapshot.backing_off.get(cluster_queue, ()))


def local_queue_counts(
    snapshot: Snapshot, queued: Mapping[tuple[str, str], int]
) -> dict[tuple[str, str], tuple[int, int, int]]:
    """(namespace, LocalQueue name) -> (pending, reserving, admitted). `queued`: the queue
    manager's pending count per LocalQueue (QueueManager.pending_counts), taken with the snapshot:
    thousands pending are counted without a pass over them; those in their requeuing backoff are
    added, and the workloads holding quota (bounded by it) are looked at one by one."""
    pending: Counter[tuple[str, str]] = Counter(queued)
    reserving: Counter[tuple[str, str]] = Counter()
    admitted: Counter[tuple[str, str]] = Counter()
    for waiting in snapshot.backing_off.values():
        for wl in waiting:
            pending[(wl.namespace, wl.queue_name)] += 1
    for cq in snapshot.held_cluster_queues.values():
        for wl in cq.workloads.values():
            reserving[(wl.namespace, wl.queue_name)] += 1
            if not cq.admission_checks or is_true(wl.obj, "Admitted"):
                admitted[(wl.namespace, wl.queue_name)] += 1
    keys = set(pending) | set(reserving)
    return {key: (pending[key], reserving[key], admitted[key]) for key in keys}


def local_queue_status(counts: tuple[int, int, int], current: dict[str, Any] | None) -> dict[str, Any]:
    status = own_copy(current)
    pending, reserving, admitted = counts
    status.update({"pendingWorkloads": pending, "reservingWorkloads": reserving, "admittedWorkloads": admitted})
    return status


FLAP_FREE = "FlapFree"
LINT = "Lint"


def preemption_config_status(
    config: PreemptionConfig,
    cluster_queues: list[str],
    current: dict[str, Any] | None,
    now: datetime,
    lint: LintResult | None = None,
    fair_sharing: bool = False,
) -> dict[str, Any]:
    """`lint`: the operator's last analysis of the setup (None: none yet); `fair_sharing`: whether
    the operator runs with it (a DRS quota value cannot be used without)."""
    status = copy.deepcopy(current or {})
    usable = usability(config, fair_sharing)
    generation = config.metadata.generation
    status["ruleCount"] = len(config.rules)
    status["clusterQueues"] = cluster_queues
    if usable.reason is not None:
        set_condition(status, "Valid", "False", usable.reason, "; ".join(usable.problems), now, generation)
    else:
        set_condition(status, "Valid", "True", "Valid", "All rules and selectors build", now, generation)
    name = config.metadata.name
    if lint is not None and name in lint.generations:
        # observedGeneration says which version was analysed: a verdict stays until the next one.
        analysed = lint.generations[name]
        set_condition(status, FLAP_FREE, *flap_free_condition(name, lint), now, analysed)
        set_condition(status, LINT, *lint_condition(name, lint), now, analysed)
    elif get_condition(status, FLAP_FREE) is None:
        message = "the setup is being analysed for workloads that can evict each other in turn"
        set_condition(status, FLAP_FREE, "Unknown", "Analysing", message, now, generation)
    return status


COUNT_KEYS = 1000
"""How many keys a PreemptionLimit's status.count holds (the most preempted first), as Kueue's
proposal caps it to stay within an object's size."""


def preemption_limit_status(
    generation: int | None,
    problem: str | None,
    counts: Mapping[str, int] | None,
    current: dict[str, Any] | None,
    now: datetime,
) -> dict[str, Any]:
    """Whether the limit is in force (`problem`: why not), and, when `counts` is given (about once
    a minute), the preemptions inside its window per key, the top COUNT_KEYS of them."""
    status = copy.deepcopy(current or {})
    if problem is not None:
        set_condition(status, "Valid", "False", "InvalidSpec", problem, now, generation)
    else:
        set_condition(status, "Valid", "True", "Valid", "The limit is in force", now, generation)
    if counts is not None:
        top = sorted(((-n, key) for key, n in counts.items() if n > 0))[:COUNT_KEYS]
        if top:
            status["count"] = {key: -n for n, key in sorted(top, key=lambda item: item[1])}
        else:
            status.pop("count", None)
    return status


def flap_free_condition(name: str, lint: LintResult) -> tuple[str, str, str]:
    """(status, reason, message) of PreemptionConfig `name`'s FlapFree condition: False when a flap
    found involves it; True when every cohort tree of its ClusterQueues is proven free of them;
    Unknown when the analysis failed or did not cover them."""
    if lint.error is not None:
        return "Unknown", "AnalysisFailed", lint.error
    ref = f"PreemptionConfig/{name}"
    mine = [f for f in lint.flaps if ref in f.objects]
    if mine:
        more = f" ({len(mine) - 1} more: see this config's Warning Events)" if len(mine) > 1 else ""
        return "False", mine[0].code, mine[0].message + more
    queues = lint.users.get(name, ())
    if not queues:
        return "True", "NotUsed", "no ClusterQueue uses this config: its rules cannot make workloads flap"
    trees = {lint.trees[q] for q in queues if q in lint.trees}
    skipped = lint.proof.skipped_in(trees, lint.trees) if lint.proof is not None else ["not analysed"]
    if skipped:
        return "Unknown", "NotProven", "not proven: " + "; ".join(skipped)
    elsewhere = sorted(
        {
            ref.split("/", 1)[1]
            for f in lint.flaps
            for ref in f.objects
            if ref.startswith("ClusterQueue/") and lint.trees.get(ref.split("/", 1)[1]) in trees
        }
    )
    if elsewhere:
        return (
            "Unknown",
            "NotProven",
            f"workloads of ClusterQueue(s) {', '.join(elsewhere)} in the same cohort tree flap (see their configs "
            "or `preemption-operator lint`); cycles of three are not checked in a tree where a pair flaps",
        )
    assert lint.proof is not None  # else skipped above
    return "True", "NoFlapFound", f"ClusterQueue(s) {', '.join(queues)}: " + lint.proof.sentence()


def lint_condition(name: str, lint: LintResult) -> tuple[str, str, str]:
    """(status, reason, message) of the Lint condition: the findings of `lint` about this config
    (False with errors, True with warnings only)."""
    if lint.error is not None:
        return "Unknown", "AnalysisFailed", lint.error
    ref = f"PreemptionConfig/{name}"
    mine = [f for f in lint.findings if ref in f.objects and f.severity in ("error", "warning")]
    if not mine:
        return "True", "NoFindings", "preemption-operator lint finds no error or warning about this config"
    errors = sum(1 for f in mine if f.severity == "error")
    warnings = len(mine) - errors
    flaps = Counter(f.code for f in mine if f.code in FLAP_CODES)
    told = [f"{n} {code} (see FlapFree)" for code, n in sorted(flaps.items())]
    told += [f"{f.code}: {f.message}" for f in mine if f.code not in flaps]
    message = f"{errors} error(s), {warnings} warning(s): " + " | ".join(told)
    return ("False", "Errors", message) if errors else ("True", "Warnings", message)


def config_users(snapshot: Snapshot) -> dict[str, list[str]]:
    users: dict[str, list[str]] = {}
    for name, cq in sorted(snapshot.held_cluster_queues.items()):
        config = cq.annotations.get(PREEMPTION_CONFIG_ANNOTATION)
        if config:
            users.setdefault(config, []).append(name)
    return users


def _kueue_units(resource: str, amount: int | None) -> float | None:
    """An amount as Kueue's gauges report it (Quantity.AsApproximateFloat64): cpu in cores."""
    if amount is None:
        return None
    return amount / 1000 if resource == "cpu" else float(amount)


def queue_figures(snapshot: Snapshot, parked: Mapping[str, set[str]]) -> list[QueueFigures]:
    """Kueue's per-ClusterQueue gauges, from one snapshot; `parked`: the workloads each queue
    keeps aside until something changes (Kueue's inadmissible)."""
    out = []
    for name, cq in sorted(snapshot.held_cluster_queues.items()):
        queue = snapshot.pending.get(name, ())
        waiting = len(snapshot.backing_off.get(name, ()))  # in their backoff: inadmissible, as in Kueue
        pending = pending_count(snapshot, name)
        held = parked.get(name, set())
        inadmissible = (sum(1 for wl in queue if wl.key in held) if held else 0) + waiting
        resources = {
            (flavor, resource): (
                _kueue_units(resource, cq.node.usage.get((flavor, resource), 0)) or 0.0,
                _kueue_units(resource, quota.nominal) or 0.0,
                _kueue_units(resource, quota.borrowing_limit),
                _kueue_units(resource, quota.lending_limit),
            )
            for (flavor, resource), quota in sorted(cq.node.quotas.items())
        }
        out.append(
            QueueFigures(
                name=name,
                cohort=cq.node.parent.name if cq.node.parent is not None else "",
                status="active" if cq.active else "pending",
                pending_active=pending - inadmissible,
                pending_inadmissible=inadmissible,
                reserving=len(cq.workloads),
                resources=resources,
            )
        )
    return out
