"""Issue 16: `lint` decides equivalent pairs and cycles of queues once, and that changes no verdict.

Two units are equivalent only when a renaming of queues and cohorts maps the setup onto itself
and one onto the other; the property test compares the analysis with symmetry against the same
analysis deciding every unit on its own, over setups made of copies and near-copies of trees."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from preemption_operator import lint
from preemption_operator.api.objects import parse_object
from preemption_operator.engine.cache import Cache
from preemption_operator.lint import flapping, model, symmetry

from .test_flapping import RECLAIM, WITHIN, _cluster_queue

FLAVOR = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}}
CLASSES = [
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": n}, "value": v}
    for n, v in (("low", 1), ("high", 3))
]


def _config(name: str, comparison: str, scope: str = "WithinCohortTree") -> dict[str, Any]:
    selector = {"scope": scope, "priority": {"mode": "Base", "comparison": comparison}}
    rule = {"name": "r", "activationPolicy": {"trigger": "InsufficientQuota"}, "candidateSelectors": [selector]}
    return {
        "apiVersion": "kueue.x-k8s.io/v1alpha1",
        "kind": "PreemptionConfig",
        "metadata": {"name": name},
        "spec": {"rules": [rule]},
    }


def _queue(name: str, cohort: str, nominal: int = 2, config: str | None = None, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if config:
        meta["annotations"] = {"kueue.x-k8s.io/preemption-config-name": config}
    return _cluster_queue(meta, nominal, cohortName=cohort)


def _canon(docs: list[dict[str, Any]]) -> tuple[symmetry.Canon, dict[str, Any]]:
    objects = [parse_object(d) for d in docs]
    cache = Cache()
    cache.load(objects)
    nodes = {name: cq.node for name, cq in cache.snapshot(model.NOW).cluster_queues.items()}
    by_kind: dict[str, dict[str, Any]] = {}
    for obj in objects:
        by_kind.setdefault(type(obj).__name__, {})[obj.metadata.name] = obj
    canon = symmetry.Canon(
        by_kind.get("ClusterQueue", {}), by_kind.get("Cohort", {}), by_kind.get("PreemptionConfig", {}), set(nodes)
    )
    return canon, nodes


def test_the_same_tree_under_other_names_is_equivalent() -> None:
    docs = [
        FLAVOR,
        _config("one", "LessThan"),
        _config("two", "LessThan"),  # same rules, another name
        _queue("a1", "x", config="one"),
        _queue("b1", "x"),
        _queue("a2", "y", config="two"),
        _queue("b2", "y"),
    ]
    canon, n = _canon(docs)
    assert canon.pair(n["a1"], n["b1"]) == canon.pair(n["a2"], n["b2"]) == canon.pair(n["b2"], n["a2"])
    assert canon.pair(n["a1"], n["a1"]) == canon.pair(n["a2"], n["a2"])
    assert canon.pair(n["a1"], n["a1"]) != canon.pair(n["b1"], n["b1"])  # one has the config, one not


def test_kubectl_apply_bookkeeping_does_not_break_the_equivalence() -> None:
    """`kubectl apply` stores each object, name included, in an annotation nothing else reads."""

    def applied(queue: dict[str, Any]) -> dict[str, Any]:
        queue["metadata"].setdefault("annotations", {})[symmetry.BOOKKEEPING[0]] = json.dumps(queue)
        return queue

    docs = [FLAVOR, applied(_queue("a1", "x")), applied(_queue("b1", "x")), applied(_queue("a2", "y"))]
    docs.append(applied(_queue("b2", "y")))
    canon, n = _canon(docs)
    assert canon.pair(n["a1"], n["b1"]) == canon.pair(n["a2"], n["b2"])


def test_any_difference_that_the_engine_reads_breaks_the_equivalence() -> None:
    base = [FLAVOR, _config("one", "LessThan"), _queue("a1", "x", config="one"), _queue("b1", "x")]
    variants = {
        "quota": _queue("a2", "y", nominal=3, config="one"),
        "label": _queue("a2", "y", config="one", tier="gold"),
        "rules": _queue("a2", "y", config="three"),
        "policy": _cluster_queue(
            {"name": "a2", "annotations": {"kueue.x-k8s.io/preemption-config-name": "one"}},
            2,
            cohortName="y",
            preemption={"withinClusterQueue": "LowerPriority"},
        ),
    }
    for what, a2 in variants.items():
        docs = [*base, _config("three", "LessThanOrEqual"), a2, _queue("b2", "y")]
        canon, n = _canon(docs)
        assert canon.pair(n["a1"], n["b1"]) != canon.pair(n["a2"], n["b2"]), what


def test_siblings_and_cousins_are_told_apart() -> None:
    cohorts = [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Cohort",
            "metadata": {"name": c},
            "spec": {"parentName": "root"},
        }
        for c in ("left", "right")
    ]
    docs = [FLAVOR, *cohorts, _queue("l1", "left"), _queue("l2", "left"), _queue("r1", "right"), _queue("r2", "right")]
    canon, n = _canon(docs)
    assert canon.pair(n["l1"], n["l2"]) == canon.pair(n["r1"], n["r2"])  # siblings, either side
    assert canon.pair(n["l1"], n["r1"]) == canon.pair(n["l2"], n["r2"])  # cousins
    assert canon.pair(n["l1"], n["l2"]) != canon.pair(n["l1"], n["r1"])


def test_a_cycle_is_equivalent_to_its_rotations_not_to_its_reverse() -> None:
    docs = [FLAVOR, _queue("a", "x", nominal=1), _queue("b", "x", nominal=2), _queue("c", "x", nominal=3)]
    canon, n = _canon(docs)
    a, b, c = n["a"], n["b"], n["c"]
    assert canon.cycle((a, b, c)) == canon.cycle((b, c, a)) == canon.cycle((c, a, b))
    assert canon.cycle((a, b, c)) != canon.cycle((a, c, b))


def test_a_flap_in_copied_trees_is_one_finding_naming_every_copy() -> None:
    docs: list[dict[str, Any]] = [FLAVOR, *CLASSES, _config("symmetric", "LessThanOrEqual")]
    for team in ("t1", "t2", "t3"):
        docs += [_queue(f"{team}-a", team, config="symmetric"), _queue(f"{team}-b", team, config="symmetric")]
    objects = [parse_object(d) for d in docs]
    report = lint.lint(objects)
    flaps = [f for f in report.findings if f.code == "FlappingPair"]
    exhaustive = flapping.Analysis(objects, by_symmetry=False).run()
    # Each tree loops within each queue and between its two queues: 9 units, in 2 orbits (within
    # a queue; between the two).
    assert len(exhaustive.flaps) == 9
    assert len(flaps) == 2
    assert {f"ClusterQueue/{t}-{q}" for t in ("t1", "t2", "t3") for q in "ab"} <= {o for f in flaps for o in f.objects}
    between = next(f for f in flaps if "between ClusterQueues" in f.message)
    assert "between ClusterQueues t2-a and t2-b; between ClusterQueues t3-a and t3-b." in between.message
    assert report.proof is not None and report.proof.counts.equivalent_queue_pairs == 7


def test_a_copy_that_differs_keeps_its_own_verdict() -> None:
    """t2's rule is strict: its queues cannot flap, although t1's, otherwise the same, can."""
    docs: list[dict[str, Any]] = [FLAVOR, *CLASSES, _config("loose", "LessThanOrEqual"), _config("strict", "LessThan")]
    docs += [_queue("t1-a", "t1", config="loose"), _queue("t1-b", "t1", config="loose")]
    docs += [_queue("t2-a", "t2", config="strict"), _queue("t2-b", "t2", config="strict")]
    result = flapping.analyse([parse_object(d) for d in docs])
    flapping_queues = {s.cluster_queue for f in result.flaps for s in f.shapes} | {
        q for f in result.flaps for qs in f.also for q in qs
    }
    assert flapping_queues == {"t1-a", "t1-b"}


# -- the property: symmetry changes no verdict -----------------------------------------------------


@st.composite
def copied_trees(draw: Any) -> list[dict[str, Any]]:
    """Two or three cohorts of two queues each; each cohort a copy of the first, renamed, or a
    copy with one field changed, or drawn anew."""
    docs: list[dict[str, Any]] = [FLAVOR, *CLASSES[: draw(st.integers(0, 2))]]
    comparisons = ["LessThan", "LessThanOrEqual", "GreaterThanOrEqual"]
    for n in range(2):
        docs.append(
            _config(
                f"c{n}",
                draw(st.sampled_from(comparisons)),
                draw(st.sampled_from(["WithinClusterQueue", "WithinCohortTree"])),
            )
        )

    def queue_spec() -> dict[str, Any]:
        return {
            "nominal": draw(st.integers(0, 2)),
            "config": draw(st.sampled_from([None, "c0", "c1"])),
            "within": draw(st.sampled_from(WITHIN)),
            "reclaim": draw(st.sampled_from(RECLAIM)),
        }

    template = [queue_spec(), queue_spec()]
    for t in range(draw(st.integers(2, 3))):
        how = draw(st.sampled_from(["copy", "changed", "new"])) if t else "copy"
        specs = copy.deepcopy(template) if how != "new" else [queue_spec(), queue_spec()]
        if how == "changed":
            i = draw(st.integers(0, 1))
            specs[i]["nominal"] = (specs[i]["nominal"] + 1) % 3
        for q, spec in enumerate(specs):
            meta: dict[str, Any] = {"name": f"t{t}-q{q}"}
            if spec["config"]:
                meta["annotations"] = {"kueue.x-k8s.io/preemption-config-name": spec["config"]}
            preemption = {"withinClusterQueue": spec["within"], "reclaimWithinCohort": spec["reclaim"]}
            docs.append(_cluster_queue(meta, spec["nominal"], cohortName=f"t{t}", preemption=preemption))
    return docs


def _verdicts(result: flapping.Result) -> tuple[set[tuple[str, ...]], set[str]]:
    """(every queue pair with a flap, every tree with a cycle of three)."""
    pairs, trees = set(), set()
    for flap in result.flaps:
        units = [tuple(s.cluster_queue for s in flap.shapes), *flap.also]
        for unit in units:
            if flap.code == "FlappingPair":
                pairs.add(tuple(sorted(unit)))
            else:
                trees.add(unit[0].split("-")[0])
    return pairs, trees


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(copied_trees())
def test_symmetry_changes_no_verdict(docs: list[dict[str, Any]]) -> None:
    objects = [parse_object(d) for d in docs]
    fast = flapping.Analysis(objects).run()
    slow = flapping.Analysis(objects, by_symmetry=False).run()
    assert _verdicts(fast) == _verdicts(slow)
    assert fast.proof is not None and slow.proof is not None
    assert fast.proof.flap_free == slow.proof.flap_free
