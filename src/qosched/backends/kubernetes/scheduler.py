"""The qosched scheduler on Kubernetes: API state in, the policy's Decision out as API calls.

:meth:`K8sScheduler.step` is one round, called every ``tick_s`` by :meth:`run`:

1. lead or do nothing: the Lease is renewed by its own timer thread (:mod:`.lease`), and every
   write this class sends passes the Lease's fence first; a round that loses the Lease is
   abandoned at its next write. A new term lists every resource afresh;
2. take a snapshot of the caches of nodes, pods and job StatefulSets, which informers
   (:mod:`.informer`) keep up to date in their own threads; a round never waits on the API
   to read, so it lasts as long as its decisions and writes;
3. read every job (:mod:`.jobs`) and its pods' progress into the policy's ``JobState``\\ s;
   finished jobs are marked ``succeeded`` and scaled to zero; the jobs new since the last round
   are admitted or declined by the policy in one call (``Policy.admit_arrivals``), and a
   declined job's answer is written on its StatefulSet;
4. ask the policy for worker counts on a ``ClusterSpec`` derived from the nodes' room;
5. apply them: GPU jobs change ``spec.replicas`` (elastic replicas; the training pods restart
   from their checkpoint; a new job's admission goes in the same patch), CPU jobs are
   re-sized in place through the pod ``resize`` subresource, or, where the cluster lacks it,
   the node has no room or the kubelet marks the re-size ``Infeasible``, by restarting the pod
   at its new size from its checkpoint; a job that loses its workers is scaled to zero;
6. bind pending pods, a whole job's pods together or none (Binding API, with the pod's
   ``uid``), placed job by job in the decision's order.

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
import math
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from qosched.backends.kubernetes import jobs as J
from qosched.backends.kubernetes.events import NORMAL, WARNING, Recorder
from qosched.backends.kubernetes.fit import (
    Room,
    node_rooms,
    place_gang,
    pod_requests,
    take,
    unreadable_nodes,
    worker_capacity,
)
from qosched.backends.kubernetes.informer import Informer
from qosched.backends.kubernetes.kube import Stale, drain, key_of, read_json, require, status_of
from qosched.backends.kubernetes.lease import LeaderLease, NotLeading, fenced_client
from qosched.backends.kubernetes.observe import Heartbeat, Metrics
from qosched.backends.kubernetes.round_report import StepReport
from qosched.backends.kubernetes.seal import KeyUnavailable, Seal, load_key
from qosched.backends.kubernetes.send import IN_FLIGHT, MAX_IN_FLIGHT, CallOutcome, Sender
from qosched.cluster.admission import Admission, AdmissionFailed, admit_arrivals
from qosched.cluster.job import JobSpec
from qosched.cluster.policies import Policy, create_policy
from qosched.cluster.spec import MAX_NODES, RESOURCES, ClusterSpec
from qosched.cluster.state import ClusterView, Phase
from qosched.cluster.state import JobState as ClusterJob
from qosched.cluster.throughput import SpeedCurve, ThroughputModel
from qosched.core.bounds import LATEST_TIME_S, check_count, check_number, show_value
from qosched.core.errors import InputError
from qosched.trainingjob.jobspec import DNS_LABEL

log = logging.getLogger(__name__)

#: Iterations/s per worker assumed for a model without a speed table, until progress arrives.
#: Admissions under which a job runs.
_RUNNABLE = frozenset({Admission.GUARANTEED, Admission.BEST_EFFORT})
#: Tries of one binding on a transient error (5xx, 429, network) before the gang is released.
BIND_TRIES = 3
#: How long the first round of a term waits for its fresh lists before it gives up for now.
LIST_WAIT_S = 10.0
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
#: Prior speed curves kept (they are immutable, shared by the jobs of one model and size).
MAX_CURVES = 1024


#: Why a pod that names this scheduler but belongs to none of its jobs stays pending.
NOT_A_JOB = (
    "qosched binds only the pods of StatefulSets labelled " + J.JOB_LABEL + " (see qosched k8s "
    "job); this pod belongs to none, so it stays pending"
)
#: The longest tick, watch and Lease: an hour (a scheduler that decides less often does not
#: schedule, and a timer of 1e300 s cannot even be waited on).
MAX_PERIOD_S = 3600.0
#: The longest name or identity: a Kubernetes object name's limit, as a pod name (the usual
#: identity) or a Lease name.
MAX_NAME = 253
_DNS_SUBDOMAIN = re.compile(
    r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)


def _check_text(value: Any, name: str) -> None:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME:
        raise InputError(
            f"expected a non-empty string of at most {MAX_NAME} characters, got "
            f"{show_value(value)}",
            field=name,
        )


def _check_name(value: Any, name: str, pattern: re.Pattern[str]) -> None:
    """A Kubernetes object name: the API server would refuse any other at the first write."""
    _check_text(value, name)
    if not pattern.fullmatch(value):
        kind = "DNS label" if pattern is DNS_LABEL else "DNS subdomain"
        chars = "'-'" if pattern is DNS_LABEL else "'-' and '.'"
        raise InputError(
            f"expected a Kubernetes name (a {kind}: lower case letters, digits, {chars}), got "
            f"{show_value(value)}",
            field=name,
        )


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """How one scheduler replica runs; validated at construction."""

    scheduler_name: str = "qosched"
    resource: str = "gpu"
    policy: str = "qos"
    throughputs: str | None = None  # bundled table set; default A100 for GPUs, CPU for cores
    namespace: str | None = None  # watch one namespace; None = all
    restart_pause_s: float = 30.0
    tick_s: float = 5.0
    lease_name: str = "qosched-scheduler"
    lease_namespace: str = "qosched"
    lease_duration_s: int = 15
    lease_renew_deadline_s: float | None = None  # default 2/3 of the lease
    lease_retry_s: float | None = None  # default 2/15 of the lease
    watch_timeout_s: int = 300
    http_port: int = 8080  # /metrics, /healthz, /readyz; 0 = none
    in_flight: int = IN_FLIGHT  # writes a round keeps in flight at once (1: one by one)
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")

    def __post_init__(self) -> None:
        if self.resource not in RESOURCES:
            raise InputError(
                f"expected one of {', '.join(RESOURCES)}, got {show_value(self.resource)}",
                field="resource",
            )
        for name in ("scheduler_name", "policy", "identity"):
            _check_text(getattr(self, name), name)
        if self.throughputs is not None:
            _check_text(self.throughputs, "throughputs")
        if self.namespace is not None:
            _check_name(self.namespace, "namespace", DNS_LABEL)
        _check_name(self.lease_name, "lease_name", _DNS_SUBDOMAIN)
        _check_name(self.lease_namespace, "lease_namespace", DNS_LABEL)
        check_number(self.tick_s, field="tick_s", positive=True, maximum=MAX_PERIOD_S)
        check_number(self.restart_pause_s, field="restart_pause_s", minimum=0.0)
        check_number(self.watch_timeout_s, field="watch_timeout_s", minimum=1, maximum=MAX_PERIOD_S)
        # Whole numbers written as 15.0 are taken, and kept as the ints the Lease and the
        # server's socket need.
        whole = {
            "lease_duration_s": check_count(
                self.lease_duration_s,
                field="lease_duration_s",
                minimum=1,
                maximum=int(MAX_PERIOD_S),
            ),
            "http_port": check_count(self.http_port, field="http_port", maximum=65_535),
            "in_flight": check_count(
                self.in_flight, field="in_flight", minimum=1, maximum=MAX_IN_FLIGHT
            ),
        }
        for name, value in whole.items():
            object.__setattr__(self, name, value)
        for name in ("lease_renew_deadline_s", "lease_retry_s"):
            if getattr(self, name) is not None:
                check_number(getattr(self, name), field=name, positive=True)
        renew = self.lease_renew_deadline_s or self.lease_duration_s * 2 / 3
        retry = self.lease_retry_s or self.lease_duration_s * 2 / 15
        if not renew < self.lease_duration_s:
            raise InputError(
                f"the renew deadline must be shorter than the lease ({self.lease_duration_s} s), "
                f"got {renew}",
                field="lease_renew_deadline_s",
            )
        if not 0 < retry < renew:
            raise InputError(
                f"must be > 0 and shorter than the renew deadline ({renew} s), got {retry}",
                field="lease_retry_s",
            )

    @property
    def table_set(self) -> str:
        return self.throughputs or ("A100" if self.resource == "gpu" else "CPU")


@dataclass(slots=True)
class _RoundJob:
    """A job in this round: its description, its pods, and the policy's record of it."""

    spec: J.K8sJob
    pods: list[dict[str, Any]]
    state: ClusterJob | None = None

    @property
    def bound(self) -> list[dict[str, Any]]:
        return [p for p in self.pods if p["spec"].get("nodeName")]

    @property
    def pending(self) -> list[dict[str, Any]]:
        return [p for p in self.pods if not p["spec"].get("nodeName")]


