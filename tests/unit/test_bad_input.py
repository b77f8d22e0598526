"""Bad values (issue 11): `simulate` exits 2 naming file, object and field, never with a
traceback; what Kueue allows (a count of 0, a name of 253 characters) simply works; annotations,
which no API server validates, never make the engine raise; and whatever parse_object accepts,
the engine can compute with.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from hypothesis import example, given
from hypothesis import strategies as st

from preemption_operator.api import duration
from preemption_operator.api.meta import LATEST_TIME
from preemption_operator.api.objects import ObjectError, parse_object
from preemption_operator.api.quantity import INT64_MAX, QUANTITY_PATTERN
from preemption_operator.cli import cli
from preemption_operator.engine import configurable, protection
from preemption_operator.engine.cache import Cache
from preemption_operator.engine.quota import QuotaNode
from preemption_operator.engine.workload import PRIORITY_BOOST_ANNOTATION, PriorityClassInfo, build_info, parse_boost

NOW = "2026-01-01T12:00:00Z"
NOW_TIME = datetime(2026, 1, 1, 12, tzinfo=UTC)
KUEUE = "kueue.x-k8s.io/v1beta2"
DELAY = protection.DELAY_ANNOTATION
TOLERATION = protection.TOLERATION_PREFIXES[0]
Doc = dict[str, Any]


# ---------------------------------------------------------------------------------------------
# A scenario: `old` (priority 0) holds all 4 cpu of ClusterQueue cq; `new` (priority 10) needs
# them. Classic preemption is off, so the PreemptionConfig's rule (numeric label `n`, compared
# LessThan with fallback 0, and a minimum execution time) is what takes `old`.
# ---------------------------------------------------------------------------------------------


def workload(name: str, priority: int, created: str, *, admitted: bool = False, labels: dict[str, str]) -> Doc:
    body: Doc = {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created, "labels": labels},
        "spec": {
            "queueName": "main",
            "priority": priority,
            "priorityClassRef": {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "low"},
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "4"}}}]}},
                }
            ],
        },
    }
    if admitted:
        reserved = "2026-01-01T10:01:00Z"
        body["status"] = {
            "conditions": [
                {"type": t, "status": "True", "reason": t, "message": "m", "lastTransitionTime": reserved}
                for t in ("QuotaReserved", "Admitted")
            ],
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [
                    {"name": "main", "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "4"}, "count": 1}
                ],
            },
        }
    return body


def scenario() -> list[Doc]:
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}},
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "default"}, "spec": {}},
        {
            "apiVersion": "kueue.x-k8s.io/v1alpha1",
            "kind": "PreemptionConfig",
            "metadata": {"name": "cfg"},
            "spec": {
                "rules": [
                    {
                        "name": "r",
                        "activationPolicy": {"trigger": "Always"},
                        "candidateSelectors": [
                            {
                                "scope": "WithinClusterQueue",
                                "minExecutionDuration": "1s",
                                "numericLabels": [{"key": "n", "comparison": "LessThan", "fallbackValue": 0}],
                            }
                        ],
                    }
                ]
            },
        },
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": "cq", "annotations": {"kueue.x-k8s.io/preemption-config-name": "cfg"}},
            "spec": {
                "cohortName": "org",
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": 4}]}],
                    }
                ],
            },
        },
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "main", "namespace": "ns"},
            "spec": {"clusterQueue": "cq"},
        },
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "low"}, "value": 0},
        workload("old", 0, "2026-01-01T10:00:00Z", admitted=True, labels={"n": "1"}),
        workload("new", 10, "2026-01-01T11:00:00Z", labels={"n": "5"}),
    ]


def find(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    return next(d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"]))


def quota(docs: list[Doc]) -> Doc:
    resource: Doc = find(docs, "ClusterQueue")["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    return resource


def pod_spec(docs: list[Doc], name: str = "new") -> Doc:
    spec: Doc = find(docs, "Workload", name)["spec"]["podSets"][0]["template"]["spec"]
    return spec


def requests(docs: list[Doc], name: str = "new") -> Doc:
    found: Doc = pod_spec(docs, name)["containers"][0]["resources"]["requests"]
    return found


def selector(docs: list[Doc]) -> Doc:
    found: Doc = find(docs, "PreemptionConfig")["spec"]["rules"][0]["candidateSelectors"][0]
    return found


def simulate(tmp_path: Path, docs: list[Doc], *args: str, command: str = "simulate") -> tuple[Result, Path]:
    path = tmp_path / "input.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    extra = ["--workload", "ns/new"] if command == "explain" else ["--output", "json"]
    return CliRunner().invoke(cli, [command, str(path), "--now", NOW, *extra, *args]), path


def edited(change: Callable[[list[Doc]], object]) -> list[Doc]:
    docs = scenario()
    change(docs)
    return docs


def actions(result: Result) -> list[tuple[str, str]]:
    assert result.exit_code == 0, result.output
    return [(a["action"], a["workload"]) for a in json.loads(result.output)["actions"]]


PREEMPTS = [("Preempted", "ns/old"), ("Pending", "ns/new"), ("Admitted", "ns/new"), ("Pending", "ns/old")]


def test_the_scenario_preempts_by_the_rule(tmp_path: Path) -> None:
    result, _ = simulate(tmp_path, scenario())
    assert actions(result) == PREEMPTS
    assert "preemption config cfg rule r" in result.output


# ---------------------------------------------------------------------------------------------
# Invalid input: exit 2, one line naming the file, the object and the field, no traceback
# ---------------------------------------------------------------------------------------------

TOO_LONG = "is longer than the longest duration, 2562047h47m16.854775807s (about 292 years)"
CPU_TOO_LARGE = (
    "is too large: the scheduler counts cpu in millicores as a 64-bit integer, so cpu can be at most "
    "9223372036854775807m"
)
QUOTA = "spec.resourceGroups[0].flavors[0].resources[0]"
REQUESTS = "spec.podSets[0].template.spec.containers[0].resources.requests"
SELECTOR = "spec.rules[0].candidateSelectors[0]"

INVALID: list[tuple[str, Callable[[list[Doc]], object], str]] = [
    # (case, change, "<object>: <field>: <message>" expected after the file name)
    ("minExecutionDuration 1e20 hours", lambda d: selector(d).update(minExecutionDuration="99999999999999999999h"),
     f'PreemptionConfig cfg: {SELECTOR}.minExecutionDuration: "99999999999999999999h" {TOO_LONG}'),
    ("maxExecutionDuration one hour past Go's limit", lambda d: selector(d).update(maxExecutionDuration="2562048h"),
     f'PreemptionConfig cfg: {SELECTOR}.maxExecutionDuration: "2562048h" {TOO_LONG}'),
    ("minTimeFromCreationDuration 1ns past Go's limit", lambda d: selector(d).update(minTimeFromCreationDuration="2562047h47m16.854775808s"),
     f'PreemptionConfig cfg: {SELECTOR}.minTimeFromCreationDuration: "2562047h47m16.854775808s" {TOO_LONG}'),
    ("maxTimeFromCreationDuration in seconds", lambda d: selector(d).update(maxTimeFromCreationDuration="9223372037s"),
     f'PreemptionConfig cfg: {SELECTOR}.maxTimeFromCreationDuration: "9223372037s" {TOO_LONG}'),
    ("minTriggerRequiredDuration 1e20 hours", lambda d: find(d, "PreemptionConfig")["spec"]["rules"][0]["activationPolicy"].update(minTriggerRequiredDuration="99999999999999999999h"),
     f'PreemptionConfig cfg: spec.rules[0].activationPolicy.minTriggerRequiredDuration: "99999999999999999999h" {TOO_LONG}'),
    ("duration not matching the pattern", lambda d: selector(d).update(minExecutionDuration="5 minutes"),
     f'PreemptionConfig cfg: {SELECTOR}.minExecutionDuration: "5 minutes" is not a duration such as 30s, 1m30s or 2h'),
    ("nominalQuota 1e1.5", lambda d: quota(d).update(nominalQuota="1e1.5"),
     f'ClusterQueue cq: {QUOTA}.nominalQuota: "1e1.5" is not a valid quantity: the exponent must be a whole number'),
    ("nominalQuota not a quantity", lambda d: quota(d).update(nominalQuota="lots"),
     f'ClusterQueue cq: {QUOTA}.nominalQuota: "lots" is not a valid quantity: write a number with an optional '
     "suffix, such as 2, 500m, 1.5Gi or 1e3"),
    ("nominalQuota -3", lambda d: quota(d).update(nominalQuota="-3"),
     f'ClusterQueue cq: {QUOTA}.nominalQuota: "-3" is negative: it must be zero or more'),
    ("nominalQuota integer -3", lambda d: quota(d).update(nominalQuota=-3),
     f"ClusterQueue cq: {QUOTA}.nominalQuota: -3 is negative: it must be zero or more"),
    ("borrowingLimit -1", lambda d: quota(d).update(borrowingLimit="-1"),
     f'ClusterQueue cq: {QUOTA}.borrowingLimit: "-1" is negative: it must be zero or more'),
    ("lendingLimit -500m", lambda d: quota(d).update(lendingLimit="-500m"),
     f'ClusterQueue cq: {QUOTA}.lendingLimit: "-500m" is negative: it must be zero or more'),
    ("nominalQuota 1e99999999999", lambda d: quota(d).update(nominalQuota="1e99999999999"),
     f'ClusterQueue cq: {QUOTA}.nominalQuota: "1e99999999999" {CPU_TOO_LARGE}'),
    ("nominalQuota one millicore past int64", lambda d: quota(d).update(nominalQuota="9223372036854775808m"),
     f'ClusterQueue cq: {QUOTA}.nominalQuota: "9223372036854775808m" {CPU_TOO_LARGE}'),
    ("borrowingLimit 1e18 cpu", lambda d: quota(d).update(borrowingLimit="1e18"),
     f'ClusterQueue cq: {QUOTA}.borrowingLimit: "1e18" {CPU_TOO_LARGE}'),
    ("memory quota 8Ei", lambda d: find(d, "ClusterQueue")["spec"]["resourceGroups"].append(
        {"coveredResources": ["memory"], "flavors": [{"name": "default", "resources": [{"name": "memory", "nominalQuota": "8Ei"}]}]}),
     'ClusterQueue cq: spec.resourceGroups[1].flavors[0].resources[0].nominalQuota: "8Ei" is too large: the scheduler '
     "counts memory in units as a 64-bit integer, so memory can be at most 9223372036854775807"),
    ("request -3", lambda d: requests(d).update(cpu="-3"),
     f'Workload ns/new: {REQUESTS}.cpu: "-3" is negative: it must be zero or more'),
    ("request -0", lambda d: requests(d).update(cpu="-0"),
     f'Workload ns/new: {REQUESTS}.cpu: "-0" is negative: it must be zero or more'),
    ("request 1e18 cpu", lambda d: requests(d).update(cpu="1e18"),
     f'Workload ns/new: {REQUESTS}.cpu: "1e18" {CPU_TOO_LARGE}'),
    ("request 1e1.5", lambda d: requests(d).update(cpu="1e1.5"),
     f'Workload ns/new: {REQUESTS}.cpu: "1e1.5" is not a valid quantity: the exponent must be a whole number'),
    ("extended resource too large", lambda d: requests(d).update({"example.com/gpu": "1e19"}),
     f'Workload ns/new: {REQUESTS}[example.com/gpu]: "1e19" is too large: the scheduler counts example.com/gpu in '
     "units as a 64-bit integer"),
    ("limit -1", lambda d: pod_spec(d)["containers"][0]["resources"].update(limits={"cpu": -1}),
     "Workload ns/new: spec.podSets[0].template.spec.containers[0].resources.limits.cpu: -1 is negative"),
    ("overhead 1e18 cpu", lambda d: pod_spec(d).update(overhead={"cpu": "1e18"}),
     f'Workload ns/new: spec.podSets[0].template.spec.overhead.cpu: "1e18" {CPU_TOO_LARGE}'),
    ("init container request -1", lambda d: pod_spec(d).update(initContainers=[{"name": "i", "resources": {"requests": {"cpu": "-1"}}}]),
     'Workload ns/new: spec.podSets[0].template.spec.initContainers[0].resources.requests.cpu: "-1" is negative'),
    ("admitted usage -4", lambda d: find(d, "Workload", "old")["status"]["admission"]["podSetAssignments"][0].update(resourceUsage={"cpu": "-4"}),
     'Workload ns/old: status.admission.podSetAssignments[0].resourceUsage.cpu: "-4" is negative'),
    ("admitted usage 1e18 cpu", lambda d: find(d, "Workload", "old")["status"]["admission"]["podSetAssignments"][0].update(resourceUsage={"cpu": "1e18"}),
     f'Workload ns/old: status.admission.podSetAssignments[0].resourceUsage.cpu: "1e18" {CPU_TOO_LARGE}'),
    ("one pod's requests add up past int64", lambda d: pod_spec(d).update(containers=[{"name": f"c{i}", "resources": {"requests": {"cpu": "5000000000000000"}}} for i in range(2)]),
     "Workload ns/new: spec.podSets[0].template.spec: one pod's cpu adds up to 10000000000000000000 millicores, "
     "more than 9223372036854775807"),
    ("count 1e9 of 1e10 millicores", lambda d: (find(d, "Workload", "new")["spec"]["podSets"][0].update(count=10**9), requests(d).update(cpu="10M")),
     "Workload ns/new: spec.podSets[0].count: 1000000000 pods of 10000000000 millicores of cpu each need "
     "10000000000000000000 in all, more than 9223372036854775807, the most the scheduler counts (a 64-bit integer)"),
    ("admitted count times requests past int64", lambda d: (requests(d, "old").update(cpu="5000000000000000"), find(d, "Workload", "old")["status"]["admission"]["podSetAssignments"][0].update(count=2), find(d, "Workload", "old")["status"]["admission"]["podSetAssignments"][0].pop("resourceUsage")),
     "Workload ns/old: status.admission.podSetAssignments[0].count: 2 pods of 5000000000000000000 millicores of cpu "
     "each need 10000000000000000000 in all, more than 9223372036854775807"),
    ("resourceUsage null", lambda d: find(d, "Workload", "old")["status"]["admission"]["podSetAssignments"][0].update(resourceUsage=[]),
     "Workload ns/old: status.admission.podSetAssignments[0].resourceUsage: [] is not an object (a mapping)"),
    ("count beyond int32", lambda d: find(d, "Workload", "new")["spec"]["podSets"][0].update(count=2**31),
     "Workload ns/new: spec.podSets[0].count: 2147483648 does not fit in a 32-bit integer (-2147483648 to 2147483647)"),
    ("count -1", lambda d: find(d, "Workload", "new")["spec"]["podSets"][0].update(count=-1),
     "Workload ns/new: spec.podSets[0].count: Input should be greater than or equal to 0, got -1"),
    ("priority 2^31", lambda d: find(d, "Workload", "new")["spec"].update(priority=2**31),
     "Workload ns/new: spec.priority: 2147483648 does not fit in a 32-bit integer (-2147483648 to 2147483647)"),
    ("priority -2^31-1", lambda d: find(d, "Workload", "new")["spec"].update(priority=-(2**31) - 1),
     "Workload ns/new: spec.priority: -2147483649 does not fit in a 32-bit integer (-2147483648 to 2147483647)"),
    ("priority 1e30", lambda d: find(d, "Workload", "new")["spec"].update(priority=10**30),
     "Workload ns/new: spec.priority: 1000000000000000000000000000000 does not fit in a 32-bit integer"),
    ("PriorityClass value 2^31", lambda d: find(d, "PriorityClass").update(value=2**31),
     "PriorityClass low: value: 2147483648 does not fit in a 32-bit integer (-2147483648 to 2147483647)"),
    ("WorkloadPriorityClass value -2^31-1", lambda d: d.append({"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": "w"}, "value": -(2**31) - 1}),
     "WorkloadPriorityClass w: value: -2147483649 does not fit in a 32-bit integer (-2147483648 to 2147483647)"),
    ("workload name of 254 characters", lambda d: find(d, "Workload", "new")["metadata"].update(name="a" * 254),
     "Workload ns/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...(254 characters): metadata.name: "
     '"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa..." (254 characters) is too long: at most 253 characters'),
    ("ClusterQueue name of 254 characters", lambda d: find(d, "ClusterQueue")["metadata"].update(name="q" * 254),
     "metadata.name: \"qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq...\" (254 characters) is too long: at most 253 characters"),
    ("namespace name of 64 characters", lambda d: find(d, "Namespace")["metadata"].update(name="n" * 64),
     'Namespace nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn: metadata.name: "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn..." (64 characters) is too long: at most 63 characters'),
    ("name not a DNS subdomain", lambda d: find(d, "Workload", "new")["metadata"].update(name="New_One"),
     'Workload ns/New_One: metadata.name: "New_One" is not a DNS subdomain: lowercase letters, digits, '
     "'-' and '.', starting and ending with a letter or digit"),
    ("no name", lambda d: find(d, "ResourceFlavor")["metadata"].pop("name"),
     "ResourceFlavor <unnamed>: metadata.name: required: every object needs a name"),
    ("creation time without a time zone", lambda d: find(d, "Workload", "new")["metadata"].update(creationTimestamp="2026-01-01T11:00:00"),
     'Workload ns/new: metadata.creationTimestamp: "2026-01-01T11:00:00" has no time zone: write an RFC 3339 time '
     "such as 2026-01-01T00:00:00Z"),
    ("creation time in the year 9999", lambda d: find(d, "Workload", "new")["metadata"].update(creationTimestamp="9999-12-31T23:59:59Z"),
     "Workload ns/new: metadata.creationTimestamp: 9999-12-31T23:59:59Z is too far in the future: durations of up to "
     "2562047h47m16.854775807s are added to times, so they must be before 9707-09-22T00:12:43Z"),
    ("condition time in the year 9999", lambda d: find(d, "Workload", "old")["status"]["conditions"][0].update(lastTransitionTime="9999-01-01T00:00:00Z"),
     "Workload ns/old: status.conditions[0].lastTransitionTime: 9999-01-01T00:00:00Z is too far in the future"),
    ("node allocatable -1", lambda d: d.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "-1"}}}),
     'Node n1: status.allocatable.cpu: "-1" is negative: it must be zero or more'),
    ("nine node labels", lambda d: find(d, "ResourceFlavor")["spec"].update(nodeLabels={f"l{i}": "v" for i in range(9)}),
     "ResourceFlavor default: spec.nodeLabels: 9 items are too many: at most 8"),
    ("rule name pattern", lambda d: find(d, "PreemptionConfig")["spec"]["rules"][0].update(name="Rule_1"),
     'PreemptionConfig cfg: spec.rules[0].name: "Rule_1" is not a DNS label: lowercase letters, digits and '
     "'-', starting and ending with a letter or digit"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "change", "expected"), INVALID, ids=[case for case, _, _ in INVALID])
def test_invalid_input_exits_2_naming_file_object_and_field(
    tmp_path: Path, case: str, change: Callable[[list[Doc]], object], expected: str
) -> None:
    result, path = simulate(tmp_path, edited(change))
    assert result.exit_code == 2, f"{case}: {result.output}"
    assert isinstance(result.exception, SystemExit), result.exception  # no traceback
    assert "Traceback" not in result.output
    assert result.output.startswith(f"error: {path}: "), result.output
    assert expected in result.output, result.output
    assert "[0-9]" not in result.output and "^(" not in result.output  # never a regular expression


def test_explain_reports_bad_input_the_same_way(tmp_path: Path) -> None:
    result, path = simulate(tmp_path, edited(lambda d: quota(d).update(nominalQuota="1e1.5")), command="explain")
    assert result.exit_code == 2, result.output
    assert f'error: {path}: ClusterQueue cq: {QUOTA}.nominalQuota: "1e1.5" is not a valid quantity' in result.output


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("9999-12-31T00:00:00Z", "is too far in the future: it must be before 9707-09-22T00:12:43Z"),
        ("yesterday", "is not an RFC 3339 time such as 2026-01-01T00:00:00Z"),
        ("0001-01-01T00:00:00+05:00", "is not an RFC 3339 time"),
    ],
)
def test_now_out_of_range_exits_2(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "input.yaml"
    path.write_text(yaml.safe_dump_all(scenario()))
    result = CliRunner().invoke(cli, ["simulate", str(path), "--now", text])
    assert result.exit_code == 2, result.output
    assert f"error: --now: {text!r} {message}" in result.output


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("value: " + "9" * 5000, "invalid YAML: a number has more than 4300 digits"),
        ("a: " + "[" * 5000 + "]" * 5000, "invalid YAML"),
        ("apiVersion: v1\nkind: List\nitems: 5\n", "document 1: items of a List must be a list"),
        ("apiVersion: v1\nkind: List\nitems: [5]\n", "document 1: items[0] is not a Kubernetes object"),
    ],
    ids=["5000-digit integer", "deep nesting", "items not a list", "item not a mapping"],
)
def test_unreadable_yaml_exits_2(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "input.yaml"
    path.write_text(content)
    result = CliRunner().invoke(cli, ["simulate", str(path)])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert f"error: {path}" in result.output and message in result.output, result.output


def test_kind_that_is_not_a_string_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "input.yaml"
    path.write_text("apiVersion: v1\nkind: [Namespace]\nmetadata: {name: x}\n")
    result = CliRunner().invoke(cli, ["simulate", str(path), "--output", "json"])
    assert result.exit_code == 0, result.output
    assert f"{path}: ['Namespace'] x (v1) is not read; skipped" in json.loads(result.output)["warnings"]


def test_binary_file_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "input.yaml"
    path.write_bytes(b"apiVersion: v1\n\xff\xfe")
    result = CliRunner().invoke(cli, ["simulate", str(path)])
    assert result.exit_code == 2, result.output
    assert f"error: {path}: not UTF-8 text (byte 16)" in result.output


# ---------------------------------------------------------------------------------------------
# Valid input at the limits: it works
# ---------------------------------------------------------------------------------------------


def test_count_0_is_admitted_and_takes_nothing(tmp_path: Path) -> None:
    """Kueue's CRD allows a count of 0 (minimum 0): such a pod set requests nothing, so it is
    admitted next to a full queue without preempting anyone."""
    docs = edited(lambda d: find(d, "Workload", "new")["spec"]["podSets"][0].update(count=0))
    result, _ = simulate(tmp_path, docs)
    assert actions(result) == [("Admitted", "ns/new")]


def test_count_1e9_is_valid_and_stays_pending(tmp_path: Path) -> None:
    docs = edited(
        lambda d: (find(d, "Workload", "new")["spec"]["podSets"][0].update(count=10**9), requests(d).update(cpu="1"))
    )
    result, _ = simulate(tmp_path, docs)
    assert actions(result) == [("Pending", "ns/new")]
    assert "previously considered podsets requests (0) + current podset request (1G) > maximum capacity (4)" in (
        result.output
    )


def test_largest_amounts_work(tmp_path: Path) -> None:
    """The largest quota Kueue can count, and a pod set whose total is exactly int64's maximum."""

    def change(docs: list[Doc]) -> None:
        quota(docs).update(nominalQuota="9223372036854775807m")
        requests(docs, "new").update(cpu="9223372036854775807m")

    result, _ = simulate(tmp_path, edited(change))
    assert ("Admitted", "ns/new") in actions(result)


