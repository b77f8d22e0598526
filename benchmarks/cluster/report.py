"""The cluster-outcome report: a Markdown file with the run's tables and two matplotlib plots
(allocated GPUs over time, every side on one chart; completion-time CDFs, one panel per class).
The tables are printed to standard output as well, so every figure of the report is one the run
printed."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobtrace import CLASS_NAMES, CLASSES, Trace
from manifests import GRACE_SECONDS
from outcome import INF, Stats

if TYPE_CHECKING:
    from bench import SideRun


def label(run: SideRun, names: dict[str, str]) -> str:
    """A side's column and legend name; with --rounds, its round too."""
    return f"{names[run.side]}, round {run.round}" if run.round else names[run.side]


def seconds(value: float) -> str:
    if value == INF:
        return "unfinished"
    if math.isnan(value):
        return "-"
    return f"{value:.1f}"


def stats_cell(s: Stats) -> str:
    return f"{seconds(s.mean)} / {seconds(s.p50)} / {seconds(s.p90)} ({s.finished}/{s.count})"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def results_table(runs: Sequence[SideRun], names: dict[str, str]) -> str:
    header = ["measure", *(label(r, names) for r in runs)]
    rows: list[list[Any]] = [
        [
            "mean GPUs allocated over the day, % of capacity",
            *(f"{100 * r.outcome.mean_utilization_day:.1f}" for r in runs),
        ],
        ["mean GPUs allocated, whole replay, %", *(f"{100 * r.outcome.mean_utilization_all:.1f}" for r in runs)],
    ]
    for cls in CLASS_NAMES:
        rows.append(
            [
                f"completion time, {cls}: mean / p50 / p90 s (finished/all)",
                *(stats_cell(r.outcome.completion[cls]) for r in runs),
            ]
            if all(cls in r.outcome.completion for r in runs)
            else [f"completion time, {cls}", *("-" for _ in runs)]
        )
    rows.append(
        ["hero time to start: mean / p50 / p90 s (started/all)", *(stats_cell(r.outcome.hero_start) for r in runs)]
    )
    for cls in CLASS_NAMES:
        rows.append([f"preemptions of {cls} jobs", *(r.outcome.preemptions.get(cls, 0) for r in runs)])
    for cls in CLASS_NAMES:
        rows.append(
            [f"GPU-seconds lost to preemption, {cls}", *(f"{r.outcome.lost_by_class.get(cls, 0):.0f}" for r in runs)]
        )
    rows += [
        ["**GPU-seconds lost to preemption, all**", *(f"**{r.outcome.lost:.0f}**" for r in runs)],
        ["jobs unfinished when the side was stopped", *(r.unfinished for r in runs)],
        ["controller CPU (user + system), s", *(f"{r.controller_cpu:.1f}" for r in runs)],
        ["controller peak RSS, MiB", *(f"{r.controller_rss_mib:.0f}" for r in runs)],
        ["replay: first Job created to last completed (or stopped), s", *(f"{r.replay_wall:.0f}" for r in runs)],
        ["side wall: cluster start to teardown, s", *(f"{r.wall:.0f}" for r in runs)],
        ["machine CPU busy during the replay (all processes), %", *(f"{100 * r.machine_busy_share:.0f}" for r in runs)],
    ]
    return table(header, rows)


