"""Issue 14, item 3: the job webhooks. A queued Job is created suspended; a running one cannot
change queue; Kueue's field errors (pkg/controller/jobs/job/job_webhook.go, v0.19.2). And the
certificate they are served with (no cert-manager)."""

from __future__ import annotations

import base64
import datetime as dt
import json
import ssl
from typing import Any

from cryptography import x509

from preemption_operator.controller.webhooks import WebhookSettings, _differs, _ssl_context, configurations
from preemption_operator.jobs.webhook import review, validate_job
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
    answer = review(admission(job()), mutating=True)
    assert answer["response"] == {**answer["response"], "uid": "req-1", "allowed": True}
    assert patch_of(answer) == [{"op": "add", "path": "/spec/suspend", "value": True}]
    assert patch_of(review(admission(job(suspend=False)), mutating=True)) == [
        {"op": "add", "path": "/spec/suspend", "value": True}
    ]


def test_jobs_without_a_queue_and_updates_are_not_mutated() -> None:
    assert patch_of(review(admission(job(queue=None)), mutating=True)) == []
    assert patch_of(review(admission(job(suspend=True)), mutating=True)) == []
    assert patch_of(review(admission(job(suspend=False), "UPDATE", job()), mutating=True)) == []


def test_a_running_job_cannot_change_queue_but_a_suspended_one_can() -> None:
    answer = review(admission(job("team-b", suspend=False), "UPDATE", job("team-a", suspend=False)), mutating=False)
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["message"] == (
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "team-b": field is immutable'
    )
    assert review(admission(job("team-b", suspend=True), "UPDATE", job("team-a", suspend=True)), mutating=False)[
        "response"
    ]["allowed"]


def test_field_errors_use_kueues_words_and_are_joined_as_kubernetes_joins_them() -> None:
    bad = job("Team_A", suspend=True)
    bad["metadata"]["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": "3"}
    errors = validate_job(bad, None)
    assert errors[0].startswith(
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "Team_A": a lowercase RFC 1123 subdomain'
    )
    assert errors[1] == (
        'metadata.annotations[kueue.x-k8s.io/job-min-parallelism]: Invalid value: "3": should be between 0 and 2'
    )
    message = review(admission(bad), mutating=False)["response"]["status"]["message"]
    assert message.startswith("[metadata.labels") and message.endswith("should be between 0 and 2]")
    bad["metadata"]["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": "two"}
    assert validate_job(job(), None) == []
    assert validate_job(bad, None)[-1].endswith('strconv.Atoi: parsing "two": invalid syntax')


def test_parallelism_of_a_running_partially_admitted_job_is_fixed() -> None:
    old = job(suspend=False)
    old["metadata"]["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": "1"}
    new = json.loads(json.dumps(old))
    new["spec"]["parallelism"] = 5
    assert validate_job(new, old) == [
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
    assert isinstance(_ssl_context(cert), ssl.SSLContext)


def test_the_configurations_send_only_queued_jobs_and_point_at_the_service_or_url() -> None:
    ca = b"-----BEGIN CERTIFICATE-----\n"
    in_cluster = WebhookSettings(namespace="system")
    (_, mutating), (_, validating) = configurations(in_cluster, ca)
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
    (_, mutating), _ = configurations(local, ca)
    assert mutating["webhooks"][0]["clientConfig"]["url"] == "https://127.0.0.1:9443/mutate-batch-v1-job"
    stored = json.loads(json.dumps(mutating))
    stored["webhooks"][0]["reinvocationPolicy"] = "Never"  # a server default
    assert not _differs(mutating, stored)
    stored["webhooks"][0]["clientConfig"]["caBundle"] = "b2xk"
    assert _differs(mutating, stored)
