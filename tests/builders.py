"""Kueue-style builders of Kubernetes objects in wire form (camelCase dicts), and runners.

Conventions follow the reference's acceptance scenarios (§9): one flavor `default`, resource
`cpu`, UIDs equal names (so the UID tie-break is alphabetical), every admitted workload reserved
quota at `T0` unless stated, workloads live in namespace `default`, and every ClusterQueue gets a
LocalQueue of the same name (`scenario` adds them), which is the default queue of a workload
admitted there.

    objects = scenario(
        [cluster_queue("standalone", 6, within="LowerPriority")],
        workload("low", priority=-1, cpu=2).admitted("standalone"),
        workload("in", queue="standalone", priority=1, cpu=2),
    )
    result = one_cycle(objects)          # the engine's CycleResult for one scheduling cycle
    outcome = simulate(objects)          # simulate.run until settled: victims, reasons, statuses
"""

from __future__ import annotations

import copy
import json
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from preemption_operator.api.objects import parse_object
from preemption_operator.engine.cache import Cache
from preemption_operator.engine.configurable import ConfigurablePreemption
from preemption_operator.engine.scheduler import CycleResult, QueueState, Scheduler
from preemption_operator.engine.snapshot import Snapshot
from preemption_operator.simulate import Simulation, run

KUEUE = "kueue.x-k8s.io/v1beta2"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
BOOST_ANNOTATION = "kueue.x-k8s.io/priority-boost"
NAMESPACE = "default"

T0 = datetime(2026, 1, 1, 10, 0, 0, tzinfo=UTC)
"""Creation and quota-reservation time of every object unless stated."""
NOW = datetime(2026, 11, 30, tzinfo=UTC)
"""The time cycles run at."""

Obj = dict[str, Any]
Quota = Mapping[str, Any]


def rfc3339(moment: datetime | str) -> str:
    if isinstance(moment, str):
        return moment
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def seconds(n: float) -> timedelta:
    return timedelta(seconds=n)


def _meta(
    name: str,
    namespace: str | None = None,
    *,
    uid: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    created: datetime | str = T0,
) -> Obj:
    meta: Obj = {"name": name, "uid": uid or name, "creationTimestamp": rfc3339(created)}
    if namespace is not None:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


# -- cluster objects --------------------------------------------------------------------------------


def namespace(name: str = NAMESPACE, labels: Mapping[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": _meta(name, labels={"kubernetes.io/metadata.name": name, **(labels or {})}),
    }


def resource_flavor(name: str = "default") -> Obj:
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": _meta(name), "spec": {}}


def quota(nominal: int | str, borrowing_limit: int | str | None = None, lending_limit: int | str | None = None) -> Obj:
    """One flavor's cpu quota: `{"nominal": .., "borrowingLimit": .., "lendingLimit": ..}`."""
    return {"nominal": nominal, "borrowingLimit": borrowing_limit, "lendingLimit": lending_limit}


def _resource_groups(cpu: int | str | Quota | Mapping[str, Quota] | None) -> list[Obj]:
    """`cpu` is a nominal quota of flavor `default`, a `quota(...)`, or {flavor: quota(...)}."""
    if cpu is None:
        return []
    if isinstance(cpu, int | str):
        per_flavor: dict[str, Quota] = {"default": quota(cpu)}
    elif "nominal" in cpu:
        per_flavor = {"default": cpu}
    else:
        per_flavor = dict(cpu)
    flavors = []
    for flavor, q in per_flavor.items():
        resource: Obj = {"name": "cpu", "nominalQuota": str(q["nominal"])}
        if q.get("borrowingLimit") is not None:
            resource["borrowingLimit"] = str(q["borrowingLimit"])
        if q.get("lendingLimit") is not None:
            resource["lendingLimit"] = str(q["lendingLimit"])
        flavors.append({"name": flavor, "resources": [resource]})
    return [{"coveredResources": ["cpu"], "flavors": flavors}]


def cluster_queue(
    name: str,
    cpu: int | str | Quota | Mapping[str, Quota] = 0,
    *,
    cohort: str | None = None,
    borrowing_limit: int | str | None = None,
    lending_limit: int | str | None = None,
    within: str | None = None,
    reclaim: str | None = None,
    borrow_within: str | None = None,
    max_priority_threshold: int | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    queueing_strategy: str | None = None,
) -> Obj:
    """A ClusterQueue admitting from every namespace (`namespaceSelector: {}`).

    `cpu` as in `_resource_groups`; `borrowing_limit`/`lending_limit` apply to a plain nominal.
    `within`/`reclaim`/`borrow_within` are spec.preemption's withinClusterQueue,
    reclaimWithinCohort and borrowWithinCohort.policy (unset = the CRD default `Never`)."""
    if isinstance(cpu, int | str) and (borrowing_limit is not None or lending_limit is not None):
        cpu = quota(cpu, borrowing_limit, lending_limit)
    spec: Obj = {"namespaceSelector": {}, "resourceGroups": _resource_groups(cpu)}
    if cohort:
        spec["cohortName"] = cohort
    preemption: Obj = {}
    if within is not None:
        preemption["withinClusterQueue"] = within
    if reclaim is not None:
        preemption["reclaimWithinCohort"] = reclaim
    if borrow_within is not None:
        borrow: Obj = {"policy": borrow_within}
        if max_priority_threshold is not None:
            borrow["maxPriorityThreshold"] = max_priority_threshold
        preemption["borrowWithinCohort"] = borrow
    if preemption:
        spec["preemption"] = preemption
    if queueing_strategy is not None:
        spec["queueingStrategy"] = queueing_strategy
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": _meta(name, labels=labels, annotations=annotations),
        "spec": spec,
    }


