"""Tests for qosched.sim.engine: ordering, clock control, cancellation and loud misuse."""

from __future__ import annotations

import math

import pytest

from qosched.sim.engine import EmptySchedule, Engine


def recorder(engine: Engine, log: list[tuple[str, float]], name: str):
    """A callback that appends ``(name, engine.now)`` when it fires."""

    def callback() -> None:
        log.append((name, engine.now))

    return callback


# --- ordering ---------------------------------------------------------------------------------

# Each case: events as (name, at, priority) in scheduling order, and the names in firing order.
ORDER_CASES = [
    (
        "by-time",
        [("late", 3.0, 0), ("early", 1.0, 0), ("middle", 2.0, 0)],
        ["early", "middle", "late"],
    ),
    (
        "same-time-lower-priority-value-first",
        [("p2", 1.0, 2), ("p0", 1.0, 0), ("p-1", 1.0, -1)],
        ["p-1", "p0", "p2"],
    ),
    (
        "same-time-same-priority-in-scheduling-order",
        [("first", 1.0, 0), ("second", 1.0, 0), ("third", 1.0, 0)],
        ["first", "second", "third"],
    ),
    (
        "time-beats-priority",
        [("later-urgent", 2.0, -10), ("earlier-lax", 1.0, 10)],
        ["earlier-lax", "later-urgent"],
    ),
    (
        "priority-beats-scheduling-order",
        [("a", 1.0, 1), ("b", 1.0, 0), ("c", 1.0, 1), ("d", 1.0, 0)],
        ["b", "d", "a", "c"],
    ),
]


@pytest.mark.parametrize(
    ("events", "expected"),
    [case[1:] for case in ORDER_CASES],
    ids=[case[0] for case in ORDER_CASES],
)
def test_events_fire_by_time_then_priority_then_scheduling_order(events, expected):
    engine = Engine()
    log: list[tuple[str, float]] = []
    for name, at, priority in events:
        engine.schedule(recorder(engine, log, name), at=at, priority=priority)
    engine.run()
    assert [name for name, _ in log] == expected


def test_equal_events_fire_in_the_same_order_on_every_run():
    def run_once() -> list[str]:
        engine = Engine()
        log: list[tuple[str, float]] = []
        for index in range(50):
            engine.schedule(recorder(engine, log, f"e{index}"), at=float(index % 3))
        engine.run()
        return [name for name, _ in log]

    expected = [f"e{i}" for t in range(3) for i in range(50) if i % 3 == t]
    assert run_once() == expected
    assert run_once() == expected


def test_clock_reads_each_event_time_when_it_fires():
    engine = Engine()
    log: list[tuple[str, float]] = []
    engine.schedule(recorder(engine, log, "b"), at=2.5)
    engine.schedule(recorder(engine, log, "a"), at=0.5)
    engine.run()
    assert log == [("a", 0.5), ("b", 2.5)]


# --- delay= versus at= ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "kwargs", "expected_time"),
    [
        (0.0, {"delay": 5.0}, 5.0),
        (10.0, {"delay": 5.0}, 15.0),
        (10.0, {"delay": 0.0}, 10.0),
        (0.0, {"at": 5.0}, 5.0),
        (10.0, {"at": 15.0}, 15.0),
        (10.0, {"at": 10.0}, 10.0),
    ],
    ids=[
        "delay-from-zero",
        "delay-is-relative-to-now",
        "zero-delay-is-now",
        "at-from-zero",
        "at-is-absolute",
        "at-now",
    ],
)
def test_delay_is_relative_and_at_is_absolute(start, kwargs, expected_time):
    engine = Engine(start=start)
    event = engine.schedule(lambda: None, **kwargs)
    assert event.time == expected_time
    assert engine.peek() == expected_time


def test_delay_counts_from_the_clock_after_it_advanced():
    engine = Engine()
    log: list[tuple[str, float]] = []
    engine.schedule(lambda: None, at=4.0)
    engine.step()
    engine.schedule(recorder(engine, log, "later"), delay=3.0)
    engine.run()
    assert log == [("later", 7.0)]


# --- run(until=...) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("until", "fired", "pending"),
    [
        (3.5, ["t1", "t3"], 2),
        (5.0, ["t1", "t3", "t5"], 1),
        (0.5, [], 4),
        (100.0, ["t1", "t3", "t5", "t7"], 0),
    ],
    ids=["between-events", "event-exactly-at-until-fires", "before-first-event", "after-last"],
)
def test_run_until_fires_events_up_to_until_and_leaves_later_ones(until, fired, pending):
    engine = Engine()
    log: list[tuple[str, float]] = []
    for t in (1.0, 3.0, 5.0, 7.0):
        engine.schedule(recorder(engine, log, f"t{t:g}"), at=t)
    engine.run(until=until)
    assert [name for name, _ in log] == fired
    assert engine.now == until
    assert len(engine) == pending


