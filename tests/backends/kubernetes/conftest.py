"""Fixtures shared by the Kubernetes backend's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_apiserver import FakeApiServer
from k8s_helpers import SCRIPT


@pytest.fixture
def api(request: pytest.FixtureRequest) -> Iterator[FakeApiServer]:
    """A fake API server for one test, the scripted policy's counts cleared. What it holds at
    the start comes from the closest ``apiserver`` marker (a module's ``pytestmark`` or the
    test's own): ``nodes`` (name: ``add_node`` keywords), ``objects`` ((kind, object) pairs to
    create) and any other keyword, passed to ``FakeApiServer``."""
    marker = request.node.get_closest_marker("apiserver")
    options = dict(marker.kwargs) if marker is not None else {}
    nodes = options.pop("nodes", {})
    objects = options.pop("objects", ())
    SCRIPT.clear()
    with FakeApiServer(**options) as server:
        for name, node in nodes.items():
            server.add_node(name, **node)
        for kind, body in objects:
            server.create(kind, body)
        yield server
