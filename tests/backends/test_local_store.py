"""qosched.backends.local.store: jobs, lifecycle, samples, audit log and surviving crashes."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections import deque
from pathlib import Path

import pytest

import qosched
from qosched.backends.local.store import (
    FINAL_STATES,
    TRANSITIONS,
    IllegalTransitionError,
    Lifecycle,
    ProgressSample,
    Store,
    StoreDamagedError,
    StoreError,
    StoreUnavailableError,
    UnknownJobError,
)
from qosched.core.errors import InputError
from qosched.trainingjob.jobspec import Deadline, Resources, TrainingJobSpec

SPEC = TrainingJobSpec(
    name="cnn-small",
    iterations=400,
    deadline=Deadline(relative_s=600),
    workload="cnn",
    resources=Resources(min_cpus=1, max_cpus=2),
    best_effort=True,
)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "qosched.db") as opened:
        yield opened


def path_to(state: Lifecycle) -> list[Lifecycle]:
    """The shortest legal sequence of states leading from queued to ``state``."""
    previous: dict[Lifecycle, Lifecycle | None] = {Lifecycle.QUEUED: None}
    frontier = deque([Lifecycle.QUEUED])
    while frontier:
        current = frontier.popleft()
        for following in sorted(TRANSITIONS[current]):
            if following not in previous:
                previous[following] = current
                frontier.append(following)
    steps: list[Lifecycle] = []
    node: Lifecycle | None = state
    while node is not None and node is not Lifecycle.QUEUED:
        steps.append(node)
        node = previous[node]
    return steps[::-1]


def drive(store: Store, job_id: str, state: Lifecycle, now: float = 10.0) -> None:
    for step in path_to(state):
        cpus = [0] if step is Lifecycle.RUNNING else None
        store.transition(job_id, step, now, allocation=cpus)


# --- jobs -------------------------------------------------------------------------------------


def test_submit_then_get(store):
    job_id = store.submit(SPEC, now=100.0)
    record = store.get(job_id)
    assert record.id == job_id
    assert (record.name, record.spec, record.state) == ("cnn-small", SPEC, Lifecycle.QUEUED)
    assert (record.submitted_at, record.deadline_at) == (100.0, 700.0)
    assert (record.started_at, record.finished_at) == (None, None)
    assert (record.allocation, record.attempts, record.error, record.result) == ((), 0, None, None)
    assert (record.best_effort, record.guaranteed) == (True, False)


def test_ids_are_monotonic_and_survive_reopening(tmp_path):
    path = tmp_path / "qosched.db"
    with Store(path) as store:
        assert [store.submit(SPEC, now=t) for t in range(3)] == ["j-000001", "j-000002", "j-000003"]
    with Store(path) as store:
        assert store.submit(SPEC, now=4.0) == "j-000004"


def test_skip_ids_through_never_goes_back(tmp_path):
    with Store(tmp_path / "qosched.db") as store:
        store.skip_ids_through(41)
        assert store.submit(SPEC, now=1.0) == "j-000042"
        store.skip_ids_through(7)  # lower than what was handed out: changes nothing
        assert store.submit(SPEC, now=2.0) == "j-000043"


def damage_pages(path: Path) -> None:
    """Overwrite the middle of a database file (past its header page) with garbage, as a bad
    disk or a stray write would."""
    size = path.stat().st_size
    page = 4096
    assert size > 4 * page, "the database must hold more than its header page"
    with open(path, "r+b") as handle:
        for offset in range(page, size - page, 3 * page):
            handle.seek(offset + 100)
            handle.write(b"\xff\x00garbage" * 200)


def filled_database(path: Path, jobs: int = 300) -> None:
    with Store(path) as store:
        for t in range(jobs):
            job_id = store.submit(SPEC, now=float(t))
            store.add_event(job_id, float(t), "note", {"text": "x" * 200})
    # Everything into the main file, as after a clean stop: the damage must hit real pages.
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def test_a_damaged_database_is_refused_at_open_with_a_way_out(tmp_path):
    path = tmp_path / "qosched.db"
    filled_database(path)
    damage_pages(path)
    before = path.read_bytes()
    with pytest.raises(StoreDamagedError) as caught:
        Store(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: the database is damaged (")
    assert f"mv {path} {path}.damaged" in message and ".recover" in message
    assert path.read_bytes() == before  # refused, not changed


def test_a_file_that_is_no_database_is_refused_as_damaged(tmp_path):
    path = tmp_path / "qosched.db"
    path.write_bytes(b"this is not a database" * 500)
    with pytest.raises(StoreDamagedError, match="the database is damaged"):
        Store(path)


def test_list_in_submission_order_and_by_state(store):
    ids = [store.submit(SPEC, now=float(t)) for t in range(4)]
    drive(store, ids[1], Lifecycle.RUNNING)
    drive(store, ids[3], Lifecycle.SUCCEEDED)
    assert [job.id for job in store.list()] == ids
    assert [job.id for job in store.list([Lifecycle.QUEUED])] == [ids[0], ids[2]]
    assert [job.id for job in store.list(["running", "succeeded"])] == [ids[1], ids[3]]
    assert store.list([]) == ()


def test_unfinished_are_the_jobs_to_adopt_after_a_restart(store):
    ids = [store.submit(SPEC, now=float(t)) for t in range(5)]
    for job_id, state in zip(
        ids,
        [
            Lifecycle.QUEUED,
            Lifecycle.RUNNING,
            Lifecycle.PREEMPTED,
            Lifecycle.FAILED,
            Lifecycle.DECLINED,
        ],
        strict=True,
    ):
        drive(store, job_id, state)
    assert [job.id for job in store.unfinished()] == ids[:3]


@pytest.mark.parametrize("call", ["get", "transition", "add_progress", "progress", "events"])
def test_unknown_job(store, call):
    calls = {
        "get": lambda: store.get("j-999999"),
        "transition": lambda: store.transition("j-999999", Lifecycle.RUNNING, 1.0),
        "add_progress": lambda: store.add_progress("j-999999", 1.0, 1, 1),
        "progress": lambda: store.progress("j-999999"),
        "events": lambda: store.events("j-999999"),
    }
    with pytest.raises(UnknownJobError, match="j-999999"):
        calls[call]()


# --- lifecycle --------------------------------------------------------------------------------


LEGAL = sorted((a, b) for a, nexts in TRANSITIONS.items() for b in nexts)
ILLEGAL = sorted((a, b) for a in Lifecycle for b in Lifecycle if b not in TRANSITIONS[a])


@pytest.mark.parametrize(("source", "target"), LEGAL, ids=[f"{a}-to-{b}" for a, b in LEGAL])
def test_legal_transition(store, source, target):
    job_id = store.submit(SPEC, now=0.0)
    drive(store, job_id, source, now=1.0)
    cpus = [2, 3] if target is Lifecycle.RUNNING else None
    record = store.transition(job_id, target, 5.0, allocation=cpus)
    assert record.state is target
    assert store.get(job_id) == record
    assert record.finished_at == (5.0 if target in FINAL_STATES else None)
    assert record.allocation == ((2, 3) if target is Lifecycle.RUNNING else ())
    assert store.events(job_id)[-1].detail["from"] == source.value


@pytest.mark.parametrize(("source", "target"), ILLEGAL, ids=[f"{a}-to-{b}" for a, b in ILLEGAL])
def test_illegal_transition_changes_nothing(store, source, target):
    job_id = store.submit(SPEC, now=0.0)
    drive(store, job_id, source, now=1.0)
    before, log = store.get(job_id), store.events(job_id)
    with pytest.raises(IllegalTransitionError) as caught:
        store.transition(job_id, target, 5.0)
    assert (caught.value.from_state, caught.value.to_state) == (source, target)
    assert f"from {source.value!r} to {target.value!r}" in str(caught.value)
    assert (store.get(job_id), store.events(job_id)) == (before, log)


def test_started_at_is_the_first_start(store):
    job_id = store.submit(SPEC, now=0.0)
    store.transition(job_id, Lifecycle.RUNNING, 1.0, allocation=[0])
    preempted = store.transition(job_id, Lifecycle.PREEMPTED, 2.0)
    assert preempted.allocation == ()
    restarted = store.transition(job_id, Lifecycle.RUNNING, 3.0, allocation=[1])
    assert (restarted.started_at, restarted.allocation) == (1.0, (1,))


def test_transition_sets_guarantee(store):
    job_id = store.submit(SPEC, now=0.0)
    assert store.transition(job_id, Lifecycle.RUNNING, 1.0, guaranteed=True).guaranteed


def test_record_result_and_failure(store):
    good, bad = store.submit(SPEC, now=0.0), store.submit(SPEC, now=0.0)
    drive(store, good, Lifecycle.RUNNING)
    drive(store, bad, Lifecycle.RUNNING)
    done = store.record_result(good, {"loss": 0.25, "iterations": 400}, now=20.0)
    assert (done.state, done.result, done.finished_at) == (
        Lifecycle.SUCCEEDED,
        {"loss": 0.25, "iterations": 400},
        20.0,
    )
    failed = store.record_failure(bad, "exit code 1", now=21.0)
    assert (failed.state, failed.error, failed.finished_at) == (
        Lifecycle.FAILED,
        "exit code 1",
        21.0,
    )


def test_a_job_that_is_not_running_holds_no_cpus(store):
    job_id = store.submit(SPEC, now=0.0)
    with pytest.raises(StoreError, match="only a running or profiling job"):
        store.set_allocation(job_id, [0], now=1.0)
    with pytest.raises(StoreError, match="holds no CPUs"):
        store.transition(job_id, Lifecycle.CANCELLED, 1.0, allocation=[0])
    assert store.get(job_id).state is Lifecycle.QUEUED


def test_set_allocation_resizes_and_is_logged(store):
    job_id = store.submit(SPEC, now=0.0)
    store.transition(job_id, Lifecycle.RUNNING, 1.0, allocation=[4])
    store.set_allocation(job_id, [7, 5], now=2.0)
    assert store.get(job_id).allocation == (5, 7)
    last = store.events(job_id)[-1]
    assert (last.t, last.kind, dict(last.detail)) == (
        2.0,
        "allocation",
        {"from": [4], "to": [5, 7]},
    )


@pytest.mark.parametrize("cpus", [[1, 1], [-1], [True]], ids=["duplicate", "negative", "bool"])
def test_bad_allocation(store, cpus):
    job_id = store.submit(SPEC, now=0.0)
    drive(store, job_id, Lifecycle.RUNNING)
    with pytest.raises(InputError, match="allocation"):
        store.set_allocation(job_id, cpus, now=2.0)


def test_each_launch_intent_counts_an_attempt_and_names_the_folder(store):
    job_id = store.submit(SPEC, now=0.0)
    attempts = [store.record_launch_intent(job_id, 1.0, "/jobs/x", [1, 0]) for _ in range(3)]
    assert attempts == [1, 2, 3]
    assert store.get(job_id).attempts == 3
    intents = [e for e in store.events(job_id) if e.kind == "launching"]
    assert [dict(e.detail) for e in intents] == [
        {"dir": "/jobs/x", "attempt": n, "cpus": [0, 1]} for n in (1, 2, 3)
    ]


def test_a_launch_record_makes_the_job_running_with_its_pid_in_one_commit(store):
    job_id = store.submit(SPEC, now=0.0)
    store.record_launch_intent(job_id, 1.0, "/jobs/x", [0])
    record = store.record_launched(
        job_id, 2.0, cpus=[1, 0], pid=4242, start_ticks=99, attempt=1, guaranteed=True
    )
    assert (record.state, record.allocation, record.started_at) == (Lifecycle.RUNNING, (0, 1), 2.0)
    assert record.guaranteed
    launched = store.events(job_id)[-1]
    assert (launched.kind, dict(launched.detail)) == (
        "launched",
        {"pid": 4242, "start_ticks": 99, "cpus": [0, 1], "attempt": 1},
    )
    # A runner adopted again: the job stays running and the event says so.
    again = store.record_launched(
        job_id, 3.0, cpus=[0, 1], pid=4242, start_ticks=99, attempt=1, kind="re-adopted"
    )
    assert again.state is Lifecycle.RUNNING and store.events(job_id)[-1].kind == "re-adopted"


def test_a_write_that_cannot_get_the_lock_is_unavailable_and_changes_nothing(tmp_path):
    path = tmp_path / "qosched.db"
    with Store(path, busy_timeout_s=0.05) as store:
        job_id = store.submit(SPEC, now=0.0)
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
        try:
            with pytest.raises(StoreUnavailableError, match="locked"):
                store.record_launch_intent(job_id, 1.0, "/jobs/x", [0])
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert store.get(job_id).attempts == 0
        assert [e.kind for e in store.events(job_id)] == ["submitted"]
        assert store.record_launch_intent(job_id, 2.0, "/jobs/x", [0]) == 1  # later, it works


def test_a_stored_spec_that_does_not_read_is_listed_without_a_spec(tmp_path):
    path = tmp_path / "qosched.db"
    with Store(path) as store:
        job_id = store.submit(SPEC, now=0.0)
    with sqlite3.connect(path) as db:
        db.execute('UPDATE jobs SET spec_json = \'{"kind": "Nothing"}\'')
    with Store(path) as store:
        (record,) = store.list()
        assert (record.id, record.spec) == (job_id, None)
        assert record.spec_error is not None and "apiVersion" in record.spec_error
        assert store.unfinished_ids() == (job_id,)
        failed = store.record_failure(job_id, "cannot be tracked", now=1.0)
        assert (failed.state, failed.error) == (Lifecycle.FAILED, "cannot be tracked")


# --- progress and events ----------------------------------------------------------------------


def test_progress_samples_come_back_in_the_order_added(store):
    job_id, other = store.submit(SPEC, now=0.0), store.submit(SPEC, now=0.0)
    samples = [(1.0, 10, 1), (2.0, 30, 2), (2.5, 45, 2), (4.0, 80, 1)]
    for t, iteration, cpus in samples:
        store.add_progress(job_id, t, iteration, cpus)
        store.add_progress(other, t, 0, 1)
    assert store.progress(job_id) == tuple(ProgressSample(*sample) for sample in samples)


def test_last_progress_is_each_jobs_latest_sample_in_one_read(store):
    first, silent, third = (store.submit(SPEC, now=0.0) for _ in range(3))
    store.add_progress(first, 1.0, 10, 1)
    store.add_progress(third, 1.5, 7, 2)
    store.add_progress(first, 2.0, 20, 2)  # the latest added, whatever its time says
    store.add_progress(first, 1.8, 25, 1)
    assert store.last_progress() == {
        first: ProgressSample(1.8, 25, 1),
        third: ProgressSample(1.5, 7, 2),
    }
    assert silent not in store.last_progress()


def test_the_job_list_kept_between_calls_follows_every_change_to_a_job(tmp_path):
    with Store(tmp_path / "state.db") as store, Store(tmp_path / "state.db") as other:
        job_id = store.submit(SPEC, now=0.0)
        assert [r.state for r in store.list()] == [Lifecycle.QUEUED]
        assert store.list() is store.list()  # nothing changed: the same records
        store.add_progress(job_id, 1.0, 5, 1)  # progress is not the job's row
        kept = store.list()
        assert store.list() is kept
        store.transition(job_id, Lifecycle.RUNNING, 2.0, allocation=[0])  # through this one
        assert [(r.state, r.allocation) for r in store.list()] == [(Lifecycle.RUNNING, (0,))]
        other.transition(job_id, Lifecycle.SUCCEEDED, 3.0)  # another connection, as a process
        assert [(r.state, r.finished_at) for r in store.list()] == [(Lifecycle.SUCCEEDED, 3.0)]
        second = other.submit(SPEC, now=4.0)
        assert [r.id for r in store.list()] == [job_id, second]


def test_progress_rejects_negative_values(store):
    job_id = store.submit(SPEC, now=0.0)
    with pytest.raises(InputError, match="must be >= 0"):
        store.add_progress(job_id, 1.0, -1, 1)


def test_audit_log(store):
    job_id = store.submit(SPEC, now=0.0)
    store.add_event(job_id, 1.0, "predicted", {"finish_at": 42.0})
    store.add_event(None, 2.0, "service-started")
    drive(store, job_id, Lifecycle.DECLINED, now=3.0)
    kinds = [(event.job_id, event.kind) for event in store.events()]
    assert kinds == [
        (job_id, "submitted"),
        (job_id, "predicted"),
        (None, "service-started"),
        (job_id, "state"),
    ]
    assert [event.kind for event in store.events(job_id)] == ["submitted", "predicted", "state"]
    assert dict(store.events(job_id)[-1].detail) == {"from": "queued", "to": "declined"}


# --- the database file ------------------------------------------------------------------------


def test_wal_mode_and_schema_version(tmp_path):
    path = tmp_path / "qosched.db"
    with Store(path) as store:
        assert store.schema_version == 6
        store.submit(SPEC, now=0.0)
        with sqlite3.connect(path) as other:
            assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        other.close()


def test_reopen_after_close_keeps_everything(tmp_path):
    path = tmp_path / "qosched.db"
    store = Store(path)
    job_id = store.submit(SPEC, now=0.0)
    store.transition(job_id, Lifecycle.RUNNING, 1.0, allocation=[0, 1])
    store.add_progress(job_id, 2.0, 50, 2)
    record, log = store.get(job_id), store.events()
    store.close()
    with Store(path) as reopened:
        assert reopened.get(job_id) == record
        assert reopened.progress(job_id) == (ProgressSample(2.0, 50, 2),)
        assert reopened.events() == log
        assert reopened.schema_version == 6


def test_closed_store_refuses_calls(tmp_path):
    store = Store(tmp_path / "qosched.db")
    store.close()
    store.close()  # closing twice is harmless
    with pytest.raises(StoreError, match="closed"):
        store.list()


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "qosched.db"
    Store(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE schema_version SET version = 99")
    db.close()
    with pytest.raises(StoreError, match="schema version 99 is newer"):
        Store(path)


def test_threads_share_one_store(store):
    ids: list[str] = []

    def submit_many() -> None:
        for t in range(25):
            job_id = store.submit(SPEC, now=float(t))
            store.add_progress(job_id, float(t), t, 1)
            ids.append(job_id)

    threads = [threading.Thread(target=submit_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(ids) == [f"j-{n:06d}" for n in range(1, 101)]
    assert len(store.list()) == 100


CHILD = textwrap.dedent(
    """
    import sys
    from qosched.trainingjob.jobspec import Deadline, TrainingJobSpec
    from qosched.backends.local.store import Lifecycle, Store

    store = Store(sys.argv[1])
    spec = TrainingJobSpec("crash", 10, Deadline(relative_s=60), workload="cnn")
    t = 0.0
    while True:
        job_id = store.submit(spec, now=t)
        store.add_progress(job_id, t, 1, 1)
        store.transition(job_id, Lifecycle.RUNNING, t, allocation=[0])
        # Printed only after every call for this job returned: each printed id is committed.
        print(job_id, flush=True)
        t += 1.0
    """
)


@pytest.mark.process
@pytest.mark.parametrize("kill_after", [1, 40, 300])
def test_rows_survive_a_killed_writer(tmp_path, kill_after):
    path = tmp_path / "qosched.db"
    env = dict(os.environ)
    src = str(Path(qosched.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    errors = tmp_path / "writer.err"
    with errors.open("w") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
        )
    committed: list[str] = []
    try:
        assert child.stdout is not None
        while len(committed) < kill_after:
            line = child.stdout.readline()
            if not line:
                pytest.fail(f"the writer stopped early: {errors.read_text()}")
            committed.append(line.strip())
        child.send_signal(signal.SIGKILL)  # mid-way through whatever call it was making
        child.wait(timeout=10)
        # Lines it printed before it died are committed too; read them through the same
        # buffered reader (communicate() would skip what that reader already holds).
        committed += child.stdout.read().split()
        child.stdout.close()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL

    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    raw.close()
    with Store(path) as store:
        jobs = {job.id: job for job in store.list()}
        # Everything a returned call wrote is there; at most the one job being written when the
        # writer died may be there too, in whatever state its last committed call left it.
        assert set(committed) <= set(jobs)
        assert len(jobs) <= len(committed) + 1
        for job_id in committed:
            assert jobs[job_id].state is Lifecycle.RUNNING
            assert store.progress(job_id) == (ProgressSample(jobs[job_id].submitted_at, 1, 1),)
        assert store.submit(SPEC, now=0.0) == f"j-{len(jobs) + 1:06d}"


def test_unopenable_path_is_a_store_error(tmp_path):
    with pytest.raises(StoreError, match="cannot open the database"):
        Store(tmp_path / "no-such-dir" / "qosched.db")


# --- reading what another process appended ----------------------------------------------------


def test_every_event_is_read_again_with_what_another_process_appended(tmp_path):
    # The web page reads every event each second: the store keeps those it parsed and reads
    # only the new rows, which another Store on the same file (another process) may add.
    path = tmp_path / "qosched.db"
    with Store(path) as mine, Store(path) as theirs:
        job = mine.submit(SPEC, 1.0)
        before = mine.events()
        theirs.add_event(job, 2.0, "note", {"n": 1})
        mine.add_event(None, 3.0, "service", {"n": 2})
        theirs.add_event(job, 4.0, "note", {"n": 3})
        after = mine.events()
        assert after[: len(before)] == before
        assert [(e.t, e.kind, dict(e.detail)) for e in after[len(before) :]] == [
            (2.0, "note", {"n": 1}),
            (3.0, "service", {"n": 2}),
            (4.0, "note", {"n": 3}),
        ]
        # The same as a fresh reader sees, and as one job's own entries are read.
        with Store(path) as fresh:
            assert fresh.events() == after
        assert mine.events(job) == tuple(e for e in after if e.job_id == job)


def test_a_stored_spec_is_read_once_and_its_jobs_listed_from_it(store):
    first = store.submit(SPEC, 1.0)
    second = store.submit(SPEC, 2.0)
    listed = store.list()
    assert [r.spec for r in listed] == [SPEC, SPEC]
    again = store.list()
    assert again[0].spec is listed[0].spec and again[1].spec is listed[1].spec  # not re-read
    assert store.get(first).spec == SPEC and store.get(second).id == second
