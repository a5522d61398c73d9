"""bench/predict_replay.py: the rules it compares with the predictor ``qos`` keeps, and what it
says happened around each prediction (bench/local_evidence.py's ``prediction_points``)."""

from __future__ import annotations

import pytest
from test_local_evidence_bench import command

from bench_scripts import bench_script
from qosched.backends.local.store import Lifecycle, Store
from qosched.cluster.throughput import SpeedCurve

PRIOR = SpeedCurve("command", 1, (0.0, 1.0, 2.0), (1, 2))


def record(tmp_path, name: str, iterations: int):
    """A job's record as a store keeps it (what the replay hands a rule)."""
    with Store(tmp_path / f"{name}.db") as store:
        return store.get(store.submit(command(name, iterations), 1000.0))


def feed(rule, samples) -> None:
    for t, done, workers in samples:
        rule.observe(t, done, workers)


def test_since_change_is_the_mean_speed_since_the_cores_last_changed(tmp_path) -> None:
    with bench_script("predict_replay") as bench:
        rule = bench.SinceChange(PRIOR, record(tmp_path, "x", 1000))
        assert rule.predict(1).rate == 1.0  # nothing yet: the prior's
        # 10 s at 10 it/s on one core, then on two: 20 it/s for 4 s (the first interval on two
        # is the one ending at 11 s, from the last sample on one).
        feed(rule, [(t, 10 * t, 1) for t in range(11)])
        assert rule.predict(1).rate == pytest.approx(10.0)
        feed(rule, [(10 + t, 100 + 20 * t, 2) for t in range(1, 5)])
        assert rule.predict(2).rate == pytest.approx(20.0)
        assert rule.predict(1).rate == 1.0  # not the count it runs on now: the prior's


def test_matched_is_the_mean_speed_over_the_last_stretch_as_long_as_the_remaining_time(
    tmp_path,
) -> None:
    # 10 it/s for 20 s, then 20 it/s for 4 s, one core: 280 iterations in 24 s (11.67 it/s).
    # 70 of 350 left take 6 s at that mean, so the speed of the last 6 s: 100 it / 6 s.
    with bench_script("predict_replay") as bench:
        rule = bench.Matched(PRIOR, record(tmp_path, "x", 350))
        feed(rule, [(t, 10 * t, 1) for t in range(21)])
        feed(rule, [(20 + t, 200 + 20 * t, 1) for t in range(1, 5)])
        assert rule.predict(1).rate == pytest.approx(100 / 6)
        # With 3,000 left, the whole run's mean (the stretch is shorter than the remaining time).
        longer = bench.Matched(PRIOR, record(tmp_path, "y", 3000))
        feed(longer, [(t, 10 * t, 1) for t in range(21)])
        feed(longer, [(20 + t, 200 + 20 * t, 1) for t in range(1, 5)])
        assert longer.predict(1).rate == pytest.approx(280 / 24)


@pytest.mark.parametrize(
    ("since_change_s", "others_changed", "stretch_s", "expected"),
    [
        (5.0, True, 5.0, "re-sized"),
        (20.0, True, 5.0, "neighbour"),
        (20.0, False, 5.0, "end"),
        (20.0, False, 30.0, "steady"),
    ],
)
def test_each_prediction_gets_the_first_cause_that_applies(
    since_change_s, others_changed, stretch_s, expected
) -> None:
    with bench_script("predict_replay") as bench:
        point = bench.PredictionPoint(
            "x", 0.5, 1, since_change_s, stretch_s, 10.0, 10.0, 10.0, others_changed
        )
        assert bench.cause(point) == expected


def test_a_prediction_knows_how_long_its_run_went_on_and_whether_a_neighbour_came(tmp_path):
    # "a" runs 0..20 s at 10 it/s (200 iterations), a sample every 0.5 s; "b" starts at 12 s.
    # A prediction at 5 s (50 done, 25%) sees "a" 5 s into its run, and its stretch (to the
    # end of its work at 20 s) holds b's start; one at 14 s (70%) does not: b started before.
    with bench_script("local_evidence") as bench, Store(tmp_path / "state.db") as store:
        a = store.submit(command("a", 200), 1000.0)
        store.transition(a, Lifecycle.RUNNING, 1000.0, allocation=(0,))
        for step in range(1, 41):
            store.add_progress(a, 1000.0 + 0.5 * step, 5 * step, 1)
        b = store.submit(command("b", 1000), 1012.0)
        store.transition(b, Lifecycle.RUNNING, 1012.0, allocation=(1,))
        store.transition(a, Lifecycle.SUCCEEDED, 1020.0)
        points = {round(p.done, 3): p for p in bench.prediction_points(store)}
    assert points[0.25].since_change_s == pytest.approx(4.5)  # from the first sample, at 0.5 s
    assert points[0.25].stretch_s == pytest.approx(15.0)
    assert points[0.25].others_changed
    assert not points[0.7].others_changed
    assert points[0.7].predicted == pytest.approx(10.0)
