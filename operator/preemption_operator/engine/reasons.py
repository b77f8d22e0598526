"""The preemption reasons Kueue writes on a victim's Preempted condition, and how its messages
name them: what a search decides and what the windows of PreemptionLimits read back."""

from __future__ import annotations

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
