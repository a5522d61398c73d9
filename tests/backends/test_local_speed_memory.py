"""qosched.backends.local.speed_memory: speeds measured by one job are the next one's prior."""

from __future__ import annotations

import dataclasses
import math
import re
import sqlite3
import sys
import time
from pathlib import Path

import pytest
from command_jobs import CORES, command_spec

from qosched.backends.local.service import LocalService, wait_until_idle
from qosched.backends.local.speed_memory import (
    DEFAULT_SPREAD,
    MAX_SPREAD,
    MIN_SPREAD,
    CountTrust,
    drift_spread,
    measured_rates,
    measured_spread,
    measured_startup_s,
    measured_trust,
    remembered_curve,
    speed_key,
)
from qosched.backends.local.store import Store
from qosched.cluster.throughput import SpeedCurve
from qosched.trainingjob.jobspec import Deadline, TrainingJobSpec

pytestmark = pytest.mark.process

WAIT_S = 90.0


def test_measured_rates_by_hand() -> None:
    samples = [
        # 1 worker: 10 it over 2 s, then 12 it over 2 s, then 20 it over 2 s: 42 / 6 = 7 it/s
        (0.0, 0, 1), (2.0, 10, 1), (4.0, 22, 1), (6.0, 42, 1),
        # a re-size: the interval across it is not counted
        (7.0, 49, 2),
        # 2 workers: 30 it over 3 s twice, 30 over 1 s: 90 / 7 s
        (10.0, 79, 2), (13.0, 109, 2), (14.0, 139, 2),
        # a restart from a checkpoint (progress went back), then a 40 s gap: neither counted
        (15.0, 120, 2), (55.0, 400, 2),
        # 3 workers, observed for 1 s only: too little to remember
        (56.0, 410, 3), (56.5, 420, 3), (57.0, 430, 3),
    ]  # fmt: skip
    rates = measured_rates(samples)
    assert rates == pytest.approx({1: 7.0, 2: 90 / 7})


def test_remembered_curve_anchors_the_counts_it_knows_and_scales_the_rest() -> None:
    prior = SpeedCurve("command", 1, (0.0, 1.0, 2.0, 3.0, 4.0), ())
    curve = remembered_curve(prior, {2: 10.0})
    # Count 2 is the measured 10 it/s; the others keep the prior's shape, x5 (10 / 2).
    assert curve.speeds == (0.0, 5.0, 10.0, 15.0, 20.0)
    assert curve.measured == (2,)
    both = remembered_curve(prior, {1: 3.0, 4: 8.0, 9: 50.0})  # 9 is past the pool: ignored
    # 2 is nearest 1 (x3), 3 is nearest 4 (x2).
    assert both.speeds == (0.0, 3.0, 6.0, 6.0, 8.0)
    assert both.measured == (1, 4)
    assert remembered_curve(prior, {}) is prior


def test_the_spread_is_the_log_speed_deviation_of_stretches_of_four_seconds() -> None:
    samples = [
        # 1 worker, 2 s intervals: 40 it in the first 4 s (10 it/s), 60 in the next (15 it/s);
        # the count's mean is 100 it / 8 s = 12.5 it/s.
        (0.0, 0, 1), (2.0, 20, 1), (4.0, 40, 1), (6.0, 70, 1), (8.0, 100, 1),
        # 2 workers for 4 s at 10 it/s, after a re-size (the interval across it not counted):
        # one stretch, at its count's own mean, so no deviation.
        (9.0, 105, 2), (11.0, 125, 2), (13.0, 145, 2),
    ]  # fmt: skip
    # Stretches (4 s each): log(10 / 12.5), log(15 / 12.5), 0; equal weights.
    expected = math.sqrt((math.log(0.8) ** 2 + math.log(1.2) ** 2) / 3)
    assert measured_spread(samples) == pytest.approx(expected)
    # One stretch says nothing of how the speed moves.
    assert measured_spread(samples[:3]) is None
    # A steady job is held to the floor; a wild one to the ceiling.
    steady = [(2.0 * i, 10 * i, 1) for i in range(6)]
    assert measured_spread(steady) == MIN_SPREAD
    wild = [(0.0, 0, 1), (4.0, 1, 1), (8.0, 1001, 1)]
    assert measured_spread(wild) == MAX_SPREAD


