"""Measured operator costs: keys, reuse of the cache, and unit costs as sums."""

from __future__ import annotations

import json

import pytest
import torch
from placement_helpers import ScriptedTimer, quiet

from qosched.core.errors import InputError
from qosched.placement.profile import ProfileCache, profile_tenant, signature
from qosched.placement.program import UnitProgram, build_model, export_program, model_units
from qosched.placement.timing import DEFAULT_TRIES, Timing

add = torch.ops.aten.add.Tensor


def _mlp():
    model, inputs = build_model("mlp")
    return UnitProgram(export_program(model, inputs), model_units(model, inputs, "m"), "m"), inputs


@pytest.mark.parametrize(
    ("other", "same"),
    [
        ((add, (torch.zeros(2, 3), torch.ones(2, 3)), {}), True),  # values do not matter
        ((add, (torch.zeros(3, 2), torch.ones(3, 2)), {}), False),  # shape
        ((add, (torch.zeros(3, 2).t(), torch.ones(2, 3)), {}), False),  # strides
        ((add, (torch.zeros(2, 3, dtype=torch.float64), torch.ones(2, 3)), {}), False),  # dtype
        ((add, (torch.zeros(2, 3), torch.ones(2, 3)), {"alpha": 2}), False),  # a scalar arg
        ((torch.ops.aten.mul.Tensor, (torch.zeros(2, 3), torch.ones(2, 3)), {}), False),
    ],
    ids=["same-call", "shape", "strides", "dtype", "keyword", "target"],
)
def test_a_signature_keys_on_everything_but_tensor_values(other, same):
    base = signature(add, (torch.randn(2, 3), torch.randn(2, 3)), {})
    assert (signature(*other) == base) is same


@pytest.mark.slow
def test_measured_costs_are_cached_per_device_and_reused(tmp_path):
    path = tmp_path / "profile.json"
    program, inputs = _mlp()
    first_cache = ProfileCache(path)
    first = profile_tenant(program, inputs, first_cache, "cpu|test|1 threads", timer=quiet())
    assert first_cache.misses > 0
    first_cache.save()
    on_disk = json.loads(path.read_text())["devices"]["cpu|test|1 threads"]
    assert len(on_disk) == first_cache.misses  # one entry per distinct operator call

    again = ProfileCache(path)
    second = profile_tenant(program, inputs, again, "cpu|test|1 threads", timer=quiet(2e-3))
    assert (again.hits, again.misses) == (first_cache.hits + first_cache.misses, 0)
    assert second.unit_s == first.unit_s  # nothing re-measured: the cached times come back

    other_device = ProfileCache(path)
    profile_tenant(program, inputs, other_device, "cpu|test|2 threads", timer=quiet())
    assert other_device.hits == 0  # another device key never reuses these times


def _profile(path, timer, **options):
    program, inputs = _mlp()
    cache = ProfileCache(path, **options)
    profile = profile_tenant(program, inputs, cache, "k", timer=timer)
    cache.save()
    return profile, cache


def _on_disk(path):
    data = json.loads(path.read_text())
    assert data["format"] == 2
    return data["devices"].get("k", {})


@pytest.mark.slow
def test_a_cached_timing_records_its_repeats_spread_and_wait_share(tmp_path):
    # One 100x outlier among the 5 repeats of every operator: the median is the time; the
    # spread leaves the slowest out. Calls 6k..6k+5 are one operator's warm-up and repeats.
    timer = ScriptedTimer(lambda n: 0.1 if n % 6 == 3 else 1e-3)
    profile, cache = _profile(tmp_path / "p.json", timer)
    entries = _on_disk(tmp_path / "p.json")
    assert len(entries) == cache.misses and cache.refused == 0
    assert all(e == {"seconds": 1e-3, "repeats": 5, "spread": 0.0, "wait_share": 0.0}
               for e in entries.values())  # fmt: skip
    assert all(s == 1e-3 for s in profile.node_s.values())


