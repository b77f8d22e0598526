"""Files the tests take from Go modules (the CRDs of the job controllers the operator integrates),
through the Go module cache: `go mod download` fetches a module once, and nothing is installed
outside that cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

JOBSET = ("sigs.k8s.io/jobset", "v0.12.0")
"""The JobSet release Kueue v0.19.2 depends on."""
KUBERAY = ("github.com/ray-project/kuberay/ray-operator", "v1.5.0")
"""The KubeRay operator release the RayCluster integration is tested with (its main package is
the module's root; Kueue v0.19.2 builds against v1.6.2, whose RayCluster API is the same for
what the integration reads)."""


LWS = ("sigs.k8s.io/lws", "v0.9.0")
"""The LeaderWorkerSet release Kueue v0.19.2 depends on (its manager's main package is `./cmd`)."""


class ModuleUnavailable(RuntimeError):
    """The module could not be fetched: no Go toolchain, or the proxy refused it."""


def go_binary(what: str) -> str:
    """The Go toolchain, to `what` (named in the error when there is none)."""
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if go is None:
        raise ModuleUnavailable(f"no `go` on PATH to {what}")
    return go


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "preemption-operator" / "controllers"


def binary_path(version: str, name: str) -> Path:
    return cache_root() / f"{name}-{version}" / name


def installed(module: str, version: str, name: str) -> bool:
    """Whether `install` would find the binary built already."""
    return os.access(binary_path(version, name), os.X_OK)


def install(module: str, version: str, name: str, package: str = ".") -> Path:
    """The binary of a module's main package, built once into the project's cache and found there
    afterwards. It is built inside the module's own source (as its go.mod and go.sum pin its
    dependencies) rather than by `go install module@version`, which asks the proxy for the
    module's version list, and some proxies refuse that."""
    binary = binary_path(version, name)
    if installed(module, version, name):
        return binary
    source = module_dir(module, version)
    go = go_binary(f"build {module}@{version}")
    staging = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=_mkdir(binary.parent)))
    try:
        result = subprocess.run(
            [go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(staging / name), package],
            capture_output=True,
            text=True,
            cwd=source,
            env={**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly"},
            timeout=1800,
        )
        if result.returncode != 0 or not (staging / name).is_file():
            raise ModuleUnavailable(f"building {module}@{version} failed: {(result.stderr or result.stdout).strip()}")
        (staging / name).replace(binary)  # one rename: a half-built binary is never found
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return binary


def _mkdir(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def module_dir(module: str, version: str) -> Path:
    """The module's source folder in the Go module cache (downloaded on first use)."""
    go = go_binary(f"download {module}@{version}")
    # Outside any module, so that a go.mod around the caller changes nothing.
    result = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
        timeout=600,
    )
    try:
        folder = json.loads(result.stdout).get("Dir")
    except ValueError:
        folder = None
    if result.returncode != 0 or not folder:
        raise ModuleUnavailable(
            f"go mod download {module}@{version} failed: {(result.stderr or result.stdout).strip()}"
        )
    return Path(folder)


def jobset_crds() -> list[Path]:
    """JobSet's CRD manifests, as its release installs them."""
    folder = module_dir(*JOBSET) / "config" / "components" / "crd" / "bases"
    files = sorted(folder.glob("*.yaml"))
    if not files:
        raise ModuleUnavailable(f"{folder} holds no CRD manifests")
    return files


def kuberay_crds() -> list[Path]:
    """KubeRay's CRD manifests (RayCluster, RayJob, RayService: its operator watches all three)."""
    folder = module_dir(*KUBERAY) / "config" / "crd" / "bases"
    files = sorted(folder.glob("ray.io_*.yaml"))
    if not files:
        raise ModuleUnavailable(f"{folder} holds no CRD manifests")
    return files


def lws_crds() -> list[Path]:
    """LeaderWorkerSet's CRD manifests, as its release installs them: the LeaderWorkerSet's and the
    DisaggregatedSet's, which its manager also watches (it would not start without it)."""
    folder = module_dir(*LWS) / "config" / "crd" / "bases"
    files = sorted(folder.glob("*.yaml"))
    if not files:
        raise ModuleUnavailable(f"{folder} holds no CRD manifests")
    return files
