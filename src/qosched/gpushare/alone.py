"""Kernel times alone, measured in the run itself.

A policy is told each kernel's time as estimated without running the model, and the estimate is
off by some share (docs/results/gpushare.md, "When the estimates are off"). A kernel that had the
GPU to itself from its start to its end took its time alone, which is what the estimate stood
for: :class:`AloneTimes` watches the launches a policy sees and starts, and keeps those times.

It needs only what a policy sees at each decision: the kernels running, each with its start,
and the kernels it starts. A backend asks the policy at every kernel start and end, so a launch
that has left the running set has ended now, and two kernels that overlapped were both seen
running at some decision, or one was started while the other ran.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from qosched.gpushare.policy import GpuView, Launch

#: Times alone kept per kernel (the most recent): the median of these is its time.
KEPT = 16


def _key(launch: Launch) -> tuple[str, int, int]:
    return (launch.app, launch.request, launch.index)


class AloneTimes:
    """Times alone of each app's kernels (by index in the request), measured as they run."""

    def __init__(self) -> None:
        # Launches running: (start, alone so far), by (app, request, index).
        self._live: dict[tuple[str, int, int], list] = {}
        self._times: dict[tuple[str, int], list[float]] = {}
        self._median: dict[tuple[str, int], float] = {}  # of each ``_times`` list

    def observe(self, view: GpuView) -> None:
        """At a decision, before anything starts: launches gone from the running set ended now."""
        running = {_key(r.launch): r for r in view.running}
        for key in [k for k in self._live if k not in running]:
            started_s, alone = self._live.pop(key)
            if alone and view.now_s > started_s:
                kernel = (key[0], key[2])
                kept = self._times.setdefault(kernel, [])
                kept.append(view.now_s - started_s)
                del kept[:-KEPT]
                self._median[kernel] = statistics.median(kept)
        crowded = len(running) > 1
        for key, run in running.items():
            entry = self._live.get(key)
            if entry is None:  # started before this watch began: its start is all we know
                self._live[key] = [run.started_s, False]
            elif crowded:
                entry[1] = False

    def started(self, view: GpuView, launches: Iterable[Launch]) -> None:
        """The policy starts ``launches`` now, beside those running in ``view``."""
        launches = list(launches)
        if not launches:
            return
        crowded = len(view.running) + len(launches) > 1
        if crowded:
            for run in view.running:
                entry = self._live.get(_key(run.launch))
                if entry is not None:
                    entry[1] = False
        for launch in launches:
            self._live[_key(launch)] = [view.now_s, not crowded]

    def time_s(self, app: str, index: int) -> float | None:
        """The kernel's time alone, as measured (the median of the last few); None before it
        has once run alone."""
        return self._median.get((app, index))
