"""Timing one operator: the spread and CPU share of its repeats, by hand, and when it is trusted."""

from __future__ import annotations

import pytest
from placement_helpers import ScriptedTimer

from qosched.placement.timing import Sample, Timing, Trust, cpu_timer, measure

MS = 1e-3


def test_spread_and_cpu_share_by_hand():
    walls = [4 * MS, 5 * MS, 6 * MS, 5 * MS, 400 * MS]
    got = Timing.of([Sample(w, w / 2) for w in walls])
    # sorted 4, 5, 5, 6, 400: the median 5; the slowest left out, (6 - 4) / 4
    assert got.seconds == pytest.approx(5 * MS)
    assert got.spread == pytest.approx(0.5)
    assert got.cpu_share == pytest.approx(0.5)  # 210 ms of CPU in 420 ms
    assert got.repeats == 5


def test_the_spread_of_microsecond_jitter_is_taken_against_the_floor():
    # 1, 2 and 3 us: (2 - 1) us over the 10 us floor, not over the fastest 1 us
    got = Timing.of([Sample(t * 1e-6, None) for t in (1, 2, 3)])
    assert got.spread == pytest.approx(0.1)
    assert got.cpu_share is None  # a device timer measures no CPU


@pytest.mark.parametrize(
    ("walls", "share", "doubt"),
    [
        ([1 * MS] * 5, 1.0, None),
        ([1 * MS, 1 * MS, 1 * MS, 1 * MS, 100 * MS], 1.0, None),  # one outlier: the median holds
        ([1 * MS, 1 * MS, 100 * MS, 100 * MS, 100 * MS], 1.0, "spread 99.00x"),  # the median moved
        ([1 * MS] * 5, 0.01, "1% of the wall time"),  # stolen: uniformly slow, no spread
        ([1 * MS] * 2, 1.0, "2 repeats: too few"),
    ],
    ids=["quiet", "one-outlier", "three-outliers", "stolen-cpu", "two-repeats"],
)
def test_what_is_trusted(walls, share, doubt):
    timing = Timing.of([Sample(w, w * share) for w in walls])
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
    timer = ScriptedTimer(lambda n: 100 * MS if n < 6 else 1 * MS, lambda n: 0.01 if n < 6 else 1)
    timing, doubt = measure(lambda: None, timer, 5, Trust())
    assert doubt is None
    assert timing == Timing(1 * MS, 5, 0.0, 1.0)
    assert timer.calls == 12


def test_a_measurement_never_trusted_gives_its_fastest_median_and_why():
    # three tries of 6 calls; the second is the least slow
    walls = {0: 50 * MS, 1: 20 * MS, 2: 80 * MS}
    timer = ScriptedTimer(lambda n: walls[n // 6], lambda n: 0.1)
    timing, doubt = measure(lambda: None, timer, 5, Trust(), tries=3)
    assert timer.calls == 18  # bounded: no fourth try
    assert timing.seconds == pytest.approx(20 * MS)
    assert "the machine was busy" in doubt


def test_too_few_repeats_are_measured_once():
    timer = ScriptedTimer(lambda n: 1 * MS)
    _, doubt = measure(lambda: None, timer, 2, Trust())
    assert "too few" in doubt and timer.calls == 3


def test_the_cpu_timer_runs_the_call_and_counts_its_cpu_time():
    def spin():
        total = 0
        for i in range(200_000):
            total += i

    got = cpu_timer(spin)
    assert got.wall_s > 0 and got.cpu_s is not None and got.cpu_s > 0
