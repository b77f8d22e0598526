"""Kueue-style builders of Kubernetes objects in wire form (camelCase dicts), and runners.

Conventions follow the reference's acceptance scenarios (§9): one flavor `default`, resource
`cpu`, UIDs equal names (so the UID tie-break is alphabetical), every object created and every
admitted workload reserved quota at `T0` unless stated, workloads live in namespace `default`, and
every ClusterQueue gets a LocalQueue of the same name (`scenario` adds them), which is the default
queue of a workload admitted there.

    objects = scenario(
        [cluster_queue("standalone", 6, within="LowerPriority")],
        workload("low", priority=-1, cpu=2).admitted("standalone"),
        workload("in", queue="standalone", priority=1, cpu=2),
    )
    result = one_cycle(objects)          # the engine's CycleResult for one scheduling cycle
    outcome = simulate(objects)          # simulate.run until settled: victims, reasons, statuses

Sections: cluster objects, workloads, configurable preemption (`selector`, `rule`,
`preemption_config`; `cluster_queue(..., config=NAME)` points a ClusterQueue at its
PreemptionConfig), topology-aware scheduling, protection policies, runners.

Topology-aware scheduling (TAS): the TAS flavor is `tas` (`resource_flavor(TAS_FLAVOR,
topology=TOPOLOGY)`, for the nodes labelled `tas-node: "true"`), its Topology is `tas-topology`. A
node's `levels` map a topology level's label to its value; the hostname label defaults to the
node's name. Engine-level objects (`TopologyView`, `NodeRecord`) come from `view` and `node_record`.

    objects = [
        *basics(levels=[HOSTNAME]),      # namespace `default`, Topology `tas-topology`, flavor `tas`
        node("x1", cpu=2), node("x2", cpu=2),
        cluster_queue("a", 4, flavor=TAS_FLAVOR, config="default-config"),
        local_queue("main", "a"),
        workload("a1", queue="main").on_nodes("a", {"x1": 1}),
        workload("incoming", queue="main", count=2, required=HOSTNAME),
    ]
"""

from __future__ import annotations

import copy
import json
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from preemption_operator.api.objects import parse_object
from preemption_operator.engine import CycleResult, Engine, QueueState, StatusChange, status_changes
from preemption_operator.engine.cache import Cache
from preemption_operator.engine.fair_sharing import OFF as FAIR_OFF
from preemption_operator.engine.fair_sharing import FairSharing
from preemption_operator.engine.placement import NodeRecord, TopologyView
from preemption_operator.engine.snapshot import Snapshot
from preemption_operator.engine.topology_assignment import HOSTNAME
from preemption_operator.offline.simulate import Simulation, run

KUEUE = "kueue.x-k8s.io/v1beta2"
KUEUE_ALPHA = "kueue.x-k8s.io/v1alpha1"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
BOOST_ANNOTATION = "kueue.x-k8s.io/priority-boost"
CONFIG_ANNOTATION = "kueue.x-k8s.io/preemption-config-name"
NAMESPACE = "default"

TAS_FLAVOR = "tas"
TOPOLOGY = "tas-topology"
POOL_LABEL = "tas-node"
BLOCK = "example.com/block"
RACK = "example.com/rack"
SUBRACK = "example.com/subrack"

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


def resource_flavor(
    name: str = "default", *, topology: str | None = None, node_labels: Mapping[str, str] | None = None
) -> Obj:
    """A ResourceFlavor; with `topology` (its Topology's name) a TAS flavor, for the nodes with
    `node_labels` (default: the pool label `tas-node: "true"`)."""
    spec: Obj = {}
    if node_labels is not None or topology is not None:
        spec["nodeLabels"] = dict(node_labels) if node_labels is not None else {POOL_LABEL: "true"}
    if topology is not None:
        spec["topologyName"] = topology
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": _meta(name), "spec": spec}


