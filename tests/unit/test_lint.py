"""Issue 16 (first part): `lint` finds missing references, unused configs, selectors that do not
build and rules keyed on what namespace users can write; exit codes 0 / 1 / 2; the JSON contract;
and the flapping proof (tests/unit/test_flapping.py has the analysis itself, and
tests/unit/test_lint_rules.py the checks of unreachable selectors, shadowed rules and
contradictory protections)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from preemption_operator.cli import cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QUEUE = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: research, annotations: {kueue.x-k8s.io/preemption-config-name: CONFIG}}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: ["cpu"]
    flavors:
    - name: default
      resources:
      - {name: cpu, nominalQuota: 4}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
"""
CONFIG = """
apiVersion: kueue.x-k8s.io/v1alpha1
kind: PreemptionConfig
metadata: {name: NAME}
spec:
  rules:
  - name: r
    activationPolicy: {trigger: InsufficientQuota}
    PREEMPTOR
    candidateSelectors:
    - scope: WithinCohortTree
      priority: {mode: MODE, comparison: LessThan}
"""


def lint(tmp_path: Path, text: str, *args: str) -> Result:
    (tmp_path / "setup.yaml").write_text(text)
    return CliRunner().invoke(cli, ["lint", str(tmp_path), *args])


def config(name: str, mode: str = "Base", preemptor: str = "") -> str:
    return CONFIG.replace("NAME", name).replace("MODE", mode).replace("    PREEMPTOR\n", preemptor)


def test_the_examples_have_no_errors() -> None:
    """All but the one that shows a flap on purpose (tests/unit/test_flapping.py runs that one)."""
    for folder in sorted(p for p in EXAMPLES.iterdir() if p.is_dir() and p.name != "flapping-rules"):
        result = CliRunner().invoke(cli, ["lint", str(folder)])
        assert result.exit_code == 0, (folder.name, result.output)
        assert "flapping: no two or three workloads can evict each other in turn (proof below)" in result.output
        assert "quantified over:" in result.output and "not modelled:" in result.output


def test_a_missing_config_is_an_error_and_exits_1(tmp_path: Path) -> None:
    result = lint(tmp_path, QUEUE.replace("CONFIG", "ghost"))
    assert result.exit_code == 1
    assert (
        "error   MissingReference: ClusterQueue research names PreemptionConfig ghost, which does not exist "
        "(kueue.x-k8s.io/preemption-config-name): only classic preemption applies [ClusterQueue/research]"
    ) in result.output


def test_an_unused_config_is_info_and_fails_only_when_asked(tmp_path: Path) -> None:
    text = QUEUE.replace("CONFIG", "used") + "---\n" + config("used") + "---\n" + config("spare")
    result = lint(tmp_path, text)
    assert result.exit_code == 0, result.output
    assert "info    UnusedPreemptionConfig: no ClusterQueue uses PreemptionConfig spare" in result.output
    assert lint(tmp_path, text, "--fail-on", "info").exit_code == 1


def test_user_writable_keys_are_warnings(tmp_path: Path) -> None:
    preemptor = "    preemptorSelector: {matchLabels: {team: hero}}\n"
    text = QUEUE.replace("CONFIG", "c") + "---\n" + config("c", mode="Boosted", preemptor=preemptor)
    result = lint(tmp_path, text, "--output", "json")
    assert result.exit_code == 0
    findings = json.loads(result.output)["findings"]
    assert [(f["code"], f["severity"]) for f in findings] == [("UserWritableKey", "warning")] * 2
    assert "preemptorSelector matches Workload (and Job) labels" in findings[0]["message"]
    assert "priority mode Boosted adds the kueue.x-k8s.io/priority-boost annotation" in findings[1]["message"]
    assert lint(tmp_path, text, "--fail-on", "warning").exit_code == 1


def test_the_json_contract(tmp_path: Path) -> None:
    result = lint(tmp_path, QUEUE.replace("CONFIG", "ghost"), "--output", "json")
    data = json.loads(result.output)
    assert set(data) == {"findings", "checks", "notChecked", "proof"}
    assert "FlappingPair" in data["checks"] and data["notChecked"] == []
    assert {"UnreachableSelector", "ShadowedRule", "ContradictoryProtection"} <= set(data["checks"])
    proof = data["proof"]
    assert proof["clusterQueues"] == 1 and proof["flapFree"] is True
    assert {"effectivePriorities", "labels", "quotaStates", "time", "notModelled", "engineCycles"} <= set(proof)
    (finding,) = data["findings"]
    assert set(finding) == {"code", "severity", "message", "objects", "witness"}
    assert finding["objects"] == ["ClusterQueue/research"] and finding["witness"] is None


