"""The trainer callbacks in real training runs: every step reported, a SIGTERM turned into a
checkpoint, and the next run resuming from it with the step count going on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from qosched.trainingjob.protocol import ENV_ITERATIONS, ENV_JOB_DIR, ENV_PROGRESS_FILE

pytestmark = pytest.mark.process

SCRIPT = Path(__file__).with_name("trainers.py")


def run(framework: str, job_dir: Path, steps: int, stop_at: int | None = None):
    env = {
        **os.environ,
        ENV_PROGRESS_FILE: str(job_dir / "command_progress.jsonl"),
        ENV_JOB_DIR: str(job_dir),
        ENV_ITERATIONS: str(steps),
        "OMP_NUM_THREADS": "1",
        "PYTHONWARNINGS": "ignore",
    }
    env.pop("RANK", None)
    argv = [sys.executable, str(SCRIPT), framework, str(steps)]
    if stop_at is not None:
        argv.append(str(stop_at))
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240)


def reported(job_dir: Path) -> list[dict]:
    lines = (job_dir / "command_progress.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["huggingface", "lightning"])
def test_stop_saves_and_the_next_run_resumes(framework, tmp_path):
    first = run(framework, tmp_path, steps=8, stop_at=3)
    assert first.returncode == 0, first.stderr[-3000:]
    # Stopped at step 3: the Trainer returns early, Lightning exits from inside fit().
    assert "returned at step 8" not in first.stdout
    iterations = [line["iteration"] for line in reported(tmp_path)]
    assert iterations == [1, 2, 3]
    assert any(isinstance(line["loss"], float) for line in reported(tmp_path))

    second = run(framework, tmp_path, steps=8)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "training returned at step 8" in second.stdout
    iterations = [line["iteration"] for line in reported(tmp_path)]
    assert iterations == [1, 2, 3, 4, 5, 6, 7, 8]  # resumed at 3, not from scratch


def test_each_callback_is_named_for_its_library_and_keeps_its_earlier_name():
    from qosched.integrations import huggingface, lightning

    assert huggingface.QoschedTrainerCallback.__name__ == "QoschedTrainerCallback"
    assert lightning.QoschedLightningCallback.__name__ == "QoschedLightningCallback"
    with pytest.warns(DeprecationWarning, match="QoschedTrainerCallback"):
        assert huggingface.QoschedCallback is huggingface.QoschedTrainerCallback
    with pytest.warns(DeprecationWarning, match="QoschedLightningCallback"):
        assert lightning.QoschedCallback is lightning.QoschedLightningCallback
    with pytest.raises(AttributeError, match="no attribute 'QoschedNoSuchCallback'"):
        _ = lightning.QoschedNoSuchCallback
