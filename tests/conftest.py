"""Guards and test tiers shared by the whole suite.

The tiers are markers (registered in pyproject.toml): ``slow`` (over ``SLOW_S`` on its own),
``process`` (starts processes), ``network`` (serves or calls HTTP on loopback) and ``browser``
(drives Chromium). ``make test-fast`` leaves all four out; ``make test`` runs everything, in
parallel. A module marks itself (``pytestmark``) or is listed in ``MODULE_MARKS``; a test that
uses a fixture of ``FIXTURE_MARKS`` gets that fixture's marks here, so a new test is tiered by
what it uses; a test that starts a process or uses an IP socket without the matching mark fails
(``_marks_own_up``). Under ``pytest -n`` the modules of ``ONE_WORKER`` stay on one worker."""

from __future__ import annotations

import _posixsubprocess
import os
import socket
import subprocess
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from qosched.backends.local.affinity import set_process_affinity

# Property tests judge what they generate, not how fast: under ``pytest -n`` on two cores an
# example or its generation can take seconds, which Hypothesis's defaults (a 200 ms deadline,
# the too_slow health check) report as failures. A test's own ``settings`` still apply on top.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

#: A test that takes longer than this on its own is ``slow`` (``--durations`` measures it).
SLOW_S = 2.0

#: Shared fixtures that start processes or servers or take long, and the marks of every test
#: that uses one (directly or through another fixture).
FIXTURE_MARKS = {
    "runners": ("process",),  # tests/backends/conftest.py: runner processes
    "running": ("network",),  # tests/backends/conftest.py: the fake local service over HTTP
    "api": ("network",),  # tests/backends/kubernetes/conftest.py: the fake API server
    "zoo_graphs": ("slow",),  # below: the zoo captured, tens of seconds
    "zoo_models": ("slow",),
}


#: Modules marked here rather than by their own ``pytestmark``: the local-service commands' tests.
MODULE_MARKS = {
    "tests/backends/test_local_cli.py": ("process", "network"),
    "tests/backends/test_local_cli_gpus.py": ("process", "network"),
    "tests/backends/test_local_cli_real.py": ("process", "network"),
    "tests/backends/test_local_cli_gpus_real.py": ("process", "network"),
}


#: Modules whose tests run on one worker under ``pytest -n``, by group: each shares a fixture
#: that costs seconds of CPU (set up once, not once per worker that gets one of its tests), or
#: one service and one Chromium. Every other test is scheduled on its own.
ONE_WORKER = {
    "tests/backends/test_web_browser.py": "browser",
    "tests/backends/test_web_browser_jobs.py": "browser",
    "tests/graph/test_capture.py": "zoo",  # the session's zoo_graphs
    "tests/graph/test_passes.py": "zoo",
    "tests/gpushare/test_gpushare_estimate_models.py": "zoo",
    "tests/placement/test_placement_costs.py": "zoo",
    "tests/cluster/test_simulator.py": "simulator",  # a run per policy and load
    "tests/core/test_import_cycles.py": "import_graph",  # src/ parsed once, about a second
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


#: What a test did that its marks must own up to, while it runs: "process" or "network".
_done: set[str] = set()


def _noting(what: str, call):
    def noted(*args, **kwargs):
        _done.add(what)
        return call(*args, **kwargs)

    return noted


def _noting_inet(what: str, call):
    def noted(sock: socket.socket, *args, **kwargs):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            _done.add(what)
        return call(sock, *args, **kwargs)

    return noted


def pytest_configure(config: pytest.Config) -> None:
    """Note, in each process that runs tests, every process a test starts (``subprocess``,
    ``multiprocessing``, a fork) and every IP socket it serves on or connects: ``_marks_own_up``
    fails a test that did either without the mark, so ``make test-fast`` cannot start one."""
    subprocess.Popen._execute_child = _noting("process", subprocess.Popen._execute_child)
    _posixsubprocess.fork_exec = _noting("process", _posixsubprocess.fork_exec)  # multiprocessing
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):
        setattr(os, name, _noting("process", getattr(os, name)))
    for name in ("listen", "connect", "connect_ex"):  # not bind: urllib3 binds ::1 to probe IPv6
        setattr(socket.socket, name, _noting_inet("network", getattr(socket.socket, name)))
    # gpushare's what-if shares its runs among processes (one per core, each importing PyTorch)
    # once they would take over POOL_AFTER_S one after another, so whether a test starts them
    # depends on how busy the machine is. Under `pytest -n` the cores are already shared by the
    # suite's workers: the runs stay in the test's process, whose results the pool's own tests
    # (asking for workers=2) show to be the same.
    from qosched.gpushare import whatif

    whatif.DEFAULT_WORKERS = 1


@pytest.hookimpl(tryfirst=True)  # before the module's and the test's fixtures start anything
def pytest_runtest_setup(item: pytest.Item) -> None:
    _done.clear()


@pytest.fixture(autouse=True)
def _marks_own_up(request: pytest.FixtureRequest):
    """A test (or a fixture it is the first to use) that started a process or used an IP
    socket carries the ``process`` or ``network`` mark; ``browser`` covers both (Chromium and
    its driver are processes that talk over sockets)."""
    yield
    marks = {mark.name for mark in request.node.iter_markers()}
    missing = sorted(_done - marks) if "browser" not in marks else []
    if missing:
        pytest.fail(
            f"the test did what its marks do not say: add {missing} (see tests/conftest.py)",
            pytrace=False,
        )


#: The batch every zoo model is captured at, once per session (a batch of 2 shows in shapes
#: and FLOPs where a batch of 1 could hide a dimension dropped).
ZOO_BATCH = 2


@pytest.fixture(scope="session")
def zoo_models() -> dict[str, tuple[Any, tuple]]:
    """Every zoo model and its inputs (meta tensors: nothing allocated), as ``load_model``
    builds them at ``ZOO_BATCH``: what ``zoo_graphs`` captured."""
    from qosched.graph import ZOO
    from qosched.graph.capture import load_model

    return {name: load_model(name, batch=ZOO_BATCH) for name in ZOO}


@pytest.fixture(scope="session")
def zoo_graphs(zoo_models: dict[str, tuple[Any, tuple]]) -> dict[str, Any]:
    """Every zoo model captured once per session, shared by the graph and the estimate tests
    (capture costs 0.5-10 s a model; ``ONE_WORKER`` keeps its users on one worker)."""
    from qosched.graph import capture

    return {name: capture(model, inputs, name=name) for name, (model, inputs) in zoo_models.items()}


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
