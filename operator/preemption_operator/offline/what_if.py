"""`what-if`: what would become of a job if it were submitted now, without submitting it.

The engine runs on the cluster's state plus the new job's Workload, as `simulate` runs: the
running workloads settle first, then the new one arrives (created now, so it queues behind the
equals already waiting). If it is admitted: on which flavors and topology domains, and whom it
preempts under which rule. If it waits: why, how many workloads are ahead of it, and, where the
running workloads say how long they run at most (Kueue's spec.maximumExecutionTimeSeconds, from
the job's kueue.x-k8s.io/max-exec-time-seconds label), when: the clock is moved to each such end
in turn, that workload finished, and the cycles run again, until it is admitted."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from ..api.meta import format_time
from ..api.v1beta2 import Workload
from ..engine import execution_time, positions
from ..engine.cache import Cache
from ..engine.topology_assignment import decode_assignment
from ..engine.workload import is_true
from . import simulate

MAX_STEPS = 50
"""Ends of running workloads the estimate moves through at most."""


@dataclass
class Victim:
    workload: str
    cluster_queue: str
    reason: str
    rule: str
    message: str


@dataclass
class Prediction:
    workload: str
    """namespace/name of the Workload the job would get."""
    owners: list[str]
    cluster_queue: str
    admitted: bool
    """Admitted now (False: it waits, or is admitted only at `at`)."""
    at: str | None = None
    """When it would be admitted: now, or the estimate (RFC 3339); None: not known."""
    flavors: dict[str, dict[str, str]] = field(default_factory=dict)
    """Pod set -> resource -> flavor."""
    topology: dict[str, list[str]] = field(default_factory=dict)
    """Pod set -> its domains ("rack=r1, block=b1: 2 pods")."""
    preempts: list[Victim] = field(default_factory=list)
    reason: str = ""
    message: str = ""
    """Why it waits (Kueue's pending reason and message)."""
    ahead: int | None = None
    """Pending workloads ahead of it in its ClusterQueue (while it waits)."""
    after: list[str] = field(default_factory=list)
    """The running workloads whose ends the estimate waited for."""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _is_admitted(wl: Workload) -> bool:
    return wl.status is not None and wl.status.admission is not None and is_true(wl, "QuotaReserved")


def _placement(wl: Workload) -> tuple[dict[str, dict[str, str]], dict[str, list[str]]]:
    admission = (wl.status.to_wire() if wl.status is not None else {}).get("admission") or {}
    flavors: dict[str, dict[str, str]] = {}
    topology: dict[str, list[str]] = {}
    for assignment in admission.get("podSetAssignments") or []:
        name = str(assignment.get("name") or "")
        flavors[name] = {str(r): str(f) for r, f in (assignment.get("flavors") or {}).items()}
        if assignment.get("topologyAssignment"):
            topology[name] = [
                ", ".join(f"{level}={value}" for level, value in domain.items()) + f": {pods} pod(s)"
                for domain, pods in decode_assignment(assignment["topologyAssignment"])
            ]
    return flavors, topology


def _end(wl: Workload) -> datetime | None:
    """When a running workload ends at the latest: when its maximum execution time runs out."""
    return None if is_true(wl, "Finished") else execution_time.deadline(wl, reservation=True)


def _finished(wl: Workload, at: datetime) -> Workload:
    body = simulate.unversioned(wl.model_dump(by_alias=True, exclude_unset=True, mode="json"))
    conditions = body.setdefault("status", {}).setdefault("conditions", [])
    conditions.append(
        {
            "type": "Finished",
            "status": "True",
            "reason": "Succeeded",
            "message": "what-if: its maximum execution time ran out",
            "lastTransitionTime": format_time(at),
        }
    )
    return Workload.model_validate(body)


def _new_keys(arriving: list[Any]) -> list[str]:
    return [f"{o.metadata.namespace}/{o.metadata.name}" for o in arriving if isinstance(o, Workload)]


def predict(objects: list[Any], arriving: list[Any], now: datetime, max_cycles: int = 100) -> list[Prediction]:
    """What becomes of each Workload of `arriving` (a job's, made by manifests.parse) when added to
    the state `objects` at `now`."""
    keys = _new_keys(arriving)
    sim = simulate.run(objects, now, max_cycles=max_cycles, arriving=arriving)
    predictions = []
    for key in keys:
        wl = sim.workloads[key]
        prediction = Prediction(workload=key, owners=simulate.owners(wl), cluster_queue="", admitted=_is_admitted(wl))
        _collect(prediction, sim)
        if prediction.admitted:
            prediction.at = format_time(now)
            prediction.flavors, prediction.topology = _placement(wl)
            admission = (wl.status.to_wire() if wl.status is not None else {}).get("admission") or {}
            prediction.cluster_queue = str(admission.get("clusterQueue") or prediction.cluster_queue)
        else:
            _waiting(prediction, sim, objects, arriving, now, max_cycles)
        predictions.append(prediction)
    return predictions


def _collect(prediction: Prediction, sim: simulate.Simulation) -> None:
    """Its ClusterQueue and the victims it chose, from a run's actions."""
    key = prediction.workload
    for action in sim.actions:
        if action.get("workload") == key and action.get("clusterQueue"):
            prediction.cluster_queue = str(action["clusterQueue"])
        if action.get("preemptor") == key and action.get("action") == "Preempted":
            prediction.preempts.append(
                Victim(
                    str(action["workload"]),
                    str(action.get("clusterQueue") or ""),
                    str(action.get("reason") or ""),
                    _rule(sim, key, str(action["workload"])),
                    str(action.get("message") or ""),
                )
            )


def _rule(sim: simulate.Simulation, preemptor: str, victim: str) -> str:
    """The rule the victim was chosen under, as the explanation names its source."""
    for _, explanation in reversed(sim.explanations):
        if explanation.preemptor != preemptor:
            continue
        for record in explanation.candidates:
            if record.workload == victim and record.outcome == "chosen":
                return record.source
    return ""


def _waiting(
    prediction: Prediction,
    sim: simulate.Simulation,
    objects: list[Any],
    arriving: list[Any],
    now: datetime,
    max_cycles: int,
) -> None:
    key = prediction.workload
    last = next((a for a in reversed(sim.actions) if a.get("workload") == key and a["action"] == "Pending"), None)
    if last is not None:
        prediction.reason, prediction.message = str(last.get("reason") or ""), str(last.get("message") or "")
    state = [o for o in objects if not isinstance(o, Workload)] + list(sim.workloads.values())
    cache = Cache()
    cache.load(state)
    info = cache.infos.get(key)
    if info is None or not prediction.cluster_queue:
        prediction.notes.append("it reaches no ClusterQueue: it is never admitted as the cluster stands")
        return
    ordered = cache.pending_in(prediction.cluster_queue) or []
    place = next((p for p in positions.in_cluster_queue(ordered, positions.MAX_LIMIT) if p.info.key == key), None)
    prediction.ahead = place.in_cluster_queue if place is not None else None
    # The estimate: move to the next end a running workload states, finish it, decide again.
    moment = now
    for _ in range(MAX_STEPS):
        ends = sorted((end, wl_key) for wl_key, wl in sim.workloads.items() if (end := _end(wl)) is not None)
        if not ends:
            break
        moment = max(moment, ends[0][0])
        ending = [wl_key for end, wl_key in ends if end <= moment]
        prediction.after += ending
        state = [o for o in objects if not isinstance(o, Workload)] + [
            _finished(wl, moment) if wl_key in ending else wl for wl_key, wl in sim.workloads.items()
        ]
        sim = simulate.run(state, moment, max_cycles=max_cycles)
        wl = sim.workloads[key]
        if _is_admitted(wl):
            _collect(prediction, sim)
            prediction.at = format_time(moment)
            prediction.flavors, prediction.topology = _placement(wl)
            prediction.notes.append(
                "estimated from the maximumExecutionTimeSeconds of the running workloads: the latest they end"
            )
            return
    known = "no running workload states how long it runs" if not prediction.after else "the ends the workloads state"
    prediction.notes.append(
        f"admission time not known ({known}): it is admitted after the {prediction.ahead or 0} pending "
        "workload(s) ahead of it and once enough quota is free"
    )


def _when(at: str, now: datetime) -> str:
    moment = datetime.fromisoformat(at.replace("Z", "+00:00"))
    seconds = int((moment - now).total_seconds())
    if seconds <= 0:
        return "now"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    span = " ".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n)
    return f"at {at} (in {span})"


