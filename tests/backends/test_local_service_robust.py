"""The local service under trouble: one job's bad input fails that job alone, recovery never
refuses to start, store trouble is retried, a reused pid is never taken for a runner, and a
stopped job's cores are handed on only once its processes are gone."""

from __future__ import annotations

import errno
import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from command_jobs import CORES, command_spec, counting_spec, python_spec, runs

import qosched.backends.local.service as service_module
from qosched.backends.local.cgroups import ENV_RUNNER_CGROUP, JobGroups, detect
from qosched.backends.local.process import find_runners, launch_runner
from qosched.backends.local.service import LocalService, wait_until_idle
from qosched.backends.local.speed_memory import speed_key
from qosched.backends.local.store import Store
from qosched.cluster.policies import Policy
from qosched.cluster.state import Decision
from qosched.core.errors import InputError

pytestmark = pytest.mark.process

WAIT_S = 60.0  # generous: the machine may be busy with other test runs


def open_service(home: Path, **options) -> LocalService:
    options.setdefault("tick_s", 0.2)
    options.setdefault("grace_s", 2.0)
    return LocalService.open(home, **options)


def idle(service: LocalService) -> bool:
    return wait_until_idle(service, timeout_s=WAIT_S, poll_s=0.05)


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def kinds(service: LocalService, job_id: str) -> list[str]:
    return [event.kind for event in service.store.events(job_id)]


# -- one job's trouble is that job's failure ------------------------------------------------------

# Writes into the runner's own progress file, which only the runner may write.
FOREIGN_LINE = """
    import os, time
    with open(os.path.join(os.environ["QOSCHED_JOB_DIR"], "progress.jsonl"), "a") as out:
        out.write({line!r} + "\\n")
    time.sleep(30)
"""


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("this is not JSON", r"progress\.jsonl:\d+: not valid JSON"),
        (
            json.dumps({"t": time.time(), "event": "progress", "iteration": 1e20, "cpus": 1}),
            r"progress\.jsonl:\d+: field 'iteration': expected a whole number below 2\*\*53",
        ),
        (
            json.dumps({"t": 1e300, "event": "progress", "iteration": 3, "cpus": 1}),
            r"progress\.jsonl:\d+: field 't': expected a finite number in \[0, ",
        ),
    ],
    ids=["not-json", "iteration-1e20", "time-past-year-9999"],
)
def test_a_bad_line_in_the_runners_progress_file_fails_that_job_alone(tmp_path, line, reason):
    service = open_service(tmp_path)
    bad = service.submit_spec(python_spec("bad", FOREIGN_LINE.format(line=line))).id
    good = service.submit_spec(counting_spec("good")).id
    assert idle(service)  # step() never raised, and both jobs reached a final state
    failed = service.job(bad)
    assert failed.state == "failed"
    assert failed.error.startswith("reading its progress: ")
    assert re.search(reason, failed.error), failed.error
    assert "failing" in kinds(service, bad)
    assert service.job(good).state == "succeeded"
    assert not find_runners().get(str(tmp_path / "jobs" / bad))  # its runner was stopped
    service.close()


# Replaces the runner's own progress file by a link to /dev/zero: read whole, it fills memory.
ENDLESS_LOG = """
    import os, time
    path = os.path.join(os.environ["QOSCHED_JOB_DIR"], "progress.jsonl")
    os.remove(path)
    os.symlink("/dev/zero", path)
    time.sleep(30)
"""


def test_a_runners_progress_file_made_a_link_to_dev_zero_fails_that_job_alone(tmp_path):
    service = open_service(tmp_path)
    bad = service.submit_spec(python_spec("endless", ENDLESS_LOG)).id
    good = service.submit_spec(counting_spec("good")).id
    assert idle(service)
    failed = service.job(bad)
    assert failed.state == "failed"
    assert "progress.jsonl: is a symbolic link, not a regular file" in failed.error
    assert service.job(good).state == "succeeded"
    service.close()


# Starts over from iteration 1 halfway, as a command without a checkpoint does when restarted.
STARTS_OVER = """
    import json, os, time
    with open(os.environ["QOSCHED_PROGRESS_FILE"], "a") as out:
        for i in [1, 2, 3, 4, 1, 2, 1, 2, 3, 4, 5]:
            out.write(json.dumps({"iteration": i}) + "\\n")
            out.flush()
            time.sleep(0.6)  # over the runner's report interval: each value is relayed
"""


@pytest.mark.slow
def test_progress_that_goes_back_is_one_warning_and_the_job_goes_on(tmp_path):
    service = open_service(tmp_path)
    job_id = service.submit_spec(python_spec("starts-over", STARTS_OVER)).id
    assert idle(service)  # step() never raised
    assert service.job(job_id).state == "succeeded"
    warnings = [
        event.detail["message"]
        for event in service.store.events(job_id)
        if event.kind == "worker-warning"
    ]
    assert warnings == ["progress went back from iteration 4 to 1"]  # said once per start
    service.close()


