"""Random inputs chosen to break qosched, through the command line as a user runs it.

    python bench/hostile_inputs.py cluster [--seeds 0:40] [--timeout 300]
    python bench/hostile_inputs.py gpushare [--seeds 0:40] [--timeout 300]
    python bench/hostile_inputs.py infer [--seeds 0:40] [--timeout 300]
    python bench/hostile_inputs.py import [--seeds 0:40] [--timeout 300]
    python bench/hostile_inputs.py service [--timeout 300]
    python bench/hostile_inputs.py service-escape [--timeout 300]

- cluster: a random trace per seed (1-40 jobs in bursts of simultaneous arrivals, 1 to 10^7
  iterations, deadlines from 0.001x to 100x the run time, best-effort jobs, 1-8 nodes of 8 GPUs)
  through ``qosched sim cluster --policy all`` under both fidelities.
- gpushare: a random apps spec per seed (1-5 apps of explicit kernels of 1 us to 0.1 s, bandwidth
  up to 5x the GPU's, open and closed loops, goals met by nothing: ``p99_latency_ms: 0.0001``,
  ``throughput_rps: 1e9``) through ``qosched gpu sim`` under every sharing policy.
- infer: a random ``qosched infer plan`` spec per seed (``--json``). About a third are valid (1-4
  zoo tenants of small batches, roofline CPU costs but now and then measured ones or two core
  sets), which must plan: finite, positive throughputs, the LP bound at least COS's, one row per
  tenant in the spec's order. The rest are such a spec broken 1-3 ways: 0-70 tenants, unknown or
  repeated names, unknown models, processors, GPUs and links, batches, goals and counts that are
  zero, negative, huge, NaN, inf, text or of the wrong type, keys missing or unknown, names of
  100,000 characters or with control characters; or text that is no spec at all: empty, binary,
  nested 5,000 deep, a lone surrogate.
- import: per seed, one random cluster trace in each ``trace import`` format (ITP, Helios,
  Philly, Alibaba PAI, Alibaba's GPU-sharing pods), valid or broken once or twice: a cell made
  empty, NaN, inf, negative, huge, a date in another format; a line truncated, cut short or
  made longer, repeated (a duplicate job id), with an open quote, a NUL, bytes that are not
  UTF-8; or the whole file empty, a header alone, behind a BOM, in UTF-16, in CR line endings,
  junk. A trace written must read back as ``sim cluster`` reads it.
- service-escape: ``qosched up`` on a temporary home runs a job whose command forks a process
  that leaves its session (``setsid``), double-forks, ignores SIGTERM and clears its environment
  (``execve`` with an empty one), then cancels the job with a grace under the runner's own 5 s,
  the command stopping on SIGTERM or ignoring it too; once with the cgroups the service makes,
  once with ``QOSCHED_CGROUPS=off`` (its fallback). Each case is ``held`` when the escaped
  process is gone by the time the job is cancelled (or soon after), ``broken`` when it outlives
  the job (it is killed then); with the seconds from cancel to the job cancelled and to the
  process gone.

- service: a real ``qosched up`` on a temporary home, its open files limited to 1,024 (soft and
  hard) as under a common ``ulimit -n``, running one command job and holding one queued. Then,
  with no token: a connection flood (1,022 connections, each a request never finished) and a
  header flood (100 connections, each sending 99 header lines of 64 KB and never ending its
  request). Each attack is ``held`` when ``/healthz`` answers within 10 s while the attack's
  connections are open, no job failed, the service's output has no ``Too many open files``,
  the running job's progress is still read, and (the header flood) every connection was
  refused and the service grew by less than 100 MB; ``broken`` otherwise. Printed with the
  time to ``/healthz`` under the attack, the service's open files and its RSS before and after.
  Last, a big log: the other jobs cancelled, a job writes one line of 400 MB, then ``qosched
  logs --tail 5``; held when the tail takes under 10 s and prints at most 1 MiB, at most twice
  the default log limit (plus 64 MiB) is kept on disk, and the service's peak RSS stays under
  1 GB.

Each run of the other modes is judged by how it ends: exit 0, or exit 2 with a
``qosched: error:`` line (the input refused, with its reason), is a pass; a traceback, any
other exit or running past ``--timeout`` is a failure, printed with its seed so it can be run
again. In the infer and import modes a run is also WRONG when a valid spec is refused or plans
nonsense, when a refusal does not name the file, or names another line of a trace than the one
broken (or, for a broken cell, not its column), or when the trace written does not read back.
The slowest runs are listed too. The machine is shared, so the seconds are wall time and only
rough.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import resource
import select
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from qosched.backends.local import joblog
from qosched.backends.local.client import Client
from qosched.cluster.importers import PAI_COLUMNS
from qosched.cluster.pods.trace import ALIBABA_COLUMNS, ALIBABA_GPU_2023, read_pod_trace
from qosched.cluster.throughput import ThroughputModel
from qosched.gpushare.policies import policy_names
from qosched.trainingjob import jobspec

QOSCHED = [sys.executable, "-m", "qosched.cli.main"]


def random_trace(seed: int, tables: ThroughputModel) -> tuple[str, int]:
    """A trace's text and the nodes it runs on."""
    rng = random.Random(seed)
    jobs, nodes = rng.randint(1, 40), rng.choice([1, 2, 4, 8])
    pairs = [(m, b) for m in tables.models for b in tables.batch_sizes(m)]
    lines = ["job_id,submit_s,model,batch_size,iterations,deadline_s,requested_gpus,duration_s"]
    now = 0.0
    for index in range(jobs):
        now = round(now + rng.choice([0, 0, 0.001, 1, 60, 600, 3600 * rng.random()]), 3)
        model, batch = rng.choice(pairs)
        curve = tables.curve(model, batch)
        gpus = rng.choice([g for g in curve.measured if g <= 8 * nodes] or [1])
        iterations = rng.choice([1, 2, 10, 1000, 100_000, 10**7])
        run_s = iterations / curve.rate(gpus)
        deadline = ""
        if rng.random() >= 0.15:
            slack = rng.choice([1e-3, 0.5, 1, 1.5, 100]) * run_s + rng.choice([0, 0.001, 1])
            deadline = f"{max(now + slack, now + 0.002):.3f}"
        lines.append(
            f"{index},{now:.3f},{model},{batch},{iterations},{deadline},{gpus},{run_s:.3f}"
        )
    return "\n".join(lines) + "\n", nodes


