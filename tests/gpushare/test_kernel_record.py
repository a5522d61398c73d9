import pytest

from qosched.core.errors import InputError
from qosched.gpushare.kernel import Kernel


def make(**changes):
    fields = dict(
        name="gemm",
        op="mm_0",
        grid=(8, 4, 1),
        block=(256, 1, 1),
        registers_per_thread=64,
        shared_bytes_per_block=16384,
        sms=32,
        occupancy=0.5,
        flops=1e9,
        bytes=1e6,
        bound="compute",
        time_s=1e-4,
    )
    fields.update(changes)
    return Kernel(**fields)


def test_blocks_and_threads_multiply_the_launch_dimensions():
    k = make()
    assert (k.blocks, k.threads_per_block) == (32, 256)


@pytest.mark.parametrize(
    "change",
    [
        {"grid": (0, 1, 1)},
        {"block": (32, 1)},
        {"occupancy": 0.0},
        {"occupancy": 1.5},
        {"time_s": 0.0},
        {"bound": "latency"},
        {"sms": 0},
    ],
    ids=lambda c: next(iter(c)),
)
def test_invalid_kernels_are_refused(change):
    with pytest.raises(InputError):
        make(**change)
