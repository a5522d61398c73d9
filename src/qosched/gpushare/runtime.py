"""The PyTorch runtime of GPU sharing: co-located applications whose operators a policy admits.

Each application (a model, a stream of inputs, a priority) runs in its own thread. A
``TorchDispatchMode`` intercepts each ATen operator the model calls; the operator's kernels are
estimated from its real shapes (the estimator's per-class functions, cached by signature) and
presented to the policy as one :class:`~qosched.gpushare.policy.Launch`; the thread waits until
the policy starts it (``SharingPolicy.decide`` on a :class:`~qosched.gpushare.policy.GpuView`),
then runs the operator on its application's stream and reports completion, which asks the
policy again. Views launch no kernel and run at once.

Where operators run is a :class:`Device`:

* :class:`CudaDevice`: one ``torch.cuda.Stream`` per application, high stream priority for the
  most important applications and low for the rest; an operator completes when a CUDA event
  recorded after it has been reached. The application's thread waits for that event, so it does
  not run ahead of its GPU work: the policy, not the CUDA queue, decides what overlaps.
* :class:`CpuDevice`: the device abstracted: the operator runs in the calling thread and
  completes when it returns. The same dispatcher, policy calls and trace, so CI tests the path.

Outputs are exactly those of the model run alone: the intercepted operator is called with its
own arguments, only later.
"""

from __future__ import annotations

import dataclasses
import difflib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from qosched.core.errors import InputError, SimulationError
from qosched.core.goals import Goal, default_goal
from qosched.core.trace import Span, write_chrome_trace
from qosched.gpushare.estimate import DTYPES, estimate_operator, operator_dtype
from qosched.gpushare.kernel import Kernel
from qosched.gpushare.policy import (
    AppInfo,
    GpuView,
    KernelDecision,
    Launch,
    Running,
    SharingPolicy,
    check_policy,
)
from qosched.graph.capture import operator_flops, operator_kind, tensor_meta
from qosched.graph.ir import ELEMENTWISE, Operator
from qosched.hardware import GPUS, Processor, gpu

# ---- applications and results ------------------------------------------------------------


@dataclass(frozen=True)
class App:
    """One co-located application: ``model`` called on each of ``inputs`` in turn (one request
    each), with ``priority`` (larger is more important, 0 = best effort) and ``goal``."""

    name: str
    priority: int
    model: nn.Module
    inputs: tuple[tuple[Any, ...], ...]
    goal: Goal | None = None  # None: the default for its priority (goals.default_goal)
    #: One request's operators as the policy will be offered them (estimated, on the run's GPU),
    #: where known before the run (``live.compare_run`` takes them from its warm-up); a policy
    #: may predict from them (``AppInfo.kernels``).
    kernels: tuple[Kernel, ...] | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise InputError("an application needs a name", field="name")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise InputError(f"app {self.name!r}: priority must be an integer", field="priority")
        if self.priority < 0:
            raise InputError(f"app {self.name!r}: priority must be >= 0", field="priority")
        if not isinstance(self.model, nn.Module):
            raise InputError(f"app {self.name!r}: model must be an nn.Module", field="model")
        inputs = tuple(self.inputs)
        if not all(isinstance(i, tuple) for i in inputs):
            raise InputError(
                f"app {self.name!r}: inputs must be a sequence of argument tuples", field="inputs"
            )
        object.__setattr__(self, "inputs", inputs)


@dataclass(frozen=True)
class OpRecord:
    """One operator of one request as it ran: when it became ready, when the policy started it
    and when it finished (seconds from the run's start), and its estimated kernel."""

    app: str
    priority: int
    request: int
    index: int
    target: str
    kernel: Kernel
    ready_s: float
    started_s: float
    finished_s: float


@dataclass(frozen=True)
class AppOutputs:
    """An application's outputs in a run on the device (one per request, in order) and its
    request latencies."""

    name: str
    priority: int
    outputs: tuple[Any, ...]
    latencies_s: tuple[float, ...]


