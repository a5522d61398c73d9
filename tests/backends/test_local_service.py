"""The local service end to end with real runner processes (kept short: tiny jobs)."""

from __future__ import annotations

import os
import signal
import time
import tracemalloc
from pathlib import Path

import pytest

from qosched.backends.local import process
from qosched.backends.local.service import (
    RUNNER_LOG,
    LocalService,
    assign_cores,
    wait_until_idle,
)
from qosched.core.errors import InputError
from qosched.trainingjob.jobspec import Deadline, Resources, TrainingJobSpec
from qosched.trainingjob.protocol import ENV_CRASH_AT

pytestmark = pytest.mark.process

CORES = tuple(sorted(os.sched_getaffinity(0)))


def spec(name: str, iterations: int = 30, deadline_s: int = 600, **extra) -> TrainingJobSpec:
    return TrainingJobSpec(
        name=name,
        iterations=iterations,
        deadline=Deadline(relative_s=deadline_s, absolute_at=None),
        workload=extra.pop("workload", "cnn"),
        resources=Resources(min_cpus=1, max_cpus=len(CORES)),
        **extra,
    )


def open_service(home: Path, policy: str = "qos") -> LocalService:
    return LocalService.open(home, policy=policy, tick_s=0.5)


# -- assign_cores: hand-computed cases -------------------------------------------------------------


def test_unchanged_jobs_keep_their_cores_and_new_ones_take_free_cores():
    current = {"a": (2, 3), "b": (0,)}
    assert assign_cores({"a": 2, "b": 1, "c": 1}, current, range(4)) == {
        "a": (2, 3),
        "b": (0,),
        "c": (1,),
    }


def test_a_shrinking_job_keeps_a_prefix_and_a_growing_one_keeps_its_own():
    current = {"a": (0, 1, 2), "b": (3,)}
    assert assign_cores({"a": 1, "b": 3}, current, range(4)) == {"a": (0,), "b": (1, 2, 3)}


def test_more_cores_than_exist_is_refused():
    with pytest.raises(ValueError, match="5 cores wanted, 4 exist"):
        assign_cores({"a": 3, "b": 2}, {}, range(4))


# -- real processes -------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_job_runs_to_completion_and_its_result_is_recorded(tmp_path):
    service = open_service(tmp_path)
    job_id = service.submit_spec(spec("one")).id
    assert wait_until_idle(service, timeout_s=120)
    job = service.job(job_id)
    assert job.state == "succeeded"
    assert job.iterations_done == 30
    record = service.store.get(job_id)
    assert record.result is not None and record.result["iterations"] == 30
    samples = service.store.progress(job_id)
    assert samples and samples[-1].iteration == 30
    assert [s.iteration for s in samples] == sorted(s.iteration for s in samples)
    service.close()


@pytest.mark.slow
def test_a_killed_service_loses_no_job_and_every_job_still_completes(tmp_path):
    service = open_service(tmp_path)
    first = service.submit_spec(spec("first", iterations=150)).id
    second = service.submit_spec(spec("second", iterations=40, workload="transformer")).id
    deadline = time.monotonic() + 60
    while service.job(first).iterations_done < 5 and time.monotonic() < deadline:
        service.step()
        time.sleep(0.2)
    assert service.job(first).state == "running"
    # The service dies without stopping anything: runners keep running in their own session.
    service.store.close()
    del service
    reopened = open_service(tmp_path)
    assert {j.id for j in reopened.jobs()} == {first, second}
    assert wait_until_idle(reopened, timeout_s=180)
    assert [reopened.job(j).state for j in (first, second)] == ["succeeded", "succeeded"]
    kinds = [e.kind for e in reopened.store.events(first)]
    assert "re-adopted" in kinds or kinds.count("launched") >= 2
    reopened.close()


#: A ``sitecustomize`` that makes ``python -m qosched.backends.local.worker`` run the runner: the
#: runner's module had that name in earlier versions, so a process started this way has the
#: command line of a runner the previous version launched.
PREVIOUS_NAME_SITE = """
import importlib.abc
import importlib.util
import sys


class PreviousName(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "qosched.backends.local.worker":
            return None
        origin = importlib.util.find_spec("qosched.backends.local.runner").origin
        return importlib.util.spec_from_file_location(name, origin)


sys.meta_path.insert(0, PreviousName())
"""