def random_spec(seed: int) -> str:
    """An apps spec of explicit kernels on an A100."""
    rng = random.Random(seed)

    def kernel(index: int) -> str:
        time_s = 10 ** rng.uniform(-6, -1)
        bandwidth = 10 ** rng.uniform(-3, 0.7)  # share of the GPU's 2 TB/s, above 1 at times
        return (
            f"      - {{name: k{index}, op: o{index}, grid: [{rng.randint(1, 5000)}, 1, 1], "
            f"block: [{rng.choice([32, 256, 1024])}, 1, 1], "
            f"registers_per_thread: {rng.choice([16, 32, 64])}, "
            f"shared_bytes_per_block: {rng.choice([0, 49152])}, "
            f"sms: {rng.choice([1, 2, 54, 108])}, "
            f"occupancy: {rng.choice([0.01, 0.5, 1.0])}, flops: {rng.uniform(0, 1e10):.3e}, "
            f"bytes: {bandwidth * 2e12 * time_s:.3e}, bound: {rng.choice(['compute', 'memory'])}, "
            f"time_s: {time_s:.3e}}}"
        )

    goals = ["best_effort", "{p99_slowdown: 1.0}", "{p99_slowdown: 1.5}",
             "{p99_latency_ms: 0.0001}", "{throughput_share: 1.0}", "{throughput_share: 0.01}",
             "{throughput_rps: 1e9}", "{throughput_rps: 1}", None]  # fmt: skip
    lines = ["gpu: A100", f"duration_s: {rng.choice([0.001, 0.01, 0.05])}",
             f"seed: {rng.randint(0, 99)}", "apps:"]  # fmt: skip
    for app in range(rng.randint(1, 5)):
        lines += [f"  - name: a{app}", f"    priority: {rng.randint(0, 3)}"]
        if rng.random() < 0.5:
            lines.append("    closed_loop: true")
        else:
            lines.append(f"    arrivals: {{poisson_rps: {10 ** rng.uniform(0, 4):.3f}}}")
        goal = rng.choice(goals)
        if goal:
            lines.append(f"    goal: {goal}")
        lines.append("    kernels:")
        lines += [kernel(i) for i in range(rng.randint(1, 4))]
    return "\n".join(lines) + "\n"


# --- infer -------------------------------------------------------------------------------------

#: Zoo models small enough to capture (and, now and then, measure) in a second or two.
SMALL_MODELS = ("mlp", "mobilenet", "resnet", "bert")
#: Values no count, batch, goal or rate may hold, each a way YAML or a user writes it wrong.
BAD_NUMBERS = (0, -1, -0.5, 2.5, 10**9, 10**30, 1e308, float("nan"), float("inf"),
               float("-inf"), "8", "fast", "", True, None, [], {}, [1], "1e3")  # fmt: skip
#: Import paths that load without side effects and are no model factory.
NOT_FACTORIES = ("math:sqrt", "math:pi", "builtins:dict", "builtins:tuple", "json:loads",
                 "nosuch_module_xyz:f", "qosched:nothing", ":", "a:", ":b", "hf:")  # fmt: skip


def valid_inference_spec(rng: random.Random) -> dict:
    """A spec that must plan: 1-4 small zoo tenants, goals no plan can miss."""
    machine: dict = {
        "gpu": rng.choice(["T4", "t4", "A100-SXM4-80GB", "v100", "H100-SXM5-80GB"]),
        "link": rng.choice(["PCIe3-x16", "pcie4", "NVLink3-A100"]),
        "cpu_costs": "roofline",
    }
    models = SMALL_MODELS
    draw = rng.random()
    if draw < 0.1:
        del machine["cpu_costs"]  # measured on this machine's cores
        models = ("mlp",)
    elif draw < 0.2:
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) >= 2:
            machine = {"platform": "cpu-sets", "cpu": cores[:1], "gpu": cores[1:2]}
            models = ("mlp",)
    if rng.random() < 0.3 and "gpu" in machine and isinstance(machine["gpu"], str):
        machine["gpu_calibration"] = rng.choice([0.5, 1, 2.0, 10])
    tenants = []
    for index in range(rng.randint(1, 4)):
        tenant: dict = {"name": rng.choice([f"t{index}", f"tenant-{index}", f"é{index}"]),
                        "model": rng.choice(models)}  # fmt: skip
        if rng.random() < 0.5:
            tenant["batch"] = rng.choice([1, 2, 3, 8])
        if rng.random() < 0.3:
            tenant["latency_goal_ms"] = rng.choice([1e4, 60_000, 1e6])
        tenants.append(tenant)
    spec: dict = {"machine": machine, "tenants": tenants}
    if rng.random() < 0.5:
        spec["max_switches"] = rng.randint(0, 8)
    if rng.random() < 0.3:
        spec["seed"] = rng.randint(0, 2**31)
    return spec


