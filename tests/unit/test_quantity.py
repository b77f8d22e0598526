"""preemption_operator.api.quantity: Kubernetes quantities parsed exactly, amounts as Kueue counts them."""

from __future__ import annotations

import math
import re
from decimal import Decimal

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from preemption_operator.api.quantity import (
    INT64_MAX,
    INT64_MIN,
    QUANTITY_PATTERN,
    QuantityError,
    checked_amount,
    format_amount,
    parse_quantity,
    to_amount,
)

BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_PATTERN = re.compile(QUANTITY_PATTERN)


# ---------------------------------------------------------------------------------------------
# parse_quantity: table
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", Decimal(0)),
        ("1", Decimal(1)),
        ("500m", Decimal("0.5")),
        ("2Gi", Decimal(2 * 2**30)),
        ("1Ki", Decimal(1024)),
        ("1.5Ki", Decimal(1536)),
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("1e-3", Decimal("0.001")),
        ("2.5e+2", Decimal(250)),
        ("1.5", Decimal("1.5")),
        ("100n", Decimal("0.0000001")),
        ("3u", Decimal("0.000003")),
        ("4k", Decimal(4000)),
        ("5M", Decimal(5_000_000)),
        ("6G", Decimal(6 * 10**9)),
        ("7T", Decimal(7 * 10**12)),
        ("8P", Decimal(8 * 10**15)),
        ("1Ei", Decimal(2**60)),
        ("+1", Decimal(1)),
        ("-1", Decimal(-1)),
        ("-500m", Decimal("-0.5")),
        (".5", Decimal("0.5")),
        ("1.", Decimal(1)),
        (2, Decimal(2)),
        (0.25, Decimal("0.25")),
    ],
)
def test_parse_valid(text: str | int | float, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "1K",  # uppercase K is not a suffix (only `k` and the binary `Ki`)
        "abc",
        "--1",
        "",
        "1KiB",
        "1mi",
        "1 Gi",
        "1e",
        "1.2.3",
        "e3",
        "Gi",
        "0x10",
        "1,5",
        "5e+2k",
        # The OpenAPI pattern allows a fractional exponent; apimachinery's ParseQuantity does not.
        "1e1.5",
        ".4E.0",
    ],
)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize("value", [True, False, None, [1], {"cpu": 1}])
def test_parse_rejects_non_quantities(value: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "expected"), [("1E", Decimal(10**18)), ("1.5E", Decimal(15 * 10**17))])
def test_parse_exa_suffix(text: str, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", [" 2", "2 ", "2\n"])
def test_parse_rejects_surrounding_whitespace(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_parse_rejects_non_finite_floats(value: float) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(value)


# ---------------------------------------------------------------------------------------------
# to_amount / format_amount: table
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "value", "amount"),
    [
        ("cpu", "500m", 500),
        ("cpu", "2", 2000),
        ("cpu", 2, 2000),
        ("cpu", "1.5", 1500),
        ("cpu", "100n", 1),  # milli-units, rounded up as Quantity.MilliValue does
        ("cpu", "0.0001", 1),
        ("cpu", "1e3", 1_000_000),
        ("cpu", "-500m", -500),
        ("memory", "1Ki", 1024),
        ("memory", "2Gi", 2 * 2**30),
        ("memory", "1k", 1000),
        ("memory", "1.5", 2),  # whole units, rounded up as Quantity.Value does
        ("memory", "500m", 1),
        ("memory", "0", 0),
        ("nvidia.com/gpu", "4", 4),
        ("pods", "110", 110),
    ],
)
def test_to_amount(resource: str, value: str | int, amount: int) -> None:
    assert to_amount(resource, value) == amount


@pytest.mark.parametrize(
    ("resource", "amount", "text"),
    [
        ("cpu", 500, "500m"),
        ("cpu", 2000, "2"),
        ("cpu", 0, "0"),
        ("cpu", 1500, "1500m"),
        ("cpu", -2000, "-2"),
        ("memory", 1024, "1Ki"),
        ("memory", 2 * 2**30, "2Gi"),
        ("memory", 1000, "1k"),  # apimachinery prints binary quantities below 1024 in decimal SI
        ("memory", 1536, "1536"),
        ("memory", 0, "0"),
        ("memory", 1023, "1023"),
        ("memory", 2**60, "1Ei"),
    ],
)
def test_format_amount(resource: str, amount: int, text: str) -> None:
    assert format_amount(resource, amount) == text


# ---------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------

amounts = st.integers(min_value=-(2**62), max_value=2**62)
mantissas = st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=-(10**6), max_value=10**6)


@given(st.sampled_from(["cpu", "memory", "ephemeral-storage", "nvidia.com/gpu"]), amounts)
def test_format_amount_round_trips(resource: str, amount: int) -> None:
    text = format_amount(resource, amount)
    assert _PATTERN.fullmatch(text), text
    assert to_amount(resource, text) == amount


@given(st.integers(min_value=-(10**9), max_value=10**9), st.sampled_from(sorted(BINARY)))
def test_binary_suffixes(number: int, suffix: str) -> None:
    assert parse_quantity(f"{number}{suffix}") == number * BINARY[suffix]


@given(mantissas, st.sampled_from([s for s in DECIMAL if s != "E"]))
def test_decimal_suffixes(number: Decimal, suffix: str) -> None:
    text = f"{number:f}{suffix}"
    assert parse_quantity(text) == number.scaleb(DECIMAL[suffix])


