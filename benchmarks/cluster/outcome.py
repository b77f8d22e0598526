"""What happened to the cluster on one side, computed from the pods' and Jobs' timelines.

Pure: the observer records when each pod was bound, ran, finished, was deleted and went away,
and when each Job was submitted, stopped and completed (seconds since the replay started); this
module turns that into the benchmark's figures. The tests feed it synthetic timelines.

- *allocated GPUs* at time t: the GPUs requested by pods bound to a node and not yet finished
  (Succeeded/Failed) nor gone. A pod being deleted still holds its node's GPUs until it is gone.
- *completion time*: submission to the Job's `Complete` condition.
- *time to start*: submission to the first moment every pod of the Job runs at once.
- *preemptions*: a Job stopped (suspended again) after it had started.
- *GPU-seconds lost*: for each pod deleted before it finished, the time it had run x its GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

INF = math.inf


@dataclass
class PodTimeline:
    name: str
    job: str
    gpus: int
    bound: float | None = None
    running: float | None = None
    finished: float | None = None
    """Observed Succeeded or Failed."""
    deleted: float | None = None
    """Observed with a deletionTimestamp (before it finished)."""
    gone: float | None = None

    def released(self) -> float:
        """When its GPUs were free again (INF: still held at the end)."""
        ends = [t for t in (self.finished, self.gone) if t is not None]
        return min(ends) if ends else INF

    def run_end(self) -> float:
        """When it stopped doing work (finished, deleted or gone)."""
        ends = [t for t in (self.finished, self.deleted, self.gone) if t is not None]
        return min(ends) if ends else INF

    def evicted(self) -> bool:
        return self.deleted is not None and (self.finished is None or self.finished > self.deleted)


@dataclass
class JobTimeline:
    name: str
    cls: str
    pods: int
    submitted: float
    completed: float | None = None
    stops: int = 0
    """Times the Job was suspended again after it had started (preemptions)."""


@dataclass
class Stats:
    count: int
    finished: int
    mean: float
    """Over finished jobs only (NaN when none finished)."""
    p50: float
    p90: float
    """Unfinished jobs count as infinitely late: INF when they reach the percentile."""


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 1]); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def stats(durations: Sequence[float]) -> Stats:
    done = [d for d in durations if d != INF]
    return Stats(
        count=len(durations),
        finished=len(done),
        mean=sum(done) / len(done) if done else math.nan,
        p50=percentile(durations, 0.5),
        p90=percentile(durations, 0.9),
    )


def allocated_series(pods: Iterable[PodTimeline], times: Sequence[float]) -> list[int]:
    """Allocated GPUs at each of `times` (sorted): a sweep over bind and release events."""
    events: list[tuple[float, int]] = []
    for p in pods:
        if p.bound is None:
            continue
        events.append((p.bound, p.gpus))
        released = p.released()
        if released != INF:
            events.append((released, -p.gpus))
    events.sort()
    out, level, i = [], 0, 0
    for t in times:
        while i < len(events) and events[i][0] <= t:
            level += events[i][1]
            i += 1
        out.append(level)
    return out


def completion_times(jobs: Iterable[JobTimeline]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for j in jobs:
        out.setdefault(j.cls, []).append(INF if j.completed is None else j.completed - j.submitted)
    return out


def time_to_start(job: JobTimeline, pods: Iterable[PodTimeline]) -> float:
    """Submission to the first moment all of the Job's pods ran at once (INF if never)."""
    events: list[tuple[float, int]] = []
    for p in pods:
        if p.job != job.name or p.running is None:
            continue
        end = p.run_end()
        if end <= p.running:
            continue
        events.append((p.running, 1))
        if end != INF:
            events.append((end, -1))
    events.sort(key=lambda e: (e[0], e[1]))  # an end before a start at the same instant
    running = 0
    for t, step in events:
        running += step
        if running >= job.pods:
            return t - job.submitted
    return INF


def lost_gpu_seconds(pods: Iterable[PodTimeline]) -> float:
    """GPU-seconds of work thrown away: run time before the deletion of every evicted pod."""
    total = 0.0
    for p in pods:
        if p.evicted() and p.running is not None and p.deleted is not None and p.deleted > p.running:
            total += (p.deleted - p.running) * p.gpus
    return total


@dataclass
class Outcome:
    """One side's figures."""

    side: str
    capacity: int
    times: list[float]
    allocated: list[int]
    completion: dict[str, Stats]
    completion_raw: dict[str, list[float]]
    hero_start: Stats
    preemptions: dict[str, int]
    lost_by_class: dict[str, float]
    mean_utilization_day: float
    mean_utilization_all: float
    end: float
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def lost(self) -> float:
        return sum(self.lost_by_class.values())


def outcome(
    side: str,
    pods: Sequence[PodTimeline],
    jobs: Sequence[JobTimeline],
    *,
    capacity: int,
    day: float,
    end: float,
    step: float = 1.0,
    hero_class: str = "hero",
) -> Outcome:
    """The figures of one side: utilization sampled every `step` seconds over [0, end], the mean
    utilization over the trace's day and over the whole run, completion and start times, and the
    preemptions and lost GPU-seconds per job class."""
    n = int(end / step) + 1
    times = [round(i * step, 6) for i in range(n)]
    allocated = allocated_series(pods, times)

    def mean_until(limit: float) -> float:
        window = [a for t, a in zip(times, allocated, strict=True) if t <= limit]
        return sum(window) / len(window) / capacity if window else math.nan

    raw = completion_times(jobs)
    by_job = {j.name: j for j in jobs}
    pods_of: dict[str, list[PodTimeline]] = {}
    for p in pods:
        pods_of.setdefault(p.job, []).append(p)
    heroes = [time_to_start(j, pods_of.get(j.name, [])) for j in jobs if j.cls == hero_class]
    preemptions: dict[str, int] = {}
    lost: dict[str, float] = {}
    for j in jobs:
        preemptions[j.cls] = preemptions.get(j.cls, 0) + j.stops
        lost.setdefault(j.cls, 0.0)
    for name, owned in pods_of.items():
        if name in by_job:
            lost[by_job[name].cls] += lost_gpu_seconds(owned)
    return Outcome(
        side=side,
        capacity=capacity,
        times=times,
        allocated=allocated,
        completion={cls: stats(v) for cls, v in raw.items()},
        completion_raw=raw,
        hero_start=stats(heroes),
        preemptions=preemptions,
        lost_by_class=lost,
        mean_utilization_day=mean_until(day),
        mean_utilization_all=mean_until(end),
        end=end,
    )
