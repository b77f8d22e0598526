"""Operator benchmark on a real kube-apiserver: admissions per second and preemptor
time-to-admission, next to the rate a bare client can patch Workload status on the same server.

    python benchmarks/operator_throughput.py [--queues 20] [--workloads 1000] [--parked 10000]

Starts etcd + kube-apiserver (KUBEBUILDER_ASSETS or hack/setup-envtest.sh's cache), installs
crds/, and runs `preemption-operator run` against it. Half the workloads (low priority) fill
every ClusterQueue; the other half (high priority) each preempt one of them. Then `--parked`
pending workloads are added for a memory reading, and the operator is restarted to time its
cache build. Results are printed and written to benchmarks/results/operator.md; every figure in
it is measured in that run. This measures; nothing here is a test.

The peer: when the Kueue harness is built (`make kueue-harness`), the same phase runs against
Kueue's minimalkueue with its client limit lifted (`--kueue-qps`, 1000 as in the harness's
comparison), on a second control plane with Kueue's own CRDs, measured the same way (its bare
client rates on that plane, before and after). This script plays the job controller there, as
Kueue's own performance runner does: an evicted Workload's quota reservation is cleared by one
status patch (Kueue leaves that to a job integration; this operator releases a Workload that
no job owns itself). Kueue's writes are counted from kube-apiserver's own request metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lightkube import AsyncClient, KubeConfig
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace
from lightkube.types import PatchType

from preemption_operator.testing.control_plane import (
    ControlPlane,
    die_with_parent_hook,
    log_tail,
    running_control_plane,
)
from preemption_operator.testing.kueue_harness import kueue_harness
from preemption_operator.testing.operator_process import OperatorProcess

ROOT = Path(__file__).resolve().parents[1]

Workload = create_namespaced_resource("kueue.x-k8s.io", "v1beta2", "Workload", "workloads")
ClusterQueue = create_global_resource("kueue.x-k8s.io", "v1beta2", "ClusterQueue", "clusterqueues")
KUEUE_QPS = 1000
PARALLEL = 8
BARE = 1000  # requests of each bare-client measurement
NS = "bench"
PENDING = "preemption_operator_pending_workloads"


def cluster_yaml(queues: int, per_queue: int) -> str:
    docs = [
        f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}",
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: default}",
    ]
    for q in range(queues):
        docs.append(
            f"""apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: cq-{q}}}
spec:
  namespaceSelector: {{}}
  preemption: {{withinClusterQueue: LowerPriority}}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{{name: default, resources: [{{name: cpu, nominalQuota: {per_queue}}}]}}]"""
        )
        docs.append(
            f"apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\n"
            f"metadata: {{name: lq-{q}, namespace: {NS}}}\nspec: {{clusterQueue: cq-{q}}}"
        )
    return "\n---\n".join(docs) + "\n"


def workload(name: str, queue: str | None, priority: int) -> Any:
    spec: dict[str, Any] = {
        "priority": priority,
        "podSets": [
            {
                "name": "main",
                "count": 1,
                "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}},
            }
        ],
    }
    if queue:
        spec["queueName"] = queue
    return Workload(metadata=ObjectMeta(name=name, namespace=NS), spec=spec)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


PROCESSES = ("kube-apiserver", "etcd", "operator", "script")


def cpu_by_process(operator_pid: int | None = None) -> dict[str, float]:
    """CPU seconds so far of kube-apiserver and etcd (this script's children), the operator, this
    script, and the machine's idle time: what each side of a phase costs is the difference."""
    tick = os.sysconf("SC_CLK_TCK")
    out = dict.fromkeys(PROCESSES, 0.0)
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        seconds = (int(fields[11]) + int(fields[12])) / tick
        pid, parent = int(entry.name), int(fields[1])
        if pid == me:
            out["script"] += seconds
        elif pid == operator_pid:
            out["operator"] += seconds
        elif parent == me and name in ("kube-apiserver", "etcd"):
            out[name] += seconds
    out["idle"] = int(Path("/proc/stat").read_text().split("\n", 1)[0].split()[4]) / tick
    return out


def cpu_spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in after}


