"""What-if runs: a mix simulated ahead of time, on arrivals and kernel times of its own.

A policy told each app's request as estimated kernels (``AppInfo.kernels``) can predict, before
the run, what each of a few candidate policies would give every app: :func:`predict` runs the
mix in this package's simulator for a short window, once per draw, and judges every app against
its goal (``gpushare.judge.outcomes``); :func:`choose` picks the candidate that meets the most
important goals with a margin and then gives the other apps the most throughput. Mechanism
only: the candidates are given as factories and nothing here names a policy.

What the prediction never sees is the run itself. Each draw's arrivals come from the what-if's
own seeds (a backend never tells a policy the run's seed, and the what-if does not guess it),
and every kernel's duration is perturbed a little, so that a candidate chosen here has to hold
on arrivals and times that are not the run's.

On ``gpu sim`` the what-if runs the same simulator the run is then judged in, so its prediction
is closer there than it can be on a real GPU, where what the simulator cannot show (cache and
memory-controller contention, clock changes: docs/results/gpushare.md) separates the two;
``gpu run`` is the test of that.
"""

from __future__ import annotations

import dataclasses
import math
import pickle
import signal
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context

import numpy as np

from qosched.core.errors import InputError
from qosched.core.goals import Goal, goal_met, shortfall
from qosched.gpushare.judge import AppOutcome, outcomes, rule_violations
from qosched.gpushare.policy import AppInfo, SharingPolicy
from qosched.gpushare.simulator import (
    MAX_LAUNCHES,
    AppWorkload,
    SimulatedApp,
    alone_results,
    compare,
    launch_rate,
    simulate,
)
from qosched.hardware import Processor
from qosched.hardware.measure import usable_core_count


@dataclass(frozen=True)
class WhatIf:
    """How a what-if is run.

    ``seeds``: one draw each (arrivals and perturbations), fixed and the what-if's own; a
    candidate must meet a goal on every draw. ``jitter``: every kernel's duration (and its
    bytes, so that its bandwidth share stays) is scaled by a factor drawn uniformly in
    ``[1 - jitter, 1 + jitter]``: a setting that meets a goal only at the exact estimated
    times is on a knife edge, and estimates are not exact. ``requests``: the window gives the
    most important app about this many requests, within ``[min_s, max_s]`` of simulated time
    (a p99 needs about 100), never longer than the run itself where the backend says how long
    that is (``AppInfo.horizon_s``), and shorter where the whole mix would launch more than
    ``max_launches`` kernels in it (a closed loop of sub-microsecond kernels would otherwise
    make the setup cost far more than the run). ``margin``: goals must be met with this share
    to spare (``goals.goal_met``). ``tolerance``: throughputs this close (relative) count as
    equal. ``told_estimates``: each candidate is told the estimates while the perturbed kernels
    run (``simulate``'s ``told``), as the policy will be in a run whose kernels are off their
    estimates; by default it is told the perturbed kernels, so the jitter stands for kernel
    times that vary, each known to the candidate, not for the estimates' own error (what each
    gives, where the kernels that run are off the estimates: docs/results/gpushare.md, "When
    the estimates are off"). ``workers``: processes the runs are shared among (0: one per core
    this process may use, at most :data:`DEFAULT_WORKERS`; 1: none but this one); every run is
    seeded and independent of the others, so the predictions are the same for any count.
    """

    seeds: tuple[int, ...] = (0x5EED0001, 0x5EED0002)
    jitter: float = 0.1
    requests: int = 100
    min_s: float = 0.01
    max_s: float = 0.2
    margin: float = 0.03
    tolerance: float = 0.02
    max_launches: int = 100_000
    told_estimates: bool = False
    workers: int = 0

    def __post_init__(self) -> None:
        if not self.seeds:
            raise InputError("a what-if needs at least one seed", field="seeds")
        if not 0 <= self.jitter < 1:
            raise InputError(f"must be in [0, 1), got {self.jitter!r}", field="jitter")
        if self.requests < 1 or not 0 < self.min_s <= self.max_s:
            raise InputError("requests must be >= 1 and 0 < min_s <= max_s", field="requests")
        if not (0 <= self.margin < 1 and 0 <= self.tolerance < 1):
            raise InputError("margin and tolerance must be in [0, 1)", field="margin")
        if not 1 <= self.max_launches <= MAX_LAUNCHES // 2:
            raise InputError(
                f"must be in [1, {MAX_LAUNCHES // 2:,}], got {self.max_launches!r}",
                field="max_launches",
            )
        if not 0 <= self.workers <= 1024:
            raise InputError(f"must be in [0, 1024], got {self.workers!r}", field="workers")


