"""PreemptionLimit end to end: a limit throttles a preemption storm on a real kube-apiserver, the
blocked preemptor says why (condition and Event), the limit holds when the leader is killed in
the middle of the storm (its window is rebuilt from the Workloads, not from memory), and a
window that frees room lets the blocked preemptor in without anything else changing."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from builders import KUEUE_ALPHA, workload
from preemption_operator.testing.control_plane import ControlPlane
from preemption_operator.testing.operator_process import OperatorPool, wait_until
from preemption_operator.testing.workload_status import condition, is_true

from .scenario import TEST_LABEL, Scenario, WorkloadMonitor

LEADER = "preemption_operator_leader"
BLOCKED = "PreemptionBlockedByLimit"


def preemption_limit(name: str, namespace: str, limit: int, window: str, scope: str = "Global") -> dict[str, Any]:
    """A limit over this test's ClusterQueues only (the control plane is shared)."""
    return {
        "apiVersion": KUEUE_ALPHA,
        "kind": "PreemptionLimit",
        "metadata": {"name": name},
        "spec": {
            "scope": scope,
            "clusterQueueSelector": {"matchLabels": {TEST_LABEL: namespace}},
            "limit": limit,
            "limitWindowDuration": window,
        },
    }


def evicted(wl: dict[str, Any]) -> bool:
    return is_true(wl, "Evicted")