def test_the_drift_is_the_largest_change_of_a_count_run_twice() -> None:
    assert drift_spread({1: 10.0, 2: 16.0}, {1: 8.0, 4: 30.0}) == pytest.approx(math.log(1.25))
    assert drift_spread({1: 10.0}, {2: 16.0}) == 0.0  # no count run both times
    assert drift_spread({}, {1: 5.0}) == 0.0


def test_a_remembered_curve_carries_its_spread_and_a_table_none() -> None:
    prior = SpeedCurve("command", 1, (0.0, 1.0, 2.0), ())
    assert prior.spread is None
    assert remembered_curve(prior, {1: 3.0}, 0.2).spread == 0.2
    assert remembered_curve(prior, {1: 3.0}).spread == DEFAULT_SPREAD  # remembered before it
    assert remembered_curve(prior, {1: 3.0}, 0.001).spread == MIN_SPREAD
    assert remembered_curve(prior, {}, 0.2) is prior  # nothing remembered: the table's


# --- per-count trust --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("trust", "floor", "expected"),
    [
        # 8 s, no spread of its own: the floor with the short-measurement term 0.06 / 8.
        pytest.param(CountTrust(8.0), 0.069, math.sqrt(0.069**2 + 0.06 / 8), id="8s-floor"),
        # 5 minutes: the term is 0.0002, nearly nothing.
        pytest.param(CountTrust(300.0), 0.069, math.sqrt(0.069**2 + 0.06 / 300), id="5min"),
        # The count's own spread where it is wider than the floor ...
        pytest.param(CountTrust(300.0, 0.1), 0.069, math.sqrt(0.1**2 + 0.06 / 300), id="own"),
        # ... and the floor where it is narrower (a few stretches say little).
        pytest.param(CountTrust(60.0, 0.03), 0.069, math.sqrt(0.069**2 + 0.001), id="floored"),
        # Clamped like every spread: a count run for a sliver of a second is not trusted at all.
        pytest.param(CountTrust(0.01), 0.02, MAX_SPREAD, id="sliver"),
    ],
)
def test_a_count_measured_briefly_is_trusted_less(trust, floor, expected) -> None:
    assert trust.sigma(floor) == pytest.approx(expected)


def test_a_count_trust_refuses_what_no_measurement_gives() -> None:
    for seconds, spread in ((0.0, None), (-1.0, None), (math.nan, None), (5.0, 0.0), (5.0, 2.0)):
        with pytest.raises(ValueError, match=r"seconds|spread"):
            CountTrust(seconds, spread)


def test_measured_trust_by_hand() -> None:
    samples = [
        # 1 worker, 2 s intervals: 10 it/s for 4 s, 15 it/s for 4 s (mean 12.5): 8 s measured,
        # its own spread sqrt((log(0.8)^2 + log(1.2)^2) / 2) over its two stretches.
        (0.0, 0, 1), (2.0, 20, 1), (4.0, 40, 1), (6.0, 70, 1), (8.0, 100, 1),
        # 2 workers for 6 s at 10 it/s after a re-size: one full stretch, so no spread of its own.
        (9.0, 105, 2), (11.0, 125, 2), (13.0, 145, 2), (15.0, 165, 2),
        # 3 workers for 1 s: no speed remembered, so no trust either.
        (16.0, 170, 3), (16.5, 175, 3), (17.0, 180, 3),
    ]  # fmt: skip
    trust = measured_trust(samples)
    assert set(trust) == set(measured_rates(samples)) == {1, 2}
    own = math.sqrt((math.log(0.8) ** 2 + math.log(1.2) ** 2) / 2)
    assert trust[1].seconds == pytest.approx(8.0)
    assert trust[1].spread == pytest.approx(own)
    assert (trust[2].seconds, trust[2].spread) == (pytest.approx(6.0), None)