@dataclass(frozen=True, slots=True)
class _Binding:
    """One binding's answer: the pod as bound, or why not (``conflict``: a 409, the pod bound
    already or recreated since it was read)."""

    pod: dict[str, Any] | None = None
    error: str | None = None
    conflict: bool = False


@dataclass(slots=True)
class _View:
    """The caches as one round sees them (snapshots taken at its start), with the round's own
    writes; pods are also indexed by the job that owns them."""

    nodes: dict[str, dict[str, Any]]
    pods: dict[str, dict[str, Any]]
    sets: dict[str, dict[str, Any]]
    by_owner: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key, pod in self.pods.items():
            owner = _owner(pod)
            if owner is not None:
                self.by_owner.setdefault(owner, {})[key] = pod

    def put_pod(self, pod: dict[str, Any]) -> None:
        key, owner = key_of(pod), _owner(pod)
        self.pods[key] = pod
        if owner is not None:
            self.by_owner.setdefault(owner, {})[key] = pod

    def forget_pod(self, key: str) -> None:
        pod = self.pods.pop(key, None)
        if pod is not None:
            self.by_owner.get(_owner(pod) or "", {}).pop(key, None)


class K8sScheduler:
    """See the module docstring. ``api_client`` is a ``kubernetes.client.ApiClient``."""

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
        self.binding_type = (client.V1Binding, client.V1ObjectMeta, client.V1ObjectReference)
        self.delete_options = (client.V1DeleteOptions, client.V1Preconditions)
        self.recorder = Recorder(self.core, instance=config.identity, passthrough=(NotLeading,))
        self.policy = self.make_policy()
        self.tables = ThroughputModel.bundled(config.table_set)
        options: dict[str, Any] = {"watch_timeout_s": config.watch_timeout_s}
        if config.namespace is None:
            list_pods = self.core.list_pod_for_all_namespaces
            list_sets = self.apps.list_stateful_set_for_all_namespaces
        else:
            options["namespace"] = config.namespace
            list_pods = self.core.list_namespaced_pod
            list_sets = self.apps.list_namespaced_stateful_set
        self.nodes = Informer(
            self.core.list_node,
            name="nodes",
            watch_timeout_s=config.watch_timeout_s,
        )
        self.pods = Informer(list_pods, name="pods", **options)
        self.sets = Informer(list_sets, name="statefulsets", label_selector=J.JOB_LABEL, **options)
        self.informers = (self.nodes, self.pods, self.sets)
        self._now = _View({}, {}, {})
        self._listing: list[int] = [0, 0, 0]  # the fresh lists this term waits for
        self.metrics = Metrics()
        self.heartbeat = Heartbeat(stall_s=max(60.0, 10 * config.tick_s), clock=monotonic)
        self.monotonic = monotonic
        self._states: dict[str, ClusterJob] = {}  # the policy's records, rebuilt from the API
        self._curves: dict[tuple[str, int, int, int], SpeedCurve] = {}  # see _curve
        self.resize_supported: bool | None = None  # learnt from the first resize answer
        self._seal: Seal | None = None  # the admission key, read (or made) once when leading
        self._term = 0  # the lease term the policy and states belong to
        self._fresh: set[str] = set()  # jobs this term's policy has not been told about
        self._left_out: dict[str, str] = {}  # nodes already logged as left out, and why
        # pod uid -> (its start: restarts so far, the last iteration it reported, and whether
        # that start's going back was already told); for the ProgressWentBack Event only
        self._reports: dict[str, tuple[int, int, bool]] = {}

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

    def _step(self, report: StepReport) -> StepReport:
        report.leading = self.lease.leading if self.lease.running else self.lease.hold()
        if not report.leading:
            return report
        if self._term != self.lease.transitions:
            # A new term starts from the API alone: fresh lists (the watches may have missed
            # the last writes of the previous leader), a fresh policy that learns every job.
            self._term = self.lease.transitions
            self._listing = [informer.resync() for informer in self.informers]
            self.policy = self.make_policy()
            self._states.clear()
        if not all(
            informer.wait_listed(generation, timeout_s=max(self.config.tick_s, LIST_WAIT_S))
            for informer, generation in zip(self.informers, self._listing, strict=True)
        ):
            return report  # never decide on a cache that was never complete
        report.synced = True
        if self._seal is None:
            try:
                self._seal = load_key(self.core, self.config.lease_namespace)
            except KeyUnavailable as exc:  # no admission can be checked: nothing is decided
                log.warning("round skipped: %s", exc)
                report.errors.append(str(exc))
                return report
        nodes = self.nodes.snapshot()
        report.left_out = unreadable_nodes(nodes)
        self._note_left_out(report.left_out)
        for key in report.left_out:
            del nodes[key]
        self._now = _View(nodes, self.pods.snapshot(), self.sets.snapshot())
        now = self.clock()
        untrusted: set[str] = set()
        jobs = self._read_jobs(report, untrusted)
        if untrusted & self._states.keys():
            # A job the policy knows lost its admission (see _trusted): the policy, told of
            # each job once, learns them all again, as in a new term, and decides it anew.
            self.policy = self.make_policy()
            self._states.clear()
        rooms = node_rooms(self._now.nodes.values(), self._now.pods.values())
        cluster = self._cluster(rooms, jobs)
        live = self._update_states(jobs, cluster, now, report)
        if cluster is None:
            return report
        known = [j.state for j in live.values() if j.spec.admission is not None]
        answers = self._admit(
            live, ClusterView(now, cluster, known, self.config.restart_pause_s), report
        )
        admitted = {
            k: j
            for k, j in live.items()
            if k not in report.invalid  # skipped during admission
            and (j.spec.admission in _RUNNABLE or answers.get(k) in _RUNNABLE)
        }
        # A declined job is written now; an admitted one with its first replicas (`_apply`).
        self._write_admissions(
            [(live[k], a) for k, a in answers.items() if k not in admitted], report
        )
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
            return report
        counts = {k: w for k, w in (decision.workers if decision else {}).items() if k in admitted}
        report.decision = counts
        for key, job in admitted.items():
            try:
                self._forecast(job, counts.get(key, 0), now, report)
            except NotLeading:
                raise
            except Exception as exc:  # a forecast only informs: the job keeps its workers
                log.warning("no forecast for job %s", key, exc_info=True)
                report.errors.append(f"{key}: no forecast: {type(exc).__name__}: {exc}")
        order = list(counts) + [k for k in admitted if k not in counts]
        # A GPU job's change is one patch of its own StatefulSet: sent concurrently. A CPU
        # job's re-size takes room on its node, which the next job's re-size reads: in turn.
        applying = self.sender if self.config.resource == "gpu" else Sender(1, stop=NotLeading)
        calls = [
            functools.partial(
                self._apply, admitted[key], counts.get(key, 0), rooms, report, answers.get(key)
            )
            for key in order
        ]
        for key, outcome in zip(order, applying.each(calls), strict=True):
            with self._isolated(admitted[key], report):
                if outcome.result() and key in answers:
                    report.admitted[key] = answers[key]
        binding = [
            key
            for key in order
            if counts.get(key, 0)
            and key not in report.invalid
            and key not in report.stale
            and (key not in answers or key in report.admitted)  # its admission is written
        ]
        self._bind_jobs([(admitted[key], counts[key]) for key in binding], rooms, report)
        return report

    # -- reading the API ----------------------------------------------------------------------

    def _read_jobs(self, report: StepReport, untrusted: set[str]) -> dict[str, _RoundJob]:
        """This round's jobs; ``untrusted`` gets those whose admission was ignored."""
        jobs: dict[str, _RoundJob] = {}
        invalid: dict[str, tuple[dict[str, Any], str]] = {}
        for key, sts in self._now.sets.items():
            try:
                template = sts["spec"]["template"]["spec"]
                if template.get("schedulerName") != self.config.scheduler_name:
                    continue
                spec = J.read_job(sts, self.config.resource)
            except Exception as exc:  # one bad job is skipped, never the round
                # Keyed by the cache's key: the object itself may lack the name key_of needs.
                why = str(exc) if isinstance(exc, InputError) else f"{type(exc).__name__}: {exc}"
                invalid[key] = (sts, why if key in why else f"statefulset/{key}: {why}")
                continue
            trusted = self._trusted(sts, spec)
            if trusted is not spec:
                untrusted.add(spec.key)
            jobs[spec.key] = _RoundJob(trusted, [])
        waiting: dict[str, list[dict[str, Any]]] = {key: [] for key in invalid}
        for pod in self._now.pods.values():
            owner = _owner(pod)
            if pod["metadata"].get("deletionTimestamp") or _ended(pod):
                continue
            if owner in jobs:
                jobs[owner].pods.append(pod)
            elif owner in waiting and not pod["spec"].get("nodeName"):
                waiting[owner].append(pod)
            elif (
                owner not in waiting
                and pod["spec"].get("schedulerName") == self.config.scheduler_name
                and not pod["spec"].get("nodeName")
            ):
                # It names this scheduler, which binds only the pods of its jobs: said on the
                # pod, or it would wait for ever without a word.
                self.recorder.pod_condition(pod, "NotAJob", NOT_A_JOB)
        for key, (sts, why) in invalid.items():
            self._skip(sts, waiting[key], why, report, key=key)
        for job in jobs.values():
            job.pods.sort(key=lambda p: p["metadata"]["name"])
        present = {p["metadata"].get("uid") for p in self._now.pods.values()}
        for uid in self._reports.keys() - present:  # pods gone: their reports with them
            del self._reports[uid]
        return jobs

    def _trusted(self, sts: dict[str, Any], spec: J.K8sJob) -> J.K8sJob:
        """The job with its recorded admission only if this scheduler sealed it for this
        StatefulSet and these terms (:mod:`.seal`); any other is ignored, said in an Event,
        and the job admitted again by the policy."""
        assert self._seal is not None  # loaded before any job is read
        if spec.admission is None or self._seal.trusts(spec):
            return spec
        self.recorder.event(
            sts,
            WARNING,
            "AdmissionNotTrusted",
            f"{J.ADMISSION}: {spec.admission.value} carries no valid {J.ADMISSION_SEAL} of this "
            "scheduler (written by someone else, copied from another job, or the job's terms "
            "changed since it was admitted): ignored; the job is admitted again",
        )
        return dataclasses.replace(spec, admission=None)

    def _note_left_out(self, left_out: dict[str, str]) -> None:
        """Log each node left out of the cluster once (again if the reason changes), and each
        that comes back."""
        for key, why in left_out.items():
            if self._left_out.get(key) != why:
                log.warning("node %s left out of the cluster: %s", key, why)
        for key in self._left_out.keys() - left_out.keys():
            log.info("node %s is back in the cluster (or gone)", key)
        self._left_out = dict(left_out)

    def _skip(
        self,
        sts: dict[str, Any],
        pending: list[dict[str, Any]],
        why: str,
        report: StepReport,
        *,
        key: str | None = None,
    ) -> None:
        """A job that cannot be read: reported on its StatefulSet (an Event) and on its pending
        pods (``PodScheduled=False``, reason ``InvalidJob``); the other jobs go on."""
        report.invalid[key or key_of(sts)] = why
        report.errors.append(why)
        if isinstance((sts.get("metadata") or {}).get("name"), str):  # an Event names its object
            self.recorder.event(sts, WARNING, "InvalidJob", f"not scheduled: {why}")
        else:
            log.warning("job %s skipped this round: %s", key, why)
        for pod in pending:
            self.recorder.pod_condition(pod, "InvalidJob", why)

    def _cluster(self, rooms: dict[str, Room], jobs: dict[str, _RoundJob]) -> ClusterSpec | None:
        """The homogeneous cluster the policy plans on (see the module docstring): workers the
        nodes can give to qosched jobs, i.e. their room with qosched's own pods counted free."""
        ours = {key_of(p) for job in jobs.values() for p in job.pods}
        others = node_rooms(
            self._now.nodes.values(),
            self._now.pods.values(),
            count=lambda pod: key_of(pod) not in ours,
        )
        resource = "cpu" if self.config.resource == "cpu" else J.GPU_RESOURCE
        capacity = [c for c in worker_capacity(others, resource).values() if c > 0]
        if not capacity:
            return None
        per_node = max(capacity)
        nodes = min(MAX_NODES, max(1, sum(capacity) // per_node))
        return ClusterSpec(
            1,
            nodes,
            per_node,
            resource=self.config.resource,
            cpus_per_node=per_node if self.config.resource == "cpu" else 0,
        )

    def _progress(self, job: _RoundJob, report: StepReport) -> J.Progress | None:
        best = job.spec.progress
        reporter = J.reporting_pod(job.spec.name)
        for pod in job.pods:
            if pod["metadata"]["name"] != reporter:
                continue  # only the job's first pod may report (its Role), so only it is read
            text = (pod["metadata"].get("annotations") or {}).get(J.PROGRESS)
            try:
                progress = J.parse_progress(text, source=f"pod/{key_of(pod)}")
            except InputError as exc:  # that report is ignored; the job goes on
                report.errors.append(str(exc))
                self.recorder.event(pod, WARNING, "InvalidProgress", str(exc))
                continue
            if progress is not None:
                self._note_went_back(pod, progress.iteration)
                if best is None or progress.iteration > best.iteration:
                    best = progress
        return best

    def _note_went_back(self, pod: dict[str, Any], iteration: int) -> None:
        """One Warning Event per pod start (the pod, or a restart of its containers) whose
        report goes below an earlier report of the same pod: it resumed from an older
        checkpoint, or from none, and the work since was lost (or it reports wrongly). The
        report is taken as it is (the policy measures anew), as the local service does."""
        uid = pod["metadata"].get("uid")
        if not uid:
            return
        start, (last_start, last, told) = _restarts(pod), self._reports.get(uid, (-1, 0, False))
        told = told and last_start == start
        if iteration < last and not told:
            told = self.recorder.event(
                pod,
                WARNING,
                "ProgressWentBack",
                f"progress went back from iteration {last} to {iteration}: the pod resumed "
                "from an older checkpoint or none (or reports wrongly); the job's progress is "
                "the highest report of its pods and its StatefulSet",
            )
        self._reports[uid] = (start, iteration, told)

    def _held(self, job: _RoundJob) -> int:
        if self.config.resource == "gpu":
            return job.spec.per_pod * len(job.bound)
        return sum(_training_cores(p) for p in job.bound)

    def _update_states(
        self,
        jobs: dict[str, _RoundJob],
        cluster: ClusterSpec | None,
        now: float,
        report: StepReport,
    ) -> dict[str, _RoundJob]:
        """The policy's JobStates from the API; finished jobs are closed. Returns the jobs
        still to decide for (declined and finished ones left out)."""
        live: dict[str, _RoundJob] = {}
        for key, job in jobs.items():
            with self._isolated(job, report):
                if self._update_state(job, cluster, now, report):
                    live[key] = job
        for key in [k for k in self._states if k not in live]:
            del self._states[key]
        return live

    def _update_state(
        self, job: _RoundJob, cluster: ClusterSpec | None, now: float, report: StepReport
    ) -> bool:
        """One job's JobState; True when the job is still to decide for."""
        spec, key = job.spec, job.spec.key
        if spec.succeeded or spec.admission is Admission.DECLINED:
            if spec.replicas:
                self._patch_set(spec, {"spec": {"replicas": 0}}, report)
            return False
        progress = self._progress(job, report)
        if progress is not None and progress.iteration >= spec.iterations:
            self._patch_set(
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
        state.workers = self._held(job)
        state.phase = Phase.RUNNING if state.workers else Phase.PENDING
        if state.started_s is None and (state.workers or state.active_s > 0):
            state.started_s = now
        state.last_update_s = now
        job.state = state
        return True

    @contextmanager
    def _isolated(self, job: _RoundJob, report: StepReport) -> Iterator[None]:
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
            sts = self._now.sets.get(job.spec.key)
            if sts is not None:
                self._skip(sts, job.pending, f"{job.spec.key}: {type(exc).__name__}: {exc}", report)

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

    def _forecast(self, job: _RoundJob, workers: int, now: float, report: StepReport) -> None:
        """The job's predicted finish with ``workers`` (the policy's predictor where it has
        one, else the speed table); an Event ``DeadlineAtRisk`` when it lies past the
        deadline."""
        spec, state = job.spec, job.state
        if spec.deadline_at is None or state is None:
            return
        rate = 0.0
        if workers > 0:
            predictor = self.policy.predictor_of(spec.key)
            rate = predictor.predict(workers).rate if predictor else state.curve.rate(workers)
        left = max(0.0, spec.iterations - state.iterations_done)
        if left == 0:
            return
        finish = now + left / rate if rate > 0 else math.inf
        # A job without workers has no finish: its slack is the time it already lost.
        slack = spec.deadline_at - finish if rate > 0 else spec.deadline_at - now
        report.slack[spec.key] = slack
        if rate > 0 and slack >= 0:
            return
        sts = self._now.sets.get(spec.key)
        if sts is None:
            return
        if rate > 0:
            why = (
                f"predicted to finish {_at(finish)} with {workers} workers at "
                f"{rate:.3g} it/s, {-slack:.0f} s after its deadline {_iso(spec.deadline_at)}"
            )
        else:
            why = f"no workers this round; its deadline is {_iso(spec.deadline_at)}"
        self.recorder.event(sts, WARNING, "DeadlineAtRisk", why, dedupe="DeadlineAtRisk")

    # -- admission ------------------------------------------------------------------------------

    def _admit(
        self, live: dict[str, _RoundJob], view: ClusterView, report: StepReport
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

    def _write_admissions(
        self, jobs: list[tuple[_RoundJob, Admission]], report: StepReport
    ) -> None:
        """Write each admission on its job's StatefulSet, ``in_flight`` at a time."""
        calls = [functools.partial(self._write_admission, job, a, report) for job, a in jobs]
        for (job, admission), outcome in zip(jobs, self.sender.each(calls), strict=True):
            with self._isolated(job, report):
                if outcome.result():
                    report.admitted[job.spec.key] = admission

    def _judge(
        self, new: list[_RoundJob], view: ClusterView, report: StepReport
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

    def _admission_patch(self, spec: J.K8sJob, admission: Admission) -> dict[str, Any]:
        """The annotations that record the job's admission, sealed (:mod:`.seal`)."""
        assert self._seal is not None  # loaded before any job is read
        seal = self._seal.of(spec, admission)
        return {"metadata": {"annotations": {J.ADMISSION: admission.value, J.ADMISSION_SEAL: seal}}}

    def _write_admission(self, job: _RoundJob, admission: Admission, report: StepReport) -> bool:
        """Write the job's admission, sealed, on its StatefulSet (with a ``Declined`` Event when
        declined); False when the write failed (said in ``report``). Called in a sender thread."""
        patch = self._admission_patch(job.spec, admission)
        if admission is Admission.DECLINED:
            patch["spec"] = {"replicas": 0}
        if not self._patch_set(job.spec, patch, report):
            return False
        sts = self._now.sets.get(job.spec.key)
        if admission is Admission.DECLINED and sts is not None:
            deadline = _iso(job.spec.deadline_at) if job.spec.deadline_at else "-"
            self.recorder.event(
                sts,
                WARNING,
                "Declined",
                f"the {self.config.policy} policy cannot guarantee its deadline "
                f"{deadline} with the workers the cluster has; set "
                f'{J.BEST_EFFORT}: "true" to run it anyway',
            )
        return True

    # -- applying a decision ------------------------------------------------------------------

    def _apply(
        self,
        job: _RoundJob,
        workers: int,
        rooms: dict[str, Room],
        report: StepReport,
        admission: Admission | None = None,
    ) -> bool:
        """Give the job ``workers``; with ``admission`` (judged this round), write it first, in
        the same patch as the new replicas of a GPU job. False when the admission could not be
        written (nothing else is then changed)."""
        spec = job.spec
        if self.config.resource == "gpu":
            replicas = workers // spec.per_pod
            patch: dict[str, Any] = {}
            if admission is not None:
                patch = self._admission_patch(spec, admission)
            if replicas != spec.replicas:
                patch["spec"] = {"replicas": replicas}
                if replicas == 0:
                    _keep_progress(patch, job)
            if not patch:
                return True
            if not self._patch_set(spec, patch, report):
                return admission is None
            if replicas != spec.replicas:
                report.scaled[spec.key] = replicas
            return True
        if admission is not None and not self._write_admission(job, admission, report):
            return False
        if workers == 0:
            if spec.replicas:
                patch = {"spec": {"replicas": 0}}
                _keep_progress(patch, job)
                if self._patch_set(spec, patch, report):
                    report.scaled[spec.key] = 0
            return True
        patch = {}
        if spec.per_pod != workers:  # OnDelete: running pods keep their size until re-sized
            patch["spec"] = {
                "template": {
                    "spec": {
                        "containers": [
                            _cpu_container(c["name"], workers)
                            for c in _containers(self._set(spec))[:1]
                        ]
                    }
                }
            }
        if spec.replicas != 1:
            patch.setdefault("spec", {})["replicas"] = 1
        if patch and self._patch_set(spec, patch, report) and spec.replicas != 1:
            report.scaled[spec.key] = 1
        for pod in job.pods:
            cores = _training_cores(pod)
            if cores == workers:
                if _resize_infeasible(pod):
                    # The kubelet refused the size the pod already asks for (its node cannot
                    # give it): restart it at that size where it fits.
                    self._delete_pod(pod, report.restarted, report)
                continue
            node = pod["spec"].get("nodeName")
            if node is None:  # not running yet: the controller recreates it at the new size
                self._delete_pod(pod, report.restarted, report)
            elif self._resize(pod, workers, cores, rooms.get(node), report):
                report.resized[key_of(pod)] = workers
                self.recorder.event(
                    pod, NORMAL, "Resized", f"resized in place from {cores} to {workers} cores"
                )
            else:  # checkpoint-restart at the new size, wherever it fits
                self._delete_pod(pod, report.restarted, report)
                self.recorder.event(
                    self._set(spec),
                    NORMAL,
                    "Resized",
                    f"restarting pod {key_of(pod)} from its checkpoint at {workers} cores "
                    f"(was {cores}): it cannot be re-sized in place",
                )
        return True

    def _resize(
        self, pod: dict[str, Any], workers: int, cores: int, room: Room | None, report: StepReport
    ) -> bool:
        """Re-size a running pod in place; False when the cluster cannot (no ``resize``
        subresource: before 1.33, or the feature gate off) or its node has no room."""
        if self.resize_supported is False or room is None:
            return False
        if workers > cores and room.get("cpu", 0.0) + 1e-9 < workers - cores:
            return False
        containers = _containers(pod)
        meta = pod["metadata"]
        body = {
            # Only the pod this round saw: see _patch_set.
            "metadata": {"resourceVersion": meta["resourceVersion"]},
            "spec": {"containers": [_cpu_container(containers[0]["name"], workers)]},
        }
        try:
            response = self.core.patch_namespaced_pod_resize(
                meta["name"],
                meta["namespace"],
                body,
                _content_type=STRATEGIC_PATCH,
                _preload_content=False,
            )
        except NotLeading:
            raise
        except Exception as exc:
            if status_of(exc) == 409:
                raise Stale(f"pod {key_of(pod)} changed since it was read: {exc.reason}") from exc
            if status_of(exc) in (404, 405, 415):
                log.warning(
                    "the cluster has no pod resize subresource (%s); CPU jobs are "
                    "re-sized by checkpoint-restart",
                    status_of(exc),
                )
                self.resize_supported = False
            else:
                report.errors.append(f"resize of pod {key_of(pod)} failed: {exc}")
            return False
        self.resize_supported = True
        updated = read_json(response)
        self._put_pod(updated)
        take(room, {"cpu": workers - cores})
        return True

    def _bind_jobs(
        self, jobs: list[tuple[_RoundJob, int]], rooms: dict[str, Room], report: StepReport
    ) -> None:
        """Bind the pending pods of ``jobs`` (each with its count), all of a gang or none.

        Gangs are placed in turn, in the decision's order, each taking its room; then every
        binding is sent, ``in_flight`` at a time; then each gang is settled: all bound, or what
        was bound released (its room stays free until the next round, whose placement sees the
        pods gone); then the ``Scheduled`` Events are sent the same way."""
        gangs: list[tuple[_RoundJob, int, list[tuple[dict[str, Any], str]]]] = []
        for job, workers in jobs:
            with self._isolated(job, report):
                gang = self._place_gang(job, workers, rooms, report)
                if gang:
                    gangs.append((job, workers, gang))
        calls = [
            functools.partial(self._bind, pod, node) for _, _, gang in gangs for pod, node in gang
        ]
        outcomes = iter(self.sender.each(calls))
        events = []
        for job, workers, gang in gangs:
            answers = [next(outcomes) for _ in gang]
            with self._isolated(job, report):
                events += self._settle_gang(job, workers, gang, answers, rooms, report)
        for outcome in self.sender.each(events):
            outcome.result()  # an Event that failed is logged; losing the Lease ends the round

    def _place_gang(
        self, job: _RoundJob, workers: int, rooms: dict[str, Room], report: StepReport
    ) -> list[tuple[dict[str, Any], str]]:
        """Where the job's pending pods go, their room taken; none when they are not all to be
        bound this round (said on the pods)."""
        spec = job.spec
        expected = workers // spec.per_pod if self.config.resource == "gpu" else 1
        pods = [p for p in self._pods_of(spec) if p["spec"].get("nodeName") is None]
        present = self._pods_of(spec)
        if not pods:
            return []
        if len(present) != expected:  # the controller has not caught up with the replicas yet
            if spec.key in report.scaled:
                return []  # this very round changed them: nothing to report yet
            for pod in pods:
                self.recorder.pod_condition(
                    pod,
                    "WaitingForGang",
                    f"job {spec.key} is given {expected} pods and {len(present)} exist; its "
                    "pods are bound together once all of them do",
                )
            return []
        if self.config.resource == "cpu" and any(_training_cores(p) != workers for p in pods):
            return []  # still at its old size: it is being restarted
        prefer = [p["spec"]["nodeName"] for p in present if p["spec"].get("nodeName")]
        resource = "cpu" if self.config.resource == "cpu" else J.GPU_RESOURCE
        placement = place_gang(pods, rooms, resource, prefer)
        if placement is None:
            why = (
                f"the {len(pods)} pending pods of job {spec.key} do not all fit on the nodes' "
                "free resources this round (all of a gang or none); tried again next round"
            )
            sts = self._now.sets.get(spec.key)
            if sts is not None:
                self.recorder.event(sts, WARNING, "FailedScheduling", why)
            for pod in pods:
                self.recorder.pod_condition(pod, "Unschedulable", why)
            return []
        gang = [(pod, placement[key_of(pod)]) for pod in pods]
        for pod, node in gang:
            take(rooms[node], pod_requests(pod))
        return gang

    def _settle_gang(
        self,
        job: _RoundJob,
        workers: int,
        gang: list[tuple[dict[str, Any], str]],
        answers: list[CallOutcome[_Binding]],
        rooms: dict[str, Room],
        report: StepReport,
    ) -> list[Callable[[], bool]]:
        """Record the gang's bindings; when one failed, release those that went through (a
        half-bound gang would hold workers it cannot use; the controller recreates the pods
        pending) and try again next round. The ``Scheduled`` Events to send."""
        results = [answer.result() for answer in answers]  # losing the Lease ends the round
        for (pod, _), result in zip(gang, results, strict=True):
            if result.conflict:
                self._refresh(pod)
            if result.error is not None:
                report.errors.append(result.error)
        bound = [r.pod for r in results if r.pod is not None]
        for pod in bound:
            self._put_pod(pod)  # until the watch shows it, the cache must not offer it again
            report.bound[key_of(pod)] = pod["spec"]["nodeName"]
        if len(bound) < len(gang):
            for done in bound:
                self._delete_pod(done, report.released, report, as_seen=False)
            for pod, node in gang:
                take(rooms[node], pod_requests(pod), sign=-1.0)
            return []
        return [
            functools.partial(
                self.recorder.event,
                pod,
                NORMAL,
                "Scheduled",
                f"Successfully assigned {key_of(pod)} to {pod['spec']['nodeName']} "
                f"(job {job.spec.key}, {workers} workers)",
            )
            for pod in bound
        ]

    def _bind(self, pod: dict[str, Any], node: str) -> _Binding:
        """Bind one pod, retrying a transient error (5xx, 429, network) up to ``BIND_TRIES``
        times. Called in a sender thread: it only sends, and the round's thread records."""
        V1Binding, V1ObjectMeta, V1ObjectReference = self.binding_type
        meta = pod["metadata"]
        # The uid makes the API server refuse the binding if the pod was recreated under the
        # same name since the cache saw it.
        body = V1Binding(
            metadata=V1ObjectMeta(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"]),
            target=V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        for attempt in range(1, BIND_TRIES + 1):
            try:
                drain(
                    self.core.create_namespaced_pod_binding(
                        meta["name"], meta["namespace"], body, _preload_content=False
                    )
                )
            except NotLeading:
                raise
            except Exception as exc:
                status = status_of(exc)
                if status == 409:  # bound already, or recreated (another uid) since we saw it
                    why = f"pod {key_of(pod)} was already bound: {exc.reason}"
                    return _Binding(error=why, conflict=True)
                if (status is not None and status < 500 and status != 429) or attempt == BIND_TRIES:
                    return _Binding(error=f"binding pod {key_of(pod)} to {node} failed: {exc}")
                time.sleep(0.05 * 2**attempt)
                continue
            return _Binding(pod={**pod, "spec": {**pod["spec"], "nodeName": node}})
        raise AssertionError("unreachable: the last try returns")

    # -- small API helpers --------------------------------------------------------------------

    def _pods_of(self, spec: J.K8sJob) -> list[dict[str, Any]]:
        return sorted(
            (
                p
                for p in self._now.by_owner.get(spec.key, {}).values()
                if not p["metadata"].get("deletionTimestamp") and not _ended(p)
            ),
            key=lambda p: p["metadata"]["name"],
        )

    def _put_pod(self, pod: dict[str, Any]) -> None:
        """A pod as this replica just wrote it: in this round's view and in the cache."""
        self.pods.put(pod)
        self._now.put_pod(pod)

    def _set(self, spec: J.K8sJob) -> dict[str, Any]:
        return self._now.sets[spec.key]

    def _patch_set(self, spec: J.K8sJob, patch: dict[str, Any], report: StepReport) -> bool:
        """Patch the job's StatefulSet as this round saw it, and only that version: a patch
        carries the ``resourceVersion`` it was decided on, so a patch that arrives late (a
        deposed leader's, stalled after its fence check) never overwrites what was written
        since. A 409 raises :class:`Stale`."""
        version = self._set(spec)["metadata"]["resourceVersion"]
        body = {**patch, "metadata": {**patch.get("metadata", {}), "resourceVersion": version}}
        try:
            response = self.apps.patch_namespaced_stateful_set(
                spec.name,
                spec.namespace,
                body,
                _content_type=STRATEGIC_PATCH,
                _preload_content=False,
            )
        except NotLeading:
            raise
        except Exception as exc:
            if status_of(exc) == 409:
                raise Stale(f"statefulset {spec.key} changed since it was read") from exc
            report.errors.append(f"patching statefulset {spec.key} failed: {exc}")
            return False
        updated = read_json(response)
        self.sets.put(updated)
        self._now.sets[spec.key] = updated
        return True

    def _delete_pod(
        self, pod: dict[str, Any], into: list[str], report: StepReport, *, as_seen: bool = True
    ) -> None:
        """Delete the pod the cache saw, never one recreated since under the same name (its
        ``uid``); with ``as_seen``, only at the version seen (its ``resourceVersion``: a pod
        re-sized or bound since is not restarted on a stale decision; a 409 raises
        :class:`Stale`). A pod this round bound itself is released by ``uid`` alone: the
        binding's answer does not give its new version."""
        meta = pod["metadata"]
        V1DeleteOptions, V1Preconditions = self.delete_options
        version = meta["resourceVersion"] if as_seen else None
        options = V1DeleteOptions(
            preconditions=V1Preconditions(uid=meta["uid"], resource_version=version)
        )
        try:
            drain(
                self.core.delete_namespaced_pod(
                    meta["name"], meta["namespace"], body=options, _preload_content=False
                )
            )
        except NotLeading:
            raise
        except Exception as exc:
            if status_of(exc) == 409 and as_seen:
                raise Stale(f"pod {key_of(pod)} changed since it was read") from exc
            if status_of(exc) != 404:
                report.errors.append(f"deleting pod {key_of(pod)} failed: {exc}")
                return
        self.pods.forget(key_of(pod), meta["uid"])
        self._now.forget_pod(key_of(pod))
        into.append(key_of(pod))

    def _refresh(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        try:
            fresh = read_json(
                self.core.read_namespaced_pod(
                    meta["name"], meta["namespace"], _preload_content=False
                )
            )
        except Exception:
            return
        self._put_pod(fresh)


def _iso(seconds: float) -> str:
    """A time as Events show it, within 1970..9999 (the times a ``datetime`` can be)."""
    seconds = min(max(0.0, seconds), LATEST_TIME_S)
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _at(seconds: float) -> str:
    """``at <time>``; a time past year 9999 (a predicted finish at a crawl) cannot be shown,
    only said to lie after it."""
    if not seconds <= LATEST_TIME_S:  # NaN too
        return f"after {_iso(LATEST_TIME_S)}"
    return f"at {_iso(seconds)}"


def _owner(pod: dict[str, Any]) -> str | None:
    """The job (``namespace/name``) a pod belongs to: its StatefulSet owner, when the pod's name
    is one of that StatefulSet's. A pod can patch its own owner references, not its name: a
    pod claiming another job is nobody's (it still takes room on its node)."""
    meta = pod["metadata"]
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "StatefulSet":
            name = ref.get("name")
            if isinstance(name, str) and J.is_pod_of(meta.get("name", ""), name):
                return f"{meta.get('namespace', 'default')}/{name}"
            return None
    return None


def _ended(pod: dict[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def _restarts(pod: dict[str, Any]) -> int:
    """How often the pod's containers restarted: each restart is a new start of its work."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(
        c["restartCount"]
        for c in statuses
        if isinstance(c, dict) and isinstance(c.get("restartCount"), int)
    )


def _resize_infeasible(pod: dict[str, Any]) -> bool:
    """The kubelet reports an in-place re-size it cannot do (condition ``PodResizePending``
    with reason ``Infeasible``, Kubernetes 1.33+)."""
    return any(
        c.get("type") == "PodResizePending" and c.get("reason") == "Infeasible"
        for c in pod.get("status", {}).get("conditions") or []
    )


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj["spec"]
    return (spec.get("template", {}).get("spec") or spec).get("containers", [])


def _training_cores(pod: dict[str, Any]) -> int:
    """The cores a CPU job's pod trains on: its first container's, the one qosched sizes. A
    sidecar's cores (a service mesh's proxy) are the pod's to place, not the job's workers: with
    them counted, the pod would never be the size asked and be restarted at every round."""
    first = {"spec": {"containers": _containers(pod)[:1]}}
    return math.ceil(pod_requests(first).get("cpu", 0.0) - 1e-9)


def _cpu_container(name: str, cores: int) -> dict[str, Any]:
    """The first container's CPU at ``cores``, request and limit equal (whole cores, so the
    kubelet's static CPU manager can pin them)."""
    return {
        "name": name,
        "resources": {"requests": {"cpu": str(cores)}, "limits": {"cpu": str(cores)}},
    }


def _keep_progress(patch: dict[str, Any], job: _RoundJob) -> None:
    """Add the job's last progress to a patch that scales it to zero: with no pods left, the
    StatefulSet's annotation is where its progress survives."""
    if job.state is not None and job.state.iterations_done:
        progress = J.Progress(int(job.state.iterations_done), job.state.active_s)
        notes = patch.setdefault("metadata", {}).setdefault("annotations", {})
        notes[J.PROGRESS] = progress.to_text()
