"""Issue 24, item 4: the pod-set helpers every integration shares (jobs/podsets.py), on their own:
admission's fields merged into a pod template as Kueue's podset.Merge merges them, put back as
podset.RestorePodSpec puts them back, and the topology request read from the template."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from preemption_operator.jobs.framework import PodSetInfo
from preemption_operator.jobs.podsets import from_pod_set, merge, patch_to, restore, topology_request
from unit.fake_api import merge as apply

SPOT = {"key": "spot", "operator": "Exists"}
GATE = {"name": "example.com/wait"}


def template(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "train"}, "annotations": {"note": "mine"}},
        "spec": {"containers": [{"name": "main"}], **spec},
    }


def admission(**fields: Any) -> PodSetInfo:
    defaults: dict[str, Any] = {
        "name": "main",
        "count": 2,
        "node_selector": {"pool": "batch"},
        "tolerations": (SPOT,),
        "labels": {"kueue.x-k8s.io/podset": "main"},
        "annotations": {"kueue.x-k8s.io/workload": "job-train-abcde"},
        "scheduling_gates": (GATE,),
    }
    return PodSetInfo(**{**defaults, **fields})


def original_of(tpl: dict[str, Any]) -> PodSetInfo:
    """What the Workload keeps of a template before it ran."""
    return from_pod_set({"name": "main", "count": 2, "template": copy.deepcopy(tpl)})


# -- merge ---------------------------------------------------------------------------------------


def test_merge_adds_admissions_maps_and_appends_its_lists() -> None:
    tpl = template(nodeSelector={"zone": "a"}, tolerations=[{"key": "gpu", "operator": "Exists"}])
    merged = apply(tpl, merge(tpl, admission()))
    assert merged["metadata"]["labels"] == {"app": "train", "kueue.x-k8s.io/podset": "main"}
    assert merged["metadata"]["annotations"] == {"note": "mine", "kueue.x-k8s.io/workload": "job-train-abcde"}
    assert merged["spec"]["nodeSelector"] == {"zone": "a", "pool": "batch"}
    assert merged["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists"}, SPOT]
    assert merged["spec"]["schedulingGates"] == [GATE]
    assert merged["spec"]["containers"] == tpl["spec"]["containers"]


def test_merge_of_what_the_template_already_has_changes_nothing() -> None:
    tpl = template(nodeSelector={"pool": "batch"}, tolerations=[SPOT], schedulingGates=[GATE])
    tpl["metadata"]["labels"]["kueue.x-k8s.io/podset"] = "main"
    tpl["metadata"]["annotations"]["kueue.x-k8s.io/workload"] = "job-train-abcde"
    assert merge(tpl, admission()) == {}


@pytest.mark.parametrize(
    ("where", "field", "key"),
    [("spec", "nodeSelector", "pool"), ("metadata", "labels", "kueue.x-k8s.io/podset")],
)
def test_a_key_the_template_has_with_another_value_is_a_conflict(where: str, field: str, key: str) -> None:
    tpl = template()
    tpl[where].setdefault(field, {})[key] = "other"
    with pytest.raises(ValueError, match=f"conflict for {field}: {key} already set to other values"):
        merge(tpl, admission())


def test_assigned_domains_become_required_node_affinity() -> None:
    domains = (
        {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]},
        {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r2"]}]},
    )
    required = merge(template(), admission(node_affinity=domains))["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert required == {"nodeSelectorTerms": [dict(d) for d in domains]}


def test_the_templates_own_terms_are_joined_with_each_domain() -> None:
    own = [
        {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n9"]}]},
    ]
    tpl = template(
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": own}}}
    )
    domain = {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
    terms = merge(tpl, admission(node_affinity=(domain,)))["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "gpu", "operator": "Exists"}, *domain["matchExpressions"]]},
        {"matchExpressions": domain["matchExpressions"], "matchFields": own[1]["matchFields"]},
    ]


# -- restore -------------------------------------------------------------------------------------


def test_restore_takes_admissions_fields_away_and_keeps_the_labels_it_is_told_to() -> None:
    tpl = template(nodeSelector={"zone": "a"})
    original = original_of(tpl)
    started = apply(tpl, merge(tpl, admission()))
    started["metadata"]["labels"]["controller-uid"] = "u-1"  # set by the job's own controller meanwhile
    patch = restore(started, original, kept_labels=("controller-uid", "absent"))
    back = apply(started, patch)
    assert back["metadata"]["labels"] == {"app": "train", "controller-uid": "u-1"}
    assert back["metadata"]["annotations"] == {"note": "mine"}
    assert back["spec"] == {"containers": [{"name": "main"}], "nodeSelector": {"zone": "a"}}


def test_restore_of_an_untouched_template_changes_nothing() -> None:
    tpl = template(tolerations=[SPOT], affinity={"podAffinity": {}})
    assert restore(tpl, original_of(tpl)) == {}


def test_restore_puts_the_templates_own_affinity_back() -> None:
    own = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]}}
    tpl = template(affinity=own)
    domain = {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
    started = apply(tpl, merge(tpl, admission(node_affinity=(domain,))))
    assert "requiredDuringSchedulingIgnoredDuringExecution" in started["spec"]["affinity"]["nodeAffinity"]
    assert apply(started, restore(started, original_of(tpl)))["spec"]["affinity"] == own


LABELS = st.dictionaries(st.sampled_from(["a", "b", "kueue.x-k8s.io/podset"]), st.sampled_from(["x", "y"]), max_size=3)
TOLERATIONS = st.lists(st.sampled_from([SPOT, {"key": "gpu", "operator": "Exists"}]), unique_by=str, max_size=2)


@given(own_labels=LABELS, own_selector=LABELS, own_tolerations=TOLERATIONS, added=LABELS, selector=LABELS)
def test_restore_undoes_merge(
    own_labels: dict[str, str],
    own_selector: dict[str, str],
    own_tolerations: list[dict[str, str]],
    added: dict[str, str],
    selector: dict[str, str],
) -> None:
    tpl: dict[str, Any] = {"metadata": {"labels": own_labels}, "spec": {"containers": [{"name": "main"}]}}
    if own_selector:
        tpl["spec"]["nodeSelector"] = own_selector
    if own_tolerations:
        tpl["spec"]["tolerations"] = own_tolerations
    info = admission(labels=added, node_selector=selector, tolerations=(SPOT,), scheduling_gates=())
    try:
        patch = merge(tpl, info)
    except ValueError:
        return  # a conflict: nothing was started
    started = apply(tpl, patch)
    back = apply(started, restore(started, original_of(tpl)))
    # An empty map and a missing one are the same to the API server.
    if not own_labels:
        back["metadata"].setdefault("labels", {})
    assert back == tpl


# -- patch_to and topology_request -----------------------------------------------------------------


def test_patch_to_removes_what_is_gone_and_replaces_what_changed() -> None:
    have = {"a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2]}
    want = {"b": {"c": 2, "d": 4}, "e": [2], "f": {"g": 5}}
    patch = patch_to(have, want)
    assert patch == {"a": None, "b": {"d": 4}, "e": [2], "f": {"g": 5}}
    assert apply(copy.deepcopy(have), patch) == want
    assert patch_to(have, {}) is None and patch_to(have, None) is None


@pytest.mark.parametrize(
    ("annotations", "request_"),
    [
        ({"kueue.x-k8s.io/podset-required-topology": "rack"}, {"required": "rack"}),
        (
            {"kueue.x-k8s.io/podset-required-topology": "rack", "kueue.x-k8s.io/podset-preferred-topology": "host"},
            {"required": "rack"},
        ),
        ({"kueue.x-k8s.io/podset-preferred-topology": "host"}, {"preferred": "host"}),
        ({"kueue.x-k8s.io/podset-unconstrained-topology": "true"}, {"unconstrained": True}),
        ({"kueue.x-k8s.io/podset-unconstrained-topology": "false"}, None),
        ({}, None),
    ],
)
def test_the_topology_request_comes_from_the_templates_annotations(
    annotations: dict[str, str], request_: dict[str, Any] | None
) -> None:
    tpl = {"metadata": {"annotations": annotations}}
    want = None if request_ is None else {**request_, "podIndexLabel": "example.com/index"}
    assert topology_request(tpl, "example.com/index") == want
