"""The pod replay's entry point: the plain replay (``replay.py``) or, under ``colocation=
"harvest"``, the harvesting one (``harvest.py``), which builds on the plain one's steps."""

from __future__ import annotations

import math
from collections.abc import Sequence

from qosched.cluster.pods.costs import Costs, Sharing
from qosched.cluster.pods.fragmentation import TaskMix
from qosched.cluster.pods.harvest import Harvest, HarvestReplay
from qosched.cluster.pods.nodes import PodCluster
from qosched.cluster.pods.policies import PodPolicy
from qosched.cluster.pods.replay import (
    COLOCATIONS,
    DEFAULT_WINDOW_S,
    QUEUES,
    ReplayRun,
    _PodReplay,
)
from qosched.cluster.pods.trace import Pod


def replay(
    cluster: PodCluster,
    pods: Sequence[Pod],
    policy: PodPolicy,
    *,
    costs: Costs,
    sharing: Sharing,
    colocation: str = "any",
    window_s: float = DEFAULT_WINDOW_S,
    seed: int = 0,
    workload: TaskMix | None = None,
    queue: str = "arrival",
    harvest: Harvest | None = None,
) -> ReplayRun:
    """Run ``pods`` (in order of ``creation_s``, the given order among equals) on ``cluster``
    under ``policy`` (module doc). ``costs`` gives each model's cost alone, ``sharing`` the
    slowdowns of a GPU's parties, ``colocation`` (a key of :data:`COLOCATIONS`) which pods may
    share a GPU; ties between nodes go to the first in a ``seed``-ed random order of the
    nodes, as in ``place_pods``. ``colocation="harvest"`` takes GPUs back from training for
    services and keeps training's promises by the rules of ``cluster/pods/harvest.py``, with
    ``harvest``'s settings (its defaults when None)."""
    if queue not in QUEUES:
        raise ValueError(f"unknown queue order {queue!r}; use {', '.join(QUEUES)}")
    if colocation not in COLOCATIONS:
        raise ValueError(f"unknown colocation {colocation!r}; use {', '.join(COLOCATIONS)}")
    if not (math.isfinite(window_s) and window_s > 0):
        raise ValueError(f"window_s must be finite and > 0, got {window_s!r}")
    if not pods:
        raise ValueError("no pod to replay")
    args = (cluster, pods, policy, costs, sharing, colocation, window_s, seed,
            workload or policy.workload, queue)  # fmt: skip
    if colocation == "harvest":
        return HarvestReplay(*args, harvest=harvest or Harvest()).run()
    if harvest is not None:
        raise ValueError(f"harvest settings need colocation 'harvest', got {colocation!r}")
    return _PodReplay(*args).run()
