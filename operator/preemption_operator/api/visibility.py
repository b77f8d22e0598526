"""Kueue's visibility API (visibility.kueue.x-k8s.io/v1beta2) on the wire: its group, paths,
discovery document and the PendingWorkloadsSummary of a page of positions, exactly as Kueue's
server writes them. The operator serves it (controller/visibility.py); the kubectl plugin reads it."""

from __future__ import annotations

from typing import Any

from .meta import format_time
from .v1beta2 import Workload

GROUP = "visibility.kueue.x-k8s.io"
VERSION = "v1beta2"
GROUP_VERSION = f"{GROUP}/{VERSION}"
API_SERVICE = f"{VERSION}.{GROUP}"
"""The APIService's name."""
PREFIX = f"/apis/{GROUP}/{VERSION}"


def pending_workload(obj: Workload, in_cluster_queue: int, in_local_queue: int) -> dict[str, Any]:
    """A PendingWorkload: the Workload's name, namespace, creation time and owners, its priority,
    LocalQueue and positions."""
    meta: dict[str, Any] = {"name": obj.metadata.name, "namespace": obj.metadata.namespace}
    if obj.metadata.creation_timestamp is not None:
        meta["creationTimestamp"] = format_time(obj.metadata.creation_timestamp)
    refs = (obj.metadata.model_extra or {}).get("ownerReferences")
    owners = [
        {key: ref.get(key, "") for key in ("apiVersion", "kind", "name", "uid")}
        for ref in (refs if isinstance(refs, list) else [])
        if isinstance(ref, dict)
    ]
    if owners:
        meta["ownerReferences"] = owners
    return {
        "metadata": meta,
        "priority": obj.spec.priority or 0,
        "localQueueName": obj.spec.queue_name or "",
        "positionInClusterQueue": in_cluster_queue,
        "positionInLocalQueue": in_local_queue,
    }


def summary(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "kind": "PendingWorkloadsSummary",
        "apiVersion": GROUP_VERSION,
        "metadata": {},
        "items": items,
    }


DISCOVERY: dict[str, Any] = {
    "kind": "APIResourceList",
    "apiVersion": "v1",
    "groupVersion": GROUP_VERSION,
    "resources": [
        {
            "name": "clusterqueues",
            "singularName": "clusterqueue",
            "namespaced": False,
            "kind": "PendingWorkloadsSummary",
            "verbs": [],
        },
        {
            "name": "clusterqueues/pendingworkloads",
            "singularName": "",
            "namespaced": False,
            "kind": "PendingWorkloadsSummary",
            "verbs": ["get"],
        },
        {
            "name": "localqueues",
            "singularName": "localqueue",
            "namespaced": True,
            "kind": "PendingWorkloadsSummary",
            "verbs": [],
        },
        {
            "name": "localqueues/pendingworkloads",
            "singularName": "",
            "namespaced": True,
            "kind": "PendingWorkloadsSummary",
            "verbs": ["get"],
        },
    ],
}
GROUP_DISCOVERY: dict[str, Any] = {
    "kind": "APIGroup",
    "apiVersion": "v1",
    "name": GROUP,
    "versions": [{"groupVersion": GROUP_VERSION, "version": VERSION}],
    "preferredVersion": {"groupVersion": GROUP_VERSION, "version": VERSION},
}