def test_a_runner_the_previous_version_started_is_adopted_after_an_upgrade(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(PREVIOUS_NAME_SITE)
    home = tmp_path / "home"
    try:
        with monkeypatch.context() as previous:  # the previous version launches the runner
            previous.setattr(process, "RUNNER_MODULE", "qosched.backends.local.worker")
            previous.setenv("PYTHONPATH", str(site), prepend=os.pathsep)
            service = open_service(home, policy="fifo")
            job_id = service.submit_spec(spec("old", iterations=100_000)).id
            deadline = time.monotonic() + 60
            while service.job(job_id).iterations_done < 2 and time.monotonic() < deadline:
                service.step()
                time.sleep(0.2)
            assert service.job(job_id).state == "running"
            (launched,) = [e for e in service.store.events(job_id) if e.kind == "launched"]
            pid = launched.detail["pid"]
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            assert cmdline[1:3] == [b"-m", b"qosched.backends.local.worker"]
            service.store.close()  # the service dies; its runner runs on
            del service
        upgraded = open_service(home, policy="fifo")
        readopted = [e for e in upgraded.store.events(job_id) if e.kind == "re-adopted"]
        assert [e.detail["pid"] for e in readopted] == [pid]
        assert upgraded.job(job_id).state == "running"
        upgraded.cancel(job_id)  # and it is the new service's to stop
        assert wait_until_idle(upgraded, timeout_s=60)
        assert upgraded.job(job_id).state == "cancelled"
        assert upgraded.job(job_id).attempts == 1
        upgraded.close()
    finally:  # a failed check must not leave a 100,000-iteration job running
        for folder, pids in process.find_runners().items():
            if folder.startswith(str(home)):
                for left in pids:
                    os.kill(left, signal.SIGKILL)


@pytest.mark.slow
def test_a_crashing_job_is_retried_then_failed_with_its_error(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_CRASH_AT, "3")
    service = open_service(tmp_path)
    job_id = service.submit_spec(spec("crashy")).id
    assert wait_until_idle(service, timeout_s=120)
    job = service.job(job_id)
    assert job.state == "failed"
    assert job.attempts == 3
    assert "QOSCHED_RUNNER_CRASH_AT" in job.error or "crash" in job.error.lower()
    service.close()


def test_cancel_stops_a_running_job_and_a_finished_job_cannot_be_cancelled(tmp_path):
    service = open_service(tmp_path)
    job_id = service.submit_spec(spec("long", iterations=5000)).id
    deadline = time.monotonic() + 60
    while service.job(job_id).state != "running" and time.monotonic() < deadline:
        service.step()
        time.sleep(0.2)
    service.cancel(job_id)
    assert wait_until_idle(service, timeout_s=60)
    assert service.job(job_id).state == "cancelled"
    with pytest.raises(InputError, match="already cancelled"):
        service.cancel(job_id)
    service.close()


def test_qos_declines_an_impossible_deadline_unless_best_effort_is_allowed(tmp_path):
    service = open_service(tmp_path)
    # A million iterations in a minute: no prior speed on this machine comes near.
    hopeless = service.submit_spec(spec("hopeless", iterations=1_000_000, deadline_s=60))
    assert hopeless.state == "declined"
    allowed = service.submit_spec(
        spec("hopeful", iterations=1_000_000, deadline_s=60, best_effort=True)
    )
    assert allowed.state in ("queued", "running")
    service.cancel(allowed.id)
    wait_until_idle(service, timeout_s=60)
    service.close()


def test_a_job_over_its_memory_limit_is_killed_and_failed_with_the_reason(tmp_path):
    service = open_service(tmp_path)
    tiny = TrainingJobSpec(
        name="tiny-memory",
        iterations=5000,
        deadline=Deadline(relative_s=600, absolute_at=None),
        workload="cnn",
        resources=Resources(min_cpus=1, max_cpus=len(CORES), memory_bytes=1 << 20),
    )
    job_id = service.submit_spec(tiny).id
    assert wait_until_idle(service, timeout_s=120)
    job = service.job(job_id)
    assert job.state == "failed"
    assert "exceeded its memory limit of 1 MiB" in job.error
    assert job.attempts == 1  # not retried: it would exceed the limit again
    service.close()


def test_resident_bytes_counts_a_process_and_its_children():
    import signal
    import subprocess
    import sys

    from qosched.backends.local.service import resident_bytes

    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; "
            "c = subprocess.Popen([sys.executable, '-c', 'import time; x = bytearray(64 << 20); "
            "time.sleep(30)']); time.sleep(30)",
        ],
        start_new_session=True,  # one process group: the test can stop the child with it
    )
    try:
        deadline = time.monotonic() + 20
        alone = 0
        while time.monotonic() < deadline:
            alone = resident_bytes(parent.pid)
            if alone > 64 << 20:  # the child's 64 MiB buffer is counted
                break
            time.sleep(0.2)
        assert alone > 64 << 20
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()
    assert resident_bytes(parent.pid) == 0


def test_the_tail_of_a_long_log_is_read_from_its_end(tmp_path):
    # The web page asks for a job's last lines every few seconds, however long its log grew.
    service = open_service(tmp_path)
    job_id = service.submit_spec(spec("chatty")).id
    log = tmp_path / "jobs" / job_id / RUNNER_LOG
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"early line\n" * 1_000_000 + "last but one\nlast \u2713\n".encode())
    tracemalloc.start()
    try:
        tail = service.logs(job_id, tail_lines=2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        service.close()
    assert tail == "last but one\nlast \u2713\n"
    assert peak < 1 << 20  # the log is 11 MB