# Reports one iteration, then hangs.
HANGS = """
    import json, os, time
    with open(os.environ["QOSCHED_PROGRESS_FILE"], "a") as out:
        out.write(json.dumps({"iteration": 1}) + "\\n")
    time.sleep(60)
"""


def test_a_job_that_stops_reporting_is_noted_stalled_and_its_finish_no_longer_predicted(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(service_module, "STALL_MIN_S", 1.0)
    service = open_service(tmp_path, cpus=CORES[:1])
    spec = python_spec("hangs", HANGS, iterations=2)
    # Its speed known from an earlier run, so it runs at once instead of being measured first.
    service.store.remember_speeds(speed_key(spec), {1: 10.0}, "j-000000", 0.0)
    job_id = service.submit_spec(spec).id
    deadline = time.monotonic() + WAIT_S
    while "stalled" not in kinds(service, job_id):
        assert time.monotonic() < deadline, kinds(service, job_id)
        service.step()
        time.sleep(0.1)
    (stalled,) = [e for e in service.store.events(job_id) if e.kind == "stalled"]
    assert stalled.detail["iteration"] == 1 and stalled.detail["seconds"] >= 1
    view = service.job(job_id)
    assert view.state == "running" and view.predicted_finish_at is None
    for _ in range(20):  # said once, not at every round
        service.step()
    assert kinds(service, job_id).count("stalled") == 1
    service.cancel(job_id)
    assert idle(service)
    service.close()


EXITS_EARLY = """
    import json, os
    with open(os.environ["QOSCHED_PROGRESS_FILE"], "a") as out:
        out.write(json.dumps({"iteration": 3}) + "\\n")
"""


def test_a_command_exiting_0_early_is_done_and_shows_the_work_it_reported(tmp_path):
    service = open_service(tmp_path)
    job_id = service.submit_spec(python_spec("early", EXITS_EARLY, iterations=20)).id
    assert idle(service)
    job = service.job(job_id)
    assert (job.state, job.iterations_done, job.iterations) == ("succeeded", 3, 20)
    service.close()


BAD_COMMAND_LINES = """
    import json, os, time
    with open(os.environ["QOSCHED_PROGRESS_FILE"], "a") as out:
        out.write("hello from print()\\n")
        out.write('{"iteration": 1e20}\\n')
        out.write('{"iteration": 100000000000000000000}\\n')
        out.write('{"iteration": -1}\\n')
        for i in range(1, 6):
            out.write(json.dumps({"iteration": i}) + "\\n")
            out.flush()
            time.sleep(0.02)
"""


def test_bad_lines_from_a_command_are_warnings_and_the_job_goes_on(tmp_path):
    service = open_service(tmp_path)
    job_id = service.submit_spec(python_spec("chatty", BAD_COMMAND_LINES)).id
    assert idle(service)
    job = service.job(job_id)
    assert (job.state, job.iterations_done) == ("succeeded", 5)
    warnings = [
        event.detail["message"]
        for event in service.store.events(job_id)
        if event.kind == "worker-warning"  # the stored name, kept for existing stores
    ]
    assert [w.split(": ", 1)[0] for w in warnings] == [
        f"command_progress.jsonl:{n}" for n in (1, 2, 3, 4)
    ]
    assert "not valid JSON" in warnings[0]
    assert all("expected a whole number below 2**53" in w for w in warnings[1:3])
    assert "expected a whole number >= 0, got -1" in warnings[3]
    log = service.logs(job_id)
    assert "warning: command_progress.jsonl:1: not valid JSON" in log
    service.close()


@pytest.mark.parametrize(
    ("iterations", "unreadable"),
    [(0, True), (10**400, False)],
    ids=["refused-by-a-stricter-reader", "401-digits"],
)
def test_a_stored_spec_that_cannot_be_tracked_fails_that_job_and_the_service_starts(
    tmp_path, iterations, unreadable
):
    service = open_service(tmp_path)
    broken = service.submit_spec(counting_spec("broken")).id
    fine = service.submit_spec(counting_spec("fine")).id
    service.close()
    with sqlite3.connect(tmp_path / "state.db") as db:
        (text,) = db.execute("SELECT spec_json FROM jobs WHERE id = ?", (broken,)).fetchone()
        spec = json.loads(text)
        spec["spec"]["work"]["iterations"] = iterations
        db.execute("UPDATE jobs SET spec_json = ? WHERE id = ?", (json.dumps(spec), broken))
    reopened = open_service(tmp_path)  # does not raise
    job = reopened.job(broken)
    assert job.state == "failed"
    assert job.error.startswith("cannot be tracked: "), job.error
    if unreadable:
        assert "iterations" in job.error and job.iterations is None
    assert {j.id for j in reopened.jobs()} == {broken, fine}  # listing still works
    assert idle(reopened)
    assert reopened.job(fine).state == "succeeded"
    reopened.close()


def test_a_bad_stored_event_fails_that_job_at_open(tmp_path):
    service = open_service(tmp_path)
    job_id = service.submit_spec(counting_spec("odd")).id
    service.store.add_event(job_id, time.time(), "launching", {"attempt": "many"})
    service.close()
    reopened = open_service(tmp_path)
    assert reopened.job(job_id).state == "failed"
    assert "cannot be tracked: ValueError" in reopened.job(job_id).error
    reopened.close()


def fill_with_a_directory(job_dir: Path) -> None:
    (job_dir / "progress.jsonl").mkdir()


def fill_with_a_huge_iteration(job_dir: Path) -> None:
    line = {"t": time.time(), "event": "progress", "iteration": 1e20, "cpus": 1}
    (job_dir / "progress.jsonl").write_text(json.dumps(line) + "\n")


@pytest.mark.parametrize(
    ("fill", "reason"),
    [
        (fill_with_a_directory, "progress.jsonl: is a folder, not a regular file"),
        (fill_with_a_huge_iteration, "progress.jsonl:1: field 'iteration'"),
    ],
    ids=["unreadable", "iteration-1e20"],
)
def test_a_job_folder_that_cannot_be_read_at_open_fails_that_job(tmp_path, fill, reason):
    service = open_service(tmp_path)
    job_id = service.submit_spec(counting_spec("unreadable")).id
    fine = service.submit_spec(counting_spec("fine")).id
    job_dir = tmp_path / "jobs" / job_id
    job_dir.mkdir(parents=True)
    fill(job_dir)
    # It ran, and its runner died with the service.
    service.store.record_launch_intent(job_id, time.time(), str(job_dir), [CORES[0]])
    service.store.record_launched(
        job_id, time.time(), cpus=[CORES[0]], pid=os.getpid(), start_ticks=0, attempt=1
    )
    service.close()
    reopened = open_service(tmp_path)
    job = reopened.job(job_id)
    assert job.state == "failed"
    assert job.error.startswith("cannot be tracked: ") and reason in job.error
    assert idle(reopened)
    assert reopened.job(fine).state == "succeeded"
    reopened.close()


def test_a_round_that_raises_keeps_the_service_up(tmp_path, monkeypatch):
    monkeypatch.setattr(service_module, "STORE_RETRY_S", 0.05)
    service = open_service(tmp_path)
    job_id = service.submit_spec(counting_spec("survivor")).id
    calls = []

    def broken_allocate(view):
        calls.append(view)
        raise RuntimeError("a policy bug")

    service.policy.allocate = broken_allocate  # the rebuilt service gets a fresh policy
    stop = threading.Event()
    runner = threading.Thread(target=service.run, args=(stop,))
    runner.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while not service.idle() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        runner.join()
    assert len(calls) == 1
    assert service.job(job_id).state == "succeeded"
    service.close()


# -- store trouble is the service's, retried ------------------------------------------------------


class FlakyStore(Store):
    """A real store whose commits number ``fail_at`` (counted once armed) fail as a full disk
    does: the transaction is rolled back and ``sqlite3.OperationalError`` raised."""

    def __init__(self, path: Path, fail_at: set[int]) -> None:
        self.fail_at = fail_at
        self.armed = False
        self.commits = 0
        self.failed = 0
        super().__init__(path)

    def add_machine_use(self, *args: Any, **kwargs: Any) -> None:
        # Not one of the commits counted: the loop samples machine use after each round, and
        # the numbers in fail_at name the commits of the job's own life.
        armed, self.armed = self.armed, False
        try:
            super().add_machine_use(*args, **kwargs)
        finally:
            self.armed = armed

    def _commit(self, db: sqlite3.Connection) -> None:
        if self.armed:
            self.commits += 1
            if self.commits in self.fail_at:
                self.failed += 1
                raise sqlite3.OperationalError("database or disk is full")
        super()._commit(db)


@pytest.mark.parametrize(
    "fail_at",
    [{1}, {2}, {2, 3, 4}, {3}, {5, 6}],
    ids=["launch-intent", "launch-record", "launch-record-thrice", "first-sample", "later"],
)
def test_store_trouble_in_a_round_is_retried_and_runs_the_job_once(tmp_path, monkeypatch, fail_at):
    monkeypatch.setattr(service_module, "STORE_RETRY_S", 0.05)
    (tmp_path / "jobs").mkdir()
    store = FlakyStore(tmp_path / "state.db", fail_at)
    service = LocalService(tmp_path, store, CORES, "qos", tick_s=0.2, grace_s=2.0)
    job_id = service.submit_spec(counting_spec("once", iterations=8)).id
    store.armed = True
    stop = threading.Event()
    runner = threading.Thread(target=service.run, args=(stop,))
    runner.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while not service.idle() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        runner.join()
    assert store.failed == len(fail_at)  # every injected failure happened
    job = service.job(job_id)
    assert (job.state, job.iterations_done) == ("succeeded", 8)
    records = runs(tmp_path / "jobs" / job_id)
    assert [r["kind"] for r in records] == ["start", "end"]  # once, never two at a time
    service.close()


@pytest.mark.slow
def test_status_says_the_service_is_in_trouble_while_its_state_cannot_be_written(
    tmp_path, monkeypatch
):
    """A full disk: the job's runner may end while the store still says running, so status
    must say its states may be behind, until a round goes through again."""
    monkeypatch.setattr(service_module, "STORE_RETRY_S", 0.05)
    (tmp_path / "jobs").mkdir()
    store = FlakyStore(tmp_path / "state.db", set(range(1, 9)))
    service = LocalService(tmp_path, store, CORES, "qos", tick_s=0.2, grace_s=2.0)
    job_id = service.submit_spec(counting_spec("once", iterations=4)).id
    assert service.status().trouble is None
    store.armed = True
    seen = []
    stop = threading.Event()
    runner = threading.Thread(target=service.run, args=(stop,))
    runner.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while not service.idle() and time.monotonic() < deadline:
            status = service.status()
            if status.trouble is not None:
                seen.append((status.trouble, status.trouble_since))
            time.sleep(0.02)
    finally:
        stop.set()
        runner.join()
    assert store.failed == 8
    assert seen, "status never said the service was in trouble"
    trouble, since = seen[0]
    assert since is not None and since <= time.time()
    assert trouble.startswith("its state cannot be written: ") and "disk is full" in trouble
    assert service.job(job_id).state == "succeeded"
    assert service.status().trouble is None
    service.close()


# -- a runner is known by a pidfd and its job folder, never by a pid alone -----------------------


def test_a_reused_pid_is_not_adopted_and_never_signalled(tmp_path):
    service = open_service(tmp_path, cpus=CORES[:1])
    job_id = service.submit_spec(counting_spec("reused", iterations=1000, sleep_s=0.02)).id
    job_dir = tmp_path / "jobs" / job_id
    # What the store says after the runner died and its pid went to another process (one that
    # even names the job folder on its command line).
    stranger = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", str(job_dir)],
        start_new_session=True,
    )
    try:
        core = CORES[0]
        service.store.record_launch_intent(job_id, time.time(), str(job_dir), [core])
        service.store.record_launched(
            job_id, time.time(), cpus=[core], pid=stranger.pid, start_ticks=0, attempt=1
        )
        service.close()
        reopened = open_service(tmp_path, cpus=CORES[:1], grace_s=0.5)
        assert "re-adopted" not in kinds(reopened, job_id)
        # Never measured: still profiling, to run (and be measured) again from its checkpoint.
        assert reopened.job(job_id).state == "profiling"
        assert not reopened.job(job_id).cpus
        deadline = time.monotonic() + WAIT_S
        while not runs(job_dir) and time.monotonic() < deadline:
            reopened.step()
            time.sleep(0.05)
        reopened.cancel(job_id)
        assert idle(reopened)
        assert reopened.job(job_id).state == "cancelled"
        assert stranger.poll() is None  # never signalled
        reopened.close()
    finally:
        stranger.kill()
        stranger.wait()


