"""What one poll of the web page costs the local service with many jobs in its store.

    python bench/page_jobs.py                 # 200, 2,000 and 10,000 jobs (a minute on 2 cores)
    python bench/page_jobs.py --jobs 10000

Each size: a store filled as a service leaves it (each job submitted, run on a core with ten
progress samples, and finished, 50 s apart), then the median milliseconds, over 5 calls after
one warm-up, of what the page asks for each second: ``GET /jobs?limit=50`` (every job described,
filtered, sorted, cut to a page), ``GET /timeline?window=3600``, ``GET /status`` and
``GET /usage/history?window=3600``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from qosched.backends.local.service import LocalService
from qosched.backends.local.store import Lifecycle, Store
from qosched.backends.local.web import listing
from qosched.trainingjob.jobspec import parse_job_spec

SPEC = """\
apiVersion: qosched/v1
kind: TrainingJob
metadata:
  name: job-{n}
spec:
  workload: cnn
  work:
    iterations: 400
  deadline: 10m
  resources:
    minCpus: 1
    maxCpus: 2
"""
CORES = (0, 1, 2, 3)


def fill(store: Store, jobs: int, now: float) -> None:
    start = now - jobs * 50.0
    for n in range(1, jobs + 1):
        t = start + (n - 1) * 50.0
        job_id = store.submit(parse_job_spec(SPEC.format(n=n), f"{n}.yaml", now=t), t)
        store.transition(job_id, Lifecycle.RUNNING, t + 5, allocation=[CORES[n % 4]])
        for sample in range(1, 11):
            store.add_progress(job_id, t + 5 + sample * 10, sample * 40, 1)
        store.transition(job_id, Lifecycle.SUCCEEDED, t + 120)


def median_ms(call: Callable[[], object], repeat: int = 5) -> float:
    call()
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        call()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def measure(service: LocalService) -> list[float]:
    """Median ms of one page of the table, the timeline, the status and the use history."""
    return [
        median_ms(lambda: listing.table(service.jobs(), listing.JobQuery())),
        median_ms(lambda: service.timeline(3600)),
        median_ms(service.status),
        median_ms(lambda: service.usage_history(3600)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="*", default=[200, 2000, 10000])
    args = parser.parse_args()
    print("  jobs  fill s  /jobs?limit=50  /timeline  /status  /usage/history  (ms)")
    for jobs in args.jobs:
        with tempfile.TemporaryDirectory() as folder:
            home = Path(folder)
            store = Store(home / "state.db")
            began = time.perf_counter()
            fill(store, jobs, time.time())
            filled = time.perf_counter() - began
            service = LocalService(home, store, CORES, "qos")
            try:
                page, line, status, history = measure(service)
            finally:
                service.close()
        print(
            f"{jobs:>6} {filled:>7.1f} {page:>15.1f} {line:>10.1f} {status:>8.1f} {history:>15.1f}"
        )


if __name__ == "__main__":
    main()
