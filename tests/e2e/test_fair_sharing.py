"""Fair sharing end to end (issue 17): two teams of weights 1 and 2 in one cohort converge, by
preemptions, to a 1:2 split of what they borrow, and stay there.

The cohort `org` holds three ClusterQueues: `pool` (12 cpu, never used: it only lends), and
`team-a` (weight 1) and `team-b` (weight 2), both with no nominal quota, so everything they run
is borrowed. A team's DRS is borrowed * 1000 / lendable / weight, with lendable = 12 cpu (what
the cohort could give a child if nothing were used). Workloads are 1 cpu, all of priority 0.

team-a first takes all 12 cpu (DRS 1000). Then team-b submits 12. For a team-b workload with
team-a running `a` and team-b `12 - a`, LessThanOrEqualToFinalShare compares team-b's share
with the workload admitted, (13 - a) * 1000/12 / 2, to team-a's once a victim is gone,
(a - 1) * 1000/12: it preempts while (13 - a) / 2 <= a - 1, i.e. a >= 5. So a goes
12 -> 11 -> ... -> 4 (the last preemption at a = 5 gives 8/2 = 4 <= 4): eight preemptions with
reason InCohortFairSharing, ending at team-a 4 cpu, team-b 8 cpu.

It is settled then, both ways:
- team-b's next workload: (13 - 4) / 2 = 4.5 > 3 (S2-a fails) and 4.5 >= 4 = team-a's share
  before (S2-b, LessThanInitialShare, fails);
- team-a's evicted workloads: 5 > (8 - 1) / 2 = 3.5 (S2-a) and 5 >= 8 / 2 = 4 (S2-b).
Both weighted shares are then 4000/12 = 8000/12/2 = 333.33..., written rounded up: 334.
"""

from __future__ import annotations

import time
from typing import Any

from builders import KUEUE, cluster_queue, workload
from preemption_operator.testing.operator_process import OperatorPool, wait_until
from preemption_operator.testing.workload_status import condition, eviction_count, is_true

from .scenario import Scenario, WorkloadMonitor, admitted_cpu

CAPACITY = 12
TEAM_A_SETTLED, TEAM_B_SETTLED = 4, 8
SETTLED_SHARE = 334  # ceil(4000 / 12) = ceil(8000 / 12 / 2)
FAIR_PREEMPTION = {"withinClusterQueue": "Never", "reclaimWithinCohort": "Any"}


def _team(sc: Scenario, suffix: str, cohort: str, weight: int) -> tuple[str, str]:
    cq = cluster_queue(sc.name(suffix), 0, flavor=sc.flavor, cohort=cohort, preemption=FAIR_PREEMPTION)
    cq["spec"]["fairSharing"] = {"weight": str(weight)}
    sc.apply(
        cq,
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": suffix, "namespace": sc.namespace},
            "spec": {"clusterQueue": cq["metadata"]["name"]},
        },
    )
    return cq["metadata"]["name"], suffix


def _usage(wls: dict[str, dict[str, Any]]) -> dict[str | None, float]:
    used: dict[str | None, float] = {}
    for wl in wls.values():
        cq, cpu = admitted_cpu(wl)
        if cq is not None:
            used[cq] = used.get(cq, 0.0) + cpu
    return used


def _timeline(monitor: WorkloadMonitor) -> str:
    """Every change of who holds quota, and of Evicted, as the watch saw them: for failures."""
    out: list[str] = []
    last: dict[str, str] = {}
    for state in monitor.snapshot():
        for name, wl in sorted(state.items()):
            evicted = condition(wl, "Evicted") or {}
            held = "holds" if admitted_cpu(wl)[0] else "pending"
            line = f"{held} evicted={evicted.get('status')}/{evicted.get('reason')} n={eviction_count(wl)}"
            if last.get(name) != line:
                last[name] = line
                out.append(f"{name}: {line}")
    return "\n".join(out)


def _weighted_share(sc: Scenario, cq: str) -> Any:
    status = sc.get("clusterqueues", cq, namespaced=False).get("status") or {}
    return (status.get("fairSharing") or {}).get("weightedShare")


