"""Capture an unmodified PyTorch model as a :class:`~qosched.graph.ir.Graph` without running it.

``torch.export.export`` traces the model with fake tensors (no data, no kernels run), then
``run_decompositions()`` lowers it to core ATen so that ``nn.Linear`` becomes ``addmm``/``mm`` and
``nn.Conv2d`` becomes ``convolution``, the operators ``torch.utils.flop_counter`` has formulas for.

FLOP rule, per operator (see :func:`operator_flops`):

* an operator with a formula in ``torch.utils.flop_counter.flop_registry`` (matmuls, convolutions,
  attention) counts what that formula says: ``2 * M * N * K`` for a matmul (a multiply and an add
  per MAC; the bias add of ``addmm`` is not counted), ``2 * N * Cout * Hout * Wout * Cin/groups *
  kh * kw`` for a convolution;
* a grouped matmul (a mixture of experts: each token through the experts it was routed to) has
  no formula there and counts ``2 * K`` per output element (see :func:`grouped_mm_flops`);
* an elementwise operator (ATen tag ``pointwise``, and inference batch norm, which is a per-channel
  scale and shift) counts one FLOP per output element;
* a reduction (ATen tag ``reduction``, softmax, layer norm) counts one FLOP per input element;
* views, copies and everything else (embedding lookups, pooling without a tag) count 0.

Bytes: ``bytes_read`` is the sum of the bytes of every tensor argument (parameters included, a
tensor passed twice counted twice); ``bytes_written`` the sum of the bytes of every tensor output;
``param_bytes`` the bytes of the parameter, buffer and constant arguments.
"""

from __future__ import annotations

import importlib
import math
import operator
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx, nn
from torch.export.graph_signature import InputKind
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode
from torch.utils import _pytree as pytree
from torch.utils.flop_counter import flop_registry

from qosched.core.bounds import show_value
from qosched.core.errors import InputError
from qosched.core.third_party import ignore_library_notices
from qosched.graph import hf
from qosched.graph.ir import (
    COMPUTE,
    ELEMENTWISE,
    OTHER,
    REDUCTION,
    VIEW,
    Graph,
    Operator,
    TensorMeta,
    Value,
)
from qosched.graph.zoo import ZOO

aten = torch.ops.aten

# Copies are data movement, like views: no arithmetic.
_COPY_OPS = frozenset(
    {aten.clone, aten._unsafe_view, aten.alias, aten.copy, aten._to_copy, aten.lift_fresh_copy}
)
# Inference batch norm is y = x * a + b per channel.
_ELEMENTWISE_OPS = frozenset({aten._native_batch_norm_legit_no_training})
_REDUCTION_OPS = frozenset(
    {aten._softmax, aten._log_softmax, aten.native_layer_norm, aten.native_group_norm}
)


def grouped_mm_flops(
    a: torch.Tensor, b: torch.Tensor, *args: Any, out_val: Any, **kwargs: Any
) -> int:
    """``aten._grouped_mm`` and ``transformers::grouped_mm_fallback``: rows of ``a`` (tokens sorted
    by expert) times their group's ``(K, N)`` slice of ``b``; every output element is a K-long dot
    product. Both 2-D (groups along K) is the weight-gradient form: K is split among the groups."""
    k = a.shape[-1]
    if a.dim() == 2 and b.dim() == 2:
        return 2 * a.shape[0] * b.shape[1] * k
    return 2 * out_val.numel() * k


def fft_flops(x: torch.Tensor, dim: Sequence[int], *args: Any, out_val: Any, **kwargs: Any) -> int:
    """``aten._fft_c2c``, ``_fft_r2c`` and ``_fft_c2r``: a complex FFT of ``N`` points takes
    ``5 N log2 N`` floating-point operations (the radix-2 count, which FFT benchmarks report
    their rates in), one of real data half that. ``N`` is the product of the transformed
    dimensions of the full-length side (the real input of r2c, the real output of c2r), and
    every other dimension is a batch of such transforms."""
    full = out_val if x.is_complex() and not out_val.is_complex() else x
    points = 1
    for d in dim:
        points *= full.shape[d % full.dim()]
    if points <= 1:
        return 0
    per_element = 5.0 if x.is_complex() and out_val.is_complex() else 2.5
    return round(per_element * full.numel() * math.log2(points))


