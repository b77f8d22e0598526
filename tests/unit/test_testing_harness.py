"""preemption_operator.testing, the harness the e2e tests, the benchmarks and hack/ share: it
imports without pytest, finds the project's CRDs or says why not, and the scripts reach it as an
installed package, never by editing sys.path."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preemption_operator.testing.control_plane import CRDS_DIR, project_crd_files

ROOT = Path(__file__).resolve().parents[2]
MODULES = ["chaos", "cluster", "control_plane", "fault_proxy", "operator_process", "workload_status"]


def test_the_harness_imports_without_pytest() -> None:
    imports = "; ".join(f"import preemption_operator.testing.{m}" for m in MODULES)
    probe = f"import sys; {imports}; print('pytest' in sys.modules)"
    answer = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert answer.stdout.strip() == "False"


def test_project_crd_files_are_the_crds_beside_the_package() -> None:
    files = project_crd_files()
    assert CRDS_DIR == ROOT / "crds"
    assert files == sorted(files)
    assert {f.name for f in files} >= {"kueue.x-k8s.io_workloads.yaml", "kueue.x-k8s.io_clusterqueues.yaml"}
    assert all(f.name != "kustomization.yaml" for f in files)


def test_missing_or_empty_crds_are_an_error_that_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"pip install -e \."):
        project_crd_files(tmp_path / "absent")
    (tmp_path / "kustomization.yaml").write_text("resources: []\n")
    with pytest.raises(FileNotFoundError, match="make crds"):
        project_crd_files(tmp_path)


@pytest.mark.parametrize(
    "script", sorted([*ROOT.glob("benchmarks/**/*.py"), *ROOT.glob("hack/*.py")]), ids=lambda p: p.name
)
def test_scripts_do_not_edit_sys_path(script: Path) -> None:
    assert not re.search(r"sys\.path\.(insert|append|extend)|sys\.path\s*[+]?=", script.read_text())


def test_cluster_nodes_carry_hostname_and_rack_labels_in_contiguous_racks() -> None:
    from preemption_operator.testing.cluster import BLOCK_LABEL, HOSTNAME_LABEL, RACK_LABEL, Nodes

    shape = Nodes.parse(8, "cpu=4,nvidia.com/gpu=2", "blocks=2,racks-per-block=2")
    objects = shape.objects()
    assert [o["metadata"]["name"] for o in objects] == [f"node-{i:04d}" for i in range(8)]
    labels = [o["metadata"]["labels"] for o in objects]
    assert [lab[RACK_LABEL] for lab in labels] == [
        "rack-0",
        "rack-0",
        "rack-1",
        "rack-1",
        "rack-2",
        "rack-2",
        "rack-3",
        "rack-3",
    ]
    assert [lab[BLOCK_LABEL] for lab in labels] == ["block-0"] * 4 + ["block-1"] * 4
    assert all(lab[HOSTNAME_LABEL] == o["metadata"]["name"] for lab, o in zip(labels, objects, strict=True))
    assert objects[0]["status"]["capacity"] == {"cpu": "4", "nvidia.com/gpu": "2", "pods": "110"}
    assert RACK_LABEL not in Nodes.parse(2).objects()[0]["metadata"]["labels"]


@pytest.mark.parametrize(
    ("capacity", "topology", "message"),
    [
        ("cpu", "", "--node-capacity: 'cpu' is not key=value"),
        ("", "blocks=2,racks=3", "--topology: unknown key 'racks'"),
        ("", "blocks=two", "--topology: blocks and racks-per-block are whole numbers"),
        ("", "blocks=4,racks-per-block=4", "--nodes 8 cannot hold 4 block(s) of 4 rack(s) with a node each"),
    ],
)
def test_cluster_flags_that_make_no_sense_say_why(capacity: str, topology: str, message: str) -> None:
    from preemption_operator.testing.cluster import Nodes

    with pytest.raises(ValueError, match=re.escape(message)):
        Nodes.parse(8, capacity, topology)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--topology", "blocks=x"], "--topology: blocks and racks-per-block are whole numbers"),
        (["--controllers", "jobset,spark"], "unknown controller(s) spark: known are jobset, lws, kuberay"),
    ],
)
def test_the_cluster_script_refuses_bad_flags_before_starting_anything(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    script = ROOT / "hack" / "cluster.py"
    run = subprocess.run(
        [sys.executable, str(script), "--kubeconfig", str(tmp_path / "k"), *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert message in run.stderr
    assert not (tmp_path / "k").exists()


def _pod(name: str, cpu: str, node: str | None = None, phase: str = "Running", deleting: bool = False) -> dict:
    meta: dict = {"name": name, "namespace": "other", "resourceVersion": "1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def test_the_chaos_monitor_flags_a_node_whose_bound_pods_exceed_its_cpu_once_per_episode() -> None:
    """I6, fed states as its watches would: pods of any namespace bound to a node count (being
    deleted included) until they finish; unbound and finished pods do not."""
    from preemption_operator.testing.chaos import InvariantMonitor, Topology

    monitor = InvariantMonitor(client=None, topology=Topology("t"))  # type: ignore[arg-type]
    node = {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4"}}}
    monitor._relist_nodes([node])
    monitor._relist_pods([_pod("a", "2", "n1"), _pod("pending", "8")])
    monitor._pod_event("ADDED", _pod("b", "1500m", "n1", deleting=True))
    monitor._pod_event("MODIFIED", _pod("done", "3", "n1", phase="Succeeded"))
    assert not monitor.violations and monitor.max_node_fill == pytest.approx(3.5 / 4)

    monitor._pod_event("ADDED", _pod("c", "1", "n1"))
    monitor._pod_event("MODIFIED", _pod("c", "1", "n1"))  # the same episode: one violation
    (violation,) = monitor.violations
    assert violation.invariant == "I6" and violation.subject == "node n1"
    assert "4.5 cpu > 4 allocatable" in violation.message and "other/b=1.5cpu" in violation.message

    monitor._pod_event("DELETED", _pod("b", "1500m", "n1", deleting=True))  # its grace period is over
    monitor._pod_event("ADDED", _pod("d", "1", "n1"))  # back at 4: a new episode could start
    monitor._pod_event("ADDED", _pod("e", "1", "n1"))
    assert [v.invariant for v in monitor.violations] == ["I6", "I6"]


def test_the_chaos_driver_finishes_only_pods_kwok_has_started() -> None:
    """A Job's pods are finished by hand only once Running: kwok's stage that starts a bound
    Pending pod would otherwise overwrite the hand-written Succeeded with Running, and the
    scheduler, which had freed the pod's node when it turned Succeeded, would find it bound again
    next to the pod it placed meanwhile (seen as an I6 violation in the chaos suite)."""
    from preemption_operator.testing.chaos import InvariantMonitor, Topology, WorkloadDriver

    class Client:
        def __init__(self, pods: list[dict]) -> None:
            self.pods, self.patched = pods, []

        def list_items(self, path: str) -> tuple[list[dict], str]:
            return self.pods, "1"

        def request(self, method: str, path: str, body: Any = None, **_: Any) -> tuple[int, Any]:
            self.patched.append(path.split("/pods/")[1])
            return 200, {}

    monitor = InvariantMonitor(client=None, topology=Topology("t"))  # type: ignore[arg-type]
    pending = Client([_pod("bound-not-started", "1", "n1", phase="Pending"), _pod("unbound", "1", phase="Pending")])
    driver = WorkloadDriver(pending, Topology("t"), monitor)  # type: ignore[arg-type]
    assert driver.finish_job("ns", "j") is False and pending.patched == []

    started = Client([_pod("running", "1", "n1"), _pod("done", "1", "n1", phase="Succeeded")])
    driver = WorkloadDriver(started, Topology("t"), monitor)  # type: ignore[arg-type]
    assert driver.finish_job("ns", "j") is True and started.patched == ["running/status"]


def _queued_pod(name: str, cpu: str, labels: dict, node: str | None = None, **kw: Any) -> dict:
    pod = _pod(name, cpu, node, **kw)
    pod["metadata"].update(namespace="t-ns0", labels=labels)
    return pod


def test_the_chaos_monitor_counts_every_pod_that_runs_against_its_queue_whatever_made_it() -> None:
    """I5: a bound, unfinished pod of the run counts against the ClusterQueue of its queue: a
    plain Pod's or a group's own queue label, a JobSet's or a Job's (read from it once); a gated,
    unbound Pod does not, nor one being deleted before it was bound. Over the queue's bound (b1:
    6 cpu, no borrowing) it is a violation; a pod that runs on no known queue is one too."""
    from preemption_operator.testing.chaos import InvariantMonitor, Topology

    class Client:
        def __init__(self) -> None:
            self.gets: list[str] = []

        def get(self, path: str) -> dict | None:
            self.gets.append(path)
            if path.endswith("/jobsets/s1"):
                return {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "b1"}}}
            if path.endswith("/jobs/j1"):
                return {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "b1"}}}
            return None

    client = Client()
    monitor = InvariantMonitor(client=client, topology=Topology("t"))  # type: ignore[arg-type]
    queued = {"kueue.x-k8s.io/queue-name": "b1"}
    monitor._relist_pods([_queued_pod("plain", "1", queued, "n1")])
    group = {**queued, "kueue.x-k8s.io/pod-group-name": "g"}
    monitor._pod_event("ADDED", _queued_pod("g-0", "1", group, "n1"))
    monitor._pod_event("ADDED", _queued_pod("g-1", "1", group, "n2"))
    jobset = {"jobset.sigs.k8s.io/jobset-name": "s1", "batch.kubernetes.io/job-name": "s1-r0-0"}
    monitor._pod_event("ADDED", _queued_pod("s1-r0-0-x", "1", jobset, "n3"))
    monitor._pod_event("MODIFIED", _queued_pod("s1-r0-0-x", "1", jobset, "n3"))
    monitor._pod_event("ADDED", _queued_pod("j1-x", "1", {"batch.kubernetes.io/job-name": "j1"}, "n3"))
    monitor._pod_event("ADDED", _queued_pod("gated", "4", queued, phase="Pending"))
    monitor._pod_event("ADDED", _queued_pod("never-bound", "4", queued, phase="Pending", deleting=True))
    assert monitor._pods == {
        "t-ns0/plain": ("t-b1", 1000),
        "t-ns0/g-0": ("t-b1", 1000),
        "t-ns0/g-1": ("t-b1", 1000),
        "t-ns0/s1-r0-0-x": ("t-b1", 1000),
        "t-ns0/j1-x": ("t-b1", 1000),
    }
    assert client.gets.count("/apis/jobset.x-k8s.io/v1alpha2/namespaces/t-ns0/jobsets/s1") == 1  # read once
    assert not monitor.violations

    monitor._pod_event("MODIFIED", _queued_pod("gated", "4", queued, "n4"))  # bound: 6 + 3 cpu > 6
    (over,) = monitor.violations
    assert over.invariant == "I5" and over.subject == "ClusterQueue t-b1" and "9 cpu > 6 allowed" in over.message

    monitor._pod_event("ADDED", _queued_pod("nobody", "1", {"batch.kubernetes.io/job-name": "gone"}, "n5"))
    assert monitor.violations[-1].subject == "pods of no queue" and "t-ns0/nobody" in monitor.violations[-1].message


def test_the_chaos_driver_tries_a_create_again_while_the_webhook_cannot_be_called() -> None:
    """A Pod refused because the API server could not call the operator's webhook (the operator
    is down, failurePolicy Fail) is created on a later tick, as a user would: no error."""
    from preemption_operator.testing.chaos import DriverConfig, InvariantMonitor, Topology, WorkloadDriver

    class Client:
        def __init__(self) -> None:
            self.answers = [
                (500, {"message": 'Internal error occurred: failed calling webhook "mpod": connection refused'}),
                (201, {}),
            ]
            self.posted: list[str] = []

        def request(self, method: str, path: str, body: Any = None, **_: Any) -> tuple[int, Any]:
            self.posted.append(body["metadata"]["name"])
            return self.answers.pop(0)

    client = Client()
    monitor = InvariantMonitor(client=None, topology=Topology("t"))  # type: ignore[arg-type]
    only_pods = DriverConfig(jobs=0, pods=1, pod_groups=0, jobsets=0)
    driver = WorkloadDriver(client, Topology("t"), monitor, only_pods)  # type: ignore[arg-type]
    key = driver.create(priority=0)
    assert driver.stats["create-refused-no-webhook"] == 1 and not driver.stats["created-pods"]
    driver._flush()
    assert driver.stats["created-pods"] == 1 and not driver._outbox and not driver.errors
    assert client.posted == [key.split("/")[1]] * 2


def test_the_chaos_drivers_first_creates_are_one_of_each_kind_of_its_load() -> None:
    """A chaos test of 41 creates made one JobSet, deleted while pending, and failed its check
    that every kind of the load finished: the load now begins with one of each kind it makes
    (those with a share), in an order the seed decides, then draws."""
    from preemption_operator.testing.chaos import DriverConfig, InvariantMonitor, Topology, WorkloadDriver

    class Client:
        def request(self, method: str, path: str, body: Any = None, **_: Any) -> tuple[int, Any]:
            return 201, {}

    monitor = InvariantMonitor(client=None, topology=Topology("t"))  # type: ignore[arg-type]
    prefixes = {"j": "job", "p": "pod", "g": "group", "s": "jobset", "w": "workload"}

    def kinds(config: DriverConfig, seed: int, creates: int) -> list[str]:
        driver = WorkloadDriver(Client(), Topology("t"), monitor, config, seed=seed)  # type: ignore[arg-type]
        return [prefixes[driver.create(priority=0).split("/")[1][0]] for _ in range(creates)]

    orders = {tuple(kinds(DriverConfig(), seed, 5)) for seed in range(6)}
    assert all(sorted(order) == ["group", "job", "jobset", "pod", "workload"] for order in orders)
    assert len(orders) > 1  # the seed decides the order
    no_jobsets = DriverConfig(jobsets=0.0)
    assert sorted(kinds(no_jobsets, 0, 4)) == ["group", "job", "pod", "workload"]
    only_pods = DriverConfig(jobs=0, pods=1, pod_groups=0, jobsets=0)
    assert kinds(only_pods, 0, 3) == ["pod"] * 3


def test_the_chaos_driver_makes_again_the_pods_the_operator_deleted_but_not_those_it_deleted() -> None:
    """Pods of a group the operator deleted (a preemption) are made again, the same, once gone;
    after the driver deleted the group itself, never."""
    from preemption_operator.testing.chaos import DriverConfig, InvariantMonitor, Topology, WorkloadDriver

    class Client:
        def __init__(self) -> None:
            self.calls: list[tuple[str, str]] = []

        def request(self, method: str, path: str, body: Any = None, **_: Any) -> tuple[int, Any]:
            self.calls.append((method, body["metadata"]["name"] if body else path))
            return (201, {}) if method == "POST" else (200, {"items": [{}]})

    class Monitor(InvariantMonitor):
        live: dict[str, dict] = {}

        def pods(self) -> dict[str, dict]:
            return dict(self.live)

        def current(self) -> dict[str, dict]:
            return {}

    client = Client()
    monitor = Monitor(client=None, topology=Topology("t"))  # type: ignore[arg-type]
    groups = DriverConfig(jobs=0, pods=0, pod_groups=1, jobsets=0, remake_deleted=1.0)
    driver = WorkloadDriver(client, Topology("t"), monitor, groups)  # type: ignore[arg-type]
    group = driver.create(priority=0)
    ns, name = group.split("/")
    members = [n for _, n in client.calls]
    assert len(members) in (2, 3) and all(m.startswith(f"{name}-") for m in members)
    monitor.live = {f"{ns}/{m}": {} for m in members}
    driver._remake_deleted()
    monitor.live.pop(f"{ns}/{members[0]}")  # deleted by the operator
    client.calls.clear()
    driver._remake_deleted()
    assert client.calls == [("POST", members[0])] and driver.stats["remade-pods"] == 1

    group_workload = {"metadata": {"name": name, "annotations": {"kueue.x-k8s.io/is-group-workload": "true"}}}
    monitor.current = lambda: {group: group_workload}  # type: ignore[method-assign]
    client.calls.clear()
    assert driver.delete(group)
    assert client.calls == [
        ("DELETE", f"/api/v1/namespaces/{ns}/pods?labelSelector=kueue.x-k8s.io/pod-group-name%3D{name}")
    ]
    monitor.live = {}
    client.calls.clear()
    driver._remake_deleted()
    assert client.calls == []


def test_a_workloads_reservation_leaves_out_its_reclaimable_pods() -> None:
    """Succeeded Pods of a group free their quota (Kueue's reclaimablePods, which the engine
    subtracts): the chaos monitor's I1 counts what the engine counts, so a queue refilled with
    that quota is not reported as over-admitted."""
    from preemption_operator.testing.workload_status import reservation

    wl = {
        "spec": {"podSets": [{"name": "a", "count": 2}, {"name": "b", "count": 1}]},
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "True"}],
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [
                    {"name": "a", "count": 2, "resourceUsage": {"cpu": "2"}},
                    {"name": "b", "count": 1, "resourceUsage": {"cpu": "2"}},
                ],
            },
        },
    }
    assert reservation(wl) == ("cq", 4000)
    wl["status"]["reclaimablePods"] = [{"name": "a", "count": 1}]
    assert reservation(wl) == ("cq", 3000)
    wl["status"]["reclaimablePods"] = [{"name": "a", "count": 2}, {"name": "b", "count": 1}]
    assert reservation(wl) == ("cq", 0)

    # The chaos suite's unsettled queue that was settled: a group of 3 admitted again with 2 pods
    # (one had succeeded); a second one succeeds. Kueue scales the admitted usage down to the
    # spec's count after reclaim (3 - 2 = 1 pod), not the admitted count less reclaimable (0).
    group = {
        "spec": {"podSets": [{"name": "g", "count": 3}]},
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "True"}],
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [{"name": "g", "count": 2, "resourceUsage": {"cpu": "2"}}],
            },
            "reclaimablePods": [{"name": "g", "count": 1}],
        },
    }
    assert reservation(group) == ("cq", 2000)  # 2 pods after reclaim: the admitted 2 still run
    group["status"]["reclaimablePods"] = [{"name": "g", "count": 2}]
    assert reservation(group) == ("cq", 1000)


def test_an_i5_violation_shows_the_history_of_the_pods_no_reservation_accounts_for() -> None:
    """The chaos suite's I5 failures said which pods ran and which Workloads reserved, but not how
    the odd pod and its Workload got there: the violation now carries the observed states of each
    pod whose Workload reserves nothing in the queue (and of that Workload), and their names, so
    the failure shows the operators' log lines about them."""
    from preemption_operator.testing.chaos import InvariantMonitor, Topology

    def workload(name: str, rv: str, cpu: str | None, *flags: str) -> dict:
        conditions = [{"type": flag, "status": "True"} for flag in flags]
        status: dict = {"conditions": conditions}
        if cpu is not None:
            conditions.append({"type": "QuotaReserved", "status": "True"})
            assignment = {"name": "main", "count": 1, "resourceUsage": {"cpu": cpu}}
            status["admission"] = {"clusterQueue": "t-b1", "podSetAssignments": [assignment]}
        return {
            "kind": "Workload",
            "metadata": {"name": name, "namespace": "t-ns0", "uid": name, "resourceVersion": rv},
            "spec": {"queueName": "b1", "podSets": [{"name": "main", "count": 1}]},
            "status": status,
        }

    def pod(name: str, cpu: str, of: str, **kw: Any) -> dict:
        out = _queued_pod(name, cpu, {"kueue.x-k8s.io/queue-name": "b1"}, "n1", **kw)
        out["metadata"]["annotations"] = {"kueue.x-k8s.io/workload": of}
        return out

    monitor = InvariantMonitor(client=None, topology=Topology("t"))  # type: ignore[arg-type]

    def job(rv: str, suspend: bool, **meta: Any) -> dict:
        owner = {"kind": "JobSet", "name": "js", "uid": "0123456789", "controller": True}
        return {
            "kind": "Job",
            "metadata": {"name": "jb", "namespace": "t-ns0", "resourceVersion": rv, "ownerReferences": [owner], **meta},
            "spec": {"suspend": suspend},
            "status": {"active": 0 if suspend else 1},
        }

    monitor = InvariantMonitor(client=None, topology=Topology("t"))  # type: ignore[arg-type]
    monitor._relist_jobs([job("5", True, creationTimestamp="2026-12-05T10:17:55Z")])
    monitor._job_event("MODIFIED", job("14", False, deletionTimestamp="2026-12-05T10:17:56Z"))
    monitor._job_event("ADDED", {"kind": "Job", "metadata": {"name": "jb", "namespace": "other"}})
    monitor._event("ADDED", workload("wa", "10", "4"))
    monitor._event("ADDED", workload("wb", "11", "2"))
    monitor._pod_event("ADDED", pod("a", "4", "wa"))
    monitor._pod_event("ADDED", pod("b", "2", "wb"))
    deleting = pod("b", "2", "wb", deleting=True)
    deleting["metadata"]["labels"]["batch.kubernetes.io/job-name"] = "jb"
    monitor._pod_event("MODIFIED", deleting)
    monitor._event("MODIFIED", workload("wb", "12", None, "Evicted"))  # given back while its pod runs
    assert not monitor.violations
    monitor._event("ADDED", workload("wc", "13", "1"))
    monitor._pod_event("ADDED", pod("c", "1", "wc"))  # 4 + 2 + 1 > 6

    (over,) = monitor.violations
    assert over.invariant == "I5" and "7 cpu > 6 allowed" in over.message
    assert set(over.names) == {"b", "wb"}
    shown = over.message.split("pods no reserving Workload accounts for", 1)[1]
    assert "pod t-ns0/b:" in shown and "Workload t-ns0/wb:" in shown
    assert "pod t-ns0/a" not in shown and "pod t-ns0/c" not in shown
    assert "(Running n1 deleting) of wb" in shown
    assert "rv 11: ADDED (2 cpu in t-b1; QuotaReserved)" in shown
    assert "rv 12: MODIFIED (no reservation; Evicted)" in shown
    # The pod's Job, as observed: a JobSet's child that outlived its JobSet.
    assert "Job t-ns0/jb:" in shown
    assert "rv 5: LISTED (suspended; of JobSet js uid 01234567; made 2026-12-05T10:17:55Z)" in shown
    assert "rv 14: MODIFIED (running; active 1; deleting; of JobSet js uid 01234567;" in shown
    assert "Job other/jb" not in str(monitor._histories)  # not of the run's namespaces


