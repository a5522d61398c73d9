"""Measured operator costs: each node of a tenant's program run in isolation, cached on disk.

Called by the platforms that have the processor at hand (``placement.platform``), inside a
process already pinned to that processor (a CPU core set with one thread per core, or a CUDA
device). The program is run once on real inputs; before each node executes, the node alone is
timed on its real argument tensors: one warm-up call, then ``repeats`` timed calls, the median
kept (on CUDA each timed call is fenced by ``torch.cuda.synchronize``). A unit's cost is the sum
of its nodes' costs.

The cache maps a *device key* (what the time depends on besides the operator: CPU model and
thread count, or the CUDA device name) to *operator signatures* (the ATen target with the
dtype, shape and strides of every tensor argument and the value of every other argument) to
seconds. Identical operators (the same layer repeated, the same model in two tenants, two core
sets of the same size on the same CPU) are measured once.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import fx

from qosched.core.errors import InputError
from qosched.placement.program import UnitProgram, tensor_bytes

FORMAT = 1
DEFAULT_REPEATS = 5


def default_profile_path() -> Path:
    """``$XDG_CACHE_HOME/qosched/op_profile.json``, else ``~/.cache/qosched/op_profile.json``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "qosched" / "op_profile.json"


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        shape = ",".join(str(d) for d in value.shape)
        stride = ",".join(str(s) for s in value.stride())
        return f"{str(value.dtype).removeprefix('torch.')}[{shape}]/({stride})"
    if isinstance(value, list | tuple):
        inner = ",".join(_describe(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, torch.device | torch.dtype | torch.memory_format | torch.layout):
        return str(value)
    return repr(value)


def signature(target: Any, args: tuple, kwargs: dict) -> str:
    """The cache key of one operator call: target, then every argument (see the module doc)."""
    parts = [_describe(a) for a in args]
    parts += [f"{k}={_describe(v)}" for k, v in sorted(kwargs.items())]
    return f"{target}({', '.join(parts)})"


class ProfileCache:
    """Operator times per device key, read from and written to one JSON file.

    ``load`` is called once before profiling and ``save`` after; ``save`` merges with what
    another process wrote meanwhile and replaces the file atomically.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_profile_path()
        self.entries: dict[str, dict[str, float]] = self._read()
        self.hits = 0
        self.misses = 0

    def _read(self) -> dict[str, dict[str, float]]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(
                f"unreadable profile cache ({exc}); delete it", source=self.path
            ) from exc
        devices = data.get("devices") if isinstance(data, dict) else None
        if (
            data.get("format") != FORMAT
            or not isinstance(devices, dict)
            or not all(isinstance(v, dict) for v in devices.values())
        ):
            raise InputError(
                f"expected a profile cache of format {FORMAT} "
                '({"format": 1, "devices": {device: {signature: seconds}}}); delete it',
                source=self.path,
            )
        return {d: {s: float(t) for s, t in ops.items()} for d, ops in devices.items()}

    def get(self, device: str, key: str) -> float | None:
        value = self.entries.get(device, {}).get(key)
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        return value

    def put(self, device: str, key: str, seconds: float) -> None:
        self.entries.setdefault(device, {})[key] = seconds

    def save(self) -> Path:
        on_disk = self._read()
        for device, ops in self.entries.items():
            on_disk.setdefault(device, {}).update(ops)
        self.entries = on_disk
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        text = json.dumps({"format": FORMAT, "devices": on_disk}, indent=1, sort_keys=True)
        tmp.write_text(text + "\n", encoding="utf-8")
        os.replace(tmp, self.path)
        return self.path


@dataclass(frozen=True)
class TenantProfile:
    """What profiling one tenant on one device gives: seconds per unit, the bytes live across
    each cut, the bytes of the request's inputs and outputs, and seconds per node."""

    name: str
    device: str
    unit_s: tuple[float, ...]
    cut_bytes: tuple[int, ...]
    input_bytes: int
    output_bytes: int
    node_s: dict[str, float]


def _timer(device: torch.device) -> Callable[[Callable[[], object]], float]:
    if device.type == "cuda":

        def timed(call: Callable[[], object]) -> float:
            torch.cuda.synchronize(device)
            start = time.perf_counter()
            call()
            torch.cuda.synchronize(device)
            return time.perf_counter() - start

        return timed

    def timed_cpu(call: Callable[[], object]) -> float:
        start = time.perf_counter()
        call()
        return time.perf_counter() - start

    return timed_cpu


def profile_tenant(
    program: UnitProgram,
    inputs: Iterable[torch.Tensor],
    cache: ProfileCache,
    device_key: str,
    *,
    device: torch.device | str = "cpu",
    repeats: int = DEFAULT_REPEATS,
) -> TenantProfile:
    """Measure every node of ``program`` (see the module doc); the program's constants and
    ``inputs`` must already be on ``device``. Misses are added to ``cache`` (not saved)."""
    if repeats < 1:
        raise InputError(f"expected repeats >= 1, got {repeats!r}", field="repeats")
    device = torch.device(device)
    timed = _timer(device)
    env = program.start_env(list(inputs))
    scope = {**program.constants, **env}
    node_s: dict[str, float] = {}
    unit_s = []
    with torch.no_grad():
        for unit in range(program.n_units):
            total = 0.0
            for step in program.steps(unit):
                args = fx.node.map_arg(step.args, lambda n: scope[n.name])
                kwargs = fx.node.map_arg(step.kwargs, lambda n: scope[n.name])
                key = signature(step.target, args, kwargs)
                seconds = cache.get(device_key, key)
                if seconds is None:
                    call = functools.partial(step.target, *args, **kwargs)
                    timed(call)  # warm-up: first-call allocations and lazy initialisation
                    seconds = statistics.median(timed(call) for _ in range(repeats))
                    cache.put(device_key, key, seconds)
                scope[step.name] = step.target(*args, **kwargs)
                node_s[step.name] = seconds
                total += seconds
            unit_s.append(total)
    cut_bytes = tuple(
        sum(tensor_bytes(scope[v]) for v in program.live_after(k))
        for k in range(program.n_units - 1)
    )
    return TenantProfile(
        name=program.name,
        device=device_key,
        unit_s=tuple(unit_s),
        cut_bytes=cut_bytes,
        input_bytes=tensor_bytes([scope[n] for n in program.input_names]),
        output_bytes=tensor_bytes([scope[n] for n in program.output_names]),
        node_s=node_s,
    )
