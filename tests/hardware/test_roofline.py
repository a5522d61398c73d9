import math

import pytest

from qosched.core.errors import InputError
from qosched.hardware import (
    DEFAULT_SYNC_OVERHEAD_S,
    Link,
    Processor,
    arithmetic_intensity,
    bound,
    ridge_point,
    roofline_time_s,
    transfer_time_s,
)

# 1 TFLOP/s float32, 4 TFLOP/s float16, 100 GB/s: ridge point 10 FLOP/B (float32).
PROC = Processor(
    name="toy",
    kind="gpu",
    peak_flops={"float32": 1e12, "float16": 4e12},
    memory_bandwidth=100e9,
    memory_bytes=2**30,
    sm_count=1,
    source="constructed for tests",
)
LINK = Link(name="toy-link", bandwidth=10e9, latency_s=2e-6, source="constructed for tests")


@pytest.mark.parametrize(
    ("flops", "bytes_moved", "dtype", "efficiency", "expected_s", "expected_bound"),
    [
        # 1 GFLOP / 1 TFLOP/s = 1 ms; 1 MB / 100 GB/s = 10 us.
        pytest.param(1e9, 1e6, "float32", 1.0, 1e-3, "compute", id="1GFLOP-1MB-compute"),
        # 1 MFLOP = 1 us; 1 GB = 10 ms.
        pytest.param(1e6, 1e9, "float32", 1.0, 1e-2, "memory", id="1MFLOP-1GB-memory"),
        # Half efficiency doubles compute time: 2 ms.
        pytest.param(1e9, 1e6, "float32", 0.5, 2e-3, "compute", id="half-efficiency"),
        # float16 peak is 4x: 0.25 ms compute vs 10 us memory.
        pytest.param(1e9, 1e6, "float16", 1.0, 2.5e-4, "compute", id="float16"),
        # At the ridge (10 FLOP/B) both times are 1 ms; ties count as memory-bound.
        pytest.param(1e9, 1e8, "float32", 1.0, 1e-3, "memory", id="ridge-tie"),
        pytest.param(0, 0, "float32", 1.0, 0.0, "memory", id="no-work"),
        pytest.param(0, 4e6, "float32", 1.0, 4e-5, "memory", id="pure-copy"),
    ],
)
def test_roofline_hand_computed(flops, bytes_moved, dtype, efficiency, expected_s, expected_bound):
    assert roofline_time_s(flops, bytes_moved, PROC, dtype, efficiency) == pytest.approx(expected_s)
    assert bound(flops, bytes_moved, PROC, dtype, efficiency) == expected_bound


def test_ridge_point():
    assert ridge_point(PROC) == pytest.approx(10.0)
    assert ridge_point(PROC, "float16") == pytest.approx(40.0)
    assert ridge_point(PROC, efficiency=0.5) == pytest.approx(5.0)


def test_arithmetic_intensity():
    assert arithmetic_intensity(1e9, 1e6) == pytest.approx(1000.0)
    assert arithmetic_intensity(0, 8) == 0.0
    assert arithmetic_intensity(5, 0) == math.inf
    with pytest.raises(InputError, match="undefined"):
        arithmetic_intensity(0, 0)


def test_bound_agrees_with_ridge_point():
    for intensity in (0.5, 9.9, 10.1, 1000.0):
        expected = "compute" if intensity > ridge_point(PROC) else "memory"
        assert bound(intensity * 1e6, 1e6, PROC) == expected


def test_transfer_time_on_constructed_link():
    # 2 us latency + 1 MB / 10 GB/s (100 us) + 3 us sync overhead.
    assert transfer_time_s(1e6, LINK, sync_overhead_s=3e-6) == pytest.approx(105e-6)
    assert transfer_time_s(0, LINK, sync_overhead_s=0) == pytest.approx(2e-6)
    assert transfer_time_s(1e6, LINK) == pytest.approx(102e-6 + DEFAULT_SYNC_OVERHEAD_S)


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf, "10", None, True], ids=lambda v: repr(v))
def test_bad_amounts_are_rejected(bad):
    with pytest.raises(InputError, match="flops"):
        roofline_time_s(bad, 0, PROC)
    with pytest.raises(InputError, match="bytes_moved"):
        roofline_time_s(0, bad, PROC)
    with pytest.raises(InputError, match="bytes_moved"):
        transfer_time_s(bad, LINK)
    with pytest.raises(InputError, match="sync_overhead_s"):
        transfer_time_s(0, LINK, sync_overhead_s=bad)


@pytest.mark.parametrize("bad", [0, -0.5, 1.5, math.nan])
def test_bad_efficiency_is_rejected(bad):
    with pytest.raises(InputError, match=r"efficiency: expected a number in \(0, 1\]"):
        roofline_time_s(1, 1, PROC, efficiency=bad)


def test_unknown_dtype_lists_the_processor_dtypes():
    with pytest.raises(InputError, match=r"'toy' has no peak for dtype 'int8'.*float16, float32"):
        roofline_time_s(1, 1, PROC, dtype="int8")
    with pytest.raises(InputError, match="int8"):
        ridge_point(PROC, "int8")


def test_errors_are_value_errors():
    with pytest.raises(ValueError):
        roofline_time_s(-1, 0, PROC)


def test_numpy_scalars_are_accepted():
    import numpy as np

    assert roofline_time_s(np.int64(10**9), np.float32(1e6), PROC) == pytest.approx(1e-3)
    assert transfer_time_s(np.int64(10**6), LINK, sync_overhead_s=0) == pytest.approx(102e-6)
