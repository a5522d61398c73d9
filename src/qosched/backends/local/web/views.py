"""The JSON views only the web page needs: every job's allocations on one time line
(``GET /timeline``), one job's speed against cores (``GET /jobs/{id}/speed``), and the CPU time
a job's processes used (for ``GET /usage``).

Pure functions of what the store holds (and of ``/proc`` for CPU time), so any service can
build the same answer from the same facts; ``LocalService`` calls them under its lock.
"""

from __future__ import annotations

import bisect
import itertools
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from qosched.backends.local.detail import allocation_history
from qosched.backends.local.jobview import HeldAllocation, JobView
from qosched.backends.local.process import tree_files
from qosched.backends.local.store import (
    FINAL_STATES,
    JobEvent,
    JobRecord,
    Lifecycle,
    ProgressSample,
)

_FINAL = frozenset(state.value for state in FINAL_STATES)


def timeline(
    jobs: Sequence[JobView | JobRecord],
    events: Sequence[JobEvent],
    *,
    now: float,
    cpus: Sequence[int],
    gpus: Sequence[int] = (),
    window_s: float | None = None,
) -> dict[str, Any]:
    """Every allocation of every job and the moments that changed them; with ``window_s``,
    only those of the last ``window_s`` seconds (allocations still held then, marks made then,
    and the jobs they name), which is what the page draws: a service's whole history grows
    with every job it ever ran.

    ``jobs`` are ``Service.jobs``, or the store's records (only ids, names and states are
    read); ``events`` the whole audit log in order. Returns
    ``{"now", "cpus", "gpus", "jobs": [{"id", "name", "state"}], "segments": [{"job", "from",
    "until", "cpus", "gpus"}], "marks": [{"t", "job", "kind", "text"}]}``: a segment is one
    allocation held (``until`` None while held), a mark one of ``start``, ``resize``,
    ``preempt``, ``restart`` and the outcome states (``succeeded``, ``failed``, ...).
    """
    by_job: dict[str, list[JobEvent]] = {}
    for event in events:
        if event.job_id is not None:
            by_job.setdefault(event.job_id, []).append(event)
    since = -math.inf if window_s is None else now - window_s
    segments: list[dict[str, Any]] = []
    marks: list[dict[str, Any]] = []
    shown = []
    for job in jobs:
        own = by_job.get(job.id, [])
        held = [
            {"job": job.id, **h.to_json()}
            for h in allocation_history(own)
            if h.until is None or h.until >= since
        ]
        made = [m for m in _marks(job.id, own) if m["t"] >= since]
        if held or made or window_s is None:
            segments.extend(held)
            marks.extend(made)
            shown.append(job)
    return {
        "now": now,
        "cpus": list(cpus),
        "gpus": list(gpus),
        "jobs": [{"id": j.id, "name": j.name, "state": j.state.value} for j in shown],
        "segments": segments,
        "marks": marks,
    }


def _marks(job_id: str, events: Sequence[JobEvent]) -> list[dict[str, Any]]:
    marks = []
    started = False
    for event in events:
        kind = text = None
        detail = event.detail
        if event.kind == "state" and detail.get("to") == Lifecycle.RUNNING:
            kind = "restart" if started else "start"
            started = True
            text = f"{kind} on cores {_cores(detail.get('cpus') or [])}"
        elif event.kind == "state" and detail.get("to") == Lifecycle.PREEMPTED:
            kind, text = "preempt", "pre-empted"
        elif event.kind == "state" and detail.get("to") in _FINAL:
            kind = str(detail["to"])
            text = kind + (f": {detail['error']}" if detail.get("error") else "")
        elif event.kind == "allocation":
            kind = "resize"
            text = f"re-sized from cores {_cores(detail.get('from') or [])} to "
            text += _cores(detail.get("to") or [])
            text += f": {detail['why']}" if detail.get("why") else ""
        elif event.kind == "stopped" and marks and marks[-1]["kind"] == "preempt":
            marks[-1]["text"] = f"pre-empted: {detail.get('why', '')}"
        if kind is not None:
            marks.append({"t": event.t, "job": job_id, "kind": kind, "text": text})
    return marks


def _cores(cpus: Sequence[int]) -> str:
    return ",".join(str(c) for c in cpus) or "-"


def measured_speeds(
    samples: Sequence[ProgressSample], allocations: Sequence[HeldAllocation]
) -> list[dict[str, Any]]:
    """Iterations per second at each core count, from the job's progress samples.

    Only two consecutive samples within one allocation (``allocation_history``) make an
    interval: a pre-emption or a re-size between them would charge the pause, or the work
    redone after a restart from a checkpoint, to the wrong count. Returns
    ``[{"cpus", "rate", "seconds"}]`` by core count, ``seconds`` being how long it was measured.
    """
    totals: dict[int, list[float]] = {}
    times = [s.t for s in samples]
    # Samples come in the order they were stored, in time unless the clock stepped back: then
    # each allocation's samples are found in one pass over all of them, else by bisection (a
    # long job re-sized hundreds of times has tens of thousands of samples).
    ordered = all(a <= b for a, b in itertools.pairwise(times))
    for held in allocations:
        start, until = held.start, held.until
        if ordered:
            last = len(times) if until is None else bisect.bisect_right(times, until)
            inside = samples[bisect.bisect_left(times, start) : last]
        else:
            inside = [s for s in samples if s.t >= start and (until is None or s.t <= until)]
        for before, after in itertools.pairwise(inside):
            dt, di = after.t - before.t, after.iteration - before.iteration
            if dt <= 0 or di < 0 or after.cpus != before.cpus or after.cpus <= 0:
                continue
            seconds_iterations = totals.setdefault(after.cpus, [0.0, 0.0])
            seconds_iterations[0] += dt
            seconds_iterations[1] += di
    return [
        {"cpus": cpus, "rate": iterations / seconds, "seconds": seconds}
        for cpus, (seconds, iterations) in sorted(totals.items())
        if seconds > 0 and math.isfinite(iterations / seconds)
    ]


def job_speed(
    job_id: str,
    samples: Sequence[ProgressSample],
    events: Sequence[JobEvent],
    predicted: Mapping[int, tuple[float, float, float]],
) -> dict[str, Any]:
    """``GET /jobs/{id}/speed``: ``{"job", "measured": measured_speeds(...), "predicted":
    [{"cpus", "rate", "low", "high"}]}``; ``predicted`` maps a core count to the predictor's
    (rate, low, high) in iterations/s, empty when the policy has no predictor for the job."""
    return {
        "job": job_id,
        "measured": measured_speeds(samples, allocation_history(events)),
        "predicted": [
            {"cpus": cpus, "rate": rate, "low": low, "high": high}
            for cpus, (rate, low, high) in sorted(predicted.items())
            if all(math.isfinite(v) and v > 0 for v in (rate, low, high))
        ],
    }


def cpu_seconds(pid: int, proc: Path = Path("/proc")) -> float:
    """CPU time (user and system) used so far by process ``pid`` and every descendant still
    running, with what their children that already exited used; 0 for a process that is gone."""
    total = 0
    for stat in tree_files(pid, "stat", proc):
        # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
        fields = stat.rsplit(")", 1)[1].split()
        # utime, stime, cutime, cstime are fields 14-17 of stat, 12-15 after the name.
        total += sum(int(value) for value in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")
