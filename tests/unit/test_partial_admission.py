"""Partial admission (issue #12, item 8): a workload whose pod sets have `minCount` is admitted
with fewer pods when its full counts neither fit nor fit after preemption, as Kueue's scheduler
does it (getInitialAssignments with the PodSetReducer's binary search); the admission records the
admitted count.

The Kueue cases (scheduler_test.go, named in comments) run through the engine, `simulate` and the
`simulate` command.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from builders import (
    PATHS,
    Obj,
    admitted,
    cluster_queue,
    first_cycle,
    one_cycle,
    pending,
    quota,
    resource_group,
    scenario,
    simulate,
    simulate_cli,
    with_min_count,
    with_pod_sets,
    with_resource_groups,
    workload,
)

GPU = "example.com/gpu"


def single_variable_pod_set() -> list[Obj]:
    # Kueue: "partial admission single variable pod set": 50 pods of 2 cpu, at least 20, in a
    # queue of 50 cpu: 25 pods are admitted.
    return scenario(
        [cluster_queue("sales", 50)],
        with_pod_sets(workload("new", queue="sales", cpu=2), ("one", 50, 20)),
    )


def eng_beta(new_count: int) -> list[Obj]:
    # Kueue: "partial admission single variable pod set, preempt first" (20 pods, at least 10)
    # and "..., preempt with partial admission" (30 pods, at least 10). eng-beta holds 20 gpus,
    # 10 of them used by `old`.
    cq = with_resource_groups(
        cluster_queue("eng-beta", 0, within="LowerPriority", reclaim="Any"),
        resource_group({"model-a": {GPU: 20}}),
    )
    old = with_pod_sets(workload("old", cpu=None, priority=-4, requests={GPU: 1}), ("one", 10, None))
    old.body["spec"]["queueName"] = "eng-beta"
    old.body["status"] = {
        "conditions": [
            {"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": "2026-01-01T10:00:00Z"}
            for t in ("QuotaReserved", "Admitted")
        ],
        "admission": {
            "clusterQueue": "eng-beta",
            "podSetAssignments": [
                {"name": "one", "flavors": {GPU: "model-a"}, "resourceUsage": {GPU: "10"}, "count": 10}
            ],
        },
    }
    new = workload("new", queue="eng-beta", cpu=None, priority=4, uid="wl-new", job_uid="job-new", requests={GPU: 1})
    return scenario([cq], old, with_pod_sets(new, ("one", new_count, 10)), flavors=("model-a",))


def multiple_variable_pod_sets() -> list[Obj]:
    # Kueue: "partial admission multiple variable pod sets": one (20, fixed), two (30, at least
    # 10) and three (15, at least 5) in 50 cpu: 20, 20 and 10.
    return scenario(
        [cluster_queue("sales", 50)],
        with_pod_sets(workload("new", queue="sales", cpu=1), ("one", 20, None), ("two", 30, 10), ("three", 15, 5)),
    )


def assignment(name: str, resource: str, flavor: str, total: str, count: int) -> Obj:
    return {"name": name, "flavors": {resource: flavor}, "resourceUsage": {resource: total}, "count": count}


@pytest.mark.parametrize("path", PATHS)
def test_single_variable_pod_set(path: str) -> None:
    got = first_cycle(single_variable_pod_set(), path)
    assert got.admitted == {"new": [assignment("one", "cpu", "default", "50", 25)]}


@pytest.mark.parametrize("path", PATHS)
def test_multiple_variable_pod_sets(path: str) -> None:
    got = first_cycle(multiple_variable_pod_sets(), path)
    assert got.admitted == {
        "new": [
            assignment("one", "cpu", "default", "20", 20),
            assignment("two", "cpu", "default", "20", 20),
            assignment("three", "cpu", "default", "10", 10),
        ]
    }


PREEMPTING = (
    "couldn't assign flavors to pod set one: insufficient unused quota for example.com/gpu in flavor model-a, "
    "10 more needed. Pending the preemption of 1 workload(s)"
)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("count", [20, 30], ids=["preempt-first", "preempt-with-partial-admission"])
def test_preemption_before_partial_admission(path: str, count: int) -> None:
    """20 pods: preempting `old` admits them all, which beats admitting 10 now. 30 pods exceed the
    queue: the largest count that fits once `old` is gone, 20, is the one preempting for."""
    got = first_cycle(eng_beta(count), path)
    assert got.preempted == {"old": "InClusterQueue"}
    assert got.pending == {"new": ("WaitingForPreemptedWorkloads", PREEMPTING)}
    assert got.admitted == {}


@pytest.mark.parametrize("run", [simulate, simulate_cli], ids=["simulate", "cli"])
@pytest.mark.parametrize("count", [20, 30], ids=["preempt-first", "preempt-with-partial-admission"])
def test_preemptor_is_then_admitted_with_twenty_pods(run: object, count: int) -> None:
    out = run(eng_beta(count))
    assert [a["cycle"] for a in out.actions_of("new") if a["action"] == "Admitted"] == [2]
    assert out.statuses["new"]["admission"]["podSetAssignments"] == [assignment("one", GPU, "model-a", "20", 20)]


@pytest.mark.parametrize("path", PATHS)
def test_min_count_that_does_not_fit_leaves_it_pending_with_the_full_message(path: str) -> None:
    """Kueue returns the full assignment when no reduced one is admissible."""
    objects = scenario([cluster_queue("sales", 10)], with_min_count(pending("new", "sales", 2, count=10), 6))
    got = first_cycle(objects, path)
    assert got.admitted == {}
    reason, message = got.pending["new"]
    assert reason == "ExceedsMaxQuota"
    assert "insufficient quota for cpu in flavor default" in message
    assert "20" in message  # the full request, not a reduced one


@pytest.mark.parametrize("path", PATHS)
def test_partial_admission_counts_pods(path: str) -> None:
    """A `pods` quota limits the count too: 8 pods asked, at least 2, 5 `pods` allowed."""
    cq = with_resource_groups(cluster_queue("cq", 0), resource_group({"default": {"cpu": 100, "pods": 5}}))
    got = first_cycle(scenario([cq], with_min_count(pending("new", "cq", 1, count=8), 2)), path)
    assert got.admitted == {
        "new": [
            {
                "name": "main",
                "flavors": {"cpu": "default", "pods": "default"},
                "resourceUsage": {"cpu": "5", "pods": "5"},
                "count": 5,
            }
        ]
    }


def test_partially_admitted_workload_holds_what_it_was_admitted_with() -> None:
    """25 of 50 pods admitted hold 50 cpu: nothing else fits; the same workload with all its pods
    counted would have been over the quota."""
    first = simulate(single_variable_pod_set())
    objects = first.objects_after(single_variable_pod_set())
    objects.append(pending("next", "sales", 1).obj())
    result = one_cycle(objects)
    assert result.admitted == []
    assert [p.workload.name for p in result.pending] == ["next"]


def test_partial_admission_keeps_the_flavor_search() -> None:
    """Reduced counts go through the whole flavor search: with two flavors the reduced pod set may
    land on the second one."""
    cq = cluster_queue("cq", {"small": quota(4), "big": quota(6)})
    objects = scenario(
        [cq],
        admitted("busy", "cq", 4, flavor="small"),
        with_min_count(pending("new", "cq", 1, count=10), 3),
        flavors=("small", "big"),
    )
    got = first_cycle(objects, "engine")
    assert got.admitted["new"] == [assignment("main", "cpu", "big", "6", 6)]


# -- properties ----------------------------------------------------------------------------------------


@st.composite
def partial_cases(draw: st.DrawFn) -> tuple[int, int, list[tuple[int, int | None, int]]]:
    """(quota, used, pod sets as (count, minCount, cpu per pod))."""
    nominal = draw(st.integers(1, 40))
    used = draw(st.integers(0, nominal))
    pod_sets = []
    for _ in range(draw(st.integers(1, 3))):
        count = draw(st.integers(1, 10))
        min_count = draw(st.none() | st.integers(1, count))
        pod_sets.append((count, min_count, draw(st.integers(1, 3))))
    return nominal, used, pod_sets


def steps(pod_sets: list[tuple[int, int | None, int]], step: int) -> list[int]:
    """Kueue's PodSetReducer counts at a search index: each pod set gives up its share of `step`."""
    slack = [count - (min_count if min_count is not None else count) for count, min_count, _ in pod_sets]
    total = sum(slack)
    return [count - spare * step // total for (count, _, _), spare in zip(pod_sets, slack, strict=True)]


@pytest.mark.slow
@given(partial_cases())
def test_partial_admission_never_goes_below_min_count_nor_over_quota(
    case: tuple[int, int, list[tuple[int, int | None, int]]],
) -> None:
    nominal, used, pod_sets = case
    wl = with_pod_sets(workload("new", queue="cq", cpu=1), *((f"ps{i}", c, m) for i, (c, m, _) in enumerate(pod_sets)))
    for i, (_, _, cpu) in enumerate(pod_sets):
        wl.body["spec"]["podSets"][i]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = str(cpu)
    objects = scenario([cluster_queue("cq", nominal)], *([admitted("used", "cq", used)] if used else []), wl)
    result = one_cycle(objects)
    free = nominal - used
    floor = sum((m if m is not None else c) * cpu for c, m, cpu in pod_sets)
    if not result.admitted:
        assert floor > free, "admissible at the minimum counts, yet not admitted"
        return
    (admission,) = result.admitted
    counts = [int(str(ps["count"])) for ps in admission.pod_sets]
    for n, (count, min_count, cpu), ps in zip(counts, pod_sets, admission.pod_sets, strict=True):
        assert (min_count if min_count is not None else count) <= n <= count
        assert ps["resourceUsage"] == {"cpu": str(n * cpu)}
    assert sum(n * cpu for n, (_, _, cpu) in zip(counts, pod_sets, strict=True)) <= free
    full = [count for count, _, _ in pod_sets]
    if counts != full:
        # The largest counts along Kueue's search: the step before does not fit.
        total = sum(count - (m if m is not None else count) for count, m, _ in pod_sets)
        (step,) = [s for s in range(total + 1) if steps(pod_sets, s) == counts][:1]
        before = steps(pod_sets, step - 1)
        assert sum(n * cpu for n, (_, _, cpu) in zip(before, pod_sets, strict=True)) > free
