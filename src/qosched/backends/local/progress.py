"""``progress.jsonl``: the worker's append-only report, one JSON object per line."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any

from qosched.backends.local.protocol import finite_or_none
from qosched.core.errors import InputError


class WorkerEvent(StrEnum):
    START = "start"  # resumed_from, cpu_ids, threads, version
    PROGRESS = "progress"
    RESIZE = "resize"  # cpu_ids, threads, version
    CHECKPOINT = "checkpoint"
    PREEMPTED = "preempted"  # after the final checkpoint, before exit code 3
    DONE = "done"
    ERROR = "error"  # message, fatal
    WARNING = "warning"  # message (e.g. a command's unreadable progress line)


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """One line of ``progress.jsonl``. Fields an event does not carry are None."""

    t: float  # unix time
    event: WorkerEvent
    iteration: int | None  # iterations done so far; None when not known (a command's start)
    cpus: int  # cores applied when the line was written
    loss: float | None  # latest loss; None before the first iteration or when not finite
    resumed_from: int | None = None
    cpu_ids: tuple[int, ...] | None = None
    threads: int | None = None  # None for a command job: its thread pool is its own
    version: int | None = None  # allocation version applied; None = inherited affinity
    message: str | None = None
    fatal: bool | None = None  # on errors: True when the worker exits because of it
    exit_code: int | None = None  # command jobs: the child's exit code


_OPTIONAL = ("resumed_from", "cpu_ids", "threads", "version", "message", "fatal", "exit_code")


class ProgressLog:
    """Appends events to ``progress.jsonl``; each line is flushed as it is written, so a crash
    of the worker loses nothing that was already reported (a crash of the machine may)."""

    def __init__(self, path: str | Path) -> None:
        # Append mode: a restarted worker continues the same file after its predecessor's lines.
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self.cpus = 0
        # Where the job stands, kept current by the runner so that an error raised from deep
        # inside can still be reported at the right iteration.
        self.iteration: int | None = None
        self.loss: float | None = None

    def note(self, iteration: int | None, loss: float | None) -> None:
        self.iteration = iteration
        self.loss = loss

    def write(
        self,
        event: WorkerEvent,
        *,
        iteration: int | None,
        loss: float | None,
        **details: Any,
    ) -> None:
        unknown = set(details) - set(_OPTIONAL)
        if unknown:
            raise TypeError(f"unknown progress field(s): {', '.join(sorted(unknown))}")
        record: dict[str, Any] = {
            "t": time.time(),
            "event": str(event),
            "iteration": iteration,
            "cpus": self.cpus,
            "loss": finite_or_none(loss),
        }
        record.update({name: value for name, value in details.items() if value is not None})
        # One write call per line keeps lines whole even if someone else appends too.
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ProgressLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _parse_event(data: object, source: Path, line: int) -> ProgressEvent:
    if not isinstance(data, dict):
        raise InputError("expected a JSON object", source=source, line=line)
    try:
        event = WorkerEvent(data["event"])
        values = {name: data.get(name) for name in _OPTIONAL}
        if values["cpu_ids"] is not None:
            values["cpu_ids"] = tuple(values["cpu_ids"])
        return ProgressEvent(
            t=float(data["t"]),
            event=event,
            iteration=data.get("iteration"),
            cpus=int(data["cpus"]),
            loss=data.get("loss"),
            **values,
        )
    except KeyError as exc:
        raise InputError(
            "missing required field", source=source, line=line, field=exc.args[0]
        ) from None
    except (TypeError, ValueError) as exc:
        raise InputError(f"malformed progress line: {exc}", source=source, line=line) from None


def read_progress(path: str | Path) -> list[ProgressEvent]:
    """Every complete line of ``progress.jsonl`` (a missing file reads as no events).

    A last line without its newline is being written right now and is left for the next read;
    any other malformed line is an error. Fields this version does not know are ignored, so a
    newer worker's file still reads.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    lines = text.split("\n")
    events = []
    for number, line in enumerate(lines[:-1], start=1):  # lines[-1] is "" or still being written
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"not valid JSON: {exc.msg}", source=path, line=number) from None
        events.append(_parse_event(data, path, number))
    return events
