"""Issue 24, item 4: the registry of job integrations. Each declares its Kueue framework name, its
webhooks and its stop behaviour; `--integrations` takes those names and nothing else, and
`simulate` knows an integrated kind's objects live in a namespace from the registry."""

from __future__ import annotations

import dataclasses
import re

import pytest
from click.testing import CliRunner

from preemption_operator.cli import cli
from preemption_operator.jobs.batch_job import INTEGRATION, BatchJob
from preemption_operator.jobs.framework import INTEGRATIONS, enabled, of_kind, register, stopping_owners
from preemption_operator.offline.manifests import Manifest, ManifestError, check


def test_the_batch_job_integration_is_registered_under_kueues_name() -> None:
    assert INTEGRATIONS["batch/job"] is INTEGRATION
    assert INTEGRATION.kind is BatchJob.kind
    assert of_kind("batch/v1", "Job") is INTEGRATION
    assert of_kind("batch/v2", "Job") is None


def test_integrations_are_enabled_by_name_and_an_unknown_name_is_refused_with_the_known_ones() -> None:
    assert enabled(["batch/job", "batch/job"]) == (INTEGRATION,)
    assert enabled([]) == ()
    known = ", ".join(sorted(INTEGRATIONS))
    assert (
        known
        == "batch/job, deployment, jobset.x-k8s.io/jobset, leaderworkerset.x-k8s.io/leaderworkerset, pod, ray.io/raycluster, statefulset"
    )
    with pytest.raises(ValueError, match=rf"^unknown integration 'ray.io/rayjob': known are {re.escape(known)}$"):
        enabled(["batch/job", "ray.io/rayjob"])


def test_the_flag_refuses_an_unknown_integration_before_anything_runs() -> None:
    result = CliRunner().invoke(cli, ["run", "--integrations", "batch/job, kubeflow.org/mpijob"])
    assert result.exit_code == 2
    assert (
        "error: unknown integration 'kubeflow.org/mpijob': known are batch/job, deployment, "
        "jobset.x-k8s.io/jobset, leaderworkerset.x-k8s.io/leaderworkerset, pod, ray.io/raycluster, statefulset"
        in result.output
    )


def test_a_framework_name_and_a_kind_are_registered_once() -> None:
    with pytest.raises(ValueError, match="duplicate framework name 'batch/job'"):
        register(dataclasses.replace(INTEGRATION))
    with pytest.raises(ValueError, match="batch/v1 Job is integrated already, as 'batch/job'"):
        register(dataclasses.replace(INTEGRATION, framework="example.com/job"))
    assert INTEGRATIONS["batch/job"] is INTEGRATION and of_kind("batch/v1", "Job") is INTEGRATION


def test_only_integrations_that_stop_their_jobs_keep_an_evicted_workloads_quota() -> None:
    assert stopping_owners([INTEGRATION]) == {("batch/v1", "Job")}
    assert stopping_owners([dataclasses.replace(INTEGRATION, job_stops=False)]) == frozenset()
    # Kueue's externalFrameworks: their own controllers stop their jobs and clear the reservation.
    external = [("workload.codeflare.dev/v1beta2", "AppWrapper")]
    assert stopping_owners([], external) == {("workload.codeflare.dev/v1beta2", "AppWrapper")}
    assert stopping_owners([INTEGRATION], external) == {("batch/v1", "Job"), *external}


def test_simulate_refuses_an_integrated_object_without_a_namespace() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"}, "spec": {}}
    with pytest.raises(ManifestError, match=r"Job train: metadata\.namespace: required: a Job lives in a namespace"):
        check([Manifest("jobs.yaml", job)], ["jobs.yaml"])
    check([Manifest("jobs.yaml", {**job, "apiVersion": "example.com/v1"})], ["jobs.yaml"])  # not integrated
