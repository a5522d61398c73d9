"""A GPU shared by applications, kernel by kernel, on the discrete-event engine (``qosched.sim``).

The GPU is a fluid model of two shared resources, SMs and DRAM bandwidth:

- **SMs.** A running kernel wants ``kernel.sms`` SMs. Each wants a *target*: kernels are grouped
  by hardware priority (their application's priority when the policy uses prioritised streams,
  one group otherwise); groups are served most important first, and inside a group SMs are split
  in proportion to what each kernel wants when they do not all fit. A kernel *holds* SMs: it
  takes free SMs up to its target at once, but SMs it holds above its target are handed over
  only after one of its waves (``interference.wave_time_s``), because running blocks are never
  pre-empted. A kernel on a fraction of its SMs progresses at that fraction of its speed.
- **Bandwidth.** A kernel on all its SMs asks for the bandwidth share it uses alone
  (``bytes / time_s`` over the GPU's bandwidth), scaled by its SM fraction. When the demands add
  up to more than the GPU has, bandwidth is split max-min fairly (small demands are met, the rest
  is divided equally) and a kernel's speed is capped at what its bandwidth allows.

A kernel's speed is ``min(SM fraction, bandwidth granted / bandwidth asked alone)``, so alone on
the GPU every kernel takes exactly ``time_s``. Speeds change only when the running set or SM
holdings change: one event per kernel start and finish (and per SM hand-over), never a time step.

Applications issue requests; a request is the application's kernel sequence run in order on its
stream. Open-loop applications get Poisson arrivals (seeded per application name, so an
application alone and shared sees the same arrivals) and queue requests FIFO; closed-loop ones
start the next request when the last one ends. Requests start until ``duration_s``; started
requests then finish (up to ``drain_factor * duration_s``), so tail latencies are not cut off.
Throughput counts the kernel work (alone-seconds) done inside ``[0, duration_s]``.

The policy is asked (``SharingPolicy.decide``) once per instant at which a request arrived, a
kernel finished or the policy's last requested wake-up time came; each answer's ``wake_at_s``
replaces the previous one.
"""

from __future__ import annotations

import functools
import math
import time
import zlib
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from qosched.core.errors import InputError, SimulationError
from qosched.core.goals import Goal, default_goal
from qosched.core.trace import Span
from qosched.gpushare.interference import bandwidth_share, max_min_fair, wave_time_s
from qosched.gpushare.kernel import Kernel
from qosched.gpushare.policy import (
    AppInfo,
    GpuView,
    KernelDecision,
    Launch,
    Running,
    SharingPolicy,
    check_policy,
)
from qosched.hardware import Processor
from qosched.sim.engine import Engine

_EPS = 1e-12

#: The kernel launches one run may make, counted before it starts (`expected_launches`). A launch
#: costs the simulator tens of microseconds, so this is minutes of CPU; a mix that would make
#: more is refused rather than left running for hours (or filling memory with its arrivals).
MAX_LAUNCHES = 2_000_000
#: Engine steps between two calls of a run's progress callback.
PROGRESS_STEPS = 8192


@dataclass(frozen=True)
class AppWorkload:
    """One application: a priority, the kernels of one request, and how requests arrive
    (``poisson_rps`` for open loop, ``None`` for closed loop: back-to-back requests)."""

    name: str
    priority: int
    kernels: tuple[Kernel, ...]
    poisson_rps: float | None = None
    goal: Goal | None = None  # None: the default for its priority in the mix (goals.default_goal)

    def __post_init__(self) -> None:
        where = f"app {self.name!r}"
        if not self.name:
            raise InputError("an app needs a non-empty name")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise InputError(f"{where}: priority must be a whole number >= 0")
        if self.priority < 0:
            raise InputError(f"{where}: priority must be >= 0, got {self.priority}")
        if not self.kernels:
            raise InputError(f"{where}: a request needs at least one kernel")
        if self.poisson_rps is not None and not (
            math.isfinite(self.poisson_rps) and self.poisson_rps > 0
        ):
            raise InputError(f"{where}: poisson_rps must be > 0, got {self.poisson_rps!r}")

    @property
    def request_time_s(self) -> float:
        """One request's duration alone on the GPU (its kernels back to back)."""
        return sum(k.time_s for k in self.kernels)


