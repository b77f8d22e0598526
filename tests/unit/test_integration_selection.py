"""Which integrations run and for which namespaces (Kueue v0.19.2's jobframework setup and its
managedJobsNamespaceSelector): the default is every known integration; one implies others as
Kueue's implicitly enabled frameworks do; an integration served by a CRD starts when a watch of
that CRD sees it Established; jobs in namespaces the selector leaves out are neither reconciled
nor sent to the webhooks; the selector flag reads kubectl's syntax or a LabelSelector and is
checked as Kueue checks its configuration."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from preemption_operator.api import kinds
from preemption_operator.api.meta import LabelSelector
from preemption_operator.cli import cli
from preemption_operator.controller.feeder import CacheFeeder
from preemption_operator.controller.integrations import (
    CrdWatch,
    CustomResourceDefinition,
    default_namespace_selector,
    established,
    namespace_selector,
)
from preemption_operator.controller.jobs import JobController
from preemption_operator.controller.webhooks import WebhookSettings, _differs, configurations
from preemption_operator.engine import selectors
from preemption_operator.engine.cache import Cache
from preemption_operator.jobs import jobset
from preemption_operator.jobs.batch_job import INTEGRATION as BATCH_JOB
from preemption_operator.jobs.batch_job import BatchJob
from preemption_operator.jobs.framework import INTEGRATIONS, Integration, enabled, implied
from preemption_operator.k8s.informer import Informer
from preemption_operator.k8s.writer import StatusWriter
from unit.fake_api import FakeApi
from unit.test_informer import until
from unit.test_job_controller import Events, Waker

JOBSET = jobset.INTEGRATION
JOBSET_CRD = "jobsets.jobset.x-k8s.io"
NAME_LABEL = "kubernetes.io/metadata.name"


# ---- selection -----------------------------------------------------------------------------------


@pytest.fixture
def widgets() -> Iterator[Integration]:
    """A registry entry that implies batch/job, as Kueue's deployment implies pod."""
    widget = dataclasses.replace(BATCH_JOB, framework="example.com/widget", implies=("batch/job",))
    INTEGRATIONS[widget.framework] = widget
    try:
        yield widget
    finally:
        del INTEGRATIONS[widget.framework]


def test_the_default_is_every_known_integration_and_nothing_is_none() -> None:
    assert enabled(None) == tuple(INTEGRATIONS.values())
    assert {i.framework for i in enabled(None)} >= {"batch/job", "jobset.x-k8s.io/jobset"}
    assert enabled([]) == ()


def test_an_integration_enables_those_it_implies_once(widgets: Integration) -> None:
    assert enabled(["example.com/widget"]) == (widgets, BATCH_JOB)
    assert implied(["example.com/widget"]) == ("batch/job",)
    # Named itself, it is not implicit (Kueue's collectImplicitlyEnabledIntegrations).
    assert enabled(["batch/job", "example.com/widget"]) == (BATCH_JOB, widgets)
    assert implied(["batch/job", "example.com/widget"]) == ()


def test_only_kinds_kubernetes_does_not_serve_itself_wait_for_a_crd() -> None:
    assert BATCH_JOB.crd is None
    assert JOBSET.crd == JOBSET_CRD


def test_the_integrations_flag_help_names_every_known_integration() -> None:
    result = CliRunner().invoke(cli, ["run", "--help"], terminal_width=400)
    assert result.exit_code == 0
    assert ", ".join(INTEGRATIONS) in result.output
    assert "Default: all of them, each once its CRD is installed" in result.output


# ---- a CRD watched for -------------------------------------------------------------------------------


def crd(name: str, *, established: bool, served: bool = True) -> dict[str, Any]:
    conditions = [{"type": "NamesAccepted", "status": "True"}]
    if established:
        conditions.append({"type": "Established", "status": "True"})
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {"versions": [{"name": "v1alpha2", "served": served, "storage": True}]},
        "status": {"conditions": conditions},
    }


def test_a_crd_serves_a_kind_once_established_with_its_version_served() -> None:
    assert established(crd(JOBSET_CRD, established=True), "v1alpha2")
    assert not established(crd(JOBSET_CRD, established=False), "v1alpha2")
    assert not established(crd(JOBSET_CRD, established=True, served=False), "v1alpha2")
    assert not established(crd(JOBSET_CRD, established=True), "v1")


