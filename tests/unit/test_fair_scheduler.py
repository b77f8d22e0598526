"""The scheduler's fair-sharing cases (issue 17): Kueue v0.19.2's TestScheduleForFairSharing
(`pkg/scheduler/scheduler_fs_test.go`), case by case, through one engine scheduling cycle with
fair sharing on; a representative subset also through `simulate` and `preemption-operator
simulate --fair-sharing` (stopped after one cycle).

Each case asserts what Kueue's asserts for the cycle: the workloads admitted in it (ClusterQueue,
flavor per resource, pod count), the workloads preempted (Preempted reason and message) and the
QuotaReserved reason and message of those left pending. Kueue's names with underscores are spelled
with hyphens and its upper-case Cohort names are lowered (`Cohort-A` -> `cohort-a`, `A` ->
`cohort-a`): Kubernetes names. As in Kueue's test, the namespaces `eng-alpha`, `eng-beta`,
`eng-gamma` (label dep=eng), `sales` (dep=sales) and `default` exist, and its shared ClusterQueues
`sales` and `eng-alpha`/`eng-beta` (cohort `eng`) are present in the cases that use them.

Not translated:
- TestScheduleForFairSharing's shared ClusterQueues `flavor-nonexistent-cq` and `lend-a`/`lend-b`
  and their LocalQueues: no fair-sharing case queues a workload to them.
- TestScheduleForFairSharing's wantSkippedPreemptions (the AdmissionCyclePreemptionSkips metric)
  and wantEvents: the project has no such metric, and its events are covered in test_events.py;
  the statuses those cases check are asserted here.
- TestScheduleForFairSharing runs each case four times over the WorkloadRequestUseMergePatch and
  UnadmittedWorkloadsObservability gates: API write modes, not decisions; each case runs once.
- TestScheduleRecomputePreemptionTargets (`scheduler_recompute_preemption_test.go`), all cases:
  they exercise the RecomputePreemptionTargetsUponOverlap / RecomputeAssignmentUponPreemption-
  TargetsOverlap gates (re-planning a preemptor whose targets overlap, TAS recomputation); the
  project models the gates off (an overlapping preemptor is skipped for the cycle), which is the
  case "multiple preemptions skip overlapping preemption targets" below.
- TestScheduleForAFS / TestSecondPassDoesNotRepushEntryPenalty (`scheduler_afs*_test.go`):
  AdmissionFairSharing (LocalQueue usage), not modelled.
- TestScheduleForTAS* (`scheduler_tas_test.go`): topology-aware scheduling with fair sharing is
  not what these cases cover; TAS has its own tests.
- TestScheduleConcurrentAdmission (`scheduler_concurrent_admission_test.go`): concurrent admission
  (workload slices), not modelled.
- `fair_sharing_iterator_test.go`: not in v0.19.2; the iterator's order is tested through the
  cases below and in test_fair_ordering.py.
- TestSchedule (`scheduler_test.go`) has no case with fair sharing enabled.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from builders import (
    T0,
    Obj,
    WorkloadBuilder,
    cluster_queue,
    cohort,
    local_queue,
    namespace,
    one_cycle,
    resource_flavor,
    resource_group,
    simulate,
    simulate_cli,
    with_fungibility,
    with_resource_groups,
)
from preemption_operator.engine import fair_sharing as fs
from preemption_operator.engine.candidates import preemption_message

ON = fs.FairSharing(enabled=True)
NOW = T0
"""Kueue's `now`: the cycles run at the time the admitted workloads reserved quota."""

NO_LONGER_FITS = ("WaitingForQuota", "Workload no longer fits after processing another workload")
FLAVORS = ("default", "on-demand", "spot", "model-a")
"""TestScheduleForFairSharing's ResourceFlavors."""
GPU = "example.com/gpu"


# -- Kueue's fixtures -------------------------------------------------------------------------------------


def namespaces() -> list[Obj]:
    return [
        namespace("default"),
        namespace("eng-alpha", {"dep": "eng"}),
        namespace("eng-beta", {"dep": "eng"}),
        namespace("eng-gamma", {"dep": "eng"}),
        namespace("sales", {"dep": "sales"}),
        namespace("lend", {"dep": "lend"}),
    ]


def dep_selector(cq: Obj, dep: str) -> Obj:
    cq["spec"]["namespaceSelector"] = {"matchExpressions": [{"key": "dep", "operator": "In", "values": [dep]}]}
    return cq


def cq(
    name: str,
    *groups: Obj,
    cohort_name: str | None = None,
    weight: str | None = None,
    **kwargs: Any,
) -> Obj:
    """A ClusterQueue with these resource groups (`resource_group` form)."""
    body = with_resource_groups(cluster_queue(name, None, cohort=cohort_name, **kwargs), *groups)
    if weight is not None:
        body["spec"]["fairSharing"] = {"weight": weight}
    return body


def coh(name: str, *groups: Obj, parent: str | None = None) -> Obj:
    body = cohort(name, parent)
    if groups:
        with_resource_groups(body, *groups)
    return body


def cpu(flavors: Mapping[str, int | str | Mapping[str, Any]]) -> Obj:
    """One resource group of cpu: {flavor: nominal or quota(...)}."""
    return resource_group({f: {"cpu": q} for f, q in flavors.items()})


def limits(nominal: int | str, borrowing: int | str | None = None, lending: int | str | None = None) -> Obj:
    return {"nominal": nominal, "borrowingLimit": borrowing, "lendingLimit": lending}


