"""Dashboard benchmark: what one build of the page's state costs the operator at scale.

The dashboard's state (`controller/dashboard.py` `state`: every ClusterQueue's quota bars, its
first pending workloads with their positions, the cohort tree, the PreemptionConfigs and the
last preemptions) is built from the cache on the operator's event loop, the loop that also
schedules: while it is built, nothing is decided. With a page open it is built again for a new
preemption and every quarter second otherwise, but the builds may take at most a tenth of the
loop's time (dashboard.BUILD_SHARE). This script builds clusters of growing size (the engine
benchmark's: ClusterQueues in cohorts of ten, every queue full of admitted workloads) with
pending workloads besides, and a full timeline of preemptions, and times the build and its JSON
encoding (what the stream sends), beside the scheduling pass of the same cache when nothing
changed, for scale.

    python benchmarks/dashboard.py [--repeat N] [--sizes 10000:500:5000,100000:5000:50000]

(sizes: admitted workloads : ClusterQueues : pending workloads). Results are printed as a
Markdown table and written to benchmarks/results/dashboard.md. This measures; nothing here is
a test.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

# The engine benchmark's cluster (benchmarks/ is the script's folder, so first on the path).
from engine import NOW, _workload, build

from preemption_operator.api.objects import parse_object
from preemption_operator.controller import dashboard
from preemption_operator.controller.timeline import KEPT, Preemption, Timeline
from preemption_operator.engine import Engine, QueueState
from preemption_operator.engine.cache import Cache


def with_pending(admitted: int, queues: int, pending: int) -> Cache:
    """The engine benchmark's classic cluster and `pending` more workloads spread over the queues
    (priority 0: they wait for quota, parked after the first cycle)."""
    cache = build(admitted, queues)
    cache.load(
        parse_object(_workload(f"pending-{i}", f"cq-{i % queues}", 0, 1, None, NOW - timedelta(seconds=i)))
        for i in range(pending)
    )
    return cache


def timeline(queues: int) -> Timeline:
    """A full timeline's worth of preemptions to show."""
    kept = Timeline()
    for i in range(KEPT):
        queue = f"cq-{i % queues}"
        kept.add(
            Preemption(
                at=NOW.timestamp() + i,
                preemptor=f"bench/pending-{i}",
                preemptor_cluster_queue=queue,
                victim=f"bench/wl-{i % queues}-0",
                victim_cluster_queue=queue,
                reason="InClusterQueue",
                rule="",
                message="Preempted to accommodate a workload (UID: u, JobUID: UNKNOWN) due to prioritization in the"
                " ClusterQueue",
            )
        )
    return kept


def measure(cache: Cache, shown: Timeline, repeat: int) -> dict[str, float]:
    """Medians of a state build, its encoding, and a scheduling cycle in the steady state (the
    pending workloads parked by a first cycle, not timed; each cycle decides the one preemption
    the engine benchmark's cluster has, as the loop would until it is written)."""
    builds, encodes, cycles = [], [], []
    size = 0
    engine, queue_state = Engine(), QueueState()
    engine.cycle(cache.snapshot(NOW), queue_state)
    for _ in range(repeat):
        started = time.perf_counter()
        data = dashboard.state(cache, shown)
        built = time.perf_counter()
        body = json.dumps(data)
        encoded = time.perf_counter()
        engine.cycle(cache.snapshot(NOW), queue_state)
        cycled = time.perf_counter()
        builds.append((built - started) * 1000)
        encodes.append((encoded - built) * 1000)
        cycles.append((cycled - encoded) * 1000)
        size = len(body)
    return {
        "build_ms": statistics.median(builds),
        "build_p90_ms": sorted(builds)[int(0.9 * (len(builds) - 1))],
        "encode_ms": statistics.median(encodes),
        "cycle_ms": statistics.median(cycles),
        "bytes": size,
    }


def _load(load: tuple[float, float, float]) -> str:
    return " / ".join(f"{x:.1f}" for x in load)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--sizes", default="1000:50:500,10000:500:5000,100000:5000:50000")
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "results" / "dashboard.md")
    args = parser.parse_args()
    command = "python benchmarks/dashboard.py" + "".join(
        f" {flag} {value}"
        for flag, value, default in (
            ("--repeat", args.repeat, 30),
            ("--sizes", args.sizes, "1000:50:500,10000:500:5000,100000:5000:50000"),
        )
        if value != default
    )
    load_before = os.getloadavg()
    rows = []
    for spec in args.sizes.split(","):
        admitted, queues, pending = (int(x) for x in spec.split(":"))
        cache = with_pending(admitted, queues, pending)
        shown = timeline(queues)
        gc.collect()
        gc.freeze()  # as the operator does once synced
        result = measure(cache, shown, args.repeat)
        gc.unfreeze()
        del cache
        gc.collect()
        rows.append((admitted, queues, pending, result))
        print(f"{admitted} admitted / {queues} ClusterQueues / {pending} pending: build {result['build_ms']:.1f} ms")
    load_after = os.getloadavg()
    lines = [
        f"# Dashboard benchmark ({datetime.now(UTC):%Y-%m-%d}, {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores, repeat {args.repeat})",
        "",
        "One build of the dashboard's state from the cache (every ClusterQueue's bars and first pending"
        f" workloads, the cohorts, the last {KEPT} preemptions) and its JSON encoding, on the engine benchmark's"
        " classic cluster with pending workloads besides; beside it, the scheduling pass the loop makes on the"
        " same cache when nothing changed (snapshot and decisions, its pending workloads parked by a first pass,"
        " no decision applied). Medians; the cache frozen as the operator freezes it."
        " See `benchmarks/dashboard.py`.",
        "",
        f"Load average before {_load(load_before)}, after {_load(load_after)} (1 / 5 / 15 min; the machine is shared).",
        "",
        "| admitted workloads | ClusterQueues | pending workloads | state build (ms) | build p90 (ms) "
        "| JSON encoding (ms) | state size (KiB) | scheduling pass (ms) | build ÷ pass |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for admitted, queues, pending, r in rows:
        lines.append(
            f"| {admitted:,} | {queues:,} | {pending:,} | {r['build_ms']:.1f} | {r['build_p90_ms']:.1f} "
            f"| {r['encode_ms']:.1f} | {r['bytes'] / 1024:,.0f} | {r['cycle_ms']:.2f} "
            f"| {r['build_ms'] / r['cycle_ms']:.0f}x |"
        )
    lines += ["", f"Command: `{command}`", ""]
    args.output.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