def test_a_remembered_curve_gives_each_count_the_trust_of_the_speed_it_comes_from() -> None:
    prior = SpeedCurve("command", 1, (0.0, 1.0, 2.0, 3.0, 4.0), ())
    trust = {1: CountTrust(300.0, 0.05), 2: CountTrust(8.0)}
    curve = remembered_curve(prior, {1: 17.4, 2: 29.7}, 0.069, trust)
    long, short = math.sqrt(0.069**2 + 0.06 / 300), math.sqrt(0.069**2 + 0.06 / 8)
    # 3 and 4 are scaled from 2 (nearest), so they are as trusted as it.
    assert curve.spreads == pytest.approx((0.0, long, short, short, short))
    assert curve.spread == 0.069
    assert curve.spread_at(1) == pytest.approx(long) and curve.spread_at(2) == pytest.approx(short)
    # A count remembered without its trust (kept before it was) keeps the key's spread.
    older = remembered_curve(prior, {1: 17.4, 2: 29.7}, 0.069, {2: CountTrust(8.0)})
    assert older.spreads[1] == 0.069 and older.spread_at(1) == 0.069
    # Without any, the curve is what it was: one spread for every count.
    assert remembered_curve(prior, {1: 17.4}, 0.069).spreads == ()
    assert remembered_curve(prior, {1: 17.4}, 0.069).spread_at(2) == 0.069


def test_the_store_keeps_each_speed_with_how_long_it_was_measured(tmp_path) -> None:
    with Store(tmp_path / "state.db") as store:
        store.remember_speeds("k", {1: 5.0, 2: 9.0}, "j-000001", 10.0, {1: CountTrust(120.0, 0.04)})
        assert store.remembered_trust("k") == {1: CountTrust(120.0, 0.04)}  # 2 kept without
        store.remember_speeds("k", {2: 9.5}, "j-000002", 20.0, {2: CountTrust(8.0)})
        assert store.remembered_trust("k") == {1: CountTrust(120.0, 0.04), 2: CountTrust(8.0)}
        store.remember_speeds("k", {1: 5.5}, "j-000003", 30.0)  # replaced without: none kept
        assert store.remembered_trust("k") == {2: CountTrust(8.0)}
        assert store.remembered_speeds("k") == ({2: 9.5, 1: 5.5}, "j-000003")


def test_a_version_5_database_keeps_its_speeds_without_their_trust(tmp_path) -> None:
    path = tmp_path / "state.db"
    Store(path).close()
    with sqlite3.connect(path) as db:  # as the qosched before per-count trust left it
        db.execute("DROP TABLE speeds")
        db.execute(
            "CREATE TABLE speeds (key TEXT NOT NULL, workers INTEGER NOT NULL CHECK (workers > 0), "
            "rate REAL NOT NULL CHECK (rate > 0), job_id TEXT NOT NULL, t REAL NOT NULL, "
            "PRIMARY KEY (key, workers))"
        )
        db.execute("INSERT INTO speeds VALUES ('k', 2, 29.7, 'j-000001', 1.0)")
        db.execute("UPDATE schema_version SET version = 5")
    db.close()
    with Store(path) as store:
        assert store.schema_version == 6
        assert store.remembered_speeds("k") == ({2: 29.7}, "j-000001")
        assert store.remembered_trust("k") == {}
        store.remember_speeds("k", {2: 25.2}, "j-000002", 2.0, {2: CountTrust(70.0, 0.1)})
        assert store.remembered_trust("k") == {2: CountTrust(70.0, 0.1)}


