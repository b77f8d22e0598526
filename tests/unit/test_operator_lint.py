"""Issue 16 item 3: the operator runs lint on configuration changes and shows the result (a
FlapFree and a Lint condition on each PreemptionConfig, a Warning Event per flap).

The conditions are computed from a LintResult (pure); the runner (debounce, coalescing, the
fingerprint, leadership, failures) is driven with a fake analysis; one test runs the real child."""

from __future__ import annotations

import asyncio
import copy
import json
import signal
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from builders import cluster_queue
from preemption_operator.api.objects import parse_object
from preemption_operator.controller import lint_child, queue_status
from preemption_operator.controller.linter import (
    ChildProcess,
    Linter,
    LintResult,
    analyse_setup,
    fingerprint,
    lint_notices,
    result_from_wire,
    result_to_wire,
    setup_wires,
)
from preemption_operator.controller.metrics import Metrics
from preemption_operator.engine.cache import Cache
from preemption_operator.lint import Finding, Proof, Skip
from preemption_operator.lint.proof import Counts
from unit.test_write_path import Harness

EXAMPLE = Path(__file__).parents[2] / "examples" / "flapping-rules"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
CONFIG = "team-priority"
CONFIG_PATH = f"/apis/kueue.x-k8s.io/v1alpha1/preemptionconfigs/{CONFIG}"
Obj = dict[str, Any]


def example(*, fixed: bool = False) -> list[Obj]:
    docs = [d for path in sorted(EXAMPLE.glob("*.yaml")) for d in yaml.safe_load_all(path.read_text()) if d]
    for d in docs:
        d["metadata"].setdefault("resourceVersion", "1")
        d["metadata"].setdefault("generation", 1)
        if fixed and d["kind"] == "PreemptionConfig":
            d["spec"]["rules"][0]["candidateSelectors"][0]["priority"]["comparison"] = "LessThan"
            d["metadata"]["generation"] = 2
    return docs


def wires_of(docs: list[Obj]) -> list[Obj]:
    cache = Cache()
    cache.load(parse_object(copy.deepcopy(d)) for d in docs)
    return setup_wires(cache.objects)


def config_of(docs: list[Obj]) -> Any:
    return parse_object(next(copy.deepcopy(d) for d in docs if d["kind"] == "PreemptionConfig"))


def condition(status: Obj, kind: str) -> Obj:
    return next(c for c in status["conditions"] if c["type"] == kind)


# -- the conditions (pure) ---------------------------------------------------------------------


def test_a_flapping_config_is_false_with_the_pair_and_its_fix_true_with_what_was_quantified() -> None:
    flapping = analyse_setup(wires_of(example()))
    status = queue_status.preemption_config_status(
        config_of(example()), ["production", "research"], None, NOW, flapping
    )
    flap = condition(status, "FlapFree")
    assert (flap["status"], flap["reason"], flap["observedGeneration"]) == ("False", "FlappingPair", 1)
    assert "A: a workload of ClusterQueue production (priority 100; class batch)" in flap["message"]
    assert "evicts" in flap["message"] and "1 more" in flap["message"]
    lint = condition(status, "Lint")
    assert (lint["status"], lint["reason"]) == ("False", "Errors")
    assert lint["message"].startswith("2 error(s), 0 warning(s): 2 FlappingPair (see FlapFree)")

    fixed = analyse_setup(wires_of(example(fixed=True)))
    status = queue_status.preemption_config_status(config_of(example(fixed=True)), [], status, NOW, fixed)
    flap = condition(status, "FlapFree")
    assert (flap["status"], flap["reason"], flap["observedGeneration"]) == ("True", "NoFlapFound", 2)
    assert flap["message"].startswith("ClusterQueue(s) production, research: no two or three workloads")
    assert (
        "WorkloadPriorityClass/batch" in flap["message"] and "; quota: the contested capacity full" in flap["message"]
    )
    assert condition(status, "Lint")["status"] == "True"


