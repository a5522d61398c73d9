"""The runner side of GPUs and command options: job.json's working_dir/env/launcher,
allocation.json's gpus, and the environment a command starts with."""

from __future__ import annotations

import json
import os
import sys

import pytest

from qosched.backends.local.affinity import set_process_affinity
from qosched.backends.local.runner import (
    StopRequest,
    command_argv,
    command_environment,
    run_job,
)
from qosched.core.errors import InputError
from qosched.trainingjob.protocol import (
    EXIT_INPUT_ERROR,
    JOB_FILE,
    Allocation,
    RunnerJob,
    parse_allocation,
    parse_runner_job,
    write_allocation,
    write_runner_job,
)

pytestmark = pytest.mark.process

BASE = {"job_id": "j", "command": ["x"], "iterations": 5, "seed": 0, "checkpoint_every": 1}


def test_job_json_with_every_command_option_round_trips(tmp_path):
    job = RunnerJob(
        "j",
        None,
        ("x",),
        5,
        0,
        1,
        working_dir=str(tmp_path),
        env=(("A", "1"),),
        launcher="torchrun",
    )
    assert parse_runner_job(json.loads(json.dumps(job.to_json()))) == job


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        pytest.param({"working_dir": "relative"}, "working_dir", id="relative-dir"),
        pytest.param({"working_dir": 3}, "working_dir", id="dir-not-text"),
        pytest.param({"env": {"A": 1}}, "env", id="env-number"),
        pytest.param({"env": {"QOSCHED_CPUS": "0"}}, "env", id="env-reserved"),
        pytest.param({"env": {"A=B": "x"}}, "env", id="env-name-with-="),
        pytest.param({"launcher": "mpirun"}, "launcher", id="unknown-launcher"),
        pytest.param(
            {"command": None, "workload": "cnn", "launcher": "torchrun"},
            "workload",
            id="workload-with-launcher",
        ),
    ],
)
def test_bad_command_options_in_job_json_are_refused(extra, field):
    with pytest.raises(InputError) as error:
        parse_runner_job({**BASE, **extra})
    assert error.value.field == field


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [
        pytest.param(None, (), id="absent"),
        pytest.param([], (), id="none"),
        pytest.param([3, 1], (3, 1), id="some"),
    ],
)
def test_allocation_gpus_are_read(gpus, expected):
    data = {"cpus": [0], "version": 1} | ({} if gpus is None else {"gpus": gpus})
    assert parse_allocation(data, cpu_count=1).gpus == expected


@pytest.mark.parametrize(
    "gpus",
    [
        pytest.param([-1], id="negative"),
        pytest.param([1024], id="too-high"),
        pytest.param([0, 0], id="twice"),
        pytest.param([0.5], id="fraction"),
        pytest.param("0,1", id="text"),
    ],
)
def test_bad_allocation_gpus_are_refused(gpus):
    with pytest.raises(InputError) as error:
        parse_allocation({"cpus": [0], "version": 1, "gpus": gpus}, cpu_count=1)
    assert error.value.field == "gpus"


def test_a_commands_environment_puts_qosched_variables_over_the_specs(tmp_path):
    job = RunnerJob("j", None, ("x",), 5, 0, 1, env=(("OMP_NUM_THREADS", "7"), ("MINE", "m")))
    env = command_environment(
        job,
        tmp_path,
        (2, 3, 4, 5),
        (1, 3),
        processes=2,
        progress_file=tmp_path / "p",
        base={"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0,1,2,3", "QOSCHED_RUNNER_CRASH_AT": "1"},
    )
    assert env["CUDA_VISIBLE_DEVICES"] == env["QOSCHED_GPUS"] == "1,3"  # not the service's
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["QOSCHED_CPUS"] == "2,3,4,5"
    assert env["OMP_NUM_THREADS"] == "7" and env["MINE"] == "m" and env["PATH"] == "/bin"
    assert "QOSCHED_RUNNER_CRASH_AT" not in env