@pytest.mark.parametrize("kind", ["Workload", "ClusterQueue"])
def test_names_of_253_characters_work(tmp_path: Path, kind: str) -> None:
    long = "a" * 253

    def change(docs: list[Doc]) -> None:
        if kind == "Workload":
            find(docs, "Workload", "new")["metadata"]["name"] = long
        else:
            find(docs, "ClusterQueue")["metadata"]["name"] = long
            find(docs, "LocalQueue")["spec"]["clusterQueue"] = long
            for wl in docs:
                if wl["kind"] == "Workload" and "status" in wl:
                    wl["status"]["admission"]["clusterQueue"] = long

    result, _ = simulate(tmp_path, edited(change))
    new = f"ns/{long}" if kind == "Workload" else "ns/new"
    assert actions(result) == [("Preempted", "ns/old"), ("Pending", new), ("Admitted", new), ("Pending", "ns/old")]


@pytest.mark.parametrize(
    "value", ["2562047h47m16.854775807s", "0", "1h", "1.5h", "1m30s", "500ms"], ids=lambda v: f"duration {v}"
)
def test_durations_up_to_go_limit_work(tmp_path: Path, value: str) -> None:
    docs = edited(
        lambda d: find(d, "PreemptionConfig")["spec"]["rules"][0]["activationPolicy"].update(
            minTriggerRequiredDuration=value
        )
    )
    result, _ = simulate(tmp_path, docs)
    assert actions(result)  # runs; the longest minimum simply never elapses


