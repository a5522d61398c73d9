"""``GET /metrics``: a service's ``ServiceMetrics`` snapshot in Prometheus' exposition formats,
written by ``prometheus_client`` (the text format 0.0.4, or OpenMetrics when the scraper asks
for it).

A job's gauge is labelled ``job_id``, not ``job``: Prometheus sets ``job`` on every series it
scrapes (the scrape job's name), and a ``job`` label of ours would be renamed ``exported_job``.
Imported by the API's metrics route only, so the clients never load ``prometheus_client``.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from qosched.backends.local.jobview import Outcome
from qosched.backends.local.metrics import ServiceMetrics

#: (name, help, ``ServiceMetrics`` attribute) of the service-wide gauges.
GAUGES = (
    ("qosched_queue_length", "Jobs waiting for CPUs (queued or preempted).", "queued"),
    ("qosched_running_jobs", "Jobs running now.", "running"),
    ("qosched_capacity_cpus", "CPU cores the service schedules.", "capacity_cpus"),
)
ALLOCATED = "qosched_allocated_cpus"
#: A counter family; its samples are exposed as ``qosched_job_outcomes_total``.
OUTCOMES_FAMILY = "qosched_job_outcomes"


class _Snapshot(Collector):
    """Yields one ``ServiceMetrics`` snapshot, taken before the registry asks."""

    def __init__(self, metrics: ServiceMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        metrics = self.metrics
        for name, help_text, attribute in GAUGES:
            yield GaugeMetricFamily(name, help_text, value=int(getattr(metrics, attribute)))
        allocated = GaugeMetricFamily(
            ALLOCATED, "CPU cores each running job holds now.", labels=["job_id"]
        )
        for job_id in sorted(metrics.allocated_cpus):
            allocated.add_metric([job_id], int(metrics.allocated_cpus[job_id]))
        yield allocated
        outcomes = CounterMetricFamily(
            OUTCOMES_FAMILY, "Finished jobs by outcome.", labels=["outcome"]
        )
        known = [outcome.value for outcome in Outcome]
        extra = sorted(set(metrics.outcomes) - set(known))
        for outcome in (*known, *extra):  # every known outcome, even at 0
            outcomes.add_metric([outcome], int(metrics.outcomes.get(outcome, 0)))
        yield outcomes


def exposition(metrics: ServiceMetrics, accept: str | None = None) -> tuple[bytes, str]:
    """``metrics`` encoded for a scraper that sent ``Accept: accept``; returns the body and its
    content type."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(metrics))
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type
