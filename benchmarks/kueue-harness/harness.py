"""Kueue's own scheduler performance harness, run side by side against Kueue's minimalkueue and
against this operator, with the results written to benchmarks/results/kueue-harness.md.

    python benchmarks/kueue-harness/harness.py [--config baseline,large-scale,tas] [--cohorts N]
                                               [--scale 1/10,1/3,full] [--pairs 2] [--timeout 15m]
                                               [--sides kueue,kueue-stock,ours,kueue-prioritize]
                                               [--kueue-qps 1000]
                                               [--profile] [--output benchmarks/results/kueue-harness.md]
    python benchmarks/kueue-harness/harness.py --build-only      # what `make kueue-harness` runs

Kueue's runner, minimalkueue and checker are built from the Go module proxy (never from a copy of
Kueue's code in this repository) into ~/.cache/preemption-operator/kueue-harness/<version>/bin:

    go install sigs.k8s.io/kueue/test/performance/scheduler/{runner,minimalkueue}@v0.19.2
    go test -c ./test/performance/scheduler/checker      (in the module's folder in the Go module cache)

Configs: for each `--config` (Kueue's test/performance/scheduler/configs/<name>/generator.yaml,
from the module cache) and scale, the generator config is Kueue's with only the per-queue
workload counts scaled; `--cohorts N` also keeps at most N cohorts per cohort set (large-scale has
10 cohorts x 100 ClusterQueues; the report's header says when it was cut). The checker runs on
every run with that config's rangespec.yaml. The tas config runs the runner with --enableTAS (it
creates the Nodes, the Topology and the ResourceFlavor itself, and passes --enableTAS on to the
controller).

Sides: *kueue* is minimalkueue rebuilt with its hard-coded client limit (QPS 50 / burst 100)
lifted to `--kueue-qps` (default 1000, burst twice it; `lift_client_limit`), the comparison, since
the operator has no client limit by default; *kueue-stock* is minimalkueue as built, a second
column; *ours* is the operator. `--kueue-qps 0` makes *kueue* the stock build (and drops
*kueue-stock*). On request, *kueue-prioritize* is the *kueue* build with Kueue's alpha feature
gate PrioritizePreemptorWorkloads turned on (`build_variant`): the engine orders as that gate
does by default, its one documented difference in the order of a cycle, so this column and
*ours* decide by the same rules, and a ratio table compares ours with it too; *ours-kueue-order*
is the operator with that gate off (`--feature-gates PrioritizePreemptorWorkloads=false`),
ordering as *kueue* does. A side `ours-writesN` is the
operator with N status writes in flight
(--max-inflight-writes N): two settings measured in one run, against the same Kueue runs. All run
in the runner's envtest mode with identical flags, interleaved (kueue, kueue-stock, ours, kueue,
...): the runner starts its own etcd + kube-apiserver from KUBEBUILDER_ASSETS (etcd's data on
tmpfs), installs Kueue's CRD bases, starts the controller given
by --minimalKueue, creates the queues and workloads, plays the jobs (Finished after each
workload's runtime; releasing evicted ones), and ends when every active ClusterQueue reports no
pending or reserving workloads.

Both sides start equally. The runner starts the controller (exec, returning at once) and goes
straight on to its generator: nothing waits for the controller, so the side whose watches come
up sooner used to admit smalls and mediums before the first larges arrived (~1.2 s into
generation), and its eviction counts were not comparable. Now --minimalKueue is a wrapper for
either side, both named minimalkueue (the runner names its files after it): kueue/minimalkueue
(execs $KUEUE_MINIMALKUEUE, the side's build) and operator/minimalkueue (execs `preemption-operator
run`). Both source start-ready.sh, which (with KUEUE_HARNESS_PAUSE=1, set here) stops the runner
with SIGSTOP before exec'ing the controller (its generator, recorder and job player stop; etcd and
kube-apiserver are processes of their own and keep serving) and leaves a detached poller that
sends SIGCONT once the controller's own log says its caches are synced -- Kueue: controller-runtime's
`Starting workers` for every controller that logged `Starting EventSource`; ours: `cache synced` --
on two polls 50 ms apart for both (or after 60 s, or when the controller exits; a line in the
controller's log says which). The report shows, per run, how long the runner was held
(*runner paused*), the lead it gave (*controller ready → first workload set started*, from the
wrapper's resume line against the runner's `generate workload group` line) and the older *controller
watching → first workload set* (first EventSource / `cache synced`), so a reader sees both started
equally. The pause counts in the runner's wall and start → recorder done, alike for both sides.

Is a ClusterQueue's status prompt? The checker's usage is the recorder's integral of each
ClusterQueue's `status.flavorsUsage` over its status changes (cqStates.csv, "CPU used (mCPU *
ms)") over quota x window. Each run also integrates the workloads' own reservations from
wlStates.csv (each finished workload's request x its observed admission -> Finished; the runner
keeps only the last admission and no eviction times, so holds ended by an eviction are left out:
a lower bound) and reports both integrals and status ÷ reservations: well under 1 means the
status lags the reservations (or releases quota before `Finished` is seen).

Where the machine's time went: the harness reads the CPU time of each of the runner's processes
(runner, kube-apiserver, etcd; the controller's own from the runner's rusage) and, every few
seconds, the kube-apiserver's `apiserver_request_total` from its /metrics with the runner's
kubeconfig, so each run shows the API writes of all clients by kind (Workload, ClusterQueue and
LocalQueue status, Events), and each class's admitted -> Finished as the runner saw it (its
runtime plus its lag: the runner, kube-apiserver and etcd share the two cores with the
controller, so the controller's CPU and API writes come back as the runner's lag and the
quota's idle time). `--profile` passes the runner's --withCPUProfile: Kueue writes a pprof
profile, the operator (its wrapper maps --cpuprofile to `run --cpu-profile`) cProfile's pstats,
and the report shows the top of each; the profiler slows the operator down, so profiled runs are
for reading, not for timing.

Every figure in the report is measured in that run; each run's artifacts (summary.yaml,
*.stats.yaml, the CSVs, the runner's and the controller's logs) stay in the artifacts folder the
report names. This measures; nothing here is a test (tests/e2e/test_kueue_harness.py is).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import itertools
import json
import math
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
KUEUE_VERSION = "v0.19.2"
KUEUE_MODULE = "sigs.k8s.io/kueue"
PERF = "test/performance/scheduler"
WRAPPER = HERE / "operator" / "minimalkueue"
KUEUE_WRAPPER = HERE / "kueue" / "minimalkueue"
DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "kueue-harness.md"
# "kueue" is the comparison: minimalkueue with its client limit lifted (--kueue-qps, 1000 unless
# 0); "kueue-stock" is minimalkueue as built (QPS 50 / burst 100), a second column;
# "kueue-prioritize" (on request) is the "kueue" build with the engine's documented difference,
# Kueue's alpha gate PrioritizePreemptorWorkloads, turned on.
SIDES = ("kueue", "kueue-stock", "kueue-prioritize", "ours")
PRIORITIZE_GATE = "PrioritizePreemptorWorkloads"
SIDE_NAMES = {
    "kueue": "Kueue minimalkueue",
    "kueue-stock": "Kueue minimalkueue (stock client limit)",
    "kueue-prioritize": f"Kueue minimalkueue ({PRIORITIZE_GATE} on)",
    "ours": "preemption-operator",
}
SIDE_LABELS = {"kueue": "Kueue", "kueue-stock": "Kueue stock", "kueue-prioritize": "Kueue prioritize", "ours": "ours"}
OURS_WRITES = re.compile(r"ours-writes([1-9][0-9]*)")
"""A side `ours-writesN`: the operator with N status writes in flight (--max-inflight-writes), so
that two settings are measured interleaved in one run, against the same Kueue runs."""


def writes_of(side: str) -> str | None:
    """N of a side `ours-writesN`; None for any other side."""
    found = OURS_WRITES.fullmatch(side)
    return found.group(1) if found else None


OURS_KUEUE_ORDER = "ours-kueue-order"
"""The operator with PrioritizePreemptorWorkloads off, Kueue's default order: against the
*kueue* side, both decide by the same rules."""


def is_ours(side: str) -> bool:
    return side in ("ours", OURS_KUEUE_ORDER) or writes_of(side) is not None


def side_args(side: str) -> tuple[str, ...]:
    """The `preemption-operator run` flags a side adds to those of --ours-qps / --ours-writes."""
    if side == OURS_KUEUE_ORDER:
        return (f"--feature-gates={PRIORITIZE_GATE}=false",)
    writes = writes_of(side)
    return (f"--max-inflight-writes={writes}",) if writes else ()


def side_name(side: str) -> str:
    if side == OURS_KUEUE_ORDER:
        return f"preemption-operator, {PRIORITIZE_GATE} off (Kueue's default order)"
    writes = writes_of(side)
    return f"preemption-operator, {writes} writes in flight" if writes else SIDE_NAMES[side]


def side_label(side: str) -> str:
    if side == OURS_KUEUE_ORDER:
        return "ours Kueue order"
    writes = writes_of(side)
    return f"ours {writes} writes" if writes else SIDE_LABELS.get(side, side)


CONFIGS = ("baseline", "large-scale", "tas")
DEFAULT_KUEUE_QPS = 1000
CLASSES = ("small", "medium", "large")
# Kueue's Makefile default: the controller's logs at V(2) into files. Scraping is left off for
# both sides (the operator's /metrics is not Kueue's, and a failed scrape would abort a run).
RUNNER_FLAGS = ("--withLogs=true", "--logToFile=true")
# Recording timeout (the runner's --timeout) per scale unless --timeout is given.
DEFAULT_TIMEOUTS = {Fraction(1, 100): "5m", Fraction(1, 10): "10m", Fraction(1, 3): "15m", Fraction(1): "30m"}


def cache_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "preemption-operator" / "kueue-harness"


# ---- building Kueue's binaries ------------------------------------------------------------------


STOCK_NOTE = "as built (client QPS 50 / burst 100, minimalkueue's own)"


@dataclass
class Binaries:
    runner: Path
    minimalkueue: Path
    checker: Path | None  # None: the checker did not build; its three checks are reimplemented here
    module_dir: Path
    version: str
    checker_note: str = ""
    kueue_note: str = STOCK_NOTE
    ours_args: tuple[str, ...] = ()
    """Extra `preemption-operator run` flags (--ours-qps, --ours-writes), through the wrapper."""
    lifted: Path | None = None
    """minimalkueue with its client limit lifted (`lift_client_limit`), the "kueue" side's binary."""
    lifted_note: str = ""
    prioritized: Path | None = None
    """The "kueue" build with PrioritizePreemptorWorkloads on (`with_prioritized`)."""
    prioritized_note: str = ""

    @property
    def crds(self) -> Path:
        return self.module_dir / "config" / "components" / "crd" / "bases"

    def generator_config(self, name: str = "baseline") -> Path:
        return self.module_dir / PERF / "configs" / name / "generator.yaml"

    def rangespec(self, name: str = "baseline") -> Path:
        return self.module_dir / PERF / "configs" / name / "rangespec.yaml"

    @property
    def baseline_config(self) -> Path:
        return self.generator_config("baseline")

    @property
    def baseline_rangespec(self) -> Path:
        return self.rangespec("baseline")

    def kueue_binary(self, side: str) -> tuple[Path, str]:
        """The minimalkueue a Kueue side runs, and how it was built."""
        if side == "kueue" and self.lifted is not None:
            return self.lifted, self.lifted_note
        if side == "kueue-prioritize":
            if self.prioritized is None:
                raise SystemExit("kueue-harness: the kueue-prioritize side's minimalkueue was not built")
            return self.prioritized, self.prioritized_note
        return self.minimalkueue, self.kueue_note


def go_binary() -> str:
    found = shutil.which("go")
    if found:
        return found
    if Path("/usr/local/go/bin/go").is_file():
        return "/usr/local/go/bin/go"
    raise SystemExit("kueue-harness: no `go` on PATH (Go >= 1.26 builds Kueue's runner)")


def bin_dir(version: str = KUEUE_VERSION) -> Path:
    return cache_root() / version / "bin"


def _log(message: str) -> None:
    print(f"kueue-harness: {message}", file=sys.stderr, flush=True)


def module_dir(go: str, version: str = KUEUE_VERSION) -> Path:
    """Kueue's module source in the Go module cache (downloaded from the proxy if missing)."""
    out = subprocess.run(
        [go, "mod", "download", "-json", f"{KUEUE_MODULE}@{version}"], check=True, capture_output=True, text=True
    )
    return Path(json.loads(out.stdout)["Dir"])


