"""Tests for qosched.cluster.traces: both layouts, round-trips and errors that say where."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from qosched.cluster.job import JobSpec
from qosched.cluster.throughput import ThroughputModel
from qosched.cluster.traces import Trace, read_trace, write_trace
from qosched.core.errors import InputError

EF_HEADER = "job_id,submit_time,iteration,model_name,ddl,batch_size,num_gpu,duration"
EF_GOOD_ROW = "a,0,100,resnet50,5000,64,4,3600"
QS_HEADER = "job_id,submit_s,model,batch_size,iterations,deadline_s,requested_gpus,duration_s"
QS_GOOD_ROW = "a,0,resnet50,64,100,5000,4,3600"
UUID = "3f2b9c1e-8a4d-4e2b-9f1a-0c5d6e7f8a9b"


def write(tmp_path: Path, lines: list[str], name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def raises_at(path: Path, line: int | None, field: str | None, **kwargs) -> InputError:
    """Read ``path``, expect an InputError naming the file, ``line`` and ``field``."""
    with pytest.raises(InputError) as caught:
        read_trace(path, **kwargs)
    message = str(caught.value)
    assert str(path) in message
    if line is not None:
        assert f"{path}:{line}:" in message
    if field is not None:
        assert f"field {field!r}" in message
    return caught.value


# --- ElasticFlow layout -----------------------------------------------------------------------

HEADER_VARIANTS = list(
    itertools.product(
        ("submit_time", "submission_time"),
        ("iteration", "num_iteration", "real_iteration"),
        ("ddl", "deadline"),
    )
)


@pytest.mark.parametrize(
    ("submit", "iteration", "deadline"),
    HEADER_VARIANTS,
    ids=["-".join(variant) for variant in HEADER_VARIANTS],
)
def test_elasticflow_header_variants(tmp_path, submit, iteration, deadline):
    header = f"job_id,{submit},{iteration},model_name,{deadline},batch_size,num_gpu,duration"
    path = write(tmp_path, [header, "j1,100,5000,resnet50,4100,64,4,3600"])
    trace = read_trace(path)
    assert trace.jobs == (JobSpec("j1", 100.0, "resnet50", 64, 5000, 4100.0, 4, 3600.0),)
    assert trace.layout == "elasticflow"


EF_VALUES = {
    "job_id": "j1",
    "submit_time": "100",
    "iteration": "5000",
    "model_name": "resnet50",
    "ddl": "4100",
    "batch_size": "64",
    "num_gpu": "4",
    "duration": "3600",
}
COLUMN_ORDERS = [
    ("file-order", list(EF_VALUES)),
    ("reversed", list(reversed(EF_VALUES))),
    (
        "shuffled",
        [
            "model_name",
            "num_gpu",
            "job_id",
            "duration",
            "ddl",
            "submit_time",
            "batch_size",
            "iteration",
        ],
    ),
]


@pytest.mark.parametrize("order", [o for _, o in COLUMN_ORDERS], ids=[i for i, _ in COLUMN_ORDERS])
def test_elasticflow_columns_in_any_order(tmp_path, order):
    path = write(tmp_path, [",".join(order), ",".join(EF_VALUES[name] for name in order)])
    assert read_trace(path).jobs == (JobSpec("j1", 100.0, "resnet50", 64, 5000, 4100.0, 4, 3600.0),)


def test_elasticflow_uuid_job_ids(tmp_path):
    path = write(tmp_path, [EF_HEADER, f"{UUID},0,100,resnet50,5000,64,4,3600"])
    assert read_trace(path).jobs[0].job_id == UUID


def test_elasticflow_extra_columns_are_ignored(tmp_path):
    path = write(
        tmp_path,
        [f"user,{EF_HEADER},gpu_type", "alice,j1,100,5000,resnet50,4100,64,4,3600,A100"],
    )
    assert read_trace(path).jobs == (JobSpec("j1", 100.0, "resnet50", 64, 5000, 4100.0, 4, 3600.0),)


def test_elasticflow_without_duration_column(tmp_path):
    header = "job_id,submit_time,iteration,model_name,ddl,batch_size,num_gpu"
    path = write(tmp_path, [header, "j1,100,5000,resnet50,4100,64,4"])
    assert read_trace(path).jobs[0].duration_s is None


@pytest.mark.parametrize(
    ("flag", "ddl", "deadline"),
    [
        ("1", "4100", None),
        ("1", "", None),
        ("true", "4100", None),
        ("yes", "4100", None),
        ("0", "4100", 4100.0),
        ("", "4100", 4100.0),
    ],
    ids=["1", "1-empty-ddl", "true", "yes", "0-keeps-ddl", "empty-flag-keeps-ddl"],
)
def test_elasticflow_best_effort_flag(tmp_path, flag, ddl, deadline):
    path = write(
        tmp_path, [f"{EF_HEADER},best_effort", f"j1,100,5000,resnet50,{ddl},64,4,3600,{flag}"]
    )
    assert read_trace(path).jobs[0].deadline_s == deadline


def test_counts_written_as_whole_floats_are_accepted(tmp_path):
    path = write(tmp_path, [EF_HEADER, "j1,100.5,5000.0,resnet50,4100.25,64.0,4.0,3600.0"])
    assert read_trace(path).jobs == (
        JobSpec("j1", 100.5, "resnet50", 64, 5000, 4100.25, 4, 3600.0),
    )


def test_whitespace_around_headers_and_cells_is_ignored(tmp_path):
    header = (
        " job_id , submit_time , iteration , model_name , ddl , batch_size , num_gpu , duration"
    )
    path = write(tmp_path, [header, " j1 , 100 , 5000 , resnet50 , 4100 , 64 , 4 , 3600 "])
    assert read_trace(path).jobs == (JobSpec("j1", 100.0, "resnet50", 64, 5000, 4100.0, 4, 3600.0),)


# --- qosched layout ---------------------------------------------------------------------------


def test_qosched_layout(tmp_path):
    path = write(
        tmp_path,
        [QS_HEADER, "j1,12.5,resnet50,64,5000,4100,4,3600", "j2,20,bert,32,10,,1,"],
    )
    trace = read_trace(path)
    assert trace.jobs == (
        JobSpec("j1", 12.5, "resnet50", 64, 5000, 4100.0, 4, 3600.0),
        JobSpec("j2", 20.0, "bert", 32, 10, None, 1, None),
    )
    assert trace.layout == "qosched"


def test_qosched_layout_empty_deadline_is_best_effort(tmp_path):
    path = write(tmp_path, [QS_HEADER, "j1,0,resnet50,64,100,,4,3600"])
    job = read_trace(path).jobs[0]
    assert job.deadline_s is None
    assert job.best_effort


def test_qosched_layout_without_duration_column(tmp_path):
    header = "job_id,submit_s,model,batch_size,iterations,deadline_s,requested_gpus"
    path = write(tmp_path, [header, "j1,0,resnet50,64,100,50,4"])
    assert read_trace(path).jobs == (JobSpec("j1", 0.0, "resnet50", 64, 100, 50.0, 4, None),)


def test_trace_records_the_line_of_each_job_skipping_blank_lines(tmp_path):
    path = write(tmp_path, [QS_HEADER, "j1,0,m,1,1,,1,", "", "j2,1,m,1,1,,1,"])
    trace = read_trace(path)
    assert trace.lines == (2, 4)
    assert trace.where(1) == (str(path), 4)


# --- round-trips ------------------------------------------------------------------------------

ROUND_TRIP_JOBS = (
    JobSpec("j1", 0.0, "resnet50", 64, 5000, 4100.0, 4, 3600.0),
    JobSpec("j2", 12.345, "bert", 32, 17, 99.875, 1, 0.1),
    JobSpec(UUID, 13.0, "gpt2", 128, 1, None, 8, 7200.5),
    JobSpec("j4", 0.1 + 0.2, "vgg16", 256, 123456789, 1e6 + 0.001, 16, 1 / 3),
    JobSpec("j5", 40.5, "bert", 32, 10, None, 2, 61.0),
)


@pytest.mark.parametrize("layout", ["qosched", "elasticflow"])
def test_write_then_read_gives_the_same_jobs(tmp_path, layout):
    path = tmp_path / "out.csv"
    write_trace(ROUND_TRIP_JOBS, path, layout=layout)
    assert read_trace(path).jobs == ROUND_TRIP_JOBS


@pytest.mark.parametrize("layout", ["qosched", "elasticflow"])
def test_write_then_read_keeps_an_unknown_duration(tmp_path, layout):
    jobs = (
        JobSpec("j1", 1.5, "resnet50", 64, 10, 20.0, 1, None),
        JobSpec("j2", 2.5, "resnet50", 64, 10, None, 1, None),
    )
    path = tmp_path / "out.csv"
    write_trace(jobs, path, layout=layout)
    assert read_trace(path).jobs == jobs


@pytest.mark.parametrize("layout", ["qosched", "elasticflow"])
def test_write_accepts_a_trace_object(tmp_path, layout):
    path = tmp_path / "out.csv"
    write_trace(Trace(ROUND_TRIP_JOBS), path, layout=layout)
    assert read_trace(path).jobs == ROUND_TRIP_JOBS


def test_write_unknown_layout_raises(tmp_path):
    with pytest.raises(InputError, match="'yaml'"):
        write_trace(ROUND_TRIP_JOBS, tmp_path / "out.csv", layout="yaml")


# --- bad rows: file, line and field -----------------------------------------------------------

# (id, bad row on line 3 under EF_HEADER, field named in the error; None = whole row)
EF_BAD_ROWS = [
    ("too-few-fields", "b,10,100,resnet50,5000,64,4", None),
    ("too-many-fields", "b,10,100,resnet50,5000,64,4,3600,x", None),
    ("empty-job-id", ",10,100,resnet50,5000,64,4,3600", "job_id"),
    ("non-numeric-submit", "b,soon,100,resnet50,5000,64,4,3600", "submit_time"),
    ("negative-submit", "b,-1,100,resnet50,5000,64,4,3600", "submit_time"),
    ("nan-submit", "b,nan,100,resnet50,5000,64,4,3600", "submit_time"),
    ("inf-submit", "b,inf,100,resnet50,5000,64,4,3600", "submit_time"),
    ("non-numeric-iteration", "b,10,many,resnet50,5000,64,4,3600", "iteration"),
    ("nan-iteration", "b,10,nan,resnet50,5000,64,4,3600", "iteration"),
    ("inf-iteration", "b,10,inf,resnet50,5000,64,4,3600", "iteration"),
    ("fractional-iteration", "b,10,10.5,resnet50,5000,64,4,3600", "iteration"),
    ("zero-iteration", "b,10,0,resnet50,5000,64,4,3600", "iteration"),
    ("empty-model", "b,10,100,,5000,64,4,3600", "model_name"),
    ("non-numeric-deadline", "b,10,100,resnet50,tomorrow,64,4,3600", "ddl"),
    ("nan-deadline", "b,10,100,resnet50,nan,64,4,3600", "ddl"),
    ("inf-deadline", "b,10,100,resnet50,inf,64,4,3600", "ddl"),
    ("deadline-equal-to-submit", "b,10,100,resnet50,10,64,4,3600", "ddl"),
    ("deadline-before-submit", "b,10,100,resnet50,9.5,64,4,3600", "ddl"),
    ("empty-deadline", "b,10,100,resnet50,,64,4,3600", "ddl"),
    ("zero-batch-size", "b,10,100,resnet50,5000,0,4,3600", "batch_size"),
    ("negative-batch-size", "b,10,100,resnet50,5000,-64,4,3600", "batch_size"),
    ("fractional-batch-size", "b,10,100,resnet50,5000,64.5,4,3600", "batch_size"),
    ("nan-batch-size", "b,10,100,resnet50,5000,nan,4,3600", "batch_size"),
    ("zero-workers", "b,10,100,resnet50,5000,64,0,3600", "num_gpu"),
    ("negative-workers", "b,10,100,resnet50,5000,64,-2,3600", "num_gpu"),
    ("fractional-workers", "b,10,100,resnet50,5000,64,2.5,3600", "num_gpu"),
    ("inf-workers", "b,10,100,resnet50,5000,64,inf,3600", "num_gpu"),
    ("negative-duration", "b,10,100,resnet50,5000,64,4,-1", "duration"),
    ("nan-duration", "b,10,100,resnet50,5000,64,4,nan", "duration"),
    ("inf-duration", "b,10,100,resnet50,5000,64,4,inf", "duration"),
    ("iteration-at-count-limit", "b,10,9007199254740992,resnet50,5000,64,4,3600", "iteration"),
    ("iteration-huge", "b,10,1e300,resnet50,5000,64,4,3600", "iteration"),
    ("workers-at-count-limit", "b,10,100,resnet50,5000,64,9007199254740992,3600", "num_gpu"),
    ("batch-size-huge", "b,10,100,resnet50,5000,1e20,4,3600", "batch_size"),
    ("submit-after-year-9999", "b,1e12,100,resnet50,2e12,64,4,3600", "submit_time"),
    ("deadline-after-year-9999", "b,10,100,resnet50,1e12,64,4,3600", "ddl"),
    ("duration-after-year-9999", "b,10,100,resnet50,5000,64,4,1e12", "duration"),
    ("zero-duration", "b,10,100,resnet50,5000,64,4,0", "duration"),
    ("underscore-in-a-number", "b,10,1_000,resnet50,5000,64,4,3600", "iteration"),
    ("arabic-indic-digits", "b,10,\u0661\u0660\u0660,resnet50,5000,64,4,3600", "iteration"),
    ("full-width-digit", "b,\uff11,100,resnet50,5000,64,4,3600", "submit_time"),
    ("hexadecimal", "b,10,0x10,resnet50,5000,64,4,3600", "iteration"),
    ("duration-over-366-days", "b,10,100,resnet50,5000,64,4,31622401", "duration"),
]


@pytest.mark.parametrize(
    ("row", "field"), [case[1:] for case in EF_BAD_ROWS], ids=[case[0] for case in EF_BAD_ROWS]
)
def test_elasticflow_bad_row_names_file_line_and_field(tmp_path, row, field):
    path = write(tmp_path, [EF_HEADER, EF_GOOD_ROW, row])
    raises_at(path, 3, field)


# (id, bad row on line 3 under EF_HEADER + best_effort, field named in the error)
EF_BEST_EFFORT_BAD_ROWS = [
    ("empty-deadline-best-effort-0", "b,10,100,resnet50,,64,4,3600,0", "ddl"),
    ("empty-deadline-best-effort-empty", "b,10,100,resnet50,,64,4,3600,", "ddl"),
    ("best-effort-not-a-flag", "b,10,100,resnet50,5000,64,4,3600,maybe", "best_effort"),
]


@pytest.mark.parametrize(
    ("row", "field"),
    [case[1:] for case in EF_BEST_EFFORT_BAD_ROWS],
    ids=[case[0] for case in EF_BEST_EFFORT_BAD_ROWS],
)
def test_elasticflow_best_effort_bad_row_names_file_line_and_field(tmp_path, row, field):
    path = write(tmp_path, [f"{EF_HEADER},best_effort", f"{EF_GOOD_ROW},0", row])
    raises_at(path, 3, field)


# (id, bad row on line 3 under QS_HEADER, field named in the error)
QS_BAD_ROWS = [
    ("too-few-fields", "b,10,resnet50,64,100,5000,4", None),
    ("non-numeric-iterations", "b,10,resnet50,64,many,5000,4,3600", "iterations"),
    ("fractional-iterations", "b,10,resnet50,64,10.5,5000,4,3600", "iterations"),
    ("negative-submit", "b,-0.5,resnet50,64,100,5000,4,3600", "submit_s"),
    ("nan-submit", "b,nan,resnet50,64,100,5000,4,3600", "submit_s"),
    ("empty-model", "b,10,,64,100,5000,4,3600", "model"),
    ("zero-batch-size", "b,10,resnet50,0,100,5000,4,3600", "batch_size"),
    ("inf-deadline", "b,10,resnet50,64,100,inf,4,3600", "deadline_s"),
    ("deadline-equal-to-submit", "b,10,resnet50,64,100,10,4,3600", "deadline_s"),
    ("deadline-before-submit", "b,10,resnet50,64,100,3,4,3600", "deadline_s"),
    ("zero-workers", "b,10,resnet50,64,100,5000,0,3600", "requested_gpus"),
    ("negative-workers", "b,10,resnet50,64,100,5000,-1,3600", "requested_gpus"),
    ("nan-duration", "b,10,resnet50,64,100,5000,4,nan", "duration_s"),
]


@pytest.mark.parametrize(
    ("row", "field"), [case[1:] for case in QS_BAD_ROWS], ids=[case[0] for case in QS_BAD_ROWS]
)
def test_qosched_bad_row_names_file_line_and_field(tmp_path, row, field):
    path = write(tmp_path, [QS_HEADER, QS_GOOD_ROW, row])
    raises_at(path, 3, field)


def test_a_job_running_over_366_days_on_its_workers_is_refused(tmp_path):
    """Read against the speed table: 366 days at the table's speed on the requested workers is
    the most a trace's job may run (a longer one kept the tick-driven policies busy for hours,
    simulating years)."""
    tp = ThroughputModel.bundled("A100")
    rate = tp.curve("resnet50", 64).rate(1)
    fits = int(366 * 86400 * rate)  # just under the bound, whatever the table's speed
    path = write(tmp_path, [QS_HEADER, f"a,0,resnet50,64,{fits},,1,"])
    assert read_trace(path, throughputs=tp).jobs[0].iterations == fits
    path = write(tmp_path, [QS_HEADER, f"a,0,resnet50,64,{fits + int(rate) + 1},,1,"])
    error = raises_at(path, 2, "iterations", throughputs=tp)
    assert "366 days" in str(error)


def test_bad_row_after_a_blank_line_names_its_physical_line(tmp_path):
    path = write(tmp_path, [EF_HEADER, EF_GOOD_ROW, "", "b,10,many,resnet50,5000,64,4,3600"])
    raises_at(path, 4, "iteration")


@pytest.mark.parametrize(
    ("header", "first", "other", "duplicate"),
    [
        (EF_HEADER, EF_GOOD_ROW, "b,1,100,resnet50,5000,64,4,3600", EF_GOOD_ROW),
        (QS_HEADER, QS_GOOD_ROW, "b,1,resnet50,64,100,5000,4,3600", QS_GOOD_ROW),
    ],
    ids=["elasticflow", "qosched"],
)
def test_duplicate_job_id_names_both_lines(tmp_path, header, first, other, duplicate):
    path = write(tmp_path, [header, first, other, duplicate])
    error = raises_at(path, 4, "job_id")
    assert "line 2" in str(error)


# --- bad headers and files --------------------------------------------------------------------

EF_REQUIRED = ["job_id", "iteration", "model_name", "ddl", "batch_size", "num_gpu"]


@pytest.mark.parametrize("missing", EF_REQUIRED)
def test_elasticflow_missing_column_is_named(tmp_path, missing):
    names = [name for name in EF_HEADER.split(",") if name != missing]
    path = write(tmp_path, [",".join(names), ",".join("1" for _ in names)])
    error = raises_at(path, 1, None)
    assert missing in str(error)


QS_REQUIRED = ["job_id", "model", "batch_size", "iterations", "deadline_s", "requested_gpus"]


@pytest.mark.parametrize("missing", QS_REQUIRED)
def test_qosched_missing_column_is_named(tmp_path, missing):
    names = [name for name in QS_HEADER.split(",") if name != missing]
    path = write(tmp_path, [",".join(names), ",".join("1" for _ in names)])
    error = raises_at(path, 1, None)
    assert missing in str(error)


# (id, extra column, its value, the field it names, the value read): when a file names a field
# twice, the ElasticFlow artifact's precedence decides (iteration before num_iteration and
# real_iteration, submission_time before submit_time, deadline before ddl). EF_GOOD_ROW has
# submit_time 0, iteration 100 and ddl 5000.
TWO_NAMES = [
    ("iteration-over-real_iteration", "real_iteration", "7", "iterations", 100),
    ("iteration-over-num_iteration", "num_iteration", "7", "iterations", 100),
    ("submission_time-over-submit_time", "submission_time", "20", "submit_s", 20.0),
    ("deadline-over-ddl", "deadline", "6000", "deadline_s", 6000.0),
]


@pytest.mark.parametrize(
    ("second", "value", "attribute", "expected"),
    [case[1:] for case in TWO_NAMES],
    ids=[case[0] for case in TWO_NAMES],
)
def test_two_names_for_one_field_read_as_the_artifact_does(
    tmp_path, second, value, attribute, expected
):
    path = write(tmp_path, [f"{EF_HEADER},{second}", f"{EF_GOOD_ROW},{value}"])
    assert getattr(read_trace(path).jobs[0], attribute) == expected


def test_real_iteration_alone_is_read(tmp_path):
    header = EF_HEADER.replace("iteration", "real_iteration")
    path = write(tmp_path, [header, EF_GOOD_ROW])
    assert read_trace(path).jobs[0].iterations == 100


def test_philly_layout_reads_iteration_and_duration(tmp_path):
    """The header of the artifact's philly_103959.csv, with its first row."""
    path = write(
        tmp_path,
        [
            "job_id,submit_time,real_iteration,model_name,ddl,batch_size,num_gpu,real_duration,"
            "duration,iteration",
            "0,0,1282877,vgg16,771220,256,1,976570,976570,1282000",
        ],
    )
    job = read_trace(path).jobs[0]
    assert (job.iterations, job.deadline_s, job.duration_s) == (1282000, 771220.0, 976570.0)


