"""How far a speed measured for a few seconds is trusted (``speed_memory.CountTrust``), read
from kept service homes (``bench/local_first_time.py --keep DIR``): nothing runs here.

Two tables:

- **Calibration of ``SHORT_VARIANCE_S``**: for every job and worker count run at least
  ``MIN_REST_S`` beyond the longest ``D``, the log ratio of the speed of the count's first ``D``
  seconds to the speed over the rest of that job on it; per ``D``, its root mean square beside
  what the rule ``sqrt(SHORT_VARIANCE_S / D)`` states.
- **The promise on two cores**: for each home whose jobs are named as ``local_first_time``
  names them, what its ``earliest`` job was promised on the count it ran on (the 5% quantile of
  the speed ``first`` measured there), with the key's one spread and with that count's own
  trust, beside the speed ``earliest`` then sustained there.

    python bench/count_trust.py runs/ft3/repeat-1 runs/ft3/repeat-2
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sqlite3
import statistics
from pathlib import Path

from qosched.backends.local.speed_memory import (
    SHORT_VARIANCE_S,
    clamp_spread,
    drift_spread,
    intervals_by_count,
    measured_rates,
    measured_spread,
    measured_trust,
)
from qosched.cluster.predict import MEASURED_LOW_QUANTILE

DURATIONS_S = (4.0, 8.0, 15.0, 30.0)
#: A count's first seconds are compared with at least this much running after them.
MIN_REST_S = 20.0


def _samples(db: sqlite3.Connection, job_id: str) -> list[tuple[float, int, int]]:
    return db.execute(
        "SELECT t, iteration, cpus FROM progress WHERE job_id = ? ORDER BY seq", (job_id,)
    ).fetchall()


def first_against_rest(samples) -> dict[tuple[int, float], float]:
    """Per (count, D): log(speed of the count's first D seconds / speed of the rest there)."""
    ratios = {}
    for workers, spans in intervals_by_count(samples).items():
        if sum(elapsed for elapsed, _ in spans) < max(DURATIONS_S) + MIN_REST_S:
            continue
        for duration in DURATIONS_S:
            spent = done = 0.0
            index = 0
            while index < len(spans) and spent < duration:
                spent, done = spent + spans[index][0], done + spans[index][1]
                index += 1
            rest_s = sum(elapsed for elapsed, _ in spans[index:])
            rest = sum(work for _, work in spans[index:])
            if done > 0 and rest > 0:
                ratios[workers, duration] = math.log((done / spent) / (rest / rest_s))
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("homes", type=Path, nargs="+", metavar="HOME")
    args = parser.parse_args()
    by_duration: dict[float, list[float]] = {d: [] for d in DURATIONS_S}
    promises = []
    for home in args.homes:
        uri = f"file:{home / 'state.db'}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
            jobs = dict(db.execute("SELECT name, id FROM jobs ORDER BY seq").fetchall())
            for job_id in jobs.values():
                for (_, duration), ratio in first_against_rest(_samples(db, job_id)).items():
                    by_duration[duration].append(ratio)
            if {"first", "again", "earliest"} <= set(jobs):
                promises.append(
                    (home, *(_samples(db, jobs[n]) for n in ("first", "again", "earliest")))
                )

    print(
        f"# A count's first D seconds against the rest of the job on it ({len(args.homes)} homes)\n"
    )
    print("| D s | job-counts | rms of log ratio | sqrt(SHORT_VARIANCE_S / D) |")
    print("|---|---|---|---|")
    for duration, ratios in by_duration.items():
        if ratios:
            rms = math.sqrt(statistics.fmean(r * r for r in ratios))
            rule = math.sqrt(SHORT_VARIANCE_S / duration)
            print(f"| {duration:g} | {len(ratios)} | {rms:.3f} | {rule:.3f} |")

    z = -statistics.NormalDist().inv_cdf(MEASURED_LOW_QUANTILE)
    print("\n# What `earliest` was promised on its count, from what `first` measured there\n")
    print(
        "| home | count | measured it/s (s) | one spread: promised "
        "| per count: sigma, promised | sustained |"
    )
    print("|---|---|---|---|---|---|")
    for home, first, again, earliest in promises:
        measured, trust = measured_rates(first), measured_trust(first)
        sustained = measured_rates(earliest)
        # What the store held when `earliest` was judged: `again`'s spread, or its drift.
        key_spread = clamp_spread(
            max(measured_spread(again) or 0.0, drift_spread(measured, measured_rates(again)))
        )
        for workers, rate in sustained.items():
            if workers not in measured or workers not in trust:
                continue
            sigma = trust[workers].sigma(key_spread)
            print(
                f"| {home} | {workers} | {measured[workers]:.2f} ({trust[workers].seconds:.1f}) "
                f"| {key_spread:.3f}: {measured[workers] * math.exp(-z * key_spread):.2f} "
                f"| {sigma:.3f}: {measured[workers] * math.exp(-z * sigma):.2f} | {rate:.2f} |"
            )


if __name__ == "__main__":
    main()