@dataclass(frozen=True)
class SimulatedApp:
    """What one application got in a simulated run: request latencies (arrival to last kernel's
    end; a request left unfinished at the hard stop counts with the latency it had reached),
    requests done, requests unfinished, and kernel work (alone-seconds) done inside the window."""

    name: str
    priority: int
    latencies_s: tuple[float, ...]
    completed: int
    unfinished: int
    work_s: float

    def latency_quantile(self, q: float) -> float:
        if not self.latencies_s:
            return math.nan
        return float(np.quantile(np.asarray(self.latencies_s), q))

    def latency_quantile_is_bound(self, q: float) -> bool:
        """Whether `latency_quantile` is only a lower bound: with the unfinished requests taken
        as the longest (their latency is at least what they had reached, and unbounded above),
        the quantile's interpolation reaches one of them."""
        n, unfinished = len(self.latencies_s), self.unfinished
        return unfinished > 0 and math.ceil(q * (n - 1)) >= n - unfinished


@dataclass(frozen=True)
class Share:
    """One running kernel's resources over a segment: SMs held, bandwidth share (of the GPU's)
    and speed (1.0 = as fast as alone: the kernel does ``rate * dt`` alone-seconds of work)."""

    app: str
    request: int
    index: int
    sms: float
    bandwidth: float
    rate: float


@dataclass(frozen=True)
class Segment:
    """An interval over which nothing changed (recorded only with ``record=True``)."""

    start_s: float
    end_s: float
    shares: tuple[Share, ...]


@dataclass(frozen=True)
class SimulatedRun:
    """A simulated run: per-app results, SM and bandwidth utilisation over ``[0, duration_s]``, the
    simulator's own wall-clock time, and (with ``record=True``) kernel spans and segments."""

    policy: str
    gpu: str
    duration_s: float
    end_s: float
    apps: tuple[SimulatedApp, ...]
    gpu_utilization: float
    bandwidth_utilization: float
    wall_s: float
    spans: tuple[Span, ...] = ()
    segments: tuple[Segment, ...] = ()

    def app(self, name: str) -> SimulatedApp:
        for app in self.apps:
            if app.name == name:
                return app
        raise KeyError(name)


@dataclass(eq=False)
class _RunningKernel:
    """A kernel on the GPU: the launch the policy saw, the kernel that runs, the SMs it holds."""

    launch: Launch  # what the policy was shown
    kernel: Kernel  # what runs: the launch's kernel, or the truth behind its estimate
    started_s: float
    level: int
    sequence: int
    want: float  # SMs
    demand: float  # bandwidth share alone
    wave_s: float
    remaining: float = 1.0
    held: float = 0.0
    bandwidth: float = 0.0
    rate: float = 0.0
    release: object | None = None  # pending hand-over event
    release_due: bool = False


@dataclass(eq=False)
class _AppState:
    """One application as the simulator runs it: requests waiting, the one in progress."""

    spec: AppWorkload  # what runs
    told: AppWorkload  # what the policy is told of it: ``spec``, or its estimate
    queue: deque = field(default_factory=deque)  # arrival times of requests not started
    request: int = -1
    index: int = 0
    arrived_s: float = 0.0
    active: bool = False  # a request is in progress
    waiting: Launch | None = None
    latencies: list = field(default_factory=list)
    work_s: float = 0.0
    window_work_s: float | None = None
    censored: int = 0


def _told(apps: Sequence[AppWorkload], told: Sequence[AppWorkload] | None) -> Sequence[AppWorkload]:
    """What the policy is told of ``apps``: ``told``, checked to be the same apps."""
    if told is None:
        return apps
    if len(told) != len(apps):
        raise InputError(f"told of {len(told)} apps, {len(apps)} run")
    for app, shown in zip(apps, told, strict=True):
        if (shown.name, shown.priority, shown.poisson_rps, shown.goal) != (
            app.name,
            app.priority,
            app.poisson_rps,
            app.goal,
        ) or len(shown.kernels) != len(app.kernels):
            raise InputError(
                f"app {app.name!r}: what the policy is told must differ from what runs in its "
                "kernels' estimates only (name, priority, rate, goal and kernel count the same)"
            )
    return told


