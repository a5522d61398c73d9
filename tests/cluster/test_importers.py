"""Cluster traces (ITP raw, Helios, Philly, Alibaba PAI) made into deadline traces the way the
ElasticFlow artifact makes its ITP traces: filters, iterations from the run time, deadlines, and
errors that name the file, line and column."""

from __future__ import annotations

from pathlib import Path

import pytest

from qosched.cli.main import main
from qosched.cluster.importers import import_trace
from qosched.cluster.throughput import ThroughputModel
from qosched.cluster.traces import read_trace, write_trace
from qosched.core.errors import InputError

TABLES = ThroughputModel.bundled("A100")


def write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


ITP = [
    "job_id,submission_time,duration,num_gpu",
    "a,100,3600,4",
    "b,700,599,1",  # under 10 minutes: left out
    "c,900,7200,3",  # 3 GPUs: left out
    "d,1000,1800,128",  # more than 64 GPUs: left out
    "e,1300,600,8",
]


def test_itp_jobs_take_their_recorded_run_time_on_their_gpus(tmp_path):
    jobs = import_trace(write(tmp_path, ITP), "itp", TABLES, seed=3)
    assert [(j.job_id, j.submit_s, j.requested_workers) for j in jobs] == [
        ("a", 0.0, 4),
        ("e", 1200.0, 8),
    ]
    for job, run_s in zip(jobs, (3600.0, 600.0), strict=True):
        rate = TABLES.curve(job.model, job.batch_size).rate(job.requested_workers)
        assert job.iterations == round(run_s * rate)
        assert job.batch_size >= job.requested_workers
        assert 0.5 * run_s <= job.deadline_s - job.submit_s <= 1.5 * run_s


def test_import_is_seeded(tmp_path):
    path = write(tmp_path, ITP)
    assert import_trace(path, "itp", TABLES, seed=1) == import_trace(path, "itp", TABLES, seed=1)
    assert import_trace(path, "itp", TABLES, seed=1) != import_trace(path, "itp", TABLES, seed=2)


HELIOS_HEADER = (
    "job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,"
    "duration,queue"
)


def test_helios_keeps_completed_jobs_and_reads_its_times(tmp_path):
    lines = [
        HELIOS_HEADER,
        "1,u,v,n,2,8,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:01:00,x,3600,60",
        "2,u,v,n,2,8,1,FAILED,2020-04-01 00:10:00,2020-04-01 00:11:00,x,3600,60",
        "3,u,v,n,1,8,1,COMPLETED,2020-04-01 01:00:00,2020-04-01 01:00:00,x,1200,0",
    ]
    jobs = import_trace(write(tmp_path, lines), "helios", TABLES)
    assert [(j.job_id, j.submit_s, j.requested_workers) for j in jobs] == [
        ("1", 0.0, 2),
        ("3", 3600.0, 1),
    ]


def test_philly_rows_become_numbered_jobs(tmp_path):
    lines = [
        "timestamp,duration,num_gpus,gpu_time,cluster",
        "2017-10-09 07:01:55,6600.0,1,6600.0,11cb48",
        "2017-10-09 06:13:03,2951.0,2,5902.0,6214e9",
    ]
    jobs = import_trace(write(tmp_path, lines), "philly", TABLES)
    assert [(j.job_id, j.submit_s, j.requested_workers) for j in jobs] == [
        ("philly2", 0.0, 2),
        ("philly1", 2932.0, 1),
    ]


def test_pai_tasks_make_one_job_with_the_gpus_of_all_instances(tmp_path):
    lines = [  # no header; plan_gpu in per cent of a GPU
        "j1,worker,2,Terminated,1000,4600,600,29,100,V100",
        "j1,ps,1,Terminated,1000,4600,600,29,,",
        "j2,worker,1,Failed,2000,9000,600,29,100,V100",
        "j3,tensorflow,1,Terminated,3000,6000,600,29,50,T4",
    ]
    jobs = import_trace(write(tmp_path, lines), "pai", TABLES)
    assert [(j.job_id, j.submit_s, j.requested_workers, j.duration_s) for j in jobs] == [
        ("j1", 0.0, 2, 3600.0),
        ("j3", 2000.0, 1, 3000.0),
    ]


