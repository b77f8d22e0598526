"""Kueue's --feature-gates parse as Kubernetes components parse them, and a gate that cannot change
what this operator does says so."""

from __future__ import annotations

import pytest

from preemption_operator.controller.feature_gates import (
    KUEUE_GATES,
    gate_warnings,
    parse_feature_gates,
    prioritize_preemptors,
)


def test_kueue_gate_names_and_go_booleans_parse() -> None:
    assert parse_feature_gates("ConfigurablePreemptions=true, TopologyAwareScheduling=False,PartialAdmission=1") == {
        "ConfigurablePreemptions": True,
        "TopologyAwareScheduling": False,
        "PartialAdmission": True,
    }
    assert parse_feature_gates("") == {}
    assert "ConfigurablePreemptions" in KUEUE_GATES and "ElasticJobsViaWorkloadSlices" in KUEUE_GATES


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ConfigurablePreemption=true", "unrecognized feature gate: ConfigurablePreemption"),
        ("PartialAdmission", "missing bool value for PartialAdmission"),
        (
            "PartialAdmission=yes",
            'invalid value of PartialAdmission=yes, err: strconv.ParseBool: parsing "yes": invalid syntax',
        ),
    ],
)
def test_bad_gates_are_refused_with_the_words_of_kubernetes(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"):
        parse_feature_gates(text)


def test_a_gate_set_against_how_the_operator_works_is_named() -> None:
    warnings = gate_warnings(
        {
            "ConfigurablePreemptions": False,
            "FlavorFungibilityPreserveScanProgress": True,
            "MultiKueue": True,
            "PartialAdmission": True,
        }
    )
    assert warnings == [
        "feature gate ConfigurablePreemptions=false has no effect: PreemptionConfig rules apply to every "
        "ClusterQueue that names one",
        "feature gate FlavorFungibilityPreserveScanProgress=true has no effect: every flavor search starts at "
        "the first flavor",
        "feature gate MultiKueue has no effect here: this operator does not implement it",
    ]


def test_prioritize_preemptor_workloads_is_on_unless_set_false_and_applied_either_way() -> None:
    """Kueue's default is off; here it is on unless the flag or the Configuration says false, and
    false is applied (a cycle ordered as Kueue's default), so it draws no warning."""
    assert prioritize_preemptors({}) is True
    assert prioritize_preemptors({"PrioritizePreemptorWorkloads": True}) is True
    assert prioritize_preemptors(parse_feature_gates("PrioritizePreemptorWorkloads=false")) is False
    assert gate_warnings({"PrioritizePreemptorWorkloads": False}) == []
    assert gate_warnings({"PrioritizePreemptorWorkloads": True}) == []


def test_run_refuses_an_unknown_gate_before_reading_any_kubeconfig() -> None:
    from click.testing import CliRunner

    from preemption_operator.cli import cli

    result = CliRunner().invoke(cli, ["run", "--feature-gates", "ConfigurablePreemptions=true,Bogus=true"])
    assert result.exit_code == 2
    assert "error: --feature-gates: unrecognized feature gate: Bogus" in result.output
