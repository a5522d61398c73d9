"""TrainingJob spec fields for GPUs and users' own commands: resources.minGpus/maxGpus,
spec.workingDir, spec.env and spec.launcher."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from qosched.core.errors import InputError
from qosched.trainingjob.jobspec import (
    MAX_ENV_VALUE,
    Deadline,
    Resources,
    TrainingJobSpec,
    load_job_spec,
    parse_job_spec,
    script_index,
)

NOW = 1_800_000_000.0
BASE: dict[str, Any] = {
    "apiVersion": "qosched/v1",
    "kind": "TrainingJob",
    "metadata": {"name": "mine"},
    "spec": {"command": ["train.py"], "work": {"iterations": 10}, "deadline": "10m"},
}
DELETE = object()


def text(*changes: tuple[str, Any]) -> str:
    document = copy.deepcopy(BASE)
    for path, value in changes:
        *parents, last = path.split(".")
        node = document
        for key in parents:
            node = node.setdefault(key, {})
        if value is DELETE:
            node.pop(last, None)
        else:
            node[last] = value
    return yaml.safe_dump(document, sort_keys=False)


def parse(*changes: tuple[str, Any], base_dir: Path | None = None) -> TrainingJobSpec:
    return parse_job_spec(text(*changes), "job.yaml", now=NOW, base_dir=base_dir)


# --- GPUs ----------------------------------------------------------------------------------------


def test_a_job_without_gpus_stated_is_a_cpu_job():
    spec = parse()
    assert not spec.gpu and spec.resources.bounds() == (1, None)


@pytest.mark.parametrize(
    ("resources", "bounds"),
    [
        pytest.param({"minGpus": 2, "maxGpus": 4}, (2, 4), id="both"),
        pytest.param({"maxGpus": 3}, (1, 3), id="max-only-min-is-1"),
        pytest.param({"minGpus": 2}, (2, None), id="min-only"),
        pytest.param({"minGpus": 1, "memory": "1Gi"}, (1, None), id="with-memory"),
    ],
)
def test_a_job_stating_gpus_is_a_gpu_job_sized_in_gpus(resources, bounds):
    spec = parse(("spec.resources", resources))
    assert spec.gpu and spec.restarts_on_resize
    assert spec.resources.bounds() == bounds


def test_every_new_field_round_trips_through_to_dict(tmp_path):
    spec = parse(
        ("spec.resources", {"minGpus": 1, "maxGpus": 2}),
        ("spec.workingDir", str(tmp_path)),
        ("spec.env", {"B": "2", "A": ""}),
        ("spec.launcher", "torchrun"),
    )
    again = TrainingJobSpec.from_dict(spec.to_dict())
    assert again == spec
    assert dict(again.env) == {"A": "", "B": "2"}
    assert again.to_dict()["spec"]["resources"] == {"minGpus": 1, "maxGpus": 2}


# --- workingDir ----------------------------------------------------------------------------------


def test_a_relative_working_dir_is_the_spec_files_folders(tmp_path):
    (tmp_path / "runs" / "a").mkdir(parents=True)
    spec = parse(("spec.workingDir", "runs/./a/../a"), base_dir=tmp_path)
    assert spec.working_dir == str(tmp_path / "runs" / "a")


def test_load_job_spec_resolves_against_the_current_folder(tmp_path, monkeypatch):
    (tmp_path / "specs" / "work").mkdir(parents=True)
    (tmp_path / "work").mkdir()
    path = tmp_path / "specs" / "job.yaml"
    path.write_text(text(("spec.workingDir", "work")))
    monkeypatch.chdir(tmp_path)
    assert load_job_spec(path, now=NOW).working_dir == str(tmp_path / "work")
    other = tmp_path / "specs"
    assert load_job_spec(path, now=NOW, base_dir=other).working_dir == str(other / "work")


def test_a_stored_spec_keeps_a_working_dir_that_is_gone(tmp_path):
    gone = tmp_path / "gone"
    spec = TrainingJobSpec("a", 1, Deadline(relative_s=1), command=("x",), working_dir=str(gone))
    assert TrainingJobSpec.from_dict(spec.to_dict()).working_dir == str(gone)


# --- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field", "phrase"),
    [
        pytest.param(
            [("spec.resources", {"minGpus": 0})], "spec.resources.minGpus", "[1, 1024]", id="gpus-0"
        ),
        pytest.param(
            [("spec.resources", {"minGpus": 1025})],
            "spec.resources.minGpus",
            "1024",
            id="gpus-over-bound",
        ),
        pytest.param(
            [("spec.resources", {"minGpus": 3, "maxGpus": 2})],
            "spec.resources.minGpus",
            "must not exceed maxGpus",
            id="min-above-max",
        ),
        pytest.param(
            [("spec.resources", {"minGpus": 1, "maxCpus": 2})],
            "spec.resources.maxCpus",
            "sized in GPUs",
            id="gpus-and-cpus",
        ),
        pytest.param(
            [("spec.resources", {"minGpus": 1}), ("spec.requestedCpus", 1)],
            "spec.requestedCpus",
            "sized in GPUs",
            id="gpus-and-requested-cpus",
        ),
        pytest.param(
            [("spec.command", DELETE), ("spec.workload", "cnn"), ("spec.resources.minGpus", 1)],
            "spec.resources.minGpus",
            "command jobs only",
            id="workload-on-gpus",
        ),
        pytest.param(
            [("spec.command", DELETE), ("spec.workload", "cnn"), ("spec.env", {"A": "1"})],
            "spec.env",
            "command jobs only",
            id="workload-with-env",
        ),
        pytest.param(
            [("spec.workingDir", "runs")],
            "spec.workingDir",
            "expected an absolute path",
            id="relative-without-a-base",
        ),
        pytest.param(
            [("spec.workingDir", "/no/such/folder/here")],
            "spec.workingDir",
            "is not an existing folder",
            id="missing-folder",
        ),
        pytest.param(
            [("spec.workingDir", "/x" * 3000)],
            "spec.workingDir",
            "at most 4096 characters",
            id="path-too-long",
        ),
        pytest.param(
            [("spec.env", ["A=1"])], "spec.env", "expected a mapping", id="env-not-a-mapping"
        ),
        pytest.param(
            [("spec.env", {"1A": "x"})], "spec.env.1A", "variable name", id="env-bad-name"
        ),
        pytest.param(
            [("spec.env", {"A=B": "x"})], "spec.env.A=B", "variable name", id="env-name-with-="
        ),
        pytest.param(
            [("spec.env", {"QOSCHED_GPUS": "0"})],
            "spec.env.QOSCHED_GPUS",
            "set by qosched itself",
            id="env-reserved-prefix",
        ),
        pytest.param(
            [("spec.env", {"CUDA_VISIBLE_DEVICES": "0"})],
            "spec.env.CUDA_VISIBLE_DEVICES",
            "set by qosched itself",
            id="env-cuda-devices",
        ),
        pytest.param(
            [("spec.env", {"A": 1})], "spec.env.A", "expected a string value", id="env-number"
        ),
        pytest.param(
            [("spec.env", {"A": "x" * (MAX_ENV_VALUE + 1)})],
            "spec.env.A",
            "at most 32768 characters",
            id="env-value-too-long",
        ),
        pytest.param([("spec.env", {"A": "a\x00b"})], "spec.env.A", "NUL", id="env-nul"),
        pytest.param(
            [("spec.env", {f"V{i}": "" for i in range(257)})],
            "spec.env",
            "at most 256 variables",
            id="env-too-many",
        ),
        pytest.param(
            [("spec.launcher", "mpirun")], "spec.launcher", "mpirun", id="unknown-launcher"
        ),
    ],
)
def test_refusals_name_the_field(changes, field, phrase):
    with pytest.raises(InputError) as error:
        parse(*changes)
    assert error.value.field == field
    assert phrase in str(error.value)
    assert error.value.line is not None


def test_a_working_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match="is not an existing folder"):
        parse(("spec.workingDir", str(tmp_path / "file")))


@pytest.mark.parametrize(
    "build",
    [
        lambda: Resources(max_gpus=2),
        lambda: Resources(min_gpus=2, max_gpus=1),
        lambda: Resources(min_gpus=2**53),
        lambda: TrainingJobSpec("a", 1, Deadline(relative_s=1), command=("x",), working_dir="r"),
        lambda: TrainingJobSpec("a", 1, Deadline(relative_s=1), command=("x",), env={"Q=": ""}),
        lambda: TrainingJobSpec(
            "a", 1, Deadline(relative_s=1), command=("x",), env={"QOSCHED_CPUS": "0"}
        ),
        lambda: TrainingJobSpec("a", 1, Deadline(relative_s=1), command=("x",), launcher="mpi"),
        lambda: TrainingJobSpec(
            "a", 1, Deadline(relative_s=1), workload="cnn", launcher="torchrun"
        ),
        lambda: TrainingJobSpec(
            "a", 1, Deadline(relative_s=1), workload="cnn", resources=Resources(min_gpus=1)
        ),
    ],
    ids=[
        "max-gpus-without-min",
        "gpus-min-above-max",
        "gpus-2^53",
        "relative-working-dir",
        "bad-env-name",
        "reserved-env",
        "unknown-launcher",
        "workload-launcher",
        "workload-gpus",
    ],
)
def test_constructors_check_the_new_fields(build):
    with pytest.raises(InputError):
        build()


# --- the command's script ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "launcher", "index"),
    [
        (["python", "train.py"], None, 1),
        (["python3.11", "-u", "-X", "dev", "train.py", "--lr", "1"], None, 4),
        (["/usr/bin/python3", "-W", "ignore", "sub/train.py"], None, 3),
        (["train.py", "--epochs", "3"], None, 0),
        (["python", "-m", "pkg.train"], None, None),
        (["python", "-c", "print(1)"], None, None),
        (["python", "-"], None, None),
        (["python", "script"], None, None),  # no .py: nothing to check
        (["bash", "run.sh"], None, None),
        (["./train"], None, None),
        (["ddp/train.py", "--x"], "torchrun", 0),
        (["python", "train.py"], "torchrun", None),  # torchrun runs `python` as the program
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else str(v),
)
def test_script_index_finds_the_python_script(command, launcher, index):
    assert script_index(tuple(command), launcher) == index


def test_a_relative_script_is_found_from_the_working_dir_and_stored_absolute(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "train.py").write_text("")
    spec = parse_job_spec(
        text(("spec.command", ["python3", "./train.py", "--lr", "0.1"]),
             ("spec.workingDir", "runs")),
        "job.yaml",
        now=NOW,
        base_dir=tmp_path,
        scripts_in=tmp_path / "elsewhere",
    )  # fmt: skip
    assert spec.command == ("python3", str(tmp_path / "runs" / "train.py"), "--lr", "0.1")


def test_without_a_working_dir_the_script_is_found_where_the_job_will_run(tmp_path):
    (tmp_path / "train.py").write_text("")
    spec = parse_job_spec(
        text(("spec.command", ["python3", "train.py"])), "job.yaml", now=NOW, scripts_in=tmp_path
    )
    assert spec.command == ("python3", str(tmp_path / "train.py"))
    with pytest.raises(InputError) as caught:
        parse_job_spec(
            text(("spec.command", ["python3", "train.py"])),
            "job.yaml",
            now=NOW,
            scripts_in=tmp_path / "other",
        )
    assert caught.value.field == "spec.command[1]"
    assert f"no such script: {tmp_path / 'other' / 'train.py'}" in caught.value.reason


def test_a_folder_named_like_a_script_is_no_script(tmp_path):
    (tmp_path / "train.py").mkdir()
    with pytest.raises(InputError, match="no such script"):
        parse_job_spec(
            text(("spec.command", ["train.py"])), "job.yaml", now=NOW, scripts_in=tmp_path
        )


def test_without_scripts_in_nothing_is_looked_up(tmp_path):
    """What ``qosched k8s job`` reads: the script lives in the container image."""
    spec = parse_job_spec(text(("spec.command", ["python", "missing.py"])), "job.yaml", now=NOW)
    assert spec.command == ("python", "missing.py")