def build(version: str = KUEUE_VERSION, *, go: str | None = None) -> Binaries:
    """Builds (or reuses) runner, minimalkueue and the checker test binary."""
    go = go or go_binary()
    bindir = bin_dir(version)
    bindir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOBIN": str(bindir)}
    runner, minimal = bindir / "runner", bindir / "minimalkueue"
    if not (runner.is_file() and minimal.is_file()):
        pkgs = [f"{KUEUE_MODULE}/{PERF}/{name}@{version}" for name in ("runner", "minimalkueue")]
        _log(f"go install {' '.join(pkgs)} (GOBIN={bindir}); a cold build takes several minutes")
        subprocess.run([go, "install", *pkgs], check=True, env=env, cwd=bindir)
    moddir = module_dir(go, version)
    (cache_root() / version / "module-dir").write_text(f"{moddir}\n")
    checker = bindir / "checker.test"
    note = "Kueue's checker, built with `go test -c` from the module source"
    if not checker.is_file():
        _log(f"go test -c ./{PERF}/checker (in {moddir})")
        done = subprocess.run(
            [go, "test", "-c", "-o", str(checker), f"./{PERF}/checker"],
            cwd=moddir,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0 or not checker.is_file():
            (bindir / "checker-build.log").write_text(done.stdout + done.stderr)
            _log(f"the checker did not build (see {bindir / 'checker-build.log'}); its checks are reimplemented")
            return Binaries(
                runner, minimal, None, moddir, version, "the checker did not build: its checks reimplemented"
            )
    return Binaries(runner, minimal, checker, moddir, version, note)


QPS_LINES = ("kubeConfig.QPS = 50", "kubeConfig.Burst = 100")


# Where main() parses its flags: the gates are set right after, before anything reads them.
MAIN_LINES = "\tflag.Parse()\n\tos.Exit(run())"
GATE_IMPORT = 'utilfeature "k8s.io/apiserver/pkg/util/feature"'
GATE_LINE = "kueue-harness: feature gate %s enabled: "


_GATE = re.compile(r"kueue-harness: feature gate (\w+) enabled: (true|false)")
_OURS_GATE = re.compile(r"feature gate (\w+)=(true|false): ")


def gates_seen(log: Path) -> dict[str, bool]:
    """The feature gates a `build_variant` build reported on its start (its first lines, after
    the wrapper's), from its stderr log."""
    if not log.is_file():
        return {}
    with log.open(errors="replace") as lines:
        found = (_GATE.search(line) or _OURS_GATE.search(line) for line in itertools.islice(lines, 200))
        return {m.group(1): m.group(2) == "true" for m in found if m}


def build_variant(binaries: Binaries, qps: int, gates: Sequence[str] = (), *, go: str | None = None) -> Path:
    """For analysis only: minimalkueue built from the same module source with its client rate
    limit (hard-coded QPS 50 / burst 100) raised to `qps` / 2 x `qps` (0: left as it is) and the
    feature `gates` turned on, and nothing else changed. The source is copied out of the module
    cache (read-only) into this harness's cache and patched there; nothing of Kueue's enters the
    repository."""
    go = go or go_binary()
    out = variant_path(binaries.version, qps, gates)
    if out.is_file():
        return out
    source = cache_root() / binaries.version / f"src-{out.parent.name}"
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(binaries.module_dir, source)
    for path in source.rglob("*"):
        path.chmod(path.stat().st_mode | 0o200)
    main_go = source / PERF / "minimalkueue" / "main.go"
    text = main_go.read_text()
    if qps:
        if not all(line in text for line in QPS_LINES):
            raise SystemExit(f"kueue-harness: {main_go} no longer sets {' / '.join(QPS_LINES)}; cannot lift the limit")
        text = text.replace(QPS_LINES[0], f"kubeConfig.QPS = {qps}").replace(
            QPS_LINES[1], f"kubeConfig.Burst = {2 * qps}"
        )
    if gates:
        if MAIN_LINES not in text or "import (\n" not in text:
            raise SystemExit(f"kueue-harness: {main_go} no longer parses its flags as expected; cannot set gates")
        enabled = ", ".join(f'"{g}": true' for g in gates)
        # The gates as the controller reads them, on stderr: the run checks them (`gates_seen`).
        shown = "".join(
            f'\tfmt.Fprintf(os.Stderr, "{GATE_LINE}%v\\n", "{g}", utilfeature.DefaultFeatureGate.Enabled("{g}"))\n'
            for g in gates
        )
        text = text.replace("import (\n", f"import (\n\t{GATE_IMPORT}\n", 1).replace(
            MAIN_LINES,
            f"\tflag.Parse()\n\tutilruntime.Must(utilfeature.DefaultMutableFeatureGate.SetFromMap("
            f"map[string]bool{{{enabled}}}))\n{shown}\tos.Exit(run())",
        )
    main_go.write_text(text)
    out.parent.mkdir(parents=True, exist_ok=True)
    _log(f"go build {out} from a copy of the module ({variant_note(qps, gates)})")
    subprocess.run(
        [go, "build", "-o", str(out), f"./{PERF}/minimalkueue"],
        cwd=source,
        check=True,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
    )
    return out


def variant_path(version: str, qps: int, gates: Sequence[str] = ()) -> Path:
    """Where `build_variant` puts a build: named minimalkueue still, as the runner names the
    controller's stats and log files after it."""
    return bin_dir(version) / "-".join([f"qps{qps}" if qps else "stock", *(g.lower() for g in gates)]) / "minimalkueue"


def variant_note(qps: int, gates: Sequence[str] = ()) -> str:
    parts = [f"client QPS 50 / burst 100 -> {qps} / {2 * qps}"] if qps else []
    parts += [f"feature gate {g} on" for g in gates]
    return ", ".join(parts) or "nothing changed"


def lift_client_limit(binaries: Binaries, qps: int, *, go: str | None = None) -> Binaries:
    """minimalkueue with only its client limit lifted (`build_variant`), to see which of Kueue's
    figures its rate limit sets: the "kueue" side."""
    out = build_variant(binaries, qps, go=go)
    return dataclasses.replace(binaries, lifted=out, lifted_note=lifted_note(qps))


def with_prioritized(binaries: Binaries, qps: int, *, go: str | None = None) -> Binaries:
    """The "kueue" side's build with PrioritizePreemptorWorkloads on: the "kueue-prioritize" side,
    Kueue with the engine's one documented difference in ordering taken away."""
    out = build_variant(binaries, qps, (PRIORITIZE_GATE,), go=go)
    return dataclasses.replace(binaries, prioritized=out, prioritized_note=prioritized_note(qps))


def lifted_note(qps: int) -> str:
    return (
        f"built from the same module source with only its client limit changed, QPS 50 / burst 100 ->"
        f" {qps} / {2 * qps} (`--kueue-qps {qps}`, the default comparison: the operator has no such limit"
        " by default; stock Kueue is its own column)"
    )


def prioritized_note(qps: int) -> str:
    return (
        f"built as the *Kueue* column's ({variant_note(qps)}) with, besides, its alpha feature gate"
        f" `{PRIORITIZE_GATE}` turned on (off by default in {KUEUE_VERSION}): a workload waiting for its"
        " victims goes first in the cycle and keeps their room. The engine orders so by default"
        " (docs/compatibility.md), so this column compares decisions made by the same rules"
    )


def installed(version: str = KUEUE_VERSION) -> Binaries | None:
    """The binaries `make kueue-harness` built, or None (nothing is built here)."""
    bindir = bin_dir(version)
    runner, minimal, checker = bindir / "runner", bindir / "minimalkueue", bindir / "checker.test"
    moddir_file = cache_root() / version / "module-dir"
    if not (runner.is_file() and minimal.is_file() and moddir_file.is_file()):
        return None
    moddir = Path(moddir_file.read_text().strip())
    if not (moddir / PERF).is_dir():
        return None
    return Binaries(runner, minimal, checker if checker.is_file() else None, moddir, version)


# ---- generator configs -------------------------------------------------------------------------


def parse_scale(text: str) -> Fraction:
    text = text.strip().lower()
    if text in ("full", "1", "1/1"):
        return Fraction(1)
    if text == "tiny":
        return Fraction(1, 100)
    value = Fraction(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"scale {text!r} must be in (0, 1]")
    return value


def scale_label(scale: Fraction) -> str:
    return "full" if scale == 1 else f"{scale.numerator}/{scale.denominator}"


def scaled_count(count: int, scale: Fraction) -> int:
    """Rounded half up, at least 1: 350, 100, 50 per queue give 117, 33, 17 at 1/3 (5,010 in all)."""
    return max(1, math.floor(count * scale + Fraction(1, 2)))


def scaled_config(baseline: dict[str, Any], scale: Fraction, cohorts: int | None = None) -> dict[str, Any]:
    """Kueue's config with its per-queue workload counts scaled and, with `cohorts`, at most that
    many cohorts per cohort set (queues per cohort, quotas and workload templates unchanged)."""
    config = json.loads(json.dumps(baseline))  # a deep copy of plain data
    for cohort in config["cohorts"]:
        if cohorts is not None:
            cohort["count"] = min(int(cohort["count"]), cohorts)
        for queues in cohort["queuesSets"]:
            for wset in queues["workloadsSets"]:
                wset["count"] = scaled_count(int(wset["count"]), scale)
    return config


def config_classes(config: dict[str, Any]) -> list[str]:
    """The config's workload class names, in the config's order."""
    names: list[str] = []
    for cohort in config["cohorts"]:
        for queues in cohort["queuesSets"]:
            for wset in queues["workloadsSets"]:
                for template in wset["workloads"]:
                    if template["className"] not in names:
                        names.append(template["className"])
    return names


def config_label(name: str, scale: Fraction, cohorts: int | None = None) -> str:
    """A run group's name in folders and file names: baseline-1-10, large-scale-full-c2."""
    label = f"{name}-{'full' if scale == 1 else f'{scale.numerator}-{scale.denominator}'}"
    return label + (f"-c{cohorts}" if cohorts is not None else "")


def total_workloads(config: dict[str, Any]) -> int:
    total = 0
    for cohort in config["cohorts"]:
        for queues in cohort["queuesSets"]:
            per_queue = sum(int(w["count"]) * len(w["workloads"]) for w in queues["workloadsSets"])
            total += int(cohort["count"]) * int(queues["count"]) * per_queue
    return total


def parse_cpu(value: Any) -> int:
    """A cpu quantity in milli-CPU ("1" -> 1000, "500m" -> 500)."""
    text = str(value).strip()
    if text.endswith("m"):
        return int(Fraction(text[:-1]))
    return int(Fraction(text) * 1000)


def class_requests(config: dict[str, Any]) -> dict[str, int]:
    """Workload class -> its cpu request in milli-CPU, times its pod count."""
    out: dict[str, int] = {}
    for cohort in config["cohorts"]:
        for queues in cohort["queuesSets"]:
            for wset in queues["workloadsSets"]:
                for template in wset["workloads"]:
                    out[template["className"]] = parse_cpu(template["request"]) * int(template.get("podCount") or 1)
    return out


def write_config(
    binaries: Binaries, scale: Fraction, folder: Path, name: str = "baseline", cohorts: int | None = None
) -> tuple[Path, dict[str, Any]]:
    original = yaml.safe_load(binaries.generator_config(name).read_text())
    config = scaled_config(original, scale, cohorts)
    path = folder / f"generator-{config_label(name, scale, cohorts)}.yaml"
    cut = f", at most {cohorts} cohorts per cohort set" if cohorts is not None else ""
    header = (
        f"# Kueue {binaries.version} configs/{name}/generator.yaml with the per-queue workload counts"
        f" scaled by {scale_label(scale)}{cut}\n# ({total_workloads(config)} workloads); written by"
        " benchmarks/kueue-harness/harness.py.\n"
    )
    path.write_text(header + yaml.safe_dump(config, sort_keys=False))
    return path, config


def describe_config(binaries: Binaries, name: str) -> str:
    """One line about a Kueue config and its rangespec, read from the module's files."""
    config = yaml.safe_load(binaries.generator_config(name).read_text())
    spec = yaml.safe_load(binaries.rangespec(name).read_text())
    parts = []
    for cohort in config["cohorts"]:
        for queues in cohort["queuesSets"]:
            templates = [
                f"{w['className']} ({w['request']} cpu x {w.get('podCount') or 1} pod(s), {w['runtimeMs']} ms,"
                f" priority {w['priority']}, {s['count']} per queue)"
                for s in queues["workloadsSets"]
                for w in s["workloads"]
            ]
            parts.append(
                f"{cohort['count']} cohorts x {queues['count']} ClusterQueues (nominal {queues['nominalQuota']} cpu,"
                f" borrowing limit {queues['borrowingLimit']}, reclaimWithinCohort {queues['reclaimWithinCohort']},"
                f" withinClusterQueue {queues['withinClusterQueue']}); classes {', '.join(templates)}"
            )
    if config.get("topology"):
        levels = " > ".join(f"{lv['name']} x {lv['count']}" for lv in config["topology"]["levels"])
        parts.append(f"topology {levels} (Nodes, Topology and the ResourceFlavor created by the runner)")
    limits = spec.get("wlClassesMaxAvgTimeToAdmissionMs") or {}
    thresholds = (
        f"wall ≤ {spec['cmd']['maxWallMs'] / 1000:g} s, usage ≥ {spec['clusterQueueClassesMinUsage'].get('cq')} %,"
        f" mean time to admission ≤ {', '.join(f'{k} {v / 1000:g} s' for k, v in limits.items())}"
    )
    return (
        f"Config {name}: Kueue's `configs/{name}/generator.yaml` with only the per-queue workload counts scaled"
        f" (rounded half up): {'; '.join(parts)}. Its rangespec: {thresholds}."
    )


# ---- one run ------------------------------------------------------------------------------------


def find_assets() -> Path:
    """KUBEBUILDER_ASSETS, else the folder hack/setup-envtest.sh fills (built there if missing)."""
    given = os.environ.get("KUBEBUILDER_ASSETS")
    if given and all((Path(given) / b).exists() for b in ("kube-apiserver", "etcd")):
        return Path(given)
    out = subprocess.run([str(ROOT / "hack" / "setup-envtest.sh")], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def operator_script() -> str:
    script = Path(sys.executable).parent / "preemption-operator"
    if script.is_file():
        return str(script)
    found = shutil.which("preemption-operator")
    if not found:
        raise SystemExit("kueue-harness: `preemption-operator` is not installed in this environment")
    return found


def git_revision() -> str:
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
        return done.stdout.strip()

    head = git("log", "-1", "--format=%h %ad %s", "--date=format:%Y-%m-%d %H:%M")
    dirty = git("status", "--porcelain", "--", "operator")
    return head + (" (+ uncommitted changes in operator/)" if dirty else "")


def _proc_stat(pid: int) -> tuple[int, int] | None:
    """(ppid, start time) of a process, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[19])


def _descendants(root: int) -> dict[int, int]:
    """pid -> start time of every live descendant of ``root``."""
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _proc_stat(int(entry))
            if stat is not None:
                children.setdefault(stat[0], []).append((int(entry), stat[1]))
    found: dict[int, int] = {}
    todo = [root]
    while todo:
        for pid, start in children.get(todo.pop(), []):
            found[pid] = start
            todo.append(pid)
    return found


def _end_leftovers(tracked: dict[int, int]) -> list[int]:
    """SIGTERM, then SIGKILL, the tracked processes still alive (same pid and start time): the
    runner leaves etcd and kube-apiserver running when it ends with an error (os.Exit)."""
    alive = [pid for pid, start in tracked.items() if (_proc_stat(pid) or (0, -1))[1] == start]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            alive = [pid for pid in alive if (_proc_stat(pid) or (0, -1))[1] == tracked[pid]]
            if not alive:
                break
            time.sleep(0.2)
    return alive


def _controller_rss_gib(runner_pid: int) -> float:
    """Resident memory of the runner's child processes other than etcd and kube-apiserver."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or (_proc_stat(int(entry)) or (0, 0))[0] != runner_pid:
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            status = Path(f"/proc/{entry}/status").read_text()
            name = status.split("Name:", 1)[1].split()[0]
            if name not in ("etcd", "kube-apiserver"):
                total += int(status.split("VmRSS:", 1)[1].split()[0])
    return total / 1024 / 1024


def _machine_busy_s() -> float:
    """CPU seconds every process on the machine has used since boot (user, nice, system, irq, softirq, steal)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _pdeathsig() -> Any:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None

    def hook() -> None:
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: the runner stops (cleanly) with us

    return hook


def _proc_cpu(pid: int) -> tuple[str, float] | None:
    """(command name, user + system CPU seconds) of a live process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    return name, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Probe:
    """Watches a run from outside: the CPU of each of the runner's processes (the last reading
    of each before it ended) and the kube-apiserver's own request counts (`apiserver_request_total`
    from its /metrics, read with the runner's kubeconfig every few seconds; the last reading),
    so that both sides' runs say where the machine's CPU went and how many API calls each made."""

    SCRAPE_EVERY_S = 3.0

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.cpu: dict[int, tuple[str, float]] = {}
        self.requests: dict[tuple[str, str, str], int] = {}
        self._context: Any = None
        self._server = ""
        self._last_scrape = 0.0
        self._tmp = Path(tempfile.mkdtemp(prefix="kueue-harness-probe-"))

    def sample(self, pids: Iterable[int]) -> None:
        for pid in pids:
            reading = _proc_cpu(pid)
            if reading is not None:
                self.cpu[pid] = reading
        if time.monotonic() - self._last_scrape >= self.SCRAPE_EVERY_S:
            self._last_scrape = time.monotonic()
            with contextlib.suppress(Exception):
                self._scrape()

    def _connect(self) -> bool:
        kubeconfig = self.folder / "kubeconfig"
        if self._context is not None or not kubeconfig.is_file():
            return self._context is not None
        self._context, self._server = _tls_context(kubeconfig, self._tmp)
        return True

    def _scrape(self) -> None:
        import urllib.request

        if not self._connect():
            return
        with urllib.request.urlopen(f"{self._server}/metrics", context=self._context, timeout=2) as answer:
            text = answer.read().decode()
        counts: dict[tuple[str, str, str], int] = {}
        for line in text.splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.rindex("}")]))
            resource = labels.get("resource", "")
            if labels.get("subresource"):
                resource += "/" + labels["subresource"]
            key = (labels.get("verb", ""), resource, labels.get("code", ""))
            counts[key] = counts.get(key, 0) + int(float(line.rsplit(" ", 1)[1]))
        if counts:
            self.requests = counts

    def cpu_by_name(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, seconds in self.cpu.values():
            out[name] = out.get(name, 0.0) + seconds
        return out

    def close(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)


class QuotaWatch:
    """Both sides of "is the ClusterQueue status prompt?" from one place and one clock: the
    harness watches ClusterQueues and Workloads itself (list, then watch from that version,
    resumed where it broke off; the API server closes a watcher that falls behind a burst), from
    the moment the runner's kubeconfig exists, each event stamped as it arrives. The Workloads'
    reservations integrate every hold, those that ended in an eviction too (the runner's
    wlStates.csv keeps only the last admission); the ClusterQueues' status the same field Kueue's
    checker reads (the first resource of the first flavor of `flavorsUsage`)."""

    PATHS = {
        "clusterqueues": "/apis/kueue.x-k8s.io/v1beta2/clusterqueues",
        "workloads": "/apis/kueue.x-k8s.io/v1beta2/workloads",
    }

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.points: dict[str, list[tuple[float, str, float]]] = {kind: [] for kind in self.PATHS}
        """Per kind: (arrival time, object key, mCPU shown or held) per event."""
        self.resumes: dict[str, int] = {kind: 0 for kind in self.PATHS}
        self.queues: dict[int, str] = {}
        """The ClusterQueue of each Workload event's admission, by its index in `points` (for
        the artifacts: where a status and its reservations part)."""
        self._threads: list[Any] = []
        self._stop = False
        self._tmp = Path(tempfile.mkdtemp(prefix="kueue-harness-watch-"))

    def poll(self) -> None:
        """Starts the watches once the runner has written its kubeconfig."""
        kubeconfig = self.folder / "kubeconfig"
        if self._threads or not kubeconfig.is_file():
            return
        import threading

        try:
            context, server = _tls_context(kubeconfig, self._tmp)
        except Exception:  # not written whole yet: next poll
            return
        for kind in self.PATHS:
            thread = threading.Thread(target=self._watch, args=(kind, context, server), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _watch(self, kind: str, context: Any, server: str) -> None:
        import http.client
        import urllib.parse

        read = _shown if kind == "clusterqueues" else _holding
        points = self.points[kind]
        url = urllib.parse.urlsplit(server)
        version: str | None = None
        while not self._stop:
            conn = http.client.HTTPSConnection(url.hostname or "", url.port, context=context, timeout=30)
            try:
                if version is None:
                    conn.request("GET", self.PATHS[kind])
                    listed = json.loads(conn.getresponse().read())
                    now = time.monotonic()
                    points.extend((now, *read(item)) for item in listed.get("items") or [])
                    version = listed["metadata"]["resourceVersion"]
                conn.request("GET", f"{self.PATHS[kind]}?watch=1&allowWatchBookmarks=true&resourceVersion={version}")
                answer = conn.getresponse()
                if answer.status != 200:
                    version = None
                    continue
                while not self._stop and (line := answer.readline()):
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        version = None  # 410 Gone: list again
                        break
                    version = (obj.get("metadata") or {}).get("resourceVersion") or version
                    if event.get("type") != "BOOKMARK":
                        points.append((time.monotonic(), *read(obj, event.get("type") == "DELETED")))
                        if kind == "workloads":
                            admission = (obj.get("status") or {}).get("admission") or {}
                            self.queues[len(points) - 1] = admission.get("clusterQueue", "")
            except Exception:  # a watch the server closed, or the server going away at the end
                time.sleep(0.1)
            finally:
                conn.close()
            self.resumes[kind] += 1

    def close(self) -> None:
        self._stop = True
        for thread in self._threads:
            thread.join(timeout=35)
        shutil.rmtree(self._tmp, ignore_errors=True)
        for kind, points in self.points.items():  # kept with the run's artifacts, to check a figure
            with (self.folder / f"watch-{kind}.tsv").open("w") as out:
                out.write(f"# seconds\tobject\tmCPU\tClusterQueue ({self.resumes[kind]} watch(es) resumed)\n")
                out.writelines(
                    f"{t:.3f}\t{key}\t{value:.0f}\t{self.queues.get(i, '') if kind == 'workloads' else key}\n"
                    for i, (t, key, value) in enumerate(points)
                )

    def integrals(self) -> tuple[float, float] | None:
        """(ClusterQueue status usage, workloads' reservations), mCPU x ms, over the same window:
        from the first event either watch saw to the last."""
        cq_points, wl_points = self.points["clusterqueues"], self.points["workloads"]
        if not cq_points or not wl_points:
            return None
        end = max(cq_points[-1][0], wl_points[-1][0])
        return _step_integral(cq_points, end), _step_integral(wl_points, end)


def _tls_context(kubeconfig: Path, folder: Path) -> tuple[Any, str]:
    """An SSL context with the kubeconfig's client certificate, and the server's URL."""
    import base64
    import ssl

    config = yaml.safe_load(kubeconfig.read_text())
    cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
    ca, cert, key = folder / "ca.crt", folder / "client.crt", folder / "client.key"
    ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
    key.write_bytes(base64.b64decode(user["client-key-data"]))
    context = ssl.create_default_context(cafile=str(ca))
    context.load_cert_chain(str(cert), str(key))
    return context, cluster["server"].rstrip("/")


def _key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _shown(obj: dict[str, Any], deleted: bool = False) -> tuple[str, float]:
    """A ClusterQueue's name and the mCPU its status shows in use (as Kueue's recorder reads it)."""
    if deleted:
        return _key(obj), 0.0
    usage = (obj.get("status") or {}).get("flavorsUsage") or []
    resources = usage[0].get("resources") or [] if usage else []
    return _key(obj), float(parse_cpu(resources[0].get("total", 0))) if resources else 0.0


def _holding(obj: dict[str, Any], deleted: bool = False) -> tuple[str, float]:
    """A Workload's key and the mCPU it holds: reserved, not finished."""
    status = obj.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if deleted or conditions.get("QuotaReserved") != "True" or conditions.get("Finished") == "True":
        return _key(obj), 0.0
    assignments = (status.get("admission") or {}).get("podSetAssignments") or []
    return _key(obj), float(sum(parse_cpu((a.get("resourceUsage") or {}).get("cpu", 0)) for a in assignments))


def _step_integral(points: Iterable[tuple[float, str, float]], end: float) -> float:
    """Sum over keys of a piecewise-constant value (set at each point until the next one, the
    last until `end`), in value x ms."""
    last: dict[str, tuple[float, float]] = {}
    total = 0.0
    for t, key, value in points:
        if not key:
            continue
        before = last.get(key)
        if before is not None:
            total += before[1] * (t - before[0]) * 1000
        last[key] = (t, value)
    for t, value in last.values():
        total += value * (end - t) * 1000
    return total


@dataclass
class Run:
    side: str
    scale: Fraction
    index: int  # pair number, from 1
    folder: Path
    expected: int
    config_name: str = "baseline"
    cohorts: int | None = None  # --cohorts: at most this many cohorts per cohort set
    command: list[str] = field(default_factory=list)
    revision: str = ""
    started: str = ""
    load_before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)
    runner_exit: int | None = None
    runner_seconds: float = 0.0
    harness_timeout: bool = False
    leftovers: list[int] = field(default_factory=list)
    machine_cpu_s: float | None = None  # every process's CPU time during the run (/proc/stat)
    own_cpu_s: float | None = None  # the runner's and its children's (etcd, kube-apiserver, controller)
    # measured
    stats: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None
    workloads_seen: int = 0
    workloads_finished: int = 0
    usage_status: float | None = None
    usage_recomputed: float | None = None
    window_s: float | None = None
    throughput_s: float | None = None
    scheduling_s: float | None = None
    """From the generator's first workload set to the recorder done: both sides' start (and the
    runner's own setup after it resumes) left out."""
    tta: dict[str, float] = field(default_factory=dict)
    tta_p90: dict[str, float] = field(default_factory=dict)
    evictions: dict[str, int] = field(default_factory=dict)
    burst_evictions: dict[str, int] | None = None
    """Victims per class of each ClusterQueue's first large workload (from the controller's log)."""
    reclaims: dict[str, int] | None = None
    """Victims per class preempted by a workload of their own class (from the controller's log)."""
    evicted_holds: dict[str, tuple[int, int]] | None = None
    """Per size: holds the harness's watch saw end in an eviction, and of them the short ones."""
    watch_lead_s: float | None = None
    """The controller's watches up this long before the generator's first workload set started."""
    paused_s: float | None = None
    """How long the wrapper kept the runner stopped for the controller's start (start-ready.sh)."""
    resume_outcome: str | None = None  # ready, timeout, controller exited (the wrapper's line)
    ready_lead_s: float | None = None
    """The runner resumed (controller ready) this long before the first workload set started."""
    status_mcpu_ms: float | None = None
    """Integral of the ClusterQueues' status usage (cqStates.csv, the recorder's), mCPU x ms."""
    reserved_mcpu_ms: float | None = None
    """Integral of the workloads' own reservations (wlStates.csv: admitted -> finished), mCPU x ms."""
    watched: tuple[float, float] | None = None
    """(ClusterQueue status usage, workloads' every reservation) integrals, mCPU x ms, from the
    harness's own watches over one window (QuotaWatch)."""
    reconciler_errors: int | None = None
    conflicts: int | None = None
    sigint_exit_s: float | None = None
    sigint_stopped_s: float | None = None  # ours: SIGINT to the operator's own "stopped in" log line
    generation_s: float | None = None
    checker_passed: bool | None = None
    checker_failures: list[str] = field(default_factory=list)
    checker_kind: str = ""
    child_log_errors: int | None = None
    problems: list[str] = field(default_factory=list)
    hold_s: dict[str, float] = field(default_factory=dict)
    """Per class: the mean time from a workload's observed admission to its observed Finished."""
    profile: str = ""
    """The top of the controller's CPU profile (--profile), as text."""
    process_cpu_s: dict[str, float] = field(default_factory=dict)
    """CPU seconds per process name of the runner's tree (runner, etcd, kube-apiserver, the controller)."""
    api_requests: dict[str, int] = field(default_factory=dict)
    """kube-apiserver's request counts, "VERB resource[/subresource] code" -> count (its last /metrics)."""

    @property
    def ok(self) -> bool:
        return self.summary is not None and self.stats is not None

    @property
    def cpu_s(self) -> float | None:
        return None if self.stats is None else (self.stats["userMs"] + self.stats["sysMs"]) / 1000

    @property
    def wall_s(self) -> float | None:
        return None if self.stats is None else self.stats["wallMs"] / 1000

    @property
    def rss_mib(self) -> float | None:
        return None if self.stats is None else self.stats["maxrss"] / 1024


_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)")


