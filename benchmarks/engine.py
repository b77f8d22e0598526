"""Engine benchmark: one scheduling cycle that ends in a preemption, on clusters of growing size.

Each cluster has ClusterQueues in cohorts of ten, every queue full of admitted workloads, and
one pending workload that must preempt. We time what the operator does per cycle: cut a
snapshot from the cache and run the scheduler over it. Two variants per size:

- classic: fair sharing off; the pending workload has high priority and preempts two workloads
  inside its own ClusterQueue (InClusterQueue);
- fair sharing: the same cluster with `--fair-sharing` (default weights), except that in every
  cohort the second queue borrows 4 cpu the third leaves unused. The pending workload (2 cpu,
  priority 0, in the first queue, which is full) can only borrow, and reclaims from the borrower
  by Dominant Resource Share: borrower 4/10N before, preemptor 2/10N after, so two of the
  borrower's workloads go (InCohortFairSharing; the second at equal shares, which
  LessThanOrEqualToFinalShare allows);
- configurable: classic preemption off everywhere; the first queue of each cohort names a
  PreemptionConfig whose one rule (trigger Always, scope WithinCohortTree, lower boosted
  priority) offers the whole cohort; the pending workload (2 cpu, priority 100) takes two
  (ConfigurablePreemption). Measured with no `spec.ordering` (the classic candidate order), with
  the static ordering [Priority Ascending, AdmissionTimestamp Ascending], and with
  [ClusterQueueDRS Descending, Priority Ascending], whose shares are re-read after each victim.
  These three are interleaved with each other; "/ no ordering" compares with the first.

    python benchmarks/engine.py [--repeat N] [--sizes 1000:50,10000:500,100000:5000]

Results are printed as a Markdown table and written to benchmarks/results/engine.md.
This measures; nothing here is a test.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from preemption_operator.api.objects import parse_object
from preemption_operator.engine import Engine, QueueState
from preemption_operator.engine.cache import Cache
from preemption_operator.engine.fair_sharing import FairSharing

NOW = datetime(2026, 11, 30, tzinfo=UTC)
COHORT_SIZE = 10
BORROWED = 4
"""Fair variant: what the second queue of each cohort borrows from the third."""
CLASSIC, FAIR = "classic", "fair sharing"
CONFIGURABLE = "configurable, no ordering"
STATIC_ORDER = "configurable, ordering Priority, AdmissionTimestamp"
DRS_ORDER = "configurable, ordering ClusterQueueDRS, Priority"
ORDERINGS: dict[str, list[dict[str, str]] | None] = {
    CONFIGURABLE: None,
    STATIC_ORDER: [
        {"orderingField": "Priority", "direction": "Ascending"},
        {"orderingField": "AdmissionTimestamp", "direction": "Ascending"},
    ],
    DRS_ORDER: [
        {"orderingField": "ClusterQueueDRS", "direction": "Descending"},
        {"orderingField": "Priority", "direction": "Ascending"},
    ],
}
GROUPS = ((CLASSIC, FAIR), (CONFIGURABLE, STATIC_ORDER, DRS_ORDER))
"""Variants measured together (interleaved); one group's caches at a time."""
REASONS = {CLASSIC: "InClusterQueue", FAIR: "InCohortFairSharing", **dict.fromkeys(ORDERINGS, "ConfigurablePreemption")}


def _cq(name: str, cohort: str, nominal: int, config: str | None = None) -> dict[str, Any]:
    classic = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
    metadata: dict[str, Any] = {"name": name}
    if config is not None:
        metadata["annotations"] = {"kueue.x-k8s.io/preemption-config-name": config}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": metadata,
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": {},
            "preemption": {} if config is not None else classic,
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": nominal}]}],
                }
            ],
        },
    }


def _workload(name: str, queue: str, priority: int, cpu: int, admitted_in: str | None, at: datetime) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "bench", "uid": name, "creationTimestamp": at.isoformat()},
        "spec": {
            "queueName": queue,
            "priority": priority,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": str(cpu)}}}]}},
                }
            ],
        },
    }
    if admitted_in:
        stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        body["status"] = {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "True",
                    "reason": "QuotaReserved",
                    "message": "",
                    "lastTransitionTime": stamp,
                },
                {
                    "type": "Admitted",
                    "status": "True",
                    "reason": "Admitted",
                    "message": "",
                    "lastTransitionTime": stamp,
                },
            ],
            "admission": {
                "clusterQueue": admitted_in,
                "podSetAssignments": [
                    {"name": "main", "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": str(cpu)}, "count": 1}
                ],
            },
        }
    return body