def app_infos(
    apps: Sequence[AppWorkload], gpu: Processor | None = None, horizon_s: float | None = None
) -> tuple[AppInfo, ...]:
    """What a policy's ``setup`` is told: each app's priority, goal (the default for its
    priority in this mix when it states none), arrival rate, request's kernels (on ``gpu``,
    when given) and the run's ``horizon_s``. Never the run's seed: a policy cannot know when
    requests will arrive."""
    top = max(a.priority for a in apps)
    return tuple(
        AppInfo(
            a.name,
            a.priority,
            a.goal or default_goal(a.priority, top),
            a.poisson_rps,
            kernels=a.kernels if gpu is not None else None,
            gpu=gpu,
            horizon_s=horizon_s,
        )
        for a in apps
    )


def sm_targets(wants: Sequence[float], levels: Sequence[int], sm_count: int) -> list[float]:
    """SMs each kernel should hold: most important level first; inside a level, in proportion
    to what each wants when they do not all fit."""
    targets = [0.0] * len(wants)
    left = float(sm_count)
    for level in sorted(set(levels), reverse=True):
        members = [i for i, lv in enumerate(levels) if lv == level]
        total = sum(wants[i] for i in members)
        scale = 1.0 if total <= left else left / total
        for i in members:
            targets[i] = wants[i] * scale
        left -= min(total, left)
    return targets


