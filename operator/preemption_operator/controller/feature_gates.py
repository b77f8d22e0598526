"""Kueue's feature gates (`--feature-gates Name=true,...`), accepted so that a migrating user's flags
still parse. What this operator does is not switched by them: where Kueue puts a behaviour behind
a gate, it is always on here (or, for the few listed, always off), and a gate set the other way
is named in a warning at start-up. An unknown name is refused, as Kueue refuses it."""

from __future__ import annotations

from collections.abc import Mapping

KUEUE_GATES: tuple[str, ...] = (
    "ConfigurablePreemptions",  # v0.20
    "AdmissionFairSharing",
    "AdmissionGatedBy",
    "AssignQueueLabelsForPods",
    "CleanupProvisioningRequestsOnEviction",
    "ConcurrentAdmission",
    "CustomMetricLabels",
    "DeferRayServiceFinalizationForRedisCleanup",
    "DisableWaitForPodsReady",
    "ElasticJobsViaWorkloadSlices",
    "ElasticJobsViaWorkloadSlicesWithTAS",
    "FailureRecoveryPolicy",
    "FairSharingPreemptWithinNominal",
    "FairSharingPrioritizeNonBorrowing",
    "FastQuotaReleaseInPodIntegration",
    "FinishOrphanedWorkloads",
    "FlavorFungibility",
    "FlavorFungibilityPreserveScanProgress",
    "HierarchicalCohorts",
    "KueueDRAIntegration",
    "KueueDRAIntegrationConsumableCapacity",
    "KueueDRAIntegrationExtendedResource",
    "KueueDRAIntegrationPartitionableDevices",
    "KueueDRARejectWorkloadsWhenDRADisabled",
    "LWSImmutableGroupSize",
    "LocalQueueMetrics",
    "ManagedJobsNamespaceSelectorAlwaysRespected",
    "MetricForWorkloadCreationLatency",
    "MetricsForCohorts",
    "MultiKueue",
    "MultiKueueAdaptersForCustomJobs",
    "MultiKueueAllowInsecureKubeconfigs",
    "MultiKueueClusterProfile",
    "MultiKueueIncrementalDispatcherConfig",
    "MultiKueueIncrementalDispatcherRespectConfigOrder",
    "MultiKueueKubeConfigPathValidation",
    "MultiKueueManagerQuotaAutomation",
    "MultiKueueOrchestratedPreemption",
    "MultiKueueRedoAdmissionOnEvictionInWorker",
    "MultiKueueRemoteSpecSync",
    "MultiKueueWaitForWorkloadAdmitted",
    "ObjectRetentionPolicies",
    "PartialAdmission",
    "PodIntegrationValidateGroupOwner",
    "PrioritizePreemptorWorkloads",
    "PriorityBoost",
    "PrioritySortingWithinCohort",
    "PropagateBatchJobLabelsToWorkload",
    "QuotaCheckStrategy",
    "ReclaimablePods",
    "RecomputeAssignmentUponPreemptionTargetsOverlap",
    "RejectUpdatesToCQWithInvalidOnFlavors",
    "RemoveFinalizersWithStrictPatch",
    "SchedulerLibraryIntegration",
    "SchedulerLongRequeueInterval",
    "SchedulerTimestampPreemptionBuffer",
    "SchedulingEquivalenceHashing",
    "ShortWorkloadNames",
    "SkipAncestorCheckForDeletedWorkloads",
    "SkipFinalizersForPodsSuspendedByParent",
    "SkipReassignmentForPodOwnedWorkloads",
    "SparkApplicationIntegration",
    "TASAssignmentsEncodingByHostnamePrefix",
    "TASBalancedPlacement",
    "TASCacheNodeMatchResults",
    "TASCacheTopologyTree",
    "TASCachingRemainingResources",
    "TASFailedNodeReplacement",
    "TASFailedNodeReplacementFailFast",
    "TASHandleOverlappingFlavors",
    "TASMultiLayerTopology",
    "TASProfileMixed",
    "TASRecomputeAssignmentWithinSchedulingCycle",
    "TASReplaceNodeDueToNotReadyOverFixedTime",
    "TASReplaceNodeOnNodeTaints",
    "TASReplaceNodeOnPodTermination",
    "TASRespectNodeAffinityPreferred",
    "TASValidateWorkloadSliceSize",
    "TLSOptions",
    "TopologyAwareScheduling",
    "UnadmittedWorkloadsExplicitStatus",
    "UnadmittedWorkloadsObservability",
    "ValidateRayAndSparkJobUpdates",
    "VectorizedResourceRequests",
    "VisibilityOnDemand",
    "WorkloadIdentifierAnnotations",
    "WorkloadPriorityClassDefaulting",
    "WorkloadRequestUseMergePatch",
    "WorkloadValidateResourcesAreNonNegative",
    "WorkloadValidationForPodSetMetadata",
)
"""Kueue v0.19.2's gates (pkg/features), and ConfigurablePreemptions from v0.20."""

