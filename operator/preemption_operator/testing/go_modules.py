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


class ModuleUnavailable(RuntimeError):
    """The module could not be fetched: no Go toolchain, or the proxy refused it."""


def module_dir(module: str, version: str) -> Path:
    """The module's source folder in the Go module cache (downloaded on first use)."""
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if go is None:
        raise ModuleUnavailable(f"no `go` on PATH to download {module}@{version}")
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
