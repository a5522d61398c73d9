"""How a long command shows how far it has got: one ``rich`` display on stderr, redrawn in
place and gone when the work ends, when stderr is a terminal; nothing at all otherwise (a log
or a pipe gets the result, not a line per redraw). ``sim cluster``, ``demo``, ``gpu sim``,
``gpu run`` and ``infer plan`` show their progress through it.

A command adds tasks and updates them as :class:`rich.progress.Progress` takes them; a task
that knows its ``total`` draws a bar (with ``unit``: "done/total unit", else a percentage), one
without a spinner beside its description (a phase of unknown length).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rich.console import Console


class Display(Protocol):
    """What a command calls: :class:`rich.progress.Progress`'s own methods, so that the real
    display needs no wrapper."""

    def add_task(self, description: str, total: float | None = None, **fields: Any) -> int: ...

    def update(self, task_id: int, **changes: Any) -> None: ...


class Silent:
    """The display when stderr is no terminal: takes every call, shows nothing."""

    def add_task(self, description: str, total: float | None = None, **fields: Any) -> int:
        return 0

    def update(self, task_id: int, **changes: Any) -> None:
        pass


def shown_on_terminal() -> bool:
    """Whether a progress display would be seen: stderr is a terminal."""
    return sys.stderr.isatty()


@contextmanager
def progress_display(
    enabled: bool | None = None, console: Console | None = None
) -> Iterator[Display]:
    """The display for a block of long work: rich's, on stderr (or ``console``), if
    ``enabled`` (by default: if stderr is a terminal), else :class:`Silent`."""
    if not (shown_on_terminal() if enabled is None else enabled):
        yield Silent()
        return
    # NOTE: rich's progress is imported only here: `sim cluster --json` piped shows no bar and
    # is timed against the peers' own simulators (bench/cluster_sim_speed.py).
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from qosched.cli.progress_columns import Amount

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        Amount(),
        TimeElapsedColumn(),
        console=console or Console(stderr=True),
        transient=True,
    ) as progress:
        yield progress
