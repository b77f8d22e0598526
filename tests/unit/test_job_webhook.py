"""Issue 14, item 3: the job webhooks. A queued Job is created suspended; a running one cannot
change queue; Kueue's field errors (pkg/controller/jobs/job/job_webhook.go, v0.19.2). And the
certificate they are served with (no cert-manager). Issue 24, item 4: each enabled integration
gets its own webhooks, at Kueue's paths, for its own kind."""

from __future__ import annotations

import base64
import datetime as dt
import json
import ssl
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from cryptography import x509

from preemption_operator.api.kinds import Kind
from preemption_operator.controller.serving import ssl_context
from preemption_operator.controller.webhooks import WebhookSettings, _differs, configurations, make_app
from preemption_operator.jobs.batch_job import INTEGRATION, BatchJob, validate
from preemption_operator.jobs.framework import Integration
from preemption_operator.jobs.webhook import review
from preemption_operator.k8s.certs import issue

QUEUE = "kueue.x-k8s.io/queue-name"


def job(queue: str | None = "team-a", suspend: bool | None = None, **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "j", "namespace": "ns", "labels": {QUEUE: queue} if queue is not None else {}}
    if annotations:
        meta["annotations"] = {k.replace("_", "-").replace("--", "/"): v for k, v in annotations.items()}
    spec: dict[str, Any] = {"parallelism": 3, "template": {"spec": {"containers": []}}}
    if suspend is not None:
        spec["suspend"] = suspend
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def admission(obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {"uid": "req-1", "operation": operation, "object": obj}
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def patch_of(answer: dict[str, Any]) -> list[dict[str, Any]]:
    response = answer["response"]
    if "patch" not in response:
        return []
    assert response["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return ops


def test_a_queued_job_is_created_suspended() -> None:
    answer = review(admission(job()), INTEGRATION, mutating=True)
    assert answer["response"] == {**answer["response"], "uid": "req-1", "allowed": True}
    assert patch_of(answer) == [{"op": "add", "path": "/spec/suspend", "value": True}]
    assert patch_of(review(admission(job(suspend=False)), INTEGRATION, mutating=True)) == [
        {"op": "add", "path": "/spec/suspend", "value": True}
    ]


def test_jobs_without_a_queue_and_updates_are_not_mutated() -> None:
    assert patch_of(review(admission(job(queue=None)), INTEGRATION, mutating=True)) == []
    assert patch_of(review(admission(job(suspend=True)), INTEGRATION, mutating=True)) == []
    assert patch_of(review(admission(job(suspend=False), "UPDATE", job()), INTEGRATION, mutating=True)) == []


def test_a_running_job_cannot_change_queue_but_a_suspended_one_can() -> None:
    answer = review(
        admission(job("team-b", suspend=False), "UPDATE", job("team-a", suspend=False)), INTEGRATION, mutating=False
    )
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["message"] == (
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "team-b": field is immutable'
    )
    assert review(
        admission(job("team-b", suspend=True), "UPDATE", job("team-a", suspend=True)), INTEGRATION, mutating=False
    )["response"]["allowed"]


def test_field_errors_use_kueues_words_and_are_joined_as_kubernetes_joins_them() -> None:
    bad = job("Team_A", suspend=True)
    bad["metadata"]["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": "3"}
    errors = validate(bad, None)
    assert errors[0].startswith(
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "Team_A": a lowercase RFC 1123 subdomain'
    )
    assert errors[1] == (
        'metadata.annotations[kueue.x-k8s.io/job-min-parallelism]: Invalid value: "3": should be between 0 and 2'
    )
    message = review(admission(bad), INTEGRATION, mutating=False)["response"]["status"]["message"]
    assert message.startswith("[metadata.labels") and message.endswith("should be between 0 and 2]")
    bad["metadata"]["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": "two"}
    assert validate(job(), None) == []
    assert validate(bad, None)[-1].endswith('strconv.Atoi: parsing "two": invalid syntax')


def test_parallelism_of_a_running_partially_admitted_job_is_fixed() -> None:
    old = job(suspend=False)
    old["metadata"]["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": "1"}
    new = json.loads(json.dumps(old))
    new["spec"]["parallelism"] = 5
    assert validate(new, old) == [
        "spec.parallelism: Forbidden: cannot change when partial admission is enabled and the job is not suspended"
    ]


def test_the_certificate_serves_the_hosts_and_is_made_anew_near_its_end() -> None:
    cert = issue(["preemption-operator-webhook.system.svc", "127.0.0.1"])
    assert cert.hosts() == {"preemption-operator-webhook.system.svc", "127.0.0.1"}
    assert cert.fresh(["127.0.0.1"])
    assert not cert.fresh(["other.svc"])
    assert not cert.fresh(["127.0.0.1"], now=dt.datetime.now(dt.UTC) + dt.timedelta(days=3640))
    leaf = x509.load_pem_x509_certificate(cert.cert)
    ca = x509.load_pem_x509_certificate(cert.ca)
    leaf.verify_directly_issued_by(ca)  # signed by the CA the caBundle carries
    assert isinstance(ssl_context(cert), ssl.SSLContext)


def test_the_configurations_send_only_queued_jobs_and_point_at_the_service_or_url() -> None:
    ca = b"-----BEGIN CERTIFICATE-----\n"
    in_cluster = WebhookSettings(namespace="system")
    (_, mutating), (_, validating) = configurations(in_cluster, ca, [INTEGRATION])
    hook = mutating["webhooks"][0]
    assert hook["clientConfig"]["service"] == {
        "namespace": "system",
        "name": "preemption-operator-webhook",
        "path": "/mutate-batch-v1-job",
        "port": 443,
    }
    assert hook["objectSelector"] == {"matchExpressions": [{"key": QUEUE, "operator": "Exists"}]}
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "system"]
    assert hook["rules"][0]["operations"] == ["CREATE"]
    assert validating["webhooks"][0]["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    local = WebhookSettings(namespace="default", url="https://127.0.0.1:9443")
    (_, mutating), _ = configurations(local, ca, [INTEGRATION])
    assert mutating["webhooks"][0]["clientConfig"]["url"] == "https://127.0.0.1:9443/mutate-batch-v1-job"
    stored = json.loads(json.dumps(mutating))
    stored["webhooks"][0]["reinvocationPolicy"] = "Never"  # a server default
    assert not _differs(mutating, stored)
    stored["webhooks"][0]["clientConfig"]["caBundle"] = "b2xk"
    assert _differs(mutating, stored)


class Widget(BatchJob):
    kind = Kind("Widget", "example.com", "v1alpha1", "widgets", True)


WIDGETS = Integration(
    "example.com/widget",
    Widget,
    mutate=lambda obj: [{"op": "add", "path": "/spec/paused", "value": True}],
    validate=lambda obj, old: ["spec: Forbidden: no widgets today"],
)
"""A second integration, known to these tests only."""


def test_each_integration_gets_its_own_webhooks_for_its_own_kind() -> None:
    (_, mutating), (_, validating) = configurations(WebhookSettings(namespace="system"), b"ca", [INTEGRATION, WIDGETS])
    hooks = {hook["name"]: hook for hook in mutating["webhooks"] + validating["webhooks"]}
    assert sorted(hooks) == [
        "mjob.preemption-operator.dev",
        "mwidget.preemption-operator.dev",
        "vjob.preemption-operator.dev",
        "vwidget.preemption-operator.dev",
    ]
    # Kueue's paths: /<mutate|validate>-<group, dots as dashes>-<version>-<kind>.
    assert hooks["mwidget.preemption-operator.dev"]["clientConfig"]["service"]["path"] == (
        "/mutate-example-com-v1alpha1-widget"
    )
    assert hooks["vjob.preemption-operator.dev"]["clientConfig"]["service"]["path"] == "/validate-batch-v1-job"
    assert hooks["vwidget.preemption-operator.dev"]["rules"] == [
        {
            "apiGroups": ["example.com"],
            "apiVersions": ["v1alpha1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["widgets"],
        }
    ]
    assert hooks["mjob.preemption-operator.dev"]["rules"][0]["resources"] == ["jobs"]


async def test_each_path_answers_with_its_integrations_hooks() -> None:
    async with TestClient(TestServer(make_app([INTEGRATION, WIDGETS]))) as client:

        async def answer(path: str, obj: dict[str, Any]) -> dict[str, Any]:
            response = await client.post(path, json=admission(obj))
            assert response.status == 200, await response.text()
            body: dict[str, Any] = await response.json()
            return body

        widget = {**job(), "apiVersion": "example.com/v1alpha1", "kind": "Widget"}
        assert patch_of(await answer("/mutate-example-com-v1alpha1-widget", widget)) == [
            {"op": "add", "path": "/spec/paused", "value": True}
        ]
        refused = (await answer("/validate-example-com-v1alpha1-widget", widget))["response"]
        assert refused["status"]["message"] == "spec: Forbidden: no widgets today"
        assert patch_of(await answer("/mutate-batch-v1-job", job())) == [
            {"op": "add", "path": "/spec/suspend", "value": True}
        ]
        assert (await answer("/validate-batch-v1-job", job()))["response"]["allowed"] is True

    async with TestClient(TestServer(make_app([WIDGETS]))) as client:
        assert (await client.post("/mutate-batch-v1-job", json=admission(job()))).status == 404
