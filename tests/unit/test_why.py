"""Issue 15, item 1: what held the victims back reaches the pending message (the cluster shows
no `explain`), at most three reasons and a count; every pending decision posts a Warning Event
with its reason, as Kueue's scheduler does."""

from __future__ import annotations

from datetime import UTC, datetime

from preemption_operator.engine import changes
from preemption_operator.engine.candidates import CandidateRecord
from preemption_operator.engine.scheduler import _blockers

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def record(workload: str, detail: str, outcome: str = "excluded", blocking: bool = True) -> CandidateRecord:
    return CandidateRecord(workload, "cq", outcome, detail, "classic", blocking)  # type: ignore[arg-type]


def test_no_blocker_adds_nothing() -> None:
    assert _blockers([record("ns/a", "priority 5 is not lower than 5", blocking=False)]) == ""


def test_blockers_name_workload_and_reason_and_rules_by_themselves() -> None:
    text = _blockers(
        [
            record("ns/a", "outside the preemption fence of Cohort c"),
            record(
                "ns/p", "rule r: minTriggerRequiredDuration 1h not reached (until 2026-01-01T01:00:00Z)", "rule-skipped"
            ),
            record("ns/a", "outside the preemption fence of Cohort c"),  # seen again in a second pass
        ]
    )
    assert text == (
        ". Not preempted: ns/a: outside the preemption fence of Cohort c; "
        "rule r: minTriggerRequiredDuration 1h not reached (until 2026-01-01T01:00:00Z)"
    )


def test_at_most_three_blockers_are_shown_with_a_count_of_the_rest() -> None:
    text = _blockers([record(f"ns/w{i}", "ClusterQueue q has preemption-policy disabled") for i in range(5)])
    assert text.endswith("; and 2 more") and text.count("has preemption-policy disabled") == 3


def test_every_pending_decision_posts_a_warning_with_its_reason() -> None:
    from builders import cluster_queue, one_cycle, scenario, workload

    objects = scenario([cluster_queue("standalone", 1)], workload("big", queue="standalone", cpu=2))
    result = one_cycle(objects)
    (pending,) = [c for c in changes.status_changes(result, NOW) if c.action == changes.PENDING]
    (event,) = pending.events
    assert (event.type, event.reason) == ("Warning", "ExceedsMaxQuota")  # it can never fit: Kueue's reason
    assert event.message.startswith("couldn't assign flavors to pod set main")
