"""Job traces: ElasticFlow's CSV layout (all public variants) and qosched's own, detected by header.

ElasticFlow layout: ``job_id, submit_time|submission_time, iteration|num_iteration|real_iteration,
model_name, ddl|deadline, batch_size, num_gpu, duration[, best_effort, ...]``, columns in any order,
times in seconds, ``ddl`` absolute. A row with ``best_effort`` = 1 has no deadline. Other columns
(``real_duration``, ...) are ignored, as the ElasticFlow artifact ignores them.

When a file names one field twice, it is read as the artifact (``scheduler/jobs.py``
``add_job``) reads it: ``iteration`` before ``num_iteration`` (the artifact never reads
``real_iteration``; qosched falls back to it when it is the only one), ``submission_time`` before
``submit_time``, ``deadline`` before ``ddl``. ``philly_103959.csv`` has both ``iteration`` and
``real_iteration``: its ``iteration`` is read.

qosched layout: ``job_id, submit_s, model, batch_size, iterations, deadline_s, requested_gpus
[, duration_s]`` with an empty ``deadline_s`` for best effort.

Every number is bounded (:mod:`qosched.core.bounds`): counts below 2**53, times and deadlines
within year 9999 UTC; anything else is an :class:`InputError` naming the file, line and column.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from qosched.cluster.job import MAX_RUN_S, JobSpec
from qosched.cluster.throughput import ThroughputModel
from qosched.core.bounds import check_count, check_time
from qosched.core.csv_file import open_csv
from qosched.core.errors import InputError
from qosched.core.validate import parse_bool, parse_float

# Canonical field -> accepted header names, per layout, in the order of precedence when a file
# has several (the ElasticFlow artifact's order; see the module docstring).
ELASTICFLOW_COLUMNS: dict[str, tuple[str, ...]] = {
    "job_id": ("job_id",),
    "submit": ("submission_time", "submit_time"),
    "iterations": ("iteration", "num_iteration", "real_iteration"),
    "model": ("model_name",),
    "deadline": ("deadline", "ddl"),
    "batch_size": ("batch_size",),
    "workers": ("num_gpu",),
    "duration": ("duration",),
}
QOSCHED_COLUMNS: dict[str, tuple[str, ...]] = {
    "job_id": ("job_id",),
    "submit": ("submit_s",),
    "iterations": ("iterations",),
    "model": ("model",),
    "deadline": ("deadline_s",),
    "batch_size": ("batch_size",),
    "workers": ("requested_gpus",),
}
QOSCHED_HEADER = (
    "job_id",
    "submit_s",
    "model",
    "batch_size",
    "iterations",
    "deadline_s",
    "requested_gpus",
    "duration_s",
)
ELASTICFLOW_HEADER = (
    "job_id",
    "submit_time",
    "iteration",
    "model_name",
    "ddl",
    "batch_size",
    "num_gpu",
    "duration",
    "best_effort",
)


@dataclass(frozen=True, slots=True)
class Trace:
    """Jobs in file order, with the file and line each came from (for error messages)."""

    jobs: tuple[JobSpec, ...]
    source: str = "<memory>"
    lines: tuple[int, ...] = ()
    layout: str = "qosched"

    def where(self, index: int) -> tuple[str, int | None]:
        return self.source, (self.lines[index] if self.lines else None)


def _resolve_columns(
    header: Sequence[str], layout: dict[str, tuple[str, ...]], path: Path, optional: set[str]
) -> dict[str, str]:
    resolved: dict[str, str] = {}
    for canonical, names in layout.items():
        found = [name for name in names if name in header]
        if found:
            resolved[canonical] = found[0]  # the first by precedence; the others are ignored
        elif canonical not in optional:
            raise InputError(f"missing column {'|'.join(names)}", source=path, line=1)
    return resolved


def read_trace(path: str | Path, throughputs: ThroughputModel | None = None) -> Trace:
    """Read a trace in either layout; with ``throughputs``, also check models, batches, requests."""
    path = Path(path)
    with open_csv(path, "trace") as reader:
        try:
            header = [name.strip() for name in next(reader)]
        except StopIteration:
            raise InputError("empty file; expected a header row", source=path) from None
        if "submit_s" in header:
            layout, columns = "qosched", _resolve_columns(header, QOSCHED_COLUMNS, path, set())
        elif any(name in header for name in ELASTICFLOW_COLUMNS["submit"]):
            layout = "elasticflow"
            if "model_name" not in header and "duration" in header and "num_gpu" in header:
                raise InputError(
                    "a cluster trace of run times (no model_name, iterations or deadline), like "
                    "the ITP release's raw traces; make a deadline trace from it with "
                    "`qosched trace import --from itp`",
                    source=path,
                    line=1,
                )
            columns = _resolve_columns(header, ELASTICFLOW_COLUMNS, path, {"duration"})
        else:
            raise InputError(
                "unrecognised header; expected qosched's (job_id,submit_s,...) or ElasticFlow's "
                "(job_id,submit_time,iteration,model_name,ddl,batch_size,num_gpu,duration)",
                source=path,
                line=1,
            )
        repeated = sorted({name for name in header if header.count(name) > 1})
        if repeated:
            raise InputError(
                f"column {repeated[0]!r} appears more than once in the header",
                source=path,
                line=1,
                field=repeated[0],
            )
        index = {name: i for i, name in enumerate(header)}
        jobs: list[JobSpec] = []
        lines: list[int] = []
        seen: dict[str, int] = {}
        for row in reader:
            line = reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise InputError(
                    f"expected {len(header)} fields as in the header, got {len(row)}",
                    source=path,
                    line=line,
                )
            cells = {name: row[index[name]].strip() for name in header}
            job = _parse_row(cells, columns, layout, path, line)
            if job.job_id in seen:
                raise InputError(
                    f"duplicate job id {job.job_id!r} (first on line {seen[job.job_id]})",
                    source=path,
                    line=line,
                    field="job_id",
                )
            seen[job.job_id] = line
            if throughputs is not None:
                check_job(job, throughputs, source=path, line=line, layout=layout)
            jobs.append(job)
            lines.append(line)
    if not jobs:
        raise InputError("no jobs in trace", source=path)
    return Trace(tuple(jobs), str(path), tuple(lines), layout)


def _parse_row(
    cells: dict[str, str], columns: dict[str, str], layout: str, path: Path, line: int
) -> JobSpec:
    def cell(canonical: str) -> str:
        return cells[columns[canonical]]

    def time(canonical: str) -> float:
        return _time(cell(canonical), columns[canonical], path, line)

    def whole(canonical: str) -> int:
        value = parse_float(cell(canonical), field=columns[canonical], source=path, line=line)
        return check_count(value, field=columns[canonical], minimum=1, source=path, line=line)

    job_id = cell("job_id")
    if not job_id:
        raise InputError("must not be empty", source=path, line=line, field="job_id")
    submit = time("submit")
    best_effort = False
    if layout == "elasticflow" and "best_effort" in cells:
        best_effort = parse_bool(cells["best_effort"], field="best_effort", source=path, line=line)
    deadline: float | None = None
    if not best_effort and cell("deadline") != "":
        deadline = time("deadline")
        if deadline <= submit:
            raise InputError(
                f"deadline {cell('deadline')} is not after the submission time {cell('submit')}",
                source=path,
                line=line,
                field=columns["deadline"],
            )
    elif not best_effort and layout == "elasticflow":
        raise InputError(
            "empty deadline; set best_effort=1 for a job without one",
            source=path,
            line=line,
            field=columns["deadline"],
        )
    duration = None
    duration_column = "duration" if layout == "elasticflow" else "duration_s"
    if cells.get(duration_column, ""):
        duration = _time(cells[duration_column], duration_column, path, line)
        if not 0 < duration <= MAX_RUN_S:
            raise InputError(
                f"expected a run time in (0, {MAX_RUN_S:.0f}] seconds (366 days), "
                f"got {cells[duration_column]}",
                source=path,
                line=line,
                field=duration_column,
            )
    model = cell("model")
    if not model:
        raise InputError("must not be empty", source=path, line=line, field=columns["model"])
    return JobSpec(
        job_id=job_id,
        submit_s=submit,
        model=model,
        batch_size=whole("batch_size"),
        iterations=whole("iterations"),
        deadline_s=deadline,
        requested_workers=whole("workers"),
        duration_s=duration,
    )


def _time(text: str, field: str, path: Path, line: int) -> float:
    """Seconds in [0, end of year 9999 UTC]: a submission time, deadline or duration."""
    value = parse_float(text, field=field, source=path, line=line)
    return check_time(value, field=field, source=path, line=line)


def column_name(layout: str, canonical: str) -> str:
    """The header name a layout writes for a canonical field (``model``, ``batch_size``, ...)."""
    names = ELASTICFLOW_HEADER if layout == "elasticflow" else QOSCHED_HEADER
    columns = ELASTICFLOW_COLUMNS if layout == "elasticflow" else QOSCHED_COLUMNS
    return next(name for name in columns[canonical] if name in names)


def check_job(
    job: JobSpec,
    throughputs: ThroughputModel,
    *,
    source: str | Path,
    line: int | None,
    layout: str = "qosched",
) -> None:
    """The job's model and batch size are measured, and so is the worker count it requests."""
    try:
        curve = throughputs.curve(job.model, job.batch_size)
    except InputError as exc:
        canonical = "model" if exc.field == "model_name" else "batch_size"
        raise InputError(
            f"job {job.job_id}: {exc.reason}",
            source=source,
            line=line,
            field=column_name(layout, canonical),
        ) from None
    if not curve.available(job.requested_workers):
        raise InputError(
            f"job {job.job_id}: {job.model} at batch size {job.batch_size} has no measured or "
            f"interpolable speed on {job.requested_workers} workers; usable counts: "
            f"{_ranges(curve.usable_counts())}",
            source=source,
            line=line,
            field=column_name(layout, "workers"),
        )
    run_s = job.iterations / curve.rate(job.requested_workers)
    if run_s > MAX_RUN_S:
        raise InputError(
            f"job {job.job_id}: {job.iterations} iterations run {run_s / 86400:.4g} days on its "
            f"{job.requested_workers} requested workers at the table's speed; at most 366 days "
            "are simulated",
            source=source,
            line=line,
            field=column_name(layout, "iterations"),
        )


