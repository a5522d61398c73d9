"""The ElasticFlow artifact's share shape (hand-computed on a linear ladder: g workers do g
iterations/s; the free profile has boundaries every 10 s, all 8 workers free)."""

from __future__ import annotations

import pytest

from qosched.cluster.planning import Demand, FreeProfile, Ladder, artifact_share, plan_demands

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