def describe(prediction: Prediction, now: datetime) -> str:
    """The prediction for people."""
    who = prediction.workload + (f" ({', '.join(prediction.owners)})" if prediction.owners else "")
    lines = [f"{who}, ClusterQueue {prediction.cluster_queue or '(none)'}:"]
    if prediction.at is not None:
        lines.append(f"  admitted {_when(prediction.at, now)}")
        for pod_set, flavors in prediction.flavors.items():
            shown = ", ".join(f"{resource} on {flavor}" for resource, flavor in sorted(flavors.items()))
            lines.append(f"  pod set {pod_set}: {shown}")
            for domain in prediction.topology.get(pod_set, []):
                lines.append(f"    topology {domain}")
    else:
        lines.append("  not admitted")
    if prediction.reason and not prediction.admitted:
        lines.append(f"  waits now: {prediction.reason}: {prediction.message}")
    if prediction.ahead is not None and not prediction.admitted:
        lines.append(f"  {prediction.ahead} pending workload(s) ahead of it in ClusterQueue {prediction.cluster_queue}")
    if prediction.after:
        lines.append(f"  after these end: {', '.join(prediction.after)}")
    for victim in prediction.preempts:
        rule = f" under {victim.rule}" if victim.rule else ""
        lines.append(f"  preempts {victim.workload} (ClusterQueue {victim.cluster_queue}): {victim.reason}{rule}")
    lines += [f"  note: {note}" for note in prediction.notes]
    return "\n".join(lines) + "\n"
