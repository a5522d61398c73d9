"""Training-time prediction for a data-parallel job from its own progress.

A job's time per iteration on ``n`` workers (GPUs or CPU cores) is modelled as

    T(n) = compute_s / n + comm_s * (n - 1) + overhead_s,   all three >= 0:

the compute of one iteration split across the workers, gradient communication that grows with
the number of workers, and a constant per-iteration overhead (data loading, optimizer step).

A prior model comes from a measured speed table (`prior_from_curve`); `OnlinePredictor` then
corrects it from the job's own progress reports, cheaply enough for a policy to ask about a
thousand jobs per decision: the fit is cached and redone only after new observations, and it is a
3-parameter non-negative least squares over one row per worker count, never over raw samples.

With ``recent_s`` (a backend whose jobs' speeds drift, e.g. on machines shared with other work),
the fit gives only the shape: each count is predicted at what the job ran at lately, and a
count without recent data at the fit scaled by how fast the job runs now against it.

How the fit and the uncertainty band are built, and their defaults, is documented on
`OnlinePredictor`.
"""

from __future__ import annotations

import bisect
import math
import operator
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from qosched.cluster.throughput import SpeedCurve

#: Seconds of observation the prior is worth, in total, once a job has run at >= 2 worker counts:
#: a few progress reports. Smaller lets noisy data at close counts extrapolate wildly; larger
#: holds a job whose shape differs from its table to the table for longer (see the tests).
DEFAULT_PRIOR_WEIGHT_S = 300.0
#: One-sigma log-uncertainty of the prior's level before any data: a job runs within a factor
#: ``exp(0.3)`` (about ±30 %) of its table's speed two times in three.
DEFAULT_PRIOR_SIGMA = 0.3
#: The coverage of the prediction band unless one is asked for.
DEFAULT_CONFIDENCE = 0.9
#: The quantile of a speed the job measured itself (a ``SpeedCurve.spread``) that its band's lower
#: edge stands at before it runs again: a deadline promised on that edge is met 19 times in 20
#: when the speed strays as it was seen to.
MEASURED_LOW_QUANTILE = 0.05
#: Where the prior is used as pseudo-observations when its own measured counts are not known:
#: the columns of the bundled tables.
DEFAULT_PRIOR_COUNTS = (1, 2, 4, 8, 16, 32, 64)
#: Assumed log-dispersion of one progress interval before the job's own dispersion is known, and
#: how many degrees of freedom that guess is worth (it is pooled with the observed dispersion).
NOISE_PRIOR_SIGMA = 0.1
NOISE_PRIOR_DOF = 2
#: One-sigma log-uncertainty the prior's *shape* adds per doubling (or halving) of the worker
#: count away from the nearest observed count, capped at the prior's own sigma.
EXTRAPOLATION_SIGMA_PER_DOUBLING = 0.1
#: The widest band reported: a factor of e**7 (about 1100) either way, i.e. "speed unknown".
MAX_LOG_HALF_WIDTH = 7.0
#: With ``recent_s``: seconds of recent observation at a count that weigh as much as the level
#: carried over from the job's other counts. Less trusts one noisy report at a new count; more
#: keeps a count on the level measured elsewhere for longer after a re-size.
RECENT_SHRINK_S = 1.0
#: With ``recent_s``: the time constant of forgetting grows to this fraction of the job's running
#: time, so the longer a job has run, the longer the stretch its prediction averages over.
RECENT_AGE_FRACTION = 0.1


