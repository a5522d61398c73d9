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


def _rows(out: str) -> tuple[list[str], list[list[str]], list[str]]:
    """A printed table's header, body rows and footer, as stripped cells."""
    lines = [line for line in out.splitlines() if line.startswith(("┃", "│"))]
    cells = [[c.strip() for c in line.strip("┃│").split("┃" if "┃" in line else "│")]
             for line in lines]  # fmt: skip
    return cells[0], cells[1:-1], cells[-1]


@pytest.mark.parametrize("model", ["mlp", "resnet"])
def test_default_output_is_a_summary_whose_totals_are_the_kernel_tables(capsys, model):
    assert main(["gpu", "estimate", model, "--gpu", "t4", "--kernels"]) == 0
    header, kernels, kernel_footer = _rows(capsys.readouterr().out)
    assert main(["gpu", "estimate", model, "--gpu", "t4"]) == 0
    out = capsys.readouterr().out
    columns, classes, footer = _rows(out)
    assert columns == ["class", "kernels", "compute-bound", "GFLOP", "MB", "time us", "share"]
    col = {name: i for i, name in enumerate(header)}
    assert len(out.splitlines()) <= 10 + len(classes)  # not a line per kernel
    assert (
        footer[:2] == ["all", str(len(kernels))] and kernel_footer[0] == f"{len(kernels)} kernels"
    )
    # Each class's row sums the --kernels rows of that class (printed values: rounding aside).
    by_class = {row[0]: row for row in classes}
    assert set(by_class) == {k[col["class"]] for k in kernels}
    for cls, row in [*by_class.items(), ("all", footer)]:
        mine = [k for k in kernels if cls in ("all", k[col["class"]])]
        assert int(row[1]) == len(mine)
        assert int(row[2]) == sum(k[col["bound"]] == "compute" for k in mine)
        for name, unit in (("GFLOP", 1e-3), ("MB", 1e-2), ("time us", 1e-1)):
            # Each printed value is off by at most half its last digit.
            total = sum(float(k[col[name]]) for k in mine)
            slack = unit / 2 * (len(mine) + 1)
            assert float(row[columns.index(name)]) == pytest.approx(total, abs=slack)
    # The footers of both tables agree exactly: the same totals, once summed, once listed.
    for name in ("GFLOP", "MB", "time us"):
        assert footer[columns.index(name)] == kernel_footer[col[name]]
    shares = [float(row[-1].rstrip("%")) for row in classes]
    assert sum(shares) == pytest.approx(100, abs=0.05 * len(shares) + 0.01)
    assert "total" in out and "MiB" in out and "--kernels" in out


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
