"""The recent preemptions, oldest first, as the dashboard shows them: who took whose place, under
which rule, why, and when. The leader adds each one when its eviction is written; a standby adds
those the victims' statuses record as the Workloads come in (`observe`), so its dashboard shows
them too, and it keeps them when it takes over. A status seen again (a list, a later change of
the victim) adds nothing. Bounded, so it costs nothing to keep."""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ..engine.limits import PastPreemption

KEPT = 200


@dataclass(frozen=True)
class Preemption:
    at: float
    """Seconds since the epoch: when the eviction was written (observed: the time of the victim's
    Preempted condition)."""
    preemptor: str
    preemptor_cluster_queue: str
    victim: str
    victim_cluster_queue: str
    reason: str
    rule: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def identity(self) -> tuple[str, str, float]:
        """A victim's status shows one preemption with the same time in every event; the same
        victim preempted again by the same preemptor (the same message) is another one."""
        return (self.victim, self.message, self.at)


class Timeline:
    def __init__(self, kept: int = KEPT, observing: Callable[[], bool] = lambda: True) -> None:
        self.kept = kept
        self.observing = observing
        """Whether statuses are read now: not while this replica leads, since it adds what it
        writes itself (the echo of its write would otherwise show first, with the condition's
        time rounded to the second)."""
        self.items: list[Preemption] = []
        """Oldest first (by `at`), at most `kept`."""
        self._identities: set[tuple[str, str, float]] = set()
        self.version = 0
        self.changed = asyncio.Event()
        """Set when an item comes, then replaced by a fresh one: whoever waited on it wakes (the
        dashboard pushes at once), and nobody has to clear it for the others."""

    def add(self, item: Preemption) -> None:
        identity = item.identity
        if identity in self._identities:
            return  # seen already (a list again, or another change of the victim)
        if len(self.items) >= self.kept and item.at <= self.items[0].at:
            return  # older than everything kept
        bisect.insort(self.items, item, key=lambda p: p.at)
        self._identities.add(identity)
        if len(self.items) > self.kept:
            self._identities.discard(self.items.pop(0).identity)
        self.version += 1
        self.changed.set()
        self.changed = asyncio.Event()

    def observe(self, past: PastPreemption) -> None:
        """A preemption a victim's status records (not one it was admitted again after)."""
        if past.readmitted or not self.observing():
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
            )
        )
