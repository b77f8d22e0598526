"""Kubernetes objects as the engine reads them: which kinds and versions, and parsing into the
API models with errors that name the object and the field."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from . import kinds
from .meta import PATTERN_WORDS, path_part
from .quantity import show


class ObjectError(ValueError):
    """An object that cannot be used, with a message naming the object and field."""


def object_ref(body: dict[str, Any]) -> str:
    meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    name = meta.get("name", "<unnamed>") if meta else "<unnamed>"
    namespace = meta.get("namespace") if meta else None
    kind = body.get("kind", "<no kind>")
    return f"{kind} {_short(namespace) + '/' if namespace else ''}{_short(name)}"


def _short(name: object) -> str:
    """A name as messages show it: over the longest valid name (253), cut and measured."""
    text = str(name)
    return text if len(text) <= 253 else f"{text[:40]}...({len(text)} characters)"


def parse_object(body: dict[str, Any]) -> Any:
    """Validates a Kubernetes object against the models; raises ObjectError naming the field."""
    if not isinstance(body, dict):
        raise ObjectError(f"expected a Kubernetes object (a mapping), got {type(body).__name__}")
    api_version = body.get("apiVersion")
    kind = body.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        raise ObjectError(f"{object_ref(body)}: apiVersion and kind are required")
    group, _, version = api_version.rpartition("/")
    found = kinds.BY_GROUP.get((group, kind))
    if found is None:
        raise ObjectError(f"{object_ref(body)}: unsupported kind {kind} in {api_version}")
    if version != found.version:
        raise ObjectError(f"{object_ref(body)}: unsupported version {api_version} (supported: {found.api_version})")
    model = kinds.MODELS[found]
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        # Every value the engine computes with was checked here (quantities, counts, durations,
        # times, names): past this point nothing about the object can make the engine raise.
        problems = "; ".join(describe(err) for err in exc.errors())
        raise ObjectError(f"{object_ref(body)}: {problems}") from None


def field_path(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as Kubernetes writes field paths: spec.podSets[0].count, and map
    keys that are not plain words in brackets: requests[nvidia.com/gpu]."""
    path = "".join(path_part(part) for part in loc).removeprefix(".")
    return path or "<root>"


_KINDS_OF_VALUE = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "dict_type": "an object (a mapping)",
    "model_type": "an object (a mapping)",
    "model_attributes_type": "an object (a mapping)",
    "list_type": "a list",
}
_TIME_EXAMPLE = "an RFC 3339 time such as 2026-01-01T00:00:00Z"


def describe(err: ErrorDetails) -> str:
    """One validation error as `field.path: what is wrong`, naming the value and the limit in words
    (never the regular expression of a pattern)."""
    path, kind, ctx, value = field_path(err["loc"]), err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "kube_field":
        sub = str(ctx["field"])
        path = sub if path == "<root>" else path + (sub if sub.startswith("[") else f".{sub}")
        return f"{path}: {ctx['problem']}"
    return f"{path}: {_message(kind, ctx, value, err['msg'])}"


def _message(kind: str, ctx: dict[str, Any], value: Any, msg: str) -> str:
    if kind == "kube_value":
        return str(ctx["problem"])
    if kind == "value_error":
        return msg.removeprefix("Value error, ")
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "string_pattern_mismatch":
        return f"{show(value)} is not {PATTERN_WORDS.get(str(ctx.get('pattern')), 'in the expected form')}"
    if kind == "string_too_long":
        return f"{show(value)} is too long: at most {ctx['max_length']} characters"
    if kind == "string_too_short":
        return f"{show(value)} is too short: at least {ctx['min_length']} characters"
    if kind == "too_long":
        return f"{_length(ctx, value)} items are too many: at most {ctx['max_length']}"
    if kind == "too_short":
        return f"{_length(ctx, value)} items are too few: at least {ctx['min_length']}"
    if kind in ("less_than_equal", "less_than", "greater_than_equal", "greater_than"):
        return f"{msg}, got {show(value)}"  # pydantic's words state the bound
    if kind == "literal_error":
        return f"{show(value)} is not one of {ctx.get('expected')}"
    if kind == "timezone_aware":
        return f"{show(value)} has no time zone: write {_TIME_EXAMPLE}"
    if kind.startswith(("datetime_", "date_")):
        return f"{show(value)} is not {_TIME_EXAMPLE}"
    if kind in _KINDS_OF_VALUE:
        return f"{show(value)} is not {_KINDS_OF_VALUE[kind]}"
    return msg


def _length(ctx: dict[str, Any], value: Any) -> Any:
    """The count pydantic reports, or (a mapping's, which it leaves out) the value's own."""
    actual = ctx.get("actual_length")
    if actual is None and isinstance(value, (dict, list)):
        return len(value)
    return actual


def is_read(body: dict[str, Any]) -> bool:
    """Whether the engine reads objects of this kind (in any version of its group)."""
    api_version, kind = body.get("apiVersion"), body.get("kind")
    group = api_version.rpartition("/")[0] if isinstance(api_version, str) else ""
    return isinstance(kind, str) and (group, kind) in kinds.BY_GROUP
