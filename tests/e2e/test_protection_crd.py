"""The PreemptionConfig fields of issue 7 (the `quota` selector, the time-based selectors,
activationPolicy.preemptorQuota and minTriggerRequiredDuration) on a real API server: invalid
values are rejected with the CRD's messages (OpenAPI enum and pattern, CEL rules), a config
using every new field is accepted, and the defaults are filled in by the server.
"""

from __future__ import annotations

import copy
import json
import secrets
from typing import Any

import pytest

from preemption_operator.testing.control_plane import ControlPlane

API_VERSION = "kueue.x-k8s.io/v1alpha1"
RESOURCE = "preemptionconfigs.kueue.x-k8s.io"

FULL_SELECTOR: dict[str, Any] = {
    "scope": "WithinCohortTree",
    "quota": "KeepsNominalQuota",
    "priority": {"mode": "Boosted", "comparison": "LessThanOrEqual"},
    "minExecutionDuration": "10m",
    "maxExecutionDuration": "1.5h",
    "executionTimeRelation": "LessThan",
    "minTimeFromCreationDuration": "90m",
    "maxTimeFromCreationDuration": "1.5h",  # equal to the minimum: allowed
    "timeFromCreationRelation": "GreaterThanOrEqual",
}


def config(selector: dict[str, Any] | None = None, **activation: Any) -> dict[str, Any]:
    """A PreemptionConfig with one rule and one selector (FULL_SELECTOR unless given)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "PreemptionConfig",
        "metadata": {"name": f"protection-{secrets.token_hex(4)}"},
        "spec": {
            "rules": [
                {
                    "name": "guarantee",
                    "activationPolicy": {"trigger": "InsufficientQuota", **activation},
                    "candidateSelectors": [copy.deepcopy(FULL_SELECTOR if selector is None else selector)],
                }
            ]
        },
    }


def with_fields(**fields: Any) -> dict[str, Any]:
    """A selector with scope WithinCohortTree and `fields` (a value None drops the field)."""
    selector: dict[str, Any] = {"scope": "WithinCohortTree", **fields}
    return {k: v for k, v in selector.items() if v is not None}


def create(cluster: ControlPlane, body: dict[str, Any]) -> tuple[int, str]:
    proc = cluster.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(body))
    return proc.returncode, proc.stdout + proc.stderr


def get(cluster: ControlPlane, name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(cluster.kubectl("get", RESOURCE, name, "-o", "json", check=True).stdout)
    return result


INVALID = [
    pytest.param(
        config(with_fields(scope="WithinClusterQueue", quota="KeepsNominalQuota")),
        ["quota cannot be used with scope WithinLocalQueue or WithinClusterQueue"],
        id="quota-with-WithinClusterQueue",
    ),
    pytest.param(
        config(with_fields(scope="WithinLocalQueue", quota="BorrowingCapacityFromPreemptor")),
        ["quota cannot be used with scope WithinLocalQueue or WithinClusterQueue"],
        id="quota-with-WithinLocalQueue",
    ),
    *(
        pytest.param(
            config(with_fields(scope="WithinClusterQueue", quota=value)),
            ["quota cannot be used with scope WithinLocalQueue or WithinClusterQueue"],
            id=f"quota-{value}-with-WithinClusterQueue",
        )
        for value in ("DRSLessThanOrEqualToFinalShare", "DRSLessThanInitialShare", "DRSAllStrategies")
    ),
    pytest.param(
        config(with_fields(quota="KeepsGuarantee")),
        ['Unsupported value: "KeepsGuarantee"', '"BorrowingCapacityFromPreemptor"', '"KeepsNominalQuota"'],
        id="quota-unknown",
    ),
    pytest.param(
        config(with_fields(minExecutionDuration="2h", maxExecutionDuration="90m")),
        ["minExecutionDuration must be less than or equal to maxExecutionDuration"],
        id="execution-min-above-max",
    ),
    pytest.param(
        config(with_fields(minTimeFromCreationDuration="1h0m1s", maxTimeFromCreationDuration="1h")),
        ["minTimeFromCreationDuration must be less than or equal to maxTimeFromCreationDuration"],
        id="creation-min-above-max",
    ),
    pytest.param(
        config(with_fields(minExecutionDuration="5 minutes")),
        ["minExecutionDuration", 'Invalid value: "5 minutes"', "should match"],
        id="malformed-execution-duration",
    ),
    pytest.param(
        config(with_fields(maxTimeFromCreationDuration="1d")),
        ["maxTimeFromCreationDuration", 'Invalid value: "1d"', "should match"],
        id="malformed-creation-duration",
    ),
    pytest.param(
        config(with_fields(), minTriggerRequiredDuration="-30s"),
        ["minTriggerRequiredDuration", 'Invalid value: "-30s"', "should match"],
        id="malformed-trigger-duration",
    ),
    pytest.param(
        config(with_fields(), preemptorQuota="WithinGuarantee"),
        ['Unsupported value: "WithinGuarantee"', '"Any"', '"WithinNominalQuota"'],
        id="preemptorQuota-unknown",
    ),
    pytest.param(
        config(with_fields(executionTimeRelation="Before")),
        ['Unsupported value: "Before"', '"LessThan"'],
        id="executionTimeRelation-unknown",
    ),
]


@pytest.mark.parametrize(("body", "messages"), INVALID)
def test_invalid_protection_fields_are_rejected(
    cluster: ControlPlane, body: dict[str, Any], messages: list[str]
) -> None:
    code, output = create(cluster, body)
    assert code != 0, f"the API server accepted {json.dumps(body['spec'])}"
    assert f'The PreemptionConfig "{body["metadata"]["name"]}" is invalid' in output, output
    for message in messages:
        assert message in output, output
    missing = cluster.kubectl("get", RESOURCE, body["metadata"]["name"])
    assert missing.returncode != 0  # nothing was stored


def test_config_with_every_new_field_is_accepted(cluster: ControlPlane) -> None:
    body = config(preemptorQuota="WithinNominalQuota", minTriggerRequiredDuration="1m30s")
    code, output = create(cluster, body)
    assert code == 0, output
    stored = get(cluster, body["metadata"]["name"])
    (rule,) = stored["spec"]["rules"]
    assert rule["activationPolicy"] == {
        "trigger": "InsufficientQuota",
        "preemptorQuota": "WithinNominalQuota",
        "minTriggerRequiredDuration": "1m30s",
    }
    assert rule["candidateSelectors"] == [FULL_SELECTOR]


def test_server_fills_in_the_activation_defaults(cluster: ControlPlane) -> None:
    body = config(with_fields(quota="BorrowingCapacityFromPreemptor"))
    code, output = create(cluster, body)
    assert code == 0, output
    (rule,) = get(cluster, body["metadata"]["name"])["spec"]["rules"]
    assert rule["activationPolicy"] == {
        "trigger": "InsufficientQuota",
        "preemptorQuota": "Any",
        "minTriggerRequiredDuration": "0s",
    }


@pytest.mark.parametrize(
    "fields",
    [
        {"scope": "AnyClusterQueue", "quota": "BorrowingCapacityFromPreemptor"},
        {"scope": "WithinParentCohort", "quota": "KeepsNominalQuota"},
        {"scope": "WithinClusterQueue", "minExecutionDuration": "0", "maxExecutionDuration": "500ms"},
        {"scope": "WithinLocalQueue", "timeFromCreationRelation": "LessThan", "executionTimeRelation": "GreaterThan"},
        {"scope": "WithinCohortTree", "minTimeFromCreationDuration": "1h", "maxTimeFromCreationDuration": "2h45m"},
        # The DRS values (used with fair sharing on) with a cohort-wide scope.
        {"scope": "WithinCohortTree", "quota": "DRSLessThanOrEqualToFinalShare"},
        {"scope": "WithinParentCohort", "quota": "DRSLessThanInitialShare"},
        {"scope": "AnyClusterQueue", "quota": "DRSAllStrategies"},
    ],
    ids=["any-borrowing", "parent-keeps", "zero-to-500ms", "relations", "hours", "drs-final", "drs-initial", "drs-all"],
)
def test_valid_combinations_are_accepted(cluster: ControlPlane, fields: dict[str, Any]) -> None:
    code, output = create(cluster, config(fields))
    assert code == 0, output


def test_update_to_an_invalid_value_is_rejected(cluster: ControlPlane) -> None:
    body = config()
    code, output = create(cluster, body)
    assert code == 0, output
    name = body["metadata"]["name"]
    patch = json.dumps(
        [
            {"op": "replace", "path": "/spec/rules/0/candidateSelectors/0/scope", "value": "WithinClusterQueue"},
            {"op": "replace", "path": "/spec/rules/0/candidateSelectors/0/quota", "value": "DRSAllStrategies"},
        ]
    )
    proc = cluster.kubectl("patch", RESOURCE, name, "--type=json", "-p", patch)
    assert proc.returncode != 0
    assert "quota cannot be used with scope WithinLocalQueue or WithinClusterQueue" in proc.stderr, proc.stderr
    assert get(cluster, name)["spec"]["rules"][0]["candidateSelectors"][0]["quota"] == "KeepsNominalQuota"
