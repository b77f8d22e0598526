"""`preemption-operator lint`: findings about a preemption setup (queues, cohorts, flavors,
PreemptionConfigs and priority classes; not the workloads), pure: objects in, findings out.

- `checks`: the entry point, `lint(objects)`, with the reference checks (missing objects, unused
  configs, selectors that do not build, keys users can write);
- `rules`: selectors no workload satisfies, rules another covers, rules protections leave
  without victims;
- `flapping` (with `model`, the setup as it models it; `states`, the states it asks the engine
  about; `relations`, its symbolic filter; and `symmetry`): two or three workloads that evict each
  other in turn, each found by the scheduler itself, with the objects that reproduce it; when none
  is found, `proof` says what was quantified over;
- `findings`: what a run reports.

docs/lint.md describes every check.
"""

from .checks import CHECKS, NOT_CHECKED, flap_message, lint
from .findings import SEVERITIES, Finding, Report, Severity
from .proof import Proof, Skip

__all__ = [
    "CHECKS",
    "NOT_CHECKED",
    "SEVERITIES",
    "Finding",
    "Proof",
    "Report",
    "Severity",
    "Skip",
    "flap_message",
    "lint",
]
