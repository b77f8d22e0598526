"""Types shared by every API version: the base model, object metadata, conditions, selectors, quantities."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    Strict,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel, to_snake
from pydantic.config import JsonDict
from pydantic_core import PydanticCustomError

from .duration import MAX_DURATION, MAX_DURATION_TEXT
from .quantity import (
    NON_NEGATIVE_QUANTITY_PATTERN,
    QUANTITY_PATTERN,
    QuantityError,
    checked_amount,
    parse_quantity,
    show,
    too_large,
)

GROUP = "kueue.x-k8s.io"


def problem(message: str) -> PydanticCustomError:
    """A validation error whose message is `message` as it is (no "Value error, " prefix)."""
    return PydanticCustomError("kube_value", "{problem}", {"problem": message})


def field_problem(subpath: str, message: str) -> PydanticCustomError:
    """An error about a field below the one being validated (`requests.cpu`, `count`), for checks
    that need a whole object: parse_object appends `subpath` to the error's location."""
    return PydanticCustomError("kube_field", "{field}: {problem}", {"field": subpath, "problem": message})


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")


def path_part(key: str | int) -> str:
    """One step of a field path as Kubernetes writes it: `.name`, `[0]`, and a map key that is not a
    plain word in brackets: `requests[nvidia.com/gpu]`."""
    return f"[{key}]" if isinstance(key, int) or not _PLAIN_KEY.fullmatch(key) else f".{key}"


