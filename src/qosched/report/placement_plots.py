"""A picture of a placement plan: one row per tenant, its units coloured by processor.

Each unit is a bar as long as its cost on the processor the plan gives it, so a row reads as the
request's sequential timeline; a switch between processors is a black tick (its copy costs
``transfer_s``, drawn as a gap of that length).
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure  # no pyplot: no global state, no display needed
from matplotlib.patches import Patch

from qosched.placement.ir import PlacementPlan, Problem

COLORS = {"cpu": "#4c72b0", "gpu": "#dd8452"}


def plot_plan(problem: Problem, plan: PlacementPlan, path: str | Path, title: str = "") -> Path:
    """Write the picture of ``plan`` on ``problem`` to ``path`` (PNG, SVG, ... by suffix)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = len(problem.tenants)
    fig = Figure(figsize=(11, 1.0 + 0.7 * rows))
    ax = fig.subplots()
    for row, (tenant, planned) in enumerate(zip(problem.tenants, plan.tenants, strict=True)):
        y = rows - 1 - row
        x = tenant.input_to_gpu_s if planned.assignment[0] == "gpu" else 0.0
        for i, processor in enumerate(planned.assignment):
            cost = tenant.cpu_s[i] if processor == "cpu" else tenant.gpu_s[i]
            ax.barh(
                y,
                cost * 1e3,
                left=x * 1e3,
                height=0.6,
                color=COLORS[processor],
                edgecolor="white",
                linewidth=0.5,
            )
            x += cost
            if i + 1 < len(planned.assignment) and planned.assignment[i + 1] != processor:
                ax.plot([x * 1e3, x * 1e3], [y - 0.4, y + 0.4], color="black", linewidth=1.2)
                x += tenant.transfer_s[i]
    ax.set_yticks(range(rows), [t.name for t in reversed(problem.tenants)])
    ax.set_xlabel("one request's units in order, each as long as its cost (ms)")
    ax.legend(
        handles=[Patch(color=c, label=p) for p, c in COLORS.items()], loc="lower right", fontsize=8
    )
    rate = f"{plan.throughput_rps:.1f} requests/s per tenant predicted"
    ax.set_title(f"{title}: {rate}" if title else f"{plan.method}: {rate}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path