# -- stop means stopped ---------------------------------------------------------------------------

STUBBORN = """
    import os, signal, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(os.path.join(os.environ["QOSCHED_JOB_DIR"], "child.pid"), "w") as out:
        out.write(str(os.getpid()))
    time.sleep(60)
"""


def test_cancel_kills_a_job_ignoring_sigterm_after_the_grace_and_only_then_hands_on_its_core(
    tmp_path,
):
    service = open_service(tmp_path, cpus=CORES[:1], grace_s=1.0)
    stubborn = service.submit_spec(python_spec("stubborn", STUBBORN)).id
    child = int(wait_for_file_while_stepping(service, tmp_path / "jobs" / stubborn / "child.pid"))
    waiting = service.submit_spec(counting_spec("waiting")).id
    cancelled_at = time.monotonic()
    service.cancel(stubborn)
    overlap = []
    deadline = time.monotonic() + WAIT_S
    while not service.idle() and time.monotonic() < deadline:
        service.step()
        if pid_alive(child) and service.job(waiting).state == "running":
            overlap.append(time.monotonic() - cancelled_at)
        time.sleep(0.05)
    assert service.idle()
    assert not overlap, f"the core was handed on while the cancelled job ran: {overlap}"
    assert service.job(stubborn).state == "cancelled"
    assert not pid_alive(child)
    assert "killed" in kinds(service, stubborn)
    assert service.job(waiting).state == "succeeded"
    service.close()


