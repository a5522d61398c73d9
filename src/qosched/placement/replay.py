"""What the runtime does with a plan, replayed in simulated time: throughput with the overlap
the round-robin cost model of ``placement.ir`` takes for granted.

The cost model scores a plan by its busiest resource per round, as if the two processors always
found work. The runtime (``placement.runtime``) cannot always give them work: a request's
segments follow each other, each process serves its inbox first come first served, and only
``depth`` rounds are in flight (round ``r + depth`` is admitted when round ``r`` has finished).
:func:`replay` plays exactly that protocol on the plan's costs, event by event:

- the host hands each request of a round, tenant by tenant, to the process of its first unit
  (a request starting on the gpu pays the input copy there);
- a process takes one message at a time: it unpacks the values (its share of the copy), runs
  the segment (``message_overhead_s + compute_scale * the units' costs``) and packs the live
  values for the other process (its share of the next copy); the part of a copy neither end
  spends (``1 - 2 * copy_share``) is in flight;
- a request whose plan ends on the gpu comes back through the cpu process, which finishes it.

:class:`RuntimeModel` holds what isolated operator timings miss, each fitted to a run's own
spans by :func:`fit_runtime_model`: a fixed cost per message (the process's dispatch, the
interpreter), a scale on the isolated costs (operators run cold in a run, hot when profiled),
and ``contention``: how much slower a process computes while the other one is busy too (the two
processors share caches and memory bandwidth on one machine). With the defaults (no overhead,
scale 1, no contention) the replay differs from the cost model only by the overlap it loses.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from qosched.core.errors import InputError
from qosched.core.trace import Span
from qosched.placement.ir import PROCESSORS, Problem, TenantGraph, check_assignment, segments
from qosched.sim.engine import Engine, Event


@dataclass(frozen=True)
class RuntimeModel:
    """How the runtime executes a plan beyond the isolated costs (see the module doc)."""

    depth: int = 2
    message_overhead_s: float = 0.0
    compute_scale: float = 1.0
    contention: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.depth, bool) or not isinstance(self.depth, int) or self.depth < 1:
            raise InputError(f"expected a depth >= 1, got {self.depth!r}", field="depth")
        for name, low in (("message_overhead_s", 0.0), ("compute_scale", 0.0), ("contention", 1.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InputError(f"expected a number, got {value!r}", field=name)
            if not low <= value < math.inf or (name == "compute_scale" and value == 0):
                raise InputError(f"expected a finite {name} >= {low}, got {value!r}", field=name)


@dataclass(frozen=True)
class Replayed:
    """The outcome of a replay: requests per second of each tenant (in problem order) over the
    measured rounds, and the fraction of the measured window each processor was busy."""

    throughput_rps: tuple[float, ...]
    busy_fraction: dict[str, float]

    @property
    def total_throughput_rps(self) -> float:
        return sum(self.throughput_rps)


@dataclass(frozen=True)
class _MessageStep:
    """One message's work on one process: unpack, run a segment (or nothing), pack."""

    receive_s: float
    compute_s: float
    send_s: float
    in_flight_s: float  # of the copy that follows, after the pack
    finishes: bool  # the request is done when this step ends


