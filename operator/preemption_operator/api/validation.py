"""Validation of our custom resources as the API server does it, offline: each CRD's OpenAPI v3
(structural) schema and its CEL rules (`x-kubernetes-validations`), with the API server's words.

The schemas are the ones `preemption-operator crds` writes (api/crdgen.py, from the models), so
every kind in kinds.CRDS is covered, including any added later. The API server's order is kept:
unknown fields refuse the object outright (kubectl's strict field validation, a 400); then
nulls of non-nullable fields are dropped and defaults applied; then the schema is checked; then,
unless a schema error blocks them (a wrong type, a missing field, a value outside an enum, a
string or list over its maximum: the API server skips the rules then too), the CEL rules run.

Transition rules (those reading `oldSelf`) are skipped: they compare an update with the stored
object, and offline there is no stored object.

CEL is evaluated with the `common-expression-language` package (docs/development.md says why).
`duration()` is ours: Go's time.ParseDuration on int64 nanoseconds, so that a duration past
~292 years is an error as on the API server (the library's own wraps silently). A string of
`format: duration` or `format: date-time` reaches a rule as a duration or a timestamp, as
Kubernetes types it (`self >= duration('1s')` on such a field).

Each problem reads `<field path>: <detail>` exactly as in the API server's 422 response
(`spec.rules[0].candidateSelectors[0]: Invalid value: "object": <rule's message>`); the offline
loaders (offline/manifests.py) put the file and object before it. Where the models refuse a value
too, the loaders show the models' words instead (they name the limit in words, never a regular
expression); a CEL rule that says no is always shown in the API server's words.
"""

from __future__ import annotations

import contextvars
import copy
import functools
import json
import logging
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

import cel

from . import crdgen, kinds
from .duration import DurationError, parse_nanoseconds
from .meta import format_time

# The library logs a warning for every exception a function of ours raises (an invalid duration
# is an expected outcome here, reported as the API server reports it).
logging.getLogger("cel").addHandler(logging.NullHandler())
logging.getLogger("cel").propagate = False

NIL_PATH = "<nil>"
"""The path the API server writes for the object itself (a rule at the root)."""

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_SUBDOMAIN_WORDS = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


@dataclass(frozen=True)
class Schema:
    """One served version of one of our CRDs."""

    api_version: str
    kind: str
    openapi: dict[str, Any]


@functools.cache
def schemas() -> dict[tuple[str, str], Schema]:
    """(apiVersion, kind) -> the schema the generated CRD serves."""
    found = {}
    for model in kinds.CRDS:
        crd = crdgen.crd(model)
        group = crd["spec"]["group"]
        for version in crd["spec"]["versions"]:
            api_version = f"{group}/{version['name']}"
            kind = crd["spec"]["names"]["kind"]
            found[(api_version, kind)] = Schema(api_version, kind, version["schema"]["openAPIV3Schema"])
    return found


def schema_of(body: dict[str, Any]) -> Schema | None:
    """The schema an object is validated against; None for kinds and versions not ours."""
    return schemas().get((str(body.get("apiVersion")), str(body.get("kind"))))


def validate(body: dict[str, Any]) -> list[Problem]:
    """What the API server would refuse in `body` when it is created, in its words; [] when it
    would be accepted (or is not one of our kinds)."""
    schema = schema_of(body)
    if schema is None:
        return []
    body = _wire(body)
    unknown = list(_unknown_fields(schema.openapi, body, ""))
    if unknown:
        return [Problem(path, f"unknown field {_quote(path)}") for path in unknown]
    value = defaulted(schema.openapi, body)
    problems: list[Problem] = list(_metadata(value))
    problems += _structural(schema.openapi, value, "")
    if not any(problem.blocking for problem in problems):
        problems += _rules(schema.openapi, value, "")
    return problems


# ---------------------------------------------------------------------------------------------
# Before validation: values as decoded from JSON, nulls pruned, defaults applied
# ---------------------------------------------------------------------------------------------


def _wire(value: Any) -> Any:
    """Values as the API server decodes them: YAML's timestamps are strings again."""
    if isinstance(value, dict):
        return {str(k): _wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_wire(v) for v in value]
    if isinstance(value, datetime) and value.tzinfo is not None:
        return format_time(value, 6)
    if isinstance(value, date):
        return str(value)  # without a time zone (or time): not an RFC 3339 time
    return value


