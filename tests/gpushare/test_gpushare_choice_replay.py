"""bench/gpushare_choice_replay.py: fggr's choice replayed from what-if predictions."""

import pytest

from bench_scripts import bench_script
from qosched.core.goals import BEST_EFFORT, Goal, Measured
from qosched.gpushare.judge import AppOutcome, rule_violations
from qosched.gpushare.policies.fggr import CANDIDATES, REFERENCES
from qosched.gpushare.whatif import WhatIfResult

P99 = Goal("p99_slowdown", 1.10)


@pytest.fixture(scope="module")
def replay():
    with bench_script("gpushare_choice_replay") as module:
        yield module


def scripted(script):
    """Per candidate, in CANDIDATES order: hp's p99 on each draw and lp's throughput."""
    predictions = []
    for name, _ in CANDIDATES:
        p99s, tput = script[name]
        draws = tuple(
            (AppOutcome("hp", 1, P99, Measured(p, p * 1e-3, 1.0, 100.0), p <= 1.10),
             AppOutcome("lp", 0, BEST_EFFORT, Measured(1.0, 1e-3, tput, tput * 100), True))
            for p in p99s
        )  # fmt: skip
        predictions.append(WhatIfResult(draws))
    return tuple(predictions)


SCRIPT = {
    "strict": ((1.0, 1.0, 1.0, 1.0), 0.1),
    "cautious": ((1.02, 1.03, 1.04, 1.02), 0.4),
    "goals": ((1.03, 1.04, 1.15, 1.02), 0.6),  # breaks hp's 1.10x on the third draw
    "loose": ((1.05, 1.2, 1.0, 1.0), 0.8),  # on the second
    "free": ((1.3, 1.4, 1.3, 1.3), 1.0),
    "free-equal": ((1.5, 1.6, 1.5, 1.5), 1.0),
}


def test_the_way_without_references_adopts_what_two_draws_show(replay):
    assert replay.replayed(scripted(SCRIPT), replay.Way(2)) == "goals"


def _reference(p99s, tput):
    """A reference policy's what-if: hp's p99 on each draw (goal 1.10x) and lp's throughput."""
    lp = AppOutcome("lp", 0, BEST_EFFORT, Measured(1.0, 1e-3, tput, tput * 100), True)
    hp = [AppOutcome("hp", 1, P99, Measured(p, p * 1e-3, 1.0, 100.0), p <= 1.10) for p in p99s]
    return WhatIfResult(tuple((h, lp) for h in hp))


def test_the_default_judges_the_candidates_against_the_reference_policies(replay):
    two = replay.DEFAULT
    assert two == replay.Way(2, rules=True)
    # By hand: "streams" meets hp's goal on the first two draws and gives lp 0.5, so rule (b)
    # holds a candidate meeting hp's goal to lp >= 0.475 on each. strict (0.1) and cautious
    # (0.4) break it on both; goals (0.6) keeps it; loose misses hp's goal on the second draw
    # (1.2x), free and free-equal on both: rule (a). goals alone breaks nothing: it is adopted.
    references = {"streams": _reference((1.0, 1.0), 0.5)}
    assert replay.replayed(scripted(SCRIPT), two, references) == "goals"
    # Both goals and streams itself (a candidate too, judged against itself) break nothing:
    # the choice among them is by lp's throughput, and goals gives more.
    # streams giving lp 0.7: goals (0.6) now breaks (b) on both draws, as strict and cautious
    # do; loose (0.8) breaks (a) on one. streams alone breaks nothing: fggr runs its mechanism.
    references = {"streams": _reference((1.0, 1.0), 0.7)}
    assert replay.replayed(scripted(SCRIPT), two, references) == "streams"
    # streams meeting hp's goal on the first draw only, lp 0.65 (so at least 0.6175 there):
    # goals (0.6) breaks (b) on it; loose (0.8) keeps it, and on the second draw, where no
    # policy meets hp's goal, misses nothing some policy meets. loose alone breaks nothing,
    # where without the references goals is adopted (loose misses hp's goal on a draw).
    references = {"streams": _reference((1.0, 2.0), 0.65)}
    assert replay.replayed(scripted(SCRIPT), two, references) == "loose"
    assert replay.replayed(scripted(SCRIPT), replay.Way(2)) == "goals"
    # With no goal met by the reference (2x), nothing is held to it: the choice without it.
    references = {"streams": _reference((2.0, 2.0), 1.0)}
    assert replay.replayed(scripted(SCRIPT), two, references) == replay.replayed(
        scripted(SCRIPT), replay.Way(2)
    )
    with pytest.raises(ValueError, match="reference"):
        replay.replayed(scripted(SCRIPT), two)


