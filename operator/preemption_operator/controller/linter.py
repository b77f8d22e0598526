"""The checks of `preemption-operator lint`, run by the operator on the setup its cache holds
after each configuration change; queue_status turns the result into PreemptionConfig conditions
and the loop posts the flaps as Warning Events.

The flapping analysis is CPU-bound and may take seconds, so it never runs on the event loop nor in
this process (it would hold the GIL against the scheduler): one child process (lint_child.py),
started on first use, gets the setup as wire dicts and parses it itself. Changes are debounced, at most one
analysis is in flight (changes during it lead to one more run, on the newest setup), and a setup
whose fingerprint was analysed already is not analysed again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..api import kinds
from ..api.objects import parse_object
from ..api.v1alpha1 import PREEMPTION_CONFIG_ANNOTATION
from ..engine.cache import Cache
from ..engine.fair_sharing import OFF, FairSharing
from ..engine.notices import Notice
from ..lint import Finding, Proof, lint
from ..lint.model import NOW
from .metrics import Metrics
from .wakeups import loop_time

log = logging.getLogger(__name__)

FLAP_CODES = ("FlappingPair", "FlappingCycle")
DEBOUNCE_SECONDS = 1.0
"""Quiet time after the last change before analysing: `kubectl apply -f dir/` is one run."""
MAX_DELAY_SECONDS = 10.0
"""A setup that never stops changing is still analysed this long after its first change."""
TIMEOUT_SECONDS = 300.0


@dataclass(frozen=True)
class LintResult:
    """One analysis of the whole setup, as the child returns it (plain data, picklable)."""

    findings: tuple[Finding, ...] = ()
    proof: Proof | None = None
    trees: Mapping[str, str] = field(default_factory=dict)
    """ClusterQueue -> the root of its cohort tree (`Cohort/x`, or `ClusterQueue/y` alone)."""
    users: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """PreemptionConfig -> the ClusterQueues whose annotation names it."""
    generations: Mapping[str, int | None] = field(default_factory=dict)
    """PreemptionConfig -> the generation that was analysed."""
    error: str | None = None
    """Why the analysis did not complete (then nothing else is known)."""

    @property
    def flaps(self) -> list[Finding]:
        return [f for f in self.findings if f.code in FLAP_CODES]

    @property
    def outcome(self) -> str:
        """The metric's label: failed, flapping, flap_free or not_proven."""
        if self.error is not None:
            return "failed"
        if self.flaps:
            return "flapping"
        return "flap_free" if self.proof is not None and self.proof.flap_free else "not_proven"


# -- pure: what is analysed, and what comes of it ------------------------------------------------


