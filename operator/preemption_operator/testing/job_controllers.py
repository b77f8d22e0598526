"""The real controllers of the job kinds the operator integrates, run against a test cluster: each
built once from the Go module proxy into the project's cache, its CRDs installed from the same
module, started as a process with leader election off.

Each serves its admission webhooks with a self-signed certificate, and those for its own kinds
are registered with the API server (by URL, with that certificate's CA), so its objects are
defaulted and validated as in a real install. Webhooks on Pods are left out (they would see
every pod of the cluster, and only serve placement features the tests do not use), except
LeaderWorkerSet's, which selects its own Pods and labels them with what its controller needs."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import yaml

from ..k8s.certs import issue
from . import go_modules
from .control_plane import ControlPlane, _Process, free_port, log_tail


def _wait_ready(process: _Process, health_port: int, timeout: float, what: str, tail: Callable[[], str]) -> None:
    """Until the process answers its readiness probe; RuntimeError (with its log) if it exits or
    takes longer than `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        if not process.alive():
            raise RuntimeError(f"{what} exited with {process.popen.returncode}:\n{tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/readyz", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (OSError, urllib.error.HTTPError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready within {timeout:.0f}s:\n{tail()}")
        time.sleep(0.2)


class _Controller:
    """What each controller's process shares: its folder and log, its readiness port, and its
    stop, which first takes its webhooks away (nothing may call a server that is gone: its
    objects could no longer be written)."""

    name: ClassVar[str]
    webhooks: str | None = None
    """The name of its webhook configurations (None: it registers none)."""

    def __init__(self, plane: ControlPlane, workdir: Path) -> None:
        self.plane = plane
        self.workdir = workdir / self.name
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / f"{self.name}.log"
        self.health_port = free_port()
        self.process: _Process | None = None

    def start(self, timeout: float = 120.0) -> _Controller:
        """Builds it if needed, installs its CRDs, waits until it is ready and registers its
        webhooks."""
        raise NotImplementedError

    def tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)

    def stop(self, timeout: float = 20.0) -> None:
        if self.process is None or not self.process.alive():
            return
        if self.webhooks is not None:
            self.plane.kubectl(
                "delete",
                "mutatingwebhookconfiguration,validatingwebhookconfiguration",
                self.webhooks,
                "--ignore-not-found",
            )
        self.process.stop(timeout)

    def _run_manager(self, binary: Path, config_api: str, timeout: float) -> tuple[str, bytes]:
        """Runs a controller manager configured by a file (`config_api`'s `Configuration`, as
        JobSet's and LeaderWorkerSet's are) with leader election and its own certificate
        management off, serving its webhooks on loopback with a certificate issued here, and
        waits until it is ready. Its webhooks' base URL and the certificate's CA."""
        certs = self.workdir / "certs"
        certs.mkdir(exist_ok=True)
        serving = issue(["127.0.0.1", "localhost"])
        (certs / "tls.crt").write_bytes(serving.cert)
        (certs / "tls.key").write_bytes(serving.key)
        webhook_port = free_port()
        config = {
            "apiVersion": config_api,
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(certs)},
        }
        config_path = self.workdir / "config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        self.process = _Process(
            self.name,
            [str(binary), f"--config={config_path}", f"--kubeconfig={self.plane.kubeconfig}"],
            self.log_path,
            self.workdir,
        )
        _wait_ready(self.process, self.health_port, timeout, f"{self.name} controller", self.tail)
        return f"https://127.0.0.1:{webhook_port}", serving.ca

    def _register(self, mutating: list[dict[str, Any]], validating: list[dict[str, Any]]) -> None:
        """Registers its webhooks under its configurations' name."""
        registration = [
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": {"name": self.webhooks},
                "webhooks": hooks,
            }
            for kind, hooks in (
                ("MutatingWebhookConfiguration", mutating),
                ("ValidatingWebhookConfiguration", validating),
            )
        ]
        self.plane.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": registration}),
            check=True,
        )


def _hook(name: str, url: str, ca: bytes, rule: dict[str, Any]) -> dict[str, Any]:
    """One webhook of a controller's release, called at `url` with the CA of its certificate."""
    return {
        "name": name,
        "clientConfig": {"url": url, "caBundle": base64.b64encode(ca).decode()},
        "rules": [rule],
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }


class JobSetController(_Controller):
    """The JobSet controller manager (sigs.k8s.io/jobset, the release Kueue v0.19.2 uses)."""

    name = "jobset"
    webhooks = "jobset-webhooks"

    def start(self, timeout: float = 120.0) -> JobSetController:
        """Builds it if needed, installs its CRD, waits until it is ready and registers its
        webhooks."""
        binary = build("jobset")
        self.plane.apply_crds(go_modules.jobset_crds())
        url, ca = self._run_manager(binary, "config.jobset.x-k8s.io/v1alpha1", timeout)
        self._register_webhooks(url, ca)
        return self

    def _register_webhooks(self, url: str, ca: bytes) -> None:
        """JobSet's defaulting and validation of JobSets (the paths and rules of its release)."""

        def hook(name: str, path: str, operations: list[str]) -> dict[str, Any]:
            rule = {
                "apiGroups": ["jobset.x-k8s.io"],
                "apiVersions": ["v1alpha2"],
                "operations": operations,
                "resources": ["jobsets"],
            }
            return _hook(name, f"{url}{path}", ca, rule)

        self._register(
            [hook("mjobset.kb.io", "/mutate-jobset-x-k8s-io-v1alpha2-jobset", ["CREATE"])],
            [hook("vjobset.kb.io", "/validate-jobset-x-k8s-io-v1alpha2-jobset", ["CREATE", "UPDATE"])],
        )


class KubeRayController(_Controller):
    """The KubeRay operator (github.com/ray-project/kuberay/ray-operator), which turns a
    RayCluster into its head and worker pods and deletes them when it is suspended.

    It runs its RayCluster, RayJob and RayService controllers unconditionally, so all three CRDs
    are installed (server-side: they are too large for the annotation a client-side apply
    writes). Its own webhook (a validating one for RayClusters, served only with
    ENABLE_WEBHOOKS=true) is left out: it repeats the spec checks the controller makes anyway
    when it reconciles, and nothing of Kueue's protocol depends on it."""

    name = "kuberay"

    def start(self, timeout: float = 120.0) -> KubeRayController:
        """Builds it if needed, installs its CRDs and waits until it is ready."""
        binary = build("kuberay")
        self.plane.apply_crds(go_modules.kuberay_crds(), timeout=120)
        self.process = _Process(
            self.name,
            [
                str(binary),
                f"--kubeconfig={self.plane.kubeconfig}",
                "--enable-leader-election=false",
                "--metrics-addr=0",
                f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
                "--log-stdout-encoder=console",
            ],
            self.log_path,
            self.workdir,
        )
        _wait_ready(self.process, self.health_port, timeout, "kuberay operator", self.tail)
        return self


class LwsController(_Controller):
    """The LeaderWorkerSet controller manager (sigs.k8s.io/lws, the release Kueue v0.19.2 uses):
    a LeaderWorkerSet's leader StatefulSet, one worker StatefulSet per leader Pod, and the
    restart of a whole group when one of its Pods goes.

    Its webhooks are registered as its release does (by URL here, with its internal certificate
    management off): LeaderWorkerSet defaulting and validation, and the Pod defaulting that labels
    each leader with its group index (and every Pod with its worker index and LWS_* variables),
    only for Pods with the `leaderworkerset.sigs.k8s.io/name` label. Mutating webhooks run in the
    order of their configurations' names; `webhooks` (the configuration's name) decides whether
    LeaderWorkerSet's Pod webhook runs before the operator's (`preemption-operator`) or after it,
    as in a Kueue install (`kueue-…` before `lws-…`), where the operator's must be called again."""

    name = "lws"

    def __init__(self, plane: ControlPlane, workdir: Path, webhooks: str = "lws-webhooks") -> None:
        super().__init__(plane, workdir)
        self.webhooks = webhooks

    def start(self, timeout: float = 120.0) -> LwsController:
        """Builds it if needed, installs its CRDs, waits until it is ready and registers its
        webhooks."""
        binary = build("lws")
        self.plane.apply_crds(go_modules.lws_crds(), timeout=120)
        url, ca = self._run_manager(binary, "config.lws.x-k8s.io/v1alpha1", timeout)
        self._register_webhooks(url, ca)
        return self

    def _register_webhooks(self, url: str, ca: bytes) -> None:
        """LeaderWorkerSet's webhooks, with the paths, rules and Pod selector of its release
        (config/webhook: manifests.yaml and the patches that select Pods). Its validating Pod
        webhook checks nothing and is left out; so are DisaggregatedSet's."""

        def hook(name: str, path: str, operations: list[str], resource: str) -> dict[str, Any]:
            group = "" if resource == "pods" else "leaderworkerset.x-k8s.io"
            rule = {"apiGroups": [group], "apiVersions": ["v1"], "operations": operations, "resources": [resource]}
            entry = _hook(name, f"{url}{path}", ca, rule)
            if resource == "pods":
                entry["objectSelector"] = {
                    "matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]
                }
            return entry

        both = ["CREATE", "UPDATE"]
        self._register(
            [
                hook(
                    "mleaderworkerset.kb.io",
                    "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
                    both,
                    "leaderworkersets",
                ),
                hook("mpod.kb.io", "/mutate--v1-pod", ["CREATE"], "pods"),
            ],
            [
                hook(
                    "vleaderworkerset.kb.io",
                    "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
                    both,
                    "leaderworkersets",
                ),
            ],
        )


BUILDS = {"jobset": go_modules.JOBSET, "lws": go_modules.LWS, "kuberay": go_modules.KUBERAY}
"""Each controller's Go module and version."""
PACKAGES = {"lws": "./cmd"}
"""A controller's main package within its module, when it is not the module's root."""
CONTROLLERS: dict[str, type[_Controller]] = {
    "jobset": JobSetController,
    "lws": LwsController,
    "kuberay": KubeRayController,
}
"""What `hack/cluster.py --controllers` takes, by name."""
KNOWN = tuple(CONTROLLERS)


def build(name: str) -> Path:
    """A controller's binary, built on first use (go_modules.install)."""
    module, version = BUILDS[name]
    return go_modules.install(module, version, name, PACKAGES.get(name, "."))
