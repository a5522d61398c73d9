"""Tiny command jobs for the service tests (imported by name: pytest puts this folder on
sys.path). Each runs a short Python script that reports progress as a user's script would and
leaves a trace of every run in its job folder."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

from qosched.trainingjob.jobspec import Deadline, Resources, TrainingJobSpec

CORES = tuple(sorted(os.sched_getaffinity(0)))

#: Appends {"kind": "start"|"end"|"overlap", "pid", "t", "cpus"} to runs.jsonl in its job folder
#: and holds an exclusive lock on run.lock while it runs, so two runs of one job at once are
#: seen ("overlap") whoever started them. Reports ``iterations`` iterations, ``sleep_s`` apart.
COUNTING = textwrap.dedent(
    """
    import fcntl, json, os, sys, time
    folder = os.environ["QOSCHED_JOB_DIR"]
    iterations, sleep_s = int(os.environ["QOSCHED_ITERATIONS"]), float(sys.argv[1])
    def note(kind):
        record = {"kind": kind, "pid": os.getpid(), "t": time.time(),
                  "cpus": sorted(os.sched_getaffinity(0))}
        with open(os.path.join(folder, "runs.jsonl"), "a") as out:
            out.write(json.dumps(record) + "\\n")
    lock = open(os.path.join(folder, "run.lock"), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        note("overlap")
        sys.exit(1)
    note("start")
    for i in range(1, iterations + 1):
        time.sleep(sleep_s)
        with open(os.environ["QOSCHED_PROGRESS_FILE"], "a") as progress:
            progress.write(json.dumps({"iteration": i}) + "\\n")
    note("end")
    """
)


def command_spec(
    name: str,
    argv: list[str],
    *,
    iterations: int = 5,
    min_cpus: int = 1,
    max_cpus: int | None = 1,
    deadline_s: int = 600,
) -> TrainingJobSpec:
    return TrainingJobSpec(
        name=name,
        iterations=iterations,
        deadline=Deadline(relative_s=deadline_s, absolute_at=None),
        command=tuple(argv),
        resources=Resources(min_cpus=min_cpus, max_cpus=max_cpus),
        best_effort=True,
    )


def counting_spec(name: str, *, iterations: int = 5, sleep_s: float = 0.05, **extra: Any):
    return command_spec(
        name, [sys.executable, "-c", COUNTING, str(sleep_s)], iterations=iterations, **extra
    )


def python_spec(name: str, script: str, **extra: Any) -> TrainingJobSpec:
    return command_spec(name, [sys.executable, "-c", textwrap.dedent(script)], **extra)


def runs(job_dir: Path) -> list[dict[str, Any]]:
    """The run records a COUNTING job left."""
    path = job_dir / "runs.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
