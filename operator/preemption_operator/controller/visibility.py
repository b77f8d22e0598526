"""Kueue's visibility API (visibility.kueue.x-k8s.io/v1beta2), served behind kube-apiserver's
aggregation layer: each ClusterQueue's and LocalQueue's pending workloads with their positions,
read from the cache in the order the scheduler takes them.

    GET /apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/NAME/pendingworkloads?limit=&offset=
    GET /apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/NS/localqueues/NAME/pendingworkloads

The same paths, fields, defaults (limit 1000, at most 100,000) and errors as Kueue's. Who may
read is RBAC's answer on `clusterqueues/pendingworkloads` and `localqueues/pendingworkloads`
(a SubjectAccessReview for the user the front proxy names). The operator keeps the APIService's
caBundle in step with its certificate (Secret preemption-operator-visibility-cert)."""

from __future__ import annotations

import base64
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ..api.kinds import Kind
from ..api.visibility import (
    API_SERVICE,
    DISCOVERY,
    GROUP,
    GROUP_DISCOVERY,
    GROUP_VERSION,
    PREFIX,
    VERSION,
    pending_workload,
    summary,
)
from ..engine import positions
from ..engine.cache import Cache
from ..k8s import delegation
from ..k8s.api import ApiError, KubeApi, status_object
from . import serving

log = logging.getLogger(__name__)

APIService = Kind("APIService", "apiregistration.k8s.io", "v1", "apiservices", False)


@dataclass(frozen=True)
class VisibilitySettings:
    namespace: str
    """The operator's namespace: its Service and certificate Secret live there."""
    port: int = 8082
    """Kueue's visibility port."""
    host: str = "0.0.0.0"
    service: str = "preemption-operator-visibility"
    service_port: int = 443
    """The Service's port the APIService names (a local run: the operator's own port)."""
    secret: str = "preemption-operator-visibility-cert"

    def hosts(self) -> list[str]:
        """The names kube-apiserver checks the certificate for: it calls the Service by them."""
        return [f"{self.service}.{self.namespace}.svc", f"{self.service}.{self.namespace}.svc.cluster.local"]

    def api_service(self, ca: bytes) -> dict[str, Any]:
        return {
            "apiVersion": APIService.api_version,
            "kind": "APIService",
            "metadata": {"name": API_SERVICE, "labels": {"app.kubernetes.io/name": "preemption-operator"}},
            "spec": {
                "group": GROUP,
                "version": VERSION,
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
                "service": {"namespace": self.namespace, "name": self.service, "port": self.service_port},
                "caBundle": base64.b64encode(ca).decode(),
            },
        }


# -- the wire format ---------------------------------------------------------------------------


def status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> web.Response:
    return web.json_response(status_object(code, reason, message, details), status=code)


def not_found(resource: str, name: str) -> web.Response:
    return status(
        404,
        "NotFound",
        f'{resource}.{GROUP} "{name}" not found',
        {"name": name, "group": GROUP, "kind": resource},
    )


def _page(page: list[positions.Position]) -> dict[str, Any]:
    return summary([pending_workload(p.info.obj, p.in_cluster_queue, p.in_local_queue) for p in page])


def _page_options(query: Any) -> tuple[int, int] | web.Response:
    """`limit` and `offset` (integers; an absent or zero limit is Kueue's default)."""
    found: dict[str, int] = {}
    for name in ("limit", "offset"):
        text = query.get(name)
        if text is None or text == "":
            found[name] = 0
            continue
        try:
            found[name] = int(text)
        except ValueError:
            return status(400, "BadRequest", f'{name}: invalid value "{text}": not an integer')
    return found["limit"] or positions.DEFAULT_LIMIT, found["offset"]


# -- the server --------------------------------------------------------------------------------


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _attributes(request: web.Request) -> tuple[delegation.Attributes, str, str]:
    """What the request asks, and for a denial the resource and name to name."""
    info = request.match_info
    if "cq" in info:
        attributes = delegation.Attributes("get", GROUP, VERSION, "clusterqueues", "pendingworkloads", name=info["cq"])
        return attributes, "clusterqueues", info["cq"]
    if "lq" in info:
        attributes = delegation.Attributes(
            "get", GROUP, VERSION, "localqueues", "pendingworkloads", name=info["lq"], namespace=info["ns"]
        )
        return attributes, "localqueues", info["lq"]
    return delegation.Attributes("get", path=request.path), "", ""