def quota(nominal: int | str, borrowing_limit: int | str | None = None, lending_limit: int | str | None = None) -> Obj:
    """One flavor's cpu quota: `{"nominal": .., "borrowingLimit": .., "lendingLimit": ..}`."""
    return {"nominal": nominal, "borrowingLimit": borrowing_limit, "lendingLimit": lending_limit}


def _resource_groups(
    cpu: int | str | Quota | Mapping[str, Quota] | None,
    *,
    flavor: str = "default",
    resources: Mapping[str, int | str] | None = None,
) -> list[Obj]:
    """`cpu` is a nominal quota of `flavor`, a `quota(...)`, or {flavor: quota(...)}; `resources`
    are nominal quotas of other resources, in every flavor (resources listed by name)."""
    if cpu is None and not resources:
        return []
    if cpu is None:
        per_flavor: dict[str, Quota | None] = {flavor: None}
    elif isinstance(cpu, int | str):
        per_flavor = {flavor: quota(cpu)}
    elif "nominal" in cpu:
        per_flavor = {flavor: cpu}
    else:
        per_flavor = dict(cpu)
    flavors = []
    for name, q in per_flavor.items():
        entries: list[Obj] = [{"name": r, "nominalQuota": str(n)} for r, n in (resources or {}).items()]
        if q is not None:
            resource: Obj = {"name": "cpu", "nominalQuota": str(q["nominal"])}
            if q.get("borrowingLimit") is not None:
                resource["borrowingLimit"] = str(q["borrowingLimit"])
            if q.get("lendingLimit") is not None:
                resource["lendingLimit"] = str(q["lendingLimit"])
            entries.append(resource)
        flavors.append({"name": name, "resources": sorted(entries, key=lambda e: e["name"])})
    covered = sorted({e["name"] for f in flavors for e in f["resources"]})
    return [{"coveredResources": covered, "flavors": flavors}]


def cluster_queue(
    name: str,
    cpu: int | str | Quota | Mapping[str, Quota] | None = 0,
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
    preemption: Mapping[str, Any] | None = None,
    config: str | None = None,
    flavor: str = "default",
    resources: Mapping[str, int | str] | None = None,
) -> Obj:
    """A ClusterQueue admitting from every namespace (`namespaceSelector: {}`).

    `cpu` (None: no cpu), `flavor` and `resources` as in `_resource_groups`;
    `borrowing_limit`/`lending_limit` apply to a plain nominal. `within`/`reclaim`/`borrow_within`
    are spec.preemption's withinClusterQueue, reclaimWithinCohort and borrowWithinCohort.policy
    (unset = the CRD default `Never`); `preemption` is more of spec.preemption in wire form.
    `config` names the PreemptionConfig (the `kueue.x-k8s.io/preemption-config-name` annotation)."""
    if isinstance(cpu, int | str) and (borrowing_limit is not None or lending_limit is not None):
        cpu = quota(cpu, borrowing_limit, lending_limit)
    spec: Obj = {
        "namespaceSelector": {},
        "resourceGroups": _resource_groups(cpu, flavor=flavor, resources=resources),
    }
    if cohort:
        spec["cohortName"] = cohort
    preemption = dict(preemption or {})
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
    if config is not None:
        annotations = {**(annotations or {}), CONFIG_ANNOTATION: config}
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
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    """A Cohort; `parent` is spec.parentName, `cpu` its own (shared) quota as for cluster_queue;
    `annotations` e.g. a preemption policy or delay."""
    if isinstance(cpu, int | str) and (borrowing_limit is not None or lending_limit is not None):
        cpu = quota(cpu, borrowing_limit, lending_limit)
    spec: Obj = {}
    if parent:
        spec["parentName"] = parent
    groups = _resource_groups(cpu)
    if groups:
        spec["resourceGroups"] = groups
    return {"apiVersion": KUEUE, "kind": "Cohort", "metadata": _meta(name, annotations=annotations), "spec": spec}


