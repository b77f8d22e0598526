"""HTTP client benchmark for the operator's hot path, on a real kube-apiserver: Workload status
JSON patches (each guarded by the object's current resourceVersion, as the operator writes them),
Event POSTs, and decoding a watch stream of Workloads; and the JSON codecs on the same bodies.

    python benchmarks/http_clients.py [--workloads 200] [--blocks 10] [--serial 30] [--requests 150]
        [--events 200] [--watch-events 3000] [--output PATH]

Starts etcd + kube-apiserver (KUBEBUILDER_ASSETS or hack/setup-envtest.sh's cache), installs
crds/, creates `--workloads` Workloads (the four kinds of benchmarks/parsing.py in turn), then
measures four phases:

- status patches at concurrency 1 (`--serial` per block), 8 and 32 (`--requests` per block): one
  worker per unit of concurrency, each with its own Workloads, so every patch carries the
  resourceVersion the previous answer returned (a conflict would be counted; there should be none);
- Event POSTs at concurrency 8 (`--events` per block), bodies as the operator's recorder makes them.

Each phase runs in `--blocks` short blocks per client, the clients taking turns block by block in a
rotating order, so that a change in the machine's load (it is shared) falls on every client alike.
Each block follows a few requests at its concurrency that are not counted (connections open).
Measured per block: requests/s (wall clock), the client's CPU (time.process_time of this process:
the server's processes are not in it) and the server's (kube-apiserver + etcd, from /proc) per
request. Then `--watch-events` status patches are made and each client replays them `--blocks`
times from the watch cache (one watch request from the resourceVersion before them), decoding
every event.

Clients: httpx2 as the operator's KubeApi uses it in commit ffef45c (lightkube's kubeconfig
adapter, HTTP/1.1, msgspec; copied here), the same with HTTP/2, aiohttp configured as Python operator frameworks configure it (TCPConnector(limit=0),
the cluster CA and credentials from the kubeconfig, msgspec for JSON), and kubernetes_asyncio
(CustomObjectsApi / CoreV1Api, its own JSON handling). Codecs: msgspec, orjson and json (stdlib).

kubernetes_asyncio and orjson are not dependencies of the operator: `pip install -e '.[bench]'`.
Results are printed and written to benchmarks/results/http_clients.md; every figure in it is
measured in that run. This measures; nothing here is a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import aiohttp
import httpx2 as httpx
import msgspec
import orjson
from lightkube import KubeConfig
from lightkube.config import client_adapter
from lightkube.config.kubeconfig import SingleConfig
from parsing import VARIANTS, workload_body, workload_status  # benchmarks/parsing.py, beside this script

from preemption_operator.testing.control_plane import ControlPlane, running_control_plane

ROOT = Path(__file__).resolve().parents[1]

NS = "bench"
GROUP, VERSION, PLURAL = "kueue.x-k8s.io", "v1beta2", "workloads"
REQUEST_SECONDS = 10.0  # KubeApi's default
WORKLOADS = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}"
EVENTS = f"/api/v1/namespaces/{NS}/events"
CONCURRENCIES = (1, 8, 32)
EVENT_CONCURRENCY = 8

_encode = msgspec.json.encode
_decode = msgspec.json.decode


class Conflict(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# The clients: patch a Workload's status, post an Event, read a watch. Each returns decoded JSON.


class Client:
    name = ""
    note = ""

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def patch_status(self, name: str, operations: list[dict[str, Any]]) -> dict[str, Any]:
        raise NotImplementedError

    async def post_event(self, body: dict[str, Any]) -> Any:
        raise NotImplementedError

    def watch(self, resource_version: str) -> contextlib.AbstractAsyncContextManager[AsyncIterator[dict[str, Any]]]:
        raise NotImplementedError


class ApiStatus(Exception):
    def __init__(self, code: int, body: bytes) -> None:
        super().__init__(f"{code}: {body[:300]!r}")
        self.code = code


class HttpxClient(Client):
    """httpx2 as the operator's KubeApi uses it in the commit this was measured against
    (ffef45c, operator/preemption_operator/k8s/api.py): lightkube's kubeconfig adapter makes the
    httpx2 AsyncClient (default limits), each request is encoded and decoded with msgspec, a watch
    reads aiter_lines() and decodes each line. Copied here so that the measurement stays the same
    while the operator's own client changes. With `http2`, the adapter is asked for http2=True."""

    def __init__(self, config: SingleConfig, *, http2: bool = False) -> None:
        self.name = "httpx2 h2" if http2 else "httpx2 h1 (KubeApi@ffef45c)"
        params = client_adapter.ConnectionParams(timeout=httpx.Timeout(REQUEST_SECONDS), http2=http2)
        self.http: httpx.AsyncClient = client_adapter.AsyncClient(config, params)
        self.observe: Callable[[str, str], None] = lambda method, code: None  # KubeApi's metrics hook

    async def start(self) -> None:
        response = await self.http.get("/version")
        self.note = response.http_version

    async def close(self) -> None:
        await self.http.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        content = None
        if body is not None:
            content = _encode(body)
            headers["Content-Type"] = content_type
        response = await self.http.request(
            method, path, params=params, content=content, headers=headers, timeout=httpx.USE_CLIENT_DEFAULT
        )
        self.observe(method, str(response.status_code))
        data = response.content
        if response.status_code >= 400:
            raise ApiStatus(response.status_code, data)
        result: dict[str, Any] = _decode(data) if data else {}
        return result

    async def patch_status(self, name: str, operations: list[dict[str, Any]]) -> dict[str, Any]:
        try:
            return await self.request(
                "PATCH", f"{WORKLOADS}/{name}/status", body=operations, content_type="application/json-patch+json"
            )
        except ApiStatus as exc:
            if exc.code in (409, 422):
                raise Conflict(str(exc)) from None
            raise

    async def post_event(self, body: dict[str, Any]) -> Any:
        return await self.request("POST", EVENTS, body=body)

    async def _watch(self, resource_version: str, seconds: int) -> AsyncIterator[dict[str, Any]]:
        params = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(seconds),
        }
        timeout = httpx.Timeout(REQUEST_SECONDS, read=seconds + 60.0)
        async with self.http.stream("GET", WORKLOADS, params=params, timeout=timeout) as response:
            self.observe("WATCH", str(response.status_code))
            if response.status_code >= 400:
                raise ApiStatus(response.status_code, await response.aread())
            async for line in response.aiter_lines():
                if line:
                    yield _decode(line)

    @contextlib.asynccontextmanager
    async def watch(self, resource_version: str) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        async with contextlib.aclosing(self._watch(resource_version, 120)) as events:
            yield events


