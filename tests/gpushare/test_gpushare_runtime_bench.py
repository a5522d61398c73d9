"""bench/gpu_validate.py without a GPU: says so, smoke-runs the runtime on the CPU, exits 0."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "bench" / "gpu_validate.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path runs only without CUDA")
def test_gpu_validate_without_cuda_runs_the_cpu_smoke_check(capsys):
    spec = importlib.util.spec_from_file_location("gpu_validate", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--requests", "2"]) == 0
    out = capsys.readouterr().out
    assert "no CUDA GPU" in out
    assert "fggr" in out and "orion" in out and "hi_p50_latency_ratio" in out


def test_summary_errors_are_computed_per_class():
    spec = importlib.util.spec_from_file_location("gpu_validate_summary", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ops = [
        {"class": "gemm", "estimated_s": 2.0, "measured_s": 1.0},  # +100 %
        {"class": "gemm", "estimated_s": 1.0, "measured_s": 2.0},  # -50 %
        {"class": "elementwise", "estimated_s": 1.0, "measured_s": 1.0},
    ]
    summary = module.summarise([{"model": "m", "batch": 1, "ops": ops}])
    gemm = summary["per_class"]["gemm"]
    assert gemm["n"] == 2
    assert gemm["mean_abs_rel_error"] == pytest.approx(0.75)
    assert gemm["median_ratio"] == pytest.approx(1.25)
    assert summary["per_class"]["elementwise"]["median_abs_rel_error"] == 0
