"""The client-side rate limit (--kube-api-qps / --kube-api-burst): a burst goes at once, then one
request per 1/qps seconds, waiters in the order they came; every request and watch waits its turn."""

from __future__ import annotations

import asyncio

import pytest

from preemption_operator.k8s.api import KubeApi
from preemption_operator.k8s.rate_limit import RateLimiter
from unit.test_api_transport import config_for


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def test_a_burst_goes_at_once_then_one_request_per_interval() -> None:
    clock = Clock()
    limiter = RateLimiter(10, 3, clock=clock, sleep=clock.sleep)
    assert [limiter.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    # The bucket is empty: each next request reserves a token further in the future.
    assert [round(limiter.reserve(), 3) for _ in range(3)] == [0.1, 0.2, 0.3]


def test_tokens_come_back_at_the_rate_up_to_the_burst() -> None:
    clock = Clock()
    limiter = RateLimiter(10, 2, clock=clock, sleep=clock.sleep)
    limiter.reserve(), limiter.reserve()
    clock.now += 0.1  # one token back
    assert limiter.reserve() == 0.0
    assert round(limiter.reserve(), 3) == 0.1
    clock.now += 60  # a long pause refills the burst, no more
    assert [limiter.reserve() for _ in range(2)] == [0.0, 0.0]
    assert limiter.reserve() > 0


async def test_wait_sleeps_for_its_reservation_and_says_how_long() -> None:
    clock = Clock()
    limiter = RateLimiter(4, 1, clock=clock, sleep=clock.sleep)
    assert await limiter.wait() == 0.0
    assert await limiter.wait() == 0.25
    assert clock.slept == [0.25]


def test_a_limit_needs_a_rate_and_a_burst() -> None:
    with pytest.raises(ValueError, match="qps > 0 and burst >= 1"):
        RateLimiter(0, 1)
    with pytest.raises(ValueError, match="qps > 0 and burst >= 1"):
        RateLimiter(5, 0)


async def test_every_request_waits_its_turn_and_reports_the_wait() -> None:
    sent: list[str] = []

    class Transport:
        async def send(self, method: str, path: str, *rest: object) -> tuple[int, str, str | None, bytes]:
            sent.append(path)
            return 200, "OK", None, b"{}"

        async def close(self) -> None: ...

    clock = Clock()
    waited: list[float] = []
    api = KubeApi(
        config_for("http://127.0.0.1:1", {}),
        transport=Transport(),  # type: ignore[arg-type]
        limiter=RateLimiter(2, 1, clock=clock, sleep=clock.sleep),
        throttled=waited.append,
    )
    await asyncio.gather(api.get("/a"), api.get("/b"), api.get("/c"))
    assert sent == ["/a", "/b", "/c"]
    assert waited == [0.5, 1.0]  # the first had the burst; the others waited 1/qps apart