def test_the_store_keeps_the_latest_spread_of_a_key(tmp_path) -> None:
    with Store(tmp_path / "state.db") as store:
        assert store.remembered_spread("k") is None
        store.remember_spread("k", 0.3, "j-000001", 10.0)
        store.remember_spread("k", 0.05, "j-000002", 20.0)
        assert store.remembered_spread("k") == 0.05
        for bad in (0.0, -0.1, float("nan"), 2.0):
            with pytest.raises(Exception, match="no spread"):
                store.remember_spread("k", bad, "j-000003", 30.0)


def script_spec(tmp_path: Path, body: str, **changes) -> TrainingJobSpec:
    script = tmp_path / "train.py"
    script.write_text(body)
    spec = TrainingJobSpec(
        "s", 10, Deadline(relative_s=60), command=("python3", str(script)), best_effort=True
    )
    return dataclasses.replace(spec, **changes)


def test_the_speed_key_follows_the_script_content_the_command_and_the_override(tmp_path) -> None:
    first = speed_key(script_spec(tmp_path, "print(1)\n"))
    assert first == speed_key(script_spec(tmp_path, "print(1)\n", iterations=99, seed=3))
    assert first != speed_key(script_spec(tmp_path, "print(2)\n"))  # the script was edited
    assert first != speed_key(
        dataclasses.replace(script_spec(tmp_path, "print(1)\n"), launcher="torchrun")
    )
    assert speed_key(script_spec(tmp_path, "x", speed_key="resnet/v2")) == "user:resnet/v2"
    builtin = TrainingJobSpec("b", 10, Deadline(relative_s=60), workload="cnn")
    assert speed_key(builtin) == "workload:cnn"


def test_the_store_keeps_the_latest_speed_per_count_and_who_measured_it(tmp_path) -> None:
    with Store(tmp_path / "state.db") as store:
        assert store.remembered_speeds("k") == ({}, None)
        store.remember_speeds("k", {1: 5.0, 2: 9.0}, "j-000001", 10.0)
        store.remember_speeds("k", {2: 9.5}, "j-000002", 20.0)
        store.remember_speeds("other", {1: 1.0}, "j-000003", 30.0)
        assert store.remembered_speeds("k") == ({1: 5.0, 2: 9.5}, "j-000002")
        with pytest.raises(Exception, match="no speed"):
            store.remember_speeds("k", {0: 1.0}, "j-000004", 40.0)


def test_a_start_up_is_the_longest_wait_from_a_launch_to_its_first_report() -> None:
    samples = [(13.0, 1, 1), (14.0, 10, 1), (52.5, 40, 1), (60.0, 90, 1)]
    # Launched at 10 (first report 13: 3 s) and at 50 (first report 52.5: 2.5 s); a launch
    # after the last report tells nothing.
    assert measured_startup_s([10.0, 50.0, 70.0], samples) == 3.0
    assert measured_startup_s([70.0], samples) is None
    assert measured_startup_s([], samples) is None


def test_the_store_keeps_the_latest_start_up_of_a_key(tmp_path) -> None:
    with Store(tmp_path / "state.db") as store:
        assert store.remembered_startup("k") is None
        store.remember_startup("k", 3.5, "j-000001", 10.0)
        store.remember_startup("k", 2.0, "j-000002", 20.0)
        assert store.remembered_startup("k") == 2.0
        for bad in (-1.0, float("nan"), 1e9):
            with pytest.raises(Exception, match="no start-up"):
                store.remember_startup("k", bad, "j-000003", 30.0)


def test_a_version_1_database_gains_the_speeds_table(tmp_path) -> None:
    path = tmp_path / "state.db"
    with Store(path) as store:
        store.remember_speeds("k", {1: 5.0}, "j-000001", 1.0)
    with sqlite3.connect(path) as db:  # as an older qosched left it
        db.execute("DROP TABLE speeds")
        db.execute("DROP TABLE startups")
        db.execute("DROP TABLE spreads")
        db.execute("DROP TABLE machine_use")
        db.execute("UPDATE schema_version SET version = 1")
    db.close()
    with Store(path) as store:
        assert store.schema_version == 6
        assert store.remembered_speeds("k") == ({}, None)
        assert store.remembered_startup("k") is None  # the start-ups table came with it
        assert store.remembered_spread("k") is None  # and the spreads table


