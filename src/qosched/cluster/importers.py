"""Public GPU-cluster traces that record what ran, not what to train, made into deadline traces.

The ITP release's raw traces (``microsoft/elasticflow-traces``, ``raw-traces.tar.gz``), Helios
(``cluster_log.csv``), Philly (the per-job CSV ``timestamp,duration,num_gpus,...`` that the Pollux
artifact derives from ``msr-fiddle/philly-traces``) and Alibaba PAI (``pai_task_table.csv`` of
``cluster-trace-gpu-v2020``, no header) give each job a submission time, a run time and a GPU
count. A deadline trace needs a model, a batch size, iterations and a deadline; they are made as
the ElasticFlow artifact makes them from the ITP traces (``trace_generator/
generate_trace_from_itp.py``, ``utils.generate_job_from_itp``):

- jobs that did not complete, ran under 10 minutes, asked for more than 64 GPUs or for 3, 5, 6
  or 7 GPUs are left out;
- a (model, batch size) pair is drawn uniformly from the speed tables among those with a batch
  of at least the job's GPUs and a measured speed on that many (the artifact draws from its job
  table until one fits);
- iterations = run time x that speed, so the job takes its recorded run time on its GPUs;
- deadline = submission + U(0.5, 1.5) x run time (the artifact's ``--min_ddl``/``--max_ddl``).

Times become seconds from the trace's first submission. Seeded: same file and seed, same trace.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from qosched.cluster.generate import TIGHTNESS_RANGE
from qosched.cluster.job import MAX_RUN_S, JobSpec
from qosched.cluster.throughput import ThroughputModel
from qosched.core.bounds import (
    LATEST_TIME_S,
    check_count,
    check_datetime,
    check_number,
    check_time,
)
from qosched.core.csv_file import CsvRows, data_rows, header_columns, open_csv
from qosched.core.errors import InputError

IMPORT_FORMATS = ("itp", "helios", "philly", "pai")
MIN_RUN_S = 600.0
#: The longest run time a record may give: what a trace may hold (``job.MAX_RUN_S``, 366 days);
#: a longer one is a broken record, and the trace written would be refused when read.
MAX_GPUS = 64
SKIPPED_GPU_COUNTS = frozenset({3, 5, 6, 7})
#: The PAI task table's columns (the file has no header).
PAI_COLUMNS = (
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
)


@dataclass(frozen=True, slots=True)
class Record:
    """One job as a cluster trace records it."""

    job_id: str
    submit_s: float
    run_s: float
    gpus: int
    line: int


def import_trace(
    path: str | Path,
    fmt: str,
    throughputs: ThroughputModel,
    *,
    seed: int = 0,
    tightness: tuple[float, float] = (0.5, 1.5),
) -> list[JobSpec]:
    """The deadline jobs made from a ``fmt`` trace (see the module docstring)."""
    if fmt not in IMPORT_FORMATS:
        raise InputError(f"unknown format {fmt!r}; use {', '.join(IMPORT_FORMATS)}", field="format")
    # The same seeds as `trace generate` and `sim cluster` take.
    check_count(seed, field="seed")
    # The same range as `trace generate` takes; a smaller LOW can put a deadline on the
    # submission time itself.
    low, high = tightness
    least, most = TIGHTNESS_RANGE
    if not least <= low <= high <= most:
        raise InputError(
            f"expected {least:g} <= LOW <= HIGH <= {most:g}, got {low!r} {high!r}",
            field="tightness",
        )
    path = Path(path)
    with open_csv(path, "trace") as rows:
        records = list(_READERS[fmt](rows, path))
    kept = [r for r in records if r.run_s >= MIN_RUN_S and _usable_gpus(r.gpus)]
    if not kept:
        raise InputError(
            f"no job to import: none of {len(records)} completed job(s) ran at least "
            f"{MIN_RUN_S:.0f} s on 1-{MAX_GPUS} GPUs (3, 5, 6, 7 left out)",
            source=path,
        )
    _refuse_repeated_ids(kept, path)
    origin = min(r.submit_s for r in kept)
    rng = random.Random(seed)
    pairs = [(m, b) for m in throughputs.models for b in throughputs.batch_sizes(m)]
    jobs = []
    for record in sorted(kept, key=lambda r: (r.submit_s, r.line)):
        fitting = [
            (m, b)
            for m, b in pairs
            if b >= record.gpus and record.gpus in throughputs.curve(m, b).measured
        ]
        if not fitting:
            continue  # the artifact leaves such a job out too
        model, batch = rng.choice(fitting)
        rate = throughputs.curve(model, batch).rate(record.gpus)
        submit = record.submit_s - origin
        deadline = submit + rng.uniform(low, high) * record.run_s
        if deadline > LATEST_TIME_S:
            raise InputError(
                f"job {record.job_id}: its deadline, {deadline:.0f} s after the first "
                f"submission, lies past year 9999 (run time {record.run_s:g} s); lower the "
                "tightness or leave the job out",
                source=path,
                line=record.line,
            )
        jobs.append(
            JobSpec(
                job_id=record.job_id,
                submit_s=submit,
                model=model,
                batch_size=batch,
                iterations=max(1, round(record.run_s * rate)),
                deadline_s=deadline,
                requested_workers=record.gpus,
                duration_s=record.run_s,
            )
        )
    if not jobs:
        # An empty trace would be written, and `sim cluster` would refuse it without saying why.
        counts = ", ".join(str(g) for g in sorted({r.gpus for r in kept}))
        raise InputError(
            f"no job to import: no model of the speed tables has a measured speed on the GPU "
            f"counts of the {len(kept)} job(s) kept ({counts})",
            source=path,
        )
    return jobs


def _usable_gpus(gpus: int) -> bool:
    return 1 <= gpus <= MAX_GPUS and gpus not in SKIPPED_GPU_COUNTS


def _refuse_repeated_ids(records: list[Record], path: Path) -> None:
    """A trace names each job once; two rows of one id are a broken file, and the simulator
    would refuse the written trace without saying which rows of this one clash."""
    first: dict[str, int] = {}
    for record in sorted(records, key=lambda r: r.line):
        if record.job_id in first:
            raise InputError(
                f"duplicate job id {record.job_id!r} (first on line {first[record.job_id]})",
                source=path,
                line=record.line,
                field="job_id",
            )
        first[record.job_id] = record.line


def _number(text: str, field: str, path: Path, line: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(
            f"expected a number, got {text!r}", source=path, line=line, field=field
        ) from None
    return check_number(value, field=field, source=path, line=line)


def _seconds(text: str, field: str, path: Path, line: int) -> float:
    return check_time(_number(text, field, path, line), field=field, source=path, line=line)


def _run_time(text: str, field: str, path: Path, line: int) -> float:
    return check_number(
        _number(text, field, path, line),
        field=field,
        minimum=0.0,
        maximum=MAX_RUN_S,
        source=path,
        line=line,
    )


def _count(text: str, field: str, path: Path, line: int) -> int:
    return check_count(_number(text, field, path, line), field=field, source=path, line=line)


def _moment(text: str, field: str, path: Path, line: int) -> float:
    """``YYYY-MM-DD HH:MM:SS`` (UTC when no offset is given) as Unix seconds."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InputError(
            f"expected a date and time like 2020-04-01 08:30:00, got {text!r}",
            source=path,
            line=line,
            field=field,
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return check_datetime(moment, field=field, source=path, line=line)


