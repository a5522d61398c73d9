"""Why the local service decided what it did, in words with the numbers behind them: the
``why`` field of the events it records (``admitted``, ``promise``, ``allocation``, ``launched``,
``stopped``, ``profiling``, a ``state`` event into ``declined``).

Pure functions of the numbers the service passes in, so each sentence can be checked by hand;
the page and ``qosched status JOB`` show ``why`` as it is. Times are Unix seconds; ``kind``
names the workers of the job's pool ("core" or "GPU").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: A job's promise in the words its row and its events both use (`promise`).
GUARANTEED = "guaranteed"
BEST_EFFORT = "best effort"
NO_PROMISE = "no promise"


def promise(guaranteed: bool, best_effort: bool) -> str:
    """The one promise a job has, from its row's two facts: its deadline is guaranteed, or it
    runs without a guarantee as its spec allows (best effort), or neither (a policy that
    promises nothing runs it all the same)."""
    if guaranteed:
        return GUARANTEED
    return BEST_EFFORT if best_effort else NO_PROMISE


@dataclass(frozen=True, slots=True)
class Finish:
    """A predicted finish: expected at ``at``, between ``early`` and ``late``."""

    at: float
    early: float
    late: float


def workers(count: int, kind: str) -> str:
    """``1 core``, ``2 cores``, ``0 GPUs``."""
    return f"{count} {kind}{'' if count == 1 else 's'}"


def seconds(value: float) -> str:
    """Whole seconds: ``42 s``."""
    return f"{max(0.0, value):.0f} s"


def finish(predicted: Finish | None, deadline_at: float, now: float) -> str:
    """``predicted to finish in 40 s (36-45 s), 80 s before its deadline (in 120 s)`` (no
    band where the prediction has none); where nothing is predicted, the deadline alone
    (``its deadline is in 120 s``)."""
    if predicted is None:
        return f"its deadline is in {seconds(deadline_at - now)}"
    deadline = f"its deadline (in {seconds(deadline_at - now)})"
    early, late = (f"{max(0.0, t - now):.0f}" for t in (predicted.early, predicted.late))
    band = f" ({early}-{late} s)" if early != late else ""  # none without a band to say
    slack = deadline_at - predicted.at
    side = "before" if slack >= 0 else "after"
    return (
        f"predicted to finish in {seconds(predicted.at - now)}{band}, "
        f"{seconds(abs(slack))} {side} {deadline}"
    )


def admitted(
    promised: str,
    *,
    policy: str,
    reason: str | None,
    count: int,
    kind: str,
    predicted: Finish | None,
    deadline_at: float,
    now: float,
    speed: str,
    asked: bool = True,
) -> str:
    """Why a job was admitted with the promise ``promised``: by which policy, ``reason`` (why
    it runs without a guarantee, if it does), on how many workers it would start now (as its
    policy said, ``asked``, else its fastest count on the free workers) and when it would
    finish there, and where its speed comes from."""
    head = {
        GUARANTEED: f"{policy} guarantees its deadline",
        BEST_EFFORT: f"{policy} runs it best effort",
        NO_PROMISE: f"{policy} runs it without a promise",
    }[promised]
    if reason:
        head += f": {reason}"
    if count and not asked:
        where = (
            f"alone on the free {kind}s it is fastest on {workers(count, kind)}, "
            f"{finish(predicted, deadline_at, now)}"
        )
    elif count:
        where = f"it would start on {workers(count, kind)}, {finish(predicted, deadline_at, now)}"
    else:
        where = f"it waits, no {kind} is free for it now; {finish(None, deadline_at, now)}"
    return f"{head}; {where}; speed: {speed}"


def promise_changed(
    promised: str, *, policy: str, predicted: Finish | None, deadline_at: float, now: float
) -> str:
    """Why a running or waiting job's promise changed at a decision."""
    if promised == GUARANTEED:
        head = f"{policy} now guarantees its deadline: a plan meets it on its predicted speed"
    else:
        runs = "best effort" if promised == BEST_EFFORT else "without a promise"
        head = (
            f"{policy} no longer guarantees its deadline: no plan meets it on its predicted "
            f"speed with its safety margin any more, so it runs {runs}"
        )
    return f"{head}; {finish(predicted, deadline_at, now)}"


def context(arrived: Sequence[str], ended: Sequence[str], periodic: bool) -> str:
    """What changed since the pool's last decision: jobs that arrived and jobs that ended
    (finished, failed, cancelled or stopping), or, with neither, that the policy re-planned on
    its own (``periodic``: the clock asked, as a policy re-reads speeds); "" when nothing is
    known."""
    parts = []
    if arrived:
        parts.append(f"{_names(arrived)} arrived")
    if ended:
        parts.append(f"{_names(ended)} ended")
    if parts:
        return "after " + " and ".join(parts)
    return "at a periodic re-plan, nothing having arrived or ended" if periodic else ""


def _names(ids: Sequence[str]) -> str:
    shown = ", ".join(sorted(ids)[:3])
    return shown + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")


def cause(policy_reason: str | None, old: int, new: int, happened: str) -> str:
    """Why the count changed: the policy's own words, or, from a policy that gives none, what
    changed; then what happened since the last decision."""
    if policy_reason:
        text = policy_reason
    elif new > old:
        text = "its policy gives it more" if old else "its policy starts it"
    else:
        text = "its policy gives it fewer" if new else "its policy gives it none"
    return f"{text}; {happened}" if happened else text


def resized(
    old: int,
    new: int,
    kind: str,
    why: str,
    *,
    before: Finish | None,
    after: Finish | None,
    deadline_at: float,
    now: float,
) -> str:
    """``from 2 cores to 1: WHY; predicted finish in 40 s -> in 60 s, deadline in 120 s``."""
    text = f"from {workers(old, kind)} to {new}: {why}"
    if before is not None and after is not None:
        text += (
            f"; predicted finish in {seconds(before.at - now)} -> in {seconds(after.at - now)}, "
            f"deadline in {seconds(deadline_at - now)}"
        )
    return text


def started(
    count: int,
    kind: str,
    why: str,
    *,
    restart: bool,
    predicted: Finish | None,
    deadline_at: float,
    now: float,
) -> str:
    """Why a runner starts: ``started on 2 cores: WHY; predicted to finish in ...``."""
    verb = "restarted" if restart else "started"
    return f"{verb} on {workers(count, kind)}: {why}; {finish(predicted, deadline_at, now)}"


def preempted(count: int, kind: str, why: str, *, restart_to: int | None = None) -> str:
    """Why a job gives up all its workers: pre-empted, or stopped to be re-sized by a restart
    (a GPU job, a torchrun job) to ``restart_to`` workers."""
    if restart_to:
        return f"stopped to restart on {workers(restart_to, kind)} (from {count}): {why}"
    return f"pre-empted, giving up its {workers(count, kind)}: {why}"


def profiling(policy: str, *, command: bool, gpu: bool, bound_s: float) -> str:
    """Why a job's speed is measured before it is judged."""
    missing = "a GPU job's" if gpu else "a command's" if command else "its"
    return (
        f"its speed on this machine is not known yet: {policy} promises deadlines, and nothing "
        f"gives {missing} speed here (no table, nothing remembered from an earlier job of the "
        f"same speed key); it is measured for at most {bound_s:.0f} s of running first"
    )


def measuring(count: int, kind: str, sizes: Sequence[int]) -> str:
    """Why a profiling job is re-sized: to measure its speed on its next size."""
    shown = ", ".join(str(size) for size in sizes)
    return f"measuring its speed on {workers(count, kind)} next (sizes to measure: {shown})"
