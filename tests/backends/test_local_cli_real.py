"""The local-service commands against a real service: ``qosched up`` (the real ``LocalService``)
in a thread, real runner processes running short command jobs, and the exit codes of
``submit --wait``."""

from __future__ import annotations

import io
import json
import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from qosched.backends.local.client import Client
from qosched.backends.local.home import ENDPOINT_FILE
from qosched.backends.local.jobview import JobView
from qosched.cli import local
from qosched.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "local"
WAIT_S = 120.0
# Iterations of a job that runs long enough to be cancelled while it runs (0.1 s each), yet
# short enough for its deadline to be guaranteed at the placeholder speed of 1/s.
LONG = 250

# A command job that reports ``$QOSCHED_ITERATIONS`` iterations, one every STEP_S seconds,
# printing a numbered line for each; it exits with EXIT_CODE (an argument) at the end.
STEPPER = """\
import json, os, sys, time
total = int(os.environ["QOSCHED_ITERATIONS"])
step_s, code = float(sys.argv[1]), int(sys.argv[2])
with open(os.environ["QOSCHED_PROGRESS_FILE"], "a") as progress:
    for n in range(1, total + 1):
        time.sleep(step_s)
        print(f"line {n}", flush=True)
        progress.write(json.dumps({"iteration": n}) + "\\n")
        progress.flush()
sys.exit(code)
"""


@dataclass
class Service:
    home: Path
    scripts: Path

    def client(self) -> Client:
        return Client.from_home(self.home)

    def spec(
        self,
        name: str,
        iterations: int = 3,
        step_s: float = 0.1,
        exit_code: int = 0,
        deadline: str = "5m",
        best_effort: bool = False,
    ) -> str:
        """A command job of the stepper script, as YAML."""
        script = self.scripts / "stepper.py"
        script.write_text(STEPPER)
        command = [sys.executable, str(script), str(step_s), str(exit_code)]
        return job_yaml(name, {"command": command}, iterations, deadline, best_effort)

    def cnn_spec(self, name: str, iterations: int, deadline: str) -> str:
        """A job of the built-in cnn workload, whose speed the bundled table gives."""
        return job_yaml(name, {"workload": "cnn"}, iterations, deadline)

    def write(self, name: str, text: str) -> str:
        path = self.scripts / f"{name}.yaml"
        path.write_text(text)
        return str(path)

    def wait_for_state(self, job_id: str, states: set[str]) -> JobView:
        deadline = time.monotonic() + WAIT_S
        while (job := self.client().job(job_id)).state not in states:
            assert not job.finished, f"{job_id} ended {job.state}"
            assert time.monotonic() < deadline, f"{job_id} still {job.state}"
            time.sleep(0.1)
        return job


def job_yaml(
    name: str, work: dict, iterations: int, deadline: str = "5m", best_effort: bool = False
) -> str:
    spec = {
        **work,
        "work": {"iterations": iterations},
        "deadline": deadline,
        "resources": {"minCpus": 1, "maxCpus": 1},
        "bestEffort": best_effort,
    }
    document = {"apiVersion": "qosched/v1", "kind": "TrainingJob", "metadata": {"name": name}}
    return yaml.safe_dump({**document, "spec": spec}, sort_keys=False)


def qosched(service: Service, *args: str) -> int:
    command, *rest = args
    return main([command, "--home", str(service.home), *rest])


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Service]:
    """``qosched up`` in a thread, stopped with ``qosched down``."""
    monkeypatch.setenv("COLUMNS", "200")
    home = tmp_path / "home"
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    codes: list[int] = []
    # A short tick: the service looks for finished jobs every 0.2 s instead of every second.
    argv = ["up", "--home", str(home), "--tick", "0.2"]
    thread = threading.Thread(target=lambda: codes.append(main(argv)))
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while not (home / ENDPOINT_FILE).exists():
        assert thread.is_alive() and time.monotonic() < deadline, "the service did not start"
        time.sleep(0.05)
    try:
        yield Service(home, scripts)
    finally:
        assert main(["down", "--home", str(home)]) == 0
        thread.join(WAIT_S)
    assert codes == [0]


