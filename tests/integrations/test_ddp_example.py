"""The DDP example under torchrun: two gloo processes train and report; stopped by SIGTERM (as
qosched stops a job), it saves at the step all ranks agreed on; restarted with one process (a
re-size by restart), it resumes there and finishes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from qosched.trainingjob.protocol import ENV_ITERATIONS, ENV_JOB_DIR, ENV_PROGRESS_FILE

pytestmark = pytest.mark.process

EXAMPLE = Path(__file__).parents[2] / "examples" / "local" / "ddp" / "train.py"


def torchrun(job_dir: Path, processes: int, iterations: int) -> subprocess.Popen:
    env = {
        **os.environ,
        ENV_PROGRESS_FILE: str(job_dir / "command_progress.jsonl"),
        ENV_JOB_DIR: str(job_dir),
        ENV_ITERATIONS: str(iterations),
        "OMP_NUM_THREADS": "1",
    }
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    argv += ["--nproc-per-node", str(processes), "--log-dir", str(job_dir / "torchrun")]
    argv.append(str(EXAMPLE))
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )


def reported(job_dir: Path) -> list[int]:
    path = job_dir / "command_progress.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["iteration"] for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_stopped_then_resumed_with_fewer_processes(tmp_path):
    first = torchrun(tmp_path, processes=2, iterations=10**6)
    try:
        deadline = time.monotonic() + 120
        while len(reported(tmp_path)) < 10:
            assert first.poll() is None, first.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "no progress from the DDP job"
            time.sleep(0.2)
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=60)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        first.stderr.close()
    before = reported(tmp_path)
    assert before == list(range(1, len(before) + 1))  # every step once, rank 0 only
    saved = torch.load(tmp_path / "ddp-checkpoint.pt", map_location="cpu")["step"]
    assert saved == before[-1]  # saved at the step every rank stopped after

    second = torchrun(tmp_path, processes=1, iterations=saved + 5)
    _, errors = second.communicate(timeout=120)
    assert second.returncode == 0, errors.decode()[-3000:]
    assert reported(tmp_path) == list(range(1, saved + 6))  # resumed, nothing repeated
