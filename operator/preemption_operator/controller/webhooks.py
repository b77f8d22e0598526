"""The admission webhooks for jobs: their HTTPS server, their certificate (kept in a Secret that
every replica shares, so no cert-manager is needed) and their registration (the operator owns
its Mutating- and ValidatingWebhookConfiguration and keeps their caBundle current). Each enabled
integration has a mutating and a validating webhook, at Kueue's paths, for its own kind.

In a cluster the API server reaches the webhooks through a Service; for a local run
(`--webhook-url https://127.0.0.1:9443`) at that URL. Only objects carrying a queue-name label
are sent, so other users' objects of those kinds never depend on this operator being up."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from ..api.kinds import Kind
from ..jobs import webhook
from ..jobs.framework import QUEUE_LABEL, Integration
from ..k8s.api import KubeApi
from ..k8s.certs import ServingCert
from . import serving

log = logging.getLogger(__name__)

MutatingConfiguration = Kind(
    "MutatingWebhookConfiguration", "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", False
)
ValidatingConfiguration = Kind(
    "ValidatingWebhookConfiguration", "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", False
)
CONFIGURATION_NAME = "preemption-operator"
MAX_BODY = 3 * 1024 * 1024  # the API server's own request limit


@dataclass(frozen=True)
class WebhookSettings:
    namespace: str
    """The operator's namespace: its Secret lives there, and its own objects are not sent."""
    port: int = 9443
    host: str = "0.0.0.0"
    service: str = "preemption-operator-webhook"
    url: str | None = None
    """Where the API server calls (a local run); None: the Service."""
    secret: str = "preemption-operator-webhook-cert"
    namespace_selector: dict[str, Any] | None = None
    """The namespaces whose objects are sent (the managed-jobs namespace selector, as Kueue's
    manifests set it on its job webhooks); None: all but kube-system and `namespace`."""

    def selector(self) -> dict[str, Any]:
        if self.namespace_selector is not None:
            return self.namespace_selector
        values = list(dict.fromkeys(["kube-system", self.namespace]))
        return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": values}]}

    def hosts(self) -> list[str]:
        if self.url is not None:
            return [urlsplit(self.url).hostname or "127.0.0.1"]
        return [f"{self.service}.{self.namespace}.svc", f"{self.service}.{self.namespace}.svc.cluster.local"]

    def client_config(self, path: str, ca: bytes) -> dict[str, Any]:
        bundle = base64.b64encode(ca).decode()
        if self.url is not None:
            return {"url": self.url.rstrip("/") + path, "caBundle": bundle}
        return {
            "service": {"namespace": self.namespace, "name": self.service, "path": path, "port": 443},
            "caBundle": bundle,
        }


# -- certificate -------------------------------------------------------------------------------


async def certificate(api: KubeApi, settings: WebhookSettings) -> ServingCert:
    """The webhooks' certificate, from their Secret (made if need be)."""
    return await serving.certificate(api, settings.namespace, settings.secret, settings.hosts(), "webhook")


# -- registration ------------------------------------------------------------------------------


def path(kind: Kind, mutating: bool) -> str:
    """Where a kind's webhook is served, as Kueue (controller-runtime) names it: /mutate-batch-v1-job."""
    return f"/{'mutate' if mutating else 'validate'}-{kind.group.replace('.', '-')}-{kind.version}-{kind.name.lower()}"