def eng_cluster_queues() -> list[Obj]:
    """Kueue's `eng-alpha` and `eng-beta` (cohort `eng`, StrictFIFO, namespaces with dep=eng)."""
    alpha = cq(
        "eng-alpha",
        cpu({"on-demand": limits(50, 50), "spot": limits(100, 0)}),
        cohort_name="eng",
        queueing_strategy="StrictFIFO",
    )
    beta = cq(
        "eng-beta",
        cpu({"on-demand": limits(50, 10), "spot": limits(0, 100)}),
        resource_group({"model-a": {GPU: limits(20, 0)}}),
        cohort_name="eng",
        queueing_strategy="StrictFIFO",
        reclaim="Any",
        within="LowerPriority",
    )
    return [dep_selector(alpha, "eng"), dep_selector(beta, "eng")]


def sales_cluster_queue() -> Obj:
    return dep_selector(cq("sales", cpu({"default": limits(50, 0)}), queueing_strategy="StrictFIFO"), "sales")


def objects(
    cluster_queues: Iterable[Obj],
    queues: Iterable[tuple[str, str, str]],
    *workloads: WorkloadBuilder,
    cohorts: Iterable[Obj] = (),
) -> list[Obj]:
    """The namespaces, flavors, cohorts, ClusterQueues, LocalQueues (namespace, name, ClusterQueue)
    and workloads of one case."""
    return [
        *namespaces(),
        *(resource_flavor(f) for f in FLAVORS),
        *cohorts,
        *cluster_queues,
        *(local_queue(name, target, ns) for ns, name, target in queues),
        *(w.obj() for w in workloads),
    ]


ENG_QUEUES = [("eng-alpha", "main", "eng-alpha"), ("eng-beta", "main", "eng-beta")]


def wl(
    name: str,
    ns: str,
    queue: str,
    requests: Mapping[str, int | str],
    *,
    count: int = 1,
    pod_set: str = "main",
    **kwargs: Any,
) -> WorkloadBuilder:
    """A workload of one pod set (`pod_set`, Kueue's `one` or the default `main`) of `count` pods
    requesting `requests` each."""
    extra = {r: q for r, q in requests.items() if r != "cpu"}
    builder = WorkloadBuilder(
        name, namespace=ns, queue=queue, cpu=requests.get("cpu"), requests=extra, count=count, **kwargs
    )
    builder.body["spec"]["podSets"][0]["name"] = pod_set
    return builder


def reserved(builder: WorkloadBuilder, cq_name: str, flavor: str, only: Sequence[str] = ()) -> WorkloadBuilder:
    """Kueue's ReserveQuotaAt(now) / SimpleReserveQuota: quota of `flavor` reserved in `cq_name`
    (for the resources in `only`, when given, as Kueue's admission may list fewer than requested)."""
    builder.admitted(cq_name, at=NOW, flavor=flavor)
    assignment = builder.body["status"]["admission"]["podSetAssignments"][0]
    assignment["name"] = builder.body["spec"]["podSets"][0]["name"]
    if only:
        assignment["flavors"] = {r: f for r, f in assignment["flavors"].items() if r in only}
        assignment["resourceUsage"] = {r: q for r, q in assignment["resourceUsage"].items() if r in only}
    return builder


# -- running a case ----------------------------------------------------------------------------------------


@dataclass
class Cycle:
    """What one scheduling cycle decided; workloads by `namespace/name`."""

    admitted: dict[str, tuple[str, list[dict[str, str]], list[int]]]
    """-> (ClusterQueue, flavor per resource of each pod set, pod count of each pod set)."""
    preempted: dict[str, tuple[str, str]]
    """-> (Preempted reason, message)."""
    pending: dict[str, tuple[str, str]]
    """-> (QuotaReserved reason, message)."""


def _assignments(pod_sets: Iterable[Mapping[str, Any]]) -> tuple[list[dict[str, str]], list[int]]:
    pod_sets = list(pod_sets)
    return [dict(ps["flavors"]) for ps in pod_sets], [int(ps["count"]) for ps in pod_sets]


def run(case: list[Obj], path: str = "engine", fair_sharing: fs.FairSharing = ON) -> Cycle:
    """One cycle at NOW through `path`: "engine", "simulate" or "cli" (`--fair-sharing`)."""
    if path == "engine":
        result = one_cycle(case, NOW, fair_sharing)
        return Cycle(
            {a.workload.key: (a.cluster_queue, *_assignments(a.pod_sets)) for a in result.admitted},
            {
                p.victim.key: (
                    p.target.reason,
                    preemption_message(p.target, p.preemptor, p.preemptor_path, p.victim_path),
                )
                for p in result.preempted
            },
            {p.workload.key: (p.reason, p.message) for p in result.pending},
        )
    if path == "simulate":
        outcome = simulate(case, NOW, max_cycles=1, fair_sharing=fair_sharing)
    else:
        flags = ["--fair-sharing"] if fair_sharing.enabled else []
        outcome = simulate_cli(case, NOW, max_cycles=1, flags=flags)
    data = json.loads(json.dumps(outcome.data))
    statuses = {f"{w['namespace']}/{w['name']}": w["status"] for w in data["workloads"]}
    actions = [a for a in data["actions"] if a["cycle"] == 1]
    admitted = {
        a["workload"]: (a["clusterQueue"], *_assignments(statuses[a["workload"]]["admission"]["podSetAssignments"]))
        for a in actions
        if a["action"] == "Admitted"
    }
    pending = {}
    for a in actions:
        if a["action"] != "Pending":
            continue
        condition = next(c for c in statuses[a["workload"]]["conditions"] if c["type"] == "QuotaReserved")
        pending[a["workload"]] = (condition["reason"], condition["message"])
    preempted = {a["workload"]: (a["reason"], a["message"]) for a in actions if a["action"] == "Preempted"}
    return Cycle(admitted, preempted, pending)


def fair_message(uid: str, job_uid: str, reason: str, preemptor_path: str, victim_path: str) -> str:
    return (
        f"Preempted to accommodate a workload (UID: {uid}, JobUID: {job_uid}) due to {reason}; "
        f"preemptor path: {preemptor_path}; preemptee path: {victim_path}"
    )


