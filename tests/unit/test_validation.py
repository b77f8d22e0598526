"""api/validation.py: our CRDs' schemas and CEL rules applied offline, in the API server's words
(tests/e2e/test_offline_validation.py checks the words against a real API server)."""

from __future__ import annotations

import copy
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from preemption_operator.api import kinds, validation
from preemption_operator.cli import cli
from unit import test_crds

V1ALPHA1 = "kueue.x-k8s.io/v1alpha1"
V1BETA2 = "kueue.x-k8s.io/v1beta2"
SELECTOR = "spec.rules[0].candidateSelectors[0]"


def config(**selector: Any) -> dict[str, Any]:
    return {
        "apiVersion": V1ALPHA1,
        "kind": "PreemptionConfig",
        "metadata": {"name": "c"},
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


def problems(body: dict[str, Any]) -> list[str]:
    return [str(problem) for problem in validation.validate(body)]


# ---------------------------------------------------------------------------------------------
# Every kind, from the generated CRDs
# ---------------------------------------------------------------------------------------------


def test_every_crd_kind_has_a_schema() -> None:
    """Driven by kinds.CRDS (what `preemption-operator crds` writes): a new CRD is covered as is."""
    assert {schema.kind for schema in validation.schemas().values()} == {model.crd.kind for model in kinds.CRDS}
    for (api_version, kind), schema in validation.schemas().items():
        assert schema.openapi["type"] == "object", (api_version, kind)


def test_other_kinds_and_versions_are_not_judged() -> None:
    assert validation.validate({"apiVersion": "v1", "kind": "Namespace", "metadata": {}}) == []
    assert validation.validate({**config(scope="Everywhere"), "apiVersion": "kueue.x-k8s.io/v1beta1"}) == []


def test_a_valid_object_has_no_problems() -> None:
    assert problems(config()) == []
    assert problems(config(minExecutionDuration="0", maxExecutionDuration="1h")) == []


# ---------------------------------------------------------------------------------------------
# CEL rules, in the API server's words
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (
            {"numericLabels": [{"key": "k", "minValue": 5, "maxValue": 1}]},
            f'{SELECTOR}.numericLabels[0]: Invalid value: "object": minValue must be less than or equal to maxValue',
        ),
        (
            {"scope": "WithinClusterQueue", "quota": "DRSAllStrategies"},
            f'{SELECTOR}: Invalid value: "object": quota cannot be used with scope WithinLocalQueue or WithinClusterQueue',
        ),
        (
            {"minExecutionDuration": "2h", "maxExecutionDuration": "119m"},
            f'{SELECTOR}: Invalid value: "object": minExecutionDuration must be less than or equal to maxExecutionDuration',
        ),
        (
            {"minExecutionDuration": "99999999999999999999h", "maxExecutionDuration": "1h"},
            f"{SELECTOR}: Invalid value: \"object\": type conversion error from 'string' to "
            "'google.protobuf.Duration' evaluating rule: minExecutionDuration must be less than or equal to "
            "maxExecutionDuration",
        ),
    ],
    ids=["numeric-bounds", "quota-scope", "execution-durations", "duration-overflow"],
)
def test_cel_rule_failures(selector: dict[str, Any], expected: str) -> None:
    assert problems(config(**selector)) == [expected]


def test_rule_at_the_root_is_reported_at_nil() -> None:
    workload = {
        "apiVersion": V1BETA2,
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "ns"},
        "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": []}}}]},
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "True",
                    "reason": "R",
                    "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
            "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "a"}, {"name": "b"}]},
        },
    }
    assert problems(workload) == [
        '<nil>: Invalid value: "object": podSetAssignments must have the same number of podSets as the spec'
    ]


def test_a_rule_that_cannot_be_evaluated_says_why() -> None:
    flavor = {"apiVersion": V1BETA2, "kind": "ResourceFlavor", "metadata": {"name": "f"}, "spec": {"topologyName": "t"}}
    assert problems(flavor) == [
        'spec: Invalid value: "object": no such key: nodeLabels evaluating rule: at least one nodeLabel is '
        "required when topology is set"
    ]


