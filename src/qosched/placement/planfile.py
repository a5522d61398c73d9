"""Plan files: what ``qosched infer plan --out`` writes and ``qosched infer run --plan`` reads.

```json
{"format": "qosched-placement-plan", "version": 1,
 "machine": {"platform": "cpu-sets", "cpu": [0], "gpu": [1]}, "seed": 0, "max_switches": 4,
 "method": "cos", "throughput_rps": 41.2, "bottleneck_s": 0.0243,
 "tenants": [{"name": "vision", "model": "resnet", "batch": 1,
              "unit_ids": ["convolution", ...], "assignment": ["cpu", "gpu", ...],
              "cpu_s": [...], "gpu_s": [...], "transfer_s": [...],
              "input_to_gpu_s": 1e-4, "output_from_gpu_s": 1e-4, "copy_share": 0.5,
              "latency_s": 0.012}]}
```

The costs the plan was made with travel in the file, so a run is compared with exactly the
prediction the search saw; ``read_plan`` rebuilds the problem and re-scores the assignments
(the stored ``throughput_rps`` and ``latency_s`` are for people).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qosched.core.errors import InputError
from qosched.placement.ir import PlacementPlan, Problem, TenantGraph, evaluate

FORMAT = "qosched-placement-plan"
VERSION = 1


@dataclass(frozen=True)
class PlanFile:
    """A plan read back: the machine mapping, seed, each tenant's model and batch, the
    problem (costs) and the plan scored on it."""

    machine: dict[str, Any]
    seed: int
    max_switches: int
    models: tuple[tuple[str, str, int], ...]  # (tenant, model, batch)
    problem: Problem
    plan: PlacementPlan


def _number(x: float) -> float | str:
    return "inf" if math.isinf(x) else x


def plan_to_dict(
    machine: dict[str, Any],
    seed: int,
    max_switches: int,
    models: dict[str, tuple[str, int]],
    problem: Problem,
    plan: PlacementPlan,
) -> dict[str, Any]:
    """The JSON object of the module doc; ``models`` maps a tenant to (model, batch)."""
    tenants = []
    for tenant, planned in zip(problem.tenants, plan.tenants, strict=True):
        model, batch = models[tenant.name]
        tenants.append(
            {
                "name": tenant.name,
                "model": model,
                "batch": batch,
                "unit_ids": list(tenant.unit_ids),
                "assignment": list(planned.assignment),
                "cpu_s": [_number(x) for x in tenant.cpu_s],
                "gpu_s": [_number(x) for x in tenant.gpu_s],
                "transfer_s": [_number(x) for x in tenant.transfer_s],
                "input_to_gpu_s": tenant.input_to_gpu_s,
                "output_from_gpu_s": tenant.output_from_gpu_s,
                "copy_share": tenant.copy_share,
                "latency_goal_s": tenant.latency_goal_s,
                "latency_s": planned.latency_s,
            }
        )
    return {
        "format": FORMAT,
        "version": VERSION,
        "machine": machine,
        "seed": seed,
        "max_switches": max_switches,
        "method": plan.method,
        "throughput_rps": plan.throughput_rps,
        "bottleneck_s": plan.bottleneck_s,
        "tenants": tenants,
    }


def write_plan(path: str | Path, data: dict[str, Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return path


def _field(data: dict, key: str, kind: type | tuple, where: str, source: Path) -> Any:
    if key not in data:
        raise InputError("missing", source=source, field=f"{where}{key}")
    value = data[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise InputError(f"expected {names}, got {value!r}", source=source, field=f"{where}{key}")
    return value


def _costs(values: Any, where: str, source: Path) -> tuple[float, ...]:
    if not isinstance(values, list):
        raise InputError("expected a list of seconds", source=source, field=where)
    result = []
    for i, v in enumerate(values):
        if v == "inf":
            result.append(math.inf)
        elif isinstance(v, int | float) and not isinstance(v, bool):
            result.append(float(v))
        else:
            raise InputError(
                f"expected seconds or 'inf' at index {i}, got {v!r}", source=source, field=where
            )
    return tuple(result)


def read_plan(path: str | Path) -> PlanFile:
    """The plan in ``path``; InputError naming the file and field when anything is off."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read plan: {exc.strerror}", source=path) from exc
    except ValueError as exc:
        raise InputError(
            f"not valid JSON: {exc}", source=path, line=getattr(exc, "lineno", None)
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(
            f'not a plan file: expected "format": "{FORMAT}" (write one with '
            "qosched infer plan SPEC --out FILE)",
            source=path,
        )
    if data.get("version") != VERSION:
        raise InputError(
            f"expected version {VERSION}, got {data.get('version')!r}", source=path, field="version"
        )
    machine = _field(data, "machine", dict, "", path)
    seed = _field(data, "seed", int, "", path)
    max_switches = _field(data, "max_switches", int, "", path)
    if max_switches < 0:
        raise InputError(
            f"expected a whole number >= 0, got {max_switches}", source=path, field="max_switches"
        )
    items = _field(data, "tenants", list, "", path)
    if not items:
        raise InputError("expected at least one tenant", source=path, field="tenants")
    graphs, assignments, models = [], [], []
    for i, item in enumerate(items):
        where = f"tenants[{i}]."
        if not isinstance(item, dict):
            raise InputError("expected a mapping", source=path, field=f"tenants[{i}]")
        name = _field(item, "name", str, where, path)
        model = _field(item, "model", str, where, path)
        batch = _field(item, "batch", int, where, path)
        unit_ids = _field(item, "unit_ids", list, where, path)
        assignment = _field(item, "assignment", list, where, path)
        goal = item.get("latency_goal_s")
        try:
            graph = TenantGraph(
                name=name,
                unit_ids=tuple(str(u) for u in unit_ids),
                cpu_s=_costs(item.get("cpu_s"), f"{where}cpu_s", path),
                gpu_s=_costs(item.get("gpu_s"), f"{where}gpu_s", path),
                transfer_s=_costs(item.get("transfer_s"), f"{where}transfer_s", path),
                input_to_gpu_s=_field(item, "input_to_gpu_s", (int, float), where, path),
                output_from_gpu_s=_field(item, "output_from_gpu_s", (int, float), where, path),
                latency_goal_s=goal,
                copy_share=item.get("copy_share", 0.0),
            )
        except InputError as exc:
            if exc.source is not None:
                raise
            raise InputError(
                exc.reason, source=path, field=f"{where}{exc.field}" if exc.field else None
            ) from None
        bad = [p for p in assignment if p not in ("cpu", "gpu")]
        if len(assignment) != len(unit_ids) or bad:
            raise InputError(
                f"expected one of 'cpu'/'gpu' per unit ({len(unit_ids)}), got "
                f"{len(assignment)} entries" + (f" with {bad[0]!r}" if bad else ""),
                source=path,
                field=f"{where}assignment",
            )
        costs = {"cpu": graph.cpu_s, "gpu": graph.gpu_s}
        for unit, processor in enumerate(assignment):
            if math.isinf(costs[processor][unit]):
                raise InputError(
                    f"unit {graph.unit_ids[unit]!r} is planned on the {processor}, whose cost "
                    "for it is infinite (it cannot run there)",
                    source=path,
                    field=f"{where}assignment",
                )
        graphs.append(graph)
        assignments.append(tuple(assignment))
        models.append((name, model, batch))
    try:
        problem = Problem(tuple(graphs))
    except InputError as exc:
        raise InputError(exc.reason, source=path, field=exc.field) from None
    plan = evaluate(problem, assignments, method=str(data.get("method", "cos")))
    return PlanFile(machine, seed, max_switches, tuple(models), problem, plan)