def local_queue(name: str, cluster_queue: str | None = None, namespace: str = NAMESPACE) -> Obj:
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": _meta(name, namespace, uid=f"lq-{namespace}-{name}"),
        "spec": {"clusterQueue": cluster_queue or name},
    }


def workload_priority_class(name: str, value: int, *, annotations: Mapping[str, str] | None = None) -> Obj:
    return {
        "apiVersion": KUEUE,
        "kind": "WorkloadPriorityClass",
        "metadata": _meta(name, annotations=annotations),
        "value": value,
    }


def pod_priority_class(name: str, value: int, *, annotations: Mapping[str, str] | None = None) -> Obj:
    """A scheduling.k8s.io/v1 PriorityClass (what `workload(..., pod_priority_class=)` refers to)."""
    body = workload_priority_class(name, value, annotations=annotations)
    return {**body, "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass"}


# -- workloads --------------------------------------------------------------------------------------


def _condition(kind: str, status: str, reason: str, message: str, at: datetime | str) -> Obj:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": rfc3339(at)}


class WorkloadBuilder:
    """A Workload with one pod set `main` of `count` pods requesting `cpu` (None: no cpu) and
    `requests` each. Chainable: `workload("a", priority=1).admitted("cq", at=T0).evicted()`;
    `.obj()` gives the dict (every helper here also accepts the builder itself).

    `required`/`preferred`/`unconstrained` (and `slice_level` with `slice_size`) are the pod set's
    topologyRequest, `node_selector`, `tolerations` and `affinity` (required node affinity terms)
    its pods'; `pod_priority_class` refers to a scheduling.k8s.io PriorityClass."""

    def __init__(
        self,
        name: str,
        *,
        queue: str | None = None,
        cpu: int | str | None = 1,
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
        requests: Mapping[str, int | str] | None = None,
        required: str | None = None,
        preferred: str | None = None,
        unconstrained: bool | None = None,
        slice_level: str | None = None,
        slice_size: int | None = None,
        node_selector: Mapping[str, str] | None = None,
        tolerations: Sequence[Mapping[str, Any]] | None = None,
        affinity: Sequence[Mapping[str, Any]] | None = None,
        pod_priority_class: str | None = None,
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
        self.requests: dict[str, str] = {r: str(q) for r, q in (requests or {}).items()}
        """Per pod, cpu included."""
        if cpu is not None:
            self.requests["cpu"] = str(cpu)
        pod_spec: Obj = {"containers": [{"name": "main", "resources": {"requests": dict(self.requests)}}]}
        if node_selector:
            pod_spec["nodeSelector"] = dict(node_selector)
        if tolerations:
            pod_spec["tolerations"] = [dict(t) for t in tolerations]
        if affinity is not None:
            terms = [dict(t) for t in affinity]
            pod_spec["affinity"] = {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
            }
        pod_set: Obj = {"name": "main", "count": count, "template": {"spec": pod_spec}}
        topology_request = {
            "required": required,
            "preferred": preferred,
            "unconstrained": unconstrained,
            "podSetSliceRequiredTopology": slice_level,
            "podSetSliceSize": slice_size,
        }
        if any(v is not None for v in topology_request.values()):
            pod_set["topologyRequest"] = {k: v for k, v in topology_request.items() if v is not None}
        spec: Obj = {"podSets": [pod_set]}
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
        if pod_priority_class is not None:
            spec["priorityClassRef"] = {
                "group": "scheduling.k8s.io",
                "kind": "PriorityClass",
                "name": pod_priority_class,
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
        self,
        cq: str,
        at: datetime | str = T0,
        cpu: int | str | None = None,
        flavor: str = "default",
        *,
        evictions: Iterable[Mapping[str, Any]] | None = None,
        topology_assignment: Obj | None = None,
    ) -> WorkloadBuilder:
        """QuotaReserved=True (lastTransitionTime `at`) and Admitted=True in `cq`, with
        status.admission (the requests, or `cpu`, of `flavor`; `topology_assignment` in wire form);
        the queue defaults to the LocalQueue named after `cq`. `evictions` are past
        status.schedulingStats.evictions entries."""
        self.body["spec"].setdefault("queueName", cq)
        per_pod = {**self.requests, **({"cpu": str(cpu)} if cpu is not None else {})}
        assignment: Obj = {
            "name": "main",
            "flavors": {r: flavor for r in per_pod},
            "resourceUsage": {r: _total(r, q, self.count) for r, q in per_pod.items()},
            "count": self.count,
        }
        if topology_assignment is not None:
            assignment["topologyAssignment"] = topology_assignment
        status = self.body.setdefault("status", {})
        conditions = [c for c in status.get("conditions", []) if c["type"] not in ("QuotaReserved", "Admitted")]
        status["conditions"] = [
            _condition("QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {cq}", at),
            _condition("Admitted", "True", "Admitted", "The workload is admitted", at),
            *conditions,
        ]
        status["admission"] = {"clusterQueue": cq, "podSetAssignments": [assignment]}
        if evictions:
            status["schedulingStats"] = {"evictions": [dict(e) for e in evictions]}
        return self

    def on_nodes(
        self,
        cq: str,
        pods_per_node: Mapping[str, int] | None = None,
        *,
        at: datetime | str = T0,
        flavor: str = TAS_FLAVOR,
        assignment: Obj | None = None,
    ) -> WorkloadBuilder:
        """`.admitted(cq)` in the TAS flavor with its pods on `pods_per_node` (a hostname-level
        topology assignment, counts adding up to `count`), or on `assignment` in wire form."""
        if assignment is None:
            assert pods_per_node is not None and sum(pods_per_node.values()) == self.count, (pods_per_node, self.count)
            assignment = hostname_assignment(pods_per_node)
        return self.admitted(cq, at=at, flavor=flavor, topology_assignment=assignment)

    def requeued(self, at: datetime | str) -> WorkloadBuilder:
        """Pending again after an eviction (and requeue) at `at`: its conditions become
        QuotaReserved=False, Evicted=True and Requeued=True."""
        status = self.body.setdefault("status", {})
        status["conditions"] = [
            _condition("QuotaReserved", "False", "Preempted", "Preempted earlier", at),
            _condition("Evicted", "True", "Preempted", "Preempted earlier", at),
            _condition("Requeued", "True", "Preempted", "Preempted earlier", at),
        ]
        return self

    def accumulated(self, seconds: int) -> WorkloadBuilder:
        """status.accumulatedPastExecutionTimeSeconds."""
        self.body.setdefault("status", {})["accumulatedPastExecutionTimeSeconds"] = seconds
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


def _total(resource: str, amount: int | str, count: int) -> str:
    """`count` pods' worth of `amount` of `resource`, as a quantity."""
    from preemption_operator.api.quantity import format_amount, to_amount

    return format_amount(resource, to_amount(resource, amount) * count)


def _cpu_total(cpu: int | str, count: int) -> str:
    return _total("cpu", cpu, count)


def as_dict(item: Obj | WorkloadBuilder) -> Obj:
    return item.obj() if isinstance(item, WorkloadBuilder) else copy.deepcopy(item)


def for_cluster(item: Obj | WorkloadBuilder) -> Obj:
    """The object as a client sends it to a live API server (the e2e tests): without the uid and
    creationTimestamp the builders set for offline runs, which the server sets itself."""
    body = as_dict(item)
    for server_set in ("uid", "creationTimestamp"):
        body.get("metadata", {}).pop(server_set, None)
    return body


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


def basics(*namespaces: str, levels: Sequence[str] | None = None) -> list[Obj]:
    """The namespaces (default: `default`) and the flavor `default`; with topology `levels` (from
    the widest to the narrowest), the Topology `tas-topology` and the TAS flavor `tas` instead."""
    flavors = [topology(*levels), resource_flavor(TAS_FLAVOR, topology=TOPOLOGY)] if levels else [resource_flavor()]
    return [*(namespace(ns) for ns in (namespaces or (NAMESPACE,))), *flavors]


# -- configurable preemption (PreemptionConfig) --------------------------------------------------------


def selector(scope: str, **fields: Any) -> Obj:
    """A candidate selector; `fields` are wire names (labelSelector, clusterQueueSelector,
    numericLabels, priority, quota, minExecutionDuration…)."""
    return {"scope": scope, **fields}


def rule(
    name: str,
    *selectors: Obj,
    trigger: str = "Always",
    preemptor_selector: Mapping[str, Any] | None = None,
    preemptor_priority_class_selector: Mapping[str, Any] | None = None,
    preemptor_quota: str | None = None,
    min_trigger: str | None = None,
) -> Obj:
    """A rule; `trigger`, `preemptor_quota` and `min_trigger` (minTriggerRequiredDuration) make its
    activationPolicy."""
    policy: Obj = {"trigger": trigger}
    if preemptor_quota is not None:
        policy["preemptorQuota"] = preemptor_quota
    if min_trigger is not None:
        policy["minTriggerRequiredDuration"] = min_trigger
    body: Obj = {"name": name, "activationPolicy": policy, "candidateSelectors": list(selectors)}
    if preemptor_selector is not None:
        body["preemptorSelector"] = dict(preemptor_selector)
    if preemptor_priority_class_selector is not None:
        body["preemptorPriorityClassSelector"] = dict(preemptor_priority_class_selector)
    return body


def preemption_config(name: str, *rules: Obj) -> Obj:
    return {
        "apiVersion": KUEUE_ALPHA,
        "kind": "PreemptionConfig",
        "metadata": _meta(name),
        "spec": {"rules": list(rules)},
    }


def lower_priority_config(name: str, rule_name: str = "hero-preempt-lower-priority", **activation: str) -> Obj:
    """The specification's hero PreemptionConfig: one rule that, on InsufficientQuota, takes
    workloads of lower base priority anywhere in the cohort tree (`activation`: more of its
    activationPolicy, in wire form)."""
    lower = selector("WithinCohortTree", priority={"mode": "Base", "comparison": "LessThan"})
    config = preemption_config(name, rule(rule_name, lower, trigger="InsufficientQuota"))
    config["spec"]["rules"][0]["activationPolicy"].update(activation)
    return config


NO_CLASSIC_PREEMPTION = {
    "withinClusterQueue": "Never",
    "reclaimWithinCohort": "Never",
    "borrowWithinCohort": {"policy": "Never"},
}
"""spec.preemption of a ClusterQueue that leaves every preemption to its PreemptionConfig."""


# -- topology-aware scheduling ---------------------------------------------------------------------------


def topology(*levels: str, name: str = TOPOLOGY) -> Obj:
    """A Topology with `levels` from the widest to the narrowest."""
    return {
        "apiVersion": KUEUE,
        "kind": "Topology",
        "metadata": _meta(name),
        "spec": {"levels": [{"nodeLabel": level} for level in levels]},
    }


def node(
    name: str,
    levels: Mapping[str, str] | None = None,
    *,
    cpu: int | str | None = None,
    allocatable: Mapping[str, int | str] | None = None,
    labels: Mapping[str, str] | None = None,
    unschedulable: bool = False,
    pool: bool = True,
    hostname: str | None = None,
    ready: bool = True,
    taints: Sequence[Mapping[str, str]] = (),
) -> Obj:
    """A Node, Ready unless `ready` is False. `levels` are its topology labels;
    `kubernetes.io/hostname` is `hostname` (default: the name); `pool` adds the TAS flavor's node
    label; `cpu` is shorthand for allocatable cpu."""
    all_labels: dict[str, str] = {HOSTNAME: hostname or name, **(levels or {})}
    if pool:
        all_labels[POOL_LABEL] = "true"
    all_labels.update(labels or {})
    resources: dict[str, str] = {k: str(v) for k, v in (allocatable or {}).items()}
    if cpu is not None:
        resources["cpu"] = str(cpu)
    resources.setdefault("pods", "110")
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": _meta(name, labels=all_labels),
        "spec": {
            **({"unschedulable": True} if unschedulable else {}),
            **({"taints": [dict(t) for t in taints]} if taints else {}),
        },
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}
                if ready
                else {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "not ready"}
            ],
        },
    }