def test_run_until_can_be_resumed_and_later_events_still_fire():
    engine = Engine()
    log: list[tuple[str, float]] = []
    engine.schedule(recorder(engine, log, "a"), at=1.0)
    engine.schedule(recorder(engine, log, "b"), at=6.0)
    engine.run(until=4.0)
    engine.run()
    assert log == [("a", 1.0), ("b", 6.0)]


def test_run_until_now_on_an_empty_engine_keeps_the_clock():
    engine = Engine(start=2.0)
    engine.run(until=2.0)
    assert engine.now == 2.0


def test_run_without_until_drains_the_engine_and_leaves_the_clock_at_the_last_event():
    engine = Engine()
    engine.schedule(lambda: None, at=2.0)
    engine.schedule(lambda: None, at=9.0)
    engine.run()
    assert len(engine) == 0
    assert engine.now == 9.0


# --- peek() -----------------------------------------------------------------------------------


def test_peek_on_an_empty_engine_is_infinity():
    assert Engine().peek() == math.inf


def test_peek_gives_the_next_time_without_firing_or_moving_the_clock():
    engine = Engine(start=1.0)
    fired: list[str] = []
    engine.schedule(lambda: fired.append("x"), at=4.0)
    engine.schedule(lambda: fired.append("y"), at=2.0)
    assert engine.peek() == 2.0
    assert engine.peek() == 2.0
    assert fired == []
    assert engine.now == 1.0
    assert len(engine) == 2


def test_peek_skips_cancelled_events():
    engine = Engine()
    first = engine.schedule(lambda: None, at=1.0)
    engine.schedule(lambda: None, at=2.0)
    engine.cancel(first)
    assert engine.peek() == 2.0


def test_peek_is_infinity_when_every_event_is_cancelled():
    engine = Engine()
    engine.cancel(engine.schedule(lambda: None, at=1.0))
    assert engine.peek() == math.inf


# --- cancel and len ---------------------------------------------------------------------------


def test_cancelled_event_never_fires():
    engine = Engine()
    log: list[tuple[str, float]] = []
    engine.schedule(recorder(engine, log, "kept-1"), at=1.0)
    doomed = engine.schedule(recorder(engine, log, "cancelled"), at=2.0)
    engine.schedule(recorder(engine, log, "kept-3"), at=3.0)
    engine.cancel(doomed)
    engine.run()
    assert log == [("kept-1", 1.0), ("kept-3", 3.0)]


def test_step_skips_a_cancelled_event_and_fires_the_next_pending_one():
    engine = Engine()
    log: list[tuple[str, float]] = []
    doomed = engine.schedule(recorder(engine, log, "cancelled"), at=1.0)
    engine.schedule(recorder(engine, log, "next"), at=2.0)
    engine.cancel(doomed)
    engine.step()
    assert log == [("next", 2.0)]


def test_len_counts_pending_events_only():
    engine = Engine()
    events = [engine.schedule(lambda: None, at=float(t)) for t in range(1, 5)]
    assert len(engine) == 4
    engine.cancel(events[2])
    assert len(engine) == 3
    engine.step()
    assert len(engine) == 2
    engine.run()
    assert len(engine) == 0


@pytest.mark.parametrize(
    ("action", "pending", "cancelled", "fired"),
    [
        ("none", True, False, False),
        ("cancel", False, True, False),
        ("fire", False, False, True),
    ],
    ids=["scheduled", "cancelled", "fired"],
)
def test_event_flags_follow_its_life(action, pending, cancelled, fired):
    engine = Engine()
    event = engine.schedule(lambda: None, delay=1.0)
    if action == "cancel":
        engine.cancel(event)
    elif action == "fire":
        engine.step()
    assert (event.pending, event.cancelled, event.fired) == (pending, cancelled, fired)


# --- misuse is loud ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"delay": -1.0},
        {"delay": -1e-9},
        {"delay": math.nan},
        {"delay": math.inf},
        {"at": math.nan},
        {"at": math.inf},
        {"at": -math.inf},
        {"at": 9.999},
        {"delay": 1.0, "at": 11.0},
        {},
    ],
    ids=[
        "negative-delay",
        "tiny-negative-delay",
        "nan-delay",
        "inf-delay",
        "nan-at",
        "inf-at",
        "minus-inf-at",
        "at-in-the-past",
        "both-delay-and-at",
        "neither-delay-nor-at",
    ],
)
def test_bad_schedule_raises_value_error_and_schedules_nothing(kwargs):
    engine = Engine(start=10.0)
    with pytest.raises(ValueError):
        engine.schedule(lambda: None, **kwargs)
    assert len(engine) == 0
    assert engine.peek() == math.inf


