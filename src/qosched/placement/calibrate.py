"""Unit costs calibrated by runs: each tenant's units on each processor as long as they took in
a real run, not as the sum of their operators profiled in isolation.

Isolated profiling times every operator hot (its weights and inputs in cache, repeated back to
back) and as a bare ATen call. In a run the requests of several tenants share a process
and every node pays the interpreter's dispatch, and how much that adds depends on the unit: on
the core-set platform a ResNet ran 1.1x its isolated time as a whole and MobileNet 1.4x, while
a MobileNet unit of a few tiny operators took 2-8x. A plan balanced on isolated costs was not
balanced in the run, and the units it moved for balance were often the small ones, the most
underestimated. The runtime times every unit of every segment it runs (on the CPU, where
operators run synchronously); :func:`measure_unit_times` keeps each unit's median,
:func:`calibrated` puts them in place of the isolated costs.

A run measures only the units its plan put on each processor: a whole-model plan (every tenant
on one processor) measures whole tenants. Units a run did not measure keep their isolated cost
times the ratio measured over isolated of the tenant's measured units on that processor; a
tenant with no unit measured on a processor keeps its costs there (``qosched infer plan`` names
such pairs).

``qosched infer run --calibration-out`` writes a :class:`Calibration`; ``qosched infer plan
--calibration`` reads one or more (merged: the mean where several measured a unit).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from qosched.core.errors import InputError
from qosched.core.trace import Span
from qosched.placement.ir import PROCESSORS, Problem, TenantGraph

FORMAT = "qosched-placement-calibration"
VERSION = 1

UnitTimes = tuple[float | None, ...]  # one per unit; None: not measured


@dataclass(frozen=True)
class Calibration:
    """Measured seconds per unit, per tenant and processor, on one machine (its spec dict)."""

    machine: Mapping[str, object]
    unit_s: Mapping[str, Mapping[str, UnitTimes]]

    def __post_init__(self) -> None:
        for tenant, per in self.unit_s.items():
            for processor, times in per.items():
                if processor not in PROCESSORS:
                    raise InputError(
                        f"tenant {tenant!r}: unknown processor {processor!r}", field="unit_s"
                    )
                if not isinstance(times, Sequence) or isinstance(times, str):
                    raise InputError(
                        f"tenant {tenant!r}: expected a list of seconds for {processor}",
                        field="unit_s",
                    )
                for i, value in enumerate(times):
                    if value is None:
                        continue
                    if isinstance(value, bool) or not isinstance(value, int | float):
                        raise InputError(
                            f"tenant {tenant!r}: unit {i} on the {processor}: expected seconds "
                            f"or null, got {value!r}",
                            field="unit_s",
                        )
                    if not 0 < value < math.inf:
                        raise InputError(
                            f"tenant {tenant!r}: unit {i} on the {processor}: expected a "
                            f"positive finite time, got {value!r}",
                            field="unit_s",
                        )


def measure_unit_times(
    spans: Iterable[Span], problem: Problem, machine: Mapping[str, object]
) -> Calibration:
    """Each unit's median time over the run's segments that timed it (``unit_s`` in a segment
    span's args; a segment without them, as on a CUDA device, is left out)."""
    tenants = {t.name: t for t in problem.tenants}
    samples: dict[tuple[str, str, int], list[float]] = {}
    for span in spans:
        times = span.args.get("unit_s")
        if "units" not in span.args or span.track not in PROCESSORS or not times:
            continue
        name = str(span.args["tenant"])
        if name not in tenants:
            raise InputError(f"the run has a tenant {name!r} the problem has not")
        lo, hi = span.args["units"]  # type: ignore[misc]
        if len(times) != hi - lo or hi > tenants[name].n_units:  # type: ignore[arg-type]
            raise InputError(f"tenant {name!r}: a segment's unit times do not fit its units")
        for k, seconds in zip(range(lo, hi), times, strict=True):  # type: ignore[call-overload]
            samples.setdefault((name, span.track, k), []).append(float(seconds))
    unit_s: dict[str, dict[str, list[float | None]]] = {}
    for (name, processor, k), values in samples.items():
        row = unit_s.setdefault(name, {}).setdefault(processor, [None] * tenants[name].n_units)
        row[k] = max(statistics.median(values), 1e-9)  # a unit of views can time at zero
    return Calibration(
        dict(machine), {t: {p: tuple(v) for p, v in per.items()} for t, per in unit_s.items()}
    )


def merge(calibrations: Iterable[Calibration]) -> Calibration:
    """One calibration from several of the same machine; a unit measured more than once gets the
    mean of its times."""
    calibrations = list(calibrations)
    if not calibrations:
        raise InputError("expected at least one calibration")
    machine = calibrations[0].machine
    seen: dict[tuple[str, str], list[list[float]]] = {}
    for calibration in calibrations:
        if calibration.machine != machine:
            raise InputError(
                f"calibrations of different machines: {dict(machine)} and "
                f"{dict(calibration.machine)}",
                field="machine",
            )
        for tenant, per in calibration.unit_s.items():
            for processor, times in per.items():
                rows = seen.setdefault((tenant, processor), [[] for _ in times])
                if len(rows) != len(times):
                    raise InputError(
                        f"tenant {tenant!r}: calibrations with {len(rows)} and {len(times)} "
                        "units: not the same model",
                        field="unit_s",
                    )
                for row, value in zip(rows, times, strict=True):
                    if value is not None:
                        row.append(value)
    unit_s: dict[str, dict[str, UnitTimes]] = {}
    for (tenant, processor), rows in seen.items():
        unit_s.setdefault(tenant, {})[processor] = tuple(
            sum(row) / len(row) if row else None for row in rows
        )
    return Calibration(machine, unit_s)


def _ratio(isolated: Sequence[float], measured: UnitTimes) -> float | None:
    """Measured over isolated time of the units measured (``None``: none with a cost)."""
    pairs = [(i, m) for i, m in zip(isolated, measured, strict=True) if m is not None]
    total = sum(i for i, _ in pairs if math.isfinite(i))
    return sum(m for _, m in pairs) / total if total > 0 else None


def _calibrated_costs(isolated: Sequence[float], measured: UnitTimes) -> tuple[float, ...]:
    ratio = _ratio(isolated, measured) or 1.0
    return tuple(i * ratio if m is None else m for i, m in zip(isolated, measured, strict=True))


def calibrated(problem: Problem, calibration: Calibration) -> Problem:
    """``problem`` with measured unit times in place of isolated costs (see the module doc).
    Tenants the calibration names that the problem has not, or with another number of units,
    are an error: most likely a calibration of another spec."""
    names = {t.name for t in problem.tenants}
    unknown = sorted(set(calibration.unit_s) - names)
    if unknown:
        raise InputError(f"the calibration has tenants {unknown} the spec has not", field="unit_s")
    tenants: list[TenantGraph] = []
    for tenant in problem.tenants:
        per = calibration.unit_s.get(tenant.name, {})
        costs = {"cpu": tenant.cpu_s, "gpu": tenant.gpu_s}
        for processor, measured in per.items():
            if len(measured) != tenant.n_units:
                raise InputError(
                    f"tenant {tenant.name!r}: the calibration has {len(measured)} units, the "
                    f"model {tenant.n_units}",
                    field="unit_s",
                )
            costs[processor] = _calibrated_costs(costs[processor], measured)
        tenants.append(dataclasses.replace(tenant, cpu_s=costs["cpu"], gpu_s=costs["gpu"]))
    return dataclasses.replace(problem, tenants=tuple(tenants))


def scales(problem: Problem, calibration: Calibration) -> dict[str, dict[str, float]]:
    """Per tenant and processor, measured over isolated time of the units measured there."""
    result: dict[str, dict[str, float]] = {}
    for tenant in problem.tenants:
        for processor, measured in calibration.unit_s.get(tenant.name, {}).items():
            isolated = tenant.cpu_s if processor == "cpu" else tenant.gpu_s
            ratio = _ratio(isolated, measured)
            if ratio is not None:
                result.setdefault(tenant.name, {})[processor] = ratio
    return result


def write_calibration(calibration: Calibration, path: str | Path) -> None:
    data = {
        "format": FORMAT,
        "version": VERSION,
        "machine": dict(calibration.machine),
        "unit_s": {
            t: {p: list(times) for p, times in per.items()} for t, per in calibration.unit_s.items()
        },
    }
    Path(path).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def read_calibration(path: str | Path) -> Calibration:
    """A calibration file, checked: InputError naming the file and field otherwise."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise InputError(f"cannot read the calibration: {error}", source=path) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(f"not JSON: {error}", source=path) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"not a {FORMAT} file", source=path, field="format")
    if data.get("version") != VERSION:
        raise InputError(
            f"expected version {VERSION}, got {data.get('version')!r}", source=path, field="version"
        )
    machine, unit_s = data.get("machine"), data.get("unit_s")
    if not isinstance(machine, dict):
        raise InputError("expected a machine object", source=path, field="machine")
    if not isinstance(unit_s, dict) or not all(isinstance(v, dict) for v in unit_s.values()):
        raise InputError(
            "expected unit_s as {tenant: {processor: [seconds or null per unit]}}",
            source=path,
            field="unit_s",
        )
    try:
        return Calibration(
            machine,
            {
                t: {p: tuple(v) if isinstance(v, list) else v for p, v in per.items()}
                for t, per in unit_s.items()
            },
        )
    except InputError as error:
        raise InputError(error.reason, source=path, field=error.field) from None
