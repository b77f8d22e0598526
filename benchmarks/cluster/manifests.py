"""The objects every side gets: the same queues, flavor, topology and priorities; the rules side
adds its PreemptionConfigs. And each trace job as a batch/v1 Job.

The queues (one Cohort `org`): ClusterQueues `team-a` and `team-b` share the cluster less one
rack, which is the nominal quota of `hero`; each may borrow what the others leave idle. Classic
preemption (Kueue's `spec.preemption`, identical on every side): a queue preempts its own
lower-priority work and reclaims its nominal quota from lower-priority work of queues that borrow
it; `hero` may also preempt lower-priority work of borrowing queues while it borrows itself.

What the rules side adds, which Kueue v0.19.2 cannot express:
- `hero-jobs` on `hero`: when quota is short, a hero may preempt any lower-priority work of the
  cohort, borrowing or not (a hero outranks everything);
- `topology-defragmentation` on every queue: when the quota fits but no rack has room, a job
  may preempt jobs spanning fewer nodes, of its priority or lower, in any queue, to free a rack.
"""

from __future__ import annotations

from typing import Any

from jobtrace import Shape, TraceJob

from preemption_operator.testing.cluster import BLOCK_LABEL, COMPLETE_AFTER, HOSTNAME_LABEL, RACK_LABEL

KUEUE = "kueue.x-k8s.io/v1beta2"
KUEUE_ALPHA = "kueue.x-k8s.io/v1alpha1"
GPU = "nvidia.com/gpu"
POOL_LABEL = "cloud.provider.com/node-group"
POOL = "gpu"
FLAVOR = "gpu"
TOPOLOGY = "gpu-topology"
COHORT = "org"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
NODE_COUNT_LABEL = "example.com/node-count"
CLASS_LABEL = "bench.preemption-operator/class"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
CONFIG_ANNOTATION = "kueue.x-k8s.io/preemption-config-name"
PRIORITIES = {"batch": 100, "standard": 1000, "hero": 100000}
NAMESPACES = ("team-a", "team-b", "hero")
GRACE_SECONDS = 2
"""A stopped Job's pods go this long after their deletion (the quota stays held meanwhile)."""
SIDES = ("kueue", "classic", "rules")


def _cluster_queue(name: str, gpus: int, preemption: dict[str, Any], config: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if config:
        meta["annotations"] = {CONFIG_ANNOTATION: config}
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": meta,
        "spec": {
            "cohortName": COHORT,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}},
            "queueingStrategy": "BestEffortFIFO",
            "preemption": preemption,
            "resourceGroups": [
                {
                    "coveredResources": [GPU],
                    "flavors": [{"name": FLAVOR, "resources": [{"name": GPU, "nominalQuota": gpus}]}],
                }
            ],
        },
    }


def hero_rules() -> dict[str, Any]:
    return {
        "name": "hero-preempts-lower-priority",
        "activationPolicy": {"trigger": "InsufficientQuota"},
        "candidateSelectors": [{"scope": "WithinCohortTree", "priority": {"mode": "Base", "comparison": "LessThan"}}],
    }


def defragmentation_rule() -> dict[str, Any]:
    return {
        "name": "evict-smaller-jobs-for-a-rack",
        "activationPolicy": {"trigger": "QuotaFeasibleAndInsufficientTopology"},
        "candidateSelectors": [
            {
                "scope": "AnyClusterQueue",
                "priority": {"mode": "Base", "comparison": "LessThanOrEqual"},
                "numericLabels": [{"key": NODE_COUNT_LABEL, "comparison": "LessThan", "fallbackValue": 0}],
            }
        ],
    }


def preemption_configs() -> list[dict[str, Any]]:
    def config(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "apiVersion": KUEUE_ALPHA,
            "kind": "PreemptionConfig",
            "metadata": {"name": name},
            "spec": {"rules": rules},
        }

    return [
        config("hero-jobs", [hero_rules(), defragmentation_rule()]),
        config("topology-defragmentation", [defragmentation_rule()]),
    ]


def queue_objects(shape: Shape, side: str) -> list[dict[str, Any]]:
    """Everything but the nodes and the Jobs, for `side` (one of SIDES)."""
    rules = side == "rules"
    hero_gpus = shape.nodes_per_rack * shape.gpus_per_node
    team_gpus = (shape.gpus - hero_gpus) // 2
    # Reclaim only from lower priorities: with `Any`, a team reclaiming its quota from a borrowing
    # hero and the hero taking it back would evict each other forever (the operator's lint says so).
    team_preemption = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "LowerPriority"}
    hero_preemption = {
        **team_preemption,
        "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": PRIORITIES["standard"]},
    }
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in NAMESPACES
    ]
    objects += [
        {
            "apiVersion": KUEUE,
            "kind": "Topology",
            "metadata": {"name": TOPOLOGY},
            "spec": {"levels": [{"nodeLabel": BLOCK_LABEL}, {"nodeLabel": RACK_LABEL}, {"nodeLabel": HOSTNAME_LABEL}]},
        },
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": {"name": FLAVOR},
            "spec": {"nodeLabels": {POOL_LABEL: POOL}, "topologyName": TOPOLOGY},
        },
        {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": COHORT}, "spec": {}},
    ]
    objects += [
        {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value}
        for name, value in PRIORITIES.items()
    ]
    if rules:
        objects += preemption_configs()
    objects += [
        _cluster_queue(team, team_gpus, team_preemption, "topology-defragmentation" if rules else None)
        for team in ("team-a", "team-b")
    ]
    objects.append(_cluster_queue("hero", hero_gpus, hero_preemption, "hero-jobs" if rules else None))
    objects += [
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": ns, "namespace": ns},
            "spec": {"clusterQueue": ns},
        }
        for ns in NAMESPACES
    ]
    return objects


def job_manifest(job: TraceJob) -> dict[str, Any]:
    """A suspended Job (no admission webhook is needed on any side) whose pods each request
    `gpus_per_pod` GPUs and succeed `runtime` seconds after they start (kwok's stage)."""
    annotations = {COMPLETE_AFTER: f"{job.runtime}s"}
    if job.topology:
        annotations[REQUIRED_TOPOLOGY] = job.topology
    gpus = {GPU: str(job.gpus_per_pod)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job.name,
            "namespace": job.queue,
            "labels": {
                QUEUE_LABEL: job.queue,
                PRIORITY_LABEL: job.priority,
                NODE_COUNT_LABEL: str(job.nodes),
                CLASS_LABEL: job.cls,
            },
        },
        "spec": {
            "suspend": True,
            "parallelism": job.pods,
            "completions": job.pods,
            "backoffLimit": 10,  # pods deleted by a stop must not fail the Job
            "template": {
                "metadata": {"annotations": annotations, "labels": {CLASS_LABEL: job.cls}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": GRACE_SECONDS,
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": dict(gpus), "limits": dict(gpus)},
                        }
                    ],
                },
            },
        },
    }
