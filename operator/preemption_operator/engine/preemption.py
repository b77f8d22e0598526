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
from .classic import attempts, classic_candidates, still_valid
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
                    detail = HUMAN_REASONS.get(c.reason, c.reason)
                    if c.last_resort:
                        detail += "; opted out of preemption, chosen as last resort"
                    if c.workload.evicted:
                        detail += "; already being evicted: counted, not preempted again"
                    ctx.record(c.workload, "chosen", detail, c.source)
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
