"""Parsing benchmark: what one Workload costs between the JSON bytes and the engine's WorkloadInfo,
today (pydantic validation of the full model, then build_info) and on a lean path prototyped here.

    python benchmarks/parsing.py [--objects 10000] [--offline] [--output PATH]

The bodies are real: etcd + kube-apiserver are started (KUBEBUILDER_ASSETS or
hack/setup-envtest.sh's cache), crds/ installed, four kinds of Workload created and their status
written, and each read back as the API server returns it (managedFields included). `--offline`
builds the same objects here instead, with a managedFields made up to look like the server's (and
says so in the results).

Paths measured, per object:

- decode only: msgspec / orjson / json (stdlib) into dicts;
- full (today): msgspec decode, `parse_object` (pydantic validation of the whole model), then
  `build_info`; and pydantic straight from the JSON bytes (`Workload.model_validate_json`);
- lean (a prototype, in this file only): `msgspec.json.decode(body, type=LeanWorkload)` into
  Structs that declare only the fields the engine reads (everything else, managedFields and the
  pod templates' other fields among it, is skipped while decoding), then the checks msgspec's
  types cannot express (quantities, int64 totals, names, times, unique list keys), then the
  engine's own, unchanged `build_info`: the Structs carry the models' attribute names, so it
  reads them as it reads the pydantic models.

Both paths must give the same WorkloadInfo for every body (checked), and invalid bodies are fed to
both (the table says which each refuses). Memory per 10k cached objects is measured with
tracemalloc. orjson is not a dependency of the operator: `pip install -e '.[bench]'`. Results are
printed and written to benchmarks/results/parsing.md; every figure in it is measured in that run.
This measures; nothing here is a test.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import platform
import statistics
import time
import tracemalloc
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import orjson
from msgspec import Meta, Struct

ROOT = Path(__file__).resolve().parents[1]

from preemption_operator.api import v1beta2  # noqa: E402
from preemption_operator.api.meta import (  # noqa: E402
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    INT32_MAX,
    INT32_MIN,
    LATEST_TIME,
    name_problem,
)
from preemption_operator.api.objects import ObjectError, parse_object  # noqa: E402
from preemption_operator.api.quantity import (  # noqa: E402
    QuantityError,
    checked_amount,
    fits_int64,
    format_amount,
    parse_quantity,
    to_amount,
)
from preemption_operator.engine.workload import PriorityClassInfo, WorkloadInfo, build_info  # noqa: E402

NS = "bench"
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
CLUSTER_QUEUE = "team-a-cq"
QUEUE = "team-a"
PRIORITY_CLASS = "batch-high"
PRIORITY_CLASSES = {
    ("WorkloadPriorityClass", PRIORITY_CLASS): PriorityClassInfo(PRIORITY_CLASS, "WorkloadPriorityClass", 1000),
}
RESERVED_AT = "2026-01-01T10:00:05Z"

# ---------------------------------------------------------------------------------------------
# Realistic Workloads: as Kueue's job integration creates them from a batch/v1 Job (the Job's pod
# template, defaulted, with an owner reference), and the statuses Kueue and this operator write.
# benchmarks/http_clients.py uses the same bodies.

VARIANTS = ("pending", "admitted", "admitted-3-podsets", "requeued")
"""pending: 1 pod set, QuotaReserved=False; admitted: the same, admitted; admitted-3-podsets:
launcher + workers (two containers and an init container) + parameter servers, admitted;
requeued: pending again after a preemption (Evicted, Preempted, Requeued, schedulingStats)."""


def _container(name: str, cpu: str, memory: str, gpu: int = 0) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    if gpu:
        requests["nvidia.com/gpu"] = str(gpu)
    return {
        "name": name,
        "image": f"registry.example.com/ml/{name}:v1.4.2",
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", f"jobs.{name}"],
        "args": ["--epochs", "10", "--batch-size", "256", "--checkpoint-dir", "/data/checkpoints"],
        "env": [
            {"name": "MODE", "value": "train"},
            {"name": "DATA_DIR", "value": "/data"},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
        ],
        "resources": {"requests": dict(requests), "limits": dict(requests)},
        "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }


def _pod_set(name: str, count: int, containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None) -> Any:
    spec: dict[str, Any] = {
        "containers": containers,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "training-data"}}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "nodeSelector": {"node-pool": "batch"},
    }
    if init:
        spec["initContainers"] = init
    return {
        "name": name,
        "count": count,
        "template": {"metadata": {"labels": {"app": "trainer", "role": name}}, "spec": spec},
    }


def _pod_sets(variant: str) -> list[dict[str, Any]]:
    if variant == "admitted-3-podsets":
        return [
            _pod_set("launcher", 1, [_container("launcher", "1", "2Gi")]),
            _pod_set(
                "worker",
                8,
                [_container("trainer", "4", "16Gi", gpu=1), _container("sidecar", "250m", "256Mi")],
                init=[_container("fetch-data", "1", "1Gi")],
            ),
            _pod_set("ps", 2, [_container("ps", "2", "8Gi")]),
        ]
    return [_pod_set("main", 4, [_container("trainer", "2", "4Gi")])]


def workload_body(name: str, variant: str, namespace: str = NS) -> dict[str, Any]:
    """The Workload as created (no status: the status subresource ignores it on create)."""
    job_uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"job/{namespace}/{name}"))
    return {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/job-uid": job_uid, "kueue.x-k8s.io/queue-name": QUEUE},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": name.removeprefix("job-"),
                    "uid": job_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "finalizers": ["kueue.x-k8s.io/resource-in-use"],
        },
        "spec": {
            "queueName": QUEUE,
            "priorityClassRef": {"group": GROUP, "kind": "WorkloadPriorityClass", "name": PRIORITY_CLASS},
            "priority": 1000,
            "active": True,
            "podSets": _pod_sets(variant),
        },
    }


def _condition(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": RESERVED_AT,
        "observedGeneration": 1,
    }


def _assignment(pod_set: dict[str, Any]) -> dict[str, Any]:
    spec = pod_set["template"]["spec"]
    per_pod: dict[str, int] = {}
    for container in spec["containers"]:
        for resource, quantity in container["resources"]["requests"].items():
            per_pod[resource] = per_pod.get(resource, 0) + to_amount(resource, quantity)
    for container in spec.get("initContainers") or []:
        for resource, quantity in container["resources"]["requests"].items():
            per_pod[resource] = max(per_pod.get(resource, 0), to_amount(resource, quantity))
    count = pod_set["count"]
    return {
        "name": pod_set["name"],
        "flavors": {resource: "gpu-a100" if "gpu" in resource else "default-flavor" for resource in per_pod},
        "resourceUsage": {resource: format_amount(resource, amount * count) for resource, amount in per_pod.items()},
        "count": count,
    }


def workload_status(variant: str, note: str = "") -> dict[str, Any]:
    """The status as Kueue (or this operator) writes it; `note` ends every message (a write that
    changes nothing else still changes the object)."""
    if variant == "pending":
        return {
            "conditions": [
                _condition(
                    "QuotaReserved",
                    "False",
                    "Pending",
                    "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
                    f"default-flavor, 8 more needed{note}",
                )
            ]
        }
    if variant == "requeued":
        return {
            "conditions": [
                _condition("QuotaReserved", "False", "Pending", f"Preempted to accommodate a workload{note}"),
                _condition("Evicted", "True", "Preempted", f"Preempted to accommodate a workload{note}"),
                _condition("Preempted", "True", "InClusterQueue", f"Preempted to accommodate a workload{note}"),
                _condition("Requeued", "True", "Preempted", f"Preempted to accommodate a workload{note}"),
            ],
            "requeueState": {"count": 1, "requeueAt": "2026-01-01T10:05:00Z"},
            "schedulingStats": {
                "evictions": [{"reason": "Preempted", "underlyingCause": "InClusterQueue", "count": 1}]
            },
            "accumulatedPastExecutionTimeSeconds": 1800,
        }
    pod_sets = _pod_sets(variant)
    return {
        "conditions": [
            _condition(
                "QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {CLUSTER_QUEUE}{note}"
            ),
            _condition("Admitted", "True", "Admitted", f"The workload is admitted{note}"),
        ],
        "admission": {"clusterQueue": CLUSTER_QUEUE, "podSetAssignments": [_assignment(ps) for ps in pod_sets]},
    }


def offline_body(name: str, variant: str) -> dict[str, Any]:
    """What the API server would return, made here: server-set metadata and a managedFields
    shaped like the server's (one Update by the creator, one by the status writer)."""
    body = workload_body(name, variant)
    body["metadata"].update(
        uid=str(uuid.uuid5(uuid.NAMESPACE_URL, f"wl/{name}")),
        resourceVersion="123456",
        generation=1,
        creationTimestamp="2026-01-01T10:00:00Z",
        managedFields=[
            {
                "manager": "kueue",
                "operation": "Update",
                "apiVersion": API_VERSION,
                "time": "2026-01-01T10:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:finalizers": {".": {}, 'v:"kueue.x-k8s.io/resource-in-use"': {}}}},
            },
            {
                "manager": "kueue-admission",
                "operation": "Update",
                "apiVersion": API_VERSION,
                "time": RESERVED_AT,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {".": {}, "f:conditions": {}}},
                "subresource": "status",
            },
        ],
    )
    body["status"] = workload_status(variant)
    return body


