"""What the local API says about a job (``GET /jobs``, ``GET /jobs/{id}``, ``.../detail``): the
typed contract between the service, which builds these, and its clients, which read them back.

The JSON of ``JobView.to_json``::

    {"id": str, "name": str, "state": Lifecycle value, "submitted_at": t, "deadline_at": t,
     "started_at": t | null, "finished_at": t | null, "iterations": n | null,
     "iterations_done": n, "cpus": [core ids], "gpus": [GPU ids],
     "predicted_finish_at": t | null, "predicted_finish_band": [lo, hi] | null,
     "speed_source": "measured now" | "measured while profiling" | "remembered from j-..." |
                     "table" | "placeholder" | null,
     "best_effort": bool, "guaranteed": bool, "attempts": n, "error": str | null}

Times are Unix seconds; ``iterations`` is null for a job whose stored spec no longer reads.
``JobDetail`` adds ``allocations``, ``events`` and ``slack_s`` to the same object.

``from_json`` checks every field of an answer (a server may be another version, or not a
qosched service at all): ``InputError`` naming the field, never a ``KeyError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from qosched.backends.local.store import FINAL_STATES, Lifecycle
from qosched.core.bounds import check_count, check_number, check_time, show_value
from qosched.core.errors import InputError


class Outcome(StrEnum):
    """How a finished job ended, as ``GET /status`` and ``qosched_job_outcomes`` count it."""

    MET = "met"
    MISSED = "missed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DECLINED = "declined"

    @classmethod
    def of(cls, state: Lifecycle, finished_at: float | None, deadline_at: float) -> Outcome | None:
        """A job's outcome; None while it is unfinished. A success counts as met only when it
        finished by its deadline."""
        if state is Lifecycle.SUCCEEDED:
            met = finished_at is not None and finished_at <= deadline_at
            return cls.MET if met else cls.MISSED
        return _ENDED_UNFINISHED.get(state)


#: The final states but success, each its own outcome.
_ENDED_UNFINISHED = {
    Lifecycle.FAILED: Outcome.FAILED,
    Lifecycle.CANCELLED: Outcome.CANCELLED,
    Lifecycle.DECLINED: Outcome.DECLINED,
}


@dataclass(frozen=True, slots=True)
class JobView:
    """One job as the API shows it: its stored facts, plus what the service knows now (the
    iterations done, the cores and GPUs held, the predicted finish)."""

    id: str
    name: str
    state: Lifecycle
    submitted_at: float
    deadline_at: float
    started_at: float | None
    finished_at: float | None
    iterations: int | None
    iterations_done: int
    cpus: tuple[int, ...]
    gpus: tuple[int, ...]
    predicted_finish_at: float | None
    predicted_finish_band: tuple[float, float] | None
    best_effort: bool
    guaranteed: bool
    attempts: int
    error: str | None
    # Where the job's predicted speed comes from while it is unfinished (SPEED_SOURCES words:
    # "measured now", "measured while profiling", "remembered from j-000003", "table",
    # "placeholder"); None when finished.
    speed_source: str | None = None

    @property
    def finished(self) -> bool:
        """In a final state: it will not run again."""
        return self.state in FINAL_STATES

    @property
    def outcome(self) -> Outcome | None:
        return Outcome.of(self.state, self.finished_at, self.deadline_at)

    def to_json(self) -> dict[str, Any]:
        band = self.predicted_finish_band
        return {
            "id": self.id,
            "name": self.name,
            "state": self.state.value,
            "submitted_at": self.submitted_at,
            "deadline_at": self.deadline_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "iterations": self.iterations,
            "iterations_done": self.iterations_done,
            "cpus": list(self.cpus),
            "gpus": list(self.gpus),
            "predicted_finish_at": self.predicted_finish_at,
            "predicted_finish_band": None if band is None else list(band),
            "best_effort": self.best_effort,
            "guaranteed": self.guaranteed,
            "attempts": self.attempts,
            "error": self.error,
            "speed_source": self.speed_source,
        }

    @classmethod
    def from_json(cls, data: Any, source: str = "a job") -> JobView:
        """Read back ``to_json``'s object; ``InputError`` naming the field that is not one."""
        read = _ObjectReader(data, source)
        band = read.optional("predicted_finish_band", list)
        if band is not None:
            if len(band) != 2:
                raise InputError(
                    f"expected [low, high], got {show_value(band)}",
                    source=source,
                    field="predicted_finish_band",
                )
            for value in band:
                check_number(value, field="predicted_finish_band", source=source)
            band = tuple(band)
        job_id = read.required("id", str)
        if not job_id:
            raise InputError("a job id must not be empty", source=source, field="id")
        state_text = read.required("state", str)
        try:
            state = Lifecycle(state_text)
        except ValueError:
            known = ", ".join(s.value for s in Lifecycle)
            raise InputError(
                f"unknown state {state_text!r}; known: {known}", source=source, field="state"
            ) from None
        return cls(
            id=job_id,
            name=read.required("name", str),
            state=state,
            submitted_at=read.time("submitted_at"),
            deadline_at=read.time("deadline_at"),
            started_at=read.time("started_at", optional=True),
            finished_at=read.time("finished_at", optional=True),
            iterations=read.count("iterations", optional=True),
            iterations_done=read.count("iterations_done"),
            cpus=read.ids("cpus"),
            gpus=read.ids("gpus"),
            predicted_finish_at=read.number("predicted_finish_at"),
            predicted_finish_band=band,
            best_effort=read.required("best_effort", bool),
            guaranteed=read.required("guaranteed", bool),
            attempts=read.count("attempts"),
            error=read.optional("error", str),
            # Absent from a service older than the field: read as unknown.
            speed_source=_speed_source(
                read.optional("speed_source", str) if "speed_source" in read.data else None,
                source,
            ),
        )


