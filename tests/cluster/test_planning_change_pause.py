"""A plan that changes a job's count pays a restart pause at each change after the first
(``change_pause``): hand-computed walks on a linear ladder (g workers do g iterations/s), and
the walk over the free profile against the check over the reservation it makes."""

from __future__ import annotations

import copy
import random

import pytest
from cluster_helpers import carved_profile

from qosched.cluster.planning import (
    Demand,
    FreeProfile,
    Ladder,
    delivers,
    finish_time,
    minimum_share,
    paying_finish_time,
    plan_demands,
    reserve,
    take,
)

LINEAR = Ladder([0.0, 1.0, 2.0, 3.0, 4.0], (1, 2, 4))
PAUSE = 30.0


def profile(*taken: tuple[float, float, int]) -> FreeProfile:
    """4 workers, less what other jobs' reservations ``taken`` hold."""
    p = FreeProfile(0.0, 4)
    assert take(list(taken), 0.0, p)
    return p


@pytest.mark.parametrize(
    ("taken", "share", "remaining", "plain", "paying"),
    [
        # 4 free, then 2 in 100..200, then 4. Plain: 400 + 200 + 400 at 4/s: done at 300.
        # Paying: the change at 100 leaves 70 s at 2/s (140), the one at 200 starts at 230:
        # 1000 - 540 = 460 at 4/s takes 115 s: 345.
        ((100.0, 200.0, 2), 4, 1000.0, 300.0, 345.0),
        # Waiting with none free in 50..150, then resuming: 100 done by 50, the resume at 150
        # pays until 180, then 200 at 2/s: 280 (plain 250).
        ((50.0, 150.0, 4), 2, 300.0, 250.0, 280.0),
        # Waiting before its first count pays nothing: 200 at 2/s from 100.
        ((0.0, 100.0, 4), 2, 200.0, 200.0, 200.0),
        # A change within a pause starts it again: 2 free in 100..110 only. 400 by 100; the
        # pause from 100 runs to 130 but the change at 110 restarts it to 140; 600 at 4/s from
        # 140: 290. Plain: 400 + 20, then 580 at 4/s from 110: 255.
        ((100.0, 110.0, 2), 4, 1000.0, 255.0, 290.0),
        # A share that fits the fewest free throughout never changes: no pause to pay.
        ((100.0, 200.0, 2), 2, 500.0, 250.0, 250.0),
    ],
    ids=["shrink-and-grow", "wait-and-resume", "first-start", "change-in-a-pause", "no-change"],
)
def test_each_change_after_the_first_costs_a_pause(taken, share, remaining, plain, paying):
    p = profile(taken)
    assert finish_time(LINEAR, share, remaining, 0.0, 1e9, p) == pytest.approx(plain)
    assert finish_time(LINEAR, share, remaining, 0.0, 1e9, p, PAUSE) == pytest.approx(paying)


def test_a_pause_runs_on_over_a_boundary_that_changes_nothing():
    p = profile((100.0, 200.0, 2))
    p.split(110.0)  # a boundary inside the pause from 100, with the same count on both sides
    assert finish_time(LINEAR, 4, 1000.0, 0.0, 1e9, p, PAUSE) == pytest.approx(345.0)


def test_a_share_that_fits_only_without_its_pauses_is_not_found():
    # The first case above by 320: 4 workers finish at 300 unpaid, 345 paid; 2 throughout do
    # 1000 by 500. No share fits once the pauses are paid.
    p = profile((100.0, 200.0, 2))
    assert minimum_share(LINEAR, 1000.0, 0.0, 320.0, p) == (4, pytest.approx(300.0))
    assert minimum_share(LINEAR, 1000.0, 0.0, 320.0, p, PAUSE) is None
    assert minimum_share(LINEAR, 1000.0, 0.0, 350.0, p, PAUSE) == (4, pytest.approx(345.0))


