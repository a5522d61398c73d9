"""qosched.job, the progress API of users' scripts, read back by the runner's own reader."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import qosched.job
from qosched.backends.local.runner import CommandProgress
from qosched.trainingjob.protocol import ENV_CPUS, ENV_ITERATIONS, ENV_JOB_DIR, ENV_PROGRESS_FILE


@pytest.fixture
def progress_file(tmp_path, monkeypatch):
    path = tmp_path / "command_progress.jsonl"
    monkeypatch.setenv(ENV_PROGRESS_FILE, str(path))
    monkeypatch.delenv("RANK", raising=False)
    return path


def test_outside_qosched_report_does_nothing(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV_PROGRESS_FILE, raising=False)
    assert qosched.job.active() is False
    assert qosched.job.report(5, loss=0.1) is False
    assert qosched.job.checkpoint_dir() is None
    assert qosched.job.total_iterations() is None
    assert list(tmp_path.iterdir()) == []


def test_reports_reach_the_runner(progress_file):
    reader = CommandProgress(progress_file)  # starts after what is there, as the runner does
    assert qosched.job.report(1, loss=2.5) is True
    assert qosched.job.report(2) is True
    assert reader.read() == []
    assert (reader.iteration, reader.loss) == (2, 2.5)  # a line without loss keeps the last one


def test_a_loss_that_is_not_finite_is_written_as_null(progress_file):
    reader = CommandProgress(progress_file)
    qosched.job.report(3, loss=math.nan)
    assert reader.read() == []
    assert reader.iteration == 3
    assert progress_file.read_text().strip() == '{"iteration": 3, "loss": null}'


def test_only_rank_zero_reports(progress_file, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    assert qosched.job.report(1) is False
    assert not progress_file.exists() or progress_file.read_text() == ""


@pytest.mark.parametrize(
    "iteration",
    [-1, 2**53, 1.5, True, "3", None],
    ids=["negative", "2^53", "fraction", "bool", "str", "none"],
)
def test_bad_iterations_are_refused(progress_file, iteration):
    with pytest.raises(ValueError, match="iteration"):
        qosched.job.report(iteration)


def test_environment_is_read(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_ITERATIONS, "400")
    monkeypatch.setenv(ENV_JOB_DIR, str(tmp_path))
    monkeypatch.setenv(ENV_CPUS, "0,1")
    monkeypatch.setenv(qosched.job.ENV_GPUS, "2,3")
    assert qosched.job.total_iterations() == 400
    assert qosched.job.checkpoint_dir() == tmp_path
    assert qosched.job.cpus() == (0, 1)
    assert qosched.job.gpus() == (2, 3)


STOPPING_SCRIPT = """
import sys, time
import qosched.job
assert not qosched.job.stop_requested()
print("ready", flush=True)
deadline = time.monotonic() + 20
while not qosched.job.stop_requested():
    if time.monotonic() > deadline:
        sys.exit(9)
    time.sleep(0.01)
print("stopping cleanly", flush=True)
"""


@pytest.mark.process
def test_stop_requested_turns_sigterm_into_a_flag(tmp_path):
    child = subprocess.Popen(
        [sys.executable, "-c", STOPPING_SCRIPT],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(qosched.job.__file__).parents[1])},
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.05)
        child.send_signal(signal.SIGTERM)
        out, _ = child.communicate(timeout=20)
    finally:
        child.kill()
    assert child.returncode == 0
    assert out.strip() == "stopping cleanly"
