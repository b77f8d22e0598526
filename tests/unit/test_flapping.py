"""Issue 16: `lint` finds every flap and only flaps.

The oracle is brute force: every pair of raw workloads (every priority in a range wider than the
setup's values, every label value of a small alphabet, every class) in every filling of the two
queues that leaves the contested capacity full, each checked by two scheduling cycles. Lint's
finite shapes and its symbolic filter must find a flap exactly when brute force does, and every
witness it writes must flap when simulated."""

from __future__ import annotations

import itertools
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from preemption_operator import lint
from preemption_operator.api.objects import parse_object
from preemption_operator.engine.fair_sharing import OFF, FairSharing
from preemption_operator.lint import flapping, model, states
from preemption_operator.offline import simulate

WITHIN = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
RECLAIM = ("Never", "LowerPriority", "Any")


def _setup(draw: Any) -> list[dict[str, Any]]:
    """Two ClusterQueues in a cohort (0-2 cpu each), classic policies, 0-2 PreemptionConfigs."""
    docs: list[dict[str, Any]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}},
    ]
    values = draw(st.lists(st.integers(0, 3), min_size=0, max_size=2, unique=True))
    for n, value in enumerate(values):
        docs.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": f"class-{n}"},
                "value": value,
            }
        )
    configs = draw(st.integers(0, 2))
    for n in range(configs):
        rules = []
        for r in range(draw(st.integers(1, 2))):
            selector: dict[str, Any] = {
                "scope": draw(st.sampled_from(["WithinClusterQueue", "WithinCohortTree", "AnyClusterQueue"]))
            }
            if draw(st.booleans()):
                selector["priority"] = {
                    "mode": draw(st.sampled_from(["Base", "Boosted"])),
                    "comparison": draw(
                        st.sampled_from(["LessThan", "LessThanOrEqual", "GreaterThan", "GreaterThanOrEqual"])
                    ),
                }
            if draw(st.booleans()):
                selector["labelSelector"] = {"matchLabels": {"team": draw(st.sampled_from(["a", "b"]))}}
            if selector["scope"] != "WithinClusterQueue" and draw(st.booleans()):
                selector["quota"] = draw(st.sampled_from(["BorrowingCapacityFromPreemptor", "KeepsNominalQuota"]))
            rule: dict[str, Any] = {
                "name": f"r{r}",
                "activationPolicy": {
                    "trigger": draw(st.sampled_from(["Always", "InsufficientQuota"])),
                    "preemptorQuota": draw(st.sampled_from(["Any", "WithinNominalQuota"])),
                },
                "candidateSelectors": [selector],
            }
            if draw(st.booleans()):
                rule["preemptorSelector"] = {"matchLabels": {"team": draw(st.sampled_from(["a", "b"]))}}
            rules.append(rule)
        docs.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1alpha1",
                "kind": "PreemptionConfig",
                "metadata": {"name": f"config-{n}"},
                "spec": {"rules": rules},
            }
        )
    for name in ("q1", "q2"):
        meta: dict[str, Any] = {"name": name}
        if configs:
            meta["annotations"] = {
                "kueue.x-k8s.io/preemption-config-name": f"config-{draw(st.integers(0, configs - 1))}"
            }
        preemption = {
            "withinClusterQueue": draw(st.sampled_from(WITHIN)),
            "reclaimWithinCohort": draw(st.sampled_from(RECLAIM)),
        }
        docs.append(_cluster_queue(meta, draw(st.integers(0, 2)), cohortName="c", preemption=preemption))
    return docs


setups = st.composite(_setup)()


def _cluster_queue(meta: dict[str, Any], nominal: int, **spec: Any) -> dict[str, Any]:
    """A ClusterQueue open to every namespace with `nominal` cpu of flavor default."""
    flavor = {"name": "default", "resources": [{"name": "cpu", "nominalQuota": nominal}]}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": meta,
        "spec": {
            **spec,
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [flavor]}],
        },
    }


