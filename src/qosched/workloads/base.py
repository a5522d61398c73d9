"""What a built-in training workload is: a model, its optimizer, a data stream fixed by a seed."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from qosched.core.errors import InputError
from qosched.workloads.optim import Adam

# Bumped whenever the layout of ``TrainingState.state_dict`` changes, so an old checkpoint is
# refused with a clear error instead of being half-loaded. 2: the optimizer's state is
# ``qosched.workloads.optim.Adam``'s, no longer ``torch.optim``'s.
STATE_FORMAT = 2

Batch = tuple[torch.Tensor, torch.Tensor]


class DataStream(Protocol):
    """Synthetic training data that is a pure function of ``(seed, iteration)``.

    Because batch ``i`` depends on nothing but the seed and ``i``, the stream's position *is* the
    iteration count: a resumed run sees exactly the batches an uninterrupted run would have seen.
    """

    def batch(self, iteration: int) -> Batch:
        """Inputs and targets of training iteration ``iteration`` (0-based)."""
        ...


@dataclass(slots=True)
class TrainingState:
    """One training run in memory. ``state_dict`` captures all of it for an exact resume."""

    workload: str
    seed: int
    batch_size: int
    model: nn.Module
    optimizer: Adam
    data: DataStream
    iteration: int = 0

    def state_dict(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "workload": self.workload,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "iteration": self.iteration,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            # Nothing in the built-in steps draws from the global generator today (no dropout,
            # data has its own generators); it is saved so a model that does still resumes exactly.
            "torch_rng": torch.get_rng_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict`` of a run with the same workload, seed and batch size."""
        if state.get("format") != STATE_FORMAT:
            raise InputError(
                f"unsupported training-state format {state.get('format')!r}; "
                f"expected {STATE_FORMAT}",
                field="format",
            )
        for name in ("workload", "seed", "batch_size"):
            if state.get(name) != getattr(self, name):
                raise InputError(
                    f"saved state has {state.get(name)!r}, this run has {getattr(self, name)!r}; "
                    "a state only resumes the run it came from",
                    field=name,
                )
        iteration = state.get("iteration")
        if not isinstance(iteration, int) or isinstance(iteration, bool) or iteration < 0:
            raise InputError(f"expected a whole number >= 0, got {iteration!r}", field="iteration")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        self.iteration = iteration


class WorkloadFactory(Protocol):
    """A built-in workload, registered by ``name`` in ``qosched.workloads.WORKLOADS``.

    ``build`` is called once per process (fresh run or resume: the caller then loads a saved
    state into the result); ``step`` is called once per training iteration and returns that
    iteration's loss. Both are deterministic for a given seed and thread count.
    """

    name: str
    default_batch_size: int

    def build(self, seed: int, batch_size: int | None = None) -> TrainingState: ...

    def step(self, state: TrainingState) -> float: ...


def check_seed(seed: int) -> int:
    # torch.manual_seed accepts more, but one range everywhere keeps seeds portable across tools.
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
        raise InputError(f"expected a whole number in [0, 2**63), got {seed!r}", field="seed")
    return seed


def check_batch_size(batch_size: int | None, default: int) -> int:
    if batch_size is None:
        return default
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise InputError(f"expected a whole number >= 1, got {batch_size!r}", field="batch_size")
    return batch_size


def seeded_generator(seed: int, *parts: object) -> torch.Generator:
    """A CPU generator keyed by ``seed`` and ``parts`` (a tag, an iteration, ...).

    Hashing keeps nearby keys independent: ``(seed=1, iteration=2)`` and ``(seed=2, iteration=1)``
    must not share a stream, as a plain ``seed + iteration`` would make them.
    """
    key = "/".join(str(part) for part in (seed, *parts)).encode()
    digest = hashlib.blake2b(key, digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)


def train_step(
    state: TrainingState, loss_of: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
) -> float:
    """One optimizer step on batch ``state.iteration``; advances the iteration count."""
    inputs, targets = state.data.batch(state.iteration)
    state.model.train()
    state.optimizer.zero_grad(set_to_none=True)
    loss = loss_of(state.model, inputs, targets)
    loss.backward()
    state.optimizer.step()
    state.iteration += 1
    return float(loss.detach())
