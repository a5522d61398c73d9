"""The minimum satisfactory share found by bisection is the one trying each share in turn finds."""

from __future__ import annotations

import random

import pytest
from cluster_helpers import carved_profile

from qosched.cluster.planning import (
    TOLERANCE,
    Ladder,
    finish_time,
    minimum_share,
)


def _each_in_turn(ladder, remaining, start, deadline, profile):
    """The fewest workers first, every candidate tried: what bisection must reproduce."""
    if not ladder.counts or deadline <= start:
        return None
    needed = remaining / (deadline - start)
    for share in ladder.counts:
        if ladder.rate_within[share] < needed * (1 - TOLERANCE):
            continue
        finish = finish_time(ladder, share, remaining, start, deadline, profile)
        if finish is not None:
            return share, finish
    return None


def _random_case(seed: int):
    rng = random.Random(seed)
    capacity = rng.choice([8, 16, 64])
    top = rng.choice([8, 16, 32, 64])
    # Sub-linear speeds with the odd unmeasured count, as in the tables.
    rates = [0.0] + [
        0.0 if rng.random() < 0.1 else g ** rng.uniform(0.5, 1.0) for g in range(1, top + 1)
    ]
    ladder = Ladder(rates, [1, 2, 4, 8, 16, 24, 32, 48, 64])
    profile = carved_profile(rng, capacity)
    start = rng.choice([0.0, rng.uniform(0.0, 50.0)])
    deadline = start + rng.uniform(10.0, 800.0)
    remaining = rng.uniform(10.0, 2.0 * rates[-1] * (deadline - start) + 10.0)
    return ladder, remaining, start, deadline, profile


@pytest.mark.parametrize("seed", range(400))
def test_bisection_finds_the_share_and_finish_trying_each_in_turn_finds(seed):
    ladder, remaining, start, deadline, profile = _random_case(seed)
    assert minimum_share(ladder, remaining, start, deadline, profile) == _each_in_turn(
        ladder, remaining, start, deadline, profile
    )


def test_the_cases_fit_first_later_and_never():
    """Some jobs fit on their first candidate, some only on a larger one, some on none."""
    kinds = set()
    for seed in range(400):
        ladder, remaining, start, deadline, profile = _random_case(seed)
        found = _each_in_turn(ladder, remaining, start, deadline, profile)
        needed = remaining / (deadline - start)
        first = next(
            (g for g in ladder.counts if ladder.rate_within[g] >= needed * (1 - TOLERANCE)), None
        )
        kinds.add("never" if found is None else "first" if found[0] == first else "later")
    assert kinds == {"first", "later", "never"}
