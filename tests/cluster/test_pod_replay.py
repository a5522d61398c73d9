"""Services and training over the trace's clock: windows meeting the goal, JCT, deadlines and
the cluster's allocated, fragmented and busy GPUs, each computed by hand on two small nodes."""

from __future__ import annotations

import pytest

from qosched.cluster.pods.costs import ModelCost, TimeSlicedSharing
from qosched.cluster.pods.fragmentation import TaskMix, TaskShape
from qosched.cluster.pods.nodes import GpuNode, PodCluster
from qosched.cluster.pods.policies import create_pod_policy, pod_policy_names
from qosched.cluster.pods.replays import replay
from qosched.cluster.pods.trace import Pod
from qosched.cluster.pods.workloads import RateSeries, ServiceSpec, TrainingSpec
from qosched.core.goals import Goal

#: Fragmentation is measured against "one core, one whole GPU": a GPU partly free is a fragment.
WHOLE = TaskMix(((TaskShape(1000, 1, 1000), 1.0),))
#: Request of 10 ms alone: 25 requests/s keep a GPU busy a quarter of the time.
COST = ModelCost(request_s=0.010, sm=0.5, bandwidth=0.3, kernel_s=0.001)


def costs(model: str, batch: int) -> ModelCost:
    if model != "resnet50":
        raise KeyError(model)  # only the model the tests name has a cost
    return COST


def two_nodes() -> PodCluster:
    return PodCluster((GpuNode("n1", 8000, 1000, 1, "G"), GpuNode("n2", 8000, 1000, 1, "G")))


def service(name, created, deleted, milli=500, rate=25.0, slowdown=1.5, gpus=1) -> Pod:
    spec = ServiceSpec("resnet50", _rate(rate), Goal("p99_slowdown", slowdown), 1)
    return Pod(name, 1000, 100, gpus, milli, creation_s=created, deletion_s=deleted,
               workload=spec)  # fmt: skip


def _rate(rate) -> RateSeries:
    return rate if isinstance(rate, RateSeries) else RateSeries.constant(rate)


def training(name, created, work, milli=500, deadline=None, gpus=1) -> Pod:
    spec = TrainingSpec("resnet50", work, deadline, 0)
    return Pod(name, 1000, 100, gpus, milli, creation_s=created, workload=spec)


def run(pods, colocation="any", sharing=None, window_s=60.0, cluster=None):
    return replay(
        cluster or two_nodes(),
        pods,
        create_pod_policy("best-fit", WHOLE),
        costs=costs,
        sharing=sharing or TimeSlicedSharing(),
        colocation=colocation,
        window_s=window_s,
    )


def test_a_service_sharing_with_training_misses_the_windows_it_shares() -> None:
    # s1 takes half a GPU for [0, 600). t1 (half a GPU, 100 s of work) arrives at 120 s and
    # best fit puts it beside s1 (less left over). Time-slicing: both slowed 2x, so t1 runs
    # 120..320 and s1 (goal 1.5x) misses windows 120//60 = 2 through ceil(320/60)-1 = 5:
    # 4 of its 10 windows.
    result = run([service("s1", 0, 600), training("t1", 120, 100)])
    (s1,) = result.services
    assert (s1.windows, s1.windows_met) == (10, 6)
    assert (s1.worst_slowdown, s1.allowed_slowdown) == (2.0, 1.5)
    (t1,) = result.training
    assert t1.finished_s == pytest.approx(320.0)
    summary = result.training_json()
    assert summary["avg_jct_s"] == pytest.approx(200.0)
    assert summary["deadline_satisfactory_ratio"] is None  # no deadline job
    assert result.services_json() == {
        "services": 1,
        "windows": 10,
        "windows_met": 6,
        "windows_met_ratio": 0.6,
        "services_meeting_99": 0,
        "services_meeting_99_ratio": 0.0,
        "worst_windows_met_ratio": 0.6,
    }