# About 20 iterations a second on one core, reported as it goes.
STEADY = """
import json, os, time
for i in range(1, int(os.environ["QOSCHED_ITERATIONS"]) + 1):
    time.sleep(0.05)
    with open(os.environ["QOSCHED_PROGRESS_FILE"], "a") as out:
        out.write(json.dumps({"iteration": i}) + "\\n")
"""


def _wait_for(service: LocalService, job_id: str, predicate) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate(service.job(job_id)):
        assert time.monotonic() < deadline, service.job(job_id)
        service.step()
        time.sleep(0.1)


def _earliest_in_s(error: str) -> int:
    match = re.search(r"earliest deadline that can be guaranteed now is (\d+)s from now", error)
    assert match, error
    return int(match.group(1))


@pytest.mark.slow
def test_a_new_command_is_measured_then_guaranteed_and_remembered_the_next_time(tmp_path) -> None:
    """The issue's case: a command never seen is measured first (profiling), then guaranteed
    on what was measured; the same command again is guaranteed at once on the remembered
    speed, and an impossible deadline is declined with one that, used, is met."""
    script = tmp_path / "steady.py"
    script.write_text(STEADY)
    argv = [sys.executable, str(script)]
    service = LocalService.open(tmp_path / "home", cpus=CORES[:1], tick_s=0.2, grace_s=2.0)

    def strict(name: str, deadline_s: int) -> TrainingJobSpec:
        spec = command_spec(name, argv, iterations=300, deadline_s=deadline_s)
        return dataclasses.replace(spec, best_effort=False)

    try:
        # 300 iterations at about 20 it/s: 15 s; the placeholder (1 it/s) would decline it.
        first = service.submit_spec(strict("first", 60))
        assert first.state == "profiling"
        assert first.speed_source == "being measured (profiling)"
        _wait_for(service, first.id, lambda job: job.state != "profiling")
        [admitted] = [e for e in service.store.events(first.id) if e.kind == "admitted"]
        assert admitted.detail["guaranteed"] is True
        assert 8.0 < admitted.detail["measured"]["1"] < 21.0  # <= 20 it/s, less when busy
        assert wait_until_idle(service, timeout_s=WAIT_S, poll_s=0.1)
        done = service.job(first.id)
        assert done.state == "succeeded" and done.finished_at <= done.deadline_at
        assert done.iterations_done == 300  # the measured iterations counted toward it

        again = service.submit_spec(strict("again", 40))
        assert again.state == "queued"  # judged at once: no measuring
        assert again.speed_source == f"remembered from {first.id}"
        [admitted] = [e for e in service.store.events(again.id) if e.kind == "admitted"]
        assert admitted.detail["guaranteed"] is True
        assert wait_until_idle(service, timeout_s=WAIT_S, poll_s=0.1)
        done = service.job(again.id)
        assert done.state == "succeeded" and done.finished_at <= done.deadline_at

        # The start-up (starting Python, before the first report) is remembered too, and how
        # far the speed strayed.
        key = speed_key(strict("x", 1))
        assert service.store.remembered_startup(key) > 0
        spread = service.store.remembered_spread(key)
        assert MIN_SPREAD <= spread <= MAX_SPREAD
        impossible = service.submit_spec(strict("impossible", 3))
        assert impossible.state == "declined"
        earliest = _earliest_in_s(impossible.error)
        # Named on the remembered speed's 5% quantile (1.645 spreads below), start-up before.
        rate = service.store.remembered_speeds(key)[0][1]
        assert earliest >= 300 / rate * math.exp(1.6449 * spread)
        assert 15 <= earliest <= 90
        used = service.submit_spec(strict("earliest", earliest))
        assert used.state == "queued"
        assert wait_until_idle(service, timeout_s=WAIT_S, poll_s=0.1)
        done = service.job(used.id)
        assert done.state == "succeeded" and done.finished_at <= done.deadline_at
    finally:
        service.close()
    # Remembered across a restart of the service.
    reopened = LocalService.open(tmp_path / "home", cpus=CORES[:1], tick_s=0.2, grace_s=2.0)
    try:
        rates, measured_by = reopened.store.remembered_speeds(speed_key(command_spec("x", argv)))
        assert 1 in rates and measured_by is not None
    finally:
        reopened.close()


