"""bench/itp_policy_table.py: every policy on the ITP release, its row and its failures."""

import subprocess
import sys
from pathlib import Path

import pytest

from bench_scripts import BENCH, bench_script

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def table():
    with bench_script("itp_policy_table") as module:
        yield module


def _run(policy: str, met: int, jobs: int = 10, wall: float = 1.0) -> dict:
    return {
        "policy": policy,
        "jobs": jobs,
        "deadline_met": met,
        "deadline_satisfactory_ratio": met / jobs,
        "wall_s": wall,
    }


def test_row_compares_qos_with_the_best_other_policy(table):
    runs = {p: _run(p, m) for p, m in (("edf", 1), ("elasticflow", 6), ("qos", 5))}
    row = table.row("cluster10", 32, runs, ["edf", "elasticflow", "qos"])
    # By hand: qos 5 of 10 against elasticflow's 6 of 10.
    assert row == (
        "| cluster10 | 10 | 256 | 0.100 | 0.600 | 0.500 | -0.1000 (-1 jobs, against "
        "`elasticflow`) | 1.0 / 1.0 / 1.0 |"
    )


def _bench(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, str(BENCH / "itp_policy_table.py"), *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=120)


def test_a_missing_cluster_file_is_refused_by_name(tmp_path):
    done = _bench("--traces", str(tmp_path), "--clusters", "cluster10", cwd=tmp_path)
    assert done.returncode == 2
    assert "lacks cluster10.csv" in done.stderr


def test_a_cluster_whose_command_fails_is_printed_and_the_table_goes_on(tmp_path):
    (tmp_path / "cluster10.csv").write_text("not,a,trace\n1,2,3\n")
    done = _bench("--traces", str(tmp_path), "--clusters", "cluster10", cwd=tmp_path)
    assert done.returncode == 0
    assert "| cluster10 | failed: " in done.stdout
