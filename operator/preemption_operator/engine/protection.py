"""Protections beyond Kueue: who may never, or only reluctantly, be preempted, and when.

- PreemptionToleration (scheduler-plugins): a victim's priority class may set a minimum
  preemptor priority and how long, after its quota was reserved, it tolerates preemptors below
  that minimum.
- YuniKorn's soft opt-out: `yunikorn.apache.org/allow-preemption: "false"` makes a workload a
  last resort, not untouchable.
- YuniKorn's queue policies, as annotations on ClusterQueues and Cohorts: `fence` keeps a
  preemptor's victims inside the fenced subtree (one way), `disabled` makes a subtree's
  workloads non-victims (inherited), and a preemption delay.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..api import duration
from ..api.meta import format_time
from .quota import QuotaNode
from .workload import PriorityClassInfo, WorkloadInfo

TOLERATION_PREFIXES = (
    "preemption-toleration.scheduling.x-k8s.io/",  # current
    "preemption-toleration.scheduling.sigs.k8s.io/",  # before scheduler-plugins v0.25.7
)
MIN_PREEMPTABLE = "minimum-preemptable-priority"
TOLERATION_SECONDS = "toleration-seconds"
ALLOW_PREEMPTION = "yunikorn.apache.org/allow-preemption"
POLICY_ANNOTATION = "preemption-operator.io/preemption-policy"
DELAY_ANNOTATION = "preemption-operator.io/preemption-delay"
POLICIES = ("default", "fence", "disabled")
LAST_RESORT_SUFFIX = " (opted out of preemption; chosen as last resort)"

# Annotations reach the engine unvalidated (the API server only checks their size): every parser
# here returns a value or None for any string, and never raises.


def parse_duration(text: str) -> timedelta | None:
    """Go's time.ParseDuration for non-negative values ("30s", "1m30s", "0"); None if invalid or
    longer than a Go duration holds (about 292 years)."""
    try:
        return duration.parse_duration(text.strip())
    except duration.DurationError:
        return None


def _duration_problem(text: str) -> str | None:
    try:
        duration.parse_nanoseconds(text.strip())
    except duration.DurationError:
        if re.fullmatch(duration.DURATION_PATTERN, text.strip()):
            return f"{_show(text)} is longer than {duration.MAX_DURATION_TEXT}, the longest duration"
        return f"{_show(text)} is not a duration such as 30s or 1m30s"
    return None


def _int(text: str, bits: int) -> int | None:
    """Go's strconv.ParseInt(text, 10, bits): an optional sign and decimal digits, in range."""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        return None
    digits = text.lstrip("+-").lstrip("0")  # Go reads any number of leading zeros
    if len(digits) > 20:  # out of any int64 range; Python's int() refuses strings past 4300 digits
        return None
    value = int(digits or "0") * (-1 if text.startswith("-") else 1)
    return value if -(2 ** (bits - 1)) <= value < 2 ** (bits - 1) else None