@pytest.mark.parametrize(
    ("annotations", "target", "warning"),
    [
        ({DELAY: "99999999999999999999h"}, "ClusterQueue",
         "ClusterQueue cq: preemption-operator.io/preemption-delay: '99999999999999999999h' is longer than "
         "2562047h47m16.854775807s, the longest duration; treated as 0"),
        ({DELAY: "1" * 5000 + "s"}, "ClusterQueue",
         "is longer than 2562047h47m16.854775807s, the longest duration; treated as 0"),
        ({TOLERATION + protection.TOLERATION_SECONDS: "9" * 5000}, "PriorityClass",
         "PriorityClass low: PreemptionToleration policy ignored: toleration-seconds '9999"),
        ({TOLERATION + protection.TOLERATION_SECONDS: "9223372036854775808"}, "PriorityClass",
         "toleration-seconds '9223372036854775808' does not fit in a 64-bit integer"),
        ({TOLERATION + protection.MIN_PREEMPTABLE: "2147483648"}, "PriorityClass",
         "minimum-preemptable-priority '2147483648' is not a 32-bit integer"),
    ],
    ids=["delay 1e20 hours", "delay of 5000 digits", "toleration of 5000 digits", "toleration past int64",
         "minimum past int32"],
)  # fmt: skip
def test_out_of_range_annotations_are_warnings(
    tmp_path: Path, annotations: dict[str, str], target: str, warning: str
) -> None:
    """Annotations are not validated by the API server: a bad one is reported and ignored."""
    docs = scenario()
    find(docs, target)["metadata"].setdefault("annotations", {}).update(annotations)
    result, _ = simulate(tmp_path, docs)
    assert actions(result) == PREEMPTS  # treated as unset
    warnings = json.loads(result.output)["warnings"]
    assert any(warning in w for w in warnings), warnings


