"""bench/local_evidence.py's prediction error: what it replays and what it compares."""

from __future__ import annotations

import argparse

import pytest

from bench_scripts import bench_script
from qosched.backends.local.store import Lifecycle, Store
from qosched.trainingjob.jobspec import Deadline, Resources, TrainingJobSpec


def command(name: str, iterations: int) -> TrainingJobSpec:
    return TrainingJobSpec(
        name=name,
        iterations=iterations,
        deadline=Deadline(relative_s=600),
        command=("python3", "train.py"),
        resources=Resources(min_cpus=1, max_cpus=1),
        best_effort=True,
        speed_key="bench-test",
    )


def run_steadily(store: Store, spec: TrainingJobSpec, start: float, rate: float) -> None:
    """A job that runs ``spec`` at ``rate`` iterations/s on one core from ``start``, a sample
    every 0.5 s, then takes 1 s to exit after its last iteration (a command's exit)."""
    job_id = store.submit(spec, start)
    store.transition(job_id, Lifecycle.RUNNING, start, allocation=(0,))
    t = start
    for step in range(1, round(spec.iterations / rate / 0.5) + 1):
        t = start + 0.5 * step
        store.add_progress(job_id, t, round(rate * 0.5 * step), 1)
    store.add_progress(job_id, t + 1.0, spec.iterations, 1)
    store.transition(job_id, Lifecycle.SUCCEEDED, t + 1.0)


def test_the_error_is_of_the_remaining_time_and_its_window_ends_with_the_work(tmp_path):
    # 200 iterations at 10 it/s. At the first sample the predictor has only the placeholder
    # prior, 1 it/s: the remaining time is predicted 10x too long, an error of 900 % (the
    # speed's own error would be 90 %). From the second sample on it predicts 10 it/s exactly,
    # and the job runs at 10 it/s until its last iteration: error 0, also where the next 4 s
    # reach past the last iteration into the command's 1 s exit.
    with bench_script("local_evidence") as bench, Store(tmp_path / "state.db") as store:
        run_steadily(store, command("steady", 200), 1000.0, 10.0)
        errors = bench.prediction_errors(store)["next_window"]
    assert errors[(0.0, 0.05)][0] == pytest.approx(9.0)
    later = [e for bucket, values in errors.items() for e in values if bucket[0] >= 0.05]
    later += errors[(0.0, 0.05)][1:]
    assert len(later) >= 30
    assert max(later) == pytest.approx(0.0, abs=1e-9)


def test_a_job_starts_from_what_earlier_jobs_of_its_key_had_measured_by_its_submission(tmp_path):
    # The first job ends before the second is submitted. What the service remembers of it
    # (speed_memory.measured_rates) counts its exit: 95 iterations between its first and last
    # samples in 9.5 s, then 1 s with none: 95 / 10.5 it/s. The second job starts from that, not
    # the 1 it/s placeholder: at its first sample the remaining time at 10 it/s is predicted
    # 10.5 / 9.5 - 1 = 10.5 % too long (900 % on the placeholder). The third job, at 20 it/s,
    # ends after the second's submission: not used for it.
    with bench_script("local_evidence") as bench, Store(tmp_path / "state.db") as store:
        run_steadily(store, command("first", 100), 1000.0, 10.0)
        run_steadily(store, command("third", 200), 1095.0, 20.0)  # ends at 1106
        run_steadily(store, command("second", 200), 1100.0, 10.0)
        second = next(r for r in store.list() if r.name == "second")
        remembered = bench._remembered_at_submission(store, second, store.list())
        errors = bench.prediction_errors(store)["next_window"]
    assert remembered == {1: pytest.approx(95.0 / 10.5)}
    assert errors[(0.0, 0.05)] == [pytest.approx(10.5 / 9.5 - 1.0)]  # the second's first sample