def setup_wires(objects: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The setup objects of a cache's `objects`, as wire dicts without status or bookkeeping
    metadata, in a fixed order: what the child parses and what the fingerprint hashes."""
    out = []
    for kind in kinds.SETUP:
        for _, obj in sorted(objects.get(kind, {}).items()):
            wire = obj.to_wire()
            wire.pop("status", None)
            meta = wire.get("metadata") or {}
            wire["metadata"] = {
                k: meta[k] for k in ("name", "generation", "labels", "annotations", "creationTimestamp") if k in meta
            }
            out.append(wire)
    return out


def fingerprint(wires: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(wires, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def generations(wires: list[dict[str, Any]]) -> dict[str, int | None]:
    return {
        w["metadata"]["name"]: w["metadata"].get("generation") for w in wires if w.get("kind") == "PreemptionConfig"
    }


def analyse_setup(wires: list[dict[str, Any]], fair_sharing: FairSharing = OFF) -> LintResult:
    """Runs in the child: parse, lint (with the operator's fair sharing), and the facts
    queue_status needs to place each verdict."""
    objects = [parse_object(w) for w in wires]
    report = lint(objects, fair_sharing=fair_sharing, judge_usability=False)
    cache = Cache()
    cache.load(objects)
    trees = {}
    for name, cq in cache.snapshot(NOW).cluster_queues.items():
        root = cq.node.root()
        trees[name] = f"{'ClusterQueue' if root.is_cluster_queue else 'Cohort'}/{root.name}"
    users: dict[str, list[str]] = {}
    for obj in objects:
        named = obj.annotation(PREEMPTION_CONFIG_ANNOTATION) if obj.kind == "ClusterQueue" else None
        if named:
            users.setdefault(named, []).append(obj.metadata.name)
    return LintResult(
        findings=tuple(report.findings),
        proof=report.proof,
        trees=trees,
        users={name: tuple(sorted(queues)) for name, queues in users.items()},
        generations=generations(wires),
    )


def lint_notices(result: LintResult | None) -> list[Notice]:
    """A Warning per flap on each PreemptionConfig it involves; a flap through classic policies
    alone involves none, and goes on its ClusterQueues instead."""
    notices = []
    for flap in result.flaps if result is not None else []:
        configs = [ref.split("/", 1)[1] for ref in flap.objects if ref.startswith("PreemptionConfig/")]
        queues = [ref.split("/", 1)[1] for ref in flap.objects if ref.startswith("ClusterQueue/")]
        targets = [("PreemptionConfig", name) for name in configs] or [("ClusterQueue", name) for name in queues]
        notices += [Notice(kind, name, flap.code, f"lint {flap.code}: {flap.message}") for kind, name in targets]
    return notices


# -- the child process ---------------------------------------------------------------------------


def result_to_wire(result: LintResult) -> dict[str, Any]:
    return {
        "findings": [{**asdict(f), "objects": list(f.objects)} for f in result.findings],
        "proof": result.proof.to_dict() if result.proof is not None else None,
        "trees": dict(result.trees),
        "users": {name: list(queues) for name, queues in result.users.items()},
        "generations": dict(result.generations),
        "error": result.error,
    }


def result_from_wire(wire: dict[str, Any]) -> LintResult:
    return LintResult(
        findings=tuple(Finding(**{**f, "objects": tuple(f["objects"])}) for f in wire["findings"]),
        proof=Proof.from_dict(wire["proof"]) if wire["proof"] is not None else None,
        trees=wire["trees"],
        users={name: tuple(queues) for name, queues in wire["users"].items()},
        generations=wire["generations"],
        error=wire["error"],
    )


CHILD_MODULE = "preemption_operator.controller.lint_child"
ANSWER_LIMIT = 256 * 1024 * 1024
"""The longest answer line read back (asyncio's default, 64 KiB, is too short for many findings)."""


def child_arguments(fair_sharing: FairSharing) -> list[str]:
    """How the child learns the operator's fair sharing (fixed for the operator's life)."""
    return ["--fair-sharing-strategies", ",".join(fair_sharing.strategies)] if fair_sharing.enabled else []


class ChildProcess:
    """One worker process (`python -m preemption_operator.controller.lint_child`), started on first
    use: one JSON line of setup objects in, one JSON line of LintResult out. `stop` kills it at
    once: an analysis in flight is abandoned, shutdown never waits for it."""

    def __init__(self, command: list[str] | None = None, fair_sharing: FairSharing = OFF) -> None:
        self.command = command or [sys.executable, "-m", CHILD_MODULE, *child_arguments(fair_sharing)]
        self.process: asyncio.subprocess.Process | None = None

    async def __call__(self, wires: list[dict[str, Any]]) -> LintResult:
        proc = self.process
        if proc is None or proc.returncode is not None:
            proc = self.process = await asyncio.create_subprocess_exec(
                *self.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
                limit=ANSWER_LIMIT,
                start_new_session=True,  # a terminal's Ctrl-C is the parent's to handle
            )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps(wires, separators=(",", ":")).encode() + b"\n")
            await proc.stdin.drain()
            line = await proc.stdout.readline()
        except BaseException:
            self.stop()  # cancelled or broken mid-request: its answer would be out of step
            raise
        if not line:
            self.stop()
            raise RuntimeError("the lint process exited")
        return result_from_wire(json.loads(line))

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()


# -- the runner ----------------------------------------------------------------------------------


class Linter:
    """Analyses the setup after configuration changes, while this replica leads. `result` is the
    last analysis (kept across terms: a new leader re-analyses only a setup that changed)."""

    def __init__(
        self,
        setup: Callable[[], list[dict[str, Any]]],
        leading: Callable[[], bool],
        metrics: Metrics,
        on_result: Callable[[], None],
        *,
        analyse: Callable[[list[dict[str, Any]]], Awaitable[LintResult]] | None = None,
        fair_sharing: FairSharing = OFF,
        debounce_seconds: float = DEBOUNCE_SECONDS,
        max_delay_seconds: float = MAX_DELAY_SECONDS,
        timeout_seconds: float = TIMEOUT_SECONDS,
    ) -> None:
        self.setup = setup
        self.leading = leading
        self.metrics = metrics
        self.on_result = on_result
        self._child = ChildProcess(fair_sharing=fair_sharing)  # starts a process only when first called
        self.analyse = analyse or self._child
        self.debounce_seconds = debounce_seconds
        self.max_delay_seconds = max_delay_seconds
        self.timeout_seconds = timeout_seconds
        self.result: LintResult | None = None
        self.notices: list[Notice] = []
        self.runs = 0
        """Analyses started (an unchanged setup starts none)."""
        self._due = asyncio.Event()
        self.analysed: str | None = None
        """The fingerprint of the setup `result` is about (None after a failure: retried on the next change)."""

    def changed(self) -> None:
        """A setup object changed (or this replica took the lead): analyse once things are quiet."""
        self._due.set()

    async def run(self) -> None:
        try:
            while True:
                await self._due.wait()
                await self._quiet()
                if self.leading():  # a new term calls `changed`
                    await self.lint_once()
        finally:
            self.close()

    def close(self) -> None:
        self._child.stop()

    async def _quiet(self) -> None:
        """Returns once no change came for `debounce_seconds`, or `max_delay_seconds` after the first."""
        deadline = loop_time() + self.max_delay_seconds
        while True:
            self._due.clear()
            await asyncio.sleep(max(0.0, min(self.debounce_seconds, deadline - loop_time())))
            if not self._due.is_set() or loop_time() >= deadline:
                self._due.clear()  # what came meanwhile is in the setup read next
                return

    async def lint_once(self) -> LintResult | None:
        """Analyses the current setup unless it was analysed already; None then."""
        wires = self.setup()
        seen = fingerprint(wires)
        if seen == self.analysed:
            return None
        self.runs += 1
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout_seconds):
                result = await self.analyse(wires)
            self.analysed = seen
        except TimeoutError:
            self.close()  # the child may be stuck: a fresh one next time
            result = self._failed(wires, f"the analysis took longer than {self.timeout_seconds:g}s")
        except Exception as exc:  # a bug or a dead child must never stop scheduling
            log.exception("lint of the setup failed")
            result = self._failed(wires, f"the analysis failed: {exc!r}")
        took = time.perf_counter() - started
        self.metrics.lint_run(result.outcome, took, [f.code for f in result.findings])
        log.info(
            "lint of the setup: %s (%d finding(s), %.2fs)", result.outcome.replace("_", " "), len(result.findings), took
        )
        self.result = result
        self.notices = lint_notices(result)
        self.on_result()
        return result

    def _failed(self, wires: list[dict[str, Any]], why: str) -> LintResult:
        self.analysed = None
        return LintResult(generations=generations(wires), error=why)
