"""A kept reservation is checked with a restart pause paid at each change of count after the
first (``delivers(..., change_pause)``): hand-computed cases on a linear ladder (g workers do g
iterations/s), and the check over a reservation's runs of one count against a walk over the
free profile's segments written apart from it (``_paying_finish_time``, here)."""

from __future__ import annotations

import bisect
import copy
import random

import pytest
from cluster_helpers import carved_profile

from qosched.cluster.planning import (
    TOLERANCE,
    Demand,
    FreeProfile,
    Ladder,
    delivers,
    finish_time,
    plan_demands,
    reserve,
    take,
)

LINEAR = Ladder([0.0, 1.0, 2.0, 3.0, 4.0], (1, 2, 4))
PAUSE = 30.0


def _paying_finish_time(
    ladder: Ladder,
    share: int,
    remaining: float,
    start: float,
    deadline: float,
    p: FreeProfile,
    change_pause: float,
) -> float | None:
    """When a job on ``min(share, free)`` workers from ``start`` finishes, paying
    ``change_pause`` seconds without progress at every change of its count after the first;
    None if after ``deadline``. Walks the free profile's segments, as ``finish_time`` does."""
    starts, free = p.starts, p.free
    last = len(starts) - 1
    needed = remaining * (1 - TOLERANCE) - TOLERANCE
    done = 0.0
    index = max(bisect.bisect_right(starts, start) - 1, 0)
    t0, held, started, paused_until = start, 0, False, start
    while t0 < deadline:
        t1 = min(starts[index + 1] if index < last else deadline, deadline)
        budget = min(share, free[index])
        count = ladder.within(budget)
        if count != held:
            if count and started:  # a re-size, or a resume after waiting
                paused_until = t0 + change_pause
            started = started or count > 0
            held = count
        rate = ladder.rate(count)
        begin = max(t0, paused_until)
        if rate > 0.0 and t1 > begin:
            if done + rate * (t1 - begin) >= needed:
                return min(t1, begin + (remaining - done) / rate)
            done += rate * (t1 - begin)
        if index == last:
            break
        index += 1
        t0 = t1
    return None


def profile(*taken: tuple[float, float, int]) -> FreeProfile:
    """4 workers, less what other jobs' reservations ``taken`` hold."""
    p = FreeProfile(0.0, 4)
    assert take(list(taken), 0.0, p)
    return p


def _delivered_by(reservation, remaining: float, pause: float) -> float:
    """The earliest deadline by which ``reservation`` does ``remaining`` on ``LINEAR``, to
    within a millisecond (bisection on ``delivers``)."""
    low, high = 0.0, 1e4
    assert delivers(LINEAR, reservation, remaining, 0.0, high, pause)
    while high - low > 1e-3:
        middle = (low + high) / 2
        if delivers(LINEAR, reservation, remaining, 0.0, middle, pause):
            high = middle
        else:
            low = middle
    return high


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
    assert _paying_finish_time(LINEAR, share, remaining, 0.0, 1e9, p, PAUSE) == pytest.approx(
        paying
    )
    # The check of the reservation the plan would make, held long enough to finish paid.
    reservation = reserve(LINEAR, share, 0.0, 1000.0, copy.deepcopy(p))
    assert _delivered_by(reservation, remaining, 0.0) == pytest.approx(plain, abs=2e-3)
    assert _delivered_by(reservation, remaining, PAUSE) == pytest.approx(paying, abs=2e-3)


def test_a_pause_runs_on_over_a_boundary_that_changes_nothing():
    p = profile((100.0, 200.0, 2))
    p.split(110.0)  # a boundary inside the pause from 100, with the same count on both sides
    assert _paying_finish_time(LINEAR, 4, 1000.0, 0.0, 1e9, p, PAUSE) == pytest.approx(345.0)
    runs = [(0.0, 100.0, 4), (100.0, 110.0, 2), (110.0, 200.0, 2), (200.0, 1000.0, 4)]
    assert _delivered_by(runs, 1000.0, PAUSE) == pytest.approx(345.0, abs=2e-3)


def test_a_reservation_planned_unpaid_is_kept_only_while_it_delivers_paid():
    # The first case above by 320: 4 workers finish at 300 unpaid, 345 paid.
    p = profile((100.0, 200.0, 2))
    planned = plan_demands([Demand("j", LINEAR, 1000.0, 0.0, 320.0, (320.0,))], 0.0, 4, profile=p)
    assert planned.failed == []
    reservation = planned.reservations["j"]
    assert reservation == [(0.0, 100.0, 4), (100.0, 200.0, 2), (200.0, 300.0, 4)]
    unpaid = Demand("j", LINEAR, 1000.0, 0.0, 320.0, (320.0,))
    paid = Demand("j", LINEAR, 1000.0, 0.0, 320.0, (320.0,), kept_change_pause=PAUSE)
    assert unpaid.delivered_by(reservation)
    assert not paid.delivered_by(reservation)
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
    walked = _paying_finish_time(ladder, share, remaining, start, 2000.0, p, 0.0)
    assert walked == (None if plain is None else pytest.approx(plain, rel=1e-12, abs=1e-9))


@pytest.mark.parametrize("seed", range(300))
def test_the_reservation_made_delivers_by_its_finish_with_its_pauses_and_not_before(seed):
    """The walk over the profile's segments and the check over the reservation's runs of one
    count are written apart: they must agree on when the work is done, pauses paid."""
    ladder, share, remaining, start, p, pause = _random_case(seed)
    finish = _paying_finish_time(ladder, share, remaining, start, 2000.0, p, pause)
    if finish is None:
        return
    plain = finish_time(ladder, share, remaining, start, 2000.0, p)
    assert plain is not None and plain <= finish + 1e-9  # paying never finishes sooner
    reservation = reserve(ladder, share, start, finish, copy.deepcopy(p))
    assert delivers(ladder, reservation, remaining, start, finish + 1e-6, pause)
    short = remaining * (1 + 1e-6) + 1e-3  # a little more work than the reservation does
    assert not delivers(ladder, reservation, short, start, finish + 1e-6, pause)