@dataclass(frozen=True)
class WhatIfResult:
    """One candidate's what-if: per draw, every app judged against its goal."""

    draws: tuple[tuple[AppOutcome, ...], ...]


def knows_kernels(apps: Sequence[AppInfo]) -> bool:
    """Whether the backend told the policy enough to predict: every app's kernels and the GPU."""
    return bool(apps) and all(a.kernels and a.gpu is not None for a in apps)


def perturbed(apps: Sequence[AppInfo], seed: int, jitter: float) -> list[AppWorkload]:
    """The apps as workloads, each kernel's time (and bytes) scaled by its own draw."""
    result = []
    for app in apps:
        rng = np.random.default_rng([seed, zlib.crc32(app.name.encode()), 1])
        factors = rng.uniform(1 - jitter, 1 + jitter, size=len(app.kernels or ()))
        kernels = tuple(
            dataclasses.replace(k, time_s=k.time_s * float(f), bytes=k.bytes * float(f))
            for k, f in zip(app.kernels or (), factors, strict=True)
        )
        result.append(AppWorkload(app.name, app.priority, kernels, app.poisson_rps, app.goal))
    return result


def estimates(apps: Sequence[AppInfo]) -> list[AppWorkload]:
    """The apps as workloads of the kernels the policy was told."""
    return [AppWorkload(a.name, a.priority, a.kernels or (), a.poisson_rps, a.goal) for a in apps]


def window_s(apps: Sequence[AppInfo], config: WhatIf) -> float:
    """Simulated time for about ``config.requests`` requests of the most important app, within
    ``[min_s, max_s]``, at most the run's horizon where it is known, and short enough for the
    mix to launch at most ``max_launches`` kernels (each app at its offered rate, a closed loop
    back to back as alone)."""
    top = max(apps, key=lambda a: (a.priority, a.goal.is_latency, a.goal.protected))
    request_s = sum(k.time_s for k in top.kernels or ())
    per_request = 1.0 / top.poisson_rps if top.poisson_rps else request_s
    window = min(config.max_s, max(config.min_s, config.requests * per_request))
    horizons = [a.horizon_s for a in apps if a.horizon_s is not None]
    if horizons:
        window = min(window, max(horizons))
    launches_per_s = sum(launch_rate(a.kernels or (), a.poisson_rps) for a in apps)
    return float(min(window, config.max_launches / launches_per_s))