def _server_bodies() -> tuple[dict[str, bytes], str]:
    from lightkube import KubeConfig
    from lightkube.config import client_adapter

    from preemption_operator.testing.control_plane import running_control_plane

    with running_control_plane() as plane:
        plane.kubectl("create", "namespace", NS, check=True)
        config = KubeConfig.from_file(str(plane.kubeconfig)).get()
        with client_adapter.Client(config, client_adapter.ConnectionParams()) as http:
            bodies: dict[str, bytes] = {}
            path = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/workloads"
            for variant in VARIANTS:
                name = f"job-{variant}"
                http.post(
                    path,
                    params={"fieldManager": "kueue"},
                    content=msgspec.json.encode(workload_body(name, variant)),
                    headers={"Content-Type": "application/json"},
                ).raise_for_status()
                http.patch(
                    f"{path}/{name}/status",
                    params={"fieldManager": "kueue-admission"},
                    content=msgspec.json.encode([{"op": "add", "path": "/status", "value": workload_status(variant)}]),
                    headers={"Content-Type": "application/json-patch+json"},
                ).raise_for_status()
                response = http.get(f"{path}/{name}", headers={"Accept": "application/json"})
                response.raise_for_status()
                bodies[variant] = response.content
            version = msgspec.json.decode(http.get("/version").content).get("gitVersion", "?")
    return bodies, f"kube-apiserver {version} on loopback (read back with GET)"


