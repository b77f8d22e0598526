"""Issue 24, item 4: the job seam is keyed by the Workload, so a job may be several objects (as a
pod group is). A tiny integration, registered only here, makes a job of every pair of objects
that share a label: the job controller makes one Workload for the pair, starts both objects when
it is admitted, and keeps the Workload while any object of the pair is left; `simulate` reads the
pair as that one Workload too."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import pytest

from preemption_operator.api import kinds
from preemption_operator.api.kinds import Kind
from preemption_operator.controller.feeder import CacheFeeder
from preemption_operator.controller.jobs import JobController
from preemption_operator.engine.cache import Cache
from preemption_operator.jobs.batch_job import INTEGRATION
from preemption_operator.jobs.framework import (
    INTEGRATIONS,
    QUEUE_LABEL,
    Finished,
    GenericJob,
    Integration,
    JobPatch,
    PodSetInfo,
)
from preemption_operator.jobs.reconciler import CreateWorkload, PatchJob
from preemption_operator.k8s.writer import StatusWriter
from preemption_operator.offline import manifests
from preemption_operator.offline.manifests import Manifest
from unit import fake_api
from unit.fake_api import FakeApi
from unit.test_job_controller import Events, Waker, condition

NS = "research"
HALF = Kind("Half", "example.com", "v1", "halves", True)
PAIR_LABEL = "example.com/pair"
TEMPLATE = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}


class Pair:
    """Halves that share a pair label are one job, one pod each; its Workload is named after the
    pair. The first half stands for the job."""

    kind: ClassVar[Kind] = HALF

    def __init__(self, obj: Mapping[str, Any], others: Sequence[Mapping[str, Any]] = ()) -> None:
        self.obj = obj
        self.halves = [obj, *others]

    @classmethod
    def of(cls, objects: Sequence[Mapping[str, Any]]) -> GenericJob:
        return cls(objects[0], objects[1:])

    def workload_name(self) -> str:
        return f"pair-{self.obj['metadata']['labels'][PAIR_LABEL]}"

    def queue_name(self) -> str:
        return str(self.obj["metadata"]["labels"].get(QUEUE_LABEL) or "")

    def pod_sets(self) -> list[dict[str, Any]]:
        return [{"name": "main", "count": len(self.halves), "template": copy.deepcopy(TEMPLATE)}]

    def equivalent(self, pod_sets: list[dict[str, Any]], admitted: bool) -> bool:
        return [ps.get("count") for ps in pod_sets] == [len(self.halves)]

    def priority_class_name(self) -> str:
        return ""

    def is_suspended(self) -> bool:
        return all(half["spec"]["suspend"] for half in self.halves)

    def is_active(self) -> bool:
        return not self.is_suspended()

    def finished(self) -> Finished | None:
        return None

    def stopping(self) -> bool:
        return False

    def run(self, infos: list[PodSetInfo]) -> list[JobPatch]:
        spec = {"suspend": False, "nodeSelector": dict(infos[0].node_selector)}
        return [JobPatch({"spec": spec}, name=half["metadata"]["name"]) for half in self.halves]

    def stop(self, originals: list[PodSetInfo]) -> list[JobPatch]:
        spec = {"suspend": True, "nodeSelector": None}
        return [JobPatch({"spec": spec}, name=half["metadata"]["name"]) for half in self.halves]


def claims(workload: Mapping[str, Any]) -> str | None:
    """A pair's Workload is the one named after it and owned by one of its halves."""
    refs = workload["metadata"].get("ownerReferences") or []
    return str(workload["metadata"]["name"]) if any(ref["kind"] == "Half" for ref in refs) else None


PAIRS = Integration(
    "example.com/pair", Pair, mutate=lambda obj: [], validate=lambda obj, old: [], compose=Pair.of, claims=claims
)


def half(name: str, pair: str) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Half",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "labels": {QUEUE_LABEL: NS, PAIR_LABEL: pair},
        },
        "spec": {"suspend": True},
    }


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(INTEGRATIONS, PAIRS.framework, PAIRS)
    monkeypatch.setitem(fake_api.KINDS, HALF.name, HALF)


