"""Issue 30, item 2: Kueue's waitForPodsReady. An admitted workload whose pods are not all ready
within the timeout is evicted (PodsReadyTimeout) and requeued after a backoff, deactivated once
it was requeued backoffLimitCount times; with blockAdmission nothing more is admitted while a
workload holding quota waits for its pods; job integrations keep the Workload's PodsReady
condition. Kueue v0.19.2's cases are translated where they apply, each named."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from builders import NOW, T0, WorkloadBuilder, admitted, cluster_queue, parse, pending, scenario
from preemption_operator.api.objects import parse_object
from preemption_operator.engine.pods_ready import WaitForPodsReady, backoff, deadline
from preemption_operator.engine.workload_status import get_condition
from preemption_operator.jobs.batch_job import BatchJob
from preemption_operator.jobs.reconciler import Settings, WriteWorkloadStatus, plan, pods_ready_condition
from preemption_operator.offline import simulate as simulation

MINUTE = timedelta(minutes=1)


def _at(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _workload(*conditions: tuple[str, str, str, datetime], admitted_at: datetime | None = None) -> Any:
    builder = WorkloadBuilder("wl", cpu=1)
    if admitted_at is not None:
        builder.admitted("cq", at=admitted_at)
    body = builder.obj()
    for kind, status, reason, at in conditions:
        body.setdefault("status", {}).setdefault("conditions", []).append(
            {"type": kind, "status": status, "reason": reason, "message": "", "lastTransitionTime": _at(at)}
        )
    return parse_object(body)


# -- Kueue's TestAdmittedNotReadyWorkload (pkg/controller/core/workload_controller_test.go) ---------

MINUTE_AGO = NOW - MINUTE


@pytest.mark.parametrize(
    ("name", "workload", "settings", "want"),
    [
        (
            "workload without Admitted condition; not counting",
            _workload(),
            WaitForPodsReady(timedelta(minutes=5)),
            None,
        ),
        (
            "workload with Admitted=True, no PodsReady; counting",
            _workload(admitted_at=MINUTE_AGO),
            WaitForPodsReady(timedelta(minutes=5)),
            ("WaitForStart", 4 * MINUTE),
        ),
        (
            "workload with Admitted=True, no PodsReady; timeout exceeded",
            _workload(admitted_at=NOW - 7 * MINUTE),
            WaitForPodsReady(timedelta(minutes=5)),
            ("WaitForStart", -2 * MINUTE),
        ),
        (
            "with reason WorkloadWaitForPodsReadyStart; counting since admitted.LastTransitionTime",
            _workload(("PodsReady", "False", "WaitForStart", NOW), admitted_at=MINUTE_AGO),
            WaitForPodsReady(timedelta(minutes=5)),
            ("WaitForStart", 4 * MINUTE),
        ),
        (
            "with reason PodsReady; counting since admitted.LastTransitionTime",
            _workload(("PodsReady", "False", "PodsReady", NOW), admitted_at=MINUTE_AGO),
            WaitForPodsReady(timedelta(minutes=5)),
            ("WaitForStart", 4 * MINUTE),
        ),
        (
            "workload with Admitted=True, PodsReady=False, Reason=WorkloadWaitForPodsReadyRecovery",
            _workload(("PodsReady", "False", "WaitForRecovery", NOW), admitted_at=MINUTE_AGO),
            WaitForPodsReady(timedelta(minutes=5), recovery_timeout=3 * MINUTE),
            ("WaitForRecovery", 3 * MINUTE),
        ),
        (
            "workload with Admitted=True, PodsReady=False, Reason=WaitForRecovery, recoveryTimeout not configured",
            _workload(("PodsReady", "False", "WaitForRecovery", NOW), admitted_at=MINUTE_AGO),
            WaitForPodsReady(timedelta(minutes=5), recovery_timeout=None),
            None,
        ),
        (
            "workload with Admitted=True, PodsReady=True; not counting",
            _workload(("PodsReady", "True", "Started", NOW), admitted_at=MINUTE_AGO),
            WaitForPodsReady(timedelta(minutes=5)),
            None,
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_admitted_not_ready_workload(name: str, workload: Any, settings: WaitForPodsReady, want: Any) -> None:
    got = deadline(workload, settings)
    assert (None if got is None else (got[0], got[1] - NOW)) == want


# -- the backoff (Kueue's TestBackoff_WaitTime, pkg/util/wait, in seconds) -----------------------------


@pytest.mark.parametrize(
    ("base", "cap", "count", "want"),
    [
        (1, 1000, 4, 8),  # simple exponential (factor=2): 1, 2, 4, 8
        (1, 5, 4, 5),  # caps at limit: 1, 2, 4, 8 -> 5
        (1, 1000, 1000, 1000),  # very large iteration still returns cap
        (1, 1000, 1, 1),  # two subsequent calls: 1, then 2
        (1, 1000, 2, 2),
        (60, 3600, 3, 240),  # Kueue's defaults: 60 s, 120 s, 240 s ...
        (100, 50, 1, 100),  # a base over the cap is waited once, as wait.Backoff does
        (100, 50, 2, 50),
    ],
)
def test_backoff_wait_time(base: int, cap: int, count: int, want: int) -> None:
    settings = WaitForPodsReady(backoff_base_seconds=base, backoff_max_seconds=cap)
    assert backoff(count, settings) == timedelta(seconds=want)


# -- Kueue's TestBackoffWaitingTimeExpired (pkg/cache/queue/cluster_queue_test.go) --------------------


def _requeue_state(body: dict[str, Any], count: int, at: datetime | None) -> dict[str, Any]:
    body.setdefault("status", {})["requeueState"] = {"count": count, **({"requeueAt": _at(at)} if at else {})}
    return body


@pytest.mark.parametrize(
    ("name", "requeue_at", "evicted", "held"),
    [
        ("workload doesn't have requeueState", None, False, False),
        ("now already has exceeded requeueAt", NOW - MINUTE, True, False),
        ("now hasn't yet exceeded requeueAt", NOW + MINUTE, True, True),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_backoff_waiting_time_expired(name: str, requeue_at: datetime | None, evicted: bool, held: bool) -> None:
    """A workload in its backoff is not queued; once requeueAt has passed it is requeued (the
    requeueAt cleared) and admitted."""
    body = pending("wl", "cq").obj()
    if requeue_at is not None:
        _requeue_state(body, 10, requeue_at)
    if evicted:
        body.setdefault("status", {})["conditions"] = [
            {
                "type": "Evicted",
                "status": "True",
                "reason": "PodsReadyTimeout",
                "message": "",
                "lastTransitionTime": _at(T0),
            }
        ]
    sim = simulation.run(parse(scenario([cluster_queue("cq", 4)], body)), NOW)
    actions = [a["action"] for a in sim.to_dict()["actions"]]
    if held:
        assert actions == []
    else:
        assert actions[-1] == "Admitted"
        assert (sim.workloads["default/wl"].status.requeue_state or _NoState()).requeue_at is None


class _NoState:
    requeue_at = None


# -- the whole cycle of a timeout --------------------------------------------------------------------


SETTINGS = WaitForPodsReady(timeout=timedelta(minutes=5), backoff_base_seconds=60, backoff_max_seconds=3600)


def _run(objects: list[Any], now: datetime, settings: WaitForPodsReady = SETTINGS) -> simulation.Simulation:
    return simulation.run(objects, now, pods_ready=settings)


def _wire(sim: simulation.Simulation, name: str = "default/wl") -> dict[str, Any]:
    return sim.workloads[name].to_wire()


def test_a_workload_not_ready_in_time_is_evicted_requeued_after_its_backoff_and_admitted_again() -> None:
    admitted_at = NOW - timedelta(minutes=6)
    objects = parse(scenario([cluster_queue("cq", 4)], admitted("wl", "cq", 1, at=admitted_at)))
    first = _run(objects, NOW)
    actions = first.to_dict()["actions"]
    assert actions[0] == {
        "cycle": 1,
        "action": "Evicted",
        "workload": "default/wl",
        "clusterQueue": "cq",
        "reason": "PodsReadyTimeout",
        "message": "Exceeded the PodsReady timeout default/wl",
        "underlyingCause": "WaitForStart",
        "requeueAt": _at(NOW + MINUTE),
    }
    assert len(actions) == 1  # held in its backoff: not admitted again at once
    status = _wire(first)["status"]
    assert status["requeueState"] == {"count": 1, "requeueAt": _at(NOW + MINUTE)}
    requeued = get_condition(status, "Requeued") or {}
    assert (requeued["status"], requeued["reason"]) == ("False", "PodsReadyTimeout")
    assert status["schedulingStats"]["evictions"] == [
        {"reason": "PodsReadyTimeout", "underlyingCause": "WaitForStart", "count": 1}
    ]
    assert (get_condition(status, "QuotaReserved") or {})["status"] == "False"

    later = _run(list(first.workloads.values()) + objects[:-1], NOW + MINUTE)
    assert [a["action"] for a in later.to_dict()["actions"]] == ["Requeued", "Admitted"]
    status = _wire(later)["status"]
    requeued = get_condition(status, "Requeued") or {}
    assert (requeued["status"], requeued["reason"], requeued["message"]) == (
        "True",
        "BackoffFinished",
        "The workload backoff was finished",
    )
    assert status["requeueState"] == {"count": 1}


def test_before_the_timeout_nothing_happens_and_the_engine_wakes_at_it() -> None:
    from preemption_operator.engine import Engine, QueueState
    from preemption_operator.engine.cache import Cache

    cache = Cache(pods_ready=SETTINGS)
    cache.load(parse(scenario([cluster_queue("cq", 4)], admitted("wl", "cq", 1, at=NOW - MINUTE))))
    result = Engine().cycle(cache.snapshot(NOW), QueueState())
    assert not result.evicted and result.retry_at == NOW + 4 * MINUTE


def test_ready_pods_are_never_timed_out() -> None:
    body = admitted("wl", "cq", 1, at=NOW - timedelta(hours=1)).obj()
    body["status"]["conditions"].append(
        {"type": "PodsReady", "status": "True", "reason": "Started", "message": "", "lastTransitionTime": _at(T0)}
    )
    assert _run(parse(scenario([cluster_queue("cq", 4)], body)), NOW).to_dict()["actions"] == []


def test_the_requeuing_limit_deactivates_the_workload_with_kueues_message() -> None:
    body = admitted("wl", "cq", 1, at=NOW - timedelta(minutes=6)).obj()
    _requeue_state(body, 2, None)
    settings = WaitForPodsReady(timeout=timedelta(minutes=5), backoff_limit_count=2)
    sim = _run(parse(scenario([cluster_queue("cq", 4)], body)), NOW, settings)
    actions = sim.to_dict()["actions"]
    # Deactivated (the mark, then spec.active=false), evicted as deactivated, then pending as any
    # deactivated workload (QuotaReserved=False "The workload is deactivated", as Kueue writes it).
    assert [a["action"] for a in actions] == ["Deactivated", "Evicted", "Pending"]
    assert actions[1]["reason"] == "Deactivated"
    assert (
        actions[1]["message"] == "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
    )
    wire = _wire(sim)
    assert wire["spec"]["active"] is False
    status = wire["status"]
    assert get_condition(status, "DeactivationTarget") is None and "requeueState" not in status
    assert status["schedulingStats"]["evictions"] == [
        {"reason": "Deactivated", "underlyingCause": "RequeuingLimitExceeded", "count": 1}
    ]
    assert (get_condition(status, "Requeued") or {})["status"] == "False"


def test_a_reactivated_workload_is_requeued_as_reactivated() -> None:
    body = pending("wl", "cq").obj()
    body["status"] = {
        "conditions": [
            {
                "type": "Requeued",
                "status": "False",
                "reason": "Deactivated",
                "message": "The workload is deactivated",
                "lastTransitionTime": _at(T0),
            }
        ]
    }
    sim = _run(parse(scenario([cluster_queue("cq", 4)], body)), NOW)
    assert [a["action"] for a in sim.to_dict()["actions"]] == ["Requeued", "Admitted"]
    requeued = get_condition(_wire(sim)["status"], "Requeued") or {}
    assert (requeued["status"], requeued["reason"], requeued["message"]) == (
        "True",
        "Reactivated",
        "The workload was reactivated",
    )


# -- blockAdmission ------------------------------------------------------------------------------------


BLOCKING = WaitForPodsReady(timeout=timedelta(minutes=5), block_admission=True)


def test_block_admission_admits_one_workload_at_a_time_until_its_pods_are_ready() -> None:
    objects = parse(scenario([cluster_queue("cq", 4)], pending("a", "cq", 1), pending("b", "cq", 1)))
    sim = _run(objects, NOW, BLOCKING)
    assert [(a["action"], a["workload"]) for a in sim.to_dict()["actions"]] == [
        ("Admitted", "default/a"),
        ("Pending", "default/b"),
    ]
    b = get_condition(_wire(sim, "default/b")["status"], "QuotaReserved") or {}
    assert (b["reason"], b["message"]) == (
        "WaitingForPodsReady",
        "waiting for all admitted workloads to be in PodsReady condition",
    )
    # a's pods become ready: b is admitted.
    a = _wire(sim, "default/a")
    a["status"]["conditions"].append(
        {"type": "PodsReady", "status": "True", "reason": "Started", "message": "", "lastTransitionTime": _at(NOW)}
    )
    again = _run([parse_object(a), *list(sim.workloads.values())[1:], *objects[:-2]], NOW, BLOCKING)
    assert [(x["action"], x["workload"]) for x in again.to_dict()["actions"]] == [("Admitted", "default/b")]


def test_without_block_admission_both_are_admitted() -> None:
    objects = parse(scenario([cluster_queue("cq", 4)], pending("a", "cq", 1), pending("b", "cq", 1)))
    actions = _run(objects, NOW).to_dict()["actions"]
    assert [a["action"] for a in actions] == ["Admitted", "Admitted"]


# -- the PodsReady condition (Kueue's generatePodsReadyCondition, pkg/controller/jobframework) -------


def _job(ready: int, succeeded: int = 0, parallelism: int = 2) -> BatchJob:
    return BatchJob(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u1", "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
            "spec": {"parallelism": parallelism, "suspend": False, "template": {"spec": {"containers": []}}},
            "status": {"ready": ready, "succeeded": succeeded, "active": ready},
        }
    )


def _status(admitted: bool, pods_ready: tuple[str, str] | None = None) -> dict[str, Any]:
    conditions = []
    if admitted:
        conditions.append({"type": "Admitted", "status": "True", "reason": "Admitted", "message": ""})
    if pods_ready is not None:
        conditions.append({"type": "PodsReady", "status": pods_ready[0], "reason": pods_ready[1], "message": ""})
    return {"conditions": conditions}


@pytest.mark.parametrize(
    ("job", "status", "want"),
    [
        (_job(2), _status(False), ("False", "WaitForStart", "Not all pods are ready or succeeded")),
        (_job(2), _status(True), ("True", "Started", "All pods reached readiness and the workload is running")),
        (_job(1, 1), _status(True), ("True", "Started", "All pods reached readiness and the workload is running")),
        (_job(1), _status(True), ("False", "WaitForStart", "Not all pods are ready or succeeded")),
        (
            _job(1),
            _status(True, ("True", "Started")),
            ("False", "WaitForRecovery", "At least one pod has failed, waiting for recovery"),
        ),
        (
            _job(1),
            _status(True, ("False", "WaitForRecovery")),
            ("False", "WaitForRecovery", "At least one pod has failed, waiting for recovery"),
        ),
        (
            _job(2),
            _status(True, ("False", "WaitForRecovery")),
            ("True", "Recovered", "All pods reached readiness and the workload is running"),
        ),
        (
            _job(1),
            _status(True, ("False", "PodsReady")),
            ("False", "WaitForStart", "Not all pods are ready or succeeded"),
        ),
    ],
)
def test_the_pods_ready_condition(job: BatchJob, status: dict[str, Any], want: tuple[str, str, str]) -> None:
    assert pods_ready_condition(job, status) == want


def test_the_job_planner_writes_the_condition_only_when_it_changes() -> None:
    job = _job(2)
    workload = {
        "metadata": {"name": "job-j-1", "namespace": "ns", "generation": 1},
        "spec": {"podSets": job.pod_sets(), "queueName": "lq"},
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": ""},
                {"type": "Admitted", "status": "True", "reason": "Admitted", "message": ""},
            ],
            "admission": {"clusterQueue": "cq", "podSetAssignments": []},
        },
    }
    on = Settings(wait_for_pods_ready=True)
    step = plan(job, workload, {}, NOW, on)
    assert isinstance(step, WriteWorkloadStatus) and step.why == "pods ready"
    written = step.compute(workload)
    assert written is not None
    ready = get_condition(written, "PodsReady") or {}
    assert (ready["status"], ready["reason"], ready["observedGeneration"]) == ("True", "Started", 1)
    assert plan(job, {**workload, "status": written}, {}, NOW, on) is None
    assert plan(job, workload, {}, NOW, Settings()) is None  # off: no condition


def test_integrations_tell_when_their_pods_are_ready() -> None:
    from preemption_operator.jobs.jobset import JobSet
    from preemption_operator.jobs.pod import Pods
    from preemption_operator.jobs.raycluster import RayCluster

    jobset = {
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 2, "template": {}}]},
        "status": {"replicatedJobsStatus": [{"name": "w", "ready": 1, "succeeded": 1}]},
    }
    assert JobSet(jobset).pods_ready()
    jobset["status"]["replicatedJobsStatus"][0]["succeeded"] = 0
    assert not JobSet(jobset).pods_ready()
    assert RayCluster({"status": {"state": "ready"}}).pods_ready()
    assert not RayCluster({"status": {"state": "suspended"}}).pods_ready()

    def pod(name: str, ready: bool) -> dict[str, Any]:
        return {
            "metadata": {
                "name": name,
                "labels": {"kueue.x-k8s.io/pod-group-name": "g"},
                "annotations": {"kueue.x-k8s.io/pod-group-total-count": "2"},
            },
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
        }

    assert Pods.compose([pod("a", True), pod("b", True)]).pods_ready()
    assert not Pods.compose([pod("a", True), pod("b", False)]).pods_ready()
    assert not Pods.compose([pod("a", True)]).pods_ready()  # the group is not complete


def test_explain_and_simulate_show_the_timeout_with_the_configuration_file(tmp_path: Any) -> None:
    """`explain --config` with waitForPodsReady: a Workload admitted 15 minutes before --now
    whose pods are not ready is evicted by the 10 minute timeout, and explain says when it may
    come back."""
    from pathlib import Path

    from click.testing import CliRunner

    from preemption_operator.cli import cli

    setup = Path(__file__).resolve().parents[1] / "fixtures" / "pods-ready" / "setup.yaml"
    config = tmp_path / "kueue.yaml"
    config.write_text(
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nwaitForPodsReady:\n  timeout: 10m\n"
    )
    args = [str(setup), "--config", str(config), "--now", "2026-12-01T09:15:00Z"]
    out = CliRunner().invoke(cli, ["explain", *args, "-w", "team/train"])
    assert out.exit_code == 0, out.output
    assert (
        "[1] Evicted (PodsReadyTimeout): Exceeded the PodsReady timeout team/train [WaitForStart]; "
        "requeued no sooner than 2026-12-01T09:16:00Z"
    ) in out.output
    early = CliRunner().invoke(cli, ["simulate", str(setup), "--config", str(config), "--now", "2026-12-01T09:05:00Z"])
    assert "PodsReadyTimeout" not in early.output  # five minutes in: not yet


@pytest.mark.parametrize(("timestamp", "first"), [("Eviction", "young"), ("Creation", "old")])
def test_a_timed_out_workload_queues_by_its_eviction_time_unless_the_strategy_says_creation(
    timestamp: str, first: str
) -> None:
    """Kueue's GetQueueOrderTimestamp: with requeuingStrategy.timestamp Eviction (the default) a
    workload evicted by a PodsReady timeout queues by its eviction time, behind one created
    after it but before that eviction; with Creation it keeps its place."""
    old = pending("old", "cq", 1, created=T0).obj()
    old["status"] = {
        "conditions": [
            {
                "type": "Evicted",
                "status": "True",
                "reason": "PodsReadyTimeout",
                "message": "Exceeded the PodsReady timeout default/old",
                "lastTransitionTime": _at(NOW - MINUTE),
            },
            {
                "type": "Requeued",
                "status": "True",
                "reason": "BackoffFinished",
                "message": "The workload backoff was finished",
                "lastTransitionTime": _at(NOW - MINUTE),
            },
        ]
    }
    young = pending("young", "cq", 1, created=T0 + timedelta(hours=1))
    settings = WaitForPodsReady(requeuing_timestamp=timestamp)
    sim = _run(parse(scenario([cluster_queue("cq", 1)], old, young)), NOW, settings)
    admitted_first = [a["workload"] for a in sim.to_dict()["actions"] if a["action"] == "Admitted"]
    assert admitted_first == [f"default/{first}"]


def test_a_workload_in_its_backoff_counts_as_pending_inadmissible() -> None:
    """Kueue's queue manager keeps a workload in its requeuing backoff among the inadmissible
    ones: the ClusterQueue's and LocalQueue's pendingWorkloads count it, and so does
    kueue_pending_workloads{status="inadmissible"}."""
    from preemption_operator.controller.queue_status import local_queue_counts, pending_count, queue_figures
    from preemption_operator.engine.cache import Cache

    body = pending("wl", "cq").obj()
    body["status"] = {
        "conditions": [
            {
                "type": "Requeued",
                "status": "False",
                "reason": "PodsReadyTimeout",
                "message": "Exceeded the PodsReady timeout default/wl",
                "lastTransitionTime": _at(NOW - MINUTE),
            }
        ],
        "requeueState": {"count": 1, "requeueAt": _at(NOW + MINUTE)},
    }
    cache = Cache(pods_ready=SETTINGS)
    cache.load(parse(scenario([cluster_queue("cq", 4)], body, pending("other", "cq", 1))))
    snapshot = cache.snapshot(NOW)
    assert [wl.key for wl in snapshot.pending.get("cq", [])] == ["default/other"]  # not queued
    assert pending_count(snapshot, "cq") == 2
    (figures,) = queue_figures(snapshot, {})
    assert (figures.pending_active, figures.pending_inadmissible) == (1, 1)
    assert local_queue_counts(snapshot, cache.queues.pending_counts())[("default", "cq")][0] == 2
