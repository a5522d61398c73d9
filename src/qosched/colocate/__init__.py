"""The GPU level's estimates for the cluster level: a model's cost from its kernel estimates,
and the co-location surrogate as the cluster's model of GPU sharing (``cluster.pods.costs``).

It sits above both levels (``docs/ARCHITECTURE.md``, "Layers and imports"): the cluster's run
takes what is here as parameters and never imports the GPU level itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from qosched.cluster.pods.costs import Costs, Load, ModelCost
from qosched.gpushare.colocation import Profile, Surrogate


def estimated_costs(gpu: str) -> Costs:
    """Costs from the GPU level's kernel estimates on the catalog GPU ``gpu``, each model and
    batch estimated once (no model runs)."""
    from qosched.core.goals import BEST_EFFORT
    from qosched.gpushare.colocation import Workload, profile
    from qosched.gpushare.estimate import estimate_model
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


def as_profile(load: Load) -> Profile:
    """The surrogate's profile of a cluster party (the same fields, in the same order)."""
    return Profile(*(getattr(load, f.name) for f in dataclasses.fields(Profile)))


@dataclass(frozen=True)
class SurrogateSharing:
    """``fggr`` spatial sharing, each party's slowdown from the co-location surrogate, beside
    several the product of the pairs' (``cluster.pods.costs``)."""

    surrogate: Surrogate
    name: str = "fggr"

    def slowdowns(self, parties: Sequence[Load]) -> list[float]:
        profiles = [as_profile(p) for p in parties]
        result = [1.0] * len(profiles)
        for i in range(len(profiles)):
            for j in range(i + 1, len(profiles)):
                a, b = self.surrogate.pair(profiles[i], profiles[j])
                result[i] *= a
                result[j] *= b
        return result
