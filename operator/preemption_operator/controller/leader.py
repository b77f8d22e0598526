"""Leader election with a coordination.k8s.io Lease, so that two replicas run safely: every
replica keeps its cache warm, only the holder of the lease decides and writes."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from datetime import UTC, datetime, timedelta

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

log = logging.getLogger(__name__)


def default_identity() -> str:
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class LeaderElector:
    def __init__(
        self,
        client: AsyncClient,
        namespace: str,
        name: str = "preemption-operator",
        identity: str | None = None,
        lease_seconds: int = 8,
        renew_seconds: float = 2.0,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.leading = asyncio.Event()

    @property
    def is_leader(self) -> bool:
        return self.leading.is_set()

    async def run(self) -> None:
        try:
            while True:
                try:
                    acquired = await self._try_acquire_or_renew()
                except ApiError as exc:
                    log.warning("lease %s/%s: %s", self.namespace, self.name, exc.status.message)
                    acquired = False
                except Exception as exc:  # the API being unreachable must not kill the elector
                    log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
                    acquired = False
                if acquired and not self.is_leader:
                    log.info("became the leader (%s)", self.identity)
                    self.leading.set()
                elif not acquired and self.is_leader:
                    log.warning("lost the lease; standing by")
                    self.leading.clear()
                await asyncio.sleep(self.renew_seconds)
        finally:
            if self.is_leader:
                await self.release()

    async def _try_acquire_or_renew(self) -> bool:
        now = datetime.now(UTC)
        try:
            lease = await self.client.get(Lease, self.name, namespace=self.namespace)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
            lease = Lease(
                metadata=ObjectMeta(name=self.name, namespace=self.namespace),
                spec=LeaseSpec(
                    holderIdentity=self.identity,
                    leaseDurationSeconds=self.lease_seconds,
                    acquireTime=now,
                    renewTime=now,
                    leaseTransitions=0,
                ),
            )
            try:
                await self.client.create(lease)
            except ApiError as create_error:
                if create_error.status.code == 409:
                    return False
                raise
            return True
        spec = lease.spec or LeaseSpec()
        holder = spec.holderIdentity
        renewed = spec.renewTime
        duration = spec.leaseDurationSeconds or self.lease_seconds
        expired = renewed is None or renewed + timedelta(seconds=duration) < now
        if holder and holder != self.identity and not expired:
            return False
        if holder != self.identity:
            spec.acquireTime = now
            spec.leaseTransitions = (spec.leaseTransitions or 0) + 1
        spec.holderIdentity = self.identity
        spec.leaseDurationSeconds = self.lease_seconds
        spec.renewTime = now
        lease.spec = spec
        try:
            await self.client.replace(lease)  # carries resourceVersion: a racing replica gets 409
        except ApiError as exc:
            if exc.status.code == 409:
                return False
            raise
        return True

    async def release(self) -> None:
        """Gives the lease up on shutdown so a standby takes over at once."""
        self.leading.clear()
        try:
            lease = await self.client.get(Lease, self.name, namespace=self.namespace)
            if lease.spec is not None and lease.spec.holderIdentity == self.identity:
                lease.spec.holderIdentity = None
                lease.spec.renewTime = None
                await self.client.replace(lease)
                log.info("released the lease")
        except Exception as exc:
            log.warning("could not release the lease: %s", exc)