# ---------------------------------------------------------------------------------------------
# Numeric labels (reference §2.7): a value that is not a base-10 int32 uses fallbackValue, and
# without one the workload is incomparable; never an error.
# ---------------------------------------------------------------------------------------------

NOT_INT32 = ["x", "", "5\n", " 5", "5 ", "1_0", "\u0663", "0x10", "1e3", "2147483648", "-2147483649", "9" * 5000]


@pytest.mark.parametrize("label", NOT_INT32, ids=repr)
def test_parse_int32_refuses_what_go_refuses(label: str) -> None:
    assert configurable.parse_int32(label) is None


@pytest.mark.parametrize(("label", "value"), [("5", 5), ("+5", 5), ("-5", -5), ("007", 7), ("0" * 5000 + "7", 7),
                                              ("2147483647", 2**31 - 1), ("-2147483648", -(2**31))])  # fmt: skip
def test_parse_int32_reads_what_go_reads(label: str, value: int) -> None:
    assert configurable.parse_int32(label) == value


def _infos(candidate_label: str, preemptor_label: str | None = "5") -> tuple[Any, Any]:
    old = workload("old", 0, "2026-01-01T10:00:00Z", admitted=True, labels={"n": candidate_label})
    new = workload("new", 10, "2026-01-01T11:00:00Z", labels={} if preemptor_label is None else {"n": preemptor_label})
    return build_info(parse_object(old), {}), build_info(parse_object(new), {})