def metric_sum(op: OperatorProcess, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include `labels`."""
    return sum(s.value for s in op.samples() if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


async def bounded_all(coros: list[Any]) -> None:
    limit = asyncio.Semaphore(PARALLEL)

    async def run(coro: Any) -> None:
        async with limit:
            await coro

    await asyncio.gather(*(run(c) for c in coros))


async def create_unqueued(client: AsyncClient, namespace: str, names: list[str]) -> None:
    """Workloads in no queue, created PARALLEL at a time."""
    await bounded_all(
        [
            client.create(Workload(metadata=ObjectMeta(name=n, namespace=namespace), spec=workload(n, None, 0).spec))
            for n in names
        ]
    )


async def bare_patch_rate(client: AsyncClient, count: int, namespace: str) -> float:
    """Status patches per second by a plain client, PARALLEL at a time (as the operator writes)."""
    await client.create(Namespace(metadata=ObjectMeta(name=namespace)))
    names = [f"base-{i}" for i in range(50)]
    await create_unqueued(client, namespace, names)

    async def patch(i: int) -> None:
        name = names[i % len(names)]
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ops = [
            {
                "op": "add",
                "path": "/status",
                "value": {
                    "conditions": [
                        {
                            "type": "QuotaReserved",
                            "status": "False",
                            "reason": "Pending",
                            "message": f"m{i}",
                            "lastTransitionTime": stamp,
                        }
                    ]
                },
            }
        ]
        await client.patch(Workload.Status, name, ops, namespace=namespace, patch_type=PatchType.JSON)

    started = time.perf_counter()
    await bounded_all([patch(i) for i in range(count)])
    return count / (time.perf_counter() - started)


async def bare_create_rate(client: AsyncClient, count: int, namespace: str) -> float:
    """Workload creations per second by a plain client, PARALLEL at a time (as this benchmark creates)."""
    await client.create(Namespace(metadata=ObjectMeta(name=namespace)))
    started = time.perf_counter()
    await create_unqueued(client, namespace, [f"made-{i}" for i in range(count)])
    return count / (time.perf_counter() - started)


async def run_operator_phase(
    client: AsyncClient,
    queues: int,
    per_queue: int,
    cpu: Callable[[], dict[str, float]],
    evicted: Callable[[Any], None] | None = None,
) -> dict[str, float]:
    """The measured phase; `evicted` is told of each Workload seen evicted while it still holds
    quota (the Kueue side's stand-in for a job controller)."""
    admitted_at: dict[str, float] = {}
    created_at: dict[str, float] = {}
    total = queues * per_queue * 2

    async def watch() -> None:
        async for _, obj in client.watch(Workload, namespace=NS):
            conditions = (obj.status or {}).get("conditions") or []
            true = {c["type"] for c in conditions if c["status"] == "True"}
            if "QuotaReserved" in true:
                admitted_at.setdefault(obj.metadata.name, time.perf_counter())
                if evicted is not None and "Evicted" in true:
                    evicted(obj)

    watcher = asyncio.create_task(watch())
    cpu_started = cpu()
    started = time.perf_counter()
    low = [(f"low-{q}-{i}", f"lq-{q}") for i in range(per_queue) for q in range(queues)]
    for name, _ in low:
        created_at[name] = time.perf_counter()
    await bounded_all([client.create(workload(n, lq, 0)) for n, lq in low])
    while sum(1 for n, _ in low if n in admitted_at) < len(low):
        await asyncio.sleep(0.05)
    filled = time.perf_counter()
    high = [(f"high-{q}-{i}", f"lq-{q}") for i in range(per_queue) for q in range(queues)]

    async def create_high(name: str, lq: str) -> None:
        created_at[name] = time.perf_counter()
        await client.create(workload(name, lq, 100))

    await bounded_all([create_high(n, lq) for n, lq in high])
    while sum(1 for n, _ in high if n in admitted_at) < len(high):
        await asyncio.sleep(0.05)
    done = time.perf_counter()
    spent = cpu_spent(cpu_started, cpu())
    watcher.cancel()
    waits = sorted(admitted_at[n] - created_at[n] for n, _ in high)
    return {
        "admissions": float(total),
        "fill_rate": len(low) / (filled - started),
        "preempt_phase_rate": len(high) / (done - filled),
        "overall_rate": total / (done - started),
        "p50": statistics.median(waits),
        "p99": waits[min(len(waits) - 1, int(0.99 * len(waits)))],
        "seconds": done - started,
        **{f"run_cpu_{name}": value for name, value in spent.items()},
    }


def kueue_build(qps: int) -> tuple[Path, Path, str] | None:
    """minimalkueue with its client limit lifted to `qps` (built from the module source on first
    use), Kueue's CRD folder, and how it was built; None when the Kueue harness is not built."""
    harness = kueue_harness()
    binaries = harness.installed()
    if binaries is None:
        return None
    lifted = harness.lift_client_limit(binaries, qps)
    return lifted.lifted, lifted.crds, harness.lifted_note(qps)


def request_counts(plane: ControlPlane) -> dict[tuple[str, str, str], float]:
    """kube-apiserver's own count of the requests it served so far, by (verb, resource, subresource)."""
    text = plane.kubectl("get", "--raw", "/metrics", check=True).stdout
    counts: dict[tuple[str, str, str], float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.rindex("}")]))
        key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""))
        counts[key] = counts.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


