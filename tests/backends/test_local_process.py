"""qosched.backends.local.process: a worker is found by its job folder and held by a pidfd."""

from __future__ import annotations

import errno
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from worker_helpers import make_job_dir

from qosched.backends.local.process import WorkerProcess, find_workers, start_ticks

WAIT_S = 30.0


def no_pidfd(pid: int) -> int:
    raise OSError(errno.ENOSYS, "Function not implemented")


@pytest.fixture(params=["pidfd", "identity-checks"])
def worker(request, tmp_path: Path, monkeypatch) -> Iterator[tuple[WorkerProcess, Path]]:
    if request.param == "identity-checks":  # a kernel or sandbox without pidfds
        monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    job_dir = make_job_dir(tmp_path, workload=None, command=["sleep", "60"], cpus=None)
    with open(job_dir / "worker.log", "ab") as log:
        started = WorkerProcess.start(sys.executable, job_dir, log=log, env={})
    yield started, job_dir
    started.kill_group(signal.SIGKILL)
    wait_until(started.gone)
    started.close()


def wait_until(condition) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_a_started_worker_is_found_by_its_job_folder(worker):
    process, job_dir = worker
    # A scan right after the start may catch it in mid-exec, its command line still empty.
    wait_until(lambda: find_workers().get(str(job_dir)) == [process.pid])
    assert process.running() and not process.gone()
    assert process.start_ticks == start_ticks(process.pid)


@pytest.mark.parametrize(
    ("folder", "tick_offset", "adopted"),
    [("same", 0, True), ("same", None, True), ("same", 1, False), ("other", 0, False)],
    ids=["same-start", "start-unknown", "other-start", "other-folder"],
)
def test_adopt_checks_the_folder_and_the_start_time(worker, tmp_path, folder, tick_offset, adopted):
    process, job_dir = worker
    ticks = None if tick_offset is None else process.start_ticks + tick_offset
    where = job_dir if folder == "same" else tmp_path / "elsewhere"
    found = WorkerProcess.adopt(process.pid, where, ticks=ticks)
    assert (found is not None) == adopted
    if found is not None:
        assert found.running()
        found.close()


def test_after_exit_a_worker_is_never_signalled_again(worker):
    process, _ = worker
    process.kill_group(signal.SIGKILL)
    wait_until(process.gone)
    assert not process.running()
    assert process.send(signal.SIGTERM) is False  # the pidfd names the dead process, no other
    assert process.exit_code() == -signal.SIGKILL


def test_adopt_refuses_a_pid_that_is_gone(worker):
    process, job_dir = worker
    pid = process.pid
    process.kill_group(signal.SIGKILL)
    wait_until(process.gone)
    process.close()  # reaped: the pid may now go to anyone
    assert WorkerProcess.adopt(pid, job_dir) is None
