"""Issue 15, item 7: Kueue's metric families under Kueue's names and labels (v0.19.2's
pkg/metrics), so Kueue's dashboards and alerts work unchanged; this project's own stay."""

from __future__ import annotations

from prometheus_client import generate_latest

from preemption_operator.controller.metrics import Metrics, QueueFigures


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    value = metrics.registry.get_sample_value(name, labels)
    return value


def test_an_admission_counts_in_both_families_with_kueues_labels() -> None:
    metrics = Metrics()
    metrics.replica_role = "leader"
    metrics.admitted_workload("cq", "high", 3.0)
    labels = {"cluster_queue": "cq", "priority_class": "high", "replica_role": "leader"}
    assert sample(metrics, "kueue_admitted_workloads_total", **labels) == 1
    assert sample(metrics, "kueue_quota_reserved_workloads_total", **labels) == 1
    assert sample(metrics, "kueue_admission_wait_time_seconds_bucket", **labels, le="2.0") == 0
    assert sample(metrics, "kueue_admission_wait_time_seconds_bucket", **labels, le="4.0") == 1
    assert sample(metrics, "preemption_operator_admitted_workloads_total", cluster_queue="cq") == 1


def test_preemptions_and_evictions_carry_kueues_labels() -> None:
    metrics = Metrics()
    metrics.preempted_workload("hero", "ConfigurablePreemption", "hero-config", "take-lower/0")
    assert (
        sample(
            metrics, "preemption_operator_rule_preemptions_total", preemption_config="hero-config", rule="take-lower/0"
        )
        == 1
    )
    metrics.evicted_workload("team", "Preempted", "hero-config", "low")
    assert (
        sample(
            metrics,
            "kueue_preempted_workloads_total",
            preempting_cluster_queue="hero",
            reason="ConfigurablePreemption",
            replica_role="standalone",
        )
        == 1
    )
    assert (
        sample(
            metrics,
            "kueue_evicted_workloads_total",
            cluster_queue="team",
            reason="Preempted",
            underlying_cause="hero-config",
            priority_class="low",
            replica_role="standalone",
        )
        == 1
    )


def figures(name: str, used: float) -> QueueFigures:
    return QueueFigures(name, "org", "active", 2, 1, 3, {("default", "cpu"): (used, 6.0, None, 2.0)})


def test_queue_gauges_report_and_forget() -> None:
    metrics = Metrics()
    metrics.queue_gauges([figures("a", 4.5), figures("b", 1.0)])
    quota = {
        "cohort": "org",
        "cluster_queue": "a",
        "flavor": "default",
        "resource": "cpu",
        "replica_role": "standalone",
    }
    assert sample(metrics, "kueue_cluster_queue_resource_usage", **quota) == 4.5
    assert sample(metrics, "kueue_cluster_queue_nominal_quota", **quota) == 6
    assert sample(metrics, "kueue_cluster_queue_lending_limit", **quota) == 2
    assert sample(metrics, "kueue_cluster_queue_borrowing_limit", **quota) is None  # none set
    assert (
        sample(metrics, "kueue_pending_workloads", cluster_queue="a", status="inadmissible", replica_role="standalone")
        == 1
    )
    assert (
        sample(metrics, "kueue_cluster_queue_status", cluster_queue="a", status="active", replica_role="standalone")
        == 1
    )
    assert (
        sample(metrics, "kueue_cluster_queue_status", cluster_queue="a", status="pending", replica_role="standalone")
        == 0
    )
    metrics.queue_gauges([figures("b", 1.0)])  # a is gone
    metrics.forget_cluster_queues({"b"})
    text = generate_latest(metrics.registry).decode()
    assert 'cluster_queue="a"' not in text
    assert 'cluster_queue="b"' in text


def test_the_grafana_dashboard_queries_only_metrics_the_operator_exports() -> None:
    import json
    import re
    from pathlib import Path

    dashboard = json.loads(
        (Path(__file__).resolve().parents[2] / "config" / "grafana" / "preemption-operator.json").read_text()
    )
    metrics = Metrics()
    exported = {family.name for family in metrics.registry.collect()}
    # Counters are exported without _total in the family name; histograms add _bucket.
    names = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            names |= set(re.findall(r"\b((?:kueue|preemption_operator)_[a-z_]+)\b", target["expr"]))
    assert names, "the dashboard queries nothing"
    for name in names:
        base = re.sub(r"(_total|_bucket)$", "", name)
        assert base in exported, f"{name} is not exported"
    titles = " ".join(panel["title"] for panel in dashboard["panels"])
    for subject in ("Admissions", "Preemptions / s by reason", "rule", "Pending", "quota"):
        assert subject in titles
