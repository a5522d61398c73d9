"""The runtime's protocol replayed in simulated time, against hand-computed timelines, and the
runtime model fitted back from timed messages."""

from __future__ import annotations

import math

import numpy as np
import pytest
from placement_helpers import random_problem

from qosched.core.errors import InputError
from qosched.core.trace import Span
from qosched.placement.ir import Problem, TenantGraph, evaluate
from qosched.placement.replay import (
    MessageSample,
    RuntimeModel,
    fit_runtime_model,
    message_samples,
    replay,
)


def one(name="a", cpu=(1.0,), gpu=(1.0,), cut=(), **kw):
    return TenantGraph.from_costs(name, list(cpu), list(gpu), list(cut), **kw)


def test_one_tenant_on_one_processor_runs_back_to_back():
    # Request r finishes at (r + 1) * 1.0 s; measured from round 0's submission: 20 in 20 s.
    got = replay(Problem((one(cpu=(1.0,)),)), [("cpu",)], rounds=20, warmup=0)
    assert got.throughput_rps == pytest.approx((1.0,))
    assert got.busy_fraction == pytest.approx({"cpu": 1.0, "gpu": 0.0})


def test_rounds_wait_for_their_slowest_tenant():
    # a on the cpu (1 s), b on the gpu (2 s), two rounds in flight: round r is admitted when
    # round r - 2 is done, at 2(r - 1) s (the gpu), so a finishes round r at 2r - 1 and b at 2r + 2.
    problem = Problem((one("a", cpu=(1.0,)), one("b", gpu=(2.0,))))
    got = replay(problem, [("cpu",), ("gpu",)], rounds=20, warmup=0)
    assert got.throughput_rps == pytest.approx((20 / 37, 20 / 40))


def test_a_split_tenant_pipelines_only_as_deep_as_the_rounds_in_flight():
    # cpu unit 1 s, a 0.4 s copy split half and half between the two ends, gpu unit 1 s: each
    # processor is busy 1.2 s per request and one request takes 2.4 s from start to end.
    t = one(cpu=(1.0, 9.0), gpu=(9.0, 1.0), cut=(0.4,), copy_share=0.5)
    problem, plan = Problem((t,)), [("cpu", "gpu")]
    assert evaluate(problem, plan, method="x").throughput_rps == pytest.approx(1 / 1.2)
    two = replay(problem, plan, RuntimeModel(depth=2), rounds=20, warmup=0)
    one_deep = replay(problem, plan, RuntimeModel(depth=1), rounds=20, warmup=0)
    # depth 2 keeps both busy: the first result at 2.4 s, then one every 1.2 s
    assert two.throughput_rps[0] == pytest.approx(20 / (2.4 + 19 * 1.2))
    # depth 1: strictly one request after the other
    assert one_deep.throughput_rps[0] == pytest.approx(1 / 2.4)


def test_contention_slows_both_processes_only_while_both_are_busy():
    problem = Problem((one("a", cpu=(1.0,)), one("b", gpu=(1.0,))))
    plan = [("cpu",), ("gpu",)]
    got = replay(problem, plan, RuntimeModel(contention=1.5), rounds=20, warmup=0)
    assert got.throughput_rps == pytest.approx((1 / 1.5, 1 / 1.5))
    alone = Problem((one("a", cpu=(1.0,)),))
    got = replay(alone, [("cpu",)], RuntimeModel(contention=1.5), rounds=20, warmup=0)
    assert got.throughput_rps == pytest.approx((1.0,))


def test_a_process_left_alone_speeds_up_for_the_rest_of_its_message():
    # a: 1 s on the cpu, b: 2 s on the gpu, twice as slow together: a is done at 2 s, when b
    # has done 1 s of its 2; b does the last second alone, done at 3 s.
    problem = Problem((one("a", cpu=(1.0,)), one("b", gpu=(2.0,))))
    model = RuntimeModel(depth=1, contention=2.0)
    got = replay(problem, [("cpu",), ("gpu",)], model, rounds=1, warmup=0)
    assert got.throughput_rps == pytest.approx((1 / 2, 1 / 3))
    assert got.busy_fraction == pytest.approx({"cpu": 2 / 3, "gpu": 1.0})


@pytest.mark.parametrize("seed", range(2))
def test_a_replay_is_deterministic(seed):
    problem = random_problem(seed, 3, 6)
    plan = [tuple("cpu" if (i + j) % 3 else "gpu" for j in range(6)) for i in range(3)]
    model = RuntimeModel(depth=3, message_overhead_s=0.01, contention=1.3)
    assert replay(problem, plan, model) == replay(problem, plan, model)


