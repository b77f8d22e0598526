"""Kueue's own scheduler run over states the tests describe, for the differential test of the
engine's decisions (tests/unit/test_same_decisions_as_kueue.py), and the engine over the same
states, answered in the same shape.

`tests/kueue_replay/replay_test.go` (ours) is compiled into a copy of Kueue's `pkg/scheduler`
with `go test -c`: it must sit in that package to call Kueue's scheduling cycle, which Kueue does
not export. The copy and the binary live in the project's cache, built once per Kueue version and
driver; nothing of Kueue's enters the repository.

    python -m preemption_operator.testing.kueue_replay    (builds or finds it; prints its path)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from ..api.objects import parse_object
from ..engine.cache import Cache
from ..engine.engine import Engine
from ..engine.fair_sharing import FairSharing
from ..engine.scheduler import QueueState
from . import go_modules

KUEUE = ("sigs.k8s.io/kueue", "v0.19.2")
DRIVER = Path(__file__).resolve().parents[3] / "tests" / "kueue_replay" / "replay_test.go"


def _root() -> Path:
    return go_modules.cache_root().parent / "kueue-replay"


def binary_path(driver: Path = DRIVER) -> Path:
    digest = hashlib.sha256(driver.read_bytes()).hexdigest()[:12]
    return _root() / f"{KUEUE[1]}-{digest}" / "replay.test"


def build(driver: Path = DRIVER) -> Path:
    """The replay binary, built once (about 20 s with Kueue's packages in Go's build cache, a few
    minutes cold) and found in the cache afterwards. Raises ModuleUnavailable when it cannot be."""
    binary = binary_path(driver)
    if os.access(binary, os.X_OK):
        return binary
    go = go_modules.go_binary("build Kueue's scheduler for the replay")
    source = go_modules.module_dir(*KUEUE)
    binary.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="src-", dir=binary.parent))
    try:
        copy = staging / "kueue"
        shutil.copytree(source, copy)
        for path in [copy, *copy.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)  # the module cache's files are read-only
        package = copy / "pkg" / "scheduler"
        for test in package.glob("*_test.go"):
            test.unlink()  # Kueue's own tests: not needed, and slow to compile
        shutil.copyfile(driver, package / "replay_test.go")
        result = subprocess.run(
            [go, "test", "-c", "-o", str(staging / "replay.test"), "./pkg/scheduler"],
            capture_output=True,
            text=True,
            cwd=copy,
            env={**os.environ, "GOFLAGS": "-mod=mod"},
            timeout=1800,
        )
        if result.returncode != 0 or not (staging / "replay.test").is_file():
            raise go_modules.ModuleUnavailable(
                f"building the replay of {KUEUE[0]}@{KUEUE[1]} failed: {(result.stderr or result.stdout).strip()}"
            )
        (staging / "replay.test").replace(binary)  # one rename: a half-built binary is never found
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for older in _root().glob(f"{KUEUE[1]}-*"):
        if older != binary.parent:
            shutil.rmtree(older, ignore_errors=True)  # built from an earlier driver: ~75 MB each
    return binary


def replay(
    binary: Path,
    states: Sequence[tuple[str, Sequence[dict[str, Any]]]],
    cycles: int = 1,
    *,
    fair_sharing: bool = False,
    prioritize_preemptors: bool = True,
) -> list[dict[str, Any]]:
    """`cycles` consecutive cycles of Kueue's scheduler (with fair sharing, its default
    strategies; with its PrioritizePreemptorWorkloads gate as `prioritize_preemptors` says) over
    each (now, objects) state, nothing answered in between; per state, what they `admitted`
    ("ns/name" -> ClusterQueue) and `preempted` ("ns/name" -> the preemptor's "ns/name")."""
    with tempfile.TemporaryDirectory(prefix="kueue-replay-") as folder:
        given, answer = Path(folder) / "states.json", Path(folder) / "results.json"
        given.write_text(
            json.dumps(
                [
                    {
                        "now": now,
                        "objects": list(objects),
                        "cycles": cycles,
                        "fairSharing": fair_sharing,
                        "prioritizePreemptors": prioritize_preemptors,
                    }
                    for now, objects in states
                ]
            )
        )
        result = subprocess.run(
            [str(binary), "-test.run", "^TestReplay$"],
            capture_output=True,
            text=True,
            env={**os.environ, "REPLAY_IN": str(given), "REPLAY_OUT": str(answer)},
            timeout=600,
        )
        if result.returncode != 0 or not answer.is_file():
            raise RuntimeError(f"Kueue's replay failed: {(result.stdout + result.stderr).strip()[-2000:]}")
        results: list[dict[str, Any]] = json.loads(answer.read_text())
        return results


def engine_decisions(
    now: datetime,
    objects: Sequence[dict[str, Any]],
    cycles: int = 1,
    *,
    fair_sharing: bool = False,
    prioritize_preemptors: bool = True,
) -> dict[str, dict[str, str]]:
    """The engine over one state, as `replay` answers for Kueue: `cycles` consecutive cycles with
    nothing answered in between (its rounds: the operator decides up to 64 of Kueue's cycles in
    one pass)."""
    cache = Cache(FairSharing(enabled=fair_sharing), prioritize_preemptors=prioritize_preemptors)
    cache.load([parse_object(dict(obj)) for obj in objects])
    result = Engine(rounds=cycles).cycle(cache.snapshot(now), QueueState())
    return {
        "admitted": {a.workload.key: a.cluster_queue for a in result.admitted},
        # Kueue issues no eviction for a target already evicted: the replay cannot see it.
        "preempted": {p.victim.key: p.preemptor.key for p in result.preempted if not p.victim.evicted},
    }


if __name__ == "__main__":
    try:
        print(build())
    except go_modules.ModuleUnavailable as exc:
        print(f"kueue-replay: {exc}", file=sys.stderr)
        sys.exit(1)