def _ranges(counts: Iterable[int]) -> str:
    counts = list(counts)
    if not counts:
        return "none"
    parts, start, prev = [], counts[0], counts[0]
    for count in [*counts[1:], None]:
        if count is not None and count == prev + 1:
            prev = count
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if count is not None:
            start = prev = count
    return ", ".join(parts)


def write_trace(
    trace: Trace | Sequence[JobSpec], path: str | Path, layout: str = "qosched"
) -> None:
    """Write jobs in ``qosched`` or ``elasticflow`` layout; reading it back gives the same jobs."""
    jobs = trace.jobs if isinstance(trace, Trace) else tuple(trace)
    path = Path(path)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        if layout == "qosched":
            writer.writerow(QOSCHED_HEADER)
            for job in jobs:
                writer.writerow(
                    [
                        job.job_id,
                        _num(job.submit_s),
                        job.model,
                        job.batch_size,
                        job.iterations,
                        "" if job.deadline_s is None else _num(job.deadline_s),
                        job.requested_workers,
                        "" if job.duration_s is None else _num(job.duration_s),
                    ]
                )
        elif layout == "elasticflow":
            writer.writerow(ELASTICFLOW_HEADER)
            for job in jobs:
                # ElasticFlow's own tools expect a number in ddl even for best-effort rows.
                deadline = job.deadline_s if job.deadline_s is not None else job.submit_s + 1
                writer.writerow(
                    [
                        job.job_id,
                        _num(job.submit_s),
                        job.iterations,
                        job.model,
                        _num(deadline),
                        job.batch_size,
                        job.requested_workers,
                        "" if job.duration_s is None else _num(job.duration_s),
                        int(job.best_effort),
                    ]
                )
        else:
            raise InputError(f"unknown trace layout {layout!r}; use qosched or elasticflow")


def _num(value: float) -> str:
    """Shortest text that reads back as the same float."""
    return str(int(value)) if value == int(value) else repr(value)
