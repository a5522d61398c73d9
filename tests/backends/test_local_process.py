"""qosched.backends.local.process: a runner is found by its job folder and held by a pidfd."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from runner_helpers import make_job_dir

from qosched.backends.local import process
from qosched.backends.local.process import ExitWaiter, RunnerProcess, find_runners, start_ticks
from qosched.backends.local.service import RUNNER_LOG

pytestmark = pytest.mark.process

WAIT_S = 30.0


def no_pidfd(pid: int) -> int:
    raise OSError(errno.ENOSYS, "Function not implemented")


@pytest.fixture(params=["pidfd", "identity-checks"])
def runner(request, tmp_path: Path, monkeypatch) -> Iterator[tuple[RunnerProcess, Path]]:
    if request.param == "identity-checks":  # a kernel or sandbox without pidfds
        monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    job_dir = make_job_dir(tmp_path, workload=None, command=["sleep", "60"], cpus=None)
    with open(job_dir / RUNNER_LOG, "ab") as log:
        started = RunnerProcess.start(sys.executable, job_dir, log=log, env={})
    yield started, job_dir
    started.kill_group(signal.SIGKILL)
    wait_until(started.gone)
    started.close()


def wait_until(condition) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_a_started_runner_is_found_by_its_job_folder(runner):
    process, job_dir = runner
    # A scan right after the start may catch it in mid-exec, its command line still empty.
    wait_until(lambda: find_runners().get(str(job_dir)) == [process.pid])
    assert process.running() and not process.gone()
    assert process.start_ticks == start_ticks(process.pid)


@pytest.mark.parametrize(
    ("folder", "tick_offset", "adopted"),
    [("same", 0, True), ("same", None, True), ("same", 1, False), ("other", 0, False)],
    ids=["same-start", "start-unknown", "other-start", "other-folder"],
)
def test_adopt_checks_the_folder_and_the_start_time(runner, tmp_path, folder, tick_offset, adopted):
    process, job_dir = runner
    ticks = None if tick_offset is None else process.start_ticks + tick_offset
    where = job_dir if folder == "same" else tmp_path / "elsewhere"
    found = RunnerProcess.adopt(process.pid, where, ticks=ticks)
    assert (found is not None) == adopted
    if found is not None:
        assert found.running()
        found.close()


def test_after_exit_a_runner_is_never_signalled_again(runner):
    process, _ = runner
    process.kill_group(signal.SIGKILL)
    wait_until(process.gone)
    assert not process.running()
    assert process.send(signal.SIGTERM) is False  # the pidfd names the dead process, no other
    assert process.exit_code() == -signal.SIGKILL


def test_adopt_refuses_a_pid_that_is_gone(runner):
    process, job_dir = runner
    pid = process.pid
    process.kill_group(signal.SIGKILL)
    wait_until(process.gone)
    process.close()  # reaped: the pid may now go to anyone
    assert RunnerProcess.adopt(pid, job_dir) is None


@pytest.mark.parametrize(
    ("module", "found"),
    [
        ("qosched.backends.local.runner", True),
        ("qosched.backends.local.worker", True),  # what earlier versions started
        ("qosched.backends.local.other", False),
    ],
)
def test_the_scan_knows_a_runner_by_its_module_now_and_before_its_rename(
    tmp_path, monkeypatch, module, found
):
    proc = tmp_path / "proc"
    job_dir = "/home/q/jobs/job-1"
    (proc / "4242").mkdir(parents=True)
    argv = [sys.executable, "-m", module, job_dir]
    (proc / "4242" / "cmdline").write_bytes(b"\0".join(os.fsencode(a) for a in argv) + b"\0")
    # Fields from 1 on: pid, (comm), state, ... as /proc/PID/stat has them.
    (proc / "4242" / "stat").write_text("4242 (python) S " + " ".join(["0"] * 49) + "\n")
    monkeypatch.setattr(process, "_PROC", proc)
    assert process.runner_folder(4242) == (job_dir if found else None)
    assert find_runners() == ({job_dir: [4242]} if found else {})


#: A child subreaper, as a runner is, whose child leaves the session, double-forks and ignores
#: SIGTERM (the grandchild writes its pid to argv[1]); the subreaper itself waits.
SUBREAPER_WITH_ESCAPEE = """
import ctypes, os, signal, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with open(sys.argv[1] + ".tmp", "w") as out:
            out.write(str(os.getpid()))
        os.rename(sys.argv[1] + ".tmp", sys.argv[1])
        os.execve("/bin/sleep", ["sleep", "300"], {})
    os._exit(0)
time.sleep(300)
"""


def test_kill_descendants_kills_a_process_that_left_the_session_and_spares_the_rest(tmp_path):
    pid_file = tmp_path / "escaped.pid"
    subreaper = subprocess.Popen([sys.executable, "-c", SUBREAPER_WITH_ESCAPEE, str(pid_file)])
    bystander = subprocess.Popen(["sleep", "300"])  # this test's child, not the subreaper's
    try:
        wait_until(lambda: pid_file.exists())
        escaped = int(pid_file.read_text())
        # The orphan went to the subreaper, in a session of its own.
        wait_until(lambda: process._stat_fields(escaped)[4 - 3] == str(subreaper.pid))
        assert os.getsid(escaped) != os.getsid(subreaper.pid)
        assert process.kill_descendants(subreaper.pid) == 1
        wait_until(lambda: not alive(escaped))
        assert subreaper.poll() is None and bystander.poll() is None  # only the descendants
    finally:
        for child in (subreaper, bystander):
            child.kill()
            child.wait()


def alive(pid: int) -> bool:
    fields = process._stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def test_a_wait_ends_when_a_watched_runner_exits(runner):
    process, _ = runner
    waiter = ExitWaiter([process])
    killer = threading.Timer(0.2, process.send, (signal.SIGKILL,))
    killer.start()
    try:
        if process._pidfd is not None:
            assert waiter.wait(WAIT_S) is True  # woken by the exit, not by the timeout
        else:  # without pidfds nothing wakes a wait: it sleeps out its time
            started = time.monotonic()
            assert waiter.wait(1.0) is False
            assert time.monotonic() - started >= 1.0
    finally:
        killer.join()
    wait_until(lambda: not process.running())


def test_a_runner_that_has_exited_is_not_watched(runner):
    # It would wake every wait at once: a service would spin between its rounds.
    process, _ = runner
    process.send(signal.SIGKILL)
    wait_until(lambda: not process.running())
    assert ExitWaiter([process]).wait(0.2) is False


def test_a_wait_ends_once_stop_is_set(runner):
    process, _ = runner
    stop = threading.Event()
    stop.set()
    started = time.monotonic()
    assert ExitWaiter([process]).wait(WAIT_S, stop) is False
    assert time.monotonic() - started < WAIT_S
    assert process.running()
