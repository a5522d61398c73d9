"""qosched's kernel-level admission by goals (after FgGR, CSCWD 2025).

Every application has a goal (``core.goals``: a p99 latency, a throughput, or best effort)
and a priority, the order in which goals are protected (within one priority, a latency goal
before a throughput goal before best effort). A kernel starts at once when no app more
important than its own is *protected* (has a goal, or is open loop: an open-loop best-effort app
is protected, under the goals above it, as if it asked for its offered load). Otherwise it
starts when every more important protected app ``P`` stays within its goal, as predicted:

- **Delay.** What this kernel and the less important kernels in flight would cost ``P``. SMs:
  ``P``'s kernels need as many SMs as the largest of its request; when those are not free,
  ``P`` runs on the SMs that are, and loses the rest of the less important kernels' waves
  (blocks are never pre-empted), once per kernel boundary of ``P`` they live through, at most
  their life. Bandwidth: each of ``P``'s kernels slowed by max-min fair sharing of DRAM while
  they overlap. Both terms in full (:data:`TAIL`): the requests that set a p99 are those that
  pay all of them, not the mean the interference model was fitted to.
- **Lag.** The policy keeps ``P``'s schedule alone (its requests back to back from their
  arrivals, at its kernels' times alone; a request seen to end sooner than that schedule says,
  as it does where the estimates are too long, pulls it back to its end, since alone it would
  have ended no later). ``P``'s lag behind it, when the request in progress
  ends, is what it lags now plus the delay: requests queued behind inherit it, so the lag is
  what a goal bounds; where the less important kernels outlive the request in progress, the
  requests queued behind it (or a closed loop's next one) pay their delay too. A p99 goal
  allows ``target - p99 alone`` (``target``: the goal's latency, or ``p99_slowdown`` x the p99
  alone, from the schedule alone, or from an M/D/1 approximation while fewer than 100
  requests are known); a throughput goal allows each request to take ``1 / share`` of its
  time alone (closed loop), or as long as the app stays at most half busy at the rate it asks
  (open loop).
- **Exposure.** A lag up to ``safe_fraction`` of the allowance is taken freely; beyond it (up
  to the allowance, or while ``P`` is idle up to what a request arriving now could absorb) a
  p99 goal takes it only for a few requests: the requests exposed (arrivals expected while the
  kernel runs, or the request in progress) stay within ``exposure`` of ``P``'s requests, and
  a less important app gets what the apps between have left.
- **Feedback.** ``P``'s requests that end later than the target halve the allowance; each one
  on time gives back ``trust_step`` of it.
- **Measured room and need.** A best-effort app of ``P``'s own priority runs beside it while
  ``P``'s last requests all ended within 90 % of its target (as Orion runs a whole level); a
  best-effort open loop is protected only from the priorities below it, and only from apps
  without a goal of their own (a load nobody asked to be kept does not outrank a stated goal).
  A kernel predicted to cost an app nothing (a delay of 0 on a request whose kernels are all
  known) never waits for it, however far behind it already is; nor, for an app whose own
  kernel is held in the same decision for the apps above it, does a kernel shorter than half
  of its allowance (it costs the app at most its own life). A kernel of an app
  that is missing its own goal, as measured (a throughput short of it, or more than 1 % of its
  requests late), takes the whole allowance, without the hedges (the free half, exposure).
- **Measured times.** Every time above is the kernel's estimate until the kernel has once run
  with the GPU to itself (``gpushare.alone``): from then on its measured time alone, where the
  two differ by more than 1 %, for the apps protected and for the less important kernels whose
  delay is predicted alike. The estimates set each app's schedule alone and so its
  allowance, and an estimate too long would let the apps below take more than the goal allows.
- **Wait bound.** A kernel that has waited ``max_wait_s`` starts anyway, unless a more
  important p99 goal would then have more than half of its 1 % of requests (seen, or for an
  open loop sent by now at its rate) put at risk (the request in progress, or the arrivals
  expected during the kernel): priority orders goals,
  and the wait bound is the last of them.

**The steps, in order.** For each more important protected app, ``FgGR._fits`` asks the rules
above as named steps, the first with an answer deciding: ``_nothing_known`` (its first kernel
will tell), ``_throughput_ahead``, ``_room_at_its_level`` (measured room); then, on the lag
``_predict_lag`` predicts (delay and lag; none when the kernel costs the app nothing),
``_held_for_those_above``, ``_within_free_part``, ``_candidate_behind`` (measured need),
``_throughput_goal``, ``_more_important_first``, ``_within_allowance`` and
``_within_exposure``, which always answers and alone writes the exposure ledger
(``_spend_exposure``). The wait bound (``FgGR._may_force``) is asked only when they hold a
kernel that has waited ``max_wait_s``.

**Calibration** (the default; ``calibrate=False`` runs the rule above alone). Where the
backend tells the policy each app's request as estimated kernels (``AppInfo.kernels``),
``setup`` first predicts the mix under a few settings of this rule
(:data:`CANDIDATES`, from strict to free), and the other built-in policies (:data:`REFERENCES`),
in a short what-if simulation (``gpushare.whatif``: arrivals of its own, never the run's, and
kernel times perturbed). Every one of them is a candidate: among those that break the rules of
``judge.rule_violations`` against the other policies on the fewest draws (a goal some policy
meets missed first, then any rule: the other apps held to the best policy meeting the goals),
it adopts the one that meets the goals in priority order with a margin and then gives the
other apps the most throughput (where none meets the most important goals, the one that comes
nearest; ties go to this rule's settings). The rule above then runs with that setting, its
feedback still correcting a wrong prediction; where a reference policy was adopted (a mix on
which its mechanism keeps the rules better than any setting here), that policy decides, and
``violations()`` still counts the late requests. Without kernels the constructor's setting
stays.

``violations()`` reports, per app with a latency goal, the requests the policy saw end late.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from qosched.core.errors import InputError
from qosched.core.goals import BEST_EFFORT, LATENCY_QUANTILE, Goal, default_goal
from qosched.gpushare.alone import AloneTimes
from qosched.gpushare.interference import (
    FairShare,
    InterferenceModel,
    bandwidth_share,
    wave_time_s,
)
from qosched.gpushare.kernel import Kernel
from qosched.gpushare.policies.base import create_policy, register
from qosched.gpushare.policy import (
    AppInfo,
    GpuView,
    KernelDecision,
    Launch,
    SharingPolicy,
)
from qosched.gpushare.whatif import (
    WhatIf,
    WhatIfResult,
    adopted_against,
    knows_kernels,
    predict,
)
from qosched.hardware import Processor

#: The weights of the delay's two terms. The fitted ones (``interference.CALIBRATED``:
#: bandwidth 0.505, drain 0.912) predict the mean slowdown over random overlaps; the requests
#: that set a p99 are those that overlap a less important kernel for its whole life and wait
#: for the whole rest of its wave, which pay both terms in full.
TAIL = InterferenceModel(bandwidth=1.0, same_bound=0.0, sm_overflow=0.0, drain=1.0)
#: An open-loop app protected for its offered load may be stretched while it stays this busy.
_OPEN_LOOP_BUSY = 0.5
#: An app with a throughput goal is left to itself while it does this much more than asked
#: (after this many requests).
_AHEAD = 1.1
_TRUSTED_DONE = 10
#: The share of a p99 target a goal's last requests stay under for it to have room.
_ROOM = 0.1
#: Time over which the spent exposure and risk fade by e.
_FADE_S = 1.0
#: The share of its allowance a kernel may take from an app whose own kernel is held for the
#: apps above it (whatever setting is adopted: the free half of the constructor's default).
_HELD_FREE = 0.5
#: Requests of an app after which the p99 of its latencies alone is taken as measured.
_TRUSTED_SAMPLES = 100
#: A kernel's measured time alone replaces the one it was told where they differ by more than
#: this share (and again where the measurement moves by more): float noise changes nothing.
_REMEASURED = 0.01
#: What a kernel of a less important app waits for: ``idle``, every app of a higher priority
#: with a goal to have no kernel running or waiting (as Orion, strictest); ``goals``, the rule
#: of this module; ``all``, nothing (every kernel at once, as ``priority-streams``, or as
#: ``naive`` on equal streams).
ADMIT = ("idle", "goals", "all")
#: The settings calibration chooses from, safest first (ties go to the earlier one); each
#: changes the constructor's own setting (``goals``) by what it lists.
CANDIDATES: tuple[tuple[str, Mapping[str, Any]], ...] = (
    ("strict", {"admit": "idle"}),
    ("cautious", {"slack_fraction": 0.5, "exposure": 0.0}),
    ("goals", {}),
    ("loose", {"safe_fraction": 1.0, "exposure": 0.2}),
    ("free", {"admit": "all"}),
    ("free-equal", {"admit": "all", "stream_priorities": False}),
)

#: The built-in policies calibration judges each candidate against, as the rules of
#: ``judge.rule_violations`` judge ``fggr`` (plug-ins are not simulated: one that fails or is
#: slow must not cost a run its setup). Each is a candidate too, after this module's own
#: settings (ties go to those): where the what-if shows one of them keeping the rules on the
#: mix better than every setting of the rule here, ``fggr`` runs its mechanism.
REFERENCES = ("exclusive", "time-slicing", "naive", "priority-streams", "orion")
#: The candidates of :data:`CANDIDATES` that admit every kernel (nothing held back).
FREE = tuple(i for i, (_, changes) in enumerate(CANDIDATES) if changes.get("admit") == "all")


def calibrated_choice(
    own: Sequence[WhatIfResult],
    theirs: Mapping[str, WhatIfResult],
    config: WhatIf,
    *,
    margin: float | None = None,
) -> str:
    """The candidate calibration adopts, by name: one of :data:`CANDIDATES` (``own``: their
    what-ifs, in that order) or one of the reference policies (``theirs``: their what-ifs on
    the same draws, by name), chosen as ``whatif.adopted_against`` chooses, every candidate
    held to the references."""
    names = [name for name, _ in CANDIDATES] + list(theirs)
    everything = [*own, *theirs.values()]
    return names[adopted_against(everything, theirs, "fggr", config, free=FREE, margin=margin)]


def _poisson_p99_s(rps: float | None, service_s: float) -> float:
    """The p99 latency alone of an app with Poisson arrivals and a fixed request time (an
    M/D/1 queue), approximated: at low load an arrival finds a request in progress with
    probability rho and waits a uniform part of it; at high load the wait's tail is
    exponential (the heavy-traffic approximation). Closed loop: the request time."""
    if rps is None or service_s <= 0:
        return service_s
    rho = min(rps * service_s, 0.99)
    low = service_s * max(0.0, 1.0 - (1 - LATENCY_QUANTILE) / rho)
    high = rho * service_s / (2 * (1 - rho)) * max(0.0, math.log(rho / (1 - LATENCY_QUANTILE)))
    return service_s + max(low, high)


@dataclass(eq=False)
class _App:
    """What the policy knows of one application, learned from its launches."""

    name: str
    priority: int
    goal: Goal
    rps: float | None
    kernels: dict[int, Kernel] = field(default_factory=dict)  # by index in the request
    length: int = 0  # kernels per request, once a request has ended
    request: int = -1
    arrived_s: float = 0.0
    alone_finish_s: float = 0.0  # when the request in progress would end alone
    alone_latency_s: float = 0.0  # its latency alone
    alone_latencies: list = field(default_factory=list)  # sorted
    index: int = 0  # of the kernel offered or running
    busy: bool = False  # a request in progress
    last_end_s: float = 0.0
    requests: int = 0
    late: int = 0
    exposure: dict = field(default_factory=dict)  # requests exposed to delay, per lower app
    exposed: int = -1  # the last request counted as exposed
    risk: float = 0.0  # requests put at risk by kernels started after waiting max_wait_s
    risked: int = -1  # the last request counted in risk
    first_s: float | None = None
    trust: float = 1.0  # of the slack admissions may spend: halved per late request
    recent: list = field(default_factory=list)  # latencies of the last requests that ended
    # By index: (kernel as told, time alone measured, the kernel with that time)
    corrections: dict = field(default_factory=dict)

    # What follows from ``kernels`` and ``length`` alone, kept until either changes: the
    # admission rule asks for it on every decision, for every protected app.
    memo: dict = field(default_factory=dict, repr=False)

    def learn(self, index: int, kernel: Kernel, alone_s: float | None = None) -> None:
        """The app's kernel ``index`` is ``kernel``; with ``alone_s``, it was measured to take
        that long alone, which overrides its estimated time."""
        if alone_s is not None and abs(alone_s - kernel.time_s) > _REMEASURED * kernel.time_s:
            told, measured, corrected = self.corrections.get(index, (None, None, None))
            if told is not kernel or abs(alone_s - measured) > _REMEASURED * measured:
                factor = alone_s / kernel.time_s
                corrected = dataclasses.replace(
                    kernel, time_s=alone_s, bytes=kernel.bytes * factor
                )  # the same bandwidth share: bytes and time off alike
                self.corrections[index] = (kernel, alone_s, corrected)
            kernel = corrected
        if self.kernels.get(index) is not kernel:
            self.kernels[index] = kernel
            self.memo.clear()

    def learn_length(self, length: int) -> None:
        """A request of the app has ended with ``length`` kernels."""
        if length != self.length:
            self.length = length
            self.memo.clear()

    def knows_request(self) -> bool:
        """Whether every kernel of a request is known (a request has ended)."""
        if "known" not in self.memo:
            self.memo["known"] = bool(self.length) and all(
                i in self.kernels for i in range(self.length)
            )
        return self.memo["known"]

    @property
    def request_time_s(self) -> float:
        if "request" not in self.memo:
            count = self.length or len(self.kernels)
            self.memo["request"] = sum(k.time_s for i, k in self.kernels.items() if i < count)
        return self.memo["request"]

    def left_s(self, index: int, remaining: float) -> float:
        """Kernel time left in the request from kernel ``index`` (``remaining`` of it)."""
        key = ("rest", index)
        if key not in self.memo:
            count = max(self.length, index + 1)
            self.memo[key] = sum(
                self.kernels[i].time_s for i in range(index + 1, count) if i in self.kernels
            )
        here = self.kernels.get(index)
        return (here.time_s * remaining if here else 0.0) + self.memo[key]

    def upcoming(self, index: int, gpu: Processor) -> _Kernels:
        """The known kernels of the request from ``index`` on."""
        key = ("upcoming", index, gpu.memory_bandwidth, gpu.sm_count)
        if key not in self.memo:
            count = max(self.length, index + 1)
            kernels = [self.kernels[i] for i in range(index, count) if i in self.kernels]
            self.memo[key] = _Kernels.of(kernels, gpu)
        return self.memo[key]

    def whole(self, gpu: Processor) -> _Kernels:
        """Every kernel of a request (all of them known)."""
        key = ("whole", gpu.memory_bandwidth, gpu.sm_count)
        if key not in self.memo:
            self.memo[key] = _Kernels.of([self.kernels[i] for i in range(self.length)], gpu)
        return self.memo[key]


@dataclass(frozen=True)
class _Kernels:
    """Kernels as the delay model reads them: (share of the GPU's bandwidth, SMs, time alone)
    each, and the most SMs one takes. ``pairs`` are the distinct (share, SMs) of ``each``, in
    first-seen order, and ``kinds`` the position of each kernel's pair in them: what the
    bandwidth term grants a kernel depends on those two alone, so it is worked out once per
    pair (a model's request repeats a few kernel shapes hundreds of times)."""

    each: tuple[tuple[float, int, float], ...]
    need: int
    pairs: tuple[tuple[float, int], ...] = ()
    kinds: tuple[int, ...] = ()
    times: tuple[float, ...] = ()

    @classmethod
    def of(cls, kernels: Sequence[Kernel], gpu: Processor) -> _Kernels:
        sm_count = gpu.sm_count or 1
        each = tuple((bandwidth_share(k, gpu), min(k.sms, sm_count), k.time_s) for k in kernels)
        position: dict[tuple[float, int], int] = {}
        kinds = tuple(position.setdefault((mine, sms), len(position)) for mine, sms, _ in each)
        need = max((sms for _, sms, _ in each), default=0)
        times = tuple(t for _, _, t in each)
        return cls(each, need, tuple(position), kinds, times)


_NO_KERNELS = _Kernels((), 0)


@register("fggr")
class FgGR(SharingPolicy):
    """KernelDecision by goals: a kernel starts when every more important goal keeps its lag."""

    def __init__(
        self,
        slack_fraction: float = 1.0,
        exposure: float = 0.05,
        safe_fraction: float = 0.5,
        max_wait_s: float = 0.02,
        trust_step: float = 0.02,
        model: InterferenceModel = TAIL,
        *,
        admit: str = "goals",
        stream_priorities: bool = True,
        calibrate: bool = True,
        what_if: WhatIf | None = None,
    ) -> None:
        for name, value in (
            ("slack_fraction", slack_fraction),
            ("exposure", exposure),
            ("safe_fraction", safe_fraction),
            ("trust_step", trust_step),
        ):
            if not (math.isfinite(value) and 0 <= value <= 1):
                raise InputError(f"must be in [0, 1], got {value!r}", field=name)
        if not (math.isfinite(max_wait_s) and max_wait_s > 0):
            raise InputError(f"must be > 0, got {max_wait_s!r}", field="max_wait_s")
        if admit not in ADMIT:
            raise InputError(f"must be one of {', '.join(ADMIT)}, got {admit!r}", field="admit")
        #: The constructor's setting: calibration starts from it on every setup.
        self.options: dict[str, Any] = {
            "slack_fraction": slack_fraction, "exposure": exposure,
            "safe_fraction": safe_fraction, "max_wait_s": max_wait_s, "trust_step": trust_step,
            "admit": admit, "stream_priorities": stream_priorities,
        }  # fmt: skip
        self.admit = admit
        self.stream_priorities = stream_priorities
        self.calibrate = calibrate
        self.what_if = what_if or WhatIf()
        #: Told ``(done, total)`` after each what-if run of the setup, to show its progress.
        self.progress: Callable[[int, int], None] | None = None
        self.model = model
        #: The candidate calibration adopted on the last setup (None: not calibrated), and
        #: what that setup cost (seconds of wall-clock time).
        self.calibrated: str | None = None
        self.setup_s = 0.0
        #: The reference policy calibration adopted, deciding in this policy's place (None:
        #: the rule of this module decides).
        self.delegate: SharingPolicy | None = None
        self.slack_fraction = slack_fraction
        self.exposure = exposure
        self.safe_fraction = safe_fraction
        self.max_wait_s = max_wait_s
        self.trust_step = trust_step
        self.apps: dict[str, _App] = {}
        self.alone = AloneTimes()
        self.forced = 0  # kernels started because they had waited max_wait_s
        self.last_s = 0.0

    def setup(self, apps: Sequence[AppInfo]) -> None:
        """A run begins: every app, its goal and its arrival rate (else learned from launches,
        goals by default); with `calibrate` and their kernels, the setting is calibrated first."""
        began = time.perf_counter()
        self._apply(self.options)
        self.calibrated = None
        self.delegate = None
        if self.calibrate and knows_kernels(apps):
            self._calibrate(tuple(apps))
        self.setup_s = time.perf_counter() - began
        self.apps = {a.name: _App(a.name, a.priority, a.goal, a.poisson_rps) for a in apps}
        self.alone = AloneTimes()
        self.forced = 0
        self.last_s = 0.0

    def _apply(self, options: Mapping[str, Any]) -> None:
        for name, value in options.items():
            setattr(self, name, value)

    def _calibrate(self, apps: tuple[AppInfo, ...]) -> None:
        """Adopt the candidate the what-if predicts best. Every candidate and every built-in
        policy it is held to (`REFERENCES`) is simulated on the same draws. Among the
        candidates that break the rules against those policies on the fewest draws
        (`whatif.fewest_breaks`: the rules hold each app to the best of them), a free setting
        where one meets every goal with the margin (nothing needs holding back); then the one
        meeting the most important goals with the margin and giving the other apps the most
        throughput; none meeting them with the margin, the best without it; none at all, the
        one nearest to them (priority orders goals: the most important app is still served
        first); nothing to come near (no goal, or no request of one finished), the safest
        (`whatif.adopted_against`)."""
        # Partials of module-level callables, not lambdas: the what-if may send them to
        # other processes.
        candidates = [
            partial(FgGR, model=self.model, calibrate=False, **{**self.options, **changes})
            for _, changes in CANDIDATES
        ]
        references = [partial(create_policy, name) for name in REFERENCES]
        everything = [*candidates, *references]
        predictions = predict(apps, everything, self.what_if, progress=self.progress)
        theirs = dict(zip(REFERENCES, predictions[len(CANDIDATES) :], strict=True))
        name = calibrated_choice(predictions[: len(CANDIDATES)], theirs, self.what_if)
        self.calibrated = name
        settings = dict(CANDIDATES)
        if name in settings:
            self._apply({**self.options, **settings[name]})
            return
        self.delegate = create_policy(name)
        self.delegate.setup(apps)
        self.stream_priorities = self.delegate.stream_priorities

    def violations(self) -> dict[str, int]:
        """Requests of each latency-goal app that ended later than its target."""
        return {a.name: a.late for a in self.apps.values() if a.goal.is_latency}

    # -- learning --------------------------------------------------------------------------

    def _observe(self, view: GpuView) -> None:
        now = view.now_s
        self.alone.observe(view)
        # What was spent of the allowances fades (e-fold per ``_FADE_S``): an app that stops
        # sending requests does not hold the less important ones back for ever.
        fade = math.exp(-(now - self.last_s) / _FADE_S) if now > self.last_s else 1.0
        self.last_s = max(self.last_s, now)
        for app in self.apps.values():
            app.risk *= fade
            for name in app.exposure:
                app.exposure[name] *= fade
        for launch in view.waiting:
            app = self.apps.get(launch.app)
            if app is None:  # no setup: learn the app, goals by default
                app = self.apps[launch.app] = _App(launch.app, launch.priority, BEST_EFFORT, None)
                top = max(a.priority for a in self.apps.values())
                for other in self.apps.values():
                    other.goal = default_goal(other.priority, top)
            app.learn(launch.index, launch.kernel, self.alone.time_s(launch.app, launch.index))
            if launch.request != app.request:
                self._new_request(app, launch, now)
            app.index = launch.index
            app.busy = True
        seen = {r.launch.app for r in view.running} | {w.app for w in view.waiting}
        for app in self.apps.values():
            if app.busy and app.name not in seen:
                app.busy = False
                app.last_end_s = now

    def _new_request(self, app: _App, launch: Launch, now: float) -> None:
        if app.request >= 0:
            app.learn_length(app.index + 1)
            # A request that starts the instant the last one ended (queued, or closed loop)
            # was never seen idle: the last one ended now.
            end = now if app.busy else app.last_end_s
            # Late: past the target, and past what its own latency alone allows (a request that
            # queued long behind its own app's requests may pass the target alone, too).
            latency, alone = end - app.arrived_s, app.alone_latency_s
            if 0.0 <= latency < alone * (1 - 1e-9):
                # It ended sooner shared than its schedule alone says: the kernels' estimates
                # are too long. Alone it would have ended no later, so the schedule alone is
                # pulled back to what was seen; else it drifts ever later than the app's
                # requests (a closed loop's above all), and the lag it bounds reads 0.
                ranked = app.alone_latencies
                del ranked[bisect.bisect_left(ranked, alone)]
                bisect.insort(ranked, latency)
                app.alone_latency_s = alone = latency
                app.alone_finish_s = end
            bound = max(self._target_s(app), alone * (app.goal.value if app.goal.kind ==
                        "p99_slowdown" else 1.0))  # fmt: skip
            app.recent = [*app.recent[1 - _TRUSTED_SAMPLES :], latency]
            if app.goal.is_latency and latency > bound * (1 + 1e-9):
                app.late += 1
                app.trust *= 0.5
            else:
                app.trust = min(1.0, app.trust + self.trust_step)
        arrived = launch.arrived_s if launch.arrived_s is not None else launch.ready_s
        if app.first_s is None:
            app.first_s = arrived
        app.request = launch.request
        app.arrived_s = arrived
        app.requests += 1
        start = max(arrived, app.alone_finish_s)
        app.alone_finish_s = start + app.request_time_s
        app.alone_latency_s = app.alone_finish_s - arrived
        bisect.insort(app.alone_latencies, app.alone_latency_s)

    # -- goals as targets ------------------------------------------------------------------

    def _target_s(self, app: _App) -> float:
        """The latency the request in progress may reach."""
        goal = app.goal
        if goal.kind == "p99_latency":
            return goal.value
        if goal.kind == "p99_slowdown":
            return goal.value * self._alone_p99_s(app)
        return app.alone_latency_s * self._stretch(app)

    def _base_s(self, app: _App) -> float:
        """The latency alone the target is relative to: the p99 alone for a p99 goal (the
        requests that set the p99 have no slack but the goal's), else this request's."""
        if app.goal.is_latency:
            return min(self._alone_p99_s(app), self._target_s(app))
        return app.alone_latency_s

    def _alone_p99_s(self, app: _App) -> float:
        ranked = app.alone_latencies
        p99 = ranked[min(len(ranked) - 1, int(LATENCY_QUANTILE * len(ranked)))]
        if len(ranked) < _TRUSTED_SAMPLES:  # too few requests for their p99 to mean much
            p99 = max(p99, _poisson_p99_s(app.rps, app.request_time_s))
        return max(p99, app.request_time_s)

    def _stretch(self, app: _App) -> float:
        """How much slower than alone a throughput-protected app's requests may run."""
        goal, work = app.goal, app.request_time_s
        if app.rps is None:  # closed loop: throughput is 1 / request latency
            if goal.kind == "throughput_share":
                return 1.0 / goal.value
            if goal.kind == "throughput_rps" and work > 0:
                return max(1.0, 1.0 / (goal.value * work))
            return 1.0
        rate = {"throughput_rps": goal.value, "throughput_share": goal.value * app.rps}.get(
            goal.kind, app.rps
        )
        return max(1.0, _OPEN_LOOP_BUSY / (rate * work)) if work > 0 else 1.0

    def _rank(self, app: _App) -> tuple[int, int]:
        """The order of protection: priority, then, among apps of one priority, a latency goal
        before a throughput goal (or an open loop's offered load) before best effort."""
        kind = 2 if app.goal.is_latency else 1 if self._protected(app) else 0
        return (app.priority, kind)

    def _protected(self, app: _App) -> bool:
        return app.goal.protected or app.rps is not None

    # -- deciding --------------------------------------------------------------------------

    def decide(self, view: GpuView) -> KernelDecision:
        self._observe(view)
        if self.delegate is not None:  # calibrated to a reference policy: its mechanism decides
            admission = self.delegate.decide(view)
        else:
            admission = self._admission(view)
        self.alone.started(view, admission.start)
        return admission

    def _admission(self, view: GpuView) -> KernelDecision:
        if not view.waiting:
            return KernelDecision()
        if self.admit == "all":
            return KernelDecision(start=view.waiting)
        if self.admit == "idle":
            return self._when_idle(view)
        # Every kernel as measured where it has been (the backend's launches carry the
        # estimates): the delay a less important kernel causes lasts as long as it truly runs.
        measured = self._measured
        active = [(measured(r.launch), r.remaining) for r in view.running]
        start: list[Launch] = []
        wake: float | None = None
        held: list[int] = []  # priorities of the launches held back so far
        held_apps: set[str] = set()  # and their apps
        for told in view.waiting:  # most important first
            launch = measured(told)
            mine = self._rank(self.apps[launch.app])
            above = [a for a in self.apps.values() if self._guards(a, launch, mine)]
            admit = not above or all(
                self._fits(
                    a,
                    launch,
                    active,
                    view,
                    share=not any(mine < r < self._rank(a) for r in held),
                    waits=a.name in held_apps,
                )
                for a in above
            )
            if not admit and view.now_s >= launch.ready_s + self.max_wait_s:
                admit = self._may_force(launch, above, view)
                self.forced += admit
            if admit:
                start.append(told)
                active.append((launch, 1.0))
            else:
                held.append(mine)
                held_apps.add(launch.app)
                due = launch.ready_s + self.max_wait_s
                if due <= view.now_s:  # overdue and refused: ask again a wait later
                    due = view.now_s + self.max_wait_s
                wake = due if wake is None else min(wake, due)
        return KernelDecision(start=tuple(start), wake_at_s=wake)

    def _measured(self, launch: Launch) -> Launch:
        """``launch`` with its kernel as the app's record has it: its time alone as measured,
        where that differs from the estimate (``_App.learn``)."""
        app = self.apps.get(launch.app)
        if app is None or launch.index not in app.corrections:
            return launch
        told, _, corrected = app.corrections[launch.index]
        if app.kernels.get(launch.index) is not corrected:
            return launch  # measured since within 1 % of the estimate
        if told is not launch.kernel and told != launch.kernel:
            return launch  # another kernel at that index (a request of another shape)
        return dataclasses.replace(launch, kernel=corrected)

    def _guards(self, app: _App, launch: Launch, rank: tuple[int, int]) -> bool:
        """Whether ``launch`` (of rank ``rank``) must keep ``app``'s goal: ``app`` is more
        important and protected; a best-effort open loop, protected for its offered load, only
        from the priorities below it (within one priority best-effort apps share, as Orion
        runs a whole level)."""
        if self._rank(app) <= rank or not self._protected(app):
            return False
        if app.goal.protected:
            return True
        # A load nobody asked to be kept does not outrank a goal someone stated.
        return app.priority > launch.priority and not self.apps[launch.app].goal.protected

    def _when_idle(self, view: GpuView) -> KernelDecision:
        """Every kernel of whose app no app of a higher priority with a goal has anything
        running or waiting (by priority alone, as Orion: apps of one level run together)."""
        busy = {r.launch.app for r in view.running} | {w.app for w in view.waiting}
        start = []
        for launch in view.waiting:
            if not any(a.priority > launch.priority and a.goal.protected and a.name in busy
                       for a in self.apps.values()):  # fmt: skip
                start.append(launch)
        return KernelDecision(start=tuple(start))

    def _may_force(self, launch: Launch, above: list[_App], view: GpuView) -> bool:
        """Whether a kernel that has waited ``max_wait_s`` may start anyway: throughput goals
        absorb one such kernel per wait; a p99 goal only while the requests it puts at risk
        (the one in progress, or arrivals expected during the kernel) stay within half of its
        1 % of requests allowed late."""
        costs = []
        for app in above:
            if not app.goal.is_latency or app.requests == 0:
                continue
            if app.busy:
                cost = 0.0 if app.risked == app.request else 1.0
            else:
                cost = self._rate(app, view) * launch.kernel.time_s
            # Of the requests seen, or (open loop) of those its rate says it has sent by now: an
            # app whose arrivals pause does not hold a long kernel below it for ever.
            sent = app.rps * (view.now_s - (app.first_s or 0.0)) if app.rps else 0.0
            tail = (1 - LATENCY_QUANTILE) * 0.5 * max(app.requests, sent)
            if app.risk + cost > tail:
                return False
            costs.append((app, cost))
        for app, cost in costs:
            app.risk += cost
            if app.busy:
                app.risked = app.request
        return True

    def _pace(self, app: _App, view: GpuView) -> tuple[float, float] | None:
        """For an app with a throughput goal: (requests done per second so far, the rate its
        goal asks), once it has done a few; None before."""
        done = app.requests - (1 if app.busy else 0)
        elapsed = view.now_s - (app.first_s or 0.0)
        if done < _TRUSTED_DONE or elapsed <= 0:
            return None
        work = app.request_time_s
        alone_rps = min(app.rps or math.inf, 1.0 / work) if work > 0 else math.inf
        goal = app.goal
        wanted = goal.value if goal.kind == "throughput_rps" else goal.value * alone_rps
        return done / elapsed, wanted

    def _ahead(self, app: _App, view: GpuView) -> bool:
        """Whether an app with a throughput goal has done comfortably more requests than the
        goal asks, so far (judged once it has done a few)."""
        pace = self._pace(app, view)
        return pace is not None and pace[0] >= _AHEAD * pace[1]

    def _has_room(self, app: _App) -> bool:
        """Whether a p99 goal has measured room: its last requests (at least
        ``_TRUSTED_DONE``) all ended within ``1 - _ROOM`` of the target, none late since."""
        if not app.goal.is_latency or len(app.recent) < _TRUSTED_DONE or app.trust < 1.0:
            return False
        return max(app.recent) <= (1 - _ROOM) * self._target_s(app)

    def _behind(self, app: _App, view: GpuView) -> bool:
        """Whether a protected app is missing its own goal so far, as measured: a throughput
        goal (after a few requests) not reached, a p99 goal with more than its 1 % of requests
        seen late."""
        goal = app.goal
        if goal.is_latency:
            return app.late > (1 - LATENCY_QUANTILE) * app.requests
        if goal.kind not in ("throughput_share", "throughput_rps"):
            return False
        pace = self._pace(app, view)
        return pace is not None and pace[0] < pace[1]

    def _rate(self, app: _App, view: GpuView) -> float:
        """Requests per second: as stated (open loop), else as seen so far."""
        return app.rps or app.requests / max(view.now_s - (app.first_s or 0.0), 1e-9)

    def _fits(
        self,
        app: _App,
        launch: Launch,
        active: list[tuple[Launch, float]],
        view: GpuView,
        *,
        share: bool,
        waits: bool = False,
    ) -> bool:
        """Whether ``launch`` may start beside ``active`` as far as ``app`` (more important,
        protected) is concerned: the first rule of :data:`_RULES_BEFORE_LAG`, then of
        :data:`_RULES_ON_LAG` on the predicted lag, that says yes or no; the last,
        :func:`_within_exposure`, always does, and spends ``app``'s exposure allowance when it
        says yes, only if ``share`` (no app between the two is held back: the allowance goes to
        the more important first)."""
        case = _Case(self, app, launch, self.apps[launch.app], view, share=share, waits=waits)
        for rule in _RULES_BEFORE_LAG:
            verdict = rule(case)
            if verdict is not None:
                return verdict
        lag = _predict_lag(case, active)
        if lag is None:
            return True  # predicted to cost the app nothing
        for rule_on_lag in _RULES_ON_LAG:
            verdict = rule_on_lag(case, lag)
            if verdict is not None:
                return verdict
        raise AssertionError("unreachable: the last rule always answers")

    def _next_lag(
        self,
        app: _App,
        index: int,
        remaining: float,
        lower: list[tuple[Launch, float]],
        others: list[Kernel],
        view: GpuView,
        lag: float,
        delay: float,
    ) -> float:
        """The lag of the requests after the one in progress, where the less important kernels
        outlive it: queued ones (``view.backlog``) inherit ``lag`` and add the delay to their
        own kernels; a closed loop's next request starts afresh and suffers only that delay."""
        if not app.knows_request():
            return 0.0
        life = max((rest * a.kernel.time_s for a, rest in lower), default=0.0)
        if life <= app.left_s(index, remaining):
            return 0.0
        queued = view.backlog.get(app.name, 0)
        if queued > 0:
            more = self._delay(app, index, remaining, lower, others, view, requests=1 + queued)
            return lag + more - delay
        if app.rps is None:
            more = self._delay(app, index, remaining, lower, others, view, requests=2)
            return more - delay
        return 0.0

    def _delay(
        self,
        app: _App,
        index: int,
        remaining: float,
        lower: list[tuple[Launch, float]],
        others: list[Kernel],
        view: GpuView,
        *,
        requests: int = 1,
    ) -> float:
        """The delay ``lower`` kernels are predicted to cause ``app`` from kernel ``index``
        (``remaining`` of it left) to the end of its request, or of the ``requests - 1`` whole
        requests after it."""
        gpu = view.gpu
        sm_count = gpu.sm_count or 1
        head = app.upcoming(index, gpu)
        if not head.each:
            return 0.0
        left = app.left_s(index, remaining)
        repeats = requests - 1
        whole = app.whole(gpu) if repeats > 0 else _NO_KERNELS
        if repeats > 0:
            left += app.request_time_s * repeats
        kernels = len(head.each) + len(whole.each) * repeats
        need = max(head.need, whole.need)
        taken = sum(min(k.sms, sm_count) for k in others)
        held = sum(min(a.kernel.sms, sm_count) for a, _ in lower)
        sm_delay = 0.0
        if taken + need + held > sm_count:
            mean_kernel = left / kernels
            for launch, rest in lower:
                kernel = launch.kernel
                life = rest * kernel.time_s
                wave = min(wave_time_s(kernel, gpu), life)
                boundaries = min(kernels, 1 + math.floor(life / max(mean_kernel, 1e-12)))
                sm_delay += min(boundaries * wave, life)
            # Meanwhile the app's kernel runs on the SMs that are free, at that fraction of
            # its speed: only the rest of the wait is lost.
            free = max(0, sm_count - taken - held)
            sm_delay *= 1.0 - min(1.0, free / need) if need else 0.0
        # Bandwidth: each upcoming kernel slowed as max-min fair sharing says, for as long as
        # the less important kernels run (that bound reached ends the sum: its terms are >= 0).
        overlap = max((rest * a.kernel.time_s for a, rest in lower), default=0.0)
        demands_lower = [bandwidth_share(a.kernel, gpu) for a, _ in lower]
        demands_other = [bandwidth_share(k, gpu) for k in others]
        splits: dict[int, FairShare] = {}  # by the SMs the app's kernel takes
        scaled: dict[float, FairShare] = {}  # by the share of their SMs the lower ones keep

        def split_for(sms: int) -> FairShare:
            split = splits.get(sms)
            if split is None:
                # Stream priorities give app's kernel its SMs first; the less important
                # kernels run (and use bandwidth) on what is left.
                left_sms = max(0, sm_count - sms - taken)
                scale = min(1.0, left_sms / held) if held else 0.0
                split = scaled.get(scale)
                if split is None:
                    split = scaled[scale] = FairShare(
                        [*demands_other, *(d * scale for d in demands_lower)], 1.0
                    )
                splits[sms] = split
            return split

        excess: dict[tuple[float, int], float] = {}  # mine / grant - 1, by (share, SMs)

        def excesses(profile: _Kernels) -> list[float]:
            result = []
            for pair in profile.pairs:
                value = excess.get(pair)
                if value is None:
                    mine, sms = pair
                    grant = split_for(sms).grant(mine)
                    # Nothing granted adds nothing (a term of 0 leaves the sum as it is).
                    value = excess[pair] = mine / grant - 1.0 if grant > 0 else 0.0
                result.append(value)
            return result

        # The first kernel counts for what is left of it; the rest in full, in order.
        ratios = excesses(head)
        bw_delay = ratios[head.kinds[0]] * head.times[0] * remaining
        parts = [(ratios, head.kinds[1:], head.times[1:])]
        if repeats > 0:
            parts += [(excesses(whole), whole.kinds, whole.times)] * repeats
        for ratios, kinds, times in parts:
            if bw_delay >= overlap:
                break
            for kind, time_s in zip(kinds, times, strict=True):
                bw_delay += ratios[kind] * time_s
                if bw_delay >= overlap:
                    break
        bw_delay = min(bw_delay, overlap)
        return self.model.drain * sm_delay + self.model.bandwidth * bw_delay


# -- the admission rule, step by step --------------------------------------------------------
#
# ``FgGR._fits`` asks, for one protected app ``P`` more important than a waiting kernel, whether
# the kernel may start as far as ``P`` is concerned. Each step below answers True (start), False
# (hold) or None (no say: the next step decides), in the order of the two tuples at the end.


@dataclass(frozen=True, slots=True)
class _Case:
    """One question the rules answer: may ``launch`` (of app ``candidate``) start, as far as
    ``app`` (more important, protected) is concerned?"""

    policy: FgGR
    app: _App
    launch: Launch
    candidate: _App
    view: GpuView
    share: bool  # no app between the two is held back in this decision
    waits: bool  # ``app``'s own kernel is held in this decision for the apps above it


@dataclass(frozen=True, slots=True)
class _Lag:
    """``app``'s predicted lag behind its schedule alone with the kernel started, and what its
    goal allows (**Delay**, **Lag**, **Feedback** in the module docstring)."""

    lag: float
    target: float
    allowed: float
    idle: bool  # no request of ``app`` in progress


def _nothing_known(case: _Case) -> bool | None:
    """Nothing is known of the app yet but its goal: its first kernel will tell."""
    return True if case.app.requests == 0 else None


def _throughput_ahead(case: _Case) -> bool | None:
    """A throughput goal comfortably exceeded so far is left to itself (**Measured room**)."""
    app = case.app
    if app.goal.kind in ("throughput_share", "throughput_rps") and case.policy._ahead(
        app, case.view
    ):
        return True
    return None


def _room_at_its_level(case: _Case) -> bool | None:
    """A best-effort app of the app's own priority runs beside it (as Orion runs a whole level)
    while the goal shows room, as measured on its last requests (**Measured room**)."""
    policy, app, candidate = case.policy, case.app, case.candidate
    same_level = candidate.priority == app.priority and not policy._protected(candidate)
    return True if same_level and policy._has_room(app) else None


def _predict_lag(case: _Case, active: list[tuple[Launch, float]]) -> _Lag | None:
    """The app's lag when its request in progress ends, with the kernel started (**Delay**,
    **Lag**); None when the kernel is predicted to cost it nothing, every kernel of its request
    known (**Measured need**: it never waits then, however far behind the app already is)."""
    policy, app, launch, view = case.policy, case.app, case.launch, case.view
    mine = [(a, left) for a, left in active if a.app == app.name]
    waiting = next((w for w in view.waiting if w.app == app.name), None)
    idle = not app.busy
    rank = policy._rank(app)
    lower = [(a, left) for a, left in active if policy._rank(policy.apps[a.app]) < rank]
    lower.append((launch, 1.0))
    others = [
        a.kernel
        for a, _ in active
        if policy._rank(policy.apps[a.app]) >= rank and a.app != app.name
    ]
    if mine:
        index, remaining = mine[0][0].index, mine[0][1]
    elif waiting is not None:
        index, remaining = waiting.index, 1.0
    else:  # between requests, or between two kernels of one (the runtime's threads)
        index, remaining = (0 if idle else app.index + 1), 1.0
    delay = policy._delay(app, index, remaining, lower, others, view)
    target = policy._target_s(app)

    def next_lag(lag: float, delay: float) -> float:
        return policy._next_lag(app, index, remaining, lower, others, view, lag, delay)

    # The app's lag behind its schedule alone (its requests back to back from their
    # arrivals) when this request ends: requests queued behind it inherit it, so the lag,
    # not one request's latency, is what the goal bounds.
    if idle:
        lag = delay
    elif delay <= 0.0 and app.knows_request() and next_lag(0.0, 0.0) <= 0.0:
        return None
    else:
        lag = max(0.0, view.now_s + app.left_s(index, remaining) - app.alone_finish_s) + delay
        lag = max(lag, next_lag(lag, delay))
    allowed = (target - policy._base_s(app)) * policy.slack_fraction * app.trust
    return _Lag(lag, target, allowed, idle)


def _held_for_those_above(case: _Case, lag: _Lag) -> bool | None:
    """The app's own kernel waits, in this decision, for the apps above it: a kernel shorter
    than half its allowance costs it at most what it still holds when that kernel starts, its
    own life (**Measured room and need**)."""
    if case.waits and case.launch.kernel.time_s <= _HELD_FREE * lag.allowed:
        return True
    return None


def _within_free_part(case: _Case, lag: _Lag) -> bool | None:
    """A lag up to ``safe_fraction`` of the allowance is taken freely: it leaves room for as
    much again from elsewhere (**Exposure**)."""
    return True if lag.lag <= case.policy.safe_fraction * lag.allowed else None


def _candidate_behind(case: _Case, lag: _Lag) -> bool | None:
    """The candidate's own goal is being missed: the hedges below (room for others, few
    requests exposed) give way to it; the allowance itself does not (**Measured need**)."""
    if case.policy._behind(case.candidate, case.view):
        return lag.lag <= lag.allowed
    return None


def _throughput_goal(case: _Case, lag: _Lag) -> bool | None:
    """A throughput goal: the mean counts, not the tail, so the whole allowance is taken."""
    return lag.lag <= lag.allowed if not case.app.goal.is_latency else None


def _more_important_first(case: _Case, lag: _Lag) -> bool | None:
    """Beyond the free part, the allowance goes to the more important apps first: none
    while an app between the two is held back (**Exposure**)."""
    return False if not case.share else None


def _within_allowance(case: _Case, lag: _Lag) -> bool | None:
    """The lag stays within the allowance; while the app is idle, within what a request
    arriving now could absorb (it has not queued), for the few requests exposed to it."""
    if lag.idle:
        app, policy = case.app, case.policy
        absorb = (lag.target - app.request_time_s) * policy.slack_fraction * app.trust
        return False if lag.lag > absorb else None
    return False if lag.lag > lag.allowed else None


def _within_exposure(case: _Case, lag: _Lag) -> bool:
    """A p99 goal tolerates delays on few requests: the requests exposed to a delay are
    counted (expected arrivals during the kernel while the app is idle, else the request in
    progress, once), and a less important app may use what the apps between it and this one
    have left of ``exposure`` x the app's requests (**Exposure**). Spends that allowance
    (:func:`_spend_exposure`) when it says yes."""
    policy, app, candidate = case.policy, case.app, case.candidate
    if lag.idle:
        cost = policy._rate(app, case.view) * case.launch.kernel.time_s
    else:
        cost = 0.0 if app.exposed == app.request else 1.0
    rank = policy._rank(candidate)
    used = sum(
        spent for name, spent in app.exposure.items() if policy._rank(policy.apps[name]) >= rank
    )
    if used + cost > policy.exposure * app.requests + 1.0:  # one to start with
        return False
    _spend_exposure(app, case.launch.app, cost, in_progress=not lag.idle)
    return True


def _spend_exposure(app: _App, lower: str, cost: float, *, in_progress: bool) -> None:
    """The ledger: ``cost`` requests of ``app`` exposed to app ``lower``'s kernels (faded by
    ``FgGR._observe``); the request in progress is counted once."""
    app.exposure[lower] = app.exposure.get(lower, 0.0) + cost
    if in_progress:
        app.exposed = app.request


#: The steps before the lag is predicted, in order: the cheap answers.
_RULES_BEFORE_LAG: tuple[Callable[[_Case], bool | None], ...] = (
    _nothing_known,
    _throughput_ahead,
    _room_at_its_level,
)
#: The steps on the predicted lag, in order; the last always answers.
_RULES_ON_LAG: tuple[Callable[[_Case, _Lag], bool | None], ...] = (
    _held_for_those_above,
    _within_free_part,
    _candidate_behind,
    _throughput_goal,
    _more_important_first,
    _within_allowance,
    _within_exposure,
)
