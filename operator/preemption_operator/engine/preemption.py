"""The victim search: the smallest set of candidates (classic first, then the extra streams of
configurable rules) whose removal lets the preemptor fit, with Kueue's borrowing attempts and
fill-back, and the protections every path honours.

Everything is computed on the snapshot: candidates are removed from it to test whether the
preemptor fits, and put back before returning.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from ..api.meta import format_time
from . import protection
from .candidates import HUMAN_REASONS, Candidate, CandidateRecord, Context, ExtraCandidates, Target
from .classic import attempts, classic_candidates, policy_allows, still_valid
from .fair_preemption import SOURCE as FAIR_SOURCE
from .fair_preemption import run_strategies
from .flavors import Assignment
from .limits import Blocked
from .ordering import candidate_key
from .snapshot import ClusterQueueInfo, Snapshot
from .workload import WorkloadInfo


def _admissible(ctx: Context, cand: Candidate, pass_: _Pass) -> bool:
    """What every path honours: protections (hard ones exclude, an opt-out defers to the last
    resort), then PreemptionLimits."""
    return _protections_allow(ctx, cand, pass_) and _within_limits(ctx, cand)


def _within_limits(ctx: Context, cand: Candidate) -> bool:
    """Whether every PreemptionLimit covering the pair has room, counting the candidates this
    search has taken so far. A victim `leaving` already is no new preemption."""
    book = ctx.snapshot.limits
    wl = cand.workload
    if book is None or not book.rules or not ctx.enforce_limits or ctx.snapshot.leaving(wl):
        return True
    pair = ctx.pair(cand)
    taken = (
        [p for key, (other, p) in ctx.limit_taken.items() if key != wl.key and ctx.snapshot.is_removed(other)]
        if ctx.limit_taken
        else []
    )
    blocked = book.blocking(pair, taken)
    if blocked is None:
        ctx.limit_taken[wl.key] = (wl, pair)
        return True
    ctx.limited.append((wl.key, blocked))
    ctx.record(wl, "excluded", blocked.describe(), cand.source, blocking=True)
    return False


def _protections_allow(ctx: Context, cand: Candidate, pass_: _Pass) -> bool:
    wl = cand.workload
    if wl.key in pass_.protected:
        return False
    victim_cq = ctx.snapshot.cluster_queues.get(wl.cluster_queue or "")
    reason = (
        protection.protected(wl, ctx.preemptor, victim_cq.node, ctx.cq.node, ctx.snapshot.now)
        if victim_cq is not None
        else None
    )
    if reason is not None:
        pass_.protected.add(wl.key)
        ends = protection.toleration_ends(wl, ctx.preemptor, ctx.snapshot.now)
        if ends is not None:
            if " until " not in reason:
                reason += f", until {format_time(ends)}"
            ctx.wake_no_later_than(ends)
        ctx.record(wl, "excluded", reason, cand.source, blocking=True)
        return False
    if protection.opted_out(wl) and not pass_.last_resort:
        pass_.opted_out.append(cand)
        ctx.record(
            wl, "deferred", "opted out of preemption: used only if nothing else lets the preemptor fit", cand.source
        )
        return False
    return True


@dataclass
class _Pass:
    """One search for a victim set: the first leaves opted-out workloads aside, the second may use them."""

    last_resort: bool
    opted_out: list[Candidate] = field(default_factory=list)
    protected: set[str] = field(default_factory=set)


def _stream(
    ctx: Context,
    classic: list[Candidate],
    borrowing: bool,
    extra: ExtraCandidates | None,
    seen: set[str],
    pass_: _Pass,
) -> Iterator[Candidate]:
    deferred: list[Candidate] = []

    def usable(cand: Candidate) -> bool:
        if not _admissible(ctx, cand, pass_):
            return False
        if pass_.last_resort and protection.opted_out(cand.workload) and not cand.workload.evicted:
            deferred.append(cand)  # after every other candidate (already-evicted ones still first)
            return False
        return True

    for cand in classic:
        if ctx.snapshot.is_removed(cand.workload):
            continue
        valid, why = still_valid(ctx, cand, borrowing)
        if not valid:
            ctx.record(cand.workload, "skipped", why, cand.source)
            continue
        if usable(cand):
            yield cand
    if extra is not None:
        for cand in extra(ctx, borrowing):
            if cand.workload.key in seen or ctx.snapshot.is_removed(cand.workload):
                continue
            if usable(cand):
                yield cand
    for cand in deferred:
        if ctx.snapshot.is_removed(cand.workload) or cand.workload.key in seen:
            continue
        if cand.variant is not None and not still_valid(ctx, cand, borrowing)[0]:
            continue
        cand.last_resort = True
        yield cand


def _fill_back(ctx: Context, targets: list[Candidate], borrowing: bool) -> list[Candidate]:
    for i in range(len(targets) - 2, -1, -1):
        ctx.snapshot.add_workload(targets[i].workload)
        if ctx.fits(borrowing):
            ctx.record(targets[i].workload, "spared", "the preemptor fits without it", targets[i].source)
            targets[i] = targets[-1]
            targets.pop()
        else:
            ctx.snapshot.remove_workload(targets[i].workload)
    return targets


@dataclass
class Search:
    """The outcome of a victim search: the victims (none if the preemptor cannot fit), what
    became of every candidate, and when a protection that held runs out."""

    targets: list[Target]
    records: list[CandidateRecord]
    wake_at: datetime | None = None
    limited: list[tuple[str, Blocked]] = field(default_factory=list)
    """Candidates a PreemptionLimit kept out, with the limit."""


@dataclass
class _Found:
    """A pass that made the preemptor fit: what it took (removed from the snapshot), the borrowing
    allowed when it fitted, and the eligible candidates it never needed to reach."""

    taken: list[Candidate]
    borrowing: bool
    rest: Callable[[], Iterator[Candidate]]


class _Strategy(Protocol):
    def run(self, pass_: _Pass) -> _Found | None:
        """Takes candidates until the preemptor fits; None (everything put back) if it never does."""


def find_targets(
    preemptor: WorkloadInfo,
    cq: ClusterQueueInfo,
    assignment: Assignment,
    snapshot: Snapshot,
    extra: ExtraCandidates | None = None,
    *,
    complete: bool = False,
    enforce_limits: bool = True,
) -> Search:
    """The smallest set of workloads whose preemption lets `preemptor` fit, or none: classic or
    fair strategies take candidates, in one pass that leaves opted-out workloads aside and, if it
    fails, a last-resort pass that may use them; the fill-back then gives back every victim the
    preemptor fits without. The snapshot is left as it was found. With `complete`, the records
    also name the eligible candidates the search never needed to reach (what `explain` shows; the
    operator skips it). Without `enforce_limits`, the search PreemptionLimits would allow
    if they had room (whether one blocks the preemptor)."""
    ctx = Context(preemptor, cq, snapshot, assignment, enforce_limits=enforce_limits)
    strategy: _Strategy = (
        _FairStrategy(ctx, extra, complete) if snapshot.fair_sharing.enabled else _ClassicStrategy(ctx, extra, complete)
    )
    first = _Pass(last_resort=False)
    found = strategy.run(first)
    if found is None and first.opted_out:
        # YuniKorn's law 1: an opt-out is a strong suggestion, not a guarantee.
        found = strategy.run(_Pass(last_resort=True))
    targets = _chosen(ctx, found, complete) if found is not None else []
    # Later attempts and the last-resort pass revisit candidates: keep each line once.
    seen: set[tuple[str, str, str, str]] = set()
    records = []
    for rec in ctx.records:
        line = (rec.workload, rec.outcome, rec.detail, rec.source)
        if line not in seen:
            seen.add(line)
            records.append(rec)
    return Search(targets, records, ctx.wake_at, ctx.limited)


def _chosen(ctx: Context, found: _Found, complete: bool) -> list[Target]:
    """The fill-back, then the victims in candidate order, recorded."""
    snapshot = ctx.snapshot
    taken = _fill_back(ctx, found.taken, found.borrowing)
    for cand in taken:
        snapshot.add_workload(cand.workload)
    taken.sort(key=lambda c: candidate_key(c.workload, ctx.cq.name, snapshot.now))
    for cand in taken:
        ctx.record(cand.workload, "chosen", _chosen_detail(cand), cand.source)
    if complete:
        for rest in found.rest():
            ctx.record(rest.workload, "spared", "eligible, not needed: the preemptor fits without it", rest.source)
    return [Target(c.workload, c.reason, c.rule, c.last_resort) for c in taken]


def _chosen_detail(cand: Candidate) -> str:
    detail = HUMAN_REASONS.get(cand.reason, cand.reason) + (f" ({cand.why})" if cand.why else "")
    if cand.last_resort:
        detail += "; opted out of preemption, chosen as last resort"
    if cand.workload.evicted:
        detail += "; already being evicted: counted, not preempted again"
    return detail


class _ClassicStrategy:
    """Kueue's classic preemption: candidates by borrowing level and priority in its borrowing
    attempts, then the extra streams of configurable rules."""

    def __init__(self, ctx: Context, extra: ExtraCandidates | None, complete: bool = False) -> None:
        self.ctx, self.extra, self.complete = ctx, extra, complete
        self.candidates, none_from_others, none_hierarchical = classic_candidates(ctx)
        self.tries = attempts(ctx, none_from_others, none_hierarchical)

    def run(self, pass_: _Pass) -> _Found | None:
        snapshot = self.ctx.snapshot
        for borrowing in self.tries:
            taken: list[Candidate] = []
            seen: set[str] = set()
            stream = _stream(self.ctx, self.candidates, borrowing, self.extra, seen, pass_)
            for cand in stream:
                snapshot.remove_workload(cand.workload)
                seen.add(cand.workload.key)
                taken.append(cand)
                if self.ctx.fits(borrowing):
                    return _Found(taken, borrowing, functools.partial(_rest, stream, seen))
            for cand in taken:
                snapshot.add_workload(cand.workload)
                if self.complete:  # what explain and the preemption-risk view show
                    self.ctx.record(cand.workload, "spared", NOT_ENOUGH, cand.source)
        return None


NOT_ENOUGH = "eligible, not enough: with every eligible candidate taken the preemptor still does not fit"


def _rest(stream: Iterator[Candidate], seen: set[str]) -> Iterator[Candidate]:
    """What a classic stream would have yielded after the preemptor fitted."""
    for cand in stream:
        seen.add(cand.workload.key)
        yield cand


# -- fair sharing -------------------------------------------------------------------------------------


def fair_candidates(ctx: Context) -> list[WorkloadInfo]:
    """Kueue's findCandidates under fair sharing: the preemptor's own workloads its
    withinClusterQueue policy allows, and those of every ClusterQueue of the cohort tree that
    borrows on a contested flavor-resource its reclaimWithinCohort policy allows; all using a
    contested flavor-resource, in candidate order."""
    snapshot, cq = ctx.snapshot, ctx.cq
    start = len(ctx.records)
    found: list[WorkloadInfo] = []

    frs = ctx.frs

    def collect(queue: ClusterQueueInfo, policy: str) -> None:
        for wl in snapshot.admitted(queue):
            if not wl.uses_any(frs):
                continue
            if policy == "Any":
                found.append(wl)
                continue
            allowed, why = policy_allows(ctx, wl)
            if allowed:
                found.append(wl)
            else:
                ctx.record(wl, "excluded", why, FAIR_SOURCE)

    if cq.preemption.within_cluster_queue != "Never":
        collect(cq, cq.preemption.within_cluster_queue)
    if cq.node.parent is not None and cq.preemption.reclaim_within_cohort != "Never":
        for node in cq.node.root().subtree_cluster_queues():
            if node is cq.node or node.within_nominal(ctx.frs):
                continue  # nothing to reclaim from a ClusterQueue that does not borrow
            other = snapshot.cluster_queues.get(node.name)
            if other is not None:
                collect(other, cq.preemption.reclaim_within_cohort)
    ctx.records[start:] = sorted(ctx.records[start:], key=lambda r: (r.cluster_queue, r.workload))
    found.sort(key=lambda wl: candidate_key(wl, cq.name, snapshot.now))
    return found


class _FairStrategy:
    """Kueue's fairPreemptions: the strategies over the usable candidates with the preemptor's
    usage simulated, then (configurable preemption) the extra streams as a last resort; always
    allowing borrowing (fair sharing has no borrowWithinCohort)."""

    def __init__(self, ctx: Context, extra: ExtraCandidates | None, complete: bool) -> None:
        self.ctx, self.extra, self.complete = ctx, extra, complete
        self.candidates = fair_candidates(ctx)

    def run(self, pass_: _Pass) -> _Found | None:
        ctx = self.ctx
        snapshot, node, requests = ctx.snapshot, ctx.cq.node, ctx.requests
        candidates = [wl for wl in self.candidates if not snapshot.is_removed(wl)]
        if pass_.last_resort:
            # Opted-out workloads go after every other candidate of their ClusterQueue.
            candidates.sort(key=lambda wl: protection.opted_out(wl) and not wl.evicted)
        checked: dict[str, bool] = {}

        def usable(wl: WorkloadInfo) -> bool:
            # The protections, asked when the search reaches a candidate (as the classic stream does).
            cand = Candidate(wl, "", origin=FAIR_SOURCE)
            found = checked.get(wl.key)
            if found is None:
                found = checked[wl.key] = _protections_allow(ctx, cand, pass_)
            # The limits are asked every time: what the search has taken meanwhile counts.
            return found and _within_limits(ctx, cand)

        taken: list[Candidate] = []
        rejected: set[str] = set()

        def take(cand: Candidate, detail: str) -> None:
            cand.origin = cand.origin if cand.rule is not None else FAIR_SOURCE
            cand.last_resort = pass_.last_resort and protection.opted_out(cand.workload)
            cand.why = detail
            snapshot.remove_workload(cand.workload)
            taken.append(cand)

        def reject(wl: WorkloadInfo, detail: str) -> None:
            rejected.add(wl.key)
            ctx.record(wl, "skipped", detail, FAIR_SOURCE)

        def fits_without_preemptor() -> bool:
            node.remove(requests)
            try:
                return ctx.fits(True)
            finally:
                node.add(requests)

        # Shares must include the incoming workload.
        node.add(requests)
        try:
            fits = run_strategies(
                ctx, candidates, snapshot.fair_sharing.strategies, usable, fits_without_preemptor, take, reject
            )
        finally:
            node.remove(requests)
        if not fits or self.complete:
            # What the strategies never reached: a failed pass must know every opt-out and
            # protection (the last-resort pass and the wake-up depend on them); explain lists all.
            for wl in candidates:
                usable(wl)
        if not fits and self.extra is not None:
            # Configurable rules only once the fair strategies are exhausted.
            seen = {c.workload.key for c in taken}
            for cand in self.extra(ctx, True):
                if cand.workload.key in seen or snapshot.is_removed(cand.workload):
                    continue
                if not _admissible(ctx, cand, pass_):
                    continue
                seen.add(cand.workload.key)
                take(cand, "")
                if ctx.fits(True):
                    fits = True
                    break
        if not fits:
            for cand in taken:
                snapshot.add_workload(cand.workload)
                if self.complete:  # what explain and the preemption-risk view show
                    ctx.record(cand.workload, "spared", NOT_ENOUGH, cand.source)
            return None

        def rest() -> Iterator[Candidate]:
            chosen = {c.workload.key for c in taken} | {key for key, _ in ctx.limited}
            for wl in candidates:
                if checked[wl.key] and wl.key not in chosen and wl.key not in rejected:
                    yield Candidate(wl, "", origin=FAIR_SOURCE)

        return _Found(taken, True, rest)
