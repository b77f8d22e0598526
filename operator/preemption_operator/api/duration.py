"""Go durations ("30s", "1m30s", "2h"), as metav1.Duration writes them, parsed exactly.

A metav1.Duration is a Go time.Duration: int64 nanoseconds, so at most 2562047h47m16.854775807s
(about 292 years); time.ParseDuration rejects anything longer. The engine adds durations to
timestamps, so a longer one must never get past parsing.
"""

from __future__ import annotations

import re
from datetime import timedelta

from .quantity import show

MAX_NANOSECONDS = 2**63 - 1
MAX_DURATION_TEXT = "2562047h47m16.854775807s"
MAX_DURATION = timedelta(microseconds=MAX_NANOSECONDS // 1000)

# The subset of Go's syntax this project accepts: unsigned, each part a number and a unit.
DURATION_PATTERN = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$"

_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?(ns|us|µs|ms|s|m|h)")
_NANOSECONDS = {"ns": 1, "us": 10**3, "µs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}


class DurationError(ValueError):
    """Text that is not a duration, or one longer than Go's time.Duration can hold."""


def parse_nanoseconds(text: str) -> int:
    """Go's time.ParseDuration for non-negative values ("30s", "1.5h", "1m30s", "0"), in
    nanoseconds. Raises DurationError for malformed text and for values past MAX_NANOSECONDS."""
    if not isinstance(text, str):
        raise DurationError(f"{text!r} is not a duration such as 30s, 1m30s or 2h")
    if text == "0":
        return 0
    if not text:
        raise DurationError('"" is not a duration such as 30s, 1m30s or 2h')
    total, pos = 0, 0
    while pos < len(text):
        match = _PART.match(text, pos)
        whole, fraction = (match.group(1), match.group(2) or "") if match else ("", "")
        if match is None or not (whole or fraction):
            raise DurationError(f"{show(text)} is not a duration such as 30s, 1m30s or 2h")
        per_unit = _NANOSECONDS[match.group(3)]
        whole = whole.lstrip("0")
        if len(whole) > 20:  # beyond int64 nanoseconds in any unit; int() of it could be slow
            raise DurationError(too_long(text))
        # Go truncates the fractional nanoseconds; digits past the 20th cannot change the result.
        fraction = fraction[:20]
        total += int(whole or "0") * per_unit + int(fraction or "0") * per_unit // 10 ** len(fraction)
        if total > MAX_NANOSECONDS:
            raise DurationError(too_long(text))
        pos = match.end()
    return total


def parse_duration(text: str) -> timedelta:
    """parse_nanoseconds as a timedelta (microsecond resolution, truncated)."""
    return timedelta(microseconds=parse_nanoseconds(text) // 1000)


def too_long(text: str) -> str:
    return f"{show(text)} is longer than the longest duration, {MAX_DURATION_TEXT} (about 292 years)"