def break_inference_spec(rng: random.Random, spec: dict) -> None:
    """One way to break ``spec``, in place."""
    tenants = spec["tenants"]
    tenant = rng.choice(tenants)
    kind = rng.randrange(16)
    if kind == 0:
        count = rng.choice([0, 1, 63, 64, 65, 70])
        spec["tenants"] = [{"name": f"n{i}", "model": "mlp"} for i in range(count)]
        spec["machine"] = {"gpu": "T4", "link": "PCIe3-x16", "cpu_costs": "roofline"}
    elif kind == 1:
        tenants.append(dict(tenant))  # a duplicate name
    elif kind == 2:
        tenant["model"] = rng.choice(["nosuch", "ResNet", "resnet ", "", 5, None, ["mlp"],
                                      *NOT_FACTORIES])  # fmt: skip
    elif kind == 3:
        tenant[rng.choice(["batch", "latency_goal_ms"])] = rng.choice(BAD_NUMBERS)
    elif kind == 4:
        spec[rng.choice(["max_switches", "seed"])] = rng.choice(BAD_NUMBERS)
    elif kind == 5:
        del tenant[rng.choice(["name", "model"])]
    elif kind == 6:
        del spec[rng.choice(["machine", "tenants"])]
    elif kind == 7:
        where = rng.choice([spec, tenant, spec["machine"]])
        where[rng.choice(["rate", "rate_rps", "slo_ms", "nmae", "batch_size", "tenant"])] = 5
    elif kind == 8:
        spec["machine"] = rng.choice([
            {"platform": "tpu"}, {"platform": None}, {"platform": 3},
            {"platform": "cpu-sets", "cpu": [0], "gpu": [99]},
            {"platform": "cpu-sets", "cpu": [0], "gpu": [0]},
            {"platform": "cpu-sets", "cpu": [-1], "gpu": [1]},
            {"platform": "cpu-sets", "cpu": "0", "gpu": [1]},
            {"platform": "cpu-sets", "cpu": [0, 0], "gpu": [1]},
            {"platform": "cpu-sets", "cpu": [], "gpu": [1]},
            {"platform": "cpu-sets", "cpu": [2**70], "gpu": [1]},
            {"platform": "cpu-sets", "cpu": [0]},
            {"platform": "cuda", "gpu": 7}, {"platform": "cuda", "gpu": -1},
            {"platform": "cuda", "gpu": 0, "cpu": [0], "gpu_host": [0]},
            {"gpu": "Z9", "link": "PCIe3-x16"}, {"gpu": "T4", "link": "pcie9"},
            {"gpu": "T4"}, {"gpu": "", "link": ""}, {"gpu": 4, "link": True},
            {"gpu": "T4", "link": "pcie3", "cpu_costs": "guessed"},
            {"gpu": "T4", "link": "pcie3", "gpu_calibration": rng.choice(BAD_NUMBERS)},
            [], "T4", None,
        ])  # fmt: skip
    elif kind == 9:
        spec["tenants"] = rng.choice([[], {}, "mlp", None, [None], ["mlp"], [[]], 5])
    elif kind == 10:
        tenant["name"] = rng.choice([
            "x" * 100_000, "a\nb", "a\tb", "\u202eevil", "", " ", 7, None, True, ["a"],
            "[bold]x[/]", "\x1b[31mred", "\u0000",
        ])  # fmt: skip
    elif kind == 11:
        tenant["model"] = "m" * rng.choice([300, 10_000, 100_000])
    elif kind == 12:
        tenants[tenants.index(tenant)] = rng.choice(["mlp", 3, None, [tenant]])
    elif kind == 13:
        tenant["latency_goal_ms"] = rng.choice([1e-9, 1e-3, 0.01])  # a goal nothing meets
    elif kind == 14:
        tenant["batch"] = rng.choice([4096, 65_536, 65_537])
        tenant["model"] = "mlp"
    else:
        spec[rng.choice(["machine", "tenants", "seed", "max_switches"])] = rng.choice(BAD_NUMBERS)


def text_no_spec_is(rng: random.Random) -> bytes:
    """A file that is no spec at all."""
    return rng.choice([
        b"", b"\n\n", b"# only a comment\n", b"---\n...\n", b"[]\n", b"42\n", b"tenants\n",
        bytes(rng.randrange(256) for _ in range(rng.randint(1, 3000))),
        b"\xef\xbb\xbfmachine: {gpu: T4, link: pcie3}\ntenants: [{name: a, model: mlp}]\n",
        b"machine:\n\tgpu: T4\n", b"tenants: [\n", b"a: b: c\n", b'name: "\\ud800"\n',
        b"machine: {gpu: T4, link: pcie3, cpu_costs: roofline}\ntenants: " + b"[" * 5000
        + b"]" * 5000 + b"\n",
        b"x: &a [1]\ny: *a\n", b"machine: !!python/object:os.system {}\n",
        b"tenants:\n" + b"  - {name: a, model: mlp}\n" * 70_000,
        b"\x00\x00machine: 1\n", "tenants: [{name: \u00e9, model: mlp}]\n".encode("utf-16"),
    ])  # fmt: skip


def random_inference_spec(seed: int) -> tuple[bytes, bool]:
    """An ``infer plan`` spec's bytes, and whether it is valid (then it must plan)."""
    import yaml

    rng = random.Random(seed)
    if rng.random() < 0.12:
        return text_no_spec_is(rng), False
    spec = valid_inference_spec(rng)
    valid = rng.random() < 0.35
    if not valid:
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            tenants, machine = spec.get("tenants"), spec.get("machine")
            listed = isinstance(tenants, list) and tenants and isinstance(machine, dict)
            if listed and all(isinstance(t, dict) for t in tenants):
                break_inference_spec(rng, spec)
    text = yaml.safe_dump(spec, default_flow_style=rng.choice([None, True, False]),
                          allow_unicode=rng.random() < 0.5, sort_keys=False)  # fmt: skip
    return text.encode("utf-8", "surrogatepass"), valid


def sane_plan(stdout: str, spec: bytes) -> str | None:
    """What is wrong with the ``infer plan --json`` object of a spec that planned, or None."""
    import yaml

    try:
        report = json.loads(stdout)
    except ValueError:
        return f"not one JSON object: {stdout[-200:]!r}"
    numbers = [report["throughput_rps"], report["bound_rps"]]
    numbers += [t["latency_s"] for t in report["tenants"]]
    if not all(isinstance(x, float | int) and math.isfinite(x) and x > 0 for x in numbers):
        return f"a throughput or latency that is not finite and positive: {numbers}"
    # A baseline that no plan of its kind lets meet the goals reports 0.
    rates = list(report["baselines"].values())
    if not all(isinstance(x, float | int) and math.isfinite(x) and x >= 0 for x in rates):
        return f"a baseline's rate that is not finite and >= 0: {rates}"
    if report["bound_rps"] < report["throughput_rps"] * (1 - 1e-9):
        return f"COS {report['throughput_rps']} req/s above the bound {report['bound_rps']}"
    try:
        names = [t["name"] for t in yaml.safe_load(spec.decode("utf-8"))["tenants"]]
    except Exception:  # a spec YAML reads otherwise than qosched: only the numbers are checked
        return None
    if [t["name"] for t in report["tenants"]] != names:
        return f"tenants {[t['name'] for t in report['tenants']]}, the spec has {names}"
    return None


# --- import ------------------------------------------------------------------------------------

HELIOS_COLUMNS = ("job_id", "user", "vc", "jobname", "gpu_num", "cpu_num", "node_num", "state",
                  "submit_time", "start_time", "end_time", "duration", "queue")  # fmt: skip
