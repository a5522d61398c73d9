"""Leader election on a ``coordination.k8s.io/v1`` Lease, and the fence every write passes.

The protocol is client-go's. :meth:`LeaderLease.hold` makes one attempt: a replica that holds
the Lease renews it; any other takes it when it is free, or when its record (holder and renew
time) has not changed for ``leaseDurationSeconds`` *as measured by this replica's own clock
since it first saw that record*. Every write is a ``replace`` carrying the
``resourceVersion`` just read, so of two replicas racing for an expired Lease the API server
accepts one and answers the other 409 Conflict. :meth:`start` runs the attempts on a timer
thread every ``retry_s``, independent of the scheduling rounds.

The fence: a replica leads only until ``renew_deadline_s`` after the start of its last
successful attempt (by its monotonic clock). :meth:`check`, called before every write the
scheduler sends (:func:`fenced_client`), raises :class:`NotLeading` past that point, and the
scheduler abandons its round. A successor takes over no earlier than ``lease_duration_s``
after it saw the last renewal, itself later than that renewal's start; so the two terms never
overlap provided

- the clocks of the replicas' nodes run at nearly the same *rate* (their offsets do not
  matter: no replica compares its clock with another's), and
- a write that passed the fence reaches the API server within
  ``lease_duration_s - renew_deadline_s``. The check is made just before the request is
  sent; a process stalled between the check and the send (a stop-the-world pause of that
  length, a frozen VM) can still land one write late. Kubernetes offers no server-side fencing
  token to close that gap, so every write to an existing object carries a precondition the
  server checks (a ``resourceVersion``, a ``uid``; see :mod:`.scheduler`): a late write lands
  only on an object nobody wrote since it was read.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from qosched.backends.kubernetes.kube import format_micro_time, read_json, require, status_of
from qosched.core.errors import QoschedError

log = logging.getLogger(__name__)

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class NotLeading(QoschedError):
    """A write was about to leave a replica that does not hold the Lease (or whose renew
    deadline passed): the round that made it is abandoned."""


class LeaderLease:
    """See the module docstring. ``coordination`` is a ``CoordinationV1Api`` whose client is
    not fenced. ``clock`` gives the wall time written in the record; ``monotonic`` measures
    every duration."""

    def __init__(
        self,
        coordination: Any,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration_s: float = 15.0,
        renew_deadline_s: float | None = None,
        retry_s: float | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = coordination
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration_s = float(lease_duration_s)
        # client-go's proportions (15 s lease, 10 s renew deadline, 2 s retry)
        self.renew_deadline_s = renew_deadline_s or self.lease_duration_s * 2 / 3
        self.retry_s = retry_s or self.lease_duration_s * 2 / 15
        if not 0 < self.retry_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError(
                "need 0 < retry_s < renew_deadline_s < lease_duration_s, got "
                f"{self.retry_s}, {self.renew_deadline_s}, {self.lease_duration_s}"
            )
        self.clock = clock
        self.monotonic = monotonic
        self.transitions = 0  # how many times this replica took the lease
        self._lock = threading.Lock()
        self._valid_until = -float("inf")  # monotonic() until which this replica leads
        self._observed: tuple[Any, ...] | None = None  # the last record seen
        self._observed_at = 0.0  # monotonic() when it was first seen
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- leading ------------------------------------------------------------------------------

    @property
    def leading(self) -> bool:
        """This replica holds the Lease and its renew deadline has not passed."""
        return self.monotonic() < self._valid_until

    def check(self) -> None:
        """Raise :class:`NotLeading` unless this replica leads right now (called before every
        write; see the module docstring)."""
        if not self.leading:
            raise NotLeading(f"{self.identity} does not hold lease {self.namespace}/{self.name}")

    def start(self) -> None:
        """Run :meth:`hold` every ``retry_s`` on a thread of its own, until :meth:`stop`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="lease", daemon=True)
            self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.hold()
            except Exception:  # a bug must not stop the renewals; the deadline protects writes
                log.exception("lease attempt failed")
            self._stop.wait(self.retry_s)

    def stop(self) -> None:
        """Stop the timer thread (the Lease is kept; see :meth:`release`)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    # -- one attempt --------------------------------------------------------------------------

    def hold(self) -> bool:
        """Renew or take the Lease once; True when this replica leads after it."""
        started = self.monotonic()
        try:
            lease = read_json(
                self.api.read_namespaced_lease(self.name, self.namespace, _preload_content=False)
            )
        except Exception as exc:
            if status_of(exc) == 404:
                return self._create(started)
            return self._failed(f"cannot read the lease: {exc}")
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration_s)
        record = (holder, spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, started
        if holder and holder != self.identity and started < self._observed_at + duration:
            return self._lost(f"{holder} holds it")
        taking = holder != self.identity
        spec = dict(spec)
        now = self.clock()
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=max(1, round(self.lease_duration_s)),
            renewTime=format_micro_time(now),
        )
        if taking:
            spec["acquireTime"] = format_micro_time(now)
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        lease["spec"] = spec
        try:
            written = read_json(
                self.api.replace_namespaced_lease(
                    self.name, self.namespace, lease, _preload_content=False
                )
            )
        except Exception as exc:
            if status_of(exc) == 409:  # another replica wrote first
                return self._lost(f"lost a race for the lease: {exc.reason}")
            return self._failed(f"cannot {'take' if taking else 'renew'} the lease: {exc}")
        return self._won(started, taking, written)

    def _create(self, started: float) -> bool:
        now = self.clock()
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, round(self.lease_duration_s)),
                "acquireTime": format_micro_time(now),
                "renewTime": format_micro_time(now),
                "leaseTransitions": 0,
            },
        }
        try:
            written = read_json(
                self.api.create_namespaced_lease(self.namespace, body, _preload_content=False)
            )
        except Exception as exc:  # 409: another replica created it first
            return self._lost(f"cannot create the lease: {exc}")
        return self._won(started, True, written)

    def _won(self, started: float, taking: bool, written: dict[str, Any]) -> bool:
        spec = written.get("spec") or {}
        self._observed = (
            spec.get("holderIdentity"),
            spec.get("renewTime"),
            spec.get("leaseTransitions"),
        )
        with self._lock:
            if taking or not self.leading:
                self.transitions += 1
                log.info("%s leads (lease %s/%s)", self.identity, self.namespace, self.name)
            self._valid_until = started + self.renew_deadline_s
        return True

    def _lost(self, why: str) -> bool:
        with self._lock:
            if self.leading:
                log.warning("%s stops leading: %s", self.identity, why)
            self._valid_until = -float("inf")
        return False

    def _failed(self, why: str) -> bool:
        """An API error: this replica still leads until its renew deadline, if it did."""
        log.warning("%s: %s", self.identity, why)
        return self.leading

    def release(self) -> None:
        """Give the Lease up on a clean shutdown, so a successor need not wait for it to expire."""
        if not self.leading:
            return
        with self._lock:
            self._valid_until = -float("inf")  # no write may leave after this point
        try:
            lease = read_json(
                self.api.read_namespaced_lease(self.name, self.namespace, _preload_content=False)
            )
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                lease["spec"]["renewTime"] = None
                self.api.replace_namespaced_lease(
                    self.name, self.namespace, lease, _preload_content=False
                )
        except Exception as exc:
            log.warning("cannot release the lease: %s", exc)


class ClientTooOld(QoschedError):
    """The installed Kubernetes client's ``call_api`` is not the one the fence wraps."""


