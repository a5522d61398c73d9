"""The job-directory files: job.json and allocation.json validation, progress and result files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from qosched.backends.local.progress import ProgressLog, RunnerEvent, read_progress
from qosched.core.errors import InputError
from qosched.trainingjob.protocol import (
    Allocation,
    RunnerJob,
    load_runner_job,
    parse_allocation,
    parse_runner_job,
    read_allocation,
    write_allocation,
    write_runner_job,
)

VALID: dict[str, Any] = {
    "job_id": "j1",
    "workload": "cnn",
    "command": None,
    "iterations": 100,
    "seed": 7,
    "checkpoint_every": 25,
}


def changed(**fields: Any) -> dict[str, Any]:
    """VALID with ``fields`` replaced; a value of ``...`` removes the field."""
    data = {**VALID, **fields}
    return {name: value for name, value in data.items() if value is not ...}


def test_valid_job_spec_parses() -> None:
    spec = parse_runner_job(VALID)
    assert spec == RunnerJob("j1", "cnn", None, 100, 7, 25)


def test_job_spec_roundtrips_through_the_file(tmp_path: Path) -> None:
    spec = RunnerJob("j2", None, ("python", "train.py"), 10, 0, 5)
    write_runner_job(tmp_path / "job.json", spec)
    assert load_runner_job(tmp_path / "job.json") == spec


@pytest.mark.parametrize(
    ("data", "field", "expected"),
    [
        (changed(iterations=...), "iterations", "missing required field"),
        (changed(job_id=...), "job_id", "missing required field"),
        (changed(iterations="100"), "iterations", "expected a whole number >= 1"),
        (changed(iterations=2.5), "iterations", "expected a whole number >= 1"),
        (changed(iterations=0), "iterations", "expected a whole number >= 1"),
        (changed(seed=True), "seed", "expected a whole number in [0, 2**63)"),
        (changed(seed=-1), "seed", "expected a whole number in [0, 2**63)"),
        (changed(checkpoint_every=0), "checkpoint_every", "expected a whole number >= 1"),
        (changed(job_id=""), "job_id", "expected a non-empty string"),
        (changed(workload="resnet"), "workload", "unknown workload 'resnet'"),
        (changed(workload=3), "workload", "expected a workload name"),
        (changed(workload=None), "command", "set exactly one of"),
        (changed(command=["python"]), "workload", "set exactly one of"),
        (changed(workload=None, command=[]), "command", "expected a non-empty list"),
        (changed(workload=None, command="python x.py"), "command", "expected a non-empty list"),
        (changed(workload=None, command=["python", 1]), "command", "expected a non-empty list"),
        (changed(batch_size=0), "batch_size", "expected a whole number >= 1"),
        (changed(workload=None, command=["x"], batch_size=4), "batch_size", "built-in workloads"),
        (changed(iteration=5), "iteration", "unknown field"),
    ],
    ids=[
        "missing-iterations",
        "missing-job-id",
        "string-iterations",
        "float-iterations",
        "zero-iterations",
        "bool-seed",
        "negative-seed",
        "zero-checkpoint-every",
        "empty-job-id",
        "unknown-workload",
        "non-string-workload",
        "neither-workload-nor-command",
        "both-workload-and-command",
        "empty-command",
        "string-command",
        "non-string-argument",
        "zero-batch-size",
        "batch-size-with-command",
        "misspelt-field",
    ],
)
def test_bad_job_spec_names_the_field(data: dict[str, Any], field: str, expected: str) -> None:
    with pytest.raises(InputError) as info:
        parse_runner_job(data, source="job.json")
    assert info.value.field == field
    assert expected in str(info.value)
    assert str(info.value).startswith(f"job.json: field {field!r}: ")


def test_unknown_workload_lists_the_known_ones() -> None:
    with pytest.raises(InputError, match="expected one of: cnn, transformer"):
        parse_runner_job(changed(workload="resnet"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [("{", "not valid JSON"), ("[1, 2]", "expected a JSON object, got list")],
    ids=["broken-json", "not-an-object"],
)
def test_unreadable_job_file_names_the_file(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "job.json"
    path.write_text(text)
    with pytest.raises(InputError, match=expected) as info:
        load_runner_job(path)
    assert info.value.source == str(path)


def test_missing_job_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read job spec"):
        load_runner_job(tmp_path / "job.json")


def test_allocation_roundtrips(tmp_path: Path) -> None:
    write_allocation(tmp_path / "allocation.json", Allocation((1, 0), 4))
    assert read_allocation(tmp_path / "allocation.json", cpu_count=2) == Allocation((1, 0), 4)
    # Atomic writes leave no temp file behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["allocation.json"]


@pytest.mark.parametrize(
    ("data", "field", "expected"),
    [
        (
            {"cpus": [0, 4], "version": 1},
            "cpus",
            "unknown core(s) [4]; this machine has cores 0..3",
        ),
        ({"cpus": [], "version": 1}, "cpus", "non-empty list"),
        ({"cpus": [0, 0], "version": 1}, "cpus", "duplicate"),
        ({"cpus": ["0"], "version": 1}, "cpus", "non-empty list"),
        ({"cpus": [0], "version": -1}, "version", "whole number >= 0"),
        ({"cpus": [0]}, "version", "missing required field"),
        ({"cpus": [0], "version": 1, "threads": 2}, "threads", "unknown field"),
    ],
    ids=[
        "unknown-core",
        "no-cores",
        "duplicate-core",
        "string-core",
        "negative-version",
        "missing-version",
        "unknown-field",
    ],
)
def test_bad_allocation_names_the_field(data: dict[str, Any], field: str, expected: str) -> None:
    with pytest.raises(InputError) as info:
        parse_allocation(data, cpu_count=4)
    assert info.value.field == field
    assert expected in str(info.value)


def test_progress_log_roundtrips_and_skips_a_line_being_written(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    with ProgressLog(path) as log:
        log.cpus = 2
        log.write(
            RunnerEvent.START, iteration=0, loss=None, resumed_from=0, cpu_ids=[0, 1], threads=2
        )
        log.write(RunnerEvent.PROGRESS, iteration=3, loss=float("nan"))
    with open(path, "a") as handle:
        handle.write('{"t": 1, "event": "prog')  # a writer caught mid-line
    start, progress = read_progress(path)
    assert (start.event, start.resumed_from, start.cpu_ids, start.threads) == (
        RunnerEvent.START,
        0,
        (0, 1),
        2,
    )
    assert (progress.iteration, progress.cpus, progress.loss) == (3, 2, None)  # NaN -> null
    json.loads(path.read_text().splitlines()[1])  # strict JSON: no NaN token


def test_malformed_progress_line_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    path.write_text('{"t": 1, "event": "start", "cpus": 1}\n{"t": 2, "event": "nope", "cpus": 1}\n')
    with pytest.raises(InputError, match=r"progress\.jsonl:2: "):
        read_progress(path)


def test_progress_log_refuses_unknown_fields(tmp_path: Path) -> None:
    with ProgressLog(tmp_path / "p.jsonl") as log, pytest.raises(TypeError, match="lose"):
        log.write(RunnerEvent.PROGRESS, iteration=1, loss=0.5, lose=1)


def test_a_restarted_runner_cuts_the_line_its_killed_predecessor_left_unfinished(
    tmp_path: Path,
) -> None:
    path = tmp_path / "progress.jsonl"
    with ProgressLog(path) as log:
        log.write(RunnerEvent.START, iteration=0, loss=None)
    with open(path, "a") as handle:
        handle.write('{"t": 1, "event": "prog')  # killed in mid-write
    with ProgressLog(path) as log:
        log.write(RunnerEvent.PROGRESS, iteration=4, loss=None)
    assert [(e.event, e.iteration) for e in read_progress(path)] == [
        (RunnerEvent.START, 0),
        (RunnerEvent.PROGRESS, 4),
    ]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"t": 1, "event": "progress", "cpus": 1, "iteration": 1e20}', "field 'iteration'"),
        ('{"t": 1, "event": "progress", "cpus": 1, "iteration": 2.5}', "field 'iteration'"),
        ('{"t": 1, "event": "progress", "cpus": 1, "iteration": true}', "field 'iteration'"),
        ('{"t": 1e300, "event": "progress", "cpus": 1}', "field 't'"),
        ('{"t": 1, "event": "progress", "cpus": -1}', "field 'cpus'"),
        ('{"t": 1, "event": "progress", "cpus": 1, "loss": NaN}', "field 'loss'"),
        ('{"t": 1, "event": "start", "cpus": 1, "cpu_ids": [0, -2]}', "field 'cpu_ids'"),
        ('{"t": 1, "event": "done", "cpus": 1, "exit_code": 1e9}', "field 'exit_code'"),
        ('{"t": 1, "event": "progress", "cpus": 1, "iteration": ' + "9" * 5000 + "}", "JSON"),
    ],
    ids=[
        "iteration-1e20",
        "iteration-fraction",
        "iteration-bool",
        "time-past-9999",
        "cpus-negative",
        "loss-nan",
        "cpu-id-negative",
        "exit-code-huge",
        "iteration-5000-digits",
    ],
)
def test_a_progress_line_out_of_bounds_is_an_error_naming_the_line(
    tmp_path: Path, line: str, expected: str
) -> None:
    path = tmp_path / "progress.jsonl"
    path.write_text('{"t": 1, "event": "start", "cpus": 1}\n' + line + "\n")
    with pytest.raises(InputError, match=r"progress\.jsonl:2: ") as info:
        read_progress(path)
    assert expected in str(info.value)
