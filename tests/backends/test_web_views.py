"""The web page's JSON views: the timeline of allocations, speed against cores, CPU time."""

from __future__ import annotations

import itertools
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from service_fakes import make_job as job

from qosched.backends.local.jobview import HeldAllocation
from qosched.backends.local.store import JobEvent, ProgressSample
from qosched.backends.local.web import views


def state(job_id: str, t: float, old: str, new: str, **detail: Any) -> JobEvent:
    return JobEvent(job_id, t, "state", {"from": old, "to": new, **detail})


# A job started on cores 0-1, re-sized to core 0, pre-empted, restarted on core 1, succeeded.
LIFE = [
    JobEvent("j-1", 0.0, "submitted", {"name": "a"}),
    state("j-1", 1.0, "queued", "running", cpus=[0, 1]),
    JobEvent("j-1", 5.0, "allocation", {"from": [0, 1], "to": [0]}),
    state("j-1", 8.0, "running", "preempted"),
    JobEvent("j-1", 8.0, "stopped", {"why": "pre-empted by the scheduler"}),
    state("j-1", 10.0, "preempted", "running", cpus=[1]),
    state("j-1", 14.0, "running", "succeeded"),
]


def test_timeline_has_one_segment_per_allocation_held() -> None:
    line = views.timeline([job("j-1", "succeeded")], LIFE, now=20.0, cpus=[0, 1])
    assert line["segments"] == [
        {"job": "j-1", "from": 1.0, "until": 5.0, "cpus": [0, 1], "gpus": []},
        {"job": "j-1", "from": 5.0, "until": 8.0, "cpus": [0], "gpus": []},
        {"job": "j-1", "from": 10.0, "until": 14.0, "cpus": [1], "gpus": []},
    ]
    assert line["cpus"] == [0, 1] and line["gpus"] == [] and line["now"] == 20.0


def test_a_timeline_window_keeps_what_was_held_or_marked_in_it() -> None:
    # j-1's life ends at 14 s (LIFE); j-2 runs from 1 s and still holds core 1 at 100 s.
    events = [*LIFE, state("j-2", 1.0, "queued", "running", cpus=[1])]
    jobs = [job("j-1", "succeeded"), job("j-2", "running")]
    late = views.timeline(jobs, events, now=100.0, cpus=[0, 1], window_s=50.0)
    assert [j["id"] for j in late["jobs"]] == ["j-2"]  # j-1 ended 36 s before the window
    assert late["segments"] == [{"job": "j-2", "from": 1.0, "until": None, "cpus": [1], "gpus": []}]
    assert late["marks"] == []  # j-2's start is older than the window
    # A window reaching back to 9 s: j-1's last allocation (10-14 s) and the marks from 9 s on,
    # and j-1's preemption at 8 s is not.
    mid = views.timeline(jobs, events, now=100.0, cpus=[0, 1], window_s=91.0)
    assert [(s["job"], s["from"]) for s in mid["segments"]] == [("j-1", 10.0), ("j-2", 1.0)]
    assert [(m["t"], m["kind"]) for m in mid["marks"]] == [(10.0, "restart"), (14.0, "succeeded")]
    whole = views.timeline(jobs, events, now=100.0, cpus=[0, 1])
    assert len(whole["segments"]) == 4 and len(whole["jobs"]) == 2


def test_timeline_marks_start_resize_preemption_restart_and_end() -> None:
    line = views.timeline([job("j-1", "succeeded")], LIFE, now=20.0, cpus=[0, 1])
    assert [(m["t"], m["kind"]) for m in line["marks"]] == [
        (1.0, "start"),
        (5.0, "resize"),
        (8.0, "preempt"),
        (10.0, "restart"),
        (14.0, "succeeded"),
    ]
    assert line["marks"][2]["text"] == "pre-empted: pre-empted by the scheduler"
    assert line["marks"][1]["text"] == "re-sized from cores 0,1 to 0"


