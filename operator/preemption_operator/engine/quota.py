"""Kueue's quota model: ClusterQueues and Cohorts as nodes of a tree of flavor-resource quotas.

A node's SubtreeQuota is its own nominal quota plus what its children lend to it; usage past a
node's local (unlendable) quota is stored in its parent. `available` walks up the tree and
respects borrowing limits. The arithmetic follows Kueue's `pkg/cache/scheduler/resource_node.go`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

FlavorResource = tuple[str, str]
"""(flavor, resource)."""


@dataclass(frozen=True)
class ResourceQuota:
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(eq=False)
class QuotaNode:
    """A ClusterQueue or a Cohort in the quota tree. Usage is the only part that changes in a cycle."""

    name: str
    is_cluster_queue: bool
    quotas: dict[FlavorResource, ResourceQuota] = field(default_factory=dict)
    parent: QuotaNode | None = None
    child_cohorts: list[QuotaNode] = field(default_factory=list)
    child_cluster_queues: list[QuotaNode] = field(default_factory=list)
    subtree_quota: dict[FlavorResource, int] = field(default_factory=dict)
    usage: dict[FlavorResource, int] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    """The object's annotations (preemption policy and delay are read from them)."""
    fair_weight: float = 1.0
    """spec.fairSharing.weight (Kueue's default 1; 0 makes any borrowing an infinite share)."""
    _height: int | None = field(default=None, repr=False)
    borrowed: dict[str, int] | None = field(default=None, repr=False)
    """Per resource, usage above subtree quota summed over its flavors: the numerator of the
    dominant resource share. None until a share is first asked for (classic never pays for it);
    from then on add_usage/remove_usage keep it current."""
    static: dict[str, object] = field(default_factory=dict, repr=False)
    """Facts that depend only on quotas (lendable capacity): computed once, and shared with this
    node's snapshot clones, which copy the reference."""

    # -- structure -------------------------------------------------------------------------

    @property
    def has_parent(self) -> bool:
        return self.parent is not None

    def path_to_root(self) -> Iterator[QuotaNode]:
        """The ancestors of this node, nearest first."""
        node = self.parent
        while node is not None:
            yield node
            node = node.parent

    def root(self) -> QuotaNode:
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def path(self) -> str:
        """`/root/.../parent/name`, as Kueue prints it in preemption messages."""
        names = [self.name, *(node.name for node in self.path_to_root())]
        return "/" + "/".join(reversed(names))

    def height(self) -> int:
        """Distance to the furthest leaf below (Kueue's getNodeHeight): 0 for a ClusterQueue or an
        empty cohort, 1 for a cohort of ClusterQueues only. The tree's shape never changes within a
        snapshot, so it is computed once per node."""
        if self._height is None:
            height = 0
            if not self.is_cluster_queue:
                height = 1 if self.child_cohorts or self.child_cluster_queues else 0
                for child in self.child_cohorts:
                    height = max(height, child.height() + 1)
            self._height = height
        return self._height

    def subtree_cluster_queues(self) -> Iterator[QuotaNode]:
        if self.is_cluster_queue:
            yield self
            return
        for cohort in self.child_cohorts:
            yield from cohort.subtree_cluster_queues()
        yield from self.child_cluster_queues

    # -- quota arithmetic --------------------------------------------------------------------

    def local_quota(self, fr: FlavorResource) -> int:
        """Quota kept for this subtree because of a lending limit; never lent to the parent."""
        quota = self.quotas.get(fr)
        if quota is not None and quota.lending_limit is not None:
            return max(0, self.subtree_quota.get(fr, 0) - quota.lending_limit)
        return 0

    def local_available(self, fr: FlavorResource) -> int:
        return max(0, self.local_quota(fr) - self.usage.get(fr, 0))

    def _available(self, fr: FlavorResource) -> int:
        if self.parent is None:
            return self.subtree_quota.get(fr, 0) - self.usage.get(fr, 0)
        parent_available = self.parent._available(fr)
        quota = self.quotas.get(fr)
        if quota is not None and quota.borrowing_limit is not None:
            local = self.local_quota(fr)
            stored_in_parent = self.subtree_quota.get(fr, 0) - local
            used_in_parent = max(0, self.usage.get(fr, 0) - local)
            parent_available = min(stored_in_parent - used_in_parent + quota.borrowing_limit, parent_available)
        return self.local_available(fr) + parent_available

    def available(self, fr: FlavorResource) -> int:
        """How much more of `fr` this node can use now (never negative)."""
        return max(0, self._available(fr))

    def potential_available(self, fr: FlavorResource) -> int:
        """The most of `fr` this node could use if nothing else used any."""
        if self.parent is None:
            return self.subtree_quota.get(fr, 0)
        value = self.local_quota(fr) + self.parent.potential_available(fr)
        quota = self.quotas.get(fr)
        if quota is not None and quota.borrowing_limit is not None:
            value = min(self.subtree_quota.get(fr, 0) + quota.borrowing_limit, value)
        return value

    def nominal(self, fr: FlavorResource) -> int:
        quota = self.quotas.get(fr)
        return quota.nominal if quota is not None else 0

    def borrowing_with(self, fr: FlavorResource, value: int) -> bool:
        """Whether adding `value` would take the node above its own subtree quota."""
        return self.usage.get(fr, 0) + value > self.subtree_quota.get(fr, 0)

    def within_nominal(self, frs: Iterable[FlavorResource]) -> bool:
        return all(self.usage.get(fr, 0) <= self.subtree_quota.get(fr, 0) for fr in frs)

    def add_usage(self, fr: FlavorResource, value: int) -> None:
        local_available = self.local_available(fr)
        old = self.usage.get(fr, 0)
        self.usage[fr] = old + value
        if self.borrowed is not None:
            self._track_borrowed(fr, old)
        if self.parent is not None and value > local_available:
            self.parent.add_usage(fr, value - local_available)

    def remove_usage(self, fr: FlavorResource, value: int) -> None:
        old = self.usage.get(fr, 0)
        stored_in_parent = old - self.local_quota(fr)
        self.usage[fr] = old - value
        if self.borrowed is not None:
            self._track_borrowed(fr, old)
        if stored_in_parent <= 0 or self.parent is None:
            return
        self.parent.remove_usage(fr, min(value, stored_in_parent))

    def _track_borrowed(self, fr: FlavorResource, old: int) -> None:
        """Moves `borrowed` by what the change of usage[fr] from `old` did above subtree quota.
        Only flavor-resources of the subtree quota count, as in Kueue's dominantResourceShare."""
        quota = self.subtree_quota.get(fr)
        if quota is None or self.borrowed is None:
            return
        new = self.usage[fr]
        if new <= quota and old <= quota:
            return  # the usual case: below quota before and after
        delta = (new - quota if new > quota else 0) - (old - quota if old > quota else 0)
        if delta:
            self.borrowed[fr[1]] = self.borrowed.get(fr[1], 0) + delta

    def borrowed_from_scratch(self) -> dict[str, int]:
        """Per resource, usage above subtree quota summed over flavors (what `borrowed` tracks)."""
        borrowed: dict[str, int] = {}
        for fr, quota in self.subtree_quota.items():
            above = self.usage.get(fr, 0) - quota
            if above > 0:
                borrowed[fr[1]] = borrowed.get(fr[1], 0) + above
        return borrowed

    def borrowed_by_resource(self) -> dict[str, int]:
        """`borrowed`, starting to track it on first use."""
        if self.borrowed is None:
            self.borrowed = self.borrowed_from_scratch()
        return self.borrowed

    def add(self, usage: Mapping[FlavorResource, int]) -> None:
        for fr, value in usage.items():
            self.add_usage(fr, value)

    def remove(self, usage: Mapping[FlavorResource, int]) -> None:
        for fr, value in usage.items():
            self.remove_usage(fr, value)