@pytest.mark.looptime
async def test_an_integration_starts_when_its_crd_becomes_established_and_survives_its_removal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    api = FakeApi()
    started: list[Integration] = []
    watch = CrdWatch(JOBSET, started.append)
    informer = Informer(api, CustomResourceDefinition, watch, field_selector=f"metadata.name={JOBSET_CRD}")
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 2)
        waiting = f"the jobset.x-k8s.io/jobset integration waits for its CRD {JOBSET_CRD} (not installed)"
        assert [r.getMessage() for r in caplog.records if "waits for" in r.getMessage()] == [
            f"{waiting}: it starts when the CRD is Established"
        ]
        # Watched, not polled: by name, one list and then a watch.
        assert api.field_selectors == [
            ("LIST", CustomResourceDefinition.path(), f"metadata.name={JOBSET_CRD}"),
            ("WATCH", CustomResourceDefinition.path(), f"metadata.name={JOBSET_CRD}"),
        ]

        api.put(crd("widgets.example.com", established=True))  # another CRD: not even delivered
        api.put(crd(JOBSET_CRD, established=False))
        await informer.relist()  # the handler has seen both by now
        assert started == []
        await until(lambda: [method for method, *_ in api.field_selectors].count("WATCH") == 2)

        api.put(crd(JOBSET_CRD, established=True))
        await until(lambda: bool(started))
        assert started == [JOBSET]
        api.put(crd(JOBSET_CRD, established=True))  # another change: started once only
        await informer.relist()
        assert started == [JOBSET]
        assert len([r for r in caplog.records if "waits for" in r.getMessage()]) == 1  # said once
        await until(lambda: [method for method, *_ in api.field_selectors].count("WATCH") == 3)  # watching again

        api.remove("CustomResourceDefinition", JOBSET_CRD)
        await until(lambda: any("was deleted" in r.getMessage() for r in caplog.records))
        await informer.relist()
        assert not task.done() and started == [JOBSET]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_an_integration_whose_crd_is_there_at_the_start_starts_with_the_first_list() -> None:
    api = FakeApi()
    api.put(crd(JOBSET_CRD, established=True))
    started: list[Integration] = []
    watch = CrdWatch(JOBSET, started.append)
    informer = Informer(api, CustomResourceDefinition, watch, field_selector=f"metadata.name={JOBSET_CRD}")
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 2)
        # Started before the CRD informer counts as synced: the operator then waits for its list.
        assert started == [JOBSET]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# ---- the managed-jobs namespace selector -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "wire"),
    [
        ("team=a", {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}),
        ("team!=a", {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}),
        (
            "kubernetes.io/metadata.name notin (kube-system, ops),managed, !sandbox",
            {
                "matchExpressions": [
                    {"key": NAME_LABEL, "operator": "NotIn", "values": ["kube-system", "ops"]},
                    {"key": "managed", "operator": "Exists"},
                    {"key": "sandbox", "operator": "DoesNotExist"},
                ]
            },
        ),
        (
            "tier in (gold,silver)",
            {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold", "silver"]}]},
        ),
        ("{matchLabels: {team: a}}", {"matchLabels": {"team": "a"}}),
        (
            '{"matchExpressions": [{"key": "x", "operator": "Exists"}]}',
            {"matchExpressions": [{"key": "x", "operator": "Exists"}]},
        ),
        ("", {}),
    ],
)
def test_the_selector_reads_kubectls_syntax_and_a_label_selector(text: str, wire: dict[str, Any]) -> None:
    assert selectors.parse(text).to_wire() == wire


