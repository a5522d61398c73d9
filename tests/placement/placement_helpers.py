import itertools

import numpy as np
import torch
from torch import nn

from qosched.placement.ir import Problem, TenantGraph, loads, switches
from qosched.placement.timing import TimedCall


def random_tenant(rng, n, name="t", goal=None, boundaries=None):
    return TenantGraph.from_costs(
        name,
        rng.uniform(0.1, 2.0, n),
        rng.uniform(0.01, 1.0, n),
        rng.uniform(0.0, 0.5, n - 1),
        input_to_gpu_s=float(rng.uniform(0, 0.3)),
        output_from_gpu_s=float(rng.uniform(0, 0.3)),
        latency_goal_s=goal,
        layer_boundaries=boundaries,
    )


def random_problem(seed, tenants, n):
    rng = np.random.default_rng(seed)
    return Problem(tuple(random_tenant(rng, n, f"t{i}") for i in range(tenants)))


def brute_assignments(tenant, k):
    for a in itertools.product(("cpu", "gpu"), repeat=tenant.n_units):
        if switches(a) <= k:
            yield a


def brute_best(problem, k):
    """Minimum bottleneck over every joint assignment meeting goals (inf when none)."""
    per = []
    for t in problem.tenants:
        opts = []
        for a in brute_assignments(t, k):
            ld = loads(t, a)
            if t.latency_goal_s is None or sum(ld) <= t.latency_goal_s:
                opts.append(ld)
        per.append(opts)
    best = float("inf")
    for combo in itertools.product(*per):
        best = min(best, max(sum(c[r] for c in combo) for r in range(3)))
    return best


class Residual(nn.Module):
    """Two branches joined by an add, then a head: a cut can fall only outside the block."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.a(x)) + self.b(x)
        return self.head(torch.tanh(y))


def residual(batch: int = 2) -> tuple[nn.Module, tuple]:
    return Residual(), (torch.empty(batch, 16),)


def meta_model() -> tuple[nn.Module, tuple]:
    with torch.device("meta"):
        return nn.Linear(2, 2), (torch.empty(1, 2),)


class EncoderDecoder(nn.Module):
    """An encoder-decoder in miniature: the decoder's own input waits through the encoder, and
    every decoder layer reads the encoder's output (as cross-attention does), so two tensors
    are live everywhere between the first and the last operator and no one-tensor cut exists."""

    def __init__(self, layers: int = 48, width: int = 8) -> None:
        super().__init__()
        self.encoder = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))
        self.decoder = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))

    def forward(self, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        for layer in self.encoder:
            source = torch.tanh(layer(source))
        for layer in self.decoder:
            target = torch.tanh(layer(target)) * source
        return target


def encoder_decoder(batch: int = 2) -> tuple[nn.Module, tuple]:
    return EncoderDecoder(), (torch.empty(batch, 8), torch.empty(batch, 8))


class ScriptedTimer:
    """A ``placement.timing.Timer`` that plays a machine: every call really runs (as under the
    real timer, so the profiled program computes what it would), and the ``n``-th call of the
    whole session (warm-ups included, from 0) took ``wall(n)`` seconds, for ``waited(n)`` of
    which a thread of the process waited for a core."""

    def __init__(self, wall, waited=lambda n: 0.0):
        self.wall = wall
        self.waited = waited
        self.calls = 0

    def __call__(self, call):
        call()
        n = self.calls
        self.calls += 1
        return TimedCall(self.wall(n), self.waited(n))


def quiet(seconds=1e-3):
    """Every call the same time, no thread ever waiting for a core: a quiet machine."""
    return ScriptedTimer(lambda n: seconds)
