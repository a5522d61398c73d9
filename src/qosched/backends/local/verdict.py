"""What submitting a job would do now, and why: the answer of ``qosched submit --dry-run``
(``POST /jobs/dry-run``) and what a declined job's error says. Made by
``qosched.backends.local.judge``; kept apart so that clients read it without policy code.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from qosched.cluster.admission import DEADLINE_PRECISION, DEADLINE_STEP_S, Admission
from qosched.core.errors import InputError

#: The start of a declined job's error; the reason and the earliest deadline follow.
DECLINED = "its deadline cannot be guaranteed and its spec does not allow best effort"
PRECISION_TEXT = f"to within {DEADLINE_STEP_S} s or {DEADLINE_PRECISION:.0%}, whichever is larger"


@dataclass(frozen=True)
class Verdict:
    """What the policy does with a job now: its ``outcome`` (``PROFILING``: nothing yet, its
    speed is measured first), why (``reason``, None when it is guaranteed), and, when its
    deadline is not guaranteed, the earliest deadline that would be (Unix seconds, and seconds
    from now), or None when no deadline would (``reason`` says why)."""

    outcome: Admission | str  # an Admission, or PROFILING
    reason: str | None = None
    earliest_deadline_at: float | None = None
    earliest_deadline_in_s: float | None = None

    #: The outcome of a job whose speed is not known: it is measured first, then judged
    #: (``qosched.backends.local.profiling``).
    PROFILING: ClassVar[str] = "profiling"

    def message(self) -> str:
        """One line for people: the outcome (for a decline, why it is one) and `detail`."""
        text = DECLINED if self.outcome is Admission.DECLINED else str(self.outcome)
        detail = self.detail()
        return f"{text}: {detail}" if detail else text

    def detail(self) -> str:
        """Why, and the deadline that would be guaranteed ("" for a guarantee)."""
        parts = [self.reason] if self.reason else []
        if self.earliest_deadline_at is not None and self.earliest_deadline_in_s is not None:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.earliest_deadline_at))
            parts.append(
                f"the earliest deadline that can be guaranteed now is "
                f"{self.earliest_deadline_in_s:.0f}s from now ({when}; {PRECISION_TEXT})"
            )
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": str(self.outcome),
            "reason": self.reason,
            "earliest_deadline_at": self.earliest_deadline_at,
            "earliest_deadline_in_s": self.earliest_deadline_in_s,
        }

    @classmethod
    def from_json(cls, data: Any, source: str = "a verdict") -> Verdict:
        """Read back ``to_json``'s object; ``InputError`` naming the field that is not one."""
        if not isinstance(data, dict):
            raise InputError("expected an object", source=source)
        outcome: Admission | str
        if data.get("outcome") == cls.PROFILING:
            outcome = cls.PROFILING
        else:
            try:
                outcome = Admission(data.get("outcome"))
            except ValueError:
                known = [*(a.value for a in Admission), cls.PROFILING]
                raise InputError(
                    f"not one of {', '.join(known)}", source=source, field="outcome"
                ) from None
        reason = data.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise InputError("expected text or null", source=source, field="reason")
        times = []
        for key in ("earliest_deadline_at", "earliest_deadline_in_s"):
            value = data.get(key)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
            ):
                raise InputError("expected a finite number or null", source=source, field=key)
            times.append(None if value is None else float(value))
        return cls(outcome, reason, times[0], times[1])