def test_a_column_named_twice_in_the_header_raises(tmp_path):
    path = write(tmp_path, [f"{EF_HEADER},num_gpu", f"{EF_GOOD_ROW},8"])
    raises_at(path, 1, "num_gpu")


def test_unrecognised_header_raises_on_line_1(tmp_path):
    path = write(tmp_path, ["id,time,model,workers", "a,0,resnet50,4"])
    raises_at(path, 1, None)


def test_empty_file_raises_naming_the_file(tmp_path):
    path = write(tmp_path, [])
    raises_at(path, None, None)


@pytest.mark.parametrize(
    "lines",
    [[EF_HEADER], [QS_HEADER], [EF_HEADER, "", ""]],
    ids=["elasticflow-header", "qosched-header", "header-and-blank-lines"],
)
def test_header_without_jobs_raises_naming_the_file(tmp_path, lines):
    path = write(tmp_path, lines)
    error = raises_at(path, None, None)
    assert "no jobs" in str(error)


def test_missing_file_raises_naming_the_file(tmp_path):
    raises_at(tmp_path / "absent.csv", None, None)


# --- checks against the throughput tables -----------------------------------------------------


@pytest.mark.parametrize(
    ("model", "batch", "workers"),
    [("resnet50", 64, 1), ("resnet50", 64, 3), ("resnet50", 256, 64), ("resnet50_cifar10", 64, 8)],
    ids=["measured", "interpolated", "largest-measured", "last-before-zero-cells"],
)
def test_trace_with_measured_requests_passes_the_check(tmp_path, a100, model, batch, workers):
    path = write(tmp_path, [EF_HEADER, f"a,0,100,{model},5000,{batch},{workers},3600"])
    assert read_trace(path, throughputs=a100).jobs[0].requested_workers == workers


