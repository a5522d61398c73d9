"""Chrome-trace / Perfetto timelines: complete ("X") events on named tracks, written as JSON.

Open the file at https://ui.perfetto.dev or chrome://tracing. Every level that executes something
(operator placement runs, GPU kernel streams, cluster jobs) writes its timeline through here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from qosched.core.errors import InputError


@dataclass(frozen=True)
class Span:
    """One interval on a track: ``process`` groups tracks (a machine, a GPU), ``track`` is the row
    (a processor, a stream, a job); times in seconds from the run's start."""

    name: str
    process: str
    track: str
    start_s: float
    duration_s: float
    args: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.start_s < 0 or self.duration_s < 0:
            raise InputError(
                f"span {self.name!r} on {self.track!r}: start and duration must be >= 0, "
                f"got {self.start_s!r} and {self.duration_s!r}"
            )


def chrome_trace(spans: Iterable[Span]) -> dict[str, object]:
    """The trace-event JSON object: numeric pids/tids in first-seen order, named by metadata."""
    pids: dict[str, int] = {}
    tids: dict[tuple[str, str], int] = {}
    events: list[dict[str, object]] = []
    for span in spans:
        pid = pids.setdefault(span.process, len(pids) + 1)
        tid = tids.setdefault((span.process, span.track), len(tids) + 1)
        events.append(
            {
                "name": span.name,
                "ph": "X",
                "pid": pid,
                "tid": tid,
                "ts": span.start_s * 1e6,  # the format counts microseconds
                "dur": span.duration_s * 1e6,
                "args": dict(span.args),
            }
        )
    names: list[dict[str, object]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "args": {"name": process}}
        for process, pid in pids.items()
    ]
    names += [
        {
            "name": "thread_name",
            "ph": "M",
            "pid": pids[process],
            "tid": tid,
            "args": {"name": track},
        }
        for (process, track), tid in tids.items()
    ]
    return {"traceEvents": names + events, "displayTimeUnit": "ms"}


def write_chrome_trace(spans: Iterable[Span], path: str | Path) -> Path:
    """Write the timeline to ``path`` (parent folders created); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(chrome_trace(spans)))
    return path
