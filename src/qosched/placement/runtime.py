"""The multi-tenant runtime: a plan executed for real, one pinned process per processor.

Each is a process pinned to its processor's cores (``placement.platform.PinnedProcessor``)
with one PyTorch thread per core (on a CUDA platform the gpu process computes on the device). It
holds every tenant's program (``placement.program.UnitProgram``, the exported model with its real
weights) and serves one inbox, first come first served, one piece of work at a time:

- a *segment* is a maximal run of consecutive units a plan puts on one processor. A process runs
  a segment, then sends the values live across the cut (``UnitProgram.live_after``) to the other
  process's inbox: pickled into bytes and sent through a pipe (the core-set platform's "link"),
  moved to or from the device on a CUDA platform;
- the host owns the inputs and the results. The cost model's host is the cpu process: a result
  there is delivered (a plan that ends on the gpu sends its result back to it), and the calling
  process hands each request to the process of its first unit (packed, so a plan that starts on
  the gpu pays the copy there, as the cost model says).

Every message between processes goes through a ``SimpleQueue``, written in the sender's thread
and drained on the other side by a thread of its own (see ``_drained``). The processes keep freed
memory for reuse (``placement.platform.keep_freed_memory``), as the isolated profile does.

The coordinator (the calling process) serves all tenants round-robin at one rate, as the cost
model of ``placement.ir`` assumes: a round is one request of every tenant; up to ``depth`` rounds
are in flight (2 lets both processors work on different rounds at once), and round ``r + depth``
is admitted when round ``r`` has finished. The first ``warmup`` rounds are not measured. The
cpu process compares every result with the tenant's program run unsplit (``torch.equal``) and
tells the coordinator when it finished and whether it was equal.

Besides a span per segment, copy and unpack, each process records one ``message`` span around
everything it does for a message: its busy time, overheads included, which
``placement.replay.message_samples`` fits the runtime model to.

Times come from ``time.perf_counter`` (CLOCK_MONOTONIC on Linux, the same clock in every
process), so the processes' spans line up on one timeline.
"""

from __future__ import annotations

import pickle
import queue as queue_module
import statistics
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

from qosched.core.errors import InputError, QoschedError
from qosched.core.trace import Span
from qosched.placement.ir import segments
from qosched.placement.platform import PinnedProcessor, pin, process_context
from qosched.placement.program import UnitProgram, load_program

READY_TIMEOUT_S = 600.0
RESULT_TIMEOUT_S = 600.0


class RuntimeFailure(QoschedError, RuntimeError):
    """A pinned process failed; the message carries its traceback."""


@dataclass(frozen=True)
class TenantRun:
    """What a process needs to run one tenant: the saved exported program, the units (operator
    names of each), the request's inputs and the plan's processor per unit."""

    name: str
    program: bytes
    units: tuple[tuple[str, ...], ...]
    inputs: tuple[torch.Tensor, ...]
    assignment: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.assignment) != len(self.units):
            raise InputError(
                f"tenant {self.name!r}: the plan has {len(self.assignment)} units, the model "
                f"{len(self.units)}",
                field="assignment",
            )
        bad = [p for p in self.assignment if p not in ("cpu", "gpu")]
        if bad:
            raise InputError(
                f"tenant {self.name!r}: unknown processor {bad[0]!r}", field="assignment"
            )


def _flat(value: Any) -> Any:
    # A contiguous tensor crosses as its raw bytes (pickling the tensor goes through torch.save,
    # several times slower); any other value, strided tensors included, is pickled whole.
    if isinstance(value, torch.Tensor) and value.is_contiguous() and value.device.type == "cpu":
        raw = value.reshape(-1).view(torch.uint8).numpy().tobytes() if value.numel() else b""
        return ("tensor", str(value.dtype).removeprefix("torch."), tuple(value.shape), raw)
    return ("object", value)


def _unflat(item: Any) -> Any:
    if item[0] == "object":
        return item[1]
    _, dtype, shape, raw = item
    dtype = getattr(torch, dtype)
    if not raw:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)


def pack(values: dict[str, Any]) -> bytes:
    """The bytes that cross a cut: the live values by name (dtype, shape and data kept)."""
    return pickle.dumps({k: _flat(v) for k, v in values.items()}, protocol=5)