def brute_force(objects: list[Any]) -> bool:
    """A flap by exhaustion: raw values, every full filling, two cycles per candidate pair."""
    analysis = flapping.Analysis(objects)
    setup = analysis.setup
    classes: list[tuple[str, str] | None] = [None, *sorted(setup.classes)]
    priorities = range(-1, 5)  # the classes' values are 0-3
    teams: list[tuple[tuple[str, str], ...]] = [(), (("team", "a"),), (("team", "b"),)]
    queues = sorted(setup.namespace_of)
    # A class fixes the base priority; without one, spec.priority may be anything. The engine reads
    # it apart from the effective priority only in a `Base` comparison (engine/configurable.py),
    # so elsewhere one base stands for all (and keeps this oracle's run short).
    reads_base = any(
        (spec.priority is not None and spec.priority.mode == "Base")
        for config in setup.configs.values()
        for rule in config.rules
        for spec in rule.candidate_selectors or []
    )
    unclassed = list(priorities) if reads_base else [0]
    bases = [(k, setup.classes[k]) for k in classes if k is not None] + [(None, b) for b in unclassed]
    shapes = {
        cq: [
            model.Shape(model.Kind(cq, k, t, base), p)
            for (k, base), p, t in itertools.product(bases, priorities, teams)
        ]
        for cq in queues
    }
    fr = ("default", "cpu")
    unit = 1000
    for qa, qb in itertools.combinations_with_replacement(queues, 2):
        fills = []
        for la, lb in itertools.product(range(0, 5000, unit), repeat=2):
            fill = {qa: la} if qa == qb else {qa: la, qb: lb}
            avail = states._available(analysis.objects, qb, fr, fill)
            if avail is not None and avail == unit and fill not in fills:
                fills.append(fill)
        for fill in fills:
            levels = states.Levels(tuple(sorted(fill.items())), True)
            for a, b in itertools.product(shapes[qa], shapes[qb]):
                for timing in analysis.timings(2):
                    if analysis.loop((a, b), fr, unit, levels, timing) is not None:
                        return True
    return False


@pytest.mark.slow
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(setups)
def test_lint_finds_a_flap_exactly_when_brute_force_does(docs: list[dict[str, Any]]) -> None:
    objects = [parse_object(d) for d in docs]
    found = flapping.analyse(objects)
    assert bool(found.flaps) == brute_force(objects), yaml.safe_dump_all(docs)
    assert found.proof is not None and found.proof.flap_free == (not found.flaps)


def _flaps_when_simulated(path: Path, period: int = 2, fair_sharing: FairSharing = OFF) -> bool:
    """Simulated, the witness evicts in a loop: the same victims over and over, `period` apart."""
    from preemption_operator.offline import manifests

    objects = manifests.parse(manifests.read([path]), [])
    sim = simulate.run(objects, model.NOW, max_cycles=12, fair_sharing=fair_sharing)
    evictions = [(a["workload"], a.get("by", "")) for a in sim.actions if a["action"] == "Preempted"]
    victims = [w for w, _ in evictions]
    return len(victims) > period and len(set(victims[:period])) == period and victims[0] == victims[period]


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(setups)
def test_every_witness_flaps_when_simulated(docs: list[dict[str, Any]]) -> None:
    import tempfile

    objects = [parse_object(d) for d in docs]
    with tempfile.TemporaryDirectory() as folder:
        report = lint.lint(objects, Path(folder))
        for finding in report.findings:
            if finding.code.startswith("Flapping"):
                assert finding.witness is not None
                period = 2 if finding.code == "FlappingPair" else 3
                assert _flaps_when_simulated(Path(finding.witness), period), finding.message


SIBLINGS = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: parent}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: prod, annotations: {kueue.x-k8s.io/preemption-config-name: CONFIG}}
spec:
  cohortName: parent
  namespaceSelector: {}
  preemption: {reclaimWithinCohort: RECLAIM}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 4}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: test, annotations: {kueue.x-k8s.io/preemption-config-name: CONFIG}}
spec:
  cohortName: parent
  namespaceSelector: {}
  preemption: {reclaimWithinCohort: RECLAIM}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 2}]}]
