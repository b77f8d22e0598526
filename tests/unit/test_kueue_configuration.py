"""Issue 30, item 1: Kueue's Configuration file (`run --config`, and `simulate`, `explain`, `lint`):
read strictly and checked as Kueue v0.19.2 reads and checks it (pkg/config/config.go decodes
strictly; pkg/config/validation.go), the fields that map to the operator applied with the flags
as overrides, and every field not applied named once."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from builders import simulate_cli
from preemption_operator.cli import cli
from preemption_operator.controller import configuration, operator
from preemption_operator.controller.configuration import ConfigurationError, parse
from preemption_operator.controller.decisions import MAX_INFLIGHT_WRITES
from preemption_operator.engine import selectors
from preemption_operator.engine.pods_ready import WaitForPodsReady

from .test_fair_preemption import B_CASES

HEAD = "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"

DOCS_EXAMPLE_FILE = Path(__file__).resolve().parents[1] / "fixtures" / "kueue-configuration.yaml"
DOCS_EXAMPLE = DOCS_EXAMPLE_FILE.read_text()


def test_the_docs_example_is_read_and_mapped() -> None:
    settings = parse(DOCS_EXAMPLE, "kueue.yaml")
    assert settings.version == "v1beta2"
    assert settings.integrations == (
        "batch/job",
        "ray.io/raycluster",
        "jobset.x-k8s.io/jobset",
        "pod",
        "deployment",
        "statefulset",
        "leaderworkerset.x-k8s.io/leaderworkerset",
    )
    assert settings.fair_sharing == ("LessThanOrEqualToFinalShare", "LessThanInitialShare")
    assert (settings.qps, settings.burst) == (300.0, 500)
    assert (settings.metrics_host, settings.metrics_port, settings.webhook_port) == ("0.0.0.0", 8443, 9443)
    assert (settings.leader_election, settings.lease_name) == (True, "c1f6bfd2.kueue.x-k8s.io")
    assert [str(i) for i in settings.ignored] == [
        "integrations.frameworks[1]: kubeflow.org/mpijob is not integrated here: its jobs are not queued",
        "integrations.frameworks[2]: ray.io/rayjob is not integrated here: its jobs are not queued",
        "health: not applied: /healthz and /readyz are served on the metrics address",
        "controller: not applied: one scheduling loop serves every kind",
    ]
    assert settings.wait_for_pods_ready == WaitForPodsReady(
        timeout=timedelta(minutes=5),
        recovery_timeout=timedelta(minutes=3),
        block_admission=False,
        requeuing_timestamp="Eviction",
        backoff_limit_count=None,
        backoff_base_seconds=60,
        backoff_max_seconds=3600,
    )


def test_without_frameworks_kueues_default_is_batch_job_only() -> None:
    assert parse(HEAD).integrations == ("batch/job",)
    assert parse(HEAD).fair_sharing is None


def test_v1beta2_turns_wait_for_pods_ready_on_with_kueues_defaults() -> None:
    """Kueue v0.19.2's defaulting adds waitForPodsReady to every v1beta2 Configuration (30 min,
    the recovery timeout the same, backoff 60 s to 3600 s, requeued forever); "0s" leaves the
    timeout at its default and turns the recovery timeout off; the DisableWaitForPodsReady gate
    turns it all off."""
    assert parse(HEAD).wait_for_pods_ready == WaitForPodsReady()
    zero = parse(HEAD + "waitForPodsReady:\n  timeout: 0s\n  recoveryTimeout: 0s\n  blockAdmission: true\n")
    assert zero.wait_for_pods_ready == WaitForPodsReady(recovery_timeout=None, block_admission=True)
    assert parse(HEAD + "featureGates:\n  DisableWaitForPodsReady: true\n").wait_for_pods_ready is None


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("foo: 1\n", "foo: unknown field"),
        ("integrations:\n  framework: [batch/job]\n", "integrations.framework: unknown field"),
        (
            "integrations:\n  frameworks: [batch/jobs]\n",
            'integrations.frameworks[0]: Unsupported value: "batch/jobs": supported values: "batch/job",',
        ),
        (
            "integrations:\n  frameworks: [pod, pod]\n",
            'integrations.frameworks[1]: Duplicate value: "pod"',
        ),
        ("fairSharing: {}\n", "fairSharing.preemptionStrategies: Required value: must be specified"),
        (
            "fairSharing:\n  preemptionStrategies: [LessThanInitialShare, LessThanOrEqualToFinalShare]\n",
            "fairSharing.preemptionStrategies: Unsupported value: ['LessThanInitialShare', "
            "'LessThanOrEqualToFinalShare']",
        ),
        ("waitForPodsReady:\n  timeout: -5m\n", 'waitForPodsReady.timeout: Invalid value: "-5m": must be greater'),
        ("waitForPodsReady:\n  timeout: 5 minutes\n", 'waitForPodsReady.timeout: "5 minutes" is not a duration'),
        (
            "waitForPodsReady:\n  requeuingStrategy:\n    timestamp: Admission\n",
            'waitForPodsReady.requeuingStrategy.timestamp: Unsupported value: "Admission"',
        ),
        (
            "waitForPodsReady:\n  requeuingStrategy:\n    backoffLimitCount: -1\n",
            "waitForPodsReady.requeuingStrategy.backoffLimitCount: Invalid value: -1: must be greater",
        ),
        (
            "waitForPodsReady:\n  enable: true\n",
            "waitForPodsReady.enable: unknown field (in config.kueue.x-k8s.io/v1beta2)",
        ),
        ("featureGates:\n  NoSuchGate: true\n", "featureGates: Invalid value: unrecognized feature gate: NoSuchGate"),
        ("featureGates:\n  PartialAdmission: yes please\n", 'featureGates.PartialAdmission: "yes please" is not true'),
        ("clientConnection:\n  qps: -1\n", "clientConnection.qps: Invalid value: -1.0: must be greater"),
        ("metrics:\n  bindAddress: localhost\n", 'metrics.bindAddress: Invalid value: "localhost": must be host:port'),
        ("webhook:\n  port: 70000\n", "webhook.port: Invalid value: 70000: must be a valid port number"),
        (
            "leaderElection:\n  resourceLock: configmaps\n",
            'leaderElection.resourceLock: Unsupported value: "configmaps": supported values: "leases"',
        ),
        (
            "objectRetentionPolicies:\n  workloads:\n    afterFinished: -1h\n",
            'objectRetentionPolicies.workloads.afterFinished: Invalid value: "-1h": must be greater',
        ),
    ],
)
def test_what_kueue_refuses_is_refused_naming_the_field(body: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse(HEAD + body, "kueue.yaml")
    assert str(caught.value).startswith("kueue.yaml: ")
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: [\n", "kueue.yaml: not valid YAML (line 2, column 1)"),
        ("", "kueue.yaml: expected one Configuration object (a mapping), found 0"),
        ("apiVersion: v1\nkind: ConfigMap\n", "kueue.yaml: apiVersion v1 kind ConfigMap is not Kueue's Configuration"),
        (
            "apiVersion: config.kueue.x-k8s.io/v1alpha1\nkind: Configuration\n",
            "is not Kueue's Configuration (config.kueue.x-k8s.io/v1beta2, config.kueue.x-k8s.io/v1beta1",
        ),
    ],
)
def test_what_is_not_a_configuration_is_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=None) as caught:
        parse(text, "kueue.yaml")
    assert message in str(caught.value)


def test_v1beta1_turns_features_on_by_enable_and_defaults_the_strategies() -> None:
    """v1beta1 has `enable` where v1beta2 has the section's presence; with it off the section is
    not applied (Kueue's conversion drops it), and its strategies default to both."""
    v1beta1 = "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n"
    on = parse(v1beta1 + "fairSharing:\n  enable: true\nwaitForPodsReady:\n  enable: true\n  timeout: 1m\n")
    assert on.fair_sharing == ("LessThanOrEqualToFinalShare", "LessThanInitialShare")
    assert on.wait_for_pods_ready == WaitForPodsReady(
        timeout=timedelta(minutes=1), recovery_timeout=timedelta(minutes=1)
    )
    off = parse(v1beta1 + "fairSharing:\n  enable: false\nwaitForPodsReady:\n  timeout: 1m\n")
    assert off.fair_sharing is None and off.wait_for_pods_ready is None and off.ignored == ()
    with pytest.raises(ConfigurationError, match=r"visibilityServer: unknown field \(in .*v1beta1\)"):
        parse(v1beta1 + "visibilityServer:\n  bindPort: 8082\n")


def test_each_field_not_applied_is_named_once_and_those_that_change_decisions_are_marked() -> None:
    settings = parse(
        HEAD
        + "manageJobsWithoutQueueName: true\n"
        + "admissionFairSharing:\n  usageHalfLifeTime: 168h\n"
        + "resources:\n  excludeResourcePrefixes: [example.com/]\n"
        + "multiKueue:\n  gcInterval: 1m\n"
        + "integrations:\n  frameworks: [batch/job]\n  externalFrameworks: [Foo.v1.example.com]\n"
    )
    named = {i.path: i.decisions for i in settings.ignored}
    assert named == {
        "manageJobsWithoutQueueName": True,
        "admissionFairSharing": True,
        "resources.excludeResourcePrefixes": True,
        "multiKueue": False,
    }


# -- run: the file applied, the flags as overrides ---------------------------------------------------


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[operator.OperatorOptions]:
    """`run` up to the start of the operator: the options it would start with."""
    seen: list[operator.OperatorOptions] = []
    monkeypatch.setattr(operator, "run", lambda config, options, cpu_profile=None: seen.append(options))
    monkeypatch.setattr("preemption_operator.k8s.api.load_config", lambda: object())
    monkeypatch.setenv("POD_NAMESPACE", "kueue-system")
    return seen


def _run(tmp_path: Path, text: str, *flags: str) -> Any:
    path = tmp_path / "kueue.yaml"
    path.write_text(text)
    return CliRunner().invoke(cli, ["run", "--config", str(path), *flags])


def test_run_applies_the_docs_example(tmp_path: Path, started: list[operator.OperatorOptions]) -> None:
    result = _run(tmp_path, DOCS_EXAMPLE, "--no-webhooks")
    assert result.exit_code == 0, result.output
    options = started[0]
    assert options.integrations == parse(DOCS_EXAMPLE).integrations
    assert options.fair_sharing.enabled
    assert options.fair_sharing.strategies == ("LessThanOrEqualToFinalShare", "LessThanInitialShare")
    assert (options.qps, options.burst, options.metrics_port) == (300.0, 500, 8443)
    assert (options.leader_election, options.lease_name) == (True, "c1f6bfd2.kueue.x-k8s.io")


def test_flags_given_win_over_the_file(tmp_path: Path, started: list[operator.OperatorOptions]) -> None:
    result = _run(
        tmp_path,
        DOCS_EXAMPLE,
        "--no-webhooks",
        "--integrations=batch/job",
        "--kube-api-qps=20",
        "--metrics-port=8080",
        "--no-leader-election",
        "--fair-sharing-strategies=LessThanInitialShare",
    )
    assert result.exit_code == 0, result.output
    options = started[0]
    assert options.integrations == ("batch/job",)
    assert (options.qps, options.burst, options.metrics_port) == (20.0, 500, 8080)
    assert options.leader_election is False
    assert options.fair_sharing.strategies == ("LessThanInitialShare",)


def test_max_inflight_writes_reaches_the_options_and_its_help_names_the_default(
    started: list[operator.OperatorOptions],
) -> None:
    assert CliRunner().invoke(cli, ["run", "--no-webhooks", "--max-inflight-writes=3"]).exit_code == 0
    assert CliRunner().invoke(cli, ["run", "--no-webhooks"]).exit_code == 0
    assert [options.max_inflight_writes for options in started] == [3, MAX_INFLIGHT_WRITES]
    bad = CliRunner().invoke(cli, ["run", "--max-inflight-writes=0"])
    assert bad.exit_code == 2 and "--max-inflight-writes" in bad.output
    help_text = " ".join(CliRunner().invoke(cli, ["run", "--help"]).output.split())
    assert f"(default: {MAX_INFLIGHT_WRITES}," in help_text


def test_external_frameworks_reach_the_options_as_the_kinds_that_give_back_their_quota(
    tmp_path: Path, started: list[operator.OperatorOptions]
) -> None:
    """Kueue's Kind.version.group, read as Kueue's ParseKindArg reads it; a malformed one is
    refused as Kueue refuses it."""
    frameworks = (
        "integrations:\n  externalFrameworks: [AppWrapper.v1beta2.workload.codeflare.dev, Foo.v1.example.com]\n"
    )
    settings = parse(HEAD + frameworks)
    assert settings.version == "v1beta2"  # the file's, whatever versions the kinds name
    assert settings.external_frameworks == (
        ("workload.codeflare.dev/v1beta2", "AppWrapper"),
        ("example.com/v1", "Foo"),
    )
    assert _run(tmp_path, HEAD + frameworks, "--no-webhooks").exit_code == 0
    assert started[0].external_frameworks == (
        ("workload.codeflare.dev/v1beta2", "AppWrapper"),
        ("example.com/v1", "Foo"),
    )
    assert CliRunner().invoke(cli, ["run", "--no-webhooks"]).exit_code == 0
    assert started[1].external_frameworks == ()
    bad = _run(tmp_path, HEAD + "integrations:\n  externalFrameworks: [AppWrapper]\n", "--no-webhooks")
    assert bad.exit_code == 2
    assert (
        "integrations.externalFrameworks[0]: Invalid value: \"AppWrapper\": must be format, 'Kind.version.group.com'"
        in (bad.output)
    )


def test_the_files_namespace_selector_is_applied_and_checked(
    tmp_path: Path, started: list[operator.OperatorOptions]
) -> None:
    body = "managedJobsNamespaceSelector:\n  matchLabels:\n    team: a\n"
    assert _run(tmp_path, HEAD + body, "--no-webhooks").exit_code == 0
    built = selectors.build(started[0].managed_jobs_namespace_selector, nil=selectors.EVERYTHING)
    assert built.matches({"team": "a"}) and not built.matches({"team": "b"})
    wrong = "managedJobsNamespaceSelector:\n  matchExpressions:\n  - {key: team, operator: DoesNotExist}\n"
    result = _run(tmp_path, HEAD + wrong, "--no-webhooks")
    assert result.exit_code == 2
    assert 'managedJobsNamespaceSelector: should not match the "kube-system" namespace' in result.output


def test_feature_gates_in_both_places_are_refused_as_kueue_refuses_them(
    tmp_path: Path, started: list[operator.OperatorOptions]
) -> None:
    text = HEAD + "featureGates:\n  PartialAdmission: true\n"
    assert _run(tmp_path, text, "--no-webhooks").exit_code == 0
    assert started[0].feature_gates == {"PartialAdmission": True}
    result = _run(tmp_path, text, "--no-webhooks", "--feature-gates=PartialAdmission=false")
    assert result.exit_code == 2
    assert "featureGates: feature gates for CLI and configuration cannot both specified" in result.output


def test_a_bad_file_exits_2_naming_it_and_the_field(tmp_path: Path, started: list[operator.OperatorOptions]) -> None:
    result = _run(tmp_path, HEAD + "integrations:\n  frameworks: [batch/jobs]\n")
    assert result.exit_code == 2
    assert result.output.startswith(f"error: --config {tmp_path / 'kueue.yaml'}: integrations.frameworks[0]: ")
    assert "Traceback" not in result.output and not started
    missing = CliRunner().invoke(cli, ["run", "--config", str(tmp_path / "absent.yaml")])
    assert missing.exit_code == 2 and "absent.yaml: cannot be read" in missing.output


def test_run_logs_each_field_not_applied(tmp_path: Path, started: list[operator.OperatorOptions]) -> None:
    result = _run(tmp_path, DOCS_EXAMPLE, "--no-webhooks")
    warnings = [line for line in result.output.splitlines() if "WARNING" in line]
    assert len(warnings) == len(parse(DOCS_EXAMPLE).ignored)
    assert any("controller: not applied" in line for line in warnings)
    assert started[0].wait_for_pods_ready == parse(DOCS_EXAMPLE).wait_for_pods_ready


# -- the offline commands ------------------------------------------------------------------------------


def test_simulate_takes_fair_sharing_from_the_file(tmp_path: Path) -> None:
    """Kueue's fair-sharing case B21 (test_fair_preemption.py): with fair sharing `in` takes b1
    from the queue with the highest share; classic preemption finds no one (`in` would borrow)."""
    objects, expected = B_CASES["B21"]
    config = tmp_path / "kueue.yaml"
    # (waitForPodsReady off: these Workloads have no pods to be ready, and were admitted long ago.)
    config.write_text(
        HEAD
        + "fairSharing:\n  preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]\n"
        + "featureGates:\n  DisableWaitForPodsReady: true\n"
    )

    def victims(flags: list[str]) -> set[str]:
        outcome = simulate_cli(objects, flags=flags)
        return {a["workload"].split("/", 1)[1] for a in outcome.actions if a["action"] == "Preempted"}

    assert victims(["--config", str(config)]) == set(expected) == {"b1"}
    assert victims([]) == set()


def test_the_offline_commands_warn_only_of_what_changes_decisions(tmp_path: Path) -> None:
    config = tmp_path / "kueue.yaml"
    config.write_text(DOCS_EXAMPLE)
    result = CliRunner().invoke(cli, ["lint", str(tmp_path / "none.yaml"), "--config", str(config)])
    warned = [line for line in result.output.splitlines() if line.startswith("warning: --config")]
    assert [w.split(": ", 3)[2] for w in warned] == ["integrations.frameworks[1]", "integrations.frameworks[2]"]


def test_the_shipped_configuration_is_read_without_warnings() -> None:
    """config/manager/controller_manager_config.yaml (the Deployment's, and the chart's default)
    names every integration the operator has, and nothing it does not apply."""
    shipped = Path(__file__).resolve().parents[2] / "config" / "manager" / "controller_manager_config.yaml"
    settings = configuration.load(shipped)
    from preemption_operator.jobs import framework

    assert sorted(settings.integrations or ()) == sorted(framework.INTEGRATIONS)
    assert settings.ignored == ()


def test_visibility_server_sets_the_visibility_apis_address_as_kueue_checks_it() -> None:
    settings = parse(HEAD + "visibilityServer:\n  bindAddress: 127.0.0.1\n  bindPort: 9082\n")
    assert (settings.visibility_host, settings.visibility_port) == ("127.0.0.1", 9082)
    assert settings.ignored == ()
    with pytest.raises(ConfigurationError, match=r'visibilityServer\.bindAddress: Invalid value: "localhost": must be'):
        parse(HEAD + "visibilityServer:\n  bindAddress: localhost\n")
    with pytest.raises(ConfigurationError, match=r"visibilityServer\.bindPort: Invalid value: 0: must be a valid port"):
        parse(HEAD + "visibilityServer:\n  bindPort: 0\n")