class KubeModel(BaseModel):
    """Wire names in camelCase; unknown fields rejected, as a structural schema with strict
    field validation rejects them."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
    )

    @model_validator(mode="after")
    def _unique_list_keys(self) -> Self:
        """Entries of a list-map (or a set) must be unique, as the API server requires."""
        for name, keys, attributes in _list_keys(type(self)):
            items = getattr(self, name)
            if not items or len(items) == 1:
                continue
            seen: set[Any] = set()
            for item in items:
                key = item if attributes is None else tuple(getattr(item, a, None) for a in attributes)
                if key in seen:
                    shown = key if keys is None else ", ".join(f"{k}={v}" for k, v in zip(keys, key, strict=True))
                    raise ValueError(f"{to_camel(name)}: duplicate entry ({shown})")
                seen.add(key)
        return self

    def to_wire(self) -> dict[str, Any]:
        """The object as the API server stores it: camelCase, unset fields left out."""
        return self.model_dump(by_alias=True, exclude_unset=True, mode="json")


@functools.cache
def _list_keys(
    model: type[BaseModel],
) -> tuple[tuple[str, tuple[str, ...] | None, tuple[str, ...] | None], ...]:
    """(field, map keys, their attribute names) for list-map fields, (field, None, None) for
    sets. Cached per model: every instance of every model is checked, so the names are worked out
    once."""
    found: list[tuple[str, tuple[str, ...] | None, tuple[str, ...] | None]] = []
    for name, info in model.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        kind = extra.get("x-kubernetes-list-type")
        if kind == "map":
            keys = extra.get("x-kubernetes-list-map-keys")
            if isinstance(keys, list):
                names = tuple(str(k) for k in keys)
                found.append((name, names, tuple(to_snake(k) for k in names)))
            else:
                found.append((name, None, None))
        elif kind == "set":
            found.append((name, None, None))
    return tuple(found)


class OpenModel(KubeModel):
    """A model that keeps fields it does not know (Kubernetes types we only partly read)."""

    model_config = ConfigDict(extra="allow")


def crd_default(value: Any, *, default_factory: Any = None, **kwargs: Any) -> Any:
    """A field default the CRD schema declares too, so the API server fills it in.

    `value` is what the CRD says; `default_factory`, when given, builds the Python default."""
    extra: JsonDict = {"x-crd-default": [value]}
    if default_factory is not None:
        return Field(default_factory=default_factory, json_schema_extra=extra, **kwargs)
    return Field(default=value, json_schema_extra=extra, **kwargs)


def cel(*rules: tuple[str, str]) -> dict[str, Any]:
    """`x-kubernetes-validations` for a model or field: (rule, message) pairs."""
    return {"x-kubernetes-validations": [{"rule": rule, "message": message} for rule, message in rules]}


def list_map(*keys: str) -> dict[str, Any]:
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


LIST_SET: dict[str, Any] = {"x-kubernetes-list-type": "set"}
LIST_ATOMIC: dict[str, Any] = {"x-kubernetes-list-type": "atomic"}

DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# A reference to a cluster object by name (a DNS subdomain), as Kueue's *Reference types.
DNSName = Annotated[str, Field(max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"

# What each pattern means, for error messages (a regular expression is no help to a user).
PATTERN_WORDS = {
    DNS_SUBDOMAIN_PATTERN: "a DNS subdomain: lowercase letters, digits, '-' and '.', "
    "starting and ending with a letter or digit",
    DNS_LABEL_PATTERN: "a DNS label: lowercase letters, digits and '-', starting and ending with a letter or digit",
    LABEL_KEY_PATTERN: "a label key such as example.com/tier: an optional DNS prefix and '/', then letters, "
    "digits, '-', '_' and '.', starting and ending with a letter or digit",
    CONDITION_REASON_PATTERN: "a CamelCase reason: letters, digits, '_', ',' and ':', starting with a letter",
}

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def _int32_range(value: Any) -> Any:
    # Before the bounds of the schema, so the message says why (an int32 field), not just the bound.
    if isinstance(value, int) and not isinstance(value, bool) and not INT32_MIN <= value <= INT32_MAX:
        raise problem(f"{show(value)} does not fit in a 32-bit integer ({INT32_MIN} to {INT32_MAX})")
    return value


def int32(*, ge: int = INT32_MIN) -> Any:
    """The Field of an int32 (Kueue's type): the type's bounds go into the CRD, as `maximum` and
    (unless `ge` is stricter) `minimum`; the API server does not check `format: int32` itself."""
    return Field(ge=ge, le=INT32_MAX, json_schema_extra={"format": "int32"})


# The range check comes last, so it runs first (before the bounds and strictness).
Int32 = Annotated[int, Strict(), int32(), BeforeValidator(_int32_range)]
Int64 = Annotated[int, Strict(), Field(json_schema_extra={"format": "int64"})]


def _count(ge: int) -> Any:
    return Annotated[int, Strict(), int32(ge=ge), BeforeValidator(_int32_range)]


NonNegativeInt32 = _count(0)
PositiveInt32 = _count(1)


def _quantity(value: Any) -> Any:
    try:
        parse_quantity(value)
    except QuantityError as exc:
        raise problem(str(exc)) from None
    return value


def _non_negative_quantity(value: Any) -> Any:
    _quantity(value)
    # A leading "-" is refused even on zero, as the CRD's pattern refuses it.
    if (isinstance(value, str) and value.startswith("-")) or parse_quantity(value) < 0:
        raise problem(f"{show(value)} is negative: it must be zero or more")
    return value


_INT_OR_STRING: dict[str, Any] = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "x-kubernetes-int-or-string": True,
}

Quantity = Annotated[
    int | float | str,
    BeforeValidator(_quantity),
    WithJsonSchema({**_INT_OR_STRING, "pattern": QUANTITY_PATTERN}),
]
# Quotas, requests, limits, overhead, usage: the API server rejects a negative one with the
# pattern (strings) and `minimum` (integers); both are allowed on an int-or-string field.
NonNegativeQuantity = Annotated[
    int | float | str,
    BeforeValidator(_non_negative_quantity),
    WithJsonSchema({**_INT_OR_STRING, "pattern": NON_NEGATIVE_QUANTITY_PATTERN, "minimum": 0}),
]


def _amounts_fit(resources: dict[str, Any]) -> dict[str, Any]:
    for resource, value in resources.items():
        if checked_amount(resource, value) is None:
            raise field_problem(path_part(resource).removeprefix("."), too_large(resource, value))
    return resources


# A corev1.ResourceList as the scheduler reads it: every amount non-negative and within int64.
ResourceList = Annotated[dict[str, NonNegativeQuantity], AfterValidator(_amounts_fit)]


def format_time(moment: datetime, digits: int = 0) -> str:
    """How every time is written: RFC 3339 in UTC ("Z"), with `digits` of the second's fraction
    (0 as Kubernetes writes a metav1.Time, 6 for a MicroTime). An offset is converted, never
    relabelled. A naive time has no meaning here: it is refused, not guessed."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{moment.isoformat()} has no time zone")
    utc = moment.astimezone(UTC)
    # Not strftime: its %Y does not pad years below 1000 on every platform.
    text = f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}"
    if digits:
        text += "." + f"{utc.microsecond:06d}"[:digits]
    return text + "Z"


