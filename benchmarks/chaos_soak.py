"""Chaos soak: the operator under every fault family for minutes, with the promise checked
throughout ("a ClusterQueue is never over-admitted and nothing is lost") by the invariant monitor
of preemption_operator.testing.chaos (I1-I3, I5 and I6 at every observed state, I4 after each phase).

    python benchmarks/chaos_soak.py [--kills 24] [--outages 2] [--phase-seconds 40] [--seed N]

Starts etcd and two kube-apiservers (KUBEBUILDER_ASSETS or hack/setup-envtest.sh's cache),
installs crds/, kube-scheduler, kwok's nodes and the JobSet controller, and runs, on one topology
with quota turning over (Workloads, Jobs, plain Pods, pod groups and JobSets; see docs/chaos.md)
and a foreign writer at 20 writes/s throughout:

1. kill -9 of the leader of two replicas, --kills times (every other one in the middle of a
   batch of Workload status writes), each restarted as the standby;
2. 429/500 answers, a 409 storm, latency and cut connections between operators and API server;
3. deletes racing the operator's writes (admitting, evicting) and preemptors deleted mid-way;
4. --outages stops of the operators' kube-apiserver (~20 s; the first SIGKILL, the next SIGTERM)
   while Workloads are deleted through the other one;
5. the leader stopped (SIGSTOP) by its stop-before-write fault hook past its lease, and its event
   loop stalled by stall-before-write (skipped, and said so, when the operator lacks the hooks).

Prints the results and writes them to benchmarks/results/chaos.md (what was measured, the
machine, the date and the command). Exits 1 when the promise was broken.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from preemption_operator.testing.chaos import (
    NODES,
    ChaosEnv,
    DriverConfig,
    HookMissing,
    apiserver_outage,
    error_injection,
    foreign_and_racing_deletes,
    kill_storm,
    leader_stall,
    leader_stop_before_write,
)
from preemption_operator.testing.cluster import start_nodes
from preemption_operator.testing.control_plane import CONTROLLERS, NODE_CONTROLLERS, running_control_plane
from preemption_operator.testing.go_modules import ModuleUnavailable
from preemption_operator.testing.job_controllers import JobSetController

ROOT = Path(__file__).resolve().parents[1]

LOAD = DriverConfig(
    creates_per_second=3.0,
    max_workloads=0,
    max_pending=20,
    pending_deletes_per_second=0.2,
)
RACING = DriverConfig(
    creates_per_second=4.0,
    max_workloads=0,
    max_pending=24,
    pending_deletes_per_second=0.5,
    racing_deletes_per_second=1.0,
)
FOREIGN_RATE = 20.0
SETTLE_SECONDS = 60.0


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f", {kib / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return f"{cpu}, {os.cpu_count()} cores{memory}, {platform.system()} {platform.release()}, CPython {platform.python_version()}"


def describe_operator() -> str:
    import preemption_operator

    where = Path(preemption_operator.__file__).resolve().parent
    try:
        rev = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "operator"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev, dirty = "unknown", ""
    if where != (ROOT / "operator" / "preemption_operator").resolve():
        return f"`{where}` (a copy, not this working tree; the repository is at {rev})"
    return f"`{where}` (this working tree: {rev}{' + uncommitted changes under operator/' if dirty else ''})"


def apiserver_version(assets: Path) -> str:
    try:
        return subprocess.run(
            [str(assets / "kube-apiserver"), "--version"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "kube-apiserver (version unknown)"


class Phases:
    """Runs the phases in order; one that raises is recorded and the soak goes on."""

    def __init__(self, env: ChaosEnv) -> None:
        self.env = env
        self.rows: list[tuple[str, float, str]] = []
        self.failures: list[str] = []
        """Phases that broke the promise without an I1-I3 violation (I4 not reached, errors)."""
        self.skipped: list[str] = []
        self._current = ""

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    def run(self, name: str, body: Callable[[], str | None]) -> None:
        self._current = name
        began = time.monotonic()
        print(f"[{self.env.elapsed():7.1f}s] {name} ...", flush=True)
        try:
            outcome = body() or "done"
        except HookMissing as exc:
            outcome = f"skipped: {str(exc).splitlines()[0]}"
            self.skipped.append(name)
            self.env.stop_load()
        except Exception as exc:  # the soak records and goes on
            outcome = f"FAILED: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            self.failures.append(f"{name}: {type(exc).__name__}")
            traceback.print_exc()
            self.env.stop_load()
        seconds = time.monotonic() - began
        self.rows.append((name, seconds, outcome))
        print(f"[{self.env.elapsed():7.1f}s] {name}: {outcome} ({seconds:.0f}s)", flush=True)

    def settle(self, label: str) -> str:
        seconds, problems = self.env.settle(label, SETTLE_SECONDS)
        if seconds is None:
            self.failures.append(f"{self._current}: I4 not reached within {SETTLE_SECONDS:.0f}s")
            return f"NOT settled within {SETTLE_SECONDS:.0f}s: " + "; ".join(problems[:5])
        return f"settled (I4) in {seconds:.1f}s"


def replicas(env: ChaosEnv) -> None:
    """op-a (leader) and op-b (standby), through their proxies; whatever else runs is stopped."""
    for op in env.operators.values():
        if op.alive() and op.name not in ("op-a", "op-b"):
            op.stop()
    for name in ("op-a", "op-b"):
        replica = env.operators.get(name)
        if replica is None or not replica.alive():
            env.start_operator(name)
    env.wait_leader(timeout=60)


def soak(env: ChaosEnv, args: argparse.Namespace) -> Phases:
    phases = Phases(env)

    def kills() -> str:
        replicas(env)
        env.start_load(LOAD, foreign_rate=FOREIGN_RATE)
        time.sleep(5)
        kill_storm(env, args.kills, pause=(1.0, 6.0))
        return phases.settle(f"{args.kills} leader kills")

    def errors() -> str:
        replicas(env)
        env.start_load(LOAD, foreign_rate=FOREIGN_RATE)
        time.sleep(3)
        error_injection(env, phase_seconds=args.phase_seconds / 4, cuts=4)
        crashed = [op.name for op in env.operators.values() if op.name in ("op-a", "op-b") and not op.alive()]
        return f"{phases.settle('API errors')}; exited under errors: {crashed or 'none'}"

    def racing() -> str:
        replicas(env)
        env.start_load(RACING, foreign_rate=FOREIGN_RATE)
        raced = foreign_and_racing_deletes(env, args.phase_seconds)
        return f"{raced} preemptors deleted mid-way; {phases.settle('racing deletes')}"

    def outage(i: int) -> Callable[[], str]:
        def body() -> str:
            replicas(env)
            env.start_load(LOAD, foreign_rate=FOREIGN_RATE)
            time.sleep(8)
            o = apiserver_outage(env, down_seconds=20.0, kill=i % 2 == 0, settle_timeout=SETTLE_SECONDS)
            if o.recovery_s is None:
                phases.failures.append(f"outage {i + 1}: I4 not reached within {SETTLE_SECONDS:.0f}s of the restart")
            recovery = f"not within {SETTLE_SECONDS:.0f}s" if o.recovery_s is None else f"{o.recovery_s:.2f}s"
            return (
                f"{o.deleted_while_down} deletes while down; recovery to I4: {recovery}; "
                f"{o.ghost_patches_404} PATCHes answered 404 after the restart"
            )

        return body

    def stop_before_write() -> str:
        env.start_load(LOAD, foreign_rate=FOREIGN_RATE)
        take = leader_stop_before_write(env)
        return f"{take.note}; {phases.settle('a leader SIGSTOP')}"

    def stall() -> str:
        env.start_load(LOAD, foreign_rate=FOREIGN_RATE)
        take = leader_stall(env, seconds=6.0)
        return f"{take.note}; {phases.settle('a leader stall')}"

    phases.run(f"kill -9 of the leader x{args.kills}", kills)
    phases.run("429 / 500 / 409 storm / latency / cut connections", errors)
    phases.run("foreign writer + racing deletes", racing)
    for i in range(args.outages):
        phases.run(f"kube-apiserver outage {i + 1} ({'SIGKILL' if i % 2 == 0 else 'SIGTERM'})", outage(i))
    for _ in range(args.leader_rounds):
        phases.run("leader SIGSTOP before writes (stop-before-write hook)", stop_before_write)
        phases.run("leader event-loop stall (stall-before-write hook)", stall)
    return phases


def write_report(
    path: Path,
    env: ChaosEnv,
    phases: Phases,
    *,
    started: datetime,
    seconds: float,
    command: str,
    assets: Path,
    operator: str,
) -> str:
    """The report, written to `path`; `operator`: the code measured, as `describe_operator` said at
    the start (operators started later in the run load the tree as it is then)."""
    now = describe_operator()
    if now != operator:
        operator += f"; **changed during the run**, at its end: {now}"

    violations = env.violations()
    broken = bool(violations) or phases.failed
    by: dict[str, int] = {}
    for v in violations:
        by[v.invariant] = by.get(v.invariant, 0) + 1
    verdict = "the promise was BROKEN" if broken else "the promise held"
    lines = [
        f"# Chaos soak ({started:%Y-%m-%d %H:%M} UTC, {seconds / 60:.0f} min)",
        "",
        f"**Verdict: {verdict}.** Violations at observed states: "
        f"{', '.join(f'{k}: {n}' for k, n in sorted(by.items())) or 'none'}. "
        f"Other failures: {'; '.join(phases.failures) or 'none'}. "
        f"Not exercised: {'; '.join(phases.skipped) or 'nothing'}.",
        "",
        f"- command: `{command}`",
        f"- machine: {machine()}",
        f"- control plane: etcd + 2 x {apiserver_version(assets)} on loopback, kube-scheduler, kwok with "
        f"{NODES.count} nodes of {NODES.capacity['cpu']} cpu",
        f"- operator measured: {operator}",
        f"- seed: {env.seed}",
        f"- topology: {len(env.topology.cohorts)} cohorts x 3 ClusterQueues + 1 without a cohort, one flavor, cpu only;"
        f" {len(env.topology.namespaces)} namespaces with a LocalQueue per ClusterQueue; lease {env.lease_seconds} s",
        "",
        "## Phases",
        "",
        "| phase | seconds | outcome |",
        "|---|---:|---|",
        *(f"| {name} | {secs:.0f} | {outcome} |" for name, secs, outcome in phases.rows),
        "",
        "## Figures",
        "",
        env.figures.markdown(),
        "",
    ]
    if env.figures.takeovers:
        lines += ["## Takeovers", "", env.figures.takeover_table(), ""]
    for i, o in enumerate(env.figures.outages, 1):
        if o.problems:
            lines += [
                f"## Outage {i}: why I4 did not hold {SETTLE_SECONDS:.0f} s after the restart",
                "",
                "```",
                *o.problems[:40],
                "```",
                "",
            ]
    if env.figures.notes:
        lines += ["## Notes", "", *(f"- {n}" for n in env.figures.notes), ""]
    lines += ["## Violations", ""]
    if violations:
        lines += ["```", *(str(v) for v in violations[:200]), "```"]
        if len(violations) > 200:
            lines.append(f"... and {len(violations) - 200} more")
    else:
        lines.append(
            "None: I1 (quota), I2 (evictions counted once), I3 (foreign writes kept) held at every observed state."
        )
    lines += [
        "",
        "## Requests by operator (through the fault proxies)",
        "",
        *(f"### {name}\n\n```\n{proxy.summary(top=20)}\n```\n" for name, proxy in env.proxies.items()),
        f"Invariant monitor: {env.monitor.events} watch events, {env.monitor.relists} lists, "
        f"{len(env.monitor.admissions)} admissions and {len(env.monitor.evictions)} evictions observed.",
        "",
    ]
    text = "\n".join(lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=24, help="kill -9 of the leader (>= 20 for the soak)")
    parser.add_argument("--outages", type=int, default=2, help="kube-apiserver outages of ~20 s")
    parser.add_argument("--leader-rounds", type=int, default=2, help="rounds of leader SIGSTOP + stall")
    parser.add_argument("--phase-seconds", type=float, default=40.0, help="length of the error and racing phases")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "chaos.md")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the work folder (the operators' logs; with CHAOS_OPERATOR_VERBOSE=1 at debug level) and print where",
    )
    args = parser.parse_args()
    env_vars = [f"{k}={shlex.quote(os.environ[k])}" for k in ("PYTHONPATH",) if os.environ.get(k)]
    command = " ".join([*env_vars, "python", shlex.join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]])])
    started = datetime.now(UTC)
    began = time.monotonic()
    operator = describe_operator()
    with (
        # Jobs, Pods and JobSets among the load (real pods, created, bound, run and deleted) need
        # kube-controller-manager, kube-scheduler, kwok's nodes and the JobSet controller.
        running_control_plane(
            controller_manager=True, controllers=(*CONTROLLERS, *NODE_CONTROLLERS), more_apiservers=1
        ) as plane,
        (
            contextlib.nullcontext(tempfile.mkdtemp(prefix="chaos-soak-"))
            if args.keep
            else tempfile.TemporaryDirectory(prefix="chaos-soak-")
        ) as work,
    ):
        if args.keep:
            print(f"work folder (kept): {work}", file=sys.stderr)
        start_nodes(plane, NODES)
        jobsets: JobSetController | None
        try:
            jobsets = JobSetController(plane, Path(work)).start()
        except (ModuleUnavailable, RuntimeError) as error:
            print(f"no JobSets in the load: the JobSet controller did not start: {error}", file=sys.stderr)
            jobsets = None
        env = ChaosEnv(plane, Path(work), name="soak", seed=args.seed, jobsets=jobsets is not None)
        with env:
            phases = soak(env, args)
            env.stop_load()
            if jobsets is None:
                env.figures.notes.append("no JobSets in the load: the JobSet controller did not start")
            text = write_report(
                args.output,
                env,
                phases,
                started=started,
                seconds=time.monotonic() - began,
                command=command,
                assets=plane.assets,
                operator=operator,
            )
        if jobsets is not None:
            jobsets.stop()
    print(text)
    print(f"written to {args.output}")
    broken = "the promise was BROKEN" in text
    sys.exit(1 if broken else 0)


if __name__ == "__main__":
    main()
