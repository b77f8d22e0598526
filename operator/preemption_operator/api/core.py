"""Kubernetes core objects the engine reads (Namespace, PriorityClass, Node): parsing models only.

They are served by Kubernetes itself, so no CRD is generated for them.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, Strict

from .meta import ObjectMeta, OpenModel, Quantity


class CoreObject(OpenModel):
    api_version: str
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    @property
    def name(self) -> str:
        return self.metadata.name

    def annotation(self, key: str) -> str | None:
        return (self.metadata.annotations or {}).get(key)


class Namespace(CoreObject):
    pass


class PriorityClass(CoreObject):
    value: Annotated[int, Strict(), Field(ge=-(2**31), le=2**31 - 1)]
    global_default: bool | None = None
    description: str | None = None
    preemption_policy: str | None = None


class NodeSpec(OpenModel):
    unschedulable: bool | None = None
    taints: list[dict[str, Any]] | None = None


class NodeStatus(OpenModel):
    allocatable: dict[str, Quantity] | None = None
    capacity: dict[str, Quantity] | None = None


class Node(CoreObject):
    spec: NodeSpec = Field(default_factory=NodeSpec)
    status: NodeStatus = Field(default_factory=NodeStatus)
