"""The few Lease requests leader election needs, on a synchronous HTTP client of its own: the
election runs on a thread, so no work on the event loop can delay a renewal."""

from __future__ import annotations

from typing import Any

import httpx2 as httpx
import msgspec
from lightkube.config import client_adapter
from lightkube.config.kubeconfig import SingleConfig

from ..api.kinds import Lease


class LeaseClient:
    """The few Lease requests election needs, on a synchronous client of its own."""

    def __init__(self, config: SingleConfig, namespace: str, name: str, timeout: float) -> None:
        self.http = client_adapter.Client(config, client_adapter.ConnectionParams(timeout=httpx.Timeout(timeout)))
        self.collection = Lease.path(namespace=namespace)
        self.path = Lease.path(name, namespace)
        self.namespace = namespace
        self.name = name

    def _send(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        content = msgspec.json.encode(body) if body is not None else None
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        response = self.http.request(method, path, content=content, headers=headers)
        data: dict[str, Any] = msgspec.json.decode(response.content) if response.content else {}
        return response.status_code, data

    def get(self) -> dict[str, Any] | None:
        code, body = self._send("GET", self.path)
        if code == 404:
            return None
        if code >= 400:
            raise RuntimeError(f"reading lease: HTTP {code}: {body.get('message', '')}")
        return body

    def create(self, spec: dict[str, Any]) -> bool:
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec,
        }
        code, body = self._send("POST", self.collection, lease)
        if code == 409:
            return False
        if code >= 400:
            raise RuntimeError(f"creating lease: HTTP {code}: {body.get('message', '')}")
        return True

    def replace(self, lease: dict[str, Any]) -> bool:
        """False when someone else changed it first (the resourceVersion in `lease` is stale)."""
        code, body = self._send("PUT", self.path, lease)
        if code == 409:
            return False
        if code >= 400:
            raise RuntimeError(f"updating lease: HTTP {code}: {body.get('message', '')}")
        return True

    def close(self) -> None:
        self.http.close()
