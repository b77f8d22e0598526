"""The operator's API client over each of its transports against the real kube-apiserver (TLS
with the control plane's CA, a bearer token): plain HTTP/1.1, which carries every request by
default (its watches streamed by aiohttp), aiohttp alone, and lightkube's httpx2 client, which
carries them for kubeconfigs with an exec plugin. Every operation the operator uses runs over each:
list (in pages), watch, get, create, replace, JSON and merge patches, delete (also with a uid
precondition)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from lightkube import KubeConfig
from lightkube.config.kubeconfig import SingleConfig

from preemption_operator.k8s.api import REQUEST_SECONDS, AiohttpTransport, ApiError, HttpxTransport, KubeApi, Transport
from preemption_operator.k8s.http11 import Http11Transport
from preemption_operator.testing.control_plane import ControlPlane

TRANSPORTS: dict[str, Callable[[SingleConfig], Transport]] = {
    "http11": Http11Transport,
    "aiohttp": AiohttpTransport,
    "httpx": lambda config: HttpxTransport(config, REQUEST_SECONDS),
}


def config_map(name: str, **data: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_every_operation_over_each_transport(transport: str, cluster: ControlPlane, namespace: str) -> None:
    config = KubeConfig.from_file(str(cluster.kubeconfig)).get()
    assert config is not None
    api = KubeApi(config, transport=TRANSPORTS[transport](config))
    collection = f"/api/v1/namespaces/{namespace}/configmaps"
    try:
        for name in ("a", "b", "c"):
            created = await api.create(collection, config_map(name, n="0"))
            assert created["metadata"]["namespace"] == namespace
        items, version = await api.list(collection, page=2)  # two pages
        assert sorted(i["metadata"]["name"] for i in items) == ["a", "b", "c"]
        assert version

        fetched = await api.get(f"{collection}/a")
        fetched["data"] = {"n": "1"}
        assert (await api.replace(f"{collection}/a", fetched))["data"] == {"n": "1"}
        patched = await api.patch_json(f"{collection}/a", [{"op": "add", "path": "/data/json", "value": "yes"}])
        assert patched["data"] == {"n": "1", "json": "yes"}
        merged = await api.patch_merge(f"{collection}/a", {"data": {"merge": "yes"}})
        assert merged["data"] == {"n": "1", "json": "yes", "merge": "yes"}
        with pytest.raises(ApiError) as other:  # the name holds another object than this uid's
            await api.delete(f"{collection}/b", uid="not-its-uid")
        assert other.value.code == 409
        b_uid = (await api.get(f"{collection}/b"))["metadata"]["uid"]
        await api.delete(f"{collection}/b", uid=b_uid)
        with pytest.raises(ApiError) as gone:
            await api.get(f"{collection}/b")
        assert gone.value.code == 404

        # Every write since the list, in order, then the watch is left (the server would end it
        # only after its timeout).
        seen: list[tuple[str, str]] = []
        async for event in api.watch(collection, version, 60):
            if event["type"] != "BOOKMARK":
                seen.append((event["type"], event["object"]["metadata"]["name"]))
            if len(seen) == 4:
                break
        assert seen == [("MODIFIED", "a"), ("MODIFIED", "a"), ("MODIFIED", "a"), ("DELETED", "b")]
    finally:
        await api.close()