def test_timeline_keeps_each_jobs_events_apart_and_an_open_segment_open() -> None:
    events = [
        state("j-1", 1.0, "queued", "running", cpus=[0]),
        state("j-2", 2.0, "queued", "running", cpus=[1]),
        JobEvent(None, 3.0, "service", {}),  # a service-wide event belongs to no job
        state("j-1", 4.0, "running", "cancelled"),
    ]
    jobs = [job("j-1", "cancelled"), job("j-2", "running")]
    line = views.timeline(jobs, events, now=9.0, cpus=[0, 1])
    assert [(s["job"], s["from"], s["until"]) for s in line["segments"]] == [
        ("j-1", 1.0, 4.0),
        ("j-2", 2.0, None),
    ]
    assert [(m["job"], m["kind"]) for m in line["marks"]] == [
        ("j-1", "start"),
        ("j-1", "cancelled"),
        ("j-2", "start"),
    ]
    assert line["jobs"] == [
        {"id": "j-1", "name": "name-j-1", "state": "cancelled"},
        {"id": "j-2", "name": "name-j-2", "state": "running"},
    ]


def test_measured_speeds_average_each_core_count_within_its_allocations() -> None:
    allocations = [
        HeldAllocation(0.0, 10.0, (0,), ()),
        HeldAllocation(10.0, None, (0, 1), ()),
    ]
    samples = [
        ProgressSample(2.0, 10, 1),
        ProgressSample(4.0, 20, 1),  # 10 it in 2 s
        ProgressSample(8.0, 40, 1),  # 20 it in 4 s: 1 core did 30 it in 6 s = 5 it/s
        ProgressSample(12.0, 50, 2),  # new allocation: not paired with the 1-core sample
        ProgressSample(13.0, 60, 2),  # 10 it in 1 s
        ProgressSample(15.0, 90, 2),  # 30 it in 2 s: 2 cores did 40 it in 3 s
    ]
    speeds = views.measured_speeds(samples, allocations)
    assert speeds == [
        {"cpus": 1, "rate": 5.0, "seconds": 6.0},
        {"cpus": 2, "rate": pytest.approx(40 / 3), "seconds": 3.0},
    ]


def _speeds_by_scanning(samples, allocations):
    """The rule of ``measured_speeds`` written out plainly: every sample tested against every
    allocation."""
    totals: dict[int, list[float]] = {}
    for held in allocations:
        inside = [
            s for s in samples if s.t >= held.start and (held.until is None or s.t <= held.until)
        ]
        for before, after in itertools.pairwise(inside):
            dt, di = after.t - before.t, after.iteration - before.iteration
            if dt > 0 and di >= 0 and after.cpus == before.cpus and after.cpus > 0:
                totals.setdefault(after.cpus, [0.0, 0.0])
                totals[after.cpus][0] += dt
                totals[after.cpus][1] += di
    return sorted((c, i / t) for c, (t, i) in totals.items() if t > 0)


@pytest.mark.parametrize("seed", range(20))
def test_measured_speeds_agree_with_a_plain_scan_on_generated_histories(seed: int) -> None:
    rng = random.Random(seed)
    t, iteration, samples, allocations = 0.0, 0, [], []
    for _ in range(rng.randint(1, 12)):  # allocations, some with gaps between them
        start = t + rng.choice([0.0, rng.uniform(0, 5)])
        cpus = rng.randint(1, 4)
        until = start + rng.uniform(0, 30)
        t = start
        while t < until:
            samples.append(ProgressSample(t, iteration, cpus))
            t += rng.choice([0.0, rng.uniform(0.1, 3)])
            iteration += rng.randint(-1, 20) if rng.random() < 0.1 else rng.randint(0, 20)
        allocations.append(HeldAllocation(start, until, tuple(range(cpus)), ()))
    if rng.random() < 0.5:
        allocations[-1] = HeldAllocation(allocations[-1].start, None, allocations[-1].cpus, ())
    if seed % 5 == 0 and len(samples) > 2:  # the clock stepped back once
        i = rng.randrange(1, len(samples))
        samples[i] = ProgressSample(samples[i - 1].t - 1.0, samples[i].iteration, samples[i].cpus)
    got = views.measured_speeds(samples, allocations)
    want = _speeds_by_scanning(samples, allocations)
    assert [r["cpus"] for r in got] == [cpus for cpus, _ in want]
    assert [r["rate"] for r in got] == pytest.approx([rate for _, rate in want])


