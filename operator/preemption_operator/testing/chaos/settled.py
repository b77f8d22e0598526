"""I4: once the faults stop, the cluster settles: the engine, run offline on what the API server
holds, would admit or preempt nothing, and the queues' status counts match their Workloads."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ..workload_status import is_true, millis, reservation
from .api import ApiError, KubeClient, now_s
from .topology import Topology

VERBS = {"Admitted": "admit", "Preempted": "preempt"}


def settled_problems(client: KubeClient, topology: Topology) -> list[str]:
    """Why the run is not settled (empty when it is): what the engine, run offline for one cycle
    on the API server's objects, would still admit or preempt; queue status counts (and the cpu
    reserved) that do not match the Workloads."""
    from preemption_operator.api.objects import ObjectError, parse_object
    from preemption_operator.offline import simulate

    objects = topology.read(client)
    problems: list[str] = []
    parsed = []
    for obj in objects:
        try:
            parsed.append(parse_object(obj))
        except ObjectError as exc:
            problems.append(f"cannot parse {exc}")
    sim = simulate.run(parsed, datetime.now(UTC), max_cycles=1)
    for action in sim.actions:
        if action["action"] in ("Admitted", "Preempted"):
            extra = f" for {action['preemptor']}" if action.get("preemptor") else ""
            problems.append(
                f"the engine would still {VERBS[action['action']]} {action['workload']}{extra} ({action['clusterQueue']})"
            )
    return problems + status_problems(objects, topology.local_queue_target)


def status_problems(objects: list[dict[str, Any]], target: Callable[[str, str], str | None]) -> list[str]:
    """Queue status counts and cpu reserved that do not match the Workloads among `objects`;
    `target`: the ClusterQueue a LocalQueue (namespace, name) points to."""
    problems: list[str] = []
    workloads = [o for o in objects if o["kind"] == "Workload"]
    cq_pending: Counter[str] = Counter()
    cq_reserving: Counter[str] = Counter()
    cq_cpu: Counter[str] = Counter()
    cq_holders: dict[str, list[str]] = {}
    lq_pending: Counter[tuple[str, str]] = Counter()
    lq_reserving: Counter[tuple[str, str]] = Counter()
    for wl in workloads:
        if is_true(wl, "Finished") or wl.get("spec", {}).get("active") is False:
            continue
        ns, queue = wl["metadata"]["namespace"], wl["spec"].get("queueName", "")
        cq, used = reservation(wl)
        if cq:
            cq_reserving[cq] += 1
            cq_cpu[cq] += used
            cq_holders.setdefault(cq, []).append(_holding(wl, used))
            lq_reserving[(ns, queue)] += 1
        else:
            lq_pending[(ns, queue)] += 1
            pointed = target(ns, queue)
            if pointed:
                cq_pending[pointed] += 1
    for obj in objects:
        status = obj.get("status") or {}
        name = obj["metadata"]["name"]
        if obj["kind"] == "ClusterQueue":
            problems += _count_problems(f"ClusterQueue {name}", status, cq_pending[name], cq_reserving[name])
            reserved = sum(
                millis(r.get("total", "0"))
                for f in status.get("flavorsReservation") or []
                for r in f.get("resources") or []
                if r.get("name") == "cpu"
            )
            if reserved != cq_cpu[name]:
                # Which Workloads hold what, so that a failure seen once can be told apart later.
                holders = "; ".join(sorted(cq_holders.get(name, []))) or "none"
                problems.append(
                    f"ClusterQueue {name} flavorsReservation {reserved / 1000:g} cpu, Workloads hold {cq_cpu[name] / 1000:g}"
                    f" ({holders})"
                )
        elif obj["kind"] == "LocalQueue":
            key = (obj["metadata"]["namespace"], name)
            problems += _count_problems(f"LocalQueue {key[0]}/{name}", status, lq_pending[key], lq_reserving[key])
    return problems


def _holding(wl: dict[str, Any], used: int) -> str:
    """A Workload holding quota, for a failure message: its name, its cpu and what may explain a
    difference (pods given back, an eviction under way, a deletion)."""
    meta = wl["metadata"]
    notes = [f"{used / 1000:g} cpu"]
    reclaimable = (wl.get("status") or {}).get("reclaimablePods")
    if reclaimable:
        notes.append("reclaimable " + ",".join(f"{r.get('name')}={r.get('count')}" for r in reclaimable))
    if is_true(wl, "Evicted"):
        notes.append("evicted")
    if meta.get("deletionTimestamp"):
        notes.append("deleting")
    return f"{meta['namespace']}/{meta['name']} {' '.join(notes)}"


def _count_problems(queue: str, status: dict[str, Any], pending: int, reserving: int) -> list[str]:
    """A queue's status counts against those of the Workloads (admitted counts as reserving)."""
    want = {"pendingWorkloads": pending, "reservingWorkloads": reserving, "admittedWorkloads": reserving}
    got = {k: status.get(k, 0) for k in want}
    return [] if got == want else [f"{queue} status {got}, Workloads say {want}"]


def wait_settled(
    client: KubeClient, topology: Topology, timeout: float = 60.0, interval: float = 1.0
) -> tuple[float | None, list[str]]:
    """Polls settled_problems until it is empty: (seconds it took, []) or (None, the last problems)."""
    began = now_s()
    problems: list[str] = ["never checked"]
    while now_s() - began <= timeout:
        try:
            problems = settled_problems(client, topology)
        except ApiError as exc:
            problems = [f"cannot read the objects: {exc}"]
        if not problems:
            return now_s() - began, []
        time.sleep(interval)
    return None, problems