def test_weights_one_and_two_converge_to_a_one_to_two_split(scenario: Scenario, operators: OperatorPool) -> None:
    sc, ns = scenario, scenario.namespace
    cohort = sc.name("org")
    sc.apply(
        sc.flavor_object(),
        {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": cohort}, "spec": {}},
        cluster_queue(sc.name("pool"), CAPACITY, flavor=sc.flavor, cohort=cohort),
    )
    cq_a, lq_a = _team(sc, "team-a", cohort, 1)
    cq_b, lq_b = _team(sc, "team-b", cohort, 2)
    operators.start(extra_args=["--fair-sharing"])
    team_a = [f"a-{i:02d}" for i in range(CAPACITY)]
    team_b = [f"b-{i:02d}" for i in range(CAPACITY)]

    with WorkloadMonitor(sc.cluster, ns) as monitor:
        sc.apply(*(workload(name, namespace=ns, queue=lq_a, cpu=1, priority=0) for name in team_a))
        monitor.wait_seen(team_a)
        sc.wait_admitted(*team_a, timeout=60, diagnostics=operators.diagnostics)
        wait_until(
            lambda: _weighted_share(sc, cq_a) == 1000,
            what="team-a's weighted share 1000 (all 12 cpu borrowed)",
            diagnostics=operators.diagnostics,
        )

        sc.apply(*(workload(name, namespace=ns, queue=lq_b, cpu=1, priority=0) for name in team_b))
        monitor.wait_seen(team_b)

        def settled() -> dict[str, dict[str, Any]]:
            wls = sc.workloads()
            used = _usage(wls)
            assert used.get(cq_a, 0) == TEAM_A_SETTLED and used.get(cq_b, 0) == TEAM_B_SETTLED, used
            # Every evicted team-a workload is back in its queue, with no eviction in flight.
            for name in team_a:
                if eviction_count(wls[name]) and is_true(wls[name], "QuotaReserved"):
                    raise AssertionError(f"{name} was evicted but still holds quota")
            return wls

        wls = wait_until(settled, timeout=120, what="the 4:8 split", diagnostics=operators.diagnostics)
        shares = wait_until(
            lambda: (s := (_weighted_share(sc, cq_a), _weighted_share(sc, cq_b))) == (SETTLED_SHARE,) * 2 and s,
            what=f"both weighted shares {SETTLED_SHARE}",
            diagnostics=operators.diagnostics,
        )
        assert shares == (SETTLED_SHARE, SETTLED_SHARE)

        # Settled means settled. Parked workloads are only retried on a change (as in Kueue), so
        # make one that leaves quotas alone, let every parked workload be tried again, and see
        # nothing move for several seconds.
        op = operators.started[0]
        cycles = op.cycles()
        pool = cluster_queue(sc.name("pool"), CAPACITY, flavor=sc.flavor, cohort=cohort, preemption=FAIR_PREEMPTION)
        sc.apply(pool)
        wait_until(lambda: op.cycles() > cycles, what="a cycle after the change", diagnostics=operators.diagnostics)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            settled()
            time.sleep(0.5)
        wls = settled()

    # Who was preempted, and why: eight team-a workloads, once each, by fair sharing.
    evicted = sorted(name for name in team_a if eviction_count(wls[name]))
    assert len(evicted) == CAPACITY - TEAM_A_SETTLED, evicted
    for name in evicted:
        wl = wls[name]
        assert eviction_count(wl) == 1, f"{name}\n{_timeline(monitor)}"
        evicted_cond, preempted_cond = condition(wl, "Evicted"), condition(wl, "Preempted")
        assert evicted_cond is not None and evicted_cond["reason"] == "Preempted", wl["status"]
        assert preempted_cond is not None and preempted_cond["reason"] == "InCohortFairSharing", wl["status"]
        assert "due to Fair Sharing within the cohort" in preempted_cond["message"], preempted_cond
        assert f"preemptor path: /{cohort}/{cq_b}; preemptee path: /{cohort}/{cq_a}" in preempted_cond["message"]
    assert not any(eviction_count(wls[name]) for name in team_b), "a team-b workload was evicted"
    pending_b = [name for name in team_b if not is_true(wls[name], "QuotaReserved")]
    assert len(pending_b) == CAPACITY - TEAM_B_SETTLED, pending_b

    # Every state on the way: the cohort never over-admitted, team-b never evicted.
    assert not monitor.errors, monitor.errors
    assert monitor.max_admitted_cpu(cq_a, cq_b) <= CAPACITY
    assert not any(monitor.ever_true(name, "Evicted") for name in team_b)
    assert _weighted_share(sc, sc.name("pool")) == 0
    # A victim is not admitted again before its preemptor (it was, when the watch showed its quota
    # released before the eviction's write answered, and was then evicted a second time).
    twice = [name for name in team_a if monitor.max_evictions(name) > 1]
    assert not twice, f"evicted twice: {twice}\n{_timeline(monitor)}"
