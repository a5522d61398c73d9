"""What a real backend does with an arriving job: the one admission rule both backends apply.

Kept apart from the policies so that reading an admission (a Kubernetes annotation, a stored
event) needs no policy code.
"""

from __future__ import annotations

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
    accepted = policy.admit(job, view)
    if not accepted:
        return Admission.DECLINED
    if policy.is_guaranteed(job.job_id):
        return Admission.GUARANTEED
    if not policy.promises_deadlines or best_effort or job.spec.deadline_s is None:
        return Admission.BEST_EFFORT
    return Admission.DECLINED