def test_overhead_and_scale_apply_per_message():
    # one segment on the gpu, its result back through the cpu process: two messages, each with
    # the fixed overhead; only the segment's units are scaled
    t = one(gpu=(1.0,), output_from_gpu_s=0.0)
    model = RuntimeModel(depth=1, message_overhead_s=0.1, compute_scale=2.0)
    got = replay(Problem((t,)), [("gpu",)], model, rounds=10, warmup=0)
    assert got.throughput_rps == pytest.approx((1 / (0.1 + 2.0 + 0.1),))


@pytest.mark.parametrize("seed", range(4))
def test_the_default_replay_never_beats_the_cost_model(seed):
    # The cost model assumes perfect overlap; the replay can only lose some (the margin covers
    # the measured window's ends).
    problem = random_problem(seed, 3, 8)
    rng = np.random.default_rng(seed)
    for _ in range(5):
        plan = [tuple(rng.choice(["cpu", "gpu"], t.n_units)) for t in problem.tenants]
        model = evaluate(problem, plan, method="x").throughput_rps * len(problem.tenants)
        got = replay(problem, plan, rounds=200, warmup=5).total_throughput_rps
        assert got <= model * 1.02


def test_a_plan_the_platform_cannot_run_is_refused():
    t = one(cpu=(1.0, math.inf), gpu=(1.0, 1.0), cut=(0.1,))
    with pytest.raises(InputError, match="cannot run"):
        replay(Problem((t,)), [("cpu", "cpu")])
    with pytest.raises(InputError, match="expected 1 assignments"):
        replay(Problem((t,)), [])


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"depth": 0}, "depth"),
        ({"message_overhead_s": -1e-3}, "message_overhead_s"),
        ({"compute_scale": 0.0}, "compute_scale"),
        ({"contention": 0.9}, "contention"),
        ({"contention": math.inf}, "contention"),
    ],
)
def test_bad_runtime_models_name_the_field(kw, field):
    with pytest.raises(InputError) as caught:
        RuntimeModel(**kw)
    assert caught.value.field == field


def test_the_fit_recovers_the_model_that_made_the_samples():
    rng = np.random.default_rng(0)
    truth = RuntimeModel(message_overhead_s=2e-4, compute_scale=1.2, contention=1.3)
    samples = []
    for _ in range(200):
        iso, copies, overlap = rng.uniform(1e-4, 1e-2), rng.uniform(0, 1e-3), rng.uniform(0, 1)
        measured = (
            copies
            + truth.message_overhead_s
            + truth.compute_scale * iso * (1 + (truth.contention - 1) * overlap)
        )
        samples.append(MessageSample(iso, copies, measured, overlap))
    got = fit_runtime_model(samples)
    assert got.message_overhead_s == pytest.approx(2e-4, rel=1e-6)
    assert got.compute_scale == pytest.approx(1.2, rel=1e-6)
    assert got.contention == pytest.approx(1.3, rel=1e-6)


def test_a_fit_never_makes_company_faster():
    # Messages that ran faster with the other process busy: no contention term, not one below 1.
    samples = [MessageSample(i * 1e-3, 0.0, i * 1e-3 * (1.0 - 0.2 * o), o) for i, o in
               [(1, 0), (2, 1), (3, 0), (4, 1), (5, 0.5)]]  # fmt: skip
    got = fit_runtime_model(samples)
    assert got.contention == 1.0 and got.compute_scale > 0
    with pytest.raises(InputError, match="at least 3"):
        fit_runtime_model(samples[:2])


def test_message_samples_read_the_plan_from_the_timeline():
    # cpu unit, then a gpu unit: the cpu packs half the 0.5 s copy, the gpu unpacks the other
    # half and packs half the 0.2 s result, which the cpu process unpacks and finishes.
    t = one(cpu=(1.0, 9.0), gpu=(9.0, 4.0), cut=(0.5,), output_from_gpu_s=0.2, copy_share=0.5)
    problem, plan = Problem((t,)), [("cpu", "gpu")]

    def message(track, start, duration, segment):
        return Span(
            "message a#0", "run", track, start, duration, {"tenant": "a", "segment": segment}
        )

    spans = [message("cpu", 0.0, 2.0, 0), message("gpu", 1.5, 5.0, 1), message("cpu", 7.0, 0.5, 2)]
    got = message_samples(spans, problem, plan)
    flat = [x for s in got for x in (s.isolated_s, s.copies_s, s.measured_s)]
    assert flat == pytest.approx([1.0, 0.25, 2.0, 4.0, 0.25 + 0.1, 5.0, 0.0, 0.1, 0.5])
    # the gpu message overlapped the cpu one for 0.5 of its 5 s
    assert [s.overlap for s in got] == pytest.approx([0.25, 0.1, 0.0])
    with pytest.raises(InputError, match="does not fit the plan"):
        message_samples([message("gpu", 0.0, 1.0, 0)], problem, plan)
