"""What the local service keeps in memory about one unfinished job (``LiveJob``), and the few
facts every part of the service reads off it: the workers it holds in its pool, whether it
holds them without being able to give them back yet, and what its workers are called."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from qosched.backends.local.process import RunnerProcess
from qosched.backends.local.progress import ProgressEvent, ProgressFollower
from qosched.backends.local.store import JobRecord
from qosched.cluster.state import JobState
from qosched.trainingjob.jobspec import TrainingJobSpec


@dataclass(slots=True)
class LiveJob:
    """What the service keeps in memory about one unfinished job: its stored record, the
    policy's record of it (``policy_job``) and its runner."""

    record: JobRecord
    spec: TrainingJobSpec  # record.spec, known to read
    policy_job: JobState
    job_dir: Path
    runner: RunnerProcess | None = None
    progress: ProgressFollower | None = None  # its runner's progress.jsonl, as far as read
    last_event: ProgressEvent | None = None  # the last one read
    went_back: bool = False  # its progress went back since the last start or resize (said once)
    starting: bool = False  # its command started and has not reported an iteration since
    progressed_at: float | None = None  # when its runner started or last reported more work
    stalled: bool = False  # noted as stalled since (see STALL_MIN_S)
    last_sample: tuple[float, int] | None = None  # (t, iteration) of the last progress sample
    stored_until: float = -math.inf  # what the runner reported up to this time is stored
    cores: tuple[int, ...] = ()  # held by a CPU job; a GPU job holds none
    gpus: tuple[int, ...] = ()  # held by a GPU job (its runner's, until it is gone)
    version: int = 0
    stopping: bool = False  # the runner must stop; its cores stay held until it is gone
    term_at: float | None = None  # time.monotonic() of the SIGTERM
    killed: bool = False  # SIGKILL sent to its process group
    cancelling: bool = False
    failing: str | None = None  # the job failed (why); its runner is being stopped
    over_memory: str | None = None  # why the job was killed for its memory use
    speed_key: str | None = None  # what its speed is remembered under (speed_memory)
    startup_s: float = 0.0  # its planned deadline is this much earlier (speed_memory)
    # The job whose measured speeds (workers -> iterations/s) are this one's prior, if any.
    remembered: tuple[str | None, dict[int, float]] | None = None
    # Profiling (see qosched.backends.local.profiling): its speed is measured before it is
    # judged; it is not its policy's until then. Measured at these sizes, its runner started
    # for it at this service time; ``declining`` says why it is declined once its runner is gone.
    profiling: bool = False
    profile_sizes: tuple[int, ...] = ()
    profile_started: float | None = None
    declining: str | None = None
    profiled: bool = False  # its speed was measured while profiling (its prior since)
    # Why this round changes its workers, and to how many (`rounds.explain`), for the
    # event of the re-size, start or stop it leads to; and why its runner is being stopped.
    change_why: str | None = None
    change_to: int = 0
    stop_why: str | None = None


def units_of(live: LiveJob) -> tuple[int, ...]:
    """The workers a job holds in its pool: its GPUs, or its cores."""
    return live.gpus if live.spec.gpu else live.cores


def holding(live: LiveJob) -> bool:
    """Whether the job holds workers it cannot give back yet: it has done all its iterations
    and is writing its result, or its runner is stopping."""
    return bool(units_of(live)) and (live.stopping or live.policy_job.remaining_iterations <= 0)


def worker_kind(spec: TrainingJobSpec) -> str:
    """What the workers of the job's pool are called."""
    return "GPU" if spec.gpu else "core"
