"""Fair sharing: the switch with its preemption strategies, and the Dominant Resource Share (DRS).

A node's DRS is, over the resources it borrows, the largest ratio of what it borrows (usage above
its subtree quota, summed over flavors) to what its parent could lend it (potential availability
from the parent's point of view, summed over the flavors of the whole tree), times 1000, divided
by its fair weight. A root has no parent and so no share. A cohort's usage is what its children
store in it, so a cohort's share is its subtree's share within its own parent: the formulas are
Kueue's (v0.19.2 `pkg/cache/scheduler/fair_sharing.go`).

The numerator is kept incrementally on each quota node (`QuotaNode.borrowed`, moved by every
add/remove of usage); the denominator depends on quotas only and is computed once per tree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache

from ..api.quantity import parse_quantity
from .quota import FlavorResource, QuotaNode

LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"
STRATEGIES = (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LESS_THAN_INITIAL_SHARE)
DEFAULT_STRATEGIES = (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LESS_THAN_INITIAL_SHARE)
"""What Kueue uses when fair sharing is on and no strategies are given."""
VALID_STRATEGY_SETS = (
    (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,),
    (LESS_THAN_INITIAL_SHARE,),
    (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LESS_THAN_INITIAL_SHARE),
)
"""The only lists Kueue's configuration validation accepts (pkg/config/validation.go)."""

INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class FairSharing:
    """Kueue's Configuration `fairSharing`: off by default; on, with preemption strategies tried
    in order. Pure data: the cache hands it to every snapshot."""

    enabled: bool = False
    strategies: tuple[str, ...] = DEFAULT_STRATEGIES

    def __post_init__(self) -> None:
        if self.strategies not in VALID_STRATEGY_SETS:
            raise ValueError(strategies_problem(self.strategies))


OFF = FairSharing()


def strategies_problem(strategies: Iterable[str]) -> str:
    given = list(strategies)
    unknown = [s for s in given if s not in STRATEGIES]
    valid = "; ".join(",".join(s) for s in VALID_STRATEGY_SETS)
    if unknown:
        return f"unknown strategy {', '.join(repr(s) for s in unknown)}: the strategies are {', '.join(STRATEGIES)}"
    return f"{','.join(given) or '(none)'} is not a supported list: use one of {valid}"


def parse_strategies(text: str) -> tuple[str, ...]:
    """`A,B` as the flag takes it; raises ValueError naming what is wrong."""
    strategies = tuple(part.strip() for part in text.split(",") if part.strip())
    if strategies not in VALID_STRATEGY_SETS:
        raise ValueError(strategies_problem(strategies))
    return strategies


@dataclass(frozen=True)
class DRS:
    """A node's dominant resource share (Kueue's DRS), compared with `compare`."""

    weight: float = 1.0
    unweighted_ratio: float = 0.0
    """Borrowed over lendable of the dominant resource, times 1000 (no weight)."""
    dominant_resource: str = ""
    borrowing: bool = False
    """Whether usage is above subtree quota for any flavor-resource (even where nothing is lendable)."""

    @property
    def is_zero(self) -> bool:
        return self.unweighted_ratio == 0

    @property
    def zero_weight_borrows(self) -> bool:
        return self.weight == 0 and not self.is_zero

    @property
    def precise(self) -> float:
        """The weighted share: +inf for a zero weight that borrows."""
        if self.is_zero:
            return 0.0
        if self.weight == 0:
            return math.inf
        return self.unweighted_ratio / self.weight

    @property
    def rounded(self) -> int:
        """The share rounded up to an integer, INT64_MAX for a zero weight that borrows (Kueue's
        roundedWeightedShare)."""
        return INT64_MAX if self.zero_weight_borrows else math.ceil(self.precise)


NO_SHARE = DRS()


def negative_drs() -> DRS:
    """Below every real share: a starting point when looking for the highest."""
    return DRS(unweighted_ratio=-1.0)