@pytest.mark.slow
def test_a_new_command_that_cannot_make_it_is_declined_after_measuring(tmp_path) -> None:
    """Measured at about 20 it/s, 600 iterations need about 30 s: a 12 s deadline is declined
    once measured, with the earliest deadline it would get, and its runner is stopped; what it
    measured is remembered, so the same spec is then declined at once."""
    script = tmp_path / "steady.py"
    script.write_text(STEADY)
    argv = [sys.executable, str(script)]
    service = LocalService.open(tmp_path / "home", cpus=CORES[:1], tick_s=0.2, grace_s=2.0)
    spec = dataclasses.replace(
        command_spec("late", argv, iterations=600, deadline_s=12), best_effort=False
    )
    try:
        late = service.submit_spec(spec)
        assert late.state == "profiling"
        _wait_for(service, late.id, lambda job: job.state != "profiling")
        declined = service.job(late.id)
        assert declined.state == "declined"
        assert declined.iterations_done < 600  # stopped, not run to the end
        assert _earliest_in_s(declined.error) >= 20
        assert not service.job(late.id).cpus
        again = service.submit_spec(spec)
        assert again.state == "declined"  # on what the first measured, at once
        assert again.speed_source is None
        [speed] = [e for e in service.store.events(again.id) if e.kind == "speed"]
        assert speed.detail["remembered_from"] == late.id
        # The spread its promise on one core rests on: that count's own trust, floored at the
        # job's spread (CountTrust.sigma; DEFAULT_SPREAD where too few stretches gave one),
        # wider than the job's spread alone.
        key = speed_key(spec)
        trust = service.store.remembered_trust(key)
        floor = service.store.remembered_spread(key) or DEFAULT_SPREAD
        assert speed.detail["spreads"] == {"1": pytest.approx(trust[1].sigma(floor))}
        assert speed.detail["spreads"]["1"] > floor
    finally:
        service.close()


SILENT = """
import time
time.sleep(60)
"""


def test_a_command_that_reports_nothing_is_not_promised_anything(tmp_path, monkeypatch) -> None:
    """No progress within the bound: no speed to judge on; declined, or run best effort when
    its spec allows."""
    monkeypatch.setattr("qosched.backends.local.profiling.MAX_PROFILE_S", 2.0)
    script = tmp_path / "silent.py"
    script.write_text(SILENT)
    argv = [sys.executable, str(script)]
    service = LocalService.open(tmp_path / "home", cpus=CORES[:2], tick_s=0.2, grace_s=2.0)
    try:
        strict = service.submit_spec(
            dataclasses.replace(command_spec("strict", argv, deadline_s=600), best_effort=False)
        )
        _wait_for(service, strict.id, lambda job: job.state not in ("profiling",))
        _wait_for(service, strict.id, lambda job: job.finished)
        declined = service.job(strict.id)
        assert declined.state == "declined"
        assert "reported no usable progress" in declined.error
        hopeful = service.submit_spec(command_spec("hopeful", argv, deadline_s=600))
        _wait_for(service, hopeful.id, lambda job: job.state != "profiling")
        running = service.job(hopeful.id)
        assert running.state == "running" and running.guaranteed is False
        service.cancel(hopeful.id)
        _wait_for(service, hopeful.id, lambda job: job.finished)
    finally:
        service.stop_runners(grace_s=1.0)
        service.close()
