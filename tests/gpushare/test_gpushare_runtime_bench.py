"""bench/gpu_validate.py without a GPU: says so, smoke-runs the runtime on the CPU, exits 0; and
its rehearsal on the CPU runs every part the GPU run will."""

from __future__ import annotations

import json

import pytest
import torch

from bench_scripts import load_bench_script


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path runs only without CUDA")
def test_gpu_validate_without_cuda_runs_the_cpu_smoke_check(capsys):
    module = load_bench_script("gpu_validate")
    assert module.main(["--requests", "2"]) == 0
    out = capsys.readouterr().out
    assert "no CUDA GPU" in out
    assert "fggr" in out and "orion" in out and "hi_p50_latency_ratio" in out


def test_summary_errors_are_computed_per_class():
    module = load_bench_script("gpu_validate", "gpu_validate_summary")
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


def _refuse(constant: str) -> None:
    raise ValueError(f"{constant} in the JSON")


@pytest.mark.slow
def test_the_rehearsal_on_the_cpu_runs_every_part_and_writes_strict_json(tmp_path, capsys):
    module = load_bench_script("gpu_validate", "gpu_validate_rehearsal")
    out = tmp_path / "gpu_validate.json"
    argv = ["--device", "cpu", "--models", "mlp", "--batches", "1", "--reps", "1"]
    assert module.main([*argv, "--requests", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "FAILED" not in printed and "rehearsal" in printed
    report = json.loads(out.read_text(), parse_constant=_refuse)
    assert report["rehearsal"] is True and report["dtype"] == "float32"
    (mlp,) = report["models"]
    # Every operator the estimator saw was found again in the profile, by its range's name.
    assert len(mlp["ops"]) >= 3 and all(op["measured_s"] > 0 for op in mlp["ops"])
    assert report["summary"]["per_model"]["mlp@1"]["n"] == len(mlp["ops"])
    assert set(report["runtime"]) == set(module.RUNTIME_POLICIES)
    pairs = report["interference"]["pairs"]
    assert len(pairs) == len(module.pair_operators(module.torch.float32, "cpu", 16)) ** 2
    assert set(report["interference"]["fitted_weights"]) == set(module.FEATURES)