@given(mantissas, st.integers(min_value=-12, max_value=12), st.sampled_from(["e", "E"]))
def test_exponents(number: Decimal, exponent: int, letter: str) -> None:
    text = f"{number:f}{letter}{exponent:+d}"
    assert parse_quantity(text) == number.scaleb(exponent)


_FRACTIONAL_EXPONENT = re.compile(r"[eE][+-]?[0-9]*\.")


@pytest.mark.slow
@given(st.from_regex(_PATTERN, fullmatch=True))
def test_everything_the_pattern_accepts_parses(text: str) -> None:
    # A trailing `E` (exa) is the known bug of test_parse_exa_suffix; fractional exponents pass
    # the OpenAPI pattern but not apimachinery's parser (test_parse_rejects).
    assume(not text.endswith("E") and not _FRACTIONAL_EXPONENT.search(text))
    value = parse_quantity(text)
    assert value.is_finite()


@given(st.text(alphabet="0123456789.+-eEkKmMgGiunTP ", max_size=8))
def test_parse_accepts_exactly_the_pattern(text: str) -> None:
    assume(text == text.strip() and not text.endswith("E"))
    if _PATTERN.fullmatch(text) and not _FRACTIONAL_EXPONENT.search(text):
        parse_quantity(text)
    else:
        with pytest.raises(QuantityError):
            parse_quantity(text)


@given(mantissas, st.sampled_from(["cpu", "memory"]))
def test_to_amount_rounds_up(number: Decimal, resource: str) -> None:
    scale = 1000 if resource == "cpu" else 1
    exact = number * scale
    amount = to_amount(resource, f"{number:f}")
    assert amount == math.ceil(exact)
    assert amount - 1 < exact <= amount


@given(st.integers(min_value=-(2**31), max_value=2**31))
def test_integers_and_their_strings_agree(number: int) -> None:
    assert to_amount("cpu", number) == to_amount("cpu", str(number)) == number * 1000
    assert to_amount("memory", number) == to_amount("memory", str(number)) == number


# ---------------------------------------------------------------------------------------------
# Limits (issue 11): amounts as Kueue counts them fit in int64; errors show the value
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "value", "amount"),
    [
        ("cpu", "9223372036854775807m", INT64_MAX),
        ("cpu", "9223372036854775.807", INT64_MAX),
        ("cpu", "9223372036854775.8065", INT64_MAX),  # rounds up to the limit, not past it
        ("memory", "9223372036854775807", INT64_MAX),
        ("memory", "7Ei", 7 * 2**60),
        ("cpu", "1e-99999999999", 1),  # a sliver rounds up to one milli-unit
        ("cpu", "-1e-99999999999", 0),
        ("cpu", "1." + "0" * 5000, 1000),  # many digits: exact, and no int() of a long string
        ("cpu", "0.0000000000000000000000000000001234567", 1),
        ("memory", "123456789012345678.0000000000000000000000000001", 123456789012345679),
    ],
)
def test_amounts_up_to_int64(resource: str, value: str, amount: int) -> None:
    assert checked_amount(resource, value) == amount
    assert to_amount(resource, value) == amount


@pytest.mark.parametrize(
    ("resource", "value"),
    [
        ("cpu", "9223372036854775808m"),
        ("cpu", "9223372036854775.8071"),
        ("cpu", "1e18"),
        ("cpu", 10**16),
        ("memory", "8Ei"),
        ("memory", "9223372036854775808"),
        ("memory", "1e99999999999"),
        ("cpu", "-1e99999999999"),
    ],
)
def test_amounts_past_int64(resource: str, value: str | int) -> None:
    assert checked_amount(resource, value) is None
    with pytest.raises(QuantityError, match="is too large: the scheduler counts"):
        to_amount(resource, value)


def test_too_large_names_the_value_and_the_limit() -> None:
    with pytest.raises(QuantityError) as raised:
        to_amount("cpu", "1e18")
    assert str(raised.value) == (
        '"1e18" is too large: the scheduler counts cpu in millicores as a 64-bit integer, '
        "so cpu can be at most 9223372036854775807m"
    )
    with pytest.raises(QuantityError) as raised:
        to_amount("memory", "8Ei")
    assert str(raised.value).endswith(
        "counts memory in units as a 64-bit integer, so memory can be at most 9223372036854775807"
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1e1.5", '"1e1.5" is not a valid quantity: the exponent must be a whole number'),
        ("two", '"two" is not a valid quantity: write a number with an optional suffix, such as 2, 500m, 1.5Gi or 1e3'),
        ("1e999999999999999999999", '"1e999999999999999999999" is not a valid quantity: its exponent is out of range'),
        (True, "true is not a quantity"),
        (None, "null is not a quantity"),
        ("9" * 99 + "x", '"' + "9" * 33 + '..." (100 characters) is not a valid quantity'),
    ],
)
def test_parse_errors_show_the_value_not_the_pattern(value: object, message: str) -> None:
    with pytest.raises(QuantityError) as raised:
        parse_quantity(value)  # type: ignore[arg-type]
    assert message in str(raised.value)
    assert "[0-9]" not in str(raised.value)


@pytest.mark.slow
@given(
    st.one_of(st.text(max_size=30), st.from_regex(_PATTERN, fullmatch=True), st.integers(), st.floats()),
    st.sampled_from(["cpu", "memory"]),
)
def test_to_amount_raises_only_quantity_errors(value: str | int | float, resource: str) -> None:
    try:
        amount = to_amount(resource, value)
    except QuantityError:
        return
    assert INT64_MIN <= amount <= INT64_MAX
