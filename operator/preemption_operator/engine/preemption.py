"""The victim search: the smallest set of candidates (classic first, then the extra streams of
configurable rules) whose removal lets the preemptor fit, with Kueue's borrowing attempts and
fill-back, and the protections every path honours.

Everything is computed on the snapshot: candidates are removed from it to test whether the
preemptor fits, and put back before returning.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from ..api.meta import format_time
from . import protection
from .candidates import HUMAN_REASONS, Candidate, CandidateRecord, Context, ExtraCandidates, Target
from .classic import attempts, classic_candidates, policy_allows, still_valid
from .fair_preemption import SOURCE as FAIR_SOURCE
from .fair_preemption import run_strategies
from .flavors import Assignment
from .ordering import candidate_key
from .snapshot import ClusterQueueInfo, Snapshot
from .workload import WorkloadInfo


def _admissible(ctx: Context, cand: Candidate, pass_: _Pass) -> bool:
    """Protections every path honours: hard ones exclude, an opt-out defers to the last resort."""
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


def find_targets(
    preemptor: WorkloadInfo,
    cq: ClusterQueueInfo,
    assignment: Assignment,
    snapshot: Snapshot,
    extra: ExtraCandidates | None = None,
    *,
    complete: bool = False,
) -> Search:
    """The smallest set of workloads whose preemption lets `preemptor` fit, or none.
    The snapshot is left as it was found. With `complete`, the records also name the eligible
    candidates the search never needed to reach (what `explain` shows; the operator skips it)."""
    ctx = Context(preemptor, cq, snapshot, assignment)
    if snapshot.fair_sharing.enabled:
        fair = fair_candidates(ctx)
        first = _Pass(last_resort=False)
        targets = _fair_search(ctx, fair, extra, first, complete)
        if targets is None and first.opted_out:
            targets = _fair_search(ctx, fair, extra, _Pass(last_resort=True), complete)
    else:
        classic, none_from_others, none_hierarchical = classic_candidates(ctx)
        tries = attempts(ctx, none_from_others, none_hierarchical)
        first = _Pass(last_resort=False)
        targets = _search(ctx, classic, tries, extra, first, complete)
        if targets is None and first.opted_out:
            # YuniKorn's law 1: an opt-out is a strong suggestion, not a guarantee.
            targets = _search(ctx, classic, tries, extra, _Pass(last_resort=True), complete)
    # Later attempts and the last-resort pass revisit candidates: keep each line once.
    seen: set[tuple[str, str, str, str]] = set()
    records = []
    for rec in ctx.records:
        line = (rec.workload, rec.outcome, rec.detail, rec.source)
        if line not in seen:
            seen.add(line)
            records.append(rec)
    return Search(targets or [], records, ctx.wake_at)


def _search(
    ctx: Context,
    classic: list[Candidate],
    tries: list[bool],
    extra: ExtraCandidates | None,
    pass_: _Pass,
    complete: bool = False,
) -> list[Target] | None:
    snapshot, cq = ctx.snapshot, ctx.cq
    for borrowing in tries:
        chosen: list[Candidate] = []
        seen: set[str] = set()
        stream = _stream(ctx, classic, borrowing, extra, seen, pass_)
        for cand in stream:
            snapshot.remove_workload(cand.workload)
            seen.add(cand.workload.key)
            chosen.append(cand)
            if ctx.fits(borrowing):
                chosen = _fill_back(ctx, chosen, borrowing)
                for c in chosen:
                    snapshot.add_workload(c.workload)
                chosen.sort(key=lambda c: candidate_key(c.workload, cq.name, snapshot.now))
                for c in chosen:
                    ctx.record(c.workload, "chosen", _chosen_detail(c), c.source)
                if complete:
                    for rest in stream:
                        seen.add(rest.workload.key)
                        ctx.record(
                            rest.workload, "spared", "eligible, not needed: the preemptor fits without it", rest.source
                        )
                return [Target(c.workload, c.reason, c.rule, c.last_resort) for c in chosen]
        for c in chosen:
            snapshot.add_workload(c.workload)
    return None


def _chosen_detail(cand: Candidate, why: str = "") -> str:
    detail = HUMAN_REASONS.get(cand.reason, cand.reason) + (f" ({why})" if why else "")
    if cand.last_resort:
        detail += "; opted out of preemption, chosen as last resort"
    if cand.workload.evicted:
        detail += "; already being evicted: counted, not preempted again"
    return detail


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


def _fair_search(
    ctx: Context,
    candidates: list[WorkloadInfo],
    extra: ExtraCandidates | None,
    pass_: _Pass,
    complete: bool = False,
) -> list[Target] | None:
    """Kueue's fairPreemptions, one pass: the strategies over the usable candidates with the
    preemptor's usage simulated, then (configurable preemption) the extra streams as a last
    resort; fill-back, always allowing borrowing (fair sharing has no borrowWithinCohort)."""
    snapshot, node, requests = ctx.snapshot, ctx.cq.node, ctx.requests
    candidates = [wl for wl in candidates if not snapshot.is_removed(wl)]
    if pass_.last_resort:
        # Opted-out workloads go after every other candidate of their ClusterQueue.
        candidates.sort(key=lambda wl: protection.opted_out(wl) and not wl.evicted)
    checked: dict[str, bool] = {}

    def usable(wl: WorkloadInfo) -> bool:
        # The protections, asked when the search reaches a candidate (as the classic stream does).
        found = checked.get(wl.key)
        if found is None:
            found = checked[wl.key] = _admissible(ctx, Candidate(wl, "", origin=FAIR_SOURCE), pass_)
        return found

    taken: list[Candidate] = []
    why: dict[str, str] = {}
    rejected: set[str] = set()

    def take(cand: Candidate, detail: str) -> None:
        cand.origin = cand.origin if cand.rule is not None else FAIR_SOURCE
        cand.last_resort = pass_.last_resort and protection.opted_out(cand.workload)
        snapshot.remove_workload(cand.workload)
        taken.append(cand)
        why[cand.workload.key] = detail

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
    if not fits or complete:
        # What the strategies never reached: a failed pass must know every opt-out and
        # protection (the last-resort pass and the wake-up depend on them); explain lists all.
        for wl in candidates:
            usable(wl)
    if not fits and extra is not None:
        # Configurable rules only once the fair strategies are exhausted.
        seen = {c.workload.key for c in taken}
        for cand in extra(ctx, True):
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
        return None
    taken = _fill_back(ctx, taken, True)
    for cand in taken:
        snapshot.add_workload(cand.workload)
    taken.sort(key=lambda c: candidate_key(c.workload, ctx.cq.name, snapshot.now))
    for cand in taken:
        ctx.record(cand.workload, "chosen", _chosen_detail(cand, why.get(cand.workload.key, "")), cand.source)
    if complete:
        chosen = {c.workload.key for c in taken}
        for wl in candidates:
            if checked[wl.key] and wl.key not in chosen and wl.key not in rejected:
                ctx.record(wl, "spared", "eligible, not needed: the preemptor fits without it", FAIR_SOURCE)
    return [Target(c.workload, c.reason, c.rule, c.last_resort) for c in taken]