# FLOP formulas for operators ``flop_registry`` lacks, keyed by the operator's qualified name
# (a library's custom operator may not be loaded, so not by the operator object).
_FLOP_FORMULAS: dict[str, Callable[..., int]] = {
    "aten::_grouped_mm": grouped_mm_flops,
    "transformers::grouped_mm_fallback": grouped_mm_flops,
    "aten::_fft_c2c": fft_flops,
    "aten::_fft_r2c": fft_flops,
    "aten::_fft_c2r": fft_flops,
}

_VALUE_KINDS = {
    InputKind.PARAMETER: "parameter",
    InputKind.BUFFER: "buffer",
    InputKind.CONSTANT_TENSOR: "constant",
    InputKind.USER_INPUT: "input",
}


def tensor_meta(t: torch.Tensor) -> TensorMeta:
    """TensorMeta of a (fake or meta) tensor; raises InputError on symbolic shapes."""
    try:
        shape = tuple(int(d) for d in t.shape)
    except (TypeError, RuntimeError) as e:  # a SymInt with no concrete hint
        raise InputError(
            f"tensor with symbolic shape {tuple(t.shape)}: static shapes only, and this size "
            "follows the values in a tensor, not the shapes of the inputs"
        ) from e
    numel = 1
    for d in shape:
        numel *= d
    return TensorMeta(shape, str(t.dtype).removeprefix("torch."), numel * t.dtype.itemsize)


def _qualified_name(target: Any) -> str:
    """``"aten::_grouped_mm"`` for an ATen or custom operator overload, else ``""``."""
    name = getattr(target, "name", None)
    return name() if callable(name) else ""


def operator_kind(target: Any) -> str:
    """Kind of an fx call_function target (see :mod:`qosched.graph.ir`)."""
    if target is operator.getitem:
        return VIEW
    packet = getattr(target, "overloadpacket", None)
    if packet is None:
        return OTHER
    if packet in flop_registry or _qualified_name(target) in _FLOP_FORMULAS:
        return COMPUTE
    tags = getattr(target, "tags", ())
    if getattr(target, "is_view", False) or packet in _COPY_OPS:
        return VIEW
    if torch.Tag.pointwise in tags or packet in _ELEMENTWISE_OPS:
        return ELEMENTWISE
    if torch.Tag.reduction in tags or packet in _REDUCTION_OPS:
        return REDUCTION
    return OTHER


def operator_flops(
    target: Any,
    kind: str,
    args: tuple,
    kwargs: dict,
    out: Any,
    inputs: Sequence[TensorMeta],
    outputs: Sequence[TensorMeta],
) -> int:
    """FLOPs of one operator; ``args``/``kwargs``/``out`` hold fake tensors. Rule: module doc."""
    if kind == COMPUTE:
        packet = target.overloadpacket
        formula = flop_registry.get(packet) or _FLOP_FORMULAS[_qualified_name(target)]
        return int(formula(*args, out_val=out, **kwargs))
    if kind == ELEMENTWISE:
        return sum(m.numel for m in outputs[:1])
    if kind == REDUCTION:
        return sum(m.numel for m in inputs[:1])
    return 0


def _tensors(x: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]


def _module_path(node: fx.Node) -> str:
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return str(path)


def _as_fake_inputs(model: nn.Module, example_inputs: tuple) -> tuple:
    """Example inputs as data-free tensors on the model's device (meta stays meta)."""
    devices = {t.device for t in (*model.parameters(), *model.buffers())}
    meta = torch.device("meta")
    device = meta if (meta in devices or not devices) else next(iter(devices))
    if device.type == "meta":
        return pytree.tree_map_only(torch.Tensor, lambda t: t.to("meta"), example_inputs)
    # Real parameters: export fakifies them itself; give it fake inputs from the same mode.
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)

    def fake(t: torch.Tensor) -> torch.Tensor:
        if t.device.type == "meta":
            with mode:
                return torch.empty(t.shape, dtype=t.dtype, device=device)
        return mode.from_tensor(t)

    return pytree.tree_map_only(torch.Tensor, fake, example_inputs)


