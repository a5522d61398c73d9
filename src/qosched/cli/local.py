"""``qosched up``, ``submit``, ``status``, ``logs``, ``cancel`` and ``down``: the local service.

``up`` runs the service (``qosched.backends.local.service.LocalService``) behind the HTTP API of
``qosched.backends.local.api``; every other command is a client of that API, found through the
service home (``--home``, default ``qosched.backends.local.home.default_home``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import json
import math
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from enum import IntEnum
from pathlib import Path
from typing import Any, BinaryIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from qosched.backends.local.api import (
    MAX_LOG_CHUNK,
    ApiServer,
    LogChunk,
    Service,
    ServiceStatus,
    serve,
)
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
    open_private_log,
    pid_alive,
    read_endpoint,
    read_token,
    recorded_endpoint,
    remember_port,
    remembered_port,
    remove_endpoint,
    resolve_home,
    write_endpoint,
)
from qosched.backends.local.jobview import JobDetail, JobView, Outcome
from qosched.backends.local.store import Lifecycle, UnknownJobError
from qosched.cli.columns import plain_table
from qosched.cli.job_select import (
    ACTIVE_STATES,
    RECENTLY_ENDED_S,
    JobFilter,
    complete_states,
    lifecycle,
    state_names,
)
from qosched.cli.options import count, cpu_list, port, seconds
from qosched.cluster.admission import Admission
from qosched.core.errors import InputError, QoschedError
from qosched.trainingjob.jobspec import format_duration, parse_job_spec, read_spec_text

POLICIES = ("qos", "fifo")
# The service's default, without importing it (it pulls in the policies); the same value.
GRACE_S = 30.0
MAX_GRACE_S = 86400.0
START_TIMEOUT_S = 20.0
# A job ignoring SIGTERM holds `down` for the whole grace period; the service then needs a few
# seconds to record it. With a longer `up --grace-s`, pass a longer `down --timeout`.
STOP_TIMEOUT_S = GRACE_S + 30.0
WATCH_INTERVAL_S = 1.0
WAIT_POLL_S = 0.5  # submit --wait asks for its jobs' states this often
FOLLOW_POLL_S = 0.5  # logs --follow asks for new output this often once caught up
_POLL_S = 0.1

#: What `qosched status -o` prints: the table (a terminal's, or plain lines when piped), the
#: table with the ids of the cores and GPUs held, the API's JSON, or the job ids alone.
TABLE, WIDE, JSON, NAME = "table", "wide", "json", "name"
OUTPUTS = (TABLE, WIDE, JSON, NAME)


class Exit(IntEnum):
    """Exit codes of the local-service commands. ``submit --wait`` exits with the code of the
    first job (in submission order) that did not succeed by its deadline; ``submit`` alone
    exits ``DECLINED`` when a job was declined."""

    SUCCEEDED = 0  # every job succeeded by its deadline (or, without --wait, was accepted)
    ERROR = 2  # bad input, no service, a job that cannot be cancelled
    FAILED = 3  # the job failed (its runner kept crashing, or exceeded its memory)
    DECLINED = 4  # its deadline could not be guaranteed and it did not allow best effort
    DEADLINE_MISSED = 5  # it succeeded, after its deadline
    CANCELLED = 6  # it was cancelled while being waited for
    INTERRUPTED = 130  # Ctrl-C while waiting; the jobs go on


EXIT_CODES_HELP = """\
exit codes:
  0    every job succeeded by its deadline (without --wait: every job was accepted)
  2    a spec or an argument is wrong, or the service cannot be reached
  3    a job failed
  4    a job was declined: its deadline cannot be guaranteed (spec.bestEffort allows it)
  5    a job succeeded after its deadline
  6    a job was cancelled
  130  interrupted (Ctrl-C) while waiting; the jobs keep running
