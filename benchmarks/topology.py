"""Topology benchmark: one scheduling cycle that ends in a topology-driven preemption on a large TAS cluster.

1,000 nodes in a four-level topology (4 blocks x 10 racks x 5 subracks x 5 hosts, levels
`example.com/block`, `example.com/rack`, `example.com/subrack`, `kubernetes.io/hostname`), 32 cpu
each. 10,000 admitted workloads (one pod of 3 cpu, ten per node, hostname-level topology
assignments) fill every node to 30 cpu. One pending job of 2 pods x 8 cpu requires the rack level:
quota fits, but no node has 8 cpu free, so the ClusterQueue's PreemptionConfig rule (trigger
`QuotaFeasibleAndInsufficientTopology`, scope `WithinClusterQueue`, numeric label `size` LessThan)
has to free two nodes of one rack (four victims).

Two orders of the candidates (most recently reserved first, as Kueue orders them):

- `recent-rack`: the most recently reserved workloads run in one rack, so the victim search walks
  about thirty candidates;
- `scattered`: reservation times are spread over all nodes, so the search walks candidates all over
  the cluster until two nodes of one rack have room (a few hundred).

We time what the operator does per cycle: cut a snapshot from the cache and run the scheduler.

    python benchmarks/topology.py [--repeat N] [--scenarios recent-rack,scattered] [--profile]

Results are printed as a Markdown table and written to benchmarks/results/topology.md (with a
cProfile summary of each scenario whose median cycle exceeds 100 ms). Nothing here is a test.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import platform
import pstats
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from preemption_operator.api.objects import parse_object
from preemption_operator.engine import CycleResult, Engine, QueueState
from preemption_operator.engine.cache import Cache

NOW = datetime(2026, 11, 30, tzinfo=UTC)
KUEUE = "kueue.x-k8s.io/v1beta2"
HOSTNAME = "kubernetes.io/hostname"
LEVELS = ("example.com/block", "example.com/rack", "example.com/subrack", HOSTNAME)
BLOCKS, RACKS, SUBRACKS, HOSTS = 4, 10, 5, 5
NODE_CPU = 32
PER_NODE = 10
SMALL_CPU = 3
JOB_PODS, JOB_CPU = 2, 8
SLOW_MS = 100.0


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _nodes() -> list[dict[str, Any]]:
    out = []
    for b in range(BLOCKS):
        for r in range(RACKS):
            for s in range(SUBRACKS):
                for h in range(HOSTS):
                    name = f"n-b{b}-r{r}-s{s}-h{h}"
                    labels = {
                        LEVELS[0]: f"b{b}",
                        LEVELS[1]: f"b{b}-r{r}",
                        LEVELS[2]: f"b{b}-r{r}-s{s}",
                        HOSTNAME: name,
                        "pool": "tas",
                    }
                    out.append(
                        {
                            "apiVersion": "v1",
                            "kind": "Node",
                            "metadata": {"name": name, "labels": labels},
                            "status": {
                                "allocatable": {"cpu": str(NODE_CPU), "pods": "110"},
                                "conditions": [{"type": "Ready", "status": "True"}],
                            },
                        }
                    )
    return out


def _workload(
    name: str,
    cpu: int,
    count: int,
    labels: dict[str, str],
    topology_request: dict[str, str],
    node: str | None = None,
    at: datetime = NOW,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": name,
            "labels": labels,
            "creationTimestamp": _stamp(at),
        },
        "spec": {
            "queueName": "training",
            "priority": 0,
            "podSets": [
                {
                    "name": "main",
                    "count": count,
                    "topologyRequest": topology_request,
                    "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": str(cpu)}}}]}},
                }
            ],
        },
    }
    if node is not None:
        conditions = [
            {"type": kind, "status": "True", "reason": kind, "message": "", "lastTransitionTime": _stamp(at)}
            for kind in ("QuotaReserved", "Admitted")
        ]
        body["status"] = {
            "conditions": conditions,
            "admission": {
                "clusterQueue": "training",
                "podSetAssignments": [
                    {
                        "name": "main",
                        "flavors": {"cpu": "tas"},
                        "resourceUsage": {"cpu": str(cpu * count)},
                        "count": count,
                        "topologyAssignment": {
                            "levels": [HOSTNAME],
                            "slices": [
                                {
                                    "domainCount": 1,
                                    "valuesPerLevel": [{"universal": node}],
                                    "podCounts": {"universal": count},
                                }
                            ],
                        },
                    }
                ],
            },
        }
    return body


def _minutes_recent_rack(node_index: int, slot: int, nodes_total: int) -> int:
    """Minutes before NOW that a workload was reserved: the last rack's workloads are the most recent,
    taken round-robin over its nodes; the others older."""
    per_rack = SUBRACKS * HOSTS
    last_rack_start = nodes_total - per_rack
    if node_index >= last_rack_start:
        return 1 + slot * per_rack + (node_index - last_rack_start)
    return 10_000 + slot * nodes_total + node_index


def _minutes_scattered(node_index: int, slot: int, nodes_total: int) -> int:
    """A fixed permutation of the reservation order over all workloads."""
    return 1 + ((node_index * PER_NODE + slot) * 7919) % (nodes_total * PER_NODE)


SCENARIOS: dict[str, Callable[[int, int, int], int]] = {
    "recent-rack": _minutes_recent_rack,
    "scattered": _minutes_scattered,
}


def build(scenario: str) -> Cache:
    minutes = SCENARIOS[scenario]
    nodes = _nodes()
    bodies: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}},
        {
            "apiVersion": KUEUE,
            "kind": "Topology",
            "metadata": {"name": "dc"},
            "spec": {"levels": [{"nodeLabel": level} for level in LEVELS]},
        },
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": {"name": "tas"},
            "spec": {"nodeLabels": {"pool": "tas"}, "topologyName": "dc"},
        },
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": "training", "annotations": {"kueue.x-k8s.io/preemption-config-name": "defrag"}},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [{"name": "tas", "resources": [{"name": "cpu", "nominalQuota": "40000"}]}],
                    }
                ],
            },
        },
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "training", "namespace": "bench"},
            "spec": {"clusterQueue": "training"},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1alpha1",
            "kind": "PreemptionConfig",
            "metadata": {"name": "defrag"},
            "spec": {
                "rules": [
                    {
                        "name": "defrag",
                        "activationPolicy": {"trigger": "QuotaFeasibleAndInsufficientTopology"},
                        "candidateSelectors": [
                            {
                                "scope": "WithinClusterQueue",
                                "numericLabels": [{"key": "size", "comparison": "LessThan"}],
                            }
                        ],
                    }
                ]
            },
        },
        *nodes,
    ]
    for i, node in enumerate(nodes):
        name = node["metadata"]["name"]
        for slot in range(PER_NODE):
            at = NOW - timedelta(minutes=minutes(i, slot, len(nodes)))
            bodies.append(_workload(f"wl-{i}-{slot}", SMALL_CPU, 1, {"size": "1"}, {"required": HOSTNAME}, name, at))
    bodies.append(_workload("job", JOB_CPU, JOB_PODS, {"size": "2"}, {"required": LEVELS[1]}))
    cache = Cache()
    cache.load(parse_object(body) for body in bodies)
    return cache


def one_cycle(cache: Cache, scheduler: Engine) -> tuple[CycleResult, float, float]:
    started = time.perf_counter()
    snapshot = cache.snapshot(NOW)
    cut = time.perf_counter()
    result = scheduler.cycle(snapshot, QueueState())
    done = time.perf_counter()
    return result, (cut - started) * 1000, (done - started) * 1000


def check(cache: Cache, result: CycleResult) -> tuple[int, int]:
    """Asserts the cycle ended in a topology preemption in one rack; returns (victims, candidates
    the search removed from the snapshot)."""
    assert result.preempted, "the cycle must end in a preemption"
    assert [p.workload.name for p in result.pending] == ["job"]
    assert result.pending[0].reason == "WaitingForPreemptedWorkloads"
    assert all(p.target.reason == "ConfigurablePreemption" for p in result.preempted)
    tas = cache.tas()
    racks = {tas.nodes[node].labels[LEVELS[1]] for p in result.preempted for node in tas.by_workload[p.victim.key]}
    assert len(racks) == 1, racks
    assert len(result.preempted) == JOB_PODS * 2, len(result.preempted)
    [explanation] = result.explanations
    removed = sum(1 for c in explanation.candidates if c.outcome in ("chosen", "spared"))
    return len(result.preempted), removed


def measure(cache: Cache, repeat: int) -> dict[str, float]:
    snapshot_times, cycle_times = [], []
    victims = removed = 0
    for _ in range(repeat):
        result, snap_ms, cycle_ms = one_cycle(cache, Engine())
        victims, removed = check(cache, result)
        snapshot_times.append(snap_ms)
        cycle_times.append(cycle_ms)
    return {
        "victims": victims,
        "removed": removed,
        "snapshot_ms": statistics.median(snapshot_times),
        "cycle_ms": statistics.median(cycle_times),
        "cycle_p90_ms": sorted(cycle_times)[int(0.9 * (len(cycle_times) - 1))],
    }


def _cumulative(stats: pstats.Stats, filename: str, function: str) -> tuple[float, int]:
    """(cumulative seconds, calls) of a function in a profile, by file basename and name."""
    for (path, _, name), (_, calls, _, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        if name == function and Path(path).name == filename:
            return cumulative, calls
    return 0.0, 0


def profile(cache: Cache, top: int = 20) -> tuple[str, str]:
    """cProfile of one cycle: a summary of where the time goes, and the functions with the most own
    time and the most cumulative time."""
    profiler = cProfile.Profile()
    scheduler = Engine()
    gc.collect()
    gc.freeze()  # a full collection in the middle would blur the shares
    profiler.enable()
    result, _, _ = one_cycle(cache, scheduler)
    profiler.disable()
    gc.unfreeze()
    check(cache, result)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    total, _ = _cumulative(stats, "scheduler.py", "cycle")
    place_s, place_n = _cumulative(stats, "topology.py", "place")
    capacity_s, capacity_n = _cumulative(stats, "topology.py", "node_capacity")
    domain_s, _ = _cumulative(stats, "topology.py", "domain")
    tier_s, _ = _cumulative(stats, "configurable.py", "_tier")
    fill_s, _ = _cumulative(stats, "preemption.py", "_fill_back")
    summary = (
        f"Profiled cycle {total * 1000:.0f} ms (cProfile overhead included, garbage collector frozen). "
        f"{100 * place_s / total:.0f}% in `topology.place` ({place_n} calls: the flavor assignment plus one per "
        f"fit check of the victim search and its fill-back; each rescans all nodes: {capacity_n:,} "
        f"`node_capacity` calls ({100 * capacity_s / total:.0f}%) and the domain key of every node "
        f"({100 * domain_s / total:.0f}%)); {100 * fill_s / total:.0f}% of the cycle is the fill-back's share. "
        f"{100 * tier_s / total:.0f}% building the topology tier's candidates (`configurable._tier`: every "
        "admitted workload of the ClusterQueue filtered and sorted)."
    )
    stats.strip_dirs()
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue(), summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--profile", action="store_true", help="profile every scenario, not only slow ones")
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "results" / "topology.md")
    args = parser.parse_args()
    rows = []
    profiles: list[tuple[str, str, str]] = []
    for scenario in args.scenarios.split(","):
        started = time.perf_counter()
        cache = build(scenario)
        cache.snapshot(NOW)  # quota tree and TAS state built once, as the operator keeps them
        load_s = time.perf_counter() - started
        result = measure(cache, args.repeat)
        # The same with the cache's objects moved out of the collector's reach: full collections over
        # millions of long-lived objects are what makes the p90 jump.
        gc.collect()
        gc.freeze()
        frozen = measure(cache, args.repeat)
        gc.unfreeze()
        result["frozen_ms"], result["frozen_p90_ms"] = frozen["cycle_ms"], frozen["cycle_p90_ms"]
        rows.append((scenario, load_s, result))
        print(
            f"{scenario}: cycle median {result['cycle_ms']:.1f} ms, {result['removed']} candidates removed, "
            f"{result['victims']} victims",
            flush=True,
        )
        if args.profile or result["cycle_ms"] > SLOW_MS:
            profiles.append((scenario, *profile(cache)))
    nodes = BLOCKS * RACKS * SUBRACKS * HOSTS
    lines = [
        f"# Topology benchmark ({datetime.now(UTC):%Y-%m-%d}, {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.machine()}, repeat {args.repeat})",
        "",
        f"{nodes:,} nodes ({BLOCKS} blocks x {RACKS} racks x {SUBRACKS} subracks x {HOSTS} hosts, {NODE_CPU} cpu each), "
        f"{nodes * PER_NODE:,} admitted workloads ({PER_NODE} per node, {SMALL_CPU} cpu, hostname-level assignments), "
        f"one pending job of {JOB_PODS} x {JOB_CPU} cpu with a required rack level. One scheduling cycle ending in "
        "a QuotaFeasibleAndInsufficientTopology preemption (asserted: victims in one rack). "
        "`candidates removed` counts the workloads the victim search took out of the snapshot (each followed "
        "by a fit check, and each but the last by a fill-back check). The last two columns repeat the "
        "measurement after `gc.collect(); gc.freeze()`: the plain p90 includes full garbage collections over "
        "the cache's long-lived objects.",
        "",
        "| scenario | load into cache (s) | candidates removed | victims | snapshot median (ms) "
        "| cycle median (ms) | cycle p90 (ms) | after gc.freeze(): median (ms) | p90 (ms) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for scenario, load_s, r in rows:
        lines.append(
            f"| {scenario} | {load_s:.1f} | {r['removed']:,} | {r['victims']} | {r['snapshot_ms']:.2f} "
            f"| {r['cycle_ms']:.1f} | {r['cycle_p90_ms']:.1f} | {r['frozen_ms']:.1f} | {r['frozen_p90_ms']:.1f} |"
        )
    for scenario, text, summary in profiles:
        lines += ["", f"## cProfile of one `{scenario}` cycle", "", summary, "", "```", text.strip(), "```"]
    text = "\n".join(lines) + "\n"
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
