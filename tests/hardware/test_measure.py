import json
import time

import pytest

from qosched.core.errors import InputError
from qosched.hardware import measure
from qosched.hardware.measure import measure_cpu


def _refuse(_budget):
    raise AssertionError("measured again although the cache holds this machine")


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    path = tmp_path_factory.mktemp("cache") / "cpu.json"
    return path, measure_cpu(seconds_budget=0.05, cache_path=path)


def test_measured_numbers_are_plausible(measured):
    _, cpu = measured
    assert cpu.kind == "cpu" and cpu.sm_count is None
    assert 1e8 < cpu.peak("float32") < 1e14
    assert 1e8 < cpu.memory_bandwidth < 1e13
    assert cpu.memory_bytes > 2**26
    assert cpu.cores is not None and cpu.cores >= 1
    assert cpu.name.strip()
    assert cpu.source.startswith("measured on this machine at ")
    assert "NumPy" in cpu.source


def test_second_call_hits_the_cache(measured, monkeypatch):
    path, first = measured
    assert path.exists()
    entries = json.loads(path.read_text())
    assert len(entries) == 1 and first.name in next(iter(entries))
    monkeypatch.setattr(measure, "_measure_matmul_flops", _refuse)
    monkeypatch.setattr(measure, "_measure_copy_bandwidth", _refuse)
    start = time.perf_counter()
    second = measure_cpu(cache_path=path)
    assert time.perf_counter() - start < 0.5
    assert second == first


def test_force_remeasures_and_rewrites(tmp_path, monkeypatch):
    path = tmp_path / "cpu.json"
    monkeypatch.setattr(measure, "_measure_matmul_flops", lambda _b: 1e9)
    monkeypatch.setattr(measure, "_measure_copy_bandwidth", lambda _b: 1e10)
    first = measure_cpu(cache_path=path)
    monkeypatch.setattr(measure, "_measure_matmul_flops", lambda _b: 2e9)
    assert measure_cpu(cache_path=path).peak("float32") == first.peak("float32") == 1e9
    forced = measure_cpu(cache_path=path, force=True)
    assert forced.peak("float32") == 2e9
    assert measure_cpu(cache_path=path).peak("float32") == 2e9


def test_other_machines_in_the_cache_are_kept(tmp_path, monkeypatch):
    path = tmp_path / "nested" / "cpu.json"
    path.parent.mkdir()
    other = {"elsewhere|Some CPU|64": {"name": "Some CPU"}}
    path.write_text(json.dumps(other))
    monkeypatch.setattr(measure, "_measure_matmul_flops", lambda _b: 1e9)
    monkeypatch.setattr(measure, "_measure_copy_bandwidth", lambda _b: 1e10)
    measure_cpu(cache_path=path)
    entries = json.loads(path.read_text())
    assert len(entries) == 2 and "elsewhere|Some CPU|64" in entries


def test_corrupt_cache_is_reported_and_force_replaces_it(tmp_path, monkeypatch):
    path = tmp_path / "cpu.json"
    path.write_text("{not json")
    with pytest.raises(InputError, match=r"cpu\.json.*unreadable CPU cache.*force=True"):
        measure_cpu(cache_path=path)
    monkeypatch.setattr(measure, "_measure_matmul_flops", lambda _b: 1e9)
    monkeypatch.setattr(measure, "_measure_copy_bandwidth", lambda _b: 1e10)
    assert measure_cpu(cache_path=path, force=True).peak("float32") == 1e9


def test_default_cache_path_honours_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert measure.default_cache_path() == tmp_path / "qosched" / "cpu.json"


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "1"])
def test_bad_budget_is_rejected(bad, tmp_path):
    with pytest.raises(InputError, match="seconds_budget"):
        measure_cpu(seconds_budget=bad, cache_path=tmp_path / "cpu.json")
