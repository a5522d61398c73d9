"""Evidence for GPU sharing by priority: the interference score's calibration, and qosched's
policy against the baselines on standard mixes.

    python bench/gpushare_evidence.py calibrate      # seconds: fit the score to the simulator
    python bench/gpushare_evidence.py mixes [--quick] # minutes: every policy on every mix
    python bench/gpushare_evidence.py mixes --online  # the same, fggr's online rule alone
    python bench/gpushare_evidence.py mixes --runs 4  # each mix on 4 draws of its arrivals
    python bench/gpushare_evidence.py sweep [--quick] # a minute: fggr's constants, one at a time

calibrate: random pairs of a higher-priority kernel (followed on its stream by a kernel as long
that needs every SM) and a candidate lower-priority kernel on an A100; the simulator measures
the extra time the candidate costs the protected stream (``simulator.pair_slowdown``), the
score's four features are computed from the static estimates only, and non-negative least
squares fits the weights on 600 pairs; the fit is checked on 300 other pairs (Spearman rank
correlation, mean absolute error, and how often the score and the simulator agree that a pair
is under the 5 % threshold).

mixes: the six example mixes (examples/gpu_apps*.yaml, examples/gpu_mix_*.yaml) under every
registered policy; prints a Markdown table of every app's ratios against itself alone, its goal
and whether it was met, whether each policy meets every goal, and the rules (a)-(c) of
``gpushare.judge`` fggr breaks (none expected); writes docs/results/img/gpushare_tradeoff.png
(high-priority p99 latency ratio against low-priority throughput ratio, one marker per policy
and mix). ``--runs K`` runs every mix on K draws of its arrivals (the spec's seed, then + 1000
each): the tables above are the first draw's, then per mix each policy's median and range and
how often it met every goal, and the figure marks each policy's median with bars to its range.

sweep: fggr on examples/gpu_apps.yaml with each of its constants moved away from its default
(the others at their defaults), to show what each trades; calibration is off there, so that
the constant given is the one that runs.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib import rcParams
from matplotlib.figure import Figure  # no pyplot: no global state, no display needed
from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter
from scipy.optimize import nnls
from scipy.stats import spearmanr

# Run ``k`` of a mix draws its arrivals from its seed + ``RUN_STRIDE * k``, as the random mixes do
# (a sibling script: bench/ is on sys.path when these run as scripts).
from gpushare_mixes import RUN_STRIDE
from qosched.gpushare.apps import load_apps_spec, resolved_goals, workloads
from qosched.gpushare.estimate import estimate_model
from qosched.gpushare.interference import CALIBRATED, FEATURES, InterferenceModel, features
from qosched.gpushare.judge import AppOutcome, rule_violations
from qosched.gpushare.judge import outcomes as judge_outcomes
from qosched.gpushare.kernel import Kernel
from qosched.gpushare.policies import create_policy, policy_names
from qosched.gpushare.simulator import (
    AppComparison,
    alone_results,
    compare,
    pair_slowdown,
    simulate,
)
from qosched.hardware import Processor, gpu

ROOT = Path(__file__).resolve().parents[1]


def random_kernel(rng: np.random.Generator, device: Processor, name: str) -> Kernel:
    """A kernel of random size, duration, bandwidth share and number of waves."""
    sm_count = device.sm_count or 1
    sms = int(rng.integers(4, sm_count + 1))
    time_s = float(10 ** rng.uniform(-5, -3))  # 10 us .. 1 ms
    share = float(rng.uniform(0.02, 0.95))
    waves = int(rng.integers(1, 9))
    # 256-thread blocks at occupancy 0.25 on a 64-warp SM: 2 resident blocks per SM.
    return Kernel(
        name=name,
        op=name,
        grid=(sms * 2 * waves, 1, 1),
        block=(256, 1, 1),
        registers_per_thread=128,
        shared_bytes_per_block=0,
        sms=sms,
        occupancy=0.25,
        flops=1.0,
        bytes=share * device.memory_bandwidth * time_s,
        bound="memory" if share >= 0.5 else "compute",
        time_s=time_s,
    )


def probe(first: Kernel, device: Processor) -> Kernel:
    """The protected stream's next kernel: as long as ``first``, every SM, one wave, no DRAM
    traffic, so the extra time it adds is the wait for SMs the candidate holds."""
    sm_count = device.sm_count or 1
    return Kernel("next", "next", (2 * sm_count, 1, 1), (256, 1, 1), 128, 0, sm_count, 0.25,
                  1.0, 0.0, "compute", first.time_s)  # fmt: skip


def pairs(n: int, seed: int, device: Processor) -> tuple[np.ndarray, np.ndarray]:
    """Features and simulated slowdowns of ``n`` random (protected pair, candidate) cases."""
    rng = np.random.default_rng(seed)
    rows, truth = [], []
    for i in range(n):
        first = random_kernel(rng, device, f"p{i}")
        candidate = random_kernel(rng, device, f"c{i}")
        rows.append(features(candidate, [first], device))
        truth.append(pair_slowdown(device, [first, probe(first, device)], candidate))
    return np.asarray(rows), np.asarray(truth)


def calibrate() -> InterferenceModel:
    device = gpu("A100")
    x_fit, y_fit = pairs(600, 1, device)
    weights, _ = nnls(x_fit, y_fit)
    model = InterferenceModel(*(float(round(w, 3)) for w in weights))
    x_test, y_test = pairs(300, 2, device)
    print(f"fitted on 600 random pairs on {device.name}, checked on 300 others\n")
    print("| feature | weight (fitted) | weight (in CALIBRATED) |")
    print("|---|---|---|")
    for name, w, current in zip(FEATURES, model.weights, CALIBRATED.weights, strict=True):
        print(f"| {name} | {w:.3f} | {current:.3f} |")
    for label, candidate in (("fitted", model), ("CALIBRATED", CALIBRATED)):
        predicted = x_test @ np.asarray(candidate.weights)
        rho = spearmanr(predicted, y_test).statistic
        mae = float(np.mean(np.abs(predicted - y_test)))
        agree = float(np.mean((predicted <= 0.05) == (y_test <= 0.05)))
        print(
            f"\n{label}: Spearman {rho:.3f}, mean absolute error {mae:.3f} "
            f"(simulated slowdowns: median {np.median(y_test):.3f}, mean {np.mean(y_test):.3f}), "
            f"same side of the 0.05 threshold in {agree:.1%} of pairs"
        )
    return model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("calibrate", "mixes", "sweep"))
    parser.add_argument("--quick", action="store_true", help="shorter simulated time")
    parser.add_argument(
        "--online", action="store_true", help="mixes: fggr's online rule alone (no calibration)"
    )
    parser.add_argument(
        "--runs", type=int, default=1, help="mixes: draws of each mix's arrivals (default 1)"
    )
    args = parser.parse_args(argv)
    if args.what == "calibrate":
        calibrate()
    elif args.what == "sweep":
        sweep(quick=args.quick)
    else:
        mixes(quick=args.quick, online=args.online, runs=args.runs)
    return 0


MIXES = (
    "gpu_apps_small.yaml",
    "gpu_apps_kernels.yaml",
    "gpu_apps.yaml",
    "gpu_mix_bert.yaml",
    "gpu_mix_three.yaml",
    "gpu_mix_four.yaml",
)
HP_P99_TARGET = 1.10  # the default goal of the most important app, for the figure


@dataclass(frozen=True)
class Outcome:
    """One mix under one policy: the worst p99 latency ratio over the apps with a goal (in the
    examples, the most important app), and the throughput ratio of the lowest-priority apps
    added up (each alone would have the whole GPU, so two best-effort apps sharing it can
    reach 1.0 together)."""

    mix: str
    policy: str
    run: int
    hp_p99: float
    lp_throughput: float
    rows: tuple[AppComparison, ...]
    utilization: float
    judged: tuple[AppOutcome, ...]
    #: The setting a self-calibrating policy adopted, and what its setup cost (wall seconds).
    calibrated: str | None = None
    setup_s: float = 0.0

    @property
    def meets(self) -> bool:
        """Every app met its goal (as stated in the spec, or the default for its priority)."""
        return all(app.met for app in self.judged)


def run_mix(
    path: Path, duration_s: float | None, estimates: dict, *, online: bool = False, run: int = 0
) -> list[Outcome]:
    """Every policy on the mix, on run ``run``'s draw of the arrivals (run 0: the spec's seed)."""
    spec = load_apps_spec(path)
    seed = spec.seed + RUN_STRIDE * run
    device = gpu(spec.gpu)

    def estimate(model: str, gpu_: Processor, *, batch: int, dtype: str):
        key = (model, gpu_.name, batch, dtype)
        if key not in estimates:
            estimates[key] = estimate_model(model, gpu_, batch=batch, dtype=dtype)
        return estimates[key]

    apps = workloads(spec, device, estimate=estimate)
    duration = duration_s or spec.duration_s
    alone = alone_results(device, apps, duration_s=duration, seed=seed)
    lowest = min(app.priority for app in apps)
    goals = resolved_goals(spec)
    times = {app.name: app.request_time_s for app in apps}
    outcomes = []
    for name in policy_names():
        options = {"calibrate": False} if online and name == "fggr" else {}
        policy = create_policy(name, **options)
        result = simulate(device, apps, policy, duration_s=duration, seed=seed)
        rows = compare(result, alone, times)
        judged = judge_outcomes(rows, goals)
        outcomes.append(
            Outcome(
                mix=path.stem,
                policy=name,
                run=run,
                hp_p99=max(
                    r.p99_latency_ratio
                    for r, g in zip(rows, judged, strict=True)
                    if g.goal.protected
                ),
                lp_throughput=sum(r.throughput_ratio for r in rows if r.priority == lowest),
                rows=rows,
                utilization=result.gpu_utilization,
                judged=judged,
                calibrated=getattr(policy, "calibrated", None),
                setup_s=getattr(policy, "setup_s", 0.0),
            )
        )
    return outcomes


def mixes(*, quick: bool, online: bool = False, runs: int = 1) -> None:
    estimates: dict = {}
    duration = 0.3 if quick else None
    everything: list[Outcome] = []
    for mix in MIXES:
        outcomes = run_mix(ROOT / "examples" / mix, duration, estimates, online=online)
        everything += outcomes
        print(f"\n### {mix}\n")
        print("| policy | app (priority) | goal | met | p50 latency x | p99 latency x | "
              "throughput x |")  # fmt: skip
        print("|---|---|---|---|---|---|---|")
        for outcome in outcomes:
            for row, app in zip(outcome.rows, outcome.judged, strict=True):
                met = "yes" if app.met else "**no**"
                print(f"| {outcome.policy} | {row.name} ({row.priority}) | "
                      f"{app.goal.describe()} | {met} | {row.p50_latency_ratio:.3f} | "
                      f"{row.p99_latency_ratio:.3f} | {row.throughput_ratio:.3f} |")  # fmt: skip
        print("\n| policy | worst p99 x of apps with a goal | low-priority throughput x | SM use "
              "| every goal met |")  # fmt: skip
        print("|---|---|---|---|---|")
        for o in outcomes:
            print(f"| {o.policy} | {o.hp_p99:.3f} | {o.lp_throughput:.3f} | "
                  f"{o.utilization:.0%} | {'yes' if o.meets else 'no'} |")  # fmt: skip
        for o in outcomes:
            if o.calibrated:
                print(f"\n{o.policy} calibrated: {o.calibrated} ({o.setup_s:.1f} s of setup)")
        broken = rule_violations({o.policy: o.judged for o in outcomes})
        print(f"\nrules (a)-(c) fggr breaks on {mix}: {'; '.join(broken) or 'none'}")
        if runs > 1:
            for run in range(1, runs):
                print(f"  {mix}: run {run + 1} of {runs}", file=sys.stderr, flush=True)
                more = run_mix(ROOT / "examples" / mix, duration, estimates, online=online, run=run)
                outcomes += more
                everything += more
            print_runs(mix, outcomes, runs)
    if online:
        return  # the figure is the default fggr's
    out = plot(everything, ROOT / "docs" / "results" / "img" / "gpushare_tradeoff.png")
    print(f"\nfigure: {out.relative_to(ROOT)}")


def print_runs(mix: str, outcomes: list[Outcome], runs: int) -> None:
    """A mix's ``runs`` draws of its arrivals: each policy's median and range, and how often it
    met every goal; fggr's broken rules and adopted setting per run."""
    print(f"\n{mix}, {runs} runs (arrival seeds: the spec's, then + {RUN_STRIDE} each):\n")
    print("| policy | worst p99 x of apps with a goal, median (range) | low-priority throughput "
          "x, median (range) | every goal met |")  # fmt: skip
    print("|---|---|---|---|")
    for policy in dict.fromkeys(o.policy for o in outcomes):
        mine = [o for o in outcomes if o.policy == policy]
        hp, lp = [o.hp_p99 for o in mine], [o.lp_throughput for o in mine]
        print(f"| {policy} | {np.median(hp):.3f} ({min(hp):.3f}..{max(hp):.3f}) | "
              f"{np.median(lp):.3f} ({min(lp):.3f}..{max(lp):.3f}) | "
              f"{sum(o.meets for o in mine)} of {len(mine)} |")  # fmt: skip
    for run in range(runs):
        these = [o for o in outcomes if o.run == run]
        broken = rule_violations({o.policy: o.judged for o in these})
        adopted = ", ".join(f"{o.policy}: {o.calibrated}" for o in these if o.calibrated)
        print(f"\n- run {run + 1}: rules (a)-(c) fggr breaks: {'; '.join(broken) or 'none'}"
              + (f" ({adopted})" if adopted else ""))  # fmt: skip


