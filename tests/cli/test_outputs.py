"""Where a command writes is checked before it runs, and a file it still cannot write is an
error naming the file (exit 2), never a traceback after minutes of simulation."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from qosched.cli.main import main
from qosched.cli.outputs import output_dir, output_file
from qosched.core.errors import InputError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TRACE = ["sim", "cluster", "--nodes", "2", "--gpus-per-node", "8", "--policy", "edf"]


def bundled_trace(tmp_path: Path) -> str:
    out = tmp_path / "t.csv"
    assert main(["trace", "generate", "--out", str(out), "--jobs", "5", "--seed", "1"]) == 0
    return str(out)


@pytest.mark.parametrize("flag", ["--jobs-csv", "--plot"])
def test_an_output_folder_that_is_a_file_stops_the_run_before_it_starts(tmp_path, capsys, flag):
    trace = bundled_trace(tmp_path)
    blocker = tmp_path / "taken"
    blocker.write_text("")
    assert main([*TRACE, "--trace", trace, flag, str(blocker), "--json"]) == 2
    captured = capsys.readouterr()
    assert f"field '{flag}': cannot create folder {blocker}" in captured.err
    assert captured.out == ""  # nothing simulated, nothing printed


def test_an_output_folder_is_made_with_its_parents(tmp_path, capsys):
    trace = bundled_trace(tmp_path)
    folder = tmp_path / "a" / "b"
    assert main([*TRACE, "--trace", trace, "--jobs-csv", str(folder), "--json"]) == 0
    assert (folder / "jobs_edf.csv").is_file()


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        # Kernels written out: nothing to capture and estimate first (gpu_apps_small.yaml's
        # models took ten seconds of CPU), the trace is what is looked at.
        (["gpu", "sim", str(EXAMPLES / "gpu_apps_kernels.yaml"), "--policy", "naive", "--trace"],
         "--trace"),
        (["trace", "generate", "--jobs", "3", "--out"], "--out"),
    ],
    ids=["gpu-sim-trace", "trace-generate-out"],
)  # fmt: skip
def test_an_output_file_in_a_missing_folder_is_written_there(tmp_path, capsys, argv, flag):
    target = tmp_path / "missing" / "deeper" / "out.file"
    assert main([*argv, str(target)]) == 0
    assert target.is_file() and target.stat().st_size > 0


MISSING = "missing.yaml"  # a spec that does not exist: the run stops right after the checks


@pytest.mark.parametrize(
    ("argv", "flag", "name"),
    [
        (["gpu", "run", MISSING, "--policy", "naive", "--device", "cpu"], "--trace", "t.json"),
        (["infer", "plan", MISSING], "--out", "plan.json"),
        (["infer", "plan", MISSING], "--picture", "plan.png"),
        (["infer", "run", MISSING, "--plan", "p.json"], "--trace", "t.json"),
        (["infer", "run", MISSING, "--plan", "p.json"], "--calibration-out", "cal.json"),
        (["trace", "import", MISSING, "--from", "philly"], "--out", "t.csv"),
        ([*TRACE, "--trace", MISSING], "--plot", ""),
        ([*TRACE, "--trace", MISSING], "--jobs-csv", ""),
    ],
    ids=["gpu-run-trace", "infer-plan-out", "infer-plan-picture", "infer-run-trace",
         "infer-run-calibration-out", "trace-import-out", "sim-cluster-plot",
         "sim-cluster-jobs-csv"],
)  # fmt: skip
def test_every_output_option_makes_its_folder_before_the_run(
    tmp_path, capsys, monkeypatch, argv, flag, name
):
    # Made before the input is read, as a folder option's folder always was: the run then fails
    # on its missing input, not on where it would write.
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "new" / "deeper"
    target = folder / name if name else folder
    assert main([*argv, flag, str(target)]) == 2
    assert folder.is_dir()
    assert not (folder / name).is_file() if name else not any(folder.iterdir())
    assert f"field '{flag}'" not in capsys.readouterr().err


def test_output_file_refuses_a_folder_and_makes_nothing(tmp_path):
    with pytest.raises(InputError, match="is a folder, not a file"):
        output_file(str(tmp_path), "--out")
    assert output_file(str(tmp_path / "new.csv"), "--out") == tmp_path / "new.csv"
    assert not (tmp_path / "new.csv").exists()
    blocker = tmp_path / "taken"
    blocker.write_text("")
    with pytest.raises(InputError, match="cannot create folder"):
        output_file(str(blocker / "new.csv"), "--out")
    assert output_file(None, "--out") is None and output_dir(None, "--plot") is None


def test_a_write_that_fails_anyway_names_the_file(tmp_path, capsys, monkeypatch):
    # Checks made first cannot foresee a full disk: the OSError still ends as an error line.
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "t.csv"))

    monkeypatch.setattr("qosched.cli.cluster.write_trace", full)
    assert main(["trace", "generate", "--out", str(tmp_path / "t.csv"), "--jobs", "3"]) == 2
    assert f"{tmp_path / 't.csv'}: No space left on device" in capsys.readouterr().err
