"""The qosched scheduler on Kubernetes: API state in, the policy's Decision out as API calls.

:meth:`K8sScheduler.step` is one round, called every ``tick_s`` by :meth:`run`:

1. lead or do nothing: the Lease is renewed by its own timer thread (:mod:`.lease`), and every
   write this class sends passes the Lease's fence first; a round that loses the Lease is
   abandoned at its next write. A new term lists every resource afresh;
2. take a snapshot of the caches of nodes, pods and job StatefulSets, which informers
   (:mod:`.informer`) keep up to date in their own threads (:mod:`.reader`: the round's
   :class:`~.api_view.ApiView`); a round never waits on the API to read, so it lasts as long
   as its decisions and writes;
3. read every job (:mod:`.jobs`, :mod:`.reader`) and its pods' progress into the policy's
   ``JobState``\\ s; finished jobs are marked ``succeeded`` and scaled to zero; the jobs new
   since the last round are admitted or declined by the policy in one call
   (``Policy.admit_arrivals``), and a declined job's answer is written on its StatefulSet;
4. ask the policy for worker counts on a ``ClusterSpec`` derived from the nodes' room;
5. apply them: GPU jobs change ``spec.replicas`` (elastic replicas; the training pods restart
   from their checkpoint; a new job's admission goes in the same patch), CPU jobs are
   re-sized in place through the pod ``resize`` subresource, or, where the cluster lacks it,
   the node has no room or the kubelet marks the re-size ``Infeasible``, by restarting the pod
   at its new size from its checkpoint; a job that loses its workers is scaled to zero
   (:mod:`.apply`);
6. bind pending pods (:mod:`.binding`), a whole job's pods together or none (Binding API,
   with the pod's ``uid``), placed job by job in the decision's order.

A round's independent writes (admissions and replicas of GPU jobs, bindings, ``Scheduled``
Events) are sent ``in_flight`` at a time (:mod:`.send`), each through the fence, and acted on
in the round's order.

One job's failure (an annotation out of bounds, anything raised while handling it) skips that
job for the round and is reported on it (:mod:`.events`); the other jobs go on. A node whose
``allocatable`` cannot be read or lies out of bounds is left out of the cluster (logged once,
counted in a metric); the other nodes go on. Anything else a round raises ends that round only:
it is logged and counted, and the next round starts as usual. Each round is recorded in
:mod:`.observe`'s metrics and heartbeat.

Every write to an existing object carries what it was decided on, for the API server to check:
the ``resourceVersion`` of a StatefulSet patch, a re-size or a pod condition; the ``uid`` (and,
but for a gang released in the round that bound it, the ``resourceVersion``) of a delete; the
``uid`` of a binding. A 409 (:class:`~.kube.Stale`) is never answered by sending the write again:
the job is left for the round and decided again from fresh state in the next. So a write that
arrives late, from a leader stalled after its fence check, cannot overwrite its successor's.
An admission is trusted only with the scheduler's seal (:mod:`.seal`).

Nothing lives only in memory: everything a round needs is read from the API, and what the
scheduler decides is written there (annotations, replicas, bindings) before the next round.
A restarted or newly elected replica rebuilds it all; only the policy's learned speeds start
again from the jobs' reported progress.

Heterogeneous nodes: the policies plan on a ``ClusterSpec`` of equal nodes. The scheduler gives
them ``workers_per_node`` = the largest number of workers any node can still give and
``num_nodes`` = the total such workers divided by that (rounded down), so the policy never plans
more workers than exist in all, and counts up to a node fit on at least one node. The placement
step then fits each job's pods onto the real nodes; a job that does not fit this round waits.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from qosched.backends.kubernetes import jobs as J
from qosched.backends.kubernetes.api_view import RoundJob
from qosched.backends.kubernetes.apply import Applier
from qosched.backends.kubernetes.binding import Binder
from qosched.backends.kubernetes.config import SchedulerConfig
from qosched.backends.kubernetes.events import Recorder
from qosched.backends.kubernetes.fit import Room, node_rooms
from qosched.backends.kubernetes.forecast import forecast
from qosched.backends.kubernetes.informer import Informer
from qosched.backends.kubernetes.kube import Stale, require
from qosched.backends.kubernetes.lease import LeaderLease, NotLeading, fenced_client
from qosched.backends.kubernetes.observe import Heartbeat, Metrics
from qosched.backends.kubernetes.reader import ClusterReader, skip_job
from qosched.backends.kubernetes.round_report import StepReport
from qosched.backends.kubernetes.seal import KeyUnavailable, load_key
from qosched.backends.kubernetes.send import Sender
from qosched.cluster.admission import Admission, AdmissionFailed, admit_arrivals
from qosched.cluster.job import JobSpec
from qosched.cluster.policies import Policy, create_policy
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, Phase
from qosched.cluster.state import JobState as ClusterJob
from qosched.cluster.throughput import SpeedCurve, ThroughputModel

__all__ = ["K8sScheduler", "SchedulerConfig"]

log = logging.getLogger(__name__)

#: Admissions under which a job runs.
_RUNNABLE = frozenset({Admission.GUARANTEED, Admission.BEST_EFFORT})
#: How long the first round of a term waits for its fresh lists before it gives up for now.
LIST_WAIT_S = 10.0
#: Prior speed curves kept (they are immutable, shared by the jobs of one model and size).
MAX_CURVES = 1024


class K8sScheduler:
    """See the module docstring. ``api_client`` is a ``kubernetes.client.ApiClient``.

    The round is this class's; reading the API is :attr:`reader`'s (:mod:`.reader`), writing
    a decision :attr:`applier`'s (:mod:`.apply`) and :attr:`binder`'s (:mod:`.binding`)."""

    def __init__(
        self,
        api_client: Any,
        config: SchedulerConfig,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        make_policy: Callable[[], Policy] | None = None,
    ) -> None:
        client = require().client
        self.config = config
        self.clock = clock
        # A new policy for every leadership term; by default the registered ``config.policy``.
        self.make_policy = make_policy or (lambda: create_policy(config.policy))
        # Audit logs (and the tests' invariants) tell the replicas apart by their user agent.
        api_client.user_agent = f"qosched/{config.identity}"
        self.lease = LeaderLease(
            client.CoordinationV1Api(api_client),
            name=config.lease_name,
            namespace=config.lease_namespace,
            identity=config.identity,
            lease_duration_s=config.lease_duration_s,
            renew_deadline_s=config.lease_renew_deadline_s,
            retry_s=config.lease_retry_s,
            clock=clock,
            monotonic=monotonic,
        )
        # Everything but the Lease itself goes through the fence. One connection per write in
        # flight and per watch, or the pool would discard connections it cannot keep.
        settings = api_client.configuration
        settings.connection_pool_maxsize = max(
            settings.connection_pool_maxsize or 0, config.in_flight + 4
        )
        writer = fenced_client(api_client, self.lease)
        self.sender = Sender(config.in_flight, stop=NotLeading)
        self.core = client.CoreV1Api(writer)
        self.apps = client.AppsV1Api(writer)
        self.recorder = Recorder(self.core, instance=config.identity, passthrough=(NotLeading,))
        self.policy = self.make_policy()
        self.tables = ThroughputModel.bundled(config.table_set)
        self.nodes, self.pods, self.sets = self._informers()
        self.informers = (self.nodes, self.pods, self.sets)
        self.reader = ClusterReader(
            config, self.recorder, nodes=self.nodes, pods=self.pods, sets=self.sets
        )
        self.applier = Applier(
            config,
            core=self.core,
            apps=self.apps,
            pods=self.pods,
            sets=self.sets,
            recorder=self.recorder,
            delete_options=(client.V1DeleteOptions, client.V1Preconditions),
        )
        self.binder = Binder(
            config,
            core=self.core,
            applier=self.applier,
            recorder=self.recorder,
            sender=self.sender,
            isolated=self._isolated,
        )
        self._listing: list[int] = [0, 0, 0]  # the fresh lists this term waits for
        self.metrics = Metrics()
        self.heartbeat = Heartbeat(stall_s=max(60.0, 10 * config.tick_s), clock=monotonic)
        self.monotonic = monotonic
        self._states: dict[str, ClusterJob] = {}  # the policy's records, rebuilt from the API
        self._curves: dict[tuple[str, int, int, int], SpeedCurve] = {}  # see _curve
        self._term = 0  # the lease term the policy and states belong to
        self._fresh: set[str] = set()  # jobs this term's policy has not been told about

    def _informers(self) -> tuple[Informer, Informer, Informer]:
        """The caches of nodes, pods and job StatefulSets (in ``config.namespace`` if set)."""
        options: dict[str, Any] = {"watch_timeout_s": self.config.watch_timeout_s}
        if self.config.namespace is None:
            list_pods = self.core.list_pod_for_all_namespaces
            list_sets = self.apps.list_stateful_set_for_all_namespaces
        else:
            options["namespace"] = self.config.namespace
            list_pods = self.core.list_namespaced_pod
            list_sets = self.apps.list_namespaced_stateful_set
        nodes = Informer(
            self.core.list_node,
            name="nodes",
            watch_timeout_s=self.config.watch_timeout_s,
        )
        pods = Informer(list_pods, name="pods", **options)
        sets = Informer(list_sets, name="statefulsets", label_selector=J.JOB_LABEL, **options)
        return nodes, pods, sets

    # -- the loop -----------------------------------------------------------------------------

    def start(self, *, lease: bool = True) -> None:
        """Start the informers' threads (a follower keeps its caches warm too, so that it can
        lead at once) and, with ``lease``, the Lease's timer thread. Without it, each round
        makes one Lease attempt itself (``--once``, tests that drive the clock)."""
        for informer in self.informers:
            informer.start()
        if lease:
            self.lease.start()

    def stop(self) -> None:
        """Stop the Lease's timer and the informers, then give the Lease up."""
        self.lease.stop()
        for informer in self.informers:
            informer.stop()
        self.sender.close()
        self.lease.release()

    def run(self, stop: threading.Event) -> None:
        """Schedule every ``tick_s`` until ``stop`` is set, then stop (see :meth:`stop`)."""
        self.start()
        try:
            while not stop.is_set():
                try:
                    self.step()
                except Exception:  # a bug must not end the scheduler; the next round starts
                    log.exception("scheduling round failed")
                stop.wait(self.config.tick_s)
        finally:
            self.stop()

    def step(self) -> StepReport:
        """One round; see the module docstring. A round that loses the Lease stops at its
        next write (``abandoned``); the next leader decides again from the API."""
        report = StepReport()
        started = self.monotonic()
        try:
            self._step(report)
        except NotLeading as exc:
            log.warning("round abandoned: %s", exc)
            report.leading, report.abandoned = False, True
        except Exception as exc:  # a bug ends this round only; counted, and /healthz sees it
            log.exception("scheduling round failed")
            report.failed = True
            report.errors.append(f"the round failed: {type(exc).__name__}: {exc}")
        self.metrics.record(report, self.monotonic() - started)
        self.heartbeat.beat(ok=not report.failed)
        return report

    def ready(self) -> bool:
        """Every cache listed and the Lease timer running: this replica can lead at once."""
        return self.lease.running and all(informer.synced for informer in self.informers)

    # -- the round ----------------------------------------------------------------------------

    def _step(self, report: StepReport) -> StepReport:
        if not (self._lead(report) and self._listed(report) and self._sealed(report)):
            return report
        view = self.applier.view = self.reader.view(report)
        now = self.clock()
        jobs = self._read_jobs(report)
        rooms = node_rooms(view.nodes.values(), view.pods.values())
        cluster = self.reader.cluster(view, rooms, jobs)
        live = self._update_states(jobs, cluster, now, report)
        if cluster is None:
            return report
        answers, admitted = self._admit(live, cluster, now, report)
        counts = self._allocate(live, admitted, answers, cluster, now, report)
        if counts is None:
            return report
        self._forecasts(admitted, counts, now, report)
        order = list(counts) + [k for k in admitted if k not in counts]
        self._apply(order, admitted, counts, answers, rooms, report)
        binding = _to_bind(order, counts, answers, report)
        self.binder.bind_jobs([(admitted[key], counts[key]) for key in binding], rooms, report)
        return report

    def _lead(self, report: StepReport) -> bool:
        """Lead or do nothing: with no timer thread, one Lease attempt of this round's own."""
        report.leading = self.lease.leading if self.lease.running else self.lease.hold()
        return report.leading

    def _listed(self, report: StepReport) -> bool:
        """Whether this term's caches were listed afresh; never decide on a cache that was
        never complete."""
        if self._term != self.lease.transitions:
            # A new term starts from the API alone: fresh lists (the watches may have missed
            # the last writes of the previous leader), a fresh policy that learns every job.
            self._term = self.lease.transitions
            self._listing = [informer.resync() for informer in self.informers]
            self._new_policy()
        report.synced = all(
            informer.wait_listed(generation, timeout_s=max(self.config.tick_s, LIST_WAIT_S))
            for informer, generation in zip(self.informers, self._listing, strict=True)
        )
        return report.synced

    def _sealed(self, report: StepReport) -> bool:
        """Whether the admission key is loaded (read, or made, once when leading): without it
        no admission can be checked, so nothing is decided."""
        if self.applier.seal is None:
            try:
                self.applier.seal = load_key(self.core, self.config.lease_namespace)
            except KeyUnavailable as exc:
                log.warning("round skipped: %s", exc)
                report.errors.append(str(exc))
                return False
        return True

    def _new_policy(self) -> None:
        """A fresh policy, told of every job again (their records rebuilt from the API)."""
        self.policy = self.make_policy()
        self._states.clear()

    def _read_jobs(self, report: StepReport) -> dict[str, RoundJob]:
        """This round's jobs (:meth:`.ClusterReader.jobs`)."""
        assert self.applier.seal is not None  # loaded before any job is read
        untrusted: set[str] = set()
        jobs = self.reader.jobs(self.applier.view, self.applier.seal, report, untrusted)
        if untrusted & self._states.keys():
            # A job the policy knows lost its admission (see ClusterReader._trusted): the
            # policy, told of each job once, learns them all again, as in a new term, and
            # decides it anew.
            self._new_policy()
        return jobs

    def _admit(
        self, live: dict[str, RoundJob], cluster: ClusterSpec, now: float, report: StepReport
    ) -> tuple[dict[str, Admission], dict[str, RoundJob]]:
        """This round's admissions (new jobs only) and the jobs that run: admitted before or
        now. A declined job's answer is written now; an admitted one's with its first
        replicas (:meth:`_apply`)."""
        known = [j.state for j in live.values() if j.spec.admission is not None]
        answers = self._admit_new(
            live, ClusterView(now, cluster, known, self.config.restart_pause_s), report
        )
        admitted = {
            k: j
            for k, j in live.items()
            if k not in report.invalid  # skipped during admission
            and (j.spec.admission in _RUNNABLE or answers.get(k) in _RUNNABLE)
        }
        self._write_admissions(
            [(live[k], a) for k, a in answers.items() if k not in admitted], report
        )
        return answers, admitted

    def _allocate(
        self,
        live: dict[str, RoundJob],
        admitted: dict[str, RoundJob],
        answers: dict[str, Admission],
        cluster: ClusterSpec,
        now: float,
        report: StepReport,
    ) -> dict[str, int] | None:
        """The policy's worker counts for the admitted jobs; None when the policy failed (only
        the admissions are then written)."""
        view = ClusterView(
            now, cluster, [j.state for j in admitted.values()], self.config.restart_pause_s
        )
        try:
            decision = self.policy.allocate(view) if admitted else None
        except Exception as exc:  # the policy's bug: nothing changes this round but admissions
            log.exception("the policy failed to allocate")
            report.errors.append(f"the policy failed to allocate: {exc}")
            self._write_admissions(
                [(live[k], a) for k, a in answers.items() if k in admitted], report
            )
            return None
        counts = {k: w for k, w in (decision.workers if decision else {}).items() if k in admitted}
        report.decision = counts
        return counts

    def _forecasts(
        self, admitted: dict[str, RoundJob], counts: dict[str, int], now: float, report: StepReport
    ) -> None:
        for key, job in admitted.items():
            try:
                forecast(
                    job,
                    counts.get(key, 0),
                    now,
                    report,
                    policy=self.policy,
                    recorder=self.recorder,
                    sts=self.applier.view.sets.get(key),
                )
            except NotLeading:
                raise
            except Exception as exc:  # a forecast only informs: the job keeps its workers
                log.warning("no forecast for job %s", key, exc_info=True)
                report.errors.append(f"{key}: no forecast: {type(exc).__name__}: {exc}")

    def _apply(
        self,
        order: list[str],
        admitted: dict[str, RoundJob],
        counts: dict[str, int],
        answers: dict[str, Admission],
        rooms: dict[str, Room],
        report: StepReport,
    ) -> None:
        """Give each admitted job its count, in the decision's order (:meth:`.Applier.apply`)."""
        # A GPU job's change is one patch of its own StatefulSet: sent concurrently. A CPU
        # job's re-size takes room on its node, which the next job's re-size reads: in turn.
        applying = self.sender if self.config.resource == "gpu" else Sender(1, stop=NotLeading)
        calls = [
            functools.partial(
                self.applier.apply,
                admitted[key],
                counts.get(key, 0),
                rooms,
                report,
                answers.get(key),
            )
            for key in order
        ]
        for key, outcome in zip(order, applying.each(calls), strict=True):
            with self._isolated(admitted[key], report):
                if outcome.result() and key in answers:
                    report.admitted[key] = answers[key]

    # -- the policy's records -----------------------------------------------------------------

    def _update_states(
        self,
        jobs: dict[str, RoundJob],
        cluster: ClusterSpec | None,
        now: float,
        report: StepReport,
    ) -> dict[str, RoundJob]:
        """The policy's JobStates from the API; finished jobs are closed. Returns the jobs
        still to decide for (declined and finished ones left out)."""
        live: dict[str, RoundJob] = {}
        for key, job in jobs.items():
            with self._isolated(job, report):
                if self._update_state(job, cluster, now, report):
                    live[key] = job
        for key in [k for k in self._states if k not in live]:
            del self._states[key]
        return live

    def _update_state(
        self, job: RoundJob, cluster: ClusterSpec | None, now: float, report: StepReport
    ) -> bool:
        """One job's JobState; True when the job is still to decide for."""
        spec, key = job.spec, job.spec.key
        if spec.succeeded or spec.admission is Admission.DECLINED:
            if spec.replicas:
                self.applier.patch_set(spec, {"spec": {"replicas": 0}}, report)
            return False
        progress = self.reader.progress(job, report)
        if progress is not None and progress.iteration >= spec.iterations:
            self.applier.patch_set(
                spec,
                {
                    "metadata": {
                        "annotations": {J.STATE: J.SUCCEEDED, J.PROGRESS: progress.to_text()}
                    },
                    "spec": {"replicas": 0},
                },
                report,
            )
            report.succeeded.append(key)
            return False
        if cluster is None:
            return False
        state = self._states.get(key)
        if state is None:
            state = ClusterJob(self._job_spec(spec), self._curve(spec, cluster))
            self._states[key] = state
            self._fresh.add(key)
        if progress is not None:
            state.iterations_done = float(min(progress.iteration, spec.iterations))
            # No job computed longer than it has existed: a larger report would make its speed
            # look slower than any real one, and its predicted finish lie past year 9999.
            state.active_s = min(progress.active_s, max(0.0, now - spec.created_at))
        state.workers = self.reader.held(job)
        state.phase = Phase.RUNNING if state.workers else Phase.PENDING
        if state.started_s is None and (state.workers or state.active_s > 0):
            state.started_s = now
        state.last_update_s = now
        job.state = state
        return True

    @contextmanager
    def _isolated(self, job: RoundJob, report: StepReport) -> Iterator[None]:
        """One job's step: an error there skips and reports that job, never the round. Losing
        the Lease is not a job's error: it ends the round."""
        try:
            yield
        except NotLeading:
            raise
        except Stale as exc:  # not the job's fault: decided again next round, on fresh state
            log.info("job %s decided again next round: %s", job.spec.key, exc)
            report.stale[job.spec.key] = str(exc)
        except Exception as exc:
            log.warning("job %s skipped this round", job.spec.key, exc_info=True)
            self._states.pop(job.spec.key, None)
            sts = self.applier.view.sets.get(job.spec.key)
            if sts is not None:
                why = f"{job.spec.key}: {type(exc).__name__}: {exc}"
                skip_job(self.recorder, sts, job.pending, why, report)

    def _job_spec(self, spec: J.K8sJob) -> JobSpec:
        deadline = spec.deadline_at
        if deadline is not None and deadline <= spec.created_at:
            deadline = spec.created_at + 1.0  # already missed: the policy sees it as overdue
        return JobSpec(
            job_id=spec.key,
            submit_s=max(0.0, spec.created_at),
            model=spec.model,
            batch_size=spec.batch_size,
            iterations=spec.iterations,
            deadline_s=deadline,
            requested_workers=spec.requested_workers,
        )

    def _curve(self, spec: J.K8sJob, cluster: ClusterSpec) -> SpeedCurve:
        """The prior speeds on the counts this job can take: a whole number of pods on a GPU
        cluster, one node's worth of cores on a CPU cluster (one pod), within max-workers."""
        most = cluster.total_workers if self.config.resource == "gpu" else cluster.workers_per_node
        if spec.max_workers is not None:
            most = min(most, spec.max_workers)
        step = spec.per_pod if self.config.resource == "gpu" else 1
        key = (spec.model, spec.batch_size, most, step)
        curve = self._curves.get(key)
        if curve is None:
            if len(self._curves) >= MAX_CURVES:  # cluster sizes come and go over months
                self._curves.clear()
            # One per kind of job, not per job: a burst of 1,000 jobs of one model on 4,000
            # GPUs made 1,000 curves of 4,001 speeds each.
            curve = self._curves[key] = self.tables.prior_curve(
                spec.model, spec.batch_size, most, step=step
            )
        return curve

    # -- admission ------------------------------------------------------------------------------

    def _admit_new(
        self, live: dict[str, RoundJob], view: ClusterView, report: StepReport
    ) -> dict[str, Admission]:
        """New jobs: the policy admits or declines each; the answers, written later in the round
        (`_write_admissions`, or with the job's new replicas in `_apply`)."""
        new = [job for job in live.values() if job.spec.admission is None]
        answers = self._judge(new, view, report)
        # Jobs admitted in an earlier term (or by a replica that died): this term's policy
        # learns them again, as the local service does after a restart.
        for key, job in live.items():
            if job.spec.admission in _RUNNABLE and key in self._fresh:
                with self._isolated(job, report):
                    self.policy.admit(job.state, view)
        self._fresh.clear()
        return answers

    def _write_admissions(self, jobs: list[tuple[RoundJob, Admission]], report: StepReport) -> None:
        """Write each admission on its job's StatefulSet, ``in_flight`` at a time."""
        calls = [functools.partial(self.applier.write_admission, job, a, report) for job, a in jobs]
        for (job, admission), outcome in zip(jobs, self.sender.each(calls), strict=True):
            with self._isolated(job, report):
                if outcome.result():
                    report.admitted[job.spec.key] = admission

    def _judge(
        self, new: list[RoundJob], view: ClusterView, report: StepReport
    ) -> dict[str, Admission]:
        """The admission of each new job, in arrival order, the burst judged at once (each job
        with the jobs before it that were not declined); a job the policy fails on is skipped
        and reported, and the jobs after it are judged again without it."""
        answers: dict[str, Admission] = {}
        known = list(view.jobs)
        by_key = {job.spec.key: job for job in new}
        while new:
            states = [job.state for job in new if job.state is not None]
            try:
                answers.update(
                    admit_arrivals(
                        self.policy,
                        states,
                        dataclasses.replace(view, jobs=list(known)),
                        best_effort=lambda state: by_key[state.job_id].spec.best_effort,
                    )
                )
                return answers
            except AdmissionFailed as exc:
                failed = exc
            answers.update(failed.answers)
            at = next(i for i, job in enumerate(new) if job.spec.key == failed.job_id)
            known += [
                job.state
                for job in new[:at]
                if job.state is not None and answers[job.spec.key] is not Admission.DECLINED
            ]
            with self._isolated(new[at], report):  # the job skipped, the error reported on it
                raise failed.__cause__ or failed
            new = new[at + 1 :]
        return answers


def _to_bind(
    order: list[str], counts: dict[str, int], answers: dict[str, Admission], report: StepReport
) -> list[str]:
    """The jobs whose pending pods are bound this round, in the decision's order: given
    workers, neither skipped nor stale, and their admission (if judged now) written."""
    return [
        key
        for key in order
        if counts.get(key, 0)
        and key not in report.invalid
        and key not in report.stale
        and (key not in answers or key in report.admitted)
    ]
