"""The caches behind `qos`'s speed, each against the computation it saves, on seeded random cases:
an invalidation bug makes one of these differ."""

from __future__ import annotations

import bisect
import collections
import random

import pytest
from test_planning_share import _random_case

from qosched.cluster.generate import GeneratorConfig, generate_trace
from qosched.cluster.job import JobSpec
from qosched.cluster.planning import (
    Demand,
    Ladder,
    delivers,
    finish_time,
    kept_delivers,
    plan_demands,
    reserve,
)
from qosched.cluster.policies.qos import QualityOfService
from qosched.cluster.predict import OnlinePredictor
from qosched.cluster.simulator import simulate
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, JobState
from qosched.cluster.throughput import ThroughputModel

TABLES = ThroughputModel.bundled("A100")
COUNTS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)


def _random_curve(rng: random.Random):
    model = rng.choice(sorted(TABLES.models))
    return TABLES.curve(model, rng.choice(TABLES.batch_sizes(model)))


@pytest.mark.parametrize("seed", range(8))
def test_predictor_rates_are_predict_at_every_step_of_a_random_history(seed):
    """`rates` (kept extrapolation terms, no Prediction per count) gives `predict`'s numbers
    after every observation, as new counts are observed and the kept terms must be dropped."""
    rng = random.Random(seed)
    curve = _random_curve(rng)
    fast = OnlinePredictor.from_curve(curve, confidence=rng.uniform(0.1, 0.9))
    slow = OnlinePredictor.from_curve(curve, confidence=fast.confidence)
    counts = [g for g in COUNTS if curve.available(g)]
    time_s, done = 0.0, 0.0
    for predictor in (fast, slow):
        predictor.observe(time_s, done, 1)
    for _ in range(40):
        workers = rng.choice(counts[: rng.randint(1, len(counts))])
        time_s += rng.uniform(1.0, 600.0)
        done += rng.uniform(0.5, 1.5) * curve.rate(workers) * (time_s - fast._last[0])
        for predictor in (fast, slow):
            predictor.observe(time_s, done, workers)
        if rng.random() < 0.7:  # not every observation is followed by a query
            asked = rng.sample(counts, rng.randint(1, len(counts)))
            expected = [(slow.predict(g).rate, slow.predict(g).rate_low) for g in asked]
            assert fast.rates(asked) == expected
            slow._predictions.clear()  # the reference recomputes from scratch every time
            slow._extrapolations.clear()


@pytest.mark.parametrize("seed", range(5))
def test_a_ladders_kept_speed_per_worker_is_the_best_over_its_counts(seed):
    rng = random.Random(seed)
    for _ in range(50):
        top = rng.randint(1, 64)
        rates = [0.0] + [rng.choice((0.0, rng.uniform(0.1, 50.0))) for _ in range(top)]
        allowed = rng.sample(range(1, top + 1), rng.randint(0, top))
        ladder = Ladder(rates, allowed)
        best = max((rates[g] / g for g in ladder.counts), default=0.0)
        assert ladder.per_worker() == best
        assert ladder.per_worker() == best  # the kept value


def _keep_held_walking_first(demand, profile, now):
    """`Demand.keep_held` as it was: the finish first, then whether the held count is free."""
    held = demand.held
    ladder = demand.ladder
    if not held or demand.held_deadline <= demand.deadline or ladder.within(held) != held:
        return None
    finish = finish_time(
        ladder, held, demand.remaining, demand.start, demand.held_deadline, profile
    )
    if finish is None:
        return None
    first = bisect.bisect_right(profile.starts, now) - 1
    for index in range(max(first, 0), len(profile.starts)):
        if profile.starts[index] >= finish:
            break
        if profile.free[index] < held:
            return None
    return finish


@pytest.mark.parametrize("seed", range(300))
def test_keeping_the_held_count_finds_the_block_first_and_the_same_finish(seed):
    """`keep_held` looks for the first segment without the held count free before walking the
    profile: the same finish, or None, as walking first, on random profiles (some blocked at
    once, some later, some never; starts at and after now; the odd job all but done)."""
    ladder, remaining, start, deadline, profile = _random_case(seed)
    rng = random.Random(seed)
    held = rng.choice(ladder.counts) if ladder.counts else 1
    if rng.random() < 0.4:  # someone else holds workers from time 0: blocked right away
        capacity = max(profile.free)
        taken = rng.randint(max(capacity - held + 1, 1), capacity)
        filler = Ladder([0.0, *(float(g) for g in range(1, capacity + 1))], range(1, capacity + 1))
        reserve(filler, taken, 0.0, rng.uniform(1.0, 300.0), profile)
    if rng.random() < 0.2:
        remaining = rng.choice((0.0, 1e-12))
    demand = Demand("j", ladder, remaining, start, deadline, (deadline, 0.0), held, deadline + 30.0)
    now = rng.choice((0.0, min(start, rng.uniform(0.0, 50.0))))
    assert demand.keep_held(profile, now) == _keep_held_walking_first(demand, profile, now)


class _ChecksKeptShortcut(QualityOfService):
    """`qos` that, wherever `_kept_plan` may skip checking each reservation, also checks them
    (`_best_plan`) and compares."""

    def __init__(self) -> None:
        super().__init__()
        self.compared = 0

    def _kept_plan(self, guaranteed, view):
        shortcut = super()._kept_plan(guaranteed, view)
        key = (view.now, frozenset(j.job_id for j in guaranteed))
        if key == self._kept_for:
            checked = self._best_plan(guaranteed, view)
            assert shortcut.reservations == checked.reservations
            assert shortcut.failed == checked.failed == []
            assert (shortcut.free.starts, shortcut.free.free) == (
                checked.free.starts,
                checked.free.free,
            )
            self.compared += 1
        return shortcut


