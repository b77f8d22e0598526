"""The e2e harness itself, and the API-server behaviour the operator relies on.

These run against a real etcd + kube-apiserver (see conftest.py): the CRD establishment,
status-subresource and server-side-apply semantics asserted here are the server's, not a mock's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from preemption_operator.testing.control_plane import ControlPlane, project_crd_files

GROUP = "e2e.preemption.test"
PLURAL = "widgets"
RESOURCE = f"{PLURAL}.{GROUP}"

# A tiny self-contained CRD with a status subresource: it proves the harness whatever the
# state of crds/.
WIDGET_CRD = f"""\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {RESOURCE}
spec:
  group: {GROUP}
  scope: Namespaced
  names:
    plural: {PLURAL}
    singular: widget
    kind: Widget
    listKind: WidgetList
  versions:
    - name: v1
      served: true
      storage: true
      subresources:
        status: {{}}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size:
                  type: integer
                color:
                  type: string
            status:
              type: object
              properties:
                phase:
                  type: string
"""


def widget(name: str, namespace: str, **spec: Any) -> str:
    return json.dumps(
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": "Widget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
    )


def get_json(cp: ControlPlane, *args: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(cp.kubectl("get", *args, "-o", "json", check=True).stdout)
    return result


def established(cp: ControlPlane, crd: str) -> bool:
    conditions = get_json(cp, "crd", crd).get("status", {}).get("conditions", [])
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="session")
def widget_crd(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("crds") / "widgets.yaml"
    path.write_text(WIDGET_CRD)
    control_plane.apply_crds([path])
    return RESOURCE


# ---- the harness ----------------------------------------------------------------------------


def test_readyz_and_kubectl_version(control_plane: ControlPlane) -> None:
    assert control_plane.server.startswith("https://127.0.0.1:")
    status, body = control_plane.get("/readyz")
    assert (status, body) == (200, "ok")

    proc = control_plane.kubectl("version", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    server = json.loads(proc.stdout)["serverVersion"]
    assert server["gitVersion"].startswith("v1."), server
    assert "exceeds the supported minor version skew" not in proc.stderr


def test_authentication_and_rbac_are_on(control_plane: ControlPlane, namespace: str) -> None:
    status, _ = control_plane.get("/api/v1/namespaces", token=None)
    assert status == 403  # anonymous: authenticated as system:anonymous, then denied by RBAC
    status, _ = control_plane.get("/api/v1/namespaces", token="not-a-token")
    assert status == 401

    # Service-account tokens are signed and accepted (the --service-account-* key pair), and
    # a fresh service account is allowed nothing.
    control_plane.kubectl("create", "serviceaccount", "probe", "-n", namespace, check=True)
    token = control_plane.kubectl("create", "token", "probe", "-n", namespace, check=True).stdout.strip()
    whoami = json.loads(control_plane.kubectl(f"--token={token}", "auth", "whoami", "-o", "json", check=True).stdout)
    assert whoami["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:probe"
    can_i = control_plane.kubectl(
        "auth", "can-i", "list", "pods", "-n", namespace, f"--as=system:serviceaccount:{namespace}:probe"
    )
    assert can_i.stdout.strip() == "no"


def test_namespace_fixture(control_plane: ControlPlane, namespace: str) -> None:
    ns = get_json(control_plane, "namespace", namespace)
    assert ns["status"]["phase"] == "Active"
    assert namespace.startswith("e2e-test-namespace-fixture-")


def test_kubeconfig_works_for_python_clients(control_plane: ControlPlane) -> None:
    import lightkube
    from lightkube.resources.core_v1 import Namespace

    client = lightkube.Client(lightkube.KubeConfig.from_file(control_plane.kubeconfig))
    try:
        names = {ns.metadata.name for ns in client.list(Namespace)}
    finally:
        client.close()
    assert {"default", "kube-system"} <= names


# ---- CRDs -------------------------------------------------------------------------------------


def test_inline_crd_becomes_established(control_plane: ControlPlane, widget_crd: str) -> None:
    assert established(control_plane, widget_crd)
    # Served: the resource is in discovery and can be listed.
    listed = control_plane.kubectl("get", widget_crd, "-A", "-o", "name")
    assert listed.returncode == 0, listed.stderr


@pytest.mark.parametrize("crd_file", project_crd_files(), ids=lambda p: p.name)
def test_project_crd_becomes_established(control_plane: ControlPlane, crd_file: Path) -> None:
    names = control_plane.apply_crds([crd_file])
    crds = [n.split("/", 1)[1] for n in names if n.startswith("customresourcedefinition")]
    assert crds, f"{crd_file} holds no CustomResourceDefinition"
    for crd in crds:
        assert established(control_plane, crd)
        obj = get_json(control_plane, "crd", crd)
        assert obj["status"]["acceptedNames"]["plural"] == obj["spec"]["names"]["plural"]
        listed = control_plane.kubectl("get", crd, "-A", "-o", "name")
        assert listed.returncode == 0, listed.stderr


def test_cluster_fixture_installs_every_project_crd(cluster: ControlPlane) -> None:
    files = project_crd_files()
    crds = json.loads(cluster.kubectl("get", "crd", "-o", "json", check=True).stdout)["items"]
    names = {c["metadata"]["name"] for c in crds if established(cluster, c["metadata"]["name"])}
    for f in files:
        for doc in f.read_text().split("\n---"):
            if "kind: CustomResourceDefinition" in doc:
                name = next(line.split(":", 1)[1].strip() for line in doc.splitlines() if line.startswith("  name:"))
                assert name in names, f"{name} from {f.name} is not Established"


# ---- semantics the operator relies on -------------------------------------------------------


def test_status_subresource_does_not_bump_generation(
    control_plane: ControlPlane, widget_crd: str, namespace: str
) -> None:
    cp = control_plane
    cp.kubectl("create", "-f", "-", input=widget("w", namespace, size=1, color="red"), check=True)
    obj = get_json(cp, widget_crd, "w", "-n", namespace)
    assert obj["metadata"]["generation"] == 1

    # /status: the status changes, the generation does not; spec sent there is ignored.
    cp.kubectl(
        "patch", widget_crd, "w", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", '{"status": {"phase": "Running"}, "spec": {"size": 99}}',
        check=True,
    )  # fmt: skip
    obj = get_json(cp, widget_crd, "w", "-n", namespace)
    assert obj["status"] == {"phase": "Running"}
    assert obj["spec"]["size"] == 1
    assert obj["metadata"]["generation"] == 1

    # Metadata (where controllers keep bookkeeping annotations) does not bump it either.
    cp.kubectl("annotate", widget_crd, "w", "-n", namespace, "example.com/note=x", check=True)
    assert get_json(cp, widget_crd, "w", "-n", namespace)["metadata"]["generation"] == 1

    # The main resource ignores status, and a spec change bumps the generation.
    cp.kubectl(
        "patch", widget_crd, "w", "-n", namespace, "--type=merge",
        "-p", '{"spec": {"size": 2}, "status": {"phase": "Ignored"}}',
        check=True,
    )  # fmt: skip
    obj = get_json(cp, widget_crd, "w", "-n", namespace)
    assert obj["spec"]["size"] == 2
    assert obj["status"] == {"phase": "Running"}
    assert obj["metadata"]["generation"] == 2


def test_server_side_apply_conflicts(control_plane: ControlPlane, widget_crd: str, namespace: str) -> None:
    cp = control_plane

    def apply(manager: str, *extra: str, **spec: Any) -> Any:
        return cp.kubectl(
            "apply", "--server-side", f"--field-manager={manager}", *extra, "-f", "-",
            input=widget("w", namespace, **spec),
        )  # fmt: skip

    first = apply("alice", size=1, color="red")
    assert first.returncode == 0, first.stderr

    # The same value from another manager is shared ownership, not a conflict.
    same = apply("bob", size=1)
    assert same.returncode == 0, same.stderr

    conflict = apply("carol", color="blue")
    assert conflict.returncode != 0
    assert "conflict" in conflict.stderr.lower(), conflict.stderr
    assert get_json(cp, widget_crd, "w", "-n", namespace)["spec"]["color"] == "red"

    forced = apply("carol", "--force-conflicts", color="blue")
    assert forced.returncode == 0, forced.stderr
    obj = get_json(cp, widget_crd, "w", "-n", namespace, "--show-managed-fields")
    assert obj["spec"] == {"size": 1, "color": "blue"}
    owners = {
        entry["manager"]
        for entry in obj["metadata"]["managedFields"]
        if "f:color" in entry.get("fieldsV1", {}).get("f:spec", {})
    }
    assert owners == {"carol"}