def hostname_assignment(pods_per_node: Mapping[str, int]) -> Obj:
    """A topologyAssignment with levels `[kubernetes.io/hostname]`, written by hand (not by the code
    under test): one slice, nodes in name order, one pod count per node."""
    names = sorted(pods_per_node)
    return {
        "levels": [HOSTNAME],
        "slices": [
            {
                "domainCount": len(names),
                "valuesPerLevel": [{"individual": {"roots": names}}],
                "podCounts": {"individual": [pods_per_node[n] for n in names]},
            }
        ],
    }


def node_record(name: str, levels: Mapping[str, str] | None = None, **allocatable: int) -> NodeRecord:
    """An engine-level NodeRecord; allocatable amounts as the engine counts them (cpu in milli-units)."""
    return NodeRecord(name, {HOSTNAME: name, **(levels or {})}, dict(allocatable))


def view(
    levels: Sequence[str], nodes: Sequence[NodeRecord], *, flavor: str = TAS_FLAVOR, name: str = TOPOLOGY
) -> TopologyView:
    """An engine-level TopologyView of `nodes`."""
    return TopologyView(flavor, name, tuple(levels), tuple(nodes))


# -- protection policies ---------------------------------------------------------------------------------

NEW_PREFIX = "preemption-toleration.scheduling.x-k8s.io/"
OLD_PREFIX = "preemption-toleration.scheduling.sigs.k8s.io/"
MIN_KEY = "minimum-preemptable-priority"
SECONDS_KEY = "toleration-seconds"
ALLOW = "yunikorn.apache.org/allow-preemption"
POLICY = "preemption-operator.io/preemption-policy"
DELAY = "preemption-operator.io/preemption-delay"


