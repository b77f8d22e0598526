"""The tables and changes of `kubectl preemption list|stop|resume` (issue 31, item 2): kueuectl's
columns, status names and filters, kubectl's durations, Kueue's stopPolicy and spec.active, and
the preemption risk read from the engine's explanations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from builders import NOW, admitted, cluster_queue, parse, pending, scenario
from preemption_operator.kubectl import control, listing, risk
from preemption_operator.offline import simulate

AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (150, "2m30s"),
        (600, "10m"),
        (179 * 60, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 300, "3h5m"),
        (8 * 3600, "8h"),
        (47 * 3600, "47h"),
        (48 * 3600, "2d"),
        (50 * 3600, "2d2h"),
        (8 * 86400, "8d"),
        (729 * 86400, "729d"),
        (731 * 86400, "2y1d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_durations_are_kubectls(seconds: int, shown: str) -> None:
    assert listing.human_duration(seconds) == shown


def wl(name: str, *conditions: tuple[str, str, datetime], queue: str = "lq", **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "team", "creationTimestamp": "2026-12-01T11:00:00Z", **extra},
        "spec": {"queueName": queue},
        "status": {
            "conditions": [
                {"type": t, "status": s, "lastTransitionTime": at.strftime("%Y-%m-%dT%H:%M:%SZ")}
                for t, s, at in conditions
            ]
        },
    }


def test_workload_status_is_kueues_order_of_precedence() -> None:
    t = AT
    assert listing.workload_status(wl("a")) == "pending"
    assert listing.workload_status(wl("a", ("QuotaReserved", "True", t))) == "quotaReserved"
    assert listing.workload_status(wl("a", ("QuotaReserved", "True", t), ("Admitted", "True", t))) == "admitted"
    assert listing.workload_status(wl("a", ("Admitted", "True", t), ("Finished", "True", t))) == "finished"


def test_the_workload_table_has_kueuectls_columns_then_the_risk() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "1"}
    running = wl("running", ("Admitted", "True", AT - timedelta(minutes=5)), ownerReferences=[job])
    running["status"]["admission"] = {"clusterQueue": "cq"}
    done = wl("done", ("Admitted", "True", AT - timedelta(hours=2)), ("Finished", "True", AT - timedelta(hours=1)))
    done["status"]["admission"] = {"clusterQueue": "cq"}
    waiting = wl("waiting")
    table = listing.workloads(
        [waiting, running, done],
        {"team/lq": "cq"},
        AT,
        with_namespace=False,
        positions={"team/waiting": 0},
        risks={"team/running": [listing.Risk("team/waiting", "classic (InClusterQueue)")]},
    )
    assert table.render() == (
        "NAME      JOB TYPE    JOB NAME   LOCALQUEUE   CLUSTERQUEUE   STATUS     POSITION IN QUEUE   EXEC TIME   AGE"
        "   PREEMPTION RISK\n"
        "done                             lq           cq             FINISHED                       60m         60m\n"
        "running   job.batch   train      lq           cq             ADMITTED                       5m          60m"
        "   team/waiting (classic (InClusterQueue))\n"
        "waiting                          lq           cq             PENDING    0                               60m\n"
    )


def test_workload_filters_are_kueuectls() -> None:
    admitted_ = wl("admitted", ("QuotaReserved", "True", AT), ("Admitted", "True", AT))
    admitted_["status"]["admission"] = {"clusterQueue": "cq"}
    elsewhere = wl("elsewhere", queue="other")
    items = [wl("waiting"), admitted_, elsewhere]
    targets = {"team/lq": "cq", "team/other": "cq"}

    def names(**filters: Any) -> list[str]:
        return [row[0] for row in listing.workloads(items, targets, AT, with_namespace=False, **filters).rows]

    assert names(statuses=["PENDING"]) == ["elsewhere", "waiting"]
    assert names(statuses=["admitted", "pending"]) == ["admitted", "elsewhere", "waiting"]
    assert names(statuses=["all"]) == ["admitted", "elsewhere", "waiting"]
    assert names(local_queue="other") == ["elsewhere"]
    assert names(cluster_queue="cq") == ["admitted"]  # kueuectl: the admission's ClusterQueue
    with_ns = listing.workloads(items, targets, AT, with_namespace=True)
    assert with_ns.headers[0] == "NAMESPACE" and with_ns.rows[0][0] == "team"


def test_a_long_job_type_is_cut_as_kueuectl_cuts_it() -> None:
    owner = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "lws", "uid": "1"}
    (row,) = listing.workloads([wl("w", ownerReferences=[owner])], {}, AT, with_namespace=False).rows
    assert row[1] == "leaderworkerset.lead..."


def test_queue_and_flavor_tables() -> None:
    cq = {
        "metadata": {"name": "cq", "creationTimestamp": "2026-12-01T11:59:00Z"},
        "spec": {"cohortName": "all"},
        "status": {"pendingWorkloads": 3, "admittedWorkloads": 2, "conditions": [{"type": "Active", "status": "True"}]},
    }
    idle = {"metadata": {"name": "idle", "creationTimestamp": "2026-12-01T11:59:00Z"}, "spec": {}}
    assert listing.cluster_queues([idle, cq], AT).render() == (
        "NAME   COHORT   PENDING WORKLOADS   ADMITTED WORKLOADS   ACTIVE   AGE\n"
        "cq     all      3                   2                    true     60s\n"
        "idle            0                   0                    false    60s\n"
    )
    assert [r[0] for r in listing.cluster_queues([idle, cq], AT, active=False).rows] == ["idle"]
    lq = {"metadata": {"name": "lq", "namespace": "team"}, "spec": {"clusterQueue": "cq"}, "status": {}}
    assert listing.local_queues([lq], AT, True).rows == [("team", "lq", "cq", "0", "0", "<unknown>")]
    assert listing.local_queues([lq], AT, False, cluster_queue="other").rows == []
    rf = {"metadata": {"name": "spot"}, "spec": {"nodeLabels": {"tier": "spot", "arch": "arm"}}}
    assert listing.resource_flavors([rf], AT).rows == [("spot", "arch=arm, tier=spot", "<unknown>")]
    assert listing.resource_flavors([], AT).render() == ""


def test_stop_and_resume_are_kueues_stop_policy_and_active() -> None:
    drain = control.stop("clusterqueue", "cq", "ignored")
    assert (drain.path, drain.patch) == (
        "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/cq",
        {"spec": {"stopPolicy": "HoldAndDrain"}},
    )
    assert drain.describe() == "clusterqueue.kueue.x-k8s.io/cq stopped"
    assert drain.describe("client") == "clusterqueue.kueue.x-k8s.io/cq stopped (dry run)"
    hold = control.stop("localqueue", "lq", "team", keep_running=True)
    assert (hold.path, hold.patch) == (
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/team/localqueues/lq",
        {"spec": {"stopPolicy": "Hold"}},
    )
    assert control.resume("localqueue", "lq", "team").patch == {"spec": {"stopPolicy": "None"}}
    assert control.stop("workload", "w", "team").patch == {"spec": {"active": False}}
    back = control.resume("workload", "w", "team")
    assert (back.patch, back.describe("server")) == (
        {"spec": {"active": True}},
        "workload.kueue.x-k8s.io/w resumed (server dry run)",
    )


def _big_mid_low() -> list[Any]:
    """big (2 cpu) pending in a queue of 2 held by low (priority 1) and mid (20)."""
    return parse(
        scenario(
            [cluster_queue("cq", 2, within="LowerPriority")],
            admitted("low", "cq", 1, priority=1),
            admitted("mid", "cq", 1, priority=20),
            pending("big", "cq", 2, priority=10),
        )
    )


def test_risk_names_the_pending_workload_that_would_take_an_admitted_one() -> None:
    """big may take low (lower priority) but not mid; low alone is not enough, so nothing is
    preempted, and low is at risk from big all the same."""
    objects = _big_mid_low()
    sim = simulate.run(objects, NOW, max_cycles=1)
    assert not [a for a in sim.actions if a["action"] == "Preempted"]
    assert risk.risks(sim.to_dict()) == {"default/low": [listing.Risk("default/big", "classic (InClusterQueue)")]}


def test_risk_under_fair_sharing_names_the_candidates_that_were_not_enough() -> None:
    """The same with fair sharing on: the fair strategies take low, big still does not fit, and
    low is at risk from big all the same (its search records low as eligible, not enough)."""
    from preemption_operator.engine.fair_sharing import FairSharing

    objects = _big_mid_low()
    sim = simulate.run(objects, NOW, max_cycles=1, fair_sharing=FairSharing(enabled=True))
    assert not [a for a in sim.actions if a["action"] == "Preempted"]
    found = risk.risks(sim.to_dict())
    assert list(found) == ["default/low"] and [r.preemptor for r in found["default/low"]] == ["default/big"]
