"""Check the static kernel estimates against a real NVIDIA GPU, and run the sharing runtime on it.

    python bench/gpu_validate.py [--models resnet50,bert_base,mobilenet,mlp] [--batches 1,16]
                                 [--dtype float16] [--reps 5] [--requests 30] [--out FILE]
                                 [--no-pairs] [--device cuda|cpu]
                                 [--coloc MODEL:BATCH:KIND:PRIORITY+... [--coloc-seconds 10]]

On a machine with CUDA, in a few minutes:

1. Per operator: each zoo model runs (random weights) at each batch size; every ATen operator
   that launches kernels is wrapped in a ``torch.profiler.record_function`` range and its CUDA
   kernel time (the sum of the kernels it launched, from ``torch.profiler``, median of
   ``--reps`` forwards after warm-up) is compared with the estimate for the same call on the
   catalog GPU matching ``torch.cuda.get_device_name()`` (closest name otherwise). Printed: per
   kernel class and per model, the median and mean absolute relative error and the median
   ratio estimate / measured (the bias).
2. Per model: the estimated total (``estimate_model``, from the captured graph) against the
   measured sum of kernel times and the measured forward time (CUDA events; includes launch
   gaps the estimate leaves out).
3. The runtime: a high-priority inference app (resnet50, batch 1) beside a low-priority batch
   app (bert_base, batch 32), each alone and then together under two policies written here
   (admit everything; hold low-priority launches while a high-priority one runs or waits):
   p50/p99 latency ratios of the inference app and the batch app's throughput ratio.
4. The interference score against measured pairwise slowdowns (``--pairs``): a set of real
   operators (GEMMs, a convolution, elementwise and softmax passes of several sizes, in
   ``--dtype``), each estimated as the one kernel the policies see (``runtime.merge``). For
   every ordered pair, the protected operator runs twice in a row on a high-priority stream
   (its second run is the "next kernel" the score's drain term is about), alone and then
   while the candidate operator runs back to back on a low-priority stream; the measured
   slowdown is the extra time over the time alone. Printed: Spearman rank correlation and
   mean absolute error between ``interference.CALIBRATED``'s score and the measured
   slowdowns, how often both fall on the same side of 5 %, and the weights a non-negative
   least-squares fit to the measurements gives (to replace the ones fitted to the simulator,
   if they rank better). The weights qosched ships were fitted to its own simulator, which
   does not show cache or memory-controller contention or clock changes; this is the check.
5. A co-located pair (``--coloc``, e.g. ``resnet50:1:inference@200:1+bert_base:8:training:0``):
   each party runs as its own process (inference at Poisson arrivals, or training steps back to
   back; the more important one on a high-priority CUDA stream), alone and then both at once
   for ``--coloc-seconds``; printed: each party's measured slowdown (p99 latency ratio for
   inference, steps per second alone over shared for training) beside the co-location
   surrogate's prediction (``gpushare.colocation``). Two processes share the GPU by time
   slicing unless MPS is running, which is what a cluster without MPS gives too; the surrogate
   predicts ``fggr``'s sharing, so a gap here is the price of not having it. Without CUDA,
   ``--coloc`` exits 2 with a message (it has nothing to measure).

Everything is written to ``--out`` (JSON). Without CUDA it says so, runs the runtime once on the
CPU device (small models) as a smoke check, and exits 0.

``--device cpu`` is a rehearsal: all four parts run on this machine's CPU (float32, smaller
operators, the small models of the smoke check for the runtime), with wall-clock and profiler
CPU times where the GPU run uses CUDA events and kernel times, so that the script's own code
(the profiler ranges, the pairs, the summaries, the JSON) is known to run before a GPU's scarce
minutes are spent on it. Its numbers say nothing about the estimates or the score.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.utils._python_dispatch import TorchDispatchMode

from qosched.core.errors import InputError
from qosched.core.goals import BEST_EFFORT, Goal
from qosched.gpushare.colocation import Workload, profile, slowdown_of
from qosched.gpushare.colocation import bundled as bundled_surrogate
from qosched.gpushare.estimate import estimate_model
from qosched.gpushare.interference import CALIBRATED, FEATURES, features
from qosched.gpushare.live import compare_run
from qosched.gpushare.policies import create_policy
from qosched.gpushare.runtime import (
    App,
    CallEstimator,
    CpuDevice,
    CudaDevice,
    Device,
    catalog_gpu_for,
    merge,
)
from qosched.graph.capture import load_model
from qosched.hardware import Processor, gpu

#: The policies the runtime check compares: plain co-location, stream priorities, Orion's rule
#: and qosched's.
RUNTIME_POLICIES = ("naive", "priority-streams", "orion", "fggr")


class Target:
    """Where the measurements run: the CUDA GPU, or this machine's CPU for a rehearsal (see the
    module docstring), where each CUDA-only step has a CPU stand-in."""

    def __init__(self, device: str) -> None:
        self.device = device  # "cuda" or "cpu"

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def start(self) -> object:
        """A mark to time from: a recorded CUDA event (on the current stream), or the clock."""
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def elapsed_s(self, mark: object) -> float:
        """Seconds from ``mark`` to now on the device, after everything queued there is done."""
        if not self.cuda:
            return time.perf_counter() - mark  # type: ignore[operator]
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        torch.cuda.synchronize()
        return mark.elapsed_time(end) / 1e3  # type: ignore[attr-defined]

    def stream(self, priority: int) -> object:
        return torch.cuda.Stream(priority=priority) if self.cuda else None

    def on(self, stream: object) -> contextlib.AbstractContextManager:
        return torch.cuda.stream(stream) if self.cuda else contextlib.nullcontext()

    def activities(self) -> list:
        cpu = torch.profiler.ProfilerActivity.CPU
        return [cpu, torch.profiler.ProfilerActivity.CUDA] if self.cuda else [cpu]

    def range_us(self, event) -> float:
        """What a profiler range measured: its kernels' device time, or its CPU time."""
        return _device_us(event) if self.cuda else float(event.cpu_time_total)


