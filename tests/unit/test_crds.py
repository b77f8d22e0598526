"""The CRDs in `crds/`: generated from the models, and accepting exactly what the API server should.

The schemas are read from the committed CRD files, not from the models, so these tests check what
a cluster gets. OpenAPI v3 with Kubernetes extensions is turned into JSON Schema (2020-12):
`x-kubernetes-*` keys go, an object with `properties` and no `x-kubernetes-preserve-unknown-fields`
gets `additionalProperties: false` (strict field validation), list-type `set` becomes
`uniqueItems`, and list-type `map` gets a keyword checking key uniqueness. The
`x-kubernetes-validations` rules are run with cel-python, with defaults applied first, as the API
server applies them.
"""

from __future__ import annotations

import copy
import functools
import re
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import celpy
import jsonschema
import pytest
import yaml
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError
from click.testing import CliRunner
from hypothesis import assume, given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from preemption_operator.api import core, crdgen, kinds, v1alpha1, v1beta2
from preemption_operator.api.meta import LabelSelector
from preemption_operator.api.quantity import NON_NEGATIVE_QUANTITY_PATTERN, QUANTITY_PATTERN
from preemption_operator.cli import cli
from preemption_operator.engine.selectors import NOTHING
from preemption_operator.engine.selectors import build as build_selector
from preemption_operator.engine.topology_assignment import decode_assignment
from preemption_operator.jobs.framework import of_kind
from preemption_operator.offline import manifests
from preemption_operator.offline.manifests import Manifest

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = REPO_ROOT / "crds"
EXAMPLES_DIR = REPO_ROOT / "examples"
SEED_DOC = REPO_ROOT / "tests" / "fixtures" / "seed-manifests.yaml"
"""The manifests the specification quotes (Kueue's configurable preemptions): they must apply unchanged."""

MODELS: dict[tuple[str, str], type[BaseModel]] = {
    (model.crd.group + "/" + model.crd.version, model.crd.kind): model for model in kinds.CRDS
}
CORE_MODELS: dict[tuple[str, str], type[BaseModel]] = {
    ("v1", "Namespace"): core.Namespace,
    ("v1", "Node"): core.Node,
    ("scheduling.k8s.io/v1", "PriorityClass"): core.PriorityClass,
}


# ---------------------------------------------------------------------------------------------
# Loading YAML and CRDs
# ---------------------------------------------------------------------------------------------


class _KubeLoader(yaml.SafeLoader):
    """YAML as the API server reads it: timestamps stay strings."""


_KubeLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_all(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.load_all(text, Loader=_KubeLoader) if doc is not None]


def load(text: str) -> dict[str, Any]:
    (doc,) = load_all(textwrap.dedent(text))
    return doc


@functools.cache
def crds() -> dict[str, dict[str, Any]]:
    """Kind -> CustomResourceDefinition, from the committed files."""
    out = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        out[crd["spec"]["names"]["kind"]] = crd
    return out


def served_version(kind: str) -> dict[str, Any]:
    (version,) = crds()[kind]["spec"]["versions"]
    return cast(dict[str, Any], version)


def openapi(kind: str) -> dict[str, Any]:
    return cast(dict[str, Any], served_version(kind)["schema"]["openAPIV3Schema"])


# ---------------------------------------------------------------------------------------------
# OpenAPI v3 + Kubernetes extensions -> JSON Schema
# ---------------------------------------------------------------------------------------------


