"""Which integrations run, and for which namespaces, on a real API server (Kueue v0.19.2's
jobframework setup and managedJobsNamespaceSelector):

- an enabled integration whose CRD is not installed yet is not an error: the operator serves
  everything else, and when the CRD is applied (and Established) it starts the integration: a
  queued JobSet is then suspended by the webhook, gets its Workload and runs once admitted;
- `--managed-jobs-namespace-selector`: a queued Job in a namespace the selector leaves out is
  neither sent to the webhooks nor given a Workload, until its namespace is labelled in.

The JobSet CRD is shared with test_jobset.py: this module removes it first, and again after."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from preemption_operator.testing import go_modules
from preemption_operator.testing.control_plane import ControlPlane, free_port
from preemption_operator.testing.operator_process import OperatorPool, OperatorProcess, wait_until

from .conftest import in_ci
from .jobs import batch_job, jobset, priority_class, suspended, workload_of, workload_of_jobset
from .scenario import Scenario

JOBSET_CRD = "customresourcedefinition.apiextensions.k8s.io/jobsets.jobset.x-k8s.io"
MANAGED = "e2e.preemption-operator/managed"


@pytest.fixture
def jobset_crd_files(cluster: ControlPlane) -> Iterator[list[Path]]:
    """JobSet's CRD files, the CRD itself not installed (deleted now and afterwards)."""
    try:
        files = go_modules.jobset_crds()
    except go_modules.ModuleUnavailable as error:
        if not in_ci():
            pytest.skip(str(error))
        pytest.fail(str(error), pytrace=False)
    cluster.kubectl("delete", JOBSET_CRD, "--ignore-not-found", "--wait=true", check=True, timeout=60)
    try:
        yield files
    finally:
        cluster.kubectl("delete", JOBSET_CRD, "--ignore-not-found", "--wait=false")


def with_webhooks(operators: OperatorPool, *args: str) -> tuple[OperatorProcess, str]:
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    op = operators.start(
        extra_args=[f"--webhook-port={port}", "--webhook-host=127.0.0.1", f"--webhook-url={url}", *args]
    )
    return op, url


def registered(cluster: ControlPlane, url: str) -> list[dict[str, Any]]:
    hooks = json.loads(
        cluster.kubectl("get", "mutatingwebhookconfiguration", "preemption-operator", "-o", "json", check=True).stdout
    )["webhooks"]
    assert hooks[0]["clientConfig"]["url"].startswith(url), hooks[0]["clientConfig"]
    return list(hooks)


def create(sc: Scenario, obj: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = json.loads(sc.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(obj)).stdout)
    return created


@pytest.fixture
def no_webhooks_left(cluster: ControlPlane) -> Iterator[None]:
    """The webhook configurations the operator registers go with the test: left behind, they
    would send other tests' queued objects to an operator no longer there."""
    try:
        yield
    finally:
        cluster.kubectl(
            "delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration", "preemption-operator",
            "--ignore-not-found",
        )  # fmt: skip


