"""``qosched gpu sim SPEC --policy NAME``: applications of several priorities sharing one GPU,
kernel by kernel, in the GPU simulator; each compared with itself running alone and judged
against its goal (``goal`` in the spec; see ``qosched.core.goals``)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from qosched.cli.outputs import output_file
from qosched.cli.progress import Display, Silent, progress_display
from qosched.gpushare.policies import create_policy, policy_names

if TYPE_CHECKING:
    from qosched.gpushare.judge import AppOutcome
    from qosched.gpushare.simulator import AppComparison


def add_gpu_sim(commands: argparse._SubParsersAction) -> None:
    """Add ``sim`` to the ``gpu`` command group's sub-commands."""
    parser = commands.add_parser(
        "sim",
        help="simulate applications sharing one GPU",
        description="Simulate applications of several priorities sharing one GPU, kernel by "
        "kernel, compare each with itself running alone, and judge it against its goal.",
    )
    parser.add_argument("spec", help="YAML: gpu, duration_s, seed and apps (see examples/)")
    parser.add_argument("--policy", required=True,
                        help=f"sharing policy: {', '.join(policy_names())}")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--trace", metavar="OUT.json",
                        help="write a Chrome/Perfetto timeline of kernels per stream")  # fmt: skip
    parser.set_defaults(run=run_sim)


def run_sim(args: argparse.Namespace) -> int:
    # Imported here, not at parse time: `qosched gpu --help` must stay fast.
    from qosched.core.trace import write_chrome_trace
    from qosched.gpushare.apps import load_apps_spec, resolved_goals, workloads
    from qosched.gpushare.judge import outcomes
    from qosched.gpushare.simulator import alone_results, compare, simulate
    from qosched.hardware import gpu

    output_file(args.trace, "--trace")
    spec = load_apps_spec(args.spec)
    policy = create_policy(args.policy)  # an unknown name fails before any estimation
    device = gpu(spec.gpu)
    apps = workloads(spec, device)
    with progress_display() as progress:
        task = progress.add_task(f"{args.policy}: setting up", total=None)
        show_setup_progress(policy, args.policy, progress, task)
        shown = RunProgress(progress, task, args.policy, [app.name for app in apps],
                            spec.duration_s)  # fmt: skip
        shared = simulate(device, apps, policy, duration_s=spec.duration_s, seed=spec.seed,
                          record=bool(args.trace), progress=shown.shared)  # fmt: skip
        alone = alone_results(device, apps, duration_s=spec.duration_s, seed=spec.seed,
                              progress=shown.alone)  # fmt: skip
    rows = compare(shared, alone, {app.name: app.request_time_s for app in apps})
    judged = outcomes(rows, resolved_goals(spec))
    result = {
        "policy": shared.policy,
        "gpu_utilization": shared.gpu_utilization,
        "wall_s": shared.wall_s,
        "gpu": device.name,
        "duration_s": spec.duration_s,
        "bandwidth_utilization": shared.bandwidth_utilization,
        "apps": app_rows(rows, judged),
        "goals_met": all(o.met for o in judged),
        "calibrated": getattr(policy, "calibrated", None),
        "setup_s": getattr(policy, "setup_s", 0.0),
    }
    if args.trace:
        write_chrome_trace(shared.spans, args.trace)
    if args.json:
        print(json.dumps(result))
        return 0
    print_comparison(
        f"{shared.policy} on {device.name}, {spec.duration_s:g} s simulated",
        rows,
        judged,
        f"SM utilisation {shared.gpu_utilization:.1%}, bandwidth "
        f"{shared.bandwidth_utilization:.1%}, simulated in {shared.wall_s:.2f} s"
        + calibration_note(policy)
        + (f"; timeline in {args.trace}" if args.trace else ""),
    )
    return 0