def cohort(
    name: str,
    parent: str | None = None,
    cpu: int | str | Quota | Mapping[str, Quota] | None = None,
    *,
    borrowing_limit: int | str | None = None,
    lending_limit: int | str | None = None,
) -> Obj:
    """A Cohort; `parent` is spec.parentName, `cpu` its own (shared) quota as for cluster_queue."""
    if isinstance(cpu, int | str) and (borrowing_limit is not None or lending_limit is not None):
        cpu = quota(cpu, borrowing_limit, lending_limit)
    spec: Obj = {}
    if parent:
        spec["parentName"] = parent
    groups = _resource_groups(cpu)
    if groups:
        spec["resourceGroups"] = groups
    return {"apiVersion": KUEUE, "kind": "Cohort", "metadata": _meta(name), "spec": spec}


def local_queue(name: str, cluster_queue: str | None = None, namespace: str = NAMESPACE) -> Obj:
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": _meta(name, namespace, uid=f"lq-{namespace}-{name}"),
        "spec": {"clusterQueue": cluster_queue or name},
    }


def workload_priority_class(name: str, value: int) -> Obj:
    return {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": _meta(name), "value": value}


# -- workloads --------------------------------------------------------------------------------------


def _condition(kind: str, status: str, reason: str, message: str, at: datetime | str) -> Obj:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": rfc3339(at)}


class WorkloadBuilder:
    """A Workload with one pod set `main` of `count` pods requesting `cpu` each. Chainable:
    `workload("a", priority=1).admitted("cq", at=T0).evicted()`; `.obj()` gives the dict
    (every helper here also accepts the builder itself)."""

    def __init__(
        self,
        name: str,
        *,
        queue: str | None = None,
        cpu: int | str = 1,
        count: int = 1,
        priority: int | None = None,
        priority_class: str | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        boost: int | str | None = None,
        job_uid: str | None = None,
        uid: str | None = None,
        namespace: str = NAMESPACE,
        created: datetime | str = T0,
    ) -> None:
        all_labels = dict(labels or {})
        if job_uid is not None:
            all_labels[JOB_UID_LABEL] = job_uid
        all_annotations = dict(annotations or {})
        if boost is not None:
            all_annotations[BOOST_ANNOTATION] = str(boost)
        self.name = name
        self.namespace = namespace
        self.cpu = cpu
        self.count = count
        spec: Obj = {
            "podSets": [
                {
                    "name": "main",
                    "count": count,
                    "template": {
                        "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": str(cpu)}}}]}
                    },
                }
            ],
        }
        if queue is not None:
            spec["queueName"] = queue
        if priority is not None:
            spec["priority"] = priority
        if priority_class is not None:
            spec["priorityClassRef"] = {
                "group": "kueue.x-k8s.io",
                "kind": "WorkloadPriorityClass",
                "name": priority_class,
            }
        self.body: Obj = {
            "apiVersion": KUEUE,
            "kind": "Workload",
            "metadata": _meta(
                name, namespace, uid=uid, labels=all_labels, annotations=all_annotations, created=created
            ),
            "spec": spec,
        }

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def admitted(
        self, cq: str, at: datetime | str = T0, cpu: int | str | None = None, flavor: str = "default"
    ) -> WorkloadBuilder:
        """QuotaReserved=True (lastTransitionTime `at`) and Admitted=True in `cq`, with
        status.admission (cpu of `flavor`); the queue defaults to the LocalQueue named after `cq`."""
        self.body["spec"].setdefault("queueName", cq)
        total = _cpu_total(cpu if cpu is not None else self.cpu, self.count)
        status = self.body.setdefault("status", {})
        conditions = [c for c in status.get("conditions", []) if c["type"] not in ("QuotaReserved", "Admitted")]
        status["conditions"] = [
            _condition("QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {cq}", at),
            _condition("Admitted", "True", "Admitted", "The workload is admitted", at),
            *conditions,
        ]
        status["admission"] = {
            "clusterQueue": cq,
            "podSetAssignments": [
                {"name": "main", "flavors": {"cpu": flavor}, "resourceUsage": {"cpu": total}, "count": self.count}
            ],
        }
        return self

    def evicted(
        self, at: datetime | str = T0, reason: str = "Preempted", message: str = "Preempted earlier"
    ) -> WorkloadBuilder:
        """Adds Evicted=True (the workload keeps its quota until the job stops)."""
        status = self.body.setdefault("status", {})
        status.setdefault("conditions", []).append(_condition("Evicted", "True", reason, message, at))
        return self

    def finished(self, at: datetime | str = T0) -> WorkloadBuilder:
        status = self.body.setdefault("status", {})
        status.setdefault("conditions", []).append(_condition("Finished", "True", "Succeeded", "Job finished", at))
        return self

    def obj(self) -> Obj:
        return copy.deepcopy(self.body)