def toleration(minimum: int | str | None = None, seconds: int | str | None = None, prefix: str = NEW_PREFIX) -> dict:
    """PreemptionToleration annotations (only the keys given), for a priority class."""
    out: dict[str, str] = {}
    if minimum is not None:
        out[prefix + MIN_KEY] = str(minimum)
    if seconds is not None:
        out[prefix + SECONDS_KEY] = str(seconds)
    return out


# -- runners --------------------------------------------------------------------------------------------


def parse(objects: Iterable[Obj | WorkloadBuilder]) -> list[Any]:
    return [parse_object(as_dict(o)) for o in objects]


def cache_of(objects: Iterable[Obj | WorkloadBuilder], fair_sharing: FairSharing = FAIR_OFF) -> Cache:
    cache = Cache(fair_sharing)
    cache.load(parse(objects))
    return cache


def one_cycle_with_snapshot(
    objects: Iterable[Obj | WorkloadBuilder], now: datetime = NOW, fair_sharing: FairSharing = FAIR_OFF
) -> tuple[CycleResult, Snapshot]:
    """One scheduling cycle from a fresh cache; also returns the snapshot the cycle ran on (its
    usage then includes this cycle's admissions)."""
    snapshot = cache_of(objects, fair_sharing).snapshot(now)
    result = Engine().cycle(snapshot, QueueState())
    return result, snapshot


