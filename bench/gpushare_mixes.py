"""GPU sharing judged on mixes nobody wrote by hand: seeded random mixes, every registered policy.

    python bench/gpushare_mixes.py [--seeds 0:40] [--kernels-only] [--online] [--runs K]
                                   [--estimate-error E] [--json OUT]

Each seed draws one mix on an A100 (``random_mix``): 2-5 apps; each a small zoo model (mlp,
resnet, mobilenet, bert at batch 1-8, kernels estimated without running it) or 1-6 explicit
random kernels (4-108 SMs, 10 us - 1 ms, 2-95 % of the DRAM bandwidth, 1-8 waves); open loop
(Poisson, loading the GPU 3-60 % alone) or closed loop; priorities drawn from 0-3; goals: the
most important app a p99 goal (1.1-1.5x alone, or an absolute p99 of 1.5-4x its request time),
the others best effort, a throughput share (0.2-0.8), a rate (for open loop, 0.5-1x what it is
offered) or a loose p99 goal (1.5-3x). The simulated time gives the most important app about
150 requests (at most 0.25 s).

Every mix runs under every registered policy (``gpushare.mixes.judge_mix``). Printed (Markdown):
the share of mixes where each policy meets every goal, and where it meets the protected goals
(those not best effort); the mixes where ``fggr`` breaks a rule (a)-(c) of
``gpushare.judge``, each with the other registered policies that would keep every rule there if
judged as ``fggr`` is (the rules hold each app to the best policy for it, so where apps conflict
no single policy may keep them all), and how many mixes some policy keeps every rule on; and,
on mixes where ``fggr`` meets the protected goals, its throughput of every other app against
the best policy that also meets them.

A mix is judged on one run: one draw of its arrivals, and a p99 of about 150 requests is close
to their maximum, so whether a policy meets a goal there is partly the luck of that draw, for
``fggr`` and for the policies it is held to alike. ``--runs K`` judges every mix on K draws of
its arrivals (the mix's own seed, then ``seed + 1000 k``) and reports every share over the
runs, and for each mix in how many of its runs ``fggr`` breaks a rule.

Every policy is told each app's kernels (``AppInfo.kernels``), and by default they are exactly
what runs. On a real GPU they are estimates made without running the model, off by some share.
``--estimate-error E`` runs every kernel for its estimated time (and bytes) times a factor of its
own, drawn uniformly in ``[1 - E, 1 + E]`` and the same in every run of the mix (an estimator is
wrong the same way each time), while every policy, and ``fggr``'s what-if, is told the estimate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from qosched.core.goals import BEST_EFFORT, Goal
from qosched.gpushare.judge import AppOutcome, protected_met, rule_violations
from qosched.gpushare.kernel import Kernel
from qosched.gpushare.mixes import judge_mix
from qosched.gpushare.simulator import AppWorkload, app_infos
from qosched.gpushare.whatif import perturbed
from qosched.hardware import Processor, gpu

MODELS = ("mlp", "resnet", "mobilenet", "bert")
TOP_REQUESTS = 150
#: Run ``k`` of a mix draws its arrivals from seed ``mix seed + RUN_STRIDE * k`` (run 0: the
#: mix's own seed, as the single-run report has always used).
RUN_STRIDE = 1000
#: Where the draws of a mix's estimate errors start (``Mix.truth``): far from the mixes' seeds and
#: from the what-if's own (``WhatIf.seeds``).
ESTIMATE_STREAM = 0x7E570000


@dataclass(frozen=True)
class Mix:
    seed: int
    gpu: Processor
    apps: tuple[AppWorkload, ...]
    duration_s: float
    #: Which run of the mix: the apps are the same, the arrivals are drawn anew.
    run: int = 0
    #: How far each kernel's time (and bytes) runs from what the policies are told (see the
    #: module docstring); 0: exactly as told.
    estimate_error: float = 0.0

    @property
    def run_seed(self) -> int:
        return self.seed + RUN_STRIDE * self.run

    def truth(self) -> tuple[AppWorkload, ...]:
        """The apps as they run: ``apps`` (the estimates every policy is told) with each
        kernel's time and bytes off by its own draw within ``estimate_error``."""
        if not self.estimate_error:
            return self.apps
        drawn = perturbed(
            app_infos(self.apps, self.gpu), ESTIMATE_STREAM + self.seed, self.estimate_error
        )
        return tuple(replace(a, kernels=d.kernels) for a, d in zip(self.apps, drawn, strict=True))

    def judged(self, **options) -> dict[str, tuple[AppOutcome, ...]]:
        """``judge_mix`` on this run of the mix, each policy told the estimates."""
        told = self.apps if self.estimate_error else None
        return judge_mix(
            self.gpu, self.truth(), duration_s=self.duration_s, seed=self.run_seed, told=told,
            **options,
        )  # fmt: skip

    def describe(self) -> str:
        parts = []
        for app in self.apps:
            loop = f"{app.poisson_rps:.0f}/s" if app.poisson_rps else "closed"
            parts.append(f"{app.name}(p{app.priority}, {loop}, {app.goal.describe()})")
        return ", ".join(parts)


