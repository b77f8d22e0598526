"""A cluster on one machine: the control plane (etcd, kube-apiserver, kube-controller-manager) with
kube-scheduler, and kwok playing the kubelet of fake nodes, so pods are bound, run, finish and go
away as on a real cluster, with nothing running in them.

Nodes are plain Node objects (untainted: ordinary manifests schedule onto them) with the capacity
asked for, the label `kubernetes.io/hostname` and, with a topology, the block and rack labels of
Kueue's TAS examples. kwok's Stages (kwok_stages.yaml) make a bound pod Running at once, make a pod
with the annotation `pod-complete.stage.kwok.x-k8s.io/delay` Succeeded that long after, and
remove a deleted pod only at its deletionTimestamp (its grace period after the deletion).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .control_plane import CONTROLLERS, NODE_CONTROLLERS, ControlPlane, ControlPlaneError, running_control_plane

STAGES = Path(__file__).with_name("kwok_stages.yaml")
HOSTNAME_LABEL = "kubernetes.io/hostname"
BLOCK_LABEL = "cloud.provider.com/topology-block"
RACK_LABEL = "cloud.provider.com/topology-rack"
COMPLETE_AFTER = "pod-complete.stage.kwok.x-k8s.io/delay"
APP_CONTROLLERS = ("deployment", "replicaset", "statefulset")
"""What makes the Pods of Deployments and StatefulSets, whose Pods the operator queues."""
"""A pod annotation: how long the pod runs before it succeeds (a Go duration, "30s")."""
DEFAULT_CAPACITY = {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8", "pods": "110"}


@dataclass(frozen=True)
class Nodes:
    """What nodes the cluster has: `count` alike, of `capacity`; with `blocks`, spread over that
    many blocks of `racks_per_block` racks each (labels BLOCK_LABEL and RACK_LABEL)."""

    count: int = 4
    capacity: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_CAPACITY))
    blocks: int = 0
    racks_per_block: int = 1
    labels: Mapping[str, str] = field(default_factory=dict)
    """Extra labels on every node (the nodeLabels of a ResourceFlavor, say)."""
    prefix: str = "node"
    """Node names are `<prefix>-0000`, ...: another prefix adds nodes beside these."""

    def objects(self) -> list[dict[str, Any]]:
        racks = self.blocks * self.racks_per_block
        out = []
        for i in range(self.count):
            name = f"{self.prefix}-{i:04d}"
            labels = {**self.labels, HOSTNAME_LABEL: name, "type": "kwok"}
            if racks:
                rack = i * racks // self.count  # contiguous: rack r holds nodes r*n/racks ...
                labels[BLOCK_LABEL] = f"block-{rack // self.racks_per_block}"
                labels[RACK_LABEL] = f"rack-{rack}"
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name, "labels": labels, "annotations": {"kwok.x-k8s.io/node": "fake"}},
                    "status": {
                        "allocatable": dict(self.capacity),
                        "capacity": dict(self.capacity),
                        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                    },
                }
            )
        return out

    @classmethod
    def parse(cls, count: int, capacity: str = "", topology: str = "", labels: str = "") -> Nodes:
        """From the cluster script's flags: `cpu=32,memory=256Gi`, `blocks=2,racks-per-block=4`,
        `example.com/pool=on-demand`; ValueError says what is wrong."""
        amounts = _pairs("--node-capacity", capacity) if capacity else dict(DEFAULT_CAPACITY)
        amounts.setdefault("pods", DEFAULT_CAPACITY["pods"])
        shape = _pairs("--topology", topology) if topology else {}
        unknown = set(shape) - {"blocks", "racks-per-block"}
        if unknown:
            raise ValueError(f"--topology: unknown key {sorted(unknown)[0]!r} (known: blocks, racks-per-block)")
        try:
            blocks = int(shape.get("blocks", "0"))
            racks = int(shape.get("racks-per-block", "1"))
        except ValueError:
            raise ValueError("--topology: blocks and racks-per-block are whole numbers") from None
        if count < 1 or blocks < 0 or racks < 1 or (blocks and count < blocks * racks):
            raise ValueError(f"--nodes {count} cannot hold {blocks} block(s) of {racks} rack(s) with a node each")
        return cls(count, amounts, blocks, racks, _pairs("--node-labels", labels) if labels else {})


def _pairs(flag: str, text: str) -> dict[str, str]:
    out = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ValueError(f"{flag}: {item!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


def add_nodes(plane: ControlPlane, nodes: Nodes, *, timeout: float = 60.0) -> list[str]:
    """Creates the nodes and waits until kwok has made every one Ready; returns their names."""
    objects = nodes.objects()
    plane.kubectl(
        "create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}), check=True
    )
    names = [o["metadata"]["name"] for o in objects]
    wait_nodes_ready(plane, names, timeout=timeout)
    return names


def wait_nodes_ready(plane: ControlPlane, names: list[str], *, timeout: float = 60.0) -> None:
    """Until every named node is Ready and untainted (a node that lost the API server for a
    while is tainted until it is back); ControlPlaneError, with kwok's log, when not in time."""
    deadline = time.monotonic() + timeout
    while True:
        listed = json.loads(plane.kubectl("get", "nodes", "-o", "json", check=True).stdout)["items"]
        usable = {
            node["metadata"]["name"]
            for node in listed
            if not node["spec"].get("taints")
            and any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or [])
        }
        waiting = sorted(n for n in names if n not in usable)
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise ControlPlaneError(
                f"{len(waiting)} node(s) not Ready within {timeout:.0f}s ({', '.join(waiting[:5])})\n"
                + plane.logs(failed="kwok")
            )
        time.sleep(0.2)


def start_nodes(plane: ControlPlane, nodes: Nodes) -> list[str]:
    """kube-scheduler, kwok and `nodes` on a running control plane (whose kube-controller-manager
    runs NODE_CONTROLLERS too, to lift the taint new nodes get until they are Ready); returns
    the nodes' names once every one is Ready."""
    plane.start_scheduler()
    plane.start_kwok(STAGES)
    return add_nodes(plane, nodes)


@contextmanager
def running_cluster(
    nodes: Nodes | None = None,
    *,
    assets: Path | None = None,
    crds: bool = True,
    keep_workdir: bool = False,
) -> Iterator[ControlPlane]:
    """The control plane with kube-controller-manager, kube-scheduler, kwok and `nodes`, every
    node Ready, and the project's CRDs unless ``crds`` is false (a benchmark installs Kueue's
    instead); stopped on exit. ControlPlaneError (with the logs of the part that failed) when any
    of them does not come up."""
    controllers = (*CONTROLLERS, *NODE_CONTROLLERS, *APP_CONTROLLERS)
    with running_control_plane(
        assets, crds=crds, controller_manager=True, controllers=controllers, keep_workdir=keep_workdir
    ) as plane:
        start_nodes(plane, nodes or Nodes())
        yield plane
