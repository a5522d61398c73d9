"""The local scheduler service: real training jobs on this machine's CPU cores, with deadlines.

The same cluster policies the simulator runs (``qos`` by default, ``fifo`` for comparison) decide
here, on a one-node "cluster" whose workers are this machine's cores. Each round of
:meth:`LocalService.step`:

1. reaps worker processes that exited (done, pre-empted, crashed: retried from the last
   checkpoint up to ``MAX_ATTEMPTS``, then failed with the worker's error);
2. reads each worker's ``progress.jsonl`` into the job's state (and the store, for the
   predictor and for ``qosched status``);
3. asks the policy for core counts when anything changed or the tick is due, maps counts onto
   concrete cores (a job keeps its cores when its count is unchanged), and applies them:
   launches workers, re-sizes running ones in place by rewriting ``allocation.json``, pre-empts
   the ones that lost their cores with SIGTERM (they checkpoint and exit).

Durability: every job and every state change is in the SQLite store before it is acted on, and
workers run in their own session, so killing the service loses nothing; :meth:`open` re-adopts
workers still alive and restarts the others from their checkpoints.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qosched.backends.local import detail
from qosched.backends.local.api import LogChunk, Metrics, ServiceStatus
from qosched.backends.local.jobspec import TrainingJobSpec, parse_job_spec
from qosched.backends.local.progress import ProgressEvent, WorkerEvent, read_progress
from qosched.backends.local.protocol import (
    ALLOCATION_FILE,
    EXIT_DONE,
    EXIT_INPUT_ERROR,
    EXIT_PREEMPTED,
    JOB_FILE,
    PROGRESS_FILE,
    RESULT_FILE,
    Allocation,
    WorkerJob,
    read_allocation,
    read_result,
    write_allocation,
    write_worker_job,
)
from qosched.backends.local.speeds import prior_curve
from qosched.backends.local.store import JobRecord, JobState, Store, UnknownJobError
from qosched.backends.local.web import views
from qosched.cluster.job import JobSpec
from qosched.cluster.policies import create_policy
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, Phase
from qosched.cluster.state import JobState as ClusterJob
from qosched.core.errors import InputError

#: A job whose worker failed this many times is marked failed with the last error.
MAX_ATTEMPTS = 3
#: Seconds between decisions when nothing happens; also how often progress is read.
TICK_S = 5.0
#: What the policy is told a change of cores costs. Measured (docs/results/local.md): an in-place
#: re-size about 0.1 s, a pre-emption plus restart about 3.5 s (checkpoint, exit, a new process
#: importing torch); one value serves both, between the two.
RESIZE_PAUSE_S = 1.0
#: Checkpoint a running job this often (iterations); also bounds the work a crash loses.
CHECKPOINT_EVERY = 50
#: Where a log line for each job's worker goes, inside its job directory.
WORKER_LOG = "worker.log"


@dataclass(slots=True)
class _Live:
    """What the service keeps in memory about one unfinished job."""

    record: JobRecord
    state: ClusterJob
    job_dir: Path
    process: subprocess.Popen | None = None
    pid: int | None = None  # a worker re-adopted after a service restart (not our child)
    events_read: int = 0
    last_sample: tuple[float, int] | None = None  # (t, iteration) of the last progress sample
    cores: tuple[int, ...] = ()
    version: int = 0
    stopping: bool = False  # SIGTERM sent: expect EXIT_PREEMPTED
    cancelling: bool = False
    last_error: str | None = None
    over_memory: str | None = None  # why the job was killed for its memory use


class LocalService:
    """See the module docstring. Thread-safe: every public method takes one lock."""

    def __init__(
        self,
        home: Path,
        store: Store,
        cores: tuple[int, ...],
        policy: str,
        *,
        clock: Callable[[], float] = time.time,
        tick_s: float = TICK_S,
        python: str = sys.executable,
    ) -> None:
        self.home = home
        self.store = store
        self.cores = cores
        self.policy_name = policy
        self.policy = create_policy(policy)
        self.cluster = ClusterSpec.cpu(1, len(cores))
        self.clock = clock
        self.tick_s = tick_s
        self.python = python
        self._lock = threading.RLock()
        self._live: dict[str, _Live] = {}
        self._dirty = True  # something changed since the last decision
        self._next_decision = 0.0
        self._wake_at: float | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        home: Path,
        *,
        cpus: tuple[int, ...] | None = None,
        policy: str = "qos",
        **options: Any,
    ) -> LocalService:
        """Open (or create) the service's state under ``home`` and re-adopt unfinished jobs."""
        home = Path(home)
        (home / "jobs").mkdir(parents=True, exist_ok=True)
        allowed = tuple(sorted(os.sched_getaffinity(0)))
        cores = tuple(sorted(cpus)) if cpus else allowed
        unknown = sorted(set(cores) - set(allowed))
        if unknown:
            raise InputError(
                f"cores {unknown} are not available here (have {allowed})", field="cpus"
            )
        service = cls(home, Store(home / "state.db"), cores, policy, **options)
        service._recover()
        return service

    def run(self, stop: threading.Event) -> None:
        """Schedule until ``stop`` is set, then pre-empt running workers and wait for them."""
        while not stop.is_set():
            self.step()
            stop.wait(min(1.0, self.tick_s))
        self.stop_workers()

    def stop_workers(self, timeout_s: float = 30.0) -> None:
        """SIGTERM every running worker (each checkpoints and exits) and record them pre-empted."""
        with self._lock:
            for live in self._live.values():
                if self._alive(live):
                    self._signal(live, signal.SIGTERM)
                    live.stopping = True
            deadline = time.monotonic() + timeout_s
            while any(self._alive(live) for live in self._live.values()):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            self._reap()

    def close(self) -> None:
        self.store.close()

    # -- the API (see qosched.backends.local.api.Service) ---------------------------------------

    def submit(self, spec_text: str, source: str) -> dict[str, Any]:
        now = self.clock()
        spec = parse_job_spec(spec_text, source, now=now)
        return self.submit_spec(spec, now)

    def submit_spec(self, spec: TrainingJobSpec, now: float | None = None) -> dict[str, Any]:
        with self._lock:
            now = self.clock() if now is None else now
            job_id = self.store.submit(spec, now)
            record = self.store.get(job_id)
            live = self._track(record)
            accepted = self.policy.admit(live.state, self._view(now))
            # Policies that promise deadlines say which jobs they guarantee; a job they do not
            # runs only if its user allowed best effort. Other policies promise nothing.
            promises = hasattr(self.policy, "is_guaranteed")
            guaranteed = self._guaranteed(job_id)
            if accepted and (not promises or guaranteed or spec.best_effort):
                self.store.add_event(
                    job_id, now, "admitted", {"policy": self.policy_name, "guaranteed": guaranteed}
                )
            else:
                # Not guaranteed and the user did not allow best effort: turned away now, while
                # there is still time to go elsewhere.
                self.store.transition(job_id, JobState.DECLINED, now)
                self._forget(job_id)
            self._dirty = True
            return self.job(job_id)

    def jobs(self) -> list[dict[str, Any]]:
        with self._lock:
            return [self._describe(record) for record in self.store.list()]

    def job(self, job_id: str) -> dict[str, Any]:
        with self._lock:
            return self._describe(self.store.get(job_id))

    def logs(self, job_id: str, tail_lines: int | None = None) -> str:
        with self._lock:
            self.store.get(job_id)  # UnknownJobError for a bad id
            path = self.home / "jobs" / job_id / WORKER_LOG
        try:
            lines = path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        if tail_lines is not None:
            lines = lines[-tail_lines:] if tail_lines > 0 else []
        return "\n".join(lines) + ("\n" if lines else "")

    def cancel(self, job_id: str) -> dict[str, Any]:
        with self._lock:
            record = self.store.get(job_id)
            if record.state not in (JobState.QUEUED, JobState.RUNNING, JobState.PREEMPTED):
                raise InputError(f"job {job_id} is already {record.state.value}", field="job")
            live = self._live.get(job_id)
            if live is not None and self._alive(live):
                live.cancelling = True
                live.stopping = True
                self._signal(live, signal.SIGTERM)
            else:
                self._finish(job_id, JobState.CANCELLED)
            self._dirty = True
            return self.job(job_id)

    def metrics(self) -> Metrics:
        with self._lock:
            records = self.store.list()
            outcomes = dict.fromkeys(("met", "missed", "failed", "cancelled", "declined"), 0)
            for record in records:
                if record.state is JobState.SUCCEEDED:
                    met = (
                        record.finished_at is not None and record.finished_at <= record.deadline_at
                    )
                    outcomes["met" if met else "missed"] += 1
                elif record.state.value in outcomes:
                    outcomes[record.state.value] += 1
            return Metrics(
                capacity_cpus=len(self.cores),
                queued=sum(r.state in (JobState.QUEUED, JobState.PREEMPTED) for r in records),
                running=sum(r.state is JobState.RUNNING for r in records),
                allocated_cpus={j: len(live.cores) for j, live in self._live.items() if live.cores},
                outcomes=outcomes,
            )

    # -- one scheduling round ---------------------------------------------------------------------

    def step(self) -> None:
        with self._lock:
            self._enforce_memory()
            self._reap()
            self._read_progress()
            now = self.clock()
            due = now >= self._next_decision or (self._wake_at is not None and now >= self._wake_at)
            if self._dirty or due:
                self._decide(now)

    def idle(self) -> bool:
        """No unfinished job left."""
        with self._lock:
            return not self._live

    # -- internals --------------------------------------------------------------------------------

    def _track(self, record: JobRecord) -> _Live:
        spec = record.spec
        workload = spec.workload or "command"
        job = JobSpec(
            job_id=record.id,
            submit_s=record.submitted_at,
            model=workload,
            batch_size=1,
            iterations=spec.iterations,
            deadline_s=record.deadline_at,
            requested_workers=min(spec.requested_cpus, len(self.cores)),
        )
        curve = prior_curve(spec, len(self.cores))
        state = ClusterJob(job, curve)
        state.last_update_s = record.submitted_at
        live = _Live(record, state, self.home / "jobs" / record.id)
        self._live[record.id] = live
        return live

    def _guaranteed(self, job_id: str) -> bool:
        is_guaranteed = getattr(self.policy, "is_guaranteed", None)
        return bool(is_guaranteed(job_id)) if is_guaranteed is not None else False

    def _view(self, now: float, cores: int | None = None) -> ClusterView:
        """The jobs the policy decides for, on ``cores`` cores (default: all the service's).
        A job that has done all its iterations is writing its result: it keeps its cores until
        it exits, and the policy does not see it."""
        jobs = [live.state for live in self._live.values() if not self._finishing(live)]
        cluster = self.cluster if cores is None else ClusterSpec.cpu(1, cores)
        return ClusterView(now, cluster, jobs, RESIZE_PAUSE_S)

    @staticmethod
    def _finishing(live: _Live) -> bool:
        return bool(live.cores) and live.state.remaining_iterations <= 0

    def _decide(self, now: float) -> None:
        self._dirty = False
        self._next_decision = now + self.tick_s
        held = {c for live in self._live.values() if self._finishing(live) for c in live.cores}
        free = [c for c in self.cores if c not in held]
        if not free:
            return  # every core is finishing a job: decide when one exits
        decision = self.policy.allocate(self._view(now, len(free)))
        self._wake_at = decision.wake_at
        counts: dict[str, int] = {}
        room = len(free)
        for job_id, count in decision.workers.items():  # in the policy's priority order
            bounds = self._live[job_id].record.spec.resources
            count = max(bounds.min_cpus, min(count, bounds.max_cpus or count)) if count else 0
            if 0 < count <= room:  # a job whose minimum no longer fits waits
                counts[job_id] = count
                room -= count
        current = {
            job_id: live.cores
            for job_id, live in self._live.items()
            if live.cores and not self._finishing(live)
        }
        assignment = assign_cores(counts, current, free)
        for job_id, live in list(self._live.items()):
            cores = assignment.get(job_id, ())
            if cores == live.cores or live.stopping or self._finishing(live):
                continue
            if not cores:
                self._preempt(live)
            elif self._alive(live):
                self._resize(live, cores, now)
            else:
                self._launch(live, cores, now)

    def _launch(self, live: _Live, cores: tuple[int, ...], now: float) -> None:
        record = self.store.get(live.record.id)
        live.job_dir.mkdir(parents=True, exist_ok=True)
        spec = record.spec
        write_worker_job(
            live.job_dir / JOB_FILE,
            WorkerJob(
                job_id=record.id,
                workload=spec.workload,
                command=spec.command,
                iterations=spec.iterations,
                seed=spec.seed,
                checkpoint_every=CHECKPOINT_EVERY,
            ),
        )
        live.version += 1
        write_allocation(live.job_dir / ALLOCATION_FILE, Allocation(cores, live.version))
        log = (live.job_dir / WORKER_LOG).open("ab")
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        live.process = subprocess.Popen(
            [self.python, "-m", "qosched.backends.local.worker", str(live.job_dir)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # survives the service: a restart re-adopts it
        )
        log.close()
        live.pid = None
        live.cores = cores
        live.stopping = False
        attempts = self.store.increment_attempts(record.id)
        live.record = self.store.transition(
            record.id,
            JobState.RUNNING,
            now,
            allocation=cores,
            guaranteed=self._guaranteed(record.id),
        )
        self.store.add_event(
            record.id,
            now,
            "launched",
            {"pid": live.process.pid, "cores": list(cores), "attempt": attempts},
        )
        live.state.phase = Phase.RUNNING
        live.state.workers = len(cores)
        if live.state.started_s is None:
            live.state.started_s = now
        live.state.reallocations += live.state.started_s != now

    def _resize(self, live: _Live, cores: tuple[int, ...], now: float) -> None:
        live.version += 1
        write_allocation(live.job_dir / ALLOCATION_FILE, Allocation(cores, live.version))
        live.cores = cores
        live.state.workers = len(cores)
        live.state.reallocations += 1
        live.last_sample = None  # an interval of progress must not span two allocations
        self.store.set_allocation(live.record.id, cores, now)

    def _preempt(self, live: _Live) -> None:
        if self._alive(live):
            live.stopping = True
            self._signal(live, signal.SIGTERM)

    def _alive(self, live: _Live) -> bool:
        if live.process is not None:
            return live.process.poll() is None
        if live.pid is not None:
            return _pid_alive(live.pid)
        return False

    @staticmethod
    def _signal(live: _Live, signum: int) -> None:
        pid = live.process.pid if live.process is not None else live.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def _reap(self) -> None:
        """Act on workers that exited since the last round."""
        for job_id, live in list(self._live.items()):
            if live.process is None and live.pid is None:
                continue
            if self._alive(live):
                continue
            code = live.process.returncode if live.process is not None else None
            self._read_progress_of(live)
            last = self._last_event(live)
            if code is None:  # a re-adopted worker: its last event says how it ended
                code = _exit_from_event(last)
            live.process, live.pid = None, None
            now = self.clock()
            self._dirty = True
            if code == EXIT_DONE and (live.job_dir / RESULT_FILE).exists():
                result = read_result(live.job_dir / RESULT_FILE)
                self.store.record_result(job_id, result.to_json(), now)
                self._forget(job_id)
                continue
            if live.cancelling:
                self._finish(job_id, JobState.CANCELLED)
                continue
            if live.over_memory is not None:  # killed for it: a retry would do the same
                self.store.record_failure(job_id, live.over_memory, now)
                self._forget(job_id)
                continue
            if code == EXIT_PREEMPTED and live.stopping:
                self._mark_preempted(live, now, "pre-empted by the scheduler")
                continue
            message = (last.message if last is not None and last.message else None) or (
                f"worker exited with code {code}"
            )
            attempts = self.store.get(job_id).attempts
            if code == EXIT_INPUT_ERROR or attempts >= MAX_ATTEMPTS:
                self.store.record_failure(job_id, message, now)
                self._forget(job_id)
            else:
                self._mark_preempted(live, now, f"attempt {attempts} failed: {message}")

    def _enforce_memory(self) -> None:
        """Kill a job whose processes use more resident memory than its spec allows (what a
        cgroup limit would do, without needing one): the worker's whole process group, since a
        command job's own children count too."""
        for live in self._live.values():
            limit = live.record.spec.resources.memory_bytes
            pid = live.process.pid if live.process is not None else live.pid
            if limit is None or pid is None or live.over_memory is not None:
                continue
            used = resident_bytes(pid)
            if used > limit:
                live.over_memory = (
                    f"exceeded its memory limit of {limit / 2**20:.0f} MiB "
                    f"(resident {used / 2**20:.0f} MiB)"
                )
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)

    def _mark_preempted(self, live: _Live, now: float, why: str) -> None:
        live.record = self.store.transition(live.record.id, JobState.PREEMPTED, now)
        self.store.add_event(live.record.id, now, "stopped", {"why": why})
        live.cores, live.stopping = (), False
        live.state.workers = 0
        live.state.phase = Phase.PENDING
        live.last_sample = None

    def _finish(self, job_id: str, state: JobState) -> None:
        self.store.transition(job_id, state, self.clock())
        self._forget(job_id)

    def _forget(self, job_id: str) -> None:
        live = self._live.pop(job_id, None)
        if live is not None:
            live.state.phase = Phase.FINISHED

    def _last_event(self, live: _Live) -> ProgressEvent | None:
        events = read_progress(live.job_dir / PROGRESS_FILE)
        return events[-1] if events else None

    def _read_progress(self) -> None:
        for live in self._live.values():
            self._read_progress_of(live)

    def _read_progress_of(self, live: _Live) -> None:
        try:
            events = read_progress(live.job_dir / PROGRESS_FILE)
        except InputError as exc:
            live.last_error = str(exc)
            return
        state = live.state
        for event in events[live.events_read :]:
            if event.iteration is None:
                continue
            if event.event in (WorkerEvent.START, WorkerEvent.RESIZE):
                live.last_sample = (event.t, event.iteration)  # a new interval starts here
            elif live.last_sample is not None and event.t > live.last_sample[0]:
                state.active_s += event.t - live.last_sample[0]
                live.last_sample = (event.t, event.iteration)
            state.iterations_done = float(min(event.iteration, state.spec.iterations))
            state.last_update_s = event.t
            if event.event in (WorkerEvent.PROGRESS, WorkerEvent.CHECKPOINT, WorkerEvent.DONE):
                self.store.add_progress(live.record.id, event.t, event.iteration, event.cpus)
        live.events_read = len(events)

    def _recover(self) -> None:
        """Rebuild memory from the store: re-adopt live workers, queue the rest again."""
        now = self.clock()
        for record in self.store.unfinished():
            live = self._track(record)
            self.policy.admit(
                live.state, self._view(now)
            )  # accepted before: the policy re-learns it
            pid = self._launched_pid(record.id)
            self._read_progress_of(live)
            if record.state is JobState.RUNNING and pid is not None and _is_worker(pid, live):
                live.pid = pid
                live.cores = record.allocation
                live.state.workers = len(live.cores)
                live.state.phase = Phase.RUNNING
                live.state.started_s = record.started_at
                live.version = _allocation_version(live.job_dir)
                self.store.add_event(record.id, now, "re-adopted", {"pid": pid})
            elif record.state is JobState.RUNNING:
                self._mark_preempted(live, now, "the worker did not survive a service restart")
        self._dirty = True

    def _launched_pid(self, job_id: str) -> int | None:
        launches = [e for e in self.store.events(job_id) if e.kind == "launched"]
        return int(launches[-1].detail["pid"]) if launches else None

    def _describe(self, record: JobRecord) -> dict[str, Any]:
        live = self._live.get(record.id)
        done = live.state.iterations_done if live is not None else None
        if done is None:
            samples = self.store.progress(record.id)
            done = samples[-1].iteration if samples else 0
            if record.state is JobState.SUCCEEDED:
                done = record.spec.iterations
        predicted = band = None
        if live is not None:
            predicted, band = self._predict_finish(live)
        return {
            "id": record.id,
            "name": record.name,
            "state": record.state.value,
            "submitted_at": record.submitted_at,
            "deadline_at": record.deadline_at,
            "started_at": record.started_at,
            "finished_at": record.finished_at,
            "iterations": record.spec.iterations,
            "iterations_done": int(done),
            "cpus": list(live.cores if live is not None else record.allocation),
            "predicted_finish_at": predicted,
            "predicted_finish_band": band,
            "best_effort": record.best_effort,
            "guaranteed": record.guaranteed,
            "attempts": record.attempts,
            "error": record.error,
        }

    def _predict_finish(self, live: _Live) -> tuple[float | None, list[float] | None]:
        """When the job finishes at its current core count, from the policy's predictor."""
        predictor = getattr(self.policy, "predictor_of", None)
        workers = len(live.cores)
        if predictor is None or not workers:
            return None, None
        model = predictor(live.state.job_id)
        if model is None:
            return None, None
        prediction = model.predict(workers)
        remaining = live.state.remaining_iterations
        now = self.clock()
        return (
            now + remaining / prediction.rate,
            [now + remaining / prediction.rate_high, now + remaining / prediction.rate_low],
        )

    # -- the API's newer views (see qosched.backends.local.api.Service) --------------------------

    def status(self) -> ServiceStatus:
        with self._lock:
            metrics = self.metrics()
            return ServiceStatus(
                policy=self.policy_name,
                cpus=self.cores,
                queued=metrics.queued,
                running=metrics.running,
                allocated={j: live.cores for j, live in self._live.items() if live.cores},
                outcomes=metrics.outcomes,
            )

    def job_detail(self, job_id: str) -> dict[str, Any]:
        with self._lock:
            return detail.job_detail(self.job(job_id), self.store.events(job_id))

    def read_log(self, job_id: str, offset: int, limit: int) -> LogChunk:
        with self._lock:
            state = self.store.get(job_id).state  # before the bytes: see read_log_chunk
        path = self.home / "jobs" / job_id / WORKER_LOG
        return detail.read_log_chunk(path, offset, limit, state=state)

    # -- the web page's views (see qosched.backends.local.api.DashboardService) -----------------

    def timeline(self) -> dict[str, Any]:
        with self._lock:
            return views.timeline(
                self.jobs(), self.store.events(), now=self.clock(), cpus=self.cores
            )

    def job_speed(self, job_id: str) -> dict[str, Any]:
        with self._lock:
            samples = self.store.progress(job_id)  # UnknownJobError for a bad id
            events = self.store.events(job_id)
            predictor = getattr(self.policy, "predictor_of", None)
            model = predictor(job_id) if predictor is not None else None
            predicted: dict[int, tuple[float, float, float]] = {}
            if model is not None:
                for cpus in range(1, len(self.cores) + 1):
                    guess = model.predict(cpus)
                    predicted[cpus] = (guess.rate, guess.rate_low, guess.rate_high)
        return views.job_speed(job_id, samples, events, predicted)

    def usage(self) -> dict[str, Any]:
        with self._lock:
            held = {
                job_id: (live.cores, live.process.pid if live.process is not None else live.pid)
                for job_id, live in self._live.items()
                if live.cores
            }
            now = self.clock()
        jobs = {
            job_id: {"cpus": len(cores), "cpu_s": views.cpu_seconds(pid) if pid else 0.0}
            for job_id, (cores, pid) in held.items()
        }
        return {"t": now, "cpus": len(self.cores), "jobs": jobs}