def test_omp_threads_are_the_cores_shared_among_the_processes(tmp_path):
    job = RunnerJob("j", None, ("x",), 5, 0, 1, launcher="torchrun")
    env = command_environment(
        job, tmp_path, (0, 1, 2, 3, 4), (), processes=2, progress_file=tmp_path / "p", base={}
    )
    assert env["OMP_NUM_THREADS"] == "2"
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["QOSCHED_GPUS"] == ""


def test_a_command_whose_working_dir_is_gone_fails_as_bad_input(tmp_path):
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    gone = tmp_path / "gone"
    write_runner_job(
        job_dir / JOB_FILE,
        RunnerJob("j", None, (sys.executable, "-c", "pass"), 1, 0, 1, working_dir=str(gone)),
    )
    cores = tuple(sorted(os.sched_getaffinity(0)))
    write_allocation(job_dir / "allocation.json", Allocation(cores[:1], 1))
    try:
        assert run_job(job_dir, stop=StopRequest()) == EXIT_INPUT_ERROR
    finally:
        set_process_affinity(os.getpid(), cores)  # the runner pinned this process
    last = json.loads((job_dir / "progress.jsonl").read_text().splitlines()[-1])
    assert last["event"] == "error" and str(gone) in last["message"]
    assert "working_dir" in last["message"]


@pytest.mark.parametrize(
    "program",
    [pytest.param((), id="script"), pytest.param((sys.executable,), id="interpreter-first")],
)
def test_a_torchrun_job_starts_one_process_per_core(tmp_path, program):
    """Without torch.distributed doing any work: the script only writes what it sees."""
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    script = tmp_path / "see.py"
    script.write_text(
        "import json, os\n"
        "with open(os.path.join(os.environ['QOSCHED_JOB_DIR'], 'ranks'), 'a') as out:\n"
        "    out.write(json.dumps([os.environ['RANK'], os.environ['WORLD_SIZE'], os.getcwd()])"
        " + '\\n')\n"
        "if os.environ['RANK'] == '0':\n"
        "    open(os.environ['QOSCHED_PROGRESS_FILE'], 'a').write('{\"iteration\": 1}\\n')\n"
    )
    write_runner_job(
        job_dir / JOB_FILE,
        RunnerJob(
            "j", None, (*program, "see.py"), 1, 0, 1, working_dir=str(tmp_path), launcher="torchrun"
        ),
    )
    every = tuple(sorted(os.sched_getaffinity(0)))
    cores = every[:2]
    write_allocation(job_dir / "allocation.json", Allocation(cores, 1))
    try:
        assert run_job(job_dir, stop=StopRequest()) == 0
    finally:
        set_process_affinity(os.getpid(), every)  # the runner pinned this process
    ranks = sorted(json.loads(line) for line in (job_dir / "ranks").read_text().splitlines())
    assert ranks == [[str(rank), str(len(cores)), str(tmp_path)] for rank in range(len(cores))]


TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node"]


@pytest.mark.parametrize(
    ("command", "launcher", "processes", "expected"),
    [
        (("python3", "train.py", "--lr", "0.1"), None, 1, ["python3", "train.py", "--lr", "0.1"]),
        (("train.py", "--lr", "0.1"), "torchrun", 2, [*TORCHRUN, "2", "train.py", "--lr", "0.1"]),
        (
            ("/opt/py/bin/python", "t.py"),
            "torchrun",
            4,
            [*TORCHRUN, "4", "--no-python", "/opt/py/bin/python", "t.py"],
        ),
        (("./run.sh",), "torchrun", 1, [*TORCHRUN, "1", "--no-python", "./run.sh"]),
    ],
    ids=["as-is", "torchrun-script", "torchrun-interpreter", "torchrun-program"],
)
def test_the_childs_command_line(command, launcher, processes, expected, tmp_path):
    if launcher == "torchrun":  # torchrun's per-run folders go with the job's
        at = expected.index("--nproc-per-node") + 2
        expected[at:at] = ["--log-dir", str(tmp_path / "torchrun")]
    assert command_argv(command, launcher, processes, tmp_path) == expected
