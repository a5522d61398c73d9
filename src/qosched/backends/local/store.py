"""Durable state of the local scheduler: jobs, progress samples and an audit log, in SQLite.

Every write method runs in its own transaction and returns only after the commit, so a process
killed between two calls loses nothing a returned call wrote, and a process killed in the middle
of a call leaves that call's changes out entirely. Times are Unix seconds passed in by the caller
(the store never reads the clock), so tests and replays are deterministic.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

from qosched.backends.local.machine_use import UseSample
from qosched.backends.local.speed_memory import CountTrust
from qosched.core.bounds import COUNT_LIMIT
from qosched.core.errors import InputError, QoschedError
from qosched.trainingjob.jobspec import TrainingJobSpec

#: The longest start-up remembered (``remember_startup``): longer is a hang, not a start-up.
MAX_STARTUP_S = 3600.0


class StoreError(QoschedError):
    """The store was misused or its database cannot be used."""


class StoreUnavailableError(StoreError):
    """The database cannot be used right now (a full disk, a lock held past the timeout, an
    I/O error); the call changed nothing, and the same call may succeed later."""


class StoreDamagedError(StoreError):
    """The database file fails SQLite's own check: it is refused rather than half-used."""

    def __init__(self, path: Path, problems: Sequence[str]) -> None:
        self.path = path
        self.problems = tuple(problems)
        shown = "; ".join(self.problems[:3]) + (" ..." if len(self.problems) > 3 else "")
        super().__init__(
            f"{path}: the database is damaged ({shown}). Nothing was changed. Stop every "
            f"service of this home, then either move it aside (`mv {path} {path}.damaged`: the "
            "next start begins with no jobs, and job folders already in the home are never "
            f"reused) or try to recover it (`sqlite3 {path} .recover | sqlite3 {path}.new`, then "
            f"move {path}.new into its place)"
        )


class UnknownJobError(StoreError, LookupError):
    """No job has this id."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"no job {job_id!r}")


class IllegalTransitionError(StoreError):
    """A state change the job lifecycle does not allow."""

    def __init__(self, job_id: str, from_state: Lifecycle, to_state: Lifecycle) -> None:
        self.job_id = job_id
        self.from_state = from_state
        self.to_state = to_state
        allowed = ", ".join(sorted(TRANSITIONS[from_state])) or "none (it is final)"
        super().__init__(
            f"job {job_id}: cannot go from {from_state.value!r} to {to_state.value!r}; "
            f"allowed from {from_state.value!r}: {allowed}"
        )


class Lifecycle(StrEnum):
    """Where a stored job is in its life (``TRANSITIONS``); the value is the API's ``state``.

    Not ``qosched.cluster.state.JobState``, the policy's mutable record of a job."""

    QUEUED = "queued"
    PROFILING = "profiling"
    RUNNING = "running"
    PREEMPTED = "preempted"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DECLINED = "declined"


# The whole lifecycle. A queued job may fail before it ever runs (its launch failed); a running
# job that loses its CPUs, or whose process died with a restarted service, becomes preempted and
# may run again. A job whose speed is not known yet is profiling before it is judged: it runs
# (holding workers, like a running job) or waits to, until its measured speed admits it
# (running) or not (declined); it may also end during the measurement. The four final states
# lead nowhere.
TRANSITIONS: Mapping[Lifecycle, frozenset[Lifecycle]] = MappingProxyType(
    {
        Lifecycle.QUEUED: frozenset(
            {
                Lifecycle.PROFILING,
                Lifecycle.RUNNING,
                Lifecycle.DECLINED,
                Lifecycle.CANCELLED,
                Lifecycle.FAILED,
            }
        ),
        Lifecycle.PROFILING: frozenset(
            {
                Lifecycle.RUNNING,
                Lifecycle.SUCCEEDED,
                Lifecycle.DECLINED,
                Lifecycle.CANCELLED,
                Lifecycle.FAILED,
            }
        ),
        Lifecycle.RUNNING: frozenset(
            {Lifecycle.SUCCEEDED, Lifecycle.FAILED, Lifecycle.PREEMPTED, Lifecycle.CANCELLED}
        ),
        Lifecycle.PREEMPTED: frozenset({Lifecycle.RUNNING, Lifecycle.CANCELLED, Lifecycle.FAILED}),
        Lifecycle.SUCCEEDED: frozenset(),
        Lifecycle.FAILED: frozenset(),
        Lifecycle.CANCELLED: frozenset(),
        Lifecycle.DECLINED: frozenset(),
    }
)
FINAL_STATES = frozenset(state for state, nexts in TRANSITIONS.items() if not nexts)
UNFINISHED_STATES = frozenset(Lifecycle) - FINAL_STATES
#: The states in which a job may hold workers.
HOLDING_STATES = frozenset({Lifecycle.RUNNING, Lifecycle.PROFILING})


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job as stored; ``allocation`` is the CPU ids it holds now (empty unless running).

    ``spec`` is None when the stored spec no longer reads (a newer qosched is stricter than the
    one that stored it, or the file was edited); ``spec_error`` then says why, and the job can
    be listed and failed but not run.
    """

    id: str
    name: str
    spec: TrainingJobSpec | None
    state: Lifecycle
    submitted_at: float
    deadline_at: float
    started_at: float | None
    finished_at: float | None
    allocation: tuple[int, ...]
    attempts: int
    error: str | None
    result: Mapping[str, Any] | None
    best_effort: bool
    guaranteed: bool
    spec_error: str | None = None


@dataclass(frozen=True, slots=True)
class ProgressSample:
    t: float
    iteration: int
    cpus: int


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One audit-log entry; ``job_id`` is ``None`` for service-wide events."""

    job_id: str | None
    t: float
    kind: str
    detail: Mapping[str, Any]


