"""qosched.backends.local.profiling: how long a job is measured, at which sizes, and what its
measurement may take from other jobs."""

from __future__ import annotations

import math

import pytest

from qosched.backends.local.profiling import (
    BAND,
    MAX_OBSERVED_S,
    MAX_PROFILE_S,
    SizeSpeed,
    next_step,
    probe_job,
    size_speeds,
    sizes_to_measure,
)
from qosched.cluster.admission import Admission, probe_admission
from qosched.cluster.job import JobSpec
from qosched.cluster.policies import create_policy
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, JobState
from qosched.cluster.throughput import SpeedCurve


def test_size_speeds_by_hand() -> None:
    samples = [
        # 2 workers: 10 it in 1 s, 30 it in 1 s: 40 it / 2 s = 20 it/s; per-interval 10 and 30
        (0.0, 0, 2), (1.0, 10, 2), (2.0, 40, 2),
        # across a re-size: not counted
        (3.0, 50, 1),
        # 1 worker: 8 it in 2 s, three times: exactly 4 it/s, no spread
        (5.0, 58, 1), (7.0, 66, 1), (9.0, 74, 1),
    ]  # fmt: skip
    speeds = size_speeds(samples)
    assert speeds[2].rate == pytest.approx(20.0)
    # weighted spread: sqrt((1*(10-20)^2 + 1*(30-20)^2) / 2) = 10; / 20 / sqrt(2)
    assert speeds[2].relative_error == pytest.approx(10 / 20 / math.sqrt(2))
    assert (speeds[2].observed_s, speeds[2].intervals) == (2.0, 2)
    assert speeds[1] == SizeSpeed(4.0, 0.0, 6.0, 3)


def test_a_size_is_known_with_enough_running_and_a_narrow_band_or_after_the_cap() -> None:
    assert SizeSpeed(4.0, 0.0, 6.0, 3).enough
    assert not SizeSpeed(4.0, 0.0, 4.0, 3).enough  # too short
    assert not SizeSpeed(4.0, 0.0, 6.0, 2).enough  # too few intervals
    assert not SizeSpeed(4.0, BAND * 2, 6.0, 6).enough  # too noisy yet
    assert SizeSpeed(4.0, BAND * 2, MAX_OBSERVED_S, 40).enough  # noisy, but measured long


def test_sizes_are_the_most_then_the_least_where_re_sized_in_place() -> None:
    assert sizes_to_measure(4, least=1, resized_in_place=True) == (4, 1)
    assert sizes_to_measure(4, least=2, resized_in_place=True) == (4, 2)
    assert sizes_to_measure(4, least=1, resized_in_place=False) == (4,)  # a restart each
    assert sizes_to_measure(1, least=1, resized_in_place=True) == (1,)


def test_the_next_step_measures_shrinks_and_judges() -> None:
    known = SizeSpeed(4.0, 0.0, 6.0, 3)
    short = SizeSpeed(4.0, 0.0, 2.0, 2)
    assert next_step((2, 1), {}, 2, 3.0).judge is False
    assert next_step((2, 1), {2: short}, 2, 3.0).resize_to is None  # go on at 2
    assert next_step((2, 1), {2: known}, 2, 8.0).resize_to == 1
    assert next_step((2, 1), {2: known, 1: short}, 1, 12.0).judge is False
    assert next_step((2, 1), {2: known, 1: known}, 1, 15.0).judge is True
    # bounded: judged on whatever there is
    late = next_step((2, 1), {2: known}, 1, MAX_PROFILE_S)
    assert late.judge and late.resize_to is None


def _job(job_id: str, iterations: int, deadline_s: float, rate: float, workers: int) -> JobState:
    spec = JobSpec(job_id, 0.0, "m", 1, iterations, deadline_s, requested_workers=workers)
    speeds = (0.0, *(rate * min(g, workers) for g in range(1, workers + 1)))
    job = JobState(spec, SpeedCurve("m", 1, speeds, tuple(range(1, workers + 1))))
    job.last_update_s = 0.0
    return job


@pytest.mark.parametrize(
    ("deadline_s", "lendable"),
    [
        # 200 iterations at 1 it/s a core on 2 cores need 100 s. Lending one core for the
        # bound (60 s, plus the probe's start and slack, 66 s) leaves it one: 66 + 134 / 2 =
        # 133 s; lending both stops it: 66 + 100 = 166 s.
        (400.0, {2: True, 1: True}),  # room for either
        (150.0, {2: False, 1: True}),
        (110.0, {2: False, 1: False}),  # tight: nothing may be lent
    ],
)
def test_workers_are_lent_to_a_measurement_only_where_every_guarantee_survives(
    deadline_s: float, lendable: dict[int, bool]
) -> None:
    policy = create_policy("qos")
    cluster = ClusterSpec.cpu(1, 2)
    job = _job("held", 200, deadline_s, 1.0, 2)
    view = ClusterView(0.0, cluster, [], 1.0)
    assert probe_admission(policy, job, view, best_effort=False) is Admission.GUARANTEED
    policy.admit(job, view)
    running = ClusterView(0.0, cluster, [job], 1.0)
    policy.allocate(running)
    for count, expected in lendable.items():
        probe = probe_job("probe", count, 0.0, resize_pause_s=1.0)
        answer = probe_admission(policy, probe, running, best_effort=False)
        assert (answer is Admission.GUARANTEED) is expected, count


def test_a_probe_needs_its_workers_for_the_whole_bound() -> None:
    probe = probe_job("p", 2, 100.0, resize_pause_s=1.0)
    assert probe.curve.usable_counts() == (2,)
    assert probe.remaining_iterations / probe.curve.rate(2) == MAX_PROFILE_S
    assert probe.spec.deadline_s > 100.0 + MAX_PROFILE_S
