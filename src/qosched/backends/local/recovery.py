"""What the store says about an unfinished job after a restart, read back into memory: what it
was doing when the service went away (``replay``), which of the runners found by its job folder
is its own (``runners_in_order``), the GPUs its log says it holds (``gpus_in_log``), and the
highest job folder a new job's id must stay above (``highest_job_folder``).

None of it writes: the service reads the store and the process table, and acts (adopts, kills,
records) on what these say (``LocalService._recover``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qosched.backends.local.intake import RUNNER_WARNING
from qosched.backends.local.livejob import LiveJob
from qosched.backends.local.process import RunnerProcess
from qosched.backends.local.store import JobEvent, ProgressSample


def replay(
    live: LiveJob, attempts: int, events: Sequence[JobEvent], samples: Sequence[ProgressSample]
) -> tuple[int, JobEvent | None]:
    """Set on ``live`` what its audit log and progress samples say: the GPUs it holds, whether
    it is being cancelled, failed or declined, and up to when its runner's reports are stored.
    Returns the attempt of its last launch intent (``attempts`` without one) and the event that
    recorded that launch (None: the service died before recording it)."""
    intent_attempt, launched = attempts, None
    live.gpus = gpus_in_log(events)  # held by its runner, if one is left
    for event in events:
        if event.kind == "launching":
            intent_attempt, launched = int(event.detail["attempt"]), None
        elif event.kind in ("launched", "re-adopted"):
            launched = event
        elif event.kind == "cancelling":
            live.cancelling = True
        elif event.kind == "failing":
            live.failing = str(event.detail.get("why"))
        elif event.kind == "declining":
            live.declining = str(event.detail.get("why"))
        elif event.kind == RUNNER_WARNING:
            live.stored_until = max(live.stored_until, event.t)
    if samples:
        live.stored_until = max(live.stored_until, samples[-1].t)
    return intent_attempt, launched


def runners_in_order(
    found: Sequence[RunnerProcess], launched: JobEvent | None
) -> list[RunnerProcess]:
    """The runners found for one job, the one to keep first: the recorded launch's (same pid
    and start time), then the oldest."""
    if launched is None:
        return list(found)
    recorded = (launched.detail.get("pid"), launched.detail.get("start_ticks"))
    return sorted(found, key=lambda r: ((r.pid, r.start_ticks) != recorded, r.start_ticks))


def gpus_in_log(events: Sequence[Any]) -> tuple[int, ...]:
    """The GPUs a job's audit log says it holds now: the last ``gpus`` event's ``held``, unless
    a ``released`` came after it."""
    held: tuple[int, ...] = ()
    for event in events:
        if event.kind == "gpus":
            held = tuple(event.detail.get("held", ()))
    return held


def highest_job_folder(jobs: Path) -> int:
    """The largest N of the ``j-NNNNNN`` folders in ``jobs`` (0 with none): a database that was
    emptied or replaced must not give a new job an old one's folder, log and checkpoint."""
    highest = 0
    with os.scandir(jobs) as entries:
        for entry in entries:
            digits = entry.name.removeprefix("j-")
            # Ids stay far below 20 digits: a longer name is no folder of ours.
            ours = entry.name.startswith("j-") and digits.isascii() and digits.isdecimal()
            if ours and len(digits) <= 20:
                highest = max(highest, int(digits))
    return highest
