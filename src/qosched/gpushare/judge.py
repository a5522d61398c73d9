"""Judging policies by goals: which apps met theirs, and the rules qosched's policy must keep.

Called by ``gpu sim``/``gpu run`` (per app: goal, measured, met), by the what-if of ``fggr``, by
the benches and by the tests, on comparisons of each app shared against itself alone
(``simulator.compare``). Pure judgement: running a mix under every registered policy is
``gpushare.mixes``, above the policies (which judge their own what-ifs with this module).

The rules, for one mix run under every registered policy (:func:`rule_violations`):

- **(a)** the *protected* apps (those with a goal that is not best effort) meet their goals
  under the judged policy wherever any policy meets them, in priority order: the goals of the
  most important level first, then of the next one with them, as far as some policy meets
  all of them together;
- **(b)** under that, every other app gets at least the throughput it gets under the best
  policy that also meets those goals (within ``tolerance``);
- **(c)** where ``naive`` meets every goal, the judged policy also does, and no app gets less
  throughput than under ``naive`` (within ``tolerance``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from qosched.core.goals import Goal, Measured, goal_met, measured_value
from qosched.gpushare.simulator import AppComparison

#: Throughput within this share of the reference counts as "at least as much" in (b) and (c).
TOLERANCE = 0.05


@dataclass(frozen=True)
class AppOutcome:
    """One app under one policy: its goal, what was measured, and whether the goal was met."""

    name: str
    priority: int
    goal: Goal
    measured: Measured
    met: bool

    @property
    def value(self) -> float:
        """The measured quantity the goal is about (NaN for best effort)."""
        return measured_value(self.goal, self.measured)

    def describe_value(self) -> str:
        value, kind = self.value, self.goal.kind
        if math.isnan(value):
            return f"tput {self.measured.throughput_ratio:.3f}x" if kind == "best_effort" else "-"
        at_least = ">= " if self.measured.p99_lower_bound else ""
        if kind == "p99_slowdown":
            return f"{at_least}{value:.3f}x"
        if kind == "p99_latency":
            return f"{at_least}{value * 1e3:.3f} ms"
        if kind == "throughput_share":
            return f"{value:.1%}"
        return f"{value:.1f}/s"


def outcomes(rows: Sequence[AppComparison], goals: Mapping[str, Goal]) -> tuple[AppOutcome, ...]:
    """Each row judged against its app's goal."""
    result = []
    for row in rows:
        measured = Measured(
            p99_latency_ratio=row.p99_latency_ratio,
            p99_latency_s=row.p99_latency_s,
            throughput_ratio=row.throughput_ratio,
            throughput_rps=row.throughput_rps,
            p99_lower_bound=row.p99_lower_bound,
        )
        goal = goals[row.name]
        result.append(AppOutcome(row.name, row.priority, goal, measured, goal_met(goal, measured)))
    return tuple(result)


def all_met(apps: Sequence[AppOutcome]) -> bool:
    return all(a.met for a in apps)


def protected_met(apps: Sequence[AppOutcome]) -> bool:
    """Whether every app with a goal (not best effort) met it."""
    return all(a.met for a in apps if a.goal.protected)


def _throughput(apps: Sequence[AppOutcome], name: str) -> float:
    value = next(a.measured.throughput_ratio for a in apps if a.name == name)
    return 0.0 if math.isnan(value) else value


def required_goals(by_policy: Mapping[str, Sequence[AppOutcome]]) -> tuple[str, ...]:
    """The protected apps whose goals the judged policy must meet: most important first, the
    goals of every priority level that some policy meets together with all the levels above."""
    some = next(iter(by_policy.values()))
    levels = sorted({a.priority for a in some if a.goal.protected}, reverse=True)
    required: tuple[str, ...] = ()
    for level in levels:
        names = tuple(a.name for a in some if a.goal.protected and a.priority >= level)
        if not any(all(a.met for a in apps if a.name in names) for apps in by_policy.values()):
            break
        required = names
    return required


def rule_violations(
    by_policy: Mapping[str, Sequence[AppOutcome]],
    policy: str = "fggr",
    *,
    tolerance: float = TOLERANCE,
) -> list[str]:
    """The rules (a)-(c) that ``policy`` breaks on one mix, each as a sentence (empty: none).
    ``by_policy`` holds every registered policy's outcomes on the mix, ``policy`` among them.

    (a) and (b) read goals in priority order: the goals ``policy`` must meet are those of the
    most important levels that some policy meets together (:func:`required_goals`), and the
    throughput of every other app is compared with the policies that meet those."""
    mine = by_policy[policy]
    broken = []
    required = required_goals(by_policy)
    meeting = [
        name for name, apps in by_policy.items() if all(a.met for a in apps if a.name in required)
    ]
    if not required and any(a.goal.protected for a in mine):
        pass  # no policy meets the most important goal: nothing to hold the others to
    elif policy not in meeting:
        missed = [a.name for a in mine if a.name in required and not a.met]
        others = [name for name in meeting if name != policy]
        broken.append(f"(a) {policy} misses the goals of {', '.join(missed)}, which "
                      f"{', '.join(others)} meet")  # fmt: skip
    else:
        for app in mine:
            if app.name in required:
                continue
            best_name = max(meeting, key=lambda n: _throughput(by_policy[n], app.name))
            best = _throughput(by_policy[best_name], app.name)
            got = _throughput(mine, app.name)
            if got < best * (1 - tolerance):
                broken.append(
                    f"(b) {app.name} gets throughput {got:.3f}x under {policy}, "
                    f"{best:.3f}x under {best_name}, which also meets the goals"
                )
    naive = by_policy.get("naive")
    if naive is not None and all_met(naive) and policy != "naive":
        if not all_met(mine):
            missed = [a.name for a in mine if not a.met]
            broken.append(f"(c) naive meets every goal, {policy} misses {', '.join(missed)}")
        for app in mine:
            got, base = _throughput(mine, app.name), _throughput(naive, app.name)
            if got < base * (1 - tolerance):
                broken.append(f"(c) {app.name} gets throughput {got:.3f}x under {policy}, "
                              f"{base:.3f}x under naive, which meets every goal")  # fmt: skip
    return broken
