"""The seam every job integration fills (Kueue's jobframework), and what passes through it.

A job is the unit the operator reconciles, one job one Workload; it may be several objects (a pod
group: many Pods, one Workload). An integration says which Workload each of its objects belongs
to (`GenericJob.workload_name`: a Job its own, a pod group's Pod its group's), builds its view of
a job from all the objects that share that Workload, and says how those objects must change; it
does no I/O. The reconciler (jobs/reconciler.py) decides which step is due and the job controller
(controller/jobs.py) carries it out. A new kind (JobSet, RayJob, pod groups) is one module that
implements `GenericJob` (from `ObjectJob` when a job is one object), declares its `Integration`
and registers it in `INTEGRATIONS`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from ..api.kinds import Kind
from .names import workload_name

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
GROUP_WORKLOAD_ANNOTATION = "kueue.x-k8s.io/is-group-workload"
"""On the Workload of a group of objects (a pod group): whose it is, since none of its owners is
its controller."""
BUILTIN_GROUPS = frozenset({"", "apps", "batch"})
"""API groups Kubernetes serves itself: an integration of their kinds needs no CRD."""


def whole(value: Any, default: int) -> int:
    """An integer field of a job's spec or status, `default` when unset or not an integer."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


@dataclass(frozen=True)
class PodSetInfo:
    """What admission puts into one pod set of a job and restoring takes out again (Kueue's
    PodSetInfo): the pod count and the scheduling fields of its pod template."""

    name: str
    count: int
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    scheduling_gates: tuple[Mapping[str, Any], ...] = ()
    node_affinity: tuple[Mapping[str, Any], ...] = ()
    """Required node selector terms (any one may match): where topology-aware scheduling put the
    pods, when they span several domains."""
    affinity: Mapping[str, Any] | None = None
    """The pod template's own affinity (what restoring puts back)."""


@dataclass(frozen=True)
class Finished:
    """A job that ended: the Workload's Finished condition says this."""

    reason: str
    message: str


@dataclass(frozen=True)
class JobPatch:
    """One JSON merge patch of one of the job's objects (`status`: of its status subresource).
    Patches of one step are sent in order, each guarded by the resourceVersion the one before
    (to the same object) returned."""

    body: Mapping[str, Any]
    status: bool = False
    name: str | None = None
    """The object patched, by name (None: `obj`, the one that stands for the job)."""
    delete: bool = False
    """The object is deleted instead (gone already is fine); `body` is not used."""


class GenericJob(Protocol):
    """A job of an integrated kind, as scheduling sees it: built from one object (its own view of
    that object), or by the integration's `compose` from all the objects of the job."""

    kind: ClassVar[Kind]
    obj: Mapping[str, Any]
    """The object that stands for the job: its Workload's controller owner, and where Events
    about the job go."""

    def __init__(self, obj: Mapping[str, Any]) -> None: ...

    def workload_name(self) -> str:
        """The name of the job's Workload: what the job controller keys the job by, so objects
        that give the same name are one job."""

    def queue_name(self) -> str:
        """The LocalQueue it is submitted to ("" when not queued: the integration ignores it)."""

    def pod_sets(self) -> list[dict[str, Any]]:
        """Its Workload's spec.podSets, in wire form."""

    def equivalent(self, pod_sets: list[dict[str, Any]], admitted: bool) -> bool:
        """Whether a Workload with these pod sets still describes the job (Kueue compares
        counts, minCounts, containers and, before admission, tolerations)."""

    def priority_class_name(self) -> str:
        """The pod template's priorityClassName ("" if none)."""

    def is_suspended(self) -> bool:
        """Suspended and not half-way through being stopped."""

    def is_active(self) -> bool:
        """Whether any pod of it may still run: its quota is given back only once this is False."""

    def finished(self) -> Finished | None: ...

    def pods_ready(self) -> bool:
        """Whether all its pods are ready or have succeeded (Kueue's GenericJob.PodsReady): what
        the Workload's PodsReady condition says under waitForPodsReady."""

    def stopping(self) -> bool:
        """Whether `stop` has more to do (it was interrupted half-way, or never ran)."""

    def run(self, infos: list[PodSetInfo]) -> list[JobPatch]:
        """Start it with admission's pod counts and scheduling fields."""

    def stop(self, originals: list[PodSetInfo]) -> list[JobPatch]:
        """Suspend it (its own controller deletes its pods) and put its pod sets back as
        `originals` (the Workload's copy) has them."""


class ObjectJob:
    """What every job of one object shares (a Job, a JobSet, a RayCluster): its Workload is
    named after the object, and its queue is the object's queue label. An integration of such a
    kind subclasses it, sets `kind` and adds the rest of `GenericJob`."""

    kind: ClassVar[Kind]

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self.obj = obj

    @property
    def _meta(self) -> Mapping[str, Any]:
        return self.obj.get("metadata") or {}

    @property
    def _spec(self) -> Mapping[str, Any]:
        return self.obj.get("spec") or {}

    @property
    def _status(self) -> Mapping[str, Any]:
        return self.obj.get("status") or {}

    def workload_name(self) -> str:
        return owned_workload_name(self.kind, self._meta)

    def queue_name(self) -> str:
        return str((self._meta.get("labels") or {}).get(QUEUE_LABEL) or "")