def test_transition_rules_are_skipped() -> None:
    """`oldSelf` needs the stored object, which offline input does not have."""
    assert validation.is_transition_rule("self == oldSelf")
    assert validation.is_transition_rule("!has(oldSelf.topologyName) || self == oldSelf")
    assert not validation.is_transition_rule("self.name == 'oldSelf'")
    local_queue = {
        "apiVersion": V1BETA2,
        "kind": "LocalQueue",
        "metadata": {"name": "q", "namespace": "ns"},
        "spec": {"clusterQueue": "cq"},
    }
    assert problems(local_queue) == []


def test_defaults_are_applied_before_the_rules() -> None:
    """reclaimWithinCohort defaults to Never, which the rule then holds against the policy."""
    queue = {
        "apiVersion": V1BETA2,
        "kind": "ClusterQueue",
        "metadata": {"name": "q"},
        "spec": {"cohortName": "org", "preemption": {"borrowWithinCohort": {"policy": "LowerPriority"}}},
    }
    assert problems(queue) == [
        'spec.preemption: Invalid value: "object": reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never'
    ]


def test_schema_errors_that_block_the_rules_leave_them_unchecked() -> None:
    """As on the API server: an enum violation (or a wrong type, a missing field, a string or list
    over its maximum) stops the CEL rules from running."""
    body = config(scope="Everywhere", numericLabels=[{"key": "k", "minValue": 5, "maxValue": 1}])
    (only,) = problems(body)
    assert only.startswith(f'{SELECTOR}.scope: Unsupported value: "Everywhere": supported values: "WithinLocalQueue"')
    body = config(numericLabels=[{"key": "k", "minValue": 5, "maxValue": 1}], minExecutionDuration="5 minutes")
    assert len(problems(body)) == 2  # a pattern does not block: the rule runs too


def test_nulls_are_pruned_before_validation() -> None:
    assert problems(config(minExecutionDuration=None, maxExecutionDuration="1h")) == []


def test_yaml_times_are_read_as_the_text_they_were() -> None:
    body = {
        "apiVersion": V1BETA2,
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": "p", "creationTimestamp": datetime(2026, 1, 1, tzinfo=UTC)},
        "value": 1,
    }
    assert problems(body) == []


def test_unknown_fields_refuse_the_object_first() -> None:
    assert problems(config(costFunction="Linear", scope="Everywhere")) == [
        f'{SELECTOR}.costFunction: unknown field "{SELECTOR}.costFunction"'
    ]


# ---------------------------------------------------------------------------------------------
# duration(): Go's ParseDuration, compared as durations
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "value", "expected"),
    [
        ("duration(self) >= duration('1s')", "1s", True),
        ("duration(self) >= duration('1s')", "999ms", False),
        ("duration(self) >= duration('1s')", "0", False),
        ("duration(self) == duration('90m')", "1h30m", True),
        ("duration(self) < duration('1h')", "59m59.999999s", True),
        ("duration(self) > duration('2562047h')", "2562047h47m16.854775807s", True),
    ],
)
def test_duration_comparisons(rule: str, value: str, expected: bool) -> None:
    assert validation.evaluate(rule, value) is expected


@pytest.mark.parametrize("value", ["2562047h47m16.854775808s", "99999999999999999999h", "5 minutes", "1d", ""])
def test_duration_out_of_go_range_or_malformed_is_an_error(value: str) -> None:
    words = "type conversion error from 'string' to 'google.protobuf.Duration'"
    with pytest.raises(validation.RuleError, match=re.escape(words)):
        validation.evaluate("duration(self) >= duration('1s')", value)


def test_duration_in_a_string_literal_is_left_alone() -> None:
    assert validation.evaluate("self == 'duration(x)' && duration('1m') == duration('60s')", "duration(x)") is True


