"""Tenants costed by measurement on a runnable platform (core sets, or a CPU and a CUDA GPU).

Called by ``qosched infer plan`` when the spec's platform is runnable. For each processor, a
fresh process pinned to its cores builds every tenant's model with real weights, exports it and
profiles each operator in isolation (``placement.profile``, cached); a unit costs the sum of
its operators. The two processors are profiled one after the other, so neither disturbs the
other's measurement.

The link: a cut costs ``latency + bytes / bandwidth``, both fitted by least squares on relative
error to one-way times of tensors of several sizes bounced between the two processes exactly as
the runtime moves them (pickled through a pipe; to and from the device on CUDA). Cached like
operator times.

Contention, as the plan's cost model states it (``placement.ir``): a processor runs one unit at
a time, so tenants sharing it add up (its load is the sum of theirs), and the two processors do
not slow each other down. The pinned processes copy the tensors themselves (the sender packs,
the receiver unpacks), so every copy also occupies each end for half its time
(``COPY_SHARE``). ``bench/placement_evidence.py`` checks all of this against runs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from qosched.core.errors import InputError
from qosched.graph.capture import capture
from qosched.graph.passes import coarsen, linearize
from qosched.hardware.measure import measure_cpu
from qosched.placement.ceiling import roofline_ceiling
from qosched.placement.costs import layer_boundaries
from qosched.placement.ir import TenantGraph
from qosched.placement.platform import PinnedProcessor, pin, process_context, run_pinned
from qosched.placement.profile import DEFAULT_REPEATS, ProfileCache, TenantProfile, profile_tenant
from qosched.placement.program import UnitProgram, build_model, export_program
from qosched.placement.runtime import pack, to_device, unpack
from qosched.placement.spec import about_tenant
from qosched.placement.timing import TimedCall, Timing

#: Share of a copy's time spent by each of the two pinned processes (``TenantGraph.copy_share``).
COPY_SHARE = 0.5
CHANNEL_SIZES = (256, 4 * 2**10, 64 * 2**10, 512 * 2**10, 4 * 2**20)
CHANNEL_REPEATS = 15


@dataclass(frozen=True)
class TenantModel:
    """A tenant as far as measurement needs it: its name, model (zoo name or import path) and
    batch."""

    name: str
    model: str
    batch: int = 1


@dataclass(frozen=True)
class Channel:
    """One copy across the cut between the two processes: ``latency_s + bytes / bandwidth``."""

    latency_s: float
    bandwidth: float

    def copy_s(self, nbytes: int) -> float:
        return self.latency_s + nbytes / self.bandwidth


@dataclass(frozen=True)
class MeasuredTenant:
    """A tenant's profile on one processor plus its units and layer boundaries."""

    profile: TenantProfile
    units: tuple[tuple[str, ...], ...]
    boundaries: tuple[int, ...]


@dataclass(frozen=True)
class CacheUse:
    """How a profile used its cache: operator times found (``hits``), measured (``misses``),
    measured but too noisy to keep (``refused``, distinct operators), and times of an old cache
    ignored as untrusted (``untrusted``)."""

    hits: int = 0
    misses: int = 0
    refused: int = 0
    untrusted: int = 0

    def __add__(self, other: CacheUse) -> CacheUse:
        return CacheUse(
            self.hits + other.hits,
            self.misses + other.misses,
            self.refused + other.refused,
            max(self.untrusted, other.untrusted),  # both read the same file
        )


@dataclass(frozen=True)
class Measurement:
    """Everything measured for a problem: per-processor profiles, the channel, cache use."""

    cpu: tuple[MeasuredTenant, ...]
    gpu: tuple[MeasuredTenant, ...]
    channel: Channel
    cache: CacheUse


def profile_job(
    pinned: PinnedProcessor,
    tenants: Sequence[TenantModel],
    seed: int,
    cache_path: str | None,
    repeats: int,
    remeasure: bool = False,
) -> tuple[list[MeasuredTenant], CacheUse]:
    """Run pinned to ``pinned.cores``: profile every tenant (``remeasure``: every operator, the
    cache's times ignored and replaced); returns the profiles and the cache's use. Saves the
    cache. A model that does not build is an InputError about ``tenants[i].model``, one that
    does not fit in memory about ``tenants[i].batch``."""
    cache = ProfileCache(cache_path, remeasure=remeasure)
    device = torch.device(pinned.device)
    key = pinned.cost_key()
    # Measured here, pinned: the peak of these cores. A GPU has no catalog entry to go by.
    ceiling = roofline_ceiling(measure_cpu()) if device.type == "cpu" else None
    result = []
    for i, tenant in enumerate(tenants):
        with about_tenant(i):
            model, inputs = build_model(tenant.model, batch=tenant.batch, seed=seed)
            graph = coarsen(capture(model, inputs, name=tenant.name))
            units = linearize(graph)
            program = UnitProgram(export_program(model, inputs), units, tenant.name).to(device)
            on_device = [t.to(device) for t in inputs]
            profile = profile_tenant(
                program, on_device, cache, key, device=device, repeats=repeats, ceiling=ceiling
            )
        result.append(
            MeasuredTenant(profile, tuple(map(tuple, units)), layer_boundaries(graph, units))
        )
    cache.save()
    return result, CacheUse(cache.hits, cache.misses, cache.refused, cache.untrusted)


