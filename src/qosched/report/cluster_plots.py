"""Figures for cluster simulations: deadline satisfaction, JCT CDF, workers allocated over time."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib import rcParams
from matplotlib.figure import Figure  # no pyplot: no global state, no display needed

from qosched.cluster.metrics import summarize
from qosched.cluster.simulator import SimResult

HOUR = 3600.0


def plot_cluster_runs(results: Sequence[SimResult], out_dir: str | Path, title: str = "") -> Path:
    """Write ``cluster_summary.png`` (three panels) into ``out_dir``; return its path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summaries = [summarize(r) for r in results]
    fig = Figure(figsize=(16, 4.6))
    ax_dsr, ax_cdf, ax_util = fig.subplots(1, 3)
    colors = rcParams["axes.prop_cycle"].by_key()["color"]

    names = [s.policy for s in summaries]
    ratios = [s.deadline_satisfactory_ratio or 0.0 for s in summaries]
    bars = ax_dsr.bar(names, ratios, color=colors[: len(names)])
    for bar, summary in zip(bars, summaries, strict=True):
        label = f"{bar.get_height():.0%}"
        if summary.declined:
            label += f"\n{summary.declined} declined"
        ax_dsr.annotate(
            label,
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax_dsr.set_ylim(0, 1.15)
    ax_dsr.set_ylabel("deadlines met / jobs with a deadline")
    ax_dsr.set_title("Deadline satisfactory ratio")

    for color, result in zip(colors, results, strict=False):
        jcts = np.sort([o.jct_s / HOUR for o in result.outcomes if o.jct_s is not None])
        if len(jcts):
            ax_cdf.step(
                jcts,
                np.arange(1, len(jcts) + 1) / len(jcts),
                where="post",
                label=result.policy,
                color=color,
            )
    ax_cdf.set_xscale("log")
    ax_cdf.set_xlabel("job completion time (hours, log scale)")
    ax_cdf.set_ylabel("fraction of finished jobs")
    ax_cdf.set_title("JCT CDF (declined jobs excluded)")
    ax_cdf.legend(fontsize=8)

    for color, result in zip(colors, results, strict=False):
        timeline = result.allocation_timeline
        if timeline:
            times = [t / HOUR for t, _ in timeline]
            used = [g / result.cluster.total_workers for _, g in timeline]
            ax_util.step(times, used, where="post", label=result.policy, color=color, lw=1)
    ax_util.set_ylim(0, 1.05)
    ax_util.set_xlabel("time (hours)")
    unit = results[0].cluster.unit_plural if results else "workers"
    ax_util.set_ylabel(f"{unit} allocated / {unit} in cluster")
    ax_util.set_title(f"{unit} allocated over time")
    ax_util.legend(fontsize=8)

    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = out_dir / "cluster_summary.png"
    fig.savefig(path, dpi=110)
    return path
