"""What a workload asks for: a latency goal, a throughput goal, or nothing; one vocabulary for
the GPU level's apps (``gpushare``) and the cluster's services (``cluster.pods``), which is why it
lives below both.

An app's ``goal`` in the apps spec (``gpushare.apps``) is one of

- ``{p99_slowdown: 1.10}``: its p99 latency at most 1.10 x its p99 alone (same arrivals);
- ``{p99_latency_ms: 5}``: its p99 latency at most 5 ms (as ``latency_goal_ms`` of tenants);
- ``{throughput_share: 0.5}``: at least half of the throughput it gets alone;
- ``{throughput_rps: 100}``: at least 100 requests per second;
- ``best_effort``: whatever is left.

``priority`` orders the goals: when not all can be met, a more important app's goal is
protected first. Without a ``goal`` the most important app of the spec gets
:data:`DEFAULT_TOP_GOAL` and the others are best effort, which is what a spec meant before
goals existed. Policies read goals through ``SharingPolicy.setup``; :func:`goal_met` judges a
measured outcome against one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from qosched.core.bounds import COUNT_LIMIT, check_number, show_value
from qosched.core.errors import InputError

GoalKind = Literal[
    "p99_slowdown", "p99_latency", "throughput_share", "throughput_rps", "best_effort"
]
#: Every goal kind but ``best_effort``, with the unit its ``value`` is in.
UNITS = {
    "p99_slowdown": "x alone",
    "p99_latency": "s",
    "throughput_share": "of alone",
    "throughput_rps": "requests/s",
}
#: The goal keys as every spec and trace writes them (``gpu sim``'s apps, the cluster's services),
#: one vocabulary across the levels: key -> (the Goal kind, the factor from the key's unit to
#: the Goal's, lower bound, upper bound, whether the lower bound itself is allowed).
GOAL_KEYS: dict[str, tuple[GoalKind, float, float, float, bool]] = {
    "p99_slowdown": ("p99_slowdown", 1.0, 1.0, 1e6, True),
    "p99_latency_ms": ("p99_latency", 1e-3, 0.0, 1e9, False),  # up to about 11.6 days
    "throughput_share": ("throughput_share", 1.0, 0.0, 1.0, False),
    "throughput_rps": ("throughput_rps", 1.0, 0.0, float(COUNT_LIMIT - 1), False),
}
#: The quantile a latency goal is about.
LATENCY_QUANTILE = 0.99
#: Ratios and shares are judged with this much slack, so that a ratio printed as 1.100 against
#: a goal of 1.10 is met (the simulator's arithmetic is exact only to rounding).
TOLERANCE = 1e-9


@dataclass(frozen=True)
class Goal:
    """One app's QoS goal. ``value`` is the ratio (``p99_slowdown``, at least 1), the seconds
    (``p99_latency``), the share in (0, 1] (``throughput_share``), the requests per second
    (``throughput_rps``), or 0 for ``best_effort``."""

    kind: GoalKind
    value: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in (*UNITS, "best_effort"):
            raise InputError(f"unknown goal kind {self.kind!r}", field="goal")
        value = self.value
        if not math.isfinite(value):
            raise InputError(f"goal {self.kind}: value must be finite, got {value!r}", field="goal")
        if self.kind == "best_effort" and value != 0:
            raise InputError("a best-effort goal has no value", field="goal")
        if self.kind == "p99_slowdown" and value < 1:
            raise InputError(f"p99_slowdown must be >= 1, got {value!r}", field="goal")
        if self.kind == "throughput_share" and not 0 < value <= 1:
            raise InputError(f"throughput_share must be in (0, 1], got {value!r}", field="goal")
        if self.kind in ("p99_latency", "throughput_rps") and not value > 0:
            raise InputError(f"{self.kind} must be > 0, got {value!r}", field="goal")

    @property
    def protected(self) -> bool:
        """Whether the goal asks for anything (policies protect these apps)."""
        return self.kind != "best_effort"

    @property
    def is_latency(self) -> bool:
        return self.kind in ("p99_slowdown", "p99_latency")

    def describe(self) -> str:
        """Short text for tables: ``p99 <= 1.10x``, ``p99 <= 5 ms``, ``>= 50% tput``..."""
        if self.kind == "p99_slowdown":
            return f"p99 <= {self.value:.2f}x"
        if self.kind == "p99_latency":
            return f"p99 <= {self.value * 1e3:g} ms"
        if self.kind == "throughput_share":
            return f"tput >= {self.value:.0%}"
        if self.kind == "throughput_rps":
            return f"tput >= {self.value:g}/s"
        return "best effort"

    def to_dict(self) -> dict[str, object]:
        """The JSON form (``--json``'s per-app ``goal``): kind and value (None when best effort)."""
        return {"kind": self.kind, "value": None if self.kind == "best_effort" else self.value}


def goal_from_key(
    key: str,
    amount: object,
    *,
    field: str,
    source: str | Path | None = None,
    line: int | None = None,
) -> Goal:
    """The goal a spec or trace states as ``key: amount`` (``p99_latency_ms: 5``), the amount
    checked against the key's bounds; an unknown key or a number out of bounds is an InputError
    naming ``field``."""
    if key not in GOAL_KEYS:
        raise InputError(
            f"unknown goal {show_value(key)}; expected one of {', '.join(GOAL_KEYS)} or "
            "best_effort",
            source=source,
            line=line,
            field=field,
        )
    kind, scale, low, high, low_ok = GOAL_KEYS[key]
    value = check_number(amount, field=field, minimum=low, maximum=high, source=source, line=line)
    if value == low and not low_ok:
        raise InputError(
            f"expected a number > {low:g}, got {show_value(amount)}",
            source=source,
            line=line,
            field=field,
        )
    return Goal(kind, value * scale)


def slowdown_allowed(goal: Goal, request_s: float, rate_rps: float | None = None) -> float:
    """The largest slowdown ``goal`` allows a workload whose request (or step) takes
    ``request_s`` alone, arriving at ``rate_rps`` (None: a step loop, back to back); inf for best
    effort. A p99 latency goal is read against the request time alone (the p99 alone is at
    least that), a throughput goal against the rate (a step loop's: one step per request
    time)."""
    if not goal.protected:
        return math.inf
    if goal.kind == "p99_slowdown":
        return goal.value
    if goal.kind == "p99_latency":
        return goal.value / request_s
    if goal.kind == "throughput_share":
        return 1.0 / goal.value
    rps = rate_rps if rate_rps is not None else 1.0 / request_s
    return rps / goal.value  # throughput_rps


BEST_EFFORT = Goal("best_effort")
#: The goal of the most important app when the spec gives none.
DEFAULT_TOP_GOAL = Goal("p99_slowdown", 1.10)


def default_goal(priority: int, top_priority: int) -> Goal:
    """The goal of an app that states none: p99 within 1.10x for the most important level,
    best effort below it."""
    return DEFAULT_TOP_GOAL if priority == top_priority else BEST_EFFORT


@dataclass(frozen=True)
class Measured:
    """What a run measured for one app, in the units goals are stated in (NaN when the app
    completed no request)."""

    p99_latency_ratio: float
    p99_latency_s: float
    throughput_ratio: float
    throughput_rps: float
    p99_lower_bound: bool = False  # requests cut off at the run's end reach into the p99


def measured_value(goal: Goal, measured: Measured) -> float:
    """The measured quantity a goal is about (NaN for best effort)."""
    return {
        "p99_slowdown": measured.p99_latency_ratio,
        "p99_latency": measured.p99_latency_s,
        "throughput_share": measured.throughput_ratio,
        "throughput_rps": measured.throughput_rps,
    }.get(goal.kind, math.nan)


def shortfall(goal: Goal, measured: Measured) -> float:
    """How far ``measured`` is from ``goal``, as a ratio: at most 1 where the goal is met (a
    latency over its goal, a goal throughput over the one measured), ``inf`` where nothing
    was measured; 0 for best effort."""
    if not goal.protected:
        return 0.0
    value = measured_value(goal, measured)
    if math.isnan(value) or value <= 0:
        return math.inf
    return value / goal.value if goal.is_latency else goal.value / value


def goal_met(goal: Goal, measured: Measured, margin: float = 0.0) -> bool:
    """Whether ``measured`` meets ``goal``; best effort is always met, a goal on a quantity
    that could not be measured (no request finished) is not. With a ``margin`` (a share, for a
    prediction that must leave room for its own error) a latency must stay ``margin`` below
    the goal and a throughput ``margin`` above it (a throughput share at most at 1, alone)."""
    if not goal.protected:
        return True
    value = measured_value(goal, measured)
    if math.isnan(value) or (goal.is_latency and measured.p99_lower_bound):
        return False
    if goal.is_latency:
        return value * (1 + margin) <= goal.value * (1 + TOLERANCE)
    wanted = goal.value * (1 + margin)
    if goal.kind == "throughput_share":
        wanted = min(wanted, 1.0)
    return value >= wanted * (1 - TOLERANCE)
