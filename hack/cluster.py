#!/usr/bin/env python3
"""A Kubernetes cluster on this machine, with fake nodes whose pods really get scheduled, run and
finish: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (fake nodes and pod
lifecycles), with the project's CRDs installed. Runs in the foreground; prints a line `ready` once
every node is Ready; SIGINT or SIGTERM stops everything it started.

    export KUBEBUILDER_ASSETS=$(hack/setup-envtest.sh)
    python hack/cluster.py --kubeconfig cluster.kubeconfig --nodes 8 --topology blocks=2,racks-per-block=2

Nodes carry `kubernetes.io/hostname` and, with --topology, `cloud.provider.com/topology-block` and
`cloud.provider.com/topology-rack`. A pod bound to a node runs at once; with the annotation
`pod-complete.stage.kwok.x-k8s.io/delay: 30s` it succeeds 30 s later; a deleted pod goes away
after its terminationGracePeriodSeconds.

With `--controllers jobset,lws,kuberay`, the JobSet controller, the LeaderWorkerSet controller and
the KubeRay operator run too (each
built once from the Go module proxy into the project's cache, its CRDs installed) before `ready`
is printed.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

from preemption_operator.testing import job_controllers
from preemption_operator.testing.cluster import Nodes, running_cluster
from preemption_operator.testing.control_plane import AssetsMisconfigured, AssetsUnavailable, ControlPlaneError
from preemption_operator.testing.go_modules import ModuleUnavailable


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", type=Path, required=True, help="Where to write the cluster's kubeconfig.")
    parser.add_argument("--nodes", type=int, default=4, help="How many nodes (default 4).")
    parser.add_argument(
        "--node-capacity",
        default="",
        metavar="RESOURCE=QUANTITY[,...]",
        help="Each node's capacity (default cpu=32,memory=256Gi,nvidia.com/gpu=8,pods=110).",
    )
    parser.add_argument(
        "--node-labels",
        default="",
        metavar="KEY=VALUE[,...]",
        help="More labels on every node (a ResourceFlavor's nodeLabels, say).",
    )
    parser.add_argument(
        "--topology",
        default="",
        metavar="blocks=N,racks-per-block=M",
        help="Spread the nodes over N blocks of M racks (labels for topology-aware flavors).",
    )
    parser.add_argument(
        "--controllers",
        default="",
        metavar="NAME[,...]",
        help=f"Job controllers to run as well, built on first use: {', '.join(job_controllers.KNOWN)}.",
    )
    args = parser.parse_args()
    try:
        nodes = Nodes.parse(args.nodes, args.node_capacity, args.topology, args.node_labels)
    except ValueError as exc:
        parser.error(str(exc))
    controllers = [name.strip() for name in args.controllers.split(",") if name.strip()]
    unknown = sorted(set(controllers) - set(job_controllers.KNOWN))
    if unknown:
        parser.error(f"unknown controller(s) {', '.join(unknown)}: known are {', '.join(job_controllers.KNOWN)}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # Started in the background by a shell script, a process inherits SIGINT ignored: take it back.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with running_cluster(nodes) as plane, tempfile.TemporaryDirectory(prefix="cluster-controllers-") as work:
            started = [job_controllers.CONTROLLERS[name](plane, Path(work)).start() for name in controllers]
            args.kubeconfig.write_text(plane.kubeconfig.read_text())
            print(
                f"{nodes.count} node(s) Ready; kube-apiserver at {plane.server}; kubeconfig in {args.kubeconfig}",
                flush=True,
            )
            for controller in started:
                print(f"{controller.name} controller ready; its log: {controller.log_path}", flush=True)
            print("ready", flush=True)
            try:
                while True:
                    time.sleep(3600)
            finally:
                for controller in started:
                    controller.stop()
    except KeyboardInterrupt:
        return 0
    except (AssetsUnavailable, AssetsMisconfigured, ControlPlaneError, ModuleUnavailable, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