# MIGRATIONS[i] takes the schema from version i to i + 1; append, never edit a released one.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE id_sequence (name TEXT PRIMARY KEY, next INTEGER NOT NULL)""",
        """INSERT INTO id_sequence (name, next) VALUES ('job', 1)""",
        f"""CREATE TABLE jobs (
            id TEXT PRIMARY KEY,
            seq INTEGER NOT NULL UNIQUE,
            name TEXT NOT NULL,
            spec_json TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ({", ".join(f"'{s.value}'" for s in Lifecycle)})),
            submitted_at REAL NOT NULL,
            deadline_at REAL NOT NULL,
            started_at REAL,
            finished_at REAL,
            allocation_json TEXT NOT NULL DEFAULT '[]',
            attempts INTEGER NOT NULL DEFAULT 0,
            error TEXT,
            result_json TEXT,
            best_effort INTEGER NOT NULL,
            guaranteed INTEGER NOT NULL DEFAULT 0
        )""",
        """CREATE INDEX jobs_state ON jobs (state)""",
        """CREATE TABLE progress (
            seq INTEGER PRIMARY KEY,
            job_id TEXT NOT NULL REFERENCES jobs (id),
            t REAL NOT NULL,
            iteration INTEGER NOT NULL,
            cpus INTEGER NOT NULL
        )""",
        """CREATE INDEX progress_job ON progress (job_id, seq)""",
        """CREATE TABLE events (
            seq INTEGER PRIMARY KEY,
            job_id TEXT REFERENCES jobs (id),
            t REAL NOT NULL,
            kind TEXT NOT NULL,
            detail_json TEXT NOT NULL
        )""",
        """CREATE INDEX events_job ON events (job_id, seq)""",
    ),
    (
        # Speeds remembered across submissions (qosched.backends.local.speed_memory).
        """CREATE TABLE speeds (
            key TEXT NOT NULL,
            workers INTEGER NOT NULL CHECK (workers > 0),
            rate REAL NOT NULL CHECK (rate > 0),
            job_id TEXT NOT NULL,
            t REAL NOT NULL,
            PRIMARY KEY (key, workers)
        )""",
    ),
    (
        # Start-ups remembered with them: seconds from a runner's start to its first report.
        """CREATE TABLE startups (
            key TEXT PRIMARY KEY,
            seconds REAL NOT NULL CHECK (seconds >= 0),
            job_id TEXT NOT NULL,
            t REAL NOT NULL
        )""",
    ),
    (
        # How far the remembered speeds strayed (speed_memory.measured_spread).
        """CREATE TABLE spreads (
            key TEXT PRIMARY KEY,
            spread REAL NOT NULL CHECK (spread > 0 AND spread <= 1),
            job_id TEXT NOT NULL,
            t REAL NOT NULL
        )""",
    ),
    (
        # Machine use over the service's history (qosched.backends.local.machine_use).
        """CREATE TABLE machine_use (
            seq INTEGER PRIMARY KEY,
            t REAL NOT NULL,
            allocated REAL NOT NULL CHECK (allocated >= 0),
            used REAL CHECK (used >= 0)
        )""",
        """CREATE INDEX machine_use_t ON machine_use (t)""",
    ),
    (
        # How long each remembered speed was measured, and its own count's spread
        # (speed_memory.CountTrust); NULL for speeds kept before they were.
        """ALTER TABLE speeds ADD COLUMN seconds REAL CHECK (seconds IS NULL OR seconds > 0)""",
        """ALTER TABLE speeds ADD COLUMN spread REAL
            CHECK (spread IS NULL OR (spread > 0 AND spread <= 1))""",
    ),
)