@pytest.mark.slow
@pytest.mark.parametrize(
    "busy",
    [
        ScriptedTimer(lambda n: 0.12, lambda n: 0.119),  # stolen: slow, with no spread
        ScriptedTimer(lambda n: 0.12 if n % 6 >= 3 else 1e-3),  # three repeats of five slow
    ],
    ids=["stolen-cpu", "three-outliers"],
)
def test_a_busy_machines_times_are_used_once_and_never_cached(tmp_path, busy):
    path = tmp_path / "p.json"
    profile, cache = _profile(path, busy)
    assert cache.refused == cache.misses > 0
    assert busy.calls == cache.misses * DEFAULT_TRIES * 6  # measured again, a bounded number
    assert all(s == pytest.approx(0.12) for s in profile.node_s.values())  # this plan's times
    assert _on_disk(path) == {}
    # the next plan, on a quiet machine, measures every operator anew
    later, again = _profile(path, quiet())
    assert (again.hits, again.refused) == (0, 0)
    assert all(s == 1e-3 for s in later.node_s.values())
    assert len(_on_disk(path)) == again.misses


@pytest.mark.slow
def test_a_cache_without_spreads_is_untrusted_and_measured_again(tmp_path):
    # What an older qosched wrote: bare seconds, however they were measured.
    path = tmp_path / "p.json"
    _, first = _profile(path, quiet())
    old = {k: 0.12 for k in _on_disk(path)}
    path.write_text(json.dumps({"format": 1, "devices": {"k": old}}))
    profile, cache = _profile(path, quiet())
    assert (cache.untrusted, cache.hits, cache.misses) == (len(old), 0, first.misses)
    assert all(s == 1e-3 for s in profile.node_s.values())
    assert {e["seconds"] for e in _on_disk(path).values()} == {1e-3}


@pytest.mark.slow
def test_remeasure_replaces_cached_times_and_drops_those_it_cannot_trust(tmp_path):
    path = tmp_path / "p.json"
    _profile(path, quiet())
    poisoned = {k: {**e, "seconds": 0.12} for k, e in _on_disk(path).items()}
    path.write_text(json.dumps({"format": 2, "devices": {"k": poisoned, "other": poisoned}}))
    reused, _ = _profile(path, quiet())
    assert all(s == 0.12 for s in reused.node_s.values())  # trusted as written: reused

    # the first operator's measurements are all noisy, the others' quiet
    tries = DEFAULT_TRIES * 6
    timer = ScriptedTimer(lambda n: 0.3 if n < tries else 1e-3, lambda n: 0.29 if n < tries else 0)
    fresh, cache = _profile(path, timer, remeasure=True)
    assert (cache.hits, cache.refused) == (0, 1)
    entries = _on_disk(path)
    assert set(entries) < set(poisoned) and len(entries) == len(poisoned) - 1
    assert sorted(fresh.node_s.values())[-1] == pytest.approx(0.3)  # used for this plan
    assert {e["seconds"] for e in entries.values()} == {1e-3}
    # another device key's times are not this run's to replace
    other = json.loads(path.read_text())["devices"]["other"]
    assert other == poisoned


@pytest.mark.parametrize(
    "entry",
    [
        0.12,
        {"seconds": 0.1},
        {"seconds": "x", "repeats": 5, "spread": 0, "wait_share": None},
        {"seconds": float("nan"), "repeats": 5, "spread": 0, "wait_share": None},
        {"seconds": -1.0, "repeats": 5, "spread": 0, "wait_share": 0},
        {"seconds": 1e-3, "repeats": 0, "spread": 0, "wait_share": 0},
    ],
    ids=["bare-seconds", "no-repeats", "not-a-number", "nan", "negative", "zero-repeats"],
)
def test_a_malformed_timing_in_a_new_cache_is_an_error_that_names_it(tmp_path, entry):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"format": 2, "devices": {"k": {"op": entry}}}))
    with pytest.raises(InputError, match="malformed timing") as caught:
        ProfileCache(path)
    assert caught.value.source == str(path)


