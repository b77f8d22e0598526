"""The objects the engine reads, read once from a live cluster (the kubeconfig's), as manifests:
`simulate --from-cluster`, `explain --from-cluster` and the kubectl plugin decide on exactly what
the API server holds, as the operator would."""

from __future__ import annotations

import asyncio

from ..api.kinds import WATCHED
from ..k8s.api import ApiError, KubeApi, load_config
from .manifests import Manifest, ManifestError


def read() -> list[Manifest]:
    """Every object of the kinds the operator watches (a kind the cluster does not serve counts
    as empty). Jobs are not read: their Workloads are. Raises ManifestError when the cluster
    cannot be read, naming why."""
    try:
        config = load_config()
    except Exception as exc:  # lightkube's ConfigError and friends: say it, no traceback
        raise ManifestError(f"--from-cluster: no usable kubeconfig: {exc}") from None
    return asyncio.run(_read(KubeApi(config)))


async def _read(api: KubeApi) -> list[Manifest]:
    try:
        return await manifests_of(api)
    finally:
        await api.close()


async def manifests_of(api: KubeApi) -> list[Manifest]:
    """Every object of the kinds the operator watches, through `api` (left open)."""
    out: list[Manifest] = []
    for kind in WATCHED:
        try:
            items, _ = await api.list(kind.path())
        except ApiError as exc:
            if exc.code == 404:
                continue  # its CRD is not installed
            raise ManifestError(f"--from-cluster: listing {kind.plural}: {exc}") from None
        for item in items:
            item.setdefault("apiVersion", kind.api_version)
            item.setdefault("kind", kind.name)
            (item.get("metadata") or {}).pop("managedFields", None)
            out.append(Manifest(f"cluster:{kind.plural}", item))
    return out