def _time(cond: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(str(cond["lastTransitionTime"]).replace("Z", "+00:00"))


def test_a_limit_throttles_a_storm_and_holds_when_the_leader_is_killed_in_the_middle(
    cluster: ControlPlane, scenario: Scenario, operators: OperatorPool
) -> None:
    """Eight low-priority workloads fill a queue; six high-priority ones arrive in two waves and
    each needs one victim. A Global limit of 3 per hour lets three through. The leader is killed
    after the first wave's two preemptions: its successor knows of them from the victims'
    conditions and allows exactly one more (from memory it would allow three)."""
    sc, ns = scenario, scenario.namespace
    cq, lq = sc.queue("main", 8, within="LowerPriority")
    limit = sc.name("storm-limit")
    sc.apply(preemption_limit(limit, ns, 3, "1h"))
    replicas = [operators.start("replica-a"), operators.start("replica-b")]

    def leader() -> Any:
        flags = {op.name: op.metric(LEADER) for op in replicas}
        assert sorted(flags.values()) == [0.0, 1.0], f"leader gauges: {flags}"
        return next(op for op in replicas if flags[op.name] == 1.0)

    first = wait_until(leader, what="one leader", diagnostics=operators.diagnostics)
    standby = next(op for op in replicas if op is not first)
    lows = [f"low-{i}" for i in range(8)]
    with WorkloadMonitor(cluster, ns) as monitor:
        sc.apply(*(workload(n, namespace=ns, queue=lq, cpu=1, priority=0) for n in lows))
        monitor.wait_seen(lows)
        sc.wait_admitted(*lows, diagnostics=operators.diagnostics)

        sc.apply(*(workload(f"high-{i}", namespace=ns, queue=lq, cpu=1, priority=100) for i in range(2)))
        sc.wait_admitted("high-0", "high-1", diagnostics=first.tail)
        assert sum(evicted(sc.workload(n)) for n in lows) == 2
        first.kill()  # mid-storm: no lease release, no goodbye

        sc.apply(*(workload(f"high-{i}", namespace=ns, queue=lq, cpu=1, priority=100) for i in range(2, 6)))
        wait_until(
            lambda: standby.metric(LEADER) == 1.0, timeout=30, what="the standby to lead", diagnostics=standby.tail
        )

        def throttled() -> dict[str, dict[str, Any]]:
            wls = sc.workloads()
            blocked = [n for n in (f"high-{i}" for i in range(2, 6)) if is_true(wls[n], BLOCKED)]
            assert len(blocked) == 3, f"blocked: {blocked}"
            return wls

        wls = wait_until(throttled, timeout=60, what="three preemptors blocked by the limit", diagnostics=standby.tail)
        # One more cycle over the settled state changes nothing.
        before = standby.cycles()
        sc.queue("nudge", 1)
        wait_until(lambda: standby.cycles() > before, what="another cycle", diagnostics=standby.tail)
        wls = sc.workloads()

    victims = [n for n in lows if monitor.max_evictions(n) > 0]
    assert len(victims) == 3, f"the limit of 3 did not hold across the restart: {victims} were preempted"
    admitted = sorted(n for n in wls if n.startswith("high-") and is_true(wls[n], "Admitted"))
    assert len(admitted) == 3 and {"high-0", "high-1"} <= set(admitted), admitted
    assert monitor.max_admitted_cpu(cq) <= 8
    for name in sorted(set(wls) - set(admitted) - set(lows)):
        cond = condition(wls[name], BLOCKED) or {}
        assert cond.get("reason") == "PreemptionLimitExceeded", cond
        assert str(cond.get("message", "")).startswith(f"Preemption was blocked by PreemptionLimit {limit}"), cond
        events = sc.events_about("Workload", name, ns)
        assert any(e.get("reason") == "PreemptionThrottled" and e.get("type") == "Warning" for e in events), events
    for name in admitted:
        assert not is_true(wls[name], BLOCKED), f"{name} is admitted and still says it is blocked"
    # What the limit looks like to people: in force, full, and the throttling counted.
    valid = condition({"status": sc.get("preemptionlimits", limit, namespaced=False).get("status") or {}}, "Valid")
    assert (valid or {}).get("status") == "True", valid
    wait_until(
        lambda: standby.metric("preemption_operator_preemption_limit_window_preemptions", preemption_limit=limit) == 3,
        what="the window gauge at 3",
        diagnostics=standby.tail,
    )
    assert standby.metric("preemption_operator_preemption_limit_limit", preemption_limit=limit) == 3
    assert (standby.metric("preemption_operator_preemption_limit_throttled_total", preemption_limit=limit) or 0) >= 1
    assert standby.stop() == 0, standby.tail()
    assert "Traceback" not in standby.log(), standby.tail()


def test_a_blocked_preemptor_gets_in_once_the_window_frees_room(scenario: Scenario, operators: OperatorPool) -> None:
    """A limit of one preemption per 5 s: the second preemptor waits, blocked, and is admitted
    once the first preemption leaves the window, with nothing else changing in between."""
    sc, ns = scenario, scenario.namespace
    _, lq = sc.queue("main", 2, within="LowerPriority")
    limit = sc.name("slow-limit")
    sc.apply(preemption_limit(limit, ns, 1, "5s", scope="PreemptingClusterQueue"))
    op = operators.start()
    sc.apply(*(workload(f"low-{i}", namespace=ns, queue=lq, cpu=1, priority=0) for i in range(2)))
    sc.wait_admitted("low-0", "low-1", diagnostics=op.tail)
    sc.apply(*(workload(f"high-{i}", namespace=ns, queue=lq, cpu=1, priority=100) for i in range(2)))

    def one_blocked() -> str:
        wls = sc.workloads()
        blocked = [n for n in ("high-0", "high-1") if is_true(wls[n], BLOCKED)]
        assert len(blocked) == 1, [(n, (wls[n].get("status") or {}).get("conditions")) for n in ("high-0", "high-1")]
        return blocked[0]

    waiting = wait_until(one_blocked, timeout=30, what="one preemptor blocked", diagnostics=op.tail)
    sc.wait_admitted("high-0", "high-1", timeout=40, diagnostics=op.tail)
    wls = sc.workloads()
    preempted = sorted(
        (_time(condition(wls[n], "Evicted") or {}), n) for n in ("low-0", "low-1") if condition(wls[n], "Evicted")
    )
    assert len(preempted) == 2, preempted
    assert (preempted[1][0] - preempted[0][0]).total_seconds() >= 4, f"the window did not hold: {preempted}"
    cond = condition(wls[waiting], BLOCKED) or {}
    assert cond.get("status") == "False", cond  # admitted: no longer blocked
    assert op.stop() == 0, op.tail()
