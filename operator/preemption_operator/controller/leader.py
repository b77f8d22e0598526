"""Leader election with a coordination.k8s.io Lease, fenced by a local deadline.

Every replica keeps its cache warm; only the holder of the lease decides and writes. The rules
that keep two replicas from ever writing at once (client-go's, measured the same way):

- The leader may write until `renew deadline` after the start of its last successful renewal,
  on its own monotonic clock; the writer checks that deadline just before every request. The
  renew deadline (2/3 of the lease) is shorter than the lease, so a leader that stalls (a frozen
  process, a starved event loop) stops writing before anyone else may start.
- A standby takes the lease only after it has seen the same lease record, unchanged, for a whole
  lease duration on its own monotonic clock. Another node's `renewTime` is never compared with the
  local wall clock: clocks differ, and the time a record was observed is what is known.
- Renewals run on a thread of their own with their own HTTP client, so no amount of work on the
  event loop (a large cycle, a rebuild after a priority-class change) can delay them.

What is left, as for every Lease-based controller: a request sent just before the deadline may be
delayed in the network or the API server past the lease; the margin between the renew deadline
and the lease duration (a third of it) is what covers that.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ..api.meta import format_time
from ..k8s.lease import LeaseClient

log = logging.getLogger(__name__)


def default_identity() -> str:
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _micro_time(moment: datetime) -> str:
    return format_time(moment, 6)


class LeaderElector:
    """`leading()` is safe to call from any thread; `start()` runs the election on a thread."""

    def __init__(
        self,
        client: LeaseClient,
        identity: str | None = None,
        lease_seconds: float = 8.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.client = client
        self.identity = identity or default_identity()
        self.lease_seconds = float(lease_seconds)
        self.renew_deadline = self.lease_seconds * 2 / 3
        self.retry_seconds = max(0.2, self.lease_seconds / 8)
        self.clock = clock
        self.on_change = on_change
        self._deadline = float("-inf")
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._was_leading = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.transitions = 0

    # -- what the rest of the operator asks

    def leading(self) -> bool:
        return self.clock() < self._deadline

    @property
    def deadline(self) -> float:
        return self._deadline

    # -- the election

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stops renewing and gives the lease up (if still held) so a standby takes over at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.release()
        self.client.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception as exc:  # the API being unreachable must not end the election
                log.warning("lease %s/%s: %s", self.client.namespace, self.client.name, exc)
            self._notify()
            self._stop.wait(self.retry_seconds)

    def _notify(self) -> None:
        leading = self.leading()
        if leading != self._was_leading:
            self._was_leading = leading
            if leading:
                self.transitions += 1
                log.info("became the leader (%s)", self.identity)
            else:
                log.warning("lost the lease (%s); standing by", self.identity)
            if self.on_change is not None:
                self.on_change(leading)

    def step(self) -> None:
        """One attempt to acquire or renew."""
        started = self.clock()
        now = _micro_time(datetime.now(UTC))
        lease = self.client.get()
        if lease is None:
            spec = self._spec(now, None)
            if self.client.create(spec):
                self._deadline = started + self.renew_deadline
            return
        spec = dict(lease.get("spec") or {})
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("leaseTransitions"), lease["metadata"].get("resourceVersion"))
        if record != self._observed:
            self._observed, self._observed_at = record, self.clock()
        if holder and holder != self.identity:
            self._deadline = float("-inf")  # someone else holds it: stop writing at once
            duration = float(spec.get("leaseDurationSeconds") or self.lease_seconds)
            if self.clock() < self._observed_at + duration:
                return
        lease["spec"] = self._spec(now, spec)
        if self.client.replace(lease):
            self._deadline = started + self.renew_deadline

    def _spec(self, now: str, previous: dict[str, Any] | None) -> dict[str, Any]:
        spec = dict(previous or {})
        if spec.get("holderIdentity") != self.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if previous else 0)
        spec["holderIdentity"] = self.identity
        spec["leaseDurationSeconds"] = max(1, round(self.lease_seconds))
        spec["renewTime"] = now
        return spec

    def release(self) -> None:
        if not self.leading():
            self._deadline = float("-inf")
            return
        self._deadline = float("-inf")
        try:
            lease = self.client.get()
            spec = (lease or {}).get("spec") or {}
            if lease is not None and spec.get("holderIdentity") == self.identity:
                spec["holderIdentity"] = None
                spec["renewTime"] = None
                lease["spec"] = spec
                if self.client.replace(lease):
                    log.info("released the lease")
        except Exception as exc:
            log.warning("could not release the lease: %s", exc)