def wait_for_file_while_stepping(service: LocalService, path: Path) -> str:
    deadline = time.monotonic() + WAIT_S
    while not path.exists() or not path.read_text().strip():
        assert time.monotonic() < deadline, f"{path} never appeared"
        service.step()
        time.sleep(0.05)
    return path.read_text()


class NewestFirst(Policy):
    """A policy that gives every core to the newest job: the one before it is pre-empted."""

    def allocate(self, view) -> Decision:
        if not view.jobs:
            return Decision({})
        newest = max(view.jobs, key=lambda job: job.spec.submit_s)
        return Decision({newest.spec.job_id: view.cluster.total_workers})


def test_a_preempted_job_ignoring_sigterm_keeps_its_core_until_it_is_killed(tmp_path):
    service = open_service(tmp_path, cpus=CORES[:1], grace_s=1.0)
    service.policy = NewestFirst()
    stubborn = service.submit_spec(python_spec("stubborn", STUBBORN)).id
    child = int(wait_for_file_while_stepping(service, tmp_path / "jobs" / stubborn / "child.pid"))
    newer = service.submit_spec(counting_spec("newer"), now=time.time() + 1).id
    overlap = []
    deadline = time.monotonic() + WAIT_S
    while service.job(newer).state != "succeeded" and time.monotonic() < deadline:
        service.step()
        if pid_alive(child) and service.job(newer).state == "running":
            overlap.append(service.job(newer))
        time.sleep(0.05)
    assert service.job(newer).state == "succeeded"
    assert not overlap, "the core was handed on while the pre-empted job still ran"
    assert not pid_alive(child)
    assert "killed" in kinds(service, stubborn)
    stopped = [e.detail["why"] for e in service.store.events(stubborn) if e.kind == "stopped"]
    assert stopped[0] == "did not stop within 1 s of SIGTERM; killed"
    service.cancel(stubborn)
    assert idle(service)
    service.close()


