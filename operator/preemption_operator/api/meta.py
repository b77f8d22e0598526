"""Types shared by every API version: the base model, object metadata, conditions, selectors, quantities."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, WithJsonSchema, model_validator
from pydantic.alias_generators import to_camel, to_snake
from pydantic.config import JsonDict

from .quantity import QUANTITY_PATTERN, QuantityError, parse_quantity

GROUP = "kueue.x-k8s.io"


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
        for name, keys in _list_keys(type(self)):
            items = getattr(self, name)
            if not items:
                continue
            seen: set[Any] = set()
            for item in items:
                key = item if keys is None else tuple(getattr(item, to_snake(k), None) for k in keys)
                if key in seen:
                    shown = key if keys is None else ", ".join(f"{k}={v}" for k, v in zip(keys, key, strict=True))
                    raise ValueError(f"{to_camel(name)}: duplicate entry ({shown})")
                seen.add(key)
        return self

    def to_wire(self) -> dict[str, Any]:
        """The object as the API server stores it: camelCase, unset fields left out."""
        return self.model_dump(by_alias=True, exclude_unset=True, mode="json")


@functools.cache
def _list_keys(model: type[BaseModel]) -> tuple[tuple[str, tuple[str, ...] | None], ...]:
    """(field, map keys) for list-map fields, (field, None) for sets."""
    found = []
    for name, info in model.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        kind = extra.get("x-kubernetes-list-type")
        if kind == "map":
            keys = extra.get("x-kubernetes-list-map-keys")
            found.append((name, tuple(str(k) for k in keys) if isinstance(keys, list) else None))
        elif kind == "set":
            found.append((name, None))
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

# A reference to a cluster object by name (a DNS subdomain), as Kueue's *Reference types.
DNSName = Annotated[
    str, Field(max_length=253, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
]
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)

Int32 = Annotated[int, Strict(), Field(ge=-(2**31), le=2**31 - 1, json_schema_extra={"format": "int32"})]
Int64 = Annotated[int, Strict(), Field(json_schema_extra={"format": "int64"})]


def _quantity(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError("must be a quantity such as 2, 500m or 4Gi")
    try:
        parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from exc
    return value


Quantity = Annotated[
    int | float | str,
    BeforeValidator(_quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    ),
]


class ObjectMeta(OpenModel):
    """The parts of metav1.ObjectMeta the operator reads; the rest is kept as it is."""

    name: str = ""
    namespace: str | None = None
    uid: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    creation_timestamp: datetime | None = None
    generation: int | None = None
    resource_version: str | None = None


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
            pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        ),
    ]
    status: ConditionStatus
    reason: Annotated[str, Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")]
    message: Annotated[str, Field(max_length=32768)]
    last_transition_time: datetime
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

    def annotation(self, key: str) -> str | None:
        return (self.metadata.annotations or {}).get(key)

    def label(self, key: str) -> str | None:
        return (self.metadata.labels or {}).get(key)
