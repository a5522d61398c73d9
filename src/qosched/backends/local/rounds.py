"""The pure steps of one scheduling round of a pool: the policy's worker counts fitted to each
job's bounds and the free workers (``fit_counts``), made concrete cores or GPUs
(``assign_units``, ``assign_cores``), the changes that follow for each job (``changes``), why
each job's count changes, in words (``explain``), and the workers lent to jobs whose speed is
being measured (``lend_for_measuring``).

The service runs the round (``LocalService._decide_pool``: the view, the policy's call, and
applying these changes: pre-emptions and shrinks first, then launches and growths); nothing
here signals a process or writes the store."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from qosched.backends.local import reasons
from qosched.backends.local.gpus import assign_gpus
from qosched.backends.local.livejob import LiveJob, holding, units_of
from qosched.backends.local.profiling import probe_job
from qosched.cluster.admission import Admission, probe_admission
from qosched.cluster.policies import Policy
from qosched.cluster.state import ClusterView

#: The id of the job that stands for a measurement when the policy is asked whether workers
#: can be lent to it (profiling.probe_job), and how many waiting jobs are asked about per pool
#: and decision (each ask copies the policy).
PROBE_ID = "profiling-probe"
MAX_PROBED_PER_DECISION = 4


@dataclass(frozen=True, slots=True)
class Change:
    """A job whose units change this round: to ``units`` (none: it stops), and whether it
    gives units up (a stop or a shrink, applied before any unit is handed on)."""

    live: LiveJob
    units: tuple[int, ...]
    giving_up: bool


def lend_for_measuring(
    policy: Policy,
    waiting: Sequence[LiveJob],
    free: int,
    running: int,
    view_of: Callable[[int], ClusterView],
    now: float,
    *,
    resize_pause_s: float,
) -> dict[str, int]:
    """How many of the ``free`` workers each waiting profiling job is lent now: the most its
    spec allows such that every guarantee survives (``profiling.probe_job``, asked of a copy of
    ``policy`` on ``view_of(workers left)``), or none where no count does; jobs in submission
    order, each probe on what the earlier left. Each of the ``running`` jobs keeps a worker
    where it can: a measurement shrinks others rather than stopping them."""
    lent: dict[str, int] = {}
    left = free
    for live in waiting[:MAX_PROBED_PER_DECISION]:
        least, most = live.spec.resources.bounds()
        cap = min(most or left, max(1, left - running), left)
        for count in range(cap, max(1, least) - 1, -1):
            probe = probe_job(PROBE_ID, count, now, resize_pause_s=resize_pause_s)
            view = view_of(left)
            if probe_admission(policy, probe, view, best_effort=False) is Admission.GUARANTEED:
                lent[live.record.id] = count
                left -= count
                break
    return lent


def explain(
    members: Sequence[LiveJob],
    assignment: Mapping[str, tuple[int, ...]],
    why: Mapping[str, str],
    happened: str,
) -> None:
    """Note on each job whose worker count this round changes why (the policy's words for
    it, else words from what changed), for the event its re-size, start or stop records."""
    for live in members:
        live.change_why = None
        if holding(live):
            continue
        old, new = len(units_of(live)), len(assignment.get(live.record.id, ()))
        if old == new:
            continue
        live.change_why = reasons.cause(why.get(live.record.id), old, new, happened)
        live.change_to = new


def assign_units(
    workers: Mapping[str, int],
    jobs: Mapping[str, LiveJob],
    members: Sequence[LiveJob],
    free: Sequence[int],
    gpu: bool,
) -> dict[str, tuple[int, ...]]:
    """The policy's worker counts, fitted to each job's bounds (``jobs``: every live job by id)
    and the free units, as concrete cores or GPUs (a job keeps the units it holds where it
    can)."""
    bounds = {job_id: jobs[job_id].spec.resources.bounds() for job_id in workers}
    counts = fit_counts(workers, bounds, len(free))
    current = {
        live.record.id: units_of(live) for live in members if units_of(live) and not holding(live)
    }
    if gpu:
        return assign_gpus(counts, current, free)
    return assign_cores(counts, current, free)


def changes(members: Sequence[LiveJob], assignment: Mapping[str, tuple[int, ...]]) -> list[Change]:
    """Each job whose units change, in ``members``' order."""
    found = []
    for live in members:
        units = assignment.get(live.record.id, ())
        if holding(live) or units == units_of(live):
            continue
        running = live.runner is not None
        if running and live.spec.restarts_on_resize:
            units = ()  # re-sized by a restart: stopped now, launched again once gone
        giving_up = not units or (running and len(units) < len(units_of(live)))
        found.append(Change(live, units, giving_up))
    return found


def fit_counts(
    wanted: Mapping[str, int], bounds: Mapping[str, tuple[int, int | None]], room: int
) -> dict[str, int]:
    """The policy's counts (in its priority order) brought within each job's (least, most)
    workers, and within ``room`` together: a job given 0 stays at 0, and a job whose count no
    longer fits what earlier jobs left waits (later, smaller ones may still fit)."""
    counts: dict[str, int] = {}
    for job_id, count in wanted.items():
        low, high = bounds[job_id]
        count = max(low, min(count, high or count)) if count else 0
        if 0 < count <= room:
            counts[job_id] = count
            room -= count
    return counts


def assign_cores(
    counts: dict[str, int], current: dict[str, tuple[int, ...]], cores: Sequence[int]
) -> dict[str, tuple[int, ...]]:
    """Concrete cores for each job's count: a job keeps its cores when its count is unchanged,
    and keeps as many of its own as it can when it grows or shrinks; the rest take free cores in
    order. Counts must fit in ``cores`` together."""
    if sum(counts.values()) > len(cores):
        raise ValueError(f"{sum(counts.values())} cores wanted, {len(cores)} exist")
    taken: set[int] = set()
    result: dict[str, tuple[int, ...]] = {}
    for job_id, count in counts.items():  # unchanged first: they must not move
        held = current.get(job_id, ())
        if len(held) == count:
            result[job_id] = held
            taken.update(held)
    for job_id, count in counts.items():  # shrinking jobs keep a prefix of their cores
        held = current.get(job_id, ())
        if job_id not in result and len(held) > count:
            result[job_id] = held[:count]
            taken.update(held[:count])
    for job_id, count in counts.items():  # growing and new jobs: own cores first, then free
        if job_id in result:
            continue
        own = [c for c in current.get(job_id, ()) if c not in taken]
        free = [c for c in cores if c not in taken and c not in own]
        chosen = tuple(sorted((own + free)[:count]))
        result[job_id] = chosen
        taken.update(chosen)
    return result
