"""Kueue v0.19.2's waitForPodsReady integration cases, translated to the engine with a controllable
clock: test/integration/singlecluster/scheduler/podsready/scheduler_test.go (SCHEDULER_TEST below),
Describe "SchedulerWithWaitForPodsReady" (blockAdmission: true) and
"SchedulerWithWaitForPodsReadyNonblockingMode" (blockAdmission: false). Each test names the ginkgo
`It` it translates.

How a case is driven: `Cluster.at(now)` runs `simulate.run` (the scheduler and Kueue's workload
controller, until nothing changes) at that time with the workloads as the previous run left them;
the clock only moves between runs. What Kueue's harness does by hand is done to the wire objects
between runs: PodsReady=True is a condition added to the status, deleting a workload leaves it out
of the next run, re-activating sets spec.active true, FinishWorkloads adds Finished=True. Kueue's
FinishEvictionForWorkloads (the test, standing in for the job controller, unsets the quota
reservation of an evicted workload) needs no step: the engine releases an evicted workload's
quota at once (no job to stop).

Kueue's configuration is kept: backoffBaseSeconds 1, the quotas (prod-cq and dev-cq of 5 cpu in
cohort `all`, test-cq of 25 with borrowingLimit 0, standalone-cq of 1), the requests, the
priorities, backoffLimitCount 2 where Kueue sets it. Timeouts are Kueue's (util.TinyTimeout 10ms,
ShortTimeout 1s, MediumTimeout 45s, plus the seconds Kueue adds) except where noted; the clock
moves in whole seconds (conditions are written at second precision), one second apart where
Kueue waits for the next second between creations. The LocalQueues are named after their
ClusterQueues (Kueue's prod-queue is prod-cq here). The pending reason is the granular one Kueue
writes with UnadmittedWorkloadsObservability (WaitingForPodsReady; the gate is off by default in
v0.19.2, where the harness's ExpectWorkloadsToBeWaiting sees the legacy `Waiting`): this engine
always writes the granular reasons (docs/compatibility.md).

Kueue's metric checks inside the translated cases become what the engine records instead: the
QuotaReserved/AdmittedWorkloadsTotal metrics are counted as Admitted actions, the
EvictedWorkloads(Once)Total metrics as status.schedulingStats.evictions.

Skipped:
- "Should emit the PodsReadyToEvictedTimeSeconds metric" (Long PodsReady timeout): it checks only
  a Prometheus histogram (the time from PodsReady to a deactivation eviction), which the engine
  does not produce; the deactivation eviction itself is covered by the requeuing-limit case.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import pytest

from builders import T0, WorkloadBuilder, cluster_queue, local_queue, parse, pending, rfc3339, scenario
from preemption_operator.engine.cache import Cache
from preemption_operator.engine.pods_ready import WaitForPodsReady
from preemption_operator.engine.workload_status import get_condition
from preemption_operator.offline import simulate as simulation

SCHEDULER_TEST = "test/integration/singlecluster/scheduler/podsready/scheduler_test.go"

SECOND = timedelta(seconds=1)
TINY = timedelta(milliseconds=10)  # util.TinyTimeout
SHORT = timedelta(seconds=1)  # util.ShortTimeout
MEDIUM = timedelta(seconds=45)  # util.MediumTimeout

Obj = dict[str, Any]

WAITING = ("WaitingForPodsReady", "waiting for all admitted workloads to be in PodsReady condition")


def settings(
    timeout: timedelta,
    *,
    block_admission: bool = True,
    requeuing_timestamp: str = "Eviction",
    backoff_limit_count: int | None = None,
) -> WaitForPodsReady:
    """The case's configuration (Kueue's JustBeforeEach): backoffBaseSeconds 1, the default cap."""
    return WaitForPodsReady(
        timeout=timeout,
        block_admission=block_admission,
        requeuing_timestamp=requeuing_timestamp,
        backoff_limit_count=backoff_limit_count,
        backoff_base_seconds=1,
    )


def prod_and_dev() -> list[Obj]:
    """Kueue's prod-cq and dev-cq: 5 cpu each, in cohort `all`."""
    return [cluster_queue("prod-cq", 5, cohort="all"), cluster_queue("dev-cq", 5, cohort="all")]


def standalone() -> Obj:
    """Kueue's standalone-cq: 1 cpu, in no cohort (no borrowing)."""
    return cluster_queue("standalone-cq", 1)


