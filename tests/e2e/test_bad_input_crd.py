"""Bad values on a real API server (issue 11): which ones the CRDs reject, with the server's
message, and which ones the server stores, so that parse_object (the engine's safety net) must
reject them when they come back from a watch, naming the object and the field.

The CRDs reject negative quotas, requests and usage (a pattern without a leading minus for
strings, `minimum: 0` for integers), int32 fields beyond 2147483647, and names longer than 253
characters (the API server's own check). They cannot reject what Kubernetes' quantity pattern
admits but apimachinery cannot parse ("1e1.5"), amounts beyond int64, or durations beyond Go's
~292 years (the duration pattern has no bound).
"""

from __future__ import annotations

import copy
import json
import secrets
from typing import Any

import pytest

from preemption_operator.api.objects import ObjectError, parse_object
from preemption_operator.testing.control_plane import ControlPlane

KUEUE = "kueue.x-k8s.io/v1beta2"


# Not tests/builders.py's builders: those write quantities as strings, and these hand every value
# to the server as given (an integer -3 and a string "-3" fail with different messages), under a
# random name so that every case creates a new object.
def cluster_queue(nominal: Any = 4, **resource: Any) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": f"bad-input-{secrets.token_hex(4)}"},
        "spec": {
            "cohortName": "org",
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {"name": "default", "resources": [{"name": "cpu", "nominalQuota": nominal, **resource}]}
                    ],
                }
            ],
        },
    }


def workload(namespace: str, *, cpu: Any = "1", count: int = 1, name: str | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {"name": name or f"bad-input-{secrets.token_hex(4)}", "namespace": namespace},
        "spec": {
            "queueName": "main",
            "podSets": [
                {
                    "name": "main",
                    "count": count,
                    "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}},
                }
            ],
            **spec,
        },
    }


def preemption_config(**selector: Any) -> dict[str, Any]:
    activation = selector.pop("activation", {})
    return {
        "apiVersion": "kueue.x-k8s.io/v1alpha1",
        "kind": "PreemptionConfig",
        "metadata": {"name": f"bad-input-{secrets.token_hex(4)}"},
        "spec": {
            "rules": [
                {
                    "name": "r",
                    "activationPolicy": {"trigger": "Always", **activation},
                    "candidateSelectors": [{"scope": "WithinClusterQueue", **selector}],
                }
            ]
        },
    }


def create(cluster: ControlPlane, body: dict[str, Any]) -> tuple[int, str]:
    proc = cluster.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(body))
    return proc.returncode, proc.stdout + proc.stderr


def stored(cluster: ControlPlane, body: dict[str, Any]) -> dict[str, Any]:
    meta = body["metadata"]
    where = ["-n", meta["namespace"]] if meta.get("namespace") else []
    resource = f"{body['kind'].lower()}s.kueue.x-k8s.io"
    proc = cluster.kubectl("get", resource, meta["name"], *where, "-o", "json", check=True)
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _quota(**fields: Any) -> Any:
    return lambda ns: cluster_queue(**fields)


QUOTA_PATH = "spec.resourceGroups[0].flavors[0].resources[0]"
REQUEST_PATH = "spec.podSets[0].template.spec.containers[0].resources.requests.cpu"
PATTERN_MISMATCH = "in body should match"  # the server shows the pattern; the engine never does


def _uncovered(namespace: str) -> dict[str, Any]:
    """A quota for gpu where coveredResources says memory (issue 15: refused up front)."""
    body = cluster_queue()
    group = body["spec"]["resourceGroups"][0]
    group["coveredResources"] = ["cpu", "memory"]
    group["flavors"][0]["resources"].append({"name": "gpu", "nominalQuota": 1})
    return body


