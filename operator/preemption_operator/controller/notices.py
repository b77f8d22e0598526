"""Warnings about objects (an invalid object, a PreemptionConfig that is missing or does not
build, a flap lint found), posted as Warning Events once each while the problem lasts, again if
it comes back."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from ..api import kinds
from ..engine.cache import Cache
from ..engine.notices import Notice
from ..k8s.events import EventSink
from .feeder import CacheFeeder

log = logging.getLogger(__name__)


class NoticePoster:
    def __init__(
        self, events: EventSink, cache: Cache, feeder: CacheFeeder, *sources: Callable[[], Iterable[Notice]]
    ) -> None:
        """`sources`: further notices, asked at each post (the last cycle's, lint's)."""
        self.events = events
        self.cache = cache
        self.feeder = feeder
        self.sources = sources
        self.posted: set[Notice] = set()

    def reset(self) -> None:
        """A new term: everything current is posted again."""
        self.posted = set()

    def post(self) -> None:
        current = {
            *(n for notices in self.cache.notices.values() for n in notices),
            *self.cache.workload_notices(),
            *self.feeder.notices(),
            *(n for source in self.sources for n in source()),
        }
        for notice in sorted(current - self.posted, key=lambda n: (n.kind, n.name, n.reason, n.message)):
            obj = self.cache.objects.get(notice.kind, {}).get(notice.name)
            ref = self.feeder.reference(notice.kind, notice.name)
            if ref is not None:
                body = {"metadata": ref}
            elif obj is not None:
                body = obj.to_wire()
            else:
                namespace, _, name = notice.name.rpartition("/")
                body = {"metadata": {"name": name, **({"namespace": namespace} if namespace else {})}}
            api_version = kinds.BY_NAME[notice.kind].api_version
            self.events.record(body, notice.kind, api_version, "Warning", notice.reason, notice.message)
            log.warning("%s", notice.message)
        self.posted = current