def test_down_kills_a_job_ignoring_sigterm_after_the_grace_and_records_it_preempted(tmp_path):
    service = open_service(tmp_path, cpus=CORES[:1], grace_s=0.5)
    stubborn = service.submit_spec(python_spec("stubborn", STUBBORN)).id
    child = int(wait_for_file_while_stepping(service, tmp_path / "jobs" / stubborn / "child.pid"))
    service.stop_runners()
    assert not pid_alive(child)
    job = service.job(stubborn)
    # It resumes at the next start; stopped before it was measured, it is measured again then.
    assert job.state == "profiling" and not job.cpus
    stopped = [e for e in service.store.events(stubborn) if e.kind == "stopped"]
    assert "did not stop within 0.5 s of SIGTERM; killed" in stopped[-1].detail["why"]
    service.close()


def test_the_grace_period_is_checked(tmp_path):
    with pytest.raises(InputError, match="grace_s"):
        open_service(tmp_path, grace_s=-1.0)


def test_an_unknown_fault_point_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(service_module.FAULT_ENV, "nowhere:1")
    with pytest.raises(InputError, match="unknown fault point 'nowhere'"):
        open_service(tmp_path)


# -- nothing runs twice, nothing is left behind ---------------------------------------------------


def test_a_job_that_completed_while_the_service_was_down_is_recorded_done_not_run_again(
    tmp_path,
):
    service = open_service(tmp_path)
    job_id = service.submit_spec(counting_spec("quick", iterations=10)).id
    job_dir = tmp_path / "jobs" / job_id
    wait_for_file_while_stepping(service, job_dir / "runs.jsonl")
    service.close()  # the service dies; the runner finishes on its own
    deadline = time.monotonic() + WAIT_S
    while find_runners().get(str(job_dir)) and time.monotonic() < deadline:
        time.sleep(0.05)
    reopened = open_service(tmp_path)
    job = reopened.job(job_id)
    assert (job.state, job.iterations_done) == ("succeeded", 10)
    assert [r["kind"] for r in runs(job_dir)] == ["start", "end"]
    reopened.close()


LEAVES_A_CHILD = """
    import os, subprocess
    child = subprocess.Popen(["sleep", "60"])
    with open(os.path.join(os.environ["QOSCHED_JOB_DIR"], "leftover.pid"), "w") as out:
        out.write(str(child.pid))
    with open(os.environ["QOSCHED_PROGRESS_FILE"], "a") as out:
        out.write('{"iteration": 1}\\n')
"""


def test_processes_a_job_leaves_behind_are_killed_before_its_core_is_handed_on(tmp_path):
    service = open_service(tmp_path, cpus=CORES[:1])
    first = service.submit_spec(python_spec("leaves-a-child", LEAVES_A_CHILD, iterations=1)).id
    pid_file = tmp_path / "jobs" / first / "leftover.pid"
    leftover = int(wait_for_file_while_stepping(service, pid_file))
    second = service.submit_spec(counting_spec("next")).id
    overlap = []
    deadline = time.monotonic() + WAIT_S
    while not service.idle() and time.monotonic() < deadline:
        service.step()
        if pid_alive(leftover) and service.job(second).state == "running":
            overlap.append(service.job(second))
        time.sleep(0.05)
    assert service.idle()
    assert not overlap
    assert not pid_alive(leftover)
    assert service.job(first).state == "succeeded"
    assert service.job(second).state == "succeeded"
    service.close()