def _config(ordering: list[dict[str, str]] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "rules": [
            {
                "name": "lower-priority",
                "activationPolicy": {"trigger": "Always"},
                "candidateSelectors": [
                    {"scope": "WithinCohortTree", "priority": {"mode": "Boosted", "comparison": "LessThan"}}
                ],
            }
        ]
    }
    if ordering is not None:
        spec["ordering"] = ordering
    return {
        "apiVersion": "kueue.x-k8s.io/v1alpha1",
        "kind": "PreemptionConfig",
        "metadata": {"name": "bench"},
        "spec": spec,
    }


def build(workloads: int, queues: int, variant: str = CLASSIC) -> Cache:
    per_queue = workloads // queues
    fair = variant == FAIR
    configurable = variant in ORDERINGS
    bodies: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}, "spec": {}},
    ]
    if configurable:
        bodies.append(_config(ORDERINGS[variant]))
    for q in range(queues):
        name = f"cq-{q}"
        config = "bench" if configurable and q % COHORT_SIZE == 0 else None
        bodies.append(_cq(name, f"cohort-{q // COHORT_SIZE}", per_queue, config))
        bodies.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": name, "namespace": "bench"},
                "spec": {"clusterQueue": name},
            }
        )
        # Same number of workloads either way: in the fair variant four move from queue 2 to 1.
        running = per_queue + (BORROWED if q % COHORT_SIZE == 1 else -BORROWED if q % COHORT_SIZE == 2 else 0) * fair
        for w in range(running):
            at = NOW - timedelta(minutes=w + 1)
            bodies.append(_workload(f"wl-{q}-{w}", name, w % 5, 1, name, at))
    bodies.append(_workload("preemptor", "cq-0", 0 if fair else 100, 2, None, NOW))
    cache = Cache(FairSharing(enabled=True) if fair else FairSharing())
    cache.load(parse_object(body) for body in bodies)
    return cache


def _one(cache: Cache, scheduler: Engine, variant: str) -> tuple[float, float]:
    """One timed cycle: (snapshot ms, snapshot + cycle ms)."""
    started = time.perf_counter()
    snapshot = cache.snapshot(NOW)
    cut = time.perf_counter()
    result = scheduler.cycle(snapshot, QueueState())
    done = time.perf_counter()
    assert len(result.preempted) == 2, "the cycle must end in a preemption"
    reasons = {p.target.reason for p in result.preempted}
    assert reasons == {REASONS[variant]}, f"{variant}: preempted for {reasons}, not what is measured"
    return (cut - started) * 1000, (done - started) * 1000


def measure(caches: dict[str, Cache], repeat: int) -> dict[str, dict[str, float]]:
    """The variants' cycles interleaved (one of each in turn), so that a noisy moment of a shared
    machine slows both alike and the ratio between them holds."""
    schedulers = {variant: Engine() for variant in caches}
    times: dict[str, tuple[list[float], list[float]]] = {variant: ([], []) for variant in caches}
    for _ in range(repeat):
        for variant, cache in caches.items():
            snapshot_ms, cycle_ms = _one(cache, schedulers[variant], variant)
            times[variant][0].append(snapshot_ms)
            times[variant][1].append(cycle_ms)
    return {
        variant: {
            "snapshot_ms": statistics.median(snapshots),
            "cycle_ms": statistics.median(cycles),
            "cycle_p90_ms": sorted(cycles)[int(0.9 * (len(cycles) - 1))],
        }
        for variant, (snapshots, cycles) in times.items()
    }


