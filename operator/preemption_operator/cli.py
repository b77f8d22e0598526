"""The `preemption-operator` command: `run`, `simulate`, `lint`, `explain`, and the generators `crds` and `rbac`."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from . import __version__
from .kubectl.commands import list_group, resume, stop

if TYPE_CHECKING:
    from .engine.fair_sharing import FairSharing


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="preemption-operator")
def cli() -> None:
    """A Kueue-compatible preemption engine: admits workloads against quota, chooses victims, explains why."""


def generator_options(option: str, default: Path, help: str) -> Callable[[Any], Any]:
    """The options of a command that generates files: where they go (a folder when `option` is
    --output-dir) and --check."""
    folder = option == "--output-dir"

    def add(command: Any) -> Any:
        command = click.option(
            "--check", is_flag=True, help="Write nothing; exit 1 if what is there differs from what would be written."
        )(command)
        place = click.Path(file_okay=not folder, dir_okay=folder, path_type=Path)
        return click.option(option, type=place, default=default, show_default=True, help=help)(command)

    return add


def _check(files: dict[Path, str], where: Path, command: str) -> None:
    """Says whether generated files are what would be written now; exits 1 if not."""
    stale = [str(path) for path, text in files.items() if not path.is_file() or path.read_text() != text]
    if stale:
        click.echo(f"stale: {', '.join(stale)}; run `{command}`", err=True)
        sys.exit(1)
    click.echo(f"{where}: up to date")


INTEGRATIONS_HELP = (
    "Job kinds to queue, comma-separated, as Kueue's integrations.frameworks names them: {known}. Default: "
    "all of them, each once its CRD is installed (a missing CRD is watched for). '' for none: Workloads only, "
    "their quota given back at eviction."
)


class _IntegrationsOption(click.Option):
    """--integrations, whose help names the integrations known (the registry is read only when
    the help is shown)."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        from .jobs import framework

        self.help = INTEGRATIONS_HELP.format(known=", ".join(framework.INTEGRATIONS))
        return super().get_help_record(ctx)


LABEL_KEYS_TO_COPY = click.option(
    "--label-keys-to-copy",
    default="",
    help="Job labels copied to the Workloads made for jobs, comma-separated (Kueue's labelKeysToCopy; "
    "PreemptionConfig selectors match Workload labels). Default: none.",
)


@cli.command()
@generator_options("--output-dir", Path("crds"), "Folder to write the CRD files to.")
def crds(output_dir: Path, check: bool) -> None:
    """Generate the CustomResourceDefinitions from the API models."""
    from .api import crdgen, kinds

    if check:
        _check(
            {output_dir / crdgen.file_name(m): crdgen.render(m) for m in kinds.CRDS},
            output_dir,
            f"preemption-operator crds --output-dir {output_dir}",
        )
        return
    for path in crdgen.write_all(output_dir):
        click.echo(f"wrote {path}")


@cli.command()
@generator_options(
    "--output",
    Path("config/rbac/cluster_role.yaml"),
    "The ClusterRole file to write (the Helm chart's: charts/preemption-operator/templates/clusterrole.yaml).",
)
def rbac(output: Path, check: bool) -> None:
    """Generate the operator's ClusterRole from what it does and the job integrations it knows."""
    from .controller import rbac as cluster_role

    if check:
        _check({output: cluster_role.render()}, output, f"preemption-operator rbac --output {output}")
        return
    output.write_text(cluster_role.render())
    click.echo(f"wrote {output}")


def fair_sharing_options(command: Any) -> Any:
    """--fair-sharing and --fair-sharing-strategies (Kueue's Configuration fairSharing)."""
    command = click.option(
        "--fair-sharing-strategies",
        metavar="STRATEGY[,STRATEGY]",
        default=None,
        help="Fair preemption strategies, tried in order (implies --fair-sharing): LessThanOrEqualToFinalShare, "
        "LessThanInitialShare, or both in that order (Kueue's default).",
    )(command)
    return click.option(
        "--fair-sharing",
        is_flag=True,
        help="Kueue's fair sharing: ClusterQueues and Cohorts get a Dominant Resource Share (weighted by "
        "spec.fairSharing.weight), written to their status.fairSharing; heads are admitted lowest share first "
        "and preemption follows the shares (InCohortFairSharing) instead of borrowWithinCohort.",
    )(command)


