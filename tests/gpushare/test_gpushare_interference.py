import numpy as np
import pytest
from gpushare_sim_helpers import A100, TOY, kernel

from qosched.core.errors import InputError
from qosched.gpushare.interference import (
    CALIBRATED,
    InterferenceModel,
    bandwidth_share,
    features,
    wave_time_s,
)
from qosched.gpushare.kernel import Kernel
from qosched.gpushare.simulator import pair_slowdown


def test_bandwidth_share_is_bytes_over_time_over_the_gpu_bandwidth():
    assert bandwidth_share(kernel(time_s=2.0, bandwidth=0.3), TOY) == pytest.approx(0.3)


def test_wave_time_divides_the_kernel_into_full_waves():
    # 256-thread blocks (8 warps) at occupancy 0.5 of 64 warps: 4 resident per SM; 50 SMs ->
    # 200 blocks per wave; 1000 blocks -> 5 waves of 0.2 s.
    k = kernel(sms=50, time_s=1.0, blocks=1000, occupancy=0.5)
    assert wave_time_s(k, TOY) == pytest.approx(0.2)


def test_nothing_protected_means_no_interference():
    assert features(kernel(bandwidth=0.9), [], TOY) == (0.0, 0.0, 0.0, 0.0)


def test_two_memory_kernels_at_70_percent_predict_a_40_percent_bandwidth_slowdown():
    running = kernel("r", sms=50, bandwidth=0.7)
    candidate = kernel("c", sms=50, bandwidth=0.7, time_s=0.01)  # ends long before: no drain
    bandwidth, same, overflow, drain = features(candidate, [running], TOY)
    assert bandwidth == pytest.approx(0.4)
    assert same == pytest.approx(0.5)  # both memory-bound, on half the SMs
    assert (overflow, drain) == (0.0, 0.0)


def test_a_short_compute_kernel_on_free_sms_beside_a_memory_kernel_scores_zero():
    running = kernel("r", sms=60, bandwidth=0.8, bound="memory")
    candidate = kernel("c", sms=40, bandwidth=0.1, bound="compute", time_s=0.5)
    assert CALIBRATED.score(candidate, [running], TOY) == 0.0


def test_a_long_wave_on_every_sm_predicts_the_next_kernel_waits_for_it():
    # The candidate holds all 100 SMs for a 2 s wave after the 1 s protected kernel ends.
    running = kernel("r", sms=50, time_s=1.0)
    candidate = kernel("c", sms=100, time_s=4.0, blocks=1600)  # 2 waves of 2 s
    assert features(candidate, [running], TOY)[3] == pytest.approx(2.0)


def test_negative_weights_are_refused():
    with pytest.raises(InputError):
        InterferenceModel(bandwidth=-1.0, same_bound=0.0, sm_overflow=0.0, drain=0.0)


def random_kernel(rng, name):
    sms = int(rng.integers(4, A100.sm_count + 1))
    time_s = float(10 ** rng.uniform(-5, -3))
    share = float(rng.uniform(0.02, 0.95))
    waves = int(rng.integers(1, 9))
    return Kernel(name, name, (sms * 2 * waves, 1, 1), (256, 1, 1), 128, 0, sms, 0.25, 1.0,
                  share * A100.memory_bandwidth * time_s, "memory" if share >= 0.5 else "compute",
                  time_s)  # fmt: skip


def test_the_calibrated_score_ranks_pairs_as_the_simulator_does():
    from scipy.stats import spearmanr  # here: every pytest -n worker imports this module

    # Fresh pairs (not the calibration's seeds): the score must order the simulated slowdowns.
    rng = np.random.default_rng(12345)
    predicted, simulated = [], []
    for i in range(150):
        first, candidate = random_kernel(rng, f"p{i}"), random_kernel(rng, f"c{i}")
        nxt = Kernel("n", "n", (216, 1, 1), (256, 1, 1), 128, 0, A100.sm_count, 0.25, 1.0, 0.0,
                     "compute", first.time_s)  # fmt: skip
        predicted.append(CALIBRATED.score(candidate, [first], A100))
        simulated.append(pair_slowdown(A100, [first, nxt], candidate))
    assert spearmanr(predicted, simulated).statistic > 0.85
    quiet = [s for p, s in zip(predicted, simulated, strict=True) if p == 0.0]
    assert quiet and max(quiet) < 0.05  # a zero score means no measurable slowdown
