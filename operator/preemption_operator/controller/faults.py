"""Faults the operator injects into itself, for the chaos tests: `PREEMPTION_OPERATOR_FAULTS`.

- `stop-before-write=N`: on the N-th cycle whose decisions include an admission, freeze the whole
  process (SIGSTOP) after deciding and before the first write; SIGCONT resumes it. This is the
  leader that stalls with a batch in hand while a standby takes over.
- `stall-before-write=SECONDS:N`: on the N-th such cycle, block the event loop for SECONDS before
  writing (lease renewals have a thread of their own and go on).

Several faults are separated by commas. Nothing happens without the variable.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..engine.changes import StatusChange

log = logging.getLogger(__name__)

ENV = "PREEMPTION_OPERATOR_FAULTS"


class FaultSpecError(ValueError):
    pass


@dataclass
class Faults:
    stop_at: int | None = None
    stall_at: int | None = None
    stall_seconds: float = 0.0
    admitting_cycles: int = 0

    @classmethod
    def parse(cls, text: str) -> Faults:
        faults = cls()
        for item in filter(None, (part.strip() for part in text.split(","))):
            name, _, value = item.partition("=")
            try:
                if name == "stop-before-write":
                    faults.stop_at = int(value)
                elif name == "stall-before-write":
                    seconds, _, nth = value.partition(":")
                    faults.stall_seconds, faults.stall_at = float(seconds), int(nth or "1")
                else:
                    raise FaultSpecError(
                        f"{ENV}: unknown fault {name!r} (known: stop-before-write, stall-before-write)"
                    )
            except ValueError as exc:
                if isinstance(exc, FaultSpecError):
                    raise
                raise FaultSpecError(f"{ENV}: {item!r}: {exc}") from None
        return faults

    @classmethod
    def from_env(cls) -> Faults:
        return cls.parse(os.environ.get(ENV, ""))

    def before_writes(self, changes: Sequence[StatusChange]) -> None:
        if (self.stop_at is None and self.stall_at is None) or not any(c.holds_quota for c in changes):
            return
        self.admitting_cycles += 1
        if self.admitting_cycles == self.stop_at:
            log.warning("fault injection: stopping before writes")
            _flush()
            os.kill(os.getpid(), signal.SIGSTOP)
            log.warning("fault injection: resumed")
        if self.admitting_cycles == self.stall_at:
            log.warning("fault injection: stalling the event loop for %.1fs before writes", self.stall_seconds)
            _flush()
            time.sleep(self.stall_seconds)
            log.warning("fault injection: resumed")


def _flush() -> None:
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
