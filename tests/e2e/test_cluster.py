"""Issue 25: Jobs on a cluster whose pods really run. kube-scheduler binds them and kwok's fake nodes
run them (preemption_operator.testing.cluster): an admission becomes pods bound to the nodes of
the admitted flavor, or inside the admitted topology domain; a preempted Job's pods terminate
with their grace period while the quota stays held, and only then does the preemptor run.

Eight nodes of 4 cpu labelled for the flavor, in 2 blocks of 2 racks (two nodes a rack), two more
of another pool that no flavor names, and two labelled for the examples (`example.com/pool:
on-demand`).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from builders import KUEUE, cluster_queue
from preemption_operator.engine.topology_assignment import decode_assignment
from preemption_operator.testing import walkthrough
from preemption_operator.testing.cluster import (
    BLOCK_LABEL,
    COMPLETE_AFTER,
    HOSTNAME_LABEL,
    RACK_LABEL,
    Nodes,
    add_nodes,
    running_cluster,
)
from preemption_operator.testing.control_plane import ControlPlane, ControlPlaneError, free_port
from preemption_operator.testing.operator_process import OperatorPool, wait_until
from preemption_operator.testing.workload_status import condition, is_true

from .checks import CheckController
from .conftest import _namespace_name, in_ci, job_controller
from .jobs import (
    POOL_LABEL,
    QUEUE_LABEL,
    a_pod,
    batch_job,
    group_pods,
    job,
    jobset,
    plain_pod,
    pods,
    priority_class,
    raycluster,
    suspended,
    workload_of,
    workload_of_jobset,
    workload_of_raycluster,
    workloads_of_raycluster,
)
from .scenario import Scenario, describe_events

pytestmark = pytest.mark.cluster

NODE_CPU = 4
EXAMPLE_POOL = "example.com/pool"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hero-jobs"
RACK_CPU = 2 * NODE_CPU
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"


@pytest.fixture(scope="module")
def node_cluster(envtest_assets: Path) -> Iterator[ControlPlane]:
    """The cluster of this module (kube-scheduler and kwok need one of their own)."""
    capacity = {"cpu": str(NODE_CPU), "memory": "16Gi", "pods": "110"}
    batch = Nodes(8, capacity, blocks=2, racks_per_block=2, labels={POOL_LABEL: "batch"})
    error = None
    try:
        with running_cluster(batch, assets=envtest_assets) as plane:
            add_nodes(plane, Nodes(2, capacity, labels={POOL_LABEL: "other"}, prefix="other"))
            add_nodes(plane, Nodes(2, capacity, labels={EXAMPLE_POOL: "on-demand"}, prefix="on-demand"))
            yield plane
            return
    except ControlPlaneError as exc:  # names the part that did not start, with its log
        error = str(exc)
    if in_ci() or "exited" in error or "not Ready" in error:
        pytest.fail(f"the cluster did not start: {error}", pytrace=False)
    pytest.skip(error)


@pytest.fixture
def sc(node_cluster: ControlPlane, request: pytest.FixtureRequest) -> Iterator[Scenario]:
    name = _namespace_name(request.node.name)
    node_cluster.kubectl("create", "namespace", name, check=True)
    scenario = Scenario(node_cluster, name)
    try:
        yield scenario
    finally:
        scenario.cleanup()
        node_cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


@pytest.fixture
def operators(node_cluster: ControlPlane, sc: Scenario, tmp_path: Path) -> Iterator[OperatorPool]:
    pool = OperatorPool(node_cluster, tmp_path)
    try:
        yield pool
    finally:
        pool.close()


def nodes(sc: Scenario) -> dict[str, dict[str, str]]:
    """Every node's labels, by name."""
    items = sc.get("nodes", namespaced=False)["items"]
    return {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in items}


def batch_flavor(sc: Scenario, **spec: Any) -> None:
    flavor = sc.flavor_object()
    flavor["spec"] = {"nodeLabels": {POOL_LABEL: "batch"}, **spec}
    sc.apply(flavor)


def bound_cpu(sc: Scenario) -> int:
    """The cpu of the namespace's pods bound to a node and not finished (being deleted included)."""
    total = 0
    for pod in pods(sc, everything=True):
        if pod["spec"].get("nodeName") and pod["status"].get("phase") not in ("Succeeded", "Failed"):
            for container in pod["spec"]["containers"]:
                total += int(container["resources"]["requests"]["cpu"])
    return total


