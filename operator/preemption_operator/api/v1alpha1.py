"""kueue.x-k8s.io/v1alpha1: PreemptionConfig, Kueue's Configurable Preemptions API."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, Strict

from .meta import (
    LIST_ATOMIC,
    LIST_SET,
    Conditions,
    CRDInfo,
    Int32,
    KubeModel,
    LabelSelector,
    PrinterColumn,
    TopLevel,
    cel,
    list_map,
)

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
    min_value: Annotated[Int32 | None, Field(ge=0)] = None
    max_value: Annotated[Int32 | None, Field(ge=0)] = None


class CandidateSelector(KubeModel):
    """Which admitted workloads a rule may preempt. Every field set here must match."""

    scope: Scope
    cluster_queue_selector: LabelSelector | None = None
    label_selector: LabelSelector | None = None
    numeric_labels: Annotated[
        list[NumericLabelConstraint] | None, Field(max_length=32, json_schema_extra=LIST_ATOMIC)
    ] = None
    priority: PriorityConstraint | None = None


class ActivationPolicy(KubeModel):
    trigger: Trigger
    """Always: with classic preemption; InsufficientQuota: only while quota does not fit;
    QuotaFeasibleAndInsufficientTopology: only when quota fits but no topology placement exists."""


class PreemptionRule(KubeModel):
    name: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
    preemptor_selector: LabelSelector | None = None
    """Labels the preemptor must carry for the rule to apply; unset matches every preemptor."""
    preemptor_priority_class_selector: PriorityClassSelector | None = None
    activation_policy: ActivationPolicy
    candidate_selectors: Annotated[
        list[CandidateSelector] | None, Field(max_length=32, json_schema_extra=LIST_ATOMIC)
    ] = None


class PreemptionConfigSpec(KubeModel):
    rules: Annotated[list[PreemptionRule] | None, Field(max_length=64, json_schema_extra=list_map("name"))] = None


class PreemptionConfigStatus(KubeModel):
    """Written by the operator (beyond Kueue): whether the config can be used, and by whom."""

    conditions: Conditions = None
    rule_count: Annotated[int | None, Strict(), Field(ge=0, json_schema_extra={"format": "int32"})] = None
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
            PrinterColumn("ClusterQueues", "string", ".status.clusterQueues", "ClusterQueues using it", priority=1),
        ),
    )

    spec: PreemptionConfigSpec | None = None
    status: PreemptionConfigStatus | None = None

    @property
    def rules(self) -> list[PreemptionRule]:
        return list(self.spec.rules or []) if self.spec else []