def _check_call_api(base: type) -> None:
    """Refuse a client whose ``call_api`` does not begin ``(method, url)`` (the generated client
    of kubernetes 37 on; before, it began ``(resource_path, method)``): the fence reads the
    method from the first argument, and on such a client would wave every write through."""
    names = list(inspect.signature(base.call_api).parameters)[1:3]
    if names != ["method", "url"]:
        raise ClientTooOld(
            f"the installed kubernetes client's ApiClient.call_api takes {', '.join(names)} first; "
            "qosched's write fence needs the client of kubernetes 37 or later "
            "(pip install 'kubernetes>=37')"
        )


def fenced_client(api_client: Any, lease: LeaderLease) -> Any:
    """A client for ``api_client``'s server whose every write first passes ``lease.check()``
    (reads pass freely). The check is made in ``call_api``, the last step before the request
    leaves, so no write of the scheduler can skip it."""
    base = require().client.ApiClient
    _check_call_api(base)

    class Fenced(base):  # type: ignore[misc, valid-type]
        def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            if method.upper() in WRITES:
                lease.check()
            return super().call_api(method, url, *args, **kwargs)

    fenced = Fenced(api_client.configuration)
    fenced.user_agent = api_client.user_agent
    fenced.default_headers.update(api_client.default_headers)
    return fenced