def random_kernel(rng: np.random.Generator, device: Processor, name: str) -> Kernel:
    """A kernel of random size, duration, bandwidth share and number of waves."""
    sm_count = device.sm_count or 1
    sms = int(rng.integers(4, sm_count + 1))
    time_s = float(10 ** rng.uniform(-5, -3))  # 10 us .. 1 ms
    share = float(rng.uniform(0.02, 0.95))
    waves = int(rng.integers(1, 9))
    # 256-thread blocks at occupancy 0.25 on a 64-warp SM: 2 resident blocks per SM.
    return Kernel(name=name, op=name, grid=(sms * 2 * waves, 1, 1), block=(256, 1, 1),
                  registers_per_thread=128, shared_bytes_per_block=0, sms=sms, occupancy=0.25,
                  flops=1.0, bytes=share * device.memory_bandwidth * time_s,
                  bound="memory" if share >= 0.5 else "compute", time_s=time_s)  # fmt: skip


def model_kernels() -> Callable[[str, int], tuple[Kernel, ...]]:
    """Kernels of a zoo model at a batch size on an A100, estimated once each."""
    from qosched.gpushare.estimate import estimate_model

    device, cache = gpu("A100"), {}

    def kernels(model: str, batch: int) -> tuple[Kernel, ...]:
        if (model, batch) not in cache:
            cache[model, batch] = tuple(estimate_model(model, device, batch=batch).kernels)
        return cache[model, batch]

    return kernels


def _goal(rng: np.random.Generator, rank: int, rps: float | None, work_s: float) -> Goal:
    if rank == 0:
        if rng.random() < 0.7:
            return Goal("p99_slowdown", round(float(rng.uniform(1.1, 1.5)), 2))
        return Goal("p99_latency", float(rng.uniform(1.5, 4.0)) * work_s)
    draw = rng.random()
    if draw < 0.4:
        return BEST_EFFORT
    if draw < 0.7:
        return Goal("throughput_share", round(float(rng.uniform(0.2, 0.8)), 2))
    if draw < 0.85:
        rate = (rps if rps else 1.0 / work_s) * float(rng.uniform(0.5, 1.0))
        return Goal("throughput_rps", rate)
    return Goal("p99_slowdown", round(float(rng.uniform(1.5, 3.0)), 2))