def _show(text: str, limit: int = 60) -> str:
    """repr() of an annotation value, cut when long."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


@dataclass(frozen=True)
class Toleration:
    minimum_preemptable_priority: int
    toleration_seconds: int


def toleration_of(cls: PriorityClassInfo) -> tuple[Toleration | None, str | None]:
    """The class's policy (defaults: minimum = value + 1, seconds = 0), or an error: a value that does
    not parse disables the policy, as in the plugin. The newer key prefix wins over the older."""

    def read(name: str) -> str | None:
        for prefix in TOLERATION_PREFIXES:
            if prefix + name in cls.annotations:
                return cls.annotations[prefix + name]
        return None

    minimum, seconds = cls.value + 1, 0
    raw_min, raw_seconds = read(MIN_PREEMPTABLE), read(TOLERATION_SECONDS)
    if raw_min is not None:
        parsed = _int(raw_min, 32)
        if parsed is None:
            return None, f"{MIN_PREEMPTABLE} {_show(raw_min)} is not a 32-bit integer"
        minimum = parsed
    if raw_seconds is not None:
        parsed = _int(raw_seconds, 64)
        if parsed is None:
            if re.fullmatch(r"[+-]?[0-9]+", raw_seconds):
                return None, f"{TOLERATION_SECONDS} {_show(raw_seconds)} does not fit in a 64-bit integer"
            return None, f"{TOLERATION_SECONDS} {_show(raw_seconds)} is not an integer"
        seconds = parsed
    return Toleration(minimum, seconds), None


def toleration_ends(victim: WorkloadInfo, preemptor: WorkloadInfo, now: datetime) -> datetime | None:
    """When a time-limited toleration of `victim` against `preemptor` ends, if it is running now."""
    cls = victim.priority_class
    if cls is None or victim.reserved_at is None:
        return None
    policy, error = toleration_of(cls)
    if policy is None or error is not None or policy.toleration_seconds < 0:
        return None
    if preemptor.priority >= policy.minimum_preemptable_priority:
        return None
    try:
        until = victim.reserved_at + timedelta(seconds=policy.toleration_seconds)
    except OverflowError:
        return None
    return until if now < until else None


def tolerates(victim: WorkloadInfo, preemptor: WorkloadInfo, now: datetime) -> str | None:
    """Why `victim` is exempt from `preemptor` under PreemptionToleration, or None."""
    cls = victim.priority_class
    if cls is None:
        return None
    policy, error = toleration_of(cls)
    if policy is None or error is not None:
        return None
    if preemptor.priority >= policy.minimum_preemptable_priority:
        return None
    if policy.toleration_seconds < 0:
        return (
            f"{cls.kind} {cls.name} tolerates preemptors below priority {policy.minimum_preemptable_priority} "
            f"forever (preemptor has {preemptor.priority})"
        )
    admitted_at = victim.reserved_at
    if admitted_at is None:
        return f"{cls.kind} {cls.name} tolerates preemption until its quota is reserved"
    try:
        until = admitted_at + timedelta(seconds=policy.toleration_seconds)
    except OverflowError:
        # Fix (issue 7 tests): a valid int64 toleration-seconds past datetime's range (year 9999)
        # crashed the cycle; such a window has not ended yet.
        return (
            f"{cls.kind} {cls.name} tolerates preemptors below priority {policy.minimum_preemptable_priority} "
            f"for {policy.toleration_seconds}s (preemptor has {preemptor.priority})"
        )
    if now < until:
        return (
            f"{cls.kind} {cls.name} tolerates preemptors below priority {policy.minimum_preemptable_priority} "
            f"until {format_time(until)} (preemptor has {preemptor.priority})"
        )
    return None


def opted_out(wl: WorkloadInfo) -> bool:
    """The workload's own annotation decides when it is "true" or "false"; else its priority
    class's. Only the literal "false" opts out."""
    # Fix (issue 7 tests): any other value on the Workload (say "no") used to hide the class's
    # "false"; YuniKorn (reference A.6) reads the class then, and so does this now.
    if wl.annotations.get(ALLOW_PREEMPTION) in ("true", "false"):
        return wl.annotations[ALLOW_PREEMPTION] == "false"
    cls = wl.priority_class
    return cls is not None and cls.annotations.get(ALLOW_PREEMPTION) == "false"


def policy_of(node: QuotaNode) -> str | None:
    """The node's own preemption-policy annotation, lower-cased; None when unset or unknown."""
    raw = node.annotations.get(POLICY_ANNOTATION)
    if raw is None:
        return None
    value = raw.strip().lower() or "default"
    return value if value in POLICIES else None


def victims_disabled(node: QuotaNode) -> QuotaNode | None:
    """The node (the ClusterQueue itself or an ancestor) whose `disabled` policy keeps this
    ClusterQueue's workloads from being victims, if any. Only `disabled` is inherited; a policy set
    lower down overrides it, whatever its value."""
    current: QuotaNode | None = node
    while current is not None:
        # Fix (issue 7 tests): `fence`, or an unknown value (treated as `default`), set lower down
        # used to let an ancestor's `disabled` through; in YuniKorn (reference A.4.2) a queue that
        # sets the property itself inherits nothing.
        if POLICY_ANNOTATION in current.annotations:
            return current if policy_of(current) == "disabled" else None
        current = current.parent
    return None


