"""Kubernetes resource quantities (`500m`, `2Gi`, `1e3`), parsed exactly.

Kueue keeps CPU in milli-units and every other resource in whole units, rounding up; so do we.
No maintained Python library parses the full grammar (lightkube has no `n`/`u`, the
`kubernetes` package accepts an uppercase `K`), hence this module.
"""

from __future__ import annotations

import functools
import json
import re
from decimal import ROUND_CEILING, Context, Decimal, InvalidOperation

# The grammar of apimachinery's resource.Quantity, as its OpenAPI pattern states it.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
# The same grammar without a leading minus: quotas and requests cannot be negative (Kubernetes
# rejects negative pod requests, Kueue's webhook negative quotas). "-0" is refused too, so that
# the models and the CRD schema agree.
NON_NEGATIVE_QUANTITY_PATTERN = QUANTITY_PATTERN.replace(r"^(\+|-)?", r"^(\+)?", 1)
_QUANTITY_RE = re.compile(QUANTITY_PATTERN)

# Kueue counts amounts in int64 (resources.ResourceValue: MilliValue for cpu, Value otherwise).
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

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


_EXAMPLES = "a number with an optional suffix, such as 2, 500m, 1.5Gi or 1e3"


def parse_quantity(value: str | int | float) -> Decimal:
    """The exact decimal value of a quantity; raises QuantityError for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise QuantityError(f"{show(value)} is not a quantity: write {_EXAMPLES}")
    return _parse(value)


# Objects repeat the same few quantities, and each is read several times (validation, the pod
# set's totals, the engine): recent results are kept. `typed` keeps 1 and 1.0 apart.
@functools.lru_cache(maxsize=4096, typed=True)
def _parse(value: str | int | float) -> Decimal:
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError(f"{value!r} is not a quantity: it must be finite")
        return Decimal(str(value))
    if _FRACTIONAL_EXPONENT.search(value) and _QUANTITY_RE.fullmatch(value):
        # The API server's pattern admits a fractional exponent (1e1.5) that apimachinery cannot parse.
        raise QuantityError(f"{show(value)} is not a valid quantity: the exponent must be a whole number")
    if not _QUANTITY_RE.fullmatch(value) or value != value.strip():
        raise QuantityError(f"{show(value)} is not a valid quantity: write {_EXAMPLES}")
    text = value
    exact = Context(prec=len(text) + 25)  # products keep every digit written
    try:
        for suffix, factor in _BINARY.items():
            if text.endswith(suffix):
                return exact.multiply(Decimal(text[: -len(suffix)]), factor)
        # An exponent has digits after the e/E; a trailing E alone is the exa suffix.
        if re.search(r"[eE][+-]?[0-9.]", text):
            return Decimal(text)
        suffix = text[-1] if text[-1] in "numkMGTPE" else ""
        number = text[: -len(suffix)] if suffix else text
        return exact.multiply(Decimal(number), _DECIMAL[suffix])
    except InvalidOperation as exc:
        # Only an exponent beyond what a decimal can hold (1e999999999999999999999) gets here.
        raise QuantityError(f"{show(value)} is not a valid quantity: its exponent is out of range") from exc


_FRACTIONAL_EXPONENT = re.compile(r"[eE][+-]?[0-9]*\.")


def show(value: object, limit: int = 40) -> str:
    """A value as error messages quote it: JSON-like, shortened (and measured) when long."""
    if value is None or isinstance(value, bool):
        text = "null" if value is None else str(value).lower()
    elif isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)  # control characters escaped
    else:
        text = str(value)
    if len(text) <= limit:
        return text
    size = len(value) if isinstance(value, str) else len(text)
    return f"{text[: limit - 6]}...{text[-1]} ({size} characters)"


def unit(resource: str) -> str:
    """What one scheduler amount of a resource is, in words."""
    return "millicores" if resource in MILLI_RESOURCES else "units"


def checked_amount(resource: str, value: str | int | float) -> int | None:
    """The amount the scheduler counts with (milli-units for CPU, units otherwise, rounded up), or
    None when it does not fit in int64. Raises QuantityError only for values that are not quantities."""
    return _amount(resource in MILLI_RESOURCES, parse_quantity(value))


@functools.lru_cache(maxsize=4096)
def _amount(milli: bool, exact: Decimal) -> int | None:
    if exact.is_zero():
        return 0
    scale = 3 if milli else 0
    magnitude = exact.adjusted() + scale  # the power of ten of the leading digit, once scaled
    if magnitude > 19:
        return None  # at least 10**20: never builds the integer of 1e99999999999
    if magnitude < 0:
        return 1 if exact > 0 else 0  # below one unit: rounds up to one, or to zero when negative
    # Enough precision that scaling and rounding up are exact, however many digits were written.
    context = Context(prec=len(exact.as_tuple().digits) + 25)
    amount = int(exact.scaleb(scale, context).to_integral_value(rounding=ROUND_CEILING, context=context))
    return amount if fits_int64(amount) else None


def fits_int64(amount: int) -> bool:
    return INT64_MIN <= amount <= INT64_MAX


def to_amount(resource: str, value: str | int | float) -> int:
    """The integer amount the scheduler counts with: milli-units for CPU, units otherwise (rounded up).
    Raises QuantityError for a value that is not a quantity or whose amount does not fit in int64."""
    amount = checked_amount(resource, value)
    if amount is None:
        raise QuantityError(too_large(resource, value))
    return amount


def too_large(resource: str, value: object) -> str:
    return (
        f"{show(value)} is too large: the scheduler counts {resource} in {unit(resource)} as a 64-bit "
        f"integer, so {resource} can be at most {max_quantity(resource)}"
    )


def max_quantity(resource: str) -> str:
    """The largest quantity of a resource whose amount fits in int64, as a quantity string."""
    return f"{INT64_MAX}m" if resource in MILLI_RESOURCES else str(INT64_MAX)


def format_amount(resource: str, amount: int) -> str:
    """The canonical quantity string of an amount, as Kueue prints it (`1`, `500m`, `2Gi`, `1k`):
    cpu in decimal SI from milli-units, memory-like resources in binary SI when exact, and
    everything else in decimal SI."""
    if resource in MILLI_RESOURCES:
        if amount % 1000 == 0:
            return _format_decimal_si(amount // 1000)  # 1000 cpus print as "1k"
        return f"{amount}m"
    if -1024 < amount < 1024 or not _binary_formatted(resource):
        # apimachinery prints small binary quantities in decimal SI (1000 -> "1k").
        return _format_decimal_si(amount)
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        factor = _BINARY[suffix]
        if amount % factor == 0:
            return f"{amount // factor}{suffix}"
    # Kueue re-parses an inexact binary string, which then prints in decimal SI (2000 -> "2k").
    return _format_decimal_si(amount)


def _binary_formatted(resource: str) -> bool:
    """Resources Kueue's formatter prints in binary SI: memory, ephemeral storage, huge pages."""
    return resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-")


def _format_decimal_si(amount: int) -> str:
    for suffix, exponent in (("E", 18), ("P", 15), ("T", 12), ("G", 9), ("M", 6), ("k", 3)):
        factor = 10**exponent
        if amount != 0 and amount % factor == 0:
            return f"{amount // factor}{suffix}"
    return str(amount)