class HttpxBytesWatch(HttpxClient):
    """Watch only: the same request, but the stream split into lines as bytes (aiter_bytes)
    rather than decoded to text first (aiter_lines), then msgspec."""

    def __init__(self, config: SingleConfig) -> None:
        super().__init__(config)
        self.name = "httpx2 h1, lines as bytes"

    @contextlib.asynccontextmanager
    async def watch(self, resource_version: str) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        params = {"watch": "1", "resourceVersion": resource_version, "allowWatchBookmarks": "true"}
        params["timeoutSeconds"] = "120"
        async with self.http.stream("GET", WORKLOADS, params=params, timeout=httpx.Timeout(10, read=180)) as r:
            r.raise_for_status()
            yield decoded_lines(r.aiter_bytes())


async def decoded_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[dict[str, Any]]:
    """JSON lines from a byte stream, each decoded with msgspec."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        start = 0
        index = buffer.find(b"\n", start)
        while index >= 0:
            if index > start:
                yield _decode(buffer[start:index])
            start = index + 1
            index = buffer.find(b"\n", start)
        buffer = buffer[start:]


class AiohttpClient(Client):
    """aiohttp as Python operator frameworks set it up: one ClientSession, TCPConnector(limit=0) with the
    cluster CA (and client certificate, when the kubeconfig has one), the bearer token as a default
    header; the body encoded and the answer decoded with msgspec, as KubeApi did."""

    name = "aiohttp"

    def __init__(self, config: SingleConfig) -> None:
        self.config = config
        self.session: aiohttp.ClientSession | None = None
        self.note = "HTTP/1.1"

    async def start(self) -> None:
        user = self.config.user
        ssl_context = client_adapter.verify_cluster(self.config.cluster, user, self.config.abs_file)
        headers = {"Accept": "application/json"}
        token = getattr(user, "token", None)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.session = aiohttp.ClientSession(
            base_url=self.config.cluster.server,
            connector=aiohttp.TCPConnector(limit=0, ssl=ssl_context),
            headers=headers,
        )

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    async def _request(self, method: str, path: str, body: Any, content_type: str) -> dict[str, Any]:
        assert self.session is not None
        async with self.session.request(
            method, path, data=_encode(body), headers={"Content-Type": content_type}
        ) as response:
            data = await response.read()
            if response.status in (409, 422):
                raise Conflict(data[:200].decode(errors="replace"))
            if response.status >= 400:
                raise RuntimeError(f"{response.status}: {data[:300]!r}")
            result: dict[str, Any] = _decode(data)
            return result

    async def patch_status(self, name: str, operations: list[dict[str, Any]]) -> dict[str, Any]:
        return await self._request("PATCH", f"{WORKLOADS}/{name}/status", operations, "application/json-patch+json")

    async def post_event(self, body: dict[str, Any]) -> Any:
        return await self._request("POST", EVENTS, body, "application/json")

    @contextlib.asynccontextmanager
    async def watch(self, resource_version: str) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        assert self.session is not None
        params = {"watch": "1", "resourceVersion": resource_version, "allowWatchBookmarks": "true"}
        params["timeoutSeconds"] = "120"
        async with self.session.get(WORKLOADS, params=params, timeout=aiohttp.ClientTimeout(sock_read=180)) as r:
            r.raise_for_status()
            yield decoded_lines(r.content.iter_chunked(1024 * 1024))


class KubernetesAsyncioClient(Client):
    """kubernetes_asyncio as its documentation uses it: load_kube_config, CustomObjectsApi for the
    Workload status, CoreV1Api for Events (the answer becomes a V1Event), its Watch for the stream."""

    name = "kubernetes_asyncio"

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self.note = "HTTP/1.1"

    async def start(self) -> None:
        from kubernetes_asyncio import client, config

        configuration = client.Configuration()
        await config.load_kube_config(config_file=str(self.kubeconfig), client_configuration=configuration)
        self.api_client = client.ApiClient(configuration)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.core = client.CoreV1Api(self.api_client)
        self.exception = client.ApiException

    async def close(self) -> None:
        await self.api_client.close()

    async def patch_status(self, name: str, operations: list[dict[str, Any]]) -> dict[str, Any]:
        try:
            result: dict[str, Any] = await self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, NS, PLURAL, name, operations
            )
            return result
        except self.exception as exc:
            if exc.status in (409, 422):
                raise Conflict(str(exc.reason)) from None
            raise

    async def post_event(self, body: dict[str, Any]) -> Any:
        return await self.core.create_namespaced_event(NS, body)

    @contextlib.asynccontextmanager
    async def watch(self, resource_version: str) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        from kubernetes_asyncio import watch

        stream = watch.Watch()
        try:
            yield stream.stream(
                self.custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                NS,
                PLURAL,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=120,
            )
        finally:
            await stream.close()


# ---------------------------------------------------------------------------------------------
# Phases.


@dataclass
class Sample:
    requests: int
    seconds: float
    client_cpu: float
    server_cpu: float
    conflicts: int = 0

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    @property
    def client_ms_per_request(self) -> float:
        return 1000 * self.client_cpu / self.requests


@dataclass
class Bench:
    names: list[str]
    versions: dict[str, str]
    variants: dict[str, str]
    server_pids: list[int]
    written: int = 0
    events: int = 0
    samples: dict[tuple[str, str], list[Sample]] = field(default_factory=dict)

    def server_cpu(self) -> float:
        total = 0.0
        for pid in self.server_pids:
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def status_patch(self, name: str) -> list[dict[str, Any]]:
        self.written += 1
        return [
            {"op": "test", "path": "/metadata/resourceVersion", "value": self.versions[name]},
            {"op": "add", "path": "/status", "value": workload_status(self.variants[name], f" (write {self.written})")},
        ]

    def event_body(self) -> dict[str, Any]:
        self.events += 1
        name = self.names[self.events % len(self.names)]
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{time.time_ns():x}{self.events:x}", "namespace": NS},
            "involvedObject": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Workload",
                "name": name,
                "namespace": NS,
                "uid": self.versions.get(f"uid/{name}", ""),
            },
            "reason": "QuotaReserved",
            "message": f"Quota reserved in ClusterQueue team-a-cq, wait time since queued was {self.events % 97}s",
            "type": "Normal",
            "source": {"component": "preemption-operator"},
            "reportingComponent": "preemption-operator",
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }

    async def patches(self, client: Client, concurrency: int, count: int) -> Sample:
        owned = [self.names[w::concurrency] for w in range(concurrency)]
        shares = [count // concurrency + (1 if w < count % concurrency else 0) for w in range(concurrency)]
        conflicts = 0

        async def worker(w: int) -> None:
            nonlocal conflicts
            mine = owned[w]
            for k in range(shares[w]):
                name = mine[k % len(mine)]
                try:
                    answer = await client.patch_status(name, self.status_patch(name))
                except Conflict:
                    conflicts += 1
                    continue
                self.versions[name] = answer["metadata"]["resourceVersion"]

        sample = await self._timed(count, lambda: asyncio.gather(*(worker(w) for w in range(concurrency))))
        sample.conflicts = conflicts
        return sample

    async def posts(self, client: Client, concurrency: int, count: int) -> Sample:
        shares = [count // concurrency + (1 if w < count % concurrency else 0) for w in range(concurrency)]

        async def worker(w: int) -> None:
            for _ in range(shares[w]):
                await client.post_event(self.event_body())

        return await self._timed(count, lambda: asyncio.gather(*(worker(w) for w in range(concurrency))))

    async def _timed(self, count: int, run: Callable[[], Any]) -> Sample:
        server, cpu, started = self.server_cpu(), time.process_time(), time.perf_counter()
        await run()
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        return Sample(count, seconds, cpu, self.server_cpu() - server)

    def add(self, client: Client, phase: str, sample: Sample) -> None:
        self.samples.setdefault((client.name, phase), []).append(sample)


async def watch_replay(client: Client, resource_version: str, count: int) -> tuple[float, float, int]:
    """Seconds and client CPU to receive and decode `count` Workload events from the watch cache."""
    cpu, started, seen, size = time.process_time(), time.perf_counter(), 0, 0
    async with client.watch(resource_version) as events:
        async for event in events:
            kind = event.get("type")
            if kind == "ERROR":
                raise RuntimeError(f"watch error: {event.get('object')}")
            if kind in ("ADDED", "MODIFIED"):
                seen += 1
                obj = event.get("raw_object") or event["object"]
                size += len(obj["metadata"]["name"])  # touch the object
                if seen >= count:
                    break
    return time.perf_counter() - started, time.process_time() - cpu, seen


# ---------------------------------------------------------------------------------------------
# Codecs.


def codec_time(fn: Callable[[], Any], seconds: float = 0.2, repeat: int = 7) -> float:
    """CPU seconds per call, the least of `repeat` runs."""
    fn()
    started, calls = time.process_time(), 0
    while time.process_time() - started < 0.05:
        fn()
        calls += 1
    number = max(1, int(calls * seconds / 0.05))
    runs = []
    for _ in range(repeat):
        started = time.process_time()
        for _ in range(number):
            fn()
        runs.append((time.process_time() - started) / number)
    return min(runs)


def codec_rows(
    patch: list[dict[str, Any]], bodies: dict[str, bytes], line: bytes
) -> tuple[list[str], dict[str, dict[str, float]]]:
    """Table rows, and the seconds per call by input and codec."""
    codecs: dict[str, tuple[Callable[[Any], Any], Callable[[bytes], Any]]] = {
        "msgspec": (msgspec.json.encode, msgspec.json.decode),
        "orjson": (orjson.dumps, orjson.loads),
        "json": (lambda obj: json.dumps(obj, separators=(",", ":")).encode(), json.loads),
    }
    found: dict[str, dict[str, float]] = {}
    size = len(msgspec.json.encode(patch))
    found[f"encode: the status JSON patch ({size:,} bytes)"] = {
        name: codec_time(lambda enc=enc: enc(patch)) for name, (enc, _) in codecs.items()
    }
    inputs = {f"decode: {v} Workload ({len(b):,} bytes)": b for v, b in bodies.items()}
    inputs[f"decode: one watch event line ({len(line):,} bytes)"] = line
    for what, data in inputs.items():
        found[what] = {name: codec_time(lambda dec=dec, d=data: dec(d)) for name, (_, dec) in codecs.items()}
    text = line.decode()
    from_str = codec_time(lambda: msgspec.json.decode(text))
    rows = []
    for what, times in found.items():
        cells = [f"{1e6 * t:.1f}" for t in times.values()]
        if what.startswith("decode: one watch event"):
            cells[0] += f" (from str, as aiter_lines gives it: {1e6 * from_str:.1f})"
        rows.append(f"| {what} | {' | '.join(cells)} |")
    return rows, found


# ---------------------------------------------------------------------------------------------
# The run.


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "?"


def versions(*names: str) -> str:
    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return ", ".join(found)


def spread(values: list[float], fmt: str = "{:.0f}") -> str:
    """The median, and the least and greatest in brackets when there are several."""
    median = fmt.format(statistics.median(values))
    if len(values) == 1:
        return median
    return f"{median} [{fmt.format(min(values))}, {fmt.format(max(values))}]"


async def run(args: argparse.Namespace, plane: ControlPlane) -> dict[str, Any]:
    config = KubeConfig.from_file(str(plane.kubeconfig)).get()
    setup = HttpxClient(config)
    names = [f"job-{i:04d}" for i in range(args.workloads)]
    variants = {name: VARIANTS[i % len(VARIANTS)] for i, name in enumerate(names)}
    pids = [api.process.popen.pid for api in plane.apiservers if api.process is not None]
    etcd = getattr(plane, "_etcd", None)
    if etcd is not None:
        pids.append(etcd.popen.pid)
    bench = Bench(names, {}, variants, pids)
    limit = asyncio.Semaphore(8)

    async def create(name: str) -> None:
        async with limit:
            await setup.request(
                "POST", WORKLOADS, params={"fieldManager": "kueue"}, body=workload_body(name, variants[name])
            )
            status = [{"op": "add", "path": "/status", "value": workload_status(variants[name])}]
            answer = await setup.patch_status(name, status)
            bench.versions[name] = answer["metadata"]["resourceVersion"]
            bench.versions[f"uid/{name}"] = answer["metadata"]["uid"]

    await asyncio.gather(*(create(n) for n in names))
    server_version = (await setup.request("GET", "/version")).get("gitVersion", "?")

    clients: list[Client] = [
        HttpxClient(config),
        HttpxClient(config, http2=True),
        AiohttpClient(config),
        KubernetesAsyncioClient(plane.kubeconfig),
    ]
    for client in clients:
        await client.start()
    try:
        for concurrency in (*CONCURRENCIES, 0):
            phase = f"patch c={concurrency}" if concurrency else f"events c={EVENT_CONCURRENCY}"
            for block in range(args.blocks):
                for client in clients[block % len(clients) :] + clients[: block % len(clients)]:
                    if concurrency:
                        await bench.patches(client, concurrency, 2 * concurrency + 2)
                        count = args.serial if concurrency == 1 else args.requests
                        bench.add(client, phase, await bench.patches(client, concurrency, count))
                    else:
                        await bench.posts(client, EVENT_CONCURRENCY, 2 * EVENT_CONCURRENCY)
                        bench.add(client, phase, await bench.posts(client, EVENT_CONCURRENCY, args.events))
            print(f"{phase}: done", file=sys.stderr)

        # The watch: `watch_events` writes after a known resourceVersion, replayed by each client.
        listed = await setup.request("GET", WORKLOADS, params={"limit": "1"})
        start_version = listed["metadata"]["resourceVersion"]
        await bench.patches(clients[0], 8, args.watch_events)
        watchers = [clients[0], HttpxBytesWatch(config), *clients[1:]]
        await watchers[1].start()
        watch_results: dict[str, list[tuple[float, float, int]]] = {}
        for block in range(args.blocks):
            for client in watchers[block % len(watchers) :] + watchers[: block % len(watchers)]:
                result = await watch_replay(client, start_version, args.watch_events)
                watch_results.setdefault(client.name, []).append(result)
        await watchers[1].close()

        # Codec inputs: the bodies as this server returns them, a status patch, a watch line.
        bodies: dict[str, bytes] = {}
        for variant in VARIANTS:
            name = next(n for n in names if variants[n] == variant)
            response = await setup.http.get(f"{WORKLOADS}/{name}", headers={"Accept": "application/json"})
            bodies[variant] = response.content
        line = b""
        params = {"watch": "1", "resourceVersion": start_version, "timeoutSeconds": "10"}
        async with setup.http.stream("GET", WORKLOADS, params=params) as response:
            async for text in response.aiter_lines():
                if text:
                    line = text.encode()
                    break
        patch = bench.status_patch(names[1])
    finally:
        for client in clients:
            await client.close()
        await setup.close()
    return {
        "bench": bench,
        "clients": clients,
        "watchers": [w.name for w in watchers],
        "watch": watch_results,
        "codecs": codec_rows(patch, bodies, line),
        "bodies": bodies,
        "server_version": server_version,
        "notes": {c.name: c.note for c in clients},
    }


def report(args: argparse.Namespace, found: dict[str, Any], load: tuple[str, str], command: str) -> str:
    bench: Bench = found["bench"]
    clients: list[Client] = found["clients"]
    phases = [f"patch c={c}" for c in CONCURRENCIES] + [f"events c={EVENT_CONCURRENCY}"]

    def samples(client: Client, phase: str) -> list[Sample]:
        return bench.samples[(client.name, phase)]

    rate_rows, cpu_rows, server_rows = [], [], []
    for client in clients:
        rates = [spread([s.rate for s in samples(client, p)]) for p in phases]
        cpus = [spread([s.client_ms_per_request for s in samples(client, p)], "{:.2f}") for p in phases]
        servers = [spread([1000 * s.server_cpu / s.requests for s in samples(client, p)], "{:.1f}") for p in phases]
        rate_rows.append(f"| {client.name} | {' | '.join(rates)} |")
        cpu_rows.append(f"| {client.name} | {' | '.join(cpus)} |")
        server_rows.append(f"| {client.name} | {' | '.join(servers)} |")
    today = clients[0]

    def paired(client: Client, phase: str) -> list[float]:
        """The client's rate over today's client's, turn by turn (their blocks ran back to back)."""
        return [a.rate / b.rate for a, b in zip(samples(client, phase), samples(today, phase), strict=True)]

    ratio_rows = [
        f"| {client.name} | " + " | ".join(spread(paired(client, p), "{:.2f}") for p in phases) + " |"
        for client in clients[1:]
    ]
    conflicts = sum(s.conflicts for group in bench.samples.values() for s in group)
    header = "| client | " + " | ".join(phases) + " |"
    rule = "|---|" + "---:|" * len(phases)

    watch_rows = []
    for name in found["watchers"]:
        results = found["watch"][name]
        rates = [n / seconds for seconds, _, n in results]
        cpus = [1e6 * cpu / n for _, cpu, n in results]
        watch_rows.append(f"| {name} | {spread(rates)} | {spread(cpus)} |")

    def median(client: Client, phase: str, what: Callable[[Sample], float]) -> float:
        return statistics.median(what(s) for s in samples(client, phase))

    def cpu_of(client: Client, phase: str) -> float:
        return median(client, phase, lambda s: s.client_ms_per_request)

    def rate_of(client: Client, phase: str) -> float:
        return median(client, phase, lambda s: s.rate)

    by_cpu = sorted(clients, key=lambda c: cpu_of(c, "patch c=8"))
    leanest = by_cpu[0]
    server_ms = median(today, "patch c=8", lambda s: 1000 * s.server_cpu / s.requests)
    server_event_ms = median(today, f"events c={EVENT_CONCURRENCY}", lambda s: 1000 * s.server_cpu / s.requests)
    events = f"events c={EVENT_CONCURRENCY}"
    watch_cpu = {name: statistics.median(1e6 * cpu / n for _, cpu, n in res) for name, res in found["watch"].items()}
    watch_best = min(watch_cpu, key=lambda k: watch_cpu[k])

    def separated(phase: str) -> list[str]:
        """Pairs of clients whose block rates do not overlap in a phase (every block of one faster)."""
        pairs = []
        for a in clients:
            for b in clients:
                if a is not b and min(s.rate for s in samples(a, phase)) > max(s.rate for s in samples(b, phase)):
                    pairs.append(f"{a.name} > {b.name}")
        return pairs

    rows, codec_times = found["codecs"]
    admitted = next(k for k in codec_times if "admitted Workload" in k)
    encode = next(k for k in codec_times if k.startswith("encode"))
    analysis = [
        "*Analysis, resting on the tables above (medians).* Client CPU per status patch at concurrency 8: "
        + "; ".join(f"{c.name} {cpu_of(c, 'patch c=8'):.2f} ms" for c in clients)
        + f". The least is {leanest.name}'s, {cpu_of(today, 'patch c=8') / cpu_of(leanest, 'patch c=8'):.1f} times "
        f"less than {today.name}. Per Event POST: "
        + "; ".join(f"{c.name} {cpu_of(c, events):.2f} ms" for c in clients)
        + ". ",
        f"The server spent {server_ms:.1f} ms of CPU (kube-apiserver + etcd) per patch from {today.name} at "
        f"concurrency 8 and {server_event_ms:.1f} ms per Event, against {cpu_of(today, 'patch c=8'):.2f} and "
        f"{cpu_of(today, events):.2f} ms in the client: the client is "
        f"{100 * cpu_of(today, 'patch c=8') / (cpu_of(today, 'patch c=8') + server_ms):.0f}% of the CPU a patch "
        f"costs this machine and {100 * cpu_of(today, events) / (cpu_of(today, events) + server_event_ms):.0f}% "
        "of an Event's. ",
    ]
    turns = []
    for phase in phases:
        cells = []
        for client in clients[1:]:
            ratios = paired(client, phase)
            faster = sum(1 for r in ratios if r > 1)
            cells.append(f"{client.name} {statistics.median(ratios):.2f} (faster in {faster} of {len(ratios)} turns)")
        turns.append(f"{phase}: " + ", ".join(cells))
    analysis.append(
        f"Rates against {today.name}, turn by turn: "
        + "; ".join(turns)
        + ". "
        + f"{today.name}'s own block rates at concurrency 8 ranged from {min(s.rate for s in samples(today, 'patch c=8')):.0f} "
        f"to {max(s.rate for s in samples(today, 'patch c=8')):.0f}/s in this run (the machine's load moved), while "
        "its CPU per request stayed within the range shown in the CPU table. "
    )
    analysis.append(
        f"Watch: the least client CPU per decoded event was {watch_best}'s ({watch_cpu[watch_best]:.0f} µs; "
        f"{today.name}: {watch_cpu[today.name]:.0f} µs). "
        f"JSON: decoding the admitted Workload takes {1e6 * codec_times[admitted]['msgspec']:.1f} µs with msgspec, "
        f"{1e6 * codec_times[admitted]['orjson']:.1f} with orjson and {1e6 * codec_times[admitted]['json']:.1f} "
        f"with json; encoding the patch {1e6 * codec_times[encode]['msgspec']:.1f}, "
        f"{1e6 * codec_times[encode]['orjson']:.1f} and {1e6 * codec_times[encode]['json']:.1f} µs, against "
        f"{1000 * cpu_of(today, 'patch c=8'):.0f} µs of client CPU per patch."
    )
    lines = [
        f"# HTTP clients on the hot path ({datetime.now(UTC):%Y-%m-%d}, {platform.python_implementation()} "
        f"{platform.python_version()}, {found['server_version']} + etcd on loopback)",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores ({cpu_model()}); the control plane runs on the same "
        f"cores. Load average (1 min) at the start / end of the run: {load[0]} / {load[1]} (other processes shared "
        "the machine: rates are wall-clock and move with them; CPU per request is this process's own).",
        "",
        f"Versions: {versions('httpx2', 'httpcore2', 'h2', 'lightkube', 'aiohttp', 'kubernetes-asyncio', 'msgspec', 'orjson')}.",
        "",
        f"Command: `{command}`",
        "",
        f"{args.workloads} Workloads (the four kinds of benchmarks/parsing.py in turn). Each phase ran in "
        f"{args.blocks} blocks per client, the clients taking turns block by block; each cell is the median of the "
        f"blocks [least, greatest]. A block: {args.serial} status patches at concurrency 1, {args.requests} at 8 or "
        "at 32, each a JSON patch testing metadata.resourceVersion then replacing /status (conditions and "
        f"admission), as the operator writes; or {args.events} Event POSTs at concurrency {EVENT_CONCURRENCY}. "
        "Conflicts (409/422) over the whole run: "
        f"{conflicts}. HTTP version negotiated: "
        + "; ".join(f"{name}: {note}" for name, note in found["notes"].items())
        + ".",
        "",
        "Clients: **httpx2 h1 (KubeApi@ffef45c)**: the requests of the operator's KubeApi as of commit ffef45c "
        "(the operator's client when this was written), copied into this script (lightkube's kubeconfig adapter makes the httpx2 client, HTTP/1.1, default limits; msgspec "
        "encodes and decodes; a watch reads aiter_lines()); **httpx2 h2**: the same with http2=True given to the "
        "adapter; **aiohttp**: one aiohttp ClientSession set up as Python operator frameworks set it up "
        "(TCPConnector(limit=0) with the cluster CA from the kubeconfig, the bearer token as a default header), "
        "msgspec for JSON; **kubernetes_asyncio**: load_kube_config, CustomObjectsApi."
        "patch_namespaced_custom_object_status, CoreV1Api.create_namespaced_event (its answer deserialized into a "
        "V1Event) and its Watch, with its own JSON handling (json, stdlib); **httpx2 h1, lines as bytes** (watch "
        "only): the same watch request with the stream split into lines as bytes (aiter_bytes) rather than text "
        "(aiter_lines).",
        "",
        "## Requests per second",
        "",
        header,
        rule,
        *rate_rows,
        "",
        f"## Requests per second relative to {today.name}, turn by turn",
        "",
        f"Each block's rate divided by that of {today.name}'s block in the same turn (they ran back to back, so a "
        "change in the machine's load touches both); median [least, greatest] over the turns. Above 1: faster.",
        "",
        header,
        rule,
        *ratio_rows,
        "",
        "## Client CPU per request, ms (CPU seconds per 1,000 requests)",
        "",
        header,
        rule,
        *cpu_rows,
        "",
        "## Server CPU per request (kube-apiserver + etcd), ms, for comparison",
        "",
        header,
        rule,
        *server_rows,
        "",
        f"## Decoding a watch stream of {args.watch_events:,} Workload events",
        "",
        f"{args.watch_events} status patches, then each client watches from the resourceVersion before them (the "
        f"server replays them from its watch cache) and decodes every event, {args.blocks} times in turns; median "
        "[least, greatest].",
        "",
        "| client | events/s | client CPU per event, µs |",
        "|---|---:|---:|",
        *watch_rows,
        "",
        "## JSON codecs, µs per call (CPU, the least of 7 runs)",
        "",
        "| input | msgspec | orjson | json (stdlib) |",
        "|---|---:|---:|---:|",
        *rows,
        "",
        "## Analysis",
        "",
        "".join(analysis),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", type=int, default=200)
    parser.add_argument("--blocks", type=int, default=10, help="blocks per client and phase")
    parser.add_argument("--serial", type=int, default=30, help="status patches at concurrency 1, per block")
    parser.add_argument("--requests", type=int, default=150, help="status patches at concurrency 8 or 32, per block")
    parser.add_argument("--events", type=int, default=200, help="Event POSTs per block")
    parser.add_argument("--watch-events", type=int, default=3000)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "http_clients.md")
    args = parser.parse_args()
    defaults = {"workloads": 200, "blocks": 10, "serial": 30, "requests": 150, "events": 200, "watch_events": 3000}
    command = "python benchmarks/http_clients.py" + "".join(
        f" --{k.replace('_', '-')} {getattr(args, k)}" for k, v in defaults.items() if getattr(args, k) != v
    )
    load_start = f"{os.getloadavg()[0]:.1f}"
    with running_control_plane() as plane:
        plane.kubectl("create", "namespace", NS, check=True)
        found = asyncio.run(run(args, plane))
    text = report(args, found, (load_start, f"{os.getloadavg()[0]:.1f}"), command)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
