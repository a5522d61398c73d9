"""Builders shared by the cluster tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

from qosched.cluster.job import JobSpec

# DESIGN.md: `qosched sim cluster --json` prints these fields first, in this order, on any cluster.
CONTRACT_FIELDS = (
    "policy",
    "jobs",
    "deadline_satisfactory_ratio",
    "accepted",
    "declined",
    "avg_jct_s",
    "gpu_utilization",
    "wall_s",
)


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
