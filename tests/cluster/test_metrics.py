"""Tests for qosched.cluster.metrics: summaries and the per-job CSV of a hand-made result."""

from __future__ import annotations

import csv

import pytest

from json_contracts import assert_contract, schema
from qosched.cluster.metrics import (
    JctStats,
    finished_by_all,
    summarize,
    summarize_runs,
    write_job_csv,
)
from qosched.cluster.simulator import JobOutcome, SimResult
from qosched.cluster.spec import ClusterSpec


def outcome(
    job_id: str,
    submit: float,
    deadline: float | None,
    start: float | None,
    finish: float | None,
    *,
    model: str = "m",
    workers: int = 1,
    declined: bool = False,
    worker_seconds: float = 0.0,
    reallocations: int = 0,
) -> JobOutcome:
    return JobOutcome(
        job_id=job_id,
        model=model,
        submit_s=submit,
        deadline_s=deadline,
        requested_workers=workers,
        declined=declined,
        start_s=start,
        finish_s=finish,
        worker_seconds=worker_seconds,
        reallocations=reallocations,
    )


def result_of(outcomes, timeline=(), workers: int = 8, policy: str = "hand") -> SimResult:
    return SimResult(
        policy=policy,
        cluster=ClusterSpec.from_flags(1, workers),
        outcomes=tuple(outcomes),
        allocation_timeline=tuple(timeline),
        wall_s=0.25,
        decisions=17,
    )


# Three deadline jobs (one met, one missed, one declined) and two best-effort ones on 8 GPUs.
# JCTs: deadline 50 and 60, best effort 30 and 100. Makespan 0..105.
HAND = result_of(
    [
        outcome("d1", 0.0, 100.0, 0.0, 50.0, workers=4, worker_seconds=123.4567, reallocations=1),
        outcome("d2", 10.0, 40.0, 20.0, 70.0, workers=2, worker_seconds=60.0, reallocations=2),
        outcome("d3", 20.0, 80.0, None, None, workers=2, declined=True),
        outcome("b1", 0.0, None, 5.0, 30.0, model="s", worker_seconds=25.0),
        outcome("b2", 5.0, None, 30.0, 105.0, worker_seconds=300.0, reallocations=3),
    ],
    # 4 GPUs over 0..30, 8 over 30..70, 2 over 70..105: 120 + 320 + 70 = 510 GPU-seconds.
    timeline=[(0.0, 4), (30.0, 8), (70.0, 2), (105.0, 0)],
)


# --- JobOutcome ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("finish", "met"),
    [(90.0, True), (100.0, True), (100.0 + 1e-7, True), (100.001, False), (None, False)],
    ids=["early", "exactly", "within-rounding", "late", "never-finished"],
)
def test_met_deadline(finish, met):
    assert outcome("a", 0.0, 100.0, 0.0, finish).met_deadline is met


def test_best_effort_job_has_no_deadline_to_meet():
    assert outcome("a", 0.0, None, 0.0, 10.0).met_deadline is False


def test_jct_is_finish_minus_submit():
    assert outcome("a", 7.0, None, 9.0, 20.0).jct_s == 13.0


# --- JctStats -----------------------------------------------------------------------------------


def test_jct_stats_of_no_values_is_empty():
    assert JctStats.of([]) == JctStats(0, None, None, None)


def test_jct_stats_p95_interpolates_between_order_statistics():
    # 1..20: the 95th percentile sits 0.95 x 19 = 18.05 ranks up, between 19 and 20.
    stats = JctStats.of([float(v) for v in range(20, 0, -1)])
    assert (stats.count, stats.mean_s, stats.median_s, stats.p95_s) == (
        20,
        10.5,
        10.5,
        pytest.approx(19.05),
    )


# --- summarize ----------------------------------------------------------------------------------


def test_summary_counts_jobs_by_kind_and_admission():
    s = summarize(HAND)
    assert (s.jobs, s.deadline_jobs, s.best_effort_jobs, s.accepted, s.declined) == (5, 3, 2, 4, 1)


