"""Tests for qosched.cluster.generate: seeded synthetic traces and their configured shape."""

from __future__ import annotations

import pytest

from qosched.cli.main import main
from qosched.cluster.generate import MAX_DURATION_S, GeneratorConfig, generate_trace
from qosched.cluster.throughput import ThroughputModel
from qosched.cluster.traces import read_trace, write_trace
from qosched.core.errors import InputError


@pytest.fixture(scope="module")
def t4() -> ThroughputModel:
    return ThroughputModel.bundled("T4")


# --- determinism ------------------------------------------------------------------------------


def test_same_config_and_seed_give_identical_jobs(a100):
    config = GeneratorConfig(jobs=200, seed=7, best_effort_fraction=0.3)
    assert generate_trace(config, a100) == generate_trace(config, a100)


def test_different_seed_gives_different_jobs(a100):
    first = generate_trace(GeneratorConfig(jobs=200, seed=7), a100)
    second = generate_trace(GeneratorConfig(jobs=200, seed=8), a100)
    assert first != second


def test_generates_the_configured_number_of_jobs_with_unique_ids(a100):
    jobs = generate_trace(GeneratorConfig(jobs=37, seed=1), a100)
    assert len(jobs) == 37
    assert len({job.job_id for job in jobs}) == 37


def test_submit_times_start_at_zero_and_never_decrease(a100):
    jobs = generate_trace(GeneratorConfig(jobs=300, seed=2), a100)
    submits = [job.submit_s for job in jobs]
    assert submits[0] == 0.0
    assert submits == sorted(submits)


# --- requests ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cluster_workers", [1, 4, 16, 128], ids=["1-gpu", "4-workers", "16", "128"]
)
@pytest.mark.parametrize("tables", ["a100", "t4"])
def test_requested_workers_are_available_on_the_curve_and_fit_the_cluster(
    request, tables, cluster_workers
):
    throughputs = request.getfixturevalue(tables)
    config = GeneratorConfig(jobs=400, cluster_workers=cluster_workers, seed=3)
    for job in generate_trace(config, throughputs):
        curve = throughputs.curve(job.model, job.batch_size)
        assert curve.available(job.requested_workers), job
        assert job.requested_workers <= cluster_workers, job


def test_models_and_batch_sizes_come_from_the_tables(a100):
    for job in generate_trace(GeneratorConfig(jobs=300, seed=4), a100):
        assert a100.has(job.model, job.batch_size), job


def test_duration_is_iterations_over_the_speed_on_the_requested_workers(a100):
    for job in generate_trace(GeneratorConfig(jobs=300, seed=5), a100):
        rate = a100.curve(job.model, job.batch_size).rate(job.requested_workers)
        assert job.duration_s == pytest.approx(job.iterations / rate, abs=1e-3), job


# --- deadlines --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tightness", [(0.5, 1.5), (1.0, 1.0), (2.0, 4.0)], ids=["0.5-1.5", "exactly-1", "2-4"]
)
def test_deadlines_lie_within_the_tightness_range(a100, tightness):
    lo, hi = tightness
    config = GeneratorConfig(jobs=400, tightness=tightness, seed=6)
    for job in generate_trace(config, a100):
        assert job.deadline_s is not None
        assert job.submit_s + lo * job.duration_s - 1e-3 <= job.deadline_s, job
        assert job.deadline_s <= job.submit_s + hi * job.duration_s + 1e-3, job


@pytest.mark.parametrize(
    ("fraction", "expected"),
    [(0.0, 0), (1.0, 300)],
    ids=["none-best-effort", "all-best-effort"],
)
def test_best_effort_fraction_extremes(a100, fraction, expected):
    config = GeneratorConfig(jobs=300, best_effort_fraction=fraction, seed=9)
    jobs = generate_trace(config, a100)
    assert sum(job.best_effort for job in jobs) == expected


def test_best_effort_fraction_is_roughly_honoured(a100):
    jobs = generate_trace(GeneratorConfig(jobs=2000, best_effort_fraction=0.3, seed=10), a100)
    share = sum(job.best_effort for job in jobs) / len(jobs)
    assert 0.25 <= share <= 0.35


# --- offered load -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("load", "cluster_workers"),
    [(0.5, 128), (1.0, 128), (2.0, 64)],
    ids=["half-load", "full-load", "overload-small-cluster"],
)
def test_realised_offered_load_is_close_to_the_configured_one(a100, load, cluster_workers):
    config = GeneratorConfig(jobs=2000, load=load, cluster_workers=cluster_workers, seed=11)
    jobs = generate_trace(config, a100)
    work = sum(job.requested_workers * job.duration_s for job in jobs)
    realised = work / (cluster_workers * jobs[-1].submit_s)
    assert realised == pytest.approx(load, rel=0.25)


# --- invalid configs --------------------------------------------------------------------------

