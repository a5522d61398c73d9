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

How far the speed strayed is kept with it (``measured_spread``: over stretches of a few seconds
while the job ran, or the change from the speed remembered before, ``drift_spread``, whichever is
larger): a deadline is guaranteed on the remembered speed less that spread, so a promise made on
a machine whose other work comes and goes leaves room for it (docs/local.md, "Speeds
remembered"). Each count is also kept with how long it was measured and its own spread
(``CountTrust``): a speed measured for seconds is trusted less than one measured for minutes.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from qosched.cluster.throughput import SpeedCurve
from qosched.trainingjob.jobspec import TrainingJobSpec, script_index

#: An interval between two progress samples longer than this is not counted: the job was most
#: likely stopped in between (pre-empted, re-sized, the service down), not running slowly.
MAX_INTERVAL_S = 30.0
#: A count is remembered only with at least this much running observed on it, over at least
#: ``MIN_INTERVALS`` intervals: a speed from one sample pair is mostly start-up.
MIN_OBSERVED_S = 5.0
MIN_INTERVALS = 3
#: The stretches whose speeds give a job's spread (``measured_spread``) last at least this long:
#: shorter ones stray by an iteration's own jitter, which averages out over a deadline.
SPREAD_WINDOW_S = 4.0
#: Bounds of a remembered spread (``clamp_spread``), as a standard deviation of the log speed.
MIN_SPREAD = 0.02
MAX_SPREAD = 0.5
#: The spread of speeds remembered without one (too few stretches to measure it).
DEFAULT_SPREAD = 0.1
#: How much less a speed measured for only a few seconds is trusted: its log speed is taken to
#: stray from what the job sustains on that count by a further standard deviation of
#: ``sqrt(SHORT_VARIANCE_S / seconds measured)`` (``CountTrust.sigma``). Calibrated on two
#: repeats of ``bench/local_first_time.py`` on the quiet 2-core machine (their kept homes, 6
#: job-counts run at least 50 s; ``bench/count_trust.py``): the speed of a count's first D
#: seconds against the rest of that job on it strayed by (root mean square of the log ratio)
#: 0.089 at D = 4 s, 0.078 at 8 s, 0.071 at 15 s and 0.043 at 30 s, a job's first seconds on
#: two cores running up to 18% faster than it then sustained; 0.06 / D gives 0.12, 0.087, 0.063
#: and 0.045. It covers the sampling error of the mean of a few stretches, and the start of a
#: run being unlike the rest of it.
SHORT_VARIANCE_S = 0.06
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


def measured_spread(samples: Sequence[tuple[float, int, int]]) -> float | None:
    """How far the job's speed strayed from its mean on each worker count while it ran: the
    duration-weighted standard deviation of the log speed of stretches of at least
    ``SPREAD_WINDOW_S`` (consecutive `intervals_by_count` on one count, pooled over the counts,
    each about its own count's mean), clamped to ``[MIN_SPREAD, MAX_SPREAD]``. None with fewer
    than two stretches: one says nothing of how the speed moves."""
    deviations = [
        d for spans in intervals_by_count(samples).values() for d in _stretch_deviations(spans)
    ]
    return _spread_of(deviations)


def _stretch_deviations(spans: Sequence[tuple[float, int]]) -> list[tuple[float, float]]:
    """``(seconds, log speed - log mean)`` of each stretch of at least ``SPREAD_WINDOW_S`` of
    one count's ``spans``, about that count's mean."""
    spent, done = sum(e for e, _ in spans), sum(w for _, w in spans)
    if done <= 0:
        return []
    mean = math.log(done / spent)
    deviations = []
    window_s = window_done = 0.0
    for elapsed, work in spans:
        window_s, window_done = window_s + elapsed, window_done + work
        if window_s >= SPREAD_WINDOW_S:
            if window_done > 0:
                deviations.append((window_s, math.log(window_done / window_s) - mean))
            window_s = window_done = 0.0
    return deviations


def _spread_of(deviations: Sequence[tuple[float, float]]) -> float | None:
    """The clamped duration-weighted standard deviation of ``deviations``; None under two."""
    if len(deviations) < 2:
        return None
    weight = sum(seconds for seconds, _ in deviations)
    variance = sum(seconds * d * d for seconds, d in deviations) / weight
    return clamp_spread(math.sqrt(variance))


@dataclass(frozen=True, slots=True)
class CountTrust:
    """How far a speed measured on one worker count is trusted: how many ``seconds`` of running
    it was measured on, and how far that count's own stretches strayed (``spread``, as in
    `measured_spread`; None with fewer than two stretches)."""

    seconds: float
    spread: float | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.seconds) and self.seconds > 0):
            raise ValueError(f"a measured speed needs seconds > 0, got {self.seconds!r}")
        if self.spread is not None and not (0 < self.spread <= 1):
            raise ValueError(f"a count's spread is in (0, 1], got {self.spread!r}")

    def sigma(self, floor: float) -> float:
        """The standard deviation of the log speed a promise on this count is planned with:
        the count's own spread, at least ``floor`` (the job's pooled spread, or its drift
        between runs: a few stretches say little of how far a speed moves), combined with the
        short-measurement term ``SHORT_VARIANCE_S / seconds``; clamped (`clamp_spread`)."""
        own = floor if self.spread is None else max(self.spread, floor)
        return clamp_spread(math.sqrt(own * own + SHORT_VARIANCE_S / self.seconds))


