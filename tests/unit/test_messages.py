"""Issue #12, item 6: every pending and eviction reason and message the engine writes, next to
Kueue's wording (v0.19, with its granular reasons: UnadmittedWorkloadsObservability, Beta in v0.19
and on by default from v0.20).

Each row of TABLE is a scenario run through one engine cycle, `simulate` and the
`preemption-operator simulate` command; the condition it names must carry exactly the reason and
message of the row. A row without `differs` must also read exactly as Kueue's (`kueue`), so a
change of wording on either side fails here. Rows with `differs` are the project's own and say why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from builders import (
    KUEUE,
    NOW,
    T0,
    Obj,
    WorkloadBuilder,
    admitted,
    cluster_queue,
    local_queue,
    namespace,
    one_cycle,
    pending,
    rfc3339,
    scenario,
    simulate,
    simulate_cli,
    workload,
)
from preemption_operator.engine import candidates, protection, scheduler
from preemption_operator.engine import workload_status as wl_status
from preemption_operator.engine.scheduler import CycleResult

# -- scenario helpers (plain objects, so the table does not depend on builders in flux) -----------

CONFIG_ANNOTATION = "kueue.x-k8s.io/preemption-config-name"
KUEUE_ALPHA = "kueue.x-k8s.io/v1alpha1"


def with_pod_sets(builder: WorkloadBuilder, *sets: tuple[str, int, int]) -> WorkloadBuilder:
    """Replaces the pod sets with (name, count, cpu per pod)."""
    builder.body["spec"]["podSets"] = [
        {
            "name": name,
            "count": count,
            "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": str(cpu)}}}]}},
        }
        for name, count, cpu in sets
    ]
    return builder


def requesting(builder: WorkloadBuilder, resource: str, amount: str) -> WorkloadBuilder:
    builder.body["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"][resource] = amount
    return builder


def selecting(builder: WorkloadBuilder, **labels: str) -> WorkloadBuilder:
    builder.body["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] = labels
    return builder


def gated(builder: WorkloadBuilder, *gates: str) -> WorkloadBuilder:
    builder.body["spec"]["preemptionGates"] = [{"name": g} for g in gates]
    return builder


def inactive(builder: WorkloadBuilder) -> WorkloadBuilder:
    builder.body["spec"]["active"] = False
    return builder


def stopped(obj: Obj, policy: str = "Hold") -> Obj:
    obj["spec"]["stopPolicy"] = policy
    return obj


def flavor(name: str, labels: dict[str, str] | None = None, topology: str | None = None) -> Obj:
    spec: Obj = {}
    if labels:
        spec["nodeLabels"] = labels
    if topology:
        spec["topologyName"] = topology
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def tas_objects(*workloads: WorkloadBuilder) -> list[Obj]:
    """Topology `racks` (rack, hostname) over two 1-cpu nodes in rack r1; TAS flavor `tas`; CQ `cq` of 8 cpu."""
    nodes = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": n, "labels": {"rack": "r1", "kubernetes.io/hostname": n, "pool": "tas"}},
            "status": {
                "allocatable": {"cpu": "1", "pods": "110"},
                "capacity": {"cpu": "1", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        for n in ("n1", "n2")
    ]
    topology = {
        "apiVersion": KUEUE,
        "kind": "Topology",
        "metadata": {"name": "racks"},
        "spec": {"levels": [{"nodeLabel": "rack"}, {"nodeLabel": "kubernetes.io/hostname"}]},
    }
    return scenario(
        [cluster_queue("cq", {"tas": {"nominal": 8}})],
        *workloads,
        flavors=(),
        extra=[topology, flavor("tas", {"pool": "tas"}, "racks"), *nodes],
    )


def required_rack(builder: WorkloadBuilder) -> WorkloadBuilder:
    builder.body["spec"]["podSets"][0]["topologyRequest"] = {"required": "rack"}
    return builder


def preempted_earlier(builder: WorkloadBuilder) -> WorkloadBuilder:
    """Pending again after a classic preemption: Evicted and Preempted still True."""
    builder.body["status"] = {
        "conditions": [
            {
                "type": kind,
                "status": "True",
                "reason": reason,
                "message": PREEMPTED_IN_CQ,
                "lastTransitionTime": T0_TEXT,
            }
            for kind, reason in (("Evicted", "Preempted"), ("Preempted", "InClusterQueue"))
        ]
    }
    return builder


def namespace_selected(cq: Obj) -> Obj:
    cq["spec"]["namespaceSelector"] = {"matchLabels": {"team": "a"}}
    return cq


# -- the table --------------------------------------------------------------------------------------

T0_TEXT = rfc3339(T0)
GAP_2 = "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 2 more needed"
PREEMPTED_IN_CQ = (
    "Preempted to accommodate a workload (UID: in, JobUID: UNKNOWN) due to prioritization in the ClusterQueue; "
    "preemptor path: /cq; preemptee path: /cq"
)
RECLAIMED = (
    "Preempted to accommodate a workload (UID: in, JobUID: UNKNOWN) due to reclamation within the cohort; "
    "preemptor path: /c/c1; preemptee path: /c/c2"
)
RECLAIMED_WHILE_BORROWING = (
    "Preempted to accommodate a workload (UID: in, JobUID: UNKNOWN) due to reclamation within the cohort while "
    "borrowing; preemptor path: /c/c1; preemptee path: /c/c2"
)


def full_cq(*extra: WorkloadBuilder, within: str | None = "LowerPriority", **cq: Any) -> list[Obj]:
    """CQ `cq` of 4 cpu holding `low` (priority -1, 4 cpu); `in` (priority 1) wants 2."""
    return scenario(
        [cluster_queue("cq", 4, within=within, **cq)],
        admitted("low", "cq", 4, priority=-1),
        *(extra or (pending("in", "cq", 2, priority=1),)),
    )


def cohort_reclaim(borrow: bool = False) -> list[Obj]:
    if borrow:
        c1 = cluster_queue("c1", 2, cohort="c", reclaim="Any", within="LowerPriority", borrow_within="LowerPriority")
        return scenario(
            [c1, cluster_queue("c2", 2, cohort="c")], admitted("victim", "c2", 4), pending("in", "c1", 4, priority=1)
        )
    return scenario(
        [cluster_queue("c1", 4, cohort="c", reclaim="Any"), cluster_queue("c2", 0, cohort="c")],
        admitted("victim", "c2", 4),
        pending("in", "c1", 4),
    )


def configurable() -> list[Obj]:
    cq = cluster_queue("cq", 4, annotations={CONFIG_ANNOTATION: "cfg"})
    config = {
        "apiVersion": KUEUE_ALPHA,
        "kind": "PreemptionConfig",
        "metadata": {"name": "cfg"},
        "spec": {
            "rules": [
                {
                    "name": "r",
                    "activationPolicy": {"trigger": "Always"},
                    "candidateSelectors": [{"scope": "WithinClusterQueue"}],
                }
            ]
        },
    }
    return scenario([cq], admitted("low", "cq", 4, priority=-1), pending("in", "cq", 2, priority=1), extra=[config])


def delayed() -> list[Obj]:
    cq = cluster_queue("cq", 4, within="LowerPriority", annotations={protection.DELAY_ANNOTATION: "1h"})
    return scenario([cq], admitted("low", "cq", 4, priority=-1), pending("in", "cq", 2, priority=1, created=NOW))


def opted_out() -> list[Obj]:
    victim = admitted("low", "cq", 4, priority=-1, annotations={protection.ALLOW_PREEMPTION: "false"})
    return scenario([cluster_queue("cq", 4, within="LowerPriority")], victim, pending("in", "cq", 2, priority=1))


def unknown_local_queue() -> list[Obj]:
    return scenario([cluster_queue("cq", 4)], pending("in", "missing", 1))


def unknown_cluster_queue() -> list[Obj]:
    return [namespace(), flavor("default"), local_queue("orphan", "ghost"), pending("in", "orphan", 1).obj()]


@dataclass(frozen=True)
class Row:
    name: str
    objects: Callable[[], list[Obj]]
    workload: str
    condition: str
    status: str
    reason: str
    message: str
    kueue: str | None
    """Kueue's message in the same situation (None: Kueue has no such situation)."""
    source: str
    """Where Kueue writes it (file, and the Kueue test that shows it)."""
    differs: str = ""
    """Why the project writes something else, if it does."""
    kueue_status: str = ""
    """Kueue's status of the condition, when it is not the row's."""
    decision: bool = True
    """The engine decides this reason and message in the cycle (else it follows from another
    decision when the status is written)."""


