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
    batch: 1            # optional, zoo models only (default 1)
    latency_goal_ms: 20 # optional
  - name: text
    model: bert
```

On the roofline platform the CPU is this machine's, measured once and cached
(``hardware.measure``). On a runnable platform (``cpu-sets``: two core sets of this machine;
``cuda``) every operator is measured on both processors (``placement.measured``).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from qosched.core.errors import InputError
from qosched.placement.platform import Platform, parse_platform

_TOP = ("machine", "max_switches", "seed", "tenants")
_TENANT = ("name", "model", "batch", "latency_goal_ms")


@dataclass(frozen=True)
class TenantSpec:
    name: str
    model: str
    batch: int = 1
    latency_goal_s: float | None = None


@dataclass(frozen=True)
class InferenceSpec:
    platform: Platform
    tenants: tuple[TenantSpec, ...]
    max_switches: int = 4
    seed: int = 0


def load_inference_spec(path: str | Path) -> InferenceSpec:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read spec: {exc.strerror}", source=path) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise InputError(f"not valid YAML: {exc}", source=path, line=line) from None
    return parse_inference_spec(data, source=path)


def parse_inference_spec(data: Any, *, source: str | Path = "<spec>") -> InferenceSpec:
    top = _mapping(data, "", source)
    _known_keys(top, _TOP, "", source)
    for key in ("machine", "tenants"):
        if key not in top:
            raise InputError("missing", source=source, field=key)
    platform = parse_platform(_mapping(top["machine"], "machine", source), source)
    seed = top.get("seed", 0)
    if not _whole(seed) or seed < 0:
        raise InputError(f"expected a whole number >= 0, got {seed!r}", source=source,
                         field="seed")  # fmt: skip
    switches = top.get("max_switches", 4)
    if not _whole(switches) or switches < 0:
        raise InputError(f"expected a whole number >= 0, got {switches!r}", source=source,
                         field="max_switches")  # fmt: skip
    tenants_data = top["tenants"]
    if not isinstance(tenants_data, list) or not tenants_data:
        raise InputError("expected a non-empty list", source=source, field="tenants")
    tenants = []
    for i, item in enumerate(tenants_data):
        where = f"tenants[{i}]"
        tenant = _mapping(item, where, source)
        _known_keys(tenant, _TENANT, where, source)
        for key in ("name", "model"):
            if not isinstance(tenant.get(key), str) or not tenant[key]:
                raise InputError("expected a non-empty string", source=source,
                                 field=f"{where}.{key}")  # fmt: skip
        batch = tenant.get("batch", 1)
        if not _whole(batch) or batch < 1:
            raise InputError(f"expected a whole number >= 1, got {batch!r}", source=source,
                             field=f"{where}.batch")  # fmt: skip
        goal_ms = tenant.get("latency_goal_ms")
        if goal_ms is not None and (
            isinstance(goal_ms, bool) or not isinstance(goal_ms, int | float) or not goal_ms > 0
        ):
            raise InputError(f"expected a positive number, got {goal_ms!r}", source=source,
                             field=f"{where}.latency_goal_ms")  # fmt: skip
        tenants.append(
            TenantSpec(
                tenant["name"],
                tenant["model"],
                batch,
                None if goal_ms is None else goal_ms / 1000.0,
            )
        )
    names = [t.name for t in tenants]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InputError(f"duplicate tenant names: {', '.join(duplicates)}", source=source,
                         field="tenants")  # fmt: skip
    return InferenceSpec(platform, tuple(tenants), switches, seed)


def _mapping(value: Any, where: str, source: str | Path) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"expected a mapping, got {type(value).__name__}", source=source,
                         field=where or None)  # fmt: skip
    return value


def _known_keys(data: dict, allowed: tuple[str, ...], where: str, source: str | Path) -> None:
    for key in data:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            field = f"{where}.{key}" if where else str(key)
            raise InputError(f"unknown key{hint} (valid: {', '.join(allowed)})", source=source,
                             field=field)  # fmt: skip


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
