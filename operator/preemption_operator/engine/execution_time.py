"""Kueue's maximum execution time: an admitted workload that has run for its
`spec.maximumExecutionTimeSeconds` in all (the time of earlier admissions, kept in
`status.accumulatedPastExecutionTimeSeconds`, included) is deactivated. It is marked
DeactivationTarget (reason MaximumExecutionTimeExceeded), made inactive, and evicted as a
deactivated workload (Kueue v0.19.2: the workload controller's reconcileMaxExecutionTime; the
time accumulates when Admitted turns False, in workload_status.released)."""

from __future__ import annotations

from datetime import datetime, timedelta

from ..api import v1beta2
from .workload import find_condition

REASON = "MaximumExecutionTimeExceeded"
"""The DeactivationTarget's reason, the Warning Event's, and the eviction's underlying cause."""
MESSAGE = "exceeding the maximum execution time"


def event_message(limit: int) -> str:
    return f"The maximum execution time ({limit}s) exceeded"


def deadline(obj: v1beta2.Workload, *, reservation: bool = False) -> datetime | None:
    """When an admitted workload with a maximum execution time has used it up: its admission
    time plus what is left of it (never before the admission). None when it has no limit or is
    not admitted. With `reservation`, a workload that shows no Admitted condition at all counts
    from its QuotaReserved (what-if inputs often record only the reservation)."""
    limit = obj.spec.maximum_execution_time_seconds
    if limit is None:
        return None
    admitted = find_condition(obj, "Admitted")
    if admitted is None and reservation:
        admitted = find_condition(obj, "QuotaReserved")
    if admitted is None or admitted.status != "True":
        return None
    ran = (obj.status.accumulated_past_execution_time_seconds or 0) if obj.status is not None else 0
    return admitted.last_transition_time + timedelta(seconds=max(0, limit - ran))