def test_the_fewest_workers_that_fit_with_their_pauses_may_be_fewer_than_the_most():
    # Nothing free until 50, then 4 but for one worker taken in 10 s of every 30: 4 workers
    # restart at every dip and never get going; 3 never change count and do 420 from 50 by
    # 190. Bisection would give up once the most workers do not fit.
    ladder = Ladder([0.0, 1.0, 2.0, 3.0, 4.0], (1, 2, 3, 4))
    dips = [(t, t + 10.0, 1) for t in range(60, 250, 30)]
    p = profile((0.0, 50.0, 4), *dips)
    assert finish_time(ladder, 4, 420.0, 0.0, 250.0, p, PAUSE) is None
    assert minimum_share(ladder, 420.0, 0.0, 250.0, p, PAUSE) == (3, pytest.approx(190.0))


def _demand(deadline: float, pay_changes: bool) -> Demand:
    return Demand(
        "j", LINEAR, 1000.0, 0.0, deadline, (deadline,), change_pause=PAUSE if pay_changes else 0
    )


def test_a_demand_that_pays_its_changes_is_planned_and_kept_by_them():
    p = profile((100.0, 200.0, 2))
    unpaid = plan_demands([_demand(320.0, False)], 0.0, 4, profile=copy.deepcopy(p))
    assert unpaid.failed == []
    reservation = unpaid.reservations["j"]
    assert reservation == [(0.0, 100.0, 4), (100.0, 200.0, 2), (200.0, 300.0, 4)]
    assert plan_demands([_demand(320.0, True)], 0.0, 4, profile=copy.deepcopy(p)).failed == ["j"]
    # The same reservation kept: delivered unpaid, not once its two changes are paid for.
    assert _demand(320.0, False).delivered_by(reservation)
    assert not _demand(320.0, True).delivered_by(reservation)
    assert not delivers(LINEAR, reservation, 1000.0, 0.0, 1e9, PAUSE)  # it ends at 300 anyway


def _random_case(seed: int):
    rng = random.Random(seed)
    capacity = rng.choice([8, 16, 64])
    top = rng.choice([8, 16, 32])
    rates = [0.0] + [g ** rng.uniform(0.5, 1.0) for g in range(1, top + 1)]
    ladder = Ladder(rates, [1, 2, 4, 8, 16, 24, 32])
    p = carved_profile(rng, capacity)
    start = rng.choice([0.0, rng.uniform(0.0, 50.0)])
    share = rng.choice(ladder.counts)
    remaining = rng.uniform(10.0, rates[share] * 900.0)
    return ladder, share, remaining, start, p, rng.choice([5.0, 30.0, 120.0])


@pytest.mark.parametrize("seed", range(300))
def test_without_a_pause_the_paying_walk_is_the_plain_one(seed):
    ladder, share, remaining, start, p, _ = _random_case(seed)
    plain = finish_time(ladder, share, remaining, start, 2000.0, p)
    walked = paying_finish_time(ladder, share, remaining, start, 2000.0, p, 0.0)
    assert walked == (None if plain is None else pytest.approx(plain, rel=1e-12, abs=1e-9))


@pytest.mark.parametrize("seed", range(300))
def test_the_reservation_made_delivers_by_its_finish_with_its_pauses_and_not_before(seed):
    """The walk over the profile's segments and the check over the reservation's runs of one
    count are written apart: they must agree on when the work is done, pauses paid."""
    ladder, share, remaining, start, p, pause = _random_case(seed)
    finish = finish_time(ladder, share, remaining, start, 2000.0, p, pause)
    if finish is None:
        return
    plain = finish_time(ladder, share, remaining, start, 2000.0, p)
    assert plain is not None and plain <= finish + 1e-9  # paying never finishes sooner
    reservation = reserve(ladder, share, start, finish, copy.deepcopy(p))
    assert delivers(ladder, reservation, remaining, start, finish + 1e-6, pause)
    short = remaining * (1 + 1e-6) + 1e-3  # a little more work than the reservation does
    assert not delivers(ladder, reservation, short, start, finish + 1e-6, pause)