def unpack(data: bytes) -> dict[str, Any]:
    """The values :func:`pack` packed, as fresh tensors owned by this process."""
    return {k: _unflat(v) for k, v in pickle.loads(data).items()}


def to_device(values: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in values.items()}


def _drained(source: Any, *, until: str) -> queue_module.Queue:
    """A local queue that a thread fills from ``source`` (a ``SimpleQueue``), up to and with the
    first message of kind ``until``.

    Every message between processes goes through a ``SimpleQueue``, whose ``put`` writes to the
    pipe in the caller's thread. A ``Queue`` hands the bytes to a feeder thread instead, which
    shares the sender's core with its computing main thread: runs showed messages arriving
    0.5-2 ms late, a round's worth of idle time per few rounds. A synchronous write blocks while
    the pipe is full, so the reading side drains its pipe in a thread of its own; no two processes
    can then block each other by sending at once.
    """
    local: queue_module.Queue = queue_module.Queue()

    def drain() -> None:
        while True:
            message = source.get()
            local.put(message)
            if message[0] == until:
                return

    threading.Thread(target=drain, name="qosched-inbox", daemon=True).start()
    return local


def _process_main(
    pinned: PinnedProcessor,
    tenants: Sequence[TenantRun],
    inboxes: dict[str, Any],
    done: Any,
    check: _Check,
) -> None:
    try:
        _serve(pinned, tenants, inboxes, done, check)
    except BaseException:
        done.put(("error", pinned.processor, traceback.format_exc()))


def _serve(
    pinned: PinnedProcessor,
    tenants: Sequence[TenantRun],
    inboxes: dict[str, Any],
    done: Any,
    check: _Check,
) -> None:
    pin(pinned.cores)
    me = pinned.processor
    other = "gpu" if me == "cpu" else "cpu"
    device = torch.device(pinned.device)
    host = torch.device("cpu")
    programs = [UnitProgram(load_program(t.program), t.units, t.name).to(device) for t in tenants]
    plans = [segments(t.assignment) for t in tenants]
    spans: list[tuple[str, str, float, float, dict]] = []
    inbox = _drained(inboxes[me], until="stop")
    done.put(("ready", me, time.perf_counter()))

    def send(t: int, r: int, seg: int, values: dict[str, Any], to: str) -> None:
        start = time.perf_counter()
        if device.type != "cpu":
            values = to_device(values, host)
        inboxes[to].put(("data", t, r, seg, pack(values)))
        spans.append((f"send {tenants[t].name}#{r}", me, start, time.perf_counter(), {"to": to}))

    def finish(t: int, r: int, values: dict[str, Any]) -> None:
        # The result is on the host (the cpu process): delivered. The coordinator only learns
        # when and whether it was right; shipping the tensors on to it would cost this process a
        # copy the plan's costs do not have.
        at = time.perf_counter()
        done.put(("done", t, r, at, check.same(t, [values[n] for n in programs[t].output_names])))

    def advance(t: int, r: int, seg: int, values: dict[str, Any]) -> None:
        plan = plans[t]
        if seg == len(plan):  # the result is back on the host
            finish(t, r, values)
            return
        processor, lo, hi = plan[seg]
        if processor != me:
            send(t, r, seg, values, other)
            return
        start = time.perf_counter()
        unit_s: list[float] | None = [] if device.type == "cpu" else None
        values = programs[t].run_units(values, lo, hi, unit_s)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        end = time.perf_counter()
        spans.append(
            (
                f"{tenants[t].name}#{r} units {lo}-{hi - 1}",
                me,
                start,
                end,
                {"tenant": tenants[t].name, "request": r, "units": [lo, hi], "unit_s": unit_s},
            )
        )
        live = {v: values[v] for v in programs[t].live_after(hi - 1)}
        if seg + 1 < len(plan) or me != "cpu":
            send(t, r, seg + 1, live, other)
        else:
            finish(t, r, live)

    while True:
        message = inbox.get()
        kind = message[0]
        if kind == "stop":
            done.put(("spans", me, spans))
            return
        # One span per message as well, around everything the process does for it (unpacking,
        # the segment, packing, finishing): what the process is busy with, overheads included.
        t, r = message[1], message[2]
        seg = message[3] if kind == "data" else 0
        handled = time.perf_counter()
        if kind == "start":
            _, t, r = message
            advance(t, r, 0, programs[t].start_env(tenants[t].inputs))
        elif kind == "input":  # from the host, for a request whose first unit runs here
            _, t, r, data = message
            start = time.perf_counter()
            leaves = unpack(data)
            values = to_device(programs[t].start_env([leaves[k] for k in sorted(leaves, key=int)]),
                               device)  # fmt: skip
            spans.append((f"receive {tenants[t].name}#{r}", me, start, time.perf_counter(), {}))
            advance(t, r, 0, values)
        elif kind == "data":
            _, t, r, seg, data = message
            start = time.perf_counter()
            values = to_device(unpack(data), device)
            spans.append((f"receive {tenants[t].name}#{r}", me, start, time.perf_counter(), {}))
            advance(t, r, seg, values)
        args = {"tenant": tenants[t].name, "request": r, "segment": seg}
        spans.append((f"message {tenants[t].name}#{r}", me, handled, time.perf_counter(), args))


