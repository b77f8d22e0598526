"""Issue 15, item 9: the Helm chart (charts/preemption-operator) lints, renders exactly what
`kubectl kustomize config/` renders (so the two deployments cannot drift apart), and its rendered
manifests apply to the real API server, CRDs included, granting the operator what it needs.

helm is built from the helm.sh/helm/v3 Go module by hack/setup-helm.sh (as the control plane
is); without it these tests skip, and fail in CI."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from preemption_operator.testing.control_plane import ControlPlane, running_control_plane

from .conftest import in_ci

REPO_ROOT = Path(__file__).resolve().parents[2]

CHART = REPO_ROOT / "charts" / "preemption-operator"
NAMESPACE = "preemption-operator-system"
SA_USER = f"system:serviceaccount:{NAMESPACE}:preemption-operator"


@pytest.fixture(scope="module")
def helm() -> Path:
    explicit = os.environ.get("HELM")
    if explicit and os.access(explicit, os.X_OK):
        return Path(explicit)
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "hack" / "setup-helm.sh"), "--installed-only"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode == 0 and proc.stdout.strip():
        return Path(proc.stdout.strip())
    problem = "helm is not built: run hack/setup-helm.sh (it builds helm from the helm.sh/helm/v3 module)"
    if in_ci():
        pytest.fail(problem, pytrace=False)
    pytest.skip(problem)


def run(helm: Path, *args: str) -> str:
    proc = subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def objects(text: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(text) if d}


def test_the_chart_lints(helm: Path) -> None:
    out = run(helm, "lint", str(CHART))
    assert "0 chart(s) failed" in out


def test_the_chart_renders_what_config_renders(helm: Path, cluster: ControlPlane) -> None:
    chart = objects(run(helm, "template", "preemption-operator", str(CHART), "--namespace", NAMESPACE))
    config = objects(cluster.kubectl("kustomize", str(REPO_ROOT / "config"), check=True).stdout)
    config.pop(("Namespace", NAMESPACE))  # helm installs into a namespace it is given (--create-namespace)
    assert sorted(chart) == sorted(config)
    for key, obj in config.items():
        assert chart[key] == obj, key


def test_values_change_what_they_name(helm: Path) -> None:
    rendered = objects(
        run(
            helm,
            "template",
            "x",
            str(CHART),
            "--namespace",
            "ops",
            "--set",
            "replicas=3,image.tag=v1,webhooks.enabled=false,visibility.enabled=false",
            "--set-json",
            'extraArgs=["--kube-api-qps=50"]',
            "--set",
            "managerConfig.controllerManagerConfigYaml=kind: Configuration",
        )
    )
    deployment = rendered[("Deployment", "preemption-operator")]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert deployment["spec"]["replicas"] == 3
    assert container["image"] == "preemption-operator:v1"
    assert container["args"] == [
        "run",
        "--log-format=json",
        "--config=/etc/preemption-operator/controller_manager_config.yaml",
        "--metrics-port=8080",
        "--webhook-port=9443",
        "--no-webhooks",
        "--no-visibility",
        "--kube-api-qps=50",
    ]
    config = rendered[("ConfigMap", "preemption-operator-manager-config")]
    assert config["data"] == {"controller_manager_config.yaml": "kind: Configuration\n"}
    assert ("APIService", "v1beta2.visibility.kueue.x-k8s.io") not in rendered
    assert ("Service", "preemption-operator-visibility") not in rendered
    binding = rendered[("ClusterRoleBinding", "preemption-operator")]
    assert binding["subjects"][0]["namespace"] == "ops"


def test_the_rendered_chart_applies_and_grants_what_the_operator_needs(helm: Path, cluster: ControlPlane) -> None:
    rendered = run(helm, "template", "preemption-operator", str(CHART), "--namespace", NAMESPACE, "--include-crds")
    if cluster.kubectl("get", "namespace", NAMESPACE).returncode != 0:
        cluster.kubectl("create", "namespace", NAMESPACE, check=True)
    cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=e2e-helm", "-f", "-", input=rendered, check=True
    )
    for verb, resource, extra in (
        ("watch", "workloads.kueue.x-k8s.io", ["-A"]),
        ("patch", "jobs.batch", ["-n", "default"]),
        ("update", "secrets", ["-n", NAMESPACE]),
        ("create", "validatingwebhookconfigurations.admissionregistration.k8s.io", []),
    ):
        proc = cluster.kubectl("auth", "can-i", verb, resource, *extra, f"--as={SA_USER}")
        assert proc.stdout.strip() == "yes", (verb, resource, proc.stdout, proc.stderr)
    assert (
        cluster.kubectl("auth", "can-i", "delete", "jobs.batch", "-n", "default", f"--as={SA_USER}").stdout.strip()
        == "no"
    )
    # Nothing serves its APIService here: removed, or every later kubectl discovery complains.
    cluster.kubectl("delete", "apiservice", "v1beta2.visibility.kueue.x-k8s.io", "--ignore-not-found", check=True)


def test_config_applies_over_a_helm_install_without_conflicts(helm: Path) -> None:
    """Moving from the chart to `config/` (server-side apply over a Helm install) needs no
    `--force-conflicts`: every field both set has the same value, so the apply shares it with
    Helm instead of conflicting. An env var's `fieldRef` is one atomic value, and Helm's copy
    holds the `apiVersion` the API server defaults: `config/` sets it too. Its own control plane:
    the chart's cluster-wide objects must not be there already (Helm adopts nothing)."""
    with running_control_plane(crds=False) as plane:
        kubeconfig = f"--kubeconfig={plane.kubeconfig}"
        run(
            helm,
            "install",
            "preemption-operator",
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--create-namespace",
            kubeconfig,
        )
        proc = plane.kubectl("apply", "--server-side", "-k", str(REPO_ROOT / "config"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "conflict" not in proc.stderr.lower()
