"""Issue 15, item 2: input `simulate` used to take silently now gets a clear error (exit 2, naming
file, object and field) or, where Kueue would run with it, the reason it is held. Each test is
one line of the bad-input table in docs/bad-input.md."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from click.testing import CliRunner, Result

from preemption_operator.cli import cli
from preemption_operator.engine.cache import Cache
from preemption_operator.offline.manifests import Manifest, parse

NOW = "2026-01-01T12:00:00Z"
QUEUE = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: research}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: ["cpu"]
    flavors:
    - name: default
      resources:
      - {name: cpu, nominalQuota: 4}
"""
FLAVOR = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
"""


def simulate(tmp_path: Path, **files: str) -> Result:
    for name, text in files.items():
        (tmp_path / name.replace("_yaml", ".yaml")).write_text(text)
    return CliRunner().invoke(cli, ["simulate", str(tmp_path), "--now", NOW])


def test_empty_input_exits_2(tmp_path: Path) -> None:
    result = simulate(tmp_path, empty_yaml="# nothing here\n")
    assert result.exit_code == 2
    assert result.output.strip() == f"error: no Kubernetes objects in {tmp_path}"


def test_a_misspelt_kueue_kind_is_an_error_with_a_suggestion(tmp_path: Path) -> None:
    result = simulate(tmp_path, q_yaml=QUEUE.replace("kind: ClusterQueue", "kind: ClusterQueu"))
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"error: {tmp_path / 'q.yaml'}: ClusterQueu research: unknown kind 'ClusterQueu' in kueue.x-k8s.io "
        "(did you mean ClusterQueue?)"
    )


def test_an_object_defined_twice_names_both_files(tmp_path: Path) -> None:
    result = simulate(tmp_path, a_yaml=QUEUE + "---\n" + FLAVOR, b_yaml=QUEUE)
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"error: ClusterQueue research is defined twice: in {tmp_path / 'a.yaml'} and in {tmp_path / 'b.yaml'}"
    )


def test_every_example_folder_together_is_refused_not_merged() -> None:
    examples = Path(__file__).resolve().parents[2] / "examples"
    result = CliRunner().invoke(cli, ["simulate", str(examples), "--now", NOW])
    assert result.exit_code == 2
    assert "is defined twice" in result.output


def test_a_workload_without_a_namespace_or_a_queue_is_an_error(tmp_path: Path) -> None:
    workload = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {name: w, namespace: ns}
spec:
  queueName: main
  podSets:
  - {name: main, count: 1, template: {spec: {containers: []}}}
"""
    result = simulate(tmp_path, w_yaml=workload.replace(", namespace: ns", ""))
    assert result.exit_code == 2
    assert result.output.strip().endswith("Workload w: metadata.namespace: required: a Workload lives in a namespace")
    result = simulate(tmp_path, w_yaml=workload.replace("  queueName: main\n", ""))
    assert result.exit_code == 2
    assert result.output.strip().endswith(
        "Workload ns/w: spec.queueName: required: a Workload without a queue is never scheduled"
    )


def test_a_quota_for_a_resource_that_is_not_covered_is_an_error(tmp_path: Path) -> None:
    bad = QUEUE.replace('coveredResources: ["cpu"]', 'coveredResources: ["cpu", "memory"]').replace(
        "      - {name: cpu, nominalQuota: 4}",
        "      - {name: cpu, nominalQuota: 4}\n      - {name: gpu, nominalQuota: 1}",
    )
    result = simulate(tmp_path, q_yaml=bad)
    assert result.exit_code == 2
    # The CRD's CEL rule refuses it first, in the API server's words (api/validation.py).
    assert result.output.strip().endswith(
        'ClusterQueue research: spec.resourceGroups[0]: Invalid value: "object": each flavor\'s resources must '
        "match the name in coveredResources, in order"
    )


