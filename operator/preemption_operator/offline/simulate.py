"""`preemption-operator simulate`: scheduling cycles over YAML, offline, until nothing changes.

An eviction releases the victim's quota at once (no job has to stop), so a preemptor is admitted
in the cycle after its victims were chosen. Every cycle uses the same `now`: the same input
gives the same output.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..api.meta import format_time
from ..api.v1beta2 import AdmissionCheck, Workload
from ..engine import CycleResult, Engine, QueueState, admission_checks, changes
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
                    "owners": owners(wl),
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


def unversioned(body: dict[str, Any]) -> dict[str, Any]:
    """A changed object as the simulation stores it: without the resourceVersion it was read
    with (from a cluster), which would make the cache take it for the version it already holds."""
    (body.get("metadata") or {}).pop("resourceVersion", None)
    return body


def _with_status(info: WorkloadInfo, new_status: dict[str, Any], deactivate: bool = False) -> Workload:
    body = unversioned(info.obj.model_dump(by_alias=True, exclude_unset=True, mode="json"))
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
    check_states: Mapping[str, str] | None = None,
    prioritize_preemptors: bool = True,
) -> Simulation:
    """Cycles until nothing changes. `arriving` objects are added after that, and cycles run
    again: the running workloads first, then the ones that arrive (as the examples are applied to
    a cluster). A first phase that decided nothing is not reported. `progress` is told the cycle
    and the actions so far, every PROGRESS_SECONDS. `fair_sharing`: Kueue's fair-sharing switch;
    `pods_ready`: Kueue's waitForPodsReady (None: off). `check_states`: the state each named
    AdmissionCheck answers, once per workload, when it is Pending for a workload holding quota (as
    its controller would); unnamed checks stay as the input has them. `prioritize_preemptors`:
    Kueue's PrioritizePreemptorWorkloads gate (on unless the Configuration sets it false)."""
    sim = Simulation()
    objects = _active_checks(_not_yet(objects, now, sim), now, sim)
    arriving = _active_checks(_not_yet(arriving or [], now, sim), now, sim)
    cache = Cache(fair_sharing, pods_ready, prioritize_preemptors=prioritize_preemptors)
    cache.load(objects)
    engine = Engine(complete=True)
    state = QueueState()
    answer = _Answers(dict(check_states or {}), now)
    last = _settle(cache, engine, state, sim, now, 1, max_cycles, progress, answer)
    if arriving:
        if not sim.actions and not sim.explanations:
            last = 0
        for obj in arriving:
            cache.upsert(obj)
        _settle(cache, engine, state, sim, now, last + 1, max_cycles, progress, answer)
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
    answer: _Answers | None = None,
) -> int:
    """Cycles from number `first` until nothing changes; returns the last cycle's number."""
    cycle = first
    shown = time.monotonic()
    for cycle in range(first, first + max_cycles):
        if progress is not None and time.monotonic() - shown >= PROGRESS_SECONDS:
            shown = time.monotonic()
            progress(cycle, len(sim.actions))
        answered = answer(cache, sim, cycle) if answer is not None else False
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
        if not result.changed and not pending_changed and not answered and parked_after <= parked_before:
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


def _active_checks(objects: list[Any], now: datetime, sim: Simulation) -> list[Any]:
    """AdmissionChecks as manifests have them (no status) are taken as Active, as their controllers
    would set them on a cluster; one whose status says otherwise is kept as it is."""
    out = []
    for obj in objects:
        if isinstance(obj, AdmissionCheck) and not any(
            c.type == admission_checks.ACTIVE for c in (obj.status.conditions if obj.status else None) or []
        ):
            body = obj.model_dump(by_alias=True, exclude_unset=True, mode="json")
            active = {"type": admission_checks.ACTIVE, "status": "True", "reason": "Active", "message": ""}
            body["status"] = {"conditions": [{**active, "lastTransitionTime": format_time(now)}]}
            obj = AdmissionCheck.model_validate(body)
            sim.warnings.append(
                f"AdmissionCheck {obj.metadata.name} has no Active condition: taken as active (its controller sets it)"
            )
        out.append(obj)
    return out


@dataclass
class _Answers:
    """The check controllers of a what-if run: each named check answers its state once for each
    workload that holds quota and waits for it."""

    states: dict[str, str]
    now: datetime
    given: set[tuple[str, str]] = field(default_factory=set)

    def __call__(self, cache: Cache, sim: Simulation, cycle: int) -> bool:
        if not self.states:
            return False
        answered = False
        for key, info in sorted(cache.infos.items()):
            if info.cluster_queue is None or info.finished:
                continue
            body = info.obj.to_wire()
            changed = False
            for check in (body.get("status") or {}).get("admissionChecks") or []:
                name = check.get("name")
                state = self.states.get(name)
                if state is None or check.get("state") != admission_checks.PENDING or (key, name) in self.given:
                    continue
                self.given.add((key, name))
                check.update(state=state, lastTransitionTime=format_time(self.now), message="--check-state")
                sim.actions.append(
                    {"cycle": cycle, "action": "CheckAnswered", "workload": key, "admissionCheck": name, "state": state}
                )
                changed = answered = True
            if changed:
                cache.upsert(Workload.model_validate(unversioned(body)))
        return answered


def owners(wl: Any) -> list[str]:
    """The objects a Workload belongs to, as `Kind name` (a Job's, a pod group's Pods)."""
    refs = (wl.metadata.model_extra or {}).get("ownerReferences")
    return [f"{ref.get('kind')} {ref.get('name')}" for ref in refs or [] if isinstance(ref, dict) and ref.get("kind")]