WRITES = ("POST", "PUT", "PATCH", "APPLY")


def writes_between(
    before: dict[tuple[str, str, str], float], after: dict[tuple[str, str, str], float], resource: str, subresource: str
) -> float:
    return sum(
        after[key] - before.get(key, 0.0)
        for key in after
        if key[0] in WRITES and key[1] == resource and key[2] == subresource
    )


def release_body(obj: Any) -> dict[str, Any]:
    """The status patch Kueue's performance runner makes to finish an eviction (workload.
    UnsetQuotaReservationWithCondition): QuotaReserved False "Pending", no admission, Admitted False."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    generation = obj.metadata.generation or 0
    replaced = {
        "QuotaReserved": ("Pending", "Evicted by the test runner"),
        "Admitted": ("NoReservation", "The workload has no reservation"),
    }
    conditions = [c for c in (obj.status or {}).get("conditions") or [] if c["type"] not in replaced]
    conditions += [
        {
            "type": kind,
            "status": "False",
            "reason": reason,
            "message": message,
            "lastTransitionTime": stamp,
            "observedGeneration": generation,
        }
        for kind, (reason, message) in replaced.items()
    ]
    return {"status": {"admission": None, "conditions": conditions}}


async def kueue_side(binary: Path, crds: Path, queues: int, per_queue: int, work: Path) -> dict[str, float]:
    """The same phase against minimalkueue, on its own control plane with Kueue's CRDs."""
    with running_control_plane(crds=False) as plane:
        plane.apply_crds(sorted(crds.glob("*.yaml")))
        plane.kubectl("apply", "--server-side", "-f", "-", input=cluster_yaml(queues, per_queue))
        client = AsyncClient(config=KubeConfig.from_file(str(plane.kubeconfig)), field_manager="benchmark")
        log_path = work / "minimalkueue.log"
        try:
            before = await bare_patch_rate(client, BARE, "baseline-before")
            creates = await bare_create_rate(client, BARE, "baseline-creates")
            with open(log_path, "wb") as log:
                kueue = subprocess.Popen(
                    [str(binary), f"--kubeconfig={plane.kubeconfig}", "--zap-log-level=error"],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=die_with_parent_hook(),
                )
            try:
                # Ready once its ClusterQueue controller has written every queue Active.
                deadline = time.monotonic() + 120
                while True:
                    if kueue.poll() is not None:
                        raise SystemExit(f"minimalkueue exited with {kueue.returncode}:\n{log_tail(log_path)}")
                    active = 0
                    async for cq in client.list(ClusterQueue):
                        conditions = (cq.status or {}).get("conditions") or []
                        active += any(c["type"] == "Active" and c["status"] == "True" for c in conditions)
                    if active == queues:
                        break
                    if time.monotonic() > deadline:
                        raise SystemExit(f"minimalkueue not ready within 120 s:\n{log_tail(log_path)}")
                    await asyncio.sleep(0.2)
                releasing: set[tuple[str, str]] = set()
                released = 0
                tasks: set[asyncio.Task[None]] = set()

                async def release(obj: Any) -> None:
                    nonlocal released
                    await client.patch(
                        Workload.Status, obj.metadata.name, release_body(obj), namespace=NS, patch_type=PatchType.MERGE
                    )
                    released += 1

                def evicted(obj: Any) -> None:
                    conditions = (obj.status or {}).get("conditions") or []
                    since = next((c.get("lastTransitionTime", "") for c in conditions if c["type"] == "Evicted"), "")
                    if (obj.metadata.name, since) in releasing:
                        return  # one release per eviction
                    releasing.add((obj.metadata.name, since))
                    task = asyncio.create_task(release(obj))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)

                counted = request_counts(plane)
                numbers = await run_operator_phase(
                    client, queues, per_queue, lambda: cpu_by_process(kueue.pid), evicted=evicted
                )
                after_counts = request_counts(plane)
            finally:
                kueue.terminate()
                try:
                    kueue.wait(20)
                except subprocess.TimeoutExpired:
                    kueue.kill()
            after = await bare_patch_rate(client, BARE, "baseline-after")
        finally:
            await client.close()
    status_writes = sum(
        writes_between(counted, after_counts, resource, "status")
        for resource in ("workloads", "clusterqueues", "localqueues")
    )
    numbers.update(
        before=before,
        after=after,
        creates=creates,
        released=float(released),
        workload_status=writes_between(counted, after_counts, "workloads", "status") - released,
        queue_status=status_writes - writes_between(counted, after_counts, "workloads", "status"),
        status_writes=status_writes - released,
        events=writes_between(counted, after_counts, "events", ""),
    )
    return numbers


