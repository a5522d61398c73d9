"""qosched.backends.local.machine_use: machine use sampled into the store, kept bounded, and
served over the service's history (``GET /usage/history``)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from qosched.backends.local.machine_use import UseSample, UseSampler, thin
from qosched.backends.local.service import LocalService
from qosched.backends.local.store import Store


def test_used_is_the_cpu_seconds_spent_per_second_by_jobs_alive_at_both_samples() -> None:
    sampler = UseSampler(every_s=5.0)
    first = sampler.sample(100.0, {"j-1": (2, 10.0), "j-2": (1, 3.0)})
    assert first == UseSample(100.0, 3, None)  # nothing to compare with yet
    assert not sampler.due(104.9) and sampler.due(105.0)
    # j-1 spent 8 s, j-2 ended (not counted), j-3 is new: its 50 s are its past, not this 4 s.
    second = sampler.sample(104.0, {"j-1": (2, 18.0), "j-3": (4, 50.0)})
    assert second == UseSample(104.0, 6, 2.0)
    # A counter that went down (a process replaced) counts as nothing spent, not negative.
    assert sampler.sample(108.0, {"j-1": (2, 1.0), "j-3": (4, 54.0)}).used == 1.0
    assert sampler.due(50.0)  # the clock stepped back: sample now rather than in an hour


def test_thin_averages_equal_slices_of_time() -> None:
    samples = [UseSample(float(t), t % 2 * 2, None if t == 0 else 1.0) for t in range(10)]
    assert thin(samples, 0.0, 9.0, most=10) == samples
    assert thin(samples, 5.0, 9.0, most=10) == samples[5:]
    # Five slices of 1.8 s: {0,1}, {2,3}, {4,5}, {6,7}, {8,9}: allocated alternates 0 and 2.
    assert thin(samples, 0.0, 9.0, most=5) == [
        UseSample(1.0, 1.0, 1.0),  # t=0 has no used: the other sample's alone
        UseSample(3.0, 1.0, 1.0),
        UseSample(5.0, 1.0, 1.0),
        UseSample(7.0, 1.0, 1.0),
        UseSample(9.0, 1.0, 1.0),
    ]


def test_the_store_keeps_samples_for_a_time_and_a_count(tmp_path: Path) -> None:
    with Store(tmp_path / "state.db") as store:
        for t in range(10):
            store.add_machine_use(UseSample(float(t), 1, 0.5), keep_s=100.0, most=4)
        assert [s.t for s in store.machine_use()] == [6.0, 7.0, 8.0, 9.0]
        store.add_machine_use(UseSample(150.0, 2, None), keep_s=100.0, most=4)
        assert store.machine_use() == (UseSample(150.0, 2, None),)  # the rest are too old
        store.add_machine_use(UseSample(151.0, 0, 0.25), keep_s=100.0, most=4)
        assert store.machine_use(since=151.0) == (UseSample(151.0, 0, 0.25),)


def test_a_service_samples_its_use_and_serves_a_window_of_it(tmp_path: Path) -> None:
    now = [1000.0]
    service = LocalService(
        tmp_path, Store(tmp_path / "state.db"), (0, 1), "qos", clock=lambda: now[0]
    )
    try:
        for t in (1000.0, 1002.0, 1005.0, 1011.0):  # 1002 is not due: 5 s have not passed
            now[0] = t
            service.record_use()
        history = service.usage_history(8.0)  # 1003 to 1011
        assert history["points"] == [[1005.0, 0.0, 0.0], [1011.0, 0.0, 0.0]]
        assert (history["now"], history["cpus"], history["every_s"]) == (1011.0, 2, 5.0)
        assert len(service.usage_history(86_400.0)["points"]) == 3
    finally:
        service.close()


@pytest.mark.process
def test_the_services_loop_records_its_use(tmp_path: Path) -> None:
    service = LocalService.open(tmp_path / "home", cpus=(0,), cgroups=False, gpus=(), tick_s=0.05)
    stop = threading.Event()
    loop = threading.Thread(target=service.run, args=(stop,), daemon=True)
    loop.start()
    try:
        deadline = time.monotonic() + 30
        while not service.store.machine_use() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [s.allocated for s in service.store.machine_use()][:1] == [0]
    finally:
        stop.set()
        loop.join(30)
        service.close()
