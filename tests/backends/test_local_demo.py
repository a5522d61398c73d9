"""The demo's calibrated deadlines: hand-computed plans, and a real measurement by the runner."""

from __future__ import annotations

import os

import pytest

from qosched.backends.local.calibrate import SpeedMeasurement, measure
from qosched.backends.local.cpu_use import CHECKPOINTING, ENDING, RUNNING, STARTING
from qosched.backends.local.demo import DemoJob, _demo_spec, plan_jobs, run_workload
from qosched.core.errors import InputError

pytestmark = pytest.mark.process


def speeds(cnn: tuple[float, float], transformer: tuple[float, float], startup_s: float = 3.0):
    """Rates (it/s) on 1 and 2 cores."""
    table = {}
    for workload, (one, two) in (("cnn", cnn), ("transformer", transformer)):
        table[(workload, 1)] = SpeedMeasurement(workload, (0,), one, startup_s)
        table[(workload, 2)] = SpeedMeasurement(workload, (0, 1), two, startup_s)
    return table


def test_sub_linear_scaling_gives_the_shortest_jobs():
    # 2 cores run each workload 1.4x faster than 1. With 10 s short jobs: the long cnn does
    # 300 iterations, the urgent transformer 50. One after another, the urgent job finishes
    # 3 + 300/14 + 3 + 50/7 - 2 = 32.6 s after it arrives; its deadline is
    # ceil(1.5 * 10 + 2 * 3 + 2) = 23 s, and 32.6 > 1.2 * 23: a clear miss already.
    plan = plan_jobs(speeds((10, 14), (5, 7)), 2)
    by_name = {job.spec.name: job for job in plan.jobs}
    assert [job.spec.name for job in plan.jobs] == [
        "cnn-long-1",
        "transformer-urgent-1",
        "transformer-long-2",
        "cnn-urgent-2",
    ]
    assert by_name["cnn-long-1"].spec.iterations == 300
    assert by_name["transformer-urgent-1"].spec.iterations == 50
    assert plan.deadline_s("transformer-urgent-1") == 23
    assert plan.deadline_s("cnn-long-1") == 53  # ceil(1.5 * 30 + 8)
    assert plan.one_after_another_s["transformer-urgent-1"] == pytest.approx(32.57, abs=0.01)
    assert plan.side_by_side_s["transformer-urgent-1"] == pytest.approx(13.0)
    # The second pair arrives once the first is done side by side, plus an allowance.
    assert by_name["transformer-long-2"].offset_s == pytest.approx(33 + 8)
    assert by_name["cnn-urgent-2"].offset_s == pytest.approx(33 + 8 + 2)
    assert all(job.spec.requested_cpus == 2 for job in plan.jobs)


def test_perfect_scaling_needs_longer_jobs_for_the_miss_to_be_clear():
    # Doubling the cores doubles the speed: one after another the urgent job finishes
    # 2s + 4 seconds after arriving, against a deadline of 1.5s + 8; 2s + 4 > 1.2 (1.5s + 8)
    # first holds for s = 30 among 10, 12, ..., 40.
    plan = plan_jobs(speeds((10, 20), (5, 10)), 2)
    urgent = plan.deadline_s("transformer-urgent-1")
    assert urgent == 53  # 1.5 * 30 + 8
    assert plan.one_after_another_s["transformer-urgent-1"] == pytest.approx(64.0)


def test_every_deadline_is_met_side_by_side_with_its_margin():
    plan = plan_jobs(speeds((37, 52), (12, 19), startup_s=4.5), 2)
    for job in plan.jobs:
        assert plan.side_by_side_s[job.spec.name] * 1.2 < plan.deadline_s(job.spec.name)


def test_one_core_is_refused():
    with pytest.raises(InputError, match="at least 2 cores"):
        plan_jobs(speeds((10, 14), (5, 7)), 1)


def test_measurements_sharing_cores_are_refused():
    with pytest.raises(ValueError, match="must not share cores"):
        measure([("cnn", (0,)), ("transformer", (0,))])


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_the_runner_measures_both_workloads_side_by_side():
    cores = sorted(os.sched_getaffinity(0))[:2]
    found = measure([("cnn", (cores[0],)), ("transformer", (cores[1],))], seconds=1.5)
    assert [m.workload for m in found] == ["cnn", "transformer"]
    for measurement in found:
        assert measurement.rate > 0
        assert 0 < measurement.startup_s < 120


@pytest.mark.slow
def test_a_run_says_where_its_core_seconds_went(tmp_path):
    # One short real job alone: launched, started, run, checkpointed, done.
    job = DemoJob(0.0, _demo_spec("cnn-short", "cnn", 60, 600, 1))
    report = run_workload("fifo", [job], cpus=(sorted(os.sched_getaffinity(0))[0],), home=tmp_path)
    found = report.breakdown
    assert report.met == 1
    # The same core-seconds as the allocation log gives, and the same CPU time as the
    # kernel's account of the runners (to its rounding), taken apart.
    assert found.held_total == pytest.approx(report.core_seconds_allocated)
    assert found.used_total == pytest.approx(report.cpu_seconds_used, abs=0.05)
    for phase in (STARTING, RUNNING, CHECKPOINTING, ENDING):
        assert found.held[phase] > 0, phase
    assert set(found.running_by_cores) == {1}
    assert found.used[STARTING] > 0 and found.used[RUNNING] > 0
