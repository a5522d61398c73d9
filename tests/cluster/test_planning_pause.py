"""A re-size costs a restart pause; keeping a job on the workers it holds costs none (hand-computed
plans on a linear ladder: g workers do g iterations/s)."""

from __future__ import annotations

import math
import random

import pytest

from qosched.cluster.planning import Demand, FreeProfile, Ladder, finish_time, plan_demands, take

LINEAR = Ladder([0.0, 1.0, 2.0, 3.0, 4.0], (1, 2, 4))


def demand(held: int) -> Demand:
    # 200 iterations by 100 s: exactly 2 workers for the whole window. A re-size would cost a
    # 30 s pause, leaving 70 s, which needs 4 workers (50 s).
    return Demand("j", LINEAR, 200.0, 0.0, 70.0, (100.0,), held=held, held_deadline=100.0)


def test_a_job_that_cannot_afford_a_pause_keeps_the_workers_it_holds():
    plan = plan_demands([demand(held=2)], 0.0, 3)  # 3 free: no room for 4
    assert plan.failed == []
    assert plan.reservations["j"] == [(0.0, 100.0, 2)]


def test_a_waiting_job_has_no_such_way_out():
    plan = plan_demands([demand(held=0)], 0.0, 3)
    assert plan.failed == ["j"]


def test_keeping_its_count_needs_those_workers_free_throughout():
    profile = FreeProfile(0.0, 3)
    assert take([(50.0, 80.0, 2)], 0.0, profile)  # another job's reservation: 1 free in 50..80
    plan = plan_demands([demand(held=2)], 0.0, 3, profile=profile)
    assert plan.failed == ["j"]


def test_with_room_to_grow_the_plan_re_sizes_and_pays_the_pause():
    plan = plan_demands([demand(held=2)], 0.0, 4)
    assert plan.reservations["j"] == [(0.0, 50.0, 4)]


def test_a_kept_reservation_at_the_held_count_still_delivers_without_a_pause():
    kept = {"j": [(0.0, 100.0, 2)]}
    assert plan_demands([demand(held=2)], 0.0, 3, keep=kept).reservations["j"] == kept["j"]
    # Held on 1 worker, the same reservation is a re-size: with the pause it is too late.
    assert plan_demands([demand(held=1)], 0.0, 3, keep=kept).failed == ["j"]


def _walked(d: Demand, p: FreeProfile, now: float) -> float | None:
    """`Demand.keep_held` by the walk alone: what the quick answer must agree with."""
    blocked = [s for s, f in zip(p.starts, p.free, strict=True) if s >= now and f < d.held]
    limit = min(blocked, default=math.inf)
    if limit <= d.start:
        return d.keep_held(p, now)  # the other case: no quick answer there
    return finish_time(d.ladder, d.held, d.remaining, d.start, min(d.held_deadline, limit), p)


@pytest.mark.parametrize("seed", range(200))
def test_keeping_its_count_is_found_too_late_exactly_when_the_walk_finds_it(seed):
    rng = random.Random(seed)
    profile = FreeProfile(0.0, 8)
    for _ in range(rng.randint(0, 10)):
        begin = rng.uniform(0.0, 300.0)
        take([(begin, begin + rng.uniform(1.0, 100.0), rng.randint(1, 8))], 0.0, profile)
    held = rng.choice((1, 2, 4))
    deadline = rng.uniform(10.0, 400.0)
    # Near the work the window holds, so that both answers and the edge between them come up.
    remaining = LINEAR.rate(held) * deadline * rng.choice((0.5, 1.0 - 1e-12, 1.0, 1.0 + 1e-12, 2))
    d = Demand("j", LINEAR, remaining, 0.0, deadline - 30.0, (deadline,), held, deadline)
    assert d.keep_held(profile, 0.0) == _walked(d, profile, 0.0)
