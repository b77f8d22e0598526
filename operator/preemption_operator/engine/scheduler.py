"""A scheduling cycle: queue heads are nominated, sorted and processed one by one against the
snapshot, producing admissions, preemptions and pending reasons as data.

The shape follows Kueue's scheduler: one head per ClusterQueue, entries that do not borrow first
(with fair sharing: the tournament of shares over the cohort tree), overlapping preemptions
skipped. One deliberate difference by default: a workload that is already waiting for its victims
to go is processed first, so the quota they free is not taken by others (Kueue's
PrioritizePreemptorWorkloads, an alpha gate off by default in v0.19.2; the snapshot's
`prioritize_preemptors` turns it off). Consecutive cycles are checked against Kueue's own
scheduler, with that gate on and off (tests/unit/test_same_decisions_as_kueue.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from itertools import filterfalse

from ..api.meta import format_time
from ..api.quantity import format_amount
from . import admission_checks, execution_time, pods_ready, protection
from .candidates import CandidateRecord, ExtraCandidates, Target, limit_pair
from .flavors import Assignment, Granular, Mode, Possibility, assign_flavors
from .notices import Notice
from .ordering import Contender, entry_order, queue_order, tournament
from .placement import NodeUsage
from .preemption import Search, find_targets
from .quota import FlavorResource, borrowing_level
from .snapshot import ClusterQueueInfo, Snapshot
from .workload import WorkloadInfo

WAITING_FOR_QUOTA = "WaitingForQuota"
NO_LONGER_FITS = "Workload no longer fits after processing another workload"
OVERLAPPING_TARGETS = "Workload has overlapping preemption targets with another workload"
WAITING_FOR_PREEMPTED = "WaitingForPreemptedWorkloads"
NO_MATCHING_FLAVOR = "NoMatchingFlavor"
EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
SUSPENDED = "Suspended"
PENDING_EVALUATION = "PendingEvaluation"
MISCONFIGURED = "Misconfigured"
ADMISSION_GATED = "AdmissionGated"
GATED_MESSAGE = "Workload requires preemption, but it's gated"
BYPASSED_MESSAGE = "Bypassed scheduling evaluation because an equivalent workload recently failed"
STALE_REASONS = frozenset({"", "PendingEvaluation", "Pending", "Deactivated", "Suspended"})
"""Pending reasons Kueue replaces when an equivalent workload failed (shouldCheckEquivalenceHash)."""
TOPOLOGY_PLACEMENT_FAILED = "TopologyPlacementFailed"
NODES = "nodes"  # marks "an entry of this round placed pods on TAS nodes" (tree names have a slash)


@dataclass(frozen=True)
class Admission:
    workload: WorkloadInfo
    cluster_queue: str
    pod_sets: tuple[dict[str, object], ...]
    """status.admission.podSetAssignments, in wire form."""
    checks: frozenset[str] = frozenset()
    """The AdmissionChecks it must pass before it is Admitted (quota reserved until then)."""


@dataclass(frozen=True)
class ChecksUpdate:
    """A workload holding quota whose AdmissionChecks moved on without evicting it: its list of
    checks made the one its queue requires (`required`), or, all Ready, it is Admitted (None)."""

    workload: WorkloadInfo
    required: frozenset[str] | None

    @property
    def holding(self) -> bool:
        """Decided for a workload holding quota (else for a pending one)."""
        return self.workload.cluster_queue is not None


@dataclass(frozen=True)
class Preemption:
    victim: WorkloadInfo
    preemptor: WorkloadInfo
    target: Target
    preemptor_cluster_queue: str
    preemptor_path: str
    victim_path: str

    @property
    def ongoing(self) -> bool:
        """The victim is already being evicted: Kueue counts it as a target (its quota is on the
        way) but issues no new preemption."""
        return self.victim.evicted


@dataclass(frozen=True)
class Eviction:
    """An eviction that is not a preemption: the workload was deactivated, its queue drained, or
    its pods were not ready in time (waitForPodsReady)."""

    workload: WorkloadInfo
    reason: str
    message: str
    underlying_cause: str = ""
    """Kueue's underlyingCause: WaitForStart or WaitForRecovery for a PodsReady timeout, the
    deactivation's reason for a workload deactivated by Kueue."""
    requeue: tuple[int | None, datetime] | None = None
    """Its requeueState (count, requeueAt) from now on: after a PodsReady timeout, or a Retry
    check that asked for a delay (the count left as it is: None)."""


@dataclass(frozen=True)
class Deactivation:
    """A workload Kueue deactivates (its requeuing limit reached, an AdmissionCheck rejected it,
    its maximum execution time used up): marked DeactivationTarget,
    then made inactive; its eviction follows as a deactivated workload's."""

    workload: WorkloadInfo
    reason: str
    message: str


@dataclass(frozen=True)
class Pending:
    workload: WorkloadInfo
    cluster_queue: str
    reason: str
    message: str
    blocked_on_gates: bool = False
    """It needs preemption but a preemption gate is closed: Kueue's BlockedOnPreemptionGates."""
    blocked_by_limit: str | None = None
    """The PreemptionLimit without room: victims would have been found without the limits."""
    would_evict: tuple[str, ...] = ()
    """The victims the search would have taken without the limits (namespace/name)."""
    retry_at: datetime | None = None
    """The earliest time a blocking limit's window has room again (None: not by time alone)."""


@dataclass
class Explanation:
    """Why a preemptor got the victims it got (or none)."""

    preemptor: str
    cluster_queue: str
    message: str
    candidates: list[CandidateRecord]
    notes: list[str] = field(default_factory=list)


