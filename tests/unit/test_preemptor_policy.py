"""Issue #12, item 11: a preemptor that may not preempt.

A PriorityClass with `preemptionPolicy: Never` forbids its pods to preempt: kube-scheduler and the
PreemptionToleration plugin (`PodEligibleToPreemptOthers`: "not eligible due to
preemptionPolicy=Never."; `ExemptedFromPreemption` exempts every victim of such a preemptor) and
YuniKorn (the class's policy travels as `schedulerPreemption`/`allowPreemptOther`; an ask that may
not preempt never triggers preemption). Kueue itself does not read the field. The engine holds a
Workload whose `priorityClassRef` names such a PriorityClass to it: it waits for free quota (Kueue's
`WaitingForQuota`, with Kueue's message), evicts nobody by any path (classic or a PreemptionConfig
rule), and `explain` says why. A WorkloadPriorityClass has no preemption policy (none in Kueue's
API), so its workloads preempt as before.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from builders import (
    NOW,
    Obj,
    WorkloadBuilder,
    admitted,
    cluster_queue,
    one_cycle,
    pending,
    rfc3339,
    scenario,
    simulate,
    simulate_cli,
    workload_priority_class,
)
from preemption_operator.cli import cli

RUNS = [simulate, simulate_cli]
RUN_IDS = ["simulate", "cli"]
WAITING = "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 2 more needed"


def priority_class(name: str, value: int, policy: str | None = None, annotations: dict[str, str] | None = None) -> Obj:
    body: Obj = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
    body["value"] = value
    if policy is not None:
        body["preemptionPolicy"] = policy
    if annotations:
        body["metadata"]["annotations"] = annotations
    return body


def of_class(builder: WorkloadBuilder, name: str, kind: str = "PriorityClass") -> WorkloadBuilder:
    group = "scheduling.k8s.io" if kind == "PriorityClass" else "kueue.x-k8s.io"
    builder.body["spec"]["priorityClassRef"] = {"group": group, "kind": kind, "name": name}
    return builder


def full(preemptor: WorkloadBuilder, *classes: Obj, victim: WorkloadBuilder | None = None, **cq: Any) -> list[Obj]:
    """CQ `cq` (4 cpu, withinClusterQueue LowerPriority) full with `low` (priority 0), and `preemptor`."""
    cq.setdefault("within", "LowerPriority")
    return scenario(
        [cluster_queue("cq", 4, **cq)],
        victim or admitted("low", "cq", 4, priority=0),
        preemptor,
        extra=classes,
    )


def never(value: int = 100) -> Obj:
    return priority_class("never", value, "Never")


# -- a PriorityClass that says Never ---------------------------------------------------------------------


def test_never_preempts_engine() -> None:
    result = one_cycle(full(of_class(pending("in", "cq", 2), "never"), never()))
    assert result.preempted == []
    [entry] = result.pending
    assert (entry.workload.name, entry.reason, entry.message) == ("in", "WaitingForQuota", WAITING)
    [explanation] = result.explanations
    assert explanation.notes == [
        "may not preempt: PriorityClass never has preemptionPolicy: Never; it waits for free quota"
    ]


@pytest.mark.parametrize("run", RUNS, ids=RUN_IDS)
def test_never_waits_for_free_quota(run: Any) -> None:
    out = run(full(of_class(pending("in", "cq", 2), "never"), never()))
    assert out.victims == []
    assert out.condition("low", "Admitted")["status"] == "True"  # type: ignore[index]
    reserved = out.condition("in", "QuotaReserved")
    assert reserved is not None
    assert (reserved["status"], reserved["reason"], reserved["message"]) == ("False", "WaitingForQuota", WAITING)


@pytest.mark.parametrize("run", RUNS, ids=RUN_IDS)
def test_never_is_admitted_when_quota_is_free(run: Any) -> None:
    # It only gives up preempting: what fits is admitted.
    objects = full(of_class(pending("in", "cq", 2), "never"), never(), victim=admitted("low", "cq", 2, priority=0))
    assert [a.workload.name for a in one_cycle(objects).admitted] == ["in"]
    assert run(objects).condition("in", "Admitted")["status"] == "True"  # type: ignore[index]


@pytest.mark.parametrize("run", RUNS, ids=RUN_IDS)
@pytest.mark.parametrize("policy", [None, "PreemptLowerPriority"])
def test_other_policies_preempt(run: Any, policy: str | None) -> None:
    objects = full(of_class(pending("in", "cq", 2), "pc"), priority_class("pc", 100, policy))
    assert [p.victim.name for p in one_cycle(objects).preempted] == ["low"]
    assert run(objects).victims == ["low"]


@pytest.mark.parametrize("run", RUNS, ids=RUN_IDS)
def test_a_workload_priority_class_has_no_policy(run: Any) -> None:
    # Kueue's WorkloadPriorityClass has no preemptionPolicy: a PriorityClass of the same name that
    # says Never does not apply to a workload whose priority comes from the WorkloadPriorityClass.
    objects = full(
        of_class(pending("in", "cq", 2), "shared", kind="WorkloadPriorityClass"),
        workload_priority_class("shared", 100),
        priority_class("shared", 100, "Never"),
    )
    assert [p.victim.name for p in one_cycle(objects).preempted] == ["low"]
    assert run(objects).victims == ["low"]


@pytest.mark.parametrize("run", RUNS, ids=RUN_IDS)
def test_never_reclaims_nothing_from_the_cohort(run: Any) -> None:
    objects = scenario(
        [cluster_queue("c1", 4, cohort="c", reclaim="Any"), cluster_queue("c2", 0, cohort="c")],
        admitted("borrower", "c2", 4),
        of_class(pending("in", "c1", 4), "never"),
        extra=[never()],
    )
    assert one_cycle(objects).preempted == []
    out = run(objects)
    assert out.victims == []
    assert out.condition("in", "QuotaReserved")["reason"] == "WaitingForQuota"  # type: ignore[index]


def test_never_overrides_a_preemption_config_rule() -> None:
    config = {
        "apiVersion": "kueue.x-k8s.io/v1alpha1",
        "kind": "PreemptionConfig",
        "metadata": {"name": "cfg"},
        "spec": {
            "rules": [
                {
                    "name": "any",
                    "activationPolicy": {"trigger": "Always"},
                    "candidateSelectors": [{"scope": "WithinClusterQueue"}],
                }
            ]
        },
    }
    annotations = {"kueue.x-k8s.io/preemption-config-name": "cfg"}
    objects = full(of_class(pending("in", "cq", 2), "never"), never(), config, annotations=annotations)
    assert one_cycle(objects).preempted == []
    assert simulate(objects).victims == []
    # The same rule preempts for a class without the policy.
    allowed = full(of_class(pending("in", "cq", 2), "pc"), priority_class("pc", 100), config, annotations=annotations)
    assert [p.victim.name for p in one_cycle(allowed).preempted] == ["low"]


# -- the toleration plugin's and YuniKorn's cases ------------------------------------------------------


@pytest.mark.parametrize("run", RUNS, ids=RUN_IDS)
def test_toleration_t9_preemptor_never(run: Any) -> None:
    # PreemptionToleration unit case T9 (preemption_toleration_test.go): victim class value 1, no
    # policy; victim priority 1; preemptor priority 2 with preemptionPolicy Never: exempt.
    victim = of_class(admitted("victim", "cq", 4), "dummy")
    objects = full(
        of_class(pending("in", "cq", 2), "never"),
        priority_class("dummy", 1),
        never(2),
        victim=victim,
    )
    assert one_cycle(objects).preempted == []
    assert run(objects).victims == []


@pytest.mark.parametrize("run", RUNS, ids=RUN_IDS)
def test_toleration_t25_never_with_a_broken_victim_policy(run: Any) -> None:
    # Integration case T25 (TestPreemptionTolerationPlugin): the victim's class (value 1000) has an
    # unparsable minimum-preemptable-priority "a", so its policy is ignored; the preemptor (1001)
    # has preemptionPolicy Never: the victim is not preempted. T24, the same with
    # PreemptLowerPriority, is preempted.
    broken = {"preemption-toleration.scheduling.x-k8s.io/minimum-preemptable-priority": "a"}
    victim = of_class(admitted("victim", "cq", 4), "victim-class")
    for policy, victims in (("Never", []), ("PreemptLowerPriority", ["victim"])):
        objects = full(
            of_class(pending("in", "cq", 2), "preemptor-class"),
            priority_class("victim-class", 1000, annotations=broken),
            priority_class("preemptor-class", 1001, policy),
            victim=victim,
        )
        assert [p.victim.name for p in one_cycle(objects).preempted] == victims, policy
        assert run(objects).victims == victims, policy


@pytest.mark.parametrize("run", RUNS, ids=RUN_IDS)
def test_yunikorn_scheduler_preemption_never(run: Any) -> None:
    # YuniKorn's preemption design: the PriorityClass's preemptionPolicy reaches the core as
    # `schedulerPreemption` (allowPreemptOther); an ask that may not preempt others never triggers
    # preemption (CheckPreconditions), even against opted-in, lower-priority victims in another queue.
    objects = scenario(
        [cluster_queue("c1", 4, cohort="c", reclaim="Any", within="LowerPriority"), cluster_queue("c2", 0, cohort="c")],
        admitted("low", "c2", 2, priority=-10),
        admitted("mine", "c1", 2, priority=-10),
        of_class(pending("in", "c1", 4), "never"),
        extra=[never(1000)],
    )
    assert one_cycle(objects).preempted == []
    assert run(objects).victims == []


def test_explain_says_it_may_not_preempt() -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "objects.yaml"
        objects = full(of_class(pending("in", "cq", 2), "never"), never())
        path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
        result = CliRunner().invoke(cli, ["explain", str(path), "--workload", "default/in", "--now", rfc3339(NOW)])
    assert result.exit_code == 0, result.output
    assert "note: may not preempt: PriorityClass never has preemptionPolicy: Never; it waits for free quota" in (
        result.output
    )
    assert f"QuotaReserved  False  WaitingForQuota: {WAITING}" in result.output