def test_up_takes_the_grace_period():
    from qosched.cli.main import build_parser

    parser = build_parser("up")
    assert parser.parse_args(["up"]).grace_s == service_module.GRACE_S
    assert parser.parse_args(["up", "--grace-s", "2.5"]).grace_s == 2.5
    for bad in ("-1", "nan", "inf", "soon"):
        with pytest.raises(SystemExit):
            parser.parse_args(["up", "--grace-s", bad])


# -- the service's own trouble is never a job's failure -------------------------------------------


def test_running_out_of_descriptors_while_reading_progress_fails_no_job(tmp_path, monkeypatch):
    """EMFILE is the machine's state, not the job's: the read is tried again next round, and
    ``status`` says the service is in trouble until a round goes through without it."""
    real_read = service_module.ProgressFollower.read
    failures = {"left": 6, "seen_trouble": []}

    def read(self):
        if failures["left"] > 0 and self.path.exists():
            failures["left"] -= 1
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), str(self.path))
        return real_read(self)

    monkeypatch.setattr(service_module.ProgressFollower, "read", read)
    service = open_service(tmp_path)
    job_id = service.submit_spec(counting_spec("steady", iterations=6)).id
    deadline = time.monotonic() + WAIT_S
    while not service.idle() and time.monotonic() < deadline:
        service.step()
        trouble = service.status().trouble
        if trouble is not None:
            failures["seen_trouble"].append(trouble)
        time.sleep(0.05)
    assert failures["left"] == 0  # every injected failure happened
    job = service.job(job_id)
    assert (job.state, job.iterations_done) == ("succeeded", 6), job.error
    assert failures["seen_trouble"], "status never said the service was in trouble"
    assert "Too many open files (EMFILE)" in failures["seen_trouble"][0]
    assert service.status().trouble is None  # cleared once a round went through
    service.close()


# Removes its own folder, then writes a fresh progress file where the old one was.
REMOVES_ITS_FOLDER = """
    import json, os, shutil, time
    job_dir = os.environ["QOSCHED_JOB_DIR"]
    time.sleep(1.0)  # the service has read the runner's first lines by now
    shutil.rmtree(job_dir)
    os.makedirs(job_dir)
    with open(os.path.join(job_dir, "progress.jsonl"), "w") as out:
        out.write("x" * 200 + "\\n" + json.dumps({"event": "progress"}) + "\\n")
    time.sleep(30)
"""


def test_a_job_removing_its_own_folder_fails_saying_so(tmp_path):
    service = open_service(tmp_path)
    job_id = service.submit_spec(python_spec("self-removing", REMOVES_ITS_FOLDER)).id
    assert idle(service)
    job = service.job(job_id)
    assert job.state == "failed"
    assert "progress.jsonl: was deleted and written anew while the job ran" in job.error, job.error
    assert "not valid JSON" not in job.error
    service.close()


def test_a_new_database_never_reuses_an_old_jobs_folder(tmp_path):
    service = open_service(tmp_path)
    first = service.submit_spec(counting_spec("first", iterations=2)).id
    assert idle(service)
    service.close()
    old_log = (tmp_path / "jobs" / first / "worker.log").read_bytes()
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)  # the database emptied, the folders kept
    service = open_service(tmp_path)
    second = service.submit_spec(counting_spec("second", iterations=2)).id
    assert second != first
    assert int(second.removeprefix("j-")) == int(first.removeprefix("j-")) + 1
    assert idle(service)
    assert (tmp_path / "jobs" / first / "worker.log").read_bytes() == old_log  # untouched
    service.close()


# Writes 3,000 lines of 100 bytes to its output (300 KB), in bursts a round apart.
CHATTY = """
    import json, os, sys, time
    for burst in range(30):
        for n in range(100):
            sys.stdout.write(f"{burst * 100 + n:06d} " + "x" * 92 + "\\n")
        sys.stdout.flush()
        time.sleep(0.1)
    with open(os.environ["QOSCHED_PROGRESS_FILE"], "a") as out:
        out.write(json.dumps({"iteration": 1}) + "\\n")
"""


