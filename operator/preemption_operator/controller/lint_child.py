"""The operator's lint process (see linter.py): reads one JSON line of setup objects at a time from
standard input, answers one JSON line of LintResult on standard output; exits at end of input."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from ..engine.fair_sharing import OFF, FairSharing, parse_strategies
from .linter import LintResult, analyse_setup, result_to_wire

NICENESS = 19
CPU_BUDGET_SECONDS = 20.0
"""CPU time one analysis may take. The proof's cost grows steeply with the ClusterQueues of a
cohort (Kueue's large-scale benchmark has a hundred in each of ten cohorts); past the budget the
answer says the setup was not analysed, rather than taking the cores the scheduler and the API
server need for minutes. `preemption-operator lint` offline has no budget."""


class _OverBudget(Exception):
    pass


def _over_budget(signum: int, frame: FrameType | None) -> None:
    raise _OverBudget


def lower_priority() -> None:
    """The scheduler comes first on a shared core. The process leads a session of its own (a
    terminal's Ctrl-C is the parent's), and with autogroup scheduling a session is scheduled as a
    whole, its nice value the group's: both are lowered."""
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    with contextlib.suppress(OSError):
        Path("/proc/self/autogroup").write_text(f"{NICENESS}\n")


def answer(line: str, budget: float = CPU_BUDGET_SECONDS, fair_sharing: FairSharing = OFF) -> LintResult:
    """The analysis of one setup (a JSON line), within `budget` seconds of CPU time."""
    wires: list[dict[str, Any]] = json.loads(line)
    previous = signal.signal(signal.SIGPROF, _over_budget)
    signal.setitimer(signal.ITIMER_PROF, budget)
    try:
        return analyse_setup(wires, fair_sharing)
    except _OverBudget:
        queues = sum(1 for w in wires if w.get("kind") == "ClusterQueue")
        return LintResult(
            error=f"the analysis stopped after {budget:g} s of CPU time: a setup of {queues} ClusterQueues is too "
            "large to analyse here, so it is not proven flap-free (`preemption-operator lint` analyses it offline, "
            "without a limit)"
        )
    except Exception as exc:  # one bad setup must not end the process
        return LintResult(error=f"the analysis failed: {exc!r}")
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def fair_sharing_of(argv: list[str]) -> FairSharing:
    """The operator's fair sharing, from the arguments linter.child_arguments made."""
    if "--fair-sharing-strategies" not in argv:
        return OFF
    return FairSharing(enabled=True, strategies=parse_strategies(argv[argv.index("--fair-sharing-strategies") + 1]))


def main() -> None:
    lower_priority()
    sharing = fair_sharing_of(sys.argv[1:])
    try:
        for line in sys.stdin:
            sys.stdout.write(
                json.dumps(result_to_wire(answer(line, fair_sharing=sharing)), separators=(",", ":")) + "\n"
            )
            sys.stdout.flush()
    except BrokenPipeError:
        # The operator is gone (killed mid-analysis): nobody reads the answer. Exit quietly, with
        # stdout pointed away so the interpreter's last flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    main()
