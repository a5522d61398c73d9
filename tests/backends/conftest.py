"""Fixtures shared by the local backend's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from runner_helpers import Runners


@pytest.fixture
def runners() -> Iterator[Runners]:
    """Starts runner processes, and kills any still running when the test ends."""
    started = Runners()
    yield started
    started.stop_all()
