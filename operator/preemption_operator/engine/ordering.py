"""Kueue's candidate ordering: who is preempted first."""

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
