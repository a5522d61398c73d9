"""The InferenceService spec: read with every field, and each bad field refused at its line."""

from __future__ import annotations

import pytest

from qosched.cluster.pods.service_spec import parse_service_spec
from qosched.cluster.pods.workloads import RateSeries, ServiceSpec
from qosched.core.errors import InputError
from qosched.core.goals import BEST_EFFORT, Goal

SPEC = """\
apiVersion: qosched/v1
kind: InferenceService
metadata:
  name: resnet50-serving
spec:
  model: resnet50
  batch: 2
  priority: 3
  rate: {rps: 120}
  goal: {p99_latency_ms: 50}
  resources: {gpus: 1, gpuMilli: 500}
"""


def test_a_service_spec_reads_with_every_field() -> None:
    got = parse_service_spec(SPEC, source="svc.yaml")
    assert got.name == "resnet50-serving"
    assert got.service == ServiceSpec(
        "resnet50", RateSeries.constant(120), Goal("p99_latency", 0.050), 3, 2
    )
    assert (got.num_gpu, got.gpu_milli) == (1, 500)


def test_a_rate_over_time_and_defaults() -> None:
    text = (
        SPEC.replace("  batch: 2\n  priority: 3\n", "")
        .replace("rate: {rps: 120}", "rate: [{from_s: 0, rps: 10}, {from_s: 3600, rps: 40}]")
        .replace("goal: {p99_latency_ms: 50}", "goal: best_effort")
        .replace("{gpus: 1, gpuMilli: 500}", "{gpus: 2}")
    )
    got = parse_service_spec(text)
    assert got.service == ServiceSpec(
        "resnet50", RateSeries(((0.0, 10.0), (3600.0, 40.0))), BEST_EFFORT, 0, 1
    )
    assert (got.num_gpu, got.gpu_milli) == (2, 1000)


@pytest.mark.parametrize(
    ("old", "new", "field", "line", "message"),
    [
        ("kind: InferenceService", "kind: TrainingJob", "kind", 2, "expected InferenceService"),
        ("model: resnet50", "model: resnet5", "spec.model", 6, "unknown model 'resnet5'"),
        ("{rps: 120}", "{rps: 0}", "spec.rate.rps", 9, "positive number"),
        ("{rps: 120}", "[{from_s: 5, rps: 1}]", "spec.rate", 9, "starts at time 0"),
        ("{p99_latency_ms: 50}", "{p99_slowdown: 0.9}", "spec.goal.p99_slowdown", 10, r"\[1, "),
        ("{p99_latency_ms: 50}", "{p95_ms: 5}", "spec.goal.p95_ms", 10, "unknown key"),
        ("{p99_latency_ms: 50}", "{p99_slowdown: 2, throughput_rps: 5}", "spec.goal", 10,
         "exactly one"),
        ("gpuMilli: 500", "gpuMilli: 1500", "spec.resources.gpuMilli", 11, "1000"),
        ("{gpus: 1, gpuMilli: 500}", "{gpus: 2, gpuMilli: 500}", "spec.resources.gpuMilli",
         11, "only a one-GPU service"),
        ("  priority: 3\n", "  priority: -1\n", "spec.priority", 8, ">= 0|in \\[0"),
        ("  batch: 2\n", "  batch: 2\n  replicas: 3\n", "spec.replicas", 8, "unknown key"),
    ],
    ids=["kind", "unknown-model", "zero-rate", "rate-not-from-zero", "slowdown-below-one",
         "unknown-goal", "two-goals", "share-over-1000", "share-of-two-gpus",
         "negative-priority", "unknown-field"],
)  # fmt: skip
def test_a_bad_field_is_refused_at_its_line(old, new, field, line, message) -> None:
    assert old in SPEC
    with pytest.raises(InputError, match=message) as caught:
        parse_service_spec(SPEC.replace(old, new), source="svc.yaml")
    assert (caught.value.field, caught.value.line) == (field, line)
