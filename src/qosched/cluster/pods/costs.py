"""What a GPU's parties are, for the cluster level, and how they slow each other down.

A pod's workload (``workloads``) becomes a :class:`Load` from its model's :class:`ModelCost` (one
request or step alone) and what the pod states (rate, goal, priority): the same quantities the GPU
level's co-location surrogate reads of a workload (``gpushare.colocation.Profile``). A GPU's
parties are slowed by a :class:`Sharing` model, which the run takes as a parameter:

- ``fggr`` (``qosched.colocate.SurrogateSharing``): the GPU level's spatial sharing under
  ``fggr``, each party's slowdown beside each other one from the co-location surrogate; beside
  several, the product of the pairs' (the surrogate knows pairs only: the product is the stated
  rule, and it never predicts less than the worst pair); the costs come from the GPU level's
  kernel estimates (``qosched.colocate.estimated_costs``);
- ``time-slicing`` (:class:`TimeSlicedSharing`, Gandiva-like): the GPU's time is dealt out in turns,
  so each of ``n`` parties runs at ``1/n`` of its speed alone and a request waits for its turn:
  every party is slowed ``n`` times.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from qosched.core.goals import Goal, slowdown_allowed


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


@dataclass(frozen=True, slots=True)
class Load:
    """One party of a GPU as a sharing model reads it: ``gpushare.colocation.Profile``'s fields,
    in its order (``duty``: the share of time it keeps the GPU busy alone)."""

    name: str
    priority: int
    goal: Goal
    request_s: float
    duty: float
    sm: float
    bandwidth: float
    rate_rps: float | None  # None: a step loop
    kernel_s: float


def party(
    name: str, cost: ModelCost, priority: int, goal: Goal, rate_rps: float | None = None
) -> Load:
    """A GPU party: an inference at ``rate_rps`` on this GPU, or a step loop (None)."""
    duty = 1.0 if rate_rps is None else min(1.0, rate_rps * cost.request_s)
    return Load(name, priority, goal, cost.request_s, duty, cost.sm, cost.bandwidth, rate_rps,
                cost.kernel_s)  # fmt: skip


class Sharing(Protocol):
    """How the parties of one GPU slow each other down."""

    name: str

    def slowdowns(self, parties: Sequence[Load]) -> list[float]:
        """Called whenever a GPU's parties or their rates change; returns each party's slowdown
        (1.0: as fast as alone), in the order given."""
        ...


@dataclass(frozen=True)
class TimeSlicedSharing:
    """Turns on the GPU, Gandiva-like: each of ``n`` parties is slowed ``n`` times."""

    name: str = "time-slicing"

    def slowdowns(self, parties: Sequence[Load]) -> list[float]:
        return [float(len(parties))] * len(parties)


def allowed(goal: Goal, p: Load, total_rate_rps: float | None = None) -> float:
    """The largest slowdown ``goal`` allows the party ``p`` (``core.goals.slowdown_allowed``;
    inf for best effort); a throughput goal is read against the service's whole rate,
    ``total_rate_rps``, over all its GPUs."""
    rate = p.rate_rps if total_rate_rps is None else total_rate_rps
    return slowdown_allowed(goal, p.request_s, rate)