IN_CQ = "prioritization in the ClusterQueue"
RECLAIM = "reclamation within the cohort"
FAIR = "Fair Sharing within the cohort"


# -- TestScheduleForFairSharing (scheduler_fs_test.go) -----------------------------------------------------


def case_lowest_share_first() -> list[Obj]:
    shared = cq("eng-shared", cpu({"on-demand": limits(10, 0)}), cohort_name="eng")
    return objects(
        [*eng_cluster_queues(), shared],
        ENG_QUEUES,
        reserved(wl("all-nominal", "eng-alpha", "main", {"cpu": 1}, count=50, pod_set="one"), "eng-alpha", "on-demand"),
        # Uses half of the shared quota.
        reserved(wl("borrowing", "eng-beta", "main", {"cpu": 1}, count=55, pod_set="one"), "eng-beta", "on-demand"),
        wl("older-new", "eng-beta", "main", {"cpu": 1}, pod_set="one", created=NOW - timedelta(minutes=1)),
        wl("new", "eng-alpha", "main", {"cpu": 1}, count=5, pod_set="one", created=NOW),
    )


def test_schedule_workload_with_lowest_share_first() -> None:
    """TestScheduleForFairSharing, case "with fair sharing: schedule workload with lowest share
    first": eng-alpha's head would leave it borrowing 5, eng-beta's older one 6, so eng-alpha's goes
    first and fills on-demand. eng-beta's head, nominated for on-demand, no longer fits; it is not
    moved to spot (which it may borrow) in the same cycle."""
    got = run(case_lowest_share_first())
    assert got.admitted == {"eng-alpha/new": ("eng-alpha", [{"cpu": "on-demand"}], [5])}
    assert got.pending == {"eng-beta/older-new": NO_LONGER_FITS}
    assert got.preempted == {}


def case_nominal_first() -> list[Obj]:
    a = cq(
        "fs-nom-a",
        cpu({"on-demand": limits(50, 0)}),
        cpu({"spot": limits(50, 50)}),
        cohort_name="fs-nom",
    )
    b = cq(
        "fs-nom-b",
        cpu({"on-demand": limits(10, 50)}),
        cpu({"spot": limits(50, 0)}),
        cohort_name="fs-nom",
    )
    return objects(
        [*eng_cluster_queues(), a, b],
        [*ENG_QUEUES, ("eng-alpha", "fs-nom", "fs-nom-a"), ("eng-beta", "fs-nom", "fs-nom-b")],
        reserved(wl("spot-heavy", "eng-alpha", "fs-nom", {"cpu": 1}, count=80, pod_set="one"), "fs-nom-a", "spot"),
        reserved(wl("light-usage", "eng-beta", "fs-nom", {"cpu": 1}, count=5, pod_set="one"), "fs-nom-b", "on-demand"),
        wl("borrow-wl", "eng-beta", "fs-nom", {"cpu": 1}, count=15, pod_set="one", created=NOW - timedelta(minutes=1)),
        wl("nom-wl", "eng-alpha", "fs-nom", {"cpu": 1}, count=45, pod_set="one", created=NOW),
    )


def test_nominal_first_ordering_admits_workload_fitting_within_nominal() -> None:
    """TestScheduleForFairSharing, case "with fair sharing: nominal-first ordering admits workload
    fitting within nominal despite higher CQ DRS": fs-nom-a borrows spot (the higher share), but its
    head fits within its on-demand nominal, so it goes before fs-nom-b's borrowing head."""
    got = run(case_nominal_first())
    assert got.admitted == {"eng-alpha/nom-wl": ("fs-nom-a", [{"cpu": "on-demand"}], [45])}
    assert got.pending == {"eng-beta/borrow-wl": NO_LONGER_FITS}


def three_leaves(cohorts: list[Obj], a_quota: int, admitted_c: int) -> list[Obj]:
    """cq-a (cohort `SUB-A` or `Cohort-A`), cq-b (5 cpu) and cq-c (0) in `Cohort-B`; c0 uses
    `admitted_c` in cq-c; wl-a and wl-b (5 cpu each) are pending in cq-a and cq-b."""
    a_parent = "sub-a" if any(c["metadata"]["name"] == "sub-a" for c in cohorts) else "cohort-a"
    cqs = [
        cq("cq-a", cpu({"on-demand": a_quota}), cohort_name=a_parent),
        cq("cq-b", cpu({"on-demand": 5}), cohort_name="cohort-b"),
        cq("cq-c", cpu({"on-demand": 0}), cohort_name="cohort-b"),
    ]
    queues = [("eng-alpha", f"lq-{x}", f"cq-{x}") for x in "abc"]
    return objects(
        cqs,
        queues,
        reserved(wl("c0", "eng-alpha", "lq-c", {"cpu": admitted_c}, pod_set="one"), "cq-c", "on-demand"),
        wl("wl-a", "eng-alpha", "lq-a", {"cpu": 5}, pod_set="one"),
        wl("wl-b", "eng-alpha", "lq-b", {"cpu": 5}, pod_set="one"),
        cohorts=cohorts,
    )


def on_demand(n: int) -> Obj:
    return cpu({"on-demand": n})


def test_hierarchical_nominal_first_prefers_non_borrowing_subtree() -> None:
    """TestScheduleForFairSharing, case "with fair sharing: hierarchical nominal-first prefers
    non-borrowing subtree": at root, Cohort-A would not borrow with wl-a (5 of its 10), Cohort-B
    would with wl-b (15 of 5)."""
    cohorts = [
        coh("root"),
        coh("cohort-a", on_demand(10), parent="root"),
        coh("cohort-b", parent="root"),
    ]
    got = run(three_leaves(cohorts, 0, 10))
    assert got.admitted == {"eng-alpha/wl-a": ("cq-a", [{"cpu": "on-demand"}], [1])}
    assert got.pending == {"eng-alpha/wl-b": NO_LONGER_FITS}