With several jobs, the code is that of the first one, in submission order, that did not
succeed by its deadline."""

#: ``qosched submit -`` reads a spec from standard input.
STDIN = "-"


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
        type=cpu_list,
        metavar="LIST",
        help="the cores it may use, like 0,1 or 0-3,6 (default: every core this process may use)",
    )
    up.add_argument(
        "--gpus",
        type=_gpu_list,
        metavar="LIST",
        help="the GPUs it may give jobs, like 0,1,2,3, or 'none' (default: every GPU NVML "
        "reports, with the extra qosched[gpu]; none without it)",
    )
    up.add_argument(
        "--policy", choices=POLICIES, default="qos", help="scheduling policy (default: qos)"
    )
    up.add_argument(
        "--port",
        type=port,
        help="API port on 127.0.0.1, 0 for any free one, kept for the next up of this home "
        "(default: the port of the last up of this home, or any free one the first time; if "
        "another program took it meanwhile, any free one, saying so)",
    )
    up.add_argument(
        "--tick",
        type=seconds,
        metavar="S",
        help="seconds between scheduling rounds when nothing changes, also how often progress "
        "is read; at most 1 s passes between two checks for finished jobs (default: 5)",
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
    # A detached service's output goes to its log: the login URL, a secret, is printed by the
    # command that started it instead.
    up.add_argument("--no-login-url", action="store_true", help=argparse.SUPPRESS)
    up.set_defaults(run=run_up)

    submit = groups.add_parser(
        "submit",
        parents=[home],
        help="submit training jobs (YAML specs) to the local service",
        description="Check every spec, then submit them in order; prints one job id a line. "
        "With --wait, follow the jobs until each has ended; the exit code says how.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    submit.add_argument(
        "specs",
        nargs="+",
        metavar="JOB.yaml",
        help=f"TrainingJob spec files; {STDIN} reads one from standard input",
    )
    submit.add_argument(
        "--wait",
        action="store_true",
        help="wait until every job has ended; the exit code says how (see below)",
    )
    submit.add_argument(
        "--dry-run",
        action="store_true",
        help="submit nothing: print what submitting each spec would do now (guaranteed, best "
        "effort, or declined, and the earliest deadline that can be guaranteed); each spec "
        "is judged alone against the jobs already there; exits 4 if one would be declined",
    )
    submit.add_argument(
        "--json",
        action="store_true",
        help="print the jobs submitted as a JSON list instead of their ids (with --wait: as "
        "they ended; with --dry-run: the verdicts)",
    )
    submit.set_defaults(run=run_submit)

    status = groups.add_parser(
        "status",
        parents=[home],
        help="show the local service's jobs, or one job in detail",
        description="Without JOB: the service's capacity and a table of its jobs that have "
        "not ended, and of those that ended in the last "
        f"{format_duration(round(RECENTLY_ENDED_S))} (--all: every job). Piped (not a "
        "terminal): a header line and one line per job, in plain columns, never wrapped or "
        "cut. With JOB: that job's progress, allocation history, predicted finish, deadline, "
        "slack and events.",
    )
    _completes(
        status.add_argument(
            "job", nargs="?", metavar="JOB", help="a job id, like j-000001, to show in detail"
        ),
        _complete_job_ids,
    )
    _add_filters(status, ended=True)
    status.add_argument(
        "-o",
        "--output",
        choices=OUTPUTS,
        default=TABLE,
        help="wide: the table with the ids of the cores and GPUs each job holds; json: the "
        "jobs as JSON (the API's job objects); name: their ids, one a line",
    )
    status.add_argument(
        "--json",
        dest="output",
        action="store_const",
        const=JSON,
        help="the same as -o json",
    )
    status.add_argument(
        "--watch",
        action="store_true",
        help="refresh every second until Ctrl-C; piped, print a fresh snapshot every second "
        "instead, a blank line before each",
    )
    status.set_defaults(run=run_status)

    logs = groups.add_parser(
        "logs",
        parents=[home],
        help="print a job's output, or follow it as it grows",
        description="Print what a job's runner wrote so far; with --follow, keep printing what "
        "it writes until the job has ended.",
    )
    _completes(
        logs.add_argument("job", metavar="JOB", help="job id, like j-000001"), _complete_job_ids
    )
    logs.add_argument("--tail", type=count, metavar="N", help="only the last N lines")
    logs.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="keep printing new output until the job has ended (Ctrl-C stops early)",
    )
    logs.set_defaults(run=run_logs)

    cancel = groups.add_parser(
        "cancel",
        parents=[home],
        help="cancel jobs",
        description="Cancel each job named, or every job not yet ended that --name and "
        "--state select (--all: every one), and report each; exit 2 if a job named could not "
        "be. A selection that matches no job is no error: it says so and exits 0.",
    )
    _completes(
        cancel.add_argument("jobs", nargs="*", metavar="JOB", help="job ids, like j-000001"),
        _complete_job_ids,
    )
    _add_filters(cancel, ended=False)
    cancel.add_argument(
        "--json", action="store_true", help="print the jobs cancelled as JSON, not in words"
    )
    cancel.set_defaults(run=run_cancel)

    down = groups.add_parser(
        "down",
        parents=[home],
        help="stop the local service (running jobs are checkpointed and resume at the next up)",
    )
    down.add_argument(
        "--timeout",
        type=seconds,
        default=STOP_TIMEOUT_S,
        metavar="S",
        help=f"seconds to wait for it to stop (default: {STOP_TIMEOUT_S:g})",
    )
    down.set_defaults(run=run_down)

    web = groups.add_parser(
        "web",
        parents=[home],
        help="print a new login URL for the local service's web page",
        description="Print a URL that opens the running service's live page in a browser; "
        "each URL signs in once, within 10 minutes, and its session lasts 12 hours "
        "(`qosched up` prints the first).",
    )
    web.add_argument(
        "--revoke",
        action="store_true",
        help="sign out every browser and void every unused login URL instead",
    )
    web.set_defaults(run=run_web)


def _add_filters(parser: argparse.ArgumentParser, *, ended: bool) -> None:
    """``--all``, ``--state`` and ``--name``, the job selection of ``status`` and ``cancel``
    (``job_select.JobFilter``); ``ended``: whether ended jobs can be selected."""
    states = f" ({state_names() if ended else state_names(ACTIVE_STATES)})"
    either = parser.add_mutually_exclusive_group()
    either.add_argument(
        "--all",
        action="store_true",
        help="every job" if ended else "every job not yet ended",
    )
    state = either.add_argument(
        "--state",
        action="append",
        type=lifecycle if ended else _active_state,
        metavar="STATE",
        help=f"only jobs in this state{states}; repeat it for several",
    )
    _completes(state, complete_states if ended else _complete_active_states)
    parser.add_argument(
        "--name",
        metavar="PATTERN",
        help="only jobs whose name matches this shell-style pattern, like 'cnn-*' (quoted, so "
        "the shell leaves it alone)",
    )


def _completes(action: argparse.Action, completer: Callable[..., list[str]]) -> None:
    """Complete ``action``'s value on Tab with ``completer`` (argcomplete calls the attribute
    it finds under this name; nothing else reads it)."""
    action.completer = completer  # type: ignore[attr-defined]


def _active_state(text: str) -> Lifecycle:
    """``cancel --state``: a state a job can be cancelled in."""
    state = lifecycle(text)
    if state not in ACTIVE_STATES:
        raise argparse.ArgumentTypeError(
            f"a {state.value} job has ended and cannot be cancelled; expected one of "
            f"{state_names(ACTIVE_STATES)}"
        )
    return state


def _complete_active_states(prefix: str, **_: object) -> list[str]:
    return [name for name in complete_states(prefix) if Lifecycle(name) in ACTIVE_STATES]


def _complete_job_ids(prefix: str, parsed_args: argparse.Namespace, **_: object) -> list[str]:
    """Shell completion of a job id: the ids the service of ``--home`` knows, or none when it
    cannot be asked quickly (an argcomplete completer)."""
    try:
        client = Client.from_home(resolve_home(getattr(parsed_args, "home", None)), timeout_s=2)
        return [job.id for job in client.jobs() if job.id.startswith(prefix)]
    except (QoschedError, OSError):
        return []


# --- argument types ------------------------------------------------------------------------------


def _grace(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= MAX_GRACE_S:
        raise argparse.ArgumentTypeError(f"expected seconds in [0, {MAX_GRACE_S:g}], got {text!r}")
    return seconds


# --- up and down ---------------------------------------------------------------------------------


def run_up(args: argparse.Namespace) -> int:
    home = ensure_home(resolve_home(args.home).absolute())
    if args.detach:
        return _up_detached(args, home)
    check_not_running(home)
    with HomeLock(home):
        token = ensure_token(home)
        # Imported here: the service pulls in the cluster policies, which no client needs.
        from qosched.backends.local.cgroups import describe as describe_groups
        from qosched.backends.local.service import LocalService

        tick = {} if args.tick is None else {"tick_s": args.tick}
        service = LocalService.open(
            home, cpus=args.cpus, policy=args.policy, grace_s=args.grace_s, gpus=args.gpus, **tick
        )
        stop = threading.Event()
        try:
            with (
                _listen(service, home, args.port, token, stop) as server,
                _stop_on_signals(stop),
            ):
                print(
                    f"qosched service listening on {server.url} (pid {os.getpid()}, home {home}); "
                    "stop it with Ctrl-C or `qosched down`",
                    flush=True,
                )
                if not args.no_login_url:
                    print(f"watch it in a browser: {server.login_url()}", flush=True)
                print(describe_groups(service.groups), flush=True)
                remember_port(home, server.port)
                # Last: whoever waits for this file finds the service ready and done printing.
                write_endpoint(home, Endpoint(server.host, server.port, os.getpid(), time.time()))
                service.run(stop)
        finally:
            service.close()
            # Last but the lock: `qosched down` waits for this file to go and the lock to be
            # free, so the service must be done by then.
            remove_endpoint(home, os.getpid())
        print("qosched service stopped", flush=True)
    return 0


def _listen(
    service: Service, home: Path, asked: int | None, token: str, stop: threading.Event
) -> ApiServer:
    """Serve on the port asked for (``--port``; 0: any free one), else on the port this home's
    service had last (``PORT_FILE``), so its address, and the web page's, stays the same. A
    port asked for that is taken is an error; the remembered one, taken by another program
    meanwhile, gives way to any free port, saying so."""
    port = asked if asked is not None else remembered_port(home)
    try:
        return serve(service, port=port or 0, token=token, shutdown_event=stop)
    except QoschedError as exc:
        if asked is not None or not port or not _address_in_use(exc):
            raise
    server = serve(service, port=0, token=token, shutdown_event=stop)
    print(
        f"qosched: port {port}, where this home's service listened last, is taken by another "
        f"program; listening on port {server.port} instead, kept from now on (`qosched up "
        "--port N` chooses one)",
        file=sys.stderr,
        flush=True,
    )
    return server


def _address_in_use(exc: BaseException) -> bool:
    cause = exc.__cause__
    return isinstance(cause, OSError) and cause.errno == errno.EADDRINUSE


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
    argv = [sys.executable, "-m", "qosched.cli.main", "up", "--home", str(home), "--no-login-url"]
    argv += ["--policy", args.policy, "--grace-s", repr(args.grace_s)]
    if args.port is not None:
        argv += ["--port", str(args.port)]
    if args.cpus:
        argv += ["--cpus", ",".join(map(str, args.cpus))]
    if args.gpus is not None:
        argv += ["--gpus", ",".join(map(str, args.gpus)) or "none"]
    if args.tick is not None:
        argv += ["--tick", repr(args.tick)]
    return argv


def _up_detached(args: argparse.Namespace, home: Path) -> int:
    check_not_running(home)
    token = ensure_token(home)  # here, so a bad token file is reported now, not in the log
    log_path = home / LOG_FILE
    argv = _service_argv(home, args)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    with open_private_log(log_path) as log:
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
                login = Client(endpoint.url, token, timeout_s=2.0).login_url()
                print(f"watch it in a browser: {login}")
                return 0
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            raise QoschedError(
                f"the service (pid {pid}) did not answer within {START_TIMEOUT_S:g} s, so it "
                f"was asked to stop; see {log_path}"
            )
        time.sleep(_POLL_S)


def run_web(args: argparse.Namespace) -> int:
    client = Client.from_home(resolve_home(args.home))
    if args.revoke:
        codes, sessions = client.revoke_sessions()
        print(f"signed out {sessions} session(s) and voided {codes} unused login URL(s)")
        return 0
    print(client.login_url())
    return 0


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


def _gpu_list(text: str) -> tuple[int, ...]:
    from qosched.backends.local.gpus import parse_gpu_list

    try:
        return parse_gpu_list(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.reason) from None


def _lock_free(home: Path) -> bool:
    try:
        with HomeLock(home):
            return True
    except ServiceRunningError:
        return False


# --- client commands -----------------------------------------------------------------------------


def run_submit(args: argparse.Namespace) -> int:
    if args.dry_run and args.wait:
        raise InputError("give --dry-run or --wait, not both", field="--wait")
    if args.specs.count(STDIN) > 1:
        raise InputError(f"{STDIN} (standard input) can be given once", field="specs")
    # Every spec is checked before any is sent, so a typo in the third submits nothing.
    specs = [_checked_spec(name) for name in args.specs]
    client = Client.from_home(resolve_home(args.home))
    if args.dry_run:
        return _dry_run(client, specs, args.json)
    jobs = _submit_all(client, specs, args)
    if not args.wait:
        declined = any(job.state is Lifecycle.DECLINED for job in jobs)
        return Exit.DECLINED if declined else Exit.SUCCEEDED
    return _wait_and_tell(client, jobs, args.json)


def _checked_spec(name: str) -> tuple[str, str]:
    """(source, text) of one spec given to ``submit``, checked. Relative paths are the current
    folder's, as sbatch has them: a command job runs where it was submitted from unless its
    spec says otherwise."""
    if name == STDIN:
        source, text = "<stdin>", sys.stdin.read()
    else:
        source, text = name, read_spec_text(Path(name))
    folder = Path.cwd()
    spec = parse_job_spec(text, source, base_dir=folder, scripts_in=folder)
    if spec.command is not None:
        if spec.working_dir is None:
            spec = dataclasses.replace(spec, working_dir=str(folder))
        # The service cannot know this folder: it gets the paths resolved here.
        text = json.dumps(spec.to_dict())
    return source, text


def _submit_all(
    client: Client, specs: Sequence[tuple[str, str]], args: argparse.Namespace
) -> list[JobView]:
    """Submit each spec in turn, printing each id (or, with ``--json`` and no ``--wait``, the
    jobs as JSON) and saying on stderr why a job was declined."""
    jobs: list[JobView] = []
    submitted = False
    try:
        for source, text in specs:
            job = client.submit(text, source)
            if not args.json:
                print(job.id, flush=True)
            if job.state is Lifecycle.DECLINED:
                _tell_declined(job)
            jobs.append(job)
        submitted = True
    finally:
        # A spec the service refused halfway still leaves the jobs before it submitted: the
        # JSON names them, as the ids printed so far do without --json.
        if args.json and (not args.wait or not submitted):
            _print_jobs_json(jobs)
    return jobs


def _tell_declined(job: JobView) -> None:
    why = job.error or "its deadline cannot be guaranteed and its spec does not allow best effort"
    print(
        f"qosched: {job.id} ({job.name}) was declined: {why} "
        "(spec.bestEffort lets it run without a guarantee)",
        file=sys.stderr,
    )


def _wait_and_tell(client: Client, jobs: list[JobView], as_json: bool) -> int:
    """``submit --wait``: wait for every job to end, say how each did; the exit code of the
    first that did not succeed in time."""
    try:
        ended = wait_for_jobs(client, jobs)
    except KeyboardInterrupt:
        ids = " ".join(job.id for job in jobs)
        print(
            f"qosched: stopped waiting; the jobs go on (cancel them with `qosched cancel {ids}`)",
            file=sys.stderr,
        )
        return Exit.INTERRUPTED
    codes = [outcome_code(job) for job in ended]
    for job, code in zip(ended, codes, strict=True):
        print(f"{job.id} ({job.name}): {_outcome_text(job, code)}", file=sys.stderr)
    if as_json:
        _print_jobs_json(ended)
    return next((code for code in codes if code != Exit.SUCCEEDED), Exit.SUCCEEDED)


def _print_jobs_json(jobs: Sequence[JobView]) -> None:
    """A JSON list of the API's job objects (``JobView.to_json``), as ``status -o json``."""
    print(json.dumps([job.to_json() for job in jobs], indent=2), flush=True)


