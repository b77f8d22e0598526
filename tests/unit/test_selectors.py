"""preemption_operator.engine.selectors.build: metav1.LabelSelector semantics."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from preemption_operator.api.meta import LabelSelector
from preemption_operator.engine.selectors import EVERYTHING, NOTHING, OPERATORS, Selector, SelectorError, build


def selector(**wire: Any) -> LabelSelector:
    return LabelSelector.model_validate(wire)


def expr(key: str, operator: str, values: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": operator}
    if values is not None:
        out["values"] = values
    return out


# ---------------------------------------------------------------------------------------------
# nil and empty
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("labels", [None, {}, {"a": "b"}])
def test_nil_selector_is_the_given_default(labels: dict[str, str] | None) -> None:
    assert build(None, nil=EVERYTHING).matches(labels)
    assert not build(None, nil=NOTHING).matches(labels)


@pytest.mark.parametrize("nil", [EVERYTHING, NOTHING])
@pytest.mark.parametrize("labels", [None, {}, {"a": "b"}])
def test_empty_selector_matches_everything(nil: Selector, labels: dict[str, str] | None) -> None:
    built = build(selector(), nil=nil)
    assert built.empty
    assert built.matches(labels)


def test_empty_lists_select_everything() -> None:
    built = build(selector(matchLabels={}, matchExpressions=[]), nil=NOTHING)
    assert built.empty
    assert built.matches({"x": "y"})


def test_degenerate_selectors() -> None:
    assert EVERYTHING.empty and EVERYTHING.matches(None)
    assert not NOTHING.empty and not NOTHING.matches({})


# ---------------------------------------------------------------------------------------------
# Matching: table
# ---------------------------------------------------------------------------------------------

CASES: list[tuple[dict[str, Any], dict[str, str] | None, bool]] = [
    # matchLabels
    ({"matchLabels": {"team": "a"}}, {"team": "a"}, True),
    ({"matchLabels": {"team": "a"}}, {"team": "a", "other": "x"}, True),
    ({"matchLabels": {"team": "a"}}, {"team": "b"}, False),
    ({"matchLabels": {"team": "a"}}, {}, False),
    ({"matchLabels": {"team": "a"}}, None, False),
    ({"matchLabels": {"team": "a", "tier": "1"}}, {"team": "a"}, False),
    ({"matchLabels": {"team": "a", "tier": "1"}}, {"team": "a", "tier": "1"}, True),
    ({"matchLabels": {"empty": ""}}, {"empty": ""}, True),
    ({"matchLabels": {"empty": ""}}, {}, False),
    # In
    ({"matchExpressions": [expr("env", "In", ["dev", "test"])]}, {"env": "dev"}, True),
    ({"matchExpressions": [expr("env", "In", ["dev", "test"])]}, {"env": "test"}, True),
    ({"matchExpressions": [expr("env", "In", ["dev", "test"])]}, {"env": "prod"}, False),
    ({"matchExpressions": [expr("env", "In", ["dev", "test"])]}, {}, False),
    # NotIn: a missing key matches
    ({"matchExpressions": [expr("tier", "NotIn", ["mission-critical"])]}, {"tier": "standard"}, True),
    ({"matchExpressions": [expr("tier", "NotIn", ["mission-critical"])]}, {"tier": "mission-critical"}, False),
    ({"matchExpressions": [expr("tier", "NotIn", ["mission-critical"])]}, {}, True),
    ({"matchExpressions": [expr("tier", "NotIn", ["mission-critical"])]}, None, True),
    # Exists
    ({"matchExpressions": [expr("gpu", "Exists")]}, {"gpu": ""}, True),
    ({"matchExpressions": [expr("gpu", "Exists")]}, {"gpu": "a100"}, True),
    ({"matchExpressions": [expr("gpu", "Exists")]}, {"cpu": "x"}, False),
    ({"matchExpressions": [expr("gpu", "Exists", [])]}, {"gpu": "x"}, True),
    # DoesNotExist: a missing key matches
    ({"matchExpressions": [expr("gpu", "DoesNotExist")]}, {}, True),
    ({"matchExpressions": [expr("gpu", "DoesNotExist")]}, None, True),
    ({"matchExpressions": [expr("gpu", "DoesNotExist")]}, {"gpu": ""}, False),
    # everything is ANDed
    (
        {"matchLabels": {"team": "a"}, "matchExpressions": [expr("env", "NotIn", ["prod"]), expr("gpu", "Exists")]},
        {"team": "a", "env": "dev", "gpu": "1"},
        True,
    ),
    (
        {"matchLabels": {"team": "a"}, "matchExpressions": [expr("env", "NotIn", ["prod"]), expr("gpu", "Exists")]},
        {"team": "a", "env": "prod", "gpu": "1"},
        False,
    ),
    (
        {"matchLabels": {"team": "a"}, "matchExpressions": [expr("env", "NotIn", ["prod"]), expr("gpu", "Exists")]},
        {"team": "b", "gpu": "1"},
        False,
    ),
    # The same key twice: both must hold
    ({"matchExpressions": [expr("k", "In", ["a", "b"]), expr("k", "NotIn", ["a"])]}, {"k": "b"}, True),
    ({"matchExpressions": [expr("k", "In", ["a", "b"]), expr("k", "NotIn", ["a"])]}, {"k": "a"}, False),
    # Values are compared exactly
    ({"matchExpressions": [expr("env", "In", ["Dev"])]}, {"env": "dev"}, False),
]


@pytest.mark.parametrize(("wire", "labels", "expected"), CASES)
def test_matches(wire: dict[str, Any], labels: dict[str, str] | None, expected: bool) -> None:
    for nil in (EVERYTHING, NOTHING):
        assert build(selector(**wire), nil=nil).matches(labels) is expected


def test_built_selector_is_reusable() -> None:
    built = build(selector(matchExpressions=[expr("env", "In", ["dev"])]), nil=NOTHING)
    assert [built.matches(labels) for labels in ({"env": "dev"}, {"env": "x"}, {"env": "dev"})] == [True, False, True]


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expressions", "message"),
    [
        ([expr("k", "invalid", ["a"])], '"invalid" is not a valid label selector operator'),
        ([expr("k", "in", ["a"])], '"in" is not a valid label selector operator'),
        ([expr("k", "Equals", ["a"])], '"Equals" is not a valid label selector operator'),
        ([expr("k", "", ["a"])], '"" is not a valid label selector operator'),
        ([expr("k", "In", [])], "for 'in', 'notin' operators, values set can't be empty"),
        ([expr("k", "In")], "for 'in', 'notin' operators, values set can't be empty"),
        ([expr("k", "NotIn", [])], "for 'in', 'notin' operators, values set can't be empty"),
        ([expr("k", "Exists", ["a"])], "values set must be empty for exists and does not exist"),
        ([expr("k", "DoesNotExist", ["a"])], "values set must be empty for exists and does not exist"),
        ([expr("", "Exists")], "invalid label key ''"),
    ],
)
def test_invalid_requirements(expressions: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(SelectorError) as info:
        build(selector(matchExpressions=expressions), nil=EVERYTHING)
    assert message in str(info.value)


def test_error_names_the_requirement() -> None:
    wire = {"matchExpressions": [expr("a", "Exists"), expr("b", "invalid", ["x"])]}
    with pytest.raises(
        SelectorError, match=r'^matchExpressions\[1\]: "invalid" is not a valid label selector operator$'
    ):
        build(selector(**wire), nil=NOTHING)


def test_selector_error_is_a_value_error() -> None:
    assert issubclass(SelectorError, ValueError)


def test_operators() -> None:
    assert set(OPERATORS) == {"In", "NotIn", "Exists", "DoesNotExist"}


@pytest.mark.parametrize(
    "wire",
    [
        {"matchExpressions": [expr("not a key", "Exists")]},
        {"matchExpressions": [expr("-leading-dash", "DoesNotExist")]},
        {"matchExpressions": [expr("env", "In", ["not a value"])]},
        {"matchLabels": {"env": "not a value"}},
        {"matchLabels": {"bad key": "v"}},
    ],
)
def test_invalid_keys_and_values_are_rejected(wire: dict[str, Any]) -> None:
    with pytest.raises(SelectorError):
        build(selector(**wire), nil=EVERYTHING)


# ---------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------

keys = st.sampled_from(["a", "b", "c", "example.com/tier"])
values = st.sampled_from(["", "x", "y", "z"])
label_sets = st.dictionaries(keys, values, max_size=4)
value_sets = st.lists(values, min_size=1, max_size=3)


def one(key: str, operator: str, vals: list[str] | None = None) -> Selector:
    return build(selector(matchExpressions=[expr(key, operator, vals)]), nil=NOTHING)


@given(label_sets, keys, value_sets)
def test_notin_is_the_complement_of_in(labels: dict[str, str], key: str, vals: list[str]) -> None:
    assert one(key, "NotIn", vals).matches(labels) is not one(key, "In", vals).matches(labels)


@given(label_sets, keys)
def test_doesnotexist_is_the_complement_of_exists(labels: dict[str, str], key: str) -> None:
    assert one(key, "DoesNotExist").matches(labels) is not one(key, "Exists").matches(labels)
    assert one(key, "Exists").matches(labels) is (key in labels)


@given(label_sets, keys, value_sets)
def test_in_semantics(labels: dict[str, str], key: str, vals: list[str]) -> None:
    assert one(key, "In", vals).matches(labels) is (key in labels and labels[key] in vals)


@given(label_sets, label_sets)
def test_match_labels_is_a_subset_test(wanted: dict[str, str], labels: dict[str, str]) -> None:
    built = build(selector(matchLabels=wanted), nil=NOTHING)
    assert built.matches(labels) is (wanted.items() <= labels.items())


@pytest.mark.slow
@given(label_sets, label_sets)
def test_match_labels_equals_single_value_in(wanted: dict[str, str], labels: dict[str, str]) -> None:
    as_expressions = [expr(k, "In", [v]) for k, v in wanted.items()]
    a = build(selector(matchLabels=wanted), nil=NOTHING)
    b = build(selector(matchExpressions=as_expressions), nil=NOTHING)
    assert a.matches(labels) is b.matches(labels)


requirements = st.tuples(keys, st.sampled_from(OPERATORS), value_sets).map(
    lambda t: expr(t[0], t[1], t[2] if t[1] in ("In", "NotIn") else None)
)


@pytest.mark.slow
@given(st.lists(requirements, max_size=4), label_sets, label_sets)
def test_requirements_are_anded(exprs: list[dict[str, Any]], wanted: dict[str, str], labels: dict[str, str]) -> None:
    whole = build(selector(matchLabels=wanted, matchExpressions=exprs), nil=NOTHING)
    parts = [build(selector(matchExpressions=[e]), nil=NOTHING) for e in exprs]
    parts.append(build(selector(matchLabels=wanted), nil=NOTHING))
    assert whole.matches(labels) is all(p.matches(labels) for p in parts)
    # Order does not matter.
    reordered = build(selector(matchLabels=wanted, matchExpressions=list(reversed(exprs))), nil=NOTHING)
    assert reordered.matches(labels) is whole.matches(labels)


@given(label_sets)
def test_none_labels_are_no_labels(labels: dict[str, str]) -> None:
    for operator, vals in (("In", ["x"]), ("NotIn", ["x"]), ("Exists", None), ("DoesNotExist", None)):
        built = one("a", operator, vals)
        assert built.matches(None) is built.matches({})


@given(st.text(min_size=1, max_size=12).filter(lambda s: s not in OPERATORS))
def test_any_other_operator_is_rejected(operator: str) -> None:
    with pytest.raises(SelectorError, match="is not a valid label selector operator"):
        build(selector(matchExpressions=[expr("k", operator, ["v"])]), nil=EVERYTHING)