def test_a_job_runs_on_its_flavors_nodes_and_finishes(sc: Scenario, operators: OperatorPool) -> None:
    """Queued, admitted, its pods bound by kube-scheduler to the nodes carrying the flavor's
    nodeLabels (not the other pool's), Running, then Succeeded: the Workload is Finished."""
    ns = sc.namespace
    _, lq = sc.queue("main", 8)
    batch_flavor(sc)
    op = operators.start()
    sc.apply(batch_job("work", ns, lq, cpu="1", parallelism=3, pod_annotations={COMPLETE_AFTER: "4s"}))

    def running() -> list[dict[str, Any]]:
        found = pods(sc, "work")
        assert len(found) == 3 and all(p["status"].get("phase") == "Running" for p in found), [
            (p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase")) for p in found
        ]
        return found

    started = wait_until(running, what="work's pods running", diagnostics=op.tail)
    labels = nodes(sc)
    assert all(labels[p["spec"]["nodeName"]][POOL_LABEL] == "batch" for p in started), [
        p["spec"]["nodeName"] for p in started
    ]
    assert is_true(workload_of(sc, "work"), "Admitted")

    def finished() -> dict[str, Any]:
        wl = workload_of(sc, "work")
        assert is_true(wl, "Finished"), wl["status"].get("conditions")
        return wl

    wl = wait_until(finished, timeout=60, what="work's Workload Finished", diagnostics=op.tail)
    assert (condition(wl, "Finished") or {}).get("reason") == "Succeeded"
    assert all(p["status"]["phase"] == "Succeeded" for p in pods(sc, "work"))
    complete = [c for c in job(sc, "work")["status"].get("conditions") or [] if c["type"] == "Complete"]
    assert complete and complete[0]["status"] == "True"


def test_a_topology_aware_job_runs_inside_its_admitted_rack(sc: Scenario, operators: OperatorPool) -> None:
    """A pod set that requires a rack is admitted into one, and kube-scheduler binds every pod
    to a node of that rack (the placement is enforced on the pod template)."""
    ns = sc.namespace
    topology = sc.name("racks")
    sc.apply(
        {
            "apiVersion": KUEUE,
            "kind": "Topology",
            "metadata": {"name": topology},
            "spec": {"levels": [{"nodeLabel": BLOCK_LABEL}, {"nodeLabel": RACK_LABEL}, {"nodeLabel": HOSTNAME_LABEL}]},
        }
    )
    _, lq = sc.queue("tas", 4 * RACK_CPU)
    batch_flavor(sc, topologyName=topology)
    op = operators.start()
    sc.apply(
        batch_job("ring", ns, lq, cpu="1", parallelism=RACK_CPU - 2, pod_annotations={REQUIRED_TOPOLOGY: RACK_LABEL})
    )

    def bound() -> list[dict[str, Any]]:
        found = pods(sc, "ring")
        assert len(found) == RACK_CPU - 2 and all(p["spec"].get("nodeName") for p in found)
        return found

    placed = wait_until(bound, what="ring's pods bound", diagnostics=op.tail)
    labels = nodes(sc)
    on = {p["spec"]["nodeName"] for p in placed}
    racks = {labels[node][RACK_LABEL] for node in on}
    assert len(racks) == 1, f"pods spread over racks {sorted(racks)}"
    assignment = workload_of(sc, "ring")["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    domains = decode_assignment(assignment)
    admitted = {values[HOSTNAME_LABEL] for values, _ in domains}
    assert on <= admitted, f"pods on {sorted(on)}, admitted on {sorted(admitted)}"
    assert {labels[node][RACK_LABEL] for node in admitted} == racks


def test_a_preempted_jobs_pods_terminate_with_their_grace_period_before_the_preemptor_runs(
    sc: Scenario, operators: OperatorPool
) -> None:
    """`low` runs 4 pods of 1 cpu in a queue of 4 cpu; `high` comes, with a higher priority. `low` is
    suspended; its pods are deleted and stay Terminating for their grace period, its Workload keeps
    the quota meanwhile, and `high` starts only once they are gone: the pods bound to nodes never
    take more cpu than the queue has."""
    ns = sc.namespace
    sc.apply(priority_class(sc.name("low"), 10), priority_class(sc.name("high"), 1000))
    _, lq = sc.queue("main", 4, within="LowerPriority")
    batch_flavor(sc)
    op = operators.start()
    sc.apply(batch_job("low", ns, lq, cpu="1", parallelism=4, priority_class=sc.name("low"), grace_seconds=5))
    wait_until(
        lambda: len([p for p in pods(sc, "low") if p["status"].get("phase") == "Running"]) == 4,
        what="low running",
        diagnostics=op.tail,
    )
    most = {"cpu": 0}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            most["cpu"] = max(most["cpu"], bound_cpu(sc))
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        sc.apply(batch_job("high", ns, lq, cpu="1", parallelism=2, priority_class=sc.name("high")))

        def terminating() -> float:
            found = pods(sc, "low")
            assert found and all(p["metadata"].get("deletionTimestamp") for p in found), "low's pods not deleted yet"
            return time.monotonic()

        deleted_at = wait_until(terminating, what="low's pods terminating", diagnostics=op.tail)
        assert suspended(job(sc, "low"))
        low_wl = workload_of(sc, "low")
        assert is_true(low_wl, "Evicted") and is_true(low_wl, "QuotaReserved"), low_wl["status"]["conditions"]
        assert suspended(job(sc, "high")), "high started while low's pods were still running"
        wait_until(lambda: not pods(sc, "low"), timeout=30, what="low's pods gone", diagnostics=op.tail)
        gone_after = time.monotonic() - deleted_at
        assert gone_after >= 3.0, f"low's pods went after {gone_after:.1f}s, not their 5s grace period"
        wait_until(
            lambda: not is_true(workload_of(sc, "low"), "QuotaReserved"),
            what="low's quota given back once its pods are gone",
            diagnostics=op.tail,
        )
        wait_until(
            lambda: len([p for p in pods(sc, "high") if p["status"].get("phase") == "Running"]) == 2,
            what="high running",
            diagnostics=op.tail,
        )
    finally:
        stop.set()
        watcher.join()
    assert most["cpu"] <= 4, f"pods bound to nodes took {most['cpu']} cpu of the queue's 4"


def test_the_hero_jobs_walkthrough_runs_as_its_readme_says(node_cluster: ControlPlane, tmp_path: Path) -> None:
    """examples/hero-jobs applied step by step as its README says, on nodes whose pods run: the
    research Jobs' pods run on the flavor's nodes; the hero preempts `train`, whose pods go before
    the hero's run; `kubectl describe job` says why; the hero's pod succeeds (30 s), its Workload
    is Finished, and `train` runs again."""
    pool = OperatorPool(node_cluster, tmp_path)
    op = pool.start()

    def kubectl(*args: str) -> str:
        return node_cluster.kubectl(*args, check=True).stdout

    def pods_of(namespace: str, job_name: str) -> list[dict[str, Any]]:
        listed = kubectl("get", "pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job_name}", "-o", "json")
        return [p for p in json.loads(listed)["items"] if not p["metadata"].get("deletionTimestamp")]

    def running_on_pool(namespace: str, job_name: str, count: int) -> list[dict[str, Any]]:
        found = [p for p in pods_of(namespace, job_name) if p["status"].get("phase") == "Running"]
        assert len(found) == count, f"{job_name}: {len(found)} pod(s) running"
        return found

    try:
        kubectl("apply", "--server-side", "-f", str(EXAMPLE / "cluster.yaml"))
        kubectl("apply", "--server-side", "-f", str(EXAMPLE / "jobs.yaml"))
        kubectl("wait", "--for=jsonpath={.spec.suspend}=false", "job", "--all", "-n", "research", "--timeout=60s")
        research = wait_until(
            lambda: running_on_pool("research", "train", 2) + running_on_pool("research", "evaluate", 1),
            what="the research pods running",
            diagnostics=op.tail,
        )
        labels = {
            n["metadata"]["name"]: n["metadata"]["labels"]
            for n in json.loads(kubectl("get", "nodes", "-o", "json"))["items"]
        }
        assert {labels[p["spec"]["nodeName"]].get(EXAMPLE_POOL) for p in research} == {"on-demand"}
        kubectl("apply", "--server-side", "-f", str(EXAMPLE / "pending.yaml"))

        def settled() -> str:
            shown = kubectl("get", "jobs", "-A")
            assert re.search(r"research\s+train\s+Suspended\s", shown), shown
            assert re.search(r"hero\s+hero\s+Running\s", shown), shown
            return shown

        wait_until(settled, what="train suspended, the hero running", diagnostics=op.tail)
        hero = wait_until(
            lambda: running_on_pool("hero", "hero", 1), what="the hero's pod running", diagnostics=op.tail
        )
        assert labels[hero[0]["spec"]["nodeName"]].get(EXAMPLE_POOL) == "on-demand"
        assert not pods_of("research", "train"), "train's pods still running beside the hero's"

        def told() -> dict[str, dict[str, str]]:
            events = {e["Reason"]: e for e in describe_events(kubectl("describe", "job", "train", "-n", "research"))}
            assert {"Started", "Stopped", "Suspended"} <= set(events), events
            return events

        events = wait_until(told, what="the Events of train", diagnostics=op.tail)
        assert (
            "because of preemption config hero-jobs rule hero-preempt-lower-priority/0" in events["Stopped"]["Message"]
        )

        def hero_finished() -> bool:
            hero_wls = json.loads(kubectl("get", "workloads", "-n", "hero", "-o", "json"))["items"]
            assert hero_wls and is_true(hero_wls[0], "Finished"), [
                w.get("status", {}).get("conditions") for w in hero_wls
            ]
            return True

        wait_until(hero_finished, timeout=90, what="the hero's Workload Finished", diagnostics=op.tail)
        wait_until(
            lambda: running_on_pool("research", "train", 2), timeout=60, what="train running again", diagnostics=op.tail
        )
    finally:
        pool.close()
        node_cluster.kubectl(
            "delete",
            "-f",
            str(EXAMPLE / "pending.yaml"),
            "-f",
            str(EXAMPLE / "jobs.yaml"),
            "--wait=false",
            "--ignore-not-found",
        )
        node_cluster.kubectl("delete", "-f", str(EXAMPLE / "cluster.yaml"), "--wait=false", "--ignore-not-found")


DEFRAG = Path(__file__).resolve().parents[2] / "examples" / "topology-defragmentation-jobs"


def test_the_defragmentation_walkthrough_frees_a_rack_even_with_a_restart_in_the_middle(
    node_cluster: ControlPlane, tmp_path: Path
) -> None:
    """examples/topology-defragmentation-jobs applied as its README says, with the operator killed
    (SIGKILL: no shutdown code runs) while the victim's pods are terminating, and a new one
    started. The end is consistent: exactly one small Job was preempted, `large-training`'s pods
    run in the rack it freed, the other small Job never stopped, and once `large-training` is
    Complete the victim runs again. Meanwhile no node ever held more pods than its 4 cpu, nor the
    queue more than its 16."""
    pool = OperatorPool(node_cluster, tmp_path)
    copy = ["--label-keys-to-copy=example.com/node-count"]
    op = pool.start("first", extra_args=copy)

    def kubectl(*args: str) -> str:
        return node_cluster.kubectl(*args, check=True).stdout

    def training_pods() -> list[dict[str, Any]]:
        return json.loads(kubectl("get", "pods", "-n", "training", "-o", "json"))["items"]

    def live(job_name: str) -> list[dict[str, Any]]:
        return [
            p
            for p in training_pods()
            if p["metadata"]["labels"].get("batch.kubernetes.io/job-name") == job_name
            and not p["metadata"].get("deletionTimestamp")
            and p["status"].get("phase") == "Running"
        ]

    def workloads() -> dict[str, dict[str, Any]]:
        items = json.loads(kubectl("get", "workloads", "-n", "training", "-o", "json"))["items"]
        return {w["metadata"]["ownerReferences"][0]["name"]: w for w in items}

    rack = {f"node-{r}{i}": f"rack-{r}" for r in "ab" for i in (1, 2)}
    most = {"node": 0, "queue": 0}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            per_node: dict[str, int] = {}
            for pod in training_pods():
                if pod["spec"].get("nodeName") and pod["status"].get("phase") not in ("Succeeded", "Failed"):
                    cpu = sum(int(c["resources"]["requests"]["cpu"]) for c in pod["spec"]["containers"])
                    per_node[pod["spec"]["nodeName"]] = per_node.get(pod["spec"]["nodeName"], 0) + cpu
            most["node"] = max([most["node"], *per_node.values()])
            most["queue"] = max(most["queue"], sum(per_node.values()))
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    try:
        kubectl(
            "apply", "--server-side",
            "-f", str(DEFRAG / "topology.yaml"), "-f", str(DEFRAG / "cluster.yaml"), "-f", str(DEFRAG / "preemption-config.yaml"),
        )  # fmt: skip
        kubectl("apply", "--server-side", "-f", str(DEFRAG / "jobs.yaml"))
        kubectl("wait", "--for=jsonpath={.spec.suspend}=false", "job", "--all", "-n", "training", "--timeout=60s")

        def small_nodes() -> dict[str, str]:
            found = {name: live(name) for name in ("small-a", "small-b")}
            assert all(len(running) == 1 for running in found.values()), {n: len(r) for n, r in found.items()}
            return {name: running[0]["spec"]["nodeName"] for name, running in found.items()}

        small = wait_until(small_nodes, what="the small Jobs' pods running", diagnostics=op.tail)
        assert small == {"small-a": "node-a1", "small-b": "node-b1"}
        watcher.start()
        kubectl("apply", "--server-side", "-f", str(DEFRAG / "pending.yaml"))

        def victim_terminating() -> str:
            evicted = [name for name, wl in workloads().items() if is_true(wl, "Evicted")]
            assert len(evicted) == 1, evicted
            assert any(
                p["metadata"].get("deletionTimestamp")
                for p in training_pods()
                if p["metadata"]["labels"].get("batch.kubernetes.io/job-name") == evicted[0]
            ), "the victim's pod is not terminating yet"
            return evicted[0]

        victim = wait_until(victim_terminating, what="a small Job evicted, its pod terminating", diagnostics=op.tail)
        op.kill()
        op = pool.start("second", extra_args=copy)
        survivor = "small-b" if victim == "small-a" else "small-a"
        freed = rack[small[victim]]

        large = wait_until(
            lambda: len(live("large-training")) == 2 and live("large-training"),
            what="large-training's pods running",
            diagnostics=op.tail,
        )
        assert {rack[p["spec"]["nodeName"]] for p in large} == {freed}, [p["spec"]["nodeName"] for p in large]
        wls = workloads()
        assert suspended(json.loads(kubectl("get", "job", victim, "-n", "training", "-o", "json")))
        preempted = condition(wls[victim], "Preempted") or {}
        assert preempted.get("reason") == "ConfigurablePreemption", wls[victim]["status"]["conditions"]
        assert "rule evict-smaller-jobs-for-large-topology/0" in preempted.get("message", "")
        assert not condition(wls[survivor], "Evicted"), wls[survivor]["status"]["conditions"]
        assert len(live(survivor)) == 1
        # large-training's pods succeed 30 s after they start; then the victim comes back.
        wait_until(lambda: len(live(victim)) == 1, timeout=90, what=f"{victim} running again", diagnostics=op.tail)
        assert is_true(workloads()["large-training"], "Finished")
        assert live(victim)[0]["spec"]["nodeName"] == small[victim]
        assert not condition(workloads()[survivor], "Evicted")
    finally:
        stop.set()
        if watcher.is_alive():
            watcher.join()
        pool.close()
        for name in ("pending.yaml", "jobs.yaml", "preemption-config.yaml", "cluster.yaml", "topology.yaml"):
            node_cluster.kubectl("delete", "-f", str(DEFRAG / name), "--wait=false", "--ignore-not-found")
    assert most["node"] <= 4, f"a node held pods of {most['node']} cpu (4 allocatable)"
    assert most["queue"] <= 16, f"the queue's pods took {most['queue']} cpu of 16"


@pytest.fixture(scope="module")
def jobset_controller(node_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The JobSet controller (built once from the Go module proxy) with JobSet's CRD."""
    from preemption_operator.testing.job_controllers import JobSetController

    yield from job_controller(
        JobSetController(node_cluster, tmp_path_factory.mktemp("controllers")), "the JobSet controller"
    )


def jobset_pods(sc: Scenario, name: str) -> list[dict[str, Any]]:
    listed = sc.kubectl("get", "pods", "-n", sc.namespace, "-l", f"jobset.sigs.k8s.io/jobset-name={name}", "-o", "json")
    return [p for p in json.loads(listed.stdout)["items"] if not p["metadata"].get("deletionTimestamp")]


def test_a_jobset_runs_on_its_flavors_nodes_is_preempted_comes_back_and_finishes(
    sc: Scenario, operators: OperatorPool, jobset_controller: Any
) -> None:
    """A JobSet with the real JobSet controller (Kueue's jobset e2e: "Should run a jobSet on
    worker if admitted", "should allow to preempt"): held suspended until admitted; its child
    Jobs' pods run on the flavor's nodes; a higher-priority Job preempts it, the JobSet is
    suspended and its pods go; once the Job is done the JobSet runs again and finishes, and its
    Workload is Finished. No more cpu than the queue's is ever bound: the quota comes back only once
    the child Jobs' pods are gone (their own status says so; the JobSet's does not)."""
    ns = sc.namespace
    sc.apply(priority_class(sc.name("low"), 100), priority_class(sc.name("high"), 1000))
    _, lq = sc.queue("main", 4, within="LowerPriority")
    batch_flavor(sc)
    op = operators.start(extra_args=["--integrations=batch/job,jobset.x-k8s.io/jobset"])

    def logs() -> str:
        return f"{op.tail()}\n--- the JobSet controller:\n{jobset_controller.tail()}"

    trainer = jobset("trainer", ns, lq, sc.name("low"))
    for rj in trainer["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"]["metadata"] = {"annotations": {COMPLETE_AFTER: "15s"}}
        rj["template"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 2
    sc.apply(trainer)
    most = [0]

    def running(count: int) -> list[dict[str, Any]]:
        most[0] = max(most[0], bound_cpu(sc))
        found = jobset_pods(sc, "trainer")
        assert len(found) == count and all(p["status"].get("phase") == "Running" for p in found), [
            (p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase")) for p in found
        ]
        return found

    started = wait_until(lambda: running(3), what="the JobSet's pods running", diagnostics=logs)
    labels = nodes(sc)
    assert all(labels[p["spec"]["nodeName"]][POOL_LABEL] == "batch" for p in started)

    sc.apply(
        batch_job("urgent", ns, lq, cpu="2", priority_class=sc.name("high"), pod_annotations={COMPLETE_AFTER: "10s"})
    )

    def trainer_suspended() -> bool:
        most[0] = max(most[0], bound_cpu(sc))
        current = sc.get("jobsets", "trainer")
        assert suspended(current), (
            f"the JobSet is not suspended: {current.get('status')}; its Workload: "
            f"{workload_of_jobset(sc, 'trainer')['status'].get('conditions')}"
        )
        return True

    def urgent_running() -> bool:
        most[0] = max(most[0], bound_cpu(sc))
        assert [p["status"].get("phase") for p in pods(sc, "urgent")] == ["Running"]
        assert not jobset_pods(sc, "trainer"), "the JobSet's pods still run beside the urgent Job"
        return True

    wait_until(trainer_suspended, what="the JobSet suspended", diagnostics=logs)
    wait_until(urgent_running, what="the urgent Job running", diagnostics=logs)
    preempted = condition(workload_of_jobset(sc, "trainer"), "Preempted") or {}
    assert (preempted.get("status"), preempted.get("reason")) == ("True", "InClusterQueue"), preempted

    def finished() -> dict[str, Any]:
        most[0] = max(most[0], bound_cpu(sc))
        wl = workload_of_jobset(sc, "trainer")
        assert is_true(wl, "Finished"), wl["status"].get("conditions")
        return wl

    wl = wait_until(finished, timeout=120, what="the JobSet finished after running again", diagnostics=logs)
    assert (condition(wl, "Finished") or {}).get("reason") == "Succeeded"
    assert is_true(workload_of(sc, "urgent"), "Finished")
    assert most[0] <= 4, f"{most[0]} cpu bound at once in a queue of 4"


@pytest.fixture
def hooks(node_cluster: ControlPlane) -> Iterator[list[str]]:
    """The operator's arguments to serve and register its webhooks (a local run); they are
    unregistered afterwards, so that no later test calls a server that is gone."""
    port = free_port()
    try:
        yield [f"--webhook-port={port}", "--webhook-host=127.0.0.1", f"--webhook-url=https://127.0.0.1:{port}"]
    finally:
        node_cluster.kubectl(
            "delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration", "preemption-operator",
            "--ignore-not-found",
        )  # fmt: skip


GATE = "kueue.x-k8s.io/admission"
MANAGED = "kueue.x-k8s.io/managed"


def gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == GATE for g in pod["spec"].get("schedulingGates") or [])


def created(sc: Scenario, *objects: dict[str, Any]) -> list[dict[str, Any]]:
    """Creates each object and returns it as the API server stored it (after the webhooks)."""
    return [json.loads(sc.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(obj)).stdout) for obj in objects]


def held_at_creation(pod: dict[str, Any]) -> None:
    """As Kueue's pod webhook leaves a queued Pod: gated, managed, with the finalizer."""
    assert gated(pod), pod["spec"].get("schedulingGates")
    assert pod["metadata"]["labels"].get(MANAGED) == "true"
    assert MANAGED in pod["metadata"].get("finalizers", [])
    assert not pod["spec"].get("nodeName")


def workload_of_pod(sc: Scenario, name: str) -> dict[str, Any] | None:
    """The Workload of a Pod alone (Kueue's name: pod-<name>-<5 hex digits>)."""
    pattern = re.compile(rf"pod-{re.escape(name)}-[0-9a-f]{{5}}")
    found = [wl for wl_name, wl in sc.workloads().items() if pattern.fullmatch(wl_name)]
    assert len(found) <= 1, sorted(sc.workloads())
    return found[0] if found else None


def test_a_plain_pod_is_gated_until_admitted_runs_on_its_flavors_nodes_is_preempted_made_again_and_finishes(
    sc: Scenario, operators: OperatorPool, hooks: list[str]
) -> None:
    """A queued Pod (Kueue's plain-pods e2e, "should admit group that fits" for a Pod alone, and
    its preemption): created gated with the managed label and finalizer, its own Workload
    admitted, ungated onto the flavor's nodes. A higher-priority Pod preempts it: it is deleted,
    and only once it has stopped does the preemptor run. Made again, as its creator would, it
    waits for the quota, runs and finishes: its Workload Finished, its finalizer off."""
    ns = sc.namespace
    sc.apply(priority_class(sc.name("low"), 100), priority_class(sc.name("high"), 1000))
    _, lq = sc.queue("main", 4, within="LowerPriority")
    batch_flavor(sc)
    op = operators.start(extra_args=["--integrations=batch/job,pod", *hooks])
    most = [0]

    def solo(**notes: str) -> dict[str, Any]:
        return plain_pod("solo", ns, lq, sc.name("low"), cpu="3", annotations=notes)

    held_at_creation(*created(sc, solo()))

    def running(name: str) -> dict[str, Any]:
        most[0] = max(most[0], bound_cpu(sc))
        pod = a_pod(sc, name)
        assert pod is not None and pod["status"].get("phase") == "Running", pod and pod["status"]
        return pod

    started = wait_until(lambda: running("solo"), what="solo running", diagnostics=op.tail)
    assert not gated(started)
    assert nodes(sc)[started["spec"]["nodeName"]][POOL_LABEL] == "batch"
    assert started["spec"]["nodeSelector"] == {POOL_LABEL: "batch"}
    wl = workload_of_pod(sc, "solo")
    assert wl is not None and is_true(wl, "Admitted")

    sc.apply(plain_pod("urgent", ns, lq, sc.name("high"), cpu="2", annotations={COMPLETE_AFTER: "8s"}))

    def solo_gone() -> bool:
        most[0] = max(most[0], bound_cpu(sc))
        pod = a_pod(sc, "solo")
        assert pod is None, f"solo still there: {pod['status'].get('phase')}"
        return True

    wait_until(solo_gone, what="the preempted Pod deleted", diagnostics=op.tail)
    reasons = {e["reason"]: e["message"] for e in sc.events_about("Pod", "solo", ns)}
    assert reasons.get("Stopped", "").startswith("Preempted to accommodate a workload"), reasons
    wait_until(lambda: running("urgent"), what="urgent running", diagnostics=op.tail)

    held_at_creation(*created(sc, solo(**{COMPLETE_AFTER: "4s"})))  # made again, as its creator would

    def finished(name: str) -> dict[str, Any]:
        most[0] = max(most[0], bound_cpu(sc))
        wl = workload_of_pod(sc, name)
        assert wl is not None and is_true(wl, "Finished"), wl and wl.get("status", {}).get("conditions")
        return wl

    wl = wait_until(lambda: finished("solo"), timeout=90, what="solo finished", diagnostics=op.tail)
    assert (condition(wl, "Finished") or {}).get("reason") == "Succeeded"
    assert is_true(finished("urgent"), "Finished")

    def let_go() -> bool:
        pod = a_pod(sc, "solo")
        assert pod is not None and pod["status"]["phase"] == "Succeeded"
        assert MANAGED not in pod["metadata"].get("finalizers", []), pod["metadata"].get("finalizers")
        return True

    wait_until(let_go, what="solo's finalizer removed", diagnostics=op.tail)
    assert most[0] <= 4, f"{most[0]} cpu bound at once in a queue of 4"


def test_a_pod_group_waits_for_all_its_pods_runs_is_preempted_whole_made_again_and_finishes(
    sc: Scenario, operators: OperatorPool, hooks: list[str]
) -> None:
    """Kueue's plain-pods e2e "Should only admit a complete group", "should admit group that
    fits", "should allow to preempt the lower priority group": no Workload while the group is
    short of Pods (the Pods are told why); one Workload named after the group once complete; all
    its Pods ungated onto the flavor's nodes; a higher-priority Job preempts the group, every Pod
    is deleted and the Job runs only once they have stopped; made again, the group runs to the
    end: `Pods succeeded: 3/3.`"""
    ns = sc.namespace
    sc.apply(priority_class(sc.name("low"), 100), priority_class(sc.name("high"), 1000))
    _, lq = sc.queue("main", 4, within="LowerPriority")
    batch_flavor(sc)
    op = operators.start(extra_args=["--integrations=batch/job,pod", *hooks])
    most = [0]

    def member(name: str, **notes: str) -> dict[str, Any]:
        return plain_pod(name, ns, lq, sc.name("low"), group="trainer", total=3, annotations=notes)

    for pod in created(sc, member("trainer-0"), member("trainer-1")):
        held_at_creation(pod)

    def told_why() -> bool:
        messages = [
            e["message"] for e in sc.events_about("Pod", "trainer-0", ns) if e["reason"] == "ErrWorkloadCompose"
        ]
        assert "'trainer' group has fewer runnable pods than expected" in messages, messages
        return True

    wait_until(told_why, what="the short group told why it waits", diagnostics=op.tail)
    assert "trainer" not in sc.workloads()
    assert all(gated(pod) for pod in group_pods(sc, "trainer"))
    sc.apply(member("trainer-2"))

    def running(count: int) -> list[dict[str, Any]]:
        most[0] = max(most[0], bound_cpu(sc))
        found = group_pods(sc, "trainer")
        assert len(found) == count and all(p["status"].get("phase") == "Running" for p in found), [
            (p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase")) for p in found
        ]
        return found

    started = wait_until(lambda: running(3), what="the group running", diagnostics=op.tail)
    labels = nodes(sc)
    assert all(labels[p["spec"]["nodeName"]][POOL_LABEL] == "batch" for p in started)
    wl = sc.workload("trainer")
    assert wl["metadata"]["annotations"]["kueue.x-k8s.io/is-group-workload"] == "true"
    assert sorted(o["name"] for o in wl["metadata"]["ownerReferences"]) == ["trainer-0", "trainer-1", "trainer-2"]

    sc.apply(
        batch_job("urgent", ns, lq, cpu="2", priority_class=sc.name("high"), pod_annotations={COMPLETE_AFTER: "8s"})
    )

    def urgent_running() -> bool:
        most[0] = max(most[0], bound_cpu(sc))
        assert [p["status"].get("phase") for p in pods(sc, "urgent")] == ["Running"]
        return True

    wait_until(urgent_running, what="the urgent Job running", diagnostics=op.tail)
    wait_until(lambda: not group_pods(sc, "trainer"), what="the group's Pods gone", diagnostics=op.tail)
    stopped = [e["message"] for e in sc.events_about("Pod", "trainer-0", ns) if e["reason"] == "Stopped"]
    assert stopped and stopped[0].startswith("Preempted to accommodate a workload"), stopped

    sc.apply(*(member(f"trainer-{i}", **{COMPLETE_AFTER: "4s"}) for i in range(3)))  # made again

    def finished() -> dict[str, Any]:
        most[0] = max(most[0], bound_cpu(sc))
        wl = sc.workloads().get("trainer")
        assert wl is not None and is_true(wl, "Finished"), wl and wl.get("status", {}).get("conditions")
        return wl

    wl = wait_until(finished, timeout=90, what="the group finished", diagnostics=op.tail)
    done = condition(wl, "Finished") or {}
    assert (done.get("reason"), done.get("message")) == ("Succeeded", "Pods succeeded: 3/3.")
    assert most[0] <= 4, f"{most[0]} cpu bound at once in a queue of 4"


ROOT = Path(__file__).resolve().parents[2]
JOBSET_AND_GROUP = ROOT / "examples" / "jobset-and-pod-group"
ML_QUOTA = 6
"""The cpu of ClusterQueue `ml` in examples/jobset-and-pod-group."""


def test_the_jobset_and_pod_group_walkthrough_runs_as_its_readme_says(
    node_cluster: ControlPlane, jobset_controller: Any, hooks: list[str], tmp_path: Path
) -> None:
    """examples/jobset-and-pod-group: every command of its README's numbered steps, run in order
    as a user runs them, against the operator with its webhooks (all integrations, as `run`
    without flags) and the real JobSet controller; after each step, what the README says the user
    sees. The JobSet fills the queue and runs on the flavor's nodes; the pod group, created gated,
    preempts it (`InClusterQueue`), stays gated while the JobSet's pods terminate, then runs on the
    flavor's nodes and finishes (`Pods succeeded: 3/3.`); the JobSet resumes and completes. The
    pods bound to nodes never ask for more cpu than the queue has."""
    walk = walkthrough.steps((JOBSET_AND_GROUP / "README.md").read_text())
    assert [step.title for step in walk] == [
        "Create the queue",
        "Start the training run",
        "Submit the evaluation",
        "The evaluation runs",
        "The evaluation finishes and the training run resumes",
        "The training run finishes",
    ]
    pool = OperatorPool(node_cluster, tmp_path)
    op = pool.start(extra_args=hooks)

    def logs() -> str:
        return f"{op.tail()}\n--- the JobSet controller:\n{jobset_controller.tail()}"

    def run(words: tuple[str, ...]) -> str:
        """A README command as typed from the repository root; its output."""
        args = [str(ROOT / w) if w.startswith("examples/") else w for w in words[1:]]
        waits = [int(m.group(1)) for w in args if (m := re.fullmatch(r"--timeout=(\d+)s", w))]
        return node_cluster.kubectl(*args, check=True, timeout=(waits[0] if waits else 0) + 60).stdout

    def get(*args: str) -> Any:
        return json.loads(node_cluster.kubectl("get", *args, "-n", "ml", "-o", "json", check=True).stdout)

    def pods_of(selector: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = get("pods", "-l", selector)["items"]
        return items

    def running(selector: str, count: int) -> list[dict[str, Any]]:
        found = [p for p in pods_of(selector) if not p["metadata"].get("deletionTimestamp")]
        phases = [(p["metadata"]["name"], p["status"].get("phase")) for p in found]
        assert len(found) == count and all(phase == "Running" for _, phase in phases), phases
        return found

    def jobset_workload() -> dict[str, Any]:
        found = [
            w for w in get("workloads")["items"] if re.fullmatch(r"jobset-pretrain-[0-9a-f]{5}", w["metadata"]["name"])
        ]
        assert len(found) == 1, [w["metadata"]["name"] for w in found]
        return found[0]

    on_demand = {
        n["metadata"]["name"]
        for n in json.loads(node_cluster.kubectl("get", "nodes", "-o", "json", check=True).stdout)["items"]
        if n["metadata"].get("labels", {}).get(EXAMPLE_POOL) == "on-demand"
    }
    trainers, group = "jobset.sigs.k8s.io/jobset-name=pretrain", "kueue.x-k8s.io/pod-group-name=eval"

    def on_the_flavors_nodes(pods: list[dict[str, Any]]) -> None:
        for pod in pods:
            assert pod["spec"]["nodeName"] in on_demand, (pod["metadata"]["name"], pod["spec"]["nodeName"])
            assert pod["spec"].get("nodeSelector", {}).get(EXAMPLE_POOL) == "on-demand", pod["spec"].get("nodeSelector")

    most = [0]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            proc = node_cluster.kubectl("get", "pods", "-n", "ml", "-o", "json")
            if proc.returncode == 0:
                bound = [
                    p
                    for p in json.loads(proc.stdout)["items"]
                    if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed")
                ]
                cpu = sum(int(c["resources"]["requests"]["cpu"]) for p in bound for c in p["spec"]["containers"])
                most[0] = max(most[0], cpu)
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)

    def step(number: int) -> list[str]:
        return [run(words) for words in walk[number - 1].commands]

    preempted_by = "Preempted to accommodate a workload (UID: {uid}, JobUID: UNKNOWN) due to prioritization in the ClusterQueue; preemptor path: /ml; preemptee path: /ml"
    try:
        # 1. The queue, on the nodes that carry the flavor's label.
        step(1)
        cq = json.loads(node_cluster.kubectl("get", "clusterqueue", "ml", "-o", "json", check=True).stdout)
        assert cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == ML_QUOTA
        assert on_demand, "no node carries example.com/pool: on-demand"
        watcher.start()

        # 2. The JobSet is admitted with the whole queue; its three pods run on the flavor's nodes.
        _, _, shown, _ = step(2)
        assert re.search(r"jobset-pretrain-[0-9a-f]{5}\s+ml\s+ml\s+True\s", shown), shown
        started = wait_until(lambda: running(trainers, 3), what="the JobSet's pods running", diagnostics=logs)
        on_the_flavors_nodes(started)

        # 3. The group is created gated; the JobSet is preempted, its pods terminate meanwhile.
        _, shown = step(3)
        for i in range(3):
            assert re.search(rf"^eval-{i}\s+0/1\s+SchedulingGated\s", shown, re.M), shown
        for pod in pods_of(group):
            assert pod["metadata"]["labels"].get("kueue.x-k8s.io/managed") == "true"
            assert "kueue.x-k8s.io/managed" in pod["metadata"].get("finalizers", [])

        def preempted() -> dict[str, Any]:
            wl = jobset_workload()
            assert is_true(wl, "Evicted") and is_true(wl, "Preempted"), wl["status"].get("conditions")
            return wl

        victim = wait_until(preempted, what="the JobSet's Workload preempted", diagnostics=logs)
        eval_wl = get("workload", "eval")
        assert eval_wl["metadata"]["annotations"].get("kueue.x-k8s.io/is-group-workload") == "true"
        assert sorted(o["name"] for o in eval_wl["metadata"]["ownerReferences"]) == ["eval-0", "eval-1", "eval-2"]
        message = preempted_by.format(uid=eval_wl["metadata"]["uid"])
        evicted, why = condition(victim, "Evicted") or {}, condition(victim, "Preempted") or {}
        assert (evicted["reason"], evicted["message"]) == ("Preempted", message), evicted
        assert (why["reason"], why["message"]) == ("InClusterQueue", message), why

        # 4. Once the JobSet's pods are gone the group is ungated onto the flavor's nodes; the
        # JobSet is suspended, its Workload without quota.
        _, workloads, jobsets, pods_shown, described = step(4)
        assert re.search(r"^eval\s+ml\s+ml\s+True\s", workloads, re.M), workloads
        assert re.search(r"^jobset-pretrain-[0-9a-f]{5}\s+ml\s+False\s+InClusterQueue\s", workloads, re.M), workloads
        assert re.search(r"^pretrain\s+0\s+true\s", jobsets, re.M), jobsets
        assert "pretrain-" not in pods_shown, pods_shown
        evals = running(group, 3)
        on_the_flavors_nodes(evals)
        assert not any(p["spec"].get("schedulingGates") for p in evals)
        assert message in described and re.search(
            r"Reason:\s+InClusterQueue\n\s+Status:\s+True\n\s+Type:\s+Preempted", described
        ), described

        # 5. The group succeeds and lets its Pods go; the JobSet is admitted again and resumed.
        _, _, finished, workloads, _ = step(5)
        assert finished == "Pods succeeded: 3/3.\n", finished
        done = condition(get("workload", "eval"), "Finished") or {}
        assert (done.get("status"), done.get("reason")) == ("True", "Succeeded"), done
        assert re.search(r"^jobset-pretrain-[0-9a-f]{5}\s+ml\s+ml\s+True\s+QuotaReserved\s", workloads, re.M), workloads

        def let_go() -> bool:
            for pod in pods_of(group):
                assert pod["status"]["phase"] == "Succeeded", pod["status"]["phase"]
                assert "kueue.x-k8s.io/managed" not in pod["metadata"].get("finalizers", [])
            return True

        wait_until(let_go, what="the group's finalizers removed", diagnostics=logs)
        again = wait_until(lambda: running(trainers, 3), what="the JobSet's pods running again", diagnostics=logs)
        on_the_flavors_nodes(again)
        back = condition(jobset_workload(), "Preempted") or {}
        assert (back.get("status"), back.get("reason"), back.get("message")) == (
            "False",
            "QuotaReserved",
            f"Previously: {message}",
        ), back

        # 6. The JobSet completes: its Workload is Finished, its Events tell the story.
        _, workloads, described = step(6)
        assert re.search(r"^jobset-pretrain-[0-9a-f]{5}\s+ml\s+ml\s+True\s+QuotaReserved\s+True\s", workloads, re.M), (
            workloads
        )
        done = condition(jobset_workload(), "Finished") or {}
        assert (done.get("reason"), done.get("message")) == ("Succeeded", "jobset completed successfully"), done
        events = describe_events(described)
        ours = {e["Reason"]: e["Message"] for e in events if e["From"] == "preemption-operator"}
        assert ours.get("Stopped") == message and ours.get("Preempted") == message, events
        assert ours.get("Started") == "Admitted by clusterQueue ml", events
        assert {"CreatedWorkload", "FinishedWorkload"} <= set(ours), events
        # The preemption's suspension is always told; the one at creation only if the JobSet
        # controller saw the JobSet before it was admitted, which is a race.
        theirs = [e["Reason"] for e in events if e["From"] == "jobset"]
        assert "SuspendedJobs" in theirs and "AllJobsCompleted" in theirs, events
    finally:
        stop.set()
        if watcher.is_alive():
            watcher.join()
        pool.close()
        for i in range(3):  # a run cut short leaves the operator's finalizer on the Pods
            node_cluster.kubectl(
                "patch", "pod", f"eval-{i}", "-n", "ml", "--type=merge", "-p", '{"metadata":{"finalizers":null}}'
            )
        for name in ("pending.yaml", "jobset.yaml", "cluster.yaml"):
            node_cluster.kubectl("delete", "-f", str(JOBSET_AND_GROUP / name), "--wait=false", "--ignore-not-found")
    assert most[0] <= ML_QUOTA, f"the pods bound to nodes asked for {most[0]} cpu, the queue has {ML_QUOTA}"


@pytest.fixture(scope="module")
def kuberay_controller(node_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The KubeRay operator (built once from the Go module proxy) with its CRDs."""
    from preemption_operator.testing.job_controllers import KubeRayController

    yield from job_controller(
        KubeRayController(node_cluster, tmp_path_factory.mktemp("controllers")), "the KubeRay operator"
    )


def ray_pods(sc: Scenario, name: str) -> list[dict[str, Any]]:
    listed = sc.kubectl("get", "pods", "-n", sc.namespace, "-l", f"ray.io/cluster={name}", "-o", "json")
    return [p for p in json.loads(listed.stdout)["items"] if not p["metadata"].get("deletionTimestamp")]


def test_a_raycluster_runs_on_its_flavors_nodes_is_preempted_comes_back_and_is_deleted(
    sc: Scenario, operators: OperatorPool, kuberay_controller: Any
) -> None:
    """A RayCluster with the real KubeRay operator (Kueue's kuberay e2e "Should run a RayCluster
    on worker if admitted", its integration test "Should preempt lower priority RayClusters when
    resource insufficient"): created suspended by the webhook and held until admitted; its head
    and workers run on the flavor's nodes; a higher-priority Job preempts it, it is suspended and
    its pods go before the Job's start (never more cpu bound than the queue's 4); once the Job is
    done it runs again. A RayCluster never finishes: deleted, its Workload goes and its quota is
    free for the next job."""
    sc.apply(priority_class(sc.name("low"), 100), priority_class(sc.name("high"), 1000))
    _, lq = sc.queue("main", 4, within="LowerPriority")
    batch_flavor(sc)
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    webhooks = [f"--webhook-port={port}", "--webhook-host=127.0.0.1", f"--webhook-url={url}"]
    op = operators.start(extra_args=["--integrations=batch/job,ray.io/raycluster", *webhooks])
    try:
        _raycluster_through_preemption_and_deletion(sc, op, kuberay_controller, lq, url)
    finally:
        sc.kubectl(
            "delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration", "preemption-operator",
            "--ignore-not-found", check=False,
        )  # fmt: skip


def _raycluster_through_preemption_and_deletion(
    sc: Scenario, op: Any, kuberay_controller: Any, lq: str, url: str
) -> None:
    ns = sc.namespace

    def logs() -> str:
        return f"{op.tail()}\n--- the KubeRay operator:\n{kuberay_controller.tail()}"

    def registered() -> bool:
        listed = sc.kubectl("get", "mutatingwebhookconfiguration", "preemption-operator", "-o", "json", check=False)
        assert listed.returncode == 0, "no webhooks registered yet"
        urls = [hook["clientConfig"]["url"] for hook in json.loads(listed.stdout)["webhooks"]]
        assert f"{url}/mutate-ray-io-v1-raycluster" in urls, urls
        return True

    wait_until(registered, what="the webhooks registered", diagnostics=logs)
    refused = sc.kubectl(
        "create",
        "-f",
        "-",
        input=json.dumps(raycluster("bad", ns, lq, sc.name("low"), worker_group="head")),
        check=False,
    )
    assert refused.returncode != 0
    assert 'spec.workerGroupSpecs[0].groupName: Forbidden: "head" is reserved for the head group' in refused.stderr

    created = sc.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(raycluster("ray", ns, lq, sc.name("low"))))
    assert suspended(json.loads(created.stdout)), "the webhook did not create the queued RayCluster suspended"
    most = [0]

    def running(count: int) -> list[dict[str, Any]]:
        most[0] = max(most[0], bound_cpu(sc))
        found = ray_pods(sc, "ray")
        assert len(found) == count and all(p["status"].get("phase") == "Running" for p in found), [
            (p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase")) for p in found
        ]
        return found

    started = wait_until(lambda: running(3), what="the RayCluster's pods running", diagnostics=logs)
    labels = nodes(sc)
    assert all(labels[p["spec"]["nodeName"]][POOL_LABEL] == "batch" for p in started)
    wl = workload_of_raycluster(sc, "ray")
    assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [("head", 1), ("workers", 2)]
    owner = wl["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("RayCluster", "ray", True)
    cluster = sc.get("rayclusters", "ray")
    for template in (cluster["spec"]["headGroupSpec"]["template"], cluster["spec"]["workerGroupSpecs"][0]["template"]):
        assert template["spec"]["nodeSelector"] == {POOL_LABEL: "batch"}

    sc.apply(
        batch_job("urgent", ns, lq, cpu="2", priority_class=sc.name("high"), pod_annotations={COMPLETE_AFTER: "10s"})
    )

    def ray_suspended() -> bool:
        most[0] = max(most[0], bound_cpu(sc))
        current = sc.get("rayclusters", "ray")
        assert suspended(current), (
            f"the RayCluster is not suspended: {current.get('status')}; its Workload: "
            f"{workload_of_raycluster(sc, 'ray')['status'].get('conditions')}"
        )
        return True

    def urgent_running() -> bool:
        most[0] = max(most[0], bound_cpu(sc))
        assert [p["status"].get("phase") for p in pods(sc, "urgent")] == ["Running"]
        assert not ray_pods(sc, "ray"), "the RayCluster's pods still run beside the urgent Job"
        return True

    wait_until(ray_suspended, what="the RayCluster suspended", diagnostics=logs)
    wait_until(urgent_running, what="the urgent Job running", diagnostics=logs)
    preempted = condition(workload_of_raycluster(sc, "ray"), "Preempted") or {}
    assert (preempted.get("status"), preempted.get("reason")) == ("True", "InClusterQueue"), preempted
    restored = sc.get("rayclusters", "ray")["spec"]["headGroupSpec"]["template"]["spec"]
    assert "nodeSelector" not in restored, "the head's template was not put back"

    # The urgent Job's pod succeeds 10 s after it starts; then the RayCluster runs again.
    wait_until(lambda: running(3), timeout=90, what="the RayCluster running again", diagnostics=logs)
    assert is_true(workload_of(sc, "urgent"), "Finished")
    assert is_true(workload_of_raycluster(sc, "ray"), "Admitted")
    assert most[0] <= 4, f"{most[0]} cpu bound at once in a queue of 4: the quota came back before the pods went"
    moved = sc.kubectl("label", "raycluster", "ray", "-n", ns, f"{QUEUE_LABEL}=other", "--overwrite", check=False)
    assert f'metadata.labels[{QUEUE_LABEL}]: Invalid value: "other": field is immutable' in moved.stderr, moved.stderr

    sc.kubectl("delete", "raycluster", "ray", "-n", ns, "--wait=false")
    wait_until(lambda: not workloads_of_raycluster(sc, "ray"), what="the RayCluster's Workload gone", diagnostics=logs)
    sc.apply(batch_job("next", ns, lq, cpu="4", priority_class=sc.name("low")))
    wait_until(
        lambda: is_true(workload_of(sc, "next"), "Admitted"),
        what="a job of the whole quota admitted once the RayCluster is gone",
        diagnostics=logs,
    )


def deployment(name: str, namespace: str, queue: str, priority: str, replicas: int, cpu: str) -> dict[str, Any]:
    container = {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {QUEUE_LABEL: queue, "kueue.x-k8s.io/priority-class": priority},
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"terminationGracePeriodSeconds": 2, "containers": [container]},
            },
        },
    }


def test_a_deployments_pods_are_each_queued_run_on_the_flavors_nodes_and_a_preempted_one_comes_back(
    sc: Scenario, operators: OperatorPool, hooks: list[str]
) -> None:
    """Kueue's deployment e2e ("should admit workloads that fits") and its pod preemption: the
    queued Deployment's template is stamped by the webhook, each Pod its ReplicaSet makes is
    gated (without the finalizer: its parent suspends it) and gets a Workload of its own, and runs
    on the flavor's nodes; a higher-priority Job preempts one Pod, which is deleted; the
    ReplicaSet's replacement waits, gated, until the Job is done, then runs. Deleting the
    Deployment takes its Pods' Workloads with them."""
    ns = sc.namespace
    sc.apply(priority_class(sc.name("low"), 100), priority_class(sc.name("high"), 1000))
    _, lq = sc.queue("main", 4, within="LowerPriority")
    batch_flavor(sc)
    op = operators.start(extra_args=["--integrations=batch/job,deployment", *hooks])
    (stored,) = created(sc, deployment("web", ns, lq, sc.name("low"), 2, "1"))
    template = stored["spec"]["template"]["metadata"]
    assert template["annotations"] == {"kueue.x-k8s.io/pod-suspending-parent": "deployment"}
    assert template["labels"][MANAGED] == "true" and template["labels"][QUEUE_LABEL] == lq
    most = [0]

    def web_pods() -> list[dict[str, Any]]:
        listed = sc.kubectl("get", "pods", "-n", ns, "-l", "app=web", "-o", "json")
        return [p for p in json.loads(listed.stdout)["items"] if not p["metadata"].get("deletionTimestamp")]

    def web_running(count: int) -> list[dict[str, Any]]:
        most[0] = max(most[0], bound_cpu(sc))
        found = web_pods()
        assert len(found) == count and all(p["status"].get("phase") == "Running" for p in found), [
            (p["metadata"]["name"], p["status"].get("phase"), gated(p)) for p in found
        ]
        return found

    started = wait_until(lambda: web_running(2), what="the Deployment's Pods running", diagnostics=op.tail)
    labels = nodes(sc)
    for pod in started:
        assert labels[pod["spec"]["nodeName"]][POOL_LABEL] == "batch"
        assert MANAGED not in pod["metadata"].get("finalizers", [])  # its parent suspends it
        assert "kueue.x-k8s.io/role-hash" in pod["metadata"]["annotations"]
        wl = workload_of_pod(sc, pod["metadata"]["name"])
        assert wl is not None and is_true(wl, "Admitted")
    originals = {p["metadata"]["name"] for p in started}

    sc.apply(
        batch_job("urgent", ns, lq, cpu="3", priority_class=sc.name("high"), pod_annotations={COMPLETE_AFTER: "10s"})
    )

    def replacement_waits() -> bool:
        most[0] = max(most[0], bound_cpu(sc))
        assert [p["status"].get("phase") for p in pods(sc, "urgent")] == ["Running"]
        found = web_pods()
        waiting = [p for p in found if p["metadata"]["name"] not in originals]
        assert len(found) == 2 and len(waiting) == 1 and gated(waiting[0]), [
            (p["metadata"]["name"], p["status"].get("phase"), gated(p)) for p in found
        ]
        return True

    wait_until(replacement_waits, what="the urgent Job running, the replacement Pod gated", diagnostics=op.tail)
    wait_until(lambda: web_running(2), timeout=90, what="the replacement running after the Job", diagnostics=op.tail)
    assert is_true(workload_of(sc, "urgent"), "Finished")
    assert most[0] <= 4, f"{most[0]} cpu bound at once in a queue of 4"

    sc.kubectl("delete", "deployment", "web", "-n", ns, "--wait=false")
    wait_until(
        lambda: not [n for n in sc.workloads() if n.startswith("pod-web-")],
        what="the Deployment's Pods' Workloads gone",
        diagnostics=op.tail,
    )


def statefulset(name: str, namespace: str, queue: str, priority: str, replicas: int, cpu: str) -> dict[str, Any]:
    container = {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {QUEUE_LABEL: queue, "kueue.x-k8s.io/priority-class": priority},
        },
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"terminationGracePeriodSeconds": 2, "containers": [container]},
            },
        },
    }


def test_a_statefulset_is_one_group_admitted_whole_preempted_whole_and_made_again(
    sc: Scenario, operators: OperatorPool, hooks: list[str]
) -> None:
    """Kueue's statefulset e2e ("should admit group that fits", "should preempt low-priority
    StatefulSet", "should delete all pods on scale down to zero"): the StatefulSet's Pods are one
    group, in one Workload named `statefulset-<name>-<hash>` with one pod set `main` of all its
    replicas, admitted as its first Pod appears and run on the flavor's nodes; a higher-priority
    Job preempts the whole group; the StatefulSet's Pods come back gated and run again once the
    Job is done; scaled to zero, its Pods and Workload go."""
    ns = sc.namespace
    sc.apply(priority_class(sc.name("low"), 100), priority_class(sc.name("high"), 1000))
    _, lq = sc.queue("main", 4, within="LowerPriority")
    batch_flavor(sc)
    op = operators.start(extra_args=["--integrations=batch/job,statefulset", *hooks])
    (stored,) = created(sc, statefulset("db", ns, lq, sc.name("low"), 3, "1"))
    template = stored["spec"]["template"]["metadata"]
    assert template["annotations"]["kueue.x-k8s.io/pod-suspending-parent"] == "statefulset"
    assert template["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "3"
    most = [0]

    def db_pods() -> list[dict[str, Any]]:
        listed = sc.kubectl("get", "pods", "-n", ns, "-l", "app=db", "-o", "json")
        return [p for p in json.loads(listed.stdout)["items"] if not p["metadata"].get("deletionTimestamp")]

    def db_running() -> list[dict[str, Any]]:
        most[0] = max(most[0], bound_cpu(sc))
        found = db_pods()
        assert len(found) == 3 and all(p["status"].get("phase") == "Running" for p in found), [
            (p["metadata"]["name"], p["status"].get("phase"), gated(p)) for p in found
        ]
        return found

    started = wait_until(db_running, timeout=60, what="the StatefulSet's Pods running", diagnostics=op.tail)
    labels = nodes(sc)
    assert all(labels[p["spec"]["nodeName"]][POOL_LABEL] == "batch" for p in started)
    (name,) = {p["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-name"] for p in started}
    assert re.fullmatch(r"statefulset-db-[0-9a-f]{5}", name), name
    wl = sc.workload(name)
    assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [("main", 3)]
    assert is_true(wl, "Admitted")

    sc.apply(
        batch_job("urgent", ns, lq, cpu="2", priority_class=sc.name("high"), pod_annotations={COMPLETE_AFTER: "10s"})
    )

    def urgent_running_db_waiting() -> bool:
        most[0] = max(most[0], bound_cpu(sc))
        assert [p["status"].get("phase") for p in pods(sc, "urgent")] == ["Running"]
        found = db_pods()
        assert found and all(gated(p) for p in found), [(p["metadata"]["name"], gated(p)) for p in found]
        return True

    wait_until(urgent_running_db_waiting, what="the urgent Job running, the StatefulSet gated", diagnostics=op.tail)
    wait_until(db_running, timeout=90, what="the StatefulSet running again after the Job", diagnostics=op.tail)
    assert is_true(workload_of(sc, "urgent"), "Finished")
    assert most[0] <= 4, f"{most[0]} cpu bound at once in a queue of 4"

    sc.kubectl("scale", "statefulset", "db", "-n", ns, "--replicas=0")
    wait_until(lambda: not db_pods() and name not in sc.workloads(), what="scaled to zero", diagnostics=op.tail)


@pytest.fixture(scope="module")
def lws_controller(node_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The LeaderWorkerSet controller (built once from the Go module proxy) with its CRDs and
    webhooks. Its webhook configuration is named to sort after the operator's
    (`preemption-operator`), so that its Pod webhook runs after ours, as it runs after Kueue's
    (`kueue-…` before `lws-…`) in a Kueue install: ours must be called again to see a leader's
    group index."""
    from preemption_operator.testing.job_controllers import LwsController

    yield from job_controller(
        LwsController(node_cluster, tmp_path_factory.mktemp("controllers"), webhooks="z-lws-webhooks"),
        "the LeaderWorkerSet controller",
    )


LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"


def leaderworkerset(
    name: str, namespace: str, queue: str, priority: str, replicas: int, size: int, cpu: str
) -> dict[str, Any]:
    def template() -> dict[str, Any]:
        container = {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}
        return {"spec": {"terminationGracePeriodSeconds": 2, "containers": [container]}}

    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {QUEUE_LABEL: queue, "kueue.x-k8s.io/priority-class": priority},
        },
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {"size": size, "leaderTemplate": template(), "workerTemplate": template()},
        },
    }


def test_a_leaderworkerset_is_one_group_per_replica_admitted_preempted_and_made_again(
    sc: Scenario, operators: OperatorPool, hooks: list[str], lws_controller: Any
) -> None:
    """Kueue's leaderworkerset e2e ("should admit group with leader and workers", "should admit
    group with multiple leaders and workers that fits") with the real LeaderWorkerSet controller,
    and preemption as Kueue's serving groups know it (statefulset e2e "should preempt
    low-priority StatefulSet", pod e2e "should allow to preempt the lower priority group"; Kueue
    has no LeaderWorkerSet preemption e2e): each replica (a leader and its worker) is one group in
    its own Workload `leaderworkerset-<name>-<index>-<hash>` with pod sets `leader` 1 and `worker`
    1. With quota for one replica, one group runs on the flavor's nodes and the other waits gated;
    with quota for both, both run. A higher-priority Job preempts one group: its Pods go before
    the quota comes back, the LeaderWorkerSet makes them again gated, and they run again once the
    Job is done. Deleting the LeaderWorkerSet removes its Workloads."""
    ns = sc.namespace
    sc.apply(priority_class(sc.name("low"), 100), priority_class(sc.name("high"), 1000))
    _, lq = sc.queue("main", 2, within="LowerPriority")
    batch_flavor(sc)
    op = operators.start(extra_args=["--integrations=batch/job,leaderworkerset.x-k8s.io/leaderworkerset", *hooks])

    def logs() -> str:
        return f"{op.tail()}\n--- the LeaderWorkerSet controller:\n{lws_controller.tail()}"

    (stored,) = created(sc, leaderworkerset("serve", ns, lq, sc.name("low"), 2, 2, "1"))
    for field, role in (("leaderTemplate", "leader"), ("workerTemplate", "worker")):
        meta = stored["spec"]["leaderWorkerTemplate"][field]["metadata"]
        assert meta["annotations"]["kueue.x-k8s.io/pod-suspending-parent"] == "leaderworkerset.x-k8s.io/leaderworkerset"
        assert meta["annotations"]["kueue.x-k8s.io/pod-group-serving"] == "true"
        assert meta["annotations"]["kueue.x-k8s.io/role-hash"] == role
        assert meta["labels"][QUEUE_LABEL] == lq
    most = [0]

    def serve_pods() -> list[dict[str, Any]]:
        listed = sc.kubectl("get", "pods", "-n", ns, "-l", f"{LWS_NAME}=serve", "-o", "json")
        return [p for p in json.loads(listed.stdout)["items"] if not p["metadata"].get("deletionTimestamp")]

    def by_group() -> dict[str, list[dict[str, Any]]]:
        most[0] = max(most[0], bound_cpu(sc))
        groups: dict[str, list[dict[str, Any]]] = {}
        for pod in serve_pods():
            groups.setdefault(pod["metadata"]["labels"].get(GROUP_INDEX, "?"), []).append(pod)
        return groups

    def states(groups: dict[str, list[dict[str, Any]]]) -> dict[str, list[tuple[str, str, bool]]]:
        return {
            i: sorted((p["metadata"]["name"], p["status"].get("phase", ""), gated(p)) for p in members)
            for i, members in groups.items()
        }

    def running(members: list[dict[str, Any]]) -> bool:
        return len(members) == 2 and all(p["status"].get("phase") == "Running" and not gated(p) for p in members)

    def waiting(members: list[dict[str, Any]]) -> bool:
        return len(members) == 2 and all(gated(p) and not p["spec"].get("nodeName") for p in members)

    def one_running_one_gated() -> dict[str, list[dict[str, Any]]]:
        groups = by_group()
        assert sorted(groups) == ["0", "1"], states(groups)
        assert sorted((running(m), waiting(m)) for m in groups.values()) == [(False, True), (True, False)], states(
            groups
        )
        return groups

    groups = wait_until(one_running_one_gated, timeout=90, what="one replica running, one gated", diagnostics=logs)
    names = {}
    for index, members in groups.items():
        (name,) = {p["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-name"] for p in members}
        assert re.fullmatch(rf"leaderworkerset-serve-{index}-[0-9a-f]{{5}}", name), name
        names[index] = name
        roles = sorted(p["metadata"]["annotations"]["kueue.x-k8s.io/role-hash"] for p in members)
        assert roles == ["leader", "worker"], roles
        assert all(MANAGED not in p["metadata"].get("finalizers", []) for p in members)
    (admitted_index,) = [i for i, m in groups.items() if running(m)]
    labels = nodes(sc)
    assert all(labels[p["spec"]["nodeName"]][POOL_LABEL] == "batch" for p in groups[admitted_index])

    def both_admitted() -> dict[str, dict[str, Any]]:
        wls = sc.wait_admitted(*names.values(), diagnostics=logs)
        return {i: wls[name] for i, name in names.items()}

    waiting_wl = sc.workloads()[names[str(1 - int(admitted_index))]]
    assert not is_true(waiting_wl, "QuotaReserved"), waiting_wl.get("status")

    sc.queue("main", 4, within="LowerPriority")  # room for the other replica

    def all_running() -> dict[str, list[dict[str, Any]]]:
        groups = by_group()
        assert sorted(groups) == ["0", "1"] and all(running(m) for m in groups.values()), states(groups)
        ready = (sc.get("leaderworkersets", "serve").get("status") or {}).get("readyReplicas")
        assert ready == 2, f"readyReplicas {ready}"
        return groups

    wait_until(all_running, timeout=90, what="both replicas running", diagnostics=logs)
    admitted_wls = both_admitted()
    uids = {i: wl["metadata"]["uid"] for i, wl in admitted_wls.items()}
    for wl in admitted_wls.values():
        assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [("leader", 1), ("worker", 1)]
        assert wl["metadata"]["annotations"]["kueue.x-k8s.io/is-group-workload"] == "true"

    sc.apply(
        batch_job("urgent", ns, lq, cpu="2", priority_class=sc.name("high"), pod_annotations={COMPLETE_AFTER: "10s"})
    )

    def urgent_running_one_replica_gated() -> dict[str, list[dict[str, Any]]]:
        assert [p["status"].get("phase") for p in pods(sc, "urgent")] == ["Running"]
        groups = by_group()
        assert sorted((running(m), waiting(m)) for m in groups.values()) == [(False, True), (True, False)], states(
            groups
        )
        return groups

    groups = wait_until(
        urgent_running_one_replica_gated, timeout=90, what="the Job running, one replica gated", diagnostics=logs
    )
    (preempted_index,) = [i for i, m in groups.items() if waiting(m)]
    events = sc.kubectl(
        "get", "events", "-n", ns, "-o", "json",
        f"--field-selector=involvedObject.kind=Workload,involvedObject.name={names[preempted_index]}",
    )  # fmt: skip
    reasons = {e.get("reason") for e in json.loads(events.stdout)["items"]}
    assert {"Preempted", "EvictedDueToPreempted"} <= reasons, reasons

    # The preempted replica's Workload is owned by its Pods only (its LeaderWorkerSet's UID is on
    # none of them). Kueue's, owned by the LeaderWorkerSet, stays (with its Preempted condition).
    # Its Workload is owned by the replica's Pods: the replacements own it, whether the garbage
    # collector removed the old one first (it is made anew) or the replacements were added to it
    # as owners before that (a race between the collector and the LeaderWorkerSet controller).
    def owned_by_the_replacements() -> dict[str, dict[str, Any]]:
        after = sc.workloads()
        owners = {ref["uid"] for ref in after[names[preempted_index]]["metadata"].get("ownerReferences") or []}
        current = {p["metadata"]["uid"] for p in by_group().get(preempted_index, [])}
        assert current and current <= owners, (sorted(current), sorted(owners))
        return after

    after = wait_until(
        owned_by_the_replacements,
        timeout=60,
        what="the preempted replica's Workload owned by its new Pods",
        diagnostics=logs,
    )
    assert after[names[str(1 - int(preempted_index))]]["metadata"]["uid"] == uids[str(1 - int(preempted_index))]
    wait_until(all_running, timeout=120, what="both replicas running again after the Job", diagnostics=logs)
    assert is_true(workload_of(sc, "urgent"), "Finished")
    assert most[0] <= 4, f"{most[0]} cpu bound at once in a queue of 4"

    sc.kubectl("delete", "leaderworkerset", "serve", "-n", ns, "--wait=false")

    def gone() -> bool:
        left = sorted(set(names.values()) & set(sc.workloads()))
        assert not serve_pods() and not left, (len(serve_pods()), left)
        return True

    wait_until(gone, timeout=90, what="the LeaderWorkerSet's Pods and Workloads gone", diagnostics=logs)


# -- waitForPodsReady (issue 30, item 2) ---------------------------------------------------------------


def pods_ready_config(tmp_path: Path, *, block: bool = False, limit: int | None = None) -> str:
    """`run --config` with Kueue's waitForPodsReady: a 6 s timeout, backoff 2 s then 4 s."""
    strategy = {"backoffBaseSeconds": 2, "backoffMaxSeconds": 4}
    if limit is not None:
        strategy["backoffLimitCount"] = limit
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "waitForPodsReady": {"timeout": "6s", "blockAdmission": block, "requeuingStrategy": strategy},
    }
    path = tmp_path / "kueue-config.yaml"
    path.write_text(json.dumps(config))
    return f"--config={path}"


def unschedulable(job_obj: dict[str, Any]) -> dict[str, Any]:
    """Its pods select a node label no node has: kube-scheduler never binds them."""
    job_obj["spec"]["template"]["spec"]["nodeSelector"] = {"example.com/nowhere": "true"}
    return job_obj


def test_pods_not_ready_in_time_are_evicted_requeued_with_backoff_and_deactivated_at_the_limit(
    sc: Scenario, operators: OperatorPool, tmp_path: Path
) -> None:
    """Kueue's waitForPodsReady on pods kube-scheduler cannot place: 6 s after admission the Job is
    evicted (PodsReadyTimeout, its pods deleted, the Job suspended), requeued after its backoff and
    admitted again; a ready Job in the same queue is never evicted; at backoffLimitCount the
    Workload is deactivated with Kueue's message."""
    ns = sc.namespace
    _, lq = sc.queue("main", 8)
    batch_flavor(sc)
    op = operators.start(extra_args=[pods_ready_config(tmp_path, limit=2)])
    sc.apply(
        unschedulable(batch_job("stuck", ns, lq, cpu="1", parallelism=2)),
        batch_job("fine", ns, lq, cpu="1", parallelism=2, pod_annotations={COMPLETE_AFTER: "600s"}),
    )

    def started() -> dict[str, Any]:
        wl = workload_of(sc, "fine")
        ready = condition(wl, "PodsReady") or {}
        assert (ready.get("status"), ready.get("reason"), ready.get("message")) == (
            "True",
            "Started",
            "All pods reached readiness and the workload is running",
        ), wl["status"].get("conditions")
        return wl

    wait_until(started, timeout=60, what="fine's PodsReady=True", diagnostics=op.tail)

    def timed_out(count: int) -> dict[str, Any]:
        wl = workload_of(sc, "stuck")
        assert (wl["status"].get("requeueState") or {}).get("count") == count, wl["status"]
        return wl

    wl = wait_until(lambda: timed_out(1), timeout=60, what="stuck's first timeout", diagnostics=op.tail)
    key = f"{ns}/{wl['metadata']['name']}"
    evicted = condition(wl, "Evicted") or {}
    assert (evicted.get("reason"), evicted.get("message")) == (
        "PodsReadyTimeout",
        f"Exceeded the PodsReady timeout {key}",
    )
    wait_until(lambda: suspended(job(sc, "stuck")), what="stuck suspended", diagnostics=op.tail)

    def requeued_and_admitted_again() -> bool:
        wl = workload_of(sc, "stuck")
        requeued = condition(wl, "Requeued") or {}
        assert (requeued.get("status"), requeued.get("reason")) == ("True", "BackoffFinished"), wl["status"]
        assert is_true(wl, "Admitted") and not is_true(wl, "Evicted"), wl["status"]["conditions"]
        return True

    wait_until(requeued_and_admitted_again, timeout=60, what="stuck requeued and admitted", diagnostics=op.tail)
    wait_until(lambda: timed_out(2), timeout=60, what="stuck's second timeout", diagnostics=op.tail)

    def deactivated() -> dict[str, Any]:
        wl = workload_of(sc, "stuck")
        assert wl["spec"].get("active") is False, wl["spec"]
        evicted = condition(wl, "Evicted") or {}
        assert (evicted.get("reason"), evicted.get("message")) == (
            "DeactivatedDueToRequeuingLimitExceeded",  # Kueue's ReasonWithCause
            "The workload is deactivated due to exceeding the maximum number of re-queuing retries",
        ), wl["status"]["conditions"]
        return wl

    wl = wait_until(deactivated, timeout=60, what="stuck deactivated at its limit", diagnostics=op.tail)
    assert {"reason": "PodsReadyTimeout", "underlyingCause": "WaitForStart", "count": 2} in wl["status"][
        "schedulingStats"
    ]["evictions"]
    assert is_true(workload_of(sc, "fine"), "Admitted") and not is_true(workload_of(sc, "fine"), "Evicted")
    samples = op.samples()
    evictions = {
        (s.labels.get("reason"), s.labels.get("underlying_cause")): s.value
        for s in samples
        if s.name == "kueue_evicted_workloads_total"
    }
    assert evictions.get(("PodsReadyTimeout", "WaitForStart")) == 2, evictions
    assert op.log().count("preemption_operator.controller.decisions: deactivated ") == 1, op.tail()


def test_block_admission_holds_the_next_job_until_the_admitted_ones_pods_are_ready(
    sc: Scenario, operators: OperatorPool, tmp_path: Path
) -> None:
    """With blockAdmission, a Job admitted first whose pods cannot start holds every other Job at
    WaitingForPodsReady; once it is timed out and evicted, the next one is admitted."""
    ns = sc.namespace
    _, lq = sc.queue("main", 8)
    batch_flavor(sc)
    op = operators.start(extra_args=[pods_ready_config(tmp_path, block=True)])
    sc.apply(unschedulable(batch_job("first", ns, lq, cpu="1")))
    wait_until(lambda: is_true(workload_of(sc, "first"), "Admitted"), what="first admitted", diagnostics=op.tail)
    sc.apply(batch_job("second", ns, lq, cpu="1", pod_annotations={COMPLETE_AFTER: "600s"}))

    def held() -> bool:
        reserved = condition(workload_of(sc, "second"), "QuotaReserved") or {}
        assert (reserved.get("status"), reserved.get("reason"), reserved.get("message")) == (
            "False",
            "WaitingForPodsReady",
            "waiting for all admitted workloads to be in PodsReady condition",
        ), reserved
        return True

    wait_until(held, what="second held at WaitingForPodsReady", diagnostics=op.tail)
    wait_until(
        lambda: is_true(workload_of(sc, "second"), "Admitted"),
        timeout=60,
        what="second admitted once first timed out",
        diagnostics=op.tail,
    )
    assert (condition(workload_of(sc, "first"), "Evicted") or {}).get("reason") == "PodsReadyTimeout"


# -- AdmissionChecks (issue 30, item 4) ---------------------------------------------------------------


def test_an_admission_check_gates_admission_its_retry_requeues_and_its_rejection_deactivates(
    sc: Scenario, operators: OperatorPool
) -> None:
    """A ClusterQueue with an AdmissionCheck, and a stand-in for the check's controller
    (tests/e2e/checks.py) answering through the API. While the check is not Active the queue
    admits nothing (AdmissionCheckInactive). A Job then reserves quota but stays suspended until
    the check is Ready; its podSetUpdates reach its pods, which kube-scheduler binds. Retry evicts
    the other Job's Workload, gives its quota back and requeues it (its check back to Pending,
    counting the retry); Rejected deactivates it with Kueue's Event."""
    ns = sc.namespace
    batch_flavor(sc)
    gate = CheckController(sc)
    gate.create(active=False)
    cq_name = sc.name("gated")
    cq = cluster_queue(cq_name, 4, flavor=sc.flavor)
    cq["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": gate.name}]}
    sc.apply(
        cq,
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "gated", "namespace": ns},
            "spec": {"clusterQueue": cq_name},
        },
    )
    op = operators.start()

    def queue_active(want: str, reason: str) -> bool:
        got = condition(sc.get("clusterqueues", cq_name, namespaced=False), "Active") or {}
        assert (got.get("status"), got.get("reason")) == (want, reason), got
        return True

    wait_until(lambda: queue_active("False", "AdmissionCheckInactive"), what="queue inactive", diagnostics=op.tail)
    assert (condition(sc.get("clusterqueues", cq_name, namespaced=False), "Active") or {})["message"] == (
        f"Can't admit new workloads: references inactive AdmissionCheck(s): {gate.name}."
    )
    gate.set_active(True)
    wait_until(lambda: queue_active("True", "Ready"), what="queue active", diagnostics=op.tail)

    sc.apply(batch_job("ready", ns, "gated", cpu="2", pod_annotations={COMPLETE_AFTER: "600s"}))

    def waiting(job_name: str) -> dict[str, Any]:
        wl = workload_of(sc, job_name)
        assert is_true(wl, "QuotaReserved"), wl.get("status")
        admitted = condition(wl, "Admitted") or {}
        assert (admitted.get("status"), admitted.get("reason")) == ("False", "UnsatisfiedAdmissionChecks"), admitted
        assert [(c["name"], c["state"]) for c in wl["status"]["admissionChecks"]] == [(gate.name, "Pending")]
        return wl

    wl = wait_until(lambda: waiting("ready"), what="ready reserved, waiting for its check", diagnostics=op.tail)
    assert suspended(job(sc, "ready")) and pods(sc, "ready") == []
    gate.answer(wl["metadata"]["name"], "Pending", "waiting for capacity")

    def told() -> bool:
        events = [e for e in sc.events_about("Job", "ready", ns) if e["reason"] == "UpdatedAdmissionCheck"]
        assert [e["message"] for e in events] == [f"{gate.name}: waiting for capacity"], events
        return True

    wait_until(told, what="the Job told what its check says", diagnostics=op.tail)
    gate.answer(
        wl["metadata"]["name"],
        "Ready",
        "capacity provisioned",
        podSetUpdates=[{"name": "main", "labels": {"example.com/provisioned": "yes"}}],
    )

    def running() -> list[dict[str, Any]]:
        assert is_true(workload_of(sc, "ready"), "Admitted")
        found = pods(sc, "ready")
        assert found and all(p["spec"].get("nodeName") for p in found), [p["spec"].get("nodeName") for p in found]
        return found

    started = wait_until(running, timeout=60, what="ready admitted and its pods bound", diagnostics=op.tail)
    assert all(p["metadata"]["labels"].get("example.com/provisioned") == "yes" for p in started)
    assert all(nodes(sc)[p["spec"]["nodeName"]].get(POOL_LABEL) == "batch" for p in started)
    admitted_events = [e for e in sc.events_about("Workload", wl["metadata"]["name"], ns) if e["reason"] == "Admitted"]
    assert [
        e["message"].startswith(f"Admitted by ClusterQueue {cq_name}, wait time since reservation was ")
        for e in admitted_events
    ] == [True]

    sc.apply(batch_job("retried", ns, "gated", cpu="2", pod_annotations={COMPLETE_AFTER: "600s"}))
    wl = wait_until(lambda: waiting("retried"), what="retried reserved", diagnostics=op.tail)
    name = wl["metadata"]["name"]
    first_reservation = (condition(wl, "QuotaReserved") or {})["lastTransitionTime"]
    gate.answer(name, "Retry", "no capacity yet")

    def requeued_and_reserved_again() -> dict[str, Any]:
        wl = workload_of(sc, "retried")
        stats = (wl["status"].get("schedulingStats") or {}).get("evictions") or []
        assert {"reason": "AdmissionCheck", "underlyingCause": "", "count": 1} in stats, wl["status"]
        evicted = condition(wl, "Evicted") or {}
        assert evicted.get("status") == "False", evicted  # the eviction ended with the new reservation
        assert (
            is_true(wl, "QuotaReserved")
            and (condition(wl, "QuotaReserved") or {})["lastTransitionTime"] >= first_reservation
        )
        (entry,) = wl["status"]["admissionChecks"]
        assert (entry["state"], entry.get("retryCount"), entry["message"]) == (
            "Pending",
            1,
            "Reset to Pending after eviction. Previously: Retry",
        ), entry
        return wl

    wl = wait_until(
        requeued_and_reserved_again, timeout=60, what="retried evicted and reserved again", diagnostics=op.tail
    )
    evictions = [e for e in sc.events_about("Workload", name, ns) if e["reason"] == "EvictedDueToAdmissionCheck"]
    assert [e["message"] for e in evictions] == [
        f'Evicted due to AdmissionCheck in Retry state: "{gate.name}" (no capacity yet)'
    ]
    assert suspended(job(sc, "retried"))

    gate.answer(name, "Rejected", "will never fit")

    def deactivated() -> dict[str, Any]:
        wl = workload_of(sc, "retried")
        assert wl["spec"].get("active") is False, wl["spec"]
        evicted = condition(wl, "Evicted") or {}
        assert (evicted.get("reason"), evicted.get("message")) == (
            "DeactivatedDueToAdmissionCheck",
            f'The workload is deactivated due to AdmissionCheck in Rejected state: "{gate.name}" (will never fit)',
        ), wl["status"]["conditions"]
        assert not is_true(wl, "QuotaReserved")
        return wl

    wait_until(deactivated, timeout=60, what="retried deactivated", diagnostics=op.tail)
    rejected = [e for e in sc.events_about("Workload", name, ns) if e["reason"] == "AdmissionCheckRejected"]
    assert [(e["type"], e["message"]) for e in rejected] == [
        ("Warning", f'Deactivated due to AdmissionCheck in Rejected state: "{gate.name}" (will never fit)')
    ]
    assert is_true(workload_of(sc, "ready"), "Admitted")  # the admitted one never moved
    samples = {
        (s.labels.get("reason"), s.labels.get("underlying_cause")): s.value
        for s in op.samples()
        if s.name == "kueue_evicted_workloads_total" and s.labels.get("cluster_queue") == cq_name
    }
    assert samples.get(("AdmissionCheck", "")) == 1 and samples.get(("Deactivated", "AdmissionCheck")) == 1, samples