_JOB_COLUMNS = (
    "id, name, spec_json, state, submitted_at, deadline_at, started_at, finished_at, "
    "allocation_json, attempts, error, result_json, best_effort, guaranteed"
)


class Store:
    """The scheduler's database file; safe to share between threads (see ``__init__``)."""

    def __init__(
        self, path: str | Path, *, fsync_every_commit: bool = False, busy_timeout_s: float = 10.0
    ) -> None:
        """``busy_timeout_s``: how long a call waits for another process's write lock before it
        raises ``StoreUnavailableError``."""
        self.path = Path(path)
        # One connection behind one lock, rather than a connection per thread: SQLite lets only
        # one writer in at a time anyway, our transactions take microseconds, and one connection
        # can be closed by whichever thread calls close().
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        # Read-side caches, so that the web page's polls (every job, every event, each second)
        # cost what changed rather than the whole history: a job's spec never changes once
        # stored (kept with the text it was read from), and events are only ever appended.
        self._specs: dict[str, tuple[str, TrainingJobSpec | None, str | None]] = {}
        self._events: list[JobEvent] = []
        self._events_seq = 0
        # Every job as last listed, and what the jobs table was then: a write through this
        # connection that may touch the table, and SQLite's data_version (which changes when
        # another connection commits). The page lists every job each second, and with
        # thousands of them reading and building the records costs more than all the rest.
        self._listed: tuple[tuple[int, int], tuple[JobRecord, ...]] | None = None
        self._job_writes = 0
        try:
            # isolation_level=None: no implicit transactions; _write() issues BEGIN IMMEDIATE.
            self._db = sqlite3.connect(
                self.path,
                timeout=busy_timeout_s,
                isolation_level=None,
                check_same_thread=False,
            )
            self._check_integrity()
            mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode != "wal":
                raise StoreError(f"{self.path}: cannot use write-ahead logging (mode is {mode!r})")
            # In WAL mode, NORMAL survives a killed process: a commit is in the WAL file (in the
            # OS page cache) before commit returns. Only a power cut or OS crash can lose the
            # last commits, never corrupt the file; by then the jobs themselves died with the
            # machine. FULL fsyncs every commit for callers that must not lose even those.
            sync = "FULL" if fsync_every_commit else "NORMAL"
            self._db.execute(f"PRAGMA synchronous={sync}")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except BaseException as exc:
            self.close()
            if isinstance(exc, sqlite3.DatabaseError) and not isinstance(
                exc, sqlite3.OperationalError
            ):  # "file is not a database", "database disk image is malformed"
                raise StoreDamagedError(self.path, [str(exc)]) from exc
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"{self.path}: cannot open the database: {exc}") from exc
            raise

    def _check_integrity(self) -> None:
        """SQLite's ``quick_check`` (every page and index, in time linear in the file's size):
        a damaged file would start, then fail every call that reads a bad page."""
        assert self._db is not None
        rows = self._db.execute("PRAGMA quick_check(20)").fetchall()
        problems = [str(row[0]) for row in rows if row and row[0] != "ok"]
        if problems:
            raise StoreDamagedError(self.path, problems)

    # --- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        with self._read() as db:
            return db.execute("SELECT version FROM schema_version").fetchone()[0]

    # --- jobs ----------------------------------------------------------------------------------

    def submit(self, spec: TrainingJobSpec, now: float) -> str:
        """Store a new queued job and return its id (``j-000001``, ``j-000002``, ...)."""
        with self._write() as db:
            seq = db.execute("SELECT next FROM id_sequence WHERE name = 'job'").fetchone()[0]
            db.execute("UPDATE id_sequence SET next = ? WHERE name = 'job'", (seq + 1,))
            job_id = f"j-{seq:06d}"
            db.execute(
                "INSERT INTO jobs (id, seq, name, spec_json, state, submitted_at, deadline_at, "
                "best_effort) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    job_id,
                    seq,
                    spec.name,
                    json.dumps(spec.to_dict(), sort_keys=True),
                    Lifecycle.QUEUED.value,
                    now,
                    spec.deadline_at(now),
                    int(spec.best_effort),
                ),
            )
            self._insert_event(db, job_id, now, "submitted", {"name": spec.name})
        return job_id

    def skip_ids_through(self, seq: int) -> None:
        """Never hand out a job id numbered ``seq`` or lower from now on (ids whose folders
        already exist in the home, from an earlier database)."""
        with self._write() as db:
            db.execute("UPDATE id_sequence SET next = MAX(next, ?) WHERE name = 'job'", (seq + 1,))

    def get(self, job_id: str) -> JobRecord:
        with self._read() as db:
            row = db.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise UnknownJobError(job_id)
        return self._record(row)

    def list(self, states: Iterable[Lifecycle | str] | None = None) -> tuple[JobRecord, ...]:
        """Jobs in submission order, all of them or those in ``states``."""
        query = f"SELECT {_JOB_COLUMNS} FROM jobs"
        params: tuple[str, ...] = ()
        if states is not None:
            params = tuple(Lifecycle(state).value for state in states)
            query += f" WHERE state IN ({', '.join('?' * len(params))})" if params else " WHERE 0"
        with self._read() as db:
            if states is None:
                version = (db.execute("PRAGMA data_version").fetchone()[0], self._job_writes)
                if self._listed is not None and self._listed[0] == version:
                    return self._listed[1]
            rows = db.execute(query + " ORDER BY seq", params).fetchall()
            records = tuple(self._record(row) for row in rows)
            if states is None:
                self._listed = (version, records)
        return records

    def unfinished(self) -> tuple[JobRecord, ...]:
        """Jobs a restarted service must adopt again: queued, profiling, running or preempted."""
        return self.list(UNFINISHED_STATES)

    def unfinished_ids(self) -> tuple[str, ...]:
        """The ids of ``unfinished()``, without reading the jobs (one may not read)."""
        states = tuple(state.value for state in UNFINISHED_STATES)
        with self._read() as db:
            rows = db.execute(
                f"SELECT id FROM jobs WHERE state IN ({', '.join('?' * len(states))}) ORDER BY seq",
                states,
            ).fetchall()
        return tuple(row[0] for row in rows)

    def transition(
        self,
        job_id: str,
        new_state: Lifecycle | str,
        now: float,
        *,
        allocation: Sequence[int] | None = None,
        error: str | None = None,
        result: Mapping[str, Any] | None = None,
        guaranteed: bool | None = None,
        note: Mapping[str, Any] | None = None,
    ) -> JobRecord:
        """Move a job to ``new_state`` if the lifecycle allows it, and log the change (with
        ``note``'s JSON-ready fields, such as why, added to the ``state`` event).

        Entering ``running`` the first time sets ``started_at``; entering a final state sets
        ``finished_at``. Any state but ``running`` holds no CPUs, so its allocation is cleared (a
        profiling job gets its CPUs from ``record_launched`` and ``set_allocation``).
        ``guaranteed`` sets the job's promise, and the event says it.
        """
        with self._write() as db:
            self._transition(
                db, job_id, new_state, now, allocation, error, result, guaranteed, note
            )
            row = db.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return self._record(row)

    def record_result(self, job_id: str, result: Mapping[str, Any], now: float) -> JobRecord:
        """The job finished its work: it succeeded with ``result`` (any JSON-ready mapping)."""
        return self.transition(job_id, Lifecycle.SUCCEEDED, now, result=result)

    def record_failure(self, job_id: str, error: str, now: float) -> JobRecord:
        return self.transition(job_id, Lifecycle.FAILED, now, error=error)

    def set_allocation(
        self,
        job_id: str,
        cpus: Sequence[int],
        now: float,
        note: Mapping[str, Any] | None = None,
    ) -> None:
        """Re-size a running (or profiling) job to exactly the CPU ids ``cpus`` (none: a
        profiling job stopped), and log the change (with ``note``'s fields, such as why)."""
        new = _check_cpus(cpus)
        with self._write() as db:
            if (state := self._state(db, job_id)) not in HOLDING_STATES:
                raise StoreError(
                    f"job {job_id}: only a running or profiling job holds CPUs, it is {state}"
                )
            self._allocate(db, job_id, now, new, note=note)

    def record_launch_intent(
        self, job_id: str, now: float, job_dir: str, cpus: Sequence[int]
    ) -> int:
        """Before a runner is started: count the attempt and log a ``launching`` event naming the
        job folder, in one commit, so a service killed before it records the start finds the
        runner by its folder instead of starting another. Returns the attempt number."""
        cores = _check_cpus(cpus)
        with self._write() as db:
            self._state(db, job_id)
            db.execute("UPDATE jobs SET attempts = attempts + 1 WHERE id = ?", (job_id,))
            attempt = db.execute("SELECT attempts FROM jobs WHERE id = ?", (job_id,)).fetchone()[0]
            self._insert_event(
                db, job_id, now, "launching", {"dir": job_dir, "attempt": attempt, "cpus": cores}
            )
        return attempt

    def record_launched(
        self,
        job_id: str,
        now: float,
        *,
        cpus: Sequence[int],
        pid: int,
        start_ticks: int,
        attempt: int,
        guaranteed: bool | None = None,
        kind: str = "launched",
        note: Mapping[str, Any] | None = None,
    ) -> JobRecord:
        """The runner of a launch intent is running: the job becomes running on ``cpus`` and a
        ``kind`` event records its pid and start time (``/proc/PID/stat`` field 22), and
        ``note``'s fields (such as why), in one commit. A job already running (re-adopted) only
        gets the event; a profiling job stays profiling, on ``cpus`` (an ``allocation`` event
        when they change)."""
        with self._write() as db:
            state = self._state(db, job_id)
            if state is Lifecycle.PROFILING:
                self._hold(db, job_id, now, cpus)
            elif state is not Lifecycle.RUNNING:
                self._transition(db, job_id, Lifecycle.RUNNING, now, cpus, None, None, guaranteed)
            detail = {
                "pid": pid,
                "start_ticks": start_ticks,
                "cpus": sorted(cpus),
                "attempt": attempt,
            }
            self._insert_event(db, job_id, now, kind, {**(note or {}), **detail})
            row = db.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return self._record(row)

    def _hold(self, db: sqlite3.Connection, job_id: str, now: float, cpus: Sequence[int]) -> None:
        """A profiling job's runner started on ``cpus``: it has started, and holds them."""
        db.execute(
            "UPDATE jobs SET started_at = ? WHERE id = ? AND started_at IS NULL", (now, job_id)
        )
        self._allocate(db, job_id, now, _check_cpus(cpus), only_if_changed=True)

    def _allocate(
        self,
        db: sqlite3.Connection,
        job_id: str,
        now: float,
        cpus: list[int],
        *,
        only_if_changed: bool = False,
        note: Mapping[str, Any] | None = None,
    ) -> None:
        """The job holds exactly ``cpus`` now: stored, with an ``allocation`` event."""
        old = json.loads(
            db.execute("SELECT allocation_json FROM jobs WHERE id = ?", (job_id,)).fetchone()[0]
        )
        if only_if_changed and old == cpus:
            return
        db.execute("UPDATE jobs SET allocation_json = ? WHERE id = ?", (json.dumps(cpus), job_id))
        self._insert_event(db, job_id, now, "allocation", {**(note or {}), "from": old, "to": cpus})

    # --- progress and events -------------------------------------------------------------------

    def add_progress(self, job_id: str, t: float, iteration: int, cpus: int) -> None:
        """One predictor sample: at time ``t`` the job had done ``iteration`` on ``cpus``
        workers (CPU cores; GPUs for a GPU job)."""
        if iteration < 0 or cpus < 0:
            raise InputError(
                f"job {job_id}: iteration and cpus must be >= 0, got {iteration} and {cpus}",
                field="progress",
            )
        with self._write(jobs=False) as db:
            self._state(db, job_id)
            db.execute(
                "INSERT INTO progress (job_id, t, iteration, cpus) VALUES (?, ?, ?, ?)",
                (job_id, t, iteration, cpus),
            )

    def last_progress(self) -> dict[str, ProgressSample]:
        """Every job's latest sample, by job id (jobs without one left out), in one query: the
        job table describes every job each second."""
        with self._read() as db:
            rows = db.execute(
                "SELECT job_id, t, iteration, cpus FROM progress WHERE seq IN "
                "(SELECT MAX(seq) FROM progress GROUP BY job_id)"
            ).fetchall()
        return {job_id: ProgressSample(t, iteration, cpus) for job_id, t, iteration, cpus in rows}

    def progress(self, job_id: str) -> tuple[ProgressSample, ...]:
        """The job's samples in the order they were added."""
        with self._read() as db:
            self._state(db, job_id)
            rows = db.execute(
                "SELECT t, iteration, cpus FROM progress WHERE job_id = ? ORDER BY seq", (job_id,)
            ).fetchall()
        return tuple(ProgressSample(t, iteration, cpus) for t, iteration, cpus in rows)

    def remember_speeds(
        self,
        key: str,
        rates: Mapping[int, float],
        job_id: str,
        t: float,
        trust: Mapping[int, CountTrust] | None = None,
    ) -> None:
        """Keep ``rates`` (iterations/s per worker count) measured by ``job_id`` under ``key``,
        each with how far it is trusted (``trust``, where given), replacing what an earlier job
        left at that count."""
        clean = {}
        for workers, rate in rates.items():
            if not (isinstance(workers, int) and workers > 0 and 0 < rate < float(COUNT_LIMIT)):
                raise InputError(f"job {job_id}: no speed {rate!r} on {workers!r} workers")
            clean[workers] = float(rate)
        trust = trust or {}
        with self._write(jobs=False) as db:
            db.executemany(
                "INSERT OR REPLACE INTO speeds (key, workers, rate, job_id, t, seconds, spread) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (key, workers, rate, job_id, t, *_trust_row(trust.get(workers)))
                    for workers, rate in clean.items()
                ],
            )

    def remembered_trust(self, key: str) -> dict[int, CountTrust]:
        """How far each speed remembered under ``key`` is trusted, for those kept with it."""
        with self._read() as db:
            rows = db.execute(
                "SELECT workers, seconds, spread FROM speeds WHERE key = ? AND seconds IS NOT NULL",
                (key,),
            ).fetchall()
        return {workers: CountTrust(seconds, spread) for workers, seconds, spread in rows}

    def remembered_speeds(self, key: str) -> tuple[dict[int, float], str | None]:
        """What is remembered under ``key``: iterations/s per worker count, and the job that
        measured the latest of them (None when nothing is)."""
        with self._read() as db:
            rows = db.execute(
                "SELECT workers, rate, job_id FROM speeds WHERE key = ? ORDER BY t, workers",
                (key,),
            ).fetchall()
        return {workers: rate for workers, rate, _ in rows}, (rows[-1][2] if rows else None)

    def remember_startup(self, key: str, seconds: float, job_id: str, t: float) -> None:
        """Keep how long ``job_id``'s runner took from its start to its first report, under
        ``key``, replacing what an earlier job left."""
        if not 0 <= seconds <= MAX_STARTUP_S:
            raise InputError(f"job {job_id}: no start-up of {seconds!r} s")
        with self._write(jobs=False) as db:
            db.execute(
                "INSERT OR REPLACE INTO startups (key, seconds, job_id, t) VALUES (?, ?, ?, ?)",
                (key, float(seconds), job_id, t),
            )

    def remember_spread(self, key: str, spread: float, job_id: str, t: float) -> None:
        """Keep how far the speeds ``job_id`` measured strayed (a standard deviation of the log
        speed, ``speed_memory.measured_spread``), under ``key``, replacing what was there."""
        if not (isinstance(spread, float) and 0 < spread <= 1):
            raise InputError(f"job {job_id}: no spread {spread!r}")
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO spreads (key, spread, job_id, t) VALUES (?, ?, ?, ?)",
                (key, spread, job_id, t),
            )

    def remembered_spread(self, key: str) -> float | None:
        """The spread remembered under ``key``, or None."""
        with self._read() as db:
            row = db.execute("SELECT spread FROM spreads WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def remembered_startup(self, key: str) -> float | None:
        """The start-up seconds remembered under ``key``, or None."""
        with self._read() as db:
            row = db.execute("SELECT seconds FROM startups WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def add_machine_use(self, sample: UseSample, *, keep_s: float, most: int) -> None:
        """Keep one sample of machine use, and drop those older than ``keep_s`` before it and
        all but the newest ``most``: the table stays bounded however long the service runs."""
        if not (0 <= sample.allocated < COUNT_LIMIT and 0 <= (sample.used or 0.0) < COUNT_LIMIT):
            raise InputError(f"no machine use {sample!r}", field="machine_use")
        with self._write(jobs=False) as db:
            db.execute(
                "INSERT INTO machine_use (t, allocated, used) VALUES (?, ?, ?)",
                (sample.t, float(sample.allocated), sample.used),
            )
            db.execute("DELETE FROM machine_use WHERE t < ?", (sample.t - keep_s,))
            db.execute(
                "DELETE FROM machine_use WHERE seq <= "
                "(SELECT seq FROM machine_use ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                (most,),
            )

    def machine_use(self, since: float = -math.inf) -> tuple[UseSample, ...]:
        """The samples kept from ``since`` on, in the order they were taken."""
        with self._read() as db:
            rows = db.execute(
                "SELECT t, allocated, used FROM machine_use WHERE t >= ? ORDER BY seq",
                (since if math.isfinite(since) else -1e300,),
            ).fetchall()
        return tuple(UseSample(t, allocated, used) for t, allocated, used in rows)

    def add_event(
        self,
        job_id: str | None,
        t: float,
        kind: str,
        detail: Mapping[str, Any] | None = None,
        *,
        guaranteed: bool | None = None,
    ) -> None:
        """Append to the audit log; ``detail`` must be JSON-ready. ``guaranteed``: the event
        states the job's promise, set on the job in the same commit (and put in ``detail``), so
        the job and its log never disagree on it."""
        with self._write(jobs=guaranteed is not None) as db:
            if job_id is not None:
                self._state(db, job_id)
            if guaranteed is not None:
                if job_id is None:
                    raise StoreError("a service-wide event promises nothing")
                db.execute("UPDATE jobs SET guaranteed = ? WHERE id = ?", (int(guaranteed), job_id))
                detail = {**(detail or {}), "guaranteed": guaranteed}
            self._insert_event(db, job_id, t, kind, detail or {})

    def events(self, job_id: str | None = None) -> tuple[JobEvent, ...]:
        """The audit log in order: one job's entries, or every entry when ``job_id`` is None."""
        if job_id is None:
            return self._all_events()
        query = "SELECT job_id, t, kind, detail_json FROM events"
        params: tuple[str, ...] = ()
        if job_id is not None:
            query += " WHERE job_id = ?"
            params = (job_id,)
        with self._read() as db:
            if job_id is not None:
                self._state(db, job_id)
            rows = db.execute(query + " ORDER BY seq", params).fetchall()
        return tuple(
            JobEvent(job, t, kind, MappingProxyType(json.loads(detail)))
            for job, t, kind, detail in rows
        )

    def _all_events(self) -> tuple[JobEvent, ...]:
        """Every entry, those appended since the last call (by any process) read and parsed
        now. Rows are committed in ``seq`` order (SQLite lets one writer in at a time), so what
        lies past the last ``seq`` seen is all that is new."""
        with self._read() as db:
            rows = db.execute(
                "SELECT seq, job_id, t, kind, detail_json FROM events WHERE seq > ? ORDER BY seq",
                (self._events_seq,),
            ).fetchall()
            for seq, job, t, kind, detail in rows:
                self._events.append(JobEvent(job, t, kind, MappingProxyType(json.loads(detail))))
                self._events_seq = seq
            return tuple(self._events)

    # --- internals -----------------------------------------------------------------------------

    def _transition(
        self,
        db: sqlite3.Connection,
        job_id: str,
        new_state: Lifecycle | str,
        now: float,
        allocation: Sequence[int] | None,
        error: str | None,
        result: Mapping[str, Any] | None,
        guaranteed: bool | None,
        note: Mapping[str, Any] | None = None,
    ) -> None:
        target = Lifecycle(new_state)
        cpus = None if allocation is None else _check_cpus(allocation)
        if cpus and target is not Lifecycle.RUNNING:
            raise StoreError(f"job {job_id}: a {target.value} job holds no CPUs, got {cpus}")
        current = self._state(db, job_id)
        if target not in TRANSITIONS[current]:
            raise IllegalTransitionError(job_id, current, target)
        updates: dict[str, Any] = {"state": target.value}
        if target is Lifecycle.RUNNING:
            db.execute(
                "UPDATE jobs SET started_at = ? WHERE id = ? AND started_at IS NULL",
                (now, job_id),
            )
            if cpus is not None:
                updates["allocation_json"] = json.dumps(cpus)
        else:
            updates["allocation_json"] = "[]"
        if target in FINAL_STATES:
            updates["finished_at"] = now
        if error is not None:
            updates["error"] = error
        if result is not None:
            updates["result_json"] = json.dumps(dict(result), sort_keys=True)
        if guaranteed is not None:
            updates["guaranteed"] = int(guaranteed)
        assignments = ", ".join(f"{column} = ?" for column in updates)
        db.execute(f"UPDATE jobs SET {assignments} WHERE id = ?", (*updates.values(), job_id))
        detail: dict[str, Any] = {**(note or {}), "from": current.value, "to": target.value}
        if cpus is not None:
            detail["cpus"] = cpus
        if error is not None:
            detail["error"] = error
        if guaranteed is not None:
            detail["guaranteed"] = guaranteed
        self._insert_event(db, job_id, now, "state", detail)

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._db is None:
                raise StoreError(f"{self.path}: the store is closed")
            try:
                yield self._db
            except sqlite3.OperationalError as exc:
                # Locked past the timeout, disk full, I/O error: the file is fine, the moment
                # is not. Callers retry; the transaction (if any) was rolled back.
                raise StoreUnavailableError(f"{self.path}: {exc}") from exc

    @contextmanager
    def _write(self, *, jobs: bool = True) -> Iterator[sqlite3.Connection]:
        """One transaction: committed when the block ends, rolled back if it raises.
        ``jobs=False``: it leaves the jobs table alone (what ``list`` keeps stays good)."""
        with self._read() as db:
            # IMMEDIATE takes the write lock now, so a read-then-write (a state check before an
            # update) cannot interleave with another process writing the same file.
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                self._commit(db)
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            finally:
                if jobs:
                    self._job_writes += 1

    def _commit(self, db: sqlite3.Connection) -> None:
        db.execute("COMMIT")

    def _migrate(self) -> None:
        with self._write() as db:
            db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = db.execute("SELECT version FROM schema_version").fetchone()
            version = 0 if row is None else row[0]
            if version > len(MIGRATIONS):
                raise StoreError(
                    f"{self.path}: schema version {version} is newer than this qosched knows "
                    f"({len(MIGRATIONS)}); use a newer qosched or another file"
                )
            for statements in MIGRATIONS[version:]:
                for statement in statements:
                    db.execute(statement)
            if row is None:
                db.execute("INSERT INTO schema_version (version) VALUES (?)", (len(MIGRATIONS),))
            else:
                db.execute("UPDATE schema_version SET version = ?", (len(MIGRATIONS),))

    @staticmethod
    def _state(db: sqlite3.Connection, job_id: str) -> Lifecycle:
        row = db.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise UnknownJobError(job_id)
        return Lifecycle(row[0])

    @staticmethod
    def _insert_event(
        db: sqlite3.Connection, job_id: str | None, t: float, kind: str, detail: Mapping[str, Any]
    ) -> None:
        db.execute(
            "INSERT INTO events (job_id, t, kind, detail_json) VALUES (?, ?, ?, ?)",
            (job_id, t, kind, json.dumps(dict(detail), sort_keys=True)),
        )

    def _spec(self, job_id: str, spec_json: str) -> tuple[TrainingJobSpec | None, str | None]:
        """The job's spec read from its stored text, or why it does not read (once per text)."""
        cached = self._specs.get(job_id)
        if cached is not None and cached[0] == spec_json:
            return cached[1], cached[2]
        spec: TrainingJobSpec | None = None
        spec_error = None
        try:
            spec = TrainingJobSpec.from_dict(
                json.loads(spec_json), source=f"{self.path}: job {job_id}"
            )
        except (InputError, ValueError, TypeError, OverflowError, RecursionError) as exc:
            # Listed and failed, never run; the other jobs are not held back by it.
            spec_error = f"its stored spec does not read: {exc}"
        with self._lock:
            self._specs[job_id] = (spec_json, spec, spec_error)
        return spec, spec_error

    def _record(self, row: tuple[Any, ...]) -> JobRecord:
        (
            job_id,
            name,
            spec_json,
            state,
            submitted_at,
            deadline_at,
            started_at,
            finished_at,
            allocation_json,
            attempts,
            error,
            result_json,
            best_effort,
            guaranteed,
        ) = row
        spec, spec_error = self._spec(job_id, spec_json)
        result = None if result_json is None else MappingProxyType(json.loads(result_json))
        return JobRecord(
            id=job_id,
            name=name,
            spec=spec,
            state=Lifecycle(state),
            submitted_at=submitted_at,
            deadline_at=deadline_at,
            started_at=started_at,
            finished_at=finished_at,
            # Most jobs hold nothing: no JSON to parse for each of thousands of them.
            allocation=() if allocation_json == "[]" else tuple(json.loads(allocation_json)),
            attempts=attempts,
            error=error,
            result=result,
            best_effort=bool(best_effort),
            guaranteed=bool(guaranteed),
            spec_error=spec_error,
        )


def _trust_row(trust: CountTrust | None) -> tuple[float | None, float | None]:
    """The ``(seconds, spread)`` columns of a remembered speed (NULL without its trust)."""
    return (None, None) if trust is None else (trust.seconds, trust.spread)


def _check_cpus(cpus: Sequence[int]) -> list[int]:
    """Distinct non-negative CPU ids, sorted: an allocation is a set."""
    ids = list(cpus)
    if any(not isinstance(cpu, int) or isinstance(cpu, bool) or cpu < 0 for cpu in ids):
        raise InputError(f"expected non-negative CPU ids, got {ids}", field="allocation")
    if len(set(ids)) != len(ids):
        raise InputError(f"CPU ids must be distinct, got {ids}", field="allocation")
    return sorted(ids)
