"""What the co-location surrogate reads of a pod's model, and each party's slowdown on a GPU.

A pod's workload (``workloads``) becomes a ``gpushare.colocation.Profile`` from its model's
:class:`ModelCost` (one request or step alone, from the GPU level's kernel estimates) and what
the pod states (rate, goal, priority). A GPU's parties are slowed by a :class:`Sharing` model:

- ``fggr`` (:class:`SurrogateSharing`): the GPU level's spatial sharing under ``fggr``, each
  party's slowdown beside each other one from the co-location surrogate
  (``gpushare/colocation.py``); beside several, the product of the pairs' (the surrogate knows
  pairs only: the product is the stated rule, and it never predicts less than the worst pair);
- ``time-slicing`` (:class:`TimeSlicing`, Gandiva-like): the GPU's time is dealt out in turns,
  so each of ``n`` busy parties runs at ``1/n`` of its speed alone and a request waits for its
  turn: every party is slowed ``n`` times.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from qosched.gpushare.colocation import Profile, Surrogate, allowed_slowdown


@dataclass(frozen=True, slots=True)
class ModelCost:
    """One request (step) of a model alone on the reference GPU: its time, and the time-weighted
    SM share, DRAM bandwidth share and mean kernel time the surrogate reads."""

    request_s: float
    sm: float
    bandwidth: float
    kernel_s: float

    def __post_init__(self) -> None:
        for name in ("request_s", "kernel_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be finite and > 0, got {value!r}")
        for name in ("sm", "bandwidth"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {value!r}")


#: The cost of ``model`` at ``batch`` (a zoo name or ``hf:``).
Costs = Callable[[str, int], ModelCost]


def estimated_costs(gpu: str) -> Costs:
    """Costs from the GPU level's kernel estimates on the catalog GPU ``gpu``, each model and
    batch estimated once (no model runs)."""
    from qosched.gpushare.colocation import Workload, profile
    from qosched.gpushare.estimate import estimate_model
    from qosched.gpushare.goals import BEST_EFFORT
    from qosched.hardware.catalog import gpu as catalog_gpu

    device = catalog_gpu(gpu)
    known: dict[tuple[str, int], ModelCost] = {}

    def costs(model: str, batch: int) -> ModelCost:
        key = (model, batch)
        if key not in known:
            kernels = estimate_model(model, device, batch=batch).kernels
            loop = Workload(model, model, batch, "training", 0, BEST_EFFORT)
            p = profile(loop, kernels, device)
            known[key] = ModelCost(p.request_s, p.sm, p.bandwidth, p.kernel_s)
        return known[key]

    return costs


def party(
    name: str, cost: ModelCost, priority: int, goal, rate_rps: float | None = None
) -> Profile:
    """A GPU party's profile: an inference at ``rate_rps`` on this GPU, or a step loop (None)."""
    duty = 1.0 if rate_rps is None else min(1.0, rate_rps * cost.request_s)
    return Profile(name, priority, goal, cost.request_s, duty, cost.sm, cost.bandwidth, rate_rps,
                   cost.kernel_s)  # fmt: skip


class Sharing(Protocol):
    """How the parties of one GPU slow each other down."""

    name: str

    def slowdowns(self, parties: Sequence[Profile]) -> list[float]:
        """Called whenever a GPU's parties or their rates change; returns each party's slowdown
        (1.0: as fast as alone), in the order given."""
        ...


@dataclass(frozen=True)
class SurrogateSharing:
    """``fggr`` spatial sharing, slowdowns from the co-location surrogate (module doc)."""

    surrogate: Surrogate
    name: str = "fggr"

    def slowdowns(self, parties: Sequence[Profile]) -> list[float]:
        result = [1.0] * len(parties)
        for i in range(len(parties)):
            for j in range(i + 1, len(parties)):
                a, b = self.surrogate.pair(parties[i], parties[j])
                result[i] *= a
                result[j] *= b
        return result


@dataclass(frozen=True)
class TimeSlicing:
    """Turns on the GPU, Gandiva-like: each of ``n`` parties is slowed ``n`` times."""

    name: str = "time-slicing"

    def slowdowns(self, parties: Sequence[Profile]) -> list[float]:
        return [float(len(parties))] * len(parties)


def allowed(goal, p: Profile, total_rate_rps: float | None = None) -> float:
    """The largest slowdown ``goal`` allows the party ``p`` (inf for best effort); a throughput
    goal is read against the service's whole rate, ``total_rate_rps``, over all its GPUs."""
    if goal.kind == "throughput_rps" and total_rate_rps is not None:
        return total_rate_rps / goal.value
    return allowed_slowdown(goal, p)
