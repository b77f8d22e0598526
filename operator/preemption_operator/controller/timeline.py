"""The recent preemptions, oldest first, as the dashboard shows them: who took whose place, under
which rule, why, and when. The leader adds each one when its eviction is written; every replica
adds those the victims' statuses record as the Workloads come in (`observe`), so a standby's
dashboard shows them too, and a new leader shows those its predecessor wrote last even when
they come in after it took over. The echo of a write is the same preemption (same victim,
message and condition time): whichever comes first is kept, and what the leader wrote replaces
the echo, since it knows the preemptor by key and when it was written to the millisecond. A
status seen again (a list, a later change of the victim) adds nothing. Bounded, so it costs
nothing to keep."""

from __future__ import annotations

import asyncio
import bisect
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from ..engine.limits import PastPreemption
from ..engine.protection import LAST_RESORT_SUFFIX

KEPT = 200


@dataclass(frozen=True)
class Preemption:
    at: float
    """Seconds since the epoch: when the eviction was written (read from a status: the time of
    the victim's Preempted condition)."""
    preemptor: str
    preemptor_cluster_queue: str
    victim: str
    victim_cluster_queue: str
    reason: str
    rule: str
    message: str
    condition_at: float | None = None
    """The Preempted condition's time as written (to the second), which the echo of the write
    carries too; None: `at` is that time."""

    def to_dict(self) -> dict[str, Any]:
        shown = asdict(self)
        del shown["condition_at"]
        return shown

    @property
    def identity(self) -> tuple[str, str, float]:
        """A victim's status shows one preemption with the same time in every event; the same
        victim preempted again by the same preemptor (the same message) is another one. The
        status records the message without the last-resort note."""
        at = self.condition_at if self.condition_at is not None else self.at
        return (self.victim, self.message.removesuffix(LAST_RESORT_SUFFIX), at)


def condition_time(body: dict[str, Any], kind: str) -> float | None:
    """Seconds since the epoch of a condition's lastTransitionTime in a Workload in wire form."""
    for c in (body.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("lastTransitionTime"):
            try:
                return datetime.fromisoformat(str(c["lastTransitionTime"])).timestamp()
            except ValueError:
                return None
    return None


class Timeline:
    def __init__(self, kept: int = KEPT) -> None:
        self.kept = kept
        self.items: list[Preemption] = []
        """Oldest first (by `at`), at most `kept`."""
        self._identities: set[tuple[str, str, float]] = set()
        self._observed: set[tuple[str, str, float]] = set()
        """Those of the items that were read from a status (not written by this replica)."""
        self.version = 0
        self.changed = asyncio.Event()
        """Set when an item comes, then replaced by a fresh one: whoever waited on it wakes (the
        dashboard pushes at once), and nobody has to clear it for the others."""

    def add(self, item: Preemption, *, observed: bool = False) -> None:
        """`observed`: read from the victim's status, not written by this replica."""
        identity = item.identity
        if identity in self._identities:
            if observed or identity not in self._observed:
                return  # seen already (a list again, another change of the victim, an echo)
            # What this replica wrote replaces the echo of it that came in first.
            self._observed.discard(identity)
            self.items = [p for p in self.items if p.identity != identity]
            bisect.insort(self.items, item, key=lambda p: p.at)
            self._changed()
            return
        if len(self.items) >= self.kept and item.at <= self.items[0].at:
            return  # older than everything kept
        bisect.insort(self.items, item, key=lambda p: p.at)
        self._identities.add(identity)
        if observed:
            self._observed.add(identity)
        if len(self.items) > self.kept:
            dropped = self.items.pop(0).identity
            self._identities.discard(dropped)
            self._observed.discard(dropped)
        self._changed()

    def _changed(self) -> None:
        self.version += 1
        self.changed.set()
        self.changed = asyncio.Event()

    def observe(self, past: PastPreemption) -> None:
        """A preemption a victim's status records (not one it was admitted again after)."""
        if past.readmitted:
            return
        self.add(
            Preemption(
                at=past.at.timestamp(),
                preemptor=past.preemptor or "",
                preemptor_cluster_queue=past.preemptor_cluster_queue or "",
                victim=past.victim,
                victim_cluster_queue=past.victim_cluster_queue or "",
                reason=past.mechanism,
                rule="; ".join(past.rules),
                message=past.message,
            ),
            observed=True,
        )