REJECTED_BY_SERVER = [
    pytest.param(
        _uncovered,
        [
            "spec.resourceGroups[0]: Invalid value:",
            "each flavor's resources must match the name in coveredResources, in order",
        ],
        id="quota-for-an-uncovered-resource",
    ),
    pytest.param(
        _quota(nominal="-3"),
        [f'{QUOTA_PATH}.nominalQuota: Invalid value: "-3"', PATTERN_MISMATCH],
        id="negative-quota-string",
    ),
    pytest.param(
        _quota(nominal=-3),
        [f"{QUOTA_PATH}.nominalQuota: Invalid value: -3", "should be greater than or equal to 0"],
        id="negative-quota-integer",
    ),
    pytest.param(
        _quota(borrowingLimit="-1"),
        [f'{QUOTA_PATH}.borrowingLimit: Invalid value: "-1"', PATTERN_MISMATCH],
        id="negative-borrowing-limit",
    ),
    pytest.param(
        _quota(lendingLimit=-2),
        [f"{QUOTA_PATH}.lendingLimit: Invalid value: -2", "should be greater than or equal to 0"],
        id="negative-lending-limit",
    ),
    pytest.param(
        lambda ns: workload(ns, cpu="-3"),
        [f'{REQUEST_PATH}: Invalid value: "-3"', PATTERN_MISMATCH],
        id="negative-request",
    ),
    pytest.param(
        lambda ns: workload(ns, cpu="-0"),
        [f'{REQUEST_PATH}: Invalid value: "-0"', PATTERN_MISMATCH],
        id="minus-zero-request",
    ),
    pytest.param(
        lambda ns: workload(ns, count=2**31),
        ["spec.podSets[0].count: Invalid value: 2147483648", "should be less than or equal to 2147483647"],
        id="count-beyond-int32",
    ),
    pytest.param(
        lambda ns: workload(ns, priority=2**31),
        ["spec.priority: Invalid value: 2147483648", "should be less than or equal to 2147483647"],
        id="priority-beyond-int32",
    ),
    pytest.param(
        lambda ns: workload(ns, priority=-(2**31) - 1),
        ["spec.priority: Invalid value: -2147483649", "should be greater than or equal to -2147483648"],
        id="priority-below-int32",
    ),
    pytest.param(
        lambda ns: workload(ns, name="a" * 254),
        ["metadata.name: Invalid value:", "must be no more than 253 characters"],
        id="name-254",
    ),
    pytest.param(
        # With both bounds set, the min <= max rule calls duration() on each: an overflowing one
        # fails to convert, and the server rejects the object with the rule's message.
        lambda ns: preemption_config(minExecutionDuration="99999999999999999999h", maxExecutionDuration="1h"),
        ["type conversion error", "google.protobuf.Duration", "minExecutionDuration must be less than or equal"],
        id="overlong-duration-with-its-bound",
    ),
]


@pytest.mark.parametrize(("build", "messages"), REJECTED_BY_SERVER)
def test_server_rejects(cluster: ControlPlane, namespace: str, build: Any, messages: list[str]) -> None:
    body = build(namespace)
    code, output = create(cluster, body)
    assert code != 0, f"the API server accepted {json.dumps(body['spec'])[:300]}"
    assert f'The {body["kind"]} "' in output and "is invalid" in output, output
    for message in messages:
        assert message in output, output


ENGINE_REJECTS = [
    pytest.param(
        _quota(nominal="1e1.5"),
        f'ClusterQueue {{name}}: {QUOTA_PATH}.nominalQuota: "1e1.5" is not a valid quantity: '
        "the exponent must be a whole number",
        id="fractional-exponent-quota",
    ),
    pytest.param(
        _quota(nominal="1e99999999999"),
        f'ClusterQueue {{name}}: {QUOTA_PATH}.nominalQuota: "1e99999999999" is too large: the scheduler '
        "counts cpu in millicores as a 64-bit integer, so cpu can be at most 9223372036854775807m",
        id="quota-beyond-int64",
    ),
    pytest.param(
        lambda ns: workload(ns, cpu="1e18"),
        f'Workload {{namespace}}/{{name}}: {REQUEST_PATH}: "1e18" is too large: the scheduler counts cpu in '
        "millicores as a 64-bit integer, so cpu can be at most 9223372036854775807m",
        id="request-1e18-cpu",
    ),
    pytest.param(
        lambda ns: workload(ns, cpu="1e1.5"),
        f'Workload {{namespace}}/{{name}}: {REQUEST_PATH}: "1e1.5" is not a valid quantity: '
        "the exponent must be a whole number",
        id="fractional-exponent-request",
    ),
    pytest.param(
        lambda ns: workload(ns, cpu="10M", count=10**9),
        "Workload {namespace}/{name}: spec.podSets[0].count: 1000000000 pods of 10000000000 millicores of cpu "
        "each need 10000000000000000000 in all, more than 9223372036854775807, the most the scheduler counts",
        id="count-times-request-beyond-int64",
    ),
    pytest.param(
        lambda ns: preemption_config(minExecutionDuration="99999999999999999999h"),
        "PreemptionConfig {name}: spec.rules[0].candidateSelectors[0].minExecutionDuration: "
        '"99999999999999999999h" is longer than the longest duration, 2562047h47m16.854775807s (about 292 years)',
        id="overlong-execution-duration",
    ),
    pytest.param(
        lambda ns: preemption_config(activation={"minTriggerRequiredDuration": "2562048h"}),
        "PreemptionConfig {name}: spec.rules[0].activationPolicy.minTriggerRequiredDuration: "
        '"2562048h" is longer than the longest duration',
        id="overlong-trigger-duration",
    ),
]


