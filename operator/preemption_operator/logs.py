"""Log lines with a time and a level, as plain text or one JSON object per line."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from .api.meta import format_time

PLAIN = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


class _UtcFormatter(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return format_time(datetime.fromtimestamp(record.created, UTC), 3)


class JsonFormatter(_UtcFormatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure(fmt: str = "plain", verbose: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else _UtcFormatter(PLAIN))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for noisy in ("httpx", "httpx2", "httpcore", "hpack", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
