"""Where a job's cores went (``cpu_use``), from hand-made store and runner events whose
breakdown is worked out by hand in each test."""

from __future__ import annotations

import pytest

from qosched.backends.local.cpu_use import (
    CHECKPOINTING,
    ENDING,
    RUNNING,
    STARTING,
    job_breakdown,
)
from qosched.backends.local.progress import ProgressEvent, RunnerEvent
from qosched.backends.local.store import JobEvent


def state(t: float, to: str, cpus: list[int] | None = None) -> JobEvent:
    detail: dict[str, object] = {"from": "queued", "to": to}
    if cpus is not None:
        detail["cpus"] = cpus
    return JobEvent("job-1", t, "state", detail)


def runner(t: float, kind: RunnerEvent, cpu_s: float, **fields: float) -> ProgressEvent:
    return ProgressEvent(t, kind, 0, 1, None, cpu_s=cpu_s, **fields)


# Launched on 2 cores at 100, shrunk to 1 core at 110, pre-empted (its runner gone) at 120;
# launched again on 1 core at 125, done, gone at 130.
STORE = (
    state(100, "running", [0, 1]),
    JobEvent("job-1", 110, "allocation", {"from": [0, 1], "to": [0]}),
    state(120, "preempted"),
    state(125, "running", [0]),
    state(130, "succeeded"),
)
RUNNER = (
    runner(103, RunnerEvent.START, 2.0, wait_s=0.2),
    runner(105, RunnerEvent.PROGRESS, 5.0, wait_s=0.5),
    runner(108, RunnerEvent.CHECKPOINT, 8.0, wait_s=0.5, save_s=1.0, save_cpu_s=0.5),
    runner(115, RunnerEvent.PROGRESS, 12.0, wait_s=1.5),
    # A thread ended, taking its wait with it: 0.1 s less, counted as none.
    runner(119, RunnerEvent.PREEMPTED, 15.0, wait_s=1.4),
    # The second runner: its CPU time counts from its own birth.
    runner(127, RunnerEvent.START, 1.5, wait_s=0.1),
    runner(129, RunnerEvent.DONE, 2.5, wait_s=0.3),
)


def test_core_seconds_held_by_phase() -> None:
    found = job_breakdown(STORE, RUNNER, end=140)
    assert found.held == pytest.approx(
        {
            STARTING: 2 * 3 + 1 * 2,  # 100-103 on 2 cores, 125-127 on 1
            RUNNING: 2 * 4 + 2 * 2 + 1 * 9 + 1 * 2,  # 103-107, 108-110, 110-119, 127-129
            CHECKPOINTING: 2 * 1,  # 107-108, the save_s before the checkpoint event
            ENDING: 1 * 1 + 1 * 1,  # 119-120, 129-130
        }
    )
    # Every core-second held is in one phase: 10 s on 2 cores, 10 s and 5 s on 1.
    assert found.held_total == pytest.approx(2 * 10 + 1 * 10 + 1 * 5)
    assert found.running_by_cores[2][0] == pytest.approx(12)
    assert found.running_by_cores[1][0] == pytest.approx(11)


def test_cpu_seconds_used_by_phase() -> None:
    found = job_breakdown(STORE, RUNNER, end=140)
    assert found.used == pytest.approx(
        {
            STARTING: 2.0 + 1.5,
            RUNNING: 3.0 + 2.5 + 4.0 + 3.0 + 1.0,
            CHECKPOINTING: 0.5,
            ENDING: 0.0,  # after its last event a runner reports nothing
        }
    )
    # Each stretch's CPU time goes to the cores held when the runner reported it.
    assert found.running_by_cores[2][1] == pytest.approx(3.0 + 2.5)
    assert found.running_by_cores[1][1] == pytest.approx(4.0 + 3.0 + 1.0)


def test_a_job_still_holding_cores_counts_up_to_the_end() -> None:
    found = job_breakdown(STORE[:1], RUNNER[:2], end=106)
    assert found.held[STARTING] == pytest.approx(2 * 3)
    assert found.held[RUNNING] == pytest.approx(2 * 3)
    assert found.held_total == pytest.approx(2 * 6)


def test_a_runner_that_never_started_only_started() -> None:
    store = (state(100, "running", [0]), state(104, "preempted"))
    events = (
        runner(102, RunnerEvent.WARNING, 0.8),
        ProgressEvent(103, RunnerEvent.ERROR, None, 1, None, fatal=True, cpu_s=1.2),
    )
    found = job_breakdown(store, events, end=110)
    assert found.held == pytest.approx(
        {STARTING: 3.0, RUNNING: 0.0, CHECKPOINTING: 0.0, ENDING: 1.0}
    )
    assert found.used[STARTING] == pytest.approx(1.2)
    assert found.used_total == pytest.approx(1.2)


def test_a_job_that_never_ran_held_nothing() -> None:
    found = job_breakdown((state(100, "declined"),), (), end=110)
    assert found.held_total == 0 and found.used_total == 0


def test_seconds_waited_for_a_core_by_phase() -> None:
    found = job_breakdown(STORE, RUNNER, end=140)
    assert found.waited == pytest.approx(
        {STARTING: 0.2 + 0.1, RUNNING: 0.3 + 0.0 + 1.0 + 0.0 + 0.2, CHECKPOINTING: 0, ENDING: 0}
    )
    assert found.running_by_cores[2][2] == pytest.approx(0.3)
    assert found.running_by_cores[1][2] == pytest.approx(1.0 + 0.2)


def test_seconds_of_each_start_up_and_ending() -> None:
    found = job_breakdown(STORE, RUNNER, end=140)
    assert found.stretches[STARTING] == pytest.approx([3.0, 2.0])  # 100-103, 125-127
    assert found.stretches[ENDING] == pytest.approx([1.0, 1.0])  # 119-120, 129-130
    # A re-size does not cut a stretch: 103-107 on 2 cores; 108-119 across the shrink at 110.
    assert found.stretches[RUNNING] == pytest.approx([4.0, 11.0, 2.0])
    assert found.stretches[CHECKPOINTING] == pytest.approx([1.0])
