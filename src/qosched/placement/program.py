"""A tenant's model as a real, runnable program cut at its placement units.

The model is built on the CPU with its real parameters (seeded random initialisation for the zoo,
whatever the factory gives for an import path), exported with ``torch.export`` and lowered to core
ATen exactly as :func:`qosched.graph.capture.capture` does, so the exported nodes carry the same
names as the operators of the captured graph. Every exported node then belongs to one unit of the
plan (the chain of :func:`qosched.graph.passes.linearize` over the coarsened graph):

- a node that names a captured (coarsened) operator belongs to that operator's unit;
- a node folded into an operator by ``coarsen`` that reads another node (an elementwise op fused
  into its producer, a ``getitem``) belongs to the latest unit among the nodes it reads;
- a node that reads no other node (a weight transpose, ``arange``), or only such nodes (the
  ``exp`` of a weight kept as a log, and what reads that alone), belongs to the earliest unit
  that reads it.

Running the units in order, each unit's nodes in graph order, is the graph's own execution order
cut into pieces, so the result equals the unsplit program bit for bit. :class:`UnitProgram` checks
that no node reads a node of a later unit and says which tensors are live across each cut: what a
runtime must move when consecutive units run on different processors.
"""

from __future__ import annotations

import dataclasses
import io
import time
import warnings
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx, nn
from torch.export.graph_signature import InputKind, OutputKind
from torch.utils import _pytree as pytree

from qosched.core.errors import InputError
from qosched.core.third_party import ignore_library_notices
from qosched.graph.capture import capture, load_model, takes_batch_and_device
from qosched.graph.passes import coarsen, linearize

Env = dict[str, Any]


def build_model(spec: str, *, batch: int = 1, seed: int = 0) -> tuple[nn.Module, tuple]:
    """The model of ``spec`` on the CPU with real parameters and real inputs, deterministic in
    ``seed``.

    Floating-point example inputs are replaced by standard-normal values (the zoo's examples are
    ``torch.empty``); integer inputs (token ids) keep the factory's values. Raises InputError if
    the factory builds the model on ``meta`` (nothing could run).
    """
    torch.manual_seed(seed)
    options: dict[str, Any] = (
        {"batch": batch, "device": "cpu"} if takes_batch_and_device(spec) else {}
    )
    model, inputs = load_model(spec, **options)
    devices = {t.device.type for t in (*model.parameters(), *model.buffers())}
    if devices - {"cpu"}:
        raise InputError(
            f"model {spec!r}: expected parameters on the CPU to run it, got {sorted(devices)}; "
            "build it on the CPU (the zoo does with device='cpu')",
            field="model",
        )
    generator = torch.Generator().manual_seed(seed)

    def real(t: torch.Tensor) -> torch.Tensor:
        if t.is_floating_point():
            return torch.randn(t.shape, dtype=t.dtype, generator=generator)
        return t.to("cpu").clone()

    return model.eval(), pytree.tree_map_only(torch.Tensor, real, inputs)


class _FlatOutputs(nn.Module):
    """A model returning its outputs' tensors as a flat tuple. A plan's program is saved and
    loaded again in each process that runs it, and ``torch.export`` can load only output
    structures it knows (a Hugging Face ``ModelOutput`` it cannot); the runtimes compare flat
    outputs anyway. The operators, and so their names, are the model's own."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *inputs: Any) -> tuple[Any, ...]:
        return tuple(pytree.tree_leaves(self.model(*inputs)))


def export_program(model: nn.Module, inputs: tuple) -> torch.export.ExportedProgram:
    """``model`` exported in eval mode and lowered to core ATen, as ``capture`` lowers it, its
    outputs flattened (:class:`_FlatOutputs`)."""
    try:
        with warnings.catch_warnings():
            # run_decompositions deep-copies pytree specs, which trips a deprecation inside
            # PyTorch itself (copyreg builds a LeafSpec): noise the user can do nothing about.
            ignore_library_notices()
            return torch.export.export(_FlatOutputs(model.eval()), inputs).run_decompositions()
    except Exception as e:
        raise InputError(f"torch.export could not export the model: {e}") from e


def model_units(model: nn.Module, inputs: tuple, name: str) -> list[list[str]]:
    """The operator names of each unit, as ``placement.costs.tenant_from_graph`` forms them."""
    return linearize(coarsen(capture(model, inputs, name=name)))


def save_program(program: torch.export.ExportedProgram) -> bytes:
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    return buffer.getvalue()


def load_program(data: bytes) -> torch.export.ExportedProgram:
    with warnings.catch_warnings():
        ignore_library_notices()  # loading builds pytree specs too (see export_program)
        return torch.export.load(io.BytesIO(data))


@dataclass(frozen=True)
class _NodeCall:
    """One node of a unit's program: its ``target`` called with ``args`` and ``kwargs``."""

    name: str
    target: Any
    args: tuple
    kwargs: dict
    frees: tuple[str, ...] = ()  # values read for the last time here (dropped after it)


