"""Issue 14: the batch/v1 Job integration's steps, as Kueue v0.19.2's job reconciler takes them
(pkg/controller/jobframework/reconciler.go, pkg/controller/jobs/job/job_controller.go): the
Workload made for a Job, start with the flavor's node labels, stop on eviction in three patches,
quota given back only once no pod is left, finish, and the Workload following a changed Job."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from preemption_operator.engine import changes
from preemption_operator.engine.topology_assignment import decode_assignment
from preemption_operator.jobs.batch_job import STOPPING_ANNOTATION, BatchJob
from preemption_operator.jobs.framework import JobPatch
from preemption_operator.jobs.reconciler import (
    ComposeError,
    CreateWorkload,
    DeleteWorkload,
    Flavor,
    PatchJob,
    Settings,
    UpdateWorkload,
    WriteWorkloadStatus,
    plan,
)
from unit.fake_api import merge

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
FLAVORS = {"on-demand": Flavor({"instance-type": "on-demand"}, ({"key": "spot", "operator": "Exists"},))}
PRIORITIES = {("WorkloadPriorityClass", "high"): 1000, ("PriorityClass", "batch-low"): 10}


def priority(kind: str, name: str) -> int | None:
    return PRIORITIES.get((kind, name))


def job(
    name: str = "research",
    *,
    queue: str | None = "team-a",
    parallelism: int = 3,
    completions: int | None = None,
    suspend: bool = True,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    all_labels = dict(labels or {})
    if queue is not None:
        all_labels["kueue.x-k8s.io/queue-name"] = queue
    pod_spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
        "restartPolicy": "Never",
    }
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    spec: dict[str, Any] = {
        "parallelism": parallelism,
        "suspend": suspend,
        "template": {
            "metadata": {"labels": {"batch.kubernetes.io/job-name": name, "controller-uid": "u-" + name}},
            "spec": pod_spec,
        },
    }
    if completions is not None:
        spec["completions"] = completions
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": "u-" + name,
            "resourceVersion": "7",
            "labels": all_labels,
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
        "status": dict(status or {}),
    }


def created(body: dict[str, Any]) -> dict[str, Any]:
    step = plan(BatchJob(body), None, FLAVORS, NOW, priority=priority)
    assert isinstance(step, CreateWorkload)
    return step.body


def condition(kind: str, status: str = "True", reason: str = "", message: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason or kind,
        "message": message,
        "lastTransitionTime": "2026-12-01T11:00:00Z",
    }


def admitted(workload: dict[str, Any], count: int | None = None, cq: str = "cq-a") -> dict[str, Any]:
    out = copy.deepcopy(workload)
    psa: dict[str, Any] = {"name": "main", "flavors": {"cpu": "on-demand"}}
    if count is not None:
        psa["count"] = count
    out["status"] = {
        "admission": {"clusterQueue": cq, "podSetAssignments": [psa]},
        "conditions": [condition("QuotaReserved"), condition("Admitted")],
    }
    return out


def evicted(
    workload: dict[str, Any], message: str = "Preempted to accommodate a workload (UID: u-hero)"
) -> dict[str, Any]:
    out = copy.deepcopy(workload)
    out["status"]["conditions"].append(condition("Evicted", reason="Preempted", message=message))
    return out


def patched(body: dict[str, Any], patches: tuple[JobPatch, ...]) -> dict[str, Any]:
    """The job after the API applied the merge patches (RFC 7386, as the FakeApi applies them)."""
    out = copy.deepcopy(body)
    for patch in patches:
        out = merge(out, dict(patch.body))
    return out


# -- the Workload made for a Job ---------------------------------------------------------------


def test_a_job_without_a_queue_label_is_left_alone() -> None:
    assert plan(BatchJob(job(queue=None, suspend=False)), None, FLAVORS, NOW) is None


def test_a_queued_job_gets_a_workload_named_and_owned_as_kueue_makes_it() -> None:
    body = created(job(labels={"team": "research", "tier": "2"}))
    meta = body["metadata"]
    assert meta["name"].startswith("job-research-") and len(meta["name"]) == len("job-research-") + 5
    assert meta["namespace"] == "default"
    assert meta["labels"] == {"kueue.x-k8s.io/job-uid": "u-research"}  # labelKeysToCopy is empty by default
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "research",
            "uid": "u-research",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    (pod_set,) = body["spec"]["podSets"]
    assert pod_set["name"] == "main" and pod_set["count"] == 3 and "minCount" not in pod_set
    # The job controller's own labels are left out of the Workload's copy, as Kueue does.
    assert pod_set["template"]["metadata"]["labels"] == {"batch.kubernetes.io/job-name": "research"}
    assert body["spec"]["queueName"] == "team-a"
    assert "priorityClassRef" not in body["spec"]


def test_the_created_workload_event_names_it() -> None:
    step = plan(BatchJob(job()), None, FLAVORS, NOW)
    assert isinstance(step, CreateWorkload)
    assert step.event.reason == "CreatedWorkload"
    assert step.event.message == f"Created Workload: default/{step.body['metadata']['name']}"


def test_labels_named_in_the_setting_reach_the_workload() -> None:
    step = plan(
        BatchJob(job(labels={"team": "research", "tier": "2"})), None, FLAVORS, NOW, Settings(("team", "absent"))
    )
    assert isinstance(step, CreateWorkload)
    assert step.body["metadata"]["labels"] == {"team": "research", "kueue.x-k8s.io/job-uid": "u-research"}


def test_count_is_parallelism_capped_by_completions_and_min_parallelism_allows_partial_admission() -> None:
    assert created(job(parallelism=4, completions=2))["spec"]["podSets"][0]["count"] == 2
    pod_set = created(job(parallelism=4, annotations={"kueue.x-k8s.io/job-min-parallelism": "2"}))["spec"]["podSets"][0]
    assert pod_set["count"] == 4 and pod_set["minCount"] == 2


def test_priority_comes_from_the_workload_priority_class_label_first_then_the_pods_class() -> None:
    body = job(labels={"kueue.x-k8s.io/priority-class": "high"})
    body["spec"]["template"]["spec"]["priorityClassName"] = "batch-low"
    spec = created(body)["spec"]
    assert spec["priorityClassRef"] == {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}
    assert spec["priority"] == 1000
    del body["metadata"]["labels"]["kueue.x-k8s.io/priority-class"]
    spec = created(body)["spec"]
    assert spec["priorityClassRef"] == {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "batch-low"}
    assert spec["priority"] == 10


def test_a_missing_priority_class_is_an_error_naming_it() -> None:
    with pytest.raises(ComposeError, match="WorkloadPriorityClass 'nope' not found"):
        plan(BatchJob(job(labels={"kueue.x-k8s.io/priority-class": "nope"})), None, FLAVORS, NOW, priority=priority)


def test_a_running_job_without_a_workload_is_stopped_first_and_waits_for_its_pods() -> None:
    step = plan(BatchJob(job(suspend=False, status={"active": 2})), None, FLAVORS, NOW)
    assert isinstance(step, PatchJob)
    assert step.event is not None and step.event.message == "Missing Workload; unable to restore pod templates"
    assert patched(job(suspend=False), step.patches)["spec"]["suspend"] is True
    assert plan(BatchJob(job(suspend=True, status={"active": 2})), None, FLAVORS, NOW) is None


# -- start ------------------------------------------------------------------------------------


def test_admission_starts_the_job_with_the_flavors_node_labels_and_tolerations() -> None:
    body = job(node_selector={"zone": "a"})
    workload = admitted(created(body))
    step = plan(BatchJob(body), workload, FLAVORS, NOW)
    assert isinstance(step, PatchJob)
    assert step.event is not None and (step.event.reason, step.event.message) == (
        "Started",
        "Admitted by clusterQueue cq-a",
    )
    after = patched(body, step.patches)
    assert after["spec"]["suspend"] is False
    pod = after["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"zone": "a", "instance-type": "on-demand"}
    assert pod["tolerations"] == [{"key": "spot", "operator": "Exists"}]
    labels = after["spec"]["template"]["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/podset"] == "main"
    assert labels["kueue.x-k8s.io/local-queue-name"] == "team-a"
    assert labels["kueue.x-k8s.io/cluster-queue-name"] == "cq-a"
    assert after["spec"]["template"]["metadata"]["annotations"] == {
        "kueue.x-k8s.io/workload": workload["metadata"]["name"]
    }
    assert after["spec"]["parallelism"] == 3  # not partial: untouched


def test_partial_admission_shrinks_parallelism_and_stopping_restores_it() -> None:
    body = job(parallelism=4, annotations={"kueue.x-k8s.io/job-min-parallelism": "2"})
    workload = admitted(created(body), count=2)
    step = plan(BatchJob(body), workload, FLAVORS, NOW)
    assert isinstance(step, PatchJob)
    running = patched(body, step.patches)
    assert running["spec"]["parallelism"] == 2
    running["status"] = {"active": 2, "startTime": "2026-12-01T11:00:00Z"}
    # Kueue compares a reserved Workload with its admitted counts: still the same job.
    assert plan(BatchJob(running), workload, FLAVORS, NOW) is None
    stop = plan(BatchJob(running), evicted(workload), FLAVORS, NOW)
    assert isinstance(stop, PatchJob)
    assert patched(running, stop.patches)["spec"]["parallelism"] == 4


def test_a_merge_conflict_with_the_jobs_own_node_selector_is_an_error() -> None:
    body = job(node_selector={"instance-type": "spot"})
    with pytest.raises(ValueError, match="conflict for nodeSelector: instance-type"):
        plan(BatchJob(body), admitted(created(body)), FLAVORS, NOW)


def test_a_running_admitted_job_needs_nothing() -> None:
    body = job()
    workload = admitted(created(body))
    step = plan(BatchJob(body), workload, FLAVORS, NOW)
    assert isinstance(step, PatchJob)
    assert plan(BatchJob(patched(body, step.patches)), workload, FLAVORS, NOW) is None


# -- stop and give the quota back --------------------------------------------------------------


def running(body: dict[str, Any], workload: dict[str, Any]) -> dict[str, Any]:
    step = plan(BatchJob(body), workload, FLAVORS, NOW)
    assert isinstance(step, PatchJob)
    out = patched(body, step.patches)
    out["status"] = {"active": 3, "startTime": "2026-12-01T11:00:00Z"}
    return out


def test_eviction_stops_the_job_in_kueues_three_patches() -> None:
    body = job(node_selector={"zone": "a"})
    workload = admitted(created(body))
    started = running(body, workload)
    step = plan(BatchJob(started), evicted(workload, message="Preempted by default/hero"), FLAVORS, NOW)
    assert isinstance(step, PatchJob)
    assert step.event is not None and (step.event.reason, step.event.message) == (
        "Stopped",
        "Preempted by default/hero",
    )
    # And under the eviction's reason, with the Preempted condition's words when there is one.
    assert step.also is not None and (step.also.reason, step.also.message) == ("Preempted", "Preempted by default/hero")
    preempted = evicted(workload, message="Preempted by default/hero")
    preempted["status"]["conditions"].append(
        condition(
            "Preempted",
            reason="ConfigurablePreemption",
            message="Preempted by default/hero because of preemption config c rule r/0",
        )
    )
    also = plan(BatchJob(started), preempted, FLAVORS, NOW)
    assert isinstance(also, PatchJob) and also.also is not None
    assert also.also.message == "Preempted by default/hero because of preemption config c rule r/0"
    suspend, start_time, restore = step.patches
    assert suspend.body == {"metadata": {"annotations": {STOPPING_ANNOTATION: "true"}}, "spec": {"suspend": True}}
    assert start_time.status and start_time.body == {"status": {"startTime": None}}
    after = patched(started, (suspend, restore))
    assert STOPPING_ANNOTATION not in after["metadata"]["annotations"]
    pod = after["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"zone": "a"} and "tolerations" not in pod
    assert after["spec"]["template"]["metadata"]["labels"] == {
        "batch.kubernetes.io/job-name": "research",
        "controller-uid": "u-research",  # the job controller's label keeps its value
    }
    assert (
        "annotations" not in after["spec"]["template"]["metadata"]
        or not after["spec"]["template"]["metadata"]["annotations"]
    )


def test_a_stop_cut_short_is_finished_without_a_second_stopped_event() -> None:
    body = job()
    workload = evicted(admitted(created(body)))
    half = running(body, admitted(created(body)))
    half["spec"]["suspend"] = True
    half["metadata"]["annotations"][STOPPING_ANNOTATION] = "true"
    step = plan(BatchJob(half), workload, FLAVORS, NOW)
    assert isinstance(step, PatchJob) and step.event is None
    assert [p.status for p in step.patches] == [True, False]  # start time, then restore


def test_quota_is_given_back_only_once_no_pod_is_left() -> None:
    body = job()
    workload = evicted(admitted(created(body)))
    stopped = copy.deepcopy(body)
    for status in ({"active": 1}, {"active": 0, "terminating": 2}):
        stopped["status"] = status
        assert plan(BatchJob(stopped), workload, FLAVORS, NOW) is None, status
    stopped["status"] = {"active": 0, "terminating": 0}
    step = plan(BatchJob(stopped), workload, FLAVORS, NOW)
    assert isinstance(step, WriteWorkloadStatus) and step.event is None
    new = step.compute(workload)
    assert new is not None and "admission" not in new
    kinds = {c["type"]: c for c in new["conditions"]}
    assert kinds["QuotaReserved"]["status"] == "False"
    assert kinds["Requeued"]["status"] == "True" and kinds["Requeued"]["reason"] == "Preempted"
    assert kinds["Evicted"]["status"] == "True"  # left as it is until admitted again
    assert step.compute({**workload, "status": new}) is None  # given back once


def test_a_job_running_without_admission_is_stopped() -> None:
    body = job(suspend=False)
    workload = created(job())
    step = plan(BatchJob(body), workload, FLAVORS, NOW)
    assert isinstance(step, PatchJob)
    assert step.event is not None and (step.event.reason, step.event.message) == (
        "Stopped",
        "Not admitted by cluster queue",
    )


# -- finish -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "message", "reason"),
    [("Complete", "", "Succeeded"), ("Failed", "Job has reached the specified backoff limit", "Failed")],
)
def test_a_finished_job_finishes_its_workload(kind: str, message: str, reason: str) -> None:
    body = job(suspend=False, status={"conditions": [condition(kind, message=message)]})
    workload = admitted(created(job()))
    step = plan(BatchJob(body), workload, FLAVORS, NOW)
    assert isinstance(step, WriteWorkloadStatus)
    assert step.event is not None and step.event.reason == "FinishedWorkload"
    assert step.event.message == f"Workload 'default/{workload['metadata']['name']}' is declared finished"
    new = step.compute(workload)
    assert new is not None
    finished = next(c for c in new["conditions"] if c["type"] == "Finished")
    assert (finished["status"], finished["reason"], finished["message"]) == ("True", reason, message)
    assert plan(BatchJob(body), {**workload, "status": new}, FLAVORS, NOW) is None


# -- the Workload follows the Job ---------------------------------------------------------------


def test_a_suspended_job_changed_before_admission_updates_its_workload() -> None:
    body = job()
    workload = created(body)
    body["spec"]["parallelism"] = 5
    step = plan(BatchJob(body), workload, FLAVORS, NOW)
    assert isinstance(step, UpdateWorkload)
    assert step.spec["podSets"][0]["count"] == 5
    assert (
        step.event.message == f"Updated not matching Workload for suspended job: default/{workload['metadata']['name']}"
    )


def test_a_reserved_workload_that_no_longer_matches_is_deleted() -> None:
    body = job()
    workload = admitted(created(body))
    body["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:2"
    step = plan(BatchJob(body), workload, FLAVORS, NOW)
    assert isinstance(step, DeleteWorkload)
    assert step.event.message == f"Deleted not matching Workload: default/{workload['metadata']['name']}"


def test_a_queue_changed_while_suspended_moves_the_workload() -> None:
    body = job()
    workload = created(body)
    body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team-b"
    step = plan(BatchJob(body), workload, FLAVORS, NOW)
    assert isinstance(step, UpdateWorkload) and step.spec["queueName"] == "team-b"


MAX_EXEC = "kueue.x-k8s.io/max-exec-time-seconds"


def test_a_max_exec_time_label_changed_while_suspended_updates_the_workload() -> None:
    """Kueue's EquivalentToWorkload compares spec.maximumExecutionTimeSeconds with the label:
    set, changed or removed on a suspended job, the Workload follows."""
    body = job(labels={MAX_EXEC: "600"})
    workload = created(body)
    assert workload["spec"]["maximumExecutionTimeSeconds"] == 600
    assert not isinstance(plan(BatchJob(body), workload, FLAVORS, NOW), UpdateWorkload)  # it matches
    body["metadata"]["labels"][MAX_EXEC] = "60"
    step = plan(BatchJob(body), workload, FLAVORS, NOW)
    assert isinstance(step, UpdateWorkload) and step.spec["maximumExecutionTimeSeconds"] == 60
    del body["metadata"]["labels"][MAX_EXEC]
    step = plan(BatchJob(body), workload, FLAVORS, NOW)
    assert isinstance(step, UpdateWorkload) and "maximumExecutionTimeSeconds" not in step.spec


def test_a_max_exec_time_label_changed_after_reservation_replaces_the_workload() -> None:
    body = job(labels={MAX_EXEC: "600"})
    workload = admitted(created(body))
    body["metadata"]["labels"][MAX_EXEC] = "60"
    assert isinstance(plan(BatchJob(body), workload, FLAVORS, NOW), DeleteWorkload)


# -- the engine leaves a job's quota to its job --------------------------------------------------


def test_a_jobs_victim_keeps_its_quota_until_its_job_has_stopped() -> None:
    from builders import cluster_queue, one_cycle, scenario, workload

    owned = workload("victim", priority=-1, cpu=4).admitted("standalone").obj()
    owned["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "victim", "uid": "u-victim", "controller": True}
    ]
    objects = scenario(
        [cluster_queue("standalone", 4, within="LowerPriority")],
        owned,
        workload("hero", queue="standalone", priority=10, cpu=4),
    )
    result = one_cycle(objects)
    assert [p.victim.name for p in result.preempted] == ["victim"]
    assert result.preempted[0].victim.owner == ("batch/v1", "Job")
    (jobs_change,) = [
        c for c in changes.status_changes(result, NOW, lambda wl: wl.owner is not None) if c.action == changes.PREEMPTED
    ]
    new = jobs_change.compute(owned)
    assert new is not None
    kinds = {c["type"]: c["status"] for c in new["conditions"]}
    assert kinds["Evicted"] == kinds["Preempted"] == kinds["QuotaReserved"] == "True"
    assert new["admission"]["clusterQueue"] == "standalone"
    # Without a job to stop (simulate, bare Workloads) the quota comes back with the eviction.
    (bare,) = [c for c in changes.status_changes(result, NOW) if c.action == changes.PREEMPTED]
    assert "admission" not in (bare.compute(owned) or {})


# -- simulate reads queued Jobs ------------------------------------------------------------------


def test_simulate_reads_queued_jobs_as_their_workloads_and_lets_pending_yaml_arrive_last() -> None:
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from preemption_operator.cli import cli

    example = Path(__file__).resolve().parents[2] / "examples" / "hero-jobs"
    result = CliRunner().invoke(cli, ["simulate", str(example), "--output", "json", "--now", "2026-01-01T10:00:00Z"])
    assert result.exit_code == 0, result.output
    actions = json.loads(result.output)["actions"]
    preempted = [a for a in actions if a["action"] == "Preempted"]
    assert len(preempted) == 1 and preempted[0]["reason"] == "ConfigurablePreemption"
    assert preempted[0]["workload"].startswith("research/job-train-")
    assert preempted[0]["preemptor"].startswith("hero/job-hero-")
    admitted = [a["workload"].split("/")[1].rsplit("-", 1)[0] for a in actions if a["action"] == "Admitted"]
    # The research Jobs run first; the hero (pending.yaml) arrives after and gets in by preemption.
    assert admitted == ["job-evaluate", "job-train", "job-hero"]


def test_simulate_copies_the_job_labels_the_operator_would_copy() -> None:
    """examples/topology-defragmentation-jobs: its rule selects on the Workload label
    example.com/node-count, which only --label-keys-to-copy brings over from the Jobs, in
    `simulate` as in `run`. Without it no small Job is a candidate and the large one stays pending."""
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from preemption_operator.cli import cli

    example = str(Path(__file__).resolve().parents[2] / "examples" / "topology-defragmentation-jobs")

    def simulated(*flags: str) -> dict[str, Any]:
        result = CliRunner().invoke(cli, ["simulate", example, "--output", "json", *flags])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    copied = simulated("--label-keys-to-copy", "example.com/node-count")
    preempted = [a for a in copied["actions"] if a["action"] == "Preempted"]
    assert [(a["workload"].rsplit("-", 1)[0], a["reason"]) for a in preempted] == [
        ("training/job-small-a", "ConfigurablePreemption")
    ]
    large = {w["name"].rsplit("-", 1)[0]: w for w in copied["workloads"]}["job-large-training"]["status"]
    assert {c["type"]: c["status"] for c in large["conditions"]}.get("Admitted") == "True"
    (assigned,) = large["admission"]["podSetAssignments"]
    hosts = [values[HOST] for values, _ in decode_assignment(assigned["topologyAssignment"])]
    assert hosts == ["node-a1", "node-a2"]

    plain = simulated()
    assert not [a for a in plain["actions"] if a["action"] == "Preempted"]
    large = {w["name"].rsplit("-", 1)[0]: w for w in plain["workloads"]}["job-large-training"]["status"]
    assert "admission" not in large, large


# -- topology-aware scheduling -----------------------------------------------------------------

RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"


def tas_admitted(body: dict[str, Any], assignment: dict[str, Any]) -> dict[str, Any]:
    workload = admitted(created(body))
    workload["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"] = assignment
    return workload


def test_a_topology_annotation_becomes_the_pod_sets_topology_request() -> None:
    body = job()
    body["spec"]["template"]["metadata"]["annotations"] = {"kueue.x-k8s.io/podset-required-topology": RACK}
    (pod_set,) = created(body)["spec"]["podSets"]
    assert pod_set["topologyRequest"] == {"required": RACK, "podIndexLabel": "batch.kubernetes.io/job-completion-index"}
    assert "topologyRequest" not in created(job())["spec"]["podSets"][0]


def test_one_assigned_domain_pins_the_pods_with_a_node_selector() -> None:
    body = job()
    assignment = {
        "levels": [RACK, HOST],
        "slices": [
            {
                "domainCount": 1,
                "valuesPerLevel": [{"universal": "r1"}, {"universal": "n1"}],
                "podCounts": {"universal": 3},
            }
        ],
    }
    step = plan(BatchJob(body), tas_admitted(body, assignment), FLAVORS, NOW)
    assert isinstance(step, PatchJob)
    pod = patched(body, step.patches)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"instance-type": "on-demand", RACK: "r1", HOST: "n1"}
    assert "affinity" not in pod


def test_several_domains_become_required_node_affinity_joined_with_the_jobs_own() -> None:
    body = job()
    own = {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}
    body["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [own]}}
    }
    assignment = {
        "levels": [HOST],
        "slices": [
            {
                "domainCount": 2,
                "valuesPerLevel": [{"individual": {"prefix": "n", "roots": ["1", "2"]}}],
                "podCounts": {"individual": [2, 1]},
            }
        ],
    }
    workload = tas_admitted(body, assignment)
    step = plan(BatchJob(body), workload, FLAVORS, NOW)
    assert isinstance(step, PatchJob)
    started = patched(body, step.patches)
    terms = started["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [own["matchExpressions"][0], {"key": HOST, "operator": "In", "values": [value]}]}
        for value in ("n1", "n2")
    ]
    started["status"] = {"active": 3, "startTime": "2026-12-01T11:00:00Z"}
    stop = plan(BatchJob(started), evicted(workload), FLAVORS, NOW)
    assert isinstance(stop, PatchJob)
    restored = patched(started, stop.patches)
    assert restored["spec"]["template"]["spec"]["affinity"] == body["spec"]["template"]["spec"]["affinity"]


def test_stopping_takes_the_topology_affinity_away_again() -> None:
    body = job()
    assignment = {
        "levels": [HOST],
        "slices": [
            {
                "domainCount": 2,
                "valuesPerLevel": [{"individual": {"roots": ["n1", "n2"]}}],
                "podCounts": {"universal": 1},
            }
        ],
    }
    workload = tas_admitted(body, assignment)
    step = plan(BatchJob(body), workload, FLAVORS, NOW)
    assert isinstance(step, PatchJob)
    started = patched(body, step.patches)
    assert "affinity" in started["spec"]["template"]["spec"]
    stop = plan(BatchJob(started), evicted(workload), FLAVORS, NOW)
    assert isinstance(stop, PatchJob)
    assert "affinity" not in patched(started, stop.patches)["spec"]["template"]["spec"]
