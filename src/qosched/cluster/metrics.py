"""What a simulation achieved: deadline satisfactory ratio, JCTs, utilisation, re-allocations.

Completion times compared across policies are taken over the jobs every compared policy
finished (`summarize_runs`): a policy that declines the jobs it would finish late averages over
fewer, easier jobs than one that runs them all, and its plain ``avg_jct_s`` flatters it."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from qosched.cluster.simulator import JobOutcome, SimResult


@dataclass(frozen=True, slots=True)
class JctStats:
    count: int
    mean_s: float | None
    median_s: float | None
    p95_s: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> JctStats:
        if not values:
            return cls(0, None, None, None)
        array = np.asarray(values, dtype=float)
        return cls(
            len(values),
            float(array.mean()),
            float(np.median(array)),
            float(np.percentile(array, 95)),
        )


@dataclass(frozen=True, slots=True)
class Summary:
    policy: str
    jobs: int
    deadline_jobs: int
    best_effort_jobs: int
    deadline_met: int
    deadline_satisfactory_ratio: float | None
    accepted: int
    declined: int
    avg_jct_s: float | None
    common_jobs: int
    common_jct_s: float | None
    best_effort_jct_s: float | None
    jct_deadline: JctStats
    jct_best_effort: JctStats
    utilization: float | None
    makespan_s: float
    reallocations: int
    decisions: int
    wall_s: float

    def to_json(self) -> dict:
        """The JSON of ``qosched sim cluster --json``, keys in the order docs/contracts.md gives."""
        data = asdict(self)
        return {
            "policy": data.pop("policy"),
            "jobs": data.pop("jobs"),
            "deadline_satisfactory_ratio": data.pop("deadline_satisfactory_ratio"),
            "accepted": data.pop("accepted"),
            "declined": data.pop("declined"),
            "avg_jct_s": data.pop("avg_jct_s"),
            "common_jobs": data.pop("common_jobs"),
            "common_jct_s": data.pop("common_jct_s"),
            "best_effort_jct_s": data.pop("best_effort_jct_s"),
            "gpu_utilization": data.pop("utilization"),
            "wall_s": data.pop("wall_s"),
            **data,
        }


def allocated_worker_seconds(result: SimResult) -> float:
    """Integral of allocated workers over the allocation timeline."""
    timeline = result.allocation_timeline
    return sum(workers * (timeline[i + 1][0] - t) for i, (t, workers) in enumerate(timeline[:-1]))


def finished_by_all(results: Sequence[SimResult]) -> frozenset[str]:
    """The jobs every run finished (declined and unfinished jobs of any run left out)."""
    if not results:
        return frozenset()
    sets = [{o.job_id for o in r.outcomes if o.finish_s is not None} for r in results]
    return frozenset(set.intersection(*sets))


def summarize_runs(results: Sequence[SimResult]) -> list[Summary]:
    """One summary per run, their common completion times over the jobs every run finished."""
    common = finished_by_all(results)
    return [summarize(r, common) for r in results]


def summarize(result: SimResult, common: frozenset[str] | None = None) -> Summary:
    """Metrics of one run. A declined deadline job counts as not satisfied. ``common``: the
    jobs the common completion times are taken over (`finished_by_all` of the runs compared);
    None, alone, takes the jobs this run finished."""
    outcomes = result.outcomes
    deadline = [o for o in outcomes if o.deadline_s is not None]
    best_effort = [o for o in outcomes if o.deadline_s is None]
    met = sum(o.met_deadline for o in deadline)
    finished = [o for o in outcomes if o.finish_s is not None]
    makespan = _makespan(outcomes, finished)
    shared = _shared(result, finished, common)
    declined = sum(o.declined for o in outcomes)
    return Summary(
        policy=result.policy,
        jobs=len(outcomes),
        deadline_jobs=len(deadline),
        best_effort_jobs=len(best_effort),
        deadline_met=met,
        deadline_satisfactory_ratio=met / len(deadline) if deadline else None,
        accepted=len(outcomes) - declined,
        declined=declined,
        avg_jct_s=JctStats.of([o.jct_s for o in finished]).mean_s,
        common_jobs=len(shared),
        common_jct_s=JctStats.of([o.jct_s for o in shared]).mean_s,
        best_effort_jct_s=JctStats.of(_jcts(shared, best_effort=True)).mean_s,
        jct_deadline=JctStats.of(_jcts(deadline)),
        jct_best_effort=JctStats.of(_jcts(best_effort)),
        utilization=_utilization(result, makespan),
        makespan_s=makespan,
        reallocations=sum(o.reallocations for o in outcomes),
        decisions=result.decisions,
        wall_s=result.wall_s,
    )


def _makespan(outcomes: Sequence[JobOutcome], finished: Sequence[JobOutcome]) -> float:
    """From the first submission to the last finish (0 with nothing finished)."""
    start = min(o.submit_s for o in outcomes) if outcomes else 0.0
    return max((o.finish_s for o in finished), default=start) - start


def _shared(
    result: SimResult, finished: list[JobOutcome], common: frozenset[str] | None
) -> list[JobOutcome]:
    """The finished jobs the common completion times are taken over; every job of ``common``
    must be among them."""
    if common is None:
        return finished
    unknown = common - {o.job_id for o in finished}
    if unknown:
        raise ValueError(
            f"{result.policy} did not finish {len(unknown)} of the common jobs "
            f"(e.g. {min(unknown)!r}): the common set is of the jobs every run finished"
        )
    return [o for o in finished if o.job_id in common]


def _jcts(outcomes: Sequence[JobOutcome], *, best_effort: bool = False) -> list[float]:
    """The completion times of the jobs of ``outcomes`` that finished (with ``best_effort``,
    of those without a deadline)."""
    return [
        o.jct_s
        for o in outcomes
        if o.finish_s is not None and not (best_effort and o.deadline_s is not None)
    ]


def _utilization(result: SimResult, makespan: float) -> float | None:
    """Allocated worker-seconds over the cluster's capacity during the makespan."""
    if makespan <= 0:
        return None
    return allocated_worker_seconds(result) / (result.cluster.total_workers * makespan)


JOB_CSV_HEADER = (
    "job_id",
    "model",
    "submit_s",
    "deadline_s",
    "requested_gpus",
    "declined",
    "start_s",
    "finish_s",
    "jct_s",
    "met_deadline",
    "gpu_seconds",
    "reallocations",
)


def write_job_csv(result: SimResult, path: str | Path) -> None:
    """One row per job, in trace order; on a cluster of several GPU types a last column,
    ``gpu_type``: the types the job ran on, ``+``-separated in the order of first use."""
    typed = bool(result.cluster.gpu_types)

    def cell(value: object) -> object:
        return "" if value is None else value

    with Path(path).open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow((*JOB_CSV_HEADER, "gpu_type") if typed else JOB_CSV_HEADER)
        for o in result.outcomes:
            writer.writerow(
                [
                    o.job_id,
                    o.model,
                    o.submit_s,
                    cell(o.deadline_s),
                    o.requested_workers,
                    int(o.declined),
                    cell(o.start_s),
                    cell(o.finish_s),
                    cell(o.jct_s),
                    "" if o.deadline_s is None else int(o.met_deadline),
                    round(o.worker_seconds, 3),
                    o.reallocations,
                    *(("+".join(o.gpu_types),) if typed else ()),
                ]
            )