def compare(a: DRS, b: DRS) -> int:
    """-1, 0 or 1: lower is preferred for admission, higher for preemption. Two zero weights that
    borrow compare by their ratios; one of them is above every finite share."""
    if a.zero_weight_borrows and b.zero_weight_borrows:
        x, y = a.unweighted_ratio, b.unweighted_ratio
    elif a.zero_weight_borrows:
        return 1
    elif b.zero_weight_borrows:
        return -1
    else:
        x, y = a.precise, b.precise
    return (x > y) - (x < y)


def weighted_share_status(precise: float) -> int:
    """status.fairSharing.weightedShare: the share rounded up, INT64_MAX for an infinite one."""
    return INT64_MAX if precise == math.inf else math.ceil(precise)


@lru_cache(maxsize=4096)
def serialized(precise: float) -> str:
    """The share as Kueue prints it in messages (Go's FormatFloat 'f', -1): no exponent. Cached:
    every candidate's explanation prints a few shares, mostly the same ones."""
    if precise == math.inf:
        return "+Inf"
    text = format(Decimal(repr(precise)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def lendable(parent: QuotaNode) -> Mapping[str, int]:
    """Per resource, what `parent` could make available to a child if nothing were used: its
    potential availability summed over every flavor of the tree. Quotas alone decide it, so it is
    computed once per tree (and shared with snapshot clones)."""
    found = parent.static.get("lendable")
    if found is None:
        totals: dict[str, int] = {}
        for fr in parent.root().subtree_quota:
            totals[fr[1]] = totals.get(fr[1], 0) + parent.potential_available(fr)
        parent.static["lendable"] = found = totals
    return found  # type: ignore[return-value]


@lru_cache(maxsize=64)
def _no_share(weight: float) -> DRS:
    """The share of a node that borrows nothing (one object per weight: most nodes, most calls)."""
    return DRS(weight)


def dominant_resource_share(node: QuotaNode, request: Mapping[FlavorResource, int] | None = None) -> DRS:
    """The node's DRS, with `request` added to its usage when given (nothing is changed)."""
    if node.parent is None:
        return _no_share(node.fair_weight)
    borrowed: Mapping[str, int] = node.borrowed_by_resource()
    if request:
        with_request = dict(borrowed)
        for fr, value in request.items():
            quota = node.subtree_quota.get(fr)
            if quota is None or value <= 0:
                continue
            used = node.usage.get(fr, 0)
            delta = max(0, used + value - quota) - max(0, used - quota)
            if delta:
                with_request[fr[1]] = with_request.get(fr[1], 0) + delta
        borrowed = with_request
    for amount in borrowed.values():
        if amount > 0:
            break
    else:
        return _no_share(node.fair_weight)
    capacity = lendable(node.parent)
    ratio, dominant = 0.0, ""
    for resource in sorted(borrowed):
        amount = borrowed[resource]
        total = capacity.get(resource, 0)
        if amount <= 0 or total <= 0:
            continue
        # Float arithmetic in Kueue's order, so values (and ties) come out the same.
        candidate = float(amount) * 1000.0 / float(total)
        if candidate > ratio:  # sorted: a tie keeps the resource first in alphabetical order
            ratio, dominant = candidate, resource
    return DRS(node.fair_weight, ratio, dominant, borrowing=True)


def is_borrowing_on(node: QuotaNode, requested: Mapping[FlavorResource, int] | None) -> bool:
    """Whether the node borrows (usage above subtree quota) on a flavor-resource `requested` asks
    for (Kueue's DRS.IsBorrowingOn)."""
    if node.parent is None or not requested:
        return False
    return any(
        value > 0 and fr in node.subtree_quota and node.usage.get(fr, 0) > node.subtree_quota[fr]
        for fr, value in requested.items()
    )


def parse_weight(value: str | int | float | None) -> float:
    """spec.fairSharing.weight as a float (Kueue's AsFloat64Slow); unset is Kueue's default 1."""
    return 1.0 if value is None else float(parse_quantity(value))
