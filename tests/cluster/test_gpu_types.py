"""Tests for qosched.cluster.gpu_types: the speed rule for a type without a table, by hand."""

from __future__ import annotations

import pytest

from qosched.cluster.gpu_types import (
    GPU_TYPES,
    TypeSpeeds,
    check_gpu_type,
    slowest,
    speed_ratio,
)
from qosched.cluster.throughput import ThroughputModel
from qosched.core.errors import InputError

# The catalog's peaks: A100 312 TFLOP/s float16, 2039 GB/s; T4 65 TFLOP/s, 320 GB/s;
# V100 125 TFLOP/s, 900 GB/s.
# T4 against A100, half compute-bound: 0.5 * 312/65 + 0.5 * 2039/320 = 2.4 + 3.1859375.
T4_PER_A100 = 1 / 5.5859375
# V100 against A100: 0.5 * 312/125 + 0.5 * 2039/900 = 1.248 + 1.13277...
V100_PER_A100 = 1 / (1.248 + 2039 / 1800)

A100_TABLES = ThroughputModel({"m": {64: {1: 2.0, 2: 3.0, 4: 5.0}}, "n": {32: {1: 4.0}}})
T4_TABLES = ThroughputModel({"m": {64: {1: 0.5, 2: 0.0, 4: 1.5}}})


@pytest.mark.parametrize(
    ("target", "reference", "share", "expected"),
    [
        ("T4", "A100", 0.5, T4_PER_A100),
        ("V100M16", "A100", 0.5, V100_PER_A100),
        ("V100M32", "A100", 0.5, V100_PER_A100),
        ("T4", "A100", 1.0, 65 / 312),
        ("T4", "A100", 0.0, 320 / 2039),
        ("A100", "T4", 0.5, 1 / (0.5 * 65 / 312 + 0.5 * 320 / 2039)),
        ("A100", "A100", 0.5, 1.0),
    ],
    ids=["t4", "v100m16", "v100m32", "flops-only", "bandwidth-only", "a100-from-t4", "same"],
)
def test_speed_ratio_by_hand(target, reference, share, expected):
    assert speed_ratio(target, reference, share) == pytest.approx(expected, rel=1e-12)


def test_a_type_with_a_table_for_the_job_uses_it():
    speeds = TypeSpeeds(A100_TABLES, "A100", {"T4": T4_TABLES})
    assert speeds.curve("T4", "m", 64).speeds == (0.0, 0.5, 0.0, 0.0, 1.5)
    assert speeds.source("T4", "m", 64) == "T4 table"


def test_a_type_without_a_table_for_the_job_scales_the_reference():
    speeds = TypeSpeeds(A100_TABLES, "A100", {"T4": T4_TABLES})
    curve = speeds.curve("T4", "n", 32)  # the T4 tables have no model n
    assert curve.speeds == pytest.approx((0.0, 4.0 / 5.5859375))
    assert curve.measured == (1,)
    v100 = speeds.curve("V100", "m", 64)  # no V100 tables at all
    assert v100.speeds[1] == pytest.approx(2.0 * V100_PER_A100)
    assert v100.speeds[3] == pytest.approx(4.0 * V100_PER_A100)  # interpolated, then scaled
    assert speeds.source("V100", "m", 64) == "A100 table x 0.42"


def test_slowest_takes_the_least_speed_per_count_and_none_where_one_has_none():
    speeds = TypeSpeeds(A100_TABLES, "A100", {"T4": T4_TABLES})
    a100, t4 = speeds.curve("A100", "m", 64), speeds.curve("T4", "m", 64)
    plan = slowest((a100, t4), most=8)
    # 2 GPUs: unmeasured on T4; 3: interpolated on A100, none on T4 (next to an unmeasured cell).
    assert plan.speeds == (0.0, 0.5, 0.0, 0.0, 1.5)
    assert plan.measured == (1, 4)
    assert slowest((a100, t4), most=2).speeds == (0.0, 0.5, 0.0)
    assert slowest((a100,)).speeds == a100.speeds  # one curve, no bound: itself


@pytest.mark.parametrize("name", ["P100", "a100", "", "G2"])
def test_unknown_types_are_refused_naming_the_known_ones(name):
    with pytest.raises(InputError, match="known types: A100, H100") as caught:
        check_gpu_type(name)
    assert f"unknown GPU type {name!r}" in str(caught.value)


def test_bundled_types_have_tables_and_every_type_has_a_catalog_gpu():
    for name in GPU_TYPES:
        assert speed_ratio(name, "A100") > 0
    assert ThroughputModel.bundled("T4").device_type == "T4"
    assert ThroughputModel(A100_TABLES._tables).device_type is None