def test_a_timing_round_trips_through_the_file(tmp_path):
    path = tmp_path / "p.json"
    cache = ProfileCache(path)
    cache.store("k", "op", Timing(2.5e-4, 7, 0.25, None))
    cache.save()
    assert ProfileCache(path).lookup("k", "op") == Timing(2.5e-4, 7, 0.25, None)


@pytest.mark.slow
def test_a_unit_costs_the_sum_of_its_operators_and_cuts_carry_real_bytes(tmp_path):
    program, inputs = _mlp()
    profile = profile_tenant(program, inputs, ProfileCache(tmp_path / "p.json"), "k", repeats=1)
    for unit in range(program.n_units):
        names = [s.name for s in program.steps(unit)]
        assert profile.unit_s[unit] == pytest.approx(sum(profile.node_s[n] for n in names))
    assert all(t > 0 for t in profile.unit_s)
    # batch 1, float32: 512 and 256 activations cross the two cuts; 784 in, 10 out
    assert profile.cut_bytes == (512 * 4, 256 * 4)
    assert (profile.input_bytes, profile.output_bytes) == (784 * 4, 10 * 4)


@pytest.mark.parametrize(
    "text",
    ["not json", '{"format": 99, "devices": {}}', '{"format": 1, "devices": []}', "[1]"],
)
def test_a_broken_cache_file_is_an_error_that_names_it(tmp_path, text):
    path = tmp_path / "profile.json"
    path.write_text(text)
    with pytest.raises(InputError, match="profile") as caught:
        ProfileCache(path)
    assert caught.value.source == str(path)


@pytest.mark.slow
def test_a_model_that_does_not_build_for_profiling_names_its_tenant(tmp_path):
    # As `infer plan` on a runnable platform meets it, in the pinned process: the field says
    # which tenant of the list, so the spec's line can be named.
    from qosched.placement.measured import TenantModel, profile_job
    from qosched.placement.platform import PinnedProcessor, usable_cores

    tenants = [TenantModel("a", "mlp"), TenantModel("b", "math:sqrt")]
    cpu = PinnedProcessor("cpu", usable_cores()[:1])
    with pytest.raises(InputError, match="model 'math:sqrt': its factory raised") as caught:
        profile_job(cpu, tenants, 0, str(tmp_path / "profile.json"), 1)
    assert caught.value.field == "tenants[1].model"


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
            "memory: you tried to allocate 39460012032 bytes. Error code 12"
        ),
        MemoryError(),
    ],
    ids=["pytorch-allocator", "python"],
)
def test_a_batch_too_big_for_memory_names_the_tenants_batch(tmp_path, monkeypatch, error):
    # What resnet50 at batch 65536 (a 39 GB input) meets on a 23 GB machine, without the 39 GB.
    from qosched.placement import measured
    from qosched.placement.platform import PinnedProcessor, usable_cores

    def build_model(spec, *, batch, seed):
        raise error

    monkeypatch.setattr(measured, "build_model", build_model)
    cpu = PinnedProcessor("cpu", usable_cores()[:1])
    tenants = [measured.TenantModel("a", "resnet50", 65536)]
    with pytest.raises(InputError, match="does not fit in memory at this batch") as caught:
        measured.profile_job(cpu, tenants, 0, str(tmp_path / "profile.json"), 1)
    assert caught.value.field == "tenants[0].batch"
    if isinstance(error, RuntimeError):
        assert caught.value.reason.endswith("can't allocate memory: you tried to allocate "
                                            "39460012032 bytes. Error code 12")  # fmt: skip


def test_other_runtime_errors_while_profiling_stay_tracebacks(tmp_path, monkeypatch):
    from qosched.placement import measured
    from qosched.placement.platform import PinnedProcessor, usable_cores

    def build_model(spec, *, batch, seed):
        raise RuntimeError("a bug of qosched's")

    monkeypatch.setattr(measured, "build_model", build_model)
    cpu = PinnedProcessor("cpu", usable_cores()[:1])
    with pytest.raises(RuntimeError, match="a bug"):
        measured.profile_job(
            cpu, [measured.TenantModel("a", "mlp")], 0, str(tmp_path / "p.json"), 1
        )
