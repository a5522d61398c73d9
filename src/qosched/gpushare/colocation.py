"""Each party's slowdown when two workloads share one GPU under ``fggr``, predicted in microseconds.

A workload is a model (zoo name or ``hf:``) at a batch size, run either as a training step loop
(requests back to back: a closed loop) or as inference at a request rate (Poisson arrivals), with
a priority and a goal (``core.goals``). The *exact* answer for a pair is the GPU-sharing
simulator run on it (:func:`simulated`: the pair under ``fggr``, each party against itself
alone on the same arrivals): seconds of CPU per pair. The *surrogate* (:class:`Surrogate`)
answers from a :class:`Profile` computed once per workload from its kernel estimates, so one
new workload is scored against a thousand others with a few numpy operations.

A party's *slowdown* is its p99 latency shared over alone (inference) or its throughput alone
over shared (training): 1.0 is no slowdown, and every goal kind is read as the largest slowdown
it allows (:func:`allowed_slowdown`), so "admit" means both predicted slowdowns within what the
goals allow.

The surrogate: ``log(slowdown of x beside y)`` is a non-negative combination of the features of
:func:`pair_features` (fitted by non-negative least squares to simulated pairs:
``bench/colocation_surrogate.py``; the coefficients are ``qosched/data/colocation.json``). Its
assumptions:

- A workload is summarised by time-weighted means over its request's kernels: the share of the
  GPU's SMs a kernel wants, the share of DRAM bandwidth it uses alone, and its *duty*: the share
  of time it keeps the GPU busy alone (rate x request time for inference, 1 for training). The
  order of kernels inside a request and their spread around the means are not seen.
- Every feature but one is the other party's duty times a contention term, so a party beside an
  idle one is predicted no slowdown, and (with non-negative coefficients) the prediction never
  falls as the other party's rate rises. The exception is ``below_guard``: ``fggr`` holds a less
  important party back beside a more important one with a goal even while that one is idle (it
  cannot know when the next request comes, and a block once started is not pre-empted), so a
  party below a protected one pays a cost that does not vanish with the other's rate. The
  priority relation (x below, level with or above y) selects which coefficients apply.
- Two parties only: the slowdowns of three or more workloads on one GPU are not the product of
  the pairs' (a decision at 1,000 active workloads scores one newcomer against each candidate
  GPU's occupant, one pair each).
- It is fitted to the simulator, which shows neither cache nor memory-controller contention nor
  clock changes; ``bench/gpu_validate.py --coloc`` measures a pair on a real GPU beside the
  prediction. ``fggr`` is simulated with its default setting (no what-if calibration: that
  multiplies a pair's cost by tens of simulations); the calibrated policy can only do as well
  for the protected party.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

import numpy as np

from qosched.core.bounds import MAX_BATCH
from qosched.core.errors import InputError
from qosched.core.goals import Goal, slowdown_allowed
from qosched.gpushare.interference import bandwidth_share
from qosched.gpushare.kernel import Kernel
from qosched.hardware import Processor

Kind = Literal["training", "inference"]
KINDS = ("training", "inference")
#: The features of :func:`pair_features`, in the order of the coefficients.
FEATURES = (
    "below_wait",  # x below y: y's duty as a queue it waits behind, -log(1 - duty)
    "below_sm",  # x below y: SM contention, y's duty x x's SM share x y's SM share
    "below_bw",  # x below y: bandwidth contention, y's duty x both bandwidth shares
    "level_sm",
    "level_bw",
    "level_wait",
    "above_sm",  # x above y: y's blocks hold SMs until their wave ends
    "above_bw",
    "above_queue",  # x above y: x's own queue (its duty) lengthened by y's duty
    "below_guarded",  # x below y: the wait, scaled by how tight y's goal is (1 / its slowdown)
    "above_slack",  # x above y: SM contention, scaled by the slack x's goal leaves (1 - 1/slowdown)
    "below_guard",  # x below a protected y: held back even while y is idle (1 / y's slowdown)
    # x an inference request waiting for y's kernel in flight (blocks are not pre-empted): y's
    # duty x y's mean kernel time (time-weighted: the residual of one in flight) / x's request
    "below_block",
    "level_block",
    "above_block",
)
#: Duty at most this close to 1 enters ``-log(1 - duty)``: a saturated GPU is a long wait, not
#: an infinite one.
MAX_DUTY = 0.99
_DATA = "colocation.json"
#: Slowdowns are fitted up to this: a party slowed 5x is refused by any goal worth stating, and
#: the rare pair slowed 20x (a microsecond request behind millisecond kernels) would otherwise
#: pull every coefficient towards itself. Caps of 2, 3 and 5 fit about equally well
#: (``bench/colocation_surrogate.py``); no cap fits worst.
FIT_CAP = 5.0
#: Slowdowns are fitted up to this: a party slowed 5x is refused by any goal worth stating, and
#: the rare pair slowed 20x (a microsecond request behind millisecond kernels) would otherwise
#: pull every coefficient towards itself. Caps of 2, 3 and 5 fit about equally well
#: (``bench/colocation_surrogate.py``); none fits as well as no cap.


@dataclass(frozen=True)
class Workload:
    """One workload that may share a GPU: ``rate_rps`` for inference, none for training."""

    name: str
    model: str
    batch: int
    kind: Kind
    priority: int
    goal: Goal
    rate_rps: float | None = None
    dtype: str = "float32"

    def __post_init__(self) -> None:
        where = f"workload {self.name!r}"
        if not self.name:
            raise InputError("a workload needs a non-empty name", field="name")
        if not isinstance(self.model, str) or not self.model:
            raise InputError(f"{where}: model must be a zoo name or hf:<type>", field="model")
        if isinstance(self.batch, bool) or not isinstance(self.batch, int):
            raise InputError(f"{where}: batch must be a whole number", field="batch")
        if not 1 <= self.batch <= MAX_BATCH:
            raise InputError(f"{where}: batch must be in [1, {MAX_BATCH}], got {self.batch}",
                             field="batch")  # fmt: skip
        if self.kind not in KINDS:
            raise InputError(f"{where}: kind must be one of {', '.join(KINDS)}, got "
                             f"{self.kind!r}", field="kind")  # fmt: skip
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise InputError(f"{where}: priority must be a whole number >= 0", field="priority")
        if self.priority < 0:
            raise InputError(f"{where}: priority must be >= 0, got {self.priority}",
                             field="priority")  # fmt: skip
        if not isinstance(self.goal, Goal):
            raise InputError(f"{where}: goal must be a core.goals.Goal", field="goal")
        if self.kind == "training" and self.rate_rps is not None:
            raise InputError(f"{where}: a training loop has no request rate", field="rate_rps")
        if self.kind == "inference":
            rate = self.rate_rps
            if rate is None or not (isinstance(rate, int | float) and math.isfinite(rate)
                                    and rate > 0):  # fmt: skip
                raise InputError(f"{where}: inference needs rate_rps > 0, got {rate!r}",
                                 field="rate_rps")  # fmt: skip


@dataclass(frozen=True)
class Profile:
    """What the surrogate reads of one workload, computed once (:func:`profile`)."""

    name: str
    priority: int
    goal: Goal
    request_s: float  # one request (step) alone
    duty: float  # share of time it keeps the GPU busy alone, in [0, 1]
    sm: float  # time-weighted share of the GPU's SMs its kernels want
    bandwidth: float  # time-weighted share of DRAM bandwidth its kernels use alone
    rate_rps: float | None  # None: a training loop
    kernel_s: float  # time-weighted mean kernel time: what a request finds left of one in flight


def profile(workload: Workload, kernels: Sequence[Kernel], gpu: Processor) -> Profile:
    """``workload``'s profile from its request's kernels on ``gpu`` (as estimated:
    ``estimate.estimate_model(workload.model, gpu, batch=..., dtype=...).kernels``)."""
    if not kernels:
        raise InputError(f"workload {workload.name!r}: no kernels", field="kernels")
    times = np.array([k.time_s for k in kernels])
    total = float(times.sum())
    sm_count = gpu.sm_count or 1
    sm = float(np.dot(times, [min(k.sms, sm_count) / sm_count for k in kernels]) / total)
    bw = float(np.dot(times, [bandwidth_share(k, gpu) for k in kernels]) / total)
    duty = 1.0 if workload.rate_rps is None else min(1.0, workload.rate_rps * total)
    kernel_s = float(np.dot(times, times) / total)
    return Profile(workload.name, workload.priority, workload.goal, total, duty, sm, bw,
                   workload.rate_rps, kernel_s)  # fmt: skip


def allowed_slowdown(goal: Goal, alone: Profile) -> float:
    """The largest slowdown ``goal`` allows ``alone``'s workload (inf for best effort). A p99
    latency goal is read against the request time alone (the p99 alone is at least that)."""
    return slowdown_allowed(goal, alone.request_s, alone.rate_rps)


class Table:
    """Profiles as columns, for scoring one workload against many at once."""

    def __init__(self, profiles: Sequence[Profile]) -> None:
        self.names = [p.name for p in profiles]
        self.priority = np.array([p.priority for p in profiles], dtype=float)
        self.duty = np.array([p.duty for p in profiles])
        self.sm = np.array([p.sm for p in profiles])
        self.bandwidth = np.array([p.bandwidth for p in profiles])
        self.allowed = np.array([allowed_slowdown(p.goal, p) for p in profiles])
        request = np.array([p.request_s for p in profiles])
        kernel = np.array([p.kernel_s for p in profiles])
        latency = np.array([1.0 if p.rate_rps is not None else 0.0 for p in profiles])
        self.columns = (self.priority, self.duty, self.sm, self.bandwidth, 1.0 / self.allowed,
                        request, kernel, latency)  # fmt: skip

    def __len__(self) -> int:
        return len(self.names)


def _features(
    x_pri, x_duty, x_sm, x_bw, x_inv, x_req, x_ker, x_lat,
    y_pri, y_duty, y_sm, y_bw, y_inv, y_req, y_ker, y_lat,
) -> np.ndarray:  # fmt: skip
    """The features of x beside y (arrays broadcast): one row per pair, columns `FEATURES`.
    ``*_inv`` is 1 over the slowdown a party's goal allows (0 for best effort)."""
    below = (x_pri < y_pri).astype(float)
    level = (x_pri == y_pri).astype(float)
    above = (x_pri > y_pri).astype(float)
    wait = -np.log1p(-np.minimum(y_duty, MAX_DUTY))
    sm = y_duty * x_sm * y_sm
    bw = y_duty * x_bw * y_bw
    queue = y_duty * x_duty
    # Only a latency (x_lat: inference) feels one wait; a training step's is in sm.
    block = y_duty * y_ker / x_req * x_lat
    return np.stack(np.broadcast_arrays(below * wait, below * sm, below * bw, level * sm,
                                        level * bw, level * wait, above * sm, above * bw,
                                        above * queue, below * wait * y_inv,
                                        above * sm * (1 - x_inv), below * y_inv * x_sm,
                                        below * block, level * block, above * block),
                    axis=-1)  # fmt: skip