def fence_root(node: QuotaNode) -> QuotaNode | None:
    """The nearest fenced node at or above a preemptor's ClusterQueue: its victims must lie below."""
    current: QuotaNode | None = node
    while current is not None:
        if policy_of(current) == "fence":
            return current
        current = current.parent
    return None


def inside(node: QuotaNode, root: QuotaNode) -> bool:
    current: QuotaNode | None = node
    while current is not None:
        if current.name == root.name and current.is_cluster_queue == root.is_cluster_queue:
            return True
        current = current.parent
    return False


def preemption_delay(node: QuotaNode) -> tuple[timedelta, QuotaNode | None]:
    """The delay set on the ClusterQueue, else on its nearest Cohort ancestor (0 when none)."""
    current: QuotaNode | None = node
    while current is not None:
        raw = current.annotations.get(DELAY_ANNOTATION)
        if raw is not None:
            delay = parse_duration(raw)
            if delay is not None:
                return delay, current
            return timedelta(0), current
        current = current.parent
    return timedelta(0), None


def annotation_problems(node: QuotaNode) -> list[str]:
    """Unknown values, reported (as Warning Events) and treated as the default."""
    problems = []
    raw = node.annotations.get(POLICY_ANNOTATION)
    if raw is not None and (raw.strip().lower() or "default") not in POLICIES:
        problems.append(
            f"{POLICY_ANNOTATION}: unknown value {_show(raw)} (use default, fence or disabled); treated as default"
        )
    raw = node.annotations.get(DELAY_ANNOTATION)
    found = _duration_problem(raw) if raw is not None else None
    if found is not None:
        problems.append(f"{DELAY_ANNOTATION}: {found}; treated as 0")
    return problems


def class_problems(cls: PriorityClassInfo) -> list[str]:
    _, error = toleration_of(cls)
    return [f"PreemptionToleration policy ignored: {error}"] if error else []


def protected(
    victim: WorkloadInfo,
    preemptor: WorkloadInfo,
    victim_node: QuotaNode,
    preemptor_node: QuotaNode,
    now: datetime,
) -> str | None:
    """Why `victim` may not be taken by `preemptor` at all (hard rules), or None."""
    disabled = victims_disabled(victim_node)
    if disabled is not None:
        kind = "ClusterQueue" if disabled.is_cluster_queue else "Cohort"
        return f"{kind} {disabled.name} has preemption-policy disabled"
    fence = fence_root(preemptor_node)
    if fence is not None and not inside(victim_node, fence):
        kind = "ClusterQueue" if fence.is_cluster_queue else "Cohort"
        return f"outside the preemption fence of {kind} {fence.name}"
    return tolerates(victim, preemptor, now)


def closed_preemption_gates(wl: WorkloadInfo) -> list[str]:
    """The workload's closed preemption gates. As in Kueue, a gate listed in the spec is closed
    until status.preemptionGates says Open, so a workload can be created gated."""
    status = wl.obj.status.preemption_gates if wl.obj.status is not None else None
    positions = {gate.name: gate.position for gate in status or []}
    return [gate.name for gate in wl.obj.spec.preemption_gates or [] if positions.get(gate.name) != "Open"]


def may_not_preempt(wl: WorkloadInfo) -> str | None:
    """Why the workload may never preempt, or None. A PriorityClass with preemptionPolicy: Never
    forbids its pods to preempt (kube-scheduler, YuniKorn's allowPreemptOther, the toleration
    plugin); the engine holds its workloads to it. A WorkloadPriorityClass has no such field."""
    cls = wl.priority_class
    if cls is not None and cls.kind == "PriorityClass" and cls.preemption_policy == "Never":
        return f"PriorityClass {cls.name} has preemptionPolicy: Never"
    return None


def pending_since(wl: WorkloadInfo) -> datetime:
    """When the workload last became pending: its last eviction, else its creation."""
    evicted = wl.condition("Evicted")
    if evicted is not None and evicted.status == "True":
        return evicted.last_transition_time
    return wl.created
