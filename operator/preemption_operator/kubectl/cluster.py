"""What `list`, `stop` and `resume` read from and write to the live cluster (the kubeconfig's):
the objects, the pending positions from the visibility API (or, where it is not served, from
the engine's own queue order on the same objects), and the preemption risk (one engine cycle)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from ..api.kinds import Kind
from ..api.visibility import PREFIX
from ..engine import positions
from ..engine.cache import Cache
from ..k8s.api import ApiError, KubeApi
from ..offline import cluster_state, manifests, simulate
from .control import Change
from .listing import Risk
from .risk import risks


async def listed(
    api: KubeApi, kind: Kind, namespace: str | None = None, selector: str | None = None
) -> list[dict[str, Any]]:
    """The objects of a kind (in `namespace`, or all), with these labels if given; none when the
    cluster does not serve the kind."""
    try:
        items, _ = await api.list(kind.path(namespace=namespace), label_selector=selector)
    except ApiError as exc:
        if exc.code == 404:
            return []
        raise
    return items


async def served_positions(api: KubeApi, cluster_queues: Iterable[str]) -> dict[str, int]:
    """namespace/name -> position in its LocalQueue, from the visibility API (ApiError when it is
    not served, as kueuectl reads it)."""
    found: dict[str, int] = {}
    for cq in sorted(set(cluster_queues)):
        try:
            summary = await api.request(
                "GET", f"{PREFIX}/clusterqueues/{cq}/pendingworkloads", params={"limit": str(positions.MAX_LIMIT)}
            )
        except ApiError as exc:
            if exc.code == 404 and "clusterqueue" in str(exc):
                continue  # the queue is gone
            raise
        for item in summary.get("items") or []:
            meta = item.get("metadata") or {}
            found[f"{meta.get('namespace')}/{meta.get('name')}"] = int(item.get("positionInLocalQueue", 0))
    return found


async def engine_objects(api: KubeApi) -> list[Any]:
    """The whole state the engine reads, parsed (objects it cannot read are left out)."""
    skipped: list[str] = []
    return manifests.parse(await cluster_state.manifests_of(api), skipped, lenient=True)


def local_positions(objects: list[Any], cluster_queues: Iterable[str]) -> dict[str, int]:
    """The same positions, from the engine's queue order over `objects`."""
    cache = Cache()
    cache.load(objects)
    found: dict[str, int] = {}
    for cq in set(cluster_queues):
        for position in positions.in_cluster_queue(cache.pending_in(cq) or [], positions.MAX_LIMIT):
            found[position.info.key] = position.in_local_queue
    return found


def at_risk(objects: list[Any], now: datetime) -> dict[str, list[Risk]]:
    """One engine cycle on the live state, explained in full."""
    return risks(simulate.run(objects, now, max_cycles=1).to_dict())


async def apply(api: KubeApi, change: Change, dry_run: str) -> None:
    """The change as a merge patch (server dry run: validated, not stored)."""
    if dry_run == "client":
        await api.get(change.path)  # it must exist, as kubectl checks
        return
    params = {"dryRun": "All"} if dry_run == "server" else None
    await api.request(
        "PATCH", change.path, params=params, body=change.patch, content_type="application/merge-patch+json"
    )
