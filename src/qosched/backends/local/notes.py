"""The ``note`` of the store events that say why a job's workers change, in words and numbers:
a runner's start (``start_note``), a re-size (``resize_note``), a decline (``verdict_note``),
and a predicted finish as an event's fields (``finish_fields``).

The words are ``reasons``'; the predicted finishes are the service's (``pools.predicted_finish``
on the job's policy), passed in, so nothing here asks a policy or writes the store."""

from __future__ import annotations

from typing import Any

from qosched.backends.local import reasons
from qosched.backends.local.livejob import LiveJob, worker_kind
from qosched.backends.local.verdict import Verdict


def start_note(
    live: LiveJob, count: int, attempt: int, now: float, predicted: reasons.Finish | None
) -> dict[str, Any]:
    """Why the job's runner starts on ``count`` workers (its ``attempt``-th start), with its
    ``predicted`` finish there; takes the round's reason off ``live`` (said once)."""
    why, live.change_why = live.change_why, None
    kind = worker_kind(live.spec)
    if live.profiling:
        why = f"lent {reasons.workers(count, kind)} no guarantee needs, to measure its speed"
    text = reasons.started(
        count,
        kind,
        why or reasons.cause(None, 0, count, ""),
        restart=attempt > 1,
        predicted=predicted,
        deadline_at=live.record.deadline_at,
        now=now,
    )
    return {"why": text, "workers": count, **finish_fields(predicted)}


def resize_note(
    live: LiveJob,
    old: int,
    new: int,
    now: float,
    before: reasons.Finish | None,
    after: reasons.Finish | None,
) -> dict[str, Any]:
    """Why the job goes from ``old`` to ``new`` workers, with its predicted finish on each
    (``before``, ``after``); takes the round's reason off ``live`` (said once)."""
    why, live.change_why = live.change_why, None
    text = reasons.resized(
        old,
        new,
        worker_kind(live.spec),
        why or reasons.cause(None, old, new, ""),
        before=before,
        after=after,
        deadline_at=live.record.deadline_at,
        now=now,
    )
    note: dict[str, Any] = {"why": text, "workers_from": old, "workers_to": new}
    note.update({f"{key}_before": v for key, v in finish_fields(before).items()})
    note.update({f"{key}_after": v for key, v in finish_fields(after).items()})
    return note


def finish_fields(predicted: reasons.Finish | None) -> dict[str, Any]:
    """A predicted finish as an event's numbers (none when nothing is predicted)."""
    if predicted is None:
        return {}
    return {
        "predicted_finish_at": predicted.at,
        "predicted_finish_band": [predicted.early, predicted.late],
    }


def verdict_note(verdict: Verdict) -> dict[str, Any]:
    """A decline's event fields: why in words, and the earliest deadline that would be
    guaranteed now (absent when none would)."""
    note: dict[str, Any] = {"why": verdict.message()}
    if verdict.earliest_deadline_at is not None:
        note["earliest_deadline_at"] = verdict.earliest_deadline_at
        note["earliest_deadline_in_s"] = verdict.earliest_deadline_in_s
    return note