def test_an_unreachable_selector_is_a_warning_and_nothing_is_left_unchecked(tmp_path: Path) -> None:
    preemptor = "    preemptorPriorityClassSelector: {matchNames: [a], notMatchNames: [a]}\n"
    text = QUEUE.replace("CONFIG", "c") + "---\n" + config("c", preemptor=preemptor)
    result = lint(tmp_path, text)
    assert result.exit_code == 0, result.output
    assert (
        "warning UnreachableSelector: PreemptionConfig c rule r preemptorPriorityClassSelector: notMatchNames "
        "excludes every name in matchNames (a): the rule never applies"
    ) in result.output
    assert "not checked yet" not in result.output
    assert lint(tmp_path, text, "--fail-on", "warning").exit_code == 1


def test_bad_input_exits_2(tmp_path: Path) -> None:
    assert lint(tmp_path, "a: [\n").exit_code == 2


def _findings(tmp_path: Path, text: str, code: str) -> list[dict[str, object]]:
    result = lint(tmp_path, text, "--output", "json")
    return [f for f in json.loads(result.output)["findings"] if f["code"] == code]


def test_class_names_that_match_nothing_are_missing_references(tmp_path: Path) -> None:
    """Issue 29: a candidate's priority.matchNames naming no class of the setup can never match."""
    text = (
        QUEUE.replace("CONFIG", "c")
        + "---\n"
        + config("c").replace(
            "priority: {mode: Base, comparison: LessThan}",
            "priority: {matchNames: [no-such-class], notMatchNames: [gone]}",
        )
    )
    messages = [f["message"] for f in _findings(tmp_path, text, "MissingReference")]
    assert messages == [
        "PreemptionConfig c rule r candidateSelectors[0]: priority.matchNames names no-such-class, which is neither a "
        "WorkloadPriorityClass nor a PriorityClass here: no candidate of the setup's classes has it, and no other "
        "name is listed: the selector selects nothing",
        "PreemptionConfig c rule r candidateSelectors[0]: priority.notMatchNames names gone, which is neither a "
        "WorkloadPriorityClass nor a PriorityClass here: it excludes nothing",
    ]
    # Once the class exists, nothing is said; a second name that exists leaves the selector something.
    klass = "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\nmetadata: {name: NAME}\nvalue: 1\n"
    both = text + klass.replace("NAME", "no-such-class") + klass.replace("NAME", "gone")
    assert _findings(tmp_path, both, "MissingReference") == []
    partly = text.replace("[no-such-class]", "[no-such-class, real]") + klass.replace("NAME", "real")
    (first, _) = _findings(tmp_path, partly, "MissingReference")
    assert str(first["message"]).endswith("no candidate of the setup's classes has it")
    preemptor = "    preemptorPriorityClassSelector: {notMatchNames: [ghost]}\n"
    (finding,) = _findings(
        tmp_path, QUEUE.replace("CONFIG", "c") + "---\n" + config("c", preemptor=preemptor), "MissingReference"
    )
    assert "preemptorPriorityClassSelector.notMatchNames names ghost" in str(finding["message"])


def test_constraints_that_constrain_nothing_are_said(tmp_path: Path) -> None:
    """Issue 29: `priority: {}` matches every priority; a rule without candidate selectors selects nothing."""
    empty = (
        QUEUE.replace("CONFIG", "c")
        + "---\n"
        + config("c").replace("priority: {mode: Base, comparison: LessThan}", "priority: {}")
    )
    (finding,) = _findings(tmp_path, empty, "EmptyConstraint")
    assert finding["severity"] == "info" and finding["objects"] == ["PreemptionConfig/c"]
    assert str(finding["message"]).startswith("PreemptionConfig c rule r candidateSelectors[0].priority is empty")
    bare = QUEUE.replace("CONFIG", "c") + "---\n" + config("c").split("    candidateSelectors:")[0]
    (finding,) = _findings(tmp_path, bare, "EmptyConstraint")
    assert "no candidateSelectors: the rule selects no victim" in str(finding["message"])
    assert _findings(tmp_path, QUEUE.replace("CONFIG", "c") + "---\n" + config("c"), "EmptyConstraint") == []
    assert lint(tmp_path, empty, "--fail-on", "info").exit_code == 1


def test_the_workload_opt_out_is_a_user_writable_key(tmp_path: Path) -> None:
    """Issue 29: yunikorn.apache.org/allow-preemption on a Workload is its owner's to set, and
    overrides a priority class's."""
    workload = """---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {name: shielded, namespace: team-a, annotations: {yunikorn.apache.org/allow-preemption: "false"}}
spec:
  queueName: q
  podSets: [{name: main, count: 1, template: {spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}}}]
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: protected, annotations: {yunikorn.apache.org/allow-preemption: "false"}}
value: 10
"""
    text = QUEUE.replace(", annotations: {kueue.x-k8s.io/preemption-config-name: CONFIG}", "") + workload
    findings = _findings(tmp_path, text, "UserWritableKey")
    assert [f["objects"] for f in findings] == [["Workload/team-a/shielded"], ["PriorityClass/protected"]]
    assert "taken only as a last resort" in str(findings[0]["message"])
    assert "overrides it" in str(findings[1]["message"])
