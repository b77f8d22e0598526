"""Watching one side's cluster: the benchmark's pods and Jobs through the API server's watch, each
change stamped with the time it was seen, into the timelines `outcome` computes from; the
submitter that replays the trace's Jobs at their arrival times; and the controller's CPU and
memory from /proc.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from jobtrace import Trace
from manifests import CLASS_LABEL, GPU, job_manifest
from outcome import JobTimeline, PodTimeline


class Api:
    """The API server as the admin, one connection per instance (one per thread)."""

    def __init__(self, server: str, token: str, ca_file: str) -> None:
        parsed = urllib.parse.urlparse(server)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 443
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.context = ssl.create_default_context(cafile=ca_file)
        self._conn: http.client.HTTPSConnection | None = None

    def _connection(self, timeout: float | None = 30) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=timeout)

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        for attempt in range(3):
            if self._conn is None:
                self._conn = self._connection()
            try:
                self._conn.request(method, path, None if body is None else json.dumps(body), self.headers)
                resp = self._conn.getresponse()
                data = resp.read()
                return resp.status, json.loads(data) if data else None
            except (OSError, http.client.HTTPException):
                self._conn.close()
                self._conn = None
                if attempt == 2:
                    raise
                time.sleep(0.5)
        raise AssertionError("unreachable")

    def watch(self, path: str, resource_version: str) -> Iterator[dict[str, Any]]:
        """The events of one watch request until the server ends it."""
        sep = "&" if "?" in path else "?"
        conn = self._connection(timeout=None)
        try:
            conn.request(
                "GET",
                f"{path}{sep}watch=1&allowWatchBookmarks=true&timeoutSeconds=120&resourceVersion={resource_version}",
                headers=self.headers,
            )
            resp = conn.getresponse()
            if resp.status != 200:
                yield {"type": "ERROR", "object": {"code": resp.status}}
                return
            for line in resp:
                if line.strip():
                    yield json.loads(line)
        finally:
            conn.close()


class Watcher(threading.Thread):
    """List then watch one collection, handing each object to `handle(kind, obj)` with the time it
    was seen; re-lists when the watch's resourceVersion has expired."""

    def __init__(self, api: Api, path: str, handle: Callable[[str, dict[str, Any]], None]) -> None:
        super().__init__(daemon=True, name=f"watch {path}")
        self.api, self.path, self.handle = api, path, handle
        self.stopping = threading.Event()
        self.synced = threading.Event()

    def run(self) -> None:
        version = ""
        while not self.stopping.is_set():
            try:
                if not version:
                    status, listed = self.api.request("GET", self.path)
                    if status != 200:
                        time.sleep(0.5)
                        continue
                    for item in listed["items"]:
                        self.handle("ADDED", item)
                    version = listed["metadata"]["resourceVersion"]
                    self.synced.set()
                for event in self.api.watch(self.path, version):
                    if self.stopping.is_set():
                        return
                    kind, obj = event["type"], event["object"]
                    if kind == "ERROR":
                        version = ""  # 410 Gone and the like: list again
                        break
                    version = obj["metadata"].get("resourceVersion", version)
                    if kind != "BOOKMARK":
                        self.handle(kind, obj)
            except (OSError, http.client.HTTPException, ValueError):
                time.sleep(0.5)


class Observer:
    """The timelines of the benchmark's pods and Jobs on one side, in seconds since `t0`."""

    def __init__(self, api_factory: Callable[[], Api], t0: float, job_classes: dict[str, str]) -> None:
        self.t0 = t0
        self.lock = threading.Lock()
        self.pods: dict[str, PodTimeline] = {}
        self.jobs: dict[str, JobTimeline] = {}
        self._suspended: dict[str, bool] = {}
        self._started: set[str] = set()
        self.job_classes = job_classes
        selector = urllib.parse.quote(CLASS_LABEL)
        self.watchers = [
            Watcher(api_factory(), f"/api/v1/pods?labelSelector={selector}", self._pod),
            Watcher(api_factory(), f"/apis/batch/v1/jobs?labelSelector={selector}", self._job),
        ]

    def now(self) -> float:
        return time.monotonic() - self.t0

    def start(self) -> None:
        for w in self.watchers:
            w.start()
        for w in self.watchers:
            w.synced.wait(30)

    def stop(self) -> None:
        for w in self.watchers:
            w.stopping.set()

    def submitted(self, name: str, cls: str, pods: int, at: float) -> None:
        with self.lock:
            self.jobs[name] = JobTimeline(name, cls, pods, at)

    def _pod(self, kind: str, pod: dict[str, Any]) -> None:
        now = self.now()
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        key = f"{meta['namespace']}/{meta['name']}"
        with self.lock:
            p = self.pods.get(key)
            if p is None:
                gpus = sum(
                    int((c.get("resources") or {}).get("requests", {}).get(GPU, 0)) for c in spec.get("containers", [])
                )
                job = (meta.get("labels") or {}).get("batch.kubernetes.io/job-name", "")
                p = self.pods[key] = PodTimeline(meta["name"], job, gpus)
            if spec.get("nodeName") and p.bound is None:
                p.bound = now
            phase = status.get("phase")
            if phase == "Running" and p.running is None:
                p.running = now
            if phase in ("Succeeded", "Failed") and p.finished is None:
                p.finished = now
            if meta.get("deletionTimestamp") and p.deleted is None and p.finished is None:
                p.deleted = now
            if kind == "DELETED":
                p.gone = now
                if p.deleted is None and p.finished is None:
                    p.deleted = now

    def _job(self, kind: str, job: dict[str, Any]) -> None:
        name = job["metadata"]["name"]
        suspended = bool((job.get("spec") or {}).get("suspend"))
        complete = any(
            c.get("type") == "Complete" and c.get("status") == "True"
            for c in (job.get("status") or {}).get("conditions") or []
        )
        now = self.now()
        with self.lock:
            timeline = self.jobs.get(name)
            if timeline is None:
                return  # not submitted by this run
            if complete and timeline.completed is None:
                timeline.completed = now
            if not suspended:
                self._started.add(name)
            elif name in self._started and not self._suspended.get(name, True) and timeline.completed is None:
                timeline.stops += 1
            self._suspended[name] = suspended

    def snapshot(self) -> tuple[list[PodTimeline], list[JobTimeline]]:
        with self.lock:
            return list(self.pods.values()), list(self.jobs.values())

    def unfinished(self) -> int:
        with self.lock:
            return sum(1 for j in self.jobs.values() if j.completed is None)


def replay(trace: Trace, api: Api, observer: Observer, stop: threading.Event) -> list[str]:
    """Creates each Job of the trace at its arrival time (late ones at once); returns errors."""
    errors = []
    for job in trace.jobs:
        delay = job.arrival - observer.now()
        if delay > 0 and stop.wait(delay):
            break
        at = observer.now()
        observer.submitted(job.name, job.cls, job.pods, at)
        status, body = api.request("POST", f"/apis/batch/v1/namespaces/{job.queue}/jobs", job_manifest(job))
        if status != 201:
            errors.append(f"{job.name}: HTTP {status}: {str(body)[:300]}")
    return errors


@dataclass
class ProcessUsage:
    cpu_seconds: float
    peak_rss_mib: float


def process_usage(pid: int) -> ProcessUsage:
    """User + system CPU and peak resident memory (VmHWM) of a live process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    peak = 0.0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    return ProcessUsage(cpu, peak)


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs so far, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return float(sum(values) - idle), float(sum(values))
