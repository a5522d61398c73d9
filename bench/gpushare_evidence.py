"""Evidence for GPU sharing by priority: the interference score's calibration, and qosched's
policy against the baselines on standard mixes.

    python bench/gpushare_evidence.py calibrate      # seconds: fit the score to the simulator
    python bench/gpushare_evidence.py mixes [--quick] # minutes: every policy on every mix

calibrate: random pairs of a higher-priority kernel (followed on its stream by a kernel as long
that needs every SM) and a candidate lower-priority kernel on an A100; the simulator measures
the extra time the candidate costs the protected stream (``simulator.pair_slowdown``), the
score's four features are computed from the static estimates only, and non-negative least
squares fits the weights on 600 pairs; the fit is checked on 300 other pairs (Spearman rank
correlation, mean absolute error, and how often the score and the simulator agree that a pair
is under the 5 % threshold).

mixes: each spec in examples/gpu_mix_*.yaml under every registered policy; prints a Markdown
table of every app's ratios against itself alone, and writes
docs/results/img/gpushare_tradeoff.png (high-priority p99 latency ratio against low-priority
throughput ratio, one marker per policy and mix).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import nnls
from scipy.stats import spearmanr

from qosched.gpushare.interference import CALIBRATED, FEATURES, InterferenceModel, features
from qosched.gpushare.kernel import Kernel
from qosched.gpushare.simulator import pair_slowdown
from qosched.hardware import Processor, gpu

ROOT = Path(__file__).resolve().parents[1]


def random_kernel(rng: np.random.Generator, device: Processor, name: str) -> Kernel:
    """A kernel of random size, duration, bandwidth share and number of waves."""
    sm_count = device.sm_count or 1
    sms = int(rng.integers(4, sm_count + 1))
    time_s = float(10 ** rng.uniform(-5, -3))  # 10 us .. 1 ms
    share = float(rng.uniform(0.02, 0.95))
    waves = int(rng.integers(1, 9))
    # 256-thread blocks at occupancy 0.25 on a 64-warp SM: 2 resident blocks per SM.
    return Kernel(
        name=name,
        op=name,
        grid=(sms * 2 * waves, 1, 1),
        block=(256, 1, 1),
        registers_per_thread=128,
        shared_bytes_per_block=0,
        sms=sms,
        occupancy=0.25,
        flops=1.0,
        bytes=share * device.memory_bandwidth * time_s,
        bound="memory" if share >= 0.5 else "compute",
        time_s=time_s,
    )


def probe(first: Kernel, device: Processor) -> Kernel:
    """The protected stream's next kernel: as long as ``first``, every SM, one wave, no DRAM
    traffic, so the extra time it adds is the wait for SMs the candidate holds."""
    sm_count = device.sm_count or 1
    return Kernel("next", "next", (2 * sm_count, 1, 1), (256, 1, 1), 128, 0, sm_count, 0.25,
                  1.0, 0.0, "compute", first.time_s)  # fmt: skip


def pairs(n: int, seed: int, device: Processor) -> tuple[np.ndarray, np.ndarray]:
    """Features and simulated slowdowns of ``n`` random (protected pair, candidate) cases."""
    rng = np.random.default_rng(seed)
    rows, truth = [], []
    for i in range(n):
        first = random_kernel(rng, device, f"p{i}")
        candidate = random_kernel(rng, device, f"c{i}")
        rows.append(features(candidate, [first], device))
        truth.append(pair_slowdown(device, [first, probe(first, device)], candidate))
    return np.asarray(rows), np.asarray(truth)


def calibrate() -> InterferenceModel:
    device = gpu("A100")
    x_fit, y_fit = pairs(600, 1, device)
    weights, _ = nnls(x_fit, y_fit)
    model = InterferenceModel(*(float(round(w, 3)) for w in weights))
    x_test, y_test = pairs(300, 2, device)
    print(f"fitted on 600 random pairs on {device.name}, checked on 300 others\n")
    print("| feature | weight (fitted) | weight (in CALIBRATED) |")
    print("|---|---|---|")
    for name, w, current in zip(FEATURES, model.weights, CALIBRATED.weights, strict=True):
        print(f"| {name} | {w:.3f} | {current:.3f} |")
    for label, candidate in (("fitted", model), ("CALIBRATED", CALIBRATED)):
        predicted = x_test @ np.asarray(candidate.weights)
        rho = spearmanr(predicted, y_test).statistic
        mae = float(np.mean(np.abs(predicted - y_test)))
        agree = float(np.mean((predicted <= 0.05) == (y_test <= 0.05)))
        print(
            f"\n{label}: Spearman {rho:.3f}, mean absolute error {mae:.3f} "
            f"(simulated slowdowns: median {np.median(y_test):.3f}, mean {np.mean(y_test):.3f}), "
            f"same side of the 0.05 threshold in {agree:.1%} of pairs"
        )
    return model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("calibrate", "mixes"))
    parser.add_argument("--quick", action="store_true", help="shorter simulated time")
    args = parser.parse_args(argv)
    if args.what == "calibrate":
        calibrate()
    else:
        mixes(quick=args.quick)
    return 0


def mixes(*, quick: bool) -> None:
    raise NotImplementedError


if __name__ == "__main__":
    sys.exit(main())
