"""bench/gpushare_choice_replay.py: fggr's choice replayed from what-if predictions."""

import importlib.util
import sys
from pathlib import Path

import pytest

from qosched.gpushare.goals import BEST_EFFORT, Goal, Measured
from qosched.gpushare.judge import AppOutcome
from qosched.gpushare.policies.fggr import CANDIDATES
from qosched.gpushare.whatif import Prediction

BENCH = Path(__file__).resolve().parents[2] / "bench"
P99 = Goal("p99_slowdown", 1.10)


@pytest.fixture(scope="module")
def replay():
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(
            "gpushare_choice_replay", BENCH / "gpushare_choice_replay.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH))


def scripted(script):
    """Per candidate, in CANDIDATES order: hp's p99 on each draw and lp's throughput."""
    predictions = []
    for name, _ in CANDIDATES:
        p99s, tput = script[name]
        draws = tuple(
            (AppOutcome("hp", 1, P99, Measured(p, p * 1e-3, 1.0, 100.0), True),
             AppOutcome("lp", 0, BEST_EFFORT, Measured(1.0, 1e-3, tput, tput * 100), True))
            for p in p99s
        )  # fmt: skip
        predictions.append(Prediction(draws))
    return tuple(predictions)


SCRIPT = {
    "strict": ((1.0, 1.0, 1.0, 1.0), 0.1),
    "cautious": ((1.02, 1.03, 1.04, 1.02), 0.4),
    "goals": ((1.03, 1.04, 1.15, 1.02), 0.6),  # breaks hp's 1.10x on the third draw
    "loose": ((1.05, 1.2, 1.0, 1.0), 0.8),  # on the second
    "free": ((1.3, 1.4, 1.3, 1.3), 1.0),
    "free-equal": ((1.5, 1.6, 1.5, 1.5), 1.0),
}


def test_the_default_adopts_what_two_draws_show(replay):
    assert replay.replayed(scripted(SCRIPT), replay.Way(2)) == "goals"


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