def _timestamp(line: str) -> datetime | None:
    match = _TS.match(line)
    if not match:
        return None
    frac = (match.group(2) or ".0")[:7]  # microseconds at most
    zone = "+00:00" if match.group(3) == "Z" else match.group(3)
    return datetime.fromisoformat(match.group(1) + frac + zone)


def parse_runner_log(path: Path) -> dict[str, Any]:
    """Timestamps of the runner's milestones and its reconcile errors (409s among them)."""
    marks: dict[str, datetime] = {}
    wanted = {
        "Starting process": "child_started",
        "Generator done": "generator_done",
        "Recorder done": "recorder_done",
        "Recorder run": "recorder_failed",
        "Stop the command": "sigint",
        "Cmd ended": "child_ended",
        "Start runner": "runner_started",
        "generate workload group": "generation_started",
    }
    errors = conflicts = 0
    examples: list[str] = []
    if not path.is_file():
        return {"marks": marks, "errors": None, "conflicts": None, "examples": examples}
    with path.open(errors="replace") as lines:
        for line in lines:
            if "Reconciler error" in line:
                errors += 1
                if "the object has been modified" in line or "Operation cannot be fulfilled" in line:
                    conflicts += 1
                if len(examples) < 3:
                    examples.append(line.strip()[:400])
                continue
            for text, key in wanted.items():
                if text in line and key not in marks:
                    ts = _timestamp(line)
                    if ts is not None:
                        marks[key] = ts
    return {"marks": marks, "errors": errors, "conflicts": conflicts, "examples": examples}