def test_a_jobs_output_is_rotated_past_its_log_limit(tmp_path):
    import dataclasses

    from qosched.backends.local import joblog

    service = open_service(tmp_path)
    spec = dataclasses.replace(
        python_spec("chatty", CHATTY, iterations=1), log_limit_bytes=64 << 10
    )
    job_id = service.submit_spec(spec).id
    assert idle(service)
    assert service.job(job_id).state == "succeeded"
    job_dir = tmp_path / "jobs" / job_id
    # At most the limit in worker.log.1; worker.log holds what came since the last rotation,
    # at most the limit plus what one round's bursts can add (a burst is 10 KB).
    assert (job_dir / joblog.ROTATED_LOG).stat().st_size <= 64 << 10
    assert (job_dir / joblog.JOB_LOG).stat().st_size <= (64 << 10) + 60_000
    assert service.logs(job_id, 1) == "002999 " + "x" * 92 + "\n"  # the last line is kept
    # A follower from the start is told where the kept output begins, never given a gap.
    chunk = service.read_log(job_id, 0, 1 << 20)
    start = chunk.offset - len(chunk.data)
    assert 0 < start == joblog.read_chunk(job_dir, 0, 1).start
    # Offsets count every byte written (less a burst lost in the instant of a rotation).
    assert joblog.output_size(job_dir) >= 290_000
    service.close()


# -- a process that leaves the job's session and clears its environment is still the job's ------

#: Forks; the child leaves the session (``setsid``) and forks again; the grandchild ignores
#: SIGTERM, writes its pid and becomes ``sleep`` with an empty environment, so neither the
#: process group nor ``QOSCHED_JOB_DIR`` names it. The command itself waits, as a job would
#: (ignoring SIGTERM too when ``STUBBORN`` is set: it outlives the grace).
ESCAPES = """
    import os, signal, sys, time
    if "stubborn" in sys.argv:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pid_file = os.path.join(os.environ["QOSCHED_JOB_DIR"], "escaped.pid")
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # kept across exec
            with open(pid_file + ".tmp", "w") as out:
                out.write(str(os.getpid()))
            os.rename(pid_file + ".tmp", pid_file)
            os.execve("/bin/sleep", ["sleep", "300"], {})
        os._exit(0)
    time.sleep(300)
"""


def escaping_spec(*argv: str):
    return command_spec(
        "escapes", [sys.executable, "-c", textwrap.dedent(ESCAPES), *argv], iterations=5
    )


def v1_groups(home: Path, folder: Path) -> JobGroups | None:
    """The groups ``detect`` finds where only cgroup v1 is mounted: this machine's, with its
    cgroup2 mount hidden."""
    folder.mkdir()
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    (folder / "mountinfo").write_text("\n".join(x for x in lines if " - cgroup2 " not in x))
    (folder / "cgroup").write_text(Path("/proc/self/cgroup").read_text())
    return detect(home, proc_self=folder)


def groups_for(mode: str, home: Path, scratch: Path) -> JobGroups | bool:
    if mode == "no cgroup":
        return False
    groups = detect(home) if mode == "cgroup v2" else v1_groups(home, scratch)
    if groups is None or groups.version != int(mode[-1]):
        pytest.skip(f"this machine does not let this process make {mode} groups")
    return groups


MODES = ["cgroup v2", "cgroup v1", "no cgroup"]


@pytest.mark.parametrize("stubborn", [False, True], ids=["command-stops", "command-stubborn"])
@pytest.mark.parametrize("mode", MODES)
def test_cancel_kills_a_process_that_left_the_session_and_cleared_its_environment(
    tmp_path, mode, stubborn
):
    home = tmp_path / "home"
    groups = groups_for(mode, home, tmp_path / "proc")
    # A grace under the runner's own 5 s: the runner is killed before it stops its orphans.
    service = open_service(home, cpus=CORES[:1], grace_s=0.5, cgroups=groups)
    job_id = service.submit_spec(escaping_spec(*(["stubborn"] if stubborn else []))).id
    escaped = int(wait_for_file_while_stepping(service, home / "jobs" / job_id / "escaped.pid"))
    try:
        assert pid_alive(escaped)
        assert Path(f"/proc/{escaped}/environ").read_bytes() == b""  # no QOSCHED_JOB_DIR
        waiting = service.submit_spec(counting_spec("waiting")).id
        service.cancel(job_id)
        overlap = []
        deadline = time.monotonic() + WAIT_S
        while not service.idle() and time.monotonic() < deadline:
            service.step()
            if pid_alive(escaped) and service.job(waiting).state == "running":
                overlap.append(time.monotonic())
            time.sleep(0.05)
        assert service.idle()
        assert service.job(job_id).state == "cancelled"
        assert not pid_alive(escaped), "the escaped process outlived its cancelled job"
        assert not overlap, "the core was handed on while the escaped process ran"
        assert service.job(waiting).state == "succeeded"
        if groups:
            assert not any(p.exists() for p in groups.of(job_id).paths)  # removed once empty
    finally:
        if pid_alive(escaped):
            os.kill(escaped, 9)
        service.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_restarted_service_kills_the_escaped_process_of_a_runner_it_adopted(tmp_path, mode):
    home = tmp_path / "home"
    groups = groups_for(mode, home, tmp_path / "proc")
    service = open_service(home, cpus=CORES[:1], grace_s=0.5, cgroups=groups)
    job_id = service.submit_spec(escaping_spec("stubborn")).id
    escaped = int(wait_for_file_while_stepping(service, home / "jobs" / job_id / "escaped.pid"))
    service.close()  # the runner and its processes run on
    reopened = open_service(home, cpus=CORES[:1], grace_s=0.5, cgroups=groups)
    try:
        assert "re-adopted" in kinds(reopened, job_id)
        reopened.cancel(job_id)
        assert idle(reopened)
        assert reopened.job(job_id).state == "cancelled"
        assert not pid_alive(escaped), "the escaped process outlived its cancelled job"
    finally:
        if pid_alive(escaped):
            os.kill(escaped, 9)
        reopened.close()


