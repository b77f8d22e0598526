"""Kubernetes core objects the engine reads (Namespace, PriorityClass, Node): parsing models only.

They are served by Kubernetes itself, so no CRD is generated for them.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import Field, model_validator

from .meta import Int32, ObjectMeta, OpenModel, ResourceList, Time, name_problem


class CoreObject(OpenModel):
    api_version: str
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    @model_validator(mode="after")
    def _valid_name(self) -> Self:
        found = name_problem(self.metadata, dns_label=self.kind == "Namespace")
        if found is not None:
            raise found
        return self

    @property
    def name(self) -> str:
        return self.metadata.name

    def annotation(self, key: str) -> str | None:
        return (self.metadata.annotations or {}).get(key)


class NamespaceMeta(ObjectMeta):
    deletion_timestamp: Time | None = None


class Namespace(CoreObject):
    metadata: NamespaceMeta = Field(default_factory=NamespaceMeta)

    @property
    def terminating(self) -> bool:
        """Being deleted: the API server refuses new objects (Events included) in it."""
        return self.metadata.deletion_timestamp is not None


class PriorityClass(CoreObject):
    value: Int32
    global_default: bool | None = None
    description: str | None = None
    preemption_policy: str | None = None


class NodeSpec(OpenModel):
    unschedulable: bool | None = None
    taints: list[dict[str, Any]] | None = None


class NodeStatus(OpenModel):
    # The API server rejects negative node resources; the scheduler counts them in int64.
    allocatable: ResourceList | None = None
    capacity: ResourceList | None = None
    conditions: list[dict[str, Any]] | None = None


class Node(CoreObject):
    spec: NodeSpec = Field(default_factory=NodeSpec)
    status: NodeStatus = Field(default_factory=NodeStatus)