def test_a_job_measured_first_is_scored_from_its_admission_on_what_it_measured(tmp_path):
    # Profiling for its first 5 s at 10 it/s, then admitted with 10 it/s measured: nothing is
    # predicted while it is measured (no sample before 1005 s is scored), and from then on the
    # prediction starts from the measured speed, not the 1 it/s placeholder: error 0 throughout.
    with bench_script("local_evidence") as bench, Store(tmp_path / "state.db") as store:
        spec = command("measured", 200)
        job_id = store.submit(spec, 1000.0)
        store.transition(job_id, Lifecycle.PROFILING, 1000.0)
        store.add_event(job_id, 1005.0, "admitted", {"guaranteed": True, "measured": {"1": 10.0}})
        store.transition(job_id, Lifecycle.RUNNING, 1005.0, allocation=(0,))
        for step in range(1, 41):
            store.add_progress(job_id, 1000.0 + 0.5 * step, 5 * step, 1)
        store.transition(job_id, Lifecycle.SUCCEEDED, 1020.5)
        errors = bench.prediction_errors(store)["next_window"]
    scored = [e for values in errors.values() for e in values]
    assert errors[(0.0, 0.05)] == [] and errors[(0.05, 0.1)] == []  # 5 s of 20: before 1005
    assert len(scored) >= 20
    assert max(scored) == pytest.approx(0.0, abs=1e-9)


def test_the_remaining_time_on_its_cores_and_the_short_checks_floor(tmp_path):
    # 300 iterations on one core: 10 it/s for 10 s, then 20 it/s to the end at 20 s, a sample
    # every 0.5 s. At 3 s (30 done, the first sample at 10%) the prediction is 10 it/s (what it
    # ran at). The next 4 s run at 10 it/s: error 0. Its cores never change, so its remaining
    # time there is 17 s for 270 iterations, 15.88 it/s: the remaining time predicted (27 s) is
    # 27 / 17 - 1 = 58.8 % too long. The floor: the stretch's mean 15.88 it/s predicts the
    # next 4 s's 10 it/s with a remaining time 1 - 10 / 15.88 = 37.0 % too short.
    with bench_script("local_evidence") as bench, Store(tmp_path / "state.db") as store:
        spec = command("faster", 300)
        job_id = store.submit(spec, 1000.0)
        store.transition(job_id, Lifecycle.RUNNING, 1000.0, allocation=(0,))
        for step in range(1, 41):
            t = 0.5 * step
            done = 10 * t if t <= 10 else 100 + 20 * (t - 10)
            store.add_progress(job_id, 1000.0 + t, round(done), 1)
        store.transition(job_id, Lifecycle.SUCCEEDED, 1020.0)
        errors = bench.prediction_errors(store)
    at_3_s = {horizon: found[(0.10, 0.25)][0] for horizon, found in errors.items()}
    assert at_3_s == {
        "next_window": pytest.approx(0.0, abs=1e-9),
        "to_change": pytest.approx(27 / 17 - 1),
        "window_floor": pytest.approx(1 - 170 / 270),
    }


def test_kept_stores_replay_to_the_same_errors(tmp_path, capsys):
    # A run's store kept with --keep, replayed by `predictions DIR`: the same samples scored as
    # in the run (one steady job: the placeholder's 900 % at its first sample, 0 after).
    run = tmp_path / "run"
    run.mkdir()
    with bench_script("local_evidence") as bench:
        with Store(run / "state.db") as store:
            run_steadily(store, command("steady", 200), 1000.0, 10.0)
            in_the_run = bench.prediction_errors(store)
        bench.keep_store(tmp_path / "kept", run / "state.db", "qos", 1)
        with Store(tmp_path / "kept" / "qos-1.db") as kept:
            assert bench.prediction_errors(kept) == in_the_run
        bench.replay_predictions(argparse.Namespace(folder=tmp_path / "kept"))
    printed = capsys.readouterr().out
    assert "replayed on 1 kept stores" in printed
    # Its one sample under 5% done (5 of 200) is predicted at the placeholder, 900 % off, in
    # both predicted tables; the stretch's own mean knows its speed (the floor's table).
    assert printed.count("| 0%-5% | 1 | 900.0% | 900.0% | 0% |") == 2
    assert printed.count("| 0%-5% | 1 | 0.0% | 0.0% | 100% |") == 1
