"""Synthetic traces: Poisson arrivals, a model mix from the throughput tables, lognormal durations.

``duration`` is how long a job would run alone on the workers it requests; its iteration count is
that duration times the measured speed there. Its deadline is ``submit + tightness * duration``
with tightness drawn uniformly from a range (ElasticFlow's generator uses 0.5-1.5). Arrivals are
spaced so that the offered load, requested worker-seconds over capacity-seconds, is ``load``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qosched.cluster.job import JobSpec
from qosched.cluster.throughput import ThroughputModel
from qosched.core.errors import InputError

# Share of jobs asking for 1, 2, 4, 8, 16 workers: the shape of the Microsoft ITP trace that
# ElasticFlow's generator samples from (mostly single-GPU jobs, a tail of whole nodes).
REQUEST_MIX = ((1, 0.83), (2, 0.03), (4, 0.03), (8, 0.10), (16, 0.01))


#: The most jobs one generated trace holds (ten times the largest trace simulated in the benches).
MAX_JOBS = 1_000_000


@dataclass(frozen=True, slots=True)
class GeneratorConfig:
    jobs: int = 100
    load: float = 1.0
    cluster_workers: int = 128
    median_duration_s: float = 3600.0
    duration_sigma: float = 1.0
    min_duration_s: float = 60.0
    max_duration_s: float = 7 * 24 * 3600.0
    tightness: tuple[float, float] = (0.5, 1.5)
    best_effort_fraction: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        finite = math.isfinite
        checks = {
            "jobs": (1 <= self.jobs <= MAX_JOBS, f"1 to {MAX_JOBS:,}"),
            "load": (self.load > 0 and finite(self.load), "a finite number > 0"),
            "cluster_workers": (self.cluster_workers >= 1, ">= 1"),
            "median_duration_s": (
                self.median_duration_s > 0 and finite(self.median_duration_s),
                "finite seconds > 0",
            ),
            "duration_sigma": (0 <= self.duration_sigma < math.inf, "a finite number >= 0"),
            "min_duration_s": (
                0 < self.min_duration_s <= self.max_duration_s < math.inf,
                "0 < min_duration_s <= max_duration_s, finite",
            ),
            "tightness": (0 < self.tightness[0] <= self.tightness[1] < math.inf, "0 < LO <= HI"),
            "best_effort_fraction": (0.0 <= self.best_effort_fraction <= 1.0, "in [0, 1]"),
            "seed": (isinstance(self.seed, int) and self.seed >= 0, "a whole number >= 0"),
        }
        for name, (ok, expected) in checks.items():
            if not ok:
                raise InputError(f"expected {expected}, got {getattr(self, name)!r}", field=name)


def generate_trace(config: GeneratorConfig, throughputs: ThroughputModel) -> list[JobSpec]:
    """Seeded: the same config and tables give the same jobs."""
    rng = np.random.default_rng(config.seed)
    choices = [(m, b) for m in throughputs.models for b in throughputs.batch_sizes(m)]
    if not choices:
        raise InputError("throughput tables are empty")
    counts = np.array([g for g, _ in REQUEST_MIX])
    weights = np.array([w for _, w in REQUEST_MIX])
    weights = weights / weights.sum()

    bodies = []
    for _ in range(config.jobs):
        model, batch = choices[rng.integers(len(choices))]
        curve = throughputs.curve(model, batch)
        wanted = int(rng.choice(counts, p=weights))
        usable = [g for g in curve.usable_counts() if g <= min(wanted, config.cluster_workers)]
        if not usable:
            raise InputError(
                f"{model} at batch size {batch} has no measured speed on {config.cluster_workers} "
                "workers or fewer; remove its table or enlarge the cluster",
                field="cluster_workers",
            )
        workers = max(usable)
        duration = float(
            np.clip(
                config.median_duration_s * math.exp(config.duration_sigma * rng.standard_normal()),
                config.min_duration_s,
                config.max_duration_s,
            )
        )
        iterations = max(1, round(duration * curve.rate(workers)))
        duration = iterations / curve.rate(workers)
        tightness = rng.uniform(*config.tightness)
        best_effort = rng.random() < config.best_effort_fraction
        bodies.append((model, batch, workers, iterations, duration, tightness, best_effort))

    mean_work = float(np.mean([b[2] * b[4] for b in bodies]))
    mean_gap = mean_work / (config.load * config.cluster_workers)
    jobs, now = [], 0.0
    for index, (model, batch, workers, iterations, duration, tightness, best_effort) in enumerate(
        bodies
    ):
        if index:
            now += float(rng.exponential(mean_gap))
        submit = round(now, 3)
        deadline = None if best_effort else round(submit + max(tightness * duration, 1.0), 3)
        jobs.append(
            JobSpec(
                job_id=str(index),
                submit_s=submit,
                model=model,
                batch_size=batch,
                iterations=iterations,
                deadline_s=deadline,
                requested_workers=workers,
                duration_s=round(duration, 3),
            )
        )
    return jobs
