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

from qosched.cluster.job import MAX_RUN_S, JobSpec
from qosched.cluster.spec import MAX_NODES, MAX_WORKERS_PER_NODE
from qosched.cluster.throughput import ThroughputModel
from qosched.core.bounds import COUNT_LIMIT, LATEST_TIME_S
from qosched.core.errors import InputError

# Share of jobs asking for 1, 2, 4, 8, 16 workers: the shape of the Microsoft ITP trace that
# ElasticFlow's generator samples from (mostly single-GPU jobs, a tail of whole nodes).
REQUEST_MIX = ((1, 0.83), (2, 0.03), (4, 0.03), (8, 0.10), (16, 0.01))


#: The most jobs one generated trace holds (ten times the largest trace simulated in the benches).
MAX_JOBS = 1_000_000
#: The most workers a cluster may have (``qosched.cluster.spec``).
MAX_CLUSTER_WORKERS = MAX_NODES * MAX_WORKERS_PER_NODE
#: Offered loads from a thousandth to a thousand times what the cluster serves: a thousandth
#: already leaves nearly every job alone on the cluster, a thousand times already submits them
#: all at once; beyond either end only the arithmetic changes (gaps overflow or vanish).
LOAD_RANGE = (1e-3, 1e3)
#: ln(7 days / 60 s), the default range durations are clipped to, is 9.2: at sigma 10 one
#: standard deviation already spans it, so a wider sigma only moves more jobs onto its ends (and
#: exp() of sigma times a normal draw overflows from about 700).
MAX_DURATION_SIGMA = 10.0
#: Deadlines from a thousandth to a hundred run times after submission. A thousandth is already
#: a deadline no job can meet; a much smaller one can round onto the submission time itself (at
#: year-9999 times a float's step is 3e-5 s). A hundred run times constrains nothing: such a job
#: is best effort.
TIGHTNESS_RANGE = (1e-3, 100.0)
#: The longest run a trace may hold (``job.MAX_RUN_S``, 366 days); at the fastest speed a table
#: may give (``throughput.MAX_SPEED``) that stays below 2**53 iterations.
MAX_DURATION_S = MAX_RUN_S


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
        low_load, high_load = LOAD_RANGE
        low_tightness, high_tightness = TIGHTNESS_RANGE
        checks = {
            "jobs": (1 <= self.jobs <= MAX_JOBS, f"1 to {MAX_JOBS:,}"),
            "load": (low_load <= self.load <= high_load, f"{low_load:g} to {high_load:g}"),
            "cluster_workers": (
                1 <= self.cluster_workers <= MAX_CLUSTER_WORKERS,
                f"1 to {MAX_CLUSTER_WORKERS:,} (the largest cluster)",
            ),
            "min_duration_s": (
                0 < self.min_duration_s <= self.max_duration_s <= MAX_DURATION_S,
                f"0 < min_duration_s <= max_duration_s <= {MAX_DURATION_S:,.0f} s (366 days)",
            ),
            # Outside the clip range most jobs would get the clip's value, not a lognormal.
            "median_duration_s": (
                self.min_duration_s <= self.median_duration_s <= self.max_duration_s,
                f"seconds from min_duration_s {self.min_duration_s:g} "
                f"to max_duration_s {self.max_duration_s:g}",
            ),
            "duration_sigma": (
                0 <= self.duration_sigma <= MAX_DURATION_SIGMA,
                f"0 to {MAX_DURATION_SIGMA:g}",
            ),
            "tightness": (
                low_tightness <= self.tightness[0] <= self.tightness[1] <= high_tightness,
                f"{low_tightness:g} <= LO <= HI <= {high_tightness:g}",
            ),
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
        work = duration * curve.rate(workers)
        if not work < COUNT_LIMIT:  # only a table built in code, unbounded, gets here
            raise InputError(
                f"{model} at batch size {batch}: {duration:g} s at {curve.rate(workers):g} "
                "iterations/s is 2**53 iterations or more",
                field="max_duration_s",
            )
        iterations = max(1, round(work))
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
        # A trace holds times within year 9999 only: a few jobs at a tiny load on a small cluster
        # can still spread past it, which no bound on one option alone rules out.
        if submit > LATEST_TIME_S:
            raise InputError(
                f"job {index} would arrive after year 9999: {config.jobs:,} jobs at load "
                f"{config.load:g} on {config.cluster_workers:,} workers; raise the load, or "
                "give fewer jobs or more workers",
                field="load",
            )
        if deadline is not None and deadline > LATEST_TIME_S:
            raise InputError(
                f"job {index}'s deadline would fall after year 9999; lower the tightness or "
                "raise the load",
                field="tightness",
            )
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