def _matches(constraint: Doc, candidate_label: str, preemptor_label: str | None = "5") -> bool:
    config = copy.deepcopy(find(scenario(), "PreemptionConfig"))
    config["spec"]["rules"][0]["candidateSelectors"][0] = {"scope": "WithinClusterQueue", "numericLabels": [constraint]}
    spec = parse_object(config).rules[0].candidate_selectors[0]
    candidate, preemptor = _infos(candidate_label, preemptor_label)
    built = configurable.build_selector(0, spec, preemptor, NOW_TIME)
    return built.workload_matches(candidate) is None


@pytest.mark.parametrize("label", NOT_INT32, ids=repr)
def test_unparsable_label_uses_the_fallback(label: str) -> None:
    # Fallback 0 < preemptor's 5: matches; fallback 9: does not. The label itself plays no part.
    assert _matches({"key": "n", "comparison": "LessThan", "fallbackValue": 0}, label)
    assert not _matches({"key": "n", "comparison": "LessThan", "fallbackValue": 9}, label)
    assert not _matches({"key": "n", "fallbackValue": -1, "minValue": 0}, label)  # min/max bound the fallback too


@pytest.mark.parametrize("label", NOT_INT32, ids=repr)
def test_unparsable_label_without_fallback_never_matches(label: str) -> None:
    assert not _matches({"key": "n", "comparison": "LessThan"}, label)
    assert not _matches({"key": "n"}, label)  # the constraint only asks for an integer


