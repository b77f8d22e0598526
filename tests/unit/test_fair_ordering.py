"""Admission order under fair sharing (`ordering.tournament`, Kueue v0.19.2's
`pkg/scheduler/fair_sharing_iterator.go`): at every cohort the child whose share would be lowest
once its head is admitted goes first; then a head that would not borrow on what it asks
(FairSharingPrioritizeNonBorrowing), higher priority, older. The tournament runs again after each
decision, against the usage the earlier ones left. With fair sharing off the classic order stays.

Each setup leaves room for one of two heads only, so the order decides who is admitted.
"""

from __future__ import annotations

from builders import (
    T0,
    Obj,
    WorkloadBuilder,
    admitted,
    cluster_queue,
    cohort,
    one_cycle,
    pending,
    resource_group,
    scenario,
    seconds,
    with_resource_groups,
)
from preemption_operator.engine import fair_sharing as fs
from preemption_operator.engine.ordering import Contender, tournament
from preemption_operator.engine.scheduler import NO_LONGER_FITS

ON = fs.FairSharing(enabled=True)


def weighted(obj: Obj, weight: str) -> Obj:
    obj["spec"]["fairSharing"] = {"weight": weight}
    return obj


def admitted_names(objects: list[Obj], fair_sharing: fs.FairSharing = fs.OFF) -> list[str]:
    result = one_cycle(objects, fair_sharing=fair_sharing)
    return [a.workload.name for a in result.admitted]


def two_borrowers(*heads: WorkloadBuilder, weights: dict[str, str] | None = None) -> list[Obj]:
    """Cohort `all`: a and b (3 cpu), lender (2 cpu, empty); a uses 4 (borrows 1), b uses 3; one
    cpu is free."""
    cqs = [
        cluster_queue("a", 3, cohort="all"),
        cluster_queue("b", 3, cohort="all"),
        cluster_queue("lender", 2, cohort="all"),
    ]
    for cq in cqs:
        name = cq["metadata"]["name"]
        if weights and name in weights:
            weighted(cq, weights[name])
    return scenario(cqs, admitted("a1", "a", 4), admitted("b1", "b", 3), *heads)


def test_lowest_share_after_admission_goes_first() -> None:
    """b's share once its head is admitted (1 borrowed) is below a's (2): b's head is admitted
    although a's has the higher priority and is older; classic ordering admits a's."""
    objects = two_borrowers(
        pending("a-next", "a", 1, priority=10, created=T0),
        pending("b-next", "b", 1, priority=0, created=T0 + seconds(10)),
    )
    assert admitted_names(objects, ON) == ["b-next"]
    assert admitted_names(objects) == ["a-next"]
    pending_reasons = {p.workload.name: p.message for p in one_cycle(objects, fair_sharing=ON).pending}
    assert pending_reasons["a-next"] == NO_LONGER_FITS


def test_weight_lowers_the_share() -> None:
    """With weight 4, a's share once admitted (2 borrowed / 4) is below b's (1 / 1)."""
    objects = two_borrowers(pending("a-next", "a", 1), pending("b-next", "b", 1), weights={"a": "4"})
    assert admitted_names(objects, ON) == ["a-next"]


def test_equal_shares_fall_back_to_priority_then_age() -> None:
    """a and b both use 3 and borrow 1 once admitted: equal shares, so priority decides, then the
    creation time."""
    base = [
        cluster_queue("a", 3, cohort="all"),
        cluster_queue("b", 3, cohort="all"),
        cluster_queue("lender", 1, cohort="all"),
    ]
    full = [admitted("a1", "a", 3), admitted("b1", "b", 3)]
    by_priority = scenario(
        base,
        *full,
        pending("a-next", "a", 1, priority=0, created=T0),
        pending("b-next", "b", 1, priority=5, created=T0 + seconds(5)),
    )
    assert admitted_names(by_priority, ON) == ["b-next"]
    by_age = scenario(
        base,
        *full,
        pending("a-next", "a", 1, created=T0 + seconds(5)),
        pending("b-next", "b", 1, created=T0),
    )
    assert admitted_names(by_age, ON) == ["b-next"]


