"""What the API shows of one job beyond its summary: its allocation history and audit log
(``GET /jobs/{id}/detail``) and its output read from an offset (``GET /jobs/{id}/logs?offset=``).

Pure functions of what the store and the job folder hold, so every ``Service`` builds the same
answer from the same facts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from qosched.backends.local.api import LogChunk
from qosched.backends.local.store import FINAL_STATES, Event, Lifecycle
from qosched.core.errors import InputError

RUNNING = Lifecycle.RUNNING.value
_ENDED_UNFINISHED = frozenset(s.value for s in FINAL_STATES - {Lifecycle.SUCCEEDED})


def allocation_history(events: Sequence[Event]) -> list[dict[str, Any]]:
    """Every allocation the job held, oldest first, from its audit log: a ``state`` event into
    ``running`` with ``cpus`` starts one (with the GPUs of the ``gpus`` ``held`` event before
    it, for a GPU job, which holds no cores), an ``allocation`` event (an in-place re-size)
    replaces it, and a ``state`` event out of ``running`` ends it. ``until`` is None for the one
    held now."""
    history: list[dict[str, Any]] = []
    gpus: list[int] = []  # held by the job's worker, from a ``gpus`` event
    for event in events:
        if event.kind == "gpus":
            gpus = list(event.detail.get("held", []))
            continue
        if event.kind == "state":
            if event.detail.get("to") == RUNNING:
                if "cpus" not in event.detail:
                    continue  # a launch that did not say its cores changes nothing known
                cpus = list(event.detail["cpus"])
            else:
                cpus = []
        elif event.kind == "allocation":
            cpus = list(event.detail.get("to", []))
        else:
            continue
        if history and history[-1]["until"] is None:
            history[-1]["until"] = event.t
        running = event.kind == "allocation" or event.detail.get("to") == RUNNING
        if cpus or (running and gpus):
            held_gpus = gpus if running else []
            history.append({"from": event.t, "until": None, "cpus": cpus, "gpus": held_gpus})
    return history


def job_detail(job: Mapping[str, Any], events: Sequence[Event]) -> dict[str, Any]:
    """``job`` (a ``Service.job`` dict) with ``allocations``, ``events`` and ``slack_s``, as
    ``Service.job_detail`` describes them."""
    finish = job.get("finished_at")
    if finish is None and job.get("state") == RUNNING:
        finish = job.get("predicted_finish_at")
    ended_without_finishing = job.get("state") in _ENDED_UNFINISHED
    slack = None
    if finish is not None and job.get("deadline_at") is not None and not ended_without_finishing:
        slack = job["deadline_at"] - finish
    return {
        **job,
        "allocations": allocation_history(events),
        "events": [{"t": e.t, "kind": e.kind, "detail": dict(e.detail)} for e in events],
        "slack_s": slack,
    }


def read_log_chunk(path: Path, offset: int, limit: int, *, state: Lifecycle | str) -> LogChunk:
    """At most ``limit`` bytes of the file at ``path`` from ``offset``; a missing file is an
    empty log. ``state`` is the job's, read before this call: once it is final the worker has
    exited, nothing more is written, and the chunk is complete when it reaches the end."""
    final = Lifecycle(state) in FINAL_STATES
    try:
        with open(path, "rb") as log:
            size = os.fstat(log.fileno()).st_size
            if offset > size:
                raise InputError(
                    f"offset {offset} is past the end of the output ({size} bytes)",
                    field="offset",
                )
            log.seek(offset)
            data = log.read(min(limit, size - offset))
    except FileNotFoundError:
        if offset > 0:
            raise InputError(
                f"offset {offset} is past the end of the output (0 bytes)", field="offset"
            ) from None
        return LogChunk(b"", 0, final)
    end = offset + len(data)
    return LogChunk(data, end, final and end >= size)
