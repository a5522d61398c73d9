"""What a pool's policy sees, and what its predictor says: a job as its policy's ``JobState``
(``policy_job``), the pool as a one-node ``ClusterView`` (``pool_view``), whether a job's
deadline waits for its speed to be measured (``measured_first``), and when a job would finish
on a number of workers (``predicted_finish``).

A pool is the cores (among the CPU jobs) or the GPUs (among the GPU jobs); each has a policy
instance of its own (see ``service``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from qosched.backends.local import reasons
from qosched.backends.local.speed_memory import CountTrust, remembered_curve
from qosched.backends.local.speeds import SPEED_RECENT_S, prior_curve
from qosched.cluster.job import JobSpec
from qosched.cluster.policies import Policy
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, JobState
from qosched.core.errors import InputError
from qosched.trainingjob.jobspec import TrainingJobSpec

#: What the policy is told a change of cores costs. Measured (docs/results/local.md): an in-place
#: re-size about 0.1 s, a pre-emption plus restart about 2.2 s (checkpoint and exit 0.1 s, a new
#: process importing torch 2.1 s); one value serves both, between the two.
RESIZE_PAUSE_S = 1.0
#: What the policy is told a change of GPUs costs: always a restart (stop, checkpoint, a new
#: process importing torch and starting CUDA). Not measured on a GPU machine yet: the CPU
#: restart's 2.2 s plus CUDA's start-up, with a margin.
GPU_RESIZE_PAUSE_S = 5.0


def policy_job(
    job_id: str,
    spec: TrainingJobSpec,
    pool_size: int,
    submitted_at: float,
    deadline_at: float,
    remembered: Mapping[int, float],
    startup_s: float = 0.0,
    spread: float | None = None,
    trust: Mapping[int, CountTrust] | None = None,
) -> JobState:
    """The job as its pool's policy sees it (a pool of ``pool_size`` workers), its prior speed
    the table's or the placeholder with what an earlier job of its speed key measured in place
    (``remembered``, with how far it strayed, ``spread``, and how far each count is trusted,
    ``trust``: see speed_memory), and its deadline
    ``startup_s`` earlier: a start costs that much before any iteration counts, and the policy
    plans iterations; ``InputError`` when the pool is too small."""
    least = spec.resources.bounds()[0]
    if least > pool_size:
        kind = "GPU" if spec.gpu else "core"
        raise InputError(
            f"asks for at least {least} {kind}s; this service has {pool_size}"
            + (
                " (declare them with `qosched up --gpus`, or install qosched[gpu])"
                if spec.gpu and not pool_size
                else ""
            ),
            field="resources",
        )
    requested = spec.resources.min_gpus if spec.gpu else spec.requested_cpus
    job = JobSpec(
        job_id=job_id,
        submit_s=submitted_at,
        model=spec.workload or "command",
        batch_size=1,
        iterations=spec.iterations,
        deadline_s=deadline_at - startup_s,
        requested_workers=min(requested, pool_size),
    )
    curve = remembered_curve(prior_curve(spec, pool_size), remembered, spread, trust)
    state = JobState(job, curve)
    state.last_update_s = submitted_at
    return state


def pool_view(
    now: float, jobs: Sequence[JobState], gpu: bool, size: int, cluster: ClusterSpec | None = None
) -> ClusterView:
    """The ``jobs`` of one pool on ``size`` workers, as its policy decides for them; ``cluster``:
    the CPU pool's spec to use (the service's own, when the view is of the whole pool)."""
    if not gpu:
        spec = cluster if cluster is not None else ClusterSpec.cpu(1, size)
        return ClusterView(now, spec, list(jobs), RESIZE_PAUSE_S, speed_recent_s=SPEED_RECENT_S)
    spec = ClusterSpec.from_flags(1, max(1, size), resource="gpu")
    return ClusterView(now, spec, list(jobs), GPU_RESIZE_PAUSE_S, speed_recent_s=SPEED_RECENT_S)


def measured_first(policy: Policy, spec: TrainingJobSpec, remembered: bool) -> bool:
    """Whether a job's deadline waits for its measured speed (profiling): ``policy`` promises
    deadlines, nothing is ``remembered`` under its speed key, and no table gives its speed here
    (a command's, or any job's on GPUs)."""
    return policy.promises_deadlines and not remembered and (spec.workload is None or spec.gpu)


def predicted_finish(
    policy: Policy, job: JobState, count: int, now: float, startup_s: float = 0.0
) -> reasons.Finish | None:
    """When ``job`` finishes on ``count`` workers from ``now`` (after ``startup_s``), on its
    ``policy``'s predicted speed and band, else on its prior speed; None on no workers."""
    if count <= 0:
        return None
    model = policy.predictor_of(job.job_id)
    if model is not None:
        guess = model.predict(count)
        rate, fast, slow = guess.rate, guess.rate_high, guess.rate_low
    elif job.curve.available(count):
        rate = fast = slow = job.curve.rate(count)
    else:
        return None
    if not min(rate, fast, slow) > 0:
        return None
    start, left = now + startup_s, job.remaining_iterations
    return reasons.Finish(start + left / rate, start + left / fast, start + left / slow)
