"""The in-memory cluster state that snapshots are cut from.

Objects come in one at a time (from the operator's watches or from YAML files); the cache keeps
them parsed and indexed — admitted workloads per ClusterQueue, pending ones per LocalQueue (the
queue manager, queues.py), quota usage per node — so that a snapshot costs what the ClusterQueues,
cohorts and pending workloads cost, not what the admitted workloads cost: a cycle clones only the
cohort trees it touches.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..api import kinds, v1beta2
from ..api.meta import ObjectMeta
from ..api.quantity import to_amount
from . import admission_checks, execution_time, pods_ready
from .fair_sharing import OFF, FairSharing, parse_weight
from .limits import LimitBook, Pair, PastPreemption, past_preemption, remember
from .notices import Notice
from .ordering import queue_order
from .pods_ready import WaitForPodsReady
from .protection import annotation_problems, class_problems
from .queues import QueueManager
from .quota import QuotaNode, ResourceQuota, compute_subtree
from .selectors import NOTHING, SelectorError, build
from .snapshot import ClusterQueueInfo, ResourceGroupInfo, Snapshot, Trees
from .tas_state import TasState, node_ready
from .workload import PriorityClassInfo, WorkloadInfo, build_info, is_true

if TYPE_CHECKING:
    from .changes import StatusChange


def _key(meta: ObjectMeta) -> str:
    return f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name


@dataclass
class _Tree:
    """Quota nodes by name, rebuilt when ClusterQueues or Cohorts change."""

    cluster_queues: dict[str, ClusterQueueInfo]
    cohorts: dict[str, QuotaNode]
    draining: list[str]
    """ClusterQueues stopped with HoldAndDrain."""
    orphans: dict[str, str] = field(default_factory=dict)
    """Workloads holding quota in a ClusterQueue that does not exist (deleted while they ran),
    with its name: they count against no quota until they finish or are evicted."""


class Change(enum.IntEnum):
    """What an update did to the cache, so the operator wakes the scheduler only when it matters."""

    NONE = 0
    """Stale or already known: nothing changed."""
    STORED = 1
    """Stored, but nothing scheduling reads changed (a status written by us, a Node heartbeat)."""
    RELEVANT = 2
    """Something scheduling reads changed."""


@dataclass(frozen=True)
class _Assumption:
    """A decision whose write is in flight. An admission holds its quota from the moment it is
    decided; an eviction gives the quota back only once written (until then the victim keeps it
    but is no candidate), so a failed or slow write never lets a cycle hand out quota twice."""

    admitted: WorkloadInfo | None
    """The workload as admitted (None: an eviction)."""
    token: object = None
    """The decision it stands for: only that decision's write may end it."""
    eviction: bool = False
    """An eviction being written: the workload keeps its quota (`admitted`, when the admission
    it replaced was still being written, else as observed) and is no candidate meanwhile."""
    holding: WorkloadInfo | None = None
    """An eviction: the workload as observed holding its quota when the eviction was decided. It
    stands in while the observed copy shows the quota released before the write has answered (a
    watch event may come first): until then the room is the waiting preemptor's, not free."""


_LIMITS_READ = frozenset({"PreemptionLimit", "ClusterQueue", "PreemptionConfig", "LocalQueue"})
"""Kinds whose change rebuilds the limits' windows (their specs, the labels they select by, where
a workload's queue is)."""
_PRUNE_EVERY = timedelta(minutes=1)


