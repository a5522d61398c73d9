"""qosched.backends.local.joblog: a job's output rotated past its limit, tails read from the end
in bounded memory, offsets that never go back; and the same through the API and the CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from service_fakes import running_service

from qosched.backends.local import joblog
from qosched.backends.local.client import Client
from qosched.cli.main import main
from qosched.core.errors import InputError
from qosched.trainingjob import jobspec
from qosched.trainingjob.jobspec import parse_job_spec

pytestmark = pytest.mark.network

KI = 1024


def write(job_dir: Path, data: bytes) -> None:
    with open(job_dir / joblog.JOB_LOG, "ab") as log:
        log.write(data)


def lines(first: int, last: int) -> bytes:
    """Lines ``line 00001`` ... of 11 bytes each, numbered ``first`` to ``last``."""
    return b"".join(b"line %05d\n" % n for n in range(first, last + 1))


def test_under_the_limit_nothing_is_rotated(tmp_path: Path) -> None:
    write(tmp_path, lines(1, 10))
    assert not joblog.rotate_if_over(tmp_path, 110)  # exactly at the limit
    assert not (tmp_path / joblog.ROTATED_LOG).exists()
    assert not joblog.rotate_if_over(tmp_path / "no-such-job", 1)


def test_rotation_keeps_the_last_limit_bytes_and_offsets_go_on(tmp_path: Path) -> None:
    write(tmp_path, lines(1, 100))  # 1,100 bytes
    assert joblog.rotate_if_over(tmp_path, 220)
    # worker.log.1 holds the last 220 bytes (lines 81-100); worker.log is empty.
    assert (tmp_path / joblog.ROTATED_LOG).read_bytes() == lines(81, 100)
    assert (tmp_path / joblog.JOB_LOG).read_bytes() == b""
    assert json.loads((tmp_path / joblog.BASE_FILE).read_text()) == {
        "base": 1100,
        "kept_from": 880,
    }
    write(tmp_path, lines(101, 102))  # the job's next writes land at the start
    assert joblog.output_size(tmp_path) == 1122
    # A follower at offset 0 gets the oldest kept byte (880) on: it missed 880 bytes.
    first = joblog.read_chunk(tmp_path, 0, 1 << 20)
    assert (first.start, first.data) == (880, lines(81, 100))
    second = joblog.read_chunk(tmp_path, first.end, 1 << 20)
    assert (second.start, second.data) == (1100, lines(101, 102))
    assert joblog.read_chunk(tmp_path, 1122, 10).data == b""
    with pytest.raises(InputError, match="offset 1123 is past the end of the output"):
        joblog.read_chunk(tmp_path, 1123, 10)
    # Tails and whole reads span both files.
    assert joblog.read_tail(tmp_path, 3) == "line 00100\nline 00101\nline 00102\n"
    assert joblog.read_kept(tmp_path) == lines(81, 102)


def test_a_second_rotation_replaces_the_first(tmp_path: Path) -> None:
    write(tmp_path, lines(1, 30))
    assert joblog.rotate_if_over(tmp_path, 110)
    write(tmp_path, lines(31, 60))
    assert joblog.rotate_if_over(tmp_path, 110)
    assert (tmp_path / joblog.ROTATED_LOG).read_bytes() == lines(51, 60)
    assert joblog.read_chunk(tmp_path, 0, 1 << 20).start == 550  # 60 lines less the last 10
    assert joblog.read_chunk(tmp_path, 500, 1).start == 550  # the rotated-away bytes skipped
    assert joblog.read_chunk(tmp_path, 594, 11).data == b"line 00055\n"  # still kept


def test_a_tail_of_one_endless_line_reads_at_most_its_bound(tmp_path: Path) -> None:
    # 24 MiB without a newline: a tail must not read (or return) all of it.
    with open(tmp_path / joblog.JOB_LOG, "wb") as log:
        for _ in range(24):
            log.write(b"y" * (1 << 20))
    tail = joblog.read_tail(tmp_path, 5)
    assert tail == "y" * joblog.MAX_TAIL_BYTES + "\n"
    assert joblog.read_tail(tmp_path, 5, limit=10) == "y" * 10 + "\n"


@pytest.mark.parametrize(
    "content",
    [
        {"base": -1, "kept_from": 0},
        {"base": 5, "kept_from": 9},
        {"base": True, "kept_from": 0},
        [1, 2],
        "not json at all",
    ],
    ids=["negative", "out-of-order", "bool", "list", "garbage"],
)
def test_a_base_file_the_job_tampered_with_reads_as_never_rotated(
    tmp_path: Path, content: object
) -> None:
    write(tmp_path, lines(1, 3))
    text = content if isinstance(content, str) else json.dumps(content)
    (tmp_path / joblog.BASE_FILE).write_text(text)
    chunk = joblog.read_chunk(tmp_path, 0, 100)
    assert (chunk.start, chunk.data) == (0, lines(1, 3))


def test_a_fifo_or_a_link_in_place_of_the_log_is_refused_not_followed(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / joblog.JOB_LOG)
    with pytest.raises(InputError, match="is not a regular file"):
        joblog.read_tail(tmp_path, 1)  # returns at once: a FIFO is never waited on
    (tmp_path / joblog.JOB_LOG).unlink()
    (tmp_path / joblog.JOB_LOG).symlink_to("/dev/zero")
    with pytest.raises(InputError, match="is a symbolic link"):
        joblog.read_chunk(tmp_path, 0, 10)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, jobspec.DEFAULT_LOG_LIMIT), ("1Mi", 1 << 20), (65536, 65536), ("64Gi", 64 << 30)],
)
def test_the_spec_states_the_log_limit(value: object, expected: int) -> None:
    extra = "" if value is None else f"\n  logLimit: {value}"
    spec = parse_job_spec(
        "kind: TrainingJob\napiVersion: qosched/v1\nmetadata: {name: a}\n"
        f"spec:\n  workload: cnn\n  work: {{iterations: 5}}\n  deadline: 1h{extra}\n",
        "job.yaml",
    )
    assert spec.log_limit_bytes == expected
    assert type(spec).from_dict(spec.to_dict()).log_limit_bytes == expected


@pytest.mark.parametrize("value", ["1Ki", "65Gi", "-1", "lots", "true"])
def test_a_log_limit_out_of_bounds_names_the_field(value: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_job_spec(
            "kind: TrainingJob\napiVersion: qosched/v1\nmetadata: {name: a}\n"
            f"spec:\n  workload: cnn\n  work: {{iterations: 5}}\n  deadline: 1h\n"
            f"  logLimit: {value}\n",
            "job.yaml",
        )
    assert caught.value.field == "spec.logLimit"


# --- through the API and the command line --------------------------------------------------------


def test_a_tail_over_the_api_is_bounded_however_long_the_line(tmp_path: Path) -> None:
    with running_service(tmp_path) as running:
        client = Client(running.server.url, running.token)
        job = running.service.submit(
            "kind: TrainingJob\napiVersion: qosched/v1\nmetadata: {name: a}\n"
            "spec: {workload: cnn, work: {iterations: 5}, deadline: 1h}\n",
            "job.yaml",
        )
        running.service.write_log(job.id, "z" * (3 << 20))  # 3 MiB, no newline
        tail = client.logs(job.id, 5)
        assert tail == "z" * joblog.MAX_TAIL_BYTES + "\n"


def test_logs_after_a_rotation_say_what_was_missed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_service(tmp_path) as running:
        job = running.service.submit(
            "kind: TrainingJob\napiVersion: qosched/v1\nmetadata: {name: a}\n"
            "spec: {workload: cnn, work: {iterations: 5}, deadline: 1h}\n",
            "job.yaml",
        )
        running.service.write_log(job.id, lines(1, 100).decode())
        job_dir = tmp_path / job.id
        assert joblog.rotate_if_over(job_dir, 110)
        running.service.write_log(job.id, "after\n")
        assert main(["logs", "--home", str(tmp_path), job.id]) == 0
        captured = capsys.readouterr()
        assert captured.out == lines(91, 100).decode() + "after\n"
        assert f"[990 bytes of {job.id}'s output were rotated away" in captured.err


def test_a_progress_line_with_a_huge_number_says_so_without_python_advice(tmp_path: Path) -> None:
    from qosched.backends.local.progress import read_progress

    path = tmp_path / "progress.jsonl"
    path.write_text('{"t": 1.0, "event": "progress", "iteration": ' + "9" * 5000 + "}\n")
    with pytest.raises(InputError) as caught:
        read_progress(path)
    assert (
        str(caught.value)
        == f"{path}:1: not valid JSON: a number of 5000 digits; no field takes more than 30"
    )


def test_the_whole_log_over_the_api_is_streamed_in_chunks(tmp_path: Path) -> None:
    import http.client

    with running_service(tmp_path) as running:
        job = running.service.submit(
            "kind: TrainingJob\napiVersion: qosched/v1\nmetadata: {name: a}\n"
            "spec: {workload: cnn, work: {iterations: 5}, deadline: 1h}\n",
            "job.yaml",
        )
        written = lines(1, 300_000)  # 3.3 MB: more than three of the service's chunks
        running.service.write_log(job.id, written.decode())
        connection = http.client.HTTPConnection(running.server.host, running.server.port)
        try:
            connection.request(
                "GET", f"/jobs/{job.id}/logs", headers={"Authorization": f"Bearer {running.token}"}
            )
            response = connection.getresponse()
            body = response.read()
        finally:
            connection.close()
        assert response.status == 200
        assert response.getheader("Content-Length") is None
        assert response.getheader("Transfer-Encoding") == "chunked"
        assert body == written
        assert Client(running.server.url, running.token).logs(job.id) == written.decode()
