"""The column of :mod:`qosched.cli.progress` that says how much is done, in a module of its own
because it subclasses a ``rich`` class, which only a shown display imports."""

from __future__ import annotations

from rich.progress import ProgressColumn, Task
from rich.text import Text


class Amount(ProgressColumn):
    """ "done/total unit" for a task given a ``unit`` field, a percentage for other tasks with a
    total, nothing for a phase of unknown length."""

    def render(self, task: Task) -> Text:
        if task.total is None:
            return Text("")
        unit = task.fields.get("unit")
        if unit:
            return Text(
                f"{int(task.completed)}/{int(task.total)} {unit}", style="progress.download"
            )
        return Text(f"{task.percentage:3.0f}%", style="progress.percentage")