def _dry_run(client: Client, specs: Sequence[tuple[str, str]], as_json: bool) -> int:
    """``submit --dry-run``: each spec's verdict, one a line (or a JSON list); exits DECLINED
    when one would be declined."""
    verdicts = [(source, client.dry_run(text, source)) for source, text in specs]
    if as_json:
        print(json.dumps([{"source": s, **v.to_json()} for s, v in verdicts], indent=2))
    else:
        for source, verdict in verdicts:
            detail = verdict.detail()
            print(f"{source}: {verdict.outcome}" + (f": {detail}" if detail else ""))
    declined = any(v.outcome is Admission.DECLINED for _, v in verdicts)
    return Exit.DECLINED if declined else Exit.SUCCEEDED


def wait_for_jobs(
    client: Client, jobs: Sequence[JobView], poll_s: float = WAIT_POLL_S
) -> list[JobView]:
    """Poll until every job is in a final state, telling each change of state on stderr; the
    jobs as they ended, in the order given."""
    latest = {job.id: job for job in jobs}
    while True:
        pending = [job_id for job_id, job in latest.items() if not job.finished]
        if not pending:
            return list(latest.values())
        time.sleep(poll_s)
        for job_id in pending:
            job, before = client.job(job_id), latest[job_id]
            if (job.state, job.cpus) != (before.state, before.cpus):
                cores = f" on cores {cpu_ranges(job.cpus)}" if job.cpus else ""
                print(f"{job_id} {job.state}{cores}", file=sys.stderr, flush=True)
            latest[job_id] = job


