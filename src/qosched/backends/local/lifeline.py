"""Signs of life in a built-in workload's log: a line every few seconds with where the job is.

A command job prints what its own script prints; the built-in workloads print nothing of
their own, so without these lines ``qosched logs --follow`` would show nothing for the whole
run. One line looks like::

    qosched: iteration 480/2000 (24%), loss 1.8342, 23.7 it/s on 2 threads
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TextIO

#: Seconds between two lines.
EVERY_S = 5.0


class LifeLine:
    """Writes a progress line to ``out`` at most every ``every_s`` seconds of ``clock``; the
    speed is over the iterations since the previous line (or since the start)."""

    def __init__(
        self,
        total: int,
        out: TextIO,
        *,
        every_s: float = EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.out = out
        self.every_s = every_s
        self.clock = clock
        self._since: tuple[float, int] | None = None  # (time, iteration) of the last line

    def start(self, iteration: int, what: str) -> None:
        """The first line: what runs, from which iteration."""
        self._since = (self.clock(), iteration)
        resumed = f", resuming at iteration {iteration}" if iteration else ""
        self._write(f"qosched: {what}: {self.total} iterations{resumed}")

    def tick(self, iteration: int, loss: float | None, threads: int) -> None:
        """After each iteration: a line when ``every_s`` has passed since the last one."""
        now = self.clock()
        if self._since is None:
            self._since = (now, iteration)
            return
        then, done = self._since
        if now - then < self.every_s:
            return
        self._since = (now, iteration)
        self._write(self.line(iteration, loss, (iteration - done) / (now - then), threads))

    def line(self, iteration: int, loss: float | None, rate: float, threads: int) -> str:
        percent = 100 * iteration // self.total if self.total else 100
        shown = "n/a" if loss is None or not math.isfinite(loss) else f"{loss:.4f}"
        return (
            f"qosched: iteration {iteration}/{self.total} ({percent}%), loss {shown}, "
            f"{rate:.1f} it/s on {threads} thread{'s' if threads != 1 else ''}"
        )

    def _write(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()
