"""Tests for qosched.cluster.generate: seeded synthetic traces and their configured shape."""

from __future__ import annotations

import pytest

from qosched.cluster.generate import GeneratorConfig, generate_trace
from qosched.cluster.throughput import ThroughputModel
from qosched.core.errors import InputError


@pytest.fixture(scope="module")
def a100() -> ThroughputModel:
    return ThroughputModel.bundled("A100")


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
