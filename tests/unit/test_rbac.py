"""Issue 24, item 4: the operator's ClusterRole is generated (`preemption-operator rbac`), its
job-integration part from the registry: the committed files (config/ and the Helm chart's copy)
are what the generator writes, and an integration brings its own rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from preemption_operator.api.kinds import Kind
from preemption_operator.cli import cli
from preemption_operator.controller import rbac
from preemption_operator.jobs.batch_job import INTEGRATION, BatchJob
from preemption_operator.jobs.framework import Integration

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "config" / "rbac" / "cluster_role.yaml", ROOT / "charts/preemption-operator/templates/clusterrole.yaml"]


class Widget(BatchJob):
    kind = Kind("Widget", "example.com", "v1alpha1", "widgets", True)


WIDGETS = Integration("example.com/widget", Widget, mutate=lambda obj: [], validate=lambda obj, old: [])
"""A second integration, known to these tests only."""


def granted(text: str) -> list[tuple[str, str, tuple[str, ...]]]:
    role: dict[str, Any] = yaml.safe_load(text)
    assert role["kind"] == "ClusterRole" and role["metadata"]["name"] == "preemption-operator"
    return [
        (group, resource, tuple(rule["verbs"]))
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    ]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_committed_cluster_role_is_what_the_generator_writes(path: Path) -> None:
    assert path.read_text() == rbac.render(), f"{path} is stale: run `preemption-operator rbac --output {path}`"


def test_each_integration_brings_its_kinds_rules_and_none_brings_none() -> None:
    with_widgets = granted(rbac.render([INTEGRATION, WIDGETS]))
    assert ("example.com", "widgets", ("get", "list", "watch", "patch")) in with_widgets
    assert ("example.com", "widgets/status", ("patch",)) in with_widgets
    assert ("batch", "jobs", ("get", "list", "watch", "patch")) in with_widgets
    assert ("kueue.x-k8s.io", "workloads", ("create", "patch", "delete")) in with_widgets
    jobs_only = granted(rbac.render([INTEGRATION]))
    assert not [rule for rule in jobs_only if rule[0] == "example.com"]
    # A kind a CRD serves brings the watch of its CRD too (batch/v1 is always served).
    assert set(with_widgets) - set(jobs_only) == {
        ("example.com", "widgets", ("get", "list", "watch", "patch")),
        ("example.com", "widgets/status", ("patch",)),
        ("apiextensions.k8s.io", "customresourcedefinitions", ("get", "list", "watch")),
    }
    # Without integrations the operator makes no Workloads and touches no jobs.
    bare = granted(rbac.render([]))
    assert ("kueue.x-k8s.io", "workloads", ("create", "patch", "delete")) not in bare
    assert not [rule for rule in bare if rule[0] == "batch"]
    assert ("kueue.x-k8s.io", "workloads", ("get", "list", "watch")) in bare


def test_the_check_command_finds_a_stale_file_and_the_generator_fixes_it(tmp_path: Path) -> None:
    target = tmp_path / "cluster_role.yaml"
    runner = CliRunner()
    assert runner.invoke(cli, ["rbac", "--check", "--output", str(target)]).exit_code == 1  # missing
    assert runner.invoke(cli, ["rbac", "--output", str(target)]).exit_code == 0
    assert runner.invoke(cli, ["rbac", "--check", "--output", str(target)]).exit_code == 0
    target.write_text(target.read_text().replace('"patch"]', '"patch", "delete"]'))
    result = runner.invoke(cli, ["rbac", "--check", "--output", str(target)])
    assert result.exit_code == 1
    assert f"stale: {target}; run `preemption-operator rbac --output {target}`" in result.output