def _steps(
    tenant: TenantGraph, assignment: Sequence[str], model: RuntimeModel
) -> tuple[float, list[tuple[str, _MessageStep]]]:
    """The host's delay before the first message arrives, and ``(processor, step)`` for every
    message of one request, in order."""
    check_assignment(tenant, assignment)
    share = tenant.copy_share
    runs = segments(assignment)
    # The copy before each segment (None: a request starting on the cpu has none), then the
    # result's way back when the last segment runs on the gpu.
    copies: list[float | None] = [tenant.input_to_gpu_s if assignment[0] == "gpu" else None]
    copies += [tenant.transfer_s[lo - 1] for _, lo, _ in runs[1:]]
    if runs[-1][0] == "gpu":
        copies.append(tenant.output_from_gpu_s)
    steps = []
    for j, (p, lo, hi) in enumerate(runs):
        costs = tenant.cpu_s if p == "cpu" else tenant.gpu_s
        before = copies[j]
        after = copies[j + 1] if j + 1 < len(copies) else None
        step = _MessageStep(
            receive_s=0.0 if before is None else share * before,
            compute_s=model.message_overhead_s + model.compute_scale * sum(costs[lo:hi]),
            send_s=0.0 if after is None else share * after,
            in_flight_s=0.0 if after is None else (1 - 2 * share) * after,
            finishes=after is None,
        )
        steps.append((p, step))
    if runs[-1][0] == "gpu":  # the cpu process unpacks the result and finishes the request
        back = _MessageStep(
            share * tenant.output_from_gpu_s, model.message_overhead_s, 0.0, 0.0, True
        )
        steps.append(("cpu", back))
    if any(not math.isfinite(s.receive_s + s.compute_s + s.send_s) for _, s in steps):
        raise InputError(
            f"tenant {tenant.name!r}: the plan runs a unit or a copy the platform cannot run",
            field="assignment",
        )
    first = copies[0]
    host_delay = 0.0 if first is None else (1 - share) * first  # the host packs; in flight
    return host_delay, steps


def _busy_within(intervals: Iterable[tuple[float, float]], lo: float, hi: float) -> float:
    return sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in intervals)


# The order of events at one instant: completions (the cpu process's, then the gpu process's), then
# arrivals, then the dispatch that hands idle processes their next message. A process thus picks
# among everything that arrived by then, as the runtime's inbox would have it.
_ARRIVAL = len(PROCESSORS)
_DISPATCH = _ARRIVAL + 1


@dataclass(frozen=True)
class _Message:
    """Step ``step`` of tenant ``tenant``'s request of round ``round``, on its way to or waiting
    at the process that runs it."""

    tenant: int
    round: int
    step: int


@dataclass
class _Work:
    """The message a process is handling: ``left`` seconds of work (at full speed) remained at
    ``since``, done at ``rate`` (below 1 while the other process computes too)."""

    message: _Message
    started: float
    left: float
    since: float
    rate: float = 0.0  # not yet running: the dispatch sets it
    completion: Event | None = None


