"""The CLI's part in GPUs and command options: ``up --gpus``, GPUs in ``status`` and
``status JOB``, and ``submit`` resolving relative paths against the folder it runs in."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from service_fakes import (
    FakeLocalService,
    FakeService,
    Running,
    fake_service_module,
    make_job,
    running_service,
)

from qosched.backends.local import detail
from qosched.backends.local.api import ServiceStatus
from qosched.backends.local.home import ENDPOINT_FILE
from qosched.backends.local.jobview import HeldAllocation
from qosched.backends.local.store import JobEvent
from qosched.cli import local
from qosched.cli.main import build_parser, main


@pytest.fixture
def with_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Running]:
    monkeypatch.setenv("COLUMNS", "200")
    with running_service(tmp_path, FakeService(log_dir=tmp_path, gpus=(0, 1, 2, 3))) as running:
        yield running


def qosched(home: Path, *args: str) -> int:
    command, *rest = args
    return main([command, "--home", str(home), *rest])


COMMAND_SPEC = """\
apiVersion: qosched/v1
kind: TrainingJob
metadata:
  name: {name}
spec:
  command: ["train.py"]
  workingDir: {working_dir}
  work: {{iterations: 10}}
  deadline: 10m
  resources: {{minGpus: 1, maxGpus: 2}}
"""


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        pytest.param(["--gpus", "0,1,3"], (0, 1, 3), id="declared"),
        pytest.param(["--gpus", "none"], (), id="none"),
        pytest.param([], None, id="nvml"),
    ],
)
def test_a_detached_up_passes_its_gpus_on(tmp_path: Path, given: list[str], expected) -> None:
    args = build_parser("up").parse_args(["up", *given, "--detach"])
    assert args.gpus == expected
    argv = local._service_argv(tmp_path, args)
    assert build_parser("up").parse_args(argv[3:]).gpus == expected


def test_up_opens_the_service_with_the_declared_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "qosched.backends.local.service", fake_service_module())
    monkeypatch.setattr(FakeLocalService, "opened", [])
    home = tmp_path / "home"
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(qosched(home, "up", "--gpus", "2,0")))
    thread.start()
    try:
        deadline = time.monotonic() + 15
        while not (home / ENDPOINT_FILE).exists():
            assert time.monotonic() < deadline, "the service did not start"
            time.sleep(0.02)
        (service,) = FakeLocalService.opened
        assert service.declared_gpus == (0, 2)
        assert qosched(home, "down") == 0
    finally:
        thread.join(15)
    assert codes == [0]


def test_the_status_document_carries_each_jobs_gpus() -> None:
    status = ServiceStatus(
        policy="qos",
        cpus=(0, 1),
        gpus=(0, 1, 2),
        queued=0,
        running=2,
        allocated={"j-1": (0,), "j-2": ()},
        allocated_gpus={"j-2": (1, 2)},
        outcomes={},
    )
    document = status.to_json()
    assert document["allocated"] == {
        "j-1": {"cpus": [0], "gpus": []},
        "j-2": {"cpus": [], "gpus": [1, 2]},
    }
    again = ServiceStatus.from_json(json.loads(json.dumps(document)))
    assert again.allocated_gpus == {"j-2": (1, 2)} and again.gpus == (0, 1, 2)


@pytest.mark.parametrize("text", ["", "0,0", "1024", "a", "-1"])
def test_a_bad_gpu_list_is_a_usage_error(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["up", "--home", str(tmp_path), "--gpus", text])
    assert caught.value.code == 2
    assert "--gpus" in capsys.readouterr().err


def test_submit_sends_a_relative_working_dir_resolved_against_the_current_folder(
    with_gpus: Running, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As sbatch: relative paths are the folder submit runs in, not the spec file's."""
    (tmp_path / "specs" / "runs").mkdir(parents=True)  # the spec's folder has one too: unused
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "train.py").write_text("")
    (tmp_path / "specs" / "job.yaml").write_text(COMMAND_SPEC.format(name="m", working_dir="runs"))
    monkeypatch.chdir(tmp_path)
    assert qosched(with_gpus.home, "submit", "specs/job.yaml") == 0
    [sent] = with_gpus.service.submitted_texts
    spec = json.loads(sent)["spec"]
    assert spec["workingDir"] == str(tmp_path / "runs")
    assert spec["command"] == [str(tmp_path / "runs" / "train.py")]  # stored absolute


def test_submit_of_a_missing_working_dir_names_it_and_sends_nothing(
    with_gpus: Running,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "job.yaml").write_text(COMMAND_SPEC.format(name="mine", working_dir="nowhere"))
    monkeypatch.chdir(tmp_path)
    assert qosched(with_gpus.home, "submit", "job.yaml") != 0
    err = capsys.readouterr().err
    assert "spec.workingDir" in err and f"{tmp_path / 'nowhere'} is not an existing folder" in err
    assert with_gpus.service.submitted_texts == []