def _fair_sharing(enabled: bool, strategies: str | None) -> FairSharing:
    """The switch from the flags; exit 2 naming the flag when the strategies are not Kueue's."""
    from .engine import fair_sharing

    if strategies is None:
        return fair_sharing.FairSharing(enabled=True) if enabled else fair_sharing.OFF
    try:
        return fair_sharing.FairSharing(enabled=True, strategies=fair_sharing.parse_strategies(strategies))
    except ValueError as exc:
        click.echo(f"error: --fair-sharing-strategies: {exc}", err=True)
        sys.exit(2)


CONFIG = click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="Kueue's Configuration file (config.kueue.x-k8s.io/v1beta2 or v1beta1), read as Kueue reads it: the "
    "fields that map to this operator are applied (a flag given on the command line wins), each field not "
    "applied is named in a warning, and a file Kueue would refuse exits 2.",
)


def _kueue_config(path: Path | None) -> Any:
    """The Configuration file's settings (None without --config); exit 2 naming the fields."""
    if path is None:
        return None
    from .controller import configuration

    try:
        return configuration.load(path)
    except configuration.ConfigurationError as exc:
        click.echo(f"error: --config {exc}", err=True)
        sys.exit(2)


def _given(name: str) -> bool:
    """Whether the option was given (command line or environment), not left to its default."""
    from click.core import ParameterSource

    source = click.get_current_context().get_parameter_source(name)
    return source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def _sharing_of(settings: Any, enabled: bool, strategies: str | None) -> FairSharing:
    """Fair sharing from the flags when either is given, else from the Configuration file."""
    if settings is None or _given("fair_sharing") or _given("fair_sharing_strategies"):
        return _fair_sharing(enabled, strategies)
    if settings.fair_sharing is None:
        return _fair_sharing(False, None)
    return _fair_sharing(True, ",".join(settings.fair_sharing))


def _copy_of(settings: Any, label_keys_to_copy: str) -> tuple[str, ...]:
    if settings is None or settings.label_keys_to_copy is None or _given("label_keys_to_copy"):
        return _names(label_keys_to_copy)
    return tuple(settings.label_keys_to_copy)


def _ready_of(settings: Any) -> Any:
    """waitForPodsReady from the Configuration file (None without one: off)."""
    return None if settings is None else settings.wait_for_pods_ready


def _prioritize_of(settings: Any) -> bool:
    """Kueue's PrioritizePreemptorWorkloads from the Configuration file's featureGates (on
    without one, as `run` has it)."""
    from .controller.feature_gates import prioritize_preemptors

    return prioritize_preemptors(settings.feature_gates or {} if settings is not None else {})


def _warn_offline(settings: Any) -> None:
    """What the file sets that would change Kueue's decisions and is not modelled here."""
    for item in settings.ignored if settings is not None else ():
        if item.decisions:
            click.echo(f"warning: --config {settings.source}: {item}", err=True)