def test_hierarchical_nominal_first_with_deeper_nesting() -> None:
    """TestScheduleForFairSharing, case "with fair sharing: hierarchical nominal-first with deeper
    nesting": the quota sits in SUB-A, under Cohort-A; the subtree still does not borrow."""
    cohorts = [
        coh("root"),
        coh("cohort-a", parent="root"),
        coh("sub-a", on_demand(10), parent="cohort-a"),
        coh("cohort-b", parent="root"),
    ]
    got = run(three_leaves(cohorts, 0, 10))
    assert got.admitted == {"eng-alpha/wl-a": ("cq-a", [{"cpu": "on-demand"}], [1])}
    assert got.pending == {"eng-alpha/wl-b": NO_LONGER_FITS}


def test_hierarchical_nominal_first_with_mixed_cq_and_cohort_quotas() -> None:
    """TestScheduleForFairSharing, case "with fair sharing: hierarchical nominal-first with mixed CQ
    and cohort quotas": Cohort-A (18 with its queues) would use 13, Cohort-B 24 of 18."""
    cohorts = [
        coh("root"),
        coh("cohort-a", on_demand(10), parent="root"),
        coh("cohort-b", on_demand(10), parent="root"),
    ]
    cqs = [
        cq("cq-a1", on_demand(5), cohort_name="cohort-a"),
        cq("cq-a2", on_demand(3), cohort_name="cohort-a"),
        cq("cq-b", on_demand(5), cohort_name="cohort-b"),
        cq("cq-c", on_demand(3), cohort_name="cohort-b"),
    ]
    queues = [("eng-alpha", f"lq-{x}", f"cq-{x}") for x in ("a1", "a2", "b", "c")]
    case = objects(
        cqs,
        queues,
        reserved(wl("a2-admitted", "eng-alpha", "lq-a2", {"cpu": 6}, pod_set="one"), "cq-a2", "on-demand"),
        reserved(wl("c-admitted", "eng-alpha", "lq-c", {"cpu": 20}, pod_set="one"), "cq-c", "on-demand"),
        wl("wl-a1", "eng-alpha", "lq-a1", {"cpu": 7}, pod_set="one"),
        wl("wl-b", "eng-alpha", "lq-b", {"cpu": 4}, pod_set="one"),
        cohorts=cohorts,
    )
    got = run(case)
    assert got.admitted == {"eng-alpha/wl-a1": ("cq-a1", [{"cpu": "on-demand"}], [1])}
    assert got.pending == {"eng-alpha/wl-b": NO_LONGER_FITS}


def test_hierarchical_nominal_first_per_flavor_ignores_cross_flavor_borrowing() -> None:
    """TestScheduleForFairSharing, case "with fair sharing: hierarchical nominal-first per-flavor
    ignores cross-flavor borrowing": Cohort-A borrows spot, but not the on-demand wl-a asks for."""
    cohorts = [
        coh("root"),
        coh("cohort-a", on_demand(10), parent="root"),
        coh("cohort-b", cpu({"spot": 10}), parent="root"),
    ]
    cqs = [
        cq("cq-a", cpu({"on-demand": 0, "spot": 0}), cohort_name="cohort-a"),
        cq("cq-b", cpu({"on-demand": 5, "spot": 0}), cohort_name="cohort-b"),
    ]
    case = objects(
        cqs,
        [("eng-alpha", "lq-a", "cq-a"), ("eng-alpha", "lq-b", "cq-b")],
        reserved(wl("spot-admitted", "eng-alpha", "lq-a", {"cpu": 5}, pod_set="one"), "cq-a", "spot"),
        reserved(wl("od-admitted", "eng-alpha", "lq-b", {"cpu": 8}, pod_set="one"), "cq-b", "on-demand"),
        wl("wl-a", "eng-alpha", "lq-a", {"cpu": 4}, pod_set="one"),
        wl("wl-b", "eng-alpha", "lq-b", {"cpu": 4}, pod_set="one"),
        cohorts=cohorts,
    )
    got = run(case)
    assert got.admitted == {"eng-alpha/wl-a": ("cq-a", [{"cpu": "on-demand"}], [1])}
    assert got.pending == {"eng-alpha/wl-b": NO_LONGER_FITS}


def case_tournament() -> list[Obj]:
    cohorts = [coh("cohort-a", on_demand(200)), coh("cohort-b", parent="cohort-a"), coh("cohort-c", parent="cohort-a")]
    cqs = [
        cq(name, on_demand(0), cohort_name=parent)
        for name, parent in (("d", "cohort-b"), ("e", "cohort-b"), ("f", "cohort-c"), ("g", "cohort-c"))
    ]
    queues = [("eng-alpha", f"lq-{x}", x) for x in "defg"]
    return objects(
        cqs,
        queues,
        reserved(wl("d0", "eng-alpha", "lq-d", {"cpu": 10}, pod_set="one"), "d", "on-demand"),
        reserved(wl("e0", "eng-alpha", "lq-e", {"cpu": 20}, pod_set="one"), "e", "on-demand"),
        reserved(wl("g0", "eng-alpha", "lq-g", {"cpu": 100}, pod_set="one"), "g", "on-demand"),
        wl("d1", "eng-alpha", "lq-d", {"cpu": 70}, pod_set="one"),
        wl("e1", "eng-alpha", "lq-e", {"cpu": 61}, pod_set="one"),
        wl("f1", "eng-alpha", "lq-f", {"cpu": 1}, pod_set="one"),
        wl("g1", "eng-alpha", "lq-g", {"cpu": 1}, pod_set="one"),
        cohorts=cohorts,
    )


