"""Workload status as Kueue writes it, computed from decisions: conditions, admission, stats.

Pure functions over the status in wire form (a dict), shared by `simulate` and the operator.
`set_condition` follows apimachinery's SetStatusCondition: the transition time moves only when
the status flips.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..api.meta import format_time
from . import admission_checks
from .candidates import CONFIGURABLE_PREEMPTION, preemption_message
from .pods_ready import (
    BACKOFF_FINISHED,
    BACKOFF_FINISHED_MESSAGE,
    BACKOFF_REASONS,
    DEACTIVATION_TARGET,
    REACTIVATED,
    REACTIVATED_MESSAGE,
    deactivation_reason,
)
from .protection import LAST_RESORT_SUFFIX
from .scheduler import LIMIT_BLOCKED_PREFIX, Admission, Eviction, Pending, Preemption

MAX_MESSAGE = 32 * 1024
BLOCKED_ON_GATES = "BlockedOnPreemptionGates"
PREEMPTION_GATED = "PreemptionGated"
BLOCKED_BY_LIMIT = "PreemptionBlockedByLimit"
LIMIT_EXCEEDED = "PreemptionLimitExceeded"


def rfc3339(moment: datetime) -> str:
    return format_time(moment)


def _truncate(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 4] + " ..."


def own_copy(status: dict[str, Any] | None) -> dict[str, Any]:
    """A copy of a status that the functions here may change without touching the original: they
    set top-level fields, replace conditions (never change one in place), and count evictions and
    close gates in place; everything else is shared (a deep copy of every status it writes was a
    few percent of the operator's time under load)."""
    out = dict(status or {})
    if isinstance(out.get("conditions"), list):
        out["conditions"] = list(out["conditions"])
    stats = out.get("schedulingStats")
    if isinstance(stats, dict):
        stats = out["schedulingStats"] = dict(stats)
        if isinstance(stats.get("evictions"), list):
            stats["evictions"] = [dict(e) if isinstance(e, dict) else e for e in stats["evictions"]]
    if isinstance(out.get("preemptionGates"), list):
        out["preemptionGates"] = [dict(g) if isinstance(g, dict) else g for g in out["preemptionGates"]]
    return out


def set_condition(
    status: dict[str, Any], kind: str, value: str, reason: str, message: str, now: datetime, generation: int | None
) -> None:
    conditions: list[dict[str, Any]] = status.setdefault("conditions", [])
    new: dict[str, Any] = {"type": kind, "status": value, "reason": reason, "message": _truncate(message)}
    if generation is not None:
        new["observedGeneration"] = generation
    for i, existing in enumerate(conditions):
        if existing.get("type") == kind:
            changed = existing.get("status") != value
            new["lastTransitionTime"] = rfc3339(now) if changed else existing.get("lastTransitionTime", rfc3339(now))
            conditions[i] = {**existing, **new}
            return
    new["lastTransitionTime"] = rfc3339(now)
    conditions.append(new)


def get_condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return None


def admitted(
    status: dict[str, Any] | None, decision: Admission, now: datetime, generation: int | None
) -> dict[str, Any]:
    out = own_copy(status)
    out["admission"] = {"clusterQueue": decision.cluster_queue, "podSetAssignments": list(decision.pod_sets)}
    set_condition(
        out,
        "QuotaReserved",
        "True",
        "QuotaReserved",
        f"Quota reserved in ClusterQueue {decision.cluster_queue}",
        now,
        generation,
    )
    if decision.checks or out.get("admissionChecks"):
        # Admitted once its checks are all Ready (Kueue's workload controller adds the missing
        # ones as Pending; here in the same write).
        out["admissionChecks"] = admission_checks.synced(out.get("admissionChecks"), decision.checks, now)
        if not out["admissionChecks"]:
            del out["admissionChecks"]
    if admission_checks.all_ready(out.get("admissionChecks")):
        set_condition(out, "Admitted", "True", "Admitted", "The workload is admitted", now, generation)
    else:
        # As Kueue's SyncAdmittedCondition writes it (with its unadmitted-workloads observability).
        set_condition(
            out,
            "Admitted",
            "False",
            admission_checks.UNSATISFIED,
            admission_checks.UNSATISFIED_MESSAGE,
            now,
            generation,
        )
    for kind in ("Evicted", "Preempted", BLOCKED_ON_GATES, BLOCKED_BY_LIMIT):
        previous = get_condition(out, kind)
        if previous is not None and previous.get("status") == "True":
            set_condition(
                out, kind, "False", "QuotaReserved", f"Previously: {previous.get('message', '')}", now, generation
            )
    return out


def eviction_messages(decision: Preemption) -> tuple[str, str]:
    """(Evicted message, Preempted message). Classic victims get Kueue's message on both; a victim
    chosen by a PreemptionConfig rule gets the specification's message naming config and rule."""
    target = decision.target
    if target.reason == CONFIGURABLE_PREEMPTION and target.rule is not None:
        preemptor = decision.preemptor
        text = (
            f"Preempted by {preemptor.namespace}/{preemptor.name} because of preemption config "
            f"{target.rule.config} rule {target.rule.describe()}"
        )
    else:
        text = preemption_message(target, decision.preemptor, decision.preemptor_path, decision.victim_path)
    if target.last_resort:
        return text, text + LAST_RESORT_SUFFIX
    return text, text


def evicted(
    status: dict[str, Any] | None,
    decision: Preemption,
    now: datetime,
    generation: int | None,
    *,
    release: bool = True,
) -> dict[str, Any]:
    """The victim's status once evicted and, with no job to stop (`release`), requeued at once.
    A job's workload keeps its quota until its job has stopped (see `completed`)."""
    out = own_copy(status)
    previous = get_condition(out, "Evicted")
    if previous is not None and previous.get("status") == "True":
        # Already evicted and still holding quota: the eviction is under way, not a new one
        # (Kueue counts it as done); only the quota is given back, once nothing runs.
        return completed(out, now, generation) if release else out
    evicted_message, preempted_message = eviction_messages(decision)
    _prepare_eviction(out, "Preempted", evicted_message, now, generation)
    set_condition(out, "Preempted", "True", decision.target.reason, preempted_message, now, generation)
    cause = decision.target.rule.config if decision.target.rule is not None else ""
    _count_eviction(out, "Preempted", cause)
    return released(out, evicted_message, now, generation) if release else out


def drained(
    status: dict[str, Any] | None, decision: Eviction, now: datetime, generation: int | None, *, release: bool = True
) -> dict[str, Any]:
    """A workload evicted because it was deactivated or its queue is draining; with no job to
    stop (`release`) it gives its quota back at once. A deactivated workload is not requeued."""
    out = own_copy(status)
    _prepare_eviction(out, eviction_reason(decision), decision.message, now, generation)
    _count_eviction(out, decision.reason, decision.underlying_cause)
    if decision.requeue is not None:
        count, requeue_at = decision.requeue
        state = dict(out.get("requeueState") or {})
        if count is not None:
            state["count"] = count
        written = state.get("requeueAt")
        # Shared by several causes: a later requeueAt is never brought forward (SetRequeueState).
        if not written or _parsed(str(written)) < requeue_at:
            state["requeueAt"] = rfc3339(requeue_at)
        out["requeueState"] = state
    if decision.reason == "Deactivated":
        # Kueue's deactivation ends what led to it: the target mark and the requeuing count.
        out["conditions"] = [c for c in out.get("conditions") or [] if c.get("type") != DEACTIVATION_TARGET]
        out.pop("requeueState", None)
    if not release:
        return out
    out = released(out, decision.message, now, generation)
    if decision.reason == "Deactivated":
        set_condition(out, "Requeued", "False", "Deactivated", decision.message, now, generation)
        set_condition(out, "QuotaReserved", "False", "Deactivated", decision.message, now, generation)
    else:
        requeued = "False" if decision.reason in BACKOFF_REASONS else "True"
        set_condition(out, "Requeued", requeued, decision.reason, decision.message, now, generation)
    return out


def eviction_reason(decision: Eviction) -> str:
    """The Evicted condition's reason: a deactivation names its cause (Kueue's ReasonWithCause:
    DeactivatedDueToAdmissionCheck, DeactivatedDueToRequeuingLimitExceeded)."""
    if decision.reason == "Deactivated" and decision.underlying_cause:
        return f"{decision.reason}DueTo{decision.underlying_cause}"
    return decision.reason


def deactivation_target(
    status: dict[str, Any] | None, reason: str, message: str, now: datetime, generation: int | None
) -> dict[str, Any]:
    """Kueue's mark on a workload it is about to deactivate (its requeuing limit reached)."""
    out = own_copy(status)
    set_condition(out, DEACTIVATION_TARGET, "True", reason, message, now, generation)
    return out


def backoff_finished(status: dict[str, Any] | None, now: datetime, generation: int | None) -> dict[str, Any]:
    """A workload queued again (Kueue's workload controller): Requeued=True, BackoffFinished when
    it was False for a backoff, Reactivated when it was deactivated; requeueAt cleared (its count
    kept)."""
    out = own_copy(status)
    requeued = get_condition(out, "Requeued")
    if requeued is not None and requeued.get("status") == "False":
        if requeued.get("reason") in BACKOFF_REASONS:
            set_condition(out, "Requeued", "True", BACKOFF_FINISHED, BACKOFF_FINISHED_MESSAGE, now, generation)
        elif deactivation_reason(str(requeued.get("reason", ""))):
            set_condition(out, "Requeued", "True", REACTIVATED, REACTIVATED_MESSAGE, now, generation)
    state = out.get("requeueState")
    if isinstance(state, dict) and "requeueAt" in state:
        rest = {k: v for k, v in state.items() if k != "requeueAt"}
        if rest:
            out["requeueState"] = rest
        else:
            out.pop("requeueState")
    return out


def checks_synced(status: dict[str, Any] | None, required: frozenset[str], now: datetime) -> dict[str, Any]:
    """The workload's AdmissionChecks made the ones its queue requires (new ones Pending)."""
    out = own_copy(status)
    out["admissionChecks"] = admission_checks.synced(out.get("admissionChecks"), required, now)
    if not out["admissionChecks"]:
        del out["admissionChecks"]
    return out


def checks_ready(status: dict[str, Any] | None, now: datetime, generation: int | None) -> dict[str, Any]:
    """Every AdmissionCheck Ready: the workload holding quota is Admitted."""
    out = own_copy(status)
    set_condition(out, "Admitted", "True", "Admitted", "The workload is admitted", now, generation)
    return out


def _parsed(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _prepare_eviction(status: dict[str, Any], reason: str, message: str, now: datetime, generation: int | None) -> None:
    """Evicted=True, as Kueue's eviction writes it: a BlockedOnPreemptionGates=True ends with the
    eviction's reason, and every preemption gate closes again (a requeued workload must have its
    gates opened anew before it preempts)."""
    set_condition(status, "Evicted", "True", reason, message, now, generation)
    admission_checks.reset_on_eviction(status, now)
    blocked = get_condition(status, BLOCKED_ON_GATES)
    if blocked is not None and blocked.get("status") == "True":
        set_condition(status, BLOCKED_ON_GATES, "False", reason, message, now, generation)
    for gate in status.get("preemptionGates") or []:
        gate["position"] = "Closed"
        gate["lastTransitionTime"] = rfc3339(now)


def completed(status: dict[str, Any], now: datetime, generation: int | None) -> dict[str, Any]:
    """A workload already being evicted gives its quota back (with no job to stop, at once), as
    Kueue does once the job stopped: requeued only after a preemption or node failures."""
    out = own_copy(status)
    evicted_condition = get_condition(out, "Evicted") or {}
    reason = str(evicted_condition.get("reason") or "Preempted")
    message = str(evicted_condition.get("message") or "")
    released(out, message, now, generation)
    requeued = "True" if reason in ("Preempted", "NodeFailures") else "False"
    set_condition(out, "Requeued", requeued, reason, message, now, generation)
    return out


def _count_eviction(status: dict[str, Any], reason: str, cause: str) -> None:
    stats = status.setdefault("schedulingStats", {})
    evictions: list[dict[str, Any]] = stats.setdefault("evictions", [])
    for entry in evictions:
        if entry.get("reason") == reason and entry.get("underlyingCause", "") == cause:
            entry["count"] = int(entry.get("count", 0)) + 1
            return
    evictions.append({"reason": reason, "underlyingCause": cause, "count": 1})


def released(status: dict[str, Any], message: str, now: datetime, generation: int | None) -> dict[str, Any]:
    """Quota given back after an eviction: admission cleared, requeued, pending evaluation."""
    status.pop("admission", None)
    admitted = get_condition(status, "Admitted")
    if admitted is not None and admitted.get("status") == "True" and admitted.get("lastTransitionTime"):
        # As Kueue's SyncAdmittedCondition: the time it was admitted counts towards its
        # maximum execution time (whole seconds, rounded down).
        ran = max(0, int((now - _parsed(str(admitted["lastTransitionTime"]))).total_seconds()))
        status["accumulatedPastExecutionTimeSeconds"] = (
            int(status.get("accumulatedPastExecutionTimeSeconds") or 0) + ran
        )
    set_condition(status, "QuotaReserved", "False", "PendingEvaluation", message, now, generation)
    set_condition(status, "Admitted", "False", "NoReservation", "The workload has no reservation", now, generation)
    set_condition(status, "Requeued", "True", "Preempted", message, now, generation)
    return status


def pending(status: dict[str, Any] | None, decision: Pending, now: datetime, generation: int | None) -> dict[str, Any]:
    out = own_copy(status)
    set_condition(out, "QuotaReserved", "False", decision.reason, decision.message, now, generation)
    # As Kueue writes it beside a pending reason (its UnadmittedWorkloadsObservability, on by default since v0.20).
    set_condition(out, "Admitted", "False", "NoReservation", "The workload has no reservation", now, generation)
    if decision.blocked_on_gates:
        set_condition(out, BLOCKED_ON_GATES, "True", PREEMPTION_GATED, decision.message, now, generation)
    if decision.blocked_by_limit is not None:
        set_condition(out, BLOCKED_BY_LIMIT, "True", LIMIT_EXCEEDED, limit_message(decision), now, generation)
    else:
        # No longer blocked by a limit: flipped as admission flips it, the old message kept.
        previous = get_condition(out, BLOCKED_BY_LIMIT)
        if previous is not None and previous.get("status") == "True":
            message = f"Previously: {previous.get('message', '')}"
            set_condition(out, BLOCKED_BY_LIMIT, "False", decision.reason, message, now, generation)
    return out


def limit_message(decision: Pending) -> str:
    """The PreemptionBlockedByLimit message: the limit, then the victims it kept."""
    message = f"{LIMIT_BLOCKED_PREFIX} {decision.blocked_by_limit}"
    if decision.would_evict:
        message += f"; would have evicted {', '.join(decision.would_evict)}"
    return message