TABLE: list[Row] = [
    # -- pending: QuotaReserved=False --------------------------------------------------------------
    Row(
        "no room, nobody to preempt",
        lambda: full_cq(within=None),
        "in",
        "QuotaReserved",
        "False",
        "WaitingForQuota",
        GAP_2,
        GAP_2,
        "pkg/scheduler/flavorassigner/flavorassigner.go fitsResourceQuota; TestSchedule "
        "'do not signal `BlockedOnPreemptionGates` ... had nothing to preempt'",
    ),
    Row(
        "more than the ClusterQueue can ever hold",
        # Kueue TestSchedule "not enough resources": CQ sales (50 cpu), pod set `one` of 100 cpu.
        lambda: scenario([cluster_queue("sales", 50)], with_pod_sets(pending("new", "sales", 1), ("one", 1, 100))),
        "new",
        "QuotaReserved",
        "False",
        "ExceedsMaxQuota",
        "couldn't assign flavors to pod set one: insufficient quota for cpu in flavor default, previously "
        "considered podsets requests (0) + current podset request (100) > maximum capacity (50)",
        "couldn't assign flavors to pod set one: insufficient quota for cpu in flavor default, previously "
        "considered podsets requests (0) + current podset request (100) > maximum capacity (50)",
        "flavorassigner.go fitsResourceQuota; TestSchedule 'not enough resources'",
    ),
    Row(
        "earlier pod sets fill the flavor",
        # Kueue TestSchedule "partial admission disabled, multiple variable pod sets" (without
        # minCount: this project has no switch to turn partial admission off).
        lambda: scenario(
            [cluster_queue("sales", 50)],
            with_pod_sets(pending("new", "sales", 1), ("one", 20, 1), ("two", 30, 1), ("three", 15, 1)),
        ),
        "new",
        "QuotaReserved",
        "False",
        "ExceedsMaxQuota",
        "couldn't assign flavors to pod set three: insufficient quota for cpu in flavor default, previously "
        "considered podsets requests (50) + current podset request (15) > maximum capacity (50)",
        "couldn't assign flavors to pod set three: insufficient quota for cpu in flavor default, previously "
        "considered podsets requests (50) + current podset request (15) > maximum capacity (50)",
        "flavorassigner.go fitsResourceQuota; TestSchedule 'partial admission disabled, multiple variable pod sets'",
    ),
    Row(
        "a thousand cpus print as 1k",
        lambda: scenario([cluster_queue("cq", 1000)], with_pod_sets(pending("big", "cq", 1), ("main", 2, 1000))),
        "big",
        "QuotaReserved",
        "False",
        "ExceedsMaxQuota",
        "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default, previously "
        "considered podsets requests (0) + current podset request (2k) > maximum capacity (1k)",
        "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default, previously "
        "considered podsets requests (0) + current podset request (2k) > maximum capacity (1k)",
        "pkg/resources/resource_formatter.go (resource.Quantity's canonical form); TestSchedule "
        "'prevent integer overflow when sum of requests over podsets exceeds MaxInt64' (1k)",
    ),
    Row(
        "a resource the ClusterQueue does not have",
        lambda: scenario([cluster_queue("cq", 4)], requesting(pending("in", "cq", 1), "example.com/gpu", "1")),
        "in",
        "QuotaReserved",
        "False",
        "NoMatchingFlavor",
        "couldn't assign flavors to pod set main: resource example.com/gpu unavailable in ClusterQueue",
        "couldn't assign flavors to pod set main: resource example.com/gpu unavailable in ClusterQueue",
        "flavorassigner.go findFlavorForPodSets, resolveNoFitReason",
    ),
    Row(
        "the flavor's node labels exclude the pods",
        lambda: scenario(
            [cluster_queue("cq", 4)],
            selecting(workload("in", queue="cq"), zone="b"),
            flavors=(),
            extra=[flavor("default", {"zone": "a"})],
        ),
        "in",
        "QuotaReserved",
        "False",
        "NoMatchingFlavor",
        "couldn't assign flavors to pod set main: flavor default doesn't match node affinity",
        "couldn't assign flavors to pod set main: flavor default doesn't match node affinity",
        "flavorassigner.go checkFlavorForPodSets",
    ),
    Row(
        "quota fits, the topology does not",
        lambda: tas_objects(required_rack(workload("in", queue="cq", count=3))),
        "in",
        "QuotaReserved",
        "False",
        "TopologyPlacementFailed",
        'couldn\'t assign flavors to pod set main: topology "racks" allows to fit only 2 out of 3 pod(s)',
        'couldn\'t assign flavors to pod set main: topology "racks" allows to fit only 2 out of 3 pod(s)',
        "pkg/cache/scheduler/tas_flavor_snapshot.go notFitMessage",
    ),
    Row(
        "victims chosen",
        full_cq,
        "in",
        "QuotaReserved",
        "False",
        "WaitingForPreemptedWorkloads",
        GAP_2 + ". Pending the preemption of 1 workload(s)",
        GAP_2 + ". Pending the preemption of 1 workload(s)",
        "pkg/scheduler/scheduler.go markPreemptionOutcome; TestEntryMarkPreemptionOutcome 'pending preemption'",
    ),
    Row(
        "pending beside its reason",
        full_cq,
        "in",
        "Admitted",
        "False",
        "NoReservation",
        "The workload has no reservation",
        "The workload has no reservation",
        "pkg/workload/admissionchecks.go SyncAdmittedCondition; TestSchedule (every pending workload)",
        decision=False,
    ),
    Row(
        "a closed preemption gate",
        lambda: full_cq(gated(pending("in", "cq", 2, priority=1), "gate")),
        "in",
        "QuotaReserved",
        "False",
        "AdmissionGated",
        "Workload requires preemption, but it's gated",
        "Workload requires preemption, but it's gated",
        "scheduler.go processEntry; TestSchedule 'block preemptions and signal `BlockedOnPreemptionGates` ...'",
    ),
    Row(
        "a closed preemption gate (the signal)",
        lambda: full_cq(gated(pending("in", "cq", 2, priority=1), "gate")),
        "in",
        "BlockedOnPreemptionGates",
        "True",
        "PreemptionGated",
        "Workload requires preemption, but it's gated",
        "Workload requires preemption, but it's gated",
        "scheduler.go requeueAndUpdate; pkg/workload/workload.go SetBlockedOnPreemptionGatesCondition",
        decision=False,
    ),
    Row(
        "the ClusterQueue is stopped",
        lambda: scenario([stopped(cluster_queue("cq", 4))], pending("in", "cq", 1)),
        "in",
        "QuotaReserved",
        "False",
        "Suspended",
        "ClusterQueue cq is inactive",
        "ClusterQueue cq is inactive",
        "scheduler.go nominate; pkg/controller/core/workload_controller.go getQueueBlocker",
    ),
    Row(
        "the LocalQueue is stopped",
        lambda: [*scenario([cluster_queue("cq", 4)]), stopped(local_queue("held", "cq")), pending("in", "held").obj()],
        "in",
        "QuotaReserved",
        "False",
        "Suspended",
        "LocalQueue held is inactive",
        "LocalQueue held is inactive",
        "workload_controller.go getQueueBlocker",
    ),
    Row(
        "no such LocalQueue",
        unknown_local_queue,
        "in",
        "QuotaReserved",
        "False",
        "Misconfigured",
        "LocalQueue missing doesn't exist",
        "LocalQueue missing doesn't exist",
        "workload_controller.go getQueueBlocker",
    ),
    Row(
        "no such ClusterQueue",
        unknown_cluster_queue,
        "in",
        "QuotaReserved",
        "False",
        "Misconfigured",
        "ClusterQueue ghost doesn't exist",
        "ClusterQueue ghost doesn't exist",
        "workload_controller.go getQueueBlocker",
    ),
    Row(
        "the namespace is not selected",
        lambda: scenario([namespace_selected(cluster_queue("cq", 4))], pending("in", "cq", 1)),
        "in",
        "QuotaReserved",
        "False",
        "Misconfigured",
        "workload namespace doesn't match ClusterQueue selector",
        "workload namespace doesn't match ClusterQueue selector",
        "pkg/workload/resources.go ErrNamespaceMismatch",
    ),
    Row(
        "deactivated while pending",
        lambda: scenario([cluster_queue("cq", 4)], inactive(pending("in", "cq", 1))),
        "in",
        "QuotaReserved",
        "False",
        "Deactivated",
        "The workload is deactivated",
        "The workload is deactivated",
        "workload_controller.go resolveGranularUnadmittedQuotaReservedCondition",
    ),
    Row(
        "preemption delayed (YuniKorn's delay)",
        delayed,
        "in",
        "QuotaReserved",
        "False",
        "WaitingForQuota",
        GAP_2 + "; preemption delayed until 2026-11-30T01:00:00Z "
        "(preemption-operator.io/preemption-delay of ClusterQueue cq)",
        None,
        "none: Kueue preempts in the first cycle",
        differs="the delay is YuniKorn's; the message says until when, Kueue's reason is kept",
    ),
    # -- evictions ----------------------------------------------------------------------------------------
    Row(
        "preempted within its ClusterQueue",
        full_cq,
        "low",
        "Evicted",
        "True",
        "Preempted",
        PREEMPTED_IN_CQ,
        PREEMPTED_IN_CQ,
        "pkg/scheduler/preemption/preemption.go preemptionMessage; TestPreemptionWhenWorkloadModifiedConcurrently",
    ),
    Row(
        "preempted within its ClusterQueue (the reason)",
        full_cq,
        "low",
        "Preempted",
        "True",
        "InClusterQueue",
        PREEMPTED_IN_CQ,
        PREEMPTED_IN_CQ,
        "preemption.go IssuePreemptions; TestPreemptionWhenWorkloadModifiedConcurrently",
    ),
    Row(
        "reclaimed by the cohort",
        cohort_reclaim,
        "victim",
        "Preempted",
        "True",
        "InCohortReclamation",
        RECLAIMED,
        RECLAIMED,
        "preemption.go preemptionMessage, buildCQPath",
    ),
    Row(
        "reclaimed by a borrowing preemptor",
        lambda: cohort_reclaim(borrow=True),
        "victim",
        "Preempted",
        "True",
        "InCohortReclaimWhileBorrowing",
        RECLAIMED_WHILE_BORROWING,
        RECLAIMED_WHILE_BORROWING,
        "preemption.go HumanReadablePreemptionReasons",
    ),
    Row(
        "chosen by a PreemptionConfig rule",
        configurable,
        "low",
        "Preempted",
        "True",
        "ConfigurablePreemption",
        "Preempted by default/in because of preemption config cfg rule r/0",
        None,
        "Kueue's configurable-preemption proposal (not released)",
        differs="the message the proposal describes: it names the config and rule",
    ),
    Row(
        "an opted-out victim taken as last resort",
        opted_out,
        "low",
        "Preempted",
        "True",
        "InClusterQueue",
        PREEMPTED_IN_CQ + " (opted out of preemption; chosen as last resort)",
        PREEMPTED_IN_CQ,
        "preemption.go preemptionMessage",
        differs="YuniKorn's soft opt-out: the Preempted condition says the opt-out was overridden",
    ),
    Row(
        "quota given back after a preemption",
        full_cq,
        "low",
        "QuotaReserved",
        "False",
        "PendingEvaluation",
        PREEMPTED_IN_CQ,
        PREEMPTED_IN_CQ,
        "pkg/controller/jobframework/reconciler.go (eviction handled once the job stopped)",
        decision=False,
    ),
    Row(
        "requeued after a preemption",
        full_cq,
        "low",
        "Requeued",
        "True",
        "Preempted",
        PREEMPTED_IN_CQ,
        PREEMPTED_IN_CQ,
        "jobframework/reconciler.go: Requeued=True for Preempted and NodeFailures",
        decision=False,
    ),
    Row(
        "no reservation after a preemption",
        full_cq,
        "low",
        "Admitted",
        "False",
        "NoReservation",
        "The workload has no reservation",
        "The workload has no reservation",
        "pkg/workload/admissionchecks.go SyncAdmittedCondition",
        decision=False,
    ),
    Row(
        "deactivated while admitted",
        lambda: scenario([cluster_queue("cq", 4)], inactive(admitted("off", "cq", 1))),
        "off",
        "Evicted",
        "True",
        "Deactivated",
        "The workload is deactivated",
        "The workload is deactivated",
        "workload_controller.go Reconcile (spec.active false)",
    ),
    Row(
        "deactivated: not requeued",
        lambda: scenario([cluster_queue("cq", 4)], inactive(admitted("off", "cq", 1))),
        "off",
        "Requeued",
        "False",
        "Deactivated",
        "The workload is deactivated",
        "The workload is deactivated",
        "jobframework/reconciler.go (Requeued=False with the eviction's reason)",
        decision=False,
    ),
    Row(
        "deactivated: its pending reason",
        lambda: scenario([cluster_queue("cq", 4)], inactive(admitted("off", "cq", 1))),
        "off",
        "QuotaReserved",
        "False",
        "Deactivated",
        "The workload is deactivated",
        "The workload is deactivated",
        "workload_controller.go resolveGranularUnadmittedQuotaReservedCondition",
        decision=False,
    ),
    Row(
        "drained by its ClusterQueue",
        lambda: scenario([stopped(cluster_queue("cq", 4), "HoldAndDrain")], admitted("a", "cq", 1)),
        "a",
        "Evicted",
        "True",
        "ClusterQueueStopped",
        "The ClusterQueue is stopped",
        "The ClusterQueue is stopped",
        "workload_controller.go reconcileOnClusterQueueActiveState",
    ),
    Row(
        "drained by its ClusterQueue: requeued",
        lambda: scenario([stopped(cluster_queue("cq", 4), "HoldAndDrain")], admitted("a", "cq", 1)),
        "a",
        "Requeued",
        "True",
        "ClusterQueueStopped",
        "The ClusterQueue is stopped",
        "The ClusterQueue is stopped",
        "jobframework/reconciler.go; workload_controller.go (ClusterQueueRestarted)",
        differs="Kueue writes Requeued=False until the queue restarts, then True (ClusterQueueRestarted); "
        "the engine has no restart to observe and requeues at once",
        kueue_status="False",
        decision=False,
    ),
    Row(
        "drained by its LocalQueue",
        lambda: [
            *scenario([cluster_queue("cq", 4)]),
            stopped(local_queue("held", "cq"), "HoldAndDrain"),
            _in_queue(admitted("a", "cq", 1), "held"),
        ],
        "a",
        "Evicted",
        "True",
        "LocalQueueStopped",
        "The LocalQueue is stopped",
        "The LocalQueue is stopped",
        "workload_controller.go reconcileOnLocalQueueActiveState",
    ),
    Row(
        "admitted again after an eviction",
        lambda: scenario([cluster_queue("cq", 4)], preempted_earlier(pending("back", "cq", 1))),
        "back",
        "Preempted",
        "False",
        "QuotaReserved",
        "Previously: " + PREEMPTED_IN_CQ,
        "Previously: " + PREEMPTED_IN_CQ,
        "pkg/workload/workload.go SetQuotaReservation, resetActiveCondition",
        decision=False,
    ),
]


