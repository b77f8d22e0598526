"""Kueue's visibility API served by the operator (issue 31, item 1): pending workloads with their
positions in the order the scheduler takes them, Kueue's paging and errors, and who may read
them (the front proxy's certificate, then a SubjectAccessReview).

The paging cases are Kueue's own (pkg/visibility/storage/pending_workloads_{cq,lq}_test.go),
each named after its case."""

from __future__ import annotations

import socket
import ssl
import tempfile
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from multidict import CIMultiDict

from builders import NOW, T0, cache_of, cluster_queue, local_queue, namespace, pending, resource_flavor, rfc3339
from preemption_operator.controller import serving, visibility
from preemption_operator.engine import positions
from preemption_operator.engine.cache import Cache
from preemption_operator.k8s import delegation
from preemption_operator.k8s.api import ApiError
from preemption_operator.k8s.certs import issue, issue_client

HIGH, LOW = 100, 10
PREFIX = "/apis/visibility.kueue.x-k8s.io/v1beta2"


def wl(name: str, lq: str, priority: int, seconds: int = 0, ns: str = "default") -> Any:
    return pending(name, lq, 1, priority=priority, created=T0 + timedelta(seconds=seconds), namespace=ns)


def setup(*workloads: Any, queues: tuple[tuple[str, str, str], ...] = (("default", "lq-a", "cq-a"),)) -> Cache:
    """ClusterQueue cq-a (and cq-b), LocalQueues (namespace, name, ClusterQueue), workloads."""
    namespaces = sorted({ns for ns, _, _ in queues} | {"default"})
    objects = [
        *(namespace(ns) for ns in namespaces),
        resource_flavor("default"),
        cluster_queue("cq-a", 100),
        cluster_queue("cq-b", 100),
        *(local_queue(name, cq, namespace=ns) for ns, name, cq in queues),
        *workloads,
    ]
    return cache_of(objects)


async def get(cache: Cache, path: str) -> tuple[int, dict[str, Any]]:
    async with TestClient(TestServer(visibility.make_app(cache, None, None))) as client:
        response = await client.get(path)
        return response.status, await response.json()


def brief(body: dict[str, Any]) -> list[tuple[str, str, int, int, int]]:
    return [
        (
            item["metadata"]["name"],
            item["localQueueName"],
            item["priority"],
            item["positionInClusterQueue"],
            item["positionInLocalQueue"],
        )
        for item in body["items"]
    ]


# -- Kueue's ClusterQueue cases --------------------------------------------------------------------


async def test_single_cluster_queue_and_single_local_queue_with_two_workloads_and_default_query_parameters() -> None:
    cache = setup(wl("a", "lq-a", HIGH), wl("b", "lq-a", LOW))
    code, body = await get(cache, f"{PREFIX}/clusterqueues/cq-a/pendingworkloads")
    assert code == 200
    assert body["kind"] == "PendingWorkloadsSummary"
    assert body["apiVersion"] == "visibility.kueue.x-k8s.io/v1beta2"
    assert brief(body) == [("a", "lq-a", HIGH, 0, 0), ("b", "lq-a", LOW, 1, 1)]
    assert body["items"][0]["metadata"] == {
        "name": "a",
        "namespace": "default",
        "creationTimestamp": rfc3339(T0),
    }


async def test_single_cluster_queue_and_two_local_queues_with_four_workloads_and_default_query_parameters() -> None:
    cache = setup(
        wl("lqa-high-prio", "lq-a", HIGH),
        wl("lqa-low-prio", "lq-a", LOW),
        wl("lqb-high-prio", "lq-b", HIGH, 1),
        wl("lqb-low-prio", "lq-b", LOW, 1),
        queues=(("default", "lq-a", "cq-a"), ("default", "lq-b", "cq-a")),
    )
    _, body = await get(cache, f"{PREFIX}/clusterqueues/cq-a/pendingworkloads")
    assert brief(body) == [
        ("lqa-high-prio", "lq-a", HIGH, 0, 0),
        ("lqb-high-prio", "lq-b", HIGH, 1, 0),
        ("lqa-low-prio", "lq-a", LOW, 2, 1),
        ("lqb-low-prio", "lq-b", LOW, 3, 1),
    ]