@dataclass(frozen=True, slots=True)
class IterationTimeModel:
    """``T(n) = compute_s / n + comm_s * (n - 1) + overhead_s`` seconds per iteration."""

    compute_s: float
    comm_s: float
    overhead_s: float

    def __post_init__(self) -> None:
        params = (self.compute_s, self.comm_s, self.overhead_s)
        if not all(math.isfinite(p) and p >= 0.0 for p in params):
            raise ValueError(f"model parameters must be finite and >= 0, got {self}")
        if self.compute_s + self.overhead_s <= 0.0:
            raise ValueError(f"compute_s + overhead_s must be > 0 so that T(1) > 0, got {self}")

    def iteration_time(self, n: float) -> float:
        """Seconds per iteration on ``n >= 1`` workers."""
        if not n >= 1:
            raise ValueError(f"worker count must be >= 1, got {n!r}")
        return self.compute_s / n + self.comm_s * (n - 1) + self.overhead_s

    def rate(self, n: float) -> float:
        """Iterations per second on ``n >= 1`` workers."""
        return 1.0 / self.iteration_time(n)

    def scaled(self, factor: float) -> IterationTimeModel:
        """The same shape with every iteration time multiplied by ``factor > 0``."""
        if not (math.isfinite(factor) and factor > 0.0):
            raise ValueError(f"scale factor must be finite and > 0, got {factor!r}")
        return IterationTimeModel(
            self.compute_s * factor, self.comm_s * factor, self.overhead_s * factor
        )

    @classmethod
    def fit(
        cls,
        counts: Sequence[float],
        iteration_times: Sequence[float],
        weights: Sequence[float] | None = None,
    ) -> IterationTimeModel:
        """Non-negative least squares on relative error: minimise ``sum w (T(n)/t - 1)^2``.

        Relative error, because iteration times at 1 and 64 workers differ by an order of
        magnitude and both matter equally to a prediction. With fewer than three distinct counts
        the three parameters are not identified and NNLS returns one of the exact fits.
        """
        n = np.asarray(counts, dtype=float)
        t = np.asarray(iteration_times, dtype=float)
        w = np.ones_like(t) if weights is None else np.asarray(weights, dtype=float)
        if n.ndim != 1 or t.ndim != 1 or w.ndim != 1:
            raise ValueError("counts, iteration_times and weights must be flat sequences")
        if not (len(n) == len(t) == len(w)):
            raise ValueError(
                f"mismatched lengths: {len(n)} counts, {len(t)} iteration times, {len(w)} weights"
            )
        if len(n) == 0:
            raise ValueError("cannot fit an iteration-time model to no samples")
        if not (np.all(np.isfinite(n)) and np.all(np.isfinite(t)) and np.all(np.isfinite(w))):
            raise ValueError("counts, iteration times and weights must be finite")
        if np.any(n < 1):
            raise ValueError(f"worker counts must be >= 1, got {n[n < 1].tolist()}")
        if np.any(t <= 0):
            raise ValueError(f"iteration times must be > 0, got {t[t <= 0].tolist()}")
        if np.any(w < 0) or not np.any(w > 0):
            raise ValueError("weights must be >= 0 with at least one > 0")
        return _fit_unchecked(n, t, w)


def _fit_unchecked(n: np.ndarray, t: np.ndarray, w: np.ndarray) -> IterationTimeModel:
    """`IterationTimeModel.fit` on arrays already validated (the online predictor's own)."""
    root_w = np.sqrt(w)
    design = np.empty((len(n), 3))
    design[:, 0] = 1.0 / n
    design[:, 1] = n - 1.0
    design[:, 2] = 1.0
    design *= (root_w / t)[:, None]
    # Unit-norm columns: comm_s is ~1000x smaller than compute_s, and NNLS is scale-free in
    # exact arithmetic, so scaling only helps its conditioning.
    norms = np.sqrt((design * design).sum(axis=0))
    norms[norms == 0.0] = 1.0
    from scipy.optimize import nnls  # here: a start-up cost only refits pay

    solution, _ = nnls(design / norms, root_w)
    compute, comm, overhead = (float(v) for v in solution / norms)
    if compute + overhead <= 0.0:
        raise ValueError(
            f"degenerate fit (only communication time) to counts {n.tolist()}; "
            "add samples at fewer workers"
        )
    return IterationTimeModel(compute, comm, overhead)


@lru_cache(maxsize=1024)
def prior_from_curve(curve: SpeedCurve) -> IterationTimeModel:
    """Fit to the curve's measured counts only (interpolated counts add no information)."""
    # NOTE: cached (the model is immutable): every job of a (model, batch size) has the same
    # prior, and a trace has a few dozen of them against up to 100,000 jobs, each a NNLS fit.
    if not curve.measured:
        raise ValueError(f"{curve.model} at batch size {curve.batch_size} has no measured speed")
    times = [1.0 / curve.rate(g) for g in curve.measured]
    return IterationTimeModel.fit(curve.measured, times)


