"""Fair sharing's status and metrics (issue 17, items 1 and 6): status.fairSharing.weightedShare
on ClusterQueues and Cohorts as Kueue's reconcilers write it (v0.19.2
pkg/controller/core/clusterqueue_controller.go and cohort_controller.go: the share rounded up,
INT64_MAX when infinite, only while fair sharing is on, removed while off), the weighted-share
gauges, and the --fair-sharing flags of run, simulate and explain."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pytest
from click.testing import CliRunner

from builders import NOW, admitted, cache_of, cluster_queue, cohort, parse, pending, scenario
from preemption_operator.api import kinds
from preemption_operator.cli import cli
from preemption_operator.controller import queue_status
from preemption_operator.controller.metrics import Metrics
from preemption_operator.engine import fair_sharing as fs
from preemption_operator.engine.cache import Cache
from unit.fake_api import object_path
from unit.test_write_path import Harness

ON = fs.FairSharing(enabled=True)


def lending_tree(weight: str | None = None) -> list[dict[str, Any]]:
    """`mine` (2 cpu) borrows 3 of `lender`'s 8 in cohort `org`, under root `top` (no quota)."""
    mine = cluster_queue("mine", 2, cohort="org")
    if weight is not None:
        mine["spec"]["fairSharing"] = {"weight": weight}
    return scenario(
        [mine, cluster_queue("lender", 8, cohort="org"), cohort("org", parent="top"), cohort("top")],
        admitted("w1", "mine", 3),
        admitted("w2", "mine", 2),
    )


def test_shares_are_computed_only_with_fair_sharing_on() -> None:
    cache = Cache()
    cache.load(parse(lending_tree()))
    assert queue_status.weighted_shares(cache.snapshot(NOW)) == ({}, {})
    cache = Cache(ON)
    cache.load(parse(lending_tree()))
    queues, cohorts = queue_status.weighted_shares(cache.snapshot(NOW))
    assert queues == {"mine": 300.0, "lender": 0.0}  # (5-2)*1000/10
    assert cohorts == {"org": 0.0, "top": 0.0}


def test_cluster_queue_status_carries_the_share_only_when_on() -> None:
    cache = Cache(ON)
    cache.load(parse(lending_tree("0.5")))
    snapshot = cache.snapshot(NOW)
    cq = snapshot.cluster_queues["mine"]
    on = queue_status.cluster_queue_status(cq, 0, None, NOW, 1, share=600.0000001)
    assert on["fairSharing"] == {"weightedShare": 601}
    off = queue_status.cluster_queue_status(cq, 0, on, NOW, 1)
    assert "fairSharing" not in off
    infinite = queue_status.cluster_queue_status(cq, 0, None, NOW, 1, share=math.inf)
    assert infinite["fairSharing"] == {"weightedShare": 9223372036854775807}


def test_cohort_status() -> None:
    assert queue_status.cohort_status(None, None) == {}
    assert queue_status.cohort_status(None, {"fairSharing": {"weightedShare": 3}}) == {}
    assert queue_status.cohort_status(0.0, None) == {"fairSharing": {"weightedShare": 0}}
    assert queue_status.cohort_status(12.5, {}) == {"fairSharing": {"weightedShare": 13}}


def test_a_cohort_share_is_its_share_within_its_parent() -> None:
    objects = scenario(
        [
            cluster_queue("a", 1, cohort="left"),
            cohort("left", parent="root"),
            cohort("root", None, 4),
            cluster_queue("b", 0, cohort="root"),
        ],
        admitted("w", "a", 3),
    )
    cache = Cache(ON)
    cache.load(parse(objects))
    queues, cohorts = queue_status.weighted_shares(cache.snapshot(NOW))
    # The tree holds 5 (root's 4 and a's 1). a borrows 2 of the 5 left can reach; left, holding
    # only a's 1, borrows the same 2 of root's 5; root has no parent and so no share.
    assert queues["a"] == 400.0
    assert cohorts == {"left": 400.0, "root": 0.0}


# -- the operator writes them ------------------------------------------------------------------------


def _status(h: Harness, kind: kinds.Kind, name: str) -> dict[str, Any]:
    body = h.api.objects[object_path({"kind": kind.name, "metadata": {"name": name}})]
    return body.get("status") or {}


async def test_the_operator_writes_shares_on_queues_and_cohorts() -> None:
    h = Harness(lending_tree(), fair_sharing=ON)
    await h.s.publisher.publish(datetime.now(UTC))
    assert _status(h, kinds.ClusterQueue, "mine")["fairSharing"] == {"weightedShare": 300}
    assert _status(h, kinds.ClusterQueue, "lender")["fairSharing"] == {"weightedShare": 0}
    assert _status(h, kinds.Cohort, "org") == {"fairSharing": {"weightedShare": 0}}
    assert (
        h.metrics.registry.get_sample_value(
            "preemption_operator_cluster_queue_weighted_share", {"cluster_queue": "mine", "cohort": "org"}
        )
        == 300.0
    )
    assert (
        h.metrics.registry.get_sample_value(
            "kueue_cluster_queue_weighted_share",
            {"cluster_queue": "mine", "cohort": "org", "replica_role": "standalone"},
        )
        == 300.0
    )
    assert (
        h.metrics.registry.get_sample_value(
            "kueue_cohort_weighted_share", {"cohort": "org", "replica_role": "standalone"}
        )
        == 0.0
    )
    writes = len(h.api.history)
    await h.s.publisher.publish(datetime.now(UTC))
    assert len(h.api.history) == writes  # nothing changed: nothing sent


