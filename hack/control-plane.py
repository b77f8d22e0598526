#!/usr/bin/env python3
"""Starts the same etcd, kube-apiserver and kube-controller-manager (job, garbage-collector and
namespace controllers) the e2e tests use, installs crds/, prints how to use it, and keeps it
running until Ctrl-C. Jobs create pods there; the pods stay Pending (no scheduler, no kubelet).
For trying the operator without a cluster:

    export KUBEBUILDER_ASSETS=$(hack/setup-envtest.sh)
    python hack/control-plane.py            # prints: export KUBECONFIG=...
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.controlplane import ControlPlane, find_assets, project_crd_files  # noqa: E402


def main() -> None:
    plane = ControlPlane(find_assets())
    plane.start()
    try:
        plane.apply_crds(project_crd_files())
        plane.start_controller_manager()
        print(f"kube-apiserver at {plane.server}, CRDs installed, controllers running. In another shell:", flush=True)
        print(f"  export KUBECONFIG={plane.kubeconfig}", flush=True)
        print(f"  export PATH={plane.assets}:$PATH   # kubectl of the same version", flush=True)
        print("  preemption-operator run --webhook-url https://127.0.0.1:9443", flush=True)
        print("Ctrl-C stops it.", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        plane.stop()


if __name__ == "__main__":
    main()
