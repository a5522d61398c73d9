"""What it costs to tell a declined job the earliest deadline that can be guaranteed.

    PYTHONPATH=src python bench/local_decline_search.py

A service on this machine's cores (nothing runs: jobs are only admitted) with 0, 10 and 50
guaranteed cnn jobs queued; a cnn job of 100,000 iterations asks for a deadline a minute away
(declined) and is judged five times (``LocalService.judge_spec``, as ``submit --dry-run``
does). Prints the admissions the search asked of the policy's copies and the median time.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import qosched.cluster.admission as admission
from qosched.backends.local.service import LocalService
from qosched.trainingjob.jobspec import Deadline, Resources, TrainingJobSpec


def spec(name: str, iterations: int, deadline_s: int, cores: int) -> TrainingJobSpec:
    return TrainingJobSpec(
        name=name,
        iterations=iterations,
        deadline=Deadline(relative_s=deadline_s, absolute_at=None),
        workload="cnn",
        resources=Resources(min_cpus=1, max_cpus=cores),
    )


def main() -> None:
    admit = admission.admit_job
    probes = 0

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal probes
        probes += 1
        return admit(*args, **kwargs)

    admission.admit_job = counting
    for queued in (0, 10, 50):
        with tempfile.TemporaryDirectory() as home:
            service = LocalService.open(Path(home), policy="qos", tick_s=0.5)
            cores = len(service.cores)
            for k in range(queued):
                service.submit_spec(spec(f"g{k}", 20_000, 3600 * (k + 1), cores))
            times = []
            for _ in range(5):
                probes = 0
                start = time.perf_counter()
                verdict = service.judge_spec(spec("tight", 100_000, 60, cores))
                times.append(time.perf_counter() - start)
            service.close()
        print(
            f"{queued:3d} jobs queued on {cores} cores: {probes} admissions, median "
            f"{statistics.median(times) * 1000:.1f} ms, earliest deadline "
            f"{verdict.earliest_deadline_in_s:.0f} s"
        )


if __name__ == "__main__":
    main()
