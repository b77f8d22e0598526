"""Kueue's visibility API end to end (issue 31, item 1): the operator serves it behind the real
kube-apiserver's aggregation layer (front-proxy certificates, an APIService, RBAC decided by
SubjectAccessReviews), and the positions it gives are the order the scheduler then admits in.

Out of a cluster the APIService's Service is an ExternalName Service pointing at this machine, on
the operator's own port; kube-apiserver still checks the operator's certificate for the Service's
name (`<service>.<namespace>.svc`)."""

from __future__ import annotations

import json
from typing import Any

from builders import pending
from preemption_operator.testing.control_plane import ControlPlane
from preemption_operator.testing.operator_process import OperatorProcess, wait_until
from preemption_operator.testing.workload_status import is_true

from .scenario import Scenario

API = "/apis/visibility.kueue.x-k8s.io/v1beta2"
FIELDS = {"metadata", "priority", "localQueueName", "positionInClusterQueue", "positionInLocalQueue"}


def raw(sc: Scenario, path: str, *, user: str | None = None, check: bool = True) -> Any:
    args = ["get", "--raw", path] + ([f"--as={user}"] if user else [])
    proc = sc.kubectl(*args, check=check)
    return json.loads(proc.stdout) if proc.returncode == 0 else proc.stderr


def names(summary: dict[str, Any]) -> list[str]:
    return [item["metadata"]["name"] for item in summary["items"]]


def test_positions_are_kueues_and_the_scheduler_admits_in_their_order(
    scenario: Scenario, visibility: OperatorProcess
) -> None:
    sc, ns = scenario, scenario.namespace
    cq_a, lq_a = sc.queue("a", 1)
    cq_b, lq_b = sc.queue("b", 1)
    cq_c, lq_c = sc.queue("c", 1)
    # A second LocalQueue into cq-b: its workloads interleave with b's by queue order.
    sc.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
              "metadata": {"name": "b2", "namespace": ns}, "spec": {"clusterQueue": cq_b}})  # fmt: skip
    # Each queue runs one workload first, so the rest wait.
    sc.apply(*(pending(f"run-{q}", q, 1, namespace=ns) for q in (lq_a, lq_b, lq_c)))
    sc.wait_admitted("run-a", "run-b", "run-c", diagnostics=visibility.tail)
    sc.apply(
        pending("a-low", lq_a, 1, priority=1, namespace=ns),
        pending("a-high", lq_a, 1, priority=10, namespace=ns),
        pending("a-mid", lq_a, 1, priority=5, namespace=ns),
        pending("b-1", lq_b, 1, priority=3, namespace=ns),
        pending("b-2", "b2", 1, priority=3, namespace=ns),
        pending("b-3", lq_b, 1, priority=3, namespace=ns),
        pending("b-4", "b2", 1, priority=7, namespace=ns),
        pending("c-1", lq_c, 1, priority=0, namespace=ns),
        pending("c-2", lq_c, 1, priority=0, namespace=ns),
    )
    expected = {
        cq_a: ["a-high", "a-mid", "a-low"],
        cq_b: ["b-4", "b-1", "b-2", "b-3"],
        cq_c: ["c-1", "c-2"],
    }

    def listed() -> dict[str, dict[str, Any]]:
        found = {cq: raw(sc, f"{API}/clusterqueues/{cq}/pendingworkloads") for cq in expected}
        assert {cq: names(s) for cq, s in found.items()} == expected
        return found

    found = wait_until(listed, what="every pending workload listed", diagnostics=visibility.tail)
    # Kueue's shape, field for field.
    b = found[cq_b]
    assert (b["kind"], b["apiVersion"]) == ("PendingWorkloadsSummary", "visibility.kueue.x-k8s.io/v1beta2")
    assert all(set(item) == FIELDS for item in b["items"])
    assert [(i["localQueueName"], i["priority"], i["positionInClusterQueue"], i["positionInLocalQueue"])
            for i in b["items"]] == [("b2", 7, 0, 0), ("b", 3, 1, 0), ("b2", 3, 2, 1), ("b", 3, 3, 1)]  # fmt: skip
    assert b["items"][0]["metadata"]["namespace"] == ns
    # A LocalQueue's view, paged.
    page = raw(sc, f"{API}/namespaces/{ns}/localqueues/b2/pendingworkloads?limit=1&offset=1")
    assert [(i["metadata"]["name"], i["positionInClusterQueue"], i["positionInLocalQueue"]) for i in page["items"]] == [
        ("b-2", 2, 1)
    ]
    assert "NotFound" in raw(sc, f"{API}/clusterqueues/{ns}-nope/pendingworkloads", check=False)

    # The scheduler admits in that order: free each queue's quota, one workload at a time.
    for cq, order in expected.items():
        running = f"run-{order[0][0]}"
        for position, name in enumerate(order):
            head = names(raw(sc, f"{API}/clusterqueues/{cq}/pendingworkloads"))
            assert head == order[position:], f"{cq}: after {position} admissions"
            sc.kubectl("delete", "workload", running, "-n", ns)
            sc.wait_admitted(name, diagnostics=visibility.tail)
            admitted = [n for n, wl in sc.workloads().items() if is_true(wl, "Admitted") and n[0] == name[0]]
            assert admitted == [name], f"{cq}: {admitted} admitted where the positions said {name}"
            running = name
        assert raw(sc, f"{API}/clusterqueues/{cq}/pendingworkloads")["items"] == []


def test_rbac_decides_who_sees_pending_workloads(
    scenario: Scenario, visibility: OperatorProcess, cluster: ControlPlane
) -> None:
    sc, ns = scenario, scenario.namespace
    cq, lq = sc.queue("q", 1)
    sc.apply(pending("held", lq, 2, namespace=ns))  # more than the queue has: it waits
    lq_path = f"{API}/namespaces/{ns}/localqueues/{lq}/pendingworkloads"
    cq_path = f"{API}/clusterqueues/{cq}/pendingworkloads"
    denied = raw(sc, lq_path, user="alice", check=False)
    assert (
        f'localqueues.visibility.kueue.x-k8s.io "{lq}" is forbidden: User "alice" cannot get resource '
        f'"localqueues/pendingworkloads" in API group "visibility.kueue.x-k8s.io" in the namespace "{ns}"'
    ) in denied
    # Kueue's viewer role for LocalQueues, bound to alice in this namespace only.
    cluster.kubectl("apply", "-f", "config/visibility/viewer_roles.yaml", check=True)
    sc.kubectl("create", "rolebinding", "alice-views", "-n", ns, "--clusterrole=pending-workloads-lq-viewer-role",
               "--user=alice")  # fmt: skip

    def allowed() -> list[str]:
        seen = names(raw(sc, lq_path, user="alice"))
        assert seen == ["held"]
        return seen

    wait_until(allowed, what="alice reads her LocalQueue", diagnostics=visibility.tail)  # denials are kept 10 s
    assert "forbidden" in raw(sc, cq_path, user="alice", check=False)
    assert names(raw(sc, cq_path)) == ["held"]  # the admin may
