"""``qosched`` starts without importing what only some commands need: building the parser,
``--help`` of the top level and of the light commands, and ``status`` never load PyTorch,
SciPy, matplotlib or the Kubernetes client (each costs seconds). Checked in a fresh
interpreter, by what ``sys.modules`` holds afterwards, not by timing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

HEAVY = ("torch", "scipy", "matplotlib", "kubernetes")

# Runs each argv (given as JSON) through main() in this order, printing after each the heavy
# modules loaded so far, so the first command that loads one is the one named.
PROBE = """\
import contextlib, io, json, sys
import qosched.cli.main as m
m.build_parser()
print(json.dumps(["build_parser()", sorted(n for n in {heavy} if n in sys.modules)]))
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            m.main(argv)
        except SystemExit:
            pass
    print(json.dumps([" ".join(argv), sorted(n for n in {heavy} if n in sys.modules)]))
"""

LIGHT = [
    ["--help"],
    ["--version"],
    ["status", "--help"],
    ["status"],  # no service: the error is printed, nothing heavy is needed for it
    ["status", "j-000001"],
    ["submit", "--help"],
    ["logs", "--help"],
    ["cancel", "--help"],
    ["up", "--help"],
    ["down", "--help"],
    ["demo", "--help"],
    ["infer", "plan", "--help"],
    ["gpu", "estimate", "--help"],
    ["gpu", "sim", "--help"],
    ["gpu", "run", "--help"],
    ["k8s", "job", "--help"],
]


def probe(argvs: list[list[str]], home: Path) -> list[tuple[str, list[str]]]:
    completed = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), json.dumps(argvs)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"QOSCHED_HOME": str(home), "PATH": "/usr/bin:/bin"},
    )
    assert completed.returncode == 0, completed.stderr
    return [tuple(json.loads(line)) for line in completed.stdout.splitlines()]


def test_the_parser_help_and_status_load_no_heavy_module(tmp_path: Path) -> None:
    loaded = probe(LIGHT, tmp_path)
    assert [name for name, _ in loaded] == ["build_parser()", *(" ".join(a) for a in LIGHT)]
    assert [(name, heavy) for name, heavy in loaded if heavy] == []


def test_the_cluster_commands_help_loads_no_heavy_module(tmp_path: Path) -> None:
    argvs = [["sim", "cluster", "--help"], ["trace", "generate", "--help"]]
    assert [(name, heavy) for name, heavy in probe(argvs, tmp_path) if heavy] == []