async def test_with_fair_sharing_off_no_share_is_written_and_cohorts_are_left_alone() -> None:
    h = Harness(lending_tree())
    await h.s.publisher.publish(datetime.now(UTC))
    assert "fairSharing" not in _status(h, kinds.ClusterQueue, "mine")
    assert _status(h, kinds.Cohort, "org") == {}
    text = "\n".join(str(m.name) for m in h.metrics.registry.collect() for _ in m.samples)
    assert "weighted_share" not in text


def test_metric_series_of_gone_queues_are_removed_and_infinity_is_nan() -> None:
    metrics = Metrics()
    metrics.weighted_shares({"a": ("org", math.inf), "b": ("org", 1.5)}, {"org": math.inf})
    got = metrics.registry.get_sample_value(
        "preemption_operator_cluster_queue_weighted_share", {"cluster_queue": "a", "cohort": "org"}
    )
    assert got is not None and math.isnan(got)
    assert (
        metrics.registry.get_sample_value(
            "kueue_cohort_weighted_share", {"cohort": "org", "replica_role": "standalone"}
        )
        == math.inf
    )
    metrics.weighted_shares({"b": ("org", 2.0)}, {})
    assert (
        metrics.registry.get_sample_value(
            "preemption_operator_cluster_queue_weighted_share", {"cluster_queue": "a", "cohort": "org"}
        )
        is None
    )
    assert (
        metrics.registry.get_sample_value(
            "kueue_cohort_weighted_share", {"cohort": "org", "replica_role": "standalone"}
        )
        is None
    )
    assert (
        metrics.registry.get_sample_value(
            "kueue_cluster_queue_weighted_share", {"cluster_queue": "b", "cohort": "org", "replica_role": "standalone"}
        )
        == 2.0
    )


# -- the flags ---------------------------------------------------------------------------------------


@pytest.fixture
def scenario_dir(tmp_path: Any) -> Any:
    import yaml

    objects = scenario([cluster_queue("cq", 2)], pending("w", "cq", 1))
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(objects))
    return tmp_path


@pytest.mark.parametrize("command", ["simulate", "explain"])
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("Bogus", "unknown strategy 'Bogus'"),
        ("LessThanInitialShare,LessThanOrEqualToFinalShare", "is not a supported list"),
    ],
)
def test_bad_strategies_exit_2_naming_the_flag(scenario_dir: Any, command: str, value: str, message: str) -> None:
    extra = ["--workload", "default/w"] if command == "explain" else []
    result = CliRunner().invoke(cli, [command, str(scenario_dir), *extra, "--fair-sharing-strategies", value])
    assert result.exit_code == 2
    assert "error: --fair-sharing-strategies:" in result.output
    assert message in result.output


def test_run_refuses_bad_strategies_before_connecting() -> None:
    result = CliRunner().invoke(cli, ["run", "--fair-sharing-strategies", "LessThanFinalShare"])
    assert result.exit_code == 2
    assert "error: --fair-sharing-strategies: unknown strategy 'LessThanFinalShare'" in result.output


@pytest.mark.parametrize(
    "flags",
    [[], ["--fair-sharing"], ["--fair-sharing-strategies", "LessThanInitialShare"]],
)
def test_simulate_accepts_the_flags(scenario_dir: Any, flags: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from preemption_operator.offline import simulate as simulation

    seen: list[fs.FairSharing] = []
    real = simulation.run

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["fair_sharing"])
        return real(*args, **kwargs)

    monkeypatch.setattr(simulation, "run", spy)
    result = CliRunner().invoke(cli, ["simulate", str(scenario_dir), *flags])
    assert result.exit_code == 0, result.output
    expected = {
        0: fs.OFF,
        1: fs.FairSharing(enabled=True),
        2: fs.FairSharing(enabled=True, strategies=("LessThanInitialShare",)),
    }[len(flags)]
    assert seen == [expected]


def test_classic_simulation_is_unchanged_by_the_switch() -> None:
    """Fair sharing on computes shares; until fair ordering and preemption come, decisions are the same."""
    from preemption_operator.offline.simulate import run

    objects = parse(lending_tree()) + parse([pending("p", "lender", 8)])
    off = run(objects, NOW).to_dict()
    on = run(objects, NOW, fair_sharing=ON).to_dict()
    assert off == on
    assert cache_of(lending_tree()).fair_sharing == fs.OFF
