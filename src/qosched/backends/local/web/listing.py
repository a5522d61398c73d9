"""One page of the job table (``GET /jobs`` with a query): jobs filtered by state and text,
sorted by a column, cut to a page, so the page's script draws 50 rows however many jobs the
service has run.

``JobQuery.from_query`` validates the query once, at the edge (``InputError`` naming the
parameter, which the API turns into a 400); ``table`` is a pure function of the jobs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from qosched.backends.local.jobview import JobView
from qosched.backends.local.store import FINAL_STATES, Lifecycle
from qosched.core.bounds import check_count
from qosched.core.errors import InputError

DEFAULT_LIMIT = 50
#: The most rows one page may ask for: a page of JSON stays small whatever the client asks.
MAX_LIMIT = 500
#: The longest search text: a name is matched, not a document.
MAX_TEXT = 200

# Running first, then waiting, then finished (the default order, and the "state" column's).
_RANK = {
    Lifecycle.RUNNING: 0,
    Lifecycle.PROFILING: 0,
    Lifecycle.QUEUED: 1,
    Lifecycle.PREEMPTED: 1,
}
_FINISHED_RANK = 2
#: State groups the filter takes besides the states themselves.
STATE_GROUPS: Mapping[str, frozenset[Lifecycle]] = {
    "active": frozenset(Lifecycle) - FINAL_STATES,
    "finished": frozenset(FINAL_STATES),
}


def _rank(job: JobView) -> int:
    return _RANK.get(job.state, _FINISHED_RANK)


def _finish(job: JobView) -> float | None:
    """What the table's finish column shows: when it finished, or when it is predicted to."""
    return job.finished_at if job.finished_at is not None else job.predicted_finish_at


def _margin(job: JobView) -> float | None:
    """Seconds between the (predicted) finish and the deadline: the outlook column, in numbers
    (negative: late), so that ascending order puts the jobs in most trouble first."""
    finish = _finish(job)
    return None if finish is None else job.deadline_at - finish


def _progress(job: JobView) -> float | None:
    return None if not job.iterations else job.iterations_done / job.iterations


# A column's sort key; None sorts last in either order.
SORT_KEYS: Mapping[str, Callable[[JobView], Any]] = {
    "id": lambda job: 0,  # submission order: the jobs come in it, and ties keep it
    "name": lambda job: job.name.casefold(),
    "state": lambda job: (_rank(job), job.state.value),
    "progress": _progress,
    "cores": lambda job: len(job.cpus) + len(job.gpus),
    "submitted": lambda job: job.submitted_at,
    "deadline": lambda job: job.deadline_at,
    "finish": _finish,
    "outlook": _margin,
    "promise": lambda job: 2 if job.guaranteed else 1 if job.best_effort else 0,
}
DEFAULT_SORT = "active"  # running, then waiting (each oldest first), then finished newest first
ORDERS = ("asc", "desc")
PARAMETERS = ("state", "q", "sort", "order", "offset", "limit")