@dataclass(frozen=True, slots=True)
class Prediction:
    """Iterations/s at one worker count: a point and a band, ``rate_low <= rate <= rate_high``."""

    rate: float
    rate_low: float
    rate_high: float

    def __post_init__(self) -> None:
        if not 0.0 < self.rate_low <= self.rate <= self.rate_high:
            raise ValueError(f"need 0 < rate_low <= rate <= rate_high, got {self}")

    def remaining_s(self, iterations: float) -> tuple[float, float, float]:
        """Seconds to run ``iterations`` more: (expected, optimistic, pessimistic)."""
        if not (math.isfinite(iterations) and iterations >= 0):
            raise ValueError(f"remaining iterations must be finite and >= 0, got {iterations!r}")
        return iterations / self.rate, iterations / self.rate_high, iterations / self.rate_low


def relative_error(predicted: float, actual: float) -> float:
    """``|predicted - actual| / actual`` for a positive ``actual``."""
    if not actual > 0:
        raise ValueError(f"actual value must be > 0, got {actual!r}")
    return abs(predicted - actual) / actual


@lru_cache(maxsize=4096)
def _t_quantile(confidence: float, dof: int) -> float:
    # NOTE: cached because scipy's ppf costs about 100 µs, more than the rest of a refit; the
    # caller caps dof at 400 (within 0.2 % of the normal quantile) to keep the cache small.
    # SciPy is imported at first use: `qosched sim cluster --help` must not pay for it, and
    # scipy.special (the functions scipy.stats' t.ppf calls) is much lighter than scipy.stats.
    from scipy.special import stdtrit

    return float(stdtrit(dof, 0.5 + confidence / 2.0))


class _CountStats:
    """Sufficient statistics of the intervals observed at one worker count.

    ``mean_log`` and ``m2`` are the duration-weighted mean and sum of squared deviations of
    ``log(dt / d_iterations)``, updated in one pass (West's weighted Welford update).
    ``recent_seconds`` and ``recent_iterations`` are the same sums with every interval's weight
    multiplied by ``exp(-age / memory)`` as of ``recent_at``, the end of the latest (kept only
    with a ``recent_s``; see `OnlinePredictor._memory_s`).
    """

    __slots__ = (
        "intervals",
        "iterations",
        "m2",
        "mean_log",
        "recent_at",
        "recent_iterations",
        "recent_seconds",
        "seconds",
    )

    def __init__(self) -> None:
        self.seconds = 0.0
        self.iterations = 0.0
        self.intervals = 0
        self.mean_log = 0.0
        self.m2 = 0.0
        self.recent_seconds = 0.0
        self.recent_iterations = 0.0
        self.recent_at = 0.0

    def add_recent(self, end_s: float, dt: float, d_iterations: float, recent_s: float) -> None:
        decay = math.exp(-(end_s - self.recent_at) / recent_s) if self.recent_seconds else 0.0
        self.recent_seconds = self.recent_seconds * decay + dt
        self.recent_iterations = self.recent_iterations * decay + d_iterations
        self.recent_at = end_s

    def add(self, dt: float, d_iterations: float) -> None:
        y = math.log(dt / d_iterations)
        self.intervals += 1
        self.iterations += d_iterations
        self.seconds += dt
        delta = y - self.mean_log
        self.mean_log += delta * dt / self.seconds
        self.m2 += dt * delta * (y - self.mean_log)

    @property
    def iteration_time(self) -> float:
        return self.seconds / self.iterations