def test_a_missing_flavor_makes_the_queue_inactive_with_kueues_reason_and_says_so(tmp_path: Path) -> None:
    result = simulate(tmp_path, q_yaml=QUEUE)  # no ResourceFlavor `default`
    assert result.exit_code == 0
    assert (
        "warning: ClusterQueue research is inactive (FlavorNotFound): Can't admit new workloads: "
        "references missing ResourceFlavor(s): default." in result.output
    )


def test_a_stopped_queue_with_missing_flavors_lists_every_cause_in_the_spec_order() -> None:
    text = (
        QUEUE.replace("  namespaceSelector: {}", "  namespaceSelector: {}\n  stopPolicy: Hold")
        .replace("    - name: default\n", "    - name: zeta\n")
        .replace(
            "      - {name: cpu, nominalQuota: 4}",
            "      - {name: cpu, nominalQuota: 4}\n    - name: alpha\n      resources:\n      - {name: cpu, nominalQuota: 1}",
        )
    )
    import yaml

    cache = Cache()
    cache.load(parse([Manifest("q.yaml", yaml.safe_load(text))]))
    cq = cache.snapshot(datetime(2026, 1, 1, tzinfo=UTC)).cluster_queues["research"]
    assert (cq.active, cq.inactive_reason) == (False, "Stopped")
    assert cq.inactive_message == (
        "Can't admit new workloads: is stopped, references missing ResourceFlavor(s): zeta,alpha."
    )


def test_a_version_error_names_the_kinds_own_version(tmp_path: Path) -> None:
    result = simulate(tmp_path, f_yaml=FLAVOR.replace("v1beta2", "v1beta1"))
    assert result.exit_code == 2
    assert result.output.strip().endswith(
        "ResourceFlavor default: unsupported version kueue.x-k8s.io/v1beta1 (supported: kueue.x-k8s.io/v1beta2)"
    )


def test_an_invalid_namespace_selector_is_an_error_offline(tmp_path: Path) -> None:
    bad = QUEUE.replace("namespaceSelector: {}", "namespaceSelector: {matchExpressions: [{key: a, operator: Bogus}]}")
    result = simulate(tmp_path, q_yaml=bad + "---\n" + FLAVOR)
    assert result.exit_code == 2
    assert result.output.strip().endswith(
        'ClusterQueue research: spec.namespaceSelector: matchExpressions[0]: "Bogus" is not a valid label selector operator'
    )


def test_the_operator_leaves_a_workload_without_a_queue_alone() -> None:
    """Kueue does not schedule a Workload without a queue name, nor writes it a status; this
    operator used to write it `LocalQueue  doesn't exist`."""
    import yaml

    workload = yaml.safe_load(
        """
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {name: w, namespace: ns}
spec:
  podSets:
  - {name: main, count: 1, template: {spec: {containers: []}}}
"""
    )
    from preemption_operator.api.objects import parse_object

    cache = Cache()
    cache.load([parse_object(workload)])
    snapshot = cache.snapshot(datetime(2026, 1, 1, tzinfo=UTC))
    assert snapshot.unqueued == [] and not any(snapshot.pending.values())


