"""What a pod runs, when the pod trace says: an inference service or a training job.

A pod of the trace may carry a workload (``docs/contracts.md``, the pod trace's workload
columns): a **service** answers requests of a model at a rate, with a goal in the GPU level's
vocabulary (``core.goals``, as ``gpushare`` states it: ``p99_latency_ms``, ``p99_slowdown``,
``throughput_share``, ``throughput_rps``, ``best_effort``) and lives from its creation to its
deletion; a **training** job runs a model's step loop until ``work_s`` of work (seconds on its
GPUs alone) is done, by a deadline or as best effort. Either asks for its GPUs as the pod does
(``num_gpu`` x ``gpu_milli``, Kubernetes GPU-sharing's request). Everything is checked here,
once: the simulation trusts it.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass

from qosched.cluster.job import MAX_RUN_S
from qosched.core.bounds import LATEST_TIME_S, MAX_BATCH, show_value
from qosched.core.errors import InputError
from qosched.core.goals import BEST_EFFORT, Goal, goal_from_key

SERVICE = "service"
TRAINING = "training"
KINDS = (SERVICE, TRAINING)
#: A request rate beyond any one service (a million requests a second).
MAX_RATE_RPS = 1e6
#: The most steps a rate-over-time series may have.
MAX_RATE_STEPS = 10_000
#: The highest priority (priorities are ordinal: a larger one is more important).
MAX_PRIORITY = 1000


@dataclass(frozen=True, slots=True)
class RateSeries:
    """Requests per second over time, piecewise constant: ``steps`` are ``(from_s, rps)``
    in increasing time, the first from 0 (a constant rate is one step). Times are the trace's
    clock."""

    steps: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        if not self.steps or self.steps[0][0] != 0.0:
            raise InputError("a rate series starts at time 0", field="rate_rps")
        for (t0, _), (t1, _) in zip(self.steps, self.steps[1:], strict=False):
            if not t1 > t0:
                raise InputError(
                    f"rate series times must increase, got {t0:g} then {t1:g}", field="rate_rps"
                )

    @classmethod
    def constant(cls, rps: float) -> RateSeries:
        return cls(((0.0, float(rps)),))

    def at(self, time_s: float) -> float:
        """The rate in force at ``time_s``."""
        index = bisect_right([t for t, _ in self.steps], time_s) - 1
        return self.steps[max(index, 0)][1]

    def changes(self) -> tuple[float, ...]:
        """The times after 0 at which the rate changes."""
        return tuple(t for t, _ in self.steps[1:])

    def text(self) -> str:
        """The trace's cell: ``120`` or ``0:120|3600:240``."""
        if len(self.steps) == 1:
            return _num(self.steps[0][1])
        return "|".join(f"{_num(t)}:{_num(r)}" for t, r in self.steps)


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    """An inference service: ``model`` at ``batch`` per request, ``rate`` requests per second,
    ``goal`` (the GPU level's) protected by ``priority`` (larger is more important)."""

    model: str
    rate: RateSeries
    goal: Goal
    priority: int
    batch: int = 1

    kind = SERVICE


@dataclass(frozen=True, slots=True)
class TrainingSpec:
    """A training job: ``model``'s step loop at ``batch`` until ``work_s`` seconds of work on
    its GPUs alone are done; ``deadline_s`` (absolute, the trace's clock) or None for best
    effort."""

    model: str
    work_s: float
    deadline_s: float | None
    priority: int
    batch: int = 1

    kind = TRAINING

    @property
    def goal(self) -> Goal:
        """What the GPU level sees of a training job sharing a GPU: no latency or throughput
        goal (its deadline is judged by its progress)."""
        return BEST_EFFORT


WorkloadSpec = ServiceSpec | TrainingSpec
#: The workload columns of a pod trace, after the pod's own.
WORKLOAD_COLUMNS = (
    "kind",
    "model",
    "batch",
    "priority",
    "rate_rps",
    "goal",
    "work_s",
    "deadline_s",
)


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class _Cells:
    """A row's workload cells, each error naming the file, the line and the column."""

    def __init__(self, cells: dict[str, str], source: object, line: int | None) -> None:
        self.cells, self.source, self.line = cells, source, line

    def error(self, field: str, reason: str) -> InputError:
        return InputError(reason, source=self.source, line=self.line, field=field)

    def empty(self, kind: str, *fields: str) -> None:
        for field in fields:
            if self.cells.get(field, ""):
                raise self.error(field, f"a {kind} has no {field}; leave the cell empty")

    def number(self, field: str, low: float, high: float, *, positive: bool = False) -> float:
        text = self.cells.get(field, "")
        if not text:
            raise self.error(field, "expected a number, got an empty cell")
        try:
            value = float(text)
        except ValueError:
            raise self.error(field, f"expected a number, got {show_value(text)}") from None
        if not (math.isfinite(value) and low <= value <= high) or (positive and value <= 0):
            bound = f"> {low:g}" if positive else f">= {low:g}"
            raise self.error(field, f"expected a number {bound} and <= {high:g}, got {text}")
        return value

    def whole(self, field: str, low: int, high: int, default: int | None = None) -> int:
        if not self.cells.get(field, "") and default is not None:
            return default
        value = self.number(field, low, high)
        if not value.is_integer():
            raise self.error(field, f"expected a whole number, got {self.cells[field]}")
        return int(value)


