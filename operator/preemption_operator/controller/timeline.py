"""The recent preemptions, newest last, as the dashboard shows them: who took whose place, under
which rule, why, and when. Appended to when a preemption's write succeeds (so only the leader,
which decides, has them); bounded, so it costs nothing to keep."""

from __future__ import annotations

import asyncio
import collections
from dataclasses import asdict, dataclass
from typing import Any

KEPT = 200


@dataclass(frozen=True)
class Preemption:
    at: float
    """Seconds since the epoch, when the eviction was written."""
    preemptor: str
    preemptor_cluster_queue: str
    victim: str
    victim_cluster_queue: str
    reason: str
    rule: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Timeline:
    def __init__(self, kept: int = KEPT) -> None:
        self.items: collections.deque[Preemption] = collections.deque(maxlen=kept)
        self.version = 0
        self.changed = asyncio.Event()
        """Set when an item comes, then replaced by a fresh one: whoever waited on it wakes (the
        dashboard pushes at once), and nobody has to clear it for the others."""

    def add(self, item: Preemption) -> None:
        self.items.append(item)
        self.version += 1
        self.changed.set()
        self.changed = asyncio.Event()