"""
GUARANTEES = """
apiVersion: kueue.x-k8s.io/v1alpha1
kind: PreemptionConfig
metadata: {name: guarantees}
spec:
  rules:
  - name: reclaim-guarantee
    activationPolicy: {trigger: InsufficientQuota, preemptorQuota: WithinNominalQuota}
    candidateSelectors:
    - {scope: WithinParentCohort, quota: KeepsNominalQuota}
"""
ANYTHING = """
apiVersion: kueue.x-k8s.io/v1alpha1
kind: PreemptionConfig
metadata: {name: anything}
spec:
  rules:
  - name: take-any
    activationPolicy: {trigger: InsufficientQuota}
    candidateSelectors:
    - {scope: AnyClusterQueue}
"""
LOWER = """
apiVersion: kueue.x-k8s.io/v1alpha1
kind: PreemptionConfig
metadata: {name: lower}
spec:
  rules:
  - name: lower-anywhere
    activationPolicy: {trigger: Always}
    candidateSelectors:
    - scope: WithinCohortTree
      priority: {mode: Base, comparison: LessThan}
"""


def _lint(tmp_path: Path, text: str, *args: str) -> Any:
    from click.testing import CliRunner

    from preemption_operator.cli import cli

    (tmp_path / "setup.yaml").write_text(text)
    return CliRunner().invoke(cli, ["lint", str(tmp_path / "setup.yaml"), *args])


def test_yunikorn_prod_and_test_siblings_lint_clean(tmp_path: Path) -> None:
    """YuniKorn's loop cases: siblings with guarantees, same priority, a full cluster. Neither
    Kueue's reclaim nor the guarantee laws as a PreemptionConfig let the two take turns."""
    for reclaim, config in (("Any", ""), ("Never", GUARANTEES), ("Any", GUARANTEES)):
        text = SIBLINGS.replace("RECLAIM", reclaim).replace("CONFIG", "guarantees" if config else "none")
        result = _lint(tmp_path, text + ("---\n" + config if config else ""), "--output", "json")
        data = __import__("json").loads(result.output)
        flaps = [f for f in data["findings"] if f["code"] == "FlappingPair"]
        assert flaps == [] and data["proof"]["flapFree"] is True, (reclaim, config, result.output)
        assert data["proof"]["engineCycles"] >= 0 and data["proof"]["queuePairs"] == 3


def test_a_symmetric_any_cluster_queue_rule_is_caught_with_a_witness_that_flaps(tmp_path: Path) -> None:
    text = SIBLINGS.replace("RECLAIM", "Never").replace("CONFIG", "anything") + "---\n" + ANYTHING
    result = _lint(tmp_path, text, "--witness", str(tmp_path / "witness"))
    assert result.exit_code == 1
    assert "error   FlappingPair: A: a workload of ClusterQueue prod (priority 0)" in result.output
    assert (
        "A evicts B (ConfigurablePreemption, PreemptionConfig anything rule take-any/0), then B evicts A "
        "(ConfigurablePreemption, PreemptionConfig anything rule take-any/0), and the loop starts again"
    ) in result.output
    witnesses = sorted((tmp_path / "witness").glob("flap-*-state-1.yaml"))
    assert witnesses and all(_flaps_when_simulated(w) for w in witnesses)
    # The second state is the first with the two exchanged: simulating it flaps too.
    assert _flaps_when_simulated(tmp_path / "witness" / "flap-1-state-2.yaml")


def test_classic_reclaim_and_a_rule_for_borrowers_flap_together(tmp_path: Path) -> None:
    """A high-priority workload borrowing in one queue takes a low one through the rule; the low
    one, back in its queue under nominal, reclaims through Kueue's reclaimWithinCohort: Any."""
    text = SIBLINGS.replace("RECLAIM", "Any").replace("CONFIG", "lower") + "---\n" + LOWER
    text += """---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: low}
value: 10
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: high}
value: 100
"""
    result = _lint(tmp_path, text, "--output", "json")
    data = __import__("json").loads(result.output)
    reasons = [f["message"] for f in data["findings"] if f["code"] == "FlappingPair"]
    both = ("(InCohortReclamation)", "(ConfigurablePreemption, PreemptionConfig lower rule lower-anywhere/0)")
    assert any(all(part in m for part in both) for m in reasons), reasons
    assert data["proof"]["flapFree"] is False


