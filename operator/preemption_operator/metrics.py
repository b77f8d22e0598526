"""Prometheus metrics, named after Kueue's (prefix `preemption_operator_`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector


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
        self.failed_writes = Counter(
            f"{prefix}_failed_writes_total",
            "Decisions not written: the API refused or did not answer (failed), or the lease deadline "
            "had passed (fenced). Each is forgotten and decided again.",
            ["outcome"],
            registry=self.registry,
        )
        self.api_requests = Counter(
            f"{prefix}_api_requests_total",
            "Requests to the API server, by method, resource (workloads/status, events, ...) and answer code "
            "(none: no answer).",
            ["method", "resource", "code"],
            registry=self.registry,
        )
        self.client_throttled = Counter(
            f"{prefix}_client_throttled_seconds",
            "Seconds requests waited for the client-side rate limit (--kube-api-qps).",
            registry=self.registry,
        )
        self._queues: set[str] = set()

    def request_summary(self) -> str:
        """`PATCH 200: 812, POST 201: 640, ...`: what this process asked of the API server."""
        counts = {
            f"{s.labels['method']} {s.labels['resource']} {s.labels['code']}": int(s.value)
            for family in self.api_requests.collect()
            for s in family.samples
            if s.name.endswith("_total")
        }
        return ", ".join(f"{key}: {value}" for key, value in sorted(counts.items())) or "none"

    def count_request(self, method: str, resource: str, code: str) -> None:
        self.api_requests.labels(method=method, resource=resource, code=code).inc()

    def watch_events(self, counters: Callable[[], dict[str, int]]) -> None:
        """Exposes the Event recorder's own counters (posted, patched, dropped, ...)."""
        registry = self.registry

        class EventCounters(Collector):
            def collect(self) -> Iterable[Metric]:
                family = CounterMetricFamily(
                    "preemption_operator_events",
                    "Events recorded, by what became of them: posted, patched (a repeat counted up), "
                    "dropped (queue full), filtered (spam filter), fenced (not leading), failed, "
                    "namespace_closing (its namespace is being deleted).",
                    labels=["outcome"],
                )
                for outcome, value in sorted(counters().items()):
                    family.add_metric([outcome], value)
                yield family

        registry.register(EventCounters())

    def forget_cluster_queues(self, existing: set[str]) -> None:
        """Removes the series of ClusterQueues that no longer exist, as Kueue does on deletion."""
        for name in self._queues - existing:
            self.pending.remove_by_labels({"cluster_queue": name})
            self.admitted.remove_by_labels({"cluster_queue": name})
            self.evicted.remove_by_labels({"cluster_queue": name})
            self.preempted.remove_by_labels({"preempting_cluster_queue": name})
        self._queues = set(existing)