@dataclass(frozen=True, slots=True)
class JobQuery:
    """What ``GET /jobs?...`` asks for. ``states`` empty: every state; ``text``: a piece of the
    id or name, any case; ``sort`` a ``SORT_KEYS`` column or ``DEFAULT_SORT``."""

    states: frozenset[Lifecycle] = frozenset()
    text: str = ""
    sort: str = DEFAULT_SORT
    descending: bool = False
    offset: int = 0
    limit: int = DEFAULT_LIMIT

    @classmethod
    def from_query(cls, query: Mapping[str, Sequence[str]]) -> JobQuery:
        """From a parsed query string (``parse_qs``; the last of a repeated parameter wins);
        ``InputError`` naming the parameter that is unknown or out of bounds."""
        unknown = sorted(set(query) - set(PARAMETERS))
        if unknown:
            raise InputError(
                f"unknown query parameter {unknown[0]!r}; known: {', '.join(PARAMETERS)}",
                field=unknown[0],
            )

        def last(name: str, default: str = "") -> str:
            values = query.get(name)
            return values[-1] if values else default

        text = last("q")
        if len(text) > MAX_TEXT:
            raise InputError(f"at most {MAX_TEXT} characters, got {len(text)}", field="q")
        sort = last("sort", DEFAULT_SORT)
        if sort not in SORT_KEYS and sort != DEFAULT_SORT:
            known = ", ".join([DEFAULT_SORT, *SORT_KEYS])
            raise InputError(f"no column {sort!r} to sort by; known: {known}", field="sort")
        order = last("order", "asc")
        if order not in ORDERS:
            raise InputError(f"expected asc or desc, got {order!r}", field="order")
        return cls(
            states=_states(last("state")),
            text=text.strip().casefold(),
            sort=sort,
            descending=order == "desc",
            offset=_count(last("offset", "0"), "offset", 0, 2**53 - 1),
            limit=_count(last("limit", str(DEFAULT_LIMIT)), "limit", 1, MAX_LIMIT),
        )


def _states(text: str) -> frozenset[Lifecycle]:
    """``running,queued``, a group of ``STATE_GROUPS``, or nothing (every state)."""
    states: set[Lifecycle] = set()
    for name in filter(None, (part.strip() for part in text.split(","))):
        if name in STATE_GROUPS:
            states |= STATE_GROUPS[name]
        elif name in Lifecycle._value2member_map_:
            states.add(Lifecycle(name))
        else:
            known = ", ".join([*STATE_GROUPS, *(s.value for s in Lifecycle)])
            raise InputError(f"no state {name!r}; known: {known}", field="state")
    return frozenset(states)


def _count(text: str, name: str, minimum: int, maximum: int) -> int:
    if not (text.isascii() and text.isdecimal()) or len(text) > 20:
        raise InputError(f"expected a whole number >= {minimum}, got {text!r}", field=name)
    return check_count(int(text), field=name, minimum=minimum, maximum=maximum)


def table(jobs: Sequence[JobView], query: JobQuery) -> dict[str, Any]:
    """``jobs`` (in submission order) as ``query`` asks: ``{"jobs": [the page's jobs],
    "total": every job, "matched": those that pass the filter, "offset", "limit", "sort",
    "order", "states": {state: jobs in it, over every job}}``."""
    counts = {state.value: 0 for state in Lifecycle}
    for job in jobs:
        counts[job.state.value] += 1
    matched = [job for job in jobs if _passes(job, query)]
    ordered = _sorted(matched, query.sort, query.descending)
    shown = ordered[query.offset : query.offset + query.limit]
    return {
        "jobs": [job.to_json() for job in shown],
        "total": len(jobs),
        "matched": len(matched),
        "offset": query.offset,
        "limit": query.limit,
        "sort": query.sort,
        "order": "desc" if query.descending else "asc",
        "states": counts,
    }


def _passes(job: JobView, query: JobQuery) -> bool:
    if query.states and job.state not in query.states:
        return False
    return not query.text or query.text in job.id.casefold() or query.text in job.name.casefold()


def _sorted(jobs: list[JobView], sort: str, descending: bool) -> list[JobView]:
    if sort == DEFAULT_SORT:
        # Python's sort is stable: within running and within waiting, submission order stays.
        active = sorted((job for job in jobs if _rank(job) < _FINISHED_RANK), key=_rank)
        finished = [job for job in jobs if _rank(job) == _FINISHED_RANK]
        finished.sort(key=lambda job: job.finished_at or job.submitted_at, reverse=True)
        ordered = active + finished
        return ordered[::-1] if descending else ordered
    key = SORT_KEYS[sort]
    if sort == "id":
        return jobs[::-1] if descending else list(jobs)
    valued = [job for job in jobs if key(job) is not None]
    # reverse=True keeps equal keys in their order (submission), as the ascending sort does.
    valued.sort(key=key, reverse=descending)
    return valued + [job for job in jobs if key(job) is None]