class Cluster:
    """The objects of one case, and the runs at the times it reaches."""

    def __init__(self, config: WaitForPodsReady, queues: Iterable[Obj], *workloads: WorkloadBuilder) -> None:
        self.config = config
        objects = scenario(queues, *workloads)
        self.others: list[Obj] = [o for o in objects if o["kind"] != "Workload"]
        self.workloads: dict[str, Obj] = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Workload"}
        self.actions: list[Obj] = []
        """The last run's actions."""
        self.history: list[tuple[str, str]] = []
        """(action, workload name) of every run so far."""
        self.now: datetime | None = None

    def at(self, now: datetime) -> list[tuple[str, str]]:
        """Runs at `now` until nothing changes; returns (action, workload name) in order."""
        assert self.now is None or now >= self.now, "the clock only moves forward"
        self.now = now
        sim = simulation.run(parse([*self.others, *self.workloads.values()]), now, pods_ready=self.config)
        for wl in sim.workloads.values():
            self.workloads[wl.metadata.name] = wl.to_wire()
        self.actions = sim.to_dict()["actions"]
        done = [(a["action"], a["workload"].split("/", 1)[1]) for a in self.actions]
        self.history.extend(done)
        return done

    def count(self, kind: str, name: str) -> int:
        """How many times the workload got this action in every run so far."""
        return self.history.count((kind, name))

    def action(self, kind: str, name: str) -> Obj:
        found = [a for a in self.actions if a["action"] == kind and a["workload"] == f"default/{name}"]
        assert len(found) == 1, (kind, name, self.actions)
        return found[0]

    # -- what Kueue's harness does between the checks ----------------------------------------------

    def create(self, *workloads: WorkloadBuilder) -> None:
        for wl in workloads:
            self.workloads[wl.name] = wl.obj()

    def add(self, *objects: Obj) -> None:
        self.others.extend(copy.deepcopy(o) for o in objects)

    def delete(self, name: str) -> None:
        del self.workloads[name]

    def _condition(self, name: str, kind: str, reason: str, message: str) -> None:
        assert self.now is not None
        conditions = self.workloads[name].setdefault("status", {}).setdefault("conditions", [])
        conditions[:] = [c for c in conditions if c["type"] != kind]
        conditions.append(
            {
                "type": kind,
                "status": "True",
                "reason": reason,
                "message": message,
                "lastTransitionTime": rfc3339(self.now),
            }
        )

    def pods_ready(self, name: str, reason: str = "Started") -> None:
        """PodsReady=True, as the case's Status().Update sets it."""
        self._condition(name, "PodsReady", reason, "")

    def finish(self, name: str) -> None:
        """util.FinishWorkloads: Finished=True, reason ByTest."""
        self._condition(name, "Finished", "ByTest", "Finished by test")

    def activate(self, name: str) -> None:
        self.workloads[name]["spec"]["active"] = True

    # -- what the case checks ----------------------------------------------------------------------

    def status(self, name: str) -> Obj:
        return self.workloads[name].get("status") or {}

    def condition(self, name: str, kind: str) -> tuple[str, str, str] | None:
        found = get_condition(self.status(name), kind)
        return None if found is None else (found["status"], found["reason"], found["message"])

    def reserved_in(self, name: str) -> str | None:
        """The ClusterQueue the workload holds quota in (Kueue's HasQuotaReservation), or None."""
        status = self.status(name)
        reserved = get_condition(status, "QuotaReserved")
        if reserved is None or reserved["status"] != "True":
            return None
        return str(status["admission"]["clusterQueue"])

    def pending_reason(self, name: str, only_reason: bool = False) -> tuple[str, str] | str | None:
        """QuotaReserved=False's (reason, message), or only its reason; None when it has no such
        condition."""
        reserved = self.condition(name, "QuotaReserved")
        if reserved is None or reserved[0] != "False":
            return None
        return reserved[1] if only_reason else (reserved[1], reserved[2])

    def requeue_state(self, name: str) -> Obj | None:
        return self.status(name).get("requeueState")

    def evictions(self, name: str) -> list[Obj]:
        return (self.status(name).get("schedulingStats") or {}).get("evictions") or []

    def active(self, name: str) -> bool:
        return self.workloads[name]["spec"].get("active", True) is not False

    def cluster_queue_status(self, name: str) -> Obj:
        """The ClusterQueue's status as the operator publishes it (queue_status over a snapshot)."""
        from preemption_operator.controller.queue_status import cluster_queue_status, pending_count

        assert self.now is not None
        cache = Cache(pods_ready=self.config)
        cache.load(parse([*self.others, *self.workloads.values()]))
        snapshot = cache.snapshot(self.now)
        cq = snapshot.cluster_queues[name]
        status = cluster_queue_status(cq, pending_count(snapshot, name), None, self.now, None)
        return {k: v for k, v in status.items() if k != "conditions"}


