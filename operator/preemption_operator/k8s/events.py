"""core/v1 Events with client-go's recorder semantics (k8s.io/client-go/tools/record).

Every recorded event goes through three steps before it is queued, in client-go's order:

1. Aggregation. Events that differ only in their message (same source, object, type and reason)
   are grouped. When a group has seen 10 distinct messages, each one 10 minutes or less after the
   previous event of the group, further events of the group are folded into one Event whose message
   is "(combined from similar events): " followed by the newest message.
2. Deduplication. An event identical to one already posted (same object, type, reason and message;
   or the same combined Event) is not created again: the existing Event's `count`,
   `lastTimestamp` and `message` are patched. When that Event is gone (404: it expired or was
   deleted) it is created anew, under the same name and with the running count.
3. Spam filter. Each source+object pair has a token bucket of 25 events refilled by one every
   5 minutes; an event without a token is not posted (its occurrence is still counted, so the
   next one that passes carries the full count).

Each step keeps its state in an LRU cache of 4096 entries. Unlike client-go, failed requests are
not retried (Events are best effort, and a retrying worker would hold back newer ones), and
updates to an Event still waiting in the queue are merged into the waiting request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar

import httpx2 as httpx

from ..api import kinds
from ..api.meta import format_time
from .api import ApiError

log = logging.getLogger(__name__)

EVENT = kinds.Event

MAX_LRU_ENTRIES = 4096
AGGREGATE_AFTER = 10  # distinct messages in one group before they are combined
AGGREGATE_WINDOW = 600.0  # seconds of quiet after which a group starts over
SPAM_BURST = 25
SPAM_REFILL_SECONDS = 300.0  # one token per 5 minutes
COMBINED_PREFIX = "(combined from similar events): "
MAX_MESSAGE = 1024
MAX_NAME = 253  # a DNS subdomain
WARN_EVERY = 60.0  # seconds between two warnings about failed posts
EVENT_TYPES = ("Normal", "Warning")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class EventSink(Protocol):
    """What the controller records Events through (the EventRecorder, or a test's list)."""

    def record(self, obj: dict[str, Any], kind: str, api_version: str, type_: str, reason: str, message: str) -> None:
        """Never blocks, never raises."""


class EventApi(Protocol):
    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]: ...

    async def patch_merge(self, path: str, patch: dict[str, Any]) -> dict[str, Any]: ...