def configurations(
    settings: WebhookSettings, ca: bytes, integrations: Iterable[Integration]
) -> list[tuple[Kind, dict[str, Any]]]:
    common: dict[str, Any] = {
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "timeoutSeconds": 10,
        "matchPolicy": "Equivalent",
        "namespaceSelector": settings.selector(),
        # Only queued objects: other objects of these kinds never wait on this operator.
        "objectSelector": {"matchExpressions": [{"key": QUEUE_LABEL, "operator": "Exists"}]},
    }

    chosen = list(integrations)

    def hook(integration: Integration, mutating: bool) -> dict[str, Any]:
        kind = integration.kind
        on_update = not mutating or integration.mutate_on_update
        operations = ["CREATE", "UPDATE"] if on_update else ["CREATE"]
        rule = {
            "apiGroups": [kind.group],
            "apiVersions": [kind.version],
            "operations": operations,
            "resources": [kind.plural],
        }
        entry: dict[str, Any] = {
            "name": f"{'m' if mutating else 'v'}{kind.name.lower()}.preemption-operator.dev",
            "clientConfig": settings.client_config(path(kind, mutating), ca),
            "rules": [rule],
            **common,
        }
        if mutating and integration.reinvoke:
            # Webhooks run in the order of their configurations' names: another project's that
            # sorts after ours may add what ours reads, and ours must then see the object again.
            entry["reinvocationPolicy"] = "IfNeeded"
        return entry

    def body(configuration: Kind, mutating: bool) -> dict[str, Any]:
        return {
            "apiVersion": configuration.api_version,
            "kind": configuration.name,
            "metadata": {"name": CONFIGURATION_NAME, "labels": {"app.kubernetes.io/name": "preemption-operator"}},
            "webhooks": [hook(integration, mutating) for integration in chosen],
        }

    return [
        (MutatingConfiguration, body(MutatingConfiguration, True)),
        (ValidatingConfiguration, body(ValidatingConfiguration, False)),
    ]


def _differs(want: dict[str, Any], have: dict[str, Any]) -> bool:
    """Whether the stored configuration lacks something we set (the server adds defaults)."""

    def covered(a: Any, b: Any) -> bool:
        if isinstance(a, dict):
            return isinstance(b, dict) and all(covered(v, b.get(k)) for k, v in a.items())
        if isinstance(a, list):
            return isinstance(b, list) and len(a) == len(b) and all(covered(x, y) for x, y in zip(a, b, strict=True))
        return bool(a == b)

    if not covered(want["webhooks"], have.get("webhooks")):
        return True
    # A selector is what it says, nothing more: one the server holds with more in it differs.
    return any(
        w.get(key) != h.get(key)
        for w, h in zip(want["webhooks"], have.get("webhooks") or [], strict=False)
        for key in ("namespaceSelector", "objectSelector")
    )


async def register(api: KubeApi, settings: WebhookSettings, ca: bytes, integrations: Iterable[Integration]) -> None:
    def update(want: dict[str, Any], have: dict[str, Any]) -> dict[str, Any] | None:
        if not _differs(want, have):
            return None
        version = (have.get("metadata") or {}).get("resourceVersion")
        return {**want, "metadata": {**want["metadata"], "resourceVersion": version}}

    for kind, body in configurations(settings, ca, integrations):
        await serving.keep(api, kind, CONFIGURATION_NAME, body, update)


# -- the server --------------------------------------------------------------------------------


def make_app(integrations: Iterable[Integration]) -> web.Application:
    def handler(integration: Integration, mutating: bool) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            try:
                body = json.loads(await request.read())
                if not isinstance(body, dict) or not isinstance(body.get("request"), dict):
                    raise ValueError("not an AdmissionReview")
            except ValueError as exc:
                return web.json_response({"error": f"bad request: {exc}"}, status=400)
            answer = webhook.review(body, integration, mutating)
            if not answer["response"]["allowed"]:
                request_ = body["request"]
                log.info(
                    "refused %s of %s %s/%s: %s",
                    request_.get("operation"),
                    integration.kind.name,
                    request_.get("namespace"),
                    request_.get("name"),
                    answer["response"]["status"]["message"],
                )
            return web.json_response(answer)

        return handle

    app = web.Application(client_max_size=MAX_BODY)
    for integration in integrations:
        for mutating in (True, False):
            app.router.add_post(path(integration.kind, mutating), handler(integration, mutating))
    return app


async def serve(api: KubeApi, settings: WebhookSettings, integrations: Iterable[Integration]) -> web.AppRunner:
    """Certificate, server, then registration: the API server is pointed at the webhooks only
    once they answer."""
    integrations = tuple(integrations)
    cert = await certificate(api, settings)
    runner = web.AppRunner(make_app(integrations), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port, ssl_context=serving.ssl_context(cert))
    try:
        await site.start()
        await register(api, settings, cert.ca, integrations)
    except BaseException:
        with contextlib.suppress(Exception):
            await runner.cleanup()
        raise
    log.info("serving the job webhooks on %s:%d", settings.host, settings.port)
    return runner
