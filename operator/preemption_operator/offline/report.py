"""Renders a simulation for people (`text`) and for tools (`json`, `yaml`)."""

from __future__ import annotations

import json
from typing import Any

import yaml

from .simulate import Simulation


def render(sim: Simulation, output: str) -> str:
    data = sim.to_dict()
    if output == "json":
        return json.dumps(data, indent=2) + "\n"
    if output == "yaml":
        return yaml.safe_dump(data, sort_keys=False, width=120)
    return text(data, sim.cycles)


def summary(sim: Simulation) -> str:
    """`simulate --summary`: how many of each action per cycle, and where every ClusterQueue ends
    (for runs too large to read action by action): admitted per ClusterQueue, pending per
    LocalQueue."""
    data = sim.to_dict()
    cycles = sim.cycles
    lines = [f"warning: {w}" for w in data["warnings"]]
    if lines:
        lines.append("")
    kinds = ["Admitted", "Preempted", "Evicted", "Pending"]
    per_cycle: dict[int, dict[str, int]] = {}
    for action in data["actions"]:
        by_kind = per_cycle.setdefault(action["cycle"], dict.fromkeys(kinds, 0))
        by_kind[action["action"]] = by_kind.get(action["action"], 0) + 1
    totals = {k: sum(c.get(k, 0) for c in per_cycle.values()) for k in kinds}
    lines.append(f"Summary ({cycles} cycle{'s' if cycles != 1 else ''}):")
    rows = [[str(cycle), *(str(by.get(k, 0)) for k in kinds)] for cycle, by in sorted(per_cycle.items())]
    rows.append(["total", *(str(totals[k]) for k in kinds)])
    lines.extend("  " + line for line in _table(rows, ["CYCLE", *(k.upper() for k in kinds)]))
    queues: dict[str, list[int]] = {}
    for wl in sim.workloads.values():
        status = wl.status
        if status is None:
            counts = queues.setdefault(f"LocalQueue {wl.metadata.namespace}/{wl.spec.queue_name}", [0, 0, 0])
            counts[1] += 1
            continue
        finished = any(c.type == "Finished" and c.status == "True" for c in status.conditions or [])
        if finished:
            continue
        reserved = any(c.type == "QuotaReserved" and c.status == "True" for c in status.conditions or [])
        evictions = sum(e.count for e in (status.scheduling_stats.evictions if status.scheduling_stats else []) or [])
        if reserved and status.admission is not None:
            counts = queues.setdefault(f"ClusterQueue {status.admission.cluster_queue}", [0, 0, 0])
            counts[0] += 1
        else:
            counts = queues.setdefault(f"LocalQueue {wl.metadata.namespace}/{wl.spec.queue_name}", [0, 0, 0])
            counts[1] += 1
        counts[2] += evictions
    lines.append("")
    lines.append("Final state:")
    rows = [[name, str(a), str(p), str(e)] for name, (a, p, e) in sorted(queues.items())]
    lines.extend("  " + line for line in _table(rows, ["QUEUE", "ADMITTED", "PENDING", "EVICTIONS"]))
    return "\n".join(lines) + "\n"


