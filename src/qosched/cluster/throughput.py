"""Iterations per second of a job as a function of its worker count, from measured tables.

A worker is the cluster's unit of allocation: one GPU, or one CPU core (see ``ClusterSpec``).
Each table (one CSV per model) has a row per global batch size and a column per measured worker
count (1, 2, 4, … 64). Empty, ``nan`` and ``0`` cells are "not measured" and never used as speed.

Counts between two measured columns are interpolated linearly in the worker count, and only when
both neighbours were measured: 3 workers get the mean of the 2- and 4-worker speeds. A count above
the largest measured column, or next to an unmeasured cell, is unavailable: a policy may not
choose it and a trace may not request it. A batch size that is not a row of the table is an
error, never interpolated, because speed depends on it in ways the tables do not show.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from qosched.core.bounds import check_count
from qosched.core.csv_file import open_csv
from qosched.core.errors import InputError

# The table sets under qosched/data/throughputs: two GPU models and this project's CPU tables.
BUNDLED = ("A100", "T4", "CPU")
#: What a real backend assumes of a job no table knows (a user's own command), in iterations per
#: second per worker, until its own progress replaces it (``qosched.cluster.predict``).
PLACEHOLDER_RATE = 1.0
#: The speeds a table may give, in iterations/s. A training step launches at least one kernel
#: and synchronises its workers, so a million steps a second is beyond any real job (the bundled
#: tables measure 0.03 to 500); one step in 11.6 days is slower than anyone would measure. Outside
#: this range the arithmetic downstream breaks: iterations = duration x speed overflow, fits of
#: 1 / speed lose all precision, and a job that never finishes stalls a simulation.
MIN_SPEED = 1e-6
MAX_SPEED = 1e6
#: The largest worker count a table may measure: the most workers one node may hold
#: (``qosched.cluster.spec.MAX_WORKERS_PER_NODE``), far above any measured job, and a bound on
#: the list of speeds that ``interpolate`` builds up to the largest count.
MAX_TABLE_WORKERS = 2**16


@dataclass(frozen=True, slots=True)
class SpeedCurve:
    """Speeds of one (model, batch size): ``speeds[g]``, ``g`` in ``0..max_workers``, 0 = none.

    ``spread``: set only where the speeds are the job's own, measured on the machine it runs on
    (a real backend's remembered or profiled speeds): how far, as a standard deviation of the
    log speed, the job's speed there was seen to stray from them. A policy that promises
    deadlines plans a guarantee on the speed that far below (``qosched.cluster.policies.qos``).
    None for a table measured elsewhere, whose error the predictor's prior band stands for.

    ``spreads``: with a ``spread``, optionally the same per worker count (``spreads[g]``, 0 where
    none): a count measured only for seconds is trusted less than one measured for minutes
    (``qosched.backends.local.speed_memory.CountTrust``). Empty: ``spread`` at every count.
    """

    model: str
    batch_size: int
    speeds: tuple[float, ...]
    measured: tuple[int, ...]
    spread: float | None = None
    spreads: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.spreads and (self.spread is None or len(self.spreads) != len(self.speeds)):
            raise ValueError(
                f"{self.model}: per-count spreads need a spread and one entry per count "
                f"0..{len(self.speeds) - 1}, got {len(self.spreads)} (spread {self.spread!r})"
            )

    @property
    def max_workers(self) -> int:
        return len(self.speeds) - 1

    def rate(self, workers: int) -> float:
        """Iterations/s on ``workers`` workers in one placement; 0.0 when unavailable."""
        return self.speeds[workers] if 0 <= workers < len(self.speeds) else 0.0

    def spread_at(self, workers: int) -> float | None:
        """The spread a promise on ``workers`` workers is planned with: that count's own where
        ``spreads`` has one, else ``spread`` (None for a table measured elsewhere)."""
        if 0 < workers < len(self.spreads) and self.spreads[workers] > 0:
            return self.spreads[workers]
        return self.spread

    def available(self, workers: int) -> bool:
        return self.rate(workers) > 0.0

    def usable_counts(self) -> tuple[int, ...]:
        return tuple(g for g in range(1, len(self.speeds)) if self.speeds[g] > 0.0)


def interpolate(measured: Mapping[int, float]) -> tuple[float, ...]:
    """Speeds for every count up to the largest measured one, as documented in the module.

    ``measured`` has every column of the table; an unmeasured cell is 0.0, so no speed is
    interpolated next to it.
    """
    counts = sorted(g for g, speed in measured.items())
    while counts and measured[counts[-1]] <= 0.0:
        counts.pop()
    if not counts:
        return (0.0,)
    speeds = [0.0] * (counts[-1] + 1)
    for count in counts:
        speeds[count] = measured[count]
    for low, high in itertools.pairwise(counts):
        a, b = measured[low], measured[high]
        if a <= 0.0 or b <= 0.0:
            continue
        for g in range(low + 1, high):
            speeds[g] = a + (b - a) * (g - low) / (high - low)
    return tuple(speeds)


class ThroughputModel:
    """All measured tables of one device type (a GPU model, or CPU cores), keyed by model name
    (the CSV file name)."""

    def __init__(self, tables: Mapping[str, Mapping[int, Mapping[int, float]]], source: str = ""):
        self.source = source
        # The GPU type the tables were measured on, where known (the bundled sets): the
        # reference a mixed cluster scales speeds from (`qosched.cluster.gpu_types`).
        self.device_type: str | None = None
        self._tables = {model: dict(rows) for model, rows in tables.items()}
        self._curves: dict[tuple[str, int], SpeedCurve] = {}

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(sorted(self._tables))

    def batch_sizes(self, model: str) -> tuple[int, ...]:
        return tuple(sorted(self._tables.get(model, {})))

    def has(self, model: str, batch_size: int) -> bool:
        return batch_size in self._tables.get(model, {})

    def curve(self, model: str, batch_size: int) -> SpeedCurve:
        """The speed curve; InputError naming the known models or batch sizes when absent."""
        key = (model, batch_size)
        cached = self._curves.get(key)
        if cached is not None:
            return cached
        if model not in self._tables:
            raise InputError(
                f"unknown model {model!r}; the tables in {self.source or 'use'} "
                f"have {', '.join(self.models)}",
                field="model_name",
            )
        rows = self._tables[model]
        if batch_size not in rows:
            raise InputError(
                f"model {model!r} has no measurement at batch size {batch_size}; "
                f"measured batch sizes: {', '.join(map(str, sorted(rows)))}",
                field="batch_size",
            )
        row = rows[batch_size]  # unmeasured columns are present with speed 0.0
        measured = tuple(sorted(g for g, s in row.items() if s > 0.0))
        curve = SpeedCurve(model, batch_size, interpolate(row), measured)
        self._curves[key] = curve
        return curve

    def prior_curve(self, model: str, batch_size: int, most: int, *, step: int = 1) -> SpeedCurve:
        """What a real backend assumes of a job before it reports progress, on 0..``most``
        workers: this table's speeds where it knows ``(model, batch_size)``, else
        ``PLACEHOLDER_RATE`` per worker. With ``step`` > 1 only multiples of ``step`` are
        available (a job of whole pods of ``step`` GPUs each)."""
        if self.has(model, batch_size):
            table = self.curve(model, batch_size)
            rate = table.rate
            measured = table.measured
        else:

            def rate(workers: int) -> float:
                return PLACEHOLDER_RATE * workers

            measured = tuple(range(1, most + 1))
        speeds = tuple(rate(g) if g % step == 0 else 0.0 for g in range(most + 1))
        return SpeedCurve(
            model, batch_size, speeds, tuple(g for g in measured if g <= most and g % step == 0)
        )

    @classmethod
    def load(cls, directory: str | Path) -> ThroughputModel:
        """Read every ``*.csv`` table in ``directory``."""
        directory = Path(directory)
        if not directory.is_dir():
            raise InputError("not a directory of throughput tables", source=directory)
        tables = {path.stem: read_table(path) for path in sorted(directory.glob("*.csv"))}
        if not tables:
            raise InputError("no *.csv throughput tables found", source=directory)
        return cls(tables, source=str(directory))

    @classmethod
    def bundled(cls, name: str = "A100") -> ThroughputModel:
        """The tables that ship with qosched: ``A100`` or ``T4`` GPUs, or ``CPU`` cores."""
        root = resources.files("qosched") / "data" / "throughputs" / name
        if name not in BUNDLED or not root.is_dir():
            raise InputError(
                f"no bundled throughput tables {name!r}; use one of {', '.join(BUNDLED)}"
            )
        with resources.as_file(root) as directory:
            model = cls.load(directory)
        model.source = f"bundled {name} tables"
        model.device_type = name
        return model


def read_table(path: Path) -> dict[int, dict[int, float]]:
    """``{batch_size: {workers: iterations/s}}``, every column present, unmeasured cells as 0.0."""
    with open_csv(path, "speed table") as handle:
        rows = list(handle)
    if not rows or not rows[0] or rows[0][0].strip() != "global_batch_size":
        raise InputError("expected a header starting with 'global_batch_size'", source=path, line=1)
    counts = []
    for column, name in enumerate(rows[0][1:], start=2):
        try:
            count = int(name)
        except ValueError:
            raise InputError(
                f"column {column}: expected a worker count, got {name!r}", source=path, line=1
            ) from None
        if not 1 <= count <= MAX_TABLE_WORKERS:
            raise InputError(
                f"column {column}: expected a worker count from 1 to {MAX_TABLE_WORKERS:,}, "
                f"got {name.strip()!r}",
                source=path,
                line=1,
            )
        if count in counts:
            # Both columns would fill the same speed; silently keeping the last hides a typo.
            raise InputError(
                f"column {column}: worker count {count} appears twice "
                f"(first in column {counts.index(count) + 2})",
                source=path,
                line=1,
            )
        counts.append(count)
    table: dict[int, dict[int, float]] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        try:
            batch = int(row[0])
        except ValueError:
            raise InputError(
                f"expected a batch size, got {row[0]!r}",
                source=path,
                line=line,
                field="global_batch_size",
            ) from None
        # A trace's batch size is a count >= 1 (``qosched.cluster.traces``): a row no job can
        # name is refused here, where the file and line are known.
        check_count(batch, field="global_batch_size", minimum=1, source=path, line=line)
        if batch in table:
            raise InputError(
                f"batch size {batch} appears twice",
                source=path,
                line=line,
                field="global_batch_size",
            )
        if len(row) > len(counts) + 1:
            raise InputError(
                f"{len(row)} cells but the header has {len(counts) + 1} columns",
                source=path,
                line=line,
            )
        speeds = dict.fromkeys(counts, 0.0)
        for count, cell in zip(counts, row[1:], strict=False):
            cell = cell.strip()
            if not cell:
                continue
            try:
                speed = float(cell)
            except ValueError:
                raise InputError(
                    f"expected iterations/s, got {cell!r}", source=path, line=line, field=str(count)
                ) from None
            if math.isnan(speed) or speed == 0.0:
                continue
            if not MIN_SPEED <= speed <= MAX_SPEED:
                raise InputError(
                    f"expected iterations/s from {MIN_SPEED:g} to {MAX_SPEED:g} "
                    f"(or 0, nan or empty: not measured), got {cell!r}",
                    source=path,
                    line=line,
                    field=str(count),
                )
            speeds[count] = speed
        table[batch] = speeds
    if not table:
        raise InputError(
            "no rows after the header; expected one row per global batch size",
            source=path,
            line=1,
        )
    return table