@cli.command()
@click.option("--metrics-host", default="0.0.0.0", show_default=True, help="Address for /metrics, /healthz, /readyz.")
@click.option("--metrics-port", type=int, default=8080, show_default=True, help="Port for /metrics, /healthz, /readyz.")
@click.option(
    "--lease-namespace", default=None, help="Namespace of the leader-election Lease (default: the pod's, else default)."
)
@click.option(
    "--lease-name", default="preemption-operator", show_default=True, help="Name of the leader-election Lease."
)
@click.option("--lease-seconds", type=click.IntRange(min=2), default=8, show_default=True, help="Lease duration.")
@click.option("--no-leader-election", is_flag=True, help="Act as the only replica.")
@click.option(
    "--liveness-seconds",
    type=click.FloatRange(min=1),
    default=120.0,
    show_default=True,
    help="/healthz fails when the scheduling loop has not completed a pass for this long.",
)
@click.option(
    "--kube-api-qps",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Client-side limit on requests per second to the API server (0: none). Kueue's default is 50.",
)
@click.option(
    "--kube-api-burst",
    type=click.IntRange(min=1),
    default=None,
    help="Requests that may go at once under --kube-api-qps (default: twice the QPS).",
)
@click.option(
    "--max-inflight-writes",
    type=click.IntRange(min=1),
    default=None,
    help="Status writes (admissions, evictions, pending reasons) in flight at once (default: 8, as many as Kueue "
    "issues evictions at once). Fewer leave the API server more room for its other clients, such as the job "
    "controllers that finish workloads.",
)
@click.option(
    "--integrations",
    cls=_IntegrationsOption,
    default=None,
    metavar="NAME[,NAME]",
    help=INTEGRATIONS_HELP,
)
@click.option(
    "--managed-jobs-namespace-selector",
    default=None,
    metavar="SELECTOR",
    help="Kueue's managedJobsNamespaceSelector: the namespaces whose jobs are managed, as kubectl's -l takes a "
    "label selector ('team in (a,b),!sandbox') or as a LabelSelector in YAML ('{matchLabels: {team: a}}'). Jobs "
    "elsewhere are not sent to the webhooks and not reconciled. It must leave kube-system and the operator's "
    "namespace out. Default: kubernetes.io/metadata.name notin (kube-system,<the operator's namespace>).",
)
@LABEL_KEYS_TO_COPY
@click.option(
    "--no-webhooks",
    is_flag=True,
    help="Serve no admission webhooks (queued Jobs must then be created suspended). Out of a cluster they are "
    "off unless --webhook-url is given.",
)
@click.option("--webhook-port", type=int, default=9443, show_default=True, help="Port of the job webhooks (HTTPS).")
@click.option("--webhook-host", default="0.0.0.0", show_default=True, help="Address of the job webhooks.")
@click.option(
    "--webhook-service",
    default="preemption-operator-webhook",
    show_default=True,
    help="The Service in the operator's namespace through which the API server calls the webhooks.",
)
@click.option(
    "--webhook-url",
    default=None,
    metavar="URL",
    help="Where the API server calls the webhooks instead of the Service (a local run: https://127.0.0.1:9443).",
)
@click.option(
    "--no-visibility",
    is_flag=True,
    help="Do not serve Kueue's visibility API (pending workloads and their positions). Out of a cluster it is off "
    "unless --visibility-port is given.",
)
@click.option(
    "--visibility-port", type=int, default=8082, show_default=True, help="Port of the visibility API (HTTPS)."
)
@click.option("--visibility-host", default="0.0.0.0", show_default=True, help="Address of the visibility API.")
@click.option(
    "--visibility-service",
    default="preemption-operator-visibility",
    show_default=True,
    help="The Service in the operator's namespace through which kube-apiserver calls the visibility API (its "
    "APIService names it).",
)
@click.option(
    "--visibility-service-port",
    type=int,
    default=443,
    show_default=True,
    help="That Service's port, as the APIService names it.",
)
@click.option(
    "--dashboard-port",
    type=int,
    default=0,
    show_default=True,
    help="Serve the read-only dashboard on this port (0: no dashboard). Viewers log in with a bearer token and need "
    "RBAC to list ClusterQueues and Workloads and read pending workloads.",
)
@click.option(
    "--dashboard-host",
    default="127.0.0.1",
    show_default=True,
    help="Address of the dashboard (plain HTTP: reach it with kubectl port-forward).",
)
@fair_sharing_options
@click.option(
    "--feature-gates",
    default="",
    metavar="NAME=BOOL[,...]",
    help="Kueue's feature gates, accepted so that Kueue's flags still parse: they switch nothing here (what Kueue "
    "gates is always on, or named in a warning at start-up); an unknown name is refused.",
)
@click.option("--log-format", type=click.Choice(["plain", "json"]), default="plain", show_default=True)
@click.option("--verbose", "-v", is_flag=True, help="Debug logging.")
@CONFIG
@click.option(
    "--cpu-profile",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Profile the operator (cProfile, which slows it down) and write the statistics (pstats) to this file "
    "when it stops.",
)
def run(
    metrics_host: str,
    metrics_port: int,
    lease_namespace: str | None,
    lease_name: str,
    lease_seconds: int,
    no_leader_election: bool,
    liveness_seconds: float,
    kube_api_qps: float,
    kube_api_burst: int | None,
    max_inflight_writes: int | None,
    integrations: str | None,
    managed_jobs_namespace_selector: str | None,
    label_keys_to_copy: str,
    no_webhooks: bool,
    webhook_port: int,
    webhook_host: str,
    webhook_service: str,
    webhook_url: str | None,
    no_visibility: bool,
    visibility_port: int,
    visibility_host: str,
    visibility_service: str,
    visibility_service_port: int,
    dashboard_port: int,
    dashboard_host: str,
    fair_sharing: bool,
    fair_sharing_strategies: str | None,
    feature_gates: str,
    log_format: str,
    verbose: bool,
    config_file: Path | None,
    cpu_profile: Path | None,
) -> None:
    """Run the operator against the cluster of the current kubeconfig (or in-cluster config)."""
    from lightkube.core.exceptions import ConfigError

    from . import logs
    from .controller import operator
    from .controller.dashboard import DashboardSettings
    from .controller.faults import Faults, FaultSpecError
    from .controller.feature_gates import parse_feature_gates
    from .controller.visibility import VisibilitySettings
    from .controller.webhooks import WebhookSettings
    from .jobs import framework as job_framework
    from .k8s.api import load_config

    logs.configure(log_format, verbose)
    settings = _kueue_config(config_file)

    def pick(name: str, flag: Any, attribute: str | None = None) -> Any:
        """The flag when given, else the file's value when it sets one, else the flag's default."""
        value = None if settings is None or _given(name) else getattr(settings, attribute or name)
        return flag if value is None else value

    try:
        gates = _flag("--feature-gates", parse_feature_gates, feature_gates)
        if settings is not None and settings.feature_gates is not None:
            if gates:
                raise ValueError(
                    f"--config {settings.source}: featureGates: feature gates for CLI and configuration cannot both "
                    "specified"
                )
            gates = dict(settings.feature_gates)
        selector = _namespace_selector(managed_jobs_namespace_selector)
        if selector is None and settings is not None and settings.managed_jobs_namespace_selector is not None:
            selector = _checked_namespace_selector(
                settings.managed_jobs_namespace_selector,
                f"--config {settings.source}: managedJobsNamespaceSelector",
                settings.namespace,
            )
        named = None if integrations is None else _names(integrations)
        if settings is not None and not _given("integrations"):
            named = settings.integrations
        options = operator.OperatorOptions(
            metrics_host=pick("metrics_host", metrics_host),
            metrics_port=pick("metrics_port", metrics_port),
            lease_namespace=pick("lease_namespace", lease_namespace),
            lease_name=pick("lease_name", lease_name),
            leader_election=not no_leader_election
            if settings is None or settings.leader_election is None or _given("no_leader_election")
            else settings.leader_election,
            lease_seconds=pick("lease_seconds", lease_seconds),
            liveness_seconds=liveness_seconds,
            qps=pick("kube_api_qps", kube_api_qps, "qps"),
            burst=pick("kube_api_burst", kube_api_burst, "burst"),
            **({} if max_inflight_writes is None else {"max_inflight_writes": max_inflight_writes}),
            integrations=named,
            managed_jobs_namespace_selector=selector,
            label_keys_to_copy=_copy_of(settings, label_keys_to_copy),
            external_frameworks=settings.external_frameworks if settings is not None else (),
            webhooks=None
            if no_webhooks or (webhook_url is None and not operator.in_cluster())
            else WebhookSettings(
                namespace=operator.own_namespace(),
                port=pick("webhook_port", webhook_port),
                host=pick("webhook_host", webhook_host),
                service=webhook_service,
                url=webhook_url,
            ),
            visibility=None
            if no_visibility
            or (
                not _given("visibility_port")
                and (settings is None or settings.visibility_port is None)
                and not operator.in_cluster()
            )
            else VisibilitySettings(
                namespace=operator.own_namespace(),
                port=pick("visibility_port", visibility_port),
                host=pick("visibility_host", visibility_host),
                service=visibility_service,
                service_port=visibility_service_port,
            ),
            dashboard=DashboardSettings(port=dashboard_port, host=dashboard_host) if dashboard_port else None,
            fair_sharing=_sharing_of(settings, fair_sharing, fair_sharing_strategies),
            wait_for_pods_ready=None
            if settings is None or gates.get("DisableWaitForPodsReady")
            else settings.wait_for_pods_ready,
            feature_gates=gates,
            faults=Faults.from_env(),
        )
        job_framework.enabled(options.integrations)
        config = load_config()
    except (ConfigError, FaultSpecError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    if settings is not None:
        import logging

        log = logging.getLogger("preemption_operator.controller.configuration")
        log.info("read Kueue's Configuration from %s (%s)", settings.source, settings.version)
        for item in settings.ignored:
            log.warning("--config %s: %s", settings.source, item)
    operator.run(config, options, cpu_profile=cpu_profile)


def _namespace_selector(text: str | None) -> Any:
    """The parsed --managed-jobs-namespace-selector (None: Kueue's default), checked as Kueue
    checks its configuration; ValueError naming the flag."""
    if text is None:
        return None
    from .engine import selectors

    try:
        selector = selectors.parse(text)
    except ValueError as exc:
        raise ValueError(f"--managed-jobs-namespace-selector: {exc}") from None
    return _checked_namespace_selector(selector, "--managed-jobs-namespace-selector")


def _checked_namespace_selector(selector: Any, name: str, namespace: str | None = None) -> Any:
    """The selector, checked as Kueue checks its configuration (it must leave kube-system and the
    operator's namespace out); ValueError naming `name`."""
    from .controller import integrations, operator

    try:
        integrations.namespace_selector(selector, namespace or operator.own_namespace())
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    return selector


def _names(text: str) -> tuple[str, ...]:
    """A comma-separated flag's values."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _flag(name: str, parse: Any, text: str) -> Any:
    """`parse(text)`, its ValueError naming the flag."""
    try:
        return parse(text)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


CHECK_STATE = click.option(
    "--check-state",
    "check_state",
    multiple=True,
    metavar="NAME=Ready|Retry|Rejected",
    help="What-if: AdmissionCheck NAME answers this state, once per workload, when a workload holding quota waits "
    "for it (as its controller would). Repeatable.",
)
FROM_CLUSTER = click.option(
    "--from-cluster",
    is_flag=True,
    help="Read the objects from the cluster of the current kubeconfig instead of files (Jobs are read as the "
    "Workloads they have).",
)


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path, allow_dash=True))
@click.option(
    "--output",
    "-o",
    type=click.Choice(["text", "json", "yaml"]),
    default="text",
    show_default=True,
    help="Output format.",
)
@click.option(
    "--now",
    "now_text",
    metavar="RFC3339",
    help="The time the cycles run at (default: the newest time in the input; with --from-cluster, the current time).",
)
@click.option("--max-cycles", type=click.IntRange(min=1), default=100, show_default=True, help="Stop after N cycles.")
@click.option("--summary", is_flag=True, help="Counts per cycle and action, and each queue's final state (text).")
@CHECK_STATE
@FROM_CLUSTER
@LABEL_KEYS_TO_COPY
@fair_sharing_options
@CONFIG
def simulate(
    paths: tuple[Path, ...],
    output: str,
    now_text: str | None,
    max_cycles: int,
    summary: bool,
    check_state: tuple[str, ...],
    from_cluster: bool,
    label_keys_to_copy: str,
    fair_sharing: bool,
    fair_sharing_strategies: str | None,
    config_file: Path | None,
) -> None:
    """Run scheduling cycles over Kubernetes YAML (files, folders, or - for standard input) until
    nothing changes.

    Objects in files named pending.yaml arrive after the rest has settled, as the examples are
    applied to a cluster: what runs first, then what comes to preempt it."""
    from .offline import report

    skipped: list[str] = []
    result = _simulated(
        paths,
        skipped,
        from_cluster,
        now_text,
        max_cycles,
        check_state,
        (fair_sharing, fair_sharing_strategies),
        label_keys_to_copy,
        config_file,
        progress=_progress(),
    )
    if sys.stderr.isatty():
        click.echo("\r\033[K", err=True, nl=False)  # the progress line, if one was shown
    result.warnings[:0] = skipped
    click.echo(report.summary(result) if summary else report.render(result, output), nl=False)


def _simulated(
    paths: tuple[Path, ...],
    skipped: list[str],
    from_cluster: bool,
    now_text: str | None,
    max_cycles: int,
    check_state: tuple[str, ...],
    sharing_flags: tuple[bool, str | None],
    label_keys_to_copy: str,
    config_file: Path | None,
    progress: Any = None,
) -> Any:
    """The run `simulate` and `explain` share: input loaded (files skipped named in `skipped`),
    Kueue's Configuration applied with the flags winning, cycles until nothing changes."""
    from .offline import simulate as simulation

    settings = _kueue_config(config_file)
    sharing = _sharing_of(settings, *sharing_flags)
    _warn_offline(settings)
    objects, arriving = _load(paths, skipped, from_cluster, sharing.enabled, _copy_of(settings, label_keys_to_copy))
    now = _parse_now(now_text) if now_text is not None or from_cluster else simulation.input_time(objects + arriving)
    return simulation.run(
        objects,
        now,
        max_cycles,
        arriving,
        progress=progress,
        fair_sharing=sharing,
        pods_ready=_ready_of(settings),
        check_states=_check_states(check_state, objects + arriving),
        prioritize_preemptors=_prioritize_of(settings),
    )


CHECK_ANSWERS = ("Ready", "Retry", "Rejected")


def _check_states(given: tuple[str, ...], objects: list[Any]) -> dict[str, str]:
    """--check-state NAME=STATE pairs; exit 2 naming the one that is malformed or names an
    AdmissionCheck the input does not have."""
    from .api.v1beta2 import AdmissionCheck

    known = {obj.metadata.name for obj in objects if isinstance(obj, AdmissionCheck)}
    states: dict[str, str] = {}
    for text in given:
        name, sep, state = text.partition("=")
        if not sep or not name or state not in CHECK_ANSWERS:
            click.echo(
                f"error: --check-state: {text!r} is not NAME=STATE with STATE one of {', '.join(CHECK_ANSWERS)}",
                err=True,
            )
            sys.exit(2)
        if name not in known:
            found = f"; the input has {', '.join(sorted(known))}" if known else "; the input has none"
            click.echo(f"error: --check-state: no AdmissionCheck {name!r} in the input{found}", err=True)
            sys.exit(2)
        states[name] = state
    return states


def _progress() -> Any:
    """A progress line on stderr for long runs, only when stderr is a terminal."""
    if not sys.stderr.isatty():
        return None

    def show(cycle: int, actions: int) -> None:
        click.echo(f"\rcycle {cycle}, {actions} actions so far", err=True, nl=False)

    return show


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path, allow_dash=True))
@click.option(
    "--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True, help="Output format."
)
@click.option(
    "--fail-on",
    type=click.Choice(["error", "warning", "info"]),
    default="error",
    show_default=True,
    help="Exit 1 when a finding is at or above this severity.",
)
@click.option(
    "--witness",
    type=click.Path(path_type=Path, file_okay=False),
    help="Write each flap found as simulate input (its states, in order) into this folder.",
)
@FROM_CLUSTER
@LABEL_KEYS_TO_COPY
@fair_sharing_options
@CONFIG
def lint(
    paths: tuple[Path, ...],
    output: str,
    fail_on: str,
    witness: Path | None,
    from_cluster: bool,
    label_keys_to_copy: str,
    fair_sharing: bool,
    fair_sharing_strategies: str | None,
    config_file: Path | None,
) -> None:
    """Check a preemption setup (queues, cohorts, flavors, PreemptionConfigs, priority classes):
    workloads that can evict each other forever (with a witness, or a proof that none can),
    missing references, unused configs, selectors that do not build or select nothing, rules keyed
    on what users can write, rules another rule covers, rules protections leave without victims
    (docs/lint.md). Exit 0 (nothing at or above --fail-on), 1 (findings), 2 (bad input)."""
    import json

    from . import lint as linting

    settings = _kueue_config(config_file)
    sharing = _sharing_of(settings, fair_sharing, fair_sharing_strategies)
    _warn_offline(settings)
    objects, arriving = _load(paths, [], from_cluster, copy=_copy_of(settings, label_keys_to_copy))
    report = linting.lint([*objects, *arriving], witness, fair_sharing=sharing)
    if output == "json":
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        for finding in report.findings:
            click.echo(f"{finding.severity:<7} {finding.code}: {finding.message} [{', '.join(finding.objects)}]")
            if finding.witness:
                click.echo(f"        witness: {finding.witness}")
        counts = {s: sum(1 for f in report.findings if f.severity == s) for s in ("error", "warning", "info")}
        click.echo(f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info")
        click.echo(report.proof.lines() if report.proof is not None else "flapping: not analysed")
        if linting.NOT_CHECKED:
            click.echo(f"not checked yet: {', '.join(linting.NOT_CHECKED)}")
    if report.at_or_above(fail_on):  # type: ignore[arg-type]
        sys.exit(1)


def _load(
    paths: tuple[Path, ...],
    skipped: list[str],
    from_cluster: bool = False,
    fair_sharing: bool | None = None,
    copy: tuple[str, ...] = (),
) -> tuple[list[Any], list[Any]]:
    """(objects, objects arriving once the rest settled): exit 2 with the reason when unusable.
    `fair_sharing`: whether the engine runs with it (None: DRS quota values not judged here);
    `copy`: the job labels the Workloads made for jobs get, as the operator's --label-keys-to-copy
    (a live cluster's Workloads have them already)."""
    from .offline import manifests

    if bool(paths) == from_cluster:
        click.echo("error: give PATH... (files, folders or - for standard input) or --from-cluster, not both", err=True)
        sys.exit(2)
    try:
        if from_cluster:
            from .offline import cluster_state

            live = cluster_state.read()
            manifests.check(live, ["the cluster"])
            return manifests.parse(live, skipped, lenient=True, fair_sharing=fair_sharing), []
        read = manifests.read(paths)
        manifests.check(read, paths)
        later = [m for m in read if Path(m.source).name in manifests.ARRIVING]
        objects = manifests.parse(
            [m for m in read if m not in later], skipped, fair_sharing=fair_sharing, label_keys_to_copy=copy
        )
        arriving = manifests.parse(later, skipped, beside=read, fair_sharing=fair_sharing, label_keys_to_copy=copy)
    except manifests.ManifestError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    return objects, arriving


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path, allow_dash=True))
@click.option("--workload", "-w", required=True, metavar="NAMESPACE/NAME", help="The workload to explain.")
@CHECK_STATE
@FROM_CLUSTER
@LABEL_KEYS_TO_COPY
@click.option(
    "--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True, help="Output format."
)
@click.option(
    "--now",
    "now_text",
    metavar="RFC3339",
    help="The time the cycles run at (default: the newest time in the input; with --from-cluster, the current time).",
)
@click.option("--max-cycles", type=click.IntRange(min=1), default=100, show_default=True, help="Stop after N cycles.")
@fair_sharing_options
@CONFIG
def explain(
    paths: tuple[Path, ...],
    workload: str,
    check_state: tuple[str, ...],
    from_cluster: bool,
    label_keys_to_copy: str,
    output: str,
    now_text: str | None,
    max_cycles: int,
    fair_sharing: bool,
    fair_sharing_strategies: str | None,
    config_file: Path | None,
) -> None:
    """Explain one workload: its conditions, every decision about it, and for each victim search
    it took part in, what became of each candidate and why."""
    import json

    from .offline import report

    result = _simulated(
        paths,
        [],
        from_cluster,
        now_text,
        max_cycles,
        check_state,
        (fair_sharing, fair_sharing_strategies),
        label_keys_to_copy,
        config_file,
    )
    data = result.to_dict()
    known = sorted(f"{w['namespace']}/{w['name']}" for w in data["workloads"])
    if workload not in known:
        same_name = [key for key in known if key.rpartition("/")[2] == workload.rpartition("/")[2]]
        if "/" not in workload:
            hint = (
                f"write it as NAMESPACE/NAME ({', '.join(same_name)}?)" if same_name else "write it as NAMESPACE/NAME"
            )
        elif same_name:
            hint = f"did you mean {', '.join(same_name)}?"
        else:
            hint = f"the input has {len(known)}: {', '.join(known[:10])}{', ...' if len(known) > 10 else ''}"
        click.echo(f"error: --workload {workload}: no such workload in the input; {hint}", err=True)
        sys.exit(2)
    if output == "json":
        click.echo(json.dumps(report.explain_record(data, workload), indent=2))
    else:
        click.echo(report.explain(data, workload), nl=False)


