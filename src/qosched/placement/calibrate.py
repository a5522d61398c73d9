"""Unit costs calibrated by runs: each tenant's operators on each processor, scaled by how much
slower (or faster) they ran in a real run than when profiled in isolation.

Isolated profiling times every operator hot: its weights and inputs in cache, repeated back to
back. In a run the requests of several tenants alternate on a worker, and how much that costs
depends on the model: on the core-set platform a MobileNet ran 1.2-1.3x its isolated time and a
ResNet 1.03-1.1x, so a plan balanced on isolated costs was not balanced in the run. A run of a
whole-model plan (every tenant on one processor: nothing else in the way) measures each tenant's
factor on that processor; :func:`calibrated` applies it to the tenant's unit costs there, and the
search then plans on what the runtime really spends.

``qosched infer run --calibration-out`` writes a :class:`Calibration`; ``qosched infer plan
--calibration`` reads one or more (their tenant/processor pairs merged).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from qosched.core.errors import InputError
from qosched.placement.ir import PROCESSORS, Problem
from qosched.report.trace import Span

FORMAT = "qosched-placement-calibration"
VERSION = 1
#: Segments shorter than this (isolated) are left out: there the fixed cost of a message, which
#: the runtime model holds, would pass for a slow operator.
MIN_ISOLATED_S = 2e-4


@dataclass(frozen=True)
class Calibration:
    """Measured over isolated time, per tenant and processor, on one machine (its spec dict)."""

    machine: Mapping[str, object]
    scales: Mapping[str, Mapping[str, float]]

    def __post_init__(self) -> None:
        for tenant, per in self.scales.items():
            for processor, scale in per.items():
                if processor not in PROCESSORS:
                    raise InputError(
                        f"tenant {tenant!r}: unknown processor {processor!r}", field="scales"
                    )
                if isinstance(scale, bool) or not isinstance(scale, int | float):
                    raise InputError(
                        f"tenant {tenant!r}: expected a number for {processor}, got {scale!r}",
                        field="scales",
                    )
                if not 0 < scale < math.inf:
                    raise InputError(
                        f"tenant {tenant!r}: expected a positive finite scale for {processor}, "
                        f"got {scale!r}",
                        field="scales",
                    )


def measure_scales(
    spans: Iterable[Span], problem: Problem, machine: Mapping[str, object]
) -> Calibration:
    """Per tenant and processor, the run's segment time over the same units' isolated cost
    (sums over every segment of at least ``MIN_ISOLATED_S``, so long segments weigh most)."""
    tenants = {t.name: t for t in problem.tenants}
    measured: dict[tuple[str, str], float] = {}
    isolated: dict[tuple[str, str], float] = {}
    for span in spans:
        if "units" not in span.args or span.track not in PROCESSORS:
            continue
        name = str(span.args["tenant"])
        if name not in tenants:
            raise InputError(f"the run has a tenant {name!r} the problem has not")
        lo, hi = span.args["units"]  # type: ignore[misc]
        tenant = tenants[name]
        cost = sum((tenant.cpu_s if span.track == "cpu" else tenant.gpu_s)[lo:hi])
        if cost < MIN_ISOLATED_S or not math.isfinite(cost):
            continue
        key = (name, span.track)
        measured[key] = measured.get(key, 0.0) + span.duration_s
        isolated[key] = isolated.get(key, 0.0) + cost
    scales: dict[str, dict[str, float]] = {}
    for (name, processor), total in isolated.items():
        scales.setdefault(name, {})[processor] = measured[name, processor] / total
    return Calibration(dict(machine), scales)


def merge(calibrations: Iterable[Calibration]) -> Calibration:
    """One calibration from several of the same machine; a tenant/processor pair measured more
    than once gets the mean of its scales."""
    calibrations = list(calibrations)
    if not calibrations:
        raise InputError("expected at least one calibration")
    machine = calibrations[0].machine
    seen: dict[tuple[str, str], list[float]] = {}
    for calibration in calibrations:
        if calibration.machine != machine:
            raise InputError(
                f"calibrations of different machines: {dict(machine)} and "
                f"{dict(calibration.machine)}",
                field="machine",
            )
        for tenant, per in calibration.scales.items():
            for processor, scale in per.items():
                seen.setdefault((tenant, processor), []).append(scale)
    scales: dict[str, dict[str, float]] = {}
    for (tenant, processor), values in seen.items():
        scales.setdefault(tenant, {})[processor] = sum(values) / len(values)
    return Calibration(machine, scales)


def calibrated(problem: Problem, calibration: Calibration) -> Problem:
    """``problem`` with each tenant's unit costs on each processor times its scale (pairs the
    calibration has no scale for are left as they are; tenants it names that the problem has
    not are an error, most likely a calibration of another spec)."""
    names = {t.name for t in problem.tenants}
    unknown = sorted(set(calibration.scales) - names)
    if unknown:
        raise InputError(f"the calibration has tenants {unknown} the spec has not", field="scales")
    tenants = []
    for tenant in problem.tenants:
        per = calibration.scales.get(tenant.name, {})
        cpu, gpu = per.get("cpu", 1.0), per.get("gpu", 1.0)
        tenants.append(
            dataclasses.replace(
                tenant,
                cpu_s=tuple(c * cpu for c in tenant.cpu_s),
                gpu_s=tuple(g * gpu for g in tenant.gpu_s),
            )
        )
    return dataclasses.replace(problem, tenants=tuple(tenants))


def write_calibration(calibration: Calibration, path: str | Path) -> None:
    data = {
        "format": FORMAT,
        "version": VERSION,
        "machine": dict(calibration.machine),
        "scales": {t: dict(per) for t, per in calibration.scales.items()},
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
    machine, scales = data.get("machine"), data.get("scales")
    if not isinstance(machine, dict):
        raise InputError("expected a machine object", source=path, field="machine")
    if not isinstance(scales, dict) or not all(isinstance(v, dict) for v in scales.values()):
        raise InputError(
            "expected scales as {tenant: {processor: scale}}", source=path, field="scales"
        )
    try:
        return Calibration(machine, scales)
    except InputError as error:
        raise InputError(error.reason, source=path, field=error.field) from None
