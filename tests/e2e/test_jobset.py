"""JobSets (jobset.x-k8s.io/v1alpha2) on a real API server with JobSet's own CRD, as Kueue's
jobset integration handles them (pkg/controller/jobs/jobset, v0.19.2): one Workload per JobSet,
owned by it, one pod set per replicated job; admission unsuspends it with each pod set's flavor
in its replicated job's pod template; preemption suspends it and puts the templates back.

The JobSet controller does not run here (a JobSet creates no Jobs): what is shown is the
operator's side of the protocol, on the objects as the API server validates and stores them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from preemption_operator.testing import go_modules
from preemption_operator.testing.control_plane import ControlPlane
from preemption_operator.testing.operator_process import OperatorPool, wait_until
from preemption_operator.testing.workload_status import condition, is_true

from .conftest import in_ci
from .jobs import POOL_LABEL, batch_job, jobset, priority_class, suspended, workload_of_jobset
from .scenario import Scenario

INTEGRATIONS = "--integrations=batch/job,jobset.x-k8s.io/jobset"


@pytest.fixture(scope="module")
def jobset_cluster(cluster: ControlPlane) -> Iterator[ControlPlane]:
    try:
        files = go_modules.jobset_crds()
    except go_modules.ModuleUnavailable as error:
        if not in_ci():
            pytest.skip(str(error))
        pytest.fail(str(error), pytrace=False)
    names = cluster.apply_crds(files)
    yield cluster
    cluster.kubectl("delete", *names, "--ignore-not-found", "--wait=false")


def templates(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each replicated job's pod template (an empty metadata, which restoring may leave, as none)."""
    out = {}
    for rj in obj["spec"]["replicatedJobs"]:
        template = dict(rj["template"]["spec"]["template"])
        if not template.get("metadata"):
            template.pop("metadata", None)
        out[rj["name"]] = template
    return out


def test_a_jobset_is_admitted_on_its_flavor_preempted_and_put_back(
    jobset_cluster: ControlPlane, scenario: Scenario, operators: OperatorPool
) -> None:
    """Mirrors Kueue's jobset controller tests ("Should reconcile JobSets", "Should allow to
    preempt a JobSet"): the Workload's pod sets, the started JobSet's node selectors and pod-set
    labels, and a stop that suspends it with its templates as they were."""
    sc, ns = scenario, scenario.namespace
    sc.apply(priority_class(sc.name("low"), 100), priority_class(sc.name("high"), 1000))
    cq, lq = sc.queue("team", 4, within="LowerPriority")
    flavor = sc.flavor_object()
    flavor["spec"] = {"nodeLabels": {POOL_LABEL: "batch"}}
    sc.apply(flavor)
    op = operators.start(extra_args=[INTEGRATIONS])

    created = jobset("trainer", ns, lq, sc.name("low"))
    sc.apply(created)

    def running() -> dict[str, Any]:
        current = sc.get("jobsets", "trainer")
        assert not suspended(current), "the JobSet is still suspended"
        return current

    started = wait_until(running, what="the JobSet started", diagnostics=op.tail)
    wl = workload_of_jobset(sc, "trainer")
    owner = wl["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("JobSet", "trainer", True)
    assert wl["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == started["metadata"]["uid"]
    assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [("leader", 1), ("workers", 2)]
    assert wl["spec"]["priority"] == 100 and wl["status"]["admission"]["clusterQueue"] == cq
    for name, template in templates(started).items():
        assert template["spec"]["nodeSelector"] == {POOL_LABEL: "batch"}, name
        assert template["metadata"]["labels"]["kueue.x-k8s.io/podset"] == name

    # A higher-priority Job needs 2 of the 4 cpu the JobSet's 3 leave 1 of: the JobSet goes.
    sc.apply(batch_job("urgent", ns, lq, cpu="2", priority_class=sc.name("high")))

    def stopped() -> dict[str, Any]:
        current = sc.get("jobsets", "trainer")
        assert suspended(current), "the JobSet is not suspended yet"
        return current

    put_back = wait_until(stopped, what="the JobSet suspended", diagnostics=op.tail)
    assert templates(put_back) == templates(created), "the templates were not put back as they were"
    wait_until(lambda: not suspended(sc.get("jobs", "urgent")), what="the urgent Job started", diagnostics=op.tail)
    wl = workload_of_jobset(sc, "trainer")
    assert not is_true(wl, "QuotaReserved")
    requeued = condition(wl, "Requeued") or {}
    assert (requeued.get("status"), requeued.get("reason")) == ("True", "Preempted"), wl["status"]["conditions"]
    preempted = condition(wl, "Preempted") or {}
    assert preempted.get("reason") == "InClusterQueue", preempted
