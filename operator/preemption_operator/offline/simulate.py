"""`preemption-operator simulate`: scheduling cycles over YAML, offline, until nothing changes.

An eviction releases the victim's quota at once (no job has to stop), so a preemptor is admitted
in the cycle after its victims were chosen. Every cycle uses the same `now`: the same input
gives the same output.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..api.meta import format_time
from ..api.v1beta2 import Workload
from ..engine import CycleResult, Engine, QueueState, changes
from ..engine import workload_status as wl_status
from ..engine.cache import Cache
from ..engine.fair_sharing import OFF, FairSharing
from ..engine.pods_ready import WaitForPodsReady
from ..engine.scheduler import Explanation
from ..engine.workload import WorkloadInfo


@dataclass
class Simulation:
    actions: list[dict[str, Any]] = field(default_factory=list)
    workloads: dict[str, Workload] = field(default_factory=dict)
    explanations: list[tuple[int, Explanation]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    cycles: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "actions": self.actions,
            "workloads": [
                {
                    "namespace": wl.metadata.namespace or "",
                    "name": wl.metadata.name,
                    "owners": _owners(wl),
                    "status": wl.status.to_wire() if wl.status is not None else {},
                }
                for _, wl in sorted(self.workloads.items())
            ],
            "explanations": [
                {
                    "cycle": cycle,
                    "preemptor": exp.preemptor,
                    "clusterQueue": exp.cluster_queue,
                    "message": exp.message,
                    "notes": exp.notes,
                    "candidates": [
                        {
                            "workload": rec.workload,
                            "clusterQueue": rec.cluster_queue,
                            "outcome": rec.outcome,
                            "detail": rec.detail,
                            **({"source": rec.source} if rec.source else {}),
                        }
                        for rec in exp.candidates
                    ],
                }
                for cycle, exp in self.explanations
            ],
            "warnings": self.warnings,
        }


def _with_status(info: WorkloadInfo, new_status: dict[str, Any], deactivate: bool = False) -> Workload:
    body = info.obj.model_dump(by_alias=True, exclude_unset=True, mode="json")
    body["status"] = new_status
    if deactivate:
        body.setdefault("spec", {})["active"] = False
    return Workload.model_validate(body)


PROGRESS_SECONDS = 2.0


def input_time(objects: list[Any]) -> datetime:
    """The default `--now`: the newest time the input names (creation and condition times), so
    that a scenario written at one moment is run at that moment, not months later; the current
    time for input that names none."""
    newest: datetime | None = None
    for obj in objects:
        meta = getattr(obj, "metadata", None)
        times = [getattr(meta, "creation_timestamp", None)]
        status = getattr(obj, "status", None)
        times += [getattr(c, "last_transition_time", None) for c in getattr(status, "conditions", None) or []]
        for moment in times:
            if isinstance(moment, datetime) and (newest is None or moment > newest):
                newest = moment
    return newest if newest is not None else datetime.now(UTC).replace(microsecond=0)


def _not_yet(objects: list[Any], now: datetime, sim: Simulation) -> list[Any]:
    """Workloads created after `now` do not exist yet at that time: they wait, with a warning."""
    kept = []
    for obj in objects:
        created = obj.metadata.creation_timestamp if isinstance(obj, Workload) else None
        if created is not None and created > now:
            sim.warnings.append(
                f"Workload {obj.metadata.namespace}/{obj.metadata.name} is created after --now "
                f"({format_time(created)} > {format_time(now)}): it waits"
            )
            continue
        kept.append(obj)
    return kept


def run(
    objects: list[Any],
    now: datetime,
    max_cycles: int = 100,
    arriving: list[Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
    fair_sharing: FairSharing = OFF,
    pods_ready: WaitForPodsReady | None = None,
) -> Simulation:
    """Cycles until nothing changes. `arriving` objects are added after that, and cycles run
    again: the running workloads first, then the ones that arrive (as the examples are applied to
    a cluster). A first phase that decided nothing is not reported. `progress` is told the cycle
    and the actions so far, every PROGRESS_SECONDS. `fair_sharing`: Kueue's fair-sharing switch;
    `pods_ready`: Kueue's waitForPodsReady (None: off)."""
    sim = Simulation()
    objects = _not_yet(objects, now, sim)
    arriving = _not_yet(arriving or [], now, sim)
    cache = Cache(fair_sharing, pods_ready)
    cache.load(objects)
    engine = Engine(complete=True)
    state = QueueState()
    last = _settle(cache, engine, state, sim, now, 1, max_cycles, progress)
    if arriving:
        if not sim.actions and not sim.explanations:
            last = 0
        for obj in arriving:
            cache.upsert(obj)
        _settle(cache, engine, state, sim, now, last + 1, max_cycles, progress)
    snapshot = cache.snapshot(now)
    for name, cq in sorted(snapshot.cluster_queues.items()):
        if not cq.active:
            sim.warnings.append(f"ClusterQueue {name} is inactive ({cq.inactive_reason}): {cq.inactive_message}")
        config = cq.preemption_config_name
        if config and config not in snapshot.preemption_configs:
            warning = f"ClusterQueue {name}: PreemptionConfig {config} not found; it gets no configurable preemption candidates"
            if warning not in sim.warnings:
                sim.warnings.append(warning)
    for key, info in cache.infos.items():
        sim.workloads[key] = info.obj
    return sim