# The engine adds durations of up to Go's longest (about 292 years) to timestamps, and Python's
# datetime ends with the year 9999: later timestamps could not take them.
LATEST_TIME = datetime.max.replace(tzinfo=UTC) - MAX_DURATION


def _time_in_range(value: datetime) -> datetime:
    # Nearly every time the API server sends is in UTC and recent: checked without building the
    # message (every condition of every Workload event passes here).
    if not value.utcoffset() and value <= LATEST_TIME:
        return value
    shown = value.isoformat().replace("+00:00", "Z")
    try:
        utc = value.astimezone(UTC)
    except (OverflowError, ValueError):
        raise problem(f"{shown} is out of range once converted to UTC") from None
    if utc > LATEST_TIME:
        raise problem(
            f"{shown} is too far in the future: durations of up to {MAX_DURATION_TEXT} are added "
            f"to times, so they must be before {format_time(LATEST_TIME)}"
        )
    return value


# A metav1.Time: RFC 3339, so always with a time zone (a naive time cannot be compared with one),
# and written back in UTC as the API server writes it.
Time = Annotated[
    AwareDatetime,
    AfterValidator(_time_in_range),
    PlainSerializer(lambda moment: format_time(moment), return_type=str, when_used="json"),
]


class ObjectMeta(OpenModel):
    """The parts of metav1.ObjectMeta the operator reads; the rest is kept as it is."""

    name: str = ""
    namespace: str | None = None
    uid: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    creation_timestamp: Time | None = None
    generation: int | None = None
    resource_version: str | None = None

    def controller(self) -> tuple[str, str] | None:
        """(apiVersion, kind) of the owner reference marked as controller (a Job for its
        Workload), if any. Read from the fields kept as they are: templates embed ObjectMeta too,
        and their schema must not grow owner references."""
        refs = (self.model_extra or {}).get("ownerReferences")
        for ref in refs if isinstance(refs, list) else []:
            if isinstance(ref, dict) and ref.get("controller") is True:
                return (str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""))
        return None

    def group_owner(self) -> tuple[str, str] | None:
        """(apiVersion, kind) of the members of the group a Workload of a group belongs to (a pod
        group's: annotated `kueue.x-k8s.io/is-group-workload`, owned by every member, none of
        them its controller), if it is one."""
        if (self.annotations or {}).get("kueue.x-k8s.io/is-group-workload") != "true":
            return None
        refs = (self.model_extra or {}).get("ownerReferences")
        for ref in refs if isinstance(refs, list) else []:
            if isinstance(ref, dict) and ref.get("kind"):
                return (str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""))
        return None