def random_mix(seed: int, *, models: Callable[[str, int], tuple[Kernel, ...]] | None = None) -> Mix:
    """One mix, the same for the same seed; ``models`` (see :func:`model_kernels`) lets apps be
    zoo models, else every app has explicit kernels."""
    rng = np.random.default_rng(seed)
    device = gpu("A100")
    count = int(rng.integers(2, 6))
    priorities = sorted((int(p) for p in rng.integers(0, 4, size=count)), reverse=True)
    top = priorities[0]
    apps, drafts = [], []
    for i, priority in enumerate(priorities):
        if models is not None and rng.random() < 0.5:
            model = MODELS[int(rng.integers(len(MODELS)))]
            kernels = models(model, int(rng.choice([1, 2, 4, 8])))
            name = f"{model}-{i}"
        else:
            kernels = tuple(random_kernel(rng, device, f"k{i}.{j}")
                            for j in range(int(rng.integers(1, 7))))  # fmt: skip
            name = f"app-{i}"
        work = sum(k.time_s for k in kernels)
        rps = float(rng.uniform(0.03, 0.6)) / work if rng.random() < 0.6 else None
        drafts.append((name, priority, kernels, rps, work))
    for i, (name, priority, kernels, rps, work) in enumerate(drafts):
        rank = 0 if priority == top and i == 0 else 1
        goal = _goal(rng, rank, rps, work)
        apps.append(AppWorkload(name, priority, kernels, rps, goal))
    first = drafts[0]
    per_request = 1.0 / first[3] if first[3] else first[4]
    duration = float(min(0.25, max(0.02, TOP_REQUESTS * per_request)))
    return Mix(seed, device, tuple(apps), duration)


def judge(mix: Mix, *, online: bool = False) -> dict[str, tuple[AppOutcome, ...]]:
    """Every policy on the mix; ``online``: fggr's online rule alone, not calibrated first."""
    return mix.judged(options={"fggr": {"calibrate": False}} if online else None)


def report(results: list[tuple[Mix, dict[str, tuple[AppOutcome, ...]]]]) -> dict:
    """The summary the docs quote: shares of mixes per policy, fggr's rules and throughput."""
    policies = list(results[0][1]) if results else []
    n = len(results)
    summary: dict = {"mixes": n, "policies": {}, "broken": [], "throughput": []}
    for name in policies:
        all_goals = sum(all(a.met for a in by[name]) for _, by in results)
        protected = sum(protected_met(by[name]) for _, by in results)
        summary["policies"][name] = {"all_goals": all_goals / n, "protected": protected / n}
    summary["keepable"] = 0
    for mix, by in results:
        broken = rule_violations(by)
        # The rules read each app against the best policy for it: where apps conflict, no one
        # policy may keep them all. Which registered policies would, judged as fggr is.
        keepers = [p for p in policies if p != "fggr" and not rule_violations(by, policy=p)]
        summary["keepable"] += bool(keepers or not broken)
        if broken:
            summary["broken"].append({"seed": mix.seed, "run": mix.run, "mix": mix.describe(),
                                      "rules": broken, "kept_by": keepers})  # fmt: skip
        if not protected_met(by["fggr"]):
            continue
        meeting = [p for p in policies if protected_met(by[p])]
        for app in by["fggr"]:
            if app.goal.protected:
                continue
            best = max(_tput(by[p], app.name) for p in meeting)
            if best > 0:
                summary["throughput"].append(_tput(by["fggr"], app.name) / best)
    return summary


def _tput(apps: tuple[AppOutcome, ...], name: str) -> float:
    value = next(a.measured.throughput_ratio for a in apps if a.name == name)
    return 0.0 if value != value else value  # NaN: nothing done


