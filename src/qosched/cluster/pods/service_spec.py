"""An inference service as a spec document, beside the ``TrainingJob`` kind, validated once, here.

A spec looks like::

    apiVersion: qosched/v1
    kind: InferenceService
    metadata:
      name: resnet50-serving
    spec:
      model: resnet50                 # a zoo name or hf:<model_type>
      batch: 1                        # optional (default 1)
      priority: 2                     # optional (default 0), larger is more important
      rate: {rps: 120}                # or a rate over time: [{from_s: 0, rps: 120}, ...]
      goal: {p99_latency_ms: 50}      # the GPU level's vocabulary, or best_effort
      resources: {gpus: 1, gpuMilli: 500}   # part of one GPU, or whole GPUs (gpuMilli: 1000)

``resources`` asks for GPUs as Kubernetes GPU-sharing device plugins take them: ``gpus`` GPUs
with ``gpuMilli`` thousandths of each (default 1000), only a one-GPU service asking for part of
one. The rest reads as the pod trace's workload cells read (``workloads``), with the same
bounds. Every error names the file, the YAML line and the field as a dotted path
(``spec.resources.gpuMilli``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qosched.cluster.pods.trace import MAX_GPUS, MILLI
from qosched.cluster.pods.workloads import (
    MAX_PRIORITY,
    MAX_RATE_RPS,
    MAX_RATE_STEPS,
    RateSeries,
    ServiceSpec,
    check_model,
)
from qosched.core.bounds import LATEST_TIME_S, MAX_BATCH, show_value
from qosched.core.errors import InputError
from qosched.core.spec_reader import SpecReader
from qosched.core.yaml_lines import join_path, load_with_lines, read_spec_file

API_VERSION = "qosched/v1"
KIND = "InferenceService"
_SPEC_KEYS = ("model", "batch", "priority", "rate", "goal", "resources")


@dataclass(frozen=True, slots=True)
class InferenceService:
    """A service spec: its name, what it serves, and the GPUs it asks for."""

    name: str
    service: ServiceSpec
    num_gpu: int
    gpu_milli: int


def load_service_spec(path: str | Path) -> InferenceService:
    return parse_service_spec(read_spec_file(path, "service spec"), source=path)


def parse_service_spec(text: str, *, source: str | Path = "<spec>") -> InferenceService:
    data, lines = load_with_lines(text, source)
    return _Reader(source, lines).read(data)


class _Reader(SpecReader):
    def read(self, data: Any) -> InferenceService:
        top = self.mapping(data, "", ("apiVersion", "kind", "metadata", "spec"))
        if self.required(top, "", "apiVersion") != API_VERSION:
            raise self.error("apiVersion", f"expected {API_VERSION}, got "
                             f"{show_value(top['apiVersion'])}")  # fmt: skip
        if self.required(top, "", "kind") != KIND:
            raise self.error("kind", f"expected {KIND}, got {show_value(top['kind'])}")
        meta = self.mapping(self.required(top, "", "metadata"), "metadata", ("name",))
        name = self.label(self.required(meta, "metadata", "name"), "metadata.name")
        spec = self.mapping(self.required(top, "", "spec"), "spec", _SPEC_KEYS)
        model = self.text(self.required(spec, "spec", "model"), "spec.model")
        try:
            check_model(model, source=self.source, line=self.line("spec.model"))
        except InputError as exc:
            raise self.error("spec.model", exc.reason) from None
        batch = self.whole(spec.get("batch", 1), "spec.batch", 1, MAX_BATCH)
        priority = self.whole(spec.get("priority", 0), "spec.priority", 0, MAX_PRIORITY)
        rate = self.rate(self.required(spec, "spec", "rate"), "spec.rate")
        goal = self.goal(self.required(spec, "spec", "goal"), "spec.goal")
        num_gpu, gpu_milli = self.resources(self.required(spec, "spec", "resources"))
        return InferenceService(name, ServiceSpec(model, rate, goal, priority, batch), num_gpu,
                                gpu_milli)  # fmt: skip

    def rate(self, value: Any, path: str) -> RateSeries:
        if isinstance(value, dict):
            fields = self.mapping(value, path, ("rps",))
            rps = self.required(fields, path, "rps")
            return RateSeries.constant(self.rps(rps, join_path(path, "rps")))
        items = self.sequence(value, path, what="list of {from_s, rps} steps")
        if len(items) > MAX_RATE_STEPS:
            raise self.error(path, f"at most {MAX_RATE_STEPS} steps, got {len(items)}")
        steps = []
        for index, item in enumerate(items):
            where = f"{path}[{index}]"
            step = self.mapping(item, where, ("from_s", "rps"))
            start = self.number(self.required(step, where, "from_s"), f"{where}.from_s",
                                minimum=0.0, maximum=LATEST_TIME_S)  # fmt: skip
            steps.append((start, self.rps(self.required(step, where, "rps"), f"{where}.rps")))
        try:
            return RateSeries(tuple(steps))
        except InputError as exc:
            raise self.error(path, exc.reason) from None

    def rps(self, value: Any, path: str) -> float:
        return self.number(value, path, minimum=0.0, maximum=MAX_RATE_RPS, positive=True)

    def resources(self, value: Any) -> tuple[int, int]:
        path = "spec.resources"
        fields = self.mapping(value, path, ("gpus", "gpuMilli"))
        gpus = self.whole(self.required(fields, path, "gpus"), f"{path}.gpus", 1, MAX_GPUS)
        milli = self.whole(fields.get("gpuMilli", MILLI), f"{path}.gpuMilli", 1, MILLI)
        if gpus > 1 and milli != MILLI:
            raise self.error(f"{path}.gpuMilli", f"a service of {gpus} GPUs asks for {milli} "
                             "thousandths of each; only a one-GPU service may ask for part of "
                             "a GPU (expected 1000)")  # fmt: skip
        return gpus, milli