def test_summary_dsr_counts_the_declined_job_as_missed():
    s = summarize(HAND)
    assert (s.deadline_met, s.deadline_satisfactory_ratio) == (1, pytest.approx(1 / 3))


def test_summary_jct_of_deadline_jobs_leaves_out_the_declined_one():
    assert summarize(HAND).jct_deadline == JctStats(2, 55.0, 55.0, pytest.approx(59.5))


def test_summary_jct_of_best_effort_jobs():
    # p95 of (30, 100): 30 + 0.95 x 70.
    assert summarize(HAND).jct_best_effort == JctStats(2, 65.0, 65.0, pytest.approx(96.5))


def test_summary_average_jct_is_over_every_finished_job():
    assert summarize(HAND).avg_jct_s == pytest.approx((50 + 60 + 30 + 100) / 4)


def test_summary_utilization_integrates_the_timeline_over_capacity_and_makespan():
    s = summarize(HAND)
    assert (s.makespan_s, s.utilization) == (105.0, pytest.approx(510 / (8 * 105)))


def test_summary_adds_reallocations_and_passes_run_facts_through():
    s = summarize(HAND)
    assert (s.policy, s.reallocations, s.decisions, s.wall_s) == ("hand", 6, 17, 0.25)


def test_summary_makespan_starts_at_the_first_submission_not_zero():
    result = result_of(
        [outcome("a", 100.0, None, 100.0, 110.0), outcome("b", 104.0, None, 110.0, 130.0)],
        timeline=[(100.0, 8), (130.0, 0)],
    )
    s = summarize(result)
    # 8 GPUs over the whole 30 s: fully used.
    assert (s.makespan_s, s.utilization) == (30.0, 1.0)


def test_summary_without_deadline_jobs_has_no_dsr():
    result = result_of([outcome("b", 0.0, None, 0.0, 10.0)], timeline=[(0.0, 1), (10.0, 0)])
    s = summarize(result)
    assert (s.deadline_satisfactory_ratio, s.jct_deadline) == (None, JctStats(0, None, None, None))


@pytest.mark.parametrize(
    "outcomes",
    [[], [outcome("d", 5.0, 10.0, None, None, declined=True)]],
    ids=["no-jobs", "every-job-declined"],
)
def test_summary_without_a_finished_job_has_zero_makespan_and_no_utilization(outcomes):
    s = summarize(result_of(outcomes))
    assert (s.makespan_s, s.utilization, s.avg_jct_s) == (0.0, None, None)


def test_summary_json_holds_to_the_contract_keys_in_order():
    payload = summarize(HAND).to_json()
    assert_contract("sim-cluster", payload)
    assert list(payload) == list(schema("sim-cluster")["$defs"]["run"]["properties"])


# --- completion times over the jobs every compared run finished --------------------------------

# The five jobs of HAND under two more policies. HAND finishes d1 d2 b1 b2 (declines d3); OTHER
# declines d1 and finishes the rest; THIRD declines d3 and leaves b2 unfinished. Every run
# finished d2 and b1 only.
OTHER = result_of(
    [
        outcome("d1", 0.0, 100.0, None, None, workers=4, declined=True),
        outcome("d2", 10.0, 40.0, 10.0, 40.0, workers=2),  # JCT 30
        outcome("d3", 20.0, 80.0, 20.0, 60.0, workers=2),  # JCT 40
        outcome("b1", 0.0, None, 0.0, 20.0, model="s"),  # JCT 20
        outcome("b2", 5.0, None, 20.0, 45.0),  # JCT 40
    ],
    policy="other",
)
THIRD = result_of(
    [
        outcome("d1", 0.0, 100.0, 0.0, 40.0, workers=4),  # JCT 40
        outcome("d2", 10.0, 40.0, 50.0, 100.0, workers=2),  # JCT 90
        outcome("d3", 20.0, 80.0, None, None, workers=2, declined=True),
        outcome("b1", 0.0, None, 10.0, 50.0, model="s"),  # JCT 50
        outcome("b2", 5.0, None, 60.0, None),  # started, never finished
    ],
    policy="third",
)