@pytest.mark.parametrize(("build", "message"), ENGINE_REJECTS)
def test_server_stores_what_the_engine_rejects(cluster: ControlPlane, namespace: str, build: Any, message: str) -> None:
    body = build(namespace)
    code, output = create(cluster, body)
    assert code == 0, output
    got = stored(cluster, body)
    with pytest.raises(ObjectError) as raised:
        parse_object(got)
    expected = message.format(name=body["metadata"]["name"], namespace=namespace)
    assert expected in str(raised.value)


ACCEPTED = [
    pytest.param(_quota(nominal=0), id="zero-quota"),
    pytest.param(_quota(nominal="+1", borrowingLimit="1e-3", lendingLimit="500m"), id="signed-and-exponent-quota"),
    pytest.param(_quota(nominal="9223372036854775807m"), id="largest-cpu-quota"),
    pytest.param(lambda ns: workload(ns, count=0), id="count-0"),
    pytest.param(lambda ns: workload(ns, count=10**9), id="count-1e9"),
    pytest.param(lambda ns: workload(ns, count=2**31 - 1, cpu="1m"), id="count-int32-max"),
    pytest.param(lambda ns: workload(ns, priority=2**31 - 1), id="priority-int32-max"),
    pytest.param(lambda ns: workload(ns, name="a" * 253), id="name-253"),
    pytest.param(
        lambda ns: preemption_config(
            minExecutionDuration="2562047h47m16.854775807s", activation={"minTriggerRequiredDuration": "0"}
        ),
        id="longest-duration",
    ),
]


@pytest.mark.parametrize("build", ACCEPTED)
def test_both_accept(cluster: ControlPlane, namespace: str, build: Any) -> None:
    body = build(namespace)
    code, output = create(cluster, body)
    assert code == 0, output
    parsed = parse_object(stored(cluster, body))
    assert parsed.name == body["metadata"]["name"]


def test_negative_usage_in_status_is_rejected(cluster: ControlPlane, namespace: str) -> None:
    """Admission usage is written through the status subresource: the same rule holds there."""
    body = workload(namespace)
    code, output = create(cluster, body)
    assert code == 0, output
    status: dict[str, Any] = {
        "admission": {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {"name": "main", "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "-1"}, "count": 1}
            ],
        }
    }
    patch = json.dumps({"status": status})
    name = body["metadata"]["name"]
    proc = cluster.kubectl(
        "patch", "workloads.kueue.x-k8s.io", name, "-n", namespace, "--subresource=status", "--type=merge", "-p", patch
    )
    assert proc.returncode != 0, proc.stdout
    assert 'status.admission.podSetAssignments[0].resourceUsage.cpu: Invalid value: "-1"' in proc.stderr, proc.stderr
    ok = copy.deepcopy(status)
    ok["admission"]["podSetAssignments"][0]["resourceUsage"]["cpu"] = "1"
    proc = cluster.kubectl(
        "patch",
        "workloads.kueue.x-k8s.io",
        name,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": ok}),
    )
    assert proc.returncode == 0, proc.stderr
