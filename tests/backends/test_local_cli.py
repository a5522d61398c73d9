"""The local-service commands (``qosched up/submit/status/logs/cancel/down``) against an
in-process API server on the fake service."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import stat
import sys
import threading
import time
from pathlib import Path

import pytest
import service_fakes
from service_fakes import (
    FakeLocalService,
    Running,
    fake_service_module,
    spec_text,
    write_specs,
)

from qosched.backends.local.home import ENDPOINT_FILE, LOG_FILE, read_endpoint
from qosched.backends.local.jobview import JobView
from qosched.backends.local.store import Lifecycle
from qosched.backends.local.verdict import Verdict
from qosched.cli import local, options
from qosched.cli.main import build_parser, main
from qosched.cluster.admission import Admission

WAIT_S = 15.0


@pytest.fixture
def running(running: Running, monkeypatch: pytest.MonkeyPatch) -> Running:
    """tests/backends/conftest.py's service, printed to a wide terminal."""
    monkeypatch.setenv("COLUMNS", "200")  # rich tables keep whole words on one line
    return running


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """`qosched status` writes for a person at a terminal: the summary and a table fitted to it."""
    monkeypatch.setattr(local, "_stdout_is_terminal", lambda: True)


def qosched(home: Path, *args: str) -> int:
    command, *rest = args
    return main([command, "--home", str(home), *rest])


# --- submit --------------------------------------------------------------------------------------


