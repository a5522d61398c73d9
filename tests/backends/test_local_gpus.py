"""The GPU inventory (declared or from NVML) and the assignment of GPUs to jobs."""

from __future__ import annotations

import sys
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qosched.backends.local.gpus import assign_gpus, detect_gpus, gpu_inventory, parse_gpu_list
from qosched.backends.local.service import fit_counts
from qosched.core.errors import InputError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("0,1,2,3", (0, 1, 2, 3), id="list"),
        pytest.param(" 3, 1 ", (1, 3), id="spaces-sorted"),
        pytest.param("none", (), id="none"),
        pytest.param("NONE", (), id="none-any-case"),
        pytest.param("1023", (1023,), id="highest"),
    ],
)
def test_a_declared_gpu_list_is_read(text, expected):
    assert parse_gpu_list(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "expected GPU indices", id="empty"),
        pytest.param("0,,1", "expected a GPU index", id="empty-item"),
        pytest.param("0,-1", "expected a GPU index", id="negative"),
        pytest.param("1.5", "expected a GPU index", id="fraction"),
        pytest.param("1024", "GPU index 1024 is over 1023", id="too-high"),
        pytest.param("9" * 400, "expected a GPU index", id="huge"),
        pytest.param("0,1,0", "GPU 0 is listed twice", id="twice"),
        pytest.param("٣", "expected a GPU index", id="non-ascii-digit"),
        pytest.param("GPU-5d1f", "expected a GPU index", id="uuid"),
    ],
)
def test_a_bad_gpu_list_is_refused_naming_the_problem(text, message):
    with pytest.raises(InputError, match=message):
        parse_gpu_list(text)


class FakeNvml(types.ModuleType):
    """What qosched calls of ``pynvml``, as strict as the real one: ``nvmlDeviceGetCount``
    before ``nvmlInit`` raises, and so does ``nvmlInit`` without a driver."""

    class NVMLError(Exception):
        pass

    def __init__(self, count: int | None) -> None:
        super().__init__("pynvml")
        self.count = count  # None: no driver
        self.initialised = False
        self.shut_down = False

    def nvmlInit(self) -> None:
        if self.count is None:
            raise self.NVMLError("NVML Shared Library Not Found")
        self.initialised = True

    def nvmlDeviceGetCount(self) -> int:
        if not self.initialised:
            raise self.NVMLError("Uninitialized")
        return self.count

    def nvmlShutdown(self) -> None:
        if not self.initialised:
            raise self.NVMLError("Uninitialized")
        self.initialised, self.shut_down = False, True


def test_without_nvidia_ml_py_there_are_no_gpus(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    assert detect_gpus({}) == ()


def test_without_a_driver_there_are_no_gpus(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(None))
    assert detect_gpus({}) == ()


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        pytest.param(None, (0, 1, 2, 3), id="all"),
        pytest.param("1,3", (1, 3), id="narrowed"),
        pytest.param("3,7", (3,), id="unknown-index-dropped"),
        pytest.param("", (), id="empty-hides-all"),
        pytest.param("GPU-5d1f", (0, 1, 2, 3), id="uuids-not-narrowed"),
    ],
)
def test_nvml_gpus_narrowed_to_the_services_cuda_visible_devices(monkeypatch, visible, expected):
    nvml = FakeNvml(4)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert detect_gpus(environ) == expected
    assert nvml.shut_down


def test_a_declared_inventory_wins_over_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(4))
    assert gpu_inventory((2, 0)) == (0, 2)
    assert gpu_inventory(()) == ()
    assert gpu_inventory(None) == (0, 1, 2, 3)


# -- assign_gpus: hand-computed cases -------------------------------------------------------------


def test_unchanged_jobs_keep_their_gpus_and_new_ones_take_free_ones_in_order():
    assert assign_gpus({"a": 2, "b": 1}, {"a": (1, 3)}, range(4)) == {"a": (1, 3), "b": (0,)}


def test_a_job_whose_count_changes_gets_nothing_and_its_gpus_go_to_no_one():
    # "a" must restart with 1; its GPUs 0,1 stay out of reach until it is gone.
    assert assign_gpus({"a": 1, "b": 2, "c": 1}, {"a": (0, 1)}, range(4)) == {
        "b": (2, 3),
    }


