"""The goals of apps sharing a GPU: the vocabulary lives in :mod:`qosched.core.goals`, below the
GPU and cluster levels that both state goals in it; this module keeps its names importable here."""

from qosched.core.goals import (
    BEST_EFFORT,
    DEFAULT_TOP_GOAL,
    GOAL_KEYS,
    LATENCY_QUANTILE,
    TOLERANCE,
    UNITS,
    Goal,
    GoalKind,
    Measured,
    default_goal,
    goal_from_key,
    goal_met,
    measured_value,
    shortfall,
    slowdown_allowed,
)

__all__ = [
    "BEST_EFFORT",
    "DEFAULT_TOP_GOAL",
    "GOAL_KEYS",
    "LATENCY_QUANTILE",
    "TOLERANCE",
    "UNITS",
    "Goal",
    "GoalKind",
    "Measured",
    "default_goal",
    "goal_from_key",
    "goal_met",
    "measured_value",
    "shortfall",
    "slowdown_allowed",
]