def _itp(rows: CsvRows, path: Path) -> Iterator[Record]:
    columns = header_columns(rows, path, ("job_id", "submission_time", "duration", "num_gpu"))
    for line, cells in data_rows(rows, path, columns):
        yield Record(
            cells[columns["job_id"]] or f"line{line}",
            _seconds(cells[columns["submission_time"]], "submission_time", path, line),
            _run_time(cells[columns["duration"]], "duration", path, line),
            _count(cells[columns["num_gpu"]], "num_gpu", path, line),
            line,
        )


def _helios(rows: CsvRows, path: Path) -> Iterator[Record]:
    columns = header_columns(rows, path, ("job_id", "gpu_num", "state", "submit_time", "duration"))
    for line, cells in data_rows(rows, path, columns):
        if cells[columns["state"]].upper() != "COMPLETED":
            continue
        yield Record(
            cells[columns["job_id"]] or f"line{line}",
            _moment(cells[columns["submit_time"]], "submit_time", path, line),
            _run_time(cells[columns["duration"]], "duration", path, line),
            _count(cells[columns["gpu_num"]], "gpu_num", path, line),
            line,
        )


def _philly(rows: CsvRows, path: Path) -> Iterator[Record]:
    columns = header_columns(rows, path, ("timestamp", "duration", "num_gpus"))
    for line, cells in data_rows(rows, path, columns):
        yield Record(
            f"philly{line - 1}",
            _moment(cells[columns["timestamp"]], "timestamp", path, line),
            _run_time(cells[columns["duration"]], "duration", path, line),
            _count(cells[columns["num_gpus"]], "num_gpus", path, line),
            line,
        )


def _pai(rows: CsvRows, path: Path) -> Iterator[Record]:
    """Tasks grouped into jobs: GPUs = sum of instances x plan_gpu / 100 (rounded up; plan_gpu is
    in per cent of a GPU), from the first task's start to the last task's end; a job with any
    task not Terminated is left out."""
    index = {name: i for i, name in enumerate(PAI_COLUMNS)}
    jobs: dict[str, list] = {}
    for line, cells in data_rows(rows, path, index):
        if not cells[index["job_name"]]:
            # Tasks are grouped into jobs by name: unnamed ones would merge into one made-up job.
            raise InputError(
                "expected the name of the task's job, got an empty cell",
                source=path,
                line=line,
                field="job_name",
            )
        job = jobs.setdefault(cells[index["job_name"]], [line, math.inf, -math.inf, 0.0, False])
        if cells[index["status"]] != "Terminated" or not cells[index["end_time"]]:
            job[4] = True  # failed, killed or still running: not a job that completed
            continue
        start = _seconds(cells[index["start_time"]], "start_time", path, line)
        end = _seconds(cells[index["end_time"]], "end_time", path, line)
        gpu_share = 0.0  # a task with no plan_gpu (a CPU task of the job) holds no GPU
        if cells[index["plan_gpu"]]:
            gpu_share = check_number(
                _number(cells[index["plan_gpu"]], "plan_gpu", path, line),
                field="plan_gpu",
                minimum=0.0,
                maximum=100.0 * MAX_GPUS,
                source=path,
                line=line,
            )
        instances = _count(cells[index["inst_num"]], "inst_num", path, line)
        job[1], job[2] = min(job[1], start), max(job[2], end)
        job[3] += instances * gpu_share / 100.0
    for name, (line, start, end, gpus, broken) in jobs.items():
        if broken or end <= start or gpus <= 0:
            continue
        if end - start > MAX_RUN_S:
            raise InputError(
                f"job {name} runs {end - start:g} s from its first task's start to its last "
                f"task's end; expected at most {MAX_RUN_S:g} s",
                source=path,
                line=line,
                field="end_time",
            )
        yield Record(name, start, end - start, math.ceil(gpus - 1e-9), line)


_READERS: dict[str, Callable[[CsvRows, Path], Iterator[Record]]] = {
    "itp": _itp,
    "helios": _helios,
    "philly": _philly,
    "pai": _pai,
}
