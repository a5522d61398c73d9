import pytest

from qosched.graph import ZOO, capture_spec


@pytest.fixture(scope="session")
def zoo_graphs():
    """Every zoo model captured once per session (capture costs ~0.5-2 s each)."""
    return {name: capture_spec(name, batch=2) for name in ZOO}
