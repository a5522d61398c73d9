"""What an operator watches: Prometheus metrics and the health endpoints the Deployment probes.

:class:`Metrics` is updated by the scheduler after every round (:meth:`Metrics.record`), in a
registry of its own. :func:`serve` answers, on one port:

- ``/metrics``: the metrics in Prometheus' text format;
- ``/healthz``: 200 while the scheduling loop turns and its rounds succeed (a round ended
  without an unexpected error within ``stall_s``), so the kubelet restarts a replica whose
  loop hangs or whose every round has failed for that long;
- ``/readyz``: 200 once every informer has listed and the Lease timer runs (a follower is ready:
  it can take over at once).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from qosched.backends.kubernetes.round_report import StepReport
from qosched.cluster.admission import Admission


class RoundOutcome(StrEnum):
    """What a round did to a job, besides admitting it; a ``StepReport`` field each."""

    SCALED = "scaled"
    RESIZED = "resized"
    RESTARTED = "restarted"
    RELEASED = "released"
    INVALID = "invalid"
    SUCCEEDED = "succeeded"
    STALE = "stale"  # a write refused 409: the job is decided again next round


#: Outcomes counted by ``qosched_decisions_total``: admissions and what a round did to jobs.
OUTCOMES = (*(admission.value for admission in Admission), *(o.value for o in RoundOutcome))


class Metrics:
    """The scheduler's metrics; see the module docstring."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.rounds = Counter(
            "qosched_rounds",
            "Scheduling rounds, by what the replica did in them.",
            ["role"],
            registry=r,
        )
        self.duration = Histogram(
            "qosched_round_duration_seconds",
            "Wall time of the rounds this replica led.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.bindings = Counter("qosched_bindings", "Pods bound.", registry=r)
        self.decisions = Counter(
            "qosched_decisions", "Decisions on jobs, by outcome.", ["outcome"], registry=r
        )
        self.errors = Counter(
            "qosched_round_errors", "Errors reported by rounds (API, jobs).", registry=r
        )
        self.slack = Gauge(
            "qosched_job_predicted_slack_seconds",
            "Deadline minus predicted finish, per job with a deadline (negative: at risk).",
            ["job"],
            registry=r,
        )
        self.leader = Gauge("qosched_leader", "1 while this replica leads.", registry=r)
        self.left_out = Gauge(
            "qosched_nodes_left_out",
            "Nodes left out of the last round's cluster: their allocatable could not be read "
            "or is out of bounds.",
            registry=r,
        )
        for outcome in OUTCOMES:
            self.decisions.labels(outcome).inc(0)
        for role in ("led", "followed", "abandoned"):
            self.rounds.labels(role).inc(0)
        self._slack_jobs: set[str] = set()

    def record(self, report: StepReport, seconds: float) -> None:
        """Called after every round with its report and its wall time."""
        role = "abandoned" if report.abandoned else ("led" if report.leading else "followed")
        self.rounds.labels(role).inc()
        self.leader.set(1 if report.leading else 0)
        # Before the role check: a round that failed before it knew whether it leads counts.
        self.errors.inc(len(report.errors))
        if not report.leading and not report.abandoned:
            return
        self.duration.observe(seconds)
        self.bindings.inc(len(report.bound))
        for admission in report.admitted.values():
            self.decisions.labels(admission.value).inc()
        for outcome in RoundOutcome:
            self.decisions.labels(outcome.value).inc(len(getattr(report, outcome.value)))
        if report.synced:
            self.left_out.set(len(report.left_out))
            for job in self._slack_jobs - set(report.slack):
                self.slack.remove(job)
            for job, slack in report.slack.items():
                self.slack.labels(job).set(slack)
            self._slack_jobs = set(report.slack)

    def text(self) -> bytes:
        return generate_latest(self.registry)


def serve(
    port: int,
    metrics: Metrics,
    *,
    healthy: Callable[[], bool],
    ready: Callable[[], bool],
    host: str = "0.0.0.0",
) -> ThreadingHTTPServer:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``port`` from a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # probes every few seconds: no log
            pass

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, metrics.text(), CONTENT_TYPE_LATEST)
            elif path in ("/healthz", "/readyz"):
                ok = (healthy if path == "/healthz" else ready)()
                self._send(200 if ok else 503, b"ok\n" if ok else b"not ok\n", "text/plain")
            else:
                self._send(404, b"not found\n", "text/plain")

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="observe", daemon=True).start()
    return server


class Heartbeat:
    """When the scheduling loop last finished a round, and last finished one without an
    unexpected error, for ``/healthz``."""

    def __init__(self, stall_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_s = stall_s
        self.clock = clock
        self.last = self.last_ok = clock()
        self.failures = 0  # rounds in a row that failed

    def beat(self, *, ok: bool = True) -> None:
        """Called after every round; ``ok`` is False when it ended on an unexpected error."""
        self.last = self.clock()
        if ok:
            self.last_ok, self.failures = self.last, 0
        else:
            self.failures += 1

    def alive(self) -> bool:
        """A round succeeded within ``stall_s``: the loop turns, and a round that fails now and
        then is no reason to restart, but one that has failed every time for that long is."""
        return self.clock() - self.last_ok <= self.stall_s
