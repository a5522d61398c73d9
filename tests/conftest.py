"""Guards shared by the whole suite."""

from __future__ import annotations

import os

import pytest

from qosched.backends.local.affinity import set_process_affinity


@pytest.fixture(autouse=True)
def _cores_left_as_found():
    """A test that runs a runner in this process pins it to the runner's cores; later tests
    (the placement ones check which cores are usable) must not inherit that. Restored, then
    reported, so the offender is named instead of a victim failing far away."""
    before = os.sched_getaffinity(0)
    yield
    after = os.sched_getaffinity(0)
    if after != before:
        set_process_affinity(os.getpid(), tuple(sorted(before)))
        pytest.fail(f"the test left this process pinned to cores {sorted(after)}", pytrace=False)
