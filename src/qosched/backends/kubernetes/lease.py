"""Leader election on a ``coordination.k8s.io/v1`` Lease, so two replicas never both schedule.

:meth:`LeaderLease.hold` is called at the start of every scheduling round. It renews the Lease
when this replica holds it, takes it when it is free or its holder stopped renewing for longer
than ``leaseDurationSeconds``, and otherwise reports that another replica leads. Every write is
a ``replace`` carrying the ``resourceVersion`` read just before, so of two replicas racing for
an expired Lease the API server accepts one and answers the other 409 Conflict.

A replica that cannot renew (an API error, a conflict) stops scheduling at once, before its
Lease runs out, so the leader's term and its successor's never overlap while clocks agree
within ``lease_duration_s - renew_every_s`` (the Kubernetes controllers make the same
assumption).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from qosched.backends.kubernetes.kube import format_micro_time, parse_time, read_json, status_of
from qosched.core.errors import QoschedError

log = logging.getLogger(__name__)


class NotLeading(QoschedError):
    """A write was about to leave a replica that does not hold the Lease (or whose renew
    deadline passed): the round that made it is abandoned."""


class LeaderLease:
    """See the module docstring. ``coordination`` is a ``CoordinationV1Api``."""

    def __init__(
        self,
        coordination: Any,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration_s: int = 15,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = coordination
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration_s = lease_duration_s
        self.clock = clock
        self.leading = False
        self.transitions = 0  # how many times this replica took the lease

    def hold(self) -> bool:
        """Renew or take the Lease; True when this replica leads for the coming round."""
        now = self.clock()
        try:
            lease = read_json(
                self.api.read_namespaced_lease(self.name, self.namespace, _preload_content=False)
            )
        except Exception as exc:
            if status_of(exc) == 404:
                return self._create(now)
            return self._lost(f"cannot read the lease: {exc}")
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        renewed = parse_time(spec.get("renewTime")) or 0.0
        duration = spec.get("leaseDurationSeconds") or self.lease_duration_s
        if holder and holder != self.identity and now < renewed + duration:
            return self._lost(None)
        taking = holder != self.identity
        spec = dict(spec)
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=self.lease_duration_s,
            renewTime=format_micro_time(now),
        )
        if taking:
            spec["acquireTime"] = format_micro_time(now)
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        lease["spec"] = spec
        try:
            self.api.replace_namespaced_lease(
                self.name, self.namespace, lease, _preload_content=False
            )
        except Exception as exc:
            return self._lost(f"cannot {'take' if taking else 'renew'} the lease: {exc}")
        return self._won(taking)

    def _create(self, now: float) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.lease_duration_s,
                "acquireTime": format_micro_time(now),
                "renewTime": format_micro_time(now),
                "leaseTransitions": 0,
            },
        }
        try:
            self.api.create_namespaced_lease(self.namespace, body, _preload_content=False)
        except Exception as exc:  # 409: another replica created it first
            return self._lost(f"cannot create the lease: {exc}")
        return self._won(True)

    def _won(self, taking: bool) -> bool:
        if taking or not self.leading:
            self.transitions += 1
            log.info("%s leads (lease %s/%s)", self.identity, self.namespace, self.name)
        self.leading = True
        return True

    def _lost(self, why: str | None) -> bool:
        if self.leading:
            log.warning("%s stops leading: %s", self.identity, why or "another replica holds it")
        self.leading = False
        return False

    def release(self) -> None:
        """Give the Lease up on a clean shutdown, so a successor need not wait for it to expire."""
        if not self.leading:
            return
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
        self.leading = False