def timed_out(cluster: Cluster, name: str, cause: str = "WaitForStart") -> Obj:
    """The eviction Kueue's util.AwaitWorkloadEvictionByPodsReadyTimeout waits for, and the
    Requeued=False util.SetRequeuedConditionWithPodsReadyTimeout sets by hand (the engine writes
    it with the eviction). Returns the Evicted action."""
    message = f"Exceeded the PodsReady timeout default/{name}"
    assert cluster.condition(name, "Evicted") == ("True", "PodsReadyTimeout", message)
    assert cluster.condition(name, "Requeued") == ("False", "PodsReadyTimeout", message)
    action = cluster.action("Evicted", name)
    assert (action["reason"], action["message"], action["underlyingCause"]) == ("PodsReadyTimeout", message, cause)
    assert cluster.reserved_in(name) is None and "admission" not in cluster.status(name)
    return action


def backoff_finished(cluster: Cluster, name: str) -> None:
    assert cluster.condition(name, "Requeued") == ("True", "BackoffFinished", "The workload backoff was finished")


def _cq_usage(cpu: str) -> list[Obj]:
    return [{"name": "default", "resources": [{"name": "cpu", "total": cpu, "borrowed": "0"}]}]


# == SchedulerWithWaitForPodsReady (blockAdmission: true) ===========================================

# -- Context "Long PodsReady timeout" (timeout: util.MediumTimeout) ---------------------------------


@pytest.mark.parametrize("reason", ["PodsReady", "Started"])
def test_unblocks_admission_in_other_cluster_queues_once_the_admitted_workloads_pods_are_ready(reason: str) -> None:
    """SCHEDULER_TEST, Long PodsReady timeout: the two "Should unblock admission of new workloads
    in other ClusterQueues once the admitted workload exceeds timeout" whose prod-wl gets
    PodsReady=True (reason PodsReady in the first, Started in the second)."""
    cluster = Cluster(
        settings(MEDIUM),
        prod_and_dev(),
        pending("prod-wl", "prod-cq", 2, created=T0),
        pending("dev-wl", "dev-cq", 2, created=T0 + SECOND),
    )
    # checking the first prod workload gets admitted while the second is waiting
    assert cluster.at(T0 + 2 * SECOND) == [("Admitted", "prod-wl"), ("Pending", "dev-wl")]
    assert cluster.reserved_in("prod-wl") == "prod-cq"
    assert cluster.pending_reason("dev-wl") == WAITING

    # update the first workload with PodsReady=True and verify the second workload is admitted
    # (well within the timeout: nothing is evicted)
    cluster.pods_ready("prod-wl", reason)
    assert cluster.at(T0 + 3 * SECOND) == [("Admitted", "dev-wl")]
    assert cluster.reserved_in("dev-wl") == "dev-cq"
    assert cluster.reserved_in("prod-wl") == "prod-cq"


def test_unblocks_admission_once_the_admitted_workload_is_deleted() -> None:
    """SCHEDULER_TEST, Long PodsReady timeout: "Should unblock admission of new workloads once the
    admitted workload is deleted"."""
    cluster = Cluster(settings(MEDIUM), prod_and_dev(), pending("prod-wl", "prod-cq", 2, created=T0))
    # checking the first prod workload gets admitted while the second is waiting
    assert cluster.at(T0) == [("Admitted", "prod-wl")]
    assert cluster.reserved_in("prod-wl") == "prod-cq"
    cluster.create(pending("dev-wl", "dev-cq", 2, created=T0 + SECOND))
    assert cluster.at(T0 + SECOND) == [("Pending", "dev-wl")]
    assert cluster.pending_reason("dev-wl") == WAITING
    # later, still before prod-wl's timeout, nothing else happens
    assert cluster.at(T0 + 30 * SECOND) == []

    # delete the first workload and verify the second workload is admitted
    cluster.delete("prod-wl")
    assert cluster.at(T0 + 31 * SECOND) == [("Admitted", "dev-wl")]
    assert cluster.reserved_in("dev-wl") == "dev-cq"


def test_blocks_admission_of_one_of_two_workloads_considered_in_the_same_scheduling_cycle() -> None:
    """SCHEDULER_TEST, Long PodsReady timeout: "Should block admission of one new workload if two
    are considered in the same scheduling cycle"."""
    cluster = Cluster(
        settings(MEDIUM),
        prod_and_dev(),
        pending("prod-wl", "prod-cq", 11, created=T0),
        pending("dev-wl", "dev-cq", 11, created=T0 + SECOND),  # util.WaitForNextSecondAfterCreation
    )
    # creating two workloads but delaying cluster queue creation which has enough capacity
    # (11 cpu is more than the cohort's 10: ExceedsMaxQuota, one of the pending reasons Kueue's
    # util.ExpectWorkloadsToBePending accepts)
    assert cluster.at(T0 + 2 * SECOND) == [("Pending", "prod-wl"), ("Pending", "dev-wl")]
    assert cluster.pending_reason("prod-wl", only_reason=True) == "ExceedsMaxQuota"
    assert cluster.pending_reason("dev-wl", only_reason=True) == "ExceedsMaxQuota"

    # creating the cluster queue: nominal 25, borrowingLimit 0 (it lends all of it)
    test_cq = cluster_queue("test-cq", 25, cohort="all", borrowing_limit=0)
    cluster.add(test_cq, local_queue("test-cq"))
    # verifying that the first created workload is admitted and the second workload is waiting as
    # the first one has PodsReady=False
    assert cluster.at(T0 + 3 * SECOND) == [("Admitted", "prod-wl"), ("Pending", "dev-wl")]
    assert cluster.reserved_in("prod-wl") == "prod-cq"
    assert cluster.pending_reason("dev-wl") == WAITING
    assert cluster.reserved_in("dev-wl") is None


