"""Issue 14 end to end: batch/v1 Jobs queued, admitted, preempted and requeued on a control plane
with the real job controller (kube-controller-manager: job, garbage-collector and namespace
controllers). Jobs create pods, which stay Pending (no scheduler, no kubelet); suspending a Job
deletes them; tests finish Jobs by marking their pods Succeeded through the status subresource.

This module has a control plane of its own: the namespace and garbage-collector controllers
would change what the other e2e modules rely on (namespaces that never finish deleting)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from builders import CONFIG_ANNOTATION, KUEUE, NO_CLASSIC_PREEMPTION, lower_priority_config
from preemption_operator.testing.control_plane import (
    CONTROLLER_MANAGER,
    ControlPlane,
    free_port,
)
from preemption_operator.testing.operator_process import OperatorPool, wait_until
from preemption_operator.testing.workload_status import condition, is_true

from .conftest import _namespace_name, control_plane_fixture, in_ci
from .jobs import (
    POOL_LABEL,
    QUEUE_LABEL,
    batch_job,
    hold_pods,
    job,
    job_events,
    pods,
    priority_class,
    release_pod,
    succeed_pods,
    suspended,
    workload_of,
)
from .scenario import Scenario, WorkloadMonitor


@pytest.fixture(scope="module")
def job_plane(envtest_assets: Path) -> Iterator[ControlPlane]:
    if not os.access(envtest_assets / CONTROLLER_MANAGER, os.X_OK):
        problem = (
            f"{envtest_assets} has no {CONTROLLER_MANAGER}: run `export KUBEBUILDER_ASSETS=$(hack/setup-envtest.sh)`"
        )
        if not in_ci():
            pytest.skip(problem)
        pytest.fail(problem, pytrace=False)
    yield from control_plane_fixture(
        envtest_assets, "the e2e control plane with kube-controller-manager", controller_manager=True
    )


@pytest.fixture
def sc(job_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[Scenario]:
    name = _namespace_name(request.node.name)
    job_plane.kubectl("create", "namespace", name, check=True)
    scenario = Scenario(job_plane, name)
    try:
        yield scenario
    finally:
        # Nothing of this test may hold pods back, or its namespace would never go.
        for pod in pods(scenario, everything=True):
            release_pod(scenario, pod["metadata"]["name"])
        scenario.cleanup()
        job_plane.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


@pytest.fixture
def operators(job_plane: ControlPlane, sc: Scenario, tmp_path: Path) -> Iterator[OperatorPool]:
    pool = OperatorPool(job_plane, tmp_path)
    try:
        yield pool
    finally:
        pool.close()


def hero_setup(sc: Scenario) -> tuple[str, str, str, str]:
    """The specification's hero scenario on Jobs: a team ClusterQueue of 4 cpu and a hero
    ClusterQueue of none in one cohort, and a PreemptionConfig that lets the hero preempt
    lower-priority work anywhere in the cohort. Returns (team CQ, team LQ, hero CQ, hero LQ)."""
    cohort, config = sc.name("org"), sc.name("hero-config")
    sc.apply(
        priority_class(sc.name("low"), 100),
        priority_class(sc.name("standard"), 1000),
        priority_class(sc.name("hero"), 100000),
        {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": cohort}, "spec": {}},
        lower_priority_config(config),
    )
    team_cq, team = sc.queue("team", 4, cohort=cohort)
    hero_cq, hero = sc.queue(
        "hero", 0, cohort=cohort, preemption=NO_CLASSIC_PREEMPTION, annotations={CONFIG_ANNOTATION: config}
    )
    flavor = sc.flavor_object()  # after the queues: sc.queue applies a bare one
    flavor["spec"] = {"nodeLabels": {POOL_LABEL: "batch"}}
    sc.apply(flavor)
    return team_cq, team, hero_cq, hero


# ---- the tests -------------------------------------------------------------------------------------


def test_a_job_is_preempted_stops_its_pods_and_comes_back(sc: Scenario, operators: OperatorPool) -> None:
    """The hero scenario on Jobs: the research Job runs on its flavor's nodes; the hero Job
    preempts it through the PreemptionConfig rule; the research Job is suspended and its quota
    comes back only once its pods are gone; the hero Job then starts; when it finishes, the
    research Job is admitted again and resumes."""
    ns = sc.namespace
    team_cq, team, hero_cq, hero = hero_setup(sc)
    op = operators.start()
    with WorkloadMonitor(sc.cluster, ns) as monitor:
        sc.apply(
            batch_job("research", ns, team, cpu="1", parallelism=2, priority_class=sc.name("low")),
            batch_job("standard", ns, team, cpu="2", priority_class=sc.name("standard")),
        )

        def running(name: str, count: int) -> dict[str, Any]:
            current = job(sc, name)
            assert not suspended(current), f"{name} still suspended"
            assert len(pods(sc, name)) == count, f"{name} has {len(pods(sc, name))} pods"
            return current

        research = wait_until(lambda: running("research", 2), what="research running", diagnostics=op.tail)
        wait_until(lambda: running("standard", 1), what="standard running", diagnostics=op.tail)
        research_wl = workload_of(sc, "research")
        assert research_wl["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == research["metadata"]["uid"]
        owner = research_wl["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("Job", "research", True)
        assert research_wl["spec"]["priority"] == 100
        # Started on the flavor's nodes, with Kueue's pod labels.
        template = research["spec"]["template"]
        assert template["spec"]["nodeSelector"] == {POOL_LABEL: "batch"}
        assert template["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "main"
        assert all(p["spec"].get("nodeSelector") == {POOL_LABEL: "batch"} for p in pods(sc, "research"))

        # The research pods will linger while being deleted: the quota must wait for them.
        hold_pods(sc, "research")
        sc.apply(batch_job("hero", ns, hero, cpu="2", priority_class=sc.name("hero")))

        def stopping() -> dict[str, Any]:
            current = job(sc, "research")
            assert suspended(current), "research not suspended yet"
            assert "kueue.x-k8s.io/stopping" not in current["metadata"].get("annotations", {}), "not restored yet"
            assert all(p["metadata"].get("deletionTimestamp") for p in pods(sc, "research")), "pods not deleted yet"
            return current

        stopped = wait_until(stopping, what="research suspended, its pods being deleted", diagnostics=op.tail)
        # Restored as it was before it ran.
        assert "nodeSelector" not in stopped["spec"]["template"]["spec"]
        wl = workload_of(sc, "research")
        assert is_true(wl, "Evicted") and is_true(wl, "QuotaReserved"), wl["status"]["conditions"]
        assert suspended(job(sc, "hero")), "the hero started before its victim's pods were gone"
        assert not is_true(workload_of(sc, "hero"), "QuotaReserved")

        for pod in pods(sc, "research"):
            release_pod(sc, pod["metadata"]["name"])
        wait_until(lambda: not pods(sc, "research"), what="research's pods gone", diagnostics=op.tail)
        wait_until(lambda: running("hero", 1), what="hero running", diagnostics=op.tail)
        wl = workload_of(sc, "research")
        assert not is_true(wl, "QuotaReserved") and "admission" not in wl["status"]
        requeued = condition(wl, "Requeued") or {}
        assert (requeued.get("status"), requeued.get("reason")) == ("True", "Preempted")
        assert workload_of(sc, "hero")["status"]["admission"]["clusterQueue"] == hero_cq

        # `kubectl describe job` tells what happened to it, and `describe workload` why.
        def told() -> dict[str, dict[str, str]]:
            events = {e["Reason"]: e for e in job_events(sc, "research")}
            # Ours (Kueue's reasons), and the job controller's own.
            assert {"CreatedWorkload", "Started", "Stopped", "Preempted", "Suspended", "Resumed"} <= set(events), events
            return events

        events = wait_until(told, what="the research Job's Events", diagnostics=op.tail)
        message = f"Preempted by {ns}/{workload_of(sc, 'hero')['metadata']['name']} because of preemption config"
        assert events["Stopped"]["Message"].startswith(message), events["Stopped"]
        assert events["Preempted"]["Message"].startswith(message), events["Preempted"]
        assert events["Started"]["Message"] == f"Admitted by clusterQueue {team_cq}"
        assert events["Started"]["From"] == "preemption-operator"

        # The hero finishes: its Workload is Finished, the research Job runs again.
        succeed_pods(sc, "hero")
        wait_until(lambda: is_true(workload_of(sc, "hero"), "Finished"), what="hero finished", diagnostics=op.tail)
        finished = condition(workload_of(sc, "hero"), "Finished") or {}
        assert finished.get("reason") == "Succeeded"
        wait_until(lambda: running("research", 2), what="research running again", diagnostics=op.tail)
        assert is_true(workload_of(sc, "research"), "Admitted")

    assert not monitor.errors, monitor.errors
    assert monitor.max_admitted_cpu(team_cq, hero_cq) <= 4, "the cohort was over-admitted at some point"
    research_name = workload_of(sc, "research")["metadata"]["name"]
    assert monitor.max_evictions(research_name) == 1
    standard_name = workload_of(sc, "standard")["metadata"]["name"]
    assert not monitor.ever_true(standard_name, "Evicted")


def test_partial_admission_shrinks_parallelism(sc: Scenario, operators: OperatorPool) -> None:
    ns = sc.namespace
    _, lq = sc.queue("main", 2)
    op = operators.start()
    sc.apply(batch_job("wide", ns, lq, cpu="1", parallelism=4, annotations={"kueue.x-k8s.io/job-min-parallelism": "2"}))

    def shrunk() -> dict[str, Any]:
        current = job(sc, "wide")
        assert not suspended(current), "not started"
        return current

    started = wait_until(shrunk, what="wide started", diagnostics=op.tail)
    assert started["spec"]["parallelism"] == 2
    wl = workload_of(sc, "wide")
    assert wl["spec"]["podSets"][0]["count"] == 4 and wl["spec"]["podSets"][0]["minCount"] == 2
    assert wl["status"]["admission"]["podSetAssignments"][0]["count"] == 2
    wait_until(lambda: len(pods(sc, "wide")) == 2, what="two pods", diagnostics=op.tail)


def test_a_job_without_a_queue_is_left_alone(sc: Scenario, operators: OperatorPool) -> None:
    ns = sc.namespace
    sc.queue("main", 2)
    op = operators.start()
    sc.apply(batch_job("plain", ns, None, suspend=False))
    wait_until(lambda: len(pods(sc, "plain")) == 1, what="the plain Job's pod", diagnostics=op.tail)
    # Give the operator a look at it (a queued Job after it gets its Workload).
    sc.apply(batch_job("queued", ns, "main"))
    wait_until(lambda: workload_of(sc, "queued"), what="the queued Job's Workload", diagnostics=op.tail)
    assert not any(name.startswith("job-plain-") for name in sc.workloads())
    plain = job(sc, "plain")
    assert not suspended(plain) and QUEUE_LABEL not in plain["metadata"].get("labels", {})
    assert "kueue.x-k8s.io/stopping" not in (plain["metadata"].get("annotations") or {})


def test_deleting_a_job_removes_its_workload(sc: Scenario, operators: OperatorPool) -> None:
    ns = sc.namespace
    _, lq = sc.queue("main", 2)
    op = operators.start()
    sc.apply(batch_job("short-lived", ns, lq))
    name = wait_until(lambda: workload_of(sc, "short-lived"), what="its Workload", diagnostics=op.tail)["metadata"][
        "name"
    ]
    sc.kubectl("delete", "job", "short-lived", "-n", ns, "--cascade=background")
    wait_until(lambda: name not in sc.workloads(), what="its Workload deleted", diagnostics=op.tail)


def test_a_restart_in_the_middle_of_a_preemption_ends_consistent(sc: Scenario, operators: OperatorPool) -> None:
    """The operator is killed while the victim's pods are still being deleted (its quota held);
    a new operator takes over: the victim's quota comes back once, the hero runs, nothing is
    evicted twice and the cohort is never over-admitted."""
    ns = sc.namespace
    team_cq, team, hero_cq, hero = hero_setup(sc)
    first = operators.start("first")
    with WorkloadMonitor(sc.cluster, ns) as monitor:
        sc.apply(batch_job("research", ns, team, cpu="2", parallelism=2, priority_class=sc.name("low")))
        wait_until(lambda: len(pods(sc, "research")) == 2, what="research running", diagnostics=first.tail)
        hold_pods(sc, "research")
        sc.apply(batch_job("hero", ns, hero, cpu="2", priority_class=sc.name("hero")))
        wait_until(
            lambda: suspended(job(sc, "research")) and is_true(workload_of(sc, "research"), "Evicted"),
            what="research stopping",
            diagnostics=first.tail,
        )
        first.kill()
        for pod in pods(sc, "research"):
            release_pod(sc, pod["metadata"]["name"])
        second = operators.start("second")
        wait_until(
            lambda: not suspended(job(sc, "hero")) and len(pods(sc, "hero")) == 1,
            what="hero running",
            diagnostics=second.tail,
        )
    research = workload_of(sc, "research")
    assert not is_true(research, "QuotaReserved")
    assert not monitor.errors, monitor.errors
    assert monitor.max_admitted_cpu(team_cq, hero_cq) <= 4
    assert monitor.max_evictions(research["metadata"]["name"]) == 1
    assert suspended(job(sc, "research"))


def test_the_webhooks_suspend_queued_jobs_at_creation_and_keep_a_running_jobs_queue(
    job_plane: ControlPlane, sc: Scenario, operators: OperatorPool
) -> None:
    """With `--webhook-url` (a local run) the operator makes its certificate, serves its webhooks
    and registers them: a queued Job created without `suspend` is stored suspended, and a running
    Job's queue label cannot change. Jobs without the label never reach the webhooks."""
    ns = sc.namespace
    _, lq = sc.queue("main", 2)
    sc.queue("other", 2)
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    op = operators.start(
        "hooks", extra_args=[f"--webhook-port={port}", "--webhook-host=127.0.0.1", f"--webhook-url={url}"]
    )
    try:

        def registered() -> bool:
            hooks = json.loads(
                job_plane.kubectl(
                    "get", "mutatingwebhookconfiguration", "preemption-operator", "-o", "json", check=True
                ).stdout
            )
            assert hooks["webhooks"][0]["clientConfig"]["url"] == f"{url}/mutate-batch-v1-job"
            return True

        wait_until(registered, what="the webhooks registered", diagnostics=op.tail)
        secret = json.loads(
            sc.kubectl("get", "secret", "preemption-operator-webhook-cert", "-n", "default", "-o", "json").stdout
        )
        assert secret["type"] == "kubernetes.io/tls"

        created = json.loads(
            sc.kubectl(
                "create", "-f", "-", "-o", "json", input=json.dumps(batch_job("queued", ns, lq, suspend=None))
            ).stdout
        )
        assert created["spec"]["suspend"] is True, "the queued Job was not suspended at creation"
        plain = json.loads(
            sc.kubectl(
                "create", "-f", "-", "-o", "json", input=json.dumps(batch_job("plain", ns, None, suspend=None))
            ).stdout
        )
        assert plain["spec"]["suspend"] is False

        wait_until(lambda: not suspended(job(sc, "queued")), what="the queued Job started", diagnostics=op.tail)
        moved = sc.kubectl("label", "job", "queued", "-n", ns, f"{QUEUE_LABEL}=other", "--overwrite", check=False)
        assert moved.returncode != 0
        assert f'metadata.labels[{QUEUE_LABEL}]: Invalid value: "other": field is immutable' in moved.stderr, (
            moved.stderr
        )
        assert job(sc, "queued")["metadata"]["labels"][QUEUE_LABEL] == lq
    finally:
        job_plane.kubectl(
            "delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration", "preemption-operator",
            "--ignore-not-found",
        )  # fmt: skip