def _in_queue(builder: WorkloadBuilder, queue: str) -> Obj:
    body = builder.obj()
    body["spec"]["queueName"] = queue
    return body


# `Workload has overlapping preemption targets with another workload` (WaitingForQuota) is written
# when two preemptors of one cycle want the same victim; the engine re-plans an entry once another
# entry's victims are taken out of the snapshot, so no scenario reaches it. Kueue: scheduler.go
# processEntry (markSkipped).
OVERLAP = "Workload has overlapping preemption targets with another workload"


def _ids(row: Row) -> str:
    return f"{row.name} [{row.condition}]"


@pytest.mark.parametrize("run", [simulate, simulate_cli], ids=["simulate", "cli"])
@pytest.mark.parametrize("row", TABLE, ids=_ids)
def test_simulate_writes_the_table(row: Row, run: Any) -> None:
    outcome = run(row.objects(), max_cycles=1)
    condition = outcome.condition(row.workload, row.condition)
    assert condition is not None, outcome.statuses[row.workload]
    assert (condition["status"], condition["reason"], condition["message"]) == (row.status, row.reason, row.message)


def _decision(result: CycleResult, row: Row) -> tuple[str, str] | None:
    """(reason, message) the engine decided in cycle 1 for the row's workload and condition."""
    for p in result.pending:
        if p.workload.name == row.workload and row.condition == "QuotaReserved":
            return p.reason, p.message
    for e in result.evicted:
        if e.workload.name == row.workload and row.condition == "Evicted":
            return e.reason, e.message
    for q in result.preempted:
        if q.victim.name == row.workload and row.condition in ("Evicted", "Preempted"):
            evicted, preempted = wl_status.eviction_messages(q)
            return ("Preempted", evicted) if row.condition == "Evicted" else (q.target.reason, preempted)
    return None


