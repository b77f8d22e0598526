"""Kueue's Configuration file (`config.kueue.x-k8s.io/v1beta2`, and `v1beta1`), read strictly as
Kueue reads it (an unknown field is an error), checked as Kueue checks it
(pkg/config/validation.go), and turned into what this operator applies: `KueueSettings`, with
every field it does not apply named once."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, Strict, ValidationError

from ..api.duration import DurationError, parse_nanoseconds
from ..api.meta import KubeModel, LabelSelector, problem
from ..api.objects import describe
from ..engine.fair_sharing import VALID_STRATEGY_SETS
from ..engine.pods_ready import WaitForPodsReady as WaitForPodsReadySettings
from ..jobs import framework
from .feature_gates import KUEUE_GATES

GROUP = "config.kueue.x-k8s.io"
VERSIONS = ("v1beta2", "v1beta1")
KIND = "Configuration"

KUEUE_FRAMEWORKS: tuple[str, ...] = (
    "batch/job",
    "kubeflow.org/mpijob",
    "ray.io/rayjob",
    "ray.io/raycluster",
    "ray.io/rayservice",
    "jobset.x-k8s.io/jobset",
    "kubeflow.org/paddlejob",
    "kubeflow.org/pytorchjob",
    "kubeflow.org/tfjob",
    "kubeflow.org/xgboostjob",
    "kubeflow.org/jaxjob",
    "trainer.kubeflow.org/trainjob",
    "workload.codeflare.dev/appwrapper",
    "pod",
    "deployment",
    "statefulset",
    "leaderworkerset.x-k8s.io/leaderworkerset",
    "sparkoperator.k8s.io/sparkapplication",
)
"""Kueue v0.19.2's built-in integrations (its jobframework registry): what
`integrations.frameworks` may name."""

DEFAULT_FRAMEWORKS = ("batch/job",)
"""What Kueue manages when the file names no framework."""

_MUST_NOT_BE_NEGATIVE = "must be greater than or equal to 0"


class ConfigurationError(ValueError):
    """A Configuration file that Kueue would refuse; the message names the file and the fields."""


def _go_duration(value: str) -> str:
    """A metav1.Duration as Go's time.ParseDuration reads it (a sign allowed: Kueue's checks,
    not the parser, refuse negative ones)."""
    try:
        parse_nanoseconds(value.removeprefix("-").removeprefix("+"))
    except DurationError as exc:
        raise problem(str(exc)) from None
    return value


GoDuration = Annotated[str, Strict(), AfterValidator(_go_duration)]


def nanoseconds(text: str) -> int:
    """A GoDuration's value, sign included."""
    return -parse_nanoseconds(text[1:]) if text.startswith("-") else parse_nanoseconds(text.removeprefix("+"))


class LeaderElection(KubeModel):
    """component-base's LeaderElectionConfiguration."""

    leader_elect: bool | None = None
    lease_duration: GoDuration | None = None
    renew_deadline: GoDuration | None = None
    retry_period: GoDuration | None = None
    resource_lock: str | None = None
    resource_name: str | None = None
    resource_namespace: str | None = None


class Webhook(KubeModel):
    port: int | None = None
    host: str | None = None
    cert_dir: str | None = None


class CustomLabel(KubeModel):
    name: str
    source_label_key: str | None = None
    source_annotation_key: str | None = None
    source_kind: str | None = None
    tracked_values: list[str] | None = None


class LocalQueueMetrics(KubeModel):
    enable: bool | None = None
    local_queue_selector: LabelSelector | None = None


class Metrics(KubeModel):
    bind_address: str | None = None
    enable_cluster_queue_resources: bool | None = None
    custom_labels: list[CustomLabel] | None = None
    local_queue_metrics: LocalQueueMetrics | None = None


class Health(KubeModel):
    health_probe_bind_address: str | None = None
    readiness_endpoint_name: str | None = None
    liveness_endpoint_name: str | None = None


class ControllerSpec(KubeModel):
    group_kind_concurrency: dict[str, int] | None = None
    cache_sync_timeout: int | None = None
    """A Go time.Duration in JSON: nanoseconds."""


class TLS(KubeModel):
    min_version: str | None = None
    cipher_suites: list[str] | None = None
    curve_preferences: list[int] | None = None


class RequeuingStrategy(KubeModel):
    timestamp: str | None = None
    backoff_limit_count: int | None = None
    backoff_base_seconds: int | None = None
    backoff_max_seconds: int | None = None