THREE = (wl("a", "lq-a", HIGH), wl("b", "lq-a", HIGH, 1), wl("c", "lq-a", HIGH, 2))


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("limit=2", [("a", "lq-a", HIGH, 0, 0), ("b", "lq-a", HIGH, 1, 1)]),  # limit query parameter set
        ("offset=1", [("b", "lq-a", HIGH, 1, 1), ("c", "lq-a", HIGH, 2, 2)]),  # offset query parameter set
        ("offset=1&limit=1", [("b", "lq-a", HIGH, 1, 1)]),  # limit offset query parameters set
        ("limit=-1", []),  # negative limit is clamped to zero and returns no workloads without panicking
        # excessive limit returns all pending workloads without over-allocating
        ("limit=2000000000", [("a", "lq-a", HIGH, 0, 0), ("b", "lq-a", HIGH, 1, 1), ("c", "lq-a", HIGH, 2, 2)]),
    ],
)
async def test_paging_of_a_cluster_queue(query: str, expected: list[tuple[str, str, int, int, int]]) -> None:
    _, body = await get(setup(*THREE), f"{PREFIX}/clusterqueues/cq-a/pendingworkloads?{query}")
    assert brief(body) == expected


async def test_same_local_queue_name_in_two_namespaces_reports_each_namespaces_own_position() -> None:
    cache = setup(
        wl("a", "lq-a", HIGH),
        wl("b", "lq-a", HIGH, 1, ns="other"),
        queues=(("default", "lq-a", "cq-a"), ("other", "lq-a", "cq-a")),
    )
    _, body = await get(cache, f"{PREFIX}/clusterqueues/cq-a/pendingworkloads")
    assert brief(body) == [("a", "lq-a", HIGH, 0, 0), ("b", "lq-a", HIGH, 1, 0)]


async def test_empty_cluster_queue() -> None:
    code, body = await get(setup(), f"{PREFIX}/clusterqueues/cq-a/pendingworkloads")
    assert (code, body["items"]) == (200, [])


async def test_nonexistent_cluster_queue_is_kueues_not_found() -> None:
    code, body = await get(setup(), f"{PREFIX}/clusterqueues/nonexistent-queue/pendingworkloads")
    assert code == 404
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'clusterqueue.visibility.kueue.x-k8s.io "nonexistent-queue" not found',
        "reason": "NotFound",
        "details": {"name": "nonexistent-queue", "group": "visibility.kueue.x-k8s.io", "kind": "clusterqueue"},
        "code": 404,
    }


async def test_a_limit_that_is_not_a_number_is_a_bad_request() -> None:
    code, body = await get(setup(), f"{PREFIX}/clusterqueues/cq-a/pendingworkloads?limit=ten")
    assert (code, body["reason"]) == (400, "BadRequest")
    assert "limit" in body["message"]


# -- Kueue's LocalQueue cases ----------------------------------------------------------------------

TWO_QUEUES = (("default", "lq-a", "cq-a"), ("default", "lq-b", "cq-a"))
FOUR = (
    wl("lqa-high-prio", "lq-a", HIGH),
    wl("lqa-low-prio", "lq-a", LOW),
    wl("lqb-high-prio", "lq-b", HIGH, 1),
    wl("lqb-low-prio", "lq-b", LOW, 1),
)


async def test_local_queue_a_of_two_sharing_a_cluster_queue() -> None:
    _, body = await get(
        setup(*FOUR, queues=TWO_QUEUES), f"{PREFIX}/namespaces/default/localqueues/lq-a/pendingworkloads"
    )
    assert brief(body) == [("lqa-high-prio", "lq-a", HIGH, 0, 0), ("lqa-low-prio", "lq-a", LOW, 2, 1)]


async def test_local_queue_b_of_two_sharing_a_cluster_queue() -> None:
    _, body = await get(
        setup(*FOUR, queues=TWO_QUEUES), f"{PREFIX}/namespaces/default/localqueues/lq-b/pendingworkloads"
    )
    assert brief(body) == [("lqb-high-prio", "lq-b", HIGH, 1, 0), ("lqb-low-prio", "lq-b", LOW, 3, 1)]