def one_cycle(
    objects: Iterable[Obj | WorkloadBuilder], now: datetime = NOW, fair_sharing: FairSharing = FAIR_OFF
) -> CycleResult:
    """Cache → snapshot(now) → Engine().cycle(...)."""
    return one_cycle_with_snapshot(objects, now, fair_sharing)[0]


def cycle_applied(
    objects: Iterable[Obj | WorkloadBuilder], now: datetime = NOW
) -> tuple[CycleResult, list[StatusChange], dict[str, Obj]]:
    """One cycle from a fresh cache: its result, its status changes and, per workload key, its
    status once they are applied in order."""
    cache = cache_of(objects)
    result = Engine().cycle(cache.snapshot(now), QueueState())
    made = status_changes(result, now)
    out: dict[str, Obj] = {}
    for change in made:
        current = {**cache.infos[change.key].obj.to_wire()}
        if change.key in out:
            current["status"] = out[change.key]
        new = change.compute(current)
        if new is not None:
            out[change.key] = new
    return result, made, out


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


def simulation(
    objects: Iterable[Obj | WorkloadBuilder],
    now: datetime = NOW,
    max_cycles: int = 100,
    fair_sharing: FairSharing = FAIR_OFF,
) -> Simulation:
    return run(parse(objects), now, max_cycles, fair_sharing=fair_sharing)