class _Simulation:
    def __init__(
        self,
        gpu: Processor,
        apps: Sequence[AppWorkload],
        policy: SharingPolicy,
        *,
        duration_s: float,
        seed: int,
        record: bool,
        drain_factor: float,
        progress: Callable[[float], None] | None = None,
        told: Sequence[AppWorkload] | None = None,
    ) -> None:
        if gpu.kind != "gpu" or not gpu.sm_count:
            raise InputError(f"{gpu.name!r} is not a GPU")
        if not (math.isfinite(duration_s) and duration_s > 0):
            raise InputError(f"duration_s must be > 0, got {duration_s!r}")
        if not drain_factor >= 1:
            raise InputError(f"drain_factor must be >= 1, got {drain_factor!r}")
        names = [a.name for a in apps]
        if not apps or len(set(names)) != len(names):
            raise InputError(f"apps must be a non-empty list with unique names, got {names}")
        launches = expected_launches(apps, duration_s)
        if sum(launches.values()) > MAX_LAUNCHES:
            each = ", ".join(f"{name!r} {count:,.0f}" for name, count in launches.items())
            raise InputError(
                f"the mix would launch about {sum(launches.values()):,.0f} kernels in "
                f"duration_s = {duration_s:g} s of simulated time ({each}), more than the "
                f"{MAX_LAUNCHES:,} one run simulates; shorten duration_s or lower poisson_rps",
                field="duration_s",
            )
        self.gpu = gpu
        self.sm_count = gpu.sm_count
        self.policy = check_policy(policy)
        self.duration_s = duration_s
        self.stop_s = duration_s * drain_factor
        self.seed = seed
        self.record = record
        self.progress = progress
        self.stream_priorities = True  # the policy's, read once it is set up
        self.engine = Engine()
        self.apps = [
            _AppState(spec, shown) for spec, shown in zip(apps, _told(apps, told), strict=True)
        ]
        self.running: list[_RunningKernel] = []
        self.sequence = 0
        self.last_s = 0.0
        self.sm_busy = 0.0
        self.bw_busy = 0.0
        self.window: tuple[float, float] | None = None
        self.completion = None
        self.decision = None
        self.wake = None
        self.spans: list[Span] = []
        self.segments: list[Segment] = []
        self.stopped = False

    # -- setup -------------------------------------------------------------------------------

    def _arrivals(self, app: AppWorkload) -> np.ndarray:
        # One stream per app name: the same app sees the same arrivals alone and shared.
        rng = np.random.default_rng([self.seed, zlib.crc32(app.name.encode())])
        mean = 1.0 / app.poisson_rps
        times, t = [], 0.0
        while True:
            t += rng.exponential(mean)
            if t >= self.duration_s:
                return np.asarray(times)
            times.append(t)

    def run(self) -> SimulatedRun:
        started = time.perf_counter()
        self.policy.setup(app_infos([a.told for a in self.apps], self.gpu, self.duration_s))
        # After setup: a policy may choose its streams from what it was told of the apps.
        self.stream_priorities = self.policy.stream_priorities
        engine = self.engine
        for app in self.apps:
            if app.spec.poisson_rps is None:
                engine.schedule(lambda a=app: self._arrive(a), at=0.0, label="closed loop")
            else:
                for t in self._arrivals(app.spec):
                    engine.schedule(lambda a=app: self._arrive(a), at=float(t), label="arrival")
        engine.schedule(self._close_window, at=self.duration_s, priority=2, label="window")
        engine.schedule(self._stop, at=self.stop_s, priority=3, label="stop")
        steps, progress = 0, self.progress
        while not self.stopped and engine.peek() != math.inf:
            engine.step()
            steps += 1
            if progress is not None and steps % PROGRESS_STEPS == 0:
                progress(min(engine.now / self.duration_s, 1.0))
        end = engine.now
        self._advance(end)
        for app in self.apps:
            # Requests cut off by the hard stop count with the latency they had reached (a
            # lower bound), so an overloaded application's tail is not hidden.
            app.censored = len(app.queue) + (1 if app.active else 0)
            if app.active:
                app.latencies.append(end - app.arrived_s)
            app.latencies.extend(end - t for t in app.queue)
        busy_sm, busy_bw = self.window if self.window else (self.sm_busy, self.bw_busy)
        span = self.duration_s
        results = tuple(
            SimulatedApp(
                name=a.spec.name,
                priority=a.spec.priority,
                latencies_s=tuple(a.latencies),
                completed=len(a.latencies) - a.censored,
                unfinished=a.censored,
                work_s=a.window_work_s if a.window_work_s is not None else a.work_s,
            )
            for a in self.apps
        )
        return SimulatedRun(
            policy=getattr(self.policy, "name", type(self.policy).__name__),
            gpu=self.gpu.name,
            duration_s=self.duration_s,
            end_s=end,
            apps=results,
            gpu_utilization=busy_sm / (self.sm_count * span),
            bandwidth_utilization=busy_bw / span,
            wall_s=time.perf_counter() - started,
            spans=tuple(self.spans),
            segments=tuple(self.segments),
        )

    # -- events ------------------------------------------------------------------------------

    def _arrive(self, app: _AppState) -> None:
        self._advance(self.engine.now)
        app.queue.append(self.engine.now)
        if not app.active:
            self._next_request(app)
        self._ask()

    def _next_request(self, app: _AppState) -> None:
        now = self.engine.now
        if app.spec.poisson_rps is None:
            if now >= self.duration_s:
                return  # closed loop: no new request after the window
            if not app.queue:
                app.queue.append(now)
        if not app.queue:
            return
        app.arrived_s = app.queue.popleft()
        app.request += 1
        app.index = 0
        app.active = True
        app.waiting = self._launch(app)

    def _launch(self, app: _AppState) -> Launch:
        return Launch(
            app=app.spec.name,
            priority=app.spec.priority,
            request=app.request,
            index=app.index,
            kernel=app.told.kernels[app.index],
            ready_s=self.engine.now,
            arrived_s=app.arrived_s,
        )

    def _ask(self) -> None:
        if self.decision is None:
            # Once per instant, after every other event at this time (priority 1 > 0).
            self.decision = self.engine.schedule(
                self._decide, delay=0.0, priority=1, label="decide"
            )

    def _decide(self) -> None:
        self.decision = None
        now = self.engine.now
        self._advance(now)
        waiting = sorted(
            (a.waiting for a in self.apps if a.waiting is not None),
            key=lambda w: (-w.priority, w.ready_s, w.app),
        )
        view = GpuView(
            now_s=now,
            gpu=self.gpu,
            running=tuple(Running(r.launch, r.started_s, r.remaining) for r in self.running),
            waiting=tuple(waiting),
            backlog={a.spec.name: len(a.queue) for a in self.apps if a.queue},
        )
        admission = self.policy.decide(view)
        if not isinstance(admission, KernelDecision):
            raise SimulationError(
                f"t={now:.9f}: policy returned {admission!r}, not a KernelDecision"
            )
        by_app = {a.spec.name: a for a in self.apps}
        for launch in admission.start:
            app = by_app.get(launch.app)
            if app is None or app.waiting is None or app.waiting != launch:
                raise SimulationError(
                    f"t={now:.9f}: policy started {launch.kernel.name!r} of {launch.app!r}, "
                    "which is not waiting (started twice or never offered)"
                )
            app.waiting = None
            self._start(launch, app.spec.kernels[launch.index])
        if admission.wake_at_s is not None and not admission.wake_at_s > now:
            raise SimulationError(
                f"t={now:.9f}: policy asked to wake at {admission.wake_at_s}, not later"
            )
        if self.wake is not None and self.wake.pending:
            self.engine.cancel(self.wake)
        self.wake = None
        if admission.wake_at_s is not None:
            self.wake = self.engine.schedule(self._ask, at=admission.wake_at_s, label="wake")
        self._reallocate()

    def _start(self, launch: Launch, kernel: Kernel) -> None:
        level = launch.priority if self.stream_priorities else 0
        self.running.append(
            _RunningKernel(
                launch=launch,
                kernel=kernel,
                started_s=self.engine.now,
                level=level,
                sequence=self.sequence,
                want=float(min(kernel.sms, self.sm_count)),
                demand=bandwidth_share(kernel, self.gpu),
                wave_s=wave_time_s(kernel, self.gpu),
            )
        )
        self.sequence += 1

    def _complete(self) -> None:
        self.completion = None
        now = self.engine.now
        self._advance(now)
        done = [r for r in self.running if r.remaining <= 1e-9]
        if not done:
            # Rounding left a sliver: finish the closest kernel (off by less than a picosecond).
            done = [min(self.running, key=lambda r: r.remaining / r.rate if r.rate else math.inf)]
            done[0].remaining = 0.0
        by_app = {a.spec.name: a for a in self.apps}
        for run in done:
            self.running.remove(run)
            if run.release is not None and run.release.pending:
                self.engine.cancel(run.release)
            launch = run.launch
            app = by_app[launch.app]
            kernel = run.kernel
            app.work_s += kernel.time_s
            if self.record:
                self.spans.append(
                    Span(
                        name=kernel.name,
                        process=f"{self.gpu.name} ({self.policy.name})",
                        track=f"{launch.app} (priority {launch.priority})",
                        start_s=run.started_s,
                        duration_s=now - run.started_s,
                        args={
                            "op": kernel.op,
                            "request": launch.request,
                            "index": launch.index,
                            "alone_s": kernel.time_s,
                            "waited_s": run.started_s - launch.ready_s,
                            "slowdown": (now - run.started_s) / kernel.time_s,
                        },
                    )
                )
            app.index += 1
            if app.index < len(app.spec.kernels):
                app.waiting = self._launch(app)
            else:
                app.latencies.append(now - app.arrived_s)
                app.active = False
                self._next_request(app)
        # Re-allocate before the policy starts anything: a stream's next kernel cannot start
        # until this one has ended, and while its last wave drains, running kernels that wait
        # for SMs (their blocks are queued in the block scheduler) take the SMs that come free.
        self._reallocate()
        self._ask()

    def _release(self, run: _RunningKernel) -> None:
        self._advance(self.engine.now)
        run.release = None
        run.release_due = True
        self._reallocate()

    def _close_window(self) -> None:
        self._advance(self.engine.now)
        self.window = (self.sm_busy, self.bw_busy)
        for app in self.apps:
            app.window_work_s = app.work_s
        for run in self.running:
            app = next(a for a in self.apps if a.spec.name == run.launch.app)
            app.window_work_s += (1.0 - run.remaining) * run.kernel.time_s

    def _stop(self) -> None:
        self.stopped = True

    # -- the fluid model ---------------------------------------------------------------------

    def _advance(self, now: float) -> None:
        dt = now - self.last_s
        if dt < 0:
            raise SimulationError(f"time went backwards: {self.last_s} -> {now}")
        if dt > 0:
            for run in self.running:
                run.remaining -= run.rate * dt / run.kernel.time_s
            self.sm_busy += sum(r.held for r in self.running) * dt
            self.bw_busy += sum(r.bandwidth for r in self.running) * dt
            if self.record and self.running:
                self.segments.append(
                    Segment(
                        self.last_s,
                        now,
                        tuple(
                            Share(
                                r.launch.app,
                                r.launch.request,
                                r.launch.index,
                                r.held,
                                r.bandwidth,
                                r.rate,
                            )
                            for r in self.running
                        ),
                    )
                )
        self.last_s = now

    def _reallocate(self) -> None:
        runs = self.running
        targets = sm_targets([r.want for r in runs], [r.level for r in runs], self.sm_count)
        for run, target in zip(runs, targets, strict=True):
            if run.release_due:
                run.held = min(run.held, target)
                run.release_due = False
            elif target >= run.held - _EPS and run.release is not None:
                self.engine.cancel(run.release)  # nobody needs its SMs any more
                run.release = None
        free = self.sm_count - sum(r.held for r in runs)
        order = sorted(range(len(runs)), key=lambda i: (-runs[i].level, runs[i].sequence))
        for i in order:
            run = runs[i]
            gain = min(targets[i] - run.held, free)
            if gain > _EPS:
                run.held += gain
                free -= gain
        fractions = [r.held / r.want for r in runs]
        grants = max_min_fair([f * r.demand for f, r in zip(fractions, runs, strict=True)], 1.0)
        for run, fraction, grant in zip(runs, fractions, grants, strict=True):
            run.bandwidth = grant
            run.rate = fraction if run.demand <= 0 else min(fraction, grant / run.demand)
        for run, target in zip(runs, targets, strict=True):
            if run.held > target + _EPS and run.release is None:
                # Running blocks are not pre-empted: the SMs come free when the current wave
                # ends (waves are equal slices of the kernel's work alone).
                into_wave = math.fmod((1.0 - run.remaining) * run.kernel.time_s, run.wave_s)
                delay = (run.wave_s - into_wave) / max(run.rate, 1e-9)
                run.release = self.engine.schedule(
                    lambda r=run: self._release(r), delay=delay, label="hand-over"
                )
        if self.completion is not None and self.completion.pending:
            self.engine.cancel(self.completion)
        self.completion = None
        finish = min(
            (r.remaining * r.kernel.time_s / r.rate for r in runs if r.rate > 0),
            default=math.inf,
        )
        if finish < math.inf:
            self.completion = self.engine.schedule(
                self._complete, delay=max(0.0, finish), label="completion"
            )
        elif runs and all(r.release is None for r in runs):
            raise SimulationError(f"t={self.engine.now:.9f}: kernels running, none progressing")