def _table(rows: list[list[str]], headers: list[str]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return lines


def text(data: dict[str, Any], cycles: int) -> str:
    lines: list[str] = []
    for warning in data["warnings"]:
        lines.append(f"warning: {warning}")
    if data["warnings"]:
        lines.append("")
    rows = []
    for action in data["actions"]:
        detail = action.get("reason", "")
        if action["action"] == "Preempted":
            detail = f"{action['reason']} (by {action['preemptor']})"
        rows.append(
            [str(action["cycle"]), action["action"], action["workload"], action.get("clusterQueue") or "-", detail]
        )
    lines.append(f"Actions ({cycles} cycle{'s' if cycles != 1 else ''}):")
    lines.extend("  " + line for line in _table(rows, ["CYCLE", "ACTION", "WORKLOAD", "CLUSTERQUEUE", "REASON"]))
    messages = [a for a in data["actions"] if a["action"] in ("Preempted", "Pending") and a.get("message")]
    if messages:
        lines.append("")
        lines.append("Messages:")
        for action in messages:
            lines.append(f"  [{action['cycle']}] {action['workload']} {action['action']}: {action['message']}")
    lines.append("")
    lines.append("Final state:")
    rows = []
    for wl in data["workloads"]:
        status = wl["status"]
        conditions = {c["type"]: c for c in status.get("conditions", [])}
        admitted = conditions.get("Admitted", {}).get("status", "False") == "True"
        reserved = conditions.get("QuotaReserved", {})
        state = "Admitted" if admitted else f"Pending ({reserved.get('reason', 'New')})"
        if not admitted and reserved.get("status") == "True":
            checks = ", ".join(f"{c.get('name')}={c.get('state')}" for c in status.get("admissionChecks") or [])
            state = f"QuotaReserved (checks: {checks})" if checks else "QuotaReserved"
        cq = (status.get("admission") or {}).get("clusterQueue", "-")
        evictions = sum(int(e.get("count", 0)) for e in (status.get("schedulingStats") or {}).get("evictions", []))
        rows.append([f"{wl['namespace']}/{wl['name']}", state, cq, str(evictions)])
    lines.extend("  " + line for line in _table(rows, ["WORKLOAD", "STATE", "CLUSTERQUEUE", "EVICTIONS"]))
    if data["explanations"]:
        lines.append("")
        lines.append("Preemption decisions:")
        for exp in data["explanations"]:
            lines.append(f"  [{exp['cycle']}] {exp['preemptor']} in {exp['clusterQueue']}: {exp['message']}")
            for note in exp["notes"]:
                lines.append(f"      note: {note}")
            for cand in exp["candidates"]:
                source = f" [{cand['source']}]" if cand.get("source") else ""
                lines.append(
                    f"      {cand['outcome']:<9} {cand['workload']} ({cand['clusterQueue']}): {cand['detail']}{source}"
                )
    return "\n".join(lines) + "\n"


def explain_record(data: dict[str, Any], workload: str) -> dict[str, Any]:
    """Everything a simulation decided about one workload (`namespace/name`), as data: its final
    status, the actions about it, and every victim search it took part in (as the preemptor, with
    every candidate; as a candidate, with its own lines). `explain --output json` prints it."""
    final = next(w for w in data["workloads"] if f"{w['namespace']}/{w['name']}" == workload)
    actions = [a for a in data["actions"] if workload in (a["workload"], a.get("preemptor"))]
    searches = []
    for exp in data["explanations"]:
        as_preemptor = exp["preemptor"] == workload
        mine = [c for c in exp["candidates"] if c["workload"] == workload and not as_preemptor]
        if not as_preemptor and not mine:
            continue
        searches.append(
            {
                "cycle": exp["cycle"],
                "role": "preemptor" if as_preemptor else "candidate",
                "preemptor": exp["preemptor"],
                "clusterQueue": exp["clusterQueue"],
                "message": exp["message"],
                "notes": exp["notes"] if as_preemptor else [],
                "candidates": exp["candidates"] if as_preemptor else mine,
            }
        )
    return {
        "workload": workload,
        "owners": final.get("owners", []),
        "status": final["status"],
        "actions": actions,
        "searches": searches,
    }


def explain(data: dict[str, Any], workload: str) -> str:
    """`explain_record`, for people."""
    record = explain_record(data, workload)
    lines = [f"Workload {workload}"]
    if record["owners"]:
        lines.append(f"  of {', '.join(record['owners'])}")
    status = record["status"]
    for condition in status.get("conditions", []):
        lines.append(
            f"  {condition['type']:<14} {condition['status']:<6} {condition.get('reason', '')}: {condition.get('message', '')}"
        )
    cq = (status.get("admission") or {}).get("clusterQueue")
    if cq:
        admitted = any(c["type"] == "Admitted" and c["status"] == "True" for c in status.get("conditions", []))
        lines.append(f"  {'admitted' if admitted else 'quota reserved'} in ClusterQueue {cq}")
    for check in status.get("admissionChecks") or []:
        text = f": {check['message']}" if check.get("message") else ""
        lines.append(f"  AdmissionCheck {check.get('name')} {check.get('state')}{text}")
    lines.append("")
    lines.append("What happened:")
    for action in record["actions"]:
        if action["action"] == "Preempted" and action["workload"] != workload:
            lines.append(f"  [{action['cycle']}] preempted {action['workload']} ({action['reason']})")
        elif action["action"] == "Preempted":
            lines.append(
                f"  [{action['cycle']}] preempted by {action['preemptor']} ({action['reason']}): {action['message']}"
            )
        elif action["action"] == "Admitted":
            lines.append(f"  [{action['cycle']}] admitted in {action['clusterQueue']}")
        elif action["action"] == "QuotaReserved":
            checks = ", ".join(action.get("admissionChecks") or [])
            lines.append(f"  [{action['cycle']}] quota reserved in {action['clusterQueue']}, waiting for {checks}")
        elif action["action"] == "CheckAnswered":
            lines.append(f"  [{action['cycle']}] AdmissionCheck {action['admissionCheck']} answered {action['state']}")
        elif action["action"] == "Requeued":
            lines.append(f"  [{action['cycle']}] back in its queue (its requeuing backoff is over)")
        else:
            line = f"  [{action['cycle']}] {action['action']} ({action.get('reason', '')}): {action.get('message', '')}"
            if action.get("underlyingCause"):
                line += f" [{action['underlyingCause']}]"
            if action.get("requeueAt"):
                line += f"; requeued no sooner than {action['requeueAt']}"
            lines.append(line)
    for search in record["searches"]:
        lines.append("")
        if search["role"] == "preemptor":
            lines.append(f"Cycle {search['cycle']}, as preemptor in {search['clusterQueue']}: {search['message']}")
            for note in search["notes"]:
                lines.append(f"  note: {note}")
        else:
            lines.append(f"Cycle {search['cycle']}, as a candidate for {search['preemptor']}:")
        for cand in search["candidates"]:
            source = f" [{cand['source']}]" if cand.get("source") else ""
            lines.append(f"  {cand['outcome']:<12} {cand['workload']}: {cand['detail']}{source}")
    return "\n".join(lines) + "\n"
