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

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qosched.core.bounds import MAX_BATCH
from qosched.core.spec_reader import SpecReader
from qosched.core.yaml_lines import load_with_lines, read_spec_file
from qosched.placement.platform import Platform, parse_platform

#: Tenants on one machine. Each is captured and, on the default platform, measured on this
#: machine's CPU before the search: about 1.5 s a tenant on a 2-core machine (128 zoo tenants
#: took 199 s of ``infer plan``), so a longer list is refused rather than left running.
MAX_TENANTS = 64
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
    platform = parse_platform(r.required(top, "", "machine"), source)
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
        goal_s = None
        if tenant.get("latency_goal_ms") is not None:
            goal_s = r.positive(tenant["latency_goal_ms"], f"{where}.latency_goal_ms") / 1000.0
        tenants.append(
            TenantSpec(
                r.label(r.required(tenant, where, "name"), f"{where}.name"),
                r.text(r.required(tenant, where, "model"), f"{where}.model"),
                r.whole(tenant.get("batch", 1), f"{where}.batch", 1, MAX_BATCH),
                goal_s,
            )
        )
    names = [t.name for t in tenants]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise r.error("tenants", f"duplicate tenant names: {', '.join(duplicates)}")
    return InferenceSpec(platform, tuple(tenants), switches, seed)
