"""Harvesting with promises (``cluster/pods/harvest.py``): evictions for services, training
refused a GPU whose service's peak rate breaks its goal, promises on the pessimistic speed, and a
rising rate taking a GPU back, each computed by hand on one or two small nodes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from qosched.cluster.pods.costs import Load, ModelCost, TimeSlicedSharing
from qosched.cluster.pods.fragmentation import TaskMix, TaskShape
from qosched.cluster.pods.harvest import Harvest, peak_rate
from qosched.cluster.pods.nodes import GpuNode, PodCluster
from qosched.cluster.pods.policies import create_pod_policy
from qosched.cluster.pods.replays import replay
from qosched.cluster.pods.trace import Pod
from qosched.cluster.pods.workloads import RateSeries, ServiceSpec, TrainingSpec
from qosched.core.goals import Goal

WHOLE = TaskMix(((TaskShape(1000, 1, 1000), 1.0),))
#: 10 ms a request alone: 25 requests/s keep a GPU busy a quarter of the time.
COST = ModelCost(request_s=0.010, sm=0.5, bandwidth=0.3, kernel_s=0.001)


def costs(model: str, batch: int) -> ModelCost:
    if model != "resnet50":
        raise KeyError(model)
    return COST


@dataclass(frozen=True)
class LoadSharing:
    """A sharing model whose slowdowns grow with load, so a service's rate matters: each party
    is slowed ``1 + its duty x the others' duty`` (a service at duty 0.25 beside a step loop:
    1.25; at 0.5: 1.5; the step loop beside it 1 + 1 x duty)."""

    name: str = "load"

    def slowdowns(self, parties: Sequence[Load]) -> list[float]:
        total = sum(p.duty for p in parties)
        return [1.0 + p.duty * (total - p.duty) for p in parties]


def nodes(*gpus: int) -> PodCluster:
    return PodCluster(tuple(GpuNode(f"n{i + 1}", 8000, 1000, g, "G") for i, g in enumerate(gpus)))


def service(name, created, deleted, milli=500, rate=25.0, slowdown=1.5) -> Pod:
    rate = rate if isinstance(rate, RateSeries) else RateSeries.constant(rate)
    spec = ServiceSpec("resnet50", rate, Goal("p99_slowdown", slowdown), 1)
    return Pod(name, 1000, 100, 1, milli, creation_s=created, deletion_s=deleted, workload=spec)


def training(name, created, work, milli=500, deadline=None) -> Pod:
    spec = TrainingSpec("resnet50", work, deadline, 0)
    return Pod(name, 1000, 100, 1, milli, creation_s=created, workload=spec)


def run(pods, cluster, colocation="harvest", sharing=None, harvest=None):
    return replay(
        cluster,
        pods,
        create_pod_policy("best-fit", WHOLE),
        costs=costs,
        sharing=sharing or TimeSlicedSharing(),
        colocation=colocation,
        queue="priority",
        harvest=harvest,
    )


def finished(result) -> dict[str, float | None]:
    return {t.pod_id: t.finished_s for t in result.training}


def test_a_service_on_a_full_node_evicts_the_training_with_least_work_since_its_checkpoint():
    # One node, two GPUs, both held by training: t1 from 0, t2 from 500 (1000 s of work each,
    # a checkpoint every 600 s of work). At 700 the whole-GPU service s arrives: t1 has done
    # 700 (100 since its checkpoint at 600), t2 200 (200 since its start): t1 loses less and is
    # evicted, redoing 100 s and paying a 30 s restart: 300 + 100 + 30 = 430 s left. It waits
    # until s leaves at 1300 and ends at 1730; t2 ends at 500 + 1000 = 1500.
    pods = [training("t1", 0, 1000, milli=1000), training("t2", 500, 1000, milli=1000),
            service("s", 700, 1300, milli=1000)]  # fmt: skip
    result = run(pods, nodes(2), harvest=Harvest(restart_s=30, checkpoint_s=600))
    assert finished(result) == pytest.approx({"t1": 1730.0, "t2": 1500.0})
    (s,) = result.services
    assert (s.windows, s.windows_met) == (11, 11)  # windows 11..21, none spent waiting
    summary = result.training_json()
    assert (summary["evictions"], summary["moves"]) == (1, 0)
    assert summary["lost_gpu_s"] == pytest.approx(130.0)  # (100 redone + 30) x 1 GPU
    # Under goals s waits from 700 until t1 ends at 1000 (windows 11..16 missed).
    waited = run(pods, nodes(2), colocation="goals")
    assert (waited.services[0].windows, waited.services[0].windows_met) == (11, 5)
    assert "evictions" not in waited.training_json()


def test_an_evicted_pod_moves_at_once_where_there_is_room() -> None:
    # Two one-GPU nodes. At 0 the service s0 (half, goal 2x) and y (half, no workload) fill
    # one node; t2 (half, 1000 s of work) arrives at 10 and takes the other. y leaves at 50. At
    # 100 the service s (half, goal 1.5x) finds no GPU it may share: time-slicing slows it 2x
    # beside s0 or t2. t2 is evicted (90 s done, redone, plus 30 s: 1030 s left), s takes its
    # GPU, and t2 moves at once beside s0 (whose goal allows 2x): at half speed it ends at
    # 100 + 2 x 1030 = 2160.
    pods = [service("s0", 0, 3000, slowdown=2.0), Pod("y", 1000, 100, 1, 500, creation_s=0,
            deletion_s=50), training("t2", 10, 1000), service("s", 100, 400)]  # fmt: skip
    result = run(pods, nodes(1, 1), harvest=Harvest(restart_s=30, checkpoint_s=600))
    assert finished(result) == pytest.approx({"t2": 2160.0})
    summary = result.training_json()
    assert (summary["evictions"], summary["moves"]) == (1, 1)
    assert summary["lost_gpu_s"] == pytest.approx((90 + 30) * 0.5)
    assert [(s.windows, s.windows_met) for s in result.services] == [(50, 50), (6, 6)]


@pytest.mark.parametrize(
    ("harvest", "t1_ends"),
    [
        # Peak rate 50 (duty 0.5): the service would be slowed 1.5x > 1.4x beside t1, so t1 is
        # refused n1 and runs its 100 s alone on n2.
        pytest.param(Harvest(), 200.0, id="peak-refuses"),
        # Read at the rate now (25, duty 0.25: 1.25x) t1 shares n1, slowed 1 + 1 x 0.25.
        pytest.param(Harvest(lookahead_s=0), 225.0, id="rate-now-shares"),
    ],
)
def test_training_is_refused_a_serving_gpu_whose_peak_rate_breaks_the_goal(harvest, t1_ends):
    rate = RateSeries(((0.0, 25.0), (5000.0, 50.0)))
    pods = [service("s1", 0, 6000, rate=rate, slowdown=1.4), training("t1", 100, 100)]
    result = run(pods, nodes(1, 1), sharing=LoadSharing(), harvest=harvest)
    assert finished(result) == pytest.approx({"t1": t1_ends})


def test_a_rising_rate_takes_the_gpu_back_and_the_training_moves() -> None:
    # Peak read at the rate now: t1 shares n1 with s1 (25/s) from 100 at 1/1.25 speed. At 150
    # the rate doubles: s1 would be slowed 1.5x > 1.4x, so t1 is evicted, having done
    # 50 x 0.8 = 40 s (redone) and moves to n2 with 60 + 40 + 30 = 130 s left: ends at 280.
    rate = RateSeries(((0.0, 25.0), (150.0, 50.0)))
    pods = [service("s1", 0, 600, rate=rate, slowdown=1.4), training("t1", 100, 100)]
    result = run(pods, nodes(1, 1), sharing=LoadSharing(), harvest=Harvest(lookahead_s=0))
    assert finished(result) == pytest.approx({"t1": 280.0})
    summary = result.training_json()
    assert (summary["evictions"], summary["moves"]) == (1, 1)
    assert summary["lost_gpu_s"] == pytest.approx((40 + 30) * 0.5)
    assert (result.services[0].windows, result.services[0].windows_met) == (10, 10)


@pytest.mark.parametrize(
    ("deadline", "guaranteed", "met"),
    [
        # Beside s1 (goal 2x) time-slicing slows t1 2x: 100 s of work end at 300.
        pytest.param(350.0, 1, 1, id="pessimistic-end-in-time"),
        pytest.param(250.0, 0, 0, id="best-effort"),
    ],
)
def test_a_deadline_is_promised_only_on_the_pessimistic_speed(deadline, guaranteed, met):
    # n2 is held whole by a pod without a workload, so t1 can only go beside s1.
    blocker = Pod("b", 1000, 100, 1, 1000, creation_s=0, deletion_s=1000)
    pods = [blocker, service("s1", 0, 1000, slowdown=2.0), training("t1", 100, 100,
            deadline=deadline)]  # fmt: skip
    result = run(pods, nodes(1, 1))
    assert finished(result) == pytest.approx({"t1": 300.0})
    summary = result.training_json()
    assert (summary["guaranteed"], summary["guaranteed_met"]) == (guaranteed, met)
    assert summary["best_effort_met"] == 0
    assert result.training[0].guaranteed == bool(guaranteed)


def test_a_promised_deadline_refuses_a_newcomer_that_would_break_it() -> None:
    # t2 (deadline 250) is promised alone on n2 at 100. t3 arrives at 110: n1 is full (s1 and
    # t1); beside t2 time-slicing would slow t2 2x, but its 90 s left must end within 140 s
    # (1.56x at most): t3 waits until t2 ends at 200 and runs 200..250. Under goals it would
    # join t2 and t2 would end at 110 + 2 x 90 = 290, past its deadline.
    pods = [service("s1", 0, 1000, slowdown=2.0), training("t1", 100, 100, deadline=350),
            training("t2", 100, 100, deadline=250), training("t3", 110, 50)]  # fmt: skip
    result = run(pods, nodes(1, 1))
    assert finished(result) == pytest.approx({"t1": 300.0, "t2": 200.0, "t3": 250.0})
    summary = result.training_json()
    assert (summary["guaranteed"], summary["guaranteed_met"]) == (2, 2)


@pytest.mark.parametrize(
    ("now", "lookahead", "peak"),
    [
        (0, None, 40.0),
        (0, 50, 20.0),
        (0, 100, 30.0),
        (150, None, 40.0),
        (350, None, 10.0),
        (99, 1, 30.0),
    ],
)
def test_the_peak_rate_is_read_from_now_within_the_lookahead(now, lookahead, peak) -> None:
    rate = RateSeries(((0.0, 20.0), (100.0, 30.0), (200.0, 40.0), (300.0, 10.0)))
    assert peak_rate(rate, now, lookahead) == peak


def test_harvest_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="checkpoint_s"):
        Harvest(checkpoint_s=0)
    with pytest.raises(ValueError, match="colocation 'harvest'"):
        run([training("t1", 0, 10)], nodes(1), colocation="goals", harvest=Harvest())
