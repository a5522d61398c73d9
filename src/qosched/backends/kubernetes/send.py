"""A round's independent writes, sent with bounded concurrency.

A round that binds thousands of pods waits mostly on the API server: each request's answer
takes milliseconds, and sent one after another they add up to tens of seconds. :meth:`Sender.each`
runs a batch of calls (one job's admission patch, one pod's binding, one Event) on up to
``in_flight`` threads and returns their outcomes in the batch's order, for the round's thread to
act on one by one, as it would have on the answers sent in turn.

Concurrency changes nothing about the fence: every write still passes the Lease's check in
:func:`~.lease.fenced_client`, in the thread that sends it, just before it leaves. Once a call
raises the ``stop`` error (:class:`~.lease.NotLeading`), the calls of the batch not yet started
are not run; their outcome is that error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

#: Writes a round keeps in flight by default: enough to hide the API server's latency.
IN_FLIGHT = 16
#: The most writes one replica keeps in flight: beyond this, the API server's own limits (its
#: max-requests-inflight, 400 by default, shared by every client) are the bottleneck.
MAX_IN_FLIGHT = 256


@dataclass(frozen=True, slots=True)
class CallOutcome(Generic[T]):
    """What one call returned, or the error it raised."""

    value: T | None = None
    error: BaseException | None = None

    def result(self) -> T:
        """The call's value; its error raised again, in the caller's thread."""
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


class Sender:
    """Runs batches of calls, ``in_flight`` at a time (1: in the caller's thread, in order)."""

    def __init__(self, in_flight: int, *, stop: type[BaseException] = Exception) -> None:
        if not 1 <= in_flight <= MAX_IN_FLIGHT:
            raise ValueError(f"in_flight must be in [1, {MAX_IN_FLIGHT}], got {in_flight}")
        self.in_flight = in_flight
        self.stop = stop
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def each(self, calls: Sequence[Callable[[], T]]) -> list[CallOutcome[T]]:
        """Run every call (none after one raised ``stop``); their outcomes in ``calls``' order."""
        if self.in_flight == 1 or len(calls) <= 1:
            return self._inline(calls)
        halted = threading.Event()

        def run(call: Callable[[], T]) -> T:
            if halted.is_set():
                raise _Halted
            try:
                return call()
            except self.stop:
                halted.set()
                raise

        futures = [self._executor().submit(run, call) for call in calls]
        outcomes = [_outcome(f) for f in futures]
        stopped = next((o.error for o in outcomes if isinstance(o.error, self.stop)), None)
        return [CallOutcome(error=stopped) if isinstance(o.error, _Halted) else o for o in outcomes]

    def _inline(self, calls: Sequence[Callable[[], T]]) -> list[CallOutcome[T]]:
        outcomes: list[CallOutcome[T]] = []
        for call in calls:
            try:
                outcomes.append(CallOutcome(call()))
            except self.stop as exc:
                outcomes += [CallOutcome(error=exc)] * (len(calls) - len(outcomes))
                break
            except Exception as exc:
                outcomes.append(CallOutcome(error=exc))
        return outcomes

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.in_flight, thread_name_prefix="qosched-send")
            return self._pool

    def close(self) -> None:
        """Let the threads end (after the batch in course); a later batch starts new ones."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)


class _Halted(Exception):
    """A call not started because an earlier one raised ``stop``."""


def _outcome(future: Future) -> CallOutcome:
    error = future.exception()
    return CallOutcome(error=error) if error is not None else CallOutcome(future.result())
