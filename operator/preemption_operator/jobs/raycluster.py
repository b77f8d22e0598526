"""RayCluster on the job framework (Kueue's `ray.io/raycluster`, KubeRay API ray.io/v1): a pod set
`head` of one pod, then one per worker group, named after it in lower case, of replicas x
numOfHosts pods; started and stopped through `spec.suspend` (KubeRay creates or deletes the
pods). A RayCluster never finishes: it holds its quota until it is deleted, and its Workload then
goes as an orphan. The webhooks create a queued RayCluster suspended and refuse what Kueue refuses
(in-tree autoscaling, more pod sets than a Workload holds, a worker group named `head`, a running
cluster changing queue) (Kueue's pkg/controller/jobs/raycluster, v0.19.2)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

from ..api.kinds import Kind
from ..api.quantity import QuantityError, parse_quantity
from . import podsets, webhook
from .framework import Finished, Integration, JobPatch, ObjectJob, PodSetInfo, register, whole
from .reconciler import ComposeError

HEAD = "head"
"""The head group's pod set: no worker group may take this name."""
MAX_POD_SETS = 18
"""The most pod sets a Workload holds (Kueue's jobframework.MaxPodSets)."""
FT_ANNOTATION = "ray.io/ft-enabled"
"""KubeRay's switch for GCS fault tolerance (`true`, any case)."""
REDIS_CLEANUP_REQUESTS = {"cpu": "200m", "memory": "256Mi"}
"""What KubeRay's Redis cleanup Job asks for when a fault-tolerant cluster goes: Kueue counts it
in the head pod's Ray container."""
AUTOSCALER = "autoscaler"
AUTOSCALER_RESOURCES = {
    "requests": {"cpu": "500m", "memory": "512Mi"},
    "limits": {"cpu": "500m", "memory": "512Mi"},
}
"""The sidecar KubeRay adds to the head pod under in-tree autoscaling, unless autoscalerOptions
says otherwise."""
SUSPENDED = "RayClusterSuspended"
SUSPEND_CONDITIONS = ("RayClusterSuspending", SUSPENDED)
AUTOSCALING_FIELD = "spec.enableInTreeAutoscaling"
AUTOSCALING_MESSAGE = (
    "a kueue-managed RayCluster can use autoscaling only as an elastic job: enable the "
    'ElasticJobsViaWorkloadSlices feature gate and set the "kueue.x-k8s.io/elastic-job": "true" annotation'
)