def test_unparsable_preemptor_label_without_fallback_matches_nothing() -> None:
    assert _matches({"key": "n", "comparison": "LessThan"}, "1", "5")
    assert not _matches({"key": "n", "comparison": "LessThan"}, "1", "five")
    assert not _matches({"key": "n", "comparison": "LessThan"}, "1", None)


def test_unparsable_label_in_a_run(tmp_path: Path) -> None:
    """End to end: `old`'s label is not a number; the fallback 0 is below `new`'s 5, so it is taken."""
    docs = edited(lambda d: find(d, "Workload", "old")["metadata"]["labels"].update(n="9" * 5000))
    result, _ = simulate(tmp_path, docs)
    assert actions(result) == PREEMPTS


# ---------------------------------------------------------------------------------------------
# Properties: text parsers never raise; whatever parse_object accepts, the engine computes with
# ---------------------------------------------------------------------------------------------

_texts = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="0123456789.+-hmsuµn ", max_size=40),
    st.from_regex(duration.DURATION_PATTERN, fullmatch=True),
    st.builds(lambda digits, unit: digits + unit, st.text("0123456789", min_size=1, max_size=6000), st.sampled_from(["", "h", "s", "ns"])),
)  # fmt: skip


@pytest.mark.slow
@given(_texts)
def test_duration_parsers_never_raise(text: str) -> None:
    parsed = protection.parse_duration(text)
    assert parsed is None or timedelta(0) <= parsed <= duration.MAX_DURATION
    if parsed is not None:
        assert LATEST_TIME + parsed <= datetime.max.replace(tzinfo=UTC)  # what the time bound buys
    try:
        nanoseconds = duration.parse_nanoseconds(text.strip())  # annotations are read stripped
    except duration.DurationError:
        assert parsed is None
    else:
        assert 0 <= nanoseconds <= duration.MAX_NANOSECONDS
        assert parsed == timedelta(microseconds=nanoseconds // 1000)


@pytest.mark.slow
@given(_texts, _texts)
def test_annotation_parsers_never_raise(first: str, second: str) -> None:
    node = QuotaNode(name="cq", is_cluster_queue=True, annotations={DELAY: first, protection.POLICY_ANNOTATION: second})
    assert all(isinstance(p, str) for p in protection.annotation_problems(node))
    delay, _ = protection.preemption_delay(node)
    assert timedelta(0) <= delay <= duration.MAX_DURATION
    cls = PriorityClassInfo(
        "low",
        "PriorityClass",
        0,
        {TOLERATION + protection.MIN_PREEMPTABLE: first, TOLERATION + protection.TOLERATION_SECONDS: second},
    )
    policy, error = protection.toleration_of(cls)
    assert (policy is None) == (error is not None)
    assert all(isinstance(p, str) for p in protection.class_problems(cls))
    label = configurable.parse_int32(first)
    assert label is None or -(2**31) <= label <= 2**31 - 1
    assert -(2**31) <= parse_boost({PRIORITY_BOOST_ANNOTATION: first}) <= 2**31 - 1


@pytest.mark.slow
@given(_texts, _texts)
def test_protections_never_raise_on_annotated_classes(minimum: str, seconds: str) -> None:
    annotations = {
        TOLERATION + protection.MIN_PREEMPTABLE: minimum,
        TOLERATION + protection.TOLERATION_SECONDS: seconds,
    }
    cls = PriorityClassInfo("low", "PriorityClass", 0, annotations)
    old = build_info(
        parse_object(workload("old", 0, "2026-01-01T10:00:00Z", admitted=True, labels={})),
        {("PriorityClass", "low"): cls},
    )
    new = build_info(parse_object(workload("new", 10, "2026-01-01T11:00:00Z", labels={})), {})
    for now in (NOW_TIME, LATEST_TIME):
        reason = protection.tolerates(old, new, now)
        assert reason is None or isinstance(reason, str)
        ends = protection.toleration_ends(old, new, now)
        assert ends is None or ends > now


_quantities = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.from_regex(QUANTITY_PATTERN, fullmatch=True),
    st.sampled_from(["1e99999999999", "1e-99999999999", "1e1.5", "-0", "+1", "9223372036854775807m",
                     "9223372036854775.808", "8Ei", "7Ei", "1e999999999999999999999", ".5", "1.", "1E"]),
    st.text(max_size=12),
)  # fmt: skip
_counts = st.one_of(st.integers(min_value=-1, max_value=2**32), st.sampled_from([0, 1, 10**9, 2**31 - 1, 2**31]))
_resources = st.sampled_from(["cpu", "memory", "example.com/gpu"])


