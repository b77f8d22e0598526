"""What every victim search works with and returns: candidates, targets, the explanation records,
the search context, and the reasons and messages Kueue writes for them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Literal

from .flavors import Assignment
from .quota import FlavorResource, QuotaNode
from .snapshot import ClusterQueueInfo, Snapshot
from .workload import WorkloadInfo

IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"
IN_COHORT_FAIR_SHARING = "InCohortFairSharing"
CONFIGURABLE_PREEMPTION = "ConfigurablePreemption"

HUMAN_REASONS = {
    IN_CLUSTER_QUEUE: "prioritization in the ClusterQueue",
    IN_COHORT_RECLAMATION: "reclamation within the cohort",
    IN_COHORT_FAIR_SHARING: "Fair Sharing within the cohort",
    IN_COHORT_RECLAIM_WHILE_BORROWING: "reclamation within the cohort while borrowing",
    CONFIGURABLE_PREEMPTION: "the configured preemption rules",
}


class Variant(Enum):
    WITHIN_CQ = IN_CLUSTER_QUEUE
    HIERARCHICAL_RECLAIM = IN_COHORT_RECLAMATION
    RECLAIM_WITHOUT_BORROWING = "ReclaimWithoutBorrowing"
    RECLAIM_WHILE_BORROWING = IN_COHORT_RECLAIM_WHILE_BORROWING

    @property
    def reason(self) -> str:
        return IN_COHORT_RECLAMATION if self is Variant.RECLAIM_WITHOUT_BORROWING else self.value


@dataclass(frozen=True)
class RuleMatch:
    """Which rule of a PreemptionConfig, and which of its selectors, selected a victim."""

    config: str
    selectors: tuple[tuple[str, tuple[int, ...]], ...]
    """(rule name, selector indexes), rules in spec order."""
    ordering: str = ""
    """The config's `spec.ordering` as explanations show it; empty for the classic order."""

    def describe(self) -> str:
        return "; ".join(f"{rule}/{','.join(str(i) for i in idx)}" for rule, idx in self.selectors)


@dataclass(frozen=True)
class Target:
    workload: WorkloadInfo
    reason: str
    rule: RuleMatch | None = None
    last_resort: bool = False
    """The victim had opted out of preemption and was taken because nothing else let the preemptor fit."""


Outcome = Literal["chosen", "spared", "excluded", "skipped", "deferred", "rule-skipped"]
"""What became of a candidate: chosen as a victim; spared (given back by the fill-back); excluded
(a policy, protection or selector forbids it); skipped (not usable in that attempt); deferred (opted
out: used only as a last resort); rule-skipped (its rule did not apply to this preemptor)."""


@dataclass(slots=True)
class CandidateRecord:
    """One line of the explanation: a workload considered as a victim and what became of it."""

    workload: str
    cluster_queue: str
    outcome: Outcome
    detail: str
    source: str = ""
    blocking: bool = False
    """A protection held it, or a rule was skipped: why a preemptor that finds no victims waits
    (its pending message says so)."""


@dataclass
class Candidate:
    workload: WorkloadInfo
    reason: str
    variant: Variant | None = None
    lca: QuotaNode | None = None
    """The lowest common ancestor with the preemptor's ClusterQueue (for other queues' workloads)."""
    rule: RuleMatch | None = None
    last_resort: bool = False
    origin: str = "classic"
    """The search that found it: classic, or fair sharing (whose reason is known once chosen)."""
    why: str = ""
    """What let a fair-sharing strategy take it (the shares compared), for the explanation."""

    @property
    def source(self) -> str:
        if self.rule is not None:
            ordered = f", ordered by {self.rule.ordering}" if self.rule.ordering else ""
            return f"preemption config {self.rule.config} rule {self.rule.describe()}{ordered}"
        return f"{self.origin} ({self.reason})" if self.reason else self.origin


@dataclass
class Context:
    """The preemptor and what it needs."""

    preemptor: WorkloadInfo
    cq: ClusterQueueInfo
    snapshot: Snapshot
    assignment: Assignment
    records: list[CandidateRecord] = field(default_factory=list)
    wake_at: datetime | None = None
    """The earliest time a protection that held now runs out (a toleration window, a rule's
    minTriggerRequiredDuration): the decision may change then with nothing else changing."""

    def wake_no_later_than(self, moment: datetime) -> None:
        if self.wake_at is None or moment < self.wake_at:
            self.wake_at = moment

    @property
    def frs(self) -> set[FlavorResource]:
        return self.assignment.need_preemption

    @property
    def requests(self) -> dict[FlavorResource, int]:
        return self.assignment.usage

    def record(
        self, wl: WorkloadInfo, outcome: Outcome, detail: str, source: str = "", *, blocking: bool = False
    ) -> None:
        self.records.append(CandidateRecord(wl.key, wl.cluster_queue or "", outcome, detail, source, blocking))

    def fits(self, allow_borrowing: bool) -> bool:
        """Whether the preemptor fits now: quota (and, for topology requests, placement)."""
        return self.fits_quota(allow_borrowing) and self.fits_topology()

    def fits_topology(self) -> bool:
        """Every TAS pod set has a placement, each seeing the pods of the ones placed before it."""
        usage = self.snapshot.node_usage
        placed_any = False
        for ps in self.assignment.pod_sets:
            if ps.view is None or ps.request is None:
                continue
            placement = ps.place(usage)
            if placement is None:
                return False
            if not placed_any:
                usage = usage.copy()
                placed_any = True
            usage.add(placement.usage(ps.request.per_pod))
        return True

    def fits_quota(self, allow_borrowing: bool) -> bool:
        node = self.cq.node
        for fr, value in self.requests.items():
            if not allow_borrowing and node.borrowing_with(fr, value):
                return False
            if value > node.available(fr):
                return False
        return True


# Extra candidate streams (configurable preemption) plug in here: called once the classic
# candidates of an attempt are exhausted, with the attempt's borrowing flag.
ExtraCandidates = Callable[[Context, bool], Iterator[Candidate]]


def preemption_message(target: Target, preemptor: WorkloadInfo, preemptor_path: str, victim_path: str) -> str:
    """Kueue's message on the victim's Preempted condition."""
    human = HUMAN_REASONS.get(target.reason, "UNKNOWN")
    return (
        f"Preempted to accommodate a workload (UID: {preemptor.uid}, JobUID: {preemptor.job_uid}) "
        f"due to {human}; preemptor path: {preemptor_path}; preemptee path: {victim_path}"
    )