def workload(name: str, **kwargs: Any) -> WorkloadBuilder:
    """`WorkloadBuilder(name, **kwargs)`: pending until `.admitted(cq)`."""
    return WorkloadBuilder(name, **kwargs)


def admitted(
    name: str, cq: str, cpu: int | str = 1, *, at: datetime | str = T0, flavor: str = "default", **kwargs: Any
) -> WorkloadBuilder:
    """Shorthand: a workload of `cpu` (of `flavor`) holding quota in `cq` since `at`."""
    return WorkloadBuilder(name, cpu=cpu, **kwargs).admitted(cq, at=at, flavor=flavor)


def pending(name: str, queue: str, cpu: int | str = 1, **kwargs: Any) -> WorkloadBuilder:
    """Shorthand: a pending workload of `cpu` in LocalQueue `queue`."""
    return WorkloadBuilder(name, queue=queue, cpu=cpu, **kwargs)


def _cpu_total(cpu: int | str, count: int) -> str:
    from preemption_operator.api.quantity import format_amount, to_amount

    return format_amount("cpu", to_amount("cpu", cpu) * count)


def as_dict(item: Obj | WorkloadBuilder) -> Obj:
    return item.obj() if isinstance(item, WorkloadBuilder) else copy.deepcopy(item)


def scenario(
    cluster_queues: Iterable[Obj],
    *workloads: Obj | WorkloadBuilder,
    cohorts: Iterable[Obj] = (),
    extra: Iterable[Obj] = (),
    flavors: Iterable[str] = ("default",),
) -> list[Obj]:
    """Everything a run needs: the namespace, the flavors, the ClusterQueues with one LocalQueue
    each (named after the ClusterQueue), cohorts, any extra objects (priority classes…), workloads."""
    cqs = [as_dict(cq) for cq in cluster_queues]
    return [
        namespace(),
        *(resource_flavor(f) for f in flavors),
        *[as_dict(c) for c in cohorts],
        *cqs,
        *(local_queue(cq["metadata"]["name"]) for cq in cqs),
        *[as_dict(e) for e in extra],
        *(as_dict(w) for w in workloads),
    ]


