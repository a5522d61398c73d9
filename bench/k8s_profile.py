"""Where a round's CPU goes, thread by thread: a cProfile of round 1 of ``k8s_scale.py``'s burst
(1,000 jobs arriving at once on 500 nodes) in every thread, grouped by the thread's role.

    nice -n 10 python bench/k8s_profile.py             # about 1 min: profiling slows it 4x
    nice -n 10 python bench/k8s_profile.py --top 40

Every thread gets a profiler of its own before it runs anything (``threading.setprofile``,
installed before the API server and the scheduler start), timed by that thread's CPU clock
(``time.thread_time``), so a thread waiting for the interpreter's lock or for an answer is
charged nothing. The profiles are read just before and just after round 1, and the difference
is printed by role, as ``k8s_scale.py --by-thread`` names them: ``round`` (the round's thread),
``send`` (the writes' senders), ``informers``, ``lease``, and ``server`` (every other thread:
the in-process API server's request handlers and watch streams). The server's CPU is thus
apart from the scheduler's. Profiling costs most in the functions called most often: compare
shares within one run, and take the seconds from ``k8s_scale.py``.
"""

from __future__ import annotations

import argparse
import cProfile
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import k8s_scale

#: (calls, cumulative s, own s) by function
Rows = dict[str, tuple[int, float, float]]


class ThreadProfiles:
    """A CPU-clock profiler in every thread started after :meth:`install`, and in this one."""

    def __init__(self) -> None:
        self.profiles: list[tuple[threading.Thread, cProfile.Profile]] = []
        self._lock = threading.Lock()

    def install(self) -> None:
        def first_call(frame, event, arg):  # replaced by the thread's profiler at once
            self._start(threading.current_thread())

        threading.setprofile(first_call)
        self._start(threading.current_thread())

    def _start(self, thread: threading.Thread) -> None:
        profile = cProfile.Profile(time.thread_time)
        with self._lock:
            self.profiles.append((thread, profile))
        profile.enable()

    def read(self) -> list[tuple[str, Rows]]:
        """Each profile so far: its thread's role, its rows."""
        with self._lock:
            profiles = list(self.profiles)
        out = []
        for thread, profile in profiles:
            rows: Rows = {}
            for entry in profile.getstats():
                name = _label(entry.code)
                calls, total, own = rows.get(name, (0, 0.0, 0.0))
                rows[name] = (
                    calls + entry.callcount,
                    total + entry.totaltime,
                    own + entry.inlinetime,
                )
            out.append((_role(thread.name), rows))
        return out


def _role(name: str) -> str:
    return next((r for start, r in k8s_scale.ROLES.items() if name.startswith(start)), "server")


def _label(code) -> str:
    if isinstance(code, str):
        return code
    path = code.co_filename.split("site-packages/")[-1]
    return f"{path}:{code.co_firstlineno}({code.co_name})"


def show(before: list[tuple[str, Rows]], after: list[tuple[str, Rows]], top: int) -> None:
    by_role: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(lambda: [0, 0.0, 0.0]))
    for i, (role, rows) in enumerate(after):
        old = before[i][1] if i < len(before) else {}
        for name, (calls, total, own) in rows.items():
            was = old.get(name, (0, 0.0, 0.0))
            row = by_role[role][name]
            row[0] += calls - was[0]
            row[1] += total - was[1]
            row[2] += own - was[2]
    for role, rows in sorted(by_role.items()):
        print(f"\n== {role}: {sum(r[2] for r in rows.values()):.3f} s of thread CPU (profiled)")
        for title, column in (("own", 2), ("cumulative", 1)):
            print(f"{'calls':>9} {'own s':>8} {'cum s':>8}  by {title} time")
            for name, (calls, total, own) in sorted(rows.items(), key=lambda kv: -kv[1][column])[
                :top
            ]:
                print(f"{calls:>9} {own:>8.3f} {total:>8.3f}  {name}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=25, help="functions shown per role and order")
    top = parser.parse_args().top
    profiles = ThreadProfiles()
    profiles.install()
    step = k8s_scale.K8sScheduler.step

    def profiled_step(self):
        before = profiles.read()
        started, process = time.perf_counter(), time.process_time()
        report = step(self)
        print(
            f"round 1 (profiled): wall {time.perf_counter() - started:.2f} s, "
            f"process CPU {time.process_time() - process:.2f} s"
        )
        show(before, profiles.read(), top)
        return report

    k8s_scale.K8sScheduler.step = profiled_step
    sys.argv = [sys.argv[0], "--max-rounds", "1"]
    return k8s_scale.main()


if __name__ == "__main__":
    raise SystemExit(main())