@pytest.mark.parametrize("mode", MODES[:2])
def test_a_cgroup_holds_what_escaped_a_runner_killed_from_elsewhere(tmp_path, mode):
    # Without a runner there is no process tree to walk and no environment names the process:
    # only the job's cgroup still holds it (the fallback's limit, see docs/local.md).
    home = tmp_path / "home"
    groups = groups_for(mode, home, tmp_path / "proc")
    service = open_service(home, cpus=CORES[:1], grace_s=0.5, cgroups=groups)
    job_id = service.submit_spec(escaping_spec("stubborn")).id
    escaped = int(wait_for_file_while_stepping(service, home / "jobs" / job_id / "escaped.pid"))
    try:
        [runner_pid] = find_runners()[str(home / "jobs" / job_id)]
        os.kill(runner_pid, 9)  # as the kernel's OOM killer would
        deadline = time.monotonic() + WAIT_S
        while pid_alive(escaped) and time.monotonic() < deadline:
            service.step()
            time.sleep(0.05)
        assert not pid_alive(escaped), "the process outlived the runner it escaped"
        service.cancel(job_id)
        assert idle(service)
        assert service.job(job_id).state == "cancelled"
    finally:
        if pid_alive(escaped):
            os.kill(escaped, 9)
        service.close()


@pytest.mark.parametrize("mode", MODES[:2])
def test_a_restarted_service_kills_what_a_runner_that_died_meanwhile_left_in_its_group(
    tmp_path, mode
):
    home = tmp_path / "home"
    groups = groups_for(mode, home, tmp_path / "proc")
    service = open_service(home, cpus=CORES[:1], grace_s=0.5, cgroups=groups)
    job_id = service.submit_spec(escaping_spec("stubborn")).id
    escaped = int(wait_for_file_while_stepping(service, home / "jobs" / job_id / "escaped.pid"))
    [runner_pid] = find_runners()[str(home / "jobs" / job_id)]
    service.close()
    os.kill(runner_pid, 9)  # while the service is down
    reopened = open_service(home, cpus=CORES[:1], grace_s=0.5, cgroups=groups)
    try:
        assert not pid_alive(escaped), "a job's leftover lives on after the service restarted"
        reopened.cancel(job_id)
        assert idle(reopened)
    finally:
        if pid_alive(escaped):
            os.kill(escaped, 9)
        reopened.close()


SLEEPS = """
    import time
    time.sleep(300)
"""


def test_killing_a_second_runner_of_a_job_spares_the_one_kept_in_the_same_group(tmp_path):
    home = tmp_path / "home"
    groups = groups_for("cgroup v2", home, tmp_path / "proc")
    service = open_service(home, cpus=CORES[:1], cgroups=groups)
    job_id = service.submit_spec(python_spec("sleeps", SLEEPS)).id
    job_dir = home / "jobs" / job_id
    deadline = time.monotonic() + WAIT_S
    while not find_runners().get(str(job_dir)):
        assert time.monotonic() < deadline
        service.step()
        time.sleep(0.05)
    [kept] = find_runners()[str(job_dir)]
    service.close()
    # A second runner in the same group, as from a launch whose record was lost.
    group = groups.of(job_id)
    second = launch_runner(
        job_dir,
        env={**os.environ, ENV_RUNNER_CGROUP: os.pathsep.join(map(str, group.paths))},
        own_session=True,
    )
    try:
        deadline = time.monotonic() + WAIT_S
        while not {kept, second.pid} <= set(group.members()):
            assert time.monotonic() < deadline and second.poll() is None
            time.sleep(0.05)
        reopened = open_service(home, cpus=CORES[:1], cgroups=groups)
        assert second.wait(timeout=WAIT_S) == -9
        assert pid_alive(kept), "the runner kept was killed with the second one"
        assert find_runners()[str(job_dir)] == [kept]
        reopened.cancel(job_id)
        assert idle(reopened)
        reopened.close()
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
