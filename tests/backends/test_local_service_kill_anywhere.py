"""Kill the service anywhere: SIGKILL at every step boundary of a small real workload, restart,
and check that every job completes exactly once, no job ever has two runners, no core is held by
two jobs, and nothing is lost from the store."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from command_jobs import runs
from kill_anywhere_driver import GPU_VICTIM, VICTIM, WORKLOAD, workloads

from qosched.backends.local.process import find_runners
from qosched.backends.local.store import Lifecycle, Store
from qosched.trainingjob.protocol import RESULT_FILE, read_result

pytestmark = pytest.mark.process

DRIVER = Path(__file__).with_name("kill_anywhere_driver.py")


class Driver:
    """The driver process: one request, one service run, one answer."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(DRIVER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(
        self, home: Path, fault: str | None, gpus: bool = False, long_first: bool = False
    ) -> dict[str, int]:
        assert self.process.stdin is not None and self.process.stdout is not None
        request = {"home": str(home), "fault": fault, "gpus": gpus, "long_first": long_first}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        assert answer, "the driver died"
        return json.loads(answer)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def driver() -> Iterator[Driver]:
    started = Driver()
    yield started
    started.close()


KILLED = {"signal": signal.SIGKILL}
DONE = {"exit": 0}

# Each case: the faults of successive runs (the last run has none and must finish the work).
CASES = {
    "after-launch-intent": ["intent:1"],
    "after-second-launch-intent": ["intent:2"],
    "after-popen": ["popen:1"],
    "after-second-popen": ["popen:2"],
    "after-launch-commit": ["launched:1"],
    "after-second-launch-commit": ["launched:2"],
    "after-progress-commit": ["progress:1"],
    "after-resize-commit": ["resize:1"],
    "after-result-commit": ["result:1"],
    "after-sigterm": ["signal:1"],
    "after-reap-commit": ["reaped:1"],
    "after-popen-then-after-adoption": ["popen:1", "adopted:1"],
}


def needs_adoption(faults: list[str]) -> bool:
    """A case that kills a restarted service while it adopts a runner needs that runner alive
    at the restart: its first job is made long."""
    return any(fault.startswith("adopted:") for fault in faults)


@pytest.mark.slow
@pytest.mark.parametrize("faults", CASES.values(), ids=CASES.keys())
def test_a_service_killed_anywhere_runs_every_job_exactly_once(tmp_path, driver, faults):
    long_first = needs_adoption(faults)
    for fault in faults:
        assert driver.run(tmp_path, fault, long_first=long_first) == KILLED, f"{fault} never fired"
    assert driver.run(tmp_path, None, long_first=long_first) == DONE
    check_invariants(tmp_path, workloads(long_first)[0])


GPU_CASES = {
    "gpu-after-launch-intent": ["intent:1"],
    "gpu-after-popen": ["popen:2"],
    "gpu-after-sigterm": ["signal:1"],
    "gpu-after-reap-commit": ["reaped:1"],
    "gpu-after-popen-then-after-adoption": ["popen:1", "adopted:1"],
}


@pytest.mark.slow
@pytest.mark.parametrize("faults", GPU_CASES.values(), ids=GPU_CASES.keys())
def test_gpu_jobs_killed_anywhere_run_once_and_no_gpu_is_held_twice(tmp_path, driver, faults):
    long_first = needs_adoption(faults)
    for fault in faults:
        answer = driver.run(tmp_path, fault, gpus=True, long_first=long_first)
        assert answer == KILLED, f"{fault} never fired"
    assert driver.run(tmp_path, None, gpus=True, long_first=long_first) == DONE
    workload = [(name, iterations) for name, iterations, _ in workloads(long_first)[1]]
    check_invariants(tmp_path, workload, GPU_VICTIM[0])
    with Store(tmp_path / "state.db") as store:
        events = store.events()
    # Replaying every GPU handed out and given back, in order: never two holders, all back.
    holder: dict[int, str] = {}
    for event in events:
        if event.kind == "gpus" and "held" in event.detail:
            for gpu in event.detail["held"]:
                assert gpu not in holder, (event, holder)
                holder[gpu] = event.job_id
        elif event.kind == "gpus":
            for gpu in event.detail["released"]:
                assert holder.pop(gpu, None) == event.job_id, (event, holder)
    assert holder == {}


def check_invariants(
    home: Path,
    workload: tuple[tuple[str, int], ...] | list[tuple[str, int]] = WORKLOAD,
    victim: str = VICTIM[0],
) -> None:
    with Store(home / "state.db") as store:
        records = {record.name: record for record in store.list()}
        events = store.events()
    # Nothing lost: every submitted job is there, in the state its files say.
    assert set(records) == {name for name, _ in workload} | {victim}
    for name, iterations in workload:
        record = records[name]
        assert record.state is Lifecycle.SUCCEEDED, (name, record.state, record.error)
        job_dir = home / "jobs" / record.id
        assert read_result(job_dir / RESULT_FILE).iterations == iterations
        assert record.result is not None and record.result["iterations"] == iterations
    assert records[victim].state is Lifecycle.CANCELLED
    # Exactly once: one run to the end for each job, a new start only after a recorded stop,
    # and never two runs of one job at the same time (each run holds a lock on its job folder).
    for record in records.values():
        kinds = [run["kind"] for run in runs(home / "jobs" / record.id)]
        stops = sum(e.kind == "stopped" and e.job_id == record.id for e in events)
        assert "overlap" not in kinds, (record.name, kinds)
        if record.state is Lifecycle.SUCCEEDED:
            assert kinds.count("start") == 1 + stops, (record.name, kinds, stops)
            assert kinds.count("end") == 1, (record.name, kinds)
        else:  # cancelled once running: its command may not have started yet
            assert kinds.count("start") <= 1 + stops, (record.name, kinds, stops)
            assert kinds.count("end") == 0, (record.name, kinds)
    # No core held by two jobs at once, replaying what the service handed out, in order.
    held: dict[str, set[int]] = {}
    for event in events:
        if event.kind in ("launched", "re-adopted"):
            held[event.job_id] = set(event.detail["cpus"])
        elif event.kind == "allocation":
            held[event.job_id] = set(event.detail["to"])
        elif event.kind == "state" and event.detail["to"] != "running":
            held.pop(event.job_id, None)
        cores = [core for cpus in held.values() for core in cpus]
        assert len(cores) == len(set(cores)), (event, held)
    # Every runner is gone.
    assert not [folder for folder in find_runners() if folder.startswith(str(home))]