def measured_trust(samples: Sequence[tuple[float, int, int]]) -> dict[int, CountTrust]:
    """`CountTrust` of each count `measured_rates` gives a speed for, from the same samples."""
    trust = {}
    rated = measured_rates(samples)
    for workers, spans in intervals_by_count(samples).items():
        if workers in rated:
            spent = sum(elapsed for elapsed, _ in spans)
            trust[workers] = CountTrust(spent, _spread_of(_stretch_deviations(spans)))
    return trust


def clamp_spread(spread: float) -> float:
    """``spread`` within what a promise is planned on: at least `MIN_SPREAD` (no stretch of
    running repeats exactly), at most `MAX_SPREAD` (a guarantee on less than 40% of the mean
    speed promises nothing useful: such a machine is busy with other work)."""
    return min(MAX_SPREAD, max(MIN_SPREAD, spread))


def drift_spread(remembered: Mapping[int, float], measured: Mapping[int, float]) -> float:
    """The largest change of log speed on a count both ``remembered`` (an earlier job) and
    ``measured`` (this one) ran on: how far a whole run's speed moved from one run to the next
    (the machine's other work changed), which a run's own stretches do not show. 0 when none."""
    shared = [w for w in measured if remembered.get(w, 0) > 0 and measured[w] > 0]
    return max((abs(math.log(measured[w] / remembered[w])) for w in shared), default=0.0)


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


def remembered_curve(
    prior: SpeedCurve,
    rates: Mapping[int, float],
    spread: float | None = None,
    trust: Mapping[int, CountTrust] | None = None,
) -> SpeedCurve:
    """``prior`` with the remembered ``rates`` in place at their counts (which become its
    measured ones); every other count keeps the prior's shape, scaled by the remembered speed
    at the nearest remembered count (the lower one on a tie). Its ``spread`` is ``spread``
    (clamped), or `DEFAULT_SPREAD` when rates are remembered without one. With ``trust``, each
    count's spread (``SpeedCurve.spreads``) is `CountTrust.sigma` of the count its speed comes
    from, floored at that ``spread``; a count remembered without one keeps ``spread``."""
    usable = {w: r for w, r in rates.items() if 0 < w <= prior.max_workers and r > 0}
    if not usable:
        return prior
    speeds = list(prior.speeds)
    sources = [0] * len(speeds)  # the remembered count each count's speed comes from
    for workers in range(1, len(speeds)):
        if workers in usable:
            speeds[workers] = usable[workers]
            sources[workers] = workers
            continue
        nearest = sources[workers] = min(usable, key=lambda w: (abs(w - workers), w))
        base = prior.rate(nearest)
        if base > 0 and speeds[workers] > 0:
            speeds[workers] = speeds[workers] * usable[nearest] / base
    spread = DEFAULT_SPREAD if spread is None else clamp_spread(spread)
    spreads: tuple[float, ...] = ()
    if trust and any(w in trust for w in usable):
        spreads = tuple(
            trust[source].sigma(spread) if source in trust else spread if source else 0.0
            for source in sources
        )
    measured = tuple(sorted(set(usable)))
    return SpeedCurve(prior.model, prior.batch_size, tuple(speeds), measured, spread, spreads)