def _rule(name: str, preemptor: str, candidate: str, scope: str = "WithinClusterQueue") -> dict[str, Any]:
    return {
        "name": name,
        "preemptorSelector": {"matchLabels": {"team": preemptor}},
        "activationPolicy": {"trigger": "InsufficientQuota"},
        "candidateSelectors": [{"scope": scope, "labelSelector": {"matchLabels": {"team": candidate}}}],
    }


def _one_queue(rules: list[dict[str, Any]], nominal: int = 2) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {
            "apiVersion": "kueue.x-k8s.io/v1alpha1",
            "kind": "PreemptionConfig",
            "metadata": {"name": "teams"},
            "spec": {"rules": rules},
        },
        _cluster_queue({"name": "shared", "annotations": {"kueue.x-k8s.io/preemption-config-name": "teams"}}, nominal),
    ]


def test_a_cycle_of_three_is_caught_where_no_pair_flaps(tmp_path: Path) -> None:
    """Rock, paper, scissors: team a takes b, b takes c, c takes a. No two take each other."""
    rules = [_rule("a-takes-b", "a", "b"), _rule("b-takes-c", "b", "c"), _rule("c-takes-a", "c", "a")]
    text = yaml.safe_dump_all(_one_queue(rules))
    result = _lint(tmp_path, text, "--witness", str(tmp_path / "witness"), "--output", "json")
    assert result.exit_code == 1, result.output
    data = __import__("json").loads(result.output)
    (finding,) = [f for f in data["findings"] if f["code"].startswith("Flapping")]
    assert finding["code"] == "FlappingCycle" and finding["severity"] == "error"
    assert "labels team=a" in finding["message"] and "C evicts A" in finding["message"]
    states = sorted((tmp_path / "witness").glob("flap-1-state-*.yaml"))
    assert len(states) == 3
    from preemption_operator.offline import manifests

    sim = simulate.run(manifests.parse(manifests.read([states[0]]), []), model.NOW, max_cycles=14)
    victims = [a["workload"].split("/")[1] for a in sim.actions if a["action"] == "Preempted"]
    assert victims[:4] == ["workload-b", "workload-c", "workload-a", "workload-b"], victims
    # Break one link and the setup is proven flap-free.
    fixed = _lint(tmp_path, yaml.safe_dump_all(_one_queue(rules[:2])), "--output", "json")
    assert fixed.exit_code == 0 and __import__("json").loads(fixed.output)["proof"]["flapFree"] is True


@st.composite
def team_rules(draw: Any) -> list[dict[str, Any]]:
    edges = draw(
        st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from("abc")), min_size=1, max_size=4, unique=True)
    )
    return [_rule(f"r{i}", x, y) for i, (x, y) in enumerate(edges)]


def brute_force_triples(objects: list[Any]) -> bool:
    """Every ordered triple of raw workloads in the one queue, full, every creation order."""
    analysis = flapping.Analysis(objects)
    teams: list[tuple[tuple[str, str], ...]] = [(), *((("team", t),) for t in "abcz")]
    shapes = [model.Shape(model.Kind("shared", None, t), 0) for t in teams]
    fr, unit = ("default", "cpu"), 1000
    avail = states._available(analysis.objects, "shared", fr, {})
    assert avail is not None
    levels = states.Levels((("shared", avail - 2 * unit),), True)
    for trio in itertools.product(shapes, repeat=3):
        for timing in analysis.timings(3):
            if analysis.loop(trio, fr, unit, levels, timing) is not None:
                return True
    return False


