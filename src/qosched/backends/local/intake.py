"""Taking a runner's new progress events into its job's memory: the interval of progress the
policy measures speed over, the iterations done, when it last moved; and what of the events
the store must keep (warnings and progress samples), in order, for the service to write.

Pure over the ``LiveJob``: nothing here reads files or writes the store, so the whole of how a
report counts is in one place a reader (and a test) can follow event by event."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from qosched.backends.local.livejob import LiveJob
from qosched.backends.local.progress import ProgressEvent, RunnerEvent

#: The store event kind of a runner's non-fatal warning; a stored name (and a value the API
#: returns) kept for existing data.
RUNNER_WARNING = "worker-warning"
#: Events whose iteration is a predictor sample (a start or re-size only opens an interval).
_SAMPLED = (RunnerEvent.PROGRESS, RunnerEvent.CHECKPOINT, RunnerEvent.DONE)


@dataclass(frozen=True, slots=True)
class Warned:
    """A runner's non-fatal warning (or the note that its progress went back), to store."""

    t: float
    message: str | None


@dataclass(frozen=True, slots=True)
class Sample:
    """A progress sample to store: at ``t`` the job had done ``iteration`` on ``workers``."""

    t: float
    iteration: int
    workers: int


def take_in(live: LiveJob, events: Sequence[ProgressEvent]) -> list[Warned | Sample]:
    """Apply ``events`` (in order) to ``live`` and its policy job; what to store, in order.
    An event at or before ``live.stored_until`` was stored before a restart: it counts in
    memory, and is not stored again."""
    writes: list[Warned | Sample] = []
    for event in events:
        fresh = event.t > live.stored_until
        if event.event is RunnerEvent.WARNING or (
            event.event is RunnerEvent.ERROR and not event.fatal
        ):
            if fresh:
                writes.append(Warned(event.t, event.message))
            continue
        if event.event in (RunnerEvent.START, RunnerEvent.RESIZE):
            _open_interval(live, event)
            if event.iteration is None:
                continue
        elif event.iteration is None:
            continue
        elif live.last_sample is not None and event.t > live.last_sample[0]:
            went_back = _extend_interval(live, event.t, event.iteration, fresh)
            if went_back is not None:
                writes.append(went_back)
        _count(live, event.t, event.iteration)
        if fresh and event.event in _SAMPLED:
            # The sample's workers are the job's pool's: a GPU job's runner reports the
            # service's cores, which feed its GPUs; its speed is per GPU count.
            workers = len(live.gpus) if live.spec.gpu else event.cpus
            writes.append(Sample(event.t, event.iteration, workers))
    if events:
        live.last_event = events[-1]
    return writes


def _open_interval(live: LiveJob, event: ProgressEvent) -> None:
    """A start or re-size: a new interval of progress starts here. A command's start knows no
    iteration yet: the interval starts from what the job had done, and its start-up counts as
    active time (a little slow at first, never fast: safe for a deadline), though not toward
    its speed (``speed_mark``, in ``_count``)."""
    done = event.iteration if event.iteration is not None else live.policy_job.iterations_done
    live.last_sample = (event.t, int(done))
    live.went_back = False
    live.starting = event.event is RunnerEvent.START and event.iteration is None
    if event.event is RunnerEvent.START:
        live.progressed_at, live.stalled = event.t, False


def _extend_interval(live: LiveJob, t: float, iteration: int, fresh: bool) -> Warned | None:
    """A report inside the current interval: its time is active time. Progress that went back
    (its command started over without a checkpoint, or reports wrongly) lost the work since the
    last sample, and the policy measures anew; said once per start, however often it happens."""
    assert live.last_sample is not None
    last_t, last_iteration = live.last_sample
    live.policy_job.active_s += t - last_t
    warned = None
    if iteration < last_iteration and fresh and not live.went_back:
        live.went_back = True
        warned = Warned(t, f"progress went back from iteration {last_iteration} to {iteration}")
    live.last_sample = (t, iteration)
    return warned


def _count(live: LiveJob, t: float, iteration: int) -> None:
    """The job has done ``iteration`` (at most its spec's) at ``t``."""
    job = live.policy_job
    if iteration > job.iterations_done:
        live.progressed_at, live.stalled = t, False
    job.iterations_done = float(min(iteration, live.spec.iterations))
    job.last_update_s = t
    if live.starting:
        # Its start-up (interpreter, imports) is running time but says nothing of its
        # speed: the policy measures the speed from its first report on.
        live.starting = False
        job.speed_mark = (job.active_s, job.iterations_done)
