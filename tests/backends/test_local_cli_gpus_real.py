"""A GPU command job through the CLI against a real service declared with two GPUs: ``qosched
up --gpus 0,1``, ``submit --wait`` of a spec whose relative ``workingDir`` is the current
folder's, and what the job's process saw."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from qosched.backends.local.home import ENDPOINT_FILE
from qosched.cli.main import main

WAIT_S = 120.0
SEE = """\
import json, os
seen = {"cwd": os.getcwd(), "cuda": os.environ["CUDA_VISIBLE_DEVICES"],
        "gpus": os.environ["QOSCHED_GPUS"], "mine": os.environ.get("MY_SETTING")}
with open(os.path.join(os.environ["QOSCHED_JOB_DIR"], "seen.json"), "w") as out:
    json.dump(seen, out)
with open(os.environ["QOSCHED_PROGRESS_FILE"], "a") as progress:
    progress.write(json.dumps({"iteration": int(os.environ["QOSCHED_ITERATIONS"])}) + "\\n")
"""


def test_a_gpu_job_submitted_from_the_cli_sees_its_gpu_folder_and_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    home, specs = tmp_path / "home", tmp_path / "specs"
    (specs / "work").mkdir(parents=True)
    (specs / "see.py").write_text(SEE)
    spec = {
        "apiVersion": "qosched/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "sees"},
        "spec": {
            "command": [sys.executable, str(specs / "see.py")],
            "workingDir": "specs/work",
            "env": {"MY_SETTING": "on"},
            "work": {"iterations": 3},
            "deadline": "5m",
            "resources": {"minGpus": 1, "maxGpus": 1},
            "bestEffort": True,
        },
    }
    (specs / "job.yaml").write_text(yaml.safe_dump(spec))
    codes: list[int] = []
    argv = ["up", "--home", str(home), "--tick", "0.2", "--gpus", "0,1"]
    thread = threading.Thread(target=lambda: codes.append(main(argv)))
    thread.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while not (home / ENDPOINT_FILE).exists():
            assert thread.is_alive() and time.monotonic() < deadline, "the service did not start"
            time.sleep(0.05)
        monkeypatch.chdir(tmp_path)  # relative paths are this folder's, not the spec's
        assert main(["submit", "--home", str(home), "--wait", "specs/job.yaml"]) == 0
        capsys.readouterr()
        assert main(["status", "--home", str(home), "--json"]) == 0
        status = json.loads(capsys.readouterr().out)
        assert main(["status", "--home", str(home), "j-000001"]) == 0
        detail = capsys.readouterr().out
    finally:
        assert main(["down", "--home", str(home)]) == 0
        thread.join(WAIT_S)
    assert codes == [0]
    seen = json.loads((home / "jobs" / "j-000001" / "seen.json").read_text())
    assert seen["cwd"] == str(specs / "work")
    assert seen["cuda"] == seen["gpus"] and seen["cuda"] in ("0", "1")
    assert seen["mine"] == "on"
    [job] = status  # `status --json` lists the jobs
    assert job["state"] == "succeeded"
    assert f"holds GPUs {seen['cuda']}" in detail