def _workers(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [wg for wg in (obj.get("spec") or {}).get("workerGroupSpecs") or [] if isinstance(wg, Mapping)]


def _template(group: Mapping[str, Any]) -> Mapping[str, Any]:
    return group.get("template") or {}


def worker_count(group: Mapping[str, Any]) -> int:
    """A worker group's pods: replicas (1 when unset; min/max replicas are not read) times
    numOfHosts when that is more than one."""
    count = whole(group.get("replicas"), 1)
    hosts = whole(group.get("numOfHosts"), 0)
    return count * hosts if hosts > 1 else count


def _max_merged(requests: Mapping[str, Any], floor: Mapping[str, str]) -> dict[str, Any]:
    """The requests with each of `floor`'s raised to at least its value (the larger one kept as
    written)."""
    out = dict(requests)
    for name, value in floor.items():
        have = out.get(name)
        try:
            keep = have is not None and parse_quantity(have) >= parse_quantity(value)
        except QuantityError:
            keep = False
        if not keep:
            out[name] = value
    return out


class RayCluster(ObjectJob):
    kind: ClassVar[Kind] = Kind("RayCluster", "ray.io", "v1", "rayclusters", True)

    @property
    def _head(self) -> Mapping[str, Any]:
        return _template(self._spec.get("headGroupSpec") or {})

    def fault_tolerant(self) -> bool:
        """GCS fault tolerance, as KubeRay reads it: the annotation, or its options set."""
        flag = str((self._meta.get("annotations") or {}).get(FT_ANNOTATION, ""))
        return flag.lower() == "true" or self._spec.get("gcsFaultToleranceOptions") is not None

    def autoscaling(self) -> bool:
        return self._spec.get("enableInTreeAutoscaling") is True

    def pod_sets(self) -> list[dict[str, Any]]:
        """The head's pod set, with what KubeRay adds to the head pod (Redis cleanup under fault
        tolerance, the autoscaler sidecar), then the worker groups'. Raises ComposeError (Kueue's
        message) when fault tolerance has no container to count the cleanup in."""
        head = copy.deepcopy(dict(self._head))
        pod = head.setdefault("spec", {})
        if self.fault_tolerant():
            containers = pod.get("containers") or []
            if not containers:
                raise ComposeError(
                    "cannot account for Redis cleanup resources: head pod template must include the Ray container"
                )
            resources = containers[0].setdefault("resources", {})
            resources["requests"] = _max_merged(resources.get("requests") or {}, REDIS_CLEANUP_REQUESTS)
        if self.autoscaling():
            options = self._spec.get("autoscalerOptions") or {}
            resources = options.get("resources")
            sidecar = {
                "name": AUTOSCALER,
                "resources": copy.deepcopy(dict(resources if isinstance(resources, Mapping) else AUTOSCALER_RESOURCES)),
            }
            pod["containers"] = [*(pod.get("containers") or []), sidecar]
        out = [self._pod_set(HEAD, head, 1)]
        for group in _workers(self.obj):
            template = copy.deepcopy(dict(_template(group)))
            out.append(self._pod_set(str(group.get("groupName") or "").lower(), template, worker_count(group)))
        return out

    @staticmethod
    def _pod_set(name: str, template: dict[str, Any], count: int) -> dict[str, Any]:
        pod_set: dict[str, Any] = {"name": name, "template": template, "count": count}
        if (request := podsets.topology_request(template, None)) is not None:
            pod_set["topologyRequest"] = request
        return pod_set

    def equivalent(self, pod_sets: list[dict[str, Any]], admitted: bool) -> bool:
        return podsets.equivalent(self.pod_sets(), pod_sets, admitted)

    def priority_class_name(self) -> str:
        """The head's, else the first worker group's that names one, as Kueue reads the pod sets."""
        for template in (self._head, *(_template(group) for group in _workers(self.obj))):
            if name := (template.get("spec") or {}).get("priorityClassName"):
                return str(name)
        return ""

    def stopping(self) -> bool:
        return False  # suspending and restoring the templates is one write

    def is_suspended(self) -> bool:
        return self._spec.get("suspend") is True

    def is_active(self) -> bool:
        """Whether a pod of the cluster may still exist. Stricter than Kueue, which reads
        `status.state == "ready"`: a suspended cluster stays `ready` while its pods terminate, but
        one preempted before it was ever ready has pods and no `ready` state. KubeRay (its
        RayClusterStatusConditions gate, on by default) sets `RayClusterSuspended` only once it
        lists no pod of the cluster, terminating ones included, and creates pods only after it has
        set that condition False again: while it is True no pod runs. Without those conditions
        (the gate off, or KubeRay not there yet) Kueue's reading is all there is."""
        conditions = [c for c in self._status.get("conditions") or [] if isinstance(c, Mapping)]
        if any(c.get("type") == SUSPENDED and c.get("status") == "True" for c in conditions):
            return False
        if any(c.get("type") in SUSPEND_CONDITIONS for c in conditions):
            return True
        return self._status.get("state") == "ready"

    def pods_ready(self) -> bool:
        """KubeRay says the cluster is ready (Kueue's RayCluster.PodsReady)."""
        return self._status.get("state") == "ready"

    def finished(self) -> Finished | None:
        return None  # a RayCluster runs until it is deleted

    def run(self, infos: list[PodSetInfo]) -> list[JobPatch]:
        workers = _workers(self.obj)
        if len(infos) != len(workers) + 1:
            raise ValueError(f"invalid podset infos: expecting {len(workers) + 1} podset, got {len(infos)}")
        spec: dict[str, Any] = {"suspend": False}
        if head := podsets.merge(self._head, infos[0]):
            spec["headGroupSpec"] = {"template": head}
        if workers:
            spec["workerGroupSpecs"] = [
                _with_template(group, podsets.apply(_template(group), podsets.merge(_template(group), info)))
                for group, info in zip(workers, infos[1:], strict=True)
            ]
        return [JobPatch({"spec": spec})]

    def stop(self, originals: list[PodSetInfo]) -> list[JobPatch]:
        """Suspended with the head's and every worker group's template put back as the Workload
        kept them (when the pod sets still match the groups one for one, as Kueue requires), in
        one write."""
        spec: dict[str, Any] = {"suspend": True}
        workers = _workers(self.obj)
        if originals and len(originals) == len(workers) + 1:
            if head := podsets.restore(self._head, originals[0]):
                spec["headGroupSpec"] = {"template": head}
            restored = [
                _with_template(group, podsets.apply(_template(group), podsets.restore(_template(group), original)))
                for group, original in zip(workers, originals[1:], strict=True)
            ]
            if restored != workers:
                spec["workerGroupSpecs"] = restored
        return [JobPatch({"spec": spec})]


def _with_template(group: Mapping[str, Any], template: Mapping[str, Any]) -> dict[str, Any]:
    """The worker group with this pod template (a merge patch replaces the list whole, so each
    element is sent in full)."""
    out = copy.deepcopy(dict(group))
    out["template"] = dict(template)
    return out


def mutate(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A RayCluster being created is suspended when it names a queue."""
    return webhook.suspend_at_creation(obj, bool(RayCluster(obj).queue_name()))


def _cluster_errors(obj: Mapping[str, Any]) -> list[str]:
    """What Kueue refuses in a queued RayCluster, in its order."""
    cluster = RayCluster(obj)
    errors = []
    if cluster.autoscaling():
        errors.append(f"{AUTOSCALING_FIELD}: Invalid value: true: {AUTOSCALING_MESSAGE}")
    workers = _workers(obj)
    if len(workers) + 1 > MAX_POD_SETS:
        errors.append(f"spec.workerGroupSpecs: Too many: {len(workers) + 1}: must have at most {MAX_POD_SETS} items")
    for i, group in enumerate(workers):
        if group.get("groupName") == HEAD:
            errors.append(f'spec.workerGroupSpecs[{i}].groupName: Forbidden: "{HEAD}" is reserved for the head group')
    return errors


def validate(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[str]:
    """Kueue's field errors for a RayCluster being created (`old` None) or updated. An update is
    checked when the cluster is queued, or was (so dropping the queue label cannot leave it
    running unmanaged)."""
    errors: list[str] = []
    queued = bool(RayCluster(obj).queue_name())
    if old is not None:
        if not queued and not RayCluster(old).queue_name():
            return []
        errors += webhook.queue_change_errors(obj, old, RayCluster(obj).is_suspended())
    if queued:
        errors += _cluster_errors(obj)
    return errors + webhook.queue_name_errors(obj)


INTEGRATION = register(Integration("ray.io/raycluster", RayCluster, mutate, validate))