@pytest.mark.slow
@given(
    st.lists(st.tuples(_counts, st.dictionaries(_resources, _quantities, max_size=2)), min_size=1, max_size=3),
    st.dictionaries(_resources, _quantities, max_size=2),
    st.booleans(),
)
@example(
    [(10**9, {"cpu": "9223372036m", "memory": "8Gi"}), (0, {"cpu": "9223372036854775807m"})], {}, False
)  # valid, at the limits
@example([(2**31 - 1, {"cpu": "1", "example.com/gpu": 4})], {"cpu": "9223372036854775807m"}, True)
def test_parse_object_rejects_or_build_info_succeeds(
    pod_sets: list[tuple[int, dict[str, Any]]], usage: dict[str, Any], admitted: bool
) -> None:
    body = workload("w", 0, "2026-01-01T10:00:00Z", admitted=admitted, labels={})
    template = body["spec"]["podSets"][0]
    body["spec"]["podSets"] = [
        {**copy.deepcopy(template), "name": f"p{i}", "count": count} for i, (count, _) in enumerate(pod_sets)
    ]
    for ps, (_, wanted) in zip(body["spec"]["podSets"], pod_sets, strict=True):
        ps["template"]["spec"]["containers"][0]["resources"]["requests"] = wanted
    if admitted:
        body["status"]["admission"]["podSetAssignments"] = [
            {
                "name": ps["name"],
                "flavors": {"cpu": "default"},
                "count": ps["count"],
                **({"resourceUsage": usage} if i else {}),
            }
            for i, ps in enumerate(body["spec"]["podSets"])
        ]
    try:
        obj = parse_object(body)
    except ObjectError as exc:
        assert str(exc).startswith("Workload ns/w: ")
        return
    info = build_info(obj, {})
    for request in info.pod_sets:
        assert all(0 <= amount <= INT64_MAX for amount in request.per_pod.values())
        assert all(0 <= amount <= INT64_MAX for amount in request.total().values())
    for admitted_set in info.admitted_pod_sets:
        assert all(0 <= amount <= INT64_MAX for amount in admitted_set.usage.values())