@dataclass(frozen=True)
class Children:
    """The objects a job's own controller makes for it (a JobSet's Jobs), whose status tells
    whether their pods are gone when the job's own status cannot (a JobSet counts only Jobs with
    running pods, not those whose pods are still terminating)."""

    kind: Kind
    active: Callable[[Mapping[str, Any]], bool]
    """Whether a pod of this child may still run."""
    finished: Callable[[Mapping[str, Any]], bool] = lambda obj: False
    """Whether this child will make no pod again. Until then a child of a deleted job may still be
    started by the job's controller, acting on what it saw before the deletion, until the garbage
    collector deletes the child."""


@runtime_checkable
class ComposableJob(GenericJob, Protocol):
    """A job of several objects that come and go on their own (a pod group: Kueue's
    ComposableJob): it cannot be suspended as a whole, only its members stopped; its Workload is
    owned by every member and never changed, only made again."""

    def problem(self) -> str | None:
        """Why no Workload can be made for it yet (None: one can)."""

    def tidy(self, workload: Mapping[str, Any] | None, finished: bool) -> tuple[list[JobPatch], int]:
        """Housekeeping on its members (finalizers released, excess members deleted), given its
        Workload (None: none yet) and whether that is finished; and how many members are excess."""

    def owner_references(self) -> list[dict[str, Any]]:
        """The owner references its Workload must have."""

    def reclaimable(self, workload: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """The Workload's `status.reclaimablePods` (None: not tracked)."""

    def waiting(self) -> bool:
        """A member still waits to be started (joined after the job was admitted)."""


Mutate = Callable[[Mapping[str, Any]], list[dict[str, Any]]]
"""An object being created -> the JSON patch operations its mutating webhook answers with."""
Validate = Callable[[Mapping[str, Any], Mapping[str, Any] | None], list[str]]
"""An object being created (old None) or updated, and the old one -> its field errors."""


@dataclass(frozen=True)
class Integration:
    """One job integration, as the registry holds it (Kueue's IntegrationCallbacks): everything
    the operator derives from it (flag, watches, webhooks, RBAC) comes from here."""

    framework: str
    """Its name in Kueue's `integrations.frameworks` (`batch/job`): what `--integrations` takes."""
    job: type[GenericJob] | None
    """Its view of a job; `job.kind` is where its objects live. None: its objects are not jobs,
    only its webhooks change them (a Deployment, each of whose Pods is a job of `pod`: Kueue's
    no-op reconciler); `webhook_kind` then says where they live."""
    mutate: Mutate
    """Its mutating webhook, called on create."""
    validate: Validate
    """Its validating webhook, called on create and update."""
    job_stops: bool = True
    """Whether an evicted Workload it owns keeps its quota until the job has stopped (its pods are
    gone; the job controller then gives the quota back). False: the quota comes back at eviction,
    as for a bare Workload."""
    compose: Callable[[Sequence[Mapping[str, Any]]], GenericJob] | None = None
    """The job from all its objects (Kueue's ComposableJob), in name order. None: each object is a
    job of its own, `job(obj)`."""
    selector: str | None = None
    """A label selector its objects are watched with (None: all of them): Pods only once the
    webhook has taken them."""
    verbs: tuple[str, ...] = ()
    """What the job controller does to its objects besides watching and patching them (Pods are
    deleted to stop them): what its ClusterRole grants."""
    children: Children | None = None
    """What its own controller makes for each job (None: nothing the job's status does not
    already account for). A job is active while any of its children is."""
    claims: Callable[[Mapping[str, Any]], str | None] | None = None
    """Which job a Workload belongs to, by the `workload_name` of that job (None: not one of this
    integration's). Unset: the job that is its controller owner, whatever the Workload is called
    (one made by Kueue keeps serving the job)."""
    webhook_kind: Kind | None = None
    """The kind of an integration without jobs (`job` None)."""
    mutate_on_update: bool = False
    """Its mutating webhook is called on update too (a Deployment's pod template is stamped again
    whenever it changes)."""
    implies: tuple[str, ...] = ()
    """Frameworks enabled with it, when not named themselves (Kueue's
    ImplicitlyEnabledFrameworkNames: deployment, statefulset and leaderworkerset imply pod)."""
    reinvoke: bool = False
    """Its mutating webhook is called again when a webhook after it changed the object
    (reinvocationPolicy IfNeeded): what it adds depends on what others add (a LeaderWorkerSet's
    Pod gets its group index from the LeaderWorkerSet's own Pod webhook, which may run after ours)."""

    @property
    def kind(self) -> Kind:
        if self.job is not None:
            return self.job.kind
        assert self.webhook_kind is not None, f"{self.framework}: an integration without jobs names its kind"
        return self.webhook_kind

    @property
    def reconciled(self) -> bool:
        """Whether the job controller reconciles its objects as jobs."""
        return self.job is not None

    @property
    def crd(self) -> str | None:
        """The CustomResourceDefinition that serves its kind (`jobsets.jobset.x-k8s.io`); None
        for a kind Kubernetes serves itself, always there."""
        kind = self.kind
        return None if kind.group in BUILTIN_GROUPS else f"{kind.plural}.{kind.group}"

    def load(self, objects: Sequence[Mapping[str, Any]]) -> GenericJob:
        """The job made of these objects (all giving the same `workload_name`)."""
        if self.compose is not None:
            return self.compose(objects)
        assert self.job is not None, f"{self.framework} has no jobs"
        return self.job(objects[0])

    def job_of(self, workload: Mapping[str, Any]) -> str | None:
        """The `workload_name` of the job a Workload belongs to, None if none of this integration's."""
        if self.claims is not None:
            return self.claims(workload)
        return self.controlling_job(workload)

    def controlling_job(self, obj: Mapping[str, Any]) -> str | None:
        """The `workload_name` of the job of this integration that is the object's controller
        owner (None: not one of its jobs), for a job of one object."""
        owner = controller_of(obj)
        if owner is None or owner.get("kind") != self.kind.name:
            return None
        if str(owner.get("apiVersion") or "").rpartition("/")[0] != self.kind.group:
            return None
        return owned_workload_name(self.kind, owner)


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """An object's controller owner reference (None if it has none)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next((ref for ref in refs if isinstance(ref, Mapping) and ref.get("controller")), None)


def owned_workload_name(kind: Kind, owner: Mapping[str, Any]) -> str:
    """Kueue's name for the Workload of a job that is one object: named after that object, from
    its name and UID (`owner`: its metadata, or an owner reference to it)."""
    return workload_name(kind.name, kind.group, str(owner.get("name") or ""), str(owner.get("uid") or ""))


INTEGRATIONS: dict[str, Integration] = {}
"""Framework name -> integration. Filled by the integration modules as they are imported
(importing the package imports them all)."""


def register(integration: Integration) -> Integration:
    """Adds an integration under its framework name; a name, or a kind, has one integration."""
    if integration.framework in INTEGRATIONS:
        raise ValueError(f"duplicate framework name {integration.framework!r}")
    kind = integration.kind
    if (other := of_kind(kind.api_version, kind.name)) is not None:
        raise ValueError(f"{kind.api_version} {kind.name} is integrated already, as {other.framework!r}")
    INTEGRATIONS[integration.framework] = integration
    return integration


def enabled(names: Iterable[str] | None) -> tuple[Integration, ...]:
    """The integrations named (as `--integrations` names them), then those they imply (one level,
    as Kueue collects them); None: every known one. ValueError names an unknown one."""
    if names is None:
        return tuple(INTEGRATIONS.values())
    names = tuple(names)
    chosen = [*dict.fromkeys(names)]
    unknown = [name for name in chosen if name not in INTEGRATIONS]
    if unknown:
        raise ValueError(f"unknown integration {unknown[0]!r}: known are {', '.join(sorted(INTEGRATIONS))}")
    for name in implied(chosen):
        if name not in INTEGRATIONS:
            raise ValueError(f"unknown integration {name!r}, implied by one of {', '.join(chosen)}")
        chosen.append(name)
    return tuple(INTEGRATIONS[name] for name in chosen)


def implied(names: Iterable[str]) -> tuple[str, ...]:
    """The frameworks enabled only because a named one implies them (Kueue's implicitly enabled
    integrations), in order."""
    names = tuple(names)
    out: dict[str, None] = {}
    for name in names:
        integration = INTEGRATIONS.get(name)
        for other in integration.implies if integration is not None else ():
            if other not in names:
                out[other] = None
    return tuple(out)


def of_kind(api_version: str, kind: str) -> Integration | None:
    """The integration whose objects have this apiVersion and kind."""
    return next((i for i in INTEGRATIONS.values() if (i.kind.api_version, i.kind.name) == (api_version, kind)), None)


def stopping_owners(
    integrations: Iterable[Integration], external: Iterable[tuple[str, str]] = ()
) -> frozenset[tuple[str, str]]:
    """(apiVersion, kind) of the jobs whose evicted Workloads keep their quota until the job has
    stopped: what the scheduling loop is told of a Workload's controller owner. `external`:
    Kueue's externalFrameworks, kinds whose own controllers stop their jobs and then clear the
    Workload's reservation, as Kueue leaves it to them."""
    ours = ((i.kind.api_version, i.kind.name) for i in integrations if i.reconciled and i.job_stops)
    return frozenset((*ours, *external))
