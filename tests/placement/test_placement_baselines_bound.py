import numpy as np
import pytest
from placement_helpers import brute_assignments, random_problem, random_tenant

from qosched.placement.baselines import all_cpu, all_gpu, layer_level, model_level
from qosched.placement.bound import lp_bound
from qosched.placement.ir import Problem, TenantGraph, evaluate, loads, switches
from qosched.placement.search import DEFAULT_RESOLUTION, GAP_PER_RESOLUTION, plan

K = 3


def problem_with_boundaries(seed, tenants=3, n=12):
    rng = np.random.default_rng(seed)
    return Problem(
        tuple(
            random_tenant(rng, n, f"t{i}", boundaries=tuple(range(1, n - 1, 3)))
            for i in range(tenants)
        )
    )


def all_plans(problem):
    return [
        all_cpu(problem),
        all_gpu(problem),
        model_level(problem),
        layer_level(problem, K),
    ]


@pytest.mark.parametrize("seed", range(6))
def test_cos_beats_every_baseline_and_bound_beats_all(seed):
    problem = problem_with_boundaries(seed)
    cos = plan(problem, K, resolution=0)
    bound = lp_bound(problem)
    for base in all_plans(problem):
        assert cos.throughput_rps >= base.throughput_rps * (1 - 1e-9), base.method
        assert bound.throughput_rps >= base.throughput_rps * (1 - 1e-7), base.method
    assert bound.throughput_rps >= cos.throughput_rps * (1 - 1e-7)


def test_layer_level_switches_only_at_boundaries():
    problem = problem_with_boundaries(1)
    got = layer_level(problem, K)
    for t, tp in zip(problem.tenants, got.tenants, strict=True):
        a = tp.assignment
        cuts = {i for i in range(len(a) - 1) if a[i] != a[i + 1]}
        assert cuts <= set(t.layer_boundaries)
        assert switches(a) <= K


def test_model_level_is_best_whole_model_combination():
    problem = random_problem(5, 3, 5)
    got = model_level(problem)
    import itertools

    best = min(
        evaluate(
            problem, [(p,) * t.n_units for p, t in zip(c, problem.tenants, strict=True)], method="x"
        ).bottleneck_s
        for c in itertools.product(("cpu", "gpu"), repeat=3)
    )
    assert got.bottleneck_s == pytest.approx(best)


def test_bound_is_below_brute_force_single_tenant():
    rng = np.random.default_rng(11)
    t = random_tenant(rng, 8)
    best = min(max(loads(t, a)) for a in brute_assignments(t, 7))
    assert lp_bound(Problem((t,))).bottleneck_s <= best * (1 + 1e-7)


def test_bound_by_hand():
    # One unit: cpu 2, gpu 2, no transfers -> half on each: t = 1.
    t = TenantGraph.from_costs("a", [2.0], [2.0], [])
    assert lp_bound(Problem((t,))).bottleneck_s == pytest.approx(1.0)


@pytest.mark.parametrize("seed", range(4))
def test_cos_on_the_default_grid_never_loses_to_whole_model_placement(seed):
    problem = random_problem(100 + seed, 3, 40)
    cos = plan(problem, K)  # default resolution: approximate Pareto sets
    # Whole-model assignments are among COS's candidates, and phase two stops within its gap
    # of the best choice among them.
    gap = GAP_PER_RESOLUTION * DEFAULT_RESOLUTION
    for base in (all_cpu(problem), all_gpu(problem), model_level(problem)):
        assert cos.throughput_rps >= base.throughput_rps * (1 - gap), base.method
