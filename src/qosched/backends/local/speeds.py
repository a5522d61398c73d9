"""What the scheduler assumes about a local job's speed before the job reports any progress.

A built-in workload starts from the bundled CPU table (``data/throughputs/CPU``: measured on
one and two cores, modelled beyond) at its default batch size. A command's speed is unknown
until it reports progress: its prior is the placeholder both backends use
(``ThroughputModel.prior_curve``), which the job's own progress replaces (see
``qosched.cluster.predict``). A worker is a core for a CPU job and a GPU for a GPU job (always a
command: no table of a user's own script on a GPU exists before it runs).
"""

from __future__ import annotations

from functools import cache

from qosched.cluster.throughput import SpeedCurve, ThroughputModel
from qosched.trainingjob.jobspec import TrainingJobSpec
from qosched.workloads import get_workload

#: How far back a local job's speed is followed (``OnlinePredictor``'s ``recent_s``, growing with
#: the job's age): the cores are shared with the machine's other work, and a job's speed on them
#: moves within seconds when that work starts or stops (docs/results/local.md).
SPEED_RECENT_S = 2.0


@cache
def _cpu_tables() -> ThroughputModel:
    return ThroughputModel.bundled("CPU")


def prior_curve(spec: TrainingJobSpec, workers: int) -> SpeedCurve:
    """The job's prior speed on 0..``workers`` workers (cores, or GPUs for a GPU job)."""
    if spec.workload is not None and not spec.gpu:
        batch = get_workload(spec.workload).default_batch_size
        return _cpu_tables().prior_curve(spec.workload, batch, workers)
    return _cpu_tables().prior_curve(spec.workload or "command", 1, workers)