def show_setup_progress(policy: object, name: str, progress: Display, task: int) -> None:
    """Show on ``task`` that a self-calibrating policy is choosing its setting, and how many of
    its what-if runs of the mix have ended (seconds to a minute); without a terminal, one line
    on stderr says it, not one per run."""
    if not getattr(policy, "calibrate", False):
        return
    choosing = f"{name}: choosing its setting on a what-if of the mix"
    if isinstance(progress, Silent):
        print(f"{choosing}...", file=sys.stderr)
    progress.update(task, description=choosing)

    def show(done: int, total: int) -> None:
        if done < total:
            progress.update(task, description=choosing, total=total, completed=done,
                            unit="what-if runs")  # fmt: skip
        else:  # chosen: the run itself is next
            progress.update(task, description=f"running under {name}", total=None, unit=None)

    policy.progress = show  # type: ignore[attr-defined]


class RunProgress:
    """How far ``gpu sim``'s runs have got on one task: the shared run, then each application
    alone, each ``duration_s`` simulated, as one bar."""

    def __init__(
        self, progress: Display, task: int, policy: str, apps: Sequence[str], duration_s: float
    ) -> None:
        self.progress, self.task, self.policy = progress, task, policy
        self.order = {name: i + 1 for i, name in enumerate(apps)}
        self.duration_s = duration_s

    def _show(self, run: str, index: int, done: float) -> None:
        self.progress.update(self.task, description=run, total=len(self.order) + 1,
                             completed=index + done, unit=None)  # fmt: skip

    def shared(self, done: float) -> None:
        self._show(f"shared under {self.policy}", 0, done)

    def alone(self, name: str, done: float) -> None:
        self._show(f"{name} alone", self.order[name], done)


def calibration_note(policy: object) -> str:
    """The footer's word on the setting a self-calibrating policy adopted before the run."""
    setting = getattr(policy, "calibrated", None)
    if setting is None:
        return ""
    cost = f"{getattr(policy, 'setup_s', 0.0):.1f} s"
    if getattr(policy, "delegate", None) is not None:
        return f"; calibrated before the run ({cost}) to run `{setting}`'s rule in its place"
    return f"; calibrated to `{setting}` before the run ({cost})"


def app_rows(rows: Sequence[AppComparison], judged: Sequence[AppOutcome]) -> list[dict]:
    """``--json``'s ``apps``: every comparison field, the app's goal and whether it was met."""
    result = []
    for row, outcome in zip(rows, judged, strict=True):
        fields = finite(row.to_dict())
        fields["goal"] = outcome.goal.to_dict()
        fields["met"] = outcome.met
        result.append(fields)
    return result


def print_comparison(
    title: str, rows: Sequence[AppComparison], judged: Sequence[AppOutcome], footer: str
) -> None:
    """The readable table of applications shared against alone, each with its goal, what was
    measured for it and whether it was met (``gpu sim`` and ``gpu run``)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title)
    for column in ("app", "priority", "goal", "measured", "met", "p50 lat x", "p99 lat x",
                   "throughput x", "p99 ms", "alone p99 ms", "requests",
                   "unfinished"):  # fmt: skip
        table.add_column(column, justify="left" if column in ("app", "goal") else "right",
                         no_wrap=column == "app")  # fmt: skip
    for row, outcome in zip(rows, judged, strict=True):
        met = "-" if not outcome.goal.protected else ("met" if outcome.met else "MISSED")
        table.add_row(Text(row.name), str(row.priority), outcome.goal.describe(),
                      outcome.describe_value(), met, _x(row.p50_latency_ratio),
                      _x(row.p99_latency_ratio), _x(row.throughput_ratio),
                      f"{row.p99_latency_s * 1e3:.3f}", f"{row.alone_p99_latency_s * 1e3:.3f}",
                      str(row.completed), str(row.unfinished))  # fmt: skip
    console = Console(width=max(Console().width, 150))
    console.print(table)
    console.print(footer)


def _x(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3f}"


def finite(row: dict[str, object]) -> dict[str, object]:
    # JSON has no NaN: an app that completed no request has no latency ratio.
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