def test_four_draws_see_what_two_hide(replay):
    # streams meets hp's goal on all four draws and gives lp 0.5. On the first two, goals (0.6)
    # keeps every rule and serves lp best (as above); the third draw shows it missing hp's
    # goal (1.15x) where streams meets it: rule (a). strict and cautious break (b) on every
    # draw, loose and the free settings (a). streams alone breaks nothing on four draws.
    references = {"streams": _reference((1.0, 1.0, 1.0, 1.0), 0.5)}
    assert replay.replayed(scripted(SCRIPT), replay.DEFAULT, references) == "goals"
    assert replay.replayed(scripted(SCRIPT), replay.Way(4, rules=True), references) == "streams"
    # Choosing again on four draws only where two leave doubt: goals breaks no rule and meets
    # every goal with the margin on the first two, so it stays.
    unsure = replay.Way(2, rules=True, unsure=2)
    assert replay.replayed(scripted(SCRIPT), unsure, references) == "goals"
    # streams missing hp's goal on the second draw only, lp 0.65: on two draws loose alone
    # breaks no rule (as above) but misses hp's goal on the second, so four draws decide. loose
    # missing it on the last two as well (where streams meets it) then breaks (a) twice;
    # streams alone breaks nothing.
    references = {"streams": _reference((1.0, 2.0, 1.0, 1.0), 0.65)}
    script = scripted(dict(SCRIPT, loose=((1.05, 1.2, 1.3, 1.3), 0.8)))
    assert replay.replayed(script, replay.DEFAULT, references) == "loose"
    assert replay.replayed(script, unsure, references) == "streams"


def test_a_confirmed_choice_that_breaks_a_goal_moves_to_the_next_best(replay):
    # goals breaks the goal on a confirming draw: the choice moves to cautious, which holds.
    assert replay.replayed(scripted(SCRIPT), replay.Way(2, 2)) == "cautious"
    assert replay.replayed(scripted(SCRIPT), replay.Way(4)) == "cautious"


def test_without_the_margin_a_goal_met_narrowly_counts(replay):
    # 1.09x meets 1.10x only without the 3 % margin: free is adopted then, not before.
    script = dict(SCRIPT, free=((1.09, 1.08, 1.3, 1.3), 1.0))
    assert replay.replayed(scripted(script), replay.Way(2)) == "goals"
    assert replay.replayed(scripted(script), replay.Way(2, margin=0.0)) == "free"


def test_nothing_meeting_the_goal_adopts_the_nearest_or_the_constructors_setting(replay):
    script = {name: ((1.5, 1.5, 1.5, 1.5), 1.0) for name, _ in CANDIDATES}
    script["loose"] = ((1.3, 1.2, 1.5, 1.5), 1.0)
    assert replay.replayed(scripted(script), replay.Way(2)) == "loose"
    assert replay.replayed(scripted(script), replay.Way(2, nearest=False)) == ""


def _run_outcomes(lp_by_setting, lp_under_streams, streams="priority-streams"):
    """One run: hp (goal 1.10x) met under every fggr setting and under ``streams`` (a policy
    fggr may run in its place, or a plug-in it may not), lp's throughput under each; naive
    misses hp's goal (so it holds nobody to its throughput)."""

    def apps(hp_met, lp_tput):
        p99 = 1.0 if hp_met else 2.0
        hp = AppOutcome("hp", 1, P99, Measured(p99, p99 * 1e-3, 1.0, 100.0), hp_met)
        lp = AppOutcome("lp", 0, BEST_EFFORT, Measured(1.0, 1e-3, lp_tput, lp_tput * 100), True)
        return (hp, lp)

    by = {"naive": apps(False, 1.0), streams: apps(True, lp_under_streams)}
    by |= {f"fggr:{name}": apps(True, lp_by_setting[name]) for name, _ in CANDIDATES}
    return by


def test_in_hindsight_is_the_setting_breaking_fewest_runs_ties_to_the_safer(replay):
    # By hand, rule (b): lp is held to its throughput under priority-streams, which meets hp's
    # goal (within 5 %). Run 1 (0.85, so at least 0.8075): goals 0.9 and loose 0.82 keep it.
    # Run 2 (0.5, at least 0.475): loose 0.6 keeps it, goals 0.4 does not. The others (0.1)
    # break both. goals breaks 1 run, loose 0: loose (priority-streams, run in fggr's place,
    # breaks none either: ties go to fggr's own settings).
    rest = dict.fromkeys((n for n, _ in CANDIDATES), 0.1)
    runs = (
        _run_outcomes(rest | {"goals": 0.9, "loose": 0.82}, 0.85),
        _run_outcomes(rest | {"goals": 0.4, "loose": 0.6}, 0.5),
    )
    assert replay.in_hindsight(replay.Simulated("mix", scripted(SCRIPT), runs)) == ("loose", 0)
    # Every setting alike and none breaking a rule: the tie goes to the first (safest) setting.
    same = (_run_outcomes(dict.fromkeys((n for n, _ in CANDIDATES), 0.5), 0.5),)
    assert replay.in_hindsight(replay.Simulated("mix", scripted(SCRIPT), same)) == (
        CANDIDATES[0][0],
        0,
    )


