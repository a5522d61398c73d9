"""Every CSV file qosched reads (traces in both layouts, the public traces it imports, cluster
specs, speed tables) refuses bytes that are not UTF-8 text with an InputError naming the file and
the line, accepts a spreadsheet's byte-order mark, and never lets the codec's error through."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import pytest

from qosched.cli.main import main
from qosched.cluster.importers import import_trace
from qosched.cluster.spec import read_cluster_spec
from qosched.cluster.throughput import ThroughputModel
from qosched.cluster.traces import read_trace
from qosched.core.csv_file import first_undecodable_line, read_text
from qosched.core.errors import InputError

TABLES = ThroughputModel.bundled("A100")

QOSCHED_TRACE = [
    "job_id,submit_s,model,batch_size,iterations,deadline_s,requested_gpus,duration_s",
    "0,0,vgg16,256,5093,665.261,8,636.909",
    "1,10,vgg16,256,5093,865.261,8,636.909",
]
ITP_TRACE = ["job_id,submission_time,duration,num_gpu", "a,100,3600,4", "b,1300,600,8"]
CLUSTER_SPEC = ["num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node", "4,8,64,256"]


def write_bytes(tmp_path: Path, lines: list[str], bad_line: int, name: str = "f.csv") -> Path:
    """``lines`` as a file in which line ``bad_line`` (1-based) carries a byte no UTF-8 text has
    (0xff), the way a Latin-1 export or a truncated binary download would."""
    data = [line.encode() for line in lines]
    data[bad_line - 1] = data[bad_line - 1][:3] + b"\xff" + data[bad_line - 1][3:]
    path = tmp_path / name
    path.write_bytes(b"\n".join(data) + b"\n")
    return path


def read_as_trace(path: Path):
    return read_trace(path, TABLES)


def read_as_itp(path: Path):
    return import_trace(path, "itp", TABLES)


@pytest.mark.parametrize(
    ("reader", "lines"),
    [
        (read_as_trace, QOSCHED_TRACE),
        (read_as_itp, ITP_TRACE),
        (read_cluster_spec, CLUSTER_SPEC),
    ],
)
@pytest.mark.parametrize("bad_line", [1, 2, 3])
def test_bytes_that_are_not_utf8_name_the_file_and_line(tmp_path, reader, lines, bad_line):
    lines = (lines + lines[1:])[:3]  # every reader gets three lines
    path = write_bytes(tmp_path, lines, bad_line)
    with pytest.raises(InputError) as caught:
        reader(path)
    assert caught.value.source == str(path)
    assert caught.value.line == bad_line
    assert "not UTF-8 text" in str(caught.value)


def test_a_speed_table_that_is_not_utf8_names_its_file(tmp_path):
    tables = tmp_path / "tables"
    with resources.as_file(resources.files("qosched") / "data" / "throughputs" / "A100") as src:
        shutil.copytree(src, tables)
    victim = sorted(tables.glob("*.csv"))[0]
    lines = victim.read_text().splitlines()
    write_bytes(tables, lines, 2, victim.name)
    with pytest.raises(InputError) as caught:
        ThroughputModel.load(tables)
    assert (caught.value.source, caught.value.line) == (str(victim), 2)


def test_a_late_bad_byte_past_the_first_read_chunk_is_found_on_its_line(tmp_path):
    # The text reader decodes in chunks of several kilobytes: the line must come from the file,
    # not from the chunk the codec failed in.
    rows = [QOSCHED_TRACE[0]] + [f"{i},{i},vgg16,256,5093,{i + 900},8,636.909" for i in range(2000)]
    path = write_bytes(tmp_path, rows, 1500)
    with pytest.raises(InputError) as caught:
        read_trace(path, TABLES)
    assert caught.value.line == 1500


def test_a_byte_order_mark_is_dropped(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(QOSCHED_TRACE).encode() + b"\n")
    assert [job.job_id for job in read_trace(path, TABLES).jobs] == ["0", "1"]
    assert read_text(path, "x").startswith("job_id,")


def test_the_cli_prints_the_error_and_exits_2(tmp_path, capsys):
    path = write_bytes(tmp_path, QOSCHED_TRACE, 3)
    code = main(["sim", "cluster", "--trace", str(path), "--nodes", "2", "--gpus-per-node", "8"])
    assert code == 2
    assert f"{path}:3: not UTF-8 text" in capsys.readouterr().err


def test_first_undecodable_line_is_none_for_clean_or_missing_files(tmp_path):
    clean = tmp_path / "clean.csv"
    clean.write_text("a,b\n1,2\n")
    assert first_undecodable_line(clean) is None
    assert first_undecodable_line(tmp_path / "missing.csv") is None