def test_a_queue_with_a_missing_or_broken_config_says_so_in_its_own_condition() -> None:
    import yaml

    from preemption_operator.api.objects import parse_object
    from preemption_operator.controller.queue_status import cluster_queue_status

    now = datetime(2026, 1, 1, tzinfo=UTC)
    annotated = QUEUE.replace(
        "metadata: {name: research}",
        "metadata: {name: research, annotations: {kueue.x-k8s.io/preemption-config-name: c}}",
    )
    config = yaml.safe_load(
        """
apiVersion: kueue.x-k8s.io/v1alpha1
kind: PreemptionConfig
metadata: {name: c}
spec:
  rules:
  - name: r
    activationPolicy: {trigger: InsufficientQuota}
    candidateSelectors:
    - scope: AnyClusterQueue
      labelSelector: {matchExpressions: [{key: a, operator: Bogus}]}
"""
    )

    def conditions(objects: list[str], unreadable: dict[str, str] | None = None) -> dict[str, dict[str, str]]:
        cache = Cache()
        cache.load([parse_object(yaml.safe_load(text)) for text in objects])
        snapshot = cache.snapshot(now)
        status = cluster_queue_status(
            snapshot.cluster_queues["research"], 0, None, now, 1, snapshot.preemption_configs, unreadable
        )
        return {c["type"]: c for c in status["conditions"]}

    missing = conditions([annotated, FLAVOR])["PreemptionConfigReady"]
    assert (missing["status"], missing["reason"]) == ("False", "ConfigNotFound")
    assert missing["message"] == "PreemptionConfig c not found: only classic preemption applies"
    assert conditions([annotated, FLAVOR])["Active"]["status"] == "True"  # Kueue's Active is untouched

    broken = conditions([annotated, FLAVOR, yaml.safe_dump(config)])["PreemptionConfigReady"]
    assert (broken["status"], broken["reason"]) == ("False", "InvalidConfig")
    assert broken["message"].startswith('PreemptionConfig c is invalid: preemptionConfig "c" rule "r"')

    unparsable = conditions([annotated, FLAVOR], {"c": "spec.rules[0].name: too long"})["PreemptionConfigReady"]
    assert unparsable["message"] == "PreemptionConfig c is invalid: spec.rules[0].name: too long"

    config["spec"]["rules"][0]["candidateSelectors"][0]["labelSelector"]["matchExpressions"][0]["operator"] = "Exists"
    ready = conditions([annotated, FLAVOR, yaml.safe_dump(config)])["PreemptionConfigReady"]
    assert (ready["status"], ready["reason"], ready["message"]) == ("True", "Ready", "PreemptionConfig c: 1 rule(s)")
    assert "PreemptionConfigReady" not in conditions([QUEUE, FLAVOR])


def test_simulate_warns_about_a_missing_config_even_without_a_preemptor(tmp_path: Path) -> None:
    annotated = QUEUE.replace(
        "metadata: {name: research}",
        "metadata: {name: research, annotations: {kueue.x-k8s.io/preemption-config-name: c}}",
    )
    result = simulate(tmp_path, q_yaml=annotated + "---\n" + FLAVOR)
    assert result.exit_code == 0
    assert (
        "warning: ClusterQueue research: PreemptionConfig c not found; it gets no configurable preemption candidates"
        in result.output
    )


def test_standard_input_is_read_with_a_dash() -> None:
    result = CliRunner().invoke(cli, ["simulate", "-", "--now", NOW], input=QUEUE + "---\n" + FLAVOR)
    assert result.exit_code == 0, result.output
    assert "Actions (1 cycle):" in result.output


def test_paths_or_the_cluster_but_not_both_nor_neither(tmp_path: Path) -> None:
    for args in ([], [str(tmp_path), "--from-cluster"]):
        result = CliRunner().invoke(cli, ["simulate", *args])
        assert result.exit_code == 2
        assert result.output.strip() == (
            "error: give PATH... (files, folders or - for standard input) or --from-cluster, not both"
        )


def test_a_live_clusters_unusable_objects_are_left_out_with_a_word() -> None:
    import yaml

    bad = yaml.safe_load(QUEUE.replace("nominalQuota: 4", "nominalQuota: -4"))
    skipped: list[str] = []
    objects = parse(
        [Manifest("cluster:clusterqueues", bad), Manifest("cluster:resourceflavors", yaml.safe_load(FLAVOR))],
        skipped,
        lenient=True,
    )
    assert [type(o).__name__ for o in objects] == ["ResourceFlavor"]
    assert skipped == [
        "cluster:clusterqueues: ClusterQueue research: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: "
        "-4 is negative: it must be zero or more; left out"
    ]


def test_a_workload_without_a_name_is_an_error(tmp_path: Path) -> None:
    workload = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {namespace: ns}
spec:
  queueName: main
  podSets:
  - {name: main, count: 1, template: {spec: {containers: []}}}
"""
    result = simulate(tmp_path, w_yaml=workload)
    assert result.exit_code == 2
    assert result.output.strip().endswith("Workload ns/<unnamed>: metadata.name: required: every object needs a name")
