"""Copies that occupy both processors (core-set platforms): loads, latency, search and bound."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from placement_helpers import random_tenant

from qosched.core.errors import InputError
from qosched.placement.bound import lp_bound
from qosched.placement.ir import Problem, TenantGraph, evaluate, latency_s, loads
from qosched.placement.search import plan


def _tenant(share):
    return TenantGraph.from_costs(
        "t", [1.0, 2.0, 3.0], [0.5, 0.5, 0.5], [0.2, 0.4],
        input_to_gpu_s=0.1, output_from_gpu_s=0.3, copy_share=share,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("assignment", "expected_loads", "expected_latency"),
    [
        # cpu: 1 + 3, gpu: 0.5; copies 0.2 + 0.4, each end pays half of 0.6
        (("cpu", "gpu", "cpu"), (4.3, 0.8, 0.6), 4 + 0.5 + 0.6),
        # gpu first and last: input 0.1 + output 0.3, no cut
        (("gpu", "gpu", "gpu"), (0.2, 1.7, 0.4), 1.5 + 0.4),
        (("cpu", "cpu", "cpu"), (6.0, 0.0, 0.0), 6.0),
    ],
)
def test_each_copy_charges_half_to_both_processors_and_once_to_latency(
    assignment, expected_loads, expected_latency
):
    tenant = _tenant(0.5)
    assert loads(tenant, assignment) == pytest.approx(expected_loads)
    assert latency_s(tenant, assignment) == pytest.approx(expected_latency)
    plan_ = evaluate(Problem((tenant,)), [assignment], method="x")
    assert plan_.tenants[0].latency_s == pytest.approx(expected_latency)


@pytest.mark.parametrize("share", [-0.1, 0.6, True])
def test_a_copy_share_outside_zero_to_half_is_refused(share):
    with pytest.raises(InputError, match="copy share") as caught:
        _tenant(share)
    assert caught.value.field == "copy_share"


@pytest.mark.parametrize("seed", range(4))
def test_search_is_optimal_and_under_the_bound_with_shared_copies(seed):
    rng = np.random.default_rng(seed)
    tenants = []
    for i in range(2):
        t = random_tenant(rng, 5, f"t{i}")
        tenants.append(TenantGraph(**{**t.__dict__, "copy_share": 0.5}))
    problem = Problem(tuple(tenants))
    options = list(itertools.product(("cpu", "gpu"), repeat=5))
    best = min(
        max(a + b for a, b in zip(loads(tenants[0], x), loads(tenants[1], y), strict=True))
        for x in options
        for y in options
    )
    found = plan(problem, max_switches=4, resolution=0)
    assert found.bottleneck_s == pytest.approx(best)
    assert lp_bound(problem).bottleneck_s <= best + 1e-9