def test_before_the_first_analysis_it_is_analysing_and_a_verdict_stays_until_the_next() -> None:
    config = config_of(example())
    status = queue_status.preemption_config_status(config, [], None, NOW)
    assert (condition(status, "FlapFree")["status"], condition(status, "FlapFree")["reason"]) == (
        "Unknown",
        "Analysing",
    )
    verdict = {"type": "FlapFree", "status": "False", "reason": "FlappingPair", "message": "m", "observedGeneration": 1}
    status = queue_status.preemption_config_status(config, [], {"conditions": [verdict]}, NOW)  # a new term
    assert condition(status, "FlapFree") == verdict
    newer = LintResult(generations={"other": 1})  # analysed before this config existed
    assert (
        condition(queue_status.preemption_config_status(config, [], {"conditions": [verdict]}, NOW, newer), "FlapFree")
        == verdict
    )


def _flap(*objects: str, code: str = "FlappingPair") -> Finding:
    return Finding(code, "error", f"A: ... B: ... ({', '.join(objects)})", objects)


PROOF = Proof(
    flap_free=False,
    method="",
    cluster_queues=4,
    priority_classes=(),
    effective_priorities=(0, 1),
    labels={},
    quota_states="",
    time="",
    not_modelled=(),
    counts=Counts(shapes=4, engine_cycles=2),
)


def test_only_the_configs_of_a_flap_are_false_and_its_tree_neighbours_unknown() -> None:
    result = LintResult(
        findings=(_flap("ClusterQueue/a", "ClusterQueue/b", "PreemptionConfig/bad"),),
        proof=PROOF,
        trees={"a": "Cohort/one", "b": "Cohort/one", "c": "Cohort/one", "d": "Cohort/two"},
        users={"bad": ("a", "b"), "neighbour": ("c",), "far": ("d",)},
        generations={"bad": 1, "neighbour": 1, "far": 1, "unused": 1},
    )
    assert queue_status.flap_free_condition("bad", result)[:2] == ("False", "FlappingPair")
    status, reason, message = queue_status.flap_free_condition("neighbour", result)
    assert (status, reason) == ("Unknown", "NotProven") and "ClusterQueue(s) a, b" in message
    assert queue_status.flap_free_condition("far", result)[:2] == ("True", "NoFlapFound")
    assert queue_status.flap_free_condition("unused", result)[:2] == ("True", "NotUsed")
    assert queue_status.lint_condition("far", result)[:2] == ("True", "NoFindings")


def test_an_analysis_that_skipped_or_failed_proves_nothing() -> None:
    skipped = LintResult(
        proof=replace(PROOF, skipped=(Skip("ClusterQueue a: 30000 workload shapes", "a"),)),
        trees={"a": "Cohort/one", "b": "Cohort/one", "c": "ClusterQueue/c"},
        users={"x": ("b",), "y": ("c",)},
    )
    assert queue_status.flap_free_condition("x", skipped) == (
        "Unknown",
        "NotProven",
        "not proven: ClusterQueue a: 30000 workload shapes",
    )
    assert queue_status.flap_free_condition("y", skipped)[:2] == ("True", "NoFlapFound")  # another tree
    unnamed = LintResult(
        proof=replace(PROOF, skipped=(Skip("cycles of three: more than 50000 states"),)), users={"y": ("c",)}
    )
    assert queue_status.flap_free_condition("y", unnamed)[:2] == ("Unknown", "NotProven")
    failed = LintResult(error="the analysis failed: RuntimeError('bug')", generations={"x": 3})
    assert queue_status.flap_free_condition("x", failed) == ("Unknown", "AnalysisFailed", failed.error)
    status = queue_status.preemption_config_status(config_of(example()), [], None, NOW, failed)
    assert condition(status, "FlapFree")["status"] == "Unknown"


def test_warnings_alone_leave_lint_true() -> None:
    result = LintResult(
        findings=(Finding("UserWritableKey", "warning", "rule r: preemptorSelector ...", ("PreemptionConfig/x",)),),
        proof=replace(PROOF, flap_free=True),
    )
    assert queue_status.lint_condition("x", result) == (
        "True",
        "Warnings",
        "0 error(s), 1 warning(s): UserWritableKey: rule r: preemptorSelector ...",
    )


