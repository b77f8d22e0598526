"""The three orderings of a cycle, as Kueue defines them: the queue (who heads a ClusterQueue),
the entries (which head is processed first), and the candidates (who is preempted first)."""

from __future__ import annotations

from datetime import datetime

from .workload import WorkloadInfo


def candidate_key(wl: WorkloadInfo, preemptor_cq: str, now: datetime) -> tuple[int, int, int, float, str]:
    """Already-evicted first; then other ClusterQueues before the preemptor's own; lower effective
    priority; most recently reserved (no reservation time counts as now); UID."""
    reserved = wl.reserved_at or now
    return (
        0 if wl.evicted else 1,
        0 if wl.cluster_queue != preemptor_cq else 1,
        wl.priority,
        -reserved.timestamp(),
        wl.uid,
    )


def queue_order(wl: WorkloadInfo) -> tuple[int, datetime, str]:
    """Higher effective priority first, then older first (Kueue's queue-order timestamp is the
    creation time); the key breaks ties so the order is total."""
    return (-wl.priority, wl.created, wl.key)


def entry_order(wl: WorkloadInfo, waiting: bool, borrowing: int) -> tuple[bool, int, int, datetime, str]:
    """The heads of a cycle: a preemptor already waiting for its victims first (so the quota they
    free is its own), then by Kueue's borrowing level (quota from nearer in the cohort tree first,
    none borrowed best), higher priority, older."""
    return (not waiting, borrowing, -wl.priority, wl.created, wl.key)
