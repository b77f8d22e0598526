"""Offline validation agrees with the API server (issue item 5): every invalid fixture goes to a
real kube-apiserver (created, or its status written through the status subresource, and refused
with 422) and to `simulate` (exit 2), and both name the same field with the same words.

The CEL rules are enumerated from the CRD files in crds/: every rule must have a violating
fixture here (a transition rule, which reads `oldSelf`, an update fixture: offline has no stored
object, so `simulate` accepts what only the update breaks), so a rule added later fails
`test_every_rule_has_a_fixture` until it gets one. All tests share the session's API server.
"""

from __future__ import annotations

import copy
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from preemption_operator.api import validation
from preemption_operator.cli import cli
from preemption_operator.testing.control_plane import ControlPlane

CRD_DIR = Path(__file__).resolve().parents[2] / "crds"
V1BETA2 = "kueue.x-k8s.io/v1beta2"
V1ALPHA1 = "kueue.x-k8s.io/v1alpha1"
NOT_CHECKED = "some validation rules were not checked because the object was invalid"


# ---------------------------------------------------------------------------------------------
# The rules, from the CRD files
# ---------------------------------------------------------------------------------------------


def _walk(node: Any, path: str) -> Any:
    if not isinstance(node, dict):
        return
    for rule in node.get("x-kubernetes-validations", []):
        yield path, rule
    for name, prop in node.get("properties", {}).items():
        yield from _walk(prop, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


def crd_files() -> list[dict[str, Any]]:
    return [yaml.safe_load(path.read_text()) for path in sorted(CRD_DIR.glob("*.yaml"))]


def crd_rules() -> list[tuple[str, str, str, bool]]:
    """(kind, node path, message, transition?) of every CEL rule in crds/."""
    found = []
    for crd in crd_files():
        kind = crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            for where, rule in _walk(version["schema"]["openAPIV3Schema"], ""):
                found.append((kind, where or ".", rule["message"], validation.is_transition_rule(rule["rule"])))
    return found


# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------


@dataclass
class Bad:
    """An object the API server refuses: on create, or (with `status`) when the status is written."""

    body: dict[str, Any]
    status: dict[str, Any] | None = None
    update: Callable[[dict[str, Any]], None] | None = field(default=None)
    """For a transition rule: the change, made after creation, that the API server refuses."""

    def offline(self) -> dict[str, Any]:
        body = copy.deepcopy(self.body)
        if self.status is not None:
            body["status"] = copy.deepcopy(self.status)
        if self.update is not None:
            self.update(body)
        return body


def _name() -> str:
    return f"v-{secrets.token_hex(4)}"


def config(**selector: Any) -> dict[str, Any]:
    return {
        "apiVersion": V1ALPHA1,
        "kind": "PreemptionConfig",
        "metadata": {"name": _name()},
        "spec": {
            "rules": [
                {
                    "name": "r",
                    "activationPolicy": {"trigger": "Always"},
                    "candidateSelectors": [{"scope": "AnyClusterQueue", **selector}],
                }
            ]
        },
    }


def ordered(*fields: str, **selector: Any) -> dict[str, Any]:
    body = config(**selector)
    body["spec"]["ordering"] = [{"orderingField": name} for name in fields]
    return body


def limit(window: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": V1ALPHA1,
        "kind": "PreemptionLimit",
        "metadata": {"name": _name()},
        "spec": {"scope": "Global", "limit": 3, "limitWindowDuration": window, **spec},
    }


def group(covered: list[str], resources: list[str], **quota: Any) -> dict[str, Any]:
    return {
        "coveredResources": covered,
        "flavors": [{"name": "default", "resources": [{"name": r, "nominalQuota": 1, **quota} for r in resources]}],
    }


def queue(**spec: Any) -> dict[str, Any]:
    spec.setdefault("cohortName", "org")
    spec.setdefault("resourceGroups", [group(["cpu"], ["cpu"])])
    return {"apiVersion": V1BETA2, "kind": "ClusterQueue", "metadata": {"name": _name()}, "spec": spec}


def cohort(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": V1BETA2, "kind": "Cohort", "metadata": {"name": _name()}, "spec": spec}


def flavor(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": V1BETA2, "kind": "ResourceFlavor", "metadata": {"name": _name()}, "spec": spec}


def topology(*levels: str) -> dict[str, Any]:
    spec = {"levels": [{"nodeLabel": level} for level in levels]}
    return {"apiVersion": V1BETA2, "kind": "Topology", "metadata": {"name": _name()}, "spec": spec}


def local_queue(namespace: str, cluster_queue: str = "cq") -> dict[str, Any]:
    return {
        "apiVersion": V1BETA2,
        "kind": "LocalQueue",
        "metadata": {"name": _name(), "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue},
    }


POD_SET = {"name": "main", "count": 2, "template": {"spec": {"containers": [{"name": "c"}]}}}


def workload(namespace: str, **spec: Any) -> dict[str, Any]:
    spec.setdefault("queueName", "main")
    spec.setdefault("podSets", [copy.deepcopy(POD_SET)])
    return {
        "apiVersion": V1BETA2,
        "kind": "Workload",
        "metadata": {"name": _name(), "namespace": namespace},
        "spec": spec,
    }


RESERVED = [
    {
        "type": "QuotaReserved",
        "status": "True",
        "reason": "QuotaReserved",
        "message": "Quota reserved in ClusterQueue cq",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
]


def admitted(*assignments: dict[str, Any], conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    listed = list(assignments) or [{"name": "main", "count": 2}]
    return {"conditions": conditions or RESERVED, "admission": {"clusterQueue": "cq", "podSetAssignments": listed}}


def placed(levels: list[str], *slices: dict[str, Any]) -> dict[str, Any]:
    return admitted({"name": "main", "count": 2, "topologyAssignment": {"levels": levels, "slices": list(slices)}})


def _slice(domains: int, **extra: Any) -> dict[str, Any]:
    return {
        "domainCount": domains,
        "valuesPerLevel": [{"individual": {"roots": [f"n{i}" for i in range(domains)]}}],
        **extra,
    }


WPC_REF = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}


def _set(*path: Any, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(body: dict[str, Any]) -> None:
        node = body
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return change


def admission_check() -> dict[str, Any]:
    return {
        "apiVersion": V1BETA2,
        "kind": "AdmissionCheck",
        "metadata": {"name": _name()},
        "spec": {"controllerName": "example.com/gate"},
    }


def checked(*tolerations: dict[str, Any]) -> dict[str, Any]:
    """A Workload status whose check's podSetUpdates carry these tolerations."""
    update = {"name": "main", "tolerations": list(tolerations)}
    check = {"name": "gate", "state": "Ready", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    return {"admissionChecks": [{**check, "podSetUpdates": [update]}]}


_UPDATES = ".status.admissionChecks[].podSetUpdates[].tolerations"

# (kind, node path, message) -> a violating fixture (a function of the test's namespace).
RULE_FIXTURES: dict[tuple[str, str, str], Callable[[str], Bad]] = {
    ("AdmissionCheck", ".spec.controllerName", "field is immutable"):
        lambda ns: Bad(admission_check(), update=_set("spec", "controllerName", value="example.com/other")),
    ("Workload", _UPDATES, "operator must be Exists when 'key' is empty, which means 'match all values and all keys'"):
        lambda ns: Bad(workload(ns), status=checked({"operator": "Equal", "value": "v"})),
    ("Workload", _UPDATES, "effect must be 'NoExecute' when 'tolerationSeconds' is set"):
        lambda ns: Bad(workload(ns), status=checked({"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5})),
    ("Workload", _UPDATES, "supported toleration values: 'Equal'(default), 'Exists'"):
        lambda ns: Bad(workload(ns), status=checked({"key": "k", "operator": "In"})),
    ("Workload", _UPDATES, "a value must be empty when 'operator' is 'Exists'"):
        lambda ns: Bad(workload(ns), status=checked({"key": "k", "operator": "Exists", "value": "v"})),
    ("Workload", _UPDATES, "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'"):
        lambda ns: Bad(workload(ns), status=checked({"key": "k", "effect": "Sometimes"})),
    ("ClusterQueue", ".spec", "borrowingLimit must be nil when cohort is empty"):
        lambda ns: Bad(queue(cohortName=None, resourceGroups=[group(["cpu"], ["cpu"], borrowingLimit=1)])),
    ("ClusterQueue", ".spec.resourceGroups[]", "flavors must have the same number of resources as the coveredResources"):
        lambda ns: Bad(queue(resourceGroups=[group(["cpu", "memory"], ["cpu"])])),
    ("ClusterQueue", ".spec.resourceGroups[]", "each flavor's resources must match the name in coveredResources, in order"):
        lambda ns: Bad(queue(resourceGroups=[group(["cpu", "memory"], ["memory", "cpu"])])),
    ("ClusterQueue", ".spec.flavorFungibility", "preference can only be set when both whenCanBorrow and whenCanPreempt are TryNextFlavor"):
        lambda ns: Bad(queue(flavorFungibility={"preference": "PreemptionOverBorrowing"})),
    ("ClusterQueue", ".spec.preemption", "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never"):
        lambda ns: Bad(queue(preemption={"borrowWithinCohort": {"policy": "LowerPriority"}})),
    ("Cohort", ".spec.resourceGroups[]", "flavors must have the same number of resources as the coveredResources"):
        lambda ns: Bad(cohort(resourceGroups=[group(["cpu", "memory"], ["cpu"])])),
    ("Cohort", ".spec.resourceGroups[]", "each flavor's resources must match the name in coveredResources, in order"):
        lambda ns: Bad(cohort(resourceGroups=[group(["cpu", "memory"], ["memory", "cpu"])])),
    ("LocalQueue", ".spec.clusterQueue", "field is immutable"):
        lambda ns: Bad(local_queue(ns), update=_set("spec", "clusterQueue", value="other")),
    ("PreemptionConfig", ".spec.rules[].candidateSelectors[]", "quota cannot be used with scope WithinLocalQueue or WithinClusterQueue"):
        lambda ns: Bad(config(scope="WithinClusterQueue", quota="DRSAllStrategies")),
    ("PreemptionConfig", ".spec.rules[].candidateSelectors[]", "minExecutionDuration must be less than or equal to maxExecutionDuration"):
        lambda ns: Bad(config(minExecutionDuration="2h", maxExecutionDuration="90m")),
    ("PreemptionConfig", ".spec.rules[].candidateSelectors[]", "minTimeFromCreationDuration must be less than or equal to maxTimeFromCreationDuration"):
        lambda ns: Bad(config(minTimeFromCreationDuration="1m0.5s", maxTimeFromCreationDuration="60s")),
    ("PreemptionConfig", ".spec.rules[].candidateSelectors[].numericLabels[]", "minValue must be less than or equal to maxValue"):
        lambda ns: Bad(config(numericLabels=[{"key": "example.com/size", "minValue": 5, "maxValue": 1}])),
    ("PreemptionConfig", ".spec.ordering", "orderingField must be unique"):
        lambda ns: Bad(ordered("AdmissionTimestamp", "Priority", "AdmissionTimestamp")),
    ("PreemptionLimit", ".spec.limitWindowDuration", "must be at least 1s"):
        lambda ns: Bad(limit("999ms")),
    ("PreemptionConfig", ".spec.rules[].candidateSelectors[].priority", "mode and comparison must be specified together"):
        lambda ns: Bad(config(priority={"mode": "Base"})),
    ("ResourceFlavor", ".spec", "at least one nodeLabel is required when topology is set"):
        lambda ns: Bad(flavor(topologyName="t", nodeLabels={})),
    ("ResourceFlavor", ".spec", "resourceFlavorSpec are immutable when topologyName is set"):
        lambda ns: Bad(flavor(topologyName="t", nodeLabels={"pool": "a"}), update=_set("spec", "nodeLabels", value={"pool": "b"})),
    ("ResourceFlavor", ".spec.nodeTaints", "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'"):
        lambda ns: Bad(flavor(nodeTaints=[{"key": "k", "effect": "NoSchedule"}, {"key": "k", "effect": "Sometimes"}])),
    ("Topology", ".spec.levels", "field is immutable"):
        lambda ns: Bad(topology("rack"), update=_set("spec", "levels", value=[{"nodeLabel": "block"}])),
    ("Topology", ".spec.levels", "must be unique"):
        lambda ns: Bad(topology("rack", "rack")),
    ("Topology", ".spec.levels", "the kubernetes.io/hostname label can only be used at the lowest level of topology"):
        lambda ns: Bad(topology("kubernetes.io/hostname", "rack")),
    ("Workload", ".", "podSetAssignments must have the same number of podSets as the spec"):
        lambda ns: Bad(workload(ns), status=admitted({"name": "main", "count": 2}, {"name": "extra", "count": 1})),
    ("Workload", ".", "priorityClassRef is immutable while workload quota reserved"):
        lambda ns: Bad(workload(ns), status=admitted(), update=_set("spec", "priorityClassRef", value=WPC_REF)),
    ("Workload", ".", "queueName is immutable while workload quota reserved"):
        lambda ns: Bad(workload(ns), status=admitted(), update=_set("spec", "queueName", value="other")),
    ("Workload", ".spec.podSets[]", "minCount should be positive and less or equal to count"):
        lambda ns: Bad(workload(ns, podSets=[{**POD_SET, "minCount": 3}])),
    ("Workload", ".spec.priorityClassRef", "only the PriorityClass kind is allowed for the scheduling.k8s.io group"):
        lambda ns: Bad(workload(ns, priorityClassRef={"group": "scheduling.k8s.io", "kind": "WorkloadPriorityClass", "name": "high"})),
    ("Workload", ".spec.priorityClassRef", "only the WorkloadPriorityClass kind is allowed for the kueue.x-k8s.io group"):
        lambda ns: Bad(workload(ns, priorityClassRef={"group": "kueue.x-k8s.io", "kind": "PriorityClass", "name": "high"})),
    ("Workload", ".status.admission.podSetAssignments[].topologyAssignment", "valuesPerLevel must have the same length as the number of levels in this TopologyAssignment"):
        lambda ns: Bad(workload(ns), status=placed(["rack", "kubernetes.io/hostname"], _slice(2, podCounts={"universal": 1}))),
    ("Workload", ".status.admission.podSetAssignments[].topologyAssignment.slices[]", "podCounts.individual must have length equal to domainCount"):
        lambda ns: Bad(workload(ns), status=placed(["kubernetes.io/hostname"], _slice(2, podCounts={"individual": [2]}))),
    ("Workload", ".status.admission.podSetAssignments[].topologyAssignment.slices[]", "valuesPerLevel.individual, if set, must have roots of length equal to domainCount of this TopologyAssignmentSlice"):
        lambda ns: Bad(workload(ns), status=placed(["kubernetes.io/hostname"], {"domainCount": 2, "valuesPerLevel": [{"individual": {"roots": ["n1"]}}], "podCounts": {"universal": 1}})),
    ("Workload", ".status.admission.podSetAssignments[].topologyAssignment.slices[].podCounts", "exactly one of the fields in [universal individual] must be set"):
        lambda ns: Bad(workload(ns), status=placed(["kubernetes.io/hostname"], _slice(2, podCounts={"universal": 1, "individual": [1, 1]}))),
    ("Workload", ".status.admission.podSetAssignments[].topologyAssignment.slices[].valuesPerLevel[]", "exactly one of the fields in [universal individual] must be set"):
        lambda ns: Bad(workload(ns), status=placed(["kubernetes.io/hostname"], {"domainCount": 1, "valuesPerLevel": [{"universal": "n1", "individual": {"roots": ["n1"]}}], "podCounts": {"universal": 2}})),
}  # fmt: skip


def _drop_nones(body: dict[str, Any]) -> None:
    for key in [k for k, v in body.items() if v is None]:
        del body[key]


# ---------------------------------------------------------------------------------------------
# Both sides
# ---------------------------------------------------------------------------------------------


def _resource(body: dict[str, Any]) -> list[str]:
    meta = body["metadata"]
    where = ["-n", meta["namespace"]] if meta.get("namespace") else []
    plural = {crd["spec"]["names"]["kind"]: crd["spec"]["names"]["plural"] for crd in crd_files()}[body["kind"]]
    return [f"{plural}.kueue.x-k8s.io", meta["name"], *where]


def on_server(cluster: ControlPlane, bad: Bad) -> tuple[int, str]:
    """Sends the fixture; (kubectl's exit code, its output) for the step meant to be refused."""
    _drop_nones(bad.body.get("spec", {}))
    proc = cluster.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(bad.body))
    if bad.status is None and bad.update is None:
        return proc.returncode, proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stderr
    if bad.status is not None:
        patch = json.dumps({"status": bad.status})
        proc = cluster.kubectl("patch", *_resource(bad.body), "--subresource=status", "--type=merge", "-p", patch)
        if bad.update is None:
            return proc.returncode, proc.stdout + proc.stderr
        assert proc.returncode == 0, proc.stderr
    stored = json.loads(cluster.kubectl("get", *_resource(bad.body), "-o", "json", check=True).stdout)
    assert bad.update is not None
    bad.update(stored)
    proc = cluster.kubectl("replace", "-f", "-", "-o", "json", input=json.dumps(stored))
    return proc.returncode, proc.stdout + proc.stderr


def server_problems(output: str) -> list[str]:
    """The `<path>: <detail>` items of an API server's 422 (kubectl writes `The <Kind> "<name>" is
    invalid: ...` for a StatusReasonInvalid response, and only for it)."""
    assert " is invalid: " in output, output
    text = output.split(" is invalid: ", 1)[1]
    items = [line[2:] for line in text.splitlines() if line.startswith("* ")] or [text.strip()]
    return [item.strip() for item in items if NOT_CHECKED not in item]


def offline(tmp_path: Path, body: dict[str, Any]) -> tuple[int, str]:
    path = tmp_path / f"{body['metadata'].get('name', 'unnamed')}.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    result = CliRunner().invoke(cli, ["simulate", str(path), "--now", "2026-06-01T00:00:00Z"])
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def offline_problems(output: str, body: dict[str, Any]) -> list[str]:
    meta = body["metadata"]
    ref = f"{body['kind']} {meta['namespace'] + '/' if meta.get('namespace') else ''}{meta.get('name', '<unnamed>')}: "
    (line,) = [line for line in output.splitlines() if line.startswith("error: ")]
    assert ref in line, line
    return line.split(ref, 1)[1].split("; ")


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------

RULES = crd_rules()


def test_every_rule_has_a_fixture() -> None:
    """A rule added to a CRD must come with a violating object here."""
    assert len(RULES) >= 31
    missing = sorted(
        f"{kind} {path}: {message}" for kind, path, message, _ in RULES if (kind, path, message) not in RULE_FIXTURES
    )
    assert not missing, f"CEL rules without a violating fixture: {missing}"
    stale = sorted(set(RULE_FIXTURES) - {(kind, path, message) for kind, path, message, _ in RULES})
    assert not stale, f"fixtures for rules no CRD has: {stale}"


def test_the_offline_rules_are_the_crd_files_rules() -> None:
    """api/validation.py reads the generated schemas: the same rules as the committed files."""
    generated = sorted((found.kind, path or ".", rule["message"]) for found, path, rule in validation.rules())
    assert generated == sorted((kind, path, message) for kind, path, message, _ in RULES)


@pytest.mark.parametrize(
    ("kind", "path", "message", "transition"), RULES, ids=[f"{k}{p}:{m[:50]}" for k, p, m, _ in RULES]
)
def test_rule_refused_by_both(
    cluster: ControlPlane, namespace: str, tmp_path: Path, kind: str, path: str, message: str, transition: bool
) -> None:
    build = RULE_FIXTURES.get((kind, path, message))
    if build is None:
        pytest.fail("no fixture: see test_every_rule_has_a_fixture")
    bad = build(namespace)
    body = bad.offline()
    _drop_nones(body["spec"])
    code, output = on_server(cluster, bad)
    assert code != 0, f"the API server accepted it: {output}"
    problems = server_problems(output)
    assert any(message in problem for problem in problems), problems

    code, out = offline(tmp_path, body)
    if transition:
        # No stored object offline: the rule cannot run, and the object is otherwise valid.
        assert code == 0, out
        return
    assert code == 2, out
    found = offline_problems(out, body)
    assert sorted(found) == sorted(problems), f"offline: {found}\nAPI server: {problems}"


# The rows of docs/bad-input.md about an object's validity. Where the models refuse the value too,
# `simulate` says it in their words (the limit in words, never the CRD's regular expression): the
# field path is the API server's; where only the CRD refuses, the whole message is.
def _uncovered(ns: str) -> dict[str, Any]:
    return queue(resourceGroups=[{**group(["cpu", "memory"], ["cpu"]), "flavors": [{"name": "default", "resources": [
        {"name": "cpu", "nominalQuota": 4}, {"name": "gpu", "nominalQuota": 1}]}]}])  # fmt: skip


def _no_name(ns: str) -> dict[str, Any]:
    body = flavor()
    del body["metadata"]["name"]
    return body


TABLE_ROWS = [
    pytest.param(lambda ns: queue(resourceGroups=[{"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": -1}]}]}]),
                 "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota", "-1 is negative: it must be zero or more", id="a negative quantity"),
    pytest.param(lambda ns: queue(resourceGroups=[{"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": "4x"}]}]}]),
                 "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota", '"4x" is not a valid quantity', id="a quantity that is not one"),
    pytest.param(_uncovered, "spec.resourceGroups[0]",
                 "Invalid value: \"object\": each flavor's resources must match the name in coveredResources, in order",
                 id="a quota for a resource not in coveredResources"),
    pytest.param(_no_name, "metadata.name", "required: every object needs a name", id="an object without a name"),
    pytest.param(lambda ns: config(numericLabels=[{"key": "k", "minValue": 5, "maxValue": 1}]),
                 "spec.rules[0].candidateSelectors[0].numericLabels[0]", 'Invalid value: "object": minValue must be less than or equal to maxValue',
                 id="numericLabels minValue above maxValue"),
    pytest.param(lambda ns: config(scope="WithinClusterQueue", quota="DRSAllStrategies"),
                 "spec.rules[0].candidateSelectors[0]", 'Invalid value: "object": quota cannot be used with scope WithinLocalQueue or WithinClusterQueue',
                 id="a quota selector within the ClusterQueue"),
    pytest.param(lambda ns: config(minExecutionDuration="2h", maxExecutionDuration="1h"),
                 "spec.rules[0].candidateSelectors[0]", 'Invalid value: "object": minExecutionDuration must be less than or equal to maxExecutionDuration',
                 id="minExecutionDuration above maxExecutionDuration"),
]  # fmt: skip


@pytest.mark.parametrize(("build", "path", "words"), TABLE_ROWS)
def test_bad_input_rows_refused_by_both(
    cluster: ControlPlane, namespace: str, tmp_path: Path, build: Callable[[str], dict[str, Any]], path: str, words: str
) -> None:
    body = build(namespace)
    code, output = on_server(cluster, Bad(copy.deepcopy(body)))
    assert code != 0, output
    problems = server_problems(output)
    assert any(problem.startswith(f"{path}: ") for problem in problems), problems
    code, out = offline(tmp_path, body)
    assert code == 2, out
    assert f"{path}: {words}" in out, out
    if words.startswith("Invalid value"):  # the API server's own words
        assert f"{path}: {words}" in problems


def test_an_overlong_duration_is_refused_by_both(cluster: ControlPlane, tmp_path: Path) -> None:
    """The API server cannot evaluate the rule comparing the bounds (its words name the rule);
    the models name the field, and say why in words."""
    body = config(minExecutionDuration="99999999999999999999h", maxExecutionDuration="1h")
    code, output = on_server(cluster, Bad(copy.deepcopy(body)))
    assert code != 0
    (problem,) = server_problems(output)
    assert problem == (
        "spec.rules[0].candidateSelectors[0]: Invalid value: \"object\": type conversion error from 'string' to "
        "'google.protobuf.Duration' evaluating rule: minExecutionDuration must be less than or equal to "
        "maxExecutionDuration"
    )
    assert [str(p) for p in validation.validate(body)] == [problem]
    code, out = offline(tmp_path, body)
    assert code == 2, out
    assert 'spec.rules[0].candidateSelectors[0].minExecutionDuration: "99999999999999999999h" is longer' in out, out


# Schema errors in the API server's words: what api/validation.py says is what the server says.
def _pc_with(**selector: Any) -> Callable[[str], dict[str, Any]]:
    return lambda ns: config(**selector)


SCHEMA_CASES = [
    pytest.param(_pc_with(scope="Everywhere"), id="enum"),
    pytest.param(lambda ns: {**config(), "spec": {"rules": [{"name": "r", "activationPolicy": {"trigger": "Always"}, "candidateSelectors": [{"priority": {"mode": "Base", "comparison": "LessThan"}}]}]}}, id="required"),
    pytest.param(_pc_with(numericLabels=[{"key": "k", "minValue": "abc"}]), id="type"),
    pytest.param(_pc_with(numericLabels=[{"key": "k", "minValue": -1, "maxValue": 4294967296}]), id="minimum-maximum"),
    pytest.param(_pc_with(numericLabels=[{"key": ""}]), id="minLength"),
    pytest.param(_pc_with(numericLabels=[{"key": "k" * 317}]), id="maxLength"),
    pytest.param(_pc_with(numericLabels=[{"key": f"k{i}"} for i in range(33)]), id="maxItems"),
    pytest.param(_pc_with(priority={"matchNames": ["a", "a"]}), id="list-set-duplicate"),
    pytest.param(lambda ns: {**config(), "spec": {"rules": [{"name": "r", "activationPolicy": {"trigger": "Always"}, "candidateSelectors": [{"scope": "AnyClusterQueue"}]}] * 2}}, id="list-map-duplicate"),
    pytest.param(lambda ns: {**config(), "spec": {"rules": [{"name": "Bad_Name", "activationPolicy": {"trigger": "Always"}, "candidateSelectors": [{"scope": "AnyClusterQueue"}]}]}}, id="pattern"),
    pytest.param(lambda ns: workload(ns, podSets=[]), id="minItems"),
    pytest.param(lambda ns: workload(ns, priority=1.5), id="number-for-integer"),
    pytest.param(lambda ns: {**flavor(), "metadata": {"name": "Bad_Name"}}, id="metadata-name"),
    pytest.param(lambda ns: {"apiVersion": V1BETA2, "kind": "WorkloadPriorityClass", "metadata": {"name": _name()}, "value": 2**31}, id="int32"),
]  # fmt: skip


@pytest.mark.parametrize("build", SCHEMA_CASES)
def test_schema_errors_in_the_api_servers_words(
    cluster: ControlPlane, namespace: str, build: Callable[[str], dict[str, Any]]
) -> None:
    body = build(namespace)
    expected = [str(problem) for problem in validation.validate(body)]
    assert expected, "api/validation.py accepts it"
    code, output = on_server(cluster, Bad(copy.deepcopy(body)))
    assert code != 0, output
    assert sorted(server_problems(output)) == sorted(expected)


def test_unknown_field_refused_by_both(cluster: ControlPlane, tmp_path: Path) -> None:
    body = config(costFunction="Linear")
    code, output = on_server(cluster, Bad(copy.deepcopy(body)))
    assert code != 0
    assert 'unknown field "spec.rules[0].candidateSelectors[0].costFunction"' in output, output
    assert [str(p) for p in validation.validate(body)] == [
        'spec.rules[0].candidateSelectors[0].costFunction: unknown field "spec.rules[0].candidateSelectors[0].costFunction"'
    ]
    code, out = offline(tmp_path, body)
    assert code == 2 and "spec.rules[0].candidateSelectors[0].costFunction" in out, out


def valid_objects(namespace: str) -> list[Bad]:
    cq = queue(
        resourceGroups=[group(["cpu", "memory"], ["cpu", "memory"])],
        preemption={"reclaimWithinCohort": "Any", "borrowWithinCohort": {"policy": "LowerPriority"}},
        flavorFungibility={
            "whenCanBorrow": "TryNextFlavor",
            "whenCanPreempt": "TryNextFlavor",
            "preference": "BorrowingOverPreemption",
        },
    )
    return [
        Bad(cq),
        Bad(cohort(resourceGroups=[group(["cpu"], ["cpu"])])),
        Bad(local_queue(namespace, cq["metadata"]["name"])),
        Bad(flavor(topologyName="t", nodeLabels={"pool": "a"}, nodeTaints=[{"key": "k", "effect": "NoExecute"}])),
        Bad(topology("rack", "kubernetes.io/hostname")),
        Bad({"apiVersion": V1BETA2, "kind": "WorkloadPriorityClass", "metadata": {"name": _name()}, "value": 100}),
        Bad(limit("1s", scope="PreemptedClusterQueue", clusterQueueSelector={"matchLabels": {"tier": "critical"}})),
        Bad(
            ordered(
                "Priority", "AdmissionTimestamp",
                minExecutionDuration="0", maxExecutionDuration="1h", minTimeFromCreationDuration="90s",
                maxTimeFromCreationDuration="1m30s", numericLabels=[{"key": "k", "minValue": 1, "maxValue": 1}],
                priority={"mode": "Base", "comparison": "LessThan"}, quota="DRSAllStrategies",
            )
        ),
        Bad(
            workload(namespace, podSets=[{**POD_SET, "minCount": 2}], priorityClassRef=WPC_REF),
            status=placed(["rack", "kubernetes.io/hostname"], {"domainCount": 2, "valuesPerLevel": [{"universal": "r1"}, {"individual": {"roots": ["1", "2"], "prefix": "n-"}}], "podCounts": {"individual": [1, 1]}})
            | checked({"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}, {"operator": "Exists"}, {"key": "j", "value": "v", "effect": "PreferNoSchedule"}),
        ),
        Bad(admission_check()),
    ]  # fmt: skip


def test_valid_objects_pass_both(cluster: ControlPlane, namespace: str, tmp_path: Path) -> None:
    objects = valid_objects(namespace)
    assert {bad.body["kind"] for bad in objects} == {kind for kind, _, _, _ in RULES} | {"WorkloadPriorityClass"}
    for bad in objects:
        proc = cluster.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(bad.body))
        assert proc.returncode == 0, proc.stderr
        if bad.status is not None:
            patch = json.dumps({"status": bad.status})
            proc = cluster.kubectl("patch", *_resource(bad.body), "--subresource=status", "--type=merge", "-p", patch)
            assert proc.returncode == 0, proc.stderr
        assert validation.validate(bad.offline()) == []
    path = tmp_path / "valid.yaml"
    path.write_text(yaml.safe_dump_all([bad.offline() for bad in objects], sort_keys=False))
    result = CliRunner().invoke(cli, ["simulate", str(path), "--now", "2026-06-01T00:00:00Z", "--fair-sharing"])
    assert result.exit_code == 0, result.output
