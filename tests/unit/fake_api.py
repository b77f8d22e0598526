"""An in-memory Kubernetes API for the operator's unit tests, with faults on demand.

It speaks KubeApi's interface (get, patch_json, patch_merge, create, list, watch) over paths
built by `Kind.path`, keeps a resourceVersion counter like etcd's, honours the `test` operation of
JSON patches (422 on a stale resourceVersion, as kube-apiserver answers), and records every
request. Faults: `fail(...)` makes matching requests raise an ApiError or a transport error;
`hold(...)` parks matching requests until released, so a test can run a cycle while writes are
in flight.
"""

from __future__ import annotations

import asyncio
import copy
import fnmatch
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from preemption_operator.api.kinds import BY_NAME
from preemption_operator.controller.integrations import CustomResourceDefinition
from preemption_operator.jobs.framework import INTEGRATIONS
from preemption_operator.k8s.api import ApiError


@dataclass
class Fault:
    method: str
    pattern: str
    code: int
    times: int
    """How many matching requests fail (-1: all)."""
    after: bool = False
    """The request takes effect before it fails (a 500 or a cut connection after the write)."""


@dataclass
class Hold:
    method: str
    pattern: str
    limit: int | None = None
    """How many requests it parks at most (None: all that match)."""
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    waiting: int = 0


KINDS = {
    **BY_NAME,
    **{i.kind.name: i.kind for i in INTEGRATIONS.values()},
    "CustomResourceDefinition": CustomResourceDefinition,
}
"""The kinds it stores: the operator's own, every integrated job kind, and CRDs."""


def object_path(body: dict[str, Any]) -> str:
    meta = body["metadata"]
    return KINDS[body["kind"]].path(meta["name"], meta.get("namespace"))


def _selects(field_selector: str | None, obj: dict[str, Any], label_selector: str | None = None) -> bool:
    """Whether a field selector (only `metadata.name=x` is understood) and a label selector (only
    `key=value` or `key`, which asks for the label to exist) match an object."""
    if label_selector:
        key, equals, value = label_selector.partition("=")
        assert key and "," not in label_selector, f"the fake API knows no label selector {label_selector!r}"
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if (labels.get(key) != value) if equals else (key not in labels):
            return False
    if not field_selector:
        return True
    field, _, value = field_selector.partition("=")
    assert field == "metadata.name", f"the fake API knows no field selector {field_selector!r}"
    return bool((obj.get("metadata") or {}).get("name") == value)


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