def pair_features(x: Profile, y: Profile) -> np.ndarray:
    """The features of ``x`` beside ``y`` (`FEATURES`), every one zero when ``y`` is idle."""
    return _features(*_columns(x), *_columns(y))


def _inverse_allowed(p: Profile) -> float:
    return 1.0 / allowed_slowdown(p.goal, p)  # 0.0 for best effort (1 / inf)


def _columns(p: Profile) -> tuple:
    latency = 1.0 if p.rate_rps is not None else 0.0
    return (np.float64(p.priority), p.duty, p.sm, p.bandwidth, _inverse_allowed(p), p.request_s,
            p.kernel_s, latency)  # fmt: skip


@dataclass(frozen=True)
class ColocationVerdict:
    """The surrogate's answer for one newcomer against every profile of a table."""

    newcomer_slowdown: np.ndarray  # the newcomer beside each candidate
    other_slowdown: np.ndarray  # each candidate beside the newcomer
    admit: np.ndarray  # both within what their goals allow


@dataclass(frozen=True)
class Surrogate:
    """``log(slowdown) = features . coefficients``, coefficients >= 0 (module doc)."""

    coefficients: tuple[float, ...]
    note: str = ""

    def __post_init__(self) -> None:
        if len(self.coefficients) != len(FEATURES):
            raise InputError(f"expected {len(FEATURES)} coefficients ({', '.join(FEATURES)}), "
                             f"got {len(self.coefficients)}", field="coefficients")  # fmt: skip
        for name, c in zip(FEATURES, self.coefficients, strict=True):
            if not (math.isfinite(c) and c >= 0):
                raise InputError(f"coefficient {name} must be finite and >= 0, got {c!r}",
                                 field="coefficients")  # fmt: skip

    def pair(self, a: Profile, b: Profile) -> tuple[float, float]:
        """Predicted slowdowns of ``a`` and of ``b`` when they share a GPU."""
        w = np.asarray(self.coefficients)
        return (float(np.exp(pair_features(a, b) @ w)), float(np.exp(pair_features(b, a) @ w)))

    def against(self, new: Profile, table: Table) -> ColocationVerdict:
        """``new`` beside each profile of ``table``: the hot path of a placement decision."""
        w = np.asarray(self.coefficients)
        mine = np.exp(_features(*_columns(new), *table.columns) @ w)
        theirs = np.exp(_features(*table.columns, *_columns(new)) @ w)
        admit = (mine <= allowed_slowdown(new.goal, new)) & (theirs <= table.allowed)
        return ColocationVerdict(mine, theirs, admit)

    def to_dict(self) -> dict[str, object]:
        return {"features": list(FEATURES), "coefficients": list(self.coefficients),
                "note": self.note}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict, source: str = "<dict>") -> Surrogate:
        if not isinstance(data, dict) or data.get("features") != list(FEATURES):
            raise InputError(f"{source}: expected features {list(FEATURES)}", field="features")
        return cls(tuple(float(c) for c in data["coefficients"]), str(data.get("note", "")))


