"""Measured operator costs: each node of a tenant's program run in isolation, cached on disk.

Called by the platforms that have the processor at hand (``placement.platform``), inside a
process already pinned to that processor (a CPU core set with one thread per core, or a CUDA
device). The program is run once on real inputs; before each node executes, the node alone is
timed on its real argument tensors: one warm-up call, then ``repeats`` timed calls, the median
kept (on CUDA each timed call is fenced by ``torch.cuda.synchronize``). A measurement whose
repeats disagree, or during which the process waited for its cores, is measured again, a bounded
number of times; one never trusted is used for this plan but not cached (``placement.timing``).
A unit's cost is the sum of its nodes' costs.

The cache maps a *device key* (what the time depends on besides the operator: CPU model and
thread count, or the CUDA device name) to *operator signatures* (the ATen target with the
dtype, shape and strides of every tensor argument and the value of every other argument) to
timings: seconds, with the repeats, spread and wait share that made them trusted. Identical
operators (the same layer repeated, the same model in two tenants, two core sets of the same
size on the same CPU) are measured once.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import fx

from qosched.core.errors import InputError
from qosched.placement.ceiling import Ceiling
from qosched.placement.program import UnitProgram, tensor_bytes
from qosched.placement.timing import Timer, Timing, Trust, measure, timer_for

FORMAT = 2
#: Files written before timings recorded their repeats and spread: seconds only.
LEGACY_FORMAT = 1
DEFAULT_REPEATS = 5
DEFAULT_TRUST = Trust()


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
    """Operator timings per device key, read from and written to one JSON file.

    ``load`` is called once before profiling and ``save`` after; ``save`` merges with what
    another process wrote meanwhile and replaces the file atomically. Only trusted timings are
    stored (``placement.timing``); a file of format 1 recorded no spread, so its times are all
    untrusted: none is used and the next save drops them. ``remeasure=True`` uses no time
    stored before, and a save replaces every time measured again (or drops it when the new
    measurement is refused too).
    """

    def __init__(self, path: str | Path | None = None, *, remeasure: bool = False) -> None:
        self.path = Path(path) if path is not None else default_profile_path()
        self.remeasure = remeasure
        self.entries, self.untrusted = self._read()  # untrusted: times in an old file, ignored
        self.hits = 0
        self.misses = 0
        self._fresh: set[tuple[str, str]] = set()
        self._refused: set[tuple[str, str]] = set()

    def _read(self) -> tuple[dict[str, dict[str, Timing]], int]:
        if not self.path.exists():
            return {}, 0
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(
                f"unreadable profile cache ({exc}); delete it", source=self.path
            ) from exc
        devices = data.get("devices") if isinstance(data, dict) else None
        if (
            not isinstance(data, dict)
            or data.get("format") not in (LEGACY_FORMAT, FORMAT)
            or not isinstance(devices, dict)
            or not all(isinstance(v, dict) for v in devices.values())
        ):
            raise InputError(
                f"expected a profile cache of format {FORMAT} "
                f'({{"format": {FORMAT}, "devices": {{device: {{signature: timing}}}}}}); '
                "delete it",
                source=self.path,
            )
        if data["format"] == LEGACY_FORMAT:
            return {}, sum(len(ops) for ops in devices.values())
        try:
            return {d: {k: _timing(v) for k, v in ops.items()} for d, ops in devices.items()}, 0
        except (TypeError, ValueError, KeyError) as exc:
            raise InputError(f"a malformed timing ({exc}); delete it", source=self.path) from exc

    def lookup(self, device: str, key: str) -> Timing | None:
        """The stored timing (a hit), or None (a miss: measure it)."""
        found = self.entries.get(device, {}).get(key)
        if found is not None and self.remeasure and (device, key) not in self._fresh:
            found = None
        if found is None:
            self.misses += 1
        else:
            self.hits += 1
        return found

    def store(self, device: str, key: str, timing: Timing) -> None:
        """Keep a trusted timing."""
        self.entries.setdefault(device, {})[key] = timing
        self._fresh.add((device, key))
        self._refused.discard((device, key))

    def refuse(self, device: str, key: str) -> None:
        """Note a timing too noisy to keep; under ``remeasure`` the stored one goes too."""
        if (device, key) in self._fresh:
            return  # measured and trusted earlier in this run: that one stays
        self._refused.add((device, key))
        if self.remeasure:
            self.entries.get(device, {}).pop(key, None)

    @property
    def refused(self) -> int:
        """Distinct operators whose every measurement so far was too noisy to keep."""
        return len(self._refused)

    def save(self) -> Path:
        on_disk, _ = self._read()
        for device, ops in self.entries.items():
            on_disk.setdefault(device, {}).update(ops)
        if self.remeasure:
            for device, key in self._refused:
                on_disk.get(device, {}).pop(key, None)
        self.entries = on_disk
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        devices = {d: {k: asdict(t) for k, t in ops.items()} for d, ops in on_disk.items()}
        text = json.dumps({"format": FORMAT, "devices": devices}, indent=1, sort_keys=True)
        tmp.write_text(text + "\n", encoding="utf-8")
        os.replace(tmp, self.path)
        return self.path


def _timing(value: Any) -> Timing:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {value!r}")
    share = value["wait_share"]
    timing = Timing(
        seconds=float(value["seconds"]),
        repeats=int(value["repeats"]),
        spread=float(value["spread"]),
        wait_share=None if share is None else float(share),
    )
    numbers = (timing.seconds, timing.spread, 0.0 if share is None else timing.wait_share)
    if timing.repeats < 1 or not all(0 <= x < math.inf for x in numbers):
        raise ValueError(f"expected repeats >= 1 and finite times >= 0, got {value!r}")
    return timing


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


def profile_tenant(
    program: UnitProgram,
    inputs: Iterable[torch.Tensor],
    cache: ProfileCache,
    device_key: str,
    *,
    device: torch.device | str = "cpu",
    repeats: int = DEFAULT_REPEATS,
    timer: Timer | None = None,
    trust: Trust = DEFAULT_TRUST,
    ceiling: Ceiling | None = None,
) -> TenantProfile:
    """Measure every node of ``program`` (see the module doc); the program's constants and
    ``inputs`` must already be on ``device``. Trusted misses are added to ``cache`` (not
    saved), refused ones noted there. ``timer`` defaults to the device's
    (``placement.timing.timer_for``); a time over ``ceiling`` is not trusted."""
    if repeats < 1:
        raise InputError(f"expected repeats >= 1, got {repeats!r}", field="repeats")
    device = torch.device(device)
    timer = timer or timer_for(device)
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
                out = step.target(*args, **kwargs)
                timing = cache.lookup(device_key, key)
                if timing is None:
                    call = functools.partial(step.target, *args, **kwargs)
                    most = None if ceiling is None else ceiling(step.target, args, kwargs, out)
                    timing, doubt = measure(call, timer, repeats, trust, ceiling_s=most)
                    if doubt is None:
                        cache.store(device_key, key, timing)
                    else:  # good enough for this plan, not for every later one
                        cache.refuse(device_key, key)
                scope[step.name] = out
                node_s[step.name] = timing.seconds
                total += timing.seconds
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