_OUTCOME_CODES = {
    Outcome.MET: Exit.SUCCEEDED,
    Outcome.MISSED: Exit.DEADLINE_MISSED,
    Outcome.FAILED: Exit.FAILED,
    Outcome.DECLINED: Exit.DECLINED,
    Outcome.CANCELLED: Exit.CANCELLED,
}


def outcome_code(job: JobView) -> Exit:
    """How a job in a final state ended, as ``submit --wait`` exits."""
    outcome = job.outcome
    if outcome is None:
        raise QoschedError(f"job {job.id} is {job.state.value!r}, not in a final state")
    return _OUTCOME_CODES[outcome]


def _outcome_text(job: JobView, code: Exit) -> str:
    if job.finished_at is not None and code is Exit.SUCCEEDED:
        return f"succeeded, {_duration(job.deadline_at - job.finished_at)} before its deadline"
    if job.finished_at is not None and code is Exit.DEADLINE_MISSED:
        return f"succeeded {_duration(job.finished_at - job.deadline_at)} after its deadline"
    error = (job.error or "").strip().splitlines()
    return job.state.value + (f": {error[-1]}" if error else "")


def run_status(args: argparse.Namespace) -> int:
    output = args.output
    if args.watch and output == JSON:
        raise InputError("give --watch or --json (-o json), not both", field="--watch")
    listing = args.all or args.state or args.name is not None or output in (WIDE, NAME)
    if args.job and listing:
        raise InputError(
            "--all, --state, --name and -o wide or name choose and show the list of jobs; "
            "give them without JOB",
            field="JOB",
        )
    client = Client.from_home(resolve_home(args.home))
    selection = JobFilter.of(args.state, args.name, args.all)
    if output == JSON:
        if args.job:
            value: Any = client.job_detail(args.job).to_json()
        else:
            value = [job.to_json() for job in selection.select(client.jobs(), time.time())]
        print(json.dumps(value, indent=2))
        return 0

    def view() -> RenderableType:
        if args.job:
            return job_view(client.job_detail(args.job), time.time())
        jobs, status = client.jobs(), client.status()
        return status_view(jobs, status, time.time(), selection=selection, wide=output == WIDE)

    if output != NAME and _stdout_is_terminal():
        return _show_live(view, args.watch)
    if args.job:
        console = Console()
        return _print_snapshots(lambda: console.print(view()), args.watch)
    return _print_snapshots(lambda: _print_job_lines(client, selection, output), args.watch)


