"""Issue 30, item 3: Kueue's AdmissionChecks. A workload that reserved quota in a ClusterQueue with
checks is Admitted only once every check that applies to its flavors is Ready; Retry evicts it
(checks reset to Pending, quota released, requeued when the check allows), Rejected deactivates
it; a ClusterQueue naming a missing or inactive check admits nothing; podSetUpdates reach the
pods. Kueue v0.19.2's cases are translated where they apply, each named after its case."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner

from builders import (
    NOW,
    T0,
    WorkloadBuilder,
    cluster_queue,
    cycle_applied,
    parse,
    pending,
    quota,
    resource_flavor,
    rfc3339,
    scenario,
)
from preemption_operator.api.objects import parse_object
from preemption_operator.api.v1beta2 import ClusterQueue
from preemption_operator.cli import cli
from preemption_operator.engine import admission_checks as ac
from preemption_operator.engine import changes
from preemption_operator.engine.cache import Cache
from preemption_operator.engine.workload_status import get_condition
from preemption_operator.jobs.batch_job import BatchJob
from preemption_operator.jobs.reconciler import (
    FAILED_TO_START,
    PatchJob,
    PodSetUpdateConflict,
    Settings,
    WriteWorkloadStatus,
    admitted_infos,
    plan,
)
from preemption_operator.offline import simulate as simulation

Obj = dict[str, Any]


def check(name: str, active: bool | None = True) -> Obj:
    """An AdmissionCheck; `active` None: no status at all (as a manifest has it)."""
    obj: Obj = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "AdmissionCheck",
        "metadata": {"name": name, "creationTimestamp": rfc3339(T0)},
        "spec": {"controllerName": "example.com/ctrl"},
    }
    if active is not None:
        condition = {"type": "Active", "status": "True" if active else "False", "reason": "Test", "message": ""}
        obj["status"] = {"conditions": [{**condition, "lastTransitionTime": rfc3339(T0)}]}
    return obj


def with_checks(cq: Obj, *rules: str | tuple[str, list[str]]) -> Obj:
    """The ClusterQueue with admissionChecksStrategy rules: a name, or (name, onFlavors)."""
    cq["spec"]["admissionChecksStrategy"] = {
        "admissionChecks": [{"name": r} if isinstance(r, str) else {"name": r[0], "onFlavors": r[1]} for r in rules]
    }
    return cq


def state(name: str, value: str, message: str = "", at: datetime = T0, **more: Any) -> Obj:
    return {"name": name, "state": value, "message": message, "lastTransitionTime": rfc3339(at), **more}


def reserved(name: str, cq: str, *checks: Obj, admitted: bool = False, flavor: str = "default", **kw: Any) -> Obj:
    """A workload holding quota in `cq` (QuotaReserved=True at T0), Admitted only if `admitted`,
    with these check states."""
    body = WorkloadBuilder(name, **kw).admitted(cq, at=T0, flavor=flavor).obj()
    if not admitted:
        body["status"]["conditions"] = [c for c in body["status"]["conditions"] if c["type"] != "Admitted"]
    if checks:
        body["status"]["admissionChecks"] = list(checks)
    return body


def _cycle(objects: list[Obj], now: datetime = NOW) -> tuple[list[changes.StatusChange], dict[str, Obj]]:
    """One cycle; its status changes and, per workload, its status once they are applied."""
    _, made, out = cycle_applied(objects, now)
    return made, out


def _names(checks: list[Obj] | None) -> list[tuple[str, str]]:
    return [(c["name"], c["state"]) for c in checks or []]


# -- Kueue's TestSyncCheckStates (pkg/controller/core/workload_controller_test.go) ---------------------


@pytest.mark.parametrize(
    ("case", "states", "required", "want"),
    [
        ("nil conditions, nil list", None, [], []),
        ("add to nil conditions", None, ["ac1", "ac2"], [("ac1", "Pending"), ("ac2", "Pending")]),
        (
            "add and remove",
            [state("ac0", "Pending"), state("ac1", "Pending")],
            ["ac1", "ac2"],
            [("ac1", "Pending"), ("ac2", "Pending")],
        ),
        ("cleanup", [state("ac0", "Pending"), state("ac1", "Pending")], [], []),
        (
            "preserve conditions data",
            [state("ac0", "Ready", "Message one"), state("ac1", "Pending")],
            ["ac0", "ac1"],
            [("ac0", "Ready"), ("ac1", "Pending")],
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_sync_check_states(case: str, states: list[Obj] | None, required: list[str], want: list[Any]) -> None:
    got = ac.synced(states, required, NOW)
    assert _names(got) == want
    if case == "preserve conditions data":
        assert got[0] == states[0]  # type: ignore[index]  # message and time kept as they were
    for added in got:
        if added["name"] not in {s["name"] for s in states or []}:
            assert (added["message"], added["lastTransitionTime"]) == ("", rfc3339(NOW))


# -- Kueue's TestReconcileSyncAdmissionChecks: which checks a workload must list ------------------------


def _queue(*rules: str | tuple[str, list[str]]) -> ClusterQueue:
    cq = cluster_queue("cq", {"flavor1": quota(1), "flavor2": quota(1)})
    return parse_object(with_checks(cq, *rules) if rules else cq)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("case", "rules", "flavors", "want"),
    [
        ("no checks in cq", (), None, set()),
        ("add checks from cq", ("ac1", "ac2"), None, {"ac1", "ac2"}),
        (
            "add only checks covering all flavors to unadmitted wl from cq with strategy",
            (("ac1", ["flavor1"]), "ac2"),
            None,
            {"ac2"},
        ),
        (
            "add checks to admitted wl from cq with strategy",
            (("ac1", ["flavor1"]), ("ac2", ["flavor2"]), "ac3"),
            ["flavor1"],
            {"ac1", "ac3"},
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_reconcile_sync_admission_checks(case: str, rules: Any, flavors: list[str] | None, want: set[str]) -> None:
    queue = _queue(*rules)
    checks = ac.of_cluster_queue(queue)
    every = frozenset({"flavor1", "flavor2"})
    assert ac.required(checks, flavors, every) == want


def test_reconcile_sync_admission_checks_keeps_only_existing_valid_checks() -> None:
    """Kueue's "keep only existing valid checks": ac1 keeps its Ready state, ac3 goes, ac2 comes."""
    checks = ac.of_cluster_queue(_queue("ac1", "ac2"))
    need = ac.required(checks, None, frozenset({"flavor1", "flavor2"}))
    got = ac.synced([state("ac1", "Ready"), state("ac3", "Ready")], need, NOW)
    assert _names(got) == [("ac1", "Ready"), ("ac2", "Pending")]


