"""What the scheduler assumes about a local job's speed before the job reports any progress.

A built-in workload starts from the bundled CPU table (``data/throughputs/CPU``: measured on
one and two cores, modelled beyond) at its default batch size. A command's speed is unknown
until it reports progress: its prior is a placeholder, ``PLACEHOLDER_RATE`` iterations per
second per worker, which the job's own progress replaces (see ``qosched.cluster.predict``). A
worker is a core for a CPU job and a GPU for a GPU job (always a command: no table of a user's
own script on a GPU exists before it runs).
"""

from __future__ import annotations

from functools import cache

from qosched.backends.local.jobspec import TrainingJobSpec
from qosched.cluster.throughput import SpeedCurve, ThroughputModel
from qosched.workloads import get_workload

PLACEHOLDER_RATE = 1.0


@cache
def _cpu_tables() -> ThroughputModel:
    return ThroughputModel.bundled("CPU")


def prior_curve(spec: TrainingJobSpec, cores: int) -> SpeedCurve:
    """The job's prior speed on 1..``cores`` workers (cores, or GPUs for a GPU job)."""
    if spec.workload is not None and not spec.gpu:
        batch = get_workload(spec.workload).default_batch_size
        tables = _cpu_tables()
        if tables.has(spec.workload, batch):
            full = tables.curve(spec.workload, batch)
            speeds = full.speeds[: cores + 1]
            return SpeedCurve(
                spec.workload, batch, speeds, tuple(g for g in full.measured if g <= cores)
            )
    speeds = tuple(PLACEHOLDER_RATE * g for g in range(cores + 1))
    return SpeedCurve(spec.workload or "command", 1, speeds, tuple(range(1, cores + 1)))