# --- submit --wait: one exit code per outcome -----------------------------------------------------


def test_submit_wait_exits_0_when_the_job_succeeds_by_its_deadline(
    service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = service.write("ok", service.spec("ok"))
    assert qosched(service, "submit", "--wait", spec) == local.Exit.SUCCEEDED
    out, err = capsys.readouterr()
    assert out == "j-000001\n"
    assert "j-000001 (ok): succeeded" in err and "before its deadline" in err


def test_submit_wait_exits_failed_when_the_command_fails(
    service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    # Exit code 2 is the runner's "bad input": the job fails at once, without retries.
    spec = service.write("bad", service.spec("bad", exit_code=2))
    assert qosched(service, "submit", "--wait", spec) == local.Exit.FAILED
    assert "j-000001 (bad): failed" in capsys.readouterr().err


def test_a_decline_names_a_deadline_that_a_dry_run_and_a_submit_then_guarantee(
    service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    # The cnn workload's table (judged at once, nothing measured first): 20.7 iterations/s on a
    # core, so 100,000 iterations take over an hour on any machine.
    spec = service.write("tight", service.cnn_spec("tight", iterations=100_000, deadline="1m"))
    assert qosched(service, "submit", spec) == local.Exit.DECLINED
    err = capsys.readouterr().err
    assert "j-000001 (tight) was declined: its deadline cannot be guaranteed" in err
    assert "even alone on" in err and "its deadline is in 60 s" in err
    found = re.search(r"the earliest deadline that can be guaranteed now is (\d+)s from now", err)
    assert found, err
    detail = service.client().job_detail("j-000001")
    assert found.group(0) in detail.job.error
    assert found.group(0) in detail.events[-1].detail["error"]  # queued -> declined, and why

    in_time = service.write(
        "in-time", service.cnn_spec("tight", iterations=100_000, deadline=f"{found[1]}s")
    )
    assert qosched(service, "submit", "--dry-run", in_time) == local.Exit.SUCCEEDED
    assert capsys.readouterr().out == f"{in_time}: guaranteed\n"
    assert [job.id for job in service.client().jobs()] == ["j-000001"]  # nothing stored
    assert qosched(service, "submit", in_time) == local.Exit.SUCCEEDED
    admitted = [e for e in service.client().job_detail("j-000002").events if e.kind == "admitted"]
    assert [e.detail["guaranteed"] for e in admitted] == [True]
    assert qosched(service, "cancel", "j-000002") == 0


@pytest.mark.parametrize("wait", [False, True], ids=["no-wait", "wait"])
def test_a_declined_job_makes_submit_exit_declined(
    service: Service, wait: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    # A million iterations in a minute: no core count meets it, and best effort is not allowed.
    spec = service.write("hopeless", service.cnn_spec("hopeless", iterations=10**6, deadline="1m"))
    assert qosched(service, "submit", *(["--wait"] if wait else []), spec) == 4
    assert "j-000001 (hopeless) was declined" in capsys.readouterr().err
    assert service.client().job("j-000001").state == "declined"


def test_submit_wait_exits_deadline_missed_for_a_late_success(
    service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    # About 2 s of work against a 1 s deadline: admitted only as best effort, and late.
    text = service.spec("late", iterations=4, step_s=0.5, deadline="1s", best_effort=True)
    assert qosched(service, "submit", "--wait", service.write("late", text)) == 5
    assert "after its deadline" in capsys.readouterr().err
    assert service.client().job("j-000001").state == "succeeded"


def test_submit_wait_exits_cancelled_when_the_job_is_cancelled_meanwhile(
    service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = service.write("long", service.spec("long", iterations=LONG))
    codes: list[int] = []
    waiter = threading.Thread(
        target=lambda: codes.append(qosched(service, "submit", "--wait", spec))
    )
    waiter.start()
    deadline = time.monotonic() + WAIT_S
    while not service.client().jobs():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    service.wait_for_state("j-000001", {"running"})
    assert qosched(service, "cancel", "j-000001") == 0
    waiter.join(WAIT_S)
    assert codes == [local.Exit.CANCELLED]


def test_ctrl_c_while_waiting_exits_130_and_leaves_the_job_running(
    service: Service, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(seconds: float) -> None:
        raise KeyboardInterrupt

    spec = service.write("long", service.spec("long", iterations=LONG))
    monkeypatch.setattr(local.time, "sleep", interrupted)
    assert qosched(service, "submit", "--wait", spec) == local.Exit.INTERRUPTED
    monkeypatch.undo()
    assert "the jobs go on" in capsys.readouterr().err
    # A command never seen is measured first (profiling), then runs.
    assert service.client().job("j-000001").state in ("profiling", "running")
    assert qosched(service, "cancel", "j-000001") == 0


def test_with_several_jobs_the_first_unsuccessful_one_sets_the_code(
    service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    good = service.write("good", service.spec("good"))
    bad = service.write("bad", service.spec("bad", exit_code=2))
    assert qosched(service, "submit", "--wait", good, bad) == local.Exit.FAILED
    err = capsys.readouterr().err
    assert "j-000001 (good): succeeded" in err and "j-000002 (bad): failed" in err


# --- submit - -------------------------------------------------------------------------------------


def test_submit_dash_reads_the_spec_from_stdin(
    service: Service, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(service.spec("piped")))
    assert qosched(service, "submit", "--wait", "-") == 0
    assert capsys.readouterr().out == "j-000001\n"
    assert service.client().job("j-000001").name == "piped"


def test_a_bad_spec_on_stdin_is_named_stdin_and_nothing_is_sent(
    service: Service, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = service.spec("piped").replace("minCpus: 1", "minCpus: 0")
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert qosched(service, "submit", "-") == 2
    assert "<stdin>:" in capsys.readouterr().err
    assert service.client().jobs() == []


def test_stdin_can_be_named_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["submit", "--home", str(tmp_path), "-", "-"]) == 2  # refused before any is read
    assert "standard input" in capsys.readouterr().err


# --- cancel A B ... -------------------------------------------------------------------------------


def test_cancel_reports_each_job_and_fails_if_any_could_not_be(
    service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = [service.write(n, service.spec(n, iterations=LONG)) for n in ("a", "b")]
    assert qosched(service, "submit", *specs) == 0
    service.wait_for_state("j-000001", {"running"})
    capsys.readouterr()
    assert qosched(service, "cancel", "j-000001", "j-000404", "j-000002") == 2
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("j-000001 ") and "cancel" in lines[0]
    assert lines[1].startswith("j-000002 ") and "cancel" in lines[1]
    assert "no job 'j-000404'" in err
    for job_id in ("j-000001", "j-000002"):
        assert service.wait_for_state(job_id, {"cancelled"}).state == "cancelled"


def test_cancel_of_jobs_that_exist_exits_0(
    service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = [service.write(n, service.spec(n, iterations=LONG)) for n in ("a", "b")]
    assert qosched(service, "submit", *specs) == 0
    assert qosched(service, "cancel", "j-000001", "j-000002") == 0


# --- status and status JOB ------------------------------------------------------------------------


def test_status_and_status_job_describe_a_finished_job(
    service: Service, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = service.write("ok", service.spec("ok"))
    assert qosched(service, "submit", "--wait", spec) == 0
    capsys.readouterr()
    assert qosched(service, "status", "j-000001", "--json") == 0
    detail = json.loads(capsys.readouterr().out)
    (held,) = detail["allocations"]
    assert len(held["cpus"]) == 1 and held["until"] == pytest.approx(detail["finished_at"])
    assert detail["slack_s"] == pytest.approx(detail["deadline_at"] - detail["finished_at"])
    kinds = [event["kind"] for event in detail["events"]]
    # Never seen: measured first; done (3 iterations) before it was measured long enough.
    assert kinds[:3] == ["submitted", "state", "profiling"] and "launched" in kinds
    assert qosched(service, "status", "j-000001") == 0
    out = capsys.readouterr().out
    for expected in ("j-000001 (ok)", "succeeded", "100% 3/3", "slack", "allocations", "events"):
        assert expected in out, expected
    assert f"on cores {held['cpus'][0]}" in out  # the launch, in words
    assert "queued -> profiling" in out and "profiling -> succeeded" in out
    # And the summary of `status`, from GET /status, which a terminal shows.
    monkeypatch.setattr(local, "_stdout_is_terminal", lambda: True)
    assert qosched(service, "status") == 0
    first = capsys.readouterr().out.splitlines()[0]
    cores = len(service.client().status().cpus)
    assert first.startswith(f"{cores} CPUs, 0 allocated · 0 running · 0 waiting")
    assert first.endswith("finished: met 1")


def test_status_of_an_unknown_job_is_an_error(
    service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    assert qosched(service, "status", "j-000404") == 2
    assert "no job 'j-000404'" in capsys.readouterr().err


# --- logs --follow --------------------------------------------------------------------------------


def test_logs_follow_streams_until_the_job_ends(
    service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = service.write("talk", service.spec("talk", iterations=8, step_s=0.25))
    assert qosched(service, "submit", spec) == 0
    capsys.readouterr()
    assert qosched(service, "logs", "j-000001", "--follow") == 0
    out = capsys.readouterr().out
    assert service.client().job("j-000001").state == "succeeded"
    lines = [line for line in out.splitlines() if line.startswith("line ")]
    assert lines == [f"line {n}" for n in range(1, 9)]
    assert out == service.client().logs("j-000001")  # all of it, nothing twice


def test_logs_follow_with_tail_starts_from_the_last_lines(
    service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = service.write("talk", service.spec("talk", iterations=4))
    assert qosched(service, "submit", "--wait", spec) == 0
    capsys.readouterr()
    assert qosched(service, "logs", "j-000001", "--follow", "--tail", "2") == 0
    whole = service.client().logs("j-000001")
    assert capsys.readouterr().out == "".join(whole.splitlines(keepends=True)[-2:])


# --- the examples ---------------------------------------------------------------------------------


def test_the_command_example_succeeds(service: Service, capsys: pytest.CaptureFixture[str]) -> None:
    spec = yaml.safe_load((EXAMPLES / "command-job.yaml").read_text())
    command = spec["spec"]["command"]
    assert command[:2] == ["python3", "examples/local/train_tiny.py"]
    # The same script, by absolute path (the service's folder is not the repository's), and
    # less work.
    spec["spec"]["command"] = [sys.executable, str(ROOT / command[1]), *command[2:]]
    spec["spec"]["work"]["iterations"] = 60
    assert qosched(service, "submit", "--wait", service.write("tiny", yaml.safe_dump(spec))) == 0
    assert service.client().job("j-000001").iterations_done == 60
    assert "iteration 60/60" in service.client().logs("j-000001")


def test_the_cnn_example_succeeds(service: Service, capsys: pytest.CaptureFixture[str]) -> None:
    spec = yaml.safe_load((EXAMPLES / "cnn-job.yaml").read_text())
    assert spec["spec"]["workload"] == "cnn"
    spec["spec"]["work"]["iterations"] = 20  # the example's 400 take most of a minute
    assert qosched(service, "submit", "--wait", service.write("cnn", yaml.safe_dump(spec))) == 0
    assert service.client().job("j-000001").iterations_done == 20
