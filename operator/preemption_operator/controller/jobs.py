"""The job controller: watches the integrated job kinds and their Workloads, and carries out the
step `jobs.reconciler.plan` gives for each job (create its Workload, start or stop the job,
give the quota back once it has stopped, finish the Workload).

Level-triggered: a job is reconciled whenever it or its Workload changes, one step at a time,
from the objects as the watches show them; a failed step is retried with backoff. Only the
leader acts. Workloads are never annotated or given finalizers: the Workload's controller owner
reference says whose it is, and deleting a job deletes its Workload (the garbage collector would
too, where one runs)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from ..api import kinds
from ..api.kinds import Kind
from ..engine.cache import Cache
from ..jobs.framework import INTEGRATIONS, GenericJob, Integration
from ..jobs.reconciler import (
    ComposeError,
    CreateWorkload,
    DeleteWorkload,
    Flavor,
    JobEvent,
    PatchJob,
    Settings,
    Step,
    UpdateWorkload,
    WriteWorkloadStatus,
    plan,
)
from ..k8s.api import ApiError, KubeApi
from ..k8s.writer import Outcome, StatusWriter
from .feeder import CacheFeeder
from .loop import EventSink

log = logging.getLogger(__name__)

WORKERS = 4
RETRY_START, RETRY_MAX = 0.5, 30.0

JobKey = tuple[str, str, str]
"""(integration kind name, namespace, name)."""


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


class JobController:
    def __init__(
        self,
        api: KubeApi,
        cache: Cache,
        feeder: CacheFeeder,
        writer: StatusWriter,
        events: EventSink,
        leading: Callable[[], bool],
        *,
        settings: Settings | None = None,
        integrations: Iterable[Integration] | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        scheduled: Callable[[], bool] = lambda: True,
        closing: Callable[[str], bool] = lambda namespace: False,
    ) -> None:
        self.api = api
        self.cache = cache
        self.feeder = feeder
        self.writer = writer
        self.events = events
        self.leading = leading
        self.settings = settings or Settings()
        self.now = now
        self.scheduled = scheduled
        """Whether the scheduling loop has decided a cycle this term (see SchedulingLoop.term_cycles)."""
        self.closing = closing
        """Whether a namespace is being deleted: nothing new can be made there."""
        chosen = tuple(integrations) if integrations is not None else tuple(INTEGRATIONS.values())
        self.kinds = {integration.kind.name: integration.kind for integration in chosen}
        self._by_kind = {integration.kind.name: integration.job for integration in chosen}
        self.jobs: dict[JobKey, dict[str, Any]] = {}
        self._uids: dict[str, JobKey] = {}
        """Job UID -> job, for Workloads whose owner reference names it."""
        self._owned: dict[str, str] = {}
        """Workload key -> the UID of the job that owns it."""
        self._workloads: dict[str, set[str]] = {}
        """Job UID -> the Workloads it owns (one, unless something else made a second)."""
        self._listed: set[str] = set()
        """Kinds whose first list has come (until then a Workload's job may only be unseen)."""
        self._queue: asyncio.Queue[JobKey] = asyncio.Queue()
        self._queued: set[JobKey] = set()
        self._failures: dict[JobKey, int] = {}
        self._orphans: set[str] = set()
        self.steps = 0

    # -- informer handlers ---------------------------------------------------------------------

    def replace(self, kind: Kind, items: list[dict[str, Any]], resource_version: str) -> None:
        if kind.name == kinds.Workload.name:
            self._owned.clear()
            self._workloads.clear()
            for body in items:
                self._workload(body)
            return
        listed = {self._job_key(kind, body): body for body in items}
        for key in [k for k in self.jobs if k[0] == kind.name and k not in listed]:
            self._job_gone(key)
        for key, body in listed.items():
            self._job(key, body)
        self._listed.add(kind.name)
        self._collect_orphans()

    def event(self, kind: Kind, event_type: str, obj: dict[str, Any]) -> None:
        if kind.name == kinds.Workload.name:
            if event_type == "DELETED":
                uid = self._disown(_key(obj))
                if uid is not None and uid in self._uids:
                    self._enqueue(self._uids[uid])  # recreated if its job still wants it
            else:
                self._workload(obj)
            return
        key = self._job_key(kind, obj)
        if event_type == "DELETED":
            self._job_gone(key)
        else:
            self._job(key, obj)

    def workload_written(self, body: dict[str, Any]) -> None:
        """The scheduling loop wrote a Workload (its answer, ahead of the watch)."""
        self._workload(body)

    def _job_key(self, kind: Kind, obj: dict[str, Any]) -> JobKey:
        meta = _meta(obj)
        return (kind.name, str(meta.get("namespace") or ""), str(meta.get("name") or ""))

    def _job(self, key: JobKey, body: dict[str, Any]) -> None:
        uid = str(_meta(body).get("uid") or "")
        queued = bool(self._by_kind[key[0]](body).queue_name())
        if not queued and key not in self.jobs:
            return  # not submitted to a queue: not ours
        self._keep(key, body)
        if uid:
            self._uids[uid] = key
        self._enqueue(key)

    def _keep(self, key: JobKey, body: dict[str, Any]) -> None:
        """Stores a job unless what is stored is newer: a write's answer may come after the watch
        delivered a later version, and a write from an old version can only conflict."""
        held = self.jobs.get(key)
        if held is not None and _version(held) > _version(body) and _meta(held).get("uid") == _meta(body).get("uid"):
            return
        self.jobs[key] = body

    def _job_gone(self, key: JobKey) -> None:
        body = self.jobs.pop(key, None)
        if body is None:
            return
        uid = str(_meta(body).get("uid") or "")
        self._uids.pop(uid, None)
        self._orphans.update(self._workloads.get(uid, ()))
        self._enqueue(("", "", ""))

    def _workload(self, body: dict[str, Any]) -> None:
        owner = next((r for r in _meta(body).get("ownerReferences") or [] if r.get("controller")), None)
        if owner is None or owner.get("kind") not in self.kinds:
            return
        uid, key = str(owner.get("uid") or ""), _key(body)
        self._disown(key)
        self._owned[key] = uid
        self._workloads.setdefault(uid, set()).add(key)
        job = self._uids.get(uid)
        if job is not None:
            self._enqueue(job)
        elif owner.get("kind") in self._listed:
            self._orphans.add(key)
            self._enqueue(("", "", ""))

    def _disown(self, key: str) -> str | None:
        uid = self._owned.pop(key, None)
        if uid is not None:
            owned = self._workloads.get(uid)
            if owned is not None:
                owned.discard(key)
                if not owned:
                    del self._workloads[uid]
        return uid

    def _collect_orphans(self) -> None:
        for key, uid in self._owned.items():
            if uid not in self._uids:
                self._orphans.add(key)
        if self._orphans:
            self._enqueue(("", "", ""))

    def _enqueue(self, key: JobKey) -> None:
        if key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    # -- workers ---------------------------------------------------------------------------

    async def run(self) -> None:
        workers = [asyncio.create_task(self._worker(), name=f"jobs-{i}") for i in range(WORKERS)]
        try:
            await asyncio.gather(*workers)
        finally:
            for task in workers:
                task.cancel()

    def resume(self) -> None:
        """This replica now leads: every job gets another look."""
        for key in list(self.jobs):
            self._enqueue(key)
        self._collect_orphans()

    async def _worker(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            if not self.leading():
                continue  # resume() looks again once this replica leads
            try:
                if key == ("", "", ""):
                    await self._delete_orphans()
                else:
                    await self.reconcile(key)
                self._failures.pop(key, None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # one job's trouble must not stop the others
                failures = self._failures.get(key, 0) + 1
                self._failures[key] = failures
                pause = min(RETRY_MAX, RETRY_START * 2 ** (failures - 1))
                level = logging.WARNING if not isinstance(exc, ApiError) or exc.code != 409 else logging.DEBUG
                log.log(level, "%s %s/%s: %s (retrying in %.1fs)", key[0], key[1], key[2], exc, pause)
                asyncio.get_running_loop().call_later(pause, self._enqueue, key)

    def workload_of(self, job: dict[str, Any]) -> dict[str, Any] | None:
        uid = str(_meta(job).get("uid") or "")
        for key in sorted(self._workloads.get(uid, ())):
            obj = self.cache.objects["Workload"].get(key)
            if obj is not None:
                wire: dict[str, Any] = obj.to_wire()
                return wire
        return None

    def _flavors(self) -> dict[str, Flavor]:
        out = {}
        for name, flavor in self.cache.objects["ResourceFlavor"].items():
            spec = flavor.spec
            tolerations = tuple(t if isinstance(t, dict) else dict(t) for t in spec.tolerations or [])
            out[name] = Flavor(dict(spec.node_labels or {}), tolerations)
        return out

    def _priority(self, kind: str, name: str) -> int | None:
        obj = self.cache.objects[kind].get(name)
        value = getattr(obj, "value", None)
        return value if isinstance(value, int) else None

    async def reconcile(self, key: JobKey) -> Step | None:
        body = self.jobs.get(key)
        if body is None:
            return None
        if self.closing(key[1]):
            return None  # its jobs go with it
        job = self._by_kind[key[0]](body)
        try:
            step = plan(job, self.workload_of(body), self._flavors(), self.now(), self.settings, self._priority)
        except ComposeError as exc:
            self._event(job, JobEvent("Warning", "ErrWorkloadCompose", str(exc)))
            raise
        if isinstance(step, WriteWorkloadStatus) and step.why == "released" and not self.scheduled():
            # A new leader: let its first cycle see who waits for this quota before it is free.
            asyncio.get_running_loop().call_later(RETRY_START, self._enqueue, key)
            return None
        if step is not None:
            await self._carry_out(job, step)
            self.steps += 1
        return step

    async def _carry_out(self, job: GenericJob, step: Step) -> None:
        meta = _meta(dict(job.obj))
        name, namespace = str(meta.get("name")), str(meta.get("namespace"))
        if isinstance(step, CreateWorkload):
            # The watch may not have told yet that the job is gone (its Workload was deleted with
            # it): a Workload made now would belong to nobody. One read settles it.
            try:
                fresh = await self.api.get(job.kind.path(name, namespace))
            except ApiError as exc:
                if exc.code != 404:
                    raise
                return
            if _meta(fresh).get("uid") != meta.get("uid") or _meta(fresh).get("deletionTimestamp"):
                return
            try:
                created = await self.api.create(kinds.Workload.path(namespace=namespace), step.body)
            except ApiError as exc:
                if exc.code != 409:
                    raise
                return  # made already: its watch event brings it
            self.feeder.ingest("Workload", created)
            self._workload(created)
        elif isinstance(step, PatchJob):
            version = meta.get("resourceVersion")
            key = (job.kind.name, namespace, name)
            for index, patch in enumerate(step.patches):
                body = {**patch.body, "metadata": {**(patch.body.get("metadata") or {}), "resourceVersion": version}}
                path = job.kind.path(name, namespace, "status" if patch.status else None)
                try:
                    answer = await self.api.patch_merge(path, body)
                except ApiError as exc:
                    if exc.code == 409:
                        # Its own controller wrote it meanwhile: read it, so the retry starts
                        # from what is there (a watch may have nothing newer to deliver).
                        self._keep(key, await self.api.get(job.kind.path(name, namespace)))
                    raise
                version = _meta(answer).get("resourceVersion")
                self._keep(key, answer)
                if index == 0:
                    # Told once the job changed: the rest of a stop may need another try (a
                    # conflict with the job controller), which has nothing new to tell.
                    for event in (step.event, step.also):
                        if event is not None:
                            self._event(job, event)
            return
        else:
            workload = self.workload_of(dict(job.obj))
            if workload is None:
                return
            wl_meta = _meta(workload)
            wl_name = str(wl_meta.get("name"))
            path = kinds.Workload.path(wl_name, namespace)
            if isinstance(step, UpdateWorkload):
                change = {"metadata": {"resourceVersion": wl_meta.get("resourceVersion")}, "spec": step.spec}
                self.feeder.ingest("Workload", await self.api.patch_merge(path, change))
            elif isinstance(step, DeleteWorkload):
                try:
                    await self.api.delete(path)
                except ApiError as exc:
                    if exc.code != 404:
                        raise
                self.feeder.gone("Workload", f"{namespace}/{wl_name}")
                self._disown(f"{namespace}/{wl_name}")
            else:
                result = await self.writer.update_status(
                    kinds.Workload, wl_name, namespace, step.compute, current=workload
                )
                if result.body is not None:
                    self.feeder.ingest("Workload", result.body)
                if result.outcome not in (Outcome.WRITTEN, Outcome.UNCHANGED, Outcome.GONE):
                    raise RuntimeError(f"{step.why} status of Workload {namespace}/{wl_name}: {result.error}")
        if step.event is not None:
            self._event(job, step.event)

    async def _delete_orphans(self) -> None:
        for key in list(self._orphans):
            uid = self._owned.get(key)
            if uid is None or uid in self._uids:
                self._orphans.discard(key)
                continue
            namespace, _, name = key.rpartition("/")
            try:
                await self.api.delete(kinds.Workload.path(name, namespace))
                log.info("deleted Workload %s: its job is gone", key)
            except ApiError as exc:
                if exc.code != 404:
                    raise
            self._orphans.discard(key)

    def _event(self, job: GenericJob, event: JobEvent) -> None:
        self.events.record(dict(job.obj), job.kind.name, job.kind.api_version, event.type, event.reason, event.message)


def _version(body: dict[str, Any]) -> int:
    try:
        return int(_meta(body).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _key(body: dict[str, Any]) -> str:
    meta = _meta(body)
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
