"""A job's predicted finish against its deadline, said on its StatefulSet (``DeadlineAtRisk``)
when it lies past it; the round's report keeps every job's slack."""

from __future__ import annotations

import math
from typing import Any

from qosched.backends.kubernetes.api_view import RoundJob
from qosched.backends.kubernetes.events import WARNING, Recorder, at_time, iso_time
from qosched.backends.kubernetes.round_report import StepReport
from qosched.cluster.policies import Policy


def forecast(
    job: RoundJob,
    workers: int,
    now: float,
    report: StepReport,
    *,
    policy: Policy,
    recorder: Recorder,
    sts: dict[str, Any] | None,
) -> None:
    """The job's predicted finish with ``workers`` (the policy's predictor where it has one,
    else the speed table); an Event ``DeadlineAtRisk`` on ``sts`` when it lies past the
    deadline."""
    spec, state = job.spec, job.state
    if spec.deadline_at is None or state is None:
        return
    rate = 0.0
    if workers > 0:
        predictor = policy.predictor_of(spec.key)
        rate = predictor.predict(workers).rate if predictor else state.curve.rate(workers)
    left = max(0.0, spec.iterations - state.iterations_done)
    if left == 0:
        return
    finish = now + left / rate if rate > 0 else math.inf
    # A job without workers has no finish: its slack is the time it already lost.
    slack = spec.deadline_at - finish if rate > 0 else spec.deadline_at - now
    report.slack[spec.key] = slack
    if (rate > 0 and slack >= 0) or sts is None:
        return
    if rate > 0:
        why = (
            f"predicted to finish {at_time(finish)} with {workers} workers at "
            f"{rate:.3g} it/s, {-slack:.0f} s after its deadline {iso_time(spec.deadline_at)}"
        )
    else:
        why = f"no workers this round; its deadline is {iso_time(spec.deadline_at)}"
    recorder.event(sts, WARNING, "DeadlineAtRisk", why, dedupe="DeadlineAtRisk")