# (id, format, lines, line named, column named)
BAD = [
    ("itp-missing-column", "itp", ["job_id,submission_time,num_gpu", "a,1,2"], 1, None),
    ("itp-text-gpus", "itp", [ITP[0], "a,100,3600,four"], 2, "num_gpu"),
    ("itp-fractional-gpus", "itp", [ITP[0], "a,100,3600,2.5"], 2, "num_gpu"),
    ("itp-huge-gpus", "itp", [ITP[0], "a,100,3600,1e300"], 2, "num_gpu"),
    ("itp-negative-submit", "itp", [ITP[0], "a,-5,3600,4"], 2, "submission_time"),
    ("itp-infinite-duration", "itp", [ITP[0], "a,5,inf,4"], 2, "duration"),
    (
        "helios-bad-date",
        "helios",
        ["job_id,gpu_num,state,submit_time,duration", "1,2,COMPLETED,yesterday,3600"],
        2,
        "submit_time",
    ),
    ("pai-short-row", "pai", ["j1,worker,2,Terminated"], 1, None),
    ("pai-bad-share", "pai", ["j1,worker,2,Terminated,1,9000,600,29,-100,V100"], 1, "plan_gpu"),
    ("itp-duplicate-id", "itp", [ITP[0], "a,0,1000,1", "a,5,1000,1"], 3, "job_id"),
    ("itp-run-over-366-days", "itp", [ITP[0], "a,0,253402300000,1"], 2, "duration"),
    # Submitted late in year 9999: half the run time on, the deadline is in year 10000.
    ("itp-deadline-past-9999", "itp", [ITP[0], "a,0,1000,1", "b,253402000000,1e6,1"], 3, None),
    (
        "philly-run-over-366-days",
        "philly",
        ["timestamp,duration,num_gpus", "2017-10-09 07:01:55,4e8,1"],
        2,
        "duration",
    ),
    (
        "pai-empty-job-name",
        "pai",
        [",worker,1,Terminated,1000,3000,600,29,100,V100"],
        1,
        "job_name",
    ),
    # Rows shorter than the header: the columns read lie past the row's last cell.
    (
        "helios-row-ends-before-duration",
        "helios",
        [HELIOS_HEADER, "1,u,v,n,2,8,1,COMPLETED,2020-04-01 00:00:00"],
        2,
        None,
    ),
    (
        "philly-row-ends-before-duration",
        "philly",
        ["num_gpus,gpu_time,timestamp,cluster,duration", "1,1.0,2020-05-29 11:30:02"],
        2,
        None,
    ),
    (
        "pai-run-over-366-days",
        "pai",
        ["j1,worker,1,Terminated,1000,3000,600,29,100,V100", "j1,ps,1,Terminated,0,4e8,6,2,,"],
        1,
        "end_time",
    ),
]


@pytest.mark.parametrize(
    ("fmt", "lines", "line", "field"), [c[1:] for c in BAD], ids=[c[0] for c in BAD]
)
def test_bad_input_names_file_line_and_column(tmp_path, fmt, lines, line, field):
    path = write(tmp_path, lines)
    with pytest.raises(InputError) as caught:
        import_trace(path, fmt, TABLES)
    message = str(caught.value)
    assert f"{path}:{line}:" in message
    if field is not None:
        assert f"field {field!r}" in message


def test_the_same_id_in_a_row_left_out_is_no_clash(tmp_path):
    # Line 3 ran under 10 minutes: only line 2 becomes a job named "a".
    jobs = import_trace(write(tmp_path, [ITP[0], "a,0,1000,1", "a,5,100,1"]), "itp", TABLES)
    assert [job.job_id for job in jobs] == ["a"]


