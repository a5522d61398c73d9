"""fggr against every registered policy, by goals: the example mixes and generated ones."""

import importlib.util
import sys
from pathlib import Path

import pytest

from qosched.gpushare.apps import load_apps_spec, workloads
from qosched.gpushare.judge import judge_mix, rule_violations
from qosched.hardware import gpu

ROOT = Path(__file__).resolve().parents[2]


def judged(name, duration_s=None):
    spec = load_apps_spec(ROOT / "examples" / name)
    device = gpu(spec.gpu)
    apps = workloads(spec, device)
    return judge_mix(device, apps, duration_s=duration_s or spec.duration_s, seed=spec.seed)


@pytest.fixture(scope="module")
def kernels_mix():
    return judged("gpu_apps_kernels.yaml")


def test_kernels_mix_keeps_the_rules(kernels_mix):
    assert rule_violations(kernels_mix) == []


def test_kernels_mix_protects_the_top_app_and_serves_the_middle_one_its_offered_load(
    kernels_mix,
):
    serving, analytics, batch = kernels_mix["fggr"]
    assert serving.met and serving.measured.p99_latency_ratio <= 1.10
    # analytics, open loop at 100 requests/s, is served all of it (it was half: its queue grew
    # without bound, p99 822x, a third of a second), and its p99 stays within the 20 ms the
    # policy bounds a kernel's wait to.
    assert analytics.measured.throughput_ratio >= 0.95
    assert analytics.measured.p99_latency_s <= 0.02
    assert batch.measured.throughput_ratio > 0.0  # batch still runs


def test_small_mix_is_no_worse_than_naive_where_naive_meets_every_goal():
    # 0.05 s of the example's 0.2 s: the same mix, a quarter of the simulation.
    by_policy = judged("gpu_apps_small.yaml", duration_s=0.05)
    assert all(app.met for app in by_policy["naive"])
    assert rule_violations(by_policy) == []
    mlp, cnn = by_policy["fggr"]
    assert mlp.met
    assert cnn.measured.throughput_ratio >= 0.95 * by_policy["naive"][1].measured.throughput_ratio


def load_bench():
    spec = importlib.util.spec_from_file_location(
        "gpushare_mixes", ROOT / "bench" / "gpushare_mixes.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_random_mixes_are_seeded():
    bench = load_bench()
    assert bench.random_mix(5).describe() == bench.random_mix(5).describe()
    assert bench.random_mix(5).describe() != bench.random_mix(6).describe()


# Generated mixes of explicit kernels (no estimation), each simulated under every policy.
# Rules (a)-(c) all hold on these; of the first 24 seeds the others break one, and the bench
# reports them (docs/results/gpushare.md): seeds 3, 7, 8, 16 and 17 rule (b) (an app gets less
# than under orion, naive or priority-streams, which also meet the goals), seed 14 rule (a).
# Seeds 10, 19, 20 and 23 broke a rule before the lag counted the requests after the one in
# progress, a same-level best-effort app ran while the goal had measured room, and an app
# missing its own goal took the allowance the hedges kept back.
ALL_RULES = (0, 1, 2, 4, 5, 6, 9, 10, 11, 12, 13, 15, 19, 20, 23)
# Where (b) fails but (a) and (c) hold: the top goals are still met wherever some policy meets
# them, and nothing is worse than naive where naive meets every goal.
GOALS_ONLY = (3, 17)


@pytest.mark.parametrize("seed", ALL_RULES, ids=[f"seed-{s}" for s in ALL_RULES])
def test_fggr_keeps_every_rule_on_generated_mixes(seed):
    bench = load_bench()
    mix = bench.random_mix(seed)
    assert rule_violations(bench.judge(mix)) == [], mix.describe()


@pytest.mark.parametrize("seed", GOALS_ONLY, ids=[f"seed-{s}" for s in GOALS_ONLY])
def test_fggr_meets_the_goals_some_policy_meets_on_generated_mixes(seed):
    bench = load_bench()
    mix = bench.random_mix(seed)
    broken = [rule for rule in rule_violations(bench.judge(mix)) if not rule.startswith("(b)")]
    assert broken == [], mix.describe()
