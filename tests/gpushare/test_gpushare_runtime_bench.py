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


# ---- the co-located pair (--coloc): its CPU-side parts -------------------------------------


def test_a_coloc_pair_is_parsed_into_two_workloads():
    module = load_bench_script("gpu_validate", "gpu_validate_coloc_parse")
    a, b = module.parse_coloc("resnet50:1:inference@200:1+bert_base:8:training:0")
    assert (a.model, a.batch, a.kind, a.rate_rps, a.priority) == ("resnet50", 1, "inference",
                                                                   200.0, 1)  # fmt: skip
    assert (b.model, b.batch, b.kind, b.rate_rps, b.priority) == ("bert_base", 8, "training",
                                                                  None, 0)  # fmt: skip
    assert module.parse_coloc(module.DEFAULT_COLOC)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        pytest.param("mlp:1:inference@200:1", "coloc", id="one-party"),
        pytest.param("mlp:1:inference@fast:1+mlp:1:training:0", "rate_rps", id="rate-text"),
        pytest.param("mlp:1:inference:1+mlp:1:training:0", "rate_rps", id="no-rate"),
        pytest.param("mlp:x:training:1+mlp:1:training:0", "coloc", id="batch-text"),
        pytest.param("mlp:1:serving:1+mlp:1:training:0", "kind", id="unknown-kind"),
        pytest.param("mlp:1:training+mlp:1:training:0", "coloc", id="three-fields"),
    ],
)
def test_a_bad_coloc_pair_is_refused_by_name(text, field):
    module = load_bench_script("gpu_validate", "gpu_validate_coloc_bad")
    with pytest.raises(module.InputError) as caught:
        module.parse_coloc(text)
    assert caught.value.field == field


def test_pair_slowdowns_read_latency_for_inference_and_steps_for_training():
    module = load_bench_script("gpu_validate", "gpu_validate_coloc_slowdowns")
    parties = module.parse_coloc("mlp:1:inference@100:1+mlp:8:training:0")
    # p99 (inclusive quantiles) of 1..100 ms is 99.01 ms; shared, every latency doubles.
    alone_latencies = [i / 1e3 for i in range(1, 101)]
    alone = [{"steps": 100, "seconds": 1.0, "latencies_s": alone_latencies},
             {"steps": 400, "seconds": 2.0, "latencies_s": []}]  # fmt: skip
    shared = [{"steps": 100, "seconds": 1.0, "latencies_s": [2 * x for x in alone_latencies]},
              {"steps": 150, "seconds": 1.5, "latencies_s": []}]  # fmt: skip
    inference, training = module.pair_slowdowns(parties, alone, shared)
    assert inference == pytest.approx(2.0)
    assert training == pytest.approx(2.0)  # 200 steps/s alone, 100 shared


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_coloc_without_cuda_fails_clearly(capsys):
    module = load_bench_script("gpu_validate", "gpu_validate_coloc_nocuda")
    assert module.main(["--coloc", "mlp:1:inference@100:1+mlp:8:training:0"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


def test_a_coloc_typo_fails_before_anything_runs():
    module = load_bench_script("gpu_validate", "gpu_validate_coloc_typo")
    with pytest.raises(module.InputError, match="two parties"):
        module.main(["--coloc", "mlp:1:training:1"])


@pytest.mark.slow
def test_a_coloc_worker_runs_a_party_on_the_cpu():
    module = load_bench_script("gpu_validate", "gpu_validate_coloc_worker")
    party = module.parse_party("mlp:1:inference@200:1", "w")
    result = module.coloc_worker(party, 0.2, "cpu", torch.float32)
    assert result["steps"] >= 1 and len(result["latencies_s"]) == result["steps"]
    assert all(x > 0 for x in result["latencies_s"])
    loop = module.coloc_worker(module.parse_party("mlp:4:training:0", "t"), 0.2, "cpu",
                               torch.float32)  # fmt: skip
    assert loop["steps"] >= 1 and loop["latencies_s"] == []
