"""What a real backend does with an arriving job: the one admission rule both backends apply.

Kept apart from the policies so that reading an admission (a Kubernetes annotation, a stored
event) needs no policy code.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from qosched.cluster.policies.base import Policy
    from qosched.cluster.state import ClusterView, JobState


class Admission(StrEnum):
    """What a real backend does with an arriving job, as it records it."""

    GUARANTEED = "guaranteed"
    BEST_EFFORT = "best-effort"
    DECLINED = "declined"


def admit_job(policy: Policy, job: JobState, view: ClusterView, *, best_effort: bool) -> Admission:
    """The admission rule every real backend applies to an arriving ``job``.

    The policy may decline it outright. A policy that promises deadlines runs a job it does not
    guarantee only if the job has no deadline or its user allowed best effort (``best_effort``):
    otherwise it is declined now, while there is still time to go elsewhere. A policy that
    promises nothing runs every job it accepts, best effort.
    """
    return _admission(policy, job, policy.admit(job, view), best_effort=best_effort)


def _admission(policy: Policy, job: JobState, accepted: bool, *, best_effort: bool) -> Admission:
    """`admit_job`'s rule on the policy's answer ``accepted``, just given for ``job``."""
    if not accepted:
        return Admission.DECLINED
    if policy.is_guaranteed(job.job_id):
        return Admission.GUARANTEED
    if not policy.promises_deadlines or best_effort or job.spec.deadline_s is None:
        return Admission.BEST_EFFORT
    return Admission.DECLINED


class AdmissionFailed(Exception):
    """The policy raised while judging ``job_id`` of a burst; ``answers`` holds the admissions
    of the arrivals before it, which stand (the policy's state includes them)."""

    def __init__(self, job_id: str, answers: dict[str, Admission]) -> None:
        super().__init__(f"the policy failed to admit job {job_id}")
        self.job_id = job_id
        self.answers = answers


def admit_arrivals(
    policy: Policy,
    jobs: Sequence[JobState],
    view: ClusterView,
    *,
    best_effort: Callable[[JobState], bool],
) -> dict[str, Admission]:
    """`admit_job` for each of ``jobs`` in order, each judged with ``view``'s jobs and the
    arrivals before it that were not declined, the policy asked once for the whole burst
    (`Policy.admit_arrivals`): the same admissions, without a view per arrival. Raises
    `AdmissionFailed` (from the policy's error) at the first job the policy fails on."""
    answers: dict[str, Admission] = {}

    def joins(job: JobState, accepted: bool) -> bool:
        answers[job.job_id] = _admission(policy, job, accepted, best_effort=best_effort(job))
        return answers[job.job_id] is not Admission.DECLINED

    try:
        policy.admit_arrivals(jobs, view, joins)
    except Exception as exc:
        # the first job without an answer (the last one, should the policy fail after it)
        failed = next((j.job_id for j in jobs if j.job_id not in answers), jobs[-1].job_id)
        answers.pop(failed, None)
        raise AdmissionFailed(failed, answers) from exc
    return answers


# -- asking hypothetically ------------------------------------------------------------------------

#: Earliest-deadline answers are multiples of this many seconds from now ...
DEADLINE_STEP_S = 10
#: ... found to within the larger of one step and this fraction of the answer.
DEADLINE_PRECISION = 0.01
#: A search tries at most this many deadlines, for at most this long, up to this far ahead.
MAX_PROBES = 30
PROBE_BUDGET_S = 1.0
HORIZON_S = 366 * 86400


def probe_admission(
    policy: Policy, job: JobState, view: ClusterView, *, best_effort: bool
) -> Admission:
    """What `admit_job` would answer now, asked of a copy of ``policy``: the policy itself,
    whose admissions change its state (plans, guarantees), is left as it was."""
    return admit_job(policy.what_if(view), job, view, best_effort=best_effort)


def earliest_deadline_s(
    guaranteed_within: Callable[[float], bool],
    *,
    fails_within_s: float = 0.0,
    max_probes: int = MAX_PROBES,
    budget_s: float = PROBE_BUDGET_S,
    horizon_s: float = HORIZON_S,
    clock: Callable[[], float] = time.monotonic,
) -> float | None:
    """The fewest seconds from now within which ``guaranteed_within(seconds)`` holds, or None when
    none up to ``horizon_s`` does within ``max_probes`` tries and ``budget_s`` seconds.

    ``fails_within_s``: a window already known to fail (the deadline asked for, a job's fastest
    time alone). Assumes a later deadline is never harder to guarantee. Tries multiples of
    `DEADLINE_STEP_S` growing exponentially from there, then bisects until the answer (always
    one that was tried and held) is within ``max(DEADLINE_STEP_S, DEADLINE_PRECISION * it)`` of
    the earliest; when tries or time run out first, the best found so far, coarser.
    """
    if max_probes < 1 or budget_s <= 0 or not math.isfinite(fails_within_s):
        raise ValueError(
            f"need max_probes >= 1, budget_s > 0 and a finite fails_within_s; got {max_probes}, "
            f"{budget_s}, {fails_within_s}"
        )
    stop_at = clock() + budget_s
    last = max(1, math.ceil(horizon_s / DEADLINE_STEP_S))  # in steps
    lo = min(last, max(0, math.floor(fails_within_s / DEADLINE_STEP_S)))  # known to fail
    hi = None  # known to hold
    probes = 0

    def holds(steps: int) -> bool:
        nonlocal probes
        probes += 1
        return guaranteed_within(steps * DEADLINE_STEP_S)

    grow = max(1, math.ceil(lo * 0.1))
    while hi is None:
        if lo >= last or probes >= max_probes or clock() > stop_at:
            return None
        tried = min(last, lo + grow)
        if holds(tried):
            hi = tried
        else:
            lo, grow = tried, grow * 2
    while hi - lo > max(1, math.floor(DEADLINE_PRECISION * hi)):
        if probes >= max_probes or clock() > stop_at:
            break
        middle = (lo + hi) // 2
        if holds(middle):
            hi = middle
        else:
            lo = middle
    return float(hi * DEADLINE_STEP_S)
