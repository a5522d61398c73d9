"""The local scheduler service: real training jobs on this machine's CPU cores and GPUs, with
deadlines.

The same cluster policies the simulator runs (``qos`` by default, ``fifo`` for comparison) decide
here, on one-node "clusters" of this machine. A job is sized in one kind of worker, never both:
a GPU job (``resources.minGpus``/``maxGpus``) in GPUs, every other job in cores. So the service
keeps two pools, each with its own policy instance and its own ``ClusterView`` (a
``ClusterSpec`` of ``resource="cpu"`` over the cores, of ``resource="gpu"`` over the GPUs), and
each round decides one pool after the other: the cores among the CPU jobs, the GPUs among the
GPU jobs. A policy thus sees what it was written for, a cluster of identical workers and the jobs
that want them, and no policy needs to know about the other resource. A GPU job's processes run
on the service's cores without holding any (they feed the GPUs; the cores are the CPU jobs').
The GPUs come from ``gpus.gpu_inventory``: declared (``qosched up --gpus``) or found by NVML.

Each round of :meth:`LocalService.step`:

1. kills what must stop: a job over its memory limit at once, a runner still running
   ``grace_s`` after its SIGTERM (cancel, pre-emption, a failed job) with SIGKILL to every
   process of its job: its cgroup's members where the service could make one
   (``cgroups.detect``), else its runner's descendants and process group;
2. reaps runner processes that exited (done, pre-empted, crashed: retried from the last
   checkpoint up to ``MAX_ATTEMPTS``, then failed with the runner's error); a job's cores are
   free only once no process of its group is left;
3. reads each runner's ``progress.jsonl`` into the job's state (and the store, for the
   predictor and for ``qosched status``);
4. asks each pool's policy for counts when anything changed or the tick is due, maps counts
   onto concrete cores or GPUs (a job keeps them when its count is unchanged), and applies them:
   pre-empts the jobs that lost theirs with SIGTERM (they checkpoint and exit), re-sizes running
   ones, and launches runners on cores and GPUs no other job holds. A CPU job is re-sized in
   place by rewriting ``allocation.json``; a GPU job or a ``launcher: torchrun`` job is re-sized
   by checkpoint-restart (a process's GPUs, and torchrun's process count, are fixed when it
   starts): it is stopped like a pre-empted job and launched again with its new count once its
   processes are gone.

No core or GPU is in two jobs' hands: a job's cores and GPUs are handed on only once no process
of its runner is left. GPUs given and given back are in the store's audit log (``gpus`` events
with ``held`` before the runner starts, ``released`` once its processes are gone).

One job's trouble is that job's failure: an exception while handling one job in any of these
steps (a progress line that is not the runner's, a number out of bounds, a launch that cannot
start) fails that job with the reason in the store, and the round goes on for the others. Store
trouble (``StoreUnavailableError``: a full disk, a lock held too long) is the service's: the
round stops, the run loop backs off and retries, and the next round first rebuilds memory from
the store as a restart would, so nothing is left half-applied.

Durability: every job and every state change is in the SQLite store before it is acted on; a
launch is committed as an intent (``launching``, with the job folder) before the process starts
and as ``launched`` (pid and start time) after. Runners live in their own session, so killing the
service loses nothing: :meth:`open` finds live runners by their job folder (a process running
``python -m qosched.backends.local.runner JOB_DIR``), adopts them, and restarts the others from
their checkpoints; a job whose runner completed while the service was down is recorded done,
never run again. Runners are held by pidfd (``process.RunnerProcess``), so a reused pid is never
taken for a runner or sent a signal.

Fault injection (tests): ``QOSCHED_FAULT_AT=POINT:N[,POINT:N...]`` makes the service SIGKILL
itself the N-th time it passes ``POINT``, one of ``FAULT_POINTS`` (``faults``).

This module is the API, the lock, the wiring and the order of each step; what a step computes
is in a module of its own, none of which writes the store: ``rounds`` (a pool's counts fitted,
assigned and explained), ``intake`` (a runner's progress into memory), ``runners`` (a runner's
start, ending what a job left, how a job goes on once its runner is gone), ``pools`` (a job and
its pool as the policy sees them), ``notes`` (the words and numbers of a start, re-size or
decline event), ``recovery`` (the store read back after a restart) and
``describe`` (a job's ``JobView``), all over ``livejob.LiveJob``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from qosched.backends.local import detail, joblog, reasons
from qosched.backends.local.api import LogChunk, ServiceMetrics, ServiceStatus
from qosched.backends.local.cgroups import JobGroup, JobGroups, detect
from qosched.backends.local.cgroups import describe as describe_groups
from qosched.backends.local.describe import describe, speed_source
from qosched.backends.local.faults import FAULT_ENV, Faults
from qosched.backends.local.files import MACHINE_ERRNOS
from qosched.backends.local.gpus import gpu_inventory
from qosched.backends.local.intake import RUNNER_WARNING, Sample, take_in
from qosched.backends.local.jobview import JobDetail, JobView, Outcome
from qosched.backends.local.judge import judge
from qosched.backends.local.livejob import LiveJob, holding, units_of, worker_kind
from qosched.backends.local.machine_use import (
    KEEP_S,
    MAX_POINTS,
    MAX_SAMPLES,
    UseSampler,
    thin,
)
from qosched.backends.local.notes import finish_fields, resize_note, start_note, verdict_note
from qosched.backends.local.pools import (
    GPU_RESIZE_PAUSE_S,
    RESIZE_PAUSE_S,
    measured_first,
    policy_job,
    pool_view,
    predicted_finish,
)
from qosched.backends.local.process import (
    ExitWaiter,
    RunnerProcess,
    find_runners,
    runner_folder,
)
from qosched.backends.local.profiling import (
    MAX_PROFILE_S,
    next_step,
    size_speeds,
    sizes_to_measure,
)
from qosched.backends.local.progress import ProgressEvent, ProgressFollower
from qosched.backends.local.recovery import (
    gpus_in_log,
    highest_job_folder,
    replay,
    runners_in_order,
)
from qosched.backends.local.rounds import (
    Change,
    assign_cores,
    assign_units,
    changes,
    explain,
    fit_counts,
    lend_for_measuring,
)
from qosched.backends.local.runners import (
    KILL_WAIT_S,
    end_leftovers,
    ending,
    kill_and_wait,
    resident_bytes,
    runner_environment,
    runner_job,
)
from qosched.backends.local.speed_memory import (
    CountTrust,
    clamp_spread,
    drift_spread,
    measured_rates,
    measured_spread,
    measured_startup_s,
    measured_trust,
    remembered_curve,
    speed_key,
)
from qosched.backends.local.speeds import prior_curve
from qosched.backends.local.store import (
    FINAL_STATES,
    HOLDING_STATES,
    IllegalTransitionError,
    JobRecord,
    Lifecycle,
    ProgressSample,
    Store,
    StoreUnavailableError,
    UnknownJobError,
)
from qosched.backends.local.verdict import Verdict
from qosched.backends.local.web import views
from qosched.cluster.admission import Admission, admit_job
from qosched.cluster.policies import Policy, create_policy
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, JobState, Phase
from qosched.core.errors import InputError
from qosched.trainingjob.jobspec import TrainingJobSpec, parse_job_spec
from qosched.trainingjob.protocol import (
    ALLOCATION_FILE,
    JOB_FILE,
    PROGRESS_FILE,
    RESULT_FILE,
    Allocation,
    read_allocation,
    read_result,
    write_allocation,
    write_runner_job,
)

log = logging.getLogger(__name__)

#: The id a job judged by `LocalService.judge_spec` has for its policy (no job is stored).
DRY_RUN_ID = "dry-run"
#: An admission says how many workers the job would start on as its policy's answer (asked of a
#: copy of the policy) while its pool has at most this many jobs; beyond, the copy costs more
#: than a submit should (bench/local_submit_cost.py, 2 cores: 200 submits under qos took 7.2 s
#: asking every time; with this bound 1.1-1.9 s over five runs, as before admissions said why,
#: 1.2-1.3 s), and it says the job's fastest count on the free workers instead.
ASKED_UP_TO = 16
#: Seconds between decisions when nothing happens; also how often progress is read.
TICK_S = 5.0
#: Options of the policies on this machine. ``qos``: a local job lives seconds to minutes and
#: its speed moves with the machine's other work, so its predicted speeds are re-read after 2 s
#: (plus 10% of its running time), not after a cluster's minute; and a spare core goes only
#: where it adds 0.9 of a core's speed, so that the cores handed out are kept busy (the bundled
#: workloads gain 0.5x or less from a second core on a 2-core machine, which held a quarter of
#: the cores given idle: docs/results/local.md).
POLICY_OPTIONS: dict[str, dict[str, float]] = {"qos": {"refresh_s": 2.0, "min_spare_gain": 0.9}}
#: Where a log line for each job's runner goes, inside its job directory. The file keeps the
#: name earlier versions gave it, so job folders (and runners) they left are read as before.
RUNNER_LOG = joblog.JOB_LOG
#: A running job that reports no progress for this long, and for ten of its predicted iterations,
#: is noted as stalled (an event, once until it moves again), and its finish is no longer
#: predicted: a hung command would otherwise show "in 1 s, on track" for ever.
STALL_MIN_S = 300.0
#: The store event kind of that note.
STALLED = "stalled"
#: Seconds a runner has between SIGTERM (cancel, pre-emption, ``down``, a failed job) and
#: SIGKILL of its whole process group. A built-in workload checkpoints within one iteration.
GRACE_S = 30.0
#: After store trouble the run loop waits this long, doubling up to ``STORE_RETRY_MAX_S``.
STORE_RETRY_S = 1.0
STORE_RETRY_MAX_S = 30.0


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
        grace_s: float = GRACE_S,
        faults: str | None = None,
        gpus: tuple[int, ...] = (),
        groups: JobGroups | None = None,
    ) -> None:
        if not 0 <= grace_s < math.inf:
            raise InputError(f"expected seconds >= 0, got {grace_s}", field="grace_s")
        self.home = home
        self.store = store
        self.cores = cores
        self.gpus = tuple(sorted(gpus))
        self.policy_name = policy
        self.policy, self.gpu_policy = self._new_policies()
        self.cluster = ClusterSpec.cpu(1, len(cores))
        self.clock = clock
        self.tick_s = tick_s
        self.python = python
        self.grace_s = grace_s
        self.groups = groups  # where each job's cgroup is made; None: no cgroups
        self._faults = Faults(os.environ.get(FAULT_ENV) if faults is None else faults)
        self._lock = threading.RLock()
        self._live: dict[str, LiveJob] = {}
        self._dirty = True  # something changed since the last decision
        self._stale = False  # store trouble: memory may be ahead of the store
        # The service's own trouble (the store, descriptors, a full disk): what and since when
        # (service clock), shown by ``status`` until a round goes through without it.
        self._trouble: tuple[str, float] | None = None
        self._troubled_this_round = False
        self._popens: dict[int, subprocess.Popen] = {}  # our runners while memory is rebuilt
        self._next_decision = 0.0
        self._wake_at: float | None = None
        self._use = UseSampler()  # machine use, sampled into the store by run()
        # The jobs each pool's policy decided for last (by pool: GPU or not), to say what
        # changed since in the reasons of the next decision.
        self._seen: dict[bool, frozenset[str]] = {}

    # -- lifecycle --------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        home: Path,
        *,
        cpus: tuple[int, ...] | None = None,
        policy: str = "qos",
        gpus: Sequence[int] | None = None,
        cgroups: bool | JobGroups = True,
        **options: Any,
    ) -> LocalService:
        """Open (or create) the service's state under ``home`` and re-adopt unfinished jobs; a job
        it cannot track is failed with the reason, never a reason not to start. ``gpus`` declares
        the GPUs (``()``: none); ``None`` asks NVML. ``cgroups``: put each job in a cgroup of
        its own where this machine lets the service make one (``cgroups.detect``), or under
        the ``JobGroups`` given."""
        # Absolute: runners are found again by the job folder on their command line.
        home = Path(home).absolute()
        (home / "jobs").mkdir(parents=True, exist_ok=True)
        allowed = tuple(sorted(os.sched_getaffinity(0)))
        cores = tuple(sorted(cpus)) if cpus else allowed
        unknown = sorted(set(cores) - set(allowed))
        if unknown:
            raise InputError(
                f"cores {unknown} are not available here (have {allowed})", field="cpus"
            )
        inventory = gpu_inventory(gpus)
        groups = cgroups if isinstance(cgroups, JobGroups) else detect(home) if cgroups else None
        log.info("%s", describe_groups(groups))
        service = cls(
            home, Store(home / "state.db"), cores, policy, gpus=inventory, groups=groups, **options
        )
        try:
            service.store.skip_ids_through(highest_job_folder(home / "jobs"))
            service._recover()
            service._sweep_groups()  # what a service that died left
        except BaseException:
            service.close()
            raise
        return service

    def run(self, stop: threading.Event) -> None:
        """Schedule until ``stop`` is set, then stop the runners and wait for them. Store
        trouble in a round is logged and the round retried, with a growing pause."""
        backoff = STORE_RETRY_S
        while not stop.is_set():
            try:
                self.step()
            except StoreUnavailableError as exc:
                log.warning("store trouble; retrying the round in %g s: %s", backoff, exc)
                with self._lock:
                    self._note_trouble(f"its state cannot be written: {exc}")
            except Exception:
                # A fault no job could be blamed for (the policy itself raised): the service
                # stays up, and the retry starts from the store, where recovery fails each job
                # it cannot track.
                log.exception("the scheduling round failed; retrying in %g s", backoff)
                with self._lock:
                    self._stale = True
            else:
                backoff = STORE_RETRY_S
                self.record_use()
                self.wait_for_exit(min(1.0, self.tick_s), stop)
                continue
            stop.wait(backoff)
            backoff = min(2 * backoff, STORE_RETRY_MAX_S)
        self.stop_runners()

    def wait_for_exit(self, timeout_s: float, stop: threading.Event | None = None) -> None:
        """Wait up to ``timeout_s`` between rounds, less when a runner exits (or ``stop`` is
        set): the next round then hands its cores on at once, not up to a wait later."""
        with self._lock:
            waiter = ExitWaiter([live.runner for live in self._live.values() if live.runner])
        waiter.wait(timeout_s, stop)

    def stop_runners(self, grace_s: float | None = None) -> None:
        """SIGTERM every live runner (each checkpoints and exits), SIGKILL the process groups
        of those still running ``grace_s`` later (default: the service's), and record them
        pre-empted: they resume from their checkpoints at the next start."""
        grace = self.grace_s if grace_s is None else grace_s
        with self._lock:
            for live in list(self._live.values()):
                if live.runner is not None and not live.runner.gone():
                    self._stop(live)
            for wait_s, kill in ((grace, True), (KILL_WAIT_S, False)):
                deadline = time.monotonic() + wait_s
                while time.monotonic() < deadline and not self._runners_gone():
                    time.sleep(0.05)
                if kill:
                    for live in self._live.values():
                        if live.runner is not None and not live.runner.gone():
                            live.runner.kill_group(signal.SIGKILL)
                            live.killed = True
            try:
                self._reap()
            except StoreUnavailableError as exc:  # recovery at the next start sorts them out
                log.warning("cannot record the stopped runners: %s", exc)

    def close(self) -> None:
        """Let go of the runners (they keep running) and of the store."""
        with self._lock:
            for live in self._live.values():
                if live.runner is not None:
                    live.runner.close()
            self._sweep_groups()
            self.store.close()

    def _sweep_groups(self) -> None:
        """Remove the empty groups of jobs without a runner (those of running jobs stay)."""
        if self.groups is not None:
            self.groups.sweep(keep={i for i, live in self._live.items() if live.runner is not None})

    # -- the API (see qosched.backends.local.api.Service) ---------------------------------------

    def submit(self, spec_text: str, source: str) -> JobView:
        now = self.clock()
        # A command without workingDir runs in this service's folder: its script must be there.
        spec = parse_job_spec(spec_text, source, now=now, scripts_in=Path.cwd())
        return self.submit_spec(spec, now)

    def submit_spec(self, spec: TrainingJobSpec, now: float | None = None) -> JobView:
        with self._lock, self._marking_stale():
            if self._stale:
                self._resync()
            now = self.clock() if now is None else now
            job_id = self.store.submit(spec, now)
            try:
                record = self.store.get(job_id)
                live = self._track(record)
                if self._measure_first(live):
                    self._start_profiling(live, now)
                    return self.job(job_id)
                admission = admit_job(
                    self._policy_of(live),
                    live.policy_job,
                    self._view(now, spec.gpu),
                    best_effort=spec.best_effort,
                )
            except StoreUnavailableError:
                raise
            except Exception as exc:  # the policy could not take it: this job's failure
                self._forget(job_id)
                self.store.record_failure(job_id, f"cannot be scheduled: {_reason(exc)}", now)
                return self.job(job_id)
            if live.remembered is not None:
                measured_by, rates = live.remembered
                curve = live.policy_job.curve
                self.store.add_event(
                    job_id,
                    now,
                    "speed",
                    {
                        "remembered_from": measured_by,
                        "rates": {str(w): r for w, r in rates.items()},
                        # What a promise on each count rests on (speed_memory.CountTrust).
                        "spreads": {
                            str(w): curve.spread_at(w)
                            for w in rates
                            if curve.spread_at(w) is not None
                        },
                    },
                )
            if admission is Admission.DECLINED:
                self._forget(job_id)  # out of the view the verdict is judged on
                verdict = self._declined_verdict(live, self._view(now, spec.gpu), admission)
                self.store.transition(
                    job_id,
                    Lifecycle.DECLINED,
                    now,
                    error=verdict.message(),
                    guaranteed=False,
                    note=verdict_note(verdict),
                )
            else:
                self._record_admission(live, admission, now)
            self._dirty = True
            return self.job(job_id)

    def _measure_first(self, live: LiveJob) -> bool:
        """Whether the job's deadline waits for its measured speed (see profiling): its
        policy promises deadlines, and nothing measured its speed: no table for it, nothing
        remembered under its speed key."""
        return measured_first(self._policy_of(live), live.spec, live.remembered is not None)

    def _record_admission(
        self,
        live: LiveJob,
        admission: Admission,
        now: float,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """The ``admitted`` event, which sets the job's promise on its row in the same commit,
        with why in words and the numbers behind them."""
        guaranteed = admission is Admission.GUARANTEED
        promised = reasons.promise(guaranteed, live.spec.best_effort)
        detail: dict[str, Any] = {"policy": self.policy_name, "promise": promised, **(extra or {})}
        try:
            detail.update(self._admission_reason(live, admission, promised, now))
        except StoreUnavailableError:
            raise
        except Exception:  # the reason is a courtesy: the admission stands without it
            log.exception("job %s: cannot say why it was admitted", live.record.id)
        self.store.add_event(live.record.id, now, "admitted", detail, guaranteed=guaranteed)
        live.record = dataclasses.replace(live.record, guaranteed=guaranteed)

    def _admission_reason(
        self, live: LiveJob, admission: Admission, promised: str, now: float
    ) -> dict[str, Any]:
        """``why`` the job was admitted as it was, and the numbers: the workers it would start
        on now, its predicted finish there (after its start-up), its deadline, and where its
        speed comes from."""
        policy, spec = self._policy_of(live), live.spec
        reason = None
        if admission is not Admission.GUARANTEED:
            if not policy.promises_deadlines:
                reason = f"{self.policy_name} promises no deadlines"
            else:
                view = self._view(now, spec.gpu)  # without the job, as judge wants it
                view = dataclasses.replace(
                    view, jobs=[j for j in view.jobs if j is not live.policy_job]
                )
                reason = judge(
                    policy,
                    live.policy_job,
                    view,
                    best_effort=spec.best_effort,
                    admission=admission,
                    kind=worker_kind(spec),
                    startup_s=live.startup_s,
                    earliest=False,
                ).reason
        count, asked = self._count_now(live, now)
        predicted = self._prediction(live, count, now, startup_s=live.startup_s)
        speed = speed_source(live, self._policy_of(live))
        why = reasons.admitted(
            promised,
            policy=self.policy_name,
            reason=reason,
            count=count,
            asked=asked,
            kind=worker_kind(spec),
            predicted=predicted,
            deadline_at=live.record.deadline_at,
            now=now,
            speed=speed,
        )
        return {
            "why": why,
            "workers": count,
            **finish_fields(predicted),
            "deadline_at": live.record.deadline_at,
            "speed_source": speed,
        }

    def _count_now(self, live: LiveJob, now: float) -> tuple[int, bool]:
        """How many workers the job would start on now, within its bounds, and whether its
        policy said so: asked of a copy of the policy (nothing changes) while the pool has at
        most ``ASKED_UP_TO`` jobs, else its fastest count on the free workers."""
        gpu = live.spec.gpu
        held = {
            u
            for other in self._live.values()
            if other.spec.gpu == gpu and (other.profiling or holding(other))
            for u in units_of(other)
        }
        room = len(self._pool(gpu)) - len(held)
        if room <= 0:
            return 0, True
        least, most = live.spec.resources.bounds()
        view = self._view(now, gpu, room)
        if len(view.jobs) > ASKED_UP_TO:
            free = room - sum(
                len(units_of(other))
                for other in self._live.values()
                if other.spec.gpu == gpu and not other.profiling and not holding(other)
            )
            counts = range(max(1, least), min(free, most or free) + 1)
            curve = live.policy_job.curve
            rates = [(curve.rate(g), -g) for g in counts if curve.available(g)]
            return (-max(rates)[1] if rates else 0), False
        count = self._policy_of(live).what_if(view).allocate(view).workers.get(live.record.id, 0)
        return (max(least, min(count, most or count)) if count else 0), True

    def _prediction(
        self, live: LiveJob, count: int, now: float, *, startup_s: float = 0.0
    ) -> reasons.Finish | None:
        """When the job finishes on ``count`` workers from ``now`` (``pools.predicted_finish``)."""
        return predicted_finish(self._policy_of(live), live.policy_job, count, now, startup_s)

    def _start_profiling(self, live: LiveJob, now: float) -> None:
        job_id = live.record.id
        live.record = self.store.transition(job_id, Lifecycle.PROFILING, now)
        why = reasons.profiling(
            self.policy_name,
            command=live.spec.workload is None,
            gpu=live.spec.gpu,
            bound_s=MAX_PROFILE_S,
        )
        self.store.add_event(job_id, now, "profiling", {"why": why, "bound_s": MAX_PROFILE_S})
        live.profiling = True
        self._dirty = True

    def dry_run(self, spec_text: str, source: str) -> Verdict:
        now = self.clock()
        spec = parse_job_spec(spec_text, source, now=now, scripts_in=Path.cwd())
        return self.judge_spec(spec, now)

    def judge_spec(self, spec: TrainingJobSpec, now: float | None = None) -> Verdict:
        """What submitting ``spec`` would do now; stores nothing and leaves the policy as it was."""
        with self._lock, self._marking_stale():
            if self._stale:
                self._resync()
            now = self.clock() if now is None else now
            try:
                key = speed_key(spec)
                remembered = self.store.remembered_speeds(key)[0]
                startup = self.store.remembered_startup(key) or 0.0
                job = self._policy_job(
                    DRY_RUN_ID,
                    spec,
                    now,
                    spec.deadline_at(now),
                    remembered,
                    startup,
                    self.store.remembered_spread(key),
                    self.store.remembered_trust(key),
                )
                policy = self.gpu_policy if spec.gpu else self.policy
                if measured_first(policy, spec, bool(remembered)):
                    return Verdict(
                        Verdict.PROFILING,
                        f"its speed on this machine is not known yet: it is measured first "
                        f"(for at most {MAX_PROFILE_S:.0f} s of running, on workers no "
                        f"guarantee needs), then guaranteed, run best effort or declined on "
                        f"what was measured",
                    )
                return judge(
                    self.gpu_policy if spec.gpu else self.policy,
                    job,
                    self._view(now, spec.gpu),
                    best_effort=spec.best_effort,
                    kind=worker_kind(spec),
                    startup_s=startup,
                )
            except Exception as exc:  # what `submit_spec` fails the job for: it would not run
                return Verdict(Admission.DECLINED, f"cannot be scheduled: {_reason(exc)}")

    def jobs(self) -> list[JobView]:
        with self._lock:
            latest = self.store.last_progress()
            return [self._describe(record, latest) for record in self.store.list()]

    def job(self, job_id: str) -> JobView:
        with self._lock:
            return self._describe(self.store.get(job_id))

    def logs(self, job_id: str, tail_lines: int | None = None, limit: int | None = None) -> str:
        with self._lock:
            self.store.get(job_id)  # UnknownJobError for a bad id
        job_dir = self.home / "jobs" / job_id
        if tail_lines is not None:
            return joblog.read_tail(job_dir, tail_lines, limit or joblog.MAX_TAIL_BYTES)
        lines = joblog.read_kept(job_dir).decode(errors="replace").splitlines()
        return "\n".join(lines) + ("\n" if lines else "")

    def cancel(self, job_id: str) -> JobView:
        """SIGTERM the job's runner (SIGKILL after the grace); the job is cancelled, and its
        cores free, once no process of it is left."""
        with self._lock, self._marking_stale():
            if self._stale:  # memory may not know a runner of this job yet
                self._resync()
            record = self.store.get(job_id)
            if record.state in FINAL_STATES:
                raise InputError(f"job {job_id} is already {record.state.value}", field="job")
            live = self._live.get(job_id)
            if live is not None and live.runner is not None and not live.runner.gone():
                if not live.cancelling:
                    # First in the store: a restarted service finishes the cancel.
                    self.store.add_event(job_id, self.clock(), "cancelling", {})
                    live.cancelling = True
                self._stop(live)
            else:
                self._finish(job_id, Lifecycle.CANCELLED)
            self._dirty = True
            return self.job(job_id)

    def metrics(self) -> ServiceMetrics:
        with self._lock:
            records = self.store.list()
            outcomes = {outcome.value: 0 for outcome in Outcome}
            for record in records:
                outcome = Outcome.of(record.state, record.finished_at, record.deadline_at)
                if outcome is not None:
                    outcomes[outcome.value] += 1
            return ServiceMetrics(
                capacity_cpus=len(self.cores),
                queued=sum(
                    r.state in (Lifecycle.QUEUED, Lifecycle.PREEMPTED)
                    or (r.state is Lifecycle.PROFILING and not self._runs(r.id))
                    for r in records
                ),
                running=sum(
                    r.state is Lifecycle.RUNNING
                    or (r.state is Lifecycle.PROFILING and self._runs(r.id))
                    for r in records
                ),
                allocated_cpus={j: len(live.cores) for j, live in self._live.items() if live.cores},
                outcomes=outcomes,
            )

    def _runs(self, job_id: str) -> bool:
        live = self._live.get(job_id)
        return live is not None and live.runner is not None

    # -- one scheduling round ---------------------------------------------------------------------

    def step(self) -> None:
        """One round (see the module docstring). Raises ``StoreUnavailableError`` when the store
        cannot be used; the next call first rebuilds memory from the store."""
        with self._lock, self._marking_stale():
            self._troubled_this_round = False
            if self._stale:
                self._resync()
            for action, doing in (
                (self._enforce_memory_of, "checking its memory use"),
                (self._escalate, "stopping its runner"),
                (self._reap_one, "reaping its runner"),
                (self._read_progress_of, "reading its progress"),
                (self._cap_log_of, "rotating its log"),
            ):
                for live in list(self._live.values()):
                    if live.failing is None or action != self._read_progress_of:
                        self._isolated(live, doing, action)
            now = self.clock()
            for live in list(self._live.values()):
                if live.profiling:
                    self._isolated(live, "measuring its speed", self._measure, now)
            for live in self._live.values():
                self._note_stall(live, now)
            due = now >= self._next_decision or (self._wake_at is not None and now >= self._wake_at)
            if self._dirty or due:
                self._decide(now)
            if not self._troubled_this_round:
                self._trouble = None

    def idle(self) -> bool:
        """No unfinished job left."""
        with self._lock:
            return not self._live

    # -- internals --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _marking_stale(self) -> Any:
        """Store trouble leaves memory possibly ahead of the store: rebuild it next round."""
        try:
            yield
        except StoreUnavailableError:
            self._stale = True
            raise

    def _isolated(self, live: LiveJob, doing: str, action: Callable[..., Any], *args: Any) -> None:
        """``action(live, *args)``; any exception but store trouble fails this job alone."""
        if self._live.get(live.record.id) is not live:
            return  # finished earlier in this round
        try:
            action(live, *args)
        except StoreUnavailableError:
            raise
        except Exception as exc:
            if (trouble := service_trouble(exc)) is not None:
                # Not the job's fault: the same step is tried again next round.
                log.warning(
                    "job %s: %s failed for the service's reason: %s", live.record.id, doing, trouble
                )
                self._note_trouble(f"{doing} of {live.record.id}: {trouble}")
                return
            log.warning("job %s failed while %s", live.record.id, doing, exc_info=True)
            self._fail(live, f"{doing}: {_reason(exc)}")

    def _cap_log_of(self, live: LiveJob) -> None:
        joblog.rotate_if_over(live.job_dir, live.spec.log_limit_bytes)

    def _note_trouble(self, what: str) -> None:
        self._troubled_this_round = True
        since = self._trouble[1] if self._trouble is not None else self.clock()
        self._trouble = (what, since)

    def _fail(self, live: LiveJob, reason: str) -> None:
        """The job failed: recorded at once as ``failing``, and ``failed`` (with ``reason``) once
        no process of its runner is left; its cores stay held until then."""
        job_id = live.record.id
        if live.failing is None:
            live.failing = reason
            self.store.add_event(job_id, self.clock(), "failing", {"why": reason})
        if live.runner is not None and not live.runner.gone():
            self._stop(live)
            return
        try:
            self._record_final(live, Lifecycle.FAILED, error=live.failing)
        except (IllegalTransitionError, UnknownJobError):
            self._forget(job_id)  # it reached a final state before the trouble

    def _record_final(
        self,
        live: LiveJob,
        state: Lifecycle,
        *,
        error: str | None = None,
        result: dict[str, Any] | None = None,
    ) -> None:
        if live.runner is None or live.runner.gone():  # e.g. a launch that failed to start
            self._release_gpus(live, self.clock())
        self._remember_speeds(live)
        self.store.transition(live.record.id, state, self.clock(), error=error, result=result)
        self._forget(live.record.id)

    def _remember_speeds(self, live: LiveJob) -> None:
        """What the job measured, for the next job with its speed key (speed_memory). A
        courtesy to later jobs: nothing here may keep this one from its final state."""
        try:
            samples = self._samples(live.record.id)
            rates = measured_rates(samples)
            if rates and live.speed_key is not None:
                before = self.store.remembered_speeds(live.speed_key)[0]
                self.store.remember_speeds(
                    live.speed_key, rates, live.record.id, self.clock(), measured_trust(samples)
                )
                spread = max(measured_spread(samples) or 0.0, drift_spread(before, rates))
                if spread > 0:
                    self.store.remember_spread(
                        live.speed_key, clamp_spread(spread), live.record.id, self.clock()
                    )
                startup = self._startup_of(live.record.id, samples)
                if startup is not None:
                    self.store.remember_startup(
                        live.speed_key, startup, live.record.id, self.clock()
                    )
        except StoreUnavailableError:
            raise
        except Exception:
            log.warning("job %s: its speeds could not be remembered", live.record.id, exc_info=True)

    def _samples(self, job_id: str) -> list[tuple[float, int, int]]:
        """The job's progress samples as ``(t, iteration, workers)``, as speed_memory reads them."""
        return [(s.t, s.iteration, s.cpus) for s in self.store.progress(job_id)]

    def _startup_of(self, job_id: str, samples: Sequence[tuple[float, int, int]]) -> float | None:
        """The longest start-up the job's runners had (speed_memory.measured_startup_s)."""
        launches = [e.t for e in self.store.events(job_id) if e.kind == "launched"]
        return measured_startup_s(launches, samples)

    def _track(self, record: JobRecord) -> LiveJob:
        spec = record.spec
        if spec is None:
            raise InputError(record.spec_error or "its stored spec does not read", field="spec")
        key = speed_key(spec)
        remembered, measured_by = self.store.remembered_speeds(key)
        startup = self.store.remembered_startup(key) or 0.0
        policy_job = self._policy_job(
            record.id,
            spec,
            record.submitted_at,
            record.deadline_at,
            remembered,
            startup,
            self.store.remembered_spread(key),
            self.store.remembered_trust(key),
        )
        live = LiveJob(record, spec, policy_job, self.home / "jobs" / record.id)
        live.speed_key = key
        live.startup_s = startup
        if remembered and measured_by != record.id:
            live.remembered = (measured_by, remembered)
        self._live[record.id] = live
        return live

    def _policy_job(
        self,
        job_id: str,
        spec: TrainingJobSpec,
        submitted_at: float,
        deadline_at: float,
        remembered: Mapping[int, float],
        startup_s: float = 0.0,
        spread: float | None = None,
        trust: Mapping[int, CountTrust] | None = None,
    ) -> JobState:
        """The job as its pool's policy sees it (``pools.policy_job``)."""
        size = len(self._pool(spec.gpu))
        return policy_job(
            job_id, spec, size, submitted_at, deadline_at, remembered, startup_s, spread, trust
        )

    def _pool(self, gpu: bool) -> tuple[int, ...]:
        """The workers of one pool: the GPUs, or the cores."""
        return self.gpus if gpu else self.cores

    def _policy_of(self, live: LiveJob) -> Policy:
        return self.gpu_policy if live.spec.gpu else self.policy

    def _view(self, now: float, gpu: bool = False, count: int | None = None) -> ClusterView:
        """The jobs of one pool the policy decides for, on ``count`` workers (default: the
        whole pool). A job that holds workers it cannot give back yet (it has done all its
        iterations and is writing its result, or its runner is stopping) is not among them."""
        jobs = [
            live.policy_job
            for live in self._live.values()
            if live.spec.gpu == gpu and not live.profiling and not holding(live)
        ]
        if count is None:
            return pool_view(now, jobs, gpu, len(self._pool(gpu)), self.cluster)
        return pool_view(now, jobs, gpu, count)

    def _decide(self, now: float) -> None:
        periodic = not self._dirty  # nothing happened: the tick or a wake-up asked for it
        self._dirty = False
        self._next_decision = now + self.tick_s
        wakes = [self._decide_pool(now, gpu=False, periodic=periodic)]
        if self.gpus:
            wakes.append(self._decide_pool(now, gpu=True, periodic=periodic))
        known = [wake for wake in wakes if wake is not None]
        self._wake_at = min(known) if known else None

    def _decide_pool(self, now: float, *, gpu: bool, periodic: bool = False) -> float | None:
        """One pool's round (cores among CPU jobs, or GPUs among GPU jobs); returns when its
        policy wants to be asked again. ``periodic``: nothing but the clock asked for it."""
        pool = [live for live in self._live.values() if live.spec.gpu == gpu]
        members = [live for live in pool if not live.profiling]
        measuring = [live for live in pool if live.profiling]
        free = self._free_units(members, measuring, gpu)
        if not free:
            return None  # every worker is held by a job finishing, stopping or measured
        waiting = [
            live
            for live in measuring
            if live.runner is None and not units_of(live) and live.declining is None
        ]
        lent = self._lend_for_measuring(waiting, len(free), now, gpu=gpu)
        room = len(free) - sum(lent.values())
        assignment: dict[str, tuple[int, ...]] = {}
        wake = None
        if room > 0:
            assignment, wake = self._allocate_room(now, room, members, free, gpu, periodic)
        changed = changes(members, assignment)
        self._give_up_units(changed, now)
        self._hand_on_units(changed, members, now)
        self._launch_measuring(lent, free, pool, now)
        return wake

    def _free_units(self, members: list[LiveJob], measuring: list[LiveJob], gpu: bool) -> list[int]:
        """The pool's units that no member holding its workers and no job measured holds."""
        held = {u for live in members if holding(live) for u in units_of(live)}
        held.update(u for live in measuring for u in units_of(live))
        return [u for u in self._pool(gpu) if u not in held]

    def _allocate_room(
        self,
        now: float,
        room: int,
        members: list[LiveJob],
        free: list[int],
        gpu: bool,
        periodic: bool,
    ) -> tuple[dict[str, tuple[int, ...]], float | None]:
        """The pool's policy decides on ``room`` workers: its promises are recorded, its
        counts assigned to ``free`` units and explained; returns the assignment and when the
        policy wants to be asked again."""
        policy = self.gpu_policy if gpu else self.policy
        view = self._view(now, gpu, room)
        decision = policy.allocate(view)
        self._keep_promises(view, policy, now)
        assignment = assign_units(decision.workers, self._live, members, free, gpu)
        happened = self._happened(view, gpu, periodic)
        explain(members, assignment, decision.reasons, happened)
        return assignment, decision.wake_at

    def _keep_promises(self, view: ClusterView, policy: Policy, now: float) -> None:
        """Record each promise the decision changed (a guarantee given to a job that had none,
        or one no plan keeps any more) as a ``promise`` event, which sets it on the job's row
        in the same commit: the row and the log never disagree."""
        for job in view.jobs:
            live = self._live.get(job.job_id)
            guaranteed = policy.is_guaranteed(job.job_id)
            if live is None or guaranteed == live.record.guaranteed:
                continue
            promised = reasons.promise(guaranteed, live.spec.best_effort)
            predicted = self._prediction(live, len(units_of(live)), now)
            why = reasons.promise_changed(
                promised,
                policy=self.policy_name,
                predicted=predicted,
                deadline_at=live.record.deadline_at,
                now=now,
            )
            self.store.add_event(
                job.job_id,
                now,
                "promise",
                {"promise": promised, "why": why, **finish_fields(predicted)},
                guaranteed=guaranteed,
            )
            live.record = dataclasses.replace(live.record, guaranteed=guaranteed)

    def _happened(self, view: ClusterView, gpu: bool, periodic: bool) -> str:
        """What changed in the pool since its policy's last decision, in words."""
        ids = frozenset(job.job_id for job in view.jobs)
        before = self._seen.get(gpu)
        self._seen[gpu] = ids
        if before is None:
            return ""  # the first decision since the service started: nothing to compare
        return reasons.context(sorted(ids - before), sorted(before - ids), periodic)

    def _lend_for_measuring(
        self, waiting: list[LiveJob], free: int, now: float, *, gpu: bool
    ) -> dict[str, int]:
        """How many of the ``free`` workers each waiting profiling job is lent now
        (``rounds.lend_for_measuring``)."""
        # Each job running now keeps a worker where it can: a measurement shrinks others
        # rather than stopping them.
        running = sum(
            1
            for other in self._live.values()
            if other.spec.gpu == gpu and not other.profiling and units_of(other)
        )
        return lend_for_measuring(
            self.gpu_policy if gpu else self.policy,
            waiting,
            free,
            running,
            lambda room: self._view(now, gpu, room),
            now,
            resize_pause_s=GPU_RESIZE_PAUSE_S if gpu else RESIZE_PAUSE_S,
        )

    def _launch_measuring(
        self, lent: Mapping[str, int], free: list[int], pool: list[LiveJob], now: float
    ) -> None:
        """Start each profiling job lent workers on ones nobody holds after this round's
        changes; one whose workers are still held (a runner stopping) waits a round."""
        for job_id, count in lent.items():
            live = self._live.get(job_id)
            if live is None:
                continue
            taken = {u for other in pool for u in units_of(other)}
            units = tuple(u for u in free if u not in taken)[:count]
            if len(units) < count:
                self._dirty = True
                continue
            self._begin_measuring(live, count, now)
            self._isolated(live, "launching it to measure its speed", self._launch, units, now)

    @staticmethod
    def _begin_measuring(live: LiveJob, count: int, now: float) -> None:
        """The job is measured from ``now``, starting on ``count`` workers."""
        live.profile_sizes = sizes_to_measure(
            count,
            least=live.spec.resources.bounds()[0],
            resized_in_place=not live.spec.restarts_on_resize,
        )
        live.profile_started = now

    def _measure(self, live: LiveJob, now: float) -> None:
        """One profiling job's round: measure on, shrink to its next size, or judge it."""
        if live.runner is None or live.stopping or live.declining is not None:
            return
        held = len(units_of(live))
        if live.profile_started is None:  # adopted after a restart: measured from now on
            self._begin_measuring(live, held, now)
        samples = self._samples(live.record.id)
        step = next_step(live.profile_sizes, size_speeds(samples), held, now - live.profile_started)
        if step.resize_to is not None and step.resize_to < held:
            live.change_why = reasons.measuring(
                step.resize_to, worker_kind(live.spec), live.profile_sizes
            )
            self._resize(live, live.cores[: step.resize_to], now)
            self._dirty = True  # the workers it gave back go to others
        elif step.judge or step.resize_to is not None:
            self._conclude_profiling(live, samples, now)

    def _conclude_profiling(
        self, live: LiveJob, samples: Sequence[tuple[float, int, int]], now: float
    ) -> None:
        """Judge a profiling job on the speeds its ``samples`` measured (none: it reported no
        usable progress), as an arriving job is judged: it runs (guaranteed or best effort)
        on, or is declined once its runner is gone."""
        job_id, spec = live.record.id, live.spec
        policy = self._policy_of(live)
        others = sum(
            len(units_of(other))
            for other in self._live.values()
            if other.profiling and other is not live and other.spec.gpu == spec.gpu
        )
        view = self._view(now, spec.gpu, len(self._pool(spec.gpu)) - others)
        job = live.policy_job
        rates = measured_rates(samples)
        startup = self._startup_of(job_id, samples)
        if startup is not None and startup > live.startup_s:
            # A restart costs what its first start did: planned that much earlier.
            live.startup_s = startup
            job.spec = dataclasses.replace(job.spec, deadline_s=live.record.deadline_at - startup)
        if rates:
            prior = prior_curve(spec, len(self._pool(spec.gpu)))
            job.curve = remembered_curve(
                prior, rates, measured_spread(samples), measured_trust(samples)
            )
            live.profiled = True
            admission = admit_job(policy, job, view, best_effort=spec.best_effort)
        elif spec.best_effort:
            # No speed to promise on: it runs as a job without a deadline would.
            job.spec = dataclasses.replace(job.spec, deadline_s=None)
            admission = admit_job(policy, job, view, best_effort=True)
        else:
            admission = Admission.DECLINED
        measured = {str(w): r for w, r in rates.items()}
        if admission is Admission.DECLINED:
            if rates:
                verdict = self._declined_verdict(live, view, admission)
            else:
                verdict = Verdict(
                    Admission.DECLINED,
                    f"its speed could not be measured: it reported no usable progress in "
                    f"{MAX_PROFILE_S:.0f} s of running (see qosched.job.report)",
                )
            live.declining = verdict.message()
            self.store.add_event(
                job_id,
                now,
                "declining",
                {**verdict_note(verdict), "measured": measured},
                guaranteed=False,
            )
            self._stop(live)
            return
        guaranteed = admission is Admission.GUARANTEED
        live.profiling = False
        live.record = self.store.transition(
            job_id, Lifecycle.RUNNING, now, allocation=live.cores, guaranteed=guaranteed
        )
        self._record_admission(live, admission, now, {"measured": measured})
        self._dirty = True

    def _declined_verdict(self, live: LiveJob, view: ClusterView, admission: Admission) -> Verdict:
        """Why the policy declined the job, and the earliest deadline it would guarantee."""
        try:
            return judge(
                self._policy_of(live),
                live.policy_job,
                view,
                best_effort=live.spec.best_effort,
                admission=admission,
                kind=worker_kind(live.spec),
                startup_s=live.startup_s,
            )
        except Exception:  # the reason is a courtesy: the decline stands without it
            log.exception("job %s: cannot say why it was declined", live.record.id)
            return Verdict(Admission.DECLINED)

    def _give_up_units(self, changed: list[Change], now: float) -> None:
        """Pre-emptions and shrinks, before any unit is handed on."""
        for change in changed:
            if change.giving_up and not change.units:
                self._isolated(change.live, "pre-empting it", self._preempt)
            elif change.giving_up:
                self._isolated(change.live, "re-sizing it", self._resize, change.units, now)

    def _hand_on_units(
        self,
        changed: list[Change],
        members: list[LiveJob],
        now: float,
    ) -> None:
        """Launches and growths, onto units no other job still holds."""
        for change in changed:
            live, units = change.live, change.units
            if change.giving_up or self._live.get(live.record.id) is not live:
                continue
            others = {u for other in members if other is not live for u in units_of(other)}
            if others.intersection(units):
                continue  # its holder is still stopping; the next round, once it is gone
            if live.runner is not None:
                self._isolated(live, "re-sizing it", self._resize, units, now)
            else:
                self._isolated(live, "launching it", self._launch, units, now)

    def _release_gpus(self, live: LiveJob, now: float) -> None:
        """Its runner is gone (or never started): its GPUs may go to another job."""
        if live.gpus:
            self.store.add_event(live.record.id, now, "gpus", {"released": list(live.gpus)})
            live.gpus = ()

    def _launch(self, live: LiveJob, units: tuple[int, ...], now: float) -> None:
        """Intent (committed), runner, launch (committed): a service killed in between finds
        the runner by its job folder at the next start."""
        job_id = live.record.id
        # Never two runners for one job: one may run from a launch whose record was lost.
        group = self._group_of(job_id)
        for pid in find_runners().get(str(live.job_dir), []):
            runner = RunnerProcess.adopt(pid, live.job_dir, group=group)
            if runner is not None:
                self._take_over(live, runner, now, self.store.get(job_id).attempts)
                return
        live.job_dir.mkdir(parents=True, exist_ok=True)
        spec = live.spec
        write_runner_job(live.job_dir / JOB_FILE, runner_job(job_id, spec))
        # A GPU job runs on the service's cores without holding them (see the module docstring).
        cores, gpus = (self.cores, units) if spec.gpu else (units, ())
        live.version += 1
        write_allocation(live.job_dir / ALLOCATION_FILE, Allocation(cores, live.version, gpus))
        if gpus:  # held from before the process exists until after it is gone
            live.gpus = gpus
            self.store.add_event(job_id, now, "gpus", {"held": list(gpus)})
        held_cores = () if spec.gpu else cores
        attempt = self.store.record_launch_intent(job_id, now, str(live.job_dir), held_cores)
        self._faults.passed("intent")
        env = runner_environment(os.environ, gpus)
        group = self._prepare_group(live, cores)
        with (live.job_dir / RUNNER_LOG).open("ab") as runner_log:
            runner = RunnerProcess.start(
                self.python, live.job_dir, log=runner_log, env=env, group=group
            )
        live.runner = runner
        live.cores = held_cores
        live.stopping, live.term_at, live.killed = False, None, False
        self._faults.passed("popen")
        # The promise is not set here: `_keep_promises` sets it with an event saying why.
        live.record = self.store.record_launched(
            job_id,
            now,
            cpus=held_cores,
            pid=runner.pid,
            start_ticks=runner.start_ticks,
            attempt=attempt,
            note=self._start_note(live, len(units), attempt, now),
        )
        self._faults.passed("launched")
        live.policy_job.phase = Phase.RUNNING
        live.policy_job.workers = len(units)
        if live.policy_job.started_s is None:
            live.policy_job.started_s = now
        live.policy_job.reallocations += live.policy_job.started_s != now

    def _start_note(self, live: LiveJob, count: int, attempt: int, now: float) -> dict[str, Any]:
        """Why the job's runner starts on ``count`` workers, with its predicted finish there."""
        predicted = self._prediction(live, count, now, startup_s=live.startup_s)
        return start_note(live, count, attempt, now, predicted)

    def _group_of(self, job_id: str) -> JobGroup | None:
        return None if self.groups is None else self.groups.of(job_id)

    def _prepare_group(self, live: LiveJob, cores: tuple[int, ...]) -> JobGroup | None:
        """The job's cgroup, made (or emptied of what an earlier runner left) and limited to
        its cores and memory, for a runner about to start; None where there is none."""
        group = self._group_of(live.record.id)
        if group is None:
            return None
        try:
            end_leftovers(group)
            group.create()
        except OSError as exc:  # the job runs held by its runner alone
            log.warning("job %s gets no cgroup: %s", live.record.id, exc)
            return None
        group.limit(cpus=cores, memory_bytes=live.spec.resources.memory_bytes)
        return group

    def _take_over(self, live: LiveJob, runner: RunnerProcess, now: float, attempt: int) -> None:
        """Adopt a live runner of this job: it holds the cores its ``allocation.json`` gives."""
        live.runner = runner
        allocation = read_allocation(live.job_dir / ALLOCATION_FILE)
        live.cores = () if live.spec.gpu else tuple(sorted(allocation.cpus))
        live.gpus = tuple(sorted(allocation.gpus)) if live.spec.gpu else ()
        live.version = allocation.version
        record = self.store.get(live.record.id)
        if record.state in HOLDING_STATES and tuple(record.allocation) != live.cores:
            self.store.set_allocation(record.id, live.cores, now)
        live.record = self.store.record_launched(
            record.id,
            now,
            cpus=live.cores,
            pid=runner.pid,
            start_ticks=runner.start_ticks,
            attempt=attempt,
            kind="re-adopted",
        )
        self._faults.passed("adopted")
        live.policy_job.workers = len(units_of(live))
        live.policy_job.phase = Phase.RUNNING
        live.policy_job.started_s = live.record.started_at

    def _resize(self, live: LiveJob, cores: tuple[int, ...], now: float) -> None:
        note = self._resize_note(live, len(live.cores), len(cores), now)
        if live.runner is not None and live.runner.group is not None:
            # Before the runner hears of them: its new affinity must lie inside the group's.
            live.runner.group.limit(cpus=cores, memory_bytes=None)
        live.version += 1
        write_allocation(live.job_dir / ALLOCATION_FILE, Allocation(cores, live.version))
        live.cores = cores
        live.policy_job.workers = len(cores)
        live.policy_job.reallocations += 1
        live.last_sample = None  # an interval of progress must not span two allocations
        self.store.set_allocation(live.record.id, cores, now, note=note)
        self._faults.passed("resize")

    def _resize_note(self, live: LiveJob, old: int, new: int, now: float) -> dict[str, Any]:
        """Why the job goes from ``old`` to ``new`` workers, with its predicted finish on each."""
        before, after = self._prediction(live, old, now), self._prediction(live, new, now)
        return resize_note(live, old, new, now, before, after)

    def _preempt(self, live: LiveJob) -> None:
        if live.runner is not None:
            why, live.change_why = live.change_why, None
            count = len(units_of(live))
            restart_to = live.change_to if live.spec.restarts_on_resize else None
            live.stop_why = reasons.preempted(
                count,
                worker_kind(live.spec),
                why or reasons.cause(None, count, 0, ""),
                restart_to=restart_to,
            )
            self._stop(live)
        else:
            live.cores = ()
            self._release_gpus(live, self.clock())

    def _stop(self, live: LiveJob) -> None:
        """SIGTERM the runner once (it checkpoints and exits); ``_escalate`` SIGKILLs its group
        after the grace. Its cores stay held until it is gone."""
        live.stopping = True
        if live.term_at is None and live.runner is not None:
            live.runner.send(signal.SIGTERM)
            live.term_at = time.monotonic()
            self._faults.passed("signal")

    def _escalate(self, live: LiveJob) -> None:
        runner = live.runner
        if runner is None or live.term_at is None or live.killed:
            return
        if time.monotonic() - live.term_at < self.grace_s or runner.gone():
            return
        runner.kill_group(signal.SIGKILL)
        live.killed = True
        self.store.add_event(
            live.record.id,
            self.clock(),
            "killed",
            {"pid": runner.pid, "why": f"still running {self.grace_s:g} s after SIGTERM"},
        )

    def _runners_gone(self) -> bool:
        return all(live.runner is None or live.runner.gone() for live in self._live.values())

    def _reap(self) -> None:
        for live in list(self._live.values()):
            self._isolated(live, "reaping its runner", self._reap_one)

    def _reap_one(self, live: LiveJob) -> None:
        """Act on a runner that exited since the last round."""
        runner = live.runner
        if runner is None or runner.running():
            return
        if not runner.gone():
            # The runner exited but processes of its group live on (a command's children),
            # still on the job's cores: they go first.
            runner.kill_group(signal.SIGKILL)
            return
        code = runner.exit_code()
        runner.close()
        if runner.group is not None:
            limit = live.spec.resources.memory_bytes
            if limit is not None and live.over_memory is None and runner.group.oom_kills():
                # The kernel held the group to the limit before a round saw it exceeded.
                live.over_memory = (
                    f"exceeded its memory limit of {limit / 2**20:.0f} MiB (killed by the kernel)"
                )
            runner.group.remove()
        live.runner = None
        self._dirty = True
        now = self.clock()
        self._release_gpus(live, now)
        if live.failing is not None:
            self._record_final(live, Lifecycle.FAILED, error=live.failing)
            self._faults.passed("reaped")
            return
        self._read_progress_of(live)
        if (live.job_dir / RESULT_FILE).exists():  # it completed, whatever else was asked
            result = read_result(live.job_dir / RESULT_FILE)
            self._record_final(live, Lifecycle.SUCCEEDED, result=result.to_json())
            self._faults.passed("result")
            return
        end = ending(live, code, self.grace_s, lambda: self.store.get(live.record.id).attempts)
        if end.state is None:
            self._mark_preempted(live, now, end.why)
        else:
            self._record_final(live, end.state, error=end.error)
        self._faults.passed("reaped")

    def _enforce_memory_of(self, live: LiveJob) -> None:
        """Kill a job whose processes use more resident memory than its spec allows (what a
        cgroup limit would do, without needing one): the runner's whole process group, since a
        command job's own children count too."""
        limit = live.spec.resources.memory_bytes
        runner = live.runner
        if limit is None or runner is None or live.over_memory is not None:
            return
        used = resident_bytes(runner.pid)
        if used > limit and runner.running():  # still ours: the pid was not reused meanwhile
            live.over_memory = (
                f"exceeded its memory limit of {limit / 2**20:.0f} MiB "
                f"(resident {used / 2**20:.0f} MiB)"
            )
            runner.kill_group(signal.SIGKILL)
            live.stopping, live.killed = True, True

    def _mark_preempted(self, live: LiveJob, now: float, why: str) -> None:
        """Its runner is gone and the job may run again: pre-empted, or, while it is being
        measured, still profiling (holding nothing; measured anew once lent workers again)."""
        if live.profiling:
            if self.store.get(live.record.id).allocation:
                self.store.set_allocation(live.record.id, (), now)
            live.profile_started = None
        else:
            live.record = self.store.transition(live.record.id, Lifecycle.PREEMPTED, now)
        self.store.add_event(live.record.id, now, "stopped", {"why": why})
        self._release_gpus(live, now)
        live.cores, live.stopping, live.term_at, live.killed = (), False, None, False
        live.stop_why = None
        live.policy_job.workers = 0
        live.policy_job.phase = Phase.PENDING
        live.last_sample = None

    def _finish(self, job_id: str, state: Lifecycle) -> None:
        self.store.transition(job_id, state, self.clock())
        self._forget(job_id)

    def _forget(self, job_id: str) -> None:
        live = self._live.pop(job_id, None)
        if live is not None:
            live.policy_job.phase = Phase.FINISHED
            if live.runner is not None:
                live.runner.close()

    def _read_progress_of(self, live: LiveJob) -> list[ProgressEvent]:
        """Take in the runner's new events (``intake.take_in``) and store what they say; an
        unreadable line or a number out of bounds is an ``InputError`` naming the line (the
        caller fails the job)."""
        if live.progress is None:
            live.progress = ProgressFollower(live.job_dir / PROGRESS_FILE)
        events = live.progress.read()
        writes = take_in(live, events)
        for write in writes:
            if isinstance(write, Sample):
                self.store.add_progress(live.record.id, write.t, write.iteration, write.workers)
            else:
                self.store.add_event(
                    live.record.id, write.t, RUNNER_WARNING, {"message": write.message}
                )
        if writes:
            self._faults.passed("progress")
        return events

    def _new_policies(self) -> tuple[Policy, Policy]:
        """Fresh instances of the service's policy: one decides the cores among CPU jobs, the
        other the GPUs among GPU jobs."""
        name, options = self.policy_name, POLICY_OPTIONS.get(self.policy_name, {})
        return create_policy(name, **options), create_policy(name, **options)

    def _resync(self) -> None:
        """After store trouble: forget memory and rebuild it from the store, as a restart
        would (live runners are found again by their job folders)."""
        # Our own children, to be reaped and their exit codes known once adopted again; kept
        # across attempts, since a resync may itself meet store trouble half-way.
        popens = self._popens
        for live in self._live.values():
            if live.runner is not None:
                if live.runner.popen is not None:
                    popens[live.runner.pid] = live.runner.popen
                live.runner.close()
        self._live.clear()
        self.policy, self.gpu_policy = self._new_policies()
        self._recover(popens)
        popens.clear()
        self._stale = False

    def _recover(self, popens: dict[int, subprocess.Popen] | None = None) -> None:
        """Rebuild memory from the store: adopt live runners, queue the rest again, and fail
        each job that cannot be tracked (with the reason) instead of refusing to start."""
        now = self.clock()
        runners = find_runners()
        for pid in popens or {}:  # ours, maybe started a moment ago: wait out an exec
            folder = runner_folder(pid, wait_for_exec=True)
            if folder is not None and pid not in runners.get(folder, []):
                runners.setdefault(folder, []).append(pid)
        for job_id in self.store.unfinished_ids():
            try:
                self._recover_one(job_id, now, runners, popens or {})
            except StoreUnavailableError:
                raise
            except Exception as exc:
                log.warning("job %s cannot be tracked", job_id, exc_info=True)
                self._untrackable(job_id, f"cannot be tracked: {_reason(exc)}", runners)
        self._dirty = True

    def _untrackable(self, job_id: str, reason: str, runners: dict[str, list[int]]) -> None:
        live = self._live.get(job_id)
        if live is not None:
            self._fail(live, reason)
            return
        # Never tracked, so never given cores: a runner of it must not run on them.
        job_dir = self.home / "jobs" / job_id
        for pid in runners.get(str(job_dir), []):
            runner = RunnerProcess.adopt(pid, job_dir, group=self._group_of(job_id))
            if runner is not None:
                kill_and_wait(runner)  # gone before its GPUs are released in the log below
                runner.close()
        end_leftovers(self._group_of(job_id))
        with contextlib.suppress(IllegalTransitionError, UnknownJobError):
            held = gpus_in_log(self.store.events(job_id))
            if held:
                self.store.add_event(job_id, self.clock(), "gpus", {"released": list(held)})
            self.store.record_failure(job_id, reason, self.clock())

    def _recover_one(
        self,
        job_id: str,
        now: float,
        runners: dict[str, list[int]],
        popens: dict[int, subprocess.Popen],
    ) -> None:
        record = self.store.get(job_id)
        live = self._track(record)
        if record.state is Lifecycle.PROFILING:
            live.profiling = True  # not its policy's yet: measured (again), then judged
        else:  # accepted before: the policy re-learns it
            self._policy_of(live).admit(live.policy_job, self._view(now, live.spec.gpu))
        intent_attempt, launched = replay(
            live, record.attempts, self.store.events(job_id), self.store.progress(job_id)
        )
        found = [
            runner
            for pid in runners.get(str(live.job_dir), [])
            if (
                runner := RunnerProcess.adopt(
                    pid, live.job_dir, popen=popens.get(pid), group=self._group_of(job_id)
                )
            )
        ]
        found = runners_in_order(found, launched)
        for extra in found[1:]:  # never two runners for one job: keep one
            extra.group = None  # the job's group holds the one kept too
            extra.kill_group(signal.SIGKILL)
            self.store.add_event(job_id, now, "killed", {"pid": extra.pid, "why": "a 2nd runner"})
            extra.close()
        if found:
            self._take_over(live, found[0], now, intent_attempt)
            self._read_progress_of(live)
            if live.cancelling or live.failing is not None or live.declining is not None:
                self._stop(live)
            return
        self._settle_without_runner(live, record, now)

    def _settle_without_runner(self, live: LiveJob, record: JobRecord, now: float) -> None:
        """Recovery of a job no runner of which is left: recorded as what its log and folder
        say it came to (failed, done, cancelled, declined), or pre-empted if it was running."""
        job_id = record.id
        self._read_progress_of(live)
        end_leftovers(self._group_of(job_id))  # what a runner killed meanwhile left
        self._release_gpus(live, now)  # no runner of it is left
        if live.failing is not None:
            self._record_final(live, Lifecycle.FAILED, error=live.failing)
        elif (live.job_dir / RESULT_FILE).exists():  # it completed while the service was down
            result = read_result(live.job_dir / RESULT_FILE)
            if record.state not in HOLDING_STATES:
                # The service died between starting its runner and recording the launch: record
                # that it ran (holding nothing now), then that it is done.
                self.store.transition(job_id, Lifecycle.RUNNING, now, allocation=())
            self._record_final(live, Lifecycle.SUCCEEDED, result=result.to_json())
        elif live.cancelling:
            self._record_final(live, Lifecycle.CANCELLED)
        elif live.declining is not None:
            self._record_final(live, Lifecycle.DECLINED, error=live.declining)
        elif record.state is Lifecycle.RUNNING or (
            record.state is Lifecycle.PROFILING and record.allocation
        ):
            self._mark_preempted(live, now, "the runner did not survive a service restart")

    def _describe(
        self, record: JobRecord, latest: Mapping[str, ProgressSample] | None = None
    ) -> JobView:
        """``latest``: every job's latest progress sample, when the caller read them all at
        once (``jobs``); None: this job's is read here."""
        live = self._live.get(record.id)
        last = None
        if live is None:
            if latest is None:
                samples = self.store.progress(record.id)
                last = samples[-1] if samples else None
            else:
                last = latest.get(record.id)
        policy = None if live is None else self._policy_of(live)
        return describe(record, live, policy, last, self.clock)

    def _note_stall(self, live: LiveJob, now: float) -> None:
        """An event, once, when a running job has reported no progress for ``STALL_MIN_S`` and
        for ten of its predicted iterations."""
        if live.stalled or live.progressed_at is None or live.runner is None or live.stopping:
            return
        quiet = now - live.progressed_at
        if quiet < STALL_MIN_S:
            return
        model = self._policy_of(live).predictor_of(live.policy_job.job_id)
        workers = len(units_of(live))
        if model is not None and workers and quiet < 10.0 / model.predict(workers).rate:
            return
        live.stalled = True
        self.store.add_event(
            live.record.id,
            now,
            STALLED,
            {"seconds": round(quiet), "iteration": int(live.policy_job.iterations_done)},
        )

    # -- the API's newer views (see qosched.backends.local.api.Service) --------------------------

    def status(self) -> ServiceStatus:
        with self._lock:
            metrics = self.metrics()
            holding = {j: live for j, live in self._live.items() if live.cores or live.gpus}
            return ServiceStatus(
                policy=self.policy_name,
                cpus=self.cores,
                gpus=self.gpus,
                queued=metrics.queued,
                running=metrics.running,
                allocated={j: live.cores for j, live in holding.items()},
                allocated_gpus={j: live.gpus for j, live in holding.items()},
                outcomes=metrics.outcomes,
                trouble=None if self._trouble is None else self._trouble[0],
                trouble_since=None if self._trouble is None else self._trouble[1],
            )

    def job_detail(self, job_id: str) -> JobDetail:
        with self._lock:
            return detail.job_detail(self.job(job_id), self.store.events(job_id))

    def read_log(self, job_id: str, offset: int, limit: int) -> LogChunk:
        with self._lock:
            state = self.store.get(job_id).state  # before the bytes: see read_log_chunk
        return detail.read_log_chunk(self.home / "jobs" / job_id, offset, limit, state=state)

    # -- the web page's views (see qosched.backends.local.api.DashboardService) -----------------

    def timeline(self, window_s: float | None = None) -> dict[str, Any]:
        with self._lock:
            return views.timeline(
                self.store.list(),  # the records' ids, names and states: nothing to describe
                self.store.events(),
                now=self.clock(),
                cpus=self.cores,
                window_s=window_s,
            )

    def job_speed(self, job_id: str) -> dict[str, Any]:
        with self._lock:
            samples = self.store.progress(job_id)  # UnknownJobError for a bad id
            events = self.store.events(job_id)
            live = self._live.get(job_id)
            policy = self._policy_of(live) if live is not None else self.policy
            model = policy.predictor_of(job_id)
            predicted: dict[int, tuple[float, float, float]] = {}
            if model is not None:
                workers = len(self._pool(live.spec.gpu)) if live is not None else len(self.cores)
                for cpus in range(1, workers + 1):
                    guess = model.predict(cpus)
                    predicted[cpus] = (guess.rate, guess.rate_low, guess.rate_high)
        return views.job_speed(job_id, samples, events, predicted)

    def usage(self) -> dict[str, Any]:
        now, held = self._cpu_use()
        jobs = {job_id: {"cpus": cores, "cpu_s": cpu} for job_id, (cores, cpu) in held.items()}
        return {"t": now, "cpus": len(self.cores), "jobs": jobs}

    def _cpu_use(self) -> tuple[float, dict[str, tuple[int, float]]]:
        """Now, and per job holding cores: how many, and the CPU seconds its processes used
        (read from /proc outside the lock: the scheduling round does not wait on it)."""
        with self._lock:
            held = {
                job_id: (len(live.cores), live.runner.pid if live.runner is not None else None)
                for job_id, live in self._live.items()
                if live.cores
            }
            now = self.clock()
        return now, {
            job_id: (cores, views.cpu_seconds(pid) if pid else 0.0)
            for job_id, (cores, pid) in held.items()
        }

    def record_use(self) -> None:
        """Keep a sample of machine use in the store when one is due (every
        ``machine_use.SAMPLE_S``); called by ``run`` after each round."""
        with self._lock:
            if not self._use.due(self.clock()):
                return
        now, held = self._cpu_use()
        self.store.add_machine_use(self._use.sample(now, held), keep_s=KEEP_S, most=MAX_SAMPLES)

    def usage_history(self, window_s: float) -> dict[str, Any]:
        """``GET /usage/history``: the samples of the last ``window_s`` seconds, at most
        ``MAX_POINTS`` of them (``machine_use.thin``)."""
        with self._lock:
            now = self.clock()
        points = thin(self.store.machine_use(now - window_s), now - window_s, now, MAX_POINTS)
        return {
            "now": now,
            "cpus": len(self.cores),
            "every_s": self._use.every_s,
            "points": [point.to_json() for point in points],
        }


def service_trouble(exc: BaseException) -> str | None:
    """What of ``exc`` (or an error it was raised from) is the service's trouble rather than a
    job's: an ``OSError`` whose errno is in ``files.MACHINE_ERRNOS``, as text; else None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in MACHINE_ERRNOS:
            return f"{current.strerror or current} ({errno.errorcode[current.errno]})"
        current = current.__cause__ or current.__context__
    return None


def _reason(exc: BaseException) -> str:
    """An error as a job's recorded reason: an ``InputError``'s message names what was wrong;
    anything else also says what kind of error it was."""
    if isinstance(exc, InputError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def wait_until_idle(service: LocalService, timeout_s: float, poll_s: float = 0.5) -> bool:
    """Step ``service`` until no job is left or ``timeout_s`` passes; True when idle."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        service.step()
        if service.idle():
            return True
        time.sleep(poll_s)
    return False


__all__ = ["LocalService", "UnknownJobError", "assign_cores", "fit_counts", "wait_until_idle"]