def _forbidden(
    user: delegation.User, attributes: delegation.Attributes, resource: str, name: str, why: str
) -> web.Response:
    if not attributes.resource:
        message = f'forbidden: User "{user.name}" cannot get path "{attributes.path}"'
        details: dict[str, Any] = {}
    else:
        scope = f'in the namespace "{attributes.namespace}"' if attributes.namespace else "at the cluster scope"
        message = (
            f'{resource}.{GROUP} "{name}" is forbidden: User "{user.name}" cannot get resource '
            f'"{resource}/{attributes.subresource}" in API group "{GROUP}" {scope}'
        )
        details = {"name": name, "group": GROUP, "kind": resource}
    if why:
        message += f": {why}"
    return status(403, "Forbidden", message, details)


def make_app(
    cache: Cache, headers: delegation.RequestHeaders | None, authorizer: delegation.Authorizer | None
) -> web.Application:
    """The API. With `headers` and `authorizer` None (tests of the format only) every request is
    served; else each must come through the front proxy and be allowed."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in ("/healthz", "/livez", "/readyz"):
            return await handler(request)
        if headers is None or authorizer is None:
            return await handler(request)
        peer = request.transport.get_extra_info("peercert") if request.transport is not None else None
        user = delegation.authenticate(headers, peer, request.headers)
        if user is None:
            return status(401, "Unauthorized", "Unauthorized")
        attributes, resource, name = _attributes(request)
        try:
            allowed, why = await authorizer.allowed(user, attributes)
        except ApiError as exc:
            log.warning("visibility: could not review access of %s to %s: %s", user.name, request.path, exc)
            return status(500, "InternalError", f"could not check access: {exc}")
        if not allowed:
            return _forbidden(user, attributes, resource, name, why)
        return await handler(request)

    async def healthy(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def groups(_: web.Request) -> web.Response:
        return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": [GROUP_DISCOVERY]})

    async def group(_: web.Request) -> web.Response:
        return web.json_response(GROUP_DISCOVERY)

    async def resources(_: web.Request) -> web.Response:
        return web.json_response(DISCOVERY)

    async def in_cluster_queue(request: web.Request) -> web.Response:
        options = _page_options(request.query)
        if isinstance(options, web.Response):
            return options
        name = request.match_info["cq"]
        ordered = cache.pending_in(name)
        if ordered is None:
            return not_found("clusterqueue", name)
        return web.json_response(_page(positions.in_cluster_queue(ordered, *options)))

    async def in_local_queue(request: web.Request) -> web.Response:
        options = _page_options(request.query)
        if isinstance(options, web.Response):
            return options
        namespace, name = request.match_info["ns"], request.match_info["lq"]
        lq = cache.objects["LocalQueue"].get(f"{namespace}/{name}")
        if lq is None:
            return not_found("localqueue", name)
        ordered = cache.pending_in(lq.spec.cluster_queue) or []
        return web.json_response(_page(positions.in_local_queue(ordered, namespace, name, *options)))

    app = web.Application(middlewares=[guard])
    for path in ("/healthz", "/livez", "/readyz"):
        app.router.add_get(path, healthy)
    app.router.add_get("/apis", groups)
    app.router.add_get(f"/apis/{GROUP}", group)
    app.router.add_get(PREFIX, resources)
    app.router.add_get(PREFIX + "/clusterqueues/{cq}/pendingworkloads", in_cluster_queue)
    app.router.add_get(PREFIX + "/namespaces/{ns}/localqueues/{lq}/pendingworkloads", in_local_queue)
    return app


async def register(api: KubeApi, settings: VisibilitySettings, ca: bytes) -> None:
    """The APIService, made if missing, its service and caBundle kept as `settings` says (a
    manifest may have made it without a caBundle, or skipping verification)."""

    def update(want: dict[str, Any], have: dict[str, Any]) -> dict[str, Any] | None:
        spec = have.get("spec") or {}
        if all(spec.get(k) == v for k, v in want["spec"].items()) and not spec.get("insecureSkipTLSVerify"):
            return None
        return {**have, "spec": {**spec, **want["spec"], "insecureSkipTLSVerify": False}}

    await serving.keep(api, APIService, API_SERVICE, settings.api_service(ca), update)


async def serve(api: KubeApi, settings: VisibilitySettings, cache: Cache) -> web.AppRunner:
    """kube-apiserver's front-proxy settings, the certificate, the server, then the APIService:
    kube-apiserver is pointed at the server only once it answers."""
    headers = await delegation.request_headers(api)
    cert = await serving.certificate(api, settings.namespace, settings.secret, settings.hosts(), "visibility")
    app = make_app(cache, headers, delegation.Authorizer(api))
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
    await runner.setup()
    context = serving.ssl_context(cert, client_ca=headers.client_ca)
    site = web.TCPSite(runner, settings.host, settings.port, ssl_context=context)
    try:
        await site.start()
        await register(api, settings, cert.ca)
    except BaseException:
        with contextlib.suppress(Exception):
            await runner.cleanup()
        raise
    log.info("serving the visibility API (%s) on %s:%d", GROUP_VERSION, settings.host, settings.port)
    return runner
