"""Timing one operator: the spread and wait share of its repeats, by hand, and when it is
trusted."""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch
from placement_helpers import ScriptedTimer

from qosched.placement.timing import TimedCall, Timing, Trust, cpu_timer, measure, thread_waits

MS = 1e-3


def test_spread_and_wait_share_by_hand():
    walls = [4 * MS, 5 * MS, 6 * MS, 5 * MS, 400 * MS]
    got = Timing.of([TimedCall(w, w / 2) for w in walls])
    # sorted 4, 5, 5, 6, 400: the median 5; the slowest left out, (6 - 4) / 4
    assert got.seconds == pytest.approx(5 * MS)
    assert got.spread == pytest.approx(0.5)
    assert got.wait_share == pytest.approx(0.5)  # 210 ms waited in 420 ms
    assert got.repeats == 5


def test_the_spread_of_microsecond_jitter_is_taken_against_the_floor():
    # 1, 2 and 3 us: (2 - 1) us over the 10 us floor, not over the fastest 1 us
    got = Timing.of([TimedCall(t * 1e-6, None) for t in (1, 2, 3)])
    assert got.spread == pytest.approx(0.1)
    assert got.wait_share is None  # a device timer measures no waits


@pytest.mark.parametrize(
    ("walls", "share", "doubt"),
    [
        ([1 * MS] * 5, 0.0, None),
        ([1 * MS, 1 * MS, 1 * MS, 1 * MS, 100 * MS], 0.0, None),  # one outlier: the median holds
        ([1 * MS, 1 * MS, 100 * MS, 100 * MS, 100 * MS], 0.0, "spread 99.00x"),  # the median moved
        ([100 * MS] * 5, 0.99, "waited 99% of the wall time"),  # stolen: uniformly slow
        ([1 * MS] * 5, 0.25, None),  # at the limit
        ([1 * MS] * 2, 0.0, "2 repeats: too few"),
    ],
    ids=["quiet", "one-outlier", "three-outliers", "stolen-cpu", "waited-a-quarter", "two-repeats"],
)
def test_what_is_trusted(walls, share, doubt):
    timing = Timing.of([TimedCall(w, w * share) for w in walls])
    got = Trust().doubt(timing)
    if doubt is None:
        assert got is None
    else:
        assert doubt in got


def test_a_gpu_timing_is_judged_by_its_spread_alone():
    assert Trust().doubt(Timing(1 * MS, 5, 0.0, None)) is None
    assert Trust().doubt(Timing(1 * MS, 5, 2.0, None)) is not None


def test_a_doubted_measurement_is_taken_again_until_trusted():
    # busy for the first try (a warm-up and 5 repeats: calls 0-5), quiet after
    timer = ScriptedTimer(
        lambda n: 100 * MS if n < 6 else 1 * MS, lambda n: 99 * MS if n < 6 else 0
    )
    pauses = []
    timing, doubt = measure(lambda: None, timer, 5, Trust(), pause=pauses.append)
    assert doubt is None
    assert timing == Timing(1 * MS, 5, 0.0, 0.0)
    assert pauses == [0.02]
    assert timer.calls == 12


def test_a_measurement_never_trusted_gives_its_fastest_median_and_why():
    # three tries of 6 calls; the second is the least slow
    walls = {0: 50 * MS, 1: 20 * MS, 2: 80 * MS}
    timer = ScriptedTimer(lambda n: walls[n // 6], lambda n: walls[n // 6] / 2)
    pauses = []
    timing, doubt = measure(lambda: None, timer, 5, Trust(), tries=3, pause=pauses.append)
    assert timer.calls == 18  # bounded: no fourth try
    assert pauses == [0.02, 0.1]  # none before the first, fivefold before each next
    assert timing.seconds == pytest.approx(20 * MS)
    assert "the machine was busy" in doubt


def test_too_few_repeats_are_measured_once():
    timer = ScriptedTimer(lambda n: 1 * MS)
    _, doubt = measure(lambda: None, timer, 2, Trust())
    assert "too few" in doubt and timer.calls == 3


def test_the_cpu_timer_runs_the_call_and_reads_the_threads_waits():
    calls = []
    got = cpu_timer(lambda: calls.append(1))
    assert calls == [1] and got.wall_s > 0
    waits = thread_waits()
    if waits is None:  # not Linux: no wait share, and the timer says so
        assert got.waited_s is None
    else:
        assert got.waited_s is not None and got.waited_s >= 0
        assert all(isinstance(w, int) and w >= 0 for w in waits.values())


def test_a_thread_that_waits_for_its_core_is_seen():
    # Two threads of this process that both compute (PyTorch lets go of the GIL) on one core:
    # each waits for the core while the other runs, for about half of the 0.3 s.
    if thread_waits() is None or not hasattr(os, "sched_setaffinity"):
        pytest.skip("no per-thread run-queue waits on this system")
    x = torch.randn(128, 128)

    def compute():
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:
            x @ x

    cores, threads = os.sched_getaffinity(0), torch.get_num_threads()
    os.sched_setaffinity(0, {min(cores)})
    torch.set_num_threads(1)
    try:
        other = threading.Thread(target=compute)
        got = cpu_timer(lambda: (other.start(), compute(), other.join()))
    finally:
        os.sched_setaffinity(0, cores)
        torch.set_num_threads(threads)
    assert got.waited_s is not None and got.waited_s > 0.05