def assign_cores(
    counts: dict[str, int], current: dict[str, tuple[int, ...]], cores: Sequence[int]
) -> dict[str, tuple[int, ...]]:
    """Concrete cores for each job's count: a job keeps its cores when its count is unchanged,
    and keeps as many of its own as it can when it grows or shrinks; the rest take free cores in
    order. Counts must fit in ``cores`` together."""
    if sum(counts.values()) > len(cores):
        raise ValueError(f"{sum(counts.values())} cores wanted, {len(cores)} exist")
    taken: set[int] = set()
    result: dict[str, tuple[int, ...]] = {}
    for job_id, count in counts.items():  # unchanged first: they must not move
        held = current.get(job_id, ())
        if len(held) == count:
            result[job_id] = held
            taken.update(held)
    for job_id, count in counts.items():  # shrinking jobs keep a prefix of their cores
        held = current.get(job_id, ())
        if job_id not in result and len(held) > count:
            result[job_id] = held[:count]
            taken.update(held[:count])
    for job_id, count in counts.items():  # growing and new jobs: own cores first, then free
        if job_id in result:
            continue
        own = [c for c in current.get(job_id, ()) if c not in taken]
        free = [c for c in cores if c not in taken and c not in own]
        chosen = tuple(sorted((own + free)[:count]))
        result[job_id] = chosen
        taken.update(chosen)
    return result


