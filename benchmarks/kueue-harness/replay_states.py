"""Same decisions on the same states, for the states a harness run went through.

The harness's evictions differ between the sides (benchmarks/results/kueue-harness*.md): is that
because the two controllers decide differently, or because they reach different states (the
timing of admissions, of the runner's Finished writes, of the larges' arrival)? This script
takes a run's own record of every reservation (`watch-workloads.tsv`, the harness's watch) and
rebuilds, per cohort and every `--step` seconds, the state the run was in: the workloads holding
quota (with their ClusterQueue and admission order) and those waiting (created and not finished).
It then runs both Kueue v0.19.2's own scheduler (the differential test's replay driver,
tests/kueue_replay) and the engine over each state, `--cycles` cycles with nothing answered in
between (with PrioritizePreemptorWorkloads on and off, the same on both sides), and counts the
states where they decide differently and the preemptions each decides, per class.

What the record lacks, the state leaves out: a victim whose eviction is under way is shown as
holding (the Evicted condition is not in the record), and times are ranked into distinct seconds
(Kueue's API keeps seconds; the replay needs distinct ones, as in the differential test). A
workload seen released and never admitted again counts as finished from its release on.

Usage: python benchmarks/kueue-harness/replay_states.py <run folder> [<run folder> ...]
       [--step 0.5] [--until 12] [--cycles 1,8] [--gates on,off] [--output <report.md>]
A run folder is one of the harness's artifacts (e.g. <artifacts>/baseline-1-10/1-ours), made with
the baseline config (one flavor, cpu only; the classes' priorities as Kueue's generator sets them).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from preemption_operator.api.meta import format_time
from preemption_operator.testing import kueue_replay

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "tests" / "kueue_replay" / "replay_test.go"
PRIORITY = {"small": 50, "medium": 100, "large": 200}
"""Kueue's baseline generator: a class's priority."""
REQUEST = {"small": 1000, "medium": 5000, "large": 20000}
"""And its request, milli-cpu: for a workload the record never shows admitted (otherwise the
record's own figure is used)."""
T0 = datetime(2026, 1, 1, tzinfo=UTC)
KUEUE = "kueue.x-k8s.io/v1beta2"

Obj = dict[str, Any]


@dataclass
class Life:
    """One workload's record: when first seen, and its reservations (start, end or None, cq, mcpu)."""

    first_seen: float
    cpu: int = 0
    holds: list[tuple[float, float | None, str, int]] = field(default_factory=list)


def read_record(run: Path) -> dict[str, Life]:
    lives: dict[str, Life] = {}
    for line in (run / "watch-workloads.tsv").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        at_s, key, mcpu_s, *rest = line.split("\t")
        at, mcpu, cq = float(at_s), int(mcpu_s), (rest[0] if rest else "")
        life = lives.setdefault(key, Life(at))
        open_hold = life.holds and life.holds[-1][1] is None
        if mcpu > 0 and not open_hold:
            life.holds.append((at, None, cq, mcpu))
            life.cpu = mcpu
        elif mcpu == 0 and open_hold:
            start, _, held_cq, held = life.holds[-1]
            life.holds[-1] = (start, at, held_cq, held)
    return lives


def cohort_of(cq: str) -> str:
    """`cq-<set>-<index>-<cohort>`, as Kueue's generator names them."""
    return cq.split("-", 3)[3]


def state_at(lives: dict[str, Life], cohort: str, moment: float) -> tuple[datetime, list[Obj]] | None:
    """The cohort's workloads at `moment`: holding, or waiting (seen, not finished); None when
    nothing waits (no decision to compare)."""
    holding: list[tuple[float, str, str, int]] = []
    waiting: list[tuple[str, str]] = []
    for key, life in lives.items():
        namespace = key.split("/", 1)[0]
        if cohort_of(namespace) != cohort or life.first_seen > moment:
            continue
        held = [h for h in life.holds if h[0] <= moment]
        if held and (held[-1][1] is None or held[-1][1] > moment):
            start, _, cq, mcpu = held[-1]
            holding.append((start, key, cq, mcpu))
        elif not held or any(h[0] > moment for h in life.holds):
            waiting.append((key, namespace))  # not admitted yet, or evicted and admitted again later
    if not waiting:
        return None
    # Distinct seconds in the order things happened, creations and admissions (ties, which the
    # watch shows for a batch, by name: Kueue would order equal seconds arbitrarily).
    created = {k: lives[k].first_seen for k in [k for k, _ in waiting] + [k for _, k, _, _ in holding]}
    moments = sorted([(at, "created", k) for k, at in created.items()] + [(s, "admitted", k) for s, k, _, _ in holding])
    rank = {(what, k): T0 + timedelta(seconds=i) for i, (_, what, k) in enumerate(moments)}
    queues = sorted({k.split("/", 1)[0] for k in lives if cohort_of(k.split("/", 1)[0]) == cohort})
    objects: list[Obj] = [_meta("v1", "Namespace", "default"), _meta(KUEUE, "ResourceFlavor", "default", spec={})]
    for cq in queues:
        quota = {"name": "cpu", "nominalQuota": "20", "borrowingLimit": "100"}
        spec = {
            "namespaceSelector": {},
            "cohortName": cohort,
            "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [quota]}]}],
            "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
            "queueingStrategy": "BestEffortFIFO",  # the API server's default; the replay has none
        }
        objects.append(_meta(KUEUE, "ClusterQueue", cq, spec=spec))
        objects.append(_meta(KUEUE, "LocalQueue", cq, namespace="default", spec={"clusterQueue": cq}))
    for key, namespace in waiting:
        objects.append(_workload(key, namespace, lives[key], rank[("created", key)]))
    for _, key, cq, mcpu in holding:
        wl = _workload(key, key.split("/", 1)[0], lives[key], rank[("created", key)])
        at = format_time(rank[("admitted", key)])
        wl["status"] = {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "True",
                    "reason": "QuotaReserved",
                    "message": "",
                    "lastTransitionTime": at,
                },
                {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "", "lastTransitionTime": at},
            ],
            "admission": {
                "clusterQueue": cq,
                "podSetAssignments": [
                    {"name": "main", "count": 1, "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": f"{mcpu}m"}}
                ],
            },
        }
        objects.append(wl)
    return T0 + timedelta(seconds=len(moments) + 1), objects