def defaulted(schema: dict[str, Any], value: Any) -> Any:
    """`value` with nulls of non-nullable fields dropped and the schema's defaults filled in, as
    the API server stores it (a copy)."""
    if isinstance(value, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        out = {}
        for name, item in value.items():
            sub = props.get(name, extra if isinstance(extra, dict) else None)
            if item is None and sub is not None and not sub.get("nullable"):
                continue
            out[name] = defaulted(sub, item) if sub is not None else item
        for name, prop in props.items():
            if name not in out and "default" in prop:
                out[name] = defaulted(prop, copy.deepcopy(prop["default"]))
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [defaulted(schema["items"], item) for item in value]
    return value


def _unknown_fields(schema: dict[str, Any], value: Any, path: str) -> Iterator[str]:
    if isinstance(value, dict) and _type(schema) in ("object", None):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        keeps = schema.get("x-kubernetes-preserve-unknown-fields") or extra is True
        for name, item in value.items():
            sub = props.get(name, extra if isinstance(extra, dict) else None)
            if sub is None:
                if not keeps and props:
                    yield _join(path, name)
                continue
            yield from _unknown_fields(sub, item, _join(path, name))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            yield from _unknown_fields(schema["items"], item, f"{path}[{index}]")


# ---------------------------------------------------------------------------------------------
# Errors in the API server's words (k8s.io/apimachinery field.Error)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One reason the API server refuses an object: `str()` is its `<field path>: <detail>`."""

    path: str
    detail: str
    blocking: bool = False
    """An error of a kind after which the API server does not run the CEL rules."""
    rule: bool = False
    """A CEL rule said no (else the schema did, or a rule could not be evaluated: a value such
    as a duration it could not read)."""

    def __str__(self) -> str:
        return f"{self.path or NIL_PATH}: {self.detail}"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _quote(text: str) -> str:
    """Go's %q, for the strings these messages show."""
    return json.dumps(text, ensure_ascii=False)


def _show(value: Any) -> str:
    """A value as field.Error shows it: strings quoted, numbers and booleans bare."""
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _go_float(value)
    if value is None:
        return "null"
    return str(value)


def _go_float(value: float) -> str:
    """Go's %v of a float64 (strconv 'g' with the shortest representation)."""
    if math.isinf(value) or math.isnan(value):
        return {math.inf: "+Inf", -math.inf: "-Inf"}.get(value, "NaN")
    if value == int(value) and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    mantissa, _, exponent = text.partition("e")
    if exponent:
        sign = "-" if exponent.startswith("-") else "+"
        return f"{mantissa}e{sign}{exponent.lstrip('+-').rjust(2, '0')}"
    return text


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def _type(schema: dict[str, Any]) -> str | None:
    if schema.get("x-kubernetes-int-or-string"):
        return "int-or-string"
    kind = schema.get("type")
    return kind if isinstance(kind, str) else None


def _invalid(path: str, value: Any, detail: str, *, blocking: bool = False) -> Problem:
    return Problem(path, f"Invalid value: {_show(value)}: {detail}", blocking)


def _metadata(body: dict[str, Any]) -> Iterator[Problem]:
    meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    name = meta.get("name") if meta else None
    if not name and not (meta or {}).get("generateName"):
        yield Problem("metadata.name", "Required value: name or generateName is required", blocking=True)
    elif isinstance(name, str):
        if len(name) > 253:
            yield _invalid("metadata.name", name, "must be no more than 253 characters")
        if not _DNS_SUBDOMAIN.match(name):
            yield _invalid("metadata.name", name, _DNS_SUBDOMAIN_WORDS)


# ---------------------------------------------------------------------------------------------
# The structural schema
# ---------------------------------------------------------------------------------------------


def _type_matches(kind: str | None, value: Any) -> bool:
    actual = _json_type(value)
    if kind is None:
        return True
    if kind == "int-or-string":
        return actual in ("integer", "string")
    if kind == "number":
        return actual in ("integer", "number")
    return actual == kind


def _structural(schema: dict[str, Any], value: Any, path: str) -> list[Problem]:
    errors: list[Problem] = []
    kind = _type(schema)
    if value is None and schema.get("nullable"):
        return errors
    if not _type_matches(kind, value):
        actual = _json_type(value)
        expected = "integer,string" if kind == "int-or-string" else kind
        detail = f"{path} in body must be of type {expected}: {_quote(actual)}"
        return [_invalid(path, actual, detail, blocking=True)]
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(_show(v) for v in schema["enum"])
        errors.append(Problem(path, f"Unsupported value: {_show(value)}: supported values: {supported}", True))
    if isinstance(value, str):
        errors += _string(schema, value, path)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        errors += _number(schema, value, path)
    elif isinstance(value, list):
        errors += _array(schema, value, path)
    elif isinstance(value, dict):
        errors += _object(schema, value, path)
    return errors


def _string(schema: dict[str, Any], value: str, path: str) -> Iterator[Problem]:
    length = len(value)
    if "maxLength" in schema and length > schema["maxLength"]:
        yield Problem(path, f"Too long: may not be more than {schema['maxLength']} bytes", blocking=True)
    if "minLength" in schema and length < schema["minLength"]:
        yield _invalid(path, value, f"{path} in body should be at least {schema['minLength']} chars long")
    if "pattern" in schema and re.search(schema["pattern"], value) is None:
        yield _invalid(path, value, f"{path} in body should match '{schema['pattern']}'")
    if schema.get("format") == "date-time" and not _is_date_time(value):
        yield _invalid(path, value, f"{path} in body must be of type date-time: {_quote(value)}", blocking=True)
    if schema.get("format") == "duration" and openapi_duration(value) is None:
        yield _invalid(path, value, f"{path} in body must be of type duration: {_quote(value)}", blocking=True)


def _is_date_time(value: str) -> bool:
    if not _RFC3339.match(value):
        return False
    try:
        datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


_INT64 = 2**64


def _wrap_int64(value: int) -> int:
    value %= _INT64
    return value - _INT64 if value >= 2**63 else value


_GO_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?(ns|us|µs|μs|ms|s|m|h)")
_STRFMT_PART = re.compile(r"((\d+)\s*([A-Za-zµ]+))")
_STRFMT_UNITS = (
    (("ns", "nano"), 1),
    (("us", "µs", "micro"), 10**3),
    (("ms", "milli"), 10**6),
    (("s", "sec"), 10**9),
    (("m", "min"), 60 * 10**9),
    (("h", "hr", "hour"), 3600 * 10**9),
    (("d", "day"), 24 * 3600 * 10**9),
    (("w", "wk", "week"), 7 * 24 * 3600 * 10**9),
)


def go_duration(text: str) -> int | None:
    """Go's time.ParseDuration in nanoseconds; None where Go returns an error (malformed, or
    beyond int64)."""
    sign, rest = (-1, text[1:]) if text[:1] == "-" else (1, text[1:] if text[:1] == "+" else text)
    if rest == "0":
        return 0
    try:
        return sign * parse_nanoseconds(rest) if rest else None
    except DurationError:
        return None


def openapi_duration(text: str) -> int | None:
    """A string of `format: duration` as the API server reads it (go-openapi's
    strfmt.ParseDuration): Go's syntax, else number-and-unit pairs such as "1d", "2 weeks" or
    "10sec", summed in int64 nanoseconds that wrap as Go's do. None: not a duration."""
    exact = go_duration(text)
    if exact is not None:
        return exact
    total, matched = 0, False
    for part in _STRFMT_PART.finditer(text):
        factor, unit = int(part.group(2)), part.group(3).strip().lower()
        if factor >= 2**63:  # strconv.Atoi fails
            return None
        for variants, multiplier in _STRFMT_UNITS:
            for index, variant in enumerate(variants):
                last = index == len(variants) - 1
                if (last and unit.startswith(variant)) or unit == variant:
                    matched = True
                    total = _wrap_int64(total + _wrap_int64(factor * multiplier))
    return total if matched else None


def _number(schema: dict[str, Any], value: float, path: str) -> Iterator[Problem]:
    if "minimum" in schema:
        if schema.get("exclusiveMinimum") and value <= schema["minimum"]:
            yield _invalid(path, value, f"{path} in body should be greater than {_show(schema['minimum'])}")
        elif value < schema["minimum"]:
            yield _invalid(path, value, f"{path} in body should be greater than or equal to {_show(schema['minimum'])}")
    if "maximum" in schema:
        if schema.get("exclusiveMaximum") and value >= schema["maximum"]:
            yield _invalid(path, value, f"{path} in body should be less than {_show(schema['maximum'])}")
        elif value > schema["maximum"]:
            yield _invalid(path, value, f"{path} in body should be less than or equal to {_show(schema['maximum'])}")


def _array(schema: dict[str, Any], value: list[Any], path: str) -> list[Problem]:
    errors: list[Problem] = []
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(Problem(path, f"Too many: {len(value)}: must have at most {schema['maxItems']} items", True))
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(_invalid(path, len(value), f"{path} in body should have at least {schema['minItems']} items"))
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "set":
        seen: list[Any] = []
        for index, item in enumerate(value):
            if item in seen:
                errors.append(Problem(f"{path}[{index}]", f"Duplicate value: {_show(item)}"))
            else:
                seen.append(item)
    elif list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys", [])
        seen_keys: list[Any] = []
        for index, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            key = {k: item[k] for k in keys if k in item}
            if key in seen_keys:
                shown = json.dumps(key, separators=(",", ":"), ensure_ascii=False)
                errors.append(Problem(f"{path}[{index}]", f"Duplicate value: {shown}"))
            else:
                seen_keys.append(key)
    if isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            errors += _structural(schema["items"], item, f"{path}[{index}]")
    return errors


def _object(schema: dict[str, Any], value: dict[str, Any], path: str) -> list[Problem]:
    errors: list[Problem] = []
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        errors.append(Problem(path, f"Too many: {len(value)}: must have at most {schema['maxProperties']} items", True))
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        detail = f"{path} in body should have at least {schema['minProperties']} properties"
        errors.append(_invalid(path, len(value), detail))
    for name in schema.get("required", []):
        if name not in value:
            errors.append(Problem(_join(path, name), "Required value", blocking=True))
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    for name in sorted(value):
        sub = props.get(name, extra if isinstance(extra, dict) else None)
        if sub is not None:
            errors += _structural(sub, value[name], _join(path, name))
    return errors


# ---------------------------------------------------------------------------------------------
# CEL rules (x-kubernetes-validations)
# ---------------------------------------------------------------------------------------------

_OLD_SELF = re.compile(r"\boldSelf\b")
_DURATION_CALL = re.compile(r"(?<![\w.])duration\s*\(")
_STRING_LITERAL = re.compile(r"""[rR]?('''.*?'''|\"\"\".*?\"\"\"|'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*")""", re.S)
DURATION_FUNCTION = "_k8s_duration"
_DURATION_ERROR = "type conversion error from 'string' to 'google.protobuf.Duration'"


@functools.cache
def is_transition_rule(rule: str) -> bool:
    """Whether a rule compares with the stored object (`oldSelf`): skipped offline."""
    return _OLD_SELF.search(_STRING_LITERAL.sub("''", rule)) is not None


def _rewrite(rule: str) -> str:
    """The rule with `duration(...)` calling ours; string literals are left as they are."""
    out, pos = [], 0
    for literal in _STRING_LITERAL.finditer(rule):
        out.append(_DURATION_CALL.sub(f"{DURATION_FUNCTION}(", rule[pos : literal.start()]))
        out.append(literal.group(0))
        pos = literal.end()
    out.append(_DURATION_CALL.sub(f"{DURATION_FUNCTION}(", rule[pos:]))
    return "".join(out)


class RuleError(Exception):
    """A rule that could not be evaluated (the API server rejects the object, saying why)."""


_failure: contextvars.ContextVar[str | None] = contextvars.ContextVar("cel_failure", default=None)


def _duration(text: Any) -> timedelta:
    """CEL's duration() as Kubernetes evaluates it: Go's time.ParseDuration, int64 nanoseconds
    (kept to the microsecond here)."""
    if isinstance(text, timedelta):
        return text
    nanoseconds = go_duration(text) if isinstance(text, str) else None
    if nanoseconds is None:
        _failure.set(_DURATION_ERROR)
        raise ValueError(_DURATION_ERROR)
    return _timedelta(nanoseconds)


def _timedelta(nanoseconds: int) -> timedelta:
    return timedelta(microseconds=nanoseconds // 1000)


_FORMATS_BELOW: dict[int, tuple[dict[str, Any], bool]] = {}
"""id of a schema node -> (the node, kept alive so that its id is not reused; the answer)."""


def _typed_formats(schema: dict[str, Any]) -> bool:
    """Whether a schema node, or one below it, has a format CEL reads as a type of its own."""
    known = _FORMATS_BELOW.get(id(schema))
    if known is not None:
        return known[1]
    below = [*schema.get("properties", {}).values(), schema.get("items"), schema.get("additionalProperties")]
    found = schema.get("format") in ("duration", "date-time") or any(
        _typed_formats(sub) for sub in below if isinstance(sub, dict)
    )
    _FORMATS_BELOW[id(schema)] = (schema, found)
    return found


def cel_value(schema: dict[str, Any] | None, value: Any) -> Any:
    """A value as Kubernetes hands it to CEL: a string of `format: duration` is a duration, one of
    `format: date-time` a timestamp (the schema has checked both)."""
    if schema is None or not _typed_formats(schema):
        return value
    if isinstance(value, str):
        if schema.get("format") == "duration":
            nanoseconds = openapi_duration(value)
            return value if nanoseconds is None else _timedelta(nanoseconds)
        if schema.get("format") == "date-time" and _is_date_time(value):
            return datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
        return value
    if isinstance(value, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        return {k: cel_value(props.get(k, extra if isinstance(extra, dict) else None), v) for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [cel_value(schema["items"], item) for item in value]
    return value


FUNCTIONS: dict[str, Callable[..., Any]] = {DURATION_FUNCTION: _duration}
"""Kubernetes' CEL functions the library lacks or has with other semantics, by the name rules
call after rewriting."""


@functools.cache
def compiled(rule: str) -> Any:
    """A rule compiled once (ValueError for one that does not parse)."""
    return cel.compile(_rewrite(rule))


def evaluate(rule: str, self_value: Any) -> Any:
    """A rule's value with `self` bound; RuleError with the API server's words when it fails."""
    program = compiled(rule)
    token = _failure.set(None)
    try:
        return program.execute(cel.Context(variables={"self": self_value}, functions=FUNCTIONS))
    except KeyError as exc:
        raise RuleError(f"no such key: {exc.args[0] if exc.args else ''}") from None
    except Exception as exc:
        raise RuleError(_failure.get() or str(exc)) from None
    finally:
        _failure.reset(token)


def _rules(schema: dict[str, Any], value: Any, path: str) -> list[Problem]:
    errors: list[Problem] = []
    if value is None:
        return errors
    for rule in schema.get("x-kubernetes-validations", []):
        text = rule["rule"]
        if is_transition_rule(text):
            continue
        message = rule.get("message") or f"failed rule: {text}"
        where = path + str(rule.get("fieldPath", "")) if rule.get("fieldPath") else path
        kind = _type(schema) or _json_type(value)
        try:
            ok = evaluate(text, cel_value(schema, value))
        except RuleError as exc:
            errors.append(Problem(where, f"Invalid value: {_quote(kind)}: {exc} evaluating rule: {message}"))
            continue
        if ok is not True:
            errors.append(_rule_error(where, kind, rule.get("reason"), message))
    if isinstance(value, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for name in sorted(value):
            sub = props.get(name, extra if isinstance(extra, dict) else None)
            if sub is not None:
                errors += _rules(sub, value[name], _join(path, name))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            errors += _rules(schema["items"], item, f"{path}[{index}]")
    return errors


def _rule_error(path: str, kind: str, reason: str | None, message: str) -> Problem:
    if reason == "FieldValueForbidden":
        return Problem(path, f"Forbidden: {message}", rule=True)
    if reason == "FieldValueRequired":
        return Problem(path, f"Required value: {message}", rule=True)
    if reason == "FieldValueDuplicate":
        return Problem(path, f"Duplicate value: {_quote(kind)}: {message}", rule=True)
    return Problem(path, f"Invalid value: {_quote(kind)}: {message}", rule=True)


def rules() -> Iterator[tuple[Schema, str, dict[str, Any]]]:
    """Every CEL rule of every kind: (its schema, the path of its node such as
    `.spec.rules[].candidateSelectors[]`, the rule)."""
    for found in schemas().values():
        yield from ((found, path, rule) for path, rule in _walk_rules(found.openapi, ""))


def _walk_rules(node: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if not isinstance(node, dict):
        return
    for rule in node.get("x-kubernetes-validations", []):
        yield path, rule
    for name, prop in node.get("properties", {}).items():
        yield from _walk_rules(prop, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _walk_rules(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk_rules(node["additionalProperties"], f"{path}{{}}")
