"""``qosched infer plan SPEC``: the tenants sharing a machine, as a YAML file.

```yaml
machine:
  platform: roofline    # optional, the default; see placement.platform for cpu-sets and cuda
  gpu: T4               # a catalog GPU (hardware.catalog)
  link: PCIe3-x16       # the CPU-GPU link (hardware.catalog)
max_switches: 4         # optional: processor switches allowed per tenant (default 4)
seed: 0                 # optional: seeds the models' weights and inputs where they really run
tenants:
  - name: vision
    model: resnet       # a zoo name, or package.module:factory returning (module, inputs)
    batch: 1            # optional, zoo and hf: models only (default 1)
    latency_goal_ms: 20 # optional
  - name: text
    model: bert
```

At most 64 tenants (``MAX_TENANTS``), each name once. On the roofline platform the CPU is this
machine's, measured once and cached
(``hardware.measure``). On a runnable platform (``cpu-sets``: two core sets of this machine;
``cuda``) every operator is measured on both processors (``placement.measured``).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from qosched.core.bounds import MAX_BATCH
from qosched.core.errors import InputError
from qosched.core.spec_reader import SpecReader
from qosched.core.yaml_lines import load_with_lines, read_spec_file
from qosched.graph.capture import model_name_problem
from qosched.placement.platform import Platform, parse_platform

#: Tenants on one machine. Each is captured and, on the default platform, measured on this
#: machine's CPU before the search: about 1.5 s a tenant on a 2-core machine (128 zoo tenants
#: took 199 s of ``infer plan``), so a longer list is refused rather than left running.
MAX_TENANTS = 64
_TOP = ("machine", "max_switches", "seed", "tenants")
_TENANT = ("name", "model", "batch", "latency_goal_ms")
#: A field of one tenant as the stages after the spec name it (``Problem.tenants[i]``).
_TENANT_FIELD = re.compile(r"tenants\[(\d+)\]\.(\w+)")
#: Those stages' fields that the spec writes otherwise.
_SPEC_KEY = {"latency_goal_s": "latency_goal_ms"}


@dataclass(frozen=True)
class TenantSpec:
    name: str
    model: str
    batch: int = 1
    latency_goal_s: float | None = None


@dataclass(frozen=True)
class InferenceSpec:
    """A validated spec; ``source`` and ``lines`` (dotted field -> line) say where it was
    written, for the errors found later (:meth:`located`)."""

    platform: Platform
    tenants: tuple[TenantSpec, ...]
    max_switches: int = 4
    seed: int = 0
    source: str = field(default="<spec>", compare=False)
    lines: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)

    @contextlib.contextmanager
    def located(self) -> Iterator[None]:
        """An InputError raised in the block about a field of the machine (``machine.gpu``: cores
        not usable here) or of one tenant (``tenants[2].model``: a model that does not build;
        ``tenants[0].latency_goal_s``: a goal no plan meets) and naming no file of its own,
        re-raised naming this spec's file and that field's line."""
        try:
            yield
        except InputError as error:
            path = None if error.source is not None else self._path_of(error.field or "")
            if path is None:
                raise
            raise SpecReader(self.source, self.lines).error(path, error.reason) from error

    def _path_of(self, field: str) -> str | None:
        """The spec's path of a field a later stage names, or None when it is none of them."""
        if field == "machine" or field.startswith("machine."):
            return field
        found = _TENANT_FIELD.fullmatch(field)
        if found is None or int(found[1]) >= len(self.tenants):
            return None
        return f"tenants[{found[1]}].{_SPEC_KEY.get(found[2], found[2])}"


@contextlib.contextmanager
def about_tenant(index: int) -> Iterator[None]:
    """An InputError naming no file raised in the block, where tenant ``index``'s model is
    built, captured or profiled, re-raised as one about its field ``tenants[index].model``:
    such a step fails only by what the model is. Memory that cannot be had is an InputError
    about its ``batch``, the one knob that sizes a zoo model's tensors."""
    try:
        yield
    except InputError as error:
        if error.source is not None:
            raise
        raise InputError(error.reason, field=f"tenants[{index}].model") from error
    except (MemoryError, RuntimeError) as error:
        # PyTorch's CPU allocator fails with a RuntimeError of this text, CUDA's with
        # torch.OutOfMemoryError (a RuntimeError too).
        text = str(error)
        if not isinstance(error, MemoryError | torch.OutOfMemoryError) and (
            "can't allocate memory" not in text
        ):
            raise
        # "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't ...": the
        # allocator's words from "can't" on.
        detail = text[text.find("can't allocate") :] if "can't allocate" in text else text
        detail = (detail.strip().splitlines() or [type(error).__name__])[0][:200]
        raise InputError(
            f"the model does not fit in memory at this batch: {detail}",
            field=f"tenants[{index}].batch",
        ) from error


def load_inference_spec(path: str | Path) -> InferenceSpec:
    """Read and validate a spec file; InputError names the file, line and field."""
    path = Path(path)
    data, lines = load_with_lines(read_spec_file(path, "spec"), path)
    return parse_inference_spec(data, source=path, lines=lines)


def parse_inference_spec(
    data: Any, *, source: str | Path = "<spec>", lines: Mapping[str, int] | None = None
) -> InferenceSpec:
    """Validate a loaded spec; ``lines`` (from ``core.yaml_lines``) puts lines in the errors."""
    r = SpecReader(source, lines)
    top = r.mapping(data, "", _TOP)
    machine = r.required(top, "", "machine")
    try:
        platform = parse_platform(machine, source)
    except InputError as error:  # the platform's own keys: add the line of the field named
        if error.field is None or error.line is not None:
            raise
        raise r.error(error.field, error.reason) from error
    seed = r.whole(top.get("seed", 0), "seed", 0)
    switches = r.whole(top.get("max_switches", 4), "max_switches", 0)
    items = r.sequence(r.required(top, "", "tenants"), "tenants")
    if len(items) > MAX_TENANTS:
        raise r.error(
            "tenants", f"at most {MAX_TENANTS} tenants share one machine, got {len(items)}"
        )
    tenants = []
    for i, item in enumerate(items):
        where = f"tenants[{i}]"
        tenant = r.mapping(item, where, _TENANT)
        name = r.label(r.required(tenant, where, "name"), f"{where}.name")
        model = r.text(r.required(tenant, where, "model"), f"{where}.model")
        problem = model_name_problem(model)
        if problem is not None:
            raise r.error(f"{where}.model", problem)
        goal_s = None
        if tenant.get("latency_goal_ms") is not None:
            goal_s = r.positive(tenant["latency_goal_ms"], f"{where}.latency_goal_ms") / 1000.0
        tenants.append(
            TenantSpec(
                name,
                model,
                r.whole(tenant.get("batch", 1), f"{where}.batch", 1, MAX_BATCH),
                goal_s,
            )
        )
    names = [t.name for t in tenants]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise r.error("tenants", f"duplicate tenant names: {', '.join(duplicates)}")
    return InferenceSpec(platform, tuple(tenants), switches, seed, str(source), dict(lines or {}))
