"""Reads of a Workload in wire form (a dict as the API server returns it): its conditions, the
quota it holds and how often it was evicted."""

from __future__ import annotations

from typing import Any

from preemption_operator.api.quantity import parse_quantity


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


def is_true(obj: dict[str, Any], kind: str) -> bool:
    c = condition(obj, kind)
    return c is not None and c.get("status") == "True"


def millis(quantity: Any) -> int:
    return int(parse_quantity(str(quantity)) * 1000)


def reservation(obj: dict[str, Any]) -> tuple[str | None, int]:
    """(ClusterQueue, milli-cpu) an unfinished Workload holds; (None, 0) without a reservation.
    Pods that finished hold none: a pod set's usage counts only the pods not among its
    ``status.reclaimablePods`` (Kueue's quota, as a pod group's Succeeded Pods free theirs): the
    admitted usage is scaled down, per pod, to the spec's count less those (a Workload admitted
    again after some had finished was admitted for fewer pods than its spec counts)."""
    status = obj.get("status") or {}
    admission = status.get("admission")
    if not admission or not is_true(obj, "QuotaReserved") or is_true(obj, "Finished"):
        return None, 0
    reclaimable = {str(rp.get("name")): int(rp.get("count") or 0) for rp in status.get("reclaimablePods") or []}
    counts = {str(ps.get("name")): int(ps.get("count", 1)) for ps in (obj.get("spec") or {}).get("podSets") or []}
    total = 0
    for psa in admission.get("podSetAssignments") or []:
        usage = (psa.get("resourceUsage") or {}).get("cpu")
        if usage is None:
            continue
        name = str(psa.get("name"))
        count = int(psa.get("count") or counts.get(name, 1))
        spec_count = counts.get(name, count)
        after = spec_count - min(reclaimable.get(name, 0), spec_count)
        total += millis(usage) // count * after if count and after < count else millis(usage)
    return admission.get("clusterQueue"), total


def eviction_count(obj: dict[str, Any]) -> int:
    stats = (obj.get("status") or {}).get("schedulingStats") or {}
    return sum(int(e.get("count", 0)) for e in stats.get("evictions") or [])