@dataclass(frozen=True)
class TenantResult:
    """One tenant's measured requests: throughput over the measured rounds and latency
    (submission to result) per request; ``outputs_equal`` is whether every result equalled
    the unsplit program's output bit for bit."""

    name: str
    requests: int
    throughput_rps: float
    latency_s: tuple[float, ...]
    outputs_equal: bool

    @property
    def mean_latency_s(self) -> float:
        return statistics.fmean(self.latency_s)

    @property
    def p95_latency_s(self) -> float:
        ordered = sorted(self.latency_s)
        return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


@dataclass(frozen=True)
class MeasuredRun:
    """A finished run: per-tenant results, the measured window, and the timeline."""

    tenants: tuple[TenantResult, ...]
    rounds: int
    warmup: int
    depth: int
    wall_s: float
    busy_s: dict[str, float]
    spans: tuple[Span, ...] = field(repr=False)

    @property
    def total_throughput_rps(self) -> float:
        return sum(t.throughput_rps for t in self.tenants)


#: The most rounds (measured, or warm-up) one run makes: each keeps a request's record per tenant
#: in memory, and a hundred thousand already takes minutes.
MAX_ROUNDS = 100_000
#: The most rounds in flight at once: two keep both processors busy; more only queue.
MAX_DEPTH = 64