def predict(
    apps: Sequence[AppInfo],
    candidates: Sequence[Callable[[], SharingPolicy]],
    config: WhatIf,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[WhatIfResult, ...]:
    """Every candidate (a fresh policy from each factory, per draw) on every draw of the mix;
    ``progress(done, total)`` after each simulated run. The first run is timed: where the rest
    would take longer than :data:`POOL_AFTER_S` one after the other, they are shared among
    ``config.workers`` processes (factories that cannot be pickled, such as lambdas, keep them
    in this one)."""
    if not knows_kernels(apps):
        raise InputError("a what-if needs every app's kernels and the GPU")
    gpu: Processor = apps[0].gpu  # type: ignore[assignment]
    duration = window_s(apps, config)
    goals = {a.name: a.goal for a in apps}
    told = estimates(apps) if config.told_estimates else None
    draws = []
    for seed in config.seeds:
        mix = perturbed(apps, seed, config.jitter)
        alone = alone_results(gpu, mix, duration_s=duration, seed=seed)
        draws.append(_Draw(gpu, tuple(mix), seed, duration, told, alone, goals))
    runs = [(d, i) for d in range(len(draws)) for i in range(len(candidates))]
    results: dict[tuple[int, int], tuple[AppOutcome, ...]] = {}

    def finished(run: tuple[int, int], apps_out: tuple[AppOutcome, ...]) -> None:
        results[run] = apps_out
        if progress is not None:
            progress(len(results), len(runs))

    began = time.perf_counter()
    first, rest = runs[0], runs[1:]
    finished(first, draws[first[0]].run(candidates[first[1]]))
    workers = min(config.workers or min(usable_core_count(), DEFAULT_WORKERS), len(rest))
    pooled = (
        workers > 1
        and (time.perf_counter() - began) * len(rest) > POOL_AFTER_S
        and _picklable(candidates)
    )
    if pooled:
        # The workers leave an interrupt to this process, which drops the runs not started
        # (on the way out only the ones running are waited for, a run's time at most); done,
        # the workers are waited for, so that none outlives the what-if.
        pool = ProcessPoolExecutor(
            workers, mp_context=get_context("spawn"), initializer=_leave_interrupts
        )
        try:
            futures = {pool.submit(draws[d].run, candidates[i]): (d, i) for d, i in rest}
            for future in as_completed(futures):
                finished(futures[future], future.result())
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
    else:
        for d, i in rest:
            finished((d, i), draws[d].run(candidates[i]))
    return tuple(
        WhatIfResult(tuple(results[d, i] for d in range(len(draws))))
        for i in range(len(candidates))
    )


#: Seconds of what-if runs, estimated from the first, below which starting processes for the
#: rest costs more than it saves (a fresh interpreter imports this package in about 0.3 s).
POOL_AFTER_S = 2.0
#: At most this many processes by default: each is a fresh interpreter (about 0.3 s of CPU
#: and 100 MB to start), and the runs of one setup are a few dozen.
DEFAULT_WORKERS = 8


def _leave_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _picklable(candidates: Sequence[Callable[[], SharingPolicy]]) -> bool:
    try:
        pickle.dumps(tuple(candidates))
    except (pickle.PicklingError, AttributeError, TypeError):
        return False
    return True


@dataclass(frozen=True)
class _Draw:
    """One draw of the mix, everything a candidate's run needs (sent whole to a worker)."""

    gpu: Processor
    mix: tuple[AppWorkload, ...]
    seed: int
    duration_s: float
    told: list[AppWorkload] | None
    alone: dict[str, SimulatedApp]
    goals: Mapping[str, Goal]

    def run(self, make: Callable[[], SharingPolicy]) -> tuple[AppOutcome, ...]:
        """A fresh policy from ``make`` on this draw, every app judged against its goal."""
        shared = simulate(
            self.gpu, self.mix, make(), duration_s=self.duration_s, seed=self.seed, told=self.told
        )
        times = {w.name: w.request_time_s for w in self.mix}
        return outcomes(compare(shared, self.alone, times), self.goals)


def meets_every_goal(prediction: WhatIfResult, margin: float) -> bool:
    """Whether every app meets its goal, with ``margin``, on every draw."""
    return all(goal_met(a.goal, a.measured, margin) for d in prediction.draws for a in d)


def _throughput(apps: Sequence[AppOutcome], name: str) -> float:
    value = next(a.measured.throughput_ratio for a in apps if a.name == name)
    return 0.0 if math.isnan(value) else value


def choose(predictions: Sequence[WhatIfResult], config: WhatIf, *, margin: float) -> int | None:
    """The candidate to adopt, by index (candidates are ordered safest first), or None when
    none meets the most important goals on every draw.

    Goals are read in priority order, as ``judge.required_goals`` reads them: a candidate
    counts the levels of protected goals, from the most important down, that it meets (with
    ``margin``) on every draw, and only those with the most such levels stay. Among them, the
    other apps' throughput (the worst draw's) decides: first the worst of every app's share of
    the most any candidate gives it (what rule (b) holds each app to), then app by app in
    priority order, and then the apps whose goals those levels hold, app by app in priority
    order (a goal met leaves its app's throughput still worth having: ``naive`` is held to it by
    rule (c)); differences within ``config.tolerance`` are ties, and ties go to the safer
    candidate."""
    if not predictions:
        return None
    first = predictions[0].draws[0]
    levels = sorted({a.priority for a in first if a.goal.protected}, reverse=True)

    def depth(prediction: WhatIfResult) -> int:
        count = 0
        for level in levels:
            if not all(goal_met(a.goal, a.measured, margin) for draw in prediction.draws
                       for a in draw if a.goal.protected and a.priority >= level):  # fmt: skip
                break
            count += 1
        return count

    depths = [depth(p) for p in predictions]
    deepest = max(depths)
    if levels and deepest == 0:
        return None
    floor = levels[deepest - 1] if deepest else math.inf
    required = {a.name for a in first if a.goal.protected and a.priority >= floor}
    ranked = [a.name for a in sorted(first, key=lambda a: -a.priority)]
    others = [n for n in ranked if n not in required]
    held = [n for n in ranked if n in required]
    eligible = [i for i, d in enumerate(depths) if d == deepest]
    tput = {
        i: {n: min(_throughput(d, n) for d in predictions[i].draws) for n in ranked}
        for i in eligible
    }
    most = {n: max(tput[i][n] for i in eligible) for n in ranked}

    def share(i: int, name: str) -> float:
        return tput[i][name] / most[name] if most[name] > 0 else 1.0

    def better(i: int, j: int) -> bool:
        worst_i = min((share(i, n) for n in others), default=1.0)
        worst_j = min((share(j, n) for n in others), default=1.0)
        if abs(worst_i - worst_j) > config.tolerance:
            return worst_i > worst_j
        for name in (*others, *held):
            gap = share(i, name) - share(j, name)
            if abs(gap) > config.tolerance:
                return gap > 0
        return False

    chosen = eligible[0]
    for i in eligible[1:]:
        if better(i, chosen):
            chosen = i
    return chosen


def nearest(predictions: Sequence[WhatIfResult], config: WhatIf) -> int | None:
    """Where no candidate meets the most important goals (``choose`` gives None), the one that
    comes nearest: the smallest shortfall (``goals.shortfall``) of the most important level's
    protected goals, the worst over its apps and draws; within ``config.tolerance`` a tie,
    which goes to the safer candidate. None where no app has a goal."""
    if not predictions:
        return None
    first = predictions[0].draws[0]
    levels = [a.priority for a in first if a.goal.protected]
    if not levels:
        return None
    top = max(levels)
    worst = [
        max(shortfall(a.goal, a.measured) for draw in p.draws for a in draw
            if a.goal.protected and a.priority == top)
        for p in predictions
    ]  # fmt: skip
    best = min(worst)
    if math.isinf(best):
        return None
    return next(i for i, w in enumerate(worst) if w <= best * (1 + config.tolerance))


def breaks(
    prediction: WhatIfResult, references: Mapping[str, WhatIfResult], label: str
) -> tuple[int, int]:
    """On how many draws a candidate misses a goal some policy meets (rule (a)), and on how
    many it breaks any rule (a)-(c), against the reference policies, as
    ``judge.rule_violations`` judges a policy (by the name ``label``) against every other one.
    ``references`` hold each reference policy's what-if on the same draws."""
    missed = broken = 0
    for index, draw in enumerate(prediction.draws):
        by_policy = {name: p.draws[index] for name, p in references.items()}
        by_policy[label] = draw
        rules = rule_violations(by_policy, label)
        missed += any(rule.startswith("(a)") for rule in rules)
        broken += bool(rules)
    return missed, broken


def fewest_breaks(
    predictions: Sequence[WhatIfResult], references: Mapping[str, WhatIfResult], label: str
) -> list[int]:
    """The candidates (by index) that miss a goal some reference meets on the fewest draws,
    and of those, that break any rule on the fewest (`breaks`): priority orders goals, so
    the protected goals come before the other apps' throughput."""
    tally = [breaks(p, references, label) for p in predictions]
    return [i for i, t in enumerate(tally) if t == min(tally)]


def adopted_against(
    predictions: Sequence[WhatIfResult],
    references: Mapping[str, WhatIfResult],
    label: str,
    config: WhatIf,
    *,
    free: Sequence[int] = (),
    margin: float | None = None,
) -> int:
    """The candidate calibration adopts when it is held to ``references`` (by index;
    candidates are ordered safest first): among the `fewest_breaks`, the ``free`` ones where
    one of them meets every goal with ``margin`` (nothing needs holding back); of those, the one
    `adopted` picks, and where it picks none (no goal to come near), the safest."""
    margin = config.margin if margin is None else margin
    pool = fewest_breaks(predictions, references, label)
    unheld = [i for i in pool if i in free]
    if any(meets_every_goal(predictions[i], margin) for i in unheld):
        pool = unheld
    chosen = adopted([predictions[i] for i in pool], config, margin=margin)
    return pool[0] if chosen is None else pool[chosen]


def adopted(
    predictions: Sequence[WhatIfResult],
    config: WhatIf,
    *,
    margin: float | None = None,
    fallback: bool = True,
) -> int | None:
    """The candidate calibration adopts: the one ``choose`` picks with ``margin`` (by default
    ``config.margin``), else without any; where none meets the most important goals at all,
    the ``nearest`` (with ``fallback``), else None (the policy keeps its own setting)."""
    margin = config.margin if margin is None else margin
    chosen = choose(predictions, config, margin=margin)
    if chosen is None:
        chosen = choose(predictions, config, margin=0.0)
    if chosen is None and fallback:
        chosen = nearest(predictions, config)
    return chosen
