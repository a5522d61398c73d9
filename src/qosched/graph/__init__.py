"""Operator IR captured from unmodified PyTorch models (torch.export on fake/meta tensors)."""

from qosched.graph.capture import capture, capture_spec, load_model
from qosched.graph.ir import Graph, Operator, TensorMeta, Value
from qosched.graph.passes import coarsen, linearize
from qosched.graph.zoo import ZOO

__all__ = [
    "ZOO",
    "Graph",
    "Operator",
    "TensorMeta",
    "Value",
    "capture",
    "capture_spec",
    "coarsen",
    "linearize",
    "load_model",
]