def test_hierarchical_fair_sharing_schedules_workload_which_wins_tournament() -> None:
    """TestScheduleForFairSharing, case "hierarchical fair sharing schedule workload which wins
    tournament": d1 beats e1 in B (d at 80 against e at 81), then B (100) beats C (101) at A,
    although e1 would have left B lower (91)."""
    got = run(case_tournament())
    assert got.admitted == {"eng-alpha/d1": ("d", [{"cpu": "on-demand"}], [1])}
    assert got.pending == {f"eng-alpha/{n}": NO_LONGER_FITS for n in ("e1", "f1", "g1")}


def two_in_a(a_quota: int, b: Obj, c: Obj, *workloads: WorkloadBuilder) -> list[Obj]:
    return objects(
        [b, c],
        [("eng-alpha", "lq-b", "b"), ("eng-alpha", "lq-c", "c")],
        *workloads,
        cohorts=[coh("cohort-a", on_demand(a_quota))],
    )


def test_fair_sharing_schedules_workload_with_lowest_drf_after_admission() -> None:
    """TestScheduleForFairSharing, case "fair sharing schedule workload with lowest drf after
    admission": b would use 60 with b1, c 75 with c1."""
    case = two_in_a(
        100,
        cq("b", on_demand(0), cohort_name="cohort-a"),
        cq("c", on_demand(0), cohort_name="cohort-a"),
        reserved(wl("b0", "eng-alpha", "lq-b", {"cpu": 10}, pod_set="one"), "b", "on-demand"),
        wl("b1", "eng-alpha", "lq-b", {"cpu": 50}, pod_set="one"),
        wl("c1", "eng-alpha", "lq-c", {"cpu": 75}, pod_set="one"),
    )
    got = run(case)
    assert got.admitted == {"eng-alpha/b1": ("b", [{"cpu": "on-demand"}], [1])}
    assert got.pending == {"eng-alpha/c1": NO_LONGER_FITS}


def weighted_pair(weight: str) -> list[Obj]:
    queues = [
        cq("b", on_demand(0), cohort_name="cohort-a", weight=weight, reclaim="Any", within="Never"),
        cq("c", on_demand(0), cohort_name="cohort-a", weight=weight, reclaim="Any", within="Never"),
    ]
    return two_in_a(
        8,
        *queues,
        reserved(wl("b0", "eng-alpha", "lq-b", {"cpu": 4}, pod_set="one"), "b", "on-demand"),
        # High priority for the tie-break.
        wl("b1", "eng-alpha", "lq-b", {"cpu": 4}, pod_set="one", priority=9001),
        wl("c1", "eng-alpha", "lq-c", {"cpu": 4}, pod_set="one", priority=0),
    )


@pytest.mark.parametrize(
    ("weight", "kueue_case"),
    [
        ("0", "fair sharing two queues with weight 0 schedules workload which borrows less"),
        ("123456789", "fair sharing two queues with high weight schedules workload which borrows less"),
    ],
)
def test_two_queues_of_equal_weight_schedule_the_one_which_borrows_less(weight: str, kueue_case: str) -> None:
    """TestScheduleForFairSharing, cases "fair sharing two queues with weight 0 schedules workload
    which borrows less" and "fair sharing two queues with high weight schedules workload which
    borrows less": c1 goes first although b1 has the higher priority, as c borrows less."""
    got = run(weighted_pair(weight))
    assert got.admitted == {"eng-alpha/c1": ("c", [{"cpu": "on-demand"}], [1])}, kueue_case
    assert got.pending == {"eng-alpha/b1": NO_LONGER_FITS}


def test_schedule_singleton_cqs_and_cq_without_cohort() -> None:
    """TestScheduleForFairSharing, case "fair sharing schedule singleton cqs and cq without
    cohort": a's quota is its cohort's, b's its own, c has no cohort; all three are admitted."""
    case = objects(
        [
            cq("a", on_demand(0), cohort_name="cohort-a"),
            cq("b", on_demand(10), cohort_name="cohort-b"),
            cq("c", on_demand(10)),
        ],
        [("eng-alpha", f"lq-{x}", x) for x in "abc"],
        *(wl(f"{x}1", "eng-alpha", f"lq-{x}", {"cpu": 10}, pod_set="one") for x in "abc"),
        cohorts=[coh("cohort-a", on_demand(10)), coh("cohort-b")],
    )
    got = run(case)
    assert got.admitted == {f"eng-alpha/{x}1": (x, [{"cpu": "on-demand"}], [1]) for x in "abc"}
    assert got.pending == {}


def priority_pair(b1: WorkloadBuilder, c1: WorkloadBuilder) -> list[Obj]:
    return objects(
        [cq("b", on_demand(0), cohort_name="cohort-a"), cq("c", on_demand(0), cohort_name="cohort-a")],
        [("eng-alpha", "lq-b", "b"), ("eng-alpha", "lq-c", "c")],
        b1,
        c1,
        cohorts=[coh("cohort-a", on_demand(10)), coh("cohort-b")],
    )


def test_schedule_highest_priority_first() -> None:
    """TestScheduleForFairSharing, case "fair sharing schedule highest priority first": equal shares,
    so the higher priority goes first."""
    case = priority_pair(
        wl("b1", "eng-alpha", "lq-b", {"cpu": 10}, pod_set="one", priority=99),
        wl("c1", "eng-alpha", "lq-c", {"cpu": 10}, pod_set="one", priority=101),
    )
    got = run(case)
    assert got.admitted == {"eng-alpha/c1": ("c", [{"cpu": "on-demand"}], [1])}
    assert got.pending == {"eng-alpha/b1": NO_LONGER_FITS}