BAD_CONFIGS = [
    ("zero-jobs", {"jobs": 0}, "jobs"),
    ("zero-load", {"load": 0.0}, "load"),
    ("negative-load", {"load": -1.0}, "load"),
    ("nan-load", {"load": float("nan")}, "load"),
    ("inf-load", {"load": float("inf")}, "load"),
    ("zero-cluster", {"cluster_workers": 0}, "cluster_workers"),
    ("zero-median-duration", {"median_duration_s": 0.0}, "median_duration_s"),
    ("negative-sigma", {"duration_sigma": -0.1}, "duration_sigma"),
    ("min-above-max-duration", {"min_duration_s": 10.0, "max_duration_s": 5.0}, "min_duration_s"),
    ("zero-min-duration", {"min_duration_s": 0.0}, "min_duration_s"),
    ("reversed-tightness", {"tightness": (2.0, 1.0)}, "tightness"),
    ("zero-tightness", {"tightness": (0.0, 1.0)}, "tightness"),
    ("fraction-above-1", {"best_effort_fraction": 1.5}, "best_effort_fraction"),
    ("negative-fraction", {"best_effort_fraction": -0.1}, "best_effort_fraction"),
    ("a-million-and-one-jobs", {"jobs": 1_000_001}, "jobs"),
    ("inf-median-duration", {"median_duration_s": float("inf")}, "median_duration_s"),
    ("inf-sigma", {"duration_sigma": float("inf")}, "duration_sigma"),
    ("inf-tightness", {"tightness": (0.5, float("inf"))}, "tightness"),
    ("negative-seed", {"seed": -1}, "seed"),
    ("sigma-700", {"duration_sigma": 700.0}, "duration_sigma"),
    ("sigma-1e300", {"duration_sigma": 1e300}, "duration_sigma"),
    ("sigma-just-above-10", {"duration_sigma": 10.01}, "duration_sigma"),
    ("tightness-1e300", {"tightness": (1e300, 1e300)}, "tightness"),
    ("tightness-above-100", {"tightness": (0.5, 101.0)}, "tightness"),
    ("tightness-below-a-thousandth", {"tightness": (1e-4, 1.0)}, "tightness"),
    ("load-1e-300", {"load": 1e-300}, "load"),
    ("load-below-a-thousandth", {"load": 9e-4}, "load"),
    ("load-above-a-thousand", {"load": 1001.0}, "load"),
    ("median-1e300", {"median_duration_s": 1e300}, "median_duration_s"),
    ("median-below-min-duration", {"median_duration_s": 30.0}, "median_duration_s"),
    ("median-above-max-duration", {"median_duration_s": 8 * 24 * 3600.0}, "median_duration_s"),
    ("max-duration-over-366-days", {"max_duration_s": 4e8}, "min_duration_s"),
    ("cluster-larger-than-any", {"cluster_workers": 2**36 + 1}, "cluster_workers"),
]


@pytest.mark.parametrize(
    ("kwargs", "field"), [case[1:] for case in BAD_CONFIGS], ids=[case[0] for case in BAD_CONFIGS]
)
def test_invalid_config_raises_naming_the_field(kwargs, field):
    with pytest.raises(InputError) as caught:
        GeneratorConfig(**kwargs)
    assert caught.value.field == field
    assert "expected" in caught.value.reason


def test_a_million_jobs_is_the_largest_trace():
    assert GeneratorConfig(jobs=1_000_000).jobs == 1_000_000


def test_a_model_that_cannot_run_on_the_cluster_is_an_error_not_a_silent_job():
    # Only 4 and 8 GPUs measured, on a 2-GPU cluster: no request the cluster can honour.
    tables = ThroughputModel({"big": {64: {4: 1.0, 8: 1.8}}})
    with pytest.raises(InputError, match="cluster_workers"):
        generate_trace(GeneratorConfig(jobs=3, cluster_workers=2), tables)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"duration_sigma": 10.0},
        {"tightness": (100.0, 100.0)},
        {"tightness": (1e-3, 1e-3)},
        {"load": 1e-3},
        {"load": 1e3},
        {"median_duration_s": 60.0},
        {"median_duration_s": 7 * 24 * 3600.0},
    ],
    ids=["largest-sigma", "largest-tightness", "least-tightness", "least-load", "most-load",
         "median-at-min", "median-at-max"],
)  # fmt: skip
def test_jobs_at_the_ends_of_the_ranges_pass_the_trace_reader(tmp_path, a100, kwargs):
    path = tmp_path / "trace.csv"
    write_trace(generate_trace(GeneratorConfig(jobs=200, seed=3, **kwargs), a100), path)
    assert len(read_trace(path, a100).jobs) == 200


# 366-day jobs on a table of one speed, at the least load, on 100 workers: the arrivals reach
# year 9999 after about 800 jobs, and seed 0 puts a deadline, 100 run times on, past it first.
LONGEST = {
    "min_duration_s": MAX_DURATION_S,
    "median_duration_s": MAX_DURATION_S,
    "max_duration_s": MAX_DURATION_S,
    "load": 1e-3,
    "cluster_workers": 100,
}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"jobs": 2000}, "load"), ({"jobs": 2000, "tightness": (100.0, 100.0)}, "tightness")],
    ids=["arrival-past-9999", "deadline-past-9999"],
)
def test_a_job_past_year_9999_is_refused_naming_the_option(kwargs, field):
    tables = ThroughputModel({"m": {1: {1: 1.0}}})
    with pytest.raises(InputError) as caught:
        generate_trace(GeneratorConfig(seed=0, **LONGEST, **kwargs), tables)
    assert caught.value.field == field
    assert "year 9999" in caught.value.reason


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--duration-sigma", "700"], "--duration-sigma"),
        (["--tightness", "1e300", "1e300"], "--tightness"),
        (["--load", "1e-300"], "--load"),
        (["--median-duration-s", "1e300"], "--median-duration-s"),
        (["--seed", "-1"], "--seed"),
    ],
    ids=["sigma", "tightness", "load", "median", "seed"],
)
def test_cli_errors_name_the_option(tmp_path, capsys, args, option):
    out = tmp_path / "trace.csv"
    assert main(["trace", "generate", "--out", str(out), "--jobs", "5", *args]) == 2
    assert f"field {option!r}: expected" in capsys.readouterr().err
    assert not out.exists()
