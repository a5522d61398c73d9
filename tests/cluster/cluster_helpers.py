"""Builders shared by the cluster tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

from qosched.cluster.job import JobSpec


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