def test_measured_speeds_skip_a_restart_from_a_checkpoint() -> None:
    # Pre-empted at t=8 and restarted at t=20 from the checkpoint at 30: the pause and the work
    # redone belong to no interval.
    allocations = [
        HeldAllocation(0.0, 8.0, (0,), ()),
        HeldAllocation(20.0, None, (0,), ()),
    ]
    samples = [
        ProgressSample(2.0, 10, 1),
        ProgressSample(6.0, 40, 1),  # 30 it in 4 s
        ProgressSample(22.0, 35, 1),
        ProgressSample(24.0, 45, 1),  # 10 it in 2 s
    ]
    assert views.measured_speeds(samples, allocations) == [
        {"cpus": 1, "rate": 40 / 6, "seconds": 6.0}
    ]


def test_job_speed_lists_the_predictors_curve_by_core_count_and_drops_non_finite_rates() -> None:
    predicted = {2: (3.0, 2.0, 4.0), 1: (2.0, 1.5, 2.5), 3: (float("inf"), 1.0, float("inf"))}
    speed = views.job_speed("j-1", [], [], predicted)
    assert speed == {
        "job": "j-1",
        "measured": [],
        "predicted": [
            {"cpus": 1, "rate": 2.0, "low": 1.5, "high": 2.5},
            {"cpus": 2, "rate": 3.0, "low": 2.0, "high": 4.0},
        ],
    }


def fake_proc(root: Path, pid: int, times: tuple[int, int, int, int], children: list[int]) -> None:
    folder = root / str(pid)
    (folder / "task" / str(pid)).mkdir(parents=True)
    utime, stime, cutime, cstime = times
    # A command name with a space and a parenthesis, as a process may choose.
    before = " ".join(["S", "1", "1", "1", "0", "-1", "0", "0", "0", "0", "0"])
    after = " ".join(["20", "0", "1", "0", "100"])
    (folder / "stat").write_text(
        f"{pid} (a (b) c) {before} {utime} {stime} {cutime} {cstime} {after}"
    )
    (folder / "task" / str(pid) / "children").write_text(" ".join(map(str, children)))


def test_cpu_seconds_add_up_a_process_tree(tmp_path: Path) -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    fake_proc(tmp_path, 10, (100, 50, 7, 3), [11, 12])
    fake_proc(tmp_path, 11, (20, 10, 0, 0), [13])
    fake_proc(tmp_path, 13, (5, 5, 0, 0), [])
    # 12 has exited since its parent listed it: counted as nothing.
    assert views.cpu_seconds(10, proc=tmp_path) == pytest.approx((160 + 30 + 10) / ticks)


def test_cpu_seconds_of_a_process_that_is_gone_are_zero(tmp_path: Path) -> None:
    assert views.cpu_seconds(4242, proc=tmp_path) == 0.0


# Burns some CPU, prints the CPU time it used by its own account, then waits to be measured.
BURNER = """\
import os, sys
sum(i * i for i in range(300_000))
times = os.times()
print(times.user + times.system, flush=True)
sys.stdin.read()
"""


@pytest.mark.process
def test_cpu_seconds_of_a_real_process_are_what_it_says_it_used() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", BURNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as burner:
        assert burner.stdout is not None and burner.stdin is not None
        own_account = float(burner.stdout.readline())
        used = views.cpu_seconds(burner.pid)
        burner.stdin.close()
    # The kernel counts in clock ticks; printing the number costs at most a tick or two more.
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert own_account > 0
    assert own_account - tick <= used <= own_account + 3 * tick
