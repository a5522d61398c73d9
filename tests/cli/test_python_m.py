"""``python -m qosched`` is the ``qosched`` command."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.process


def test_python_m_qosched_runs_the_command_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "qosched", "submit", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "--dry-run" in done.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "qosched", "no-such-command"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2
