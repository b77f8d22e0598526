"""Lease election fenced by a local deadline, on a fake clock and an in-memory Lease."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from preemption_operator.controller.leader import LeaderElector


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Leases:
    """One Lease with resourceVersion checks, shared by the replicas under test."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.down = False
        self.namespace, self.name = "default", "op"

    def get(self) -> dict[str, Any] | None:
        if self.down:
            raise RuntimeError("connection refused")
        return copy.deepcopy(self.lease)

    def create(self, spec: dict[str, Any]) -> bool:
        if self.down:
            raise RuntimeError("connection refused")
        if self.lease is not None:
            return False
        self.version += 1
        self.lease = {"metadata": {"name": self.name, "resourceVersion": str(self.version)}, "spec": spec}
        return True

    def replace(self, lease: dict[str, Any]) -> bool:
        if self.down:
            raise RuntimeError("connection refused")
        assert self.lease is not None
        if lease["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
            return False
        self.version += 1
        self.lease = copy.deepcopy(lease)
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        return True

    def close(self) -> None:
        pass

    @property
    def holder(self) -> str | None:
        return (self.lease or {}).get("spec", {}).get("holderIdentity")


def replica(leases: Leases, clock: Clock, name: str) -> LeaderElector:
    return LeaderElector(leases, name, lease_seconds=9, clock=clock)  # type: ignore[arg-type]


def test_the_first_replica_leads_and_its_deadline_is_two_thirds_of_the_lease() -> None:
    leases, clock = Leases(), Clock()
    a = replica(leases, clock, "a")
    a.step()
    assert a.leading() and leases.holder == "a"
    clock.now += 5.9
    assert a.leading()
    clock.now += 0.2  # 6.1 s after the renewal started: past 2/3 of 9 s
    assert not a.leading()


def test_a_frozen_leader_stops_writing_before_a_standby_may_start() -> None:
    """The stalled-leader fault: the leader renews, then its process freezes. The standby must
    wait a whole lease after it last saw the record change; the leader's own deadline ends first."""
    leases, clock = Leases(), Clock()
    a, b = replica(leases, clock, "a"), replica(leases, clock, "b")
    a.step()
    b.step()
    assert not b.leading()
    renewed_at = clock.now
    for _ in range(8):  # the standby keeps looking while the leader is frozen
        clock.now += 1
        b.step()
        assert not b.leading()
        if clock.now - renewed_at >= 6:
            assert not a.leading()  # the frozen leader's deadline is already over
    clock.now += 1.5
    b.step()
    assert b.leading() and leases.holder == "b"
    assert not a.leading()
    a.step()  # resumed: it sees another holder and stays a standby
    assert not a.leading()


def test_another_nodes_renew_time_is_never_compared_with_the_local_clock() -> None:
    """A renewTime far in the past (a skewed clock) does not let a standby take a live lease."""
    leases, clock = Leases(), Clock()
    a, b = replica(leases, clock, "a"), replica(leases, clock, "b")
    a.step()
    assert leases.lease is not None
    leases.lease["spec"]["renewTime"] = "2001-01-01T00:00:00.000000Z"  # "expired" by wall clock
    for _ in range(20):
        clock.now += 1
        a.step()  # the leader keeps renewing
        b.step()
        assert not b.leading()
        assert a.leading()


def test_a_leader_that_cannot_renew_loses_leadership_at_its_deadline() -> None:
    leases, clock = Leases(), Clock()
    a = replica(leases, clock, "a")
    a.step()
    leases.down = True
    clock.now += 3
    with pytest.raises(RuntimeError):
        a.step()
    assert a.leading()
    clock.now += 3.1
    assert not a.leading()
    leases.down = False
    a.step()  # nobody took it meanwhile: renewing again is safe
    assert a.leading()


def test_release_lets_a_standby_take_over_at_once() -> None:
    leases, clock = Leases(), Clock()
    a, b = replica(leases, clock, "a"), replica(leases, clock, "b")
    a.step()
    b.step()
    a.stop(timeout=0)
    assert leases.holder is None and not a.leading()
    clock.now += 0.1
    b.step()
    assert b.leading()


def test_a_replica_that_lost_the_lease_cannot_release_the_new_holders() -> None:
    leases, clock = Leases(), Clock()
    a, b = replica(leases, clock, "a"), replica(leases, clock, "b")
    a.step()
    b.step()
    clock.now += 10
    b.step()
    assert b.leading()
    a.release()
    assert leases.holder == "b"
