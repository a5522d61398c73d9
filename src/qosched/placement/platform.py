"""Where the two placement processors ("cpu" and "gpu") really are, and how work is pinned there.

A spec's ``machine`` mapping names a platform (``platform:``, default ``roofline``); each is a
registered class (``@register_platform``, the ``core.registry`` of this level; other packages
add theirs by entry point, docs/plugins.md) whose ``parse`` validates its own keys:

- ``roofline``: ``{gpu: T4, link: PCIe3-x16, gpu_calibration: 1.0, cpu_costs: measured}``: a
  catalog GPU that need not exist here. GPU unit costs are roofline estimates
  (``placement.costs``) scaled by the optional calibration factor (measured / roofline, from
  ``bench/placement_gpu.py`` on such a GPU); CPU unit costs are measured on every usable core of
  this machine (``cpu_costs: roofline`` estimates them too, without building the models). Plans
  only; nothing to run on.
- ``cpu-sets``: ``{cpu: [0], gpu: [1]}``: two disjoint sets of this machine's cores play the two
  processors. A real, if modest, heterogeneous platform: costs are measured on each set and
  plans run for real. Sets of any size work ({0} and {1, 2, 3}); the process pinned to a set of n
  cores runs PyTorch with n threads.
- ``cuda``: ``{cpu: [0, ..., 14], gpu: 0, gpu_host: [15]}``: the CPU cores (default: every
  usable core but the last) and a CUDA device driven by a process on ``gpu_host`` (default: the
  last usable core).

A :class:`PinnedProcessor` is one processor as the runtime and the profiler see it: its cores,
its torch device, and the key its measured costs are cached under.
"""

from __future__ import annotations

import ctypes
import inspect
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from qosched.core.errors import InputError
from qosched.core.registry import PluginGroup, Registry
from qosched.core.third_party import ignore_library_notices
from qosched.hardware import catalog
from qosched.hardware.measure import cpu_model_name
from qosched.placement.costs import check_calibration

T = TypeVar("T")


@dataclass(frozen=True)
class PinnedProcessor:
    """One processor of a platform: ``processor`` is ``"cpu"`` or ``"gpu"`` (its role in a plan),
    ``cores`` the CPU cores its process is pinned to, ``device`` the torch device it computes
    on."""

    processor: str
    cores: tuple[int, ...]
    device: str = "cpu"

    def cost_key(self) -> str:
        """What a measured operator time depends on besides the operator itself."""
        if self.device.startswith("cuda"):
            import torch

            return f"cuda|{torch.cuda.get_device_name(torch.device(self.device))}"
        return f"cpu|{cpu_model_name()}|{len(self.cores)} threads"


class Platform(ABC):
    """Base class of platforms: a ``machine`` of a spec. ``runnable`` says whether plans can run
    (and costs be measured); ``pinned_processors`` is called only then and returns the cpu
    processor and the gpu processor."""

    name: ClassVar[str]
    runnable: ClassVar[bool] = False

    @classmethod
    @abstractmethod
    def parse(cls, machine: Mapping[str, Any], source: str) -> Platform:
        """The platform of a spec's ``machine`` mapping (its ``platform`` key names this class);
        InputError naming the field of ``source`` otherwise."""

    @abstractmethod
    def pinned_processors(self) -> tuple[PinnedProcessor, PinnedProcessor]: ...

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """The ``machine`` mapping that ``parse`` reads back into this platform."""

    @abstractmethod
    def describe(self) -> str: ...


def _conforms(cls: type) -> bool:
    # Plans are costed two ways: by roofline on a catalog GPU, or measured where they run; a
    # platform that is neither has no costs.
    return (
        issubclass(cls, Platform)
        and not inspect.isabstract(cls)
        and (cls.runnable or issubclass(cls, RooflinePlatform))
    )


#: Other packages add platforms under this entry-point group (docs/plugins.md).
PLUGINS = PluginGroup(
    "qosched.platforms",
    _conforms,
    "a subclass of qosched.placement.platform.Platform that implements parse, "
    "pinned_processors, to_dict and describe, and is runnable or a RooflinePlatform",
)
_PLATFORMS: Registry[Platform] = Registry(
    "platform", PLUGINS, plural="platforms", field="machine.platform"
)
#: Class decorator: make a platform a spec's ``machine.platform`` can name. A duplicate raises.
register_platform = _PLATFORMS.register


def platform_names() -> tuple[str, ...]:
    return _PLATFORMS.names()