def test_a_queue_reserving_other_cpu_than_its_workloads_names_each_holder() -> None:
    """The chaos suite's I4 failure seen once (a ClusterQueue's status 1 cpu above its Workloads,
    counts equal) said only the totals; it now names each holder, with what may explain a
    difference (pods given back, an eviction under way, a deletion)."""
    from preemption_operator.testing.chaos import status_problems

    def held(name: str, cpu: str, **status: Any) -> dict[str, Any]:
        return {
            "kind": "Workload",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 2}]},
            "status": {
                "conditions": [{"type": "QuotaReserved", "status": "True"}],
                "admission": {
                    "clusterQueue": "cq",
                    "podSetAssignments": [{"name": "main", "count": 2, "resourceUsage": {"cpu": cpu}}],
                },
                **status,
            },
        }

    queue = {
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "status": {
            "pendingWorkloads": 0,
            "reservingWorkloads": 2,
            "admittedWorkloads": 2,
            "flavorsReservation": [{"name": "f", "resources": [{"name": "cpu", "total": "7"}]}],
        },
    }
    objects = [queue, held("a", "4"), held("b", "4", reclaimablePods=[{"name": "main", "count": 1}])]
    (problem,) = status_problems(objects, lambda ns, lq: "cq")
    assert problem == (
        "ClusterQueue cq flavorsReservation 7 cpu, Workloads hold 6 (ns/a 4 cpu; ns/b 2 cpu reclaimable main=1)"
    )
    queue["status"]["flavorsReservation"][0]["resources"][0]["total"] = "6"
    assert status_problems(objects, lambda ns, lq: "cq") == []


