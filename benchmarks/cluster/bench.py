"""The cluster-outcome benchmark: one seeded trace of GPU jobs replayed on three sides, each on a
fresh cluster of kwok nodes (kube-scheduler binds the pods, kwok runs and finishes them), and
what happened to the cluster written to benchmarks/results/cluster.md with two plots.

    python benchmarks/cluster/bench.py [--scale 1] [--seed 1] [--day 240] [--load 1.0] [--drain 150]
                                       [--sides kueue,classic,rules] [--rounds 1] [--trace FILE]
    python benchmarks/cluster/bench.py --build-only      # Kueue's binary into the cache

Sides, run one after the other on a fresh cluster each, with the same trace file (with --rounds N,
N rounds of all sides, each round's order rotated by one):
- kueue:   Kueue v0.19.2's controller manager (cmd/kueue), its batch/job integration;
- classic: this operator, with the same queues and classic preemption;
- rules:   this operator, the same plus PreemptionConfig rules for hero jobs and topology
           defragmentation (manifests.py says what they allow).

Needs the control-plane binaries (`export KUBEBUILDER_ASSETS=$(hack/setup-envtest.sh)`), Go (the
first run builds Kueue: see kueue.py) and matplotlib (`pip install -e '.[bench]'`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import kueue
import manifests
import report
from jobtrace import Shape, Trace, generate
from observer import Api, Observer, machine_busy, process_usage, replay
from outcome import Outcome, outcome

from preemption_operator.testing.cluster import Nodes, running_cluster
from preemption_operator.testing.control_plane import ControlPlane, find_assets
from preemption_operator.testing.operator_process import OperatorProcess

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "cluster.md"
NODE_CAPACITY = {"cpu": "32", "memory": "256Gi", manifests.GPU: "8", "pods": "110"}
SIDE_NAMES = {
    "kueue": f"Kueue {kueue.VERSION}",
    "classic": "ours, classic",
    "rules": "ours, rules",
}


def log(message: str) -> None:
    print(f"cluster-bench: {message}", file=sys.stderr, flush=True)


@dataclass
class SideRun:
    side: str
    outcome: Outcome
    controller_cpu: float
    controller_rss_mib: float
    wall: float
    """Start of the cluster to its teardown."""
    replay_wall: float
    """First Job created to the last completed (or the drain limit)."""
    machine_busy_share: float
    """Share of the machine's CPU time that was busy during the replay (all processes)."""
    unfinished: int
    submit_errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    round: int = 0
    """1, 2, ... with --rounds above 1; 0 for a single round."""


def apply(plane: ControlPlane, objects: list[dict]) -> None:
    plane.kubectl(
        "apply", "--server-side", "--field-manager=cluster-bench", "-f", "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}), check=True, timeout=120,
    )  # fmt: skip


def start_controller(side: str, plane: ControlPlane, workdir: Path, binary: Path | None) -> tuple[int, object]:
    """The side's controller, ready; returns its pid and a handle to stop it."""
    if side == "kueue":
        assert binary is not None
        proc = kueue.KueueProcess(binary, plane.kubeconfig, workdir, plane.env).start()
        return proc.pid, proc
    op = OperatorProcess(
        side,
        plane.kubeconfig,
        workdir,
        lease_name="cluster-bench",
        leader_election=False,
        base_env=plane.env,
        extra_args=["--integrations=batch/job", f"--label-keys-to-copy={manifests.NODE_COUNT_LABEL}"],
    ).start()
    op.wait_ready(timeout=60)
    assert op.popen is not None
    return op.popen.pid, op


def queues_active(plane: ControlPlane) -> bool:
    listed = json.loads(plane.kubectl("get", "clusterqueues", "-o", "json", check=True).stdout)["items"]
    return len(listed) == 3 and all(
        any(c["type"] == "Active" and c["status"] == "True" for c in (q.get("status") or {}).get("conditions", []))
        for q in listed
    )


def run_side(side: str, trace: Trace, args: argparse.Namespace, workdir: Path, binary: Path | None) -> SideRun:
    shape = trace.shape
    nodes = Nodes(
        shape.nodes,
        NODE_CAPACITY,
        blocks=shape.blocks,
        racks_per_block=shape.racks_per_block,
        labels={manifests.POOL_LABEL: manifests.POOL},
    )
    started = time.monotonic()
    notes: list[str] = []
    with running_cluster(nodes, assets=args.assets, crds=side != "kueue") as plane:
        if side == "kueue":
            assert args.kueue_crds is not None
            plane.apply_crds(kueue.crd_files(args.kueue_crds))
            plane.kubectl("create", "namespace", kueue.NAMESPACE, check=True)
        apply(plane, manifests.queue_objects(shape, side))
        pid, controller = start_controller(side, plane, workdir, binary)
        deadline = time.monotonic() + 60
        while not queues_active(plane):
            if time.monotonic() > deadline:
                notes.append("the ClusterQueues did not all report Active within 60 s; the replay ran anyway")
                break
            time.sleep(0.5)

        def api() -> Api:
            return Api(plane.server, plane.token, str(plane.ca_file))

        t0 = time.monotonic()
        observer = Observer(api, t0, {j.name: j.cls for j in trace.jobs})
        observer.start()
        busy0, total0 = machine_busy()
        stop = threading.Event()
        errors: list[str] = []
        submitter = threading.Thread(target=lambda: errors.extend(replay(trace, api(), observer, stop)), daemon=True)
        submitter.start()
        limit = trace.day_seconds + args.drain
        next_report = 30.0
        while observer.now() < limit:
            if not submitter.is_alive() and observer.unfinished() == 0:
                break
            if observer.now() >= next_report:
                pods, jobs = observer.snapshot()
                running = sum(p.gpus for p in pods if p.bound is not None and p.released() == float("inf"))
                log(f"{side}: t={observer.now():.0f}s jobs {len(jobs)}/{len(trace.jobs)} submitted, "
                    f"{observer.unfinished()} unfinished, {running}/{shape.gpus} GPUs allocated")  # fmt: skip
                next_report += 30.0
            time.sleep(0.5)
        end = observer.now()
        stop.set()
        busy1, total1 = machine_busy()
        usage = process_usage(pid)
        observer.stop()
        pods, jobs = observer.snapshot()
        unfinished = observer.unfinished()
        controller.stop()  # type: ignore[attr-defined]
        if side == "kueue":
            (workdir / "kueue.log").replace(workdir / f"{side}-controller.log")
        else:
            Path(controller.log_path).replace(workdir / f"{side}-controller.log")  # type: ignore[attr-defined]
        for state in ("workloads", "jobs"):
            listed = plane.kubectl("get", state, "-A", "-o", "json", timeout=120)
            (workdir / f"{side}-{state}.json").write_text(listed.stdout)
    result = outcome(side, pods, jobs, capacity=shape.gpus, day=trace.day_seconds, end=end)
    return SideRun(
        side=side,
        outcome=result,
        controller_cpu=usage.cpu_seconds,
        controller_rss_mib=usage.peak_rss_mib,
        wall=time.monotonic() - started,
        replay_wall=end,
        machine_busy_share=(busy1 - busy0) / max(1.0, total1 - total0),
        unfinished=unfinished,
        submit_errors=errors,
        notes=notes,
    )


