"""Fixtures shared by the cluster tests."""

from __future__ import annotations

import pytest

from qosched.cluster.throughput import ThroughputModel


@pytest.fixture(scope="module")
def a100() -> ThroughputModel:
    """The bundled A100 throughput table."""
    return ThroughputModel.bundled("A100")
