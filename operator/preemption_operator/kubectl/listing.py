"""The tables of `list clusterqueue|localqueue|workload|resourceflavor`, built from the objects
as the API server returns them: kueuectl's columns, its status names and kubectl's durations.
Pure: the caller reads the cluster and prints."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

Obj = dict[str, Any]

STATUSES = ("all", "pending", "quotareserved", "admitted", "finished")
"""kueuectl's --status values (any case)."""
CRD_TYPE_MAX = 20
"""kueuectl cuts a JOB TYPE longer than this (and adds "...")."""


def human_duration(seconds: float) -> str:
    """kubectl's AGE format (apimachinery's HumanDuration)."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        rest = whole % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def _time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _age(obj: Obj, now: datetime) -> str:
    created = _time((obj.get("metadata") or {}).get("creationTimestamp"))
    return human_duration((now - created).total_seconds()) if created else "<unknown>"


def _condition(obj: Obj, kind: str) -> Obj | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == kind:
            return condition
    return None


def _true(obj: Obj, kind: str) -> bool:
    found = _condition(obj, kind)
    return found is not None and found.get("status") == "True"


def workload_status(wl: Obj) -> str:
    """Kueue's workload.Status: finished, admitted, quotaReserved or pending."""
    if _true(wl, "Finished"):
        return "finished"
    if _true(wl, "Admitted"):
        return "admitted"
    if _true(wl, "QuotaReserved"):
        return "quotaReserved"
    return "pending"


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _namespace(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")


@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]

    def render(self, headers: bool = True) -> str:
        """kubectl's plain table: upper-case headers, columns three spaces apart."""
        lines = [self.headers] if headers else []
        lines += list(self.rows)
        if not self.rows:
            return ""
        widths = [max(len(line[i]) for line in lines) for i in range(len(self.headers))]
        return "".join(
            "   ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() + "\n"
            for line in lines
        )


def cluster_queues(items: Iterable[Obj], now: datetime, active: bool | None = None) -> Table:
    rows = []
    for cq in sorted(items, key=_name):
        is_active = _true(cq, "Active")
        if active is not None and is_active != active:
            continue
        status = cq.get("status") or {}
        rows.append(
            (
                _name(cq),
                str((cq.get("spec") or {}).get("cohortName") or ""),
                str(status.get("pendingWorkloads") or 0),
                str(status.get("admittedWorkloads") or 0),
                "true" if is_active else "false",
                _age(cq, now),
            )
        )
    return Table(("NAME", "COHORT", "PENDING WORKLOADS", "ADMITTED WORKLOADS", "ACTIVE", "AGE"), rows)


def local_queues(items: Iterable[Obj], now: datetime, with_namespace: bool, cluster_queue: str | None = None) -> Table:
    rows = []
    for lq in sorted(items, key=lambda o: (_namespace(o), _name(o))):
        target = str((lq.get("spec") or {}).get("clusterQueue") or "")
        if cluster_queue and target != cluster_queue:
            continue
        status = lq.get("status") or {}
        row = (
            _name(lq),
            target,
            str(status.get("pendingWorkloads") or 0),
            str(status.get("admittedWorkloads") or 0),
            _age(lq, now),
        )
        rows.append((_namespace(lq), *row) if with_namespace else row)
    headers = ("NAME", "CLUSTERQUEUE", "PENDING WORKLOADS", "ADMITTED WORKLOADS", "AGE")
    return Table(("NAMESPACE", *headers) if with_namespace else headers, rows)


def resource_flavors(items: Iterable[Obj], now: datetime) -> Table:
    rows = []
    for rf in sorted(items, key=_name):
        labels = (rf.get("spec") or {}).get("nodeLabels") or {}
        rows.append((_name(rf), ", ".join(f"{k}={v}" for k, v in sorted(labels.items())), _age(rf, now)))
    return Table(("NAME", "NODE LABELS", "AGE"), rows)


def _owners(wl: Obj) -> tuple[str, str]:
    """kueuectl's JOB TYPE (the owner's kind.group, from its apiVersion) and JOB NAME."""
    refs = [r for r in (wl.get("metadata") or {}).get("ownerReferences") or [] if isinstance(r, dict)]
    types, names = [], []
    for ref in refs:
        group = str(ref.get("apiVersion") or "").rpartition("/")[0]
        kind = str(ref.get("kind") or "").lower()
        job_type = f"{kind}.{group}" if group else kind
        types.append(f"{job_type[:CRD_TYPE_MAX]}..." if len(job_type) > CRD_TYPE_MAX else job_type)
        names.append(str(ref.get("name") or ""))
    return ", ".join(dict.fromkeys(types)), ", ".join(dict.fromkeys(names))


@dataclass(frozen=True)
class Risk:
    """An admitted workload a pending one would preempt, given enough: who, and under which rule."""

    preemptor: str
    rule: str

    def __str__(self) -> str:
        return f"{self.preemptor} ({self.rule})" if self.rule else self.preemptor


def workloads(
    items: Iterable[Obj],
    local_queue_targets: Mapping[str, str],
    now: datetime,
    *,
    with_namespace: bool,
    positions: Mapping[str, int] | None = None,
    risks: Mapping[str, Sequence[Risk]] | None = None,
    statuses: Iterable[str] = (),
    cluster_queue: str | None = None,
    local_queue: str | None = None,
) -> Table:
    """kueuectl's columns, then PREEMPTION RISK: for an admitted workload, the pending ones that
    would take it (and by which rule). `local_queue_targets`: namespace/name -> ClusterQueue;
    `positions`: namespace/name -> position in its LocalQueue (pending workloads)."""
    wanted = {s.lower() for s in statuses}
    if "all" in wanted:
        wanted = set()
    rows = []
    for wl in sorted(items, key=lambda o: (_namespace(o), _name(o))):
        key = f"{_namespace(wl)}/{_name(wl)}"
        spec, status = wl.get("spec") or {}, wl.get("status") or {}
        queue = str(spec.get("queueName") or "")
        admission = status.get("admission") or {}
        target = str(admission.get("clusterQueue") or local_queue_targets.get(f"{_namespace(wl)}/{queue}", ""))
        state = workload_status(wl)
        if wanted and state.lower() not in wanted:
            continue
        if local_queue and queue != local_queue:
            continue
        if cluster_queue and admission.get("clusterQueue") != cluster_queue:
            continue  # kueuectl filters on the admission's ClusterQueue
        position = (positions or {}).get(key)
        exec_time = ""
        admitted = _condition(wl, "Admitted")
        if admitted is not None and admitted.get("status") == "True":
            since = _time(admitted.get("lastTransitionTime"))
            finished = _condition(wl, "Finished")
            until = _time(finished.get("lastTransitionTime")) if finished and finished.get("status") == "True" else now
            if since is not None and until is not None:
                exec_time = human_duration((until - since).total_seconds())
        job_type, job_name = _owners(wl)
        row = (
            _name(wl),
            job_type,
            job_name,
            queue,
            target,
            state.upper(),
            "" if position is None else str(position),
            exec_time,
            _age(wl, now),
            ", ".join(str(r) for r in (risks or {}).get(key, ())),
        )
        rows.append((_namespace(wl), *row) if with_namespace else row)
    headers = (
        "NAME",
        "JOB TYPE",
        "JOB NAME",
        "LOCALQUEUE",
        "CLUSTERQUEUE",
        "STATUS",
        "POSITION IN QUEUE",
        "EXEC TIME",
        "AGE",
        "PREEMPTION RISK",
    )
    return Table(("NAMESPACE", *headers) if with_namespace else headers, rows)