def rounds(sides: list[str], count: int) -> list[list[str]]:
    """The sides' order in each round, rotated by one each round so that no side always runs
    first (on a machine that warms up or slows down, the first side would be favoured)."""
    return [sides[i % len(sides) :] + sides[: i % len(sides)] for i in range(count)]


def machine() -> dict[str, str]:
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kib = int(f.readline().split()[1])
    return {
        "cpu": f"{cpu}, {os.cpu_count()} cores",
        "memory": f"{mem_kib / 1024 / 1024:.1f} GiB",
        "kernel": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "load": ", ".join(f"{v:.2f}" for v in os.getloadavg()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=int, default=1, help="cluster size: 64 x SCALE nodes of 8 GPUs (default 1)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--day", type=float, default=240.0, help="seconds one day of the trace lasts (default 240)")
    parser.add_argument("--load", type=float, default=1.0, help="offered GPU-seconds / capacity over the day")
    parser.add_argument("--drain", type=float, default=150.0, help="seconds after the day before a side is stopped")
    parser.add_argument("--sides", default=",".join(manifests.SIDES), help="comma-separated, run in this order")
    parser.add_argument(
        "--rounds", type=int, default=1, help="run the sides this many times, interleaved, each round's order rotated"
    )
    parser.add_argument("--trace", type=Path, help="replay this trace file instead of generating one")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--artifacts", type=Path, help="folder for the trace, logs and raw data (default: a temp dir)")
    parser.add_argument("--build-only", action="store_true", help="build Kueue's binary and stop")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    unknown = set(sides) - set(manifests.SIDES)
    if unknown:
        parser.error(f"unknown side(s) {sorted(unknown)} (known: {', '.join(manifests.SIDES)})")

    binary, args.kueue_crds = (None, None)
    if "kueue" in sides or args.build_only:
        build_started = time.monotonic()
        binary, args.kueue_crds = kueue.build(log)
        log(f"kueue binary: {binary} ({time.monotonic() - build_started:.0f}s to build or find)")
    if args.build_only:
        return 0
    args.assets = find_assets()

    artifacts = args.artifacts or Path(tempfile.mkdtemp(prefix="cluster-bench-"))
    artifacts.mkdir(parents=True, exist_ok=True)
    if args.trace:
        trace = Trace.read(args.trace)
    else:
        trace = generate(args.seed, shape=Shape.scaled(args.scale), day_seconds=args.day, load=args.load)
    trace_file = artifacts / "trace.json"
    trace.write(trace_file)
    log(f"trace {trace_file}: {dict(trace.counts())} on {trace.shape.nodes} nodes; artifacts in {artifacts}")

    before = machine()
    started_at = datetime.now(UTC)
    wall0 = time.monotonic()
    runs: list[SideRun] = []
    for number, order in enumerate(rounds(sides, args.rounds), start=1):
        for side in order:
            name = side if args.rounds == 1 else f"{side}-{number}"
            workdir = artifacts / name
            workdir.mkdir(exist_ok=True)
            log(f"side {name}: starting a fresh cluster")
            run = run_side(side, trace, args, workdir, binary)
            run.round = number if args.rounds > 1 else 0
            log(f"side {name}: done in {run.wall:.0f}s ({run.unfinished} jobs unfinished)")
            runs.append(run)
            (artifacts / f"{name}-outcome.json").write_text(json.dumps(asdict(run), default=str) + "\n")
    wall = time.monotonic() - wall0
    after = machine()

    command = "python benchmarks/cluster/bench.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    text = report.render(
        runs=runs,
        trace=trace,
        names=SIDE_NAMES,
        command=command.strip(),
        machine_before=before,
        machine_after=after,
        started_at=started_at,
        wall=wall,
        artifacts=artifacts,
        output=args.output,
        extra={
            "control plane": "Kubernetes v1.34.4 (kube-apiserver, kube-controller-manager, kube-scheduler), etcd "
            f"3.6.5, kwok v0.8.0 (KUBEBUILDER_ASSETS={args.assets})",
            "go": subprocess.run(["go", "version"], capture_output=True, text=True).stdout.strip(),
        },
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    log(f"wrote {args.output} (all sides: {wall:.0f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