def resident_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants (0 for a process that is gone)."""
    total, pending, seen = 0, [pid], set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            status = Path(f"/proc/{current}/status").read_text()
            tasks = list(Path(f"/proc/{current}/task").iterdir())
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
        for task in tasks:
            with contextlib.suppress(OSError):
                pending.extend(int(c) for c in (task / "children").read_text().split())
    return total


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); it is not running.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    return True


def _is_worker(pid: int, live: _Live) -> bool:
    """The process is still this job's worker (a pid can be reused after a reboot)."""
    if not _pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(live.job_dir).encode() in cmdline


def _exit_from_event(event: ProgressEvent | None) -> int:
    if event is None:
        return 1
    if event.event is WorkerEvent.DONE:
        return EXIT_DONE
    if event.event is WorkerEvent.PREEMPTED:
        return EXIT_PREEMPTED
    return 1


def _allocation_version(job_dir: Path) -> int:
    try:
        return read_allocation(job_dir / ALLOCATION_FILE).version
    except (InputError, OSError):
        return 0


def wait_until_idle(service: LocalService, timeout_s: float, poll_s: float = 0.5) -> bool:
    """Step ``service`` until no job is left or ``timeout_s`` passes; True when idle."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        service.step()
        if service.idle():
            return True
        time.sleep(poll_s)
    return False


__all__ = ["LocalService", "UnknownJobError", "assign_cores", "wait_until_idle"]