@dataclass
class CycleResult:
    admitted: list[Admission] = field(default_factory=list)
    preempted: list[Preemption] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    evicted: list[Eviction] = field(default_factory=list)
    deactivated: list[Deactivation] = field(default_factory=list)
    requeued: list[WorkloadInfo] = field(default_factory=list)
    """Pending workloads whose requeuing backoff is over (Kueue's BackoffFinished)."""
    checked: list[ChecksUpdate] = field(default_factory=list)
    explanations: list[Explanation] = field(default_factory=list)
    retry_at: datetime | None = None
    """The earliest time a decision may change with nothing else changing (a preemption delay ends)."""
    notices: list[Notice] = field(default_factory=list)
    """Problems with objects the cycle read (a PreemptionConfig missing or not building), for
    their owners: the operator posts them as Warning Events."""
    warnings: list[str] = field(default_factory=list)
    """The same problems as lines, for `simulate`'s output."""

    @property
    def changed(self) -> bool:
        return bool(
            self.admitted or self.preempted or self.evicted or self.deactivated or self.requeued or self.checked
        )


def _keep_last_pending(result: CycleResult) -> None:
    """A workload nominated in several rounds of a pass keeps the last pending reason it got, and
    none once admitted."""
    admitted = {a.workload.key for a in result.admitted}
    last: dict[str, Pending] = {}
    for pending in result.pending:
        last.pop(pending.workload.key, None)
        last[pending.workload.key] = pending
    result.pending = [p for key, p in last.items() if key not in admitted]


@dataclass
class QueueState:
    """What the scheduler remembers between cycles, as Kueue's queue manager does."""

    inadmissible: dict[str, set[str]] = field(default_factory=dict)
    """Per ClusterQueue, workloads parked (BestEffortFIFO) until quota is freed in their cohort tree."""
    waiting: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Preemptors waiting for their victims, with the victims' keys."""
    gated: set[str] = field(default_factory=set)
    """Parked workloads that were kept from preempting by a closed gate: opening it unparks them."""
    throttled: dict[str, tuple[str, datetime]] = field(default_factory=dict)
    """Parked preemptors a PreemptionLimit blocked: (ClusterQueue, when a window has room again);
    unparked once that time has come."""
    parked_shapes: dict[str, dict[tuple[object, ...], str]] = field(default_factory=dict)
    """Per BestEffortFIFO ClusterQueue, the scheduling shapes parked in bulk with the pending
    reason of the head that failed (Kueue's hashToBulkMoveReason): a workload of such a shape
    coming later is parked on sight, unevaluated, until the queue's parked workloads are requeued."""

    def unthrottle(self, now: datetime) -> None:
        for key, (cq, at) in list(self.throttled.items()):
            if at <= now:
                self.inadmissible.get(cq, set()).discard(key)
                del self.throttled[key]

    def park(self, cq: str, key: str) -> None:
        self.inadmissible.setdefault(cq, set()).add(key)

    def requeue_all(self) -> None:
        """Every parked workload gets another look (the setup changed)."""
        self.inadmissible.clear()
        self.parked_shapes.clear()

    def quota_released(self, snapshot: Snapshot, cluster_queues: Iterable[str]) -> None:
        """Requeues parked workloads of every ClusterQueue that shares a cohort tree with these,
        and forgets the shapes parked there (Kueue clears its bulk-move hashes as it requeues)."""
        roots = {snapshot.trees.root_name(name) for name in cluster_queues} - {None}
        for name in {*self.inadmissible, *self.parked_shapes}:
            if snapshot.trees.root_name(name) in roots:
                self.inadmissible.pop(name, None)
                self.parked_shapes.pop(name, None)


def _shows_stale(wl: WorkloadInfo) -> bool:
    """Its QuotaReserved condition says something no longer true (pending evaluation after an
    eviction, say): a bypassed workload gets a status only then."""
    condition = wl.condition("QuotaReserved")
    return condition is not None and condition.reason in STALE_REASONS


@dataclass
class _Entry:
    wl: WorkloadInfo
    cq: ClusterQueueInfo
    assignment: Assignment
    targets: list[Target]
    records: list[CandidateRecord]
    delayed_until: datetime | None = None
    delay_note: str = ""
    wake_at: datetime | None = None
    may_not_preempt: str | None = None
    """Why it may never preempt (its PriorityClass says preemptionPolicy: Never)."""
    closed_gates: tuple[str, ...] = ()
    """Closed preemption gates, when victims were found: they are not preempted."""
    throttle: _Throttle | None = None
    """No victims within the PreemptionLimits, though there would be without them."""
    limits_version: int = 0
    """The limits' version it was nominated at (see `LimitBook.version`)."""


@dataclass(frozen=True)
class _Throttle:
    limit: str
    would_evict: tuple[str, ...]
    retry_at: datetime | None


def _throttle(search: Search, free: Search) -> _Throttle:
    """The limit that blocked (the first one that kept out a victim the free search took) and the
    earliest time one of the limits keeping those victims out has room."""
    victims = {t.workload.key for t in free.targets}
    relevant = [blocked for key, blocked in search.limited if key in victims] or [b for _, b in search.limited]
    times = [b.retry_at for b in relevant if b.retry_at is not None]
    keys = tuple(sorted(victims))
    return _Throttle(relevant[0].limit, keys, min(times) if times else None)


@dataclass
class _Round:
    """One round of a pass: one of Kueue's cycles, and what it has done so far."""

    touched: set[str] = field(default_factory=set)
    """Cohort trees (their root's name; NODES for topology nodes) where an entry acted."""
    victims: dict[str, WorkloadInfo] = field(default_factory=dict)
    """Victims of this round's preemptions (Kueue's preemptedWorkloads of the cycle)."""
    progressed: set[str] = field(default_factory=set)
    """ClusterQueues whose head was admitted or parked: their next head goes next round."""
    blocked: bool = False
    """waitForPodsReady's blockAdmission stopped the cycle (Kueue's scheduler waits there)."""