def test_a_flap_is_told_on_its_configs_or_without_any_on_its_queues() -> None:
    through_config = _flap("ClusterQueue/a", "PreemptionConfig/x", "PreemptionConfig/y")
    classic = _flap("ClusterQueue/c", "ClusterQueue/d", code="FlappingCycle")
    notices = lint_notices(LintResult(findings=(through_config, classic, Finding("X", "error", "m", ("a",)))))
    assert [(n.kind, n.name, n.reason) for n in notices] == [
        ("PreemptionConfig", "x", "FlappingPair"),
        ("PreemptionConfig", "y", "FlappingPair"),
        ("ClusterQueue", "c", "FlappingCycle"),
        ("ClusterQueue", "d", "FlappingCycle"),
    ]
    assert notices[0].message == f"lint FlappingPair: {through_config.message}"


def test_the_result_survives_the_trip_from_the_child() -> None:
    result = analyse_setup(wires_of(example()))
    assert result_from_wire(result_to_wire(result)) == result


# -- what is analysed --------------------------------------------------------------------------


def test_the_fingerprint_reads_the_setup_only() -> None:
    docs = example()
    base = fingerprint(wires_of(docs))
    with_status = copy.deepcopy(docs)
    for d in with_status:
        if d["kind"] == "PreemptionConfig":
            d["status"] = {"ruleCount": 1}
            d["metadata"]["resourceVersion"] = "7"
    no_workloads = [d for d in docs if d["kind"] != "Workload"]
    assert fingerprint(wires_of(with_status)) == base == fingerprint(wires_of(no_workloads))
    assert {w["kind"] for w in wires_of(docs)} == {
        "ResourceFlavor",
        "Cohort",
        "WorkloadPriorityClass",
        "ClusterQueue",
        "PreemptionConfig",
    }
    assert fingerprint(wires_of(example(fixed=True))) != base


def test_only_setup_changes_start_an_analysis() -> None:
    h = Harness([])
    changes: list[int] = []
    h.s.feeder.setup_changed = lambda: changes.append(1)
    docs = example()
    for d in docs:
        if d["kind"] in ("Namespace", "LocalQueue", "Workload"):
            h.s.feeder.ingest(d["kind"], copy.deepcopy(d))
    assert changes == []
    config = next(d for d in docs if d["kind"] == "PreemptionConfig")
    h.s.feeder.ingest("PreemptionConfig", copy.deepcopy(config))
    assert changes == [1]
    written = copy.deepcopy(config)
    written["metadata"]["resourceVersion"] = "2"
    written["status"] = {"ruleCount": 1}  # our own status write: nothing lint reads
    h.s.feeder.ingest("PreemptionConfig", written)
    assert changes == [1]
    h.s.feeder.forget("PreemptionConfig", written)
    assert changes == [1, 1]


# -- the runner ----------------------------------------------------------------------------------


class FakeAnalysis:
    """Records each setup it is given; holds each run until `release`d when `gated`."""

    def __init__(self, gated: bool = False) -> None:
        self.setups: list[list[Obj]] = []
        self.gated = gated
        self.gate = asyncio.Event()
        self.in_flight = 0
        self.most_in_flight = 0
        self.fail: Exception | None = None

    async def __call__(self, wires: list[Obj]) -> LintResult:
        self.setups.append(wires)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.gated:
                await self.gate.wait()
                self.gate.clear()
            if self.fail is not None:
                raise self.fail
            return LintResult(
                generations={w["metadata"]["name"]: 1 for w in wires}, proof=replace(PROOF, flap_free=True)
            )
        finally:
            self.in_flight -= 1


class Setup:
    def __init__(self) -> None:
        self.version = 0

    def __call__(self) -> list[Obj]:
        return [{"kind": "PreemptionConfig", "metadata": {"name": f"v{self.version}"}}]


