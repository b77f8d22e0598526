"""From a cycle's decisions to Workload status changes: the one path both `simulate` and the
operator take, so the offline and the live results cannot drift apart.

Each change computes the new status from the object as it is *when written* (the operator may
find it changed since the decision: finished, deactivated, admitted by someone else), and says
what to tell people once it is written (Kueue's Events).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from . import admission_checks, execution_time
from . import workload_status as wl_status
from .limits import PastPreemption
from .scheduler import (
    NO_LONGER_FITS,
    OVERLAPPING_TARGETS,
    Admission,
    ChecksUpdate,
    CycleResult,
    Deactivation,
    Eviction,
    Pending,
    Preemption,
)
from .workload import WorkloadInfo

ADMITTED, PREEMPTED, EVICTED, PENDING = "Admitted", "Preempted", "Evicted", "Pending"
DEACTIVATED, REQUEUED = "Deactivated", "Requeued"
CHECKS_SYNCED, CHECKS_READY = "AdmissionChecksSynced", "AdmissionChecksReady"
QUOTA_RESERVED = "QuotaReserved"
"""What `simulate` reports for an admission that waits for AdmissionChecks (their all being
Ready is reported as Admitted)."""
_FIGURES = re.compile(r"(?<![\w-])[0-9]+(\.[0-9]+)?[a-zA-Z]{0,2}(?![\w-])")
"""A quantity or count standing on its own (not part of a name such as cq-1)."""
THROTTLED = "PreemptionThrottled"
RELEASED = "Released"
"""A victim already being evicted gives its quota back: no new preemption, no Event, not counted
again, and not reported as an action by `simulate`."""


@dataclass(frozen=True)
class EventNote:
    """An Event to post once the change is written; `about` is "workload", "preemptor" or
    "clusterQueue" (the change's `cluster_queue`)."""

    about: str
    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class StatusChange:
    action: str
    workload: WorkloadInfo
    compute: Callable[[dict[str, Any]], dict[str, Any] | None]
    """The object as it is now -> its new status, or None when the decision no longer applies or
    would change nothing."""
    record: dict[str, Any]
    """What `simulate` reports for it (without the cycle number)."""
    events: tuple[EventNote, ...] = ()
    preemptor: WorkloadInfo | None = None
    preemptor_cluster_queue: str = ""
    cluster_queue: str = ""
    reason: str = ""
    underlying_cause: str = ""
    rule: str = ""
    """For a preemption by a PreemptionConfig rule: `<rule>/<selector index>`."""
    holds_quota: bool = field(default=False)
    """Whether the change gives the workload quota (an admission): assumed before it is written."""
    past: PastPreemption | None = None
    """A preemption: as PreemptionLimit windows count it while its write is in flight."""
    deactivate: bool = False
    """Once the status is written, the workload is made inactive (spec.active=false), as Kueue's
    workload controller does with a DeactivationTarget."""

    @property
    def releases_quota(self) -> bool:
        """An eviction: the quota is given back only once it is written. (A deactivation leads to
        one: assumed alike, so no pass decides it again while it is written.)"""
        return self.action in (PREEMPTED, EVICTED, RELEASED, DEACTIVATED)

    @property
    def key(self) -> str:
        return self.workload.key


def _conditions(obj: dict[str, Any]) -> tuple[dict[str, Any], bool, bool]:
    """(status, holds a reservation, finished) of an object in wire form."""
    status = obj.get("status") or {}
    reserved = wl_status.get_condition(status, "QuotaReserved")
    finished = wl_status.get_condition(status, "Finished")
    return (
        status,
        reserved is not None and reserved.get("status") == "True",
        finished is not None and finished.get("status") == "True",
    )


def _evicting(status: dict[str, Any]) -> bool:
    evicted = wl_status.get_condition(status, "Evicted")
    return evicted is not None and evicted.get("status") == "True"


def _active(obj: dict[str, Any]) -> bool:
    return (obj.get("spec") or {}).get("active", True) is not False


def _generation(obj: dict[str, Any]) -> int | None:
    generation = (obj.get("metadata") or {}).get("generation")
    return generation if isinstance(generation, int) else None


TRANSIENT = frozenset({NO_LONGER_FITS, OVERLAPPING_TARGETS})
"""Kueue's messages for a head that lost a race within one cycle (another head of its cohort took
the room, or the same victims, first): it is looked at again at once. Over a pending reason the
status already shows (the same reason), they say nothing new about why it waits, and are not
written over it; a workload showing no such reason gets them. In Kueue's harness at full scale
they were half of all pending-reason writes, each undone by the next attempt's message."""


def same_in_substance(written: str, new: str) -> bool:
    """Whether a pending message says nothing new: only its figures changed ("4 more needed" ->
    "3 more needed"). Rewriting it every cycle would spend the API's write capacity, which
    admissions need, on numbers that are stale again a cycle later."""
    return written == new or _FIGURES.sub("#", written) == _FIGURES.sub("#", new)


def _priorities(wl: WorkloadInfo) -> str:
    return f"{wl.priority} (base: {wl.base_priority}, boost: {wl.boost})"


def eviction(e: Eviction, now: datetime, job_stops: bool = False) -> StatusChange:
    def compute(current: dict[str, Any]) -> dict[str, Any] | None:
        status, reserved, finished = _conditions(current)
        if not reserved or finished:
            return None
        if e.reason == "Deactivated" and _active(current):
            return None  # activated again meanwhile
        if job_stops and _evicting(status):
            return None  # its job is stopping already
        if e.reason == admission_checks.REASON:
            checks = status.get("admissionChecks") or []
            if _evicting(status) or not any(c.get("state") == admission_checks.RETRY for c in checks):
                return None  # evicted otherwise, or the check is no longer in Retry, meanwhile
        elif e.requeue is not None:  # a PodsReady timeout
            ready = wl_status.get_condition(status, "PodsReady") or {}
            if _evicting(status) or ready.get("status") == "True" or not _active(current):
                return None  # evicted otherwise, or its pods became ready, meanwhile
        return wl_status.drained(status, e, now, _generation(current), release=not job_stops)

    wl = e.workload
    record = {
        "action": EVICTED,
        "workload": wl.key,
        "clusterQueue": wl.cluster_queue,
        "reason": e.reason,
        "message": e.message,
    }
    if e.underlying_cause:
        record["underlyingCause"] = e.underlying_cause
    if e.requeue is not None:
        record["requeueAt"] = wl_status.rfc3339(e.requeue[1])
    return StatusChange(
        EVICTED,
        wl,
        compute,
        record,
        (EventNote("workload", "Normal", f"EvictedDueTo{wl_status.eviction_reason(e)}", e.message),),
        cluster_queue=wl.cluster_queue or "",
        reason=e.reason,
        underlying_cause=e.underlying_cause,
    )


def deactivation(d: Deactivation, now: datetime) -> StatusChange:
    """Kueue's DeactivationTarget, then spec.active=false: the eviction follows as a deactivated
    workload's (`eviction`, reason Deactivated)."""

    def compute(current: dict[str, Any]) -> dict[str, Any] | None:
        status, _, finished = _conditions(current)
        if finished or not _active(current):
            return None
        target = wl_status.get_condition(status, "DeactivationTarget") or {}
        if target.get("status") == "True":
            return None  # marked already: only the spec is left to write
        out = wl_status.deactivation_target(status, d.reason, d.message, now, _generation(current))
        if d.reason == execution_time.REASON:
            out.pop("accumulatedPastExecutionTimeSeconds", None)  # used up: Kueue starts it over
        return out

    wl = d.workload
    events: tuple[EventNote, ...] = ()
    if d.reason == admission_checks.REASON:
        events = (EventNote("workload", "Warning", admission_checks.REJECTED_EVENT, f"Deactivated due to {d.message}"),)
    elif d.reason == execution_time.REASON:
        limit = wl.obj.spec.maximum_execution_time_seconds or 0
        events = (EventNote("workload", "Warning", execution_time.REASON, execution_time.event_message(limit)),)
    return StatusChange(
        DEACTIVATED,
        wl,
        compute,
        {"action": DEACTIVATED, "workload": wl.key, "reason": d.reason, "message": d.message},
        events,
        cluster_queue=wl.cluster_queue or "",
        reason=d.reason,
        deactivate=True,
    )


def requeue(wl: WorkloadInfo, now: datetime) -> StatusChange:
    """A workload's requeuing backoff is over: it is queued again."""

    def compute(current: dict[str, Any]) -> dict[str, Any] | None:
        status, reserved, finished = _conditions(current)
        if reserved or finished:
            return None
        return wl_status.backoff_finished(status, now, _generation(current))

    return StatusChange(REQUEUED, wl, compute, {"action": REQUEUED, "workload": wl.key})


def checks(c: ChecksUpdate, now: datetime) -> StatusChange:
    """A workload's AdmissionChecks list synced with its queue's, or, all Ready, its admission."""
    wl = c.workload

    def compute(current: dict[str, Any]) -> dict[str, Any] | None:
        status, reserved, finished = _conditions(current)
        if reserved != c.holding or finished or (reserved and _evicting(status)):
            return None  # admitted, released or evicted meanwhile: the list it needs is another
        if c.required is not None:
            written = {x.get("name") for x in status.get("admissionChecks") or []}
            return wl_status.checks_synced(status, c.required, now) if written != c.required else None
        admitted = wl_status.get_condition(status, "Admitted") or {}
        if admitted.get("status") == "True" or not admission_checks.all_ready(status.get("admissionChecks")):
            return None
        return wl_status.checks_ready(status, now, _generation(current))

    if c.required is not None:
        record = {"action": CHECKS_SYNCED, "workload": wl.key, "admissionChecks": sorted(c.required)}
        return StatusChange(CHECKS_SYNCED, wl, compute, record, cluster_queue=wl.cluster_queue or "")
    reserved = wl.condition("QuotaReserved")
    waited = max(0, int((now - reserved.last_transition_time).total_seconds())) if reserved is not None else 0
    return StatusChange(
        CHECKS_READY,
        wl,
        compute,
        {"action": ADMITTED, "workload": wl.key, "clusterQueue": wl.cluster_queue, "admissionChecks": "Ready"},
        (
            EventNote(
                "workload",
                "Normal",
                "Admitted",
                f"Admitted by ClusterQueue {wl.cluster_queue}, wait time since reservation was {waited}s",
            ),
        ),
        cluster_queue=wl.cluster_queue or "",
    )


def _completion(p: Preemption, now: datetime) -> StatusChange:
    victim = p.victim

    def compute(current: dict[str, Any]) -> dict[str, Any] | None:
        status, reserved, finished = _conditions(current)
        admission = status.get("admission") or {}
        evicted = wl_status.get_condition(status, "Evicted")
        if not reserved or finished or admission.get("clusterQueue") != victim.cluster_queue:
            return None
        if evicted is None or evicted.get("status") != "True":
            return None  # no longer being evicted: a new decision is needed
        return wl_status.completed(status, now, _generation(current))

    return StatusChange(
        RELEASED,
        victim,
        compute,
        {
            "action": RELEASED,
            "workload": victim.key,
            "preemptor": p.preemptor.key,
            "clusterQueue": victim.cluster_queue,
        },
        preemptor=p.preemptor,
        preemptor_cluster_queue=p.preemptor_cluster_queue,
        cluster_queue=victim.cluster_queue or "",
    )


def preemption(p: Preemption, now: datetime, job_stops: bool = False) -> StatusChange | None:
    """The victim's eviction. With `job_stops`, its quota stays until its job has stopped (the
    job integration gives it back), and a victim already being evicted needs no change."""
    if p.ongoing:
        return None if job_stops else _completion(p, now)
    victim = p.victim

    def compute(current: dict[str, Any]) -> dict[str, Any] | None:
        status, reserved, finished = _conditions(current)
        admission = status.get("admission") or {}
        if not reserved or finished or admission.get("clusterQueue") != victim.cluster_queue:
            return None  # no longer holds that quota: nothing to evict
        return wl_status.evicted(status, p, now, _generation(current), release=not job_stops)

    evicted_message, preempted_message = wl_status.eviction_messages(p)
    priorities = (
        f"; preemptor effective priority: {_priorities(p.preemptor)}; "
        f"preemptee effective priority: {_priorities(victim)}"
    )
    cause = p.target.rule.config if p.target.rule is not None else ""
    return StatusChange(
        PREEMPTED,
        victim,
        compute,
        {
            "action": PREEMPTED,
            "workload": victim.key,
            "preemptor": p.preemptor.key,
            "clusterQueue": victim.cluster_queue,
            "reason": p.target.reason,
            "message": preempted_message,
        },
        (
            EventNote("workload", "Normal", "EvictedDueToPreempted", evicted_message),
            EventNote("workload", "Normal", "Preempted", preempted_message + priorities),
            EventNote(
                "preemptor",
                "Normal",
                "PreemptedWorkload",
                f"Preempted workload {victim.key} (UID: {victim.uid}) in ClusterQueue {victim.cluster_queue}"
                f"{priorities}",
            ),
        ),
        preemptor=p.preemptor,
        preemptor_cluster_queue=p.preemptor_cluster_queue,
        cluster_queue=victim.cluster_queue or "",
        reason=p.target.reason,
        underlying_cause=cause,
        rule=p.target.rule.describe() if p.target.rule is not None else "",
        past=PastPreemption(
            now,
            victim.key,
            victim.cluster_queue,
            p.preemptor.key,
            p.preemptor_cluster_queue,
            p.target.reason,
            cause or None,
            tuple(name for name, _ in p.target.rule.selectors) if p.target.rule is not None else (),
            preempted_message,
        ),
    )


def admission(a: Admission, now: datetime) -> StatusChange:
    def compute(current: dict[str, Any]) -> dict[str, Any] | None:
        status, reserved, finished = _conditions(current)
        if reserved or finished or not _active(current):
            return None  # admitted by someone else, finished or deactivated meanwhile
        return wl_status.admitted(status, a, now, _generation(current))

    wl = a.workload
    waited = max(0, int((now - wl.created).total_seconds()))
    record: dict[str, Any] = {"action": ADMITTED, "workload": wl.key, "clusterQueue": a.cluster_queue}
    events: tuple[EventNote, ...] = (
        EventNote(
            "workload",
            "Normal",
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {a.cluster_queue}, wait time since queued was {waited}s",
        ),
    )
    if a.checks:
        record["action"] = QUOTA_RESERVED  # Admitted once they are all Ready
        record["admissionChecks"] = sorted(a.checks)
    else:
        events += (
            EventNote(
                "workload",
                "Normal",
                "Admitted",
                f"Admitted by ClusterQueue {a.cluster_queue}, wait time since reservation was 0s",
            ),
        )
    return StatusChange(
        ADMITTED,
        wl,
        compute,
        record,
        events,
        cluster_queue=a.cluster_queue,
        holds_quota=True,
    )


def pending(p: Pending, now: datetime) -> StatusChange:
    def compute(current: dict[str, Any]) -> dict[str, Any] | None:
        status, reserved, finished = _conditions(current)
        if reserved or finished:
            return None
        condition = wl_status.get_condition(status, "QuotaReserved")
        blocked = wl_status.get_condition(status, wl_status.BLOCKED_ON_GATES) or {}
        limited = wl_status.get_condition(status, wl_status.BLOCKED_BY_LIMIT) or {}
        limit_same = (
            limited.get("status") == "True" and limited.get("message") == wl_status.limit_message(p)
            if p.blocked_by_limit is not None
            else limited.get("status") != "True"
        )
        if (
            condition is not None
            and condition.get("reason") == p.reason
            and (p.message in TRANSIENT or same_in_substance(str(condition.get("message", "")), p.message))
            and (not p.blocked_on_gates or blocked.get("status") == "True")
            and limit_same
        ):
            return None
        return wl_status.pending(status, p, now, _generation(current))

    # As Kueue's scheduler posts one per failed attempt, with the pending reason (its granular
    # reasons); here only when the status says something new, the recorder counting repeats.
    events: tuple[EventNote, ...] = (EventNote("workload", "Warning", p.reason, p.message),)
    if p.blocked_by_limit is not None:
        # Kueue's proposal posts it on the preemptor and on its ClusterQueue.
        throttled = wl_status.limit_message(p)
        events += (EventNote("workload", "Warning", THROTTLED, throttled),)
        if p.cluster_queue:
            events += (EventNote("clusterQueue", "Warning", THROTTLED, throttled),)
    return StatusChange(
        PENDING,
        p.workload,
        compute,
        {
            "action": PENDING,
            "workload": p.workload.key,
            "clusterQueue": p.cluster_queue,
            "reason": p.reason,
            "message": p.message,
        },
        events,
        cluster_queue=p.cluster_queue,
        reason=p.reason,
    )


def status_changes(
    result: CycleResult, now: datetime, job_stops: Callable[[WorkloadInfo], bool] = lambda wl: False
) -> list[StatusChange]:
    """In the order they must be written: evictions give quota back before admissions take it.
    A workload a pass admitted in one round and preempted in a later one comes in the order it was
    decided (admission, then eviction: the admission is assumed and superseded, never written).
    `job_stops` tells which workloads a job integration stops (their quota comes back when the
    job has stopped, not with the eviction); `simulate` has no jobs to stop."""
    victims = {p.victim.key for p in result.preempted}
    admitted = {a.workload.key for a in result.admitted}
    preemptions = (preemption(p, now, job_stops(p.victim)) for p in result.preempted)
    return [
        *(admission(a, now) for a in result.admitted if a.workload.key in victims),
        *(eviction(e, now, job_stops(e.workload)) for e in result.evicted),
        *(deactivation(d, now) for d in result.deactivated),
        *(requeue(wl, now) for wl in result.requeued),
        # A pending workload admitted in the same pass gets its checks with the admission.
        *(checks(c, now) for c in result.checked if c.holding or c.workload.key not in admitted),
        *(change for change in preemptions if change is not None),
        *(admission(a, now) for a in result.admitted if a.workload.key not in victims),
        *(pending(p, now) for p in result.pending),
    ]
