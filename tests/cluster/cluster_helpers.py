"""Builders shared by the cluster tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import random

from qosched.cluster.job import JobSpec
from qosched.cluster.planning import FreeProfile, Ladder, reserve


def job(
    job_id: str,
    submit: float,
    iterations: int,
    workers: int = 1,
    deadline: float | None = None,
    model: str = "m",
) -> JobSpec:
    """A batch-64 job of ``model`` (the in-memory test tables all have a batch-64 row)."""
    return JobSpec(job_id, submit, model, 64, iterations, deadline, workers)


def carved_profile(rng: random.Random, capacity: int) -> FreeProfile:
    """Free workers from 0 on, carved up by up to 12 other jobs' random reservations."""
    profile = FreeProfile(0.0, capacity)
    filler = Ladder([0.0, *(float(g) for g in range(1, capacity + 1))], range(1, capacity + 1))
    for _ in range(rng.randint(0, 12)):
        begin = rng.uniform(0.0, 500.0)
        reserve(filler, rng.randint(1, capacity), begin, begin + rng.uniform(1.0, 300.0), profile)
    return profile
