"""Multi-tenant inference end to end: the problem a spec describes, COS against the baselines and
the bound, a plan made ready to run, and the reports ``qosched infer plan`` and ``qosched infer
run`` print (``to_json`` is their ``--json`` object). The CLI and ``bench/`` share these; the CLI
only adds the tables.

On the roofline platform the GPU is costed by roofline and the CPU measured on this machine (or
estimated too, with ``cpu_costs: roofline``); on a runnable platform (``cpu-sets``, ``cuda``)
every operator is measured on both processors.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from qosched.core.errors import InputError
from qosched.graph.capture import capture, load_model, takes_batch_and_device
from qosched.hardware.catalog import gpu, link
from qosched.hardware.measure import measure_cpu
from qosched.placement import baselines
from qosched.placement.bound import lp_bound
from qosched.placement.calibrate import calibrated, merge, read_calibration
from qosched.placement.costs import CostModel, tenant_from_graph
from qosched.placement.ir import PROCESSORS, InfeasibleError, PlacementPlan, Problem, TenantGraph
from qosched.placement.measured import (
    CacheUse,
    TenantModel,
    measure,
    measured_tenant,
    profile_job,
)
from qosched.placement.planfile import read_plan
from qosched.placement.platform import PinnedProcessor, RooflinePlatform, run_pinned, usable_cores
from qosched.placement.profile import DEFAULT_REPEATS
from qosched.placement.program import build_model, export_program, model_units, save_program
from qosched.placement.replay import RuntimeModel, fit_runtime_model, message_samples, replay
from qosched.placement.runtime import MeasuredRun, TenantRun
from qosched.placement.search import plan
from qosched.placement.spec import InferenceSpec, about_tenant


@dataclass(frozen=True)
class Costed:
    """A spec's problem, a title that says how its costs were found, and how the profile
    cache was used (None: nothing was measured)."""

    problem: Problem
    title: str
    cache: CacheUse | None = None


def roofline_problem(spec: InferenceSpec, cache: str | None, remeasure: bool = False) -> Costed:
    """Tenants on the spec's catalog GPU: GPU costs by roofline (times the calibration factor),
    CPU costs measured on this machine's usable cores unless the spec asks for roofline; and a
    title that says so. ``remeasure``: the cache's times ignored and replaced."""
    platform = spec.platform
    assert isinstance(platform, RooflinePlatform)
    costs = CostModel(
        measure_cpu(),
        gpu(platform.gpu),
        link(platform.link),
        gpu_calibration=platform.gpu_calibration,
    )
    tenants = []
    for i, tenant in enumerate(spec.tenants):
        options = {"batch": tenant.batch} if takes_batch_and_device(tenant.model) else {}
        with about_tenant(i):
            module, inputs = load_model(tenant.model, **options)
            graph = capture(module, inputs, name=tenant.name)
            estimated = tenant_from_graph(
                graph, costs, name=tenant.name, latency_goal_s=tenant.latency_goal_s
            )
        tenants.append(estimated)
    cpu_note = "roofline"
    use = None
    if platform.cpu_costs == "measured":
        host = PinnedProcessor("cpu", usable_cores())
        models = [TenantModel(t.name, t.model, t.batch) for t in spec.tenants]
        found, use = run_pinned(
            host, profile_job, host, models, spec.seed, cache, DEFAULT_REPEATS, remeasure
        )
        for i, (estimated, measured) in enumerate(zip(tenants, found, strict=True)):
            if tuple(u[0] for u in measured.units) != estimated.unit_ids:
                raise InputError(
                    f"tenant {estimated.name!r}: the model with weights cuts into other units "
                    "than the model captured without them",
                    field=f"tenants[{i}].model",
                )
            tenants[i] = replace(estimated, cpu_s=measured.profile.unit_s)
        cpu_note = f"measured on {len(host.cores)} cores"
    title = (
        f"COS on {costs.cpu.name} ({cpu_note}) + {costs.gpu.name} (roofline x "
        f"{platform.gpu_calibration:g}) over {platform.link}"
    )
    return Costed(Problem(tuple(tenants)), title, use)


