"""``qosched up``, ``submit``, ``status``, ``logs``, ``cancel`` and ``down``: the local service.

``up`` runs the service (``qosched.backends.local.service.LocalService``) behind the HTTP API of
``qosched.backends.local.api``; every other command is a client of that API, found through the
service home (``--home``, default ``qosched.backends.local.home.default_home``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from qosched.backends.local.api import Metrics, serve
from qosched.backends.local.client import Client
from qosched.backends.local.home import (
    LOCK_FILE,
    LOG_FILE,
    Endpoint,
    HomeLock,
    ServiceRunningError,
    check_not_running,
    ensure_home,
    ensure_token,
    pid_alive,
    read_endpoint,
    read_token,
    recorded_endpoint,
    remove_endpoint,
    resolve_home,
    write_endpoint,
)
from qosched.backends.local.jobspec import format_duration, parse_job_spec, read_spec_text
from qosched.core.errors import InputError, QoschedError

POLICIES = ("qos", "fifo")
# The service's default, without importing it (it pulls in the policies); the same value.
GRACE_S = 30.0
MAX_GRACE_S = 86400.0
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 30.0
WATCH_INTERVAL_S = 1.0
_POLL_S = 0.1


def add_commands(groups: argparse._SubParsersAction) -> None:
    """Register the local-service commands on the top-level sub-command group."""
    home = argparse.ArgumentParser(add_help=False)
    home.add_argument(
        "--home",
        metavar="DIR",
        help="the service's home directory (default: $QOSCHED_HOME, else "
        "$XDG_STATE_HOME/qosched, else ~/.local/state/qosched)",
    )

    up = groups.add_parser(
        "up",
        parents=[home],
        help="start the local scheduler service on this machine's CPU cores",
        description="Run the local scheduler service and its HTTP API (on 127.0.0.1) until "
        "Ctrl-C, SIGTERM or `qosched down`.",
    )
    up.add_argument(
        "--cpus",
        type=_cpu_list,
        metavar="LIST",
        help="the cores it may use, like 0,1 or 0-3,6 (default: every core this process may use)",
    )
    up.add_argument(
        "--policy", choices=POLICIES, default="qos", help="scheduling policy (default: qos)"
    )
    up.add_argument(
        "--port", type=_port, default=0, help="API port on 127.0.0.1 (default: any free port)"
    )
    up.add_argument(
        "--grace-s",
        type=_grace,
        default=GRACE_S,
        metavar="S",
        help="seconds a job's process has to stop after SIGTERM (cancel, pre-emption, down) "
        f"before its process group is killed (default: {GRACE_S:g})",
    )
    up.add_argument(
        "--detach",
        action="store_true",
        help="run in the background (output to HOME/service.log) and return once it answers",
    )
    up.set_defaults(run=run_up)

    submit = groups.add_parser(
        "submit",
        parents=[home],
        help="submit training jobs (YAML specs) to the local service",
        description="Check every spec, then submit them in order; prints one job id a line.",
    )
    submit.add_argument("specs", nargs="+", type=Path, metavar="JOB.yaml")
    submit.set_defaults(run=run_submit)

    status = groups.add_parser("status", parents=[home], help="show the local service's jobs")
    status.add_argument("--watch", action="store_true", help="refresh every second until Ctrl-C")
    status.add_argument("--json", action="store_true", help="print the job list as JSON")
    status.set_defaults(run=run_status)

    logs = groups.add_parser("logs", parents=[home], help="print a job's output")
    logs.add_argument("job", metavar="JOB", help="job id, like j-000001")
    logs.add_argument("--tail", type=_count, metavar="N", help="only the last N lines")
    logs.set_defaults(run=run_logs)

    cancel = groups.add_parser("cancel", parents=[home], help="cancel a job")
    cancel.add_argument("job", metavar="JOB", help="job id, like j-000001")
    cancel.set_defaults(run=run_cancel)

    down = groups.add_parser(
        "down",
        parents=[home],
        help="stop the local service (running jobs are checkpointed and resume at the next up)",
    )
    down.add_argument(
        "--timeout",
        type=float,
        default=STOP_TIMEOUT_S,
        metavar="S",
        help=f"seconds to wait for it to stop (default: {STOP_TIMEOUT_S:g})",
    )
    down.set_defaults(run=run_down)


# --- argument types ------------------------------------------------------------------------------


def _cpu_list(text: str) -> tuple[int, ...]:
    """``0,1`` or ``0-3,6`` -> sorted core ids; duplicates and reversed ranges are errors."""
    cores: list[int] = []
    for part in text.split(","):
        part = part.strip()
        low, dash, high = part.partition("-")
        if not low.isdecimal() or (dash and not high.isdecimal()):
            raise argparse.ArgumentTypeError(f"expected core ids like 0,1 or 0-3,6, got {text!r}")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise argparse.ArgumentTypeError(f"range {part!r} runs backwards")
        cores.extend(range(first, last + 1))
    duplicates = sorted({core for core in cores if cores.count(core) > 1})
    if duplicates:
        raise argparse.ArgumentTypeError(f"cores listed twice: {duplicates}")
    return tuple(sorted(cores))


def _grace(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= MAX_GRACE_S:
        raise argparse.ArgumentTypeError(f"expected seconds in [0, {MAX_GRACE_S:g}], got {text!r}")
    return seconds


def _port(text: str) -> int:
    if not text.isdecimal() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 0..65535, got {text!r}")
    return int(text)


def _count(text: str) -> int:
    if not text.isdecimal():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


# --- up and down ---------------------------------------------------------------------------------


def run_up(args: argparse.Namespace) -> int:
    home = ensure_home(resolve_home(args.home).absolute())
    if args.detach:
        return _up_detached(args, home)
    check_not_running(home)
    with HomeLock(home):
        token = ensure_token(home)
        # Imported here: the service pulls in the cluster policies, which no client needs.
        from qosched.backends.local.service import LocalService

        service = LocalService.open(home, cpus=args.cpus, policy=args.policy, grace_s=args.grace_s)
        stop = threading.Event()
        try:
            with (
                serve(service, port=args.port, token=token, shutdown_event=stop) as server,
                _stop_on_signals(stop),
            ):
                write_endpoint(home, Endpoint(server.host, server.port, os.getpid(), time.time()))
                print(
                    f"qosched service listening on {server.url} (pid {os.getpid()}, home {home}); "
                    "stop it with Ctrl-C or `qosched down`",
                    flush=True,
                )
                service.run(stop)
        finally:
            service.close()
            # Last but the lock: `qosched down` waits for this file to go and the lock to be
            # free, so the service must be done by then.
            remove_endpoint(home, os.getpid())
        print("qosched service stopped", flush=True)
    return 0


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGTERM, SIGHUP and a first Ctrl-C set ``stop``; a second Ctrl-C interrupts at once."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def graceful(signum: int, frame: object) -> None:
        if signum == signal.SIGINT:
            print(
                "qosched: stopping (pre-empting running jobs); Ctrl-C again to quit at once",
                file=sys.stderr,
                flush=True,
            )
            signal.signal(signal.SIGINT, signal.default_int_handler)
        stop.set()

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {signum: signal.signal(signum, graceful) for signum in handled}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _service_argv(home: Path, args: argparse.Namespace) -> list[str]:
    """The command a detached ``up`` runs: a foreground ``up`` with the same options."""
    argv = [sys.executable, "-m", "qosched.cli.main", "up", "--home", str(home)]
    argv += ["--policy", args.policy, "--port", str(args.port), "--grace-s", repr(args.grace_s)]
    if args.cpus:
        argv += ["--cpus", ",".join(map(str, args.cpus))]
    return argv


def _up_detached(args: argparse.Namespace, home: Path) -> int:
    check_not_running(home)
    token = ensure_token(home)  # here, so a bad token file is reported now, not in the log
    log_path = home / LOG_FILE
    argv = _service_argv(home, args)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    with open(log_path, "ab") as log:
        log.write(f"--- {started} qosched up --detach: {' '.join(argv)}\n".encode())
        log.flush()
        # posix_spawn with setsid: the service gets its own session, so it outlives this
        # command and the terminal's Ctrl-C and hang-up never reach it.
        pid = os.posix_spawn(
            argv[0],
            argv,
            os.environ,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, log.fileno(), 1),
                (os.POSIX_SPAWN_DUP2, log.fileno(), 2),
            ],
            setsid=True,
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        finished, status = os.waitpid(pid, os.WNOHANG)
        if finished:
            code = os.waitstatus_to_exitcode(status)
            raise QoschedError(
                f"the service exited with code {code} while starting; the end of {log_path}:\n"
                + _tail(log_path, 20)
            )
        endpoint = _quietly(recorded_endpoint, home)
        if endpoint is not None and endpoint.pid == pid:
            health = _quietly(Client(endpoint.url, token, timeout_s=2.0).healthz)
            if health is not None:
                print(
                    f"qosched service running at {endpoint.url} (pid {pid}, home {home}, "
                    f"log {log_path})"
                )
                return 0
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            raise QoschedError(
                f"the service (pid {pid}) did not answer within {START_TIMEOUT_S:g} s, so it "
                f"was asked to stop; see {log_path}"
            )
        time.sleep(_POLL_S)


def _quietly(function: Any, *args: Any) -> Any:
    """``function(*args)``, or None when it raises a QoschedError (not ready yet)."""
    try:
        return function(*args)
    except QoschedError:
        return None


def _recorded_pid(home: Path) -> int | None:
    endpoint = _quietly(recorded_endpoint, home)
    return None if endpoint is None else endpoint.pid


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"(cannot read it: {exc.strerror})"
    return "\n".join(text.splitlines()[-lines:])


def run_down(args: argparse.Namespace) -> int:
    home = resolve_home(args.home)
    endpoint = read_endpoint(home)
    Client(endpoint.url, read_token(home)).shutdown()
    deadline = time.monotonic() + args.timeout
    while _recorded_pid(home) == endpoint.pid:
        if not pid_alive(endpoint.pid):
            remove_endpoint(home, endpoint.pid)  # it died before it could clean up
            break
        if time.monotonic() > deadline:
            raise QoschedError(
                f"the service (pid {endpoint.pid}) has not stopped within {args.timeout:g} s; "
                f"it may still be checkpointing running jobs; see {home / LOG_FILE}"
            )
        time.sleep(_POLL_S)
    while not _lock_free(home):  # the service is past its last step when it lets go
        if time.monotonic() > deadline:
            raise QoschedError(
                f"the service (pid {endpoint.pid}) has not released {home / LOCK_FILE} within "
                f"{args.timeout:g} s; see {home / LOG_FILE}"
            )
        time.sleep(_POLL_S)
    print("qosched service stopped")
    return 0


def _lock_free(home: Path) -> bool:
    try:
        with HomeLock(home):
            return True
    except ServiceRunningError:
        return False


# --- client commands -----------------------------------------------------------------------------


def run_submit(args: argparse.Namespace) -> int:
    specs: list[tuple[Path, str]] = []
    for path in args.specs:
        text = read_spec_text(path)
        # Every file is checked before any is sent, so a typo in the third submits nothing.
        parse_job_spec(text, path)
        specs.append((path, text))
    client = Client.from_home(resolve_home(args.home))
    for path, text in specs:
        job = client.submit(text, str(path))
        print(job["id"], flush=True)
        if job.get("state") == "declined":
            print(
                f"qosched: {job['id']} ({job['name']}) was declined: its deadline cannot be "
                "guaranteed and its spec does not allow best effort (spec.bestEffort)",
                file=sys.stderr,
            )
    return 0


def run_status(args: argparse.Namespace) -> int:
    if args.watch and args.json:
        raise InputError("give --watch or --json, not both", field="--watch")
    client = Client.from_home(resolve_home(args.home))
    if args.json:
        print(json.dumps(client.jobs(), indent=2))
        return 0
    console = Console()
    if not args.watch:
        console.print(status_view(client.jobs(), client.metrics(), time.time()))
        return 0

    def view() -> RenderableType:
        return status_view(client.jobs(), client.metrics(), time.time())

    with Live(view(), console=console, auto_refresh=False) as live:
        try:
            while True:
                time.sleep(WATCH_INTERVAL_S)
                live.update(view(), refresh=True)
        except KeyboardInterrupt:
            pass
    return 0


def run_logs(args: argparse.Namespace) -> int:
    text = Client.from_home(resolve_home(args.home)).logs(args.job, args.tail)
    sys.stdout.write(text)
    sys.stdout.flush()
    return 0


def run_cancel(args: argparse.Namespace) -> int:
    job = Client.from_home(resolve_home(args.home)).cancel(args.job)
    if job["state"] == "cancelled":
        print(f"{job['id']} cancelled")
    else:
        print(f"{job['id']} is being cancelled (its worker is stopping)")
    return 0


# --- the status view -----------------------------------------------------------------------------

_STATE_STYLES = {
    "queued": "yellow",
    "running": "cyan",
    "preempted": "magenta",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "dim",
    "declined": "red",
}


def status_view(jobs: Sequence[dict[str, Any]], metrics: Metrics, now: float) -> RenderableType:
    """The ``qosched status`` screen: a one-line summary and a table of the jobs."""
    allocated = sum(metrics.allocated_cpus.values())
    outcomes = ", ".join(f"{name} {count}" for name, count in metrics.outcomes.items() if count)
    summary = Text(
        f"{metrics.capacity_cpus} CPUs, {allocated} allocated · {metrics.running} running · "
        f"{metrics.queued} waiting" + (f" · finished: {outcomes}" if outcomes else "")
    )
    if not jobs:
        return Group(summary, Text("no jobs yet; submit one with `qosched submit JOB.yaml`"))
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("ID", no_wrap=True)
    table.add_column("NAME", overflow="fold", min_width=8)
    table.add_column("STATE", no_wrap=True)
    table.add_column("PROGRESS", justify="right", no_wrap=True)
    table.add_column("CPUS", no_wrap=True)
    table.add_column("DEADLINE", no_wrap=True)
    table.add_column("FINISH", overflow="fold", min_width=10)  # predicted while unfinished
    table.add_column("QOS", overflow="fold", min_width=12)
    for job in jobs:
        state = str(job["state"])
        table.add_row(
            str(job["id"]),
            str(job["name"]),
            Text(state, style=_STATE_STYLES.get(state, "")),
            _progress(job),
            cpu_ranges(job.get("cpus") or []),
            _deadline(job, now),
            _predicted(job, now),
            _qos(job),
        )
    return Group(summary, table)


def cpu_ranges(cpus: Sequence[int]) -> str:
    """``[0, 1, 2, 5] -> '0-2,5'``; '-' when empty."""
    parts: list[str] = []
    ordered = sorted(cpus)
    start = 0
    for index in range(1, len(ordered) + 1):
        if index == len(ordered) or ordered[index] != ordered[index - 1] + 1:
            first, last = ordered[start], ordered[index - 1]
            parts.append(str(first) if first == last else f"{first}-{last}")
            start = index
    return ",".join(parts) or "-"


def _duration(seconds: float) -> str:
    return format_duration(round(abs(seconds)))


def _relative(at: float, now: float) -> str:
    delta = at - now
    return f"in {_duration(delta)}" if delta >= 0 else f"{_duration(delta)} ago"


def _progress(job: dict[str, Any]) -> str:
    total = int(job.get("iterations") or 0)
    done = int(job.get("iterations_done") or 0)
    percent = 100.0 * done / total if total else 0.0
    return f"{percent:.0f}% {done}/{total}"


def _deadline(job: dict[str, Any], now: float) -> Text:
    deadline = job.get("deadline_at")
    if deadline is None:
        return Text("-")
    if job.get("finished_at") is None and deadline < now:
        return Text(f"{_duration(now - deadline)} late", style="red")
    return Text(_relative(deadline, now))


def _predicted(job: dict[str, Any], now: float) -> str:
    if job.get("finished_at") is not None:
        return _relative(job["finished_at"], now)
    predicted = job.get("predicted_finish_at")
    if predicted is None:
        return "-"
    text = _relative(predicted, now)
    band = job.get("predicted_finish_band")
    if band:
        low, high = band
        text += f" ({_duration(low - now)}–{_duration(high - now)})"
    return text


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _qos(job: dict[str, Any]) -> Text:
    """Met or missed for a finished job; for an unfinished one what the prediction says."""
    label, style = _qos_label(job)
    notes = []
    if job.get("guaranteed") and job.get("finished_at") is None:
        notes.append("guaranteed")
    if job.get("best_effort"):
        notes.append("best effort")
    if notes:
        label = f"{label} ({', '.join(notes)})" if label else ", ".join(notes)
    return Text(label, style=style)


def _qos_label(job: dict[str, Any]) -> tuple[str, str]:
    state = job["state"]
    deadline = job.get("deadline_at")
    if state == "succeeded" and deadline is not None and job.get("finished_at") is not None:
        late = job["finished_at"] - deadline
        return ("✓ met", "green") if late <= 0 else (f"✗ missed by {_duration(late)}", "red")
    if state in ("failed", "declined"):
        error = str(job.get("error") or "").strip().splitlines()
        return f"✗ {state}" + (f": {_shorten(error[-1], 60)}" if error else ""), "red"
    if state == "cancelled":
        return "-", "dim"
    predicted = job.get("predicted_finish_at")
    if predicted is None or deadline is None:
        return "", ""
    band = job.get("predicted_finish_band")
    high = band[1] if band else predicted
    if predicted > deadline:
        return "will miss", "red"
    if high > deadline:
        return "at risk", "yellow"
    return "on track", "green"
