"""Speeds remembered across submissions: what a job measured becomes the prior of the next job
that runs the same thing.

A job's **speed key** names what determines its speed: for a built-in workload, the workload
(its batch size is fixed); for a command, the command's words, its launcher, whether it runs on
GPUs, and the content of its Python script (``jobspec.script_index``), so an edited script is a
new key. ``spec.speedKey`` overrides it (for a script that reads its model from elsewhere, or
several scripts that run alike).

When a job ends, its progress samples give a speed per worker count (``measured_rates``), kept
in the store under its key with the job's id; the next job with that key starts from a curve
anchored at those counts (``remembered_curve``) instead of the placeholder or the table. Its
start-up (``measured_startup_s``: from a runner's launch to its first report, when no iteration
counts) is kept too: the next job's deadline is planned that much earlier, since its start
costs as much.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Mapping, Sequence
from itertools import pairwise
from pathlib import Path

from qosched.backends.local.jobspec import TrainingJobSpec, script_index
from qosched.cluster.throughput import SpeedCurve

#: An interval between two progress samples longer than this is not counted: the job was most
#: likely stopped in between (pre-empted, re-sized, the service down), not running slowly.
MAX_INTERVAL_S = 30.0
#: A count is remembered only with at least this much running observed on it, over at least
#: ``MIN_INTERVALS`` intervals: a speed from one sample pair is mostly start-up.
MIN_OBSERVED_S = 5.0
MIN_INTERVALS = 3
#: The most of a script read for its key: a script is source, not data.
MAX_SCRIPT_BYTES = 16 << 20


def speed_key(spec: TrainingJobSpec) -> str:
    """The key ``spec``'s speed is remembered under (see the module docstring)."""
    if spec.speed_key is not None:
        return f"user:{spec.speed_key}"
    if spec.workload is not None:
        return f"workload:{spec.workload}"
    assert spec.command is not None
    digest = hashlib.sha256()
    for part in (*spec.command, spec.launcher or "", "gpu" if spec.gpu else "cpu"):
        digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
    index = script_index(spec.command, spec.launcher)
    if index is not None:
        digest.update(_script_bytes(spec, spec.command[index]))
    return f"command:{digest.hexdigest()[:32]}"


def _script_bytes(spec: TrainingJobSpec, script: str) -> bytes:
    path = Path(script)
    if not path.is_absolute() and spec.working_dir is not None:
        path = Path(spec.working_dir) / path
    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_SCRIPT_BYTES)
    except OSError:
        return b"<unreadable>"  # still a key: the command's words alone


def intervals_by_count(
    samples: Sequence[tuple[float, int, int]],
) -> dict[int, list[tuple[float, int]]]:
    """Per worker count, the ``(seconds, iterations)`` between consecutive ``(t, iteration,
    workers)`` samples on that count, leaving out intervals over ``MAX_INTERVAL_S`` and ones
    where progress went back (a restart from a checkpoint): what a speed is measured on."""
    spans: dict[int, list[tuple[float, int]]] = {}
    for (t0, i0, w0), (t1, i1, w1) in pairwise(samples):
        elapsed = t1 - t0
        if w0 != w1 or w0 <= 0 or i1 < i0 or not 0 < elapsed <= MAX_INTERVAL_S:
            continue
        spans.setdefault(w0, []).append((elapsed, i1 - i0))
    return spans


def measured_rates(samples: Sequence[tuple[float, int, int]]) -> dict[int, float]:
    """Iterations/s per worker count from ``(t, iteration, workers)`` samples in order: the
    iterations done over the time spent in ``intervals_by_count``, for counts observed for at
    least ``MIN_OBSERVED_S`` over ``MIN_INTERVALS``."""
    rates = {}
    for workers, spans in sorted(intervals_by_count(samples).items()):
        spent = sum(elapsed for elapsed, _ in spans)
        done = sum(work for _, work in spans)
        if spent >= MIN_OBSERVED_S and len(spans) >= MIN_INTERVALS and done > 0:
            rates[workers] = done / spent
    return rates


def measured_startup_s(
    launches: Sequence[float], samples: Sequence[tuple[float, int, int]]
) -> float | None:
    """The longest a runner took from its launch (times in ``launches``) to its first progress
    sample after it: what a start costs this job before any iteration counts (importing its
    framework, loading data). None when no launch was followed by a sample."""
    times = sorted(sample[0] for sample in samples)
    waits = []
    for launched in launches:
        index = bisect.bisect_right(times, launched)
        if index < len(times):
            waits.append(times[index] - launched)
    return max(waits) if waits else None


def remembered_curve(prior: SpeedCurve, rates: Mapping[int, float]) -> SpeedCurve:
    """``prior`` with the remembered ``rates`` in place at their counts (which become its
    measured ones); every other count keeps the prior's shape, scaled by the remembered speed
    at the nearest remembered count (the lower one on a tie)."""
    usable = {w: r for w, r in rates.items() if 0 < w <= prior.max_workers and r > 0}
    if not usable:
        return prior
    speeds = list(prior.speeds)
    for workers in range(1, len(speeds)):
        if workers in usable:
            speeds[workers] = usable[workers]
            continue
        nearest = min(usable, key=lambda w: (abs(w - workers), w))
        base = prior.rate(nearest)
        if base > 0 and speeds[workers] > 0:
            speeds[workers] = speeds[workers] * usable[nearest] / base
    return SpeedCurve(prior.model, prior.batch_size, tuple(speeds), tuple(sorted(set(usable))))
