"""Which job integrations run, and for which namespaces (Kueue's jobframework setup,
pkg/controller/jobframework/setup.go, and its managedJobsNamespaceSelector, v0.19.2).

- An enabled integration whose kind is served by a CRD (`Integration.crd`) starts once that CRD
  is Established: a missing CRD is not an error, it is watched for (one field-selected watch of
  `customresourcedefinitions` per missing integration, no polling) and the integration's informer
  starts when it appears. Kueue likewise defers the controller of a framework whose API is not
  served yet (and registers its webhook at once).
- The managed-jobs namespace selector: jobs in a namespace it does not match are left alone, by
  the job controller (Kueue's reconciler checks it first, for every integration, since the
  ManagedJobsNamespaceSelectorAlwaysRespected gate went GA in v0.19) and by the webhooks (the
  selector is their configurations' `namespaceSelector`, as Kueue's manifests set it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from ..api.kinds import Kind
from ..api.meta import LabelSelector, LabelSelectorRequirement
from ..engine import selectors
from ..jobs.framework import Integration

log = logging.getLogger(__name__)

CustomResourceDefinition = Kind(
    "CustomResourceDefinition", "apiextensions.k8s.io", "v1", "customresourcedefinitions", False
)
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
SYSTEM_NAMESPACE = "kube-system"


def established(crd: Mapping[str, Any], version: str) -> bool:
    """Whether a CRD serves `version` of its kind now: Established, with that version served."""
    status = crd.get("status") or {}
    if not any(c.get("type") == "Established" and c.get("status") == "True" for c in status.get("conditions") or []):
        return False
    versions = (crd.get("spec") or {}).get("versions") or []
    return any(v.get("name") == version and v.get("served") for v in versions)


class CrdWatch:
    """An informer handler for one integration's CRD (the informer lists and watches that CRD by
    name): calls `start(integration)` once, when the CRD is Established and serves the
    integration's version. Says once that it waits, and once if the CRD goes away later (the
    integration stays on: its informer treats the kind as empty until it is served again)."""

    def __init__(self, integration: Integration, start: Callable[[Integration], None]) -> None:
        self.integration = integration
        self.start = start
        self.started = False
        self._waiting_said = False
        self._gone_said = False

    @property
    def name(self) -> str:
        return self.integration.crd or ""

    def replace(self, kind: Kind, items: list[dict[str, Any]], resource_version: str) -> None:
        mine = [item for item in items if (item.get("metadata") or {}).get("name") == self.name]
        if mine:
            self._seen(mine[0])
        else:
            self._missing()

    def event(self, kind: Kind, event_type: str, obj: dict[str, Any]) -> None:
        if (obj.get("metadata") or {}).get("name") != self.name:
            return
        if event_type == "DELETED":
            self._missing()
        else:
            self._seen(obj)

    def _seen(self, crd: Mapping[str, Any]) -> None:
        if self.started:
            self._gone_said = False
            return
        if not established(crd, self.integration.kind.version):
            self._wait(f"installed but not Established (or not serving {self.integration.kind.version}) yet")
            return
        self.started = True
        log.info("CRD %s is Established: the %s integration starts", self.name, self.integration.framework)
        self.start(self.integration)

    def _missing(self) -> None:
        if not self.started:
            self._wait("not installed")
        elif not self._gone_said:
            self._gone_said = True
            log.warning(
                "CRD %s was deleted: the %s integration stays on, its %s counted as none until the CRD is back",
                self.name,
                self.integration.framework,
                self.integration.kind.plural,
            )

    def _wait(self, why: str) -> None:
        if not self._waiting_said:
            self._waiting_said = True
            log.info(
                "the %s integration waits for its CRD %s (%s): it starts when the CRD is Established",
                self.integration.framework,
                self.name,
                why,
            )


# -- the managed-jobs namespace selector ---------------------------------------------------------


def default_namespace_selector(own_namespace: str) -> LabelSelector:
    """Kueue's default managedJobsNamespaceSelector (apis/config/v1beta2/defaults.go): every
    namespace but kube-system and the operator's own."""
    return LabelSelector(
        match_expressions=[
            LabelSelectorRequirement(
                key=NAMESPACE_NAME_LABEL, operator="NotIn", values=[SYSTEM_NAMESPACE, own_namespace]
            )
        ]
    )


def namespace_selector(selector: LabelSelector, own_namespace: str) -> selectors.Selector:
    """The selector built, or ValueError as Kueue's configuration validation words it
    (pkg/config/validation.go, validateManagedJobsNamespaceSelector): it must leave kube-system
    and the operator's own namespace out."""
    built = selectors.build(selector, nil=selectors.EVERYTHING)
    for name in dict.fromkeys((SYSTEM_NAMESPACE, own_namespace)):
        if name and built.matches({NAMESPACE_NAME_LABEL: name}):
            raise ValueError(f'should not match the "{name}" namespace')
    return built
