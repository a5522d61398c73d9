"""``qosched status`` and ``qosched cancel`` over many jobs: which jobs they choose (the
default, ``--all``, ``--state``, ``--name``), what ``status`` prints for a program (piped: a
header and one plain line per job, never wrapped), ``-o name|wide|json``, ``cancel --json`` and
``submit --json``; against the in-process fake service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from service_fakes import Running, spec_text, write_specs

import qosched
from qosched.cli import local
from qosched.cli.main import main
from qosched.core.errors import InputError

#: The source folder of the qosched this test imports, for the commands it runs in a process.
SRC = Path(qosched.__file__).resolve().parents[1]


@pytest.fixture
def running(running: Running, monkeypatch: pytest.MonkeyPatch) -> Running:
    """tests/backends/conftest.py's service, beside a narrow terminal's width (had rich been
    asked): piped output must not care."""
    monkeypatch.setenv("COLUMNS", "80")
    return running


def qosched_cli(home: Path, *args: str) -> int:
    command, *rest = args
    return main([command, "--home", str(home), *rest])


#: Hand-chosen jobs: (name, state, cores held, ended this many seconds ago).
MIXED = [
    ("cnn-a", "queued", [], None),
    ("cnn-b", "running", [0, 1], None),
    ("bert-a", "profiling", [2], None),
    ("bert-b", "preempted", [], None),
    ("cnn-old", "succeeded", [], 3600.0),  # ended an hour ago: not listed by default
    ("cnn-new", "failed", [], 10.0),  # ended just now: listed by default
    ("bert-c", "cancelled", [], 1000.0),
]


@pytest.fixture
def mixed(running: Running) -> Running:
    """The MIXED jobs, j-000001 to j-000007 in that order."""
    now = time.time()
    for name, state, cpus, ended_ago in MIXED:
        job = running.service.submit(spec_text(name=name), f"{name}.yaml")
        changes: dict = {"state": state, "cpus": cpus}
        if ended_ago is not None:
            changes["finished_at"] = now - ended_ago
        running.service.update(job.id, **changes)
    return running


def ids(*numbers: int) -> list[str]:
    return [f"j-{n:06d}" for n in numbers]


SELECTIONS = [
    ([], ids(1, 2, 3, 4, 6)),  # not ended, or ended in the last 5 minutes
    (["--all"], ids(1, 2, 3, 4, 5, 6, 7)),
    (["--state", "running"], ids(2)),
    (["--state", "queued", "--state", "preempted"], ids(1, 4)),
    (["--state", "SUCCEEDED"], ids(5)),  # an old ended job, asked for by its state
    (["--name", "cnn-*"], ids(1, 2, 6)),
    (["--name", "cnn-*", "--all"], ids(1, 2, 5, 6)),
    (["--name", "bert-?", "--state", "cancelled"], ids(7)),
    (["--name", "[bc]*-a"], ids(1, 3)),
    (["--name", "CNN-*", "--all"], []),  # case counts
    (["--name", "gpt-*"], []),
]
SELECTION_IDS = [" ".join(flags) or "default" for flags, _ in SELECTIONS]


@pytest.mark.parametrize(("flags", "expected"), SELECTIONS, ids=SELECTION_IDS)
def test_status_chooses_the_jobs_the_filters_say_in_every_output(
    mixed: Running, capsys: pytest.CaptureFixture[str], flags: list[str], expected: list[str]
) -> None:
    capsys.readouterr()
    assert qosched_cli(mixed.home, "status", *flags, "-o", "name") == 0
    assert capsys.readouterr().out.splitlines() == expected
    assert qosched_cli(mixed.home, "status", *flags, "--json") == 0
    assert [job["id"] for job in json.loads(capsys.readouterr().out)] == expected
    assert qosched_cli(mixed.home, "status", *flags) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split()[:3] == ["ID", "NAME", "STATE"]
    assert [row.split()[0] for row in rows] == expected


def test_status_watch_piped_prints_a_snapshot_every_interval_with_its_filters(
    mixed: Running, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    naps = []

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 2:
            mixed.service.update("j-000001", state="running", cpus=[3])
        if len(naps) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(local.time, "sleep", sleep)
    capsys.readouterr()
    assert qosched_cli(mixed.home, "status", "--watch", "--state", "running", "-o", "name") == 0
    assert naps == [local.WATCH_INTERVAL_S] * 3
    snapshots = capsys.readouterr().out.split("\n\n")
    assert [s.split() for s in snapshots] == [ids(2), ids(2), ids(1, 2)]


def test_status_piped_prints_plain_columns_cpus_as_counts_and_wide_adds_their_ids(
    mixed: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert qosched_cli(mixed.home, "status", "--state", "running", "--state", "profiling") == 0
    lines = capsys.readouterr().out.splitlines()
    # No summary, no box: the header first, then one line per job, no line ending in spaces.
    assert lines[0].split() == [
        "ID",
        "NAME",
        "STATE",
        "CPUS",
        "PROGRESS",
        "DEADLINE",
        "FINISH",
        "QOS",
    ]
    assert [line.split()[:4] for line in lines[1:]] == [
        ["j-000002", "cnn-b", "running", "2"],
        ["j-000003", "bert-a", "profiling", "1"],
    ]
    assert all(line == line.rstrip() for line in lines)
    # Each column starts where its header does.
    start = lines[0].index("STATE")
    assert [line[start:].split()[0] for line in lines[1:]] == ["running", "profiling"]
    assert qosched_cli(mixed.home, "status", "--state", "running", "-o", "wide") == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[:5] == ["ID", "NAME", "STATE", "CPUS", "CPU-IDS"]
    assert row.split()[:5] == ["j-000002", "cnn-b", "running", "2", "0-1"]


def test_status_on_a_terminal_says_how_many_jobs_it_leaves_out(
    mixed: Running, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(local, "_stdout_is_terminal", lambda: True)
    monkeypatch.setenv("COLUMNS", "200")
    capsys.readouterr()
    assert qosched_cli(mixed.home, "status") == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines() if line.startswith("j-")] == ids(
        1, 2, 3, 4, 6
    )
    assert "2 of 7 jobs not shown" in out and "--all shows every job" in out
    assert qosched_cli(mixed.home, "status", "--name", "gpt-*") == 0
    out = capsys.readouterr().out
    assert "7 of 7 jobs not shown: only those with state queued" in out
    assert "a name matching 'gpt-*'" in out


@pytest.mark.parametrize(
    ("command", "flags", "message"),
    [
        ("status", ["--state", "bogus"], "unknown state 'bogus'; known: queued, profiling, "
         "running, "),
        ("status", ["--all", "--state", "queued"], "not allowed with argument"),
        ("status", ["-o", "yaml"], "invalid choice: 'yaml'"),
        ("cancel", ["--state", "succeeded"], "a succeeded job has ended and cannot be "
         "cancelled; expected one of queued, profiling, running, preempted"),
        ("cancel", ["--all", "--state", "queued"], "not allowed with argument"),
    ],
    ids=["unknown-state", "all-and-state", "unknown-output", "cancel-ended-state",
         "cancel-all-and-state"],
)  # fmt: skip
def test_a_bad_filter_is_refused_naming_what_it_takes(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    flags: list[str],
    message: str,
) -> None:
    with pytest.raises(SystemExit) as caught:
        qosched_cli(tmp_path, command, *flags)
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


def test_status_of_one_job_takes_no_list_filter(
    mixed: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    assert qosched_cli(mixed.home, "status", "j-000001", "--name", "cnn-*") == 2
    assert "give them without JOB" in capsys.readouterr().err


@pytest.mark.process
def test_status_piped_keeps_200_jobs_one_line_each_whatever_the_width(running: Running) -> None:
    now = time.time()
    expected = []
    for n in range(200):
        # Names up to the longest allowed (63), and long FINISH and QOS cells, so that most
        # lines run past 80 columns.
        name = "x" * (n % 55) + f"job-{n:03d}"
        job = running.service.submit(spec_text(name=name), f"{name}.yaml")
        if n % 3 == 0:
            running.service.update(
                job.id,
                state="running",
                cpus=list(range(n % 4 + 1)),
                iterations_done=n,
                predicted_finish_at=now + 120,
                predicted_finish_band=[now + 100, now + 150],
                guaranteed=True,
            )
        expected.append((job.id, name))
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [sys.executable, "-m", "qosched", "status", "--home", str(running.home)],
        capture_output=True,  # standard output is a pipe, as in `qosched status | less`
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert header.split()[:4] == ["ID", "NAME", "STATE", "CPUS"]
    assert [tuple(row.split()[:2]) for row in rows] == expected  # nothing wrapped or cut
    assert sum(len(row) > 80 for row in rows) > 100  # so the width was not kept to
    running_rows = [row.split() for row in rows[::3]]
    assert [row[2:4] for row in running_rows] == [
        ["running", str(n % 4 + 1)] for n in range(0, 200, 3)
    ]
    assert all(row.endswith("on track (guaranteed)") for row in rows[::3])


# --- cancel --------------------------------------------------------------------------------------


CANCELS = [
    (["--all"], ids(1, 2, 3, 4)),  # every job not yet ended
    (["--state", "queued"], ids(1)),
    (["--state", "running", "--state", "preempted"], ids(2, 4)),
    (["--name", "cnn-*"], ids(1, 2)),  # cnn-old and cnn-new have ended
    (["--name", "bert-*", "--state", "profiling"], ids(3)),
]


@pytest.mark.parametrize(
    ("flags", "expected"), CANCELS, ids=[" ".join(flags) for flags, _ in CANCELS]
)
def test_cancel_by_selection_cancels_exactly_the_jobs_it_chooses(
    mixed: Running, capsys: pytest.CaptureFixture[str], flags: list[str], expected: list[str]
) -> None:
    before = {job.id: job.state.value for job in mixed.service.jobs()}
    capsys.readouterr()
    assert qosched_cli(mixed.home, "cancel", *flags) == 0
    assert capsys.readouterr().out.splitlines() == [f"{job_id} cancelled" for job_id in expected]
    after = {job.id: job.state.value for job in mixed.service.jobs()}
    assert after == {
        job_id: "cancelled" if job_id in expected else state for job_id, state in before.items()
    }


def test_cancel_json_prints_the_jobs_cancelled(
    mixed: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert qosched_cli(mixed.home, "cancel", "--name", "bert-*", "--json") == 0
    printed = json.loads(capsys.readouterr().out)
    assert [(job["id"], job["state"]) for job in printed] == [
        ("j-000003", "cancelled"),
        ("j-000004", "cancelled"),
    ]
    assert printed == [mixed.service.job(job["id"]).to_json() for job in printed]
    assert qosched_cli(mixed.home, "cancel", "j-000001", "--json") == 0
    assert [job["id"] for job in json.loads(capsys.readouterr().out)] == ["j-000001"]


def test_cancel_matching_nothing_says_so_and_exits_0(
    mixed: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    before = [job.to_json() for job in mixed.service.jobs()]
    capsys.readouterr()
    assert qosched_cli(mixed.home, "cancel", "--name", "cnn-old") == 0  # it has ended
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "no job to cancel: none has state queued, profiling, running or preempted" in (
        captured.err
    )
    assert "a name matching 'cnn-old'" in captured.err
    assert qosched_cli(mixed.home, "cancel", "--name", "gpt-*", "--json") == 0
    assert json.loads(capsys.readouterr().out) == []
    assert [job.to_json() for job in mixed.service.jobs()] == before


def test_cancel_skips_a_chosen_job_that_ended_before_its_turn(
    mixed: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    original = mixed.service.cancel

    def racing(job_id: str):  # j-000002 succeeds just as the cancel for it arrives
        if job_id == "j-000002":
            mixed.service.update(job_id, state="succeeded", finished_at=time.time(), cpus=[])
        return original(job_id)

    mixed.service.cancel = racing  # type: ignore[method-assign]
    capsys.readouterr()
    assert qosched_cli(mixed.home, "cancel", "--name", "cnn-*") == 0
    captured = capsys.readouterr()
    assert captured.out == "j-000001 cancelled\n"
    assert "j-000002 ended (succeeded) before it could be cancelled" in captured.err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ([], "name the jobs to cancel"),
        (["j-000001", "--all"], "give job ids or --all, --state and --name, not both"),
        (["j-000001", "--name", "cnn-*"], "not both"),
    ],
    ids=["nothing", "ids-and-all", "ids-and-name"],
)
def test_cancel_refuses_an_unclear_request_and_cancels_nothing(
    mixed: Running, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    before = [job.to_json() for job in mixed.service.jobs()]
    assert qosched_cli(mixed.home, "cancel", *flags) == 2
    assert message in capsys.readouterr().err
    assert [job.to_json() for job in mixed.service.jobs()] == before


# --- submit --json -------------------------------------------------------------------------------


def test_submit_json_prints_the_jobs_submitted(
    running: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = write_specs(tmp_path, "alpha", "beta")
    assert qosched_cli(running.home, "submit", "--json", *paths) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [(job["id"], job["name"], job["state"]) for job in printed] == [
        ("j-000001", "alpha", "queued"),
        ("j-000002", "beta", "queued"),
    ]
    assert printed == [job.to_json() for job in running.service.jobs()]


def test_submit_json_names_the_jobs_submitted_before_one_was_refused(
    running: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = running.service.submit

    def refusing_the_second(text: str, source: str):
        if source.endswith("beta.yaml"):
            raise InputError("no room for beta", source=source)
        return original(text, source)

    running.service.submit = refusing_the_second  # type: ignore[method-assign]
    paths = write_specs(tmp_path, "alpha", "beta")
    assert qosched_cli(running.home, "submit", "--json", *paths) == 2
    captured = capsys.readouterr()
    assert [job["name"] for job in json.loads(captured.out)] == ["alpha"]
    assert "no room for beta" in captured.err


# --- completion of job ids -----------------------------------------------------------------------


def completed(line: str, tmp_path: Path) -> list[str]:
    """What ``qosched`` answers a shell's completion script asking to complete ``line``."""
    answer = tmp_path / "answer"
    extra = {
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_IFS": "\n",
        "_ARGCOMPLETE_STDOUT_FILENAME": str(answer),
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
    }
    done = subprocess.run(
        [sys.executable, "-m", "qosched"],
        env={**os.environ, "PYTHONPATH": str(SRC), **extra},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return sorted(word.strip() for word in answer.read_text().split("\n") if word.strip())


@pytest.mark.process
def test_job_ids_are_completed_from_the_running_service(running: Running, tmp_path: Path) -> None:
    for name in ("alpha", "beta"):
        running.service.submit(spec_text(name=name), f"{name}.yaml")
    home = running.home
    assert completed(f"qosched cancel --home {home} j-", tmp_path) == ["j-000001", "j-000002"]
    assert completed(f"qosched status --home {home} j-0000", tmp_path) == ["j-000001", "j-000002"]
    # Without a service there is nothing to offer, and no error either.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert completed(f"qosched cancel --home {empty} j-", tmp_path) == []