def _speed_source(text: str | None, source: str) -> str | None:
    """A ``speed_source`` as a client reads it: short text (absent from older services)."""
    if text is not None and len(text) > 200:
        raise InputError("expected at most 200 characters", source=source, field="speed_source")
    return text


@dataclass(frozen=True, slots=True)
class HeldAllocation:
    """One stretch of time a job held the same cores and GPUs; ``until`` None: held now."""

    start: float
    until: float | None
    cpus: tuple[int, ...]
    gpus: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "from": self.start,
            "until": self.until,
            "cpus": list(self.cpus),
            "gpus": list(self.gpus),
        }


@dataclass(frozen=True, slots=True)
class EventView:
    """One entry of a job's audit log (``store.JobEvent`` without its job id)."""

    t: float
    kind: str
    detail: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"t": self.t, "kind": self.kind, "detail": dict(self.detail)}


@dataclass(frozen=True, slots=True)
class JobDetail:
    """One job in detail (``GET /jobs/{id}/detail``): ``job`` with every allocation it held,
    oldest first, its audit log, and ``slack_s`` (its deadline minus its finish, or minus its
    predicted finish while it runs; None when neither is known or it ended unfinished)."""

    job: JobView
    allocations: tuple[HeldAllocation, ...]
    events: tuple[EventView, ...]
    slack_s: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            **self.job.to_json(),
            "allocations": [held.to_json() for held in self.allocations],
            "events": [event.to_json() for event in self.events],
            "slack_s": self.slack_s,
        }

    @classmethod
    def from_json(cls, data: Any, source: str = "a job's detail") -> JobDetail:
        read = _ObjectReader(data, source)
        allocations = []
        for index, held in enumerate(read.required("allocations", list)):
            item = _ObjectReader(held, source, f"allocations[{index}]")
            allocations.append(
                HeldAllocation(
                    start=item.time("from"),
                    until=item.time("until", optional=True),
                    cpus=item.ids("cpus"),
                    gpus=item.ids("gpus"),
                )
            )
        events = []
        for index, event in enumerate(read.required("events", list)):
            item = _ObjectReader(event, source, f"events[{index}]")
            events.append(
                EventView(
                    t=item.time("t"),
                    kind=item.required("kind", str),
                    detail=MappingProxyType(item.required("detail", dict)),
                )
            )
        return cls(
            job=JobView.from_json(data, source),
            allocations=tuple(allocations),
            events=tuple(events),
            slack_s=read.number("slack_s"),
        )


class _ObjectReader:
    """Typed fields of one JSON object, each failure an ``InputError`` naming the field."""

    def __init__(self, data: Any, source: str, prefix: str = "") -> None:
        if not isinstance(data, dict):
            raise InputError(
                f"expected a JSON object, got {show_value(data)}",
                source=source,
                field=prefix or None,
            )
        self.data = data
        self.source = source
        self.prefix = prefix

    def field(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def value(self, key: str, *, optional: bool = False) -> Any:
        """The value at ``key``, which must be there (null only when ``optional``)."""
        if key not in self.data:
            raise InputError("required field is missing", source=self.source, field=self.field(key))
        value = self.data[key]
        if value is None and not optional:
            raise InputError(
                "expected a value, got null", source=self.source, field=self.field(key)
            )
        return value

    def required(self, key: str, kind: type) -> Any:
        return self._typed(key, self.value(key), kind)

    def optional(self, key: str, kind: type) -> Any:
        value = self.value(key, optional=True)
        return None if value is None else self._typed(key, value, kind)

    def time(self, key: str, *, optional: bool = False) -> Any:
        value = self.value(key, optional=optional)
        if value is not None:
            check_time(value, field=self.field(key), source=self.source)
        return value  # as sent: an int stays an int, so the JSON reads back the same

    def number(self, key: str) -> Any:
        """A finite number or null (a prediction may lie past any calendar)."""
        value = self.value(key, optional=True)
        if value is not None:
            check_number(value, field=self.field(key), source=self.source)
        return value

    def count(self, key: str, *, optional: bool = False) -> int | None:
        value = self.value(key, optional=optional)
        if value is None:
            return None
        return check_count(value, field=self.field(key), source=self.source)

    def ids(self, key: str) -> tuple[int, ...]:
        values = self.required(key, list)
        return tuple(check_count(v, field=self.field(key), source=self.source) for v in values)

    def _typed(self, key: str, value: Any, kind: type) -> Any:
        # bool is an int: a count of `true` is refused, and so is a flag of 1.
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise InputError(
                f"expected a {_KINDS.get(kind, kind.__name__)}, got {show_value(value)}",
                source=self.source,
                field=self.field(key),
            )
        return value


_KINDS = {str: "string", bool: "boolean", list: "list", dict: "JSON object"}