# (id, model, batch size, GPUs, field in the ElasticFlow layout, field in the qosched layout)
UNMEASURED = [
    ("unknown-model", "resnet999", 64, 1, "model_name", "model"),
    ("batch-size-without-row", "resnet50", 100, 1, "batch_size", "batch_size"),
    ("above-largest-measured", "resnet50", 64, 128, "num_gpu", "requested_gpus"),
    ("zero-cell", "resnet50_cifar10", 64, 16, "num_gpu", "requested_gpus"),
    ("between-zero-cells", "resnet50_cifar10", 64, 12, "num_gpu", "requested_gpus"),
]


@pytest.mark.parametrize(
    ("model", "batch", "workers", "field"),
    [(m, b, g, f) for _, m, b, g, f, _ in UNMEASURED],
    ids=[case[0] for case in UNMEASURED],
)
def test_elasticflow_unmeasured_request_names_the_line(
    tmp_path, a100, model, batch, workers, field
):
    path = write(tmp_path, [EF_HEADER, EF_GOOD_ROW, f"b,1,100,{model},5000,{batch},{workers},3600"])
    raises_at(path, 3, field, throughputs=a100)


@pytest.mark.parametrize(
    ("model", "batch", "workers", "field"),
    [(m, b, g, f) for _, m, b, g, _, f in UNMEASURED],
    ids=[case[0] for case in UNMEASURED],
)
def test_qosched_unmeasured_request_names_the_line(tmp_path, a100, model, batch, workers, field):
    path = write(tmp_path, [QS_HEADER, QS_GOOD_ROW, f"b,1,{model},{batch},100,5000,{workers},3600"])
    raises_at(path, 3, field, throughputs=a100)


def test_unmeasured_request_lists_the_usable_counts(tmp_path, a100):
    path = write(tmp_path, [EF_HEADER, "b,1,100,resnet50_cifar10,5000,64,16,3600"])
    error = raises_at(path, 2, "num_gpu", throughputs=a100)
    assert "1-8" in str(error)


def test_without_throughputs_unmeasured_requests_are_not_checked(tmp_path):
    path = write(tmp_path, [EF_HEADER, "b,1,100,resnet999,5000,100,128,3600"])
    assert read_trace(path).jobs[0].model == "resnet999"
