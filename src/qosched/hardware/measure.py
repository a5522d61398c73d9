"""Measure this machine's CPU as a Processor (NumPy matmul peak, copy bandwidth), cached as JSON.

The cache is keyed by hostname + CPU model + usable core count, so a second call on the same
machine is instant; ``force=True`` re-measures and overwrites that entry.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import socket
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from qosched.core.errors import InputError
from qosched.hardware.catalog import Processor

DEFAULT_SECONDS_BUDGET = 1.2
_MATMUL_N = 1024  # 2 GFLOP per product: long enough to time, small enough for a tiny budget.
_COPY_BYTES = 64 * 2**20  # per array; larger than the last-level cache of most CPUs.
_MIN_REPEATS = 3


def default_cache_path() -> Path:
    """``$XDG_CACHE_HOME/qosched/cpu.json``, else ``~/.cache/qosched/cpu.json``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "qosched" / "cpu.json"


def cpu_model_name() -> str:
    """``model name`` from /proc/cpuinfo, else ``platform.processor()``, else ``"unknown CPU"``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def usable_core_count() -> int:
    """Logical CPUs this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def memory_bytes() -> int:
    """Total RAM: ``MemTotal`` from /proc/meminfo, else ``os.sysconf`` pages * page size."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024  # the kernel prints kB = KiB
    except (OSError, ValueError, IndexError):
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _best_time(action: Callable[[], object], budget_s: float) -> float:
    """Run ``action`` once to warm up, then repeatedly until ``budget_s``; the fastest run."""
    action()
    best = float("inf")
    start = time.perf_counter()
    repeats = 0
    while repeats < _MIN_REPEATS or time.perf_counter() - start < budget_s:
        t0 = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - t0)
        repeats += 1
    return best


def _measure_matmul_flops(budget_s: float) -> float:
    """Peak float32 FLOP/s: ``2 n^3`` over the best time of an ``n x n`` NumPy matmul."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((_MATMUL_N, _MATMUL_N), dtype=np.float32)
    b = rng.standard_normal((_MATMUL_N, _MATMUL_N), dtype=np.float32)
    out = np.empty_like(a)
    best = _best_time(lambda: np.matmul(a, b, out=out), budget_s)
    return 2.0 * _MATMUL_N**3 / best


def _measure_copy_bandwidth(budget_s: float) -> float:
    """Memory bandwidth: (bytes read + bytes written) over the best time of a large copy."""
    src = np.ones(_COPY_BYTES // 8, dtype=np.float64)
    dst = np.zeros_like(src)  # written once here so the timed copies take no page faults
    best = _best_time(lambda: np.copyto(dst, src), budget_s)
    return 2.0 * src.nbytes / best


def _cache_key(name: str, cores: int) -> str:
    return f"{socket.gethostname()}|{name}|{cores}"


def _read_cache(path: Path) -> dict[str, dict[str, object]]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(
            f"unreadable CPU cache ({exc}); delete it or call measure_cpu(force=True)",
            source=path,
        ) from exc
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise InputError(
            "expected a JSON object of cache key -> processor fields; delete it or call "
            "measure_cpu(force=True)",
            source=path,
        )
    return data


def _write_cache(path: Path, entries: dict[str, dict[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(entries, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)  # atomic: a concurrent reader sees the old or the new file


def measure_cpu(
    seconds_budget: float = DEFAULT_SECONDS_BUDGET,
    *,
    cache_path: str | Path | None = None,
    force: bool = False,
) -> Processor:
    """This machine's CPU as a Processor with a measured float32 peak and memory bandwidth.

    ``seconds_budget`` is split evenly between the matmul and the copy (each always runs a
    warm-up and at least 3 timed repeats, so a tiny budget still gives a number). The result is
    cached in ``cache_path`` (default :func:`default_cache_path`); ``force=True`` re-measures.
    """
    if (
        isinstance(seconds_budget, bool)
        or not isinstance(seconds_budget, int | float)
        or not 0 < seconds_budget < float("inf")
    ):
        raise InputError(f"seconds_budget: expected a positive number, got {seconds_budget!r}")
    path = Path(cache_path) if cache_path is not None else default_cache_path()
    name = cpu_model_name()
    cores = usable_core_count()
    key = _cache_key(name, cores)

    if force:
        try:
            entries = _read_cache(path)
        except InputError:
            entries = {}  # the caller asked to re-measure; a broken cache is replaced
    else:
        entries = _read_cache(path)
        if key in entries:
            try:
                return Processor(**entries[key])  # type: ignore[arg-type]
            except (TypeError, InputError) as exc:
                raise InputError(
                    f"cache entry {key!r} is not a valid processor ({exc}); delete it or call "
                    "measure_cpu(force=True)",
                    source=path,
                ) from exc

    peak = _measure_matmul_flops(seconds_budget / 2)
    bandwidth = _measure_copy_bandwidth(seconds_budget / 2)
    when = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    processor = Processor(
        name=name,
        kind="cpu",
        peak_flops={"float32": peak},
        memory_bandwidth=bandwidth,
        memory_bytes=memory_bytes(),
        cores=cores,
        source=(
            f"measured on this machine at {when} with NumPy {np.__version__}: float32 peak = "
            f"best of {_MATMUL_N}x{_MATMUL_N} matmuls (2n^3 FLOPs), bandwidth = best of "
            f"{_COPY_BYTES // 2**20} MiB copies (bytes read + written), memory = MemTotal; "
            f"{cores} usable cores on host {socket.gethostname()}"
        ),
    )
    entries[key] = processor.to_dict()
    _write_cache(path, entries)
    return processor
