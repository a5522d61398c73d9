"""bench/cluster_qos_evidence.py: the long-overload report's count of the jobs one policy alone
meets, by how tight their deadlines are."""

import pytest

from bench_scripts import bench_script
from qosched.cluster.job import JobSpec
from qosched.cluster.simulator import JobOutcome, SimResult
from qosched.cluster.spec import ClusterSpec


@pytest.fixture(scope="module")
def bench():
    with bench_script("cluster_qos_evidence") as module:
        yield module


def _result(policy: str, jobs: list[JobSpec], met: set[str]) -> SimResult:
    outcomes = tuple(
        JobOutcome(
            job_id=job.job_id,
            model=job.model,
            submit_s=job.submit_s,
            deadline_s=job.deadline_s,
            requested_workers=job.requested_workers,
            declined=False,
            start_s=job.submit_s,
            finish_s=job.submit_s + 1.0 if job.job_id in met else job.deadline_s + 1.0,
            worker_seconds=1.0,
            reallocations=0,
        )
        for job in jobs
    )
    return SimResult(policy, ClusterSpec.from_flags(1, 8), outcomes, (), 0.0, 0)


def test_jobs_met_by_one_policy_alone_are_counted_by_window_over_one_gpu_time(bench):
    # bert at batch 64 runs about 6.03 iterations/s on one A100 (the bundled table), so 6,031
    # iterations take about 1,000 s alone: windows of 500 / 1,050 / 1,300 / 2,000 s are 0.5x,
    # 1.05x, 1.3x and 2x that, one in each band.
    windows = {"a": 500.0, "b": 1050.0, "c": 1300.0, "d": 2000.0, "e": 1300.0}
    jobs = [JobSpec(j, 10.0, "bert", 64, 6031, 10.0 + w, 1) for j, w in windows.items()]
    theirs = _result("elasticflow", jobs, {"a", "b", "c", "e"})
    ours = _result("qos", jobs, {"c", "d"})
    assert bench.met_apart(jobs, ours, theirs) == (
        "jobs only elasticflow / only qos meets, by window over time on 1 GPU: below 1.0x 1 / 0, "
        "1.0-1.1x 1 / 0, 1.1-1.5x 1 / 0, 1.5x and more 0 / 1"
    )


def test_met_work_sums_the_one_gpu_hours_of_the_jobs_that_met_their_deadlines(bench):
    # 6,031 bert iterations at batch 64 take about 1,000 s on one A100; a job of 12,062 takes
    # twice that. Met: the 1,000 s job and the 2,000 s one, not the second 1,000 s job.
    jobs = [
        JobSpec("a", 0.0, "bert", 64, 6031, 5000.0, 1),
        JobSpec("b", 0.0, "bert", 64, 12062, 5000.0, 1),
        JobSpec("c", 0.0, "bert", 64, 6031, 5000.0, 1),
    ]
    hours = bench.met_work_h(jobs, _result("qos", jobs, {"a", "b"}))
    assert hours == pytest.approx(3000.0 / 3600.0, rel=0.01)
    assert bench.met_work_h(jobs, _result("qos", jobs, set())) == 0.0