def _load(load: tuple[float, float, float]) -> str:
    return " / ".join(f"{x:.1f}" for x in load)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=300)
    parser.add_argument("--sizes", default="1000:50,10000:500,100000:5000")
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "results" / "engine.md")
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows = []
    for spec in args.sizes.split(","):
        workloads, queues = (int(x) for x in spec.split(":"))
        for group in GROUPS:
            caches: dict[str, Cache] = {}
            load_s: dict[str, float] = {}
            for variant in group:
                started = time.perf_counter()
                caches[variant] = build(workloads, queues, variant)
                load_s[variant] = time.perf_counter() - started
            results = measure(caches, args.repeat)
            # Again as the operator runs: it freezes its cache once synced, so full collections do
            # not rescan it (run.py); garbage made per cycle is still collected.
            gc.collect()
            gc.freeze()
            frozen = measure(caches, args.repeat)
            gc.unfreeze()
            del caches  # the 100k caches are large: one group at a time
            gc.collect()
            for variant in group:
                result = results[variant]
                result.update({f"frozen_{k}": v for k, v in frozen[variant].items()})
                rows.append((workloads, queues, variant, load_s[variant], result))
                print(
                    f"{workloads} workloads / {queues} ClusterQueues, {variant}: "
                    f"cycle median {result['cycle_ms']:.2f} ms",
                    flush=True,
                )
    load_after = os.getloadavg()
    lines = [
        f"# Engine benchmark ({datetime.now(UTC):%Y-%m-%d}, {platform.python_implementation()} {platform.python_version()}, "
        f"{platform.machine()}, {os.cpu_count()} cores, repeat {args.repeat})",
        "",
        "One scheduling cycle ending in a preemption of two workloads; cohorts of ten queues. classic: inside one "
        "ClusterQueue (InClusterQueue), fair sharing off. fair sharing: `--fair-sharing`, reclaiming from a borrower "
        "of the cohort by Dominant Resource Share (InCohortFairSharing). configurable: classic preemption off, a "
        "PreemptionConfig rule offers the whole cohort (ConfigurablePreemption), without `spec.ordering`, with "
        "[Priority, AdmissionTimestamp] (static: one sort) and with [ClusterQueueDRS Descending, Priority] (shares "
        "re-read after each victim); see `benchmarks/engine.py`. classic and fair sharing are interleaved, one "
        "cycle of each in turn, over the same stretch of time; so are the three configurable variants, whose last "
        "column compares each with the one without ordering.",
        "",
        f"Load average before {_load(load_before)}, after {_load(load_after)} (1 / 5 / 15 min; the machine is shared).",
        "",
        "The last three columns measure again after `gc.collect(); gc.freeze()`, as the operator freezes its "
        "cache once synced: the plain figures include full garbage collections over the whole cache.",
        "",
        "| admitted workloads | ClusterQueues | preemption | load into cache (s) | snapshot median (ms) "
        "| cycle median (ms) | cycle p90 (ms) | cycle median / classic "
        "| frozen: cycle median (ms) | frozen: p90 (ms) | frozen: median / classic "
        "| median / no ordering | frozen: median / no ordering |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    classic: dict[int, dict[str, float]] = {}
    unordered: dict[int, dict[str, float]] = {}
    for workloads, queues, variant, load_s, r in rows:
        if variant == CLASSIC:
            classic[workloads] = r
        if variant == CONFIGURABLE:
            unordered[workloads] = r
        base = classic.get(workloads)
        ratio = r["cycle_ms"] / base["cycle_ms"] if base else float("nan")
        frozen_ratio = r["frozen_cycle_ms"] / base["frozen_cycle_ms"] if base else float("nan")
        plain = unordered.get(workloads)
        ordered = (
            f"{r['cycle_ms'] / plain['cycle_ms']:.2f}x | {r['frozen_cycle_ms'] / plain['frozen_cycle_ms']:.2f}x"
            if variant in ORDERINGS and plain is not None
            else " | "
        )
        lines.append(
            f"| {workloads:,} | {queues:,} | {variant} | {load_s:.1f} | {r['snapshot_ms']:.2f} | {r['cycle_ms']:.2f} "
            f"| {r['cycle_p90_ms']:.2f} | {ratio:.2f}x | {r['frozen_cycle_ms']:.2f} | {r['frozen_cycle_p90_ms']:.2f} "
            f"| {frozen_ratio:.2f}x | {ordered} |"
        )
    command = " ".join(["python", "benchmarks/engine.py", *sys.argv[1:]])
    lines += ["", f"Command: `{command}`"]
    text = "\n".join(lines) + "\n"
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