def test_chosen_on_the_other_runs_judges_each_run_by_a_choice_made_without_it(replay):
    # By hand, rule (b) as above: run 1 (streams 0.85) kept by goals 0.9 and loose 0.82; run 2
    # (0.5) by loose 0.6, not goals 0.4; run 3 (0.5) by goals 0.6, not loose 0.4; the others
    # (0.1) break all three. Leaving run 1 out, goals and loose break one run each: the tie
    # goes to the safer, goals, which keeps run 1. Leaving run 2 out, goals breaks none of the
    # others: it breaks run 2. Leaving run 3 out, loose breaks none: it breaks run 3. 2 of 3,
    # where the setting in hindsight of all three breaks 1.
    # The policy holding lp to its throughput is a plug-in here, which fggr cannot run.
    rest = dict.fromkeys((n for n, _ in CANDIDATES), 0.1)
    lp = ({"goals": 0.9, "loose": 0.82}, 0.85), ({"goals": 0.4, "loose": 0.6}, 0.5), (
        {"goals": 0.6, "loose": 0.4}, 0.5)  # fmt: skip
    runs = tuple(_run_outcomes(rest | mine, theirs, streams="plug-in") for mine, theirs in lp)
    sim = replay.Simulated("mix", scripted(SCRIPT), runs)
    assert replay.chosen_on_other_runs(sim) == (2, 3)
    assert replay.in_hindsight(sim) == ("goals", 1)
    # Held to priority-streams instead, which fggr can run in its place and which breaks no
    # rule against itself: in hindsight of all three runs it breaks none. Leaving run 1 out, it
    # alone breaks none of the others (kept); leaving run 2 out, goals breaks none of the
    # others and is the safer (it breaks run 2); leaving run 3 out, loose (it breaks run 3).
    runs = tuple(_run_outcomes(rest | mine, theirs) for mine, theirs in lp)
    sim = replay.Simulated("mix", scripted(SCRIPT), runs)
    assert replay.in_hindsight(sim) == ("priority-streams", 0)
    assert replay.chosen_on_other_runs(sim) == (2, 3)


@pytest.mark.slow
def test_a_mix_is_simulated_with_the_references_and_saved_with_them(replay, tmp_path, capsys):
    # Bench seed 9 (kernels only): two apps, about a second. simulated() stops the bench if
    # the replayed default is not what FgGR().setup adopts on the mix.
    mix = replay.random_mix(9)
    sim = replay.simulated(mix, runs=1, draws=4)  # the default's two, and two more
    assert len(sim.predictions) == len(CANDIDATES)
    assert list(sim.references) == list(REFERENCES)
    assert all(len(p.draws) == 4 for p in (*sim.predictions, *sim.references.values()))
    assert set(sim.runs[0]) >= {*REFERENCES, *(f"fggr:{name}" for name, _ in CANDIDATES)}
    saved = tmp_path / "seed9.pkl"
    replay.main(["--seeds", "9:10", "--kernels-only", "--runs", "1", "--draws", "4",
                 "--save", str(saved)])  # fmt: skip
    printed = capsys.readouterr().out
    replay.main(["--load", str(saved)])
    assert capsys.readouterr().out == printed  # the saved references replay the same
    assert "fewest rules broken against the references" in printed


def test_held_among_fggrs_settings_the_rules_see_a_setting_that_starves_an_app(replay):
    # hp's goal met under every fggr setting and under priority-streams (lp 0.3 there), missed
    # by naive. cautious gives lp 0.3 too, so against the references alone no rule breaks;
    # goals gives lp 0.9 within the same goal, so with fggr's other settings held as policies
    # rule (b) holds cautious to 0.9 x 0.95 and breaks.
    lp = dict.fromkeys((n for n, _ in CANDIDATES), 0.3) | {"goals": 0.9}
    run = _run_outcomes(lp, 0.3)
    assert rule_violations(replay.judged_as_fggr(run, "cautious")) == []
    held = replay.judged_among_settings(run, "cautious")
    assert "fggr:cautious" not in held and "fggr:goals" in held
    (broken,) = rule_violations(held)
    assert broken.startswith("(b) lp gets throughput 0.300x under fggr, 0.900x under fggr:goals")
    # The setting that serves lp best keeps every rule however it is judged.
    assert rule_violations(replay.judged_among_settings(run, "goals")) == []