def _stdout_is_terminal() -> bool:
    """Whether a person reads the output (a table fitted to the terminal) rather than a
    program (plain lines, never wrapped)."""
    return sys.stdout.isatty()


def _show_live(view: Callable[[], RenderableType], watch: bool) -> int:
    """On a terminal: ``view`` once, or redrawn in place every second until Ctrl-C."""
    console = Console()
    if not watch:
        console.print(view())
        return 0
    with Live(view(), console=console, auto_refresh=False) as live:
        try:
            while True:
                time.sleep(WATCH_INTERVAL_S)
                live.update(view(), refresh=True)
        except KeyboardInterrupt:
            pass
    return 0


def _print_snapshots(snapshot: Callable[[], None], watch: bool) -> int:
    """Not on a terminal: ``snapshot()`` once, or, watching, again every second after a blank
    line (a pipe cannot be redrawn in place, and a reader of it wants each state whole) until
    Ctrl-C or the reader goes away."""
    try:
        snapshot()
        if not watch:
            return 0
        while True:
            time.sleep(WATCH_INTERVAL_S)
            print(flush=True)
            snapshot()
    except KeyboardInterrupt:
        if not watch:
            raise
    except BrokenPipeError:
        # `qosched status --watch | head`: the reader has what it wanted. Python's own flush at
        # exit would fail on the closed pipe again, so standard output goes nowhere from here.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 0


def _print_job_lines(client: Client, selection: JobFilter, output: str) -> None:
    """One snapshot of the job list for a program: the ids one a line (``-o name``), or a
    header line and one line per job in plain columns; the service's trouble on stderr."""
    jobs, now = client.jobs(), time.time()
    chosen = selection.select(jobs, now)
    if output == NAME:
        lines = [job.id for job in chosen]
    else:
        status = client.status()
        trouble = _trouble_text(status, now)
        if trouble is not None:
            print(f"qosched: warning: {trouble}", file=sys.stderr, flush=True)
        header, rows = job_cells(chosen, status, now, wide=output == WIDE)
        lines = plain_table(header, [[text.plain for text in row] for row in rows])
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    sys.stdout.flush()


def run_logs(args: argparse.Namespace) -> int:
    client = Client.from_home(resolve_home(args.home))
    if args.tail is not None and not args.follow:
        sys.stdout.write(client.logs(args.job, args.tail))  # read from the end, at most 1 MiB
        sys.stdout.flush()
        return 0
    if not args.follow:
        copy_log(client, args.job, sys.stdout.buffer)
        return 0
    with contextlib.suppress(KeyboardInterrupt):  # seen enough: the job goes on
        follow_log(client, args.job, sys.stdout.buffer, tail_lines=args.tail)
    return 0


def copy_log(client: Client, job_id: str, out: BinaryIO) -> None:
    """Write what the job's output holds now to ``out``, a chunk at a time (a log may be
    gigabytes)."""
    offset = 0
    while True:
        chunk = _read_noting_gaps(client, job_id, offset)
        out.write(chunk.data)
        offset = chunk.offset
        # Not "a short chunk": one from the rotated file ends where it ends.
        if chunk.complete or not chunk.data:
            out.flush()
            return


def _read_noting_gaps(client: Client, job_id: str, offset: int) -> LogChunk:
    """The next chunk from ``offset``, saying on standard error when output between was
    rotated away before it could be read."""
    chunk = client.read_log(job_id, offset)
    missed = chunk.offset - len(chunk.data) - offset
    if missed > 0:
        print(
            f"qosched: [{missed} bytes of {job_id}'s output were rotated away (its logLimit)]",
            file=sys.stderr,
            flush=True,
        )
    return chunk