def launch_rate(kernels: Sequence[Kernel], poisson_rps: float | None) -> float:
    """Kernels an app launches per second, at most and on average: an open loop at its offered
    rate, a closed loop back to back as alone (sharing only slows it)."""
    return len(kernels) * (poisson_rps or 1.0 / sum(k.time_s for k in kernels))


def expected_launches(apps: Sequence[AppWorkload], duration_s: float) -> dict[str, float]:
    """The kernels each app launches in a run of ``duration_s`` (`launch_rate`), a closed
    loop's first request included, which always starts."""
    return {
        app.name: launch_rate(app.kernels, app.poisson_rps) * duration_s
        + (len(app.kernels) if app.poisson_rps is None else 0)
        for app in apps
    }


def simulate(
    gpu: Processor,
    apps: Sequence[AppWorkload],
    policy: SharingPolicy,
    *,
    duration_s: float,
    seed: int = 0,
    record: bool = False,
    drain_factor: float = 4.0,
    progress: Callable[[float], None] | None = None,
    told: Sequence[AppWorkload] | None = None,
) -> SimulatedRun:
    """Run ``apps`` on ``gpu`` under ``policy`` for ``duration_s`` of simulated time.

    Called by the CLI and benches once per (mix, policy). Whether the hardware honours stream
    priorities (SMs go to the most important kernels first) is the policy's ``stream_priorities``
    attribute (default True: every policy in qosched runs each priority on its own CUDA stream
    priority; a naive MPS-style policy sets it False). ``record=True`` keeps kernel spans (for
    a trace) and resource segments (for checks). ``progress``, if given, is called now and then
    with the share of ``duration_s`` simulated so far (1.0 while started requests drain).

    ``told``: what the policy is told of each app where that is not what runs, as a backend on a
    real GPU tells it kernel times estimated without running the model: the same apps (names,
    priorities, rates, goals, number of kernels per request) with the estimated kernels. The
    policy sees only those, at setup and in every launch; the kernels of ``apps`` set how long
    each launch takes and how much it contends.
    """
    return _Simulation(
        gpu,
        apps,
        policy,
        duration_s=duration_s,
        seed=seed,
        record=record,
        drain_factor=drain_factor,
        progress=progress,
        told=told,
    ).run()


