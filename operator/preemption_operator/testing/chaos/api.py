"""A small API client for the chaos harness (the standard library only: http.client, one keep-alive
connection per thread and server, so the harness shares no client library with the operator),
the API paths, labels and annotations it reads, and the foreign writer's marks on an object."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..workload_status import condition

KUEUE = "kueue.x-k8s.io/v1beta2"
KUEUE_ALPHA = "kueue.x-k8s.io/v1alpha1"
KUEUE_PATH = "/apis/kueue.x-k8s.io/v1beta2"
ALPHA_PATH = "/apis/kueue.x-k8s.io/v1alpha1"
LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
CONFIG_ANNOTATION = "kueue.x-k8s.io/preemption-config-name"
RUN_LABEL = "chaos.preemption-operator/run"
TOUCH_KEY = "chaos.example.com/touched"
TOUCH_CONDITION = "chaos.example.com/Touched"
FAULTS_ENV = "PREEMPTION_OPERATOR_FAULTS"
STOP_LINE = "fault injection: stopping before writes"
JOBS_PATH = "/apis/batch/v1"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
CQ_POD_LABEL = "kueue.x-k8s.io/cluster-queue-name"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
"""On each pod the operator started: the Workload it runs under."""
JOBSETS_PATH = "/apis/jobset.x-k8s.io/v1alpha2"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
GROUP_WORKLOAD = "kueue.x-k8s.io/is-group-workload"
MANAGED = "kueue.x-k8s.io/managed"
"""The label and finalizer the operator's webhook gives a queued Pod."""
COMPLETE_AFTER = "pod-complete.stage.kwok.x-k8s.io/delay"
"""kwok's stage: a Running pod with this annotation (a Go duration) succeeds that long after."""
WEBHOOKS = "preemption-operator"
"""The operator's Mutating- and ValidatingWebhookConfiguration."""


def now_s() -> float:
    return time.monotonic()


class ApiError(Exception):
    def __init__(self, status: int, body: Any, method: str, path: str) -> None:
        message = body.get("message") if isinstance(body, dict) else str(body)[:300]
        super().__init__(f"{method} {path}: HTTP {status}: {message}")
        self.status = status
        self.body = body


class ApiUnavailable(ApiError):
    """No API server answered."""


class KubeClient:
    """JSON over https to one of several kube-apiservers (the first that answers; they share
    etcd). Thread-safe: one keep-alive connection per thread and server."""

    def __init__(self, servers: Sequence[str], token: str, ca_file: Path, *, timeout: float = 15.0) -> None:
        self.servers = list(servers)
        self.token = token
        self.timeout = timeout
        self.context = ssl.create_default_context(cafile=str(ca_file))
        self._local = threading.local()

    def _conns(self) -> dict[str, http.client.HTTPSConnection]:
        conns: dict[str, http.client.HTTPSConnection] | None = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        return conns

    def _connect(self, server: str, timeout: float) -> http.client.HTTPSConnection:
        url = urlsplit(server)
        return http.client.HTTPSConnection(url.hostname or "127.0.0.1", url.port, context=self.context, timeout=timeout)

    def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        """(status, parsed JSON body); raises ApiUnavailable when no server answers."""
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = content_type
        conns = self._conns()
        last: Exception | None = None
        for server in self.servers:
            for _attempt in range(2):  # a kept-alive connection may have been closed by the server
                conn = conns.get(server)
                if conn is None:
                    conn = conns[server] = self._connect(server, self.timeout)
                try:
                    conn.request(method, path, body=payload, headers=headers)
                    resp = conn.getresponse()
                    raw = resp.read()
                except (OSError, http.client.HTTPException) as exc:
                    last = exc
                    conn.close()
                    conns.pop(server, None)
                    continue
                try:
                    data = json.loads(raw) if raw else None
                except ValueError:
                    data = raw.decode(errors="replace")
                return resp.status, data
        raise ApiUnavailable(0, f"no API server answered ({last})", method, path)

    def call(self, method: str, path: str, body: Any = None, *, ok: Sequence[int] = (200, 201), **kw: Any) -> Any:
        status, data = self.request(method, path, body, **kw)
        if status not in ok:
            raise ApiError(status, data, method, path)
        return data

    def get(self, path: str) -> dict[str, Any] | None:
        status, data = self.request("GET", path)
        if status == 404:
            return None
        if status != 200:
            raise ApiError(status, data, "GET", path)
        return dict(data)

    def list_items(self, path: str) -> tuple[list[dict[str, Any]], str]:
        """Items (with apiVersion and kind filled in) and the list's resourceVersion."""
        data = self.call("GET", path)
        api_version = data.get("apiVersion", "")
        kind = str(data.get("kind", "")).removesuffix("List")
        items = []
        for item in data.get("items") or []:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
            items.append(item)
        return items, str((data.get("metadata") or {}).get("resourceVersion", ""))

    def json_patch(self, path: str, ops: list[dict[str, Any]]) -> tuple[int, Any]:
        return self.request("PATCH", path, ops, content_type="application/json-patch+json")

    def watch(
        self, path: str, resource_version: str, holder: list[Any], *, timeout_seconds: int = 60
    ) -> Iterator[dict[str, Any]]:
        """Watch events from resource_version on the first server that answers. ``holder``
        gets the live connection, so another thread can close it to end the watch."""
        query = f"watch=1&allowWatchBookmarks=true&timeoutSeconds={timeout_seconds}&resourceVersion={resource_version}"
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        last: Exception | None = None
        for server in self.servers:
            conn = self._connect(server, timeout_seconds + 30)
            try:
                conn.request("GET", f"{path}?{query}", headers=headers)
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                last = exc
                conn.close()
                continue
            holder[:] = [conn]
            try:
                if resp.status != 200:
                    raw = resp.read()
                    raise ApiError(resp.status, raw.decode(errors="replace"), "WATCH", path)
                while True:
                    line = resp.readline()
                    if not line:
                        return
                    if line.strip():
                        yield json.loads(line)
            finally:
                holder[:] = []
                conn.close()
        raise ApiUnavailable(0, f"no API server answered ({last})", "WATCH", path)


def workload_path(namespace: str, name: str = "", subresource: str = "") -> str:
    path = f"{KUEUE_PATH}/namespaces/{namespace}/workloads"
    if name:
        path += f"/{name}"
    if subresource:
        path += f"/{subresource}"
    return path


def touches(obj: dict[str, Any]) -> tuple[int | None, int | None, int | None]:
    """The foreign writer's (label, annotation, condition) counters on an object."""
    meta = obj.get("metadata") or {}

    def number(value: Any) -> int | None:
        try:
            return int(value)
        except (TypeError, ValueError):
            return None

    cond = condition(obj, TOUCH_CONDITION)
    return (
        number((meta.get("labels") or {}).get(TOUCH_KEY)),
        number((meta.get("annotations") or {}).get(TOUCH_KEY)),
        number(cond.get("message")) if cond else None,
    )