def test_submit_of_a_missing_script_names_it_and_sends_nothing(
    with_gpus: Running,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "runs").mkdir()
    (tmp_path / "job.yaml").write_text(COMMAND_SPEC.format(name="mine", working_dir="runs"))
    monkeypatch.chdir(tmp_path)
    assert qosched(with_gpus.home, "submit", "job.yaml") == 2
    err = capsys.readouterr().err
    assert f"job.yaml:6: field 'spec.command[0]': no such script: {tmp_path}/runs/train.py" in err
    assert with_gpus.service.submitted_texts == []


def test_a_command_job_without_working_dir_runs_where_it_was_submitted(
    with_gpus: Running, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case: `python train.py` submitted from train.py's folder must run there,
    not in the folder the service was started from."""
    (tmp_path / "train.py").write_text("")
    spec_text = COMMAND_SPEC.format(name="here", working_dir="x").replace(
        '  command: ["train.py"]\n  workingDir: x\n', '  command: ["python3", "-u", "train.py"]\n'
    )
    (tmp_path / "job.yaml").write_text(spec_text)
    monkeypatch.chdir(tmp_path)
    assert qosched(with_gpus.home, "submit", "job.yaml") == 0
    [sent] = with_gpus.service.submitted_texts
    spec = json.loads(sent)["spec"]
    assert spec["workingDir"] == str(tmp_path)
    assert spec["command"] == ["python3", "-u", str(tmp_path / "train.py")]


def test_submit_from_stdin_resolves_against_the_current_folder(
    with_gpus: Running, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdin", _Stdin(COMMAND_SPEC.format(name="s", working_dir="here")))
    assert qosched(with_gpus.home, "submit", "-") == 0
    [sent] = with_gpus.service.submitted_texts
    assert json.loads(sent)["spec"]["workingDir"] == str(tmp_path / "here")


class _Stdin:
    def __init__(self, text: str) -> None:
        self.text = text

    def read(self) -> str:
        return self.text


def test_status_shows_the_gpus_and_who_holds_them(
    with_gpus: Running,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(local, "_stdout_is_terminal", lambda: True)  # the summary is for people
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)
    for name in ("first", "second"):
        path = tmp_path / f"{name}.yaml"
        path.write_text(COMMAND_SPEC.format(name=name, working_dir="w"))
        assert qosched(with_gpus.home, "submit", str(path)) == 0
    with_gpus.service.update("j-000001", state="running", gpus=[1, 2], started_at=time.time())
    capsys.readouterr()
    assert qosched(with_gpus.home, "status") == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("4 CPUs, 0 allocated · 4 GPUs, 2 allocated · 1 running")
    header = next(line for line in out.splitlines() if line.startswith("ID"))
    assert "GPUS" in header
    first = next(line for line in out.splitlines() if line.startswith("j-000001"))
    columns = dict(zip(header.split(), first.split(), strict=False))
    assert columns["GPUS"] == "2"  # how many; -o wide names them
    assert qosched(with_gpus.home, "status", "-o", "wide") == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("ID"))
    first = next(line for line in out.splitlines() if line.startswith("j-000001"))
    assert dict(zip(header.split(), first.split(), strict=False))["GPU-IDS"] == "1-2"
    assert qosched(with_gpus.home, "status", "--json") == 0


def test_event_text_for_gpus() -> None:
    assert local.event_text("gpus", {"held": [0, 1]}) == "holds GPUs 0-1"
    assert local.event_text("gpus", {"released": [3]}) == "gave back GPUs 3"


def gpu_job_events() -> list[JobEvent]:
    """A GPU job's audit log: 2 GPUs, stopped for a re-size, then 1 GPU."""
    return [
        JobEvent("j-1", 10.0, "gpus", {"held": [1, 2]}),
        JobEvent("j-1", 10.0, "state", {"from": "queued", "to": "running", "cpus": []}),
        JobEvent("j-1", 20.0, "state", {"from": "running", "to": "preempted"}),
        JobEvent("j-1", 20.0, "gpus", {"released": [1, 2]}),
        JobEvent("j-1", 21.0, "gpus", {"held": [3]}),
        JobEvent("j-1", 21.0, "state", {"from": "preempted", "to": "running", "cpus": []}),
    ]


def test_a_gpu_jobs_allocation_history_lists_its_gpus() -> None:
    assert detail.allocation_history(gpu_job_events()) == (
        HeldAllocation(10.0, 20.0, (), (1, 2)),
        HeldAllocation(21.0, None, (), (3,)),
    )


def test_status_job_shows_a_gpu_jobs_gpus_and_their_history(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    job = make_job(
        "j-1",
        "running",
        name="mine",
        submitted_at=5.0,
        started_at=10.0,
        iterations=100,
        iterations_done=40,
        gpus=(3,),
        guaranteed=True,
        attempts=2,
    )
    console = Console(width=200, record=True)
    console.print(local.job_view(detail.job_detail(job, gpu_job_events()), now=30.0))
    out = console.export_text()
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert rows["gpus"].split()[1] == "3"
    header = next(line for line in out.splitlines() if line.split()[:1] == ["FROM"])
    assert header.split() == ["FROM", "UNTIL", "HELD", "CPUS", "GPUS"]
    assert "holds GPUs 1-2" in out and "gave back GPUs 1-2" in out