#: Each format's columns (PAI's file has none written), and the one naming a job.
IMPORT_COLUMNS = {
    "itp": ("job_id", "submission_time", "duration", "num_gpu"),
    "helios": HELIOS_COLUMNS,
    "philly": ("timestamp", "duration", "num_gpus", "gpu_time", "cluster"),
    "pai": PAI_COLUMNS,
    "alibaba-gpu-2023": (*ALIBABA_COLUMNS, "scheduled_time"),
}
_JOB_COLUMN = {"itp": "job_id", "helios": "job_id", "philly": None, "pai": "job_name",
               "alibaba-gpu-2023": "name"}  # fmt: skip
#: What a broken cell may hold.
BAD_CELLS = ("", " ", "nan", "NaN", "inf", "-inf", "+Infinity", "-1", "-0", "0", "1e308",
             "1e400", "9" * 400, "0x10", "1_000", "\u0661\u0662", "5.5", "abc", "1,5", "None",
             "2**70", "1e-320")  # fmt: skip
#: Dates written otherwise than ``2020-04-01 08:30:00``, some of them still readable.
ODD_DATES = ("2020/04/01 00:00:00", "01-04-2020 00:00", "2020-04-01T00:00:00Z", "2020-04-01",
             "2020-04-01 25:00:00", "2020-02-30 00:00:00", "9999-12-31 23:59:59",
             "0001-01-01 00:00:00", "1969-12-31 23:59:59", "2020-04-01 00:00:00+14:00",
             "2020-04-01 00:00:00-23:59", "9999-12-31 23:59:59-12:00", "1585699200",
             "20200401T000000", "2020-04-01 00:00:00.123456789", "Apr 1 2020")  # fmt: skip


@dataclass
class Broken:
    """Where a trace was broken: the lines a refusal may name (None: any), the column of each
    broken cell by line, and every change made, for the report."""

    lines: set[int] | None = field(default_factory=set)
    columns: dict[int, set[str]] = field(default_factory=dict)
    changes: list[str] = field(default_factory=list)


def _valid_rows(rng: random.Random, fmt: str) -> list[list[str]]:
    """1-30 jobs of ``fmt``, every one readable (some left out by the importer's filters)."""
    start = datetime(2020, 4, 1, tzinfo=UTC).timestamp() + rng.randint(0, 10**7)
    rows, now = [], start
    for index in range(rng.randint(1, 30)):
        now += rng.choice([0, 1, 60, 3600, rng.randint(0, 10**5)])
        run = rng.choice([1, 599, 600, 3600, rng.randint(600, 10**6)])
        gpus = rng.choice([1, 1, 2, 4, 8, 16, 32, 64, 3, 128, 0])
        when = datetime.fromtimestamp(now, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
        if fmt == "itp":
            rows.append([f"job{index}", f"{now - start:.0f}", str(run), str(gpus)])
        elif fmt == "helios":
            state = rng.choice(["COMPLETED", "COMPLETED", "FAILED", "CANCELLED", "completed"])
            rows.append([str(index), "u", "vc", "n", str(gpus), "8", "1", state, when, when, when,
                         str(run), "0"])  # fmt: skip
        elif fmt == "philly":
            rows.append([when, f"{run:.1f}", str(gpus), f"{run * gpus:.1f}", "c1"])
        elif fmt == "alibaba-gpu-2023":
            rows.append(_pod_row(rng, index, now - start, run))
        else:
            status = rng.choice(["Terminated", "Terminated", "Failed", "Running"])
            for task in range(rng.randint(1, 3)):
                share = rng.choice(["100", "50", "25", "", "200"])
                times = [f"{now:.0f}", f"{now + run:.0f}"]
                rows.append([f"j{index}", f"t{task}", str(rng.randint(1, 4)), status, *times,
                             "600", "29", share, "V100"])  # fmt: skip
    return rows


def _pod_row(rng: random.Random, index: int, created: float, run: int) -> list[str]:
    """One valid ``openb_pod_list`` row: no GPU, part of one GPU, or 1-8 whole GPUs."""
    num_gpu = rng.choice([0, 1, 1, 1, 2, 4, 8])
    milli = 0 if num_gpu == 0 else rng.choice([1000, 500, 250, 1]) if num_gpu == 1 else 1000
    deleted = rng.choice([f"{created + run:.0f}", f"{created:.0f}", ""])
    return [f"pod-{index}", str(rng.choice([0, 1000, 88000])), str(rng.choice([0, 262144])),
            str(num_gpu), str(milli), rng.choice(["", "V100M16", "A10|T4"]),
            rng.choice(["LS", "BE", "Burstable", ""]), rng.choice(["Running", "Succeeded", ""]),
            f"{created:.0f}", deleted, f"{created:.0f}"]  # fmt: skip


def random_cluster_trace(seed: int, fmt: str) -> tuple[bytes, Broken]:
    """A ``fmt`` trace for ``trace import``, valid or broken once or twice, and how."""
    rng = random.Random(f"{fmt}{seed}")
    columns = list(IMPORT_COLUMNS[fmt])
    rows = _valid_rows(rng, fmt)
    if fmt != "pai" and rng.random() < 0.3:  # columns in another order, found by name
        order = rng.sample(range(len(columns)), len(columns))
        columns = [columns[i] for i in order]
        rows = [[row[i] for i in order] for row in rows]
    header = 0 if fmt == "pai" else 1
    lines = ([",".join(columns)] if header else []) + [",".join(row) for row in rows]
    broken = Broken()
    ending, encode = "\n", "utf-8"
    for _ in range(rng.choice([0, 1, 1, 1, 2])):
        if not lines:
            break
        kind = rng.randrange(14)
        at = rng.randrange(header, len(lines)) if len(lines) > header else 0
        number = at + 1
        cells = lines[at].split(",")
        job = _JOB_COLUMN[fmt]
        if job and job in columns and at >= header:
            # A refusal about a job may name any of its rows (PAI's name the first of its tasks).
            key = columns.index(job)
            same = [i + 1 for i, line in enumerate(lines[header:], header)
                    if line.split(",")[key : key + 1] == cells[key : key + 1]]  # fmt: skip
        else:
            same = [number]
        if kind <= 3 and at >= header and len(cells) == len(columns):
            index = rng.randrange(len(columns))
            dated = columns[index] in ("submit_time", "timestamp", "start_time", "end_time")
            if fmt == "alibaba-gpu-2023" and columns[index] in ("gpu_spec", "qos", "pod_phase",
                                                                "scheduled_time"):  # fmt: skip
                continue  # free text or a column the importer does not read: nothing to break
            cells[index] = rng.choice(ODD_DATES if dated and rng.random() < 0.6 else BAD_CELLS)
            lines[at] = ",".join(cells)
            if "," in cells[index]:
                broken.lines = None  # a comma makes more cells: the row no longer fits at all
            elif broken.lines is not None:
                broken.lines.update(same)
                broken.columns.setdefault(number, set()).add(columns[index])
            broken.changes.append(f"line {number}: {columns[index]} = {cells[index]!r}")
            continue
        if kind == 4:
            lines[at] = lines[at][: rng.randrange(len(lines[at]) + 1)]
            change = "truncated"
        elif kind == 5:
            lines[at] += "," + ",".join(rng.choice(BAD_CELLS) for _ in range(rng.randint(1, 3)))
            change = "more cells"
        elif kind == 6:
            lines[at] = ",".join(cells[: rng.randrange(len(cells))])
            change = "fewer cells"
        elif kind == 7 and at >= header:
            lines.insert(at + 1, lines[at])
            same.append(number + 1)
            change = "repeated (a duplicate job id)"
            if broken.lines is not None:
                broken.lines = {n + (n > number) for n in broken.lines}
                broken.columns = {n + (n > number): c for n, c in broken.columns.items()}
        elif kind == 8:
            lines[at] = lines[at][:3] + '"' + lines[at][3:]
            change = "an open quote"
            broken.lines = None  # the quoted cell runs on over the lines after it
        elif kind == 9:
            bad = rng.choice(["\x00", "\udcff", "\udcfe\udcc3"])  # bytes 0, ff, fe c3
            lines[at] = lines[at][:2] + bad + lines[at][2:]
            change = "a NUL or bytes that are not UTF-8"
        elif kind == 10:
            size = rng.choice([200_000, 10])  # past the csv module's field limit, or not
            lines[at] += "," + "x" * size
            change = f"a cell of {size:,} characters"
        elif kind == 11:
            lines = rng.choice([[], lines[:header], ["", " ", ",,,"], [lines[0]] * 3])
            broken.lines = None
            change = "the file replaced"
        elif kind == 12:
            ending = rng.choice(["\r\n", "\r", "\n\n"])
            lines = [("\ufeff" if rng.random() < 0.5 else "") + lines[0], *lines[1:]]
            if rng.random() < 0.2:
                encode = "utf-16"
            change = f"line endings {ending!r}, {encode}"
            if ending == "\r" or encode == "utf-16":
                broken.lines = None
        else:  # also a cell or a repeat the row at ``at`` has no place for (the header)
            junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 2000)))
            lines.insert(at, junk.decode("utf-8", "surrogateescape"))
            broken.lines = None
            change = "junk bytes"
        if broken.lines is not None:
            broken.lines.update(same)
        broken.changes.append(f"line {number}: {change}")
    if ending == "\n\n" and broken.lines is not None:  # a blank line after each
        broken.lines = {2 * n - 1 for n in broken.lines}
        broken.columns = {2 * n - 1: c for n, c in broken.columns.items()}
    text = ending.join(lines) + (ending if rng.random() < 0.9 else "")
    return text.encode(encode, "surrogateescape" if encode == "utf-8" else "surrogatepass"), broken