def _version(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def _class_ref(info: WorkloadInfo) -> tuple[str, str] | None:
    ref = info.obj.spec.priority_class_ref
    return (ref.kind, ref.name) if ref is not None else None


def _relevant(kind: str, obj: Any) -> tuple[Any, ...]:
    """The parts of an object that scheduling reads; a change elsewhere (status, heartbeats,
    managed fields) needs no rebuild and no new look at parked workloads."""
    meta = obj.metadata
    if kind == "Namespace":
        return (meta.labels,)
    if kind in ("PriorityClass", "WorkloadPriorityClass"):
        return (obj.value, meta.annotations)
    if kind == "Node":
        return (meta.labels, obj.spec, obj.status.allocatable, node_ready(obj))
    if kind == "AdmissionCheck":
        return (obj.spec, admission_checks.is_active(obj))
    return (meta.labels, meta.annotations, obj.spec)


def _differs(kind: str, previous: Any, current: Any) -> bool:
    return _relevant(kind, previous) != _relevant(kind, current)


def _passed(
    deadlines: Iterable[tuple[str, datetime]], now: datetime, skip: AbstractSet[str], wake_at: datetime | None
) -> tuple[list[str], datetime | None]:
    """The keys (in the given order, `skip` left out) whose deadline has passed, and `wake_at`
    brought forward to the earliest deadline still ahead."""
    passed = []
    for key, deadline in deadlines:
        if key in skip:
            continue
        if deadline <= now:
            passed.append(key)
        elif wake_at is None or deadline < wake_at:
            wake_at = deadline
    return passed, wake_at


class Cache:
    """Parsed, indexed cluster state: what the API server says (observed) plus the decisions whose
    writes are in flight (assumed). Not thread-safe: one writer at a time."""

    def __init__(
        self,
        fair_sharing: FairSharing = OFF,
        pods_ready: WaitForPodsReady | None = None,
        *,
        prioritize_preemptors: bool = True,
    ) -> None:
        self.fair_sharing = fair_sharing
        """The fair-sharing switch: every snapshot carries it, and when on, the quota nodes keep
        their borrowed amounts (the DRS numerator) current as usage changes."""
        self.pods_ready = pods_ready
        """Kueue's waitForPodsReady (None: off): admitted workloads whose pods are not ready are
        indexed with their deadlines."""
        self.prioritize_preemptors = prioritize_preemptors
        """Kueue's PrioritizePreemptorWorkloads gate, carried by every snapshot (see `Snapshot`)."""
        self._by_creation = pods_ready is not None and pods_ready.requeuing_timestamp == "Creation"
        """requeuingStrategy.timestamp: Creation (a timed-out workload keeps its creation's place)."""
        self._not_ready: dict[str, tuple[str, datetime]] = {}
        """Admitted workloads waiting for their pods, with the timeout's cause and deadline."""
        self._unready: set[str] = set()
        """Workloads holding quota without PodsReady=True (what blockAdmission waits for)."""
        self._marked: set[str] = set()
        """Active workloads marked DeactivationTarget: to be made inactive."""
        self._expiring: dict[str, datetime] = {}
        """Admitted workloads with a maximum execution time, by when they use it up."""
        self._backoff: dict[str, datetime | None] = {}
        """Pending workloads in their requeuing backoff (not queued), with their requeueAt."""
        self._awaiting: set[str] = set()
        """Active workloads holding quota that are not Admitted, or whose AdmissionChecks are not
        all Ready: what their checks call for is looked at in each snapshot."""
        self._settled: dict[tuple[str, frozenset[str], frozenset[str]], set[str]] = {}
        """Admitted workloads whose AdmissionChecks are all Ready, by (ClusterQueue, their checks,
        their flavors): all that can still call for anything is their queue requiring other
        checks (a sync), and that is the same for the whole group, so a snapshot looks at a group
        and not at each of them."""
        self._settled_in: dict[str, tuple[str, frozenset[str], frozenset[str]]] = {}
        self.objects: dict[str, dict[str, Any]] = {kind.name: {} for kind in kinds.MODELS}
        self._by_uid: dict[str, str] = {}
        """Workload keys by UID (every Workload in `objects`)."""
        self.infos: dict[str, WorkloadInfo] = {}
        """Workloads as scheduling sees them: observed, or assumed where a write is in flight."""
        self._observed: dict[str, WorkloadInfo] = {}
        self._assumed: dict[str, _Assumption] = {}
        self._unwritten: dict[str, dict[str, WorkloadInfo]] = {}
        """Per ClusterQueue, admissions assumed and not written yet (the API shows no quota held)."""
        self._unwritten_queue: dict[str, str] = {}
        self._unreadable: dict[str, str] = {}
        """Workloads whose spec cannot be read, by key, with the problem: they keep the quota their
        recorded admission holds, and are never scheduled or chosen as victims."""
        self._departing: set[str] = set()
        """Workloads the API has deleted while pods started under them may still run (the garbage
        collector deletes a deleted job's Workload and its pods at once, and the pods run out their
        grace period): they keep their quota until `departed`, and are never scheduled, written or
        chosen as victims."""
        self._priority_classes: dict[tuple[str, str], PriorityClassInfo] = {}
        self._by_class: dict[tuple[str, str], set[str]] = {}
        """Workloads per priority class they name, so a class change rebuilds only those."""
        self._tree: _Tree | None = None
        self._namespaces: dict[str, dict[str, str]] | None = None
        """Each Namespace's labels, for the snapshots (built again only after a Namespace changed:
        Kueue's large-scale config has a thousand of them)."""
        self.queues = QueueManager()
        """Pending workloads per LocalQueue, routed to ClusterQueues for each snapshot; drains."""
        self._versions: dict[tuple[str, str], int] = {}
        self._tombstones: dict[tuple[str, str], int] = {}
        """Deleted objects and the resourceVersion they were deleted at: older versions (a late
        write answer, a list racing a watch) must not bring them back."""
        self._listed_at: dict[str, int] = {}
        self._tas: TasState | None = None
        self.notices: dict[tuple[str, str], list[Notice]] = {}
        """Problems found in objects as they came in (kind, name) -> notices; they stay until fixed."""
        self._past: dict[str, list[PastPreemption]] = {}
        """Past preemptions per victim, read from statuses as Workloads come in (PreemptionLimit
        windows): no scan of every Workload per pass."""
        self._assumed_past: dict[str, tuple[object, PastPreemption]] = {}
        """Preemptions whose eviction is being written, with their decision: counted before the
        watch shows them."""
        self._book: LimitBook | None = None
        """The limits' shared windows, kept current as Workloads come in; None: to be built again
        (limits, queue or config labels, LocalQueues changed)."""
        self._pruned_at: datetime | None = None

    def holds(self, kind: str, key: str, resource_version: str | None) -> bool:
        """Whether the cache already has exactly this version of the object (e.g. our own write,
        stored from the API's answer before its watch event arrived)."""
        version = _version(resource_version)
        return version is not None and self._versions.get((kind, key)) == version

    def holds_newer(self, kind: str, key: str, resource_version: str | None) -> bool:
        """Whether the cache holds a version of the object written after `resource_version`. A
        deletion at that version is then of an older object under the name: an object is never
        written after its own deletion, so the one held was made again since."""
        version = _version(resource_version)
        held = self._versions.get((kind, key))
        return version is not None and held is not None and held > version

    def _is_stale(self, kind: str, key: str, resource_version: str | None) -> bool:
        version = _version(resource_version)
        if version is None:
            return False
        if self.holds_newer(kind, key, resource_version):
            return True
        deleted = self._tombstones.get((kind, key))
        return deleted is not None and version <= deleted

    # -- updates ----------------------------------------------------------------------------

    def upsert(self, obj: Any) -> Change:
        """Adds or replaces an object; a stale version changes nothing."""
        kind = obj.kind
        key = _key(obj.metadata)
        if self._is_stale(kind, key, obj.metadata.resource_version):
            return Change.NONE
        version = _version(obj.metadata.resource_version)
        if version is not None:
            if self._versions.get((kind, key)) == version:
                return Change.NONE
            self._versions[(kind, key)] = version
            self._tombstones.pop((kind, key), None)
        if kind == "Workload":
            self._unreadable.pop(key, None)
            # Made again under the name (newer than the deletion): the new one is what the API
            # holds; what pods of the old one still run is no longer counted.
            self._departing.discard(key)
            self._store_workload(key, obj)
            self._note_past(key, obj)
            self._set_observed(key, build_info(obj, self._priority_classes, self._observed.get(key), self._by_creation))
            return Change.RELEVANT
        previous = self.objects[kind].get(key)
        self.objects[kind][key] = obj
        if kind == "LocalQueue":
            self.queues.local_queue(key, obj)
        self._check(kind, key, obj)
        if previous is not None and not _differs(kind, previous, obj):
            return Change.STORED
        self._changed(kind, key, previous, obj)
        return Change.RELEVANT

    def hold_unreadable(self, obj: v1beta2.Workload, problem: str) -> Change:
        """A Workload whose spec no longer parses: `obj` carries only what its recorded admission
        says. It keeps holding that quota (taking it away would over-admit its ClusterQueue)
        until it finishes or is deleted."""
        key = _key(obj.metadata)
        if self._is_stale("Workload", key, obj.metadata.resource_version):
            return Change.NONE
        version = _version(obj.metadata.resource_version)
        if version is not None:
            self._versions[("Workload", key)] = version
        self._unreadable[key] = problem
        self._store_workload(key, obj)
        self._note_past(key, obj)
        self._set_observed(key, build_info(obj, self._priority_classes, None, self._by_creation))
        return Change.RELEVANT

    def _store_workload(self, key: str, obj: Any) -> None:
        # Assigned in place, so an update keeps the Workload's place in the dict; only a Workload
        # made again under the name (a new UID) drops the old UID's entry.
        workloads = self.objects["Workload"]
        held = workloads.get(key)
        uid = str(obj.metadata.uid) if obj.metadata.uid else None
        if held is not None and held.metadata.uid and str(held.metadata.uid) != uid:
            self._unindex_uid(key, held)
        workloads[key] = obj
        if uid:
            self._by_uid[uid] = key

    def _drop_workload(self, key: str) -> bool:
        """Whether the cache held a Workload under that key."""
        held = self.objects["Workload"].pop(key, None)
        if held is None:
            return False
        self._unindex_uid(key, held)
        return True

    def _unindex_uid(self, key: str, held: Any) -> None:
        """Drops `held`'s UID from the index, unless it already names another key."""
        uid = str(held.metadata.uid) if held.metadata.uid else None
        if uid and self._by_uid.get(uid) == key:
            del self._by_uid[uid]

    def workload_key(self, uid: str) -> str | None:
        """The key of the Workload with this UID, while the cache holds it (Kueue's preemption
        messages name the preemptor by UID only)."""
        return self._by_uid.get(uid)

    def depart(self, key: str, resource_version: str | None = None) -> Change:
        """The API deleted this Workload (at `resource_version`) while pods started under it may
        still run: one that holds quota keeps it, as it was, until `departed` (Kueue holds the
        Workload itself back with a finalizer; this operator adds none). Any other is deleted."""
        info = self._observed.get(key)
        if info is None or info.cluster_queue is None or info.finished:
            return self.delete("Workload", key, resource_version)
        self._bury("Workload", key, resource_version)
        if key in self._departing:
            return Change.NONE
        self._departing.add(key)
        self._assumed.pop(key, None)  # nothing can be written to it any more
        self._reindex(key)
        return Change.STORED

    def departed(self, key: str) -> Change:
        """The last pod that may run under a departing Workload is gone: its quota comes back."""
        if key not in self._departing:
            return Change.NONE
        return self.delete("Workload", key)

    @property
    def departing(self) -> AbstractSet[str]:
        """Read only (asked on every pod change: not copied)."""
        return self._departing

    def _check(self, kind: str, key: str, obj: Any) -> None:
        """Annotations the engine reads but the API server cannot validate."""
        found: list[Notice] = []
        annotations = dict(obj.metadata.annotations or {})
        if kind in ("ClusterQueue", "Cohort"):
            node = QuotaNode(name=key, is_cluster_queue=kind == "ClusterQueue", annotations=annotations)
            found = [
                Notice(kind, key, "InvalidPreemptionPolicy", f"{kind} {key}: {p}") for p in annotation_problems(node)
            ]
        elif kind in ("WorkloadPriorityClass", "PriorityClass"):
            info = PriorityClassInfo(key, kind, obj.value, annotations)
            found = [
                Notice(kind, key, "InvalidPreemptionToleration", f"{kind} {key}: {p}") for p in class_problems(info)
            ]
        if found:
            self.notices[(kind, key)] = found
        else:
            self.notices.pop((kind, key), None)

    def _bury(self, kind: str, key: str, resource_version: str | None) -> None:
        """Records the deletion (at `resource_version`, else at every version seen so far): no
        older version may bring the object back."""
        known = [
            v
            for v in (
                _version(resource_version),
                self._versions.pop((kind, key), None),
                self._tombstones.get((kind, key)),
            )
            if v is not None
        ]
        if known:
            self._tombstones[(kind, key)] = max(known)

    def delete(self, kind: str, key: str, resource_version: str | None = None) -> Change:
        """Forgets an object. `resource_version` is the version it was deleted at, if known; without
        it, every version seen so far counts as deleted."""
        self._bury(kind, key, resource_version)
        if kind == "LocalQueue":
            self.queues.local_queue(key, None)
        self.notices.pop((kind, key), None)
        if kind == "Workload":
            self._unreadable.pop(key, None)
            self._departing.discard(key)
            self._assumed.pop(key, None)
            if not self.objects["PreemptionLimit"]:
                self._past.pop(key, None)  # with limits, its preemption still counts in their windows
            found = self._drop_workload(key)
            self._set_observed(key, None)
            return Change.RELEVANT if found else Change.NONE
        previous = self.objects[kind].pop(key, None)
        if previous is None:
            return Change.NONE
        self._changed(kind, key, previous, None)
        return Change.RELEVANT

    def replace(
        self,
        kind: str,
        objects: Iterable[Any],
        resource_version: str | None,
        departs: bool = False,
    ) -> Change:
        """The whole current contents of a kind, from a list at `resource_version`: whatever the
        cache holds of it that the list lacks was deleted meanwhile (unless the cache's version is
        newer than the list). With `departs`, a deleted Workload departs instead (pods started
        under it may run), as on its DELETED event."""
        listed = _version(resource_version)
        change = Change.NONE
        seen: set[str] = set()
        for obj in objects:
            seen.add(_key(obj.metadata))
            change = max(change, self.upsert(obj))
        for key in [k for k in self.objects[kind] if k not in seen]:
            if kind == "Workload" and key in self._departing:
                continue  # deleted already: it goes when its pods have
            held = self._versions.get((kind, key))
            if listed is not None and held is not None and held > listed:
                continue  # written after the list was taken
            if kind == "Workload" and departs:
                change = max(change, self.depart(key, resource_version))
            else:
                change = max(change, self.delete(kind, key, resource_version))
        # Tombstones older than the previous list have outlived every write that was in flight.
        previous = self._listed_at.get(kind)
        if previous is not None:
            for tomb in [t for t, v in self._tombstones.items() if t[0] == kind and v <= previous]:
                del self._tombstones[tomb]
        if listed is not None:
            self._listed_at[kind] = listed
        return change

    def load(self, objects: Iterable[Any]) -> None:
        for obj in objects:
            self.upsert(obj)

    # -- assumptions: decisions whose writes are in flight -----------------------------------

    def assume_admission(self, admitted: v1beta2.Workload, token: object = None) -> None:
        """`admitted` is the workload with the status about to be written; `token` names the
        decision (see `forget`)."""
        key = _key(admitted.metadata)
        if key in self._observed:
            self._assumed[key] = _Assumption(
                build_info(admitted, self._priority_classes, self._observed[key], self._by_creation), token
            )
            self._reindex(key)

    def assume_eviction(self, key: str, token: object = None) -> None:
        if key in self._observed:
            previous = self._assumed.get(key)
            # Evicting a workload whose admission is still on its way: it holds that admission's
            # quota until the eviction is written (the admission may land first).
            held = previous.admitted if previous is not None else None
            observed = self._observed[key]
            holding = observed if observed.cluster_queue is not None else None
            self._assumed[key] = _Assumption(held, token, eviction=True, holding=holding)
            self._reindex(key)

    def assume(self, changes: Iterable[StatusChange]) -> None:
        """A cycle's decisions, each assumed with itself as the token until its write ends: an
        admission holds its quota from now on, an eviction keeps the victim's until written."""
        for change in changes:
            if change.holds_quota:
                obj = change.workload.obj
                new = change.compute(obj.status_view())
                if new is not None:
                    status = v1beta2.WorkloadStatus.model_validate(new)
                    self.assume_admission(obj.model_copy(update={"status": status}), change)
            elif change.releases_quota:
                self.assume_eviction(change.key, change)
                if change.past is not None:
                    self._assumed_past[change.key] = (change, change.past)

    def forget(self, key: str, token: object = None) -> None:
        """The write of a decision finished (its answer, if any, is stored) or failed. With a
        `token`, only that decision's assumption ends: a later decision about the same workload
        (an admission decided while an older write to it was still in flight) stays assumed."""
        past = self._assumed_past.get(key)
        if past is not None and (token is None or past[0] is token):
            del self._assumed_past[key]
        assumed = self._assumed.get(key)
        if assumed is None or (token is not None and assumed.token is not token):
            return
        del self._assumed[key]
        self._reindex(key)

    @property
    def assumed(self) -> frozenset[str]:
        return frozenset(self._assumed)

    @property
    def evicting(self) -> frozenset[str]:
        """Workloads whose eviction is being written: they still hold their quota."""
        return frozenset(k for k, a in self._assumed.items() if a.eviction)

    @property
    def admitting(self) -> frozenset[str]:
        """Workloads whose admission is being written (they are not drained until it is)."""
        return frozenset(k for k, a in self._assumed.items() if a.admitted is not None and not a.eviction)

    def unwritten_admissions(self, cluster_queue: str) -> list[WorkloadInfo]:
        """Admissions into `cluster_queue` decided and not written yet: the cycles count their
        quota as taken, the API does not show it yet (their workloads are observed holding none)."""
        return list(self._unwritten.get(cluster_queue, {}).values())

    def _index_unwritten(self, key: str) -> None:
        queue = self._unwritten_queue.pop(key, None)
        if queue is not None:
            held = self._unwritten[queue]
            del held[key]
            if not held:
                del self._unwritten[queue]
        assumption = self._assumed.get(key)
        if assumption is None or assumption.eviction or assumption.admitted is None:
            return
        queue = assumption.admitted.cluster_queue
        observed = self._observed.get(key)
        if queue is not None and (observed is None or observed.cluster_queue is None):
            self._unwritten.setdefault(queue, {})[key] = assumption.admitted
            self._unwritten_queue[key] = queue

    @property
    def unreadable(self) -> dict[str, str]:
        return dict(self._unreadable)

    def _note_past(self, key: str, obj: v1beta2.Workload) -> None:
        found = past_preemption(obj)
        if found is None:
            return
        history = self._past.setdefault(key, [])
        before = list(history)
        remember(history, found)
        if self._book is not None and history != before:
            for past in before:
                self._book.discard(self._pair(past), past.at)
            for past in history:
                self._book.add(self._pair(past), past.at)

    def _queue_of(self, key: str | None) -> str | None:
        """A workload's ClusterQueue: where it holds quota, else where its LocalQueue points."""
        if not key:
            return None
        info = self.infos.get(key)
        if info is not None and info.cluster_queue is not None:
            return info.cluster_queue
        obj = self.objects["Workload"].get(key)
        if obj is None:
            return None
        lq = self.objects["LocalQueue"].get(f"{obj.metadata.namespace}/{obj.spec.queue_name}")
        return lq.spec.cluster_queue if lq is not None and lq.spec is not None else None

    def _pair(self, past: PastPreemption) -> Pair:
        return Pair(
            past.preemptor,
            past.preemptor_cluster_queue or self._queue_of(past.preemptor),
            past.victim,
            past.victim_cluster_queue or self._queue_of(past.victim),
            past.config,
            past.rules,
        )

    def limits(self, now: datetime) -> LimitBook | None:
        """The PreemptionLimits' windows at `now`, for one pass (None without limits): what the
        statuses record, plus the evictions being written that the watch has not shown yet."""
        if not self.objects["PreemptionLimit"]:
            self._book = None
            return None
        if self._book is None:
            self._book = self._build_book(now)
        book = self._book.at(now)
        if self._book.rules and (self._pruned_at is None or now - self._pruned_at >= _PRUNE_EVERY):
            book.prune()
            self._pruned_at = now
            longest = max(rule.window for rule in book.rules)
            for key in [k for k, history in self._past.items() if history[-1].at <= now - longest]:
                del self._past[key]
        for key, (_, past) in self._assumed_past.items():
            history = self._past.get(key, [])
            if not any(p.at >= past.at for p in history):  # not written and watched yet
                book.record(self._pair(past), past.at)
        return book

    def _build_book(self, now: datetime) -> LimitBook:
        configs = self.objects["PreemptionConfig"]
        tree = self.tree()

        def queue_labels(name: str) -> dict[str, str] | None:
            cq = tree.cluster_queues.get(name)
            return dict(cq.labels) if cq is not None else None

        def config_labels(name: str) -> dict[str, str] | None:
            cfg = configs.get(name)
            return dict(cfg.metadata.labels or {}) if cfg is not None else None

        book = LimitBook.build(
            self.objects["PreemptionLimit"].values(), now, config_labels=config_labels, queue_labels=queue_labels
        )
        if book.rules:
            for history in self._past.values():
                for past in history:
                    book.add(self._pair(past), past.at)
        return book

    def _set_observed(self, key: str, info: WorkloadInfo | None) -> None:
        old = self._observed.pop(key, None)
        if old is not None and (ref := _class_ref(old)) is not None:
            named = self._by_class.get(ref)
            if named is not None:
                named.discard(key)
                if not named:
                    del self._by_class[ref]
        if info is not None:
            self._observed[key] = info
            if (ref := _class_ref(info)) is not None:
                self._by_class.setdefault(ref, set()).add(key)
        self._reindex(key)

    def _effective(self, key: str) -> WorkloadInfo | None:
        observed = self._observed.get(key)
        assumed = self._assumed.get(key)
        if observed is None or assumed is None:
            return observed
        if assumed.admitted is not None:
            return assumed.admitted
        if assumed.holding is not None and observed.cluster_queue is None and not observed.finished:
            return assumed.holding
        return observed

    def _reindex(self, key: str) -> None:
        self._index_unwritten(key)
        self._remove_workload(key)
        info = self._effective(key)
        if info is not None:
            self._add_workload(info)

    def _changed(self, kind: str, key: str, previous: Any, current: Any) -> None:
        if kind in _LIMITS_READ:
            self._book = None
        if kind == "Namespace":
            self._namespaces = None
        if kind in ("WorkloadPriorityClass", "PriorityClass"):
            self._priority_classes = self._collect_priority_classes()
            name = (previous or current).name
            for wl_key in sorted(self._by_class.get((kind, name), set())):
                obj = self.objects["Workload"].get(wl_key)
                if obj is not None and wl_key not in self._unreadable:
                    self._set_observed(wl_key, build_info(obj, self._priority_classes, None, self._by_creation))
        elif kind in ("ClusterQueue", "Cohort", "AdmissionCheck"):
            self._tree = None
        elif kind == "ResourceFlavor":
            self._tree = None
            self._tas = None
        elif (
            kind in ("Topology", "Node")
            and self._tas is not None
            and (kind == "Topology" or not self._tas.update_node(previous, current))
        ):
            self._tas = None

    @property
    def priority_classes(self) -> dict[tuple[str, str], PriorityClassInfo]:
        """WorkloadPriorityClasses and PriorityClasses by (kind, name)."""
        return self._priority_classes

    def _collect_priority_classes(self) -> dict[tuple[str, str], PriorityClassInfo]:
        classes: dict[tuple[str, str], PriorityClassInfo] = {}
        for wpc in self.objects["WorkloadPriorityClass"].values():
            classes[("WorkloadPriorityClass", wpc.name)] = PriorityClassInfo(
                wpc.name, "WorkloadPriorityClass", wpc.value, dict(wpc.metadata.annotations or {})
            )
        for pc in self.objects["PriorityClass"].values():
            classes[("PriorityClass", pc.name)] = PriorityClassInfo(
                pc.name, "PriorityClass", pc.value, dict(pc.metadata.annotations or {}), pc.preemption_policy
            )
        return classes

    def _add_workload(self, info: WorkloadInfo) -> None:
        self.infos[info.key] = info
        if info.finished:
            return
        if info.key in self._departing:
            self._hold(info)  # its quota only: nothing is timed, checked or drained
            return
        marked = info.active and is_true(info.obj, pods_ready.DEACTIVATION_TARGET)
        if marked:
            self._marked.add(info.key)
        if info.cluster_queue is not None and self.pods_ready is not None:
            if not is_true(info.obj, pods_ready.PODS_READY):
                self._unready.add(info.key)
            # One marked for deactivation already waits for spec.active=false, not for a timeout.
            eligible = info.active and not info.evicted and not marked
            due = pods_ready.deadline(info.obj, self.pods_ready) if eligible else None
            if due is not None:
                self._not_ready[info.key] = due
        if info.cluster_queue is not None and info.active and not info.evicted and not marked:
            # One being evicted already is left to its eviction (Kueue would mark it too).
            expires = execution_time.deadline(info.obj)
            if expires is not None:
                self._expiring[info.key] = expires
        if info.cluster_queue is not None and info.active and not info.evicted:
            have = admission_checks.states(info.obj)
            if not is_true(info.obj, "Admitted") or not all(c.state == admission_checks.READY for c in have):
                self._awaiting.add(info.key)
            elif have:
                group = (
                    info.cluster_queue,
                    frozenset(c.name for c in have),
                    admission_checks.admitted_flavors(info.obj),
                )
                self._settled.setdefault(group, set()).add(info.key)
                self._settled_in[info.key] = group
        if info.cluster_queue is None and info.active and pods_ready.backing_off(info.obj):
            self._backoff[info.key] = pods_ready.requeue_at(info.obj)
            return
        if info.cluster_queue is not None:
            if not info.active and info.key not in self._unreadable:
                self.queues.deactivated.add(info.key)
            self._hold(info)
        elif info.key not in self._unreadable:
            self.queues.add_pending(info)

    def _hold(self, info: WorkloadInfo) -> None:
        """Counts a workload's quota in its ClusterQueue (and its pods' room on the nodes)."""
        assert info.cluster_queue is not None
        if self._tas is not None:
            self._tas.add(info)
        if self._tree is not None:
            cq = self._tree.cluster_queues.get(info.cluster_queue)
            if cq is not None:
                cq.workloads[info.key] = info
                cq.node.add(info.usage)
            else:
                self._tree.orphans[info.key] = info.cluster_queue

    def _remove_workload(self, key: str) -> None:
        info = self.infos.pop(key, None)
        if info is None:
            return
        self._not_ready.pop(key, None)
        self._expiring.pop(key, None)
        self._unready.discard(key)
        self._marked.discard(key)
        self._awaiting.discard(key)
        group = self._settled_in.pop(key, None)
        if group is not None:
            settled = self._settled[group]
            settled.discard(key)
            if not settled:
                del self._settled[group]
        if key in self._backoff:
            del self._backoff[key]
            return  # in its backoff: never queued
        self.queues.deactivated.discard(key)
        if self._tas is not None:
            self._tas.discard(info.key)
        if info.cluster_queue is not None:
            if self._tree is not None:
                self._tree.orphans.pop(key, None)
                cq = self._tree.cluster_queues.get(info.cluster_queue)
                if cq is not None and cq.workloads.pop(key, None) is not None:
                    cq.node.remove(info.usage)
        else:
            self.queues.remove_pending(info)

    # -- the quota tree -------------------------------------------------------------------------

    def _build_tree(self) -> _Tree:
        cohorts: dict[str, QuotaNode] = {}
        cohort_objs: dict[str, v1beta2.Cohort] = self.objects["Cohort"]

        def cohort(name: str) -> QuotaNode:
            node = cohorts.get(name)
            if node is None:
                node = QuotaNode(name=name, is_cluster_queue=False)
                cohorts[name] = node
                obj = cohort_objs.get(name)
                if obj is not None:
                    node.quotas = _quotas(obj.spec.resource_groups)
                    node.annotations = dict(obj.metadata.annotations or {})
                    node.fair_weight = _weight(obj.spec.fair_sharing)
            return node

        for name in sorted(cohort_objs):
            cohort(name)
        for name in sorted(cohort_objs):
            parent = cohort_objs[name].spec.parent_name
            if parent and not _creates_cycle(name, parent, cohort_objs):
                child = cohorts[name]
                child.parent = cohort(parent)
                child.parent.child_cohorts.append(child)

        cluster_queues: dict[str, ClusterQueueInfo] = {}
        flavors = self.objects["ResourceFlavor"]
        for name in sorted(self.objects["ClusterQueue"]):
            obj: v1beta2.ClusterQueue = self.objects["ClusterQueue"][name]
            node = QuotaNode(
                name=name,
                is_cluster_queue=True,
                quotas=_quotas(obj.spec.resource_groups),
                annotations=dict(obj.metadata.annotations or {}),
                fair_weight=_weight(obj.spec.fair_sharing),
            )
            if obj.spec.cohort_name:
                node.parent = cohort(obj.spec.cohort_name)
                node.parent.child_cluster_queues.append(node)
            groups = tuple(
                ResourceGroupInfo(tuple(rg.covered_resources), tuple(f.name for f in rg.flavors))
                for rg in obj.spec.resource_groups or []
            )
            active, reason, message = True, "Ready", "Can admit new workloads"
            # In the order the spec names them, as Kueue lists them.
            missing = list(dict.fromkeys(f for g in groups for f in g.flavors if f not in flavors))
            try:
                selector = build(obj.spec.namespace_selector, nil=NOTHING)
            except SelectorError as exc:
                selector = NOTHING
                active, reason, message = False, "Misconfigured", f"spec.namespaceSelector: {exc}"
            # Kueue's inactiveReason: every cause in the message, the first one as the reason.
            causes: list[tuple[str, str]] = []
            if obj.spec.stop_policy != "None":
                causes.append(("Stopped", "is stopped"))
            if missing:
                causes.append(("FlavorNotFound", f"references missing ResourceFlavor(s): {','.join(missing)}"))
            checks = admission_checks.of_cluster_queue(obj)
            causes.extend(admission_checks.problems(checks, self.objects["AdmissionCheck"]))
            if causes:
                active, reason = False, causes[0][0]
                message = f"Can't admit new workloads: {', '.join(text for _, text in causes)}."
            cluster_queues[name] = ClusterQueueInfo(
                name=name,
                labels=dict(obj.metadata.labels or {}),
                annotations=dict(obj.metadata.annotations or {}),
                cohort=obj.spec.cohort_name or None,
                resource_groups=groups,
                preemption=obj.spec.preemption,
                queueing_strategy=obj.spec.queueing_strategy,
                namespace_selector=selector,
                stop_policy=obj.spec.stop_policy,
                when_can_borrow=obj.spec.flavor_fungibility.when_can_borrow,
                when_can_preempt=obj.spec.flavor_fungibility.when_can_preempt,
                preference=obj.spec.flavor_fungibility.preference,
                admission_checks=checks,
                active=active,
                inactive_reason=reason,
                inactive_message=message,
                node=node,
            )
        for node in cohorts.values():
            if node.parent is None:
                compute_subtree(node)
        for cq in cluster_queues.values():
            if cq.node.parent is None:
                compute_subtree(cq.node)
        orphans: dict[str, str] = {}
        for info in self.infos.values():
            if info.cluster_queue is not None and not info.finished:
                target = cluster_queues.get(info.cluster_queue)
                if target is not None:
                    target.workloads[info.key] = info
                    target.node.add(info.usage)
                else:
                    orphans[info.key] = info.cluster_queue
        if self.fair_sharing.enabled:
            for quota_node in [*cohorts.values(), *(cq.node for cq in cluster_queues.values())]:
                quota_node.borrowed_by_resource()  # tracked from here on, as usage changes
        draining = sorted(n for n, cq in cluster_queues.items() if cq.stop_policy == "HoldAndDrain")
        return _Tree(cluster_queues, cohorts, draining, orphans)

    def workload_notices(self) -> list[Notice]:
        """Problems of workloads the engine can still schedule around (not object parse errors)."""
        return [
            Notice(
                "Workload",
                key,
                "ClusterQueueNotFound",
                f"Workload {key} holds quota in ClusterQueue {name}, which does not exist (it was deleted while the "
                "workload was admitted); the workload keeps its admission and counts against no quota until it "
                "finishes or is evicted",
            )
            for key, name in sorted(self.tree().orphans.items())
        ]

    def tree(self) -> _Tree:
        if self._tree is None:
            self._tree = self._build_tree()
        return self._tree

    def tas(self) -> TasState:
        if self._tas is None:
            self._tas = TasState.build(self.objects["Node"], self.objects["Topology"], self.objects["ResourceFlavor"])
            for info in self.infos.values():
                if info.cluster_queue is not None and not info.finished:
                    self._tas.add(info)
        return self._tas

    def namespace_labels(self) -> dict[str, dict[str, str]]:
        """Each Namespace's labels (built again only after a Namespace changed)."""
        if self._namespaces is None:
            self._namespaces = {name: dict(ns.metadata.labels or {}) for name, ns in self.objects["Namespace"].items()}
        return self._namespaces

    def pending_in(self, cluster_queue: str) -> list[WorkloadInfo] | None:
        """A ClusterQueue's pending workloads in the order the scheduler takes them (Kueue's
        PendingWorkloadsInfo): the queued ones and those waiting out a requeuing backoff, in
        queue order. None: no such ClusterQueue. Routes only the LocalQueues that feed it."""
        tree = self.tree()
        if cluster_queue not in tree.cluster_queues:
            return None
        local_queues = self.objects["LocalQueue"]
        queued = self.queues.pending_in(cluster_queue, local_queues, tree.cluster_queues, self.namespace_labels())
        return self._with_backoff(cluster_queue, queued)

    def pending_by_cluster_queue(self) -> dict[str, list[WorkloadInfo]]:
        """`pending_in` for every ClusterQueue, routing every LocalQueue once."""
        tree = self.tree()
        routed = self.queues.route(self.objects["LocalQueue"], tree.cluster_queues, self.namespace_labels())
        return {name: self._with_backoff(name, routed.pending.get(name, [])) for name in tree.cluster_queues}

    def _with_backoff(self, cluster_queue: str, queued: list[WorkloadInfo]) -> list[WorkloadInfo]:
        local_queues = self.objects["LocalQueue"]
        waiting = [
            self.infos[key]
            for key in self._backoff
            if (lq := local_queues.get(f"{self.infos[key].namespace}/{self.infos[key].queue_name}")) is not None
            and lq.spec.cluster_queue == cluster_queue
        ]
        return sorted([*queued, *waiting], key=queue_order) if waiting else list(queued)

    # -- snapshots ------------------------------------------------------------------------------

    def snapshot(self, now: datetime) -> Snapshot:
        """A snapshot for one pass: quota trees cloned lazily (copy-on-read), pending workloads
        routed to their ClusterQueues (the queue manager: its cost grows with the pending
        workloads), and the admitted ones to drain."""
        tree = self.tree()
        trees = Trees(tree.cluster_queues, tree.cohorts)
        namespaces = self.namespace_labels()
        local_queues = self.objects["LocalQueue"]
        routed = self.queues.route(local_queues, tree.cluster_queues, namespaces)
        # Neither an eviction nor an admission being written is drained (or timed out) until its
        # write is done.
        in_flight = self.evicting | self.admitting
        departing = frozenset(self._departing)
        drains = self.queues.drains(tree.cluster_queues, tree.draining, local_queues, self.infos, in_flight | departing)
        limits = self.limits(now)
        backoffs: list[WorkloadInfo] = []
        not_ready = sorted(self._not_ready.items())
        passed, wake_at = _passed(((k, d) for k, (_, d) in not_ready), now, in_flight, None)
        timed_out = [(self.infos[key], self._not_ready[key][0]) for key in passed]
        passed, wake_at = _passed(sorted(self._expiring.items()), now, in_flight, wake_at)
        expired = [self.infos[key] for key in passed]
        backing_off: dict[str, list[WorkloadInfo]] = {}
        for key, requeue_at in sorted(self._backoff.items()):
            info = self.infos[key]
            if requeue_at is None or requeue_at <= now:
                backoffs.append(info)
            elif wake_at is None or requeue_at < wake_at:
                wake_at = requeue_at
            lq = local_queues.get(f"{info.namespace}/{info.queue_name}")
            if lq is not None:  # counted as its queues' pending (Kueue: inadmissible)
                backing_off.setdefault(lq.spec.cluster_queue, []).append(info)
        checks: list[tuple[WorkloadInfo, admission_checks.Verdict]] = []
        awaiting = self._awaiting
        for (name, have, flavors), keys in self._settled.items():
            cq = tree.cluster_queues.get(name)
            if cq is not None and admission_checks.required(cq.admission_checks, flavors, cq.flavors) != have:
                awaiting = awaiting | keys  # their queue's checks changed: each syncs its list
        for key in sorted(awaiting - in_flight):
            info = self.infos[key]
            cq = tree.cluster_queues.get(info.cluster_queue or "")
            if cq is None or not (cq.admission_checks or admission_checks.states(info.obj)):
                continue  # a queue without checks admits at once
            found = admission_checks.verdict(info.obj, cq.admission_checks, cq.flavors, now)
            if found is not None:
                checks.append((info, found))
        for name, waiting in routed.pending.items():
            cq = tree.cluster_queues[name]
            if cq.admission_checks:  # pending ones list the checks that run for every flavor
                need = admission_checks.required(cq.admission_checks, None, cq.flavors)
                for info in waiting:
                    if {c.name for c in admission_checks.states(info.obj)} != need:
                        checks.append((info, admission_checks.Verdict(admission_checks.SYNC, required=need)))
        return Snapshot(
            now=now,
            trees=trees,
            pending=routed.pending,
            unqueued=routed.unqueued,
            drains=drains,
            workloads=self.infos,
            flavors=dict(self.objects["ResourceFlavor"]),
            tas=self.tas(),
            preemption_configs=dict(self.objects["PreemptionConfig"]),
            namespace_labels=namespaces,
            evicting=self.evicting,
            unreadable=frozenset(self._unreadable),
            departing=departing,
            fair_sharing=self.fair_sharing,
            prioritize_preemptors=self.prioritize_preemptors,
            limits=limits,
            keys=routed.keys,
            shapes=routed.shapes,
            pods_ready=self.pods_ready,
            timed_out=timed_out,
            marked=[self.infos[key] for key in sorted(self._marked) if key not in in_flight],
            expired=expired,
            backoffs=backoffs,
            wake_at=wake_at,
            unready=frozenset(self._unready),
            checks=checks,
            backing_off=backing_off,
        )


def _quotas(groups: list[v1beta2.ResourceGroup] | None) -> dict[tuple[str, str], ResourceQuota]:
    quotas: dict[tuple[str, str], ResourceQuota] = {}
    for group in groups or []:
        for flavor in group.flavors:
            for res in flavor.resources:
                quotas[(flavor.name, res.name)] = ResourceQuota(
                    nominal=to_amount(res.name, res.nominal_quota),
                    borrowing_limit=None if res.borrowing_limit is None else to_amount(res.name, res.borrowing_limit),
                    lending_limit=None if res.lending_limit is None else to_amount(res.name, res.lending_limit),
                )
    return quotas


def _weight(fair_sharing: v1beta2.FairSharing | None) -> float:
    return parse_weight(fair_sharing.weight if fair_sharing is not None else None)


def _creates_cycle(name: str, parent: str, cohorts: dict[str, v1beta2.Cohort]) -> bool:
    seen = {name}
    current: str | None = parent
    while current:
        if current in seen:
            return True
        seen.add(current)
        obj = cohorts.get(current)
        current = obj.spec.parent_name if obj is not None else None
    return False