async def test_two_namespaces_two_cluster_queues_each_local_queue_sees_its_own() -> None:
    queues = (("ns-a", "lq-a", "cq-a"), ("ns-b", "lq-b", "cq-b"))
    cache = setup(
        wl("lqa-high-prio", "lq-a", HIGH, ns="ns-a"),
        wl("lqa-low-prio", "lq-a", LOW, ns="ns-a"),
        wl("lqb-high-prio", "lq-b", HIGH, 1, ns="ns-b"),
        wl("lqb-low-prio", "lq-b", LOW, 1, ns="ns-b"),
        queues=queues,
    )
    _, a = await get(cache, f"{PREFIX}/namespaces/ns-a/localqueues/lq-a/pendingworkloads")
    _, b = await get(cache, f"{PREFIX}/namespaces/ns-b/localqueues/lq-b/pendingworkloads")
    assert brief(a) == [("lqa-high-prio", "lq-a", HIGH, 0, 0), ("lqa-low-prio", "lq-a", LOW, 1, 1)]
    assert brief(b) == [("lqb-high-prio", "lq-b", HIGH, 0, 0), ("lqb-low-prio", "lq-b", LOW, 1, 1)]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("limit=2", [("a", "lq-a", HIGH, 0, 0), ("b", "lq-a", HIGH, 1, 1)]),
        ("offset=1", [("b", "lq-a", HIGH, 1, 1), ("c", "lq-a", HIGH, 2, 2)]),
        ("offset=1&limit=1", [("b", "lq-a", HIGH, 1, 1)]),
        ("limit=-1", []),
        ("limit=2000000000", [("a", "lq-a", HIGH, 0, 0), ("b", "lq-a", HIGH, 1, 1), ("c", "lq-a", HIGH, 2, 2)]),
    ],
)
async def test_paging_of_a_local_queue(query: str, expected: list[tuple[str, str, int, int, int]]) -> None:
    _, body = await get(setup(*THREE), f"{PREFIX}/namespaces/default/localqueues/lq-a/pendingworkloads?{query}")
    assert brief(body) == expected


async def test_nonexistent_local_queue_is_kueues_not_found() -> None:
    code, body = await get(setup(), f"{PREFIX}/namespaces/default/localqueues/invalid-name/pendingworkloads")
    assert code == 404
    assert body["message"] == 'localqueue.visibility.kueue.x-k8s.io "invalid-name" not found'
    assert body["details"]["kind"] == "localqueue"


# -- what counts as pending, and in which order ----------------------------------------------------


def test_only_active_pending_workloads_count_and_a_backoff_keeps_its_place_by_queue_order() -> None:
    evicted = (
        wl("evicted", "lq-a", HIGH, 5)
        .admitted("cq-a", at=T0)
        .evicted(reason="PodsReadyTimeout", at=T0)
        .requeued(NOW + timedelta(minutes=5))
    )
    inactive = wl("inactive", "lq-a", HIGH, 1).obj()
    inactive["spec"]["active"] = False
    running = wl("running", "lq-a", HIGH).admitted("cq-a", at=T0)
    cache = setup(wl("old-low", "lq-a", LOW), wl("new-high", "lq-a", HIGH, 9), evicted, inactive, running)
    ordered = cache.pending_in("cq-a")
    assert ordered is not None
    assert [info.name for info in ordered] == ["evicted", "new-high", "old-low"]
    assert cache.pending_in("missing") is None


def test_the_order_is_the_order_a_snapshot_routes() -> None:
    cache = setup(*FOUR, wl("x", "lq-b", 50, 3), queues=TWO_QUEUES)
    routed = cache.snapshot(NOW).pending["cq-a"]
    ordered = cache.pending_in("cq-a")
    assert ordered is not None
    assert [i.key for i in ordered] == [i.key for i in routed]


def test_a_workload_of_a_stopped_local_queue_is_not_pending_in_its_cluster_queue() -> None:
    stopped = local_queue("lq-b", "cq-a")
    stopped["spec"]["stopPolicy"] = "Hold"
    objects = [namespace(), resource_flavor("default"), cluster_queue("cq-a", 1), local_queue("lq-a", "cq-a"), stopped]
    cache = cache_of([*objects, wl("a", "lq-a", 1), wl("b", "lq-b", 1)])
    assert [i.name for i in cache.pending_in("cq-a") or []] == ["a"]


def test_bounds_are_kueues() -> None:
    assert positions.bounded(-5, -3) == (0, 0)
    assert positions.bounded(10**9, 7) == (100_000, 7)


# -- who may read ----------------------------------------------------------------------------------


class ReviewApi:
    """Answers SubjectAccessReviews: allowed when `allow` says so."""

    def __init__(self, allow: Callable[[dict[str, Any]], bool]) -> None:
        self.allow = allow
        self.reviews: list[dict[str, Any]] = []

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        assert path == delegation.REVIEWS
        self.reviews.append(body["spec"])
        allowed = self.allow(body["spec"])
        return {**body, "status": {"allowed": allowed, **({} if allowed else {"reason": "no RBAC policy matched"})}}


HEADERS = delegation.RequestHeaders(client_ca=b"", allowed_names=("front-proxy-client",))
PROXY = {"subject": ((("commonName", "front-proxy-client"),),)}


