"""Real runs of an apps spec on the PyTorch runtime, each application compared with itself alone.

The simulator's question (``gpushare.simulator.compare``) asked of real execution: the spec's
models are built with their (random-initialised) weights on the device, every application
serves its requests back to back (closed loop: the runtime has no arrival process), first alone
and then together under a policy. Latency ratios compare request latencies; throughput ratios
compare requests per second while the most important applications are busy, since once they are
done a less important one runs alone and its throughput would say nothing about sharing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch

from qosched.core.errors import InputError
from qosched.gpushare.apps import AppsSpec, resolved_goals
from qosched.gpushare.kernel import Kernel
from qosched.gpushare.policy import SharingPolicy
from qosched.gpushare.runtime import App, CallEstimator, Device, GpuRun, run_apps
from qosched.gpushare.simulator import AppComparison, RunAlone
from qosched.graph.capture import load_model

#: Requests per application a run may serve: each is a real forward pass, run alone and then
#: shared, so this is already hours for most models.
MAX_REQUESTS = 100_000


def build_apps(spec: AppsSpec, *, device: str, requests: int, seed: int = 0) -> list[App]:
    """The spec's applications as real models on ``device``, each with ``requests`` copies of
    its example input. Applications given as explicit kernels cannot run and are refused."""
    if not 1 <= requests <= MAX_REQUESTS:
        raise InputError(
            f"requests must be in [1, {MAX_REQUESTS:,}], got {requests!r}", field="requests"
        )
    apps = []
    goals = resolved_goals(spec)
    torch.manual_seed(seed)
    for index, app in enumerate(spec.apps):
        if app.model is None:
            raise InputError(
                f"app {app.name!r} lists kernels, not a model: only models can run for real",
                source=spec.source,
                line=app.line,
                field=f"apps[{index}].model",
            )
        model, inputs = load_model(app.model, batch=app.batch, device=device)
        dtype = getattr(torch, app.dtype)
        model = model.to(dtype).eval()
        inputs = tuple(x.to(dtype) if x.is_floating_point() else x for x in inputs)
        apps.append(App(app.name, app.priority, model, (inputs,) * requests, goals[app.name]))
    return apps


def request_kernels(result: GpuRun, app: str) -> tuple[Kernel, ...]:
    """The estimated kernels of ``app``'s first request, in order, as the policy saw them."""
    records = sorted((r for r in result.records if r.app == app and r.request == 0),
                     key=lambda r: r.index)  # fmt: skip
    return tuple(r.kernel for r in records)


def request_finishes(result: GpuRun, app: str) -> list[float]:
    """When each request of ``app`` finished (its last operator), in request order."""
    ends: dict[int, float] = {}
    for record in result.records:
        if record.app == app:
            ends[record.request] = max(ends.get(record.request, 0.0), record.finished_s)
    return [ends[r] for r in sorted(ends)]


def compare_run(
    apps: Sequence[App],
    policy: SharingPolicy,
    *,
    device: Device,
    estimator: CallEstimator,
) -> tuple[tuple[AppComparison, ...], GpuRun]:
    """Warm up, run each application alone, then all together under ``policy``; return one
    comparison row per application and the shared run (for its trace)."""
    with torch.inference_mode():
        warm = run_apps([App(a.name, a.priority, a.model, a.inputs[:1], a.goal) for a in apps],
                        RunAlone(), device=device, estimator=estimator)  # fmt: skip
        # The warm-up's operators, as estimated (not timed), tell the policy each app's request
        # before the shared run, as the simulator tells it the spec's kernels.
        apps = [dataclasses.replace(a, kernels=request_kernels(warm, a.name)) for a in apps]
        alone = {
            a.name: run_apps([a], RunAlone(), device=device, estimator=estimator).app(a.name)
            for a in apps
        }
        shared = run_apps(apps, policy, device=device, estimator=estimator)
    top = max(a.priority for a in apps)
    # The window in which sharing happens: until the last top-priority request finished.
    window = max(request_finishes(shared, a.name)[-1] for a in apps if a.priority == top)
    rows = []
    for app in shared.apps:
        base = alone[app.name]
        done = [t for t in request_finishes(shared, app.name) if t <= window]
        alone_rate = len(base.latencies_s) / sum(base.latencies_s)
        rows.append(
            AppComparison(
                name=app.name,
                priority=app.priority,
                p50_latency_ratio=_quantile(app.latencies_s, 0.5)
                / _quantile(base.latencies_s, 0.5),
                p99_latency_ratio=_quantile(app.latencies_s, 0.99)
                / _quantile(base.latencies_s, 0.99),
                throughput_ratio=(len(done) / window) / alone_rate if window > 0 else math.nan,
                p50_latency_s=_quantile(app.latencies_s, 0.5),
                p99_latency_s=_quantile(app.latencies_s, 0.99),
                alone_p99_latency_s=_quantile(base.latencies_s, 0.99),
                completed=len(done),
                unfinished=len(app.latencies_s) - len(done),
                throughput_rps=len(done) / window if window > 0 else math.nan,
            )
        )
    return tuple(rows), shared


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]
