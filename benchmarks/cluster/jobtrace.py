"""The job trace of the cluster-outcome benchmark: a seeded, reproducible day of GPU jobs.

A trace is a list of jobs, each with its class, arrival time, pod count, GPUs per pod and run
time, on a compressed clock (a whole "day" lasts `day_seconds` real seconds). It is written to a
JSON file once and that same file is replayed on every side, so the sides differ only in who
decides.

The classes follow what a shared GPU cluster sees: many short jobs of a few GPUs (notebooks,
evaluations, sweeps), fewer long multi-node training jobs, and rare "hero" jobs that need a whole
rack at once. Each class is given a share of the offered GPU-seconds; its arrivals are a Poisson
process whose rate makes that share (`load` x capacity x day).
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HOUR = 1 / 24
"""A run time given in hours of the trace's day, as a fraction of the day."""


@dataclass(frozen=True)
class JobClass:
    name: str
    share: float
    """Share of the offered GPU-seconds (the shares of a trace add up to 1)."""
    pods: tuple[tuple[int, float], ...]
    """(pod count, weight) choices; 0 means "one pod per node of a rack"."""
    gpus: tuple[tuple[int, float], ...]
    """(GPUs per pod, weight) choices."""
    median_hours: float
    sigma: float
    """Run time: log-normal around the median, clipped to [min_hours, max_hours]."""
    min_hours: float
    max_hours: float
    priority: str
    queues: tuple[str, ...]
    """LocalQueues (one per namespace of the same name) the class submits to, picked at random."""
    topology: str = ""
    """The topology level every pod set must fit in (`podset-required-topology`), or none."""


# The default mix. Training jobs take whole nodes inside one rack; a hero job takes a whole rack.
CLASSES: tuple[JobClass, ...] = (
    JobClass(
        "short",
        share=0.30,
        pods=((1, 1.0),),
        gpus=((1, 0.4), (2, 0.3), (4, 0.2), (8, 0.1)),
        median_hours=1.5,
        sigma=0.8,
        min_hours=0.25,
        max_hours=6,
        priority="batch",
        queues=("team-a", "team-b"),
    ),
    JobClass(
        "train",
        share=0.60,
        pods=((2, 0.6), (4, 0.4)),
        gpus=((8, 1.0),),
        median_hours=7,
        sigma=0.35,
        min_hours=3,
        max_hours=12,
        priority="standard",
        queues=("team-a", "team-b"),
        topology="cloud.provider.com/topology-rack",
    ),
    JobClass(
        "hero",
        share=0.10,
        pods=((0, 1.0),),
        gpus=((8, 1.0),),
        median_hours=3,
        sigma=0.2,
        min_hours=2,
        max_hours=4,
        priority="hero",
        queues=("hero",),
        topology="cloud.provider.com/topology-rack",
    ),
)
CLASS_NAMES = tuple(c.name for c in CLASSES)


@dataclass(frozen=True)
class Shape:
    """The cluster the trace is made for."""

    nodes: int = 64
    gpus_per_node: int = 8
    blocks: int = 2
    racks_per_block: int = 4

    @property
    def racks(self) -> int:
        return self.blocks * self.racks_per_block

    @property
    def nodes_per_rack(self) -> int:
        return self.nodes // self.racks

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @classmethod
    def scaled(cls, scale: int) -> Shape:
        """`scale` times the default cluster: more blocks of the same racks."""
        return cls(nodes=64 * scale, blocks=2 * scale)


@dataclass(frozen=True)
class TraceJob:
    name: str
    cls: str
    arrival: float
    """Seconds after the start of the replay."""
    pods: int
    gpus_per_pod: int
    runtime: float
    """Seconds each pod runs once started (kwok completes it then)."""
    priority: str
    queue: str
    topology: str = ""

    @property
    def gpus(self) -> int:
        return self.pods * self.gpus_per_pod

    @property
    def nodes(self) -> int:
        """Nodes the job spans at least (its size for the defragmentation rule)."""
        return max(1, math.ceil(self.gpus / 8))