def fit(
    features: np.ndarray, slowdowns: np.ndarray, note: str = "", *, cap: float = FIT_CAP
) -> Surrogate:
    """Non-negative least squares of ``log(slowdowns)`` on ``features`` (rows = parties), each
    slowdown taken at most ``cap`` (`FIT_CAP`)."""
    from scipy.optimize import nnls

    features = np.asarray(features, dtype=float)
    target = np.log(np.clip(np.asarray(slowdowns, dtype=float), 1.0, cap))
    if features.ndim != 2 or features.shape[1] != len(FEATURES) or len(target) != len(features):
        raise InputError(f"expected rows of {len(FEATURES)} features, one slowdown each")
    coefficients, _ = nnls(features, target)
    return Surrogate(tuple(float(c) for c in coefficients), note)


@functools.cache
def bundled() -> Surrogate:
    """The coefficients shipped in ``qosched/data/colocation.json`` (read once)."""
    path = resources.files("qosched") / "data" / _DATA
    return load(Path(str(path)))


def load(path: Path) -> Surrogate:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read co-location coefficients: {exc}", source=str(path)) from exc
    return Surrogate.from_dict(data, str(path))


# ---- the exact answer ----------------------------------------------------------------------


@dataclass(frozen=True)
class PairResult:
    """The simulator's slowdowns of a pair: ``a`` and ``b`` as given."""

    a: float
    b: float