def simulate(
    objects: Iterable[Obj | WorkloadBuilder],
    now: datetime = NOW,
    max_cycles: int = 100,
    fair_sharing: FairSharing = FAIR_OFF,
) -> Outcome:
    """`simulate.run` until settled (or `max_cycles`)."""
    return Outcome(json.loads(json.dumps(simulation(objects, now, max_cycles, fair_sharing).to_dict())))


def simulate_cli(
    objects: Iterable[Obj | WorkloadBuilder],
    now: datetime = NOW,
    max_cycles: int = 100,
    flags: Sequence[str] = (),
) -> Outcome:
    """`preemption-operator simulate DIR --output json --now NOW [flags]` through click's CliRunner."""
    from click.testing import CliRunner

    from preemption_operator.cli import cli

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "objects.yaml"
        path.write_text(yaml.safe_dump_all([as_dict(o) for o in objects], sort_keys=False))
        result = CliRunner().invoke(
            cli,
            [
                "simulate",
                str(path),
                "--output",
                "json",
                "--now",
                rfc3339(now),
                "--max-cycles",
                str(max_cycles),
                *flags,
            ],
            catch_exceptions=False,
        )
    assert result.exit_code == 0, result.output
    return Outcome(json.loads(result.stdout))


# -- flavors, fungibility, partial admission, pods quota (issue #12: flavor assignment and quota) ------


def resource_group(flavors: Mapping[str, Mapping[str, int | str | Quota]]) -> Obj:
    """One resource group in wire form: {flavor: {resource: nominal or quota(...)}}, flavors in
    the order given; it covers every resource named (sorted)."""
    entries = []
    for flavor, resources in flavors.items():
        listed = []
        for resource, value in resources.items():
            q = value if isinstance(value, Mapping) else quota(value)
            item: Obj = {"name": resource, "nominalQuota": str(q["nominal"])}
            if q.get("borrowingLimit") is not None:
                item["borrowingLimit"] = str(q["borrowingLimit"])
            if q.get("lendingLimit") is not None:
                item["lendingLimit"] = str(q["lendingLimit"])
            listed.append(item)
        entries.append({"name": flavor, "resources": listed})
    covered = sorted({r for resources in flavors.values() for r in resources})
    return {"coveredResources": covered, "flavors": entries}


def with_resource_groups(cq: Obj, *groups: Obj) -> Obj:
    """A ClusterQueue (or Cohort) from `cluster_queue`/`cohort` with these resource groups instead."""
    cq["spec"]["resourceGroups"] = [copy.deepcopy(g) for g in groups]
    return cq


