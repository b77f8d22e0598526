"""`stop` and `resume`, as kueuectl does them: a ClusterQueue or LocalQueue gets Kueue's
`spec.stopPolicy` (HoldAndDrain: its admitted workloads are evicted too; Hold with
--keep-already-running: they keep running; None to resume), a Workload `spec.active`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..api import kinds
from ..api.kinds import Kind

TARGETS: dict[str, Kind] = {
    "clusterqueue": kinds.ClusterQueue,
    "localqueue": kinds.LocalQueue,
    "workload": kinds.Workload,
}


@dataclass(frozen=True)
class Change:
    kind: Kind
    name: str
    namespace: str | None
    patch: dict[str, Any]
    done: str
    """What kubectl prints after the name: "stopped" or "resumed"."""

    @property
    def path(self) -> str:
        return self.kind.path(self.name, self.namespace)

    def describe(self, dry_run: str = "none") -> str:
        """kubectl's name printer: `clusterqueue.kueue.x-k8s.io/NAME stopped`."""
        suffix = {"client": " (dry run)", "server": " (server dry run)"}.get(dry_run, "")
        return f"{self.kind.name.lower()}.{self.kind.group}/{self.name} {self.done}{suffix}"


def stop(target: str, name: str, namespace: str | None, keep_running: bool = False) -> Change:
    kind = TARGETS[target]
    if kind is kinds.Workload:
        patch: dict[str, Any] = {"spec": {"active": False}}
    else:
        patch = {"spec": {"stopPolicy": "Hold" if keep_running else "HoldAndDrain"}}
    return Change(kind, name, namespace if kind.namespaced else None, patch, "stopped")


def resume(target: str, name: str, namespace: str | None) -> Change:
    kind = TARGETS[target]
    patch: dict[str, Any] = {"spec": {"active": True}} if kind is kinds.Workload else {"spec": {"stopPolicy": "None"}}
    return Change(kind, name, namespace if kind.namespaced else None, patch, "resumed")