class WaitForPodsReady(KubeModel):
    enable: bool | None = None
    """v1beta1 only: in v1beta2 the section's presence enables it."""
    timeout: GoDuration | None = None
    block_admission: bool | None = None
    requeuing_strategy: RequeuingStrategy | None = None
    recovery_timeout: GoDuration | None = None


class ClientConnection(KubeModel):
    qps: float | None = None
    burst: int | None = None


class PodOptions(KubeModel):
    """v1beta1 only."""

    namespace_selector: LabelSelector | None = None
    pod_selector: LabelSelector | None = None


class Integrations(KubeModel):
    frameworks: list[str] | None = None
    external_frameworks: list[str] | None = None
    label_keys_to_copy: list[str] | None = None
    pod_options: PodOptions | None = None


class FairSharingConfig(KubeModel):
    enable: bool | None = None
    """v1beta1 only: in v1beta2 the section's presence enables it."""
    preemption_strategies: list[str] | None = None


class AdmissionFairSharing(KubeModel):
    usage_half_life_time: GoDuration | None = None
    usage_sampling_interval: GoDuration | None = None
    resource_weights: dict[str, float] | None = None


class ResourceTransformation(KubeModel):
    input: str
    strategy: str | None = None
    multiply_by: str | None = None
    outputs: dict[str, Any] | None = None


class Resources(KubeModel):
    quota_check_strategy: str | None = None
    exclude_resource_prefixes: list[str] | None = None
    transformations: list[ResourceTransformation] | None = None
    device_class_mappings: list[dict[str, Any]] | None = None


class WorkloadRetentionPolicy(KubeModel):
    after_finished: GoDuration | None = None
    after_deactivated_by_kueue: GoDuration | None = None


class ObjectRetentionPolicies(KubeModel):
    workloads: WorkloadRetentionPolicy | None = None


class VisibilityServer(KubeModel):
    bind_address: str | None = None
    bind_port: int | None = None


class InternalCertManagement(KubeModel):
    enable: bool | None = None
    webhook_service_name: str | None = None
    webhook_secret_name: str | None = None


class MultiKueueExternalFramework(KubeModel):
    name: str


class MultiKueue(KubeModel):
    gc_interval: GoDuration | None = None
    origin: str | None = None
    worker_lost_timeout: GoDuration | None = None
    dispatcher_name: str | None = None
    external_frameworks: list[MultiKueueExternalFramework] | None = None
    cluster_profile: dict[str, Any] | None = None
    incremental_dispatcher_config: dict[str, Any] | None = None


class ClusterQueueVisibility(KubeModel):
    max_count: int | None = None


class QueueVisibility(KubeModel):
    """v1beta1 only."""

    cluster_queues: ClusterQueueVisibility | None = None
    update_interval_seconds: int | None = None


class Configuration(KubeModel):
    """Kueue's Configuration, both versions' fields; `_ONLY_IN` names the ones a version lacks."""

    api_version: str
    kind: str
    namespace: str | None = None
    webhook: Webhook | None = None
    leader_election: LeaderElection | None = None
    metrics: Metrics | None = None
    health: Health | None = None
    pprof_bind_address: str | None = None
    controller: ControllerSpec | None = None
    tls: TLS | None = None
    manage_jobs_without_queue_name: bool | None = None
    managed_jobs_namespace_selector: LabelSelector | None = None
    internal_cert_management: InternalCertManagement | None = None
    wait_for_pods_ready: WaitForPodsReady | None = None
    client_connection: ClientConnection | None = None
    integrations: Integrations | None = None
    multi_kueue: MultiKueue | None = None
    fair_sharing: FairSharingConfig | None = None
    admission_fair_sharing: AdmissionFairSharing | None = None
    resources: Resources | None = None
    feature_gates: dict[str, Annotated[bool, Strict()]] | None = None
    object_retention_policies: ObjectRetentionPolicies | None = None
    visibility_server: VisibilityServer | None = None
    queue_visibility: QueueVisibility | None = None


_ONLY_IN: Mapping[str, tuple[tuple[str, ...], ...]] = {
    # Fields one version has and the other does not (an unknown field there, as Kueue's strict
    # decoding says).
    "v1beta2": (
        ("waitForPodsReady", "enable"),
        ("fairSharing", "enable"),
        ("integrations", "podOptions"),
        ("queueVisibility",),
    ),
    "v1beta1": (
        ("resources", "quotaCheckStrategy"),
        ("visibilityServer",),
        ("multiKueue", "clusterProfile"),
        ("multiKueue", "incrementalDispatcherConfig"),
    ),
}