def to_json_schema(node: Any) -> Any:
    if isinstance(node, list):
        return [to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key in ("nullable", "description"):
            continue
        if key == "properties":
            out[key] = {name: to_json_schema(prop) for name, prop in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            out[key] = to_json_schema(value)
        elif key in ("anyOf", "allOf", "oneOf"):
            out[key] = [to_json_schema(branch) for branch in value]
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if (
        "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if node.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    if node.get("x-kubernetes-list-type") == "map":
        item_props = node.get("items", {}).get("properties", {})
        out["listMapKeys"] = {
            "keys": node["x-kubernetes-list-map-keys"],
            "defaults": {
                k: item_props[k]["default"]
                for k in node["x-kubernetes-list-map-keys"]
                if "default" in item_props.get(k, {})
            },
        }
    if node.get("nullable"):
        out = {"anyOf": [out, {"type": "null"}]}
    return out


def _list_map_keys(validator: Any, spec: dict[str, Any], instance: Any, schema: dict[str, Any]) -> Iterator[Any]:
    if not validator.is_type(instance, "array"):
        return
    seen: dict[tuple[Any, ...], int] = {}
    for index, item in enumerate(instance):
        if not isinstance(item, dict):
            continue
        key = tuple(item.get(k, spec["defaults"].get(k)) for k in spec["keys"])
        if key in seen:
            yield jsonschema.ValidationError(f"duplicate entries for key {key!r}: items {seen[key]} and {index}")
        seen[key] = index


_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
FORMATS = jsonschema.FormatChecker()


@FORMATS.checks("date-time", raises=ValueError)  # type: ignore[untyped-decorator]
def _date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if not _RFC3339.match(value):
        return False
    datetime.fromisoformat(value.replace("z", "Z"))
    return True


KubeValidator = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"listMapKeys": _list_map_keys})


@functools.cache
def validator(kind: str) -> Any:
    schema = to_json_schema(openapi(kind))
    KubeValidator.check_schema(schema)
    return KubeValidator(schema, format_checker=FORMATS)


def schema_errors(doc: dict[str, Any]) -> list[str]:
    """Schema errors (CEL aside) of a Kueue object, `<json path>: <message>`."""
    errors = sorted(validator(doc["kind"]).iter_errors(doc), key=lambda e: e.json_path)
    return [f"{e.json_path}: {e.message}" for e in errors]


# ---------------------------------------------------------------------------------------------
# Defaults and CEL
# ---------------------------------------------------------------------------------------------

MISSING: Any = object()


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Structural defaulting, as the API server does it before validation."""
    value = copy.deepcopy(value)
    if isinstance(value, dict):
        for name, prop in schema.get("properties", {}).items():
            if name not in value and "default" in prop:
                value[name] = copy.deepcopy(prop["default"])
            if name in value:
                value[name] = apply_defaults(prop, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for name in value:
                if name not in schema.get("properties", {}):
                    value[name] = apply_defaults(extra, value[name])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        value = [apply_defaults(schema["items"], item) for item in value]
    return value


class CelError(Exception):
    """A rule that does not evaluate to a bool; the API server rejects the object."""


@functools.cache
def cel_program(rule: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(rule))


def cel(rule: str, self_value: Any, old_value: Any = MISSING) -> bool:
    activation = {"self": json_to_cel(self_value)}
    if old_value is not MISSING:
        activation["oldSelf"] = json_to_cel(old_value)
    try:
        result = cel_program(rule).evaluate(activation)
    except CELEvalError as exc:
        raise CelError(str(exc)) from exc
    if isinstance(result, CELEvalError) or not isinstance(result, celtypes.BoolType):
        raise CelError(f"{rule!r} evaluated to {result!r}")
    return bool(result)


def uses_old_self(rule: str) -> bool:
    return re.search(r"\boldSelf\b", rule) is not None


def cel_failures(schema: dict[str, Any], value: Any, old: Any = MISSING, path: str = "") -> list[str]:
    """Every rule under `schema` that rejects `value` (an update from `old`, or a create)."""
    failures = []
    for rule in schema.get("x-kubernetes-validations", []):
        if uses_old_self(rule["rule"]) and old is MISSING:
            continue  # transition rules run on updates only
        try:
            if not cel(rule["rule"], value, old if uses_old_self(rule["rule"]) else MISSING):
                failures.append(f"{path or '.'}: {rule['message']}")
        except CelError as exc:
            failures.append(f"{path or '.'}: {exc}")
    if isinstance(value, dict):
        for name, prop in schema.get("properties", {}).items():
            if name in value:
                old_prop = old.get(name, MISSING) if isinstance(old, dict) else MISSING
                failures += cel_failures(prop, value[name], old_prop, f"{path}.{name}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        correlate = schema.get("x-kubernetes-list-type") == "map" and isinstance(old, list)
        for index, item in enumerate(value):
            old_item = MISSING
            if correlate:
                keys = schema["x-kubernetes-list-map-keys"]
                matches = [o for o in old if all(o.get(k) == item.get(k) for k in keys)]
                old_item = matches[0] if matches else MISSING
            failures += cel_failures(schema["items"], item, old_item, f"{path}[{index}]")
    return failures


def walk(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path (`.spec.rules[].name`)."""
    if not isinstance(node, dict):
        return
    yield path, node
    for name, prop in node.get("properties", {}).items():
        yield from walk(prop, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")
    for key in ("anyOf", "allOf", "oneOf"):
        for branch in node.get(key, []):
            yield from walk(branch, path)


@dataclass(frozen=True)
class FoundRule:
    kind: str
    path: str
    rule: str
    message: str
    node: dict[str, Any] = field(repr=False, compare=False, hash=False)

    @property
    def id(self) -> str:
        return f"{self.kind}{self.path or '.'}:{self.message}"


def all_rules() -> list[FoundRule]:
    found = []
    for kind in sorted(crds()):
        for path, node in walk(openapi(kind)):
            for rule in node.get("x-kubernetes-validations", []):
                found.append(FoundRule(kind, path, rule["rule"], rule["message"], node))
    return found


# ---------------------------------------------------------------------------------------------
# Manifests under test: examples, the seed doc, the golden configurations
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Doc:
    source: str
    body: dict[str, Any] = field(compare=False)

    @property
    def kueue(self) -> bool:
        return str(self.body.get("apiVersion", "")).startswith("kueue.x-k8s.io/")

    def __str__(self) -> str:
        meta = self.body.get("metadata", {})
        ns = f"{meta['namespace']}/" if meta.get("namespace") else ""
        return f"{self.source}:{self.body.get('kind')}/{ns}{meta.get('name')}"


def example_docs() -> list[Doc]:
    docs = []
    for path in sorted(EXAMPLES_DIR.glob("**/*.yaml")):
        for index, body in enumerate(load_all(path.read_text())):
            docs.append(Doc(f"{path.relative_to(REPO_ROOT)}#{index}", body))
    return docs


def seed_docs() -> list[Doc]:
    return [Doc(f"seed:{i}", body) for i, body in enumerate(load_all(SEED_DOC.read_text()))]


GOLDEN_YAML = {
    # Reference §2.12, task doc "Use Custom Preemption Configurations": the restricted hero queue.
    "hero": """
        apiVersion: kueue.x-k8s.io/v1alpha1
        kind: PreemptionConfig
        metadata:
          name: hero-workloads-preemption-config
        spec:
          rules:
          - name: hero-preempt-lower-priority
            activationPolicy:
              trigger: InsufficientQuota
            candidateSelectors:
            - scope: WithinCohortTree
              priority:
                mode: Base
                comparison: LessThan
              clusterQueueSelector:
                matchExpressions:
                - key: example.com/protection-tier
                  operator: NotIn
                  values: [mission-critical]
    """,
    "hero-cluster-queue": """
        apiVersion: kueue.x-k8s.io/v1beta2
        kind: ClusterQueue
        metadata:
          name: hero
          annotations:
            kueue.x-k8s.io/preemption-config-name: hero-workloads-preemption-config
        spec:
          cohortName: org
          namespaceSelector:
            matchLabels:
              kubernetes.io/metadata.name: hero
          resourceGroups:
          - coveredResources: [cpu]
            flavors:
            - name: default
              resources:
              - name: cpu
                nominalQuota: 0
          preemption:
            withinClusterQueue: Never
            reclaimWithinCohort: Never
            borrowWithinCohort:
              policy: Never
    """,
    # KEP Story 2 variant of the hero.
    "hero-kep": """
        apiVersion: kueue.x-k8s.io/v1alpha1
        kind: PreemptionConfig
        metadata:
          name: hero-config
        spec:
          rules:
          - name: hero-preemption
            activationPolicy:
              trigger: Always
            candidateSelectors:
            - scope: AnyClusterQueue
              priority:
                mode: Boosted
                comparison: LessThan
    """,
    # Task doc: defragmentation for a general queue.
    "defrag": """
        apiVersion: kueue.x-k8s.io/v1alpha1
        kind: PreemptionConfig
        metadata:
          name: topology-defragmentation
        spec:
          rules:
          - name: evict-smaller-jobs-for-topology
            activationPolicy:
              trigger: QuotaFeasibleAndInsufficientTopology
            candidateSelectors:
            - scope: WithinCohortTree
              priority:
                mode: Base
                comparison: LessThanOrEqual
              numericLabels:
              - key: example.com/node-count
                comparison: LessThan
              labelSelector:
                matchExpressions:
                - key: example.com/workload-tier
                  operator: NotIn
                  values: [mission-critical]
    """,
    # Issue #12001: a priority threshold within the ClusterQueue.
    "within-cq-threshold": """
        apiVersion: kueue.x-k8s.io/v1alpha1
        kind: PreemptionConfig
        metadata:
          name: within-cq-threshold
        spec:
          rules:
          - name: only-low-classes
            activationPolicy:
              trigger: Always
            candidateSelectors:
            - scope: WithinClusterQueue
              priority:
                mode: Base
                comparison: LessThan
                matchNames: [low-priority, batch-low]
    """,
    # Issue #13414: boosted priority only against the preemptor's own queue.
    "boost-only-within-cq": """
        apiVersion: kueue.x-k8s.io/v1alpha1
        kind: PreemptionConfig
        metadata:
          name: boost-within-cq
        spec:
          rules:
          - name: boosted-within-cq
            activationPolicy:
              trigger: Always
            candidateSelectors:
            - scope: WithinClusterQueue
              priority: {mode: Boosted, comparison: LessThan}
          - name: base-within-parent-cohort
            activationPolicy:
              trigger: Always
            candidateSelectors:
            - scope: WithinParentCohort
              priority: {mode: Base, comparison: LessThan}
    """,
}


def golden_docs() -> list[Doc]:
    return [Doc(f"golden:{name}", load(text)) for name, text in GOLDEN_YAML.items()]


EXAMPLES = example_docs()
SEED = seed_docs()
KUEUE_MANIFESTS = [doc for doc in [*EXAMPLES, *SEED, *golden_docs()] if doc.kueue]


def model_for(body: dict[str, Any]) -> type[BaseModel]:
    key = (body["apiVersion"], body["kind"])
    return MODELS.get(key) or CORE_MODELS[key]


# ---------------------------------------------------------------------------------------------
# The CRDs are the models' output
# ---------------------------------------------------------------------------------------------


def test_crds_are_up_to_date(tmp_path: Path) -> None:
    written = crdgen.write_all(tmp_path)
    generated = {path.name: path.read_text() for path in written}
    committed = {path.name: path.read_text() for path in CRD_DIR.glob("*.yaml")}
    hint = "crds/ is stale: run `preemption-operator crds`"
    assert sorted(committed) == sorted(generated), hint
    stale = [name for name in generated if committed[name] != generated[name]]
    assert not stale, f"{hint} ({', '.join(stale)})"
    for model in kinds.CRDS:
        assert (CRD_DIR / crdgen.file_name(model)).read_text() == crdgen.render(model)


def test_crds_check_command_detects_staleness(tmp_path: Path) -> None:
    crdgen.write_all(tmp_path)
    runner = CliRunner()
    assert runner.invoke(cli, ["crds", "--check", "--output-dir", str(tmp_path)]).exit_code == 0
    target = tmp_path / crdgen.file_name(v1alpha1.PreemptionConfig)
    target.write_text(target.read_text().replace("maxItems: 64", "maxItems: 65"))
    result = runner.invoke(cli, ["crds", "--check", "--output-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert target.name in result.output


def test_crd_files_are_well_formed() -> None:
    assert set(crds()) == {model.crd.kind for model in kinds.CRDS}
    for kind, crd in crds().items():
        assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
        assert crd["metadata"]["name"] == f"{crd['spec']['names']['plural']}.kueue.x-k8s.io"
        assert crd["spec"]["group"] == "kueue.x-k8s.io"
        (version,) = crd["spec"]["versions"]
        assert version["served"] and version["storage"]
        KubeValidator.check_schema(to_json_schema(version["schema"]["openAPIV3Schema"]))
        assert crd["spec"]["scope"] == MODELS[(f"kueue.x-k8s.io/{version['name']}", kind)].crd.scope  # type: ignore[attr-defined]


def test_preemption_config_crd_basics() -> None:
    crd = crds()["PreemptionConfig"]
    assert crd["spec"]["scope"] == "Cluster"
    version = served_version("PreemptionConfig")
    assert version["name"] == "v1alpha1"
    rules = openapi("PreemptionConfig")["properties"]["spec"]["properties"]["rules"]
    assert rules["maxItems"] == 64
    assert rules["x-kubernetes-list-type"] == "map"
    assert rules["x-kubernetes-list-map-keys"] == ["name"]
    assert rules["items"]["required"] == ["name", "activationPolicy"]
    assert rules["items"]["properties"]["candidateSelectors"]["maxItems"] == 32


@pytest.mark.parametrize(
    ("kind", "columns"),
    [
        ("Workload", ["Queue", "Reserved in", "Admitted", "Finished", "Age"]),
        ("ClusterQueue", ["Cohort", "Pending Workloads", "Age"]),
        ("LocalQueue", ["ClusterQueue", "Pending Workloads", "Age"]),
        ("PreemptionConfig", ["Rules", "Age"]),
    ],
)
def test_printer_columns(kind: str, columns: list[str]) -> None:
    printed = served_version(kind)["additionalPrinterColumns"]
    names = [column["name"] for column in printed]
    missing = [name for name in columns if name not in names]
    assert not missing, f"{kind} lacks printer columns {missing}: has {names}"
    # Same relative order, Age last.
    assert [n for n in names if n in columns] == columns
    assert names[-1] == "Age"
    by_name = {column["name"]: column for column in printed}
    assert by_name["Age"] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    for column in printed:
        assert column["type"] in ("string", "integer", "number", "boolean", "date")
        assert column["jsonPath"].startswith(".")


def test_printer_column_paths() -> None:
    def paths(kind: str) -> dict[str, str]:
        return {c["name"]: c["jsonPath"] for c in served_version(kind)["additionalPrinterColumns"]}

    assert paths("Workload")["Queue"] == ".spec.queueName"
    assert paths("Workload")["Reserved in"] == ".status.admission.clusterQueue"
    assert paths("Workload")["Admitted"] == ".status.conditions[?(@.type=='Admitted')].status"
    assert paths("Workload")["Finished"] == ".status.conditions[?(@.type=='Finished')].status"
    assert paths("ClusterQueue")["Cohort"] == ".spec.cohortName"
    assert paths("ClusterQueue")["Pending Workloads"] == ".status.pendingWorkloads"
    assert paths("PreemptionConfig")["Rules"] == ".status.ruleCount"


@pytest.mark.parametrize(
    ("kind", "short_name", "scope"),
    [
        # Kueue v0.19.2's short names (apis/kueue/v1beta2 kubebuilder markers), and ours.
        ("Workload", "kwl", "Namespaced"),
        ("Workload", "kueueworkloads", "Namespaced"),
        ("ClusterQueue", "cq", "Cluster"),
        ("LocalQueue", "lq", "Namespaced"),
        ("LocalQueue", "queues", "Namespaced"),
        ("Cohort", "co", "Cluster"),
        ("ResourceFlavor", "rf", "Cluster"),
        ("Topology", "topo", "Cluster"),
        ("WorkloadPriorityClass", "wpc", "Cluster"),
        ("PreemptionConfig", "preempcfg", "Cluster"),
    ],
)
def test_short_names(kind: str, short_name: str, scope: str) -> None:
    crd = crds()[kind]
    assert short_name in crd["spec"]["names"]["shortNames"]
    assert crd["spec"]["scope"] == scope


def test_short_names_are_unique() -> None:
    seen: dict[str, str] = {}
    for kind, crd in crds().items():
        for name in [*crd["spec"]["names"].get("shortNames", []), crd["spec"]["names"]["plural"]]:
            assert name not in seen, f"{name} used by {seen.get(name)} and {kind}"
            seen[name] = kind


def test_list_map_keys_are_required_or_defaulted() -> None:
    """Kubernetes needs every list-map key present in every item (required, or with a default)."""
    problems = []
    for kind in sorted(crds()):
        for path, node in walk(openapi(kind)):
            if node.get("x-kubernetes-list-type") != "map":
                continue
            item = node["items"]
            for key in node["x-kubernetes-list-map-keys"]:
                prop = item["properties"].get(key)
                if prop is None or prop.get("type") not in ("string", "integer", "boolean"):
                    problems.append(f"{kind}{path}: key {key} is not a scalar property")
                elif key not in item.get("required", []) and "default" not in prop:
                    problems.append(f"{kind}{path}: key {key} is neither required nor defaulted")
    assert not problems


# ---------------------------------------------------------------------------------------------
# Examples, seed-doc manifests and golden configurations validate (schema + CEL) and parse
# ---------------------------------------------------------------------------------------------


def test_examples_exist() -> None:
    scenarios = {Path(doc.source).parts[1] for doc in EXAMPLES}
    assert {"within-clusterqueue-priority", "hero-job", "topology-defragmentation"} <= scenarios
    kinds = {doc.body["kind"] for doc in EXAMPLES}
    assert {"ClusterQueue", "LocalQueue", "Workload", "PreemptionConfig", "Topology", "Node"} <= kinds


def test_seed_doc_examples_found() -> None:
    assert sorted(doc.body["kind"] for doc in SEED) == ["ClusterQueue", "PreemptionConfig"]


@pytest.mark.parametrize("doc", KUEUE_MANIFESTS, ids=str)
def test_manifest_matches_crd_schema(doc: Doc) -> None:
    assert schema_errors(doc.body) == []


@pytest.mark.parametrize("doc", KUEUE_MANIFESTS, ids=str)
def test_manifest_passes_cel_rules(doc: Doc) -> None:
    schema = openapi(doc.body["kind"])
    created = apply_defaults(schema, doc.body)
    assert cel_failures(schema, created) == []
    # An update that changes nothing passes the transition rules too.
    assert cel_failures(schema, created, created) == []


def is_job(doc: Doc) -> bool:
    """An object of a kind the operator integrates (a Job, a JobSet, a Pod)."""
    return of_kind(str(doc.body.get("apiVersion")), str(doc.body.get("kind"))) is not None


@functools.cache
def job_workloads(folder: str) -> list[tuple[list[Doc], dict[str, Any]]]:
    """The Workloads the operator makes for the queued jobs of an example (as `simulate` reads
    them), each with the objects of its job (a pod group has several)."""
    docs = [d for d in EXAMPLES if Path(d.source).parts[1] == folder]
    beside = [Manifest(d.source, d.body) for d in docs]
    classes = manifests._class_values(beside)
    found = []
    for integration, members in manifests._jobs(beside).values():
        workload = manifests._job_workload(integration, [beside[i] for i in members], classes)
        found.append(([docs[i] for i in members], workload))
    in_jobs = {id(d) for members, _ in found for d in members}
    stray = [str(d) for d in docs if is_job(d) and id(d) not in in_jobs]
    assert not stray, f"a job in an example must be queued: {stray}"
    return found


JOBS = [job for folder in sorted({Path(d.source).parts[1] for d in EXAMPLES}) for job in job_workloads(folder)]


@pytest.mark.parametrize(("members", "workload"), JOBS, ids=lambda v: str(v[0]) if isinstance(v, list) else "")
def test_example_jobs_make_valid_workloads(members: list[Doc], workload: dict[str, Any]) -> None:
    assert schema_errors(workload) == []
    schema = openapi("Workload")
    assert cel_failures(schema, apply_defaults(schema, workload)) == []
    for doc in members:
        if doc.body["kind"] != "Pod":  # a Pod is held by its scheduling gate, which only the webhook adds
            assert doc.body["spec"].get("suspend") is True, "without the webhook a queued job must be created suspended"


@pytest.mark.parametrize("doc", [d for d in [*EXAMPLES, *SEED, *golden_docs()] if not is_job(d)], ids=str)
def test_manifest_parses_with_models(doc: Doc) -> None:
    model = model_for(doc.body)
    parsed = model.model_validate(doc.body)
    wire = parsed.to_wire()  # type: ignore[attr-defined]
    assert wire == doc.body, "the model does not write back what it read"
    if doc.kueue:
        assert schema_errors(wire) == []


def test_seed_preemption_config_content() -> None:
    config = next(
        v1alpha1.PreemptionConfig.model_validate(d.body) for d in SEED if d.body["kind"] == "PreemptionConfig"
    )
    (rule,) = config.rules
    assert rule.name == "evict-smaller-jobs-for-large-topology"
    assert rule.activation_policy.trigger == "QuotaFeasibleAndInsufficientTopology"
    (selector,) = rule.candidate_selectors or []
    assert selector.scope == "AnyClusterQueue"
    assert selector.priority is not None and (selector.priority.mode, selector.priority.comparison) == (
        "Base",
        "LessThanOrEqual",
    )
    (numeric,) = selector.numeric_labels or []
    assert (numeric.key, numeric.comparison, numeric.fallback_value) == ("example.com/node-count", "LessThan", 0)
    queue = next(v1beta2.ClusterQueue.model_validate(d.body) for d in SEED if d.body["kind"] == "ClusterQueue")
    assert queue.annotation(v1alpha1.PREEMPTION_CONFIG_ANNOTATION) == "topology-defragmentation"
    assert queue.spec.preemption.within_cluster_queue == "LowerPriority"
    assert queue.spec.preemption.borrow_within_cohort is None


# ---------------------------------------------------------------------------------------------
# The examples are coherent scenarios
# ---------------------------------------------------------------------------------------------


def scenarios() -> list[Path]:
    return sorted(path for path in EXAMPLES_DIR.iterdir() if path.is_dir())


@pytest.mark.parametrize("folder", scenarios(), ids=lambda p: p.name)
def test_example_is_coherent(folder: Path) -> None:
    docs = [doc.body for doc in EXAMPLES if Path(doc.source).parts[1] == folder.name and not is_job(doc)]
    docs += [workload for _, workload in job_workloads(folder.name)]
    objects = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in docs}
    assert len(objects) == len(docs), "duplicate objects"

    def get(kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        found = objects.get((kind, namespace, name))
        assert found is not None, f"{kind} {namespace + '/' if namespace else ''}{name} is missing"
        return found

    # A fixed uid would make `kubectl apply` fail ("uid mismatch"); simulate falls back to namespace/name.
    assert not any(d["metadata"].get("uid") for d in docs), "examples must be applicable to a live cluster"
    assert all(d["metadata"].get("creationTimestamp") for d in docs), "every object needs a creationTimestamp"

    for (kind, _, _), cq in objects.items():
        if kind != "ClusterQueue":
            continue
        for group in cq["spec"].get("resourceGroups", []):
            for flavor in group["flavors"]:
                rf = get("ResourceFlavor", flavor["name"])
                if rf["spec"].get("topologyName"):
                    get("Topology", rf["spec"]["topologyName"])
        config = cq["metadata"].get("annotations", {}).get(v1alpha1.PREEMPTION_CONFIG_ANNOTATION)
        if config:
            get("PreemptionConfig", config)
        if cq["spec"].get("cohortName"):
            get("Cohort", cq["spec"]["cohortName"])

    classes = {name: d["value"] for (kind, _, name), d in objects.items() if kind == "WorkloadPriorityClass"}
    pending = 0
    for (kind, namespace, name), wl in objects.items():
        if kind != "Workload":
            continue
        where = f"Workload {namespace}/{name}"
        ns = get("Namespace", namespace)
        lq = get("LocalQueue", wl["spec"]["queueName"], namespace)
        cq = get("ClusterQueue", lq["spec"]["clusterQueue"])
        selector = cq["spec"].get("namespaceSelector")
        selector_model = None if selector is None else LabelSelector.model_validate(selector)
        assert build_selector(selector_model, nil=NOTHING).matches(ns["metadata"].get("labels")), (
            f"{where}: namespace not selected by ClusterQueue {cq['metadata']['name']}"
        )
        ref = wl["spec"].get("priorityClassRef")
        if ref:
            assert wl["spec"].get("priority") == classes[ref["name"]], f"{where}: priority differs from its class"
        admission = wl.get("status", {}).get("admission")
        if admission is None:
            pending += 1
            continue
        assert admission["clusterQueue"] == cq["metadata"]["name"], where
        conditions = {c["type"]: c for c in wl["status"]["conditions"]}
        assert conditions["QuotaReserved"]["status"] == "True", where
        assert conditions["QuotaReserved"]["message"] == f"Quota reserved in ClusterQueue {admission['clusterQueue']}"
        assert conditions["Admitted"]["status"] == "True", where
        pod_sets = {ps["name"]: ps for ps in wl["spec"]["podSets"]}
        cq_flavors = {f["name"] for g in cq["spec"]["resourceGroups"] for f in g["flavors"]}
        for assignment in admission["podSetAssignments"]:
            pod_set = pod_sets[assignment["name"]]
            assert assignment["count"] == pod_set["count"], where
            requests: dict[str, float] = {}
            for container in pod_set["template"]["spec"]["containers"]:
                for resource, amount in container["resources"]["requests"].items():
                    requests[resource] = requests.get(resource, 0) + float(amount)
            usage = {r: float(v) for r, v in assignment["resourceUsage"].items()}
            assert usage == {r: v * pod_set["count"] for r, v in requests.items()}, where
            assert set(assignment["flavors"]) == set(requests), where
            assert set(assignment["flavors"].values()) <= cq_flavors, where
            topology = assignment.get("topologyAssignment")
            if topology:
                for flavor_name in set(assignment["flavors"].values()):
                    node_labels = get("ResourceFlavor", flavor_name)["spec"].get("nodeLabels", {})
                    for values, _ in decode_assignment(topology):
                        node = values[topology["levels"][-1]]
                        labels = get("Node", node)["metadata"]["labels"]
                        assert node_labels.items() <= labels.items(), f"{where}: {node} not in {flavor_name}"
    assert pending >= 1, "a scenario needs a pending workload"


def test_example_readmes() -> None:
    index = (EXAMPLES_DIR / "README.md").read_text()
    assert "preemption-operator simulate examples/<name> --output text" in index
    for folder in scenarios():
        assert f"`{folder.name}`" in index, f"examples/README.md does not list {folder.name}"
        readme = (folder / "README.md").read_text()
        assert "## Expected outcome" in readme
        assert f"preemption-operator simulate examples/{folder.name} --output text" in readme


# ---------------------------------------------------------------------------------------------
# Bad objects are rejected by the schema and by the models
# ---------------------------------------------------------------------------------------------

BASE_CONFIG = load(GOLDEN_YAML["defrag"])
BASE_QUEUE = load(GOLDEN_YAML["hero-cluster-queue"])
BASE_WORKLOAD = load(
    """
    apiVersion: kueue.x-k8s.io/v1beta2
    kind: Workload
    metadata: {name: w, namespace: ns}
    spec:
      queueName: main
      priority: 0
      podSets:
      - name: main
        count: 1
        template:
          spec:
            containers:
            - name: c
              resources: {requests: {cpu: "1"}}
    """
)


def rule_named(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "activationPolicy": {"trigger": "Always"},
        "candidateSelectors": [{"scope": "AnyClusterQueue"}],
    }


def edit(base: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    doc = copy.deepcopy(base)
    change(doc)
    return doc


def _rule(doc: dict[str, Any]) -> dict[str, Any]:
    rule: dict[str, Any] = doc["spec"]["rules"][0]
    return rule


def _selector(doc: dict[str, Any]) -> dict[str, Any]:
    selector: dict[str, Any] = _rule(doc)["candidateSelectors"][0]
    return selector


def _quota(doc: dict[str, Any]) -> dict[str, Any]:
    resource: dict[str, Any] = doc["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    return resource


def _container(doc: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = doc["spec"]["podSets"][0]["template"]["spec"]["containers"][0]
    return container


def _requests(doc: dict[str, Any]) -> dict[str, Any]:
    requests: dict[str, Any] = _container(doc)["resources"]["requests"]
    return requests


BAD: list[tuple[str, dict[str, Any], str]] = [
    # (case, object, JSON path of the expected schema error)
    ("unknown field in spec", edit(BASE_CONFIG, lambda d: d["spec"].update(preemptionLimits=[])), "$.spec"),
    ("ordering field unknown", edit(BASE_CONFIG, lambda d: d["spec"].update(ordering=[{"orderingField": "CreationTimestamp"}])), "$.spec.ordering[0].orderingField"),
    ("ordering field missing", edit(BASE_CONFIG, lambda d: d["spec"].update(ordering=[{"direction": "Ascending"}])), "$.spec.ordering[0]"),
    ("ordering direction unknown", edit(BASE_CONFIG, lambda d: d["spec"].update(ordering=[{"orderingField": "Priority", "direction": "Up"}])), "$.spec.ordering[0].direction"),
    ("unknown field in rule", edit(BASE_CONFIG, lambda d: _rule(d).update(minTriggerRequiredDuration="5m")), "$.spec.rules[0]"),
    ("unknown field in selector", edit(BASE_CONFIG, lambda d: _selector(d).update(costFunction="Linear")), "$.spec.rules[0].candidateSelectors[0]"),
    ("unknown top-level field", edit(BASE_CONFIG, lambda d: d.update(status2={})), "$"),
    ("scope Everywhere", edit(BASE_CONFIG, lambda d: _selector(d).update(scope="Everywhere")), "$.spec.rules[0].candidateSelectors[0].scope"),
    ("scope missing", edit(BASE_CONFIG, lambda d: _selector(d).pop("scope")), "$.spec.rules[0].candidateSelectors[0]"),
    ("trigger unknown", edit(BASE_CONFIG, lambda d: _rule(d).update(activationPolicy={"trigger": "InsufficientDRADevices"})), "$.spec.rules[0].activationPolicy.trigger"),
    ("trigger missing", edit(BASE_CONFIG, lambda d: _rule(d).update(activationPolicy={})), "$.spec.rules[0].activationPolicy"),
    ("activationPolicy missing", edit(BASE_CONFIG, lambda d: _rule(d).pop("activationPolicy")), "$.spec.rules[0]"),
    ("priority mode unknown", edit(BASE_CONFIG, lambda d: _selector(d)["priority"].update(mode="Effective")), "$.spec.rules[0].candidateSelectors[0].priority.mode"),
    ("comparison unknown", edit(BASE_CONFIG, lambda d: _selector(d)["priority"].update(comparison="Equal")), "$.spec.rules[0].candidateSelectors[0].priority.comparison"),
    ("rule name uppercase", edit(BASE_CONFIG, lambda d: _rule(d).update(name="Bad_Name")), "$.spec.rules[0].name"),
    ("rule name leading dash", edit(BASE_CONFIG, lambda d: _rule(d).update(name="-rule")), "$.spec.rules[0].name"),
    ("rule name trailing dash", edit(BASE_CONFIG, lambda d: _rule(d).update(name="rule-")), "$.spec.rules[0].name"),
    ("rule name with a dot", edit(BASE_CONFIG, lambda d: _rule(d).update(name="a.b")), "$.spec.rules[0].name"),
    ("rule name empty", edit(BASE_CONFIG, lambda d: _rule(d).update(name="")), "$.spec.rules[0].name"),
    ("rule name 64 chars", edit(BASE_CONFIG, lambda d: _rule(d).update(name="a" * 64)), "$.spec.rules[0].name"),
    ("rule name missing", edit(BASE_CONFIG, lambda d: _rule(d).pop("name")), "$.spec.rules[0]"),
    ("65 rules", edit(BASE_CONFIG, lambda d: d["spec"].update(rules=[rule_named(f"r{i}") for i in range(65)])), "$.spec.rules"),
    ("33 selectors", edit(BASE_CONFIG, lambda d: _rule(d).update(candidateSelectors=[{"scope": "AnyClusterQueue"}] * 33)), "$.spec.rules[0].candidateSelectors"),
    ("33 numeric labels", edit(BASE_CONFIG, lambda d: _selector(d).update(numericLabels=[{"key": f"k{i}"} for i in range(33)])), "$.spec.rules[0].candidateSelectors[0].numericLabels"),
    ("numeric label key empty", edit(BASE_CONFIG, lambda d: _selector(d).update(numericLabels=[{"key": ""}])), "$.spec.rules[0].candidateSelectors[0].numericLabels[0].key"),
    ("numeric label key 317 chars", edit(BASE_CONFIG, lambda d: _selector(d).update(numericLabels=[{"key": "k" * 317}])), "$.spec.rules[0].candidateSelectors[0].numericLabels[0].key"),
    ("numeric label key missing", edit(BASE_CONFIG, lambda d: _selector(d).update(numericLabels=[{"comparison": "LessThan"}])), "$.spec.rules[0].candidateSelectors[0].numericLabels[0]"),
    ("minValue negative", edit(BASE_CONFIG, lambda d: _selector(d).update(numericLabels=[{"key": "k", "minValue": -1}])), "$.spec.rules[0].candidateSelectors[0].numericLabels[0].minValue"),
    ("maxValue above int32", edit(BASE_CONFIG, lambda d: _selector(d).update(numericLabels=[{"key": "k", "maxValue": 2**31}])), "$.spec.rules[0].candidateSelectors[0].numericLabels[0].maxValue"),
    ("fallbackValue below int32", edit(BASE_CONFIG, lambda d: _selector(d).update(numericLabels=[{"key": "k", "fallbackValue": -(2**31) - 1}])), "$.spec.rules[0].candidateSelectors[0].numericLabels[0].fallbackValue"),
    ("numeric comparison unknown", edit(BASE_CONFIG, lambda d: _selector(d).update(numericLabels=[{"key": "k", "comparison": "Equals"}])), "$.spec.rules[0].candidateSelectors[0].numericLabels[0].comparison"),
    ("33 matchNames", edit(BASE_CONFIG, lambda d: _selector(d)["priority"].update(matchNames=[f"c{i}" for i in range(33)])), "$.spec.rules[0].candidateSelectors[0].priority.matchNames"),
    ("empty matchName", edit(BASE_CONFIG, lambda d: _selector(d)["priority"].update(notMatchNames=[""])), "$.spec.rules[0].candidateSelectors[0].priority.notMatchNames[0]"),
    ("label selector unknown field", edit(BASE_CONFIG, lambda d: _selector(d).update(labelSelector={"matchLabel": {"a": "b"}})), "$.spec.rules[0].candidateSelectors[0].labelSelector"),
    ("label selector expression without operator", edit(BASE_CONFIG, lambda d: _selector(d).update(labelSelector={"matchExpressions": [{"key": "a"}]})), "$.spec.rules[0].candidateSelectors[0].labelSelector.matchExpressions[0]"),
    ("preemptor class selector unknown field", edit(BASE_CONFIG, lambda d: _rule(d).update(preemptorPriorityClassSelector={"names": ["x"]})), "$.spec.rules[0].preemptorPriorityClassSelector"),
    ("rules not a list", edit(BASE_CONFIG, lambda d: d["spec"].update(rules={"name": "x"})), "$.spec.rules"),
    ("ClusterQueue v1beta1 cohort field", edit(BASE_QUEUE, lambda d: d["spec"].update(cohort="org")), "$.spec"),
    ("ClusterQueue withinClusterQueue unknown", edit(BASE_QUEUE, lambda d: d["spec"]["preemption"].update(withinClusterQueue="Always")), "$.spec.preemption.withinClusterQueue"),
    ("ClusterQueue reclaimWithinCohort unknown", edit(BASE_QUEUE, lambda d: d["spec"]["preemption"].update(reclaimWithinCohort="LowerOrNewerEqualPriority")), "$.spec.preemption.reclaimWithinCohort"),
    ("ClusterQueue nominalQuota 1K", edit(BASE_QUEUE, lambda d: d["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0].update(nominalQuota="1K")), "$.spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"),
    ("ClusterQueue nominalQuota missing", edit(BASE_QUEUE, lambda d: d["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0].pop("nominalQuota")), "$.spec.resourceGroups[0].flavors[0].resources[0]"),
    ("ClusterQueue 17 resource groups", edit(BASE_QUEUE, lambda d: d["spec"].update(resourceGroups=d["spec"]["resourceGroups"] * 17)), "$.spec.resourceGroups"),
    ("ClusterQueue cohort name not DNS", edit(BASE_QUEUE, lambda d: d["spec"].update(cohortName="Org_1")), "$.spec.cohortName"),
    ("ClusterQueue queueingStrategy unknown", edit(BASE_QUEUE, lambda d: d["spec"].update(queueingStrategy="LIFO")), "$.spec.queueingStrategy"),
    ("Workload without podSets", edit(BASE_WORKLOAD, lambda d: d["spec"].update(podSets=[])), "$.spec.podSets"),
    ("Workload with 19 podSets", edit(BASE_WORKLOAD, lambda d: d["spec"].update(podSets=[{**d["spec"]["podSets"][0], "name": f"p{i}"} for i in range(19)])), "$.spec.podSets"),
    ("Workload priority above int32", edit(BASE_WORKLOAD, lambda d: d["spec"].update(priority=2**31)), "$.spec.priority"),
    ("Workload queueName not DNS", edit(BASE_WORKLOAD, lambda d: d["spec"].update(queueName="Main_Q")), "$.spec.queueName"),
    ("Workload negative count", edit(BASE_WORKLOAD, lambda d: d["spec"]["podSets"][0].update(count=-1)), "$.spec.podSets[0].count"),
    ("Workload request not a quantity", edit(BASE_WORKLOAD, lambda d: d["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"].update(cpu="two")), "$.spec.podSets[0].template.spec.containers[0].resources.requests.cpu"),
    ("Workload v1beta1 priorityClassName", edit(BASE_WORKLOAD, lambda d: d["spec"].update(priorityClassName="high")), "$.spec"),
    ("Workload priorityClassRef group unknown", edit(BASE_WORKLOAD, lambda d: d["spec"].update(priorityClassRef={"group": "example.com", "kind": "PriorityClass", "name": "x"})), "$.spec.priorityClassRef.group"),
    ("Workload condition status unknown", edit(BASE_WORKLOAD, lambda d: d.update(status={"conditions": [{"type": "Admitted", "status": "Yes", "reason": "Admitted", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})), "$.status.conditions[0].status"),
    ("Workload condition time not RFC 3339", edit(BASE_WORKLOAD, lambda d: d.update(status={"conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted", "message": "", "lastTransitionTime": "yesterday"}]})), "$.status.conditions[0].lastTransitionTime"),
    # Issue 11: negative quotas, requests and usage; int32 fields past their type.
    ("ClusterQueue nominalQuota -3", edit(BASE_QUEUE, lambda d: _quota(d).update(nominalQuota="-3")), "$.spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"),
    ("ClusterQueue nominalQuota integer -3", edit(BASE_QUEUE, lambda d: _quota(d).update(nominalQuota=-3)), "$.spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"),
    ("ClusterQueue nominalQuota -0", edit(BASE_QUEUE, lambda d: _quota(d).update(nominalQuota="-0")), "$.spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"),
    ("ClusterQueue borrowingLimit -1", edit(BASE_QUEUE, lambda d: _quota(d).update(borrowingLimit="-1")), "$.spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit"),
    ("ClusterQueue lendingLimit -500m", edit(BASE_QUEUE, lambda d: _quota(d).update(lendingLimit="-500m")), "$.spec.resourceGroups[0].flavors[0].resources[0].lendingLimit"),
    ("Workload request -1", edit(BASE_WORKLOAD, lambda d: _requests(d).update(cpu="-1")), "$.spec.podSets[0].template.spec.containers[0].resources.requests.cpu"),
    ("Workload request integer -1", edit(BASE_WORKLOAD, lambda d: _requests(d).update(memory=-1)), "$.spec.podSets[0].template.spec.containers[0].resources.requests.memory"),
    ("Workload limit -2Gi", edit(BASE_WORKLOAD, lambda d: _container(d)["resources"].update(limits={"memory": "-2Gi"})), "$.spec.podSets[0].template.spec.containers[0].resources.limits.memory"),
    ("Workload overhead -1", edit(BASE_WORKLOAD, lambda d: d["spec"]["podSets"][0]["template"]["spec"].update(overhead={"cpu": "-100m"})), "$.spec.podSets[0].template.spec.overhead.cpu"),
    ("Workload usage -1", edit(BASE_WORKLOAD, lambda d: d.update(status={"admission": {"clusterQueue": "a", "podSetAssignments": [{"name": "main", "resourceUsage": {"cpu": "-1"}}]}})), "$.status.admission.podSetAssignments[0].resourceUsage.cpu"),
    ("Workload count 2^31", edit(BASE_WORKLOAD, lambda d: d["spec"]["podSets"][0].update(count=2**31)), "$.spec.podSets[0].count"),
    ("Workload minCount 2^31", edit(BASE_WORKLOAD, lambda d: d["spec"]["podSets"][0].update(minCount=2**31)), "$.spec.podSets[0].minCount"),
    ("Workload maximumExecutionTimeSeconds 2^31", edit(BASE_WORKLOAD, lambda d: d["spec"].update(maximumExecutionTimeSeconds=2**31)), "$.spec.maximumExecutionTimeSeconds"),
    ("Workload assignment count 2^31", edit(BASE_WORKLOAD, lambda d: d.update(status={"admission": {"clusterQueue": "a", "podSetAssignments": [{"name": "main", "count": 2**31}]}})), "$.status.admission.podSetAssignments[0].count"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "doc", "where"), BAD, ids=[case for case, _, _ in BAD])
def test_bad_object_is_rejected(case: str, doc: dict[str, Any], where: str) -> None:
    errors = schema_errors(doc)
    assert errors, f"{case}: the CRD schema accepts it"
    assert any(error.split(": ", 1)[0] == where for error in errors), errors
    with pytest.raises(ValidationError):
        model_for(doc).model_validate(doc)


def test_bad_base_objects_are_good() -> None:
    for doc in (BASE_CONFIG, BASE_QUEUE, BASE_WORKLOAD):
        assert schema_errors(doc) == []
        model_for(doc).model_validate(doc)


def test_a_workload_takes_18_pod_sets_and_assignments_as_in_kueue() -> None:
    """Kueue v0.19.2 allows 18 pod sets (and as many assignments), as a RayCluster's head and 17
    worker groups need; a 19th is refused (see BAD)."""

    def eighteen(doc: dict[str, Any]) -> None:
        doc["spec"]["podSets"] = [{**doc["spec"]["podSets"][0], "name": f"p{i}"} for i in range(18)]
        assignments = [{"name": f"p{i}", "count": 1} for i in range(18)]
        doc["status"] = {"admission": {"clusterQueue": "a", "podSetAssignments": assignments}}

    doc = edit(BASE_WORKLOAD, eighteen)
    assert schema_errors(doc) == []
    model_for(doc).model_validate(doc)


DUPLICATES: list[tuple[str, dict[str, Any]]] = [
    ("duplicate rule names", edit(BASE_CONFIG, lambda d: d["spec"].update(rules=[rule_named("same"), rule_named("same")]))),
    ("duplicate matchNames", edit(BASE_CONFIG, lambda d: _selector(d)["priority"].update(matchNames=["a", "a"]))),
    ("duplicate podSet names (one defaulted)", edit(BASE_WORKLOAD, lambda d: d["spec"]["podSets"].append({k: v for k, v in d["spec"]["podSets"][0].items() if k != "name"}))),
    ("duplicate flavors", edit(BASE_QUEUE, lambda d: d["spec"]["resourceGroups"][0]["flavors"].append(d["spec"]["resourceGroups"][0]["flavors"][0]))),
]  # fmt: skip


@pytest.mark.parametrize(("case", "doc"), DUPLICATES, ids=[case for case, _ in DUPLICATES])
def test_duplicates_rejected_by_schema(case: str, doc: dict[str, Any]) -> None:
    assert schema_errors(doc), f"{case}: the CRD schema accepts it"


@pytest.mark.parametrize(("case", "doc"), DUPLICATES, ids=[case for case, _ in DUPLICATES])
def test_duplicates_rejected_by_models(case: str, doc: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        model_for(doc).model_validate(doc)


LAX: list[tuple[str, dict[str, Any]]] = [
    ("string fallbackValue", edit(BASE_CONFIG, lambda d: _selector(d).update(numericLabels=[{"key": "k", "fallbackValue": "5"}]))),
    ("boolean minValue", edit(BASE_CONFIG, lambda d: _selector(d).update(numericLabels=[{"key": "k", "minValue": True}]))),
    ("string priority", edit(BASE_WORKLOAD, lambda d: d["spec"].update(priority="5"))),
    ("string count", edit(BASE_WORKLOAD, lambda d: d["spec"]["podSets"][0].update(count="2"))),
]  # fmt: skip


@pytest.mark.parametrize(("case", "doc"), LAX, ids=[case for case, _ in LAX])
def test_wrong_types_rejected_by_schema(case: str, doc: dict[str, Any]) -> None:
    assert schema_errors(doc), f"{case}: the CRD schema accepts it"


@pytest.mark.parametrize(("case", "doc"), LAX, ids=[case for case, _ in LAX])
def test_wrong_types_rejected_by_models(case: str, doc: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        model_for(doc).model_validate(doc)


# ---------------------------------------------------------------------------------------------
# Quantities (issue 11): what the API server can check of them, and that the models check more
# ---------------------------------------------------------------------------------------------

SIGNED_QUANTITIES = {
    # Status the operator writes and Kueue's fair-sharing weight: no sign rule (Kueue has none).
    ("ClusterQueue", ".status.flavorsReservation[].resources[].total"),
    ("ClusterQueue", ".status.flavorsReservation[].resources[].borrowed"),
    ("ClusterQueue", ".status.flavorsUsage[].resources[].total"),
    ("ClusterQueue", ".status.flavorsUsage[].resources[].borrowed"),
    ("LocalQueue", ".status.flavorsReservation[].resources[].total"),
    ("LocalQueue", ".status.flavorsReservation[].resources[].borrowed"),
    ("LocalQueue", ".status.flavorsUsage[].resources[].total"),
    ("LocalQueue", ".status.flavorsUsage[].resources[].borrowed"),
}


def test_quantities_the_scheduler_counts_cannot_be_negative() -> None:
    signed, unsigned = set(), set()
    for kind in sorted(crds()):
        for path, node in walk(openapi(kind)):
            if not node.get("x-kubernetes-int-or-string"):
                continue
            if node.get("pattern") == NON_NEGATIVE_QUANTITY_PATTERN:
                assert node.get("minimum") == 0, f"{kind}{path}: integers may be negative"
                unsigned.add((kind, path))
            else:
                assert node.get("pattern") == QUANTITY_PATTERN, f"{kind}{path}"
                signed.add((kind, path))
    assert signed == SIGNED_QUANTITIES
    assert {
        ("ClusterQueue", ".spec.resourceGroups[].flavors[].resources[].nominalQuota"),
        ("ClusterQueue", ".spec.resourceGroups[].flavors[].resources[].borrowingLimit"),
        ("ClusterQueue", ".spec.resourceGroups[].flavors[].resources[].lendingLimit"),
        ("Cohort", ".spec.resourceGroups[].flavors[].resources[].nominalQuota"),
        ("Workload", ".spec.podSets[].template.spec.containers[].resources.requests{}"),
        ("Workload", ".spec.podSets[].template.spec.containers[].resources.limits{}"),
        ("Workload", ".spec.podSets[].template.spec.initContainers[].resources.requests{}"),
        ("Workload", ".spec.podSets[].template.spec.overhead{}"),
        ("Workload", ".status.admission.podSetAssignments[].resourceUsage{}"),
        # Kueue's webhook refuses a negative weight; here the schema does.
        ("ClusterQueue", ".spec.fairSharing.weight"),
        ("Cohort", ".spec.fairSharing.weight"),
        ("LocalQueue", ".spec.fairSharing.weight"),
    } <= unsigned


def test_non_negative_pattern_is_kubernetes_pattern_without_the_minus() -> None:
    assert QUANTITY_PATTERN.startswith(r"^(\+|-)?")
    assert r"^(\+)?" + QUANTITY_PATTERN.removeprefix(r"^(\+|-)?") == NON_NEGATIVE_QUANTITY_PATTERN


@pytest.mark.parametrize(
    "value", [0, "0", 5, "+1", "500m", "1e-3", "1.5Gi", ".5", "1.", "1.5k", "9223372036854775807m"]
)
def test_non_negative_quantities_are_accepted_by_both(value: Any) -> None:
    doc = edit(BASE_QUEUE, lambda d: _quota(d).update(nominalQuota=value))
    assert schema_errors(doc) == []
    model_for(doc).model_validate(doc)


@pytest.mark.parametrize("value", ["1e1.5", "1e99999999999", "9223372036854775808m", "1e18"])
def test_the_server_stores_quantities_only_the_models_reject(value: str) -> None:
    """Kubernetes' pattern admits a fractional exponent apimachinery cannot parse, and has no
    bound: the models (parse_object) are the safety net."""
    doc = edit(BASE_QUEUE, lambda d: _quota(d).update(nominalQuota=value))
    assert schema_errors(doc) == []
    with pytest.raises(ValidationError):
        model_for(doc).model_validate(doc)


@pytest.mark.slow
@given(st.one_of(st.text(alphabet="0123456789.+-eEkmMGiu", max_size=8), st.integers(-(10**6), 10**6)))
def test_models_are_at_least_as_strict_as_the_schema_on_requests(value: str | int) -> None:
    doc = edit(BASE_WORKLOAD, lambda d: _requests(d).update(cpu=value))
    try:
        model_for(doc).model_validate(doc)
    except ValidationError:
        assume(False)  # the property is about what the models accept
    assert schema_errors(doc) == [], value


# ---------------------------------------------------------------------------------------------
# Property: the models and the CRD schema accept the same PreemptionConfigs
# ---------------------------------------------------------------------------------------------

_names = st.one_of(
    st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z"),
    st.sampled_from(["", "A", "a_b", "-a", "a-", "a.b", "a" * 63, "a" * 64]),
)
_int32ish = st.one_of(
    st.integers(min_value=-(2**31), max_value=2**31 - 1),
    st.sampled_from([-1, 0, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1]),
)
_enum = st.sampled_from
_selectors = st.fixed_dictionaries(
    {
        "scope": _enum(
            [
                "WithinLocalQueue",
                "WithinClusterQueue",
                "WithinParentCohort",
                "WithinCohortTree",
                "AnyClusterQueue",
                "Everywhere",
            ]
        )
    },
    optional={
        "priority": st.fixed_dictionaries(
            {},
            optional={
                "mode": _enum(["Base", "Boosted", "Effective"]),
                "comparison": _enum(["LessThan", "LessThanOrEqual", "GreaterThan", "GreaterThanOrEqual", "Equal"]),
                "matchNames": st.lists(st.sampled_from(["", "low", "batch-low", "x" * 254]), max_size=3, unique=True),
            },
        ),
        "numericLabels": st.lists(
            st.fixed_dictionaries(
                {"key": st.sampled_from(["", "example.com/node-count", "k" * 316, "k" * 317])},
                optional={
                    "comparison": _enum(["LessThan", "GreaterThanOrEqual", "Equal"]),
                    "fallbackValue": _int32ish,
                    "minValue": _int32ish,
                    "maxValue": _int32ish,
                },
            ),
            max_size=3,
        ),
        "labelSelector": st.sampled_from(
            [{}, {"matchLabels": {"a": "b"}}, {"matchExpressions": [{"key": "a", "operator": "Exists"}]}]
        ),
        "unknownField": st.just(1),
    },
)
_rules = st.fixed_dictionaries(
    {
        "name": _names,
        "activationPolicy": st.fixed_dictionaries(
            {"trigger": _enum(["Always", "InsufficientQuota", "QuotaFeasibleAndInsufficientTopology", "Sometimes"])}
        ),
    },
    optional={"candidateSelectors": st.lists(_selectors, max_size=3)},
)


@pytest.mark.slow
@given(st.lists(_rules, max_size=3, unique_by=lambda rule: str(rule["name"])))
def test_models_and_schema_agree_on_preemption_configs(rules: list[dict[str, Any]]) -> None:
    doc = {
        "apiVersion": "kueue.x-k8s.io/v1alpha1",
        "kind": "PreemptionConfig",
        "metadata": {"name": "c"},
        "spec": {"rules": rules},
    }
    schema_ok = not schema_errors(doc)
    try:
        v1alpha1.PreemptionConfig.model_validate(doc)
        model_ok = True
    except ValidationError:
        model_ok = False
    assert schema_ok == model_ok, schema_errors(doc)


# ---------------------------------------------------------------------------------------------
# CEL: every x-kubernetes-validations rule, with objects that pass and objects that break it
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class B:
    """Bindings for one evaluation: `self`, and `oldSelf` for transition rules."""

    self: Any
    old: Any = MISSING


@dataclass(frozen=True)
class CelCase:
    message: str
    passing: list[B]
    breaking: list[B]


_RESERVED = {
    "conditions": [
        {
            "type": "QuotaReserved",
            "status": "True",
            "reason": "QuotaReserved",
            "message": "Quota reserved in ClusterQueue a",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ]
}
_NOT_RESERVED = {
    "conditions": [
        {
            "type": "QuotaReserved",
            "status": "False",
            "reason": "Pending",
            "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ]
}
_POD_SET = {"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "c"}]}}}
_ASSIGNMENT = {"name": "main", "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "1"}, "count": 1}
_WPC_REF = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}


def workload(
    *,
    status: dict[str, Any] | None = None,
    pod_sets: int = 1,
    assignments: int = 1,
    ref: bool = False,
    queue: str = "main",
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "ns"},
        "spec": {"queueName": queue, "podSets": [{**_POD_SET, "name": f"ps{i}"} for i in range(pod_sets)]},
    }
    if ref:
        doc["spec"]["priorityClassRef"] = _WPC_REF
    if status is not None:
        doc["status"] = copy.deepcopy(status)
        doc["status"]["admission"] = {
            "clusterQueue": "a",
            "podSetAssignments": [{**_ASSIGNMENT, "name": f"ps{i}"} for i in range(assignments)],
        }
    return doc


def _group(resources: int, covered: int = 1) -> dict[str, Any]:
    names = ["cpu", "memory", "nvidia.com/gpu"]
    return {
        "coveredResources": names[:covered],
        "flavors": [{"name": "default", "resources": [{"name": n, "nominalQuota": 1} for n in names[:resources]]}],
    }


def _roots(*values: str) -> dict[str, Any]:
    return {"individual": {"roots": list(values)}}


def _slice(domains: int, **extra: Any) -> dict[str, Any]:
    return {"domainCount": domains, "valuesPerLevel": [_roots(*(f"n{i}" for i in range(domains)))], **extra}


CEL_CASES: dict[str, CelCase] = {
    # ---- ClusterQueue / Cohort
    "!has(self.cohortName) && has(self.resourceGroups) ? self.resourceGroups.all(rg, rg.flavors.all(f, f.resources.all(r, !has(r.borrowingLimit)))) : true": CelCase(
        "borrowingLimit must be nil when cohort is empty",
        passing=[
            B({"resourceGroups": [_group(1)]}),
            B({"cohortName": "org", "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": 1, "borrowingLimit": 2}]}]}]}),
            B({}),
            B({"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": 1, "lendingLimit": 1}]}]}]}),
        ],
        breaking=[
            B({"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": 1, "borrowingLimit": 2}]}]}]}),
            B({"resourceGroups": [_group(1), {"coveredResources": ["memory"], "flavors": [{"name": "g", "resources": [{"name": "memory", "nominalQuota": 1, "borrowingLimit": 0}]}]}]}),
        ],
    ),
    "self.flavors.all(x, size(x.resources) == size(self.coveredResources))": CelCase(
        "flavors must have the same number of resources as the coveredResources",
        passing=[B(_group(1)), B(_group(2, covered=2)), B(_group(3, covered=3))],
        breaking=[B(_group(1, covered=2)), B(_group(2, covered=1)), B({"coveredResources": ["cpu"], "flavors": [_group(1)["flavors"][0], _group(2)["flavors"][0] | {"name": "other"}]})],
    ),
    "self.flavors.all(x, x.resources.map(r, r.name) == self.coveredResources)": CelCase(
        "each flavor's resources must match the name in coveredResources, in order",
        passing=[B(_group(1)), B(_group(2, covered=2)), B(_group(3, covered=3))],
        breaking=[
            B(_group(1, covered=2)),
            B({"coveredResources": ["memory", "cpu"], "flavors": _group(2, covered=2)["flavors"]}),  # out of order
            B({"coveredResources": ["cpu", "memory"], "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": 1}, {"name": "gpu", "nominalQuota": 1}]}]}),
        ],
    ),
    "!has(self.preference) || (self.whenCanBorrow == 'TryNextFlavor' && self.whenCanPreempt == 'TryNextFlavor')": CelCase(
        "preference can only be set when both whenCanBorrow and whenCanPreempt are TryNextFlavor",
        passing=[B({}), B({"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor", "preference": "BorrowingOverPreemption"})],
        breaking=[B({"preference": "PreemptionOverBorrowing"}), B({"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "MayStopSearch", "preference": "BorrowingOverPreemption"})],
    ),
    "!(self.reclaimWithinCohort == 'Never' && has(self.borrowWithinCohort) && self.borrowWithinCohort.policy != 'Never')": CelCase(
        "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
        passing=[
            B({}),
            B({"reclaimWithinCohort": "LowerPriority", "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 0}}),
            B({"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "Never"}}),
            B({"borrowWithinCohort": {}}),
        ],
        breaking=[B({"borrowWithinCohort": {"policy": "LowerPriority"}}), B({"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "LowerPriority"}})],
    ),
    # ---- PreemptionConfig
    "!has(self.minValue) || !has(self.maxValue) || self.minValue <= self.maxValue": CelCase(
        "minValue must be less than or equal to maxValue",
        passing=[B({"key": "k"}), B({"key": "k", "minValue": 5}), B({"key": "k", "maxValue": 0}), B({"key": "k", "minValue": 3, "maxValue": 3}), B({"key": "k", "minValue": 0, "maxValue": 8})],
        breaking=[B({"key": "k", "minValue": 5, "maxValue": 2}), B({"key": "k", "minValue": 1, "maxValue": 0})],
    ),
    "!has(self.quota) || !(self.scope in ['WithinLocalQueue', 'WithinClusterQueue'])": CelCase(
        "quota cannot be used with scope WithinLocalQueue or WithinClusterQueue",
        passing=[
            B({"scope": "WithinClusterQueue"}),
            B({"scope": "WithinCohortTree", "quota": "KeepsNominalQuota"}),
            # The DRS values (fair sharing) are accepted with every cohort-wide scope.
            B({"scope": "AnyClusterQueue", "quota": "DRSAllStrategies"}),
            B({"scope": "WithinCohortTree", "quota": "DRSLessThanInitialShare"}),
            B({"scope": "WithinParentCohort", "quota": "DRSLessThanOrEqualToFinalShare"}),
        ],
        breaking=[
            B({"scope": "WithinClusterQueue", "quota": "BorrowingCapacityFromPreemptor"}),
            B({"scope": "WithinLocalQueue", "quota": "KeepsNominalQuota"}),
            B({"scope": "WithinClusterQueue", "quota": "DRSAllStrategies"}),
            B({"scope": "WithinLocalQueue", "quota": "DRSLessThanInitialShare"}),
        ],
    ),
    "!has(self.minExecutionDuration) || !has(self.maxExecutionDuration) || duration(self.minExecutionDuration) <= duration(self.maxExecutionDuration)": CelCase(
        "minExecutionDuration must be less than or equal to maxExecutionDuration",
        passing=[B({"scope": "AnyClusterQueue", "minExecutionDuration": "90s", "maxExecutionDuration": "1m30s"}), B({"scope": "AnyClusterQueue", "maxExecutionDuration": "1s"})],
        breaking=[B({"scope": "AnyClusterQueue", "minExecutionDuration": "1h", "maxExecutionDuration": "59m"})],
    ),
    "!has(self.minTimeFromCreationDuration) || !has(self.maxTimeFromCreationDuration) || duration(self.minTimeFromCreationDuration) <= duration(self.maxTimeFromCreationDuration)": CelCase(
        "minTimeFromCreationDuration must be less than or equal to maxTimeFromCreationDuration",
        passing=[B({"scope": "AnyClusterQueue", "minTimeFromCreationDuration": "1m", "maxTimeFromCreationDuration": "2m"})],
        breaking=[B({"scope": "AnyClusterQueue", "minTimeFromCreationDuration": "2m", "maxTimeFromCreationDuration": "1m"})],
    ),
    "self.all(x, self.exists_one(y, y.orderingField == x.orderingField))": CelCase(
        "orderingField must be unique",
        passing=[B([]), B([{"orderingField": "Priority"}]), B([{"orderingField": "Priority", "direction": "Descending"}, {"orderingField": "AdmissionTimestamp"}, {"orderingField": "ClusterQueueDRS"}])],
        breaking=[B([{"orderingField": "Priority"}, {"orderingField": "Priority", "direction": "Descending"}]), B([{"orderingField": "IsOtherCQ"}, {"orderingField": "Priority"}, {"orderingField": "IsOtherCQ"}])],
    ),
    "has(self.mode) == has(self.comparison)": CelCase(
        "mode and comparison must be specified together",
        passing=[B({}), B({"mode": "Base", "comparison": "LessThan"}), B({"matchNames": ["low"]}), B({"mode": "Boosted", "comparison": "GreaterThanOrEqual", "notMatchNames": ["x"]})],
        breaking=[B({"mode": "Base"}), B({"comparison": "LessThan"}), B({"mode": "Boosted", "matchNames": ["low"]})],
    ),
    # ---- PreemptionLimit
    "duration(self) >= duration('1s')": CelCase(
        "must be at least 1s",
        passing=[B("1s"), B("5m"), B("1h30m"), B("1000ms")],
        breaking=[B("0s"), B("999ms"), B("0.5s")],
    ),
    # ---- ResourceFlavor
    "!has(self.topologyName) || self.nodeLabels.size() >= 1": CelCase(
        "at least one nodeLabel is required when topology is set",
        passing=[B({}), B({"nodeLabels": {}}), B({"topologyName": "t", "nodeLabels": {"pool": "tas"}})],
        breaking=[B({"topologyName": "t", "nodeLabels": {}})],
    ),
    "!has(oldSelf.topologyName) || self == oldSelf": CelCase(
        "resourceFlavorSpec are immutable when topologyName is set",
        passing=[
            B({"nodeLabels": {"a": "2"}}, {"nodeLabels": {"a": "1"}}),
            B({"topologyName": "t", "nodeLabels": {"a": "1"}}, {"nodeLabels": {"a": "1"}}),
            B({"topologyName": "t", "nodeLabels": {"a": "1"}}, {"topologyName": "t", "nodeLabels": {"a": "1"}}),
        ],
        breaking=[
            B({"topologyName": "t", "nodeLabels": {"a": "2"}}, {"topologyName": "t", "nodeLabels": {"a": "1"}}),
            B({"nodeLabels": {"a": "1"}}, {"topologyName": "t", "nodeLabels": {"a": "1"}}),
            B({"topologyName": "u", "nodeLabels": {"a": "1"}}, {"topologyName": "t", "nodeLabels": {"a": "1"}}),
        ],
    ),
    "self.all(x, x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])": CelCase(
        "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
        passing=[B([]), B([{"key": "k", "effect": "NoSchedule"}, {"key": "k", "value": "v", "effect": "NoExecute"}, {"key": "j", "effect": "PreferNoSchedule"}])],
        breaking=[B([{"key": "k", "effect": "Sometimes"}]), B([{"key": "k", "effect": "NoSchedule"}, {"key": "k", "effect": "noschedule"}])],
    ),
    # ---- Workload status: a check's podSetUpdates tolerations (Kueue's rules for them)
    "self.all(x, !has(x.key) ? x.operator == 'Exists' : true)": CelCase(
        "operator must be Exists when 'key' is empty, which means 'match all values and all keys'",
        passing=[B([]), B([{"operator": "Exists"}]), B([{"key": "k", "operator": "Equal", "value": "v"}])],
        breaking=[B([{"operator": "Equal"}]), B([{"key": "k"}, {"value": "v", "operator": "Equal"}])],
    ),
    "self.all(x, has(x.tolerationSeconds) ? x.effect == 'NoExecute' : true)": CelCase(
        "effect must be 'NoExecute' when 'tolerationSeconds' is set",
        passing=[B([{"key": "k", "effect": "NoExecute", "tolerationSeconds": 5}]), B([{"key": "k", "effect": "NoSchedule"}])],
        breaking=[B([{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}]), B([{"key": "k", "effect": "PreferNoSchedule", "tolerationSeconds": 5}])],
    ),
    "self.all(x, !has(x.operator) || x.operator in ['Equal', 'Exists'])": CelCase(
        "supported toleration values: 'Equal'(default), 'Exists'",
        passing=[B([{"key": "k"}, {"key": "j", "operator": "Exists"}, {"key": "i", "operator": "Equal"}])],
        breaking=[B([{"key": "k", "operator": "In"}]), B([{"key": "k", "operator": "exists"}])],
    ),
    "self.all(x, has(x.operator) && x.operator == 'Exists' ? !has(x.value) : true)": CelCase(
        "a value must be empty when 'operator' is 'Exists'",
        passing=[B([{"key": "k", "operator": "Exists"}]), B([{"key": "k", "value": "v"}])],
        breaking=[B([{"key": "k", "operator": "Exists", "value": "v"}])],
    ),
    "self.all(x, !has(x.effect) || x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])": CelCase(
        "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
        passing=[B([{"key": "k"}, {"key": "k", "effect": "PreferNoSchedule"}])],
        breaking=[B([{"key": "k", "effect": "Sometimes"}])],
    ),
    # ---- Topology
    "size(self.filter(i, size(self.filter(j, j == i)) > 1)) == 0": CelCase(
        "must be unique",
        passing=[B([{"nodeLabel": "rack"}, {"nodeLabel": "kubernetes.io/hostname"}]), B([{"nodeLabel": "rack"}])],
        breaking=[B([{"nodeLabel": "rack"}, {"nodeLabel": "rack"}]), B([{"nodeLabel": "a"}, {"nodeLabel": "b"}, {"nodeLabel": "a"}])],
    ),
    "size(self.filter(i, i.nodeLabel == 'kubernetes.io/hostname')) == 0 || self[size(self) - 1].nodeLabel == 'kubernetes.io/hostname'": CelCase(
        "the kubernetes.io/hostname label can only be used at the lowest level of topology",
        passing=[B([{"nodeLabel": "rack"}]), B([{"nodeLabel": "rack"}, {"nodeLabel": "kubernetes.io/hostname"}]), B([{"nodeLabel": "kubernetes.io/hostname"}])],
        breaking=[B([{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "rack"}])],
    ),
    # ---- Workload (root)
    "has(self.status) && has(self.status.conditions) && self.status.conditions.exists(c, c.type == 'QuotaReserved' && c.status == 'True') && has(self.status.admission) ? size(self.spec.podSets) == size(self.status.admission.podSetAssignments) : true": CelCase(
        "podSetAssignments must have the same number of podSets as the spec",
        passing=[B(workload()), B(workload(status=_RESERVED)), B(workload(status=_RESERVED, pod_sets=2, assignments=2)), B(workload(status=_NOT_RESERVED, pod_sets=2, assignments=1))],
        breaking=[B(workload(status=_RESERVED, pod_sets=2, assignments=1)), B(workload(status=_RESERVED, pod_sets=1, assignments=2))],
    ),
    "(has(oldSelf.status) && has(oldSelf.status.conditions) && oldSelf.status.conditions.exists(c, c.type == 'QuotaReserved' && c.status == 'True')) ? (!has(oldSelf.spec.priorityClassRef) && !has(self.spec.priorityClassRef)) || (has(oldSelf.spec.priorityClassRef) && has(self.spec.priorityClassRef)) : true": CelCase(
        "priorityClassRef is immutable while workload quota reserved",
        passing=[
            B(workload(ref=True, status=_RESERVED), workload(ref=True, status=_RESERVED)),
            B(workload(status=_RESERVED), workload(status=_RESERVED)),
            B(workload(ref=False), workload(ref=True)),
            B(workload(ref=True, status=_RESERVED), workload(ref=False, status=_NOT_RESERVED)),
        ],
        breaking=[
            B(workload(ref=False, status=_RESERVED), workload(ref=True, status=_RESERVED)),
            B(workload(ref=True, status=_RESERVED), workload(ref=False, status=_RESERVED)),
        ],
    ),
    "(has(oldSelf.status) && has(oldSelf.status.conditions) && oldSelf.status.conditions.exists(c, c.type == 'QuotaReserved' && c.status == 'True')) && (has(self.status) && has(self.status.conditions) && self.status.conditions.exists(c, c.type == 'QuotaReserved' && c.status == 'True')) && has(oldSelf.spec.queueName) && has(self.spec.queueName) ? oldSelf.spec.queueName == self.spec.queueName : true": CelCase(
        "queueName is immutable while workload quota reserved",
        passing=[
            B(workload(status=_RESERVED), workload(status=_RESERVED)),
            B(workload(queue="other"), workload()),
            B(workload(queue="other", status=_NOT_RESERVED), workload(status=_RESERVED)),
        ],
        breaking=[B(workload(queue="other", status=_RESERVED), workload(status=_RESERVED))],
    ),
    # ---- Workload spec
    "has(self.minCount) ? self.minCount <= self.count : true": CelCase(
        "minCount should be positive and less or equal to count",
        passing=[B(_POD_SET), B({**_POD_SET, "count": 4, "minCount": 2}), B({**_POD_SET, "count": 3, "minCount": 3}), B({k: v for k, v in _POD_SET.items() if k != "count"} | {"minCount": 1})],
        breaking=[B({**_POD_SET, "count": 2, "minCount": 3}), B({k: v for k, v in _POD_SET.items() if k != "count"} | {"minCount": 2})],
    ),
    "self.group == 'scheduling.k8s.io' ? self.kind == 'PriorityClass' : true": CelCase(
        "only the PriorityClass kind is allowed for the scheduling.k8s.io group",
        passing=[B({"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "high"}), B(_WPC_REF)],
        breaking=[B({"group": "scheduling.k8s.io", "kind": "WorkloadPriorityClass", "name": "high"})],
    ),
    "self.group == 'kueue.x-k8s.io' ? self.kind == 'WorkloadPriorityClass' : true": CelCase(
        "only the WorkloadPriorityClass kind is allowed for the kueue.x-k8s.io group",
        passing=[B(_WPC_REF), B({"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "high"})],
        breaking=[B({"group": "kueue.x-k8s.io", "kind": "PriorityClass", "name": "high"})],
    ),
    # ---- Workload topology assignment
    "self.slices.all(x, size(x.valuesPerLevel) == size(self.levels))": CelCase(
        "valuesPerLevel must have the same length as the number of levels in this TopologyAssignment",
        passing=[
            B({"levels": ["kubernetes.io/hostname"], "slices": [_slice(2, podCounts={"universal": 1})]}),
            B({"levels": ["rack", "kubernetes.io/hostname"], "slices": [{"domainCount": 2, "valuesPerLevel": [{"universal": "r1"}, _roots("n1", "n2")], "podCounts": {"individual": [4, 2]}}]}),
            B({"levels": ["kubernetes.io/hostname"], "slices": []}),
        ],
        breaking=[
            B({"levels": ["rack", "kubernetes.io/hostname"], "slices": [_slice(1, podCounts={"universal": 1})]}),
            B({"levels": ["kubernetes.io/hostname"], "slices": [_slice(1, podCounts={"universal": 1}), {"domainCount": 1, "valuesPerLevel": [{"universal": "r"}, _roots("n")], "podCounts": {"universal": 1}}]}),
        ],
    ),
    "!has(self.podCounts.individual) || size(self.podCounts.individual) == self.domainCount": CelCase(
        "podCounts.individual must have length equal to domainCount",
        passing=[B(_slice(2, podCounts={"universal": 1})), B(_slice(2, podCounts={"individual": [1, 3]}))],
        breaking=[B(_slice(2, podCounts={"individual": [1]})), B(_slice(1, podCounts={"individual": [1, 2, 3]}))],
    ),
    "self.valuesPerLevel.all(x, !has(x.individual) || size(x.individual.roots) == self.domainCount)": CelCase(
        "valuesPerLevel.individual, if set, must have roots of length equal to domainCount of this TopologyAssignmentSlice",
        passing=[
            B(_slice(3, podCounts={"universal": 1})),
            B({"domainCount": 5, "valuesPerLevel": [{"universal": "r1"}], "podCounts": {"universal": 1}}),
            B({"domainCount": 2, "valuesPerLevel": [{"universal": "r1"}, {"individual": {"prefix": "n-", "suffix": ".x", "roots": ["1", "2"]}}], "podCounts": {"universal": 1}}),
        ],
        breaking=[
            B({"domainCount": 2, "valuesPerLevel": [_roots("n1")], "podCounts": {"universal": 1}}),
            B({"domainCount": 1, "valuesPerLevel": [{"universal": "r"}, _roots("n1", "n2")], "podCounts": {"universal": 1}}),
        ],
    ),
    "has(self.universal) != has(self.individual)": CelCase(
        "exactly one of the fields in [universal individual] must be set",
        passing=[B(_roots("n1")), B({"universal": "r1"}), B({"individual": {"prefix": "node-", "roots": ["1", "2"]}}), B({"universal": ""})],
        breaking=[B({}), B({"universal": "n1", **_roots("n1")})],
    ),
    "[has(self.universal),has(self.individual)].filter(x,x==true).size() == 1": CelCase(
        "exactly one of the fields in [universal individual] must be set",
        passing=[B({"universal": 1}), B({"individual": [1, 2]})],
        breaking=[B({}), B({"universal": 1, "individual": [1, 2]})],
    ),
}  # fmt: skip

# Rules whose text occurs at several places with different types: cases per (kind, path, rule).
CEL_CASES_AT: dict[tuple[str, str, str], CelCase] = {
    ("LocalQueue", ".spec.clusterQueue", "self == oldSelf"): CelCase(
        "field is immutable",
        passing=[B("cq-a", "cq-a")],
        breaking=[B("cq-b", "cq-a"), B("cq-a.x", "cq-a")],
    ),
    ("AdmissionCheck", ".spec.controllerName", "self == oldSelf"): CelCase(
        "field is immutable",
        passing=[B("example.com/gate", "example.com/gate")],
        breaking=[B("example.com/other", "example.com/gate")],
    ),
    ("Topology", ".spec.levels", "self == oldSelf"): CelCase(
        "field is immutable",
        passing=[B([{"nodeLabel": "rack"}, {"nodeLabel": "kubernetes.io/hostname"}], [{"nodeLabel": "rack"}, {"nodeLabel": "kubernetes.io/hostname"}])],
        breaking=[
            B([{"nodeLabel": "block"}], [{"nodeLabel": "rack"}]),
            B([{"nodeLabel": "block"}, {"nodeLabel": "rack"}], [{"nodeLabel": "rack"}]),
            B([{"nodeLabel": "rack"}, {"nodeLabel": "kubernetes.io/hostname"}], [{"nodeLabel": "rack"}]),
        ],
    ),
}  # fmt: skip

RULES = all_rules()


def case_for(found: FoundRule) -> CelCase | None:
    return CEL_CASES_AT.get((found.kind, found.path, found.rule)) or CEL_CASES.get(found.rule)


def test_every_cel_rule_has_cases() -> None:
    """A new rule in a CRD must come with passing and breaking objects here."""
    untested = sorted(rule.id for rule in RULES if case_for(rule) is None)
    assert not untested, f"CEL rules without test cases: {untested}"
    at = {(rule.kind, rule.path, rule.rule) for rule in RULES}
    stale = sorted(
        set(CEL_CASES) - {rule.rule for rule in RULES if (rule.kind, rule.path, rule.rule) not in CEL_CASES_AT}
    )
    stale += sorted(f"{kind}{path}: {rule}" for kind, path, rule in set(CEL_CASES_AT) - at)
    assert not stale, f"test cases for rules no CRD has: {stale}"


def test_rules_compile() -> None:
    for rule in RULES:
        cel_program(rule.rule)


@pytest.mark.parametrize("found", RULES, ids=lambda r: r.id)
def test_cel_rule(found: FoundRule) -> None:
    case = case_for(found)
    if case is None:
        pytest.fail(f"no test case for {found.rule!r} (see test_every_cel_rule_has_cases)")
    assert found.message == case.message
    assert case.passing and case.breaking
    node_validator = KubeValidator(to_json_schema(found.node), format_checker=FORMATS)
    transition = uses_old_self(found.rule)
    for expect, bindings in ((True, case.passing), (False, case.breaking)):
        for binding in bindings:
            assert (binding.old is not MISSING) == transition, "transition rules need oldSelf, others must not get it"
            self_value = apply_defaults(found.node, binding.self)
            old_value = MISSING if binding.old is MISSING else apply_defaults(found.node, binding.old)
            for value in (self_value, old_value):
                if value is not MISSING:
                    # The schema accepts the object: the rule is what decides.
                    errors = [f"{e.json_path}: {e.message}" for e in node_validator.iter_errors(value)]
                    assert not errors, f"fixture is not schema-valid: {errors}"
            assert cel(found.rule, self_value, old_value) is expect, (binding, found.rule)


def test_missing_node_labels_with_topology_is_an_error() -> None:
    """Without nodeLabels the rule errors (no such key); the API server rejects such an object too."""
    with pytest.raises(CelError):
        cel("!has(self.topologyName) || self.nodeLabels.size() >= 1", {"topologyName": "t"})


def test_topology_assignment_requires_slices() -> None:
    """`slices` is required (as in Kueue): the CEL rule reads it unguarded."""
    with pytest.raises(ValidationError):
        v1beta2.TopologyAssignment.model_validate({"levels": ["kubernetes.io/hostname"]})
    node = next(r.node for r in RULES if r.message.startswith("valuesPerLevel must have the same length"))
    assert "slices" in node.get("required", [])


def test_transition_rules_are_skipped_on_create() -> None:
    doc = apply_defaults(openapi("Workload"), workload(ref=False, status=_RESERVED))
    assert cel_failures(openapi("Workload"), doc) == []
    changed = apply_defaults(openapi("Workload"), workload(ref=True, queue="other", status=_RESERVED))
    failures = cel_failures(openapi("Workload"), changed, doc)
    assert failures == [
        ".: priorityClassRef is immutable while workload quota reserved",
        ".: queueName is immutable while workload quota reserved",
    ]


def test_cel_walk_reaches_nested_rules() -> None:
    config = edit(
        BASE_CONFIG,
        lambda d: _selector(d).update(
            priority={"mode": "Base"}, numericLabels=[{"key": "k", "minValue": 2, "maxValue": 1}]
        ),
    )
    failures = cel_failures(openapi("PreemptionConfig"), apply_defaults(openapi("PreemptionConfig"), config))
    assert failures == [
        ".spec.rules[0].candidateSelectors[0].numericLabels[0]: minValue must be less than or equal to maxValue",
        ".spec.rules[0].candidateSelectors[0].priority: mode and comparison must be specified together",
    ]
    assert schema_errors(config) == []  # only CEL rejects it


def test_defaults_are_applied_before_cel() -> None:
    queue = edit(BASE_QUEUE, lambda d: d["spec"].update(preemption={"borrowWithinCohort": {"policy": "LowerPriority"}}))
    defaulted = apply_defaults(openapi("ClusterQueue"), queue)
    assert defaulted["spec"]["preemption"]["reclaimWithinCohort"] == "Never"
    assert defaulted["spec"]["flavorFungibility"] == {
        "whenCanBorrow": "MayStopSearch",
        "whenCanPreempt": "TryNextFlavor",
    }
    assert cel_failures(openapi("ClusterQueue"), defaulted) == [
        ".spec.preemption: reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never"
    ]