def test_schedule_earliest_timestamp_first() -> None:
    """TestScheduleForFairSharing, case "fair sharing schedule earliest timestamp first": equal
    shares and priorities, so the older goes first."""
    case = priority_pair(
        wl("b1", "eng-alpha", "lq-b", {"cpu": 10}, pod_set="one", priority=101, created=NOW + timedelta(seconds=1)),
        wl("c1", "eng-alpha", "lq-c", {"cpu": 10}, pod_set="one", priority=101, created=NOW),
    )
    got = run(case)
    assert got.admitted == {"eng-alpha/c1": ("c", [{"cpu": "on-demand"}], [1])}
    assert got.pending == {"eng-alpha/b1": NO_LONGER_FITS}


def case_highest_share() -> list[Obj]:
    gamma = cq("eng-gamma", cpu({"on-demand": limits(50, 0)}), cohort_name="eng")
    return objects(
        [*eng_cluster_queues(), gamma],
        [*ENG_QUEUES, ("eng-gamma", "main", "eng-gamma")],
        reserved(wl("all-spot", "eng-alpha", "main", {"cpu": 100}), "eng-alpha", "spot"),
        *(reserved(wl(f"alpha{i}", "eng-alpha", "main", {"cpu": 20}), "eng-alpha", "on-demand") for i in range(1, 5)),
        reserved(wl("gamma1", "eng-gamma", "main", {"cpu": 10}), "eng-gamma", "on-demand"),
        *(reserved(wl(f"gamma{i}", "eng-gamma", "main", {"cpu": 20}), "eng-gamma", "on-demand") for i in range(2, 5)),
        wl("preemptor", "eng-beta", "main", {"cpu": 30}, uid="wl-preemptor", job_uid="job-preemptor"),
    )


def reclaim_message(victim_cq: str) -> str:
    return fair_message("wl-preemptor", "job-preemptor", RECLAIM, "/eng/eng-beta", f"/eng/{victim_cq}")


def test_preempt_workload_from_cq_with_the_highest_share() -> None:
    """TestScheduleForFairSharing, case "with fair sharing: preempt workload from CQ with the
    highest share": eng-beta reclaims its nominal from eng-alpha and eng-gamma, one each."""
    got = run(case_highest_share())
    assert got.admitted == {}
    assert got.preempted == {
        "eng-alpha/alpha1": ("InCohortReclamation", reclaim_message("eng-alpha")),
        "eng-gamma/gamma1": ("InCohortReclamation", reclaim_message("eng-gamma")),
    }
    assert got.pending == {
        "eng-beta/preemptor": (
            "WaitingForPreemptedWorkloads",
            "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor on-demand, "
            "30 more needed, insufficient unused quota for cpu in flavor spot, 30 more needed. "
            "Pending the preemption of 2 workload(s)",
        )
    }


OTHER = ("other-alpha", "other-beta", "other-gamma")
OTHER_NAMESPACES = {"other-alpha": "eng-alpha", "other-beta": "eng-beta", "other-gamma": "eng-gamma"}
OTHER_QUEUES = [(ns, "other", name) for name, ns in OTHER_NAMESPACES.items()]


def case_within_cq(reclaim: str | None = None) -> list[Obj]:
    queue = resource_group({"default": {"cpu": 2}})
    cqs = [
        *(cq(name, queue, cohort_name="other", within="LowerPriority", reclaim=reclaim) for name in OTHER),
        cq("resource-bank", resource_group({"default": {"cpu": 3}}), cohort_name="other"),
    ]
    admitted = [
        reserved(wl(victim, ns, "other", {"cpu": 3}, priority=0), cq_name, "default")
        for victim, (cq_name, ns) in zip(("a1", "b1", "c1"), OTHER_NAMESPACES.items(), strict=True)
    ]
    preemptors = [
        wl("preemptor", ns, "other", {"cpu": 3}, priority=100, uid="wl-preemptor", job_uid="job-preemptor")
        for ns in OTHER_NAMESPACES.values()
    ]
    return objects(cqs, OTHER_QUEUES, *admitted, *preemptors)


WITHIN_CQ_UNSET = (
    "Kueue's case leaves spec.preemption.reclaimWithinCohort empty, not the CRD default Never, and its "
    "flavor assigner lets a queue with fair sharing preempt while borrowing when that field is not Never; "
    "the API server (and the engine) default it to Never, so each preemptor, which would borrow, preempts "
    "nobody. The variants below set the field."
)


@pytest.mark.parametrize(
    "reclaim",
    [pytest.param(None, marks=pytest.mark.xfail(reason=WITHIN_CQ_UNSET, strict=True)), "LowerPriority", "Any"],
)
def test_multiple_preemptions_within_cq_when_fair_sharing(reclaim: str | None) -> None:
    """TestScheduleForFairSharing, case "multiple preemptions within cq when fair sharing": each
    of three ClusterQueues preempts its own lower-priority workload in the same cycle, the later
    ones checked, as Kueue does, with the victims of the earlier ones gone."""
    got = run(case_within_cq(reclaim))
    assert got.admitted == {}
    assert got.preempted == {
        f"{ns}/{victim}": (
            "InClusterQueue",
            fair_message("wl-preemptor", "job-preemptor", IN_CQ, f"/other/{c}", f"/other/{c}"),
        )
        for victim, (c, ns) in zip(("a1", "b1", "c1"), OTHER_NAMESPACES.items(), strict=True)
    }
    waiting = (
        "WaitingForPreemptedWorkloads",
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 3 more needed. "
        "Pending the preemption of 1 workload(s)",
    )
    assert got.pending == {f"{ns}/preemptor": waiting for ns in OTHER_NAMESPACES.values()}