def stored(api: FakeApi, name: str) -> dict[str, Any]:
    return api.objects[HALF.path(name, NS)]


async def test_two_objects_reconcile_into_one_workload_and_start_together() -> None:
    api, cache, events = FakeApi(), Cache(), Events()
    feeder = CacheFeeder(cache, Waker())
    controller = JobController(
        api, cache, feeder, StatusWriter(api), events, lambda: True, integrations=[INTEGRATION, PAIRS]
    )  # type: ignore[arg-type]
    flavor = {"apiVersion": kinds.Workload.api_version, "kind": "ResourceFlavor", "metadata": {"name": "pool"}}
    feeder.replace(kinds.ResourceFlavor, [{**flavor, "spec": {"nodeLabels": {"pool": "batch"}}}], "1")
    halves = [api.put(half("a", "duo")), api.put(half("b", "duo")), api.put(half("c", "solo"))]
    controller.replace(HALF, copy.deepcopy(halves), "1")
    duo = controller.key_of(HALF, halves[0])
    assert controller.key_of(HALF, halves[1]) == duo != controller.key_of(HALF, halves[2])
    assert (duo.kind, duo.namespace, duo.name) == ("Half", NS, "pair-duo")

    step = await controller.reconcile(duo)
    assert isinstance(step, CreateWorkload)
    workload = api.objects[kinds.Workload.path("pair-duo", NS)]
    assert workload["spec"]["podSets"][0]["count"] == 2  # one pod set made of both objects
    assert await controller.reconcile(duo) is None  # it is the pair's Workload: not made again
    assert api.count("POST", "*/workloads") == 1

    admitted = copy.deepcopy(workload)
    admitted["status"] = {
        "admission": {
            "clusterQueue": NS,
            "podSetAssignments": [{"name": "main", "count": 2, "flavors": {"cpu": "pool"}}],
        },
        "conditions": [condition("QuotaReserved"), condition("Admitted")],
    }
    admitted = api.put(admitted)
    feeder.ingest("Workload", copy.deepcopy(admitted))
    controller.event(kinds.Workload, "MODIFIED", copy.deepcopy(admitted))
    step = await controller.reconcile(duo)
    assert isinstance(step, PatchJob) and [patch.name for patch in step.patches] == ["a", "b"]
    for name in ("a", "b"):
        assert stored(api, name)["spec"] == {"suspend": False, "nodeSelector": {"pool": "batch"}}
    assert stored(api, "c")["spec"]["suspend"] is True  # another pair: its own job, not admitted
    # Told once each, on the object that stands for the job.
    assert events.seen == [
        ("Half/a", "CreatedWorkload", f"Created Workload: {NS}/pair-duo"),
        ("Half/a", "Started", f"Admitted by clusterQueue {NS}"),
    ]


async def test_the_workload_stays_while_any_object_of_its_job_is_left() -> None:
    api, cache = FakeApi(), Cache()
    feeder = CacheFeeder(cache, Waker())
    controller = JobController(api, cache, feeder, StatusWriter(api), Events(), lambda: True, integrations=[PAIRS])  # type: ignore[arg-type]
    a, b = api.put(half("a", "duo")), api.put(half("b", "duo"))
    controller.replace(HALF, [copy.deepcopy(a), copy.deepcopy(b)], "1")
    await controller.reconcile(controller.key_of(HALF, a))
    path = kinds.Workload.path("pair-duo", NS)
    assert path in api.objects

    # Its controller owner goes first: the other half still has the Workload.
    api.remove("Half", "a", NS)
    controller.event(HALF, "DELETED", a)
    await controller._delete_orphans()
    assert path in api.objects

    api.remove("Half", "b", NS)
    controller.event(HALF, "DELETED", b)
    await controller._delete_orphans()
    assert path not in api.objects


def test_simulate_reads_the_objects_of_a_job_as_its_one_workload() -> None:
    halves = [half("a", "duo"), half("c", "solo"), half("b", "duo")]
    workloads = manifests.parse([Manifest("pairs.yaml", body) for body in halves])
    assert [(w.metadata.name, w.spec.pod_sets[0].count) for w in workloads] == [("pair-duo", 2), ("pair-solo", 1)]