def test_a_rule_in_a_new_crd_is_covered(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kind added later (here a PreemptionLimit with `self >= duration('1s')` on a field) is
    validated from its schema alone, with no code to change."""
    openapi = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "required": ["limitWindowDuration"],
                "properties": {
                    "limitWindowDuration": {
                        "type": "string",
                        "format": "duration",
                        "x-kubernetes-validations": [
                            {"rule": "self >= duration('1s')", "message": "limitWindowDuration must be at least 1s"}
                        ],
                    }
                },
            },
        },
    }
    schema = validation.Schema(V1ALPHA1, "PreemptionLimit", openapi)
    served = {**validation.schemas(), (V1ALPHA1, "PreemptionLimit"): schema}
    monkeypatch.setattr(validation, "schemas", lambda: served)

    def limit(window: str) -> dict[str, Any]:
        return {
            "apiVersion": V1ALPHA1,
            "kind": "PreemptionLimit",
            "metadata": {"name": "l"},
            "spec": {"limitWindowDuration": window},
        }

    assert problems(limit("1s")) == []
    assert problems(limit("1m")) == []
    assert problems(limit("500ms")) == [
        'spec.limitWindowDuration: Invalid value: "string": limitWindowDuration must be at least 1s'
    ]
    assert problems(limit("0")) == [
        'spec.limitWindowDuration: Invalid value: "string": limitWindowDuration must be at least 1s'
    ]
    # As a real API server reads `format: duration` (checked against one): go-openapi's parser,
    # whose int64 sum wraps past Go's longest duration, to a negative one here.
    assert problems(limit("1d")) == problems(limit("2 weeks")) == problems(limit("10sec")) == []
    too_short = ['spec.limitWindowDuration: Invalid value: "string": limitWindowDuration must be at least 1s']
    assert problems(limit("-1s")) == problems(limit("3000000h")) == too_short
    assert problems(limit("2562047h47m16.854775808s")) == too_short
    assert problems(limit("abc")) == [
        'spec.limitWindowDuration: Invalid value: "abc": spec.limitWindowDuration in body must be of type duration: "abc"'
    ]
    found = [(s.kind, path, rule["rule"]) for s, path, rule in validation.rules() if s.kind == "PreemptionLimit"]
    assert found == [("PreemptionLimit", ".spec.limitWindowDuration", "self >= duration('1s')")]


# ---------------------------------------------------------------------------------------------
# The commands: exit 2, the file, the object, the API server's words
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["simulate", "explain", "lint"])
def test_commands_refuse_what_the_api_server_refuses(tmp_path: Path, command: str) -> None:
    path = tmp_path / "pc.yaml"
    path.write_text(yaml.safe_dump(config(numericLabels=[{"key": "k", "minValue": 5, "maxValue": 1}])))
    args = [command, str(path)] + (["--workload", "ns/w"] if command == "explain" else [])
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.output.strip() == (
        f'error: {path}: PreemptionConfig c: {SELECTOR}.numericLabels[0]: Invalid value: "object": '
        "minValue must be less than or equal to maxValue"
    )


def test_the_examples_are_valid() -> None:
    examples = Path(__file__).resolve().parents[2] / "examples"
    for path in sorted(examples.glob("**/*.yaml")):
        for body in yaml.safe_load_all(path.read_text()):
            if body is not None:
                assert problems(copy.deepcopy(body)) == [], path


def test_every_rule_case_of_test_crds_evaluates_the_same() -> None:
    """The passing and breaking values test_crds.py holds for every CEL rule of crds/ (checked there
    with cel-python) give the same answers here (transition rules aside)."""
    checked = 0
    for found in test_crds.RULES:
        case = test_crds.case_for(found)
        assert case is not None, found.id
        if validation.is_transition_rule(found.rule):
            continue
        for expected, bindings in ((True, case.passing), (False, case.breaking)):
            for binding in bindings:
                value = validation.cel_value(found.node, validation.defaulted(found.node, binding.self))
                assert validation.evaluate(found.rule, value) is expected, (found.id, binding.self)
                checked += 1
    assert checked >= 100