@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(team_rules())
def test_lint_finds_cycles_of_three_exactly_when_brute_force_does(rules: list[dict[str, Any]]) -> None:
    objects = [parse_object(d) for d in _one_queue(rules)]
    found = flapping.analyse(objects)
    pairs = [f for f in found.flaps if f.code == "FlappingPair"]
    if not pairs:
        assert bool(found.flaps) == brute_force_triples(objects), rules


FLAPPING_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "flapping-rules"


def test_the_flapping_example_is_caught_and_its_fix_proven(tmp_path: Path) -> None:
    """examples/flapping-rules: lint finds the two pairs (one within a queue, one between them), simulate on the folder loops, and
    with the one-word fix lint proves it clean and simulate settles."""
    import shutil

    from click.testing import CliRunner

    from preemption_operator.cli import cli

    runner = CliRunner()
    result = runner.invoke(cli, ["lint", str(FLAPPING_EXAMPLE), "--witness", str(tmp_path / "witness")])
    assert result.exit_code == 1
    assert result.output.count("error   FlappingPair:") == 2
    # research is production renamed: its own loop is the first finding's, renamed.
    assert "The same loop, renamed, exists within ClusterQueue research." in result.output
    assert (
        "A: a workload of ClusterQueue production (priority 100; class batch); B: a workload of ClusterQueue research"
        in result.output
    )
    assert _flaps_when_simulated(tmp_path / "witness" / "flap-2-state-1.yaml")
    looping = runner.invoke(cli, ["simulate", str(FLAPPING_EXAMPLE), "--output", "text", "--max-cycles", "8"])
    assert "stopped after --max-cycles 8 cycles; the cluster had not settled" in looping.output

    fixed = tmp_path / "fixed"
    shutil.copytree(FLAPPING_EXAMPLE, fixed)
    config = fixed / "preemption-config.yaml"
    config.write_text(config.read_text().replace("comparison: LessThanOrEqual", "comparison: LessThan"))
    clean = runner.invoke(cli, ["lint", str(fixed)])
    assert clean.exit_code == 0, clean.output
    assert "flapping: no two or three workloads can evict each other in turn (proof below)" in clean.output
    settled = runner.invoke(cli, ["simulate", str(fixed), "--output", "text"])
    assert "had not settled" not in settled.output
    assert "research/train-b   Pending (WaitingForQuota)" in settled.output


_SIDE = """
---
apiVersion: kueue.x-k8s.io/v1alpha1
kind: PreemptionConfig
metadata: {name: CONFIG}
spec:
  rules:
  - name: RULE
    activationPolicy: {trigger: Always}
    candidateSelectors:
    - scope: WithinCohortTree
      priority: {mode: MODE, comparison: LessThan}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: QUEUE, annotations: {kueue.x-k8s.io/preemption-config-name: CONFIG}}
spec:
  cohortName: c
  namespaceSelector: {}
  resourceGroups: [{coveredResources: [cpu], flavors: [{name: default, resources: [{name: cpu, nominalQuota: 1}]}]}]
"""
BASE_AGAINST_BOOSTED = (
    "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: default}\n"
    + _SIDE.replace("QUEUE", "a").replace("CONFIG", "base").replace("RULE", "by-base").replace("MODE", "Base")
    + _SIDE.replace("QUEUE", "b").replace("CONFIG", "boosted").replace("RULE", "by-boost").replace("MODE", "Boosted")
)
"""Queue a's rule takes b's workloads by base priority; b's takes a's by boosted priority."""


