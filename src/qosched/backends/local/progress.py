"""``progress.jsonl``: the runner's append-only report, one JSON object per line."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any

from qosched.backends.local.files import file_identity, read_regular
from qosched.core.bounds import (
    LATEST_TIME_S,
    check_count,
    check_number,
    check_time,
    number_problem,
)
from qosched.core.errors import InputError
from qosched.trainingjob.protocol import finite_or_none


class RunnerEvent(StrEnum):
    START = "start"  # resumed_from, cpu_ids, threads, version; gpu_ids, processes (commands)
    PROGRESS = "progress"
    RESIZE = "resize"  # cpu_ids, threads, version
    CHECKPOINT = "checkpoint"  # save_s, save_cpu_s (built-in workloads)
    PREEMPTED = "preempted"  # after the final checkpoint, before exit code 3
    DONE = "done"
    ERROR = "error"  # message, fatal
    WARNING = "warning"  # message (e.g. a command's unreadable progress line)


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """One line of ``progress.jsonl``. Fields an event does not carry are None."""

    t: float  # unix time
    event: RunnerEvent
    iteration: int | None  # iterations done so far; None when not known (a command's start)
    cpus: int  # cores applied when the line was written
    loss: float | None  # latest loss; None before the first iteration or when not finite
    resumed_from: int | None = None
    cpu_ids: tuple[int, ...] | None = None
    threads: int | None = None  # None for a command job: its thread pool is its own
    version: int | None = None  # allocation version applied; None = inherited affinity
    message: str | None = None
    fatal: bool | None = None  # on errors: True when the runner exits because of it
    exit_code: int | None = None  # command jobs: the child's exit code
    # Built-in workloads: the runner's CPU seconds so far (all its threads, from its start), so
    # what each stretch of a job's life cost is measured, not guessed; None for a command job.
    cpu_s: float | None = None
    # Built-in workloads: seconds its threads were ready to run but waited for a core (the
    # kernel's run-queue wait, summed over threads): time lost to other work on its cores.
    wait_s: float | None = None
    save_s: float | None = None  # on checkpoints: wall seconds the save took
    save_cpu_s: float | None = None  # on checkpoints: CPU seconds the save took


_OPTIONAL = (
    "resumed_from",
    "cpu_ids",
    "threads",
    "version",
    "message",
    "fatal",
    "exit_code",
    "gpu_ids",  # a command job's start: its GPUs
    "processes",  # a command job's start: how many processes its launcher runs
    "save_s",
    "save_cpu_s",
)


class ProgressLog:
    """Appends events to ``progress.jsonl``; each line is flushed as it is written, so a crash
    of the runner loses nothing that was already reported (a crash of the machine may)."""

    def __init__(self, path: str | Path) -> None:
        _drop_torn_line(Path(path))
        # Append mode: a restarted runner continues the same file after its predecessor's lines.
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self.cpus = 0
        # When set, every line carries ``cpu_s`` and ``wait_s``: what these clocks read (the
        # runner's CPU time, its threads' run-queue wait).
        self.cpu_clock: Callable[[], float] | None = None
        self.wait_clock: Callable[[], float | None] | None = None
        # Where the job stands, kept current by the runner so that an error raised from deep
        # inside can still be reported at the right iteration.
        self.iteration: int | None = None
        self.loss: float | None = None

    def note(self, iteration: int | None, loss: float | None) -> None:
        self.iteration = iteration
        self.loss = loss

    def write(
        self,
        event: RunnerEvent,
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
        if self.cpu_clock is not None:
            record["cpu_s"] = round(self.cpu_clock(), 6)
        if self.wait_clock is not None and (waited := self.wait_clock()) is not None:
            record["wait_s"] = round(waited, 6)
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


def _drop_torn_line(path: Path) -> None:
    """Cut a last line without its newline: a predecessor killed in mid-write left it, and the
    next line appended to it would make one line that is not JSON. Only one runner of a job
    runs at a time, so nobody else is writing it now."""
    try:
        with open(path, "rb+") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size == 0:
                return
            handle.seek(max(0, size - _TAIL_BYTES))
            tail = handle.read()
            if tail.endswith(b"\n"):
                return
            cut = tail.rfind(b"\n")
            if cut < 0 and size > _TAIL_BYTES:
                return  # one huge torn line: leave it for the reader to report
            handle.truncate(size - len(tail) + cut + 1)
    except FileNotFoundError:
        return


_TAIL_BYTES = 1 << 16


def _whole_or_none(data: dict[str, Any], name: str, source: Path, line: int) -> int | None:
    value = data.get(name)
    if value is None:
        return None
    return check_count(value, field=name, source=source, line=line)


def _parse_event(data: object, source: Path, line: int) -> ProgressEvent:
    """One line, with every number bounded: counts whole in [0, 2**53), times within year
    9999, losses finite (or null)."""
    if not isinstance(data, dict):
        raise InputError("expected a JSON object", source=source, line=line)
    for name in ("t", "event", "cpus"):
        if name not in data:
            raise InputError("missing required field", source=source, line=line, field=name)
    try:
        event = RunnerEvent(data["event"])
    except (TypeError, ValueError):
        known = ", ".join(e.value for e in RunnerEvent)
        raise InputError(
            f"unknown event {data['event']!r}; known: {known}",
            source=source,
            line=line,
            field="event",
        ) from None
    loss = data.get("loss")
    cpu_ids = data.get("cpu_ids")
    if cpu_ids is not None:
        if not isinstance(cpu_ids, list):
            raise InputError(
                f"expected a list of core ids, got {cpu_ids!r}"[:120],
                source=source,
                line=line,
                field="cpu_ids",
            )
        cpu_ids = tuple(
            check_count(cpu, field="cpu_ids", source=source, line=line) for cpu in cpu_ids
        )
    message = data.get("message")
    fatal = data.get("fatal")
    exit_code = data.get("exit_code")
    if exit_code is not None:
        # A child's exit code: 0..255, or negative for a signal, as Popen reports it.
        exit_code = int(
            check_number(
                exit_code, field="exit_code", minimum=-255, maximum=255, source=source, line=line
            )
        )
    return ProgressEvent(
        t=check_time(data["t"], field="t", source=source, line=line),
        event=event,
        iteration=_whole_or_none(data, "iteration", source, line),
        cpus=check_count(data["cpus"], field="cpus", source=source, line=line),
        loss=None if loss is None else check_number(loss, field="loss", source=source, line=line),
        resumed_from=_whole_or_none(data, "resumed_from", source, line),
        cpu_ids=cpu_ids,
        threads=_whole_or_none(data, "threads", source, line),
        version=_whole_or_none(data, "version", source, line),
        message=None if message is None else str(message),
        fatal=None if fatal is None else bool(fatal),
        exit_code=exit_code,
        cpu_s=_seconds_or_none(data, "cpu_s", source, line),
        wait_s=_seconds_or_none(data, "wait_s", source, line),
        save_s=_seconds_or_none(data, "save_s", source, line),
        save_cpu_s=_seconds_or_none(data, "save_cpu_s", source, line),
    )


def _seconds_or_none(data: dict[str, Any], name: str, source: Path, line: int) -> float | None:
    value = data.get(name)
    if value is None:
        return None
    # A duration, bounded as a time is: a runner does not live past year 9999 either.
    return check_number(
        value, field=name, minimum=0.0, maximum=LATEST_TIME_S, source=source, line=line
    )


#: The most read from ``progress.jsonl`` per look, and the longest line it may hold: the runner
#: writes lines of a few hundred bytes, so a longer one is not the runner's.
PROGRESS_READ_BYTES = 1 << 20


class ProgressFollower:
    """Reads ``progress.jsonl`` as it grows: each `read` parses only the lines completed since
    the last one, so following a job costs the same at its first report as at its millionth.

    A last line without its newline is being written right now and is left for the next read;
    any other malformed line, or a number out of bounds, is an ``InputError`` naming the line
    (the file is the runner's own report: a line it did not write means it cannot be trusted),
    and so is a file that is not a regular file (``qosched.backends.local.files``), that shrank,
    or that holds a line over ``PROGRESS_READ_BYTES``. Fields this version does not know are
    ignored, so a newer runner's file still reads. A missing file reads as no events.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.offset = 0
        self.lines = 0
        self._identity: tuple[int, int] | None = None  # of the file read so far

    def read(self) -> list[ProgressEvent]:
        """Every event completed since the last read."""
        events: list[ProgressEvent] = []
        self._check_same_file()
        while True:
            got = read_regular(self.path, self.offset, PROGRESS_READ_BYTES)
            if got is None:
                return events
            chunk, size = got
            if size < self.offset:
                raise InputError(
                    f"shrank to {size} bytes after {self.offset} were read", source=self.path
                )
            complete = chunk[: chunk.rfind(b"\n") + 1]
            if not complete:
                if len(chunk) >= PROGRESS_READ_BYTES:
                    raise InputError(
                        f"a line longer than {PROGRESS_READ_BYTES} bytes",
                        source=self.path,
                        line=self.lines + 1,
                    )
                return events
            self.offset += len(complete)
            for raw in complete.split(b"\n")[:-1]:
                self.lines += 1
                if raw.strip():
                    events.append(_parse_line(raw, self.path, self.lines))

    def _check_same_file(self) -> None:
        """A file read from before must still be the one at the path: a job that removed its
        own folder (or the file) and wrote a new one would otherwise be read from the old
        file's offset, in the middle of a line."""
        identity = file_identity(self.path)
        if self._identity is None:
            self._identity = identity
        elif identity != self._identity and (identity is None or _plain_file(self.path)):
            # (Anything but a file in its place is refused by the read, saying what it is.)
            what = "was deleted" if identity is None else "was deleted and written anew"
            folder = (
                "" if self.path.parent.exists() else f" (its folder {self.path.parent} is gone)"
            )
            raise InputError(
                f"{what} while the job ran{folder}: a job must not remove or rewrite the "
                "files qosched keeps in its folder",
                source=self.path,
            )


def read_progress(path: str | Path) -> list[ProgressEvent]:
    """Every complete line of ``progress.jsonl``, as `ProgressFollower` reads them."""
    return ProgressFollower(path).read()


def _parse_line(raw: bytes, path: Path, number: int) -> ProgressEvent:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text: {exc.reason}", source=path, line=number) from None
    try:
        data = json.loads(line)
    except ValueError as exc:  # a JSONDecodeError, or an integer of over 4300 digits
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else number_problem(exc)
        raise InputError(f"not valid JSON: {reason}", source=path, line=number) from None
    return _parse_event(data, path, number)


def _plain_file(path: Path) -> bool:
    """A regular file, not a link to one."""
    return not path.is_symlink() and path.is_file()
