"""preemption_operator.testing, the harness the e2e tests, the benchmarks and hack/ share: it
imports without pytest, finds the project's CRDs or says why not, and the scripts reach it as an
installed package, never by editing sys.path."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from preemption_operator.testing.control_plane import CRDS_DIR, project_crd_files

ROOT = Path(__file__).resolve().parents[2]
MODULES = ["chaos", "control_plane", "fault_proxy", "operator_process", "workload_status"]


def test_the_harness_imports_without_pytest() -> None:
    imports = "; ".join(f"import preemption_operator.testing.{m}" for m in MODULES)
    probe = f"import sys; {imports}; print('pytest' in sys.modules)"
    answer = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert answer.stdout.strip() == "False"


def test_project_crd_files_are_the_crds_beside_the_package() -> None:
    files = project_crd_files()
    assert CRDS_DIR == ROOT / "crds"
    assert files == sorted(files)
    assert {f.name for f in files} >= {"kueue.x-k8s.io_workloads.yaml", "kueue.x-k8s.io_clusterqueues.yaml"}
    assert all(f.name != "kustomization.yaml" for f in files)


def test_missing_or_empty_crds_are_an_error_that_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"pip install -e \."):
        project_crd_files(tmp_path / "absent")
    (tmp_path / "kustomization.yaml").write_text("resources: []\n")
    with pytest.raises(FileNotFoundError, match="make crds"):
        project_crd_files(tmp_path)


@pytest.mark.parametrize(
    "script", sorted([*ROOT.glob("benchmarks/**/*.py"), *ROOT.glob("hack/*.py")]), ids=lambda p: p.name
)
def test_scripts_do_not_edit_sys_path(script: Path) -> None:
    assert not re.search(r"sys\.path\.(insert|append|extend)|sys\.path\s*[+]?=", script.read_text())
