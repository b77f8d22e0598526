"""Bad input, end to end (issue #11 item 7): each reaches the operator through the real API server
(where the CRD schema lets it through) and gets a clear, named message in a condition or an
Event, never a traceback, while everything else keeps being served."""

from __future__ import annotations

import pytest

from builders import CONFIG_ANNOTATION, KUEUE, KUEUE_ALPHA, workload
from preemption_operator.testing.operator_process import OperatorPool, OperatorProcess, wait_until
from preemption_operator.testing.workload_status import condition, is_true

from .scenario import TEST_LABEL, Scenario, describe_events

pytestmark = pytest.mark.e2e


def events_of(sc: Scenario, kind: str, name: str, namespace: str = "default") -> list[dict[str, str]]:
    """Events about an object, as `kubectl describe` finds them (by kind, name and uid)."""
    out = sc.kubectl("describe", kind, name, "-n", namespace).stdout
    return describe_events(out)


def warning(sc: Scenario, op: OperatorProcess, kind: str, name: str, reason: str, namespace: str = "default") -> str:
    def found() -> str:
        messages = [e["Message"] for e in events_of(sc, kind, name, namespace) if e["Reason"] == reason]
        assert messages, f"no {reason} Event on {kind} {name}: {events_of(sc, kind, name, namespace)}"
        return messages[0]

    return wait_until(found, what=f"a {reason} Event on {kind} {name}", diagnostics=op.tail)


def test_bad_input_is_named_and_the_rest_is_served(scenario: Scenario, operators: OperatorPool) -> None:
    sc, ns = scenario, scenario.namespace
    cq, lq = sc.queue("main", 8)
    doomed_cq, doomed_lq = sc.queue("doomed", 2)
    op = operators.start()

    # A ClusterQueue deleted while it has an admitted workload.
    sc.apply(workload("orphan", namespace=ns, queue=doomed_lq, cpu=2, priority=0))
    sc.wait_admitted("orphan", diagnostics=op.tail)
    sc.kubectl("delete", "clusterqueue", doomed_cq)
    message = warning(sc, op, "workload", "orphan", "ClusterQueueNotFound", ns)
    assert f"ClusterQueue {doomed_cq}, which does not exist" in message

    # A Workload whose LocalQueue does not exist: a pending reason that names it.
    sc.apply(workload("lost", namespace=ns, queue="no-such-queue", cpu=1, priority=0))
    wait_until(
        lambda: (
            (condition(sc.workload("lost"), "QuotaReserved") or {}).get("message")
            == "LocalQueue no-such-queue doesn't exist"
        ),
        what="the pending reason of a workload without a queue",
        diagnostics=op.tail,
    )

    # Pod counts of 0 (legal in Kueue: it uses nothing) and 1e9 (never fits: pending with a reason).
    sc.apply(workload("empty", namespace=ns, queue=lq, cpu=1, priority=0, count=0))
    sc.apply(workload("huge-count", namespace=ns, queue=lq, cpu=1, priority=0, count=1_000_000_000))
    sc.wait_admitted("empty", diagnostics=op.tail)
    wait_until(
        lambda: (
            "couldn't assign flavors"
            in (condition(sc.workload("huge-count"), "QuotaReserved") or {}).get("message", "")
        ),
        what="huge-count pending with a reason",
        diagnostics=op.tail,
    )

    # A request the API server stores but the scheduler cannot count: an InvalidObject Warning.
    sc.apply(workload("too-big", namespace=ns, queue=lq, cpu="1e18", priority=0))
    message = warning(sc, op, "workload", "too-big", "InvalidObject", ns)
    assert 'requests.cpu: "1e18" is too large' in message, message

    # Malformed annotations on a ClusterQueue and on a priority class.
    sc.apply(
        {
            "apiVersion": KUEUE,
            "kind": "Cohort",
            "metadata": {
                "name": sc.name("cohort"),
                "annotations": {"preemption-operator.io/preemption-policy": "sometimes"},
            },
            "spec": {},
        }
    )
    annotated = sc.get("clusterqueue", cq, namespaced=False)
    annotated["metadata"]["annotations"] = {"preemption-operator.io/preemption-delay": "soon"}
    for key in ("resourceVersion", "managedFields", "uid", "creationTimestamp", "generation"):
        annotated["metadata"].pop(key, None)
    annotated.pop("status", None)
    sc.apply(annotated)
    message = warning(sc, op, "clusterqueue", cq, "InvalidPreemptionPolicy")
    assert "preemption-operator.io/preemption-delay" in message and "soon" in message
    message = warning(sc, op, "cohort", sc.name("cohort"), "InvalidPreemptionPolicy")
    assert "sometimes" in message
    sc.apply(
        {
            "apiVersion": KUEUE,
            "kind": "WorkloadPriorityClass",
            "metadata": {
                "name": sc.name("tolerant"),
                "labels": {TEST_LABEL: ns},
                "annotations": {"preemption-toleration.scheduling.x-k8s.io/toleration-seconds": "forever"},
            },
            "value": 5,
        }
    )
    message = warning(sc, op, "workloadpriorityclass", sc.name("tolerant"), "InvalidPreemptionToleration")
    assert "forever" in message

    # A PreemptionConfig whose numeric label rule meets a label that is not a number: Kueue's
    # fallback applies (the candidate never matches without one); nothing stops.
    config = {
        "apiVersion": KUEUE_ALPHA,
        "kind": "PreemptionConfig",
        "metadata": {"name": sc.name("tiers")},
        "spec": {
            "rules": [
                {
                    "name": "tiers",
                    "activationPolicy": {"trigger": "Always"},
                    "candidateSelectors": [
                        {"scope": "WithinClusterQueue", "numericLabels": [{"key": "tier", "comparison": "LessThan"}]}
                    ],
                }
            ]
        },
    }
    sc.apply(config)
    _, tiered_lq = sc.queue("tiered", 2, annotations={CONFIG_ANNOTATION: sc.name("tiers")})
    sc.apply(workload("words", namespace=ns, queue=tiered_lq, cpu=2, priority=0, labels={"tier": "high"}))
    sc.wait_admitted("words", diagnostics=op.tail)
    sc.apply(workload("numbers", namespace=ns, queue=tiered_lq, cpu=2, priority=0, labels={"tier": "9"}))
    wait_until(
        lambda: (
            not is_true(sc.workload("numbers"), "QuotaReserved")
            and condition(sc.workload("numbers"), "QuotaReserved") is not None
        ),
        what="numbers pending (the unreadable label never matches)",
        diagnostics=op.tail,
    )
    assert is_true(sc.workload("words"), "QuotaReserved")

    # Names at the length limit (253 characters) are served, Events included.
    long_name = ("w" * 240 + "-limit-name-x")[:253]
    sc.apply(workload(long_name, namespace=ns, queue=lq, cpu=1, priority=0))
    sc.wait_admitted(long_name, diagnostics=op.tail)
    wait_until(
        lambda: any(e["Reason"] == "Admitted" for e in events_of(sc, "workload", long_name, ns)),
        what="Events about a workload with a 253-character name",
        diagnostics=op.tail,
    )

    # Everything else kept being served all along.
    sc.apply(workload("fine", namespace=ns, queue=lq, cpu=1, priority=0))
    sc.wait_admitted("fine", diagnostics=op.tail)
    assert op.alive() and op.get("/healthz")[0] == 200
    assert "Traceback" not in op.log(), op.tail()