def _monitored_workload(
    name: str, rv: int, cq: str, cpu: int | None, *, uid: str = "", preempted_for: str = ""
) -> dict[str, Any]:
    """A Workload of the chaos topology "t" as the monitor's watch brings it: holding `cpu` in
    ClusterQueue t-`cq` (None: no quota), marked Evicted for the preemptor `preempted_for`."""
    conditions: list[dict[str, Any]] = []
    status: dict[str, Any] = {"conditions": conditions}
    if cpu is not None:
        conditions.append({"type": "QuotaReserved", "status": "True"})
        assignment = {"name": "main", "count": 1, "resourceUsage": {"cpu": str(cpu)}}
        status["admission"] = {"clusterQueue": f"t-{cq}", "podSetAssignments": [assignment]}
    if preempted_for:
        message = f"Preempted to accommodate a workload (UID: {preempted_for}, JobUID: UNKNOWN) due to x"
        conditions.append({"type": "Evicted", "status": "True", "reason": "Preempted", "message": message})
        conditions.append({"type": "Preempted", "status": "True", "reason": "InCohort", "message": message})
    meta = {"name": name, "namespace": "t-ns0", "uid": uid or name, "resourceVersion": str(rv)}
    return {"kind": "Workload", "metadata": meta, "spec": {"queueName": cq}, "status": status}