class _Replay:
    """The runtime's protocol as events on a :class:`qosched.sim.Engine`: messages arrive at a
    process's inbox, idle processes take the oldest, a process's completion sends the next message
    or finishes the request, and a round's last result admits round ``r + depth``."""

    def __init__(
        self,
        plans: Sequence[tuple[float, list[tuple[str, _MessageStep]]]],
        model: RuntimeModel,
        total: int,
    ) -> None:
        self.plans = plans
        self.model = model
        self.total = total
        self.engine = Engine()
        self.inbox: dict[str, deque[_Message]] = {p: deque() for p in PROCESSORS}
        self.current: dict[str, _Work | None] = {p: None for p in PROCESSORS}
        self.busy: dict[str, list[tuple[float, float]]] = {p: [] for p in PROCESSORS}
        self.submitted: dict[tuple[int, int], float] = {}
        self.finished: dict[tuple[int, int], float] = {}
        self.remaining = [len(plans)] * total
        self.next_round = min(model.depth, total)
        self.dispatch: Event | None = None

    def run(self) -> None:
        for r in range(self.next_round):
            self.submit(r)
        self.engine.run()
        if len(self.finished) < len(self.plans) * self.total:  # a bug, not bad input
            raise AssertionError("replay stalled with requests outstanding")

    def submit(self, r: int) -> None:
        """The host hands each tenant's request of round ``r`` to the process of its first step."""
        now = self.engine.now
        for t, (host_delay, steps) in enumerate(self.plans):
            self.submitted[t, r] = now
            self.send(host_delay, steps[0][0], _Message(t, r, 0))

    def send(self, delay: float, processor: str, message: _Message) -> None:
        self.engine.schedule(
            lambda: self.arrive(processor, message), delay=delay, priority=_ARRIVAL, label="message"
        )

    def arrive(self, processor: str, message: _Message) -> None:
        self.inbox[processor].append(message)
        self.wake()

    def wake(self) -> None:
        """Dispatch once, after every other event of this instant."""
        if self.dispatch is None or not self.dispatch.pending:
            self.dispatch = self.engine.schedule(
                self.dispatch_all, delay=0.0, priority=_DISPATCH, label="dispatch"
            )

    def dispatch_all(self) -> None:
        """Idle processes take their oldest message; then every process computes at the rate that
        the number of busy processes allows."""
        now = self.engine.now
        for p in PROCESSORS:
            if self.current[p] is None and self.inbox[p]:
                message = self.inbox[p].popleft()
                step = self.plans[message.tenant][1][message.step][1]
                work = step.receive_s + step.compute_s + step.send_s
                self.current[p] = _Work(message, started=now, left=work, since=now)
        working = [w for w in self.current.values() if w is not None]
        rate = 1.0 / self.model.contention if len(working) == 2 else 1.0
        for p in PROCESSORS:
            work = self.current[p]
            if work is not None and work.rate != rate:
                self.reschedule(p, work, rate)

    def reschedule(self, processor: str, work: _Work, rate: float) -> None:
        now = self.engine.now
        if work.completion is not None:
            work.left -= (now - work.since) * work.rate
            self.engine.cancel(work.completion)
        work.since, work.rate = now, rate
        work.completion = self.engine.schedule(
            lambda: self.complete(processor),
            delay=max(work.left, 0.0) / rate,
            priority=PROCESSORS.index(processor),
            label=f"{processor} done",
        )

    def complete(self, processor: str) -> None:
        """The process's message is handled: the next one leaves for the other process, or the
        request is finished (and maybe its round with it)."""
        now = self.engine.now
        work = self.current[processor]
        assert work is not None
        self.current[processor] = None
        self.busy[processor].append((work.started, now))
        message = work.message
        steps = self.plans[message.tenant][1]
        if not steps[message.step][1].finishes:
            following = _Message(message.tenant, message.round, message.step + 1)
            self.send(steps[message.step][1].in_flight_s, steps[message.step + 1][0], following)
        else:
            self.finished[message.tenant, message.round] = now
            self.remaining[message.round] -= 1
            if self.remaining[message.round] == 0 and self.next_round < self.total:
                self.submit(self.next_round)
                self.next_round += 1
        self.wake()


