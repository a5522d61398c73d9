"""Processors and links: typed specs plus a catalog of datacenter GPUs and host links.

Every number carries its ``source``. GPU peaks are the vendor's **dense** numbers (no 2:4
structured sparsity): ``float32`` is the CUDA-core FP32 rate (not TF32), ``float16`` and
``bfloat16`` are tensor-core rates with FP32 accumulate. A dtype a part has no hardware path
for (BF16 on Turing and Volta) is simply absent from ``peak_flops``.

Units: FLOP/s, bytes/s (decimal, 1 GB/s = 1e9 B/s, as vendors print them), bytes, seconds.
GPU memory sizes are the nominal capacity read as GiB (2**30 bytes), which is how the driver
reports these parts (an A100 80GB shows 81920 MiB); usable memory is slightly lower.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from qosched.core.bounds import show_value
from qosched.core.errors import InputError

ProcessorKind = Literal["cpu", "gpu"]

_TERA = 1e12
_GB = 1e9
_GIB = 2**30


def _positive_finite(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{what}: expected a positive number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{what}: expected a positive finite number, got {value!r}")
    return float(value)


def _positive_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise InputError(f"{what}: expected a positive integer, got {value!r}")
    return int(value)


def _non_empty(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{what}: expected a non-empty string, got {value!r}")
    return value


@dataclass(frozen=True)
class Processor:
    """One CPU or GPU as the cost models see it.

    ``peak_flops`` maps a dtype name (``"float32"``, ``"float16"``, ...) to peak FLOP/s;
    ``sm_count`` is set for GPUs and ``None`` for CPUs; ``cores`` is the logical core count
    for CPUs (``None`` where not meaningful).
    """

    name: str
    kind: ProcessorKind
    peak_flops: Mapping[str, float] = field(hash=False)
    memory_bandwidth: float
    memory_bytes: int
    source: str
    sm_count: int | None = None
    cores: int | None = None

    def __post_init__(self) -> None:
        _non_empty(self.name, "processor name")
        where = f"processor {self.name!r}"
        if self.kind not in ("cpu", "gpu"):
            raise InputError(f"{where}: kind must be 'cpu' or 'gpu', got {self.kind!r}")
        if not isinstance(self.peak_flops, Mapping) or not self.peak_flops:
            raise InputError(f"{where}: peak_flops must be a non-empty mapping dtype -> FLOP/s")
        peaks = {
            _non_empty(dtype, f"{where}: dtype name"): _positive_finite(
                value, f"{where}: peak_flops[{dtype!r}]"
            )
            for dtype, value in self.peak_flops.items()
        }
        object.__setattr__(self, "peak_flops", MappingProxyType(peaks))
        object.__setattr__(
            self,
            "memory_bandwidth",
            _positive_finite(self.memory_bandwidth, f"{where}: memory_bandwidth"),
        )
        object.__setattr__(
            self, "memory_bytes", _positive_int(self.memory_bytes, f"{where}: memory_bytes")
        )
        _non_empty(self.source, f"{where}: source")
        if self.kind == "gpu":
            _positive_int(self.sm_count, f"{where}: sm_count")
        elif self.sm_count is not None:
            raise InputError(f"{where}: sm_count must be None for a CPU, got {self.sm_count!r}")
        if self.cores is not None:
            _positive_int(self.cores, f"{where}: cores")

    def __reduce__(self) -> tuple[type[Processor], tuple[Any, ...]]:
        # The read-only view of ``peak_flops`` cannot be pickled: rebuild from a plain dict
        # (what-if runs are sent to other processes with their GPU).
        fields = (self.name, self.kind, dict(self.peak_flops), self.memory_bandwidth)
        return Processor, (*fields, self.memory_bytes, self.source, self.sm_count, self.cores)

    def peak(self, dtype: str) -> float:
        """Peak FLOP/s for ``dtype``; an unknown dtype raises InputError listing the known ones."""
        try:
            return self.peak_flops[dtype]
        except (KeyError, TypeError):
            known = ", ".join(sorted(self.peak_flops))
            raise InputError(
                f"processor {self.name!r} has no peak for dtype {dtype!r}; known dtypes: {known}"
            ) from None

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready fields (the inverse of ``Processor(**d)``)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "peak_flops": dict(self.peak_flops),
            "memory_bandwidth": self.memory_bandwidth,
            "memory_bytes": self.memory_bytes,
            "source": self.source,
            "sm_count": self.sm_count,
            "cores": self.cores,
        }


@dataclass(frozen=True)
class Link:
    """A data path between processors; ``bandwidth`` is bytes/s in one direction."""

    name: str
    bandwidth: float
    latency_s: float
    source: str

    def __post_init__(self) -> None:
        _non_empty(self.name, "link name")
        where = f"link {self.name!r}"
        _positive_finite(self.bandwidth, f"{where}: bandwidth")
        if (
            isinstance(self.latency_s, bool)
            or not isinstance(self.latency_s, numbers.Real)
            or not math.isfinite(self.latency_s)
            or self.latency_s < 0
        ):
            raise InputError(
                f"{where}: latency_s must be a finite number >= 0, got {self.latency_s!r}"
            )
        _non_empty(self.source, f"{where}: source")


_DENSE = "dense (no sparsity); float16/bfloat16 = tensor core, FP32 accumulate"

GPUS: Mapping[str, Processor] = MappingProxyType(
    {
        p.name.lower(): p
        for p in (
            Processor(
                name="T4",
                kind="gpu",
                peak_flops={"float32": 8.1 * _TERA, "float16": 65 * _TERA},
                memory_bandwidth=320 * _GB,
                memory_bytes=16 * _GIB,
                sm_count=40,
                source=(
                    "NVIDIA T4 Tensor Core GPU datasheet, 'Specifications' table: "
                    "single precision 8.1 TFLOPS, mixed precision (FP16/FP32) 65 TFLOPS, "
                    "16 GB GDDR6, '320+ GB/s' (320 used). Turing has no sparsity, so these "
                    f"are {_DENSE}; no BF16 support. 40 SMs: Turing whitepaper "
                    "(TU104; T4 = 2560 CUDA cores / 64 per SM)."
                ),
            ),
            Processor(
                name="V100-SXM2-32GB",
                kind="gpu",
                peak_flops={"float32": 15.7 * _TERA, "float16": 125 * _TERA},
                memory_bandwidth=900 * _GB,
                memory_bytes=32 * _GIB,
                sm_count=80,
                source=(
                    "NVIDIA V100 Tensor Core GPU datasheet, specifications table, V100 SXM2 "
                    "column: single precision 15.7 TFLOPS, tensor performance 125 TFLOPS, "
                    "32 GB HBM2, 900 GB/s. Volta has no sparsity, so these are "
                    f"{_DENSE}; no BF16 support. 80 SMs: Volta (GV100) whitepaper, "
                    "Tesla V100 comparison table."
                ),
            ),
            Processor(
                name="A100-SXM4-80GB",
                kind="gpu",
                peak_flops={
                    "float32": 19.5 * _TERA,
                    "float16": 312 * _TERA,
                    "bfloat16": 312 * _TERA,
                },
                memory_bandwidth=2039 * _GB,
                memory_bytes=80 * _GIB,
                sm_count=108,
                source=(
                    "NVIDIA A100 Tensor Core GPU datasheet, specifications table, A100 80GB "
                    "SXM column: FP32 19.5 TFLOPS, BF16/FP16 tensor core 312 TFLOPS "
                    f"(624 with sparsity; {_DENSE}), 80 GB HBM2e, 2,039 GB/s. "
                    "108 SMs: NVIDIA A100 (Ampere GA100) whitepaper, comparison table."
                ),
            ),
            Processor(
                name="H100-SXM5-80GB",
                kind="gpu",
                peak_flops={
                    "float32": 67 * _TERA,
                    "float16": 989.5 * _TERA,
                    "bfloat16": 989.5 * _TERA,
                },
                memory_bandwidth=3350 * _GB,
                memory_bytes=80 * _GIB,
                sm_count=132,
                source=(
                    "NVIDIA H100 Tensor Core GPU datasheet, specifications table, H100 SXM "
                    "column: FP32 67 TFLOPS, BF16/FP16 tensor core 1,979 TFLOPS *with "
                    f"sparsity*, halved here to dense 989.5 ({_DENSE}; the Hopper "
                    "whitepaper prints 989.4 dense), 80 GB HBM3, 3.35 TB/s. 132 SMs: "
                    "NVIDIA H100 (Hopper) whitepaper, H100 SXM5 comparison table."
                ),
            ),
            Processor(
                name="H200-SXM-141GB",
                kind="gpu",
                peak_flops={
                    "float32": 67 * _TERA,
                    "float16": 989.5 * _TERA,
                    "bfloat16": 989.5 * _TERA,
                },
                memory_bandwidth=4800 * _GB,
                memory_bytes=141 * _GIB,
                sm_count=132,
                source=(
                    "NVIDIA H200 Tensor Core GPU datasheet, specifications table, H200 SXM "
                    "column: FP32 67 TFLOPS, BF16/FP16 tensor core 1,979 TFLOPS *with "
                    f"sparsity*, halved here to dense 989.5 ({_DENSE}), 141 GB HBM3e, "
                    "4.8 TB/s. 132 SMs: not in the H200 datasheet; H200 uses the same GH100 "
                    "configuration as H100 SXM5 (Hopper whitepaper) - treat as less certain. "
                    "141 GB read as GiB is approximate (the driver shows ~140.4 GiB)."
                ),
            ),
        )
    }
)

_GPU_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "t4": "t4",
        "v100": "v100-sxm2-32gb",
        "a100": "a100-sxm4-80gb",
        "h100": "h100-sxm5-80gb",
        "h200": "h200-sxm-141gb",
    }
)


def _pcie_per_direction(gt_per_s: float) -> float:
    # 16 lanes, one bit per transfer per lane, 128b/130b line code (PCIe 3.0 and later).
    return gt_per_s * 1e9 * 16 * (128 / 130) / 8


_PCIE_LATENCY_S = 1e-6
_PCIE_LATENCY_NOTE = (
    "latency 1 us is an order-of-magnitude estimate, not a spec number: a PCIe round trip "
    "through the root complex is a few hundred ns to ~1 us; the host-side cost of issuing "
    "and waiting for a copy is modelled separately (roofline.DEFAULT_SYNC_OVERHEAD_S)."
)
_NVLINK_NOTE = (
    "NVIDIA prints NVLink bandwidth as the total of both directions; per-direction is half. "
    "Latency 1 us is an order-of-magnitude estimate; NVIDIA publishes none."
)

LINKS: Mapping[str, Link] = MappingProxyType(
    {
        lk.name.lower(): lk
        for lk in (
            Link(
                name="PCIe3-x16",
                bandwidth=_pcie_per_direction(8.0),
                latency_s=_PCIE_LATENCY_S,
                source=(
                    "PCI-SIG PCI Express Base Specification 3.0: 8 GT/s per lane, 128b/130b "
                    "encoding -> 15.75 GB/s per direction for x16 (theoretical, before "
                    f"packet overhead; ~12-13 GB/s is typical in practice). {_PCIE_LATENCY_NOTE}"
                ),
            ),
            Link(
                name="PCIe4-x16",
                bandwidth=_pcie_per_direction(16.0),
                latency_s=_PCIE_LATENCY_S,
                source=(
                    "PCI-SIG PCI Express Base Specification 4.0: 16 GT/s per lane, 128b/130b "
                    "encoding -> 31.5 GB/s per direction for x16 (theoretical, before packet "
                    f"overhead; the A100 datasheet rounds it to '64 GB/s' both ways). "
                    f"{_PCIE_LATENCY_NOTE}"
                ),
            ),
            Link(
                name="PCIe5-x16",
                bandwidth=_pcie_per_direction(32.0),
                latency_s=_PCIE_LATENCY_S,
                source=(
                    "PCI-SIG PCI Express Base Specification 5.0: 32 GT/s per lane, 128b/130b "
                    "encoding -> 63.0 GB/s per direction for x16 (theoretical, before packet "
                    f"overhead; the H100 datasheet rounds it to '128 GB/s' both ways). "
                    f"{_PCIE_LATENCY_NOTE}"
                ),
            ),
            Link(
                name="NVLink2-V100",
                bandwidth=150 * _GB,
                latency_s=1e-6,
                source=(
                    "NVIDIA V100 datasheet, interconnect bandwidth 300 GB/s for V100 SXM2 "
                    f"(6 NVLink 2.0 links x 25 GB/s per direction) -> 150 GB/s per direction. "
                    f"{_NVLINK_NOTE}"
                ),
            ),
            Link(
                name="NVLink3-A100",
                bandwidth=300 * _GB,
                latency_s=1e-6,
                source=(
                    "NVIDIA A100 datasheet, NVLink 600 GB/s for A100 SXM (12 NVLink 3.0 links "
                    f"x 25 GB/s per direction) -> 300 GB/s per direction. {_NVLINK_NOTE}"
                ),
            ),
            Link(
                name="NVLink4-H100",
                bandwidth=450 * _GB,
                latency_s=1e-6,
                source=(
                    "NVIDIA H100 and H200 datasheets, NVLink 900 GB/s for the SXM parts (18 "
                    "NVLink 4.0 links x 25 GB/s per direction) -> 450 GB/s per direction. "
                    f"{_NVLINK_NOTE}"
                ),
            ),
        )
    }
)

_LINK_ALIASES: Mapping[str, str] = MappingProxyType(
    {"pcie3": "pcie3-x16", "pcie4": "pcie4-x16", "pcie5": "pcie5-x16"}
)


def _known(
    entries: Mapping[str, Processor] | Mapping[str, Link], aliases: Mapping[str, str]
) -> str:
    canonical = sorted(entry.name for entry in entries.values())
    return ", ".join(canonical) + " (aliases: " + ", ".join(sorted(aliases)) + ")"


def gpu(name: str) -> Processor:
    """The catalog GPU called ``name`` (any case; short aliases like ``"a100"`` work)."""
    key = name.strip().lower() if isinstance(name, str) else None
    key = _GPU_ALIASES.get(key, key) if key is not None else None
    if key is None or key not in GPUS:
        raise InputError(
            f"unknown GPU {show_value(name)}; known GPUs: {_known(GPUS, _GPU_ALIASES)}"
        )
    return GPUS[key]


def link(name: str) -> Link:
    """The catalog link called ``name`` (any case; ``"pcie4"`` means ``"PCIe4-x16"``)."""
    key = name.strip().lower() if isinstance(name, str) else None
    key = _LINK_ALIASES.get(key, key) if key is not None else None
    if key is None or key not in LINKS:
        raise InputError(
            f"unknown link {show_value(name)}; known links: {_known(LINKS, _LINK_ALIASES)}"
        )
    return LINKS[key]