def plot_utilization(runs: Sequence[SideRun], names: dict[str, str], trace: Trace, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    for r in runs:
        ax.plot(
            r.outcome.times, [100 * a / r.outcome.capacity for a in r.outcome.allocated], label=label(r, names), lw=1.2
        )
    ax.axvline(trace.day_seconds, color="grey", ls="--", lw=0.8)
    ax.text(trace.day_seconds, 2, " end of the day's arrivals", color="grey", fontsize=8)
    ax.set_xlabel("seconds since the first arrival")
    ax.set_ylabel("GPUs allocated to bound pods, %")
    ax.set_ylim(0, 105)
    ax.set_title(f"GPU allocation, {trace.shape.nodes} nodes x {trace.shape.gpus_per_node} GPUs")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_completion_cdf(runs: Sequence[SideRun], names: dict[str, str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(CLASS_NAMES), figsize=(12, 3.8))
    for ax, cls in zip(axes, CLASS_NAMES, strict=True):
        for r in runs:
            values = r.outcome.completion_raw.get(cls, [])
            done = sorted(v for v in values if v != INF)
            if not values:
                continue
            ys = [(i + 1) / len(values) for i in range(len(done))]  # unfinished jobs keep the CDF below 1
            ax.step(done, ys, where="post", label=label(r, names))
        ax.set_title(f"{cls} jobs")
        ax.set_xlabel("completion time, s")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("share of the class's jobs completed")
    axes[-1].legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def trace_table(trace: Trace) -> str:
    counts = trace.counts()
    offered = trace.offered_gpu_seconds()
    capacity = trace.shape.gpus * trace.day_seconds
    hour = trace.day_seconds / 24
    rows = []
    for c in CLASSES:
        pods = ", ".join(f"{p or trace.shape.nodes_per_rack} ({w:.0%})" for p, w in c.pods)
        gpus = ", ".join(f"{g} ({w:.0%})" for g, w in c.gpus)
        rows.append(
            [
                c.name,
                counts.get(c.name, 0),
                pods,
                gpus,
                f"{c.median_hours} h = {c.median_hours * hour:.0f} s ({c.min_hours}-{c.max_hours} h)",
                c.priority,
                ", ".join(c.queues),
                c.topology or "none (implicit)",
                f"{100 * offered.get(c.name, 0) / capacity:.0f}",
            ]
        )
    header = ["class", "jobs", "pods", "GPUs per pod", "run time: median (range)", "priority", "queues",
              "required topology", "offered GPU-s, % of the day's capacity"]  # fmt: skip
    return table(header, rows)


def render(
    *,
    runs: Sequence[SideRun],
    trace: Trace,
    names: dict[str, str],
    command: str,
    machine_before: dict[str, str],
    machine_after: dict[str, str],
    started_at: datetime,
    wall: float,
    artifacts: Path,
    output: Path,
    extra: dict[str, str],
) -> str:
    utilization_png = output.with_name(output.stem + "-utilization.png")
    cdf_png = output.with_name(output.stem + "-completion-cdf.png")
    plot_utilization(runs, names, trace, utilization_png)
    plot_completion_cdf(runs, names, cdf_png)
    shape = trace.shape
    results = results_table(runs, names)
    load_table = trace_table(trace)
    print(load_table)
    print(results)
    total_offered = sum(trace.offered_gpu_seconds().values()) / (shape.gpus * trace.day_seconds)
    notes = [f"- {label(r, names)}: {n}" for r in runs for n in r.notes]
    notes += [
        f"- {label(r, names)}: {len(r.submit_errors)} Job(s) refused: {r.submit_errors[:3]}"
        for r in runs
        if r.submit_errors
    ]
    rel = os.path.relpath
    return f"""# Cluster outcomes: Kueue v0.19.2 and this operator on one trace ({started_at:%Y-%m-%d})

One seeded day of GPU jobs replayed on three sides, one after the other, each on a fresh cluster
of {shape.nodes} kwok nodes ({shape.gpus} GPUs) whose pods kube-scheduler binds and kwok runs and
finishes. Every figure below was measured in the run this file describes (started
{started_at:%Y-%m-%dT%H:%M:%SZ}); the tables were printed by that run.

Command: `{command}`

**Wall time of the whole run (three sides, Kueue already built): {wall / 60:.1f} minutes.**

| machine | |
|---|---|
| CPU | {machine_before["cpu"]} |
| memory | {machine_before["memory"]} |
| kernel | {machine_before["kernel"]} |
| Python | {machine_before["python"]} |
| Go | {extra["go"]} |
| control plane | {extra["control plane"]} |
| load average (1, 5, 15 min) | before {machine_before["load"]}; after {machine_after["load"]} |

## Sides

- **{names["kueue"]}**: Kueue's full controller manager (`go install sigs.k8s.io/kueue/cmd/kueue@v0.19.2`), its
  CRDs from the module's `config/components/crd/bases`, a Configuration with the `batch/job`
  integration, leader election off, internal certificate management off, and the client limits
  of Kueue's shipped configuration (QPS 300, burst 500). No webhook is registered: every Job is
  created suspended with its queue label, which is all Kueue's Job webhook would add (its
  webhook server gets a self-signed certificate so that it starts; see `benchmarks/cluster/kueue.py`).
- **{names["classic"]}**: `preemption-operator run` (Job integration, no leader election, no
  client limit) with the same queues, flavor, topology and priorities.
- **{names["rules"]}**: the same, plus two PreemptionConfigs: `hero-jobs` on the hero queue
  (trigger `InsufficientQuota`: any lower-priority work of the cohort, borrowing or not) and
  `topology-defragmentation` on every queue (trigger `QuotaFeasibleAndInsufficientTopology`:
  jobs spanning fewer nodes, priority lower or equal, any queue). Kueue v0.19.2 cannot express either.

Queues (identical on every side): Cohort `org`; ClusterQueues `team-a` and `team-b` with
{(shape.gpus - shape.nodes_per_rack * shape.gpus_per_node) // 2} GPUs each and `hero` with
{shape.nodes_per_rack * shape.gpus_per_node} (one rack), borrowing allowed; classic preemption
`withinClusterQueue: LowerPriority`, `reclaimWithinCohort: LowerPriority`, and on `hero` also
`borrowWithinCohort: LowerPriority` (threshold 1000). One ResourceFlavor on a Topology of block,
rack and host ({shape.blocks} blocks of {shape.racks_per_block} racks of {shape.nodes_per_rack} nodes),
so every side places pods topology-aware (TAS); training and hero Jobs carry
`kueue.x-k8s.io/podset-required-topology: cloud.provider.com/topology-rack`. Priorities: batch
100, standard 1000, hero 100000. A stopped Job's pods go {GRACE_SECONDS} s after their deletion.

## Load

Trace: seed {trace.seed}, a day compressed to {trace.day_seconds:.0f} s (one hour = {trace.day_seconds / 24:.0f} s),
Poisson arrivals per class at `--load {trace.load}` (offered: {100 * total_offered:.0f}% of the
day's GPU-seconds), {len(trace.jobs)} Jobs; after the day, a side runs until every Job completed
or for at most the drain time, and is then stopped (Jobs still unfinished count as infinitely
late in the percentiles). The default size is 64 nodes (8 racks) rather than 256, so that the
three sides fit in 30 minutes on this 2-core machine; `--scale 4` gives 256 nodes.

{load_table}

## Results

Allocated GPUs: requested by pods bound to a node and not yet finished or gone (a pod being
deleted holds its GPUs until it is gone), sampled every second. Completion: Job created to its
`Complete` condition. Hero time to start: Job created to all of its pods running at once.
Preemptions: a Job suspended again after it had started. GPU-seconds lost: for every pod deleted
before it finished, its run time until the deletion x its GPUs. Controller CPU and peak RSS:
/proc of the controller process, read at the end of the replay.

{results}

![GPUs allocated over time](./{rel(utilization_png, output.parent)})

![Completion-time CDF per class](./{rel(cdf_png, output.parent)})

{"## Notes" if notes else ""}
{chr(10).join(notes)}

Artifacts of this run (the trace file, each side's controller log, Workloads and Jobs at the end,
raw outcomes): `{artifacts}`.
"""