def run(
    tenants: Sequence[TenantRun],
    pinned: tuple[PinnedProcessor, PinnedProcessor],
    *,
    rounds: int = 20,
    warmup: int = 2,
    depth: int = 2,
    expected: Sequence[Sequence[torch.Tensor]] | None = None,
    tolerance: float | None = None,
) -> MeasuredRun:
    """Run ``rounds`` measured rounds (after ``warmup`` more) of every tenant on ``pinned``
    (the cpu process, the gpu process); ``expected[i]`` are tenant i's outputs run unsplit.

    Results must equal ``expected`` bit for bit (``torch.equal``), or, with ``tolerance``, be
    within it (``torch.allclose`` with that relative and absolute tolerance: a GPU's kernels do
    not round like the CPU's)."""
    if not tenants:
        raise InputError("expected at least one tenant", field="tenants")
    for name, value, low, high in (
        ("rounds", rounds, 1, MAX_ROUNDS),
        ("warmup", warmup, 0, MAX_ROUNDS),
        ("depth", depth, 1, MAX_DEPTH),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise InputError(
                f"expected a whole number in [{low}, {high:,}], got {value!r}", field=name
            )
    check = _Check(None if expected is None else tuple(tuple(e) for e in expected), tolerance)
    context = process_context()
    inboxes = {p.processor: context.SimpleQueue() for p in pinned}
    done = context.SimpleQueue()
    processes = [
        context.Process(
            target=_process_main,
            args=(p, list(tenants), inboxes, done, check),
            name=f"qosched-{p.processor}",
            daemon=True,
        )
        for p in pinned
    ]
    for process in processes:
        process.start()
    results = _drained(done, until="closed")
    try:
        return _coordinate(
            tenants, processes, inboxes, results, rounds, warmup, depth, expected, tolerance
        )
    finally:
        done.put(("closed",))
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
                process.join()


def _get(done: Any, processes: list, timeout: float) -> tuple:
    deadline = time.monotonic() + timeout
    while True:
        try:
            message = done.get(timeout=1.0)
        except queue_module.Empty:
            dead = [p for p in processes if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeFailure(
                    f"process {dead[0].name} exited with code {dead[0].exitcode}"
                ) from None
            if time.monotonic() > deadline:
                raise RuntimeFailure(f"no word from the processes for {timeout:.0f} s") from None
            continue
        if message[0] == "error":
            raise RuntimeFailure(f"the {message[1]} process failed:\n{message[2]}")
        return message


@dataclass(frozen=True)
class _Check:
    """What the finishing process compares each result with: tenant i's outputs run unsplit
    (``None``: nothing to compare), bit for bit or within ``tolerance``."""

    expected: tuple[tuple[torch.Tensor, ...], ...] | None
    tolerance: float | None

    def same(self, t: int, outputs: Sequence[Any]) -> bool | None:
        if self.expected is None:
            return None
        want = self.expected[t]
        return len(outputs) == len(want) and all(
            isinstance(a, torch.Tensor) and _same(a.cpu(), b, self.tolerance)
            for a, b in zip(outputs, want, strict=False)
        )


def _same(a: torch.Tensor, b: torch.Tensor, tolerance: float | None) -> bool:
    if tolerance is None:
        return torch.equal(a, b)
    return a.shape == b.shape and torch.allclose(a, b, rtol=tolerance, atol=tolerance)


def _coordinate(
    tenants, processes, inboxes, done, rounds, warmup, depth, expected, tolerance
) -> MeasuredRun:
    for _ in processes:
        _get(done, processes, READY_TIMEOUT_S)
    total = warmup + rounds
    n = len(tenants)
    submitted: dict[tuple[int, int], float] = {}
    finished: dict[tuple[int, int], float] = {}
    equal = [True] * n
    remaining = [n] * total
    origin = time.perf_counter()

    def submit(r: int) -> None:
        # The host hands each request to the process of its first unit: routed through the cpu
        # process, a request starting on the gpu would wait behind whatever the cpu process is
        # computing, and the gpu would sit idle meanwhile.
        for t, tenant in enumerate(tenants):
            submitted[t, r] = time.perf_counter()
            if tenant.assignment[0] == "cpu":
                inboxes["cpu"].put(("start", t, r))
            else:
                leaves = pytree.tree_leaves(tuple(tenant.inputs))
                inputs = {str(i): x for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)}
                inboxes[tenant.assignment[0]].put(("input", t, r, pack(inputs)))

    for r in range(min(depth, total)):
        submit(r)
    next_round = min(depth, total)
    while len(finished) < n * total:
        _, t, r, at, same = _get(done, processes, RESULT_TIMEOUT_S)
        finished[t, r] = at
        if expected is not None:
            equal[t] = equal[t] and bool(same)
        remaining[r] -= 1
        if remaining[r] == 0 and next_round < total:
            submit(next_round)
            next_round += 1
    for inbox in inboxes.values():
        inbox.put(("stop",))
    raw: list[tuple[str, str, float, float, dict]] = []
    for _ in processes:
        message = _get(done, processes, RESULT_TIMEOUT_S)
        raw.extend(message[2])
    start = min(submitted[t, warmup] for t in range(n)) if rounds else origin
    results = []
    for t, tenant in enumerate(tenants):
        measured = range(warmup, total)
        last = max(finished[t, r] for r in measured)
        results.append(
            TenantResult(
                name=tenant.name,
                requests=rounds,
                throughput_rps=rounds / (last - start),
                latency_s=tuple(finished[t, r] - submitted[t, r] for r in measured),
                outputs_equal=equal[t] if expected is not None else False,
            )
        )
    end = max(finished.values())
    busy: dict[str, float] = {}
    spans = []
    for name, track, s, e, args in raw:
        spans.append(Span(name, "qosched infer run", track, max(0.0, s - origin), e - s, args))
        if s >= start and name.startswith("message"):
            busy[track] = busy.get(track, 0.0) + (e - s)
    return MeasuredRun(
        tenants=tuple(results),
        rounds=rounds,
        warmup=warmup,
        depth=depth,
        wall_s=end - start,
        busy_s=busy,
        spans=tuple(sorted(spans, key=lambda s: s.start_s)),
    )