# Who preempted whom, as each controller logs it: the operator's "preempted <victim> for
# <preemptor>" line; Kueue's PreemptedWorkload event on the preemptor (logged at V(2)).
_OURS_PREEMPTED = re.compile(r"controller\.(?:decisions|loop): preempted \S+/(\S+) for \S+/(\S+):")
_KUEUE_PREEMPTED = re.compile(
    r'"object": \{"name":"([^"]+)".*"reason": "PreemptedWorkload".*Preempted workload \S+/(\S+) \('
)
# The generator names a workload <class>-<set>-<index>-<n>: index 0 is its set's first.
_FIRST_LARGE = re.compile(r"^large(?:-[a-z]+)*-\d+-0-\d+$")


def preemptions(path: Path) -> Iterator[tuple[str, str]]:
    """(preemptor, victim) workload names, as the controller's log records each preemption."""
    with path.open(errors="replace") as lines:
        for line in lines:
            ours = _OURS_PREEMPTED.search(line)
            if ours is not None:
                yield ours.group(2), ours.group(1)
                continue
            kueue = _KUEUE_PREEMPTED.search(line)
            if kueue is not None:
                yield kueue.group(1), kueue.group(2)


def burst_evictions(path: Path) -> dict[str, int] | None:
    """Victims per class of each ClusterQueue's first large workload. The first larges arrive all
    at once, ~1.2 s into generation, into cohorts busy with what came before them; whether a
    controller was already admitting by then decided most of a 1/10 run's medium evictions while
    the runner started the controller and the generator together (the wrappers now hold the
    runner until the controller is ready, start-ready.sh)."""
    if not path.is_file():
        return None
    counts = dict.fromkeys(CLASSES, 0)
    for preemptor, victim in preemptions(path):
        name = victim.split("-", 1)[0]
        if _FIRST_LARGE.match(preemptor) and name in counts:
            counts[name] += 1
    return counts


def same_class_preemptions(path: Path) -> dict[str, int] | None:
    """Victims per class preempted by a workload of their own class. A class has one priority, so
    these are reclaims within the cohort: a queue back under its nominal quota taking it back
    from a queue that borrowed it, which happens when a cohort is full as a lending queue's work
    ends."""
    if not path.is_file():
        return None
    counts = dict.fromkeys(CLASSES, 0)
    for preemptor, victim in preemptions(path):
        name = victim.split("-", 1)[0]
        if name in counts and preemptor.split("-", 1)[0] == name:
            counts[name] += 1
    return counts


SHORT_HOLD_S = 0.3
"""A hold this short that ends in an eviction was admitted in one scheduling cycle and preempted
in one of the next (no baseline workload runs this briefly)."""


def evicted_holds(path: Path) -> dict[str, tuple[int, int]] | None:
    """Per size: (holds that ended in an eviction, of them shorter than SHORT_HOLD_S), from the
    harness's own Workload watch (watch-workloads.tsv). A hold runs from a workload showing a
    reservation to showing none; it ended in an eviction when the admission went with it (a
    finished workload keeps its admission). Kueue's design admits a borrower whose lender can
    take the quota back; these short holds are the cases where the lender did so at once."""
    if not path.is_file():
        return None
    counts = {name: [0, 0] for name in CLASSES}
    since: dict[str, float] = {}
    with path.open() as lines:
        for line in lines:
            if line.startswith("#"):
                continue
            at, key, mcpu, cluster_queue = line.rstrip("\n").split("\t")
            held = float(mcpu) > 0
            if held:
                since.setdefault(key, float(at))
                continue
            started = since.pop(key, None)
            if started is None or cluster_queue:
                continue  # no hold ended here, or it ended as the workload finished
            size = key.rsplit("/", 1)[-1].split("-", 1)[0]
            if size in counts:
                counts[size][0] += 1
                counts[size][1] += float(at) - started < SHORT_HOLD_S
    return {name: (total, short) for name, (total, short) in counts.items()}


# The operator's own lines, under its logger's name (controller.run before the Operator class;
# artifacts of earlier runs still have it).
_OURS_SYNCED = re.compile(r"preemption_operator\.controller\.(?:operator|run): cache synced")
_OURS_STOPPED = re.compile(r"preemption_operator\.controller\.(?:operator|run): stopped in")


def _watching_since(path: Path) -> datetime | None:
    """When the controller's watches came up: Kueue's first event source, the operator's sync."""
    if not path.is_file():
        return None
    with path.open(errors="replace") as lines:
        for line in lines:
            if "Starting EventSource" in line or _OURS_SYNCED.search(line):
                return _timestamp(line)
    return None


_PAUSED = re.compile(r"kueue-harness wrapper: paused the runner")
_RESUMED = re.compile(r"kueue-harness wrapper: resumed the runner \(pid \d+\): (.+)$")


def wrapper_pause(path: Path) -> tuple[datetime | None, datetime | None, str | None]:
    """When the wrapper (start-ready.sh) stopped the runner, when it let it go on, and why
    (ready, timeout, controller exited): from the lines it writes into the controller's log."""
    paused = resumed = None
    outcome = None
    if not path.is_file():
        return paused, resumed, outcome
    with path.open(errors="replace") as lines:
        for line in lines:
            if paused is None and _PAUSED.search(line):
                paused = _timestamp(line)
            elif resumed is None and (match := _RESUMED.search(line.rstrip())):
                resumed, outcome = _timestamp(line), match.group(1)
    return paused, resumed, outcome


def _stopped_line(path: Path) -> datetime | None:
    """When the operator logged that its shutdown finished ("stopped in ..."), if it did."""
    if not path.is_file():
        return None
    found = None
    with path.open(errors="replace") as lines:
        for line in lines:
            if _OURS_STOPPED.search(line):
                found = _timestamp(line)
    return found


def count_log_errors(folder: Path) -> int | None:
    """Lines at error level (or a Python traceback) in the controller's own logs."""
    logs = [folder / "minimalkueue.err.log", folder / "minimalkueue.out.log"]
    if not any(p.is_file() for p in logs):
        return None
    pattern = re.compile(r"\tERROR\t|\bERROR\b|^Traceback ")
    total = 0
    for path in logs:
        if path.is_file():
            with path.open(errors="replace") as lines:
                total += sum(1 for line in lines if pattern.search(line))
    return total


