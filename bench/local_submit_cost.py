"""What submitting costs as jobs pile up, now that each admission says why.

    PYTHONPATH=src python bench/local_submit_cost.py [JOBS]

A qos service on at most two of this machine's cores (nothing runs: jobs are only admitted);
JOBS (default 200) best-effort cnn jobs submitted one after another, each with a later
deadline. Prints the total time and the slowest submit (the first pays for the imports).
Past ``ASKED_UP_TO`` jobs in the pool an admission no longer asks a copy of the policy how many
cores the job would start on (the copy grows with every job tracked).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from qosched.backends.local.service import LocalService
from qosched.trainingjob.jobspec import Deadline, Resources, TrainingJobSpec

NOW = 1000.0


def spec(index: int) -> TrainingJobSpec:
    return TrainingJobSpec(
        name=f"j{index}",
        iterations=200 + index,
        deadline=Deadline(relative_s=600 + 60 * index, absolute_at=None),
        workload="cnn",
        resources=Resources(min_cpus=1, max_cpus=2),
        requested_cpus=1,
        best_effort=True,
    )


def main(jobs: int) -> None:
    cores = tuple(sorted(os.sched_getaffinity(0)))[:2]
    with tempfile.TemporaryDirectory() as home:
        service = LocalService.open(
            Path(home), policy="qos", cpus=cores, clock=lambda: NOW, cgroups=False
        )
        try:
            started = last = time.perf_counter()
            slowest = 0.0
            for index in range(jobs):
                service.submit_spec(spec(index), NOW)
                now = time.perf_counter()
                slowest, last = max(slowest, now - last), now
        finally:
            service.close()
    total = time.perf_counter() - started
    print(f"{jobs} submits on {len(cores)} cores: {total:.2f} s, slowest {slowest * 1000:.0f} ms")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
