"""A fresh plan made only while it can still fail fewer jobs than another plan."""

from __future__ import annotations

import random

import pytest

from qosched.cluster.planning import Demand, Ladder, plan_demands, plan_failing_fewer

LADDER = Ladder([0.0, *(float(g) ** 0.8 for g in range(1, 17))], [1, 2, 4, 8, 16])


def _demands(seed: int) -> list[Demand]:
    rng = random.Random(seed)
    demands = []
    for i in range(rng.randint(0, 14)):
        deadline = rng.uniform(50.0, 600.0)
        demands.append(
            Demand(f"j{i}", LADDER, rng.uniform(50.0, 3000.0), 0.0, deadline, (deadline, float(i)))
        )
    return demands


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("than", [0, 1, 2, 5])
def test_it_is_the_fresh_plan_when_that_fails_fewer_and_none_otherwise(seed, than):
    demands = _demands(seed)
    fresh = plan_demands(demands, 0.0, 16)
    fewer = plan_failing_fewer(demands, 0.0, 16, than)
    if len(fresh.failed) < than:
        assert fewer is not None
        assert fewer.reservations == fresh.reservations and fewer.failed == fresh.failed
        assert (fewer.free.starts, fewer.free.free) == (fresh.free.starts, fresh.free.free)
    else:
        assert fewer is None


def test_the_cases_fail_none_some_and_many():
    failed = {len(plan_demands(_demands(seed), 0.0, 16).failed) for seed in range(60)}
    assert 0 in failed and 1 in failed and max(failed) > 5