def test_the_front_proxy_names_the_user_groups_and_extra() -> None:
    headers = CIMultiDict(
        [
            ("X-Remote-User", "alice"),
            ("X-Remote-Group", "team-a"),
            ("X-Remote-Group", "system:authenticated"),
            ("X-Remote-Extra-Scopes", "view"),
            ("X-Remote-Extra-Acme.com%2fproject", "p1"),
        ]
    )
    user = delegation.authenticate(HEADERS, PROXY, headers)
    assert user == delegation.User(
        "alice", ("team-a", "system:authenticated"), {"scopes": ("view",), "acme.com/project": ("p1",)}
    )


@pytest.mark.parametrize(
    ("peer", "headers"),
    [
        (None, {"X-Remote-User": "alice"}),  # no client certificate: the headers are anyone's
        ({"subject": ((("commonName", "someone-else"),),)}, {"X-Remote-User": "alice"}),  # not an allowed name
        (PROXY, {}),  # the proxy names nobody
    ],
)
def test_only_the_front_proxy_names_a_user(peer: Any, headers: dict[str, str]) -> None:
    assert delegation.authenticate(HEADERS, peer, CIMultiDict(headers)) is None


def test_the_config_map_gives_the_front_proxy_settings_and_a_missing_ca_is_named() -> None:
    settings = delegation.RequestHeaders.from_config_map(
        {
            "requestheader-client-ca-file": "PEM",
            "requestheader-allowed-names": '["front-proxy-client"]',
            "requestheader-username-headers": '["X-Remote-User"]',
            "requestheader-group-headers": '["X-Remote-Group"]',
            "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
        }
    )
    assert settings.client_ca == b"PEM"
    assert settings.allowed_names == ("front-proxy-client",)
    with pytest.raises(delegation.NotConfigured, match="--requestheader-client-ca-file"):
        delegation.RequestHeaders.from_config_map({})
    with pytest.raises(ValueError, match="requestheader-allowed-names: not a JSON list"):
        delegation.RequestHeaders.from_config_map(
            {"requestheader-client-ca-file": "PEM", "requestheader-allowed-names": "front-proxy-client"}
        )


async def test_answers_are_kept_for_ten_seconds() -> None:
    now = [0.0]
    api = ReviewApi(lambda spec: True)
    authorizer = delegation.Authorizer(api, clock=lambda: now[0])  # type: ignore[arg-type]
    user = delegation.User("alice", ("team-a",))
    asked = delegation.Attributes("get", "visibility.kueue.x-k8s.io", "v1beta2", "clusterqueues", "pendingworkloads")
    assert await authorizer.allowed(user, asked) == (True, "")
    now[0] = 9.9
    await authorizer.allowed(user, asked)
    assert len(api.reviews) == 1
    now[0] = 10.1
    await authorizer.allowed(user, asked)
    assert len(api.reviews) == 2
    assert api.reviews[0] == {
        "user": "alice",
        "groups": ["team-a"],
        "resourceAttributes": {
            "verb": "get",
            "group": "visibility.kueue.x-k8s.io",
            "version": "v1beta2",
            "resource": "clusterqueues",
            "subresource": "pendingworkloads",
        },
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def tls_server() -> AsyncIterator[tuple[str, ReviewApi, ssl.SSLContext, ssl.SSLContext]]:
    """The API over TLS as kube-apiserver reaches it: its certificate, a front-proxy CA, and a
    reviewer that lets alice read cq-a only. Yields the URL, the reviewer, and client contexts
    with and without the front proxy's certificate."""
    server_cert = issue(["127.0.0.1"])
    proxy = issue_client("front-proxy-client")
    api = ReviewApi(lambda spec: spec["user"] == "alice" and spec.get("resourceAttributes", {}).get("name") == "cq-a")
    headers = delegation.RequestHeaders(client_ca=proxy.ca, allowed_names=("front-proxy-client",))
    app = visibility.make_app(setup(*THREE), headers, delegation.Authorizer(api))  # type: ignore[arg-type]
    runner = web.AppRunner(app)
    await runner.setup()
    port = _free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=serving.ssl_context(server_cert, proxy.ca)).start()
    with tempfile.TemporaryDirectory() as folder:
        cert, key = Path(folder, "c.crt"), Path(folder, "c.key")
        cert.write_bytes(proxy.cert)
        key.write_bytes(proxy.key)
        as_proxy = ssl.create_default_context(cadata=server_cert.ca.decode())
        as_proxy.load_cert_chain(cert, key)
    anonymous = ssl.create_default_context(cadata=server_cert.ca.decode())
    try:
        yield f"https://127.0.0.1:{port}", api, as_proxy, anonymous
    finally:
        await runner.cleanup()