def test_at_in_the_past_after_the_clock_advanced_raises():
    engine = Engine()
    engine.schedule(lambda: None, at=5.0)
    engine.step()
    with pytest.raises(ValueError, match="before now"):
        engine.schedule(lambda: None, at=4.0)


@pytest.mark.parametrize("start", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_non_finite_start_time_raises(start):
    with pytest.raises(ValueError):
        Engine(start=start)


def test_cancelling_twice_raises_runtime_error():
    engine = Engine()
    event = engine.schedule(lambda: None, at=1.0)
    engine.cancel(event)
    with pytest.raises(RuntimeError, match="already cancelled"):
        engine.cancel(event)
    assert len(engine) == 0


def test_cancelling_a_fired_event_raises_runtime_error():
    engine = Engine()
    event = engine.schedule(lambda: None, at=1.0)
    engine.step()
    with pytest.raises(RuntimeError, match="already fired"):
        engine.cancel(event)
    assert len(engine) == 0


def test_step_on_an_empty_engine_raises_empty_schedule():
    with pytest.raises(EmptySchedule):
        Engine().step()


def test_step_when_only_cancelled_events_remain_raises_empty_schedule():
    engine = Engine()
    engine.cancel(engine.schedule(lambda: None, at=1.0))
    with pytest.raises(EmptySchedule):
        engine.step()


def test_empty_schedule_is_a_runtime_error():
    assert issubclass(EmptySchedule, RuntimeError)


def test_run_until_before_now_raises_and_keeps_the_clock():
    engine = Engine(start=5.0)
    engine.schedule(lambda: None, at=6.0)
    with pytest.raises(ValueError, match="before now"):
        engine.run(until=4.0)
    assert engine.now == 5.0
    assert len(engine) == 1


def test_run_until_nan_raises_and_keeps_the_clock():
    engine = Engine(start=5.0)
    engine.schedule(lambda: None, at=6.0)
    with pytest.raises(ValueError):
        engine.run(until=math.nan)
    assert engine.now == 5.0


def test_run_until_infinity_runs_everything_and_keeps_a_usable_clock():
    engine = Engine()
    log: list[tuple[str, float]] = []
    engine.schedule(recorder(engine, log, "a"), at=2.0)
    engine.run(until=math.inf)
    assert log == [("a", 2.0)]
    assert engine.now == 2.0
    engine.schedule(lambda: None, at=3.0)  # still schedulable: the clock is not at infinity


# --- events scheduled from callbacks ----------------------------------------------------------


@pytest.mark.parametrize("kwargs", [{"delay": 0.0}, {"at": 1.0}], ids=["zero-delay", "at-now"])
def test_same_time_event_scheduled_by_a_callback_runs_after_already_queued_ones(kwargs):
    engine = Engine()
    log: list[tuple[str, float]] = []

    def spawner() -> None:
        log.append(("spawner", engine.now))
        engine.schedule(recorder(engine, log, "spawned"), **kwargs)

    engine.schedule(spawner, at=1.0)
    engine.schedule(recorder(engine, log, "queued-1"), at=1.0)
    engine.schedule(recorder(engine, log, "queued-2"), at=1.0)
    engine.run()
    assert log == [("spawner", 1.0), ("queued-1", 1.0), ("queued-2", 1.0), ("spawned", 1.0)]


def test_same_time_event_scheduled_by_a_callback_with_lower_priority_value_runs_first():
    engine = Engine()
    log: list[tuple[str, float]] = []

    def spawner() -> None:
        log.append(("spawner", engine.now))
        engine.schedule(recorder(engine, log, "urgent"), delay=0.0, priority=-1)

    engine.schedule(spawner, at=1.0)
    engine.schedule(recorder(engine, log, "queued"), at=1.0)
    engine.run()
    assert log == [("spawner", 1.0), ("urgent", 1.0), ("queued", 1.0)]


def test_callback_scheduled_events_fire_within_run_until():
    engine = Engine()
    log: list[tuple[str, float]] = []

    def spawner() -> None:
        engine.schedule(recorder(engine, log, "inside"), delay=1.0)
        engine.schedule(recorder(engine, log, "outside"), delay=5.0)

    engine.schedule(spawner, at=1.0)
    engine.run(until=4.0)
    assert log == [("inside", 2.0)]
    assert engine.peek() == 6.0
