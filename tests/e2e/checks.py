"""A stand-in for an AdmissionCheck's controller (ProvisioningRequest's, MultiKueue's, a third
party's): it says whether its check is Active and answers the check's state on Workloads, through
the API as any such controller does (status writes with a resourceVersion precondition)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from .scenario import Scenario

CONTROLLER = "example.com/test-gate"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class CheckController:
    def __init__(self, sc: Scenario, suffix: str = "gate") -> None:
        self.sc = sc
        self.name = sc.name(suffix)

    def create(self, *, active: bool) -> None:
        self.sc.apply(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "AdmissionCheck",
                "metadata": {"name": self.name},
                "spec": {"controllerName": CONTROLLER},
            }
        )
        self.set_active(active)

    def set_active(self, active: bool) -> None:
        condition = {
            "type": "Active",
            "status": "True" if active else "False",
            "reason": "Ready" if active else "Starting",
            "message": "the test controller is ready" if active else "the test controller is starting",
            "lastTransitionTime": _now(),
        }
        body = json.dumps({"status": {"conditions": [condition]}})
        self.sc.kubectl(
            "patch", "admissioncheck", self.name, "--subresource=status", "--type=merge", "-p", body
        )  # fmt: skip

    def answer(self, workload: str, state: str, message: str = "", **extra: Any) -> None:
        """Sets this check's state on a Workload (podSetUpdates, requeueAfterSeconds in `extra`),
        keeping the other checks' entries; retried on a conflict with another writer."""
        for _ in range(20):
            wl = self.sc.workload(workload)
            checks = list((wl.get("status") or {}).get("admissionChecks") or [])
            mine = [c for c in checks if c.get("name") == self.name]
            assert mine, f"{workload} does not list {self.name}: {checks}"
            entry = {"name": self.name, "state": state, "message": message, "lastTransitionTime": _now(), **extra}
            if mine[0].get("retryCount") is not None:
                entry["retryCount"] = mine[0]["retryCount"]
            checks = [entry if c.get("name") == self.name else c for c in checks]
            patch = {
                "metadata": {"resourceVersion": wl["metadata"]["resourceVersion"]},
                "status": {"admissionChecks": checks},
            }
            proc = self.sc.kubectl(
                "patch", "workload", workload, "-n", self.sc.namespace, "--subresource=status", "--type=merge",
                "-p", json.dumps(patch), check=False,
            )  # fmt: skip
            if proc.returncode == 0:
                return
            assert "Conflict" in proc.stderr or "modified" in proc.stderr, proc.stderr
            time.sleep(0.2)
        raise AssertionError(f"could not set {self.name} on {workload}: conflicts")