async def test_over_tls_the_front_proxy_is_served_what_rbac_allows(tls_server: Any) -> None:
    url, api, as_proxy, anonymous = tls_server
    async with aiohttp.ClientSession() as session:
        path = f"{url}{PREFIX}/clusterqueues/cq-a/pendingworkloads?limit=1"
        async with session.get(path, ssl=as_proxy, headers={"X-Remote-User": "alice"}) as response:
            assert response.status == 200
            assert [i["metadata"]["name"] for i in (await response.json())["items"]] == ["a"]
        forbidden = f"{url}{PREFIX}/clusterqueues/cq-b/pendingworkloads"
        async with session.get(forbidden, ssl=as_proxy, headers={"X-Remote-User": "alice"}) as response:
            assert response.status == 403
            body = await response.json()
            assert body["message"] == (
                'clusterqueues.visibility.kueue.x-k8s.io "cq-b" is forbidden: User "alice" cannot get resource '
                '"clusterqueues/pendingworkloads" in API group "visibility.kueue.x-k8s.io" at the cluster scope: '
                "no RBAC policy matched"
            )
        lq = f"{url}{PREFIX}/namespaces/default/localqueues/lq-a/pendingworkloads"
        async with session.get(lq, ssl=as_proxy, headers={"X-Remote-User": "bob"}) as response:
            assert response.status == 403
            assert 'cannot get resource "localqueues/pendingworkloads"' in (await response.json())["message"]
            assert 'in the namespace "default"' in (await response.json())["message"]
        # Without the front proxy's certificate the headers name nobody.
        async with session.get(path, ssl=anonymous, headers={"X-Remote-User": "alice"}) as response:
            assert response.status == 401
    assert [r["user"] for r in api.reviews] == ["alice", "alice", "bob"]


async def test_discovery_lists_kueues_resources() -> None:
    code, body = await get(setup(), PREFIX)
    assert code == 200
    assert {r["name"]: r["verbs"] for r in body["resources"]} == {
        "clusterqueues": [],
        "clusterqueues/pendingworkloads": ["get"],
        "localqueues": [],
        "localqueues/pendingworkloads": ["get"],
    }
    _, groups = await get(setup(), "/apis")
    assert groups["groups"][0]["preferredVersion"]["groupVersion"] == "visibility.kueue.x-k8s.io/v1beta2"


# -- the APIService --------------------------------------------------------------------------------


class ServiceApi:
    def __init__(self, have: dict[str, Any] | None) -> None:
        self.have = have
        self.writes: list[tuple[str, dict[str, Any]]] = []

    async def get(self, path: str) -> dict[str, Any]:
        if self.have is None:
            raise ApiError(404, "NotFound", "not found")
        return self.have

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(("create", body))
        self.have = body
        return body

    async def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(("replace", body))
        self.have = body
        return body


async def test_the_api_service_is_made_then_kept_with_the_certificates_ca() -> None:
    settings = visibility.VisibilitySettings(namespace="system", port=8082)
    api = ServiceApi(None)
    await visibility.register(api, settings, b"CA-1")  # type: ignore[arg-type]
    assert api.writes[0][0] == "create"
    spec = api.writes[0][1]["spec"]
    assert spec["service"] == {"namespace": "system", "name": "preemption-operator-visibility", "port": 443}
    assert spec["caBundle"] == "Q0EtMQ=="
    await visibility.register(api, settings, b"CA-1")  # type: ignore[arg-type]
    assert len(api.writes) == 1  # unchanged: not written
    # A manifest's APIService (no caBundle, insecureSkipTLSVerify) gets the CA and verification.
    api = ServiceApi(
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": visibility.API_SERVICE, "resourceVersion": "7"},
            "spec": {**settings.api_service(b"")["spec"], "caBundle": None, "insecureSkipTLSVerify": True},
        }
    )
    await visibility.register(api, settings, b"CA-2")  # type: ignore[arg-type]
    kind, body = api.writes[0]
    assert kind == "replace"
    assert body["metadata"]["resourceVersion"] == "7"
    assert body["spec"]["caBundle"] == "Q0EtMg=="
    assert body["spec"]["insecureSkipTLSVerify"] is False


def test_every_queues_order_at_once_is_each_queues_own() -> None:
    cache = setup(*FOUR, wl("x", "lq-b", 50, 3), wl("y", "lq-c", 1), queues=(*TWO_QUEUES, ("default", "lq-c", "cq-b")))
    every = cache.pending_by_cluster_queue()
    assert set(every) == {"cq-a", "cq-b"}
    for name, ordered in every.items():
        assert [i.key for i in ordered] == [i.key for i in cache.pending_in(name) or []]
    assert [i.name for i in every["cq-b"]] == ["y"]