@dataclass(frozen=True)
class GpuRun:
    """Everything a run on the device produced: per-application outputs, every operator, the
    wall time."""

    policy: str
    device: str
    apps: tuple[AppOutputs, ...]
    records: tuple[OpRecord, ...]
    wall_s: float

    def app(self, name: str) -> AppOutputs:
        for a in self.apps:
            if a.name == name:
                return a
        raise KeyError(f"no application {name!r}; known: {[a.name for a in self.apps]}")

    def spans(self) -> list[Span]:
        """One span per operator, on its application's stream track."""
        return [
            Span(
                name=r.target.removeprefix("aten.").removesuffix(".default"),
                process=f"{self.device} ({self.policy})",
                track=f"{r.app} stream (priority {r.priority})",
                start_s=r.started_s,
                duration_s=max(0.0, r.finished_s - r.started_s),
                args={
                    "request": r.request,
                    "index": r.index,
                    "kernel": r.kernel.name,
                    "sms": r.kernel.sms,
                    "estimated_s": r.kernel.time_s,
                    "waited_s": r.started_s - r.ready_s,
                },
            )
            for r in self.records
        ]

    def write_trace(self, path: str | Path) -> Path:
        """Write the Chrome/Perfetto trace of operators per stream; return the path."""
        return write_chrome_trace(self.spans(), path)


# ---- devices ------------------------------------------------------------------------------


class Device(Protocol):
    """Where started operators run. ``stream`` is called once per application before the run;
    ``execute`` runs ``fn`` on that stream and returns its result once the work is complete."""

    name: str

    def stream(self, app: App, high_priority: bool) -> object: ...

    def execute(self, stream: object, fn: Callable[[], Any]) -> Any: ...


class CpuDevice:
    """The device abstracted: an operator runs in the calling thread, complete on return."""

    name = "cpu"

    def stream(self, app: App, high_priority: bool) -> object:
        return app.name

    def execute(self, stream: object, fn: Callable[[], Any]) -> Any:
        return fn()


class CudaDevice:
    """One CUDA stream per application; high-priority apps get the device's highest stream
    priority (``torch.cuda.Stream(priority=...)``: lower numbers are more urgent)."""

    def __init__(self, index: int = 0) -> None:
        if not torch.cuda.is_available():
            raise InputError(
                "the CUDA runtime needs an NVIDIA GPU and a CUDA build of PyTorch; this machine "
                "has none (use CpuDevice to run the same path on the CPU)"
            )
        self.device = torch.device("cuda", index)
        self.name = f"cuda:{index} {torch.cuda.get_device_name(self.device)}"
        # (least, greatest) priority; the greatest is the most negative number. Older builds
        # without priority_range accept -1 as high priority (out-of-range values are clamped).
        range_fn = getattr(torch.cuda.Stream, "priority_range", None)
        self._low, self._high = range_fn() if range_fn is not None else (0, -1)

    def stream(self, app: App, high_priority: bool) -> object:
        priority = self._high if high_priority else self._low
        return torch.cuda.Stream(device=self.device, priority=priority)

    def execute(self, stream: object, fn: Callable[[], Any]) -> Any:
        assert isinstance(stream, torch.cuda.Stream)
        with torch.cuda.stream(stream):
            out = fn()
            done = torch.cuda.Event()
            done.record(stream)
        done.synchronize()  # releases the GIL while the GPU works
        return out


def catalog_gpu_for(device_name: str) -> Processor:
    """The catalog GPU matching a CUDA device name (``"NVIDIA A100-SXM4-80GB"``, ``"Tesla
    T4"``): a catalog alias found in the name, else the closest catalog name by spelling."""
    lowered = device_name.lower()
    for alias in ("h200", "h100", "a100", "v100", "t4"):
        if alias in lowered:
            return gpu(alias)
    names = [p.name.lower() for p in GPUS.values()]
    close = difflib.get_close_matches(lowered, names, n=1, cutoff=0.0)
    return gpu(close[0])


# ---- estimating intercepted operators -----------------------------------------------------