def load_bodies(offline: bool) -> tuple[dict[str, bytes], str]:
    if offline:
        made = {v: msgspec.json.encode(offline_body(f"job-{v}", v)) for v in VARIANTS}
        return made, "built by this script (--offline): server-set metadata and managedFields made up"
    return _server_bodies()


# ---------------------------------------------------------------------------------------------
# The lean path: msgspec Structs with only what the engine reads, under the pydantic models'
# attribute names, so that the engine's build_info (and WorkloadInfo's properties) read them as
# they read the models. Unknown fields are skipped while decoding, never kept.

Int32 = Annotated[int, Meta(ge=INT32_MIN, le=INT32_MAX)]
NonNegativeInt32 = Annotated[int, Meta(ge=0, le=INT32_MAX)]
PositiveInt32 = Annotated[int, Meta(ge=1, le=INT32_MAX)]
AwareTime = Annotated[datetime, Meta(tz=True)]
DNSName = Annotated[str, Meta(max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
ShortName = Annotated[str, Meta(max_length=63)]
QuantityValue = int | float | str
Quantities = dict[str, QuantityValue]


class _Lean(Struct, rename="camel", omit_defaults=True):
    pass


class LeanMeta(_Lean):
    name: str = ""
    namespace: str | None = None
    uid: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    creation_timestamp: AwareTime | None = None
    generation: int | None = None
    resource_version: str | None = None


class LeanResources(_Lean):
    requests: Quantities | None = None
    limits: Quantities | None = None


class LeanContainer(_Lean):
    name: str = ""
    resources: LeanResources | None = None


class LeanPodSpec(_Lean):
    containers: list[LeanContainer] = []
    init_containers: list[LeanContainer] | None = None
    node_selector: dict[str, str] | None = None
    overhead: Quantities | None = None

    amounts_per_pod = v1beta2.PodSpec.amounts_per_pod  # the model's own code, reading these fields


class LeanTemplate(_Lean):
    spec: LeanPodSpec = msgspec.field(default_factory=LeanPodSpec)


class LeanTopologyRequest(_Lean):
    required: ShortName | None = None
    preferred: ShortName | None = None
    unconstrained: bool | None = None


class LeanPodSet(_Lean):
    template: LeanTemplate
    name: Annotated[str, Meta(max_length=63, pattern=DNS_LABEL_PATTERN)] = "main"
    count: NonNegativeInt32 = 1
    min_count: PositiveInt32 | None = None
    topology_request: LeanTopologyRequest | None = None


class LeanPriorityClassRef(_Lean):
    group: Literal["kueue.x-k8s.io", "scheduling.k8s.io"]
    kind: Literal["WorkloadPriorityClass", "PriorityClass"]
    name: Annotated[str, Meta(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]


class LeanGate(_Lean):
    name: Annotated[str, Meta(min_length=1, max_length=63)]


class LeanSpec(_Lean):
    pod_sets: Annotated[list[LeanPodSet], Meta(min_length=1, max_length=8)]
    queue_name: DNSName | None = None
    priority_class_ref: LeanPriorityClassRef | None = None
    priority: Int32 | None = None
    active: bool = True
    preemption_gates: Annotated[list[LeanGate], Meta(max_length=8)] | None = None


class LeanCondition(_Lean):
    type: Annotated[str, Meta(max_length=316)]
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str
    last_transition_time: AwareTime
    observed_generation: Annotated[int, Meta(ge=0)] | None = None


class LeanTopologyAssignment(_Lean):
    """Kept as the wire has it (TAS placement reads it through to_wire(), as from the model)."""

    levels: list[str]
    slices: list[dict[str, Any]]

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = msgspec.to_builtins(self)
        return wire


class LeanAssignment(_Lean):
    name: ShortName = "main"
    flavors: dict[str, DNSName] | None = None
    resource_usage: Quantities | None = None
    count: NonNegativeInt32 | None = None
    topology_assignment: LeanTopologyAssignment | None = None


class LeanAdmission(_Lean):
    cluster_queue: DNSName
    pod_set_assignments: Annotated[list[LeanAssignment], Meta(max_length=8)] = []


class LeanReclaimable(_Lean):
    name: Annotated[str, Meta(max_length=63, pattern=DNS_LABEL_PATTERN)]
    count: NonNegativeInt32


class LeanGateState(_Lean):
    name: Annotated[str, Meta(min_length=1, max_length=63)]
    position: Literal["Closed", "Open"]
    last_transition_time: AwareTime


class LeanStatus(_Lean):
    conditions: Annotated[list[LeanCondition], Meta(max_length=16)] | None = None
    admission: LeanAdmission | None = None
    reclaimable_pods: Annotated[list[LeanReclaimable], Meta(max_length=18)] | None = None
    accumulated_past_execution_time_seconds: Int32 | None = None
    preemption_gates: Annotated[list[LeanGateState], Meta(max_length=8)] | None = None


class LeanWorkload(_Lean):
    api_version: str
    kind: str
    spec: LeanSpec
    metadata: LeanMeta = msgspec.field(default_factory=LeanMeta)
    status: LeanStatus | None = None


_lean_decoder = msgspec.json.Decoder(LeanWorkload)


class LeanError(ValueError):
    pass


def _unique(items: list[Any] | None, what: str, key: Callable[[Any], Any]) -> None:
    if items:
        keys = [key(item) for item in items]
        if len(set(keys)) != len(keys):
            raise LeanError(f"{what}: duplicate entry")


def _quantities(values: Quantities | None, what: str) -> None:
    """Non-negative, a valid quantity, within int64 once counted (as the models' ResourceList)."""
    for resource, value in (values or {}).items():
        try:
            exact = parse_quantity(value)
        except QuantityError as exc:
            raise LeanError(f"{what}[{resource}]: {exc}") from None
        if (isinstance(value, str) and value.startswith("-")) or exact < 0:
            raise LeanError(f"{what}[{resource}]: negative")
        if checked_amount(resource, value) is None:
            raise LeanError(f"{what}[{resource}]: too large")


def _time(moment: datetime | None, what: str) -> None:
    if moment is not None and moment.astimezone(UTC) > LATEST_TIME:
        raise LeanError(f"{what}: too far in the future")


def lean_check(wl: LeanWorkload) -> LeanWorkload:
    """What msgspec's types cannot say: the checks the models run in Python validators, for every
    field the engine computes with (so that build_info and the engine cannot raise on it)."""
    if name_problem(wl.metadata) is not None:  # type: ignore[arg-type]  # reads .name and .namespace
        raise LeanError("metadata: bad name or namespace")
    _time(wl.metadata.creation_timestamp, "metadata.creationTimestamp")
    spec = wl.spec
    _unique(spec.pod_sets, "spec.podSets", lambda ps: ps.name)
    _unique(spec.preemption_gates, "spec.preemptionGates", lambda g: g.name)
    per_pod_by_set: dict[str, dict[str, int]] = {}
    for ps in spec.pod_sets:
        pod = ps.template.spec
        for container in [*pod.containers, *(pod.init_containers or [])]:
            if container.resources is not None:
                _quantities(container.resources.requests, "requests")
                _quantities(container.resources.limits, "limits")
        _quantities(pod.overhead, "overhead")
        per_pod = pod.amounts_per_pod()
        for resource, amount in per_pod.items():
            if not fits_int64(amount) or not fits_int64(amount * ps.count):
                raise LeanError(f"spec.podSets[{ps.name}]: {resource} does not fit in int64")
        if ps.min_count is not None and ps.min_count > ps.count:
            raise LeanError("minCount above count")  # the CRD's CEL rule (the model leaves it to the CRD)
        per_pod_by_set[ps.name] = per_pod
    status = wl.status
    if status is not None:
        _unique(status.conditions, "status.conditions", lambda c: c.type)
        for condition in status.conditions or []:
            _time(condition.last_transition_time, "status.conditions")
        _unique(status.reclaimable_pods, "status.reclaimablePods", lambda r: r.name)
        _unique(status.preemption_gates, "status.preemptionGates", lambda g: g.name)
        if status.admission is not None:
            _unique(status.admission.pod_set_assignments, "podSetAssignments", lambda a: a.name)
            for psa in status.admission.pod_set_assignments:
                _quantities(psa.resource_usage, "resourceUsage")
                if not psa.resource_usage and psa.count is not None:
                    for amount in per_pod_by_set.get(psa.name, {}).values():
                        if not fits_int64(amount * psa.count):
                            raise LeanError("podSetAssignments: count times requests does not fit in int64")
    return wl


def lean_parse(body: bytes) -> LeanWorkload:
    try:
        return lean_check(_lean_decoder.decode(body))
    except msgspec.ValidationError as exc:
        raise LeanError(str(exc)) from None


# ---------------------------------------------------------------------------------------------
# The paths, from the bytes of one object to its WorkloadInfo.


def full_path(body: bytes) -> WorkloadInfo:
    return build_info(parse_object(msgspec.json.decode(body)), PRIORITY_CLASSES)


def without_managed_fields(body: bytes) -> WorkloadInfo:
    """The full path, managedFields dropped before validation (no model change: ObjectMeta keeps
    unknown fields, so today they are validated and kept)."""
    obj = msgspec.json.decode(body)
    obj["metadata"].pop("managedFields", None)
    return build_info(parse_object(obj), PRIORITY_CLASSES)


def pydantic_json_path(body: bytes) -> WorkloadInfo:
    return build_info(v1beta2.Workload.model_validate_json(body), PRIORITY_CLASSES)


def lean_path(body: bytes) -> WorkloadInfo:
    return build_info(lean_parse(body), PRIORITY_CLASSES)  # type: ignore[arg-type]  # duck-typed


def same_info(a: WorkloadInfo, b: WorkloadInfo) -> list[str]:
    """The WorkloadInfo fields (all but `obj`) that differ, and the properties read from `obj`."""
    diffs = [f.name for f in dataclasses.fields(a) if f.name != "obj" and getattr(a, f.name) != getattr(b, f.name)]
    if a.priority_class_name != b.priority_class_name:
        diffs.append("priority_class_name")
    for kind in ("QuotaReserved", "Admitted", "Evicted", "Requeued", "Finished"):
        ca, cb = a.condition(kind), b.condition(kind)
        if (ca is None) != (cb is None) or (
            ca is not None
            and cb is not None
            and (ca.status, ca.reason, ca.message, ca.last_transition_time)
            != (cb.status, cb.reason, cb.message, cb.last_transition_time)
        ):
            diffs.append(f"condition({kind})")
    return diffs


# ---------------------------------------------------------------------------------------------
# Invalid bodies: which path refuses which.


def _mutations() -> list[tuple[str, str, Callable[[dict[str, Any]], None]]]:
    def container(body: dict[str, Any]) -> dict[str, Any]:
        c: dict[str, Any] = body["spec"]["podSets"][0]["template"]["spec"]["containers"][0]
        return c

    def set_(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
        def apply(body: dict[str, Any]) -> None:
            *parents, last = path.split(".")
            node: Any = body
            for part in parents:
                node = node[int(part)] if part.isdigit() else node[part]
            node[int(last) if last.isdigit() else last] = value

        return apply

    def requests(value: Any) -> Callable[[dict[str, Any]], None]:
        return lambda body: container(body)["resources"]["requests"].__setitem__("cpu", value)

    return [
        ("a negative cpu request", "admitted", requests("-1")),
        ("a cpu request that is not a quantity", "admitted", requests("two")),
        (
            "a memory request past int64",
            "admitted",
            lambda b: container(b)["resources"]["requests"].update(memory="1e30"),
        ),
        ("a pod set count past int32", "pending", set_("spec.podSets.0.count", 2**31)),
        ("a pod set count as a string", "pending", set_("spec.podSets.0.count", "4")),
        (
            "count times requests past int64",
            "pending",
            lambda b: (
                container(b)["resources"]["requests"].update(memory="8Gi"),
                container(b)["resources"]["limits"].update(memory="8Gi"),
                b["spec"]["podSets"][0].update(count=2**31 - 1),
            ),
        ),
        ("no pod sets", "pending", set_("spec.podSets", [])),
        ("two pod sets named alike", "admitted-3-podsets", set_("spec.podSets.1.name", "launcher")),
        (
            "a time without a time zone",
            "admitted",
            set_("status.conditions.0.lastTransitionTime", "2026-01-01T10:00:05"),
        ),
        ("a condition status Maybe", "admitted", set_("status.conditions.0.status", "Maybe")),
        ("a name that is not a DNS subdomain", "pending", set_("metadata.name", "Bad_Name")),
        (
            "resourceUsage that is not a quantity",
            "admitted",
            set_("status.admission.podSetAssignments.0.resourceUsage.cpu", "x"),
        ),
        ("a condition reason with spaces", "admitted", set_("status.conditions.0.reason", "not a reason")),
        ("an unknown field in spec", "pending", set_("spec.colour", "blue")),
        ("an unknown field in a pod template (kept by both)", "pending", set_("spec.podSets.0.template.spec.foo", 1)),
    ]


def refusals(bodies: dict[str, bytes]) -> list[tuple[str, bool, bool]]:
    rows = []
    for label, variant, mutate in _mutations():
        body = msgspec.json.decode(bodies[variant])
        mutate(body)
        raw = msgspec.json.encode(body)
        try:
            full_path(raw)
            full_refuses = False
        except ObjectError:
            full_refuses = True
        try:
            lean_path(raw)
            lean_refuses = False
        except (LeanError, QuantityError):
            lean_refuses = True
        rows.append((label, full_refuses, lean_refuses))
    return rows


# ---------------------------------------------------------------------------------------------
# Timing and memory.


def per_call(fn: Callable[[Any], Any], arg: Any, seconds: float = 0.2, repeat: int = 7) -> float:
    """CPU seconds per call (time.process_time: other processes sharing the machine do not count),
    the least of `repeat` runs of about `seconds` each."""
    fn(arg)
    started, calls = time.process_time(), 0
    while time.process_time() - started < 0.05:
        fn(arg)
        calls += 1
    number = max(1, int(calls * seconds / 0.05))
    runs = []
    for _ in range(repeat):
        started = time.process_time()
        for _ in range(number):
            fn(arg)
        runs.append((time.process_time() - started) / number)
    return min(runs)


def renamed(body: bytes, i: int) -> bytes:
    obj = msgspec.json.decode(body)
    obj["metadata"]["name"] = f"{obj['metadata']['name']}-{i}"
    obj["metadata"]["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{obj['metadata']['name']}/{i}"))
    return msgspec.json.encode(obj)


def retained_bytes(inputs: list[bytes], keep: Callable[[bytes], Any]) -> float:
    """Bytes still allocated (tracemalloc) once `keep(body)` has been stored for every input and
    everything else freed."""
    kept: list[Any] = []
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for body in inputs:
        kept.append(keep(body))
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del kept
    gc.collect()
    return float(after - before)


def full_keep(body: bytes) -> Any:
    return build_info(parse_object(msgspec.json.decode(body)), PRIORITY_CLASSES)  # info.obj is the model


def lean_keep(body: bytes) -> Any:
    return build_info(lean_parse(body), PRIORITY_CLASSES)  # type: ignore[arg-type]


def lean_with_status_keep(body: bytes) -> Any:
    """Lean, plus the status as a dict: what a status write computes from (and sends back whole)."""
    status = msgspec.json.decode(body).get("status")
    return lean_keep(body), status


def dict_keep(body: bytes) -> Any:
    return msgspec.json.decode(body)


# ---------------------------------------------------------------------------------------------
# The report.


def us(seconds: float) -> str:
    micro = seconds * 1e6
    return f"{micro:.1f}" if micro < 100 else f"{micro:.0f}"


def per_second(seconds: float) -> str:
    return f"{1 / seconds:,.0f}"


def machine() -> str:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os

    return f"{platform.machine()}, {os.cpu_count()} cores ({model}), {platform.system()} {platform.release()}"


def versions(*names: str) -> str:
    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return ", ".join(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=10_000, help="objects cached for the memory reading")
    parser.add_argument("--offline", action="store_true", help="build the bodies here instead of reading a server's")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "parsing.md")
    args = parser.parse_args()
    command = "python benchmarks/parsing.py" + (f" --objects {args.objects}" if args.objects != 10_000 else "")
    command += " --offline" if args.offline else ""

    bodies, source = load_bodies(args.offline)

    # Both paths must agree on every body before they are timed.
    mismatches = {v: same_info(full_path(b), lean_path(b)) for v, b in bodies.items()}
    bad = {v: d for v, d in mismatches.items() if d}
    if bad:
        raise SystemExit(f"the lean path disagrees with build_info(parse_object(...)): {bad}")

    shape_rows = []
    timings: dict[str, dict[str, float]] = {}
    for variant, body in bodies.items():
        obj = msgspec.json.decode(body)
        managed = len(msgspec.json.encode(obj["metadata"].get("managedFields") or []))
        pod_sets = obj["spec"]["podSets"]
        containers = sum(
            len(ps["template"]["spec"].get("containers") or [])
            + len(ps["template"]["spec"].get("initContainers") or [])
            for ps in pod_sets
        )
        shape_rows.append(
            f"| {variant} | {len(body):,} | {managed:,} ({100 * managed / len(body):.0f}%) | {len(pod_sets)} | {containers} |"
        )
        model = parse_object(obj)
        lean = lean_parse(body)
        timings[variant] = {
            "msgspec": per_call(msgspec.json.decode, body),
            "orjson": per_call(orjson.loads, body),
            "json": per_call(json.loads, body),
            "parse_object": per_call(parse_object, obj),
            "build_info": per_call(lambda m: build_info(m, PRIORITY_CLASSES), model),
            "full": per_call(full_path, body),
            "pydantic_json": per_call(pydantic_json_path, body),
            "no_managed": per_call(without_managed_fields, body),
            "lean_decode": per_call(_lean_decoder.decode, body),
            "lean_check": per_call(lean_check, lean),
            "lean_build": per_call(lambda m: build_info(m, PRIORITY_CLASSES), lean),
            "lean": per_call(lean_path, body),
        }

    # Memory: `objects` distinct objects, the variants in turn.
    names = list(bodies)
    inputs = [renamed(bodies[names[i % len(names)]], i) for i in range(args.objects)]
    for keep in (full_keep, without_managed_fields, lean_keep, lean_with_status_keep, dict_keep):
        for body in bodies.values():
            keep(body)  # warm caches (quantities, validators) outside the reading
    scale = 10_000 / args.objects
    memory = {
        "dict": retained_bytes(inputs, dict_keep) * scale,
        "full": retained_bytes(inputs, full_keep) * scale,
        "no_managed": retained_bytes(inputs, without_managed_fields) * scale,
        "lean": retained_bytes(inputs, lean_keep) * scale,
        "lean_status": retained_bytes(inputs, lean_with_status_keep) * scale,
    }
    refused = refusals(bodies)

    mib = 1024 * 1024
    mean = {k: statistics.fmean(t[k] for t in timings.values()) for k in next(iter(timings.values()))}
    main_rows = []
    for variant, t in [*timings.items(), ("mean of the four", mean)]:
        share = t["parse_object"] / t["full"]
        main_rows.append(
            f"| {variant} | {us(t['full'])} | {us(t['parse_object'])} ({100 * share:.0f}%) | {us(t['lean'])} | "
            f"{t['full'] / t['lean']:.1f}x | {per_second(t['full'])} | {per_second(t['lean'])} |"
        )
    detail_rows = []
    for variant, t in [*timings.items(), ("mean of the four", mean)]:
        detail_rows.append(
            f"| {variant} | {us(t['msgspec'])} | {us(t['orjson'])} | {us(t['json'])} | {us(t['parse_object'])} | "
            f"{us(t['build_info'])} | {us(t['no_managed'])} | {us(t['pydantic_json'])} | {us(t['lean_decode'])} | "
            f"{us(t['lean_check'])} | "
            f"{us(t['lean_build'])} |"
        )
    refusal_rows = [
        f"| {label} | {'refused' if f else 'accepted'} | {'refused' if le else 'accepted'} |"
        for label, f, le in refused
    ]
    agree = sum(1 for _, f, le in refused if f == le)
    full_share = mean["parse_object"] / mean["full"]
    lines = [
        f"# Parsing benchmark ({datetime.now(UTC):%Y-%m-%d}, {platform.python_implementation()} "
        f"{platform.python_version()})",
        "",
        f"Machine: {machine()}. {versions('pydantic', 'pydantic-core', 'msgspec', 'orjson')}.",
        "",
        f"Command: `{command}`",
        "",
        f"Bodies: {source}. One of each kind below; per-object times are CPU time (process_time: "
        "the machine's other processes do not count), the least of 7 runs of about 0.2 s each, repeating one body "
        "(so the quantity parser's cache is warm, as it is in the operator).",
        "",
        "| Workload | bytes | managedFields bytes | pod sets | containers (init included) |",
        "|---|---:|---:|---:|---:|",
        *shape_rows,
        "",
        "Every body gives the same WorkloadInfo on both paths (all fields, the priority class name and "
        "the conditions the engine looks up): checked before timing.",
        "",
        "## From JSON bytes to WorkloadInfo, per object",
        "",
        "Full: `build_info(parse_object(msgspec.json.decode(body)))`, the operator's path today. Lean: "
        "`build_info(lean_check(msgspec.json.decode(body, type=LeanWorkload)))` (this file).",
        "",
        "| Workload | full, µs | of which parse_object (pydantic), µs | lean, µs | lean speed-up | full, objects/s | "
        "lean, objects/s |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *main_rows,
        "",
        "## The parts, µs per object",
        "",
        "| Workload | msgspec decode | orjson decode | json (stdlib) decode | parse_object | build_info (model) | "
        "full path, managedFields dropped before parse_object | Workload.model_validate_json + build_info | "
        "lean: typed decode | lean: checks | lean: build_info |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *detail_rows,
        "",
        f"## Memory per 10k cached Workloads (tracemalloc, {args.objects:,} distinct objects, the four kinds in turn)",
        "",
        "| what is kept per object | MiB per 10k |",
        "|---|---:|",
        f"| today: the pydantic Workload + its WorkloadInfo | {memory['full'] / mib:.1f} |",
        f"| the same, managedFields dropped before parse_object | {memory['no_managed'] / mib:.1f} |",
        f"| lean: the Structs + WorkloadInfo | {memory['lean'] / mib:.1f} |",
        f"| lean + the status as a dict (what a status write computes from) | {memory['lean_status'] / mib:.1f} |",
        f"| for comparison: the decoded JSON dict alone | {memory['dict'] / mib:.1f} |",
        "",
        "## Invalid bodies: which path refuses them",
        "",
        "| body | parse_object | lean |",
        "|---|---|---|",
        *refusal_rows,
        "",
        f"The two paths agree on {agree} of {len(refused)}.",
        "",
        "## Analysis",
        "",
        f"*Analysis, resting on the tables above.* On the mean of the four kinds, the full path costs "
        f"{us(mean['full'])} µs per Workload and pydantic validation (parse_object) is {100 * full_share:.0f}% of it "
        f"({us(mean['parse_object'])} µs); decoding is {us(mean['msgspec'])} µs with msgspec and "
        f"build_info {us(mean['build_info'])} µs. The lean path costs {us(mean['lean'])} µs "
        f"({mean['full'] / mean['lean']:.1f}x less); its typed decode, which builds only the declared fields, takes "
        f"{us(mean['lean_decode'])} µs against {us(mean['msgspec'])} µs for the whole dict (orjson: "
        f"{us(mean['orjson'])} µs, json: {us(mean['json'])} µs). At these per-object costs, 10k Workloads of the "
        f"four kinds in equal parts (a relist) take {mean['full'] * 10_000:.2f} s of CPU to parse on the full path and "
        f"{mean['lean'] * 10_000:.2f} s lean. Cached, 10k Workloads take "
        f"{memory['full'] / mib:.0f} MiB as models and {memory['lean'] / mib:.0f} MiB lean "
        f"({memory['lean_status'] / mib:.0f} MiB keeping the status for writes); dropping managedFields before "
        f"parse_object alone, with the models unchanged, gives {us(mean['no_managed'])} µs per object and "
        f"{memory['no_managed'] / mib:.0f} MiB per 10k. "
        f"Validating straight from bytes with pydantic (`model_validate_json`) costs {us(mean['pydantic_json'])} µs "
        f"with build_info, against {us(mean['full'])} µs for decode-then-validate.",
    ]
    text = "\n".join(lines)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