def refusal_names(message: str, path: Path, broken: Broken) -> str | None:
    """What a refusal of a broken trace fails to name, or None: the file, then the broken line
    (when the message names one), then the broken column (on that line)."""
    where = f"qosched: error: {path}"
    if not message.startswith(where):
        return "the refusal does not name the file"
    rest = message[len(where) :]
    if not rest.startswith(":") or broken.lines is None or not rest[1:2].isdigit():
        return None
    line = int(rest[1:].split(":", 1)[0])
    if broken.lines and line not in broken.lines:
        return f"names line {line}, the trace was broken on {sorted(broken.lines)}"
    named = broken.columns.get(line)
    if named and "field '" in rest and not any(f"field {c!r}" in rest for c in named):
        return f"names another column than {' or '.join(sorted(named))}"
    return None


Check = Callable[[int, str, str], "str | None"]


def judge(
    argv: list[str], timeout_s: float, check: Check | None = None, env: dict | None = None
) -> tuple[str, float, str]:
    """("pass" | "refused" | "FAIL" | "TIMEOUT" | "WRONG", wall seconds, the last line of stderr,
    or what ``check(exit code, stdout, that line)`` found wrong with a run that ended well)."""
    started = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return "TIMEOUT", time.perf_counter() - started, ""
    wall = time.perf_counter() - started
    last = (done.stderr.strip().splitlines() or [""])[-1]
    if done.returncode == 0:
        verdict = "pass"
    elif done.returncode == 2 and last.startswith("qosched: error:"):
        verdict = "refused"
    else:
        return "FAIL", wall, last
    problem = check(done.returncode, done.stdout, last) if check else None
    if problem is not None:
        return "WRONG", wall, f"{problem} ({last[:300]})" if last else problem
    return verdict, wall, last


def seeds(text: str) -> range:
    first, _, last = text.partition(":")
    return range(int(first), int(last))


def inference_cases(seed: int, folder: Path) -> list[tuple[str, list[str], Check | None]]:
    text, valid = random_inference_spec(seed)
    path = folder / f"spec_{seed}.yaml"
    path.write_bytes(text)

    def check(code: int, stdout: str, last: str) -> str | None:
        if code == 0:
            return sane_plan(stdout, text)
        if valid:
            return "a valid spec refused"
        return None if last.startswith(f"qosched: error: {path}") else "does not name the file"

    argv = [*QOSCHED, "infer", "plan", str(path), "--json",
            "--profile-cache", str(folder / "op_profile.json")]  # fmt: skip
    return [(f"seed {seed} ({'valid' if valid else 'broken'})", argv, check)]