@cli.command("what-if")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path, allow_dash=True))
@click.option(
    "--state",
    "state_paths",
    multiple=True,
    type=click.Path(path_type=Path, allow_dash=True),
    help="Decide on the objects in these files and folders instead of the live cluster (repeatable).",
)
@click.option(
    "--namespace", "-n", default=None, help="The namespace of objects that name none (default: the kubeconfig's)."
)
@click.option(
    "--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True, help="Output format."
)
@click.option("--now", "now_text", metavar="RFC3339", help="When it is submitted (default: the current time).")
@click.option("--max-cycles", type=click.IntRange(min=1), default=100, show_default=True, help="Stop after N cycles.")
@LABEL_KEYS_TO_COPY
@fair_sharing_options
@CONFIG
def what_if(
    files: tuple[Path, ...],
    state_paths: tuple[Path, ...],
    namespace: str | None,
    output: str,
    now_text: str | None,
    max_cycles: int,
    label_keys_to_copy: str,
    fair_sharing: bool,
    fair_sharing_strategies: str | None,
    config_file: Path | None,
) -> None:
    """What would become of FILE's job (a Job, a pod group, a JobSet, a Workload...) if it were
    submitted now, without submitting it: admitted now or when, on which flavors and topology
    domains, whom it would preempt under which rule, or why it would wait. Decides on the live
    cluster (or --state files) as the operator would."""
    import json

    from .api.meta import format_time
    from .offline import cluster_state, manifests, what_if

    settings = _kueue_config(config_file)
    sharing = _sharing_of(settings, fair_sharing, fair_sharing_strategies)
    _warn_offline(settings)
    copy = _copy_of(settings, label_keys_to_copy)
    now = _parse_now(now_text)
    try:
        if state_paths:
            state = manifests.read(state_paths)
            manifests.check(state, state_paths)
        else:
            state = cluster_state.read()
        where = namespace or _kubeconfig_namespace()
        new = manifests.read(files)
        if not new:
            raise manifests.ManifestError(f"no Kubernetes objects in {', '.join(str(f) for f in files)}")
        for manifest in new:
            meta = manifest.body.setdefault("metadata", {})
            if not isinstance(meta, dict):
                raise manifests.ManifestError(f"{manifest.source}: metadata is not a mapping")
            meta.setdefault("namespace", where)
            meta.setdefault("creationTimestamp", format_time(now))
        skipped: list[str] = []
        objects = manifests.parse(state, skipped, lenient=not state_paths, fair_sharing=sharing.enabled,
                                  label_keys_to_copy=copy)  # fmt: skip
        arriving = manifests.parse(new, skipped, beside=state, fair_sharing=sharing.enabled, label_keys_to_copy=copy)
    except manifests.ManifestError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    if not any(type(o).__name__ == "Workload" for o in arriving):
        names = "; ".join(skipped) or "nothing the engine queues"
        click.echo(f"error: {', '.join(str(f) for f in files)}: no queued job or Workload ({names})", err=True)
        sys.exit(2)
    predictions = what_if.predict(objects, arriving, now, max_cycles)
    if output == "json":
        click.echo(json.dumps([p.to_dict() for p in predictions], indent=2))
        return
    for prediction in predictions:
        click.echo(what_if.describe(prediction, now), nl=False)