def test_a_boost_against_a_base_comparison_is_a_flapping_pair_without_any_class(tmp_path: Path) -> None:
    """Issue 29: A takes B's workloads by base priority, B takes A's by boosted priority. With
    no class in the setup, base priorities still differ (a Workload's spec.priority): one of B's
    with a lower base and a boost above A's is taken by A and takes A's back."""
    result = _lint(tmp_path, BASE_AGAINST_BOOSTED, "--witness", str(tmp_path / "witness"), "--output", "json")
    data = __import__("json").loads(result.output)
    (flap,) = [f for f in data["findings"] if f["code"] == "FlappingPair"]
    assert "PreemptionConfig base rule by-base/0" in flap["message"]
    assert "PreemptionConfig boosted rule by-boost/0" in flap["message"]
    assert "priority-boost" in flap["message"] and "spec.priority" in flap["message"]
    assert data["proof"]["flapFree"] is False
    assert data["proof"]["unclassedBasePriorities"] == [0, -1, 1, -2, 2]
    witness = Path(flap["witness"])
    text = witness.read_text()
    assert "kueue.x-k8s.io/priority-boost" in text and "priority: " in text
    assert _flaps_when_simulated(witness)
    # Both sides comparing boosted priorities is symmetric: no loop, and spec.priority needs no
    # quantifying of its own (only a Base comparison reads it apart from the boost).
    same = BASE_AGAINST_BOOSTED.replace("mode: Base,", "mode: Boosted,")
    data = __import__("json").loads(_lint(tmp_path, same, "--output", "json").output)
    assert data["proof"]["flapFree"] is True and data["proof"]["unclassedBasePriorities"] == [0]


def test_fair_sharing_is_never_claimed_flap_free(tmp_path: Path) -> None:
    """Issue 29: the states lint tries do not cover what fair preemption reads (shares set by
    other resources, weights, the fill-back of kubernetes-sigs/kueue#14543), so under
    --fair-sharing no loop found is no proof: a NotProven warning, never flapFree."""
    text = SIBLINGS.replace("RECLAIM", "Any").replace(
        ", annotations: {kueue.x-k8s.io/preemption-config-name: CONFIG}", ""
    )
    classic = __import__("json").loads(_lint(tmp_path, text, "--output", "json").output)
    assert classic["proof"]["flapFree"] is True
    assert not [f for f in classic["findings"] if f["code"] == "NotProven"]
    for strategies in ("LessThanOrEqualToFinalShare,LessThanInitialShare", "LessThanInitialShare"):
        result = _lint(tmp_path, text, "--fair-sharing-strategies", strategies, "--output", "json")
        assert result.exit_code == 0, result.output  # a warning: fails a build only with --fail-on warning
        data = __import__("json").loads(result.output)
        assert data["proof"]["flapFree"] is False
        (finding,) = [f for f in data["findings"] if f["code"] == "NotProven"]
        assert finding["severity"] == "warning" and "fair preemption" in finding["message"]
        assert any("fill-back" in item for item in data["proof"]["notModelled"])
        assert any("weights" in item for item in data["proof"]["notModelled"])
    gated = _lint(tmp_path, text, "--fair-sharing", "--fail-on", "warning")
    assert gated.exit_code == 1 and "flapping: not proven: fair sharing" in gated.output


def test_a_rule_taking_back_what_fair_preemption_took_is_found_with_fair_sharing(tmp_path: Path) -> None:
    """With fair sharing, each state is the engine's fair preemption: a PreemptionConfig rule
    (tried after the fair candidates) that takes any workload of the other queue loops with the
    other queue's reclamation, and the witness loops when simulated with fair sharing."""
    text = SIBLINGS.replace("RECLAIM", "Any").replace("CONFIG", "anything") + "---\n" + ANYTHING
    result = _lint(tmp_path, text, "--fair-sharing", "--witness", str(tmp_path / "w"), "--output", "json")
    data = __import__("json").loads(result.output)
    flaps = [f for f in data["findings"] if f["code"] == "FlappingPair"]
    assert flaps and data["proof"]["flapFree"] is False, result.output
    assert _flaps_when_simulated(Path(flaps[0]["witness"]), fair_sharing=FairSharing(enabled=True))


