"""Fixtures shared by the local backend's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from runner_helpers import Runners
from service_fakes import Running, running_service


@pytest.fixture
def runners() -> Iterator[Runners]:
    """Starts runner processes, and kills any still running when the test ends."""
    started = Runners()
    yield started
    started.stop_all()


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    """The fake service served over HTTP on loopback in this process, as ``qosched up`` serves
    it (``service_fakes.running_service``), its home ``tmp_path``."""
    with running_service(tmp_path) as served:
        yield served
