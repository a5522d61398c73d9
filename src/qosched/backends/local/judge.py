"""Judging a job before it is submitted, or after it was declined: what the policy does with it
now and, when it does not guarantee its deadline, the earliest deadline it would.

The policy is asked on a copy of its state (``Policy.what_if``), so judging changes nothing. The
earliest deadline is searched by `qosched.cluster.admission.earliest_deadline_s` (whole
multiples of 10 s from now, to within 10 s or 1% of the answer, whichever is larger; at most
30 admissions and 1 s).
"""

from __future__ import annotations

import dataclasses
import math

from qosched.backends.local.verdict import Verdict
from qosched.cluster.admission import HORIZON_S, Admission, earliest_deadline_s, probe_admission
from qosched.cluster.policies import Policy
from qosched.cluster.state import ClusterView, JobState


def judge(
    policy: Policy,
    job: JobState,
    view: ClusterView,
    *,
    best_effort: bool,
    admission: Admission | None = None,
    kind: str = "core",
    startup_s: float = 0.0,
    earliest: bool = True,
) -> Verdict:
    """The verdict on ``job`` (not in ``view.jobs``) arriving now; ``policy`` is left unchanged.

    ``admission``: what the policy already answered (a job just declined), so it is not asked
    again. ``kind`` names the pool's workers in reasons. ``startup_s``: how much earlier than
    the user's deadline ``job``'s is (its start costs that before any iteration counts): the
    deadlines searched and said are the user's. ``earliest``: also search the earliest deadline
    it would guarantee (False: only why, for a reason that must not take the search's time).
    """
    if admission is None:
        admission = probe_admission(policy, job, view, best_effort=best_effort)
    if admission is Admission.GUARANTEED:
        return Verdict(admission)
    deadline = job.spec.deadline_s
    if not policy.promises_deadlines or deadline is None:
        if admission is Admission.DECLINED:
            return Verdict(admission, f"policy {policy.name} declines it")
        return Verdict(admission, f"policy {policy.name} promises no deadlines")
    now, capacity = view.now, view.cluster.total_workers
    alone_s, count, rate = _fastest_alone(job, capacity)
    if alone_s is None:
        return Verdict(admission, f"it has no known speed on at most {capacity} {kind}s")
    asked_s = deadline - now + startup_s
    alone_s += startup_s
    reason = _reason(view, policy, asked_s, alone_s, count, rate, kind)
    if admission is Admission.BEST_EFFORT:
        reason += "; its spec allows best effort, so it runs without a guarantee"
    if not earliest:
        return Verdict(admission, reason)

    def guaranteed_within(seconds: float) -> bool:
        trial = _with_deadline(job, now + seconds - startup_s)
        return probe_admission(policy, trial, view, best_effort=False) is Admission.GUARANTEED

    # Faster than alone on its fastest count is never met; nor, it was just found, is `asked_s`.
    known_to_fail = max(asked_s, math.nextafter(alone_s, 0.0))
    found = earliest_deadline_s(guaranteed_within, fails_within_s=max(0.0, known_to_fail))
    if found is None:
        reason += f"; no deadline within {HORIZON_S // 86400} days can be guaranteed now"
        return Verdict(admission, reason)
    return Verdict(admission, reason, now + found, found)


def _fastest_alone(job: JobState, capacity: int) -> tuple[float | None, int, float]:
    """(seconds to finish alone on its fastest count at its expected speed, that count, its
    rate), or None seconds when it has no speed on any count that fits."""
    counts = range(1, min(job.curve.max_workers, capacity) + 1)
    rates = [(job.curve.rate(g), g) for g in counts if job.curve.available(g)]
    if not rates:
        return None, 0, 0.0
    rate, count = max(rates)
    return job.remaining_iterations / rate, count, rate


def _reason(
    view: ClusterView,
    policy: Policy,
    asked_s: float,
    alone_s: float,
    count: int,
    rate: float,
    kind: str,
) -> str:
    if asked_s < alone_s:
        return (
            f"it needs {alone_s:.0f} s even alone on {count} {kind}{'s' * (count != 1)} "
            f"(its fastest, at an expected {rate:.3g} iterations/s), and its deadline is in "
            f"{max(0.0, asked_s):.0f} s"
        )
    held = sum(1 for other in view.jobs if policy.is_guaranteed(other.job_id))
    if held:
        jobs = "job holds" if held == 1 else "jobs hold"
        return (
            f"{held} guaranteed {jobs} the {kind}s it would need before its deadline "
            f"(in {asked_s:.0f} s)"
        )
    return (
        f"no plan on the {view.cluster.total_workers} {kind}s meets its deadline (in "
        f"{asked_s:.0f} s) at its predicted speed with its safety margin"
    )


def _with_deadline(job: JobState, deadline_s: float) -> JobState:
    trial = JobState(dataclasses.replace(job.spec, deadline_s=deadline_s), job.curve)
    trial.last_update_s = job.last_update_s
    return trial
