"""``qosched gpu ...``: kernel-level GPU sharing. ``gpu estimate MODEL --gpu NAME`` sums up the
kernels a model launches on a catalog GPU per kernel class (``--kernels`` lists each one with its
resource needs and duration), estimated without running the model.

Other modules add their commands to the group's sub-parsers (see ``add_gpu_group``).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.table import Table

    from qosched.gpushare.estimate import ModelEstimate
    from qosched.gpushare.kernel import Kernel

_GROUP_ATTR = "_qosched_gpu_commands"


def add_gpu_group(groups: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """The ``gpu`` group's sub-parsers, creating the group on first call; later calls (from
    another module adding e.g. ``gpu sim``) get the same sub-parsers back."""
    existing = getattr(groups, _GROUP_ATTR, None)
    if existing is not None:
        return existing
    parser = groups.add_parser("gpu", help="share one GPU between applications by priority")
    commands = parser.add_subparsers(dest="command", required=True, metavar="ACTION")
    setattr(groups, _GROUP_ATTR, commands)
    return commands


def add_commands(groups: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """Create the ``gpu`` group with ``estimate``; return its sub-parsers for more commands."""
    commands = add_gpu_group(groups)
    parser = commands.add_parser(
        "estimate",
        help="a model's kernels, resources and durations on a GPU, without running it",
        description="List the kernels a model launches on a catalog GPU, their resource needs "
        "and durations, estimated without running the model.",
    )
    parser.add_argument("model", help="a zoo model name or package.module:factory")
    parser.add_argument("--gpu", required=True, help="catalog GPU name (T4, V100, A100, ...)")
    parser.add_argument("--batch", type=int, default=1, help="batch size (zoo models; default 1)")
    parser.add_argument(
        "--dtype", choices=("float32", "float16"), default="float32", help="precision costed"
    )
    parser.add_argument(
        "--kernels",
        action="store_true",
        help="list every kernel (grid, block, registers, occupancy, ...), not only the totals "
        "per kernel class",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object (every kernel)")
    parser.set_defaults(run=run_estimate)
    return commands


def run_estimate(args: argparse.Namespace) -> int:
    # Imported here: estimating captures the model with PyTorch, which parsing must not load.
    from qosched.gpushare.estimate import estimate_model

    result = estimate_model(args.model, args.gpu, batch=args.batch, dtype=args.dtype)
    if args.json:
        print(json.dumps(result.to_dict()))
        return 0
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # piped: wide enough for every column
    console.print(_kernel_table(result) if args.kernels else _class_table(result))
    console.print(
        f"total {result.total_time_s * 1e3:.3f} ms (one stream, kernels back to back); memory "
        f"{result.memory_bytes / 2**20:.1f} MiB = parameters {result.param_bytes / 2**20:.1f} + "
        f"inputs + peak activations {result.activation_bytes / 2**20:.1f}"
        + ("" if args.kernels else "; --kernels lists each kernel")
    )
    return 0


def _title(result: ModelEstimate) -> str:
    return f"{result.model} on {result.gpu}, batch {result.batch}, {result.dtype}"


def _class_table(result: ModelEstimate) -> Table:
    """The model's kernels summed per kernel class, the longest first, with the model's totals
    in the footer: what ``--kernels`` lists one row per kernel, a few rows long."""
    from rich.table import Table

    classes = result.kernel_classes or ("",) * len(result.kernels)
    groups: dict[str, list[Kernel]] = {}
    for kernel, cls in zip(result.kernels, classes, strict=True):
        groups.setdefault(cls or "-", []).append(kernel)
    total_s = sum(k.time_s for k in result.kernels)
    table = Table(title=_title(result), show_footer=True)
    columns = [
        ("class", "all"),
        ("kernels", str(len(result.kernels))),
        ("compute-bound", str(sum(k.bound == "compute" for k in result.kernels))),
        ("GFLOP", f"{sum(k.flops for k in result.kernels) / 1e9:.3f}"),
        ("MB", f"{sum(k.bytes for k in result.kernels) / 1e6:.2f}"),
        ("time us", f"{total_s * 1e6:.1f}"),
        ("share", "100.0%" if total_s > 0 else "-"),
    ]
    for header, footer in columns:
        table.add_column(header, footer=footer, justify="left" if header == "class" else "right")
    ranked = sorted(groups.items(), key=lambda item: -sum(k.time_s for k in item[1]))
    for cls, kernels in ranked:
        time_s = sum(k.time_s for k in kernels)
        table.add_row(
            cls,
            str(len(kernels)),
            str(sum(k.bound == "compute" for k in kernels)),
            f"{sum(k.flops for k in kernels) / 1e9:.3f}",
            f"{sum(k.bytes for k in kernels) / 1e6:.2f}",
            f"{time_s * 1e6:.1f}",
            f"{time_s / total_s:.1%}" if total_s > 0 else "-",
        )
    return table


def _kernel_table(result: ModelEstimate) -> Table:
    """Every kernel in launch order, the model's totals in the footer (``--kernels``)."""
    from rich.table import Table

    table = Table(
        title=_title(result),
        show_footer=True,
    )
    total_flops = sum(k.flops for k in result.kernels)
    total_bytes = sum(k.bytes for k in result.kernels)
    columns = [
        ("operator", f"{len(result.kernels)} kernels"),
        ("kernel", ""),
        ("class", ""),
        ("grid", ""),
        ("block", ""),
        ("regs", ""),
        ("shared B", ""),
        ("SMs", ""),
        ("occ.", ""),
        ("GFLOP", f"{total_flops / 1e9:.3f}"),
        ("MB", f"{total_bytes / 1e6:.2f}"),
        ("bound", ""),
        ("time us", f"{result.total_time_s * 1e6:.1f}"),
    ]
    for header, footer in columns:
        numeric = header not in ("operator", "kernel", "class", "grid", "block", "bound")
        table.add_column(header, footer=footer, justify="right" if numeric else "left")
    classes = result.kernel_classes or ("",) * len(result.kernels)
    for k, cls in zip(result.kernels, classes, strict=True):
        table.add_row(
            k.op,
            k.name,
            cls,
            "x".join(map(str, k.grid)),
            "x".join(map(str, k.block)),
            str(k.registers_per_thread),
            str(k.shared_bytes_per_block),
            str(k.sms),
            f"{k.occupancy:.2f}",
            f"{k.flops / 1e9:.3f}",
            f"{k.bytes / 1e6:.2f}",
            k.bound,
            f"{k.time_s * 1e6:.1f}",
        )
    return table