# -- Context "Short PodsReady timeout" (timeout: util.ShortTimeout, backoffLimitCount 2) -------------

SHORT_SETTINGS = settings(SHORT, backoff_limit_count=2)


def test_requeues_a_workload_which_exceeded_the_timeout_to_reach_pods_ready() -> None:
    """SCHEDULER_TEST, Short PodsReady timeout: "Should requeue a workload which exceeded the
    timeout to reach PodsReady=True"."""
    cluster = Cluster(
        SHORT_SETTINGS,
        prod_and_dev(),
        pending("prod1", "prod-cq", 2, priority=100, created=T0),
        pending("prod2", "prod-cq", 2, priority=0, created=T0),
    )
    start = T0 + SECOND
    # checking the 'prod1' workload is admitted and the 'prod2' workload is waiting
    assert cluster.at(start) == [("Admitted", "prod1"), ("Pending", "prod2")]
    assert cluster.reserved_in("prod1") == "prod-cq"
    assert cluster.pending_reason("prod2") == WAITING
    assert cluster.condition("prod1", "Admitted") == ("True", "Admitted", "The workload is admitted")

    # wait for the 'prod1' workload to be evicted; verify the 'prod2' workload gets admitted and
    # the 'prod1' is pending by backoff (held: it is not queued, let alone admitted)
    assert cluster.at(start + SECOND) == [("Evicted", "prod1"), ("Admitted", "prod2")]
    evicted = timed_out(cluster, "prod1")
    assert evicted["requeueAt"] == rfc3339(start + 2 * SECOND)  # backoffBaseSeconds 1
    assert cluster.requeue_state("prod1") == {"count": 1, "requeueAt": rfc3339(start + 2 * SECOND)}
    assert cluster.reserved_in("prod2") == "prod-cq"
    # util.ExpectEvictedWorkloadsTotalMetric(prod-cq, PodsReadyTimeout, WaitForStart, 1)
    assert cluster.evictions("prod1") == [{"reason": "PodsReadyTimeout", "underlyingCause": "WaitForStart", "count": 1}]


