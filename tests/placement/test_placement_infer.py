"""COS against the baselines and the reports of ``infer plan`` and ``infer run``, by hand."""

from __future__ import annotations

import pytest

from qosched.placement.infer import InferReport, InferRunReport, compare
from qosched.placement.ir import Problem, TenantGraph, evaluate
from qosched.placement.runtime import MeasuredRun, TenantResult


def crossed():
    # a is 4x faster on the cpu, b on the gpu: COS puts each on its own processor.
    return Problem(
        (
            TenantGraph.from_costs("a", [1.0], [4.0], []),
            TenantGraph.from_costs("b", [4.0], [1.0], []),
        )
    )


def test_cos_against_every_baseline_and_the_bound():
    got = compare(crossed(), max_switches=2)
    assert [t.assignment for t in got.cos.tenants] == [("cpu",), ("gpu",)]
    # one request of each per round: COS 1 s per round; all on one processor 5 s
    assert got.cos.throughput_rps == pytest.approx(1.0)
    assert list(got.baselines) == ["all_cpu", "all_gpu", "model_level", "layer_level"]
    rates = {name: p.throughput_rps for name, p in got.baselines.items()}
    assert rates == pytest.approx(
        {"all_cpu": 0.2, "all_gpu": 0.2, "model_level": 1.0, "layer_level": 1.0}
    )
    assert got.bound_rps == pytest.approx(1.0)
    assert got.search_s >= 0


def test_the_plan_report_is_the_contract_json():
    comparison = compare(crossed(), max_switches=2)
    got = InferReport.of(comparison).to_json()
    assert list(got) == ["throughput_rps", "bound_rps", "search_s", "baselines", "tenants"]
    assert got["throughput_rps"] == pytest.approx(1.0)
    assert got["search_s"] == comparison.search_s
    assert got["baselines"]["all_gpu"] == pytest.approx(0.2)
    assert got["tenants"] == [
        {"name": "a", "throughput_rps": pytest.approx(1.0), "latency_s": pytest.approx(1.0)},
        {"name": "b", "throughput_rps": pytest.approx(1.0), "latency_s": pytest.approx(1.0)},
    ]


def test_the_run_report_sets_measured_against_predicted():
    problem = crossed()
    predicted = evaluate(problem, [("cpu",), ("gpu",)], method="cos")  # 1 req/s each
    measured = MeasuredRun(
        tenants=(
            TenantResult("a", 4, 0.5, (1.0, 2.0, 3.0, 2.0), True),
            TenantResult("b", 4, 0.25, (4.0, 4.0, 4.0, 4.0), False),
        ),
        rounds=4,
        warmup=1,
        depth=2,
        wall_s=16.0,
        busy_s={"cpu": 4.0, "gpu": 4.5},
        spans=(),
    )
    got = InferRunReport.of(measured, predicted, problem).to_json()
    assert got["predicted_rps"] == pytest.approx(2.0)
    assert got["measured_rps"] == pytest.approx(0.75)
    assert got["ratio"] == pytest.approx(0.375)
    assert got["mean_latency_s"] == pytest.approx(3.0)  # 24 s over 8 requests
    assert got["predicted_busy_s"] == pytest.approx({"cpu": 4.0, "gpu": 4.0})
    assert got["explained"] is None  # no timed messages to fit a runtime model to
    assert (got["requests"], got["depth"], got["wall_s"]) == (4, 2, 16.0)
    a, b = got["tenants"]
    assert a["p95_latency_s"] == 3.0 and a["mean_latency_s"] == pytest.approx(2.0)
    assert (a["outputs_equal"], b["outputs_equal"]) == (True, False)
    assert b["predicted_latency_s"] == pytest.approx(1.0)


def test_a_goal_only_a_split_meets_leaves_the_whole_model_baselines_without_a_plan():
    # Unit 0 is fast on the cpu, unit 1 on the gpu: 1.1 s split, 11 s on either processor.
    split = TenantGraph.from_costs("a", [1.0, 10.0], [10.0, 1.0], [0.1], latency_goal_s=5.0)
    got = compare(Problem((split,)), max_switches=2)
    assert got.cos.tenants[0].assignment == ("cpu", "gpu")
    assert set(got.baselines) == {"all_cpu", "all_gpu"}
    assert set(got.infeasible) == {"model_level", "layer_level"}
    assert "latency goal" in got.infeasible["model_level"]
    report = InferReport.of(got).to_json()
    assert list(report["baselines"]) == ["all_cpu", "all_gpu", "model_level", "layer_level"]
    assert report["baselines"]["model_level"] == report["baselines"]["layer_level"] == 0.0
    assert report["throughput_rps"] == pytest.approx(1.0 / 1.0)
