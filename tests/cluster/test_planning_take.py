"""Taking kept reservations out of a free-worker profile (hand-computed profiles)."""

from __future__ import annotations

from qosched.cluster.planning import FreeProfile, take


def segments(profile: FreeProfile) -> list[tuple[float, int]]:
    return list(zip(profile.starts, profile.free, strict=True))


def test_a_reservation_that_fits_is_taken_from_now_on():
    profile = FreeProfile(0.0, 8)
    assert take([(0.0, 10.0, 4), (10.0, 20.0, 2)], 5.0, profile)
    assert segments(profile) == [(0.0, 8), (5.0, 4), (10.0, 6), (20.0, 8)]


def test_a_reservation_whose_later_part_no_longer_fits_leaves_the_profile_as_it_was():
    profile = FreeProfile(0.0, 8)
    assert take([(10.0, 20.0, 6)], 0.0, profile)
    before = [free for _, free in segments(profile)]
    # The first part fits and is taken before the second is found not to fit: it is undone.
    assert not take([(0.0, 10.0, 4), (10.0, 20.0, 4)], 0.0, profile)
    after = {start: free for start, free in segments(profile)}
    assert [after[s] for s in (0.0, 10.0, 20.0)] == [8, 2, 8]
    assert sorted(set(before)) == [2, 8]


def test_parts_that_ended_or_hold_nothing_are_ignored():
    profile = FreeProfile(0.0, 4)
    assert take([(0.0, 5.0, 4), (5.0, 9.0, 0), (9.0, 12.0, 1)], 6.0, profile)
    after = {start: free for start, free in segments(profile)}
    assert after[0.0] == 4 and after[9.0] == 3 and after[12.0] == 4