def signature_values(program: torch.export.ExportedProgram) -> tuple[list[str], Env]:
    """The placeholder names of the user inputs, in order, and every other placeholder's value
    (parameters, buffers, constants) by placeholder name."""
    input_names: list[str] = []
    constants: Env = {}
    for spec in program.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            input_names.append(spec.arg.name)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            source = (
                program.state_dict
                if spec.target in program.state_dict
                else program.constants  # non-persistent buffers live with the constants
            )
            constants[spec.arg.name] = source[spec.target]
        else:
            constants[spec.arg.name] = program.constants[spec.target]
    return input_names, constants


def user_output_names(program: torch.export.ExportedProgram) -> list[str]:
    """The names of the nodes the program returns to its user, in output order."""
    return [
        spec.arg.name
        for spec in program.graph_signature.output_specs
        if spec.kind == OutputKind.USER_OUTPUT and hasattr(spec.arg, "name")
    ]


def check_units_present(nodes: Sequence[fx.Node], anchor: Mapping[str, int], name: str) -> None:
    """Raise InputError when an operator the units name is not a node of the program."""
    missing = sorted(set(anchor) - {n.name for n in nodes})
    if missing:
        raise InputError(
            f"tenant {name!r}: the exported program has no node {missing[0]!r} of the plan's "
            "units; the plan was made for a different model",
            field="units",
        )


def assign_units(
    nodes: Sequence[fx.Node], anchor: Mapping[str, int], sources: Sequence[str]
) -> dict[str, int]:
    """The unit of every node by the rules of the module docstring, ``-1`` for ``sources``
    (the inputs and constants, there before any unit runs).

    ``anchor`` gives the unit of each node a unit names; ``nodes`` are in graph order.
    """
    unit_of: dict[str, int] = {n: -1 for n in sources}
    computed = set()  # nodes, as opposed to inputs and constants
    pending: list[fx.Node] = []
    for node in nodes:
        # A pending node (one that reads inputs and constants alone) has no unit yet: a node
        # reading only such nodes is pending too, and goes with its readers in turn.
        units = [
            unit_of[d.name]
            for d in node.all_input_nodes
            if d.name in computed and d.name in unit_of
        ]
        if node.name in anchor:
            unit_of[node.name] = anchor[node.name]
        elif units:
            unit_of[node.name] = max(units)
        else:
            pending.append(node)
        computed.add(node.name)
    for node in reversed(pending):
        readers = [unit_of[u.name] for u in node.users if u.name in unit_of]
        unit_of[node.name] = min(readers) if readers else 0
    return unit_of


def check_chain(nodes: Sequence[fx.Node], unit_of: Mapping[str, int], name: str) -> None:
    """Raise InputError when a node reads a value of no unit or of a later unit."""
    for node in nodes:
        for dep in node.all_input_nodes:
            if dep.name not in unit_of:
                raise InputError(f"tenant {name!r}: node {node.name!r} reads unknown {dep!r}")
            if unit_of[dep.name] > unit_of[node.name]:
                raise InputError(
                    f"tenant {name!r}: node {node.format_node()} in unit "
                    f"{unit_of[node.name]} reads {dep.name!r} of the later unit "
                    f"{unit_of[dep.name]}; the units do not form a chain",
                    field="units",
                )


def unit_steps(
    module: nn.Module, nodes: Sequence[fx.Node], unit_of: Mapping[str, int], n_units: int
) -> list[list[_NodeCall]]:
    """Each unit's nodes in graph order as steps to execute; a ``get_attr`` node returns the
    attribute of ``module`` it names."""
    steps: list[list[_NodeCall]] = [[] for _ in range(n_units)]
    for node in nodes:
        target = node.target
        if node.op == "get_attr":
            value = getattr(module, str(target))
            steps[unit_of[node.name]].append(_NodeCall(node.name, lambda v=value: v, (), {}))
            continue
        steps[unit_of[node.name]].append(_NodeCall(node.name, target, node.args, dict(node.kwargs)))
    return steps


def live_across_cuts(
    nodes: Sequence[fx.Node],
    unit_of: Mapping[str, int],
    constants: Collection[str],
    output_names: Sequence[str],
    n_units: int,
) -> list[tuple[str, ...]]:
    """For each unit ``k``, the values made at or before it (inputs included) that are read
    after it, outputs counting as read after the last unit; constants never cross a cut (every
    pinned process holds them)."""
    last_read: dict[str, int] = {}
    for node in nodes:
        for dep in node.all_input_nodes:
            if dep.name not in constants:
                last_read[dep.name] = max(last_read.get(dep.name, -1), unit_of[node.name])
    for out in output_names:
        last_read[out] = n_units
    return [
        tuple(v for v, end in last_read.items() if unit_of[v] <= k < end) for k in range(n_units)
    ]