class OnlinePredictor:
    """A job's speed at any worker count, learnt online from its cumulative progress.

    **Observations.** `observe` takes the cumulative ``(time_s, iterations_done)`` samples a
    backend reports. Two consecutive samples make one interval whose iteration time
    ``dt / d_iterations`` is an observation of ``T(workers)``, weighted by its duration ``dt``.
    Per worker count only sums are kept (seconds, iterations, intervals, and a running mean and
    spread of the log iteration time), so memory and refit cost do not grow with the job's age.

    **Fit** (cached; redone at the first query after new observations, counted in `fit_count`):

    - no data: the prior.
    - one observed count ``m``: the prior's shape scaled so ``T(m)`` equals the observed mean
      ``sum dt / sum d_iterations`` there.
    - >= 2 observed counts: NNLS (relative error) over one row per observed count, weighted by its
      observed seconds, plus pseudo-observations of the prior at ``prior_counts`` sharing
      ``prior_weight_s`` seconds of weight in total. The pseudo-observations are the prior
      *scaled to the data's level* (the duration-weighted geometric mean of observed/prior times),
      so the prior constrains only the shape: the level comes from the data from the first
      interval on (with one count, this fit would return the one-count rule's model, which fits
      every row exactly). As observed seconds grow, the data outweighs the prior and the fit
      converges to the job's own curve. If NNLS finds only communication time (T(1) = 0), the
      scaled prior is kept.

    **Table shape.** With a ``table`` (the speed curve the prior was fitted to; `from_curve` passes
    it), a prediction is the table's speed times the fit's correction ``fit(n) / prior(n)``
    wherever the table has a speed: before any data that is the table itself, after data at one
    count the table scaled to the job's level. Observed times are fitted in the prior's terms
    (divided by the table's deviation from it at their count), so a job running exactly at its
    table's speeds is predicted exactly at every count. Three parameters cannot follow a measured
    curve exactly (a 9 % error at 16 GPUs for ResNet-50 at batch 64), and a planner deciding
    whether a count meets a deadline by 2 % must see the table's speed, not the smooth fit's.

    **Band** at confidence ``c``, symmetric in log-rate (``rate / f .. rate * f``):

    - no data: ``f = exp(z * prior_sigma)``, ``z`` the normal quantile of ``c``; at a count
      ``prior_sigmas`` names, with its sigma instead (speeds measured for different lengths of
      time are trusted differently).
    - at an observed count: a Student-t interval of the mean log iteration time, from the spread
      of the intervals around their count's mean, pooled over all counts (noise is a property of
      the job) together with a guess of ``NOISE_PRIOR_SIGMA`` per interval worth
      ``NOISE_PRIOR_DOF`` degrees of freedom (so one interval already gets a finite band). The
      variance of an interval is taken as inversely proportional to its duration, which is what
      makes duration the right weight; the half-width shrinks like ``1 / sqrt(observed
      seconds)`` at that count. Any misfit of the model at that count is added to it.
    - at a count never observed: the half-width at the nearest observed count (in log2 distance)
      combined in quadrature with ``z * min(EXTRAPOLATION_SIGMA_PER_DOUBLING * doublings,
      prior_sigma)``: the prior's shape is trusted less the further it is extrapolated from data,
      and the cap keeps data at one count from making another less certain than the prior alone.
      Between two observed counts the fit is pinned on both sides, so the doublings count half.
    - with ``recent_s``, at an observed count the band reaches, on one side, from the prediction
      (recent) to the count's whole mean instead of the fit's misfit: a speed that moved lately
      may move back. Elsewhere each side extrapolates its own width at the nearest count.

    **Recent speed** (with ``recent_s``, for a job whose speed drifts, e.g. on a machine shared
    with other work): the fit above gives the shape; the level comes from what the job ran at
    lately. Per observed count, the recent iteration time is the observed one with each interval
    weighted by ``exp(-age / memory)``, age in the job's running time from the end of its latest
    interval and ``memory = max(recent_s, RECENT_AGE_FRACTION * running time)`` (a long job's
    prediction averages over a longer stretch: its checkpoints and evaluations come and go),
    and its ratio to the fit is that count's recent deviation. A count is
    predicted at the fit times its own deviation, shrunk towards the deviation of all counts
    together (weighted by their recent weight, so mostly the current count's) by
    ``RECENT_SHRINK_S`` seconds: a count with a few seconds of recent data is predicted from
    them, and a count without (a re-size to a count never run, or run long ago) at the fit
    scaled by how fast the job runs now against the fit. Without ``recent_s`` every interval
    weighs by its duration alone, whatever its age, and a prediction is the fit's.

    Intervals with no progress, or of zero length, are ignored (a paused or restarting job reports
    no progress; the next interval starts at that sample). Report a sample at every allocation
    change and at the end of every restart pause: an interval that mixes a pause with progress
    looks like a slow job.
    """

    def __init__(
        self,
        prior: IterationTimeModel,
        *,
        prior_weight_s: float = DEFAULT_PRIOR_WEIGHT_S,
        confidence: float = DEFAULT_CONFIDENCE,
        prior_sigma: float = DEFAULT_PRIOR_SIGMA,
        prior_counts: Sequence[int] = DEFAULT_PRIOR_COUNTS,
        table: SpeedCurve | None = None,
        recent_s: float | None = None,
        prior_sigmas: Mapping[int, float] | None = None,
    ) -> None:
        if not (math.isfinite(prior_weight_s) and prior_weight_s >= 0):
            raise ValueError(f"prior_weight_s must be finite and >= 0, got {prior_weight_s!r}")
        if not 0.0 < confidence < 1.0:
            raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
        if not (math.isfinite(prior_sigma) and prior_sigma > 0):
            raise ValueError(f"prior_sigma must be finite and > 0, got {prior_sigma!r}")
        if not prior_counts or any(c < 1 for c in prior_counts):
            raise ValueError(f"prior_counts must be non-empty counts >= 1, got {prior_counts!r}")
        if recent_s is not None and not (math.isfinite(recent_s) and recent_s > 0):
            raise ValueError(f"recent_s must be finite and > 0 (or None), got {recent_s!r}")
        for count, sigma in (prior_sigmas or {}).items():
            if not (math.isfinite(sigma) and sigma > 0):
                raise ValueError(f"prior_sigmas[{count}] must be finite and > 0, got {sigma!r}")
        self.prior = prior
        self.prior_weight_s = float(prior_weight_s)
        self.confidence = float(confidence)
        self.prior_sigma = float(prior_sigma)
        self.prior_counts = tuple(sorted(set(prior_counts)))
        self.table = table
        self.recent_s = None if recent_s is None else float(recent_s)
        self.prior_sigmas = {int(c): float(v) for c, v in (prior_sigmas or {}).items()}
        self.fit_count = 0
        self._z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2.0)
        self._stats: dict[int, _CountStats] = {}
        self._last: tuple[float, float] | None = None
        self._seconds = 0.0
        self._dirty = False
        self._model = prior
        self._observed_counts: list[int] = []
        self._half_width: dict[int, float] = {}  # log half-width at each observed count
        # With recent_s, the half-width above where it differs (see the class docstring).
        self._half_above: dict[int, float] | None = None
        self._predictions: dict[int, Prediction] = {}
        self._factors: dict[int, float] = {}  # see _table_factor
        self._extrapolations: dict[int, tuple[int, float]] = {}  # see _extrapolation
        # Recent speed against the fit (see the class docstring): the factor on the fit's
        # iteration time at each observed count, and at every other count.
        self._recent: dict[int, float] = {}
        self._recent_elsewhere = 1.0

    @classmethod
    def from_curve(cls, curve: SpeedCurve, **options) -> OnlinePredictor:
        """A predictor whose prior is fitted to ``curve`` and anchored at its measured counts, and
        whose predictions keep the curve's own shape (see ``table`` in the class docstring).
        Where the curve has a ``spread`` (the job's own measured speeds), the prior band's lower
        edge is the `MEASURED_LOW_QUANTILE` of a log-normal speed with that spread, at each count
        with that count's own (``SpeedCurve.spread_at``)."""
        options.setdefault("prior_counts", curve.measured)
        options.setdefault("table", curve)
        if curve.spread is not None:
            # The job's own speeds, measured on this machine: before it runs again its band's
            # lower edge is `MEASURED_LOW_QUANTILE` of what they were seen to do, whatever
            # coverage the band has later (a promise made now rests on that edge alone).
            normal = statistics.NormalDist()
            z = normal.inv_cdf(0.5 + options.get("confidence", DEFAULT_CONFIDENCE) / 2.0)
            scale = -normal.inv_cdf(MEASURED_LOW_QUANTILE) / z
            options.setdefault("prior_sigma", curve.spread * scale)
            if curve.spreads:
                options.setdefault(
                    "prior_sigmas",
                    {g: sigma * scale for g, sigma in enumerate(curve.spreads) if sigma > 0},
                )
        return cls(prior_from_curve(curve), **options)

    def _table_factor(self, workers: int) -> float:
        """How much faster the table says the job runs on ``workers`` than the prior model does
        (1 without a table, or where the table has no speed); fixed, so kept per count."""
        factor = self._factors.get(workers)
        if factor is None:
            table = self.table
            if table is None or not table.available(workers):
                factor = 1.0
            else:
                factor = table.rate(workers) * self.prior.iteration_time(workers)
            self._factors[workers] = factor
        return factor

    @property
    def observed_seconds(self) -> float:
        """Total duration of the intervals used (zero-progress intervals excluded)."""
        return self._seconds

    def observe(self, time_s: float, iterations_done: float, workers: int) -> None:
        """Record a cumulative progress sample.

        ``time_s`` and ``iterations_done`` are cumulative and must not decrease (ValueError).
        ``workers`` is the allocation during the interval that *ends* at this sample, from the
        previous sample to this one; it is ignored for the first sample, which only sets the
        start. A zero-length or zero-progress interval is skipped; ``workers = 0`` (a job without
        workers) is allowed only with zero progress.
        """
        if not (math.isfinite(time_s) and math.isfinite(iterations_done)):
            raise ValueError(
                f"time and iterations must be finite, got {time_s!r}, {iterations_done!r}"
            )
        workers = operator.index(workers)
        if self._last is None:
            self._last = (time_s, iterations_done)
            return
        last_time, last_iterations = self._last
        if time_s < last_time:
            raise ValueError(f"time went backwards: {time_s} s after a sample at {last_time} s")
        if iterations_done < last_iterations:
            raise ValueError(
                f"iterations went backwards at {time_s} s: {iterations_done} after "
                f"{last_iterations}"
            )
        dt, d_iterations = time_s - last_time, iterations_done - last_iterations
        if d_iterations > 0 and dt > 0 and workers < 1:
            raise ValueError(
                f"progress of {d_iterations} iterations at {time_s} s with {workers} workers"
            )
        self._last = (time_s, iterations_done)
        if dt <= 0 or d_iterations <= 0:
            return
        stats = self._stats.get(workers)
        if stats is None:
            stats = self._stats[workers] = _CountStats()
        stats.add(dt, d_iterations)
        if self.recent_s is not None:
            stats.add_recent(time_s, dt, d_iterations, self._memory_s(time_s))
        self._seconds += dt
        self._dirty = True

    @property
    def last_iterations(self) -> float | None:
        """The iterations done at the last sample (None before the first)."""
        return None if self._last is None else self._last[1]

    def restart(self, time_s: float, iterations_done: float) -> None:
        """Start the next interval at this sample without recording the one it ends: the job
        lost progress (it restarted from an older checkpoint, or from scratch), so that
        interval's iterations say nothing about its speed. What was learnt stays."""
        if not (math.isfinite(time_s) and math.isfinite(iterations_done)):
            raise ValueError(
                f"time and iterations must be finite, got {time_s!r}, {iterations_done!r}"
            )
        if self._last is not None and time_s < self._last[0]:
            raise ValueError(f"time went backwards: {time_s} s after a sample at {self._last[0]} s")
        self._last = (time_s, iterations_done)

    def model(self) -> IterationTimeModel:
        """The current fit (the same object until new observations arrive)."""
        if self._dirty:
            self._refit()
        return self._model

    def predict(self, workers: int) -> Prediction:
        """Rate and band at ``workers >= 1``; cached per count between observations."""
        if self._dirty:
            self._refit()
        cached = self._predictions.get(workers)
        if cached is not None:
            return cached
        ((rate, below, above),) = self._rates_and_spreads((workers,))
        prediction = Prediction(rate, rate / below, rate * above)
        self._predictions[workers] = prediction
        return prediction

    def rates(self, counts: Sequence[int]) -> list[tuple[float, float]]:
        """``(rate, rate_low)`` of `predict` at each of ``counts``: the same numbers, without a
        `Prediction` per count (a policy refreshing a job's ladders asks for all its counts)."""
        if self._dirty:
            self._refit()
        pairs = []
        for rate, below, above in self._rates_and_spreads(counts):
            low = rate / below
            if not 0.0 < low <= rate:
                Prediction(rate, low, rate * above)  # raises, as `predict` would
            pairs.append((rate, low))
        return pairs

    def _rates_and_spreads(self, counts: Sequence[int]) -> list[tuple[float, float, float]]:
        """The point rate at each of ``counts`` and the factors of its band below and above (the
        same factor without ``recent_s``)."""
        # NOTE: the model's `rate` and `min` written out (the same operations in the same
        # order), the look-ups taken once: a policy refreshes several jobs' ladders at every
        # decision.
        model = self._model
        compute, comm, overhead = model.compute_s, model.comm_s, model.overhead_s
        factors, table_factor = self._factors, self._table_factor
        recent, elsewhere = self._recent, self._recent_elsewhere
        half_width, exp, hypot = self._half_width, math.exp, math.hypot
        half_above = self._half_above
        half_unseen = self._z * self.prior_sigma if not self._observed_counts else None
        sigmas = self.prior_sigmas if half_unseen is not None else None
        result = []
        for workers in counts:
            if not workers >= 1:
                model.rate(workers)  # raises
            factor = factors.get(workers)
            if factor is None:
                factor = table_factor(workers)
            rate = 1.0 / (compute / workers + comm * (workers - 1) + overhead) * factor
            if elsewhere != 1.0 or recent:
                rate /= recent.get(workers, elsewhere)
            up = None
            if half_unseen is not None:
                sigma = sigmas.get(workers) if sigmas else None
                half = half_unseen if sigma is None else self._z * sigma
            elif workers in half_width:
                half = half_width[workers]
                if half_above is not None:
                    up = half_above[workers]
            else:
                nearest, shape = self._extrapolation(workers)
                half = hypot(half_width[nearest], shape)
                if half_above is not None:
                    up = hypot(half_above[nearest], shape)
            # A count seen for a sliver of time has a huge stated uncertainty; the band is
            # capped so that it stays a number (exp overflows past ~709) and reads as "unknown".
            if half > MAX_LOG_HALF_WIDTH:
                half = MAX_LOG_HALF_WIDTH
            below = exp(half)
            if up is None:
                result.append((rate, below, below))
            else:
                result.append((rate, below, exp(min(up, MAX_LOG_HALF_WIDTH))))
        return result

    def _extrapolation(self, workers: int) -> tuple[int, float]:
        """(nearest observed count, the band's shape term) at a count never observed.

        Depends only on which counts have been observed, so it is kept per count until a new
        count is observed (`_refit` clears it then): most refits only add time at known counts.
        """
        cached = self._extrapolations.get(workers)
        if cached is None:
            nearest = self._nearest_observed(workers)
            doublings = abs(math.log2(workers / nearest))
            if self._observed_counts[0] < workers < self._observed_counts[-1]:
                doublings /= 2.0  # interpolating between data, not extrapolating past it
            shape = self._z * min(EXTRAPOLATION_SIGMA_PER_DOUBLING * doublings, self.prior_sigma)
            cached = self._extrapolations[workers] = (nearest, shape)
        return cached

    def completion_s(
        self, now: float, remaining_iterations: float, workers: int
    ) -> tuple[float, float, float]:
        """Absolute completion time if the job keeps ``workers`` from ``now``: (expected,
        optimistic, pessimistic)."""
        expected, optimistic, pessimistic = self.predict(workers).remaining_s(remaining_iterations)
        return now + expected, now + optimistic, now + pessimistic

    def _nearest_observed(self, workers: int) -> int:
        counts = self._observed_counts
        i = bisect.bisect_left(counts, workers)
        candidates = counts[max(i - 1, 0) : i + 1]
        return min(candidates, key=lambda c: abs(math.log(workers / c)))

    def _refit(self) -> None:
        self.fit_count += 1
        self._dirty = False
        self._predictions.clear()
        counts = sorted(self._stats)
        stats = [self._stats[c] for c in counts]
        # Observed times in the prior model's terms (the table's deviation from the model taken
        # out), so the fit corrects the prior and the table's shape is put back in `predict`.
        means = [
            s.iteration_time * self._table_factor(c) for c, s in zip(counts, stats, strict=True)
        ]
        log_scale = sum(
            s.seconds * math.log(mean / self.prior.iteration_time(c))
            for c, s, mean in zip(counts, stats, means, strict=True)
        ) / sum(s.seconds for s in stats)
        scaled_prior = self.prior.scaled(math.exp(log_scale))
        model = scaled_prior
        if len(counts) >= 2:
            pseudo = self.prior_weight_s / len(self.prior_counts)
            try:
                model = _fit_unchecked(
                    np.array([*counts, *self.prior_counts], dtype=float),
                    np.array(
                        [*means, *(scaled_prior.iteration_time(c) for c in self.prior_counts)]
                    ),
                    np.array([*(s.seconds for s in stats), *([pseudo] * len(self.prior_counts))]),
                )
            except ValueError:
                model = scaled_prior  # degenerate data: keep the prior's shape at the data's level
        self._model = model

        intervals = sum(s.intervals for s in stats)
        mean_duration = self._seconds / intervals
        dof = NOISE_PRIOR_DOF + intervals - len(counts)
        # Variance of log iteration time per interval of one second (see the class docstring).
        per_second = (
            NOISE_PRIOR_DOF * NOISE_PRIOR_SIGMA**2 * mean_duration + sum(s.m2 for s in stats)
        ) / dof
        quantile = _t_quantile(self.confidence, min(dof, 400))
        if counts != self._observed_counts:
            self._extrapolations.clear()
        self._observed_counts = counts
        if self.recent_s is None:
            self._half_width = {
                c: quantile * math.sqrt(per_second / s.seconds)
                + abs(math.log(model.iteration_time(c) / mean))
                for c, s, mean in zip(counts, stats, means, strict=True)
            }
            return
        self._refit_recent(model, counts, stats)
        self._half_width, self._half_above = {}, {}
        for c, s, mean in zip(counts, stats, means, strict=True):
            noise = quantile * math.sqrt(per_second / s.seconds)
            # > 0: predicted slower than its whole mean there, which the band reaches up to.
            gap = math.log(model.iteration_time(c) * self._recent[c] / mean)
            self._half_width[c] = noise + max(0.0, -gap)
            self._half_above[c] = noise + max(0.0, gap)

    def _memory_s(self, time_s: float) -> float:
        """The time constant of forgetting at ``time_s`` of the job's running time."""
        return max(self.recent_s, RECENT_AGE_FRACTION * time_s)

    def _refit_recent(
        self, model: IterationTimeModel, counts: list[int], stats: list[_CountStats]
    ) -> None:
        """Each observed count's recent deviation from ``model``, shrunk towards the deviation of
        all counts together, and that overall deviation for every other count."""
        latest = max(s.recent_at for s in stats)
        deviations, weights = [], []
        for c, s in zip(counts, stats, strict=True):
            recent_time = s.recent_seconds / s.recent_iterations * self._table_factor(c)
            deviations.append(math.log(recent_time / model.iteration_time(c)))
            age = latest - s.recent_at
            weights.append(s.recent_seconds * math.exp(-age / self._memory_s(latest)))
        overall = sum(w * d for w, d in zip(weights, deviations, strict=True)) / sum(weights)
        self._recent_elsewhere = math.exp(overall)
        self._recent = {
            c: math.exp((w * d + RECENT_SHRINK_S * overall) / (w + RECENT_SHRINK_S))
            for c, w, d in zip(counts, weights, deviations, strict=True)
        }