def measured_problem(spec: InferenceSpec, cache: str | None, remeasure: bool = False) -> Costed:
    """Tenants measured on both processors of the spec's runnable platform, and a title."""
    pinned = spec.platform.pinned_processors()
    models = [TenantModel(t.name, t.model, t.batch) for t in spec.tenants]
    found = measure(models, pinned, seed=spec.seed, cache_path=cache, remeasure=remeasure)
    tenants: list[TenantGraph] = [
        measured_tenant(c, g, found.channel, t.latency_goal_s)
        for c, g, t in zip(found.cpu, found.gpu, spec.tenants, strict=True)
    ]
    note = (
        f"COS on {spec.platform.describe()} (measured; link {found.channel.latency_s * 1e6:.0f} "
        f"us + {found.channel.bandwidth / 1e9:.2f} GB/s; profile cache {found.cache.hits} hits, "
        f"{found.cache.misses} measured)"
    )
    return Costed(Problem(tuple(tenants)), note, found.cache)


def spec_problem(
    spec: InferenceSpec,
    cache: str | None,
    calibration_paths: Sequence[str] = (),
    *,
    remeasure: bool = False,
) -> Costed:
    """The problem of ``spec`` on its platform, scaled by the runs of ``calibration_paths``
    (merged) when there are any, and a title that says how its costs were found.
    ``remeasure``: what is measured ignores the cache's times and replaces them."""
    if spec.platform.runnable:
        costed = measured_problem(spec, cache, remeasure)
    else:
        costed = roofline_problem(spec, cache, remeasure)
    problem, title = costed.problem, costed.title
    if not calibration_paths:
        return costed
    calibration = merge(read_calibration(path) for path in calibration_paths)
    if dict(calibration.machine) != spec.platform.to_dict():
        raise InputError(
            f"the calibration was measured on machine {dict(calibration.machine)}, the "
            f"spec has {spec.platform.to_dict()}",
            source=calibration_paths[0],
            field="machine",
        )
    problem = calibrated(problem, calibration)
    title += f"; calibrated by {len(calibration_paths)} run(s)"
    # A pair no run measured keeps its isolated (optimistic) costs, which draws the plan
    # towards it: say so rather than guess a scale.
    missing = [
        f"{t.name} on the {p}"
        for t in problem.tenants
        for p in PROCESSORS
        if p not in calibration.unit_s.get(t.name, {})
    ]
    if missing:
        title += f" (not calibrated: {', '.join(missing)})"
    return Costed(problem, title, costed.cache)


@contextlib.contextmanager
def _threads(count: int | None) -> Iterator[None]:
    """PyTorch's intra-op threads set to ``count`` (unchanged for None) for the block."""
    before = torch.get_num_threads()
    if count is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


#: The baselines COS is compared with, in the order they are reported.
BASELINES = ("all_cpu", "all_gpu", "model_level", "layer_level")


@dataclass(frozen=True)
class Comparison:
    """COS's plan against the baselines (by name, in the order of ``BASELINES``) and the LP
    bound. A baseline that searches under the latency goals and finds no plan meeting them all
    (COS may: it can split a model where they cannot) is in ``infeasible``, with the reason,
    instead of ``baselines``."""

    cos: PlacementPlan
    search_s: float
    baselines: dict[str, PlacementPlan]
    bound_rps: float
    infeasible: dict[str, str] = field(default_factory=dict)


def compare(problem: Problem, max_switches: int) -> Comparison:
    """COS with ``max_switches`` switches per tenant (timed), all-CPU, all-GPU, model-level and
    layer-level placement with the same budget, and the LP bound."""
    started = time.perf_counter()
    cos = plan(problem, max_switches=max_switches)
    search_s = time.perf_counter() - started
    searches = {
        "all_cpu": lambda: baselines.all_cpu(problem),
        "all_gpu": lambda: baselines.all_gpu(problem),
        "model_level": lambda: baselines.model_level(problem),
        "layer_level": lambda: baselines.layer_level(problem, max_switches),
    }
    compared, infeasible = {}, {}
    for name in BASELINES:
        try:
            compared[name] = searches[name]()
        except InfeasibleError as error:
            infeasible[name] = error.reason
    return Comparison(cos, search_s, compared, lp_bound(problem).throughput_rps, infeasible)


