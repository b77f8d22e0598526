"""Problems worth telling the owner of an object about; the operator posts them as Warning Events,
`simulate` prints them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Notice:
    kind: str
    name: str
    reason: str
    message: str