def test_the_operator_lints_with_its_own_fair_sharing() -> None:
    from preemption_operator.controller import lint_child
    from preemption_operator.controller.linter import analyse_setup, child_arguments

    text = SIBLINGS.replace("RECLAIM", "Any").replace(
        ", annotations: {kueue.x-k8s.io/preemption-config-name: CONFIG}", ""
    )
    docs = [d for d in yaml.safe_load_all(text) if d]
    assert analyse_setup(docs).outcome == "flap_free"
    sharing = FairSharing(enabled=True, strategies=("LessThanInitialShare",))
    assert analyse_setup(docs, sharing).outcome == "not_proven"
    # The child process learns the setting from its arguments.
    assert lint_child.fair_sharing_of(child_arguments(sharing)) == sharing
    assert lint_child.fair_sharing_of(child_arguments(OFF)) == OFF


def _leaf_paths(model: Any, prefix: str = "") -> list[str]:
    import typing

    import pydantic

    paths = []
    for name, f in model.model_fields.items():
        path = f"{prefix}.{f.alias or name}" if prefix else (f.alias or name)
        args = [
            a for outer in typing.get_args(f.annotation) or (f.annotation,) for a in (outer, *typing.get_args(outer))
        ]
        models = [a for a in args if isinstance(a, type) and issubclass(a, pydantic.BaseModel)]
        paths += _leaf_paths(models[0], path) if models else [path]
    return paths


def test_every_field_a_rule_reads_is_quantified_or_said_not_modelled(tmp_path: Path) -> None:
    """Issue 29: each field of a PreemptionConfig, and each part of a Workload the engine reads,
    is either in the proof's `quantified over` line or in its `not modelled` list."""
    from preemption_operator.api import v1alpha1

    fields = _leaf_paths(v1alpha1.PreemptionConfigSpec)
    assert "rules.candidateSelectors.priority.mode" in fields and "ordering.orderingField" in fields
    proof = flapping.analyse([parse_object(d) for d in yaml.safe_load_all(BASE_AGAINST_BOOSTED) if d]).proof
    assert proof is not None
    quantified = proof.lines().split("\n  not modelled:")[0]
    for path in [*fields, *(k for k in flapping.READS if k.startswith("Workload "))]:
        covering = [k for k in flapping.READS if path == k or path.startswith(k + ".")]
        assert covering, f"{path}: the flapping analysis says nothing about it"
        where = flapping.READS[max(covering, key=len)]
        if path == "rules.name":
            continue  # names tell rules apart; no decision reads them
        assert where in proof.not_modelled or where in quantified, (path, where)


@st.composite
def fair_setups(draw: Any) -> tuple[list[dict[str, Any]], FairSharing]:
    """The setups above with fair-sharing weights on the queues (0 to 2, halves) and the strategies."""
    docs = draw(setups)
    for doc in docs:
        if doc["kind"] == "ClusterQueue" and draw(st.booleans()):
            doc["spec"]["fairSharing"] = {"weight": draw(st.sampled_from(["0", "500m", "1", "2"]))}
    strategies = draw(
        st.sampled_from(
            [
                ("LessThanOrEqualToFinalShare", "LessThanInitialShare"),
                ("LessThanInitialShare",),
                ("LessThanOrEqualToFinalShare",),
            ]
        )
    )
    return docs, FairSharing(enabled=True, strategies=strategies)


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(fair_setups())
def test_under_fair_sharing_every_loop_found_is_real_and_none_is_claimed_absent(
    drawn: tuple[list[dict[str, Any]], FairSharing],
) -> None:
    """Issue 29: with fair sharing, lint decides each state with the engine's fair preemption: each
    loop it reports loops when simulated with the same fair sharing, and it never proves a setup
    flap-free (a NotProven warning says why, when it found no loop)."""
    import tempfile

    docs, sharing = drawn
    objects = [parse_object(d) for d in docs]
    with tempfile.TemporaryDirectory() as folder:
        report = lint.lint(objects, Path(folder), fair_sharing=sharing)
        assert report.proof is not None and report.proof.flap_free is False
        flaps = [f for f in report.findings if f.code.startswith("Flapping")]
        if not flaps:
            assert [f.code for f in report.findings if f.code == "NotProven"] == ["NotProven"]
        for finding in flaps:
            assert finding.witness is not None
            period = 2 if finding.code == "FlappingPair" else 3
            assert _flaps_when_simulated(Path(finding.witness), period, sharing), finding.message
        event(f"loops found: {bool(flaps)}")


