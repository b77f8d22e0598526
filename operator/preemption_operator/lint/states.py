"""The states of a cohort tree that the flapping analysis asks the engine about: the quota each
queue holds (`Levels`; `fillings` lists the ones tried), the creation order and age of the loop's
workloads (`Timing`), the objects that make up one state (`Objects`), and what one scheduling
cycle over them decides (`evicts`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..api.meta import format_time
from ..api.objects import parse_object
from ..api.quantity import format_amount
from ..engine import Engine, QueueState, protection
from ..engine.cache import Cache
from ..engine.fair_sharing import OFF, FairSharing
from ..engine.quota import FlavorResource
from ..engine.workload import PRIORITY_BOOST_ANNOTATION
from .model import NOW, Setup, Shape

FILLER_OPT_OUT = {protection.ALLOW_PREEMPTION: "false"}
"""Fillers are last-resort victims, so the only victim a search needs is the workload under test."""


@dataclass(frozen=True)
class Timing:
    """Which workload of the loop is older, and whether the running ones have just started."""

    order: tuple[int, ...]
    """Creation order: indexes into the loop's workloads, oldest first."""
    fresh: bool


@dataclass(frozen=True)
class Levels:
    """Filler usage of each queue of the tree, by name (in the resource's integer amounts)."""

    fill: tuple[tuple[str, int], ...]
    donors_full: bool
    """The queues of the tree not under test are at nominal (else empty)."""


# -- objects for one state ------------------------------------------------------------------------


class Objects:
    """Builds (and reuses) the objects of the states the engine is asked about."""

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self._made: dict[Any, Any] = {}
        self.t0 = NOW - setup.long - timedelta(minutes=1)
        """The older workload of a pair is created then; the other a second later."""

    def workload(
        self, shape: Shape, name: str, fr: FlavorResource, amount: int, created: datetime, since: datetime | None
    ) -> Any:
        """A workload of the shape requesting `amount` of the contested resource; running (its
        quota reserved at `since`) or pending (since None)."""
        key = (shape, name, fr, amount, created, since)
        if key not in self._made:
            base = shape.kind.base
            meta: dict[str, Any] = {
                "name": name,
                "namespace": self.setup.namespace_of[shape.cluster_queue],
                "creationTimestamp": format_time(created),
            }
            if shape.labels:
                meta["labels"] = dict(shape.labels)
            if shape.priority != base:
                meta["annotations"] = {PRIORITY_BOOST_ANNOTATION: str(shape.priority - base)}
            spec: dict[str, Any] = {"queueName": f"lint-{shape.cluster_queue}", "podSets": [_pod_set(fr[1], amount)]}
            if shape.priority_class is not None:
                kind, klass = shape.priority_class
                group = "kueue.x-k8s.io" if kind == "WorkloadPriorityClass" else "scheduling.k8s.io"
                spec["priorityClassRef"] = {"group": group, "kind": kind, "name": klass}
                if kind == "PriorityClass":
                    spec["priority"] = base
            elif base:
                spec["priority"] = base
            body: dict[str, Any] = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": meta}
            body["spec"] = spec
            if since is not None:
                body["status"] = _admitted(shape.cluster_queue, fr, amount, since)
            self._made[key] = parse_object(body)
        return self._made[key]

    def filler(self, cq: str, fr: FlavorResource, amount: int) -> Any:
        """Quota held by a workload that is no one's preferred victim (opted out, top priority)."""
        key = ("filler", cq, fr, amount)
        if key not in self._made:
            since = self.t0 - timedelta(minutes=1)
            body = {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Workload",
                "metadata": {
                    "name": f"filler-{cq}",
                    "namespace": self.setup.namespace_of[cq],
                    "creationTimestamp": format_time(since),
                    "annotations": dict(FILLER_OPT_OUT),
                },
                "spec": {
                    "queueName": f"lint-{cq}",
                    "priority": 2**31 - 1,
                    "podSets": [_pod_set(fr[1], amount)],
                },
                "status": _admitted(cq, fr, amount, since),
            }
            self._made[key] = parse_object(body)
        return self._made[key]

    def fillers(self, fr: FlavorResource, levels: Levels) -> list[Any]:
        return [self.filler(cq, fr, amount) for cq, amount in levels.fill if amount > 0]

    def state(self, queue: str, fr: FlavorResource, levels: Levels, workloads: list[Any]) -> list[Any]:
        """The objects of one state of `queue`'s cohort tree: the other trees hold no workload,
        so nothing of theirs can decide here, and leaving them out keeps a large setup's checks
        as cheap as a small one's."""
        return [*self.setup.tree(queue), *self.fillers(fr, levels), *workloads]