def test_i1_leaves_out_quota_on_its_way_back_but_never_lets_a_preemptor_ahead_of_its_victims() -> None:
    """The chaos suite's over-admitted cohort (17 cpu of 16): as Kueue does, the operator admitted
    a small workload into the room a victim under way frees beyond its preemptor's need, while the
    victim still held its quota. I1 counts the quota of Workloads not being evicted; a Workload
    that takes quota is never marked Evicted, and the preemptor itself is held to every
    reservation while its victims hold theirs. I5 leaves the victim's pods out alike."""
    from preemption_operator.testing.chaos import InvariantMonitor, Topology

    def pod(name: str, cpu: str, of: str, queue: str = "a1") -> dict:
        out = _queued_pod(name, cpu, {"kueue.x-k8s.io/queue-name": queue}, "n1")
        out["metadata"]["annotations"] = {"kueue.x-k8s.io/workload": of}
        return out

    workload = _monitored_workload
    monitor = InvariantMonitor(client=None, topology=Topology("t"))  # type: ignore[arg-type]
    # Cohort alpha: a1 6 + a2 6 + a3 4 = 16 cpu.
    monitor._relist(
        [workload("x", 1, "a2", 6), workload("y", 2, "a3", 3), workload("z", 3, "a1", 2), workload("v", 4, "a1", 4)]
    )
    for name, cpu, queue in (("x", "6", "a2"), ("y", "3", "a3"), ("z", "2", "a1"), ("v", "4", "a1")):
        monitor._pod_event("ADDED", pod(f"{name}-0", cpu, name, queue))
    monitor._event("MODIFIED", workload("v", 5, "a1", 4, preempted_for="p-uid"))  # for p (3 cpu in a1)
    monitor._event("MODIFIED", workload("f", 6, "a3", 1))  # 16
    monitor._event("MODIFIED", workload("g", 7, "a1", 1))  # 17 with v, 13 without it
    monitor._pod_event("ADDED", pod("f-0", "1", "f", "a3"))
    monitor._pod_event("ADDED", pod("g-0", "1", "g"))  # pods: 17 cpu with v's, which is stopping
    assert not monitor.violations

    # The preemptor admitted before its victim is gone: 20 cpu reserved in all.
    monitor._event("ADDED", workload("p", 8, "a1", 3, uid="p-uid"))
    (ahead,) = monitor.violations
    assert ahead.invariant == "I1" and ahead.subject == "cohort t-alpha"
    assert "t-ns0/p took quota while its victims ['t-ns0/v'] still hold theirs: 20 cpu reserved > 16" in ahead.message
    assert set(ahead.names) == {"p", "v"}

    # Quota taken by a Workload still marked Evicted would hide from I1: a violation of its own.
    monitor._event("MODIFIED", workload("w", 9, "a2", 1, preempted_for="other"))
    assert "t-ns0/w: took quota in t-a2 while marked Evicted" in str(monitor.violations[-1])

    # Workloads not being evicted over the cohort's 16: 6 + 3 + 2 + 1 + 1 + 3 + 2 = 18.
    monitor._event("MODIFIED", workload("h", 10, "a3", 2))
    over = monitor.violations[-1]
    assert over.invariant == "I1" and "over-admitted: 18 cpu reserved by Workloads not being evicted > 16" in (
        over.message
    )
    assert "t-ns0/v=4cpu@rv5 (leaving)" in over.message

    # v's pods count again once v no longer leaves (admitted again, as it never should be while
    # they run): 17 cpu of pods in the cohort; and a Workload deleted on its way out leaves its
    # pods out until they are gone.
    monitor._event("MODIFIED", workload("v", 11, "a1", 4))
    pods = monitor.violations[-1]
    assert pods.invariant == "I5" and pods.subject == "cohort t-alpha" and "17 cpu > 16 allowed" in pods.message
    monitor._event("MODIFIED", workload("v", 12, "a1", 4, preempted_for="r"))
    monitor._event("DELETED", workload("v", 13, "a1", 4, preempted_for="r"))
    assert monitor._leaving_pod("t-ns0/v-0") and not monitor._leaving_pod("t-ns0/g-0")


