"""The decision engine: pure functions from a cluster snapshot to admissions, evictions and reasons.

Nothing here imports a Kubernetes client, reads a clock or does I/O; the operator, `simulate` and
`lint` feed it the same snapshots. The public surface:

- `Cache`: parsed, indexed cluster state (objects in one at a time; decisions assumed while their
  writes are in flight); `Cache.snapshot(now)` cuts a `Snapshot` for one pass.
- `Engine(rounds=, complete=).cycle(snapshot, state, budget)` -> `CycleResult`: admissions,
  preemptions, evictions, pending reasons, explanations and notices; `QueueState` is what the
  scheduler remembers between passes.
- `status_changes(result, now)`: the decisions as `StatusChange`s, the Workload status each one
  writes (the operator and `simulate` write them the same way).
- `Cache.limits(now)` -> `limits.LimitBook` (None without PreemptionLimits): per limit, the
  preemptions per key inside its window (`counts`), and the limits that do not build
  (`problems`); `limits.past_preemption(workload)` reads one back from a victim's status.
"""

from .cache import Cache, Change
from .changes import StatusChange, status_changes
from .engine import Engine
from .fair_sharing import OFF, FairSharing
from .notices import Notice
from .scheduler import CycleResult, QueueState
from .snapshot import Snapshot

__all__ = [
    "OFF",
    "Cache",
    "Change",
    "CycleResult",
    "Engine",
    "FairSharing",
    "Notice",
    "QueueState",
    "Snapshot",
    "StatusChange",
    "status_changes",
]
