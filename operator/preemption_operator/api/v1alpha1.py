"""kueue.x-k8s.io/v1alpha1: PreemptionConfig, Kueue's Configurable Preemptions API."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field

from .duration import DURATION_PATTERN, DurationError, parse_nanoseconds
from .meta import (
    LIST_ATOMIC,
    LIST_SET,
    Conditions,
    CRDInfo,
    Int32,
    KubeModel,
    LabelSelector,
    NonNegativeInt32,
    PrinterColumn,
    TopLevel,
    cel,
    crd_default,
    list_map,
    problem,
)
from .quantity import show

VERSION = "v1alpha1"
API_VERSION = f"kueue.x-k8s.io/{VERSION}"

# The ClusterQueue annotation that names the PreemptionConfig a queue uses.
PREEMPTION_CONFIG_ANNOTATION = "kueue.x-k8s.io/preemption-config-name"

Comparison = Literal["LessThan", "GreaterThan", "LessThanOrEqual", "GreaterThanOrEqual"]
PriorityMode = Literal["Base", "Boosted"]
Scope = Literal["WithinLocalQueue", "WithinClusterQueue", "WithinParentCohort", "WithinCohortTree", "AnyClusterQueue"]
Trigger = Literal["Always", "InsufficientQuota", "QuotaFeasibleAndInsufficientTopology"]

ClassNames = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=253)]] | None,
    Field(max_length=32, json_schema_extra=LIST_SET),
]


class PriorityClassSelector(KubeModel):
    """Selects by `spec.priorityClassRef.name`: in matchNames (if set) and not in notMatchNames."""

    match_names: ClassNames = None
    not_match_names: ClassNames = None


class PriorityConstraint(
    PriorityClassSelector,
    json_schema_extra=cel(("has(self.mode) == has(self.comparison)", "mode and comparison must be specified together")),
):
    """Compares the candidate's priority with the preemptor's: `candidate <comparison> preemptor`."""

    mode: PriorityMode | None = None
    comparison: Comparison | None = None


class NumericLabelConstraint(
    KubeModel,
    json_schema_extra=cel(
        (
            "!has(self.minValue) || !has(self.maxValue) || self.minValue <= self.maxValue",
            "minValue must be less than or equal to maxValue",
        )
    ),
):
    """An integer workload label: bounds on the candidate's value, and a comparison with the preemptor's."""

    key: Annotated[str, Field(min_length=1, max_length=316)]
    fallback_value: Int32 | None = None
    """Used when the label is missing or not an integer; without it such workloads never match."""
    comparison: Comparison | None = None
    min_value: NonNegativeInt32 | None = None
    max_value: NonNegativeInt32 | None = None


def _duration(value: Any) -> Any:
    # The CRD's pattern cannot bound the value: a Go time.Duration holds about 292 years, and
    # longer ones (which the pattern admits) would overflow wherever the engine uses them.
    if isinstance(value, str) and len(value) <= 64:
        if not re.match(DURATION_PATTERN, value):
            raise problem(f"{show(value)} is not a duration such as 30s, 1m30s or 2h")
        try:
            parse_nanoseconds(value)
        except DurationError as exc:
            raise problem(str(exc)) from None
    return value


# A Go duration, as metav1.Duration is written: "30s", "1m30s", "2h".
Duration = Annotated[str, Field(max_length=64, pattern=DURATION_PATTERN), BeforeValidator(_duration)]

QuotaPolicy = Literal[
    "BorrowingCapacityFromPreemptor",
    "KeepsNominalQuota",
    "DRSLessThanOrEqualToFinalShare",
    "DRSLessThanInitialShare",
    "DRSAllStrategies",
]


def _min_le_max(low: str, high: str) -> tuple[str, str]:
    return (
        f"!has(self.{low}) || !has(self.{high}) || duration(self.{low}) <= duration(self.{high})",
        f"{low} must be less than or equal to {high}",
    )


class CandidateSelector(
    KubeModel,
    json_schema_extra=cel(
        (
            "!has(self.quota) || !(self.scope in ['WithinLocalQueue', 'WithinClusterQueue'])",
            "quota cannot be used with scope WithinLocalQueue or WithinClusterQueue",
        ),
        _min_le_max("minExecutionDuration", "maxExecutionDuration"),
        _min_le_max("minTimeFromCreationDuration", "maxTimeFromCreationDuration"),
    ),
):
    """Which admitted workloads a rule may preempt. Every field set here must match."""

    scope: Scope
    cluster_queue_selector: LabelSelector | None = None
    label_selector: LabelSelector | None = None
    numeric_labels: Annotated[
        list[NumericLabelConstraint] | None, Field(max_length=32, json_schema_extra=LIST_ATOMIC)
    ] = None
    priority: PriorityConstraint | None = None
    # Beyond Kueue's alpha API, in the shape of its future-work proposal:
    quota: QuotaPolicy | None = None
    """BorrowingCapacityFromPreemptor: the candidate's ClusterQueue, in the preemptor's cohort tree,
    uses more than its nominal quota in a contested resource. KeepsNominalQuota: it does, and it
    stays at or above nominal in every resource after the candidate is removed. The DRS values
    (fair sharing only): a fair preemption strategy would take the candidate, S2-a
    (DRSLessThanOrEqualToFinalShare), S2-b (DRSLessThanInitialShare) or either (DRSAllStrategies)."""
    min_execution_duration: Duration | None = None
    """The candidate has been running (since its quota was reserved) at least this long."""
    max_execution_duration: Duration | None = None
    execution_time_relation: Comparison | None = None
    """candidate's execution time <op> the preemptor's accumulated execution time."""
    min_time_from_creation_duration: Duration | None = None
    max_time_from_creation_duration: Duration | None = None
    time_from_creation_relation: Comparison | None = None
    """candidate's age <op> the preemptor's age."""


class ActivationPolicy(KubeModel):
    trigger: Trigger
    """Always: with classic preemption; InsufficientQuota: only while quota does not fit;
    QuotaFeasibleAndInsufficientTopology: only when quota fits but no topology placement exists."""
    preemptor_quota: Literal["Any", "WithinNominalQuota"] = crd_default("Any")
    """WithinNominalQuota: the rule applies only if the preemptor's ClusterQueue stays within its
    nominal quota with the preemptor admitted (YuniKorn's law 4)."""
    min_trigger_required_duration: Duration = crd_default("0s")
    """The rule applies only once its trigger has held this long, counted from when the workload
    became pending (creation or its last requeue)."""


class PreemptionRule(KubeModel):
    name: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
    preemptor_selector: LabelSelector | None = None
    """Labels the preemptor must carry for the rule to apply; unset matches every preemptor."""
    preemptor_priority_class_selector: PriorityClassSelector | None = None
    activation_policy: ActivationPolicy
    candidate_selectors: Annotated[
        list[CandidateSelector] | None, Field(max_length=32, json_schema_extra=LIST_ATOMIC)
    ] = None


OrderingField = Literal[
    "Priority",
    "AdmissionTimestamp",
    "ClusterQueueDRS",
    "IsOtherCQ",
    "IsOtherCohort",
    "IsDRSLessThanInitialShare",
    "IsDRSLessThanOrEqualToFinalShare",
    "LocalQueueDRS",
]
OrderingDirection = Literal["Ascending", "Descending"]


class CandidateOrder(KubeModel):
    """One key of the candidate order. Beyond Kueue v0.19/v0.20: the API of its future-work
    proposal (KEP-13396 "Configurable Candidate Ordering")."""

    ordering_field: OrderingField
    """Priority: effective priority (with any boost); Ascending lowest first.
    AdmissionTimestamp: when quota was reserved (none yet counts as now); Ascending oldest first
    (FIFO), Descending newest first (LIFO, as classic preemption).
    ClusterQueueDRS: the Dominant Resource Share of the candidate's ClusterQueue as the victims
    chosen so far leave it; Ascending lower share first. Computed as fair sharing computes it
    (weight 1 unless set), also with fair sharing off.
    IsOtherCQ: Ascending puts the preemptor's own ClusterQueue first, Descending the others first.
    IsOtherCohort: Ascending puts ClusterQueues of the preemptor's direct Cohort first (a
    ClusterQueue without a Cohort shares one only with itself).
    IsDRSLessThanInitialShare, IsDRSLessThanOrEqualToFinalShare: Ascending puts first the
    candidates that fair preemption strategy would let the preemptor take (their ClusterQueue is
    above its initial, or final, share compared with the preemptor's); shares as fair preemption
    computes them, also with fair sharing off; the preemptor's own ClusterQueue counts as fair,
    as fair preemption takes from it without comparing shares.
    LocalQueueDRS: the candidate's LocalQueue, its largest use of a resource as a share of its
    ClusterQueue's nominal quota, as the victims chosen so far leave it; Ascending lower first.
    Current usage, weight 1: Kueue's admission fair sharing (decayed usage) is not modelled."""
    direction: OrderingDirection = crd_default("Ascending")


class PreemptionConfigSpec(KubeModel):
    rules: Annotated[list[PreemptionRule] | None, Field(max_length=64, json_schema_extra=list_map("name"))] = None
    ordering: Annotated[
        list[CandidateOrder] | None,
        Field(
            max_length=8,
            json_schema_extra={
                **LIST_ATOMIC,
                **cel(
                    (
                        "self.all(x, self.exists_one(y, y.orderingField == x.orderingField))",
                        "orderingField must be unique",
                    )
                ),
            },
        ),
    ] = None
    """The order in which this config's candidates are taken: keys compared in turn; workloads
    already being evicted always first, the UID last. Unset or empty: the classic order."""


class PreemptionConfigStatus(KubeModel):
    """Written by the operator (beyond Kueue): whether the config can be used, by whom, and whether
    lint finds workloads that can evict each other in turn (conditions Valid, FlapFree, Lint)."""

    conditions: Conditions = None
    rule_count: NonNegativeInt32 | None = None
    cluster_queues: Annotated[list[str] | None, Field(json_schema_extra=LIST_SET)] = None
    """The ClusterQueues whose annotation names this config."""


class PreemptionConfig(TopLevel):
    """Rules that decide when preemption may happen and which workloads it may take."""

    crd: ClassVar[CRDInfo] = CRDInfo(
        kind="PreemptionConfig",
        plural="preemptionconfigs",
        singular="preemptionconfig",
        scope="Cluster",
        version=VERSION,
        short_names=("preempcfg",),
        printer_columns=(
            PrinterColumn("Rules", "integer", ".status.ruleCount", "Number of rules"),
            PrinterColumn(
                "Valid", "string", '.status.conditions[?(@.type=="Valid")].status', "Whether the rules build"
            ),
            PrinterColumn(
                "FlapFree",
                "string",
                '.status.conditions[?(@.type=="FlapFree")].status',
                "Whether no workloads of its queues can evict each other in turn (the operator runs lint)",
            ),
            PrinterColumn("ClusterQueues", "string", ".status.clusterQueues", "ClusterQueues using it", priority=1),
        ),
    )

    spec: PreemptionConfigSpec | None = None
    status: PreemptionConfigStatus | None = None

    @property
    def rules(self) -> list[PreemptionRule]:
        return list(self.spec.rules or []) if self.spec else []

    @property
    def ordering(self) -> list[CandidateOrder]:
        return list(self.spec.ordering or []) if self.spec else []