def with_fungibility(
    cq: Obj,
    when_can_borrow: str | None = None,
    when_can_preempt: str | None = None,
    preference: str | None = None,
) -> Obj:
    """spec.flavorFungibility (unset fields keep the CRD defaults MayStopSearch/TryNextFlavor)."""
    fields = {"whenCanBorrow": when_can_borrow, "whenCanPreempt": when_can_preempt, "preference": preference}
    cq["spec"]["flavorFungibility"] = {k: v for k, v in fields.items() if v is not None}
    return cq


def with_pod_sets(wl: WorkloadBuilder, *pod_sets: tuple[str, int, int | None]) -> WorkloadBuilder:
    """Replaces the pod sets by (name, count, minCount) ones, each pod with the builder's requests."""
    template = wl.body["spec"]["podSets"][0]["template"]
    wl.body["spec"]["podSets"] = [
        {
            "name": name,
            "count": count,
            **({"minCount": min_count} if min_count is not None else {}),
            "template": copy.deepcopy(template),
        }
        for name, count, min_count in pod_sets
    ]
    return wl


def with_min_count(wl: WorkloadBuilder, min_count: int) -> WorkloadBuilder:
    """spec.podSets[main].minCount: partial admission may admit as few pods as that."""
    wl.body["spec"]["podSets"][0]["minCount"] = min_count
    return wl


def with_reclaimable(wl: WorkloadBuilder, counts: Mapping[str, int]) -> WorkloadBuilder:
    """status.reclaimablePods: {pod set: pods that finished}."""
    status = wl.body.setdefault("status", {})
    status["reclaimablePods"] = [{"name": name, "count": count} for name, count in counts.items()]
    return wl


@dataclass
class FirstCycle:
    """What the first scheduling cycle decided, the same way for every path."""

    admitted: dict[str, list[Obj]]
    """Workload name -> status.admission.podSetAssignments (wire form)."""
    cluster_queues: dict[str, str]
    """Admitted workload name -> ClusterQueue."""
    preempted: dict[str, str]
    """Victim name -> Preempted reason."""
    pending: dict[str, tuple[str, str]]
    """Workload name -> (QuotaReserved reason, message)."""

    def flavors(self, name: str) -> list[dict[str, str]]:
        return [dict(psa["flavors"]) for psa in self.admitted[name]]

    def counts(self, name: str) -> list[int]:
        return [int(psa["count"]) for psa in self.admitted[name]]


def first_cycle(objects: Iterable[Obj | WorkloadBuilder], path: str, now: datetime = NOW) -> FirstCycle:
    """One scheduling cycle through `path`: "engine" (one_cycle), "simulate" (simulate.run) or
    "cli" (`preemption-operator simulate --output json`), both stopped after one cycle."""
    objects = list(objects)
    if path == "engine":
        result = one_cycle(objects, now)
        return FirstCycle(
            {a.workload.name: [dict(ps) for ps in a.pod_sets] for a in result.admitted},
            {a.workload.name: a.cluster_queue for a in result.admitted},
            {p.victim.name: p.target.reason for p in result.preempted},
            {p.workload.name: (p.reason, p.message) for p in result.pending},
        )
    run = {"simulate": simulate, "cli": simulate_cli}[path]
    outcome = run(objects, now, max_cycles=1)
    admitted_names = [a["workload"].split("/", 1)[1] for a in outcome.actions if a["action"] == "Admitted"]
    return FirstCycle(
        {n: list(outcome.statuses[n]["admission"]["podSetAssignments"]) for n in admitted_names},
        {a["workload"].split("/", 1)[1]: a["clusterQueue"] for a in outcome.actions if a["action"] == "Admitted"},
        outcome.reasons,
        {
            a["workload"].split("/", 1)[1]: (a["reason"], a["message"])
            for a in outcome.actions
            if a["action"] == "Pending"
        },
    )


PATHS = ("engine", "simulate", "cli")
"""The three ways every acceptance case runs."""
