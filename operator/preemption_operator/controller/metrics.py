"""Prometheus metrics: Kueue's families under Kueue's names and labels (`kueue_*`, so Kueue's
dashboards and alerts work unchanged), and this project's own (`preemption_operator_*`)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

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
        self.weighted_share = Gauge(
            f"{prefix}_cluster_queue_weighted_share",
            "With fair sharing on: the ClusterQueue's dominant resource share (the largest ratio, over its "
            "resources, of usage above nominal quota to what its cohort can lend, times 1000) divided by its "
            "weight; 0 while within nominal quota; NaN for a weight of 0 that borrows.",
            ["cluster_queue", "cohort"],
            registry=self.registry,
        )
        self.rule_preemptions = Counter(
            f"{prefix}_rule_preemptions_total",
            "Workloads preempted by a PreemptionConfig rule, by config and rule (`<rule>/<selector index>`).",
            ["preemption_config", "rule"],
            registry=self.registry,
        )
        self.limit_throttled = Counter(
            f"{prefix}_preemption_limit_throttled_total",
            "Preemptors a PreemptionLimit kept from preempting (each time a pass found them blocked).",
            ["preemption_limit"],
            registry=self.registry,
        )
        self.limit_used = Gauge(
            f"{prefix}_preemption_limit_window_preemptions",
            "Preemptions inside a PreemptionLimit's window, for its most used key.",
            ["preemption_limit"],
            registry=self.registry,
        )
        self.limit_allowed = Gauge(
            f"{prefix}_preemption_limit_limit",
            "Preemptions a PreemptionLimit allows per key and window (spec.limit).",
            ["preemption_limit"],
            registry=self.registry,
        )
        self._limits: set[str] = set()
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
        self.lint_runs = Counter(
            f"{prefix}_lint_runs_total",
            "Analyses of the setup after configuration changes (the checks of `lint`), by outcome: "
            "flap_free, flapping, not_proven, failed.",
            ["outcome"],
            registry=self.registry,
        )
        self.lint_seconds = Histogram(
            f"{prefix}_lint_duration_seconds",
            "Time one analysis of the setup takes, in its own process (the first one includes starting it).",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
            registry=self.registry,
        )
        self.lint_findings = Gauge(
            f"{prefix}_lint_findings",
            "Findings of the last analysis of the setup, by code (FlappingPair, MissingReference, ...).",
            ["code"],
            registry=self.registry,
        )
        self._lint_codes: set[str] = set()
        self._queues: set[str] = set()
        self._figures: dict[str, tuple[str, QueueFigures]] = {}
        """Each ClusterQueue's figures as last set, with the replica role: most passes change few."""
        self._request_counts: dict[tuple[str, str, str], Counter] = {}
        self.replica_role = "standalone"
        """Kueue's replica_role label: leader, follower, or standalone (no leader election)."""
        self._kueue()

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
        # One per API request: the labelled child is kept, not looked up again each time.
        child = self._request_counts.get((method, resource, code))
        if child is None:
            child = self._request_counts[(method, resource, code)] = self.api_requests.labels(
                method=method, resource=resource, code=code
            )
        child.inc()

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

    # -- Kueue's families (pkg/metrics/metrics.go of v0.19.2: names, labels, buckets) --------

    def _kueue(self) -> None:
        wait_buckets = [float(2**i) for i in range(14)]  # Kueue's generateExponentialBuckets(14)
        cq = ["cluster_queue", "priority_class", "replica_role"]
        quota = ["cohort", "cluster_queue", "flavor", "resource", "replica_role"]
        r = self.registry
        self.k_admitted = Counter(
            "kueue_admitted_workloads_total",
            "The total number of admitted workloads per 'cluster_queue'",
            cq,
            registry=r,
        )
        self.k_reserved = Counter(
            "kueue_quota_reserved_workloads_total",
            "The total number of quota reserved workloads per 'cluster_queue'",
            cq,
            registry=r,
        )
        self.k_admission_wait = Histogram(
            "kueue_admission_wait_time_seconds",
            "The time between a workload was created or requeued until admission, per 'cluster_queue'",
            cq,
            buckets=wait_buckets,
            registry=r,
        )
        self.k_reserved_wait = Histogram(
            "kueue_quota_reserved_wait_time_seconds",
            "The time between a workload was created or requeued until it got quota reservation, per 'cluster_queue'",
            cq,
            buckets=wait_buckets,
            registry=r,
        )
        self.k_checks_wait = Histogram(
            "kueue_admission_checks_wait_time_seconds",
            "The time from when a workload got the quota reservation until admission, per 'cluster_queue'",
            cq,
            buckets=wait_buckets,
            registry=r,
        )
        self.k_evicted = Counter(
            "kueue_evicted_workloads_total",
            "The number of evicted workloads per 'cluster_queue'",
            ["cluster_queue", "reason", "underlying_cause", "priority_class", "replica_role"],
            registry=r,
        )
        self.k_preempted = Counter(
            "kueue_preempted_workloads_total",
            "The number of preempted workloads per 'preempting_cluster_queue'",
            ["preempting_cluster_queue", "reason", "replica_role"],
            registry=r,
        )
        self.k_pending = Gauge(
            "kueue_pending_workloads",
            "The number of pending workloads, per 'cluster_queue' and 'status' (active or inadmissible)",
            ["cluster_queue", "status", "replica_role"],
            registry=r,
        )
        self.k_reserving = Gauge(
            "kueue_reserving_active_workloads",
            "The number of Workloads that are reserving quota, per 'cluster_queue'",
            ["cluster_queue", "replica_role"],
            registry=r,
        )
        self.k_admitted_active = Gauge(
            "kueue_admitted_active_workloads",
            "The number of admitted Workloads that are active (unsuspended and not finished), per 'cluster_queue'",
            ["cluster_queue", "replica_role"],
            registry=r,
        )
        self.k_status = Gauge(
            "kueue_cluster_queue_status",
            "Reports 'cluster_queue' with its 'status' (with possible values 'pending', 'active' or 'terminated')",
            ["cluster_queue", "status", "replica_role"],
            registry=r,
        )
        self.k_usage = Gauge(
            "kueue_cluster_queue_resource_usage", "Reports the cluster_queue's total resource usage", quota, registry=r
        )
        self.k_reservation = Gauge(
            "kueue_cluster_queue_resource_reservation",
            "Reports the cluster_queue's total resource reservation within all the flavors",
            quota,
            registry=r,
        )
        self.k_nominal = Gauge(
            "kueue_cluster_queue_nominal_quota", "Reports the cluster_queue's resource nominal quota", quota, registry=r
        )
        self.k_borrowing = Gauge(
            "kueue_cluster_queue_borrowing_limit",
            "Reports the cluster_queue's resource borrowing limit",
            quota,
            registry=r,
        )
        self.k_lending = Gauge(
            "kueue_cluster_queue_lending_limit", "Reports the cluster_queue's resource lending limit", quota, registry=r
        )
        self.k_weighted_share = Gauge(
            "kueue_cluster_queue_weighted_share",
            "Fair sharing: the ClusterQueue's dominant resource share divided by its weight (0 within nominal "
            "quota, NaN for a zero weight that borrows)",
            ["cluster_queue", "cohort", "replica_role"],
            registry=r,
        )
        self.k_cohort_weighted_share = Gauge(
            "kueue_cohort_weighted_share",
            "Fair sharing: the Cohort's dominant resource share within its parent divided by its weight (0 within "
            "its subtree's quota)",
            ["cohort", "replica_role"],
            registry=r,
        )
        self._share_series: dict[Gauge, set[tuple[str, ...]]] = {}
        self._quota_series: set[tuple[str, ...]] = set()

    def lint_run(self, outcome: str, seconds: float, codes: Iterable[str]) -> None:
        """An analysis of the setup ended; `codes`: its findings' codes (one per finding)."""
        self.lint_runs.labels(outcome=outcome).inc()
        self.lint_seconds.observe(seconds)
        counts: dict[str, int] = {}
        for code in codes:
            counts[code] = counts.get(code, 0) + 1
        for code in self._lint_codes | set(counts):
            self.lint_findings.labels(code=code).set(counts.get(code, 0))
        self._lint_codes |= set(counts)

    def admitted_workload(
        self, cluster_queue: str, priority_class: str, waited_seconds: float, *, checked: bool = False
    ) -> None:
        """An admission written: quota reserved, and admitted at once unless it waits for its
        AdmissionChecks (`checked`; see `checks_ready`)."""
        labels = {"cluster_queue": cluster_queue, "priority_class": priority_class, "replica_role": self.replica_role}
        self.k_reserved.labels(**labels).inc()
        self.k_reserved_wait.labels(**labels).observe(waited_seconds)
        if not checked:
            self.admitted.labels(cluster_queue=cluster_queue).inc()
            self.k_admitted.labels(**labels).inc()
            self.k_admission_wait.labels(**labels).observe(waited_seconds)
            self.k_checks_wait.labels(**labels).observe(0.0)

    def checks_ready(
        self, cluster_queue: str, priority_class: str, waited_seconds: float, since_reservation: float
    ) -> None:
        """A workload admitted once its AdmissionChecks were all Ready."""
        labels = {"cluster_queue": cluster_queue, "priority_class": priority_class, "replica_role": self.replica_role}
        self.admitted.labels(cluster_queue=cluster_queue).inc()
        self.k_admitted.labels(**labels).inc()
        self.k_admission_wait.labels(**labels).observe(waited_seconds)
        self.k_checks_wait.labels(**labels).observe(since_reservation)

    def preempted_workload(self, preempting_cluster_queue: str, reason: str, config: str = "", rule: str = "") -> None:
        """A preemption written; `config` and `rule` name the PreemptionConfig rule that chose it."""
        self.preempted.labels(preempting_cluster_queue=preempting_cluster_queue, reason=reason).inc()
        if rule:
            self.rule_preemptions.labels(preemption_config=config, rule=rule).inc()
        self.k_preempted.labels(
            preempting_cluster_queue=preempting_cluster_queue, reason=reason, replica_role=self.replica_role
        ).inc()

    def evicted_workload(self, cluster_queue: str, reason: str, underlying_cause: str, priority_class: str) -> None:
        self.evicted.labels(cluster_queue=cluster_queue, reason=reason, underlying_cause=underlying_cause).inc()
        self.k_evicted.labels(
            cluster_queue=cluster_queue,
            reason=reason,
            underlying_cause=underlying_cause,
            priority_class=priority_class,
            replica_role=self.replica_role,
        ).inc()

    def queue_gauges(self, queues: Iterable[QueueFigures]) -> None:
        """Kueue's per-ClusterQueue gauges from one snapshot's figures; series of queues, flavors
        or resources that are gone are removed."""
        role = self.replica_role
        seen: set[tuple[str, ...]] = set()
        for q in queues:
            if self._figures.get(q.name) == (role, q):
                seen.update((q.cohort, q.name, flavor, resource, role) for flavor, resource in q.resources)
                continue
            self._figures[q.name] = (role, q)
            self._queues.add(q.name)  # forget_cluster_queues removes its series when it goes
            for status, value in (("active", q.pending_active), ("inadmissible", q.pending_inadmissible)):
                self.k_pending.labels(cluster_queue=q.name, status=status, replica_role=role).set(value)
            self.k_reserving.labels(cluster_queue=q.name, replica_role=role).set(q.reserving)
            self.k_admitted_active.labels(cluster_queue=q.name, replica_role=role).set(q.reserving)
            for status in ("pending", "active", "terminated"):
                self.k_status.labels(cluster_queue=q.name, status=status, replica_role=role).set(
                    1 if status == q.status else 0
                )
            for (flavor, resource), figures in q.resources.items():
                labels = (q.cohort, q.name, flavor, resource, role)
                seen.add(labels)
                used, nominal, borrowing, lending = figures
                self.k_usage.labels(*labels).set(used)
                self.k_reservation.labels(*labels).set(used)
                self.k_nominal.labels(*labels).set(nominal)
                if borrowing is not None:
                    self.k_borrowing.labels(*labels).set(borrowing)
                if lending is not None:
                    self.k_lending.labels(*labels).set(lending)
        quota_gauges = (self.k_usage, self.k_reservation, self.k_nominal, self.k_borrowing, self.k_lending)
        _remove_series(quota_gauges, self._quota_series - seen)
        self._quota_series = seen

    def weighted_shares(self, queues: Mapping[str, tuple[str, float]], cohorts: Mapping[str, float]) -> None:
        """The weighted-share gauges: ClusterQueue -> (cohort, precise share), Cohort -> share
        (both empty with fair sharing off, as Kueue then reports none). Series that are gone are removed."""
        role = self.replica_role
        seen: dict[Gauge, set[tuple[str, ...]]] = {
            self.weighted_share: set(),
            self.k_weighted_share: set(),
            self.k_cohort_weighted_share: set(),
        }
        for name, (cohort, share) in queues.items():
            # Kueue reports a ClusterQueue's infinite share as NaN, and a Cohort's as it is.
            value = math.nan if share == math.inf else share
            self.weighted_share.labels(name, cohort).set(value)
            self.k_weighted_share.labels(name, cohort, role).set(value)
            seen[self.weighted_share].add((name, cohort))
            seen[self.k_weighted_share].add((name, cohort, role))
        for name, share in cohorts.items():
            self.k_cohort_weighted_share.labels(name, role).set(share)
            seen[self.k_cohort_weighted_share].add((name, role))
        for gauge, labels in seen.items():
            _remove_series((gauge,), self._share_series.get(gauge, set()) - labels)
        self._share_series = seen

    def preemption_limits(self, figures: Mapping[str, tuple[int, int]]) -> None:
        """Per PreemptionLimit: (preemptions in the window for its most used key, its limit); the
        series of limits gone are removed."""
        for name, (used, allowed) in figures.items():
            self.limit_used.labels(preemption_limit=name).set(used)
            self.limit_allowed.labels(preemption_limit=name).set(allowed)
        _remove_series((self.limit_used, self.limit_allowed), [(name,) for name in self._limits - set(figures)])
        self._limits = set(figures)

    def forget_cluster_queues(self, existing: set[str]) -> None:
        """Removes the series of ClusterQueues that no longer exist, as Kueue does on deletion."""
        for name in self._queues - existing:
            self._figures.pop(name, None)
            self.pending.remove_by_labels({"cluster_queue": name})
            self.admitted.remove_by_labels({"cluster_queue": name})
            self.evicted.remove_by_labels({"cluster_queue": name})
            self.preempted.remove_by_labels({"preempting_cluster_queue": name})
            for family in (
                self.k_admitted,
                self.k_reserved,
                self.k_admission_wait,
                self.k_reserved_wait,
                self.k_checks_wait,
                self.k_evicted,
                self.k_pending,
                self.k_reserving,
                self.k_admitted_active,
                self.k_status,
            ):
                family.remove_by_labels({"cluster_queue": name})
            self.k_preempted.remove_by_labels({"preempting_cluster_queue": name})
        self._queues = set(existing)


def _remove_series(gauges: Iterable[Gauge], gone: Iterable[tuple[str, ...]]) -> None:
    """Removes these label sets from each gauge; one a gauge never had (an optional figure) is skipped."""
    for labels in gone:
        for gauge in gauges:
            with contextlib.suppress(KeyError):
                gauge.remove(*labels)


@dataclass(frozen=True)
class QueueFigures:
    """What Kueue's per-ClusterQueue gauges report, for one ClusterQueue."""

    name: str
    cohort: str
    status: str
    """pending (inactive), active, or terminated."""
    pending_active: int
    pending_inadmissible: int
    reserving: int
    resources: dict[tuple[str, str], tuple[float, float, float | None, float | None]]
    """(flavor, resource) -> (used, nominal, borrowing limit, lending limit), in Kueue's units
    (cpu in cores, memory in bytes)."""