def borrowing_level(node: QuotaNode, fr: FlavorResource, value: int) -> tuple[int, bool]:
    """How far up the tree `value` more of `fr` must come from (Kueue's
    FindHeightOfLowestSubtreeThatFits): 0 within the node's own quota, else the height of the
    lowest ancestor whose subtree holds it (the root's if none does). The second value says whether
    that subtree is smaller than the whole tree, so reclaiming inside it is possible."""
    if node.parent is None or not node.borrowing_with(fr, value):
        return 0, node.parent is not None
    remaining = value - node.local_available(fr)
    for ancestor in node.path_to_root():
        if not ancestor.borrowing_with(fr, remaining):
            return ancestor.height(), ancestor.parent is not None
        remaining -= ancestor.local_available(fr)
    return node.root().height(), False


def quantities_fit_in_quota(
    node: QuotaNode, requests: Mapping[FlavorResource, int]
) -> tuple[bool, dict[FlavorResource, int]]:
    """Whether `requests` fit in the node's own subtree quota, and what is left over for its parent."""
    fits = True
    remaining: dict[FlavorResource, int] = {}
    for fr, value in requests.items():
        if node.usage.get(fr, 0) + value > node.subtree_quota.get(fr, 0):
            fits = False
        remaining[fr] = max(0, value - node.local_available(fr))
    return fits, remaining


def compute_subtree(node: QuotaNode) -> None:
    """Recomputes SubtreeQuota bottom-up (usage is added afterwards through add_usage)."""
    node.subtree_quota = {fr: quota.nominal for fr, quota in node.quotas.items()}
    for child in [*node.child_cohorts, *node.child_cluster_queues]:
        if not child.is_cluster_queue:
            compute_subtree(child)
        else:
            child.subtree_quota = {fr: quota.nominal for fr, quota in child.quotas.items()}
        for fr, value in child.subtree_quota.items():
            node.subtree_quota[fr] = node.subtree_quota.get(fr, 0) + value - child.local_quota(fr)