async def create_parked(client: AsyncClient, count: int) -> None:
    """`count` workloads in a ClusterQueue without quota: they stay pending (and cached)."""
    await bounded_all([client.create(workload(f"parked-{i}", "lq-parked", 0)) for i in range(count)])


def parked_yaml() -> str:
    return f"""apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: parked}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{{name: default, resources: [{{name: cpu, nominalQuota: 0}}]}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: lq-parked, namespace: {NS}}}
spec: {{clusterQueue: parked}}
"""


def wait_for(check: Any, timeout: float) -> float:
    started = time.perf_counter()
    while not check():
        if time.perf_counter() - started > timeout:
            raise TimeoutError("benchmark phase did not finish")
        time.sleep(0.2)
    return time.perf_counter() - started


def cpu_table(numbers: dict[str, float], admissions: float) -> list[str]:
    """Rows of the CPU table: this run, and the bare client's costs of the run's writes and of
    the ceiling's, in ms per admission."""

    def bare(kind: str, name: str) -> float:
        return numbers[f"bare_{kind}_cpu_{name}"] / BARE  # seconds per request

    def row(label: str, api: float, etcd: float, clients: float) -> str:
        cells = [api, etcd, clients, api + etcd + clients]
        return f"| {label} | " + " | ".join(f"{1000 * c:.1f}" for c in cells) + " |"

    run = {k: numbers[f"run_cpu_{k}"] / admissions for k in PROCESSES}
    patches = numbers["requests_PATCH"] / admissions
    posts = numbers["events_posted"] / admissions
    creations = 1 + posts  # the Workload, and Events costed as creations

    def writes(creations: float, patches: float) -> tuple[float, float, float]:
        return tuple(  # type: ignore[return-value]
            creations * bare("create", n) + patches * bare("patch", n) for n in ("kube-apiserver", "etcd", "script")
        )

    return [
        row("this run", run["kube-apiserver"], run["etcd"], run["operator"] + run["script"]),
        row(
            f"the run's writes at the bare client's cost ({creations:.2f} creations, Events included; "
            f"{patches:.2f} patches)",
            *writes(creations, patches),
        ),
        row("the ceiling's writes at the bare client's cost (1 creation, 1.5 patches)", *writes(1, 1.5)),
    ]


