"""A job's command may make anything of the files in its folder: what the runner and the service
read there is bounded, and anything but a regular file fails that job alone."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest
from runner_helpers import ESCAPE, Runners, events, log_of, make_job_dir

from qosched.backends.local.files import read_regular
from qosched.backends.local.progress import (
    PROGRESS_READ_BYTES,
    ProgressFollower,
    ProgressLog,
    RunnerEvent,
    read_progress,
)
from qosched.backends.local.runner import (
    MAX_PROGRESS_LINE,
    MAX_WARNINGS,
    AllocationWatcher,
    CommandProgress,
)
from qosched.backends.local.runner import PROGRESS_READ_BYTES as LOOK_BYTES
from qosched.core.errors import InputError
from qosched.trainingjob.protocol import EXIT_INPUT_ERROR

pytestmark = pytest.mark.process

# --- reading a file the job may have replaced ------------------------------------------------


def test_a_regular_file_is_read_from_an_offset_up_to_a_limit(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"0123456789")
    assert read_regular(path, 2, 5) == (b"23456", 10)
    assert read_regular(path, 8, 5) == (b"89", 10)
    assert read_regular(tmp_path / "missing", 0, 5) is None


@pytest.mark.parametrize("kind", ["symlink to /dev/zero", "fifo", "folder"])
def test_anything_but_a_regular_file_is_refused_without_reading_it(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "f"
    if kind == "fifo":
        os.mkfifo(path)  # opened for reading without a writer: a plain open() blocks forever
    elif kind == "folder":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")  # a plain read() fills memory
    with pytest.raises(InputError, match=r"not a regular file") as error:
        read_regular(path, 0, 1 << 20)
    assert str(path) in str(error.value)


# --- the runner following a command's progress file -------------------------------------------


def test_a_line_too_long_to_be_a_report_is_skipped_a_piece_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "command_progress.jsonl"
    reader = CommandProgress(path)
    with open(path, "ab") as out:
        out.write(json.dumps({"iteration": 1}).encode() + b"\n")
        out.write(b"x" * (3 * LOOK_BYTES))  # no newline yet: more than any look takes
    problems = reader.read()
    assert reader.iteration == 1
    assert problems == [f"{path.name}:2: longer than {MAX_PROGRESS_LINE} bytes; line ignored"]
    looks = 0
    while reader.offset < path.stat().st_size:
        assert reader.read() == []  # the rest of the long line, one bounded look after another
        looks += 1
    assert looks >= 2
    with open(path, "ab") as out:
        out.write(b"still the long line\n" + json.dumps({"iteration": 2}).encode() + b"\n")
    assert reader.read() == []
    assert reader.iteration == 2 and reader.line == 3


def test_an_unfinished_short_line_waits_for_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "command_progress.jsonl"
    reader = CommandProgress(path)
    with open(path, "ab") as out:
        out.write(b'{"iteration": 4')
    assert reader.read() == [] and reader.iteration is None
    with open(path, "ab") as out:
        out.write(b"}\n")
    assert reader.read() == [] and reader.iteration == 4


def test_lines_left_by_an_earlier_run_are_counted_not_taken(tmp_path: Path) -> None:
    path = tmp_path / "command_progress.jsonl"
    path.write_bytes(b'{"iteration": 7}\n' * 100_000)  # over a look's worth
    reader = CommandProgress(path)
    assert (reader.line, reader.offset, reader.iteration) == (100_000, path.stat().st_size, None)


FIFO_COMMAND = textwrap.dedent(
    """
    import os, time
    path = os.environ["QOSCHED_PROGRESS_FILE"]
    os.remove(path)
    os.mkfifo(path)
    with open(os.environ["QOSCHED_JOB_DIR"] + "/child.pid", "w") as out:
        out.write(str(os.getpid()))
    time.sleep(60)
    """
)


def test_a_command_that_makes_its_progress_file_a_fifo_fails_as_bad_input(
    tmp_path: Path, runners: Runners
) -> None:
    job_dir = make_job_dir(tmp_path, workload=None, command=[sys.executable, "-c", FIFO_COMMAND])
    started = time.monotonic()
    assert runners.run(job_dir) == EXIT_INPUT_ERROR, log_of(job_dir)
    assert time.monotonic() - started < 40  # not the command's 60 s, nor forever
    error = events(job_dir)[-1]
    assert error.event is RunnerEvent.ERROR and error.fatal
    assert "is a FIFO, not a regular file" in (error.message or "")
    child = int((job_dir / "child.pid").read_text())
    assert not Path(f"/proc/{child}").exists()  # ended and reaped by its runner


# --- the service following a runner's progress.jsonl ------------------------------------------


def test_the_follower_parses_only_what_was_added(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    follower = ProgressFollower(path)
    assert follower.read() == []  # no file yet
    with ProgressLog(path) as log:
        log.write(RunnerEvent.START, iteration=0, loss=None)
        log.write(RunnerEvent.PROGRESS, iteration=1, loss=None)
    assert [e.iteration for e in follower.read()] == [0, 1]
    assert follower.read() == []
    with ProgressLog(path) as log:
        log.write(RunnerEvent.PROGRESS, iteration=2, loss=None)
    with open(path, "a") as out:
        out.write('{"t": 1, "event": "prog')  # being written
    assert [e.iteration for e in follower.read()] == [2]
    with open(path, "a") as out:
        out.write('ress", "cpus": 1, "iteration": 3}\n{"t": 1, "event": "nope", "cpus": 1}\n')
    with pytest.raises(InputError, match=r"progress\.jsonl:5: "):
        follower.read()


def test_a_progress_log_that_shrinks_or_holds_a_huge_line_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    with ProgressLog(path) as log:
        log.write(RunnerEvent.START, iteration=0, loss=None)
    follower = ProgressFollower(path)
    follower.read()
    path.write_text("")
    with pytest.raises(InputError, match="shrank"):
        follower.read()
    path.write_bytes(b"x" * (PROGRESS_READ_BYTES + 10))
    with pytest.raises(InputError, match=r"progress\.jsonl:1: a line longer than"):
        ProgressFollower(path).read()


def test_a_progress_log_replaced_by_a_link_to_dev_zero_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    path.symlink_to("/dev/zero")
    with pytest.raises(InputError, match="symbolic link"):
        ProgressFollower(path).read()


def test_a_command_that_exits_0_short_of_its_work_is_done_with_a_warning(
    tmp_path: Path, runners: Runners
) -> None:
    script = (
        "import json, os\n"
        "with open(os.environ['QOSCHED_PROGRESS_FILE'], 'a') as out:\n"
        "    out.write(json.dumps({'iteration': 3}) + '\\n')\n"
    )
    job_dir = make_job_dir(
        tmp_path, workload=None, command=[sys.executable, "-c", script], iterations=20
    )
    assert runners.run(job_dir) == 0, log_of(job_dir)
    relayed = events(job_dir)
    warning = next(e for e in relayed if e.event is RunnerEvent.WARNING)
    assert warning.message == (
        "the command exited 0 having reported 3 of its 20 iterations; the job counts as done"
    )
    assert relayed[-1].event is RunnerEvent.DONE and relayed[-1].iteration == 3


def test_a_flood_of_unusable_lines_makes_a_bounded_number_of_warnings(
    tmp_path: Path, runners: Runners
) -> None:
    # Each warning becomes an entry of the job's audit log, which the web page shows.
    script = (
        "import json, os\n"
        "with open(os.environ['QOSCHED_PROGRESS_FILE'], 'a') as out:\n"
        "    out.write('junk\\n' * 5000 + json.dumps({'iteration': 20}) + '\\n')\n"
    )
    job_dir = make_job_dir(
        tmp_path, workload=None, command=[sys.executable, "-c", script], iterations=20
    )
    assert runners.run(job_dir) == 0, log_of(job_dir)
    warnings = [e.message or "" for e in events(job_dir) if e.event is RunnerEvent.WARNING]
    assert len(warnings) == MAX_WARNINGS + 1
    assert warnings[0].startswith("command_progress.jsonl:1: not valid JSON")
    assert warnings[-1] == (
        f"more than {MAX_WARNINGS} lines of command_progress.jsonl could not be used; "
        "only the job's log names the others"
    )
    assert "command_progress.jsonl:5000: not valid JSON" in log_of(job_dir)


def test_an_allocation_file_rewritten_with_junk_makes_a_bounded_number_of_errors(
    tmp_path: Path,
) -> None:
    # The command may write the file it is told to read its re-sizes from; it is looked at
    # 5 times a second.
    path, progress = tmp_path / "allocation.json", tmp_path / "progress.jsonl"
    log = ProgressLog(progress)
    watcher = AllocationWatcher(path, log, apply=lambda allocation: None)
    for n in range(3 * MAX_WARNINGS):
        path.write_text("junk" * (n + 1))  # a new size: seen as changed each time
        assert watcher.poll(iteration=None, loss=None, force=True) is False
    log.close()
    errors = [e.message or "" for e in read_progress(progress) if e.event is RunnerEvent.ERROR]
    assert len(errors) == MAX_WARNINGS + 1
    assert "allocation.json:1: not valid JSON" in errors[0]
    assert errors[-1] == (
        f"allocation.json could not be applied more than {MAX_WARNINGS} times; "
        "no more such errors are reported"
    )


ESCAPING = ESCAPE + textwrap.dedent(
    """
    while not os.path.exists(os.environ["QOSCHED_JOB_DIR"] + "/escaped.pid"):
        time.sleep(0.01)
    with open(os.environ["QOSCHED_PROGRESS_FILE"], "a") as out:
        out.write(json.dumps({"iteration": 2}) + "\\n")
    """
)


@pytest.mark.slow
def test_a_process_the_command_leaves_behind_is_stopped_with_the_job(
    tmp_path: Path, runners: Runners
) -> None:
    job_dir = make_job_dir(
        tmp_path, workload=None, command=[sys.executable, "-c", ESCAPING], iterations=2
    )
    assert runners.run(job_dir) == 0, log_of(job_dir)
    escaped = int((job_dir / "escaped.pid").read_text())
    assert not Path(f"/proc/{escaped}").exists(), "it outlived its job"
    warnings = [e.message for e in events(job_dir) if e.event is RunnerEvent.WARNING]
    assert warnings == ["1 process(es) the command left running when it exited were stopped"]


DETACHING = textwrap.dedent(
    """
    import json, os, time
    helpers = []
    for _ in range(5):  # a detached helper that ends at once: a double fork
        reader, writer = os.pipe()
        middle = os.fork()
        if middle == 0:
            helper = os.fork()
            if helper == 0:
                os._exit(0)
            os.write(writer, str(helper).encode())
            os._exit(0)
        os.waitpid(middle, 0)
        helpers.append(int(os.read(reader, 32)))
    time.sleep(1.0)  # the helpers' parent is now the runner, which had time to reap them
    def state(pid):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return "gone"
    zombies = [pid for pid in helpers if state(pid) == "Z"]
    with open(os.environ["QOSCHED_JOB_DIR"] + "/zombies.json", "w") as out:
        json.dump(zombies, out)
    with open(os.environ["QOSCHED_PROGRESS_FILE"], "a") as out:
        out.write(json.dumps({"iteration": 1}) + "\\n")
    """
)


def test_detached_helpers_that_end_are_reaped_while_the_command_runs(
    tmp_path: Path, runners: Runners
) -> None:
    job_dir = make_job_dir(
        tmp_path, workload=None, command=[sys.executable, "-c", DETACHING], iterations=1
    )
    assert runners.run(job_dir) == 0, log_of(job_dir)
    assert json.loads((job_dir / "zombies.json").read_text()) == []