_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["MODIFIED", "DELETED", "RELIST"]),
        st.sampled_from(["u", "v", "w"]),
        st.sampled_from(["u", "v", "w", "u2"]),  # uid: "u2" is u made again under v's or w's name
        st.sampled_from([None, 1, 2]),
        st.sampled_from(["", "p", "q"]),
    ),
    max_size=25,
)


@settings(max_examples=200, deadline=None)
@given(_STEPS)
def test_the_monitors_victim_index_agrees_with_its_workloads(
    steps: list[tuple[str, str, str, int | None, str]],
) -> None:
    """The index of victims still leaving, by preemptor (I1's check of a Workload taking quota),
    is what a scan of every tracked Workload finds, through changes, deletions and re-lists."""
    from preemption_operator.testing.chaos import InvariantMonitor, Topology

    monitor = InvariantMonitor(client=None, topology=Topology("t"))  # type: ignore[arg-type]
    last: dict[str, dict[str, Any]] = {}
    for rv, (kind, name, uid, cpu, preempted_for) in enumerate(steps, start=1):
        obj = _monitored_workload(name, rv, "a1", cpu, uid=uid, preempted_for=preempted_for)
        if kind == "RELIST":
            last[name] = obj
            monitor._relist(list(last.values()))
        else:
            monitor._event(kind, obj)
            if kind == "DELETED":
                last.pop(name, None)
            else:
                last[name] = obj
        scanned: dict[str, set[str]] = {}
        for key, tracked in monitor._wls.items():
            if tracked.leaving and tracked.preempted_for:
                scanned.setdefault(tracked.preempted_for, set()).add(key)
        assert monitor._victims == scanned