def check_model(model: str, *, source: object = None, line: int | None = None) -> str:
    """``model`` if it is a zoo name or ``hf:<model_type>``, else an InputError naming it."""
    from qosched.graph.capture import model_name_problem  # imports torch: only when needed

    problem = model_name_problem(model)
    if problem is None and ":" in model and not model.startswith("hf:"):
        problem = (
            f"model {show_value(model)}: a cluster workload's model is a zoo name or hf:<type>"
        )
    if problem is not None:
        raise InputError(problem, source=source, line=line, field="model")
    return model


def parse_rate(text: str, *, source: object = None, line: int | None = None) -> RateSeries:
    """A ``rate_rps`` cell: one rate (``120``) or ``from_s:rps`` steps joined by ``|``, the
    first from 0 (``0:120|3600:240``); each rate in (0, ``MAX_RATE_RPS``]."""
    where = _Cells({}, source, line)
    parts = [part.strip() for part in text.split("|")]
    if not text.strip():
        raise where.error("rate_rps", "a service needs a request rate, got an empty cell")
    if len(parts) > MAX_RATE_STEPS:
        raise where.error("rate_rps", f"at most {MAX_RATE_STEPS} steps, got {len(parts)}")
    if len(parts) == 1 and ":" not in parts[0]:
        return RateSeries.constant(_Cells({"rate_rps": parts[0]}, source, line).number(
            "rate_rps", 0.0, MAX_RATE_RPS, positive=True))  # fmt: skip
    steps = []
    for part in parts:
        start, colon, rate = part.partition(":")
        if not colon:
            raise where.error("rate_rps", f"expected from_s:rps, got {show_value(part)}")
        steps.append(
            (
                _Cells({"rate_rps": start}, source, line).number("rate_rps", 0.0, LATEST_TIME_S),
                _Cells({"rate_rps": rate}, source, line).number(
                    "rate_rps", 0.0, MAX_RATE_RPS, positive=True
                ),
            )
        )
    try:
        return RateSeries(tuple(steps))
    except InputError as exc:
        raise where.error("rate_rps", exc.reason) from None


def parse_goal(text: str, *, source: object = None, line: int | None = None) -> Goal:
    """A ``goal`` cell: ``best_effort`` or ``key=value`` with a key of the GPU level's
    vocabulary (``p99_latency_ms=50``)."""
    if text == "best_effort":
        return BEST_EFFORT
    key, equals, value = text.partition("=")
    if not equals:
        raise InputError(
            f"expected best_effort or key=value (p99_latency_ms=50, p99_slowdown=1.5, "
            f"throughput_rps=100), got {show_value(text)}",
            source=source,
            line=line,
            field="goal",
        )
    try:
        amount: float | str = float(value)
    except ValueError:
        amount = value
    return goal_from_key(key.strip(), amount, field="goal", source=source, line=line)


def goal_text(goal: Goal) -> str:
    """The trace's cell for ``goal``; :func:`parse_goal` reads it back."""
    if not goal.protected:
        return "best_effort"
    if goal.kind == "p99_latency":
        return f"p99_latency_ms={_num(round(goal.value * 1e3, 9))}"
    return f"{goal.kind}={_num(goal.value)}"


def parse_workload(
    cells: dict[str, str],
    *,
    created_s: float,
    source: object = None,
    line: int | None = None,
) -> WorkloadSpec | None:
    """A pod's workload from its workload cells (``WORKLOAD_COLUMNS``; an empty ``kind``: a pod
    that runs no modelled workload), every cell checked against its kind."""
    row = _Cells(cells, source, line)
    kind = cells.get("kind", "")
    if not kind:
        row.empty("pod without a kind", *WORKLOAD_COLUMNS[1:])
        return None
    if kind not in KINDS:
        raise row.error("kind", f"unknown kind {show_value(kind)}; expected {', '.join(KINDS)} "
                        "or an empty cell")  # fmt: skip
    if not cells.get("model", ""):
        raise row.error("model", f"a {kind} needs a model (a zoo name or hf:<type>)")
    model = check_model(cells["model"], source=source, line=line)
    batch = row.whole("batch", 1, MAX_BATCH, default=1)
    priority = row.whole("priority", 0, MAX_PRIORITY, default=0)
    if kind == SERVICE:
        row.empty(kind, "work_s", "deadline_s")
        if not cells.get("goal", ""):
            raise row.error("goal", "a service needs a goal (e.g. p99_latency_ms=50, best_effort)")
        return ServiceSpec(
            model,
            parse_rate(cells.get("rate_rps", ""), source=source, line=line),
            parse_goal(cells["goal"], source=source, line=line),
            priority,
            batch,
        )
    row.empty(kind, "rate_rps", "goal")
    work = row.number("work_s", 0.0, MAX_RUN_S, positive=True)
    deadline = None
    if cells.get("deadline_s", ""):
        deadline = row.number("deadline_s", 0.0, LATEST_TIME_S)
        if deadline <= created_s:
            raise row.error("deadline_s", f"deadline {deadline:g} s is not after the pod's "
                            f"creation at {created_s:g} s")  # fmt: skip
    return TrainingSpec(model, work, deadline, priority, batch)


def workload_cells(workload: WorkloadSpec | None) -> list[str]:
    """The trace's workload cells for ``workload``, in ``WORKLOAD_COLUMNS`` order."""
    if workload is None:
        return [""] * len(WORKLOAD_COLUMNS)
    common = [workload.kind, workload.model, str(workload.batch), str(workload.priority)]
    if isinstance(workload, ServiceSpec):
        return [*common, workload.rate.text(), goal_text(workload.goal), "", ""]
    deadline = "" if workload.deadline_s is None else _num(workload.deadline_s)
    return [*common, "", "", _num(workload.work_s), deadline]