# -- runners --------------------------------------------------------------------------------------------


def parse(objects: Iterable[Obj | WorkloadBuilder]) -> list[Any]:
    return [parse_object(as_dict(o)) for o in objects]


def cache_of(objects: Iterable[Obj | WorkloadBuilder]) -> Cache:
    cache = Cache()
    cache.load(parse(objects))
    return cache


def one_cycle_with_snapshot(
    objects: Iterable[Obj | WorkloadBuilder], now: datetime = NOW
) -> tuple[CycleResult, Snapshot]:
    """One scheduling cycle from a fresh cache; also returns the snapshot the cycle ran on (its
    usage then includes this cycle's admissions)."""
    snapshot = cache_of(objects).snapshot(now)
    configurable = ConfigurablePreemption()
    configurable.begin_cycle(snapshot)
    result = Scheduler(extra=configurable.candidates).cycle(snapshot, QueueState())
    return result, snapshot


def one_cycle(objects: Iterable[Obj | WorkloadBuilder], now: datetime = NOW) -> CycleResult:
    """Cache → snapshot(now) → Scheduler(extra=ConfigurablePreemption().candidates).cycle(...)."""
    return one_cycle_with_snapshot(objects, now)[0]


@dataclass
class Outcome:
    """What a simulation did, from its `--output json` document."""

    data: dict[str, Any]
    actions: list[Obj] = field(init=False)
    preempted: dict[str, Obj] = field(init=False)
    """Preempted actions by victim name (a victim preempted twice keeps the last)."""
    statuses: dict[str, Obj] = field(init=False)
    """Final status by workload name."""

    def __post_init__(self) -> None:
        self.actions = list(self.data["actions"])
        self.preempted = {a["workload"].split("/", 1)[1]: a for a in self.actions if a["action"] == "Preempted"}
        self.statuses = {w["name"]: w["status"] for w in self.data["workloads"]}

    @property
    def victims(self) -> list[str]:
        return sorted(self.preempted)

    @property
    def reasons(self) -> dict[str, str]:
        return {name: a["reason"] for name, a in self.preempted.items()}

    @property
    def messages(self) -> dict[str, str]:
        return {name: a["message"] for name, a in self.preempted.items()}

    def condition(self, name: str, kind: str) -> Obj | None:
        for c in self.statuses[name].get("conditions", []):
            if c["type"] == kind:
                return dict(c)
        return None

    def actions_of(self, name: str) -> list[Obj]:
        return [a for a in self.actions if a["workload"].split("/", 1)[1] == name]

    def objects_after(self, objects: Iterable[Obj | WorkloadBuilder]) -> list[Obj]:
        """The input objects with every workload's status replaced by its final status."""
        out = []
        for obj in objects:
            body = as_dict(obj)
            if body["kind"] == "Workload":
                final = self.statuses.get(body["metadata"]["name"])
                if final is not None:
                    body["status"] = final
            out.append(body)
        return out


def simulation(objects: Iterable[Obj | WorkloadBuilder], now: datetime = NOW, max_cycles: int = 100) -> Simulation:
    return run(parse(objects), now, max_cycles)


def simulate(objects: Iterable[Obj | WorkloadBuilder], now: datetime = NOW, max_cycles: int = 100) -> Outcome:
    """`simulate.run` until settled (or `max_cycles`)."""
    return Outcome(json.loads(json.dumps(simulation(objects, now, max_cycles).to_dict())))


def simulate_cli(objects: Iterable[Obj | WorkloadBuilder], now: datetime = NOW, max_cycles: int = 100) -> Outcome:
    """`preemption-operator simulate DIR --output json --now NOW` through click's CliRunner."""
    from click.testing import CliRunner

    from preemption_operator.cli import cli

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "objects.yaml"
        path.write_text(yaml.safe_dump_all([as_dict(o) for o in objects], sort_keys=False))
        result = CliRunner().invoke(
            cli,
            ["simulate", str(path), "--output", "json", "--now", rfc3339(now), "--max-cycles", str(max_cycles)],
            catch_exceptions=False,
        )
    assert result.exit_code == 0, result.output
    return Outcome(json.loads(result.stdout))