def name_problem(meta: ObjectMeta, *, dns_label: bool = False) -> PydanticCustomError | None:
    """What is wrong with an object's name and namespace, as the API server validates them: a
    name is a DNS subdomain (253 characters at most), or a DNS label (63) for Namespaces; a
    namespace is a DNS label."""
    if not meta.name:
        return field_problem("metadata.name", "required: every object needs a name")
    limit, pattern = (63, DNS_LABEL_PATTERN) if dns_label else (253, DNS_SUBDOMAIN_PATTERN)
    for where, value, most, form in (
        ("metadata.name", meta.name, limit, pattern),
        ("metadata.namespace", meta.namespace, 63, DNS_LABEL_PATTERN),
    ):
        if value is None:
            continue
        if len(value) > most:
            return field_problem(where, f"{show(value)} is too long: at most {most} characters")
        if not re.fullmatch(form, value):  # not re.match: "$" would let a trailing newline through
            return field_problem(where, f"{show(value)} is not {PATTERN_WORDS[form]}")
    return None


class LabelSelectorRequirement(KubeModel):
    key: str
    operator: str
    """In, NotIn, Exists or DoesNotExist. A free string, as in Kubernetes: a wrong operator is
    accepted by the API server and reported when the selector is built."""
    values: Annotated[list[str] | None, Field(json_schema_extra=LIST_ATOMIC)] = None


class LabelSelector(KubeModel, json_schema_extra={"x-kubernetes-map-type": "atomic"}):
    """A metav1.LabelSelector: matchLabels and matchExpressions are ANDed."""

    match_labels: dict[str, str] | None = None
    match_expressions: Annotated[list[LabelSelectorRequirement] | None, Field(json_schema_extra=LIST_ATOMIC)] = None


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(KubeModel):
    """A metav1.Condition."""

    type: Annotated[
        str,
        Field(
            max_length=316,
            pattern=LABEL_KEY_PATTERN,
        ),
    ]
    status: ConditionStatus
    reason: Annotated[str, Field(min_length=1, max_length=1024, pattern=CONDITION_REASON_PATTERN)]
    message: Annotated[str, Field(max_length=32768)]
    last_transition_time: Time
    observed_generation: Annotated[int | None, Strict(), Field(ge=0, json_schema_extra={"format": "int64"})] = None


Conditions = Annotated[list[Condition] | None, Field(max_length=16, json_schema_extra=list_map("type"))]


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    type: str
    json_path: str
    description: str = ""
    priority: int = 0


@dataclass(frozen=True)
class CRDInfo:
    """How a top-level kind is served: the facts a CRD carries beyond its schema."""

    kind: str
    plural: str
    singular: str
    scope: Literal["Namespaced", "Cluster"]
    version: str
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ("kueue",)
    status_subresource: bool = True
    printer_columns: tuple[PrinterColumn, ...] = field(default_factory=tuple)
    group: str = GROUP


class TopLevel(KubeModel):
    """A kind served by a CRD of this project."""

    crd: ClassVar[CRDInfo]

    api_version: str
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    @model_validator(mode="after")
    def _valid_name(self) -> Self:
        found = name_problem(self.metadata)
        if found is not None:
            raise found
        return self

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or ""

    @property
    def key(self) -> str:
        """`namespace/name`, or `name` for cluster-scoped kinds."""
        return f"{self.namespace}/{self.name}" if self.crd.scope == "Namespaced" else self.name

    def status_view(self) -> dict[str, Any]:
        """The parts of the object in wire form that a status write reads and sends: identity,
        `metadata.generation` and `resourceVersion`, and the status. Much cheaper than
        `to_wire()` for kinds whose spec is large."""
        meta = self.metadata
        identity = (
            ("name", meta.name),
            ("namespace", meta.namespace),
            ("uid", meta.uid),
            ("generation", meta.generation),
            ("resourceVersion", meta.resource_version),
        )
        view: dict[str, Any] = {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": {k: v for k, v in identity if v is not None},
        }
        status = getattr(self, "status", None)
        if status is not None:
            view["status"] = status.model_dump(by_alias=True, exclude_unset=True, mode="json")
        return view

    def annotation(self, key: str) -> str | None:
        return (self.metadata.annotations or {}).get(key)

    def label(self, key: str) -> str | None:
        return (self.metadata.labels or {}).get(key)