SWEEP = (
    {},
    {"slack_fraction": 0.5},
    {"safe_fraction": 0.25},
    {"safe_fraction": 1.0},
    {"exposure": 0.0},
    {"exposure": 0.2},
    {"max_wait_s": 0.005},
    {"max_wait_s": 0.1},
    {"trust_step": 0.0},
)


def sweep(*, quick: bool) -> None:
    spec = load_apps_spec(ROOT / "examples" / "gpu_apps.yaml")
    device = gpu(spec.gpu)
    apps = workloads(spec, device)
    duration = 0.3 if quick else spec.duration_s
    alone = alone_results(device, apps, duration_s=duration, seed=spec.seed)
    lowest = min(app.priority for app in apps)
    print("| fggr options | high-priority p99 x | low-priority throughput x | SM use |")
    print("|---|---|---|---|")
    for options in SWEEP:
        policy = create_policy("fggr", calibrate=False, **options)
        result = simulate(device, apps, policy, duration_s=duration, seed=spec.seed)
        rows = compare(result, alone)
        hp = max(r.p99_latency_ratio for r in rows if r.priority > lowest)
        lp = sum(r.throughput_ratio for r in rows if r.priority == lowest)
        label = ", ".join(f"{k}={v}" for k, v in options.items()) or "defaults"
        print(f"| {label} | {hp:.3f} | {lp:.3f} | {result.gpu_utilization:.0%} |")


