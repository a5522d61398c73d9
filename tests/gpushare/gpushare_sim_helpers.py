"""Hand-made kernels on a toy GPU with round numbers: 100 SMs, 1000 B/s, 1000 FLOP/s."""

from qosched.gpushare.kernel import Kernel
from qosched.hardware import Processor, gpu

TOY = Processor(
    name="toy",
    kind="gpu",
    peak_flops={"float32": 1000.0},
    memory_bandwidth=1000.0,
    memory_bytes=2**30,
    sm_count=100,
    source="test GPU with round numbers",
)
A100 = gpu("A100")


def kernel(
    name="k",
    *,
    sms=50,
    time_s=1.0,
    bandwidth=0.0,
    bound=None,
    blocks=None,
    gpu_bw=TOY.memory_bandwidth,
    occupancy=1.0,
):
    """A kernel that alone runs ``time_s`` on ``sms`` SMs using ``bandwidth`` of the GPU's DRAM
    bandwidth; 256-thread blocks at full occupancy are 8 resident per SM, so by default it has
    one wave (``blocks = 8 * sms``)."""
    blocks = 8 * sms if blocks is None else blocks
    return Kernel(
        name=name,
        op=name,
        grid=(blocks, 1, 1),
        block=(256, 1, 1),
        registers_per_thread=32,
        shared_bytes_per_block=0,
        sms=sms,
        occupancy=occupancy,
        flops=1.0,
        bytes=bandwidth * gpu_bw * time_s,
        bound=bound or ("memory" if bandwidth >= 0.5 else "compute"),
        time_s=time_s,
    )