def test_an_integration_whose_crd_comes_later_starts_when_it_is_established(
    cluster: ControlPlane,
    jobset_crd_files: list[Path],
    scenario: Scenario,
    operators: OperatorPool,
    no_webhooks_left: None,
) -> None:
    sc, ns = scenario, scenario.namespace
    sc.apply(priority_class(sc.name("low"), 100))
    _, lq = sc.queue("main", 8)
    op, url = with_webhooks(operators, "--integrations=batch/job,jobset.x-k8s.io/jobset")
    wait_until(lambda: registered(cluster, url), what="the webhooks registered", diagnostics=op.tail)
    assert "the jobset.x-k8s.io/jobset integration waits for its CRD jobsets.jobset.x-k8s.io (not installed)" in (
        op.log()
    )

    # Everything else is served meanwhile: a queued Job is suspended at creation and runs.
    queued = create(sc, batch_job("before", ns, lq, suspend=None))
    assert queued["spec"]["suspend"] is True, "the queued Job was not suspended at creation"
    wait_until(lambda: not suspended(sc.get("jobs", "before")), what="the Job started", diagnostics=op.tail)
    assert workload_of(sc, "before")["metadata"]["ownerReferences"][0]["name"] == "before"

    cluster.apply_crds(jobset_crd_files)  # waits until Established
    wait_until(
        lambda: "CRD jobsets.jobset.x-k8s.io is Established: the jobset.x-k8s.io/jobset integration starts" in op.log(),
        what="the operator saw the CRD",
        diagnostics=op.tail,
    )
    unsuspended = jobset("trainer", ns, lq, sc.name("low"))
    del unsuspended["spec"]["suspend"]
    created = create(sc, unsuspended)
    assert created["spec"]["suspend"] is True, "the queued JobSet was not suspended by the webhook"

    def running() -> dict[str, Any]:
        current = sc.get("jobsets", "trainer")
        assert not suspended(current), "the JobSet is still suspended"
        return current

    started = wait_until(running, what="the JobSet admitted and started", diagnostics=op.tail)
    wl = workload_of_jobset(sc, "trainer")
    assert wl["metadata"]["ownerReferences"][0]["uid"] == started["metadata"]["uid"]
    assert op.alive()


def test_jobs_outside_the_managed_namespaces_are_left_alone_until_their_namespace_is_selected(
    cluster: ControlPlane, scenario: Scenario, operators: OperatorPool, no_webhooks_left: None
) -> None:
    sc, ns = scenario, scenario.namespace
    other = f"{ns}-out"
    cluster.kubectl("create", "namespace", other, check=True)
    try:
        _, lq = sc.queue("main", 8)
        sc.apply(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": lq, "namespace": other},
                "spec": {"clusterQueue": sc.name("main")},
            }
        )
        cluster.kubectl("label", "namespace", ns, f"{MANAGED}=true", check=True)
        op, url = with_webhooks(
            operators, "--integrations=batch/job", f"--managed-jobs-namespace-selector={MANAGED}=true"
        )

        def selects() -> bool:
            hooks = registered(cluster, url)
            assert hooks[0]["namespaceSelector"] == {
                "matchExpressions": [{"key": MANAGED, "operator": "In", "values": ["true"]}]
            }, hooks[0]["namespaceSelector"]
            return True

        wait_until(selects, what="the webhooks registered with the selector", diagnostics=op.tail)

        # Outside: not sent to the webhooks (created running), and no Workload for a queued one.
        outside = create(sc, batch_job("outside", other, lq, suspend=None))
        assert outside["spec"]["suspend"] is False, "a Job outside the managed namespaces was suspended"
        sc.kubectl("create", "-f", "-", input=json.dumps(batch_job("waiting", other, lq, suspend=True)))
        # Inside: suspended at creation and run; by then the other namespace's Job was seen too.
        inside = create(sc, batch_job("inside", ns, lq, suspend=None))
        assert inside["spec"]["suspend"] is True
        wait_until(lambda: not suspended(sc.get("jobs", "inside")), what="the managed Job started", diagnostics=op.tail)

        def workloads_outside() -> list[str]:
            items = json.loads(sc.kubectl("get", "workloads", "-n", other, "-o", "json").stdout)["items"]
            return [wl["metadata"]["name"] for wl in items]

        assert workloads_outside() == []

        # Selected now: its queued Job is reconciled (the Namespace event brings it back).
        cluster.kubectl("label", "namespace", other, f"{MANAGED}=true", check=True)
        wait_until(
            lambda: any(name.startswith("job-waiting-") for name in workloads_outside()),
            what="a Workload for the Job once its namespace is selected",
            diagnostics=op.tail,
        )
    finally:
        for kind in ("jobs", "workloads", "localqueues"):
            cluster.kubectl("delete", kind, "--all", "-n", other, "--wait=false", "--ignore-not-found")
        cluster.kubectl("delete", "namespace", other, "--wait=false", "--ignore-not-found")