def plot(outcomes: list[Outcome], path: Path) -> Path:
    """High-priority p99 ratio against low-priority throughput ratio, a panel per mix: each
    policy's median over the runs, with bars to their extremes."""
    mixes_seen = list(dict.fromkeys(o.mix for o in outcomes))
    policies = list(dict.fromkeys(o.policy for o in outcomes))
    colors = rcParams["axes.prop_cycle"].by_key()["color"]
    markers = "osD^vP*X"
    columns = min(3, len(mixes_seen))
    rows = -(-len(mixes_seen) // columns)
    fig = Figure(figsize=(4.6 * columns, 3.9 * rows + 0.8))
    grid = fig.subplots(rows, columns, squeeze=False)
    axes = grid.ravel()
    for ax in axes[len(mixes_seen) :]:
        ax.set_visible(False)
    for ax, mix in zip(axes, mixes_seen, strict=False):
        ax.axhspan(0.9, HP_P99_TARGET, xmin=0, xmax=1, color="0.92", zorder=0)
        ax.axhline(HP_P99_TARGET, color="0.5", lw=0.8, ls="--")
        for i, policy in enumerate(policies):
            mine = [o for o in outcomes if o.mix == mix and o.policy == policy]
            x = np.array([o.lp_throughput for o in mine])
            y = np.array([o.hp_p99 for o in mine])
            mx, my = np.median(x), np.median(y)
            ax.errorbar(mx, my, xerr=[[mx - x.min()], [x.max() - mx]],
                        yerr=[[my - y.min()], [y.max() - my]], color=colors[i % len(colors)],
                        marker=markers[i % len(markers)], markersize=8, capsize=2, lw=1,
                        linestyle="", label=policy, zorder=3)  # fmt: skip
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_title(mix, fontsize=10)
        ax.set_xlabel("low-priority throughput / alone")
        ax.set_xlim(0, 1.1)
    for ax in grid[:, 0]:
        ax.set_ylabel("p99 latency / alone of the apps with a goal (log)", fontsize=9)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(policies), fontsize=9)
    runs = len({o.run for o in outcomes})
    spread = (f"; median of {runs} draws of the arrivals, bars: their range" if runs > 1
              else "")  # fmt: skip
    fig.suptitle(f"default goal of the most important app: p99 <= {HP_P99_TARGET}x alone "
                 f"(shaded){spread}", fontsize=10)  # fmt: skip
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


if __name__ == "__main__":
    sys.exit(main())