def _to_reserve(assignment: Assignment, cq: ClusterQueueInfo) -> dict[FlavorResource, int]:
    """What a preemptor that found no victims holds back (Kueue's quotaResourcesToReserve): up to
    its borrowing limit when it would borrow, else up to its nominal quota, never more than it
    asks for."""
    node = cq.node
    reserved: dict[FlavorResource, int] = {}
    for fr, amount in assignment.usage.items():
        quota = node.quotas.get(fr)
        nominal = quota.nominal if quota is not None else 0
        used = node.usage.get(fr, 0)
        if assignment.borrowing > 0:
            limit = quota.borrowing_limit if quota is not None else None
            reserved[fr] = amount if limit is None else max(0, min(amount, nominal + limit - used))
        else:
            reserved[fr] = max(0, min(amount, nominal - used))
    return reserved


def _acting(entry: _Entry) -> bool:
    """Whether processing the entry changes the snapshot: it is admitted, or preempts."""
    return entry.assignment.mode is Mode.FIT or bool(
        entry.targets and entry.delayed_until is None and not entry.closed_gates
    )


def _still_fits(entry: _Entry, snapshot: Snapshot, round_: _Round) -> bool:
    """Kueue's fits check of an entry when an earlier one of its cohort tree acted: its nominated
    usage against the quota left, with the victims of the round and its own removed (an entry
    that fit when nominated may take what victims free beyond their preemptors' need). One whose
    victims overlap an earlier one's passes, to be skipped as overlapping; victims whose evictions
    are under way are removed like any other target (a preemptor waiting for them no longer fits
    when an earlier entry took the room, as in Kueue)."""
    usage = entry.assignment.usage
    own = {t.workload.key: t.workload for t in entry.targets}
    if own.keys() & round_.victims.keys():
        return True
    removed = [wl for wl in {**round_.victims, **own}.values() if not snapshot.is_removed(wl)]
    for wl in removed:
        snapshot.remove_workload(wl)
    try:
        return all(v <= entry.cq.node.available(fr) for fr, v in usage.items())
    finally:
        for wl in removed:
            snapshot.add_workload(wl)


def _within_limits(entry: _Entry, snapshot: Snapshot) -> bool:
    """Whether the entry's preemptions still fit the PreemptionLimits, counting the ones decided
    since it was nominated."""
    book = snapshot.limits
    if book is None or not book.rules or book.version == entry.limits_version:
        return True  # nothing was preempted since it was nominated
    pairs = [
        limit_pair(entry.wl.key, entry.cq.name, t.workload, t.rule)
        for t in entry.targets
        if not snapshot.leaving(t.workload)
    ]
    return all(book.blocking(pair, pairs[:i]) is None for i, pair in enumerate(pairs))


def _same_decision(a: _Entry, b: _Entry) -> bool:
    return (
        a.assignment.mode == b.assignment.mode
        and a.assignment.usage == b.assignment.usage
        and {t.workload.key for t in a.targets} == {t.workload.key for t in b.targets}
    )


def _pod_set_assignments(assignment: Assignment) -> tuple[dict[str, object], ...]:
    out = []
    for ps in assignment.pod_sets:
        entry: dict[str, object] = {
            "name": ps.name,
            "flavors": dict(sorted(ps.flavors.items())),
            "resourceUsage": {res: format_amount(res, amount) for res, amount in sorted(ps.usage.items())},
            "count": ps.count,
        }
        if ps.placement is not None:
            entry["topologyAssignment"] = ps.placement.wire()
        out.append(entry)
    return tuple(out)


def _admissible(entry: _Entry) -> bool:
    """Fits, or has victims to make room (or waits out a preemption delay before choosing them)."""
    mode = entry.assignment.mode
    return mode == Mode.FIT or (mode == Mode.PREEMPT and (bool(entry.targets) or entry.delayed_until is not None))