def replay(
    problem: Problem,
    assignments: Sequence[Sequence[str]],
    model: RuntimeModel = RuntimeModel(),
    *,
    rounds: int = 20,
    warmup: int = 2,
) -> Replayed:
    """Play ``warmup + rounds`` rounds of every tenant through the runtime's protocol; measure
    as the runtime does, from the first submission of round ``warmup`` to each tenant's last
    result."""
    if len(assignments) != len(problem.tenants):
        raise InputError(
            f"expected {len(problem.tenants)} assignments, got {len(assignments)}",
            field="assignments",
        )
    for name, value, low in (("rounds", rounds, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InputError(f"expected a whole number >= {low}, got {value!r}", field=name)
    plans = [_steps(t, a, model) for t, a in zip(problem.tenants, assignments, strict=True)]
    n, total = len(plans), warmup + rounds
    played = _Replay(plans, model, total)
    played.run()
    submitted, finished = played.submitted, played.finished
    start = min(submitted[t, warmup] for t in range(n))
    end = max(finished.values())
    rates = []
    for t in range(n):
        last = max(finished[t, r] for r in range(warmup, total))
        rates.append(rounds / (last - start) if last > start else math.inf)
    window = end - start
    fraction = {
        p: _busy_within(played.busy[p], start, end) / window if window > 0 else 0.0
        for p in PROCESSORS
    }
    return Replayed(tuple(rates), fraction)


@dataclass(frozen=True)
class MessageSample:
    """One message a process handled in a run: the isolated cost of the units it ran (0 for a
    result coming back), the copies' shares it spent by the cost model, how long it took, and
    the fraction of that time the other process was busy too."""

    isolated_s: float
    copies_s: float
    measured_s: float
    overlap: float


def message_samples(
    spans: Iterable[Span], problem: Problem, assignments: Sequence[Sequence[str]]
) -> list[MessageSample]:
    """The messages of a run's timeline (``MeasuredRun.spans``, one ``message`` span each) against
    the costs and the plan (``assignments`` in problem order) the run executed."""
    if len(assignments) != len(problem.tenants):
        raise InputError(
            f"expected {len(problem.tenants)} assignments, got {len(assignments)}",
            field="assignments",
        )
    plans = {
        t.name: (t, _steps(t, a, RuntimeModel())[1])
        for t, a in zip(problem.tenants, assignments, strict=True)
    }
    messages = [s for s in spans if s.name.startswith("message") and s.track in PROCESSORS]
    busy: dict[str, list[tuple[float, float]]] = {p: [] for p in PROCESSORS}
    for span in messages:
        busy[span.track].append((span.start_s, span.start_s + span.duration_s))
    samples = []
    for span in messages:
        name = str(span.args["tenant"])
        if name not in plans:
            raise InputError(f"the run has a tenant {name!r} the problem has not")
        _, steps = plans[name]
        k = int(span.args["segment"])  # type: ignore[arg-type]
        if not 0 <= k < len(steps) or steps[k][0] != span.track:
            raise InputError(
                f"tenant {name!r}: message {k} on the {span.track} process does not fit the plan",
                field="assignments",
            )
        step = steps[k][1]
        other = "gpu" if span.track == "cpu" else "cpu"
        end = span.start_s + span.duration_s
        overlap = _busy_within(busy[other], span.start_s, end)
        samples.append(
            MessageSample(
                isolated_s=step.compute_s,  # the default model: the units' isolated costs
                copies_s=step.receive_s + step.send_s,
                measured_s=span.duration_s,
                overlap=min(1.0, overlap / span.duration_s) if span.duration_s > 0 else 0.0,
            )
        )
    return samples


def fit_runtime_model(samples: Sequence[MessageSample], *, depth: int = 2) -> RuntimeModel:
    """``measured - copies = overhead + scale * isolated * (1 + (contention - 1) * overlap)``,
    fitted by least squares on relative error (short and long messages weigh alike).

    Linear in ``(overhead, scale, scale * (contention - 1))``. A term that comes out below its
    range (a negative overhead, or contention below 1) is dropped and the rest refitted, so the
    model never makes a process faster with company than alone.
    """
    usable = [s for s in samples if s.measured_s > 0 and math.isfinite(s.isolated_s + s.copies_s)]
    if len(usable) < 3:
        raise InputError(f"expected at least 3 timed messages, got {len(usable)}", field="samples")
    y = np.array([s.measured_s - s.copies_s for s in usable])
    iso = np.array([s.isolated_s for s in usable])
    ovl = np.array([s.overlap for s in usable])
    weight = 1.0 / np.array([s.measured_s for s in usable])
    columns = {"overhead": np.ones_like(y), "scale": iso, "extra": iso * ovl}

    def solve(names: list[str]) -> dict[str, float]:
        a = np.column_stack([columns[n] for n in names]) * weight[:, None]
        coef, *_ = np.linalg.lstsq(a, y * weight, rcond=None)
        return dict(zip(names, (float(c) for c in coef), strict=True))

    names = ["overhead", "scale", "extra"]
    fitted = solve(names)
    for _ in range(2):
        bad = [n for n in ("overhead", "extra") if n in fitted and fitted[n] < 0]
        if not bad:
            break
        names = [n for n in names if n not in bad]
        fitted = solve(names)
    scale = fitted.get("scale", 0.0)
    if not scale > 0:
        raise InputError("the timed messages do not grow with their isolated cost", field="samples")
    return RuntimeModel(
        depth=depth,
        message_overhead_s=fitted.get("overhead", 0.0),
        compute_scale=scale,
        contention=1.0 + fitted.get("extra", 0.0) / scale,
    )