def _echo(pinned: PinnedProcessor, inbox: Any, outbox: Any) -> None:
    pin(pinned.cores)
    device = torch.device(pinned.device)
    while True:
        data = inbox.get()
        if data is None:
            return
        values = to_device(unpack(data), device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        outbox.put(pack(to_device(values, torch.device("cpu"))))


def _ping(
    pinned: PinnedProcessor,
    sizes: Sequence[int],
    repeats: int,
    to_echo: Any,
    from_echo: Any,
    out: Any,
) -> None:
    pin(pinned.cores)
    one_way = []
    for size in sizes:
        values = {"x": torch.ones(size // 4, dtype=torch.float32)}
        times = []
        for i in range(repeats + 2):
            start = time.perf_counter()
            to_echo.put(pack(values))
            unpack(from_echo.get())
            if i >= 2:  # two warm-up bounces
                times.append(TimedCall((time.perf_counter() - start) / 2, None))
        one_way.append(Timing.of(times))
    to_echo.put(None)
    out.put(one_way)


def measure_channel(a: PinnedProcessor, b: PinnedProcessor, cache: ProfileCache) -> Channel:
    """The fitted channel from ``a`` to ``b`` (see the module doc), measured once and cached."""
    device = f"channel|v3|{a.cost_key()}|{a.device}->{b.cost_key()}|{b.device}"
    latency = cache.lookup(device, "latency_s")
    per_byte = cache.lookup(device, "s_per_byte")
    if latency is not None and per_byte is not None:
        return Channel(latency.seconds, 1.0 / per_byte.seconds)
    context = process_context()
    to_echo, from_echo, out = context.Queue(), context.Queue(), context.Queue()
    echo = context.Process(target=_echo, args=(b, to_echo, from_echo), daemon=True)
    ping = context.Process(
        target=_ping,
        args=(a, CHANNEL_SIZES, CHANNEL_REPEATS, to_echo, from_echo, out),
        daemon=True,
    )
    echo.start()
    ping.start()
    one_way: list[Timing] = out.get(timeout=300)
    ping.join()
    echo.join()
    # Weighted by 1 / time, so every size counts by its relative error: unweighted, the largest
    # copies' noise (tens of microseconds on tens of milliseconds) swamps the per-copy latency,
    # which is what a plan with many small cuts pays most.
    times = np.array([t.seconds for t in one_way])
    slope, intercept = np.polyfit(np.array(CHANNEL_SIZES, dtype=float), times, 1, w=1.0 / times)
    # A fit can dip below zero when the latency is tiny; a copy never costs less than nothing.
    channel = Channel(max(float(intercept), 0.0), 1.0 / max(float(slope), 1e-15))
    # Stored with the widest spread of its sizes, not checked against it: copies through a
    # pipe wait on the other process, so neither the spread nor the CPU share of one tells a
    # busy machine from a quiet one as an operator's do.
    spread = max(t.spread for t in one_way)
    cache.store(device, "latency_s", Timing(channel.latency_s, CHANNEL_REPEATS, spread, None))
    cache.store(
        device, "s_per_byte", Timing(1.0 / channel.bandwidth, CHANNEL_REPEATS, spread, None)
    )
    cache.save()
    return channel


def measure(
    tenants: Sequence[TenantModel],
    pinned: tuple[PinnedProcessor, PinnedProcessor],
    *,
    seed: int = 0,
    cache_path: str | Path | None = None,
    repeats: int = DEFAULT_REPEATS,
    remeasure: bool = False,
) -> Measurement:
    """Profile ``tenants`` on both processors (one after the other) and measure the channel;
    ``remeasure``: all of it, the cache's times ignored and replaced."""
    path = None if cache_path is None else str(cache_path)
    cpu, cpu_use = run_pinned(
        pinned[0], profile_job, pinned[0], tenants, seed, path, repeats, remeasure
    )
    gpu, gpu_use = run_pinned(
        pinned[1], profile_job, pinned[1], tenants, seed, path, repeats, remeasure
    )
    channel = measure_channel(pinned[0], pinned[1], ProfileCache(path, remeasure=remeasure))
    return Measurement(tuple(cpu), tuple(gpu), channel, cpu_use + gpu_use)


def measured_tenant(
    cpu: MeasuredTenant, gpu: MeasuredTenant, channel: Channel, latency_goal_s: float | None
) -> TenantGraph:
    """The plan's view of one tenant from its two profiles and the channel."""
    if cpu.units != gpu.units:
        raise InputError(f"tenant {cpu.profile.name!r}: the two processors saw different units")
    return TenantGraph(
        name=cpu.profile.name,
        unit_ids=tuple(unit[0] for unit in cpu.units),
        cpu_s=cpu.profile.unit_s,
        gpu_s=gpu.profile.unit_s,
        transfer_s=tuple(channel.copy_s(b) for b in cpu.profile.cut_bytes),
        input_to_gpu_s=channel.copy_s(cpu.profile.input_bytes),
        output_from_gpu_s=channel.copy_s(cpu.profile.output_bytes),
        latency_goal_s=latency_goal_s,
        layer_boundaries=cpu.boundaries,
        copy_share=COPY_SHARE,
    )