def test_submit_prints_one_id_a_line(
    running: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = write_specs(tmp_path, "alpha", "beta")
    assert qosched(running.home, "submit", *specs) == 0
    assert capsys.readouterr().out == "j-000001\nj-000002\n"
    assert [job.name for job in running.service.jobs()] == ["alpha", "beta"]
    assert running.service.submitted_sources == specs


def test_submit_checks_every_file_before_sending_any(
    running: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = write_specs(tmp_path, "good", "bad")
    Path(bad).write_text(spec_text(name="bad").replace("minCpus: 1", "minCpus: 0"))
    assert qosched(running.home, "submit", good, bad) == 2
    err = capsys.readouterr().err
    assert f"{bad}:11: field 'spec.resources.minCpus'" in err
    assert running.service.jobs() == []


def test_submit_of_a_missing_file_names_it(
    running: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert qosched(running.home, "submit", str(tmp_path / "nope.yaml")) == 2
    assert "nope.yaml: cannot read job spec" in capsys.readouterr().err


def test_submit_reports_a_declined_job(
    running: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = running.service.submit

    def declining(text: str, source: str) -> JobView:
        job = original(text, source)
        running.service.update(job.id, state="declined")
        return dataclasses.replace(job, state=Lifecycle.DECLINED)

    running.service.submit = declining  # type: ignore[method-assign]
    assert qosched(running.home, "submit", *write_specs(tmp_path, "tight")) == local.Exit.DECLINED
    captured = capsys.readouterr()
    assert captured.out == "j-000001\n"
    assert "j-000001 (tight) was declined" in captured.err


def test_submit_says_why_a_job_was_declined(
    running: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = running.service.submit
    why = "its deadline cannot be guaranteed ...: it needs 500 s; the earliest ... is 510s from now"

    def declining(text: str, source: str) -> JobView:
        job = original(text, source)
        running.service.update(job.id, state="declined", error=why)
        return dataclasses.replace(job, state=Lifecycle.DECLINED, error=why)

    running.service.submit = declining  # type: ignore[method-assign]
    assert qosched(running.home, "submit", *write_specs(tmp_path, "tight")) == local.Exit.DECLINED
    assert f"j-000001 (tight) was declined: {why} (spec.bestEffort" in capsys.readouterr().err


VERDICTS = [
    (Verdict(Admission.GUARANTEED), local.Exit.SUCCEEDED, "guaranteed"),
    (
        Verdict(Admission.BEST_EFFORT, "allowed", 1_000_600.0, 600.0),
        local.Exit.SUCCEEDED,
        "best-effort: allowed; the earliest deadline that can be guaranteed now is 600s from now",
    ),
    (
        Verdict(Admission.DECLINED, "too tight", 1_000_600.0, 600.0),
        local.Exit.DECLINED,
        "declined: too tight; the earliest deadline that can be guaranteed now is 600s from now",
    ),
]


@pytest.mark.parametrize(
    ("verdict", "code", "line"), VERDICTS, ids=["guaranteed", "best-effort", "declined"]
)
def test_submit_dry_run_prints_the_verdict_and_submits_nothing(
    running: Running,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    verdict: Verdict,
    code: local.Exit,
    line: str,
) -> None:
    running.service.verdict = verdict
    [path] = write_specs(tmp_path, "tight")
    assert qosched(running.home, "submit", "--dry-run", path) == code
    assert capsys.readouterr().out.startswith(f"{path}: {line}")
    assert running.service.jobs() == []
    assert running.service.dry_run_texts == [spec_text(name="tight")]


def test_submit_dry_run_json(
    running: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    running.service.verdict = Verdict(Admission.DECLINED, "too tight", 1_000_600.0, 600.0)
    paths = write_specs(tmp_path, "a", "b")
    assert qosched(running.home, "submit", "--dry-run", "--json", *paths) == local.Exit.DECLINED
    assert json.loads(capsys.readouterr().out) == [
        {"source": path, **running.service.verdict.to_json()} for path in paths
    ]


def test_submit_refuses_dry_run_with_wait(running: Running, tmp_path: Path) -> None:
    flags = ["--dry-run", "--wait"]
    assert qosched(running.home, "submit", *flags, *write_specs(tmp_path, "a")) == 2
    assert running.service.jobs() == [] and running.service.dry_run_texts == []


# --- status --------------------------------------------------------------------------------------


def test_status_shows_a_table_of_jobs(
    running: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str], terminal: None
) -> None:
    assert qosched(running.home, "submit", *write_specs(tmp_path, "alpha", "beta", "gamma")) == 0
    now = time.time()
    service = running.service
    service.update(
        "j-000001",
        state="running",
        cpus=[0, 1, 2],
        iterations_done=100,
        predicted_finish_at=now + 120,
        predicted_finish_band=[now + 100, now + 150],
        guaranteed=True,
    )
    deadline = service.job("j-000002").deadline_at
    service.update("j-000002", state="succeeded", iterations_done=400, finished_at=deadline + 65)
    capsys.readouterr()
    assert qosched(running.home, "status") == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("j-")}
    assert out.splitlines()[0].startswith("4 CPUs, 3 allocated · 1 running · 1 waiting")
    assert "finished: missed 1" in out.splitlines()[0]
    assert "ID" in out and "FINISH" in out
    first = lines["j-000001"]
    assert first.split()[:4] == ["j-000001", "alpha", "running", "3"]  # CPUS: how many
    for expected in ("25% 100/400", "in 10m", "on track (guaranteed)"):
        assert expected in first, (expected, first)
    assert "in 2m" in first and "(1m40s–2m30s)" in first
    second = lines["j-000002"]
    for expected in ("beta", "succeeded", "100% 400/400", "✗ missed by 1m5s"):
        assert expected in second, (expected, second)
    third = lines["j-000003"]
    for expected in ("gamma", "queued", "0% 0/400"):
        assert expected in third, (expected, third)


def test_status_job_shows_a_running_jobs_history_prediction_and_slack(
    running: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert qosched(running.home, "submit", *write_specs(tmp_path, "alpha")) == 0
    service = running.service
    now = time.time()
    service.update("j-000001", state="running", cpus=[0], iterations_done=40)
    service.update(
        "j-000001",
        cpus=[0, 1, 2],
        predicted_finish_at=now + 120,
        predicted_finish_band=[now + 100, now + 150],
    )
    capsys.readouterr()
    assert qosched(running.home, "status", "j-000001") == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "j-000001 (alpha)" in rows["job"] and "10% 40/400" in rows["progress"]
    assert rows["cpus"].split()[1] == "0-2"
    assert "in 2m (1m40s–2m30s)" in rows["finish"]
    assert "8m to spare (predicted)" in rows["slack"]  # a 10m deadline, finishing in 2m
    allocations = out.split("allocations", 1)[1].split("events", 1)[0].splitlines()
    history = [line.split() for line in allocations if line.strip()][1:]  # under the header
    assert [(row[1], row[-1]) for row in history] == [(history[1][0], "0"), ("now", "0-2")]
    assert "queued -> running on cores 0" in out and "re-sized from cores 0 to 0-2" in out


def test_status_without_jobs_says_how_to_submit(
    running: Running, capsys: pytest.CaptureFixture[str], terminal: None
) -> None:
    assert qosched(running.home, "status") == 0
    assert "no jobs yet" in capsys.readouterr().out


def test_status_json_prints_the_job_list(
    running: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    qosched(running.home, "submit", *write_specs(tmp_path, "alpha"))
    capsys.readouterr()
    assert qosched(running.home, "status", "--json") == 0
    assert json.loads(capsys.readouterr().out) == [job.to_json() for job in running.service.jobs()]


def test_status_watch_and_json_do_not_mix(
    running: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    assert qosched(running.home, "status", "--watch", "--json") == 2
    assert "--watch" in capsys.readouterr().err


def test_status_watch_refreshes_until_ctrl_c(
    running: Running,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    terminal: None,
) -> None:
    naps = []

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(local.time, "sleep", sleep)
    assert qosched(running.home, "status", "--watch") == 0
    assert naps == [local.WATCH_INTERVAL_S] * 3
    assert "no jobs yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("cpus", "text"),
    [([], "-"), ([3], "3"), ([0, 1, 2, 5], "0-2,5"), ([7, 6, 0], "0,6-7"), ([1, 3, 5], "1,3,5")],
)
def test_cpu_ranges(cpus: list[int], text: str) -> None:
    assert local.cpu_ranges(cpus) == text


# --- logs and cancel -----------------------------------------------------------------------------


def test_logs_prints_the_output_and_tail_cuts_it(
    running: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    qosched(running.home, "submit", *write_specs(tmp_path, "alpha"))
    running.service.write_log("j-000001", "step 1\nstep 2\nstep 3\n")
    capsys.readouterr()
    assert qosched(running.home, "logs", "j-000001") == 0
    assert capsys.readouterr().out == "step 1\nstep 2\nstep 3\n"
    assert qosched(running.home, "logs", "j-000001", "--tail", "1") == 0
    assert capsys.readouterr().out == "step 3\n"


def test_cancel_prints_the_outcome_and_refuses_twice(
    running: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    qosched(running.home, "submit", *write_specs(tmp_path, "alpha"))
    capsys.readouterr()
    assert qosched(running.home, "cancel", "j-000001") == 0
    assert capsys.readouterr().out == "j-000001 cancelled\n"
    assert qosched(running.home, "cancel", "j-000001") == 2
    assert "already cancelled" in capsys.readouterr().err


@pytest.mark.parametrize(
    "command",
    [
        ("logs", "j-000404"),
        ("logs", "j-000404", "--follow"),
        ("cancel", "j-000404"),
        ("status", "j-000404"),
    ],
    ids=" ".join,
)
def test_an_unknown_job_is_an_error(
    running: Running, command: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert qosched(running.home, *command) == 2
    assert "no job 'j-000404'" in capsys.readouterr().err


# --- down, and commands without a service --------------------------------------------------------


def test_down_stops_the_service_and_waits_for_service_json(
    running: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    assert qosched(running.home, "down") == 0
    assert capsys.readouterr().out == "qosched service stopped\n"
    assert running.server.shutdown_requested.is_set()
    assert not (running.home / ENDPOINT_FILE).exists()


@pytest.mark.parametrize(
    "command", [("status",), ("logs", "j-000001"), ("cancel", "j-000001"), ("down",)]
)
def test_without_a_service_the_error_says_how_to_start_one(
    tmp_path: Path, command: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert qosched(tmp_path, *command) == 2
    assert "no qosched service is running (start one with `qosched up`)" in capsys.readouterr().err


def test_home_defaults_to_qosched_home(
    running: Running, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("QOSCHED_HOME", str(running.home))
    assert main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


# --- up ------------------------------------------------------------------------------------------


@pytest.fixture
def fake_local_service(monkeypatch: pytest.MonkeyPatch) -> list[FakeLocalService]:
    monkeypatch.setitem(sys.modules, "qosched.backends.local.service", fake_service_module())
    monkeypatch.setattr(FakeLocalService, "opened", [])
    return FakeLocalService.opened


def wait_for(condition: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_up_serves_until_down_then_cleans_up(
    tmp_path: Path, fake_local_service: list[FakeLocalService], capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    codes: list[int] = []
    thread = threading.Thread(
        target=lambda: codes.append(
            qosched(home, "up", "--cpus", "0-1", "--policy", "fifo", "--tick", "0.5")
        )
    )
    thread.start()
    try:
        wait_for(lambda: (home / ENDPOINT_FILE).exists(), "service.json")
        (service,) = fake_local_service
        assert (service.home, service.cpus, service.policy) == (home, (0, 1), "fifo")
        assert service.tick_s == 0.5
        endpoint = read_endpoint(home)
        assert endpoint.pid == os.getpid()
        assert qosched(home, "submit", *write_specs(tmp_path, "alpha")) == 0
        assert service.jobs()[0].name == "alpha"
        assert f"listening on {endpoint.url}" in capsys.readouterr().out
        assert qosched(home, "up") == 2  # one service per home
        assert "already running" in capsys.readouterr().err
        assert qosched(home, "down") == 0
    finally:
        thread.join(WAIT_S)
    assert codes == [0]
    assert service.stopped and service.closed
    assert not (home / ENDPOINT_FILE).exists()
    assert capsys.readouterr().out.count("qosched service stopped") == 2  # from up and down


def up_once(home: Path, *flags: str) -> int:
    """`qosched up` in a thread until its service is listening, then `down`; its port."""
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(qosched(home, "up", *flags)))
    thread.start()
    try:
        wait_for(lambda: (home / ENDPOINT_FILE).exists() or not thread.is_alive(), "up")
        port = read_endpoint(home).port
        assert qosched(home, "down") == 0
    finally:
        thread.join(WAIT_S)
    assert codes == [0]
    return port


def test_up_listens_on_the_port_of_its_last_up_unless_told_otherwise(
    tmp_path: Path, fake_local_service: list[FakeLocalService], capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    first = up_once(home)
    assert up_once(home) == first
    with socket.socket() as taken:  # another program takes it while no service listens
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", first))
        taken.listen()
        capsys.readouterr()
        moved = up_once(home)
        assert moved != first
        err = capsys.readouterr().err
        assert f"port {first}, where this home's service listened last, is taken" in err
        assert f"listening on port {moved} instead" in err and "--port N" in err
        # A port asked for is that port or nothing.
        assert qosched(home, "up", "--port", str(first)) == 2
        assert f"cannot listen on 127.0.0.1:{first}" in capsys.readouterr().err
    assert up_once(home) == moved  # the new one is kept
    chosen = up_once(home, "--port", "0")
    assert up_once(home) == chosen


def test_a_detached_up_without_port_leaves_the_choice_to_the_service(tmp_path: Path) -> None:
    args = build_parser("up").parse_args(["up", "--detach"])
    assert "--port" not in local._service_argv(tmp_path, args)


def test_up_refuses_while_a_service_is_alive(
    running: Running, fake_local_service: list[FakeLocalService], capsys: pytest.CaptureFixture[str]
) -> None:
    assert qosched(running.home, "up") == 2
    assert "already running" in capsys.readouterr().err
    assert fake_local_service == []


@pytest.fixture
def running_fake(monkeypatch: pytest.MonkeyPatch) -> None:
    """``up --detach`` starts the fake service instead of the real one."""
    original = local._service_argv

    def fake_argv(home: Path, args: argparse.Namespace) -> list[str]:
        argv = original(home, args)
        assert argv[1:4] == ["-m", "qosched.cli.main", "up"]
        return [argv[0], service_fakes.__file__, *argv[3:]]

    monkeypatch.setattr(local, "_service_argv", fake_argv)


def test_up_detach_starts_a_background_service(
    tmp_path: Path, running_fake: None, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    assert qosched(home, "up", "--detach", "--cpus", "0") == 0
    endpoint = read_endpoint(home)
    try:
        assert endpoint.pid != os.getpid()
        out = capsys.readouterr().out
        assert f"running at {endpoint.url} (pid {endpoint.pid}" in out
        assert f"{endpoint.url}/login?code=" in out  # the user's terminal gets the login URL
        assert qosched(home, "up", "--detach") == 2
        assert "already running" in capsys.readouterr().err
        assert qosched(home, "status", "--json") == 0
        assert json.loads(capsys.readouterr().out) == []
    finally:
        assert qosched(home, "down") == 0
    log = (home / LOG_FILE).read_text()
    assert "listening on" in log and "qosched service stopped" in log
    # The log is no place for a secret: no login code in it, and only its owner may read it.
    assert "code=" not in log
    assert stat.S_IMODE((home / LOG_FILE).stat().st_mode) == 0o600
    assert stat.S_IMODE(home.stat().st_mode) == 0o700


def test_up_makes_a_home_open_to_others_owner_only_and_says_so(
    tmp_path: Path, running_fake: None, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    (home / LOG_FILE).write_text("an old log\n")
    (home / LOG_FILE).chmod(0o644)
    assert qosched(home, "up", "--detach", "--cpus", "0") == 0
    try:
        err = capsys.readouterr().err
        assert "was open to other users (mode 0755); made it owner-only" in err
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        assert stat.S_IMODE((home / LOG_FILE).stat().st_mode) == 0o600
    finally:
        assert qosched(home, "down") == 0


def test_up_refuses_a_home_of_another_user(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    if os.getuid() != 0:
        pytest.skip("only root can give a folder to another user")  # CI and this machine: root
    home = tmp_path / "theirs"
    home.mkdir(mode=0o700)
    os.chown(home, 65534, 65534)
    assert qosched(home, "up", "--detach") == 2
    assert "belongs to user id 65534, not to you" in capsys.readouterr().err


def test_a_detached_up_runs_a_foreground_up_with_the_same_options(tmp_path: Path) -> None:
    given = ["up", "--cpus", "0-1,3", "--policy", "fifo", "--port", "8123", "--tick", "0.25"]
    args = build_parser("up").parse_args([*given, "--detach"])
    argv = local._service_argv(tmp_path, args)
    assert argv[:3] == [sys.executable, "-m", "qosched.cli.main"]
    again = build_parser("up").parse_args(argv[3:])
    chosen = ("cpus", "policy", "port", "tick")
    assert [getattr(again, n) for n in chosen] == [(0, 1, 3), "fifo", 8123, 0.25]
    assert (again.home, again.detach) == (str(tmp_path), False)


def test_up_detach_reports_a_service_that_dies_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        local,
        "_service_argv",
        lambda home, args: [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"],
    )
    assert qosched(tmp_path, "up", "--detach") == 2
    err = capsys.readouterr().err
    assert "exited with code 3 while starting" in err
    assert "boom" in err


@pytest.mark.parametrize(
    ("text", "cores"),
    [("0", (0,)), ("0,1", (0, 1)), ("0-3,6", (0, 1, 2, 3, 6)), ("5, 2", (2, 5))],
)
def test_cpu_list(text: str, cores: tuple[int, ...]) -> None:
    assert options.cpu_list(text) == cores


@pytest.mark.parametrize("text", ["", "a", "1-", "3-1", "0,0", "0-2,1", "-1", "٣"])
def test_a_bad_cpu_list_is_a_usage_error(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["up", "--home", str(tmp_path), "--cpus", text])
    assert caught.value.code == 2
    assert "--cpus" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("best_effort", "guaranteed", "note"),
    [(True, True, "(guaranteed)"), (True, False, "(best effort)"), (False, True, "(guaranteed)")],
)
def test_the_qos_column_says_guaranteed_or_best_effort_never_both(best_effort, guaranteed, note):
    from qosched.backends.local.jobview import JobView
    from qosched.backends.local.store import Lifecycle
    from qosched.cli.local import _qos

    now = time.time()
    job = JobView(
        id="j-1", name="a", state=Lifecycle.RUNNING, submitted_at=now, deadline_at=now + 600,
        started_at=now, finished_at=None, iterations=10, iterations_done=1, cpus=(0,), gpus=(),
        predicted_finish_at=now + 60, predicted_finish_band=(now + 50, now + 70),
        best_effort=best_effort, guaranteed=guaranteed, attempts=1, error=None,
    )  # fmt: skip
    assert _qos(job).plain.endswith(note)


@pytest.mark.parametrize(
    ("kind", "detail", "words"),
    [
        (
            "allocation",
            {"from": [0, 1], "to": [0], "why": "from 2 cores to 1: the plan needs 1"},
            "re-sized from cores 0-1 to 0: from 2 cores to 1: the plan needs 1",
        ),
        (
            "admitted",
            {"policy": "qos", "guaranteed": True, "why": "qos guarantees it", "measured": {"1": 2}},
            "qos guarantees it; measured 2 it/s on 1",
        ),
        (
            "promise",
            {"promise": "best effort", "guaranteed": False, "why": "qos no longer guarantees it"},
            "best effort: qos no longer guarantees it",
        ),
        (
            "launched",
            {"pid": 7, "attempt": 2, "cpus": [1], "why": "restarted on 1 core: room again"},
            "runner started (pid 7, attempt 2) on cores 1: restarted on 1 core: room again",
        ),
    ],
    ids=["resize", "admitted", "promise", "restart"],
)
def test_status_job_shows_each_events_why_as_it_is(kind, detail, words):
    assert local.event_text(kind, detail) == words


@pytest.mark.parametrize(
    ("kind", "detail", "words"),
    [
        ("state", {"from": "queued", "to": "running", "cpus": [0, 1, 3]},
         "queued -> running on cores 0-1,3"),
        ("state", {"from": "running", "to": "failed", "error": "exit 1"},
         "running -> failed: exit 1"),
        ("state", {"from": "running", "to": "failed", "why": "w", "error": "e"},
         "running -> failed: w"),
        ("gpus", {"held": [2, 3]}, "holds GPUs 2-3"),
        ("gpus", {}, "gave back GPUs -"),
        ("allocation", {"from": [], "to": [4, 5]}, "holds cores 4-5"),
        ("allocation", {"from": [4, 5], "to": []}, "gave back cores 4-5"),
        ("allocation", {"from": [0], "to": [0, 1]}, "re-sized from cores 0 to 0-1"),
        ("launched", {"pid": 9, "attempt": 1}, "runner started (pid 9, attempt 1) on cores -"),
        ("admitted", {"policy": "edf", "guaranteed": False},
         "by edf: not guaranteed (best effort)"),
        ("admitted", {"policy": "qos", "guaranteed": True, "measured": {"10": 3, "2": 1.5}},
         "by qos: deadline guaranteed; measured 1.5 it/s on 2, 3 it/s on 10"),
        ("profiling", {"why": "measured for at most 30 s"}, "measured for at most 30 s"),
        ("profiling", {"why": "new model", "bound_s": 20},
         "new model: measured first (at most 20 s)"),
        ("declining", {"why": "cannot meet it", "measured": {"1": 2}},
         "cannot meet it; measured 2 it/s on 1"),
        ("stopped", {"why": "cancelled"}, "cancelled"),
        ("stopped", {}, ""),
        ("stalled", {"seconds": 125, "iteration": 40},
         "no progress reported for 2m5s (at iteration 40): hung?"),
        ("re-adopted", {"pid": 12}, "runner (pid 12) re-adopted by a restarted service"),
        ("submitted", {"spec": "anything"}, ""),
        ("speed", {"remembered_from": "j-3", "rates": {"1": 4}},
         "speed remembered from j-3: 4 it/s on 1"),
        ("speed", {"remembered_from": "j-3", "rates": None}, "speed remembered from j-3: "),
        ("unknown-kind", {"b": 2, "a": 1}, "a 1, b 2"),
    ],
)  # fmt: skip
def test_every_event_kind_in_words(kind, detail, words):
    assert local.event_text(kind, detail) == words
