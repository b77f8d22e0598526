"""Kueue's AdmissionChecks: gates between quota reservation and admission, each run by a
controller of its own. A workload that reserved quota in a ClusterQueue with checks is Admitted
only once every check that applies to its flavors is Ready; a check in Retry evicts it (quota
given back, requeued when the check allows), one in Rejected deactivates it (Kueue v0.19.2:
pkg/workload/admissionchecks.go, the workload controller's reconcileSyncAdmissionChecks and
reconcileCheckBasedEviction, pkg/workload/evict's resetChecksOnEviction).

Pure functions over the parsed objects and the status in wire form; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..api import v1beta2
from ..api.meta import format_time
from .workload import find_condition

PENDING, READY, RETRY, REJECTED = "Pending", "Ready", "Retry", "Rejected"
REASON = "AdmissionCheck"
"""The eviction's reason, and the DeactivationTarget's (Kueue's WorkloadEvictedByAdmissionCheck)."""
REJECTED_EVENT = "AdmissionCheckRejected"
NOT_FOUND = "AdmissionCheckNotFound"
INACTIVE = "AdmissionCheckInactive"
ACTIVE = "Active"
UNSATISFIED = "UnsatisfiedAdmissionChecks"
UNSATISFIED_MESSAGE = "The workload has not all checks ready"
FAILED_MESSAGE = "The workload has failed admission checks"
"""Why a pending workload with a check in Retry or Rejected is not nominated (Kueue's nominate)."""

Checks = Mapping[str, frozenset[str]]
"""A ClusterQueue's checks: each name with the flavors it runs for."""


def of_cluster_queue(cq: v1beta2.ClusterQueue) -> dict[str, frozenset[str]]:
    """The checks a ClusterQueue names (admissionChecksStrategy); one with no onFlavors runs for
    every flavor of the queue (Kueue's NewAdmissionChecks)."""
    strategy = cq.spec.admission_checks_strategy
    if strategy is None:
        return {}
    every = frozenset(f.name for rg in cq.spec.resource_groups or [] for f in rg.flavors)
    return {rule.name: frozenset(rule.on_flavors) if rule.on_flavors else every for rule in strategy.admission_checks}


def problems(checks: Checks, objects: Mapping[str, v1beta2.AdmissionCheck]) -> list[tuple[str, str]]:
    """Why a ClusterQueue with these checks cannot admit: Kueue's inactive reasons, with their
    messages, for checks that do not exist or whose controller has not set them Active."""
    missing = sorted(name for name in checks if name not in objects)
    inactive = sorted(name for name in checks if name in objects and not is_active(objects[name]))
    out = []
    if missing:
        out.append((NOT_FOUND, f"references missing AdmissionCheck(s): {','.join(missing)}"))
    if inactive:
        out.append((INACTIVE, f"references inactive AdmissionCheck(s): {','.join(inactive)}"))
    return out


def is_active(check: v1beta2.AdmissionCheck) -> bool:
    for condition in (check.status.conditions if check.status is not None else None) or []:
        if condition.type == ACTIVE:
            return condition.status == "True"
    return False


def required(checks: Checks, flavors: Iterable[str] | None, all_flavors: frozenset[str]) -> frozenset[str]:
    """The checks a workload must pass: with an admission, those running for any flavor it was
    given; without one, only those running for every flavor of the queue (Kueue's
    AdmissionChecksForWorkload)."""
    if flavors is None:
        return frozenset(name for name, on in checks.items() if on >= all_flavors)
    given = frozenset(flavors)
    return frozenset(name for name, on in checks.items() if on & given)


def admitted_flavors(obj: v1beta2.Workload) -> frozenset[str]:
    admission = obj.status.admission if obj.status is not None else None
    if admission is None:
        return frozenset()
    return frozenset(f for psa in admission.pod_set_assignments for f in (psa.flavors or {}).values())


def states(obj: v1beta2.Workload) -> list[v1beta2.AdmissionCheckState]:
    return list((obj.status.admission_checks if obj.status is not None else None) or [])


def failed(obj: v1beta2.Workload) -> bool:
    return any(c.state in (RETRY, REJECTED) for c in states(obj))


def message(checks: Iterable[tuple[str, str]], state: str) -> str:
    """Kueue's buildAdmissionChecksMessage: the checks in `state`, by name, each with its message."""
    ordered = sorted(checks)
    parts = [f'"{name}" ({text})' if text else f'"{name}"' for name, text in ordered]
    noun = "AdmissionChecks" if len(ordered) > 1 else "AdmissionCheck"
    return f"{noun} in {state} state: {'; '.join(parts)}"


def retry_time(obj: v1beta2.Workload) -> datetime | None:
    """The latest time a Retry check asks the workload to wait until (lastTransitionTime +
    requeueAfterSeconds; Kueue's GetMaxRetryTime), None when none asks."""
    latest: datetime | None = None
    for check in states(obj):
        if check.state != RETRY or check.requeue_after_seconds is None:
            continue
        at = check.last_transition_time + timedelta(seconds=check.requeue_after_seconds)
        if latest is None or at > latest:
            latest = at
    return latest


@dataclass(frozen=True)
class Verdict:
    """What the checks of a workload holding quota call for (None from `verdict`: nothing)."""

    kind: str
    """"sync": its list of checks is not the one its queue requires (written first, alone);
    "rejected": to be deactivated; "retry": to be evicted; "ready": to be admitted."""
    message: str = ""
    required: frozenset[str] = frozenset()
    requeue_at: datetime | None = None
    """With "retry": until when it stays out of its queue (None: requeued at once)."""


SYNC, REJECT, RETRY_EVICTION, ADMIT = "sync", "rejected", "retry", "ready"


def verdict(obj: v1beta2.Workload, checks: Checks, all_flavors: frozenset[str], now: datetime) -> Verdict | None:
    """For an active workload holding quota and not being evicted, in Kueue's order: sync the
    list, then Rejected, then Retry, then Admitted once every check is Ready."""
    need = required(checks, admitted_flavors(obj), all_flavors)
    have = states(obj)
    if {c.name for c in have} != need:
        return Verdict(SYNC, required=need)
    rejected = [(c.name, c.message) for c in have if c.state == REJECTED]
    if rejected:
        target = find_condition(obj, "DeactivationTarget")
        if target is not None and target.status == "True":
            return None  # marked already: the deactivation follows
        return Verdict(REJECT, message(rejected, REJECTED))
    retry = [(c.name, c.message) for c in have if c.state == RETRY]
    if retry:
        at = retry_time(obj)
        return Verdict(
            RETRY_EVICTION, f"Evicted due to {message(retry, RETRY)}", requeue_at=at if at and at > now else None
        )
    admitted = find_condition(obj, "Admitted")
    if all(c.state == READY for c in have) and (admitted is None or admitted.status != "True"):
        return Verdict(ADMIT)
    return None


# -- status in wire form --------------------------------------------------------------------------


def synced(current: list[dict[str, Any]] | None, need: Iterable[str], now: datetime) -> list[dict[str, Any]]:
    """The workload's check list with `need` exactly: missing checks added as Pending, others
    dropped, sorted by name (Kueue's syncAdmissionCheckConditions)."""
    wanted = set(need)
    kept = {str(c["name"]): dict(c) for c in current or [] if isinstance(c, dict) and c.get("name") in wanted}
    for name in wanted - kept.keys():
        kept[name] = {"name": name, "state": PENDING, "lastTransitionTime": format_time(now), "message": ""}
    return [kept[name] for name in sorted(kept)]


def all_ready(checks: list[dict[str, Any]] | None) -> bool:
    return all(isinstance(c, dict) and c.get("state") == READY for c in checks or [])


def reset_on_eviction(status: dict[str, Any], now: datetime) -> None:
    """Every check not Pending goes back to Pending, saying what it was; a Retry counts one more
    retry (Kueue's resetChecksOnEviction)."""
    checks = status.get("admissionChecks")
    if not isinstance(checks, list) or not checks:
        return
    out = []
    for check in checks:
        if not isinstance(check, dict) or check.get("state") == PENDING:
            out.append(check)
            continue
        reset = {
            "name": check.get("name"),
            "state": PENDING,
            "message": f"Reset to Pending after eviction. Previously: {check.get('state')}",
            "lastTransitionTime": format_time(now),
        }
        if check.get("requeueAfterSeconds") is not None:
            reset["requeueAfterSeconds"] = check["requeueAfterSeconds"]
        if check.get("state") == RETRY:
            reset["retryCount"] = int(check.get("retryCount") or 0) + 1
        out.append(reset)
    status["admissionChecks"] = out


def pod_set_updates(workload: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(check name, update) for every podSetUpdate the workload's checks carry, in their order."""
    out: list[tuple[str, Mapping[str, Any]]] = []
    for check in (workload.get("status") or {}).get("admissionChecks") or []:
        if not isinstance(check, dict):
            continue
        name = str(check.get("name", ""))
        out.extend((name, update) for update in check.get("podSetUpdates") or [] if isinstance(update, dict))
    return out