def test_tournament_runs_at_every_level_of_the_tree() -> None:
    """root ⊃ left (a1, a2), right (b), lender (4 cpu); two cpu are free. At root, left's share
    once a2's head is admitted (3 borrowed of 10) is above right's once b's is (2 of 10): b's head
    goes first and takes the room. Classic ordering (same borrowing level) takes a2's, the higher
    priority."""
    cqs = [
        cluster_queue("a1", 2, cohort="left"),
        cluster_queue("a2", 2, cohort="left"),
        cluster_queue("b", 2, cohort="right"),
        cluster_queue("lender", 4, cohort="root"),
    ]
    cohorts = [cohort("root"), cohort("left", "root"), cohort("right", "root")]
    objects = scenario(
        cqs,
        admitted("a1-used", "a1", 4),
        admitted("a2-used", "a2", 2),
        admitted("b-used", "b", 2),
        pending("a2-next", "a2", 1, priority=10),
        pending("b-next", "b", 2),
        cohorts=cohorts,
    )
    assert admitted_names(objects, ON) == ["b-next"]
    assert admitted_names(objects) == ["a2-next"]


def test_head_not_borrowing_on_what_it_asks_goes_first() -> None:
    """Kueue's FairSharingPrioritizeNonBorrowing: a borrows 3 of flavor `x` (share 3000/7) but its
    head gets `y` within a's nominal; b's head would borrow 1 of `y` (share 1000/7). The lower
    share loses to not borrowing: a's head goes first and takes the last cpu of `y`."""
    a = with_resource_groups(cluster_queue("a", None, cohort="all"), resource_group({"x": {"cpu": 1}, "y": {"cpu": 2}}))
    b = with_resource_groups(cluster_queue("b", None, cohort="all"), resource_group({"x": {"cpu": 4}, "y": {"cpu": 0}}))
    objects = scenario(
        [a, b],
        admitted("a-x", "a", 4, flavor="x"),
        admitted("b-x", "b", 1, flavor="x"),
        admitted("a-y", "a", 1, flavor="y"),
        pending("a-next", "a", 1),
        pending("b-next", "b", 1, priority=100),
        flavors=("x", "y"),
    )
    result = one_cycle(objects, fair_sharing=ON)
    assert [a.workload.name for a in result.admitted] == ["a-next"]
    assert result.admitted[0].pod_sets[0]["flavors"] == {"cpu": "y"}


def test_tournament_reads_shares_from_the_nodes_and_leaves_them_alone() -> None:
    """The function under the scheduler: shares with each head's usage added, nodes restored."""
    from builders import cache_of

    objects = two_borrowers(pending("a-next", "a", 1), pending("b-next", "b", 1))
    snapshot = cache_of(objects, ON).snapshot(T0)
    a, b = snapshot.cluster_queues["a"], snapshot.cluster_queues["b"]
    before = (dict(a.node.usage), dict(b.node.usage), dict(a.node.parent.usage))  # type: ignore[union-attr]
    heads = {wl.name: wl for wls in snapshot.pending.values() for wl in wls}
    contenders = [
        Contender(heads["a-next"], a.node, {("default", "cpu"): 1000}, False),
        Contender(heads["b-next"], b.node, {("default", "cpu"): 1000}, False),
    ]
    assert tournament(contenders) == 1
    assert tournament([contenders[0], Contender(heads["b-next"], b.node, {("default", "cpu"): 1000}, True)]) == 1
    waiting_a = Contender(heads["a-next"], a.node, {("default", "cpu"): 1000}, True)
    assert tournament([waiting_a, contenders[1]]) == 0  # a preemptor waiting for its victims first
    assert (dict(a.node.usage), dict(b.node.usage), dict(a.node.parent.usage)) == before  # type: ignore[union-attr]