@dataclass(frozen=True)
class TenantReport:
    name: str
    throughput_rps: float
    latency_s: float


@dataclass(frozen=True)
class InferReport:
    """What ``infer plan`` reports: requests/s per tenant of COS, the bound and each baseline."""

    throughput_rps: float
    bound_rps: float
    search_s: float
    baselines: dict[str, float]
    tenants: tuple[TenantReport, ...]

    @classmethod
    def of(cls, comparison: Comparison) -> InferReport:
        cos = comparison.cos
        return cls(
            throughput_rps=cos.throughput_rps,
            bound_rps=comparison.bound_rps,
            search_s=comparison.search_s,
            baselines={
                name: comparison.baselines[name].throughput_rps
                if name in comparison.baselines
                else 0.0  # no plan of its kind meets the goals: no rate within them
                for name in BASELINES
            },
            tenants=tuple(
                TenantReport(t.name, cos.throughput_rps, t.latency_s) for t in cos.tenants
            ),
        )

    def to_json(self) -> dict[str, Any]:
        """The ``infer plan --json`` object."""
        return {
            "throughput_rps": self.throughput_rps,
            "bound_rps": self.bound_rps,
            "search_s": self.search_s,
            "baselines": dict(self.baselines),
            "tenants": [
                {"name": t.name, "throughput_rps": t.throughput_rps, "latency_s": t.latency_s}
                for t in self.tenants
            ],
        }


@dataclass(frozen=True)
class PreparedRun:
    """A plan ready to run: the tenants' programs, their outputs run unsplit, the plan as scored
    by its own costs, and those costs."""

    tenants: tuple[TenantRun, ...]
    expected: tuple[tuple[torch.Tensor, ...], ...]
    plan: PlacementPlan
    problem: Problem


def prepare_run(
    spec: InferenceSpec, plan_path: str | Path, *, threads: int | None = None
) -> PreparedRun:
    """The tenants of ``spec`` ready to run ``plan_path``'s plan, with the outputs they must give
    (computed on ``threads`` threads when given: as many as the processes that will run them
    use, since a matrix product splits its sums by thread count). InputError when the plan does
    not fit the spec."""
    planned = read_plan(plan_path)
    if planned.machine != spec.platform.to_dict():
        raise InputError(
            f"the plan was made for machine {planned.machine}, the spec has "
            f"{spec.platform.to_dict()}",
            source=plan_path,
            field="machine",
        )
    wanted = tuple((t.name, t.model, t.batch) for t in spec.tenants)
    if planned.models != wanted or planned.seed != spec.seed:
        raise InputError(
            f"the plan's tenants {list(planned.models)} (seed {planned.seed}) are "
            f"not the spec's {list(wanted)} (seed {spec.seed})",
            source=plan_path,
            field="tenants",
        )
    tenants, expected = [], []
    for i, (tenant, graph, scored) in enumerate(
        zip(spec.tenants, planned.problem.tenants, planned.plan.tenants, strict=True)
    ):
        with about_tenant(i):  # a model that no longer builds as it did for the plan
            model, inputs = build_model(tenant.model, batch=tenant.batch, seed=spec.seed)
            units = model_units(model, inputs, tenant.name)
        unit_ids = tuple(u[0] for u in units)
        if unit_ids != graph.unit_ids:
            raise InputError(
                f"tenant {tenant.name!r}: the plan's units are not the model's "
                f"({len(graph.unit_ids)} planned, {len(unit_ids)} in the model)",
                source=plan_path,
                field="tenants",
            )
        program = export_program(model, inputs)
        # The unsplit program's outputs: what its units must give. Eager PyTorch may differ in
        # the last bits where an operator's lowering to core ATen computes it in another order
        # (attention, a Hugging Face model's layer norms).
        with torch.no_grad(), _threads(threads):
            expected.append(tuple(program.module()(*inputs)))
        tenants.append(
            TenantRun(
                tenant.name,
                save_program(program),
                tuple(map(tuple, units)),
                inputs,
                scored.assignment,
            )
        )
    return PreparedRun(tuple(tenants), tuple(expected), planned.plan, planned.problem)