class Lru(Generic[K, V]):
    """A dict that forgets its least recently used entry beyond `size` entries."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def values(self) -> list[V]:
        return list(self._items.values())

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)


@dataclass
class _Group:
    """Messages (their hashes: only their identity matters) seen in one aggregation group."""

    messages: set[int]
    last_seen: float


@dataclass
class _Seen:
    """The Event last posted for one correlation key."""

    name: str
    count: int
    first: str


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class _Post:
    """One request to make: create `body`, or (create=False) patch it with `patch`."""

    namespace: str
    name: str
    body: dict[str, Any]
    patch: dict[str, Any]
    create: bool
    reason: str = ""


def _clip(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 4] + " ..."


def _timestamp(moment: datetime) -> str:
    return format_time(moment)


class EventRecorder:
    """Correlates events as client-go does and posts them from a bounded queue.

    `record` never blocks and never raises; `run` is the posting task; `drain` flushes at shutdown.
    """

    def __init__(
        self,
        api: EventApi,
        component: str,
        *,
        fence: Callable[[], bool] = lambda: True,
        queue_size: int = 1000,
        parallelism: int = 2,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        instance: str = "",
        closing: Callable[[str], bool] = lambda namespace: False,
    ) -> None:
        self.api = api
        self.closing = closing
        """Whether a namespace is being deleted: the API server refuses new Events there (403)."""
        self.component = component
        self.instance = instance
        self.fence = fence
        self.queue_size = queue_size
        self.parallelism = max(1, parallelism)
        self.clock = clock
        self.wall_clock = wall_clock
        self.groups: Lru[tuple[str, ...], _Group] = Lru(MAX_LRU_ENTRIES)
        self.seen: Lru[tuple[str, ...], _Seen] = Lru(MAX_LRU_ENTRIES)
        self.buckets: Lru[tuple[str, ...], _Bucket] = Lru(MAX_LRU_ENTRIES)
        # Requests not started yet, oldest first, at most one per Event; and the Events that have
        # a request in flight (requests about one Event must not overtake each other).
        self._waiting: OrderedDict[tuple[str, str], _Post] = OrderedDict()
        self._inflight: set[tuple[str, str]] = set()
        self._wakeup = asyncio.Event()  # a request was queued or unblocked
        self._finished = asyncio.Event()  # a request ended
        self._last_name_ns = 0
        self._warned_at: float | None = None
        self._unlogged = 0
        self.dropped = 0  # the queue was full
        self.posted = 0  # Events created (a 404 on patch included)
        self.patched = 0  # Events updated in place
        self.filtered = 0  # held back by the spam filter
        self.fenced = 0  # dropped because this replica no longer leads
        self.failed = 0  # requests that failed
        self.closed = 0  # about an object whose namespace is being deleted

    # -- recording ---------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """What became of the Events recorded so far, by outcome (the `_events_total` metric)."""
        return {
            "posted": self.posted,
            "patched": self.patched,
            "dropped": self.dropped,
            "filtered": self.filtered,
            "fenced": self.fenced,
            "failed": self.failed,
            "namespace_closing": self.closed,
        }

    def record(
        self, obj: Mapping[str, Any], kind: str, api_version: str, type_: str, reason: str, message: str
    ) -> None:
        """Correlates the event and queues what it takes to post it. Never blocks, never raises."""
        try:
            self._record(obj, kind, api_version, type_, reason, message)
        except Exception:
            self.failed += 1
            log.exception("could not record event %s", reason)

    def _record(
        self, obj: Mapping[str, Any], kind: str, api_version: str, type_: str, reason: str, message: str
    ) -> None:
        if type_ not in EVENT_TYPES:
            log.warning("event %s not recorded: type %r is neither Normal nor Warning", reason, type_)
            return
        meta = obj.get("metadata") or {}
        obj_name = str(meta.get("name") or "")
        obj_namespace = str(meta.get("namespace") or "")
        if obj_namespace and self.closing(obj_namespace):
            self.closed += 1
            return
        uid = str(meta.get("uid") or "")
        message = _clip(message)
        now = self.clock()
        wall = self.wall_clock()

        involved: dict[str, Any] = {"apiVersion": api_version, "kind": kind}
        for attr, value in (
            ("name", obj_name),
            ("namespace", obj_namespace),
            ("uid", uid),
            ("resourceVersion", meta.get("resourceVersion")),
        ):
            if value:
                involved[attr] = str(value)
        source = (self.component, "", kind, obj_namespace, obj_name, uid, api_version)

        # 1. aggregation: the group is everything but the message
        group_key = (*source, type_, reason, self.component, self.instance)
        group = self.groups.get(group_key)
        if group is None or now - group.last_seen > AGGREGATE_WINDOW:
            group = _Group(set(), now)
        group.messages.add(hash(message))
        group.last_seen = now
        self.groups.put(group_key, group)
        if len(group.messages) < AGGREGATE_AFTER:
            key: tuple[str, ...] = ("event", *source, "", type_, reason, message)
        else:
            # Keep the set at its threshold: the next new message is combined as well.
            group.messages.pop()
            key = ("group", *group_key)
            message = _clip(COMBINED_PREFIX + message)

        # 2. deduplication: an Event already posted under this key is counted up
        stamp = _timestamp(wall)
        seen = self.seen.get(key)
        if seen is None:
            seen = _Seen(self._new_name(obj_name, wall), 1, stamp)
        else:
            seen = _Seen(seen.name, seen.count + 1, seen.first)
        self.seen.put(key, seen)

        # 3. spam filter, after counting (as client-go): a held-back event still adds to `count`
        if not self._take_token(source, now):
            self.filtered += 1
            return

        namespace = obj_namespace or "default"
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": seen.name, "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "firstTimestamp": seen.first,
            "lastTimestamp": stamp,
            "count": seen.count,
        }
        if self.instance:
            body["reportingInstance"] = self.instance
        patch = {"count": seen.count, "lastTimestamp": stamp, "message": message}
        self._enqueue(_Post(namespace, seen.name, body, patch, create=seen.count == 1, reason=reason))

    def _new_name(self, obj_name: str, wall: datetime) -> str:
        """`<object>.<16 hex digits of the time in ns>`; strictly increasing, so two events in the
        same microsecond (Python's clock resolution) do not collide."""
        if wall.tzinfo is None:
            wall = wall.replace(tzinfo=UTC)
        ns = (wall - _EPOCH) // timedelta(microseconds=1) * 1000
        ns = max(ns, self._last_name_ns + 1)
        self._last_name_ns = ns
        prefix = (obj_name or "object")[: MAX_NAME - 17].rstrip(".-")
        return f"{prefix}.{ns:016x}"

    def _take_token(self, source: tuple[str, ...], now: float) -> bool:
        bucket = self.buckets.get(source)
        if bucket is None:
            bucket = _Bucket(float(SPAM_BURST), now)
        else:
            refill = max(0.0, now - bucket.at) / SPAM_REFILL_SECONDS
            bucket = _Bucket(min(float(SPAM_BURST), bucket.tokens + refill), now)
        allowed = bucket.tokens >= 1.0
        if allowed:
            bucket.tokens -= 1.0
        self.buckets.put(source, bucket)
        return allowed

    def _enqueue(self, post: _Post) -> None:
        key = (post.namespace, post.name)
        waiting = self._waiting.get(key)
        if waiting is not None:
            # The newer request carries the newer state; it must still create what was never created.
            post.create = post.create or waiting.create
            self._waiting[key] = post
            return
        if len(self._waiting) >= self.queue_size:
            self.dropped += 1
            log.debug("event queue full; dropped %s about %s", post.reason, post.name)
            return
        self._waiting[key] = post
        self._wakeup.set()

    # -- posting -----------------------------------------------------------------------------

    @property
    def queued(self) -> int:
        return len(self._waiting)

    def _take(self) -> _Post | None:
        for key, post in self._waiting.items():
            if key not in self._inflight:
                del self._waiting[key]
                self._inflight.add(key)
                return post
        return None

    async def run(self) -> None:
        """Posts queued events until cancelled."""
        async with asyncio.TaskGroup() as group:
            for _ in range(self.parallelism):
                group.create_task(self._worker())

    async def _worker(self) -> None:
        while True:
            post = self._take()
            if post is None:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            await self._send(post)

    async def drain(self, timeout: float) -> None:
        """Posts what is queued (alongside `run`, if it still runs), for at most `timeout` seconds."""

        async def flush() -> None:
            while (post := self._take()) is not None:
                await self._send(post)

        try:
            async with asyncio.timeout(timeout):
                while self._waiting or self._inflight:
                    self._finished.clear()
                    async with asyncio.TaskGroup() as group:
                        for _ in range(self.parallelism):
                            group.create_task(flush())
                    if self._inflight:
                        # Someone else's request is in flight (and may hold back a queued one).
                        await self._finished.wait()
        except TimeoutError:
            log.warning("%d events not posted before shutdown", len(self._waiting) + len(self._inflight))

    async def _send(self, post: _Post) -> None:
        key = (post.namespace, post.name)
        try:
            if not post.create:
                if not self.fence():
                    self.fenced += 1
                    return
                try:
                    await self.api.patch_merge(EVENT.path(post.name, post.namespace), post.patch)
                    self.patched += 1
                    return
                except ApiError as exc:
                    if exc.code != 404:
                        raise
                # Gone (expired or deleted): create it again under the same name.
            if not self.fence():
                self.fenced += 1
                return
            await self.api.create(EVENT.path(namespace=post.namespace), post.body)
            self.posted += 1
        except (ApiError, httpx.TransportError) as exc:
            self.failed += 1
            if isinstance(exc, ApiError) and (
                exc.code == 409 or (exc.code == 403 and "being terminated" in exc.message)
            ):
                # Already there, or its namespace is going away: nothing to tell anyone.
                log.debug("event %s on %s not posted: %s", post.reason, post.name, exc)
            else:
                self._warn(post, exc)
        except Exception as exc:  # a bug must not stop the posting task
            self.failed += 1
            self._warn(post, exc, exc_info=True)
        finally:
            self._inflight.discard(key)
            self._finished.set()
            if self._waiting:
                self._wakeup.set()

    def _warn(self, post: _Post, exc: BaseException, exc_info: bool = False) -> None:
        """One warning a minute at most; the failures in between are counted in the next one."""
        now = self.clock()
        if self._warned_at is not None and now - self._warned_at < WARN_EVERY:
            self._unlogged += 1
            log.debug("could not post event %s on %s: %s", post.reason, post.name, exc)
            return
        more = f" ({self._unlogged} more failures since the last warning)" if self._unlogged else ""
        log.warning("could not post event %s on %s: %s%s", post.reason, post.name, exc, more, exc_info=exc_info)
        self._warned_at = now
        self._unlogged = 0
