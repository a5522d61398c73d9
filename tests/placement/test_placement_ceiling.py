"""The roofline ceiling on a measured operator time: the estimate by hand, and a time over it
refused from the cache."""

from __future__ import annotations

import json

import pytest
import torch
from placement_helpers import ScriptedTimer, quiet

from qosched.hardware.catalog import Processor
from qosched.placement.ceiling import roofline_ceiling, roofline_s
from qosched.placement.profile import ProfileCache, profile_tenant
from qosched.placement.program import UnitProgram, build_model, export_program, model_units
from qosched.placement.timing import Timing, Trust

# 1 GFLOP/s and 1 GB/s: every estimate is a small number to check by hand.
SLOW = Processor("slow", "cpu", {"float32": 1e9}, 1e9, 2**30, "test")


def test_the_roofline_of_one_call_by_hand():
    bias, x, w = torch.zeros(4), torch.zeros(2, 3), torch.zeros(3, 4)
    out = torch.addmm(bias, x, w)
    # 2 * 2 * 3 * 4 = 48 FLOPs at half the peak: 96 ns; (4 + 6 + 12 + 8) floats = 120 bytes at
    # 1 GB/s: 120 ns, the roof; plus the 5 us dispatch overhead.
    got = roofline_s(SLOW, torch.ops.aten.addmm.default, (bias, x, w), {}, out)
    assert got == pytest.approx(120e-9 + 5e-6)
    ceiling = roofline_ceiling(SLOW, factor=50)
    assert ceiling(torch.ops.aten.addmm.default, (bias, x, w), {}, out) == pytest.approx(
        50 * (120e-9 + 5e-6)
    )


def test_an_operator_whose_formula_fails_has_no_ceiling():
    # addmm's FLOP formula needs its three operands; given two it raises
    x = torch.zeros(2, 3)
    assert roofline_ceiling(SLOW)(torch.ops.aten.addmm.default, (x, x), {}, x) is None


def test_a_time_over_the_ceiling_is_doubted():
    timing = Timing(0.12, 5, 0.0, 0.0)
    assert Trust().doubt(timing) is None
    assert "over the 0.001 s its roofline allows" in Trust().doubt(timing, ceiling_s=1e-3)
    assert Trust().doubt(timing, ceiling_s=0.2) is None


@pytest.mark.slow
def test_a_uniformly_slow_time_that_no_thread_waited_for_is_caught_by_the_ceiling(tmp_path):
    # 0.12 s every call, no spread, no waits: only the estimate tells it is a hundredfold off.
    model, inputs = build_model("mlp")
    program = UnitProgram(export_program(model, inputs), model_units(model, inputs, "m"), "m")
    path = tmp_path / "p.json"
    cache = ProfileCache(path)
    # 10 GFLOP/s, 10 GB/s: the mlp's largest estimate is 0.33 ms (its 784x512 weight
    # transposed: a view, estimated as a copy), 50x that under 0.12 s
    ceiling = roofline_ceiling(Processor("cpu", "cpu", {"float32": 1e10}, 1e10, 2**30, "test"))
    slow = ScriptedTimer(lambda n: 0.12)
    profile_tenant(program, inputs, cache, "k", timer=slow, ceiling=ceiling)
    cache.save()
    assert cache.refused == cache.misses > 0
    assert json.loads(path.read_text())["devices"] == {}
    # the same operators at a plausible time are kept
    again = ProfileCache(path)
    profile_tenant(program, inputs, again, "k", timer=quiet(1e-5), ceiling=ceiling)
    assert (again.refused, len(again.entries["k"])) == (0, again.misses)