def _leaf_key(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return ("T", tuple(x.shape), tuple(x.stride()), str(x.dtype))
    return repr(x)


def _to_meta(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


class CallEstimator:
    """Kernels of a real ATen call on a catalog GPU, cached by the call's signature (operator,
    shapes, strides, dtypes and the other arguments). Thread safe."""

    def __init__(self, device: Processor) -> None:
        self.gpu = device
        self._cache: dict[tuple, tuple[tuple[Kernel, str], ...]] = {}
        self._lock = threading.Lock()
        self.misses = 0

    def kernels(self, func: Any, args: tuple, kwargs: dict) -> tuple[Kernel, ...]:
        """The kernels ``func(*args, **kwargs)`` launches (none for a view), estimated once."""
        return tuple(k for k, _ in self.classified(func, args, kwargs))

    def classified(self, func: Any, args: tuple, kwargs: dict) -> tuple[tuple[Kernel, str], ...]:
        """Like :meth:`kernels`, each kernel with its class (``"gemm"``, ``"elementwise"``...)."""
        key = (str(func), tuple(_leaf_key(x) for x in pytree.tree_leaves((args, kwargs))))
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        found = self._estimate(func, args, kwargs)
        with self._lock:
            self.misses += 1
            self._cache[key] = found
        return found

    def _estimate(self, func: Any, args: tuple, kwargs: dict) -> tuple[tuple[Kernel, str], ...]:
        meta_args, meta_kwargs = pytree.tree_map_only(torch.Tensor, _to_meta, (args, kwargs))
        # Factory operators (arange, zeros) name their device: make them meta too.
        meta_args, meta_kwargs = pytree.tree_map_only(
            torch.device, lambda _: torch.device("meta"), (meta_args, meta_kwargs)
        )
        try:
            out = func(*meta_args, **meta_kwargs)  # shapes only: meta tensors hold no data
        except Exception:  # an operator without a meta kernel: cost it by its inputs
            out = None
        in_meta = tuple(
            tensor_meta(t)
            for t in pytree.tree_leaves((args, kwargs))
            if isinstance(t, torch.Tensor)
        )
        out_tensors = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        out_meta = tuple(tensor_meta(t) for t in out_tensors) if out is not None else in_meta[:1]
        kind = operator_kind(func)
        try:
            flops = operator_flops(func, kind, meta_args, meta_kwargs, out, in_meta, out_meta)
        except Exception:  # a FLOP formula that needs more than shapes: count none
            flops = 0
        target = str(func)
        if func is torch.ops.aten.native_batch_norm.default and args[5] is False:
            # Eager inference batch norm; its meta kernel reports statistics it does not compute.
            # Cost it as the captured graph's inference batch norm: an elementwise pass.
            target = "aten._native_batch_norm_legit_no_training.default"
            out_meta = out_meta[:1] + tuple(
                dataclasses.replace(m, shape=(0,), bytes=0) for m in out_meta[1:]
            )
            kind, flops = ELEMENTWISE, out_meta[0].numel
        op = Operator(
            name=str(func),
            target=target,
            kind=kind,
            inputs=(),
            input_sources=tuple(f"arg{i}" for i in range(len(in_meta))),
            input_meta=in_meta,
            output_meta=out_meta,
            flops=int(flops),
            bytes_read=sum(m.bytes for m in in_meta),
            bytes_written=sum(m.bytes for m in out_meta),
            param_bytes=0,
        )
        dtype = operator_dtype(op)
        if dtype not in DTYPES or dtype not in self.gpu.peak_flops:
            dtype = "float32"  # float64 (or a dtype the GPU lacks) costed at the FP32 rate
        return estimate_operator(op, self.gpu, dtype=dtype)


def merge(kernels: Sequence[Kernel]) -> Kernel:
    """One operator's kernels as the one launch the policy sees: they run back to back on one
    stream, so the launch takes their summed time, FLOPs and bytes, and the shape, SMs and
    bound of its longest kernel."""
    if len(kernels) == 1:
        return kernels[0]
    longest = max(kernels, key=lambda k: k.time_s)
    return Kernel(
        name="+".join(k.name for k in kernels),
        op=longest.op,
        grid=longest.grid,
        block=longest.block,
        registers_per_thread=longest.registers_per_thread,
        shared_bytes_per_block=longest.shared_bytes_per_block,
        sms=max(k.sms for k in kernels),
        occupancy=longest.occupancy,
        flops=sum(k.flops for k in kernels),
        bytes=sum(k.bytes for k in kernels),
        bound=longest.bound,
        time_s=sum(k.time_s for k in kernels),
    )


# ---- the dispatcher -----------------------------------------------------------------------


def _key(launch: Launch) -> tuple[str, int, int]:
    return (launch.app, launch.request, launch.index)


@dataclass
class _State:
    waiting: dict[str, Launch] = field(default_factory=dict)
    running: dict[tuple[str, int, int], tuple[Launch, float]] = field(default_factory=dict)
    started: dict[tuple[str, int, int], float] = field(default_factory=dict)
    active_apps: int = 0
    wake_at_s: float | None = None
    error: BaseException | None = None
    closed: bool = False


class Dispatcher:
    """Holds launches until the policy starts them. Every arrival, completion and requested
    wake-up asks the policy once, under one lock, with a fresh :class:`GpuView`."""

    def __init__(self, policy: SharingPolicy, device: Processor, apps: int) -> None:
        self.policy = policy
        self.gpu = device
        self._state = _State(active_apps=apps)
        self._cond = threading.Condition()
        self._t0 = time.perf_counter()
        self._waker = threading.Thread(target=self._wake_loop, name="qosched-waker", daemon=True)
        self._waker.start()

    def now(self) -> float:
        return time.perf_counter() - self._t0

    def acquire(self, launch: Launch) -> float:
        """Wait until the policy starts ``launch``; return when it started."""
        key = _key(launch)
        with self._cond:
            self._raise_if_failed()
            self._state.waiting[launch.app] = launch
            self._decide()
            while key not in self._state.started:
                self._raise_if_failed()
                self._cond.wait()
            return self._state.started.pop(key)

    def release(self, launch: Launch) -> float:
        """``launch`` has completed; ask the policy again. Return the completion time."""
        with self._cond:
            finished = self.now()
            self._state.running.pop(_key(launch), None)
            self._decide()
            return finished

    def app_done(self) -> None:
        with self._cond:
            self._state.active_apps -= 1
            self._decide()

    def close(self) -> None:
        with self._cond:
            self._state.closed = True
            self._cond.notify_all()
        self._waker.join()

    def _raise_if_failed(self) -> None:
        if self._state.error is not None:
            raise SimulationError(f"runtime stopped: {self._state.error}") from self._state.error

    def _fail(self, message: str) -> None:
        self._state.error = SimulationError(f"at {self.now():.6f} s: {message}")
        self._cond.notify_all()

    def _decide(self) -> None:
        # Called with the lock held.
        s = self._state
        if s.error is not None:
            return
        now = self.now()
        view = GpuView(
            now_s=now,
            gpu=self.gpu,
            running=tuple(
                Running(launch, started, max(0.0, 1.0 - (now - started) / launch.kernel.time_s))
                for launch, started in s.running.values()
            ),
            waiting=tuple(sorted(s.waiting.values(), key=lambda w: (-w.priority, w.ready_s))),
        )
        try:
            admission = self.policy.decide(view)
        except Exception as e:  # a policy bug must not hang the applications
            self._fail(f"policy {self.policy.name!r} raised {type(e).__name__}: {e}")
            return
        if not isinstance(admission, KernelDecision):
            self._fail(f"policy {self.policy.name!r} returned {type(admission).__name__}")
            return
        for launch in admission.start:
            if s.waiting.get(launch.app) != launch:
                self._fail(
                    f"policy {self.policy.name!r} started {launch.kernel.name!r} of app "
                    f"{launch.app!r} (request {launch.request}, index {launch.index}), which is "
                    "not waiting"
                )
                return
            del s.waiting[launch.app]
            s.running[_key(launch)] = (launch, now)
            s.started[_key(launch)] = now
        if admission.wake_at_s is not None and not admission.wake_at_s > now:
            self._fail(
                f"policy {self.policy.name!r} asked to be woken at {admission.wake_at_s!r} s, "
                f"not after now ({now:.6f} s)"
            )
            return
        s.wake_at_s = admission.wake_at_s
        if (
            s.waiting
            and not s.running
            and s.wake_at_s is None
            and (len(s.waiting) >= s.active_apps)
        ):
            self._fail(
                f"policy {self.policy.name!r} left {len(s.waiting)} launches waiting with "
                "nothing running, no other application to wait for and no wake-up time"
            )
            return
        self._cond.notify_all()

    def _wake_loop(self) -> None:
        with self._cond:
            while not self._state.closed:
                wake = self._state.wake_at_s
                if wake is None or self._state.error is not None:
                    self._cond.wait()
                    continue
                delay = wake - self.now()
                if delay > 0:
                    self._cond.wait(timeout=delay)
                    continue
                self._state.wake_at_s = None
                self._decide()


# ---- interception -------------------------------------------------------------------------


class _AppMode(TorchDispatchMode):
    """Intercepts one application's ATen calls in its own thread (dispatch modes are
    thread-local) and routes each through the dispatcher."""

    def __init__(
        self, runtime: _RunState, app: App, stream: object, request: int, began_s: float
    ) -> None:
        super().__init__()
        self.run, self.app, self.stream, self.request = runtime, app, stream, request
        self.began_s = began_s
        self.index = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kernels = self.run.estimator.kernels(func, args, kwargs)
        if not kernels:
            return func(*args, **kwargs)
        launch = Launch(
            app=self.app.name,
            priority=self.app.priority,
            request=self.request,
            index=self.index,
            kernel=merge(kernels),
            ready_s=self.run.dispatcher.now(),
            arrived_s=self.began_s,  # closed loop: the request arrives as it starts
        )
        self.index += 1
        started = self.run.dispatcher.acquire(launch)
        try:
            out = self.run.device.execute(self.stream, lambda: func(*args, **kwargs))
        finally:
            finished = self.run.dispatcher.release(launch)
        self.run.record(
            OpRecord(
                app=self.app.name,
                priority=self.app.priority,
                request=self.request,
                index=launch.index,
                target=str(func),
                kernel=launch.kernel,
                ready_s=launch.ready_s,
                started_s=started,
                finished_s=finished,
            )
        )
        return out


@dataclass
class _RunState:
    """What every application thread of one ``run_apps`` call shares."""

    estimator: CallEstimator
    dispatcher: Dispatcher
    device: Device
    records: list[OpRecord] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, r: OpRecord) -> None:
        with self.lock:
            self.records.append(r)


def run_apps(
    apps: Sequence[App],
    policy: SharingPolicy,
    *,
    device: Device | None = None,
    gpu_model: Processor | str | None = None,
    estimator: CallEstimator | None = None,
) -> GpuRun:
    """Run ``apps`` together, each in its own thread, under ``policy``; return every output,
    latency and operator record.

    ``device`` defaults to :class:`CpuDevice`. ``gpu_model`` is the catalog GPU whose estimates
    the policy sees (default: the CUDA device's own, matched by name, or an A100 on the CPU);
    pass a warm ``estimator`` (for that GPU) to reuse its cache across runs, so that the first
    request does not pay for estimating every operator.
    Raises SimulationError (naming the policy and the time) when the policy breaks the protocol
    or leaves launches waiting forever, and re-raises an application's own error.
    """
    check_policy(policy)
    if not apps:
        raise InputError("run_apps needs at least one application")
    names = [a.name for a in apps]
    if len(set(names)) != len(names):
        raise InputError(f"application names must be unique, got {names}")
    device = device or CpuDevice()
    if gpu_model is None:
        gpu_model = catalog_gpu_for(device.name) if isinstance(device, CudaDevice) else "a100"
    processor = gpu(gpu_model) if isinstance(gpu_model, str) else gpu_model
    if estimator is None:
        estimator = CallEstimator(processor)
    elif estimator.gpu != processor:
        raise InputError(f"estimator is for {estimator.gpu.name}, the run for {processor.name}")
    top = max(a.priority for a in apps)
    policy.setup(tuple(AppInfo(a.name, a.priority, a.goal or default_goal(a.priority, top),
                                 kernels=a.kernels, gpu=processor if a.kernels else None)
                         for a in apps))  # fmt: skip
    # A policy may ask for equal-priority streams (``stream_priorities = False``, as under MPS),
    # once it is set up.
    prioritised = policy.stream_priorities
    streams = {
        a.name: device.stream(a, high_priority=prioritised and a.priority == top and a.priority > 0)
        for a in apps
    }
    run = _RunState(estimator, Dispatcher(policy, processor, len(apps)), device)
    results: dict[str, AppOutputs] = {}
    errors: list[BaseException] = []

    def serve(app: App) -> None:
        outputs, latencies = [], []
        try:
            with torch.no_grad():
                for request, inputs in enumerate(app.inputs):
                    began = run.dispatcher.now()
                    with _AppMode(run, app, streams[app.name], request, began):
                        outputs.append(app.model(*inputs))
                    latencies.append(run.dispatcher.now() - began)
        except BaseException as e:  # reported by run_apps after every thread ended
            errors.append(e)
        finally:
            run.dispatcher.app_done()
        results[app.name] = AppOutputs(app.name, app.priority, tuple(outputs), tuple(latencies))

    began = time.perf_counter()
    threads = [threading.Thread(target=serve, args=(a,), name=f"app-{a.name}") for a in apps]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    run.dispatcher.close()
    wall = time.perf_counter() - began
    if errors:
        first = next((e for e in errors if not isinstance(e, SimulationError)), errors[0])
        raise first
    records = sorted(run.records, key=lambda r: (r.started_s, r.app, r.request, r.index))
    return GpuRun(
        policy=policy.name,
        device=device.name,
        apps=tuple(results[a.name] for a in apps),
        records=tuple(records),
        wall_s=wall,
    )