class RunAlone(SharingPolicy):
    """The reference run of an application by itself (here and on the real GPU, ``live.py``):
    running alone leaves nothing to decide, every ready kernel starts."""

    name = "alone"

    def decide(self, view: GpuView) -> KernelDecision:
        return KernelDecision(start=view.waiting)


@dataclass(frozen=True)
class AppComparison:
    """One application shared against itself alone: an ``apps`` entry of ``gpu sim --json``
    (docs/contracts.md)."""

    name: str
    priority: int
    p50_latency_ratio: float
    p99_latency_ratio: float
    throughput_ratio: float
    p50_latency_s: float
    p99_latency_s: float
    alone_p99_latency_s: float
    completed: int
    unfinished: int
    throughput_rps: float = math.nan  # requests per second (kernel work over request time)
    # The p99 (and its ratio) is a lower bound: requests the run cut off reach into it, so no
    # latency goal can be judged met on it.
    p99_lower_bound: bool = False

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "priority": self.priority,
            "p50_latency_ratio": self.p50_latency_ratio,
            "p99_latency_ratio": self.p99_latency_ratio,
            "throughput_ratio": self.throughput_ratio,
            "p50_latency_s": self.p50_latency_s,
            "p99_latency_s": self.p99_latency_s,
            "alone_p99_latency_s": self.alone_p99_latency_s,
            "completed": self.completed,
            "unfinished": self.unfinished,
            "throughput_rps": self.throughput_rps,
            "p99_lower_bound": self.p99_lower_bound,
        }