COMMAND_PLACEHOLDER = "@command@"


def highest_ratio(admissions: float, creates: float, patches: float) -> float:
    """The highest ratio (admissions/s ÷ bare patches/s) any controller could reach on a server
    with these bare rates: no CPU of its own, one patch per admission and one eviction patch per
    preemptor (half the workloads), no Events, besides the benchmark's own creations."""
    seconds = admissions / creates + 1.5 * admissions / patches
    return admissions / seconds / patches


def peer_section(
    ours: dict[str, float],
    before: float,
    after: float,
    creates: float,
    kueue: dict[str, float] | None,
    note: str,
) -> list[str]:
    """The same phase on Kueue, side by side: each side's ratios are to its own plane's bare rates."""
    lines = ["## The peer: Kueue, the same phase", ""]
    if kueue is None:
        return [*lines, f"Kueue: {note}.", ""]
    admissions = ours["admissions"]
    sides = {
        "operator": {
            "before": before,
            "after": after,
            "creates": creates,
            "status": sum(
                ours[f"patch_{r}"] for r in ("workloads/status", "clusterqueues/status", "localqueues/status")
            )
            + ours["requests_PUT"],
            "workload_status": ours["patch_workloads/status"] + ours["requests_PUT"],
            "queue_status": ours["patch_clusterqueues/status"] + ours["patch_localqueues/status"],
            "events": ours["events_posted"] + ours["events_patched"],
            "released": 0.0,
            "cpu": ours["run_cpu_operator"],
            **{k: ours[k] for k in ("fill_rate", "preempt_phase_rate", "overall_rate", "p50", "p99")},
        },
        "kueue": {
            **kueue,
            "status": kueue["status_writes"],
            "cpu": kueue["run_cpu_operator"],
        },
    }
    for side in sides.values():
        bare = (side["before"] + side["after"]) / 2
        side["ratio"] = side["overall_rate"] / bare
        side["highest"] = highest_ratio(admissions, side["creates"], bare)
    rows = [
        ("bare client on its plane: patches/s before / after", lambda d: f"{d['before']:.0f} / {d['after']:.0f}"),
        ("bare client on its plane: creations/s", lambda d: f"{d['creates']:.0f}"),
        ("admissions/s while filling the queues", lambda d: f"{d['fill_rate']:.0f}"),
        ("preemptor admissions/s (each after one eviction)", lambda d: f"{d['preempt_phase_rate']:.0f}"),
        ("admissions/s overall", lambda d: f"{d['overall_rate']:.0f}"),
        ("preemptor time to admission, p50 / p99 (s)", lambda d: f"{d['p50']:.2f} / {d['p99']:.2f}"),
        ("ratio: admissions/s ÷ bare patches/s", lambda d: f"{d['ratio']:.2f}"),
        ("derived: the highest ratio any controller could reach on that plane", lambda d: f"{d['highest']:.2f}"),
        ("**ratio ÷ that highest ratio**", lambda d: f"**{d['ratio'] / d['highest']:.2f}**"),
        ("controller status writes per admission (Workloads and queues)", lambda d: f"{d['status'] / admissions:.2f}"),
        (
            "of them Workload / queue status writes",
            lambda d: f"{d['workload_status'] / admissions:.2f} / {d['queue_status'] / admissions:.2f}",
        ),
        ("Event writes per admission", lambda d: f"{d['events'] / admissions:.2f}"),
        (
            "evictions finished by this script (the job controller's part), per admission",
            lambda d: f"{d['released'] / admissions:.2f}",
        ),
        ("controller CPU during the phase, s", lambda d: f"{d['cpu']:.1f}"),
    ]
    table = ["| measure | operator | Kueue |", "|---|---:|---:|"]
    table += [f"| {name} | {cell(sides['operator'])} | {cell(sides['kueue'])} |" for name, cell in rows]
    return [
        *lines,
        f"Kueue v0.19.2's minimalkueue, {note}, on a second control plane (Kueue's own CRDs) after the"
        " operator's, in the same run. Kueue leaves a preempted Workload's quota to its job's"
        " integration; with no job here, this script clears the reservation of each evicted Workload,"
        " as Kueue's performance runner does. Kueue's writes are read from kube-apiserver's request"
        " counts, less this script's own.",
        "",
        *table,
        "",
    ]