def test_a_job_that_does_not_fit_waits_and_a_later_smaller_one_starts():
    assert assign_gpus({"big": 3, "small": 1}, {}, range(2)) == {"small": (0,)}


# -- assign_gpus: generated cases -----------------------------------------------------------------


@st.composite
def situations(draw):
    """GPUs, what running jobs hold now (disjoint), and wanted counts for old and new jobs."""
    gpus = sorted(draw(st.sets(st.integers(0, 15), min_size=1, max_size=8)))
    shuffled = draw(st.permutations(gpus))
    current: dict[str, tuple[int, ...]] = {}
    at = 0
    for index in range(draw(st.integers(0, 4))):
        size = draw(st.integers(0, len(shuffled) - at))
        current[f"r{index}"] = tuple(sorted(shuffled[at : at + size]))
        at += size
    stopping = set(shuffled[at : at + draw(st.integers(0, len(shuffled) - at))])
    free = [g for g in gpus if g not in stopping]  # a stopping job's GPUs are not offered
    names = [*current, *(f"n{i}" for i in range(draw(st.integers(0, 4))))]
    counts = {name: draw(st.integers(0, len(gpus))) for name in draw(st.permutations(names))}
    return counts, current, free


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(situations())
def test_assignment_invariants(situation):
    counts, current, free = situation
    offered = {g for g in free} | {g for held in current.values() for g in held}
    result = assign_gpus(counts, current, free)
    everyone = [g for gpus in result.values() for g in gpus]
    assert len(everyone) == len(set(everyone))  # no GPU twice
    assert set(everyone) <= offered
    for job, gpus in result.items():
        assert len(gpus) == counts[job] > 0  # exactly its count
        if current.get(job):
            assert gpus == current[job]  # a running job only keeps, never moves
    for job, held in current.items():
        if held and counts.get(job, 0) == len(held):
            assert result[job] == held  # unchanged count: keeps its GPUs
        elif held:
            assert job not in result  # changed: restarts, placed again once gone
            others = {g for other, gpus in result.items() if other != job for g in gpus}
            assert not others & set(held)  # and nobody takes its GPUs meanwhile


@st.composite
def rounds(draw):
    """A GPU round as the service plays it: free GPUs, what running jobs hold, each job's
    (minGpus, maxGpus), and what the policy asked for (any count, in any order)."""
    counts, current, free = draw(situations())
    bounds = {}
    for job in counts:
        low = draw(st.integers(1, 4))
        high = draw(st.none() | st.integers(low, 6))
        held = len(current.get(job, ()))
        if held and (held < low or (high is not None and held > high)):
            low, high = 1, None  # a running job holds a count its bounds allow
        bounds[job] = (low, high)
    wanted = {job: draw(st.integers(0, 8)) for job in counts}
    return wanted, bounds, current, free


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(rounds())
def test_a_gpu_round_stays_within_each_jobs_bounds_and_gives_no_gpu_twice(round_):
    wanted, bounds, current, free = round_
    room = len(free)  # the running jobs' GPUs are among the free ones: no one is stopping them
    counts = fit_counts(wanted, bounds, room)
    assert sum(counts.values()) <= room
    result = assign_gpus(counts, current, free)
    everyone = [g for gpus in result.values() for g in gpus]
    assert len(everyone) == len(set(everyone))
    for job, gpus in result.items():
        low, high = bounds[job]
        assert low <= len(gpus) and (high is None or len(gpus) <= high)
        assert wanted[job] > 0  # a job the policy gave nothing gets nothing
    for job, held in current.items():
        if held and counts.get(job) == len(held):
            assert result[job] == held


@pytest.mark.parametrize(
    ("wanted", "bounds", "room", "expected"),
    [
        pytest.param({"a": 5}, {"a": (1, 2)}, 4, {"a": 2}, id="capped-at-max"),
        pytest.param({"a": 1}, {"a": (2, None)}, 4, {"a": 2}, id="raised-to-min"),
        pytest.param({"a": 0}, {"a": (2, 3)}, 4, {}, id="zero-stays-zero"),
        pytest.param(
            {"a": 3, "b": 2, "c": 1},
            {"a": (1, None), "b": (2, 2), "c": (1, 1)},
            4,
            {"a": 3, "c": 1},
            id="a-later-smaller-one-fits",
        ),
    ],
)
def test_fit_counts(wanted, bounds, room, expected):
    assert fit_counts(wanted, bounds, room) == expected
