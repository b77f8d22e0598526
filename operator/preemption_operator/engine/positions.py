"""Where each pending workload stands (Kueue's visibility API): its place in its ClusterQueue's
order and in its LocalQueue's, paged with `limit` and `offset` as Kueue pages them. The order
comes from the cache (`Cache.pending_in`): the order the scheduler takes the heads in."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .workload import WorkloadInfo

DEFAULT_LIMIT = 1000
MAX_LIMIT = 100_000
"""Kueue's bounds: a request without `limit` gets 1000, none gets more than 100,000."""


@dataclass(frozen=True)
class Position:
    info: WorkloadInfo
    in_cluster_queue: int
    in_local_queue: int


def bounded(limit: int, offset: int) -> tuple[int, int]:
    """A negative limit or offset counts as 0, a limit above the maximum as the maximum."""
    return min(max(limit, 0), MAX_LIMIT), max(offset, 0)


def in_cluster_queue(ordered: Sequence[WorkloadInfo], limit: int = DEFAULT_LIMIT, offset: int = 0) -> list[Position]:
    """The page [offset, offset + limit) of a ClusterQueue's pending workloads; each one's place
    in its LocalQueue counts the workloads of that LocalQueue before it in the whole order."""
    limit, offset = bounded(limit, offset)
    seen: dict[tuple[str, str], int] = {}
    page: list[Position] = []
    for index, info in enumerate(ordered[: offset + limit]):
        queue = (info.namespace, info.queue_name)
        in_local = seen.get(queue, 0)
        seen[queue] = in_local + 1
        if index >= offset:
            page.append(Position(info, index, in_local))
    return page


def in_local_queue(
    ordered: Sequence[WorkloadInfo], namespace: str, name: str, limit: int = DEFAULT_LIMIT, offset: int = 0
) -> list[Position]:
    """The page [offset, offset + limit) of one LocalQueue's pending workloads, out of its
    ClusterQueue's order (`ordered`), with their places in both."""
    limit, offset = bounded(limit, offset)
    page: list[Position] = []
    skipped = 0
    for index, info in enumerate(ordered):
        if len(page) >= limit:
            break
        if info.namespace != namespace or info.queue_name != name:
            continue
        if skipped < offset:
            skipped += 1
        else:
            page.append(Position(info, index, offset + len(page)))
    return page