def _reduce(wl: WorkloadInfo, attempt: Callable[[list[int] | None], _Entry]) -> _Entry | None:
    """Partial admission, as Kueue's PodSetReducer: every pod set with a minCount gives up pods
    in proportion to how many it may give up, and a binary search over the total finds the
    largest counts that are admissible (fit, or fit once victims are gone)."""
    full = [ps.count for ps in wl.pod_sets]
    slack = [max(0, ps.count - ps.min_count) if ps.min_count is not None else 0 for ps in wl.pod_sets]
    total = sum(slack)
    if total == 0:
        return None
    found: _Entry | None = None
    low, high = 0, total + 1  # step 0 is the full counts; total + 1 means none is admissible
    while low < high:
        step = (low + high) // 2
        entry = attempt([count - spare * step // total for count, spare in zip(full, slack, strict=True)])
        if _admissible(entry):
            found, high = entry, step
        else:
            low = step + 1
    return found


def _without(snapshot: Snapshot, targets: list[Target], measure: Callable[[], int]) -> int:
    """`measure` with the targets' usage taken out of the snapshot (put back afterwards)."""
    for target in targets:
        snapshot.remove_workload(target.workload)
    try:
        return measure()
    finally:
        for target in targets:
            snapshot.add_workload(target.workload)


def _settle_borrowing(assignment: Assignment, cq: ClusterQueueInfo, snapshot: Snapshot, targets: list[Target]) -> None:
    """The borrowing level of flavor-resources no oracle looked at, with the victims gone (Kueue's
    oracle reports it per flavor-resource; with one flavor there is no oracle here, so it is
    measured against the victims of the whole search; without victims, as things are)."""
    node = cq.node
    levels = [assignment.borrowing]
    slow = []
    for fr in sorted(assignment.unsettled):
        value = assignment.usage.get(fr, 0)
        freed = sum(t.workload.usage.get(fr, 0) for t in targets if t.workload.cluster_queue == cq.name)
        if node.usage.get(fr, 0) - freed + value > node.subtree_quota.get(fr, 0):
            slow.append((fr, value))
        # else: within the ClusterQueue's own quota once its own victims are gone, level 0
    if slow:
        levels.append(_without(snapshot, targets, lambda: max(borrowing_level(node, fr, v)[0] for fr, v in slow)))
    assignment.borrowing = max(levels)


BLOCKERS_SHOWN = 3
LIMIT_BLOCKED_PREFIX = "Preemption was blocked by PreemptionLimit"


def _blockers(records: list[CandidateRecord]) -> str:
    """What held the victims back (a toleration and until when, a fence, a disabled queue, a rule
    not active yet), for the pending message: on a cluster nobody sees `explain`."""
    seen: list[str] = []
    for record in records:
        if record.blocking:
            line = record.detail if record.outcome == "rule-skipped" else f"{record.workload}: {record.detail}"
            if line not in seen:
                seen.append(line)
    if not seen:
        return ""
    more = len(seen) - BLOCKERS_SHOWN
    shown = "; ".join(seen[:BLOCKERS_SHOWN]) + (f"; and {more} more" if more > 0 else "")
    return f". Not preempted: {shown}"


def _pending_reason(assignment: Assignment) -> str:
    if assignment.no_matching_flavor:
        return NO_MATCHING_FLAVOR
    if assignment.topology_failed:
        return TOPOLOGY_PLACEMENT_FAILED
    if any(") > maximum capacity (" in reason for ps in assignment.pod_sets for reason in ps.reasons):
        return EXCEEDS_MAX_QUOTA
    return WAITING_FOR_QUOTA


class Scheduler:
    """Runs cycles over snapshots. `extra` adds candidate streams (configurable preemption)."""

    def __init__(self, extra: ExtraCandidates | None = None, rounds: int = 1, *, complete: bool = False) -> None:
        self.extra = extra
        self.rounds = rounds
        self.complete = complete
        """Explanations name every eligible candidate, also those a search never needed (`simulate`)."""

    def _nominate(self, wl: WorkloadInfo, cq: ClusterQueueInfo, snapshot: Snapshot) -> _Entry:
        """Kueue's getInitialAssignments: the full counts if they fit or victims make room, else
        the largest partial admission (minCount) that does, else the full counts, pending."""

        never = protection.may_not_preempt(wl)

        def oracle(fr: FlavorResource, value: int) -> Granular:
            if never is not None:  # nobody may be preempted for it
                return Granular(Possibility.NO_CANDIDATES, borrowing_level(cq.node, fr, value)[0])
            trial = Assignment([], {fr: value}, 0, {fr})
            targets = find_targets(wl, cq, trial, snapshot, self.extra).targets
            if not targets:
                return Granular(Possibility.NO_CANDIDATES, borrowing_level(cq.node, fr, value)[0])
            own = any(t.workload.cluster_queue == cq.name for t in targets)
            after = _without(snapshot, targets, lambda: borrowing_level(cq.node, fr, value)[0])
            return Granular(Possibility.PREEMPT if own else Possibility.RECLAIM, after)

        def attempt(counts: list[int] | None) -> _Entry:
            assignment = assign_flavors(
                wl,
                cq,
                snapshot.flavors,
                snapshot.tas,
                snapshot.node_usage,
                oracle,
                counts,
                fair_sharing=snapshot.fair_sharing.enabled,
            )
            return self._evaluate(wl, cq, assignment, snapshot)

        full = attempt(None)
        if _admissible(full):
            return full
        return _reduce(wl, attempt) or full

    def _evaluate(self, wl: WorkloadInfo, cq: ClusterQueueInfo, assignment: Assignment, snapshot: Snapshot) -> _Entry:
        """An assignment with its victims (or its preemption delay)."""
        if assignment.mode == Mode.PREEMPT:
            never = protection.may_not_preempt(wl)
            if never is not None:
                return _Entry(wl, cq, assignment, [], [], may_not_preempt=never)
            delay, source = protection.preemption_delay(cq.node)
            if delay and snapshot.now < protection.pending_since(wl) + delay:
                delayed_until = protection.pending_since(wl) + delay
                kind = "ClusterQueue" if source is None or source.is_cluster_queue else "Cohort"
                name = source.name if source is not None else cq.name
                delay_note = (
                    f"preemption delayed until {format_time(delayed_until)} "
                    f"({protection.DELAY_ANNOTATION} of {kind} {name})"
                )
                return _Entry(wl, cq, assignment, [], [], delayed_until, delay_note)
            search = find_targets(wl, cq, assignment, snapshot, self.extra, complete=self.complete)
            if assignment.unsettled:
                _settle_borrowing(assignment, cq, snapshot, search.targets)
            throttle = None
            if not search.targets and search.limited:
                # Blocked by a limit only if the search would have succeeded without the limits.
                free = find_targets(wl, cq, assignment, snapshot, self.extra, enforce_limits=False)
                if free.targets:
                    throttle = _throttle(search, free)
            # As Kueue: gates matter only once there is someone to preempt.
            gates = tuple(protection.closed_preemption_gates(wl)) if search.targets else ()
            return _Entry(
                wl,
                cq,
                assignment,
                search.targets,
                search.records,
                wake_at=search.wake_at,
                closed_gates=gates,
                throttle=throttle,
                limits_version=snapshot.limits.version if snapshot.limits is not None else 0,
            )
        return _Entry(wl, cq, assignment, [], [])

    def heads(
        self,
        snapshot: Snapshot,
        state: QueueState,
        result: CycleResult,
        queues: set[str] | None = None,
    ) -> list[tuple[WorkloadInfo, ClusterQueueInfo]]:
        """One head per ClusterQueue (of `queues`, or all), skipping workloads admitted in this
        pass; a preemptor waiting for its victims heads its queue."""
        heads = []
        admitted_now = snapshot.admitted_in_cycle
        workloads = snapshot.workloads
        # Read from the cache's own ClusterQueues: a queue's tree is cloned only once it has a
        # head, so a pass costs what the queues with work to look at cost, not every queue
        # with parked workloads.
        held = snapshot.held_cluster_queues
        for name in sorted(snapshot.pending if queues is None else queues & snapshot.pending.keys()):
            cq = held[name]
            if not cq.active:
                if queues is None:
                    for wl in snapshot.pending[name]:
                        if not admitted_now(wl):
                            result.pending.append(Pending(wl, name, SUSPENDED, f"ClusterQueue {name} is inactive"))
                continue
            # A workload waiting for its victims heads its queue, so the quota (or nodes) they
            # free goes to it and not to an older workload of equal priority, such as a victim.
            # (Membership first: the queue may hold thousands, nearly all parked.)
            keys = snapshot.pending_keys(name)
            waiting = (
                next(
                    (
                        w
                        for w in map(workloads.__getitem__, filter(state.waiting.__contains__, keys))
                        if not admitted_now(w)
                    ),
                    None,
                )
                if state.waiting
                else None
            )
            if waiting is not None:
                heads.append((waiting, snapshot.cluster_queues[name]))
                continue
            best_effort = cq.queueing_strategy == "BestEffortFIFO"
            parked = state.inadmissible.get(name, set()) if best_effort else set()
            shapes = state.parked_shapes.get(name) if best_effort else None
            if parked and not parked.isdisjoint(state.gated):
                walk: Iterable[str] = keys  # a gated one may have opened: each is looked at
            else:
                walk = filterfalse(parked.__contains__, keys)  # parked ones skipped without a step each
            for key in walk:
                wl = workloads[key]
                if key in parked:
                    if key not in state.gated or protection.closed_preemption_gates(wl) or admitted_now(wl):
                        continue
                    parked.discard(key)  # its gates opened: it may preempt now (Kueue requeues it)
                    state.gated.discard(key)
                elif admitted_now(wl):
                    continue
                reason = shapes.get(wl.shape) if shapes else None
                if reason is not None:
                    # Kueue skips a workload of a bulk-moved class straight to inadmissible.
                    self._bypass(wl, name, reason, state, result)
                    continue
                if cq.admission_checks and admission_checks.failed(wl.obj):
                    # Until its check's controller sets it Pending again (Kueue's nominate).
                    result.pending.append(Pending(wl, name, PENDING_EVALUATION, admission_checks.FAILED_MESSAGE))
                    continue
                heads.append((wl, snapshot.cluster_queues[name]))
                break
        return heads

    def cycle(self, snapshot: Snapshot, state: QueueState, budget: int | None = None) -> CycleResult:
        """Kueue's scheduling cycle. With `rounds` > 1, the pass goes on with further rounds
        against the same snapshot, each deciding exactly what the next of Kueue's cycles would
        decide with nothing else changing in between (decisions assumed, no write answered): the
        operator uses this to write in larger batches. A round nominates the heads whose decision
        may have changed: those of queues that admitted or parked their head, and every head of
        a cohort tree (or, for topology, of the nodes) the round before acted in; any other head
        would decide as it did. With a `budget`, no further round starts once this many
        admissions and preemptions are decided (the first round always runs): decisions stay
        close to what the API has written."""
        result = CycleResult()
        state.unthrottle(snapshot.now)
        for key in list(state.waiting):  # preemptors admitted, finished or deleted meanwhile
            info = snapshot.workloads.get(key)
            if info is None or info.reserves_quota or info.finished:
                del state.waiting[key]
        if state.gated:
            state.gated &= set().union(*state.inadmissible.values())
        for wl, reason, message in snapshot.unqueued:
            result.pending.append(Pending(wl, "", reason, message))
        for wl, reason, message in snapshot.drains:
            # Their quota is free for this cycle's decisions already.
            snapshot.remove_workload(wl)
            target = wl.condition(pods_ready.DEACTIVATION_TARGET) if reason == "Deactivated" else None
            if target is not None and target.status == "True":
                # Deactivated by Kueue (its requeuing limit): the eviction says why.
                result.evicted.append(Eviction(wl, reason, f"{message} due to {target.message}", target.reason))
            else:
                result.evicted.append(Eviction(wl, reason, message))
        self._pods_ready(snapshot, result)
        self._execution_time(snapshot, result)
        self._admission_checks(snapshot, result)
        order = self._tournament if snapshot.fair_sharing.enabled else self._sorted
        queues: set[str] | None = None
        for number in range(self.rounds):
            if number:
                if budget is not None and len(result.admitted) + len(result.preempted) >= budget:
                    break
                queues = (queues or set()) | self._queues_in(snapshot, self._release_held(snapshot))
                if not queues:
                    break
            round_ = _Round()
            heads = self.heads(snapshot, state, result, queues)
            entries = [self._nominate(wl, cq, snapshot) for wl, cq in heads]
            for entry in order(entries, snapshot, state):
                self._recheck_and_process(entry, snapshot, state, result, round_)
                if round_.blocked:
                    break
            if number + 1 == self.rounds or round_.blocked:
                break
            snapshot.next_round(round_.victims)
            queues = round_.progressed | self._queues_in(snapshot, round_.touched)
        if self.rounds > 1:
            _keep_last_pending(result)
        return result

    @staticmethod
    def _pods_ready(snapshot: Snapshot, result: CycleResult) -> None:
        """waitForPodsReady's decisions, as Kueue's workload controller makes them: a workload
        whose pods were not ready in time is evicted and requeued after a backoff (deactivated
        once it was requeued backoffLimitCount times); one whose backoff is over is queued again."""
        settings = snapshot.pods_ready
        for wl, cause in snapshot.timed_out if settings is not None else ():
            assert settings is not None
            count = pods_ready.requeue_count(wl.obj) + 1
            if settings.backoff_limit_count is not None and count > settings.backoff_limit_count:
                result.deactivated.append(
                    Deactivation(wl, pods_ready.REQUEUING_LIMIT_EXCEEDED, pods_ready.REQUEUING_LIMIT_MESSAGE)
                )
                continue  # it keeps its quota until it is evicted as deactivated
            snapshot.remove_workload(wl)
            requeue_at = snapshot.now + pods_ready.backoff(count, settings)
            message = pods_ready.timeout_message(wl.key)
            result.evicted.append(Eviction(wl, pods_ready.TIMEOUT_REASON, message, cause, (count, requeue_at)))
        for wl in snapshot.marked:
            target = wl.condition(pods_ready.DEACTIVATION_TARGET)
            assert target is not None
            result.deactivated.append(Deactivation(wl, target.reason, target.message))
        result.requeued.extend(snapshot.backoffs)
        if snapshot.wake_at is not None and (result.retry_at is None or snapshot.wake_at < result.retry_at):
            result.retry_at = snapshot.wake_at

    @staticmethod
    def _execution_time(snapshot: Snapshot, result: CycleResult) -> None:
        """Workloads that have run for their maximum execution time are deactivated, as Kueue's
        workload controller does (one whose pods just timed out is left to that decision)."""
        timed_out = {wl.key for wl, _ in snapshot.timed_out}
        for wl in snapshot.expired:
            if wl.key not in timed_out:
                result.deactivated.append(Deactivation(wl, execution_time.REASON, execution_time.MESSAGE))

    @staticmethod
    def _admission_checks(snapshot: Snapshot, result: CycleResult) -> None:
        """What the AdmissionChecks of workloads holding quota call for, as Kueue's workload
        controller decides it: a Rejected check deactivates (DeactivationTarget first), a Retry
        check evicts and releases the quota at once (requeued when the check allows), and all
        Ready admits."""
        for wl, found in snapshot.checks:
            if found.kind == admission_checks.REJECT:
                result.deactivated.append(Deactivation(wl, admission_checks.REASON, found.message))
            elif found.kind == admission_checks.RETRY_EVICTION:
                snapshot.remove_workload(wl)
                requeue = (None, found.requeue_at) if found.requeue_at is not None else None
                result.evicted.append(Eviction(wl, admission_checks.REASON, found.message, requeue=requeue))
            else:
                required = found.required if found.kind == admission_checks.SYNC else None
                result.checked.append(ChecksUpdate(wl, required))

    @staticmethod
    def _blocked(snapshot: Snapshot) -> bool:
        """waitForPodsReady's blockAdmission: a workload holds quota without its pods ready (one
        admitted in this pass too), so nothing more is admitted."""
        settings = snapshot.pods_ready
        if settings is None or not settings.block_admission:
            return False
        return snapshot.admitted_this_pass or not snapshot.unready <= snapshot.removed

    def _recheck_and_process(
        self, entry: _Entry, snapshot: Snapshot, state: QueueState, result: CycleResult, round_: _Round
    ) -> None:
        """Kueue's check before an entry acts: quota is shared within a cohort tree, so a head an
        earlier entry of its tree acted before must still fit as nominated (Kueue's `fits`), or it
        is skipped for the round and nominated afresh in the next, not moved to another flavor or
        given other victims. Topology nodes are shared across trees: a head placing pods is
        nominated again once an earlier entry placed pods (Kueue's TAS recompute), and skipped if
        that changes its decision."""
        tree = snapshot.trees.root_name(entry.cq.name) or ""
        if entry.targets and not _within_limits(entry, snapshot):
            # Earlier entries' preemptions filled a window it counted on: it searches again.
            entry = self._nominate(entry.wl, entry.cq, snapshot)
        acting = _acting(entry)
        if NODES in round_.touched and any(ps.view is not None for ps in entry.assignment.pod_sets):
            again = self._nominate(entry.wl, entry.cq, snapshot)
            if acting and not _same_decision(again, entry):
                result.pending.append(Pending(entry.wl, entry.cq.name, WAITING_FOR_QUOTA, NO_LONGER_FITS))
                return
            entry = again
        elif acting and tree in round_.touched and not _still_fits(entry, snapshot, round_):
            result.pending.append(Pending(entry.wl, entry.cq.name, WAITING_FOR_QUOTA, NO_LONGER_FITS))
            return
        if self._process(entry, snapshot, state, result, round_, tree):
            round_.progressed.add(entry.cq.name)

    @staticmethod
    def _queues_in(snapshot: Snapshot, trees: set[str]) -> set[str]:
        """The ClusterQueues with pending workloads in these cohort trees (all of them once
        topology nodes changed: any head may place pods)."""
        if not trees:
            return set()
        if NODES in trees:
            return set(snapshot.pending)
        return {name for name in snapshot.pending if snapshot.trees.root_name(name) in trees}

    @staticmethod
    def _release_held(snapshot: Snapshot) -> set[str]:
        """The start of a later round, as the start of Kueue's next cycle: the room preemptors
        held is given back (a preemptor still waiting for its victims holds it again when it is
        processed, first, after every head was nominated). Returns the trees (and NODES) where
        room was given back."""
        changed: set[str] = set()
        for key in snapshot.reserved:
            held = snapshot.release(key)
            if held is not None:
                changed.add(snapshot.trees.root_name(held[0].name) or "")
                if held[2]:
                    changed.add(NODES)
        return changed

    @staticmethod
    def _sorted(entries: list[_Entry], snapshot: Snapshot, state: QueueState) -> Iterator[_Entry]:
        """Kueue's classic order: a waiting preemptor first (unless `prioritize_preemptors` is off),
        then by borrowing level, priority, age."""
        first = snapshot.prioritize_preemptors
        entries.sort(key=lambda e: entry_order(e.wl, first and e.wl.key in state.waiting, e.assignment.borrowing))
        yield from entries

    @classmethod
    def _tournament(cls, entries: list[_Entry], snapshot: Snapshot, state: QueueState) -> Iterator[_Entry]:
        """With fair sharing: a tournament run again before each entry, against the usage the ones
        before it left (the classic order picks the tree)."""
        remaining = list(cls._sorted(entries, snapshot, state))
        # As nominated, as Kueue's heads; a tie goes to none when preemptors are not prioritized.
        waiting = (
            {e.wl.key for e in remaining if e.wl.key in state.waiting} if snapshot.prioritize_preemptors else set()
        )
        while len(remaining) > 1:
            contenders = [Contender(e.wl, e.cq.node, e.assignment.usage, e.wl.key in waiting) for e in remaining]
            yield remaining.pop(tournament(contenders))
        yield from remaining  # the last one needs no tournament

    @staticmethod
    def _park_equivalents(
        wl: WorkloadInfo, cq: ClusterQueueInfo, reason: str, snapshot: Snapshot, state: QueueState, result: CycleResult
    ) -> None:
        """Kueue's SchedulingEquivalenceHashing: pending workloads of the same shape cannot fit
        either, so they are parked with it, unevaluated, until quota frees. Like Kueue's workload
        controller, a bypassed one only gets a status when it shows a stale one (pending evaluation
        after an eviction, say); one that has no condition yet keeps having none."""
        shape = wl.shape
        state.parked_shapes.setdefault(cq.name, {})[shape] = reason
        parked = state.inadmissible.setdefault(cq.name, set())
        # Set operations, not a step per workload: the parked sets empty whenever quota frees,
        # so a failing head parks its equals again and again (hundreds at Kueue's full scale).
        fresh = snapshot.pending_of_shape(cq.name, shape) - parked - state.waiting.keys() - snapshot.admitted_keys
        fresh.discard(wl.key)
        parked |= fresh
        stale = [other for key in fresh if _shows_stale(other := snapshot.workloads[key])]
        # In queue order, as Kueue's workload controller would come to them.
        for other in sorted(stale, key=queue_order):
            result.pending.append(Pending(other, cq.name, reason, BYPASSED_MESSAGE))

    @staticmethod
    def _bypass(wl: WorkloadInfo, cq: str, reason: str, state: QueueState, result: CycleResult) -> None:
        """Parks a workload unevaluated, as equivalent to one that failed. Like Kueue's workload
        controller, it only gets a status when it shows a stale one (pending evaluation after an
        eviction, say); one that has no condition yet keeps having none."""
        state.park(cq, wl.key)
        if _shows_stale(wl):
            result.pending.append(Pending(wl, cq, reason, BYPASSED_MESSAGE))

    @staticmethod
    def _reserve(entry: _Entry, snapshot: Snapshot) -> bool:
        """Holds the preemptor's quota (and TAS node capacity) until its victims are gone, as Kueue
        adds a preemptor's usage to its ClusterQueue. Its victims keep theirs until they are
        evicted: a workload that needs their room to be nominated waits for them to go (Kueue's
        DeferredFit); only a head that already fit when nominated may take what they free beyond
        the preemptor's need in this cycle (Kueue's fits check, `_still_fits`). True when pods
        were placed on nodes."""
        for target in entry.targets:
            snapshot.remove_workload(target.workload)
        usage = snapshot.node_usage
        reserved = NodeUsage()
        for ps in entry.assignment.pod_sets:
            if ps.view is None or ps.request is None:
                continue
            placement = ps.place(usage)
            if placement is not None:
                reserved.add(placement.usage(ps.request.per_pod))
        for target in entry.targets:
            snapshot.add_workload(target.workload)
        snapshot.reserve(entry.wl, entry.cq, entry.assignment.usage, reserved.used)
        return bool(reserved.used)

    def _process(
        self,
        entry: _Entry,
        snapshot: Snapshot,
        state: QueueState,
        result: CycleResult,
        round_: _Round,
        tree: str,
    ) -> bool:
        """Applies one entry's decision; True when its ClusterQueue may go on with its next head
        (the entry was admitted, or parked as inadmissible)."""
        wl, cq, assignment = entry.wl, entry.cq, entry.assignment
        if entry.wake_at is not None and (result.retry_at is None or entry.wake_at < result.retry_at):
            result.retry_at = entry.wake_at
        mode = assignment.mode
        if mode == Mode.FIT and self._blocked(snapshot):
            # Kueue's scheduler sets this and waits until every admitted workload's pods are ready.
            result.pending.append(
                Pending(wl, cq.name, pods_ready.WAITING_FOR_PODS_READY, pods_ready.WAITING_FOR_PODS_READY_MESSAGE)
            )
            round_.blocked = True
            return False
        if mode == Mode.FIT:
            nodes = assignment.node_usage()
            snapshot.assume(wl, cq, assignment.usage, nodes)
            round_.touched.add(tree)
            if nodes:
                round_.touched.add(NODES)
            state.waiting.pop(wl.key, None)
            pod_sets = _pod_set_assignments(assignment)
            flavors = (f for ps in assignment.pod_sets for f in ps.flavors.values())
            checks = admission_checks.required(cq.admission_checks, flavors, cq.flavors)
            result.admitted.append(Admission(wl, cq.name, pod_sets, checks))
            return True
        message = assignment.message()
        if mode == Mode.PREEMPT and entry.targets and entry.closed_gates:
            # Kueue checks the gates before anything else about the targets: none is preempted.
            for record in entry.records:
                if record.outcome == "chosen":
                    record.detail += "; not preempted: the preemptor is gated"
            note = f"preemption gated: closed gate(s) {', '.join(entry.closed_gates)}; waits until they open"
            result.explanations.append(Explanation(wl.key, cq.name, message, entry.records, [note]))
            state.waiting.pop(wl.key, None)
            state.park(cq.name, wl.key)
            state.gated.add(wl.key)
            result.pending.append(Pending(wl, cq.name, ADMISSION_GATED, GATED_MESSAGE, blocked_on_gates=True))
            return cq.queueing_strategy == "BestEffortFIFO"
        if mode == Mode.PREEMPT and entry.targets:
            keys = {t.workload.key for t in entry.targets}
            own = state.waiting.get(wl.key, ())
            # Victims whose evictions are under way (chosen in an earlier round, or being
            # written) are not evicted again. As in Kueue, they overlap only victims claimed in
            # this round: the first preemptor processed that needs one claims it and waits for it
            # (its own, or another's whose preemptor comes later or is gone).
            fresh = [t for t in entry.targets if not snapshot.is_evicting(t.workload.key)]
            if not fresh and all(key in own for key in keys) and not keys & round_.victims.keys():
                # Still waiting for the victims it chose: it holds their room again, as Kueue
                # adds a waiting preemptor's usage in each cycle; nothing new is decided.
                round_.victims.update((t.workload.key, t.workload) for t in entry.targets)
                round_.touched.add(tree)
                if self._reserve(entry, snapshot):
                    round_.touched.add(NODES)
                return False
            explanation = Explanation(wl.key, cq.name, message, entry.records)
            result.explanations.append(explanation)
            if keys & round_.victims.keys():
                explanation.notes.append("skipped: overlapping preemption targets with another workload")
                result.pending.append(Pending(wl, cq.name, WAITING_FOR_QUOTA, OVERLAPPING_TARGETS))
                return False
            round_.victims.update((t.workload.key, t.workload) for t in entry.targets)
            if snapshot.limits is not None:
                # Later entries and rounds of this pass count these preemptions in the windows.
                for t in entry.targets:
                    if not snapshot.leaving(t.workload):
                        pair = limit_pair(wl.key, cq.name, t.workload, t.rule)
                        snapshot.limits.record(pair, snapshot.now)
            round_.touched.add(tree)
            state.waiting[wl.key] = tuple(sorted(keys))
            if self._reserve(entry, snapshot):
                round_.touched.add(NODES)
            for target in fresh:
                victim_cq = snapshot.cluster_queues[target.workload.cluster_queue or ""]
                result.preempted.append(
                    Preemption(target.workload, wl, target, cq.name, cq.node.path(), victim_cq.node.path())
                )
            result.pending.append(
                Pending(
                    wl,
                    cq.name,
                    WAITING_FOR_PREEMPTED,
                    f"{message}. Pending the preemption of {len(entry.targets)} workload(s)",
                )
            )
            return False
        # It cannot preempt (any more): it no longer heads its queue ahead of the others.
        was_preemptor = state.waiting.pop(wl.key, None) is not None
        if entry.delayed_until is not None:
            # Not parked: it must come back when the delay is over.
            result.explanations.append(Explanation(wl.key, cq.name, message, [], [entry.delay_note]))
            result.pending.append(Pending(wl, cq.name, WAITING_FOR_QUOTA, f"{message}; {entry.delay_note}"))
            if result.retry_at is None or entry.delayed_until < result.retry_at:
                result.retry_at = entry.delayed_until
            return False
        throttle = entry.throttle
        if mode == Mode.PREEMPT:
            why = (
                f"may not preempt: {entry.may_not_preempt}; it waits for free quota"
                if entry.may_not_preempt is not None
                else "no victim set found"
            )
            if throttle is not None:
                why = f"{LIMIT_BLOCKED_PREFIX} {throttle.limit}; would have evicted {', '.join(throttle.would_evict)}"
                if throttle.retry_at is not None:
                    why += f"; looked at again at {format_time(throttle.retry_at)}"
            result.explanations.append(Explanation(wl.key, cq.name, message, entry.records, [why]))
        state.park(cq.name, wl.key)
        if throttle is not None:
            # Parked as any preemptor without victims; unparked when a window has room again.
            if throttle.retry_at is not None:
                state.throttled[wl.key] = (cq.name, throttle.retry_at)
                if result.retry_at is None or throttle.retry_at < result.retry_at:
                    result.retry_at = throttle.retry_at
            reason = TOPOLOGY_PLACEMENT_FAILED if assignment.topology_failed else WAITING_FOR_QUOTA
            message += _blockers(entry.records)
            result.pending.append(
                Pending(
                    wl,
                    cq.name,
                    reason,
                    message,
                    blocked_by_limit=throttle.limit,
                    would_evict=throttle.would_evict,
                    retry_at=throttle.retry_at,
                )
            )
            return cq.queueing_strategy == "BestEffortFIFO"
        if mode == Mode.PREEMPT:
            reason = TOPOLOGY_PLACEMENT_FAILED if assignment.topology_failed else WAITING_FOR_QUOTA
            message += _blockers(entry.records)
            if cq.preemption.reclaim_within_cohort != "Any" or (was_preemptor and snapshot.prioritize_preemptors):
                # Kueue's reserveCapacityForUnreclaimablePreempt: a queue that cannot always take
                # its quota back (or a preemptor waiting, when preemptors are prioritized) keeps
                # it from the rest of the cohort for the rest of the cycle.
                snapshot.reserve(wl, cq, _to_reserve(assignment, cq))
                round_.touched.add(tree)
        else:
            reason = _pending_reason(assignment)
        result.pending.append(Pending(wl, cq.name, reason, message))
        if cq.queueing_strategy == "BestEffortFIFO":
            self._park_equivalents(wl, cq, reason, snapshot, state, result)
        return cq.queueing_strategy == "BestEffortFIFO"