def test_readmits_a_timed_out_workload_deactivates_it_past_the_requeuing_limit_then_reactivates_it() -> None:
    """SCHEDULER_TEST, Short PodsReady timeout: "Should re-admit a timed out workload and deactivate
    a workload exceeded the re-queue count limit. After that re-activating a workload"."""
    cluster = Cluster(SHORT_SETTINGS, prod_and_dev(), pending("prod", "prod-cq", 2, created=T0))
    t = T0 + SECOND
    # checking the 'prod' workload is admitted (the QuotaReserved/Admitted metrics: 1)
    assert cluster.at(t) == [("Admitted", "prod")]
    assert cluster.reserved_in("prod") == "prod-cq"
    assert cluster.count("Admitted", "prod") == 1

    # evicted by the timeout; finish the eviction, and the workload is pending by backoff
    t += SECOND
    assert cluster.at(t) == [("Evicted", "prod")]
    timed_out(cluster, "prod")
    assert cluster.requeue_state("prod") == {"count": 1, "requeueAt": rfc3339(t + SECOND)}

    # verify the 'prod' workload gets re-admitted twice (its backoff of 1s over: requeueAt cleared)
    t += SECOND
    assert cluster.at(t) == [("Requeued", "prod"), ("Admitted", "prod")]
    backoff_finished(cluster, "prod")
    assert cluster.requeue_state("prod") == {"count": 1}
    assert cluster.reserved_in("prod") == "prod-cq"
    assert cluster.count("Admitted", "prod") == 2
    t += SECOND
    assert cluster.at(t) == [("Evicted", "prod")]
    timed_out(cluster, "prod")
    assert cluster.requeue_state("prod") == {"count": 2, "requeueAt": rfc3339(t + 2 * SECOND)}  # 1s, doubled
    assert cluster.at(t + SECOND) == []  # still in its backoff
    t += 2 * SECOND
    assert cluster.at(t) == [("Requeued", "prod"), ("Admitted", "prod")]
    assert cluster.requeue_state("prod") == {"count": 2}
    assert cluster.reserved_in("prod") == "prod-cq"
    assert cluster.count("Admitted", "prod") == 3

    # the workload exceeded re-queue backoff limit should be deactivated
    t += SECOND
    assert cluster.at(t) == [("Deactivated", "prod"), ("Evicted", "prod"), ("Pending", "prod")]
    assert not cluster.active("prod")
    assert cluster.requeue_state("prod") is None
    deactivated = cluster.action("Evicted", "prod")
    assert deactivated["reason"] == "Deactivated"
    message = "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
    assert deactivated["message"] == message
    assert cluster.condition("prod", "Evicted") == ("True", "DeactivatedDueToRequeuingLimitExceeded", message)
    # the Requeued=False, Deactivated the case sets by hand
    assert cluster.condition("prod", "Requeued") == ("False", "Deactivated", message)
    assert cluster.reserved_in("prod") is None
    # ExpectEvictedWorkloadsTotalMetric(Deactivated, RequeuingLimitExceeded, 1) and
    # ExpectEvictedWorkloadsOnceTotalMetric(PodsReadyTimeout, WaitForStart, 1)
    assert cluster.evictions("prod") == [
        {"reason": "PodsReadyTimeout", "underlyingCause": "WaitForStart", "count": 2},
        {"reason": "Deactivated", "underlyingCause": "RequeuingLimitExceeded", "count": 1},
    ]
    # the deactivated workload stays out of the queue
    assert cluster.at(t + 10 * SECOND) == []

    # the reactivated workload should not be deactivated by the scheduler unless exceeding the
    # backoffLimitCount: re-admitted, timed out again, requeued with a count started afresh
    t += 11 * SECOND
    cluster.activate("prod")
    assert cluster.at(t) == [("Requeued", "prod"), ("Admitted", "prod")]
    assert cluster.condition("prod", "Requeued") == ("True", "Reactivated", "The workload was reactivated")
    assert cluster.reserved_in("prod") == "prod-cq"
    t += SECOND
    assert cluster.at(t) == [("Evicted", "prod")]
    timed_out(cluster, "prod")
    assert cluster.active("prod")
    assert cluster.requeue_state("prod") == {"count": 1, "requeueAt": rfc3339(t + SECOND)}
    # ExpectQuotaReservedWorkloadsTotalMetric / ExpectAdmittedWorkloadsTotalMetric: 4 admissions
    assert cluster.count("Admitted", "prod") == 4


# -- Context "Tiny PodsReady timeout" (timeout: util.TinyTimeout, backoffLimitCount 2) ---------------


def test_unblocks_admission_in_other_cluster_queues_once_the_admitted_workload_exceeds_the_timeout() -> None:
    """SCHEDULER_TEST, Tiny PodsReady timeout: "Should unblock admission of new workloads in other
    ClusterQueues once the admitted workload exceeds timeout".

    The timeout is 10s, not Kueue's 10ms: Kueue's harness never finishes dev's eviction, so dev,
    timed out 10ms after its admission, keeps its quota (and blocks prod) until the end of the
    case; the engine frees an evicted workload's quota at once, as Kueue does once the job has
    stopped. With a timeout longer than prod's backoff (1s), dev is still waiting for its pods
    when prod is queued again, as in Kueue's case."""
    cluster = Cluster(
        settings(10 * SECOND, backoff_limit_count=2),
        prod_and_dev(),
        pending("prod", "prod-cq", 2, created=T0),
        pending("dev", "dev-cq", 2, created=T0 + SECOND),  # util.WaitForNextSecondAfterCreation
    )
    t = T0 + 2 * SECOND
    # wait for the 'prod' workload to be admitted and the 'dev' to be waiting
    assert cluster.at(t) == [("Admitted", "prod"), ("Pending", "dev")]
    assert cluster.reserved_in("prod") == "prod-cq"
    assert cluster.pending_reason("dev") == WAITING
    # verify the 'prod' queue resources are used
    assert cluster.cluster_queue_status("prod-cq") == {
        "pendingWorkloads": 0,
        "reservingWorkloads": 1,
        "admittedWorkloads": 1,
        "flavorsReservation": _cq_usage("2"),
        "flavorsUsage": _cq_usage("2"),
    }

    # wait for the timeout to be exceeded; finish the eviction; wait for the first workload to be
    # unadmitted; wait for the 'dev' workload to get admitted
    t += 10 * SECOND
    assert cluster.at(t) == [("Evicted", "prod"), ("Admitted", "dev")]
    timed_out(cluster, "prod")
    assert "admission" not in cluster.status("prod")
    assert cluster.reserved_in("dev") == "dev-cq"
    # verify the queue resources are freed; prod, in its backoff, is pending (inadmissible)
    freed = {
        "pendingWorkloads": 1,
        "reservingWorkloads": 0,
        "admittedWorkloads": 0,
        "flavorsReservation": _cq_usage("0"),
    }
    status = cluster.cluster_queue_status("prod-cq")
    assert {k: status[k] for k in freed} == freed

    # wait for the 'prod' workload to be waiting: its backoff over, it is blocked by dev's pods
    t += SECOND
    assert cluster.at(t) == [("Requeued", "prod"), ("Pending", "prod")]
    assert cluster.pending_reason("prod") == WAITING
    assert cluster.reserved_in("dev") == "dev-cq"
    assert cluster.cluster_queue_status("prod-cq") == {
        "pendingWorkloads": 1,
        "reservingWorkloads": 0,
        "admittedWorkloads": 0,
        "flavorsReservation": _cq_usage("0"),
        "flavorsUsage": _cq_usage("0"),
    }