class FakeApi:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 100
        self.requests: list[tuple[str, str]] = []
        self.faults: list[Fault] = []
        self.holds: list[Hold] = []
        self.events: list[dict[str, Any]] = []
        self.history: list[dict[str, dict[str, Any]]] = []
        """After every stored change, a copy of every Workload (path -> object)."""
        self._watchers: list[tuple[str, asyncio.Queue[dict[str, Any]]]] = []
        self.field_selectors: list[tuple[str, str, str | None]] = []
        """(LIST or WATCH, path, its field selector) of every list and watch."""
        self.chaos: Callable[[str, str], tuple[int, bool, int] | None] | None = None
        """Per request: (code, after, pauses) to fail it (after it took effect, if `after`), or
        None; `pauses` event-loop turns are waited first, so other tasks run in between."""
        self._after: dict[tuple[str, str], int] = {}

    # -- test controls

    def fail(self, method: str, pattern: str, code: int = 500, times: int = 1, *, after: bool = False) -> None:
        """Matching requests (fnmatch on the path) fail with `code` (0: a transport error); with
        `after`, only once they took effect."""
        self.faults.append(Fault(method, pattern, code, times, after))

    def hold(self, method: str, pattern: str, *, limit: int | None = None) -> Hold:
        """Parks matching requests (each in the first open hold with room) until `gate` is set."""
        held = Hold(method, pattern, limit)
        self.holds.append(held)
        return held

    def put(self, body: dict[str, Any]) -> dict[str, Any]:
        """Creates or replaces an object as another client would (a watch event follows)."""
        body = copy.deepcopy(body)
        path = object_path(body)
        kind = "MODIFIED" if path in self.objects else "ADDED"
        self._store(path, body)
        self._notify(kind, path)
        return copy.deepcopy(body)

    def remove(self, kind: str, name: str, namespace: str | None = None) -> None:
        path = KINDS[kind].path(name, namespace)
        body = self.objects.pop(path)
        self.version += 1
        body["metadata"]["resourceVersion"] = str(self.version)
        self._record_history()
        self._broadcast("DELETED", path, body)

    def workloads(self) -> dict[str, dict[str, Any]]:
        return {p: o for p, o in self.objects.items() if o["kind"] == "Workload"}

    def count(self, method: str, pattern: str = "*") -> int:
        return sum(1 for m, p in self.requests if m == method and fnmatch.fnmatch(p, pattern))

    # -- KubeApi's interface

    async def get(self, path: str) -> dict[str, Any]:
        await self._enter("GET", path)
        self._after.pop(("GET", path), None)  # a read has no effect to fail after
        if path not in self.objects:
            raise ApiError(404, "NotFound", f"{path} not found")
        return copy.deepcopy(self.objects[path])

    async def patch_json(
        self, path: str, operations: list[dict[str, Any]], timeout: float | None = None
    ) -> dict[str, Any]:
        await self._enter("PATCH", path)
        target = path.removesuffix("/status")
        if target not in self.objects:
            self._after.pop(("PATCH", path), None)
            raise ApiError(404, "NotFound", f"{target} not found")
        body = copy.deepcopy(self.objects[target])
        for op in operations:
            if op["op"] == "test":
                if op["path"] == "/metadata/resourceVersion" and body["metadata"]["resourceVersion"] != op["value"]:
                    self._after.pop(("PATCH", path), None)
                    raise ApiError(422, "Invalid", "the test operation failed")
            elif op["op"] == "add" and op["path"] == "/status":
                body["status"] = copy.deepcopy(op["value"])
            else:  # pragma: no cover - the operator sends nothing else
                raise ApiError(400, "BadRequest", f"unsupported operation {op}")
        self._store(target, body)
        self._notify("MODIFIED", target)
        self._leave("PATCH", path)
        return copy.deepcopy(body)

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        await self._enter("POST", path)
        if path.endswith("/events"):
            self.events.append(copy.deepcopy(body))
            return copy.deepcopy(body)
        target = object_path(body)
        if target in self.objects:
            raise ApiError(409, "AlreadyExists", f"{target} already exists")
        stored = copy.deepcopy(body)
        stored["metadata"].setdefault("uid", f"uid-{self.version + 1}")
        self._store(target, stored)
        self._notify("ADDED", target)
        self._leave("POST", path)
        return copy.deepcopy(stored)

    async def patch_merge(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        """Objects it holds are patched (a resourceVersion in the patch is a precondition: 409
        when stale, as kube-apiserver answers); anything else (Events) is only echoed."""
        await self._enter("PATCH", path)
        target = path.removesuffix("/status")
        if target not in self.objects:
            return copy.deepcopy(patch)
        current = self.objects[target]
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
            self._after.pop(("PATCH", path), None)
            raise ApiError(
                409, "Conflict", "the object has been modified; please apply your changes to the latest version"
            )
        patch = {
            **patch,
            "metadata": {k: v for k, v in (patch.get("metadata") or {}).items() if k != "resourceVersion"},
        }
        if path.endswith("/status"):
            patch = {"status": patch.get("status")}  # the status subresource changes status only
        body = merge(current, patch)
        self._store(target, body)
        self._notify("MODIFIED", target)
        self._leave("PATCH", path)
        return copy.deepcopy(body)

    async def delete(self, path: str, uid: str | None = None) -> dict[str, Any]:
        await self._enter("DELETE", path)
        if path not in self.objects:
            raise ApiError(404, "NotFound", f"{path} not found")
        if uid is not None and self.objects[path]["metadata"].get("uid") != uid:
            raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {uid}")
        body = self.objects.pop(path)
        self.version += 1
        self._record_history()
        self._broadcast("DELETED", path, body)
        return copy.deepcopy(body)

    async def list(
        self, path: str, *, label_selector: str | None = None, field_selector: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        await self._enter("LIST", path)
        self.field_selectors.append(("LIST", path, field_selector))
        items = [
            copy.deepcopy(o)
            for p, o in sorted(self.objects.items())
            if self._in(path, p) and _selects(field_selector, o, label_selector)
        ]
        for item in items:  # as the API server lists them: no apiVersion/kind per item
            item.pop("apiVersion", None)
            item.pop("kind", None)
        return items, str(self.version)

    async def watch(
        self,
        path: str,
        resource_version: str,
        seconds: int,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        await self._enter("WATCH", path)
        self.field_selectors.append(("WATCH", path, field_selector))
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        entry = (path, queue)
        self._watchers.append(entry)
        try:
            while True:
                event = await queue.get()
                if event.get("type") == "CLOSE":
                    return
                if event.get("type") == "FAIL":
                    raise ApiError(0, "ReadError", "watch stream lost: connection lost")
                if not _selects(field_selector, event.get("object") or {}, label_selector):
                    continue
                yield event
        finally:
            self._watchers.remove(entry)

    def close_watches(self, how: str = "CLOSE") -> None:
        """Ends every open watch: normally ("CLOSE") or with a transport error ("FAIL")."""
        for _, queue in list(self._watchers):
            queue.put_nowait({"type": how})

    def send(self, path: str, event: dict[str, Any]) -> None:
        """Delivers a raw event (an ERROR, a BOOKMARK) to the watches of a collection."""
        for prefix, queue in self._watchers:
            if prefix == path:
                queue.put_nowait(event)

    # -- internals

    async def _enter(self, method: str, path: str) -> None:
        self.requests.append((method, path))
        if self.chaos is not None and (fault := self.chaos(method, path)) is not None:
            code, after, pauses = fault
            for _ in range(pauses):
                await asyncio.sleep(0)
            if code and after:
                self._after[(method, path)] = code
            elif code:
                raise ApiError(code, "Chaos", f"injected {code}")
        for held in self.holds:
            if (
                held.method == method
                and fnmatch.fnmatch(path, held.pattern)
                and not held.gate.is_set()
                and (held.limit is None or held.waiting < held.limit)
            ):
                held.waiting += 1
                await held.gate.wait()
                break
        self._raise_faults(method, path, after=False)

    def _leave(self, method: str, path: str) -> None:
        code = self._after.pop((method, path), None)
        if code is not None:
            raise ApiError(code, "Chaos", f"injected {code} after the write")
        self._raise_faults(method, path, after=True)

    def _raise_faults(self, method: str, path: str, *, after: bool) -> None:
        for fault in self.faults:
            if fault.after != after or fault.method != method or not fnmatch.fnmatch(path, fault.pattern):
                continue
            if fault.times != 0:
                fault.times -= 1
                if fault.code == 0:
                    raise ApiError(0, "ConnectError", "no answer from the API server: connection refused")
                raise ApiError(fault.code, "Injected", f"injected {fault.code}")

    def _store(self, path: str, body: dict[str, Any]) -> None:
        self.version += 1
        body["metadata"]["resourceVersion"] = str(self.version)
        self.objects[path] = body
        self._record_history()

    def _record_history(self) -> None:
        self.history.append({p: copy.deepcopy(o) for p, o in self.workloads().items()})

    def _notify(self, event_type: str, path: str) -> None:
        self._broadcast(event_type, path, self.objects[path])

    def _broadcast(self, event_type: str, path: str, body: dict[str, Any]) -> None:
        for prefix, queue in self._watchers:
            if self._in(prefix, path):
                queue.put_nowait({"type": event_type, "object": copy.deepcopy(body)})

    @staticmethod
    def _in(collection: str, path: str) -> bool:
        """Whether object `path` belongs to `collection` (one namespace's, or across namespaces)."""
        parts = path.split("/")
        if "/".join(parts[:-1]) == collection:
            return True
        if "namespaces" in parts:
            at = parts.index("namespaces")
            if len(parts) > at + 3:  # .../namespaces/<ns>/<plural>/<name>
                parts = parts[:at] + parts[at + 2 :]
        return "/".join(parts[:-1]) == collection