@dataclass(frozen=True)
class Ignored:
    """A field the file sets that this operator does not apply."""

    path: str
    why: str
    decisions: bool = False
    """True when Kueue would decide differently with it (admission, eviction, quota): the
    offline commands name these too."""

    def __str__(self) -> str:
        return f"{self.path}: {self.why}"


@dataclass(frozen=True)
class KueueSettings:
    """What a Configuration file sets that this operator applies. None: the file leaves it to
    the operator's own default (or the flag)."""

    source: str
    version: str
    namespace: str | None = None
    integrations: tuple[str, ...] | None = None
    """Kueue's framework names this operator integrates (unknown ones are in `ignored`)."""
    label_keys_to_copy: tuple[str, ...] | None = None
    external_frameworks: tuple[tuple[str, str], ...] = ()
    """integrations.externalFrameworks as (apiVersion, kind): the kinds whose controllers stop
    their own jobs and give back their evicted Workloads' quota."""
    managed_jobs_namespace_selector: LabelSelector | None = None
    fair_sharing: tuple[str, ...] | None = None
    """The preemption strategies when fair sharing is on; None: off."""
    feature_gates: Mapping[str, bool] | None = None
    qps: float | None = None
    burst: int | None = None
    wait_for_pods_ready: WaitForPodsReadySettings | None = None
    """On, with Kueue's defaults for what the file leaves out (v1beta2: always, as Kueue's
    defaulting adds the section, unless the DisableWaitForPodsReady gate is on; v1beta1: with
    `enable: true`); None: off."""
    leader_election: bool | None = None
    lease_seconds: int | None = None
    lease_name: str | None = None
    lease_namespace: str | None = None
    metrics_host: str | None = None
    metrics_port: int | None = None
    webhook_host: str | None = None
    webhook_port: int | None = None
    visibility_host: str | None = None
    visibility_port: int | None = None
    ignored: tuple[Ignored, ...] = field(default=())


