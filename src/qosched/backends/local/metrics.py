"""The service's numbers for ``GET /metrics``: what the API's metrics route reads from the
service and ``prometheus.py`` writes out. Apart from both, so that the exposition (which only the
route imports, late) and the API need not import each other."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ServiceMetrics:
    """The local service's numbers at one moment, as ``GET /metrics`` exposes them."""

    capacity_cpus: int
    queued: int  # jobs waiting for CPUs (queued or preempted)
    running: int
    allocated_cpus: dict[str, int] = field(default_factory=dict)  # job id -> cores held now
    outcomes: dict[str, int] = field(default_factory=dict)  # Outcome value -> finished jobs