def import_cases(seed: int, folder: Path) -> list[tuple[str, list[str], Check | None]]:
    from qosched.cluster.throughput import ThroughputModel
    from qosched.cluster.traces import read_trace
    from qosched.core.errors import InputError

    cases: list[tuple[str, list[str], Check | None]] = []
    for fmt in IMPORT_COLUMNS:
        text, broken = random_cluster_trace(seed, fmt)
        path, out = folder / f"{fmt}_{seed}.csv", folder / f"{fmt}_{seed}_deadlines.csv"
        path.write_bytes(text)
        out.unlink(missing_ok=True)

        def check(code: int, stdout: str, last: str, path=path, out=out, broken=broken, fmt=fmt):
            if code == 2:
                if not broken.changes and "no job to import" not in last:
                    return "a valid trace refused"
                return refusal_names(last, path, broken)
            try:
                if fmt == ALIBABA_GPU_2023:
                    read_pod_trace(out)
                else:
                    read_trace(out, ThroughputModel.bundled("A100"))
            except InputError as exc:
                return f"the trace written does not read back: {exc}"
            return None

        what = f"seed {seed} --from {fmt}" + (f" [{'; '.join(broken.changes)}]"
                                               if broken.changes else "")  # fmt: skip
        argv = [*QOSCHED, "trace", "import", str(path), "--from", fmt, "--out", str(out),
                "--seed", str(seed)]  # fmt: skip
        cases.append((what, argv, check))
    return cases


# --- the local service's API, flooded --------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]
SERVICE_FD_LIMIT = 1024
FLOOD_CONNECTIONS = 1022
HEADER_CONNECTIONS, HEADER_LINES, HEADER_LINE_BYTES = 100, 99, 64 * 1024
SLOW_JOB = """\
apiVersion: qosched/v1
kind: TrainingJob
metadata:
  name: {name}
spec:
  command: ["python3", "examples/local/train_tiny.py", "--batch", "20000"]
  work:
    iterations: 20000
  deadline: 1h
  bestEffort: true
  resources:
    minCpus: 1
    maxCpus: 1
"""