def test_kueues_default_selector_leaves_kube_system_and_the_operators_namespace_out() -> None:
    default = default_namespace_selector("preemption-operator-system")
    assert default.to_wire() == {
        "matchExpressions": [
            {"key": NAME_LABEL, "operator": "NotIn", "values": ["kube-system", "preemption-operator-system"]}
        ]
    }
    built = namespace_selector(default, "preemption-operator-system")
    assert built.matches({NAME_LABEL: "research"})
    assert not built.matches({NAME_LABEL: "kube-system"})
    assert not built.matches({NAME_LABEL: "preemption-operator-system"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", 'error: --managed-jobs-namespace-selector: should not match the "kube-system" namespace'),
        ("team!=a", 'error: --managed-jobs-namespace-selector: should not match the "kube-system" namespace'),
        (
            f"{NAME_LABEL} notin (kube-system)",
            'error: --managed-jobs-namespace-selector: should not match the "ops" namespace',
        ),
        ("a > 3", "error: --managed-jobs-namespace-selector: cannot read 'a > 3'"),
        ("tier in ()", "error: --managed-jobs-namespace-selector: matchExpressions[0]: for 'in', 'notin' operators"),
        ("bad key!=x", "error: --managed-jobs-namespace-selector: cannot read 'bad key!=x'"),
        ("{matchLabels: [", "error: --managed-jobs-namespace-selector: not a label selector"),
    ],
)
def test_a_bad_selector_exits_2_naming_the_flag(text: str, message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    result = CliRunner().invoke(cli, ["run", "--managed-jobs-namespace-selector", text])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_the_webhooks_are_sent_only_the_selected_namespaces_objects() -> None:
    ca = b"-----BEGIN CERTIFICATE-----\n"
    selected = {"matchLabels": {"team": "a"}}
    settings = WebhookSettings(namespace="ops", namespace_selector=selected)
    for _, body in configurations(settings, ca, [BATCH_JOB, JOBSET]):
        assert [hook["namespaceSelector"] for hook in body["webhooks"]] == [selected, selected]
    # Without one: Kueue's default, kube-system and the operator's namespace left out.
    (_, mutating), _ = configurations(WebhookSettings(namespace="ops"), ca, [BATCH_JOB])
    assert mutating["webhooks"][0]["namespaceSelector"] == {
        "matchExpressions": [{"key": NAME_LABEL, "operator": "NotIn", "values": ["kube-system", "ops"]}]
    }
    # A stored selector with more in it than ours is replaced.
    (_, want), _ = configurations(settings, ca, [BATCH_JOB])
    stored = copy.deepcopy(want)
    stored["webhooks"][0]["namespaceSelector"] = {**selected, "matchExpressions": [{"key": "x", "operator": "Exists"}]}
    assert _differs(want, stored)
    assert not _differs(want, copy.deepcopy(want))


def queued_job(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": namespace,
            "uid": "uid-train",
            "labels": {"kueue.x-k8s.io/queue-name": "research"},
        },
        "spec": {
            "parallelism": 1,
            "suspend": True,
            "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}},
        },
    }


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {NAME_LABEL: name, **labels}}}


async def test_a_job_in_a_namespace_the_selector_leaves_out_is_ignored_until_the_namespace_is_selected() -> None:
    """Kueue's reconciler: `Namespace not opted in for Kueue management` -> the job is left alone
    (no Workload); the namespace's labels, as the cache has them, decide."""
    api, cache = FakeApi(), Cache()
    feeder = CacheFeeder(cache, Waker())
    selector = namespace_selector(selectors.parse("team=a"), "ops")

    def managed(name: str) -> bool:
        ns = cache.objects["Namespace"].get(name)
        return ns is not None and selector.matches(ns.metadata.labels)

    controller = JobController(api, cache, feeder, StatusWriter(api), Events(), lambda: True, managed=managed)  # type: ignore[arg-type]
    controller.replace(kinds.Workload, [], "1")
    job = api.put(queued_job("research"))
    controller.replace(BatchJob.kind, [copy.deepcopy(job)], "1")
    key = controller.key_of(BatchJob.kind, job)

    assert await controller.reconcile(key) is None  # its namespace is not in the cache yet
    feeder.replace(kinds.Namespace, [namespace("research", team="b")], "1")
    assert await controller.reconcile(key) is None
    assert api.workloads() == {}

    labelled = namespace("research", team="a")
    feeder.event(kinds.Namespace, "MODIFIED", labelled)
    controller.event(kinds.Namespace, "MODIFIED", labelled)
    assert key in controller._queued  # its jobs get another look
    await controller.reconcile(key)
    assert [wl["metadata"]["ownerReferences"][0]["name"] for wl in api.workloads().values()] == ["train"]


def test_an_empty_label_selector_selects_every_namespace() -> None:
    assert selectors.build(LabelSelector(), nil=selectors.NOTHING).matches({NAME_LABEL: "x"})
