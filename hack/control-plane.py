#!/usr/bin/env python3
"""Starts the same etcd, kube-apiserver and kube-controller-manager (job, garbage-collector and
namespace controllers) the e2e tests use, installs crds/, prints how to use it, and keeps it
running until Ctrl-C. Jobs create pods there; the pods stay Pending (no scheduler, no kubelet).
For trying the operator without a cluster:

    export KUBEBUILDER_ASSETS=$(hack/setup-envtest.sh)
    python hack/control-plane.py            # prints: export KUBECONFIG=...
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from preemption_operator.testing.control_plane import running_control_plane


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        with running_control_plane(controller_manager=True) as plane:
            print(
                f"kube-apiserver at {plane.server}, CRDs installed, controllers running. In another shell:", flush=True
            )
            print(f"  export KUBECONFIG={plane.kubeconfig}", flush=True)
            print(f"  export PATH={plane.assets}:$PATH   # kubectl of the same version", flush=True)
            print("  preemption-operator run --webhook-url https://127.0.0.1:9443", flush=True)
            print("Ctrl-C stops it.", flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
