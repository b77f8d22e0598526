"""The pure parts of the cluster-outcome benchmark (benchmarks/cluster/): the seeded trace and the
figures computed from pods' and Jobs' timelines. No binary, no cluster."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "cluster"


def _load(name: str) -> ModuleType:
    """A module of benchmarks/cluster by path, under its own name (as the script imports it)."""
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(BENCH / f"{name}.py"):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up; manifests imports jobtrace
    spec.loader.exec_module(module)
    return module


jobtrace = _load("jobtrace")
outcome = _load("outcome")
manifests = _load("manifests")
Pod, Job = outcome.PodTimeline, outcome.JobTimeline


# ---- the trace --------------------------------------------------------------------------------


def test_the_same_seed_gives_the_same_trace_and_another_seed_another(tmp_path: Path) -> None:
    a = jobtrace.generate(7, day_seconds=120)
    b = jobtrace.generate(7, day_seconds=120)
    assert a.jobs == b.jobs and a.jobs
    assert jobtrace.generate(8, day_seconds=120).jobs != a.jobs
    path = tmp_path / "trace.json"
    a.write(path)
    assert jobtrace.Trace.read(path) == a  # the file replayed on every side is the trace itself


def test_the_mix_is_many_short_jobs_fewer_trainings_and_rare_heroes_that_take_a_rack() -> None:
    shape = jobtrace.Shape()
    trace = jobtrace.generate(1, shape=shape, day_seconds=240, load=1.0)
    counts = trace.counts()
    assert counts["short"] > 5 * counts["train"] > 5 * counts["hero"] > 0
    heroes = [j for j in trace.jobs if j.cls == "hero"]
    assert all(j.pods == shape.nodes_per_rack and j.gpus_per_pod == shape.gpus_per_node for j in heroes)
    assert all(j.topology == "cloud.provider.com/topology-rack" and j.queue == "hero" for j in heroes)
    shorts = [j for j in trace.jobs if j.cls == "short"]
    assert all(j.pods == 1 and j.gpus_per_pod in (1, 2, 4, 8) and not j.topology for j in shorts)
    assert {j.queue for j in shorts} == {"team-a", "team-b"}
    hour = 240 / 24
    trainings = [j for j in trace.jobs if j.cls == "train"]
    assert all(3 * hour <= j.runtime <= 12 * hour for j in trainings)
    assert sum(j.runtime for j in trainings) / len(trainings) > 3 * sum(j.runtime for j in shorts) / len(shorts)


def test_arrivals_are_sorted_within_the_day_and_offer_the_asked_load() -> None:
    trace = jobtrace.generate(3, day_seconds=240, load=1.0)
    arrivals = [j.arrival for j in trace.jobs]
    assert arrivals == sorted(arrivals) and arrivals[0] >= 0 and arrivals[-1] < 240
    assert len({j.name for j in trace.jobs}) == len(trace.jobs)
    offered = sum(trace.offered_gpu_seconds().values()) / (trace.shape.gpus * 240)
    assert 0.75 < offered < 1.25  # Poisson counts: near the asked load, not exactly it
    heavier = jobtrace.generate(3, day_seconds=240, load=2.0)
    assert len(heavier.jobs) > 1.6 * len(trace.jobs)


def test_a_class_draws_from_its_own_stream() -> None:
    """Changing one class's share leaves the other classes' jobs exactly as they were."""
    classes = list(jobtrace.CLASSES)
    more_heroes = tuple(c if c.name != "hero" else jobtrace.JobClass(**{**c.__dict__, "share": 0.3}) for c in classes)
    base = jobtrace.generate(5, day_seconds=120)
    other = jobtrace.generate(5, day_seconds=120, classes=more_heroes)
    key = lambda t, cls: [(j.arrival, j.pods, j.gpus_per_pod, j.runtime) for j in t.jobs if j.cls == cls]  # noqa: E731
    assert key(base, "short") == key(other, "short")
    assert len(key(other, "hero")) > len(key(base, "hero"))


def test_scaling_adds_blocks_of_the_same_racks() -> None:
    big = jobtrace.Shape.scaled(4)
    assert (big.nodes, big.racks, big.nodes_per_rack, big.gpus) == (256, 32, 8, 2048)


def test_a_trace_job_becomes_a_suspended_job_with_its_queue_priority_size_and_topology() -> None:
    job = jobtrace.TraceJob("train-00001", "train", 1.0, 4, 8, 75.0, "standard", "team-a", jobtrace.CLASSES[1].topology)
    manifest = manifests.job_manifest(job)
    assert manifest["spec"]["suspend"] is True
    assert manifest["metadata"]["labels"][manifests.QUEUE_LABEL] == "team-a"
    assert manifest["metadata"]["labels"][manifests.NODE_COUNT_LABEL] == "4"
    template = manifest["spec"]["template"]
    assert template["metadata"]["annotations"][manifests.REQUIRED_TOPOLOGY] == "cloud.provider.com/topology-rack"
    assert template["metadata"]["annotations"]["pod-complete.stage.kwok.x-k8s.io/delay"] == "75.0s"
    assert template["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert manifest["spec"]["parallelism"] == manifest["spec"]["completions"] == 4


def test_only_the_rules_side_gets_preemption_configs_and_every_side_the_same_queues() -> None:
    shape = jobtrace.Shape()
    sides = {side: manifests.queue_objects(shape, side) for side in manifests.SIDES}
    kinds = {side: [o["kind"] for o in objs] for side, objs in sides.items()}
    assert "PreemptionConfig" not in kinds["kueue"] and "PreemptionConfig" not in kinds["classic"]
    assert kinds["rules"].count("PreemptionConfig") == 2

    def queues(side: str) -> dict[str, dict[str, object]]:
        return {o["metadata"]["name"]: o["spec"] for o in sides[side] if o["kind"] == "ClusterQueue"}

    assert queues("kueue") == queues("classic") == queues("rules")
    quota = {
        n: s["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] for n, s in queues("rules").items()
    }
    assert quota == {"team-a": 224, "team-b": 224, "hero": 64} and sum(quota.values()) == shape.gpus


# ---- the figures ------------------------------------------------------------------------------


def test_allocation_counts_bound_pods_until_they_finish_or_are_gone() -> None:
    pods = [
        Pod("a", "j1", 8, bound=1.0, running=1.0, finished=5.0),
        Pod("b", "j2", 4, bound=2.0, running=2.0, deleted=3.0, gone=6.0),  # holds its GPUs while terminating
        Pod("c", "j3", 2),  # never bound
        Pod("d", "j4", 1, bound=4.0, running=4.0),  # still running at the end
    ]
    assert outcome.allocated_series(pods, [0, 1, 2, 3, 4, 5, 6, 7]) == [0, 8, 12, 12, 13, 5, 1, 1]


def test_lost_gpu_seconds_are_the_run_time_of_evicted_pods_before_their_deletion() -> None:
    pods = [
        Pod("a", "j", 8, bound=0.0, running=1.0, deleted=11.0, gone=13.0),  # 10 s x 8
        Pod("b", "j", 2, bound=0.0, running=4.0, finished=9.0, deleted=20.0),  # finished first: nothing lost
        Pod("c", "j", 4, bound=0.0, deleted=2.0, gone=2.5),  # never ran: nothing lost
    ]
    assert outcome.lost_gpu_seconds(pods) == 80.0


def test_time_to_start_is_when_all_pods_first_run_at_once() -> None:
    job = Job("hero", "hero", 2, submitted=10.0)
    pods = [
        Pod("h1", "hero", 8, running=12.0, deleted=14.0),  # first attempt: preempted before the 2nd ran
        Pod("h2", "hero", 8, running=15.0),
        Pod("h3", "hero", 8, running=18.0),
        Pod("x", "other", 8, running=11.0),
    ]
    assert outcome.time_to_start(job, pods) == 8.0
    assert outcome.time_to_start(Job("never", "hero", 1, submitted=0.0), pods) == math.inf


def test_percentiles_count_unfinished_jobs_as_infinitely_late() -> None:
    s = outcome.stats([10.0, 20.0, 30.0, 40.0, math.inf])
    assert (s.count, s.finished, s.mean, s.p50) == (5, 4, 25.0, 30.0)
    assert s.p90 == math.inf
    assert outcome.percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert math.isnan(outcome.stats([]).p50)


def test_an_outcome_gathers_utilization_completion_hero_starts_preemptions_and_losses() -> None:
    jobs = [
        Job("s1", "short", 1, submitted=0.0, completed=4.0),
        Job("t1", "train", 1, submitted=0.0, completed=None, stops=1),
        Job("h1", "hero", 1, submitted=2.0, completed=9.0),
    ]
    pods = [
        Pod("s1-a", "s1", 2, bound=0.0, running=0.0, finished=4.0),
        Pod("t1-a", "t1", 8, bound=0.0, running=0.0, deleted=3.0, gone=4.0),
        Pod("h1-a", "h1", 8, bound=4.0, running=5.0, finished=9.0),
    ]
    out = outcome.outcome("x", pods, jobs, capacity=16, day=4.0, end=10.0)
    assert out.allocated[:6] == [10, 10, 10, 10, 8, 8]
    assert out.mean_utilization_day == pytest.approx((10 * 4 + 8) / 5 / 16)
    assert out.completion["short"].p50 == 4.0 and out.completion["train"].finished == 0
    assert out.hero_start.p50 == 3.0
    assert out.preemptions == {"short": 0, "train": 1, "hero": 0}
    assert out.lost_by_class == {"short": 0.0, "train": 24.0, "hero": 0.0} and out.lost == 24.0


def test_rounds_interleave_the_sides_and_rotate_who_goes_first() -> None:
    for sibling in ("kueue", "observer", "report"):  # what bench.py imports from its own folder
        _load(sibling)
    bench = _load("bench")
    assert bench.rounds(["kueue", "classic", "rules"], 1) == [["kueue", "classic", "rules"]]
    assert bench.rounds(["kueue", "classic", "rules"], 4) == [
        ["kueue", "classic", "rules"],
        ["classic", "rules", "kueue"],
        ["rules", "kueue", "classic"],
        ["kueue", "classic", "rules"],
    ]
