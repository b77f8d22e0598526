"""Kueue's waitForPodsReady: an admitted workload whose pods are not all ready within a timeout
is evicted (`PodsReadyTimeout`) and requeued after an exponential backoff, or deactivated once
it has been requeued `backoffLimitCount` times; with `blockAdmission` nothing else is admitted
while an admitted workload waits for its pods (Kueue v0.19.2: pkg/controller/core's workload
controller, pkg/workload's requeue state, the scheduler's waitForPodsReadyIfNeeded)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ..api import v1beta2
from ..api.duration import MAX_DURATION
from .workload import find_condition

PODS_READY = "PodsReady"
WAIT_FOR_START = "WaitForStart"
WAIT_FOR_RECOVERY = "WaitForRecovery"
TIMEOUT_REASON = "PodsReadyTimeout"
REQUEUING_LIMIT_EXCEEDED = "RequeuingLimitExceeded"
REQUEUING_LIMIT_MESSAGE = "exceeding the maximum number of re-queuing retries"
DEACTIVATION_TARGET = "DeactivationTarget"
BACKOFF_FINISHED = "BackoffFinished"
BACKOFF_FINISHED_MESSAGE = "The workload backoff was finished"
WAITING_FOR_PODS_READY = "WaitingForPodsReady"
WAITING_FOR_PODS_READY_MESSAGE = "waiting for all admitted workloads to be in PodsReady condition"
BACKOFF_REASONS = frozenset({TIMEOUT_REASON, "AdmissionCheck"})
"""Requeued=False reasons the backoff ends (Kueue's workload controller flips them to
BackoffFinished once requeueAt has passed)."""
REACTIVATED = "Reactivated"
REACTIVATED_MESSAGE = "The workload was reactivated"


def deactivation_reason(reason: str) -> bool:
    """A Requeued=False reason a deactivation writes: Deactivated, or DeactivatedDueTo<cause>
    (Kueue's ReasonWithCause)."""
    return reason.startswith("Deactivated")


def holding_reason(reason: str) -> bool:
    """A Requeued=False reason that keeps a pending, active workload out of its queue until Kueue's
    workload controller requeues it: a backoff, or a deactivation (made active again: Reactivated)."""
    return reason in BACKOFF_REASONS or deactivation_reason(reason)


@dataclass(frozen=True)
class WaitForPodsReady:
    """The configuration (Kueue's Configuration `waitForPodsReady`, with Kueue's defaults)."""

    timeout: timedelta = timedelta(minutes=30)
    recovery_timeout: timedelta | None = timedelta(minutes=30)
    """None: a workload waiting for recovery is never timed out (Kueue: "0s" disables it)."""
    block_admission: bool = False
    requeuing_timestamp: str = "Eviction"
    """Eviction: a requeued workload queues by its eviction time; Creation: by its creation."""
    backoff_limit_count: int | None = None
    """None: requeued forever."""
    backoff_base_seconds: int = 60
    backoff_max_seconds: int = 3600


def timeout_message(key: str) -> str:
    return f"Exceeded the PodsReady timeout {key}"


def deadline(obj: v1beta2.Workload, settings: WaitForPodsReady) -> tuple[str, datetime] | None:
    """(underlying cause, when the timeout passes) for an admitted workload whose pods are not
    all ready (Kueue's admittedNotReadyWorkload): counted from its admission while it waits for
    its pods to start, from the PodsReady transition while it waits for recovery. None when it
    is not admitted, its pods are ready, or no timeout applies."""
    admitted = find_condition(obj, "Admitted")
    if admitted is None or admitted.status != "True" or obj.status is None or obj.status.admission is None:
        return None
    ready = find_condition(obj, PODS_READY)
    if ready is not None and ready.status == "True":
        return None
    if ready is None or ready.reason in (WAIT_FOR_START, PODS_READY):
        return WAIT_FOR_START, admitted.last_transition_time + settings.timeout
    if ready.reason == WAIT_FOR_RECOVERY and settings.recovery_timeout is not None:
        return WAIT_FOR_RECOVERY, ready.last_transition_time + settings.recovery_timeout
    return None


def requeue_count(obj: v1beta2.Workload) -> int:
    state = obj.status.requeue_state if obj.status is not None else None
    return (state.count or 0) if state is not None else 0


def backoff(count: int, settings: WaitForPodsReady) -> timedelta:
    """The wait before the `count`-th requeue (Kueue's wait.Backoff, factor 2): backoffBaseSeconds,
    doubled for each requeue before it up to backoffMaxSeconds (0: no cap). Without Kueue's
    0.01 % jitter, so decisions stay deterministic."""
    seconds = float(settings.backoff_base_seconds)
    cap = float(settings.backoff_max_seconds) if settings.backoff_max_seconds > 0 else _LONGEST
    for _ in range(1, count):
        seconds = min(seconds * 2, cap)
        if seconds == cap:
            break
    return timedelta(seconds=min(seconds, _LONGEST))


_LONGEST = MAX_DURATION.total_seconds()


def backing_off(obj: v1beta2.Workload) -> bool:
    """A pending workload that may not be queued yet (Kueue's backoffWaitingTimeExpired, the
    time left to the caller: `requeue_at`): Requeued=False for a backoff or a deactivation, or a
    requeueAt still set. Unlike Kueue, a Requeued=False for another reason (none is written
    here) does not hold it: nothing here would ever requeue it."""
    requeued = find_condition(obj, "Requeued")
    if requeued is not None and requeued.status == "False" and holding_reason(requeued.reason):
        return True
    return requeue_at(obj) is not None


def requeue_at(obj: v1beta2.Workload) -> datetime | None:
    state = obj.status.requeue_state if obj.status is not None else None
    return state.requeue_at if state is not None else None