def capture(model: nn.Module, example_inputs: tuple, name: str | None = None) -> Graph:
    """Capture ``model`` in eval mode as an operator Graph, with fake tensors only.

    The model is never run and its parameters are never materialised: a model built on
    ``torch.device("meta")`` captures fine. The training flag is restored afterwards.
    Raises InputError naming the model when torch.export cannot capture it, with the model's
    ``capture_problem`` (a string its factory may set) as the reason.
    """
    name = name or type(model).__name__
    if not isinstance(model, nn.Module):
        raise InputError(f"model {name!r}: expected an nn.Module, got {type(model).__name__}")
    if not isinstance(example_inputs, tuple):
        raise InputError(
            f"model {name!r}: example_inputs must be a tuple, got {type(example_inputs).__name__}"
        )
    was_training = model.training
    model.eval()
    try:
        inputs = _as_fake_inputs(model, example_inputs)
        with warnings.catch_warnings():
            # run_decompositions deep-copies pytree specs, which trips a deprecation inside
            # PyTorch itself (copyreg builds a LeafSpec): noise the user can do nothing about.
            ignore_library_notices()
            # An nn.LSTM keeps its weights in a list too, which export assigns as it goes.
            warnings.filterwarnings(
                "ignore", message=r".*_flat_weights.*assigned during export", category=UserWarning
            )
            program = torch.export.export(model, inputs).run_decompositions()
    except Exception as e:
        # Fake tensors carry shapes, not values: a branch on a value cannot be followed. A
        # factory that knows why its model cannot be captured says so in capture_problem.
        problem = getattr(model, "capture_problem", None)
        error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if isinstance(problem, str):
            why = f"{problem} (it stopped at {error})"
        elif isinstance(e, GuardOnDataDependentSymNode):
            why = (
                "its control flow follows the values in a tensor (an input or a buffer), not "
                f"only shapes; {error}"
            )
        else:
            why = error
        raise InputError(f"model {name!r}: torch.export could not capture it: {why}") from e
    finally:
        model.train(was_training)
    try:
        return _to_graph(program, name)
    except InputError as e:
        raise InputError(f"model {name!r}: {e}") from e


def _to_graph(program: torch.export.ExportedProgram, name: str) -> Graph:
    kinds = {
        s.arg.name: _VALUE_KINDS.get(s.kind, "constant")
        for s in program.graph_signature.input_specs
        if hasattr(s.arg, "name")
    }
    inputs: list[Value] = []
    params: list[Value] = []
    ops: list[Operator] = []
    # getitem(x, i) of a multi-output op is folded into x: readers depend on x, read element i.
    alias: dict[str, str] = {}
    outputs: tuple[str, ...] = ()
    for node in program.graph.nodes:
        val = node.meta.get("val")
        if node.op == "placeholder":
            kind = kinds.get(node.name, "input")
            if not isinstance(val, torch.Tensor):
                continue  # a non-tensor user input (int, None) is baked in by export
            value = Value(node.name, kind, tensor_meta(val))
            (inputs if kind == "input" else params).append(value)
            continue
        if node.op == "output":
            outs = [n for n in pytree.tree_leaves(node.args) if isinstance(n, fx.Node)]
            outputs = tuple(dict.fromkeys(alias.get(n.name, n.name) for n in outs))
            continue
        if node.op != "call_function":
            raise InputError(f"unsupported fx node {node.format_node()}")
        if node.target is operator.getitem and isinstance(node.args[0], fx.Node):
            alias[node.name] = alias.get(node.args[0].name, node.args[0].name)
            continue
        if val is None and not node.users:
            continue  # side-effect-only nodes (runtime asserts)
        ops.append(_operator(node, val, alias, {p.name for p in params}))
    return Graph(name, tuple(ops), tuple(inputs), outputs, tuple(params))


def _operator(node: fx.Node, val: Any, alias: dict[str, str], param_names: set[str]) -> Operator:
    sources: list[str] = []
    in_meta: list[TensorMeta] = []
    for arg in pytree.tree_leaves((node.args, node.kwargs)):
        if isinstance(arg, fx.Node) and isinstance(arg.meta.get("val"), torch.Tensor):
            sources.append(alias.get(arg.name, arg.name))
            in_meta.append(tensor_meta(arg.meta["val"]))
    out_meta = tuple(tensor_meta(t) for t in _tensors(val))
    kind = operator_kind(node.target)
    args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda n: n.meta.get("val"))
    try:
        flops = operator_flops(node.target, kind, args, kwargs, val, in_meta, out_meta)
    except Exception as e:
        raise InputError(f"FLOP formula failed for node {node.format_node()}: {e}") from e
    deps = tuple(dict.fromkeys(s for s in sources if s not in param_names))
    return Operator(
        name=node.name,
        target=str(node.target),
        kind=kind,
        inputs=deps,
        input_sources=tuple(sources),
        input_meta=tuple(in_meta),
        output_meta=out_meta,
        flops=flops,
        bytes_read=sum(m.bytes for m in in_meta),
        bytes_written=sum(m.bytes for m in out_meta),
        param_bytes=sum(m.bytes for s, m in zip(sources, in_meta, strict=True) if s in param_names),
        module=_module_path(node),
    )