def test_the_cluster_measures_are_time_integrals_by_hand() -> None:
    result = run([service("s1", 0, 600), training("t1", 120, 100)])
    # Allocated: 0.5 GPU on [0,120), 1.0 on [120,320), 0.5 on [320,600) = 400 GPU-s over 600 s.
    # Fragmented (against one whole GPU): n1's free half on [0,120) and [320,600) = 200 GPU-s.
    # Busy: s1 keeps its GPU busy 25 x 0.010 = 0.25; with t1 (a step loop, 1.0) the GPU is
    # full: 0.25 x 120 + 1.0 x 200 + 0.25 x 280 = 300 GPU-s, over 2 GPUs x 600 s.
    assert result.cluster_json() == {
        "start_s": 0.0,
        "end_s": 600.0,
        "mean_allocated_gpus": pytest.approx(400 / 600, abs=1e-3),
        "peak_allocated_gpus": 1.0,
        "mean_fragmented_gpus": pytest.approx(200 / 600, abs=1e-3),
        "gpu_utilization": pytest.approx(300 / 1200),
    }


@pytest.mark.parametrize("colocation", ["apart", "goals"])
def test_keeping_training_off_the_services_gpu_meets_every_window(colocation) -> None:
    # apart: a service never shares with training; goals: time-slicing predicts 2x > 1.5x.
    # Either way t1 goes to n2 alone and runs its 100 s at full speed.
    result = run([service("s1", 0, 600), training("t1", 120, 100)], colocation=colocation)
    (s1,) = result.services
    assert (s1.windows, s1.windows_met) == (10, 10)
    assert result.training[0].finished_s == pytest.approx(220.0)


def test_the_goals_rule_lets_a_loose_goal_share() -> None:
    # A goal of 2x allows time-slicing's 2x: t1 shares n1 with s1, and no window is missed.
    result = run([service("s1", 0, 600, slowdown=2.0), training("t1", 120, 100)], "goals")
    assert result.training[0].finished_s == pytest.approx(320.0)
    assert (result.services[0].windows, result.services[0].windows_met) == (10, 10)


def test_a_waiting_service_misses_its_windows_until_placed() -> None:
    # One GPU: s1 holds it whole on [0, 300); s2 (whole GPU) arrives at 60 and waits until 300.
    # s2 lives [60, 400): windows 1..6; waiting [60, 300) misses windows 1..4.
    one = PodCluster((GpuNode("n1", 8000, 1000, 1, "G"),))
    result = run([service("s1", 0, 300, milli=1000), service("s2", 60, 400, milli=1000)],
                 cluster=one)  # fmt: skip
    s1, s2 = result.services
    assert (s1.windows, s1.windows_met) == (5, 5)
    assert (s2.windows, s2.windows_met) == (6, 2)


def test_training_deadlines_and_completion_times_count_the_wait() -> None:
    # One GPU. t1 (whole, 100 s) runs [0, 100); t2 (whole, 50 s, deadline 120) waits for it and
    # runs [100, 150): missed. t3 (whole, 10 s, deadline 200) arrives at 10 and waits behind
    # t2 in arrival order: [150, 160): met.
    one = PodCluster((GpuNode("n1", 8000, 1000, 1, "G"),))
    pods = [training("t1", 0, 100, milli=1000), training("t2", 5, 50, 1000, deadline=120),
            training("t3", 10, 10, 1000, deadline=200)]  # fmt: skip
    result = run(pods, cluster=one)
    assert [t.finished_s for t in result.training] == pytest.approx([100.0, 150.0, 160.0])
    summary = result.training_json()
    assert (summary["deadline_jobs"], summary["deadline_met"]) == (2, 1)
    assert summary["deadline_satisfactory_ratio"] == 0.5
    assert summary["avg_jct_s"] == pytest.approx((100 + 145 + 150) / 3, abs=1e-3)