def _settle(
    cache: Cache,
    engine: Engine,
    state: QueueState,
    sim: Simulation,
    now: datetime,
    first: int,
    max_cycles: int,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Cycles from number `first` until nothing changes; returns the last cycle's number."""
    cycle = first
    shown = time.monotonic()
    for cycle in range(first, first + max_cycles):
        if progress is not None and time.monotonic() - shown >= PROGRESS_SECONDS:
            shown = time.monotonic()
            progress(cycle, len(sim.actions))
        snapshot = cache.snapshot(now)
        parked_before = sum(len(keys) for keys in state.inadmissible.values())
        result = engine.cycle(snapshot, state)
        sim.cycles = cycle
        pending_changed = _apply(cache, sim, cycle, result, now)
        object_notices = [n.message for notices in cache.notices.values() for n in notices]
        object_notices += [n.message for n in cache.workload_notices()]
        for warning in [*object_notices, *result.warnings]:
            if warning not in sim.warnings:
                sim.warnings.append(warning)
        freed = {p.victim.cluster_queue or "" for p in result.preempted} | {
            e.workload.cluster_queue or "" for e in result.evicted
        }
        if freed:
            state.quota_released(snapshot, freed)
        parked_after = sum(len(keys) for keys in state.inadmissible.values())
        if not result.changed and not pending_changed and parked_after <= parked_before:
            return cycle
    sim.warnings.append(f"stopped after --max-cycles {max_cycles} cycles; the cluster had not settled")
    return cycle


def _apply(cache: Cache, sim: Simulation, cycle: int, result: CycleResult, now: datetime) -> bool:
    """Writes the cycle's status changes into the cache (as the operator writes them to the API);
    True when a pending reason changed."""
    for exp in result.explanations:
        sim.explanations.append((cycle, exp))
    pending_changed = False
    for change in changes.status_changes(result, now):
        info = cache.infos[change.key]
        new = change.compute(info.obj.to_wire())
        if new is None and change.deactivate and info.active:
            new = info.obj.status_view().get("status") or {}  # marked already: only the spec is left
        elif new is None:
            continue
        cache.upsert(_with_status(info, new, change.deactivate))
        if change.action == changes.RELEASED:
            continue  # an eviction already under way: no new action (see the explanation)
        record = {"cycle": cycle, **change.record}
        if change.action == changes.PREEMPTED:
            record["message"] = (wl_status.get_condition(new, "Preempted") or {}).get("message", "")
        sim.actions.append(record)
        pending_changed = pending_changed or change.action == changes.PENDING
    return pending_changed


def _owners(wl: Any) -> list[str]:
    """The objects a Workload belongs to, as `Kind name` (a Job's, a pod group's Pods)."""
    refs = (wl.metadata.model_extra or {}).get("ownerReferences")
    return [f"{ref.get('kind')} {ref.get('name')}" for ref in refs or [] if isinstance(ref, dict) and ref.get("kind")]
