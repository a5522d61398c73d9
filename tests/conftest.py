"""Guards and test tiers shared by the whole suite.

The tiers are markers (registered in pyproject.toml): ``slow`` (over ``SLOW_S`` on its own),
``process`` (starts processes), ``network`` (serves or calls HTTP on loopback) and ``browser``
(drives Chromium). ``make test-fast`` leaves all four out; ``make test`` runs everything, in
parallel. A module marks itself (``pytestmark``) or is listed in ``MODULE_MARKS``; a test that
uses a fixture of ``FIXTURE_MARKS`` gets that fixture's marks here, so a new test is tiered by
what it uses. Under ``pytest -n`` the modules of ``ONE_WORKER`` stay on one worker."""

from __future__ import annotations

import os

import pytest

from qosched.backends.local.affinity import set_process_affinity

#: A test that takes longer than this on its own is ``slow`` (``--durations`` measures it).
SLOW_S = 2.0

#: Shared fixtures that start processes or servers or take long, and the marks of every test
#: that uses one (directly or through another fixture).
FIXTURE_MARKS = {
    "runners": ("process",),  # tests/backends/conftest.py: runner processes
    "api": ("network",),  # tests/backends/kubernetes/conftest.py: the fake API server
    "zoo_graphs": ("slow",),  # tests/graph/conftest.py: the zoo captured, tens of seconds
}


#: Modules marked here rather than by their own ``pytestmark``: the local-service commands' tests.
MODULE_MARKS = {
    "tests/backends/test_local_cli.py": ("process", "network"),
    "tests/backends/test_local_cli_gpus.py": ("process", "network"),
    "tests/backends/test_local_cli_real.py": ("process",),
    "tests/backends/test_local_cli_gpus_real.py": ("process",),
}


#: Modules whose tests run on one worker under ``pytest -n``, by group: each shares a fixture
#: that costs seconds of CPU (set up once, not once per worker that gets one of its tests), or
#: one service and one Chromium. Every other test is scheduled on its own.
ONE_WORKER = {
    "tests/backends/test_web_browser.py": "browser",
    "tests/backends/test_web_browser_jobs.py": "browser",
    "tests/graph/test_capture.py": "zoo",  # the session's zoo_graphs
    "tests/graph/test_passes.py": "zoo",
    "tests/gpushare/test_gpushare_estimate_models.py": "estimate_models",
    "tests/cluster/test_simulator.py": "simulator",  # a run per policy and load
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``pytest -n``: the groups of ``ONE_WORKER`` first (the largest first), then each other
    test on the next free worker, in the workers' order (the slow ones first). Not
    ``xdist_group``: pytest-xdist 3.8 marks a group in ``item._nodeid``, which pytest 9 no
    longer reads, so every test of a group went its own way."""
    from xdist.scheduler import LoadScopeScheduling

    class OneWorkerGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return ONE_WORKER.get(nodeid.split("::")[0], nodeid)

    return OneWorkerGroups(config, log)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for mark in MODULE_MARKS.get(item.nodeid.split("::")[0], ()):
            item.add_marker(mark)
        for name in getattr(item, "fixturenames", ()):
            for mark in FIXTURE_MARKS.get(name, ()):
                item.add_marker(mark)
    if hasattr(config, "workerinput"):
        # A worker of `pytest -n`: the scheduler hands out tests in this order, so the long
        # ones start first instead of leaving one worker busy after the others are done.
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


#: Seconds (setup, call and teardown) of each test that has no slow mark.
_unmarked: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "slow" not in report.keywords:
        _unmarked[report.nodeid] = _unmarked.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    """In the fast tier, name each test that took over ``SLOW_S`` without a ``slow`` mark: a
    slow test left in keeps ``make test-fast`` from staying fast."""
    over = sorted(((s, nodeid) for nodeid, s in _unmarked.items() if s > SLOW_S), reverse=True)
    if "not slow" not in config.getoption("markexpr") or not over:
        return
    terminalreporter.section(f"over {SLOW_S:g} s without a slow mark")
    for seconds, nodeid in over:
        terminalreporter.write_line(f"{seconds:6.2f}s {nodeid}")


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
