"""Workloads for the pods of Alibaba's GPU-sharing trace, by a stated, seeded rule.

The trace records what each pod asked for, not what it ran. ``trace import --from
alibaba-gpu-2023`` gives each GPU pod a workload (``docs/contracts.md``):

- a latency-sensitive pod (``qos`` LS) is a **service**: a model drawn from
  :data:`SERVING_MODELS` at batch 1, priority 1, a goal ``p99_slowdown`` drawn from
  :data:`SERVICE_SLOWDOWNS`, and a constant rate that keeps each of its GPUs busy alone for a
  share ``u x gpu_milli / 1000`` of the time, ``u`` drawn uniformly from :data:`LOAD`: the
  service asked for about the share of a GPU its load needs;
- a best-effort pod (``qos`` BE) is **best-effort training**: a model drawn from
  :data:`TRAINING_MODELS` at batch :data:`TRAINING_BATCH`, priority 0, no deadline, and as
  much work as the pod lived in the trace (``deletion_s - creation_s`` seconds alone);
- any other pod (no GPU, another QoS class, or a BE pod deleted when created) runs no
  modelled workload.

Each draw comes from a generator seeded by ``(seed, pod name)``, so a pod's workload does not
depend on the other pods or their order.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import replace

from qosched.cluster.pods.trace import MILLI, Pod
from qosched.cluster.pods.workloads import RateSeries, ServiceSpec, TrainingSpec
from qosched.core.goals import Goal

SERVING_MODELS = ("resnet50", "bert_base", "mobilenet", "resnet", "bert")
TRAINING_MODELS = ("resnet50", "bert_base", "resnet", "mobilenet")
TRAINING_BATCH = 8
SERVICE_SLOWDOWNS = (1.25, 1.5, 2.0)
#: The share of its requested GPU share a service keeps busy alone, drawn uniformly.
LOAD = (0.2, 0.8)
SERVICE_PRIORITY = 1
TRAINING_PRIORITY = 0

#: Seconds one request (or step) of ``model`` at ``batch`` takes alone on the reference GPU.
RequestTime = Callable[[str, int], float]


def assign_workloads(pods: Sequence[Pod], request_time: RequestTime, seed: int = 0) -> list[Pod]:
    """``pods`` with workloads by the module's rule."""
    return [replace(pod, workload=_workload(pod, request_time, seed)) for pod in pods]


def _workload(pod: Pod, request_time: RequestTime, seed: int) -> ServiceSpec | TrainingSpec | None:
    if pod.num_gpu == 0:
        return None
    rng = random.Random(f"{seed}:{pod.pod_id}")
    if pod.qos == "LS":
        model = rng.choice(SERVING_MODELS)
        goal = Goal("p99_slowdown", rng.choice(SERVICE_SLOWDOWNS))
        duty = rng.uniform(*LOAD) * pod.gpu_milli / MILLI
        rate = round(duty * pod.num_gpu / request_time(model, 1), 3)
        return ServiceSpec(model, RateSeries.constant(max(rate, 0.001)), goal, SERVICE_PRIORITY)
    if pod.qos == "BE" and pod.deletion_s is not None and pod.deletion_s > pod.creation_s:
        model = rng.choice(TRAINING_MODELS)
        work = pod.deletion_s - pod.creation_s
        return TrainingSpec(model, work, None, TRAINING_PRIORITY, TRAINING_BATCH)
    return None
