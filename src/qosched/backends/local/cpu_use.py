"""Where the cores a job held went: start-up, running, checkpointing, ending.

A job holds cores from the moment the service launches its runner (the store's ``state`` and
``allocation`` events) until the service sees the runner gone. What it did with them comes from
the runner's own events: ``start`` once PyTorch is imported and the model built, ``checkpoint``
with the seconds its save took, ``done``/``preempted`` as it ends, each with ``cpu_s``, the
runner's CPU time so far. So every figure here is measured: core-seconds held in each stretch
of a job's life, and the CPU seconds its runner used in it.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from qosched.backends.local.progress import ProgressEvent, RunnerEvent
from qosched.backends.local.store import JobEvent

STARTING = "start-up"  # the runner launched, not yet started (Python, PyTorch, the model)
RUNNING = "running"  # between its start and its end, less its checkpoints
CHECKPOINTING = "checkpointing"  # saving a checkpoint
ENDING = "ending"  # its last event written, the service not yet done with it
PHASES = (STARTING, RUNNING, CHECKPOINTING, ENDING)

_ENDS = (RunnerEvent.DONE, RunnerEvent.PREEMPTED)


@dataclass(slots=True)
class Breakdown:
    """By phase: core-seconds held (``held``), CPU seconds the runners used (``used``) and
    seconds their threads waited for a core, ready to run (``waited``: other work held it).
    Running is also split by the number of cores held (``running_by_cores``: cores -> [held,
    used, waited])."""

    held: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    used: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    waited: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    running_by_cores: dict[int, list[float]] = field(default_factory=dict)
    # Wall seconds of each stretch of a phase in which cores were held: a launch's start-up,
    # a runner's ending (less noisy than shares of core-seconds on a busy machine).
    stretches: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in PHASES})

    @property
    def held_total(self) -> float:
        return sum(self.held.values())

    @property
    def used_total(self) -> float:
        return sum(self.used.values())

    @property
    def waited_total(self) -> float:
        return sum(self.waited.values())

    def running_on(self, cores: int) -> list[float]:
        return self.running_by_cores.setdefault(cores, [0.0, 0.0, 0.0])

    def add(self, other: Breakdown) -> None:
        for phase in PHASES:
            self.held[phase] += other.held[phase]
            self.used[phase] += other.used[phase]
            self.waited[phase] += other.waited[phase]
            self.stretches[phase].extend(other.stretches[phase])
        for cores, figures in other.running_by_cores.items():
            mine = self.running_on(cores)
            for i, value in enumerate(figures):
                mine[i] += value


def cores_held(events: Iterable[JobEvent]) -> list[tuple[float, int]]:
    """(time, cores held from then on) from a job's store events: entering a state holds the
    cores it names (only ``running`` names any), an ``allocation`` event changes them."""
    steps: list[tuple[float, int]] = []
    for event in events:
        if event.kind == "state":
            steps.append((event.t, len(event.detail.get("cpus", []))))
        elif event.kind == "allocation":
            steps.append((event.t, len(event.detail["to"])))
    return steps


def job_breakdown(
    store_events: Sequence[JobEvent], runner_events: Sequence[ProgressEvent], end: float
) -> Breakdown:
    """One job's breakdown from its store events (in order) and every event its runners wrote
    (``progress.jsonl``, in order); a job still holding cores is counted up to ``end``."""
    found = Breakdown()
    steps = cores_held(store_events)
    if not steps:
        return found
    held_at = _held_at(steps)
    marks = _phase_marks(store_events, runner_events)
    _add_held(found, steps, marks, held_at, end)
    _add_used(found, runner_events, held_at)
    return found


def _held_at(steps: list[tuple[float, int]]) -> Callable[[float], int]:
    """The cores held at a time, from the steps of :func:`cores_held` (none before the first)."""
    times = [t for t, _ in steps]

    def held_at(t: float) -> int:
        i = bisect.bisect_right(times, t) - 1
        return steps[i][1] if i >= 0 else 0

    return held_at


def _phase_marks(
    store_events: Sequence[JobEvent], runner_events: Sequence[ProgressEvent]
) -> list[tuple[float, str]]:
    """Where each phase begins, in time order: a launch starts one (the store says when), the
    runner's events the others. A checkpoint's save is the ``save_s`` before its event."""
    marks: list[tuple[float, str]] = [
        (event.t, STARTING)
        for event in store_events
        if event.kind == "state" and event.detail.get("cpus")
    ]
    for event in runner_events:
        if event.event is RunnerEvent.START:
            marks.append((event.t, RUNNING))
        elif event.event is RunnerEvent.CHECKPOINT and event.save_s is not None:
            marks.append((event.t - event.save_s, CHECKPOINTING))
            marks.append((event.t, RUNNING))
        elif event.event in _ENDS or (event.event is RunnerEvent.ERROR and event.fatal):
            marks.append((event.t, ENDING))
    marks.sort(key=lambda mark: mark[0])
    return marks


def _add_held(
    found: Breakdown,
    steps: list[tuple[float, int]],
    marks: list[tuple[float, str]],
    held_at: Callable[[float], int],
    end: float,
) -> None:
    """Core-seconds: the cores held integrated over each stretch between two changes (of the
    cores or the phase), and the wall seconds of each stretch of a phase."""
    first = steps[0][0]
    cuts = sorted({t for t, _ in steps} | {t for t, _ in marks if t >= first} | {end})
    phase, m = STARTING, 0
    stretch: tuple[str, float] | None = None  # (phase, seconds) of the stretch going on
    for begin, finish in itertools.pairwise(cuts):
        while m < len(marks) and marks[m][0] <= begin:
            phase = marks[m][1]
            m += 1
        cores = held_at(begin)
        if stretch is not None and (stretch[0] != phase or not cores):
            found.stretches[stretch[0]].append(stretch[1])
            stretch = None
        if cores and finish > begin:
            found.held[phase] += cores * (finish - begin)
            stretch = (phase, (stretch[1] if stretch else 0.0) + finish - begin)
            if phase == RUNNING:
                found.running_on(cores)[0] += cores * (finish - begin)
    if stretch is not None:
        found.stretches[stretch[0]].append(stretch[1])


def _add_used(
    found: Breakdown, runner_events: Sequence[ProgressEvent], held_at: Callable[[float], int]
) -> None:
    """CPU seconds, and seconds waited for a core: each runner's own counts, taken apart at
    its events."""
    previous: ProgressEvent | None = None
    started = False
    for event in runner_events:
        if event.cpu_s is None:
            continue
        if _new_process(event, previous):
            # From the process's birth; a runner that wrote no start event only ever started.
            started = event.event is RunnerEvent.START
            found.used[STARTING] += event.cpu_s
            found.waited[STARTING] += event.wait_s or 0.0
            previous = event
            continue
        spent = event.cpu_s - (previous.cpu_s if previous is not None else 0.0)
        # A thread that ended takes its count with it: never less than nothing.
        waited = max(0.0, (event.wait_s or 0.0) - ((previous and previous.wait_s) or 0.0))
        previous = event
        if not started:
            found.used[STARTING] += spent
            found.waited[STARTING] += waited
            continue
        _add_running(found, event, spent, waited, held_at(event.t))


def _new_process(event: ProgressEvent, previous: ProgressEvent | None) -> bool:
    """A runner's start, or counts that went back: a new process counts from zero."""
    return event.event is RunnerEvent.START or (
        previous is not None
        and previous.cpu_s is not None
        and event.cpu_s is not None
        and event.cpu_s < previous.cpu_s
    )


def _add_running(
    found: Breakdown, event: ProgressEvent, spent: float, waited: float, cores: int
) -> None:
    """One started runner's CPU seconds since its previous event: a checkpoint's save apart,
    the rest running (also by the ``cores`` held then)."""
    if event.event is RunnerEvent.CHECKPOINT and event.save_cpu_s is not None:
        saved = min(event.save_cpu_s, spent)
        found.used[CHECKPOINTING] += saved
        spent -= saved
    found.used[RUNNING] += spent
    found.waited[RUNNING] += waited
    if cores:
        figures = found.running_on(cores)
        figures[1] += spent
        figures[2] += waited