@pytest.mark.slow
@given(st.dictionaries(st.sampled_from(["nominalQuota", "borrowingLimit", "lendingLimit"]), _quantities, min_size=1),
       _resources)  # fmt: skip
def test_parse_object_rejects_or_quotas_are_counted(fields: dict[str, Any], resource: str) -> None:
    docs = scenario()
    queue = find(docs, "ClusterQueue")
    queue["spec"]["resourceGroups"][0] = {
        "coveredResources": [resource],
        "flavors": [{"name": "default", "resources": [{"name": resource, "nominalQuota": 1, **fields}]}],
    }
    try:
        obj = parse_object(queue)
    except ObjectError as exc:
        assert str(exc).startswith("ClusterQueue cq: spec.resourceGroups[0].flavors[0].resources[0]")
        return
    cache = Cache()
    cache.load([obj])
    queue_info = cache.snapshot(NOW_TIME).cluster_queue("cq")
    assert queue_info is not None
    quotas = queue_info.node.quotas[("default", resource)]
    for amount in (quotas.nominal, quotas.borrowing_limit, quotas.lending_limit):
        assert amount is None or 0 <= amount <= INT64_MAX


_durations = st.one_of(
    st.from_regex(duration.DURATION_PATTERN, fullmatch=True).filter(lambda t: len(t) <= 64),
    st.sampled_from(["99999999999999999999h", "2562047h47m16.854775807s", "2562047h47m16.854775808s", "0"]),
)
_times = st.datetimes(min_value=datetime(1, 1, 2), timezones=st.just(UTC)).map(
    lambda t: t.isoformat().replace("+00:00", "Z")
)


@pytest.mark.slow
@given(st.dictionaries(st.sampled_from(["minExecutionDuration", "maxExecutionDuration", "minTimeFromCreationDuration",
                                        "maxTimeFromCreationDuration"]), _durations),
       _durations, _times, _times)  # fmt: skip
def test_parse_object_rejects_or_selectors_evaluate(
    bounds: dict[str, str], trigger: str, created: str, reserved: str
) -> None:
    config = copy.deepcopy(find(scenario(), "PreemptionConfig"))
    rule = config["spec"]["rules"][0]
    rule["activationPolicy"]["minTriggerRequiredDuration"] = trigger
    rule["candidateSelectors"][0].update(
        bounds, executionTimeRelation="LessThan", timeFromCreationRelation="GreaterThan"
    )
    candidate = workload("old", 0, created, admitted=True, labels={"n": "1"})
    for condition in candidate["status"]["conditions"]:
        condition["lastTransitionTime"] = reserved
    try:
        parsed = [parse_object(body) for body in (config, candidate, workload("new", 1, created, labels={}))]
    except ObjectError:
        return
    cfg, old, new = parsed
    old_info, new_info = build_info(old, {}), build_info(new, {})
    required = protection.parse_duration(cfg.rules[0].activation_policy.min_trigger_required_duration)
    assert required is not None
    assert protection.pending_since(new_info) + required  # what _not_yet_active computes
    for now in (NOW_TIME, LATEST_TIME):
        built = configurable.build_selector(0, cfg.rules[0].candidate_selectors[0], new_info, now)
        assert built.workload_matches(old_info) in (None, *[name for name, _ in built.tests])