def alone_results(
    gpu: Processor,
    apps: Sequence[AppWorkload],
    *,
    duration_s: float,
    seed: int = 0,
    progress: Callable[[str, float], None] | None = None,
) -> dict[str, SimulatedApp]:
    """Each application alone on the GPU, with the same arrivals as when shared; ``progress``
    as `simulate`'s, with the app's name first."""
    return {
        app.name: simulate(
            gpu,
            [app],
            RunAlone(),
            duration_s=duration_s,
            seed=seed,
            progress=None if progress is None else functools.partial(progress, app.name),
        ).apps[0]
        for app in apps
    }


def compare(
    shared: SimulatedRun,
    alone: dict[str, SimulatedApp],
    request_times: Mapping[str, float] | None = None,
) -> tuple[AppComparison, ...]:
    """Ratios of every application shared over the same application alone; with each app's
    request time alone (``AppWorkload.request_time_s``), its throughput in requests/s too."""
    rows = []
    for app in shared.apps:
        per_request = (request_times or {}).get(app.name)
        base = alone[app.name]
        rows.append(
            AppComparison(
                name=app.name,
                priority=app.priority,
                p50_latency_ratio=_ratio(app.latency_quantile(0.5), base.latency_quantile(0.5)),
                p99_latency_ratio=_ratio(app.latency_quantile(0.99), base.latency_quantile(0.99)),
                throughput_ratio=_ratio(app.work_s, base.work_s),
                p50_latency_s=app.latency_quantile(0.5),
                p99_latency_s=app.latency_quantile(0.99),
                alone_p99_latency_s=base.latency_quantile(0.99),
                completed=app.completed,
                unfinished=app.unfinished,
                throughput_rps=(
                    app.work_s / per_request / shared.duration_s if per_request else math.nan
                ),
                p99_lower_bound=app.latency_quantile_is_bound(0.99),
            )
        )
    return tuple(rows)


def _ratio(value: float, base: float) -> float:
    if math.isnan(value) or math.isnan(base) or base <= 0:
        return math.nan
    return value / base


def pair_slowdown(gpu: Processor, protected: Sequence[Kernel], candidate: Kernel) -> float:
    """The ground truth the interference score predicts: the extra time ``protected`` (a
    higher-priority kernel sequence, on a prioritised stream) takes when ``candidate`` starts
    beside its first kernel, in units of that first kernel's time alone."""
    apps = [
        AppWorkload("protected", 1, tuple(protected)),
        AppWorkload("candidate", 0, (candidate,)),
    ]
    result = simulate(gpu, apps, RunAlone(), duration_s=1e-12, drain_factor=1e15)
    latency = result.app("protected").latencies_s[0]
    return (latency - sum(k.time_s for k in protected)) / protected[0].time_s