ALWAYS_ON: Mapping[str, str] = {
    "ConfigurablePreemptions": "PreemptionConfig rules apply to every ClusterQueue that names one",
    "PartialAdmission": "partial admission (podSets[].minCount) is always on",
    "FlavorFungibility": "flavorFungibility is always honoured",
    "TopologyAwareScheduling": "topology-aware flavors are always placed",
    "HierarchicalCohorts": "Cohorts always form trees",
    "ReclaimablePods": "status.reclaimablePods always gives finished pods' quota back",
    "PriorityBoost": "the kueue.x-k8s.io/priority-boost annotation is always read",
    "SchedulingEquivalenceHashing": "workloads of the shape of one that failed to fit are always parked with it",
    "UnadmittedWorkloadsObservability": "pending reasons are always Kueue's granular ones",
    "ConcurrentAdmission": "spec.preemptionGates are always honoured",
    "MultiKueueOrchestratedPreemption": "spec.preemptionGates are always honoured",
    "FairSharingPreemptWithinNominal": "with --fair-sharing, a preemptor within its nominal quota always reclaims",
    "FairSharingPrioritizeNonBorrowing": "with --fair-sharing, heads that do not borrow always go first",
}
ALWAYS_OFF: Mapping[str, str] = {
    "FlavorFungibilityPreserveScanProgress": "every flavor search starts at the first flavor",
}
APPLIED: frozenset[str] = frozenset({"DisableWaitForPodsReady", "PrioritizePreemptorWorkloads"})
"""Gates that switch something here, as in Kueue (DisableWaitForPodsReady turns waitForPodsReady
off whatever the Configuration file says; PrioritizePreemptorWorkloads=false orders a cycle as
Kueue does by default, see `prioritize_preemptors`)."""


def prioritize_preemptors(gates: Mapping[str, bool]) -> bool:
    """Kueue's PrioritizePreemptorWorkloads as this operator applies it: on unless set false
    (off by default in Kueue v0.19.2): a workload waiting for its victims goes first, so the
    quota they free is its own."""
    return gates.get("PrioritizePreemptorWorkloads", True)


_BOOLS = {v: True for v in ("1", "t", "T", "TRUE", "true", "True")} | {
    v: False for v in ("0", "f", "F", "FALSE", "false", "False")
}
"""What Go's strconv.ParseBool accepts."""


def parse_feature_gates(text: str) -> dict[str, bool]:
    """`Name=true,Other=false` as Kubernetes components read it; ValueError says what is wrong."""
    gates: dict[str, bool] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep:
            raise ValueError(f"missing bool value for {name}")
        if name not in KUEUE_GATES:
            raise ValueError(f"unrecognized feature gate: {name}")
        raw = value.strip()
        if raw not in _BOOLS:
            raise ValueError(f'invalid value of {name}={raw}, err: strconv.ParseBool: parsing "{raw}": invalid syntax')
        gates[name] = _BOOLS[raw]
    return gates


def gate_warnings(gates: Mapping[str, bool]) -> list[str]:
    """What a gate set the other way than this operator works does not do."""
    out = []
    for name, enabled in sorted(gates.items()):
        if name in ALWAYS_ON and not enabled:
            out.append(f"feature gate {name}=false has no effect: {ALWAYS_ON[name]}")
        elif name in ALWAYS_OFF and enabled:
            out.append(f"feature gate {name}=true has no effect: {ALWAYS_OFF[name]}")
        elif name not in ALWAYS_ON and name not in ALWAYS_OFF and name not in APPLIED:
            out.append(f"feature gate {name} has no effect here: this operator does not implement it")
    return out
