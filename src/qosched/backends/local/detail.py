"""What the API shows of one job beyond its summary: its allocation history and audit log
(``GET /jobs/{id}/detail``) and its output read from an offset (``GET /jobs/{id}/logs?offset=``).

Pure functions of what the store and the job folder hold, so every ``Service`` builds the same
answer from the same facts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from qosched.backends.local import joblog
from qosched.backends.local.api import LogChunk
from qosched.backends.local.jobview import EventView, HeldAllocation, JobDetail, JobView
from qosched.backends.local.store import FINAL_STATES, JobEvent, Lifecycle

RUNNING = Lifecycle.RUNNING.value
_ENDED_UNFINISHED = FINAL_STATES - {Lifecycle.SUCCEEDED}


def allocation_history(events: Sequence[JobEvent]) -> tuple[HeldAllocation, ...]:
    """Every allocation the job held, oldest first, from its audit log: a ``state`` event into
    ``running`` with ``cpus`` starts one (with the GPUs of the ``gpus`` ``held`` event before
    it, for a GPU job, which holds no cores), an ``allocation`` event (an in-place re-size)
    replaces it, and a ``state`` event out of ``running`` ends it. ``until`` is None for the one
    held now."""
    history: list[HeldAllocation] = []
    gpus: tuple[int, ...] = ()  # held by the job's runner, from a ``gpus`` event
    for event in events:
        if event.kind == "gpus":
            gpus = tuple(event.detail.get("held", ()))
            continue
        if event.kind == "state":
            if event.detail.get("to") == RUNNING:
                if "cpus" not in event.detail:
                    continue  # a launch that did not say its cores changes nothing known
                cpus = tuple(event.detail["cpus"])
            else:
                cpus = ()
        elif event.kind == "allocation":
            cpus = tuple(event.detail.get("to", ()))
        else:
            continue
        if history and history[-1].until is None:
            history[-1] = replace(history[-1], until=event.t)
        running = event.kind == "allocation" or event.detail.get("to") == RUNNING
        if cpus or (running and gpus):
            history.append(HeldAllocation(event.t, None, cpus, gpus if running else ()))
    return tuple(history)


def job_detail(job: JobView, events: Sequence[JobEvent]) -> JobDetail:
    """``job`` with its allocation history, audit log and slack, as ``JobDetail`` describes
    them."""
    finish = job.finished_at
    if finish is None and job.state is Lifecycle.RUNNING:
        finish = job.predicted_finish_at
    slack = None
    if finish is not None and job.state not in _ENDED_UNFINISHED:
        slack = job.deadline_at - finish
    return JobDetail(
        job=job,
        allocations=allocation_history(events),
        events=tuple(EventView(e.t, e.kind, e.detail) for e in events),
        slack_s=slack,
    )


def read_log_chunk(job_dir: Path, offset: int, limit: int, *, state: Lifecycle | str) -> LogChunk:
    """At most ``limit`` bytes of the job's output from ``offset`` on (``joblog.read_chunk``).
    ``state`` is the job's, read before this call: once it is final the runner has exited,
    nothing more is written, and the chunk is complete when it reaches the end."""
    final = Lifecycle(state) in FINAL_STATES
    chunk = joblog.read_chunk(job_dir, offset, limit)
    return LogChunk(chunk.data, chunk.end, final and chunk.end >= chunk.size)
