"""qosched.backends.local.profiling: how long a job is measured, at which sizes, and what its
measurement may take from other jobs."""

from __future__ import annotations

import dataclasses
import math
import sys
import time

import pytest
from command_jobs import CORES, command_spec
from test_local_speed_memory import STEADY

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
from qosched.backends.local.service import LocalService
from qosched.backends.local.speed_memory import speed_key
from qosched.cluster.admission import Admission, probe_admission
from qosched.cluster.job import JobSpec
from qosched.cluster.policies import create_policy
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, JobState
from qosched.cluster.throughput import SpeedCurve

pytestmark = pytest.mark.process


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


# -- on a real service ----------------------------------------------------------------------------

WAIT_S = 90.0


def _strict(name: str, argv: list[str], iterations: int, deadline_s: int, cpus: int):
    spec = command_spec(name, argv, iterations=iterations, deadline_s=deadline_s, max_cpus=cpus)
    return dataclasses.replace(spec, best_effort=False)


def _step_until(service: LocalService, done, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, what
        service.step()
        time.sleep(0.1)


def _holders(service: LocalService) -> list[dict[str, set[int]]]:
    """Who held which cores after each event of the store's log, replayed in order."""
    held: dict[str, set[int]] = {}
    seen = []
    for event in service.store.events():
        if event.kind in ("launched", "re-adopted"):
            held[event.job_id] = set(event.detail["cpus"])
        elif event.kind == "allocation":
            held[event.job_id] = set(event.detail["to"])
        elif event.kind == "state" and event.detail["to"] not in ("running", "profiling"):
            held.pop(event.job_id, None)
        seen.append({job: set(cores) for job, cores in held.items()})
    return seen


def _two_core_service(tmp_path) -> tuple[LocalService, list[str]]:
    """A qos service on two cores, and the command of a steady job (about 20 it/s)."""
    script = tmp_path / "steady.py"
    script.write_text(STEADY)
    service = LocalService.open(tmp_path / "home", cpus=CORES[:2], tick_s=0.2, grace_s=2.0)
    return service, [sys.executable, str(script)]


@pytest.mark.slow
@pytest.mark.skipif(len(CORES) < 2, reason="lending needs a second core")
def test_a_measurement_borrows_a_core_where_the_guarantee_survives(tmp_path) -> None:
    """A guaranteed job with room to spare holds both cores; a new command is lent one (the
    running job shrinks in place, never sharing a core), measured, and admitted."""
    service, argv = _two_core_service(tmp_path)
    try:
        long = _strict("long", argv, 4000, 3600, 2)
        service.store.remember_speeds(speed_key(long), {1: 10.0, 2: 20.0}, "j-000000", 0.0)
        held = service.submit_spec(long).id
        _step_until(service, lambda: len(service.job(held).cpus) == 2, "long on both cores")
        new = service.submit_spec(_strict("new", [*argv, "new"], 4000, 3600, 2)).id
        assert service.job(new).state == "profiling"
        _step_until(service, lambda: service.job(new).state != "profiling", "measured")
        assert service.job(new).state == "running"
        [admitted] = [e for e in service.store.events(new) if e.kind == "admitted"]
        assert admitted.detail["guaranteed"] is True and "1" in admitted.detail["measured"]
        # Why, on the speed it was just measured at (not the placeholder it had before).
        assert admitted.detail["why"].startswith("qos guarantees its deadline; it would start on")
        assert admitted.detail["why"].endswith("; speed: measured while profiling")
        history = _holders(service)
        assert any(len(h.get(held, ())) == 1 and len(h.get(new, ())) == 1 for h in history)
        for holders in history:  # never one core in two jobs' hands
            cores = [core for taken in holders.values() for core in taken]
            assert len(cores) == len(set(cores)), holders
    finally:
        service.stop_runners(grace_s=2.0)
        service.close()


@pytest.mark.slow
@pytest.mark.skipif(len(CORES) < 2, reason="the guaranteed job needs two cores")
def test_a_measurement_waits_while_every_core_is_needed_by_a_guarantee(tmp_path) -> None:
    """Believed to run 10 it/s on a core and 20 on two, the guaranteed job needs both for 20 s
    of its 30: lending one for the 60 s bound (66 s with the probe's start and slack) leaves it
    on one core, which meets its deadline only once at most (29 - t) * 10 of its iterations
    are left, t >= 11 s after it starts. Until then the new command waits, profiling and
    holding nothing; the guarantee is met."""
    service, argv = _two_core_service(tmp_path)
    try:
        tight = _strict("tight", argv, 400, 30, 2)
        service.store.remember_speeds(speed_key(tight), {1: 10.0, 2: 20.0}, "j-000000", 0.0)
        held = service.submit_spec(tight).id
        [admitted] = [e for e in service.store.events(held) if e.kind == "admitted"]
        assert admitted.detail["guaranteed"] is True
        new = service.submit_spec(_strict("new", [*argv, "new"], 100, 3600, 2)).id
        started = time.monotonic()
        while time.monotonic() - started < 8.0:
            service.step()
            waiting = service.job(new)
            assert waiting.state == "profiling" and not waiting.cpus, waiting
            time.sleep(0.1)
        _step_until(
            service, lambda: service.job(new).finished and service.job(held).finished, "done"
        )
        done = service.job(held)
        assert done.state == "succeeded" and done.finished_at <= done.deadline_at
        assert service.job(new).state == "succeeded"
    finally:
        service.stop_runners(grace_s=2.0)
        service.close()