def print_report(summary: dict, command: str, runs: int = 1) -> None:
    n = summary["mixes"]
    if runs == 1:
        print(f"{n} random mixes (`{command}`)\n")
    else:
        print(f"{n // runs} random mixes, each run {runs} times on arrivals of its own: "
              f"{n} runs (`{command}`); every share below is of the runs\n")  # fmt: skip
    print("| policy | meets every goal | meets the protected goals |")
    print("|---|---|---|")
    for name, shares in summary["policies"].items():
        print(f"| {name} | {shares['all_goals']:.0%} | {shares['protected']:.0%} |")
    ratios = summary["throughput"]
    if ratios:
        within = sum(r >= 0.95 for r in ratios) / len(ratios)
        print(f"\nfggr's throughput of the other apps over the best policy that also meets the "
              f"protected goals ({len(ratios)} apps): median {statistics.median(ratios):.3f}, "
              f"min {min(ratios):.3f}, within 5 %: {within:.0%}")  # fmt: skip
    kind = "mixes" if runs == 1 else "runs"
    print(f"\n{kind} where fggr breaks a rule: {len(summary['broken'])} of {n}")
    if runs > 1:
        seeds = [case["seed"] for case in summary["broken"]]
        counts = [seeds.count(s) for s in dict.fromkeys(seeds)]
        print(f"mixes where fggr breaks a rule in at least one run: {len(counts)} of {n // runs}"
              f", in every run: {counts.count(runs)}")  # fmt: skip
    keepable = summary["keepable"]
    print(f"{kind} where fggr or some other registered policy keeps every rule: {keepable} of {n}")
    for case in summary["broken"]:
        run = f", run {case['run']}" if runs > 1 else ""
        print(f"- seed {case['seed']}{run}: {case['mix']}")
        for rule in case["rules"]:
            print(f"  - {rule}")
        keepers = ", ".join(case["kept_by"]) or "no other registered policy"
        print(f"  - every rule is kept here by: {keepers}")


def add_mix_arguments(parser: argparse.ArgumentParser, *, seeds: str, runs: int) -> None:
    """The options that say which mixes to draw and how many runs each gets."""
    parser.add_argument("--seeds", default=seeds, help=f"first:last (exclusive), default {seeds}")
    parser.add_argument("--kernels-only", action="store_true",
                        help="explicit kernels only (no model estimation; faster)")  # fmt: skip
    parser.add_argument("--runs", type=int, default=runs,
                        help=f"runs per mix, arrivals drawn anew (default {runs})")  # fmt: skip
    parser.add_argument("--estimate-error", type=float, default=0.0, metavar="E",
                        help="kernels run for their told time x U(1-E, 1+E)")  # fmt: skip


def seed_range(parser: argparse.ArgumentParser, args: argparse.Namespace) -> range:
    """The mixes' seeds from ``--seeds``; a bad ``--seeds`` or ``--runs`` is a usage error."""
    if not 1 <= args.runs <= 100:
        parser.error("--runs must be in 1..100")
    if not 0 <= args.estimate_error < 1:
        parser.error("--estimate-error must be in [0, 1)")
    first, _, last = args.seeds.partition(":")
    try:
        seeds = range(int(first), int(last or int(first) + 1))
    except ValueError:
        parser.error(f"--seeds: expected first:last, got {args.seeds!r}")
    if not seeds or seeds.start < 0:
        parser.error(f"--seeds: expected 0 <= first < last, got {args.seeds!r}")
    return seeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_mix_arguments(parser, seeds="0:40", runs=1)
    parser.add_argument("--json", metavar="OUT", help="also write the summary as JSON")
    parser.add_argument(
        "--online", action="store_true", help="fggr's online rule alone (no calibration first)"
    )
    args = parser.parse_args(argv)
    seeds = seed_range(parser, args)
    models = None if args.kernels_only else model_kernels()
    results = []
    began = time.perf_counter()
    for seed in seeds:
        mix = replace(random_mix(seed, models=models), estimate_error=args.estimate_error)
        for one_run in (replace(mix, run=run) for run in range(args.runs)):
            results.append((one_run, judge(one_run, online=args.online)))
        print(f"seed {seed}: {len(mix.apps)} apps, {mix.duration_s:.3f} s simulated "
              f"({time.perf_counter() - began:.0f} s so far)", file=sys.stderr)  # fmt: skip
    summary = report(results)
    command = "python bench/gpushare_mixes.py --seeds " + args.seeds
    command += " --kernels-only" if args.kernels_only else ""
    command += " --online" if args.online else ""
    command += f" --runs {args.runs}" if args.runs > 1 else ""
    command += f" --estimate-error {args.estimate_error:g}" if args.estimate_error else ""
    print_report(summary, command, args.runs)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(summary, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