def follow_log(
    client: Client,
    job_id: str,
    out: BinaryIO,
    *,
    tail_lines: int | None = None,
    poll_s: float = FOLLOW_POLL_S,
) -> None:
    """Write the job's output to ``out`` as it grows (only its last ``tail_lines`` lines of what
    is there now, when given) until the service says the job has ended and all is written."""
    offset = 0
    if tail_lines is not None:
        # Read up to the end as it is now, keeping only the last lines, then follow from there.
        kept: deque[bytes] = deque(maxlen=tail_lines)
        partial = b""
        while True:
            chunk = _read_noting_gaps(client, job_id, offset)
            offset = chunk.offset
            lines = (partial + chunk.data).splitlines(keepends=True)
            partial = lines.pop() if lines and not lines[-1].endswith(b"\n") else b""
            # A line without end is kept by its last MiB only, so memory stays bounded.
            partial = partial[-MAX_LOG_CHUNK:]
            kept.extend(line[-MAX_LOG_CHUNK:] for line in lines)
            if chunk.complete or not chunk.data:
                break
        if partial and tail_lines:
            kept.append(partial)
        out.write(b"".join(kept))
        out.flush()
        if chunk.complete:
            return
    while True:
        chunk = _read_noting_gaps(client, job_id, offset)
        if chunk.data:
            out.write(chunk.data)
            out.flush()
        offset = chunk.offset
        if chunk.complete:
            return
        if len(chunk.data) < MAX_LOG_CHUNK:  # caught up: wait for more
            time.sleep(poll_s)


def run_cancel(args: argparse.Namespace) -> int:
    selecting = args.all or args.state or args.name is not None
    if args.jobs and selecting:
        raise InputError("give job ids or --all, --state and --name, not both", field="JOB")
    if not args.jobs and not selecting:
        raise InputError(
            "name the jobs to cancel: job ids, --name PATTERN, --state STATE, or --all",
            field="JOB",
        )
    client = Client.from_home(resolve_home(args.home))
    if args.jobs:
        chosen, named = list(args.jobs), True
    else:
        # Only jobs not yet ended: --state takes no final state, and --all means these.
        selection = JobFilter.of(args.state or ACTIVE_STATES, args.name)
        chosen, named = [job.id for job in selection.select(client.jobs(), time.time())], False
        if not chosen:
            print(
                f"qosched: no job to cancel: none has {selection.describe()}",
                file=sys.stderr,
                flush=True,
            )
            if args.json:
                _print_jobs_json([])
            return Exit.SUCCEEDED
    failed = False
    cancelled: list[JobView] = []
    for job_id in chosen:
        try:
            job = client.cancel(job_id)
        except (InputError, UnknownJobError) as exc:  # this job's trouble: the others still go
            if not named and _ended_meanwhile(client, job_id):
                continue  # it ended between the listing and its cancel: nothing left to do
            print(f"qosched: error: {exc}", file=sys.stderr, flush=True)
            failed = True
            continue
        cancelled.append(job)
        if args.json:
            continue
        if job.state is Lifecycle.CANCELLED:
            print(f"{job.id} cancelled", flush=True)
        else:
            print(f"{job.id} is being cancelled (its runner is stopping)", flush=True)
    if args.json:
        _print_jobs_json(cancelled)
    return Exit.ERROR if failed else Exit.SUCCEEDED


def _ended_meanwhile(client: Client, job_id: str) -> bool:
    """Whether a job that refused its cancel has ended (and says so on standard error)."""
    try:
        job = client.job(job_id)
    except UnknownJobError:
        return False
    if not job.finished:
        return False
    print(
        f"qosched: {job_id} ended ({job.state.value}) before it could be cancelled", file=sys.stderr
    )
    return True


# --- the status view -----------------------------------------------------------------------------

_STATE_STYLES = {
    "queued": "yellow",
    "profiling": "blue",
    "running": "cyan",
    "preempted": "magenta",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "dim",
    "declined": "red",
}


def status_view(
    jobs: Sequence[JobView],
    status: ServiceStatus,
    now: float,
    *,
    selection: JobFilter | None = None,
    wide: bool = False,
) -> RenderableType:
    """The ``qosched status`` screen: a one-line summary and a table of the ``jobs`` that
    ``selection`` chooses (all without one), saying how many it leaves out."""
    allocated = sum(len(cpus) for cpus in status.allocated.values())
    outcomes = ", ".join(f"{name} {count}" for name, count in status.outcomes.items() if count)
    gpus = ""
    if status.gpus:
        held = sum(len(gpus) for gpus in status.allocated_gpus.values())
        gpus = f" · {len(status.gpus)} GPUs, {held} allocated"
    summary: RenderableType = Text(
        f"{len(status.cpus)} CPUs, {allocated} allocated{gpus} · {status.running} running · "
        f"{status.queued} waiting" + (f" · finished: {outcomes}" if outcomes else "")
    )
    trouble = _trouble_text(status, now)
    if trouble is not None:
        summary = Group(Text(trouble, style="bold red"), summary)
    if not jobs:
        return Group(summary, Text("no jobs yet; submit one with `qosched submit JOB.yaml`"))
    shown = list(jobs) if selection is None else selection.select(jobs, now)
    parts = [summary]
    if shown:
        header, rows = job_cells(shown, status, now, wide=wide)
        table = Table(box=None, pad_edge=False, header_style="bold")
        for name in header:
            table.add_column(name, **_COLUMN_STYLES[name])
        for row in rows:
            table.add_row(*row)
        parts.append(table)
    hidden = len(jobs) - len(shown)
    if hidden and selection is not None:
        parts.append(
            Text(
                f"{hidden} of {len(jobs)} jobs not shown: only those with "
                f"{selection.describe()} are (--all shows every job)",
                style="dim",
            )
        )
    return Group(*parts)


def _trouble_text(status: ServiceStatus, now: float) -> str | None:
    if status.trouble is None:
        return None
    since = "" if status.trouble_since is None else f" for {_duration(now - status.trouble_since)}"
    return (
        f"the service is in trouble{since}: {status.trouble}; states below may be behind what "
        "its jobs did"
    )