# -- Kueue's TestGetMaxRetryTime (pkg/workload/admissionchecks_test.go) ---------------------------------

BASE = datetime(2025, 1, 1, 12, 0, 0, tzinfo=NOW.tzinfo)


@pytest.mark.parametrize(
    ("case", "states", "want"),
    [
        ("no admission checks", [], None),
        ("admission check with nil RequeueAfterSeconds", [state("check1", "Retry", at=BASE)], None),
        (
            "single admission check with valid retry time",
            [state("check1", "Retry", at=BASE, requeueAfterSeconds=60)],
            BASE + timedelta(seconds=60),
        ),
        (
            "multiple admission checks, returns max retry time",
            [
                state("check1", "Retry", at=BASE, requeueAfterSeconds=60),
                state("check2", "Retry", at=BASE, requeueAfterSeconds=120),
                state("check3", "Retry", at=BASE, requeueAfterSeconds=30),
            ],
            BASE + timedelta(seconds=120),
        ),
        (
            "multiple checks with mixed nil and valid values",
            [state("check1", "Retry", at=BASE), state("check2", "Retry", at=BASE, requeueAfterSeconds=90)],
            BASE + timedelta(seconds=90),
        ),
        (
            "checks with different base times",
            [
                state("check1", "Retry", at=BASE, requeueAfterSeconds=60),
                state("check2", "Retry", at=BASE + timedelta(seconds=30), requeueAfterSeconds=60),
            ],
            BASE + timedelta(seconds=90),
        ),
        # Only checks in Retry count (GetMaxRetryTime skips the others).
        ("a Ready check's delay is not a retry", [state("check1", "Ready", at=BASE, requeueAfterSeconds=60)], None),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_get_max_retry_time(case: str, states: list[Obj], want: datetime | None) -> None:
    # (Kueue's "zero LastTransitionTime" case has no equivalent: the API requires the time.)
    assert ac.retry_time(parse_object(reserved("wl", "cq", *states))) == want


# -- Kueue's buildAdmissionChecksMessage ----------------------------------------------------------------


def test_check_messages_are_kueues() -> None:
    assert ac.message([("check", "")], "Rejected") == 'AdmissionCheck in Rejected state: "check"'
    assert ac.message([("b", "later"), ("a", "")], "Retry") == 'AdmissionChecks in Retry state: "a"; "b" (later)'


# -- the ClusterQueue's Active condition (Kueue's TestClusterQueueUpdateWithAdmissionCheck and the
#    cache's "check not found", "check inactive", "flavor and check not found") ---------------------------


def _active(*objects: Obj) -> tuple[bool, str, str]:
    cache = Cache()
    cache.load(parse(objects))
    cq = cache.snapshot(NOW).cluster_queues["cq"]
    return cq.active, cq.inactive_reason, cq.inactive_message


CHECKS_CQ = with_checks(cluster_queue("cq", 4), "check1", "check2", "check3")


def test_a_queue_whose_checks_are_all_active_admits() -> None:
    got = _active(resource_flavor(), CHECKS_CQ, check("check1"), check("check2"), check("check3"))
    assert got == (True, "Ready", "Can admit new workloads")


def test_a_queue_naming_a_missing_check_is_inactive() -> None:
    got = _active(resource_flavor(), CHECKS_CQ, check("check1"), check("check2"))
    assert got == (
        False,
        "AdmissionCheckNotFound",
        "Can't admit new workloads: references missing AdmissionCheck(s): check3.",
    )


def test_a_queue_naming_an_inactive_check_is_inactive() -> None:
    got = _active(resource_flavor(), CHECKS_CQ, check("check1"), check("check2"), check("check3", active=False))
    assert got == (
        False,
        "AdmissionCheckInactive",
        "Can't admit new workloads: references inactive AdmissionCheck(s): check3.",
    )
    # A check whose controller never said (no Active condition) is not active either.
    got = _active(resource_flavor(), CHECKS_CQ, check("check1"), check("check2"), check("check3", active=None))
    assert got[1] == "AdmissionCheckInactive"


def test_flavor_and_check_not_found_are_both_named_the_flavor_first() -> None:
    got = _active(with_checks(cluster_queue("cq", 4, flavor="flavor1"), "check1"))
    assert got == (
        False,
        "FlavorNotFound",
        "Can't admit new workloads: references missing ResourceFlavor(s): flavor1, references missing "
        "AdmissionCheck(s): check1.",
    )


def test_a_queue_with_an_inactive_check_admits_nothing() -> None:
    objects = scenario([with_checks(cluster_queue("cq", 4), "gate")], pending("wl", "cq"), extra=[check("gate", False)])
    made, out = _cycle(objects)
    assert [(c.action, c.reason) for c in made] == [(changes.CHECKS_SYNCED, ""), ("Pending", "Suspended")]
    assert _names(out["default/wl"]["admissionChecks"]) == [("gate", "Pending")]  # listed while it waits


# -- the state machine (Kueue's workload controller: TestReconcile, and the eviction and requeue cases in
#    workload_controller_eviction_test.go and workload_controller_requeue_test.go) -------------------------

GATED = [with_checks(cluster_queue("cq", 4), "check")]


def test_reservation_in_a_queue_with_checks_waits_for_them() -> None:
    made, out = _cycle(scenario(GATED, pending("wl", "cq", 2), extra=[check("check")]))
    assert [c.action for c in made] == ["Admitted"]
    assert made[0].record["action"] == "QuotaReserved" and made[0].record["admissionChecks"] == ["check"]
    assert [(e.reason) for e in made[0].events] == ["QuotaReserved"]  # no Admitted Event yet
    status = out["default/wl"]
    assert (get_condition(status, "QuotaReserved") or {})["status"] == "True"
    admitted = get_condition(status, "Admitted") or {}
    assert (admitted["status"], admitted["reason"], admitted["message"]) == (
        "False",
        "UnsatisfiedAdmissionChecks",
        "The workload has not all checks ready",
    )
    assert _names(status["admissionChecks"]) == [("check", "Pending")]


def test_a_workload_waiting_for_checks_holds_its_quota() -> None:
    objects = scenario(
        GATED, reserved("a", "cq", state("check", "Pending"), cpu=3), pending("b", "cq", 2), extra=[check("check")]
    )
    made, _ = _cycle(objects)
    assert [(c.action, c.key) for c in made if c.action != changes.CHECKS_SYNCED] == [("Pending", "default/b")]


def test_a_workload_waiting_for_checks_is_a_preemption_candidate() -> None:
    cq = with_checks(cluster_queue("cq", 4, within="LowerPriority"), "check")
    objects = scenario(
        [cq],
        reserved("low", "cq", state("check", "Pending"), cpu=3, priority=1),
        pending("high", "cq", 3, priority=10),
        extra=[check("check")],
    )
    made, _ = _cycle(objects)
    assert [(c.action, c.key) for c in made if c.action != changes.CHECKS_SYNCED] == [
        ("Preempted", "default/low"),
        ("Pending", "default/high"),  # waiting for its victim's quota
    ]


def test_assign_admission_checks_from_cluster_queue_strategy() -> None:
    """Kueue's "assign Admission Checks from ClusterQueue.spec.AdmissionCheckStrategy": a workload
    holding quota on flavor1 gets ac1 (flavor1 only) and ac2 (every flavor), both Pending."""
    cq = with_checks(cluster_queue("cq", {"flavor1": quota(4), "flavor2": quota(4)}), ("ac1", ["flavor1"]), "ac2")
    objects = scenario(
        [cq], reserved("wl", "cq", flavor="flavor1"), extra=[check("ac1"), check("ac2")], flavors=("flavor1", "flavor2")
    )
    made, out = _cycle(objects)
    assert [c.action for c in made] == [changes.CHECKS_SYNCED]
    assert _names(out["default/wl"]["admissionChecks"]) == [("ac1", "Pending"), ("ac2", "Pending")]
    assert get_condition(out["default/wl"], "Admitted") is None  # not admitted before they are Ready


def test_admit_once_every_check_is_ready() -> None:
    """Kueue's "admit": Admitted=True, and the Event with the wait since the reservation."""
    objects = scenario(GATED, reserved("wl", "cq", state("check", "Ready")), extra=[check("check")])
    made, out = _cycle(objects)
    assert [c.action for c in made] == [changes.CHECKS_READY]
    admitted = get_condition(out["default/wl"], "Admitted") or {}
    assert (admitted["status"], admitted["reason"], admitted["message"]) == (
        "True",
        "Admitted",
        "The workload is admitted",
    )
    waited = int((NOW - T0).total_seconds())
    assert [(e.type, e.reason, e.message) for e in made[0].events] == [
        ("Normal", "Admitted", f"Admitted by ClusterQueue cq, wait time since reservation was {waited}s")
    ]


def test_already_admitted() -> None:
    objects = scenario(GATED, reserved("wl", "cq", state("check", "Ready"), admitted=True), extra=[check("check")])
    assert _cycle(objects)[0] == []


def test_admitted_workloads_whose_checks_are_ready_are_looked_at_again_only_when_their_queue_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each snapshot asks what the checks of workloads holding quota call for. Admitted ones whose
    checks are all Ready can only need their list synced to a changed queue: they are looked at
    per group (queue, checks, flavors), not one by one, until their queue requires other checks."""
    asked: list[str] = []
    verdict = ac.verdict
    monkeypatch.setattr(ac, "verdict", lambda obj, *rest: asked.append(obj.metadata.name) or verdict(obj, *rest))
    running = [reserved(f"wl-{i}", "cq", state("check", "Ready"), admitted=True) for i in range(50)]
    waiting = reserved("waiting", "cq", state("check", "Pending"))
    cache = Cache()
    cache.load(parse(scenario(GATED, *running, waiting, extra=[check("check"), check("other")])))
    assert cache.snapshot(NOW).checks == [] and asked == ["waiting"]

    asked.clear()
    cq = with_checks(cluster_queue("cq", 4), "check", "other")
    cache.upsert(parse_object(cq))
    found = {info.name: (v.kind, v.required) for info, v in cache.snapshot(NOW).checks}
    assert found == {wl["metadata"]["name"]: (ac.SYNC, {"check", "other"}) for wl in [*running, waiting]}
    assert len(asked) == 51


def test_not_all_checks_ready_is_not_admitted() -> None:
    objects = scenario(
        [with_checks(cluster_queue("cq", 4), "a", "b")],
        reserved("wl", "cq", state("a", "Ready"), state("b", "Pending")),
        extra=[check("a"), check("b")],
    )
    assert _cycle(objects)[0] == []


@pytest.mark.parametrize(
    ("case", "message", "admitted"),
    [
        ("unadmitted workload with rejected checks gets deactivated", "", False),
        ("admitted workload with rejected checks gets deactivated", "", True),
        ("admitted workload with rejected checks gets deactivated, with message", "quota exceeded", True),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_rejected_checks_deactivate(case: str, message: str, admitted: bool) -> None:
    objects = scenario(
        GATED, reserved("wl", "cq", state("check", "Rejected", message), admitted=admitted), extra=[check("check")]
    )
    made, out = _cycle(objects)
    assert [c.action for c in made] == ["Deactivated"]
    assert made[0].deactivate  # then spec.active=false
    text = 'AdmissionCheck in Rejected state: "check"' + (f" ({message})" if message else "")
    target = get_condition(out["default/wl"], "DeactivationTarget") or {}
    assert (target["status"], target["reason"], target["message"]) == ("True", "AdmissionCheck", text)
    assert [(e.type, e.reason, e.message) for e in made[0].events] == [
        ("Warning", "AdmissionCheckRejected", f"Deactivated due to {text}")
    ]


def test_workload_with_deactivation_target_is_deactivated_and_its_checks_reset() -> None:
    """Kueue's "workload with deactivation target condition should be deactivated and admission checks
    reset": Evicted DeactivatedDueToAdmissionCheck, every check back to Pending saying what it was."""
    body = reserved("wl", "cq", state("check-1", "Rejected"), state("check-2", "Retry"), admitted=True)
    body["spec"]["active"] = False
    body["status"]["conditions"].append(
        {
            "type": "DeactivationTarget",
            "status": "True",
            "reason": "AdmissionCheck",
            "message": 'AdmissionCheck in Rejected state: "check-1"',
            "lastTransitionTime": rfc3339(T0),
        }
    )
    objects = scenario(
        [with_checks(cluster_queue("cq", 4), "check-1", "check-2")], body, extra=[check("check-1"), check("check-2")]
    )
    made, out = _cycle(objects)
    assert [c.action for c in made] == ["Evicted"]
    message = 'The workload is deactivated due to AdmissionCheck in Rejected state: "check-1"'
    assert [(e.reason, e.message) for e in made[0].events] == [("EvictedDueToDeactivatedDueToAdmissionCheck", message)]
    status = out["default/wl"]
    evicted = get_condition(status, "Evicted") or {}
    assert (evicted["reason"], evicted["message"]) == ("DeactivatedDueToAdmissionCheck", message)
    assert [(c["name"], c["state"], c["message"], c.get("retryCount")) for c in status["admissionChecks"]] == [
        ("check-1", "Pending", "Reset to Pending after eviction. Previously: Rejected", None),
        ("check-2", "Pending", "Reset to Pending after eviction. Previously: Retry", 1),
    ]
    assert status["schedulingStats"]["evictions"] == [
        {"reason": "Deactivated", "underlyingCause": "AdmissionCheck", "count": 1}
    ]


@pytest.mark.parametrize("message", ["", "no capacity"], ids=["", "with message"])
def test_workload_with_retry_checks_is_evicted_and_its_checks_pending(message: str) -> None:
    """Kueue's "workload with retry checks should be evicted and checks should be pending" (and its
    "with message" variant): the quota is released at once, requeued."""
    objects = scenario(
        [with_checks(cluster_queue("cq", 4), "check-1", "check-2")],
        reserved("wl", "cq", state("check-1", "Retry", message), state("check-2", "Ready")),
        extra=[check("check-1"), check("check-2")],
    )
    made, out = _cycle(objects)
    assert [c.action for c in made] == ["Evicted"]
    text = 'Evicted due to AdmissionCheck in Retry state: "check-1"' + (f" ({message})" if message else "")
    assert [(e.reason, e.message) for e in made[0].events] == [("EvictedDueToAdmissionCheck", text)]
    status = out["default/wl"]
    evicted = get_condition(status, "Evicted") or {}
    assert (evicted["reason"], evicted["message"]) == ("AdmissionCheck", text)
    assert [(c["name"], c["state"], c["message"], c.get("retryCount")) for c in status["admissionChecks"]] == [
        ("check-1", "Pending", "Reset to Pending after eviction. Previously: Retry", 1),
        ("check-2", "Pending", "Reset to Pending after eviction. Previously: Ready", None),
    ]
    assert status["schedulingStats"]["evictions"] == [{"reason": "AdmissionCheck", "underlyingCause": "", "count": 1}]
    requeued = get_condition(status, "Requeued") or {}
    assert (requeued["status"], requeued["reason"]) == ("False", "AdmissionCheck")
    assert "admission" not in status and "requeueState" not in status  # retried at once


def test_a_retry_delay_holds_the_workload_until_it_passes() -> None:
    """Kueue's "should update requeueState.requeueAt when admission check sets a delay", then "should
    keep the WorkloadRequeued condition until the AdmissionCheck backoff expires" and "should set the
    WorkloadRequeued condition when the AdmissionCheck backoff expires"."""
    at = NOW - timedelta(seconds=10)
    objects = scenario(
        GATED,
        reserved("wl", "cq", state("check", "Retry", at=at, requeueAfterSeconds=60)),
        extra=[check("check")],
    )
    first = simulation.run(parse(objects), NOW)
    assert [a["action"] for a in first.to_dict()["actions"]] == ["Evicted"]
    assert first.to_dict()["actions"][0]["requeueAt"] == rfc3339(at + timedelta(seconds=60))
    wl = first.workloads["default/wl"].to_wire()
    assert wl["status"]["requeueState"] == {"requeueAt": rfc3339(at + timedelta(seconds=60))}
    rest = [o for o in parse(objects) if getattr(o, "kind", "") != "Workload"]
    still = simulation.run([*rest, parse_object(wl)], NOW + timedelta(seconds=49))
    assert still.to_dict()["actions"] == []
    later = simulation.run([*rest, parse_object(wl)], NOW + timedelta(seconds=50))
    assert [a["action"] for a in later.to_dict()["actions"]] == ["Requeued", "QuotaReserved"]
    requeued = get_condition(later.workloads["default/wl"].to_wire()["status"], "Requeued") or {}
    assert (requeued["status"], requeued["reason"]) == ("True", "BackoffFinished")


@pytest.mark.parametrize(
    ("case", "written", "want"),
    [
        ("should not update requeueState.requeueAt when admission check delay is smaller", 120, 120),
        ("should always use the biggest admission check delay", 30, 60),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_a_later_requeue_at_is_never_brought_forward(case: str, written: int, want: int) -> None:
    body = reserved("wl", "cq", state("check", "Retry", at=NOW, requeueAfterSeconds=60))
    body["status"]["requeueState"] = {"count": 2, "requeueAt": rfc3339(NOW + timedelta(seconds=written))}
    _, out = _cycle(scenario(GATED, body, extra=[check("check")]))
    assert out["default/wl"]["requeueState"] == {"count": 2, "requeueAt": rfc3339(NOW + timedelta(seconds=want))}


def test_checks_follow_the_cluster_queue() -> None:
    """Kueue's integration case "the workload should have checks updated when changed on the cluster
    queue": a pending workload lists the checks that run for every flavor (not check3, on flavor2
    only); when the queue's checks change, the list follows and a kept check keeps its state."""
    flavors = ("on-demand", "spot")
    cq = cluster_queue("cq", {"on-demand": quota(5), "spot": quota(5)})
    checks = [check("check1"), check("check2"), check("check3")]
    first = scenario(
        [with_checks(dict(cq), "check1", "check2", ("check3", ["spot"]))],
        pending("wl", "cq", 50),  # never fits: it stays pending
        extra=checks,
        flavors=flavors,
    )
    _, out = _cycle(first)
    assert _names(out["default/wl"]["admissionChecks"]) == [("check1", "Pending"), ("check2", "Pending")]

    body = pending("wl", "cq", 50).obj()
    body["status"] = {
        "admissionChecks": [
            state("check1", "Ready", "check successfully passed"),
            state("check2", "Retry", "check rejected"),
        ]
    }
    cq2 = cluster_queue("cq", {"on-demand": quota(5), "spot": quota(5)})
    _, out = _cycle(scenario([with_checks(cq2, "check2", "check3")], body, extra=checks, flavors=flavors))
    got = out["default/wl"]["admissionChecks"]
    assert _names(got) == [("check2", "Retry"), ("check3", "Pending")]
    assert got[0] == body["status"]["admissionChecks"][1]


def test_a_pending_workload_with_a_failed_check_is_not_nominated() -> None:
    """Kueue's nominate: "The workload has failed admission checks" (PendingEvaluation); the next in
    its queue is looked at instead."""
    first = pending("first", "cq", 1, created=T0).obj()
    first["status"] = {"admissionChecks": [state("check", "Retry")]}
    objects = scenario(
        GATED, first, pending("second", "cq", 1, created=T0 + timedelta(seconds=1)), extra=[check("check")]
    )
    made, out = _cycle(objects)
    assert [(c.action, c.key) for c in made if c.action != changes.CHECKS_SYNCED] == [
        ("Admitted", "default/second"),
        ("Pending", "default/first"),
    ]
    reason = get_condition(out["default/first"], "QuotaReserved") or {}
    assert (reason["reason"], reason["message"]) == ("PendingEvaluation", "The workload has failed admission checks")


def test_a_queue_without_checks_admits_at_once() -> None:
    made, out = _cycle(scenario([cluster_queue("cq", 4)], pending("wl", "cq")))
    assert [e.reason for e in made[0].events] == ["QuotaReserved", "Admitted"]
    assert (get_condition(out["default/wl"], "Admitted") or {})["status"] == "True"
    assert "admissionChecks" not in out["default/wl"]


# -- podSetUpdates (Kueue's getPodSetsInfoFromStatus and PodSetInfo.Merge, TestMergeRestore) -------------


def _job_workload(*checks: Obj) -> Obj:
    wl = reserved("job-wl", "cq", *checks, admitted=True)
    wl["spec"]["queueName"] = "cq"
    return wl


def test_pod_set_updates_reach_the_pods_when_the_job_starts() -> None:
    update = {
        "name": "main",
        "labels": {"provisioned": "yes"},
        "annotations": {"example.com/request": "pr-1"},
        "nodeSelector": {"pool": "provisioned"},
        "tolerations": [{"key": "provisioned", "operator": "Exists", "effect": "NoSchedule"}],
    }
    wl = _job_workload(state("prov", "Ready", podSetUpdates=[update]))
    (info,) = admitted_infos(wl, {"default": _flavor()}) or []
    assert info.labels["provisioned"] == "yes" and info.labels["kueue.x-k8s.io/podset"] == "main"
    assert info.annotations["example.com/request"] == "pr-1"
    assert info.node_selector == {"pool": "provisioned"}
    assert {"key": "provisioned", "operator": "Exists", "effect": "NoSchedule"} in info.tolerations


@pytest.mark.parametrize(
    ("field", "key"),
    [("labels", "kueue.x-k8s.io/podset"), ("nodeSelector", "zone"), ("annotations", "kueue.x-k8s.io/workload")],
)
def test_a_pod_set_update_changing_what_admission_set_is_a_conflict(field: str, key: str) -> None:
    flavor = _flavor({"zone": "a"})
    other = {"name": "main", field: {key: "other"}}
    wl = _job_workload(state("prov", "Ready", podSetUpdates=[other]))
    with pytest.raises(PodSetUpdateConflict) as caught:
        admitted_infos(wl, {"default": flavor})
    assert str(caught.value).startswith(
        f'in admission check "prov": invalid admission check PodSetUpdate: conflict for {field}: conflict for key={key}, '
    )


def test_two_checks_setting_a_key_differently_conflict_and_the_workload_fails_to_start() -> None:
    a = state("a", "Ready", podSetUpdates=[{"name": "main", "labels": {"tier": "x"}}])
    b = state("b", "Ready", podSetUpdates=[{"name": "main", "labels": {"tier": "y"}}])
    wl = _job_workload(a, b)
    job = BatchJob(_suspended_job())
    step = plan(job, wl, {"default": _flavor()}, NOW, Settings())
    assert isinstance(step, WriteWorkloadStatus)
    assert step.event is not None and step.event.reason == FAILED_TO_START
    status = step.compute(wl)
    finished = get_condition(status or {}, "Finished") or {}
    assert (finished["status"], finished["reason"]) == ("True", "FailedToStart")
    assert finished["message"] == (
        'in admission check "b": invalid admission check PodSetUpdate: conflict for labels: conflict for key=tier, '
        "value1=x, value2=y"
    )


def test_a_job_waiting_for_checks_is_not_started() -> None:
    wl = reserved("job-wl", "cq", state("prov", "Pending"))
    wl["spec"]["queueName"] = "cq"
    step = plan(BatchJob(_suspended_job()), wl, {"default": _flavor()}, NOW, Settings())
    assert not isinstance(step, PatchJob)


def _flavor(labels: dict[str, str] | None = None) -> Any:
    from preemption_operator.jobs.reconciler import Flavor

    return Flavor(labels or {}, ())


def _suspended_job() -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "job",
            "namespace": "default",
            "uid": "job-uid",
            "labels": {"kueue.x-k8s.io/queue-name": "cq"},
        },
        "spec": {
            "suspend": True,
            "parallelism": 1,
            "completions": 1,
            "template": {"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]}},
        },
    }


# -- simulate --check-state ------------------------------------------------------------------------------


def _simulate(tmp_path: Any, *flags: str) -> Any:
    objects = scenario(GATED, pending("wl", "cq", 2), extra=[check("check", active=None)])
    import yaml

    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return CliRunner().invoke(cli, ["simulate", str(path), "--output", "json", "--now", rfc3339(NOW), *flags])


@pytest.mark.parametrize(
    ("answer", "want"),
    [
        ("Ready", ["QuotaReserved", "CheckAnswered", "Admitted"]),
        ("Retry", ["QuotaReserved", "CheckAnswered", "Evicted", "Requeued", "QuotaReserved"]),
        ("Rejected", ["QuotaReserved", "CheckAnswered", "Deactivated", "Evicted", "Pending"]),
    ],
)
def test_simulate_answers_a_check_as_told(tmp_path: Any, answer: str, want: list[str]) -> None:
    import json

    result = _simulate(tmp_path, "--check-state", f"check={answer}")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert [a["action"] for a in out["actions"]] == want
    assert any("AdmissionCheck check has no Active condition: taken as active" in w for w in out["warnings"])


def test_simulate_without_an_answer_leaves_the_workload_waiting(tmp_path: Any) -> None:
    import json

    out = json.loads(_simulate(tmp_path).stdout)
    assert [a["action"] for a in out["actions"]] == ["QuotaReserved"]


@pytest.mark.parametrize(
    ("flag", "error"),
    [
        (
            "check=Maybe",
            "error: --check-state: 'check=Maybe' is not NAME=STATE with STATE one of Ready, Retry, Rejected",
        ),
        ("check", "error: --check-state: 'check' is not NAME=STATE"),
        ("other=Ready", "error: --check-state: no AdmissionCheck 'other' in the input; the input has check"),
    ],
)
def test_simulate_refuses_a_bad_check_state(tmp_path: Any, flag: str, error: str) -> None:
    result = _simulate(tmp_path, "--check-state", flag)
    assert result.exit_code == 2
    assert error in result.output


def test_explain_tells_a_workload_waiting_for_its_checks(tmp_path: Any) -> None:
    import yaml

    objects = scenario(GATED, pending("wl", "cq", 2), extra=[check("check")])
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    args = ["explain", str(path), "--workload", "default/wl", "--now", rfc3339(NOW)]
    waiting = CliRunner().invoke(cli, args)
    assert waiting.exit_code == 0, waiting.output
    assert "  quota reserved in ClusterQueue cq\n  AdmissionCheck check Pending\n" in waiting.stdout
    assert "[1] quota reserved in cq, waiting for check" in waiting.stdout
    ready = CliRunner().invoke(cli, [*args, "--check-state", "check=Ready"])
    assert "[2] AdmissionCheck check answered Ready" in ready.stdout
    assert "  admitted in ClusterQueue cq\n  AdmissionCheck check Ready: --check-state\n" in ready.stdout


# -- Kueue's integration cases ------------------------------------------------------------------------


def test_the_workload_gets_the_checks_of_its_flavor_and_then_of_the_changed_queue() -> None:
    """Kueue's test/integration/singlecluster/scheduler/workload_controller_test.go, "the queue has
    admission check strategies": "the workload should have appropriate AdditionalChecks added". A
    workload reserving on-demand lists check1 (on-demand) and check2 (every flavor); the queue then
    runs check2 on reservation only and check3 everywhere: it lists check1 and check3; both Ready,
    it is admitted."""
    flavors = ("reservation", "on-demand")
    checks = [check("check1"), check("check2"), check("check3")]

    def queue(*rules: str | tuple[str, list[str]]) -> Obj:
        gpu = {"reservation": {"example.com/gpu": 1}, "on-demand": {"example.com/gpu": 5}}
        cq = cluster_queue("cq", None, flavor="reservation", resources={"example.com/gpu": 1})
        cq["spec"]["resourceGroups"] = [
            {
                "coveredResources": ["example.com/gpu"],
                "flavors": [
                    {"name": f, "resources": [{"name": "example.com/gpu", "nominalQuota": str(n["example.com/gpu"])}]}
                    for f, n in gpu.items()
                ],
            }
        ]
        return with_checks(cq, *rules)

    wl = WorkloadBuilder("wl", queue="cq", cpu=None, requests={"example.com/gpu": 3})
    first = simulation.run(
        parse(
            scenario(
                [queue(("check1", ["on-demand"]), "check2", ("check3", ["reservation"]))],
                wl,
                extra=checks,
                flavors=flavors,
            )
        ),
        NOW,
    )
    status = first.workloads["default/wl"].to_wire()["status"]
    assert status["admission"]["podSetAssignments"][0]["flavors"] == {"example.com/gpu": "on-demand"}
    assert _names(status["admissionChecks"]) == [("check1", "Pending"), ("check2", "Pending")]
    assert (get_condition(status, "Admitted") or {})["status"] == "False"

    held = first.workloads["default/wl"].to_wire()
    changed = [queue(("check1", ["on-demand"]), ("check2", ["reservation"]), "check3")]
    rest = [o for o in scenario(changed, extra=checks, flavors=flavors)]
    _, out = _cycle([*rest, held])
    assert _names(out["default/wl"]["admissionChecks"]) == [("check1", "Pending"), ("check3", "Pending")]

    held["status"] = out["default/wl"]
    held["status"]["admissionChecks"] = [
        state("check1", "Ready", "check successfully passed"),
        state("check3", "Ready", "check successfully passed"),
    ]
    _, out = _cycle([*rest, held])
    assert (get_condition(out["default/wl"], "Admitted") or {})["status"] == "True"


def test_quota_reserved_is_counted_and_admitted_only_once_the_checks_are_ready() -> None:
    """Kueue's scheduler integration case "Should admit workloads with admission checks": quota
    reserved 1, admitted 0; then all Ready: admitted 1, and the checks' wait observed."""
    from preemption_operator.controller.metrics import Metrics

    metrics = Metrics()
    labels = {"cluster_queue": "cq", "priority_class": "", "replica_role": "standalone"}
    metrics.admitted_workload("cq", "", 2.0, checked=True)
    value = metrics.registry.get_sample_value
    assert value("kueue_quota_reserved_workloads_total", labels) == 1
    assert value("kueue_admitted_workloads_total", labels) is None
    metrics.checks_ready("cq", "", 5.0, 3.0)
    assert value("kueue_admitted_workloads_total", labels) == 1
    assert value("kueue_admission_checks_wait_time_seconds_count", labels) == 1
    assert value("kueue_admission_checks_wait_time_seconds_sum", labels) == 3.0


def test_a_job_waiting_for_its_checks_is_told_what_they_say() -> None:
    """Kueue's recordAdmissionCheckUpdate: while the job is suspended with quota reserved, an Event
    UpdatedAdmissionCheck gives the pending checks' messages, `name: message` joined by "; "."""
    from preemption_operator.jobs.reconciler import Wait

    wl = reserved(
        "job-wl",
        "cq",
        state("a", "Pending", "waiting for capacity"),
        state("b", "Pending"),
        state("c", "Pending", "provisioning request created"),
        state("d", "Ready", "done"),
    )
    wl["spec"]["queueName"] = "cq"
    step = plan(BatchJob(_suspended_job()), wl, {"default": _flavor()}, NOW, Settings())
    assert isinstance(step, Wait)
    assert (step.event.type, step.event.reason, step.event.message) == (
        "Normal",
        "UpdatedAdmissionCheck",
        "a: waiting for capacity; c: provisioning request created",
    )
    quiet = reserved("job-wl", "cq", state("a", "Pending"))
    quiet["spec"]["queueName"] = "cq"
    assert plan(BatchJob(_suspended_job()), quiet, {"default": _flavor()}, NOW, Settings()) is None
