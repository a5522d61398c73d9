"""Which jobs ``qosched status`` lists and ``qosched cancel`` cancels: a ``JobFilter`` over the
service's job list, built from ``--state``, ``--name`` and ``--all``.

The filtering is the client's: the API's ``GET /jobs`` answers every job, and a list of a few
thousand is read in well under a second, so the service needs no query language of its own.
"""

from __future__ import annotations

import argparse
import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass

from qosched.backends.local.jobview import JobView
from qosched.backends.local.store import FINAL_STATES, Lifecycle
from qosched.core.spec_reader import format_duration

#: The states of a job that has not ended: what ``qosched status`` lists by default, and the
#: only states ``qosched cancel --state`` accepts.
ACTIVE_STATES = frozenset(state for state in Lifecycle if state not in FINAL_STATES)

#: ``qosched status`` also lists a job that ended this recently, so that a job seen running
#: a moment ago shows how it ended instead of vanishing from the list.
RECENTLY_ENDED_S = 300.0


def state_names(states: Iterable[Lifecycle] = Lifecycle) -> str:
    """``"queued, profiling, ..."``, in the lifecycle's order."""
    chosen = set(states)
    return ", ".join(state.value for state in Lifecycle if state in chosen)


def lifecycle(text: str) -> Lifecycle:
    """``--state``'s argument type: a state's name; a usage error naming the known ones."""
    try:
        return Lifecycle(text.strip().lower())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"unknown state {text!r}; known: {state_names()}"
        ) from None


def complete_states(prefix: str, **_: object) -> list[str]:
    """Shell completion of ``--state`` (an argcomplete completer: a plain callable)."""
    return [state.value for state in Lifecycle if state.value.startswith(prefix)]


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Jobs in one of ``states`` (None: any state) whose name matches the shell-style
    ``name`` pattern (None: any name), plus, with ``ended_within_s``, jobs of any state that
    ended at most that many seconds ago."""

    states: frozenset[Lifecycle] | None = None
    name: str | None = None
    ended_within_s: float | None = None

    @classmethod
    def of(
        cls, states: Iterable[Lifecycle] | None, name: str | None, every: bool = False
    ) -> JobFilter:
        """The filter of ``--state`` (repeatable), ``--name`` and ``--all``: without a state
        and without ``--all``, the active jobs and those ended in the last
        ``RECENTLY_ENDED_S``."""
        chosen = frozenset(states or ())
        if chosen:
            return cls(chosen, name)
        if every:
            return cls(None, name)
        return cls(ACTIVE_STATES, name, RECENTLY_ENDED_S)

    def __post_init__(self) -> None:
        if self.states is not None and not self.states:
            raise ValueError("a filter of no state would match no job; None means any state")

    def matches(self, job: JobView, now: float) -> bool:
        # fnmatchcase: the same pattern selects the same jobs on every system (fnmatch folds
        # case where the file system does); job names are lower-case DNS labels anyway.
        if self.name is not None and not fnmatch.fnmatchcase(job.name, self.name):
            return False
        if self.states is None or job.state in self.states:
            return True
        ended = job.finished_at
        return (
            self.ended_within_s is not None
            and job.finished
            and ended is not None
            and now - ended <= self.ended_within_s
        )

    def select(self, jobs: Iterable[JobView], now: float) -> list[JobView]:
        """The jobs that match, in the order given."""
        return [job for job in jobs if self.matches(job, now)]

    def describe(self) -> str:
        """The filter in words: ``state queued or running and a name matching 'cnn-*'``."""
        parts = []
        if self.states is not None:
            names = [state.value for state in Lifecycle if state in self.states]
            listed = ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]
            text = f"state {listed}"
            if self.ended_within_s is not None:
                text += f" (or an end in the last {format_duration(round(self.ended_within_s))})"
            parts.append(text)
        if self.name is not None:
            parts.append(f"a name matching {self.name!r}")
        return " and ".join(parts) or "any state"