def _fill_back_loop() -> list[dict[str, Any]]:
    """kubernetes-sigs/kueue#14543, translated: P (4 cpu) in a queue at its nominal quota with a1
    (2 cpu, equal priority, newer) takes a1 first, which lowers its queue's share enough for
    b1's queue (borrowing 3) to pass LessThanInitialShare; the fill-back then gives a1 back, so
    in the final state P's queue borrows more than b1's did, and b1, requeued, takes P the same way."""

    def queue(name: str, nominal: int, within: str = "LowerPriority") -> dict[str, Any]:
        return _cluster_queue(
            {"name": name},
            nominal,
            cohortName="c",
            preemption={"reclaimWithinCohort": "Any", "withinClusterQueue": within},
        )

    def workload(name: str, ns: str, cpu: int, created: str, admitted: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": created},
            "spec": {"queueName": ns, "priority": 0, "podSets": [states._pod_set("cpu", cpu * 1000)]},
        }
        if admitted:
            body["status"] = states._admitted(ns, ("default", "cpu"), cpu * 1000, model.NOW - timedelta(minutes=5))
        return body

    docs: list[dict[str, Any]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        queue("a", 2, "LowerOrNewerEqualPriority"),
        queue("b", 2),
        queue("lender", 4),
    ]
    for ns in ("a", "b"):
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}},
            }
        )
        docs.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": ns, "namespace": ns},
                "spec": {"clusterQueue": ns},
            }
        )
    docs += [
        workload("p", "a", 4, "2029-12-31T23:00:00Z", False),
        workload("a1", "a", 2, "2029-12-31T23:00:01Z", True),
        workload("b1", "b", 5, "2029-12-31T23:00:02Z", True),
    ]
    return docs


def test_the_fill_back_loop_of_kueue_14543_is_never_proven_absent(tmp_path: Path) -> None:
    """Issue 29: the loop is real under fair sharing, with the default strategies and with
    LessThanInitialShare alone (simulate shows b1 and p taking each other forever), and lint
    --fair-sharing does not call the setup flap-free."""
    objects = [parse_object(d) for d in _fill_back_loop()]
    for strategies in (("LessThanOrEqualToFinalShare", "LessThanInitialShare"), ("LessThanInitialShare",)):
        sharing = FairSharing(enabled=True, strategies=strategies)
        sim = simulate.run(objects, model.NOW, max_cycles=10, fair_sharing=sharing)
        victims = [a["workload"] for a in sim.actions if a["action"] == "Preempted"]
        assert victims[:4] == ["b/b1", "a/p", "b/b1", "a/p"], (strategies, sim.actions)
        report = lint.lint(objects, fair_sharing=FairSharing(enabled=True, strategies=strategies))
        assert report.proof is not None and report.proof.flap_free is False
        codes = {f.code for f in report.findings}
        assert "NotProven" in codes or codes & {"FlappingPair", "FlappingCycle"}, codes


def test_queues_with_admission_checks_are_still_analysed(tmp_path: Path) -> None:
    """Lint does not model AdmissionChecks: a queue naming checks the setup does not hold (they are
    not part of it) must not drop out of the analysis as inactive. The flapping example with a
    check on every ClusterQueue still shows both loops."""
    import shutil

    from click.testing import CliRunner

    from preemption_operator.cli import cli

    gated = tmp_path / "gated"
    shutil.copytree(FLAPPING_EXAMPLE, gated)
    cluster = gated / "cluster.yaml"
    docs = list(yaml.safe_load_all(cluster.read_text()))
    queues = [d for d in docs if d and d.get("kind") == "ClusterQueue"]
    assert queues
    for doc in queues:
        doc["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": "provisioning"}]}
    cluster.write_text(yaml.safe_dump_all(docs))
    result = CliRunner().invoke(cli, ["lint", str(gated)])
    assert result.exit_code == 1, result.output
    assert result.output.count("error   FlappingPair:") == 2