def test_a_rate_step_breaks_the_goal_from_its_time_on() -> None:
    # A throughput goal of 20 requests/s at a rate of 25/s allows a slowdown of 25/20 = 1.25x.
    rate = RateSeries(((0.0, 25.0), (300.0, 10.0)))
    spec = ServiceSpec("resnet50", rate, Goal("throughput_rps", 20.0), 1)
    s1 = Pod("s1", 1000, 100, 1, 500, creation_s=0, deletion_s=600, workload=spec)
    # ... 25/20 = 1.25x allowed: broken beside t1 (2x) on [0, 300). From 300 s the rate (10/s)
    # is below the goal: no slowdown is allowed, even alone (after t1 leaves at 400 s).
    result = run([s1, training("t1", 0, 200)])
    assert result.training[0].finished_s == pytest.approx(400.0)
    (outcome,) = result.services
    assert (outcome.windows, outcome.windows_met) == (10, 0)


def random_trace(seed: int, count: int = 60) -> list[Pod]:
    """Services, training and plain pods of random shapes and times (seeded)."""
    import random

    rng = random.Random(seed)
    pods = []
    for i in range(count):
        created = rng.uniform(0, 2000)
        milli = rng.choice([250, 500, 700, 1000])
        gpus = 1 if milli < 1000 else rng.choice([1, 2])
        kind = rng.choice(["service", "training", "plain"])
        if kind == "service":
            pods.append(service(f"s{i}", created, created + rng.uniform(10, 900), milli=milli,
                                rate=rng.uniform(1, 60), slowdown=rng.choice([1.5, 2.5]),
                                gpus=gpus))  # fmt: skip
        elif kind == "training":
            deadline = created + rng.uniform(50, 900)
            pods.append(training(f"t{i}", created, rng.uniform(10, 400), milli=milli,
                                 deadline=deadline, gpus=gpus))  # fmt: skip
        else:
            pods.append(Pod(f"p{i}", 500, 50, gpus, milli, creation_s=created,
                            deletion_s=created + rng.uniform(10, 600)))  # fmt: skip
    return pods


@pytest.mark.parametrize("name", pod_policy_names())
@pytest.mark.parametrize("colocation", ["any", "apart", "goals", "harvest"])
def test_every_policy_runs_the_clock_deterministically_within_the_cluster(
    name: str, colocation: str
) -> None:
    cluster = PodCluster(tuple(GpuNode(f"n{i}", 16000, 2000, 4, "G") for i in range(3)))
    pods = random_trace(7)

    def once():
        return replay(cluster, pods, create_pod_policy(name, WHOLE), costs=costs,
                      sharing=TimeSlicedSharing(), colocation=colocation, seed=3)  # fmt: skip

    first, second = once(), once()
    assert (first.services, first.training, first.allocated_gpu_s, first.busy_gpu_s) == (
        second.services, second.training, second.allocated_gpu_s, second.busy_gpu_s)  # fmt: skip
    assert 0 < first.peak_allocated_gpus <= cluster.gpus
    assert all(s.allocated_gpus <= cluster.gpus + 1e-9 for s in first.samples)
    assert first.samples[-1].allocated_gpus == pytest.approx(0.0)  # everything has left
    assert all(t.finished_s is not None for t in first.training)
    for s in first.services:
        assert 0 <= s.windows_met <= s.windows


def test_a_pod_deleted_while_waiting_is_never_placed() -> None:
    # One GPU: s1 holds it whole on [0, 300); s2 waits from 60 and is deleted at 200, before
    # the GPU frees: it never runs, and nothing is allocated once s1 leaves.
    one = PodCluster((GpuNode("n1", 8000, 1000, 1, "G"),))
    result = run([service("s1", 0, 300, milli=1000), service("s2", 60, 200, milli=1000)],
                 cluster=one)  # fmt: skip
    assert result.samples[-1].time_s == 300.0
    assert result.samples[-1].allocated_gpus == 0.0
    assert result.allocated_gpu_s == pytest.approx(300.0)
    # s2 lives [60, 200): windows 1..3, none met.
    assert (result.services[1].windows, result.services[1].windows_met) == (3, 0)