# -- It "Should move the evicted workload at the end of the queue" (requeuing timestamp Eviction) ----


def test_moves_the_evicted_workload_to_the_end_of_the_queue() -> None:
    """SCHEDULER_TEST, SchedulerWithWaitForPodsReady: "Should move the evicted workload at the end
    of the queue" (timeout util.TinyTimeout + 3s, backoffLimitCount 2, requeuing timestamp
    Eviction): an evicted workload queues by its eviction time, behind the ones created before
    it, so prod1, prod2, prod3 and prod1 again are admitted in turn."""
    timeout = TINY + 3 * SECOND
    cluster = Cluster(
        settings(timeout, backoff_limit_count=2),
        prod_and_dev(),
        # the local queue is created after them; each of 5 cpu so that only one can fit at a time
        pending("prod1", "eviction-lq", 5, created=T0),
        pending("prod2", "eviction-lq", 5, created=T0 + SECOND),
        pending("prod3", "eviction-lq", 5, created=T0 + 2 * SECOND),
    )
    t = T0 + 3 * SECOND
    assert [a for a in cluster.at(t) if a[0] == "Admitted"] == []  # no local queue yet
    # create the local queue to start admission; waiting for the first workload to be admitted
    cluster.add(local_queue("eviction-lq", "prod-cq"))
    assert cluster.at(t + SECOND)[0] == ("Admitted", "prod1")
    assert cluster.reserved_in("prod1") == "prod-cq"
    assert cluster.reserved_in("prod2") is None and cluster.reserved_in("prod3") is None
    t += SECOND

    # waiting the timeout, the first workload should be evicted and the second one admitted
    t += 4 * SECOND
    # (prod3, the next head, would fit by borrowing from dev-cq: it waits for prod2's pods)
    assert cluster.at(t) == [("Evicted", "prod1"), ("Admitted", "prod2"), ("Pending", "prod3")]
    timed_out(cluster, "prod1")
    assert cluster.reserved_in("prod2") == "prod-cq"
    assert cluster.pending_reason("prod3") == WAITING
    # prod1's backoff ends: it is queued again, behind prod3 (created before prod1 was evicted),
    # which stays the head blocked by prod2's pods
    assert cluster.at(t + SECOND) == [("Requeued", "prod1")]
    assert cluster.pending_reason("prod3") == WAITING
    assert cluster.pending_reason("prod1") == ("PendingEvaluation", "Exceeded the PodsReady timeout default/prod1")

    # finishing the second workload (after its timeout), the third one should be admitted
    t += 4 * SECOND
    # (prod1, the head after it, waits for prod3's pods)
    assert cluster.at(t) == [("Evicted", "prod2"), ("Admitted", "prod3"), ("Pending", "prod1")]
    timed_out(cluster, "prod2")
    assert cluster.pending_reason("prod1") == WAITING
    cluster.finish("prod2")
    assert cluster.reserved_in("prod3") == "prod-cq"
    assert cluster.reserved_in("prod1") is None

    # finishing the third workload (after its timeout), the first one should be admitted
    t += 4 * SECOND
    assert cluster.at(t) == [("Evicted", "prod3"), ("Admitted", "prod1")]
    timed_out(cluster, "prod3")
    cluster.finish("prod3")
    assert cluster.reserved_in("prod1") == "prod-cq"

    # verifying if all workloads have a proper re-queue count (Kueue waits, up to util.Timeout,
    # until prod1 has timed out once more)
    t += 4 * SECOND
    assert cluster.at(t) == [("Evicted", "prod1")]
    timed_out(cluster, "prod1")
    assert cluster.requeue_state("prod1") == {"count": 2, "requeueAt": rfc3339(t + 2 * SECOND)}
    assert cluster.requeue_state("prod2") == {"count": 1, "requeueAt": rfc3339(T0 + 13 * SECOND)}
    assert cluster.requeue_state("prod3") == {"count": 1, "requeueAt": rfc3339(T0 + 17 * SECOND)}