def case_overlapping() -> list[Obj]:
    cqs = [
        *(
            cq(
                name,
                resource_group(
                    {"default": dict(sorted({f"{name.removeprefix('other-')}-resource": 1, "cpu": 0}.items()))}
                ),
                cohort_name="other",
                within="LowerPriority",
                reclaim="Any",
            )
            for name in OTHER
        ),
        cq("resource-bank", resource_group({"default": {"cpu": 9}}), cohort_name="other"),
    ]
    return objects(
        cqs,
        OTHER_QUEUES,
        reserved(wl("a1", "eng-alpha", "other", {"alpha-resource": 1}, priority=0), "other-alpha", "default"),
        reserved(wl("b1", "eng-beta", "other", {"beta-resource": 1}, priority=0), "other-beta", "default"),
        # Kueue's admission of c1 lists its cpu only.
        reserved(
            wl("c1", "eng-gamma", "other", {"cpu": 9, "gamma-resource": 1}, priority=0),
            "other-gamma",
            "default",
            only=["cpu"],
        ),
        wl(
            "preemptor",
            "eng-alpha",
            "other",
            {"cpu": 3, "alpha-resource": 1},
            priority=100,
            uid="wl-preemptor",
            job_uid="job-preemptor",
        ),
        wl("pretending-preemptor", "eng-beta", "other", {"cpu": 3, "beta-resource": 1}, priority=99),
    )


def test_multiple_preemptions_skip_overlapping_preemption_targets() -> None:
    """TestScheduleForFairSharing, case "multiple preemptions skip overlapping preemption targets"
    (RecomputeAssignmentUponPreemptionTargetsOverlap off, as the project models it): other-gamma
    uses more than its fair share; other-alpha's head (the higher priority) preempts c1 from it
    and a1 within its queue; other-beta's head needs c1 too and is skipped for the cycle."""
    got = run(case_overlapping())
    assert got.admitted == {}
    assert got.preempted == {
        "eng-alpha/a1": (
            "InClusterQueue",
            fair_message("wl-preemptor", "job-preemptor", IN_CQ, "/other/other-alpha", "/other/other-alpha"),
        ),
        "eng-gamma/c1": (
            "InCohortFairSharing",
            fair_message("wl-preemptor", "job-preemptor", FAIR, "/other/other-alpha", "/other/other-gamma"),
        ),
    }
    assert got.pending == {
        "eng-alpha/preemptor": (
            "WaitingForPreemptedWorkloads",
            "couldn't assign flavors to pod set main: insufficient unused quota for alpha-resource in flavor default, "
            "1 more needed, insufficient unused quota for cpu in flavor default, 3 more needed. "
            "Pending the preemption of 2 workload(s)",
        ),
        "eng-beta/pretending-preemptor": (
            "WaitingForQuota",
            "Workload has overlapping preemption targets with another workload",
        ),
    }


def test_not_enough_resources_with_fair_sharing_enabled() -> None:
    """TestScheduleForFairSharing, case "not enough resources with fair sharing enabled"."""
    case = objects(
        [sales_cluster_queue()],
        [("sales", "main", "sales")],
        wl("new", "sales", "main", {"cpu": 100}, pod_set="one"),
    )
    got = run(case)
    assert got.admitted == {}
    assert got.pending == {
        "sales/new": (
            "ExceedsMaxQuota",
            "couldn't assign flavors to pod set one: insufficient quota for cpu in flavor default, previously "
            "considered podsets requests (0) + current podset request (100) > maximum capacity (50)",
        )
    }


def case_reclaim_over_priority() -> list[Obj]:
    gpus = resource_group({"on-demand": {"gpu": 7}, "spot": {"gpu": 7}})
    alpha = cq("other-alpha", gpus, cohort_name="other", within="LowerPriority", reclaim="LowerPriority")
    beta = cq("other-beta", resource_group({"on-demand": {"gpu": 3}, "spot": {"gpu": 3}}), cohort_name="other")
    return objects(
        [alpha, beta],
        [("eng-alpha", "other", "other-alpha"), ("eng-beta", "other", "other-beta")],
        reserved(wl("a1", "eng-alpha", "other", {"gpu": 5}, priority=50), "other-alpha", "on-demand"),
        reserved(wl("b1", "eng-beta", "other", {"gpu": 5}, priority=50), "other-beta", "spot"),
        wl("preemptor", "eng-alpha", "other", {"gpu": 8}, priority=100, uid="wl-preemptor", job_uid="job-preemptor"),
    )


def test_prefer_reclamation_over_cq_priority_based_preemption() -> None:
    """TestScheduleForFairSharing, case "with fair sharing: prefer reclamation over cq priority
    based preemption; with preemption while borrowing": on-demand needs a1 preempted within the
    queue, spot needs b1 reclaimed from the cohort; spot is the better assignment."""
    got = run(case_reclaim_over_priority())
    assert got.admitted == {}
    assert got.preempted == {
        "eng-beta/b1": (
            "InCohortFairSharing",
            fair_message("wl-preemptor", "job-preemptor", FAIR, "/other/other-alpha", "/other/other-beta"),
        )
    }
    assert got.pending == {
        "eng-alpha/preemptor": (
            "WaitingForPreemptedWorkloads",
            "couldn't assign flavors to pod set main: insufficient unused quota for gpu in flavor on-demand, "
            "3 more needed, insufficient unused quota for gpu in flavor spot, 3 more needed. "
            "Pending the preemption of 1 workload(s)",
        )
    }


def case_local_capacity() -> list[Obj]:
    cohorts = [
        coh("root-cohort", resource_group({"on-demand": {"gpu": 2}, "spot": {"gpu": 0}})),
        coh("child-cohort", resource_group({"on-demand": {"gpu": 5}, "spot": {"gpu": 7}}), parent="root-cohort"),
    ]
    queue1 = with_fungibility(
        cq(
            "queue1",
            resource_group({"on-demand": {"gpu": 3}, "spot": {"gpu": 3}}),
            cohort_name="child-cohort",
            within="LowerPriority",
            reclaim="Any",
        ),
        when_can_borrow="TryNextFlavor",
        when_can_preempt="TryNextFlavor",
    )
    return objects(
        [queue1],
        [("default", "queue1", "queue1")],
        # Exhausts on-demand in the parent cohort.
        reserved(wl("a1", "default", "queue1", {"gpu": 8}), "queue1", "on-demand"),
        # Exhausts spot in the ClusterQueue.
        reserved(wl("a2", "default", "queue1", {"gpu": 3}), "queue1", "spot"),
        wl("a3", "default", "queue1", {"gpu": 1}),
        cohorts=cohorts,
    )


