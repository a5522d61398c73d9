import itertools
import math
import time

import numpy as np
import pytest
from placement_helpers import brute_assignments, brute_best, random_problem, random_tenant

from qosched.core.errors import InputError
from qosched.placement.ir import InfeasibleError, Problem, TenantGraph, loads, switches
from qosched.placement.search import _flipped_loads, pareto_candidates, plan


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_pareto_matches_brute_force(seed, k):
    rng = np.random.default_rng(seed)
    t = random_tenant(rng, 9 if seed % 2 else 10)
    pts = {loads(t, a) for a in brute_assignments(t, k)}
    front = {p for p in pts if not any(q != p and all(q[r] <= p[r] for r in range(3)) for q in pts)}
    cands = pareto_candidates(t, k)
    assert {c.loads for c in cands} == front
    assert all(c.switches <= k for c in cands)
    best = min(max(p) for p in pts)
    assert min(max(c.loads) for c in cands) == pytest.approx(best)
    assert plan(Problem((t,)), k, resolution=0).bottleneck_s == pytest.approx(best)


def test_pareto_skips_unsupported_units_and_forbidden_cuts():
    t = TenantGraph.from_costs("a", [1.0, math.inf, 1.0], [math.inf, 1.0, 5.0], [0.1, math.inf])
    # unit 0 CPU only, unit 1 GPU only, cut 1 forbidden -> unit 2 must follow unit 1 on the GPU.
    assert [c.assignment for c in pareto_candidates(t, 2)] == [("cpu", "gpu", "gpu")]
    assert pareto_candidates(t, 0) == []
    with pytest.raises(InfeasibleError):
        plan(Problem((t,)), 0)


def test_a_budget_beyond_the_chain_is_the_chains_length():
    """A chain of n units switches at most n - 1 times: a budget of 2**52 finds the same front
    as n - 1, at once (the search's layers used to be as wide as the budget)."""
    t = random_tenant(np.random.default_rng(3), 9)
    started = time.perf_counter()
    huge = pareto_candidates(t, 2**52)
    assert time.perf_counter() - started < 30
    assert [c.assignment for c in huge] == [c.assignment for c in pareto_candidates(t, 8)]


def test_bad_max_switches():
    t = TenantGraph.from_costs("a", [1.0], [1.0], [])
    with pytest.raises(InputError):
        pareto_candidates(t, -1)


@pytest.mark.parametrize("seed", range(5))
def test_phase_two_matches_joint_brute_force(seed):
    problem = random_problem(seed, 2 + seed % 2, 6)
    k = 2
    got = plan(problem, k, resolution=0)
    assert got.bottleneck_s == pytest.approx(brute_best(problem, k), rel=1e-9)
    assert all(switches(tp.assignment) <= k for tp in got.tenants)


@pytest.mark.parametrize("seed", range(4))
def test_latency_goals_respected(seed):
    rng = np.random.default_rng(100 + seed)
    tenants = []
    for i in range(2):
        t = random_tenant(rng, 6, f"t{i}")
        fastest = min(sum(loads(t, a)) for a in brute_assignments(t, 2))
        goal = fastest * (1.0 + 0.2 * seed)
        tenants.append(TenantGraph(**{**t.__dict__, "latency_goal_s": goal}))
    problem = Problem(tuple(tenants))
    got = plan(problem, 2, resolution=0)
    assert got.meets_goals
    assert got.bottleneck_s == pytest.approx(brute_best(problem, 2), rel=1e-9)


def test_infeasible_goal_raises():
    rng = np.random.default_rng(7)
    t = random_tenant(rng, 5)
    fastest = min(sum(loads(t, a)) for a in brute_assignments(t, 4))
    t = TenantGraph(**{**t.__dict__, "latency_goal_s": fastest * 0.99})
    with pytest.raises(InfeasibleError, match="latency goal"):
        plan(Problem((t,)), 4)


@pytest.mark.slow
def test_default_resolution_close_to_exact():
    problem = random_problem(3, 3, 40)
    exact = plan(problem, 2, resolution=0)
    approx = plan(problem, 2)
    assert approx.bottleneck_s >= exact.bottleneck_s * (1 - 1e-12)
    assert approx.bottleneck_s <= exact.bottleneck_s * 1.01


@pytest.mark.slow
def test_smoke_four_tenants_300_units():
    problem = random_problem(0, 4, 300)
    start = time.perf_counter()
    got = plan(problem, 4)
    wall = time.perf_counter() - start
    print(f"\n4 tenants x 300 units, max_switches=4: search_s={got.search_s:.2f} wall={wall:.2f}")
    assert len(got.tenants) == 4
    assert all(switches(tp.assignment) <= 4 for tp in got.tenants)
    assert 0 < got.throughput_rps < math.inf


@pytest.mark.parametrize("seed", range(6))
def test_flipped_loads_equal_loads_recomputed(seed):
    # The constant-time flip of refine_flips against loads() of the flipped assignment, with
    # host copies, copy shares, units one processor cannot run and cuts that are forbidden.
    rng = np.random.default_rng(seed)
    n = 7
    cpu = rng.uniform(0.1, 2.0, n)
    gpu = rng.uniform(0.1, 2.0, n)
    cut = rng.uniform(0.0, 0.5, n - 1)
    cpu[rng.integers(1, n - 1)] = math.inf
    cut[rng.integers(n - 1)] = math.inf
    t = TenantGraph.from_costs(
        "t",
        cpu,
        gpu,
        cut,
        input_to_gpu_s=0.3,
        output_from_gpu_s=math.inf if seed % 2 else 0.2,
        copy_share=0.25 * (seed % 3),
    )
    checked = 0
    for a in itertools.product(("cpu", "gpu"), repeat=n):
        before = loads(t, a)
        if not all(math.isfinite(x) for x in before):
            continue
        for u in range(n):
            flipped = (*a[:u], "gpu" if a[u] == "cpu" else "cpu", *a[u + 1 :])
            want = loads(t, flipped)
            got = _flipped_loads(t, a, u, before)
            if all(math.isfinite(x) for x in want):
                assert got == pytest.approx(want, abs=1e-12)
                checked += 1
            else:
                assert got is None
    assert checked > 20