class UnitProgram:
    """An exported program whose nodes are grouped by unit (see the module docstring).

    Built once per tenant in every process that runs some of its units; :meth:`run_units` is
    called per request and segment, :meth:`live_after` tells what crosses a cut.
    """

    def __init__(
        self, program: torch.export.ExportedProgram, units: Sequence[Sequence[str]], name: str
    ) -> None:
        if not units:
            raise InputError(f"tenant {name!r}: no units", field="units")
        self.name = name
        self.n_units = len(units)
        self.unit_ids = tuple(unit[0] for unit in units)
        self.input_names, self.constants = signature_values(program)
        self.output_names = user_output_names(program)
        anchor = {op: i for i, unit in enumerate(units) for op in unit}
        nodes = [
            n for n in program.graph_module.graph.nodes if n.op in ("call_function", "get_attr")
        ]
        check_units_present(nodes, anchor, name)
        unit_of = assign_units(nodes, anchor, (*self.input_names, *self.constants))
        check_chain(nodes, unit_of, name)
        self.unit_of: Mapping[str, int] = unit_of
        self._steps = unit_steps(program.graph_module, nodes, unit_of, self.n_units)
        self._live_after = live_across_cuts(
            nodes, unit_of, self.constants, self.output_names, self.n_units
        )
        self._nodes = {n.name: n for n in nodes}
        self._free_after_last_read()

    def _free_after_last_read(self) -> None:
        """Mark each value to be dropped after the step that reads it last, in execution order
        (unit by unit): a request then holds only the activations still to be read, as eager
        PyTorch would, instead of freeing all of them at once when it ends (which a process pays
        between requests, outside any segment's time)."""
        kept = set(self.output_names) | set(self.constants)
        last: dict[str, tuple[int, int]] = {}
        for unit, steps in enumerate(self._steps):
            for i, step in enumerate(steps):
                for dep in self._nodes[step.name].all_input_nodes:
                    if dep.name not in kept:
                        last[dep.name] = (unit, i)
        frees: dict[tuple[int, int], list[str]] = {}
        for name, at in last.items():
            frees.setdefault(at, []).append(name)
        for (unit, i), names in frees.items():
            step = self._steps[unit][i]
            self._steps[unit][i] = dataclasses.replace(step, frees=tuple(names))

    def to(self, device: torch.device | str) -> UnitProgram:
        """Move the constants to ``device`` and make nodes that create tensors (a ``device=``
        keyword, such as ``arange``) create them there; in place, returns ``self``."""
        device = torch.device(device)
        self.constants = {k: v.to(device) for k, v in self.constants.items()}
        for steps in self._steps:
            for i, step in enumerate(steps):
                if isinstance(step.kwargs.get("device"), torch.device):
                    steps[i] = dataclasses.replace(step, kwargs={**step.kwargs, "device": device})
        return self

    def steps(self, unit: int) -> list[_NodeCall]:
        """The nodes of ``unit`` in execution order (read by the profiler)."""
        return self._steps[unit]

    def node(self, name: str) -> fx.Node:
        return self._nodes[name]

    def start_env(self, inputs: Sequence[torch.Tensor]) -> Env:
        """The values a request starts from: its user inputs by placeholder name."""
        leaves = [t for t in pytree.tree_leaves(tuple(inputs)) if isinstance(t, torch.Tensor)]
        if len(leaves) != len(self.input_names):
            raise InputError(
                f"tenant {self.name!r}: expected {len(self.input_names)} input tensors, "
                f"got {len(leaves)}"
            )
        return dict(zip(self.input_names, leaves, strict=True))

    def run_units(self, env: Env, start: int, stop: int, unit_s: list[float] | None = None) -> Env:
        """Execute units ``start`` .. ``stop - 1`` on ``env``: the values after them (those read
        for the last time on the way dropped). With ``unit_s``, each unit's wall time is
        appended to it (meaningful where operators run synchronously: on the CPU)."""
        scope = {**self.constants, **env}
        with torch.no_grad():
            for unit in range(start, stop):
                began = time.perf_counter()
                for step in self._steps[unit]:
                    args = fx.node.map_arg(step.args, lambda n: scope[n.name])
                    kwargs = fx.node.map_arg(step.kwargs, lambda n: scope[n.name])
                    scope[step.name] = step.target(*args, **kwargs)
                    for name in step.frees:
                        del scope[name]
                if unit_s is not None:
                    unit_s.append(time.perf_counter() - began)
        return {k: v for k, v in scope.items() if k not in self.constants}

    def live_after(self, unit: int) -> tuple[str, ...]:
        """Names of the values that must cross the cut after ``unit`` (all outputs after the
        last unit)."""
        return self._live_after[unit]

    def outputs(self, env: Env) -> list[torch.Tensor]:
        """The user outputs from the values of a finished request, in output order."""
        return [env[name] for name in self.output_names]

    def run(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """All units in order on ``inputs``: the program's outputs."""
        return self.outputs(self.run_units(self.start_env(inputs), 0, self.n_units))


def tensor_bytes(value: Any) -> int:
    """Bytes of the tensors in ``value`` (what a copy of it moves)."""
    return sum(
        t.numel() * t.element_size()
        for t in pytree.tree_leaves(value)
        if isinstance(t, torch.Tensor)
    )