async def until(check: Any, timeout: float = 10.0) -> None:
    """Polls on the event loop's clock (the fake one, in looptime tests)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.005)


def runner(analysis: FakeAnalysis, setup: Setup, leading: list[bool] | None = None) -> tuple[Linter, list[int]]:
    results: list[int] = []
    state = leading if leading is not None else [True]
    linter = Linter(
        setup, lambda: state[0], Metrics(), lambda: results.append(1), analyse=analysis, debounce_seconds=0.05
    )
    return linter, results


@pytest.mark.looptime
async def test_a_burst_of_changes_is_one_analysis_of_the_newest_setup() -> None:
    analysis, setup = FakeAnalysis(), Setup()
    linter, results = runner(analysis, setup)
    task = asyncio.create_task(linter.run())
    for version in range(5):
        setup.version = version
        linter.changed()
        await asyncio.sleep(0.01)
    await until(lambda: results)
    await asyncio.sleep(0.2)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert [s[0]["metadata"]["name"] for s in analysis.setups] == ["v4"]


@pytest.mark.looptime
async def test_changes_during_an_analysis_make_one_more_run_never_two_at_once() -> None:
    analysis, setup = FakeAnalysis(gated=True), Setup()
    linter, results = runner(analysis, setup)
    task = asyncio.create_task(linter.run())
    linter.changed()
    await until(lambda: analysis.in_flight == 1)
    for version in (1, 2, 3):
        setup.version = version
        linter.changed()
        await asyncio.sleep(0.1)  # past the debounce: still no second run while one is in flight
    assert len(analysis.setups) == 1
    analysis.gate.set()
    await until(lambda: len(analysis.setups) == 2)
    analysis.gate.set()
    await until(lambda: len(results) == 2)
    await asyncio.sleep(0.2)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert [s[0]["metadata"]["name"] for s in analysis.setups] == ["v0", "v3"]
    assert analysis.most_in_flight == 1


async def test_an_unchanged_setup_is_not_analysed_again() -> None:
    analysis, setup = FakeAnalysis(), Setup()
    linter, _ = runner(analysis, setup)
    assert await linter.lint_once() is not None
    assert await linter.lint_once() is None
    setup.version = 1
    assert await linter.lint_once() is not None
    assert linter.runs == len(analysis.setups) == 2
    assert (
        linter.metrics.registry.get_sample_value("preemption_operator_lint_runs_total", {"outcome": "flap_free"}) == 2
    )


@pytest.mark.looptime
async def test_a_follower_does_not_analyse_until_it_leads() -> None:
    analysis, setup, leading = FakeAnalysis(), Setup(), [False]
    linter, results = runner(analysis, setup, leading)
    task = asyncio.create_task(linter.run())
    linter.changed()
    await asyncio.sleep(0.2)
    assert analysis.setups == []
    leading[0] = True
    linter.changed()  # as the loop's take-over does
    await until(lambda: results)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_failing_analysis_is_reported_and_retried_on_the_next_change() -> None:
    analysis, setup = FakeAnalysis(), Setup()
    analysis.fail = RuntimeError("a bug")
    linter, results = runner(analysis, setup)
    task = asyncio.create_task(linter.run())
    linter.changed()
    await until(lambda: results)
    assert linter.result is not None and linter.result.error == "the analysis failed: RuntimeError('a bug')"
    assert linter.result.generations == {"v0": None}
    assert linter.metrics.registry.get_sample_value("preemption_operator_lint_runs_total", {"outcome": "failed"}) == 1
    analysis.fail = None
    linter.changed()  # the same setup: a failure is not a verdict
    await until(lambda: len(results) == 2)
    assert not task.done()  # the runner goes on
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert linter.result.error is None


async def test_an_analysis_past_its_timeout_is_abandoned() -> None:
    analysis, setup = FakeAnalysis(gated=True), Setup()
    linter, _ = runner(analysis, setup)
    linter.timeout_seconds = 0.05
    result = await linter.lint_once()
    assert result is not None and result.error == "the analysis took longer than 0.05s"
    assert analysis.in_flight == 0


# -- the child process -------------------------------------------------------------------------


async def test_the_child_analyses_and_stops_at_once_mid_analysis() -> None:
    child = ChildProcess()
    try:
        result = await child(wires_of(example()))
        assert result.outcome == "flapping" and result.users == {CONFIG: ("production", "research")}
        assert (await child(wires_of(example(fixed=True)))).outcome == "flap_free"  # the same process
    finally:
        child.stop()
    slow = ChildProcess(command=[sys.executable, "-c", "import time; time.sleep(60)"])
    call = asyncio.create_task(slow([]))
    await until(lambda: slow.process is not None)
    proc = slow.process
    assert proc is not None
    await asyncio.sleep(0.2)
    started = time.monotonic()
    call.cancel()
    await asyncio.gather(call, return_exceptions=True)
    assert await asyncio.wait_for(proc.wait(), 5) < 0  # killed
    assert time.monotonic() - started < 0.5


# -- through the loop ----------------------------------------------------------------------------


async def test_the_loop_writes_the_conditions_and_posts_each_flap_once() -> None:
    h = Harness(example())
    h.loop._was_leading = True  # a term taken over: a verdict's Warnings go out at once
    await h.step()
    await h.s.publisher.publish(datetime.now(UTC))
    status = h.api.objects[CONFIG_PATH]["status"]
    assert condition(status, "FlapFree")["reason"] == "Analysing"
    await h.s.linter.lint_once()
    await h.s.publisher.publish(datetime.now(UTC))
    status = h.api.objects[CONFIG_PATH]["status"]
    assert (condition(status, "FlapFree")["status"], condition(status, "FlapFree")["reason"]) == (
        "False",
        "FlappingPair",
    )
    flaps = [r for r in h.events.recorded if r[1] == "FlappingPair"]
    assert len(flaps) == 2 and {r[0] for r in flaps} == {CONFIG}  # within a queue (renamed: both), between them
    between = (
        "A: a workload of ClusterQueue production (priority 100; class batch); B: a workload of ClusterQueue research"
    )
    assert any(between in message for _, _, message in flaps), flaps
    await h.step()
    await h.step()
    assert len([r for r in h.events.recorded if r[1] == "FlappingPair"]) == 2  # once each, not every cycle

    fixed = next(d for d in example(fixed=True) if d["kind"] == "PreemptionConfig")
    fixed["metadata"]["resourceVersion"] = str(h.api.version + 1)
    h.s.feeder.ingest("PreemptionConfig", h.api.put(fixed))
    await h.s.linter.lint_once()
    await h.s.publisher.publish(datetime.now(UTC))
    status = h.api.objects[CONFIG_PATH]["status"]
    assert (condition(status, "FlapFree")["status"], condition(status, "FlapFree")["reason"]) == ("True", "NoFlapFound")
    assert h.s.notices.posted == set()


def test_an_analysis_past_its_cpu_budget_stops_and_says_the_setup_is_not_proven(monkeypatch) -> None:
    """The lint process gives each analysis a CPU-time budget: one that runs past it (Kueue's
    large-scale benchmark, a thousand ClusterQueues) ends with an error naming the budget and the
    setup's size, and the next setup is analysed as usual."""

    def forever(wires, fair_sharing):
        while True:
            pass

    setup = [cluster_queue(f"cq-{i}", 1) for i in range(3)]
    monkeypatch.setattr(lint_child, "analyse_setup", forever)
    stopped = lint_child.answer(json.dumps(setup), budget=0.2)
    assert stopped.error is not None
    assert stopped.error.startswith("the analysis stopped after 0.2 s of CPU time: a setup of 3 ClusterQueues")
    assert "not proven flap-free" in stopped.error
    monkeypatch.undo()
    done = lint_child.answer(json.dumps(setup), budget=5)
    assert done.error is None and done.outcome == "flap_free"
    assert signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)  # no timer left behind


def test_the_lint_process_exits_quietly_when_the_operator_is_gone() -> None:
    """A SIGKILLed operator leaves its lint process writing an answer to a closed pipe: it ends
    with status 0 and no traceback in the operator's log."""
    import subprocess

    child = subprocess.Popen(
        [sys.executable, "-m", "preemption_operator.controller.lint_child"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None
    child.stdout.close()  # the reader is gone
    child.stdin.write((json.dumps([cluster_queue("cq", 1)]) + "\n").encode())
    child.stdin.close()
    assert child.wait(timeout=60) == 0
    errors = child.stderr.read().decode()
    assert "Traceback" not in errors and "BrokenPipeError" not in errors, errors
