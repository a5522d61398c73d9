"""Taking kept reservations out of a free-worker profile (hand-computed profiles)."""

from __future__ import annotations

import random

import pytest

from qosched.cluster.planning import FreeProfile, TakeAllMemo, take, take_all


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


def _random_reservations(seed: int, count: int) -> list[list[tuple[float, float, int]]]:
    rng = random.Random(seed)
    reservations = []
    for _ in range(count):
        reservation, start = [], float(rng.randrange(0, 50))
        for _ in range(rng.randrange(1, 4)):
            end = start + rng.randrange(1, 30)
            reservation.append((start, end, rng.choice((0, 1, 2, 4, 8))))
            start = end
        reservations.append(reservation)
    return reservations


@pytest.mark.parametrize(
    ("seed", "now"), [(1, 0.0), (2, 10.0), (3, 25.5), (4, 40.0)], ids=["s1", "s2", "s3", "s4"]
)
def test_take_all_gives_the_profile_of_taking_each_in_turn(seed, now):
    reservations = _random_reservations(seed, 12)
    one_by_one = FreeProfile(now, 1000)
    for reservation in reservations:
        assert take(reservation, now, one_by_one)
    at_once = FreeProfile(now, 1000)
    assert take_all(reservations, now, at_once)
    assert segments(at_once) == segments(one_by_one)


def test_take_all_refuses_reservations_that_exceed_the_workers_together():
    profile = FreeProfile(0.0, 8)
    assert not take_all([[(0.0, 10.0, 6)], [(5.0, 15.0, 4)]], 0.0, profile)
    assert segments(profile) == [(0.0, 8)]


def test_take_all_of_nothing_leaves_the_profile_as_it_was():
    profile = FreeProfile(0.0, 8)
    assert take_all([[(0.0, 5.0, 0)], [(0.0, 3.0, 2)]], 4.0, profile)
    assert segments(profile) == [(0.0, 8)]


def test_take_all_needs_a_fresh_profile():
    profile = FreeProfile(0.0, 8)
    assert take([(0.0, 10.0, 4)], 0.0, profile)
    with pytest.raises(ValueError, match="nothing taken"):
        take_all([[(0.0, 10.0, 2)]], 0.0, profile)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6], ids=lambda s: f"s{s}")
def test_take_all_memo_gives_the_profile_of_take_all_at_every_call(seed):
    """Later instants, reservations leaving and coming, several at once and none at all."""
    rng = random.Random(seed)
    pool = _random_reservations(seed, 40)
    memo, now = TakeAllMemo(), 0.0
    chosen = rng.sample(pool, 12)
    for step in range(60):
        if step % 7 == 3:
            chosen = rng.sample(pool, rng.randrange(0, 20))  # most of them change: a re-sweep
        else:
            for _ in range(rng.randrange(0, 3)):
                if chosen and rng.random() < 0.5:
                    chosen.remove(rng.choice(chosen))
                else:
                    extra = rng.choice(pool)
                    if extra not in chosen:
                        chosen.append(extra)
        if step % 11 == 10:
            now = max(0.0, now - 5.0)  # an earlier instant: a re-sweep
        else:
            now += rng.choice((0.0, 0.5, 1.0, 3.0))
        capacity = rng.choice((8, 16, 1000))
        expected, got = FreeProfile(now, capacity), FreeProfile(now, capacity)
        fits = take_all(chosen, now, expected)
        assert memo.take_all(chosen, now, got) == fits
        assert segments(got) == segments(expected)


def test_take_all_memo_needs_a_fresh_profile():
    profile = FreeProfile(0.0, 8)
    assert take([(0.0, 10.0, 4)], 0.0, profile)
    with pytest.raises(ValueError, match="nothing taken"):
        TakeAllMemo().take_all([[(0.0, 10.0, 2)]], 0.0, profile)