def _kubeconfig_namespace() -> str:
    """The kubeconfig's namespace; `default` without one (an offline run)."""
    from .k8s.api import load_config

    try:
        return str(load_config().namespace)
    except Exception:  # no kubeconfig: lightkube's ConfigError and friends
        return "default"


def _parse_now(text: str | None) -> datetime:
    if text is None:
        return datetime.now(UTC).replace(microsecond=0)
    from .api.meta import LATEST_TIME, format_time

    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        # A time without a zone is not RFC 3339; taking it as UTC (or local time) would be a guess.
        in_range = moment.tzinfo is None or moment.astimezone(UTC) <= LATEST_TIME
    except (ValueError, OverflowError):
        click.echo(f"error: --now: {text!r} is not an RFC 3339 time such as 2026-01-01T00:00:00Z", err=True)
        sys.exit(2)
    if moment.tzinfo is None:
        click.echo(
            f"error: --now: {text!r} has no time zone: write an RFC 3339 time such as 2026-01-01T00:00:00Z", err=True
        )
        sys.exit(2)
    if not in_range:
        # As for the times in objects: the engine adds durations of up to ~292 years to it.
        latest = format_time(LATEST_TIME)
        click.echo(f"error: --now: {text!r} is too far in the future: it must be before {latest}", err=True)
        sys.exit(2)
    return moment


cli.add_command(list_group)
cli.add_command(stop)
cli.add_command(resume)


def main() -> None:
    cli()


def kubectl_plugin() -> None:
    """`kubectl preemption ...` (installed as kubectl-preemption), on the live cluster of the
    kubeconfig: kueuectl's `list clusterqueue|localqueue|workload|resourceflavor`, `stop` and
    `resume`, and the offline commands reading the cluster: `explain NAMESPACE/NAME [-o json]`,
    `simulate [-o text|json|yaml]`, `lint`."""
    args = sys.argv[1:]
    if args[:1] == ["explain"] and len(args) > 1 and not args[1].startswith("-"):
        args = ["explain", "--workload", args[1], *args[2:]]
    if args[:1] in (["explain"], ["simulate"], ["lint"]) and "--from-cluster" not in args:
        args.append("--from-cluster")
    cli.main(args=args, prog_name="kubectl preemption")


if __name__ == "__main__":
    main()