@dataclass(frozen=True)
class Explained:
    """The runtime model fitted to a run's own messages, and the throughput the replay of the
    plan gives with it and with the protocol alone (the default model)."""

    model: RuntimeModel
    replayed_rps: float
    replayed_default_rps: float

    def to_json(self) -> dict[str, float]:
        return {
            "message_overhead_s": self.model.message_overhead_s,
            "compute_scale": self.model.compute_scale,
            "contention": self.model.contention,
            "replayed_rps": self.replayed_rps,
            "replayed_default_rps": self.replayed_default_rps,
        }


def explain(result: MeasuredRun, predicted: PlacementPlan, problem: Problem) -> Explained | None:
    """How much of the gap between predicted and measured the protocol, the per-message
    overhead, the slower operators and the two processes' contention account for. ``None`` when the
    run timed too few messages to fit."""
    assignments = [t.assignment for t in predicted.tenants]
    try:
        model = fit_runtime_model(
            message_samples(result.spans, problem, assignments), depth=result.depth
        )
    except InputError:
        return None
    rounds = {"rounds": result.rounds, "warmup": result.warmup}
    replayed = replay(problem, assignments, model, **rounds)
    default = replay(problem, assignments, RuntimeModel(depth=result.depth), **rounds)
    return Explained(model, replayed.total_throughput_rps, default.total_throughput_rps)


@dataclass(frozen=True)
class TenantRunReport:
    name: str
    predicted_rps: float
    measured_rps: float
    predicted_latency_s: float
    mean_latency_s: float
    p95_latency_s: float
    outputs_equal: bool


@dataclass(frozen=True)
class InferRunReport:
    """What ``infer run`` reports: measured against predicted, per tenant and in total."""

    predicted_rps: float
    measured_rps: float
    mean_latency_s: float
    requests: int
    depth: int
    wall_s: float
    busy_s: dict[str, float]
    predicted_busy_s: dict[str, float]
    explained: Explained | None
    tenants: tuple[TenantRunReport, ...]

    @property
    def ratio(self) -> float:
        return self.measured_rps / self.predicted_rps

    @classmethod
    def of(cls, result: MeasuredRun, predicted: PlacementPlan, problem: Problem) -> InferRunReport:
        latency = {t.name: t.latency_s for t in predicted.tenants}
        return cls(
            predicted_rps=predicted.throughput_rps * len(predicted.tenants),
            measured_rps=result.total_throughput_rps,
            mean_latency_s=statistics.fmean(x for t in result.tenants for x in t.latency_s),
            requests=result.rounds,
            depth=result.depth,
            wall_s=result.wall_s,
            busy_s=result.busy_s,
            predicted_busy_s={
                "cpu": predicted.cpu_s * result.rounds,
                "gpu": predicted.gpu_s * result.rounds,
            },
            explained=explain(result, predicted, problem),
            tenants=tuple(
                TenantRunReport(
                    name=t.name,
                    predicted_rps=predicted.throughput_rps,
                    measured_rps=t.throughput_rps,
                    predicted_latency_s=latency[t.name],
                    mean_latency_s=t.mean_latency_s,
                    p95_latency_s=t.p95_latency_s,
                    outputs_equal=t.outputs_equal,
                )
                for t in result.tenants
            ),
        )

    def to_json(self) -> dict[str, Any]:
        """The ``infer run --json`` object."""
        return {
            "predicted_rps": self.predicted_rps,
            "measured_rps": self.measured_rps,
            "ratio": self.ratio,
            "mean_latency_s": self.mean_latency_s,
            "requests": self.requests,
            "depth": self.depth,
            "wall_s": self.wall_s,
            "busy_s": self.busy_s,
            "predicted_busy_s": self.predicted_busy_s,
            "explained": None if self.explained is None else self.explained.to_json(),
            "tenants": [
                {
                    "name": t.name,
                    "predicted_rps": t.predicted_rps,
                    "measured_rps": t.measured_rps,
                    "predicted_latency_s": t.predicted_latency_s,
                    "mean_latency_s": t.mean_latency_s,
                    "p95_latency_s": t.p95_latency_s,
                    "outputs_equal": t.outputs_equal,
                }
                for t in self.tenants
            ],
        }