def previous_rows(path: Path) -> dict[str, str]:
    """The measures of the results file about to be replaced: "what changed" is then this run's
    figure next to the recorded one, both printed by this script."""
    if not path.is_file():
        return {}
    rows: dict[str, str] = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and line.startswith("|") and not set(cells[0]) <= {"-", ":"} and cells[0] != "measure":
            rows.setdefault(cells[0], cells[1])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queues", type=int, default=20)
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument("--parked", type=int, default=10_000, help="pending workloads cached for the memory reading")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "operator.md")
    parser.add_argument(
        "--kueue-qps",
        type=int,
        default=KUEUE_QPS,
        help=f"the peer: Kueue's minimalkueue with this client QPS (default {KUEUE_QPS}; 0: no peer)",
    )
    args = parser.parse_args()
    per_queue = args.workloads // (2 * args.queues)
    with running_control_plane() as plane, tempfile.TemporaryDirectory() as work:
        plane.kubectl("apply", "--server-side", "-f", "-", input=cluster_yaml(args.queues, per_queue))
        config = KubeConfig.from_file(str(plane.kubeconfig))

        async def measure() -> tuple[float, float, float, dict[str, float]]:
            client = AsyncClient(config=config, field_manager="benchmark")
            try:
                cpu_start = cpu_by_process()
                before = await bare_patch_rate(client, BARE, "baseline-before")
                cpu_patched = cpu_by_process()
                creates = await bare_create_rate(client, BARE, "baseline-creates")
                cpu_created = cpu_by_process()
                operator = OperatorProcess(
                    "bench", plane.kubeconfig, Path(work), lease_name="bench", leader_election=False
                )
                operator.start().wait_ready()
                assert operator.popen is not None
                pid = operator.popen.pid
                cpu_before = cpu_seconds(pid)
                try:
                    numbers = await run_operator_phase(client, args.queues, per_queue, lambda: cpu_by_process(pid))
                    for name, value in cpu_spent(cpu_start, cpu_patched).items():
                        numbers[f"bare_patch_cpu_{name}"] = value
                    for name, value in cpu_spent(cpu_patched, cpu_created).items():
                        numbers[f"bare_create_cpu_{name}"] = value
                    numbers["cpu"] = cpu_seconds(pid) - cpu_before
                    for method in ("PATCH", "POST", "GET", "PUT"):
                        numbers[f"requests_{method}"] = metric_sum(
                            operator, "preemption_operator_api_requests_total", method=method
                        )
                    for resource in ("workloads/status", "clusterqueues/status", "localqueues/status"):
                        numbers[f"patch_{resource}"] = metric_sum(
                            operator, "preemption_operator_api_requests_total", method="PATCH", resource=resource
                        )
                    numbers["events_posted"] = metric_sum(
                        operator, "preemption_operator_events_total", outcome="posted"
                    )
                    numbers["events_patched"] = metric_sum(
                        operator, "preemption_operator_events_total", outcome="patched"
                    )
                    for outcome in ("dropped", "filtered", "failed"):
                        numbers[f"events_{outcome}"] = metric_sum(
                            operator, "preemption_operator_events_total", outcome=outcome
                        )
                    numbers["decide"] = metric_sum(
                        operator, "preemption_operator_preemption_decision_duration_seconds_sum"
                    )
                    numbers["cycles"] = metric_sum(
                        operator, "preemption_operator_scheduling_cycle_duration_seconds_sum"
                    )
                    numbers["cycle_count"] = metric_sum(
                        operator, "preemption_operator_scheduling_cycle_duration_seconds_count"
                    )
                    # Memory with many workloads cached: the parked ones stay pending.
                    plane.kubectl("apply", "--server-side", "-f", "-", input=parked_yaml())
                    numbers["rss_before"] = rss_mib(pid)
                    await create_parked(client, args.parked)
                    wait_for(lambda: operator.metric(PENDING, cluster_queue="parked") == args.parked, 600)
                    numbers["rss_after"] = rss_mib(pid)
                finally:
                    operator.stop()
                # What a restart costs: the first list of every kind, then readiness.
                restarted = OperatorProcess(
                    "bench-restart", plane.kubeconfig, Path(work), lease_name="bench", leader_election=False
                )
                started = time.perf_counter()
                restarted.start().wait_ready(timeout=600)
                numbers["sync_seconds"] = time.perf_counter() - started
                synced = re.search(r"cache synced: (\d+) workloads", restarted.log())
                numbers["synced"] = float(synced.group(1)) if synced else float("nan")
                restarted.stop()
                after = await bare_patch_rate(client, BARE, "baseline-after")
                return before, after, creates, numbers
            finally:
                await client.close()

        before, after, creates, numbers = asyncio.run(measure())
        kueue: dict[str, float] | None = None
        kueue_note = "not measured: --kueue-qps 0"
        if args.kueue_qps:
            built = kueue_build(args.kueue_qps)
            if built is None:
                kueue_note = "not measured: the Kueue harness is not built (`make kueue-harness`)"
            else:
                binary, crds, kueue_note = built
                kueue = asyncio.run(kueue_side(binary, crds, args.queues, per_queue, Path(work)))
    bare = (before + after) / 2  # the server's rate drifts over a run: measured on both sides
    ratio = numbers["overall_rate"] / bare
    admissions = numbers["admissions"]
    per_10k = (numbers["rss_after"] - numbers["rss_before"]) * 10_000 / args.parked
    # Derived (analysis, from this run's figures): the seconds this server needs for the run's
    # writes at the bare client's rates: the benchmark's own creations, the operator's status
    # patches, and its Event POSTs (costed as creations).
    server_seconds = admissions / creates + numbers["requests_PATCH"] / bare + numbers["events_posted"] / creates
    ceiling = admissions / server_seconds
    # The same for an operator that costs nothing and writes the least any operator can: one
    # admission patch per workload and one eviction patch per preemptor, no Events. Its ratio is
    # the most the headline ratio can be in this benchmark, whatever the operator does.
    best_ratio = highest_ratio(admissions, creates, bare)
    rows = [
        (
            f"bare client: Workload status patches/s ({PARALLEL} in parallel; before / after the operator run)",
            f"{before:.0f} / {after:.0f}",
        ),
        ("operator: admissions/s while filling the queues", f"{numbers['fill_rate']:.0f}"),
        ("operator: preemptor admissions/s (each after one eviction)", f"{numbers['preempt_phase_rate']:.0f}"),
        ("operator: admissions/s overall", f"{numbers['overall_rate']:.0f}"),
        ("preemptor time to admission, p50 (s)", f"{numbers['p50']:.2f}"),
        ("preemptor time to admission, p99 (s)", f"{numbers['p99']:.2f}"),
        ("**ratio: operator admissions/s ÷ bare patches/s (mean of before and after)**", f"**{ratio:.2f}**"),
        ("bare client: Workload creations/s (8 in parallel)", f"{creates:.0f}"),
        (
            "derived: admissions/s this server allows for the run's writes (admissions ÷ (creations ÷ creations/s"
            " + operator PATCHes ÷ patches/s + Event POSTs ÷ creations/s))",
            f"{ceiling:.0f}",
        ),
        ("derived: operator admissions/s ÷ that", f"{numbers['overall_rate'] / ceiling:.2f}"),
        (
            "derived: the highest ratio any operator could reach here (no CPU of its own, one patch per admission,"
            " one eviction patch per preemptor, no Events: admissions ÷ (creations ÷ creations/s + writes ÷"
            " patches/s) ÷ patches/s)",
            f"{best_ratio:.2f}",
        ),
    ]
    cpu_rows = cpu_table(numbers, admissions)
    previous = previous_rows(args.output)
    table = ["| measure | this run | the run recorded before it |", "|---|---:|---:|"]
    table += [f"| {name} | {value} | {previous.get(name, 'not measured')} |" for name, value in rows]
    text = "\n".join(
        [
            f"# Operator benchmark ({datetime.now(UTC):%Y-%m-%d}, {platform.python_implementation()} "
            f"{platform.python_version()}, {platform.machine()}, kube-apiserver + etcd on loopback)",
            "",
            f"{int(numbers['admissions'])} workloads over {args.queues} ClusterQueues: the first half (priority 0) fills "
            "every queue; each of the second half (priority 100) preempts one of them (withinClusterQueue: LowerPriority).",
            "The last column is read from the results file this run replaced (same script and machine kind).",
            "",
            *table,
            "",
            "## Where the time goes",
            "",
            f"Measured in the same run, from the operator's own metrics and /proc (over the {admissions:.0f} admissions):",
            "",
            "| measure | value |",
            "|---|---:|",
            f"| operator CPU (user + system), s | {numbers['cpu']:.1f} |",
            f"| operator CPU per admission, ms | {1000 * numbers['cpu'] / admissions:.1f} |",
            f"| scheduling cycles | {numbers['cycle_count']:.0f} |",
            f"| engine decisions, share of the cycles' time (decision ÷ cycle histogram sums) | "
            f"{100 * numbers['decide'] / max(numbers['cycles'], 1e-9):.0f}% |",
            f"| status PATCHes per admission | {numbers['requests_PATCH'] / admissions:.2f} |",
            "| of them Workload / ClusterQueue / LocalQueue status, per admission | "
            + " / ".join(
                f"{numbers[f'patch_{r}'] / admissions:.2f}"
                for r in ("workloads/status", "clusterqueues/status", "localqueues/status")
            )
            + " |",
            f"| Event POSTs per admission (Events counted up instead: {numbers['events_patched']:.0f}) | "
            f"{numbers['events_posted'] / admissions:.2f} |",
            f"| Events not posted: queue full (dropped, as client-go's recorder drops beyond 1000 queued) / "
            f"spam filter / failed | {numbers['events_dropped']:.0f} / {numbers['events_filtered']:.0f} / "
            f"{numbers['events_failed']:.0f} |",
            f"| GET (re-reads after a conflict) / PUT, per admission | {numbers['requests_GET'] / admissions:.2f} / "
            f"{numbers['requests_PUT'] / admissions:.2f} |",
            "",
            "## Where the machine's CPU goes",
            "",
            f"CPU time per admission, ms, measured in the same run (/proc; the run took {numbers['seconds']:.1f} s, "
            f"the machine was idle {numbers['run_cpu_idle']:.1f} s of it). *Clients* are the operator and this "
            "script (its creations and its watch) in the first row, the bare client in the others.",
            "",
            "| per admission | kube-apiserver | etcd | clients | all |",
            "|---|---:|---:|---:|---:|",
            *cpu_rows,
            "",
            "The first row less the second is what costs beyond the writes themselves: kube-apiserver serving "
            "two watches of every Workload (the operator's and this script's), this script decoding its watch, "
            "the operator's CPU beyond a bare client's. The second less the third is the writes the ceiling "
            "leaves out (Events, queue statuses, pending reasons).",
            "",
            *peer_section(numbers, before, after, creates, kueue, kueue_note),
            "## Memory and restart",
            "",
            "| measure | value |",
            "|---|---:|",
            f"| operator RSS before / after {args.parked} more pending workloads were cached, MiB | "
            f"{numbers['rss_before']:.0f} / {numbers['rss_after']:.0f} |",
            f"| **memory per 10k workloads, MiB** | **{per_10k:.0f}** |",
            f"| restart with {numbers['synced']:.0f} workloads: start to ready (cache listed and built), s | "
            f"{numbers['sync_seconds']:.1f} |",
            "",
            f"Command: `{COMMAND_PLACEHOLDER}`",
        ]
    )
    command = f"python benchmarks/operator_throughput.py --queues {args.queues} --workloads {args.workloads} --parked {args.parked}"
    if args.kueue_qps != KUEUE_QPS:
        command += f" --kueue-qps {args.kueue_qps}"
    text = text.replace(COMMAND_PLACEHOLDER, command)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