def test_the_common_jobs_are_those_every_run_finished():
    assert finished_by_all([HAND, OTHER, THIRD]) == {"d2", "b1"}


@pytest.mark.parametrize(
    ("index", "common_jct", "best_effort_jct", "avg_jct"),
    [
        (0, (60 + 30) / 2, 30.0, (50 + 60 + 30 + 100) / 4),
        (1, (30 + 20) / 2, 20.0, (30 + 40 + 20 + 40) / 4),
        (2, (90 + 50) / 2, 50.0, (40 + 90 + 50) / 3),
    ],
    ids=["hand", "other", "third"],
)
def test_common_jct_is_over_the_jobs_every_run_finished(
    index, common_jct, best_effort_jct, avg_jct
):
    s = summarize_runs([HAND, OTHER, THIRD])[index]
    assert (s.common_jobs, s.common_jct_s, s.best_effort_jct_s, s.avg_jct_s) == (
        2,
        pytest.approx(common_jct),
        pytest.approx(best_effort_jct),
        pytest.approx(avg_jct),
    )


def test_one_run_alone_takes_its_own_finished_jobs_as_common():
    s = summarize(HAND)
    assert (s.common_jobs, s.common_jct_s, s.best_effort_jct_s) == (
        4,
        pytest.approx((50 + 60 + 30 + 100) / 4),
        pytest.approx((30 + 100) / 2),
    )


def test_common_jobs_without_a_best_effort_one_have_no_best_effort_jct():
    s = summarize(HAND, frozenset({"d1", "d2"}))
    assert (s.common_jobs, s.common_jct_s, s.best_effort_jct_s) == (2, 55.0, None)


def test_a_common_set_the_run_did_not_finish_is_refused():
    with pytest.raises(
        ValueError, match=r"third did not finish 1 of the common jobs \(e.g. 'b2'\)"
    ):
        summarize(THIRD, frozenset({"b1", "b2"}))


def test_several_runs_json_hold_to_the_contract():
    for s in summarize_runs([HAND, OTHER, THIRD]):
        assert_contract("sim-cluster", s.to_json())


# --- write_job_csv ------------------------------------------------------------------------------


@pytest.fixture
def rows(tmp_path) -> list[list[str]]:
    path = tmp_path / "jobs.csv"
    write_job_csv(HAND, path)
    with path.open(newline="") as handle:
        return list(csv.reader(handle))


def test_job_csv_header(rows):
    assert rows[0] == [
        "job_id",
        "model",
        "submit_s",
        "deadline_s",
        "requested_gpus",
        "declined",
        "start_s",
        "finish_s",
        "jct_s",
        "met_deadline",
        "gpu_seconds",
        "reallocations",
    ]


def test_job_csv_has_one_row_per_job_in_trace_order(rows):
    assert [row[0] for row in rows[1:]] == ["d1", "d2", "d3", "b1", "b2"]


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        (1, ["d1", "m", "0.0", "100.0", "4", "0", "0.0", "50.0", "50.0", "1", "123.457", "1"]),
        (2, ["d2", "m", "10.0", "40.0", "2", "0", "20.0", "70.0", "60.0", "0", "60.0", "2"]),
        (3, ["d3", "m", "20.0", "80.0", "2", "1", "", "", "", "0", "0.0", "0"]),
        (4, ["b1", "s", "0.0", "", "1", "0", "5.0", "30.0", "30.0", "", "25.0", "0"]),
    ],
    ids=["met-deadline", "missed-deadline", "declined", "best-effort"],
)
def test_job_csv_row(rows, index, expected):
    assert rows[index] == expected
