"""The ElasticFlow artifact's share shape (hand-computed on a linear ladder: g workers do g
iterations/s; the free profile has boundaries every 10 s, all 8 workers free)."""

from __future__ import annotations

import pytest

from qosched.cluster.planning import (
    Demand,
    FreeProfile,
    Ladder,
    artifact_fallback,
    artifact_share,
    plan_demands,
)

LINEAR = Ladder([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], (1, 2, 4, 8))
# Speed peaks at 2 workers: the artifact never plans beyond the fastest count.
PEAKED = Ladder([0.0, 1.0, 2.0, 1.5, 1.5], (1, 2, 4))


def boundaries(*times: float, capacity: int = 8) -> FreeProfile:
    profile = FreeProfile(0.0, capacity)
    for time in times:
        profile.split(time)
    return profile


def test_smaller_level_until_the_point_where_the_larger_one_covers_the_rest():
    """80 iterations by t=50: one worker does 50, too few; two workers walked back from 50
    cover 80 from t=10. So one worker on [0, 10) (10 done), two from 10 until the other 70 are
    done at 45. One share from now would hold two workers from 0 and end at 40."""
    profile = boundaries(10.0, 20.0, 30.0, 40.0)
    assert artifact_share(LINEAR, 80.0, 0.0, 50.0, profile) == [(0.0, 10.0, 1), (10.0, 45.0, 2)]
    taken = dict(zip(profile.starts, profile.free, strict=True))
    assert (taken[0.0], taken[10.0], taken[45.0]) == (7, 6, 8)


def test_a_deadline_no_level_meets_leaves_the_profile_untouched():
    profile = boundaries(10.0)
    assert artifact_share(LINEAR, 1000.0, 0.0, 50.0, profile) is None
    assert (profile.starts, profile.free) == ([0.0, 10.0], [8, 8])


def test_levels_stop_at_the_fastest_count():
    """120 iterations by 50: two workers (2/s) do 100; four are slower, so not tried."""
    assert artifact_share(PEAKED, 120.0, 0.0, 50.0, boundaries(10.0)) is None
    assert artifact_share(PEAKED, 100.0, 0.0, 50.0, boundaries(10.0)) == [(0.0, 50.0, 2)]


def test_plan_demands_lays_shares_out_in_the_shape_asked_for():
    """On a profile with no boundary, the artifact's walk back covers 80 iterations with two
    workers from now: the same reservation as one share from now."""
    job = Demand("j", LINEAR, 80.0, 0.0, 50.0, (50.0,))
    for shape in ("front", "artifact"):
        assert plan_demands([job], 0.0, 8, shape=shape).reservations["j"] == [(0.0, 40.0, 2)]
    with pytest.raises(ValueError, match="share shape"):
        plan_demands([job], 0.0, 8, shape="diagonal")


def test_a_job_no_level_satisfies_runs_on_its_fastest_count_past_its_deadline():
    """1000 iterations, deadline 50: even 8 workers (8/s) do only 400. The artifact still plans
    it, on 8 workers from now until done at 125, and fails it."""
    profile = boundaries(10.0)
    assert artifact_fallback(LINEAR, 1000.0, 0.0, profile) == [(0.0, 125.0, 8)]
    assert dict(zip(profile.starts, profile.free, strict=True)) == {0.0: 0, 125.0: 8}


def test_the_fallback_takes_what_is_free_and_stops_at_the_fastest_count():
    """Two workers are free until 10, all four after (a 4-worker cluster): PEAKED runs fastest on
    2, so 2 throughout; 60 iterations at 2/s end at 30."""
    profile = boundaries(10.0, capacity=4)
    profile.free[0] = 2
    assert artifact_fallback(PEAKED, 60.0, 0.0, profile) == [(0.0, 30.0, 2)]


def test_a_failed_job_is_planned_ahead_of_later_deadlines():
    """The late job (deadline 50, 1000 iterations) is failed but holds all 8 workers until 125.
    The next one (deadline 200, 80 iterations) has [125, 200) left: one worker does 75, too few;
    two cover it from 125, so two workers from 125 until done at 165."""
    late = Demand("late", LINEAR, 1000.0, 0.0, 50.0, (50.0,))
    later = Demand("later", LINEAR, 80.0, 0.0, 200.0, (200.0,))
    plan = plan_demands([later, late], 0.0, 8, shape="artifact")
    assert plan.failed == ["late"]
    assert plan.reservations["late"] == [(0.0, 125.0, 8)]
    assert plan.count_now("later", 0.0) == 0
    assert [seg for seg in plan.reservations["later"] if seg[2]] == [(125.0, 165.0, 2)]
