"""qosched.backends.local.lifeline: a built-in workload's progress line every few seconds."""

from __future__ import annotations

import io

from qosched.backends.local.lifeline import LifeLine


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_line_every_interval_with_the_speed_since_the_last() -> None:
    out, clock = io.StringIO(), Clock()
    life = LifeLine(2000, out, every_s=5.0, clock=clock)
    life.start(0, "cnn (seed 0)")
    for iteration in range(1, 161):  # 16 it/s (an exact step): lines at 5 s and 10 s
        clock.now += 0.0625
        life.tick(iteration, 2.5 - iteration / 100, 2)
    assert out.getvalue().splitlines() == [
        "qosched: cnn (seed 0): 2000 iterations",
        "qosched: iteration 80/2000 (4%), loss 1.7000, 16.0 it/s on 2 threads",
        "qosched: iteration 160/2000 (8%), loss 0.9000, 16.0 it/s on 2 threads",
    ]


def test_a_resumed_job_says_where_it_resumes_and_a_missing_loss_is_na() -> None:
    out, clock = io.StringIO(), Clock()
    life = LifeLine(400, out, every_s=1.0, clock=clock)
    life.start(300, "transformer (seed 3)")
    clock.now += 2.0
    life.tick(310, None, 1)
    clock.now += 2.0
    life.tick(330, float("nan"), 1)
    assert out.getvalue().splitlines() == [
        "qosched: transformer (seed 3): 400 iterations, resuming at iteration 300",
        "qosched: iteration 310/400 (77%), loss n/a, 5.0 it/s on 1 thread",
        "qosched: iteration 330/400 (82%), loss n/a, 10.0 it/s on 1 thread",
    ]