CUDA = Target("cuda")


# ---- per-operator validation ---------------------------------------------------------------


class _Annotate(TorchDispatchMode):
    """Wraps each kernel-launching operator in a named profiler range and notes its estimate."""

    def __init__(self, estimator: CallEstimator, rep: int) -> None:
        super().__init__()
        self.estimator, self.rep = estimator, rep
        self.calls: list[tuple[str, str, float, str]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        pairs = self.estimator.classified(func, args, kwargs)
        if not pairs:
            return func(*args, **kwargs)
        label = f"qop{self.rep}_{len(self.calls)}"
        cls = max(pairs, key=lambda p: p[0].time_s)[1]
        self.calls.append((label, str(func), sum(k.time_s for k, _ in pairs), cls))
        with torch.profiler.record_function(label):
            return func(*args, **kwargs)


def _device_us(event) -> float:
    total = getattr(event, "device_time_total", None)
    return float(total if total is not None else event.cuda_time_total)


def _cast(inputs: tuple, dtype: torch.dtype) -> tuple:
    """Floating inputs in ``dtype`` with values (the zoo leaves them uninitialised); ids kept."""
    return tuple(torch.randn_like(t, dtype=dtype) if t.is_floating_point() else t for t in inputs)


def validate_model(
    name: str, batch: int, dtype: str, reps: int, catalog: Processor, target: Target = CUDA
) -> dict:
    torch_dtype = getattr(torch, dtype)
    model, inputs = load_model(name, batch=batch, device=target.device)
    model = model.to(torch_dtype)
    inputs = _cast(inputs, torch_dtype)
    estimator = CallEstimator(catalog)
    with torch.no_grad():
        for _ in range(3):  # warm-up: cuDNN/cuBLAS heuristics, allocator
            model(*inputs)
        target.sync()
        mark = target.start()
        for _ in range(reps):
            model(*inputs)
        forward_s = target.elapsed_s(mark) / reps
        modes = [_Annotate(estimator, rep) for rep in range(reps)]
        with torch.profiler.profile(activities=target.activities()) as prof:
            for mode in modes:
                with mode:
                    model(*inputs)
            target.sync()
    # The CPU-side range of each label; its device time sums the kernels its operator launched
    # (the GPU-side annotation of the same name spans them, gaps included: not used).
    measured_us = {
        e.name: target.range_us(e)
        for e in prof.events()
        if e.name.startswith("qop") and e.device_type == DeviceType.CPU
    }
    ops = []
    for i, (_, target, estimated, cls) in enumerate(modes[0].calls):
        times = [measured_us.get(m.calls[i][0], 0.0) for m in modes if i < len(m.calls)]
        measured = statistics.median(times) / 1e6
        ops.append(
            {
                "index": i,
                "target": target,
                "class": cls,
                "estimated_s": estimated,
                "measured_s": measured,
            }
        )
    graph_estimate = estimate_model(name, catalog, batch=batch, dtype=dtype)
    kernel_sum = sum(o["measured_s"] for o in ops)
    return {
        "model": name,
        "batch": batch,
        "ops": ops,
        "estimated_total_s": graph_estimate.total_time_s,
        "estimated_op_sum_s": sum(o["estimated_s"] for o in ops),
        "measured_kernel_sum_s": kernel_sum,
        "measured_forward_s": forward_s,
        "total_ratio": graph_estimate.total_time_s / kernel_sum if kernel_sum else None,
        "estimated_memory_bytes": graph_estimate.memory_bytes,
    }


def _errors(pairs: list[tuple[float, float]]) -> dict:
    pairs = [(e, m) for e, m in pairs if m > 0]
    if not pairs:
        return {"n": 0}
    errs = [abs(e / m - 1) for e, m in pairs]
    return {
        "n": len(pairs),
        "median_abs_rel_error": statistics.median(errs),
        "mean_abs_rel_error": statistics.fmean(errs),
        "median_ratio": statistics.median(e / m for e, m in pairs),
    }


def summarise(models: list[dict]) -> dict:
    by_class: dict[str, list[tuple[float, float]]] = defaultdict(list)
    by_model: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for m in models:
        for o in m.get("ops", ()):
            by_class[o["class"]].append((o["estimated_s"], o["measured_s"]))
            by_model[f"{m['model']}@{m['batch']}"].append((o["estimated_s"], o["measured_s"]))
    return {
        "per_class": {c: _errors(p) for c, p in sorted(by_class.items())},
        "per_model": {k: _errors(p) for k, p in by_model.items()},
    }


# ---- the interference score against measured pairs -----------------------------------------


def pair_operators(
    dtype: torch.dtype, device: str = "cuda", scale: int = 1
) -> list[tuple[str, object, tuple]]:
    """Real operators of different sizes and bottlenecks, as (label, ATen overload, args); a
    rehearsal shrinks every dimension ``scale`` times (elements ``scale**2`` times)."""
    aten = torch.ops.aten
    n, batch, image, elements = (
        4096 // scale,
        max(1, 32 // scale),
        56 // min(scale, 4),
        2**20 // scale**2,
    )

    def rand(*shape):
        return torch.randn(*shape, device=device, dtype=dtype)

    return [
        (f"mm {n}^3", aten.mm.default, (rand(n, n), rand(n, n))),
        (f"mm {n // 4}^3", aten.mm.default, (rand(n // 4, n // 4), rand(n // 4, n // 4))),
        (f"mm 64x{n}x{n}", aten.mm.default, (rand(64, n), rand(n, n))),
        (f"conv {batch}x64x{image}x{image} 3x3", aten.convolution.default,
         (rand(batch, 64, image, image), rand(64, 64, 3, 3), None, [1, 1], [1, 1], [1, 1], False,
          [0, 0], 1)),
        (f"add {64 * elements}", aten.add.Tensor, (rand(64 * elements), rand(64 * elements))),
        (f"add {elements}", aten.add.Tensor, (rand(elements), rand(elements))),
        (f"relu {16 * elements}", aten.relu.default, (rand(16 * elements),)),
        (f"softmax {n}x{n}", aten._softmax.default, (rand(n, n), -1, False)),
    ]  # fmt: skip


def _median_time_s(run, reps: int, target: Target = CUDA) -> float:
    times = []
    for _ in range(reps):
        mark = target.start()
        run()
        times.append(target.elapsed_s(mark))
    return statistics.median(times)


def interference_check(
    catalog: Processor, dtype: torch.dtype, reps: int, target: Target = CUDA, scale: int = 1
) -> dict:
    """Every ordered pair of :func:`pair_operators`: the score against the measured slowdown."""
    from scipy.optimize import nnls
    from scipy.stats import spearmanr

    estimator = CallEstimator(catalog)
    ops = []
    for label, func, args in pair_operators(dtype, target.device, scale):
        kernels = estimator.kernels(func, args, {})
        ops.append((label, lambda f=func, a=args: f(*a), merge(kernels)))
    low, high = target.stream(0), target.stream(-1)
    with torch.no_grad():
        for _, run, _ in ops:  # warm-up
            run()
        target.sync()
        alone = {}
        for label, run, _ in ops:
            with target.on(high):
                alone[label] = _median_time_s(lambda r=run: (r(), r()), reps, target)
        single = {label: alone[label] / 2 for label, _, _ in ops}
        rows = []
        for p_label, p_run, p_kernel in ops:
            for c_label, c_run, c_kernel in ops:
                # Enough candidate launches to outlast the protected pair three times over.
                count = max(1, min(1000, round(3 * alone[p_label] / single[c_label]) + 1))
                times = []
                for _ in range(reps):
                    with target.on(low):  # queued, and run beside what follows (on a GPU)
                        for _ in range(count):
                            c_run()
                    with target.on(high):
                        mark = target.start()
                        p_run()
                        p_run()
                        times.append(target.elapsed_s(mark))
                measured = (statistics.median(times) - alone[p_label]) / single[p_label]
                values = features(c_kernel, [p_kernel], catalog)
                rows.append({
                    "protected": p_label,
                    "candidate": c_label,
                    "measured_slowdown": measured,
                    "score": CALIBRATED.score(c_kernel, [p_kernel], catalog),
                    "features": dict(zip(FEATURES, values, strict=True)),
                })  # fmt: skip
    scores = [r["score"] for r in rows]
    truth = [r["measured_slowdown"] for r in rows]
    fitted, _ = nnls([[r["features"][f] for f in FEATURES] for r in rows], truth)
    return {
        "pairs": rows,
        "spearman": float(spearmanr(scores, truth).statistic),
        "mean_abs_error": statistics.fmean(abs(s - t) for s, t in zip(scores, truth, strict=True)),
        "same_side_of_5pc": statistics.fmean(
            (s <= 0.05) == (t <= 0.05) for s, t in zip(scores, truth, strict=True)
        ),
        "shipped_weights": dict(zip(FEATURES, CALIBRATED.weights, strict=True)),
        "fitted_weights": dict(zip(FEATURES, map(float, fitted), strict=True)),
    }


def _print_interference(report: dict) -> None:
    print("\ninterference score (fitted to the simulator) against measured pairwise slowdowns:")
    print(f"  {len(report['pairs'])} ordered pairs: Spearman {report['spearman']:.3f}, mean "
          f"|score - measured| {report['mean_abs_error']:.3f}, same side of 5 %: "
          f"{report['same_side_of_5pc']:.0%}")  # fmt: skip
    print(f"  shipped weights {report['shipped_weights']}")
    print(f"  weights fitted to these measurements {report['fitted_weights']}")
    worst = sorted(report["pairs"], key=lambda r: -abs(r["score"] - r["measured_slowdown"]))
    for r in worst[:5]:
        print(f"  {r['protected']:<22} beside {r['candidate']:<22} measured "
              f"{r['measured_slowdown']:7.3f}  score {r['score']:7.3f}")  # fmt: skip


# ---- the runtime ---------------------------------------------------------------------------


def runtime_check(device: Device, hi: App, lo: App) -> dict:
    """Both apps alone, then together under each sharing policy (``gpushare.live``): latency
    ratios of the high-priority app, throughput ratio of the low-priority one while the other
    is busy. A first request of each warms the estimator's cache (and cuDNN/cuBLAS)."""
    estimator = CallEstimator(
        catalog_gpu_for(device.name) if isinstance(device, CudaDevice) else gpu("a100")
    )
    report = {}
    for name in RUNTIME_POLICIES:
        rows, shared = compare_run([hi, lo], create_policy(name), device=device,
                                   estimator=estimator)  # fmt: skip
        by_name = {row.name: row for row in rows}
        report[name] = {
            "hi_p50_latency_ratio": by_name[hi.name].p50_latency_ratio,
            "hi_p99_latency_ratio": by_name[hi.name].p99_latency_ratio,
            "lo_throughput_ratio": by_name[lo.name].throughput_ratio,
            "hi_alone_p99_s": by_name[hi.name].alone_p99_latency_s,
            "operators": len(shared.records),
            "wall_s": shared.wall_s,
        }
    return report


def _apps(
    hi_spec: str,
    hi_batch: int,
    lo_spec: str,
    lo_batch: int,
    requests: int,
    device: str,
    dtype: torch.dtype,
) -> tuple[App, App]:
    torch.manual_seed(0)
    hi_model, hi_inputs = load_model(hi_spec, batch=hi_batch, device=device)
    lo_model, lo_inputs = load_model(lo_spec, batch=lo_batch, device=device)
    hi_model, lo_model = hi_model.to(dtype), lo_model.to(dtype)
    hi_inputs, lo_inputs = _cast(hi_inputs, dtype), _cast(lo_inputs, dtype)
    hi = App("inference", 1, hi_model, (hi_inputs,) * requests)
    lo = App("batch", 0, lo_model, (lo_inputs,) * max(1, requests // 3))
    return hi, lo


# ---- a co-located pair: two processes on one GPU -------------------------------------------

#: The pair ``--coloc`` measures by default: a served model above a training loop.
DEFAULT_COLOC = "resnet50:1:inference@200:1+bert_base:8:training:0"


def parse_party(text: str, name: str) -> Workload:
    """``MODEL:BATCH:inference@RPS:PRIORITY`` or ``MODEL:BATCH:training:PRIORITY`` as a
    workload (goal: p99 within 1.10x for inference, best effort for training; the measurement
    does not depend on them)."""
    parts = text.split(":")
    if len(parts) != 4:
        raise InputError(f"--coloc party {text!r}: expected MODEL:BATCH:KIND:PRIORITY",
                         field="coloc")  # fmt: skip
    model, batch, kind, priority = parts
    rate = None
    if kind.startswith("inference@"):
        kind, rate_text = kind.split("@", 1)
        try:
            rate = float(rate_text)
        except ValueError:
            raise InputError(f"--coloc party {text!r}: rate {rate_text!r} is not a number",
                             field="rate_rps") from None  # fmt: skip
    try:
        batch_n, priority_n = int(batch), int(priority)
    except ValueError:
        raise InputError(f"--coloc party {text!r}: batch and priority must be whole numbers",
                         field="coloc") from None  # fmt: skip
    goal = Goal("p99_slowdown", 1.10) if kind == "inference" else BEST_EFFORT
    return Workload(name, model, batch_n, kind, priority_n, goal, rate)  # type: ignore[arg-type]


def parse_coloc(text: str) -> tuple[Workload, Workload]:
    """Two parties joined by ``+`` (`parse_party`), named ``a`` and ``b``."""
    parties = text.split("+")
    if len(parties) != 2:
        raise InputError(f"--coloc {text!r}: expected two parties joined by '+'", field="coloc")
    return parse_party(parties[0], "a"), parse_party(parties[1], "b")


def coloc_worker(party: Workload, seconds: float, device: str, dtype: torch.dtype) -> dict:
    """Run one party for ``seconds`` in this process: inference requests at Poisson arrivals
    (latency = arrival to the end of its forward, queueing included) or training steps back to
    back (forward, backward, SGD step); a higher priority runs on a higher-priority CUDA stream."""
    torch.manual_seed(0)
    model, inputs = load_model(party.model, batch=party.batch, device=device)
    model, inputs = model.to(dtype), _cast(inputs, dtype)
    target = Target(device)
    # CUDA stream priorities: lower numbers are more important; -1 is the highest on most GPUs.
    stream = target.stream(-1 if party.priority > 0 else 0)
    rng = torch.Generator().manual_seed(party.priority)
    training = party.kind == "training"
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6) if training else None

    def step() -> None:
        with target.on(stream):
            if training:
                out = model(*inputs)
                loss = (out if isinstance(out, torch.Tensor) else out[0]).float().mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            else:
                with torch.no_grad():
                    model(*inputs)
        target.sync()

    step()  # warm-up: cuDNN/cuBLAS choices and the allocator
    latencies, steps = [], 0
    began = time.perf_counter()
    due = began
    while time.perf_counter() - began < seconds:
        if not training:
            gap = float(torch.empty(1).exponential_(party.rate_rps, generator=rng))
            due += gap
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
        step()
        steps += 1
        if not training:
            latencies.append(time.perf_counter() - due)
    return {"steps": steps, "seconds": time.perf_counter() - began, "latencies_s": latencies}


def pair_slowdowns(parties: tuple[Workload, Workload], alone: list[dict],
                   shared: list[dict]) -> list[float]:  # fmt: skip
    """Each party's measured slowdown (``colocation.slowdown_of``): p99 latency shared over
    alone for inference, steps per second alone over shared for training."""
    result = []
    for party, a, s in zip(parties, alone, shared, strict=True):
        p99 = [statistics.quantiles(r["latencies_s"], n=100, method="inclusive")[98]
               if len(r["latencies_s"]) >= 2 else math.nan for r in (a, s)]  # fmt: skip
        rate = [r["steps"] / r["seconds"] for r in (a, s)]
        result.append(slowdown_of(party.kind, p99[1] / p99[0] if p99[0] else math.nan,
                                  rate[1] / rate[0] if rate[0] else math.nan))  # fmt: skip
    return result


def _worker_command(party: Workload, seconds: float, dtype: str) -> list[str]:
    spec = f"{party.model}:{party.batch}:{party.kind}"
    spec += f"@{party.rate_rps}" if party.rate_rps else ""
    script = str(Path(__file__).resolve())
    return [sys.executable, script, "--coloc-worker", f"{spec}:{party.priority}",
            "--coloc-seconds", str(seconds), "--dtype", dtype]  # fmt: skip


def _run_workers(parties: Sequence[Workload], seconds: float, dtype: str) -> list[dict]:
    """The parties as separate processes started together (one GPU, two CUDA contexts)."""
    procs = [subprocess.Popen(_worker_command(p, seconds, dtype), stdout=subprocess.PIPE,
                              text=True) for p in parties]  # fmt: skip
    results = []
    for party, proc in zip(parties, procs, strict=True):
        out, _ = proc.communicate(timeout=seconds * 10 + 300)
        if proc.returncode != 0:
            raise RuntimeError(f"worker for {party.model} exited {proc.returncode}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def coloc_check(text: str, seconds: float, dtype: str, catalog: Processor) -> dict:
    """Each party alone, then both at once; measured slowdowns beside the surrogate's."""
    parties = parse_coloc(text)
    alone = [_run_workers([p], seconds, dtype)[0] for p in parties]
    shared = _run_workers(parties, seconds, dtype)
    measured = pair_slowdowns(parties, alone, shared)
    profiles = [profile(p, estimate_model(p.model, catalog, batch=p.batch, dtype=dtype).kernels,
                        catalog) for p in parties]  # fmt: skip
    predicted = bundled_surrogate().pair(*profiles)
    return {"pair": text, "seconds": seconds, "measured_slowdowns": measured,
            "predicted_slowdowns": list(predicted), "alone": alone, "shared": shared}  # fmt: skip


def _print_table(title: str, rows: dict) -> None:
    print(f"\n{title}")
    print(f"  {'':<22}{'n':>6}{'median |err|':>15}{'mean |err|':>13}{'median est/meas':>18}")
    for key, r in rows.items():
        if r.get("n"):
            print(
                f"  {key:<22}{r['n']:>6}{r['median_abs_rel_error']:>15.1%}"
                f"{r['mean_abs_rel_error']:>13.1%}{r['median_ratio']:>18.2f}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,bert_base,mobilenet,mlp")
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--dtype", choices=("float32", "float16"), default="float16")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--out", default="gpu_validate.json")
    parser.add_argument(
        "--pairs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="measure pairwise slowdowns against the interference score",
    )
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cpu: rehearse every part on this machine's CPU (its numbers mean nothing)",
    )
    parser.add_argument(
        "--coloc",
        default=None,
        help=f"measure a co-located pair (two processes on one GPU), e.g. {DEFAULT_COLOC!r}",
    )
    parser.add_argument("--coloc-seconds", type=float, default=10.0)
    parser.add_argument("--coloc-worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    rehearsal = args.device == "cpu"
    if args.coloc_worker:  # one party of --coloc, in its own process
        device = "cuda" if torch.cuda.is_available() else "cpu"
        party = parse_party(args.coloc_worker, "worker")
        result = coloc_worker(party, args.coloc_seconds, device, getattr(torch, args.dtype))
        print(json.dumps(result))
        return 0
    if args.coloc is not None:
        parse_coloc(args.coloc)  # a typo fails here, before anything runs
        if not torch.cuda.is_available():
            print(
                "gpu_validate --coloc: no CUDA GPU on this machine (torch.cuda.is_available() "
                "is False); a co-located pair can only be measured on one.",
                file=sys.stderr,
            )
            return 2

    if not rehearsal and not torch.cuda.is_available():
        print(
            "gpu_validate: no CUDA GPU on this machine (torch.cuda.is_available() is False); "
            "nothing to measure. Running the sharing runtime once on the CPU device as a smoke "
            "check."
        )
        hi, lo = _apps("mlp", 8, "resnet", 2, min(args.requests, 6), "cpu", torch.float32)
        began = time.perf_counter()
        report = runtime_check(CpuDevice(), hi, lo)
        for name, row in report.items():
            print(f"  {name}: {json.dumps(row)}")
        print(
            f"CPU smoke check done in {time.perf_counter() - began:.1f} s (CPU timings say "
            "nothing about GPU sharing; they only show the path runs end to end)."
        )
        return 0

    target = Target(args.device)
    if rehearsal:
        # float16 convolutions are slow or missing on CPUs; the rehearsal checks code, not speed.
        args.dtype, device_name, catalog = "float32", "cpu (rehearsal)", gpu("a100")
        print(
            "gpu_validate: a rehearsal on this machine's CPU: every part runs, on CPU times "
            "and smaller operators; the numbers say nothing about the estimates."
        )
    else:
        device_name = torch.cuda.get_device_name()
        catalog = catalog_gpu_for(device_name)
    print(f"GPU {device_name!r} -> catalog {catalog.name}; dtype {args.dtype}")
    models = []
    for name in args.models.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            began = time.perf_counter()
            try:
                m = validate_model(name, batch, args.dtype, args.reps, catalog, target)
            except Exception as e:  # keep going: one model's failure is a result too
                print(f"  {name} batch {batch}: FAILED {type(e).__name__}: {e}")
                models.append({"model": name, "batch": batch, "error": f"{type(e).__name__}: {e}"})
                continue
            models.append(m)
            print(
                f"  {name:<10} batch {batch:<4} ops {len(m['ops']):>4}  estimated "
                f"{m['estimated_total_s'] * 1e3:8.3f} ms  measured kernels "
                f"{m['measured_kernel_sum_s'] * 1e3:8.3f} ms  forward "
                f"{m['measured_forward_s'] * 1e3:8.3f} ms  ({time.perf_counter() - began:.0f} s)"
            )
    summary = summarise(models)
    _print_table("per kernel class (operator level)", summary["per_class"])
    _print_table("per model (operator level)", summary["per_model"])

    runtime: dict = {}
    try:
        if rehearsal:  # the smoke check's small models
            hi, lo = _apps("mlp", 8, "resnet", 2, min(args.requests, 6), "cpu", torch.float32)
            runtime = runtime_check(CpuDevice(), hi, lo)
        else:
            hi, lo = _apps(
                "resnet50", 1, "bert_base", 32, args.requests, "cuda", getattr(torch, args.dtype)
            )
            runtime = runtime_check(CudaDevice(), hi, lo)
        print(f"\nruntime ({hi.name} priority 1 beside {lo.name} priority 0):")
        for name, row in runtime.items():
            print(f"  {name}: {json.dumps(row)}")
    except Exception as e:
        runtime = {"error": f"{type(e).__name__}: {e}"}
        print(f"runtime check FAILED: {runtime['error']}")

    interference: dict = {}
    if args.pairs:
        try:
            interference = interference_check(
                catalog,
                getattr(torch, args.dtype),
                args.reps,
                target,
                scale=16 if rehearsal else 1,  # 4096^3 products take seconds on a CPU
            )
            _print_interference(interference)
        except Exception as e:  # the other results still count
            interference = {"error": f"{type(e).__name__}: {e}"}
            print(f"interference check FAILED: {interference['error']}")

    coloc: dict = {}
    if args.coloc is not None:
        try:
            coloc = coloc_check(args.coloc, args.coloc_seconds, args.dtype, catalog)
            measured, predicted = coloc["measured_slowdowns"], coloc["predicted_slowdowns"]
            print(f"\nco-located pair {args.coloc}: measured slowdowns {measured}, "
                  f"predicted {predicted}")  # fmt: skip
        except Exception as e:
            coloc = {"error": f"{type(e).__name__}: {e}"}
            print(f"co-located pair FAILED: {coloc['error']}")

    out = {
        "rehearsal": rehearsal,
        "device": device_name,
        "catalog_gpu": catalog.name,
        "dtype": args.dtype,
        "torch": torch.__version__,
        "models": models,
        "summary": summary,
        "runtime": runtime,
        "interference": interference,
        "coloc": coloc,
    }
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
