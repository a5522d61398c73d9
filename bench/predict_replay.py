"""Where the error of a running job's predicted remaining time comes from, replayed offline on
kept stores: the predictor ``qos`` keeps beside simpler rules, by bucket of work done, in one
run; then, from 25% done on, the ``qos`` predictor's error split by what happened around each
prediction.

    python bench/local_evidence.py workload --repeats 5 --keep runs/wl    # kept stores
    python bench/predict_replay.py runs/wl runs/ft3/repeat-1 runs/ft3/repeat-2

Each argument is a folder of stores (``POLICY-REPEAT.db`` as ``local_evidence.py --keep``
writes them, or a service home's ``state.db`` as ``local_first_time.py --keep`` keeps it).
The error is that of ``local_evidence.py``'s *remaining time on its cores*: the remaining time
predicted at a job's current cores against the time the job then took there (to its next
change of cores or the end of its work), ``|realised speed / predicted speed - 1|``.

Rules compared:

- ``qos``: the predictor ``qos`` keeps for the job (``OnlinePredictor`` with the service's
  ``recent_s``: its memory grows to 10% of the job's running time);
- ``since-change``: the job's mean speed since its cores last changed (or its run started);
- ``matched``: the job's mean speed over the last stretch of its run on these cores as long as
  the remaining time ``since-change`` predicts (at least 4 s): a prediction of the next R
  seconds from the last R.

Causes (the first that applies): ``re-sized``: within 15 s of the job's cores changing or its
run starting; ``neighbour``: another job of the store started or ended before the stretch
predicted ended (its speed on its own cores moves with it); ``end``: under 10 s of the stretch
left (a few reports decide it); ``steady``: none of these, so the speed itself moved.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # local_evidence, run as a script

from local_evidence import (
    BUCKETS,
    PredictionPoint,
    PredictorFactory,
    prediction_points,
    qos_predictor,
)
from qosched.backends.local.store import JobRecord, Store
from qosched.cluster.predict import Prediction, relative_error
from qosched.cluster.throughput import SpeedCurve

MIN_WINDOW_S = 4.0
RESIZED_S = 15.0
END_S = 10.0


class SinceChange:
    """The mean speed since the job's cores last changed (the prior's speed before that)."""

    def __init__(self, curve: SpeedCurve, record: JobRecord) -> None:
        self.curve = curve
        self.total = record.spec.iterations
        self.last_iterations: float | None = None
        self.run: list[tuple[float, float, int]] = []  # (time, iterations, workers)

    def observe(self, time_s: float, iterations_done: float, workers: int) -> None:
        if self.run and workers != self.run[-1][2]:
            self.run = self.run[-1:]  # the interval ending here ran on ``workers``
        self.run.append((time_s, iterations_done, workers))
        self.last_iterations = iterations_done

    def restart(self, time_s: float, iterations_done: float) -> None:
        self.run = [(time_s, iterations_done, self.run[-1][2] if self.run else 0)]
        self.last_iterations = iterations_done

    def predict(self, workers: int) -> Prediction:
        rate = self._speed_over(None) if workers == self._workers() else 0.0
        rate = rate or self.curve.rate(workers) or 1.0
        return Prediction(rate, rate, rate)

    def _workers(self) -> int | None:
        return self.run[-1][2] if len(self.run) > 1 else None

    def _speed_over(self, seconds: float | None) -> float:
        end_t, end_i, _ = self.run[-1]
        start = self.run[0]
        if seconds is not None:
            start = next((s for s in self.run if end_t - s[0] <= seconds), self.run[-2])
        elapsed = end_t - start[0]
        return (end_i - start[1]) / elapsed if elapsed > 0 else 0.0


class Matched(SinceChange):
    """The mean speed over the last stretch as long as the remaining time (see the module)."""

    def predict(self, workers: int) -> Prediction:
        mean = self._speed_over(None) if workers == self._workers() else 0.0
        if mean <= 0:
            return super().predict(workers)
        remaining_s = max(MIN_WINDOW_S, (self.total - (self.last_iterations or 0)) / mean)
        rate = self._speed_over(remaining_s) or mean
        return Prediction(rate, rate, rate)


RULES: dict[str, PredictorFactory] = {
    "qos": qos_predictor,
    "since-change": SinceChange,
    "matched": Matched,
}


def cause(point: PredictionPoint) -> str:
    if point.since_change_s < RESIZED_S:
        return "re-sized"
    if point.others_changed:
        return "neighbour"
    if point.stretch_s < END_S:
        return "end"
    return "steady"


def stores(folder: Path) -> list[Path]:
    found = sorted(folder.glob("*-*.db")) or sorted(folder.glob("state.db"))
    if not found:
        sys.exit(f"no kept stores (POLICY-REPEAT.db or state.db) in {folder}")
    return found


def points(folders: Iterable[Path], rule: PredictorFactory) -> list[PredictionPoint]:
    found = []
    for folder in folders:
        for path in stores(folder):
            with Store(path) as store:
                found.extend(prediction_points(store, rule))
    return found


def error(point: PredictionPoint) -> float:
    return relative_error(1.0 / point.predicted, 1.0 / point.realised_stretch)


def summary(errors: list[float]) -> str:
    if not errors:
        return "0 | - | - | -"
    errors = sorted(errors)
    p90 = errors[min(len(errors) - 1, int(0.9 * len(errors)))]
    within = sum(e <= 0.10 for e in errors) / len(errors)
    return f"{len(errors)} | {statistics.median(errors):.1%} | {p90:.1%} | {within:.0%}"


def by_bucket(found: dict[str, list[PredictionPoint]]) -> str:
    head = " | ".join(f"{rule}: samples | median | p90 | within 10%" for rule in found)
    lines = [f"| work done | {head} |", "|---|" + "---|" * 4 * len(found)]
    for bucket in BUCKETS:
        cells = [summary([error(p) for p in ps if p.bucket() == bucket]) for ps in found.values()]
        lines.append(f"| {bucket[0]:.0%}-{bucket[1]:.0%} | {' | '.join(cells)} |")
    return "\n".join(lines)


def by_cause(found: list[PredictionPoint], keep: Callable[[PredictionPoint], bool]) -> str:
    chosen = [p for p in found if keep(p)]
    off = sum(error(p) > 0.10 for p in chosen)
    lines = [
        "| cause | samples | median | p90 | within 10% | share of those off by > 10% |",
        "|---|---|---|---|---|---|",
    ]
    for name in ("re-sized", "neighbour", "end", "steady"):
        mine = [error(p) for p in chosen if cause(p) == name]
        share = sum(e > 0.10 for e in mine) / off if off else 0.0
        lines.append(f"| {name} | {summary(mine)} | {share:.0%} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", type=Path, nargs="+", metavar="DIR")
    args = parser.parse_args()
    found = {name: points(args.folders, rule) for name, rule in RULES.items()}
    print(f"# Remaining time on its cores, replayed on {', '.join(map(str, args.folders))}\n")
    print(by_bucket(found))
    print("\n# The `qos` predictor's error from 25% to 90% done, by what happened around it\n")
    print(by_cause(found["qos"], lambda p: 0.25 <= p.done < 0.90))


if __name__ == "__main__":
    main()
