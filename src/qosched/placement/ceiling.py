"""The most an operator can plausibly take on a processor: a multiple of its roofline estimate.

A third check on a measured operator time (``placement.timing``), for a disturbance the spread
and the wait share miss. The estimate is the one ``placement.costs`` plans with where nothing is
measured: the roofline at half the peak plus a dispatch overhead, from the operator's FLOPs
(``graph.capture.operator_flops``) and the bytes of its tensors. Measured on this machine's two
cores (resnet, mobilenet, bert, mlp; 264 operators), every trusted time was at most 6.8x its
estimate (a depthwise convolution; the median 0.3x), while the times the other checks refused
reached 586x. ``SUSPECT_FACTOR`` lies between.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from qosched.graph.capture import operator_flops, operator_kind, tensor_meta
from qosched.hardware.catalog import Processor
from qosched.hardware.roofline import roofline_time_s
from qosched.placement.costs import DEFAULT_CPU_OVERHEAD_S, DEFAULT_EFFICIENCY

SUSPECT_FACTOR = 50.0

#: ``ceiling(target, args, kwargs, out)``: the most seconds one call of ``target`` on these
#: (real) arguments, giving ``out``, may take; None where there is no estimate.
Ceiling = Callable[[Any, tuple, dict, Any], float | None]


def roofline_s(processor: Processor, target: Any, args: tuple, kwargs: dict, out: Any) -> float:
    """The roofline estimate of one call (see the module doc), at the float32 peak."""
    inputs = [tensor_meta(t) for t in pytree.tree_leaves((args, kwargs)) if _is_tensor(t)]
    outputs = [tensor_meta(t) for t in pytree.tree_leaves(out) if _is_tensor(t)]
    flops = operator_flops(target, operator_kind(target), args, kwargs, out, inputs, outputs)
    moved = sum(m.bytes for m in inputs) + sum(m.bytes for m in outputs)
    roofline = roofline_time_s(flops, moved, processor, "float32", DEFAULT_EFFICIENCY)
    return roofline + DEFAULT_CPU_OVERHEAD_S


def roofline_ceiling(processor: Processor, factor: float = SUSPECT_FACTOR) -> Ceiling:
    """``factor`` times :func:`roofline_s` on ``processor``."""

    def ceiling(target: Any, args: tuple, kwargs: dict, out: Any) -> float | None:
        try:
            return factor * roofline_s(processor, target, args, kwargs, out)
        except Exception:  # an operator no formula covers: no estimate, never a failed profile
            return None

    return ceiling


def _is_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor)