@dataclass
class Service:
    """A ``qosched up`` process and what it has written so far."""

    process: subprocess.Popen[bytes]
    home: Path
    output: Path
    client: Client | None = None

    def proc(self, name: str) -> str:
        return (Path("/proc") / str(self.process.pid) / name).read_text()

    def rss_mb(self, field: str = "VmRSS") -> float:
        """A memory figure of /proc/PID/status in MB: resident now, or ``VmHWM`` its peak."""
        line = next(x for x in self.proc("status").splitlines() if x.startswith(f"{field}:"))
        return int(line.split()[1]) / 1024

    def open_files(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def jobs(self) -> str:
        assert self.client is not None
        return ", ".join(
            f"{job.name} {job.state} {job.iterations_done}/{job.iterations}"
            for job in self.client.jobs()
        )

    def progress(self) -> int:
        assert self.client is not None
        return sum(job.iterations_done for job in self.client.jobs())

    def failed(self) -> bool:
        assert self.client is not None
        return any(job.state == "failed" for job in self.client.jobs())

    def emfile(self) -> bool:
        return "Too many open files" in self.output.read_text(errors="replace")


def start_service(folder: Path) -> Service:
    home, output = folder / "home", folder / "service.out"

    def limit_files() -> None:  # runs in the child, before qosched starts
        resource.setrlimit(resource.RLIMIT_NOFILE, (SERVICE_FD_LIMIT, SERVICE_FD_LIMIT))

    with output.open("wb") as sink:
        process = subprocess.Popen(
            [*QOSCHED, "up", "--home", str(home), "--cpus", "0", "--tick", "1"],
            cwd=REPO,
            stdout=sink,
            stderr=subprocess.STDOUT,
            preexec_fn=limit_files,
        )
    service = Service(process, home, output)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            service.client = Client.from_home(home, timeout_s=10)
            service.client.healthz()
            return service
        except Exception:
            time.sleep(0.2)
    process.kill()
    raise SystemExit(f"qosched up did not answer: {output.read_text(errors='replace')[-2000:]}")


def healthz_s(port: int, timeout_s: float = 10.0) -> float | None:
    """Seconds ``GET /healthz`` took to answer 200, None if it did not within ``timeout_s``."""
    start = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as connection:
            connection.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            answer = connection.recv(64)
    except OSError:
        return None
    return time.monotonic() - start if b" 200 " in answer else None


def connection_flood(service: Service, port: int) -> tuple[bool, str]:
    flood: list[socket.socket] = []
    head = f"GET /jobs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode()  # never ended
    progress = service.progress()
    files_before, rss_before = service.open_files(), service.rss_mb()

    def half_sent() -> None:
        try:
            connection = socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError:
            return
        flood.append(connection)
        with contextlib.suppress(OSError):  # closed by the server already
            connection.sendall(head)

    try:
        # 32 at a time: one after the other, a server that accepts slowly is let off by its
        # own timeouts.
        with ThreadPoolExecutor(32) as pool:
            for _ in range(FLOOD_CONNECTIONS):
                pool.submit(half_sent)
        files_during = service.open_files()
        took = healthz_s(port)
        time.sleep(3)  # a few scheduling rounds, each reading the running job's progress
        files_after, rss_after = service.open_files(), service.rss_mb()
    finally:
        for connection in flood:
            connection.close()
    advanced = service.progress() > progress
    held = took is not None and advanced and not service.failed() and not service.emfile()
    return held, (
        f"{len(flood)} of {FLOOD_CONNECTIONS} half-sent connections open; /healthz "
        + (f"in {took:.3f} s" if took is not None else "NO ANSWER in 10 s")
        + f"; service open files {files_before} -> {files_during} -> {files_after} "
        f"(limit {SERVICE_FD_LIMIT}); RSS {rss_before:.0f} -> {rss_after:.0f} MB; progress "
        f"{'still read' if advanced else 'STOPPED'}; "
        f"{'Too many open files in its output' if service.emfile() else 'no EMFILE'}"
    )


def send_headers(port: int, opened: list[socket.socket]) -> str:
    connection = socket.create_connection(("127.0.0.1", port), timeout=30)
    opened.append(connection)
    line = b"X-Pad: " + b"a" * (HEADER_LINE_BYTES - 9) + b"\r\n"
    try:
        connection.sendall(f"GET /jobs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
        for _ in range(HEADER_LINES):
            connection.sendall(line)
    except OSError:
        return "refused"
    readable, _, _ = select.select([connection], [], [], 0.5)
    if readable:
        try:
            answer = connection.recv(64)
        except OSError:
            return "refused"
        if answer == b"" or answer.startswith(b"HTTP/1.1 4"):
            return "refused"
    return "held"


def header_flood(service: Service, port: int) -> tuple[bool, str]:
    opened: list[socket.socket] = []
    rss_before = service.rss_mb()
    try:
        outcomes = [send_headers(port, opened) for _ in range(HEADER_CONNECTIONS)]
        rss_after = service.rss_mb()
        took = healthz_s(port)
    finally:
        for connection in opened:
            connection.close()
    refused = outcomes.count("refused")
    held = (
        took is not None
        and refused == HEADER_CONNECTIONS
        and rss_after - rss_before < 100
        and not service.failed()
    )
    return held, (
        f"{refused} of {HEADER_CONNECTIONS} connections of {HEADER_LINES} x "
        f"{HEADER_LINE_BYTES // 1024} KB header lines refused; /healthz "
        + (f"in {took:.3f} s" if took is not None else "NO ANSWER in 10 s")
        + f"; RSS {rss_before:.0f} -> {rss_after:.0f} MB"
    )


BIG_LINE_MB = 400
BIG_LINE_SCRIPT = f"""\
import sys, time
for _ in range({BIG_LINE_MB}):
    sys.stdout.write("z" * (1 << 20))
sys.stdout.flush()
time.sleep(600)
"""
BIG_LOG_JOB = (
    "apiVersion: qosched/v1\nkind: TrainingJob\nmetadata: {name: big-log}\nspec:\n"
    f"  command: {json.dumps(['python3', '-c', BIG_LINE_SCRIPT])}\n"
    "  work: {iterations: 1}\n  deadline: 1h\n  bestEffort: true\n"
    "  resources: {minCpus: 1, maxCpus: 1}\n"
)


def big_log(service: Service, port: int) -> tuple[bool, str]:
    """A job writes one line of 400 MB; then ``qosched logs --tail 5``."""
    assert service.client is not None
    for other in service.client.jobs():  # its core must be free for it
        if other.state in ("queued", "running", "preempted"):
            service.client.cancel(other.id)
    job = service.client.submit(BIG_LOG_JOB, "big-log.yaml")
    job_dir = service.home / "jobs" / job.id
    deadline = time.monotonic() + 300
    while joblog.output_size(job_dir) < BIG_LINE_MB << 20 and time.monotonic() < deadline:
        time.sleep(0.5)
    written = joblog.output_size(job_dir)
    time.sleep(3)  # a few rounds: the service rotates what is over the job's limit
    kept = sum(
        (job_dir / name).stat().st_size
        for name in (joblog.JOB_LOG, joblog.ROTATED_LOG)
        if (job_dir / name).exists()
    )
    start = time.monotonic()
    tail = subprocess.run(
        [*QOSCHED, "logs", "--home", str(service.home), "--tail", "5", job.id],
        capture_output=True,
        timeout=120,
        check=False,
    )
    took = time.monotonic() - start
    peak = service.rss_mb("VmHWM")
    with contextlib.suppress(Exception):
        service.client.cancel(job.id)
    held = (
        tail.returncode == 0
        and len(tail.stdout) <= joblog.MAX_TAIL_BYTES + 1
        and took < 10
        and kept <= 2 * jobspec.DEFAULT_LOG_LIMIT + (64 << 20)
        and peak < 1024
    )
    return held, (
        f"job wrote {written / (1 << 20):.0f} MB in one line; {kept / (1 << 20):.0f} MB kept on "
        f"disk (limit {jobspec.DEFAULT_LOG_LIMIT >> 20} MB); `logs --tail 5` took {took:.2f} s "
        f"and printed {len(tail.stdout) / (1 << 20):.2f} MB; service peak RSS {peak:.0f} MB"
    )


def service_attacks() -> int:
    # The floods themselves need more descriptors than the service is given.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with tempfile.TemporaryDirectory() as folder:
        service = start_service(Path(folder))
        assert service.client is not None
        try:
            port = int(service.client.url.rsplit(":", 1)[1])
            for name in ("flood-running", "flood-queued"):
                service.client.submit(SLOW_JOB.format(name=name), f"{name}.yaml")
            deadline = time.monotonic() + 120
            while service.progress() == 0 and time.monotonic() < deadline:
                time.sleep(0.5)
            print(f"service: pid {service.process.pid}, open files limited to "
                  f"{SERVICE_FD_LIMIT}; jobs: {service.jobs()}", flush=True)  # fmt: skip
            broken = 0
            for name, attack in (("connection flood", connection_flood),
                                 ("header flood", header_flood),
                                 ("big log", big_log)):  # fmt: skip
                held, numbers = attack(service, port)
                broken += not held
                print(f"{name}: {'held' if held else 'broken'}: {numbers}", flush=True)
            print(f"after: jobs: {service.jobs()}", flush=True)
        finally:
            with contextlib.suppress(Exception):
                service.client.shutdown()
            try:
                service.process.wait(60)
            except subprocess.TimeoutExpired:
                service.process.kill()


#: The escaping job's command (see the module docstring): ``stubborn`` ignores SIGTERM itself.
ESCAPE_SCRIPT = """
import os, signal, sys, time
if "stubborn" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
pid_file = os.path.join(os.environ["QOSCHED_JOB_DIR"], "escaped.pid")
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # kept across exec
        with open(pid_file + ".tmp", "w") as out:
            out.write(str(os.getpid()))
        os.rename(pid_file + ".tmp", pid_file)
        os.execve("/bin/sleep", ["sleep", "600"], {})
    os._exit(0)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout_s:g} s")
        time.sleep(0.05)


def escape_case(
    folder: Path, grace_s: float, stubborn: bool, cgroups_off: bool, timeout_s: float
) -> tuple[bool, str]:
    """One escaped-process attack on a fresh ``qosched up``: (held, what was seen)."""
    from qosched.backends.local.client import Client
    from qosched.backends.local.home import ENDPOINT_FILE

    home = folder / "home"
    env = {**os.environ, "QOSCHED_CGROUPS": "off" if cgroups_off else "auto"}
    try:
        from qosched.backends.local.cgroups import detect
    except ImportError:  # a version of qosched before job cgroups, measured for comparison
        held_by = "a qosched without cgroups"
    else:
        groups = detect(home, environ=env)
        held_by = groups.describe() if groups else "no cgroup"
    script = folder / "escape.py"
    script.write_text(ESCAPE_SCRIPT)
    command = [sys.executable, str(script)] + (["stubborn"] if stubborn else [])
    spec = json.dumps({
        "apiVersion": "qosched/v1", "kind": "TrainingJob", "metadata": {"name": "escape"},
        "spec": {"command": command, "work": {"iterations": 10}, "deadline": "10m",
                 "resources": {"minCpus": 1, "maxCpus": 1}, "bestEffort": True},
    })  # fmt: skip
    core = str(min(os.sched_getaffinity(0)))
    with open(folder / "service.log", "wb") as log:
        up = subprocess.Popen(
            [*QOSCHED, "up", "--home", str(home), "--cpus", core, "--tick", "0.2",
             "--grace-s", f"{grace_s:g}"],
            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    escaped = None
    try:
        _wait_for(lambda: (home / ENDPOINT_FILE).exists(), timeout_s, "the service did not start")
        client = Client.from_home(home)
        job_id = client.submit(spec, "escape.yaml").id
        pid_file = home / "jobs" / job_id / "escaped.pid"
        _wait_for(pid_file.exists, timeout_s, "the job's process did not start")
        escaped = int(pid_file.read_text())
        if Path(f"/proc/{escaped}/environ").read_bytes() or os.getsid(escaped) == up.pid:
            return False, f"{held_by}: the attack did not escape as meant (pid {escaped})"
        cancelled_at = time.monotonic()
        client.cancel(job_id)
        _wait_for(lambda: client.job(job_id).state == "cancelled", timeout_s, "not cancelled")
        to_cancelled = time.monotonic() - cancelled_at
        # A little slack for a process killed a moment ago to be reaped.
        deadline = time.monotonic() + 2.0
        while _alive(escaped) and time.monotonic() < deadline:
            time.sleep(0.01)
        to_gone = time.monotonic() - cancelled_at
        if _alive(escaped):
            return False, (
                f"{held_by}: pid {escaped} (parent "
                f"{Path(f'/proc/{escaped}/stat').read_text().rsplit(')', 1)[1].split()[1]}) "
                f"still runs {time.monotonic() - cancelled_at:.1f} s after cancel; the job was "
                f"cancelled after {to_cancelled:.1f} s"
            )
        return True, (
            f"{held_by}: pid {escaped} gone by {to_gone:.1f} s after cancel; the job was "
            f"cancelled after {to_cancelled:.1f} s"
        )
    except TimeoutError as exc:
        return False, f"{held_by}: {exc}"
    finally:
        if escaped is not None and _alive(escaped):
            os.kill(escaped, 9)
        subprocess.run([*QOSCHED, "down", "--home", str(home)], capture_output=True, env=env)
        try:
            up.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()


def service_escape(timeout_s: float) -> int:
    """The escaped-process attack (see the module docstring), every case: 0 when all held."""
    broken = 0
    cases = [(0.5, False), (1.0, True)]
    for cgroups_off in (False, True):
        for grace_s, stubborn in cases:
            with tempfile.TemporaryDirectory() as folder:
                held, seen = escape_case(Path(folder), grace_s, stubborn, cgroups_off, timeout_s)
            what = (f"grace {grace_s:g} s, command {'ignores' if stubborn else 'stops on'} "
                    f"SIGTERM, {'QOSCHED_CGROUPS=off' if cgroups_off else 'cgroups'}")  # fmt: skip
            print(f"{'held' if held else 'broken'}: {what}: {seen}", flush=True)
            broken += not held
    print(f"service-escape: {2 * len(cases)} cases, {broken} broken")
    return 1 if broken else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "level", choices=["cluster", "gpushare", "infer", "import", "service", "service-escape"]
    )
    parser.add_argument("--seeds", type=seeds, default=range(0, 40), help="FIRST:LAST (0:40)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run (300)")
    args = parser.parse_args()
    if args.level == "service":
        return service_attacks()
    if args.level == "service-escape":
        return service_escape(args.timeout)
    runs: list[tuple[str, str, float, str]] = []  # (verdict, what, seconds, message)
    tables = ThroughputModel.bundled("A100")
    with tempfile.TemporaryDirectory() as folder:
        # This machine's CPU is measured once for every infer run, not into the user's cache.
        env = {**os.environ, "XDG_CACHE_HOME": str(Path(folder) / "cache")}
        for seed in args.seeds:
            cases: list[tuple[str, list[str], Check | None]]
            if args.level == "cluster":
                text, nodes = random_trace(seed, tables)
                path = Path(folder) / f"trace_{seed}.csv"
                path.write_text(text)
                cases = [
                    (f"seed {seed} --fidelity {fidelity}",
                     [*QOSCHED, "sim", "cluster", "--trace", str(path), "--nodes", str(nodes),
                      "--gpus-per-node", "8", "--policy", "all", "--fidelity", fidelity,
                      "--json", "--seed", str(seed)], None)
                    for fidelity in ("sound", "artifact")
                ]  # fmt: skip
            elif args.level == "gpushare":
                path = Path(folder) / f"apps_{seed}.yaml"
                path.write_text(random_spec(seed))
                cases = [
                    (f"seed {seed} --policy {name}",
                     [*QOSCHED, "gpu", "sim", str(path), "--policy", name, "--json"], None)
                    for name in policy_names()
                ]  # fmt: skip
            elif args.level == "infer":
                cases = inference_cases(seed, Path(folder))
            else:
                cases = import_cases(seed, Path(folder))
            for what, argv, check in cases:
                verdict, wall, message = judge(argv, args.timeout, check, env)
                runs.append((verdict, what, wall, message))
                if verdict in ("FAIL", "TIMEOUT", "WRONG"):
                    print(f"{verdict} {what}: {message}", flush=True)
    verdicts = ("pass", "refused", "FAIL", "TIMEOUT", "WRONG")
    counts = {v: sum(1 for r in runs if r[0] == v) for v in verdicts}
    print(f"{args.level}: {len(runs)} runs over seeds {args.seeds.start}:{args.seeds.stop}: "
          + ", ".join(f"{n} {v}" for v, n in counts.items()))  # fmt: skip
    for verdict, what, wall, message in sorted(runs, key=lambda r: -r[2])[:5]:
        print(f"  slowest: {what}: {wall:.1f} s ({verdict}){': ' + message if message else ''}")
    refused = sorted({r[3] for r in runs if r[0] == "refused"})
    for message in refused[:5]:
        print(f"  refused, e.g.: {message}")
    return 1 if counts["FAIL"] or counts["TIMEOUT"] or counts["WRONG"] else 0


if __name__ == "__main__":
    sys.exit(main())