def parse_platform(machine: Any, source: str | Path = "<spec>") -> Platform:
    """The platform of a spec's ``machine`` mapping; InputError naming the field otherwise."""
    if not isinstance(machine, Mapping):
        raise InputError(
            f"expected a mapping, got {type(machine).__name__}", source=source, field="machine"
        )
    name = machine.get("platform", "roofline")
    if not isinstance(name, str):
        raise InputError(
            f"unknown platform {name!r}: expected a name", source=source, field="machine.platform"
        )
    return _PLATFORMS.get(name, str(source)).parse(machine, str(source))


def _keys(machine: Mapping[str, Any], allowed: tuple[str, ...], source: str, name: str) -> None:
    for key in machine:
        if key != "platform" and key not in allowed:
            raise InputError(
                f"unknown key for platform {name} (valid: platform, {', '.join(allowed)})",
                source=source,
                field=f"machine.{key}",
            )


def _cores(value: Any, source: str, field: str) -> tuple[int, ...]:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in value)
    ):
        raise InputError(
            f"expected a non-empty list of core numbers, got {value!r}", source=source, field=field
        )
    if len(set(value)) != len(value):
        raise InputError(f"a core is listed twice in {value!r}", source=source, field=field)
    return tuple(value)


def usable_cores() -> tuple[int, ...]:
    return tuple(sorted(os.sched_getaffinity(0)))


def check_available(cores: tuple[int, ...], field: str) -> None:
    """Raise InputError unless this process may run on every core of ``cores``."""
    usable = set(usable_cores())
    missing = sorted(set(cores) - usable)
    if missing:
        raise InputError(
            f"cores {missing} are not usable here (usable: {sorted(usable)})", field=field
        )


@register_platform("roofline")
@dataclass(frozen=True)
class RooflinePlatform(Platform):
    gpu: str
    link: str
    gpu_calibration: float = 1.0
    cpu_costs: str = "measured"
    runnable: ClassVar[bool] = False

    @classmethod
    def parse(cls, machine: Mapping[str, Any], source: str) -> RooflinePlatform:
        _keys(machine, ("gpu", "link", "gpu_calibration", "cpu_costs"), source, "roofline")
        cpu_costs = machine.get("cpu_costs", "measured")
        if cpu_costs not in ("measured", "roofline"):
            raise InputError(
                f"expected 'measured' or 'roofline', got {cpu_costs!r}",
                source=source,
                field="machine.cpu_costs",
            )
        for key, find in (("gpu", catalog.gpu), ("link", catalog.link)):
            if not isinstance(machine.get(key), str) or not machine[key]:
                raise InputError("expected a name", source=source, field=f"machine.{key}")
            try:
                find(machine[key])
            except InputError as error:  # not in the catalog: refused here, naming the field
                raise InputError(error.reason, source=source, field=f"machine.{key}") from None
        factor = check_calibration(
            machine.get("gpu_calibration", 1.0),
            field="machine.gpu_calibration",
            meaning=" (measured / roofline)",
            source=source,
        )
        return cls(machine["gpu"], machine["link"], factor, cpu_costs)

    def pinned_processors(self) -> tuple[PinnedProcessor, PinnedProcessor]:
        raise InputError(
            f"platform roofline models a {self.gpu} that is not here: nothing to run on; use "
            "platform cpu-sets (or cuda on a CUDA machine) to run plans",
            field="machine.platform",
        )

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"platform": self.name, "gpu": self.gpu, "link": self.link}
        if self.gpu_calibration != 1.0:
            data["gpu_calibration"] = self.gpu_calibration
        if self.cpu_costs != "measured":
            data["cpu_costs"] = self.cpu_costs
        return data

    def describe(self) -> str:
        return f"this CPU + {self.gpu} (roofline) over {self.link}"


@register_platform("cpu-sets")
@dataclass(frozen=True)
class CoreSetsPlatform(Platform):
    cpu: tuple[int, ...]
    gpu: tuple[int, ...]
    runnable: ClassVar[bool] = True

    @classmethod
    def parse(cls, machine: Mapping[str, Any], source: str) -> CoreSetsPlatform:
        _keys(machine, ("cpu", "gpu"), source, "cpu-sets")
        for key in ("cpu", "gpu"):
            if key not in machine:
                raise InputError("missing: a list of cores", source=source, field=f"machine.{key}")
        cpu = _cores(machine["cpu"], source, "machine.cpu")
        gpu = _cores(machine["gpu"], source, "machine.gpu")
        shared = sorted(set(cpu) & set(gpu))
        if shared:
            raise InputError(
                f"the two core sets must be disjoint; both have {shared}",
                source=source,
                field="machine.gpu",
            )
        return cls(cpu, gpu)

    def pinned_processors(self) -> tuple[PinnedProcessor, PinnedProcessor]:
        check_available(self.cpu, "machine.cpu")
        check_available(self.gpu, "machine.gpu")
        return PinnedProcessor("cpu", self.cpu), PinnedProcessor("gpu", self.gpu)

    def to_dict(self) -> dict[str, Any]:
        return {"platform": self.name, "cpu": list(self.cpu), "gpu": list(self.gpu)}

    def describe(self) -> str:
        return f"core set {list(self.cpu)} as 'cpu' + core set {list(self.gpu)} as 'gpu'"


