"""``qosched gpu estimate``: the JSON contract of docs/contracts.md, the table, clear errors."""

from __future__ import annotations

import argparse
import json

import pytest

from json_contracts import assert_contract
from qosched.cli.gpu import add_gpu_group
from qosched.cli.main import main


def test_json_has_the_contract_fields(capsys):
    assert main(["gpu", "estimate", "mlp", "--gpu", "a100", "--batch", "8", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert_contract("gpu-estimate", result)
    assert (result["model"], result["gpu"]) == ("mlp", "A100-SXM4-80GB")
    assert result["kernels"]
    assert result["total_time_s"] == pytest.approx(sum(k["time_s"] for k in result["kernels"]))


def test_float16_json_is_faster(capsys):
    main(["gpu", "estimate", "mlp", "--gpu", "h100", "--batch", "4096", "--json"])
    fp32 = json.loads(capsys.readouterr().out)
    main(
        [
            "gpu",
            "estimate",
            "mlp",
            "--gpu",
            "h100",
            "--batch",
            "4096",
            "--dtype",
            "float16",
            "--json",
        ]
    )
    fp16 = json.loads(capsys.readouterr().out)
    assert fp16["dtype"] == "float16" and fp16["total_time_s"] < fp32["total_time_s"]


def test_table_shows_kernels_and_totals(capsys):
    assert main(["gpu", "estimate", "mlp", "--gpu", "t4"]) == 0
    out = capsys.readouterr().out
    assert "gemm_gemv" in out and "total" in out and "MiB" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope", "--gpu", "a100"], "unknown model 'nope'"),
        (["mlp", "--gpu", "k80"], "known GPUs: A100-SXM4-80GB"),
        (["mlp", "--gpu", "a100", "--batch", "0"], "batch must be a whole number in [1, 65,536]"),
    ],
)
def test_bad_input_exits_2_naming_the_known_values(capsys, args, message):
    assert main(["gpu", "estimate", *args]) == 2
    assert message in capsys.readouterr().err


def test_gpu_group_can_be_extended_by_another_module():
    parser = argparse.ArgumentParser()
    groups = parser.add_subparsers(dest="group")
    first = add_gpu_group(groups)
    assert add_gpu_group(groups) is first
    first.add_parser("sim").set_defaults(run=lambda args: 0)
    assert parser.parse_args(["gpu", "sim"]).command == "sim"
