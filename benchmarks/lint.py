"""Lint benchmark: `preemption-operator lint` on 500 ClusterQueues with 50 PreemptionConfigs.

Each setup has 50 cohorts of ten ClusterQueues (nominal 4, 8 or 16 cpu, classic reclaim and
within-queue preemption for lower priority, one queue of each cohort labelled critical), a
"hero" queue per cohort with no quota of its own and a PreemptionConfig whose rule lets hero
workloads preempt lower priorities across the cohort except critical queues, and four priority
classes. The variants:

- templated: every cohort the same but for its names (a GitOps repository stamping out teams);
- distinct: each cohort's quotas offset by its index, so no two cohort trees are alike;
- distinct, flapping: as distinct, with the rule comparing Base priorities, which a boosted
  workload turns into a loop with classic reclaim: lint must find and confirm the flaps;
- distinct, labels: as distinct, with rules that also read a workload label (three values);
- distinct, base: as distinct, the rule comparing Base priorities and classic preemption off
  (reclaimWithinCohort and withinClusterQueue Never), so no loop: the proof must also try every
  spec.priority a workload without a class may have.

We time reading and parsing the YAML, the analysis (`lint.lint`), and the whole command in a
fresh process (`preemption-operator lint FILE`, what a CI step pays). This measures; nothing here
is a test.

    python benchmarks/lint.py [--repeat 3] [--output benchmarks/results/lint.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from preemption_operator import lint as linting
from preemption_operator.lint import flapping
from preemption_operator.offline import manifests

COHORTS, PER_COHORT = 50, 10


def setup(variant: str) -> list[dict[str, Any]]:
    distinct = variant != "templated" and not variant.startswith("templated")
    mode = "Base" if variant in ("distinct, flapping", "distinct, base") else "Boosted"
    reclaim = within = "Never" if variant == "distinct, base" else "LowerPriority"
    labels = variant == "distinct, labels"
    docs: list[dict[str, Any]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}}
    ]
    for name, value in (("low", 100), ("normal", 500), ("high", 1000), ("hero", 5000)):
        docs.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
        )
    for c in range(COHORTS):
        docs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": f"org-{c}"}})
        candidates: dict[str, Any] = {
            "scope": "WithinCohortTree",
            "priority": {"mode": mode, "comparison": "LessThan"},
            "clusterQueueSelector": {
                "matchExpressions": [{"key": "example.com/tier", "operator": "NotIn", "values": ["critical"]}]
            },
        }
        if labels:
            candidates["labelSelector"] = {
                "matchExpressions": [{"key": "example.com/stage", "operator": "In", "values": ["dev", "test"]}]
            }
        rule = {
            "name": "hero",
            "activationPolicy": {"trigger": "InsufficientQuota"},
            "preemptorPriorityClassSelector": {"matchNames": ["hero"]},
            "candidateSelectors": [candidates],
        }
        docs.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1alpha1",
                "kind": "PreemptionConfig",
                "metadata": {"name": f"hero-{c}"},
                "spec": {"rules": [rule]},
            }
        )
        for q in range(PER_COHORT):
            name = f"team-{c}-{q}"
            hero = q == PER_COHORT - 1
            meta: dict[str, Any] = {"name": name, "labels": {"example.com/tier": "critical" if q == 0 else "standard"}}
            if hero:
                meta["annotations"] = {"kueue.x-k8s.io/preemption-config-name": f"hero-{c}"}
            nominal = 0 if hero else (4, 8, 16)[q % 3] + (c if distinct else 0)
            flavor = {"name": "default", "resources": [{"name": "cpu", "nominalQuota": nominal}]}
            docs.append(
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "ClusterQueue",
                    "metadata": meta,
                    "spec": {
                        "cohortName": f"org-{c}",
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}},
                        "preemption": {"reclaimWithinCohort": reclaim, "withinClusterQueue": within},
                        "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [flavor]}],
                    },
                }
            )
    return docs


def measure(path: Path, repeat: int, by_symmetry: bool) -> dict[str, Any]:
    parse_s, analyse_s, analyse_cpu, proofs, findings = [], [], [], [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        objects = manifests.parse(manifests.read([path]), [])
        parse_s.append(time.perf_counter() - started)
        started, cpu = time.perf_counter(), time.process_time()
        if by_symmetry:
            report = linting.lint(objects)
            findings = sum(1 for f in report.findings if f.code.startswith("Flapping"))
            proofs.append(report.proof.to_dict() if report.proof is not None else {})
        else:
            result = flapping.Analysis(objects, by_symmetry=False).run()
            findings = len(result.flaps)
            proofs.append(result.proof.to_dict() if result.proof is not None else {})
        analyse_s.append(time.perf_counter() - started)
        analyse_cpu.append(time.process_time() - cpu)
    command_s = None
    if by_symmetry:
        exe = shutil.which("preemption-operator") or "preemption-operator"
        runs = []
        for _ in range(repeat):
            started = time.perf_counter()
            subprocess.run([exe, "lint", str(path)], stdout=subprocess.DEVNULL, check=False)
            runs.append(time.perf_counter() - started)
        command_s = statistics.median(runs)
    proof = proofs[-1]
    return {
        "parse": statistics.median(parse_s),
        "analyse": statistics.median(analyse_s),
        "analyse_cpu": statistics.median(analyse_cpu),
        "command": command_s,
        "flaps": findings,
        "pairs": proof.get("queuePairs", 0),
        "equivalent": proof.get("equivalentQueuePairs", 0) + proof.get("equivalentQueueTriples", 0),
        "triples": proof.get("queueTriples", 0),
        "cycles": proof.get("engineCycles", 0),
        "verdict": "flap-free (proof)" if proof.get("flapFree") else "flaps found",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "results" / "lint.md")
    args = parser.parse_args()
    variants = [
        ("templated", True),
        ("distinct", True),
        ("distinct, flapping", True),
        ("distinct, labels", True),
        ("distinct, base", True),
        ("templated", False),
    ]
    rows = []
    before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for variant, by_symmetry in variants:
            path = Path(tmp) / f"{variant.replace(', ', '-')}.yaml"
            path.write_text(yaml.safe_dump_all(setup(variant), sort_keys=False))
            repeat = args.repeat if by_symmetry else 1
            result = measure(path, repeat, by_symmetry)
            label = variant + ("" if by_symmetry else ", symmetry off (each pair and triple on its own)")
            rows.append((label, repeat, result))
            print(f"{label}: analysis {result['analyse']:.2f} s, {result['verdict']}", flush=True)
    load = os.getloadavg()
    lines = [
        f"# Lint benchmark ({datetime.now(UTC):%Y-%m-%d}, {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores)",
        "",
        f"Load average (1, 5, 15 min): before {before[0]:.2f}, {before[1]:.2f}, {before[2]:.2f}; "
        f"after {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}. A load above the core count means the "
        "machine ran other work meanwhile and the times are longer than on a quiet one.",
        "",
        f"`preemption-operator lint` on {COHORTS * PER_COHORT} ClusterQueues in {COHORTS} cohorts with "
        f"{COHORTS} PreemptionConfigs and 4 priority classes (the setups are described in `benchmarks/lint.py`). "
        "Medians of the repeats; the symmetry-off row runs once. *analysis CPU* is the process's CPU time "
        "during the analysis: on a busy machine it stays near what a quiet one would take, where the wall "
        "time grows.",
        "",
        "| setup | repeats | read + parse (s) | analysis (s) | analysis CPU (s) | whole command (s) | verdict "
        "| flapping findings | queue pairs decided | queue triples decided | decided by an equivalent one "
        "| scheduling cycles |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for label, repeat, r in rows:
        command = f"{r['command']:.2f}" if r["command"] is not None else "-"
        lines.append(
            f"| {label} | {repeat} | {r['parse']:.2f} | {r['analyse']:.2f} | {r['analyse_cpu']:.2f} | {command} | "
            f"{r['verdict']} | "
            f"{r['flaps']} | {r['pairs']:,} | {r['triples']:,} | {r['equivalent']:,} | {r['cycles']:,} |"
        )
    lines += ["", f"Command: `python benchmarks/lint.py --repeat {args.repeat}`", ""]
    args.output.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