def _pod_set(resource: str, amount: int) -> dict[str, Any]:
    requests = {"requests": {resource: format_amount(resource, amount)}}
    container: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": requests}
    return {"name": "main", "count": 1, "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}


def _admitted(cq: str, fr: FlavorResource, amount: int, since: datetime) -> dict[str, Any]:
    at = format_time(since)
    usage = {fr[1]: format_amount(fr[1], amount)}
    return {
        "conditions": [
            {
                "type": "QuotaReserved",
                "status": "True",
                "reason": "QuotaReserved",
                "message": f"Quota reserved in ClusterQueue {cq}",
                "lastTransitionTime": at,
            },
            {
                "type": "Admitted",
                "status": "True",
                "reason": "Admitted",
                "message": "The workload is admitted",
                "lastTransitionTime": at,
            },
        ],
        "admission": {
            "clusterQueue": cq,
            "podSetAssignments": [{"name": "main", "flavors": {fr[1]: fr[0]}, "resourceUsage": usage, "count": 1}],
        },
    }


def evicts(
    objects: list[Any], preemptor: str, victim: str, fr: FlavorResource, fair_sharing: FairSharing = OFF
) -> str | None:
    """One scheduling cycle over the objects: why the preemptor evicts the victim, or None (also
    when the state is one the scheduler never makes: a queue or cohort over its limits)."""
    cache = Cache(fair_sharing)
    cache.load(objects)
    snapshot = cache.snapshot(NOW)
    for cq in snapshot.cluster_queues.values():
        if cq.node._available(fr) < 0:
            return None
    result = Engine().cycle(snapshot, QueueState())
    for preemption in result.preempted:
        if preemption.victim.key == victim and preemption.preemptor.key == preemptor:
            target = preemption.target
            if target.rule is not None:
                return f"{target.reason}, PreemptionConfig {target.rule.config} rule {target.rule.describe()}"
            return target.reason
    return None


# -- quota states ----------------------------------------------------------------------------------


def _available(objects: Objects, cq: str, fr: FlavorResource, fill: dict[str, int]) -> int | None:
    """What `cq` could still take with the fillers in place; None if they do not fit."""
    cache = Cache()
    cache.load(objects.state(cq, fr, Levels(tuple(sorted(fill.items())), True), []))
    snapshot = cache.snapshot(NOW)
    if any(snapshot.cluster_queues[name].node._available(fr) < 0 for name in fill):
        return None
    return snapshot.cluster_queues[cq].node.available(fr)


def fillings(
    setup: Setup, objects: Objects, queues: list[str], fr: FlavorResource, unit: int, running: int
) -> list[Levels]:
    """Fillings of the tree in which `running` units of the queues under test plus one pending
    unit do not fit: each queue under test but one at its edges, the last taking the rest."""
    root = setup.queues[queues[0]].node.root()
    others = sorted(
        n.name
        for n in root.subtree_cluster_queues()
        if n.name not in queues and n.name in setup.namespace_of and n.nominal(fr) > 0
    )
    found: list[Levels] = []
    for donors_full in (True, False):
        donors = {cq: setup.queues[cq].node.nominal(fr) if donors_full else 0 for cq in others}
        for last in queues:
            rest = [q for q in queues if q != last]
            edges = [
                sorted({v for v in (0, n - unit, n, n + unit) if v >= 0})
                for n in (setup.queues[q].node.nominal(fr) for q in rest)
            ]
            for levels in itertools.product(*edges):
                fill = {**donors, **dict(zip(rest, levels, strict=True))}
                avail = _available(objects, last, fr, fill)
                if avail is None or avail < running * unit:
                    continue
                fill[last] = avail - running * unit
                state = Levels(tuple(sorted(fill.items())), donors_full)
                if state not in found:
                    found.append(state)
    return found