@dataclass
class Trace:
    seed: int
    day_seconds: float
    load: float
    shape: Shape
    jobs: list[TraceJob] = field(default_factory=list)

    def counts(self) -> Counter[str]:
        return Counter(j.cls for j in self.jobs)

    def offered_gpu_seconds(self) -> dict[str, float]:
        out: dict[str, float] = dict.fromkeys(CLASS_NAMES, 0.0)
        for j in self.jobs:
            out[j.cls] = out.get(j.cls, 0.0) + j.gpus * j.runtime
        return out

    def write(self, path: Path) -> None:
        doc = {
            "seed": self.seed,
            "day_seconds": self.day_seconds,
            "load": self.load,
            "shape": asdict(self.shape),
            "jobs": [asdict(j) for j in self.jobs],
        }
        path.write_text(json.dumps(doc, indent=1) + "\n")

    @classmethod
    def read(cls, path: Path) -> Trace:
        doc: dict[str, Any] = json.loads(path.read_text())
        return cls(
            seed=doc["seed"],
            day_seconds=doc["day_seconds"],
            load=doc["load"],
            shape=Shape(**doc["shape"]),
            jobs=[TraceJob(**j) for j in doc["jobs"]],
        )


def _pick(rng: random.Random, choices: tuple[tuple[int, float], ...]) -> int:
    values, weights = zip(*choices, strict=True)
    return rng.choices(values, weights)[0]


def _runtime_hours(rng: random.Random, c: JobClass) -> float:
    return min(c.max_hours, max(c.min_hours, rng.lognormvariate(math.log(c.median_hours), c.sigma)))


def _mean_gpu_seconds(c: JobClass, shape: Shape, hour: float, samples: int = 4000) -> float:
    """The class's mean GPU-seconds per job, estimated from its own distributions (seeded: the
    rate, and so the trace, depends only on the arguments)."""
    rng = random.Random(f"mean-{c.name}")
    total = 0.0
    for _ in range(samples):
        pods = _pick(rng, c.pods) or shape.nodes_per_rack
        total += pods * _pick(rng, c.gpus) * _runtime_hours(rng, c) * hour
    return total / samples


def generate(
    seed: int = 1,
    *,
    shape: Shape | None = None,
    day_seconds: float = 300.0,
    load: float = 1.0,
    classes: tuple[JobClass, ...] = CLASSES,
) -> Trace:
    """A day of jobs: each class arrives as a Poisson process over [0, day_seconds) whose rate
    offers `load` x its share of the cluster's GPU-seconds. Each class draws from its own random
    stream (seeded by `seed` and its name), so changing one class leaves the others' jobs as they
    were."""
    shape = shape or Shape()
    hour = day_seconds * HOUR
    jobs: list[TraceJob] = []
    for c in classes:
        rng = random.Random(f"{seed}-{c.name}")
        rate = load * c.share * shape.gpus * day_seconds / _mean_gpu_seconds(c, shape, hour) / day_seconds
        t = rng.expovariate(rate)
        while t < day_seconds:
            pods = _pick(rng, c.pods) or shape.nodes_per_rack
            jobs.append(
                TraceJob(
                    name="",
                    cls=c.name,
                    arrival=round(t, 3),
                    pods=pods,
                    gpus_per_pod=_pick(rng, c.gpus),
                    runtime=round(_runtime_hours(rng, c) * hour, 1),
                    priority=c.priority,
                    queue=rng.choice(c.queues),
                    topology=c.topology,
                )
            )
            t += rng.expovariate(rate)
    jobs.sort(key=lambda j: (j.arrival, j.cls))
    named = [TraceJob(**{**asdict(j), "name": f"{j.cls}-{i:05d}"}) for i, j in enumerate(jobs)]
    return Trace(seed, day_seconds, load, shape, named)
