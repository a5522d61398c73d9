"""Adam and AdamW for the built-in workloads, without ``torch.optim``.

Any use of a ``torch.optim`` optimizer (its constructor, ``zero_grad``, ``state_dict``) imports
``torch._dynamo`` on first call: 1.1-1.6 s of one core on the 2-core development machine, as
long again as importing PyTorch itself, paid by every runner start while the job holds all its
cores. The update is torch's single-tensor Adam (``torch.optim.adam._single_tensor_adam``):
``weight_decay`` is decoupled as in AdamW when ``decoupled``, added to the gradient as in Adam
otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

from qosched.core.errors import InputError


class Adam:
    """Adam over ``params``; ``zero_grad``, ``step``, ``state_dict`` and ``load_state_dict`` as
    ``torch.optim.Adam`` has them (the state's layout is this class's own)."""

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float,
        *,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        decoupled: bool = False,
    ) -> None:
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("the optimizer got no parameters to train")
        self.lr, self.betas, self.eps = lr, betas, eps
        self.weight_decay, self.decoupled = weight_decay, decoupled
        self.steps = 0
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        beta1, beta2 = self.betas
        self.steps += 1
        step_size = self.lr / (1 - beta1**self.steps)
        correction2_sqrt = math.sqrt(1 - beta2**self.steps)
        for p, avg, avg_sq in zip(self.params, self.exp_avg, self.exp_avg_sq, strict=True):
            if p.grad is None:
                continue
            grad = p.grad
            if self.weight_decay and self.decoupled:
                p.mul_(1 - self.lr * self.weight_decay)
            elif self.weight_decay:
                grad = grad.add(p, alpha=self.weight_decay)
            avg.lerp_(grad, 1 - beta1)
            avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (avg_sq.sqrt() / correction2_sqrt).add_(self.eps)
            p.addcdiv_(avg, denom, value=-step_size)

    def state_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "exp_avg": [t.clone() for t in self.exp_avg],
            "exp_avg_sq": [t.clone() for t in self.exp_avg_sq],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict`` of an optimizer over parameters of the same shapes."""
        steps = state.get("steps")
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
            raise InputError(f"expected a whole number >= 0, got {steps!r}", field="steps")
        moments = []
        for name in ("exp_avg", "exp_avg_sq"):
            saved = state.get(name)
            if not isinstance(saved, list) or len(saved) != len(self.params):
                raise InputError(
                    f"expected {len(self.params)} tensors, got {type(saved).__name__}", field=name
                )
            for i, (tensor, p) in enumerate(zip(saved, self.params, strict=True)):
                if not isinstance(tensor, torch.Tensor) or tensor.shape != p.shape:
                    shape = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else tensor
                    raise InputError(
                        f"tensor {i}: expected shape {tuple(p.shape)}, got {shape!r}"[:160],
                        field=name,
                    )
            moments.append([t.to(p.dtype).clone() for t, p in zip(saved, self.params, strict=True)])
        self.steps = steps
        self.exp_avg, self.exp_avg_sq = moments
