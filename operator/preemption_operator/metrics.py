"""Prometheus metrics, named after Kueue's (prefix `preemption_operator_`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    """One registry per operator, so tests and two operators in one process do not collide."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        prefix = "preemption_operator"
        self.admitted = Counter(
            f"{prefix}_admitted_workloads_total",
            "Workloads admitted, by ClusterQueue.",
            ["cluster_queue"],
            registry=self.registry,
        )
        self.preempted = Counter(
            f"{prefix}_preempted_workloads_total",
            "Workloads preempted, by the preempting ClusterQueue and the Preempted condition's reason.",
            ["preempting_cluster_queue", "reason"],
            registry=self.registry,
        )
        self.evicted = Counter(
            f"{prefix}_evicted_workloads_total",
            "Workloads evicted, by their ClusterQueue, reason and underlying cause.",
            ["cluster_queue", "reason", "underlying_cause"],
            registry=self.registry,
        )
        self.pending = Gauge(
            f"{prefix}_pending_workloads",
            "Pending workloads per ClusterQueue.",
            ["cluster_queue"],
            registry=self.registry,
        )
        self.cycle_seconds = Histogram(
            f"{prefix}_scheduling_cycle_duration_seconds",
            "Time a scheduling cycle takes, decisions and writes included.",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.decision_seconds = Histogram(
            f"{prefix}_preemption_decision_duration_seconds",
            "Time the engine takes to decide a cycle (no I/O).",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
            registry=self.registry,
        )
        self.leader = Gauge(f"{prefix}_leader", "1 while this replica holds the lease.", registry=self.registry)