def load(path: Path) -> KueueSettings:
    """The file read, checked and mapped; ConfigurationError names the file and every field
    that is wrong."""
    source = str(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigurationError(f"{source}: cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigurationError(f"{source}: is not UTF-8 text") from None
    return parse(text, source)


def parse(text: str, source: str = "<config>") -> KueueSettings:
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        reason = getattr(exc, "problem", None) or str(exc)
        raise ConfigurationError(f"{source}: not valid YAML{where}: {reason}") from None
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise ConfigurationError(f"{source}: expected one Configuration object (a mapping), found {len(documents)}")
    body = documents[0]
    api_version, kind = body.get("apiVersion"), body.get("kind")
    versions = ", ".join(f"{GROUP}/{v}" for v in VERSIONS)
    if kind != KIND or not isinstance(api_version, str) or api_version not in {f"{GROUP}/{v}" for v in VERSIONS}:
        raise ConfigurationError(
            f"{source}: apiVersion {api_version!s} kind {kind!s} is not Kueue's Configuration ({versions}, kind {KIND})"
        )
    version = api_version.rpartition("/")[2]
    try:
        config = Configuration.model_validate(body)
    except ValidationError as exc:
        raise ConfigurationError(f"{source}: " + "; ".join(describe(e) for e in exc.errors())) from None
    errors = [f"{'.'.join(p)}: unknown field" for p in _ONLY_IN[version] if _has(body, p)]
    if errors:
        raise ConfigurationError(f"{source}: " + "; ".join(errors) + f" (in {api_version})")
    return _settings(config, body, source, version)


def _has(body: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    node: Any = body
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return False
        node = node[key]
    return True


_ADDRESS = re.compile(r"^(?P<host>\[[^\]]*\]|[^:]*):(?P<port>[0-9]+)$")


def _address(text: str) -> tuple[str, int] | None:
    """host:port as Go's net.Listen takes it (":8080" is every address); None if not one."""
    matched = _ADDRESS.match(text)
    if matched is None or not 0 < int(matched["port"]) < 65536:
        return None
    return matched["host"].strip("[]") or "0.0.0.0", int(matched["port"])


def _settings(config: Configuration, body: Mapping[str, Any], source: str, version: str) -> KueueSettings:
    errors: list[str] = []
    ignored: list[Ignored] = []
    values: dict[str, Any] = {}

    def ignore(path: tuple[str, ...], why: str, decisions: bool = False) -> None:
        if _has(body, path):
            ignored.append(Ignored(".".join(path), why, decisions))

    values["namespace"] = config.namespace

    # Integrations: Kueue's defaults and checks, then what this operator integrates.
    integrations = config.integrations or Integrations()
    frameworks = integrations.frameworks or list(DEFAULT_FRAMEWORKS)
    seen: set[str] = set()
    ours: list[str] = []
    for index, name in enumerate(frameworks):
        at = f"integrations.frameworks[{index}]"
        if name not in KUEUE_FRAMEWORKS:
            supported = ", ".join(f'"{n}"' for n in KUEUE_FRAMEWORKS)
            errors.append(f'{at}: Unsupported value: "{name}": supported values: {supported}')
        elif name in seen:
            errors.append(f'{at}: Duplicate value: "{name}"')
        elif name not in framework.INTEGRATIONS:
            ignored.append(Ignored(at, f"{name} is not integrated here: its jobs are not queued", decisions=True))
        else:
            ours.append(name)
        seen.add(name)
    values["integrations"] = tuple(ours)
    external: list[tuple[str, str]] = []
    for index, name in enumerate(integrations.external_frameworks or ()):
        if not re.fullmatch(r"[^.]+\.[^.]+\..+", name):
            errors.append(
                f'integrations.externalFrameworks[{index}]: Invalid value: "{name}": must be format, '
                "'Kind.version.group.com'"
            )
            continue
        kind_name, kind_version, group = name.split(".", 2)  # as Kueue's schema.ParseKindArg reads it
        external.append((f"{group}/{kind_version}", kind_name))
    values["external_frameworks"] = tuple(external)
    ignore(("integrations", "podOptions"), "not applied (deprecated in Kueue): use managedJobsNamespaceSelector")
    if integrations.label_keys_to_copy is not None:
        values["label_keys_to_copy"] = tuple(integrations.label_keys_to_copy)

    values["managed_jobs_namespace_selector"] = config.managed_jobs_namespace_selector
    if config.manage_jobs_without_queue_name:
        ignored.append(
            Ignored(
                "manageJobsWithoutQueueName",
                "not applied: only jobs with a queue name are managed",
                decisions=True,
            )
        )

    # Fair sharing: v1beta2 turns it on by the section's presence, v1beta1 by `enable`.
    sharing = config.fair_sharing
    if sharing is not None and (version == "v1beta2" or sharing.enable):
        strategies = tuple(sharing.preemption_strategies or ())
        if not strategies and version == "v1beta1":
            strategies = VALID_STRATEGY_SETS[2]
        if not strategies:
            errors.append("fairSharing.preemptionStrategies: Required value: must be specified")
        elif strategies not in VALID_STRATEGY_SETS:
            supported = ", ".join(f'"{",".join(s)}"' for s in VALID_STRATEGY_SETS)
            errors.append(
                f"fairSharing.preemptionStrategies: Unsupported value: {list(strategies)}: supported values: {supported}"
            )
        values["fair_sharing"] = strategies

    if config.feature_gates is not None:
        for name in config.feature_gates:
            if name not in KUEUE_GATES:
                errors.append(f"featureGates: Invalid value: unrecognized feature gate: {name}")
        values["feature_gates"] = dict(config.feature_gates)

    if config.client_connection is not None:
        if config.client_connection.qps is not None:
            if config.client_connection.qps < 0:
                errors.append(
                    f"clientConnection.qps: Invalid value: {config.client_connection.qps}: {_MUST_NOT_BE_NEGATIVE}"
                )
            values["qps"] = config.client_connection.qps
        if config.client_connection.burst is not None:
            if config.client_connection.burst < 1:
                errors.append(
                    f"clientConnection.burst: Invalid value: {config.client_connection.burst}: must be at least 1"
                )
            values["burst"] = config.client_connection.burst

    _controller_manager(config, values, errors, ignore)
    values["wait_for_pods_ready"] = _wait_for_pods_ready(config, version, errors)
    if (config.feature_gates or {}).get("DisableWaitForPodsReady"):
        values["wait_for_pods_ready"] = None

    decisions = "not applied: this operator does not implement it"
    ignore(("admissionFairSharing",), "not applied: heads are ordered by priority and age, not by usage", True)
    ignore(("resources", "excludeResourcePrefixes"), decisions, True)
    ignore(("resources", "transformations"), decisions, True)
    ignore(("resources", "deviceClassMappings"), decisions, True)
    ignore(("resources", "quotaCheckStrategy"), decisions, True)
    ignore(("objectRetentionPolicies",), "not applied: finished and deactivated Workloads are kept")
    ignore(("multiKueue",), "not applied: this operator does not dispatch to other clusters")
    ignore(("internalCertManagement",), "not applied: the operator always makes its webhooks' certificate")
    _visibility_server(config, values, errors)
    ignore(
        ("queueVisibility",),
        "not applied: v1beta1's ClusterQueue status snapshot (the visibility API serves positions)",
    )
    _checks(config, errors)
    if errors:
        raise ConfigurationError(f"{source}: " + "; ".join(errors))
    return KueueSettings(source=source, version=version, ignored=tuple(ignored), **values)


def _visibility_server(config: Configuration, values: dict[str, Any], errors: list[str]) -> None:
    """visibilityServer.bindAddress and .bindPort, checked as Kueue checks them."""
    server = config.visibility_server
    if server is None:
        return
    if server.bind_address is not None:
        try:
            ipaddress.ip_address(server.bind_address)
        except ValueError:
            errors.append(
                f'visibilityServer.bindAddress: Invalid value: "{server.bind_address}": must be a valid IP address'
            )
        else:
            values["visibility_host"] = server.bind_address
    if server.bind_port is not None:
        if not 1 <= server.bind_port <= 65535:
            errors.append(
                f"visibilityServer.bindPort: Invalid value: {server.bind_port}: must be a valid port number (1-65535)"
            )
        else:
            values["visibility_port"] = server.bind_port


def _controller_manager(config: Configuration, values: dict[str, Any], errors: list[str], ignore: Any) -> None:
    """The controller-runtime manager's sections: leader election, metrics and webhook addresses."""
    election = config.leader_election
    if election is not None:
        values["leader_election"] = election.leader_elect
        if election.lease_duration is not None:
            seconds = nanoseconds(election.lease_duration) / 1e9
            if seconds < 2:
                errors.append(
                    f'leaderElection.leaseDuration: Invalid value: "{election.lease_duration}": must be at least 2s'
                )
            values["lease_seconds"] = max(2, round(seconds))
        if election.resource_lock not in (None, "leases"):
            errors.append(
                f'leaderElection.resourceLock: Unsupported value: "{election.resource_lock}": supported values: "leases"'
            )
        values["lease_name"] = election.resource_name
        values["lease_namespace"] = election.resource_namespace
    derived = "not applied: derived from the lease duration"
    ignore(("leaderElection", "renewDeadline"), derived)
    ignore(("leaderElection", "retryPeriod"), derived)

    metrics = config.metrics
    if metrics is not None and metrics.bind_address is not None:
        if metrics.bind_address == "0":
            ignore(("metrics", "bindAddress"), "not applied: /healthz and /readyz are served beside /metrics")
        else:
            address = _address(metrics.bind_address)
            if address is None:
                errors.append(f'metrics.bindAddress: Invalid value: "{metrics.bind_address}": must be host:port')
            else:
                values["metrics_host"], values["metrics_port"] = address
    unsupported = "not applied: the operator's metrics are not configurable"
    ignore(("metrics", "enableClusterQueueResources"), unsupported)
    ignore(("metrics", "customLabels"), unsupported)
    ignore(("metrics", "localQueueMetrics"), unsupported)
    ignore(("health",), "not applied: /healthz and /readyz are served on the metrics address")
    ignore(("pprofBindAddress",), "not applied: use run --cpu-profile")
    ignore(("controller",), "not applied: one scheduling loop serves every kind")
    ignore(("tls",), "not applied: the webhooks use Python's default TLS settings")

    webhook = config.webhook
    if webhook is not None:
        if webhook.port is not None:
            if not 0 < webhook.port < 65536:
                errors.append(f"webhook.port: Invalid value: {webhook.port}: must be a valid port number (1-65535)")
            values["webhook_port"] = webhook.port
        values["webhook_host"] = webhook.host or None
    ignore(("webhook", "certDir"), "not applied: the certificate is made and kept in a private temporary folder")


def _wait_for_pods_ready(config: Configuration, version: str, errors: list[str]) -> WaitForPodsReadySettings | None:
    """Kueue's waitForPodsReady, checked as Kueue checks it. In v1beta2 it is on unless the
    DisableWaitForPodsReady gate is (Kueue's defaulting adds the section with a 30 min timeout);
    in v1beta1 only with `enable: true`."""
    ready = config.wait_for_pods_ready
    if version == "v1beta1" and (ready is None or not ready.enable):
        return None
    ready = ready or WaitForPodsReady()
    at = "waitForPodsReady"
    defaults = WaitForPodsReadySettings()
    timeout = defaults.timeout
    if ready.timeout is not None:
        nanos = nanoseconds(ready.timeout)
        if nanos < 0:
            errors.append(f'{at}.timeout: Invalid value: "{ready.timeout}": {_MUST_NOT_BE_NEGATIVE}')
        elif nanos > 0:  # 0 is Kueue's "unset": the default
            timeout = timedelta(microseconds=nanos // 1000)
    recovery: timedelta | None = timeout
    if ready.recovery_timeout is not None:
        nanos = nanoseconds(ready.recovery_timeout)
        if nanos < 0:
            errors.append(f'{at}.recoveryTimeout: Invalid value: "{ready.recovery_timeout}": {_MUST_NOT_BE_NEGATIVE}')
        recovery = timedelta(microseconds=nanos // 1000) if nanos > 0 else None
    strategy = ready.requeuing_strategy or RequeuingStrategy()
    if strategy.timestamp is not None and strategy.timestamp not in ("Creation", "Eviction"):
        errors.append(
            f'{at}.requeuingStrategy.timestamp: Unsupported value: "{strategy.timestamp}": '
            'supported values: "Creation", "Eviction"'
        )
    for name in ("backoff_limit_count", "backoff_base_seconds", "backoff_max_seconds"):
        value = getattr(strategy, name)
        if value is not None and value < 0:
            wire = re.sub(r"_(\w)", lambda m: m[1].upper(), name)
            errors.append(f"{at}.requeuingStrategy.{wire}: Invalid value: {value}: {_MUST_NOT_BE_NEGATIVE}")
    return WaitForPodsReadySettings(
        timeout=timeout,
        recovery_timeout=recovery,
        block_admission=bool(ready.block_admission),
        requeuing_timestamp=strategy.timestamp or defaults.requeuing_timestamp,
        backoff_limit_count=strategy.backoff_limit_count,
        backoff_base_seconds=defaults.backoff_base_seconds
        if not strategy.backoff_base_seconds
        else strategy.backoff_base_seconds,
        backoff_max_seconds=defaults.backoff_max_seconds
        if not strategy.backoff_max_seconds
        else strategy.backoff_max_seconds,
    )


def _checks(config: Configuration, errors: list[str]) -> None:
    """Kueue's other checks of fields this operator does not apply (so a file Kueue refuses is
    refused here too)."""
    retention = config.object_retention_policies
    if retention is not None and retention.workloads is not None:
        for name, value in (
            ("afterFinished", retention.workloads.after_finished),
            ("afterDeactivatedByKueue", retention.workloads.after_deactivated_by_kueue),
        ):
            if value is not None and nanoseconds(value) < 0:
                errors.append(
                    f'objectRetentionPolicies.workloads.{name}: Invalid value: "{value}": {_MUST_NOT_BE_NEGATIVE}'
                )
    resources = config.resources
    if resources is not None:
        if resources.quota_check_strategy not in (None, "BlockUndeclared", "IgnoreUndeclared"):
            errors.append(
                f'resources.quotaCheckStrategy: Unsupported value: "{resources.quota_check_strategy}": '
                'supported values: "BlockUndeclared", "IgnoreUndeclared"'
            )
        for index, transformation in enumerate(resources.transformations or ()):
            if transformation.strategy not in (None, "Retain", "Replace"):
                errors.append(
                    f'resources.transformations[{index}].strategy: Unsupported value: "{transformation.strategy}": '
                    'supported values: "Retain", "Replace"'
                )
    server = config.visibility_server
    if server is not None and server.bind_port is not None and not 0 < server.bind_port < 65536:
        errors.append(
            f"visibilityServer.bindPort: Invalid value: {server.bind_port}: must be a valid port number (1-65535)"
        )
