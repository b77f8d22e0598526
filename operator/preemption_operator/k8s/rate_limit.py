"""A client-side limit on requests to the API server, as client-go's (`--kube-api-qps`,
`--kube-api-burst`; Kueue's Configuration calls them clientConnection.qps and .burst).

A token bucket with reservations, like golang.org/x/time/rate behind client-go's limiter: `burst`
requests may go at once, then one every 1/qps seconds. A request that finds no token reserves the
next one and waits for it, so waiters go in the order they came and never more than the rate.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class RateLimiter:
    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"a rate limit needs qps > 0 and burst >= 1 (got qps {qps}, burst {burst})")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._stamp = clock()

    def reserve(self) -> float:
        """Takes a token (possibly one not there yet): how long to wait before sending."""
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now
        self._tokens -= 1.0
        return 0.0 if self._tokens > -1e-9 else -self._tokens / self.qps  # (clock arithmetic rounds)

    async def wait(self) -> float:
        """Waits for this request's turn; returns the seconds waited."""
        delay = self.reserve()
        if delay > 0:
            await self._sleep(delay)
        return delay