def slowdown_of(kind: Kind, p99_ratio: float, throughput_ratio: float) -> float:
    """A party's slowdown as this module means it (module doc), at least 1."""
    value = 1.0 / throughput_ratio if kind == "training" else p99_ratio
    if not math.isfinite(value) or value <= 0:
        return math.inf
    return max(1.0, value)


def simulated(
    gpu: Processor,
    a: tuple[Workload, Sequence[Kernel]],
    b: tuple[Workload, Sequence[Kernel]],
    *,
    duration_s: float,
    seed: int = 0,
) -> PairResult:
    """The pair on ``gpu`` under ``fggr`` (no calibration) against each alone, same arrivals."""
    from qosched.gpushare.policies import create_policy
    from qosched.gpushare.simulator import AppWorkload, alone_results, compare, simulate

    (wa, _ka), (wb, _kb) = a, b
    if wa.name == wb.name:
        raise InputError(f"a pair needs two names, got {wa.name!r} twice", field="name")
    apps = [AppWorkload(w.name, w.priority, tuple(k), w.rate_rps, w.goal) for w, k in (a, b)]
    shared = simulate(gpu, apps, create_policy("fggr", calibrate=False), duration_s=duration_s,
                      seed=seed)  # fmt: skip
    rows = {r.name: r for r in compare(shared, alone_results(gpu, apps, duration_s=duration_s,
                                                               seed=seed))}  # fmt: skip
    return PairResult(*(slowdown_of(w.kind, rows[w.name].p99_latency_ratio,
                                    rows[w.name].throughput_ratio) for w in (wa, wb)))  # fmt: skip
