"""How one scheduler replica runs (:class:`SchedulerConfig`), checked once, at construction:
the command line and the tests build it, :class:`~.scheduler.K8sScheduler` trusts it."""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field
from typing import Any

from qosched.backends.kubernetes.send import IN_FLIGHT, MAX_IN_FLIGHT
from qosched.cluster.spec import RESOURCES
from qosched.core.bounds import check_count, check_number, show_value
from qosched.core.errors import InputError
from qosched.trainingjob.jobspec import DNS_LABEL

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
