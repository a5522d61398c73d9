"""``qosched gpu sim SPEC``: applications sharing one GPU, as a YAML file.

```yaml
gpu: A100                # a catalog GPU (hardware.catalog)
duration_s: 2.0          # simulated time in which requests start
seed: 1                  # Poisson arrivals are drawn from it
dtype: float32           # optional default for models (float32, float16, bfloat16)
apps:
  - name: resnet50-serving
    model: resnet50      # a zoo name or package.module:factory, estimated without running it
    batch: 1             # optional (default 1)
    priority: 2          # whole number >= 0, larger = more important
    arrivals: {poisson_rps: 200}   # open loop ...
    goal: {p99_slowdown: 1.10}     # optional: see below
  - name: bert-batch
    model: bert_base
    batch: 32
    priority: 0
    closed_loop: true    # ... or back-to-back requests
  - name: custom
    priority: 1
    closed_loop: true
    kernels:             # instead of a model: the request's kernels, as gpushare.kernel.Kernel
      - {name: gemm, op: mm, grid: [64, 1, 1], block: [256, 1, 1], registers_per_thread: 128,
         shared_bytes_per_block: 32768, sms: 64, occupancy: 0.25, flops: 1.0e9, bytes: 2.0e7,
         bound: compute, time_s: 1.0e-4}
```

``goal`` (optional) is the app's QoS (``core.goals``): one of ``{p99_slowdown: R}`` (p99
latency at most R x alone), ``{p99_latency_ms: L}``, ``{throughput_share: S}`` (at least S of its
throughput alone), ``{throughput_rps: N}`` or ``best_effort``. Without one, the most important
app gets p99 within 1.10x and the others are best effort.

Every error names the file, the line and the field (``apps[1].batch``). Explicit kernels must be
launchable on the spec's GPU (its SMs, registers per thread, shared memory and threads per block,
CUDA's grid and block sizes) and last 1 us to an hour; ``duration_s`` is at most a day.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qosched.core.bounds import MAX_BATCH, show_value
from qosched.core.errors import InputError
from qosched.core.goals import Goal, default_goal
from qosched.core.spec_reader import SpecReader
from qosched.core.yaml_lines import load_with_lines, read_spec_file
from qosched.gpushare.kernel import Kernel
from qosched.gpushare.simulator import AppWorkload
from qosched.hardware import Processor
from qosched.hardware.catalog import gpu as catalog_gpu
from qosched.hardware.sm_limits import sm_limits

_TOP = ("gpu", "duration_s", "seed", "dtype", "apps")
_APP = ("name", "model", "batch", "dtype", "priority", "arrivals", "closed_loop", "kernels",
        "goal")  # fmt: skip
_KERNEL = tuple(Kernel.__dataclass_fields__)
_DTYPES = ("float32", "float16", "bfloat16")
#: A day of simulated time; the simulator also bounds the kernel launches a run may make
#: (``simulator.MAX_LAUNCHES``), which is what keeps a run short.
MAX_DURATION_S = 86_400.0
#: Apps on one GPU. ``fggr`` weighs every waiting kernel against every app above it, so a
#: decision grows with the square of the apps: 48 closed loops take about half a minute of
#: `gpu sim` on a 2-core machine, 200 more than five minutes.
MAX_APPS = 48
#: An explicit kernel's duration: an empty kernel takes about 2 us on the catalog GPUs
#: (``estimate.LAUNCH_OVERHEAD_S``), so a shorter one is a typo in its unit; an hour bounds the
#: other end (a spec in milliseconds read as seconds stays well under it).
MIN_KERNEL_S = 1e-6
MAX_KERNEL_S = 3600.0
#: CUDA's launch limits, the same on every compute capability in the catalog (7.0-9.0).
CUDA_MAX_GRID = (2**31 - 1, 65_535, 65_535)
CUDA_MAX_BLOCK = (1024, 1024, 64)


@dataclass(frozen=True)
class AppSpec:
    """One application as written: a model (or explicit kernels), a priority, arrivals."""

    name: str
    priority: int
    model: str | None
    batch: int
    dtype: str
    kernels: tuple[Kernel, ...] | None
    poisson_rps: float | None  # None = closed loop
    line: int | None = None  # of the model key (or the app), for errors found when estimating
    goal: Goal | None = None  # None: not stated (see resolved_goals)


@dataclass(frozen=True)
class AppsSpec:
    gpu: str
    duration_s: float
    seed: int
    apps: tuple[AppSpec, ...]
    source: str = "<spec>"


def load_apps_spec(path: str | Path) -> AppsSpec:
    """Read and validate a spec file."""
    path = Path(path)
    return parse_apps_spec(read_spec_file(path, "apps spec"), source=path)


def parse_apps_spec(text: str, *, source: str | Path = "<spec>") -> AppsSpec:
    """Validate a spec's text; InputError names the file, line and field of the first problem."""
    data, lines = load_with_lines(text, source)
    return _AppsReader(str(source), lines).read(data)