@pytest.mark.parametrize("row", [r for r in TABLE if r.decision], ids=_ids)
def test_engine_decides_the_table(row: Row) -> None:
    assert _decision(one_cycle(row.objects()), row) == (row.reason, row.message)


@pytest.mark.parametrize("row", [r for r in TABLE if not r.differs], ids=_ids)
def test_kueue_wording(row: Row) -> None:
    assert row.message == row.kueue and not row.kueue_status, row.source


@pytest.mark.parametrize("row", [r for r in TABLE if r.differs], ids=_ids)
def test_differences_are_explained(row: Row) -> None:
    assert (row.message, row.status) != (row.kueue, row.kueue_status or row.status) and len(row.differs) > 20


def test_every_reason_the_engine_writes_is_in_the_table() -> None:
    reasons = {
        scheduler.WAITING_FOR_QUOTA,
        scheduler.WAITING_FOR_PREEMPTED,
        scheduler.NO_MATCHING_FLAVOR,
        scheduler.EXCEEDS_MAX_QUOTA,
        scheduler.TOPOLOGY_PLACEMENT_FAILED,
        scheduler.SUSPENDED,
        scheduler.MISCONFIGURED,
        scheduler.ADMISSION_GATED,
        wl_status.PREEMPTION_GATED,
        "Deactivated",
        "PendingEvaluation",
        "NoReservation",
        *candidates.HUMAN_REASONS,
        "Preempted",
        "ClusterQueueStopped",
        "LocalQueueStopped",
        "QuotaReserved",
    }
    missing = reasons - {r.reason for r in TABLE} - {candidates.IN_COHORT_FAIR_SHARING}  # no fair sharing
    assert not missing


def test_the_overlap_message_is_kueues() -> None:
    import inspect

    assert f'"{OVERLAP}"' in inspect.getsource(scheduler)
