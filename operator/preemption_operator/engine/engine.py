"""The engine's entry point: one object that runs scheduling cycles, wired the same way for the
operator, `simulate` and `lint` (Kueue's scheduler with its preemptor plugged in)."""

from __future__ import annotations

from .configurable import ConfigurablePreemption
from .scheduler import CycleResult, QueueState, Scheduler
from .snapshot import Snapshot


class Engine:
    """Classic (or fair) preemption with PreemptionConfig rules as the extra candidate stream.

    `rounds`: consecutive cycles decided per pass (the operator's batches; see
    `Scheduler.cycle`). `complete`: explanations also name the eligible candidates no search
    needed (what `explain` shows)."""

    def __init__(self, *, rounds: int = 1, complete: bool = False) -> None:
        self._configurable = ConfigurablePreemption()
        self._scheduler = Scheduler(extra=self._configurable.candidates, rounds=rounds, complete=complete)

    def cycle(self, snapshot: Snapshot, state: QueueState, budget: int | None = None) -> CycleResult:
        """One pass over `snapshot` (changed by it: simulated admissions and removals), deciding
        against `state` (updated). The result carries the decisions and the problems found in
        the PreemptionConfigs the pass read."""
        self._configurable.begin_cycle(snapshot)
        result = self._scheduler.cycle(snapshot, state, budget)
        result.notices = list(self._configurable.notices)
        result.warnings = list(self._configurable.warnings)
        return result