#: How the terminal's table lays out each column ``job_cells`` may give (rich's options).
_COLUMN_STYLES: Mapping[str, dict[str, Any]] = {
    "ID": {"no_wrap": True},
    "NAME": {"overflow": "fold", "min_width": 8},
    "STATE": {"no_wrap": True},
    "CPUS": {"justify": "right", "no_wrap": True},
    "GPUS": {"justify": "right", "no_wrap": True},
    "CPU-IDS": {"overflow": "fold"},
    "GPU-IDS": {"overflow": "fold"},
    "PROGRESS": {"justify": "right", "no_wrap": True},
    "DEADLINE": {"no_wrap": True},
    "FINISH": {"overflow": "fold", "min_width": 10},  # predicted while unfinished
    "QOS": {"overflow": "fold", "min_width": 12},
}


def job_cells(
    jobs: Sequence[JobView], status: ServiceStatus, now: float, *, wide: bool = False
) -> tuple[list[str], list[list[Text]]]:
    """The header and one row of cells per job, for the terminal's table and for plain
    lines alike. The columns without spaces come first, so that ``awk '{print $3}'`` is a
    job's state. CPUS and GPUS count what a job holds; ``wide`` adds their ids."""
    show_gpus = bool(status.gpus) or any(job.gpus for job in jobs)
    header = ["ID", "NAME", "STATE", "CPUS", *(["GPUS"] if show_gpus else [])]
    if wide:
        header += ["CPU-IDS", *(["GPU-IDS"] if show_gpus else [])]
    header += ["PROGRESS", "DEADLINE", "FINISH", "QOS"]
    rows = []
    for job in jobs:
        state = job.state.value
        row = [
            Text(job.id),
            Text(job.name),
            Text(state, style=_STATE_STYLES.get(state, "")),
            Text(str(len(job.cpus))),
            *([Text(str(len(job.gpus)))] if show_gpus else []),
        ]
        if wide:
            row += [
                Text(cpu_ranges(job.cpus)),
                *([Text(cpu_ranges(job.gpus))] if show_gpus else []),
            ]
        row += [Text(_progress(job)), _deadline(job, now), Text(_predicted(job, now)), _qos(job)]
        rows.append(row)
    return header, rows


def job_view(detail: JobDetail, now: float) -> RenderableType:
    """The ``qosched status JOB`` screen: one job's facts, allocation history and events."""
    job = detail.job
    state = job.state.value
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold", no_wrap=True)
    facts.add_column(overflow="fold")
    facts.add_row("job", f"{job.id} ({job.name})")
    facts.add_row("state", Text(state, style=_STATE_STYLES.get(state, "")))
    facts.add_row("progress", _progress(job))
    facts.add_row("cpus", cpu_ranges(job.cpus))
    if job.gpus:
        facts.add_row("gpus", cpu_ranges(job.gpus))
    facts.add_row(
        "submitted", f"{_clock(job.submitted_at, now)} ({_relative(job.submitted_at, now)})"
    )
    facts.add_row("deadline", Text(_clock(job.deadline_at, now) + " (") + _deadline(job, now) + ")")
    facts.add_row("finish", _predicted(job, now))
    if job.speed_source is not None:
        facts.add_row("speed", f"{job.speed_source} (what the prediction rests on)")
    slack = detail.slack_s
    if slack is not None:
        words = f"{_duration(slack)} to spare" if slack >= 0 else f"{_duration(slack)} late"
        if job.finished_at is None:
            words += " (predicted)"
        facts.add_row("slack", Text(words, style="" if slack >= 0 else "red"))
    facts.add_row("qos", _qos(job))
    facts.add_row("attempts", str(job.attempts))
    if job.error:
        facts.add_row("error", Text(job.error, style="red"))
    parts: list[RenderableType] = [facts]
    history = detail.allocations
    if history:
        table = Table(
            title="allocations", title_justify="left", box=None, pad_edge=False, header_style="bold"
        )
        with_gpus = any(held.gpus for held in history)
        for header in ("FROM", "UNTIL", "HELD", "CPUS", "GPUS")[: 5 if with_gpus else 4]:
            table.add_column(header, no_wrap=True)
        for held in history:
            until = held.until
            table.add_row(
                _clock(held.start, now),
                "now" if until is None else _clock(until, now),
                _duration((now if until is None else until) - held.start),
                cpu_ranges(held.cpus),
                *([cpu_ranges(held.gpus)] if with_gpus else []),
            )
        parts.append(table)
    events = detail.events
    if events:
        table = Table(
            title="events", title_justify="left", box=None, pad_edge=False, header_style="bold"
        )
        table.add_column("AT", no_wrap=True)
        table.add_column("EVENT", no_wrap=True)
        table.add_column("DETAIL", overflow="fold")
        for event in events:
            table.add_row(_clock(event.t, now), event.kind, event_text(event.kind, event.detail))
        parts.append(table)
    return Group(*parts)


def event_text(kind: str, detail: Mapping[str, Any]) -> str:
    """One audit-log entry (``qosched.backends.local.store.JobEvent``) in words, with why the
    service decided it (its ``why``, shown as it is) where the event says; a kind without
    words of its own lists its fields."""
    words = _EVENT_WORDS.get(kind)
    if words is None:
        return ", ".join(f"{key} {value}" for key, value in sorted(detail.items()))
    return words(detail)


def _with_why(text: str, said: Any) -> str:
    return text + (f": {said}" if said else "")


def _state_words(detail: Mapping[str, Any]) -> str:
    text = f"{detail.get('from')} -> {detail.get('to')}"
    if detail.get("cpus"):
        text += f" on cores {cpu_ranges(detail['cpus'])}"
    return _with_why(text, detail.get("why") or detail.get("error"))


def _gpus_words(detail: Mapping[str, Any]) -> str:
    if "held" in detail:
        return f"holds GPUs {cpu_ranges(detail['held'])}"
    return f"gave back GPUs {cpu_ranges(detail.get('released') or [])}"