def takes_batch_and_device(spec: str) -> bool:
    """Whether the factory of ``spec`` takes ``batch`` and ``device``: the zoo's and ``hf:``'s
    do; a user's ``package.module:factory`` is called only with what it is documented to take."""
    return spec in ZOO or spec.startswith(hf.PREFIX)


def model_name_problem(spec: str) -> str | None:
    """Why ``spec`` names no model :func:`load_model` could build, judged by its form alone
    (nothing is imported), or None: a spec reader refuses a typo at its line, before any model
    is built."""
    shown = show_value(spec)
    if spec in ZOO:
        return None
    if spec.startswith(hf.PREFIX):
        return (
            None
            if spec.removeprefix(hf.PREFIX).strip()
            else f"model {shown}: expected 'hf:<model_type>', e.g. 'hf:bert'"
        )
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        if (
            not all(part.isidentifier() for part in module_name.split("."))
            or not attr.isidentifier()
        ):
            return f"model {shown}: expected 'package.module:factory'"
        return None
    return (
        f"unknown model {shown}: expected one of {sorted(ZOO)}, 'hf:<model_type>' or "
        "'package.module:factory'"
    )


def load_model(spec: str, **kwargs: Any) -> tuple[nn.Module, tuple]:
    """Model and example inputs from a zoo name, ``hf:<model_type>`` (Hugging Face
    ``transformers`` from a default configuration, see :mod:`qosched.graph.hf`) or an import path
    ``package.module:factory``.

    ``kwargs`` go to the factory (zoo and ``hf:`` factories take ``batch`` and ``device``). A
    user's factory that raises is an InputError about the model, its exception chained.
    """
    problem = model_name_problem(spec)
    if problem is not None:
        raise InputError(problem, field="model")
    if spec in ZOO:
        result = ZOO[spec](**kwargs)
    elif spec.startswith(hf.PREFIX):
        result = hf.hf_model(spec, **kwargs)
    else:
        result = _call_user_factory(spec, kwargs)
    if (
        not isinstance(result, tuple)
        or len(result) != 2
        or not isinstance(result[0], nn.Module)
        or not isinstance(result[1], tuple)
    ):
        raise InputError(
            f"model {show_value(spec)}: factory must return (nn.Module, tuple of example inputs), "
            f"got {_describe(result)}",
            field="model",
        )
    return result


def _call_user_factory(spec: str, kwargs: dict[str, Any]) -> Any:
    """What the factory ``package.module:factory`` returns; InputError when it cannot be found
    or raises (the user's code: whatever it raises is about their model, chained)."""
    shown = show_value(spec)
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # a module that fails to import, a syntax error in it
        raise InputError(
            f"model {shown}: cannot import module {show_value(module_name)}: "
            f"{type(e).__name__}: {_first_line(e)}",
            field="model",
        ) from e
    factory = getattr(module, attr, None)
    if factory is None:
        raise InputError(
            f"model {shown}: module {show_value(module_name)} has no attribute {attr!r}",
            field="model",
        )
    if not callable(factory):
        raise InputError(f"model {shown}: {attr!r} is not callable", field="model")
    try:
        return factory(**kwargs)
    except Exception as e:
        raise InputError(
            f"model {shown}: its factory raised {type(e).__name__}: {_first_line(e)}",
            field="model",
        ) from e


def _first_line(error: Exception) -> str:
    """An exception's message as one line of an error message: its first, cut at 200."""
    return (str(error).strip().splitlines() or [""])[0][:200]


def _describe(x: Any) -> str:
    if isinstance(x, tuple):
        return "(" + ", ".join(type(v).__name__ for v in x) + ")"
    return type(x).__name__


def capture_spec(spec: str, **kwargs: Any) -> Graph:
    """``capture(*load_model(spec, **kwargs), name=spec)``."""
    model, inputs = load_model(spec, **kwargs)
    return capture(model, inputs, name=spec)
