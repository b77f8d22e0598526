"""The names of Workloads created for jobs, as Kueue's job framework gives them, so that a Job
moved between Kueue and this operator keeps its Workload: `<kind>-<owner name>-<hash>`, the
prefix lower-cased and cut to fit, the hash the first five hex digits of a SHA-1 over the owner's
kind, group, name and UID (and an extra string when one is given)."""

from __future__ import annotations

import hashlib

HASH_LENGTH = 5
MAX_NAME_LENGTH = 253
"""A Kubernetes object name."""
SHORT_MAX_NAME_LENGTH = 63
"""Kueue's ShortWorkloadNames: names that also fit in a label value."""


def workload_name(kind: str, group: str, owner_name: str, owner_uid: str, extra: str = "", short: bool = False) -> str:
    limit = (SHORT_MAX_NAME_LENGTH if short else MAX_NAME_LENGTH) - 1 - HASH_LENGTH
    prefix = f"{kind.lower()}-{owner_name}"[:limit]
    return f"{prefix}-{_hash(kind, group, owner_name, owner_uid, extra)}"


def _hash(kind: str, group: str, owner_name: str, owner_uid: str, extra: str) -> str:
    parts = [kind, group, owner_name, owner_uid] + ([extra] if extra else [])
    return hashlib.sha1("\n".join(parts).encode(), usedforsecurity=False).hexdigest()[:HASH_LENGTH]
