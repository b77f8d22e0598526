"""Kubernetes resource quantities (`500m`, `2Gi`, `1e3`), parsed exactly.

Kueue keeps CPU in milli-units and every other resource in whole units, rounding up; so do we.
No maintained Python library parses the full grammar (lightkube has no `n`/`u`, the
`kubernetes` package accepts an uppercase `K`), hence this module.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

# The grammar of apimachinery's resource.Quantity, as its OpenAPI pattern states it.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUANTITY_RE = re.compile(QUANTITY_PATTERN)

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}

# Resources counted in milli-units, as Kueue's resources.ResourceValue does.
MILLI_RESOURCES = frozenset({"cpu"})


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> Decimal:
    """The exact decimal value of a quantity; raises QuantityError for anything else."""
    if isinstance(value, bool):
        raise QuantityError(f"quantities must be a string or a number, not {value!r}")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError(f"quantities must be finite, not {value!r}")
        return Decimal(str(value))
    if not isinstance(value, str) or not _QUANTITY_RE.match(value) or value != value.strip():
        raise QuantityError(f"quantities must match the regular expression '{QUANTITY_PATTERN}'")
    text = value
    try:
        for suffix, factor in _BINARY.items():
            if text.endswith(suffix):
                return Decimal(text[: -len(suffix)]) * factor
        # An exponent has digits after the e/E; a trailing E alone is the exa suffix.
        if re.search(r"[eE][+-]?[0-9.]", text):
            return Decimal(text)
        suffix = text[-1] if text[-1] in "numkMGTPE" else ""
        number = text[: -len(suffix)] if suffix else text
        return Decimal(number) * _DECIMAL[suffix]
    except InvalidOperation as exc:
        # The API server's pattern admits a fractional exponent (1e1.5) that apimachinery cannot parse.
        raise QuantityError(f"cannot parse quantity {value!r}") from exc


def to_amount(resource: str, value: str | int | float) -> int:
    """The integer amount the scheduler counts with: milli-units for CPU, units otherwise (rounded up)."""
    exact = parse_quantity(value)
    if resource in MILLI_RESOURCES:
        exact *= 1000
    return int(exact.to_integral_value(rounding=ROUND_CEILING))


def format_amount(resource: str, amount: int) -> str:
    """The canonical quantity string of an amount, as Kubernetes prints it (`1`, `500m`, `2Gi`)."""
    if resource in MILLI_RESOURCES:
        if amount % 1000 == 0:
            return str(amount // 1000)
        return f"{amount}m"
    if -1024 < amount < 1024:
        # apimachinery prints small binary quantities in decimal SI (1000 -> "1k").
        return _format_decimal_si(amount)
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        factor = _BINARY[suffix]
        if amount % factor == 0:
            return f"{amount // factor}{suffix}"
    return str(amount)


def _format_decimal_si(amount: int) -> str:
    for suffix, exponent in (("E", 18), ("P", 15), ("T", 12), ("G", 9), ("M", 6), ("k", 3)):
        factor = 10**exponent
        if amount != 0 and amount % factor == 0:
            return f"{amount // factor}{suffix}"
    return str(amount)