def test_a_job_past_its_maximum_execution_time_is_deactivated_and_stopped(
    sc: Scenario, operators: OperatorPool
) -> None:
    """A Job labelled kueue.x-k8s.io/max-exec-time-seconds: its Workload carries the limit, is
    admitted and its pods run; once it has run that long, the Workload is marked, made inactive
    and evicted with Kueue's reason, message and Warning Event, and the Job is suspended again."""
    ns = sc.namespace
    batch_flavor(sc)
    cq_name = sc.name("timed")
    sc.apply(
        cluster_queue(cq_name, 4, flavor=sc.flavor),
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "timed", "namespace": ns},
            "spec": {"clusterQueue": cq_name},
        },
    )
    op = operators.start()
    capped = batch_job("capped", ns, "timed", cpu="1", pod_annotations={COMPLETE_AFTER: "600s"})
    capped["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] = "4"
    sc.apply(capped)

    def running() -> dict[str, Any]:
        wl = workload_of(sc, "capped")
        assert wl["spec"].get("maximumExecutionTimeSeconds") == 4, wl["spec"]
        assert is_true(wl, "Admitted"), wl.get("status")
        found = pods(sc, "capped")
        assert found and all(p["spec"].get("nodeName") for p in found)
        return wl

    wl = wait_until(running, timeout=60, what="capped admitted and running", diagnostics=op.tail)
    name = wl["metadata"]["name"]

    def deactivated() -> dict[str, Any]:
        wl = workload_of(sc, "capped")
        assert wl["spec"].get("active") is False, wl["spec"]
        evicted = condition(wl, "Evicted") or {}
        assert (evicted.get("status"), evicted.get("reason"), evicted.get("message")) == (
            "True",
            "DeactivatedDueToMaximumExecutionTimeExceeded",
            "The workload is deactivated due to exceeding the maximum execution time",
        ), wl["status"]["conditions"]
        assert not is_true(wl, "QuotaReserved")
        assert suspended(job(sc, "capped"))
        return wl

    wait_until(deactivated, timeout=60, what="capped deactivated and its Job suspended", diagnostics=op.tail)
    exceeded = [e for e in sc.events_about("Workload", name, ns) if e["reason"] == "MaximumExecutionTimeExceeded"]
    assert [(e["type"], e["message"]) for e in exceeded] == [("Warning", "The maximum execution time (4s) exceeded")]
    wait_until(lambda: pods(sc, "capped") == [], timeout=60, what="capped's pods gone", diagnostics=op.tail)
