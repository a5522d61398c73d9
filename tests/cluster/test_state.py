"""Tests for the decision clock a backend shows its policies."""

from __future__ import annotations

import pytest

from qosched.cluster.state import DecisionClock

ARTIFACT_GRID = DecisionClock(60.0, 0.0)
OFF_CLOCK = DecisionClock(60.0, 0.0, off_clock=True)


@pytest.mark.parametrize(
    ("clock", "at", "last", "when"),
    [
        pytest.param(DecisionClock(), 5.0, 3.0, 5.0, id="at-once"),
        pytest.param(DecisionClock(60.0), 5.0, 3.0, 63.0, id="slot-open"),
        pytest.param(DecisionClock(60.0), 100.0, 3.0, 100.0, id="slot-passed"),
        pytest.param(ARTIFACT_GRID, 61.0, 0.0, 120.0, id="next-grid-point"),
        pytest.param(ARTIFACT_GRID, 240.0, 180.0, 240.0, id="on-the-grid"),
        pytest.param(DecisionClock(60.0, 1.0), 61.0, 1.0, 61.0, id="grid-from-an-arrival"),
    ],
)
def test_a_decision_waits_for_the_slot_and_the_grid(clock, at, last, when):
    assert clock.next_decision_s(at, last) == when


@pytest.mark.parametrize(
    ("clock", "period", "until", "skips"),
    [
        pytest.param(DecisionClock(), 10.5, 1e300, True, id="at-once"),
        pytest.param(ARTIFACT_GRID, 240.0, 240_000.0, True, id="grid-holds-every-lease"),
        pytest.param(DecisionClock(60.0, 1.0), 240.0, 240_000.0, False, id="grid-off-leases"),
        pytest.param(ARTIFACT_GRID, 250.0, 250_000.0, False, id="lease-off-grid"),
        pytest.param(ARTIFACT_GRID, 30.0, 30_000.0, False, id="slot-longer-than-lease"),
        pytest.param(DecisionClock(60.0, 0.5), 240.0, 240_000.0, False, id="fractional-origin"),
        pytest.param(ARTIFACT_GRID, 240.0, 2.0**53, False, id="past-exact-seconds"),
        pytest.param(DecisionClock(60.0), 240.0, 240_000.0, False, id="slot-without-grid"),
        pytest.param(DecisionClock(counted=True), 240.0, 240_000.0, False, id="counted"),
        pytest.param(OFF_CLOCK, 240.0, 480.0, False, id="off-clock"),
    ],
)
def test_idle_wake_ups_are_skipped_only_where_each_would_be_decided_on_time(
    clock, period, until, skips
):
    assert clock.skips_idle(period, until) is skips