@pytest.mark.parametrize(
    "tightness",
    [
        (1.0, float("inf")),
        (1e300, 1e300),
        (1.0, float("nan")),
        (2.0, 1.0),
        (0.0, 1.0),
        (1, 101),
        (1e-300, 1e-300),
    ],
    ids=["infinite", "1e300", "nan", "reversed", "zero", "above-100", "1e-300"],
)
def test_bad_tightness_is_refused_naming_it(tmp_path, tightness):
    with pytest.raises(InputError) as caught:
        import_trace(write(tmp_path, ITP), "itp", TABLES, tightness=tightness)
    assert caught.value.field == "tightness"
    assert "0.001 <= LOW <= HIGH <= 100" in caught.value.reason


@pytest.mark.parametrize("tightness", [(1e-3, 1e-3), (100, 100)], ids=["least", "most"])
def test_jobs_at_the_ends_of_the_tightness_range_pass_the_trace_reader(tmp_path, tightness):
    # The second job is submitted in year 9892, where a float's step is 3e-5 s.
    source = write(tmp_path, [ITP[0], "a,0,1000,1", "b,250000000000,1000,1"])
    out = tmp_path / "deadlines.csv"
    write_trace(import_trace(source, "itp", TABLES, tightness=tightness), out)
    assert [job.job_id for job in read_trace(out, TABLES).jobs] == ["a", "b"]


def test_negative_seed_is_refused_as_sim_and_generate_refuse_it(tmp_path):
    with pytest.raises(InputError) as caught:
        import_trace(write(tmp_path, ITP), "itp", TABLES, seed=-1)
    assert caught.value.field == "seed"


@pytest.mark.parametrize(
    ("args", "option"),
    [(["--tightness", "1", "inf"], "--tightness"), (["--seed", "-1"], "--seed")],
    ids=["tightness", "seed"],
)
def test_cli_errors_name_the_option(tmp_path, capsys, args, option):
    source, out = write(tmp_path, ITP), tmp_path / "deadlines.csv"
    argv = ["trace", "import", str(source), "--from", "itp", "--out", str(out), *args]
    assert main(argv) == 2
    assert f"field {option!r}: expected" in capsys.readouterr().err
    assert not out.exists()


def test_a_trace_with_nothing_to_import_says_why(tmp_path):
    with pytest.raises(InputError, match="no job to import"):
        import_trace(write(tmp_path, [ITP[0], ITP[2]]), "itp", TABLES)


def test_a_short_row_says_how_many_fields_the_header_asks_for(tmp_path):
    lines = [HELIOS_HEADER, "1,u,v,n,2,8,1,COMPLETED,2020-04-01 00:00:00"]
    with pytest.raises(InputError, match=r"at least 12 fields \(duration is field 12\), got 9"):
        import_trace(write(tmp_path, lines), "helios", TABLES)


def test_jobs_on_gpu_counts_no_table_measured_are_no_trace(tmp_path, capsys):
    # 2 x 4 + 1 x 4 = 12 GPUs: kept by the filters, but no model has a speed on 12 GPUs.
    lines = ["j1,w,2,Terminated,1000,4600,600,29,400,V100", "j1,ps,1,Terminated,1000,4600,6,2,400,"]
    source, out = write(tmp_path, lines), tmp_path / "deadlines.csv"
    assert main(["trace", "import", str(source), "--from", "pai", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{source}: no job to import" in err
    assert "GPU counts of the 1 job(s) kept (12)" in err
    assert not out.exists()


def test_unknown_format_is_refused(tmp_path):
    with pytest.raises(InputError, match="unknown format"):
        import_trace(write(tmp_path, ITP), "slurm", TABLES)


def test_cli_imports_a_trace_that_sim_cluster_then_reads(tmp_path, capsys):
    source, out = write(tmp_path, ITP), tmp_path / "deadlines.csv"
    assert main(["trace", "import", str(source), "--from", "itp", "--out", str(out)]) == 0
    assert [job.job_id for job in read_trace(out, TABLES).jobs] == ["a", "e"]


def test_sim_cluster_points_a_raw_itp_trace_to_the_importer(tmp_path):
    with pytest.raises(InputError, match="trace import --from itp") as caught:
        read_trace(write(tmp_path, ITP))
    assert ":1:" in str(caught.value)