def read_csv(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def read_wl_states(path: Path) -> list[dict[str, str]]:
    return read_csv(path)


def status_integral(cq_rows: list[dict[str, str]]) -> tuple[float, float] | None:
    """The integral of the ClusterQueues' `status.flavorsUsage` (mCPU x ms) summed over the
    ClusterQueues, and their nominal quota summed (mCPU), from the recorder's cqStates.csv: for
    each ClusterQueue the recorder adds, at every status change it sees, the usage the status
    reported until then times the time since that report (the number Kueue's checker divides)."""
    if not cq_rows:
        return None
    used = sum(float(row["CPU used (mCPU * ms)"]) for row in cq_rows)
    quota = sum(float(row["CPU quota (mCPU)"]) for row in cq_rows)
    return used, quota


def reservation_integral(wl_rows: list[dict[str, str]], requests: dict[str, int]) -> float:
    """The integral of the quota the workloads themselves held (mCPU x ms): each finished workload's
    request from its observed admission to its observed Finished (wlStates.csv; both relative to
    its first event, so no window is needed). The runner keeps only the last admission and no
    eviction times: a hold that ended in an eviction is not counted (a lower bound, so a status
    that tracks the reservations integrates at least this much)."""
    total = 0.0
    for row in wl_rows:
        finished, admitted = int(row["ms to finish"]), int(row["ms to admitted"])
        if finished > 0 and finished >= admitted:
            total += requests.get(row["class name"], 0) * (finished - admitted)
    return total


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def reimplemented_checks(summary: dict[str, Any], stats: dict[str, Any], rangespec: dict[str, Any]) -> list[str]:
    """The checker's three checks (wall time, usage per ClusterQueue class, average time to
    admission per workload class); returns the failures."""
    failures = []
    if stats["wallMs"] > rangespec["cmd"]["maxWallMs"]:
        failures.append(f"CommandStats: wall {stats['wallMs']} ms > {rangespec['cmd']['maxWallMs']} ms")
    for name, cls in (summary.get("clusterQueueClasses") or {}).items():
        minimum = rangespec.get("clusterQueueClassesMinUsage", {}).get(name)
        window = _window_ms(cls)
        if minimum is None:
            failures.append(f"ClusterQueueClasses/{name}: unexpected class")
        elif not cls.get("nominalQuota") or not window:
            failures.append(f"ClusterQueueClasses/{name}: invalid data")
        else:
            usage = cls["cpuUsed"] * 100 / (cls["nominalQuota"] * window)
            if usage < minimum:
                failures.append(f"ClusterQueueClasses/{name}: usage {usage:.2f}% < {minimum}%")
    for name, cls in (summary.get("workloadClasses") or {}).items():
        maximum = rangespec.get("wlClassesMaxAvgTimeToAdmissionMs", {}).get(name)
        if maximum is None:
            failures.append(f"WorkloadClasses/{name}: unexpected class")
        elif cls["averageTimeToAdmissionMs"] > maximum:
            failures.append(f"WorkloadClasses/{name}: {cls['averageTimeToAdmissionMs']} ms > {maximum} ms")
    return failures


def _parse_time(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return _timestamp(str(value)) or datetime.fromisoformat(str(value))


def _window_ms(cls: dict[str, Any]) -> float:
    return (_parse_time(cls["lastEventTime"]) - _parse_time(cls["firstEventTime"])).total_seconds() * 1000


def run_checker(binaries: Binaries, run: Run) -> None:
    summary_path, stats_path = run.folder / "summary.yaml", run.folder / "minimalkueue.stats.yaml"
    rangespec_path = binaries.rangespec(run.config_name)
    rangespec = yaml.safe_load(rangespec_path.read_text())
    assert run.summary is not None and run.stats is not None
    if binaries.checker is not None:
        done = subprocess.run(
            [
                str(binaries.checker),
                "-test.v",
                f"-summary={summary_path}",
                f"-cmdStats={stats_path}",
                f"-range={rangespec_path}",
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PROJECT_DIR": str(binaries.module_dir)},  # Kueue's test/util panics without it
        )
        (run.folder / "checker.log").write_text(done.stdout + done.stderr)
        run.checker_kind = "Kueue's checker"
        run.checker_passed = done.returncode == 0
        lines = (done.stdout + done.stderr).splitlines()
        run.checker_failures = [
            line.strip() for line in lines if re.search(r"_test\.go:\d+:", line) or line.startswith("panic:")
        ]
    else:
        run.checker_kind = "reimplemented checks"
        run.checker_failures = reimplemented_checks(run.summary, run.stats, rangespec)
        run.checker_passed = not run.checker_failures
        (run.folder / "checker.log").write_text("\n".join(run.checker_failures or ["PASS"]) + "\n")


def dump_cluster(assets: Path, run: Run) -> None:
    """After a failed run, while the runner's kube-apiserver still answers: the ClusterQueues'
    status and the workloads' conditions, for the report's diagnosis."""
    kubeconfig = run.folder / "kubeconfig"
    kubectl = assets / "kubectl"
    if not (kubeconfig.is_file() and kubectl.exists()):
        return
    for kind in ("clusterqueues", "workloads"):
        done = subprocess.run(
            [str(kubectl), f"--kubeconfig={kubeconfig}", "get", kind, "-A", "-o", "json", "--request-timeout=20s"],
            capture_output=True,
            text=True,
        )
        if done.returncode == 0:
            (run.folder / f"post-mortem-{kind}.json").write_text(done.stdout)


def diagnose(run: Run) -> None:
    """What a post-mortem dump says about a run that did not finish."""
    cqs_path, wls_path = run.folder / "post-mortem-clusterqueues.json", run.folder / "post-mortem-workloads.json"
    if cqs_path.is_file():
        items = json.loads(cqs_path.read_text()).get("items", [])
        stuck = []
        inactive = 0
        for cq in items:
            status = cq.get("status") or {}
            active = any(
                c.get("type") == "Active" and c.get("status") == "True" for c in status.get("conditions") or []
            )
            inactive += not active
            if status.get("pendingWorkloads") or status.get("reservingWorkloads"):
                stuck.append(
                    f"{cq['metadata']['name']} pending={status.get('pendingWorkloads')}"
                    f" reserving={status.get('reservingWorkloads')} admitted={status.get('admittedWorkloads')}"
                )
        run.problems.append(
            f"post-mortem: {len(items)} ClusterQueues, {inactive} not Active, {len(stuck)} with pending or reserving"
            f" workloads in status{': ' + '; '.join(stuck[:4]) if stuck else ''}"
        )
    if wls_path.is_file():
        items = json.loads(wls_path.read_text()).get("items", [])

        def cond(wl: dict[str, Any], kind: str) -> bool:
            return any(
                c.get("type") == kind and c.get("status") == "True"
                for c in (wl.get("status") or {}).get("conditions") or []
            )

        finished = sum(cond(w, "Finished") for w in items)
        admitted = sum(cond(w, "Admitted") and not cond(w, "Finished") for w in items)
        reserved = sum(cond(w, "QuotaReserved") and not cond(w, "Admitted") for w in items)
        evicted = sum(cond(w, "Evicted") and not cond(w, "Finished") for w in items)
        rest = len(items) - finished - admitted - reserved
        run.problems.append(
            f"post-mortem: {len(items)} workloads stored: {finished} Finished, {admitted} Admitted (not finished),"
            f" {reserved} QuotaReserved without Admitted, {rest} pending; {evicted} Evicted and not finished"
        )


def run_once(
    binaries: Binaries,
    side: str,
    scale: Fraction,
    index: int,
    config_path: Path,
    config: dict[str, Any],
    folder: Path,
    *,
    assets: Path,
    timeout: str,
    runner_log_level: str | None = None,
    profile: bool = False,
    quota_watch: bool = True,
    max_rss_gib: float = 8.0,
    config_name: str = "baseline",
    cohorts: int | None = None,
) -> Run:
    """One runner invocation against one side; everything it measures."""
    folder.mkdir(parents=True, exist_ok=True)
    run = Run(side, scale, index, folder, total_workloads(config), config_name, cohorts)
    # Both sides through a wrapper named minimalkueue (the runner names its files after it) that
    # pauses the runner until the controller's caches are synced (start-ready.sh).
    child = WRAPPER if is_ours(side) else KUEUE_WRAPPER
    run.command = [
        str(binaries.runner),
        f"--o={folder}",
        f"--crds={binaries.crds}",
        f"--generatorConfig={config_path}",
        f"--minimalKueue={child}",
        f"--timeout={timeout}",
        *RUNNER_FLAGS,
        *(["--enableTAS"] if config_name == "tas" else []),
        *([f"--zap-log-level={runner_log_level}"] if runner_log_level else []),
        *(["--withCPUProfile=true"] if profile else []),
    ]
    tmp = Path(tempfile.mkdtemp(prefix="kueue-harness-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    env = {
        **os.environ,
        "KUBEBUILDER_ASSETS": str(assets),
        "PROJECT_DIR": str(binaries.module_dir),  # the runner panics without it
        "TMPDIR": str(tmp),  # envtest's etcd data on tmpfs
        "PREEMPTION_OPERATOR": operator_script(),
        "PREEMPTION_OPERATOR_ARGS": " ".join((*binaries.ours_args, *side_args(side))),
        "KUEUE_MINIMALKUEUE": str(binaries.kueue_binary(side)[0]),
        "KUEUE_HARNESS_PAUSE": "1",
    }
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        env.pop(var, None)
    run.revision = git_revision()
    run.started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    run.load_before = os.getloadavg()
    _log(f"{config_name} {scale_label(scale)} pair {index} {side}: {run.expected} workloads -> {folder}")
    limit = parse_duration(timeout) + 300  # startup, generation and shutdown beyond the recording timeout
    tracked: dict[int, int] = {}
    busy_before, own_before = _machine_busy_s(), _children_cpu_s()
    probe = Probe(folder)
    watch = QuotaWatch(folder)
    began = time.monotonic()
    with (folder / "runner.log").open("wb") as log:
        proc = subprocess.Popen(
            run.command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=folder,
            start_new_session=True,
            preexec_fn=_pdeathsig(),
        )
        try:
            while proc.poll() is None:
                tracked.update(_descendants(proc.pid))
                probe.sample([proc.pid, *tracked])
                if quota_watch:
                    watch.poll()
                rss = _controller_rss_gib(proc.pid)
                if rss > max_rss_gib and not run.harness_timeout:
                    run.harness_timeout = True
                    run.problems.append(
                        f"the controller's RSS reached {rss:.1f} GiB (limit {max_rss_gib}): sent SIGINT"
                    )
                    proc.send_signal(signal.SIGCONT)  # in case the wrapper still holds it stopped
                    proc.send_signal(signal.SIGINT)
                    kill_at = time.monotonic() + 60
                if time.monotonic() - began > limit and not run.harness_timeout:
                    run.harness_timeout = True
                    run.problems.append(f"the runner was still running {limit:.0f} s after it started: sent SIGINT")
                    proc.send_signal(signal.SIGCONT)
                    proc.send_signal(signal.SIGINT)
                    kill_at = time.monotonic() + 60
                if run.harness_timeout and time.monotonic() > kill_at:
                    run.problems.append("the runner ignored SIGINT for 60 s: killed it")
                    proc.kill()
                time.sleep(1.0)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    run.runner_seconds = time.monotonic() - began
    probe.close()
    watch.close()
    run.watched = watch.integrals()
    run.process_cpu_s = probe.cpu_by_name()
    run.api_requests = {f"{verb} {resource} {code}": n for (verb, resource, code), n in sorted(probe.requests.items())}
    run.machine_cpu_s, run.own_cpu_s = _machine_busy_s() - busy_before, _children_cpu_s() - own_before
    run.runner_exit = proc.returncode
    run.load_after = os.getloadavg()
    if proc.returncode != 0:
        dump_cluster(assets, run)
    run.leftovers = _end_leftovers(tracked)
    shutil.rmtree(tmp, ignore_errors=True)
    collect(binaries, run, config)
    return run


def collect(binaries: Binaries, run: Run, config: dict[str, Any]) -> None:
    folder = run.folder
    stats_path, summary_path = folder / "minimalkueue.stats.yaml", folder / "summary.yaml"
    if stats_path.is_file():
        run.stats = yaml.safe_load(stats_path.read_text())
    if summary_path.is_file():
        run.summary = yaml.safe_load(summary_path.read_text())
    parsed = parse_runner_log(folder / "runner.log")
    marks = parsed["marks"]
    run.reconciler_errors, run.conflicts = parsed["errors"], parsed["conflicts"]
    if "sigint" in marks and "child_ended" in marks:
        run.sigint_exit_s = (marks["child_ended"] - marks["sigint"]).total_seconds()
    if "child_started" in marks and "recorder_done" in marks:
        run.throughput_s = (marks["recorder_done"] - marks["child_started"]).total_seconds()
    if "generation_started" in marks and "recorder_done" in marks:
        run.scheduling_s = (marks["recorder_done"] - marks["generation_started"]).total_seconds()
    if "child_started" in marks and "generator_done" in marks:
        run.generation_s = (marks["generator_done"] - marks["child_started"]).total_seconds()
    run.child_log_errors = count_log_errors(folder)
    run.profile = profile_summary(binaries, run)
    run.burst_evictions = burst_evictions(folder / "minimalkueue.err.log")
    run.reclaims = same_class_preemptions(folder / "minimalkueue.err.log")
    run.evicted_holds = evicted_holds(folder / "watch-workloads.tsv")
    watching = _watching_since(folder / "minimalkueue.err.log")
    if watching is not None and "generation_started" in marks:
        run.watch_lead_s = (marks["generation_started"] - watching).total_seconds()
    paused, resumed, run.resume_outcome = wrapper_pause(folder / "minimalkueue.err.log")
    if paused is not None and resumed is not None:
        run.paused_s = (resumed - paused).total_seconds()
    if resumed is not None and "generation_started" in marks:
        run.ready_lead_s = (marks["generation_started"] - resumed).total_seconds()
    if run.resume_outcome not in (None, "ready"):
        run.problems.append(f"the wrapper resumed the runner without a ready controller: {run.resume_outcome}")
    expected_gate = {"kueue-prioritize": True, OURS_KUEUE_ORDER: False}.get(run.side)
    if expected_gate is not None and gates_seen(folder / "minimalkueue.err.log").get(PRIORITIZE_GATE) != expected_gate:
        run.problems.append(f"the controller did not report {PRIORITIZE_GATE}={str(expected_gate).lower()}")
    stopped = _stopped_line(folder / "minimalkueue.err.log")
    if stopped is not None and "sigint" in marks:
        run.sigint_stopped_s = (stopped - marks["sigint"]).total_seconds()
    if run.runner_exit != 0:
        run.problems.append(f"the runner exited with status {run.runner_exit}")
        if "recorder_failed" in marks:
            line = next(
                (ln for ln in (folder / "runner.log").read_text(errors="replace").splitlines() if "Recorder run" in ln),
                "",
            )
            run.problems.append(f"runner: {line.strip()[:300]}")
        diagnose(run)
    if run.stats is None:
        run.problems.append("no minimalkueue.stats.yaml (the controller's exit was not recorded)")
    if run.summary is None:
        run.problems.append("no summary.yaml (the runner writes it only when the recorder ends without error)")
        return
    states = read_wl_states(folder / "wlStates.csv")
    run.workloads_seen = len(states)
    run.workloads_finished = sum(1 for s in states if int(s["ms to finish"]) > 0)
    if run.workloads_finished < run.expected:
        run.problems.append(f"only {run.workloads_finished} of {run.expected} workloads were seen Finished")
    for name, cls in (run.summary.get("workloadClasses") or {}).items():
        run.tta[name] = cls["averageTimeToAdmissionMs"] / 1000
        run.evictions[name] = cls["totalEvictions"]
        values = [int(s["ms to admitted"]) / 1000 for s in states if s["class name"] == name]
        if values:
            run.tta_p90[name] = _percentile(values, 0.9)
        holds = [
            (int(s["ms to finish"]) - int(s["ms to admitted"])) / 1000
            for s in states
            if s["class name"] == name and int(s["ms to finish"]) > 0
        ]
        if holds:
            run.hold_s[name] = sum(holds) / len(holds)
    # Recomputed from the workloads: each holds its request from its (last) observed admission
    # to its observed Finished; the runner's CSV gives both relative to the workload's first event.
    run.reserved_mcpu_ms = reservation_integral(states, class_requests(config))
    status = status_integral(read_csv(folder / "cqStates.csv"))
    if status is not None:
        run.status_mcpu_ms = status[0]
    cq = (run.summary.get("clusterQueueClasses") or {}).get("cq")
    if cq and cq.get("nominalQuota"):
        window = _window_ms(cq)
        run.window_s = window / 1000
        run.usage_status = cq["cpuAverageUsage"] * 100 / cq["nominalQuota"]
        if window > 0:
            run.usage_recomputed = run.reserved_mcpu_ms * 100 / (cq["nominalQuota"] * window)
    if run.summary.get("droppedWorkloadEvents"):
        run.problems.append(
            f"the recorder dropped {run.summary['droppedWorkloadEvents']} workload events (the run's averages are partial)"
        )
    if run.stats is not None:
        run_checker(binaries, run)


PROFILE_LINES = 25


def profile_summary(binaries: Binaries, run: Run) -> str:
    """The top of the controller's CPU profile, if the run made one: the runner asks for
    <folder>/minimalkueue.cpu.prof; Kueue writes pprof (read with `go tool pprof -top`), the
    operator cProfile's pstats (own time first, then the cumulative time of the same functions)."""
    path = run.folder / "minimalkueue.cpu.prof"
    if not path.is_file() or path.stat().st_size == 0:
        return ""
    if is_ours(run.side):
        import io
        import pstats

        stream = io.StringIO()
        stats = pstats.Stats(str(path), stream=stream)
        stats.strip_dirs().sort_stats("tottime").print_stats(PROFILE_LINES)
        stats.sort_stats("cumulative").print_stats(PROFILE_LINES)
        text = stream.getvalue()
    else:
        binary = binaries.kueue_binary(run.side)[0]
        done = subprocess.run(
            [go_binary(), "tool", "pprof", "-top", f"-nodecount={PROFILE_LINES}", str(binary), str(path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        text = done.stdout or done.stderr
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    return "\n".join(lines)


def parse_duration(text: str) -> float:
    total, rest = 0.0, text.strip()
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s)", rest):
        total += float(number) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001}[unit]
    if total <= 0:
        raise argparse.ArgumentTypeError(f"bad duration {text!r} (Go syntax: 90s, 15m, 1h)")
    return total


# ---- the report ---------------------------------------------------------------------------------


def machine() -> dict[str, str]:
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = "unknown"
    with contextlib.suppress(OSError):
        kib = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
        mem = f"{kib / 1024 / 1024:.1f} GiB"
    go = subprocess.run([go_binary(), "version"], capture_output=True, text=True).stdout.strip()
    return {
        "cpu": model,
        "cores": str(os.cpu_count()),
        "memory": mem,
        "kernel": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "go": go,
    }


def asset_versions(assets: Path) -> str:
    def first_line(*argv: str) -> str:
        with contextlib.suppress(OSError):
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            return (done.stdout or done.stderr).strip().splitlines()[0]
        return "unknown"

    return (
        f"{first_line(str(assets / 'kube-apiserver'), '--version')}, "
        f"etcd {first_line(str(assets / 'etcd'), '--version').split()[-1]}"
    )


def fmt(value: float | int | None, digits: int = 1) -> str:
    if value is None:
        return "—"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def ratio(ours: float | int | None, kueue: float | int | None) -> float | None:
    if ours is None or kueue is None or kueue == 0:
        return None
    return ours / kueue


def rows(classes: list[str]) -> list[tuple[str, Any, int]]:
    """The table's rows, with one time-to-admission row per workload class of the config."""
    out: list[tuple[str, Any, int]] = []
    for title, get, digits in ROWS:
        if title == "time to admission":
            out += [(f"time to admission, {n}: mean / p90, s", lambda r, n=n: _tta(r, n), 0) for n in classes]
        else:
            out.append((title, get, digits))
    return out


ROWS: list[tuple[str, Any, int]] = [
    ("controller wall, s (stats.yaml wallMs)", lambda r: r.wall_s, 1),
    ("controller start → recorder done, s", lambda r: r.throughput_s, 1),
    ("first workload set started → recorder done, s", lambda r: r.scheduling_s, 1),
    ("workloads/s (workloads ÷ start → recorder done)", lambda r: _per_s(r), 1),
    ("controller CPU user+sys, s", lambda r: r.cpu_s, 1),
    ("controller CPU, cores on average (CPU ÷ wall)", lambda r: _cores(r), 2),
    ("controller max RSS, MiB", lambda r: r.rss_mib, 0),
    ("usage %, ClusterQueue status (cpuAverageUsage ÷ nominalQuota)", lambda r: r.usage_status, 1),
    ("usage %, recomputed from workloads (admitted → Finished)", lambda r: r.usage_recomputed, 1),
    ("ClusterQueue status usage integral, CPU-s (cqStates.csv)", lambda r: _cpu_s(r.status_mcpu_ms), 0),
    (
        "workloads' reservations integral, CPU-s (wlStates.csv, admitted → Finished)",
        lambda r: _cpu_s(r.reserved_mcpu_ms),
        0,
    ),
    ("status ÷ reservations (under 1: the status lags the reservations)", lambda r: _status_ratio(r), 2),
    (
        "harness's own watches: ClusterQueue status / every reservation (evictions too), CPU-s",
        lambda r: _watched(r),
        0,
    ),
    ("harness's own watches: status ÷ reservations (1: the status is exact)", lambda r: _watched_ratio(r), 3),
    ("time to admission", None, 0),
    ("admitted → Finished as the runner saw it (its runtime plus its lag), mean s", lambda r: _holds(r), 2),
    ("evictions small / medium / large", lambda r: _evictions(r), 0),
    ("preemptions by each ClusterQueue's first large (controller's log)", lambda r: _per_class(r.burst_evictions), 0),
    (
        "derived: evictions after the first larges (evictions minus the row above, at least 0)",
        lambda r: _after_burst(r),
        0,
    ),
    (
        "preemptions by a workload of the victim's own class: reclaims within the cohort (controller's log)",
        lambda r: _per_class(r.reclaims),
        0,
    ),
    (
        f"evictions the harness's watch saw (in brackets: after a hold under {SHORT_HOLD_S} s,"
        " admitted in one cycle and reclaimed in a next)",
        lambda r: _short_holds(r),
        0,
    ),
    ("runner paused for the controller's start (wrapper), s", lambda r: _paused(r), 2),
    ("controller ready (runner resumed) → first workload set started, s", lambda r: r.ready_lead_s, 2),
    ("controller watching → first workload set started, s (negative: after)", lambda r: r.watch_lead_s, 2),
    ("runner reconcile errors / of them 409 conflicts", lambda r: _errors(r), 0),
    ("SIGINT → controller exit, s", lambda r: r.sigint_exit_s, 2),
    ("SIGINT → operator's own `stopped in` log line, s (ours only)", lambda r: r.sigint_stopped_s, 2),
    ("error lines in the controller's log", lambda r: r.child_log_errors, 0),
    ("workloads seen Finished / created", lambda r: f"{r.workloads_finished:,} / {r.expected:,}" if r.ok else None, 0),
    ("checker (the config's rangespec)", lambda r: _checker(r), 0),
    ("CPU-s of runner / kube-apiserver / etcd (their /proc, last reading)", lambda r: _process_cpu(r), 0),
    ("API writes (kube-apiserver's count: POST, PUT, PATCH, DELETE), all clients", lambda r: _writes(r), 0),
    ("of them Workload status / ClusterQueue status / LocalQueue status / Events", lambda r: _write_split(r), 0),
    ("load average (1 min) before / after", lambda r: f"{r.load_before[0]:.2f} / {r.load_after[0]:.2f}", 0),
    ("CPU-s used during the run by this run's processes / by all others", lambda r: _other_load(r), 0),
]

RATIO_ROWS: list[tuple[str, Any]] = [
    ("controller wall", lambda r: r.wall_s),
    ("controller start → recorder done", lambda r: r.throughput_s),
    ("first workload set → recorder done", lambda r: r.scheduling_s),
    ("workloads/s", lambda r: _per_s(r)),
    ("controller CPU user+sys", lambda r: r.cpu_s),
    ("controller max RSS", lambda r: r.rss_mib),
    ("usage, ClusterQueue status", lambda r: r.usage_status),
    ("usage, recomputed from workloads", lambda r: r.usage_recomputed),
    ("status ÷ reservations", lambda r: _status_ratio(r)),
    ("status ÷ reservations, harness's own watches", lambda r: _watched_ratio(r)),
    ("time to admission, small (mean)", lambda r: _size_tta(r, "small")),
    ("time to admission, medium (mean)", lambda r: _size_tta(r, "medium")),
    ("time to admission, large (mean)", lambda r: _size_tta(r, "large")),
    ("SIGINT → controller exit", lambda r: r.sigint_exit_s),
]


def _size_tta(run: Run, size: str) -> float | None:
    """A size's mean time to admission: its class's, or the mean of its classes' (tas's
    small-required-rack, small-preferred-rack, ... are all small)."""
    values = [v for name, v in run.tta.items() if name.split("-", 1)[0] == size]
    return sum(values) / len(values) if values else None


def _holds(run: Run) -> str | None:
    if not run.hold_s:
        return None
    return " / ".join(f"{run.hold_s[c]:.2f}" if c in run.hold_s else "—" for c in _size_order(run.hold_s))


def _size_order(names: Iterable[str]) -> list[str]:
    return sorted(names, key=lambda n: (next((i for i, c in enumerate(CLASSES) if n.startswith(c)), 9), n))


def _process_cpu(run: Run) -> str | None:
    if not run.process_cpu_s:
        return None
    return " / ".join(f"{run.process_cpu_s.get(n, 0):.1f}" for n in ("runner", "kube-apiserver", "etcd"))


WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY")


def _write_count(run: Run, resource: str | None = None) -> int:
    total = 0
    for key, n in run.api_requests.items():
        verb, res, _code = key.split(" ")
        if verb in WRITE_VERBS and (resource is None or res == resource):
            total += n
    return total


def _writes(run: Run) -> str | None:
    return f"{_write_count(run):,}" if run.api_requests else None


def _write_split(run: Run) -> str | None:
    if not run.api_requests:
        return None
    parts = ("workloads/status", "clusterqueues/status", "localqueues/status", "events")
    return " / ".join(f"{_write_count(run, p):,}" for p in parts)


def _cpu_s(mcpu_ms: float | None) -> float | None:
    return None if mcpu_ms is None else mcpu_ms / 1_000_000


def _status_ratio(run: Run) -> float | None:
    if run.status_mcpu_ms is None or not run.reserved_mcpu_ms:
        return None
    return run.status_mcpu_ms / run.reserved_mcpu_ms


def _watched(run: Run) -> str | None:
    if run.watched is None:
        return None
    status, reserved = run.watched
    return f"{status / 1_000_000:,.0f} / {reserved / 1_000_000:,.0f}"


def _watched_ratio(run: Run) -> float | None:
    if run.watched is None or not run.watched[1]:
        return None
    return run.watched[0] / run.watched[1]


def _paused(run: Run) -> str | None:
    if run.paused_s is None:
        return run.resume_outcome
    return f"{run.paused_s:.2f} ({run.resume_outcome})"


def _per_s(run: Run) -> float | None:
    if not run.ok or not run.throughput_s:
        return None
    return run.expected / run.throughput_s


def _other_load(run: Run) -> str | None:
    if run.machine_cpu_s is None or run.own_cpu_s is None:
        return None
    return f"{run.own_cpu_s:,.0f} / {max(0.0, run.machine_cpu_s - run.own_cpu_s):,.0f}"


def _cores(run: Run) -> float | None:
    if run.cpu_s is None or not run.wall_s:
        return None
    return run.cpu_s / run.wall_s


def _tta(run: Run, name: str) -> str | None:
    if name not in run.tta:
        return None
    return f"{run.tta[name]:.1f} / {run.tta_p90.get(name, float('nan')):.1f}"


def by_size(counts: dict[str, int]) -> dict[str, int]:
    """Counts per workload class summed per size, the class name's first word (tas's
    small-required-rack counts as small)."""
    out = dict.fromkeys(CLASSES, 0)
    for name, count in counts.items():
        size = name.split("-", 1)[0]
        if size in out:
            out[size] += count
    return out


def _evictions(run: Run) -> str | None:
    if not run.evictions:
        return None
    sizes = by_size(run.evictions)
    return " / ".join(f"{sizes[name]:,}" for name in CLASSES)


def _per_class(counts: dict[str, int] | None) -> str | None:
    """small / medium / large, or None when not measured."""
    if counts is None:
        return None
    return " / ".join(f"{counts.get(name, 0):,}" for name in CLASSES)


def _after_burst(run: Run) -> str | None:
    """Evictions the first larges do not account for: the ones a start-up difference leaves alone."""
    if not run.evictions or run.burst_evictions is None:
        return None
    sizes = by_size(run.evictions)
    return " / ".join(f"{max(0, sizes[name] - run.burst_evictions.get(name, 0)):,}" for name in CLASSES)


def _short_holds(run: Run) -> str | None:
    """small / medium / large: evictions (of them short holds)."""
    if run.evicted_holds is None:
        return None
    return " / ".join(f"{run.evicted_holds[n][0]:,} ({run.evicted_holds[n][1]:,})" for n in CLASSES)


def _errors(run: Run) -> str:
    if run.reconciler_errors is None:
        return "not measured (no runner log)"
    return f"{run.reconciler_errors:,} / {run.conflicts:,}"


def _checker(run: Run) -> str | None:
    if run.checker_passed is None:
        return None
    return "pass" if run.checker_passed else "FAIL: " + "; ".join(run.checker_failures[:4])


def _cell(value: Any, digits: int) -> str:
    if value is None or isinstance(value, str):
        return value if isinstance(value, str) else "—"
    return fmt(float(value), digits)


def report(
    runs: list[Run],
    *,
    binaries: Binaries,
    assets: Path,
    artifacts: Path,
    command: str,
    info: dict[str, str],
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
    started: str,
    timeouts: dict[Fraction, str],
) -> str:
    out: list[str] = []
    add = out.append
    add(f"# Kueue's scheduler performance harness: Kueue's minimalkueue and preemption-operator ({started[:10]})")
    add("")
    add(
        f"Kueue {binaries.version}'s own harness (`runner`, `minimalkueue` and `checker`, built from the Go module"
        f" proxy) run against Kueue's `minimalkueue` and against this operator, interleaved (Kueue, ours, Kueue,"
        f" ours, ...), with identical runner flags. Every figure below was measured in the run this file"
        f" describes (started {started})."
    )
    cut = sorted({r.cohorts for r in runs if r.cohorts is not None})
    if cut:
        add("")
        add(
            f"**Cohorts cut to fit the machine:** `--cohorts {cut[0]}` ran at most {cut[0]} cohort(s) per cohort"
            " set of Kueue's config (queues per cohort, quotas and workload templates unchanged); the config's"
            " rangespec is calibrated for all of them."
        )
    add("")
    add(f"Command: `{command}`")
    add("")
    add("| machine | |")
    add("|---|---|")
    add(f"| CPU | {info['cpu']}, {info['cores']} cores |")
    add(f"| memory | {info['memory']} |")
    add(f"| kernel | {info['kernel']} |")
    add(f"| Python | {info['python']} |")
    add(f"| Go | {info['go']} |")
    add(f"| control plane | {asset_versions(assets)} (KUBEBUILDER_ASSETS={assets}); etcd's data on tmpfs |")
    add(
        f"| load average (1, 5, 15 min) | before {', '.join(f'{x:.2f}' for x in load_before)};"
        f" after {', '.join(f'{x:.2f}' for x in load_after)} |"
    )
    add("")
    add("How each run was made:")
    add("")
    add(
        f"- `PROJECT_DIR=<module dir> TMPDIR=/dev/shm/kueue-harness-* KUBEBUILDER_ASSETS=... runner --o=<run folder>"
        f" --crds=<module dir>/config/components/crd/bases --generatorConfig=<scaled config>"
        f" --minimalKueue=<wrapper> --timeout=<T> {' '.join(RUNNER_FLAGS)}` (and `--enableTAS` for the tas"
        f" config), where the module dir is"
        f" `{binaries.module_dir}` and T is {', '.join(f'{v} at {scale_label(k)}' for k, v in timeouts.items())}."
        " The same Kueue CRD bases are installed for both sides (this operator's `PreemptionConfig` kind is"
        " absent, which it treats as empty). No metrics scraping on either side."
    )
    sides = {r.side for r in runs}
    if "kueue" in sides:
        add(f"- Kueue (column *Kueue*): `minimalkueue` {binaries.kueue_binary('kueue')[1]}.")
    if "kueue-stock" in sides:
        add(f"- Kueue (column *Kueue stock*): `minimalkueue` {binaries.kueue_binary('kueue-stock')[1]}.")
    if "kueue-prioritize" in sides:
        add(f"- Kueue (column *Kueue prioritize*): `minimalkueue` {binaries.kueue_binary('kueue-prioritize')[1]}.")
    add(
        "- Both sides start equally: the runner starts the controller and goes straight on to its generator,"
        " so each side runs through a wrapper named `minimalkueue` (`benchmarks/kueue-harness/kueue/minimalkueue`"
        " for Kueue, `.../operator/minimalkueue` for ours, both sourcing `start-ready.sh`) that stops the runner"
        " (SIGSTOP: its generator, recorder and job player; etcd and kube-apiserver keep serving), execs the"
        " controller, and lets the runner go on (SIGCONT) once the controller's own log says its caches are"
        " synced (Kueue: controller-runtime's `Starting workers` for every controller that started its"
        " event sources; ours: `cache synced`),"
        " seen on two polls 50 ms apart for both. The pause counts in the runner's wall and start → recorder"
        " done for both sides; its length and the lead it gave are rows of the table."
    )
    add(
        "- Kueue: `--zap-log-level=2`, logs to files."
        " Ours: `benchmarks/kueue-harness/operator/minimalkueue`, which execs `preemption-operator run"
        f" --no-leader-election --metrics-host=127.0.0.1 --metrics-port=0{''.join(' ' + a for a in binaries.ours_args)}`"
        " with the runner's kubeconfig (log level info; the runner's `--zap-log-level=2` maps to it)."
    )
    for side in sorted({r.side for r in runs if is_ours(r.side) and side_args(r.side)}):
        add(
            f"- {side_name(side)} (column *{side_label(side)}*): the same operator and wrapper with"
            f" `{' '.join(side_args(side))}` added, interleaved with the other sides in the order `--sides` gives."
        )
    for name in sorted({r.config_name for r in runs}, key=lambda n: CONFIGS.index(n) if n in CONFIGS else 99):
        add(f"- {describe_config(binaries, name)}")
    add(
        f"- Checker: {binaries.checker_note or 'Kueue checker'}, run on every run with the rangespec of the run's"
        " config (calibrated by Kueue for the config's full scale on its CI)."
    )
    add(f"- Artifacts of every run (summary.yaml, minimalkueue.stats.yaml, CSVs, logs): `{artifacts}`")
    add("")
    add("Rows: *wall* is the controller's lifetime as the runner measures it (start to exit after SIGINT);")
    add("*start → recorder done* runs from the runner starting the controller to its recorder seeing every")
    add("active ClusterQueue report 0 pending and 0 reserving workloads, and *workloads/s* divides the workload")
    add("count by it; *first workload set → recorder done* starts instead when the runner's generator")
    add("started its first workload set, so neither side's start nor the runner's own setup after it")
    add("resumes is in it;")
    add("*CPU* and *max RSS* are the controller process's rusage; *usage (status)* is the")
    add("checker's number, the integral of ClusterQueue `status.flavorsUsage` over the recording window ÷")
    add("nominal quota; *usage (recomputed)* integrates each workload's request from its last observed")
    add("admission to its observed `Finished` instead; *time to admission* is the runner's (first event to")
    add("the observed `Admitted`, last re-admission after an eviction); *409 conflicts* are the runner's")
    add("reconcile errors that are update conflicts (its Finished / eviction-release writes), counted in its")
    add("log; *SIGINT → exit* is the time between the runner's `Stop the command` and `Cmd ended` log lines")
    add("(for ours also to the operator's own `stopped in` line: the rest is the Python process ending);")
    add("*by each ClusterQueue's first large* counts the victims of the first large workload of every")
    add("queue, from the controller's log (Kueue's `PreemptedWorkload` events, the operator's `preempted`")
    add("lines: decisions, so not capped by what the recorder saw): those larges arrive together ~1.2 s")
    add("into generation, and a controller already admitting")
    add("by then has smalls and mediums running for them to preempt; *controller watching → first workload")
    add("set* says whether it was (without the wrapper's pause the runner starts the controller and the")
    add("generator together, and Kueue's minimalkueue took about a second longer than the operator to")
    add("start its watches); *evictions after the first")
    add("larges* subtracts the one row from the other (decisions from the log against evictions the")
    add("recorder saw, so an approximation); *by a workload of the victim's own class* counts, from the")
    add("same lines, the victims preempted by one of their own class: a class has one priority, so these")
    add("are reclaims within the cohort (a queue back under its nominal quota takes back what another")
    add("queue borrowed), and they follow how full the cohorts are when a lending queue's work ends;")
    add("*evictions the harness's watch saw* counts, from its own Workload watch, the reservations that")
    add("ended with the admission cleared, and in brackets those held under 0.3 s: a borrower admitted in")
    add("one cycle whose lender took the quota back in a next one (Kueue admits a borrower whenever the")
    add("lender can take the quota back later, and the lender does as soon as its next workload is its")
    add("head: their number follows how often one cycle finds a lender's backlog beside borrowers);")
    add("*runner paused* is how long the wrapper held the runner stopped for the controller's start, and")
    add("*ready → first workload set* the lead that gave (both from the wrapper's lines in the controller's")
    add("log against the runner's `generate workload group` line: positive and alike on both sides means")
    add("both started equally; a runner resumed within about 2 s of the controller's start, as ours")
    add("usually is, at times takes 1-2 s over one of its first creations, the ResourceFlavor or a queue,")
    add("which shows here as a longer lead; resumed later, as Kueue is, it has not been seen to (the")
    add("runner installs its CRDs just before it starts the controller; the cause is not pinned down));")
    add("*status usage integral* is the recorder's integral of the ClusterQueues'")
    add("`status.flavorsUsage` (cqStates.csv, summed over the ClusterQueues: what the checker's usage divides),")
    add("*reservations integral* each finished workload's request times its observed admission → `Finished`")
    add("(wlStates.csv; the runner keeps only the last admission and no eviction times, so holds that ended")
    add("in an eviction are left out: a lower bound); their ratio well under 1 says the status lags the")
    add("reservations (or shows quota released before the workloads report `Finished`), while a ratio")
    add("near 1 with a low usage says the workloads themselves held less quota;")
    add("*admitted → Finished* is each class's mean time from the workload's admission to its `Finished`, both")
    add("as the runner saw them: its runtime plus the runner's lag (the runner, kube-apiserver and etcd share")
    add("the cores with the controller: what one side costs them shows up here, and as quota held idle);")
    add("*CPU-s of runner / kube-apiserver / etcd* are those processes' own CPU times (their last /proc")
    add("reading); *API writes* are the kube-apiserver's own `apiserver_request_total` (every client: the")
    add("runner's creations and `Finished` writes too), read from its /metrics every few seconds (the last")
    add("reading, so the final seconds may be missing);")
    add("the last row compares the CPU time of the run's own processes (runner, etcd, kube-apiserver,")
    add("controller) with everything else the machine ran meanwhile (/proc/stat): a large second number")
    add("means the run shared the 2 cores with other work.")
    add("")
    groups: list[tuple[str, Fraction, int | None]] = []
    for r in runs:
        if (r.config_name, r.scale, r.cohorts) not in groups:
            groups.append((r.config_name, r.scale, r.cohorts))
    for config_name, scale, cohorts in groups:
        these = [r for r in runs if (r.config_name, r.scale, r.cohorts) == (config_name, scale, cohorts)]
        expected = these[0].expected
        cut_text = f", at most {cohorts} cohort(s) per cohort set" if cohorts is not None else ""
        add(f"## {config_name}, scale {scale_label(scale)}{cut_text}: {expected:,} workloads")
        add("")
        header = " | ".join(f"{side_label(r.side)} #{r.index}" for r in these)
        add(f"| measure | {header} |")
        add("|---|" + "---:|" * len(these))
        classes: list[str] = []
        for r in these:
            classes += [n for n in r.tta if n not in classes]
        size = {name: i for i, name in enumerate(CLASSES)}
        classes.sort(key=lambda n: (size.get(n.split("-", 1)[0], len(CLASSES)), n))
        for title, get, digits in rows(classes or list(CLASSES)):
            add(f"| {title} | " + " | ".join(_cell(get(r), digits) for r in these) + " |")
        add("")
        add("Operator revision per run (`git log -1`):")
        add("")
        for r in these:
            if is_ours(r.side):
                add(f"- {side_label(r.side)} #{r.index} ({r.started}): {r.revision}")
        add("")
        pairs = sorted({r.index for r in these})
        present_sides = {r.side for r in these}
        references = ["kueue" if "kueue" in present_sides else "kueue-stock"]
        references += ["kueue-prioritize"] if "kueue-prioritize" in present_sides else []
        # One table per side of ours (`ours`, then any `ours-writesN`) and Kueue reference, each
        # against the same Kueue runs.
        for ours_side, reference in (
            (o, ref) for o in dict.fromkeys(r.side for r in these if is_ours(r.side)) for ref in references
        ):
            add(
                f"{side_label(ours_side)} ÷ Kueue (the *{SIDE_LABELS[reference]}* column) per interleaved pair"
                " (below 1 is better for"
            )
            add("wall, time, CPU, RSS; above 1 for workloads/s and usage):")
            add("")
            add("| ratio | " + " | ".join(f"pair {i}" for i in pairs) + " | mean |")
            add("|---|" + "---:|" * (len(pairs) + 1))
            for title, get in RATIO_ROWS:
                values = []
                for i in pairs:
                    k = next((r for r in these if r.index == i and r.side == reference), None)
                    o = next((r for r in these if r.index == i and r.side == ours_side), None)
                    values.append(ratio(get(o), get(k)) if k and o else None)
                present = [v for v in values if v is not None]
                mean = sum(present) / len(present) if present else None
                add(f"| {title} | " + " | ".join(fmt(v, 2) for v in values) + f" | {fmt(mean, 2)} |")
            add("")
        for r in these:
            if r.profile:
                add(f"CPU profile of {side_name(r.side)} #{r.index} (with the profiler's overhead: not a timed run):")
                add("")
                add("```")
                out.extend(r.profile.splitlines())
                add("```")
                add("")
        troubled = [r for r in these if r.problems]
        if troubled:
            add("Problems seen in these runs:")
            add("")
            for r in troubled:
                for problem in r.problems:
                    add(f"- {side_name(r.side)} #{r.index}: {problem}")
            add("")
    return "\n".join(out) + "\n"


# ---- main ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--scale", default="1/10", help="comma-separated: 1/10, 1/3, full, tiny (1/100), any 1/N")
    parser.add_argument(
        "--pairs", default="2", help="interleaved Kueue/ours pairs per scale; one number, or one per scale (3,2,1)"
    )
    parser.add_argument("--max-rss-gib", type=float, default=8.0, help="stop a run whose controller grows past this")
    parser.add_argument(
        "--report-from", type=Path, help="only rewrite the report from an artifacts folder's results.json"
    )
    parser.add_argument(
        "--timeout", help="the runner's recording timeout, Go syntax (default: 10m at 1/10, 15m at 1/3, 30m full)"
    )
    parser.add_argument(
        "--output", type=Path, default=DEFAULT_OUTPUT, help=f"the report (default {DEFAULT_OUTPUT.relative_to(ROOT)})"
    )
    parser.add_argument(
        "--artifacts", type=Path, help="where runs keep their files (default: a new folder under the cache)"
    )
    parser.add_argument(
        "--config",
        default="baseline",
        help="comma-separated Kueue configs: baseline, large-scale, tas (configs/<name>/generator.yaml and rangespec.yaml)",
    )
    parser.add_argument(
        "--cohorts", type=int, help="at most this many cohorts per cohort set (to fit large-scale on the machine)"
    )
    parser.add_argument(
        "--sides",
        default="kueue,kueue-stock,ours",
        help="kueue (client limit lifted, --kueue-qps), kueue-stock (as built), ours; default all three, interleaved;"
        f" also kueue-prioritize: the kueue build with {PRIORITIZE_GATE} on (the engine's default order),"
        f" {OURS_KUEUE_ORDER}: the operator with it off (Kueue's default order), and"
        " ours-writesN: the operator with N status writes in flight (--max-inflight-writes), to compare"
        " two settings in one run",
    )
    parser.add_argument("--runner-log-level", help="the runner's own --zap-log-level (default: Kueue's, very verbose)")
    parser.add_argument(
        "--no-quota-watch",
        action="store_true",
        help="without the harness's own watches of ClusterQueues and Workloads (their row stays empty):"
        " to see what the watches cost the machine",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="profile the controllers (the runner's --withCPUProfile: pprof for Kueue, cProfile for ours) and"
        " show the top of each profile in the report; the profiler slows them down, so such runs are not timed runs",
    )
    parser.add_argument("--build-only", action="store_true", help="build or reuse the binaries, then stop")
    parser.add_argument(
        "--ours-qps",
        type=float,
        help="analysis: run the operator with this client-side limit (--kube-api-qps; burst twice it)",
    )
    parser.add_argument(
        "--ours-writes",
        type=int,
        help="analysis: run the operator with this many status writes in flight (--max-inflight-writes)",
    )
    parser.add_argument(
        "--kueue-qps",
        type=int,
        default=DEFAULT_KUEUE_QPS,
        help=f"the *Kueue* side's minimalkueue rebuilt with this client QPS (burst twice it) instead of its 50"
        f" (default {DEFAULT_KUEUE_QPS}; 0: the stock build, and no separate kueue-stock side)",
    )
    args = parser.parse_args(argv)

    binaries = build()
    _log(
        f"runner {binaries.runner}, minimalkueue {binaries.minimalkueue}, checker {binaries.checker or '(reimplemented)'}"
    )
    _log(f"module dir {binaries.module_dir}")
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    if args.kueue_qps and not args.report_from:
        binaries = lift_client_limit(binaries, args.kueue_qps)
    if "kueue-prioritize" in sides and not args.report_from:
        binaries = with_prioritized(binaries, args.kueue_qps)
    ours_args: list[str] = []
    if args.ours_qps:
        ours_args += [f"--kube-api-qps={args.ours_qps:g}", f"--kube-api-burst={max(1, round(2 * args.ours_qps))}"]
    if args.ours_writes:
        ours_args.append(f"--max-inflight-writes={args.ours_writes}")
    if ours_args:
        binaries = dataclasses.replace(binaries, ours_args=tuple(ours_args))
    if args.build_only:
        return 0
    scales = [parse_scale(s) for s in args.scale.split(",") if s.strip()]
    configs = [c.strip() for c in args.config.split(",") if c.strip()]
    if not configs or any(c not in CONFIGS for c in configs):
        parser.error(f"--config takes {', '.join(CONFIGS)}")
    if args.cohorts is not None and args.cohorts < 1:
        parser.error("--cohorts must be at least 1")
    if not args.kueue_qps and "kueue-stock" in sides:
        sides.remove("kueue-stock")  # the kueue side is the stock build then
    pairs = [int(p) for p in str(args.pairs).split(",") if p.strip()]
    if len(pairs) == 1:
        pairs *= len(scales)
    unknown = [s for s in sides if s not in SIDES and not is_ours(s)]
    if not scales or unknown or len(pairs) != len(scales) or min(pairs) < 1:
        parser.error(
            f"--scale needs a scale; --sides takes kueue, kueue-stock, kueue-prioritize, ours, {OURS_KUEUE_ORDER}"
            " and ours-writesN;"
            " --pairs one number or one per scale"
        )
    assets = find_assets()
    if args.report_from:
        return rewrite_report(binaries, assets, args.report_from.resolve(), args.output)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    artifacts = (args.artifacts or cache_root() / "runs" / stamp).resolve()
    artifacts.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    command = "python benchmarks/kueue-harness/harness.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])
    )
    info = machine()
    load_before = os.getloadavg()
    timeouts = {s: args.timeout or DEFAULT_TIMEOUTS.get(s, "30m") for s in scales}
    runs: list[Run] = []
    results = artifacts / "results.json"
    meta = {"command": command, "started": started, "load_before": load_before, "info": info}
    meta["kueue_qps"] = args.kueue_qps
    meta["timeouts"] = {scale_label(k): v for k, v in timeouts.items()}
    for config_name, (scale, count) in ((c, sc) for c in configs for sc in zip(scales, pairs, strict=True)):
        config_path, config = write_config(binaries, scale, artifacts, config_name, args.cohorts)
        for index in range(1, count + 1):
            for side in sides:
                folder = artifacts / config_label(config_name, scale, args.cohorts) / f"{index}-{side}"
                run = run_once(
                    binaries,
                    side,
                    scale,
                    index,
                    config_path,
                    config,
                    folder,
                    assets=assets,
                    timeout=timeouts[scale],
                    runner_log_level=args.runner_log_level,
                    profile=args.profile,
                    quota_watch=not args.no_quota_watch,
                    max_rss_gib=args.max_rss_gib,
                    config_name=config_name,
                    cohorts=args.cohorts,
                )
                runs.append(run)
                _log(
                    f"  wall {fmt(run.wall_s)} s, start→done {fmt(run.throughput_s)} s, CPU {fmt(run.cpu_s)} s,"
                    f" SIGINT→exit {fmt(run.sigint_exit_s, 2)} s, usage {fmt(run.usage_status)} %,"
                    f" status÷reservations {fmt(_status_ratio(run), 2)} (own watches {fmt(_watched_ratio(run), 3)}),"
                    f" paused {_paused(run)},"
                    f" ready→first set {fmt(run.ready_lead_s, 2)} s,"
                    f" checker {_checker(run)}; problems: {run.problems or 'none'}"
                )
                meta["runs"] = [_as_json(r) for r in runs]
                results.write_text(json.dumps(meta, indent=1, default=str))
    meta["load_after"] = load_after = os.getloadavg()
    results.write_text(json.dumps(meta, indent=1, default=str))
    text = report(
        runs,
        binaries=binaries,
        assets=assets,
        artifacts=artifacts,
        command=command,
        info=info,
        load_before=load_before,
        load_after=load_after,
        started=started,
        timeouts=timeouts,
    )
    (artifacts / "report.md").write_text(text)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    _log(f"report: {args.output} (artifacts: {artifacts})")
    return 0 if all(r.ok for r in runs) else 1


KEPT = (
    "side",
    "index",
    "expected",
    "command",
    "revision",
    "started",
    "runner_exit",
    "runner_seconds",
    "machine_cpu_s",
    "own_cpu_s",
)


def rewrite_report(binaries: Binaries, assets: Path, artifacts: Path, output: Path) -> int:
    """The report again from a (possibly interrupted) invocation's artifacts."""
    meta = json.loads((artifacts / "results.json").read_text())
    # Before the lifted limit was the default, the kueue side was stock unless the command said so.
    qps = meta.get("kueue_qps")
    if qps is None:
        given = re.search(r"--kueue-qps[= ](\d+)", meta["command"])
        qps = int(given.group(1)) if given else 0
    binaries = dataclasses.replace(
        binaries,
        lifted=variant_path(binaries.version, qps) if qps else None,
        lifted_note=lifted_note(qps) if qps else "",
        prioritized=variant_path(binaries.version, qps, (PRIORITIZE_GATE,)),
        prioritized_note=prioritized_note(qps),
    )
    runs = []
    for data in meta["runs"]:
        run = Run(data["side"], parse_scale(data["scale"]), data["index"], Path(data["folder"]), data["expected"])
        # Artifacts from before --config: baseline, in <artifacts>/<scale>/, config generator-<scale>.yaml.
        run.config_name, run.cohorts = data.get("config_name", "baseline"), data.get("cohorts")
        for key in KEPT:
            setattr(run, key, data[key])
        for key in ("process_cpu_s", "api_requests"):  # absent in artifacts from before the probe
            setattr(run, key, data.get(key) or {})
        watched = data.get("watched")  # absent in artifacts from before the harness's own watches
        run.watched = tuple(watched) if watched else None  # type: ignore[assignment]
        run.load_before, run.load_after = tuple(data["load_before"]), tuple(data["load_after"])
        run.harness_timeout = data["harness_timeout"]
        run.problems = [
            p
            for p in data["problems"]
            if p.startswith(("the runner was still", "the runner ignored", "the controller's RSS"))
        ]
        names = [
            f"generator-{config_label(run.config_name, run.scale, run.cohorts)}.yaml",
            f"generator-{run.folder.parent.name}.yaml",
        ]
        config_file = next(artifacts / n for n in names if (artifacts / n).is_file())
        config = yaml.safe_load(config_file.read_text())
        collect(binaries, run, config)
        runs.append(run)
    text = report(
        runs,
        binaries=binaries,
        assets=assets,
        artifacts=artifacts,
        command=meta["command"],
        info=meta["info"],
        load_before=tuple(meta["load_before"]),
        load_after=tuple(meta.get("load_after") or os.getloadavg()),
        started=meta["started"],
        timeouts={parse_scale(k): v for k, v in meta["timeouts"].items()},
    )
    # Say so: the figures are that run's, the report code (and its derived rows) may be newer.
    ran = f"Command: `{meta['command']}`"
    text = text.replace(
        ran,
        f"{ran}; this report was rendered again from that run's artifacts with"
        f" `python benchmarks/kueue-harness/harness.py --report-from <artifacts folder>` (same measurements).",
        1,
    )
    output.write_text(text)
    _log(f"report: {output} (from {artifacts})")
    return 0


def _as_json(run: Run) -> dict[str, Any]:
    data = {k: v for k, v in vars(run).items() if k not in ("summary",)}
    data["scale"] = scale_label(run.scale)
    data["folder"] = str(run.folder)
    return data


if __name__ == "__main__":
    sys.exit(main())
