"""Figures for pods over the trace's clock: the cluster's GPUs, services' goals and training."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib import rcParams
from matplotlib.figure import Figure  # no pyplot: no global state, no display needed

from qosched.cluster.pods.replay import ReplayRun

HOUR = 3600.0
FILE = "pods_over_time.png"


def plot_pod_runs(runs: Sequence[ReplayRun], out_dir: str | Path, title: str = "") -> Path:
    """Write ``pods_over_time.png`` into ``out_dir``, one line per policy in each of six
    panels: GPUs allocated, fragmented and busy (as shares of the cluster's), the share of
    live services meeting their goal, training jobs running, and the run's summary bars."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(16, 8.5))
    axes = fig.subplots(2, 3)
    colors = rcParams["axes.prop_cycle"].by_key()["color"]
    panels = (
        (axes[0][0], "GPUs allocated / cluster GPUs", lambda s, g: s.allocated_gpus / g),
        (axes[0][1], "GPUs fragmented / cluster GPUs", lambda s, g: s.fragmented_gpus / g),
        (axes[0][2], "GPUs busy / cluster GPUs (utilization)", lambda s, g: s.busy_gpus / g),
        (
            axes[1][0],
            "live services meeting their goal",
            lambda s, g: s.services_meeting / s.services_live if s.services_live else 1.0,
        ),
        (axes[1][1], "training jobs running", lambda s, g: s.training_running),
    )
    names = [run.policy for run in runs]
    if len(set(names)) < len(names):  # one policy under several settings: name the settings
        names = [f"{r.policy} ({r.sharing}, {r.colocation}, {r.queue})" for r in runs]
    for ax, label, value in panels:
        for color, run, name in zip(colors, runs, names, strict=False):
            times = [s.time_s / HOUR for s in run.samples]
            values = [value(s, run.cluster_gpus or 1) for s in run.samples]
            ax.step(times, values, where="post", label=name, color=color, lw=1)
        ax.set_xlabel("time (hours)")
        ax.set_title(label)
        ax.legend(fontsize=8)
    for ax in (axes[0][0], axes[0][1], axes[0][2], axes[1][0]):
        ax.set_ylim(0, 1.05)

    ax = axes[1][2]
    width = 0.8 / 2
    for i, (key, label) in enumerate(
        (("windows_met_ratio", "service windows met"), ("deadline_satisfactory_ratio", "DSR"))
    ):
        values = []
        for run in runs:
            part = run.services_json() if key == "windows_met_ratio" else run.training_json()
            values.append((part or {}).get(key) or 0.0)
        ax.bar([j + i * width for j in range(len(runs))], values, width, label=label)
    ax.set_xticks([j + width / 2 for j in range(len(runs))], names, fontsize=7)
    ax.set_ylim(0, 1.1)
    ax.set_title(f"over the run (windows of {runs[0].window_s:g} s)" if runs else "")
    ax.legend(fontsize=8)

    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = out_dir / FILE
    fig.savefig(path, dpi=100)
    return path