@register_platform("cuda")
@dataclass(frozen=True)
class CudaPlatform(Platform):
    cpu: tuple[int, ...] | None = None
    gpu: int = 0
    gpu_host: tuple[int, ...] | None = None
    runnable: ClassVar[bool] = True

    @classmethod
    def parse(cls, machine: Mapping[str, Any], source: str) -> CudaPlatform:
        _keys(machine, ("cpu", "gpu", "gpu_host"), source, "cuda")
        cpu = _cores(machine["cpu"], source, "machine.cpu") if "cpu" in machine else None
        host = (
            _cores(machine["gpu_host"], source, "machine.gpu_host")
            if "gpu_host" in machine
            else None
        )
        index = machine.get("gpu", 0)
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise InputError(
                f"expected a CUDA device index >= 0, got {index!r}",
                source=source,
                field="machine.gpu",
            )
        return cls(cpu, index, host)

    def pinned_processors(self) -> tuple[PinnedProcessor, PinnedProcessor]:
        import torch

        if not torch.cuda.is_available() or self.gpu >= torch.cuda.device_count():
            raise InputError(f"platform cuda: no CUDA device {self.gpu} here", field="machine.gpu")
        usable = usable_cores()
        if len(usable) < 2 and (self.cpu is None or self.gpu_host is None):
            raise InputError(
                "platform cuda needs two usable cores (one drives the GPU)", field="machine.cpu"
            )
        host = self.gpu_host or usable[-1:]
        cpu = self.cpu or tuple(c for c in usable if c not in host)
        check_available(cpu, "machine.cpu")
        check_available(host, "machine.gpu_host")
        return PinnedProcessor("cpu", cpu), PinnedProcessor("gpu", host, f"cuda:{self.gpu}")

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"platform": self.name, "gpu": self.gpu}
        if self.cpu is not None:
            data["cpu"] = list(self.cpu)
        if self.gpu_host is not None:
            data["gpu_host"] = list(self.gpu_host)
        return data

    def describe(self) -> str:
        return f"this CPU + CUDA device {self.gpu}"


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory() -> bool:
    """Make this process's allocator keep freed memory for reuse (glibc only; False elsewhere).

    By default glibc serves large blocks (a layer's activations) with a fresh ``mmap`` each and
    hands them back on free, so every request a process serves pays page faults and zeroing for its
    activations: a BERT segment measured 1.7x its isolated time in a run (where requests of
    several tenants alternate) and a copy's pipe write 4x. The isolated profile, repeating one
    operator, reuses its blocks; with this, a run does too.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, 1 << 30)) and bool(mallopt(_M_TRIM_THRESHOLD, 1 << 30))


def pin(cores: tuple[int, ...]) -> None:
    """Pin this process to ``cores``, give PyTorch one thread per core, and keep freed memory
    (:func:`keep_freed_memory`): what profiles and runs alike start with."""
    import torch

    os.sched_setaffinity(0, cores)
    torch.set_num_threads(len(cores))
    keep_freed_memory()
    # Unpickling an exported program's pytree specs trips a deprecation inside PyTorch itself
    # (copyreg builds a LeafSpec), once per tensor tree: noise the user can do nothing about.
    ignore_library_notices()


def process_context() -> BaseContext:
    """Where pinned processes come from: a fork server that has imported PyTorch and the
    placement modules once but run nothing (so no thread pool is inherited), which makes each
    new pinned process cost a fork instead of a fresh interpreter importing PyTorch."""
    context = get_context("forkserver")
    context.set_forkserver_preload(["torch", "qosched.placement.measured"])
    return context


def run_pinned(pinned: PinnedProcessor, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a new process pinned to ``pinned.cores`` (see :func:`process_context`);
    ``fn`` must be importable at module level."""
    with ProcessPoolExecutor(
        1, mp_context=process_context(), initializer=pin, initargs=(pinned.cores,)
    ) as pool:
        return pool.submit(fn, *args).result()