# -- Context "Requeuing timestamp set to Creation" (timeout util.ShortTimeout + 2s) -----------------


def test_prioritizes_workloads_submitted_earlier() -> None:
    """SCHEDULER_TEST, SchedulerWithWaitForPodsReady, Requeuing timestamp set to Creation: "Should
    prioritize workloads submitted earlier": a workload evicted by the timeout keeps its place by
    creation time, ahead of the ones created after it."""
    cluster = Cluster(
        settings(SHORT + 2 * SECOND, requeuing_timestamp="Creation"),
        [standalone()],
        pending("wl-1", "standalone-cq", 1, created=T0),
        pending("wl-2", "standalone-cq", 1, created=T0 + SECOND),
        pending("wl-3", "standalone-cq", 1, created=T0 + 2 * SECOND),
    )
    t = T0 + 3 * SECOND
    # waiting for the first workload to be admitted; checking that the second is still pending
    assert cluster.at(t) == [("Admitted", "wl-1"), ("Pending", "wl-2")]
    assert cluster.reserved_in("wl-1") == "standalone-cq"
    assert cluster.pending_reason("wl-2", only_reason=True) == "WaitingForQuota"

    # finishing the eviction of the first workload; the second workload is admitted
    t += 3 * SECOND
    assert cluster.at(t) == [("Evicted", "wl-1"), ("Admitted", "wl-2"), ("Pending", "wl-3")]
    timed_out(cluster, "wl-1")
    assert cluster.pending_reason("wl-3", only_reason=True) == "WaitingForQuota"
    assert cluster.reserved_in("wl-2") == "standalone-cq"
    # the first workload is still pending by backoff, the third by insufficient quota; then the
    # first's backoff ends and it is queued again, ahead of the third: it does not fit
    assert cluster.at(t + SECOND) == [("Requeued", "wl-1"), ("Pending", "wl-1")]
    backoff_finished(cluster, "wl-1")
    assert cluster.pending_reason("wl-1", only_reason=True) == "WaitingForQuota"
    assert cluster.reserved_in("wl-3") is None

    # finishing the eviction of the second workload; the first workload is admitted since its
    # backoff is completed, ahead of the third (created after it)
    t += 3 * SECOND
    assert cluster.at(t) == [("Evicted", "wl-2"), ("Admitted", "wl-1")]
    timed_out(cluster, "wl-2")
    assert cluster.reserved_in("wl-1") == "standalone-cq"
    assert cluster.reserved_in("wl-3") is None
    assert cluster.requeue_state("wl-1") == {"count": 1}


# == SchedulerWithWaitForPodsReadyNonblockingMode (blockAdmission: false) ===========================


def test_nonblocking_does_not_block_admission_of_one_of_two_workloads_considered_in_the_same_cycle() -> None:
    """SCHEDULER_TEST, SchedulerWithWaitForPodsReadyNonblockingMode, Long PodsReady timeout:
    "Should not block admission of one new workload if two are considered in the same scheduling
    cycle"."""
    cluster = Cluster(
        settings(MEDIUM, block_admission=False),
        prod_and_dev(),
        pending("prod-wl", "prod-cq", 11, created=T0),
        pending("dev-wl", "dev-cq", 11, created=T0),
    )
    # creating two workloads but delaying cluster queue creation which has enough capacity
    # (11 cpu is more than the cohort's 10: ExceedsMaxQuota)
    assert sorted(cluster.at(T0 + SECOND)) == [("Pending", "dev-wl"), ("Pending", "prod-wl")]
    assert cluster.pending_reason("prod-wl", only_reason=True) == "ExceedsMaxQuota"
    assert cluster.pending_reason("dev-wl", only_reason=True) == "ExceedsMaxQuota"

    # creating the cluster queue; verifying that the first created workload is admitted and the
    # second workload is admitted as the blockAdmission is false
    cluster.add(cluster_queue("test-cq", 25, cohort="all", borrowing_limit=0), local_queue("test-cq"))
    assert sorted(cluster.at(T0 + 2 * SECOND)) == [("Admitted", "dev-wl"), ("Admitted", "prod-wl")]
    assert cluster.reserved_in("prod-wl") == "prod-cq"
    assert cluster.reserved_in("dev-wl") == "dev-cq"


