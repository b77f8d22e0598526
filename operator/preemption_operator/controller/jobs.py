"""The job controller: watches the integrated job kinds and their Workloads, and carries out the
step `jobs.reconciler.plan` gives for each job (create its Workload, start or stop the job,
give the quota back once it has stopped, finish the Workload).

A job is keyed by the Workload it maps to (WorkloadKey): its integration names that Workload for
each of its objects, so the objects that name the same one are one job (a pod group's Pods),
reconciled together. Level-triggered: a job is reconciled whenever one of its objects or its
Workload changes, one step at a time, from the objects as the watches show them; a failed step is
retried with backoff. Only the leader acts. Workloads are never annotated or given finalizers:
the integration tells from a Workload whose it is (a job of one object: its controller owner
reference), and deleting a job deletes its Workload (the garbage collector would too, where one
runs)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, NamedTuple

from ..api import kinds
from ..api.kinds import Kind
from ..engine.cache import Cache
from ..jobs.framework import INTEGRATIONS, ComposableJob, GenericJob, Integration
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
    Wait,
    WriteWorkloadStatus,
    plan,
)
from ..k8s.api import ApiError, KubeApi
from ..k8s.events import EventSink
from ..k8s.writer import Outcome, StatusWriter
from .feeder import CacheFeeder
from .started_pods import POD, SELECTOR, StartedPods, any_may_run

log = logging.getLogger(__name__)

WORKERS = 4
RETRY_START, RETRY_MAX = 0.5, 30.0


class WorkloadKey(NamedTuple):
    """A job, by the Workload it maps to: the unit the controller reconciles (a job of several
    objects is reconciled once for all of them)."""

    kind: str
    """The kind of its objects (one integration's)."""
    namespace: str
    name: str
    """Its Workload's name, as its integration gives it (GenericJob.workload_name)."""


ORPHANS = WorkloadKey("", "", "")
"""Queued to delete the Workloads whose jobs are gone."""
DEPARTURES = WorkloadKey("", "", "departures")
"""Queued to read the pods of deleted Workloads whose quota is held (see `_confirm_departures`)."""
Member = tuple[str, str, str]
"""One object of a job: (kind, namespace, name)."""


class ChildState(NamedTuple):
    """How a child of a job stands (Integration.children)."""

    active: bool
    """A pod of it may still run."""
    finished: bool
    """It will make no pod again."""


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
        managed: Callable[[str], bool] = lambda namespace: True,
        started: StartedPods | None = None,
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
        self.managed = managed
        """Whether the jobs of a namespace are managed (Kueue's managedJobsNamespaceSelector):
        the others are left alone."""
        self.started = started
        """The pods started under each Workload that may still run (None: the jobs' own status
        is trusted alone); its watch tells this controller when a Workload's last one goes."""
        if started is not None:
            started.changed = self._pods_changed
            feeder.pods_may_run = self._departing_may_run
            feeder.confirm_gone = self._confirm_gone
        every = tuple(integrations) if integrations is not None else tuple(INTEGRATIONS.values())
        chosen = tuple(integration for integration in every if integration.reconciled)
        self.integrations = {integration.kind.name: integration for integration in chosen}
        """Kind name -> the integration of that kind."""
        self.parents: dict[str, tuple[Integration, ...]] = {}
        """Kind name -> the integrations whose jobs have children of that kind (Integration.children)."""
        for integration in chosen:
            if integration.children is not None:
                name = integration.children.kind.name
                self.parents[name] = (*self.parents.get(name, ()), integration)
        self._children: dict[WorkloadKey, dict[str, ChildState]] = {}
        """Job -> how each of its children (by name) stands."""
        self._child_job: dict[Member, WorkloadKey] = {}
        """Child -> the job that controls it: a child let go (orphaned) leaves that job."""
        self._children_listed: set[str] = set()
        """Child kinds whose first list has come: until then no job of theirs may be taken as
        stopped (a restarted operator has not yet seen its JobSets' Jobs)."""
        self.jobs: dict[WorkloadKey, dict[str, dict[str, Any]]] = {}
        """Each job's objects, by name."""
        self._members: dict[Member, WorkloadKey] = {}
        """Object -> the job it belongs to."""
        self._owned: dict[str, WorkloadKey] = {}
        """Workload key -> the job it belongs to."""
        self._uids: dict[str, str] = {}
        """Workload key -> the uid of the one seen under it: a gone job's Workload is deleted by
        it even when the cache holds it no longer (one made since under the name stays)."""
        self._workloads: dict[WorkloadKey, set[str]] = {}
        """Job -> its Workloads (one, unless something else made a second)."""
        self._replaced: dict[WorkloadKey, set[str]] = {}
        """Job -> its Workloads deleted while it stays, until it has a new one: pods started
        under them may still run, and no new Workload is made before they are gone (Kueue's
        finalizer keeps such a Workload, so its job reconciler makes none before that either)."""
        self._replaced_of: dict[str, WorkloadKey] = {}
        """Those deleted Workloads' keys -> their job: a pod event finds its job without a scan."""
        self._listed: set[str] = set()
        """Kinds whose first list has come (until then a Workload's job may only be unseen)."""
        self._queue: asyncio.Queue[WorkloadKey] = asyncio.Queue()
        self._queued: set[WorkloadKey] = set()
        self._working: set[WorkloadKey] = set()
        """Keys a worker is on now: one asked for again meanwhile waits in `_again` until it is
        done, as in a controller-runtime work queue (a second worker would plan from the objects
        as they were before the first one's step)."""
        self._again: set[WorkloadKey] = set()
        self._failures: dict[WorkloadKey, int] = {}
        self._orphans: set[str] = set()
        self._departures: set[str] = set()
        """Deleted Workloads holding quota whose pods the index knows none of: the API is asked."""

    def key_of(self, kind: Kind, obj: dict[str, Any]) -> WorkloadKey:
        """The job an object of an integrated kind belongs to."""
        name = self.integrations[kind.name].load([obj]).workload_name()
        return WorkloadKey(kind.name, str(_meta(obj).get("namespace") or ""), name)

    # -- informer handlers ---------------------------------------------------------------------

    def child_kinds(self) -> tuple[Kind, ...]:
        """The kinds of children to watch besides the integrated kinds themselves."""
        return tuple(
            integration.children.kind
            for parents in self.parents.values()
            for integration in parents[:1]
            if integration.children is not None and integration.children.kind.name not in self.integrations
        )

    def replace(self, kind: Kind, items: list[dict[str, Any]], resource_version: str) -> None:
        if kind.name == kinds.Namespace.name:
            return  # what changed while the watch was down: the jobs' own lists look again
        if kind.name in self.parents:
            listed = {_member(kind, body) for body in items}
            for member in [m for m in self._child_job if m[0] == kind.name and m not in listed]:
                self._set_child(member, None, None)  # deleted while the watch was down
            for body in items:
                self._child(kind, body, gone=False)
            if kind.name not in self._children_listed:
                # Until now no job of theirs could be taken as stopped, nor a gone one's children as gone.
                self._children_listed.add(kind.name)
                parents = {integration.kind.name for integration in self.parents[kind.name]}
                for job in [job for job in self.jobs if job.kind in parents]:
                    self._enqueue(job)
                for job in [job for job in self._replaced if job.kind in parents and job not in self.jobs]:
                    self._children_changed(job)
                self._collect_orphans()
        if kind.name not in self.integrations and kind.name != kinds.Workload.name:
            return
        if kind.name == kinds.Workload.name:
            before = self._owned.copy()
            self._owned.clear()
            self._uids.clear()
            self._workloads.clear()
            for body in items:
                self._workload(body)
            for key, job in before.items():
                if key not in self._owned:  # deleted while the watch was down
                    self._deleted(key, job)
            return
        listed = {_member(kind, body) for body in items}
        for member in [m for m in self._members if m[0] == kind.name and m not in listed]:
            self._member_gone(member)
        for body in items:
            self._member_seen(kind, body)
        self._listed.add(kind.name)
        self._collect_orphans()

    def event(self, kind: Kind, event_type: str, obj: dict[str, Any]) -> None:
        if kind.name == kinds.Namespace.name:
            # Its labels may have brought its jobs in (or out of) the managed namespaces.
            namespace = str(_meta(obj).get("name") or "")
            for key in [key for key in self.jobs if key.namespace == namespace]:
                self._enqueue(key)
            return
        if kind.name in self.parents:
            self._child(kind, obj, gone=event_type == "DELETED")
        if kind.name not in self.integrations and kind.name != kinds.Workload.name:
            return
        if kind.name == kinds.Workload.name:
            if event_type == "DELETED":
                deleted = _key(obj)
                if self.cache.holds_newer(kinds.Workload.name, deleted, _meta(obj).get("resourceVersion")):
                    return  # an older Workload under the name: the one made again since stays the job's
                job = self._disown(deleted)
                if job is not None:
                    self._deleted(deleted, job)
            else:
                self._workload(obj)
            return
        if event_type == "DELETED":
            self._member_gone(_member(kind, obj))
        else:
            self._member_seen(kind, obj)

    def _deleted(self, workload_key: str, job: WorkloadKey) -> None:
        """A job's Workload was deleted: the job gets a new one if it still wants it, once pods
        started under the old one are gone. A gone job's children that still stand hold the
        deleted Workload's quota too (its controller may yet start them)."""
        if job in self.jobs or self._children_stand(job):
            self._replaced.setdefault(job, set()).add(workload_key)
            self._replaced_of[workload_key] = job
        if job in self.jobs:
            self._enqueue(job)

    def _forget_replaced(self, job: WorkloadKey) -> None:
        """The job has a new Workload, or is gone: its deleted ones no longer hold it back."""
        for workload_key in self._replaced.pop(job, ()):
            if self._replaced_of.get(workload_key) == job:
                del self._replaced_of[workload_key]
                self._recheck_departure(workload_key)

    def _job_may_start_pods(self, workload_key: str) -> bool:
        """Whether the job of the deleted Workload `workload_key` stands and is not stopped: it may
        yet make pods under that Workload's name (a job just started whose controller has not
        made them yet). Its reconcile stops it, and looks at the departure again. A gone job may
        too while children of it stand (`_children_stand`)."""
        job = self._replaced_of.get(workload_key)
        if job is None:
            return False
        objects = self.jobs.get(job)
        if not objects:
            return self._children_stand(job)
        loaded = self.integrations[job.kind].load([objects[name] for name in sorted(objects)])
        if isinstance(loaded, ComposableJob):
            return False  # its members are the pods themselves: the index follows them
        stopped = loaded.is_suspended() and not loaded.is_active() and not self.children_active(job)
        return loaded.finished() is None and not stopped

    def _departing_may_run(self, workload_key: str) -> bool:
        """Whether pods may still run under a deleted Workload, as far as the index and the jobs
        show: one started under it may run, or its job may start one."""
        assert self.started is not None
        return self.started.running(workload_key) or self._job_may_start_pods(workload_key)

    def _recheck_departure(self, workload_key: str) -> None:
        """A deleted Workload held back only by its job, which has stopped or gone: the API is
        asked whether its pods have ended."""
        if (
            self.started is not None
            and workload_key in self.cache.departing
            and workload_key not in self._departures
            and not self._departing_may_run(workload_key)
        ):
            self._confirm_gone(workload_key)

    def _child(self, kind: Kind, body: dict[str, Any], gone: bool) -> None:
        """Notes how a child stands, under the job that controls it (a child let go by its job,
        or gone, leaves it); that job is looked at again when this changes."""
        member = _member(kind, body)
        for integration in self.parents[kind.name] if not gone else ():
            assert integration.children is not None
            workload = integration.controlling_job(body)
            if workload is not None:
                job = WorkloadKey(integration.kind.name, member[1], workload)
                state = ChildState(integration.children.active(body), integration.children.finished(body))
                self._set_child(member, job, state)
                return
        self._set_child(member, None, None)

    def _set_child(self, member: Member, job: WorkloadKey | None, state: ChildState | None) -> None:
        """Files the child under `job` as `state` (None: under no job, gone or let go)."""
        before = self._child_job.pop(member, None)
        if before is not None and before != job:
            children = self._children.get(before, {})
            children.pop(member[2], None)
            if not children:
                self._children.pop(before, None)
            self._children_changed(before)
        if job is None or state is None:
            return
        self._child_job[member] = job
        children = self._children.setdefault(job, {})
        if children.get(member[2]) != state:
            children[member[2]] = state
            self._children_changed(job)

    def _children_changed(self, job: WorkloadKey) -> None:
        """A job's children changed: it is looked at again; a gone one's Workloads, held back
        while its children stood, are let go once none does."""
        if job in self.jobs:
            self._enqueue(job)
        elif self._forget_if_childless(job) and any(key in self._orphans for key in self._workloads.get(job, ())):
            self._enqueue(ORPHANS)

    def _forget_if_childless(self, job: WorkloadKey) -> bool:
        """Lets a gone job's deleted Workloads go once no child of it stands: nothing is left to
        make pods under them. Whether it did."""
        if self._children_stand(job):
            return False
        self._forget_replaced(job)
        return True

    def children_active(self, job: WorkloadKey) -> bool:
        """Whether a child of the job may still have pods (True while the children are not
        listed yet: not seen is not gone)."""
        if not self._children_seen(job):
            return True
        return any(state.active for state in self._children.get(job, {}).values())

    def _children_stand(self, job: WorkloadKey) -> bool:
        """Whether an unfinished child of the job stands (True while the children are not listed
        yet). Once the job is gone, its own controller, acting on what it saw before, may still
        start such a child (a JobSet controller resumes its suspended Jobs) until the garbage
        collector deletes it: the quota of the job's Workload is held until then."""
        if not self._children_seen(job):
            return True
        return any(not state.finished for state in self._children.get(job, {}).values())

    def _children_seen(self, job: WorkloadKey) -> bool:
        """Whether the job's kind has no children, or their first list has come."""
        integration = self.integrations.get(job.kind)
        children = integration.children if integration is not None else None
        return children is None or children.kind.name in self._children_listed

    def _pods_changed(self, workload_key: str) -> None:
        self.feeder.pods_changed(workload_key)
        job = self._owned.get(workload_key) or self._replaced_of.get(workload_key)
        if job is not None and job in self.jobs:
            self._enqueue(job)
        elif workload_key in self._orphans:
            self._enqueue(ORPHANS)  # its job is gone: its Workload may go once its pods have

    def _confirm_gone(self, workload_key: str) -> None:
        self._departures.add(workload_key)
        self._enqueue(DEPARTURES)

    def pods_running(self, job: WorkloadKey) -> bool:
        """Whether a pod started under one of the job's Workloads (or one deleted while the job
        stays) may still run."""
        if self.started is None:
            return False
        return any(self.started.running(key) for key in (*self._workloads.get(job, ()), *self._replaced.get(job, ())))

    def _member_seen(self, kind: Kind, body: dict[str, Any]) -> None:
        member = _member(kind, body)
        job = self.key_of(kind, body)
        held = self._members.get(member)
        if held is None and not self.integrations[kind.name].load([body]).queue_name():
            return  # not submitted to a queue: not ours
        if held is not None and held != job:
            self._member_gone(member)  # made again under the same name: another job
        self._members[member] = job
        self._keep(job, body)
        self._enqueue(job)

    def _keep(self, job: WorkloadKey, body: dict[str, Any]) -> None:
        """Stores an object of a job unless what is stored is newer: a write's answer may come
        after the watch delivered a later version, and a write from an old version can only
        conflict. An object the watch has meanwhile reported gone stays gone."""
        name = str(_meta(body).get("name") or "")
        if self._members.get((job.kind, job.namespace, name)) != job:
            return
        objects = self.jobs.setdefault(job, {})
        held = objects.get(name)
        if held is not None and _version(held) > _version(body) and _meta(held).get("uid") == _meta(body).get("uid"):
            return
        objects[name] = body

    def _member_gone(self, member: Member) -> None:
        job = self._members.pop(member, None)
        if job is None:
            return
        objects = self.jobs.get(job, {})
        objects.pop(member[2], None)
        if objects:
            self._enqueue(job)  # the rest of the job carries on
            return
        self.jobs.pop(job, None)
        self._forget_if_childless(job)
        self._orphans.update(self._workloads.get(job, ()))
        self._enqueue(ORPHANS)

    def _workload(self, body: dict[str, Any]) -> None:
        job = self._job_of(body)
        if job is None:
            return
        key = _key(body)
        self._disown(key)
        self._owned[key] = job
        if uid := _meta(body).get("uid"):
            self._uids[key] = str(uid)
        self._workloads.setdefault(job, set()).add(key)
        if job in self.jobs:
            self._enqueue(job)
        elif job.kind in self._listed:
            self._orphans.add(key)
            self._enqueue(ORPHANS)

    def _job_of(self, workload: dict[str, Any]) -> WorkloadKey | None:
        """The job a Workload belongs to, as the integrations say (None: no job's)."""
        namespace = str(_meta(workload).get("namespace") or "")
        for kind, integration in self.integrations.items():
            name = integration.job_of(workload)
            if name is not None:
                return WorkloadKey(kind, namespace, name)
        return None

    def _disown(self, key: str) -> WorkloadKey | None:
        self._uids.pop(key, None)
        job = self._owned.pop(key, None)
        if job is not None:
            owned = self._workloads.get(job)
            if owned is not None:
                owned.discard(key)
                if not owned:
                    del self._workloads[job]
        return job

    def _collect_orphans(self) -> None:
        for key, job in self._owned.items():
            if job not in self.jobs and job.kind in self._listed:
                self._orphans.add(key)
        if self._orphans:
            self._enqueue(ORPHANS)

    def _enqueue(self, job: WorkloadKey) -> None:
        if job in self._working:
            self._again.add(job)
        elif job not in self._queued:
            self._queued.add(job)
            self._queue.put_nowait(job)

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
        for job in list(self.jobs):
            self._enqueue(job)
        self._collect_orphans()
        if self._departures:
            self._enqueue(DEPARTURES)

    async def _worker(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._working.add(key)
            try:
                await self._work(key)
            finally:
                self._working.discard(key)
                if key in self._again:
                    self._again.discard(key)
                    self._enqueue(key)

    async def _work(self, key: WorkloadKey) -> None:
        if not self.leading():
            return  # resume() looks again once this replica leads
        try:
            if key == ORPHANS:
                await self._delete_orphans()
            elif key == DEPARTURES:
                await self._confirm_departures()
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
            what = (
                "deleting Workloads whose job is gone"
                if key == ORPHANS
                else "reading the pods of deleted Workloads"
                if key == DEPARTURES
                else f"{key[0]} {key[1]}/{key[2]}"
            )
            log.log(level, "%s: %s (retrying in %.1fs)", what, exc, pause)
            asyncio.get_running_loop().call_later(pause, self._enqueue, key)

    def workload_of(self, job: WorkloadKey) -> dict[str, Any] | None:
        for key in sorted(self._workloads.get(job, ())):
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

    async def reconcile(self, key: WorkloadKey) -> Step | None:
        objects = self.jobs.get(key)
        if not objects:
            self._forget_if_childless(key)
            return None
        for workload_key in sorted(self._replaced.get(key, ())):
            self._recheck_departure(workload_key)
        if self.closing(key.namespace):
            return None  # its jobs go with it
        if not self.managed(key.namespace):
            return None  # not a managed namespace: Kueue's reconciler ignores the job
        bodies = [objects[name] for name in sorted(objects)]
        job = self.integrations[key.kind].load(bodies)
        try:
            step = plan(
                job,
                self.workload_of(key),
                self._flavors(),
                self.now(),
                self.settings,
                self._priority,
                children_active=self.children_active(key),
                pods_running=self.pods_running(key),
            )
        except ComposeError as exc:
            self._event(job, JobEvent("Warning", "ErrWorkloadCompose", str(exc)))
            raise
        if isinstance(step, WriteWorkloadStatus) and step.why == "released":
            if not self.scheduled():
                # A new leader: let its first cycle see who waits for this quota before it is free.
                asyncio.get_running_loop().call_later(RETRY_START, self._enqueue, key)
                return None
            if await self._pods_may_run(key.namespace, self._workloads.get(key, set())):
                asyncio.get_running_loop().call_later(RETRY_START, self._enqueue, key)
                return None
        # The index said none of the deleted Workloads' pods may run, as far as its watch has
        # come: a new Workload may be admitted at once, so the API answers first.
        if (
            isinstance(step, CreateWorkload)
            and self._replaced.get(key)
            and await self._pods_may_run(key.namespace, self._replaced[key])
        ):
            asyncio.get_running_loop().call_later(RETRY_START, self._enqueue, key)
            return None
        if step is not None:
            await self._carry_out(key, job, bodies, step)
        return step

    async def _carry_out(self, key: WorkloadKey, job: GenericJob, bodies: list[dict[str, Any]], step: Step) -> None:
        """Carries out a step planned from these objects of the job: its patches are guarded by
        their resourceVersions, so a step planned from an old version conflicts."""
        meta = _meta(dict(job.obj))
        name, namespace = str(meta.get("name")), key.namespace
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
                self._forget_replaced(key)
                return  # made already: its watch event brings it
            self._forget_replaced(key)
            self.feeder.ingest("Workload", created)
            self._workload(created)
        elif isinstance(step, Wait):
            pass  # only told
        elif isinstance(step, PatchJob):
            versions = {str(_meta(body).get("name")): _meta(body).get("resourceVersion") for body in bodies}
            for index, patch in enumerate(step.patches):
                target = patch.name or name
                if patch.delete:
                    try:
                        await self.api.delete(job.kind.path(target, namespace))
                    except ApiError as exc:
                        if exc.code != 404:
                            raise
                    if index == 0:
                        for event in (step.event, step.also):
                            if event is not None:
                                self._event(job, event)
                    continue
                body = {
                    **patch.body,
                    "metadata": {**(patch.body.get("metadata") or {}), "resourceVersion": versions.get(target)},
                }
                path = job.kind.path(target, namespace, "status" if patch.status else None)
                try:
                    answer = await self.api.patch_merge(path, body)
                except ApiError as exc:
                    if exc.code == 404 and patch.name is not None:
                        continue  # a member gone meanwhile (a Pod): the watch tells, the rest goes on
                    if exc.code == 409:
                        # Its own controller wrote it meanwhile: read it, so the retry starts
                        # from what is there (a watch may have nothing newer to deliver).
                        self._keep(key, await self.api.get(job.kind.path(target, namespace)))
                    raise
                versions[target] = _meta(answer).get("resourceVersion")
                self._keep(key, answer)
                if index == 0:
                    # Told once the job changed: the rest of a stop may need another try (a
                    # conflict with the job controller), which has nothing new to tell.
                    for event in (step.event, step.also):
                        if event is not None:
                            self._event(job, event)
            return
        else:
            workload = self.workload_of(key)
            if workload is None:
                return
            wl_meta = _meta(workload)
            wl_name = str(wl_meta.get("name"))
            path = kinds.Workload.path(wl_name, namespace)
            if isinstance(step, UpdateWorkload):
                change: dict[str, Any] = {"metadata": {"resourceVersion": wl_meta.get("resourceVersion")}}
                if step.spec is not None:
                    change["spec"] = step.spec
                if step.owners is not None:
                    change["metadata"]["ownerReferences"] = step.owners
                self.feeder.ingest("Workload", await self.api.patch_merge(path, change))
            elif isinstance(step, DeleteWorkload):
                try:
                    await self.api.delete(path, uid=wl_meta.get("uid"))
                except ApiError as exc:
                    if exc.code == 409:
                        return  # the name holds another Workload now: its watch event tells
                    if exc.code != 404:
                        raise
                deleted = f"{namespace}/{wl_name}"
                owner = self._disown(deleted)
                if owner is not None:
                    # As after anyone's deletion (its DELETED event will find it let go already),
                    # and before the cache asks whether its job may still start pods under it.
                    self._deleted(deleted, owner)
                self.feeder.gone("Workload", deleted, wl_meta.get("uid"))
            else:
                result = await self.writer.update_status(
                    kinds.Workload, wl_name, namespace, step.compute, current=workload, uid=wl_meta.get("uid")
                )
                if result.body is not None:
                    self.feeder.ingest("Workload", result.body, result.based_on)
                if result.outcome not in (Outcome.WRITTEN, Outcome.UNCHANGED, Outcome.GONE):
                    raise RuntimeError(
                        f"{step.why} status of Workload {namespace}/{wl_name}: {result.error or result.outcome.value}"
                    )
        if step.event is not None:
            self._event(job, step.event)

    async def _delete_orphans(self) -> None:
        for key in list(self._orphans):
            job = self._owned.get(key)
            if job is None or job in self.jobs:
                self._orphans.discard(key)
                continue
            if self.started is not None and self.started.running(key):
                # A deleted job's pods still run out their grace period: the Workload keeps the
                # quota they use until none may run (the pod watch asks again then).
                continue
            if self._children_stand(job):
                continue  # its controller may yet start one (their watch asks again once none stands)
            namespace, _, name = key.rpartition("/")
            if await self._pods_may_run(namespace, {key}):
                asyncio.get_running_loop().call_later(RETRY_START, self._enqueue, ORPHANS)
                continue
            held = self.cache.objects["Workload"].get(key)
            try:
                uid = held.metadata.uid if held is not None else self._uids.get(key)
                await self.api.delete(kinds.Workload.path(name, namespace), uid=uid)
                log.info("deleted Workload %s: its job is gone", key)
            except ApiError as exc:
                if exc.code not in (404, 409):  # 409: the name holds another Workload now
                    raise
            self._orphans.discard(key)

    async def _confirm_departures(self) -> None:
        """A deleted Workload's quota comes back once the API shows none of its pods may run. Its
        job may have made them a moment before the deletion, unseen yet by the index's watch, so
        the API is read (once per namespace), and read again while the index has still not seen
        the pods it shows: once the index has, their end is told by its watch."""
        by_namespace: dict[str, set[str]] = {}
        for key in list(self._departures):
            if key not in self.cache.departing or self._departing_may_run(key):
                # Gone; or the index follows its pods now, or its job may still start some (its
                # reconcile asks again once it has stopped).
                self._departures.discard(key)
                continue
            by_namespace.setdefault(key.rpartition("/")[0], set()).add(key)
        for namespace, keys in sorted(by_namespace.items()):
            pods = await self._started_pods(namespace)
            for key in sorted(keys):
                if any_may_run(pods, {key}):
                    continue
                self._departures.discard(key)
                self.feeder.pods_ended(key)
        if self._departures:
            asyncio.get_running_loop().call_later(RETRY_START, self._enqueue, DEPARTURES)

    async def _pods_may_run(self, namespace: str, workload_keys: set[str]) -> bool:
        """Whether the API shows a pod started under one of these Workloads that may run. The
        started-pods index said none, but only as far as its watch has come: quota given back
        on an absence must see the API's own answer (a read per release, not per cycle)."""
        if self.started is None or not workload_keys:
            return False
        return any_may_run(await self._started_pods(namespace), workload_keys)

    async def _started_pods(self, namespace: str) -> list[dict[str, Any]]:
        """The pods the operator started in a namespace, fresh from the API (what the index watches)."""
        pods, _ = await self.api.list(POD.path(namespace=namespace), label_selector=SELECTOR)
        return pods

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


def _member(kind: Kind, body: dict[str, Any]) -> Member:
    meta = _meta(body)
    return (kind.name, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
