"""Fit the co-location surrogate to the GPU-sharing simulator and check it on held-out pairs.

    python bench/colocation_surrogate.py [--models mlp,mobilenet,resnet,bert,resnet50]
        [--batches 1,8] [--pairs 120] [--gpu A100] [--seed 7] [--out bench/out/colocation]
        [--write src/qosched/data/colocation.json]

Pairs of zoo models are drawn (batch, training loop or inference at a rate giving 5-85 % duty
alone, priorities, goals) and each is simulated under ``fggr`` against each party alone
(``gpushare.colocation.simulated``); kernel estimates and simulated answers are cached under
``--out`` (``estimates.pkl``, ``pairs.json``), so a second run only fits. The first 70 % of the
pairs train the surrogate (non-negative least squares), the rest are held out: printed are the
median and p90 of the absolute slowdown error on them, how often the surrogate's admit/refuse
decision (both goals met) agrees with the simulator's (and the same for predicting no
slowdown at all, the yardstick), and the time of one decision at 1,000
active workloads (one newcomer scored against 1,000 profiles). ``--write`` stores the fit, with
a fixed sample of training and held-out rows that tests re-fit and check against.
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from qosched.core.goals import BEST_EFFORT, Goal
from qosched.gpushare.colocation import (
    FEATURES,
    Profile,
    Surrogate,
    Table,
    Workload,
    allowed_slowdown,
    fit,
    pair_features,
    profile,
    simulated,
)
from qosched.gpushare.simulator import launch_rate
from qosched.hardware.catalog import gpu as catalog_gpu

TRAIN_SHARE = 0.7
#: Kernel launches one simulated run may make: keeps a pair to a few seconds of CPU.
LAUNCHES = 30_000
SAMPLE_ROWS = 24  # of each split, kept in the data file for the tests


def estimates(models: list[str], batches: list[int], device, cache: Path) -> dict:
    """Kernels per (model, batch), estimated once and cached."""
    from qosched.gpushare.estimate import estimate_model

    known = pickle.loads(cache.read_bytes()) if cache.exists() else {}
    for model in models:
        for batch in batches:
            key = f"{device.name}/{model}/{batch}"
            if key not in known:
                print(f"estimating {model} batch {batch} ...", file=sys.stderr)
                known[key] = tuple(estimate_model(model, device, batch=batch).kernels)
    cache.write_bytes(pickle.dumps(known))
    return known


def draw_workload(rng, name: str, key: str, kernels, priority: int, top: bool) -> Workload:
    model, batch = key.split("/")[1:]
    request_s = sum(k.time_s for k in kernels)
    if rng.random() < 0.5:
        rate = float(rng.uniform(0.05, 0.85)) / request_s
        goal = Goal("p99_slowdown", float(rng.choice([1.1, 1.25, 1.5, 2.0])))
        kind, rps = "inference", rate
    else:
        goal = Goal("throughput_share", float(rng.choice([0.5, 0.8])))
        kind, rps = "training", None
    if not top and rng.random() < 0.5:
        goal = BEST_EFFORT
    return Workload(name, model, int(batch), kind, priority, goal, rps)


def duration_s(pair) -> float:
    """About 200 requests of the busier party, at most 0.3 s and LAUNCHES launches."""
    rates = [w.rate_rps or 1.0 / sum(k.time_s for k in ks) for w, ks in pair]
    launches = sum(launch_rate(ks, w.rate_rps) for w, ks in pair)
    return max(1e-3, min(0.3, 200.0 / max(rates), LAUNCHES / launches))


def pairs(args, device, kernels: dict, cache: Path) -> list[dict]:
    done = json.loads(cache.read_text()) if cache.exists() else []
    rng = np.random.default_rng(args.seed)
    keys = sorted(kernels)
    rows = []
    for i in range(args.pairs):
        ka, kb = (keys[j] for j in rng.integers(len(keys), size=2))
        pa = int(rng.integers(0, 3))
        pb = pa if rng.random() < 0.25 else int(rng.integers(0, 3))
        top = max(pa, pb)
        a = draw_workload(rng, "a", ka, kernels[ka], pa, pa == top)
        b = draw_workload(rng, "b", kb, kernels[kb], pb, pb == top)
        row = {"a": vars(a) | {"goal": a.goal.to_dict(), "key": ka},
               "b": vars(b) | {"goal": b.goal.to_dict(), "key": kb}}  # fmt: skip
        if i < len(done) and {k: done[i][k] for k in ("a", "b")} == row:
            rows.append(done[i])
            continue
        pair = ((a, kernels[ka]), (b, kernels[kb]))
        began = time.perf_counter()
        result = simulated(device, *pair, duration_s=duration_s(pair), seed=args.seed + i)
        row |= {"slowdown_a": result.a, "slowdown_b": result.b,
                "sim_s": time.perf_counter() - began}  # fmt: skip
        print(f"pair {i}: {ka} {a.kind} p{pa} / {kb} {b.kind} p{pb}: "
              f"{result.a:.3f} {result.b:.3f} ({row['sim_s']:.1f} s)", file=sys.stderr)  # fmt: skip
        rows.append(row)
        cache.write_text(json.dumps(rows + done[len(rows) :]))
    cache.write_text(json.dumps(rows))
    return rows


def goal_of(data: dict) -> Goal:
    return Goal(data["kind"], data["value"] or 0.0)


def profiles_of(row: dict, kernels: dict, device) -> tuple[Profile, Profile]:
    result = []
    for side in ("a", "b"):
        d = row[side]
        w = Workload(d["name"], d["model"], d["batch"], d["kind"], d["priority"],
                     goal_of(d["goal"]), d["rate_rps"])  # fmt: skip
        result.append(profile(w, kernels[d["key"]], device))
    return result[0], result[1]


def evaluate(surrogate: Surrogate, rows, kernels, device) -> dict:
    errors, agree = [], []
    for row in rows:
        a, b = profiles_of(row, kernels, device)
        pred = surrogate.pair(a, b)
        true = (row["slowdown_a"], row["slowdown_b"])
        errors += [abs(p - t) for p, t in zip(pred, true, strict=True) if math.isfinite(t)]
        allowed = (allowed_slowdown(a.goal, a), allowed_slowdown(b.goal, b))
        agree.append(all(p <= g for p, g in zip(pred, allowed, strict=True))
                     == all(t <= g for t, g in zip(true, allowed, strict=True)))  # fmt: skip
    return {"median_abs_error": statistics.median(errors),
            "p90_abs_error": float(np.quantile(errors, 0.9)),
            "decision_agreement": sum(agree) / len(agree), "pairs": len(rows)}  # fmt: skip


def design(rows, kernels, device) -> tuple[np.ndarray, np.ndarray]:
    x, y = [], []
    for row in rows:
        a, b = profiles_of(row, kernels, device)
        for me, other, s in ((a, b, row["slowdown_a"]), (b, a, row["slowdown_b"])):
            if math.isfinite(s):
                x.append(pair_features(me, other))
                y.append(s)
    return np.array(x), np.array(y)


def decision_time_us(surrogate: Surrogate, rows, kernels, device, active=1000) -> float:
    """Median time of scoring one newcomer against ``active`` profiles (a fresh draw of the
    profiles seen), in microseconds."""
    pool = [p for row in rows for p in profiles_of(row, kernels, device)]
    rng = np.random.default_rng(0)
    table = Table([pool[i] for i in rng.integers(len(pool), size=active)])
    new = pool[0]
    times = []
    for _ in range(200):
        began = time.perf_counter()
        surrogate.against(new, table)
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,mobilenet,resnet,bert,resnet50")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--pairs", type=int, default=120)
    parser.add_argument("--gpu", default="A100")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default="bench/out/colocation")
    parser.add_argument("--write", default=None, help="store the fit in this JSON file")
    args = parser.parse_args(argv)
    device = catalog_gpu(args.gpu)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kernels = estimates(args.models.split(","), [int(b) for b in args.batches.split(",")],
                        device, out / "estimates.pkl")  # fmt: skip
    rows = pairs(args, device, kernels, out / f"pairs-{args.gpu}-{args.seed}.json")
    cut = int(len(rows) * TRAIN_SHARE)
    train, held = rows[:cut], rows[cut:]
    x, y = design(train, kernels, device)
    command = "python bench/colocation_surrogate.py " + " ".join(argv or sys.argv[1:])
    surrogate = fit(x, y, note=f"{command.strip()} ({len(train)} training pairs)")
    result = {"gpu": args.gpu, "train_pairs": len(train),
              "coefficients": dict(zip(FEATURES, surrogate.coefficients, strict=True)),
              "train": evaluate(surrogate, train, kernels, device),
              "held_out": evaluate(surrogate, held, kernels, device),
              # The yardstick: predicting no slowdown at all (every coefficient 0).
              "held_out_if_no_slowdown": evaluate(Surrogate((0.0,) * len(FEATURES)), held,
                                                  kernels, device),
              "decision_us_at_1000": decision_time_us(surrogate, rows, kernels, device),
              "simulated_pair_s_median": statistics.median(r["sim_s"] for r in rows)}  # fmt: skip
    print(json.dumps(result, indent=2))
    if args.write:
        hx, hy = design(held, kernels, device)
        data = surrogate.to_dict() | {
            "gpu": args.gpu,
            "held_out": result["held_out"],
            "sample_train": {"features": x[:SAMPLE_ROWS].tolist(),
                             "slowdowns": y[:SAMPLE_ROWS].tolist()},
            "sample_held_out": {"features": hx[:SAMPLE_ROWS].tolist(),
                                "slowdowns": hy[:SAMPLE_ROWS].tolist()},
        }  # fmt: skip
        Path(args.write).write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