def test_nonblocking_readmits_a_timed_out_workload() -> None:
    """SCHEDULER_TEST, SchedulerWithWaitForPodsReadyNonblockingMode, Tiny PodsReady timeout:
    "Should re-admit a timed out workload" (no backoffLimitCount: never deactivated)."""
    cluster = Cluster(settings(TINY, block_admission=False), prod_and_dev(), pending("prod", "prod-cq", 2, created=T0))
    t = T0 + SECOND
    # checking the 'prod' workload is admitted (the QuotaReserved/Admitted metrics: 1)
    assert cluster.at(t) == [("Admitted", "prod")]
    assert cluster.reserved_in("prod") == "prod-cq"
    assert cluster.count("Admitted", "prod") == 1

    # exceed the timeout for the 'prod' workload; finish the eviction
    t += SECOND
    assert cluster.at(t) == [("Evicted", "prod")]
    timed_out(cluster, "prod")
    assert cluster.requeue_state("prod") == {"count": 1, "requeueAt": rfc3339(t + SECOND)}

    # verify the 'prod' workload gets re-admitted once (the metrics: 2)
    t += SECOND
    assert cluster.at(t) == [("Requeued", "prod"), ("Admitted", "prod")]
    backoff_finished(cluster, "prod")
    assert cluster.reserved_in("prod") == "prod-cq"
    assert cluster.count("Admitted", "prod") == 2
    t += SECOND
    assert cluster.at(t) == [("Evicted", "prod")]
    timed_out(cluster, "prod")
    assert cluster.requeue_state("prod") == {"count": 2, "requeueAt": rfc3339(t + 2 * SECOND)}
    # its requeue state once the second backoff (2s) is over: requeueAt cleared, count kept
    t += 2 * SECOND
    assert cluster.at(t) == [("Requeued", "prod"), ("Admitted", "prod")]
    assert cluster.requeue_state("prod") == {"count": 2}
    assert cluster.active("prod")
    assert cluster.evictions("prod") == [{"reason": "PodsReadyTimeout", "underlyingCause": "WaitForStart", "count": 2}]


def test_nonblocking_keeps_the_evicted_workload_at_the_front_of_the_queue() -> None:
    """SCHEDULER_TEST, SchedulerWithWaitForPodsReadyNonblockingMode, Requeuing timestamp set to
    Creation: "Should keep the evicted workload at the front of the queue"."""
    cluster = Cluster(
        settings(SHORT + 2 * SECOND, block_admission=False, requeuing_timestamp="Creation"),
        [standalone()],
        pending("wl-1", "standalone-cq", 1, created=T0),
        pending("wl-2", "standalone-cq", 1, created=T0 + SECOND),
        pending("wl-3", "standalone-cq", 1, created=T0 + 2 * SECOND),
    )
    t = T0 + 3 * SECOND
    # waiting for the first workload to be admitted; checking that the second is still pending
    assert cluster.at(t) == [("Admitted", "wl-1"), ("Pending", "wl-2")]
    assert cluster.reserved_in("wl-1") == "standalone-cq"
    assert cluster.pending_reason("wl-2", only_reason=True) == "WaitingForQuota"

    # finishing the eviction of the first workload; waiting for the second to be admitted
    t += 3 * SECOND
    assert cluster.at(t) == [("Evicted", "wl-1"), ("Admitted", "wl-2"), ("Pending", "wl-3")]
    timed_out(cluster, "wl-1")
    assert cluster.pending_reason("wl-3", only_reason=True) == "WaitingForQuota"
    # wl-1's backoff ends: queued again, ahead of wl-3; it does not fit
    assert cluster.at(t + SECOND) == [("Requeued", "wl-1"), ("Pending", "wl-1")]
    backoff_finished(cluster, "wl-1")

    # finishing the eviction of the second workload; the first workload is admitted since its
    # backoff is completed, ahead of the third
    t += 3 * SECOND
    assert cluster.at(t) == [("Evicted", "wl-2"), ("Admitted", "wl-1")]
    timed_out(cluster, "wl-2")
    # verifying requeue state after first eviction and re-admission
    assert cluster.requeue_state("wl-1") == {"count": 1}
    # wl-2's backoff ends: queued again, it does not fit
    assert cluster.at(t + SECOND) == [("Requeued", "wl-2"), ("Pending", "wl-2")]

    # waiting for the first workload to be evicted again (second eviction): wl-2 (created before
    # wl-3, its backoff over) takes its place
    t += 3 * SECOND
    assert cluster.at(t) == [("Evicted", "wl-1"), ("Admitted", "wl-2")]
    timed_out(cluster, "wl-1")
    assert cluster.requeue_state("wl-1") == {"count": 2, "requeueAt": rfc3339(t + 2 * SECOND)}
    t += 2 * SECOND
    # its second backoff over: requeued (requeueAt cleared), it does not fit
    assert cluster.at(t) == [("Requeued", "wl-1"), ("Pending", "wl-1")]

    # verifying if all workloads have a proper re-queue count after second eviction
    assert cluster.requeue_state("wl-1") == {"count": 2}
    assert cluster.requeue_state("wl-2") == {"count": 1}
    assert cluster.requeue_state("wl-3") is None  # wl3 had never been admitted
    assert cluster.reserved_in("wl-3") is None
    assert cluster.reserved_in("wl-2") == "standalone-cq"