@pytest.mark.parametrize(("load", "seed"), [(1.0, 11), (2.0, 12), (3.0, 13)])
def test_a_failed_admissions_kept_check_is_the_decisions_own(load, seed):
    """After an admission that failed, the decision at the same instant takes the reservations
    in force as they are (`_note_kept`): the plan checking each again is the same."""
    cluster = ClusterSpec.from_flags(4, 8)
    jobs = generate_trace(
        GeneratorConfig(jobs=80, load=load, cluster_workers=32, seed=seed), TABLES
    )
    policy = _ChecksKeptShortcut()
    simulate(cluster, TABLES, policy, jobs)
    assert policy.compared > 0  # the shortcut was taken, so the comparison means something


def _random_kept(rng: random.Random):
    """A job with a reservation kept from an earlier plan, near the edge of delivering."""
    curve = _random_curve(rng)
    counts = [g for g in COUNTS if curve.available(g)]
    ladder = Ladder(
        [
            0.0,
            *(
                curve.rate(g) if curve.available(g) else 0.0
                for g in range(1, curve.max_workers + 1)
            ),
        ],
        counts,
    )
    now = rng.uniform(0.0, 1000.0)
    held = rng.choice(counts)
    reservation, start = [], now - rng.uniform(0.0, 200.0)
    for _ in range(rng.randint(0, 3)):
        end = start + rng.uniform(10.0, 2000.0)
        reservation.append((start, end, held if rng.random() < 0.6 else rng.choice(counts)))
        start = end
    planned = sum(ladder.rate(c) * (max(e, now) - max(s, now)) for s, e, c in reservation)
    deadline = now + rng.uniform(0.0, 4000.0)
    spec = JobSpec("j", 0.0, curve.model, curve.batch_size, 10**9, deadline, held)
    job = JobState(spec, curve)
    job.workers = held if rng.random() < 0.8 else 0
    job.started_s = None if rng.random() < 0.2 else 0.0
    job.resume_s = now + rng.choice((0.0, -5.0, rng.uniform(0.0, 60.0)))
    # Remaining work around what the reservation delivers, so both answers come up.
    job.iterations_done = spec.iterations - max(planned * rng.uniform(0.9, 1.1), 1.0)
    pause = rng.choice((0.0, 30.0))
    view = ClusterView(now, ClusterSpec.from_flags(8, 8), (job,), pause)
    return job, ladder, reservation, view


@pytest.mark.parametrize("pay", [False, True], ids=["changes-free", "changes-paid"])
def test_a_kept_reservations_check_without_a_demand_is_the_demands_own(pay):
    """`kept_delivers` answers as the demand `qos` would make for the job, on random jobs at
    the edge of delivering: paused, resuming, never started, on their held count or not, their
    reservations' later changes of count paid for (as `qos` checks a reservation kept from an
    earlier instant) or not."""
    rng = random.Random(21)
    answers = collections.Counter()
    for _ in range(3000):
        job, ladder, reservation, view = _random_kept(rng)
        demand = Demand.of_job(job, ladder, view, keep_held=True, pay_kept_changes=pay)
        expected = demand.delivered_by(reservation)
        assert kept_delivers(job, ladder, reservation, view, pay_kept_changes=pay) == expected
        # which branch answered: with the pause, or only on the held count without it
        with_pause = delivers(
            ladder,
            reservation,
            demand.remaining,
            demand.start,
            demand.deadline,
            demand.kept_change_pause,
        )
        answers[expected, with_pause] += 1
    # Both answers, and yes from the held count alone (a pause would make it late).
    assert answers[True, True] and answers[False, False] and answers[True, False]


class _ChecksPlanKeeping(QualityOfService):
    """`qos` that, whenever it keeps its plan without a demand per delivering job, also makes
    the plan from a demand for every job, as `plan_demands` does, and compares."""

    def __init__(self) -> None:
        super().__init__()
        self.compared = 0

    def _plan_keeping(self, jobs, view, keep):
        shortcut = super()._plan_keeping(jobs, view, keep)
        if shortcut is not None:
            demands = [
                Demand.of_job(
                    j,
                    self._ladders(j, self._jobs[j.job_id])[1],
                    view,
                    keep_held=True,
                    pay_kept_changes=self._pays_kept_changes(view.now),
                )
                for j in jobs
            ]
            checked = plan_demands(demands, view.now, view.cluster.total_workers, keep)
            assert list(shortcut.reservations.items()) == list(checked.reservations.items())
            assert shortcut.failed == checked.failed
            assert (shortcut.free.starts, shortcut.free.free) == (
                checked.free.starts,
                checked.free.free,
            )
            self.compared += 1
        return shortcut


@pytest.mark.parametrize(("load", "seed"), [(1.0, 31), (3.0, 32)])
def test_keeping_the_plan_without_a_demand_per_job_makes_the_same_plan(load, seed):
    cluster = ClusterSpec.from_flags(4, 8)
    jobs = generate_trace(
        GeneratorConfig(jobs=80, load=load, cluster_workers=32, seed=seed), TABLES
    )
    policy = _ChecksPlanKeeping()
    simulate(cluster, TABLES, policy, jobs)
    assert policy.compared > 50