def _meta(api: str, kind: str, name: str, *, namespace: str | None = None, spec: Obj | None = None) -> Obj:
    meta: Obj = {"name": name, "uid": f"{kind}/{namespace}/{name}", "creationTimestamp": format_time(T0)}
    if namespace:
        meta["namespace"] = namespace
    out: Obj = {"apiVersion": api, "kind": kind, "metadata": meta}
    if spec is not None:
        out["spec"] = spec
    return out


def _workload(key: str, namespace: str, life: Life, created: datetime) -> Obj:
    name = key.split("/", 1)[1]
    klass = name.split("-", 1)[0]
    request = {"requests": {"cpu": f"{life.cpu or REQUEST[klass]}m"}}
    spec = {
        "queueName": namespace,
        "priority": PRIORITY[klass],
        "podSets": [
            {"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "main", "resources": request}]}}}
        ],
    }
    wl = _meta(KUEUE, "Workload", f"{namespace}.{name}", namespace="default", spec=spec)
    wl["metadata"]["creationTimestamp"] = format_time(created)
    return wl


def _classes(preempted: dict[str, str]) -> Counter[str]:
    return Counter(victim.split(".", 1)[1].split("-", 1)[0] for victim in preempted)


@dataclass
class Outcome:
    """What both sides decided over one run's states."""

    states: int = 0
    differ: int = 0
    kueue: Counter[str] = field(default_factory=Counter)
    engine: Counter[str] = field(default_factory=Counter)
    admitted: list[int] = field(default_factory=lambda: [0, 0])
    examples: list[str] = field(default_factory=list)


def compare(binary: Path, states: list[tuple[datetime, list[Obj]]], cycles: int, prioritize: bool) -> Outcome:
    """Both sides over the states; the first few differences kept as examples."""
    out = Outcome(states=len(states))
    given = [(format_time(now), objects) for now, objects in states]
    theirs = kueue_replay.replay(binary, given, cycles, prioritize_preemptors=prioritize) if states else []
    for (now, objects), kueue in zip(states, theirs, strict=True):
        if kueue.get("error"):
            raise SystemExit(f"Kueue's replay refused a state: {kueue['error']}")
        mine = kueue_replay.engine_decisions(now, objects, cycles, prioritize_preemptors=prioritize)
        out.kueue += _classes(kueue["preempted"])
        out.engine += _classes(mine["preempted"])
        out.admitted[0] += len(kueue["admitted"])
        out.admitted[1] += len(mine["admitted"])
        if mine != {"admitted": kueue["admitted"], "preempted": kueue["preempted"]}:
            out.differ += 1
            if len(out.examples) < 3:
                out.examples.append(f"at {format_time(now)}: engine {mine}; Kueue {kueue}")
    return out


def run_states(run: Path, step: float, until: float) -> list[tuple[datetime, list[Obj]]]:
    """Every cohort's state every `step` seconds of the run's record, up to `until`."""
    lives = read_record(run)
    start = min(life.first_seen for life in lives.values())
    cohorts = sorted({cohort_of(k.split("/", 1)[0]) for k in lives})
    states = []
    for cohort in cohorts:
        for i in range(1, int(until / step) + 1):
            found = state_at(lives, cohort, start + i * step)
            if found is not None:
                states.append(found)
    return states


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--step", type=float, default=0.5, help="seconds between states (default 0.5)")
    parser.add_argument("--until", type=float, default=12.0, help="last state, seconds after the first record")
    parser.add_argument("--cycles", default="1,8", help="cycles per state, nothing answered between (default 1,8)")
    parser.add_argument(
        "--gates", default="on,off", help="PrioritizePreemptorWorkloads on both sides: on, off or both (default)"
    )
    parser.add_argument("--output", type=Path, help="write the report here (default: print it)")
    args = parser.parse_args(argv)
    binary = kueue_replay.build(DRIVER)
    command = " ".join(
        ["python", "benchmarks/kueue-harness/replay_states.py", *(sys.argv[1:] if argv is None else argv)]
    )
    lines = [
        f"# The same decisions on the states harness runs went through ({datetime.now(UTC):%Y-%m-%d})",
        "",
        "Every cohort's state, every "
        f"{args.step:g} s over the first {args.until:g} s of each run, rebuilt from the harness's own watch"
        " (`watch-workloads.tsv`), given to Kueue v0.19.2's own scheduler (the differential test's replay"
        " driver) and to the engine; *decided differently* counts the states where the workloads admitted"
        " (and where) or preempted (and for whom) differ. Preemptions and admissions are summed over the"
        " states (a state's decisions, not the run's: one workload counts in every state it waits in). What"
        " the record lacks the states leave out: a victim under way shows as holding, and times are ranked"
        " into distinct seconds (ties by name). benchmarks/kueue-harness/replay_states.py says how.",
        "",
        f"Command: `{command}`",
        "",
    ]
    for cycles in [int(c) for c in args.cycles.split(",")]:
        for gate in args.gates.split(","):
            lines += [
                f"## {cycles} cycle(s) per state, PrioritizePreemptorWorkloads {gate}",
                "",
                "| run | states | decided differently | preemptions, Kueue: small / medium / large | engine |"
                " admissions, Kueue / engine |",
                "|---|---:|---:|---|---|---|",
            ]
            examples = []
            for run in args.runs:
                out = compare(binary, run_states(run, args.step, args.until), cycles, gate == "on")

                def row(c: Counter[str]) -> str:
                    return " / ".join(str(c[k]) for k in PRIORITY)

                lines.append(
                    f"| {run.parent.name}/{run.name} | {out.states} | {out.differ} | {row(out.kueue)} "
                    f"| {row(out.engine)} | {out.admitted[0]} / {out.admitted[1]} |"
                )
                examples += [f"- {run.parent.name}/{run.name} {e}" for e in out.examples]
            lines += ["", *examples, ""] if examples else [""]
    report = "\n".join(lines).rstrip() + "\n"
    if args.output:
        args.output.write_text(report)
        print(f"replay-states: report: {args.output}")
    else:
        print(report, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
