"""The write path's promise as a property: whatever the API answers (conflicts, errors before or
after a write took effect, lost answers), however late the watch delivers and however cycles and
writes interleave, no state the API server ever stores holds more quota than the cohort has.

Each example plays a random run against the in-memory API (tests/unit/fake_api.py): cycles that
do not wait for their writes, writes that pause, fail or fail after taking effect, workloads that
arrive, finish or are deleted, and a watch that catches up only now and then.
"""

from __future__ import annotations

import asyncio
import copy
import random
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import preemption_operator.controller.decisions as decisions_module
import preemption_operator.k8s.writer as writer_module
from builders import cluster_queue, pending, scenario
from preemption_operator.api.quantity import parse_quantity
from unit.test_write_path import WL, Harness

Obj = dict[str, Any]
QUEUES = {"a": 4, "b": 4, "c": 2}
COHORT_CPU = sum(QUEUES.values())


def _topology() -> list[Obj]:
    return scenario(
        [
            cluster_queue("a", QUEUES["a"], cohort="all", within="LowerPriority", reclaim="Any"),
            cluster_queue("b", QUEUES["b"], cohort="all", within="LowerPriority"),
            cluster_queue("c", QUEUES["c"], cohort="all", reclaim="LowerPriority"),
        ]
    )


def _holds(obj: Obj) -> float:
    status = obj.get("status") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    if conditions.get("QuotaReserved") != "True" or conditions.get("Finished") == "True":
        return 0.0
    admission = status.get("admission") or {}
    return sum(float(parse_quantity(p["resourceUsage"]["cpu"])) for p in admission.get("podSetAssignments") or [])


def _most_ever(history: list[dict[str, Obj]]) -> float:
    return max((sum(_holds(o) for o in state.values()) for state in history), default=0.0)


def _chaos(rng: random.Random, rate: float) -> Any:
    def decide(method: str, path: str) -> tuple[int, bool, int] | None:
        if "/workloads/" not in path or method not in ("GET", "PATCH"):
            return None
        pauses = rng.choice((0, 0, 1, 3))
        roll = rng.random()
        if roll < rate * 0.3 and method == "PATCH":
            return (409, False, pauses)
        if roll < rate * 0.55:
            return (500, False, pauses)
        if roll < rate * 0.85 and method == "PATCH":
            return (rng.choice((500, 0, 504)), True, pauses)  # took effect, then the answer was lost
        if roll < rate:
            return (0, False, pauses)
        return (0, False, pauses) if pauses else None

    return decide


async def _run(seed: int, steps: int, rate: float) -> None:
    rng = random.Random(seed)
    h = Harness(_topology())
    h.api.chaos = _chaos(rng, rate)
    tasks: list[asyncio.Task[Any]] = []
    made = 0

    def arrive() -> None:
        nonlocal made
        made += 1
        queue = rng.choice(sorted(QUEUES))
        h.api.put(pending(f"w{made:03d}", queue, rng.choice((1, 2, 3)), priority=rng.choice((0, 10, 100))).obj())

    for _ in range(10):
        arrive()
    h.sync()
    for _ in range(steps):
        roll = rng.random()
        if roll < 0.3:
            h.loop.cycle()
        elif roll < 0.5:
            for _ in range(rng.randint(1, 8)):
                await asyncio.sleep(0)
        elif roll < 0.6:
            h.sync()  # the watch catches up
        elif roll < 0.8:
            arrive()
        elif roll < 0.95:
            holding = [p for p, o in h.api.workloads().items() if _holds(o)]
            if holding:
                body = copy.deepcopy(h.api.objects[rng.choice(sorted(holding))])
                body["status"]["conditions"].append(
                    {
                        "type": "Finished",
                        "status": "True",
                        "reason": "Succeeded",
                        "message": "done",
                        "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    }
                )
                h.api.put(body)
        else:
            names = sorted(p.rsplit("/", 1)[-1] for p in h.api.workloads())
            if names:
                h.api.remove("Workload", rng.choice(names), "default")
        assert _most_ever(h.api.history) <= COHORT_CPU, f"over-admitted (seed {seed})"
        assert _unwritten(h) == _unwritten_by_definition(h), f"seed {seed}"
    # Faults end; everything settles.
    h.api.chaos = None
    await asyncio.gather(*tasks)
    for _ in range(5):
        await h.s.decisions.idle()
        while h.s.decisions._verifying:
            await asyncio.sleep(0)
        h.sync()
        await h.step()
    await h.s.decisions.queue.stop()
    assert _most_ever(h.api.history) <= COHORT_CPU, f"over-admitted (seed {seed})"
    assert not h.cache.assumed, f"assumptions left behind: {sorted(h.cache.assumed)} (seed {seed})"
    assert _unwritten(h) == {}
    assert h.api.count("PATCH", f"{WL}/*") > 0


def _unwritten(h: Harness) -> dict[str, set[str]]:
    """What the ClusterQueue statuses leave out: the cache's index of unwritten admissions."""
    found = {cq: {wl.key for wl in h.cache.unwritten_admissions(cq)} for cq in QUEUES}
    return {cq: keys for cq, keys in found.items() if keys}


def _unwritten_by_definition(h: Harness) -> dict[str, set[str]]:
    """Admissions assumed (not evictions) of workloads the cache observes holding no quota."""
    out: dict[str, set[str]] = {}
    for key, assumption in h.cache._assumed.items():
        observed = h.cache._observed.get(key)
        if (
            assumption.admitted is not None
            and not assumption.eviction
            and (observed is None or not observed.cluster_queue)
        ):
            out.setdefault(str(assumption.admitted.cluster_queue), set()).add(key)
    return out


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(50, 200), rate=st.sampled_from((0.0, 0.2, 0.5)))
def test_no_stored_state_over_admits_whatever_the_api_answers(seed: int, steps: int, rate: float) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(decisions_module, "VERIFY_START", 0.0)
        mp.setattr(writer_module, "AMBIGUOUS_PAUSE", 0.0)
        asyncio.run(_run(seed, steps, rate))