def _allocation_words(detail: Mapping[str, Any]) -> str:
    old, new = detail.get("from") or [], detail.get("to") or []
    if not old:
        return f"holds cores {cpu_ranges(new)}"
    if not new:
        return f"gave back cores {cpu_ranges(old)}"
    text = f"re-sized from cores {cpu_ranges(old)} to {cpu_ranges(new)}"
    return _with_why(text, detail.get("why"))


def _launched_words(detail: Mapping[str, Any]) -> str:
    cores = cpu_ranges(detail.get("cpus") or [])
    pid, attempt = detail.get("pid"), detail.get("attempt")
    text = f"runner started (pid {pid}, attempt {attempt}) on cores {cores}"
    return _with_why(text, detail.get("why"))


def _admitted_words(detail: Mapping[str, Any]) -> str:
    why = detail.get("why")
    if why:
        return str(why) + _measured(detail)
    promise = (  # an event recorded before admissions said why
        "deadline guaranteed" if detail.get("guaranteed") else "not guaranteed (best effort)"
    )
    return f"by {detail.get('policy')}: {promise}" + _measured(detail)


def _profiling_words(detail: Mapping[str, Any]) -> str:
    why = detail.get("why")
    if "measured for at most" in str(why):
        return str(why)
    return f"{why}: measured first (at most {detail.get('bound_s')} s)"


def _stalled_words(detail: Mapping[str, Any]) -> str:
    quiet = format_duration(int(detail.get("seconds") or 0))
    return f"no progress reported for {quiet} (at iteration {detail.get('iteration')}): hung?"


def _speed_words(detail: Mapping[str, Any]) -> str:
    shown = _speeds(detail.get("rates"))
    return f"speed remembered from {detail.get('remembered_from')}: {shown}"


#: Each event kind's words, from its ``detail``.
_EVENT_WORDS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "state": _state_words,
    "gpus": _gpus_words,
    "allocation": _allocation_words,
    "launched": _launched_words,
    "admitted": _admitted_words,
    "promise": lambda detail: f"{detail.get('promise')}: {detail.get('why')}",
    "profiling": _profiling_words,
    "declining": lambda detail: f"{detail.get('why')}" + _measured(detail),
    "stopped": lambda detail: str(detail.get("why", "")),
    "stalled": _stalled_words,
    "re-adopted": lambda detail: (
        f"runner (pid {detail.get('pid')}) re-adopted by a restarted service"
    ),
    "submitted": lambda detail: "",
    "speed": _speed_words,
}


def _measured(detail: Mapping[str, Any]) -> str:
    """``"; measured 12.3 it/s on 1, ..."`` from an event's ``measured`` speeds, if any."""
    shown = _speeds(detail.get("measured"))
    return f"; measured {shown}" if shown else ""


def _speeds(rates: Any) -> str:
    """``{"1": 12.3, "2": 20}`` (worker count -> iterations/s) as ``12.3 it/s on 1, ...``."""
    if not isinstance(rates, Mapping):
        return ""
    ordered = sorted(rates.items(), key=lambda item: (len(str(item[0])), str(item[0])))
    return ", ".join(f"{float(rate):.3g} it/s on {workers}" for workers, rate in ordered)


def _clock(at: float, now: float) -> str:
    """Local time of day, with the date when it is not today's."""
    moment = datetime.fromtimestamp(at)
    same_day = moment.date() == datetime.fromtimestamp(now).date()
    return moment.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S")


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


def _progress(job: JobView) -> str:
    total = job.iterations or 0
    done = job.iterations_done
    percent = 100.0 * done / total if total else 0.0
    return f"{percent:.0f}% {done}/{total}"


def _deadline(job: JobView, now: float) -> Text:
    deadline = job.deadline_at
    if job.finished_at is None and deadline < now:
        return Text(f"{_duration(now - deadline)} late", style="red")
    return Text(_relative(deadline, now))


def _predicted(job: JobView, now: float) -> str:
    if job.finished_at is not None:
        return _relative(job.finished_at, now)
    predicted = job.predicted_finish_at
    if predicted is None:
        return "-"
    text = _relative(predicted, now)
    band = job.predicted_finish_band
    if band:
        low, high = band
        text += f" ({_duration(low - now)}–{_duration(high - now)})"
    return text


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _qos(job: JobView) -> Text:
    """Met or missed for a finished job; for an unfinished one what the prediction says."""
    label, style = _qos_label(job)
    notes = []
    if job.guaranteed and job.finished_at is None:
        notes.append("guaranteed")
    elif job.best_effort and not job.guaranteed:  # a guaranteed job is not run best effort,
        notes.append("best effort")  # whatever its spec would allow
    if notes:
        label = f"{label} ({', '.join(notes)})" if label else ", ".join(notes)
    return Text(label, style=style)


def _qos_label(job: JobView) -> tuple[str, str]:
    state = job.state
    deadline = job.deadline_at
    if state is Lifecycle.SUCCEEDED and job.finished_at is not None:
        late = job.finished_at - deadline
        return ("✓ met", "green") if late <= 0 else (f"✗ missed by {_duration(late)}", "red")
    if state in (Lifecycle.FAILED, Lifecycle.DECLINED):
        error = (job.error or "").strip().splitlines()
        return f"✗ {state.value}" + (f": {_shorten(error[-1], 60)}" if error else ""), "red"
    if state is Lifecycle.CANCELLED:
        return "-", "dim"
    if state is Lifecycle.PROFILING:
        return "measuring its speed", "dim"
    predicted = job.predicted_finish_at
    if predicted is None:
        return "", ""
    band = job.predicted_finish_band
    high = band[1] if band else predicted
    if predicted > deadline:
        return "will miss", "red"
    if high > deadline:
        return "at risk", "yellow"
    return "on track", "green"
