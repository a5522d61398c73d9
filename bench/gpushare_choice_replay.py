"""How fggr's calibration would fare with other ways of choosing: its choices replayed on runs.

    python bench/gpushare_choice_replay.py [--seeds 0:24] [--kernels-only] [--runs 4]
                                           [--draws 8] [--jitter 0.1] [--told-estimates]
                                           [--estimate-error E] [--save FILE]
                                           [--load FILE ...]

``fggr`` calibrates before a run (``gpushare.whatif``): it simulates each of its candidate
settings (``fggr.CANDIDATES``) and every built-in policy it is held to (``fggr.REFERENCES``)
on two draws of the mix's arrivals and kernel times, and, among the settings and reference
policies that break the rules against those policies on the fewest draws, adopts the one that
meets the protected goals on both with a 3 % margin and then serves the other apps best (a
reference policy adopted runs its rule in fggr's place). Whether another way of choosing
would do better is a question about many runs, since one run's p99 of about 150 requests is
close to their maximum and meeting a goal there is partly luck. So, for every mix of
``bench/gpushare_mixes.py`` (``random_mix``):

1. every candidate's and every reference policy's what-if on ``--draws`` draws (the first two
   are the default's own);
2. every registered baseline and every candidate as a fixed setting (``calibrate=False``: the
   rule calibration then runs) on ``--runs`` runs of the mix, each on arrivals of its own
   (``gpushare_mixes.RUN_STRIDE``), judged as ``judge.rule_violations`` judges ``fggr``;
3. each way of choosing (:data:`WAYS`) replayed on the what-ifs: the candidate it adopts is
   judged, run by run, as if it were ``fggr``.

The replay of the default is checked against ``FgGR().setup`` on every mix (the same choice,
or the bench stops). Printed: per way of choosing, the runs where the adopted setting breaks
a rule, by rule, the runs where it meets every goal, and the runs where it breaks a rule with
fggr's other settings held as policies too (`judged_among_settings`); per mix, the setting
each way adopts and in how many runs it breaks a rule. Below them, two yardsticks no way of
choosing from the what-ifs can use: the setting that breaks a rule in the fewest of the mix's
runs (`in_hindsight`, a lower bound), and each run judged with the setting chosen so on the mix's
other runs (`chosen_on_other_runs`: what the spread between runs leaves to any one
setting). ``--save`` keeps what was simulated (pickle) and ``--load`` replays saved files
without simulating again. ``--jitter`` runs the what-ifs (and
the ``fggr`` they are checked against) with another spread of perturbed kernel times
(``WhatIf.jitter``), and ``--told-estimates`` tells each candidate of the what-ifs the
estimates while the perturbed kernels run (``WhatIf.told_estimates``); the runs depend on
neither. ``--estimate-error E`` runs the kernels off
their estimates as ``bench/gpushare_mixes.py`` does (``Mix.truth``); the what-ifs, like every
policy, see only the estimates.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from gpushare_mixes import Mix, add_mix_arguments, model_kernels, random_mix, seed_range
from qosched.gpushare.judge import AppOutcome, rule_violations
from qosched.gpushare.policies import create_policy, policy_names
from qosched.gpushare.policies.fggr import (
    CANDIDATES,
    FREE,
    REFERENCES,
    FgGR,
    calibrated_choice,
)
from qosched.gpushare.simulator import app_infos
from qosched.gpushare.whatif import (
    WhatIf,
    WhatIfResult,
    adopted,
    breaks,
    meets_every_goal,
    predict,
)

NAMES = [name for name, _ in CANDIDATES]
#: What the default may adopt: fggr's own settings, then the reference policies.
ADOPTABLE = [*NAMES, *REFERENCES]


@dataclass(frozen=True)
class Way:
    """A way of choosing: the candidates are judged on the ``first`` draws; the one chosen is
    then judged on the ``confirm`` draws too and chosen again (each candidate confirmed at
    most once), as long as the choice moves; goals met with ``margin``. With ``rules``, only
    among the candidates that break the rules against the reference policies on the fewest
    of the ``first`` draws (``whatif.fewest_breaks``), a free setting first where one meets
    every goal with the margin, as ``FgGR._calibrate`` chooses."""

    first: int
    confirm: int = 0
    margin: float = 0.03
    #: Where no candidate meets the most important goals: the nearest one
    #: (``whatif.nearest``), else the constructor's setting.
    nearest: bool = True
    rules: bool = False
    #: With ``rules``: where the candidate chosen on the ``first`` draws breaks a rule on one
    #: of them, or misses a goal with the margin, choose again on this many more.
    unsure: int = 0


#: What ``FgGR`` does.
DEFAULT = Way(2, rules=True)
#: The default first, then the variants tried against it.
WAYS = {
    "default: 2 draws, fewest rules broken against the references, 3 % margin": DEFAULT,
    "4 draws, fewest rules broken against the references": Way(4, rules=True),
    "2 draws, 2 more where the choice breaks a rule or misses a goal": Way(2, rules=True, unsure=2),
    "2 draws, 3 % margin, no references (the default before)": Way(2),
    "2 draws, the constructor's setting where none meets the top goal": Way(2, nearest=False),
    "2 draws, no margin": Way(2, margin=0.0),
    "2 draws, then 2 confirming the choice": Way(2, 2),
    "2 draws, then 4 confirming the choice": Way(2, 4),
    "4 draws": Way(4),
    "8 draws": Way(8),
}


@dataclass(frozen=True)
class Simulated:
    """One mix: every candidate's what-if on every draw, per run every policy's and every
    candidate's outcome (``fggr:NAME`` for a candidate), and every reference policy's what-if
    on every draw (empty in files saved before the default judged against them)."""

    mix: str
    predictions: tuple[WhatIfResult, ...]
    runs: tuple[dict[str, tuple[AppOutcome, ...]], ...]
    references: dict[str, WhatIfResult] = field(default_factory=dict)


def simulated(mix: Mix, runs: int, draws: int, what_if: WhatIf | None = None) -> Simulated:
    """The mix's what-ifs (``what_if``'s, on ``draws`` draws; the first ones its own) and its
    runs."""
    infos = app_infos(mix.apps, mix.gpu, mix.duration_s)
    default = what_if or WhatIf()
    config = replace(default, seeds=tuple(default.seeds[0] + i for i in range(draws)))
    if config.seeds[: len(default.seeds)] != default.seeds:
        raise SystemExit(f"the replay needs the default's {len(default.seeds)} draws first")
    factories = [partial(FgGR, calibrate=False, **changes) for _, changes in CANDIDATES]
    references = [partial(create_policy, name) for name in REFERENCES]
    everything = predict(infos, [*factories, *references], config)
    predictions = everything[: len(CANDIDATES)]
    referenced = dict(zip(REFERENCES, everything[len(CANDIDATES) :], strict=True))
    chosen = FgGR(what_if=default)
    chosen.setup(infos)
    if replayed(predictions, DEFAULT, referenced) != (chosen.calibrated or ""):
        raise SystemExit(f"seed {mix.seed}: the replay of the default is not fggr's choice")
    baselines = [name for name in policy_names() if name != "fggr"]
    settings = {f"fggr:{name}": make for name, make in zip(NAMES, factories, strict=True)}
    judged = [
        replace(mix, run=run).judged(policies=baselines, more=settings) for run in range(runs)
    ]
    return Simulated(mix.describe(), predictions, tuple(judged), referenced)


def _draws(prediction: WhatIfResult, count: int, skip: int = 0) -> WhatIfResult:
    return WhatIfResult(prediction.draws[skip : skip + count])


def replayed(
    predictions: tuple[WhatIfResult, ...],
    way: Way,
    references: dict[str, WhatIfResult] | None = None,
) -> str:
    """The candidate ``way`` adopts ('' for none: the constructor's setting stays). With
    ``way.rules`` as ``FgGR._calibrate`` chooses (``references``: the reference policies'
    what-ifs); without, as it chose before it judged candidates against them: the free
    settings first, the rest only where neither free one meets every goal with the margin."""
    config = WhatIf()
    if way.rules:
        if not references:
            raise ValueError("this way of choosing needs the reference policies' what-ifs")
        mine = [_draws(p, way.first) for p in predictions]
        theirs = {name: _draws(p, way.first) for name, p in references.items()}
        chosen = calibrated_choice(mine, theirs, config, margin=way.margin)
        if way.unsure:
            held = theirs[chosen] if chosen in theirs else mine[NAMES.index(chosen)]
            sure = not breaks(held, theirs, "fggr")[1] and meets_every_goal(held, way.margin)
            if not sure:
                return replayed(predictions, replace(way, first=way.first + way.unsure, unsure=0),
                                references)  # fmt: skip
        return chosen
    runs = {i: _draws(predictions[i], way.first) for i in FREE}
    confirmed: set[int] = set()
    while True:
        rest = [i for i in range(len(NAMES)) if i not in runs]
        if rest and not any(meets_every_goal(p, way.margin) for p in runs.values()):
            runs |= {i: _draws(predictions[i], way.first) for i in rest}
        indices = sorted(runs)
        chosen = adopted([runs[i] for i in indices], config, margin=way.margin,
                         fallback=way.nearest)  # fmt: skip
        if chosen is None:
            return ""
        index = indices[chosen]
        if index in confirmed or not way.confirm:
            return NAMES[index]
        more = _draws(predictions[index], way.confirm, skip=way.first)
        runs[index] = WhatIfResult(runs[index].draws + more.draws)
        confirmed.add(index)


def judged_as_fggr(by: dict[str, tuple[AppOutcome, ...]], setting: str) -> dict:
    """The run's outcomes with ``fggr`` as adopting ``setting``: one of its own (run as
    ``fggr:NAME``), or a reference policy (whose mechanism it then runs: that policy's own run,
    the same arrivals and decisions)."""
    result = {name: apps for name, apps in by.items() if not name.startswith("fggr:")}
    result["fggr"] = by[setting] if setting in REFERENCES else by[f"fggr:{setting or 'goals'}"]
    return result


def judged_among_settings(by: dict[str, tuple[AppOutcome, ...]], setting: str) -> dict:
    """As `judged_as_fggr`, with fggr's other settings kept as policies of their own: the rules
    then also hold every app to what another setting gives it within the same goals. Rules
    (a)-(c) see a choice that starves an app only where a *reference* policy meets the goals
    above it and serves it; where only fggr's own settings meet them (the kernels example,
    on four draws: docs/results/gpushare.md), this count sees it too."""
    result = judged_as_fggr(by, setting)
    adopted = f"fggr:{setting or 'goals'}"
    result |= {n: apps for n, apps in by.items() if n.startswith("fggr:") and n != adopted}
    return result


def in_hindsight(sim: Simulated) -> tuple[str, int]:
    """The fixed setting (or reference policy run in fggr's place, where the runs have it)
    that breaks a rule in the fewest of the mix's runs, and how many (ties to the safer
    setting, fggr's own first): what a way of choosing would adopt if it knew the runs. Every
    way adopts one setting per mix, so none breaks fewer rules on the mix than this."""
    adoptable = [n for n in ADOPTABLE if all(n in by or f"fggr:{n}" in by for by in sim.runs)]
    broken = {
        name: sum(bool(rule_violations(judged_as_fggr(by, name))) for by in sim.runs)
        for name in adoptable
    }
    best = min(broken.values())
    return next(name for name in adoptable if broken[name] == best), best


def chosen_on_other_runs(sim: Simulated) -> tuple[int, int]:
    """Each run judged with the setting `in_hindsight` picks from the mix's *other* runs (leave
    one out): (runs where it breaks a rule, runs judged). A way of choosing that knew how the
    settings fare on real runs of the mix, but not the run it is judged on, breaks this many:
    what the run-to-run spread leaves to any choice of one setting, where the hindsight bound
    also counts the luck of the runs it chose on. Needs at least two runs."""
    broken = 0
    for index, run in enumerate(sim.runs):
        others = Simulated(sim.mix, sim.predictions, sim.runs[:index] + sim.runs[index + 1 :])
        name, _ = in_hindsight(others)
        broken += bool(rule_violations(judged_as_fggr(run, name)))
    return broken, len(sim.runs)


def report(results: dict[int, Simulated]) -> None:
    draws = min(len(p.draws) for s in results.values() for p in s.predictions)
    referenced = all(s.references for s in results.values())
    ways = {
        name: way
        for name, way in WAYS.items()
        if way.first + way.confirm + way.unsure <= draws and (referenced or not way.rules)
    }
    if len(ways) < len(WAYS):
        print(
            f"(only the ways of choosing that {draws} what-if draws"
            + ("" if referenced else " without the reference policies' what-ifs")
            + " can replay)"
        )
    longest = max(len(name) for name in ways)
    total = sum(len(s.runs) for s in results.values())
    print(f"{len(results)} mixes, {total} runs\n")
    print(f"| way of choosing{' ' * (longest - 15)} | runs breaking a rule | (a) | (b) | (c) "
          f"| runs meeting every goal | with fggr's other settings held too |")  # fmt: skip
    print(f"|{'-' * (longest + 2)}|---|---|---|---|---|---|")
    per_mix = {}
    for name, way in ways.items():
        tally: Counter[str] = Counter()
        cells = []
        for seed, sim in sorted(results.items()):
            setting = replayed(sim.predictions, way, sim.references)
            broken_runs = 0
            for by in sim.runs:
                as_fggr = judged_as_fggr(by, setting)
                broken = rule_violations(as_fggr)
                tally.update({rule[:3] for rule in broken})
                broken_runs += bool(broken)
                tally["every goal"] += all(a.met for a in as_fggr["fggr"])
                tally["held"] += bool(rule_violations(judged_among_settings(by, setting)))
            tally["broken"] += broken_runs
            cells.append(
                f"{seed}:{setting or 'goals'}" + (f"({broken_runs})" if broken_runs else "")
            )
        per_mix[name] = cells
        print(f"| {name:{longest}s} | {tally['broken']} | {tally['(a)']} | {tally['(b)']} "
              f"| {tally['(c)']} | {tally['every goal']} | {tally['held']} |")  # fmt: skip
    chosen = {seed: in_hindsight(sim) for seed, sim in sorted(results.items())}
    print(
        f"\nIn hindsight (the setting breaking a rule in the fewest runs, per mix; no way of "
        f"choosing from the what-ifs breaks fewer): {sum(n for _, n in chosen.values())} runs"
    )
    if min(len(s.runs) for s in results.values()) >= 2:
        left_out = [chosen_on_other_runs(sim) for sim in results.values()]
        print(
            f"Chosen on the mix's other runs (each run judged with the setting in hindsight of "
            f"the others): {sum(b for b, _ in left_out)} of {sum(n for _, n in left_out)} runs"
        )
    per_mix["in hindsight"] = [
        f"{seed}:{name}" + (f"({n})" if n else "") for seed, (name, n) in chosen.items()
    ]  # fmt: skip
    print("\nPer mix, the setting adopted (and the runs where it breaks a rule):")
    for name, cells in per_mix.items():
        print(f"- {name}: {' '.join(cells)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_mix_arguments(parser, seeds="0:24", runs=4)
    parser.add_argument("--draws", type=int, default=8, help="what-if draws (default 8)")
    parser.add_argument(
        "--jitter", type=float, default=WhatIf.jitter, help="the what-ifs' kernel-time spread"
    )
    parser.add_argument(
        "--told-estimates", action="store_true", help="what-if candidates told the estimates"
    )
    parser.add_argument("--save", metavar="FILE", help="keep what was simulated (pickle)")
    parser.add_argument("--load", metavar="FILE", nargs="+", help="replay saved files only")
    args = parser.parse_args(argv)
    least = len(WhatIf().seeds)
    if not least <= args.draws <= 64:
        parser.error(f"--draws must be in {least}..64 (the default's draws first)")
    if not 0 <= args.jitter < 1:
        parser.error("--jitter must be in [0, 1)")
    seeds = seed_range(parser, args)
    if args.load:
        results: dict[int, Simulated] = {}
        for path in args.load:
            saved = pickle.loads(Path(path).read_bytes())
            results |= {seed: Simulated(*fields) for seed, fields in saved.items()}
        report(results)
        return 0
    models = None if args.kernels_only else model_kernels()
    results = {}
    began = time.perf_counter()
    for seed in seeds:
        results[seed] = simulated(
            replace(random_mix(seed, models=models), estimate_error=args.estimate_error),
            args.runs,
            args.draws,
            WhatIf(jitter=args.jitter, told_estimates=args.told_estimates),
        )
        if args.save:  # plain tuples: the file loads wherever this module is imported from
            saved = {s: (r.mix, r.predictions, r.runs, r.references) for s, r in results.items()}
            Path(args.save).write_bytes(pickle.dumps(saved))
        print(f"seed {seed} ({time.perf_counter() - began:.0f} s so far)", file=sys.stderr)
    report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