def resolved_goals(spec: AppsSpec) -> dict[str, Goal]:
    """Every app's goal: as stated, or the default for its priority (``goals.default_goal``)."""
    top = max(app.priority for app in spec.apps)
    return {app.name: app.goal or default_goal(app.priority, top) for app in spec.apps}


def workloads(
    spec: AppsSpec,
    gpu: Processor,
    *,
    estimate: Callable[..., Any] | None = None,
) -> list[AppWorkload]:
    """The spec's applications with their kernels: explicit ones as written, models estimated
    by ``estimate`` (default ``qosched.gpushare.estimate.estimate_model``; no model runs)."""
    result = []
    goals = resolved_goals(spec)
    for index, app in enumerate(spec.apps):
        kernels = app.kernels
        if kernels is None:
            if estimate is None:
                from qosched.gpushare.estimate import estimate_model as estimate
            try:
                kernels = tuple(estimate(app.model, gpu, batch=app.batch, dtype=app.dtype).kernels)
            except InputError as exc:
                raise InputError(
                    exc.reason, source=spec.source, line=app.line, field=f"apps[{index}].model"
                ) from exc
        result.append(
            AppWorkload(app.name, app.priority, kernels, app.poisson_rps, goals[app.name])
        )
    return result


class _AppsReader(SpecReader):
    """Walks the loaded document; every error carries the dotted path and its line."""

    device: Processor  # the spec's GPU, once read

    def dtype(self, value: Any, path: str) -> str:
        if value not in _DTYPES:
            raise self.error(path, f"expected one of {', '.join(_DTYPES)}, got {show_value(value)}")
        return value

    def read(self, data: Any) -> AppsSpec:
        if data is None:
            raise InputError("empty spec; expected gpu, duration_s and apps", source=self.source,
                             line=1)  # fmt: skip
        top = self.mapping(data, "", _TOP)
        gpu = self.text(self.required(top, "", "gpu"), "gpu")
        try:
            self.device = catalog_gpu(gpu)
        except InputError as exc:
            raise self.error("gpu", exc.reason) from None
        duration = self.number(
            self.required(top, "", "duration_s"),
            "duration_s",
            maximum=MAX_DURATION_S,
            positive=True,
        )
        seed = self.whole(top.get("seed", 0), "seed", 0)
        dtype = self.dtype(top.get("dtype", "float32"), "dtype")
        items = self.required(top, "", "apps")
        if not isinstance(items, list) or not items:
            raise self.error("apps", f"expected a non-empty list, got {show_value(items)}")
        if len(items) > MAX_APPS:
            raise self.error("apps", f"at most {MAX_APPS} apps share one GPU, got {len(items)}")
        apps = tuple(self.app(item, f"apps[{i}]", dtype) for i, item in enumerate(items))
        seen: dict[str, int] = {}
        for i, app in enumerate(apps):
            if app.name in seen:
                raise self.error(f"apps[{i}].name", f"duplicate app name {app.name!r} "
                                 f"(also apps[{seen[app.name]}])")  # fmt: skip
            seen[app.name] = i
        return AppsSpec(gpu, duration, seed, apps, self.source)

    def app(self, value: Any, path: str, default_dtype: str) -> AppSpec:
        app = self.mapping(value, path, _APP)
        name = self.label(self.required(app, path, "name"), f"{path}.name")
        priority = self.whole(self.required(app, path, "priority"), f"{path}.priority", 0)
        has_model, has_kernels = app.get("model") is not None, app.get("kernels") is not None
        if has_model == has_kernels:
            raise self.error(path, "give exactly one of model (estimated) or kernels (explicit)")
        model = self.text(app["model"], f"{path}.model") if has_model else None
        batch = self.whole(app.get("batch", 1), f"{path}.batch", 1, MAX_BATCH)
        dtype = self.dtype(app.get("dtype", default_dtype), f"{path}.dtype")
        if has_kernels and ("batch" in app or "dtype" in app):
            raise self.error(f"{path}.kernels", "batch and dtype apply to a model, not kernels")
        kernels = self.kernels(app["kernels"], f"{path}.kernels") if has_kernels else None
        closed = app.get("closed_loop", False)
        if not isinstance(closed, bool):
            raise self.error(
                f"{path}.closed_loop", f"expected true or false, got {show_value(closed)}"
            )
        arrivals = app.get("arrivals")
        if closed == (arrivals is not None):
            raise self.error(path, "give exactly one of arrivals: {poisson_rps: R} (open loop) "
                             "or closed_loop: true")  # fmt: skip
        rps = None
        if arrivals is not None:
            where = f"{path}.arrivals"
            arrivals = self.mapping(arrivals, where, ("poisson_rps",))
            rps = self.positive(self.required(arrivals, where, "poisson_rps"),
                                f"{where}.poisson_rps")  # fmt: skip
        line = self.lines.get(f"{path}.model", self.lines.get(path))
        goal = self.goal(app["goal"], f"{path}.goal") if "goal" in app else None
        return AppSpec(name, priority, model, batch, dtype, kernels, rps, line, goal)

    def kernels(self, value: Any, path: str) -> tuple[Kernel, ...]:
        if not isinstance(value, list) or not value:
            raise self.error(path, f"expected a non-empty list of kernels, got {show_value(value)}")
        result = []
        for i, item in enumerate(value):
            where = f"{path}[{i}]"
            fields = self.mapping(item, where, _KERNEL)
            for key in _KERNEL:
                self.required(fields, where, key)
            values = dict(fields)
            for key in ("grid", "block"):
                dims = fields[key]
                if not isinstance(dims, list) or len(dims) != 3:
                    raise self.error(f"{where}.{key}", "expected a list of three whole numbers, "
                                     f"got {show_value(dims)}")  # fmt: skip
                values[key] = tuple(self.whole(d, f"{where}.{key}[{j}]", 1)
                                    for j, d in enumerate(dims))  # fmt: skip
            for key in ("registers_per_thread", "shared_bytes_per_block", "sms"):
                values[key] = self.whole(fields[key], f"{where}.{key}", 0)
            for key in ("flops", "bytes", "occupancy"):
                values[key] = self.number(fields[key], f"{where}.{key}")
            values["time_s"] = self.number(fields["time_s"], f"{where}.time_s",
                                           minimum=MIN_KERNEL_S, maximum=MAX_KERNEL_S)  # fmt: skip
            for key in ("name", "op", "bound"):
                values[key] = self.text(fields[key], f"{where}.{key}")
            try:
                kernel = Kernel(**values)
            except InputError as exc:
                raise self.error(where, exc.reason) from exc
            self.fits_device(kernel, where)
            result.append(kernel)
        return tuple(result)

    def fits_device(self, kernel: Kernel, where: str) -> None:
        """An explicit kernel within what the spec's GPU can launch: a kernel it could not run
        would otherwise be simulated on what the simulator clamps it to, silently."""
        device, limits = self.device, sm_limits(self.device)
        dimensions = [
            (f"{key}[{axis}]", getattr(kernel, key)[axis], most, f"{key} size on axis {axis}")
            for key, maxima in (("grid", CUDA_MAX_GRID), ("block", CUDA_MAX_BLOCK))
            for axis, most in enumerate(maxima)
        ]
        checks = [
            ("sms", kernel.sms, device.sm_count, "SMs"),
            ("registers_per_thread", kernel.registers_per_thread,
             limits.max_registers_per_thread, "registers per thread"),
            ("shared_bytes_per_block", kernel.shared_bytes_per_block, limits.shared_per_block,
             "bytes of shared memory per block"),
            *dimensions,
            ("block", kernel.threads_per_block, limits.max_threads_per_block,
             "threads per block"),
            ("registers_per_thread", kernel.registers_per_thread * kernel.threads_per_block,
             limits.max_registers_per_block, "registers per block (registers x threads)"),
        ]  # fmt: skip
        for field, value, most, what in checks:
            if value > most:
                raise self.error(f"{where}.{field}", f"{value} is more than the {most} {what} "
                                 f"of the {device.name}")  # fmt: skip