@pytest.mark.parametrize(
    ("fair_sharing", "kueue_case"),
    [(ON, "prefer flavor with most local capacity"), (fs.OFF, "prefer flavor with most local capacity (FS=false)")],
)
def test_prefer_flavor_with_most_local_capacity(fair_sharing: fs.FairSharing, kueue_case: str) -> None:
    """TestScheduleForFairSharing, cases "prefer flavor with most local capacity" and "prefer
    flavor with most local capacity (FS=false)": both flavors borrow; spot borrows within
    child-cohort, on-demand from root-cohort, so spot is chosen, with fair sharing on or off."""
    got = run(case_local_capacity(), fair_sharing=fair_sharing)
    assert got.admitted == {"default/a3": ("queue1", [{"gpu": "spot"}], [1])}, kueue_case
    assert got.preempted == {}
    assert got.pending == {}


def case_no_cohort() -> list[Obj]:
    no_cohort = cq("no-cohort-cq", resource_group({"default": {"cpu": 4}}), within="LowerPriority")
    return objects(
        [no_cohort],
        [("default", "no-cohort-queue", "no-cohort-cq")],
        reserved(wl("nc-low", "default", "no-cohort-queue", {"cpu": 4}, priority=-1), "no-cohort-cq", "default"),
        wl("nc-high", "default", "no-cohort-queue", {"cpu": 4}, priority=100, uid="wl-nc-high", job_uid="job-nc-high"),
    )


def test_in_cq_preemption_for_cq_without_cohort() -> None:
    """TestScheduleForFairSharing, case "fair sharing: in-CQ preemption for CQ without cohort; repro
    for nil pointer panic"."""
    got = run(case_no_cohort())
    assert got.admitted == {}
    assert got.preempted == {
        "default/nc-low": (
            "InClusterQueue",
            fair_message("wl-nc-high", "job-nc-high", IN_CQ, "/no-cohort-cq", "/no-cohort-cq"),
        )
    }
    assert got.pending == {
        "default/nc-high": (
            "WaitingForPreemptedWorkloads",
            "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, "
            "4 more needed. Pending the preemption of 1 workload(s)",
        )
    }


def case_preemption_over_borrowing() -> list[Obj]:
    pob = with_fungibility(
        cq(
            "fs-pob-cq",
            cpu({"on-demand": limits(5, 0), "spot": limits(0, 5)}),
            cohort_name="fs-pob-cohort",
            weight="1",
            within="LowerPriority",
        ),
        when_can_borrow="TryNextFlavor",
        when_can_preempt="TryNextFlavor",
        preference="PreemptionOverBorrowing",
    )
    lender = cq("fs-pob-lender", cpu({"on-demand": 0, "spot": 5}), cohort_name="fs-pob-cohort", weight="1")
    return objects(
        [pob, lender],
        [("default", "fs-pob-queue", "fs-pob-cq")],
        reserved(wl("fs-low-pob", "default", "fs-pob-queue", {"cpu": 5}, priority=-1), "fs-pob-cq", "on-demand"),
        wl(
            "fs-high-pob",
            "default",
            "fs-pob-queue",
            {"cpu": 5},
            priority=0,
            uid="wl-fs-high-pob",
            job_uid="job-fs-high-pob",
        ),
    )


def test_preemption_over_borrowing_with_fair_sharing() -> None:
    """TestScheduleForFairSharing, case "PreemptionOverBorrowing with fair sharing: preempt in first
    flavor instead of borrowing in second"."""
    got = run(case_preemption_over_borrowing())
    assert got.admitted == {}
    path = "/fs-pob-cohort/fs-pob-cq"
    assert got.preempted == {
        "default/fs-low-pob": ("InClusterQueue", fair_message("wl-fs-high-pob", "job-fs-high-pob", IN_CQ, path, path))
    }
    assert got.pending == {
        "default/fs-high-pob": (
            "WaitingForPreemptedWorkloads",
            "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor on-demand, "
            "5 more needed. Pending the preemption of 1 workload(s)",
        )
    }


# -- a representative subset three ways ----------------------------------------------------------------------

THREE_WAYS = {
    "lowest share first": case_lowest_share_first,
    "nominal-first": case_nominal_first,
    "wins tournament": case_tournament,
    "highest share": case_highest_share,
    "overlapping targets": case_overlapping,
    "within cq": lambda: case_within_cq("Any"),
    "reclamation over priority": case_reclaim_over_priority,
    "preemption over borrowing": case_preemption_over_borrowing,
}


@pytest.mark.parametrize("path", ["simulate", "cli"])
@pytest.mark.parametrize("name", sorted(THREE_WAYS))
def test_first_cycle_is_the_same_through_simulate_and_the_cli(name: str, path: str) -> None:
    """The cases above through `simulate` and `preemption-operator simulate --fair-sharing`, stopped
    after one cycle, decide as the engine's cycle does, with the same statuses."""
    case = THREE_WAYS[name]()
    assert run(case, path) == run(case)


def test_fair_sharing_off_orders_classically() -> None:
    """Without fair sharing, case "schedule workload with lowest share first" admits in the classic
    order: both heads borrow, so the older one, eng-beta's, goes first."""
    got = run(case_lowest_share_first(), fair_sharing=fs.OFF)
    assert got.admitted["eng-beta/older-new"] == ("eng-beta", [{"cpu": "on-demand"}], [1])
