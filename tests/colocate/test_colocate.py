"""The co-location surrogate as the cluster's sharing model: each party's slowdown beside
several others is the product of the surrogate's pair predictions."""

from __future__ import annotations

import pytest

from qosched.cluster.pods.costs import ModelCost, party
from qosched.colocate import SurrogateSharing, as_profile
from qosched.core.goals import BEST_EFFORT, Goal
from qosched.gpushare.colocation import Profile, bundled

COST = ModelCost(request_s=0.010, sm=0.5, bandwidth=0.3, kernel_s=0.001)


def test_a_cluster_party_is_the_surrogates_profile_field_for_field() -> None:
    load = party("a", COST, 2, Goal("p99_slowdown", 1.5), 25.0)
    assert as_profile(load) == Profile("a", 2, Goal("p99_slowdown", 1.5), 0.010, 0.25, 0.5, 0.3,
                                       25.0, 0.001)  # fmt: skip


def test_surrogate_sharing_multiplies_the_pairs_predictions() -> None:
    surrogate = bundled()
    a = party("a", COST, 2, Goal("p99_slowdown", 1.5), 25.0)
    b = party("b", COST, 0, BEST_EFFORT)
    c = party("c", ModelCost(0.05, 0.9, 0.6, 0.01), 1, BEST_EFFORT)
    ab, ba = surrogate.pair(as_profile(a), as_profile(b))
    ac, ca = surrogate.pair(as_profile(a), as_profile(c))
    bc, cb = surrogate.pair(as_profile(b), as_profile(c))
    assert SurrogateSharing(surrogate).slowdowns([a, b, c]) == pytest.approx(
        [ab * ac, ba * bc, ca * cb]
    )
    assert SurrogateSharing(surrogate).slowdowns([a]) == [1.0]
