"""Workload names for jobs match Kueue's job framework (its own test vectors, v0.19.2), so a
Job keeps the same Workload name under either scheduler."""

from __future__ import annotations

from preemption_operator.jobs.names import workload_name

LONG = (
    "marketing-campaign-autumn-2024-region-north-america-department-digital-strategy-sub-department-"
    "social-media-engagement-tracker-and-analytics-dashboard-v2-final-revision-by-engineering-team-"
    "lead-senior-architect-validation-checked-approved-by-legal-and-ops-dept"
)


def test_a_short_name_gets_the_kind_prefix_and_kueues_hash() -> None:
    assert workload_name("Job", "batch", "name", "uid") == "job-name-ef3a1"


def test_an_extra_string_changes_the_hash_only() -> None:
    assert workload_name("Job", "batch", "name", "uid", extra="1") == "job-name-2514c"


def test_a_long_owner_name_is_cut_to_fit_a_kubernetes_name() -> None:
    name = workload_name("Job", "batch", LONG, "uid")
    assert name == (
        "job-marketing-campaign-autumn-2024-region-north-america-department-digital-strategy-sub-department-"
        "social-media-engagement-tracker-and-analytics-dashboard-v2-final-revision-by-engineering-team-"
        "lead-senior-architect-validation-checked-approved-by-l-218b8"
    )
    assert len(name) == 253


def test_short_names_fit_a_label_value() -> None:
    name = workload_name("Job", "batch", LONG, "uid", short=True)
    assert name == "job-marketing-campaign-autumn-2024-region-north-america-d-218b8"
    assert len(name) == 63


def test_a_recreated_owner_or_another_kind_gets_another_name() -> None:
    first, recreated = workload_name("Job", "batch", "a", "uid-1"), workload_name("Job", "batch", "a", "uid-2")
    assert first[:-5] == recreated[:-5] == "job-a-" and first != recreated
    jobset = workload_name("JobSet", "jobset.x-k8s.io", "a", "uid-1")
    assert jobset.startswith("jobset-a-") and jobset[-5:] != first[-5:]
