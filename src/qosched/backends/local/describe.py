"""A job as the API, ``qosched status`` and the page show it (``JobView``): its stored record,
and for an unfinished job what memory knows beyond the store: its iterations done, the
workers it holds, its predicted finish and where its predicted speed comes from."""

from __future__ import annotations

from collections.abc import Callable

from qosched.backends.local.jobview import JobView
from qosched.backends.local.livejob import LiveJob, units_of
from qosched.backends.local.store import JobRecord, ProgressSample
from qosched.cluster.policies import Policy


def describe(
    record: JobRecord,
    live: LiveJob | None,
    policy: Policy | None,
    last: ProgressSample | None,
    clock: Callable[[], float],
) -> JobView:
    """The job's view. ``live`` and its pool's ``policy``: what memory holds of it (None for a
    finished job); ``last``: its latest stored progress sample, what a finished job shows it
    did (a command that exits 0 early is done by the contract, but shows the work it
    reported); ``clock``: read only when a finish is predicted."""
    total = record.spec.iterations if record.spec is not None else None
    if live is not None:
        done = live.policy_job.iterations_done
    else:
        done = min(last.iteration, total or last.iteration) if last is not None else 0
    predicted = band = None
    source = None
    if live is not None:
        assert policy is not None
        predicted, band = predict_finish(live, policy, clock)
        source = speed_source(live, policy)
    return JobView(
        speed_source=source,
        id=record.id,
        name=record.name,
        state=record.state,
        submitted_at=record.submitted_at,
        deadline_at=record.deadline_at,
        started_at=record.started_at,
        finished_at=record.finished_at,
        iterations=total,
        iterations_done=int(done),
        cpus=tuple(live.cores if live is not None else record.allocation),
        gpus=live.gpus if live is not None else (),
        predicted_finish_at=predicted,
        predicted_finish_band=band,
        best_effort=record.best_effort,
        guaranteed=record.guaranteed,
        attempts=record.attempts,
        error=record.error,
    )


def speed_source(live: LiveJob, policy: Policy) -> str:
    """Where the job's predicted speed comes from now, in words for ``status JOB``."""
    if live.profiling:
        return "being measured (profiling)"
    model = policy.predictor_of(live.policy_job.job_id)
    if model is not None and model.observed_seconds > 0:
        return "measured now"
    if live.profiled:
        return "measured while profiling"
    if live.remembered is not None:
        return f"remembered from {live.remembered[0]}"
    return "table" if live.spec.workload is not None and not live.spec.gpu else "placeholder"


def predict_finish(
    live: LiveJob, policy: Policy, clock: Callable[[], float]
) -> tuple[float | None, tuple[float, float] | None]:
    """When the job finishes at its current worker count, from its policy's predictor (not
    while it is stalled: its speed says nothing then), and the band around it."""
    workers = len(units_of(live))
    if not workers or live.stalled:
        return None, None
    model = policy.predictor_of(live.policy_job.job_id)
    if model is None:
        return None, None
    prediction = model.predict(workers)
    remaining = live.policy_job.remaining_iterations
    now = clock()
    return (
        now + remaining / prediction.rate,
        (now + remaining / prediction.rate_high, now + remaining / prediction.rate_low),
    )
